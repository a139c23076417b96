//! The metrics of the Event queue and publisher (counted through
//! [`EventObserver`]): what became of every Event, and the entries of the
//! correlator's caches.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use podprobe_core::prober::events::recorder::{EventObserver, EventOutcome};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EventLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CacheLabels {
    /// `aggregates`, `series` or `spam`.
    cache: &'static str,
}

/// The Events' metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct EventMetrics {
    events: Family<EventLabels, Counter>,
    event_cache_entries: Family<CacheLabels, Gauge>,
}

impl EventMetrics {
    /// Registers the Events' families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = EventMetrics {
            events: Family::default(),
            event_cache_entries: Family::default(),
        };
        registry.register(
            "podprobe_events",
            "Kubernetes Events podprobe recorded, failed to record, dropped because its queue was full, filtered (not written: the pod spent its budget of the spam filter, 25 then one per 5 minutes) or held (counted in its series, whose Event gets the count with its next update)",
            metrics.events.clone(),
        );
        registry.register(
            "podprobe_event_cache_entries",
            "Entries of the Event correlator's caches after its last check, once a minute (aggregates: similar events' notes; series: counted events; spam: per-pod token buckets); each holds at most 4,096 and forgets what a new entry would equal, and the budgets and aggregates of pods deleted since the last check",
            metrics.event_cache_entries.clone(),
        );
        // Outcome series exist from the start, so a rate over them is
        // defined before the first event.
        for outcome in [
            EventOutcome::Recorded,
            EventOutcome::Failed,
            EventOutcome::Dropped,
            EventOutcome::Filtered,
            EventOutcome::Held,
        ] {
            metrics.events.get_or_create_owned(&EventLabels {
                outcome: outcome.as_str(),
            });
        }
        metrics
    }
}

impl EventObserver for EventMetrics {
    fn event_done(&self, outcome: EventOutcome) {
        self.events
            .get_or_create(&EventLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    fn correlator_entries(&self, cache: &'static str, entries: usize) {
        self.event_cache_entries
            .get_or_create(&CacheLabels { cache })
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }
}
