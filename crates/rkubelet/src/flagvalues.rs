//! Upstream flag value types the command line needs beyond Go's scalars, and pflag's wording.
//! Owns: the `--version` flag (component-base `verflag`: `true`, `false`, `raw`, or a version to
//! report), `--register-with-taints` (`utiltaints` syntax), and turning a parse failure into
//! the message the Go kubelet prints (`failed to parse kubelet flag: unknown flag: --x`).
//! Receives flag strings and clap errors; emits values for `cli` and message text for `main`.

use k8s_openapi::api::core::v1::Taint;
use kubelet::version::KUBERNETES_VERSION;

use crate::cli::parse_bool;

/// `--version`: upstream's `verflag` values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionFlag {
    /// `--version=false`: run.
    False,
    /// `--version`: print `Kubernetes vX.Y.Z` and quit.
    True,
    /// `--version=raw`: print the version structure and quit.
    Raw,
    /// `--version=vX.Y.Z-extra`: run, reporting this version.
    Set(String),
}

/// `--register-with-taints`: the whole list (a later occurrence replaces an earlier one).
#[derive(Debug, Clone, PartialEq)]
pub struct Taints(pub Vec<Taint>);

/// Upstream's message for a command line pflag refuses (`unknown flag: --x`, `invalid
/// argument "v" for "--x" flag: why`, `flag needs an argument: --x`), prefixed as the kubelet
/// prefixes it; `None` for `--help`, which is not an error.
pub fn flag_error(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    // clap names an argument as `--name <value_name>`; pflag as `--name` (`-v, --v` with a
    // shorthand).
    let flag_name = |arg: &str| {
        let name = arg.split([' ', '=']).next().unwrap_or(arg).to_owned();
        if name == "--v" {
            "-v, --v".to_owned()
        } else {
            name
        }
    };
    let message = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => return None,
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            match arg.strip_prefix('-') {
                Some(short) if !short.starts_with('-') => {
                    let c = short.chars().next().unwrap_or('-');
                    format!("unknown shorthand flag: '{c}' in {arg}")
                }
                _ => format!("unknown flag: {}", arg.split('=').next().unwrap_or(&arg)),
            }
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let arg = flag_name(&context(ContextKind::InvalidArg).unwrap_or_default());
            let value = context(ContextKind::InvalidValue).unwrap_or_default();
            match std::error::Error::source(e) {
                Some(why) => format!("invalid argument {value:?} for {arg:?} flag: {why}"),
                None if value.is_empty() => format!("flag needs an argument: {arg}"),
                None => format!("invalid argument {value:?} for {arg:?} flag"),
            }
        }
        _ => e
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned(),
    };
    Some(format!("failed to parse kubelet flag: {message}"))
}

/// What `--version` prints, if it asks for printing (upstream `PrintAndExitIfRequested`).
pub fn version_output(flag: Option<&VersionFlag>) -> Option<String> {
    match flag? {
        VersionFlag::True => Some(format!("Kubernetes {KUBERNETES_VERSION}")),
        VersionFlag::Raw => {
            let (major, minor) = kubelet::version::major_minor();
            let arch = match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                other => other,
            };
            Some(format!(
                "version.Info{{Major:\"{major}\", Minor:\"{minor}\", EmulationMajor:\"\", EmulationMinor:\"\", MinCompatibilityMajor:\"\", MinCompatibilityMinor:\"\", GitVersion:\"{KUBERNETES_VERSION}\", GitCommit:\"\", GitTreeState:\"\", BuildDate:\"\", GoVersion:\"\", Compiler:\"rustc\", Platform:\"{}/{arch}\"}}",
                std::env::consts::OS
            ))
        }
        VersionFlag::False | VersionFlag::Set(_) => None,
    }
}

/// `true`/`false` (Go booleans), `raw`, or a version that keeps [`KUBERNETES_VERSION`]'s
/// major, minor and patch numbers (upstream refuses to report another release).
pub(crate) fn parse_version_flag(s: &str) -> Result<VersionFlag, String> {
    if s == "raw" {
        return Ok(VersionFlag::Raw);
    }
    if s.starts_with('v') {
        let rest = s.strip_prefix(KUBERNETES_VERSION).ok_or_else(|| {
            format!("{s:?} must keep the major, minor and patch version of {KUBERNETES_VERSION}")
        })?;
        if !(rest.is_empty() || rest.starts_with(['-', '+'])) {
            return Err(format!(
                "{s:?} must keep the major, minor and patch version of {KUBERNETES_VERSION}"
            ));
        }
        return Ok(VersionFlag::Set(s.to_owned()));
    }
    Ok(if parse_bool(s)? {
        VersionFlag::True
    } else {
        VersionFlag::False
    })
}

/// Upstream `ParseTaints` for `--register-with-taints`: comma-separated `key[=value]:effect`
/// (or a bare key); an empty value clears the list.
pub(crate) fn parse_taints(s: &str) -> Result<Taints, String> {
    if s.is_empty() {
        return Ok(Taints(Vec::new()));
    }
    let mut taints: Vec<Taint> = Vec::new();
    for spec in s.split(',') {
        let invalid = |why: Vec<String>| {
            if why.is_empty() {
                format!("invalid taint spec: {spec}")
            } else {
                format!("invalid taint spec: {spec}, {}", why.join("; "))
            }
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let (key, value, effect) = match parts.as_slice() {
            [key] => ((*key).to_owned(), None, String::new()),
            [kv, effect] => {
                if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(effect) {
                    return Err(format!(
                        "invalid taint effect: {effect}, unsupported taint effect"
                    ));
                }
                let kv: Vec<&str> = kv.split('=').collect();
                match kv.as_slice() {
                    [key] => ((*key).to_owned(), None, (*effect).to_owned()),
                    [key, value] => {
                        let errs = kubelet::sources::names::is_valid_label_value(value);
                        if !errs.is_empty() {
                            return Err(invalid(errs));
                        }
                        (
                            (*key).to_owned(),
                            Some((*value).to_owned()),
                            (*effect).to_owned(),
                        )
                    }
                    _ => return Err(invalid(Vec::new())),
                }
            }
            _ => return Err(invalid(Vec::new())),
        };
        let errs = kubelet::sources::names::is_qualified_name(&key);
        if !errs.is_empty() {
            return Err(invalid(errs));
        }
        if taints.iter().any(|t| t.key == key && t.effect == effect) {
            return Err(format!(
                "duplicated taints with the same key and effect: {key}:{effect}"
            ));
        }
        taints.push(Taint {
            key,
            value: value.filter(|v| !v.is_empty()),
            effect,
            ..Default::default()
        });
    }
    Ok(Taints(taints))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Flags;
    use clap::Parser;

    fn parse(args: &[&str]) -> Flags {
        Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied())).unwrap()
    }

    fn parse_err(args: &[&str]) -> String {
        Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))
            .unwrap_err()
            .to_string()
    }

    fn flag_err(args: &[&str]) -> Option<String> {
        let e = Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))
            .unwrap_err();
        flag_error(&e)
    }

    #[test]
    fn flag_errors_read_like_upstreams() {
        assert_eq!(
            flag_err(&["--container-runtime=remote"]).unwrap(),
            "failed to parse kubelet flag: unknown flag: --container-runtime"
        );
        assert_eq!(
            flag_err(&["--v=2", "--no-such-flag", "x"]).unwrap(),
            "failed to parse kubelet flag: unknown flag: --no-such-flag"
        );
        assert_eq!(
            flag_err(&["-x"]).unwrap(),
            "failed to parse kubelet flag: unknown shorthand flag: 'x' in -x"
        );
        let e = flag_err(&["--sync-frequency=banana"]).unwrap();
        assert!(
            e.starts_with("failed to parse kubelet flag: invalid argument \"banana\" for \"--sync-frequency\" flag: \"banana\" is not a duration"),
            "{e}"
        );
        let e = flag_err(&["--v=loud"]).unwrap();
        assert!(
            e.contains("for \"-v, --v\" flag: \"loud\" is not a log level"),
            "{e}"
        );
        assert_eq!(
            flag_err(&["--config"]).unwrap(),
            "failed to parse kubelet flag: flag needs an argument: --config"
        );
        assert_eq!(flag_err(&["--help"]), None);
    }

    #[test]
    fn version_flag_prints_or_sets_the_reported_version() {
        let out = |args: &[&str]| version_output(parse(args).version.as_ref());
        assert_eq!(out(&["--version"]).as_deref(), Some("Kubernetes v1.33.0"));
        assert_eq!(
            out(&["--version=true"]).as_deref(),
            Some("Kubernetes v1.33.0")
        );
        let raw = out(&["--version=raw"]).unwrap();
        assert!(
            raw.starts_with("version.Info{Major:\"1\", Minor:\"33\", ")
                && raw.contains("GitVersion:\"v1.33.0\"")
                && raw.ends_with("\"}"),
            "{raw}"
        );
        assert_eq!(out(&["--version=false"]), None);
        assert_eq!(out(&[]), None);
        assert_eq!(
            out(&["--version=v1.33.0-rk.1"]),
            None,
            "setting it does not quit"
        );
        assert_eq!(
            parse(&["--version=v1.33.0-rk.1"]).version,
            Some(VersionFlag::Set("v1.33.0-rk.1".into()))
        );
        for bad in ["v1.34.0", "v1.33.01", "maybe"] {
            let err = parse_err(&[&format!("--version={bad}")]);
            assert!(err.contains("--version"), "{bad}: {err}");
        }
        assert!(
            parse_err(&["--version=v1.34.0"])
                .contains("must keep the major, minor and patch version of v1.33.0")
        );
    }
}
