use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

#[tokio::test(start_paused = true)]
async fn a_full_cache_evicts_the_least_recently_used_entry_only() {
    let c: ReviewCache<u32, u32> = ReviewCache::new(3);
    let ttl = Duration::from_secs(60);
    for k in 0..3 {
        c.insert(k, k * 10, ttl);
    }
    // 0 becomes the most recently used; 1 is now the oldest.
    assert_eq!(c.get(&0), Some(0));
    c.insert(3, 30, ttl);
    assert_eq!(c.len(), 3, "one evicted, not everything cleared");
    assert_eq!(c.get(&1), None, "the least recently used went");
    assert_eq!(
        (c.get(&0), c.get(&2), c.get(&3)),
        (Some(0), Some(20), Some(30))
    );
    // Re-inserting a key replaces it without evicting another.
    c.insert(3, 31, ttl);
    assert_eq!(c.len(), 3);
    assert_eq!(c.get(&3), Some(31));
    // A flood of new keys never leaves more than the bound.
    for k in 100..1000 {
        c.insert(k, k, ttl);
    }
    assert_eq!(c.len(), 3);
    assert_eq!(c.get(&999), Some(999));
}

#[tokio::test(start_paused = true)]
async fn entries_expire_after_their_own_ttl() {
    let c: ReviewCache<&str, bool> = ReviewCache::new(10);
    c.insert("allowed", true, Duration::from_secs(300));
    c.insert("denied", false, Duration::from_secs(30));
    c.insert("zero", true, Duration::ZERO);
    assert_eq!(c.get(&"zero"), None, "a zero TTL caches nothing");
    tokio::time::advance(Duration::from_secs(29)).await;
    assert_eq!(c.get(&"denied"), Some(false));
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(c.get(&"denied"), None);
    assert_eq!(c.get(&"allowed"), Some(true));
    tokio::time::advance(Duration::from_secs(270)).await;
    assert_eq!(c.get(&"allowed"), None);
    assert!(c.is_empty(), "expired entries are dropped when looked up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_concurrent_reviews_run_once() {
    let c: Arc<ReviewCache<String, u32>> = Arc::new(ReviewCache::new(100));
    let calls = Arc::new(AtomicUsize::new(0));
    let (release, gate) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (c, calls, mut gate) = (c.clone(), calls.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            c.get_or_fetch("k".to_owned(), || async move {
                calls.fetch_add(1, Ordering::SeqCst);
                gate.wait_for(|open| *open).await.unwrap();
                Ok((7, Duration::from_secs(60)))
            })
            .await
        }));
    }
    // A different key is not held up by the first one's flight.
    let other = c
        .get_or_fetch("other".to_owned(), || async {
            Ok((1, Duration::from_secs(60)))
        })
        .await;
    assert_eq!(other, Ok(1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    release.send_replace(true);
    for t in tasks {
        assert_eq!(t.await.unwrap(), Ok(7));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        c.inflight.lock().unwrap().is_empty(),
        "finished flights are removed"
    );
    // Cached now: no new review.
    let again = c
        .get_or_fetch("k".to_owned(), || async {
            Ok((8, Duration::from_secs(60)))
        })
        .await;
    assert_eq!(again, Ok(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_reach_the_waiters_but_are_not_cached() {
    let c: Arc<ReviewCache<u8, u8>> = Arc::new(ReviewCache::new(10));
    let calls = Arc::new(AtomicUsize::new(0));
    let (release, gate) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (c, calls, mut gate) = (c.clone(), calls.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            c.get_or_fetch(1, || async move {
                calls.fetch_add(1, Ordering::SeqCst);
                gate.wait_for(|open| *open).await.unwrap();
                Err::<(u8, Duration), _>("webhook down".to_owned())
            })
            .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    release.send_replace(true);
    for t in tasks {
        assert_eq!(t.await.unwrap(), Err("webhook down".to_owned()));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let next = c
        .get_or_fetch(1, || async { Ok((5, Duration::from_secs(1))) })
        .await;
    assert_eq!(next, Ok(5), "the error was not cached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_when_the_reviewing_request_goes_away() {
    let c: Arc<ReviewCache<u8, u8>> = Arc::new(ReviewCache::new(10));
    let leader = {
        let c = c.clone();
        tokio::spawn(async move {
            c.get_or_fetch(1, || async {
                std::future::pending::<()>().await;
                Ok((0, Duration::from_secs(60)))
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.get_or_fetch(1, || async { Ok((9, Duration::from_secs(60))) })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    leader.abort();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is not stuck behind the abandoned review")
        .unwrap();
    assert_eq!(got, Ok(9));
    assert!(c.inflight.lock().unwrap().is_empty());
    // An abandoned flight with no waiter does not stay in the map.
    let lone = {
        let c = c.clone();
        tokio::spawn(async move {
            c.get_or_fetch(2, || async {
                std::future::pending::<()>().await;
                Ok((0, Duration::from_secs(60)))
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    lone.abort();
    let _ = lone.await;
    assert!(c.inflight.lock().unwrap().is_empty());
}
