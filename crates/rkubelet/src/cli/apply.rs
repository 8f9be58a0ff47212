//! Config-backed flags onto the configuration: upstream's precedence, flag over drop-in over
//! file. Owns: copying every given config-backed flag into its `KubeletConfiguration` field.
//! Receives the parsed [`Flags`] and the configuration loaded from `--config`/`--config-dir`;
//! emits the deprecation warnings upstream prints for the flags used.

use std::collections::BTreeMap;

use kubelet::config::{KubeletConfiguration, apply_gated_defaults};

use super::{DEPRECATED, Flags};

/// Applies the config-backed flags that were given; returns deprecation warnings.
pub(super) fn apply_flags(flags: &Flags, c: &mut KubeletConfiguration) -> Vec<String> {
    let mut used: Vec<&str> = Vec::new();
    macro_rules! set {
        ($flag:expr, $name:literal, $field:expr) => {
            if let Some(v) = $flag.clone() {
                $field = v;
                used.push($name);
            }
        };
    }
    set!(
        flags.pod_manifest_path,
        "pod-manifest-path",
        c.static_pod_path
    );
    set!(flags.sync_frequency, "sync-frequency", c.sync_frequency);
    set!(
        flags.file_check_frequency,
        "file-check-frequency",
        c.file_check_frequency
    );
    set!(
        flags.http_check_frequency,
        "http-check-frequency",
        c.http_check_frequency
    );
    set!(flags.manifest_url, "manifest-url", c.static_pod_url);
    set!(flags.address, "address", c.address);
    set!(flags.port, "port", c.port);
    set!(flags.read_only_port, "read-only-port", c.read_only_port);
    set!(flags.healthz_port, "healthz-port", c.healthz_port);
    set!(
        flags.healthz_bind_address,
        "healthz-bind-address",
        c.healthz_bind_address
    );
    set!(
        flags.container_runtime_endpoint,
        "container-runtime-endpoint",
        c.container_runtime_endpoint
    );
    set!(
        flags.image_service_endpoint,
        "image-service-endpoint",
        c.image_service_endpoint
    );
    set!(
        flags.runtime_request_timeout,
        "runtime-request-timeout",
        c.runtime_request_timeout
    );
    set!(flags.max_pods, "max-pods", c.max_pods);
    set!(flags.cluster_domain, "cluster-domain", c.cluster_domain);
    set!(flags.resolv_conf, "resolv-conf", c.resolv_conf);
    set!(flags.cgroup_driver, "cgroup-driver", c.cgroup_driver);
    set!(flags.kubelet_cgroups, "kubelet-cgroups", c.kubelet_cgroups);
    set!(flags.system_cgroups, "system-cgroups", c.system_cgroups);
    set!(flags.fail_swap_on, "fail-swap-on", c.fail_swap_on);
    set!(flags.register_node, "register-node", c.register_node);
    set!(
        flags.node_status_update_frequency,
        "node-status-update-frequency",
        c.node_status_update_frequency
    );
    set!(flags.logging_format, "logging-format", c.logging.format);
    if let Some(taints) = &flags.register_with_taints {
        c.register_with_taints = taints.0.clone();
        used.push("register-with-taints");
    }
    // Config-backed like the others, but not deprecated upstream.
    if let Some(id) = &flags.provider_id {
        c.provider_id = id.clone();
    }
    set!(
        flags.rotate_certificates,
        "rotate-certificates",
        c.rotate_certificates
    );
    set!(
        flags.rotate_server_certificates,
        "rotate-server-certificates",
        c.server_tls_bootstrap
    );
    // The first occurrence replaces the configured headers; later ones append per key.
    if !flags.manifest_url_header.is_empty() {
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in flags.manifest_url_header.iter().flat_map(|h| h.0.iter()) {
            headers.entry(k.clone()).or_default().push(v.clone());
        }
        c.static_pod_url_header = headers;
        used.push("manifest-url-header");
    }
    // Comma-separated and repeatable; the given values replace the configured list.
    if !flags.cluster_dns.is_empty() {
        c.cluster_dns = flags
            .cluster_dns
            .iter()
            .flat_map(|v| v.split(','))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        used.push("cluster-dns");
    }
    if let Some(level) = flags.verbosity {
        c.logging.verbosity = level;
    }
    // Per gate, the flag wins over the config file (upstream `kubeletConfigFlagPrecedence`).
    if !flags.feature_gates.is_empty() {
        for gates in &flags.feature_gates {
            c.feature_gates
                .extend(gates.iter().map(|(k, v)| (k.clone(), *v)));
        }
        apply_gated_defaults(c);
        used.push("feature-gates");
    }
    used.iter()
        .map(|name| format!("Flag --{name} has been deprecated, {DEPRECATED}"))
        .collect()
}
