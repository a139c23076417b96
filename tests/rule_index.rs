//! The rule index stays complete: every kubelet rule ID cited in a comment
//! or a test name under `src/` and `tests/` (and in `tests/*.md`) has its
//! heading in `docs/kubelet-semantics.md`, so a maintainer can follow any
//! citation from the repository alone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const INDEX: &str = "docs/kubelet-semantics.md";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` whose name ends in one of `extensions`.
fn files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
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
    files(&root().join("src"), &["rs"], &mut sources);
    files(&root().join("tests"), &["rs"], &mut sources);
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
