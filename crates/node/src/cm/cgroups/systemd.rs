//! cm::cgroups::systemd — the systemd cgroup driver (upstream `cgroupDriver: systemd`, runc's
//! systemd cgroup managers `LegacyManager` (v1) and `UnifiedManager` (v2)). Receives kubelet
//! cgroup names and settings; makes each cgroup a transient slice through systemd
//! (`StartTransientUnit` with `Wants=` its parent slice, accounting on,
//! `DefaultDependencies=no`), sets limits as unit properties (`SetUnitProperties`:
//! `CPUShares`/`CPUWeight`, `CPUQuotaPerSecUSec`/`CPUQuotaPeriodUSec`,
//! `MemoryLimit`/`MemoryMax`, `TasksMax`) and then, as runc does, writes the same values to the
//! cgroup filesystem at the expanded slice path through the v1/v2 `CgroupFs` it wraps (huge
//! pages and the cpusets systemd does not manage). Removal stops the unit. Blocking like every
//! `CgroupFs`: the D-Bus calls run on the runtime handle captured at connection, so the methods
//! must be called off the async workers (`spawn_blocking`), as every caller does.

use std::sync::Arc;

use super::driver::{self, CgroupDriver, child_of_slice, slice_unit};
use super::systemd_dbus::{PropValue, Property, SystemdClient, SystemdError};
use super::{
    CgroupError, CgroupFs, CgroupName, CgroupVersion, ResourceConfig, Result, kill_all,
    shares_to_weight,
};

/// The kernel's default CFS period (µs), which systemd assumes when none is set.
const DEFAULT_CPU_PERIOD: u64 = 100_000;
/// systemd's `USEC_INFINITY`.
const INFINITY: u64 = u64::MAX;

pub struct SystemdCgroupFs {
    inner: Arc<dyn CgroupFs>,
    client: SystemdClient,
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for SystemdCgroupFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemdCgroupFs")
            .field("inner", &self.inner)
            .field("bus", &self.client.address())
            .finish()
    }
}

impl SystemdCgroupFs {
    /// Connects to systemd at `address` (`None`: the system bus) over the cgroup filesystem
    /// `inner`. Must run inside the tokio runtime the D-Bus calls will use.
    pub async fn connect(
        inner: Arc<dyn CgroupFs>,
        address: Option<&str>,
    ) -> std::result::Result<Self, SystemdError> {
        let client = SystemdClient::connect(address).await?;
        Ok(Self {
            inner,
            client,
            rt: tokio::runtime::Handle::current(),
        })
    }

    fn expanded(&self, name: &CgroupName) -> Result<CgroupName> {
        driver::to_systemd(name).map_err(|source| name_err(name, source))
    }

    fn unit(name: &CgroupName) -> Result<String> {
        slice_unit(name).map_err(|source| name_err(name, source))
    }

    fn systemd_err(name: &CgroupName) -> impl FnOnce(SystemdError) -> CgroupError {
        let cgroup = name.to_string();
        move |e| CgroupError::Systemd {
            cgroup,
            source: Box::new(e),
        }
    }
}

fn name_err(name: &CgroupName, source: driver::NameError) -> CgroupError {
    CgroupError::Name {
        cgroup: name.to_string(),
        source,
    }
}

/// runc's `Apply(-1)` properties for a slice: its description, `Wants=` the parent slice,
/// accounting on (block I/O on v1, I/O on v2), no default dependencies.
pub fn slice_start_properties(unit: &str, parent: &str, version: CgroupVersion) -> Vec<Property> {
    let io = match version {
        CgroupVersion::V1 => "BlockIOAccounting",
        CgroupVersion::V2 => "IOAccounting",
    };
    vec![
        Property::new(
            "Description",
            PropValue::Str(format!("libcontainer container {unit}")),
        ),
        Property::new("Wants", PropValue::Strs(vec![parent.to_owned()])),
        Property::new("MemoryAccounting", PropValue::Bool(true)),
        Property::new("CPUAccounting", PropValue::Bool(true)),
        Property::new(io, PropValue::Bool(true)),
        Property::new("TasksAccounting", PropValue::Bool(true)),
        Property::new("DefaultDependencies", PropValue::Bool(false)),
    ]
}

/// runc's `genV1ResourcesProperties` / `genV2ResourcesProperties` for the settings the kubelet
/// uses. The CPU quota is rounded up to what systemd can express (1 % of a CPU), and `r` is
/// updated so the cgroupfs write that follows matches what systemd applies.
pub fn resource_properties(
    version: CgroupVersion,
    r: &mut ResourceConfig,
    systemd_version: Option<u32>,
) -> Vec<Property> {
    let mut props = Vec::new();
    let as_u64 = |v: i64| u64::try_from(v).unwrap_or(INFINITY);
    if let Some(m) = r.memory.filter(|m| *m != 0) {
        let name = match version {
            CgroupVersion::V1 => "MemoryLimit",
            CgroupVersion::V2 => "MemoryMax",
        };
        props.push(Property::new(name, PropValue::U64(as_u64(m))));
    }
    if let Some(shares) = r.cpu_shares.filter(|s| *s != 0) {
        props.push(match version {
            CgroupVersion::V1 => Property::new("CPUShares", PropValue::U64(shares)),
            CgroupVersion::V2 => Property::new(
                "CPUWeight",
                PropValue::U64(shares_to_weight(shares).min(10_000)),
            ),
        });
    }
    add_cpu_quota(&mut props, r, systemd_version);
    match r.pids_limit {
        Some(p) if p > 0 => props.push(Property::new("TasksMax", PropValue::U64(as_u64(p)))),
        Some(-1) => props.push(Property::new("TasksMax", PropValue::U64(INFINITY))),
        _ => {}
    }
    props
}

/// runc's `addCPUQuota`.
fn add_cpu_quota(props: &mut Vec<Property>, r: &mut ResourceConfig, systemd_version: Option<u32>) {
    let period = r.cpu_period.unwrap_or(0);
    let quota = r.cpu_quota.unwrap_or(0);
    // systemd knows CPUQuotaPeriodUSec since v242.
    if period != 0 && systemd_version.is_some_and(|v| v >= 242) {
        props.push(Property::new("CPUQuotaPeriodUSec", PropValue::U64(period)));
    }
    if quota == 0 && period == 0 {
        return;
    }
    let mut per_sec = INFINITY;
    if let Ok(q) = u64::try_from(quota)
        && q > 0
    {
        let p = if period == 0 {
            DEFAULT_CPU_PERIOD
        } else {
            period
        };
        per_sec = q.saturating_mul(1_000_000) / p;
        if !per_sec.is_multiple_of(10_000) {
            per_sec = (per_sec / 10_000 + 1) * 10_000;
            r.cpu_quota = i64::try_from(per_sec.saturating_mul(p) / 1_000_000).ok();
        }
    }
    props.push(Property::new("CPUQuotaPerSecUSec", PropValue::U64(per_sec)));
}

impl CgroupFs for SystemdCgroupFs {
    fn version(&self) -> CgroupVersion {
        self.inner.version()
    }

    fn driver(&self) -> CgroupDriver {
        CgroupDriver::Systemd
    }

    fn exists(&self, name: &CgroupName) -> bool {
        self.expanded(name).is_ok_and(|e| self.inner.exists(&e))
    }

    /// runc `Apply(-1)` then `Set`: the slice through systemd, the directories in every
    /// hierarchy (systemd only creates those it manages), then the settings.
    fn create(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        let expanded = self.expanded(name)?;
        let unit = Self::unit(name)?;
        let parent = Self::unit(&name.parent())?;
        let props = slice_start_properties(&unit, &parent, self.version());
        self.rt
            .block_on(self.client.start_slice(&unit, &props))
            .map_err(Self::systemd_err(name))?;
        self.inner.create(&expanded, &ResourceConfig::default())?;
        self.update(name, resources)
    }

    fn update(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        let expanded = self.expanded(name)?;
        let unit = Self::unit(name)?;
        let mut r = resources.clone();
        let props = resource_properties(self.version(), &mut r, self.client.version());
        if !props.is_empty() {
            self.rt
                .block_on(self.client.set_properties(&unit, &props))
                .map_err(Self::systemd_err(name))?;
        }
        self.inner.update(&expanded, &r)
    }

    /// Upstream pod cgroup `Destroy`: processes killed first, then the unit stopped, then
    /// whatever directories are left removed (runc does both).
    fn destroy(&self, name: &CgroupName) -> Result<()> {
        let expanded = self.expanded(name)?;
        let unit = Self::unit(name)?;
        kill_all(name, || self.inner.pids(&expanded).unwrap_or_default())?;
        let stopped = self.rt.block_on(self.client.stop_unit(&unit));
        self.inner.destroy(&expanded)?;
        stopped.map_err(Self::systemd_err(name))
    }

    /// The kubelet names of the child slices (`kubepods-burstable-pod1_2.slice` → `pod1-2`);
    /// other directories (a runtime's scopes) are not kubelet cgroups.
    fn children(&self, name: &CgroupName) -> Result<Vec<String>> {
        let expanded = self.expanded(name)?;
        Ok(self
            .inner
            .children(&expanded)?
            .iter()
            .filter_map(|dir| child_of_slice(name, dir))
            .collect())
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>> {
        let expanded = self.expanded(name)?;
        self.inner.pids(&expanded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(props: &[Property], name: &str) -> Option<PropValue> {
        props
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value.clone())
    }

    /// runc's `TestAddCPUQuota` table.
    #[test]
    fn cpu_quota_rounds_up_as_runc() {
        for (quota, period, per_sec, want_quota) in [
            (500_000, 1_000_000, 500_000, 500_000),
            (123_456, 0, 1_240_000, 124_000),
            (500_000, 900_000, 560_000, 504_000),
        ] {
            let mut r = ResourceConfig {
                cpu_quota: Some(quota),
                cpu_period: (period != 0).then_some(period),
                ..Default::default()
            };
            let props = resource_properties(CgroupVersion::V1, &mut r, Some(252));
            assert_eq!(
                value(&props, "CPUQuotaPerSecUSec"),
                Some(PropValue::U64(per_sec)),
                "quota {quota} period {period}"
            );
            assert_eq!(r.cpu_quota, Some(want_quota));
        }
        // Unlimited quota with a period: infinity; an old systemd gets no period property.
        let mut r = ResourceConfig {
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            ..Default::default()
        };
        let props = resource_properties(CgroupVersion::V2, &mut r, Some(241));
        assert_eq!(
            value(&props, "CPUQuotaPerSecUSec"),
            Some(PropValue::U64(u64::MAX))
        );
        assert_eq!(value(&props, "CPUQuotaPeriodUSec"), None);
        let props = resource_properties(CgroupVersion::V2, &mut r, Some(242));
        assert_eq!(
            value(&props, "CPUQuotaPeriodUSec"),
            Some(PropValue::U64(100_000))
        );
    }

    #[test]
    fn v1_and_v2_property_names() {
        let r = ResourceConfig {
            cpu_shares: Some(1024),
            memory: Some(64 << 20),
            pids_limit: Some(-1),
            ..Default::default()
        };
        let v1 = resource_properties(CgroupVersion::V1, &mut r.clone(), Some(252));
        assert_eq!(
            v1,
            vec![
                Property::new("MemoryLimit", PropValue::U64(64 << 20)),
                Property::new("CPUShares", PropValue::U64(1024)),
                Property::new("TasksMax", PropValue::U64(u64::MAX)),
            ]
        );
        let v2 = resource_properties(CgroupVersion::V2, &mut r.clone(), Some(252));
        assert_eq!(
            v2,
            vec![
                Property::new("MemoryMax", PropValue::U64(64 << 20)),
                Property::new("CPUWeight", PropValue::U64(39)),
                Property::new("TasksMax", PropValue::U64(u64::MAX)),
            ]
        );
        // Nothing set, nothing sent; pids 0 means "no limit set" as runc.
        let mut empty = ResourceConfig {
            pids_limit: Some(0),
            ..Default::default()
        };
        assert!(resource_properties(CgroupVersion::V2, &mut empty, None).is_empty());
        let start = slice_start_properties(
            "kubepods-burstable.slice",
            "kubepods.slice",
            CgroupVersion::V2,
        );
        assert_eq!(
            value(&start, "Wants"),
            Some(PropValue::Strs(vec!["kubepods.slice".to_owned()]))
        );
        assert_eq!(
            value(&start, "DefaultDependencies"),
            Some(PropValue::Bool(false))
        );
        assert_eq!(value(&start, "IOAccounting"), Some(PropValue::Bool(true)));
        let start_v1 = slice_start_properties("kubepods.slice", "-.slice", CgroupVersion::V1);
        assert_eq!(
            value(&start_v1, "BlockIOAccounting"),
            Some(PropValue::Bool(true))
        );
    }
}
