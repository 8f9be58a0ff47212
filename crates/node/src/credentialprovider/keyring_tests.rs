use super::*;
use crate::credentialprovider::config::{DockerConfig, DockerConfigEntry};

fn cfg(entries: &[(&str, &str)]) -> DockerConfig {
    entries
        .iter()
        .map(|(loc, user)| {
            (
                (*loc).to_owned(),
                DockerConfigEntry {
                    username: (*user).to_owned(),
                    password: format!("{user}-pw"),
                    email: String::new(),
                },
            )
        })
        .collect()
}

fn users(k: &BasicDockerKeyring, image: &str) -> Vec<String> {
    k.lookup(image).into_iter().map(|a| a.username).collect()
}

#[test]
fn urls_match_as_upstream() {
    // (glob, target, match) — upstream keyring_test.go cases and more.
    let cases = [
        ("*.kubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.*.io", "prefix.kubernetes.io", true),
        ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
        ("*.kubernetes.io", "kubernetes.io", false),
        ("*.*.io", "prefix.kubernetes.io", true),
        ("*.*.io", "kubernetes.io", false),
        ("*.*.io", "sub.prefix.kubernetes.io", false),
        ("*.kubernetes.io", "kubernetes.com", false),
        ("registry.io", "registry.io/app", true),
        ("registry.io/team", "registry.io/team/app", true),
        ("registry.io/team", "registry.io/teamx/app", true), // a string prefix, as upstream
        ("registry.io/team/app", "registry.io/team", false),
        ("registry.io/other", "registry.io/team/app", false),
        ("registry.io:5000", "registry.io:5000/app", true),
        ("registry.io:5000", "registry.io/app", false),
        ("registry.io", "registry.io:5000/app", false),
        ("127.0.0.1:5055", "127.0.0.1:5055/private/busybox", true),
        ("127.0.0.*:5055", "127.0.0.1:5055/private/busybox", true),
        ("[::1]:5000", "[::1]:5000/app", true),
        ("k8s.[a-c]o.io", "k8s.bo.io/app", true),
        ("k8s.[^a-c]o.io", "k8s.bo.io/app", false),
        ("k8s.?o.io", "k8s.bo.io/app", false), // `?` starts a URL query, as upstream
        ("k8s.[a-.io", "k8s.bo.io/app", false), // bad pattern: matches nothing
        ("my registry.io", "my registry.io/app", false), // not a URL
    ];
    for (glob, target, want) in cases {
        assert_eq!(urls_match_str(glob, target), want, "{glob} vs {target}");
    }
}

#[test]
fn glob_matches_like_filepath_match() {
    assert_eq!(glob_match("a*b*c", "axxbyyc"), Ok(true));
    assert_eq!(glob_match("a*b*c", "axxbyy"), Ok(false));
    assert_eq!(glob_match("\\*", "*"), Ok(true));
    assert_eq!(glob_match("\\*", "x"), Ok(false));
    assert_eq!(glob_match("[]a]", "a"), Err(BadPattern));
    assert_eq!(glob_match("[-a]", "a"), Err(BadPattern));
    assert_eq!(glob_match("x\\", "x"), Err(BadPattern));
    assert_eq!(glob_match("[a-c", "b"), Err(BadPattern));
    assert_eq!(glob_match("", ""), Ok(true));
    assert_eq!(glob_match("*", ""), Ok(true));
}

#[test]
fn hostile_glob_is_linear() {
    // Exponential in a naive backtracking matcher; must finish at once here.
    let pattern = "*a".repeat(2000) + "b";
    let name = "a".repeat(20_000);
    let start = std::time::Instant::now();
    assert_eq!(glob_match(&pattern, &name), Ok(false));
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn schemes_and_registry_api_paths_are_stripped() {
    let mut k = BasicDockerKeyring::default();
    k.add(&cfg(&[
        ("https://reg-a.io/v2/", "a"),
        ("http://reg-b.io/v1/team", "b"),
        ("reg-c.io/", "c"),
        ("https://reg-d.io/v2/team/app", "d"),
    ]));
    assert_eq!(
        k.locations(),
        ["reg-d.io/team/app", "reg-c.io", "reg-b.io/team", "reg-a.io"]
    );
    assert_eq!(users(&k, "reg-a.io/x/y"), ["a"]);
    assert_eq!(users(&k, "reg-b.io/team/y"), ["b"]);
    assert!(users(&k, "reg-b.io/other/y").is_empty());
    assert_eq!(users(&k, "reg-c.io/x"), ["c"]);
    assert_eq!(users(&k, "reg-d.io/team/app"), ["d"]);
}

#[test]
fn most_specific_location_first_and_every_match_returned() {
    let mut k = BasicDockerKeyring::default();
    k.add(&cfg(&[
        ("quay.io", "host"),
        ("quay.io/coreos", "team"),
        ("quay.io/coreos/etcd", "repo"),
        ("*.io", "wild-tld"),
    ]));
    // Another secret for the same host: both credentials kept, in the order added.
    k.add(&cfg(&[("quay.io", "host2")]));
    assert_eq!(
        users(&k, "quay.io/coreos/etcd"),
        ["repo", "team", "host", "host2", "wild-tld"]
    );
    assert_eq!(
        users(&k, "quay.io/other/app"),
        ["host", "host2", "wild-tld"]
    );
    assert_eq!(users(&k, "gcr.io/app"), ["wild-tld"]);
    assert!(users(&k, "registry.k8s.io/pause").is_empty());
}

#[test]
fn wildcard_subdomains() {
    let mut k = BasicDockerKeyring::default();
    k.add(&cfg(&[
        ("*.example.com", "wild"),
        ("registry.example.com:5000", "port"),
    ]));
    assert_eq!(users(&k, "eu.example.com/app"), ["wild"]);
    assert!(users(&k, "example.com/app").is_empty());
    assert!(users(&k, "a.b.example.com/app").is_empty());
    assert_eq!(users(&k, "registry.example.com:5000/app"), ["port"]);
    // The glob has no port, so a port-qualified image does not match it.
    assert!(users(&k, "eu.example.com:443/app").is_empty());
}

#[test]
fn docker_hub_images_fall_back_to_index_docker_io() {
    let mut k = BasicDockerKeyring::default();
    k.add(&cfg(&[("https://index.docker.io/v1/", "hub")]));
    assert_eq!(users(&k, "docker.io/library/busybox"), ["hub"]);
    assert_eq!(users(&k, "index.docker.io/team/app"), ["hub"]);
    assert_eq!(users(&k, "team/app"), ["hub"]);
    assert!(users(&k, "quay.io/team/app").is_empty());
    assert!(users(&k, "localhost:5000/app").is_empty());
}

#[test]
fn invalid_locations_are_skipped() {
    let mut k = BasicDockerKeyring::default();
    k.add(&cfg(&[
        ("bad host.io", "space"),
        ("reg.io:port", "port"),
        ("ok.io", "ok"),
        ("ctl\r\nInjected: 1", "ctl"),
    ]));
    assert_eq!(k.locations(), ["ok.io"]);
    assert_eq!(users(&k, "ok.io/app"), ["ok"]);
}

#[test]
fn schemeless_urls_parse_as_upstream() {
    let u = parse_schemeless_url("user@reg.io:5000/a%20b/c?x=1#frag").unwrap();
    assert_eq!(u.host, "reg.io:5000");
    assert_eq!(u.path, "/a b/c");
    assert_eq!(
        parse_schemeless_url("reg.io:50x0"),
        Err(UrlError::Port(":50x0".into()))
    );
    assert_eq!(parse_schemeless_url("[::1"), Err(UrlError::Bracket));
    assert_eq!(
        parse_schemeless_url("a\u{7f}"),
        Err(UrlError::ControlCharacter)
    );
    assert_eq!(
        parse_schemeless_url("reg.io/%zz"),
        Err(UrlError::Escape("%zz".into()))
    );
}
