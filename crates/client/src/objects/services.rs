//! Service-link environment variables (upstream `getServiceEnvVarMap` + `envvars.FromServices`):
//! owns the pure mapping from the services an informer has seen to the variables a pod gets.
//! Receives [`ServiceLink`]s (the few fields of a `Service` that matter, trimmed by
//! [`ServiceLink::from_service`]), the pod's namespace and its `enableServiceLinks`; emits the
//! `NAME → value` map. No I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;

/// The namespace of the master service.
pub const MASTER_SERVICE_NAMESPACE: &str = "default";
/// Services of [`MASTER_SERVICE_NAMESPACE`] every pod sees (upstream `masterServices`).
pub const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// What the environment needs of one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLink {
    pub namespace: String,
    pub name: String,
    /// `spec.clusterIP`: `None` (headless) and empty get no variables.
    pub cluster_ip: String,
    pub ports: Vec<LinkPort>,
}

/// One `spec.ports[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPort {
    /// Empty when unnamed (only the first port may be).
    pub name: String,
    pub port: i32,
    /// `TCP`, `UDP`, `SCTP`; empty means TCP.
    pub protocol: String,
}

impl ServiceLink {
    /// Keeps the fields the environment needs.
    pub fn from_service(service: &Service) -> Self {
        let spec = service.spec.as_ref();
        Self {
            namespace: service
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| MASTER_SERVICE_NAMESPACE.to_owned()),
            name: service.metadata.name.clone().unwrap_or_default(),
            cluster_ip: spec.and_then(|s| s.cluster_ip.clone()).unwrap_or_default(),
            ports: spec
                .and_then(|s| s.ports.as_ref())
                .map(|ports| {
                    ports
                        .iter()
                        .map(|p| LinkPort {
                            name: p.name.clone().unwrap_or_default(),
                            port: p.port,
                            protocol: p.protocol.clone().unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Upstream `IsServiceIPSet`: neither headless (`None`) nor empty.
    pub fn ip_set(&self) -> bool {
        !self.cluster_ip.is_empty() && self.cluster_ip != "None"
    }
}

/// Upstream `getServiceEnvVarMap`: the variables of the services a pod in `namespace` sees.
/// The master services of the `default` namespace are always included; the services of
/// `namespace` only with `enable_service_links`. A service of the pod's namespace replaces a
/// master service of the same name (upstream: the pod namespace's entry overwrites, the master
/// entry is only added when the name is still free). Services without a cluster IP are skipped.
pub fn service_env<'a>(
    services: impl IntoIterator<Item = &'a ServiceLink>,
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &ServiceLink> = BTreeMap::new();
    for service in services {
        if !service.ip_set() {
            continue;
        }
        if service.namespace == MASTER_SERVICE_NAMESPACE
            && MASTER_SERVICES.contains(&service.name.as_str())
        {
            chosen.entry(service.name.as_str()).or_insert(service);
        } else if service.namespace == namespace && enable_service_links {
            chosen.insert(service.name.as_str(), service);
        }
    }
    let mut env = BTreeMap::new();
    for (name, value) in from_services(chosen.into_values()) {
        env.insert(name, value);
    }
    env
}

/// Upstream `envvars.FromServices`: the variables of each service, in order (a later service's
/// variable of the same name wins when collected into a map).
pub fn from_services<'a>(
    services: impl IntoIterator<Item = &'a ServiceLink>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for service in services {
        if !service.ip_set() {
            continue;
        }
        let prefix = env_name(&service.name);
        out.push((format!("{prefix}_SERVICE_HOST"), service.cluster_ip.clone()));
        // Validation requires ports on a service with a cluster IP; upstream would index out
        // of range without one, here the port variables are just absent.
        let Some(first) = service.ports.first() else {
            continue;
        };
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in service.ports.iter().filter(|p| !p.name.is_empty()) {
            out.push((
                format!("{port_var}_{}", env_name(&p.name)),
                p.port.to_string(),
            ));
        }
        link_variables(service, &prefix, &mut out);
    }
    out
}

/// Docker-link compatible variables (upstream `makeLinkVariables`).
fn link_variables(service: &ServiceLink, prefix: &str, out: &mut Vec<(String, String)>) {
    for (i, p) in service.ports.iter().enumerate() {
        let protocol = if p.protocol.is_empty() {
            "TCP"
        } else {
            p.protocol.as_str()
        };
        let lower = protocol.to_lowercase();
        let url = format!("{lower}://{}", join_host_port(&service.cluster_ip, p.port));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", p.port, protocol.to_uppercase());
        out.push((format!("{port_prefix}_PROTO"), lower));
        out.push((format!("{port_prefix}_PORT"), p.port.to_string()));
        out.push((format!("{port_prefix}_ADDR"), service.cluster_ip.clone()));
        out.push((port_prefix, url));
    }
}

/// Upstream `makeEnvVariableName`: upper case, `-` → `_`.
pub fn env_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// Go's `net.JoinHostPort`: IPv6 literals in brackets.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> ServiceLink {
        ServiceLink::from_service(&Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, port, proto)| ServicePort {
                            name: (!n.is_empty()).then(|| (*n).to_owned()),
                            port: *port,
                            protocol: (!proto.is_empty()).then(|| (*proto).to_owned()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn variables_of_one_service_match_upstream() {
        let s = svc(
            "ns",
            "my-db",
            "10.0.0.7",
            &[("", 5432, ""), ("metrics", 9187, "TCP"), ("dns", 53, "UDP")],
        );
        let env = service_env([&s], "ns", true);
        assert_eq!(
            env,
            map(&[
                ("MY_DB_SERVICE_HOST", "10.0.0.7"),
                ("MY_DB_SERVICE_PORT", "5432"),
                ("MY_DB_SERVICE_PORT_METRICS", "9187"),
                ("MY_DB_SERVICE_PORT_DNS", "53"),
                ("MY_DB_PORT", "tcp://10.0.0.7:5432"),
                ("MY_DB_PORT_5432_TCP", "tcp://10.0.0.7:5432"),
                ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
                ("MY_DB_PORT_5432_TCP_PORT", "5432"),
                ("MY_DB_PORT_5432_TCP_ADDR", "10.0.0.7"),
                ("MY_DB_PORT_9187_TCP", "tcp://10.0.0.7:9187"),
                ("MY_DB_PORT_9187_TCP_PROTO", "tcp"),
                ("MY_DB_PORT_9187_TCP_PORT", "9187"),
                ("MY_DB_PORT_9187_TCP_ADDR", "10.0.0.7"),
                ("MY_DB_PORT_53_UDP", "udp://10.0.0.7:53"),
                ("MY_DB_PORT_53_UDP_PROTO", "udp"),
                ("MY_DB_PORT_53_UDP_PORT", "53"),
                ("MY_DB_PORT_53_UDP_ADDR", "10.0.0.7"),
            ])
        );
    }

    #[test]
    fn ipv6_cluster_ips_are_bracketed_in_urls() {
        let s = svc("ns", "v6", "fd00::10", &[("", 80, "TCP")]);
        let env = service_env([&s], "ns", true);
        assert_eq!(env["V6_PORT"], "tcp://[fd00::10]:80");
        assert_eq!(env["V6_PORT_80_TCP_ADDR"], "fd00::10");
        assert_eq!(env["V6_SERVICE_HOST"], "fd00::10");
    }

    #[test]
    fn headless_and_ipless_services_are_skipped() {
        let headless = svc("ns", "headless", "None", &[("", 80, "")]);
        let empty = svc("ns", "noip", "", &[("", 80, "")]);
        assert!(service_env([&headless, &empty], "ns", true).is_empty());
    }

    #[test]
    fn master_service_always_and_namespace_services_only_with_links() {
        let master = svc(
            "default",
            "kubernetes",
            "10.0.0.1",
            &[("https", 443, "TCP")],
        );
        let other_default = svc("default", "web", "10.0.0.2", &[("", 80, "")]);
        let mine = svc("ns", "api", "10.0.0.3", &[("", 8080, "")]);
        let elsewhere = svc("other", "api2", "10.0.0.4", &[("", 81, "")]);
        let all = [&master, &other_default, &mine, &elsewhere];

        let env = service_env(all, "ns", true);
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(env["KUBERNETES_PORT"], "tcp://10.0.0.1:443");
        assert_eq!(env["API_SERVICE_HOST"], "10.0.0.3");
        assert!(!env.contains_key("WEB_SERVICE_HOST"));
        assert!(!env.contains_key("API2_SERVICE_HOST"));

        let env = service_env(all, "ns", false);
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert!(!env.contains_key("API_SERVICE_HOST"));
        assert!(env.keys().all(|k| k.starts_with("KUBERNETES_")));

        // A pod of the default namespace with links off still gets only the master service.
        let env = service_env(all, "default", false);
        assert!(!env.contains_key("WEB_SERVICE_HOST"));
        assert!(env.contains_key("KUBERNETES_SERVICE_HOST"));
        let env = service_env(all, "default", true);
        assert_eq!(env["WEB_SERVICE_HOST"], "10.0.0.2");
    }

    #[test]
    fn pod_namespace_service_named_kubernetes_wins_in_any_order() {
        let master = svc("default", "kubernetes", "10.0.0.1", &[("", 443, "")]);
        let local = svc("ns", "kubernetes", "10.9.9.9", &[("", 8443, "")]);
        for order in [[&master, &local], [&local, &master]] {
            let env = service_env(order, "ns", true);
            assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.9.9.9");
            assert_eq!(env["KUBERNETES_SERVICE_PORT"], "8443");
        }
        // Without service links the local one is not visible: the master one is used.
        let env = service_env([&local, &master], "ns", false);
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
    }

    #[test]
    fn names_are_upper_cased_with_underscores() {
        assert_eq!(env_name("my-svc-2"), "MY_SVC_2");
        let s = svc("ns", "a-b", "10.1.1.1", &[("", 1, ""), ("grpc-web", 2, "")]);
        let env = service_env([&s], "ns", true);
        assert_eq!(env["A_B_SERVICE_PORT_GRPC_WEB"], "2");
        assert_eq!(env["A_B_PORT_2_TCP_PORT"], "2");
    }

    #[test]
    fn service_without_ports_gets_only_its_host() {
        let s = svc("ns", "bare", "10.1.1.2", &[]);
        assert_eq!(
            service_env([&s], "ns", true),
            map(&[("BARE_SERVICE_HOST", "10.1.1.2")])
        );
    }
}
