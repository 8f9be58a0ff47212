//! Tests of the log manager: against the fake CRI runtime (the fake does not write logs: the
//! tests play the runtime's part by writing the live file), and against `FileRuntime`, a
//! runtime that really writes (a writer thread per container, as containerd's log writer) and
//! reopens its file on `ReopenContainerLog`, with a per-container reopen latency.

use super::*;
use rkubelet_cri::api;
use rkubelet_cri::fake::FakeRuntime;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

struct Env {
    rt: Arc<FakeRuntime>,
    dir: tempfile::TempDir,
    _id: String,
}

impl Env {
    async fn new() -> Self {
        let rt = Arc::new(FakeRuntime::with_images(&["busybox:1.36"]));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("c")).unwrap();
        let sb = rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        name: "p".to_owned(),
                        uid: "u".to_owned(),
                        namespace: "ns".to_owned(),
                        attempt: 0,
                    }),
                    ..Default::default()
                }),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .pod_sandbox_id;
        let id = rt
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sb,
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: "c".to_owned(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox:1.36".to_owned(),
                        ..Default::default()
                    }),
                    log_path: "c/0.log".to_owned(),
                    ..Default::default()
                }),
                sandbox_config: Some(api::PodSandboxConfig {
                    log_directory: dir.path().to_string_lossy().into_owned(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .container_id;
        rt.start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        Self { rt, dir, _id: id }
    }

    fn live(&self) -> PathBuf {
        self.dir.path().join("c/0.log")
    }

    fn write_live(&self, bytes: usize) {
        std::fs::write(self.live(), "x".repeat(bytes)).unwrap();
    }

    fn files(&self) -> Vec<String> {
        names(&self.dir.path().join("c"))
    }

    fn manager(&self, max_size: u64, max_files: usize) -> ContainerLogManager {
        ContainerLogManager::new(self.rt.clone(), config(max_size, max_files, 10))
            .with_inotify(false)
    }
}

fn config(max_size: u64, max_files: usize, interval_secs: u64) -> LogManagerConfig {
    LogManagerConfig {
        policy: LogRotatePolicy {
            max_size,
            max_files,
        },
        max_workers: 1,
        monitor_interval: Duration::from_secs(interval_secs),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Runs `manager` until the returned guard is dropped... or `stop` is awaited.
struct Running {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(manager: ContainerLogManager) -> Self {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(manager.run(cancel.clone()));
        Self { cancel, task }
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

/// Waits (paused or real time) until `f` holds, for at most `within`.
async fn until(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[test]
fn config_validation_names_fields() {
    let i = Duration::from_secs(10);
    assert_eq!(
        LogManagerConfig::from_config(10, 1, 1, i)
            .unwrap_err()
            .to_string(),
        "invalid containerLogMaxFiles 1, must be > 1"
    );
    assert_eq!(
        LogManagerConfig::from_config(10, 5, 0, i)
            .unwrap_err()
            .to_string(),
        "containerLogMaxWorkers 0 must be greater than or equal to 1"
    );
    assert_eq!(LogManagerConfig::from_config(-1, 5, 1, i).unwrap(), None);
    let c = LogManagerConfig::from_config(10 * 1024 * 1024, 5, 2, i)
        .unwrap()
        .unwrap();
    assert_eq!(c.policy.max_size, 10 * 1024 * 1024);
    assert_eq!(c.policy.max_files, 5);
}

#[tokio::test(start_paused = true)]
async fn rotates_compresses_and_keeps_at_most_max_files() {
    let env = Env::new().await;
    let manager = env.manager(100, 3);
    let stats = manager.stats();
    env.write_live(50);
    let run = Running::start(manager);
    until(Duration::from_secs(1), "first check", || {
        LogStats::get(&stats.checks) >= 1
    })
    .await;
    assert_eq!(
        env.rt.call_count("ReopenContainerLog"),
        0,
        "below the limit"
    );

    for round in 0..4u64 {
        env.write_live(100 + round as usize);
        tokio::time::sleep(Duration::from_secs(10)).await;
        until(Duration::from_secs(1), "rotation", || {
            LogStats::get(&stats.rotations) > round
        })
        .await;
        assert!(
            !env.live().exists(),
            "renamed away until the runtime reopens"
        );
    }
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 4);
    // Let the background compression finish.
    until(Duration::from_secs(5), "compressed", || {
        env.files().iter().any(|f| f.ends_with(".gz"))
    })
    .await;
    run.stop().await;
    // The runtime reopened the live file: max 3 files = the live one, the newest rotated
    // (uncompressed) and one compressed.
    env.write_live(10);
    let files = env.files();
    assert_eq!(files.len(), 3, "{files:?}");
    assert_eq!(files[0], "0.log");
    assert!(files[1].ends_with(".gz"), "{files:?}");
    assert!(
        files[2].starts_with("0.log.") && files[2].len() == "0.log.YYYYMMDD-HHMMSS".len(),
        "{files:?}"
    );
    assert!(files[1] < files[2], "the compressed one is the older");
}

#[tokio::test(start_paused = true)]
async fn failed_reopen_renames_back_and_backs_off() {
    let env = Env::new().await;
    let manager = env.manager(10, 5);
    let stats = manager.stats();
    env.write_live(20);
    env.rt.fail_next(
        "ReopenContainerLog",
        CriError::unknown("ReopenContainerLog", "boom"),
    );
    let run = Running::start(manager);
    until(Duration::from_secs(1), "first attempt", || {
        env.rt.call_count("ReopenContainerLog") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(env.files(), vec!["0.log"], "the live file is put back");
    // Retried after the back-off (100 ms), not only at the next monitor interval (10 s).
    until(Duration::from_secs(1), "retry", || {
        LogStats::get(&stats.rotations) == 1
    })
    .await;
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 2);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn periodic_task_rotates_and_stops_on_cancel() {
    let env = Env::new().await;
    let manager = env.manager(10, 5);
    env.write_live(20);
    let run = Running::start(manager);
    until(Duration::from_secs(1), "first rotation", || {
        env.rt.call_count("ReopenContainerLog") == 1
    })
    .await;
    env.write_live(20);
    // No inotify here: only the monitor interval (10 s) finds the second one.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 1);
    tokio::time::sleep(Duration::from_secs(6)).await;
    until(Duration::from_secs(1), "second rotation", || {
        env.rt.call_count("ReopenContainerLog") == 2
    })
    .await;
    until(Duration::from_secs(5), "compressed", || {
        env.files().iter().any(|f| f.ends_with(".gz"))
    })
    .await;
    run.stop().await;
    // Two rotations (the fake runtime does not recreate the live file): the older one is
    // compressed, the newer one not.
    let files = env.files();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        files[0].ends_with(".gz") && !files[1].ends_with(".gz"),
        "{files:?}"
    );
}

/// Sets a directory's modification time (what a change in it would set).
fn set_dir_time(dir: &Path, t: std::time::SystemTime) {
    std::fs::File::open(dir).unwrap().set_modified(t).unwrap();
}

/// 110 containers list their log directories every monitor interval otherwise: a directory
/// whose time has not moved since a pass that found nothing to do is not listed again. A file
/// planted behind the directory's back (its time put back) shows the pass was skipped; a
/// change to the directory brings the pass back.
#[tokio::test(start_paused = true)]
async fn housekeeping_skips_a_log_directory_that_did_not_change() {
    let env = Env::new().await;
    let manager = env.manager(1 << 20, 5);
    let stats = manager.stats();
    let cdir = env.dir.path().join("c");
    env.write_live(10);
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    set_dir_time(&cdir, old);
    let run = Running::start(manager);
    until(Duration::from_secs(1), "first pass", || {
        LogStats::get(&stats.housekeepings) == 1
    })
    .await;
    // Two rotated files: housekeeping would compress the older one.
    for ts in ["20260101-000000", "20260101-000001"] {
        std::fs::write(cdir.join(format!("0.log.{ts}")), "old").unwrap();
    }
    set_dir_time(&cdir, old);
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(LogStats::get(&stats.housekeepings), 1, "skipped twice");
    assert!(!env.files().iter().any(|f| f.ends_with(".gz")));
    // Any change to the directory moves its time: the next interval looks again.
    set_dir_time(&cdir, old + Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(10)).await;
    until(
        Duration::from_secs(5),
        "compressed after the change",
        || env.files().contains(&"0.log.20260101-000000.gz".to_owned()),
    )
    .await;
    assert_eq!(LogStats::get(&stats.housekeepings), 2);
    // A directory changed within the last two seconds is never taken as settled: a change in
    // the same timestamp tick as the look before the pass would go unseen.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let n = LogStats::get(&stats.housekeepings);
    set_dir_time(&cdir, std::time::SystemTime::now());
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    assert!(LogStats::get(&stats.housekeepings) >= n + 2);
    run.stop().await;
}

/// One container of [`FileRuntime`].
struct FileContainer {
    log: PathBuf,
    reopen_latency: Duration,
    /// Reopen requests to the writer thread (acknowledged once the new file is open).
    reopen: Option<std::sync::mpsc::Sender<std::sync::mpsc::SyncSender<()>>>,
}

/// A runtime that writes logs like containerd: a writer per container appends to its open
/// file; `ReopenContainerLog` makes it open the live path anew (creating it).
#[derive(Default)]
struct FileRuntime {
    containers: Mutex<HashMap<String, FileContainer>>,
    reopens: Mutex<HashMap<String, usize>>,
}

impl FileRuntime {
    fn add(&self, id: &str, log: PathBuf, reopen_latency: Duration) {
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        self.containers.lock().unwrap().insert(
            id.to_owned(),
            FileContainer {
                log,
                reopen_latency,
                reopen: None,
            },
        );
    }

    fn reopens(&self, id: &str) -> usize {
        self.reopens.lock().unwrap().get(id).copied().unwrap_or(0)
    }

    /// Starts a writer thread for `id` appending `chunk`-byte writes at `rate` bytes/s until
    /// `stop`.
    fn start_writer(
        &self,
        id: &str,
        rate: u64,
        stop: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<u64> {
        use std::io::Write;
        let (tx, rx) = std::sync::mpsc::channel::<std::sync::mpsc::SyncSender<()>>();
        let log = {
            let mut c = self.containers.lock().unwrap();
            let c = c.get_mut(id).unwrap();
            c.reopen = Some(tx);
            c.log.clone()
        };
        std::thread::spawn(move || {
            let open = || {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap()
            };
            let mut f = open();
            let chunk = vec![b'y'; 16 * 1024];
            let start = std::time::Instant::now();
            let mut written = 0u64;
            while !stop.load(Ordering::Relaxed) {
                while let Ok(ack) = rx.try_recv() {
                    f = open();
                    let _ = ack.send(());
                }
                f.write_all(&chunk).unwrap();
                written += chunk.len() as u64;
                // Pace to `rate`.
                let due = Duration::from_secs_f64(written as f64 / rate as f64);
                if let Some(ahead) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(ahead);
                }
            }
            written
        })
    }
}

#[async_trait::async_trait]
impl LogRuntime for FileRuntime {
    async fn running_containers(&self) -> Result<Vec<String>, LogError> {
        Ok(self.containers.lock().unwrap().keys().cloned().collect())
    }

    async fn log_path(&self, id: &str) -> Result<Option<PathBuf>, LogError> {
        Ok(self
            .containers
            .lock()
            .unwrap()
            .get(id)
            .map(|c| c.log.clone()))
    }

    async fn reopen_log(&self, id: &str) -> Result<(), CriError> {
        let (latency, writer, log) = {
            let c = self.containers.lock().unwrap();
            let c = c.get(id).unwrap();
            (c.reopen_latency, c.reopen.clone(), c.log.clone())
        };
        tokio::time::sleep(latency).await;
        match writer {
            Some(tx) => {
                // A writer that has stopped (end of test) acknowledges nothing.
                let (ack_tx, ack_rx) = std::sync::mpsc::sync_channel(1);
                if tx.send(ack_tx).is_ok() {
                    let _ = tokio::task::spawn_blocking(move || ack_rx.recv()).await;
                }
            }
            None => {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
            }
        }
        *self
            .reopens
            .lock()
            .unwrap()
            .entry(id.to_owned())
            .or_default() += 1;
        Ok(())
    }
}

/// Sizes in a container log directory.
#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    live: u64,
    total: u64,
    files: usize,
}

fn sample(dir: &Path) -> Sample {
    let mut s = Sample::default();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let Ok(m) = e.metadata() else { continue };
        s.files += 1;
        s.total += m.len();
        if e.file_name() == "0.log" {
            s.live = m.len();
        }
    }
    s
}

/// The bound this test holds a 100 MB/s writer to, with 1 MiB / 2 files: the live file may
/// overshoot by what the writer writes during the reaction (inotify event → size check →
/// rename → reopen). A 100 ms reaction budget (measured: a few ms; the slack is for a loaded
/// CI machine) gives 1 MiB + 10 MB; the total is two such files.
const FAST_RATE: u64 = 100_000_000;
const MAX_SIZE: u64 = 1024 * 1024;
const LIVE_BOUND: u64 = MAX_SIZE + FAST_RATE / 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100mb_per_s_writer_is_held_near_the_limit_by_inotify() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Arc::new(FileRuntime::default());
    let cdir = dir.path().join("ns_p_u/c");
    rt.add("fast", cdir.join("0.log"), Duration::ZERO);
    // The monitor interval alone would let 100 MB/s × 5 s = 500 MB through.
    let manager = ContainerLogManager::with_log_runtime(rt.clone(), config(MAX_SIZE, 2, 5))
        .with_pod_logs_dir(dir.path().to_owned());
    let stats = manager.stats();
    let run = Running::start(manager);
    // The worker exists once the first listing is done.
    until(Duration::from_secs(5), "first check", || {
        LogStats::get(&stats.checks) >= 1
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = rt.start_writer("fast", FAST_RATE, stop.clone());
    let (mut max_live, mut max_total, mut max_files) = (0, 0, 0);
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let s = sample(&cdir);
        max_live = max_live.max(s.live);
        max_total = max_total.max(s.total);
        max_files = max_files.max(s.files);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    let rotations = LogStats::get(&stats.rotations);
    run.stop().await;
    let rate = written as f64 / started.elapsed().as_secs_f64();
    eprintln!(
        "writer {:.0} MB/s, {rotations} rotations, max live {max_live} B, max total {max_total} B, max files {max_files}",
        rate / 1e6
    );
    assert!(
        rate > 50e6,
        "the writer did not reach its pace: {rate:.0} B/s"
    );
    assert!(
        rotations as f64 > 0.5 * written as f64 / MAX_SIZE as f64,
        "{rotations} rotations for {written} bytes"
    );
    assert!(max_live <= LIVE_BOUND, "live file reached {max_live} B");
    assert!(max_total <= 2 * LIVE_BOUND, "logs reached {max_total} B");
    assert!(
        max_files <= 2,
        "{max_files} files with containerLogMaxFiles 2"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_reopen_of_one_container_does_not_delay_another() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Arc::new(FileRuntime::default());
    let (a, b) = (dir.path().join("a/c/0.log"), dir.path().join("b/c/0.log"));
    rt.add("a", a.clone(), Duration::from_secs(60));
    rt.add("b", b.clone(), Duration::ZERO);
    std::fs::write(&a, "x".repeat(100)).unwrap();
    std::fs::write(&b, "x".repeat(100)).unwrap();
    let manager =
        ContainerLogManager::with_log_runtime(rt.clone(), config(10, 2, 5)).with_inotify(false);
    let run = Running::start(manager);
    until(Duration::from_secs(1), "b rotated", || rt.reopens("b") == 1).await;
    // Again at the next interval, while a's reopen still hangs.
    std::fs::write(&b, "x".repeat(100)).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    until(Duration::from_secs(1), "b rotated again", || {
        rt.reopens("b") == 2
    })
    .await;
    assert_eq!(rt.reopens("a"), 0, "a's reopen is still in flight");
    until(Duration::from_secs(60), "a rotated", || {
        rt.reopens("a") == 1
    })
    .await;
    run.stop().await;
    assert_eq!(names(&dir.path().join("a/c")).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_compression_never_stops_rotation_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Arc::new(FileRuntime::default());
    let log = dir.path().join("p/c/0.log");
    let cdir = log.parent().unwrap().to_owned();
    rt.add("c", log.clone(), Duration::ZERO);
    std::fs::write(&log, "x".repeat(100)).unwrap();
    let manager =
        ContainerLogManager::with_log_runtime(rt.clone(), config(10, 3, 5)).with_inotify(false);
    let stats = manager.stats();
    let run = Running::start(manager);
    until(Duration::from_secs(1), "rotation 1", || {
        rt.reopens("c") == 1
    })
    .await;
    let first = names(&cdir).into_iter().find(|n| n != "0.log").unwrap();
    // The compression of the first rotated file cannot create its .tmp.
    let obstacle = cdir.join(format!("{first}.tmp"));
    std::fs::create_dir(&obstacle).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::write(&log, "x".repeat(100)).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    until(Duration::from_secs(1), "rotation 2", || {
        rt.reopens("c") == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(cdir.join(&first).exists(), "left uncompressed");
    assert!(!cdir.join(format!("{first}.gz")).exists());
    // Rotation goes on regardless (upstream stopped here for good, #102553).
    std::fs::write(&log, "x".repeat(100)).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    until(Duration::from_secs(1), "rotation 3", || {
        rt.reopens("c") == 3
    })
    .await;
    assert_eq!(LogStats::get(&stats.rotations), 3);
    // The obstacle goes: the next check compresses what is left uncompressed.
    std::fs::remove_dir(&obstacle).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    until(Duration::from_secs(2), "retried compression", || {
        let n = names(&cdir);
        n.len() == 3 && n.iter().filter(|f| f.ends_with(".gz")).count() == 1
    })
    .await;
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_disk_loses_the_oldest_rotated_files_first() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Arc::new(FileRuntime::default());
    let (a, b) = (dir.path().join("a/c/0.log"), dir.path().join("b/c/0.log"));
    rt.add("a", a.clone(), Duration::ZERO);
    rt.add("b", b.clone(), Duration::ZERO);
    let adir = a.parent().unwrap().to_owned();
    let bdir = b.parent().unwrap().to_owned();
    std::fs::write(adir.join("0.log.20260101-000001.gz"), vec![0u8; 1000]).unwrap();
    std::fs::write(bdir.join("0.log.20260101-000002.gz"), vec![0u8; 1000]).unwrap();
    std::fs::write(adir.join("0.log.20260101-000003"), vec![0u8; 1000]).unwrap();
    // A 3,100-byte filesystem: 3,000 bytes used, 100 free; 1,500 wanted (max size).
    let root = dir.path().to_owned();
    let available: AvailableFn = Arc::new(move |_: &Path| {
        let used: u64 = ["a/c", "b/c"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        Ok(3100u64.saturating_sub(used))
    });
    let manager = ContainerLogManager::with_log_runtime(rt.clone(), config(1500, 5, 5))
        .with_inotify(false)
        .with_available(available);
    let stats = manager.stats();
    let run = Running::start(manager);
    tokio::time::sleep(Duration::from_secs(6)).await;
    until(Duration::from_secs(2), "relief", || {
        LogStats::get(&stats.relieved) == 2
    })
    .await;
    run.stop().await;
    assert_eq!(names(&adir), vec!["0.log", "0.log.20260101-000003"]);
    assert_eq!(names(&bdir), vec!["0.log"]);
}
