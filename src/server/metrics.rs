//! What `/metrics` and `/metrics/probes` serve: two registries, encoded as
//! OpenMetrics text ([`CONTENT_TYPE`]).
//!
//! - the own registry holds the process's and podprobe's own, and comes
//!   first in `/metrics`: the process's figures are read before the
//!   exposition holds the prober metrics' text (a MiB and more with a few
//!   hundred pods), so `podprobe_heap_in_use_bytes` does not count the
//!   scrape's own buffer;
//! - the prober registry holds the kubelet's prober metrics under their
//!   kubelet names and labels (M1-M5 of `spec/prober.md`), which
//!   `/metrics/probes` serves alone, where the kubelet serves them.
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
    /// Serves `own`, the process's and podprobe's families, and `prober`,
    /// the kubelet's prober metrics, in that order.
    pub fn new(prober: Registry, own: Registry) -> Self {
        Metrics {
            prober: Arc::new(prober),
            own: Arc::new(own),
        }
    }

    /// The OpenMetrics text exposition of every metric, `# EOF` included
    /// (`/metrics`).
    pub fn encode(&self) -> String {
        encode_all(&[&self.own, &self.prober])
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

#[cfg(test)]
mod tests {
    use std::sync::PoisonError;

    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;

    use super::*;
    use crate::server::process_stats::{HEAP_TESTS, ProcessCollector, ProcessStats};

    fn reported_heap(text: &str) -> i64 {
        text.lines()
            .find_map(|line| line.strip_prefix("podprobe_heap_in_use_bytes "))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no heap figure in {}", &text[..text.len().min(4096)]))
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn the_heap_figure_leaves_out_the_scrapes_own_text() {
        let _alone = HEAP_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        // One prober series whose label alone is 32 MiB of text: were the
        // heap read after the prober metrics were written, the figure
        // would hold all of it.
        const TEXT: usize = 32 << 20;
        let mut prober = Registry::default();
        let big: Family<Vec<(String, String)>, Gauge> = Family::default();
        big.get_or_create(&vec![("pod".to_owned(), "x".repeat(TEXT))])
            .set(1);
        prober.register("big", "One series with a long label", big);
        let mut own = Registry::default();
        ProcessCollector::register(&mut own);
        let metrics = Metrics::new(prober, own);
        // Other tests' threads move the process's heap by a few MiB
        // between two reads (see process_stats' heap test): a round they
        // disturbed by half the text is measured again.
        let mut seen = Vec::new();
        for _ in 0..5 {
            let before = ProcessStats::read().heap_in_use_bytes.expect("glibc");
            let text = metrics.encode();
            assert!(text.len() > TEXT);
            let grew = reported_heap(&text) - before;
            if grew < (TEXT as i64) / 2 {
                return;
            }
            seen.push(grew);
        }
        panic!("the heap figure grew by the scrape's text in every round: {seen:?} bytes");
    }
}
