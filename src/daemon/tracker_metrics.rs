//! The metrics of the pod tracker's state, set by the sync loop at every
//! resync and from the tracker's effects: the pods it holds state for,
//! the entries of every structure kept per pod, the pods whose liveness
//! probes are paused.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StructureLabels {
    /// A name of `SyncLoop::per_pod_entries`.
    structure: &'static str,
}

/// The pod tracker's metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct TrackerMetrics {
    per_pod_entries: Family<StructureLabels, Gauge>,
    pods_tracked: Gauge,
    liveness_paused: Gauge,
}

impl TrackerMetrics {
    /// Registers the tracker's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = TrackerMetrics {
            per_pod_entries: Family::default(),
            pods_tracked: Gauge::default(),
            liveness_paused: Gauge::default(),
        };
        registry.register(
            "podprobe_per_pod_entries",
            "Entries of podprobe's structures kept per pod or container, at the last resync (pod_store: pods, each with its started verdicts and the status the workers read; results: cached probe results and failure notes; probe_rates: pods with a probe-run budget or a count at the node's; status_intents: pods with a status intent; markers: pods with marker writes; ledger: pods with last runs for kubectl podprobe status; containers: container IDs being stopped or with runtime facts); each follows the node's pods and is empty once they are gone",
            metrics.per_pod_entries.clone(),
        );
        registry.register(
            "podprobe_pods_tracked",
            "Pods podprobe holds state for (probes, verdicts), including pods without probes",
            metrics.pods_tracked.clone(),
        );
        registry.register(
            "podprobe_liveness_paused_pods",
            "Pods whose liveness probes are paused by podprobe.io/pause-liveness-until",
            metrics.liveness_paused.clone(),
        );
        metrics
    }

    /// Sets the entries of one per-pod structure (`SyncLoop::per_pod_entries`).
    pub fn set_per_pod_entries(&self, structure: &'static str, entries: usize) {
        self.per_pod_entries
            .get_or_create(&StructureLabels { structure })
            .set(gauge_value(entries));
    }

    /// Sets the number of pods the daemon holds state for.
    pub fn set_pods_tracked(&self, count: usize) {
        self.pods_tracked.set(gauge_value(count));
    }

    /// Sets the number of pods whose liveness probes are paused.
    pub fn set_liveness_paused(&self, count: usize) {
        self.liveness_paused.set(gauge_value(count));
    }
}

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
