//! The node-wide docker config (upstream `ReadDockerConfigFile` behind the default
//! `.dockercfg` provider and the kubelet's `nodeKeyring`): owns the search for a docker config
//! file on the node and a five-minute cache of what it found. Receives the kubelet's root
//! directory; emits, for an image repository, the credentials of the first valid file, matched
//! with keyring rules.
//!
//! Search as upstream, first valid file wins and only that file is used: `config.json` (the
//! `{"auths": …}` format) in `<root-dir>`, the working directory, `$HOME/.docker` and
//! `/.docker`; when none is valid, legacy `.dockercfg` in `<root-dir>`, the working directory,
//! `$HOME` and `/`. A missing, unreadable or malformed file is skipped (logged without its
//! content). Priority in a pull, as upstream's keyring union: the pod's pull secrets, then
//! these credentials, then the credential provider plugins.
//!
//! The files are the administrator's, so links are followed as upstream does; still only a
//! regular file of at most [`MAX_FILE_SIZE`] is read, opened non-blocking (a FIFO planted at
//! one of these paths cannot hang a pull).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::AuthConfig;
use super::config::{ConfigError, DockerConfig, parse_docker_config_json, parse_dockercfg};
use super::keyring::BasicDockerKeyring;
use crate::sync;

/// How long a search result is kept (upstream `CachingDockerConfigProvider` lifetime).
pub const CACHE_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// Larger files are skipped (upstream's read bound for remote docker configs, 10 MiB).
pub const MAX_FILE_SIZE: u64 = 10 << 20;

/// Why one candidate file was skipped (logged at debug level; never its content).
#[derive(Debug, thiserror::Error)]
pub enum NodeConfigError {
    #[error("while trying to read {path:?}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path:?} is not a regular file")]
    NotRegular { path: PathBuf },
    #[error("{path:?} is larger than {MAX_FILE_SIZE} bytes")]
    TooLarge { path: PathBuf },
    #[error("couldn't get the config from {path:?}: {source}")]
    Parse { path: PathBuf, source: ConfigError },
}

/// The candidate files, in search order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPaths {
    /// `config.json` files (`{"auths": …}`).
    pub config_json: Vec<PathBuf>,
    /// Legacy `.dockercfg` files, searched only when no `config.json` was valid.
    pub dockercfg: Vec<PathBuf>,
}

impl SearchPaths {
    /// Upstream's defaults with the preferred path set to the kubelet's root directory.
    pub fn upstream(root_dir: &Path) -> Self {
        let cwd = std::env::current_dir().ok();
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        Self::from_dirs(root_dir, cwd.as_deref(), home.as_deref())
    }

    /// The search order for these directories (`None`: that entry is left out).
    pub fn from_dirs(root_dir: &Path, cwd: Option<&Path>, home: Option<&Path>) -> Self {
        let root = Path::new("/");
        let mut config_json = vec![root_dir.join("config.json")];
        let mut dockercfg = vec![root_dir.join(".dockercfg")];
        if let Some(cwd) = cwd {
            config_json.push(cwd.join("config.json"));
            dockercfg.push(cwd.join(".dockercfg"));
        }
        if let Some(home) = home {
            config_json.push(home.join(".docker/config.json"));
            dockercfg.push(home.join(".dockercfg"));
        }
        config_json.push(root.join(".docker/config.json"));
        dockercfg.push(root.join(".dockercfg"));
        Self {
            config_json,
            dockercfg,
        }
    }
}

/// The node-wide docker config with its cache.
#[derive(Debug)]
pub struct NodeDockerConfig {
    paths: SearchPaths,
    lifetime: Duration,
    cache: Mutex<Option<(Instant, DockerConfig)>>,
}

impl NodeDockerConfig {
    pub fn new(paths: SearchPaths) -> Self {
        Self {
            paths,
            lifetime: CACHE_LIFETIME,
            cache: Mutex::new(None),
        }
    }

    /// Upstream's search for a kubelet with this root directory.
    pub fn for_root_dir(root_dir: &Path) -> Self {
        Self::new(SearchPaths::upstream(root_dir))
    }

    /// The config to use now: the cached one while it is fresh, else a new search.
    pub fn provide(&self) -> DockerConfig {
        let now = Instant::now();
        let mut cache = sync::lock(&self.cache);
        if let Some((read_at, cfg)) = cache.as_ref()
            && now < *read_at + self.lifetime
        {
            return cfg.clone();
        }
        let cfg = search(&self.paths);
        *cache = Some((now, cfg.clone()));
        cfg
    }

    /// The node's credentials for `image`, most specific location first.
    pub fn lookup(&self, image: &str) -> Vec<AuthConfig> {
        let cfg = self.provide();
        if cfg.is_empty() {
            return Vec::new();
        }
        let mut keyring = BasicDockerKeyring::default();
        keyring.add(&cfg);
        keyring.lookup(image)
    }
}

/// Upstream `ReadDockerConfigFile`: the first valid `config.json`, else the first valid
/// `.dockercfg`, else nothing.
pub fn search(paths: &SearchPaths) -> DockerConfig {
    let attempts = paths
        .config_json
        .iter()
        .map(|p| (p, parse_docker_config_json as fn(&[u8]) -> _))
        .chain(
            paths
                .dockercfg
                .iter()
                .map(|p| (p, parse_dockercfg as fn(&[u8]) -> _)),
        );
    for (path, parse) in attempts {
        match read_one(path, parse) {
            Ok(Some(cfg)) => {
                debug!(path = %path.display(), "found a valid node docker config");
                return cfg;
            }
            Ok(None) => {}
            Err(e) => debug!(error = %e, "skipping node docker config"),
        }
    }
    DockerConfig::new()
}

/// One candidate: `Ok(None)` when it does not exist.
fn read_one(
    path: &Path,
    parse: fn(&[u8]) -> Result<DockerConfig, ConfigError>,
) -> Result<Option<DockerConfig>, NodeConfigError> {
    let read = |source| NodeConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read(e)),
    };
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(NodeConfigError::NotRegular {
            path: path.to_owned(),
        });
    }
    let mut data = Vec::new();
    file.take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut data)
        .map_err(read)?;
    if data.len() as u64 > MAX_FILE_SIZE {
        return Err(NodeConfigError::TooLarge {
            path: path.to_owned(),
        });
    }
    parse(&data)
        .map(Some)
        .map_err(|source| NodeConfigError::Parse {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
#[path = "node_config_tests.rs"]
mod tests;
