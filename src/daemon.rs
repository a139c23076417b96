//! `podprobe run`: the node daemon.
//!
//! Wiring: the node's pod watch ([`pods`]) feeds a [`ProberManager`] whose
//! workers run each pod's probes: in gate mode those of its
//! `podprobe.io/probes` annotation, in authority mode those of its spec. The
//! kubelet's sync loop reaction (K1) is [`sync_loop`]'s: a readiness or
//! startup result change recomputes podprobe's `started`/`ready` (S1-S5, as
//! the kubelet's `UpdatePodStatus`), which gives the desired status of the
//! fields podprobe owns in its mode (the `podprobe.io/ready` condition, or
//! container `ready`/`started` with `Ready`/`ContainersReady`) that the
//! status patcher sends; a liveness or startup failure stops the container
//! through CRI with the kubelet's grace period (K2, K3), and the node agent
//! (the kubelet, in gate mode) restarts it.
//!
//! The metrics: every subsystem registers its families next to its code;
//! [`metric_set`] registers them all in the registries `/metrics` serves,
//! and each part goes to its subsystem here.
//!
//! A restart of podprobe does not flap a Ready pod ([`takeover`]): workers do
//! not seed containers that predate podprobe (D5), podprobe's previous
//! `started` is taken over from the API, and S4 reads podprobe's own
//! condition as "the pod was Ready".

mod budget_metrics;
pub mod build_info;
pub mod flags;
mod heap_trim;
mod marker_metrics;
mod marker_sync;
pub mod metric_set;
pub mod probe_metrics;
mod readiness_floor;
mod restart_budget;
mod sync_loop;
mod tracker_metrics;
mod workload_guard_metrics;

use self::marker_sync::MarkerWriter;
use self::readiness_floor::{FloorGate, LeaseFloor};
use self::restart_budget::BudgetedKiller;
pub use self::sync_loop::STATUS_RESYNC_PERIOD;
use self::sync_loop::{READING_THREADS, SHUTDOWN_TIMEOUT, SyncLoop};
use crate::api::guard_decisions::GuardDecisions;
use crate::api::pdb_guards::PdbGuards;
use podprobe_core::prober::pod_tracker::{AnnotationRules, PodTracker, TrackerConfig};
pub(crate) mod telemetry;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::{Semaphore, mpsc};

use crate::actuator::kill_container::ContainerKiller;
use crate::actuator::lifecycle::HookRunner;
use crate::api::apiclient::{self, bounded};
use crate::api::client_certificates::ClientCertificates;
use crate::api::event_broadcaster::{self};
use crate::api::header_secret_cache::HeaderSecrets;
use crate::api::marker_patch::KubeMarkers;
use crate::api::patcher::{KubeStatusApi, Patcher, RetryPolicy};
use crate::api::pods;
use crate::api::request_metrics::RequestMetrics;
use crate::api::secret_cache::KubeSecrets;
use crate::api::user_agent;
use crate::daemon::flags::{Config, LogFormat, MetricsAuth, RunArgs};
use crate::daemon::metric_set::MetricSet;
use crate::daemon::telemetry::Telemetry;
use crate::probe::Prober;
use crate::probe::netns::{self, NamespaceHelper};
use crate::probe::run_probe::NetworkLimits;
use crate::runtime::cri::{CriClient, CriError};
use crate::runtime::in_flight::InFlightGauge;
use crate::server::delegated_auth::DelegatedAuth;
use crate::server::health::{Health, Reachability, WATCH_TIMEOUT};
use crate::server::status_api::StatusApi;
use crate::server::{Limits, MetricsAccess, Server, ServerConfig};
use podprobe_core::prober::manager::ProberManager;
use podprobe_core::prober::pod_store::PodStoreWriter;
use podprobe_core::prober::probe_ledger::ProbeLedger;
use podprobe_core::prober::probe_rates::ProbeRates;
use podprobe_core::prober::results::ProbeCaches;
use podprobe_core::prober::worker::ProbeRunner;
use podprobe_core::prober::worker::{Clock, ProbeObserver, SystemClock};
use podprobe_core::spec::probe_spec::budget::NodeBudget;
use podprobe_core::spec::probe_spec::timeout_caps::TimeoutCaps;
use podprobe_core::spec::{ProbeKind, ProbeSpec, ProbeTarget, ProbeVerdict};
use podprobe_core::util::exit_code;
use podprobe_core::util::fair_slots::FairSlots;
use podprobe_core::util::watch_activity::WatchActivity;

/// `/healthz` fails when the main loop has not run for this long (it runs
/// at least every [`STATUS_RESYNC_PERIOD`]).
pub const HEALTH_STALE_AFTER: Duration = Duration::from_secs(60);

/// How long a runtime check (`Version`) or an API server check (`/version`)
/// may take before the service counts as unreachable for `/readyz`.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the daemon cannot start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot load the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("cannot start the pod network namespace helper (--pod-network): {0}")]
    NamespaceHelper(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error(
        "the API server rejected the pod selectors (field {fields:?}, labels {labels:?}): {source}; \
         check --pod-selector"
    )]
    Selector {
        fields: String,
        labels: String,
        #[source]
        source: kube::Error,
    },
    #[error("invalid --cri-endpoint: {0}")]
    Cri(#[from] CriError),
    #[error("cannot listen on {addr} (--listen or --plain-metrics-listen): {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Entry point of `podprobe run`.
pub fn main(args: RunArgs) -> ExitCode {
    let config = match args.validate() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("podprobe run: {error}");
            return ExitCode::from(exit_code::USAGE);
        }
    };
    init_logging(&config);
    // Before the runtime's threads exist: capabilities are per thread.
    let _helper = match config.pod_network.then(start_namespace_helper).transpose() {
        Ok(helper) => helper,
        Err(error) => {
            eprintln!("podprobe run: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime);
    let result = runtime.and_then(|rt| rt.block_on(run(config, shutdown_signal())));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "podprobe run failed");
            eprintln!("podprobe run: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `--pod-network`: starts the helper that makes sockets in pods' network
/// namespaces and drops `CAP_SYS_ADMIN` from this process
/// ([`netns::helper`]). The helper ends when this process does.
fn start_namespace_helper() -> Result<std::process::Child, DaemonError> {
    let failed = |e: std::io::Error| DaemonError::NamespaceHelper(e.to_string());
    let program = std::env::current_exe().map_err(failed)?;
    let (helper, child) = NamespaceHelper::spawn(&program).map_err(failed)?;
    netns::use_helper(helper);
    netns::helper::drop_sys_admin().map_err(failed)?;
    tracing::info!(
        helper_pid = child.id(),
        "pod network namespaces are entered by a helper process; podprobe run holds no CAP_SYS_ADMIN"
    );
    Ok(child)
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::new(&config.log_filter);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes would garble logs collected from a pipe or file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => tracing::info!("SIGTERM received; shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; shutting down"),
    }
}

/// Runs the daemon until `shutdown` resolves, then stops the workers and
/// waits (bounded) for in-flight patches.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
    let watch_activity = WatchActivity::new();
    let metrics = MetricSet::new(watch_activity.clone());
    let clients = kube_clients(&config, watch_activity.clone(), metrics.requests.clone()).await?;
    let client = clients.api;
    let all_pods: Api<Pod> = Api::all(client.clone());
    check_selectors(&all_pods, &config).await?;
    metrics.build_info.set(config.mode.as_str());
    let cri = CriClient::new(&config.cri_endpoint)?
        .count_exec_in_flight(metrics.exec_in_flight.clone())
        .limit_concurrent_execs(
            config.max_concurrent_execs,
            config.max_concurrent_execs_per_pod,
            config.max_exec_timeout,
        );
    let pod_store = PodStoreWriter::new();
    let (cache, started) = (pod_store.as_reader(), pod_store.started_writer());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (events, event_queue) = event_broadcaster::channel_with(
        event_broadcaster::QueueConfig {
            writes: config.event_rate,
            ..event_broadcaster::QueueConfig::default()
        },
        metrics.events.clone(),
    );
    let event_publisher = tokio::spawn({
        let (client, node) = (client.clone(), config.node_name.clone());
        async move { event_queue.run(client, &node).await }
    });
    let ledger = Arc::new(ProbeLedger::new(config.status_output_budget));
    let observer: Arc<dyn ProbeObserver> = Arc::new(Telemetry::new(
        metrics.probes.clone(),
        metrics.budgets.clone(),
        Arc::new(events.clone()),
        ledger.clone(),
        clock.clone(),
    ));
    let kube_probe_version = match config.kube_probe_version.clone() {
        Some(given) => given,
        None => user_agent::of_node(client.clone(), &config.node_name).await,
    };
    let prober = prober(
        &config,
        &kube_probe_version,
        &client,
        &cri,
        metrics.network_probes_in_flight.clone(),
    );
    let (caches, receivers) = ProbeCaches::new();
    let manager = ProberManager::new(prober, cache.clone(), caches, clock.clone(), observer)
        .with_probe_rates(ProbeRates::new(
            config.pod_probe_rate,
            config.node_probe_rate,
        ));
    let patcher = Patcher::new(
        KubeStatusApi::new(client.clone(), cache.clone()),
        clock,
        Arc::new(metrics.patches.clone()),
        RetryPolicy::default(),
    );
    let health = Health::new(HEALTH_STALE_AFTER, watch_activity);
    let server_config = server_config(&config, clients.reviews.clone());
    let status_api = config.status_api.clone().map(|status_api| {
        StatusApi::new(
            status_api,
            config.node_name.clone(),
            clients.reviews,
            ledger.clone(),
            metrics.status_api.clone(),
            server_config.limits.clone(),
        )
    });
    let server = Server::bind(
        server_config,
        metrics.served.clone(),
        metrics.auth.clone(),
        health.clone(),
    )
    .await
    .map_err(|e| DaemonError::Listen {
        addr: e.addr,
        source: e.source,
    })?;
    let listen = server.local_addr().unwrap_or(config.listen);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let server = tokio::spawn(server.serve(until_stopped(stopped.clone())));
    // Stops with the others; answers nothing worth draining.
    if let Some(status_api) = status_api {
        tokio::spawn(status_api.run(until_stopped(stopped.clone())));
    }
    // Ends with the runtime; it holds nothing to flush.
    tokio::spawn(heap_trim::run());
    let cri_checks = tokio::spawn(check_cri(
        cri.clone(),
        health.clone(),
        until_stopped(stopped.clone()),
    ));
    let api_checks = tokio::spawn(check_api(
        client.clone(),
        health.clone(),
        until_stopped(stopped),
    ));
    tracing::info!(
        node = config.node_name,
        mode = ?config.mode,
        cri = cri.endpoint(),
        selector = config.pod_selector.as_deref().unwrap_or(""),
        %listen,
        "podprobe starting"
    );
    let pod_events = pods::watch(Api::all(client.clone()), watcher_config(&config), pod_store);
    let hooks = HookRunner::new(
        cri.clone(),
        config.destinations.clone(),
        &kube_probe_version,
    );
    let decisions = GuardDecisions::new(clients.guards.clone());
    let budgets = PdbGuards::default();
    if config.pdb_guards {
        // Ends with the runtime; it holds nothing to flush.
        tokio::spawn(budgets.clone().watch(Api::all(clients.guards.clone())));
    }
    let killer = BudgetedKiller::new(
        ContainerKiller::new(config.mode, cri.clone(), hooks, events.clone()),
        decisions.clone(),
        budgets.clone(),
        config.node_name.clone(),
        Arc::new(events.clone()),
        metrics.workload_guard.clone(),
    );
    let (floor_decided_sender, floor_decided) = mpsc::unbounded_channel();
    let floor = FloorGate::new(
        Arc::new(LeaseFloor::new(
            decisions,
            config.node_name.clone(),
            Arc::new(events.clone()),
            metrics.workload_guard.clone(),
        )),
        floor_decided_sender,
        ledger.clone(),
        budgets,
        Arc::new(events.clone()),
        metrics.workload_guard.clone(),
    );
    let (readings_sender, readings) = mpsc::unbounded_channel();
    let markers = MarkerWriter::new(KubeMarkers(client.clone()), metrics.markers.clone());
    let tracker = PodTracker::new(tracker_config(&config), Box::new(rand::random::<f64>));
    let daemon = SyncLoop {
        tracker,
        reading_slots: Arc::new(Semaphore::new(READING_THREADS)),
        manager,
        patcher,
        cache,
        started,
        events: Arc::new(events),
        metrics,
        health,
        killer,
        readings: readings_sender,
        markers,
        ledger,
        floor,
    };
    daemon
        .run(pod_events, receivers, readings, floor_decided, shutdown)
        .await;
    let _ = stop.send(true);
    let _ = tokio::join!(server, cri_checks, api_checks);
    // Every event sink is gone with the daemon: the publisher flushes and ends.
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, event_publisher)
        .await
        .is_err()
    {
        tracing::warn!("some events were still queued at shutdown");
    }
    Ok(())
}

async fn kube_clients(
    config: &Config,
    watch: Arc<WatchActivity>,
    requests: RequestMetrics,
) -> Result<apiclient::Clients, DaemonError> {
    let kube_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| DaemonError::Kubeconfig(format!("{}: {e}", path.display())))?;
            let options = kube::config::KubeConfigOptions::default();
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| DaemonError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| DaemonError::Kubeconfig(e.to_string()))?,
    };
    let limits = apiclient::ClientLimits {
        api: config.api_rate,
        reviews: config.review_rate,
        guards: config.guard_rate,
    };
    apiclient::build(kube_config, watch, limits, Arc::new(requests)).map_err(DaemonError::Client)
}

/// Checks every [`STATUS_RESYNC_PERIOD`] that the runtime answers, for `/readyz`;
/// logs on transitions.
async fn check_cri(cri: CriClient, health: Health, stop: impl Future<Output = ()>) {
    let endpoint = cri.endpoint().to_string();
    let check = move || {
        let cri = cri.clone();
        async move {
            match tokio::time::timeout(CHECK_TIMEOUT, cri.version()).await {
                Ok(Ok(_)) => Reachability::Reachable,
                Ok(Err(error)) => Reachability::Unreachable(error.to_string()),
                Err(_) => Reachability::Unreachable(format!("no answer within {CHECK_TIMEOUT:?}")),
            }
        }
    };
    let record = move |state| health.set_cri(state);
    check_periodically("container runtime", &endpoint, check, record, stop).await;
}

/// Checks every [`STATUS_RESYNC_PERIOD`] that the API server answers, for
/// `/readyz`: a stalled connection shows here within seconds, where the
/// watch would only notice after its silence bound; logs on transitions.
async fn check_api(client: kube::Client, health: Health, stop: impl Future<Output = ()>) {
    let check = move || {
        let client = client.clone();
        async move {
            let version = tokio::time::timeout(CHECK_TIMEOUT, client.apiserver_version()).await;
            match version {
                Ok(Ok(_)) => Reachability::Reachable,
                Ok(Err(error)) => Reachability::Unreachable(error.to_string()),
                Err(_) => Reachability::Unreachable(format!("no answer within {CHECK_TIMEOUT:?}")),
            }
        }
    };
    let record = move |state| health.set_api(state);
    check_periodically("API server", "", check, record, stop).await;
}

/// Runs `check` every [`STATUS_RESYNC_PERIOD`] until `stop`, recording each
/// outcome and logging when reachability changes.
async fn check_periodically<C, F>(
    what: &str,
    endpoint: &str,
    check: C,
    record: impl Fn(Reachability),
    stop: impl Future<Output = ()>,
) where
    C: Fn() -> F,
    F: Future<Output = Reachability>,
{
    let mut stop = std::pin::pin!(stop);
    let mut ticks = tokio::time::interval(STATUS_RESYNC_PERIOD);
    let mut reachable = None;
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => {}
        }
        let state = check().await;
        let now_reachable = state == Reachability::Reachable;
        if reachable != Some(now_reachable) {
            match &state {
                Reachability::Unreachable(why) => {
                    tracing::warn!(endpoint, why, "{what} unreachable")
                }
                _ => tracing::info!(endpoint, "{what} reachable"),
            }
            reachable = Some(now_reachable);
        }
        record(state);
    }
}

fn watcher_config(config: &Config) -> watcher::Config {
    let watch = watcher::Config::default()
        .fields(&config.field_selector())
        .timeout(WATCH_TIMEOUT.as_secs() as u32);
    match &config.pod_selector {
        Some(labels) => watch.labels(labels),
        None => watch,
    }
}

/// Fails fast when the API server rejects the selectors (400); anything else
/// (unreachable, forbidden for now) is left to the watch's retries.
async fn check_selectors(pods: &Api<Pod>, config: &Config) -> Result<(), DaemonError> {
    let fields = config.field_selector();
    let labels = config.pod_selector.clone().unwrap_or_default();
    let mut params = ListParams::default().fields(&fields).limit(1);
    if !labels.is_empty() {
        params = params.labels(&labels);
    }
    match bounded(pods.list_metadata(&params)).await {
        Err(apiclient::RequestError::Kube(kube::Error::Api(status))) if status.code == 400 => {
            Err(DaemonError::Selector {
                fields,
                labels,
                source: kube::Error::Api(status),
            })
        }
        Err(error) => {
            tracing::warn!(%error, "cannot list pods yet; the watch keeps trying");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

/// The workers run the real handlers.
impl ProbeRunner for Prober {
    fn probe(
        &self,
        kind: ProbeKind,
        spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> impl Future<Output = ProbeVerdict> + Send {
        Prober::probe(self, kind, spec, target)
    }
}

/// What `podprobe run`'s flags ask of the server; delegated auth reviews
/// through `reviews`, the review client (`--review-qps`).
fn server_config(config: &Config, reviews: kube::Client) -> ServerConfig {
    let metrics_access = match config.metrics_auth {
        MetricsAuth::Delegated => MetricsAccess::Delegated(DelegatedAuth::kube(reviews)),
        MetricsAuth::None => MetricsAccess::Open,
    };
    ServerConfig {
        listen: config.listen,
        metrics_access,
        plain_metrics_listen: config.plain_metrics_listen,
        limits: Limits {
            max_connections: config.max_connections,
            ..Limits::default()
        },
    }
}

/// The probe handlers as `podprobe run`'s flags configure them: exec
/// through `cri`, network probes within the node's limits, the Secrets
/// probes name read through `client`.
fn prober(
    config: &Config,
    kube_probe_version: &str,
    client: &Client,
    cri: &CriClient,
    in_flight: InFlightGauge,
) -> Prober {
    Prober::new(kube_probe_version, Some(cri.clone()))
        .with_destinations(config.destinations.clone())
        .with_network_limits(NetworkLimits {
            // A pod holding none always gets one: pods that fill the node
            // cannot keep another's probes from running on time.
            slots: FairSlots::with_guaranteed(
                config.max_concurrent_network_probes,
                config.max_concurrent_network_probes_per_pod,
                1,
            ),
            max_timeout: config.max_network_timeout,
            in_flight,
        })
        .with_client_certificates(ClientCertificates::new(
            KubeSecrets(client.clone()),
            config.secret_ttl,
        ))
        .with_header_secrets(HeaderSecrets::new(
            KubeSecrets(client.clone()),
            config.secret_ttl,
        ))
}

/// The pod tracker's configuration from `podprobe run`'s flags (`podprobe
/// simulate`'s tests compare their tracker with this one).
pub(crate) fn tracker_config(config: &Config) -> TrackerConfig {
    TrackerConfig {
        mode: config.mode,
        annotation_rules: Some(AnnotationRules {
            destinations: config.destinations.clone(),
            pod_network: config.pod_network,
        }),
        budget: config.budget,
        node_budget: NodeBudget::new(),
        max_liveness_pause: config.max_liveness_pause,
        marker_keys: config.marker_keys.clone(),
        timeout_caps: TimeoutCaps {
            exec: config.max_exec_timeout,
            network: config.max_network_timeout,
        },
    }
}
