//! The feature-gate registry (upstream `pkg/features/kube_features.go`, Kubernetes 1.33).
//! Owns: every gate name the Go kubelet registers with its 1.33 default, maturity and
//! lock-to-default rule, the `--feature-gates` syntax (`A=true,B=false`), and upstream's
//! errors and warnings when gates are set. Receives the config's `featureGates` (and the flag's
//! values merged over it); emits [`FeatureGates`], the typed query the rest of the kubelet
//! uses ([`FeatureGates::enabled`] with a [`Feature`]), or a [`FeatureGateError`].

use std::collections::BTreeMap;

/// Maturity of a gate (upstream `featuregate.prerelease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreRelease {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

/// One registered gate: its upstream name, 1.33 default, maturity and lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateSpec {
    pub name: &'static str,
    pub default: bool,
    pub pre_release: PreRelease,
    /// Setting the gate to anything but `default` is an error.
    pub locked: bool,
}

const fn spec(name: &'static str, default: bool, pre_release: PreRelease) -> GateSpec {
    GateSpec {
        name,
        default,
        pre_release,
        locked: false,
    }
}

const fn locked(name: &'static str, default: bool, pre_release: PreRelease) -> GateSpec {
    GateSpec {
        name,
        default,
        pre_release,
        locked: true,
    }
}

use PreRelease::{Alpha, Beta, Deprecated, Ga};

/// Every gate the 1.33 kubelet binary registers: Kubernetes, apiserver-generic, client-go,
/// component-base logging and zpages gates (the kubelet accepts them all in `featureGates`,
/// whether or not it reads them).
pub const GATES: &[GateSpec] = &[
    spec("AggregatedDiscoveryRemoveBetaType", true, Deprecated),
    spec("AllowDNSOnlyNodeCSR", false, Deprecated),
    spec(
        "AllowInsecureKubeletCertificateSigningRequests",
        false,
        Deprecated,
    ),
    spec(
        "AllowOverwriteTerminationGracePeriodSeconds",
        false,
        Deprecated,
    ),
    spec("AllowParsingUserUIDFromCertAuth", true, Beta),
    locked("AllowServiceLBStatusOnNonLB", false, Deprecated),
    spec("AllowUnsafeMalformedObjectDeletion", false, Alpha),
    spec("AnonymousAuthConfigurableEndpoints", true, Beta),
    locked("AnyVolumeDataSource", true, Ga),
    spec("APIResponseCompression", true, Beta),
    spec("APIServerIdentity", true, Beta),
    spec("APIServerTracing", true, Beta),
    spec("APIServingWithRoutine", false, Alpha),
    spec("AuthorizeNodeWithSelectors", true, Beta),
    spec("AuthorizeWithSelectors", true, Beta),
    locked("BtreeWatchCache", true, Ga),
    spec("CBORServingAndStorage", false, Alpha),
    spec("ClientsAllowCBOR", false, Alpha),
    spec("ClientsPreferCBOR", false, Alpha),
    spec("CloudControllerManagerWebhook", false, Alpha),
    spec("ClusterTrustBundle", false, Beta),
    spec("ClusterTrustBundleProjection", false, Beta),
    spec("ComponentFlagz", false, Alpha),
    spec("ComponentStatusz", false, Alpha),
    spec("ConcurrentWatchObjectDecode", false, Beta),
    spec("ConsistentListFromCache", true, Beta),
    spec("ContainerCheckpoint", true, Beta),
    spec("ContainerStopSignals", false, Alpha),
    spec("ContextualLogging", true, Beta),
    spec("CoordinatedLeaderElection", false, Beta),
    spec("CPUManagerPolicyAlphaOptions", false, Alpha),
    spec("CPUManagerPolicyBetaOptions", true, Beta),
    locked("CPUManagerPolicyOptions", true, Ga),
    locked("CRDValidationRatcheting", true, Ga),
    locked("CronJobsScheduledAnnotation", true, Ga),
    spec("CrossNamespaceVolumeDataSource", false, Alpha),
    locked("CSIMigrationPortworx", true, Ga),
    spec("CSIVolumeHealth", false, Alpha),
    spec("CustomCPUCFSQuotaPeriod", false, Alpha),
    locked("CustomResourceFieldSelectors", true, Ga),
    spec("DeclarativeValidation", true, Beta),
    spec("DeclarativeValidationTakeover", false, Beta),
    spec("DeploymentReplicaSetTerminatingReplicas", false, Alpha),
    locked("DevicePluginCDIDevices", true, Ga),
    spec("DisableAllocatorDualWrite", false, Beta),
    spec("DisableCPUQuotaWithExclusiveCPUs", true, Beta),
    spec("DisableNodeKubeProxyVersion", true, Deprecated),
    spec("DRAAdminAccess", false, Alpha),
    spec("DRADeviceTaints", false, Alpha),
    spec("DRAPartitionableDevices", false, Alpha),
    spec("DRAPrioritizedList", false, Alpha),
    spec("DRAResourceClaimDeviceStatus", true, Beta),
    spec("DynamicResourceAllocation", false, Beta),
    locked("ElasticIndexedJob", true, Ga),
    spec("EventedPLEG", false, Alpha),
    spec("ExecProbeTimeout", true, Ga),
    spec("ExternalServiceAccountTokenSigner", false, Alpha),
    spec("GitRepoVolumeDriver", false, Deprecated),
    spec("GracefulNodeShutdown", true, Beta),
    spec("GracefulNodeShutdownBasedOnPodPriority", true, Beta),
    locked("HonorPVReclaimPolicy", true, Ga),
    spec("HPAConfigurableTolerance", false, Alpha),
    spec("HPAScaleToZero", false, Alpha),
    spec("ImageMaximumGCAge", true, Beta),
    spec("ImageVolume", false, Beta),
    spec("InformerResourceVersion", false, Alpha),
    spec("InPlacePodVerticalScaling", true, Beta),
    spec(
        "InPlacePodVerticalScalingAllocatedStatus",
        false,
        Deprecated,
    ),
    spec("InPlacePodVerticalScalingExclusiveCPUs", false, Alpha),
    spec("InTreePluginPortworxUnregister", false, Alpha),
    locked("JobBackoffLimitPerIndex", true, Ga),
    spec("JobManagedBy", true, Beta),
    spec("JobPodReplacementPolicy", true, Beta),
    locked("JobSuccessPolicy", true, Ga),
    spec("KMSv1", false, Deprecated),
    spec("KubeletCgroupDriverFromCRI", true, Beta),
    spec("KubeletCrashLoopBackOffMax", false, Alpha),
    spec("KubeletEnsureSecretPulledImages", false, Alpha),
    spec("KubeletFineGrainedAuthz", true, Beta),
    spec("KubeletInUserNamespace", false, Alpha),
    spec("KubeletPodResourcesDynamicResources", false, Alpha),
    spec("KubeletPodResourcesGet", false, Alpha),
    spec("KubeletPSI", false, Alpha),
    spec("KubeletRegistrationGetOnExistsOnly", false, Deprecated),
    spec("KubeletSeparateDiskGC", true, Beta),
    spec(
        "KubeletServiceAccountTokenForCredentialProviders",
        false,
        Alpha,
    ),
    spec("KubeletTracing", true, Beta),
    spec("LegacySidecarContainers", false, Deprecated),
    spec("ListFromCacheSnapshot", false, Alpha),
    locked("LoadBalancerIPMode", true, Ga),
    spec(
        "LocalStorageCapacityIsolationFSQuotaMonitoring",
        false,
        Beta,
    ),
    locked("LogarithmicScaleDown", true, Ga),
    spec("LoggingAlphaOptions", false, Alpha),
    spec("LoggingBetaOptions", true, Beta),
    locked("MatchLabelKeysInPodAffinity", true, Ga),
    spec("MatchLabelKeysInPodTopologySpread", true, Beta),
    spec("MaxUnavailableStatefulSet", false, Alpha),
    locked("MemoryManager", true, Ga),
    spec("MemoryQoS", false, Alpha),
    spec("MultiCIDRServiceAllocator", true, Ga),
    spec("MutableCSINodeAllocatableCount", false, Alpha),
    spec("MutatingAdmissionPolicy", false, Alpha),
    locked("NFTablesProxyMode", true, Ga),
    locked("NodeInclusionPolicyInPodTopologySpread", true, Ga),
    spec("NodeLogQuery", false, Beta),
    spec("NodeSwap", true, Beta),
    spec("OpenAPIEnums", true, Beta),
    spec("OrderedNamespaceDeletion", true, Beta),
    spec("PodAndContainerStatsFromCRI", false, Alpha),
    spec("PodDeletionCost", true, Beta),
    locked("PodDisruptionConditions", true, Ga),
    locked("PodIndexLabel", true, Ga),
    spec("PodLevelResources", false, Alpha),
    spec("PodLifecycleSleepAction", true, Beta),
    spec("PodLifecycleSleepActionAllowZero", true, Beta),
    spec("PodLogsQuerySplitStreams", false, Alpha),
    // 1.34's default (beta): rkubelet reports observedGeneration as the 1.34 kubelet does.
    spec("PodObservedGenerationTracking", true, Beta),
    spec("PodReadyToStartContainersCondition", true, Beta),
    locked("PodSchedulingReadiness", true, Ga),
    spec("PodTopologyLabelsAdmission", false, Alpha),
    spec("PortForwardWebsockets", true, Beta),
    spec("PreferSameTrafficDistribution", false, Alpha),
    spec("ProcMountType", true, Beta),
    spec("QOSReserved", false, Alpha),
    spec("RecoverVolumeExpansionFailure", true, Beta),
    locked("RecursiveReadOnlyMounts", true, Ga),
    spec("ReduceDefaultCrashLoopBackOffDecay", false, Alpha),
    spec("RelaxedDNSSearchValidation", true, Beta),
    spec("RelaxedEnvironmentVariableValidation", true, Beta),
    spec("ReloadKubeletServerCertificateFile", true, Beta),
    spec("RemoteRequestHeaderUID", true, Beta),
    spec("ResilientWatchCacheInitialization", true, Beta),
    spec("ResourceHealthStatus", false, Alpha),
    locked("RetryGenerateName", true, Ga),
    spec("RotateKubeletServerCertificate", true, Beta),
    spec("RuntimeClassInImageCriAPI", false, Alpha),
    spec("SchedulerAsyncPreemption", true, Beta),
    spec("SchedulerPopFromBackoffQ", true, Beta),
    spec("SchedulerQueueingHints", true, Beta),
    spec("SELinuxChangePolicy", true, Beta),
    spec("SELinuxMount", false, Beta),
    spec("SELinuxMountReadWriteOncePod", true, Beta),
    spec("SeparateCacheWatchRPC", false, Deprecated),
    spec("SeparateTaintEvictionController", true, Beta),
    spec("ServiceAccountNodeAudienceRestriction", true, Beta),
    locked("ServiceAccountTokenJTI", true, Ga),
    locked("ServiceAccountTokenNodeBinding", true, Ga),
    locked("ServiceAccountTokenNodeBindingValidation", true, Ga),
    locked("ServiceAccountTokenPodNodeInfo", true, Ga),
    locked("ServiceTrafficDistribution", true, Ga),
    locked("SidecarContainers", true, Ga),
    locked("SizeMemoryBackedVolumes", true, Ga),
    locked("StatefulSetAutoDeletePVC", true, Ga),
    locked("StatefulSetStartOrdinal", true, Ga),
    spec("StorageCapacityScoring", false, Alpha),
    spec("StorageNamespaceIndex", true, Deprecated),
    spec("StorageVersionAPI", false, Alpha),
    spec("StorageVersionHash", true, Beta),
    spec("StorageVersionMigrator", false, Alpha),
    spec("StreamingCollectionEncodingToJSON", true, Beta),
    spec("StreamingCollectionEncodingToProtobuf", true, Beta),
    locked("StrictCostEnforcementForVAP", true, Ga),
    locked("StrictCostEnforcementForWebhooks", true, Ga),
    spec("StrictIPCIDRValidation", false, Alpha),
    spec("StructuredAuthenticationConfiguration", true, Beta),
    locked("StructuredAuthorizationConfiguration", true, Ga),
    spec("SupplementalGroupsPolicy", true, Beta),
    spec("SystemdWatchdog", true, Beta),
    locked("TopologyAwareHints", true, Ga),
    spec("TopologyManagerPolicyAlphaOptions", false, Alpha),
    spec("TopologyManagerPolicyBetaOptions", true, Beta),
    spec("TopologyManagerPolicyOptions", true, Ga),
    spec("TranslateStreamCloseWebsocketRequests", true, Beta),
    spec("UnauthenticatedHTTP2DOSMitigation", true, Beta),
    spec("UnknownVersionInteroperabilityProxy", false, Alpha),
    spec("UserNamespacesPodSecurityStandards", false, Alpha),
    spec("UserNamespacesSupport", true, Beta),
    spec("VolumeAttributesClass", false, Beta),
    spec("WatchCacheInitializationPostStartHook", false, Beta),
    locked("WatchFromStorageWithoutResourceVersion", false, Deprecated),
    spec("WatchList", true, Beta),
    spec("WatchListClient", false, Beta),
    spec("WindowsCPUAndMemoryAffinity", false, Alpha),
    spec("WindowsGracefulNodeShutdown", false, Alpha),
    spec("WindowsHostNetwork", false, Deprecated),
    spec("WinDSR", true, Beta),
    spec("WinOverlay", true, Beta),
];

/// Upstream's special keys: set every unlocked alpha (beta) gate not named explicitly.
pub const ALL_ALPHA: &str = "AllAlpha";
pub const ALL_BETA: &str = "AllBeta";

/// The gates the kubelet's own code consults. Each names an entry of [`GATES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    CustomCpuCfsQuotaPeriod,
    DisableCpuQuotaWithExclusiveCpus,
    DisableNodeKubeProxyVersion,
    EventedPleg,
    GracefulNodeShutdown,
    GracefulNodeShutdownBasedOnPodPriority,
    ImageMaximumGcAge,
    InPlacePodVerticalScaling,
    KubeletCgroupDriverFromCri,
    KubeletCrashLoopBackOffMax,
    KubeletEnsureSecretPulledImages,
    KubeletPodResourcesGet,
    KubeletTracing,
    NodeLogQuery,
    NodeSwap,
    PodObservedGenerationTracking,
    RecursiveReadOnlyMounts,
    RotateKubeletServerCertificate,
    SidecarContainers,
    SystemdWatchdog,
    UserNamespacesSupport,
}

impl Feature {
    /// Every variant, for tests and docs.
    pub const ALL: &[Feature] = &[
        Feature::CustomCpuCfsQuotaPeriod,
        Feature::DisableCpuQuotaWithExclusiveCpus,
        Feature::DisableNodeKubeProxyVersion,
        Feature::EventedPleg,
        Feature::GracefulNodeShutdown,
        Feature::GracefulNodeShutdownBasedOnPodPriority,
        Feature::ImageMaximumGcAge,
        Feature::InPlacePodVerticalScaling,
        Feature::KubeletCgroupDriverFromCri,
        Feature::KubeletCrashLoopBackOffMax,
        Feature::KubeletEnsureSecretPulledImages,
        Feature::KubeletPodResourcesGet,
        Feature::KubeletTracing,
        Feature::NodeLogQuery,
        Feature::NodeSwap,
        Feature::PodObservedGenerationTracking,
        Feature::RecursiveReadOnlyMounts,
        Feature::RotateKubeletServerCertificate,
        Feature::SidecarContainers,
        Feature::SystemdWatchdog,
        Feature::UserNamespacesSupport,
    ];

    /// The upstream gate name.
    pub const fn name(self) -> &'static str {
        match self {
            Feature::CustomCpuCfsQuotaPeriod => "CustomCPUCFSQuotaPeriod",
            Feature::DisableCpuQuotaWithExclusiveCpus => "DisableCPUQuotaWithExclusiveCPUs",
            Feature::DisableNodeKubeProxyVersion => "DisableNodeKubeProxyVersion",
            Feature::EventedPleg => "EventedPLEG",
            Feature::GracefulNodeShutdown => "GracefulNodeShutdown",
            Feature::GracefulNodeShutdownBasedOnPodPriority => {
                "GracefulNodeShutdownBasedOnPodPriority"
            }
            Feature::ImageMaximumGcAge => "ImageMaximumGCAge",
            Feature::InPlacePodVerticalScaling => "InPlacePodVerticalScaling",
            Feature::KubeletCgroupDriverFromCri => "KubeletCgroupDriverFromCRI",
            Feature::KubeletCrashLoopBackOffMax => "KubeletCrashLoopBackOffMax",
            Feature::KubeletEnsureSecretPulledImages => "KubeletEnsureSecretPulledImages",
            Feature::KubeletPodResourcesGet => "KubeletPodResourcesGet",
            Feature::KubeletTracing => "KubeletTracing",
            Feature::NodeLogQuery => "NodeLogQuery",
            Feature::NodeSwap => "NodeSwap",
            Feature::PodObservedGenerationTracking => "PodObservedGenerationTracking",
            Feature::RecursiveReadOnlyMounts => "RecursiveReadOnlyMounts",
            Feature::RotateKubeletServerCertificate => "RotateKubeletServerCertificate",
            Feature::SidecarContainers => "SidecarContainers",
            Feature::SystemdWatchdog => "SystemdWatchdog",
            Feature::UserNamespacesSupport => "UserNamespacesSupport",
        }
    }
}

/// How rkubelet treats a registered gate (see [`SUPPORT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateSupport {
    /// rkubelet does what the gate asks, on or off: its code consults the gate, or has the
    /// behaviour the gate's on value asks for and validation refuses the off value.
    Honoured,
    /// rkubelet always behaves as with the gate on: while it is off, a start-up warning says
    /// what rkubelet does anyway.
    AlwaysOn(&'static str),
    /// Upstream's kubelet binary registers the gate, but only another component (API server,
    /// controllers, scheduler, kube-proxy, client libraries) acts on it: nothing to do here.
    NotKubelet,
    /// Upstream's kubelet acts on the gate only through a part of it that rkubelet refuses
    /// at validation or does not have at all (the note says which), so it changes nothing.
    NoEffect(&'static str),
    /// Not implemented: while the gate is on (by default or set), a start-up warning names it
    /// and says what happens instead.
    Warned(&'static str),
    /// Not implemented, and running as if it were would silently drop what pods ask for:
    /// turning the gate on stops start-up.
    Refused(&'static str),
}

use GateSupport::{AlwaysOn, Honoured, NoEffect, NotKubelet, Refused, Warned};

/// What a gate that is on and absent from [`SUPPORT`] draws (only gates off by default can be
/// absent: a test checks that every gate on by default is classified).
pub const UNCLASSIFIED: &str = "rkubelet does not act on it";

/// The classification of the gates (every gate on by default in 1.33, and the gates off by
/// default that rkubelet acts on or knows it does not implement). Sorted like [`GATES`].
pub const SUPPORT: &[(&str, GateSupport)] = &[
    ("AggregatedDiscoveryRemoveBetaType", NotKubelet),
    (
        "AllowParsingUserUIDFromCertAuth",
        Warned(
            "the UID attribute of a client certificate is not read by the kubelet's x509 authenticator",
        ),
    ),
    ("AnonymousAuthConfigurableEndpoints", NotKubelet),
    ("AnyVolumeDataSource", NotKubelet),
    ("APIResponseCompression", NotKubelet),
    ("APIServerIdentity", NotKubelet),
    ("APIServerTracing", NotKubelet),
    ("AuthorizeNodeWithSelectors", NotKubelet),
    ("AuthorizeWithSelectors", NotKubelet),
    ("BtreeWatchCache", NotKubelet),
    ("ConsistentListFromCache", NotKubelet),
    ("ContainerCheckpoint", Honoured),
    (
        "ContainerStopSignals",
        Warned("lifecycle.stopSignal is not passed to the runtime"),
    ),
    (
        "ContextualLogging",
        NoEffect("log lines carry no klog contextual keys to turn on"),
    ),
    (
        "CPUManagerPolicyBetaOptions",
        NoEffect("every cpuManagerPolicyOptions option is refused at validation"),
    ),
    (
        "CPUManagerPolicyOptions",
        NoEffect("every cpuManagerPolicyOptions option is refused at validation"),
    ),
    ("CRDValidationRatcheting", NotKubelet),
    ("CronJobsScheduledAnnotation", NotKubelet),
    (
        "CSIMigrationPortworx",
        NoEffect("rkubelet has no in-tree or CSI Portworx volume plugin"),
    ),
    ("CustomCPUCFSQuotaPeriod", Honoured),
    ("CustomResourceFieldSelectors", NotKubelet),
    ("DeclarativeValidation", NotKubelet),
    (
        "DevicePluginCDIDevices",
        NoEffect("rkubelet has no device plugin manager"),
    ),
    ("DisableCPUQuotaWithExclusiveCPUs", Honoured),
    ("DisableNodeKubeProxyVersion", Honoured),
    ("DRAResourceClaimDeviceStatus", NotKubelet),
    ("ElasticIndexedJob", NotKubelet),
    ("EventedPLEG", Honoured),
    (
        "ExecProbeTimeout",
        AlwaysOn("exec probes always time out after timeoutSeconds"),
    ),
    ("GracefulNodeShutdown", Honoured),
    ("GracefulNodeShutdownBasedOnPodPriority", Honoured),
    ("HonorPVReclaimPolicy", NotKubelet),
    ("ImageMaximumGCAge", Honoured),
    ("ImageVolume", Warned("image volumes are not mounted")),
    ("InPlacePodVerticalScaling", Honoured),
    ("JobBackoffLimitPerIndex", NotKubelet),
    ("JobManagedBy", NotKubelet),
    ("JobPodReplacementPolicy", NotKubelet),
    ("JobSuccessPolicy", NotKubelet),
    ("KubeletCgroupDriverFromCRI", Honoured),
    ("KubeletCrashLoopBackOffMax", Honoured),
    (
        "KubeletEnsureSecretPulledImages",
        Warned("pulled images are not re-verified against pull secrets"),
    ),
    ("KubeletFineGrainedAuthz", Honoured),
    (
        "KubeletInUserNamespace",
        Warned("the kubelet does not adapt to running in a user namespace"),
    ),
    (
        "KubeletPodResourcesDynamicResources",
        Warned("rkubelet serves no pod-resources gRPC API"),
    ),
    (
        "KubeletPodResourcesGet",
        Warned("rkubelet serves no pod-resources gRPC API"),
    ),
    ("KubeletPSI", Warned("no PSI metrics are reported")),
    (
        "KubeletSeparateDiskGC",
        Warned(
            "a separate container filesystem is neither garbage-collected nor watched for eviction on its own",
        ),
    ),
    ("KubeletTracing", Honoured),
    ("LoadBalancerIPMode", NotKubelet),
    ("LogarithmicScaleDown", NotKubelet),
    (
        "LoggingBetaOptions",
        NoEffect("logging options are checked field by field by the configuration table"),
    ),
    ("MatchLabelKeysInPodAffinity", NotKubelet),
    ("MatchLabelKeysInPodTopologySpread", NotKubelet),
    (
        "MemoryManager",
        NoEffect("memoryManagerPolicy Static is refused at validation"),
    ),
    ("MemoryQoS", Warned("memory.high is not set for containers")),
    ("MultiCIDRServiceAllocator", NotKubelet),
    ("NFTablesProxyMode", NotKubelet),
    ("NodeInclusionPolicyInPodTopologySpread", NotKubelet),
    ("NodeLogQuery", Honoured),
    ("NodeSwap", Honoured),
    ("OpenAPIEnums", NotKubelet),
    ("OrderedNamespaceDeletion", NotKubelet),
    ("PodDeletionCost", NotKubelet),
    ("PodDisruptionConditions", Honoured),
    ("PodIndexLabel", NotKubelet),
    (
        "PodLevelResources",
        Refused("pod-level resources (spec.resources) are not applied to the pod cgroup"),
    ),
    ("PodLifecycleSleepAction", Honoured),
    ("PodLifecycleSleepActionAllowZero", Honoured),
    ("PodObservedGenerationTracking", Honoured),
    ("PodReadyToStartContainersCondition", Honoured),
    ("PodSchedulingReadiness", NotKubelet),
    (
        "PortForwardWebsockets",
        NoEffect(
            "port-forward streams are proxied to the runtime's streaming server, which speaks the protocols",
        ),
    ),
    ("ProcMountType", Honoured),
    (
        "RecoverVolumeExpansionFailure",
        NoEffect("rkubelet expands no volumes (no CSI)"),
    ),
    ("RecursiveReadOnlyMounts", Honoured),
    (
        "ReduceDefaultCrashLoopBackOffDecay",
        Warned("the crash-loop back-off keeps its 10s initial delay"),
    ),
    ("RelaxedDNSSearchValidation", NotKubelet),
    ("RelaxedEnvironmentVariableValidation", NotKubelet),
    ("ReloadKubeletServerCertificateFile", Honoured),
    ("RemoteRequestHeaderUID", NotKubelet),
    ("ResilientWatchCacheInitialization", NotKubelet),
    ("RetryGenerateName", NotKubelet),
    ("RotateKubeletServerCertificate", Honoured),
    ("SchedulerAsyncPreemption", NotKubelet),
    ("SchedulerPopFromBackoffQ", NotKubelet),
    ("SchedulerQueueingHints", NotKubelet),
    (
        "SELinuxChangePolicy",
        NoEffect(
            "only CSI volumes are mounted with an SELinux context option, and rkubelet mounts none",
        ),
    ),
    (
        "SELinuxMountReadWriteOncePod",
        NoEffect(
            "only CSI volumes are mounted with an SELinux context option, and rkubelet mounts none",
        ),
    ),
    ("SeparateTaintEvictionController", NotKubelet),
    ("ServiceAccountNodeAudienceRestriction", NotKubelet),
    ("ServiceAccountTokenJTI", NotKubelet),
    ("ServiceAccountTokenNodeBinding", NotKubelet),
    ("ServiceAccountTokenNodeBindingValidation", NotKubelet),
    ("ServiceAccountTokenPodNodeInfo", NotKubelet),
    ("ServiceTrafficDistribution", NotKubelet),
    ("SidecarContainers", Honoured),
    ("SizeMemoryBackedVolumes", Honoured),
    ("StatefulSetAutoDeletePVC", NotKubelet),
    ("StatefulSetStartOrdinal", NotKubelet),
    ("StorageNamespaceIndex", NotKubelet),
    ("StorageVersionHash", NotKubelet),
    ("StreamingCollectionEncodingToJSON", NotKubelet),
    ("StreamingCollectionEncodingToProtobuf", NotKubelet),
    ("StrictCostEnforcementForVAP", NotKubelet),
    ("StrictCostEnforcementForWebhooks", NotKubelet),
    ("StructuredAuthenticationConfiguration", NotKubelet),
    ("StructuredAuthorizationConfiguration", NotKubelet),
    ("SupplementalGroupsPolicy", Honoured),
    ("SystemdWatchdog", Honoured),
    ("TopologyAwareHints", NotKubelet),
    (
        "TopologyManagerPolicyBetaOptions",
        NoEffect("every topologyManagerPolicyOptions option is refused at validation"),
    ),
    (
        "TopologyManagerPolicyOptions",
        NoEffect("every topologyManagerPolicyOptions option is refused at validation"),
    ),
    ("TranslateStreamCloseWebsocketRequests", NotKubelet),
    ("UnauthenticatedHTTP2DOSMitigation", NotKubelet),
    ("UserNamespacesSupport", Honoured),
    ("WatchList", NotKubelet),
    ("WinDSR", NotKubelet),
    ("WinOverlay", NotKubelet),
];

/// The classification of gate `name` (`None`: unclassified, see [`UNCLASSIFIED`]).
pub fn support_of(name: &str) -> Option<GateSupport> {
    SUPPORT.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Errors of upstream's `SetFromMap` and the `mapStringBool` flag syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("unrecognized feature gate: {0}")]
    Unrecognized(String),
    #[error("cannot set feature gate {name} to {value}, feature is locked to {locked}")]
    Locked {
        name: String,
        value: bool,
        locked: bool,
    },
    #[error("malformed pair {0:?}, expect string=bool")]
    Malformed(String),
    #[error("invalid value of {name}: {value}, err: {message}")]
    InvalidValue {
        name: String,
        value: String,
        message: String,
    },
}

/// The registry entry named `name`.
pub fn lookup(name: &str) -> Option<&'static GateSpec> {
    GATES.iter().find(|g| g.name == name)
}

/// The effective gate values: registry defaults with the configured overrides applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureGates {
    overrides: BTreeMap<&'static str, bool>,
    all_alpha: bool,
    all_beta: bool,
}

impl FeatureGates {
    /// Upstream `SetFromMap`: every name must be registered, locked gates keep their default.
    /// Returns the gates and upstream's warnings (GA and deprecated gates set explicitly).
    pub fn from_map(map: &BTreeMap<String, bool>) -> Result<(Self, Vec<String>), FeatureGateError> {
        let mut gates = FeatureGates::default();
        let mut warnings = Vec::new();
        for (name, &value) in map {
            match name.as_str() {
                ALL_ALPHA => {
                    gates.all_alpha = value;
                    continue;
                }
                ALL_BETA => {
                    gates.all_beta = value;
                    continue;
                }
                _ => {}
            }
            let spec = lookup(name).ok_or_else(|| FeatureGateError::Unrecognized(name.clone()))?;
            if spec.locked && value != spec.default {
                return Err(FeatureGateError::Locked {
                    name: name.clone(),
                    value,
                    locked: spec.default,
                });
            }
            match spec.pre_release {
                Deprecated => warnings.push(format!(
                    "Setting deprecated feature gate {name}={value}. It will be removed in a future release."
                )),
                Ga => warnings.push(format!(
                    "Setting GA feature gate {name}={value}. It will be removed in a future release."
                )),
                Alpha | Beta => {}
            }
            gates.overrides.insert(spec.name, value);
        }
        Ok((gates, warnings))
    }

    /// Whether `feature` is on.
    pub fn enabled(&self, feature: Feature) -> bool {
        self.enabled_by_name(feature.name())
    }

    /// Whether the registered gate `name` is on (unknown names are off).
    pub fn enabled_by_name(&self, name: &str) -> bool {
        let Some(spec) = lookup(name) else {
            return false;
        };
        if let Some(v) = self.overrides.get(spec.name) {
            return *v;
        }
        match spec.pre_release {
            Alpha if self.all_alpha && !spec.locked => true,
            Beta if self.all_beta && !spec.locked => true,
            _ => spec.default,
        }
    }

    /// Registered gates whose effective value differs from their default.
    pub fn changed(&self) -> Vec<(&'static str, bool)> {
        GATES
            .iter()
            .filter(|g| self.enabled_by_name(g.name) != g.default)
            .map(|g| (g.name, !g.default))
            .collect()
    }

    /// Start-up warnings, one per gate, for every gate whose value rkubelet does not honour:
    /// a [`GateSupport::Warned`] or unclassified gate that is on (by default or set), and an
    /// [`GateSupport::AlwaysOn`] gate that is off. [`GateSupport::Refused`] gates are errors
    /// of validation instead ([`FeatureGates::refused`]).
    pub fn unhonoured_warnings(&self) -> Vec<String> {
        GATES
            .iter()
            .filter_map(|g| {
                let on = self.enabled_by_name(g.name);
                let how = if on == g.default { "by default" } else { "set" };
                match (support_of(g.name), on) {
                    (Some(Warned(instead)), true) => Some(format!(
                        "feature gate {}=true ({how}) is not implemented by rkubelet and has no effect: {instead}",
                        g.name
                    )),
                    (None, true) => Some(format!(
                        "feature gate {}=true ({how}) is not implemented by rkubelet and has no effect: {UNCLASSIFIED}",
                        g.name
                    )),
                    (Some(AlwaysOn(does)), false) => Some(format!(
                        "feature gate {}=false ({how}) is not honoured by rkubelet: {does}",
                        g.name
                    )),
                    _ => None,
                }
            })
            .collect()
    }

    /// Validation errors for [`GateSupport::Refused`] gates that are on.
    pub fn refused(&self) -> Vec<String> {
        SUPPORT
            .iter()
            .filter_map(|(name, support)| match support {
                Refused(what) if self.enabled_by_name(name) => Some(format!(
                    "featureGates.{name}=true is not implemented yet by rkubelet: {what}"
                )),
                _ => None,
            })
            .collect()
    }
}

/// Upstream `cliflag.MapStringBool` (`--feature-gates`): `A=true,B=false`; keys and values are
/// trimmed; values take Go's `strconv.ParseBool` spellings. An empty string is an empty map.
pub fn parse_feature_gates_flag(s: &str) -> Result<BTreeMap<String, bool>, FeatureGateError> {
    let mut out = BTreeMap::new();
    for pair in s.split(',') {
        if pair.is_empty() {
            continue;
        }
        let Some((k, v)) = pair.split_once('=') else {
            return Err(FeatureGateError::Malformed(pair.to_owned()));
        };
        let (k, v) = (k.trim(), v.trim());
        let value = match v {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            _ => {
                return Err(FeatureGateError::InvalidValue {
                    name: k.to_owned(),
                    value: v.to_owned(),
                    message: format!("strconv.ParseBool: parsing {v:?}: invalid syntax"),
                });
            }
        };
        out.insert(k.to_owned(), value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(pairs: &[(&str, bool)]) -> Result<(FeatureGates, Vec<String>), FeatureGateError> {
        FeatureGates::from_map(&pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect())
    }

    #[test]
    fn registry_names_are_unique_and_sorted_case_insensitively() {
        let names: Vec<String> = GATES.iter().map(|g| g.name.to_ascii_lowercase()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn every_typed_feature_is_registered() {
        for f in Feature::ALL {
            assert!(lookup(f.name()).is_some(), "{f:?}");
        }
        for (name, _) in SUPPORT {
            assert!(lookup(name).is_some(), "{name}");
        }
    }

    #[test]
    fn upstream_1_33_defaults() {
        let (g, _) = gates(&[]).unwrap();
        for (f, want) in [
            (Feature::InPlacePodVerticalScaling, true),
            (Feature::KubeletCrashLoopBackOffMax, false),
            (Feature::EventedPleg, false),
            (Feature::SidecarContainers, true),
            (Feature::PodObservedGenerationTracking, true),
            (Feature::KubeletPodResourcesGet, false),
            (Feature::RotateKubeletServerCertificate, true),
            (Feature::GracefulNodeShutdown, true),
            (Feature::ImageMaximumGcAge, true),
            (Feature::UserNamespacesSupport, true),
            (Feature::NodeSwap, true),
            (Feature::CustomCpuCfsQuotaPeriod, false),
            (Feature::DisableCpuQuotaWithExclusiveCpus, true),
            (Feature::DisableNodeKubeProxyVersion, true),
            (Feature::KubeletCgroupDriverFromCri, true),
            (Feature::RecursiveReadOnlyMounts, true),
            (Feature::SystemdWatchdog, true),
        ] {
            assert_eq!(g.enabled(f), want, "{f:?}");
        }
        assert!(g.changed().is_empty());
    }

    #[test]
    fn overrides_apply_and_unknown_names_fail_as_upstream() {
        let (g, w) = gates(&[("KubeletCrashLoopBackOffMax", true), ("NodeSwap", false)]).unwrap();
        assert!(g.enabled(Feature::KubeletCrashLoopBackOffMax));
        assert!(!g.enabled(Feature::NodeSwap));
        assert!(w.is_empty());
        assert_eq!(
            gates(&[("NoSuchGate", true)]).unwrap_err().to_string(),
            "unrecognized feature gate: NoSuchGate"
        );
    }

    #[test]
    fn locked_gates_refuse_other_values() {
        assert_eq!(
            gates(&[("SidecarContainers", false)])
                .unwrap_err()
                .to_string(),
            "cannot set feature gate SidecarContainers to false, feature is locked to true"
        );
        // Setting a locked gate to its default is accepted, with upstream's GA warning.
        let (_, w) = gates(&[("SidecarContainers", true)]).unwrap();
        assert_eq!(
            w,
            [
                "Setting GA feature gate SidecarContainers=true. It will be removed in a future release."
            ]
        );
        let (_, w) = gates(&[("KMSv1", true)]).unwrap();
        assert_eq!(
            w,
            ["Setting deprecated feature gate KMSv1=true. It will be removed in a future release."]
        );
    }

    #[test]
    fn all_alpha_and_all_beta_turn_on_unset_gates() {
        let (g, _) = gates(&[("AllAlpha", true), ("EventedPLEG", false)]).unwrap();
        assert!(g.enabled(Feature::KubeletCrashLoopBackOffMax));
        assert!(!g.enabled(Feature::EventedPleg), "explicit value wins");
        let (g, _) = gates(&[("AllBeta", true)]).unwrap();
        assert!(g.enabled(Feature::NodeLogQuery));
        assert!(!g.enabled(Feature::KubeletCrashLoopBackOffMax));
    }

    #[test]
    fn every_gate_on_by_default_is_classified() {
        let missing: Vec<&str> = GATES
            .iter()
            .filter(|g| g.default && support_of(g.name).is_none())
            .map(|g| g.name)
            .collect();
        assert!(
            missing.is_empty(),
            "unclassified gates on by default: {missing:?}"
        );
        let names: Vec<String> = SUPPORT
            .iter()
            .map(|(n, _)| n.to_ascii_lowercase())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "SUPPORT is sorted, without duplicates");
        // A gate refused when on must be off by default, or no node could start.
        for (name, support) in SUPPORT {
            if matches!(support, Refused(_)) {
                assert!(!lookup(name).unwrap().default, "{name}");
            }
        }
    }

    #[test]
    fn gates_the_code_consults_are_honoured_or_warned() {
        for f in Feature::ALL {
            assert!(
                matches!(support_of(f.name()), Some(Honoured | Warned(_))),
                "{f:?}: {:?}",
                support_of(f.name())
            );
        }
    }

    #[test]
    fn default_gates_warn_once_for_each_unhonoured_gate_on_by_default() {
        let (g, _) = gates(&[]).unwrap();
        let w = g.unhonoured_warnings();
        let want: Vec<&str> = SUPPORT
            .iter()
            .filter(|(n, s)| matches!(s, Warned(_)) && lookup(n).unwrap().default)
            .map(|(n, _)| *n)
            .collect();
        assert!(want.contains(&"KubeletSeparateDiskGC"), "{want:?}");
        assert_eq!(w.len(), want.len(), "{w:?}");
        for name in want {
            let prefix = format!("feature gate {name}=true (by default) is not implemented");
            assert_eq!(
                w.iter().filter(|l| l.starts_with(&prefix)).count(),
                1,
                "{name}: {w:?}"
            );
        }
        // The gates implemented in this round are not among them.
        for name in [
            "DisableCPUQuotaWithExclusiveCPUs",
            "SystemdWatchdog",
            "RecursiveReadOnlyMounts",
            "KubeletCgroupDriverFromCRI",
        ] {
            assert!(!w.iter().any(|l| l.contains(name)), "{name}: {w:?}");
        }
        assert!(g.refused().is_empty());
    }

    #[test]
    fn gates_set_on_or_off_warn_by_name() {
        let (g, _) = gates(&[
            ("MemoryQoS", true),
            ("InPlacePodVerticalScaling", true),
            ("EventedPLEG", true),
            ("ExecProbeTimeout", false),
            ("ClientsAllowCBOR", true),
            ("KubeletPSI", false),
        ])
        .unwrap();
        let w = g.unhonoured_warnings();
        let named = |n: &str| w.iter().filter(|l| l.contains(&format!(" {n}="))).count();
        assert_eq!(named("MemoryQoS"), 1, "{w:?}");
        assert!(
            w.iter().any(|l| l.starts_with(
                "feature gate MemoryQoS=true (set) is not implemented by rkubelet and has no effect: memory.high"
            )),
            "{w:?}"
        );
        assert_eq!(named("EventedPLEG"), 0, "EventedPLEG is implemented: {w:?}");
        assert_eq!(named("InPlacePodVerticalScaling"), 0, "{w:?}");
        assert!(
            w.contains(&"feature gate ExecProbeTimeout=false (set) is not honoured by rkubelet: exec probes always time out after timeoutSeconds".to_owned()),
            "{w:?}"
        );
        // An unclassified gate turned on is not silent either.
        assert_eq!(named("ClientsAllowCBOR"), 1, "{w:?}");
        assert_eq!(named("KubeletPSI"), 0, "off: nothing to warn about");
    }

    #[test]
    fn pod_level_resources_on_is_refused_by_name() {
        let (g, _) = gates(&[("PodLevelResources", true)]).unwrap();
        assert_eq!(
            g.refused(),
            [
                "featureGates.PodLevelResources=true is not implemented yet by rkubelet: pod-level resources (spec.resources) are not applied to the pod cgroup"
            ]
        );
        let (g, _) = gates(&[("AllAlpha", true)]).unwrap();
        assert_eq!(g.refused().len(), 1, "AllAlpha turns it on too");
        let (g, _) = gates(&[]).unwrap();
        assert!(g.refused().is_empty());
        assert!(
            !g.unhonoured_warnings()
                .iter()
                .any(|w| w.contains("PodLevelResources"))
        );
    }

    #[test]
    fn flag_syntax_is_map_string_bool() {
        let m = parse_feature_gates_flag(" A=true,B = false,,C=1").unwrap();
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            [("A".into(), true), ("B".into(), false), ("C".into(), true)]
        );
        assert!(parse_feature_gates_flag("").unwrap().is_empty());
        assert_eq!(
            parse_feature_gates_flag("A").unwrap_err().to_string(),
            "malformed pair \"A\", expect string=bool"
        );
        assert!(
            parse_feature_gates_flag("A=yes")
                .unwrap_err()
                .to_string()
                .starts_with("invalid value of A: yes")
        );
    }
}
