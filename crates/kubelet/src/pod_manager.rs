//! pod_manager (in progress).
