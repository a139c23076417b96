//! Prometheus metrics of `podprobe run`: the kubelet's prober metrics under
//! their kubelet names and labels (M1-M5 of `spec/prober.md`), plus
//! podprobe's own (status patches and their tasks, workers, pods, ExecSync
//! calls in flight, events, the pod watch's idle time, probe runs that
//! errored, build information) and the process's own ([`crate::server::process_stats`]).
//!
//! [`Metrics`] is a cheap handle (every field is reference-counted): clone it
//! into whatever updates a metric. [`Metrics::encode`] renders the
//! OpenMetrics text that `/metrics` serves ([`CONTENT_TYPE`]).
//!
//! The kubelet's series, as exposed (labels sorted by name, like
//! `client_golang`):
//!
//! ```text
//! prober_probe_total{container,namespace,pod,pod_uid,probe_type,result}
//! prober_probe_duration_seconds_bucket{container,namespace,pod,probe_type,le}
//! ```

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::server::process_stats::ProcessCollector;
use podprobe_core::prober::events::recorder::{EventObserver, EventOutcome};
use podprobe_core::prober::results::CachedResult;
use podprobe_core::prober::worker::WorkerConfig;
use podprobe_core::spec::ProbeKind;
use podprobe_core::spec::probe_spec::budget::Budget;
use podprobe_core::util::watch_activity::WatchActivity;

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Prometheus' default histogram buckets (`prometheus.DefBuckets`), which the
/// kubelet's `prober_probe_duration_seconds` uses.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of `podprobe_result_to_status_seconds`: from a millisecond, where
/// an idle node's patches land, to the kubelet status manager's sync period
/// (`STATUS_RESYNC_PERIOD`), within which the kubelet writes any change.
pub const RESULT_TO_STATUS_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of `podprobe_api_rate_limiter_wait_seconds` and
/// `podprobe_api_request_duration_seconds`: client-go's for
/// `rest_client_rate_limiter_duration_seconds` and
/// `rest_client_request_duration_seconds`.
pub const API_CLIENT_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
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

/// Outcome of one `pods/status` patch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchOutcome {
    /// Accepted by the API server.
    Sent,
    /// Rejected or not sent; the patcher retries.
    Failed,
    /// Rejected because a precondition (UID, resourceVersion) no longer
    /// held: another writer was first; the patcher re-reads and rebuilds.
    Conflict,
}

impl PatchOutcome {
    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchOutcome::Sent => "sent",
            PatchOutcome::Failed => "failed",
            PatchOutcome::Conflict => "conflict",
        }
    }
}

/// What became of one marker patch (MK4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Accepted by the API server.
    Sent,
    /// An error; sent again at the next resync.
    Failed,
    /// Not sent yet: the pod's marker writes are at their rate; the next
    /// sync with a token sends what the markers ask for then.
    Deferred,
}

impl MarkerOutcome {
    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerOutcome::Sent => "sent",
            MarkerOutcome::Failed => "failed",
            MarkerOutcome::Deferred => "deferred",
        }
    }
}

/// What delegated authentication decided for one request of `/metrics` or
/// `/metrics/probes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthOutcome {
    /// Served.
    Allowed,
    /// 401: no token, or one the API server does not accept.
    Unauthenticated,
    /// 403: RBAC does not allow the token's user.
    Forbidden,
    /// A review got no verdict (401 or 500).
    Failed,
    /// 429: the request would have waited on a review, but its connection
    /// or the review queue had no room.
    Throttled,
}

impl AuthOutcome {
    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthOutcome::Allowed => "allowed",
            AuthOutcome::Unauthenticated => "unauthenticated",
            AuthOutcome::Forbidden => "forbidden",
            AuthOutcome::Failed => "failed",
            AuthOutcome::Throttled => "throttled",
        }
    }
}

impl EncodeLabelValue for AuthOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for PatchOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PatchLabels {
    outcome: PatchOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EventLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CacheLabels {
    /// `aggregates`, `series` or `spam`.
    cache: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StructureLabels {
    /// A name of `SyncLoop::per_pod_entries`.
    structure: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClientLabels {
    /// `api` or `reviews` (`apiclient::ClientName`).
    client: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BudgetLabels {
    budget: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AuthLabels {
    outcome: AuthOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProbeErrorLabels {
    /// The kubelet's `probeType.String()` ([`ProbeKind::as_str`]).
    probe_type: &'static str,
}

/// Labels of `podprobe_build_info`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildInfoLabels {
    version: &'static str,
    revision: &'static str,
    mode: &'static str,
}

/// The crate version, and the source revision when the build set
/// `PODPROBE_REVISION` (hack/image.sh and the Dockerfile do).
const VERSION: &str = env!("CARGO_PKG_VERSION");
const REVISION: &str = match option_env!("PODPROBE_REVISION") {
    Some(revision) => revision,
    None => "unknown",
};

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// All of podprobe's metrics and the registries that expose them.
#[derive(Clone)]
pub struct Metrics {
    /// The kubelet's prober metrics, which it serves on `/metrics/probes`.
    prober: Arc<Registry>,
    /// podprobe's own.
    own: Arc<Registry>,
    probe_total: Family<ProbeTotalLabels, Counter>,
    probe_duration: HistogramFamily<ProbeDurationLabels>,
    status_patches: Family<PatchLabels, Counter>,
    result_to_status: Histogram,
    rate_limiter_wait: HistogramFamily<ClientLabels>,
    api_request_duration: HistogramFamily<ClientLabels>,
    events: Family<EventLabels, Counter>,
    event_cache_entries: Family<CacheLabels, Gauge>,
    per_pod_entries: Family<StructureLabels, Gauge>,
    metrics_auth: Family<AuthLabels, Counter>,
    probe_status_auth: Family<AuthLabels, Counter>,
    status_api_forwarded: Counter,
    workers: Gauge,
    pods_watched: Gauge,
    pods_tracked: Gauge,
    liveness_paused: Gauge,
    marker_writes: Family<EventLabels, Counter>,
    patch_tasks: Gauge,
    exec_in_flight: Gauge,
    watch_idle: Gauge<f64, AtomicU64>,
    probe_errors: Family<ProbeErrorLabels, Counter>,
    budget_refusals: Family<BudgetLabels, Counter>,
    rate_delayed: Counter,
    rate_delay_seconds: Counter<f64, AtomicU64>,
    build_info: Family<BuildInfoLabels, Gauge>,
    /// Read on every scrape for `watch_idle`.
    watch: Arc<OnceLock<Arc<WatchActivity>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh registries with every metric registered and no series yet.
    pub fn new() -> Self {
        let mut prober = Registry::default();
        let mut own = Registry::default();
        let probe_total = Family::<ProbeTotalLabels, Counter>::default();
        let probe_duration: HistogramFamily<ProbeDurationLabels> =
            Family::new_with_constructor(duration_histogram);
        let status_patches = Family::<PatchLabels, Counter>::default();
        let result_to_status = Histogram::new(RESULT_TO_STATUS_BUCKETS);
        let api_client_histogram = || Histogram::new(API_CLIENT_BUCKETS);
        let rate_limiter_wait: HistogramFamily<ClientLabels> =
            Family::new_with_constructor(api_client_histogram);
        let api_request_duration: HistogramFamily<ClientLabels> =
            Family::new_with_constructor(api_client_histogram);
        let events = Family::<EventLabels, Counter>::default();
        let event_cache_entries = Family::<CacheLabels, Gauge>::default();
        let per_pod_entries = Family::<StructureLabels, Gauge>::default();
        let metrics_auth = Family::<AuthLabels, Counter>::default();
        let probe_status_auth = Family::<AuthLabels, Counter>::default();
        let status_api_forwarded = Counter::default();
        let workers = Gauge::default();
        let pods_watched = Gauge::default();
        let pods_tracked = Gauge::default();
        let liveness_paused = Gauge::default();
        let marker_writes = Family::<EventLabels, Counter>::default();
        let patch_tasks = Gauge::default();
        let exec_in_flight = Gauge::default();
        let budget_refusals = Family::<BudgetLabels, Counter>::default();
        let rate_delayed = Counter::default();
        let rate_delay_seconds = Counter::<f64, AtomicU64>::default();
        let watch_idle = Gauge::<f64, AtomicU64>::default();
        let probe_errors = Family::<ProbeErrorLabels, Counter>::default();
        let build_info = Family::<BuildInfoLabels, Gauge>::default();

        // Help texts are the kubelet's, with the stability prefix that
        // component-base adds to non-stable metrics; the encoder appends the
        // final period. Counter names lose `_total`: the encoder adds it.
        prober.register(
            "prober_probe",
            "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result",
            probe_total.clone(),
        );
        prober.register(
            "prober_probe_duration_seconds",
            "[ALPHA] Duration in seconds for a probe response",
            probe_duration.clone(),
        );
        own.register(
            "podprobe_status_patches",
            "Patches of pods/status sent to the API server, by outcome (sent: accepted; conflict: another writer changed the pod first, rebuilt from a fresh read; failed: an error, retried later)",
            status_patches.clone(),
        );
        own.register(
            "podprobe_result_to_status_seconds",
            "Time from the end of a probe run that changed its cached result to the API server's acceptance of the status patch it brought about",
            result_to_status.clone(),
        );
        own.register(
            "podprobe_api_rate_limiter_wait_seconds",
            "Time each API request waited for its client's request limit before it was sent, by client (api: --kube-api-qps, everything but reviews and Event writes; reviews: --review-qps); client-go's rest_client_rate_limiter_duration_seconds",
            rate_limiter_wait.clone(),
        );
        own.register(
            "podprobe_api_request_duration_seconds",
            "Time the API server took to answer each API request once sent, watches left out, by client; client-go's rest_client_request_duration_seconds",
            api_request_duration.clone(),
        );
        own.register(
            "podprobe_events",
            "Kubernetes Events podprobe recorded, failed to record, dropped because its queue was full, filtered (not written: the pod spent its budget of the spam filter, 25 then one per 5 minutes) or held (counted in its series, whose Event gets the count with its next update)",
            events.clone(),
        );
        own.register(
            "podprobe_event_cache_entries",
            "Entries of the Event correlator's caches after its last check, once a minute (aggregates: similar events' notes; series: counted events; spam: per-pod token buckets); each holds at most 4,096 and forgets what a new entry would equal",
            event_cache_entries.clone(),
        );
        own.register(
            "podprobe_per_pod_entries",
            "Entries of podprobe's structures kept per pod or container, at the last resync (pod_store: pods, each with its started verdicts and the status the workers read; results: cached probe results and failure notes; probe_rates: pods with a probe-run budget or a count at the node's; status_intents: pods with a status intent; markers: pods with marker writes; ledger: pods with last runs for kubectl podprobe status; containers: container IDs being stopped or with runtime facts); each follows the node's pods and is empty once they are gone",
            per_pod_entries.clone(),
        );
        own.register(
            "podprobe_metrics_auth_decisions",
            "Requests for /metrics and /metrics/probes checked by delegated authentication, by outcome (allowed; unauthenticated: 401; forbidden: 403; failed: a review got no verdict; throttled: 429, too many requests waited on reviews)",
            metrics_auth.clone(),
        );
        own.register(
            "podprobe_probe_status_requests",
            "Requests for a pod's probe status (status.podprobe.io, kubectl podprobe) by the outcome of their review (allowed; unauthenticated: 401, no user named by the API server; forbidden: 403, the user may not get the probes object or the pod; failed: a review got no verdict; throttled: 429, over the user's or podprobe's request bounds)",
            probe_status_auth.clone(),
        );
        own.register(
            "podprobe_status_api_forwarded",
            "Requests for a pod's probe status this podprobe authorized and forwarded to the podprobe of the pod's node",
            status_api_forwarded.clone(),
        );
        own.register(
            "podprobe_workers",
            "Probe workers running (one per pod, container and probe type)",
            workers.clone(),
        );
        own.register(
            "podprobe_pods_watched",
            "Pods on this node that the pod watch currently knows",
            pods_watched.clone(),
        );
        own.register(
            "podprobe_pods_tracked",
            "Pods podprobe holds state for (probes, verdicts), including pods without probes",
            pods_tracked.clone(),
        );
        own.register(
            "podprobe_marker_writes",
            "Patches of pod labels and annotations that probe markers asked for (podprobe.markers), by outcome (sent: accepted; failed: an error, retried at the next resync; deferred: held back by the pod's marker write rate, sent by a later sync)",
            marker_writes.clone(),
        );
        own.register(
            "podprobe_liveness_paused_pods",
            "Pods whose liveness probes are paused by podprobe.io/pause-liveness-until",
            liveness_paused.clone(),
        );
        own.register(
            "podprobe_status_patch_tasks",
            "Per-pod status patch tasks alive (one per pod podprobe wrote status for, until the pod goes)",
            patch_tasks.clone(),
        );
        own.register(
            "podprobe_pod_watch_idle_seconds",
            "Seconds since the pod watch last received anything from the API server (a watch response, an event or a bookmark); a healthy watch receives at least every 60 s",
            watch_idle.clone(),
        );
        own.register(
            "podprobe_probe_errors",
            "Probe runs that errored (every attempt failed to run the probe, e.g. an unresolvable port or a runtime error); the kubelet throws such runs away and counts them nowhere",
            probe_errors.clone(),
        );
        own.register(
            "podprobe_build_info",
            "A metric with a constant '1' value labelled by the version and source revision podprobe was built from and the mode it runs in",
            build_info.clone(),
        );
        own.register_collector(Box::new(ProcessCollector));
        own.register(
            "podprobe_exec_in_flight",
            "CRI ExecSync calls of exec probes currently in flight",
            exec_in_flight.clone(),
        );
        own.register(
            "podprobe_budget_refusals",
            "Probes and annotations refused because they would take their pod or the node over a budget (--max-pod-regex-bytes, --max-pod-command-bytes, --max-annotation-bytes, --max-node-regex-bytes, --max-node-command-bytes), by budget",
            budget_refusals.clone(),
        );
        own.register(
            "podprobe_probe_rate_delayed",
            "Probe runs that waited for their pod's or the node's probe-run budget (--max-pod-probe-rate, --max-node-probe-rate); late, never failed",
            rate_delayed.clone(),
        );
        own.register(
            "podprobe_probe_rate_delay_seconds",
            "Seconds probe runs waited for their pod's or the node's probe-run budget, in all",
            rate_delay_seconds.clone(),
        );
        for budget in Budget::ALL {
            budget_refusals.get_or_create_owned(&BudgetLabels {
                budget: budget.as_str(),
            });
        }
        // Outcome series exist from the start, so a rate over them is
        // defined before the first patch or event.
        for outcome in [
            PatchOutcome::Sent,
            PatchOutcome::Failed,
            PatchOutcome::Conflict,
        ] {
            status_patches.get_or_create_owned(&PatchLabels { outcome });
        }
        for outcome in [
            EventOutcome::Recorded,
            EventOutcome::Failed,
            EventOutcome::Dropped,
            EventOutcome::Filtered,
            EventOutcome::Held,
        ] {
            events.get_or_create_owned(&EventLabels {
                outcome: outcome.as_str(),
            });
        }
        for outcome in [
            MarkerOutcome::Sent,
            MarkerOutcome::Failed,
            MarkerOutcome::Deferred,
        ] {
            marker_writes.get_or_create_owned(&EventLabels {
                outcome: outcome.as_str(),
            });
        }
        for outcome in [
            AuthOutcome::Allowed,
            AuthOutcome::Unauthenticated,
            AuthOutcome::Forbidden,
            AuthOutcome::Failed,
            AuthOutcome::Throttled,
        ] {
            metrics_auth.get_or_create_owned(&AuthLabels { outcome });
            probe_status_auth.get_or_create_owned(&AuthLabels { outcome });
        }
        for probe_type in [
            ProbeKind::Startup,
            ProbeKind::Readiness,
            ProbeKind::Liveness,
        ] {
            probe_errors.get_or_create_owned(&ProbeErrorLabels {
                probe_type: probe_type.as_str(),
            });
        }
        Metrics {
            prober: Arc::new(prober),
            own: Arc::new(own),
            probe_total,
            probe_duration,
            status_patches,
            result_to_status,
            rate_limiter_wait,
            api_request_duration,
            events,
            event_cache_entries,
            per_pod_entries,
            metrics_auth,
            probe_status_auth,
            status_api_forwarded,
            workers,
            pods_watched,
            pods_tracked,
            liveness_paused,
            marker_writes,
            patch_tasks,
            exec_in_flight,
            watch_idle,
            probe_errors,
            budget_refusals,
            rate_delayed,
            rate_delay_seconds,
            build_info,
            watch: Arc::default(),
        }
    }

    /// Reports `podprobe_pod_watch_idle_seconds` from `activity` on every
    /// scrape from now on (the first call wins).
    pub fn track_watch(&self, activity: Arc<WatchActivity>) {
        let _ = self.watch.set(activity);
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

    /// Publishes `podprobe_build_info` for `mode` (`gate` or `authority`).
    pub fn set_build_info(&self, mode: &'static str) {
        self.build_info.clear();
        self.build_info
            .get_or_create(&BuildInfoLabels {
                version: VERSION,
                revision: REVISION,
                mode,
            })
            .set(1);
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

    /// Counts one `pods/status` patch request.
    pub fn status_patch(&self, outcome: PatchOutcome) {
        self.status_patches
            .get_or_create(&PatchLabels { outcome })
            .inc();
    }

    /// Observes the time from a probe result's change to its status patch.
    pub fn result_to_status(&self, latency: Duration) {
        self.result_to_status.observe(latency.as_secs_f64());
    }

    /// Observes how long one API request waited for its client's limit.
    pub fn rate_limiter_wait(&self, client: &'static str, wait: Duration) {
        self.rate_limiter_wait
            .get_or_create(&ClientLabels { client })
            .observe(wait.as_secs_f64());
    }

    /// Observes how long the API server took to answer one API request.
    pub fn api_request_duration(&self, client: &'static str, took: Duration) {
        self.api_request_duration
            .get_or_create(&ClientLabels { client })
            .observe(took.as_secs_f64());
    }

    /// Counts one Event by what became of it.
    pub fn event(&self, outcome: EventOutcome) {
        self.events
            .get_or_create(&EventLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Counts one request for the metrics by what delegated authentication
    /// decided.
    pub fn metrics_auth(&self, outcome: AuthOutcome) {
        self.metrics_auth
            .get_or_create(&AuthLabels { outcome })
            .inc();
    }

    /// Counts one request for a pod's probe status by what delegated
    /// authentication decided.
    pub fn probe_status_auth(&self, outcome: AuthOutcome) {
        self.probe_status_auth
            .get_or_create(&AuthLabels { outcome })
            .inc();
    }

    /// Counts a status request forwarded to the pod's node.
    pub fn status_api_forwarded(&self) {
        self.status_api_forwarded.inc();
    }

    /// Sets the number of probe workers running.
    pub fn set_workers(&self, count: usize) {
        self.workers.set(gauge_value(count));
    }

    /// Sets the number of pods the pod watch knows.
    pub fn set_pods_watched(&self, count: usize) {
        self.pods_watched.set(gauge_value(count));
    }

    /// Sets the number of pods the daemon holds state for.
    pub fn set_pods_tracked(&self, count: usize) {
        self.pods_tracked.set(gauge_value(count));
    }

    /// Sets the entries of one per-pod structure (`SyncLoop::per_pod_entries`).
    pub fn set_per_pod_entries(&self, structure: &'static str, entries: usize) {
        self.per_pod_entries
            .get_or_create(&StructureLabels { structure })
            .set(gauge_value(entries));
    }

    /// Counts one marker patch by its outcome.
    pub fn marker_write(&self, outcome: MarkerOutcome) {
        self.marker_writes
            .get_or_create(&EventLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Sets the number of pods whose liveness probes are paused.
    pub fn set_liveness_paused(&self, count: usize) {
        self.liveness_paused.set(gauge_value(count));
    }

    /// Sets the number of per-pod status patch tasks alive.
    pub fn set_patch_tasks(&self, count: usize) {
        self.patch_tasks.set(gauge_value(count));
    }

    /// Updates the gauges read from elsewhere at scrape time.
    fn refresh(&self) {
        if let Some(activity) = self.watch.get() {
            self.watch_idle.set(activity.idle().as_secs_f64());
        }
    }

    /// Counts a probe refused for going over `budget`.
    pub fn budget_refused(&self, budget: Budget) {
        self.budget_refusals
            .get_or_create(&BudgetLabels {
                budget: budget.as_str(),
            })
            .inc();
    }

    /// Counts a probe run that waited `delay` for a probe-run budget.
    pub fn probe_delayed(&self, delay: Duration) {
        self.rate_delayed.inc();
        self.rate_delay_seconds.inc_by(delay.as_secs_f64());
    }

    /// The `podprobe_exec_in_flight` gauge, which the CRI client counts
    /// its exec calls into.
    pub fn exec_in_flight(&self) -> Gauge {
        self.exec_in_flight.clone()
    }

    /// The OpenMetrics text exposition of every metric, `# EOF` included
    /// (`/metrics`).
    pub fn encode(&self) -> String {
        self.refresh();
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

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl EventObserver for Metrics {
    fn event_done(&self, outcome: EventOutcome) {
        self.event(outcome);
    }

    fn correlator_entries(&self, cache: &'static str, entries: usize) {
        self.event_cache_entries
            .get_or_create(&CacheLabels { cache })
            .set(gauge_value(entries));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{container, pod, probe_spec};

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
        let metrics = Metrics::new();
        metrics.probe_completed(&readiness_worker(), CachedResult::Success, Duration::ZERO);
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
        let metrics = Metrics::new();
        let config = readiness_worker();
        metrics.probe_completed(&config, CachedResult::Success, Duration::from_millis(30));

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
        let metrics = Metrics::new();
        let config = readiness_worker();
        metrics.probe_completed(&config, CachedResult::Failure, Duration::from_millis(30));
        metrics.probe_completed(&config, CachedResult::Failure, Duration::from_millis(30));

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
        let metrics = Metrics::new();
        metrics.probe_completed(&readiness_worker(), CachedResult::Unknown, Duration::ZERO);

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
        let metrics = Metrics::new();
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
            metrics.probe_completed(&stopped, result, Duration::ZERO);
        }
        metrics.probe_completed(&other, CachedResult::Success, Duration::ZERO);

        metrics.worker_stopped(&stopped);

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

    #[test]
    fn probes_exposition_has_only_the_prober_metrics() {
        let metrics = Metrics::new();
        metrics.probe_completed(&readiness_worker(), CachedResult::Success, Duration::ZERO);
        let text = metrics.encode_probes();
        assert!(text.contains("prober_probe_total{"), "{text}");
        assert!(!text.contains("podprobe_"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[test]
    fn own_metrics_are_exposed_by_name() {
        let metrics = Metrics::new();
        metrics.status_patch(PatchOutcome::Sent);
        metrics.status_patch(PatchOutcome::Sent);
        metrics.status_patch(PatchOutcome::Failed);
        metrics.status_patch(PatchOutcome::Conflict);
        metrics.event(EventOutcome::Dropped);
        metrics.metrics_auth(AuthOutcome::Throttled);
        metrics.set_workers(3);
        metrics.set_pods_watched(2);

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
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn build_info_errors_and_process_metrics_are_exposed() {
        let metrics = Metrics::new();
        metrics.set_build_info("gate");
        metrics.probe_errored(ProbeKind::Liveness);
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
        metrics.set_build_info("authority");
        let text = metrics.encode();
        assert_eq!(text.matches("podprobe_build_info{").count(), 1, "{text}");
    }

    #[test]
    fn exec_in_flight_counts_live_guards() {
        let metrics = Metrics::new();
        let gauge = crate::runtime::cri::InFlightGauge::new(metrics.exec_in_flight());
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
