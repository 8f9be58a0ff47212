use std::os::unix::fs::{PermissionsExt, symlink};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, VolumeMount};

use super::*;
use crate::volumes::tests::{manager, pod, volume};
use crate::volumes::{HostsInfo, SystemMounter, VolumeError};

/// A volume root with `a/b/c/` and a file `a/f`.
fn volume_tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(vol.join("a/b/c")).unwrap();
    std::fs::write(vol.join("a/f"), "file").unwrap();
    (dir, vol)
}

fn opened(r: &Resolved) -> PathBuf {
    std::fs::read_link(r.proc_path()).unwrap()
}

#[test]
fn existing_directories_and_files_resolve_to_an_open_fd() {
    let (_d, vol) = volume_tree();
    let r = resolve(&vol, "a/b/c").unwrap();
    assert!(r.is_dir());
    assert_eq!(opened(&r), vol.join("a/b/c"));
    assert!(
        r.proc_path()
            .starts_with(format!("/proc/{}/fd/", std::process::id()))
    );
    let r = resolve(&vol, "./a//f").unwrap();
    assert!(!r.is_dir(), "a file subPath is allowed");
    assert_eq!(opened(&r), vol.join("a/f"));
    let r = resolve(&vol, ".").unwrap();
    assert_eq!(opened(&r), vol, "the volume root itself");
    assert!(matches!(
        resolve(&vol, "a/f/x").unwrap_err(),
        SubPathError::NotDir(_)
    ));
}

#[test]
fn missing_directories_are_created_with_the_volume_mode() {
    let (_d, vol) = volume_tree();
    std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let r = resolve(&vol, "a/new/deeper").unwrap();
    assert!(r.is_dir());
    assert_eq!(opened(&r), vol.join("a/new/deeper"));
    for p in ["a/new", "a/new/deeper"] {
        let mode = std::fs::metadata(vol.join(p)).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o2775, "{p}: {mode:o} (umask undone)");
    }
}

#[test]
fn absolute_and_backstepping_sub_paths_are_refused_with_upstream_wording() {
    let (_d, vol) = volume_tree();
    assert_eq!(
        resolve(&vol, "/etc").unwrap_err().to_string(),
        "error SubPath `/etc` must not be an absolute path"
    );
    for sub in ["..", "a/../..", "a/..", "../x"] {
        assert_eq!(
            resolve(&vol, sub).unwrap_err().to_string(),
            format!("unable to provision SubPath `{sub}`: must not contain '..'")
        );
    }
    // A name that merely starts with dots is a name.
    std::fs::create_dir(vol.join("..data")).unwrap();
    assert_eq!(
        opened(&resolve(&vol, "..data").unwrap()),
        vol.join("..data")
    );
}

/// A link out of the volume, planted at each level of the subPath, absolute or relative: the
/// walk refuses it and creates nothing outside.
#[test]
fn links_leaving_the_volume_are_refused_at_every_level() {
    for level in 0..3 {
        for absolute in [true, false] {
            let (d, vol) = volume_tree();
            let canary = d.path().join("canary");
            std::fs::create_dir(&canary).unwrap();
            std::fs::write(canary.join("keep"), "alive").unwrap();
            let parts = ["a", "b", "c"];
            let at = vol.join(parts[..=level].join("/"));
            std::fs::remove_dir_all(&at).unwrap();
            let target = if absolute {
                canary.clone()
            } else {
                // Enough `..` to climb out of the volume from where the link sits.
                PathBuf::from(format!("{}canary", "../".repeat(level + 1)))
            };
            symlink(&target, &at).unwrap();
            for sub in ["a/b/c", "a/b/c/new", "a/b/c/new/deeper"] {
                let err = resolve(&vol, sub).unwrap_err();
                assert!(
                    matches!(err, SubPathError::Escapes { .. }),
                    "level {level} absolute {absolute} {sub}: {err}"
                );
            }
            let left: Vec<_> = std::fs::read_dir(&canary).unwrap().flatten().collect();
            assert_eq!(left.len(), 1, "nothing created outside the volume");
            assert_eq!(
                std::fs::read_to_string(canary.join("keep")).unwrap(),
                "alive"
            );
        }
    }
    // The classic: `ln -s / escape`.
    let (_d, vol) = volume_tree();
    symlink("/", vol.join("escape")).unwrap();
    assert!(matches!(
        resolve(&vol, "escape").unwrap_err(),
        SubPathError::Escapes { .. }
    ));
    assert!(matches!(
        resolve(&vol, "escape/etc").unwrap_err(),
        SubPathError::Escapes { .. }
    ));
}

/// configMap-style links stay inside the volume and are followed, as upstream's
/// `EvalSymlinks` + `PathWithinBase` allow; loops end.
#[test]
fn links_inside_the_volume_are_followed() {
    let (_d, vol) = volume_tree();
    std::fs::create_dir(vol.join("..2024_01_01")).unwrap();
    std::fs::write(vol.join("..2024_01_01/app.yaml"), "x").unwrap();
    symlink("..2024_01_01", vol.join("..data")).unwrap();
    symlink("..data/app.yaml", vol.join("app.yaml")).unwrap();
    let r = resolve(&vol, "app.yaml").unwrap();
    assert!(!r.is_dir());
    assert_eq!(opened(&r), vol.join("..2024_01_01/app.yaml"));
    // `..` inside a link climbs back the way the walk came, never above the root.
    symlink("../b/c", vol.join("a/b/sibling")).unwrap();
    assert_eq!(
        opened(&resolve(&vol, "a/b/sibling").unwrap()),
        vol.join("a/b/c")
    );
    symlink("../../..", vol.join("a/b/c/top")).unwrap();
    assert_eq!(opened(&resolve(&vol, "a/b/c/top").unwrap()), vol);
    symlink("../../../..", vol.join("a/b/c/up")).unwrap();
    assert!(matches!(
        resolve(&vol, "a/b/c/up").unwrap_err(),
        SubPathError::Escapes { .. }
    ));
    symlink("loop2", vol.join("loop1")).unwrap();
    symlink("loop1", vol.join("loop2")).unwrap();
    assert!(matches!(
        resolve(&vol, "loop1").unwrap_err(),
        SubPathError::Loop(_)
    ));
}

#[test]
fn bind_targets_are_per_volume_container_and_index() {
    let pod_dir = Path::new("/var/lib/kubelet/pods/u");
    assert_eq!(
        bind_target(pod_dir, "data", "app", 2).unwrap(),
        pod_dir.join("volume-subpaths/data/app/2")
    );
    for (v, c) in [("..", "app"), ("data", "a/b"), ("", "app"), ("data", ".")] {
        assert!(bind_target(pod_dir, v, c, 0).is_err(), "{v:?} {c:?}");
    }
}

fn sub_path_pod(sub_path: Option<&str>, expr: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
    let mut work = volume("work");
    work.empty_dir = Some(EmptyDirVolumeSource::default());
    pod(
        vec![work],
        vec![
            VolumeMount {
                name: "work".into(),
                mount_path: "/plain".into(),
                ..Default::default()
            },
            VolumeMount {
                name: "work".into(),
                mount_path: "/sub".into(),
                sub_path: sub_path.map(Into::into),
                sub_path_expr: expr.map(Into::into),
                ..Default::default()
            },
        ],
    )
}

const NO_HOSTS: HostsInfo<'static> = HostsInfo {
    pod_ips: &[],
    hostname: "p",
    domain: "",
};

async fn mounts_of(
    m: &crate::volumes::VolumeManager,
    p: &k8s_openapi::api::core::v1::Pod,
    env: &[(String, String)],
) -> Result<Vec<rkubelet_cri::api::Mount>, VolumeError> {
    let vols = m.mount_pod_volumes(p).await.unwrap();
    let c = &p.spec.as_ref().unwrap().containers[0];
    m.container_mounts(p, c, &vols, &NO_HOSTS, env).await
}

#[tokio::test]
async fn sub_path_expr_expands_with_the_container_env() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let p = sub_path_pod(None, Some("logs/$(POD_NAME)"));
    let env = vec![("POD_NAME".to_owned(), "web-0".to_owned())];
    let mounts = mounts_of(&m, &p, &env).await.unwrap();
    let work = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    let target = dir.path().join("pods/uid-1/volume-subpaths/work/c/1");
    assert_eq!(mounts[0].host_path, work.to_string_lossy());
    assert_eq!(mounts[1].host_path, target.to_string_lossy());
    assert!(work.join("logs/web-0").is_dir());
    let binds = mounter.binds.lock().unwrap().clone();
    assert_eq!(binds.len(), 1);
    assert_eq!(binds[0].1, target);
    assert_eq!(binds[0].2, work.join("logs/web-0"));

    let err = mounts_of(&m, &p, &[]).await.unwrap_err();
    assert_eq!(err.to_string(), "missing value for POD_NAME");
    // An expansion that goes up or out is refused like a subPath.
    let p = sub_path_pod(None, Some("$(X)/etc"));
    let env = vec![("X".to_owned(), "../..".to_owned())];
    assert_eq!(
        mounts_of(&m, &p, &env).await.unwrap_err().to_string(),
        "unable to provision SubPath `../../etc`: must not contain '..'"
    );
}

#[tokio::test]
async fn an_escaping_sub_path_fails_with_upstreams_message_and_mounts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let p = sub_path_pod(Some("escape"), None);
    m.mount_pod_volumes(&p).await.unwrap();
    let work = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    symlink("/", work.join("escape")).unwrap();
    let err = mounts_of(&m, &p, &[]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to prepare subPath for volumeMount \"work\" of container \"c\""
    );
    assert!(mounter.binds.lock().unwrap().is_empty());
    let p = sub_path_pod(Some("/etc"), None);
    assert_eq!(
        mounts_of(&m, &p, &[]).await.unwrap_err().to_string(),
        "error SubPath `/etc` must not be an absolute path"
    );
}

/// CVE-2021-25741: the subPath is swapped for a link to a canary directory after it was
/// resolved and before the bind: the source handed to the mounter still names the directory
/// the walk opened.
#[tokio::test]
async fn a_swap_between_resolving_and_mounting_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let p = sub_path_pod(Some("data"), None);
    m.mount_pod_volumes(&p).await.unwrap();
    let work = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    std::fs::create_dir(work.join("data")).unwrap();
    let canary = dir.path().join("canary");
    std::fs::create_dir(&canary).unwrap();
    {
        let (work, canary) = (work.clone(), canary.clone());
        *mounter.before_bind.lock().unwrap() = Some(Box::new(move || {
            std::fs::rename(work.join("data"), work.join("data.orig")).unwrap();
            symlink(&canary, work.join("data")).unwrap();
        }));
    }
    let mounts = mounts_of(&m, &p, &[]).await.unwrap();
    let binds = mounter.binds.lock().unwrap().clone();
    assert_eq!(binds.len(), 1);
    let (source, target, resolved) = &binds[0];
    assert!(
        source.starts_with(format!("/proc/{}/fd/", std::process::id())),
        "{source:?}"
    );
    assert_eq!(resolved, &work.join("data.orig"), "the opened directory");
    assert_ne!(resolved, &canary);
    assert_eq!(mounts[1].host_path, target.to_string_lossy());
}

#[tokio::test]
async fn file_sub_paths_get_a_file_target_and_teardown_removes_targets() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let p = sub_path_pod(Some("conf/app.yaml"), None);
    m.mount_pod_volumes(&p).await.unwrap();
    let work = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    std::fs::create_dir(work.join("conf")).unwrap();
    std::fs::write(work.join("conf/app.yaml"), "k: v").unwrap();
    mounts_of(&m, &p, &[]).await.unwrap();
    let target = dir.path().join("pods/uid-1/volume-subpaths/work/c/1");
    let meta = std::fs::symlink_metadata(&target).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert!(mounter.is_mount_point(&target));

    m.unmount_pod_volumes("uid-1").await.unwrap();
    assert!(!mounter.is_mount_point(&target));
    assert!(!dir.path().join("pods/uid-1/volume-subpaths").exists());
    m.remove_pod_dir("uid-1").await.unwrap();
    assert!(!dir.path().join("pods/uid-1").exists());
}

/// The real kernel: swaps between resolving and mounting through [`SystemMounter`].
struct SwappingMounter {
    real: SystemMounter,
    swap: Box<dyn Fn() + Send + Sync>,
}

#[async_trait]
impl Mounter for SwappingMounter {
    async fn mount_tmpfs(&self, dir: &Path, size: Option<i64>) -> Result<(), String> {
        self.real.mount_tmpfs(dir, size).await
    }
    async fn unmount(&self, dir: &Path) -> Result<(), String> {
        self.real.unmount(dir).await
    }
    fn is_mount_point(&self, dir: &Path) -> bool {
        self.real.is_mount_point(dir)
    }
    async fn bind_mount(&self, source: &Path, target: &Path) -> Result<(), String> {
        (self.swap)();
        self.real.bind_mount(source, target).await
    }
}

fn mounts_under(dir: &Path) -> usize {
    let want = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&want))
        .count()
}

/// Needs root (mount). The race on a real bind mount: what the target shows is the directory
/// the walk opened, not the canary the link points at; a restart reuses the mount; tear-down
/// leaves nothing mounted.
#[tokio::test]
#[cfg_attr(not(rkubelet_tests_as_root), ignore = "needs root (mount)")]
async fn real_bind_mount_refers_to_the_opened_directory() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(vol.join("data")).unwrap();
    std::fs::write(vol.join("data/marker"), "original").unwrap();
    std::fs::write(vol.join("file"), "a file").unwrap();
    let canary = dir.path().join("canary");
    std::fs::create_dir(&canary).unwrap();
    std::fs::write(canary.join("marker"), "canary").unwrap();
    let pod_dir = dir.path().join("pod");
    let swapped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mounter = {
        let (vol, canary, swapped) = (vol.clone(), canary.clone(), swapped.clone());
        SwappingMounter {
            real: SystemMounter,
            swap: Box::new(move || {
                if !swapped.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    std::fs::rename(vol.join("data"), vol.join("data.orig")).unwrap();
                    symlink(&canary, vol.join("data")).unwrap();
                }
            }),
        }
    };
    let req = SubPathMount {
        pod_dir: &pod_dir,
        volume: "v",
        volume_path: &vol,
        container: "c",
        index: 0,
        sub_path: "data",
    };
    let res = prepare(&mounter, &req).await;
    let shown = res
        .as_ref()
        .ok()
        .map(|t| std::fs::read_to_string(t.join("marker")));
    // Writes through the mount land in the original directory, never in the canary.
    if let Ok(t) = &res {
        std::fs::write(t.join("written"), "x").unwrap();
    }
    let file_req = SubPathMount {
        index: 1,
        sub_path: "file",
        ..req
    };
    let file_res = prepare(&mounter, &file_req).await;
    let file_shown = file_res.as_ref().ok().map(std::fs::read_to_string);
    // A container restart: the swapped path now leads out of the volume, but the target is
    // already mounted; the index-1 mount is reused as is.
    let again = prepare(&mounter, &file_req).await;
    let mounted_before_clean = mounts_under(&pod_dir);
    let cleaned = clean_sub_paths(&mounter, &pod_dir).await;
    let mounted_after_clean = mounts_under(&pod_dir);
    // Unconditional clean-up before asserting anything.
    for i in 0..2 {
        let t = pod_dir.join(format!("volume-subpaths/v/c/{i}"));
        while mounter.is_mount_point(&t) {
            if mounter.unmount(&t).await.is_err() {
                break;
            }
        }
    }

    let target = res.unwrap();
    assert_eq!(target, pod_dir.join("volume-subpaths/v/c/0"));
    assert_eq!(shown.unwrap().unwrap(), "original");
    assert!(vol.join("data.orig/written").exists());
    assert!(!canary.join("written").exists());
    assert_eq!(
        std::fs::read_to_string(canary.join("marker")).unwrap(),
        "canary"
    );
    assert_eq!(file_shown.unwrap().unwrap(), "a file");
    assert_eq!(again.unwrap(), file_res.unwrap());
    assert_eq!(
        mounted_before_clean, 2,
        "one mount per target, none doubled"
    );
    cleaned.unwrap();
    assert_eq!(mounted_after_clean, 0);
    assert!(!pod_dir.join("volume-subpaths").exists());
    // The escaping link itself is refused on a fresh target.
    let fresh = SubPathMount {
        container: "other",
        ..req
    };
    assert!(matches!(
        prepare(&mounter, &fresh).await.unwrap_err(),
        SubPathError::Escapes { .. }
    ));
    assert_eq!(mounts_under(&pod_dir), 0);
}

/// Depth (issue 28 A1): a subPath of `d/` × 60,000 (120 KB, which no API server bounds) is
/// refused before anything is opened or created, at once, for any pod: the message names the
/// container, the volumeMount and the limit, and does not repeat the value. Before, the walk
/// kept an fd and the whole path so far per level (memory growing with depth²).
#[tokio::test]
async fn a_sub_path_of_60000_levels_is_refused_quickly_naming_the_mount_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let deep = "d/".repeat(60_000);
    let p = sub_path_pod(Some(&deep), None);
    let start = std::time::Instant::now();
    let err = mounts_of(&m, &p, &[]).await.unwrap_err();
    let elapsed = start.elapsed();
    let msg = err.to_string();
    assert_eq!(
        msg,
        "subPath of volumeMount \"work\" of container \"c\" is 120000 bytes long in 60000 levels; \
         at most 4095 bytes and 2048 levels are allowed (PATH_MAX)"
    );
    assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
    let work = dir
        .path()
        .join("pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    assert!(!work.join("d").exists(), "nothing created");
    assert!(mounter.binds.lock().unwrap().is_empty());

    // The same bound below the manager, and exactly at PATH_MAX: 4095 bytes pass validation.
    assert!(matches!(
        validate(&deep).unwrap_err(),
        SubPathError::TooLong {
            bytes: 120_000,
            depth: 60_000
        }
    ));
    let at_bound = format!("{}d", "d/".repeat(2047));
    assert_eq!(at_bound.len(), MAX_SUB_PATH_BYTES);
    validate(&at_bound).unwrap();
    assert!(validate(&format!("{at_bound}d")).is_err());
}

/// A subPathExpr is bounded after expansion, and a short expression repeating a huge variable
/// is refused without expanding it to its full size.
#[tokio::test]
async fn a_sub_path_expr_is_bounded_after_expansion() {
    let dir = tempfile::tempdir().unwrap();
    let (m, mounter) = manager(dir.path());
    let env = vec![("X".to_owned(), "d/".repeat(60_000))];
    let p = sub_path_pod(None, Some("$(X)"));
    let msg = mounts_of(&m, &p, &env).await.unwrap_err().to_string();
    assert!(
        msg.starts_with("subPathExpr of volumeMount \"work\" of container \"c\" is ")
            && msg.ends_with("at most 4095 bytes and 2048 levels are allowed (PATH_MAX)"),
        "{msg}"
    );
    // 1,000 references to a 1 MiB value would expand to 1 GiB; each value is cut first.
    let env = vec![("X".to_owned(), "a".repeat(1 << 20))];
    let expr = "$(X)/".repeat(800);
    let start = std::time::Instant::now();
    let msg = mounts_of(&m, &sub_path_pod(None, Some(&expr)), &env)
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("subPathExpr of volumeMount"), "{msg}");
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    // An expression itself past the bound is refused before expanding.
    let env = vec![("X".to_owned(), "a".to_owned())];
    let msg = mounts_of(&m, &sub_path_pod(None, Some(&"$(X)/".repeat(1000))), &env)
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("is 5000 bytes long"), "{msg}");
    assert!(mounter.binds.lock().unwrap().is_empty());
}

/// Links inside the volume cannot take the walk past the bound either, and however deep it
/// goes (down 1,500 levels and back up through a link's `..`) it holds two fds at most.
#[test]
fn deep_walks_hold_two_fds_and_links_cannot_pass_the_bound() {
    let (_d, vol) = volume_tree();
    let down = "d/".repeat(1500);
    std::fs::create_dir_all(vol.join(&down)).unwrap();
    symlink(&down, vol.join("x")).unwrap();
    let (r, fds) = resolve_walk(&vol, "x").unwrap();
    assert!(r.is_dir());
    assert_eq!(opened(&r), vol.join(down.trim_end_matches('/')));
    assert!(fds <= 2, "{fds} fds held at once");

    // Back up all the way from the bottom through two links of 1,000 and 500 `..`.
    symlink(
        format!("{}up2", "../".repeat(1000)),
        vol.join(&down).join("up"),
    )
    .unwrap();
    symlink(
        format!("{}a/b", "../".repeat(500)),
        vol.join("d/".repeat(500)).join("up2"),
    )
    .unwrap();
    let (r, fds) = resolve_walk(&vol, "x/up").unwrap();
    assert_eq!(opened(&r), vol.join("a/b"));
    assert!(fds <= 2, "{fds} fds held at once");

    // 1,500 levels and a link adding 1,000 more: past 2,048 levels (and 4,095 bytes), the walk
    // stops without creating anything past the bound.
    symlink("d/".repeat(1000), vol.join(&down).join("more")).unwrap();
    let err = resolve(&vol, "x/more").unwrap_err();
    assert!(
        matches!(
            err,
            SubPathError::ResolvedTooLong {
                bytes: 4097,
                depth: 2049,
                ..
            }
        ),
        "{err}"
    );
    // Counted by fd: the deepest paths are longer than a path can name.
    let mut fd = crate::nofollow::open_dir_at(rustix::fs::CWD, vol.join(&down)).unwrap();
    let mut created = 0;
    while let Ok(next) = crate::nofollow::open_dir_at(&fd, "d") {
        fd = next;
        created += 1;
    }
    assert_eq!(
        created,
        2048 - 1500,
        "directories created up to the bound only"
    );
}
