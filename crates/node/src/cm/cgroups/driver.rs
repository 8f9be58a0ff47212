//! cm::cgroups::driver — the cgroup driver (`cgroupDriver`: upstream `cgroupCommon.Name` /
//! `CgroupName`): how the kubelet's cgroup names become paths on the cgroup filesystem and
//! names for the runtime. Receives a `CgroupName` (`[kubepods, burstable, pod<uid>]`); emits
//! the cgroupfs path (`/kubepods/burstable/pod<uid>`, or with systemd the expanded slice path
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`) and, with
//! systemd, the slice unit names. Pure; names that systemd cannot take are refused, never
//! silently changed into another pod's name.

use std::fmt;

use super::CgroupName;

/// `cgroupDriver`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CgroupDriver {
    /// The kubelet writes the cgroup filesystem itself.
    #[default]
    Cgroupfs,
    /// Cgroups are systemd slices created through systemd's D-Bus API.
    Systemd,
}

impl CgroupDriver {
    /// Parses the `cgroupDriver` setting.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cgroupfs" => Some(Self::Cgroupfs),
            "systemd" => Some(Self::Systemd),
            _ => None,
        }
    }

    /// Upstream `Name`: the cgroupfs form of `name` for this driver (what the runtime is handed
    /// as the cgroup parent and where stats are read).
    pub fn cgroupfs_path(self, name: &CgroupName) -> Result<String, NameError> {
        Ok(self.cgroupfs_name(name)?.to_cgroupfs())
    }

    /// The cgroupfs form as a `CgroupName` (one component per directory level).
    pub fn cgroupfs_name(self, name: &CgroupName) -> Result<CgroupName, NameError> {
        match self {
            Self::Cgroupfs => Ok(name.clone()),
            Self::Systemd => to_systemd(name),
        }
    }

    /// Upstream `CgroupName(string)`: parses a cgroupfs path given in the driver's form (the
    /// reserved cgroups `systemReservedCgroup: /system.slice`) into a kubelet cgroup name.
    pub fn parse_name(self, path: &str) -> CgroupName {
        match self {
            Self::Cgroupfs => CgroupName::from_path(path),
            Self::Systemd => parse_systemd(path),
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cgroupfs => "cgroupfs",
            Self::Systemd => "systemd",
        })
    }
}

/// A cgroup name systemd cannot represent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error(
        "cgroup name component {component:?} cannot become a systemd slice name: {reason} (systemd unit names allow ASCII letters, digits, ':', '-' and '.'; '_' is reserved for the escaped '-')"
    )]
    InvalidComponent {
        component: String,
        reason: &'static str,
    },
    #[error("systemd slice name {unit:?} is longer than systemd's {max} characters")]
    TooLong { unit: String, max: usize },
    #[error("invalid slice name {0:?}")]
    InvalidSlice(String),
}

/// systemd's `UNIT_NAME_MAX` (256) less the terminating NUL.
pub const UNIT_NAME_MAX: usize = 255;
const SLICE_SUFFIX: &str = ".slice";

/// The root slice.
pub const ROOT_SLICE: &str = "-.slice";

/// Upstream `escapeSystemdCgroupName` with the checks upstream makes by panicking
/// (`NewCgroupName` forbids `_` and `/`): `-` becomes `_`; anything systemd would refuse in a
/// unit name is an error.
fn escape_component(component: &str) -> Result<String, NameError> {
    let bad = |reason| NameError::InvalidComponent {
        component: component.to_owned(),
        reason,
    };
    if component.is_empty() {
        return Err(bad("empty"));
    }
    if component.contains('_') {
        // `_` is how `-` is escaped: a literal one would read back as a different name (a
        // pod's cgroup would be taken for another pod's, and destroyed as an orphan).
        return Err(bad("contains '_'"));
    }
    if component == "." || component == ".." {
        return Err(bad("is a relative path component"));
    }
    if !component
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':'))
    {
        return Err(bad("contains a character outside [A-Za-z0-9:.-]"));
    }
    Ok(component.replace('-', "_"))
}

/// The slice unit of `name`: components escaped and joined with `-`
/// (`[kubepods, burstable]` → `kubepods-burstable.slice`); the root is `-.slice`.
pub fn slice_unit(name: &CgroupName) -> Result<String, NameError> {
    if name.is_root() {
        return Ok(ROOT_SLICE.to_owned());
    }
    let parts = name
        .components()
        .iter()
        .map(|c| escape_component(c))
        .collect::<Result<Vec<_>, _>>()?;
    let unit = format!("{}{SLICE_SUFFIX}", parts.join("-"));
    if unit.len() > UNIT_NAME_MAX {
        return Err(NameError::TooLong {
            unit,
            max: UNIT_NAME_MAX,
        });
    }
    Ok(unit)
}

/// Upstream `CgroupName.ToSystemd`: the expanded cgroupfs path of the slice of `name`.
pub fn to_systemd(name: &CgroupName) -> Result<CgroupName, NameError> {
    let unit = slice_unit(name)?;
    expand_slice(&unit)
}

/// runc's `ExpandSlice`: `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice`, `-.slice` → `/`.
pub fn expand_slice(slice: &str) -> Result<CgroupName, NameError> {
    let invalid = || NameError::InvalidSlice(slice.to_owned());
    let stem = slice.strip_suffix(SLICE_SUFFIX).ok_or_else(invalid)?;
    if slice.contains('/') {
        return Err(invalid());
    }
    if stem == "-" {
        return Ok(CgroupName::root());
    }
    let mut levels = Vec::new();
    let mut prefix = String::new();
    for component in stem.split('-') {
        if component.is_empty() {
            return Err(invalid());
        }
        levels.push(format!("{prefix}{component}{SLICE_SUFFIX}"));
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(levels.iter().fold(CgroupName::root(), |n, l| n.child(l)))
}

/// Upstream `ParseSystemdToCgroupName`: the last path component, `.slice` dropped, split on
/// `-`, `_` unescaped to `-` (`/a.slice/a-b_c.slice` → `[a, b-c]`).
pub fn parse_systemd(path: &str) -> CgroupName {
    let base = path.rsplit('/').find(|c| !c.is_empty()).unwrap_or("");
    let base = base.strip_suffix(SLICE_SUFFIX).unwrap_or(base);
    if base.is_empty() || base == "-" {
        return CgroupName::root();
    }
    base.split('-')
        .fold(CgroupName::root(), |n, p| n.child(&p.replace('_', "-")))
}

/// The kubelet name of the child slice directory `dir` of the slice of `parent`, when `dir` is
/// exactly one level below it (`kubepods-burstable-pod1_2.slice` under `[kubepods, burstable]`
/// → `pod1-2`); anything else (a runtime's `.scope`, a foreign directory) is `None`.
pub fn child_of_slice(parent: &CgroupName, dir: &str) -> Option<String> {
    let stem = dir.strip_suffix(SLICE_SUFFIX)?;
    let rest = if parent.is_root() {
        stem
    } else {
        let parent_unit = slice_unit(parent).ok()?;
        let parent_stem = parent_unit.strip_suffix(SLICE_SUFFIX)?;
        stem.strip_prefix(parent_stem)?.strip_prefix('-')?
    };
    if rest.is_empty() || rest.contains('-') {
        return None;
    }
    Some(rest.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> CgroupName {
        parts.iter().fold(CgroupName::root(), |n, p| n.child(p))
    }

    /// Upstream `TestCgroupNameToSystemdBasename` and `TestCgroupNameToSystemd`.
    #[test]
    fn to_systemd_matches_upstream_tables() {
        let basename = [
            (name(&[]), "/"),
            (name(&["system"]), "system.slice"),
            (name(&["system", "Burstable"]), "system-Burstable.slice"),
            (name(&["Burstable", "pod-123"]), "Burstable-pod_123.slice"),
            (name(&["test", "a", "b"]), "test-a-b.slice"),
            (
                name(&["test", "a", "b", "Burstable"]),
                "test-a-b-Burstable.slice",
            ),
            (name(&["Burstable"]), "Burstable.slice"),
            (
                name(&["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"]),
                "BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
            ),
        ];
        for (input, want) in basename {
            let path = CgroupDriver::Systemd.cgroupfs_path(&input).unwrap();
            let base = path.rsplit('/').next().unwrap();
            let base = if base.is_empty() { "/" } else { base };
            assert_eq!(base, want, "{input}");
        }
        let full = [
            (name(&[]), "/"),
            (name(&["Burstable"]), "/Burstable.slice"),
            (
                name(&["Burstable", "pod-123"]),
                "/Burstable.slice/Burstable-pod_123.slice",
            ),
            (
                name(&["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"]),
                "/BestEffort.slice/BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
            ),
            (name(&["kubepods"]), "/kubepods.slice"),
            (
                name(&["kubepods", "burstable", "pod1234-abcd-5678-efgh"]),
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice",
            ),
        ];
        for (input, want) in full {
            assert_eq!(
                CgroupDriver::Systemd.cgroupfs_path(&input).unwrap(),
                want,
                "{input}"
            );
        }
        // Upstream `TestCgroupNameWithEmptyPartToSystemd`: empty parts vanish (from_path drops
        // them).
        assert_eq!(
            CgroupDriver::Systemd
                .cgroupfs_path(&CgroupName::from_path("/BestEffort//pod-6c1a/"))
                .unwrap(),
            "/BestEffort.slice/BestEffort-pod_6c1a.slice"
        );
        // The cgroupfs driver keeps the name (`TestCgroupNameToCgroupfs`).
        assert_eq!(
            CgroupDriver::Cgroupfs
                .cgroupfs_path(&name(&["Burstable"]))
                .unwrap(),
            "/Burstable"
        );
        assert_eq!(
            CgroupDriver::Cgroupfs.cgroupfs_path(&name(&[])).unwrap(),
            "/"
        );
    }

    /// Upstream `TestParseSystemdToCgroupName`, plus the round trip of a pod UID.
    #[test]
    fn parse_systemd_matches_upstream() {
        assert_eq!(parse_systemd("/test"), name(&["test"]));
        assert_eq!(parse_systemd("/test.slice"), name(&["test"]));
        assert_eq!(parse_systemd("/system.slice"), name(&["system"]));
        assert_eq!(parse_systemd("/"), name(&[]));
        assert_eq!(parse_systemd("-.slice"), name(&[]));
        let n = name(&["kubepods", "besteffort", "pod6c1a4e95-6bb6-11e6"]);
        assert_eq!(
            parse_systemd(&CgroupDriver::Systemd.cgroupfs_path(&n).unwrap()),
            n
        );
        assert_eq!(
            CgroupDriver::Systemd.parse_name("/system.slice"),
            name(&["system"])
        );
        assert_eq!(
            CgroupDriver::Cgroupfs.parse_name("/system.slice"),
            name(&["system.slice"])
        );
    }

    /// runc's `ExpandSlice` cases.
    #[test]
    fn expand_slice_cases() {
        let ok = [
            ("-.slice", "/"),
            ("system.slice", "/system.slice"),
            ("kubepods.slice", "/kubepods.slice"),
            (
                "kubepods-besteffort.slice",
                "/kubepods.slice/kubepods-besteffort.slice",
            ),
            (
                "kubepods-besteffort-podabc.slice",
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc.slice",
            ),
            ("test-a-b.slice", "/test.slice/test-a.slice/test-a-b.slice"),
        ];
        for (slice, want) in ok {
            assert_eq!(expand_slice(slice).unwrap().to_cgroupfs(), want, "{slice}");
        }
        for bad in [
            "",
            ".slice",
            "system.scope",
            "systemd.slice/child.slice",
            "systemd--child.slice",
            "-test.slice",
            "test-.slice",
        ] {
            assert!(expand_slice(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn children_of_a_slice_read_back_as_kubelet_names() {
        let qos = name(&["kubepods", "burstable"]);
        assert_eq!(
            child_of_slice(&qos, "kubepods-burstable-pod1a_2b.slice").as_deref(),
            Some("pod1a-2b")
        );
        // Not a direct child slice of this parent: ignored.
        for dir in [
            "kubepods-burstable.slice",
            "kubepods-besteffort-podx.slice",
            "kubepods-burstable-a-b.slice",
            "cri-containerd-abc.scope",
            "kubepods-burstable-.slice",
            "podx",
        ] {
            assert_eq!(child_of_slice(&qos, dir), None, "{dir}");
        }
        assert_eq!(
            child_of_slice(&name(&["kubepods"]), "kubepods-besteffort.slice").as_deref(),
            Some("besteffort")
        );
        assert_eq!(
            child_of_slice(&name(&[]), "kubepods.slice").as_deref(),
            Some("kubepods")
        );
    }

    /// Hostile names (a pod UID is a component) never become another unit or path: refused.
    #[test]
    fn injected_names_are_refused() {
        let qos = name(&["kubepods", "besteffort"]);
        for uid in [
            // Traversal and path separators.
            "../../../etc",
            "a/../../b",
            // Would read back as a different UID ("a-b") and be destroyed as an orphan.
            "a_b",
            // Unit-name syntax: another unit type, escapes, templates, whitespace, NUL, newline.
            "x.scope b",
            "x\\x2d",
            "x@y",
            "a\nb",
            "a\0b",
            "\u{e9}",
        ] {
            let n = qos.child(&format!("pod{uid}"));
            let err = CgroupDriver::Systemd.cgroupfs_path(&n).unwrap_err();
            assert!(
                matches!(err, NameError::InvalidComponent { .. }),
                "{uid:?}: {err}"
            );
            assert!(slice_unit(&n).is_err(), "{uid:?}");
        }
        // A name one character over systemd's unit name limit.
        let long = qos.child(&format!("pod{}", "a".repeat(UNIT_NAME_MAX)));
        assert!(matches!(slice_unit(&long), Err(NameError::TooLong { .. })));
        // A UID that spells a slice suffix or dots stays one component of one slice.
        let n = qos.child("podx.slice");
        assert_eq!(
            CgroupDriver::Systemd.cgroupfs_path(&n).unwrap(),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice.slice"
        );
        let n = qos.child("pod..");
        assert_eq!(
            CgroupDriver::Systemd.cgroupfs_path(&n).unwrap(),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod...slice"
        );
        // A bare relative component is refused.
        assert!(
            CgroupDriver::Systemd
                .cgroupfs_path(&qos.child(".."))
                .is_err()
        );
    }
}
