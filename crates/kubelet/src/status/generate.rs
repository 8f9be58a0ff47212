//! status::generate (in progress).
