//! How Events leave the prober's core: what records them
//! ([`EventRecorder`], the Event queue's sink in `podprobe run`) and what
//! counts what became of each ([`EventObserver`], the metrics). The killer
//! and the daemon record through the one, the queue reports to the other,
//! so none of them depends on the API edge or the metrics.

use std::fmt::Debug;

use super::record::PodEvent;

/// What became of one Event podprobe wanted to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventOutcome {
    /// Accepted by the API server.
    Recorded,
    /// Rejected by the API server or not sent because of a transport error.
    Failed,
    /// Thrown away because the event queue was full.
    Dropped,
    /// Not written: its pod's budget of the spam filter was spent.
    Filtered,
    /// Counted in its series; the series' Event gets the count with its
    /// next update.
    Held,
}

impl EventOutcome {
    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventOutcome::Recorded => "recorded",
            EventOutcome::Failed => "failed",
            EventOutcome::Dropped => "dropped",
            EventOutcome::Filtered => "filtered",
            EventOutcome::Held => "held",
        }
    }
}

/// Counts what became of each Event.
pub trait EventObserver: Debug + Send + Sync + 'static {
    fn event_done(&self, outcome: EventOutcome);

    /// The entries of the event correlator's caches (`aggregates`,
    /// `series`, `spam`), after each of its periodic checks.
    fn correlator_entries(&self, cache: &'static str, entries: usize);
}

/// Takes Events to record.
pub trait EventRecorder: Debug + Send + Sync + 'static {
    /// Records `event`; it never waits, and may drop it (a full queue).
    fn record(&self, event: PodEvent);

    /// The pod of `uid` is gone from the node: nothing kept for its
    /// Events decides anything any more (a gone pod records none). A
    /// recorder that keeps nothing per pod has nothing to forget.
    fn forget_pod(&self, _uid: &str) {}

    /// Records `event` if it could be built.
    fn record_opt(&self, event: Option<PodEvent>) {
        match event {
            Some(event) => self.record(event),
            // P5: the kubelet drops an event whose reference cannot be built.
            None => tracing::warn!("event for a pod without name or namespace not recorded"),
        }
    }
}
