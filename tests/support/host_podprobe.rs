//! `podprobe run` as a host process against the local cluster, scoped by
//! `--pod-selector podprobe.io/test-run=<id>` to one test's pods; stopped
//! (SIGTERM) when dropped. Its log goes to a file of its own.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::cluster::{TEST_RUN_LABEL, cluster, wait_for};

/// A running `podprobe run`.
pub struct HostPodprobe {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl HostPodprobe {
    /// `podprobe run --mode <mode>` for the pods labelled with `run_id` on
    /// `node`, with the kubelet's CRI socket, listening on a free loopback
    /// port.
    pub fn start(mode: &str, node: &str, run_id: &str) -> HostPodprobe {
        Self::start_with_kubeconfig(mode, node, run_id, &cluster().kubeconfig)
    }

    /// [`start`](Self::start) with another kubeconfig (one whose server is a
    /// test's proxy in front of the API server, say).
    pub fn start_with_kubeconfig(
        mode: &str,
        node: &str,
        run_id: &str,
        kubeconfig: &str,
    ) -> HostPodprobe {
        Self::start_with(mode, node, run_id, kubeconfig, &[])
    }

    /// [`start`](Self::start) with `extra` flags after the usual ones.
    pub fn start_with_args(mode: &str, node: &str, run_id: &str, extra: &[&str]) -> HostPodprobe {
        Self::start_with(mode, node, run_id, &cluster().kubeconfig, extra)
    }

    /// `podprobe run` with `kubeconfig` and `extra` flags; the cluster's CRI
    /// socket, `--log-level info,podprobe=debug` and `--metrics-auth none`
    /// unless `extra` sets the flag (as an argument of its own, its value
    /// next).
    pub fn start_with(
        mode: &str,
        node: &str,
        run_id: &str,
        kubeconfig: &str,
        extra: &[&str],
    ) -> HostPodprobe {
        let cri = if extra.contains(&"--cri-endpoint") {
            Vec::new()
        } else {
            vec!["--cri-endpoint".to_string(), cluster().cri_endpoint()]
        };
        let defaults = [
            ("--log-level", "info,podprobe=debug"),
            // The tests read /metrics on loopback; delegated metrics
            // authentication is tested in tests/server.rs and
            // tests/server_cluster.rs.
            ("--metrics-auth", "none"),
        ];
        let defaults = defaults
            .into_iter()
            .filter(|(flag, _)| !extra.contains(flag))
            .flat_map(|(flag, value)| [flag, value]);
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("podprobe.log");
        let stderr = File::create(&log).expect("log file");
        // PODPROBE_TEST_BINARY runs the suites against another build of
        // podprobe (an older commit's, to see a test fail without a fix).
        let binary = std::env::var("PODPROBE_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_podprobe").to_string());
        let child = Command::new(binary)
            .arg("run")
            .args(["--mode", mode])
            .args(["--node-name", node])
            .args(["--kubeconfig", kubeconfig])
            .args(&cri)
            .args(["--pod-selector", &format!("{TEST_RUN_LABEL}={run_id}")])
            .args(["--listen", "127.0.0.1:0"])
            .args(defaults)
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start podprobe run");
        HostPodprobe {
            child,
            log,
            _dir: dir,
        }
    }

    /// Its process ID, e.g. to read its `/proc` entries.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its last `lines` log lines.
    pub fn log_tail(&self, lines: usize) -> String {
        let logs = self.logs();
        let all: Vec<&str> = logs.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The address `--listen 127.0.0.1:0` bound, from the startup log.
    pub fn listen_addr(&self) -> String {
        wait_for(
            "podprobe's listen address in its log",
            Duration::from_secs(30),
            || {
                let logs = self.logs();
                let start = logs.find("listen=").ok_or("not logged yet")? + "listen=".len();
                let addr = logs[start..].split_whitespace().next().unwrap_or_default();
                Ok::<_, String>(addr.to_string())
            },
            || self.logs(),
        )
    }

    /// SIGTERM, then the exit status (SIGKILL after 20 s: `None`).
    pub fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..80 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        self.kill();
        None
    }

    /// SIGKILL: no chance to finish anything in flight.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostPodprobe {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
        }
    }
}
