//! status::qos (in progress).
