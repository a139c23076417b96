//! Every metric family of `podprobe run`, by the subsystem that owns it:
//! the daemon creates the registries that `/metrics` serves
//! ([`Metrics`]), lets each subsystem register its families in them, and
//! hands each subsystem its part. A new subsystem's metrics are a module
//! next to it with a `register` function; here, a field and its call.
//!
//! | part | families | module |
//! |---|---|---|
//! | probe workers | `prober_probe_total`, `prober_probe_duration_seconds` (the kubelet's, also on `/metrics/probes`), `podprobe_workers`, `podprobe_probe_errors` | [`super::probe_metrics`] |
//! | budgets | `podprobe_budget_refusals`, `podprobe_probe_rate_delayed`, `podprobe_probe_rate_delay_seconds` | `daemon::budget_metrics` |
//! | pod tracker | `podprobe_per_pod_entries`, `podprobe_pods_tracked`, `podprobe_liveness_paused_pods` | `daemon::tracker_metrics` |
//! | marker writer | `podprobe_marker_writes`, `podprobe_marker_writes_waiting`, `podprobe_marker_writes_in_flight` | `daemon::marker_metrics` |
//! | workload guard | `podprobe_restart_budget_decisions`, `podprobe_readiness_floor_decisions`, `podprobe_readiness_floor_held_pods` | `daemon::workload_guard_metrics` |
//! | build | `podprobe_build_info` | [`super::build_info`] |
//! | status patcher | `podprobe_status_patches`, `podprobe_result_to_status_seconds`, `podprobe_status_patches_waiting`, `podprobe_status_patches_in_flight`, `podprobe_status_patch_tasks` | `api::patch_metrics` |
//! | API clients | `podprobe_api_rate_limiter_wait_seconds`, `podprobe_api_request_duration_seconds` | `api::request_metrics` |
//! | Events | `podprobe_events`, `podprobe_event_cache_entries` | [`crate::api::event_metrics`] |
//! | pod watch | `podprobe_pods_watched`, `podprobe_pod_watch_idle_seconds` | `api::watch_metrics` |
//! | `/metrics` authentication | `podprobe_metrics_auth_decisions` | [`crate::server::auth_metrics`] |
//! | status API | `podprobe_probe_status_requests`, `podprobe_status_api_forwarded` | `server::status_api::status_api_metrics` |
//! | CRI client | `podprobe_exec_in_flight` | [`crate::runtime::in_flight::InFlightGauge`] |
//! | network probes | `podprobe_network_probes_in_flight` | [`crate::runtime::in_flight::InFlightGauge`] |
//! | process | `process_*`, `podprobe_heap_*` | `server::process_stats` |

use std::sync::Arc;

use prometheus_client::registry::Registry;

use super::budget_metrics::BudgetMetrics;
use super::build_info::BuildInfo;
use super::marker_metrics::MarkerMetrics;
use super::probe_metrics::ProbeMetrics;
use super::tracker_metrics::TrackerMetrics;
use super::workload_guard_metrics::WorkloadGuardMetrics;
use crate::api::event_metrics::EventMetrics;
use crate::api::patch_metrics::PatchMetrics;
use crate::api::request_metrics::RequestMetrics;
use crate::api::watch_metrics::WatchMetrics;
use crate::runtime::in_flight::InFlightGauge;
use crate::server::auth_metrics::AuthDecisions;
use crate::server::metrics::Metrics;
use crate::server::process_stats::ProcessCollector;
use crate::server::status_api::StatusApiMetrics;
use podprobe_core::util::watch_activity::WatchActivity;

/// Every subsystem's metric families, registered, and what `/metrics`
/// serves of them; a cheap handle (every part is reference-counted).
#[derive(Debug, Clone)]
pub struct MetricSet {
    /// What `/metrics` and `/metrics/probes` serve: every family below.
    pub served: Metrics,
    pub probes: ProbeMetrics,
    pub(crate) budgets: BudgetMetrics,
    pub(crate) tracker: TrackerMetrics,
    pub(crate) markers: MarkerMetrics,
    pub(crate) workload_guard: WorkloadGuardMetrics,
    pub build_info: BuildInfo,
    pub(crate) patches: PatchMetrics,
    pub(crate) requests: RequestMetrics,
    pub events: EventMetrics,
    pub(crate) watch: WatchMetrics,
    pub auth: AuthDecisions,
    pub(crate) status_api: StatusApiMetrics,
    pub exec_in_flight: InFlightGauge,
    pub network_probes_in_flight: InFlightGauge,
}

impl MetricSet {
    /// Registers every family, with no series yet but those that exist
    /// from the start; the pod watch's idle time is `watch`'s.
    pub fn new(watch: Arc<WatchActivity>) -> Self {
        let mut prober = Registry::default();
        let mut own = Registry::default();
        // `/metrics` shows the families in the order they register here.
        // The process's come first: read before the exposition's buffer
        // grows, its heap figure is the daemon's, not the scrape's (at 300
        // pods the prober metrics are over a MiB of text).
        ProcessCollector::register(&mut own);
        let patches = PatchMetrics::register(&mut own);
        let requests = RequestMetrics::register(&mut own);
        let events = EventMetrics::register(&mut own);
        let tracker = TrackerMetrics::register(&mut own);
        let auth = AuthDecisions::register(&mut own);
        let status_api = StatusApiMetrics::register(&mut own);
        let probes = ProbeMetrics::register(&mut prober, &mut own);
        let watch = WatchMetrics::register(&mut own, watch);
        let markers = MarkerMetrics::register(&mut own);
        let workload_guard = WorkloadGuardMetrics::register(&mut own);
        let build_info = BuildInfo::register(&mut own);
        let exec_in_flight = InFlightGauge::register_exec(&mut own);
        let network_probes_in_flight = InFlightGauge::register_network_probes(&mut own);
        let budgets = BudgetMetrics::register(&mut own);
        MetricSet {
            served: Metrics::new(prober, own),
            probes,
            budgets,
            tracker,
            markers,
            workload_guard,
            build_info,
            patches,
            requests,
            events,
            watch,
            auth,
            status_api,
            exec_in_flight,
            network_probes_in_flight,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::patcher::PatchObserver;
    use crate::daemon::build_info::{REVISION, VERSION};
    use crate::server::auth_metrics::AuthOutcome;
    use crate::testing::{default_spec, worker_config};
    use podprobe_core::prober::events::recorder::{EventObserver, EventOutcome};
    use podprobe_core::prober::results::CachedResult;
    use podprobe_core::spec::ProbeKind;

    #[test]
    fn probes_exposition_has_only_the_prober_metrics() {
        let parts = MetricSet::new(WatchActivity::new());
        let metrics = &parts.served;
        let readiness = worker_config(ProbeKind::Readiness, default_spec());
        parts
            .probes
            .probe_completed(&readiness, CachedResult::Success, Duration::ZERO);
        let text = metrics.encode_probes();
        assert!(text.contains("prober_probe_total{"), "{text}");
        assert!(!text.contains("podprobe_"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[test]
    fn own_metrics_are_exposed_by_name() {
        let parts = MetricSet::new(WatchActivity::new());
        let metrics = &parts.served;
        parts.patches.patch_sent(None);
        parts.patches.patch_sent(None);
        parts.patches.patch_failed();
        parts.patches.patch_conflict();
        parts.events.event_done(EventOutcome::Dropped);
        parts.auth.count(AuthOutcome::Throttled);
        parts.probes.set_workers(3);
        parts.watch.set_pods_watched(2);

        let text = metrics.encode();
        for line in [
            r#"podprobe_status_patches_total{outcome="sent"} 2"#,
            r#"podprobe_status_patches_total{outcome="failed"} 1"#,
            r#"podprobe_status_patches_total{outcome="conflict"} 1"#,
            r#"podprobe_events_total{outcome="dropped"} 1"#,
            r#"podprobe_events_total{outcome="recorded"} 0"#,
            r#"podprobe_metrics_auth_decisions_total{outcome="throttled"} 1"#,
            r#"podprobe_metrics_auth_decisions_total{outcome="allowed"} 0"#,
            "podprobe_workers 3",
            "podprobe_pods_watched 2",
            "podprobe_exec_in_flight 0",
            "podprobe_network_probes_in_flight 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn build_info_errors_and_process_metrics_are_exposed() {
        let parts = MetricSet::new(WatchActivity::new());
        let metrics = &parts.served;
        parts.build_info.set("gate");
        parts.probes.probe_errored(ProbeKind::Liveness);
        let text = metrics.encode();
        let build_info = format!(
            r#"podprobe_build_info{{version="{VERSION}",revision="{REVISION}",mode="gate"}} 1"#
        );
        for line in [
            build_info.as_str(),
            r#"podprobe_probe_errors_total{probe_type="Liveness"} 1"#,
            r#"podprobe_probe_errors_total{probe_type="Readiness"} 0"#,
            "# TYPE process_cpu_seconds counter",
            "# TYPE process_open_fds gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name} "))),
                "missing {name} in\n{text}"
            );
        }
        // A second mode replaces the series instead of adding one.
        parts.build_info.set("authority");
        let text = metrics.encode();
        assert_eq!(text.matches("podprobe_build_info{").count(), 1, "{text}");
    }
}
