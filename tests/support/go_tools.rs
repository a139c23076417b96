//! The Go-built tools that tests/chart.rs and tests/monitoring.rs run (helm,
//! promtool) and what they share: where the tools are, running them, and
//! reading YAML documents.
//!
//! A tool is found through an environment variable (hack/test.sh exports it
//! from hack/helm.sh or hack/promtool.sh) or, failing that, where those
//! scripts cache the version they pin. A missing tool fails the test with
//! the command that builds it: it never skips.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::Value;

/// The repository's root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// helm, built by hack/helm.sh (`PODPROBE_HELM`).
pub fn helm() -> PathBuf {
    tool("helm", "hack/helm.sh", "PODPROBE_HELM")
}

/// promtool, built by hack/promtool.sh (`PODPROBE_PROMTOOL`).
pub fn promtool() -> PathBuf {
    tool("promtool", "hack/promtool.sh", "PODPROBE_PROMTOOL")
}

/// The tool `name` from `$env`, or from the cache directory where `script`
/// puts the version it pins; panics, saying how to build it, when neither
/// has it.
fn tool(name: &str, script: &str, env: &str) -> PathBuf {
    let build = format!(
        "run {script} (it builds {name} with Go and prints its path) and set {env} to that path"
    );
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{env}={} is not a file: {build}",
            path.display()
        );
        return path;
    }
    let cached = cache_dir()
        .join("tools")
        .join(format!("{name}-{}", pinned_version(script)))
        .join(name);
    assert!(
        cached.is_file(),
        "{name} is missing: {env} is unset and {} does not exist; {build}",
        cached.display()
    );
    cached
}

/// `${PODPROBE_CACHE:-~/.cache/podprobe}`, as the hack/ scripts use it.
fn cache_dir() -> PathBuf {
    match std::env::var_os("PODPROBE_CACHE").filter(|p| !p.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/podprobe"),
    }
}

/// The version `script` pins: its `..._VERSION=v...` line.
fn pinned_version(script: &str) -> String {
    let text = std::fs::read_to_string(repo().join(script))
        .unwrap_or_else(|e| panic!("read {script}: {e}"));
    text.lines()
        .find_map(|line| {
            let (name, value) = line.split_once('=')?;
            (name.ends_with("_VERSION") && !name.contains(' ')).then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("{script} pins no version (no NAME_VERSION=... line)"))
}

/// Runs `program args` in the repository; its output, whatever its status.
pub fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
}

/// Runs `program args` in the repository and returns its stdout; panics
/// with its output when it fails.
pub fn run_ok(program: &Path, args: &[&str]) -> String {
    let output = run(program, args);
    assert!(
        output.status.success(),
        "{} {} failed ({}):\n{}{}",
        program.display(),
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("output is UTF-8")
}

/// Every non-empty YAML document of `text`, as JSON values.
pub fn yaml_docs(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| {
            Value::deserialize(doc).unwrap_or_else(|e| panic!("YAML does not parse: {e}\n{text}"))
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The one YAML document of the repository file `path`.
pub fn yaml_file(path: &str) -> Value {
    let text =
        std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let mut docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1, "{path} should hold one YAML document");
    docs.remove(0)
}
