//! security: node-side checks of a pod's security settings that upstream does outside
//! kuberuntime — the sysctl allowlist (`SysctlForbidden` admission), AppArmor profile
//! resolution and its admission check, capability-name normalisation and user-namespace
//! support. Receives pods (and node facts read once at start-up); emits admission rejections
//! and CRI security profiles. Pure apart from the documented start-up probes of the host.

pub mod apparmor;
pub mod capabilities;
pub mod sysctl;
