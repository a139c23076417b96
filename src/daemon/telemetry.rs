//! The [`ProbeObserver`] of `podprobe run`: every probe run feeds the
//! metrics, records the Event the kubelet would and is kept in the ledger
//! that `kubectl podprobe status` reads.

use podprobe_core::prober::events::recorder::EventRecorder;
use std::sync::Arc;

use super::budget_metrics::BudgetMetrics;
use super::probe_metrics::ProbeMetrics;
use crate::api::event_broadcaster::PodEvent;
use podprobe_core::prober::probe_ledger::ProbeLedger;
use podprobe_core::prober::worker::{Clock, ProbeObserver, ProbeRun, WorkerConfig};

/// The [`ProbeObserver`] of `podprobe run`: probe metrics (M2, M3, M5) and
/// the events of probe runs (P3-P5), the ledger of last runs (PS1).
#[derive(Clone)]
pub struct Telemetry {
    metrics: ProbeMetrics,
    budgets: BudgetMetrics,
    events: Arc<dyn EventRecorder>,
    ledger: Arc<ProbeLedger>,
    clock: Arc<dyn Clock>,
}

impl Telemetry {
    /// Feeds `metrics` and, with the runs that waited for a probe-run
    /// budget, `budgets`; queues events on `events` and keeps every run in
    /// `ledger`, stamped with `clock`'s time.
    pub fn new(
        metrics: ProbeMetrics,
        budgets: BudgetMetrics,
        events: Arc<dyn EventRecorder>,
        ledger: Arc<ProbeLedger>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Telemetry {
            metrics,
            budgets,
            events,
            ledger,
            clock,
        }
    }
}

impl ProbeObserver for Telemetry {
    fn probe_ran(&self, run: &ProbeRun<'_>) {
        match run.result {
            Some(result) => self
                .metrics
                .probe_completed(run.config, result, run.duration),
            None => self.metrics.probe_errored(run.config.kind()),
        }
        // Errored runs have their event too (P3).
        if let Some(event) = &run.verdict.event {
            self.events.record_opt(PodEvent::probe(run.config, event));
        }
        self.ledger.record(run, self.clock.now());
    }

    fn worker_stopped(&self, config: &WorkerConfig) {
        self.metrics.worker_stopped(config);
        self.ledger.forget(config);
    }

    fn probe_delayed(&self, _config: &WorkerConfig, delay: std::time::Duration) {
        self.budgets.probe_delayed(delay);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::daemon::metric_set::MetricSet;
    use crate::testing::{container, epoch, pod, probe_spec};
    use podprobe_core::prober::probe_ledger::RunResult;
    use podprobe_core::prober::results::CachedResult;
    use podprobe_core::prober::worker::TokioClock;
    use podprobe_core::spec::{Outcome, ProbeError, ProbeKind, ProbeResult, ProbeVerdict};
    use podprobe_core::util::watch_activity::WatchActivity;

    #[tokio::test(start_paused = true)]
    async fn telemetry_counts_queues_the_verdict_event_and_keeps_the_run() {
        let parts = MetricSet::new(WatchActivity::new());
        let metrics = &parts.served;
        let recorded = Recorded::default();
        let ledger = Arc::new(ProbeLedger::default());
        let clock = Arc::new(TokioClock::new(epoch()));
        let telemetry = Telemetry::new(
            parts.probes.clone(),
            parts.budgets.clone(),
            Arc::new(recorded.clone()),
            ledger.clone(),
            clock,
        );
        let app = container("app");
        let pod = pod("uid-1", vec![app.clone()], vec![]);
        let config = WorkerConfig::new(
            ProbeKind::Liveness,
            probe_spec(10, 0, 1, 3),
            Arc::new(pod),
            &app,
        );
        let failed = ProbeVerdict::from_attempt(
            ProbeKind::Liveness,
            Ok(Outcome::new(ProbeResult::Failure, "")),
            1,
        );
        telemetry.probe_ran(&ProbeRun {
            config: &config,
            container_id: "containerd://abc",
            verdict: &failed,
            result: Some(CachedResult::Failure),
            consecutive: 1,
            duration: Duration::from_millis(5),
        });
        // D11/M2: an errored run is not counted but its event is recorded (P3).
        let errored = ProbeVerdict::from_attempt(
            ProbeKind::Liveness,
            Err(ProbeError::unknown("connection refused")),
            3,
        );
        telemetry.probe_ran(&ProbeRun {
            config: &config,
            container_id: "containerd://abc",
            verdict: &errored,
            result: None,
            consecutive: 1,
            duration: Duration::from_millis(5),
        });

        let text = metrics.encode();
        let total: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with("prober_probe_total"))
            .collect();
        assert_eq!(
            total,
            [
                r#"prober_probe_total{container="app",namespace="default",pod="pod-uid-1",pod_uid="uid-1",probe_type="Liveness",result="failed"} 1"#
            ]
        );
        // ... but counted as an error, by probe type.
        assert!(
            text.lines()
                .any(|l| l == r#"podprobe_probe_errors_total{probe_type="Liveness"} 1"#),
            "{text}"
        );
        let notes: Vec<_> = recorded
            .0
            .lock()
            .unwrap()
            .drain(..)
            .map(|e| e.note)
            .collect();
        assert_eq!(
            notes,
            [
                "Liveness probe failed: ".to_string(),
                "Liveness probe errored and resulted in unknown state: connection refused"
                    .to_string(),
            ]
        );

        // PS1: the ledger holds the last run, the error as its output.
        let report = ledger.report("default", "pod-uid-1").expect("a report");
        assert_eq!(report.probes.len(), 1);
        assert_eq!(report.probes[0].result, RunResult::Error);
        assert_eq!(report.probes[0].output, "connection refused");

        telemetry.worker_stopped(&config);
        assert!(!metrics.encode().contains("prober_probe_total{"));
        assert_eq!(ledger.report("default", "pod-uid-1"), None);
    }

    /// The Events recorded, in order.
    #[derive(Debug, Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<PodEvent>>>);

    impl EventRecorder for Recorded {
        fn record(&self, event: PodEvent) {
            self.0.lock().unwrap().push(event);
        }
    }
}
