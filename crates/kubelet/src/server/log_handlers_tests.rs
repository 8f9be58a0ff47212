use super::*;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::time::Duration;

async fn body(resp: Resp) -> (StatusCode, String) {
    let code = resp.status();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&b).into_owned())
}

/// `GET /logs/<rel>` below `root`, as `routes` hands it over.
async fn get(root: &Path, rel: &str) -> (StatusCode, String) {
    let comps = Path::new(rel.trim_start_matches('/'))
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            _ => None,
        })
        .collect();
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        system_log(root.to_owned(), comps, rel.to_owned()),
    )
    .await
    .expect("the handler answers");
    body(resp).await
}

/// A log dir with files, a sub-directory, links that stay inside and links that leave, and a
/// secret next to it.
fn log_tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("log");
    std::fs::create_dir_all(root.join("pods/p1")).unwrap();
    std::fs::create_dir(root.join("containers")).unwrap();
    std::fs::write(root.join("syslog"), "hello\n").unwrap();
    std::fs::write(root.join("pods/p1/0.log"), "from the pod\n").unwrap();
    std::fs::write(dir.path().join("secret"), "secret\n").unwrap();
    // Inside: absolute (as /var/log/containers/*.log are), relative, through a linked dir.
    symlink(root.join("pods/p1/0.log"), root.join("containers/abs.log")).unwrap();
    symlink("../pods/p1/0.log", root.join("containers/rel.log")).unwrap();
    symlink("pods", root.join("podlink")).unwrap();
    // Outside: absolute, relative, through a directory link; and a loop.
    symlink(dir.path().join("secret"), root.join("abs-out")).unwrap();
    symlink("../secret", root.join("rel-out")).unwrap();
    symlink("../../../secret", root.join("pods/p1/deep-out")).unwrap();
    symlink(dir.path(), root.join("dir-out")).unwrap();
    symlink("loop", root.join("loop")).unwrap();
    (dir, root)
}

#[tokio::test]
async fn system_logs_serve_links_that_stay_inside() {
    let (_d, root) = log_tree();
    let ok = |s: &str| (StatusCode::OK, s.to_owned());
    assert_eq!(get(&root, "/syslog").await, ok("hello\n"));
    assert_eq!(
        get(&root, "/containers/abs.log").await,
        ok("from the pod\n")
    );
    assert_eq!(
        get(&root, "/containers/rel.log").await,
        ok("from the pod\n")
    );
    assert_eq!(get(&root, "/podlink/p1/0.log").await, ok("from the pod\n"));
    let (code, list) = get(&root, "/podlink/").await;
    assert_eq!(
        (code, list.as_str()),
        (StatusCode::OK, "<pre>\n<a href=\"p1/\">p1/</a>\n</pre>\n")
    );
    assert_eq!(
        get(&root, "/podlink").await.0,
        StatusCode::MOVED_PERMANENTLY
    );
}

#[tokio::test]
async fn system_logs_never_follow_a_link_out_of_the_directory() {
    let (_d, root) = log_tree();
    for rel in [
        "/abs-out",
        "/rel-out",
        "/pods/p1/deep-out",
        "/dir-out/secret",
        "/dir-out/",
        "/loop",
        "/syslog/x",
        "/missing",
    ] {
        let (code, body) = get(&root, rel).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{rel}: {body}");
        assert!(!body.contains("secret"), "{rel}: {body}");
    }
}

#[tokio::test]
async fn system_logs_list_links_as_entries_not_directories() {
    let (_d, root) = log_tree();
    let (code, list) = get(&root, "/").await;
    assert_eq!(code, StatusCode::OK);
    for entry in [
        "\"abs-out\"",
        "\"containers/\"",
        "\"dir-out\"",
        "\"podlink\"",
        "\"pods/\"",
        "\"syslog\"",
    ] {
        assert!(
            list.contains(&format!("<a href={entry}>")),
            "{entry}: {list}"
        );
    }
}

#[tokio::test]
async fn system_logs_refuse_fifos_without_blocking() {
    let (_d, root) = log_tree();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert_eq!(get(&root, "/fifo").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn system_logs_stream_a_large_file_in_chunks() {
    let (_d, root) = log_tree();
    let content: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(root.join("big"), &content).unwrap();
    let resp = system_log(root.clone(), vec!["big".into()], "/big".into()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut frames = 0;
    let mut got = Vec::new();
    while let Some(f) = body.frame().await {
        let data = f.unwrap().into_data().unwrap();
        assert!(data.len() <= logs::CHUNK);
        frames += 1;
        got.extend_from_slice(&data);
    }
    assert!(frames > 1, "{frames}");
    assert_eq!(got, content.as_bytes());
}

fn running(
    flag: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Box<dyn FnMut() -> bool + Send> {
    let flag = flag.clone();
    Box::new(move || flag.load(std::sync::atomic::Ordering::SeqCst))
}

#[tokio::test]
async fn container_log_errors_before_text_are_400() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    let never = || -> Box<dyn FnMut() -> bool + Send> { Box::new(|| false) };
    let (code, msg) = body(
        container_log(
            p.clone(),
            LogOptions::default(),
            never(),
            CancellationToken::new(),
        )
        .await,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(msg.starts_with("failed to open log file"), "{msg}");
    std::fs::write(&p, "garbage\n").unwrap();
    let (code, msg) = body(
        container_log(
            p.clone(),
            LogOptions::default(),
            never(),
            CancellationToken::new(),
        )
        .await,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(msg.contains("unsupported log format"), "{msg}");
    std::fs::write(&p, "").unwrap();
    assert_eq!(
        body(
            container_log(
                p.clone(),
                LogOptions::default(),
                never(),
                CancellationToken::new()
            )
            .await
        )
        .await,
        (StatusCode::OK, String::new())
    );
    std::fs::write(&p, "2024-01-01T00:00:01Z stdout F one\n").unwrap();
    assert_eq!(
        body(container_log(p, LogOptions::default(), never(), CancellationToken::new()).await)
            .await,
        (StatusCode::OK, "one\n".into())
    );
}

#[tokio::test]
async fn a_followed_container_log_answers_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    std::fs::write(&p, "").unwrap();
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let opts = LogOptions {
        follow: true,
        ..Default::default()
    };
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        container_log(p.clone(), opts, running(&flag), CancellationToken::new()),
    )
    .await
    .expect("headers come while the log is empty");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"2024-01-01T00:00:01Z stdout F later\n")
        .unwrap();
    drop(f);
    let mut b = resp.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(5), b.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"later\n"));
    flag.store(false, std::sync::atomic::Ordering::SeqCst);
    let end = tokio::time::timeout(Duration::from_secs(5), b.frame())
        .await
        .unwrap();
    assert!(end.is_none());
}
