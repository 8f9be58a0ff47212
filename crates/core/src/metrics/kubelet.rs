//! The kubelet's `/metrics` families (upstream `pkg/kubelet/metrics`, `pkg/kubelet/server/metrics`
//! and the process collector): names, help, labels and buckets as upstream. Owns every series in
//! one `KubeletMetrics` value that the agent creates and hands (cheap clones) to the components
//! it instruments; receives their record calls; emits the text exposition via `render`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics::process::ProcessCollector;
use crate::metrics::registry::{
    Collector, CounterVec, DEFAULT_BUCKETS, Desc, Exposition, GaugeVec, HistogramVec,
    exponential_buckets,
};
use crate::sync;

/// Upstream `podStartupDurationBuckets`.
pub const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Upstream `imagePullDurationBuckets`.
pub const IMAGE_PULL_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0,
    1200.0, 1800.0, 2700.0, 3600.0,
];

/// Upstream `container_type` label values.
pub const CONTAINER: &str = "container";
pub const INIT_CONTAINER: &str = "init_container";
pub const EPHEMERAL_CONTAINER: &str = "ephemeral_container";

/// The `image_size_in_bytes` label of `kubelet_image_pull_duration_seconds` (upstream
/// `GetImageSizeBucket`): the range the size falls in.
pub fn image_size_bucket(size_bytes: u64) -> &'static str {
    const MB: u64 = 1024 * 1024;
    const GB: u64 = 1024 * MB;
    const BUCKETS: &[(u64, &str)] = &[
        (100 * GB, "GT100GB"),
        (60 * GB, "60GB-100GB"),
        (40 * GB, "40GB-60GB"),
        (30 * GB, "30GB-40GB"),
        (20 * GB, "20GB-30GB"),
        (10 * GB, "10GB-20GB"),
        (5 * GB, "5GB-10GB"),
        (GB, "1GB-5GB"),
        (500 * MB, "500MB-1GB"),
        (100 * MB, "100MB-500MB"),
        (10 * MB, "10MB-100MB"),
    ];
    BUCKETS
        .iter()
        .find(|(lower, _)| size_bytes >= *lower)
        .map_or("0-10MB", |(_, label)| label)
}

/// `[ALPHA] ` + help, as component-base prints an alpha metric's help.
fn alpha(help: &str) -> String {
    format!("[ALPHA] {help}")
}

/// The kubelet HTTP server's URL roots that get their own `path` label (upstream registers a
/// bucket per installed handler; everything else is `other`).
const HTTP_PATH_BUCKETS: &[&str] = &[
    "attach",
    "checkpoint",
    "configz",
    "containerLogs",
    "debug",
    "exec",
    "healthz",
    "logs",
    "metrics",
    "metrics/cadvisor",
    "metrics/probes",
    "metrics/resource",
    "pods",
    "portForward",
    "pprof",
    "run",
    "runningpods",
    "stats",
];

/// Upstream `getMetricMethodBucket` / `getMetricBucket` (`getURLRootPath`: the first path
/// segment, two for `/metrics/…`) / `isLongRunningRequest`: the `method`, `path` and
/// `long_running` labels of an HTTP request. Upstream's long-running set spells `portforward`
/// in lower case, so `/portForward` requests are labelled `false` there and here alike.
pub fn http_request_labels(method: &str, path: &str) -> (&'static str, String, &'static str) {
    const METHODS: &[&str] = &[
        "OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT",
    ];
    let method = METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other");
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let first = parts.next().unwrap_or("");
    let root = match (first, parts.next()) {
        ("metrics", Some(second)) => format!("metrics/{second}"),
        _ => first.to_owned(),
    };
    let long_running = matches!(root.as_str(), "exec" | "attach" | "portforward" | "debug");
    let bucket = if HTTP_PATH_BUCKETS.contains(&root.as_str()) {
        root
    } else {
        "other".to_owned()
    };
    (method, bucket, if long_running { "true" } else { "false" })
}

struct Families {
    node_name: GaugeVec,
    running_pods: GaugeVec,
    running_containers: GaugeVec,
    desired_pods: GaugeVec,
    active_pods: GaugeVec,
    mirror_pods: GaugeVec,
    restarted_pods: CounterVec,
    pod_start: HistogramVec,
    pod_start_sli: HistogramVec,
    pod_start_total: HistogramVec,
    pod_worker: HistogramVec,
    pod_worker_start: HistogramVec,
    pleg_relist: HistogramVec,
    pleg_interval: HistogramVec,
    pleg_last_seen: GaugeVec,
    runtime_ops: CounterVec,
    runtime_ops_duration: HistogramVec,
    runtime_ops_errors: CounterVec,
    run_podsandbox_duration: HistogramVec,
    run_podsandbox_errors: CounterVec,
    started_pods: CounterVec,
    started_pods_errors: CounterVec,
    started_containers: CounterVec,
    started_containers_errors: CounterVec,
    evictions: CounterVec,
    image_pull: HistogramVec,
    http_requests: CounterVec,
    http_duration: HistogramVec,
    http_inflight: GaugeVec,
    shutdown_start: GaugeVec,
    shutdown_end: GaugeVec,
    shutdown_lock_held: GaugeVec,
    shutdown_inhibit_delay: GaugeVec,
    shutdown_protected: GaugeVec,
    task_panics: CounterVec,
}

impl Families {
    fn new() -> Self {
        let d = |name: &str, help: &str, labels: &[&'static str]| {
            Desc::new(format!("kubelet_{name}"), alpha(help), labels)
        };
        let runtime_buckets = exponential_buckets(0.005, 2.5, 14);
        Self {
            node_name: GaugeVec::new(d(
                "node_name",
                "The node's name. The count is always 1.",
                &["node"],
            )),
            running_pods: GaugeVec::new(d(
                "running_pods",
                "Number of pods that have a running pod sandbox",
                &[],
            )),
            running_containers: GaugeVec::new(d(
                "running_containers",
                "Number of containers currently running",
                &["container_state"],
            )),
            desired_pods: GaugeVec::new(d(
                "desired_pods",
                "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
                &["static"],
            )),
            active_pods: GaugeVec::new(d(
                "active_pods",
                "The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.",
                &["static"],
            )),
            mirror_pods: GaugeVec::new(d(
                "mirror_pods",
                "The number of mirror pods the kubelet will try to create (one per admitted static pod)",
                &[],
            )),
            restarted_pods: CounterVec::new(d(
                "restarted_pods_total",
                "Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
                &["static"],
            )),
            pod_start: HistogramVec::new(
                d(
                    "pod_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                    &[],
                ),
                POD_START_BUCKETS,
            ),
            pod_start_sli: HistogramVec::new(
                d(
                    "pod_start_sli_duration_seconds",
                    "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                    &["first_with_network"],
                ),
                POD_START_BUCKETS,
            ),
            pod_start_total: HistogramVec::new(
                d(
                    "pod_start_total_duration_seconds",
                    "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                    &["first_with_network"],
                ),
                POD_START_BUCKETS,
            ),
            pod_worker: HistogramVec::new(
                d(
                    "pod_worker_duration_seconds",
                    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                    &["operation_type"],
                ),
                DEFAULT_BUCKETS,
            ),
            pod_worker_start: HistogramVec::new(
                d(
                    "pod_worker_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod to starting a worker.",
                    &[],
                ),
                DEFAULT_BUCKETS,
            ),
            pleg_relist: HistogramVec::new(
                d(
                    "pleg_relist_duration_seconds",
                    "Duration in seconds for relisting pods in PLEG.",
                    &[],
                ),
                DEFAULT_BUCKETS,
            ),
            pleg_interval: HistogramVec::new(
                d(
                    "pleg_relist_interval_seconds",
                    "Interval in seconds between relisting in PLEG.",
                    &[],
                ),
                DEFAULT_BUCKETS,
            ),
            pleg_last_seen: GaugeVec::new(d(
                "pleg_last_seen_seconds",
                "Timestamp in seconds when PLEG was last seen active.",
                &[],
            )),
            runtime_ops: CounterVec::new(d(
                "runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                &["operation_type"],
            )),
            runtime_ops_duration: HistogramVec::new(
                d(
                    "runtime_operations_duration_seconds",
                    "Duration in seconds of runtime operations. Broken down by operation type.",
                    &["operation_type"],
                ),
                &runtime_buckets,
            ),
            runtime_ops_errors: CounterVec::new(d(
                "runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                &["operation_type"],
            )),
            run_podsandbox_duration: HistogramVec::new(
                d(
                    "run_podsandbox_duration_seconds",
                    "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
                    &["runtime_handler"],
                ),
                DEFAULT_BUCKETS,
            ),
            run_podsandbox_errors: CounterVec::new(d(
                "run_podsandbox_errors_total",
                "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
                &["runtime_handler"],
            )),
            started_pods: CounterVec::new(d(
                "started_pods_total",
                "Cumulative number of pods started",
                &[],
            )),
            started_pods_errors: CounterVec::new(d(
                "started_pods_errors_total",
                "Cumulative number of errors when starting pods",
                &[],
            )),
            started_containers: CounterVec::new(d(
                "started_containers_total",
                "Cumulative number of containers started",
                &["container_type"],
            )),
            started_containers_errors: CounterVec::new(d(
                "started_containers_errors_total",
                "Cumulative number of errors when starting containers",
                &["container_type", "code"],
            )),
            evictions: CounterVec::new(d(
                "evictions",
                "Cumulative number of pod evictions by eviction signal",
                &["eviction_signal"],
            )),
            image_pull: HistogramVec::new(
                d(
                    "image_pull_duration_seconds",
                    "Duration in seconds to pull an image.",
                    &["image_size_in_bytes"],
                ),
                IMAGE_PULL_BUCKETS,
            ),
            http_requests: CounterVec::new(d(
                "http_requests_total",
                "Number of the http requests received since the server started",
                &["method", "path", "server_type", "long_running"],
            )),
            http_duration: HistogramVec::new(
                d(
                    "http_requests_duration_seconds",
                    "Duration in seconds to serve http requests",
                    &["method", "path", "server_type", "long_running"],
                ),
                DEFAULT_BUCKETS,
            ),
            http_inflight: GaugeVec::new(d(
                "http_inflight_requests",
                "Number of the inflight http requests",
                &["method", "path", "server_type", "long_running"],
            )),
            shutdown_start: GaugeVec::new(d(
                "graceful_shutdown_start_time_seconds",
                "Last graceful shutdown start time since unix epoch in seconds",
                &[],
            )),
            shutdown_end: GaugeVec::new(d(
                "graceful_shutdown_end_time_seconds",
                "Last graceful shutdown end time since unix epoch in seconds",
                &[],
            )),
            // Ours (kubernetes/kubernetes#107043, #110755): whether a shutdown would be
            // graceful, visible before one happens. Only present when a grace period is set.
            shutdown_lock_held: GaugeVec::unset(d(
                "graceful_shutdown_inhibit_lock_held",
                "1 while the kubelet holds (and logind lists) its delay inhibitor lock on shutdown, else 0",
                &[],
            )),
            shutdown_inhibit_delay: GaugeVec::unset(d(
                "graceful_shutdown_inhibit_delay_seconds",
                "logind's effective InhibitDelayMaxSec as last read by the kubelet",
                &[],
            )),
            shutdown_protected: GaugeVec::unset(d(
                "graceful_shutdown_protected",
                "1 when a node shutdown would give pods their configured grace periods (lock held and InhibitDelayMaxSec covers shutdownGracePeriod), else 0",
                &[],
            )),
            // Ours (no upstream equivalent: a Go kubelet crashes on any panic).
            task_panics: CounterVec::new(Desc::new(
                "rkubelet_task_panics_total".to_owned(),
                "Panics caught in per-pod tasks, which were restarted, by task kind (pod_worker, probe_worker)".to_owned(),
                &["task"],
            )),
        }
    }
}

/// Image pulls of one pod (upstream `podStartupLatencyTracker`'s first/last pull times).
#[derive(Debug, Clone, Copy)]
struct PodPulls {
    first_started: SystemTime,
    last_finished: Option<SystemTime>,
}

#[derive(Default)]
struct StartTracker {
    pulls: HashMap<String, PodPulls>,
    /// Pods whose start was already recorded (a pod's start is observed once).
    started: BTreeSet<String>,
    first_network_pod_seen: bool,
    /// `container_state` values set by the last relist (reset to 0 when they disappear).
    container_states: BTreeSet<String>,
}

struct Inner {
    f: Families,
    process: ProcessCollector,
    tracker: Mutex<StartTracker>,
    /// Families owned by other components (the certificate managers), rendered with these.
    extra: Mutex<Vec<Arc<dyn Collector>>>,
}

/// Handle to the kubelet's metrics. Cheap to clone; every clone records into the same series.
#[derive(Clone)]
pub struct KubeletMetrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KubeletMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletMetrics").finish_non_exhaustive()
    }
}

/// Every family name `/metrics` carries (checked by tests against upstream's names).
pub const METRIC_NAMES: &[&str] = &[
    "kubelet_node_name",
    "kubelet_running_pods",
    "kubelet_running_containers",
    "kubelet_desired_pods",
    "kubelet_active_pods",
    "kubelet_mirror_pods",
    "kubelet_restarted_pods_total",
    "kubelet_pod_start_duration_seconds",
    "kubelet_pod_start_sli_duration_seconds",
    "kubelet_pod_start_total_duration_seconds",
    "kubelet_pod_worker_duration_seconds",
    "kubelet_pod_worker_start_duration_seconds",
    "kubelet_pleg_relist_duration_seconds",
    "kubelet_pleg_relist_interval_seconds",
    "kubelet_pleg_last_seen_seconds",
    "kubelet_runtime_operations_total",
    "kubelet_runtime_operations_duration_seconds",
    "kubelet_runtime_operations_errors_total",
    "kubelet_run_podsandbox_duration_seconds",
    "kubelet_run_podsandbox_errors_total",
    "kubelet_started_pods_total",
    "kubelet_started_pods_errors_total",
    "kubelet_started_containers_total",
    "kubelet_started_containers_errors_total",
    "kubelet_evictions",
    "kubelet_image_pull_duration_seconds",
    "kubelet_http_requests_total",
    "kubelet_http_requests_duration_seconds",
    "kubelet_http_inflight_requests",
    "kubelet_graceful_shutdown_start_time_seconds",
    "kubelet_graceful_shutdown_end_time_seconds",
    "kubelet_graceful_shutdown_inhibit_lock_held",
    "kubelet_graceful_shutdown_inhibit_delay_seconds",
    "kubelet_graceful_shutdown_protected",
    "rkubelet_task_panics_total",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

impl KubeletMetrics {
    /// The metrics of a kubelet for `node_name` (sets `kubelet_node_name{node} 1`).
    pub fn new(node_name: &str) -> Self {
        Self::with_process(node_name, ProcessCollector::default())
    }

    /// As `new`, reading process metrics from the given collector (tests use a fake procfs).
    pub fn with_process(node_name: &str, process: ProcessCollector) -> Self {
        let f = Families::new();
        f.node_name.set(&[node_name], 1.0);
        Self {
            inner: Arc::new(Inner {
                f,
                process,
                tracker: Mutex::new(StartTracker::default()),
                extra: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The text exposition of `/metrics` (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = Exposition::new();
        self.collect(&mut out);
        out.finish()
    }

    /// Adds a component's families to `/metrics` (e.g. the certificate managers').
    pub fn register(&self, collector: Arc<dyn Collector>) {
        sync::lock(&self.inner.extra).push(collector);
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, StartTracker> {
        sync::lock(&self.inner.tracker)
    }

    // ---- runtime (CRI) operations ------------------------------------------------------------

    /// One CRI call (upstream `recordOperation` + `recordError`).
    pub fn record_runtime_operation(&self, operation: &str, elapsed: Duration, failed: bool) {
        let f = &self.inner.f;
        f.runtime_ops.inc(&[operation]);
        f.runtime_ops_duration
            .observe(&[operation], elapsed.as_secs_f64());
        if failed {
            f.runtime_ops_errors.inc(&[operation]);
        }
    }

    /// A `RunPodSandbox` call, by runtime handler.
    pub fn record_run_podsandbox(&self, runtime_handler: &str, elapsed: Duration, failed: bool) {
        let f = &self.inner.f;
        f.run_podsandbox_duration
            .observe(&[runtime_handler], elapsed.as_secs_f64());
        if failed {
            f.run_podsandbox_errors.inc(&[runtime_handler]);
        }
    }

    /// A successful image pull of an image of `size_bytes`.
    pub fn observe_image_pull(&self, size_bytes: u64, elapsed: Duration) {
        self.inner
            .f
            .image_pull
            .observe(&[image_size_bucket(size_bytes)], elapsed.as_secs_f64());
    }

    /// Remembers a pull for a pod's start SLI (time spent pulling is excluded from it).
    pub fn record_pod_image_pull(&self, pod_uid: &str, started: SystemTime, finished: SystemTime) {
        if pod_uid.is_empty() {
            return;
        }
        let mut t = self.tracker();
        let entry = t.pulls.entry(pod_uid.to_owned()).or_insert(PodPulls {
            first_started: started,
            last_finished: None,
        });
        if started < entry.first_started {
            entry.first_started = started;
        }
        if entry.last_finished.is_none_or(|l| finished > l) {
            entry.last_finished = Some(finished);
        }
    }

    // ---- pods and containers -----------------------------------------------------------------

    /// A sandbox creation attempt (upstream counts before `createPodSandbox`, errors after).
    pub fn record_started_pod(&self, failed: bool) {
        self.inner.f.started_pods.inc(&[]);
        if failed {
            self.inner.f.started_pods_errors.inc(&[]);
        }
    }

    /// A container start attempt past the back-off check; `error_code` is the waiting reason
    /// of a failure (`CreateContainerError`, `ErrImagePull`, …).
    pub fn record_started_container(&self, container_type: &str, error_code: Option<&str>) {
        self.inner.f.started_containers.inc(&[container_type]);
        if let Some(code) = error_code {
            self.inner
                .f
                .started_containers_errors
                .inc(&[container_type, code]);
        }
    }

    /// `kubelet_running_pods` and `kubelet_running_containers{container_state}` from one relist
    /// (upstream `updateRunningPodAndContainerMetrics`). States seen before and absent now
    /// drop to 0.
    pub fn set_running(&self, running_pods: usize, containers_by_state: &[(&str, usize)]) {
        let f = &self.inner.f;
        f.running_pods.set(&[], running_pods as f64);
        let mut t = self.tracker();
        for state in &t.container_states {
            if !containers_by_state.iter().any(|(s, _)| s == state) {
                f.running_containers.set(&[state], 0.0);
            }
        }
        for (state, n) in containers_by_state {
            f.running_containers.set(&[state], *n as f64);
            t.container_states.insert((*state).to_owned());
        }
    }

    /// Pod counts from housekeeping: `(regular, static)` desired and active pods and the number
    /// of mirror pods.
    pub fn set_pod_counts(&self, desired: (usize, usize), active: (usize, usize), mirrors: usize) {
        let f = &self.inner.f;
        f.desired_pods.set(&[""], desired.0 as f64);
        f.desired_pods.set(&["true"], desired.1 as f64);
        f.active_pods.set(&[""], active.0 as f64);
        f.active_pods.set(&["true"], active.1 as f64);
        f.mirror_pods.set(&[], mirrors as f64);
    }

    /// A desired pod whose worker was restarted (same UID re-added).
    pub fn record_restarted_pod(&self, is_static: bool) {
        self.inner
            .f
            .restarted_pods
            .inc(&[if is_static { "true" } else { "" }]);
    }

    /// One `sync_pod` by a pod worker; `operation` is `create`, `update`, `sync` or `kill`.
    pub fn observe_pod_worker(&self, operation: &str, elapsed: Duration) {
        self.inner
            .f
            .pod_worker
            .observe(&[operation], elapsed.as_secs_f64());
    }

    /// From the kubelet seeing a pod to its worker being started.
    pub fn observe_pod_worker_start(&self, elapsed: Duration) {
        self.inner
            .f
            .pod_worker_start
            .observe(&[], elapsed.as_secs_f64());
    }

    /// A pod went from Pending (or no status) to Running. `since_first_seen` feeds
    /// `kubelet_pod_start_duration_seconds`; with the pod's creation time, the SLI and total
    /// durations are observed once per pod (pull time excluded from the SLI).
    pub fn record_pod_running(
        &self,
        pod_uid: &str,
        since_first_seen: Option<Duration>,
        created: Option<SystemTime>,
        host_network: bool,
        now: SystemTime,
    ) {
        let f = &self.inner.f;
        if let Some(d) = since_first_seen {
            f.pod_start.observe(&[], d.as_secs_f64());
        }
        let mut t = self.tracker();
        let pulls = t.pulls.remove(pod_uid);
        let Some(created) = created else { return };
        if !t.started.insert(pod_uid.to_owned()) {
            return;
        }
        let first_with_network = if !host_network && !t.first_network_pod_seen {
            t.first_network_pod_seen = true;
            "true"
        } else {
            "false"
        };
        drop(t);
        let total = now.duration_since(created).unwrap_or_default();
        let pulling = pulls
            .and_then(|p| p.last_finished?.duration_since(p.first_started).ok())
            .unwrap_or_default();
        f.pod_start_total
            .observe(&[first_with_network], total.as_secs_f64());
        f.pod_start_sli.observe(
            &[first_with_network],
            total.saturating_sub(pulling).as_secs_f64(),
        );
    }

    /// Forgets start-tracking state of a pod that is gone.
    pub fn forget_pod(&self, pod_uid: &str) {
        let mut t = self.tracker();
        t.pulls.remove(pod_uid);
        t.started.remove(pod_uid);
    }

    // ---- PLEG --------------------------------------------------------------------------------

    /// How long one relist took (upstream observes every relist, failed ones too).
    pub fn observe_relist_duration(&self, elapsed: Duration) {
        self.inner.f.pleg_relist.observe(&[], elapsed.as_secs_f64());
    }

    /// Time from the start of the last successful relist to the start of this one.
    pub fn observe_relist_interval(&self, interval: Duration) {
        self.inner
            .f
            .pleg_interval
            .observe(&[], interval.as_secs_f64());
    }

    /// The wall time the last successful relist started (`kubelet_pleg_last_seen_seconds`).
    pub fn set_pleg_last_seen(&self, at: SystemTime) {
        let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        self.inner.f.pleg_last_seen.set(&[], secs as f64);
    }

    // ---- eviction and HTTP -------------------------------------------------------------------

    /// A pod evicted for `signal` (e.g. `memory.available`); called by the eviction manager.
    pub fn inc_eviction(&self, signal: &str) {
        self.inner.f.evictions.inc(&[signal]);
    }

    /// A served HTTP request; `server_type` is `readonly` or `readwrite`. `method`/`path` are
    /// the raw request method and URL path (bucketed as upstream).
    pub fn record_http_request(
        &self,
        method: &str,
        path: &str,
        server_type: &str,
        elapsed: Duration,
    ) {
        let (method, path, long_running) = http_request_labels(method, path);
        let labels = [method, path.as_str(), server_type, long_running];
        self.inner.f.http_requests.inc(&labels);
        self.inner
            .f
            .http_duration
            .observe(&labels, elapsed.as_secs_f64());
    }

    /// Marks an HTTP request in flight until the guard drops, then records it as
    /// `record_http_request` does (for routers that prefer a guard around the handler).
    pub fn http_request_started(
        &self,
        method: &str,
        path: &str,
        server_type: &str,
    ) -> HttpRequestGuard {
        let (m, p, lr) = http_request_labels(method, path);
        let labels = [m.to_owned(), p, server_type.to_owned(), lr.to_owned()];
        let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        self.inner.f.http_inflight.add(&refs, 1.0);
        HttpRequestGuard {
            metrics: self.clone(),
            method: method.to_owned(),
            path: path.to_owned(),
            server_type: server_type.to_owned(),
            labels,
            started: tokio::time::Instant::now(),
        }
    }

    // ---- graceful node shutdown --------------------------------------------------------------

    /// The last graceful shutdown's start and end (`None`: not yet; 0 in the gauge).
    pub fn set_graceful_shutdown_times(&self, start: Option<SystemTime>, end: Option<SystemTime>) {
        let secs = |t: Option<SystemTime>| {
            t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0.0, |d| d.as_secs() as f64)
        };
        self.set_graceful_shutdown_seconds(secs(start), secs(end));
    }

    /// As `set_graceful_shutdown_times`, in seconds since the epoch (restored from disk).
    pub fn set_graceful_shutdown_seconds(&self, start: f64, end: f64) {
        self.inner.f.shutdown_start.set(&[], start);
        self.inner.f.shutdown_end.set(&[], end);
    }

    /// Whether the inhibitor lock is held, and logind's `InhibitDelayMaxSec` when known.
    pub fn set_graceful_shutdown_inhibitor(&self, held: bool, delay: Option<Duration>) {
        let f = &self.inner.f;
        f.shutdown_lock_held.set(&[], if held { 1.0 } else { 0.0 });
        if let Some(d) = delay {
            f.shutdown_inhibit_delay.set(&[], d.as_secs_f64());
        }
    }

    /// Whether a shutdown now would give pods their configured grace periods.
    pub fn set_graceful_shutdown_protected(&self, protected: bool) {
        let v = if protected { 1.0 } else { 0.0 };
        self.inner.f.shutdown_protected.set(&[], v);
    }

    /// A panic caught in a per-pod task of kind `task` (`pod_worker`, `probe_worker`), which
    /// was restarted.
    pub fn inc_task_panic(&self, task: &str) {
        self.inner.f.task_panics.inc(&[task]);
    }

    // ---- reading (tests, the stats helpers) --------------------------------------------------

    /// The value of a counter or gauge series, if it exists (`None` for histograms).
    pub fn value(&self, name: &str, labels: &[&str]) -> Option<f64> {
        let f = &self.inner.f;
        let counters = [
            &f.restarted_pods,
            &f.runtime_ops,
            &f.runtime_ops_errors,
            &f.run_podsandbox_errors,
            &f.started_pods,
            &f.started_pods_errors,
            &f.started_containers,
            &f.started_containers_errors,
            &f.evictions,
            &f.http_requests,
            &f.task_panics,
        ];
        let gauges = [
            &f.node_name,
            &f.running_pods,
            &f.running_containers,
            &f.desired_pods,
            &f.active_pods,
            &f.mirror_pods,
            &f.pleg_last_seen,
            &f.http_inflight,
            &f.shutdown_start,
            &f.shutdown_end,
            &f.shutdown_lock_held,
            &f.shutdown_inhibit_delay,
            &f.shutdown_protected,
        ];
        counters
            .iter()
            .find(|c| c.desc().name == name)
            .and_then(|c| c.get(labels))
            .or_else(|| {
                gauges
                    .iter()
                    .find(|g| g.desc().name == name)
                    .and_then(|g| g.get(labels))
            })
    }

    /// The observation count of a histogram series, if it exists.
    pub fn histogram_count(&self, name: &str, labels: &[&str]) -> Option<u64> {
        let f = &self.inner.f;
        [
            &f.pod_start,
            &f.pod_start_sli,
            &f.pod_start_total,
            &f.pod_worker,
            &f.pod_worker_start,
            &f.pleg_relist,
            &f.pleg_interval,
            &f.runtime_ops_duration,
            &f.run_podsandbox_duration,
            &f.image_pull,
            &f.http_duration,
        ]
        .iter()
        .find(|h| h.desc().name == name)
        .and_then(|h| h.get(labels))
        .map(|d| d.count)
    }
}

/// Ends an in-flight HTTP request when dropped.
pub struct HttpRequestGuard {
    metrics: KubeletMetrics,
    method: String,
    path: String,
    server_type: String,
    labels: [String; 4],
    started: tokio::time::Instant,
}

impl Drop for HttpRequestGuard {
    fn drop(&mut self) {
        let refs: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        self.metrics.inner.f.http_inflight.add(&refs, -1.0);
        self.metrics.record_http_request(
            &self.method,
            &self.path,
            &self.server_type,
            self.started.elapsed(),
        );
    }
}

impl Collector for KubeletMetrics {
    fn collect(&self, out: &mut Exposition) {
        let f = &self.inner.f;
        let families: [&dyn Collector; 35] = [
            &f.node_name,
            &f.running_pods,
            &f.running_containers,
            &f.desired_pods,
            &f.active_pods,
            &f.mirror_pods,
            &f.restarted_pods,
            &f.pod_start,
            &f.pod_start_sli,
            &f.pod_start_total,
            &f.pod_worker,
            &f.pod_worker_start,
            &f.pleg_relist,
            &f.pleg_interval,
            &f.pleg_last_seen,
            &f.runtime_ops,
            &f.runtime_ops_duration,
            &f.runtime_ops_errors,
            &f.run_podsandbox_duration,
            &f.run_podsandbox_errors,
            &f.started_pods,
            &f.started_pods_errors,
            &f.started_containers,
            &f.started_containers_errors,
            &f.evictions,
            &f.image_pull,
            &f.http_requests,
            &f.http_duration,
            &f.http_inflight,
            &f.shutdown_start,
            &f.shutdown_end,
            &f.shutdown_lock_held,
            &f.shutdown_inhibit_delay,
            &f.shutdown_protected,
            &f.task_panics,
        ];
        for c in families {
            c.collect(out);
        }
        self.inner.process.collect(out);
        let extra = sync::lock(&self.inner.extra).clone();
        for c in extra {
            c.collect(out);
        }
    }
}
