//! Target `static-pod`: static pod manifests (file and URL sources) through decode (YAML/JSON,
//! multi-document, PodList), API defaulting, static-pod construction and validation
//! (`kubelet::sources::static_pods_from_manifest`). Properties: no panic; every accepted pod
//! is already defaulted (defaulting it again changes nothing) and passes validation again.

use std::path::Path;

use kubelet::sources::defaults::set_pod_defaults;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest, validate_pod};

use super::Target;
use crate::mutate::mutate;
use crate::rng::Rng;

pub const TARGET: Target = Target {
    name: "static-pod",
    about: "static pod manifest decode + defaulting + validation",
    generate,
    run,
    smoke_inputs: 40_000,
};

const RICH: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: rich
  namespace: kube-system
  uid: ""
  labels: {app: rich, "example.com/tier": "1"}
  annotations:
    kubernetes.io/config.seen: "x"
spec:
  hostNetwork: false
  dnsPolicy: ClusterFirst
  dnsConfig:
    nameservers: ["1.1.1.1"]
    searches: [a.svc, b.svc]
    options: [{name: ndots, value: "2"}]
  restartPolicy: OnFailure
  activeDeadlineSeconds: 30
  priority: 10
  securityContext: {runAsUser: 1000, fsGroup: 2000, sysctls: [{name: net.ipv4.ip_forward, value: "1"}]}
  tolerations: [{key: k, operator: Equal, value: v, effect: NoSchedule, tolerationSeconds: 5}]
  volumes:
  - name: data
    emptyDir: {sizeLimit: 1Gi, medium: Memory}
  - name: host
    hostPath: {path: /var/log, type: Directory}
  - name: cfg
    downwardAPI:
      items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}, {path: cpu, resourceFieldRef: {containerName: main, resource: limits.cpu, divisor: 1m}}]
  initContainers:
  - name: init
    image: busybox
    command: [sh, -c, "true"]
    restartPolicy: Always
    startupProbe: {exec: {command: ["true"]}, failureThreshold: 3}
  containers:
  - name: main
    image: registry.example.com:5000/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    imagePullPolicy: Always
    workingDir: /work
    env:
    - {name: A, value: "1"}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: LIM
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    ports:
    - {name: http, containerPort: 8080, hostPort: 8080, protocol: TCP, hostIP: 0.0.0.0}
    - {containerPort: 53, protocol: UDP}
    resources:
      requests: {cpu: 250m, memory: 64Mi, ephemeral-storage: 1Gi}
      limits: {cpu: "1.5", memory: 128Mi, hugepages-2Mi: 4Mi}
    volumeMounts:
    - {name: data, mountPath: /data, subPath: x, readOnly: true}
    - {name: host, mountPath: /host, mountPropagation: HostToContainer}
    livenessProbe:
      httpGet: {path: /healthz, port: http, scheme: HTTPS, httpHeaders: [{name: X, value: y}]}
      initialDelaySeconds: 1
      periodSeconds: 2
      timeoutSeconds: 3
      successThreshold: 1
    readinessProbe: {tcpSocket: {port: 8080}}
    lifecycle:
      preStop: {sleep: {seconds: 2}}
      postStart: {httpGet: {port: 80}}
    securityContext:
      privileged: false
      capabilities: {add: [NET_ADMIN], drop: [ALL]}
      readOnlyRootFilesystem: true
      seccompProfile: {type: RuntimeDefault}
    terminationMessagePolicy: FallbackToLogsOnError
"#;

const JSON_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j","labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"nginx","ports":[{"containerPort":80}],"env":[{"name":"X","value":"1"}]}],"hostNetwork":true}}"#;

const POD_LIST: &str = r#"{"apiVersion":"v1","kind":"PodList","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}},{"metadata":{"name":"b"},"spec":{"containers":[{"name":"d","image":"i:1"}]}}]}"#;

const MULTI_DOC: &str = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: one}\nspec:\n  containers: [{name: c, image: i}]\n---\n# comment only\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: two\n  namespace: ns\nspec:\n  containers:\n  - name: c\n    image: i\n    args: &a [x, y]\n    command: *a\n";

const SEEDS: &[&str] = &[
    include_str!("../../../examples/manifests/web.yaml"),
    include_str!("../../../examples/manifests/hello.yaml"),
    include_str!("../../../examples/manifests/init-demo.yaml"),
    RICH,
    JSON_POD,
    POD_LIST,
    MULTI_DOC,
];

const DICT: &[&str] = &[
    "\n---\n",
    "---",
    "...",
    "- ",
    ": ",
    ":",
    "\n  ",
    "\n    ",
    "\n- ",
    "? ",
    "|",
    "|-",
    ">",
    "&a ",
    "*a",
    "<<: *a",
    "!!str ",
    "!!int ",
    "!!binary ",
    "!!map ",
    "!Pod ",
    "%YAML 1.2\n",
    "#",
    "'",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "[[[[[[[[",
    "{{{{{{{{",
    "0x",
    "0o",
    "~",
    "yes",
    "no",
    "on",
    ".nan",
    ".inf",
    "apiVersion",
    "kind",
    "Pod",
    "PodList",
    "items",
    "v1",
    "v2",
    "metadata",
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "spec",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "image",
    "command",
    "args",
    "env",
    "valueFrom",
    "fieldRef",
    "fieldPath",
    "resourceFieldRef",
    "secretKeyRef",
    "configMapKeyRef",
    "envFrom",
    "ports",
    "containerPort",
    "hostPort",
    "protocol",
    "SCTP",
    "volumes",
    "volumeMounts",
    "mountPath",
    "subPath",
    "subPathExpr",
    "secret",
    "configMap",
    "projected",
    "serviceAccountToken",
    "persistentVolumeClaim",
    "hostPath",
    "emptyDir",
    "sizeLimit",
    "resources",
    "requests",
    "limits",
    "cpu",
    "memory",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "grpc",
    "httpGet",
    "tcpSocket",
    "exec",
    "port",
    "host",
    "path",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "dnsPolicy",
    "None",
    "Default",
    "ClusterFirstWithHostNet",
    "dnsConfig",
    "nameservers",
    "searches",
    "options",
    "restartPolicy",
    "Never",
    "Always",
    "OnFailure",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "serviceAccountName",
    "nodeName",
    "priorityClassName",
    "tolerations",
    "securityContext",
    "runAsUser",
    "sysctls",
    "os",
    "windows",
    "linux",
    "readinessGates",
    "conditionType",
    "schedulingGates",
    "resourceClaims",
    "imagePullSecrets",
    "ownerReferences",
    "deletionTimestamp",
    "generateName",
    "1Gi",
    "500m",
    "-1",
    "65536",
    "0.0.0.0",
    "::1",
    "a..b",
    "-bad-",
    "UPPER",
    "x/y/z",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    mutate(rng, &seeds, DICT, 64 << 10)
}

fn run(data: &[u8]) {
    let file = ManifestOrigin::File(Path::new("/etc/kubernetes/manifests/pod.yaml"));
    let url = ManifestOrigin::Url("http://config.example/pods");
    for (origin, node, allow_list) in [(file, "node-a", false), (url, "Node-B.Example", true)] {
        let Ok(pods) = static_pods_from_manifest(data, node, &origin, allow_list) else {
            continue;
        };
        for pod in pods {
            let mut again = pod.clone();
            set_pod_defaults(&mut again);
            assert!(
                again == pod,
                "defaulting an accepted static pod is not idempotent"
            );
            let errs = validate_pod(&pod);
            assert!(
                errs.is_empty(),
                "an accepted static pod fails validation: {errs:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_decode_into_valid_pods() {
        for seed in SEEDS {
            let origin = ManifestOrigin::Url("http://x");
            let pods = static_pods_from_manifest(seed.as_bytes(), "n", &origin, true);
            assert!(pods.is_ok_and(|p| !p.is_empty()), "seed rejected: {seed}");
            run(seed.as_bytes());
        }
    }

    #[test]
    fn generated_inputs_reach_defaulting_and_validation() {
        use kubelet::sources::ManifestError;
        let (mut accepted, mut invalid, mut unknown, mut unparsable) = (0, 0, 0, 0);
        // 4,000 inputs: a mutation that adds a key under a container now stops at the
        // unknown-field refusal, before validation, so half as many reach validation per input.
        for i in 0..4000 {
            let data = generate(&mut Rng::for_input(1, i));
            let origin = ManifestOrigin::Url("http://x");
            match static_pods_from_manifest(&data, "n", &origin, true) {
                Ok(_) => accepted += 1,
                Err(ManifestError::Invalid(_)) => invalid += 1,
                Err(ManifestError::UnknownField(_)) => unknown += 1,
                Err(ManifestError::Parse(_)) => unparsable += 1,
                Err(_) => {}
            }
        }
        eprintln!(
            "accepted {accepted}, invalid {invalid}, unknown field {unknown}, unparsable {unparsable} of 4000"
        );
        assert!(
            accepted >= 100,
            "too few generated manifests are accepted: {accepted}"
        );
        assert!(
            invalid >= 100,
            "too few generated manifests reach validation errors: {invalid}"
        );
        assert!(
            unknown >= 100,
            "too few generated manifests reach the unknown-field refusal: {unknown}"
        );
    }
}
