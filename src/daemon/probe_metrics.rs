//! The metrics of the probe workers and their runs: the kubelet's prober
//! metrics under their kubelet names and labels (M1-M5 of
//! `spec/prober.md`), which go to the prober registry that
//! `/metrics/probes` serves, and podprobe's own (the workers running, the
//! runs that errored). The daemon's `Telemetry` feeds them from the
//! workers' reports, the sync loop sets the worker count.
//!
//! The kubelet's series, as exposed (labels sorted by name, like
//! `client_golang`):
//!
//! ```text
//! prober_probe_total{container,namespace,pod,pod_uid,probe_type,result}
//! prober_probe_duration_seconds_bucket{container,namespace,pod,probe_type,le}
//! ```

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use podprobe_core::prober::results::CachedResult;
use podprobe_core::prober::worker::WorkerConfig;
use podprobe_core::spec::ProbeKind;

/// Prometheus' default histogram buckets (`prometheus.DefBuckets`), which the
/// kubelet's `prober_probe_duration_seconds` uses.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Labels of `prober_probe_total`, in exposition order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProbeTotalLabels {
    container: String,
    namespace: String,
    pod: String,
    pod_uid: String,
    /// The kubelet's `probeType.String()` ([`ProbeKind::as_str`]).
    probe_type: &'static str,
    result: &'static str,
}

/// Labels of `prober_probe_duration_seconds`: no `pod_uid`, no `result`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProbeDurationLabels {
    container: String,
    namespace: String,
    pod: String,
    /// The kubelet's `probeType.String()` ([`ProbeKind::as_str`]).
    probe_type: &'static str,
}

impl ProbeDurationLabels {
    fn of(config: &WorkerConfig) -> Self {
        let meta = &config.pod().metadata;
        ProbeDurationLabels {
            container: config.container_name().to_string(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            pod: meta.name.clone().unwrap_or_default(),
            probe_type: config.kind().as_str(),
        }
    }

    fn with_result(self, config: &WorkerConfig, result: CachedResult) -> ProbeTotalLabels {
        ProbeTotalLabels {
            container: self.container,
            namespace: self.namespace,
            pod: self.pod,
            pod_uid: config.pod_uid().to_string(),
            probe_type: self.probe_type,
            result: result_label(result),
        }
    }
}

/// The kubelet's `result` label values.
fn result_label(result: CachedResult) -> &'static str {
    match result {
        CachedResult::Success => "successful",
        CachedResult::Failure => "failed",
        CachedResult::Unknown => "unknown",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProbeErrorLabels {
    /// The kubelet's `probeType.String()` ([`ProbeKind::as_str`]).
    probe_type: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// The probe workers' metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct ProbeMetrics {
    probe_total: Family<ProbeTotalLabels, Counter>,
    probe_duration: HistogramFamily<ProbeDurationLabels>,
    probe_errors: Family<ProbeErrorLabels, Counter>,
    workers: Gauge,
}

impl ProbeMetrics {
    /// Registers the kubelet's families in `prober` and podprobe's own in
    /// `own`.
    pub fn register(prober: &mut Registry, own: &mut Registry) -> Self {
        let metrics = ProbeMetrics {
            probe_total: Family::default(),
            probe_duration: Family::new_with_constructor(duration_histogram),
            probe_errors: Family::default(),
            workers: Gauge::default(),
        };
        // Help texts are the kubelet's, with the stability prefix that
        // component-base adds to non-stable metrics; the encoder appends the
        // final period. Counter names lose `_total`: the encoder adds it.
        prober.register(
            "prober_probe",
            "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result",
            metrics.probe_total.clone(),
        );
        prober.register(
            "prober_probe_duration_seconds",
            "[ALPHA] Duration in seconds for a probe response",
            metrics.probe_duration.clone(),
        );
        own.register(
            "podprobe_workers",
            "Probe workers running (one per pod, container and probe type)",
            metrics.workers.clone(),
        );
        own.register(
            "podprobe_probe_errors",
            "Probe runs that errored (every attempt failed to run the probe, e.g. an unresolvable port or a runtime error); the kubelet throws such runs away and counts them nowhere",
            metrics.probe_errors.clone(),
        );
        // The series exist from the start, so a rate over them is defined
        // before the first error.
        for probe_type in [
            ProbeKind::Startup,
            ProbeKind::Readiness,
            ProbeKind::Liveness,
        ] {
            metrics.probe_errors.get_or_create_owned(&ProbeErrorLabels {
                probe_type: probe_type.as_str(),
            });
        }
        metrics
    }

    /// Records one completed, error-free probe run of `config`'s worker
    /// (M2): counts it by result, and observes `duration` for successful
    /// and unknown results only (M3: failures are not observed).
    pub fn probe_completed(&self, config: &WorkerConfig, result: CachedResult, duration: Duration) {
        let duration_labels = ProbeDurationLabels::of(config);
        if result != CachedResult::Failure {
            self.probe_duration
                .get_or_create(&duration_labels)
                .observe(duration.as_secs_f64());
        }
        self.probe_total
            .get_or_create(&duration_labels.with_result(config, result))
            .inc();
    }

    /// Counts one probe run of `kind` that errored (D11: thrown away,
    /// so not in `prober_probe_total`).
    pub fn probe_errored(&self, kind: ProbeKind) {
        self.probe_errors
            .get_or_create(&ProbeErrorLabels {
                probe_type: kind.as_str(),
            })
            .inc();
    }

    /// Deletes every series of `config`'s worker (M5): its three
    /// `prober_probe_total` series and its `prober_probe_duration_seconds`.
    pub fn worker_stopped(&self, config: &WorkerConfig) {
        let duration_labels = ProbeDurationLabels::of(config);
        for result in [
            CachedResult::Success,
            CachedResult::Failure,
            CachedResult::Unknown,
        ] {
            self.probe_total
                .remove(&duration_labels.clone().with_result(config, result));
        }
        self.probe_duration.remove(&duration_labels);
    }

    /// Sets the number of probe workers running.
    pub fn set_workers(&self, count: usize) {
        self.workers.set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::server::metrics::Metrics;
    use crate::testing::{container, pod, probe_spec};

    /// Probe metrics in registries of their own, and what `/metrics` serves
    /// of them.
    fn registered() -> (ProbeMetrics, Metrics) {
        let (mut prober, mut own) = (Registry::default(), Registry::default());
        let probes = ProbeMetrics::register(&mut prober, &mut own);
        (probes, Metrics::new(prober, own))
    }

    fn readiness_worker() -> WorkerConfig {
        let pod = pod("uid-1", vec![container("app")], vec![]);
        WorkerConfig::new(
            ProbeKind::Readiness,
            probe_spec(10, 0, 1, 3),
            Arc::new(pod),
            &container("app"),
        )
    }

    /// The exposition lines of the metric family `name` (samples, without
    /// HELP/TYPE), in order.
    fn samples(metrics: &Metrics, name: &str) -> Vec<String> {
        metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with(name))
            .map(str::to_string)
            .collect()
    }

    const TOTAL_LABELS: &str = r#"container="app",namespace="default",pod="pod-uid-1",pod_uid="uid-1",probe_type="Readiness""#;
    const DURATION_LABELS: &str =
        r#"container="app",namespace="default",pod="pod-uid-1",probe_type="Readiness""#;

    #[test]
    fn m1_help_and_type_lines_match_the_kubelet() {
        let (probes, metrics) = registered();
        probes.probe_completed(&readiness_worker(), CachedResult::Success, Duration::ZERO);
        let text = metrics.encode();
        assert!(text.contains(
            "# HELP prober_probe [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.\n# TYPE prober_probe counter\n"
        ), "{text}");
        assert!(text.contains(
            "# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.\n# TYPE prober_probe_duration_seconds histogram\n"
        ), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn m2_m3_successful_run_is_counted_and_observed() {
        let (probes, metrics) = registered();
        let config = readiness_worker();
        probes.probe_completed(&config, CachedResult::Success, Duration::from_millis(30));

        assert_eq!(
            samples(&metrics, "prober_probe_total"),
            [format!(
                r#"prober_probe_total{{{TOTAL_LABELS},result="successful"}} 1"#
            )]
        );
        let duration = samples(&metrics, "prober_probe_duration_seconds");
        let bucket = |le: &str, n: u32| {
            format!(r#"prober_probe_duration_seconds_bucket{{le="{le}",{DURATION_LABELS}}} {n}"#)
        };
        let mut expected = vec![
            format!("prober_probe_duration_seconds_sum{{{DURATION_LABELS}}} 0.03"),
            format!("prober_probe_duration_seconds_count{{{DURATION_LABELS}}} 1"),
        ];
        for (le, n) in [
            ("0.005", 0),
            ("0.01", 0),
            ("0.025", 0),
            ("0.05", 1),
            ("0.1", 1),
            ("0.25", 1),
            ("0.5", 1),
            ("1.0", 1),
            ("2.5", 1),
            ("5.0", 1),
            ("10.0", 1),
            ("+Inf", 1),
        ] {
            expected.push(bucket(le, n));
        }
        assert_eq!(duration, expected);
    }

    #[test]
    fn m3_failed_run_is_counted_but_not_observed() {
        let (probes, metrics) = registered();
        let config = readiness_worker();
        probes.probe_completed(&config, CachedResult::Failure, Duration::from_millis(30));
        probes.probe_completed(&config, CachedResult::Failure, Duration::from_millis(30));

        assert_eq!(
            samples(&metrics, "prober_probe_total"),
            [format!(
                r#"prober_probe_total{{{TOTAL_LABELS},result="failed"}} 2"#
            )]
        );
        assert_eq!(
            samples(&metrics, "prober_probe_duration_seconds_"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn m3_unknown_run_is_counted_and_observed() {
        let (probes, metrics) = registered();
        probes.probe_completed(&readiness_worker(), CachedResult::Unknown, Duration::ZERO);

        assert_eq!(
            samples(&metrics, "prober_probe_total"),
            [format!(
                r#"prober_probe_total{{{TOTAL_LABELS},result="unknown"}} 1"#
            )]
        );
        assert!(
            samples(&metrics, "prober_probe_duration_seconds_count").contains(&format!(
                "prober_probe_duration_seconds_count{{{DURATION_LABELS}}} 1"
            ))
        );
    }

    #[test]
    fn m5_worker_stop_deletes_its_series_only() {
        let (probes, metrics) = registered();
        let stopped = readiness_worker();
        let other_pod = pod("uid-2", vec![container("app")], vec![]);
        let other = WorkerConfig::new(
            ProbeKind::Liveness,
            probe_spec(10, 0, 1, 3),
            Arc::new(other_pod),
            &container("app"),
        );
        for result in [
            CachedResult::Success,
            CachedResult::Failure,
            CachedResult::Unknown,
        ] {
            probes.probe_completed(&stopped, result, Duration::ZERO);
        }
        probes.probe_completed(&other, CachedResult::Success, Duration::ZERO);

        probes.worker_stopped(&stopped);

        assert_eq!(
            samples(&metrics, "prober_probe_total"),
            [
                r#"prober_probe_total{container="app",namespace="default",pod="pod-uid-2",pod_uid="uid-2",probe_type="Liveness",result="successful"} 1"#
            ]
        );
        assert_eq!(
            samples(&metrics, "prober_probe_duration_seconds_count"),
            [
                r#"prober_probe_duration_seconds_count{container="app",namespace="default",pod="pod-uid-2",probe_type="Liveness"} 1"#
            ]
        );
    }
}
