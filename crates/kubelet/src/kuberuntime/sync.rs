//! kuberuntime::sync (in progress).
