//! kuberuntime::container_config (in progress).
