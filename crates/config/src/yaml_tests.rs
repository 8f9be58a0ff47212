#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

/// Ten levels of ten references each: 10^10 nodes if expanded.
pub(crate) fn nested_anchors() -> String {
    let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    s.push_str("top: *a9\n");
    s
}

/// One 1 MiB scalar referenced 2,000 times: ~2 GiB if expanded, ~8 KiB of references.
pub(crate) fn large_anchor() -> String {
    let mut s = format!("big: &big \"{}\"\nrefs:\n", "x".repeat(1 << 20));
    for _ in 0..2_000 {
        s.push_str("- *big\n");
    }
    s
}

/// 10,000 nested flow sequences.
pub(crate) fn deep_nesting() -> String {
    format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))
}

/// 1,000 nested block mappings (500 KB of indentation).
pub(crate) fn deep_block_nesting() -> String {
    let mut s = String::new();
    for i in 0..1_000 {
        s.push_str(&" ".repeat(i));
        s.push_str("k:\n");
    }
    s
}

#[test]
fn the_billion_laughs_family_is_refused_quickly() {
    for (name, text) in [
        ("nested anchors", nested_anchors()),
        ("large anchor", large_anchor()),
        ("deep flow nesting", deep_nesting()),
        ("deep block nesting", deep_block_nesting()),
    ] {
        let start = Instant::now();
        let err = documents::<Value>(&text).unwrap_err().to_string();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{name}: took {:?}",
            start.elapsed()
        );
        assert!(
            err.contains("budget") || err.contains("limit") || err.contains("depth"),
            "{name}: {err}"
        );
        let one = from_str::<Value>(&text).unwrap_err().to_string();
        assert!(!one.is_empty(), "{name}");
    }
}

#[test]
fn ordinary_anchors_and_merge_keys_still_work() {
    let text = "base: &b {image: nginx, tty: true}\nc:\n  <<: *b\n  name: web\nlist: [*b, *b]\n";
    let v: Value = from_str(text).unwrap();
    assert_eq!(v["c"]["image"], "nginx");
    assert_eq!(v["c"]["name"], "web");
    assert_eq!(v["list"][1]["tty"], true);
}

#[test]
fn scalars_resolve_as_yaml_1_2() {
    let v: Value =
        from_str("a: yes\nb: 0644\nc: 1_000\nd: 0x10\ne: true\nf: 1.5\ng: ~\nh: 12\n").unwrap();
    assert_eq!(v["a"], "yes");
    assert_eq!(v["b"], "0644");
    assert_eq!(v["c"], "1_000");
    assert_eq!(v["d"], 16);
    assert_eq!(v["e"], true);
    assert_eq!(v["f"], 1.5);
    assert!(v["g"].is_null());
    assert_eq!(v["h"], 12);
}

#[test]
fn multiple_documents_and_duplicates() {
    let docs: Vec<Value> = documents("---\na: 1\n---\n---\nb: 2\n").unwrap();
    assert_eq!(docs.len(), 2);
    let err = from_str::<Value>("a: 1\na: 2\n").unwrap_err().to_string();
    assert!(err.contains("a"), "{err}");
}

#[test]
fn round_trip() {
    let v = serde_json::json!({"name": "x", "list": [1, "two"], "m": {"k": "v: w"}});
    let text = to_string(&v).unwrap();
    let back: Value = from_str(&text).unwrap();
    assert_eq!(back, v);
}
