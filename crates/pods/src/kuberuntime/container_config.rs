//! kuberuntime::container_config: builds the CRI `ContainerConfig` for one container of a pod
//! (upstream `generateContainerConfig`, `generateLinuxContainerConfig`,
//! `determineEffectiveSecurityContext`, `calculateLinuxResources`, `GetContainerOOMScoreAdjust`,
//! `verifyRunAsNonRoot`). Receives the pod, the container and a `ContainerContext` (resolved
//! image, restart count, QoS class, image user, mounts, node options); emits the config or a
//! `ContainerConfigError` whose message becomes the `CreateContainerConfigError` waiting
//! message. Pure: no I/O (the caller creates the container log directory).

use std::path::PathBuf;

use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, HugepageLimit, Image, ImageSpec, Int64Value, KeyValue,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext, Mount,
    NamespaceMode, NamespaceOption, SecurityProfile, security_profile::ProfileType,
};
use k8s_openapi::api::core::v1::{
    Container, Pod, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

use super::hash::hash_container;
use super::labels;
use super::sandbox_config::{
    SandboxConfigError, namespaces_for_pod, pod_supplemental_groups, runtime_selinux,
    supplemental_groups_policy,
};
use crate::cm::cgroups::hugepage_size_name;
use crate::env::{EnvContext, EnvError, expand_command_and_args, make_environment};
use crate::qos::{nanos_to_milli, nanos_to_units, parse_quantity_nanos};
use crate::security::{apparmor, capabilities};
use crate::types::{CONFIG_MIRROR_ANNOTATION, PodExt};

/// Upstream `quotaPeriod`: 100ms in microseconds.
pub const DEFAULT_CPU_CFS_QUOTA_PERIOD_US: i64 = 100_000;
const MIN_QUOTA_PERIOD: i64 = 1_000;
const MIN_SHARES: i64 = 2;
const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// Priority at and above which a pod is critical (upstream `SystemCriticalPriority`).
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Paths hidden from containers unless `procMount: Unmasked` (upstream `defaultMaskedPaths`).
const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
/// Paths read-only in containers unless `procMount: Unmasked`.
const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Node-wide settings that shape container configs (from the kubelet config / machine info).
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// `cpuCFSQuota` (default true): enforce CPU limits with CFS quota.
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod` in microseconds (default 100000).
    pub cpu_cfs_quota_period_us: i64,
    /// The node's memory capacity in bytes (Burstable OOM score adjustment).
    pub memory_capacity: i64,
    /// The node runs the unified cgroup v2 hierarchy.
    pub cgroup_v2: bool,
    /// `singleProcessOOMKill`: when false on cgroup v2, `memory.oom.group=1` is set.
    pub single_process_oom_kill: bool,
    /// `seccompDefault`: unset profiles become `RuntimeDefault` instead of `Unconfined`.
    pub seccomp_default: bool,
    /// `<root-dir>/seccomp`, the base of `Localhost` seccomp profiles.
    pub seccomp_profile_root: PathBuf,
    /// The host's huge page sizes in bytes (each gets a limit, 0 unless the container asks).
    pub hugepage_sizes: Vec<u64>,
    /// `memorySwap.swapBehavior` (`""`, `NoSwap`, `LimitedSwap`).
    pub swap_behavior: String,
    /// The memory cgroup can limit swap (v1 `memory.memsw.*`, v2 `memory.swap.max`).
    pub swap_controller_available: bool,
    /// The node's swap capacity in bytes (`LimitedSwap` shares it out).
    pub swap_capacity: i64,
    /// Feature gate `DisableCPUQuotaWithExclusiveCPUs` (on by default): a container with
    /// exclusive CPUs gets no CFS quota.
    pub disable_cpu_quota_with_exclusive_cpus: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            cpu_cfs_quota: true,
            cpu_cfs_quota_period_us: DEFAULT_CPU_CFS_QUOTA_PERIOD_US,
            memory_capacity: 0,
            cgroup_v2: false,
            single_process_oom_kill: false,
            seccomp_default: false,
            seccomp_profile_root: PathBuf::from("/var/lib/kubelet/seccomp"),
            hugepage_sizes: Vec::new(),
            swap_behavior: String::new(),
            swap_controller_available: false,
            swap_capacity: 0,
            disable_cpu_quota_with_exclusive_cpus: true,
        }
    }
}

/// The user an image runs as by default (CRI `Image.uid` / `Image.username`). Neither set
/// means root, as upstream assumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    /// From the CRI image status (`None`: unknown image, treated as root).
    pub fn from_image(image: Option<&Image>) -> Self {
        let Some(image) = image else {
            return Self::default();
        };
        match image.uid {
            Some(uid) => Self {
                uid: Some(uid.value),
                username: String::new(),
            },
            None => Self {
                uid: None,
                username: image.username.clone(),
            },
        }
    }

    /// (uid, username) as upstream's `getImageUser` returns them.
    fn resolved(&self) -> (Option<i64>, &str) {
        match (self.uid, self.username.as_str()) {
            (Some(uid), _) => (Some(uid), ""),
            (None, "") => (Some(0), ""),
            (None, name) => (None, name),
        }
    }
}

/// Per-container inputs of config generation.
#[derive(Clone, Copy)]
pub struct ContainerContext<'a> {
    /// Inputs of env var generation (pod/host IPs, node name, services…).
    pub env: &'a EnvContext<'a>,
    /// The resolved image ID to run (from the image manager).
    pub image_ref: &'a str,
    /// How often the container restarted: `metadata.attempt` and the log file name.
    pub restart_count: u32,
    /// The pod's QoS class (`Guaranteed`, `Burstable`, `BestEffort`).
    pub qos_class: &'a str,
    /// The image's default user (for `runAsNonRoot` checks and `run_as_user`).
    pub image_user: &'a ImageUser,
    /// Mounts prepared by the volume manager (termination-log, volumes); passed through.
    pub mounts: &'a [Mount],
    pub options: &'a RuntimeOptions,
    /// `cpuset_cpus` from the CPU manager (`None`: the runtime's default, all CPUs).
    pub cpuset_cpus: Option<CpuAssignment<'a>>,
    /// Runtime ID of the container whose PID namespace an ephemeral container joins
    /// (`targetContainerName`); `None` for every other container.
    pub pid_namespace_target: Option<&'a str>,
}

/// The CPUs the CPU manager gives a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuAssignment<'a> {
    /// `cpuset_cpus` (e.g. `1,3`).
    pub cpus: &'a str,
    /// The CPUs are the container's own (upstream `ContainerHasExclusiveCPUs`), not the
    /// shared pool.
    pub exclusive: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ContainerConfigError {
    #[error(transparent)]
    Env(#[from] EnvError),
    /// `runAsNonRoot` cannot be honoured.
    #[error("{0}")]
    NonRoot(String),
    #[error("localhostProfile must be set if seccompProfile type is Localhost.")]
    SeccompLocalhostMissing,
    #[error(transparent)]
    AppArmor(#[from] apparmor::AppArmorError),
    /// Namespace or supplemental-group settings the runtime cannot honour.
    #[error(transparent)]
    Pod(#[from] SandboxConfigError),
}

/// Generates the CRI config of `container` (upstream `generateContainerConfig`).
pub fn generate_container_config(
    pod: &Pod,
    container: &Container,
    ctx: &ContainerContext<'_>,
) -> Result<ContainerConfig, ContainerConfigError> {
    let envs = make_environment(pod, container, ctx.env)?;
    verify_run_as_non_root(pod, container, ctx.image_user)?;
    let (command, args) = expand_command_and_args(container, &envs);
    let hash = hash_container(container);
    Ok(ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: container.name.clone(),
            attempt: ctx.restart_count,
        }),
        image: Some(ImageSpec {
            image: ctx.image_ref.to_owned(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| KeyValue { key, value })
            .collect(),
        mounts: ctx.mounts.to_vec(),
        labels: labels::container_labels(container, pod),
        annotations: labels::container_annotations(container, pod, ctx.restart_count, hash),
        log_path: container_log_path(&container.name, ctx.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: Some(linux_resources(pod, container, ctx)),
            security_context: Some(security_context(pod, container, ctx)?),
        }),
        ..Default::default()
    })
}

/// `<container name>/<restart count>.log`, relative to the sandbox's log directory.
pub fn container_log_path(container_name: &str, restart_count: u32) -> String {
    format!("{container_name}/{restart_count}.log")
}

fn pod_spec(pod: &Pod) -> PodSpec {
    pod.spec.clone().unwrap_or_default()
}

/// The pod-level fields that apply to containers, overridden by the container's own (upstream
/// `DetermineEffectiveSecurityContext`).
fn effective_security_context(pod: &Pod, container: &Container) -> SecurityContext {
    let pod_sc: Option<&PodSecurityContext> =
        pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut eff = SecurityContext {
        se_linux_options: pod_sc.and_then(|p| p.se_linux_options.clone()),
        windows_options: pod_sc.and_then(|p| p.windows_options.clone()),
        run_as_user: pod_sc.and_then(|p| p.run_as_user),
        run_as_group: pod_sc.and_then(|p| p.run_as_group),
        run_as_non_root: pod_sc.and_then(|p| p.run_as_non_root),
        ..Default::default()
    };
    let Some(c) = &container.security_context else {
        return eff;
    };
    if c.se_linux_options.is_some() {
        eff.se_linux_options = c.se_linux_options.clone();
    }
    if c.windows_options.is_some() {
        eff.windows_options = c.windows_options.clone();
    }
    macro_rules! take {
        ($($field:ident),*) => {$(
            if c.$field.is_some() {
                eff.$field = c.$field.clone();
            }
        )*};
    }
    take!(
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount
    );
    eff
}

/// Upstream `verifyRunAsNonRoot`.
fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image_user: &ImageUser,
) -> Result<(), ContainerConfigError> {
    let sc = effective_security_context(pod, container);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let pod_desc = format!("{}_{}({})", pod.name(), pod.namespace(), pod.uid());
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(ContainerConfigError::NonRoot(format!(
                "container's runAsUser breaks non-root policy (pod: {pod_desc:?}, container: {})",
                container.name
            )));
        }
        return Ok(());
    }
    match image_user.resolved() {
        (Some(0), _) => Err(ContainerConfigError::NonRoot(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod_desc:?}, container: {})",
            container.name
        ))),
        (None, name) if !name.is_empty() => Err(ContainerConfigError::NonRoot(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root (pod: {pod_desc:?}, container: {})",
            container.name
        ))),
        _ => Ok(()),
    }
}

/// Upstream `determineEffectiveSecurityContext` for Linux. The deprecated `apparmor_profile`
/// string is still sent: containerd 1.6 reads only that one.
#[allow(deprecated)]
fn security_context(
    pod: &Pod,
    container: &Container,
    ctx: &ContainerContext<'_>,
) -> Result<LinuxContainerSecurityContext, ContainerConfigError> {
    let spec = pod_spec(pod);
    let eff = effective_security_context(pod, container);
    let unmasked = eff.proc_mount.as_deref() == Some("Unmasked");
    let paths = |list: &[&str]| -> Vec<String> {
        if unmasked {
            Vec::new()
        } else {
            list.iter().map(|p| (*p).to_owned()).collect()
        }
    };
    let (apparmor, apparmor_profile) = apparmor::runtime_profile(pod, container)?;
    let mut sc = LinuxContainerSecurityContext {
        capabilities: eff.capabilities.as_ref().map(capabilities::to_runtime),
        privileged: eff.privileged.unwrap_or(false),
        namespace_options: Some(target_pid_namespace(
            namespaces_for_pod(&spec)?,
            ctx.pid_namespace_target,
        )),
        selinux_options: runtime_selinux(eff.se_linux_options.as_ref()),
        run_as_user: eff.run_as_user.map(|value| Int64Value { value }),
        run_as_group: eff.run_as_group.map(|value| Int64Value { value }),
        readonly_rootfs: eff.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: pod_supplemental_groups(&spec),
        supplemental_groups_policy: supplemental_groups_policy(&spec)?,
        no_new_privs: eff.allow_privilege_escalation == Some(false),
        masked_paths: paths(DEFAULT_MASKED_PATHS),
        readonly_paths: paths(DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp_profile(&spec, container, ctx.options)?),
        apparmor,
        apparmor_profile,
        ..Default::default()
    };
    if sc.run_as_user.is_none() {
        let (uid, username) = ctx.image_user.resolved();
        sc.run_as_user = uid.map(|value| Int64Value { value });
        sc.run_as_username = username.to_owned();
    }
    Ok(sc)
}

/// Upstream `generateLinuxContainerConfig`'s namespace target: an ephemeral container with a
/// target joins that container's PID namespace (`TARGET`), unless the pod already shares one
/// (`shareProcessNamespace`: `POD`) or uses the host's (`hostPID`: `NODE`).
fn target_pid_namespace(mut ns: NamespaceOption, target: Option<&str>) -> NamespaceOption {
    if let Some(id) = target
        && ns.pid == NamespaceMode::Container as i32
    {
        ns.pid = NamespaceMode::Target as i32;
        ns.target_id = id.to_owned();
    }
    ns
}

/// Upstream `getSeccompProfile`: container field, then pod field, then the node default.
fn seccomp_profile(
    spec: &PodSpec,
    container: &Container,
    options: &RuntimeOptions,
) -> Result<SecurityProfile, ContainerConfigError> {
    let field: Option<&SeccompProfile> = container
        .security_context
        .as_ref()
        .and_then(|sc| sc.seccomp_profile.as_ref())
        .or_else(|| {
            spec.security_context
                .as_ref()
                .and_then(|sc| sc.seccomp_profile.as_ref())
        });
    let profile = |t: ProfileType, localhost_ref: String| SecurityProfile {
        profile_type: t as i32,
        localhost_ref,
    };
    Ok(match field {
        None if options.seccomp_default => profile(ProfileType::RuntimeDefault, String::new()),
        None => profile(ProfileType::Unconfined, String::new()),
        Some(f) => match f.type_.as_str() {
            "RuntimeDefault" => profile(ProfileType::RuntimeDefault, String::new()),
            "Localhost" => {
                let name = f
                    .localhost_profile
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .ok_or(ContainerConfigError::SeccompLocalhostMissing)?;
                let path = options.seccomp_profile_root.join(name);
                profile(ProfileType::Localhost, path.to_string_lossy().into_owned())
            }
            _ => profile(ProfileType::Unconfined, String::new()),
        },
    })
}

/// A quantity of the container's requests or limits, in nano-units.
fn quantity(container: &Container, limits: bool, resource: &str) -> Option<i128> {
    let res = container.resources.as_ref()?;
    let map = if limits { &res.limits } else { &res.requests };
    let q = map.as_ref()?.get(resource)?;
    let nanos = parse_quantity_nanos(&q.0);
    if nanos.is_none() {
        tracing::warn!(
            container = container.name,
            resource,
            quantity = q.0,
            "unparsable quantity, ignoring it"
        );
    }
    nanos
}

/// Upstream `MilliValue()` as i64.
fn milli(nanos: i128) -> i64 {
    i64::try_from(nanos_to_milli(nanos)).unwrap_or(i64::MAX)
}

/// Upstream `Value()` as i64.
fn units(nanos: i128) -> i64 {
    i64::try_from(nanos_to_units(nanos)).unwrap_or(i64::MAX)
}

/// Upstream `generateLinuxContainerResources` (without memory QoS, an alpha feature):
/// cpu/memory as `calculateLinuxResources`, the OOM score, huge page limits and swap.
fn linux_resources(
    pod: &Pod,
    container: &Container,
    ctx: &ContainerContext<'_>,
) -> LinuxContainerResources {
    let mut r = calculate_linux_resources(
        quantity(container, false, "cpu"),
        quantity(container, true, "cpu"),
        quantity(container, true, "memory"),
        ctx.options,
    );
    if let Some(cpus) = ctx.cpuset_cpus {
        r.cpuset_cpus = cpus.cpus.to_owned();
        // Upstream `DisableCPUQuotaWithExclusiveCPUs`: CPUs of its own, no CFS quota (-1,
        // `cpu.max` `max`) where quotas are set at all (`cpuCFSQuota`).
        if cpus.exclusive
            && ctx.options.disable_cpu_quota_with_exclusive_cpus
            && ctx.options.cpu_cfs_quota
        {
            r.cpu_quota = -1;
        }
    }
    r.oom_score_adj = oom_score_adj(pod, container, ctx.qos_class, ctx.options.memory_capacity);
    r.hugepage_limits = hugepage_limits(container, &ctx.options.hugepage_sizes);
    configure_swap(&mut r, container, ctx.qos_class, ctx.options);
    r
}

/// Upstream `calculateLinuxResources`: shares from the cpu request (the limit when there is
/// no request), memory limit, CFS quota/period when `cpuCFSQuota`, and on cgroup v2
/// `memory.oom.group=1` unless `singleProcessOOMKill`.
pub fn calculate_linux_resources(
    cpu_request: Option<i128>,
    cpu_limit: Option<i128>,
    memory_limit: Option<i128>,
    options: &RuntimeOptions,
) -> LinuxContainerResources {
    // A missing request defaults to the limit (the API server does this for new pods).
    let shares_from = match cpu_request {
        Some(req) => milli(req),
        None => cpu_limit.map_or(0, milli),
    };
    let mut r = LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(shares_from),
        memory_limit_in_bytes: memory_limit.map_or(0, units),
        ..Default::default()
    };
    if options.cpu_cfs_quota {
        let period = options.cpu_cfs_quota_period_us;
        r.cpu_period = period;
        r.cpu_quota = milli_cpu_to_quota(cpu_limit.map_or(0, milli), period);
    }
    if options.cgroup_v2 && !options.single_process_oom_kill {
        r.unified
            .insert("memory.oom.group".to_owned(), "1".to_owned());
    }
    r
}

/// Upstream `applySandboxResources`: the sandbox's `resources` from the pod's aggregated
/// requests/limits (overhead excluded) and its `overhead` as a guaranteed allotment.
pub fn sandbox_resources(
    pod: &Pod,
    options: &RuntimeOptions,
) -> (LinuxContainerResources, LinuxContainerResources) {
    let reqs = crate::cm::resources::pod_requests(pod, true);
    let lims = crate::cm::resources::pod_limits(pod, true);
    let resources = calculate_linux_resources(
        reqs.get("cpu").copied(),
        Some(lims.get("cpu").copied().unwrap_or(0)),
        Some(lims.get("memory").copied().unwrap_or(0)),
        options,
    );
    let overhead = match pod.spec.as_ref().and_then(|s| s.overhead.as_ref()) {
        Some(o) => {
            let get = |k: &str| {
                Some(
                    o.get(k)
                        .and_then(|q| parse_quantity_nanos(&q.0))
                        .unwrap_or(0),
                )
            };
            calculate_linux_resources(get("cpu"), get("cpu"), get("memory"), options)
        }
        None => LinuxContainerResources::default(),
    };
    (resources, overhead)
}

/// Upstream `GetHugepageLimitsFromResources`: every page size of the host, limited to 0 unless
/// the container's limits name it.
fn hugepage_limits(container: &Container, sizes: &[u64]) -> Vec<HugepageLimit> {
    let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
    let mut wanted = std::collections::BTreeMap::new();
    for (name, q) in limits.into_iter().flatten() {
        let Some(size) = name.strip_prefix("hugepages-") else {
            continue;
        };
        let (Some(size), Some(limit)) = (parse_quantity_nanos(size), parse_quantity_nanos(&q.0))
        else {
            continue;
        };
        let Ok(size) = u64::try_from(nanos_to_units(size)) else {
            continue;
        };
        wanted.insert(
            hugepage_size_name(size),
            u64::try_from(nanos_to_units(limit)).unwrap_or(0),
        );
    }
    sizes
        .iter()
        .map(|size| {
            let page_size = hugepage_size_name(*size);
            HugepageLimit {
                limit: wanted.get(&page_size).copied().unwrap_or(0),
                page_size,
            }
        })
        .collect()
}

/// Upstream `configureContainerSwapResources` (NodeSwap on, as by default): nothing without a
/// swap controller; `LimitedSwap` gives a Burstable container with a memory request below its
/// limit `request / node memory × swap capacity` (v2 `memory.swap.max`); everything else gets
/// no swap (v1: memsw limit = memory limit; v2: `memory.swap.max=0`).
fn configure_swap(
    r: &mut LinuxContainerResources,
    container: &Container,
    qos_class: &str,
    options: &RuntimeOptions,
) {
    if !options.swap_controller_available {
        return;
    }
    let no_swap = |r: &mut LinuxContainerResources| {
        if options.cgroup_v2 {
            r.unified
                .insert("memory.swap.max".to_owned(), "0".to_owned());
        } else {
            r.memory_swap_limit_in_bytes = r.memory_limit_in_bytes;
        }
    };
    if options.swap_behavior != "LimitedSwap" {
        return no_swap(r);
    }
    let request = quantity(container, false, "memory").unwrap_or(0);
    let limit = quantity(container, true, "memory").unwrap_or(0);
    if qos_class != crate::qos::BURSTABLE || (request == 0 && limit == 0) || request == limit {
        return no_swap(r);
    }
    let request = units(request);
    if options.memory_capacity <= 0 || request > options.memory_capacity {
        return no_swap(r);
    }
    if !options.cgroup_v2 {
        // Upstream refuses to configure swap on cgroup v1 (and logs it).
        tracing::warn!(
            container = container.name,
            "LimitedSwap is not supported on cgroup v1"
        );
        return;
    }
    let swap = (request as f64 / options.memory_capacity as f64) * options.swap_capacity as f64;
    r.unified
        .insert("memory.swap.max".to_owned(), (swap as i64).to_string());
}

fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli.saturating_mul(period) / 1000).max(MIN_QUOTA_PERIOD)
}

/// Upstream `GetContainerOOMScoreAdjust`.
fn oom_score_adj(pod: &Pod, container: &Container, qos_class: &str, memory_capacity: i64) -> i64 {
    if is_node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match qos_class {
        "Guaranteed" => return GUARANTEED_OOM_SCORE_ADJ,
        "BestEffort" => return BESTEFFORT_OOM_SCORE_ADJ,
        _ => {}
    }
    let adj_for = |request: i64| {
        if memory_capacity <= 0 {
            1000
        } else {
            1000 - (1000i128 * i128::from(request) / i128::from(memory_capacity)) as i64
        }
    };
    let memory_request = |c: &Container| quantity(c, false, "memory").map_or(0, units);
    let mut adj = adj_for(memory_request(container));
    if is_sidecar(pod, container) {
        // A sidecar is never killed before the pod's regular containers.
        let spec = pod_spec(pod);
        let min_regular = spec
            .containers
            .iter()
            .map(memory_request)
            .min()
            .unwrap_or(0);
        adj = adj.min(adj_for(min_regular));
    }
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adj == BESTEFFORT_OOM_SCORE_ADJ {
        return adj - 1;
    }
    adj
}

/// Static, mirror or system-critical-priority pods with the `system-node-critical` class.
fn is_node_critical(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let critical = pod.source().is_some_and(|s| s.is_static())
        || pod.annotation(CONFIG_MIRROR_ANNOTATION).is_some()
        || spec
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY);
    critical && spec.and_then(|s| s.priority_class_name.as_deref()) == Some("system-node-critical")
}

/// A restartable init container (`restartPolicy: Always`).
fn is_sidecar(pod: &Pod, container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|ics| ics.iter().any(|c| c.name == container.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1::Capability;
    use serde_json::json;

    const GI: i64 = 1 << 30;

    fn pod_with(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "uid-1"},
            "spec": spec,
        }))
        .expect("valid pod")
    }

    fn container(v: serde_json::Value) -> Container {
        serde_json::from_value(v).expect("valid container")
    }

    struct Inputs {
        env: EnvContext<'static>,
        image_user: ImageUser,
        options: RuntimeOptions,
        mounts: Vec<Mount>,
        qos: &'static str,
    }

    impl Inputs {
        fn new() -> Self {
            Self {
                env: EnvContext::new("node-1", &[], &[]),
                image_user: ImageUser::default(),
                options: RuntimeOptions {
                    memory_capacity: 8 * GI,
                    ..Default::default()
                },
                mounts: Vec::new(),
                qos: "BestEffort",
            }
        }

        fn ctx(&self) -> ContainerContext<'_> {
            ContainerContext {
                env: &self.env,
                image_ref: "sha256:abc",
                restart_count: 3,
                qos_class: self.qos,
                image_user: &self.image_user,
                mounts: &self.mounts,
                options: &self.options,
                cpuset_cpus: None,
                pid_namespace_target: None,
            }
        }
    }

    #[test]
    fn cpuset_from_the_cpu_manager() {
        let pod = pod_with(serde_json::json!({"containers": [{"name": "c", "image": "busybox"}]}));
        let c = container(serde_json::json!({"name": "c", "image": "busybox"}));
        let inputs = Inputs::new();
        let res = |cfg: &ContainerConfig| linux(cfg).resources.clone().unwrap().cpuset_cpus;
        assert_eq!(res(&generate(&pod, &c, &inputs)), "");
        let ctx = ContainerContext {
            cpuset_cpus: Some(CpuAssignment {
                cpus: "1,3",
                exclusive: false,
            }),
            ..inputs.ctx()
        };
        assert_eq!(
            res(&generate_container_config(&pod, &c, &ctx).unwrap()),
            "1,3"
        );
    }

    #[test]
    fn exclusive_cpus_get_no_cfs_quota_as_upstream() {
        let c = container(
            serde_json::json!({"name": "c", "image": "busybox", "resources": {
            "requests": {"cpu": "2", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "64Mi"}}}),
        );
        let pod = pod_with(serde_json::json!({"containers": [{"name": "c", "image": "busybox"}]}));
        let mut inputs = Inputs::new();
        inputs.qos = "Guaranteed";
        let quota = |inputs: &Inputs, exclusive: bool| {
            let ctx = ContainerContext {
                cpuset_cpus: Some(CpuAssignment {
                    cpus: "2-3",
                    exclusive,
                }),
                ..inputs.ctx()
            };
            let r = linux(&generate_container_config(&pod, &c, &ctx).unwrap())
                .resources
                .clone()
                .unwrap();
            (r.cpu_quota, r.cpu_period, r.cpuset_cpus)
        };
        assert_eq!(quota(&inputs, false), (200_000, 100_000, "2-3".to_owned()));
        assert_eq!(quota(&inputs, true), (-1, 100_000, "2-3".to_owned()));
        // DisableCPUQuotaWithExclusiveCPUs=false keeps the quota.
        inputs.options.disable_cpu_quota_with_exclusive_cpus = false;
        assert_eq!(quota(&inputs, true), (200_000, 100_000, "2-3".to_owned()));
        // cpuCFSQuota=false sets no quota at all.
        inputs.options.disable_cpu_quota_with_exclusive_cpus = true;
        inputs.options.cpu_cfs_quota = false;
        assert_eq!(quota(&inputs, true), (0, 0, "2-3".to_owned()));
    }

    fn generate(pod: &Pod, c: &Container, inputs: &Inputs) -> ContainerConfig {
        generate_container_config(pod, c, &inputs.ctx()).expect("config")
    }

    fn linux(cfg: &ContainerConfig) -> &LinuxContainerConfig {
        cfg.linux.as_ref().expect("linux config")
    }

    #[test]
    fn basic_fields() {
        let c = container(json!({
            "name": "app", "image": "busybox:1.0",
            "command": ["sh", "-c"], "args": ["echo $(GREETING)"],
            "env": [{"name": "GREETING", "value": "hi"}],
            "workingDir": "/work", "stdin": true, "stdinOnce": true, "tty": true,
        }));
        let pod = pod_with(json!({"containers": [c]}));
        let mut inputs = Inputs::new();
        inputs.mounts = vec![Mount {
            container_path: "/dev/termination-log".to_owned(),
            host_path: "/var/lib/kubelet/pods/uid-1/containers/app/abcd".to_owned(),
            ..Default::default()
        }];
        let cfg = generate(&pod, &c, &inputs);
        assert_eq!(
            cfg.metadata,
            Some(ContainerMetadata {
                name: "app".to_owned(),
                attempt: 3
            })
        );
        let image = cfg.image.clone().unwrap();
        assert_eq!(
            (image.image.as_str(), image.user_specified_image.as_str()),
            ("sha256:abc", "busybox:1.0")
        );
        assert_eq!(cfg.command, vec!["sh", "-c"]);
        assert_eq!(cfg.args, vec!["echo hi"]);
        assert_eq!(
            cfg.envs,
            vec![KeyValue {
                key: "GREETING".to_owned(),
                value: "hi".to_owned()
            }]
        );
        assert_eq!(cfg.working_dir, "/work");
        assert_eq!(cfg.mounts, inputs.mounts);
        assert_eq!(cfg.labels, labels::container_labels(&c, &pod));
        assert_eq!(
            cfg.annotations,
            labels::container_annotations(&c, &pod, 3, hash_container(&c))
        );
        assert_eq!(cfg.log_path, "app/3.log");
        assert!(cfg.stdin && cfg.stdin_once && cfg.tty);
        let sc = linux(&cfg).security_context.as_ref().unwrap();
        assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert_eq!(sc.readonly_paths.len(), DEFAULT_READONLY_PATHS.len());
        // Unknown image user: root, as upstream assumes.
        assert_eq!(sc.run_as_user, Some(Int64Value { value: 0 }));
        assert_eq!(
            sc.seccomp.as_ref().unwrap().profile_type,
            ProfileType::Unconfined as i32
        );
    }

    #[test]
    fn resources_and_oom_score() {
        type Want = (i64, i64, i64, i64, i64);
        #[rustfmt::skip]
        let cases: Vec<(&str, serde_json::Value, &str, Want)> = vec![
            // (cpu_shares, cpu_quota, cpu_period, memory_limit, oom_score_adj)
            ("best effort", json!({}), "BestEffort", (2, 0, 100_000, 0, 1000)),
            ("cpu limit only: shares from the limit", json!({"limits": {"cpu": "500m"}}), "Burstable",
             (512, 50_000, 100_000, 0, 999)),
            ("burstable with memory request", json!({
                "requests": {"cpu": "250m", "memory": "1Gi"},
                "limits": {"cpu": "1", "memory": "2Gi"}}), "Burstable",
             (256, 100_000, 100_000, 2 * GI, 875)),
            ("guaranteed", json!({
                "requests": {"cpu": "2", "memory": "1Gi"},
                "limits": {"cpu": "2", "memory": "1Gi"}}), "Guaranteed",
             (2048, 200_000, 100_000, GI, -997)),
            ("tiny cpu hits the minimums", json!({
                "requests": {"cpu": "1m"}, "limits": {"cpu": "1m"}}), "Burstable",
             (2, 1000, 100_000, 0, 999)),
            ("request above capacity clamps to 3", json!({
                "requests": {"memory": "16Gi"}}), "Burstable",
             (2, 0, 100_000, 0, 3)),
            ("decimal memory and fractional cpu", json!({
                "requests": {"cpu": "0.1"}, "limits": {"memory": "500M", "cpu": "1.5"}}), "Burstable",
             (102, 150_000, 100_000, 500_000_000, 999)),
        ];
        for (name, resources, qos, want) in cases {
            let c = container(json!({"name": "c", "resources": resources}));
            let pod = pod_with(json!({"containers": [c]}));
            let mut inputs = Inputs::new();
            inputs.qos = qos;
            let cfg = generate(&pod, &c, &inputs);
            let r = linux(&cfg).resources.as_ref().unwrap();
            assert_eq!(
                (
                    r.cpu_shares,
                    r.cpu_quota,
                    r.cpu_period,
                    r.memory_limit_in_bytes,
                    r.oom_score_adj
                ),
                want,
                "{name}"
            );
            assert!(
                r.unified.is_empty(),
                "{name}: cgroup v1 has no unified settings"
            );
        }
    }

    #[test]
    fn hugepages_and_swap() {
        let c = container(json!({"name": "c", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"},
            "limits": {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"}}}));
        let pod = pod_with(json!({"containers": [c]}));
        let mut inputs = Inputs::new();
        inputs.qos = "Guaranteed";
        inputs.options.hugepage_sizes = vec![2 << 20, 1 << 30];
        let cfg = generate(&pod, &c, &inputs);
        let r = linux(&cfg).resources.as_ref().unwrap();
        let hp: Vec<(&str, u64)> = r
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.as_str(), h.limit))
            .collect();
        assert_eq!(hp, vec![("2MB", 4 << 20), ("1GB", 0)]);
        assert_eq!(
            r.memory_swap_limit_in_bytes, 0,
            "no swap controller: untouched"
        );

        // (qos, requests, limits, v2, behavior) → (memsw, memory.swap.max)
        #[rustfmt::skip]
        type Case<'a> = (&'a str, serde_json::Value, serde_json::Value, bool, &'a str, i64, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "Burstable",
                json!({"memory": "1Gi"}),
                json!({"memory": "2Gi"}),
                false,
                "",
                2 * GI,
                None,
            ),
            (
                "Burstable",
                json!({"memory": "1Gi"}),
                json!({"memory": "2Gi"}),
                true,
                "NoSwap",
                0,
                Some("0"),
            ),
            // 1Gi of 4Gi memory → a quarter of the 2Gi swap.
            (
                "Burstable",
                json!({"memory": "1Gi"}),
                json!({"memory": "2Gi"}),
                true,
                "LimitedSwap",
                0,
                Some("536870912"),
            ),
            (
                "Guaranteed",
                json!({"memory": "1Gi"}),
                json!({"memory": "1Gi"}),
                true,
                "LimitedSwap",
                0,
                Some("0"),
            ),
            (
                "Burstable",
                json!({"memory": "1Gi"}),
                json!({"memory": "1Gi"}),
                true,
                "LimitedSwap",
                0,
                Some("0"),
            ),
            (
                "Burstable",
                json!({"memory": "1Gi"}),
                json!({"memory": "2Gi"}),
                false,
                "LimitedSwap",
                0,
                None,
            ),
        ];
        for (i, (qos, req, lim, v2, behavior, memsw, swap_max)) in cases.into_iter().enumerate() {
            let c = container(json!({"name": "c", "resources": {"requests": req, "limits": lim}}));
            let pod = pod_with(json!({"containers": [c]}));
            let mut inputs = Inputs::new();
            inputs.qos = qos;
            inputs.options.cgroup_v2 = v2;
            inputs.options.single_process_oom_kill = true;
            inputs.options.swap_controller_available = true;
            inputs.options.swap_behavior = behavior.to_owned();
            inputs.options.memory_capacity = 4 * GI;
            inputs.options.swap_capacity = 2 * GI;
            let cfg = generate(&pod, &c, &inputs);
            let r = linux(&cfg).resources.as_ref().unwrap();
            assert_eq!(r.memory_swap_limit_in_bytes, memsw, "case {i}");
            assert_eq!(
                r.unified.get("memory.swap.max").map(String::as_str),
                swap_max,
                "case {i}"
            );
        }
    }

    #[test]
    fn sandbox_resources_from_pod_and_overhead() {
        let pod = pod_with(json!({
            "overhead": {"cpu": "100m", "memory": "10Mi"},
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi"}}}]}));
        let (r, o) = sandbox_resources(&pod, &RuntimeOptions::default());
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
                r.memory_limit_in_bytes
            ),
            (512, 50_000, 100_000, 128 << 20)
        );
        assert_eq!(
            (o.cpu_shares, o.cpu_quota, o.memory_limit_in_bytes),
            (102, 10_000, 10 << 20)
        );
        let be = pod_with(json!({"containers": [{"name": "a"}]}));
        let (r, o) = sandbox_resources(&be, &RuntimeOptions::default());
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2, 0, 0)
        );
        assert_eq!(o, LinuxContainerResources::default());
    }

    #[test]
    fn node_options_shape_resources() {
        let c = container(json!({"name": "c", "resources": {"limits": {"cpu": "1"}}}));
        let pod = pod_with(json!({"containers": [c]}));
        let mut inputs = Inputs::new();
        inputs.options.cpu_cfs_quota = false;
        inputs.options.cgroup_v2 = true;
        let cfg = generate(&pod, &c, &inputs);
        let r = linux(&cfg).resources.as_ref().unwrap();
        assert_eq!((r.cpu_quota, r.cpu_period, r.cpu_shares), (0, 0, 1024));
        assert_eq!(
            r.unified.get("memory.oom.group").map(String::as_str),
            Some("1")
        );
        inputs.options.single_process_oom_kill = true;
        let cfg = generate(&pod, &c, &inputs);
        assert!(linux(&cfg).resources.as_ref().unwrap().unified.is_empty());
    }

    #[test]
    fn oom_score_for_critical_pods_and_sidecars() {
        let c = container(json!({"name": "c", "resources": {"requests": {"memory": "1Gi"}}}));
        let mut pod =
            pod_with(json!({"containers": [c], "priorityClassName": "system-node-critical"}));
        pod.metadata.annotations = Some(
            [(
                crate::types::CONFIG_SOURCE_ANNOTATION.to_owned(),
                "file".to_owned(),
            )]
            .into(),
        );
        let mut inputs = Inputs::new();
        inputs.qos = "Burstable";
        let adj = |cfg: &ContainerConfig| linux(cfg).resources.as_ref().unwrap().oom_score_adj;
        assert_eq!(adj(&generate(&pod, &c, &inputs)), -997);

        // A sidecar with a smaller request than the regular containers gets their score.
        let sidecar = container(json!({"name": "proxy", "restartPolicy": "Always",
            "resources": {"requests": {"memory": "100Mi"}}}));
        let regular =
            container(json!({"name": "app", "resources": {"requests": {"memory": "2Gi"}}}));
        let pod = pod_with(json!({"initContainers": [sidecar], "containers": [regular]}));
        assert_eq!(adj(&generate(&pod, &sidecar, &inputs)), 750);
        assert_eq!(adj(&generate(&pod, &regular, &inputs)), 750);
    }

    #[test]
    fn ephemeral_target_joins_the_target_pid_namespace() {
        use k8s_cri::v1::NamespaceMode;
        let debug = container(json!({"name": "debug", "image": "busybox"}));
        let pid_of = |pod: &Pod, target: Option<&str>| {
            let inputs = Inputs::new();
            let ctx = ContainerContext {
                pid_namespace_target: target,
                ..inputs.ctx()
            };
            let cfg = generate_container_config(pod, &debug, &ctx).expect("config");
            let ns = linux(&cfg)
                .security_context
                .clone()
                .and_then(|sc| sc.namespace_options)
                .expect("namespace options");
            (ns.pid, ns.target_id, ns.network, ns.ipc)
        };
        let pod = pod_with(json!({"containers": [{"name": "app", "image": "busybox"}]}));
        let pod_ns = NamespaceMode::Pod as i32;
        assert_eq!(
            pid_of(&pod, Some("0123abcd")),
            (
                NamespaceMode::Target as i32,
                "0123abcd".to_owned(),
                pod_ns,
                pod_ns
            )
        );
        // No target: the container's own PID namespace, no target ID.
        assert_eq!(
            pid_of(&pod, None),
            (
                NamespaceMode::Container as i32,
                String::new(),
                pod_ns,
                pod_ns
            )
        );
        // A pod that shares one PID namespace, or uses the host's, keeps it.
        let shared = pod_with(json!({"shareProcessNamespace": true,
            "containers": [{"name": "app", "image": "busybox"}]}));
        assert_eq!(
            pid_of(&shared, Some("0123abcd")),
            (pod_ns, String::new(), pod_ns, pod_ns)
        );
        let host = pod_with(json!({"hostPID": true,
            "containers": [{"name": "app", "image": "busybox"}]}));
        assert_eq!(
            pid_of(&host, Some("0123abcd")).0,
            NamespaceMode::Node as i32
        );
    }

    #[test]
    fn security_context_merging() {
        let c = container(json!({"name": "c", "securityContext": {
            "runAsUser": 2000, "privileged": true, "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false, "procMount": "Unmasked",
            "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
        }}));
        let pod = pod_with(
            json!({"containers": [c], "hostPID": true, "securityContext": {
            "runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [5000],
            "seLinuxOptions": {"type": "spc_t"}}}),
        );
        let cfg = generate(&pod, &c, &Inputs::new());
        let sc = linux(&cfg).security_context.clone().unwrap();
        assert_eq!(sc.run_as_user, Some(Int64Value { value: 2000 }));
        assert_eq!(sc.run_as_group, Some(Int64Value { value: 3000 }));
        assert_eq!(sc.run_as_username, "");
        assert!(sc.privileged && sc.readonly_rootfs && sc.no_new_privs);
        assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
        assert_eq!(
            sc.capabilities,
            Some(Capability {
                add_capabilities: vec!["NET_ADMIN".to_owned()],
                drop_capabilities: vec!["ALL".to_owned()],
                add_ambient_capabilities: vec![],
            })
        );
        assert_eq!(sc.supplemental_groups, vec![2000, 5000]);
        assert_eq!(sc.selinux_options.unwrap().r#type, "spc_t");
        let ns = sc.namespace_options.unwrap();
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (
                k8s_cri::v1::NamespaceMode::Pod as i32,
                k8s_cri::v1::NamespaceMode::Node as i32,
                k8s_cri::v1::NamespaceMode::Pod as i32
            )
        );

        // No runAsUser anywhere: the image's user is used.
        let c =
            container(json!({"name": "c", "securityContext": {"allowPrivilegeEscalation": true}}));
        let pod = pod_with(json!({"containers": [c]}));
        let mut inputs = Inputs::new();
        inputs.image_user = ImageUser {
            uid: None,
            username: "nobody".to_owned(),
        };
        let cfg = generate(&pod, &c, &inputs);
        let sc = linux(&cfg).security_context.clone().unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_username.as_str()),
            (None, "nobody")
        );
        assert!(!sc.no_new_privs);
        assert_eq!(sc.capabilities, None);
    }

    #[test]
    fn seccomp_profiles() {
        let root = PathBuf::from("/var/lib/kubelet/seccomp");
        type Want = Result<(ProfileType, String), &'static str>;
        #[rustfmt::skip]
        let cases: Vec<(&str, serde_json::Value, serde_json::Value, bool, Want)> = vec![
            ("unset", json!(null), json!(null), false, Ok((ProfileType::Unconfined, String::new()))),
            ("seccompDefault", json!(null), json!(null), true, Ok((ProfileType::RuntimeDefault, String::new()))),
            ("pod RuntimeDefault", json!({"type": "RuntimeDefault"}), json!(null), false,
             Ok((ProfileType::RuntimeDefault, String::new()))),
            ("container overrides pod", json!({"type": "RuntimeDefault"}), json!({"type": "Unconfined"}), true,
             Ok((ProfileType::Unconfined, String::new()))),
            ("localhost", json!(null), json!({"type": "Localhost", "localhostProfile": "profiles/audit.json"}), false,
             Ok((ProfileType::Localhost, root.join("profiles/audit.json").to_string_lossy().into_owned()))),
            ("localhost without a profile", json!({"type": "Localhost"}), json!(null), false,
             Err("localhostProfile must be set if seccompProfile type is Localhost.")),
            // CVE-2023-2431: an empty profile ran unconfined; it is an error at either level,
            // and seccompDefault does not paper over it.
            ("pod localhost, empty profile", json!({"type": "Localhost", "localhostProfile": ""}), json!(null), true,
             Err("localhostProfile must be set if seccompProfile type is Localhost.")),
            ("container localhost, empty profile", json!(null), json!({"type": "Localhost", "localhostProfile": ""}), false,
             Err("localhostProfile must be set if seccompProfile type is Localhost.")),
            ("container localhost, no profile", json!({"type": "RuntimeDefault"}), json!({"type": "Localhost"}), true,
             Err("localhostProfile must be set if seccompProfile type is Localhost.")),
        ];
        for (name, pod_profile, container_profile, default, want) in cases {
            let c = container(
                json!({"name": "c", "securityContext": {"seccompProfile": container_profile}}),
            );
            let pod = pod_with(
                json!({"containers": [c], "securityContext": {"seccompProfile": pod_profile}}),
            );
            let mut inputs = Inputs::new();
            inputs.options.seccomp_default = default;
            inputs.options.seccomp_profile_root = root.clone();
            let got = generate_container_config(&pod, &c, &inputs.ctx());
            match want {
                Ok((t, localhost_ref)) => {
                    let cfg = got.unwrap();
                    let p = linux(&cfg)
                        .security_context
                        .as_ref()
                        .unwrap()
                        .seccomp
                        .clone()
                        .unwrap();
                    assert_eq!(
                        (p.profile_type, p.localhost_ref),
                        (t as i32, localhost_ref),
                        "{name}"
                    );
                }
                Err(msg) => assert_eq!(got.unwrap_err().to_string(), msg, "{name}"),
            }
        }
    }

    #[test]
    fn run_as_non_root() {
        let pod_desc = "\"web_prod(uid-1)\"";
        #[rustfmt::skip]
        let cases: Vec<(&str, serde_json::Value, ImageUser, Option<String>)> = vec![
            ("not requested", json!({}), ImageUser::default(), None),
            ("explicit root uid", json!({"runAsNonRoot": true, "runAsUser": 0}), ImageUser::default(),
             Some(format!("container's runAsUser breaks non-root policy (pod: {pod_desc}, container: c)"))),
            ("explicit non-root uid", json!({"runAsNonRoot": true, "runAsUser": 1000}), ImageUser::default(), None),
            ("image runs as root", json!({"runAsNonRoot": true}), ImageUser { uid: Some(0), username: String::new() },
             Some(format!("container has runAsNonRoot and image will run as root (pod: {pod_desc}, container: c)"))),
            ("unknown image user is root", json!({"runAsNonRoot": true}), ImageUser::default(),
             Some(format!("container has runAsNonRoot and image will run as root (pod: {pod_desc}, container: c)"))),
            ("image user by name", json!({"runAsNonRoot": true}), ImageUser { uid: None, username: "app".to_owned() },
             Some(format!("container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root (pod: {pod_desc}, container: c)"))),
            ("image non-root uid", json!({"runAsNonRoot": true}), ImageUser { uid: Some(65534), username: String::new() }, None),
        ];
        for (name, sc, image_user, want) in cases {
            let c = container(json!({"name": "c", "securityContext": sc}));
            let pod = pod_with(json!({"containers": [c]}));
            let mut inputs = Inputs::new();
            inputs.image_user = image_user;
            let got = generate_container_config(&pod, &c, &inputs.ctx());
            match want {
                None => assert!(got.is_ok(), "{name}: {:?}", got.err()),
                Some(msg) => assert_eq!(got.unwrap_err().to_string(), msg, "{name}"),
            }
        }
        // The pod-level setting applies too.
        let c = container(json!({"name": "c"}));
        let pod = pod_with(json!({"containers": [c], "securityContext": {"runAsNonRoot": true}}));
        assert!(generate_container_config(&pod, &c, &Inputs::new().ctx()).is_err());
    }

    #[test]
    fn image_user_from_cri_image() {
        let image = Image {
            uid: Some(Int64Value { value: 1000 }),
            username: "ignored".to_owned(),
            ..Default::default()
        };
        assert_eq!(
            ImageUser::from_image(Some(&image)),
            ImageUser {
                uid: Some(1000),
                username: String::new()
            }
        );
        let image = Image {
            username: "app".to_owned(),
            ..Default::default()
        };
        assert_eq!(ImageUser::from_image(Some(&image)).username, "app");
        assert_eq!(ImageUser::from_image(None), ImageUser::default());
    }

    #[test]
    fn env_errors_become_config_errors() {
        let c = container(json!({"name": "c", "env": [{"name": "X", "valueFrom":
            {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}));
        let pod = pod_with(json!({"containers": [c]}));
        let inputs = Inputs::new();
        let want = make_environment(&pod, &c, &inputs.env).unwrap_err();
        let err = generate_container_config(&pod, &c, &inputs.ctx()).unwrap_err();
        assert!(matches!(err, ContainerConfigError::Env(_)));
        assert_eq!(err.to_string(), want.to_string());
        assert!(!err.to_string().is_empty());
    }
}
