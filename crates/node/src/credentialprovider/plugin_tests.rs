use std::os::unix::fs::PermissionsExt;

use super::*;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

/// A bin dir with plugin `fake` (a shell script) and a config naming it. The script saves
/// its stdin, arguments and `$MARKER` env var, counts its runs and prints `response.json`
/// (or sleeps / fails when told to by files in the dir).
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(default_cache: &str, match_images: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let d = dir.path().display();
        let script = format!(
            "#!/bin/sh\ncat > {d}/request.json\necho \"$@\" > {d}/args\necho \"$MARKER\" > {d}/env\necho run >> {d}/count\nif [ -f {d}/sleep ]; then sleep 30; fi\nif [ -f {d}/fail ]; then echo 'plugin says no' >&2; exit 3; fi\ncat {d}/response.json\n"
        );
        let path = bin.join("fake");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let images = match_images
            .iter()
            .map(|m| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: fake\n  apiVersion: {V1}\n  matchImages: [{images}]\n  defaultCacheDuration: {default_cache}\n  args: [get-credentials, --verbose]\n  env:\n  - name: MARKER\n    value: from-config\n"
            ),
        )
        .unwrap();
        Self { dir }
    }

    fn respond(&self, body: serde_json::Value) {
        std::fs::write(self.dir.path().join("response.json"), body.to_string()).unwrap();
    }

    fn providers(&self) -> CredentialProviders {
        CredentialProviders::load(
            &self.dir.path().join("config.yaml"),
            &self.dir.path().join("bin"),
        )
        .unwrap()
    }

    fn runs(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("count"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }
}

fn response(cache_key_type: &str, cache_duration: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "apiVersion": V1,
        "kind": "CredentialProviderResponse",
        "cacheKeyType": cache_key_type,
        "auth": {
            "*.registry.io": {"username": "plugin-user", "password": "plugin-pw"},
            "other.io": {"username": "elsewhere", "password": "x"},
        },
    });
    if let Some(d) = cache_duration {
        v["cacheDuration"] = serde_json::json!(d);
    }
    v
}

fn users(auths: &[AuthConfig]) -> Vec<&str> {
    auths.iter().map(|a| a.username.as_str()).collect()
}

#[tokio::test]
async fn exec_protocol_request_response_args_and_env() {
    let f = Fixture::new("0s", &["*.registry.io"]);
    f.respond(response("Image", None));
    let p = f.providers();
    let got = p.lookup("eu.registry.io/team/app").await;
    assert_eq!(users(&got), ["plugin-user"]);
    assert_eq!(got[0].password, "plugin-pw");
    let req: serde_json::Value = serde_json::from_str(&f.file("request.json")).unwrap();
    assert_eq!(
        req,
        serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest", "image": "eu.registry.io/team/app"})
    );
    assert_eq!(f.file("args").trim(), "get-credentials --verbose");
    assert_eq!(f.file("env").trim(), "from-config");
    // Not in matchImages: the plugin does not run.
    assert!(p.lookup("docker.io/library/busybox").await.is_empty());
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn bad_responses_give_no_credentials_and_never_show_the_body() {
    let f = Fixture::new("0s", &["*.registry.io"]);
    let p = f.providers();
    let provider = &p.providers[0];
    let image = "eu.registry.io/app";

    let mut wrong_version = response("Image", None);
    wrong_version["apiVersion"] = serde_json::json!("credentialprovider.kubelet.k8s.io/v1beta1");
    f.respond(wrong_version);
    let err = provider.exec(image).await.err().unwrap().to_string();
    assert_eq!(
        err,
        "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1"
    );
    assert!(p.lookup(image).await.is_empty());

    let mut unknown_field = response("Image", None);
    unknown_field["surprise"] = serde_json::json!(1);
    f.respond(unknown_field);
    let err = provider.exec(image).await.err().unwrap().to_string();
    assert_eq!(
        err,
        "error decoding credential provider plugin response from stdout"
    );

    let mut wrong_kind = response("Image", None);
    wrong_kind["kind"] = serde_json::json!("CredentialProviderRequest");
    f.respond(wrong_kind);
    assert!(matches!(provider.exec(image).await, Err(ExecError::Decode)));

    f.respond(response("Pod", None));
    let err = provider.exec(image).await.err().unwrap().to_string();
    assert_eq!(
        err,
        "credential provider plugin did not return a valid cacheKeyType: \"Pod\""
    );

    std::fs::write(f.dir.path().join("response.json"), "plugin-pw not json").unwrap();
    let err = provider.exec(image).await.err().unwrap().to_string();
    assert!(err.starts_with("error reading GVK from response"), "{err}");
    assert!(!err.contains("plugin-pw"));

    f.respond(response("Image", None));
    std::fs::write(f.dir.path().join("fail"), "").unwrap();
    let err = provider.exec(image).await.err().unwrap().to_string();
    assert_eq!(
        err,
        "error execing credential provider plugin fake for image eu.registry.io/app: exit status 3: plugin says no"
    );
    assert!(p.lookup(image).await.is_empty());
}

#[tokio::test]
async fn a_hung_plugin_is_killed_at_the_timeout() {
    let f = Fixture::new("0s", &["*.registry.io"]);
    f.respond(response("Image", None));
    std::fs::write(f.dir.path().join("sleep"), "").unwrap();
    let p = f.providers().with_exec_timeout(Duration::from_millis(300));
    let start = std::time::Instant::now();
    let err = p.providers[0]
        .exec("eu.registry.io/app")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        err,
        "error execing credential provider plugin fake for image eu.registry.io/app: context deadline exceeded: "
    );
    assert!(p.lookup("eu.registry.io/app").await.is_empty());
}

/// Runs a lookup with the clock running (a paused clock would fire the exec timeout while
/// the plugin runs), then freezes it again.
async fn lookup_now(p: &CredentialProviders, image: &str) -> Vec<AuthConfig> {
    tokio::time::resume();
    let got = p.lookup(image).await;
    tokio::time::pause();
    got
}

#[tokio::test]
async fn cache_durations_from_the_response_then_the_default() {
    tokio::time::pause();
    // Response duration wins over the default.
    let f = Fixture::new("1h", &["*.registry.io"]);
    f.respond(response("Image", Some("10s")));
    let p = f.providers();
    let image = "eu.registry.io/app";
    assert_eq!(users(&lookup_now(&p, image).await), ["plugin-user"]);
    assert_eq!(users(&lookup_now(&p, image).await), ["plugin-user"]);
    assert_eq!(f.runs(), 1);
    tokio::time::advance(Duration::from_secs(9)).await;
    lookup_now(&p, image).await;
    assert_eq!(f.runs(), 1, "still cached after 9s");
    tokio::time::advance(Duration::from_secs(2)).await;
    lookup_now(&p, image).await;
    assert_eq!(f.runs(), 2, "expired after 10s");

    // No duration in the response: the provider default.
    f.respond(response("Image", None));
    let p = f.providers();
    lookup_now(&p, image).await;
    tokio::time::advance(Duration::from_secs(3599)).await;
    lookup_now(&p, image).await;
    assert_eq!(f.runs(), 3);
    tokio::time::advance(Duration::from_secs(2)).await;
    lookup_now(&p, image).await;
    assert_eq!(f.runs(), 4);

    // An explicit 0 never caches.
    f.respond(response("Image", Some("0s")));
    let p = f.providers();
    lookup_now(&p, image).await;
    lookup_now(&p, image).await;
    assert_eq!(f.runs(), 6);

    // Default 0 and no response duration: not cached either.
    let f = Fixture::new("0s", &["*.registry.io"]);
    f.respond(response("Image", None));
    let p = f.providers();
    lookup_now(&p, image).await;
    lookup_now(&p, image).await;
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn cache_key_types() {
    tokio::time::pause();
    let f = Fixture::new("1h", &["*.registry.io", "*.other.io"]);
    // Image: another image of the same registry runs the plugin again.
    f.respond(response("Image", None));
    let p = f.providers();
    lookup_now(&p, "eu.registry.io/a").await;
    lookup_now(&p, "eu.registry.io/b").await;
    lookup_now(&p, "eu.registry.io/a").await;
    assert_eq!(f.runs(), 2);

    // Registry: shared by the registry's images, not by another registry.
    f.respond(response("Registry", None));
    let p = f.providers();
    lookup_now(&p, "eu.registry.io/a").await;
    assert_eq!(
        users(&lookup_now(&p, "eu.registry.io/b").await),
        ["plugin-user"]
    );
    assert_eq!(f.runs(), 3);
    lookup_now(&p, "us.registry.io/a").await;
    assert_eq!(f.runs(), 4);

    // Global: one answer for every matching image.
    f.respond(response("Global", None));
    let p = f.providers();
    lookup_now(&p, "eu.registry.io/a").await;
    lookup_now(&p, "us.registry.io/b").await;
    lookup_now(&p, "x.other.io/c").await;
    assert_eq!(f.runs(), 5);
}

fn write_config(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn config_files_and_validation() {
    let dir = tempfile::tempdir().unwrap();
    let ok = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: a\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"*.io\"]\n  defaultCacheDuration: 5m\n";
    let path = write_config(dir.path(), "a.yaml", ok);
    let providers = read_config(&path).unwrap();
    validate(&providers).unwrap();
    assert_eq!(
        providers[0].default_cache_duration.unwrap().as_std(),
        Duration::from_secs(300)
    );

    // A directory: its yaml/json files merged in name order; a duplicate name is refused.
    let conf_dir = dir.path().join("conf.d");
    std::fs::create_dir(&conf_dir).unwrap();
    write_config(&conf_dir, "20-b.json", &serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
        "providers": [{"name": "b", "apiVersion": V1, "matchImages": ["b.io"], "defaultCacheDuration": "1m"}]
    }).to_string());
    write_config(&conf_dir, "10-a.yaml", ok);
    write_config(&conf_dir, "notes.txt", "ignored");
    let names: Vec<String> = read_config(&conf_dir)
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["a", "b"]);
    write_config(&conf_dir, "30-a-again.yml", ok);
    assert_eq!(
        read_config(&conf_dir).unwrap_err().to_string(),
        "duplicate provider name \"a\" found in configuration file(s)"
    );

    let refused = [
        (
            ok.replace("kind: CredentialProviderConfig", "kind: Other"),
            "wrong Kind",
        ),
        (
            ok.replace(
                "  defaultCacheDuration: 5m\n",
                "  defaultCacheDuration: 5m\n  cacheTime: 1\n",
            ),
            "unknown field `cacheTime`",
        ),
    ];
    for (body, want) in refused {
        let p = write_config(dir.path(), "bad.yaml", &body);
        let err = read_config(&p).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
    let invalid = [
        (ok.replace("name: a", "name: a/b"), "provider name cannot contain '/'"),
        (ok.replace("name: a", "name: \"..\""), "provider name cannot be \"..\""),
        (ok.replace("apiVersion: credentialprovider.kubelet.k8s.io/v1", "apiVersion: credentialprovider.kubelet.k8s.io/v2"), "providers.apiVersion: Unsupported value"),
        (ok.replace("  matchImages: [\"*.io\"]\n", ""), "at least 1 item in matchImages is required"),
        (ok.replace("[\"*.io\"]", "[\"bad host.io\"]"), "match image is invalid"),
        (ok.replace("  defaultCacheDuration: 5m\n", ""), "providers.defaultCacheDuration: Required value"),
        (ok.replace("5m", "-5m"), "must be greater than or equal to 0"),
        (ok.replace("  defaultCacheDuration: 5m\n", "  defaultCacheDuration: 5m\n  tokenAttributes:\n    serviceAccountTokenAudience: x\n"), "providers.tokenAttributes: Forbidden"),
        ("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n".to_owned(), "at least 1 item in plugins is required"),
    ];
    for (body, want) in invalid {
        let p = write_config(dir.path(), "bad.yaml", &body);
        let err = validate(&read_config(&p).unwrap()).unwrap_err().to_string();
        assert!(
            err.starts_with("failed to validate credential provider config: ["),
            "{err}"
        );
        assert!(err.contains(want), "{err} should contain {want}");
    }

    // Start-up checks: the bin dir and each plugin binary must exist.
    let bin = dir.path().join("bin");
    assert_eq!(
        CredentialProviders::load(&path, &bin)
            .unwrap_err()
            .to_string(),
        format!("plugin binary directory {} did not exist", bin.display())
    );
    std::fs::create_dir(&bin).unwrap();
    assert_eq!(
        CredentialProviders::load(&path, &bin)
            .unwrap_err()
            .to_string(),
        format!(
            "plugin binary executable {} did not exist",
            bin.join("a").display()
        )
    );
}

impl Fixture {
    /// Replaces the plugin with `script` (a `sh` body; `$D` is the fixture dir).
    fn script(&self, script: &str) {
        let path = self.dir.path().join("bin/fake");
        let d = self.dir.path().display();
        std::fs::write(&path, format!("#!/bin/sh\nD={d}\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_of_one_image_share_one_plugin_run() {
    // Not cached (0s): only the shared flight can keep the count at one.
    let f = Fixture::new("0s", &["*.registry.io"]);
    f.respond(response("Image", None));
    f.script("cat > /dev/null\necho run >> $D/count\nsleep 1\ncat $D/response.json");
    let p = Arc::new(f.providers());
    let lookups: Vec<_> = (0..8)
        .map(|_| {
            let p = Arc::clone(&p);
            tokio::spawn(async move { p.lookup("eu.registry.io/app").await })
        })
        .collect();
    for l in futures::future::join_all(lookups).await {
        assert_eq!(users(&l.unwrap()), ["plugin-user"]);
    }
    assert_eq!(f.runs(), 1);
    assert!(p.providers[0].inflight.lock().unwrap().is_empty());
    // Another image is another flight; a later lookup runs the plugin again.
    p.lookup("us.registry.io/app").await;
    p.lookup("eu.registry.io/app").await;
    assert_eq!(f.runs(), 3);
}

#[tokio::test]
async fn an_endless_stdout_is_cut_off_and_the_plugin_killed() {
    let f = Fixture::new("0s", &["*.registry.io"]);
    f.script("echo $$ > $D/pid\nexec yes");
    // The timeout stays upstream's minute: the size limit alone must end the run.
    let p = f.providers();
    let start = std::time::Instant::now();
    let err = p.providers[0]
        .exec("eu.registry.io/app")
        .await
        .err()
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(
            err,
            ExecError::TooMuchOutput {
                limit: MAX_STDOUT,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "error execing credential provider plugin fake for image eu.registry.io/app: stdout exceeded {MAX_STDOUT} bytes, plugin killed"
        )
    );
    // Killed and reaped: no process, not even a zombie.
    let pid = f.file("pid").trim().to_owned();
    assert!(!pid.is_empty());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "plugin {pid} still there"
    );
    assert!(p.lookup("eu.registry.io/app").await.is_empty());

    // Exactly at the limit is still read (and refused only as a bad response).
    f.script(&format!("head -c {MAX_STDOUT} /dev/zero | tr '\\0' ' '"));
    let err = p.providers[0]
        .exec("eu.registry.io/app")
        .await
        .err()
        .unwrap();
    assert!(!matches!(err, ExecError::TooMuchOutput { .. }), "{err}");
}

#[tokio::test]
async fn a_flood_on_stderr_is_drained_and_only_its_head_kept() {
    let f = Fixture::new("0s", &["*.registry.io"]);
    f.respond(response("Image", None));
    // Far more than a pipe holds: the plugin would block forever if stderr were not drained.
    f.script("cat > /dev/null\nhead -c 4000000 /dev/zero | tr '\\0' e >&2\ncat $D/response.json");
    let p = f.providers().with_exec_timeout(Duration::from_secs(20));
    assert_eq!(
        users(&p.lookup("eu.registry.io/app").await),
        ["plugin-user"]
    );
    // A failing plugin's message carries at most MAX_STDERR bytes of it.
    f.script("cat > /dev/null\nhead -c 4000000 /dev/zero | tr '\\0' e >&2\nexit 2");
    let err = p.providers[0]
        .exec("eu.registry.io/app")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("exit status 2"), "{}", &err[..200]);
    assert!(err.len() < MAX_STDERR + 200, "{}", err.len());
}
