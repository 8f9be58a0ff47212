//! Assembly of the HTTPS port from configuration (upstream `BuildAuth`): owns nothing after
//! start-up; receives the resolved settings and the optional API client; emits the reloadable
//! serving TLS and the authenticator/authorizer, or a start-up error naming the field.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::authn::{Authenticator, ClientCaSource, TokenWebhook};
use super::authz::{Authorizer, WebhookAuthorizer};
use super::review::{KubeReviews, ReviewApi};
use super::tls::{self, TlsSettings};
use super::{Auth, ServerError};

/// `authorization.mode`.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthzMode {
    AlwaysAllow,
    Webhook {
        /// `cacheAuthorizedTTL`.
        allowed_ttl: Duration,
        /// `cacheUnauthorizedTTL`.
        denied_ttl: Duration,
    },
}

/// Settings of the authenticated HTTPS port (`enableServer`).
#[derive(Debug, Clone)]
pub struct SecureConfig {
    /// `address:port`.
    pub addr: std::net::SocketAddr,
    pub tls: TlsSettings,
    /// `authentication.anonymous.enabled`.
    pub anonymous: bool,
    /// `authentication.webhook`: `Some(cacheTTL)` when enabled.
    pub webhook_authn: Option<Duration>,
    pub authz: AuthzMode,
    /// The effective configuration for `/configz`.
    pub configz: Option<serde_json::Value>,
    /// `/logs/` root (`enableSystemLogHandler`), usually `/var/log`.
    pub system_logs: Option<PathBuf>,
    /// `enableDebuggingHandlers`.
    pub debugging_handlers: bool,
}

/// TLS and auth for the HTTPS port; `reviews` is the API edge (`None` standalone).
pub fn build(
    cfg: &SecureConfig,
    reviews: Option<Arc<dyn ReviewApi>>,
) -> Result<(Arc<tls::ServingTls>, Auth), ServerError> {
    let need = |what: &str| {
        ServerError::Config(format!(
            "{what}: no client provided, cannot use webhook {} (run with --kubeconfig or disable it)",
            if what.starts_with("authentication") {
                "authentication"
            } else {
                "authorization"
            }
        ))
    };
    let tokens = match cfg.webhook_authn {
        Some(ttl) => Some(TokenWebhook::new(
            reviews
                .clone()
                .ok_or_else(|| need("authentication.webhook.enabled"))?,
            ttl,
        )),
        None => None,
    };
    let authorizer = match &cfg.authz {
        AuthzMode::AlwaysAllow => Authorizer::AlwaysAllow,
        AuthzMode::Webhook {
            allowed_ttl,
            denied_ttl,
        } => Authorizer::Webhook(WebhookAuthorizer::new(
            reviews.ok_or_else(|| need("authorization.mode: Webhook"))?,
            *allowed_ttl,
            *denied_ttl,
        )),
    };
    let serving = tls::build(&cfg.tls)?;
    let client_ca: Arc<dyn ClientCaSource> = serving.clone();
    Ok((
        serving,
        Auth {
            authenticator: Authenticator {
                client_ca: Some(client_ca),
                tokens,
                anonymous: cfg.anonymous,
            },
            authorizer,
        },
    ))
}

/// The review API edge of an API client.
pub fn kube_reviews(client: kube::Client) -> Arc<dyn ReviewApi> {
    Arc::new(KubeReviews(client))
}
