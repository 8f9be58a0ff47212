//! The fake runtime's `GetContainerEvents` stream (containerd 1.7's CRI events, off by default
//! as containerd 1.6 has none). Owns the open streams and the last published state of every
//! sandbox and container; receives nothing but the state after each transition; emits one
//! `ContainerEventResponse` per change (created, started, stopped, deleted) to every open
//! stream, carrying the pod's sandbox status and all its container statuses as containerd does.
//! Tests can end every open stream (stream loss, runtime restart).

use std::collections::BTreeMap;

use tokio::sync::mpsc;

use super::state::State;
use crate::api;
use crate::api::{ContainerEventType, ContainerState, PodSandboxState};
use crate::error::CriError;

/// One open stream's sending side.
pub type EventSender = mpsc::UnboundedSender<Result<api::ContainerEventResponse, CriError>>;

/// What a stream subscriber was last told about one sandbox or container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Created,
    Running,
    Stopped,
}

#[derive(Debug, Clone)]
struct Published {
    seen: Seen,
    /// The sandbox this ID belongs to (itself for a sandbox).
    sandbox_id: String,
    /// The sandbox's last status, so a deleted event still names the pod.
    sandbox_status: api::PodSandboxStatus,
}

/// The event machinery's part of the state.
#[derive(Debug, Default)]
pub struct Events {
    /// Whether `GetContainerEvents` is served (else it answers `Unimplemented`).
    pub enabled: bool,
    subscribers: Vec<EventSender>,
    published: BTreeMap<String, Published>,
}

impl Events {
    /// Number of streams still open (their receivers not dropped).
    pub fn open_streams(&mut self) -> usize {
        self.subscribers.retain(|tx| !tx.is_closed());
        self.subscribers.len()
    }

    /// Ends every open stream: with `err` as its last item, or cleanly.
    pub fn end_streams(&mut self, err: Option<&CriError>) {
        for tx in self.subscribers.drain(..) {
            if let Some(e) = err {
                let _ = tx.send(Err(e.clone()));
            }
        }
    }
}

fn seen_container(state: ContainerState) -> Seen {
    match state {
        ContainerState::ContainerRunning => Seen::Running,
        ContainerState::ContainerExited => Seen::Stopped,
        ContainerState::ContainerCreated | ContainerState::ContainerUnknown => Seen::Created,
    }
}

fn seen_sandbox(state: PodSandboxState) -> Seen {
    match state {
        PodSandboxState::SandboxReady => Seen::Running,
        PodSandboxState::SandboxNotready => Seen::Stopped,
    }
}

/// The event types that take an ID from `old` (`None`: unknown to subscribers) to `new`
/// (`None`: gone), in order.
fn transitions(old: Option<Seen>, new: Option<Seen>) -> Vec<ContainerEventType> {
    use ContainerEventType as E;
    let rank = |s: Option<Seen>| match s {
        None => 0,
        Some(Seen::Created) => 1,
        Some(Seen::Running) => 2,
        Some(Seen::Stopped) => 3,
    };
    if old == new {
        return Vec::new();
    }
    let (from, to) = (rank(old), if new.is_none() { 4 } else { rank(new) });
    let steps = [
        E::ContainerCreatedEvent,
        E::ContainerStartedEvent,
        E::ContainerStoppedEvent,
        E::ContainerDeletedEvent,
    ];
    // A container never started (created → exited by a failed start) skips "started"; one
    // that dies before being seen running still reports it, as containerd's task events do.
    steps
        .iter()
        .enumerate()
        .filter(|(i, _)| *i >= from && *i < to)
        .map(|(_, e)| *e)
        .filter(|e| !(from == 1 && to >= 3 && *e == E::ContainerStartedEvent))
        .collect()
}

impl State {
    /// Starts serving events: everything that exists now counts as already published.
    pub fn enable_events(&mut self) {
        self.events.enabled = true;
        self.events.published = self.snapshot();
    }

    /// Opens one stream.
    pub fn subscribe(&mut self, tx: EventSender) {
        self.events.subscribers.retain(|t| !t.is_closed());
        self.events.subscribers.push(tx);
    }

    fn snapshot(&self) -> BTreeMap<String, Published> {
        let mut out = BTreeMap::new();
        for sb in self.sandboxes.values() {
            out.insert(
                sb.id.clone(),
                Published {
                    seen: seen_sandbox(sb.state),
                    sandbox_id: sb.id.clone(),
                    sandbox_status: sb.status(),
                },
            );
        }
        for c in self.containers.values() {
            let Some(sb) = self.sandboxes.get(&c.sandbox_id) else {
                continue;
            };
            out.insert(
                c.id.clone(),
                Published {
                    seen: seen_container(c.state),
                    sandbox_id: sb.id.clone(),
                    sandbox_status: sb.status(),
                },
            );
        }
        out
    }

    /// Sends the events for everything that changed since the last call to every open
    /// stream (sandboxes before their containers when created, after them when deleted).
    pub fn publish_events(&mut self) {
        if !self.events.enabled {
            return;
        }
        let now = self.snapshot();
        let old = std::mem::replace(&mut self.events.published, now.clone());
        let mut out = Vec::new();
        let ids: Vec<&String> = now
            .keys()
            .chain(old.keys().filter(|k| !now.contains_key(*k)))
            .collect();
        for id in ids {
            let (before, after) = (old.get(id), now.get(id));
            let Some(rec) = after.or(before) else {
                continue;
            };
            for kind in transitions(before.map(|p| p.seen), after.map(|p| p.seen)) {
                out.push(self.event(id, kind, rec));
            }
        }
        if out.is_empty() {
            return;
        }
        self.events.subscribers.retain(|tx| !tx.is_closed());
        for event in out {
            for tx in &self.events.subscribers {
                let _ = tx.send(Ok(event.clone()));
            }
        }
    }

    fn event(
        &mut self,
        id: &str,
        kind: ContainerEventType,
        rec: &Published,
    ) -> api::ContainerEventResponse {
        let sandbox_status = self
            .sandboxes
            .get(&rec.sandbox_id)
            .map_or_else(|| rec.sandbox_status.clone(), |sb| sb.status());
        let containers_statuses = self
            .containers
            .values()
            .filter(|c| c.sandbox_id == rec.sandbox_id)
            .filter_map(|c| self.container_status(&c.id).ok())
            .collect();
        api::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: self.clock.now(),
            pod_sandbox_status: Some(sandbox_status),
            containers_statuses,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio_stream::StreamExt;

    use super::*;
    use crate::fake::{FakeRuntime, serve_unix};
    use crate::traits::RuntimeService;
    use crate::{ContainerEventStream, RemoteRuntime};
    use ContainerEventType as E;

    async fn next(
        stream: &mut ContainerEventStream,
    ) -> Option<Result<api::ContainerEventResponse, CriError>> {
        tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event or the end within 10 s")
    }

    /// The client side over a real socket: `Unimplemented` like containerd 1.6 until events
    /// are served, then the sandbox's events (with its pod metadata), then the error that
    /// ends the stream.
    #[tokio::test]
    async fn remote_client_streams_events_from_the_fake_server() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("cri.sock");
        let fake = FakeRuntime::new();
        let _server = serve_unix(Arc::new(fake.clone()), Arc::new(fake.clone()), &sock)
            .await
            .unwrap();
        let rt = RemoteRuntime::connect(sock.to_str().unwrap(), Duration::from_secs(10))
            .await
            .unwrap();
        let err = rt
            .get_container_events(api::GetEventsRequest::default())
            .await
            .err()
            .unwrap();
        assert!(err.is_unimplemented(), "{err}");

        fake.serve_container_events();
        // As from containerd, the open is answered with the first event: it waits.
        let open = tokio::spawn({
            let rt = rt.clone();
            async move {
                rt.get_container_events(api::GetEventsRequest::default())
                    .await
            }
        });
        for _ in 0..100 {
            if fake.open_event_streams() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !open.is_finished(),
            "the open was answered before any event"
        );
        let id = fake
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        name: "p".into(),
                        uid: "u1".into(),
                        namespace: "ns".into(),
                        attempt: 0,
                    }),
                    ..Default::default()
                }),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .pod_sandbox_id;
        let mut stream = open.await.unwrap().unwrap();
        for want in [E::ContainerCreatedEvent, E::ContainerStartedEvent] {
            let ev = next(&mut stream).await.unwrap().unwrap();
            assert_eq!(ev.container_id, id);
            assert_eq!(ev.container_event_type, want as i32);
            let meta = ev.pod_sandbox_status.unwrap().metadata.unwrap();
            assert_eq!(meta.uid, "u1");
        }
        fake.end_event_streams(Some(CriError::unavailable(
            "GetContainerEvents",
            "x",
            "restarting",
        )));
        let last = next(&mut stream).await.unwrap().err().unwrap();
        assert!(last.is_unavailable(), "{last}");
        assert!(
            next(&mut stream).await.is_none(),
            "the stream ends after its error"
        );
    }

    #[test]
    fn transitions_walk_the_lifecycle() {
        let s = |x| Some(x);
        assert_eq!(
            transitions(None, s(Seen::Created)),
            vec![E::ContainerCreatedEvent]
        );
        assert_eq!(
            transitions(None, s(Seen::Running)),
            vec![E::ContainerCreatedEvent, E::ContainerStartedEvent]
        );
        assert_eq!(
            transitions(s(Seen::Created), s(Seen::Running)),
            vec![E::ContainerStartedEvent]
        );
        assert_eq!(
            transitions(s(Seen::Created), s(Seen::Stopped)),
            vec![E::ContainerStoppedEvent],
            "a failed start never ran"
        );
        assert_eq!(
            transitions(s(Seen::Running), None),
            vec![E::ContainerStoppedEvent, E::ContainerDeletedEvent]
        );
        assert_eq!(
            transitions(s(Seen::Stopped), None),
            vec![E::ContainerDeletedEvent]
        );
        assert!(transitions(s(Seen::Running), s(Seen::Running)).is_empty());
    }
}
