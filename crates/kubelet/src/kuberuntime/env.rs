//! kuberuntime::env (in progress).
