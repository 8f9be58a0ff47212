//! core::env — a container's environment and `$(VAR)` expansion. Receives the pod, the
//! container and an [`EnvContext`] (node/pod IPs, node allocatable, optional API objects);
//! emits the ordered `(name, value)` list handed to CRI, expanded command/args and subPathExpr.
//! Pure: everything the kubelet would look up is passed in.
//!
//! Semantics follow upstream `makeEnvironmentVariables`, `podFieldSelectorRuntimeValue`,
//! `containerResourceRuntimeValue`, `ExpandContainerCommandAndArgs` and the forked
//! `third_party/forked/golang/expansion` package. Where upstream's order is undefined (it builds
//! a Go map), rkubelet keeps declaration order: `envFrom` keys (sorted per source) first, then
//! `env` in spec order; a redefined name keeps its first position and takes the last value;
//! service-link variables not otherwise defined come last, sorted by name.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Container, ObjectFieldSelector, Pod, ResourceFieldSelector};

use crate::qos::{nanos_to_milli, nanos_to_units, parse_quantity_nanos};

/// Errors while building a container's environment. Messages follow upstream's wording, which
/// users see in the container's `CreateContainerConfigError` waiting message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("couldn't get {kind} {namespace}/{name}, no kubeClient defined")]
    NoApiServer {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("{message}")]
    Lookup { message: String },
    #[error("{kind_plural} \"{name}\" not found")]
    ObjectNotFound {
        kind_plural: &'static str,
        name: String,
    },
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    KeyNotFound {
        kind: &'static str,
        key: String,
        namespace: String,
        name: String,
    },
    #[error("unsupported pod version: {0}")]
    UnsupportedPodVersion(String),
    #[error("field label does not support subscript: {0}")]
    FieldLabelNoSubscript(String),
    #[error("field label not supported: {0}")]
    FieldLabelNotSupported(String),
    #[error("unsupported fieldPath: {0}")]
    UnsupportedFieldPath(String),
    #[error("invalid key subscript in {path}: {reason}")]
    InvalidSubscript { path: String, reason: String },
    #[error("host IP unknown; known addresses: []")]
    HostIpUnknown,
    #[error("unsupported container resource : {0}")]
    UnsupportedResource(String),
    #[error("container {0} not found")]
    ContainerNotFound(String),
    #[error(
        "resourceFieldRef {resource} of container {container}: no limit is set and the node's allocatable {what} is unknown"
    )]
    NodeAllocatableUnknown {
        resource: String,
        container: String,
        what: &'static str,
    },
    #[error("invalid quantity {value:?} in {field}")]
    InvalidQuantity { field: String, value: String },
    #[error("missing value for {0}")]
    MissingSubPathValue(String),
}

/// The node's allocatable resources, used by `resourceFieldRef` when a container has no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: Option<i64>,
}

/// ConfigMaps and Secrets visible to the pod (API-server mode). Implementations answer from a
/// cache the caller filled beforehand, so this module stays pure.
pub trait EnvObjects {
    /// `Ok(None)` when the ConfigMap does not exist; `Err` for any other lookup failure.
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String>;
    /// `Ok(None)` when the Secret does not exist; `Err` for any other lookup failure.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String>;
}

static NO_SERVICE_ENV: BTreeMap<String, String> = BTreeMap::new();

/// Everything outside the pod spec that environment generation needs.
#[derive(Clone, Copy)]
pub struct EnvContext<'a> {
    /// Used for `spec.nodeName` when the pod spec has none.
    pub node_name: &'a str,
    /// The sandbox IPs as the runtime reports them (sorted by node IP family here).
    pub pod_ips: &'a [String],
    /// The node's IPs, primary first.
    pub host_ips: &'a [String],
    /// Needed by `resourceFieldRef` on limits when the container sets no limit.
    pub node_allocatable: Option<NodeAllocatable>,
    /// Service-link variables (`FOO_SERVICE_HOST`, …); empty without an API server.
    pub service_env: &'a BTreeMap<String, String>,
    /// ConfigMaps/Secrets; `None` in standalone mode (no API server), where any reference to
    /// them fails like upstream without a kube client.
    pub objects: Option<&'a dyn EnvObjects>,
}

impl<'a> EnvContext<'a> {
    /// A standalone-mode context: no allocatable, no services, no API objects.
    pub fn new(node_name: &'a str, pod_ips: &'a [String], host_ips: &'a [String]) -> Self {
        EnvContext {
            node_name,
            pod_ips,
            host_ips,
            node_allocatable: None,
            service_env: &NO_SERVICE_ENV,
            objects: None,
        }
    }
}

/// Expands `$(VAR)` references in `input` exactly like upstream's forked `expansion.Expand`:
/// a found variable is replaced, an unknown one is left as `$(VAR)`, `$$` becomes `$` (so
/// `$$(VAR)` yields a literal `$(VAR)`), and a `$` that starts no reference, or a `$(` with no
/// closing parenthesis, is kept literally. (Upstream mangles a non-ASCII character directly
/// after `$`; here it is kept intact.)
pub fn expand(input: &str, mapping: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] != b'$' || cursor + 1 >= bytes.len() {
            cursor += 1;
            continue;
        }
        match bytes[cursor + 1] {
            b'$' => {
                out.push_str(&input[checkpoint..cursor]);
                out.push('$');
                cursor += 2;
                checkpoint = cursor;
            }
            b'(' => match input[cursor + 2..].find(')') {
                Some(rel) => {
                    let name = &input[cursor + 2..cursor + 2 + rel];
                    out.push_str(&input[checkpoint..cursor]);
                    match mapping(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    cursor += rel + 3;
                    checkpoint = cursor;
                }
                // Incomplete reference: keep "$(" and scan on after it.
                None => cursor += 2,
            },
            // A bare operator; the next character cannot start anything, skip both.
            _ => cursor += 2,
        }
    }
    out.push_str(&input[checkpoint..]);
    out
}

/// Upstream's (relaxed, default since v1.32) environment variable name rule: non-empty,
/// printable ASCII, no `=`.
pub fn is_env_var_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

/// Upstream's `InvalidEnvironmentVariableNames` warnings: per `envFrom` source, the prefixed
/// keys that are no valid variable names (and that [`make_environment`] skips). Sources that
/// cannot be read are left to `make_environment` to report.
pub fn invalid_env_from_keys(pod: &Pod, container: &Container, ctx: &EnvContext) -> Vec<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut warnings = Vec::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let (kind, name, keys): (&str, &str, Vec<String>) = if let Some(cm) = &from.config_map_ref {
            let keys = fetch_config_map(ctx, namespace, &cm.name, true)
                .ok()
                .flatten()
                .map(|d| d.into_keys().collect())
                .unwrap_or_default();
            ("configMap", &cm.name, keys)
        } else if let Some(s) = &from.secret_ref {
            let keys = fetch_secret(ctx, namespace, &s.name, true)
                .ok()
                .flatten()
                .map(|d| d.into_keys().collect())
                .unwrap_or_default();
            ("secret", &s.name, keys)
        } else {
            continue;
        };
        let mut invalid: Vec<String> = keys
            .into_iter()
            .map(|k| format!("{prefix}{k}"))
            .filter(|k| !is_env_var_name(k))
            .collect();
        if invalid.is_empty() {
            continue;
        }
        invalid.sort();
        warnings.push(format!(
            "Keys [{}] from the EnvFrom {kind} {namespace}/{name} were skipped since they are considered invalid environment variable names.",
            invalid.join(", ")
        ));
    }
    warnings
}

/// Builds the container's environment (upstream `makeEnvironmentVariables`).
pub fn make_environment(
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
) -> Result<Vec<(String, String)>, EnvError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = OrderedEnv::default();

    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        if let Some(cm) = &from.config_map_ref {
            let optional = cm.optional.unwrap_or(false);
            if let Some(data) = fetch_config_map(ctx, namespace, &cm.name, optional)? {
                for (k, v) in data {
                    let name = format!("{prefix}{k}");
                    if is_env_var_name(&name) {
                        env.set(name, v);
                    }
                }
            }
        } else if let Some(s) = &from.secret_ref {
            let optional = s.optional.unwrap_or(false);
            if let Some(data) = fetch_secret(ctx, namespace, &s.name, optional)? {
                for (k, v) in data {
                    let name = format!("{prefix}{k}");
                    if is_env_var_name(&name) {
                        env.set(name, String::from_utf8_lossy(&v).into_owned());
                    }
                }
            }
        }
    }

    for var in container.env.iter().flatten() {
        let literal = var.value.as_deref().unwrap_or_default();
        let value = if !literal.is_empty() {
            expand(literal, &|name| {
                env.get(name)
                    .or_else(|| ctx.service_env.get(name).map(String::as_str))
                    .map(str::to_owned)
            })
        } else if let Some(from) = &var.value_from {
            if let Some(field) = &from.field_ref {
                field_ref_value(pod, field, ctx)?
            } else if let Some(res) = &from.resource_field_ref {
                resource_field_value(pod, container, res, ctx)?
            } else if let Some(cm) = &from.config_map_key_ref {
                let optional = cm.optional.unwrap_or(false);
                let Some(data) = fetch_config_map(ctx, namespace, &cm.name, optional)? else {
                    continue;
                };
                match data.get(&cm.key) {
                    Some(v) => v.clone(),
                    None if optional => continue,
                    None => return Err(key_not_found("ConfigMap", &cm.key, namespace, &cm.name)),
                }
            } else if let Some(s) = &from.secret_key_ref {
                let optional = s.optional.unwrap_or(false);
                let Some(data) = fetch_secret(ctx, namespace, &s.name, optional)? else {
                    continue;
                };
                match data.get(&s.key) {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None if optional => continue,
                    None => return Err(key_not_found("Secret", &s.key, namespace, &s.name)),
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        env.set(var.name.clone(), value);
    }

    let mut out = env.into_vec();
    let defined: std::collections::HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
    for (k, v) in ctx.service_env {
        if !defined.contains(k) {
            out.push((k.clone(), v.clone()));
        }
    }
    Ok(out)
}

/// Expands `$(VAR)` in the container's command and args against `env` (later entries win),
/// upstream `ExpandContainerCommandAndArgs`.
pub fn expand_command_and_args(
    container: &Container,
    env: &[(String, String)],
) -> (Vec<String>, Vec<String>) {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mapping = |name: &str| map.get(name).map(|v| (*v).to_owned());
    let expand_all = |items: &Option<Vec<String>>| -> Vec<String> {
        items
            .iter()
            .flatten()
            .map(|s| expand(s, &mapping))
            .collect()
    };
    (expand_all(&container.command), expand_all(&container.args))
}

/// Expands a volume mount's `subPathExpr` (upstream `ExpandContainerVolumeMounts`): every
/// referenced variable must exist and be non-empty.
pub fn expand_sub_path_expr(expr: &str, env: &[(String, String)]) -> Result<String, EnvError> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = expand(expr, &|name| {
        let value = map.get(name).copied().unwrap_or_default();
        if value.is_empty() {
            missing.borrow_mut().insert(name.to_owned());
        }
        Some(value.to_owned())
    });
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(EnvError::MissingSubPathValue(
            missing.into_iter().collect::<Vec<_>>().join(", "),
        ))
    }
}

/// Upstream `sortPodIPs`: the first IP of the node's family, then the first of the other
/// family (at most two). Unparsable IPs are dropped; IPs are re-printed canonically.
pub fn sort_pod_ips(pod_ips: &[String], node_ips: &[String]) -> Vec<String> {
    let parse = |s: &str| -> Option<IpAddr> {
        let ip: IpAddr = s.trim().parse().ok()?;
        Some(match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        })
    };
    let node_v6 = node_ips
        .first()
        .and_then(|s| parse(s))
        .is_some_and(|ip| ip.is_ipv6());
    let parsed: Vec<IpAddr> = pod_ips.iter().filter_map(|s| parse(s)).collect();
    let primary = parsed.iter().find(|ip| ip.is_ipv6() == node_v6);
    let secondary = parsed.iter().find(|ip| ip.is_ipv6() != node_v6);
    primary
        .into_iter()
        .chain(secondary)
        .map(ToString::to_string)
        .collect()
}

/// Insertion-ordered map: first position kept, last value wins.
#[derive(Default)]
struct OrderedEnv {
    entries: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl OrderedEnv {
    fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.entries.len());
                self.entries.push((name, value));
            }
        }
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.entries[i].1.as_str())
    }
    fn into_vec(self) -> Vec<(String, String)> {
        self.entries
    }
}

fn key_not_found(kind: &'static str, key: &str, namespace: &str, name: &str) -> EnvError {
    EnvError::KeyNotFound {
        kind,
        key: key.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

fn fetch_config_map(
    ctx: &EnvContext,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, String>>, EnvError> {
    let objects = ctx.objects.ok_or_else(|| EnvError::NoApiServer {
        kind: "configMap",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })?;
    match objects.config_map(namespace, name) {
        Ok(Some(data)) => Ok(Some(data)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(EnvError::ObjectNotFound {
            kind_plural: "configmaps",
            name: name.to_owned(),
        }),
        Err(message) => Err(EnvError::Lookup { message }),
    }
}

fn fetch_secret(
    ctx: &EnvContext,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, EnvError> {
    let objects = ctx.objects.ok_or_else(|| EnvError::NoApiServer {
        kind: "secret",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })?;
    match objects.secret(namespace, name) {
        Ok(Some(data)) => Ok(Some(data)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(EnvError::ObjectNotFound {
            kind_plural: "secrets",
            name: name.to_owned(),
        }),
        Err(message) => Err(EnvError::Lookup { message }),
    }
}

/// Upstream `SplitMaybeSubscriptedPath`: `metadata.labels['k']` → (`metadata.labels`, `k`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (base, key) = inner.split_once("['")?;
    (!base.is_empty()).then_some((base, key))
}

/// `valueFrom.fieldRef` (upstream `ConvertDownwardAPIFieldLabel` + `podFieldSelectorRuntimeValue`
/// + `ExtractFieldPathAsString`).
fn field_ref_value(
    pod: &Pod,
    field: &ObjectFieldSelector,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let version = field.api_version.as_deref().unwrap_or("v1");
    if version != "v1" {
        return Err(EnvError::UnsupportedPodVersion(version.to_owned()));
    }
    let path = field.field_path.as_str();
    if let Some((base, key)) = split_subscript(path) {
        let (map, key_to_check) = match base {
            "metadata.annotations" => (&pod.metadata.annotations, key.to_lowercase()),
            "metadata.labels" => (&pod.metadata.labels, key.to_owned()),
            _ => return Err(EnvError::FieldLabelNoSubscript(path.to_owned())),
        };
        if let Err(reason) = check_qualified_name(&key_to_check) {
            return Err(EnvError::InvalidSubscript {
                path: path.to_owned(),
                reason,
            });
        }
        return Ok(map
            .as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default());
    }
    let spec = pod.spec.as_ref();
    match path {
        "spec.nodeName" | "spec.host" => Ok(spec
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or(ctx.node_name)
            .to_owned()),
        "spec.serviceAccountName" => Ok(spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default()),
        "status.hostIP" => ctx.host_ips.first().cloned().ok_or(EnvError::HostIpUnknown),
        "status.hostIPs" => {
            if ctx.host_ips.is_empty() {
                return Err(EnvError::HostIpUnknown);
            }
            Ok(ctx.host_ips.join(","))
        }
        "status.podIP" => Ok(sort_pod_ips(ctx.pod_ips, ctx.host_ips)
            .into_iter()
            .next()
            .unwrap_or_default()),
        "status.podIPs" => Ok(sort_pod_ips(ctx.pod_ips, ctx.host_ips).join(",")),
        "metadata.name" => Ok(pod.metadata.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(pod.metadata.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(pod.metadata.uid.clone().unwrap_or_default()),
        "metadata.labels" => Ok(format_map(pod.metadata.labels.as_ref())),
        "metadata.annotations" => Ok(format_map(pod.metadata.annotations.as_ref())),
        // Accepted by the conversion but not extractable, as upstream.
        "spec.restartPolicy" | "spec.schedulerName" | "status.phase" => {
            Err(EnvError::UnsupportedFieldPath(path.to_owned()))
        }
        _ => Err(EnvError::FieldLabelNotSupported(path.to_owned())),
    }
}

/// Upstream `fieldpath.FormatMap` of an optional map.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.map(crate::gostr::format_map).unwrap_or_default()
}

/// Upstream `IsQualifiedName`: `[prefix/]name`, name ≤ 63 alphanumerics plus `-_.` inside,
/// prefix a DNS subdomain.
fn check_qualified_name(value: &str) -> Result<(), String> {
    let (prefix, name) = match value.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    if name.is_empty() || name.len() > 63 {
        return Err("name part must be non-empty and no more than 63 characters".into());
    }
    let b = name.as_bytes();
    let edge_ok = |c: u8| c.is_ascii_alphanumeric();
    let inner_ok = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    if !edge_ok(b[0]) || !edge_ok(b[b.len() - 1]) || !b.iter().all(|&c| inner_ok(c)) {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    if let Some(p) = prefix {
        let valid_label = |l: &str| {
            let lb = l.as_bytes();
            !lb.is_empty()
                && lb.len() <= 63
                && lb[0].is_ascii_alphanumeric()
                && lb[lb.len() - 1].is_ascii_alphanumeric()
                && lb
                    .iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(valid_label) {
            return Err("prefix part must be a lowercase RFC 1123 subdomain".into());
        }
    }
    Ok(())
}

/// `valueFrom.resourceFieldRef` (upstream `containerResourceRuntimeValue` on the pod with its
/// limits defaulted to the node's allocatable, `defaultPodLimitsForDownwardAPI`).
fn resource_field_value(
    pod: &Pod,
    container: &Container,
    sel: &ResourceFieldSelector,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let target = match sel.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => container,
        Some(name) => pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| EnvError::ContainerNotFound(name.to_owned()))?,
    };
    let divisor_nanos = match sel.divisor.as_ref() {
        None => 0,
        Some(q) => parse_quantity_nanos(&q.0).ok_or_else(|| EnvError::InvalidQuantity {
            field: "resourceFieldRef.divisor".into(),
            value: q.0.clone(),
        })?,
    };
    let divisor_nanos = if divisor_nanos == 0 {
        1_000_000_000
    } else {
        divisor_nanos
    };
    let resource = sel.resource.as_str();
    let (is_limit, name) = if let Some(n) = resource.strip_prefix("limits.") {
        (true, n)
    } else if let Some(n) = resource.strip_prefix("requests.") {
        (false, n)
    } else {
        return Err(EnvError::UnsupportedResource(resource.to_owned()));
    };
    let is_cpu = name == "cpu";
    if !(is_cpu
        || name == "memory"
        || name == "ephemeral-storage"
        || name.starts_with("hugepages-"))
    {
        return Err(EnvError::UnsupportedResource(resource.to_owned()));
    }
    let res = target.resources.as_ref();
    let list = if is_limit {
        res.and_then(|r| r.limits.as_ref())
    } else {
        res.and_then(|r| r.requests.as_ref())
    };
    let set = match list.and_then(|l| l.get(name)) {
        Some(q) => parse_quantity_nanos(&q.0).ok_or_else(|| EnvError::InvalidQuantity {
            field: format!("{}.{resource}", target.name),
            value: q.0.clone(),
        })?,
        None => 0,
    };
    let amount = if is_limit && set == 0 && !name.starts_with("hugepages-") {
        let unknown = |what| EnvError::NodeAllocatableUnknown {
            resource: resource.to_owned(),
            container: target.name.clone(),
            what,
        };
        let alloc = ctx
            .node_allocatable
            .ok_or_else(|| unknown(name_to_what(name)))?;
        match name {
            "cpu" => i128::from(alloc.cpu_millis) * 1_000_000,
            "memory" => i128::from(alloc.memory_bytes) * 1_000_000_000,
            _ => alloc
                .ephemeral_storage_bytes
                .map(|b| i128::from(b) * 1_000_000_000)
                .unwrap_or(0),
        }
    } else {
        set
    };
    let result = if is_cpu {
        let d = nanos_to_milli(divisor_nanos).max(1);
        ceil_div(nanos_to_milli(amount), d)
    } else {
        let d = nanos_to_units(divisor_nanos).max(1);
        ceil_div(nanos_to_units(amount), d)
    };
    Ok(result.to_string())
}

fn name_to_what(name: &str) -> &'static str {
    match name {
        "cpu" => "cpu",
        "memory" => "memory",
        _ => "ephemeral-storage",
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && (a > 0) == (b > 0) {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests;
