//! What `/metrics` and `/metrics/probes` serve: two registries, encoded as
//! OpenMetrics text ([`CONTENT_TYPE`]).
//!
//! - the prober registry holds the kubelet's prober metrics under their
//!   kubelet names and labels (M1-M5 of `spec/prober.md`), which
//!   `/metrics/probes` serves alone, where the kubelet serves them;
//! - the own registry holds podprobe's own and the process's.
//!
//! Each subsystem registers its families next to its code and keeps the
//! handles it counts with (`crate::daemon::metric_set` lists the parts and
//! builds both registries from them); this module only encodes them, so a
//! new subsystem's metrics are a module of their own, not a change here.

use std::sync::Arc;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::registry::Registry;

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registries `/metrics` serves, filled: a cheap handle (both are
/// reference-counted) for the server's listeners.
#[derive(Clone)]
pub struct Metrics {
    /// The kubelet's prober metrics, which it serves on `/metrics/probes`.
    prober: Arc<Registry>,
    /// podprobe's own.
    own: Arc<Registry>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Serves `prober`, the kubelet's prober metrics, and `own`, every
    /// other family, in that order.
    pub fn new(prober: Registry, own: Registry) -> Self {
        Metrics {
            prober: Arc::new(prober),
            own: Arc::new(own),
        }
    }

    /// The OpenMetrics text exposition of every metric, `# EOF` included
    /// (`/metrics`).
    pub fn encode(&self) -> String {
        encode_all(&[&self.prober, &self.own])
    }

    /// The exposition of the prober metrics only, as the kubelet serves them
    /// on `/metrics/probes`.
    pub fn encode_probes(&self) -> String {
        encode_all(&[&self.prober])
    }
}

fn encode_all(registries: &[&Registry]) -> String {
    let mut text = String::new();
    let encoded = registries
        .iter()
        .try_for_each(|registry| encode_registry(&mut text, registry))
        .and_then(|()| encode_eof(&mut text));
    // Writing into a String cannot fail, and no metric here has a value the
    // encoder rejects.
    if let Err(error) = encoded {
        tracing::error!(%error, "cannot encode metrics");
    }
    text
}
