//! pod_workers (in progress).
