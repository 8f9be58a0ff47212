//! status::manager (in progress).
