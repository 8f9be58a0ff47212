//! Watch streams: owns turning store events into a chunked `WatchEvent` JSON stream with
//! selector transitions, BOOKMARKs, the initial-events-end bookmark, timeouts and the
//! expired-version ERROR event; receives a store subscription; emits JSON lines on a channel.

use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::store::{ListOpts, Store, WatchEvent};
use bytes::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Parameters of one watch request.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// Namespace filter.
    pub namespace: Option<String>,
    /// Selectors (limit/continue are ignored).
    pub list: ListOpts,
    /// `resourceVersion` query parameter (None, "0" or a number).
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Interval between progress BOOKMARKs.
    pub bookmark_interval: Duration,
    /// Render ADDED/MODIFIED/DELETED objects as one-row Tables (kubectl `get -w`).
    pub table: bool,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn object_line(info: &ResourceInfo, table: bool, kind: &str, object: &Value) -> Bytes {
    if crate::events::is_events_v1(info) && !table {
        line(kind, &crate::events::to_v1(object))
    } else if table {
        let meta = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
        line(
            kind,
            &crate::table::render(info.kind, std::slice::from_ref(object), meta),
        )
    } else {
        line(kind, object)
    }
}

fn bookmark(info: &ResourceInfo, rv: u64, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta})
}

/// The event type a client should see for `ev` given its selectors, if any.
fn visible(ev: &WatchEvent, opts: &ListOpts) -> Option<&'static str> {
    let sel = |o: &Value| opts.labels.matches(o) && opts.fields.matches(o);
    let now = sel(&ev.object);
    let before = ev.previous.as_ref().is_some_and(sel);
    match ev.kind {
        "MODIFIED" => match (before, now) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        },
        "DELETED" => (now || before).then_some("DELETED"),
        other => now.then_some(other),
    }
}

/// Starts a watch; the returned channel yields JSON lines until the watch ends.
pub fn start(
    store: &Arc<Store>,
    info: &'static ResourceInfo,
    params: WatchParams,
) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let from =
        if params.send_initial_events {
            None
        } else {
            match params.resource_version.as_deref() {
                None | Some("") | Some("0") => None,
                Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                })?),
            }
        };
    let (tx, rx) = mpsc::channel(256);
    let storage = crate::events::storage(info);
    let res = storage.qualified();
    match store.watch(storage, params.namespace.as_deref(), from) {
        Ok((backlog, start_rv, live)) => {
            tokio::spawn(run(info, params, res, backlog, start_rv, live, tx));
        }
        Err(e) if e.code == 410 => {
            // Upstream answers a too-old watch with 200 and a single ERROR event.
            tokio::spawn(async move {
                let _ = tx.send(line("ERROR", &e.to_status())).await;
            });
        }
        Err(e) => return Err(e),
    }
    Ok(rx)
}

async fn run(
    info: &'static ResourceInfo,
    params: WatchParams,
    res: String,
    backlog: Vec<Arc<WatchEvent>>,
    start_rv: u64,
    mut live: broadcast::Receiver<Arc<WatchEvent>>,
    tx: mpsc::Sender<Bytes>,
) {
    let mut last_rv = start_rv;
    let in_scope = |ev: &WatchEvent| {
        ev.resource == res
            && params
                .namespace
                .as_deref()
                .is_none_or(|n| n == ev.namespace)
    };
    for ev in &backlog {
        if let Some(kind) = visible(ev, &params.list)
            && tx
                .send(object_line(info, params.table, kind, &ev.object))
                .await
                .is_err()
        {
            return;
        }
    }
    if params.send_initial_events && params.bookmarks {
        let bm = bookmark(info, start_rv, true);
        if tx.send(line("BOOKMARK", &bm)).await.is_err() {
            return;
        }
    }
    let deadline = params.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker = tokio::time::interval(params.bookmark_interval);
    ticker.tick().await;
    loop {
        let sleep_until = deadline
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600));
        tokio::select! {
            _ = tokio::time::sleep_until(sleep_until) => return,
            _ = ticker.tick(), if params.bookmarks => {
                if tx.send(line("BOOKMARK", &bookmark(info, last_rv, false))).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
            msg = live.recv() => {
                let ev = match msg {
                    Ok(ev) => ev,
                    // Too slow or store gone: end the watch; the client resumes from its last rv.
                    Err(_) => return,
                };
                if ev.rv <= last_rv && ev.rv <= start_rv {
                    continue;
                }
                last_rv = last_rv.max(ev.rv);
                if !in_scope(&ev) {
                    continue;
                }
                if let Some(kind) = visible(&ev, &params.list)
                    && tx
                        .send(object_line(info, params.table, kind, &ev.object))
                        .await
                        .is_err()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

    fn cms() -> &'static ResourceInfo {
        crate::resources::find("", "v1", "configmaps").expect("configmaps")
    }

    fn params() -> WatchParams {
        WatchParams {
            namespace: Some("default".into()),
            list: ListOpts::default(),
            resource_version: None,
            bookmarks: false,
            send_initial_events: false,
            timeout: None,
            bookmark_interval: Duration::from_secs(1),
            table: false,
        }
    }

    async fn next(rx: &mut mpsc::Receiver<Bytes>) -> Value {
        let b = rx.recv().await.expect("event");
        serde_json::from_slice(&b).expect("json")
    }

    #[tokio::test(start_paused = true)]
    async fn selector_transitions_become_added_and_deleted() {
        let store = Store::new(100);
        let mut p = params();
        p.list.labels = LabelSelector::parse("app=web").expect("selector");
        p.resource_version = Some(store.resource_version().to_string());
        let mut rx = start(&store, cms(), p).expect("watch");
        store
            .create(cms(), "default", json!({"metadata": {"name": "a"}}))
            .expect("create");
        store
            .patch(
                cms(),
                "default",
                "a",
                crate::store::PatchType::Merge,
                &json!({"metadata": {"labels": {"app": "web"}}}),
                false,
            )
            .expect("label");
        assert_eq!(next(&mut rx).await["type"], "ADDED");
        store
            .patch(
                cms(),
                "default",
                "a",
                crate::store::PatchType::Merge,
                &json!({"metadata": {"labels": {"app": "db"}}}),
                false,
            )
            .expect("relabel");
        assert_eq!(next(&mut rx).await["type"], "DELETED");
    }

    #[tokio::test(start_paused = true)]
    async fn bookmarks_initial_events_and_timeout() {
        let store = Store::new(100);
        store
            .create(cms(), "default", json!({"metadata": {"name": "a"}}))
            .expect("create");
        let mut p = params();
        p.bookmarks = true;
        p.send_initial_events = true;
        p.timeout = Some(Duration::from_secs(3));
        let mut rx = start(&store, cms(), p).expect("watch");
        assert_eq!(next(&mut rx).await["type"], "ADDED");
        let end = next(&mut rx).await;
        assert_eq!(end["type"], "BOOKMARK");
        assert_eq!(
            end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        assert_eq!(
            end["object"]["metadata"]["resourceVersion"],
            store.resource_version().to_string()
        );
        let progress = next(&mut rx).await;
        assert_eq!(progress["type"], "BOOKMARK");
        assert!(progress["object"]["metadata"]["annotations"].is_null());
        // The stream ends at timeoutSeconds.
        let mut count = 0;
        while rx.recv().await.is_some() {
            count += 1;
        }
        assert!(count <= 3, "only bookmarks until the timeout, got {count}");
    }

    #[tokio::test(start_paused = true)]
    async fn too_old_version_is_an_error_event() {
        let store = Store::new(100);
        store
            .create(cms(), "default", json!({"metadata": {"name": "a"}}))
            .expect("create");
        store.compact();
        let mut p = params();
        p.resource_version = Some("1".into());
        let mut rx = start(&store, cms(), p).expect("watch");
        let ev = next(&mut rx).await;
        assert_eq!(ev["type"], "ERROR");
        assert_eq!(ev["object"]["code"], 410);
        assert!(rx.recv().await.is_none());
    }
}
