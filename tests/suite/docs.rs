//! The documents stay walkable: every `ENGINE_SPEC §N` that code or docs cite is a section of
//! docs/engines/ENGINE_SPEC.md, every `docs/…` path that code, tests or data files cite exists,
//! every relative link of README.md, ARCHITECTURE.md and docs/ reaches a file, the README stays
//! under 20 KB, and every calibration profile file is either built in or named as left out.

use crate::common;

use common::files;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown the repository's readers walk: README.md, ARCHITECTURE.md and docs/.
fn markdown_docs() -> Vec<PathBuf> {
    let mut docs = files(&root().join("docs"), &[".md"]);
    docs.push(root().join("README.md"));
    docs.push(root().join("ARCHITECTURE.md"));
    docs
}

/// The places code and data cite documents from.
fn citing_files() -> Vec<PathBuf> {
    let r = root();
    let mut v = Vec::new();
    for (dir, exts) in [
        ("src", &[".rs"][..]),
        ("tests", &[".rs"]),
        ("benches", &[".rs"]),
        ("python", &[".rs", ".py", ".pyi"]),
        ("calibration", &[".toml"]),
        ("models", &[".toml"]),
        ("examples", &[".toml"]),
        (".ci", &["run"]),
    ] {
        v.extend(files(&r.join(dir), exts));
    }
    v
}

/// The section numbers of ENGINE_SPEC.md's headings (`## 3. …` → `3`, `### 3.4 …` → `3.4`).
fn spec_sections() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/engines/ENGINE_SPEC.md")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("##"))
        .filter_map(|l| l.trim_start_matches('#').split_whitespace().next())
        .map(|n| n.trim_end_matches('.').to_string())
        .filter(|n| n.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect()
}

#[test]
fn every_cited_spec_section_exists() {
    let sections = spec_sections();
    assert!(sections.contains("1.11") && sections.contains("7.3"), "{sections:?}");
    let docs = markdown_docs();
    let mut missing = Vec::new();
    let mut cited = 0;
    for f in citing_files().into_iter().chain(docs) {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        for (n, line) in text.lines().enumerate() {
            let Some(at) = line.find("ENGINE_SPEC") else { continue };
            // Every § after the name on its line: `ENGINE_SPEC §1, §3, §4`, `§2–§4`.
            for part in line[at..].split('§').skip(1) {
                let num: String = part.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
                let num = num.trim_end_matches('.');
                if num.is_empty() {
                    continue;
                }
                cited += 1;
                if !sections.contains(num) {
                    missing.push(format!("{}:{}: §{num}", f.strip_prefix(root()).unwrap().display(), n + 1));
                }
            }
        }
    }
    assert!(cited > 30, "only {cited} citations found: is the scan reading the tree?");
    assert!(missing.is_empty(), "ENGINE_SPEC sections cited but absent:\n{}", missing.join("\n"));
}

/// Upstream projects whose own `docs/…` files code cites by name.
const UPSTREAM: &[&str] = &["DeepEP", "Dynamo"];

#[test]
fn every_cited_docs_path_exists() {
    let mut missing = Vec::new();
    for f in citing_files() {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        let mut from = 0;
        while let Some(k) = text[from..].find("docs/") {
            let at = from + k;
            from = at + 5;
            let path: String =
                text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "/_-.".contains(*c)).collect();
            let path = path.trim_end_matches('.');
            if !(path.ends_with(".md") || path.ends_with(".svg") || path.ends_with(".png")) {
                continue;
            }
            // Only this repository's docs: not `legacy/docs/…` of an upstream path or a URL, nor
            // one an upstream project's name stands before (DeepEP `docs/legacy.md`).
            let before = text[..at].trim_end_matches('`');
            let joined = before.ends_with(|c: char| c.is_ascii_alphanumeric() || "/_-".contains(c));
            let word = before.trim_end().rsplit(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("");
            if joined || UPSTREAM.contains(&word) {
                continue;
            }
            if !root().join(path).exists() {
                missing.push(format!("{}: {path}", f.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "docs paths cited but absent:\n{}", missing.join("\n"));
}

/// The repository's own source files the docs name (`src/cli.rs`, `crates/core/src/sim/mod.rs`)
/// exist; the engine spec, which names upstream files, is left out.
#[test]
fn every_source_file_the_docs_name_exists() {
    let mut docs = markdown_docs();
    docs.retain(|f| !f.ends_with("engines/ENGINE_SPEC.md"));
    let mut missing = Vec::new();
    for f in docs {
        let text = std::fs::read_to_string(&f).unwrap();
        for start in ["crates/", "src/", "tests/", "benches/"] {
            let mut from = 0;
            while let Some(k) = text[from..].find(start) {
                let at = from + k;
                from = at + start.len();
                let before = text[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || "/_-.:@".contains(c)) {
                    continue;
                }
                let path: String =
                    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "/_-.".contains(*c)).collect();
                let path = path.trim_end_matches('.');
                if path.ends_with(".rs") && !path.contains('<') && !root().join(path).exists() {
                    missing.push(format!("{}: {path}", f.strip_prefix(root()).unwrap().display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "source files named in the docs but absent:\n{}", missing.join("\n"));
}

#[test]
fn every_relative_link_reaches_a_file() {
    let docs = markdown_docs();
    let mut broken = Vec::new();
    for f in docs {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let target = &rest[..rest.find(')').unwrap_or(rest.len())];
            let target = target.split('#').next().unwrap().split_whitespace().next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !f.parent().unwrap().join(target).exists() {
                broken.push(format!("{}: {target}", f.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short() {
    let n = std::fs::metadata(root().join("README.md")).unwrap().len();
    assert!(n <= 20 * 1024, "README.md is {n} bytes; long material belongs in docs/ (docs/README.md is the map)");
}

/// Every `calibration/profiles/*.toml` is in the built-in registry (`run` picks it by GPU,
/// engine family and model), the kernel-step profile, or a profile kept only for
/// `--calibration FILE` and named here with why.
#[test]
fn every_profile_file_is_registered_or_named() {
    // Fitted on setups whose engine or hardware is unstated, so `run` never picks them alone.
    const FILE_ONLY: &[(&str, &str)] = &[
        ("h20-any.toml", "the H20 pair fitted with --any-engine: no engine family to match"),
        ("seed-vllm-ttft-sweep.toml", "a step law of the seed sweep's unknown hardware"),
    ];
    let builtin: BTreeSet<String> =
        cachesim::calibration::profile::builtin().into_iter().map(|(f, _)| f.to_string()).collect();
    let kernels = cachesim::calibration::profile::builtin_kernels().0.to_string();
    for f in files(&root().join("calibration/profiles"), &[".toml"]) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let known = builtin.contains(&name) || name == kernels || FILE_ONLY.iter().any(|(n, _)| *n == name);
        assert!(
            known,
            "calibration/profiles/{name} is neither built in (calibration::profile BUILTIN) nor named in this test's FILE_ONLY"
        );
    }
    for (n, _) in FILE_ONLY {
        assert!(!builtin.contains(*n), "{n} is built in; take it off FILE_ONLY");
        assert!(root().join("calibration/profiles").join(n).exists(), "{n} is gone; take it off FILE_ONLY");
    }
}

/// docs/reference/flags.md is what its generator makes of this binary's `--help` (so the flag
/// reference cannot drift from the flags): `python3 docs/reference/flags.py
/// target/release/cachesim > docs/reference/flags.md` after a flag or its help changes.
#[test]
fn the_flag_reference_is_the_binarys_help() {
    let out = std::process::Command::new("python3")
        .arg(root().join("docs/reference/flags.py"))
        .arg(env!("CARGO_BIN_EXE_cachesim"))
        .output();
    let Ok(out) = out else {
        // Written to the stderr handle itself, so the line shows in a plain `cargo test` run.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: no python3 to regenerate docs/reference/flags.md");
        return;
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want = std::fs::read_to_string(root().join("docs/reference/flags.md")).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout) == want,
        "docs/reference/flags.md is out of date: python3 docs/reference/flags.py target/release/cachesim > docs/reference/flags.md"
    );
}
