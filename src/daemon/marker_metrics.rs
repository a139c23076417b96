//! The metrics of the marker writer ([`super::marker_sync`]): its patches
//! of pod labels and annotations, by outcome, and those waiting for a turn
//! and in flight (MK4).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::api::turns::TurnGauges;

/// What became of one marker patch (MK4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MarkerOutcome {
    /// Accepted by the API server.
    Sent,
    /// An error; sent again at the next resync.
    Failed,
    /// Not sent yet: the pod's marker writes are at their rate; the next
    /// sync with a token sends what the markers ask for then.
    Deferred,
}

impl MarkerOutcome {
    /// The `outcome` label value.
    fn as_str(self) -> &'static str {
        match self {
            MarkerOutcome::Sent => "sent",
            MarkerOutcome::Failed => "failed",
            MarkerOutcome::Deferred => "deferred",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MarkerLabels {
    outcome: &'static str,
}

/// The marker writer's metrics; a cheap handle (reference-counted).
#[derive(Debug, Clone)]
pub struct MarkerMetrics {
    writes: Family<MarkerLabels, Counter>,
    /// Kept by the writer's turns.
    pub(super) turns: TurnGauges,
}

impl MarkerMetrics {
    /// Registers `podprobe_marker_writes` and the turns' gauges in
    /// `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let marker_writes = Family::<MarkerLabels, Counter>::default();
        registry.register(
            "podprobe_marker_writes",
            "Patches of pod labels and annotations that probe markers asked for (podprobe.markers), by outcome (sent: accepted; failed: an error, retried at the next resync; deferred: held back by the pod's marker write rate, sent by a later sync)",
            marker_writes.clone(),
        );
        let turns = TurnGauges::register(
            registry,
            "podprobe_marker_writes",
            [
                "Marker patches waiting for a turn (few are in flight at once node-wide; a queue here means the API server answers slowly)",
                "Marker patches sent and not answered yet (bounded node-wide)",
            ],
        );
        // Outcome series exist from the start, so a rate over them is
        // defined before the first write.
        for outcome in [
            MarkerOutcome::Sent,
            MarkerOutcome::Failed,
            MarkerOutcome::Deferred,
        ] {
            marker_writes.get_or_create_owned(&MarkerLabels {
                outcome: outcome.as_str(),
            });
        }
        MarkerMetrics {
            writes: marker_writes,
            turns,
        }
    }

    /// Counts one marker patch by its outcome.
    pub(super) fn marker_write(&self, outcome: MarkerOutcome) {
        self.writes
            .get_or_create(&MarkerLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }
}
