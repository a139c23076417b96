//! The README's commands cannot rot: every fenced `sh` block is listed here
//! with how it is exercised. Blocks that need no cluster run here, in bash,
//! in a scratch directory, with the binary under test as `podprobe` and
//! `target/release/podprobe`, `cargo build` as a no-op, `kubectl apply -k`
//! rendering with `kubectl kustomize` (`apply -f` printing the file) and `helm upgrade --install`
//! rendering with `helm template`; the rest name the script or test that
//! runs them. A new block without an entry fails the test, as does an entry
//! whose block is gone.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How one README block is exercised.
enum Exercised {
    /// Runs here; `check` gets the exit code and output of the block.
    Here(fn(i32, &str)),
    /// Run elsewhere: (the file that runs the same command, a string that
    /// file must hold).
    By(&'static str, &'static str),
    /// Cannot run on this project's machines, and why.
    NotHere(&'static str),
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README's `sh` blocks, in order.
fn blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match (&mut current, line) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// Each block by its first line.
fn table() -> Vec<(&'static str, Exercised)> {
    use Exercised::*;
    vec![
        (
            "hack/demo.sh",
            NotHere(
                "the demo itself: it installs deploy/examples on the kind cluster that hack/test.sh brings up (hack/kind-e2e.sh up) for the end-to-end tests",
            ),
        ),
        (
            "hack/kind-e2e.sh            # up, then the end-to-end suites",
            By("hack/test.sh", "hack/kind-e2e.sh up"),
        ),
        ("hack/test.sh", By(".ci/run", "hack/test.sh")),
        (
            "docker buildx build --platform linux/amd64,linux/arm64 \\",
            NotHere(
                "needs a Docker engine, which the build machines lack; hack/dockerfile-check.sh builds the Dockerfile with buildah against stand-in base images",
            ),
        ),
        (
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
            "kubectl apply -f deploy/base/namespace.yaml",
            Here(|code, out| {
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
            }),
        ),
        (
            "kubectl -n podprobe-system rollout status daemonset/podprobe",
            By("hack/demo.sh", "deploy/examples"),
        ),
        (
            "kubectl -n shop create secret tls app-probe-client --cert=client.crt --key=client.key",
            By(
                "tests/secrets_cluster.rs",
                "--serviceaccount=podprobe-system:podprobe",
            ),
        ),
        (
            "podprobe run --mode authority --node-name edge-1 \\",
            By("hack/agent-node.sh", "--mode authority"),
        ),
        ("hack/agent-node.sh up", By("hack/test.sh", "agent-node.sh")),
        (
            r#"kubectl annotate --overwrite pod web podprobe.io/probes='{"app": {"readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 2}}}'"#,
            By(
                "tests/run_gate.rs",
                r#"&format!("podprobe.io/probes={probes}")"#,
            ),
        ),
        (
            "cargo build --release",
            Here(|code, out| {
                // Nothing listens on 127.0.0.1:8080 here: the probe fails (1),
                // or succeeds if something does (0); 64 would be a bad command.
                assert!(code == 0 || code == 1, "exit {code}: {out}");
                assert!(out.contains("127.0.0.1:8080"), "{out}");
            }),
        ),
        (
            "target/release/podprobe probe --probe pod.yaml --container app --kind liveness --output json",
            Here(|code, out| {
                assert!((0..=2).contains(&code), "exit {code}: {out}");
                let json: serde_json::Value =
                    serde_json::from_str(out.trim()).expect("one JSON object");
                assert_eq!(json["kind"], "liveness", "{out}");
            }),
        ),
        (
            "target/release/podprobe probe --probe exec.yaml --container-id containerd://<id> \\",
            By("tests/cli_probe.rs", "--container-id"),
        ),
        (
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
            "podprobe simulate --pod pod.yaml --script /tmp/script.yaml --output svg > timeline.svg",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
            }),
        ),
        (
            "target/release/podprobe lint deploy/examples/*.yaml",
            Here(|code, out| {
                assert_eq!(code, 0, "{out}");
            }),
        ),
    ]
}

/// A scratch directory where the README's relative paths work: `deploy`,
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
fn every_readme_command_is_exercised() {
    let blocks = blocks();
    let table = table();
    let dir = scratch();
    let path = format!(
        "{}:{}",
        dir.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut unlisted = Vec::new();
    for block in &blocks {
        let first = block.lines().next().unwrap_or_default();
        let Some((_, how)) = table.iter().find(|(line, _)| *line == first) else {
            unlisted.push(first.to_string());
            continue;
        };
        match how {
            Exercised::Here(check) => {
                let out = Command::new("bash")
                    .args(["-euo", "pipefail", "-c", block])
                    .current_dir(dir.path())
                    .env("PATH", &path)
                    .output()
                    .expect("bash runs");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                eprintln!("ran README block {first:?}: {:?}", out.status);
                check(out.status.code().unwrap_or(-1), &text);
            }
            Exercised::By(file, needle) => {
                let text = std::fs::read_to_string(root().join(file))
                    .unwrap_or_else(|e| panic!("{file}: {e}"));
                assert!(
                    text.contains(needle),
                    "README block {first:?} is said to be run by {file}, which has no {needle:?}"
                );
            }
            Exercised::NotHere(why) => eprintln!("not run here: {first:?}: {why}"),
        }
    }
    assert!(
        unlisted.is_empty(),
        "README blocks nobody exercises (add them to tests/readme.rs): {unlisted:#?}"
    );
    let stale: Vec<_> = table
        .iter()
        .map(|(line, _)| *line)
        .filter(|line| !blocks.iter().any(|b| b.lines().next() == Some(line)))
        .collect();
    assert!(
        stale.is_empty(),
        "entries without a README block: {stale:?}"
    );
    // The svg block wrote its picture.
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).expect("timeline.svg");
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{svg:.200}"
    );
}
