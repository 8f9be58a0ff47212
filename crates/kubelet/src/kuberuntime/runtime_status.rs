//! kuberuntime::runtime_status (in progress).
