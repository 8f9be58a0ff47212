//! The docker keyring (upstream `keyring.go`): owns the index of registry locations
//! (`host[:port][/path]`, host labels may be globs such as `*.example.com`) and the credentials
//! configured for each. Receives docker configs ([`BasicDockerKeyring::add`]); emits, for an
//! image repository (`registry/path/name`, no tag), every matching credential, most specific
//! location first ([`BasicDockerKeyring::lookup`]).
//!
//! Matching as upstream `URLsMatch`: same port, same number of host labels with each label
//! matching as a `filepath.Match` glob, and the location's path a string prefix of the image's
//! path. The index is sorted in reverse byte order, so `quay.io/team` comes before `quay.io`.
//! Images of Docker Hub also get the `index.docker.io` credentials when nothing else matched.

use std::collections::{BTreeSet, HashMap};

use tracing::warn;

use super::AuthConfig;
use super::config::DockerConfig;

/// Why a location or image is not a URL (upstream `url.Parse` errors, as far as they apply).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("invalid control character in URL")]
    ControlCharacter,
    #[error("invalid character {0:?} in host name")]
    HostCharacter(char),
    #[error("invalid port {0:?} after host")]
    Port(String),
    #[error("missing ']' in host")]
    Bracket,
    #[error("invalid URL escape {0:?}")]
    Escape(String),
}

/// A registry location or image without scheme (upstream `ParseSchemelessURL`): `host`
/// (with its port) and the decoded `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemelessUrl {
    pub host: String,
    pub path: String,
}

/// Parses `s` as upstream parses `"https://" + s`: fragment and query dropped, userinfo
/// dropped from the host, the port checked, the path percent-decoded.
pub fn parse_schemeless_url(s: &str) -> Result<SchemelessUrl, UrlError> {
    parse_url_after_scheme(s)
}

fn parse_url_after_scheme(s: &str) -> Result<SchemelessUrl, UrlError> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(UrlError::ControlCharacter);
    }
    let s = s.split('#').next().unwrap_or_default();
    let s = s.split('?').next().unwrap_or_default();
    let (authority, raw_path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let host = match authority.rfind('@') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    validate_host(host)?;
    Ok(SchemelessUrl {
        host: percent_decode(host)?,
        path: percent_decode(raw_path)?,
    })
}

fn valid_optional_port(p: &str) -> bool {
    match p.strip_prefix(':') {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => p.is_empty(),
    }
}

fn validate_host(host: &str) -> Result<(), UrlError> {
    let name = if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']').ok_or(UrlError::Bracket)?;
        let port = &rest[end + 1..];
        if !valid_optional_port(port) {
            return Err(UrlError::Port(port.to_owned()));
        }
        &rest[..end]
    } else if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_optional_port(port) {
            return Err(UrlError::Port(port.to_owned()));
        }
        &host[..i]
    } else {
        host
    };
    for c in name.chars() {
        let ok = c.is_ascii_alphanumeric()
            || matches!(
                c,
                '-' | '.'
                    | '_'
                    | '~'
                    | '!'
                    | '$'
                    | '&'
                    | '\''
                    | '('
                    | ')'
                    | '*'
                    | '+'
                    | ','
                    | ';'
                    | '='
                    | ':'
                    | '['
                    | ']'
                    | '<'
                    | '>'
                    | '"'
                    | '%'
            );
        if !ok {
            return Err(UrlError::HostCharacter(c));
        }
    }
    Ok(())
}

fn percent_decode(s: &str) -> Result<String, UrlError> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).unwrap_or("");
            let v = (hex.len() == 2)
                .then(|| u8::from_str_radix(hex, 16).ok())
                .flatten()
                .ok_or_else(|| {
                    UrlError::Escape(s.get(i..(i + 3).min(s.len())).unwrap_or("%").to_owned())
                })?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Host labels and port (upstream `SplitURL`: `net.SplitHostPort`, else the whole host and no
/// port).
fn split_url(url: &SchemelessUrl) -> (Vec<&str>, &str) {
    let (host, port) = split_host_port(&url.host).unwrap_or((&url.host, ""));
    (host.split('.').collect(), port)
}

fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    let i = hostport.rfind(':')?;
    if let Some(rest) = hostport.strip_prefix('[') {
        let end = rest.find(']')?;
        // "]" must be right before the last ':' (`end` is an index into `rest`).
        if end + 2 != i {
            return None;
        }
        return Some((&rest[..end], &hostport[i + 1..]));
    }
    let host = &hostport[..i];
    if host.contains(':') || host.contains('[') || host.contains(']') {
        return None;
    }
    Some((host, &hostport[i + 1..]))
}

/// Whether image location `target` matches credential location `glob` (upstream
/// `URLsMatchStr`). A glob that is not a URL or not a valid pattern matches nothing.
pub fn urls_match_str(glob: &str, target: &str) -> bool {
    match (parse_schemeless_url(glob), parse_schemeless_url(target)) {
        (Ok(g), Ok(t)) => urls_match(&g, &t),
        _ => false,
    }
}

/// Upstream `URLsMatch`.
pub fn urls_match(glob: &SchemelessUrl, target: &SchemelessUrl) -> bool {
    let (glob_parts, glob_port) = split_url(glob);
    let (target_parts, target_port) = split_url(target);
    if glob_port != target_port || glob_parts.len() != target_parts.len() {
        return false;
    }
    if !target.path.starts_with(&glob.path) {
        return false;
    }
    glob_parts
        .iter()
        .zip(&target_parts)
        .all(|(g, t)| glob_match(g, t).unwrap_or(false))
}

/// One token of a `filepath.Match` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Star,
    Any,
    Lit(char),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Tok {
    fn matches(&self, c: char) -> bool {
        match self {
            Tok::Star | Tok::Any => true,
            Tok::Lit(l) => *l == c,
            Tok::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
            }
        }
    }
}

/// The pattern is malformed (upstream `filepath.ErrBadPattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub struct BadPattern;

fn compile(pattern: &str) -> Result<Vec<Tok>, BadPattern> {
    let mut toks = Vec::new();
    let mut it = pattern.chars().peekable();
    // A class member, `\`-escapes allowed; `-` and `]` must be escaped.
    fn esc(it: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<char, BadPattern> {
        match it.next() {
            None | Some('-') | Some(']') => Err(BadPattern),
            Some('\\') => it.next().ok_or(BadPattern),
            Some(c) => Ok(c),
        }
    }
    while let Some(c) = it.next() {
        match c {
            '*' => {
                if toks.last() != Some(&Tok::Star) {
                    toks.push(Tok::Star);
                }
            }
            '?' => toks.push(Tok::Any),
            '\\' => toks.push(Tok::Lit(it.next().ok_or(BadPattern)?)),
            '[' => {
                let negated = it.peek() == Some(&'^');
                if negated {
                    it.next();
                }
                let mut ranges = Vec::new();
                loop {
                    if it.peek() == Some(&']') && !ranges.is_empty() {
                        it.next();
                        break;
                    }
                    let lo = esc(&mut it)?;
                    let hi = if it.peek() == Some(&'-') {
                        it.next();
                        esc(&mut it)?
                    } else {
                        lo
                    };
                    ranges.push((lo, hi));
                }
                toks.push(Tok::Class { negated, ranges });
            }
            c => toks.push(Tok::Lit(c)),
        }
    }
    Ok(toks)
}

/// `filepath.Match(pattern, name)` for a name without separators: `*` any run, `?` one
/// character, `[a-z]`/`[^…]` classes, `\` escapes. Linear backtracking on the last `*`, so a
/// hostile pattern cannot blow up.
pub fn glob_match(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let toks = compile(pattern)?;
    let s: Vec<char> = name.chars().collect();
    let (mut t, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if let Some(tok) = toks.get(t) {
            if *tok == Tok::Star {
                star = Some((t, i));
                t += 1;
                continue;
            }
            if tok.matches(s[i]) {
                t += 1;
                i += 1;
                continue;
            }
        }
        match star {
            Some((st, si)) => {
                t = st + 1;
                i = si + 1;
                star = Some((st, si + 1));
            }
            None => return Ok(false),
        }
    }
    while toks.get(t) == Some(&Tok::Star) {
        t += 1;
    }
    Ok(t == toks.len())
}

/// Docker Hub's credential key (upstream `defaultRegistryHost`).
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// Whether `image` is pulled from Docker Hub (upstream `isDefaultRegistryMatch`).
fn is_default_registry_match(image: &str) -> bool {
    let mut parts = image.splitn(2, '/');
    let first = parts.next().unwrap_or_default();
    if first.is_empty() {
        return false;
    }
    if parts.next().is_none() {
        return true;
    }
    if first == "docker.io" || first == DEFAULT_REGISTRY_HOST {
        return true;
    }
    !first.contains(['.', ':'])
}

/// Credentials by registry location (upstream `BasicDockerKeyring`).
#[derive(Debug, Default, Clone)]
pub struct BasicDockerKeyring {
    /// Locations, deduplicated, in reverse byte order (most specific first).
    index: Vec<String>,
    creds: HashMap<String, Vec<AuthConfig>>,
}

impl BasicDockerKeyring {
    /// Adds every entry of `cfg`. An entry whose location is not a URL is skipped with a
    /// warning naming the location (never the credentials).
    pub fn add(&mut self, cfg: &DockerConfig) {
        for (loc, entry) in cfg {
            let rest = loc
                .strip_prefix("https://")
                .or_else(|| loc.strip_prefix("http://"))
                .unwrap_or(loc);
            let parsed = match parse_url_after_scheme(rest) {
                Ok(p) => p,
                Err(e) => {
                    warn!(entry = %loc.escape_debug(), error = %e, "entry in dockercfg invalid, ignoring");
                    continue;
                }
            };
            // `/v1/` and `/v2/` mean the registry itself, as docker's ResolveAuthConfig does.
            let path = if parsed.path.starts_with("/v2/") || parsed.path.starts_with("/v1/") {
                &parsed.path[3..]
            } else {
                parsed.path.as_str()
            };
            let key = if path.is_empty() || path == "/" {
                parsed.host.clone()
            } else {
                format!("{}{path}", parsed.host)
            };
            self.creds.entry(key.clone()).or_default().push(AuthConfig {
                username: entry.username.clone(),
                password: entry.password.clone(),
            });
            self.index.push(key);
        }
        let unique: BTreeSet<String> = self.index.drain(..).collect();
        self.index = unique.into_iter().rev().collect();
    }

    /// Every credential whose location matches `image` (a repository without tag, e.g.
    /// `127.0.0.1:5000/team/app`), most specific location first; Docker Hub images fall back
    /// to the `index.docker.io` credentials (upstream `Lookup`).
    pub fn lookup(&self, image: &str) -> Vec<AuthConfig> {
        let Ok(target) = parse_schemeless_url(image) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for key in &self.index {
            let Ok(glob) = parse_schemeless_url(key) else {
                continue;
            };
            if urls_match(&glob, &target)
                && let Some(c) = self.creds.get(key)
            {
                found.extend(c.iter().cloned());
            }
        }
        if found.is_empty()
            && is_default_registry_match(image)
            && let Some(c) = self.creds.get(DEFAULT_REGISTRY_HOST)
        {
            found.extend(c.iter().cloned());
        }
        found
    }

    /// Whether no credential was added.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The locations, most specific first (for tests and diagnostics; no credentials).
    pub fn locations(&self) -> &[String] {
        &self.index
    }
}

#[cfg(test)]
#[path = "keyring_tests.rs"]
mod tests;
