//! The house rules of docs/architecture.md, checked on the sources: (1) the crates are layers
//! and a crate depends only on crates below it (Cargo refuses cycles; this also refuses an
//! arrow that skips upward without one); (2) inside a crate, no import circle spans more than
//! three files. Reads `Cargo.toml` and `src/**.rs` of every layer crate; emits a failure that
//! names the offending dependency or the files of the circle with their arrows.
//!
//! What counts as an import: a path through `crate::`, `super::` or `self::` (in `use` trees,
//! nested braces included, and in qualified paths in code) and a bare `child::` path to one of
//! the file's own submodules. Not counted: a module's references to its own submodules (a
//! parent declares, re-exports and assembles its children), test code (`tests.rs`,
//! `*_tests.rs`, `*_testutil.rs`, `*_testdata.rs`, `testutil.rs`, and everything from a
//! `#[cfg(test)] mod … {` to the end of a file), and re-exports of other crates (they are
//! not files of this crate).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layer crates, lowest first: a crate may depend on the ones before it only.
const LAYERS: &[(&str, &str)] = &[
    ("rkubelet-config", "crates/config"),
    ("rkubelet-core", "crates/core"),
    ("rkubelet-client", "crates/client"),
    ("rkubelet-node", "crates/node"),
    ("rkubelet-pods", "crates/pods"),
    ("rkubelet-kubelet", "crates/kubelet"),
    ("rkubelet", "crates/rkubelet"),
];

/// Protocol and fixture crates beside the layers: they may depend on no layer crate.
const BESIDE: &[(&str, &str)] = &[
    ("rkubelet-cri", "crates/cri"),
    ("fake-apiserver", "crates/fake-apiserver"),
];

/// The longest import circle a crate may hold (files).
const MAX_CIRCLE: usize = 3;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `rkubelet-*` / `fake-apiserver` package names a Cargo.toml depends on, in any
/// dependency table (normal, dev, build).
fn internal_deps(manifest: &str) -> BTreeSet<String> {
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.contains("dependencies");
            continue;
        }
        if !in_deps {
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let name = key.trim().trim_end_matches(".workspace").trim();
        if name.starts_with("rkubelet") || name == "fake-apiserver" {
            deps.insert(name.to_owned());
        }
    }
    deps
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let root = workspace();
    let rank: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (*n, i))
        .collect();
    let mut wrong = Vec::new();
    for (i, (name, dir)) in LAYERS.iter().enumerate() {
        let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
        for dep in internal_deps(&manifest) {
            if let Some(&j) = rank.get(dep.as_str())
                && j >= i
            {
                wrong.push(format!("{name} depends on {dep}, which is not below it"));
            }
        }
    }
    for (name, dir) in BESIDE {
        let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
        for dep in internal_deps(&manifest) {
            if rank.contains_key(dep.as_str()) {
                wrong.push(format!("{name} depends on the layer crate {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

fn is_test_file(rel: &str) -> bool {
    let base = rel.rsplit('/').next().unwrap_or(rel);
    base == "tests.rs"
        || base == "testutil.rs"
        || base.ends_with("_tests.rs")
        || base.ends_with("_testutil.rs")
        || base.ends_with("_testdata.rs")
        || rel.split('/').any(|c| c == "tests")
}

/// `a/b.rs` → `[a, b]`, `a/mod.rs` → `[a]`, `lib.rs` → `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The text before the first `#[cfg(test)]` (with any further attributes) that opens an inline
/// module: test modules close their files.
fn without_tests(src: &str) -> &str {
    let mut from = 0;
    while let Some(at) = src[from..].find("#[cfg(test)]") {
        let start = from + at;
        let mut rest = &src[start + "#[cfg(test)]".len()..];
        loop {
            rest = rest.trim_start();
            if rest.starts_with("#[") {
                match rest.find(']') {
                    Some(end) => rest = &rest[end + 1..],
                    None => break,
                }
            } else {
                break;
            }
        }
        let rest = rest
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        if let Some(after_mod) = rest.strip_prefix("mod ") {
            let name_end = after_mod
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(after_mod.len());
            if after_mod[name_end..].trim_start().starts_with('{') {
                return &src[..start];
            }
        }
        from = start + 1;
    }
    src
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `use` tree or a qualified path starting at `s` names, each prefixed by `prefix`.
/// `s` begins right after the leading `crate::`, `super::` or `self::`.
fn expand(prefix: &[String], s: &str) -> (Vec<Vec<String>>, usize) {
    let b: Vec<char> = s.chars().collect();
    let (paths, used) = expand_chars(prefix, &b, 0);
    (paths, used)
}

fn expand_chars(prefix: &[String], b: &[char], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut out = Vec::new();
    let mut cur = prefix.to_vec();
    let mut tok = String::new();
    while i < b.len() {
        let c = b[i];
        if is_ident(c) {
            tok.push(c);
            i += 1;
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            if !tok.is_empty() {
                cur.push(std::mem::take(&mut tok));
            }
            i += 2;
        } else if c == '{' {
            i += 1;
            loop {
                let (sub, next) = expand_chars(&cur, b, i);
                out.extend(sub);
                i = next;
                while i < b.len() && b[i].is_whitespace() {
                    i += 1;
                }
                match b.get(i) {
                    Some(',') => i += 1,
                    Some('}') => {
                        i += 1;
                        break;
                    }
                    _ => break,
                }
                while i < b.len() && b[i].is_whitespace() {
                    i += 1;
                }
                if b.get(i) == Some(&'}') {
                    i += 1;
                    break;
                }
            }
            return (out, i);
        } else if c.is_whitespace() && tok.is_empty() {
            i += 1;
        } else {
            break;
        }
    }
    if !tok.is_empty() {
        cur.push(tok);
    }
    out.push(cur);
    (out, i)
}

struct CrateGraph {
    /// Module path → file (non-test files only).
    files: BTreeMap<Vec<String>, String>,
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn rs_files(dir: &Path, base: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            out.push(rel);
        }
    }
}

fn crate_graph(src: &Path) -> CrateGraph {
    let mut all = Vec::new();
    rs_files(src, src, &mut all);
    all.sort();
    let files: BTreeMap<Vec<String>, String> = all
        .iter()
        .filter(|r| !is_test_file(r))
        .map(|r| (module_path(r), r.clone()))
        .collect();
    let resolve = |path: &[String]| -> Option<&String> {
        (1..=path.len())
            .rev()
            .find_map(|n| files.get(&path[..n]))
            .or_else(|| path.is_empty().then(|| files.get(path)).flatten())
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (me, rel) in &files {
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        let code = without_tests(&text);
        let mut targets = BTreeSet::new();
        for (kw, base) in [
            ("crate::", Vec::new()),
            ("super::", me[..me.len().saturating_sub(1)].to_vec()),
            ("self::", me.clone()),
        ] {
            let mut from = 0;
            while let Some(at) = code[from..].find(kw) {
                let start = from + at;
                from = start + kw.len();
                let before = code[..start].chars().next_back();
                if before.is_some_and(|c| is_ident(c) || c == ':') {
                    continue;
                }
                let (paths, _) = expand(&base, &code[from..]);
                for p in paths {
                    if let Some(f) = resolve(&p) {
                        targets.insert(f.clone());
                    }
                }
            }
        }
        // Bare paths to own submodules: `child::item`.
        for (path, f) in &files {
            if path.len() == me.len() + 1 && path[..me.len()] == me[..] {
                let needle = format!("{}::", path[me.len()]);
                let mut from = 0;
                while let Some(at) = code[from..].find(&needle) {
                    let start = from + at;
                    from = start + needle.len();
                    let before = code[..start].chars().next_back();
                    if !before.is_some_and(|c| is_ident(c) || c == ':') {
                        targets.insert(f.clone());
                        break;
                    }
                }
            }
        }
        // A module's references to its own descendants do not count.
        targets.retain(|t| {
            let tp = module_path(t);
            t != rel && !(tp.len() > me.len() && tp[..me.len()] == me[..])
        });
        edges.insert(rel.clone(), targets);
    }
    CrateGraph { files, edges }
}

/// Strongly connected components (Tarjan, iterative).
fn components(g: &CrateGraph) -> Vec<Vec<String>> {
    let nodes: Vec<&String> = g.files.values().collect();
    let index_of: BTreeMap<&String, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            g.edges
                .get(*n)
                .map(|s| s.iter().filter_map(|t| index_of.get(t).copied()).collect())
                .unwrap_or_default()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut k)) = work.last_mut() {
            if *k == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = succ[v].get(*k) {
                *k += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    comp.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                comp.sort();
                out.push(comp);
            }
        }
    }
    out
}

#[test]
fn no_import_circle_spans_more_than_three_files() {
    let root = workspace();
    let mut report = Vec::new();
    for (name, dir) in LAYERS {
        let g = crate_graph(&root.join(dir).join("src"));
        assert!(
            !g.files.is_empty(),
            "{name}: no sources found under {dir}/src"
        );
        for comp in components(&g).into_iter().filter(|c| c.len() > MAX_CIRCLE) {
            let set: BTreeSet<&String> = comp.iter().collect();
            let arrows: Vec<String> = comp
                .iter()
                .map(|f| {
                    let to: Vec<&String> = g.edges[f].iter().filter(|t| set.contains(t)).collect();
                    format!("    {f} -> {to:?}")
                })
                .collect();
            report.push(format!(
                "{name}: {} files in one import circle:\n{}",
                comp.len(),
                arrows.join("\n")
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The checker itself sees a circle where there is one and follows nested `use` trees.
#[test]
fn the_checker_finds_a_planted_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("m")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod m;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use crate::{b::B, m::{c::C}};\npub struct A;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() { let _ = crate::m::d::D; }\n",
    )
    .unwrap();
    std::fs::write(src.join("m/mod.rs"), "pub mod c;\npub mod d;\n").unwrap();
    std::fs::write(src.join("m/c.rs"), "pub struct C;\nuse super::d::D;\n").unwrap();
    std::fs::write(
        src.join("m/d.rs"),
        "pub struct D;\nuse crate::a::A;\n#[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n    use crate::b::B;\n}\n",
    )
    .unwrap();
    let g = crate_graph(src);
    let big: Vec<Vec<String>> = components(&g).into_iter().filter(|c| c.len() > 1).collect();
    // a → b → m/d → a, a → m/c → m/d; m/mod.rs → its children does not count.
    assert_eq!(big, vec![vec!["a.rs", "b.rs", "m/c.rs", "m/d.rs"]]);
    assert!(
        !g.edges["m/d.rs"].contains("b.rs"),
        "test code is not counted"
    );
}
