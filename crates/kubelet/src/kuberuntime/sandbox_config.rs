//! kuberuntime::sandbox_config (in progress).
