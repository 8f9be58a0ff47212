//! rkubelet's operator views under `/debug/rkubelet/` (read by `rkubelet get`/`describe` over
//! the local socket; on the HTTPS port authorized as upstream's debug paths, `nodes/proxy`,
//! and served only with `enableDebuggingHandlers`). Owns nothing; receives the event ring, the
//! pod workers, the desired pods and statuses, and the node's inputs (settings, host facts,
//! pressure, PLEG health, the CRI runtime, certificate files); emits JSON.

use std::path::PathBuf;
use std::sync::Arc;

use http::StatusCode;
use rkubelet_cri::{RuntimeService, api};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::path::OperatorView;
use super::{HealthCheck, Resp, ServerState, json, not_found};
use crate::events_ring::{EventRing, RingEvent};
use crate::host::HostInfo;
use crate::nodestatus::NodeStatusSettings;
use crate::nodestatus::setters::{NodePressure, StatusInputs};
use crate::pod_workers::{PodWorkers, WorkerReport};
use crate::types::PodExt;

/// What the operator views read.
#[derive(Clone)]
pub struct OperatorState {
    pub events: EventRing,
    pub workers: PodWorkers,
    pub node: Arc<NodeView>,
}

/// The inputs of `/debug/rkubelet/node`: the Node as this kubelet computes it, built afresh
/// per request (standalone kubelets have no Node object elsewhere).
pub struct NodeView {
    pub settings: NodeStatusSettings,
    pub host: Arc<HostInfo>,
    pub pressure: watch::Receiver<NodePressure>,
    pub pleg: HealthCheck,
    pub runtime: Arc<dyn RuntimeService>,
    /// Certificates whose expiry is shown: (what, file).
    pub certificates: Vec<(String, PathBuf)>,
}

/// A CRI runtime condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeCondition {
    #[serde(rename = "type")]
    pub condition_type: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// The runtime as the kubelet sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeReport {
    pub name: String,
    /// `None`: the Version call failed.
    pub version: Option<String>,
    pub conditions: Vec<RuntimeCondition>,
    /// The Status call's error, if it failed.
    pub error: Option<String>,
}

/// PLEG health (`/healthz/pleg`), with the reason when unhealthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlegReport {
    pub healthy: bool,
    pub message: Option<String>,
}

/// A certificate file and its expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateReport {
    pub name: String,
    pub path: String,
    /// RFC 3339; `None` with `error`.
    pub not_after: Option<String>,
    pub error: Option<String>,
}

/// The body of `/debug/rkubelet/node`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: k8s_openapi::api::core::v1::Node,
    pub runtime: RuntimeReport,
    pub pleg: PlegReport,
    pub certificates: Vec<CertificateReport>,
}

/// The body of `/debug/rkubelet/pods/{ns}/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub pod: k8s_openapi::api::core::v1::Pod,
    /// `None` when no worker runs for the pod (not admitted, or forgotten).
    pub worker: Option<WorkerReport>,
    pub events: Vec<RingEvent>,
}

/// The body of `/debug/rkubelet/events`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventReport {
    pub items: Vec<RingEvent>,
}

/// Serves one operator view (404 when the kubelet runs without them).
pub async fn serve(state: &ServerState, view: &OperatorView) -> Resp {
    let Some(op) = &state.operator else {
        return not_found();
    };
    let body = match view {
        OperatorView::Events => serde_json::to_value(EventReport {
            items: op.events.all(),
        }),
        OperatorView::Pod { namespace, name } => {
            let pod = state
                .pods
                .borrow()
                .iter()
                .find(|p| p.namespace() == namespace && p.name() == name)
                .map(|p| (**p).clone());
            let Some(mut pod) = pod else {
                return super::text(
                    StatusCode::NOT_FOUND,
                    format!("pod {namespace}/{name} not found\n"),
                );
            };
            if let Some(s) = state.status.get_pod_status(pod.uid()) {
                pod.status = Some(s);
            }
            serde_json::to_value(PodReport {
                worker: op.workers.report(pod.uid()),
                events: op.events.for_pod(namespace, name),
                pod,
            })
        }
        OperatorView::Node => serde_json::to_value(op.node.report().await),
    };
    match body {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => super::text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding response: {e}\n"),
        ),
    }
}

impl NodeView {
    /// The Node (capacity, allocatable, conditions incl. pressure and readiness) with the
    /// runtime's status and version, PLEG health and certificate expiries.
    pub async fn report(&self) -> NodeReport {
        let (conditions, error) = match self
            .runtime
            .status(api::StatusRequest { verbose: false })
            .await
        {
            Ok(resp) => (
                resp.status
                    .map(|s| {
                        s.conditions
                            .into_iter()
                            .map(|c| RuntimeCondition {
                                condition_type: c.r#type,
                                status: c.status,
                                reason: c.reason,
                                message: c.message,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let version = self.runtime.version(api::VersionRequest::default()).await;
        let runtime = RuntimeReport {
            name: version
                .as_ref()
                .map(|v| v.runtime_name.clone())
                .unwrap_or_default(),
            version: version.ok().map(|v| v.runtime_version),
            conditions,
            error,
        };
        let pleg_check = (self.pleg)();
        let pleg = PlegReport {
            healthy: pleg_check.is_ok(),
            message: pleg_check.err(),
        };
        let inputs = StatusInputs {
            runtime_name: runtime.name.clone(),
            runtime_version: runtime.version.clone(),
            not_ready: not_ready(&runtime, &pleg),
            pressure: *self.pressure.borrow(),
            ..StatusInputs::default()
        };
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let node =
            crate::nodestatus::register::initial_node(&self.settings, &self.host, &inputs, &now);
        NodeReport {
            node,
            runtime,
            pleg,
            certificates: self
                .certificates
                .iter()
                .filter_map(|(name, path)| certificate(name, path))
                .collect(),
        }
    }
}

/// Why the node is not ready, in upstream's words and order: the runtime, then PLEG.
fn not_ready(runtime: &RuntimeReport, pleg: &PlegReport) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = &runtime.error {
        out.push(format!(
            "container runtime status check may not have completed yet: {e}"
        ));
    }
    let cond = |t: &str| runtime.conditions.iter().find(|c| c.condition_type == t);
    match cond("RuntimeReady") {
        Some(c) if c.status => {}
        Some(c) => out.push(format!(
            "container runtime not ready: RuntimeReady=false reason:{} message:{}",
            c.reason, c.message
        )),
        None if runtime.error.is_none() => {
            out.push("container runtime not ready: RuntimeReady condition missing".to_owned())
        }
        None => {}
    }
    if let Some(c) = cond("NetworkReady").filter(|c| !c.status) {
        out.push(format!(
            "container runtime network not ready: NetworkReady=false reason:{} message:{}",
            c.reason, c.message
        ));
    }
    if let Some(m) = &pleg.message {
        out.push(format!("PLEG is not healthy: {m}"));
    }
    out
}

/// The expiry of the first certificate in `path`; `None` when the file does not exist.
fn certificate(name: &str, path: &std::path::Path) -> Option<CertificateReport> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            return Some(CertificateReport {
                name: name.to_owned(),
                path: path.display().to_string(),
                not_after: None,
                error: Some(e.to_string()),
            });
        }
    };
    let parsed = x509_parser::pem::Pem::iter_from_buffer(&bytes)
        .find_map(|p| p.ok().filter(|p| p.label == "CERTIFICATE"))
        .ok_or_else(|| "no CERTIFICATE block".to_owned())
        .and_then(|pem| {
            pem.parse_x509()
                .map(|c| c.validity().not_after.timestamp())
                .map_err(|e| e.to_string())
        })
        .and_then(|secs| {
            chrono::DateTime::from_timestamp(secs, 0)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .ok_or_else(|| format!("notAfter {secs} out of range"))
        });
    Some(CertificateReport {
        name: name.to_owned(),
        path: path.display().to_string(),
        not_after: parsed.as_ref().ok().cloned(),
        error: parsed.err(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_ready_reasons_follow_the_runtime_and_pleg() {
        let ready = RuntimeCondition {
            condition_type: "RuntimeReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        let net_down = RuntimeCondition {
            condition_type: "NetworkReady".into(),
            status: false,
            reason: "NetworkPluginNotReady".into(),
            message: "cni plugin not initialized".into(),
        };
        let healthy = PlegReport {
            healthy: true,
            message: None,
        };
        let rt = |conditions: Vec<RuntimeCondition>| RuntimeReport {
            name: "containerd".into(),
            version: Some("1.6".into()),
            conditions,
            error: None,
        };
        assert!(not_ready(&rt(vec![ready.clone()]), &healthy).is_empty());
        assert_eq!(
            not_ready(
                &rt(vec![ready, net_down]),
                &PlegReport {
                    healthy: false,
                    message: Some("pleg was last seen active 3m0s ago".into())
                }
            ),
            [
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized",
                "PLEG is not healthy: pleg was last seen active 3m0s ago"
            ]
        );
    }

    #[test]
    fn certificate_expiry_is_read_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n1".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2031, 5, 6);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let path = dir.path().join("kubelet.crt");
        std::fs::write(&path, cert.pem()).unwrap();
        let r = certificate("serving", &path).unwrap();
        assert_eq!(r.not_after.as_deref(), Some("2031-05-06T00:00:00Z"));
        assert!(certificate("client", &dir.path().join("missing.pem")).is_none());
        std::fs::write(&path, "garbage").unwrap();
        let r = certificate("serving", &path).unwrap();
        assert!(r.not_after.is_none() && r.error.is_some());
    }
}
