//! A gauge of runtime calls in flight (`podprobe_exec_in_flight`), owned by
//! the metrics registry and counted by the CRI client.

use prometheus_client::metrics::gauge::Gauge;

/// A gauge of operations in flight; [`InFlightGauge::enter`] counts one until
/// its guard drops, so an early return or a cancelled future cannot leak it.
#[derive(Debug, Clone, Default)]
pub struct InFlightGauge(Gauge);

impl InFlightGauge {
    /// Counts into `gauge`, a registered metric.
    pub fn new(gauge: Gauge) -> Self {
        InFlightGauge(gauge)
    }

    /// Counts one operation until the returned guard is dropped.
    #[must_use = "the operation counts only while the guard is alive"]
    pub fn enter(&self) -> InFlightGuard {
        self.0.inc();
        InFlightGuard(self.0.clone())
    }
}

/// Counts one operation in flight while alive (see [`InFlightGauge`]).
#[derive(Debug)]
pub struct InFlightGuard(Gauge);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
