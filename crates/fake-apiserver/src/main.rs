//! `fake-apiserver` binary: receives `--port`/`--write-kubeconfig` flags, serves the in-memory
//! API server on 127.0.0.1 until SIGTERM/SIGINT and emits a kubeconfig for kubectl/rkubelet.

use clap::Parser;
use fake_apiserver::{FakeApiServer, KubeconfigAuth, Options};
use std::path::PathBuf;
use std::process::ExitCode;

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
        bookmark_interval: std::time::Duration::from_secs(args.bookmark_interval.max(1)),
        ..Options::default()
    };
    let server = match FakeApiServer::start(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-apiserver: {e}");
            return ExitCode::FAILURE;
        }
    };
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
