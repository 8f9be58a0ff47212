//! `CriError`: the one place where gRPC statuses from the runtime become domain errors (and, for
//! the fake server, back). Receives a `tonic::Status` plus call context (method, endpoint,
//! deadline); emits a `CriError` whose message always names the CRI method.

use std::fmt::Write as _;
use std::time::Duration;

/// An error from a CRI call. Every variant carries the CRI method name (e.g. `RunPodSandbox`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CriError {
    /// The object (sandbox, container, image) does not exist.
    #[error("CRI {method}: not found: {message}")]
    NotFound {
        method: &'static str,
        message: String,
    },
    #[error("CRI {method}: already exists: {message}")]
    AlreadyExists {
        method: &'static str,
        message: String,
    },
    #[error("CRI {method}: invalid argument: {message}")]
    InvalidArgument {
        method: &'static str,
        message: String,
    },
    /// The runtime does not implement this RPC (e.g. `GetContainerEvents` on containerd 1.6).
    #[error("CRI {method}: not implemented by the runtime: {message}")]
    Unimplemented {
        method: &'static str,
        message: String,
    },
    /// The call's deadline passed (client side), or the runtime reported `DeadlineExceeded`.
    #[error("CRI {method}: deadline exceeded{}", deadline_detail(timeout, message))]
    DeadlineExceeded {
        method: &'static str,
        /// The deadline this call had, if it had one.
        timeout: Option<Duration>,
        /// The runtime's message; empty when the client's own deadline fired.
        message: String,
    },
    /// The runtime cannot be reached (not running, socket missing, connection dropped).
    #[error("CRI {method}: runtime unavailable at {endpoint}: {message}")]
    Unavailable {
        method: &'static str,
        endpoint: String,
        message: String,
    },
    #[error("CRI {method}: failed precondition: {message}")]
    FailedPrecondition {
        method: &'static str,
        message: String,
    },
    /// Any other gRPC code (containerd reports most of its failures as `Unknown`).
    #[error("CRI {method}: {}: {message}", code_name(*code))]
    Other {
        method: &'static str,
        code: tonic::Code,
        message: String,
    },
    /// The runtime answered, but the answer misses a field the protocol requires
    /// (the same checks upstream's CRI client makes).
    #[error("CRI {method}: invalid response from runtime: {message}")]
    InvalidResponse {
        method: &'static str,
        message: String,
    },
    /// The configured endpoint cannot be used (unsupported scheme, empty path).
    #[error("CRI endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
}

/// `after 2m0s` when our own deadline fired; the runtime's message (and our deadline) when the
/// runtime reported the timeout (e.g. an `ExecSync` command's own timeout).
fn deadline_detail(timeout: &Option<Duration>, message: &str) -> String {
    match (timeout, message.is_empty()) {
        (Some(t), true) => format!(" after {}", go_duration(*t)),
        (None, true) => String::new(),
        (Some(t), false) => format!(": {message} (call deadline {})", go_duration(*t)),
        (None, false) => format!(": {message}"),
    }
}

impl CriError {
    /// Maps a gRPC status from `method` to a domain error. `endpoint` names the runtime socket
    /// (for `Unavailable`), `timeout` is the deadline the call had (for `DeadlineExceeded`).
    pub fn from_status(
        method: &'static str,
        endpoint: &str,
        timeout: Option<Duration>,
        status: &tonic::Status,
    ) -> Self {
        let message = status_message(status);
        match status.code() {
            tonic::Code::NotFound => Self::NotFound { method, message },
            tonic::Code::AlreadyExists => Self::AlreadyExists { method, message },
            tonic::Code::InvalidArgument => Self::InvalidArgument { method, message },
            tonic::Code::Unimplemented => Self::Unimplemented { method, message },
            tonic::Code::DeadlineExceeded => Self::DeadlineExceeded {
                method,
                timeout,
                message,
            },
            tonic::Code::Unavailable => Self::Unavailable {
                method,
                endpoint: endpoint.to_string(),
                message,
            },
            tonic::Code::FailedPrecondition => Self::FailedPrecondition { method, message },
            code => Self::Other {
                method,
                code,
                message,
            },
        }
    }

    /// The gRPC status a server would send for this error (used by the fake CRI server).
    pub fn to_status(&self) -> tonic::Status {
        tonic::Status::new(self.code(), self.message())
    }

    /// `NotFound` with `message`.
    pub fn not_found(method: &'static str, message: impl Into<String>) -> Self {
        Self::NotFound {
            method,
            message: message.into(),
        }
    }

    /// `Unimplemented` with `message`.
    pub fn unimplemented(method: &'static str, message: impl Into<String>) -> Self {
        Self::Unimplemented {
            method,
            message: message.into(),
        }
    }

    /// `Unavailable` for `endpoint` with `message`.
    pub fn unavailable(
        method: &'static str,
        endpoint: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Unavailable {
            method,
            endpoint: endpoint.into(),
            message: message.into(),
        }
    }

    /// `Other` with gRPC code `Unknown`: how containerd reports most failures.
    pub fn unknown(method: &'static str, message: impl Into<String>) -> Self {
        Self::Other {
            method,
            code: tonic::Code::Unknown,
            message: message.into(),
        }
    }

    /// The CRI method (RPC name) the error came from; `Connect` for connection setup.
    pub fn method(&self) -> &'static str {
        match self {
            Self::NotFound { method, .. }
            | Self::AlreadyExists { method, .. }
            | Self::InvalidArgument { method, .. }
            | Self::Unimplemented { method, .. }
            | Self::DeadlineExceeded { method, .. }
            | Self::Unavailable { method, .. }
            | Self::FailedPrecondition { method, .. }
            | Self::Other { method, .. }
            | Self::InvalidResponse { method, .. } => method,
            Self::InvalidEndpoint { .. } => "Connect",
        }
    }

    /// The gRPC code this error corresponds to.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::NotFound { .. } => tonic::Code::NotFound,
            Self::AlreadyExists { .. } => tonic::Code::AlreadyExists,
            Self::InvalidArgument { .. } | Self::InvalidEndpoint { .. } => {
                tonic::Code::InvalidArgument
            }
            Self::Unimplemented { .. } => tonic::Code::Unimplemented,
            Self::DeadlineExceeded { .. } => tonic::Code::DeadlineExceeded,
            Self::Unavailable { .. } => tonic::Code::Unavailable,
            Self::FailedPrecondition { .. } => tonic::Code::FailedPrecondition,
            Self::Other { code, .. } => *code,
            Self::InvalidResponse { .. } => tonic::Code::Internal,
        }
    }

    /// The runtime's own message, without the `CRI <method>:` prefix. Upstream strips the code
    /// from `Unknown` pull errors and shows just this text in events.
    pub fn message(&self) -> String {
        match self {
            Self::NotFound { message, .. }
            | Self::AlreadyExists { message, .. }
            | Self::InvalidArgument { message, .. }
            | Self::Unimplemented { message, .. }
            | Self::Unavailable { message, .. }
            | Self::FailedPrecondition { message, .. }
            | Self::Other { message, .. }
            | Self::InvalidResponse { message, .. } => message.clone(),
            Self::DeadlineExceeded { message, .. } if !message.is_empty() => message.clone(),
            Self::DeadlineExceeded { .. } => "context deadline exceeded".to_string(),
            Self::InvalidEndpoint { reason, .. } => reason.clone(),
        }
    }

    /// The error as the Go kubelet prints a gRPC error:
    /// `rpc error: code = NotFound desc = <message>`.
    pub fn rpc_error_string(&self) -> String {
        format!(
            "rpc error: code = {} desc = {}",
            code_name(self.code()),
            self.message()
        )
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    pub fn is_unimplemented(&self) -> bool {
        matches!(self, Self::Unimplemented { .. })
    }

    pub fn is_deadline_exceeded(&self) -> bool {
        matches!(self, Self::DeadlineExceeded { .. })
    }

    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// The status message, falling back to the code's description when the runtime sent none.
fn status_message(status: &tonic::Status) -> String {
    let message = status.message();
    if message.is_empty() {
        status.code().description().to_string()
    } else {
        message.to_string()
    }
}

/// A gRPC code spelled as Go's `codes.Code.String()` does (`OK`, `Canceled`, `NotFound`, ...).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// Formats a duration as Go's `time.Duration.String()` does: `2m0s`, `1.5s`, `300ms`, `0s`.
pub fn go_duration(d: Duration) -> String {
    let total_nanos = d.as_nanos();
    if total_nanos == 0 {
        return "0s".to_string();
    }
    if total_nanos < 1_000 {
        return format!("{total_nanos}ns");
    }
    if total_nanos < 1_000_000 {
        return format!("{}µs", decimal(total_nanos, 1_000));
    }
    if total_nanos < 1_000_000_000 {
        return format!("{}ms", decimal(total_nanos, 1_000_000));
    }
    let secs = d.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let secs_part = decimal(
        u128::from(seconds) * 1_000_000_000 + u128::from(d.subsec_nanos()),
        1_000_000_000,
    );
    let mut out = String::new();
    if hours > 0 {
        let _ = write!(out, "{hours}h{minutes}m");
    } else if minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    let _ = write!(out, "{secs_part}s");
    out
}

/// `value / unit` with the fraction's trailing zeros dropped (`1500, 1000` → `1.5`).
fn decimal(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_matches_go_formatting() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(15), "15ns"),
            (Duration::from_micros(3), "3µs"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(122), "2m2s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(3661), "1h1m1s"),
            (Duration::from_millis(61_250), "1m1.25s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn status_codes_map_to_variants() {
        type Check = fn(&CriError) -> bool;
        let cases: [(tonic::Code, Check); 8] = [
            (tonic::Code::NotFound, |e| e.is_not_found()),
            (tonic::Code::AlreadyExists, |e| {
                matches!(e, CriError::AlreadyExists { .. })
            }),
            (tonic::Code::InvalidArgument, |e| {
                matches!(e, CriError::InvalidArgument { .. })
            }),
            (tonic::Code::Unimplemented, |e| e.is_unimplemented()),
            (tonic::Code::DeadlineExceeded, |e| e.is_deadline_exceeded()),
            (tonic::Code::Unavailable, |e| e.is_unavailable()),
            (tonic::Code::FailedPrecondition, |e| {
                matches!(e, CriError::FailedPrecondition { .. })
            }),
            (tonic::Code::Unknown, |e| {
                matches!(
                    e,
                    CriError::Other {
                        code: tonic::Code::Unknown,
                        ..
                    }
                )
            }),
        ];
        for (code, check) in cases {
            let status = tonic::Status::new(code, "boom");
            let err = CriError::from_status("StartContainer", "unix:///x.sock", None, &status);
            assert!(check(&err), "{code:?} mapped to {err:?}");
            assert_eq!(err.code(), code);
            assert_eq!(err.method(), "StartContainer");
            assert!(err.to_string().starts_with("CRI StartContainer: "), "{err}");
            // Round trip through a status keeps code and message.
            let back = err.to_status();
            assert_eq!(back.code(), code);
            assert_eq!(back.message(), "boom");
        }
    }

    #[test]
    fn messages_name_method_and_context() {
        let err = CriError::DeadlineExceeded {
            method: "RunPodSandbox",
            timeout: Some(Duration::from_secs(120)),
            message: String::new(),
        };
        assert_eq!(
            err.to_string(),
            "CRI RunPodSandbox: deadline exceeded after 2m0s"
        );
        assert_eq!(
            err.rpc_error_string(),
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
        );

        let status =
            tonic::Status::deadline_exceeded("timeout 1s exceeded: context deadline exceeded");
        let err = CriError::from_status("ExecSync", "e", Some(Duration::from_secs(121)), &status);
        assert_eq!(
            err.to_string(),
            "CRI ExecSync: deadline exceeded: timeout 1s exceeded: context deadline exceeded \
             (call deadline 2m1s)"
        );

        let status = tonic::Status::unavailable("connection refused");
        let err = CriError::from_status("Version", "unix:///run/c.sock", None, &status);
        assert_eq!(
            err.to_string(),
            "CRI Version: runtime unavailable at unix:///run/c.sock: connection refused"
        );

        let err = CriError::unknown("StartContainer", "container is in CONTAINER_EXITED state");
        assert_eq!(
            err.to_string(),
            "CRI StartContainer: Unknown: container is in CONTAINER_EXITED state"
        );
        assert_eq!(
            err.rpc_error_string(),
            "rpc error: code = Unknown desc = container is in CONTAINER_EXITED state"
        );
    }

    #[test]
    fn empty_status_message_falls_back_to_code_description() {
        let status = tonic::Status::new(tonic::Code::NotFound, "");
        let err = CriError::from_status("ContainerStatus", "e", None, &status);
        assert!(!err.message().is_empty());
    }
}
