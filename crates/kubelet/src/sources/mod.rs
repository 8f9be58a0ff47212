//! Pod sources.
