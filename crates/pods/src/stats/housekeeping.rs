//! Dynamic housekeeping of pod cgroup readings (cAdvisor's, as the Go kubelet configures it):
//! owns each pod's last cgroup and network reading and when the pod is next due. Receives, per
//! collection, each pod's cgroup path and a way to read it; emits the reading, taken afresh only
//! when the pod is due.
//!
//! cAdvisor reads a container every `housekeeping_interval` (the kubelet sets 10 s) plus a
//! random jitter of up to 100 %. When two readings in a row are equal, it doubles the interval
//! up to `max_housekeeping_interval` (the kubelet sets 15 s); a reading that changed brings the
//! interval back to 10 s. So a changing container is read every 10–20 s (15 s on average), a
//! quiet one every 15–30 s (22.5 s). The summary reports the cached reading with the time it
//! was taken.
//!
//! The stats provider here collects once per base interval, not per container, so a pod's due
//! time is rounded to the nearest collection: due 10–15 s after its reading, it is read at the
//! next collection; due 15–20 s after, at the one after that. The averages stay cAdvisor's.

use std::collections::{HashMap, hash_map};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::cgroup::CgroupSample;
use super::net::NetProcess;
use super::types::NetworkStats;

/// The kubelet's `maxHousekeepingInterval` for cAdvisor.
pub const MAX_HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(15);

/// A pod is read at the collection nearest its due time: up to half a base interval early.
const DUE_SLACK_DIVISOR: u32 = 2;

/// One reading of a pod's cgroup and of the network its processes see.
#[derive(Debug, Clone, PartialEq)]
pub struct PodReading {
    pub cgroup: Option<CgroupSample>,
    pub network: Option<NetworkStats>,
    /// The process the network was read through, for the next reading.
    pub net_process: Option<NetProcess>,
    /// When it was taken (the time its stats carry).
    pub at: DateTime<Utc>,
}

impl PodReading {
    /// cAdvisor's `StatsEq`: the same values, whenever they were taken.
    fn same_values(&self, other: &Self) -> bool {
        let same_network = match (&self.network, &other.network) {
            (Some(a), Some(b)) => a.default == b.default && a.interfaces == b.interfaces,
            (a, b) => a.is_none() && b.is_none(),
        };
        self.cgroup == other.cgroup && same_network
    }
}

#[derive(Debug)]
struct Entry {
    path: String,
    reading: PodReading,
    interval: Duration,
    due: Instant,
    /// Marked by every collection that asks for the pod; unmarked entries are dropped.
    seen: bool,
}

/// The readings of every pod the provider reports, with their intervals.
#[derive(Debug)]
pub struct PodHousekeeping {
    base: Duration,
    max: Duration,
    pods: HashMap<String, Entry>,
    /// cAdvisor's jitter: each due time is the interval plus up to 100 % of it.
    jitter: Jitter,
}

/// Where the jitter's fraction (0 ≤ f < 1) comes from.
#[derive(Debug)]
enum Jitter {
    Random(fastrand::Rng),
    #[cfg(test)]
    Fixed(f64),
}

impl Jitter {
    fn next(&mut self) -> f64 {
        match self {
            Self::Random(rng) => rng.f64(),
            #[cfg(test)]
            Self::Fixed(f) => *f,
        }
    }
}

impl PodHousekeeping {
    /// `base`: the stats interval (10 s by default); the interval grows to
    /// [`MAX_HOUSEKEEPING_INTERVAL`], or stays at `base` when that is longer.
    pub fn new(base: Duration) -> Self {
        Self::with_jitter(base, Jitter::Random(fastrand::Rng::new()))
    }

    fn with_jitter(base: Duration, jitter: Jitter) -> Self {
        Self {
            base,
            max: base.max(MAX_HOUSEKEEPING_INTERVAL),
            pods: HashMap::new(),
            jitter,
        }
    }

    /// Pod `uid`'s reading of the cgroup at `path`: the cached one while it is not due, else
    /// `read()`'s (given the process the last reading of the same path went through), which
    /// sets the next interval (doubled when the values did not change, back to the base when
    /// they did) and the next due time (the interval plus its jitter). A new pod or a new path
    /// is always read, and so is a pod whose last reading found no cgroup.
    pub fn reading(
        &mut self,
        uid: &str,
        path: &str,
        now: Instant,
        read: impl FnOnce(Option<NetProcess>) -> PodReading,
    ) -> &PodReading {
        let slack = self.base / DUE_SLACK_DIVISOR;
        let (base, max) = (self.base, self.max);
        let jitter = &mut self.jitter;
        let mut entry = |reading: PodReading, interval: Duration| Entry {
            path: path.to_owned(),
            // No cgroup yet (a pod still starting, or one being torn down): read it again at
            // the next collection, as cAdvisor starts reading a container once its cgroup
            // appears.
            due: if reading.cgroup.is_none() {
                now
            } else {
                now + interval + interval.mul_f64(jitter.next())
            },
            reading,
            interval,
            seen: true,
        };
        match self.pods.entry(uid.to_owned()) {
            hash_map::Entry::Vacant(v) => &v.insert(entry(read(None), base)).reading,
            hash_map::Entry::Occupied(o) => {
                let e = o.into_mut();
                if e.path != path {
                    *e = entry(read(None), base);
                } else if now + slack < e.due {
                    e.seen = true;
                } else {
                    let reading = read(e.reading.net_process);
                    let interval = if e.reading.same_values(&reading) {
                        (e.interval * 2).min(max)
                    } else {
                        base
                    };
                    *e = entry(reading, interval);
                }
                &e.reading
            }
        }
    }

    /// Ends a collection: forgets the pods it did not ask for.
    pub fn finish_round(&mut self) {
        self.pods.retain(|_, e| std::mem::take(&mut e.seen));
    }

    /// How many pods have a cached reading.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cgroup::MemorySample;

    fn reading(cpu: u64, at: DateTime<Utc>) -> PodReading {
        PodReading {
            cgroup: Some(CgroupSample {
                memory: Some(MemorySample {
                    usage: 100,
                    ..MemorySample::default()
                }),
                cpu_usage_ns: Some(cpu),
                pids: Some(1),
            }),
            network: None,
            net_process: None,
            at,
        }
    }

    /// A 10 s base whose jitter is always `fraction`.
    fn fixed(fraction: f64) -> PodHousekeeping {
        PodHousekeeping::with_jitter(Duration::from_secs(10), Jitter::Fixed(fraction))
    }

    /// Collections every 10 s for `rounds` rounds of pod `p`, whose CPU reading is `cpu(i)` at
    /// round i; returns the rounds at which it was read.
    fn reads(h: &mut PodHousekeeping, rounds: u32, cpu: impl Fn(u32) -> u64) -> Vec<u32> {
        let start = Instant::now();
        let mut read_at = Vec::new();
        for i in 0..rounds {
            // The tick fires a little early or late, as a real interval timer does.
            let drift = if i % 2 == 0 {
                Duration::ZERO
            } else {
                Duration::from_millis(300)
            };
            let now = start + Duration::from_secs(10) * i - drift;
            h.reading("p", "/kubepods/podp", now, |_| {
                read_at.push(i);
                reading(cpu(i), Utc::now())
            });
            h.finish_round();
        }
        read_at
    }

    #[test]
    fn the_interval_doubles_to_fifteen_seconds_while_the_values_stay_the_same() {
        // No jitter: a busy pod at every collection; a quiet one 10 s after its first reading,
        // then every 15 s, which the collections every 10 s make 20 s.
        assert_eq!(reads(&mut fixed(0.0), 6, u64::from), [0, 1, 2, 3, 4, 5]);
        assert_eq!(reads(&mut fixed(0.0), 9, |_| 5), [0, 1, 2, 4, 6, 8]);
        // Nearly the most jitter: a busy pod every 20 s, a quiet one every 30 s.
        assert_eq!(reads(&mut fixed(0.9), 7, u64::from), [0, 2, 4, 6]);
        assert_eq!(reads(&mut fixed(0.9), 11, |_| 5), [0, 2, 5, 8]);
    }

    #[test]
    fn a_change_brings_the_interval_back_to_the_base() {
        // Quiet until round 5, busy from then on.
        let got = reads(&mut fixed(0.0), 9, |i| if i < 5 { 7 } else { u64::from(i) });
        assert_eq!(got, [0, 1, 2, 4, 6, 7, 8]);
    }

    #[test]
    fn with_random_jitter_the_average_intervals_are_cadvisors() {
        let mean_interval = |quiet: bool| {
            let mut h = PodHousekeeping::with_jitter(
                Duration::from_secs(10),
                Jitter::Random(fastrand::Rng::with_seed(7)),
            );
            let got = reads(&mut h, 2000, |i| if quiet { 5 } else { u64::from(i) });
            // From the third reading on (the interval has grown by then), 10 s per round.
            let tail = &got[2..];
            10.0 * f64::from(tail[tail.len() - 1] - tail[0]) / (tail.len() - 1) as f64
        };
        let busy = mean_interval(false);
        let quiet = mean_interval(true);
        assert!((busy - 15.0).abs() < 1.0, "busy: every {busy:.1} s");
        assert!((quiet - 22.5).abs() < 1.5, "quiet: every {quiet:.1} s");
    }

    #[test]
    fn a_cached_reading_keeps_its_time_and_a_new_path_is_read_at_once() {
        let mut h = fixed(0.0);
        let t0 = Instant::now();
        let taken = DateTime::from_timestamp(1_750_000_000, 0).unwrap();
        h.reading("p", "/a", t0, |_| reading(1, taken));
        let later = t0 + Duration::from_secs(3);
        let r = h.reading("p", "/a", later, |_| panic!("not due")).clone();
        assert_eq!(
            r.at, taken,
            "the summary reports when the reading was taken"
        );
        let moved = h
            .reading("p", "/b", later, |_| reading(2, Utc::now()))
            .clone();
        assert_eq!(moved.cgroup.unwrap().cpu_usage_ns, Some(2));
    }

    #[test]
    fn a_pod_whose_cgroup_was_missing_is_read_again_at_the_next_collection() {
        let mut h = fixed(0.0);
        let t0 = Instant::now();
        let none = |at| PodReading {
            cgroup: None,
            network: None,
            net_process: None,
            at,
        };
        h.reading("p", "/a", t0, |_| none(Utc::now()));
        h.finish_round();
        let next = t0 + Duration::from_secs(1);
        let r = h
            .reading("p", "/a", next, |_| reading(4, Utc::now()))
            .clone();
        assert_eq!(
            r.cgroup.unwrap().cpu_usage_ns,
            Some(4),
            "read again once it exists"
        );
        h.finish_round();
        // From then on, the usual interval.
        h.reading("p", "/a", next + Duration::from_secs(2), |_| {
            panic!("not due")
        });
    }

    #[test]
    fn a_due_reading_is_given_the_process_the_last_one_of_its_path_went_through() {
        let mut h = fixed(0.0);
        let t0 = Instant::now();
        let mut given = Vec::new();
        let mut read = |known: Option<NetProcess>, pid: u32| {
            given.push(known);
            PodReading {
                net_process: Some(NetProcess::for_test(pid, 1000 + u64::from(pid))),
                ..reading(u64::from(pid), Utc::now())
            }
        };
        h.reading("p", "/a", t0, |k| read(k, 7));
        h.finish_round();
        h.reading("p", "/a", t0 + Duration::from_secs(20), |k| read(k, 8));
        h.finish_round();
        // A new cgroup path (the pod moved QoS class): nothing is known of it.
        h.reading("p", "/b", t0 + Duration::from_secs(21), |k| read(k, 9));
        assert_eq!(given, vec![None, Some(NetProcess::for_test(7, 1007)), None]);
    }

    #[test]
    fn pods_a_collection_does_not_ask_for_are_forgotten() {
        let mut h = fixed(0.0);
        let t0 = Instant::now();
        h.reading("gone", "/g", t0, |_| reading(1, Utc::now()));
        h.reading("kept", "/k", t0, |_| reading(1, Utc::now()));
        h.finish_round();
        assert_eq!(h.len(), 2);
        h.reading("kept", "/k", t0 + Duration::from_secs(1), |_| {
            panic!("not due")
        });
        h.finish_round();
        assert_eq!(h.len(), 1);
        // A pod that comes back is read afresh.
        let mut read = false;
        h.reading("gone", "/g", t0 + Duration::from_secs(2), |_| {
            read = true;
            reading(1, Utc::now())
        });
        assert!(read);
    }

    #[test]
    fn the_interval_never_grows_past_a_longer_base() {
        let mut h = PodHousekeeping::with_jitter(Duration::from_secs(30), Jitter::Fixed(0.0));
        let t0 = Instant::now();
        for i in 0..4u32 {
            let mut read = false;
            h.reading("p", "/a", t0 + Duration::from_secs(30) * i, |_| {
                read = true;
                reading(1, Utc::now())
            });
            h.finish_round();
            assert!(read, "round {i}: a 30 s base reads every collection");
        }
    }

    #[test]
    fn network_time_does_not_count_as_a_change() {
        let net = |secs| NetworkStats {
            time: DateTime::from_timestamp(secs, 0).unwrap(),
            ..NetworkStats::default()
        };
        let a = PodReading {
            network: Some(net(1)),
            ..reading(1, Utc::now())
        };
        let b = PodReading {
            network: Some(net(2)),
            ..reading(1, Utc::now())
        };
        assert!(a.same_values(&b));
        let mut c = b.clone();
        c.network.as_mut().unwrap().default.rx_bytes = Some(9);
        assert!(!a.same_values(&c));
    }
}
