//! kuberuntime::hash (in progress).
