use std::sync::Mutex as StdMutex;

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, HostPathVolumeSource, PodSpec, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

/// Records mounts; a bind records its source as `Some(-1)` in `mounted` and in `binds`.
#[derive(Default)]
pub(super) struct FakeMounter {
    pub(super) mounted: StdMutex<HashMap<PathBuf, Option<i64>>>,
    /// `(source, target, what the source resolved to when the bind was asked for)`.
    pub(super) binds: StdMutex<Vec<(PathBuf, PathBuf, PathBuf)>>,
    /// Runs inside `bind_mount` before anything is recorded: the window between resolving a
    /// subPath and mounting it.
    #[allow(clippy::type_complexity)]
    pub(super) before_bind: StdMutex<Option<Box<dyn Fn() + Send>>>,
}

#[async_trait]
impl Mounter for FakeMounter {
    async fn mount_tmpfs(&self, dir: &Path, size: Option<i64>) -> Result<(), String> {
        self.mounted.lock().unwrap().insert(dir.to_path_buf(), size);
        Ok(())
    }
    async fn unmount(&self, dir: &Path) -> Result<(), String> {
        self.mounted.lock().unwrap().remove(dir);
        Ok(())
    }
    fn is_mount_point(&self, dir: &Path) -> bool {
        self.mounted.lock().unwrap().contains_key(dir)
    }
    async fn bind_mount(&self, source: &Path, target: &Path) -> Result<(), String> {
        if let Some(hook) = self.before_bind.lock().unwrap().as_ref() {
            hook();
        }
        let resolved = std::fs::read_link(source).map_err(|e| format!("{source:?}: {e}"))?;
        self.binds
            .lock()
            .unwrap()
            .push((source.to_path_buf(), target.to_path_buf(), resolved));
        self.mounted
            .lock()
            .unwrap()
            .insert(target.to_path_buf(), Some(-1));
        Ok(())
    }
}

pub(super) fn volume(name: &str) -> Volume {
    Volume {
        name: name.into(),
        ..Default::default()
    }
}

pub(super) fn pod(volumes: Vec<Volume>, mounts: Vec<VolumeMount>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes: Some(volumes),
            containers: vec![Container {
                name: "c".into(),
                volume_mounts: Some(mounts),
                termination_message_path: Some("/dev/termination-log".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn manager(root: &Path) -> (VolumeManager, Arc<FakeMounter>) {
    let mounter = Arc::new(FakeMounter::default());
    let m = VolumeManager::new(
        VolumeConfig {
            root_dir: root.to_path_buf(),
            node_memory_bytes: 1 << 30,
            node_hosts_file: PathBuf::from("/etc/hosts"),
        },
        mounter.clone(),
    );
    (m, mounter)
}

#[tokio::test]
async fn empty_dirs_host_paths_and_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let host = dir.path().join("host-data");
    let mut disk = volume("work");
    disk.empty_dir = Some(EmptyDirVolumeSource::default());
    let mut mem = volume("cache");
    mem.empty_dir = Some(EmptyDirVolumeSource {
        medium: Some("Memory".into()),
        size_limit: Some(Quantity("64Mi".into())),
    });
    let mut hp = volume("host");
    hp.host_path = Some(HostPathVolumeSource {
        path: host.to_string_lossy().into_owned(),
        type_: Some("DirectoryOrCreate".into()),
    });
    let p = pod(
        vec![disk, mem, hp],
        vec![
            VolumeMount {
                name: "work".into(),
                mount_path: "/work".into(),
                sub_path: Some("sub/dir".into()),
                ..Default::default()
            },
            VolumeMount {
                name: "host".into(),
                mount_path: "/host".into(),
                read_only: Some(true),
                mount_propagation: Some("HostToContainer".into()),
                ..Default::default()
            },
        ],
    );
    let vols = m.mount_pod_volumes(&p).await.unwrap();
    let work = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    assert_eq!(vols["work"].host_path, work);
    assert!(work.is_dir());
    let cache = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/cache");
    assert_eq!(
        mounter.mounted.lock().unwrap().get(&cache),
        Some(&Some(64 << 20))
    );
    assert!(host.is_dir());
    // Idempotent.
    m.mount_pod_volumes(&p).await.unwrap();

    let ips = vec!["10.88.0.9".to_owned()];
    let hosts = HostsInfo {
        pod_ips: &ips,
        hostname: "p",
        domain: "",
    };
    let c = &p.spec.as_ref().unwrap().containers[0];
    let mounts = m.container_mounts(&p, c, &vols, &hosts, &[]).await.unwrap();
    assert_eq!(mounts[0].container_path, "/work");
    let target = dir.path().join("pods/uid-1/volume-subpaths/work/c/0");
    assert_eq!(mounts[0].host_path, target.to_string_lossy());
    assert!(work.join("sub/dir").is_dir());
    assert!(target.is_dir());
    assert_eq!(
        mounter.binds.lock().unwrap()[0].2,
        work.join("sub/dir"),
        "the bind source is the opened subPath"
    );
    assert!(mounts[1].readonly);
    assert_eq!(
        mounts[1].propagation,
        MountPropagation::PropagationHostToContainer as i32
    );
    assert_eq!(mounts[2].container_path, "/etc/hosts");
    let hosts_file = std::fs::read_to_string(&mounts[2].host_path).unwrap();
    assert!(hosts_file.contains("10.88.0.9\tp\n"), "{hosts_file}");
    assert_eq!(mounts[3].container_path, "/dev/termination-log");
    assert!(Path::new(&mounts[3].host_path).is_file());

    m.unmount_pod_volumes("uid-1").await.unwrap();
    assert!(mounter.mounted.lock().unwrap().is_empty());
    assert!(!work.exists());
    assert!(!dir.path().join("pods/uid-1/volume-subpaths").exists());
    assert!(host.is_dir(), "hostPath contents are never removed");
    assert!(m.mounted_pods().is_empty());
}

#[tokio::test]
async fn bad_volumes_fail_with_upstream_wording() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path());
    let mut hp = volume("h");
    hp.host_path = Some(HostPathVolumeSource {
        path: "/definitely/missing".into(),
        type_: Some("Directory".into()),
    });
    let err = m
        .mount_pod_volumes(&pod(vec![hp], vec![]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: /definitely/missing is not a directory"
    );
    let mut pvc = volume("claim");
    pvc.persistent_volume_claim = Some(Default::default());
    let err = m
        .mount_pod_volumes(&pod(vec![pvc], vec![]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not supported"), "{err}");
    // gitRepo is refused with its own message and nothing is cloned (CVE-2024-10220).
    let mut git = volume("repo");
    git.git_repo = Some(k8s_openapi::api::core::v1::GitRepoVolumeSource {
        repository: "https://example.invalid/r.git".into(),
        ..Default::default()
    });
    let err = m
        .mount_pod_volumes(&pod(vec![git], vec![]))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("volume \"repo\": git-repo volume plugin has been disabled"),
        "{err}"
    );

    let p = pod(
        vec![],
        vec![VolumeMount {
            name: "nope".into(),
            mount_path: "/x".into(),
            ..Default::default()
        }],
    );
    let c = &p.spec.as_ref().unwrap().containers[0];
    let hosts = HostsInfo {
        pod_ips: &[],
        hostname: "p",
        domain: "",
    };
    let err = m
        .container_mounts(&p, c, &BTreeMap::new(), &hosts, &[])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot find volume \"nope\" to mount into container \"c\""
    );
}

#[tokio::test]
async fn orphaned_pod_dirs_are_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let mut mem = volume("cache");
    mem.empty_dir = Some(EmptyDirVolumeSource {
        medium: Some("Memory".into()),
        size_limit: None,
    });
    m.mount_pod_volumes(&pod(vec![mem], vec![])).await.unwrap();
    std::fs::create_dir_all(dir.path().join("pods/keep-me")).unwrap();
    m.cleanup_orphaned_pod_dirs(&HashSet::from(["keep-me".to_owned()]))
        .await;
    assert!(!dir.path().join("pods/uid-1").exists());
    assert!(dir.path().join("pods/keep-me").exists());
    assert!(
        mounter.mounted.lock().unwrap().is_empty(),
        "tmpfs unmounted before removal"
    );
}

/// Needs root (mount). A mount the manager does not know about (left by someone else) under an
/// orphaned pod directory: the directory is not deleted through it; once unmounted it goes.
#[tokio::test]
#[cfg_attr(not(rkubelet_tests_as_root), ignore = "needs root (mount)")]
async fn orphaned_pod_dirs_with_a_mount_inside_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path());
    let pod_dir = dir.path().join("pods/orphan");
    let mp = pod_dir.join("plugins/foreign");
    std::fs::create_dir_all(&mp).unwrap();
    std::fs::write(pod_dir.join("etc-hosts"), "x").unwrap();
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&mp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(mp.join("canary"), "alive").unwrap();

    m.cleanup_orphaned_pod_dirs(&HashSet::new()).await;
    let canary = std::fs::read_to_string(mp.join("canary"));
    let umount = std::process::Command::new("umount")
        .arg(&mp)
        .output()
        .unwrap();
    assert!(umount.status.success(), "{umount:?}");
    assert_eq!(
        canary.unwrap(),
        "alive",
        "nothing deleted through the mount"
    );
    assert!(mp.is_dir());
    assert!(!pod_dir.join("etc-hosts").exists(), "the rest was removed");
    m.cleanup_orphaned_pod_dirs(&HashSet::new()).await;
    assert!(!pod_dir.exists());
}

#[test]
fn mountinfo_paths_are_unescaped() {
    assert_eq!(unescape_mountinfo("/a\\040b\\011c"), b"/a b\tc");
    assert_eq!(unescape_mountinfo("/x\\134y"), b"/x\\y");
    assert_eq!(unescape_mountinfo("/plain\\9"), b"/plain\\9");
    assert!(SystemMounter.is_mount_point(Path::new("/proc")));
    assert!(!SystemMounter.is_mount_point(Path::new("/proc/self")));
}
