//! `fake-apiserver` binary: receives `--port`/`--write-kubeconfig`/CSR signer/bootstrap token
//! flags, serves the in-memory API server on 127.0.0.1 until SIGTERM/SIGINT and emits a
//! kubeconfig (and optionally a bootstrap kubeconfig) for kubectl/rkubelet.

use clap::Parser;
use fake_apiserver::{FakeApiServer, KubeconfigAuth, Options};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// In-memory Kubernetes API server for manual testing.
#[derive(Debug, Parser)]
#[command(name = "fake-apiserver", version)]
struct Args {
    /// Port to listen on (127.0.0.1 only; 0 picks a free port).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Write a kubeconfig for the admin user to this path.
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    /// Credentials placed in the kubeconfig: `cert` (client certificate) or `token`.
    #[arg(long, default_value = "cert", value_parser = ["cert", "token"])]
    auth: String,
    /// Serve plain HTTP without authentication instead of HTTPS.
    #[arg(long)]
    insecure_http: bool,
    /// Seconds between watch BOOKMARK events.
    #[arg(long, default_value_t = 5)]
    bookmark_interval: u64,
    /// Maximum lifetime of certificates the CSR signer issues (kube-controller-manager's
    /// flag; Go duration such as `30s`, `10m`, `8760h`).
    #[arg(long, default_value = "8760h", value_parser = parse_go_duration)]
    cluster_signing_duration: Duration,
    /// Auto-approve kubelet client CSRs (kube-controller-manager's `csrapproving`).
    #[arg(long)]
    csr_auto_approve: bool,
    /// Create the bootstrap token Secret for `<id>.<secret>` (6 and 16 characters [a-z0-9]).
    #[arg(long, value_parser = parse_bootstrap_token)]
    bootstrap_token: Option<String>,
    /// Write a bootstrap kubeconfig (server, CA, `--bootstrap-token`) to this path.
    #[arg(long, requires = "bootstrap_token")]
    write_bootstrap_kubeconfig: Option<PathBuf>,
}

fn parse_bootstrap_token(s: &str) -> Result<String, String> {
    fake_apiserver::authn::parse_bootstrap_token(s)
        .map(|_| s.to_owned())
        .ok_or_else(|| {
            format!("{s:?} is not a bootstrap token of the form [a-z0-9]{{6}}.[a-z0-9]{{16}}")
        })
}

/// Go's `time.ParseDuration` for the units a signing duration uses (h, m, s, ms).
fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}: expected e.g. 30s, 10m, 8760h or 1h30m");
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "h" => Duration::from_secs(3600),
            "m" => Duration::from_secs(60),
            "s" => Duration::from_secs(1),
            "ms" => Duration::from_millis(1),
            _ => return Err(bad()),
        };
        total += unit
            .checked_mul(u32::try_from(n).map_err(|_| bad())?)
            .ok_or_else(bad)?;
        rest = &rest[unit_len..];
    }
    if total.is_zero() {
        return Err(bad());
    }
    Ok(total)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let opts = Options {
        port: args.port,
        tls: !args.insecure_http,
        require_auth: !args.insecure_http,
        kubeconfig_auth: if args.auth == "token" {
            KubeconfigAuth::Token
        } else {
            KubeconfigAuth::ClientCert
        },
        kubeconfig_path: args.write_kubeconfig.clone(),
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        csr_cert_lifetime: args.cluster_signing_duration,
        csr_auto_approve: args.csr_auto_approve,
        ..Options::default()
    };
    let server = match FakeApiServer::start(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-apiserver: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(token) = &args.bootstrap_token
        && let Some((id, secret)) = fake_apiserver::authn::parse_bootstrap_token(token)
    {
        if let Err(e) =
            server.create_bootstrap_token(&fake_apiserver::BootstrapToken::new(id, secret))
        {
            eprintln!("fake-apiserver: creating the bootstrap token: {e}");
            return ExitCode::FAILURE;
        }
        if let Some(path) = &args.write_bootstrap_kubeconfig
            && let Err(e) = server.write_bootstrap_kubeconfig(path, token)
        {
            eprintln!("fake-apiserver: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    tracing::info!(url = %server.url, kubeconfig = %server.kubeconfig_path.display(), "serving");
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-apiserver: installing SIGTERM handler: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    server.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(
            parse_go_duration("8760h"),
            Ok(Duration::from_secs(8760 * 3600))
        );
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(
            parse_go_duration("8760h0m0s"),
            Ok(Duration::from_secs(8760 * 3600))
        );
        for bad in ["", "30", "s", "10d", "0s", "-5s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
