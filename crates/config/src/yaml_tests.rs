use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

use super::testdata::{deep_block_nesting, deep_nesting, large_anchor, nested_anchors};

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
