//! Pod status cache (in progress).
