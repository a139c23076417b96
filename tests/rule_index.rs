//! The rule index stays complete: every kubelet rule ID cited in a comment
//! or a test name under `src/`, `tests/` and `crates/` (and in `tests/*.md`)
//! has its heading in `docs/kubelet-semantics.md`, so a maintainer can
//! follow any citation from the repository alone. And the docs' file paths
//! stay true: every `src/...`, `tests/...` or `crates/...` path cited in a
//! Markdown file (the README, SECURITY.md, RELIABILITY.md, CHANGELOG.md,
//! `docs/`, `tests/`, `bench/`, `hack/`, `charts/`) exists, and every
//! test or function cited as `path.rs::name` is defined in that file, so
//! neither a file nor a test that moves can silently break a citation.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const INDEX: &str = "docs/kubelet-semantics.md";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folders of Rust sources whose rule citations count.
const SOURCES: [&str; 3] = ["src", "tests", "crates"];

/// Every file under `dir` whose name ends in one of `extensions` (build
/// output and hidden folders left out).
fn files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            files(&path, extensions, out);
        } else if extensions
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e))
        {
            out.push(path);
        }
    }
}

/// `D5`, `W11`, `ID`-like tokens: one or two capitals, one or two digits.
fn is_rule_id(token: &str) -> bool {
    let letters = token.bytes().take_while(u8::is_ascii_uppercase).count();
    let digits = token.len() - letters;
    (1..=2).contains(&letters)
        && (1..=2).contains(&digits)
        && token[letters..].bytes().all(|b| b.is_ascii_digit())
}

/// The rule IDs and status.md rule numbers (`Rule 3.1`) cited in `text`.
fn citations(text: &str, out: &mut BTreeSet<String>) {
    for token in text.split(|c: char| !c.is_ascii_alphanumeric()) {
        if is_rule_id(token) {
            out.insert(token.to_string());
        }
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    for pair in words.windows(2) {
        let lead = pair[0].trim_start_matches('(').trim_start_matches('`');
        if !matches!(lead, "status.md" | "rule" | "Rule" | "rules" | "Rules") {
            continue;
        }
        let number: String = pair[1]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.');
        if !number.is_empty() && number.starts_with(|c: char| c.is_ascii_digit()) {
            out.insert(format!("Rule {number}"));
        }
    }
}

/// The IDs a test name starts with (`d7_w8_...`) and `ruleN_M_` names.
fn test_name_citations(name: &str, out: &mut BTreeSet<String>) {
    let mut parts = name.split('_').peekable();
    if let Some(rule) = name.strip_prefix("rule") {
        let mut numbers = rule
            .split('_')
            .take_while(|p| p.bytes().all(|b| b.is_ascii_digit()));
        if let Some(major) = numbers.next().filter(|m| !m.is_empty()) {
            match numbers.next().filter(|m| !m.is_empty()) {
                Some(minor) => out.insert(format!("Rule {major}.{minor}")),
                None => out.insert(format!("Rule {major}")),
            };
        }
        return;
    }
    while let Some(part) = parts.next_if(|p| is_rule_id(&p.to_ascii_uppercase())) {
        if part.bytes().next().is_some_and(|b| b.is_ascii_lowercase()) {
            out.insert(part.to_ascii_uppercase());
        }
    }
}

fn cited() -> BTreeSet<String> {
    let mut sources = Vec::new();
    for dir in SOURCES {
        files(&root().join(dir), &["rs"], &mut sources);
    }
    let mut ids = BTreeSet::new();
    for path in sources {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            if let Some((_, comment)) = line.split_once("//") {
                citations(comment, &mut ids);
            }
            if let Some((_, rest)) = line.split_once("fn ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                test_name_citations(&name, &mut ids);
            }
        }
    }
    let mut notes = Vec::new();
    files(&root().join("tests"), &["md"], &mut notes);
    for path in notes {
        citations(
            &std::fs::read_to_string(&path).unwrap_or_default(),
            &mut ids,
        );
    }
    ids
}

/// `## ID` / `### ID — title` headings of the index: the IDs it defines.
fn defined() -> BTreeSet<String> {
    let index = std::fs::read_to_string(root().join(INDEX)).expect("docs/kubelet-semantics.md");
    index
        .lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .map(|heading| {
            let mut words = heading.split_whitespace();
            match words.next() {
                Some("Rule") => format!("Rule {}", words.next().unwrap_or_default()),
                Some(id) => id.to_string(),
                None => String::new(),
            }
        })
        .collect()
}

#[test]
fn every_cited_rule_id_is_defined_in_the_index() {
    let defined = defined();
    let missing: Vec<String> = cited().difference(&defined).cloned().collect();
    assert!(
        missing.is_empty(),
        "rule IDs cited under src/ or tests/ without a heading in {INDEX}: {missing:?}"
    );
}

/// The Markdown files whose path citations are checked: those at the top
/// and those under these folders.
const DOC_FOLDERS: [&str; 6] = ["docs", "tests", "bench", "hack", "charts", "crates"];

fn markdown_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root()).expect("the repository").flatten() {
        let path = entry.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    for dir in DOC_FOLDERS {
        files(&root().join(dir), &["md"], &mut out);
    }
    out.sort();
    out
}

/// The repository paths cited in one line of Markdown: words that start
/// with `src/`, `tests/` or `crates/` (or `../src/`, ... from a file in a
/// folder), not inside another path or a URL (`kube-runtime/src/lib.rs`,
/// `https://.../src/x.rs` are someone else's), up to the first character
/// that cannot be in a path (`:` of `file.rs:12`, a backtick, a space).
/// Returns each as written and as a path (`dir` is the Markdown file's
/// folder).
fn cited_paths(line: &str, dir: &Path) -> Vec<(String, PathBuf)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_-./*".contains(c);
    let mut out = Vec::new();
    for (start, _) in line.char_indices() {
        let rest = &line[start..];
        if !SOURCES.iter().any(|s| rest.starts_with(&format!("{s}/"))) {
            continue;
        }
        let before = &line[..start];
        let mut base = dir.to_path_buf();
        let mut lead = before;
        while let Some(up) = lead.strip_suffix("../") {
            base.push("..");
            lead = up;
        }
        if lead.len() == before.len() {
            // Not after `../`: from the repository's root, unless it is the
            // tail of a longer path.
            if before.ends_with(|c: char| path_char(c) || c == '/') {
                continue;
            }
            base = root();
        } else if lead.ends_with(|c: char| path_char(c) || c == '/') {
            continue;
        }
        let end = rest.find(|c: char| !path_char(c)).unwrap_or(rest.len());
        // A sentence may end right after a path.
        let cited = rest[..end].trim_end_matches('.');
        out.push((cited.to_string(), base.join(cited)));
    }
    out
}

/// Files the docs cite that exist only after some event, not in a clean
/// checkout.
const MAY_BE_ABSENT: [&str; 1] = [
    // proptest writes it when a fuzz target fails (tests/FUZZ.md)
    "tests/fuzz.proptest-regressions",
];

/// Whether the path `cited` (as written) exists at `path`: a folder if it
/// ends in `/`; a `*` in its last part must match something.
fn exists(cited: &str, path: &Path) -> bool {
    if MAY_BE_ABSENT.contains(&cited) {
        return true;
    }
    if cited.ends_with('/') {
        return path.is_dir();
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let Some((prefix, suffix)) = name.split_once('*') else {
        return path.exists();
    };
    let dir = path.parent().unwrap_or(path);
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix)
        })
    })
}

/// The functions cited in `line` right after `path.rs`, as `path.rs::name`
/// or `path.rs::module::name` (the last segment is the function). An
/// elided name (`path.rs::d5_...`) is not a citation.
fn cited_functions(line: &str, cited: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let marker = format!("{cited}::");
    let mut out = Vec::new();
    for (at, _) in line.match_indices(&marker) {
        let rest = &line[at + marker.len()..];
        let end = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        if rest[end..].starts_with("...") {
            continue;
        }
        let name = rest[..end].rsplit("::").next().unwrap_or_default();
        if !name.is_empty() {
            out.push(name.to_string());
        }
    }
    out
}

/// Whether the Rust source `text` defines a function `name`.
fn defines_function(text: &str, name: &str) -> bool {
    text.match_indices(&format!("fn {name}")).any(|(at, m)| {
        let after = text[at + m.len()..].chars().next();
        let before = text[..at].chars().next_back();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn every_cited_path_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in markdown_files() {
        let text = std::fs::read_to_string(&doc).expect("a Markdown file");
        let dir = doc.parent().expect("a folder");
        for (n, line) in text.lines().enumerate() {
            for (cited, path) in cited_paths(line, dir) {
                checked += 1;
                if !exists(&cited, &path) {
                    let doc = doc.strip_prefix(root()).unwrap_or(&doc);
                    missing.push(format!("{}:{}: {cited}", doc.display(), n + 1));
                    continue;
                }
                let functions = cited_functions(line, &cited);
                if functions.is_empty() {
                    continue;
                }
                let source = std::fs::read_to_string(&path).unwrap_or_default();
                for name in functions {
                    checked += 1;
                    if !defines_function(&source, &name) {
                        let doc = doc.strip_prefix(root()).unwrap_or(&doc);
                        missing.push(format!("{}:{}: {cited}::{name}", doc.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no path citations found: is the scanner broken?"
    );
    assert!(
        missing.is_empty(),
        "paths and functions cited in the docs that do not exist (a file or test moved? \
         fix the citation):\n{}",
        missing.join("\n")
    );
}

#[test]
fn cited_paths_are_found_in_prose_tables_and_links() {
    let docs = root().join("docs");
    let found = |line: &str| -> Vec<String> {
        cited_paths(line, &docs)
            .into_iter()
            .map(|(cited, _)| cited)
            .collect()
    };
    assert_eq!(
        found("see `src/worker.rs:58` and src/status/, then tests/fuzz.rs."),
        ["src/worker.rs", "src/status/", "tests/fuzz.rs"]
    );
    assert_eq!(
        found("[FUZZ](../tests/FUZZ.md), crates/podprobe-core/src/lib.rs|"),
        ["tests/FUZZ.md", "crates/podprobe-core/src/lib.rs"]
    );
    // From docs/, `../tests/FUZZ.md` is the repository's tests/FUZZ.md.
    let (cited, path) = &cited_paths("[FUZZ](../tests/FUZZ.md)", &docs)[0];
    assert!(exists(cited, path), "{}", path.display());
    // Someone else's files, and a URL.
    assert!(found("kube-runtime/src/watcher.rs, https://x.io/a/src/b.rs, ./src/c.rs").is_empty());
    let at = |cited: &str| exists(cited, &root().join(cited));
    assert!(at("tests/e2e_*.rs") && at("src/api/") && at("src/api/pods.rs"));
    assert!(!at("tests/no_such_*.rs") && !at("src/no_such.rs") && !at("src/worker.rs/"));
}

#[test]
fn cited_functions_are_found_and_checked_by_name() {
    let line = "`src/a.rs::d1_x`, `src/a.rs::container::d2_y`; `src/a.rs::d5_...`, src/a.rs.";
    assert_eq!(cited_functions(line, "src/a.rs"), ["d1_x", "d2_y"]);
    let source = "fn d1_x() {}\nasync fn d2_y_long() {}\n";
    assert!(defines_function(source, "d1_x"));
    assert!(
        !defines_function(source, "d2_y"),
        "a prefix of a longer name"
    );
    assert!(!defines_function(source, "x"), "a suffix of a longer name");
}

#[test]
fn citations_are_found_in_comments_and_test_names() {
    let mut ids = BTreeSet::new();
    citations(
        "// W11: a terminating pod (S1-S5, status.md rule 3.1).",
        &mut ids,
    );
    test_name_citations("d7_w8_not_running", &mut ids);
    test_name_citations("rule4_2_probe_time", &mut ids);
    test_name_citations("restart_keeps_ready", &mut ids);
    let want = ["D7", "Rule 3.1", "Rule 4.2", "S1", "S5", "W11", "W8"];
    assert_eq!(ids, want.into_iter().map(String::from).collect());
}
