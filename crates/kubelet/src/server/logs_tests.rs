use super::*;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const LOG: &str = "\
2024-01-01T00:00:01.000000001Z stdout F one
2024-01-01T00:00:02Z stderr F two
2024-01-01T00:00:03.5Z stdout P thr
2024-01-01T00:00:03.6Z stdout F ee
2024-01-01T00:00:04Z stdout F four
";

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn try_read(path: &Path, opts: LogOptions) -> Result<String, LogError> {
    let mut out = Vec::new();
    read_logs_blocking(path, &opts, &mut out, &mut || false)?;
    Ok(String::from_utf8(out).unwrap())
}

fn read(path: &Path, opts: LogOptions) -> String {
    try_read(path, opts).unwrap()
}

fn dir_with(live: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, live).unwrap();
    (dir, path)
}

fn gzip(path: &Path, content: &str) {
    let f = File::create(path).unwrap();
    let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    enc.write_all(content.as_bytes()).unwrap();
    enc.finish().unwrap();
}

fn tail(n: usize) -> LogOptions {
    LogOptions {
        tail: Some(n),
        ..Default::default()
    }
}

/// Bytes this thread has read from files so far (`rchar` of `/proc/thread-self/io`).
fn thread_rchar() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// A CRI log of `lines` numbered lines (`line-<i>` padded to about 100 bytes each).
fn write_big_log(path: &Path, lines: usize) -> u64 {
    let mut w = std::io::BufWriter::new(File::create(path).unwrap());
    for i in 0..lines {
        writeln!(
            w,
            "2024-01-01T00:00:00.000000000Z stdout F line-{i:08} {:60}",
            ""
        )
        .unwrap();
    }
    w.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn parses_cri_lines() {
    let r = parse_cri_line(b"2024-01-01T00:00:03.5Z stdout P a b c").unwrap();
    assert_eq!(r.time, t("2024-01-01T00:00:03.5Z"));
    assert_eq!(r.stream, "stdout");
    assert!(r.partial);
    assert_eq!(r.msg, b"a b c");
    let r = parse_cri_line(b"2024-01-01T00:00:03Z stderr F").unwrap();
    assert!(!r.partial);
    assert!(r.msg.is_empty());
    assert!(parse_cri_line(b"garbage").is_none());
    assert!(parse_cri_line(b"2024-01-01T00:00:03Z stdin F x").is_none());
    assert_eq!(
        format_time(&t("2024-01-01T00:00:03.5Z")),
        "2024-01-01T00:00:03.500000000Z"
    );
}

#[test]
fn reads_whole_log_joining_partial_lines() {
    let (_d, p) = dir_with(LOG);
    assert_eq!(read(&p, LogOptions::default()), "one\ntwo\nthree\nfour\n");
}

#[test]
fn tail_lines_counts_lines_from_the_end() {
    let (_d, p) = dir_with(LOG);
    assert_eq!(read(&p, tail(1)), "four\n");
    // A partial record is a line of its own, as upstream counts them.
    assert_eq!(read(&p, tail(2)), "ee\nfour\n");
    assert_eq!(read(&p, tail(0)), "");
    assert_eq!(read(&p, tail(100)), "one\ntwo\nthree\nfour\n");
}

#[test]
fn tail_ignores_an_incomplete_last_line_of_the_live_file() {
    let (_d, p) = dir_with(
        "2024-01-01T00:00:01Z stdout F a\n2024-01-01T00:00:02Z stdout F b\n2024-01-01T00:00:03Z stdout F hal",
    );
    assert_eq!(read(&p, tail(1)), "b\n");
    assert_eq!(read(&p, LogOptions::default()), "a\nb\n");
}

#[test]
fn since_skips_older_records() {
    let (_d, p) = dir_with(LOG);
    let since = |s| LogOptions {
        since: Some(t(s)),
        ..Default::default()
    };
    assert_eq!(
        read(&p, since("2024-01-01T00:00:02Z")),
        "two\nthree\nfour\n"
    );
    assert_eq!(read(&p, since("2024-01-01T00:00:03.55Z")), "ee\nfour\n");
    assert_eq!(read(&p, since("2030-01-01T00:00:00Z")), "");
}

#[test]
fn timestamps_prefix_every_record() {
    let (_d, p) = dir_with(LOG);
    let opts = LogOptions {
        timestamps: true,
        tail: Some(3),
        ..Default::default()
    };
    assert_eq!(
        read(&p, opts),
        "2024-01-01T00:00:03.500000000Z thr2024-01-01T00:00:03.600000000Z ee\n\
         2024-01-01T00:00:04.000000000Z four\n"
    );
}

#[test]
fn limit_bytes_truncates_mid_line() {
    let (_d, p) = dir_with(LOG);
    let limit = |n| LogOptions {
        limit_bytes: Some(n),
        ..Default::default()
    };
    assert_eq!(read(&p, limit(6)), "one\ntw");
    assert_eq!(read(&p, limit(4)), "one\n");
    assert_eq!(read(&p, limit(1000)), "one\ntwo\nthree\nfour\n");
    let with_ts = LogOptions {
        timestamps: true,
        limit_bytes: Some(10),
        ..Default::default()
    };
    assert_eq!(read(&p, with_ts), "2024-01-01");
}

#[test]
fn rotated_plain_and_gzip_files_come_first_in_order() {
    let (d, p) = dir_with("2024-01-01T00:00:09Z stdout F live\n");
    std::fs::write(
        d.path().join("0.log.20240101-000005"),
        "2024-01-01T00:00:05Z stdout F plain-rotated\n",
    )
    .unwrap();
    gzip(
        &d.path().join("0.log.20240101-000001.gz"),
        "2024-01-01T00:00:01Z stdout F gz-rotated\n",
    );
    // Not a rotation of 0.log.
    std::fs::write(
        d.path().join("0.log.20240101-000007.tmp"),
        "2024-01-01T00:00:07Z stdout F temp\n",
    )
    .unwrap();
    assert_eq!(
        read(&p, LogOptions::default()),
        "gz-rotated\nplain-rotated\nlive\n"
    );
    assert_eq!(read(&p, tail(2)), "plain-rotated\nlive\n");
}

#[test]
fn a_gz_next_to_its_uncompressed_original_is_read_once() {
    let (d, p) = dir_with("2024-01-01T00:00:09Z stdout F live\n");
    let rotated = "2024-01-01T00:00:05Z stdout F rotated\n";
    std::fs::write(d.path().join("0.log.20240101-000005"), rotated).unwrap();
    gzip(&d.path().join("0.log.20240101-000005.gz"), rotated);
    assert_eq!(read(&p, LogOptions::default()), "rotated\nlive\n");
}

#[test]
fn tail_spans_the_live_plain_rotated_and_gzip_files() {
    let (d, p) = dir_with("2024-01-01T00:00:09Z stdout F l1\n2024-01-01T00:00:09Z stdout F l2\n");
    // The rotated plain file ends without a newline: its last line still counts.
    std::fs::write(
        d.path().join("0.log.20240101-000005"),
        "2024-01-01T00:00:05Z stdout F r1\n2024-01-01T00:00:05Z stdout F r2",
    )
    .unwrap();
    gzip(
        &d.path().join("0.log.20240101-000001.gz"),
        "2024-01-01T00:00:01Z stdout F g1\n2024-01-01T00:00:01Z stdout F g2\n\
         2024-01-01T00:00:01Z stdout F g3\n",
    );
    assert_eq!(read(&p, tail(1)), "l2\n");
    assert_eq!(read(&p, tail(2)), "l1\nl2\n");
    assert_eq!(read(&p, tail(3)), "r2\nl1\nl2\n");
    assert_eq!(read(&p, tail(4)), "r1\nr2\nl1\nl2\n");
    assert_eq!(read(&p, tail(5)), "g3\nr1\nr2\nl1\nl2\n");
    assert_eq!(read(&p, tail(6)), "g2\ng3\nr1\nr2\nl1\nl2\n");
    assert_eq!(read(&p, tail(7)), "g1\ng2\ng3\nr1\nr2\nl1\nl2\n");
    assert_eq!(read(&p, tail(70)), read(&p, LogOptions::default()));
    // Without the live file, the rotated ones are still read.
    std::fs::remove_file(&p).unwrap();
    assert_eq!(read(&p, tail(3)), "g3\nr1\nr2\n");
}

#[test]
fn a_partial_record_at_the_end_of_a_rotated_file_joins_the_next_file() {
    let (d, p) = dir_with("2024-01-01T00:00:09Z stdout F rld\n");
    std::fs::write(
        d.path().join("0.log.20240101-000005"),
        "2024-01-01T00:00:05Z stdout P hello wo\n",
    )
    .unwrap();
    assert_eq!(read(&p, LogOptions::default()), "hello world\n");
}

#[test]
fn a_malformed_first_line_is_an_error_later_ones_are_skipped() {
    let (_d, p) = dir_with("not a log line\n2024-01-01T00:00:01Z stdout F one\n");
    let err = try_read(&p, LogOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to get parse function: unsupported log format"),
        "{err}"
    );
    let (_d, p) = dir_with(
        "2024-01-01T00:00:01Z stdout F one\nnot a log line\n2024-01-01T00:00:01Z stdin F x\n\
         2024-01-01T00:00:02Z stdout F two\n",
    );
    assert_eq!(read(&p, LogOptions::default()), "one\ntwo\n");
    // With tailLines the first line read is the one that picks the format.
    assert_eq!(read(&p, tail(1)), "two\n");
}

#[test]
fn an_overlong_line_is_dropped_not_buffered() {
    let long = "x".repeat(MAX_LINE + 10);
    let (_d, p) = dir_with(&format!(
        "2024-01-01T00:00:01Z stdout F one\n2024-01-01T00:00:01Z stdout F {long}\n\
         2024-01-01T00:00:02Z stdout F two\n"
    ));
    assert_eq!(read(&p, LogOptions::default()), "one\ntwo\n");
}

#[test]
fn docker_json_lines_are_read_when_the_first_line_is_json() {
    let (_d, p) = dir_with(
        "{\"log\":\"hello\\n\",\"stream\":\"stdout\",\"time\":\"2024-01-01T00:00:01Z\"}\n\
         {\"log\":\"world\\n\",\"stream\":\"stderr\",\"time\":\"2024-01-01T00:00:02Z\"}\n",
    );
    assert_eq!(read(&p, LogOptions::default()), "hello\nworld\n");
    let opts = LogOptions {
        since: Some(t("2024-01-01T00:00:02Z")),
        timestamps: true,
        ..Default::default()
    };
    assert_eq!(read(&p, opts), "2024-01-01T00:00:02.000000000Z world\n");
}

#[test]
fn missing_file_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = try_read(&dir.path().join("3.log"), LogOptions::default()).unwrap_err();
    assert!(
        err.to_string().starts_with("failed to open log file"),
        "{err}"
    );
}

#[test]
fn limit_bytes_and_tail_do_not_read_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    let size = write_big_log(&p, 300_000);
    assert!(size > 25 << 20, "{size}");
    let before = thread_rchar();
    let out = read(
        &p,
        LogOptions {
            limit_bytes: Some(100),
            ..Default::default()
        },
    );
    let read_bytes = thread_rchar() - before;
    assert_eq!(out.len(), 100);
    assert!(out.starts_with("line-00000000"), "{out}");
    assert!(read_bytes < 1 << 20, "limitBytes read {read_bytes} bytes");

    let before = thread_rchar();
    let out = read(&p, tail(3));
    let read_bytes = thread_rchar() - before;
    assert_eq!(
        out.lines()
            .map(|l| l.split(' ').next().unwrap())
            .collect::<Vec<_>>(),
        ["line-00299997", "line-00299998", "line-00299999"]
    );
    assert!(read_bytes < 1 << 20, "tailLines read {read_bytes} bytes");
}

#[test]
fn a_big_gzip_file_is_read_in_full_as_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    let plain = dir.path().join("plain");
    write_big_log(&plain, 100_000);
    let gz = File::create(dir.path().join("0.log.20240101-000001.gz")).unwrap();
    let mut enc = flate2::write::GzEncoder::new(gz, flate2::Compression::fast());
    std::io::copy(&mut File::open(&plain).unwrap(), &mut enc).unwrap();
    enc.finish().unwrap();
    std::fs::write(&p, "2024-01-01T00:00:00Z stdout F live\n").unwrap();
    let out = read(&p, tail(2));
    assert!(out.starts_with("line-00099999 "), "{out}");
    assert!(out.ends_with("\nlive\n"), "{out}");
    let all = read(&p, LogOptions::default());
    assert_eq!(all.lines().count(), 100_001);
}

/// Receives from the reader until `want` arrived in total (chunks may split or merge records).
async fn expect(rx: &mut mpsc::Receiver<LogChunk>, want: &str) {
    let mut got = Vec::new();
    while got.len() < want.len() {
        let chunk = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out; got {:?}", String::from_utf8_lossy(&got)))
            .expect("reader ended")
            .unwrap();
        got.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8_lossy(&got), want);
}

/// A running-check that reports `running` and flags when the reader dropped it.
fn running_flag(
    running: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
) -> Box<dyn FnMut() -> bool + Send> {
    struct OnDrop(Arc<AtomicBool>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let guard = OnDrop(dropped);
    Box::new(move || {
        let _ = &guard;
        running.load(Ordering::SeqCst)
    })
}

fn follow_opts() -> LogOptions {
    LogOptions {
        follow: true,
        ..Default::default()
    }
}

async fn until(flag: &AtomicBool) {
    for _ in 0..100 {
        if flag.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the reader did not stop");
}

#[tokio::test]
async fn the_channel_reader_reports_an_open_error_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut rx = spawn_reader(
        dir.path().join("0.log"),
        LogOptions::default(),
        Box::new(|| false),
        CancellationToken::new(),
    )
    .unwrap();
    let first = rx.recv().await.unwrap();
    assert!(matches!(first, Err(LogError::Open { .. })), "{first:?}");
    assert!(rx.recv().await.is_none());
}

#[tokio::test]
async fn follow_sees_new_lines_and_stops_when_the_container_stops() {
    let (_d, p) = dir_with("2024-01-01T00:00:01Z stdout F first\n");
    let running = Arc::new(AtomicBool::new(true));
    let dropped = Arc::new(AtomicBool::new(false));
    let mut rx = spawn_reader(
        p.clone(),
        follow_opts(),
        running_flag(running.clone(), dropped.clone()),
        CancellationToken::new(),
    )
    .unwrap();
    expect(&mut rx, "first\n").await;
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    // A half-written line is held back until its newline arrives.
    f.write_all(b"2024-01-01T00:00:02Z stdout F sec").unwrap();
    f.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    f.write_all(b"ond\n").unwrap();
    f.flush().unwrap();
    expect(&mut rx, "second\n").await;
    running.store(false, Ordering::SeqCst);
    // Whatever is left (empty chunks), the channel ends.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(c) = rx.recv().await {
            assert!(c.unwrap().is_empty());
        }
    })
    .await;
    assert!(ended.is_ok(), "the follower did not stop");
    until(&dropped).await;
}

#[tokio::test]
async fn follow_continues_in_the_new_file_after_rotation() {
    let (d, p) = dir_with("2024-01-01T00:00:01Z stdout F before\n");
    let dropped = Arc::new(AtomicBool::new(false));
    let mut rx = spawn_reader(
        p.clone(),
        follow_opts(),
        running_flag(Arc::new(AtomicBool::new(true)), dropped.clone()),
        CancellationToken::new(),
    )
    .unwrap();
    expect(&mut rx, "before\n").await;
    std::fs::rename(&p, d.path().join("0.log.20240101-000001")).unwrap();
    std::fs::write(&p, "2024-01-01T00:00:02Z stdout F after\n").unwrap();
    expect(&mut rx, "after\n").await;
    // The consumer goes away: the reader notices and ends.
    drop(rx);
    until(&dropped).await;
}

#[tokio::test]
async fn follow_reads_the_old_files_last_lines_written_just_before_rotation() {
    let (d, p) = dir_with("2024-01-01T00:00:01Z stdout F one\n");
    let dropped = Arc::new(AtomicBool::new(false));
    let mut rx = spawn_reader(
        p.clone(),
        follow_opts(),
        running_flag(Arc::new(AtomicBool::new(true)), dropped.clone()),
        CancellationToken::new(),
    )
    .unwrap();
    expect(&mut rx, "one\n").await;
    // The runtime writes a last line, then the file is rotated and a new one started, all
    // before the follower wakes up: nothing may be lost and the order must hold.
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"2024-01-01T00:00:02Z stdout F two\n").unwrap();
    drop(f);
    std::fs::rename(&p, d.path().join("0.log.20240101-000002")).unwrap();
    std::fs::write(&p, "2024-01-01T00:00:03Z stdout F three\n").unwrap();
    expect(&mut rx, "two\nthree\n").await;
    drop(rx);
    until(&dropped).await;
}

#[tokio::test]
async fn follow_with_tail_zero_starts_at_the_end_and_survives_copytruncate() {
    let (_d, p) = dir_with("2024-01-01T00:00:01Z stdout F old\n");
    let cancel = CancellationToken::new();
    let dropped = Arc::new(AtomicBool::new(false));
    let mut rx = spawn_reader(
        p.clone(),
        LogOptions {
            follow: true,
            tail: Some(0),
            ..Default::default()
        },
        running_flag(Arc::new(AtomicBool::new(true)), dropped.clone()),
        cancel.clone(),
    )
    .unwrap();
    // The empty "started" marker comes first, while nothing is written.
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.is_empty(), "{first:?}");
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"2024-01-01T00:00:02Z stdout F new\n").unwrap();
    drop(f);
    expect(&mut rx, "new\n").await;
    // Truncated in place, then written again from the start.
    std::fs::write(&p, "2024-01-01T00:00:03Z stdout F x\n").unwrap();
    expect(&mut rx, "x\n").await;
    // Shutdown ends the follower.
    cancel.cancel();
    until(&dropped).await;
}

#[tokio::test]
async fn a_slow_consumer_holds_the_reader_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    write_big_log(&p, 50_000);
    let mut rx = spawn_reader(
        p,
        LogOptions::default(),
        Box::new(|| false),
        CancellationToken::new(),
    )
    .unwrap();
    let first = rx.recv().await.unwrap().unwrap();
    assert!(first.len() >= CHUNK, "{}", first.len());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The reader filled the channel and waits: at most its capacity is queued.
    assert_eq!(rx.len(), CHANNEL_CHUNKS);
    let newlines = |b: &Bytes| b.iter().filter(|c| **c == b'\n').count();
    let mut lines = newlines(&first);
    while let Some(c) = rx.recv().await {
        let c = c.unwrap();
        assert!(c.len() < 2 * CHUNK);
        lines += newlines(&c);
    }
    assert_eq!(lines, 50_000);
}

#[test]
fn following_a_stopped_container_ends_without_waiting() {
    let (_d, p) = dir_with(LOG);
    let mut out = Vec::new();
    let started = std::time::Instant::now();
    read_logs_blocking(&p, &follow_opts(), &mut out, &mut || false).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "one\ntwo\nthree\nfour\n");
    assert!(
        started.elapsed() < FOLLOW_CHECK / 2,
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_consumer_that_goes_away_mid_read_stops_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    write_big_log(&p, 200_000);
    let dropped = Arc::new(AtomicBool::new(false));
    // Following a running container: only the consumer's going away can end this read, and it
    // goes away while the reader is blocked on the full channel.
    let mut rx = spawn_reader(
        p,
        follow_opts(),
        running_flag(Arc::new(AtomicBool::new(true)), dropped.clone()),
        CancellationToken::new(),
    )
    .unwrap();
    assert!(!rx.recv().await.unwrap().unwrap().is_empty());
    drop(rx);
    until(&dropped).await;
}

#[test]
fn attack_the_reader_follows_no_symlink_and_opens_no_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, LOG).unwrap();
    let live = dir.path().join("0.log");
    std::os::unix::fs::symlink(&secret, &live).unwrap();
    let err = try_read(&live, LogOptions::default()).unwrap_err();
    assert!(matches!(err, LogError::Open { .. }), "{err}");
    // A symlinked rotated file is skipped, its target not read.
    std::fs::remove_file(&live).unwrap();
    std::fs::write(&live, "").unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join("0.log.20240101-000000")).unwrap();
    assert_eq!(read(&live, LogOptions::default()), "");
    // A FIFO in the live file's place is refused at once instead of blocking the open.
    std::fs::remove_file(&live).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &live,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let err = try_read(&live, LogOptions::default()).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}
