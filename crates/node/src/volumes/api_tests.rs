//! Tests of the API-backed volume plugins (configMap, secret, projected) through the manager,
//! with [`FakeObjects`] and the fake mounter of `tests.rs`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection,
    DownwardAPIVolumeFile, KeyToPath, ObjectFieldSelector, PodSecurityContext,
    ProjectedVolumeSource, Secret, SecretProjection, SecretVolumeSource,
    ServiceAccountTokenProjection, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::tests::{FakeMounter, manager, pod, volume};
use super::*;
use crate::objects::{FakeObjects, TokenRequest};

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        ..Default::default()
    }
}

fn config_map(name: &str, data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        binary_data: (!binary.is_empty()).then(|| {
            binary
                .iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect()
        }),
        ..Default::default()
    }
}

fn secret(name: &str, data: &[(&str, &[u8])]) -> Secret {
    Secret {
        metadata: meta(name),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
    KeyToPath {
        key: key.into(),
        path: path.into(),
        mode,
    }
}

fn cm_volume(name: &str, source: ConfigMapVolumeSource) -> Volume {
    let mut v = volume(name);
    v.config_map = Some(source);
    v
}

fn secret_volume(name: &str, source: SecretVolumeSource) -> Volume {
    let mut v = volume(name);
    v.secret = Some(source);
    v
}

fn projected_volume(
    name: &str,
    default_mode: Option<i32>,
    sources: Vec<VolumeProjection>,
) -> Volume {
    let mut v = volume(name);
    v.projected = Some(ProjectedVolumeSource {
        default_mode,
        sources: Some(sources),
    });
    v
}

fn setup(root: &Path) -> (VolumeManager, Arc<FakeMounter>, FakeObjects) {
    let (m, mounter) = manager(root);
    let objects = FakeObjects::default();
    (m.with_objects(Arc::new(objects.clone())), mounter, objects)
}

fn vol_dir(root: &Path, plugin: &str, name: &str) -> PathBuf {
    root.join("pods/uid-1/volumes").join(plugin).join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// User-visible names of a payload volume (without the `..` bookkeeping entries).
fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".."))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn config_map_keys_items_modes_and_binary_data() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter, objects) = setup(dir.path());
    objects.set_config_map(config_map(
        "app",
        &[("a", "A"), ("b", "B")],
        &[("bin", &[0, 159, 255])],
    ));
    let all = cm_volume(
        "all",
        ConfigMapVolumeSource {
            name: "app".into(),
            default_mode: Some(0o600),
            ..Default::default()
        },
    );
    let some = cm_volume(
        "some",
        ConfigMapVolumeSource {
            name: "app".into(),
            items: Some(vec![
                item("bin", "sub/bin.dat", Some(0o400)),
                item("a", "x", None),
            ]),
            ..Default::default()
        },
    );
    let vols = m
        .mount_pod_volumes(&pod(vec![all, some], vec![]))
        .await
        .unwrap();
    let all_dir = vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "all");
    assert_eq!(vols["all"].host_path, all_dir);
    assert_eq!(vols["all"].kind, VolumeKind::ConfigMap);
    assert_eq!(names(&all_dir), ["a", "b", "bin"]);
    assert_eq!(read(&all_dir.join("a")), "A");
    assert_eq!(std::fs::read(all_dir.join("bin")).unwrap(), [0, 159, 255]);
    assert_eq!(mode(&all_dir.join("b")), 0o600);
    assert_eq!(mode(&all_dir) & 0o777, 0o777);

    let some_dir = vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "some");
    assert_eq!(names(&some_dir), ["sub", "x"]);
    assert_eq!(read(&some_dir.join("x")), "A");
    assert_eq!(mode(&some_dir.join("x")), 0o644, "default defaultMode");
    assert_eq!(
        std::fs::read(some_dir.join("sub/bin.dat")).unwrap(),
        [0, 159, 255]
    );
    assert_eq!(mode(&some_dir.join("sub/bin.dat")), 0o400);
    assert!(
        mounter.mounted.lock().unwrap().is_empty(),
        "configMap volumes live on disk"
    );
}

#[tokio::test]
async fn optional_sources_and_missing_objects_use_upstream_wording() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, objects) = setup(dir.path());
    objects.set_config_map(config_map("app", &[("a", "A")], &[]));
    objects.set_secret(secret("creds", &[("user", b"u")]));

    // Optional and missing: an empty volume; optional with a missing key: the key is skipped.
    let empty = cm_volume(
        "empty",
        ConfigMapVolumeSource {
            name: "missing".into(),
            optional: Some(true),
            ..Default::default()
        },
    );
    let partial = cm_volume(
        "partial",
        ConfigMapVolumeSource {
            name: "app".into(),
            optional: Some(true),
            items: Some(vec![item("a", "a", None), item("nope", "nope", None)]),
            ..Default::default()
        },
    );
    let sec = secret_volume(
        "sec",
        SecretVolumeSource {
            secret_name: Some("gone".into()),
            optional: Some(true),
            ..Default::default()
        },
    );
    m.mount_pod_volumes(&pod(vec![empty, partial, sec], vec![]))
        .await
        .unwrap();
    let empty_dir = vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "empty");
    assert!(empty_dir.join("..data").exists());
    assert!(names(&empty_dir).is_empty());
    assert_eq!(
        names(&vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "partial")),
        ["a"]
    );
    assert!(names(&vol_dir(dir.path(), SECRET_PLUGIN, "sec")).is_empty());

    let cases = [
        (
            cm_volume(
                "cfg",
                ConfigMapVolumeSource {
                    name: "missing".into(),
                    ..Default::default()
                },
            ),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"missing\" not found",
        ),
        (
            cm_volume(
                "cfg",
                ConfigMapVolumeSource {
                    name: "app".into(),
                    items: Some(vec![item("nope", "x", None)]),
                    ..Default::default()
                },
            ),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap references non-existent config key: nope",
        ),
        (
            secret_volume(
                "sec",
                SecretVolumeSource {
                    secret_name: Some("gone".into()),
                    ..Default::default()
                },
            ),
            "MountVolume.SetUp failed for volume \"sec\" : secret \"gone\" not found",
        ),
        (
            secret_volume(
                "sec",
                SecretVolumeSource {
                    secret_name: Some("creds".into()),
                    items: Some(vec![item("password", "p", None)]),
                    ..Default::default()
                },
            ),
            "MountVolume.SetUp failed for volume \"sec\" : references non-existent secret key: password",
        ),
    ];
    for (vol, want) in cases {
        let mut p = pod(vec![vol], vec![]);
        p.metadata.uid = Some("uid-err".into());
        let err = m.mount_pod_volumes(&p).await.unwrap_err();
        assert!(matches!(err, VolumeError::SetUp { .. }));
        assert_eq!(err.to_string(), want);
    }

    // Standalone mode: no API server to ask.
    let (standalone, _) = manager(dir.path());
    let vol = cm_volume(
        "cfg",
        ConfigMapVolumeSource {
            name: "app".into(),
            optional: Some(true),
            ..Default::default()
        },
    );
    let err = standalone
        .mount_pod_volumes(&pod(vec![vol], vec![]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"cfg\" : couldn't get configmap default/app, no kubeClient defined"
    );
}

#[tokio::test]
async fn secret_volumes_are_written_onto_a_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter, objects) = setup(dir.path());
    objects.set_secret(secret(
        "creds",
        &[("user", b"admin"), ("key", &[1, 2, 250])],
    ));
    let vol = secret_volume(
        "creds",
        SecretVolumeSource {
            secret_name: Some("creds".into()),
            default_mode: Some(0o440),
            items: Some(vec![
                item("key", "tls/key.bin", Some(0o400)),
                item("user", "username", None),
            ]),
            ..Default::default()
        },
    );
    let p = pod(vec![vol], vec![]);
    let vols = m.mount_pod_volumes(&p).await.unwrap();
    let d = vol_dir(dir.path(), SECRET_PLUGIN, "creds");
    assert_eq!(vols["creds"].kind, VolumeKind::Secret);
    assert_eq!(
        mounter.mounted.lock().unwrap().get(&d),
        Some(&None),
        "memory-backed, without a size"
    );
    assert_eq!(read(&d.join("username")), "admin");
    assert_eq!(mode(&d.join("username")), 0o440);
    assert_eq!(std::fs::read(d.join("tls/key.bin")).unwrap(), [1, 2, 250]);
    assert_eq!(mode(&d.join("tls/key.bin")), 0o400);
    // Re-synced in place: still the one tmpfs, same contents.
    m.mount_pod_volumes(&p).await.unwrap();
    assert_eq!(mounter.mounted.lock().unwrap().len(), 1);
    assert_eq!(read(&d.join("username")), "admin");
}

fn field(path: &str, field_path: &str) -> DownwardAPIVolumeFile {
    DownwardAPIVolumeFile {
        path: path.into(),
        field_ref: Some(ObjectFieldSelector {
            field_path: field_path.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn all_sources(token: ServiceAccountTokenProjection) -> Vec<VolumeProjection> {
    vec![
        VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: "kube-root-ca.crt".into(),
                items: Some(vec![item("ca.crt", "ca.crt", None)]),
                ..Default::default()
            }),
            ..Default::default()
        },
        VolumeProjection {
            secret: Some(SecretProjection {
                name: "tls".into(),
                items: Some(vec![item("tls.key", "tls/key", Some(0o400))]),
                ..Default::default()
            }),
            ..Default::default()
        },
        VolumeProjection {
            downward_api: Some(DownwardAPIProjection {
                items: Some(vec![field("namespace", "metadata.namespace")]),
            }),
            ..Default::default()
        },
        VolumeProjection {
            service_account_token: Some(token),
            ..Default::default()
        },
    ]
}

#[tokio::test]
async fn projected_volumes_merge_all_four_sources() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter, objects) = setup(dir.path());
    objects.set_config_map(config_map("kube-root-ca.crt", &[("ca.crt", "CA")], &[]));
    objects.set_secret(secret("tls", &[("tls.key", b"KEY")]));
    let vol = projected_volume(
        "kube-api-access",
        Some(0o440),
        all_sources(ServiceAccountTokenProjection {
            audience: Some("vault".into()),
            expiration_seconds: Some(7200),
            path: "token".into(),
        }),
    );
    let mut p = pod(vec![vol], vec![]);
    p.spec.as_mut().unwrap().service_account_name = Some("builder".into());
    let vols = m.mount_pod_volumes(&p).await.unwrap();
    let d = vol_dir(dir.path(), PROJECTED_PLUGIN, "kube-api-access");
    assert_eq!(vols["kube-api-access"].kind, VolumeKind::Projected);
    assert!(mounter.mounted.lock().unwrap().contains_key(&d), "tmpfs");
    assert_eq!(names(&d), ["ca.crt", "namespace", "tls", "token"]);
    assert_eq!(read(&d.join("ca.crt")), "CA");
    assert_eq!(read(&d.join("tls/key")), "KEY");
    assert_eq!(read(&d.join("namespace")), "default");
    assert_eq!(read(&d.join("token")), "fake-token-builder-p-1");
    for (file, want) in [
        ("ca.crt", 0o440),
        ("namespace", 0o440),
        ("token", 0o440),
        ("tls/key", 0o400),
    ] {
        assert_eq!(mode(&d.join(file)), want, "{file}");
    }
    assert_eq!(
        objects.token_requests(),
        [TokenRequest {
            namespace: "default".into(),
            service_account: "builder".into(),
            audience: "vault".into(),
            expiration_seconds: 7200,
            pod_name: "p".into(),
            pod_uid: "uid-1".into(),
        }]
    );
}

#[tokio::test]
async fn token_defaults_and_fs_group_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, objects) = setup(dir.path());
    let vol = projected_volume(
        "token",
        None,
        vec![VolumeProjection {
            service_account_token: Some(ServiceAccountTokenProjection {
                path: "token".into(),
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    let mut p = pod(vec![vol], vec![]);
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        fs_group: Some(4321),
        ..Default::default()
    });
    m.mount_pod_volumes(&p).await.unwrap();
    let req = &objects.token_requests()[0];
    assert_eq!(req.service_account, "default");
    assert_eq!(req.audience, "");
    assert_eq!(req.expiration_seconds, 3600);
    // 0600 for tokens under an fsGroup, then group read from the ownership pass.
    let token = vol_dir(dir.path(), PROJECTED_PLUGIN, "token").join("token");
    assert_eq!(mode(&token), 0o640);
    assert_eq!(std::fs::metadata(&token).unwrap().gid(), 4321);
}

#[tokio::test]
async fn config_map_updates_swap_the_data_dir_on_the_next_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, objects) = setup(dir.path());
    objects.set_config_map(config_map("app", &[("conf", "v1"), ("extra", "e")], &[]));
    let p = pod(
        vec![cm_volume(
            "cfg",
            ConfigMapVolumeSource {
                name: "app".into(),
                ..Default::default()
            },
        )],
        vec![],
    );
    m.mount_pod_volumes(&p).await.unwrap();
    let d = vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "cfg");
    let first = std::fs::read_link(d.join("..data")).unwrap();
    assert_eq!(read(&d.join("conf")), "v1");
    // Unchanged object: nothing rewritten.
    m.mount_pod_volumes(&p).await.unwrap();
    assert_eq!(std::fs::read_link(d.join("..data")).unwrap(), first);

    objects.set_config_map(config_map("app", &[("conf", "v2")], &[]));
    m.mount_pod_volumes(&p).await.unwrap();
    let second = std::fs::read_link(d.join("..data")).unwrap();
    assert_ne!(second, first, "..data swapped to a new payload directory");
    assert!(!d.join(&first).exists(), "old payload removed");
    assert_eq!(
        std::fs::read_link(d.join("conf")).unwrap(),
        Path::new("..data/conf"),
        "user-visible names resolve through ..data"
    );
    assert_eq!(read(&d.join("conf")), "v2");
    assert_eq!(names(&d), ["conf"], "removed keys disappear");

    // A deleted non-optional ConfigMap fails the sync but leaves the last contents in place.
    objects.remove_config_map("default", "app");
    assert!(m.mount_pod_volumes(&p).await.is_err());
    assert_eq!(read(&d.join("conf")), "v2");
    assert!(m.mounted_pods().contains("uid-1"));
}

#[tokio::test]
async fn conflicting_projected_paths_fail_as_upstream_validation() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter, objects) = setup(dir.path());
    objects.set_config_map(config_map("a", &[("k", "1")], &[]));
    objects.set_secret(secret("s", &[("k", b"2")]));
    let vol = projected_volume(
        "all",
        None,
        vec![
            VolumeProjection {
                config_map: Some(ConfigMapProjection {
                    name: "a".into(),
                    items: Some(vec![item("k", "conf", None)]),
                    ..Default::default()
                }),
                ..Default::default()
            },
            VolumeProjection {
                secret: Some(SecretProjection {
                    name: "s".into(),
                    items: Some(vec![item("k", "conf", None)]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ],
    );
    let mut ed = volume("scratch");
    ed.empty_dir = Some(Default::default());
    let err = m
        .mount_pod_volumes(&pod(vec![ed, vol], vec![]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"all\" : spec.volumes[1].projected: Invalid value: \"s\": conflicting duplicate paths"
    );
    assert!(mounter.mounted.lock().unwrap().is_empty());
    // The other volume of the pod was still set up.
    assert!(vol_dir(dir.path(), EMPTY_DIR_PLUGIN, "scratch").is_dir());
}

#[tokio::test]
async fn projected_failures_are_aggregated() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, _) = setup(dir.path());
    let vol = projected_volume(
        "all",
        None,
        vec![
            VolumeProjection {
                config_map: Some(ConfigMapProjection {
                    name: "a".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            VolumeProjection {
                secret: Some(SecretProjection {
                    name: "b".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            VolumeProjection {
                secret: Some(SecretProjection {
                    name: "opt".into(),
                    optional: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ],
    );
    let err = m
        .mount_pod_volumes(&pod(vec![vol], vec![]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"all\" : [configmap \"a\" not found, secret \"b\" not found]"
    );
    assert!(m.mounted_pods().is_empty());
}

#[tokio::test]
async fn teardown_and_orphan_cleanup_remove_every_plugin_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter, objects) = setup(dir.path());
    objects.set_config_map(config_map("kube-root-ca.crt", &[("ca.crt", "CA")], &[]));
    objects.set_config_map(config_map("app", &[("a", "A")], &[]));
    objects.set_secret(secret("tls", &[("tls.key", b"KEY")]));
    let vols = vec![
        cm_volume(
            "cfg",
            ConfigMapVolumeSource {
                name: "app".into(),
                ..Default::default()
            },
        ),
        secret_volume(
            "sec",
            SecretVolumeSource {
                secret_name: Some("tls".into()),
                ..Default::default()
            },
        ),
        projected_volume(
            "proj",
            None,
            all_sources(ServiceAccountTokenProjection {
                path: "token".into(),
                ..Default::default()
            }),
        ),
    ];
    let p = pod(vols.clone(), vec![]);
    m.mount_pod_volumes(&p).await.unwrap();
    assert_eq!(mounter.mounted.lock().unwrap().len(), 2);
    m.unmount_pod_volumes("uid-1").await.unwrap();
    assert!(mounter.mounted.lock().unwrap().is_empty());
    for (plugin, name) in [
        (CONFIG_MAP_PLUGIN, "cfg"),
        (SECRET_PLUGIN, "sec"),
        (PROJECTED_PLUGIN, "proj"),
    ] {
        assert!(!vol_dir(dir.path(), plugin, name).exists(), "{plugin}");
    }
    assert!(m.mounted_pods().is_empty());

    // After a restart (fresh manager, same host state) orphan clean-up unmounts and removes.
    m.mount_pod_volumes(&p).await.unwrap();
    let (fresh, _) = manager(dir.path());
    let fresh = VolumeManager {
        mounter: mounter.clone(),
        ..fresh
    };
    fresh.cleanup_orphaned_pod_dirs(&HashSet::new()).await;
    assert!(mounter.mounted.lock().unwrap().is_empty());
    assert!(!dir.path().join("pods/uid-1").exists());
}

/// One volume of each payload kind (and an emptyDir for contrast), each mounted by the
/// container with `readOnly` unset, false or true.
fn payload_kinds_pod(objects: &FakeObjects) -> Pod {
    objects.set_config_map(config_map("kube-root-ca.crt", &[("ca.crt", "CA")], &[]));
    objects.set_config_map(config_map("app", &[("a", "A")], &[]));
    objects.set_secret(secret("tls", &[("tls.key", b"KEY")]));
    let mut down = volume("down");
    down.downward_api = Some(k8s_openapi::api::core::v1::DownwardAPIVolumeSource {
        items: Some(vec![field("labels", "metadata.labels")]),
        ..Default::default()
    });
    let mut scratch = volume("scratch");
    scratch.empty_dir = Some(Default::default());
    let vols = vec![
        down,
        cm_volume(
            "cfg",
            ConfigMapVolumeSource {
                name: "app".into(),
                items: Some(vec![item("a", "a", Some(0o4755))]),
                ..Default::default()
            },
        ),
        secret_volume(
            "sec",
            SecretVolumeSource {
                secret_name: Some("tls".into()),
                default_mode: Some(0o6777),
                ..Default::default()
            },
        ),
        projected_volume(
            "proj",
            None,
            all_sources(ServiceAccountTokenProjection {
                path: "token".into(),
                ..Default::default()
            }),
        ),
        scratch,
    ];
    let mut mounts: Vec<_> = ["down", "cfg", "sec", "proj", "scratch"]
        .iter()
        .enumerate()
        .map(|(i, name)| k8s_openapi::api::core::v1::VolumeMount {
            name: (*name).into(),
            mount_path: format!("/{name}"),
            read_only: [None, Some(false), Some(false), None, Some(false)][i],
            ..Default::default()
        })
        .collect();
    // A subPath of a payload volume is read-only too.
    mounts.push(k8s_openapi::api::core::v1::VolumeMount {
        name: "cfg".into(),
        mount_path: "/one".into(),
        sub_path: Some("a".into()),
        read_only: Some(false),
        ..Default::default()
    });
    pod(vols, mounts)
}

#[tokio::test]
async fn payload_volumes_are_always_mounted_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, objects) = setup(dir.path());
    let p = payload_kinds_pod(&objects);
    let vols = m.mount_pod_volumes(&p).await.unwrap();
    let hosts = HostsInfo {
        pod_ips: &[],
        hostname: "p",
        domain: "",
    };
    let c = &p.spec.as_ref().unwrap().containers[0];
    let mounts = m.container_mounts(&p, c, &vols, &hosts, &[]).await.unwrap();
    let ro: Vec<(&str, bool)> = mounts
        .iter()
        .map(|m| (m.container_path.as_str(), m.readonly))
        .collect();
    assert_eq!(
        ro,
        [
            ("/down", true),
            ("/cfg", true),
            ("/sec", true),
            ("/proj", true),
            ("/scratch", false),
            ("/one", true),
            ("/dev/termination-log", false),
        ]
    );
    for kind in [
        VolumeKind::DownwardApi,
        VolumeKind::ConfigMap,
        VolumeKind::Secret,
        VolumeKind::Projected,
    ] {
        assert!(kind.always_read_only(), "{kind:?}");
    }
    for kind in [
        VolumeKind::EmptyDir,
        VolumeKind::EmptyDirMemory,
        VolumeKind::HostPath,
    ] {
        assert!(!kind.always_read_only(), "{kind:?}");
    }
    // setuid/setgid/sticky never reach the files, whatever the spec says.
    let cfg = vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "cfg");
    assert_eq!(mode(&cfg.join("a")), 0o755);
    let sec = vol_dir(dir.path(), SECRET_PLUGIN, "sec");
    assert_eq!(mode(&sec.join("tls.key")), 0o777);
}

#[tokio::test]
async fn a_tampered_payload_volume_is_rebuilt_on_the_next_sync_without_touching_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, objects) = setup(dir.path());
    let mut p = payload_kinds_pod(&objects);
    m.mount_pod_volumes(&p).await.unwrap();
    let canary = dir.path().join("host-canary");
    std::fs::create_dir(&canary).unwrap();
    std::fs::write(canary.join("keep"), "precious").unwrap();
    for (plugin, name) in [
        (DOWNWARD_API_PLUGIN, "down"),
        (CONFIG_MAP_PLUGIN, "cfg"),
        (SECRET_PLUGIN, "sec"),
        (PROJECTED_PLUGIN, "proj"),
    ] {
        // What a container with a writable mount did before CVE-2017-1002102's fix.
        let d = vol_dir(dir.path(), plugin, name);
        std::fs::remove_file(d.join("..data")).unwrap();
        std::os::unix::fs::symlink(&canary, d.join("..data")).unwrap();
    }
    // A label change makes the downwardAPI payload differ too.
    p.metadata.labels = Some([("app".to_owned(), "x".to_owned())].into());
    m.mount_pod_volumes(&p).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(canary.join("keep")).unwrap(),
        "precious"
    );
    assert_eq!(std::fs::read_dir(&canary).unwrap().count(), 1);
    let down = vol_dir(dir.path(), DOWNWARD_API_PLUGIN, "down");
    assert_eq!(read(&down.join("labels")), "app=\"x\"");
    assert_eq!(
        read(&vol_dir(dir.path(), CONFIG_MAP_PLUGIN, "cfg").join("a")),
        "A"
    );
    assert_eq!(
        read(&vol_dir(dir.path(), SECRET_PLUGIN, "sec").join("tls.key")),
        "KEY"
    );
    assert_eq!(
        read(&vol_dir(dir.path(), PROJECTED_PLUGIN, "proj").join("ca.crt")),
        "CA"
    );
    for (plugin, name) in [
        (DOWNWARD_API_PLUGIN, "down"),
        (CONFIG_MAP_PLUGIN, "cfg"),
        (SECRET_PLUGIN, "sec"),
        (PROJECTED_PLUGIN, "proj"),
    ] {
        let link = std::fs::read_link(vol_dir(dir.path(), plugin, name).join("..data")).unwrap();
        assert!(
            link.to_string_lossy().starts_with("..20"),
            "{plugin}: {link:?}"
        );
    }
}
