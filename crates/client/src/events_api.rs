//! API event sink (upstream `record.EventBroadcaster` + `EventCorrelator` + `recordToSink`):
//! owns the kubelet's core/v1 Event writes to the API server. Receives pod and node events
//! through [`ApiEventRecorder`] (an [`EventRecorder`] that never blocks: a bounded queue, drops
//! counted); emits `POST …/events` for new events and strategic-merge `PATCH …/events/{name}`
//! (`count`, `lastTimestamp`, `message`) for repeats, after the upstream correlation (dedup
//! cache, aggregation of similar events, per-object spam filter) and the client-side
//! `eventRecordQPS`/`eventBurst` limit. Every event is also logged as in standalone mode.
//! Messages are bounded ([`bound_message`]) before they are queued, so the queue and the
//! correlator's caches hold at most their entry counts times that bound.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::events::{EventRecorder, EventType, LoggingRecorder, bound_message};
use crate::types::PodExt;

/// The component name the kubelet reports events as.
pub const COMPONENT: &str = "kubelet";

/// Why one write of an event failed.
#[derive(Debug, thiserror::Error)]
pub enum EventsApiError {
    /// The API server answered with an error status.
    #[error("API server refused event {event}: {code} {reason}: {message}")]
    Rejected {
        event: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer within the request timeout (the shared client may retry 429/503 internally).
    #[error("writing event {event}: no answer within {after:?}")]
    Timeout { event: String, after: Duration },
    /// Transport or decoding failure.
    #[error("writing event {event}: {source}")]
    Write { event: String, source: kube::Error },
}

/// Correlation knobs (upstream `CorrelatorOptions` defaults).
#[derive(Debug, Clone)]
pub struct CorrelatorSettings {
    /// Entries of each LRU cache (dedup, aggregation, spam).
    pub cache_size: usize,
    /// Events a source may burst about one object.
    pub spam_burst: u32,
    /// Refill rate of that budget, per second.
    pub spam_qps: f64,
    /// Distinct messages of similar events before they are combined.
    pub aggregate_max_events: usize,
    /// Window after the last similar event within which they count as similar.
    pub aggregate_interval: Duration,
}

impl Default for CorrelatorSettings {
    fn default() -> Self {
        Self {
            cache_size: 4096,
            spam_burst: 25,
            spam_qps: 1.0 / 300.0,
            aggregate_max_events: 10,
            aggregate_interval: Duration::from_secs(600),
        }
    }
}

/// Settings of the event sink.
#[derive(Debug, Clone)]
pub struct EventSettings {
    /// `eventRecordQPS`: API writes per second; `0` disables the limit.
    pub qps: f64,
    /// `eventBurst`: writes allowed in a burst above `qps`.
    pub burst: u32,
    /// Events queued between recorders and the sink before new ones are dropped.
    pub queue_capacity: usize,
    /// Attempts per event while the API server is unreachable (upstream 12).
    pub max_tries: u32,
    /// Pause between attempts (upstream 10 s; the first pause is randomised).
    pub retry_interval: Duration,
    /// Bound on one API request; a request still unanswered counts as a failed attempt.
    pub request_timeout: Duration,
    /// On shutdown, how long queued events may still be written (one attempt each).
    pub shutdown_flush: Duration,
    pub correlator: CorrelatorSettings,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            qps: 50.0,
            burst: 100,
            queue_capacity: 1000,
            max_tries: 12,
            retry_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(15),
            shutdown_flush: Duration::from_secs(2),
            correlator: CorrelatorSettings::default(),
        }
    }
}

/// Counters of what happened to recorded events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Created with a POST.
    pub created: u64,
    /// Updated with a PATCH (repeats and combined events).
    pub patched: u64,
    /// Swallowed by the spam filter.
    pub filtered: u64,
    /// Write attempts that failed and were retried or abandoned.
    pub failed_attempts: u64,
    /// Events given up on (retry limit, refusal by the server, shutdown).
    pub abandoned: u64,
}

/// Stats plus the time of the last "queue full" warning, shared by recorders and the sink.
#[derive(Debug, Default)]
struct Counters {
    stats: EventStats,
    last_drop_warning: Option<Instant>,
}

type SharedCounters = Arc<Mutex<Counters>>;

fn bump(counters: &Mutex<Counters>, f: impl FnOnce(&mut EventStats)) {
    if let Ok(mut c) = counters.lock() {
        f(&mut c.stats);
    }
}

/// Strictly increasing unix nanoseconds for event names (`<object>.<hex nanos>`), so two
/// events in the same clock tick never share a name.
#[derive(Debug, Default)]
struct UniqueNanos(AtomicI64);

impl UniqueNanos {
    fn next(&self, t: DateTime<Utc>) -> i64 {
        let candidate = t.timestamp_nanos_opt().unwrap_or(0);
        let prev = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(candidate.max(last.saturating_add(1)))
            })
            .unwrap_or(candidate);
        candidate.max(prev.saturating_add(1))
    }
}

fn k8s_time(t: DateTime<Utc>) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

struct RecorderShared {
    tx: mpsc::Sender<Event>,
    node_name: String,
    clock: Clock,
    names: Arc<UniqueNanos>,
    counters: SharedCounters,
}

/// How often at most a full queue is reported.
const DROP_WARNING_PERIOD: Duration = Duration::from_secs(10);

/// The [`EventRecorder`] of API-server mode: logs each event and queues it for the
/// [`EventSink`]. Cheap to clone; never blocks.
#[derive(Clone)]
pub struct ApiEventRecorder {
    shared: Arc<RecorderShared>,
}

impl ApiEventRecorder {
    /// A recorder for the kubelet on `node_name` and the sink task that writes its events with
    /// `client`. Spawn [`EventSink::run`].
    pub fn new(
        client: kube::Client,
        node_name: &str,
        settings: EventSettings,
    ) -> (ApiEventRecorder, EventSink) {
        let (tx, rx) = mpsc::channel(settings.queue_capacity.max(1));
        let counters = SharedCounters::default();
        let names = Arc::new(UniqueNanos::default());
        let clock = Clock::new();
        let recorder = ApiEventRecorder {
            shared: Arc::new(RecorderShared {
                tx,
                node_name: node_name.to_owned(),
                clock,
                names: names.clone(),
                counters: counters.clone(),
            }),
        };
        let sink = EventSink {
            rx,
            client,
            limiter: (settings.qps > 0.0)
                .then(|| TokenBucket::new(settings.qps, settings.burst.max(1))),
            correlator: Correlator::new(settings.correlator.clone(), names),
            settings,
            counters,
            clock,
        };
        (recorder, sink)
    }

    /// What happened to the events recorded so far.
    pub fn stats(&self) -> EventStats {
        self.shared
            .counters
            .lock()
            .map(|c| c.stats)
            .unwrap_or_default()
    }

    fn make_event(
        &self,
        reference: ObjectReference,
        namespace: &str,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Event {
        let s = &self.shared;
        let now = s.clock.now();
        let name = format!(
            "{}.{:x}",
            reference.name.as_deref().unwrap_or_default(),
            s.names.next(now)
        );
        let node = Some(s.node_name.clone());
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            involved_object: reference,
            reason: Some(reason.to_owned()),
            message: Some(bound_message(message).into_owned()),
            first_timestamp: Some(k8s_time(now)),
            last_timestamp: Some(k8s_time(now)),
            count: Some(1),
            type_: Some(event_type.as_str().to_owned()),
            source: Some(EventSource {
                component: Some(COMPONENT.to_owned()),
                host: node.clone(),
            }),
            reporting_component: Some(COMPONENT.to_owned()),
            reporting_instance: node,
            ..Default::default()
        }
    }

    fn enqueue(&self, event: Event) {
        let s = &self.shared;
        match s.tx.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(event)) => {
                let now = Instant::now();
                let Ok(mut c) = s.counters.lock() else {
                    return;
                };
                c.stats.dropped += 1;
                let last = c.last_drop_warning;
                if last.is_none_or(|t| now.saturating_duration_since(t) >= DROP_WARNING_PERIOD) {
                    c.last_drop_warning = Some(now);
                    warn!(
                        dropped_total = c.stats.dropped,
                        reason = event.reason.as_deref().unwrap_or_default(),
                        "event queue full, dropping events"
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(event)) => {
                debug!(
                    reason = event.reason.as_deref().unwrap_or_default(),
                    "event sink stopped, event not sent"
                );
            }
        }
    }
}

impl EventRecorder for ApiEventRecorder {
    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str) {
        LoggingRecorder.event(pod, event_type, reason, message);
        let reference = ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.name().to_owned()),
            namespace: Some(pod.namespace().to_owned()),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            ..Default::default()
        };
        let event = self.make_event(reference, pod.namespace(), event_type, reason, message);
        self.enqueue(event);
    }

    fn node_event(&self, event_type: EventType, reason: &str, message: &str) {
        LoggingRecorder.node_event(event_type, reason, message);
        // Upstream's node reference: kind Node, name and UID both the node name, no namespace.
        let node = &self.shared.node_name;
        let reference = ObjectReference {
            kind: Some("Node".to_owned()),
            name: Some(node.clone()),
            uid: Some(node.clone()),
            ..Default::default()
        };
        let event = self.make_event(reference, "default", event_type, reason, message);
        self.enqueue(event);
    }
}

/// A token bucket (upstream `flowcontrol.NewTokenBucketRateLimiter`): starts full.
#[derive(Debug, Clone)]
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        self.last = Some(now);
    }

    /// Takes a token if one is available.
    fn try_accept(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Time until a token is available (zero if one is).
    fn wait_time(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 || self.qps <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((1.0 - self.tokens) / self.qps)
    }
}

/// A small LRU map (upstream uses `groupcache/lru`).
struct Lru<V> {
    cap: usize,
    tick: u64,
    map: HashMap<String, (u64, V)>,
    order: BTreeMap<u64, String>,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        let (t, v) = self.map.get_mut(key)?;
        self.order.remove(t);
        self.order.insert(tick, key.to_owned());
        *t = tick;
        Some(v)
    }

    fn remove(&mut self, key: &str) -> Option<V> {
        let (tick, v) = self.map.remove(key)?;
        self.order.remove(&tick);
        Some(v)
    }

    fn insert(&mut self, key: String, value: V) {
        self.remove(&key);
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.map.insert(key, (self.tick, value));
        while self.map.len() > self.cap {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
    }
}

struct AggregateRecord {
    messages: HashSet<String>,
    last: Instant,
}

#[derive(Clone)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

/// The outcome of correlating one event: what to write.
#[derive(Debug, Clone)]
struct Correlated {
    event: Event,
    /// Strategic merge patch for an existing event (`count` > 1).
    patch: Option<Value>,
    /// Dedup cache key the server's answer is recorded under.
    key: String,
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

/// Source + involved object: the spam-filter key.
fn spam_key(e: &Event) -> String {
    let src = e.source.as_ref();
    let o = &e.involved_object;
    [
        src.and_then(|s| s.component.as_deref()).unwrap_or_default(),
        src.and_then(|s| s.host.as_deref()).unwrap_or_default(),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
    ]
    .join("\u{0}")
}

/// Source + object + type + reason (+ reporting controller/instance): the aggregation key.
fn aggregate_key(e: &Event) -> String {
    [
        spam_key(e).as_str(),
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]
    .join("\u{0}")
}

/// Everything identifying an event including its message: the dedup key.
fn event_key(e: &Event) -> String {
    [
        spam_key(e).as_str(),
        s(&e.involved_object.field_path),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ]
    .join("\u{0}")
}

/// Upstream `EventCorrelator`: aggregator, dedup logger and spam filter. Pure apart from the
/// times it is given.
struct Correlator {
    settings: CorrelatorSettings,
    names: Arc<UniqueNanos>,
    aggregates: Lru<AggregateRecord>,
    observed: Lru<Observation>,
    spam: Lru<TokenBucket>,
}

impl Correlator {
    fn new(settings: CorrelatorSettings, names: Arc<UniqueNanos>) -> Self {
        let n = settings.cache_size;
        Self {
            settings,
            names,
            aggregates: Lru::new(n),
            observed: Lru::new(n),
            spam: Lru::new(n),
        }
    }

    /// `None` when the spam filter swallows the event.
    fn correlate(&mut self, event: Event, now: Instant, wall: DateTime<Utc>) -> Option<Correlated> {
        let (event, key) = self.aggregate(event, now, wall);
        let (event, patch) = self.observe(event, &key);
        let bucket_key = spam_key(&event);
        let allowed = match self.spam.get_mut(&bucket_key) {
            Some(bucket) => bucket.try_accept(now),
            None => {
                let mut bucket = TokenBucket::new(self.settings.spam_qps, self.settings.spam_burst);
                let ok = bucket.try_accept(now);
                self.spam.insert(bucket_key, bucket);
                ok
            }
        };
        allowed.then_some(Correlated { event, patch, key })
    }

    /// Upstream `EventAggregate`: the event to write and its dedup key; past the threshold of
    /// distinct messages a combined event keyed by the aggregate key.
    fn aggregate(&mut self, event: Event, now: Instant, wall: DateTime<Utc>) -> (Event, String) {
        let full_key = event_key(&event);
        let agg_key = aggregate_key(&event);
        let window = self.settings.aggregate_interval;
        let mut record = match self.aggregates.remove(&agg_key) {
            Some(r) if now.saturating_duration_since(r.last) <= window => r,
            _ => AggregateRecord {
                messages: HashSet::new(),
                last: now,
            },
        };
        record.messages.insert(s(&event.message).to_owned());
        record.last = now;
        let combine = record.messages.len() >= self.settings.aggregate_max_events;
        if combine {
            // Keep the set below the threshold so each further distinct message combines too.
            if let Some(any) = record.messages.iter().next().cloned() {
                record.messages.remove(&any);
            }
        }
        self.aggregates.insert(agg_key.clone(), record);
        if !combine {
            return (event, full_key);
        }
        let name = format!(
            "{}.{:x}",
            s(&event.involved_object.name),
            self.names.next(wall)
        );
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(k8s_time(wall)),
            last_timestamp: Some(k8s_time(wall)),
            message: Some(
                bound_message(&format!(
                    "(combined from similar events): {}",
                    s(&event.message)
                ))
                .into_owned(),
            ),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            reporting_component: event.reporting_component,
            reporting_instance: event.reporting_instance,
            ..Default::default()
        };
        (combined, agg_key)
    }

    /// Upstream `eventObserve`: a repeat of a cached event becomes a patch of the first one.
    fn observe(&mut self, mut event: Event, key: &str) -> (Event, Option<Value>) {
        let mut patch = None;
        if let Some(last) = self.observed.get_mut(key).filter(|o| o.count > 0) {
            event.metadata.name = Some(last.name.clone());
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            let mut body = Map::new();
            body.insert("count".into(), json!(event.count));
            if let Some(t) = &event.last_timestamp {
                body.insert("lastTimestamp".into(), json!(t));
            }
            if let Some(m) = event.message.as_deref().filter(|m| !m.is_empty()) {
                body.insert("message".into(), json!(m));
            }
            patch = Some(Value::Object(body));
        }
        self.update_state(key, &event);
        (event, patch)
    }

    /// Upstream `UpdateState` (also the end of `eventObserve`): remember the event's name,
    /// count, first timestamp and resourceVersion under `key`.
    fn update_state(&mut self, key: &str, written: &Event) {
        let observation = Observation {
            count: written.count.unwrap_or(1),
            first_timestamp: written.first_timestamp.clone(),
            name: s(&written.metadata.name).to_owned(),
            resource_version: written.metadata.resource_version.clone(),
        };
        self.observed.insert(key.to_owned(), observation);
    }
}

/// What to do after one write attempt.
enum Attempt {
    Written(Box<Event>),
    /// Give up on this event (refused by the server, or shutting down).
    Abandon,
    Retry(EventsApiError),
}

/// The task owning event writes; see [`ApiEventRecorder::new`].
pub struct EventSink {
    rx: mpsc::Receiver<Event>,
    client: kube::Client,
    settings: EventSettings,
    counters: SharedCounters,
    correlator: Correlator,
    limiter: Option<TokenBucket>,
    clock: Clock,
}

impl EventSink {
    /// Writes queued events until `cancel` fires (or every recorder is gone), then spends at
    /// most `shutdown_flush` writing what is still queued, one attempt each.
    pub async fn run(mut self, cancel: CancellationToken) {
        info!("starting event sink");
        loop {
            let event = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                e = self.rx.recv() => e,
            };
            let Some(event) = event else {
                return;
            };
            self.record(event, &cancel).await;
        }
        self.flush().await;
    }

    async fn flush(&mut self) {
        let deadline = Instant::now() + self.settings.shutdown_flush;
        let never = CancellationToken::new();
        while let Ok(event) = self.rx.try_recv() {
            let Some(c) = self.correlate(event) else {
                continue;
            };
            match tokio::time::timeout_at(deadline, self.write(&c, &never)).await {
                Ok(Attempt::Written(written)) => self.correlator.update_state(&c.key, &written),
                Ok(_) => bump(&self.counters, |s| s.abandoned += 1),
                Err(_) => {
                    let left = self.rx.len() as u64 + 1;
                    bump(&self.counters, |s| s.abandoned += left);
                    warn!(events = left, "shutting down: events not written");
                    return;
                }
            }
        }
    }

    fn correlate(&mut self, event: Event) -> Option<Correlated> {
        let c = self
            .correlator
            .correlate(event, Instant::now(), self.clock.now());
        if c.is_none() {
            bump(&self.counters, |s| s.filtered += 1);
        }
        c
    }

    /// Upstream `recordToSink`: correlate, then write with bounded retries.
    async fn record(&mut self, event: Event, cancel: &CancellationToken) {
        let Some(c) = self.correlate(event) else {
            return;
        };
        let mut tries = 0u32;
        loop {
            let err = match self.write(&c, cancel).await {
                Attempt::Written(written) => {
                    self.correlator.update_state(&c.key, &written);
                    return;
                }
                Attempt::Abandon => {
                    bump(&self.counters, |s| s.abandoned += 1);
                    return;
                }
                Attempt::Retry(err) => err,
            };
            bump(&self.counters, |s| s.failed_attempts += 1);
            tries += 1;
            if tries >= self.settings.max_tries.max(1) {
                error!(%err, tries, "unable to write event (retry limit exceeded), dropping it");
                bump(&self.counters, |s| s.abandoned += 1);
                return;
            }
            warn!(%err, tries, "unable to write event (will retry)");
            let mut delay = self.settings.retry_interval;
            if tries == 1 {
                // Spread the first retry so kubelets do not all hit a recovering server at once.
                delay = delay.mul_f64(jitter_fraction());
            }
            tokio::select! {
                _ = cancel.cancelled() => {
                    warn!("unable to write event (shutting down)");
                    bump(&self.counters, |s| s.abandoned += 1);
                    return;
                }
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Waits for the client-side rate limit; false when cancelled meanwhile.
    async fn throttle(&mut self, cancel: &CancellationToken) -> bool {
        let Some(limiter) = self.limiter.as_mut() else {
            return true;
        };
        loop {
            let wait = limiter.wait_time(Instant::now());
            if wait.is_zero() {
                return limiter.try_accept(Instant::now());
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One API call after the client-side rate limit, bounded by the request timeout and by
    /// `cancel`.
    async fn call<T>(
        &mut self,
        fut: impl Future<Output = Result<T, kube::Error>>,
        cancel: &CancellationToken,
        ns: &str,
        name: &str,
    ) -> Result<Result<T, kube::Error>, Attempt> {
        if !self.throttle(cancel).await {
            return Err(Attempt::Abandon);
        }
        let after = self.settings.request_timeout;
        tokio::select! {
            _ = cancel.cancelled() => Err(Attempt::Abandon),
            r = tokio::time::timeout(after, fut) => r.map_err(|_| {
                Attempt::Retry(EventsApiError::Timeout {
                    event: format!("{ns}/{name}"),
                    after,
                })
            }),
        }
    }

    /// Upstream `recordEvent`: PATCH a repeat (falling back to POST when it is gone), else POST.
    async fn write(&mut self, c: &Correlated, cancel: &CancellationToken) -> Attempt {
        let ns = s(&c.event.metadata.namespace).to_owned();
        let name = s(&c.event.metadata.name).to_owned();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Some(patch) = &c.patch {
            let params = PatchParams::default();
            let patch = Patch::Strategic(patch);
            match self
                .call(api.patch(&name, &params, &patch), cancel, &ns, &name)
                .await
            {
                Err(attempt) => return attempt,
                Ok(Ok(written)) => {
                    bump(&self.counters, |s| s.patched += 1);
                    return Attempt::Written(Box::new(written));
                }
                Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                    debug!(event = %name, "event to update is gone, creating it again");
                }
                Ok(Err(e)) => return classify(e, &ns, &name),
            }
        }
        let mut event = c.event.clone();
        event.metadata.resource_version = None;
        let params = PostParams::default();
        match self
            .call(api.create(&params, &event), cancel, &ns, &name)
            .await
        {
            Err(attempt) => attempt,
            Ok(Ok(written)) => {
                bump(&self.counters, |s| s.created += 1);
                Attempt::Written(Box::new(written))
            }
            Ok(Err(e)) => classify(e, &ns, &name),
        }
    }
}

/// Transport failures and overload answers are retried; any other refusal is final, as
/// upstream (which only retries transport errors; 429/5xx are retried here as well since they
/// are what an overloaded or restarting API server answers).
fn classify(e: kube::Error, namespace: &str, name: &str) -> Attempt {
    let event = format!("{namespace}/{name}");
    let (retry, err) = match e {
        kube::Error::Api(status) => {
            let st = *status;
            let retry = matches!(st.code, 429 | 500 | 502 | 503 | 504);
            let (code, reason, message) = (st.code, st.reason, st.message);
            let err = EventsApiError::Rejected {
                event,
                code,
                reason,
                message,
            };
            (retry, err)
        }
        source @ (kube::Error::BuildRequest(_) | kube::Error::HttpError(_)) => {
            (false, EventsApiError::Write { event, source })
        }
        source => (true, EventsApiError::Write { event, source }),
    };
    if retry {
        return Attempt::Retry(err);
    }
    if matches!(err, EventsApiError::Rejected { code: 409, .. }) {
        debug!(%err, "server rejected event (will not retry)");
    } else {
        warn!(%err, "event refused or malformed (will not retry)");
    }
    Attempt::Abandon
}

/// A fraction in [0, 1) from the clock's sub-second noise (no RNG dependency needed).
fn jitter_fraction() -> f64 {
    let nanos = Utc::now().timestamp_subsec_nanos();
    let mixed = u64::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    mixed as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_event(message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("p.{message}"), "namespace": "ns"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns",
                               "uid": "u1"},
            "reason": "BackOff", "message": message, "type": "Warning", "count": 1,
            "source": {"component": COMPONENT, "host": "n1"},
            "lastTimestamp": "2025-01-01T00:00:00Z",
        }))
        .unwrap()
    }

    fn correlator(settings: CorrelatorSettings) -> Correlator {
        Correlator::new(settings, Arc::new(UniqueNanos::default()))
    }

    #[test]
    fn identical_events_become_patches_of_the_first() {
        let mut c = correlator(CorrelatorSettings::default());
        let now = Instant::now();
        let first = c.correlate(pod_event("m"), now, Utc::now()).unwrap();
        assert!(first.patch.is_none());
        assert_eq!(first.event.metadata.name.as_deref(), Some("p.m"));
        let mut written = first.event.clone();
        written.metadata.resource_version = Some("7".into());
        c.update_state(&first.key, &written);
        let mut second = pod_event("m");
        second.metadata.name = Some("p.other".into());
        let second = c.correlate(second, now, Utc::now()).unwrap();
        assert_eq!(second.event.metadata.name.as_deref(), Some("p.m"));
        assert_eq!(second.event.count, Some(2));
        let patch = second.patch.unwrap();
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["message"], "m");
        assert!(patch.get("lastTimestamp").is_some());
        let third = c.correlate(pod_event("m"), now, Utc::now()).unwrap();
        assert_eq!(third.patch.unwrap()["count"], 3);
    }

    #[test]
    fn ten_similar_events_are_combined() {
        let mut c = correlator(CorrelatorSettings::default());
        let now = Instant::now();
        for i in 0..9 {
            let r = c.correlate(pod_event(&format!("m{i}")), now, Utc::now());
            let r = r.unwrap();
            assert!(r.patch.is_none(), "event {i}");
            assert_eq!(r.event.message.as_deref(), Some(format!("m{i}").as_str()));
        }
        let tenth = c.correlate(pod_event("m9"), now, Utc::now()).unwrap();
        assert_eq!(
            tenth.event.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        assert!(tenth.patch.is_none());
        assert!(tenth.event.metadata.name.unwrap().starts_with("p."));
        let eleventh = c.correlate(pod_event("m10"), now, Utc::now()).unwrap();
        let patch = eleventh.patch.unwrap();
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["message"], "(combined from similar events): m10");
    }

    #[test]
    fn aggregation_window_expires() {
        let settings = CorrelatorSettings {
            aggregate_max_events: 2,
            ..Default::default()
        };
        let mut c = correlator(settings);
        let t0 = Instant::now();
        c.correlate(pod_event("a"), t0, Utc::now()).unwrap();
        let later = t0 + Duration::from_secs(601);
        let r = c.correlate(pod_event("b"), later, Utc::now()).unwrap();
        assert_eq!(r.event.message.as_deref(), Some("b"));
        let r = c
            .correlate(pod_event("c"), later + Duration::from_secs(1), Utc::now())
            .unwrap();
        assert_eq!(
            r.event.message.as_deref(),
            Some("(combined from similar events): c")
        );
    }

    #[test]
    fn spam_filter_allows_a_burst_then_one_per_refill() {
        let settings = CorrelatorSettings {
            spam_burst: 3,
            spam_qps: 1.0 / 300.0,
            ..Default::default()
        };
        let mut c = correlator(settings);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(c.correlate(pod_event("x"), t0, Utc::now()).is_some());
        }
        assert!(c.correlate(pod_event("x"), t0, Utc::now()).is_none());
        let t1 = t0 + Duration::from_secs(299);
        assert!(c.correlate(pod_event("x"), t1, Utc::now()).is_none());
        let t2 = t0 + Duration::from_secs(301);
        assert!(c.correlate(pod_event("x"), t2, Utc::now()).is_some());
        assert!(c.correlate(pod_event("x"), t2, Utc::now()).is_none());
        // Another object has its own budget.
        let mut other = pod_event("x");
        other.involved_object.uid = Some("u2".into());
        assert!(c.correlate(other, t2, Utc::now()).is_some());
    }

    #[test]
    fn token_bucket_waits_for_refill() {
        let mut b = TokenBucket::new(2.0, 2);
        let t0 = Instant::now();
        assert!(b.try_accept(t0));
        assert!(b.try_accept(t0));
        assert!(!b.try_accept(t0));
        assert_eq!(b.wait_time(t0), Duration::from_millis(500));
        assert!(b.try_accept(t0 + Duration::from_millis(500)));
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut l = Lru::new(2);
        l.insert("a".into(), 1);
        l.insert("b".into(), 2);
        assert_eq!(l.get_mut("a").copied(), Some(1));
        l.insert("c".into(), 3);
        assert!(l.get_mut("b").is_none());
        assert!(l.get_mut("a").is_some());
        assert!(l.get_mut("c").is_some());
    }

    #[test]
    fn unique_nanos_increase_within_one_tick() {
        let n = UniqueNanos::default();
        let t = Utc::now();
        let a = n.next(t);
        let b = n.next(t);
        assert!(b > a);
    }
    /// What the sink queues and the correlator keeps is bounded whatever a pod prints: a
    /// 1 MiB message is queued cut to the event limit, and a combined message stays within it.
    #[tokio::test]
    async fn queued_and_combined_messages_stay_within_the_event_limit() {
        use crate::events::MAX_EVENT_MESSAGE_LENGTH;
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (recorder, mut sink) = ApiEventRecorder::new(client, "n1", EventSettings::default());
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}
        }))
        .unwrap();
        let huge = "o".repeat(1024 * 1024);
        recorder.event(&pod, EventType::Warning, "Unhealthy", &huge);
        recorder.node_event(EventType::Warning, "Rebooted", &huge);
        for _ in 0..2 {
            let queued = sink.rx.try_recv().unwrap();
            let message = queued.message.unwrap();
            assert_eq!(message.len(), MAX_EVENT_MESSAGE_LENGTH);
            assert!(message.ends_with("o ..."));
        }

        let mut c = correlator(CorrelatorSettings {
            aggregate_max_events: 2,
            ..Default::default()
        });
        let now = Instant::now();
        let long = |i: usize| format!("{i}{}", "x".repeat(MAX_EVENT_MESSAGE_LENGTH - 1));
        c.correlate(pod_event(&long(1)), now, Utc::now()).unwrap();
        let combined = c.correlate(pod_event(&long(2)), now, Utc::now()).unwrap();
        let message = combined.event.message.unwrap();
        assert!(message.starts_with("(combined from similar events): "));
        assert!(
            message.len() <= MAX_EVENT_MESSAGE_LENGTH,
            "{}",
            message.len()
        );
    }
}
