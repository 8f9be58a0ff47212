//! kuberuntime::actions (in progress).
