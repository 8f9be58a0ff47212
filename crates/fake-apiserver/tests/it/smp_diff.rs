//! Differential tests of the strategic merge patch implementation against the real upstream
//! merge logic in `kubectl patch --local --type strategic` (offline).

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

const KUBECTL: &str = "/usr/bin/kubectl";

fn pod_base() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1",
            "labels": {"app": "web", "tier": "fe"},
            "finalizers": ["a/one", "b/two"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "nu1"}]},
        "spec": {
            "nodeName": "n1",
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "cm"}}],
            "containers": [
                {"name": "app", "image": "nginx:1",
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "side", "image": "busybox", "args": ["sleep", "1"]}],
            "tolerations": [{"key": "k", "operator": "Exists"}]
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "False", "reason": "Waiting"},
                {"type": "Ready", "status": "False"}],
            "podIPs": [{"ip": "10.0.0.5"}],
            "hostIPs": [{"ip": "192.168.1.1"}],
            "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "image": "nginx:1", "imageID": "",
                 "state": {"waiting": {"reason": "ContainerCreating"}}},
                {"name": "side", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
                 "state": {"waiting": {"reason": "ContainerCreating"}}}],
            "initContainerStatuses": [
                {"name": "init", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
                 "state": {"waiting": {"reason": "PodInitializing"}}}]
        }
    })
}

fn node_base() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "nu1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"],
                 "taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "7Gi", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
            "addresses": [
                {"type": "InternalIP", "address": "192.168.1.1"},
                {"type": "Hostname", "address": "n1"}],
            "images": [{"names": ["nginx:1"], "sizeBytes": 100}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "bootID": "b1"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
        }
    })
}

fn other_base(kind: &str) -> Value {
    match kind {
        "ConfigMap" => json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "labels": {"a": "1"}},
            "data": {"x": "1", "y": "2"}}),
        "Lease" => json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "n1", "namespace": "kube-node-lease",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "nu1"}]},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                     "renewTime": "2024-01-01T00:00:00.000000Z"}}),
        "Service" => json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                               {"name": "https", "port": 443, "protocol": "TCP"}],
                     "selector": {"app": "web"}}}),
        "ServiceAccount" => json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "default"},
            "secrets": [{"name": "a"}, {"name": "b"}], "imagePullSecrets": [{"name": "x"}]}),
        _ => unreachable!("unknown kind {kind}"),
    }
}

/// (name, base object, patch)
fn cases() -> Vec<(&'static str, Value, Value)> {
    let pod = pod_base;
    let node = node_base;
    vec![
        (
            "pod-condition-update",
            pod(),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        ),
        (
            "pod-condition-add",
            pod(),
            json!({"status": {"conditions": [{"type": "ContainersReady", "status": "True"}]}}),
        ),
        (
            "pod-set-element-order-conditions",
            pod(),
            json!({"status": {
            "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Initialized"}, {"type": "ContainersReady"}, {"type": "Ready"}],
            "conditions": [{"type": "Initialized", "status": "True", "reason": null},
                           {"type": "ContainersReady", "status": "True"},
                           {"type": "Ready", "status": "True"}]}}),
        ),
        (
            "pod-set-element-order-reorder-only",
            pod(),
            json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Initialized"}, {"type": "PodScheduled"}]}}),
        ),
        (
            "pod-kubelet-running-status",
            pod(),
            json!({"metadata": {"uid": "u1"}, "status": {
            "$setElementOrder/conditions": [{"type": "PodReadyToStartContainers"}, {"type": "Initialized"}, {"type": "Ready"}, {"type": "ContainersReady"}, {"type": "PodScheduled"}],
            "conditions": [{"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                           {"type": "Initialized", "status": "True", "reason": null},
                           {"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "started": true, "restartCount": 0, "image": "nginx:1", "imageID": "sha256:1",
                 "containerID": "containerd://abc", "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}},
                {"name": "side", "ready": true, "started": true, "restartCount": 0, "image": "busybox", "imageID": "sha256:2",
                 "containerID": "containerd://def", "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}}],
            "phase": "Running", "podIP": "10.0.0.6",
            "$setElementOrder/podIPs": [{"ip": "10.0.0.6"}],
            "podIPs": [{"ip": "10.0.0.6"}, {"$patch": "delete", "ip": "10.0.0.5"}],
            "startTime": "2024-01-01T00:00:00Z"}}),
        ),
        (
            "pod-container-statuses-replace",
            pod(),
            json!({"status": {"containerStatuses": [
            {"name": "side", "ready": true, "restartCount": 1, "image": "busybox", "imageID": "", "state": {"running": {}}}]}}),
        ),
        (
            "pod-init-container-statuses",
            pod(),
            json!({"status": {"initContainerStatuses": [
            {"name": "init", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
        ),
        (
            "pod-ephemeral-statuses-new",
            pod(),
            json!({"status": {"ephemeralContainerStatuses": [
            {"name": "dbg", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "", "state": {}}]}}),
        ),
        (
            "pod-podips-add",
            pod(),
            json!({"status": {"podIPs": [{"ip": "fd00::5"}]}}),
        ),
        (
            "pod-podips-replace-directive",
            pod(),
            json!({"status": {"podIPs": [{"ip": "10.0.0.9"}, {"$patch": "replace"}]}}),
        ),
        (
            "pod-hostips-delete",
            pod(),
            json!({"status": {"hostIPs": [{"ip": "192.168.1.1", "$patch": "delete"}]}}),
        ),
        (
            "pod-phase-failed-message",
            pod(),
            json!({"status": {"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected"}}),
        ),
        (
            "pod-status-null-field",
            pod(),
            json!({"status": {"podIPs": null, "hostIPs": null}}),
        ),
        (
            "pod-labels-merge-and-delete",
            pod(),
            json!({"metadata": {"labels": {"app": null, "new": "x"}}}),
        ),
        (
            "pod-finalizers-merge",
            pod(),
            json!({"metadata": {"finalizers": ["c/three", "a/one"]}}),
        ),
        (
            "pod-finalizers-delete-primitive",
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]}}),
        ),
        (
            "pod-finalizers-set-order",
            pod(),
            json!({"metadata": {"$setElementOrder/finalizers": ["b/two", "a/one"]}}),
        ),
        (
            "pod-owner-references-merge",
            pod(),
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "u9"}]}}),
        ),
        (
            "pod-container-image",
            pod(),
            json!({"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}),
        ),
        (
            "pod-container-env-merge",
            pod(),
            json!({"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}),
        ),
        (
            "pod-container-delete",
            pod(),
            json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
        ),
        (
            "pod-container-args-replace",
            pod(),
            json!({"spec": {"containers": [{"name": "side", "args": ["sleep", "2"]}]}}),
        ),
        (
            "pod-tolerations-atomic",
            pod(),
            json!({"spec": {"tolerations": [{"key": "z", "operator": "Exists"}]}}),
        ),
        (
            "pod-volume-retain-keys",
            pod(),
            json!({"spec": {"volumes": [{"name": "cfg", "$retainKeys": ["name", "secret"], "secret": {"secretName": "s"}}]}}),
        ),
        (
            "pod-map-replace-directive",
            pod(),
            json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}}),
        ),
        (
            "pod-map-delete-directive",
            pod(),
            json!({"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80, "$patch": "delete"}]}]}}),
        ),
        (
            "pod-list-replace-directive-containers",
            pod(),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "i"}]}}),
        ),
        (
            "pod-missing-merge-key-error",
            pod(),
            json!({"status": {"conditions": [{"status": "True"}]}}),
        ),
        (
            "node-conditions-heartbeat",
            node(),
            json!({"status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "DiskPressure"}, {"type": "PIDPressure"}, {"type": "Ready"}],
            "conditions": [
                {"type": "MemoryPressure", "lastHeartbeatTime": "2024-01-01T00:00:10Z"},
                {"type": "DiskPressure", "lastHeartbeatTime": "2024-01-01T00:00:10Z"},
                {"type": "PIDPressure", "lastHeartbeatTime": "2024-01-01T00:00:10Z"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2024-01-01T00:00:10Z", "lastTransitionTime": "2024-01-01T00:00:10Z"}]}}),
        ),
        (
            "node-addresses-set-order",
            node(),
            json!({"status": {
            "$setElementOrder/addresses": [{"type": "Hostname"}, {"type": "InternalIP"}, {"type": "ExternalIP"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.2"}, {"type": "ExternalIP", "address": "1.2.3.4"}]}}),
        ),
        (
            "node-addresses-delete",
            node(),
            json!({"status": {"addresses": [{"type": "Hostname", "$patch": "delete"}]}}),
        ),
        (
            "node-images-replace",
            node(),
            json!({"status": {"images": [{"names": ["busybox:1"], "sizeBytes": 5}, {"names": ["nginx:1"], "sizeBytes": 100}]}}),
        ),
        (
            "node-capacity-allocatable",
            node(),
            json!({"status": {"capacity": {"hugepages-2Mi": "0", "memory": "16Gi"},
            "allocatable": {"cpu": "3800m"}, "nodeInfo": {"bootID": "b2"}}}),
        ),
        (
            "node-taints-atomic-and-podcidrs-merge",
            node(),
            json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}], "podCIDRs": ["fd00::/64"]}}),
        ),
        (
            "node-labels-and-annotations",
            node(),
            json!({"metadata": {"labels": {"node.kubernetes.io/instance-type": "m5"},
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}),
        ),
        (
            "node-condition-new-type",
            node(),
            json!({"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]}}),
        ),
        (
            "configmap-data",
            other_base("ConfigMap"),
            json!({"data": {"x": null, "z": "3"}, "metadata": {"labels": {"b": "2"}}}),
        ),
        (
            "lease-renew",
            other_base("Lease"),
            json!({"spec": {"renewTime": "2024-01-01T00:00:10.000000Z", "holderIdentity": "n1"}}),
        ),
        (
            "service-ports-merge",
            other_base("Service"),
            json!({"spec": {"ports": [{"port": 443, "name": "tls"}, {"port": 8080, "name": "alt"}]}}),
        ),
        (
            "edge-new-list-with-replace-directive",
            node(),
            json!({"status": {"volumesInUse": ["a"], "conditions": null}, "spec": {"podCIDRs": null}}),
        ),
        (
            "edge-new-podips-with-directive",
            {
                let mut p = pod();
                p["status"]
                    .as_object_mut()
                    .expect("status")
                    .remove("podIPs");
                p
            },
            json!({"status": {"podIPs": [{"ip": "1.1.1.1"}, {"$patch": "replace"}]}}),
        ),
        (
            "edge-set-order-missing-list",
            {
                let mut p = pod();
                p["status"]
                    .as_object_mut()
                    .expect("status")
                    .remove("conditions");
                p
            },
            json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Initialized"}],
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}}),
        ),
        (
            "edge-new-map-with-nulls",
            node(),
            json!({"metadata": {"annotations": {"a": null, "b": "1"}}}),
        ),
        (
            "edge-type-change-list-to-map",
            pod(),
            json!({"spec": {"tolerations": {"x": 1}}}),
        ),
        (
            "edge-finalizers-duplicates",
            pod(),
            json!({"metadata": {"finalizers": ["b/two", "b/two", "z/z"]}}),
        ),
        (
            "edge-delete-from-missing-primitive-list",
            node(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        ),
        (
            "edge-conditions-reorder-and-add",
            node(),
            json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}, {"type": "DiskPressure"}, {"type": "PIDPressure"}, {"type": "NetworkUnavailable"}],
            "conditions": [{"type": "NetworkUnavailable", "status": "False"}]}}),
        ),
        (
            "serviceaccount-secrets-merge-pull-secrets-atomic",
            other_base("ServiceAccount"),
            json!({"secrets": [{"name": "c"}], "imagePullSecrets": [{"name": "y"}]}),
        ),
        (
            "service-status-conditions",
            {
                let mut svc = other_base("Service");
                svc["status"] = json!({"conditions": [{"type": "A", "status": "True"}]});
                svc
            },
            json!({"status": {"conditions": [{"type": "B", "status": "False"}]}}),
        ),
    ]
}

fn kubectl_patch(dir: &Path, name: &str, obj: &Value, patch: &Value) -> Result<Value, String> {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, obj.to_string()).expect("write object");
    let out = Command::new(KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .args([
            "patch",
            "--local",
            "-o",
            "json",
            "--type",
            "strategic",
            "-f",
        ])
        .arg(&file)
        .arg("-p")
        .arg(patch.to_string())
        .output()
        .expect("run kubectl");
    if out.status.success() {
        serde_json::from_slice(&out.stdout).map_err(|e| format!("kubectl output not JSON: {e}"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn strategic_merge_patch_matches_kubectl() {
    assert!(
        Path::new(KUBECTL).exists(),
        "{KUBECTL} is required for the SMP differential tests but is missing"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = cases();
    assert!(
        cases.len() >= 30,
        "need at least 30 cases, have {}",
        cases.len()
    );
    // Run kubectl for all cases in parallel threads to keep the test fast.
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(name, obj, patch)| {
                let dir = dir.path();
                s.spawn(move || kubectl_patch(dir, name, obj, patch))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let mut failures = Vec::new();
    for ((name, obj, patch), upstream) in cases.iter().zip(results) {
        let kind = obj["kind"].as_str().expect("kind");
        let ours = fake_apiserver::smp::apply(kind, obj, patch);
        // Only cases named `*-error` may fail upstream; anything else means a broken fixture.
        if upstream.is_err() != name.ends_with("-error") {
            failures.push(format!(
                "case {name}: unexpected kubectl outcome {upstream:?}"
            ));
            continue;
        }
        match (upstream, ours) {
            (Ok(want), Ok(got)) if want == got => {}
            (Err(_), Err(_)) => {}
            (want, got) => failures.push(format!(
                "case {name}:\n  kubectl: {}\n  ours:    {}",
                want.map(|v| v.to_string())
                    .unwrap_or_else(|e| format!("error {e}")),
                got.map(|v| v.to_string())
                    .unwrap_or_else(|e| format!("error {e}")),
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
