//! Image names and identities for the fake runtime: containerd-style reference normalization
//! (`busybox` → `docker.io/library/busybox:latest`), deterministic `sha256:` IDs and repo
//! digests per name, and the image store (resolve by tag, digest or ID).

use crate::api;

/// Normalizes an image reference as containerd's CRI plugin does (docker reference rules).
/// IDs (`sha256:<hex>`) are returned unchanged. Errors name what is wrong with the reference.
pub fn normalize_image(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("empty image reference".to_string());
    }
    if name.starts_with("sha256:") {
        return Ok(name.to_string());
    }
    if name.chars().any(|c| c.is_whitespace()) || name.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "invalid reference format: repository name must be lowercase: {name:?}"
        ));
    }
    let (named, digest) = match name.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (name, None),
    };
    let (domain, rest) = match named.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, rest.to_string())
        }
        _ => ("docker.io", named.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let rest = if domain == "docker.io" && !rest.contains('/') {
        format!("library/{rest}")
    } else {
        rest
    };
    if rest.is_empty() || rest.ends_with('/') || rest.ends_with(':') {
        return Err(format!("invalid reference format: {name:?}"));
    }
    let last = rest.rsplit('/').next().unwrap_or_default();
    let has_tag = last.contains(':');
    let mut out = format!("{domain}/{rest}");
    if !has_tag && digest.is_none() {
        out.push_str(":latest");
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    Ok(out)
}

/// The repository part of a normalized reference (no tag, no digest).
fn repository(normalized: &str) -> &str {
    let named = normalized.split('@').next().unwrap_or(normalized);
    match named.rfind(':') {
        Some(i) if !named[i..].contains('/') => &named[..i],
        _ => named,
    }
}

/// 64 hex characters derived deterministically from `seed`.
pub fn hex64(seed: &str) -> String {
    // FNV-1a, then splitmix64 to spread it over four words.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (0..4u64)
        .map(|i| format!("{:016x}", splitmix64(h.wrapping_add(i))))
        .collect()
}

/// One step of splitmix64: a well-mixed 64-bit value for `x`.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An image present in the fake runtime.
#[derive(Debug, Clone)]
pub struct ImageRec {
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size: u64,
}

impl ImageRec {
    /// The image a pull of `normalized` would produce: ID and digest derived from the name.
    pub fn for_name(normalized: &str) -> Self {
        let repo = repository(normalized);
        let digest = format!("{repo}@sha256:{}", hex64(&format!("digest:{normalized}")));
        let tags = if normalized.contains('@') {
            Vec::new()
        } else {
            vec![normalized.to_string()]
        };
        let id = format!("sha256:{}", hex64(normalized));
        let size = 1_000_000 + splitmix64(id.len() as u64 ^ hex_prefix(&id)) % 4_000_000;
        Self {
            id,
            repo_tags: tags,
            repo_digests: vec![digest],
            size,
        }
    }

    pub fn to_api(&self) -> api::Image {
        api::Image {
            id: self.id.clone(),
            repo_tags: self.repo_tags.clone(),
            repo_digests: self.repo_digests.clone(),
            size: self.size,
            uid: None,
            username: String::new(),
            spec: None,
            pinned: false,
        }
    }
}

fn hex_prefix(id: &str) -> u64 {
    let hex = id.trim_start_matches("sha256:");
    u64::from_str_radix(hex.get(..16).unwrap_or("0"), 16).unwrap_or(0)
}

/// The images present, in insertion order.
#[derive(Debug, Default)]
pub struct ImageStore {
    images: Vec<ImageRec>,
}

impl ImageStore {
    /// Index of the image `reference` names (tag, digest reference, or ID), if present.
    fn index_of(&self, reference: &str) -> Option<usize> {
        if let Some(i) = self.images.iter().position(|im| im.id == reference) {
            return Some(i);
        }
        let normalized = normalize_image(reference).ok()?;
        self.images.iter().position(|im| {
            im.id == normalized
                || im.repo_tags.contains(&normalized)
                || im.repo_digests.contains(&normalized)
        })
    }

    pub fn get(&self, reference: &str) -> Option<&ImageRec> {
        self.index_of(reference).map(|i| &self.images[i])
    }

    /// Adds the image for `name` (normalized); a no-op if it is already present.
    pub fn add(&mut self, name: &str) -> Result<&ImageRec, String> {
        let normalized = normalize_image(name)?;
        if let Some(i) = self.index_of(&normalized) {
            return Ok(&self.images[i]);
        }
        self.images.push(ImageRec::for_name(&normalized));
        let last = self.images.len() - 1;
        Ok(&self.images[last])
    }

    /// Removes the image `reference` names with all its tags; `false` if it was absent.
    pub fn remove(&mut self, reference: &str) -> bool {
        match self.index_of(reference) {
            Some(i) => {
                self.images.remove(i);
                true
            }
            None => false,
        }
    }

    pub fn all(&self) -> &[ImageRec] {
        &self.images
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_containerd() {
        let cases = [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox", "docker.io/library/busybox:latest"),
            (
                "docker.io/library/busybox:latest",
                "docker.io/library/busybox:latest",
            ),
            (
                "index.docker.io/library/busybox",
                "docker.io/library/busybox:latest",
            ),
            ("user/app:v1", "docker.io/user/app:v1"),
            ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
            ("localhost:5000/app", "localhost:5000/app:latest"),
            ("localhost/app", "localhost/app:latest"),
            (
                "busybox@sha256:abcd",
                "docker.io/library/busybox@sha256:abcd",
            ),
            ("sha256:0123", "sha256:0123"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_image(input).as_deref(), Ok(want), "{input}");
        }
        for bad in ["", "BusyBox", "bad name", "docker.io/"] {
            assert!(normalize_image(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_and_digests_are_deterministic_per_name() {
        let a = ImageRec::for_name("docker.io/library/busybox:latest");
        let b = ImageRec::for_name("docker.io/library/busybox:latest");
        let c = ImageRec::for_name("docker.io/library/nginx:latest");
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        assert_eq!(a.id.len(), "sha256:".len() + 64);
        assert!(a.repo_digests[0].starts_with("docker.io/library/busybox@sha256:"));
        assert!(a.size > 0);
    }

    #[test]
    fn store_resolves_tag_short_name_id_and_digest() {
        let mut store = ImageStore::default();
        let rec = store.add("busybox").expect("valid").clone();
        assert_eq!(
            store
                .add("docker.io/library/busybox:latest")
                .map(|r| r.id.clone()),
            Ok(rec.id.clone())
        );
        assert_eq!(store.all().len(), 1);
        for r in [
            "busybox",
            "busybox:latest",
            rec.id.as_str(),
            rec.repo_digests[0].as_str(),
        ] {
            assert_eq!(store.get(r).map(|i| &i.id), Some(&rec.id), "{r}");
        }
        assert!(store.get("busybox:1.0").is_none());
        assert!(store.remove("busybox"));
        assert!(!store.remove("busybox"));
        assert!(store.get(&rec.id).is_none());
    }
}
