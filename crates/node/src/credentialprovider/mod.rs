//! Registry credentials for image pulls (upstream `pkg/credentialprovider`): owns the keyring
//! that matches an image to the credentials configured for its registry (`keyring`), the docker
//! config formats those credentials come in (`config`), the pod's `imagePullSecrets`
//! (`secrets`), the node-wide docker config files (`node_config`) and the kubelet credential
//! provider plugins (`plugin`). Receives pull secrets, node files and plugin answers; emits,
//! for one image, the ordered list of [`AuthConfig`]s the image manager tries in turn (secrets,
//! then the node's files, then plugins: upstream's keyring union).
//!
//! Credentials never reach a log line: [`AuthConfig`]'s `Debug` prints only which fields are
//! set, and errors name the secret and the field, never a value.

pub mod config;
pub mod keyring;
pub mod node_config;
pub mod plugin;
pub mod secrets;

use std::fmt;

pub use keyring::{BasicDockerKeyring, urls_match_str};

/// Credentials for one registry (upstream `credentialprovider.AuthConfig`, the CRI
/// `AuthConfig` fields the kubelet fills).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("username", &Redacted(&self.username))
            .field("password", &Redacted(&self.password))
            .finish()
    }
}

/// A credential shown only by its length.
struct Redacted<'a>(&'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<redacted, {} bytes>", self.0.len())
    }
}

impl AuthConfig {
    /// The CRI message for a pull with these credentials.
    pub fn to_cri(&self) -> rkubelet_cri::api::AuthConfig {
        rkubelet_cri::api::AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_credential() {
        let a = AuthConfig {
            username: "alice-user".into(),
            password: "s3cr3t-pa55".into(),
        };
        let text = format!("{a:?} {:#?}", a);
        assert!(
            !text.contains("alice-user") && !text.contains("s3cr3t"),
            "{text}"
        );
        assert!(text.contains("<redacted, 11 bytes>"), "{text}");
    }
}
