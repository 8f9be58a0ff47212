//! Static pods that share a full name start one at a time (upstream `allowStaticPodStart`,
//! `startedStaticPodsByFullname`, `waitingToStartStaticPodsByFullname`). Editing a static
//! manifest gives the pod a new UID; the new pod must not run beside the old one (an etcd or
//! kube-apiserver upgrade would fight over ports and data dirs). Owns, per full name
//! (`name_namespace`), the UID allowed to run and the UIDs waiting in arrival order. Receives
//! new workers, start attempts and releases from the pod workers; emits whether a pod may
//! start and which waiting UID to wake once the name is free.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::types::{PodExt, PodUid};

/// Upstream `BuildPodFullName`: `name_namespace`.
pub fn static_full_name(name: &str, namespace: &str) -> String {
    format!("{name}_{namespace}")
}

/// Upstream `IsStaticPod`: a pod from a source other than the API server.
pub fn is_static_pod(pod: &Pod) -> bool {
    pod.source().is_some_and(|s| s.is_static())
}

#[derive(Debug, Default)]
pub struct StaticPodStarts {
    started: HashMap<String, PodUid>,
    waiting: HashMap<String, Vec<PodUid>>,
}

impl StaticPodStarts {
    /// A new worker for static pod `uid`: it starts after those that came before it.
    pub fn enqueue(&mut self, full_name: &str, uid: &str) {
        self.waiting
            .entry(full_name.to_owned())
            .or_default()
            .push(uid.to_owned());
    }

    /// May `uid` start now? Yes when it already holds the name, or when nobody holds it and
    /// `uid` is the first waiting pod that `can_start` (is known and not terminating); it then
    /// holds the name until [`release`](Self::release).
    pub fn allow(&mut self, full_name: &str, uid: &str, can_start: impl Fn(&str) -> bool) -> bool {
        if let Some(holder) = self.started.get(full_name) {
            return holder == uid;
        }
        let waiting = self.waiting.remove(full_name).unwrap_or_default();
        let mut rest = waiting.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            if !can_start(first) {
                // Terminated or forgotten before it could start: it never will.
                rest = tail;
                continue;
            }
            if first != uid {
                // Another pod is next in line.
                self.waiting.insert(full_name.to_owned(), rest.to_vec());
                return false;
            }
            rest = tail;
            break;
        }
        if !rest.is_empty() {
            self.waiting.insert(full_name.to_owned(), rest.to_vec());
        }
        self.started.insert(full_name.to_owned(), uid.to_owned());
        true
    }

    /// `uid` no longer runs (terminated, or forgotten): the name is free if it held it.
    /// Returns whether it did.
    pub fn release(&mut self, full_name: &str, uid: &str) -> bool {
        if self.started.get(full_name).is_some_and(|h| h == uid) {
            self.started.remove(full_name);
            return true;
        }
        false
    }

    /// `uid` will never start: it leaves the queue.
    pub fn withdraw(&mut self, full_name: &str, uid: &str) {
        if let Some(w) = self.waiting.get_mut(full_name) {
            w.retain(|u| u != uid);
            if w.is_empty() {
                self.waiting.remove(full_name);
            }
        }
    }

    /// The waiting UIDs for `full_name`, first in line first.
    pub fn waiting(&self, full_name: &str) -> &[PodUid] {
        self.waiting.get(full_name).map_or(&[], Vec::as_slice)
    }

    /// The UID holding `full_name`, if any.
    pub fn holder(&self, full_name: &str) -> Option<&str> {
        self.started.get(full_name).map(String::as_str)
    }

    /// Number of names held and names with waiters (for leak checks).
    #[cfg(test)]
    pub fn sizes(&self) -> (usize, usize) {
        (self.started.len(), self.waiting.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_with_one_full_name_start_in_arrival_order_one_at_a_time() {
        let mut s = StaticPodStarts::default();
        let any = |_: &str| true;
        s.enqueue("etcd_kube-system", "old");
        s.enqueue("etcd_kube-system", "new");
        s.enqueue("other_kube-system", "x");
        assert!(!s.allow("etcd_kube-system", "new", any), "old is first");
        assert!(s.allow("etcd_kube-system", "old", any));
        assert!(
            s.allow("etcd_kube-system", "old", any),
            "a holder may sync again"
        );
        assert!(
            s.allow("other_kube-system", "x", any),
            "other names are independent"
        );
        assert!(
            !s.allow("etcd_kube-system", "new", any),
            "old still holds the name"
        );
        assert!(
            !s.release("etcd_kube-system", "new"),
            "only the holder releases"
        );
        assert!(s.release("etcd_kube-system", "old"));
        assert!(s.allow("etcd_kube-system", "new", any));
        assert_eq!(s.holder("etcd_kube-system"), Some("new"));
        assert!(s.waiting("etcd_kube-system").is_empty());
        s.release("etcd_kube-system", "new");
        s.release("other_kube-system", "x");
        assert_eq!(s.sizes(), (0, 0));
    }

    #[test]
    fn waiters_that_can_no_longer_start_are_skipped() {
        let mut s = StaticPodStarts::default();
        for uid in ["a", "b", "c"] {
            s.enqueue("n_ns", uid);
        }
        // "a" was killed before it started, "b" is next.
        let alive = |u: &str| u != "a";
        assert!(!s.allow("n_ns", "c", alive));
        assert_eq!(s.waiting("n_ns"), ["b".to_owned(), "c".to_owned()]);
        assert!(s.allow("n_ns", "b", alive));
        s.release("n_ns", "b");
        s.withdraw("n_ns", "c");
        assert_eq!(s.sizes(), (0, 0));
        // A pod that never queued (e.g. its queue entry was withdrawn) may take a free name.
        assert!(s.allow("n_ns", "z", alive));
        assert!(!s.allow("n_ns", "b", alive));
    }
}
