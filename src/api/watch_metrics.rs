//! The metrics of the pod watch: the pods it knows (set by the daemon's
//! sync loop at every resync) and how long since it last heard from the
//! API server (read from its [`WatchActivity`] on every scrape).

use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use podprobe_core::util::watch_activity::WatchActivity;

/// The pod watch's metric families; a cheap handle (reference-counted).
#[derive(Debug, Clone)]
pub struct WatchMetrics {
    pods_watched: Gauge,
}

impl WatchMetrics {
    /// Registers the pod watch's families in `registry`; the idle time is
    /// `activity`'s.
    pub fn register(registry: &mut Registry, activity: Arc<WatchActivity>) -> Self {
        let metrics = WatchMetrics {
            pods_watched: Gauge::default(),
        };
        registry.register(
            "podprobe_pods_watched",
            "Pods on this node that the pod watch currently knows",
            metrics.pods_watched.clone(),
        );
        registry.register(
            "podprobe_pod_watch_idle_seconds",
            "Seconds since the pod watch last received anything from the API server (a watch response, an event or a bookmark); a healthy watch receives at least every 60 s",
            IdleSeconds(activity),
        );
        metrics
    }

    /// Sets the number of pods the pod watch knows.
    pub fn set_pods_watched(&self, count: usize) {
        self.pods_watched
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// `podprobe_pod_watch_idle_seconds`: a gauge read at scrape time, so it
/// is as fresh as the scrape without anything setting it.
#[derive(Debug)]
struct IdleSeconds(Arc<WatchActivity>);

impl EncodeMetric for IdleSeconds {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        ConstGauge::new(self.0.idle().as_secs_f64()).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}
