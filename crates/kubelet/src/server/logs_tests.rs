#![allow(clippy::unwrap_used)]

use super::*;
use std::io::Write;

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

async fn read(path: &Path, opts: LogOptions) -> String {
    let mut sink = LogSink::Buffer(Vec::new());
    read_logs(path, &opts, &mut sink, || async { false })
        .await
        .unwrap();
    match sink {
        LogSink::Buffer(b) => String::from_utf8(b).unwrap(),
        LogSink::Channel(_) => unreachable!(),
    }
}

fn dir_with(live: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, live).unwrap();
    (dir, path)
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

#[tokio::test]
async fn reads_whole_log_joining_partial_lines() {
    let (_d, p) = dir_with(LOG);
    assert_eq!(
        read(&p, LogOptions::default()).await,
        "one\ntwo\nthree\nfour\n"
    );
}

#[tokio::test]
async fn tail_lines_counts_records_from_the_end() {
    let (_d, p) = dir_with(LOG);
    let opts = |n| LogOptions {
        tail: Some(n),
        ..Default::default()
    };
    assert_eq!(read(&p, opts(1)).await, "four\n");
    assert_eq!(read(&p, opts(2)).await, "ee\nfour\n");
    assert_eq!(read(&p, opts(0)).await, "");
    assert_eq!(read(&p, opts(100)).await, "one\ntwo\nthree\nfour\n");
}

#[tokio::test]
async fn since_skips_older_records() {
    let (_d, p) = dir_with(LOG);
    let opts = LogOptions {
        since: Some(t("2024-01-01T00:00:02Z")),
        ..Default::default()
    };
    assert_eq!(read(&p, opts).await, "two\nthree\nfour\n");
    let opts = LogOptions {
        since: Some(t("2024-01-01T00:00:03.55Z")),
        ..Default::default()
    };
    assert_eq!(read(&p, opts).await, "ee\nfour\n");
}

#[tokio::test]
async fn timestamps_prefix_every_record() {
    let (_d, p) = dir_with(LOG);
    let opts = LogOptions {
        timestamps: true,
        tail: Some(3),
        ..Default::default()
    };
    assert_eq!(
        read(&p, opts).await,
        "2024-01-01T00:00:03.500000000Z thr2024-01-01T00:00:03.600000000Z ee\n\
         2024-01-01T00:00:04.000000000Z four\n"
    );
}

#[tokio::test]
async fn limit_bytes_truncates_mid_line() {
    let (_d, p) = dir_with(LOG);
    let opts = |n| LogOptions {
        limit_bytes: Some(n),
        ..Default::default()
    };
    assert_eq!(read(&p, opts(6)).await, "one\ntw");
    assert_eq!(read(&p, opts(4)).await, "one\n");
    assert_eq!(read(&p, opts(1000)).await, "one\ntwo\nthree\nfour\n");
}

#[tokio::test]
async fn rotated_plain_and_gzip_files_come_first_in_order() {
    let (d, p) = dir_with("2024-01-01T00:00:09Z stdout F live\n");
    std::fs::write(
        d.path().join("0.log.20240101-000005"),
        "2024-01-01T00:00:05Z stdout F plain-rotated\n",
    )
    .unwrap();
    let gz = std::fs::File::create(d.path().join("0.log.20240101-000001.gz")).unwrap();
    let mut enc = flate2::write::GzEncoder::new(gz, flate2::Compression::default());
    enc.write_all(b"2024-01-01T00:00:01Z stdout F gz-rotated\n")
        .unwrap();
    enc.finish().unwrap();
    // Not a rotation of 0.log.
    std::fs::write(
        d.path().join("0.log.20240101-000007.tmp"),
        "2024-01-01T00:00:07Z stdout F temp\n",
    )
    .unwrap();
    assert_eq!(
        read(&p, LogOptions::default()).await,
        "gz-rotated\nplain-rotated\nlive\n"
    );
    let tail2 = LogOptions {
        tail: Some(2),
        ..Default::default()
    };
    assert_eq!(read(&p, tail2).await, "plain-rotated\nlive\n");
}

#[tokio::test]
async fn missing_file_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = LogSink::Buffer(Vec::new());
    let err = read_logs(
        &dir.path().join("3.log"),
        &LogOptions::default(),
        &mut sink,
        || async { false },
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().starts_with("failed to open log file"),
        "{err}"
    );
}

#[tokio::test]
async fn follow_sees_new_lines_and_stops_when_the_container_stops() {
    let (_d, p) = dir_with("2024-01-01T00:00:01Z stdout F first\n");
    let (tx, mut rx) = mpsc::channel(16);
    let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let r2 = running.clone();
    let p2 = p.clone();
    let task = tokio::spawn(async move {
        let mut sink = LogSink::Channel(tx);
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        read_logs(&p2, &opts, &mut sink, move || {
            let r = r2.clone();
            async move { r.load(std::sync::atomic::Ordering::SeqCst) }
        })
        .await
    });
    assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"first\n"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    // A half-written line is held back until its newline arrives.
    f.write_all(b"2024-01-01T00:00:02Z stdout F sec").unwrap();
    f.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    f.write_all(b"ond\n").unwrap();
    f.flush().unwrap();
    assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"second\n"));
    running.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(rx.recv().await.is_none());
}

#[tokio::test]
async fn follow_continues_in_the_new_file_after_rotation() {
    let (d, p) = dir_with("2024-01-01T00:00:01Z stdout F before\n");
    let (tx, mut rx) = mpsc::channel(16);
    let p2 = p.clone();
    let task = tokio::spawn(async move {
        let mut sink = LogSink::Channel(tx);
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        read_logs(&p2, &opts, &mut sink, || async { true }).await
    });
    assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"before\n"));
    std::fs::rename(&p, d.path().join("0.log.20240101-000001")).unwrap();
    std::fs::write(&p, "2024-01-01T00:00:02Z stdout F after\n").unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap(),
        Bytes::from_static(b"after\n")
    );
    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn follow_reads_the_old_files_last_lines_written_just_before_rotation() {
    let (d, p) = dir_with("2024-01-01T00:00:01Z stdout F one\n");
    let (tx, mut rx) = mpsc::channel(16);
    let p2 = p.clone();
    let task = tokio::spawn(async move {
        let mut sink = LogSink::Channel(tx);
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        read_logs(&p2, &opts, &mut sink, || async { true }).await
    });
    let next = async |rx: &mut mpsc::Receiver<Bytes>| {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(next(&mut rx).await, Bytes::from_static(b"one\n"));
    // The runtime writes a last line, then the file is rotated and a new one started, all
    // before the follower wakes up: nothing may be lost and the order must hold.
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"2024-01-01T00:00:02Z stdout F two\n").unwrap();
    drop(f);
    std::fs::rename(&p, d.path().join("0.log.20240101-000002")).unwrap();
    std::fs::write(&p, "2024-01-01T00:00:03Z stdout F three\n").unwrap();
    assert_eq!(next(&mut rx).await, Bytes::from_static(b"two\n"));
    assert_eq!(next(&mut rx).await, Bytes::from_static(b"three\n"));
    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
