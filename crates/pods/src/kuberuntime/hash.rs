//! kuberuntime::hash — the container spec hash stored in the `io.kubernetes.container.hash`
//! annotation. Receives a `v1.Container`, emits a `u64`. Pure.
//!
//! Upstream (`kubecontainer.HashContainer`, v1.31+) hashes only the fields a running container
//! can be changed through — `name` and `image` — so that resources (in-place resize), probes,
//! env and the rest never restart a container. The bytes hashed are exactly upstream's: the Go
//! JSON encoding of `{"image":…,"name":…}`, printed the way `dump.ForHash` prints a `[]byte`
//! (`([]uint8)[123 34 …]`), fed to 32-bit FNV-1a. Matching upstream bit for bit means containers
//! created by the Go kubelet are not restarted when rkubelet takes over the node.

use k8s_openapi::api::core::v1::Container;

/// The upstream-compatible hash of a container spec (`name` and `image` only).
pub fn hash_container(c: &Container) -> u64 {
    let json = fields_json(&c.name, c.image.as_deref().unwrap_or_default());
    let mut printed = String::with_capacity(11 + json.len() * 4);
    printed.push_str("([]uint8)[");
    for (i, b) in json.bytes().enumerate() {
        if i > 0 {
            printed.push(' ');
        }
        printed.push_str(&b.to_string());
    }
    printed.push(']');
    u64::from(fnv1a32(printed.as_bytes()))
}

/// The hash as upstream writes it into the container annotation (lower-case hex).
pub fn hash_container_hex(c: &Container) -> String {
    format!("{:x}", hash_container(c))
}

/// `json.Marshal(map[string]string{"name": name, "image": image})`: keys sorted.
fn fields_json(name: &str, image: &str) -> String {
    let mut out = String::from("{\"image\":");
    push_go_json_string(&mut out, image);
    out.push_str(",\"name\":");
    push_go_json_string(&mut out, name);
    out.push('}');
    out
}

/// Encodes a string the way Go's `encoding/json` does (HTML-safe escaping included).
fn push_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(ch)));
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn matches_upstream_reference_value() {
        // Upstream container_hash_test.go (v1.31+): name "test_container", image "foo/image:v1".
        let mut c = container("test_container", "foo/image:v1");
        c.command = Some(vec!["/bin/testcmd".into()]);
        c.env = Some(vec![EnvVar {
            name: "ENV_FOO".into(),
            value: Some("bar".into()),
            ..Default::default()
        }]);
        assert_eq!(hash_container(&c), 0x8e45_cbd0);
        assert_eq!(hash_container_hex(&c), "8e45cbd0");
    }

    #[test]
    fn stable_and_sensitive_to_name_and_image_only() {
        let base = container("c", "busybox:1.36");
        assert_eq!(hash_container(&base), hash_container(&base.clone()));

        let other_image = container("c", "busybox:1.37");
        assert_ne!(hash_container(&base), hash_container(&other_image));
        let other_name = container("d", "busybox:1.36");
        assert_ne!(hash_container(&base), hash_container(&other_name));

        // Upstream excludes everything else (resources for in-place resize, command, env…).
        let mut changed = base.clone();
        changed.command = Some(vec!["sleep".into(), "1".into()]);
        changed.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("cpu".into(), Quantity("1".into()))])),
            ..Default::default()
        });
        assert_eq!(hash_container(&base), hash_container(&changed));
    }

    #[test]
    fn go_json_escaping() {
        assert_eq!(
            fields_json("a\"b", "x<y>&\u{1}"),
            "{\"image\":\"x\\u003cy\\u003e\\u0026\\u0001\",\"name\":\"a\\\"b\"}"
        );
    }
}
