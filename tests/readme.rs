//! The documentation's commands cannot rot: every fenced `sh` block of the
//! README and of every `docs/*.md` page is listed here, by its file and its
//! first line, with how it is exercised. Blocks that need no cluster run
//! here, in bash, in a scratch directory, with the binary under test as
//! `podprobe` and `target/release/podprobe`, `cargo build` as a no-op,
//! `kubectl apply -k` rendering with `kubectl kustomize` (`apply -f` printing
//! the file) and `helm upgrade --install` rendering with `helm template`; the
//! rest name the script or test that runs them. A new block without an entry
//! fails the test, as does an entry whose block is gone, a block indented in
//! a list as much as one at the margin, and a fenced block of a language not
//! known to hold no commands (a shell block cannot hide as ```` ```bash ````
//! or a bare ```` ``` ````). Relative links and their anchors must resolve.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How one block is exercised.
enum Exercised {
    /// Runs here; `check` gets the exit code and output of the block.
    Here(fn(i32, &str)),
    /// Run elsewhere: (the file that runs the same command, a string that
    /// file must hold).
    By(&'static str, &'static str),
    /// Cannot run on this project's machines, and why.
    NotHere(&'static str),
}

/// Fenced blocks of these languages hold no commands: they are not run.
const NOT_COMMANDS: [&str; 3] = ["yaml", "text", "json"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents whose `sh` blocks are exercised, relative to the root:
/// README.md, then every `docs/*.md` by name.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

/// One fenced block.
struct Block {
    /// The document, relative to the root.
    file: String,
    /// The line of its opening fence (1-based).
    line: usize,
    /// The fence's language (`sh`, `yaml`, ...; empty for none).
    language: String,
    /// The block's lines, without the fence's indentation.
    text: String,
}

impl Block {
    fn first(&self) -> &str {
        self.text.lines().next().unwrap_or_default()
    }
}

/// Every fenced block of `text`, in order, at the margin or indented (in a
/// list item). A fence opens with ```` ``` ```` and a language and closes
/// with a bare ```` ``` ````; a `~~~` fence's language is reported as
/// `~~~...`, which no rule knows.
fn fenced_blocks(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    // The open block, its fence and the fence's indentation.
    let mut open: Option<(Block, &str, usize)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let margin = line.len() - trimmed.len();
        match open.take() {
            Some((block, fence, _)) if trimmed.trim_end() == fence => blocks.push(block),
            Some((mut block, fence, indent)) => {
                // The fence's indentation is not part of the block.
                block.text.push_str(&line[margin.min(indent)..]);
                block.text.push('\n');
                open = Some((block, fence, indent));
            }
            None => {
                for fence in ["```", "~~~"] {
                    if let Some(language) = trimmed.strip_prefix(fence) {
                        let language = match fence {
                            "```" => language.trim().to_string(),
                            _ => format!("~~~{}", language.trim()),
                        };
                        let block = Block {
                            file: file.to_string(),
                            line: index + 1,
                            language,
                            text: String::new(),
                        };
                        open = Some((block, fence, margin));
                        break;
                    }
                }
            }
        }
    }
    if let Some((block, _, _)) = open {
        panic!("{}:{}: a fence that never closes", block.file, block.line);
    }
    blocks
}

/// The `sh` blocks of every document, in order; panics on a fenced block of
/// a language that is neither `sh` nor one of [`NOT_COMMANDS`].
fn blocks() -> Vec<Block> {
    let mut commands = Vec::new();
    let mut unknown = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(root().join(&file)).expect(&file);
        for block in fenced_blocks(&file, &text) {
            match block.language.as_str() {
                "sh" => commands.push(block),
                language if NOT_COMMANDS.contains(&language) => {}
                language => unknown.push(format!(
                    "{}:{}: ```{language} (mark commands `sh`, anything else one of {NOT_COMMANDS:?})",
                    block.file, block.line
                )),
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "fenced blocks of no known language: {unknown:#?}"
    );
    commands
}

/// Each block by its document and its first line.
fn table() -> Vec<(&'static str, &'static str, Exercised)> {
    use Exercised::*;
    vec![
        (
            "README.md",
            "hack/demo.sh",
            NotHere(
                "the demo itself: it installs deploy/examples on the kind cluster that hack/test.sh brings up (hack/kind-e2e.sh up) for the end-to-end tests",
            ),
        ),
        ("README.md", "hack/test.sh", By(".ci/run", "hack/test.sh")),
        (
            "README.md",
            "kubectl apply -f deploy/base/namespace.yaml",
            Here(check_helm_install),
        ),
        (
            "README.md",
            "cat > /tmp/h2c-post.yaml <<'YAML'",
            Here(|code, out| {
                // Nothing listens on 127.0.0.1:8080 here: the POST fails (1),
                // or succeeds if something does (0); 64 would be a probe
                // podprobe refused to read.
                assert!(code == 0 || code == 1, "exit {code}: {out}");
                let refused = r#"Post "http://127.0.0.1:8080/check": dial tcp"#;
                assert!(code == 0 || out.contains(refused), "{out}");
            }),
        ),
        (
            "README.md",
            "kubectl -n shop create secret generic probe-auth --from-literal=token='Bearer <token>'",
            By("tests/secrets_cluster.rs", r#""podprobe-probe-auth","#),
        ),
        (
            "README.md",
            r#"kubectl annotate --overwrite pod db-0 podprobe.io/probes='{"db": {"readinessProbe": {"exec": {"command": ["sh", "-c", "test -f /run/primary"]}, "podprobe": {"markers": [{"label": "role", "onSuccess": "primary", "onFailure": "replica"}]}}}}'"#,
            By(
                "tests/run_gate.rs",
                r#"{"label": "role", "onSuccess": "primary", "onFailure": "replica"}"#,
            ),
        ),
        (
            "README.md",
            "cargo install --locked --path crates/kubectl-podprobe",
            By("tests/e2e_kind.rs", "--clusterrole=podprobe-status-reader"),
        ),
        (
            "docs/install.md",
            "kubectl get apiservice v1alpha1.status.podprobe.io",
            By(
                "tests/e2e_kind.rs",
                "apiservice/v1alpha1.status.podprobe.io",
            ),
        ),
        (
            "docs/install.md",
            "helm upgrade podprobe charts/podprobe -n podprobe-system --reuse-values \\",
            By("tests/e2e_kind.rs", "statusApi.tls.generation="),
        ),
        (
            "README.md",
            r#"kubectl annotate --overwrite pod web podprobe.io/pause-liveness-until="$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)""#,
            By("tests/run_gate.rs", r#""+%Y-%m-%dT%H:%M:%SZ""#),
        ),
        (
            "docs/authority-mode.md",
            "podprobe run --mode authority --node-name edge-1 \\",
            By("hack/agent-node.sh", "--mode authority"),
        ),
        (
            "docs/authority-mode.md",
            "hack/agent-node.sh up",
            By("hack/test.sh", "agent-node.sh"),
        ),
        (
            "docs/cli.md",
            "cargo build --release",
            Here(|code, out| {
                // Nothing listens on 127.0.0.1:8080 here: the probe fails (1),
                // or succeeds if something does (0); 64 would be a bad command.
                assert!(code == 0 || code == 1, "exit {code}: {out}");
                assert!(out.contains("127.0.0.1:8080"), "{out}");
            }),
        ),
        (
            "docs/cli.md",
            "target/release/podprobe probe --probe pod.yaml --container app --kind liveness --output json",
            Here(|code, out| {
                assert!((0..=2).contains(&code), "exit {code}: {out}");
                let json: serde_json::Value =
                    serde_json::from_str(out.trim()).expect("one JSON object");
                assert_eq!(json["kind"], "liveness", "{out}");
            }),
        ),
        (
            "docs/cli.md",
            "target/release/podprobe probe --probe exec.yaml --container-id containerd://<id> \\",
            By("tests/cli_probe.rs", "--container-id"),
        ),
        (
            "docs/cli.md",
            "cat > pod.yaml <<'YAML'",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
                assert!(
                    out.lines().count() > 10 && out.lines().all(|l| l.starts_with('{')),
                    "{out}"
                );
            }),
        ),
        (
            "docs/cli.md",
            "podprobe simulate --pod pod.yaml --script /tmp/script.yaml --output svg > timeline.svg",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
            }),
        ),
        (
            "docs/cli.md",
            "cat > /tmp/workload.yaml <<'YAML'",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
                // The workload's numbers, without the guards and with them
                // (tests/cli_simulate.rs checks them against the page).
                let lines: Vec<&str> = out.lines().collect();
                assert_eq!(lines.len(), 2, "{out}");
                assert!(
                    lines
                        .iter()
                        .all(|l| l.starts_with("\"workload\":{\"most_not_ready\":")),
                    "{out}"
                );
            }),
        ),
        (
            "docs/cli.md",
            "target/release/podprobe lint deploy/examples/*.yaml",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
            }),
        ),
        (
            "docs/development.md",
            "hack/kind-e2e.sh            # up, then the end-to-end suites",
            By("hack/test.sh", "hack/kind-e2e.sh up"),
        ),
        (
            "docs/extensions.md",
            r#"kubectl annotate --overwrite pod web podprobe.io/probes='{"app": {"readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 2}}}'"#,
            By(
                "tests/run_gate.rs",
                r#"&format!("podprobe.io/probes={probes}")"#,
            ),
        ),
        (
            "docs/extensions.md",
            "kubectl -n shop create secret tls app-probe-client --cert=client.crt --key=client.key",
            By("tests/secrets_cluster.rs", r#""podprobe-client-cert","#),
        ),
        (
            "docs/install.md",
            "docker buildx build --platform linux/amd64,linux/arm64 \\",
            NotHere(
                "needs a Docker engine, which the build machines lack; hack/dockerfile-check.sh builds the Dockerfile with buildah against stand-in base images",
            ),
        ),
        (
            "docs/install.md",
            "mkdir -p my-podprobe",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
                assert!(
                    out.contains("image: registry.example.com/podprobe:0.1.0"),
                    "{out}"
                );
                assert!(!out.contains("docker.io/local/podprobe"), "{out}");
            }),
        ),
        (
            "docs/install.md",
            "kubectl apply -f deploy/base/namespace.yaml",
            Here(check_helm_install),
        ),
        (
            "docs/install.md",
            "kubectl -n podprobe-system rollout status daemonset/podprobe",
            By("hack/demo.sh", "deploy/examples"),
        ),
        (
            "docs/install.md",
            r#"kubectl get pods -A -o jsonpath='{range .items[?(@.spec.readinessGates[*].conditionType=="podprobe.io/ready")]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}'"#,
            By(
                "tests/run_gate.rs",
                "fn the_uninstall_query_lists_the_pods_that_use_the_gate()",
            ),
        ),
    ]
}

/// The namespace, then `helm upgrade --install` (rendered): the namespace
/// and the chart's objects with the image asked for.
fn check_helm_install(code: i32, out: &str) {
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("kind: Namespace") && out.contains("name: podprobe-system"),
        "{out}"
    );
    assert!(out.contains("kind: DaemonSet"), "{out}");
    assert!(
        out.contains("image: registry.example.com/podprobe:0.1.0"),
        "{out}"
    );
}

/// A scratch directory where the documents' relative paths (from the
/// repository's root) work: `deploy`,
/// `charts` and `hack` link to the checkout's, `target/release/podprobe`
/// and `bin/podprobe` to the binary under test, and `bin/` holds the
/// stand-ins for cargo, kubectl and helm.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("scratch dir");
    for name in ["deploy", "charts", "hack"] {
        std::os::unix::fs::symlink(root().join(name), dir.path().join(name)).expect("link");
    }
    // The manifest of "your pod" that the probe example reads before the
    // simulate example writes its own.
    std::fs::write(
        dir.path().join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: app}\nspec:\n  containers:\n  - name: app\n    \
         image: app\n    ports: [{containerPort: 8080}]\n    livenessProbe:\n      \
         httpGet: {path: /healthz, port: 8080}\n",
    )
    .expect("pod.yaml");
    let binary = Path::new(env!("CARGO_BIN_EXE_podprobe"));
    std::fs::create_dir_all(dir.path().join("target/release")).expect("target dir");
    std::fs::create_dir_all(dir.path().join("bin")).expect("bin dir");
    std::os::unix::fs::symlink(binary, dir.path().join("target/release/podprobe")).expect("link");
    std::os::unix::fs::symlink(binary, dir.path().join("bin/podprobe")).expect("link");
    let kubectl = tool("PODPROBE_KUBECTL", "kubectl");
    let helm = tool("PODPROBE_HELM", "helm");
    let shims = [
        (
            "cargo",
            "#!/bin/sh\n# the binary under test stands in for the build\nexit 0\n".to_string(),
        ),
        (
            "kubectl",
            format!(
                "#!/bin/sh\nif [ \"$1\" = apply ] && [ \"$2\" = -k ]; then exec {kubectl} kustomize \"$3\"; fi\n\
                 if [ \"$1\" = apply ] && [ \"$2\" = -f ]; then exec cat \"$3\"; fi\n\
                 echo \"kubectl shim: only 'apply -k' runs here: $*\" >&2; exit 99\n"
            ),
        ),
        (
            "helm",
            format!(
                "#!/bin/sh\nif [ \"$1\" = upgrade ] && [ \"$2\" = --install ]; then\n  shift 2\n  \
                 args=''\n  for a in \"$@\"; do [ \"$a\" = --create-namespace ] || args=\"$args '$a'\"; done\n  \
                 eval exec {helm} template $args\nfi\n\
                 echo \"helm shim: only 'upgrade --install' runs here: $*\" >&2; exit 99\n"
            ),
        ),
    ];
    for (name, script) in shims {
        let path = dir.path().join("bin").join(name);
        std::fs::write(&path, script).expect("shim");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod shim");
    }
    dir
}

/// The real `name` (from `$env`, else the first on PATH), so that the shim
/// of the same name does not call itself; the shim fails when it is missing.
fn tool(env: &str, name: &str) -> String {
    if let Ok(path) = std::env::var(env) {
        return path;
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.is_file())
        .map(|path| path.display().to_string())
        .unwrap_or_else(|| format!("/{name}-not-found-set-{env}"))
}

#[test]
fn every_documented_command_is_exercised() {
    let blocks = blocks();
    let table = table();
    let dir = scratch();
    let path = format!(
        "{}:{}",
        dir.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // One entry per block: a document may not hold two blocks that open
    // with the same line, nor the table two entries for one.
    let mut seen = BTreeSet::new();
    for block in &blocks {
        assert!(
            seen.insert((block.file.as_str(), block.first())),
            "{}:{}: a second block opening with {:?}; make its first line differ",
            block.file,
            block.line,
            block.first()
        );
    }
    let mut entries = BTreeSet::new();
    for (file, first, _) in &table {
        assert!(
            entries.insert((*file, *first)),
            "two entries for {file}: {first:?}"
        );
    }
    let mut unlisted = Vec::new();
    let (mut here, mut by, mut not_here) = (0, 0, 0);
    for block in &blocks {
        let (file, first) = (block.file.as_str(), block.first());
        let Some((_, _, how)) = table.iter().find(|(f, l, _)| *f == file && *l == first) else {
            unlisted.push(format!("{file}:{}: {first}", block.line));
            continue;
        };
        match how {
            Exercised::Here(check) => {
                here += 1;
                let out = Command::new("bash")
                    .args(["-euo", "pipefail", "-c", &block.text])
                    .current_dir(dir.path())
                    .env("PATH", &path)
                    .output()
                    .expect("bash runs");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                eprintln!("ran {file} block {first:?}: {:?}", out.status);
                check(out.status.code().unwrap_or(-1), &text);
            }
            Exercised::By(runner, needle) => {
                by += 1;
                let text = std::fs::read_to_string(root().join(runner))
                    .unwrap_or_else(|e| panic!("{runner}: {e}"));
                assert!(
                    text.contains(needle),
                    "{file} block {first:?} is said to be run by {runner}, which has no {needle:?}"
                );
            }
            Exercised::NotHere(why) => {
                not_here += 1;
                eprintln!("not run here: {file}: {first:?}: {why}");
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "blocks nobody exercises (add them to tests/readme.rs): {unlisted:#?}"
    );
    let stale: Vec<_> = table
        .iter()
        .filter(|(file, first, _)| {
            !blocks
                .iter()
                .any(|b| b.file == *file && b.first() == *first)
        })
        .map(|(file, first, _)| format!("{file}: {first}"))
        .collect();
    assert!(stale.is_empty(), "entries without a block: {stale:#?}");
    eprintln!(
        "{} sh blocks in {} documents: {here} run here, {by} run elsewhere, {not_here} not run",
        blocks.len(),
        documents().len()
    );
    // The svg block wrote its picture.
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).expect("timeline.svg");
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{svg:.200}"
    );
}

/// The README keeps the two set-up commands a newcomer runs first.
#[test]
fn the_readme_keeps_the_two_commands() {
    let firsts: Vec<String> = blocks()
        .iter()
        .filter(|b| b.file == "README.md")
        .map(|b| b.first().to_string())
        .collect();
    for command in ["hack/demo.sh", "hack/test.sh"] {
        assert!(
            firsts.iter().any(|f| f == command),
            "README.md lost its {command} block: {firsts:?}"
        );
    }
}

/// A heading's anchor as GitHub makes it: lower case, punctuation but `-`
/// and `_` dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let slug = anchor(&line[hashes..]);
            // GitHub numbers repeated headings: slug, slug-1, slug-2, ...
            let mut unique = slug.clone();
            let mut n = 0;
            while !out.insert(unique.clone()) {
                n += 1;
                unique = format!("{slug}-{n}");
            }
        }
    }
    out
}

/// The targets of a Markdown text's links, `[text](target)`, outside fenced
/// blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: every other backtick-separated piece.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// Every relative link of the README, the `docs/` pages and the other
/// Markdown files a reader follows from them names a file that exists, and
/// its `#anchor` a heading of that file.
#[test]
fn every_relative_link_resolves() {
    let mut files = documents();
    for other in [
        "SECURITY.md",
        "RELIABILITY.md",
        "CHANGELOG.md",
        "charts/podprobe/README.md",
        "hack/README.md",
        "bench/RESULTS.md",
        "tests/FUZZ.md",
        "tests/UPSTREAM_E2E.md",
    ] {
        if root().join(other).exists() {
            files.push(other.to_string());
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                root().join(file)
            } else {
                root().join(dir).join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{file}: {target} (no such file)"));
                continue;
            }
            if let Some(fragment) = fragment {
                let text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&text).contains(fragment) {
                    broken.push(format!("{file}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
    assert!(
        checked > 20,
        "only {checked} links found: is the parser broken?"
    );
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor(" Try a probe: `podprobe probe`"),
        "try-a-probe-podprobe-probe"
    );
    assert_eq!(
        anchor(" Probe extensions (gate mode)"),
        "probe-extensions-gate-mode"
    );
    assert_eq!(
        anchor(" Probes from inside the pod's network"),
        "probes-from-inside-the-pods-network"
    );
    let blocks = fenced_blocks(
        "x.md",
        "1. Step:\n\n   ```sh\n   echo one\n     echo two\n   ```\n\n```yaml\na: b\n```\n",
    );
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].language, "sh");
    assert_eq!(blocks[0].text, "echo one\n  echo two\n");
    assert_eq!(blocks[1].language, "yaml");
}
