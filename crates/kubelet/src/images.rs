//! Image manager (in progress).
