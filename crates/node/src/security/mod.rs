//! security: node-side security checks that upstream keeps outside kuberuntime — the sysctl
//! allowlist (`SysctlForbidden`), AppArmor profile resolution and its admission rule,
//! capability-name normalisation and the `supplementalGroupsPolicy: Strict` admission rule.
//! Receives pods (and host facts probed once at start-up); emits admission rejections and CRI
//! security profiles. The CRI security contexts themselves are built in
//! `kuberuntime::{container_config, sandbox_config}`; `kuberuntime::security_tests` checks them field by field.

pub mod apparmor;
pub mod capabilities;
pub mod groups;
pub mod sysctl;
