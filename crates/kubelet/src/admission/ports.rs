//! admission::ports — upstream `nodeports.Fits`: the host ports a pod asks for (regular
//! containers and restartable init containers, `hostPort` > 0) against those of the pods already
//! on the node, with `hostIP` defaulting to `0.0.0.0` (which overlaps every address) and the
//! protocol to TCP. Receives pods; emits whether the pod's ports are free. Pure.

use k8s_openapi::api::core::v1::{ContainerPort, Pod};

const ANY_IP: &str = "0.0.0.0";

/// One host port in use: (ip, protocol, port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    fn from_container_port(p: &ContainerPort) -> Self {
        let ip = p
            .host_ip
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(ANY_IP);
        let protocol = p
            .protocol
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("TCP");
        Self {
            ip: ip.to_owned(),
            protocol: protocol.to_owned(),
            port: p.host_port.unwrap_or(0),
        }
    }

    /// Upstream `HostPortInfo.CheckConflict`: same protocol and port on the same address, or
    /// either side bound to every address.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port > 0
            && self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == ANY_IP || other.ip == ANY_IP)
    }
}

/// Upstream `GetHostPorts`: host ports of restartable init containers and regular containers.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(HostPort::from_container_port)
        .collect()
}

/// The first of the pod's host ports already used by one of `active`.
pub fn conflicting_port(pod: &Pod, active: &[&Pod]) -> Option<HostPort> {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return None;
    }
    let used: Vec<HostPort> = active.iter().flat_map(|p| host_ports(p)).collect();
    wanted
        .into_iter()
        .find(|w| used.iter().any(|u| w.conflicts(u)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn port(host_port: i32, ip: &str, proto: &str) -> ContainerPort {
        ContainerPort {
            container_port: 80,
            host_port: Some(host_port),
            host_ip: (!ip.is_empty()).then(|| ip.to_owned()),
            protocol: (!proto.is_empty()).then(|| proto.to_owned()),
            ..Default::default()
        }
    }

    fn pod(ports: Vec<ContainerPort>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(ports),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn conflicts() {
        let cases = [
            (port(80, "", ""), port(80, "", "TCP"), true),
            (port(80, "", ""), port(80, "", "UDP"), false),
            (port(80, "", ""), port(81, "", ""), false),
            (port(80, "10.0.0.1", ""), port(80, "", ""), true),
            (port(80, "", ""), port(80, "10.0.0.1", ""), true),
            (port(80, "10.0.0.1", ""), port(80, "10.0.0.2", ""), false),
            (port(80, "10.0.0.1", ""), port(80, "10.0.0.1", ""), true),
        ];
        for (want, used, conflict) in cases {
            let p = pod(vec![want.clone()]);
            let other = pod(vec![used.clone()]);
            assert_eq!(
                conflicting_port(&p, &[&other]).is_some(),
                conflict,
                "{want:?} vs {used:?}"
            );
        }
    }

    #[test]
    fn container_ports_without_host_port_and_plain_init_containers_are_ignored() {
        let mut p = pod(vec![port(0, "", "")]);
        let other = pod(vec![port(80, "", "")]);
        assert!(conflicting_port(&p, &[&other]).is_none());
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(vec![Container {
                name: "init".into(),
                ports: Some(vec![port(80, "", "")]),
                ..Default::default()
            }]);
        }
        assert!(conflicting_port(&p, &[&other]).is_none());
        if let Some(init) = p
            .spec
            .as_mut()
            .and_then(|s| s.init_containers.as_mut())
            .and_then(|i| i.first_mut())
        {
            init.restart_policy = Some("Always".into());
        }
        assert!(conflicting_port(&p, &[&other]).is_some());
    }
}
