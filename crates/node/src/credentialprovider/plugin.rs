//! Kubelet credential provider plugins (upstream `pkg/credentialprovider/plugin`): owns the
//! `CredentialProviderConfig` (`--image-credential-provider-config`, a file or a directory of
//! `*.json`/`*.yaml`/`*.yml`), the plugin executables in `--image-credential-provider-bin-dir`,
//! and each provider's credential cache. Receives an image repository to pull; emits the
//! credentials of every provider whose `matchImages` match, matched against the image like
//! pull-secret credentials (keyring rules).
//!
//! Exec protocol `credentialprovider.kubelet.k8s.io/{v1,v1beta1,v1alpha1}`: the plugin runs as
//! `<bin-dir>/<name> <args…>` with the kubelet's environment plus `env`, reads a
//! `CredentialProviderRequest` (`{"apiVersion","kind","image"}`) on stdin and writes a
//! `CredentialProviderResponse` on stdout (`cacheKeyType` Image|Registry|Global, optional
//! `cacheDuration`, `auth` = location → username/password). A response of another apiVersion,
//! kind or with unknown fields is refused; a plugin running longer than one minute, or writing
//! more than [`MAX_STDOUT`] on stdout, is killed (stderr: the first [`MAX_STDERR`] bytes are kept
//! for the message, the rest discarded). Concurrent lookups of one image share one plugin run
//! (upstream's singleflight keyed by image).
//! Any failure is logged (never the response body) and yields no credentials: the pull goes on
//! without them, as upstream. Responses are cached for `cacheDuration`, else the provider's
//! `defaultCacheDuration` (0: not cached), keyed by image, registry or globally.
//!
//! Not supported (refused at start-up, naming the field): `tokenAttributes` (service account
//! tokens for plugins, feature `KubeletServiceAccountTokenForCredentialProviders`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tracing::{debug, error};

use super::AuthConfig;
use super::config::{DockerConfig, DockerConfigEntry};
use super::keyring::{BasicDockerKeyring, parse_schemeless_url, urls_match_str};
use crate::sync;

/// The exec protocol versions a provider may name (upstream `apiVersions`).
pub const PLUGIN_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
];
const CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1alpha1",
    "kubelet.config.k8s.io/v1beta1",
];
/// Upstream's catch-all exec timeout.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// How often expired cache entries are dropped (upstream `cachePurgeInterval`).
const CACHE_PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// Bound on what is kept of a plugin's stderr for the error message.
pub const MAX_STDERR: usize = 1024;
/// Bound on a plugin's stdout (a response is a few KiB; upstream reads it unbounded). More is a
/// broken or hostile plugin: it is killed and gives no credentials.
pub const MAX_STDOUT: usize = 1 << 20;

/// Failures loading the plugin configuration (the kubelet refuses to start on any).
#[derive(Debug, thiserror::Error)]
pub enum PluginConfigError {
    #[error("credential provider config path is empty")]
    EmptyPath,
    #[error("unable to access path {path:?}: {source}")]
    Access {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no configuration files found in directory {0:?}")]
    NoFiles(PathBuf),
    #[error("error decoding config {path:?}: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("duplicate provider name {0:?} found in configuration file(s)")]
    DuplicateName(String),
    #[error("failed to validate credential provider config: {0}")]
    Invalid(String),
    #[error("plugin binary directory {0} did not exist")]
    NoBinDir(String),
    #[error("plugin binary executable {0} did not exist")]
    NoBinary(String),
}

/// `env` entry of a provider.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExecEnvVar {
    pub name: String,
    pub value: String,
}

/// One provider of a `CredentialProviderConfig`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CredentialProvider {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub match_images: Vec<String>,
    pub default_cache_duration: Option<crate::config::Duration>,
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<ExecEnvVar>,
    /// Accepted by the decoder only to be refused by validation with a clear message.
    #[serde(default)]
    pub token_attributes: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CredentialProviderConfigFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    providers: Vec<CredentialProvider>,
}

/// Reads the config file, or every `*.json`/`*.yaml`/`*.yml` of a directory in name order
/// (upstream `readCredentialProviderConfig`).
pub fn read_config(path: &Path) -> Result<Vec<CredentialProvider>, PluginConfigError> {
    if path.as_os_str().is_empty() {
        return Err(PluginConfigError::EmptyPath);
    }
    let access = |source| PluginConfigError::Access {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(access)?;
    let files = if meta.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(access)?
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "json" || x == "yaml" || x == "yml")
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(PluginConfigError::NoFiles(path.to_owned()));
        }
        files
    } else {
        vec![path.to_owned()]
    };
    let mut providers = Vec::new();
    let mut names = BTreeSet::new();
    for file in files {
        let data = std::fs::read(&file).map_err(|source| PluginConfigError::Access {
            path: file.clone(),
            source,
        })?;
        let decode = |message: String| PluginConfigError::Decode {
            path: file.clone(),
            message,
        };
        // YAML is a superset of JSON: one decoder for both.
        let cfg: CredentialProviderConfigFile =
            crate::yaml::from_slice(&data).map_err(|e| decode(e.to_string()))?;
        if cfg.kind != "CredentialProviderConfig" {
            return Err(decode(format!(
                "failed to decode {:?} (wrong Kind)",
                cfg.kind
            )));
        }
        if !CONFIG_API_VERSIONS.contains(&cfg.api_version.as_str()) {
            return Err(decode(format!(
                "no kind \"CredentialProviderConfig\" is registered for version {:?}",
                cfg.api_version
            )));
        }
        for p in cfg.providers {
            if !names.insert(p.name.clone()) {
                return Err(PluginConfigError::DuplicateName(p.name));
            }
            providers.push(p);
        }
    }
    Ok(providers)
}

/// Upstream `validateCredentialProviderConfig`; every problem, joined.
pub fn validate(providers: &[CredentialProvider]) -> Result<(), PluginConfigError> {
    let mut errs = Vec::new();
    if providers.is_empty() {
        errs.push("providers: Required value: at least 1 item in plugins is required".to_owned());
    }
    let mut seen = BTreeSet::new();
    for p in providers {
        let name = &p.name;
        if name.contains('/') {
            errs.push(format!(
                "providers.name: Invalid value: {name:?}: provider name cannot contain '/'"
            ));
        }
        if name.contains(' ') {
            errs.push(format!(
                "providers.name: Invalid value: {name:?}: provider name cannot contain spaces"
            ));
        }
        if name == "." || name == ".." {
            errs.push(format!(
                "providers.name: Invalid value: {name:?}: provider name cannot be {name:?}"
            ));
        }
        if name.is_empty() {
            errs.push("providers.name: Required value".to_owned());
        }
        if !seen.insert(name) {
            errs.push(format!("providers.name: Duplicate value: {name:?}"));
        }
        if p.api_version.is_empty() {
            errs.push("providers.apiVersion: Required value".to_owned());
        } else if !PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
            errs.push(format!(
                "providers.apiVersion: Unsupported value: {:?}: supported values: {}",
                p.api_version,
                PLUGIN_API_VERSIONS.map(|v| format!("{v:?}")).join(", ")
            ));
        }
        if p.match_images.is_empty() {
            errs.push(
                "providers.matchImages: Required value: at least 1 item in matchImages is required"
                    .to_owned(),
            );
        }
        for m in &p.match_images {
            if let Err(e) = parse_schemeless_url(m) {
                errs.push(format!(
                    "providers.matchImages: Invalid value: {m:?}: match image is invalid: {e}"
                ));
            }
        }
        match p.default_cache_duration {
            None => errs.push("providers.defaultCacheDuration: Required value".to_owned()),
            Some(d) if d.is_negative() => errs.push(format!(
                "providers.defaultCacheDuration: Invalid value: {d}: must be greater than or equal to 0"
            )),
            Some(_) => {}
        }
        if p.token_attributes.is_some() {
            errs.push("providers.tokenAttributes: Forbidden: service account tokens for credential provider plugins (KubeletServiceAccountTokenForCredentialProviders) are not supported by rkubelet".to_owned());
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(PluginConfigError::Invalid(format!("[{}]", errs.join(", "))))
    }
}

/// Why one plugin call yielded nothing (logged; the pull goes on without its credentials).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(
        "error execing credential provider plugin {name} for image {image}: {reason}: {stderr}"
    )]
    Run {
        name: String,
        image: String,
        reason: String,
        stderr: String,
    },
    #[error(
        "error execing credential provider plugin {name} for image {image}: stdout exceeded {limit} bytes, plugin killed"
    )]
    TooMuchOutput {
        name: String,
        image: String,
        limit: usize,
    },
    #[error("error reading GVK from response: {0}")]
    Gvk(String),
    #[error(
        "apiVersion from credential plugin response did not match expected apiVersion:{expected}, actual apiVersion:{actual}"
    )]
    ApiVersion { expected: String, actual: String },
    /// The body is never shown: it may hold credentials.
    #[error("error decoding credential provider plugin response from stdout")]
    Decode,
    #[error("credential provider plugin did not return a valid cacheKeyType: {0:?}")]
    CacheKeyType(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponseAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Response {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    cache_key_type: String,
    #[serde(default)]
    cache_duration: Option<crate::config::Duration>,
    #[serde(default)]
    auth: Option<HashMap<String, ResponseAuth>>,
}

/// A decoded response: what to cache under which key, for how long.
#[derive(Clone)]
struct Answer {
    cache_key: CacheKey,
    cache_duration: Option<Duration>,
    config: DockerConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CacheKey {
    Image,
    Registry,
    Global,
}

/// The registry part of an image (upstream `parseRegistry`).
fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

struct CacheEntry {
    config: DockerConfig,
    expires_at: Instant,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<String, CacheEntry>,
    last_purge: Option<Instant>,
}

impl Cache {
    fn get(&mut self, key: &str, now: Instant) -> Option<DockerConfig> {
        let expired = self.entries.get(key).map(|e| now > e.expires_at)?;
        if expired {
            self.entries.remove(key);
            return None;
        }
        self.entries.get(key).map(|e| e.config.clone())
    }

    fn purge(&mut self, now: Instant) {
        if self
            .last_purge
            .is_none_or(|t| now > t + CACHE_PURGE_INTERVAL)
        {
            self.entries.retain(|_, e| now <= e.expires_at);
            self.last_purge = Some(now);
        }
    }
}

/// One configured plugin with its cache (upstream `pluginProvider`).
pub struct PluginProvider {
    name: String,
    api_version: String,
    match_images: Vec<String>,
    default_cache_duration: Duration,
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<ExecEnvVar>,
    exec_timeout: Duration,
    cache: Mutex<Cache>,
    /// Runs in flight by image: concurrent lookups of one image wait for the same run.
    inflight: Mutex<HashMap<String, Arc<Flight>>>,
}

/// One shared plugin run; the error is kept as its text (each waiter logs it).
type Flight = tokio::sync::OnceCell<Result<Answer, String>>;

impl std::fmt::Debug for PluginProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProvider")
            .field("name", &self.name)
            .field("match_images", &self.match_images)
            .finish_non_exhaustive()
    }
}

impl PluginProvider {
    fn new(provider: CredentialProvider, bin_dir: &Path) -> Self {
        Self {
            binary: bin_dir.join(&provider.name),
            name: provider.name,
            api_version: provider.api_version,
            match_images: provider.match_images,
            default_cache_duration: provider
                .default_cache_duration
                .map_or(Duration::ZERO, |d| d.as_std()),
            args: provider.args,
            env: provider.env,
            exec_timeout: EXEC_TIMEOUT,
            cache: Mutex::new(Cache::default()),
            inflight: Mutex::new(HashMap::new()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        sync::lock(&self.cache)
    }

    fn is_image_allowed(&self, image: &str) -> bool {
        self.match_images.iter().any(|m| urls_match_str(m, image))
    }

    fn cached(&self, image: &str) -> Option<DockerConfig> {
        let now = Instant::now();
        let mut cache = self.cache();
        cache.purge(now);
        [image, registry_of(image), GLOBAL_CACHE_KEY]
            .into_iter()
            .find_map(|k| cache.get(k, now))
    }

    /// The plugin's credentials for `image` (upstream `provide`): from the cache, else by
    /// running the plugin. Empty when the image does not match or the plugin failed.
    pub async fn provide(&self, image: &str) -> DockerConfig {
        if !self.is_image_allowed(image) {
            return DockerConfig::new();
        }
        if let Some(cfg) = self.cached(image) {
            return cfg;
        }
        let answer = match self.exec_shared(image).await {
            Ok(a) => a,
            Err(e) => {
                error!(provider = %self.name, error = %e, "failed getting credential from external registry credential provider");
                return DockerConfig::new();
            }
        };
        let duration = match answer.cache_duration {
            Some(d) if d.is_zero() => return answer.config,
            Some(d) => d,
            None if self.default_cache_duration.is_zero() => return answer.config,
            None => self.default_cache_duration,
        };
        let key = match answer.cache_key {
            CacheKey::Image => image,
            CacheKey::Registry => registry_of(image),
            CacheKey::Global => GLOBAL_CACHE_KEY,
        };
        let expires_at = Instant::now()
            .checked_add(duration)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
        self.cache().entries.insert(
            key.to_owned(),
            CacheEntry {
                config: answer.config.clone(),
                expires_at,
            },
        );
        answer.config
    }

    /// Runs the plugin, or waits for the run already in flight for `image` (upstream's
    /// singleflight). A waiter whose leader was dropped mid-run takes over the run.
    async fn exec_shared(&self, image: &str) -> Result<Answer, String> {
        let flights = || sync::lock(&self.inflight);
        let flight = Arc::clone(flights().entry(image.to_owned()).or_default());
        let result = flight
            .get_or_init(|| async { self.exec(image).await.map_err(|e| e.to_string()) })
            .await
            .clone();
        let mut map = flights();
        if map.get(image).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            map.remove(image);
        }
        result
    }

    /// Runs the plugin once (upstream `ExecPlugin`).
    async fn exec(&self, image: &str) -> Result<Answer, ExecError> {
        debug!(provider = %self.name, image, "getting image credentials from external exec plugin");
        let run_err = |reason: String, stderr: &[u8]| ExecError::Run {
            name: self.name.clone(),
            image: image.to_owned(),
            reason,
            stderr: bounded_text(stderr),
        };
        let request = serde_json::json!({
            "kind": "CredentialProviderRequest",
            "apiVersion": self.api_version,
            "image": image,
        });
        let mut body = request.to_string().into_bytes();
        body.push(b'\n');
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|e| (&e.name, &e.value)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| run_err(e.to_string(), b""))?;
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let run = async {
            let feed = async {
                if let Some(mut stdin) = stdin {
                    // A plugin that does not read its request still gets to answer.
                    let _ = stdin.write_all(&body).await;
                }
                Ok::<_, Outcome>(())
            };
            // Stops at the first overflow, dropping the other reads; the plugin is killed below.
            let ((), out, err) = tokio::try_join!(
                feed,
                read_bounded(stdout, MAX_STDOUT),
                keep_head(stderr, MAX_STDERR)
            )?;
            let status = child.wait().await.map_err(Outcome::Io)?;
            Ok::<_, Outcome>((status, out, err))
        };
        let result = tokio::time::timeout(self.exec_timeout, run).await;
        if !matches!(result, Ok(Ok(_))) {
            // Killed and reaped before the error is returned (kill_on_drop is the backstop).
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        let (status, stdout, stderr) = match result {
            Err(_) => return Err(run_err("context deadline exceeded".to_owned(), b"")),
            Ok(Err(Outcome::Io(e))) => return Err(run_err(e.to_string(), b"")),
            Ok(Err(Outcome::TooLong)) => {
                return Err(ExecError::TooMuchOutput {
                    name: self.name.clone(),
                    image: image.to_owned(),
                    limit: MAX_STDOUT,
                });
            }
            Ok(Ok(o)) => o,
        };
        if !status.success() {
            let reason = match status.code() {
                Some(c) => format!("exit status {c}"),
                None => "signal: killed".to_owned(),
            };
            return Err(run_err(reason, &stderr));
        }
        self.decode(&stdout)
    }

    fn decode(&self, data: &[u8]) -> Result<Answer, ExecError> {
        let meta: TypeMeta = serde_json::from_slice(data).map_err(|e| {
            ExecError::Gvk(format!(
                "couldn't get version/kind; json parse error at line {} column {}",
                e.line(),
                e.column()
            ))
        })?;
        if meta.api_version != self.api_version {
            return Err(ExecError::ApiVersion {
                expected: self.api_version.clone(),
                actual: meta.api_version,
            });
        }
        if meta.kind != "CredentialProviderResponse" {
            return Err(ExecError::Decode);
        }
        let resp: Response = serde_json::from_slice(data).map_err(|_| ExecError::Decode)?;
        let cache_key = match resp.cache_key_type.as_str() {
            "Image" => CacheKey::Image,
            "Registry" => CacheKey::Registry,
            "Global" => CacheKey::Global,
            other => return Err(ExecError::CacheKeyType(other.to_owned())),
        };
        if resp.cache_duration.is_some_and(|d| d.is_negative()) {
            return Err(ExecError::Decode);
        }
        let config = resp
            .auth
            .unwrap_or_default()
            .into_iter()
            .map(|(loc, a)| {
                (
                    loc,
                    DockerConfigEntry {
                        username: a.username,
                        password: a.password,
                        email: String::new(),
                    },
                )
            })
            .collect();
        Ok(Answer {
            cache_key,
            cache_duration: resp.cache_duration.map(|d| d.as_std()),
            config,
        })
    }
}

const GLOBAL_CACHE_KEY: &str = "global";

/// Why reading a plugin's output stopped early.
enum Outcome {
    Io(std::io::Error),
    TooLong,
}

/// All of `r` if it holds at most `max` bytes; `TooLong` as soon as it holds more.
async fn read_bounded(r: Option<impl AsyncRead + Unpin>, max: usize) -> Result<Vec<u8>, Outcome> {
    let mut buf = Vec::new();
    if let Some(r) = r {
        let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
        r.take(limit)
            .read_to_end(&mut buf)
            .await
            .map_err(Outcome::Io)?;
    }
    if buf.len() > max {
        return Err(Outcome::TooLong);
    }
    Ok(buf)
}

/// The first `max` bytes of `r`; the rest is read and discarded (so the plugin never blocks
/// on a full pipe), in constant memory.
async fn keep_head(r: Option<impl AsyncRead + Unpin>, max: usize) -> Result<Vec<u8>, Outcome> {
    let mut buf = Vec::new();
    if let Some(mut r) = r {
        let limit = u64::try_from(max).unwrap_or(u64::MAX);
        (&mut r)
            .take(limit)
            .read_to_end(&mut buf)
            .await
            .map_err(Outcome::Io)?;
        tokio::io::copy(&mut r, &mut tokio::io::sink())
            .await
            .map_err(Outcome::Io)?;
    }
    Ok(buf)
}

fn bounded_text(b: &[u8]) -> String {
    let b = &b[..b.len().min(MAX_STDERR)];
    String::from_utf8_lossy(b).trim_end().to_owned()
}

/// Every registered plugin (upstream `RegisterCredentialProviderPlugins` + the external
/// keyring).
#[derive(Debug, Default)]
pub struct CredentialProviders {
    providers: Vec<PluginProvider>,
}

impl CredentialProviders {
    /// Loads and validates the config and checks that the bin dir and every plugin binary
    /// exist; any problem is an error (the kubelet does not start).
    pub fn load(config: &Path, bin_dir: &Path) -> Result<Self, PluginConfigError> {
        if !bin_dir.is_dir() || bin_dir.as_os_str().is_empty() {
            return Err(PluginConfigError::NoBinDir(bin_dir.display().to_string()));
        }
        let providers = read_config(config)?;
        validate(&providers)?;
        let mut out = Vec::new();
        for p in providers {
            let bin = bin_dir.join(&p.name);
            if !bin.is_file() {
                return Err(PluginConfigError::NoBinary(bin.display().to_string()));
            }
            debug!(provider = %p.name, "registered credential provider");
            out.push(PluginProvider::new(p, bin_dir));
        }
        Ok(Self { providers: out })
    }

    /// Changes every provider's exec timeout (tests; upstream: one minute).
    pub fn with_exec_timeout(mut self, timeout: Duration) -> Self {
        for p in &mut self.providers {
            p.exec_timeout = timeout;
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }

    /// The credentials all providers give for `image`, matched against it with keyring
    /// rules (upstream `externalCredentialProviderKeyring.Lookup`).
    pub async fn lookup(&self, image: &str) -> Vec<AuthConfig> {
        let mut keyring = BasicDockerKeyring::default();
        for p in &self.providers {
            keyring.add(&p.provide(image).await);
        }
        keyring.lookup(image)
    }
}

/// Shared handle.
pub type SharedProviders = Arc<CredentialProviders>;

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
