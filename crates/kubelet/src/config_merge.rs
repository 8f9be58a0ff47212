//! config_merge (in progress).
