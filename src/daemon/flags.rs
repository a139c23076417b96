//! `podprobe run` flags: every flag has an environment variable, and
//! [`RunArgs::validate`] turns them into a typed [`Config`] up front, so a
//! bad value stops the daemon before it touches the API server or the runtime.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

use crate::api::apiclient;
use crate::api::event_broadcaster;
use crate::runtime::cri::DEFAULT_ENDPOINT;
use crate::server::DEFAULT_MAX_CONNECTIONS;
use crate::server::status_api::StatusApiConfig;
use podprobe_core::prober::markers::MarkerKeys;
use podprobe_core::spec::destinations::{AllowedHost, Cidr, CidrError, Destinations};
use podprobe_core::spec::probe_spec::budget::{self, BudgetLimits};
use podprobe_core::spec::probe_spec::is_dns_subdomain;
use podprobe_core::status::Mode;
use podprobe_core::util::rate_limit::RateLimit;

/// Default address of `/healthz`, `/readyz` and `/metrics`.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9440";

/// Flags of `podprobe run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Name of the node whose pods this instance probes (usually from the
    /// downward API, `spec.nodeName`).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: String,

    /// Which status fields podprobe owns: `gate` (next to a stock kubelet:
    /// only the `podprobe.io/ready` condition, probes from the
    /// `podprobe.io/probes` annotation) or `authority` (for node agents
    /// without a prober of their own: probes from the pod spec; podprobe owns
    /// container `ready`/`started` and the `Ready`/`ContainersReady`
    /// conditions). Never run authority mode next to a kubelet: both would
    /// write the same fields.
    #[arg(long, env = "PODPROBE_MODE", value_enum, default_value_t = ModeArg::Gate)]
    pub mode: ModeArg,

    /// CRI runtime endpoint for exec probes and for stopping containers that
    /// fail liveness or startup probes.
    #[arg(long, env = "PODPROBE_CRI_ENDPOINT", value_name = "URI", default_value = DEFAULT_ENDPOINT)]
    pub cri_endpoint: String,

    /// Version sent in `User-Agent: kube-probe/MAJOR.MINOR` by HTTP probes
    /// and hooks; default: the node's kubelet version (`status.nodeInfo.
    /// kubeletVersion`), so a server sees what the kubelet beside podprobe
    /// sends, or the release podprobe follows when the Node cannot be read.
    #[arg(long, env = "PODPROBE_KUBE_PROBE_VERSION", value_name = "MAJOR.MINOR")]
    pub kube_probe_version: Option<String>,

    /// Label selector limiting the watched pods (e.g. `app=web` or
    /// `!podprobe.io/test-run`); default: every pod on the node.
    #[arg(long, env = "PODPROBE_POD_SELECTOR", value_name = "SELECTOR")]
    pub pod_selector: Option<String>,

    /// Address of the `/healthz`, `/readyz` and `/metrics` endpoints.
    #[arg(long, env = "PODPROBE_LISTEN", value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Who may read `/metrics` and `/metrics/probes` on `--listen`:
    /// `delegated` (a bearer token that the API server authenticates with a
    /// TokenReview and authorises with a SubjectAccessReview to `get` the
    /// path, as the kubelet guards its metrics; the ClusterRole
    /// `podprobe-metrics-reader` grants it) or `none` (whoever reaches the
    /// port). `/healthz` and `/readyz` are always open.
    #[arg(long, env = "PODPROBE_METRICS_AUTH", value_enum, default_value_t = MetricsAuth::Delegated)]
    pub metrics_auth: MetricsAuth,

    /// Also serve `/metrics` and `/metrics/probes`, without authentication,
    /// on this address (e.g. `127.0.0.1:9441` for a scraper on the node;
    /// with host networking every process of the node reaches loopback).
    #[arg(long, env = "PODPROBE_PLAIN_METRICS_LISTEN", value_name = "ADDR")]
    pub plain_metrics_listen: Option<SocketAddr>,

    /// Most open connections per listening address. At the cap a new
    /// connection closes the one idle the longest (it is itself closed only
    /// when every connection is busy answering a request), so a flood of
    /// idle connections cannot lock the kubelet's probes out of `/healthz`.
    #[arg(
        long,
        env = "PODPROBE_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections: u32,

    /// Serve the probe status of this node's pods as part of the Kubernetes
    /// API (the aggregated group status.podprobe.io, behind the APIService
    /// v1alpha1.status.podprobe.io; `kubectl podprobe` reads it) over TLS
    /// on this address. Only the API server's front proxy and other
    /// podprobes, each with a client certificate, are answered. Empty: not
    /// served.
    #[arg(long, env = "PODPROBE_STATUS_API_LISTEN", value_name = "ADDR")]
    pub status_api_listen: Option<SocketAddr>,

    /// Directory with the status API's certificate (`tls.crt`, `tls.key`)
    /// and the CA bundle that signs podprobes' certificates (`ca.crt`),
    /// re-read every 10 s (a rotated Secret takes effect without a restart).
    #[arg(
        long,
        env = "PODPROBE_STATUS_API_TLS_DIR",
        value_name = "DIR",
        default_value = "/etc/podprobe/status-api"
    )]
    pub status_api_tls_dir: PathBuf,

    /// The name another podprobe's status API certificate is verified under
    /// when a request is forwarded to the pod's node (the Service's DNS
    /// name, e.g. podprobe-status-api.podprobe-system.svc). Required with
    /// --status-api-listen.
    #[arg(long, env = "PODPROBE_STATUS_API_PEER_NAME", value_name = "DNS_NAME")]
    pub status_api_peer_name: Option<String>,

    /// Kubeconfig file; default: in-cluster configuration, else `KUBECONFIG`
    /// or `~/.kube/config`.
    #[arg(long, env = "PODPROBE_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Log format.
    #[arg(long, env = "PODPROBE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter in `tracing` `EnvFilter` syntax (e.g. `info` or
    /// `info,podprobe_core::prober::worker=debug`).
    #[arg(long, env = "RUST_LOG", value_name = "FILTER", default_value = "info")]
    pub log_level: String,

    /// Comma-separated host names and CIDRs a probe may target beyond the
    /// pod's own IP. In gate mode an annotated probe's `host` must match an
    /// entry (a name exactly, an IP inside a CIDR), else the annotation is
    /// refused; its CIDRs also exempt addresses from
    /// --deny-probe-destinations (e.g. `169.254.20.10` for a node-local DNS
    /// cache). Default: none.
    #[arg(
        long,
        env = "PODPROBE_ALLOW_PROBE_HOSTS",
        value_name = "HOSTS",
        value_delimiter = ',',
        default_value = ""
    )]
    pub allow_probe_hosts: Vec<String>,

    /// Comma-separated CIDRs no probe may connect to, checked after DNS and
    /// for every redirect. Default in gate mode: loopback, link-local and
    /// unspecified addresses (127.0.0.0/8, ::1/128, 169.254.0.0/16,
    /// fe80::/10, 0.0.0.0/8, ::/128); in authority mode none, as the kubelet.
    /// An empty value denies nothing.
    #[arg(
        long,
        env = "PODPROBE_DENY_PROBE_DESTINATIONS",
        value_name = "CIDRS",
        value_delimiter = ','
    )]
    pub deny_probe_destinations: Option<Vec<String>>,

    /// Most exec probes (CRI `ExecSync` calls) running at once on the node;
    /// the others wait, each up to its timeout, then error (the run is
    /// retried, not counted as a failure). A pod holding none gets one even
    /// when all are taken, so the node runs at most this plus one per pod.
    /// The kubelet has no such bound; this one keeps pods with many exec
    /// probes from swamping the runtime.
    #[arg(
        long,
        env = "PODPROBE_MAX_CONCURRENT_EXECS",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONCURRENT_EXECS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_concurrent_execs: u32,

    /// Most of the exec slots (--max-concurrent-execs) one pod's probes may
    /// hold at once. A freed slot goes to the waiting pod holding the
    /// fewest, so a pod whose exec probes never finish cannot keep other
    /// pods' probes from running. The kubelet has no such bound.
    #[arg(
        long,
        env = "PODPROBE_MAX_CONCURRENT_EXECS_PER_POD",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONCURRENT_EXECS_PER_POD,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_concurrent_execs_per_pod: u32,

    /// Longest an exec probe may run (and hold an exec slot): a longer
    /// timeoutSeconds is cut to this, and the run fails as timed out after
    /// it. The kubelet waits out any timeoutSeconds; podprobe's exec slots
    /// are shared by every pod of the node.
    #[arg(
        long,
        env = "PODPROBE_MAX_EXEC_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = DEFAULT_MAX_EXEC_TIMEOUT_SECONDS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_exec_timeout_seconds: u32,

    /// Most network probe attempts (HTTP, TCP, gRPC) in flight at once,
    /// node-wide: each holds a connection and its response buffers (at
    /// most about 130 KiB) until it ends. A pod holding none gets one even
    /// when all are taken, so the node holds at most this plus one per pod.
    /// An attempt that gets none within its timeout errors (no verdict, no
    /// kill). The kubelet has no such bound.
    #[arg(
        long,
        env = "PODPROBE_MAX_CONCURRENT_NETWORK_PROBES",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONCURRENT_NETWORK_PROBES,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_concurrent_network_probes: u32,

    /// Most network probe attempts one pod's probes may have in flight at
    /// once; a freed slot goes to the waiting pod holding the fewest.
    #[arg(
        long,
        env = "PODPROBE_MAX_CONCURRENT_NETWORK_PROBES_PER_POD",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONCURRENT_NETWORK_PROBES_PER_POD,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_concurrent_network_probes_per_pod: u32,

    /// Longest a network probe attempt (HTTP, TCP, gRPC) may run: a longer
    /// timeoutSeconds is cut to this (a ProbeTimeoutCapped Warning), and
    /// the attempt times out after it. The kubelet waits out any
    /// timeoutSeconds; a server that stalls holds podprobe's connection
    /// and buffers for as long.
    #[arg(
        long,
        env = "PODPROBE_MAX_NETWORK_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = DEFAULT_MAX_NETWORK_TIMEOUT_SECONDS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_network_timeout_seconds: u32,

    /// Gate mode: run probes with `podprobe.network: pod` from inside the
    /// pod's network namespace (found through the CRI), so that a server
    /// bound to the pod's loopback can be probed. Needs CAP_SYS_ADMIN (to
    /// enter the namespace) and access to the runtime's namespace files
    /// (`/var/run/netns`); the chart's `podNetwork.enabled` grants both.
    /// Without it such a probe is refused (a ProbeAnnotationInvalid event).
    #[arg(long, env = "PODPROBE_POD_NETWORK")]
    pub pod_network: bool,

    /// How long a probe's `clientCertificate` Secret, once read, is used
    /// before the next probe reads it again: a rotated certificate is
    /// presented within this many seconds. The kubelet's secret manager
    /// re-reads Secrets on the same kind of TTL (one minute).
    #[arg(
        long,
        env = "PODPROBE_SECRET_TTL_SECONDS",
        value_name = "SECONDS",
        default_value_t = crate::api::secret_cache::SECRET_TTL.as_secs() as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub secret_ttl_seconds: u32,

    /// Most bytes the compiled `podprobe.expect.bodyRegex` programs of one
    /// pod's probes may take together (each may take 64 KiB). A probe over
    /// it is refused with a ProbeBudgetExceeded event (gate mode: the
    /// annotation is refused; authority mode: every run of that probe
    /// errors).
    #[arg(
        long,
        env = "PODPROBE_MAX_POD_REGEX_BYTES",
        value_name = "BYTES",
        default_value_t = budget::DEFAULT_POD_REGEX_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_pod_regex_bytes: u64,

    /// Most bytes the exec probe commands of one pod may take together after
    /// `$(VAR)` expansion (each may take 2 MiB); over it as for
    /// --max-pod-regex-bytes.
    #[arg(
        long,
        env = "PODPROBE_MAX_POD_COMMAND_BYTES",
        value_name = "BYTES",
        default_value_t = budget::DEFAULT_POD_COMMAND_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_pod_command_bytes: u64,

    /// Gate mode: the longest `podprobe.io/probes` annotation podprobe
    /// parses; a longer one is refused (ProbeAnnotationInvalid). At most,
    /// and by default, the API server's limit on all of a pod's annotations.
    #[arg(
        long,
        env = "PODPROBE_MAX_ANNOTATION_BYTES",
        value_name = "BYTES",
        default_value_t = budget::MAX_ANNOTATION_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..=budget::MAX_ANNOTATION_BYTES as u64)
    )]
    pub max_annotation_bytes: u64,

    /// Most bytes the compiled `podprobe.expect.bodyRegex` programs of all
    /// pods on the node may take together. A probe that would go over it is
    /// refused as for --max-pod-regex-bytes, unless its pod's programs fit
    /// the share every pod is guaranteed (this value / 110, the kubelet's
    /// default maxPods).
    #[arg(
        long,
        env = "PODPROBE_MAX_NODE_REGEX_BYTES",
        value_name = "BYTES",
        default_value_t = budget::DEFAULT_NODE_REGEX_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_node_regex_bytes: u64,

    /// Most bytes the exec probe commands of all pods on the node may take
    /// together after `$(VAR)` expansion; over it as for
    /// --max-node-regex-bytes.
    #[arg(
        long,
        env = "PODPROBE_MAX_NODE_COMMAND_BYTES",
        value_name = "BYTES",
        default_value_t = budget::DEFAULT_NODE_COMMAND_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_node_command_bytes: u64,

    /// Event writes a second to the API server, node-wide (the kubelet's
    /// eventRecordQPS); 0: no limit.
    #[arg(
        long,
        env = "PODPROBE_EVENT_QPS",
        value_name = "QPS",
        default_value_t = event_broadcaster::DEFAULT_EVENT_QPS,
        value_parser = non_negative_rate
    )]
    pub event_qps: f64,

    /// Event writes allowed at once above --event-qps (the kubelet's
    /// eventBurst).
    #[arg(
        long,
        env = "PODPROBE_EVENT_BURST",
        value_name = "N",
        default_value_t = event_broadcaster::DEFAULT_EVENT_BURST,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub event_burst: u32,

    /// API requests a second other than Event writes (the kubelet's
    /// kubeAPIQPS); 0: no limit.
    #[arg(
        long,
        env = "PODPROBE_KUBE_API_QPS",
        value_name = "QPS",
        default_value_t = apiclient::DEFAULT_API_QPS,
        value_parser = non_negative_rate
    )]
    pub kube_api_qps: f64,

    /// API requests allowed at once above --kube-api-qps (the kubelet's
    /// kubeAPIBurst).
    #[arg(
        long,
        env = "PODPROBE_KUBE_API_BURST",
        value_name = "N",
        default_value_t = apiclient::DEFAULT_API_BURST,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub kube_api_burst: u32,

    /// TokenReviews and SubjectAccessReviews a second, sent through a client
    /// of their own (for `/metrics` and `kubectl podprobe status` callers),
    /// so that a flood of forged tokens never holds a status patch back; 0:
    /// no limit. The kubelet sends its reviews through its main client.
    #[arg(
        long,
        env = "PODPROBE_REVIEW_QPS",
        value_name = "QPS",
        default_value_t = apiclient::DEFAULT_REVIEW_QPS,
        value_parser = non_negative_rate
    )]
    pub review_qps: f64,

    /// Reviews allowed at once above --review-qps.
    #[arg(
        long,
        env = "PODPROBE_REVIEW_BURST",
        value_name = "N",
        default_value_t = apiclient::DEFAULT_REVIEW_BURST,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub review_burst: u32,

    /// Requests a second of the workload guards (a restartBudget's or
    /// readinessFloor's reads of the workload and writes of its Lease),
    /// sent through a client of their own so that a tenant's many failing
    /// budgeted pods never hold a status patch back; 0: no limit. A
    /// decision that waits past 10 s is given up, and the restart or gate
    /// is then the kubelet's.
    #[arg(
        long,
        env = "PODPROBE_WORKLOAD_GUARD_QPS",
        value_name = "QPS",
        default_value_t = apiclient::DEFAULT_GUARD_QPS,
        value_parser = non_negative_rate
    )]
    pub workload_guard_qps: f64,

    /// Workload guard requests allowed at once above --workload-guard-qps.
    #[arg(
        long,
        env = "PODPROBE_WORKLOAD_GUARD_BURST",
        value_name = "N",
        default_value_t = apiclient::DEFAULT_GUARD_BURST,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub workload_guard_burst: u32,

    /// Let PodDisruptionBudgets with the annotation `podprobe.io/guards:
    /// restartBudget,readinessFloor` give their pods a restart budget and a
    /// readiness floor from their numbers, where the pods' probes set none
    /// (WG5). Watches the PodDisruptionBudgets of every namespace (RBAC:
    /// list and watch poddisruptionbudgets); off, they are never read.
    #[arg(long, env = "PODPROBE_PDB_GUARDS")]
    pub pdb_guards: bool,

    /// Probe runs a second one pod's probes may start, bursts of as many
    /// (a token bucket); a run over it waits, late rather than failed
    /// (podprobe_probe_rate_delayed_total). 0: no limit. The kubelet needs
    /// none: its periods are at least a second.
    #[arg(
        long,
        env = "PODPROBE_MAX_POD_PROBE_RATE",
        value_name = "RUNS",
        default_value_t = podprobe_core::prober::probe_rates::DEFAULT_POD_PROBE_RATE
    )]
    pub max_pod_probe_rate: u32,

    /// Probe runs a second all pods' probes may start together, after their
    /// pod's budget, bursts of as many; shared fairly between pods: when it
    /// runs out, the next run goes to the waiting pod that took the fewest
    /// lately, so a few pods at their own maximum cannot starve the rest.
    /// 0: no limit.
    #[arg(
        long,
        env = "PODPROBE_MAX_NODE_PROBE_RATE",
        value_name = "RUNS",
        default_value_t = podprobe_core::prober::probe_rates::DEFAULT_NODE_PROBE_RATE
    )]
    pub max_node_probe_rate: u32,

    /// Longest a pod's `podprobe.io/pause-liveness-until` may pause its
    /// liveness probes, counted from when podprobe reads it; a later time
    /// is refused with a LivenessPauseInvalid event. 0: pauses are refused.
    /// The kubelet has no pause.
    #[arg(
        long,
        env = "PODPROBE_MAX_LIVENESS_PAUSE_SECONDS",
        value_name = "SECONDS",
        default_value_t = podprobe_core::prober::liveness_pause::DEFAULT_MAX_PAUSE.as_secs()
    )]
    pub max_liveness_pause_seconds: u64,

    /// Most bytes of probe output kept node-wide for `kubectl podprobe
    /// status` (the last output of every probe: at most 4 KiB each, 16 KiB
    /// per pod; the first 256 bytes of each are kept whatever this says).
    /// The kubelet keeps probe output only in Events.
    #[arg(
        long,
        env = "PODPROBE_STATUS_OUTPUT_BUDGET_BYTES",
        value_name = "BYTES",
        default_value_t = podprobe_core::prober::probe_ledger::DEFAULT_NODE_OUTPUT_BYTES as u64
    )]
    pub status_output_budget_bytes: u64,

    /// Label and annotation keys that probes' `podprobe.markers` may write
    /// on their own pods, comma-separated (e.g.
    /// `role,controller.kubernetes.io/pod-deletion-cost`). A marker of
    /// another key is refused with a MarkerNotAllowed event. Empty: no
    /// marker is written. The kubelet writes no labels or annotations.
    #[arg(
        long,
        env = "PODPROBE_MARKER_KEYS",
        value_name = "KEYS",
        value_delimiter = ',',
        num_args = 0..
    )]
    pub marker_keys: Vec<String>,
}

/// A request rate flag: a finite number, at least 0.
fn non_negative_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= 0.0 => Ok(rate),
        _ => Err(format!(
            "{text:?}: expected a number of requests a second, 0 or more"
        )),
    }
}

/// Default of `--max-concurrent-execs`: room for about 100 exec probes a
/// second at the 100-300 ms an `ExecSync` takes on a busy node.
pub const DEFAULT_MAX_CONCURRENT_EXECS: u32 = 32;

/// Default of `--max-concurrent-execs-per-pod`: a quarter of the default
/// slots, so at least four pods share them under any load.
pub const DEFAULT_MAX_CONCURRENT_EXECS_PER_POD: u32 = 8;

/// Default of `--max-exec-timeout-seconds`: twice the longest timeout the
/// kubelet's own e2e probe specs use (30 s).
pub const DEFAULT_MAX_EXEC_TIMEOUT_SECONDS: u32 = 60;

/// Default of `--max-concurrent-network-probes`: a probe attempt takes
/// milliseconds, so 110 pods with three probes each at 1 s periods have a
/// few in flight; 256 leaves room for slow servers, and holds at most about
/// 32 MiB of response buffers.
pub const DEFAULT_MAX_CONCURRENT_NETWORK_PROBES: u32 = 256;

/// Default of `--max-concurrent-network-probes-per-pod`: every probe of a
/// pod of five containers at once.
pub const DEFAULT_MAX_CONCURRENT_NETWORK_PROBES_PER_POD: u32 = 16;

/// Default of `--max-network-timeout-seconds`: as for exec probes.
pub const DEFAULT_MAX_NETWORK_TIMEOUT_SECONDS: u32 = DEFAULT_MAX_EXEC_TIMEOUT_SECONDS;

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Probes from the `podprobe.io/probes` annotation.
    Gate,
    /// Probes from the pod spec.
    Authority,
}

/// `--metrics-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MetricsAuth {
    /// TokenReview and SubjectAccessReview through the API server.
    Delegated,
    /// No authentication.
    None,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated configuration of `podprobe run`.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_name: String,
    pub mode: Mode,
    pub cri_endpoint: String,
    /// `--kube-probe-version`; `None`: the node's kubelet's.
    pub kube_probe_version: Option<String>,
    pub pod_selector: Option<String>,
    pub listen: SocketAddr,
    pub metrics_auth: MetricsAuth,
    pub plain_metrics_listen: Option<SocketAddr>,
    pub max_connections: usize,
    pub kubeconfig: Option<PathBuf>,
    pub log_format: LogFormat,
    pub log_filter: String,
    /// Where probes may connect and which annotated hosts are accepted.
    pub destinations: Destinations,
    pub max_concurrent_execs: usize,
    pub max_concurrent_execs_per_pod: usize,
    pub max_exec_timeout: Duration,
    /// `--max-concurrent-network-probes`, `...-per-pod`.
    pub max_concurrent_network_probes: usize,
    pub max_concurrent_network_probes_per_pod: usize,
    /// `--max-network-timeout-seconds`.
    pub max_network_timeout: Duration,
    /// Whether `podprobe.network: pod` probes may run (`--pod-network`).
    pub pod_network: bool,

    /// `--secret-ttl-seconds`.
    pub secret_ttl: Duration,
    /// `--max-pod-regex-bytes`, `--max-pod-command-bytes`,
    /// `--max-annotation-bytes`.
    pub budget: BudgetLimits,
    /// `--event-qps`, `--event-burst`.
    pub event_rate: RateLimit,
    /// `--kube-api-qps`, `--kube-api-burst`.
    pub api_rate: RateLimit,
    /// `--review-qps`, `--review-burst`.
    pub review_rate: RateLimit,
    /// `--workload-guard-qps`, `--workload-guard-burst`.
    pub guard_rate: RateLimit,
    /// `--pdb-guards`.
    pub pdb_guards: bool,
    /// `--max-pod-probe-rate`, `--max-node-probe-rate`.
    pub pod_probe_rate: u32,
    pub node_probe_rate: u32,
    /// `--max-liveness-pause-seconds`.
    pub max_liveness_pause: Duration,
    /// `--status-output-budget-bytes`.
    pub status_output_budget: usize,
    /// `--marker-keys`.
    pub marker_keys: MarkerKeys,
    /// `--status-api-*`; `None`: not served.
    pub status_api: Option<StatusApiConfig>,
}

/// A flag value podprobe cannot run with; the message names the flag, its
/// environment variable and what is expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "--node-name (NODE_NAME) {0:?} is not a valid node name: expected a DNS subdomain (lowercase \
         letters, digits, '-' and '.', at most 253 characters)"
    )]
    NodeName(String),
    #[error("--cri-endpoint (PODPROBE_CRI_ENDPOINT) {0:?}: expected unix:///path/to/socket")]
    CriEndpoint(String),
    #[error(
        "--kube-probe-version (PODPROBE_KUBE_PROBE_VERSION) {0:?}: expected MAJOR.MINOR, e.g. 1.35"
    )]
    KubeProbeVersion(String),
    #[error("--pod-selector (PODPROBE_POD_SELECTOR) {selector:?}: {problem}")]
    PodSelector { selector: String, problem: String },
    #[error("--log-level (RUST_LOG) {filter:?}: {problem}")]
    LogFilter { filter: String, problem: String },
    #[error("--allow-probe-hosts (PODPROBE_ALLOW_PROBE_HOSTS): {0}")]
    AllowProbeHosts(CidrError),
    #[error("--deny-probe-destinations (PODPROBE_DENY_PROBE_DESTINATIONS): {0}")]
    DenyProbeDestinations(CidrError),
    #[error(
        "--status-api-listen needs --status-api-peer-name (PODPROBE_STATUS_API_PEER_NAME), a DNS name in the status API certificate"
    )]
    StatusApiPeerName,
}

impl RunArgs {
    /// Checks every flag and returns the typed configuration.
    pub fn validate(self) -> Result<Config, ConfigError> {
        let mode = match self.mode {
            ModeArg::Gate => Mode::Gate,
            ModeArg::Authority => Mode::Authority,
        };
        if !is_dns_subdomain(&self.node_name) {
            return Err(ConfigError::NodeName(self.node_name));
        }
        if !is_unix_endpoint(&self.cri_endpoint) {
            return Err(ConfigError::CriEndpoint(self.cri_endpoint));
        }
        if let Some(version) = self.kube_probe_version.as_deref()
            && !is_major_minor(version)
        {
            return Err(ConfigError::KubeProbeVersion(version.to_string()));
        }
        let pod_selector = match self.pod_selector {
            Some(selector) if selector.trim().is_empty() => None,
            Some(selector) => {
                check_selector(&selector).map_err(|problem| ConfigError::PodSelector {
                    selector: selector.clone(),
                    problem,
                })?;
                Some(selector)
            }
            None => None,
        };
        let status_api = match (self.status_api_listen, self.status_api_peer_name) {
            (None, _) => None,
            (Some(listen), Some(peer_name)) if is_dns_subdomain(&peer_name) => {
                Some(StatusApiConfig {
                    listen,
                    tls_dir: self.status_api_tls_dir,
                    peer_name,
                })
            }
            (Some(_), _) => return Err(ConfigError::StatusApiPeerName),
        };
        if let Err(e) = EnvFilter::try_new(&self.log_level) {
            return Err(ConfigError::LogFilter {
                filter: self.log_level,
                problem: e.to_string(),
            });
        }
        let allowed = non_empty(&self.allow_probe_hosts)
            .map(str::parse::<AllowedHost>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(ConfigError::AllowProbeHosts)?;
        let denied = match &self.deny_probe_destinations {
            Some(cidrs) => non_empty(cidrs)
                .map(str::parse::<Cidr>)
                .collect::<Result<Vec<_>, _>>()
                .map_err(ConfigError::DenyProbeDestinations)?,
            None if mode == Mode::Gate => Destinations::node_local(),
            None => Vec::new(),
        };
        Ok(Config {
            destinations: Destinations::new(allowed, denied),
            max_concurrent_execs: self.max_concurrent_execs as usize,
            max_concurrent_execs_per_pod: self.max_concurrent_execs_per_pod as usize,
            max_exec_timeout: Duration::from_secs(self.max_exec_timeout_seconds.into()),
            max_concurrent_network_probes: self.max_concurrent_network_probes as usize,
            max_concurrent_network_probes_per_pod: self.max_concurrent_network_probes_per_pod
                as usize,
            max_network_timeout: Duration::from_secs(self.max_network_timeout_seconds.into()),
            pod_network: self.pod_network,

            secret_ttl: Duration::from_secs(self.secret_ttl_seconds.into()),
            event_rate: RateLimit::new(self.event_qps, self.event_burst),
            pod_probe_rate: self.max_pod_probe_rate,
            node_probe_rate: self.max_node_probe_rate,
            max_liveness_pause: Duration::from_secs(self.max_liveness_pause_seconds),
            status_output_budget: usize::try_from(self.status_output_budget_bytes)
                .unwrap_or(usize::MAX),
            marker_keys: MarkerKeys::new(
                self.marker_keys
                    .iter()
                    .map(|k| k.trim().to_string())
                    .filter(|k| !k.is_empty()),
            ),
            api_rate: RateLimit::new(self.kube_api_qps, self.kube_api_burst),
            review_rate: RateLimit::new(self.review_qps, self.review_burst),
            guard_rate: RateLimit::new(self.workload_guard_qps, self.workload_guard_burst),
            pdb_guards: self.pdb_guards,
            budget: BudgetLimits {
                regex_bytes: usize::try_from(self.max_pod_regex_bytes).unwrap_or(usize::MAX),
                command_bytes: usize::try_from(self.max_pod_command_bytes).unwrap_or(usize::MAX),
                annotation_bytes: self.max_annotation_bytes as usize,
                node_regex_bytes: usize::try_from(self.max_node_regex_bytes).unwrap_or(usize::MAX),
                node_command_bytes: usize::try_from(self.max_node_command_bytes)
                    .unwrap_or(usize::MAX),
            },
            node_name: self.node_name,
            mode,
            cri_endpoint: self.cri_endpoint,
            kube_probe_version: self.kube_probe_version,
            pod_selector,
            listen: self.listen,
            metrics_auth: self.metrics_auth,
            plain_metrics_listen: self.plain_metrics_listen,
            max_connections: self.max_connections as usize,
            kubeconfig: self.kubeconfig,
            log_format: self.log_format,
            log_filter: self.log_level,
            status_api,
        })
    }
}

impl Config {
    /// The watch's field selector: pods bound to this node.
    pub fn field_selector(&self) -> String {
        format!("spec.nodeName={}", self.node_name)
    }
}

/// The entries of a comma-separated list flag, trimmed, without empty ones
/// (so that an empty value is an empty list).
fn non_empty(entries: &[String]) -> impl Iterator<Item = &str> {
    entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty())
}

fn is_unix_endpoint(endpoint: &str) -> bool {
    endpoint
        .strip_prefix("unix://")
        .is_some_and(|path| path.starts_with('/') && path.len() > 1)
}

fn is_major_minor(version: &str) -> bool {
    let numeric = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    version
        .split_once('.')
        .is_some_and(|(major, minor)| numeric(major) && numeric(minor))
}

/// A syntax check of a label selector: comma-separated requirements
/// (`k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`), none
/// empty. The API server checks the details; this catches typos before the
/// first watch.
fn check_selector(selector: &str) -> Result<(), String> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut terms = Vec::new();
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err("unbalanced ')'".to_string());
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_string());
    }
    terms.push(&selector[start..]);
    for term in terms {
        let term = term.trim();
        if term.is_empty() {
            return Err("empty requirement (stray ',')".to_string());
        }
        let key = term
            .trim_start_matches('!')
            .split(['=', '!', ' ', '('])
            .next()
            .unwrap_or_default();
        if key.is_empty() {
            return Err(format!("requirement {term:?} has no label key"));
        }
    }
    Ok(())
}

/// `podprobe run`'s command line, for tests.
#[cfg(test)]
#[derive(clap::Parser)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub run: RunArgs,
}

/// Parses `flags` alone, for tests: the environment of the test process (CI
/// exports `PODPROBE_CRI_ENDPOINT` for the CRI tests) must not leak in.
#[cfg(test)]
pub(crate) fn parse(flags: &[&str]) -> RunArgs {
    use clap::{CommandFactory, FromArgMatches};
    let argv = std::iter::once("podprobe").chain(flags.iter().copied());
    let matches = Cli::command()
        .mut_args(|arg| arg.env(None::<&'static str>))
        .try_get_matches_from(argv)
        .expect("flags parse");
    Cli::from_arg_matches(&matches).expect("flags parse").run
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// `flags` after `--node-name node-1`.
    fn args(flags: &[&str]) -> RunArgs {
        parse(&[&["--node-name", "node-1"], flags].concat())
    }

    #[test]
    fn defaults_are_gate_mode_on_the_default_endpoint() {
        let config = args(&[]).validate().expect("valid");
        assert_eq!(config.mode, Mode::Gate);
        assert_eq!(config.cri_endpoint, DEFAULT_ENDPOINT);
        assert_eq!(config.kube_probe_version, None, "the node's kubelet's");
        assert_eq!(config.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(config.pod_selector, None);
        assert_eq!(config.field_selector(), "spec.nodeName=node-1");
        assert!(!config.pod_network, "entering pod namespaces is opt-in");
        let pod_network = args(&["--pod-network"]).validate().expect("valid");
        assert!(pod_network.pod_network);

        assert_eq!(config.secret_ttl, crate::api::secret_cache::SECRET_TTL);
    }

    #[test]
    fn secret_ttl_is_whole_seconds_from_one() {
        let config = args(&["--secret-ttl-seconds", "5"]).validate().unwrap();
        assert_eq!(config.secret_ttl, std::time::Duration::from_secs(5));
        let zero = ["podprobe", "--node-name", "n", "--secret-ttl-seconds", "0"];
        let refused = Cli::command()
            .mut_args(|arg| arg.env(None::<&'static str>))
            .try_get_matches_from(zero)
            .unwrap_err();
        assert!(
            refused.to_string().contains("--secret-ttl-seconds"),
            "{refused}"
        );
    }

    #[test]
    fn probe_destinations_default_by_mode_and_parse_strictly() {
        let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let gate = args(&[]).validate().expect("valid");
        assert!(gate.destinations.check(local).is_err());
        assert!(!gate.destinations.allows_host("10.0.0.1"));
        let authority = args(&["--mode", "authority"]).validate().expect("valid");
        assert_eq!(authority.destinations, Destinations::default());
        let open = args(&["--deny-probe-destinations="])
            .validate()
            .expect("valid");
        assert_eq!(open.destinations, Destinations::default());
        let allowing = args(&["--allow-probe-hosts", "10.0.0.0/8, db.internal,127.0.0.1"])
            .validate()
            .expect("valid");
        assert!(allowing.destinations.allows_host("db.internal"));
        assert_eq!(allowing.destinations.check(local), Ok(()));
        let err = args(&["--deny-probe-destinations", "10.0.0.0/40"])
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--deny-probe-destinations (PODPROBE_DENY_PROBE_DESTINATIONS): invalid CIDR \
             \"10.0.0.0/40\": prefix length out of range (at most 32 for IPv4, 128 for IPv6)"
        );
        let err = args(&["--allow-probe-hosts", "10.0.0.0/x"])
            .validate()
            .unwrap_err();
        assert!(matches!(err, ConfigError::AllowProbeHosts(_)), "{err}");
    }

    #[test]
    fn authority_mode_is_selected_by_flag() {
        let config = args(&["--mode", "authority"]).validate().expect("valid");
        assert_eq!(config.mode, Mode::Authority);
    }

    #[test]
    fn node_name_must_be_a_dns_subdomain() {
        for bad in ["", "Node_1", "-node", "node-", "a..b"] {
            let flag = format!("--node-name={bad}");
            let err = parse(&[&flag]).validate().unwrap_err();
            assert_eq!(err, ConfigError::NodeName(bad.to_string()), "{bad:?}");
        }
        assert!(
            parse(&["--node-name", "ip-10-0-0-1.ec2.internal"])
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn cri_endpoint_must_be_a_unix_socket() {
        let err = args(&["--cri-endpoint", "/run/containerd.sock"])
            .validate()
            .unwrap_err();
        assert!(matches!(err, ConfigError::CriEndpoint(_)));
        assert!(
            args(&["--cri-endpoint", "unix:///tmp/c.sock"])
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn kube_probe_version_is_major_minor() {
        for bad in ["1", "1.35.2", "v1.35", "1."] {
            let err = args(&["--kube-probe-version", bad]).validate().unwrap_err();
            assert!(matches!(err, ConfigError::KubeProbeVersion(_)), "{bad:?}");
        }
        let given = args(&["--kube-probe-version", "1.36"]).validate().unwrap();
        assert_eq!(given.kube_probe_version.as_deref(), Some("1.36"));
    }

    #[test]
    fn pod_selector_syntax_is_checked() {
        for good in ["app=web", "!podprobe.io/test-run", "env in (a,b),tier!=db"] {
            let config = args(&["--pod-selector", good]).validate().expect(good);
            assert_eq!(config.pod_selector.as_deref(), Some(good));
        }
        for bad in ["app=web,", "env in (a,b", "=x"] {
            let err = args(&["--pod-selector", bad]).validate().unwrap_err();
            assert!(matches!(err, ConfigError::PodSelector { .. }), "{bad:?}");
        }
        let config = args(&["--pod-selector", " "]).validate().unwrap();
        assert_eq!(config.pod_selector, None);
    }

    #[test]
    fn metrics_need_delegated_auth_unless_told_otherwise() {
        let config = args(&[]).validate().expect("valid");
        assert_eq!(config.metrics_auth, MetricsAuth::Delegated);
        assert_eq!(config.plain_metrics_listen, None);
        assert_eq!(config.max_connections, DEFAULT_MAX_CONNECTIONS);
        let config = args(&[
            "--metrics-auth=none",
            "--plain-metrics-listen=127.0.0.1:9441",
            "--max-connections=8",
        ])
        .validate()
        .expect("valid");
        assert_eq!(config.metrics_auth, MetricsAuth::None);
        assert_eq!(
            config.plain_metrics_listen,
            Some("127.0.0.1:9441".parse().unwrap())
        );
        assert_eq!(config.max_connections, 8);
        let zero = Cli::command()
            .mut_args(|arg| arg.env(None::<&'static str>))
            .try_get_matches_from(["podprobe", "--node-name=n", "--max-connections=0"]);
        assert!(zero.is_err());
    }

    #[test]
    fn reviews_and_guards_have_rates_of_their_own() {
        let config = args(&[]).validate().expect("valid");
        assert_eq!(
            config.api_rate,
            RateLimit::new(apiclient::DEFAULT_API_QPS, apiclient::DEFAULT_API_BURST)
        );
        assert_eq!(config.review_rate, RateLimit::new(20.0, 40));
        assert_eq!(config.guard_rate, RateLimit::new(10.0, 20));
        let config = args(&[
            "--review-qps=5",
            "--review-burst=10",
            "--kube-api-qps=7",
            "--workload-guard-qps=2",
            "--workload-guard-burst=3",
        ])
        .validate()
        .expect("valid");
        assert_eq!(config.review_rate, RateLimit::new(5.0, 10));
        assert_eq!(config.guard_rate, RateLimit::new(2.0, 3));
        assert_eq!(config.api_rate.qps, 7.0);
        for bad in [
            "--review-qps=-1",
            "--review-burst=0",
            "--workload-guard-qps=-1",
            "--workload-guard-burst=0",
        ] {
            let refused = Cli::command()
                .mut_args(|arg| arg.env(None::<&'static str>))
                .try_get_matches_from(["podprobe", "--node-name=n", bad]);
            assert!(refused.is_err(), "{bad}");
        }
    }

    #[test]
    fn log_filter_is_checked() {
        let err = args(&["--log-level", "info,=[bad"]).validate().unwrap_err();
        assert!(matches!(err, ConfigError::LogFilter { .. }));
    }
}
