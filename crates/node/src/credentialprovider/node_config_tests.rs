use super::*;

/// A root dir, a working dir and a home dir under one temp dir.
struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    cwd: PathBuf,
    home: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let [root, cwd, home] = ["root", "cwd", "home"].map(|d| tmp.path().join(d));
        for d in [&root, &cwd, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(home.join(".docker")).unwrap();
        Self {
            _tmp: tmp,
            root,
            cwd,
            home,
        }
    }

    fn paths(&self) -> SearchPaths {
        SearchPaths::from_dirs(&self.root, Some(&self.cwd), Some(&self.home))
    }
}

fn auths(user: &str, location: &str) -> String {
    serde_json::json!({"auths": {location: {"username": user, "password": "pw"}}}).to_string()
}

fn legacy(user: &str, location: &str) -> String {
    serde_json::json!({location: {"username": user, "password": "pw"}}).to_string()
}

fn users(a: &[AuthConfig]) -> Vec<&str> {
    a.iter().map(|a| a.username.as_str()).collect()
}

#[test]
fn upstream_search_order() {
    let p = SearchPaths::from_dirs(
        Path::new("/var/lib/kubelet"),
        Some(Path::new("/srv")),
        Some(Path::new("/root")),
    );
    let s = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        s(&p.config_json),
        [
            "/var/lib/kubelet/config.json",
            "/srv/config.json",
            "/root/.docker/config.json",
            "/.docker/config.json"
        ]
    );
    assert_eq!(
        s(&p.dockercfg),
        [
            "/var/lib/kubelet/.dockercfg",
            "/srv/.dockercfg",
            "/root/.dockercfg",
            "/.dockercfg"
        ]
    );
}

#[test]
fn the_first_valid_file_wins_and_config_json_before_dockercfg() {
    let d = Dirs::new();
    let image = "registry.example.com/app";
    let loc = "registry.example.com";
    let node = |d: &Dirs| NodeDockerConfig::new(d.paths()).lookup(image);
    assert!(node(&d).is_empty(), "no file: no credentials");

    std::fs::write(d.root.join(".dockercfg"), legacy("root-legacy", loc)).unwrap();
    assert_eq!(users(&node(&d)), ["root-legacy"]);
    // Any valid config.json, even the last searched, beats every .dockercfg.
    std::fs::write(d.home.join(".docker/config.json"), auths("home-json", loc)).unwrap();
    assert_eq!(users(&node(&d)), ["home-json"]);
    std::fs::write(d.cwd.join("config.json"), auths("cwd-json", loc)).unwrap();
    assert_eq!(users(&node(&d)), ["cwd-json"]);
    std::fs::write(d.root.join("config.json"), auths("root-json", loc)).unwrap();
    assert_eq!(users(&node(&d)), ["root-json"]);
    // Only the winning file is used: the others' credentials are not merged in.
    std::fs::write(d.root.join("config.json"), auths("root-json", "other.io")).unwrap();
    assert!(node(&d).is_empty());

    // A malformed or non-regular file is skipped and the search goes on.
    std::fs::write(d.root.join("config.json"), "{not json").unwrap();
    assert_eq!(users(&node(&d)), ["cwd-json"]);
    std::fs::remove_file(d.cwd.join("config.json")).unwrap();
    std::fs::create_dir(d.cwd.join("config.json")).unwrap();
    assert_eq!(users(&node(&d)), ["home-json"]);
    let bad_auth = serde_json::json!({"auths": {loc: {"auth": "!!!"}}}).to_string();
    std::fs::write(d.home.join(".docker/config.json"), bad_auth).unwrap();
    assert_eq!(users(&node(&d)), ["root-legacy"]);
}

#[test]
fn a_fifo_or_oversized_file_is_skipped_without_blocking() {
    let d = Dirs::new();
    let loc = "registry.example.com";
    let fifo = d.root.join("config.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        d.cwd.join("config.json"),
        " ".repeat(MAX_FILE_SIZE as usize + 1),
    )
    .unwrap();
    std::fs::write(d.home.join(".docker/config.json"), auths("home", loc)).unwrap();
    let start = std::time::Instant::now();
    let got = NodeDockerConfig::new(d.paths()).lookup("registry.example.com/x");
    assert_eq!(users(&got), ["home"]);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        read_one(&fifo, parse_docker_config_json),
        Err(NodeConfigError::NotRegular { .. })
    ));
    assert!(matches!(
        read_one(&d.cwd.join("config.json"), parse_docker_config_json),
        Err(NodeConfigError::TooLarge { .. })
    ));
}

#[tokio::test]
async fn a_search_result_is_kept_five_minutes() {
    tokio::time::pause();
    let d = Dirs::new();
    let loc = "registry.example.com";
    let node = NodeDockerConfig::new(d.paths());
    assert!(node.lookup("registry.example.com/x").is_empty());
    std::fs::write(d.root.join("config.json"), auths("late", loc)).unwrap();
    tokio::time::advance(CACHE_LIFETIME - Duration::from_secs(1)).await;
    assert!(
        node.lookup("registry.example.com/x").is_empty(),
        "still cached"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(users(&node.lookup("registry.example.com/x")), ["late"]);
}
