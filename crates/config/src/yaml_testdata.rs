//! Hostile YAML documents for tests of every reader built on [`crate::yaml`] (here and, with the
//! `test-util` feature, in other crates): alias bombs, one huge anchor, deep nesting.

/// Ten levels of ten references each: 10^10 nodes if expanded.
pub fn nested_anchors() -> String {
    let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    s.push_str("top: *a9\n");
    s
}

/// One 1 MiB scalar referenced 2,000 times: ~2 GiB if expanded, ~8 KiB of references.
pub fn large_anchor() -> String {
    let mut s = format!("big: &big \"{}\"\nrefs:\n", "x".repeat(1 << 20));
    for _ in 0..2_000 {
        s.push_str("- *big\n");
    }
    s
}

/// 10,000 nested flow sequences.
pub fn deep_nesting() -> String {
    format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))
}

/// 1,000 nested block mappings (500 KB of indentation).
pub fn deep_block_nesting() -> String {
    let mut s = String::new();
    for i in 0..1_000 {
        s.push_str(&" ".repeat(i));
        s.push_str("k:\n");
    }
    s
}
