//! Gauges of work in flight: the CRI client's `ExecSync` calls
//! (`podprobe_exec_in_flight`) and the network probes' attempts
//! (`podprobe_network_probes_in_flight`), each registered by the daemon and
//! counted where the work runs. Here, in the runtime layer, because both
//! the CRI client and the probe handlers count (tests/layering.rs).

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A gauge of operations in flight; [`InFlightGauge::enter`] counts one until
/// its guard drops, so an early return or a cancelled future cannot leak it.
#[derive(Debug, Clone, Default)]
pub struct InFlightGauge(Gauge);

impl InFlightGauge {
    /// Registers `podprobe_exec_in_flight` in `registry`: the CRI client's
    /// `ExecSync` calls in flight.
    pub fn register_exec(registry: &mut Registry) -> Self {
        Self::register(
            registry,
            "podprobe_exec_in_flight",
            "CRI ExecSync calls of exec probes currently in flight",
        )
    }

    /// Registers `podprobe_network_probes_in_flight` in `registry`: the
    /// attempts of HTTP, TCP and gRPC probes that hold a network probe slot
    /// (`--max-concurrent-network-probes`). Each holds its connection and
    /// buffers until its answer or its timeout, so on a node whose pods stop
    /// answering at once this, not the number of pods, moves the heap
    /// (bench/RESULTS.md, #39).
    pub fn register_network_probes(registry: &mut Registry) -> Self {
        Self::register(
            registry,
            "podprobe_network_probes_in_flight",
            "HTTP, TCP and gRPC probe attempts currently in flight",
        )
    }

    fn register(registry: &mut Registry, name: &str, help: &str) -> Self {
        let gauge = Gauge::default();
        registry.register(name, help, gauge.clone());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::registered;

    #[test]
    fn exec_in_flight_counts_live_guards() {
        let (gauge, metrics) = registered(InFlightGauge::register_exec);
        let first = gauge.enter();
        let second = gauge.enter();
        assert!(
            metrics
                .encode()
                .lines()
                .any(|l| l == "podprobe_exec_in_flight 2")
        );
        drop(first);
        drop(second);
        assert!(
            metrics
                .encode()
                .lines()
                .any(|l| l == "podprobe_exec_in_flight 0")
        );
    }
}
