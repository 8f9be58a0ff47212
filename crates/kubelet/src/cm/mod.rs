//! Container manager (upstream `pkg/kubelet/cm`): owns the node-level resource managers.
pub mod cpumanager;
