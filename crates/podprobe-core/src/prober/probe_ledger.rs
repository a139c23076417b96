//! The last run of every probe on the node, kept for `kubectl podprobe
//! status` (PS1-PS3 in docs/kubelet-semantics.md): its result, when it ran,
//! the consecutive count against its threshold, when it runs next, and its
//! output. The kubelet keeps a probe's output only in an Event and its log.
//!
//! Bounded, since a pod chooses its outputs (an exec probe's stdout, an HTTP
//! body): at most [`MAX_OUTPUT_BYTES`] per probe, [`MAX_POD_OUTPUT_BYTES`]
//! per pod and a node-wide budget (`--status-output-budget-bytes`). An
//! output that does not fit is cut to what is left, but never below
//! [`OUTPUT_FLOOR_BYTES`] (the gate message's size), so every probe keeps
//! the start of what it saw; [`ProbeReport::output_truncated`] says so.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::prober::results::CachedResult;
use crate::prober::worker::{ProbeRun, WorkerConfig};
use crate::spec::ProbeKind;
use crate::util::pod::{pod_name, pod_namespace};

pub mod api_types;

/// Most bytes of one probe's output kept: the 4 KB that Consul keeps of a
/// check's output.
pub const MAX_OUTPUT_BYTES: usize = 4096;

/// Most bytes of output kept for all probes of one pod.
pub const MAX_POD_OUTPUT_BYTES: usize = 16 * 1024;

/// Default node-wide budget of kept output (`--status-output-budget-bytes`).
pub const DEFAULT_NODE_OUTPUT_BYTES: usize = 1024 * 1024;

/// Bytes of output every probe keeps whatever the budgets: as many as the
/// gate condition's message holds.
pub const OUTPUT_FLOOR_BYTES: usize = 256;

/// What the last run of a probe concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResult {
    Success,
    Failure,
    /// Every attempt errored: the kubelet throws such a run away (D11), so
    /// it does not count towards a threshold.
    Error,
}

/// The last run of one probe of one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    pub container: String,
    pub probe: ProbeKind,
    pub result: RunResult,
    /// When the run ended.
    pub ran_at: Time,
    /// How long the run took, in milliseconds.
    pub duration_ms: u64,
    /// How many runs in a row had this result (D13); an errored run keeps
    /// the count of the runs before it.
    pub consecutive: i64,
    /// The threshold the count is held against: `failureThreshold` for a
    /// failure (or an error), `successThreshold` for a success.
    pub threshold: i32,
    /// When the next run is due: one period after this one began (W7).
    pub next_run: Time,
    /// What the probe saw: the output the kubelet would have put in its
    /// Event (the error, for an errored run), within the budgets.
    pub output: String,
    /// Whether `output` was cut to fit a budget.
    pub output_truncated: bool,
}

/// Everything the ledger holds for one pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Probes by container name, then kind.
    pub probes: Vec<ProbeReport>,
}

/// The last run of every probe of the node's pods; shared by the workers
/// (writers) and the status endpoint (reader).
#[derive(Debug)]
pub struct ProbeLedger {
    node_budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By namespace, then name: what a caller asks for. Nested, so that a
    /// run finds its pod without building a key (this is on every run's
    /// path).
    pods: HashMap<String, HashMap<String, PodEntry>>,
    /// Output bytes kept node-wide.
    bytes: usize,
}

#[derive(Debug)]
struct PodEntry {
    uid: String,
    /// A few per pod: found by a scan.
    probes: Vec<ProbeReport>,
    bytes: usize,
}

impl Default for ProbeLedger {
    fn default() -> Self {
        Self::new(DEFAULT_NODE_OUTPUT_BYTES)
    }
}

impl ProbeLedger {
    /// A ledger keeping at most `node_budget` bytes of output (more only
    /// through the per-probe floor).
    pub fn new(node_budget: usize) -> Self {
        ProbeLedger {
            node_budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Keeps `run`, which ended at wall-clock `now`, as its probe's last.
    /// The probe's entry is updated in place; its output is copied only
    /// when it changed.
    pub fn record(&self, run: &ProbeRun<'_>, now: Timestamp) {
        let config = run.config;
        let spec = config.spec();
        let (result, output) = match (run.result, &run.verdict.error) {
            (None, error) => (RunResult::Error, error.as_deref().unwrap_or_default()),
            (Some(CachedResult::Success), _) => (RunResult::Success, run.verdict.output.as_str()),
            (Some(_), _) => (RunResult::Failure, run.verdict.output.as_str()),
        };
        let threshold = match result {
            RunResult::Success => spec.success_threshold,
            RunResult::Failure | RunResult::Error => spec.failure_threshold,
        };
        let began = now.checked_sub(run.duration).unwrap_or(now);
        let next_run = began.checked_add(spec.period()).unwrap_or(Timestamp::MAX);
        let consecutive = if result == RunResult::Error {
            run.consecutive
        } else {
            run.consecutive.max(1)
        };
        let mut inner = lock(&self.inner);
        let Inner { pods, bytes } = &mut *inner;
        let pod = pod_entry(pods, bytes, config);
        let (container, kind) = (config.container_name(), config.kind());
        let index = match pod
            .probes
            .iter()
            .position(|p| p.container == container && p.probe == kind)
        {
            Some(index) => index,
            None => {
                pod.probes.push(ProbeReport {
                    container: container.to_string(),
                    probe: kind,
                    result,
                    ran_at: Time(now),
                    duration_ms: 0,
                    consecutive: 0,
                    threshold,
                    next_run: Time(next_run),
                    output: String::new(),
                    output_truncated: false,
                });
                pod.probes.len() - 1
            }
        };
        let report = &mut pod.probes[index];
        let held = report.output.len();
        let room = MAX_OUTPUT_BYTES
            .min((MAX_POD_OUTPUT_BYTES + held).saturating_sub(pod.bytes))
            .min((self.node_budget + held).saturating_sub(*bytes))
            .max(OUTPUT_FLOOR_BYTES);
        let kept = truncate_at_char(output, room);
        if report.output != kept {
            report.output = kept.to_string();
        }
        pod.bytes = pod.bytes - held + report.output.len();
        *bytes = *bytes - held + report.output.len();
        report.output_truncated = report.output.len() < output.len();
        report.result = result;
        report.ran_at = Time(now);
        report.duration_ms = u64::try_from(run.duration.as_millis()).unwrap_or(u64::MAX);
        report.consecutive = consecutive;
        report.threshold = threshold;
        report.next_run = Time(next_run);
    }

    /// Forgets the probe of a worker that ended (W10).
    pub fn forget(&self, config: &WorkerConfig) {
        let mut inner = lock(&self.inner);
        let Inner { pods, bytes } = &mut *inner;
        let namespace = pod_namespace(config.pod());
        let Some(names) = pods.get_mut(namespace) else {
            return;
        };
        let name = pod_name(config.pod());
        let Some(pod) = names.get_mut(name) else {
            return;
        };
        if pod.uid != config.pod_uid() {
            // A worker of an older pod of the same name.
            return;
        }
        let (container, kind) = (config.container_name(), config.kind());
        if let Some(index) = pod
            .probes
            .iter()
            .position(|p| p.container == container && p.probe == kind)
        {
            let report = pod.probes.swap_remove(index);
            pod.bytes -= report.output.len();
            *bytes -= report.output.len();
        }
        if pod.probes.is_empty() {
            names.remove(name);
            if names.is_empty() {
                pods.remove(namespace);
            }
        }
    }

    /// Pods with a probe in the ledger (#39): each goes with its last
    /// worker.
    pub fn pods(&self) -> usize {
        lock(&self.inner).pods.values().map(HashMap::len).sum()
    }

    /// The pod `namespace/name`'s probes, if any ran, by container and kind.
    pub fn report(&self, namespace: &str, name: &str) -> Option<PodReport> {
        let inner = lock(&self.inner);
        let pod = inner.pods.get(namespace)?.get(name)?;
        let mut probes = pod.probes.clone();
        probes.sort_by(|a, b| (&a.container, a.probe).cmp(&(&b.container, b.probe)));
        Some(PodReport {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: pod.uid.clone(),
            probes,
        })
    }

    /// Output bytes kept node-wide.
    pub fn output_bytes(&self) -> usize {
        lock(&self.inner).bytes
    }
}

/// The pod's entry, a new one when the pod of that name is new (its older
/// namesake's probes go); keys are built only for a pod not seen yet.
fn pod_entry<'a>(
    pods: &'a mut HashMap<String, HashMap<String, PodEntry>>,
    node_bytes: &mut usize,
    config: &WorkerConfig,
) -> &'a mut PodEntry {
    let (namespace, name) = (pod_namespace(config.pod()), pod_name(config.pod()));
    let fresh = || PodEntry {
        uid: config.pod_uid().to_string(),
        probes: Vec::new(),
        bytes: 0,
    };
    if !pods.contains_key(namespace) {
        pods.insert(namespace.to_string(), HashMap::new());
    }
    let names = pods.get_mut(namespace).expect("inserted above");
    if !names.contains_key(name) {
        names.insert(name.to_string(), fresh());
    }
    let pod = names.get_mut(name).expect("inserted above");
    if pod.uid != config.pod_uid() {
        *node_bytes -= pod.bytes;
        *pod = fresh();
    }
    pod
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary.
fn truncate_at_char(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every call leaves the ledger consistent; a panic elsewhere leaves it
    // usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::spec::{Outcome, ProbeError, ProbeResult, ProbeVerdict};
    use crate::testing::{container, epoch, pod, probe_spec};

    fn config(uid: &str, name: &str, kind: ProbeKind) -> WorkerConfig {
        let app = container(name);
        let pod = pod(uid, vec![app.clone()], vec![]);
        WorkerConfig::new(kind, probe_spec(10, 0, 1, 3), Arc::new(pod), &app)
    }

    fn ran(
        ledger: &ProbeLedger,
        config: &WorkerConfig,
        result: Option<CachedResult>,
        output: &str,
        consecutive: i64,
    ) {
        let verdict = match result {
            None => ProbeVerdict::from_attempt(config.kind(), Err(ProbeError::unknown(output)), 3),
            Some(r) => {
                let low = if r == CachedResult::Success {
                    ProbeResult::Success
                } else {
                    ProbeResult::Failure
                };
                ProbeVerdict::from_attempt(config.kind(), Ok(Outcome::new(low, output)), 1)
            }
        };
        let run = ProbeRun {
            config,
            container_id: "containerd://abc",
            verdict: &verdict,
            result,
            consecutive,
            duration: Duration::from_millis(250),
        };
        ledger.record(&run, epoch());
    }

    #[test]
    fn ps1_the_last_run_is_kept_with_its_count_threshold_and_next_run() {
        let ledger = ProbeLedger::default();
        let readiness = config("u1", "app", ProbeKind::Readiness);
        ran(
            &ledger,
            &readiness,
            Some(CachedResult::Failure),
            "HTTP probe failed with statuscode: 503",
            2,
        );
        let report = ledger.report("default", "pod-u1").expect("report");
        assert_eq!(report.uid, "u1");
        let probe = &report.probes[0];
        assert_eq!(probe.result, RunResult::Failure);
        assert_eq!((probe.consecutive, probe.threshold), (2, 3));
        assert_eq!(probe.output, "HTTP probe failed with statuscode: 503");
        assert_eq!(probe.ran_at.0, epoch());
        // W7: one period after the run began (250 ms before it ended).
        let next = epoch() + Duration::from_secs(10) - Duration::from_millis(250);
        assert_eq!(probe.next_run.0, next);
        // A success is held against successThreshold.
        ran(&ledger, &readiness, Some(CachedResult::Success), "", 1);
        let probe = &ledger.report("default", "pod-u1").unwrap().probes[0];
        assert_eq!(
            (probe.result, probe.consecutive, probe.threshold),
            (RunResult::Success, 1, 1)
        );
        // An errored run keeps the count before it and shows the error.
        ran(&ledger, &readiness, None, "connection refused", 1);
        let probe = &ledger.report("default", "pod-u1").unwrap().probes[0];
        assert_eq!((probe.result, probe.consecutive), (RunResult::Error, 1));
        assert_eq!(probe.output, "connection refused");
        assert_eq!(ledger.report("default", "other"), None);
    }

    #[test]
    fn ps1_output_is_bounded_per_probe_per_pod_and_per_node() {
        let ledger = ProbeLedger::new(10 * 1024);
        let huge = "é".repeat(10_000);
        let mut total = 0;
        for name in ["a", "b", "c", "d", "e"] {
            let c = config("u1", name, ProbeKind::Liveness);
            ran(&ledger, &c, Some(CachedResult::Failure), &huge, 1);
            let report = ledger.report("default", "pod-u1").unwrap();
            let probe = report.probes.iter().find(|p| p.container == name).unwrap();
            assert!(probe.output_truncated);
            assert!(probe.output.len() <= MAX_OUTPUT_BYTES, "per probe");
            assert!(probe.output.len() >= OUTPUT_FLOOR_BYTES - 1, "the floor");
            total += probe.output.len();
        }
        // The pod's 16 KiB would allow four full outputs; the node's 10 KiB
        // only two and a half; the rest keep the floor.
        assert!(total <= 10 * 1024 + 3 * OUTPUT_FLOOR_BYTES, "{total}");
        assert_eq!(ledger.output_bytes(), total);
        // Another pod still keeps its floor.
        let other = config("u2", "app", ProbeKind::Liveness);
        ran(&ledger, &other, Some(CachedResult::Failure), &huge, 1);
        let kept = &ledger.report("default", "pod-u2").unwrap().probes[0].output;
        assert!((OUTPUT_FLOOR_BYTES - 1..=OUTPUT_FLOOR_BYTES).contains(&kept.len()));
        // Forgetting gives the bytes back.
        for name in ["a", "b", "c", "d", "e"] {
            ledger.forget(&config("u1", name, ProbeKind::Liveness));
        }
        ledger.forget(&other);
        assert_eq!(ledger.output_bytes(), 0);
        assert_eq!(ledger.report("default", "pod-u1"), None);
    }

    #[test]
    fn ps1_a_new_pod_of_the_same_name_replaces_the_old_ones_probes() {
        let ledger = ProbeLedger::default();
        let old = config("u1", "app", ProbeKind::Readiness);
        ran(&ledger, &old, Some(CachedResult::Failure), "old", 1);
        let mut new_pod = old.pod().clone();
        new_pod.metadata.uid = Some("u2".into());
        let app = container("app");
        let new = WorkerConfig::new(
            ProbeKind::Liveness,
            probe_spec(10, 0, 1, 3),
            Arc::new(new_pod),
            &app,
        );
        ran(&ledger, &new, Some(CachedResult::Success), "new", 1);
        let report = ledger.report("default", "pod-u1").unwrap();
        assert_eq!(report.uid, "u2");
        assert_eq!(report.probes.len(), 1);
        assert_eq!(ledger.output_bytes(), 3);
        // The old pod's worker ending forgets nothing of the new one's.
        ledger.forget(&old);
        assert_eq!(ledger.report("default", "pod-u1").unwrap().probes.len(), 1);
    }
}
