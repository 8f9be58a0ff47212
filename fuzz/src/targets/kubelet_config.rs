//! Target `kubelet-config`: a `--config` file plus `--config-dir` drop-ins, written to a
//! scratch directory and loaded by `kubelet::config::load_config_with` (YAML/JSON parse, type
//! meta, unknown-field stripping, defaulting, relative paths, RFC 7386 drop-in merge), then
//! `validate` and the support table's check. The input is the base file and the drop-ins joined by [`SEP`]; an empty base
//! means no `--config`. Properties: no panic; a strict load that succeeds also succeeds
//! leniently, with no warnings and the same configuration.

use std::cell::RefCell;
use std::path::PathBuf;

use kubelet::config::{LoadOptions, load_config_with, support, validate};

use super::Target;
use crate::mutate::mutate;
use crate::rng::Rng;

pub const TARGET: Target = Target {
    name: "kubelet-config",
    about: "KubeletConfiguration file + drop-in dir load, merge, defaulting, validation",
    generate,
    run,
    smoke_inputs: 2_000,
};

/// Separates the base config from each drop-in in one input.
const SEP: &str = "\n%%%drop-in%%%\n";

const FULL: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: ./manifests
staticPodURL: http://example/pods
staticPodURLHeader: {X-A: [b, c]}
syncFrequency: 1m0s
fileCheckFrequency: 20s
httpCheckFrequency: 1h2m3.5s
address: "::"
port: 10250
readOnlyPort: 0
tlsCertFile: certs/kubelet.crt
tlsPrivateKeyFile: ../x/kubelet.key
tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
tlsMinVersion: VersionTLS12
rotateCertificates: true
authentication:
  x509: {clientCAFile: ca.crt}
  webhook: {enabled: true, cacheTTL: 2m}
  anonymous: {enabled: false}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 5m, cacheUnauthorizedTTL: 30s}
registryPullQPS: 5
registryBurst: 10
eventRecordQPS: 50
eventBurst: 100
enableDebuggingHandlers: true
healthzPort: 10248
healthzBindAddress: 127.0.0.1
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
streamingConnectionIdleTimeout: 4h
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 5m
nodeLeaseDurationSeconds: 40
imageMinimumGCAge: 2m
imageMaximumGCAge: 0s
imageGCHighThresholdPercent: 85
imageGCLowThresholdPercent: 80
volumeStatsAggPeriod: 1m
cgroupRoot: /
cgroupsPerQOS: true
cgroupDriver: cgroupfs
cpuManagerPolicy: static
cpuManagerReconcilePeriod: 10s
memoryManagerPolicy: None
topologyManagerPolicy: none
runtimeRequestTimeout: 2m
hairpinMode: promiscuous-bridge
maxPods: 110
podPidsLimit: -1
resolvConf: /etc/resolv.conf
cpuCFSQuota: true
cpuCFSQuotaPeriod: 100ms
maxOpenFiles: 1000000
contentType: application/vnd.kubernetes.protobuf
kubeAPIQPS: 50
kubeAPIBurst: 100
serializeImagePulls: false
maxParallelImagePulls: 5
evictionHard: {memory.available: 100Mi, nodefs.available: 10%, imagefs.inodesFree: 5%}
evictionSoft: {memory.available: 1.5Gi}
evictionSoftGracePeriod: {memory.available: 1m30s}
evictionPressureTransitionPeriod: 5m
evictionMaxPodGracePeriod: 30
evictionMinimumReclaim: {memory.available: 0.5Gi}
podsPerCore: 0
enableControllerAttachDetach: true
protectKernelDefaults: false
makeIPTablesUtilChains: true
failSwapOn: false
memorySwap: {swapBehavior: NoSwap}
containerLogMaxSize: 10Mi
containerLogMaxFiles: 5
containerLogMaxWorkers: 1
containerLogMonitorInterval: 10s
configMapAndSecretChangeDetectionStrategy: Watch
systemReserved: {cpu: 500m, memory: 1Gi}
kubeReserved: {cpu: 100m, memory: 256Mi, ephemeral-storage: 1Gi, pid: "1000"}
reservedSystemCPUs: 0-1,3
enforceNodeAllocatable: [pods]
allowedUnsafeSysctls: [net.core.*, kernel.msg*]
volumePluginDir: plugins
logging: {format: text, flushFrequency: 5s, verbosity: 2, options: {json: {infoBufferSize: "0"}}}
enableSystemLogHandler: true
enableSystemLogQuery: false
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]
enableProfilingHandler: true
enableDebugFlagsHandler: true
seccompDefault: false
memoryThrottlingFactor: 0.9
registerWithTaints: [{key: k, value: v, effect: NoSchedule}]
registerNode: true
localStorageCapacityIsolation: true
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: ""
failCgroupV1: false
featureGates: {KubeletTracing: false, AllAlpha: false, KubeletCrashLoopBackOffMax: true}
crashLoopBackOff: {maxContainerRestartPeriod: 300s}
podLogsDir: /var/log/pods
"#;

const JSON_BASE: &str = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","port":10250,"evictionHard":{"memory.available":"5%"},"syncFrequency":"30s","featureGates":{"NodeSwap":true},"authentication":{"webhook":{"enabled":false}}}"#;

const DROP_IN_1: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\nevictionHard:\n  memory.available: null\n  nodefs.available: 15%\nauthentication: {anonymous: {enabled: true}}\n";

const DROP_IN_2: &str = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","featureGates":null,"staticPodPath":"../pods","systemReserved":{"memory":"2Gi"}}"#;

const SEEDS: &[&str] = &[
    include_str!("../../../examples/kubelet-config.yaml"),
    FULL,
    JSON_BASE,
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    "\n%%%drop-in%%%\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nport: 1\n",
];

const DICT: &[&str] = &[
    SEP,
    SEP,
    DROP_IN_1,
    DROP_IN_2,
    ": ",
    "\n",
    "\n  ",
    "- ",
    "&x ",
    "*x",
    "<<: *x",
    "{",
    "}",
    "[",
    "]",
    "null",
    "~",
    "\"\"",
    "!!binary ",
    "--- ",
    "apiVersion",
    "kind",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1",
    "KubeletConfiguration",
    "1m0s",
    "-1s",
    "1.5h",
    "0",
    "1e3",
    "1Ei",
    "8Ei",
    "9Ei",
    "110%",
    "-5%",
    "5.5%",
    "100Mi",
    "0-3",
    "0-1,1",
    "3-1",
    "4096-8191",
    "NaN%",
    "staticPodPath",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMinimumReclaim",
    "memory.available",
    "nodefs.available",
    "pid.available",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "featureGates",
    "maxPods",
    "syncFrequency",
    "cgroupDriver",
    "cgroupfs",
    "systemd",
    "cpuManagerPolicy",
    "static",
    "none",
    "port",
    "readOnlyPort",
    "address",
    "tlsMinVersion",
    "VersionTLS13",
    "authentication",
    "authorization",
    "webhook",
    "anonymous",
    "mode",
    "AlwaysAllow",
    "Webhook",
    "logging",
    "format",
    "json",
    "shutdownGracePeriod",
    "reservedMemory",
    "numaNode",
    "limits",
    "memorySwap",
    "swapBehavior",
    "LimitedSwap",
    "registerWithTaints",
    "effect",
    "NoExecute",
    "crashLoopBackOff",
    "maxContainerRestartPeriod",
    "podLogsDir",
    "resolvConf",
    "..",
    "./",
    "/abs",
    "enforceNodeAllocatable",
    "kube-reserved",
    "system-reserved",
    "hugepages-2Mi",
    "allowedUnsafeSysctls",
    "shutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 2}]",
    "cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}",
    "topologyManagerPolicy",
    "single-numa-node",
    "tlsCipherSuites",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    mutate(rng, &seeds, DICT, 64 << 10)
}

/// The scratch directory of this thread: `config.yaml` and `conf.d/NN.conf`.
struct Scratch {
    _dir: tempfile::TempDir,
    base: PathBuf,
    drop_ins: PathBuf,
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

fn with_scratch(f: impl FnOnce(&Scratch)) {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        let scratch = slot.get_or_insert_with(|| {
            let dir = tempfile::tempdir().expect("scratch dir for the kubelet-config target");
            let base = dir.path().join("etc/kubelet/config.yaml");
            let drop_ins = dir.path().join("etc/kubelet/conf.d");
            Scratch {
                _dir: dir,
                base,
                drop_ins,
            }
        });
        f(scratch);
    });
}

fn run(data: &[u8]) {
    with_scratch(|s| {
        let mut parts = split(data, SEP.as_bytes());
        let base = parts.remove(0);
        // Harness I/O failures are not findings: the scratch dir is ours.
        let _ = std::fs::remove_dir_all(&s.drop_ins);
        std::fs::create_dir_all(&s.drop_ins).expect("create conf.d");
        std::fs::write(&s.base, base).expect("write config.yaml");
        for (i, part) in parts.iter().enumerate() {
            std::fs::write(s.drop_ins.join(format!("{i:02}.conf")), part).expect("write drop-in");
        }
        let path = (!base.is_empty()).then_some(s.base.as_path());
        let dir = (!parts.is_empty()).then_some(s.drop_ins.as_path());
        let strict = load_config_with(path, dir, &LoadOptions { strict: true });
        let lenient = load_config_with(path, dir, &LoadOptions { strict: false });
        if let Ok(strict) = &strict {
            let lenient = lenient
                .as_ref()
                .expect("a strict load succeeded but the lenient one failed");
            assert!(
                lenient.warnings.is_empty(),
                "strict-clean config warned: {:?}",
                lenient.warnings
            );
            assert!(
                strict.config == lenient.config,
                "strict and lenient loads differ"
            );
        }
        for loaded in [strict, lenient].into_iter().flatten() {
            if validate(&loaded.config).is_ok() {
                let _ = support::check(&loaded.config);
            }
        }
    });
}

/// `data` split on every `sep` (always at least one part).
fn split<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.windows(sep.len()).position(|w| w == sep) {
        out.push(&rest[..i]);
        rest = &rest[i + sep.len()..];
    }
    out.push(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_load_and_validate() {
        for seed in [FULL, JSON_BASE] {
            with_scratch(|s| {
                std::fs::create_dir_all(s.base.parent().unwrap()).unwrap();
                std::fs::write(&s.base, seed).unwrap();
                let loaded = load_config_with(Some(&s.base), None, &LoadOptions::default());
                let loaded = loaded.unwrap_or_else(|e| panic!("seed rejected: {e}"));
                validate(&loaded.config).unwrap_or_else(|e| panic!("seed invalid: {e}"));
            });
        }
        let base_and_drop_ins = format!("{JSON_BASE}{SEP}{DROP_IN_1}{SEP}{DROP_IN_2}");
        run(base_and_drop_ins.as_bytes());
        assert_eq!(split(b"a%%b%%", b"%%"), vec![&b"a"[..], b"b", b""]);
    }

    #[test]
    fn generated_inputs_reach_decoding_and_validation() {
        let (mut loaded, mut valid) = (0, 0);
        for i in 0..300 {
            let data = generate(&mut Rng::for_input(1, i));
            with_scratch(|s| {
                let parts = split(&data, SEP.as_bytes());
                std::fs::create_dir_all(s.base.parent().unwrap()).unwrap();
                std::fs::write(&s.base, parts[0]).unwrap();
                let opts = LoadOptions { strict: false };
                if let Ok(l) = load_config_with(Some(&s.base), None, &opts) {
                    loaded += 1;
                    valid += usize::from(validate(&l.config).is_ok());
                }
            });
        }
        eprintln!("loaded {loaded}, valid {valid} of 300");
        assert!(loaded >= 30, "too few generated configs load: {loaded}");
        assert!(valid >= 10, "too few generated configs validate: {valid}");
    }
}
