//! The metrics of the status patcher: its `pods/status` patches by outcome
//! (counted through [`PatchObserver`]), the time from a result to the
//! patch it brought about, the pods waiting for a turn and the requests in
//! flight (kept by its [`Turns`](super::turns::Turns)), and its per-pod
//! tasks (set by the daemon's sync loop at every resync).

use std::time::Duration;

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::patcher::PatchObserver;
use super::turns::TurnGauges;

/// Buckets of `podprobe_result_to_status_seconds`: from a millisecond, where
/// an idle node's patches land, to the kubelet status manager's sync period
/// (`STATUS_RESYNC_PERIOD`), within which the kubelet writes any change.
const RESULT_TO_STATUS_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Outcome of one `pods/status` patch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PatchOutcome {
    /// Accepted by the API server.
    Sent,
    /// Rejected or not sent; the patcher retries.
    Failed,
    /// Rejected because a precondition (UID, resourceVersion) no longer
    /// held: another writer was first; the patcher re-reads and rebuilds.
    Conflict,
}

impl PatchOutcome {
    /// The `outcome` label value.
    fn as_str(self) -> &'static str {
        match self {
            PatchOutcome::Sent => "sent",
            PatchOutcome::Failed => "failed",
            PatchOutcome::Conflict => "conflict",
        }
    }
}

impl EncodeLabelValue for PatchOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PatchLabels {
    outcome: PatchOutcome,
}

/// The status patcher's metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct PatchMetrics {
    status_patches: Family<PatchLabels, Counter>,
    result_to_status: Histogram,
    turns: TurnGauges,
    patch_tasks: Gauge,
}

impl PatchMetrics {
    /// Registers the patcher's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let status_patches = Family::default();
        registry.register(
            "podprobe_status_patches",
            "Patches of pods/status sent to the API server, by outcome (sent: accepted; conflict: another writer changed the pod first, rebuilt from a fresh read; failed: an error, retried later)",
            status_patches.clone(),
        );
        let result_to_status = Histogram::new(RESULT_TO_STATUS_BUCKETS);
        registry.register(
            "podprobe_result_to_status_seconds",
            "Time from the end of a probe run that changed its cached result to the API server's acceptance of the status patch it brought about",
            result_to_status.clone(),
        );
        let turns = TurnGauges::register(
            registry,
            "podprobe_status_patches",
            [
                "Pods whose status patch waits for a turn (few status requests are in flight at once node-wide; a queue here means the API server answers slowly)",
                "Status requests sent and not answered yet (a patch of pods/status, or the read before it; bounded node-wide)",
            ],
        );
        let patch_tasks = Gauge::default();
        registry.register(
            "podprobe_status_patch_tasks",
            "Per-pod status patch tasks alive (one per pod podprobe wrote status for, until the pod goes)",
            patch_tasks.clone(),
        );
        let metrics = PatchMetrics {
            status_patches,
            result_to_status,
            turns,
            patch_tasks,
        };
        // Outcome series exist from the start, so a rate over them is
        // defined before the first patch.
        for outcome in [
            PatchOutcome::Sent,
            PatchOutcome::Failed,
            PatchOutcome::Conflict,
        ] {
            metrics
                .status_patches
                .get_or_create_owned(&PatchLabels { outcome });
        }
        metrics
    }

    /// Sets the number of per-pod status patch tasks alive.
    pub fn set_patch_tasks(&self, count: usize) {
        self.patch_tasks
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    fn count(&self, outcome: PatchOutcome) {
        self.status_patches
            .get_or_create(&PatchLabels { outcome })
            .inc();
    }
}

impl PatchObserver for PatchMetrics {
    fn patch_sent(&self, since_result: Option<Duration>) {
        self.count(PatchOutcome::Sent);
        if let Some(latency) = since_result {
            self.result_to_status.observe(latency.as_secs_f64());
        }
    }

    fn patch_failed(&self) {
        self.count(PatchOutcome::Failed);
    }

    fn patch_conflict(&self) {
        self.count(PatchOutcome::Conflict);
    }

    fn turn_gauges(&self) -> TurnGauges {
        self.turns.clone()
    }
}
