//! Threshold parsing, observations and the evaluation step.

use super::*;

fn tv(s: &str) -> ThresholdValue {
    ThresholdValue::parse(s).unwrap()
}

fn map(kv: &[(&str, &str)]) -> BTreeMap<String, ThresholdValue> {
    kv.iter().map(|(k, v)| ((*k).to_owned(), tv(v))).collect()
}

fn grace(kv: &[(&str, &str)]) -> BTreeMap<String, ConfigDuration> {
    kv.iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                crate::config::parse_go_duration(v).unwrap(),
            )
        })
        .collect()
}

fn hard(signal: Signal, q: i64) -> Threshold {
    Threshold {
        signal,
        value: Amount::Quantity {
            value: q,
            text: q.to_string(),
        },
        grace_period: Duration::ZERO,
        min_reclaim: None,
    }
}

fn obs(kv: &[(Signal, i64, i64)], secs: i64) -> Observations {
    kv.iter()
        .map(|(s, a, c)| {
            (
                *s,
                Observation {
                    available: *a,
                    capacity: *c,
                    time: DateTime::from_timestamp(secs, 0).unwrap(),
                },
            )
        })
        .collect()
}

#[test]
fn parses_upstream_defaults_soft_with_grace_and_min_reclaim() {
    let defaults: BTreeMap<String, ThresholdValue> = crate::config::DEFAULT_EVICTION_HARD
        .iter()
        .map(|(k, v)| ((*k).to_owned(), tv(v)))
        .collect();
    let got = parse_thresholds(
        &defaults,
        &map(&[("memory.available", "300Mi")]),
        &grace(&[("memory.available", "1m30s")]),
        &map(&[("memory.available", "0.5Gi"), ("nodefs.available", "5%")]),
    )
    .unwrap();
    let hard: Vec<(&str, &Amount)> = got
        .iter()
        .filter(|t| t.is_hard())
        .map(|t| (t.signal.as_str(), &t.value))
        .collect();
    assert_eq!(hard.len(), 5, "{hard:?}");
    assert!(hard.contains(&(
        "memory.available",
        &Amount::Quantity {
            value: 100 * 1024 * 1024,
            text: "100Mi".into()
        }
    )));
    assert!(hard.contains(&("nodefs.available", &Amount::Percentage(0.1))));
    assert!(hard.contains(&("nodefs.inodesFree", &Amount::Percentage(0.05))));
    assert!(hard.contains(&("imagefs.available", &Amount::Percentage(0.15))));
    let soft = got.iter().find(|t| !t.is_hard()).unwrap();
    assert_eq!(soft.signal, Signal::MemoryAvailable);
    assert_eq!(soft.grace_period, Duration::from_secs(90));
    assert_eq!(
        soft.min_reclaim,
        Some(Amount::Quantity {
            value: 512 * 1024 * 1024,
            text: "0.5Gi".into()
        })
    );
    let nodefs = got
        .iter()
        .find(|t| t.signal == Signal::NodeFsAvailable)
        .unwrap();
    assert_eq!(nodefs.min_reclaim, Some(Amount::Percentage(0.05)));
}

#[test]
fn rejects_bad_settings_naming_the_field_and_skips_disabled_signals() {
    let none = BTreeMap::new();
    type Maps = BTreeMap<String, ThresholdValue>;
    type Case = (
        Maps,
        Maps,
        BTreeMap<String, ConfigDuration>,
        Maps,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            map(&[("memory.free", "1Mi")]),
            none.clone(),
            BTreeMap::new(),
            none.clone(),
            "evictionHard: unsupported eviction signal \"memory.free\"",
        ),
        (
            map(&[("memory.available", "0")]),
            none.clone(),
            BTreeMap::new(),
            none.clone(),
            "evictionHard: eviction threshold memory.available must be positive: 0",
        ),
        (
            none.clone(),
            map(&[("pid.available", "10%")]),
            BTreeMap::new(),
            none.clone(),
            "evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold pid.available",
        ),
        (
            none.clone(),
            map(&[("pid.available", "10%")]),
            grace(&[("pid.available", "-1s")]),
            none.clone(),
            "evictionSoftGracePeriod: invalid eviction grace period specified: -1s, must be a positive value",
        ),
        (
            none.clone(),
            none.clone(),
            BTreeMap::new(),
            map(&[("nodefs.available", "0%")]),
            "evictionMinimumReclaim: eviction percentage minimum reclaim nodefs.available must be positive: 0%",
        ),
    ];
    for (h, s, g, r, want) in cases {
        let err = parse_thresholds(&h, &s, &g, &r).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err} vs {want}");
    }
    // "0%"/"100%" disable a signal; containerfs is accepted, not enforced.
    let got = parse_thresholds(
        &map(&[
            ("memory.available", "0%"),
            ("nodefs.available", "100%"),
            ("containerfs.available", "1Mi"),
            ("allocatableMemory.available", "1Mi"),
            ("pid.available", "1k"),
        ]),
        &none,
        &BTreeMap::new(),
        &none,
    )
    .unwrap();
    let signals: Vec<Signal> = got.iter().map(|t| t.signal).collect();
    assert_eq!(
        signals,
        [Signal::AllocatableMemoryAvailable, Signal::PidAvailable]
    );
    assert_eq!(got[1].value.quantity(0), 1000);
}

#[test]
fn allocatable_thresholds_twin_hard_memory_available_when_pods_are_enforced() {
    let parse = || {
        parse_thresholds(
            &map(&[("memory.available", "100Mi"), ("nodefs.available", "10%")]),
            &map(&[("memory.available", "300Mi")]),
            &grace(&[("memory.available", "1m")]),
            &map(&[("memory.available", "50Mi")]),
        )
        .unwrap()
    };
    let mut got = parse();
    add_allocatable_thresholds(&mut got, ["kube-reserved", "pods"]);
    let twins: Vec<&Threshold> = got
        .iter()
        .filter(|t| t.signal == Signal::AllocatableMemoryAvailable)
        .collect();
    assert_eq!(twins.len(), 1, "only the hard memory.available is copied");
    let (twin, last) = (twins[0], got.last().unwrap());
    assert_eq!(last.signal, Signal::AllocatableMemoryAvailable, "appended");
    assert!(twin.is_hard());
    assert_eq!(twin.value.quantity(0), 100 << 20);
    assert_eq!(twin.min_reclaim.as_ref().unwrap().quantity(0), 50 << 20);
    assert_eq!(twin.signal.pressure(), Pressure::Memory);
    assert_eq!(twin.signal.resource(), Resource::Memory);
    assert_eq!(twin.signal.as_str(), "allocatableMemory.available");
    for enforce in [&[][..], &["system-reserved", "kube-reserved"][..]] {
        let mut got = parse();
        add_allocatable_thresholds(&mut got, enforce.iter().copied());
        assert_eq!(got, parse(), "{enforce:?}: nothing added");
    }
}

#[test]
fn allocatable_memory_is_observed_on_the_pods_cgroup() {
    use crate::stats::{MemoryStats, NodeStats};
    let t = DateTime::from_timestamp(5, 0).unwrap();
    let pods = |available: Option<u64>| crate::stats::ContainerStats {
        name: "pods".into(),
        memory: Some(MemoryStats {
            time: t,
            available_bytes: available,
            working_set_bytes: Some(700),
            ..MemoryStats::default()
        }),
        ..Default::default()
    };
    let kubelet = crate::stats::ContainerStats {
        name: "kubelet".into(),
        ..pods(Some(1))
    };
    let summary = |c: Vec<crate::stats::ContainerStats>| Summary {
        node: NodeStats {
            system_containers: c,
            ..NodeStats::default()
        },
        ..Summary::default()
    };
    let alloc = |s: &Summary, limit| {
        observations(s, limit)
            .get(&Signal::AllocatableMemoryAvailable)
            .map(|o| (o.available, o.capacity, o.time))
    };
    // The limit node allocatable put on kubepods minus the pods' working set.
    let s = summary(vec![kubelet.clone(), pods(None)]);
    assert_eq!(alloc(&s, Some(1000)), Some((300, 1000, t)));
    // Over the limit (a kernel lag): nothing available.
    assert_eq!(alloc(&s, Some(600)), Some((0, 700, t)));
    // No known limit and none reported: no observation, as upstream for an unlimited cgroup.
    assert_eq!(alloc(&s, None), None);
    // The cgroup's own available bytes win.
    let s = summary(vec![pods(Some(100))]);
    assert_eq!(alloc(&s, Some(1000)), Some((100, 800, t)));
    // No pods container: no observation.
    assert_eq!(alloc(&summary(vec![kubelet]), Some(1000)), None);
}

#[test]
fn thresholds_met_compares_quantities_and_percentages_with_and_without_min_reclaim() {
    let pct = Threshold {
        value: Amount::Percentage(0.1),
        min_reclaim: Some(Amount::Quantity {
            value: 50,
            text: "50".into(),
        }),
        ..hard(Signal::NodeFsAvailable, 0)
    };
    let mem = hard(Signal::MemoryAvailable, 100);
    let ths = vec![pct.clone(), mem.clone()];
    // (nodefs available, memory available, enforce min reclaim) → met signals
    let table: &[(i64, i64, bool, &[Signal])] = &[
        (101, 100, false, &[]),
        (
            99,
            99,
            false,
            &[Signal::NodeFsAvailable, Signal::MemoryAvailable],
        ),
        (120, 100, false, &[]),
        (120, 100, true, &[Signal::NodeFsAvailable]),
        (150, 100, true, &[]),
    ];
    for (nodefs, memory, enforce, want) in table {
        let o = obs(
            &[
                (Signal::NodeFsAvailable, *nodefs, 1000),
                (Signal::MemoryAvailable, *memory, 1000),
            ],
            1,
        );
        let got: Vec<Signal> = thresholds_met(&ths, &o, *enforce)
            .iter()
            .map(|t| t.signal)
            .collect();
        assert_eq!(
            &got, want,
            "nodefs {nodefs} memory {memory} enforce {enforce}"
        );
    }
    // No observation, no threshold met.
    assert!(thresholds_met(&ths, &Observations::new(), false).is_empty());
}

#[tokio::test(start_paused = true)]
async fn soft_grace_period_and_pressure_transition_period() {
    let soft = Threshold {
        grace_period: Duration::from_secs(30),
        ..hard(Signal::MemoryAvailable, 100)
    };
    let ths = vec![soft];
    let period = Duration::from_secs(60);
    let mut st = EvictionState::default();
    let t0 = Instant::now();
    let low = |s| obs(&[(Signal::MemoryAvailable, 50, 1000)], s);
    let fine = |s| obs(&[(Signal::MemoryAvailable, 500, 1000)], s);

    let e = st.evaluate(&ths, &low(1), t0, period);
    assert!(e.pressure.contains(&Pressure::Memory), "pressure at once");
    assert!(e.act_on.is_empty(), "grace period not over");
    let e = st.evaluate(&ths, &low(2), t0 + Duration::from_secs(29), period);
    assert!(e.act_on.is_empty());
    let e = st.evaluate(&ths, &low(3), t0 + Duration::from_secs(30), period);
    assert_eq!(e.act_on.len(), 1, "grace period over");
    // Same stats again: nothing new to act on.
    let e = st.evaluate(&ths, &low(3), t0 + Duration::from_secs(40), period);
    assert!(e.act_on.is_empty(), "stale stats");
    // Recovered: pressure stays for the transition period after the last sighting (t0+40).
    let e = st.evaluate(&ths, &fine(4), t0 + Duration::from_secs(99), period);
    assert!(e.pressure.contains(&Pressure::Memory));
    assert!(e.act_on.is_empty());
    let e = st.evaluate(&ths, &fine(5), t0 + Duration::from_secs(100), period);
    assert!(e.pressure.is_empty(), "transition period over");
    // Met again: the grace period starts over.
    let e = st.evaluate(&ths, &low(6), t0 + Duration::from_secs(101), period);
    assert!(e.act_on.is_empty());
}

#[tokio::test(start_paused = true)]
async fn hard_threshold_acts_at_once_and_min_reclaim_keeps_it_until_reclaimed() {
    let t = Threshold {
        min_reclaim: Some(Amount::Quantity {
            value: 100,
            text: "100".into(),
        }),
        ..hard(Signal::NodeFsAvailable, 100)
    };
    let ths = vec![t];
    let mut st = EvictionState::default();
    let now = Instant::now();
    let at = |a, s| obs(&[(Signal::NodeFsAvailable, a, 1000)], s);
    assert_eq!(
        st.evaluate(&ths, &at(90, 1), now, Duration::ZERO)
            .act_on
            .len(),
        1
    );
    // Above the threshold but below threshold + min reclaim: still acting.
    let e = st.evaluate(&ths, &at(150, 2), now, Duration::ZERO);
    assert_eq!(e.act_on.len(), 1);
    assert!(e.pressure.is_empty(), "no transition period configured");
    // Reclaimed enough.
    assert!(
        st.evaluate(&ths, &at(250, 3), now, Duration::ZERO)
            .act_on
            .is_empty()
    );
    // And not kept any more.
    assert!(
        st.evaluate(&ths, &at(150, 4), now, Duration::ZERO)
            .act_on
            .is_empty()
    );
}

#[test]
fn observations_from_a_summary() {
    use crate::stats::*;
    let t = DateTime::from_timestamp(5, 0).unwrap();
    let fs = FsStats {
        time: t,
        available_bytes: Some(10),
        capacity_bytes: Some(100),
        inodes_free: Some(7),
        inodes: Some(70),
        ..FsStats::default()
    };
    let s = Summary {
        node: NodeStats {
            memory: Some(MemoryStats {
                time: t,
                available_bytes: Some(300),
                working_set_bytes: Some(700),
                ..MemoryStats::default()
            }),
            fs: Some(fs.clone()),
            runtime: Some(RuntimeStats {
                image_fs: Some(FsStats {
                    available_bytes: Some(20),
                    ..fs
                }),
            }),
            rlimit: Some(RlimitStats {
                time: t,
                maxpid: Some(1000),
                curproc: Some(400),
            }),
            ..NodeStats::default()
        },
        ..Summary::default()
    };
    let o = observations(&s, None);
    let pick = |sig| (o[&sig].available, o[&sig].capacity);
    assert_eq!(pick(Signal::MemoryAvailable), (300, 1000));
    assert_eq!(pick(Signal::NodeFsAvailable), (10, 100));
    assert_eq!(pick(Signal::NodeFsInodesFree), (7, 70));
    assert_eq!(pick(Signal::ImageFsAvailable), (20, 100));
    assert_eq!(pick(Signal::ImageFsInodesFree), (7, 70));
    assert_eq!(pick(Signal::PidAvailable), (600, 1000));
}

#[test]
fn quantities_print_as_upstream() {
    for (v, want) in [
        (0, "0"),
        (512, "512"),
        (1536, "1536"),
        (1024, "1Ki"),
        (150 * 1024 * 1024, "150Mi"),
        (3 * 1024 * 1024 * 1024, "3Gi"),
    ] {
        assert_eq!(format_binary(v), want);
    }
    for (v, want) in [(0, "0"), (1500, "1500"), (5000, "5k"), (2_000_000, "2M")] {
        assert_eq!(format_decimal(v), want);
    }
    assert_eq!(Amount::Percentage(0.1).display(1024 * 1024 * 10), "1Mi");
    let mut ths = vec![
        hard(Signal::NodeFsAvailable, 1),
        hard(Signal::MemoryAvailable, 1),
    ];
    sort_by_eviction_priority(&mut ths);
    assert_eq!(ths[0].signal, Signal::MemoryAvailable);
}
