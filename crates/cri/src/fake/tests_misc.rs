//! Tests of `FakeRuntime`'s images, exec, stats and runtime-level calls.

use std::time::Duration;

use super::tests::{create, running};
use super::*;
use crate::traits::{ImageService, RuntimeService};

const BUSYBOX: &str = "docker.io/library/busybox:latest";

#[tokio::test]
async fn images_pull_status_remove() {
    let rt = FakeRuntime::with_images(&[BUSYBOX]);
    let status = |name: &str| {
        let rt = rt.clone();
        let name = name.to_string();
        async move {
            rt.image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: name,
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .expect("image status never fails for a missing image")
            .image
        }
    };
    let bb = status("busybox").await.expect("short name resolves");
    assert!(bb.id.starts_with("sha256:") && bb.id.len() == 71);
    assert_eq!(bb.repo_tags, [BUSYBOX]);
    assert!(bb.repo_digests[0].starts_with("docker.io/library/busybox@sha256:"));
    assert!(bb.size > 0);
    assert!(status("nginx").await.is_none());

    let pull = |name: &str| {
        let rt = rt.clone();
        let name = name.to_string();
        async move {
            rt.pull_image(api::PullImageRequest {
                image: Some(api::ImageSpec {
                    image: name,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
        }
    };
    let image_ref = pull("nginx:1.25").await.expect("pull").image_ref;
    assert_eq!(
        status("docker.io/library/nginx:1.25").await.map(|i| i.id),
        Some(image_ref)
    );
    assert_eq!(rt.images(), [BUSYBOX, "docker.io/library/nginx:1.25"]);

    rt.fail_pull(
        "private/app:v1",
        "failed to resolve reference: 401 Unauthorized",
    );
    let err = pull("docker.io/private/app:v1")
        .await
        .expect_err("scripted");
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert!(err.message().contains("401 Unauthorized"), "{err}");
    assert!(err.message().contains("docker.io/private/app:v1"), "{err}");
    rt.clear_pull_failure("private/app:v1");
    pull("private/app:v1").await.expect("pull after clearing");
    assert!(pull("Bad Name").await.is_err());

    let listed = rt
        .list_images(api::ListImagesRequest {
            filter: Some(api::ImageFilter {
                image: Some(api::ImageSpec {
                    image: "nginx:1.25".into(),
                    ..Default::default()
                }),
            }),
        })
        .await
        .expect("list")
        .images;
    assert_eq!(listed.len(), 1);
    let all = rt
        .list_images(api::ListImagesRequest::default())
        .await
        .expect("list")
        .images;
    assert_eq!(all.len(), 3);
    let fs = rt
        .image_fs_info(api::ImageFsInfoRequest {})
        .await
        .expect("fs");
    let used = fs.image_filesystems[0].used_bytes.expect("set").value;
    assert_eq!(used, all.iter().map(|i| i.size).sum::<u64>());

    for _ in 0..2 {
        rt.remove_image(api::RemoveImageRequest {
            image: Some(api::ImageSpec {
                image: "nginx:1.25".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("remove is idempotent");
    }
    assert!(!rt.has_image("nginx:1.25"));
}

#[tokio::test(start_paused = true)]
async fn exec_sync_scripts() {
    let (rt, sid, cid) = running("app").await;
    let exec = |id: &str, cmd: &[&str], timeout: i64| {
        rt.exec_sync(api::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        })
    };
    let out = exec(&cid, &["echo", "hi", "there"], 0).await.expect("echo");
    assert_eq!(
        (out.stdout.as_slice(), out.exit_code),
        (&b"hi there\n"[..], 0)
    );

    rt.on_exec(
        "app",
        ExecBehaviour::Reply {
            exit_code: 1,
            stdout: b"no".to_vec(),
            stderr: b"bad".to_vec(),
        },
    );
    let out = exec(&cid, &["check"], 0).await.expect("reply");
    assert_eq!((out.exit_code, out.stderr.as_slice()), (1, &b"bad"[..]));

    rt.on_exec("app", ExecBehaviour::Hang);
    let t0 = tokio::time::Instant::now();
    let err = exec(&cid, &["sleep", "99"], 3)
        .await
        .expect_err("times out");
    assert!(err.is_deadline_exceeded(), "{err:?}");
    assert_eq!(t0.elapsed(), Duration::from_secs(3));

    let c2 = create(&rt, &sid, "idle").await.expect("create");
    let err = exec(&c2, &["true"], 1).await.expect_err("not running");
    assert!(err.message().contains("CONTAINER_CREATED"), "{err}");

    let url = rt
        .exec(api::ExecRequest {
            container_id: cid.clone(),
            cmd: vec!["sh".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .expect("exec url")
        .url;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
}

#[tokio::test]
async fn stats_runtime_config_and_misc() {
    let (rt, sid, cid) = running("app").await;
    let _idle = create(&rt, &sid, "idle").await.expect("create");
    let stats = rt
        .list_container_stats(api::ListContainerStatsRequest::default())
        .await
        .expect("stats")
        .stats;
    let ids: Vec<_> = stats
        .iter()
        .filter_map(|s| s.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    assert_eq!(ids, [cid.as_str()], "only running containers");
    let pod = rt
        .pod_sandbox_stats(api::PodSandboxStatsRequest {
            pod_sandbox_id: sid.clone(),
        })
        .await
        .expect("pod stats")
        .stats
        .expect("set");
    assert_eq!(pod.linux.expect("linux").containers.len(), 1);

    let err = rt
        .runtime_config(api::RuntimeConfigRequest {})
        .await
        .expect_err("containerd 1.6 lacks it");
    assert!(err.is_unimplemented());
    rt.set_runtime_config(Some(api::LinuxRuntimeConfiguration {
        cgroup_driver: api::CgroupDriver::Cgroupfs as i32,
    }));
    let cfg = rt
        .runtime_config(api::RuntimeConfigRequest {})
        .await
        .expect("set");
    assert_eq!(
        cfg.linux.map(|l| l.cgroup_driver),
        Some(api::CgroupDriver::Cgroupfs as i32)
    );

    rt.update_runtime_config(api::UpdateRuntimeConfigRequest {
        runtime_config: Some(api::RuntimeConfig {
            network_config: Some(api::NetworkConfig {
                pod_cidr: "10.88.0.0/16".into(),
            }),
        }),
    })
    .await
    .expect("update");
    assert_eq!(rt.pod_cidr(), "10.88.0.0/16");

    let limits = api::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    rt.update_container_resources(api::UpdateContainerResourcesRequest {
        container_id: cid.clone(),
        linux: Some(limits.clone()),
        ..Default::default()
    })
    .await
    .expect("update resources");
    let res = rt
        .container(&cid)
        .and_then(|s| s.resources)
        .and_then(|r| r.linux);
    assert_eq!(res, Some(limits));
}

#[tokio::test]
async fn runtime_handlers_are_recorded_and_unknown_ones_refused_like_containerd() {
    let rt = FakeRuntime::new();
    rt.set_runtime_handlers(&["runc", "kata"]);
    let run = |name: &str, handler: &str| {
        let rt = rt.clone();
        let req = api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: name.to_owned(),
                    namespace: "ns".to_owned(),
                    uid: format!("uid-{name}"),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            runtime_handler: handler.to_owned(),
        };
        async move { rt.run_pod_sandbox(req).await.map(|r| r.pod_sandbox_id) }
    };
    let default = run("a", "")
        .await
        .expect("the default handler always works");
    let kata = run("b", "kata").await.expect("a configured handler");
    assert_eq!(rt.sandbox(&default).expect("sandbox").runtime_handler, "");
    assert_eq!(rt.sandbox(&kata).expect("sandbox").runtime_handler, "kata");
    assert_eq!(
        rt.sandboxes()
            .iter()
            .map(|s| s.runtime_handler.as_str())
            .collect::<Vec<_>>(),
        ["", "kata"]
    );

    let err = run("c", "gvisor").await.expect_err("an unknown handler");
    assert!(
        err.to_string()
            .contains("failed to get sandbox runtime: no runtime for \"gvisor\" is configured"),
        "{err}"
    );
    assert_eq!(rt.sandboxes().len(), 2, "no sandbox for an unknown handler");
    // `runc` is no longer configured once the list is replaced.
    rt.set_runtime_handlers(&["kata"]);
    assert!(run("d", "runc").await.is_err());
}
