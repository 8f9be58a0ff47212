//! kuberuntime::labels (in progress).
