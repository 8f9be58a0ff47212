//! security::apparmor: a container's AppArmor profile (upstream `pkg/security/apparmor` and
//! kuberuntime `getAppArmorProfile`): the container field, then the legacy
//! `container.apparmor.security.beta.kubernetes.io/<name>` annotation, then the pod field; its
//! CRI form (the `apparmor` profile plus the deprecated `apparmor_profile` string); and the
//! `AppArmor` admission rule that refuses pods needing AppArmor on a host without it. Receives
//! pods; emits CRI profiles and rejections. Pure apart from `host_support` (reads `/sys` once).

use k8s_cri::v1::{SecurityProfile, security_profile::ProfileType};
use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use crate::admit::{AdmitHandler, Rejection};

/// Prefix of the legacy per-container annotation.
pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
const LEGACY_RUNTIME_DEFAULT: &str = "runtime/default";
const LEGACY_UNCONFINED: &str = "unconfined";
const LEGACY_LOCALHOST_PREFIX: &str = "localhost/";
/// Admission reason for pods this node cannot confine.
pub const NOT_ADMITTED_REASON: &str = "AppArmor";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppArmorError {
    #[error("missing localhost apparmor profile name")]
    MissingLocalhostProfile,
    #[error("unknown apparmor profile type: {0:?}")]
    UnknownType(String),
}

fn from_annotation(pod: &Pod, container: &str) -> Option<AppArmorProfile> {
    let key = format!("{ANNOTATION_PREFIX}{container}");
    let value = pod.metadata.annotations.as_ref()?.get(&key)?;
    let profile = |t: &str, localhost: Option<String>| AppArmorProfile {
        type_: t.to_owned(),
        localhost_profile: localhost,
    };
    match value.as_str() {
        LEGACY_RUNTIME_DEFAULT => Some(profile("RuntimeDefault", None)),
        LEGACY_UNCONFINED => Some(profile("Unconfined", None)),
        v => v
            .strip_prefix(LEGACY_LOCALHOST_PREFIX)
            .map(|name| profile("Localhost", Some(name.to_owned()))),
    }
}

/// The profile that applies to `container` (upstream `apparmor.GetProfile`), if any.
pub fn profile_for(pod: &Pod, container: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = container
        .security_context
        .as_ref()
        .and_then(|sc| sc.app_armor_profile.clone())
    {
        return Some(p);
    }
    // Static pods may carry only the annotation; it wins over the pod-level field.
    if let Some(p) = from_annotation(pod, &container.name) {
        return Some(p);
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.app_armor_profile.clone())
}

/// The CRI `apparmor` profile and the deprecated `apparmor_profile` string for `container`
/// (upstream `getAppArmorProfile`).
pub fn runtime_profile(
    pod: &Pod,
    container: &Container,
) -> Result<(Option<SecurityProfile>, String), AppArmorError> {
    let Some(profile) = profile_for(pod, container) else {
        return Ok((None, String::new()));
    };
    let sp = |t: ProfileType, localhost_ref: String| SecurityProfile {
        profile_type: t as i32,
        localhost_ref,
    };
    Ok(match profile.type_.as_str() {
        "RuntimeDefault" => (
            Some(sp(ProfileType::RuntimeDefault, String::new())),
            LEGACY_RUNTIME_DEFAULT.to_owned(),
        ),
        "Unconfined" => (
            Some(sp(ProfileType::Unconfined, String::new())),
            LEGACY_UNCONFINED.to_owned(),
        ),
        "Localhost" => {
            let name = profile
                .localhost_profile
                .ok_or(AppArmorError::MissingLocalhostProfile)?;
            (
                Some(sp(ProfileType::Localhost, name.clone())),
                format!("{LEGACY_LOCALHOST_PREFIX}{name}"),
            )
        }
        other => return Err(AppArmorError::UnknownType(other.to_owned())),
    })
}

fn all_containers(pod: &Pod) -> Vec<Container> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut out: Vec<Container> = spec.init_containers.iter().flatten().cloned().collect();
    out.extend(spec.containers.iter().cloned());
    // Ephemeral containers carry the same fields; only name and securityContext matter here.
    out.extend(
        spec.ephemeral_containers
            .iter()
            .flatten()
            .map(|e| Container {
                name: e.name.clone(),
                security_context: e.security_context.clone(),
                ..Default::default()
            }),
    );
    out
}

/// Upstream `isRequired`: some profile other than Unconfined is asked for.
fn is_required(pod: &Pod) -> bool {
    let confining = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let pod_level = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.app_armor_profile.as_ref());
    if confining(pod_level) {
        return true;
    }
    if all_containers(pod).iter().any(|c| {
        confining(
            c.security_context
                .as_ref()
                .and_then(|sc| sc.app_armor_profile.as_ref()),
        )
    }) {
        return true;
    }
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && v != LEGACY_UNCONFINED)
}

/// Whether this host can enforce AppArmor: `Err` says why not (upstream `validateHost`).
pub fn host_support() -> Result<(), String> {
    let enabled = std::path::Path::new("/sys/kernel/security/apparmor").exists()
        && std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|s| s.starts_with('Y'));
    if enabled {
        Ok(())
    } else {
        Err("AppArmor is not enabled on the host".to_owned())
    }
}

/// The `AppArmor` admission rule (upstream `appArmorAdmitHandler` + `validator`).
#[derive(Debug, Clone)]
pub struct AppArmorAdmit {
    host: Result<(), String>,
}

impl AppArmorAdmit {
    /// With the host's support decided by the caller (tests) or `host_support()`.
    pub fn new(host: Result<(), String>) -> Self {
        Self { host }
    }

    /// Probes the running host once.
    pub fn detect() -> Self {
        Self::new(host_support())
    }

    fn validate(&self, pod: &Pod) -> Result<(), String> {
        if !is_required(pod) {
            return Ok(());
        }
        self.host.clone()?;
        for c in all_containers(pod) {
            if let Some(p) = profile_for(pod, &c) {
                let empty = p
                    .localhost_profile
                    .as_deref()
                    .is_none_or(|n| n.trim().is_empty());
                if p.type_ == "Localhost" && empty {
                    return Err(format!(
                        "invalid empty AppArmor profile name: container {:?} has a Localhost profile without localhostProfile",
                        c.name
                    ));
                }
            }
        }
        Ok(())
    }
}

impl AdmitHandler for AppArmorAdmit {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase.is_some_and(|p| p != "Pending") {
            return Ok(());
        }
        self.validate(pod).map_err(|e| Rejection {
            reason: NOT_ADMITTED_REASON.to_owned(),
            message: format!("Cannot enforce AppArmor: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": annotations},
            "spec": spec,
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    #[test]
    fn profile_resolution_and_cri_form() {
        type Want = Result<(Option<(ProfileType, &'static str)>, &'static str), &'static str>;
        #[rustfmt::skip]
        let cases: Vec<(&str, serde_json::Value, serde_json::Value, serde_json::Value, Want)> = vec![
            ("none", json!({}), json!(null), json!(null), Ok((None, ""))),
            ("pod RuntimeDefault", json!({}), json!({"type": "RuntimeDefault"}), json!(null),
             Ok((Some((ProfileType::RuntimeDefault, "")), "runtime/default"))),
            ("container overrides pod", json!({}), json!({"type": "RuntimeDefault"}), json!({"type": "Unconfined"}),
             Ok((Some((ProfileType::Unconfined, "")), "unconfined"))),
            ("localhost", json!({}), json!(null), json!({"type": "Localhost", "localhostProfile": "k8s-deny"}),
             Ok((Some((ProfileType::Localhost, "k8s-deny")), "localhost/k8s-deny"))),
            ("annotation beats pod field", json!({"container.apparmor.security.beta.kubernetes.io/c": "localhost/x"}),
             json!({"type": "RuntimeDefault"}), json!(null),
             Ok((Some((ProfileType::Localhost, "x")), "localhost/x"))),
            ("container field beats annotation", json!({"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}),
             json!(null), json!({"type": "RuntimeDefault"}),
             Ok((Some((ProfileType::RuntimeDefault, "")), "runtime/default"))),
            ("annotation for another container", json!({"container.apparmor.security.beta.kubernetes.io/d": "unconfined"}),
             json!(null), json!(null), Ok((None, ""))),
            ("invalid annotation ignored", json!({"container.apparmor.security.beta.kubernetes.io/c": "bogus"}),
             json!(null), json!(null), Ok((None, ""))),
            ("localhost without name", json!({}), json!(null), json!({"type": "Localhost"}),
             Err("missing localhost apparmor profile name")),
        ];
        for (name, annotations, pod_profile, container_profile, want) in cases {
            let p = pod(
                annotations,
                json!({"securityContext": {"appArmorProfile": pod_profile},
                       "containers": [{"name": "c", "securityContext": {"appArmorProfile": container_profile}}]}),
            );
            let c = p.spec.as_ref().unwrap().containers[0].clone();
            let got = runtime_profile(&p, &c);
            match want {
                Ok((profile, legacy)) => {
                    let (sp, got_legacy) = got.unwrap();
                    assert_eq!(
                        sp.map(|s| (s.profile_type, s.localhost_ref)),
                        profile.map(|(t, r)| (t as i32, r.to_owned())),
                        "{name}"
                    );
                    assert_eq!(got_legacy, legacy, "{name}");
                }
                Err(msg) => assert_eq!(got.unwrap_err().to_string(), msg, "{name}"),
            }
        }
    }

    #[test]
    fn admission_on_a_host_without_apparmor() {
        let off = AppArmorAdmit::new(Err("AppArmor is not enabled on the host".to_owned()));
        let on = AppArmorAdmit::new(Ok(()));
        let confined = pod(
            json!({}),
            json!({"containers": [{"name": "c", "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}]}),
        );
        let r = off.admit(&confined, &[]).unwrap_err();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            (
                "AppArmor",
                "Cannot enforce AppArmor: AppArmor is not enabled on the host"
            )
        );
        assert!(on.admit(&confined, &[]).is_ok());

        // Unconfined (field or annotation) needs nothing from the host.
        let unconfined = pod(
            json!({"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}),
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": [{"name": "c"}]}),
        );
        assert!(off.admit(&unconfined, &[]).is_ok());
        let annotated = pod(
            json!({"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}),
            json!({"containers": [{"name": "c"}]}),
        );
        assert!(off.admit(&annotated, &[]).is_err());

        // Already running pods are not re-checked.
        let mut running = confined.clone();
        running.status.as_mut().unwrap().phase = Some("Running".to_owned());
        assert!(off.admit(&running, &[]).is_ok());

        // An empty localhost name is refused even where AppArmor works.
        let empty = pod(
            json!({"container.apparmor.security.beta.kubernetes.io/c": "localhost/"}),
            json!({"containers": [{"name": "c"}]}),
        );
        let r = on.admit(&empty, &[]).unwrap_err();
        assert!(
            r.message
                .starts_with("Cannot enforce AppArmor: invalid empty AppArmor profile name"),
            "{}",
            r.message
        );
    }
}
