//! `cargo xtask tidy`: checks that ARCHITECTURE.md's map is true of the code.
//!
//! The map's "Layers" block (a fenced block tagged `layers` in ARCHITECTURE.md) is the one source:
//! - `CRATE: DEP DEP …` lines list the invar crates each workspace crate uses as normal (non-dev)
//!   dependencies, exactly: a dependency the map does not list fails, and so does a listed one the
//!   crate no longer has (the map must stay true both ways);
//! - `only EXTERNAL: CRATE CRATE …` lines say which crates may depend on an external crate at all
//!   (clap, terminals, candle…), in any dependency kind;
//! - `unsafe: PATH PATH …` lists the only files where an `unsafe` block or function may appear.
//!
//! On top of the map, every `.rs` file of the workspace opens with a `//!` line.
//! The check functions are pure (they take the parsed map, the dependency graph and the sources) so
//! their own tests can hand them a crossing layer and see them fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The parsed `layers` block of ARCHITECTURE.md.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Map {
    /// crate → the invar crates it may use (normal dependencies), exactly.
    pub layers: BTreeMap<String, BTreeSet<String>>,
    /// external crate → the crates allowed to depend on it.
    pub only: BTreeMap<String, BTreeSet<String>>,
    /// files (relative to the workspace root) allowed to contain `unsafe`.
    pub unsafe_files: BTreeSet<String>,
}

/// One workspace crate's dependencies, as `cargo metadata` gives them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Deps {
    /// Normal and build dependencies.
    pub normal: BTreeSet<String>,
    /// Dev dependencies.
    pub dev: BTreeSet<String>,
}

pub fn run(args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        bail!("`cargo xtask tidy` takes no arguments (got `{a}`)");
    }
    let root = crate::workspace_root();
    let map_text =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).context("reading ARCHITECTURE.md")?;
    let map = parse_map(&map_text).context("ARCHITECTURE.md's `layers` block")?;
    let deps = workspace_deps(&root)?;
    let sources = rust_sources(&root)?;

    let mut problems = Vec::new();
    problems.extend(check_layers(&map, &deps));
    problems.extend(check_only(&map, &deps));
    for (path, text) in &sources {
        problems.extend(check_source(&map, path, text));
    }
    if problems.is_empty() {
        eprintln!(
            "tidy: {} crates and {} source files match ARCHITECTURE.md",
            deps.len(),
            sources.len()
        );
        return Ok(());
    }
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    bail!(
        "{} problem(s): fix the code, or change ARCHITECTURE.md's map if the boundary moved on purpose",
        problems.len()
    )
}

/// Parses the fenced block that starts with "```layers".
pub fn parse_map(text: &str) -> Result<Map> {
    let mut lines = text.lines().enumerate();
    if !lines.by_ref().any(|(_, l)| l.trim() == "```layers") {
        bail!("no fenced block starting with ```layers");
    }
    let mut map = Map::default();
    for (i, line) in lines {
        let line = line.trim();
        if line == "```" {
            return Ok(map);
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, values)) = line.split_once(':') else {
            bail!("line {}: expected `NAME: NAME …`, found {line:?}", i + 1);
        };
        let values: BTreeSet<String> = values.split_whitespace().map(str::to_owned).collect();
        let key = key.trim();
        let fresh = if key == "unsafe" {
            let n = map.unsafe_files.len();
            map.unsafe_files.extend(values);
            map.unsafe_files.len() > n
        } else if let Some(ext) = key.strip_prefix("only ") {
            map.only.insert(ext.trim().to_owned(), values).is_none()
        } else {
            map.layers.insert(key.to_owned(), values).is_none()
        };
        if !fresh {
            bail!("line {}: {key:?} is given twice", i + 1);
        }
    }
    bail!("the ```layers block is not closed")
}

/// Every crate's normal invar dependencies equal the map's line for it; every crate has a line.
pub fn check_layers(map: &Map, deps: &BTreeMap<String, Deps>) -> Vec<String> {
    let mut problems = Vec::new();
    for (krate, d) in deps {
        let Some(allowed) = map.layers.get(krate) else {
            problems.push(format!("crate {krate} has no line in the map"));
            continue;
        };
        let uses: BTreeSet<&String> = d.normal.iter().filter(|n| deps.contains_key(*n)).collect();
        for dep in &uses {
            if !allowed.contains(*dep) {
                problems.push(format!(
                    "{krate} depends on {dep}, which the map does not allow (a layer is crossed)"
                ));
            }
        }
        for dep in allowed {
            if !uses.contains(dep) {
                problems.push(format!(
                    "the map says {krate} uses {dep}, but it does not depend on it (stale map)"
                ));
            }
        }
    }
    for krate in map.layers.keys() {
        if !deps.contains_key(krate) {
            problems.push(format!(
                "the map names {krate}, which is not a workspace crate"
            ));
        }
    }
    problems
}

/// External crates restricted by `only` lines appear (in any dependency kind) only where allowed.
pub fn check_only(map: &Map, deps: &BTreeMap<String, Deps>) -> Vec<String> {
    let mut problems = Vec::new();
    for (krate, d) in deps {
        for dep in d.normal.iter().chain(&d.dev) {
            if let Some(allowed) = map.only.get(dep) {
                if !allowed.contains(krate) {
                    problems.push(format!(
                        "{krate} depends on {dep}, which only {} may use",
                        allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    problems
}

/// One source file: opens with `//!`, and holds `unsafe` code only if the map allows its path.
pub fn check_source(map: &Map, path: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.starts_with("//!") {
        problems.push(format!(
            "{path}: does not open with a `//!` line saying what it is for"
        ));
    }
    if !map.unsafe_files.contains(path) {
        for line in unsafe_lines(text) {
            problems.push(format!(
                "{path}:{line}: `unsafe` outside the files the map allows"
            ));
        }
    }
    problems
}

/// The 1-based lines where the `unsafe` keyword appears in code: a small lexer skips comments
/// (line, nested block), strings (with escapes, raw strings `r#"…"#`, byte strings) and char literals.
fn unsafe_lines(text: &str) -> Vec<usize> {
    let c: Vec<char> = text.chars().collect();
    let mut lines = Vec::new();
    let (mut i, mut line) = (0, 1);
    let mut word = String::new();
    let flush = |word: &mut String, line: usize, lines: &mut Vec<usize>| {
        if word == "unsafe" && lines.last() != Some(&line) {
            lines.push(line);
        }
        word.clear();
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied().unwrap_or('\0');
        // Raw strings: r"…", r#"…"#, br#"…"# (only where a word starts with r / br).
        if (word.is_empty() || word == "b") && ch == 'r' && (next == '"' || next == '#') {
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) == Some(&'"') {
                word.clear();
                j += 1;
                'raw: while j < c.len() {
                    if c[j] == '\n' {
                        line += 1;
                    }
                    if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break 'raw;
                    }
                    j += 1;
                }
                i = j;
                continue;
            }
        }
        if ch.is_alphanumeric() || ch == '_' {
            word.push(ch);
            i += 1;
            continue;
        }
        flush(&mut word, line, &mut lines);
        match ch {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if next == '/' => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == '*' => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if c[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '\'' => {
                // A char literal ('x', '\n', '\'', '\u{…}') or a lifetime ('a).
                if next == '\\' {
                    i += 2;
                    while i < c.len() && c[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    flush(&mut word, line, &mut lines);
    lines
}

/// The workspace crates and their dependencies' names, from `cargo metadata`.
fn workspace_deps(root: &Path) -> Result<BTreeMap<String, Deps>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .with_context(|| format!("could not start `{cargo} metadata`"))?;
    if !out.status.success() {
        bail!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading `cargo metadata` output")?;
    let mut deps = BTreeMap::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str() else {
            continue;
        };
        if name == "xtask" {
            continue;
        }
        let mut d = Deps::default();
        for dep in p["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default().to_owned();
            match dep["kind"].as_str() {
                Some("dev") => d.dev.insert(dep_name),
                _ => d.normal.insert(dep_name),
            };
        }
        deps.insert(name.to_owned(), d);
    }
    Ok(deps)
}

/// Every tracked-looking `.rs` file under `crates/` and `xtask/` (skipping `target/` folders), with
/// its path relative to the root.
fn rust_sources(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = vec![root.join("crates"), root.join("xtask")];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let rel = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace('\\', "/");
                files.push((rel, text));
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = "text\n```layers\n# comment\nio:\nops: io\ncli: io ops\nonly clap: cli\nunsafe: crates/ops/src/gemm.rs\n```\nmore";

    fn deps(normal: &[&str], dev: &[&str]) -> Deps {
        Deps {
            normal: normal.iter().map(|s| s.to_string()).collect(),
            dev: dev.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn graph() -> BTreeMap<String, Deps> {
        BTreeMap::from([
            ("io".to_owned(), deps(&["serde"], &[])),
            ("ops".to_owned(), deps(&["io", "candle"], &[])),
            ("cli".to_owned(), deps(&["io", "ops", "clap"], &[])),
        ])
    }

    #[test]
    fn the_true_map_passes() -> Result<()> {
        let map = parse_map(MAP)?;
        assert_eq!(map.layers.len(), 3);
        assert!(check_layers(&map, &graph()).is_empty());
        assert!(check_only(&map, &graph()).is_empty());
        Ok(())
    }

    #[test]
    fn an_upward_dependency_fails() -> Result<()> {
        let map = parse_map(MAP)?;
        let mut g = graph();
        g.insert("io".to_owned(), deps(&["ops"], &[]));
        let p = check_layers(&map, &g);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("io depends on ops"), "{p:?}");
        Ok(())
    }

    #[test]
    fn a_stale_map_line_fails() -> Result<()> {
        let map = parse_map(MAP)?;
        let mut g = graph();
        g.insert("cli".to_owned(), deps(&["io", "clap"], &[]));
        let p = check_layers(&map, &g);
        assert!(p.iter().any(|p| p.contains("stale map")), "{p:?}");
        g.insert("new".to_owned(), deps(&[], &[]));
        let p = check_layers(&map, &g);
        assert!(p.iter().any(|p| p.contains("new has no line")), "{p:?}");
        Ok(())
    }

    #[test]
    fn a_restricted_crate_outside_its_place_fails_even_as_dev_dependency() -> Result<()> {
        let map = parse_map(MAP)?;
        let mut g = graph();
        g.insert("ops".to_owned(), deps(&["io"], &["clap"]));
        let p = check_only(&map, &g);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("ops depends on clap"), "{p:?}");
        Ok(())
    }

    #[test]
    fn sources_need_a_doc_line_and_unsafe_only_where_allowed() -> Result<()> {
        let map = parse_map(MAP)?;
        assert!(check_source(&map, "a.rs", "//! fine\nfn f() {}\n").is_empty());
        assert_eq!(check_source(&map, "a.rs", "fn f() {}\n").len(), 1);
        let bad = "//! x\nfn f() { unsafe { g() } }\n";
        let p = check_source(&map, "crates/io/src/a.rs", bad);
        assert!(p.len() == 1 && p[0].contains(":2:"), "{p:?}");
        assert!(check_source(&map, "crates/ops/src/gemm.rs", bad).is_empty());
        // Words in comments, strings and identifiers are not code.
        let ok =
            "//! unsafe in the doc\n// unsafe { }\nlet s = \"unsafe {\"; let unsafe_code = 1;\n\
                  let t = \"a\n  unsafe {\\\" unsafe\"; /* unsafe /* unsafe */ unsafe */\n\
                  let r = r#\"unsafe \"quoted\" \"#; let q = '\"'; let e = '\\''; fn f<'a>() {}\n";
        assert!(
            check_source(&map, "a.rs", ok).is_empty(),
            "{:?}",
            check_source(&map, "a.rs", ok)
        );
        // Code after a string, a lifetime or a char literal is still seen.
        let late = "//! x\nlet q = '\"'; fn g<'a>(x: &'a u8) {}\nlet s = \"x\";\nunsafe { h() }\n";
        assert_eq!(check_source(&map, "b.rs", late).len(), 1);
        Ok(())
    }

    #[test]
    fn malformed_maps_are_refused() {
        assert!(parse_map("no block").is_err());
        assert!(parse_map("```layers\nio:\n").is_err());
        assert!(parse_map("```layers\nio:\nio: ops\n```").is_err());
        assert!(parse_map("```layers\njust words\n```").is_err());
    }
}
