//! CPU sets (upstream `k8s.io/utils/cpuset`): an ordered set of logical CPU ids with the Linux
//! list syntax (`0-3,5`) used by sysfs, cgroups, CRI `cpuset_cpus` and the checkpoint. Pure.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// A set of logical CPU ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<u32>);

/// A string that is not in the Linux CPU list syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cpuset {input:?}: {reason}")]
pub struct ParseCpuSetError {
    pub input: String,
    pub reason: String,
}

/// CPU ids at or above this are rejected: no Linux kernel supports that many CPUs (`NR_CPUS`
/// is at most 8192), and a range such as `0-4294967295` would otherwise expand into billions
/// of set entries (found by the `quantity` fuzz target).
pub const MAX_CPU_ID: u32 = 1 << 16;

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }

    /// CPU ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// Parses the Linux list syntax; the empty string (after trimming) is the empty set.
    pub fn parse(s: &str) -> Result<CpuSet, ParseCpuSetError> {
        let input = s.trim();
        let err = |reason: String| ParseCpuSetError {
            input: input.to_owned(),
            reason,
        };
        let mut set = BTreeSet::new();
        if input.is_empty() {
            return Ok(CpuSet(set));
        }
        for part in input.split(',') {
            let num = |n: &str| match n.parse::<u32>() {
                Ok(cpu) if cpu < MAX_CPU_ID => Ok(cpu),
                Ok(_) => Err(err(format!("CPU {n} is beyond {}", MAX_CPU_ID - 1))),
                Err(_) => Err(err(format!("{n:?} is not a CPU number"))),
            };
            match part.split_once('-') {
                None => {
                    set.insert(num(part)?);
                }
                Some((lo, hi)) => {
                    let (lo, hi) = (num(lo)?, num(hi)?);
                    if lo > hi {
                        return Err(err(format!("invalid range {part:?} ({lo} > {hi})")));
                    }
                    set.extend(lo..=hi);
                }
            }
        }
        Ok(CpuSet(set))
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

impl FromStr for CpuSet {
    type Err = ParseCpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse(s)
    }
}

/// Contiguous runs joined by commas: `0-2,4,6-7`; the empty set is `""`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        for (input, cpus, formatted) in [
            ("", vec![], ""),
            ("5", vec![5], "5"),
            ("0-3", vec![0, 1, 2, 3], "0-3"),
            ("0-3,5", vec![0, 1, 2, 3, 5], "0-3,5"),
            ("7,0-2,4", vec![0, 1, 2, 4, 7], "0-2,4,7"),
            ("1,2,3,8-9\n", vec![1, 2, 3, 8, 9], "1-3,8-9"),
            ("3-3", vec![3], "3"),
        ] {
            let set = CpuSet::parse(input).unwrap();
            assert_eq!(set.iter().collect::<Vec<_>>(), cpus, "{input:?}");
            assert_eq!(set.to_string(), formatted, "{input:?}");
            assert_eq!(CpuSet::parse(formatted).unwrap(), set);
        }
    }

    #[test]
    fn parse_errors_name_the_input() {
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1-2-3", "0x1"] {
            let err = CpuSet::parse(bad).unwrap_err();
            assert_eq!(err.input, bad);
            assert!(err.to_string().starts_with("invalid cpuset"), "{err}");
        }
    }

    #[test]
    fn huge_ranges_are_rejected_not_expanded() {
        // Fuzz reproducer (`quantity` target): this used to build a 2^31-entry set.
        let err = CpuSet::parse("0-2147483647,5,7-9").unwrap_err();
        assert!(err.reason.contains("beyond 65535"), "{err}");
        assert!(CpuSet::parse("0-4294967295").is_err());
        assert!(CpuSet::parse("65536").is_err());
        assert_eq!(CpuSet::parse("65535").unwrap().len(), 1);
        assert_eq!(CpuSet::parse("0-8191").unwrap().len(), 8192);
    }

    #[test]
    fn set_operations() {
        let a: CpuSet = [0, 1, 2, 3].into_iter().collect();
        let b: CpuSet = [2, 3, 4].into_iter().collect();
        assert_eq!(a.union(&b).to_string(), "0-4");
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert!(b.intersection(&a).is_subset(&a));
        assert!(!b.is_subset(&a));
    }
}
