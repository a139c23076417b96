//! Exec probe overhead (#15, item 4). A measurement, not a test.
//!
//! - `overhead`: against a real containerd, N containers each probed once a
//!   period, the calls rotating between a bare tonic `ExecSync` (a client
//!   generated from podprobe's own `proto/api.proto`, nothing around the
//!   call), podprobe's exec path as its workers run it (`Prober::probe` with
//!   the container's identity, over a `CriClient` set up as the daemon sets
//!   it up), and the same without the identity check. Latencies per side.
//! - `fake`: the same three sides, closed loop, against a runtime in this
//!   process (a tonic server on a unix socket answering at once, on a thread
//!   of its own): with the runtime's time taken out, the difference between
//!   the sides is podprobe's own time, to the microsecond; also CPU per call.
//! - `cap`: N containers' exec probes all due at the same instant every
//!   period, through podprobe with `--max-concurrent-execs` = `--cap`;
//!   containerd's and its shims' CPU, peak `ExecSync`s in flight, latency
//!   and failures.
//! - `setup` / `teardown`: the bench pods (sandbox + one quiet busybox
//!   container each), kept between runs.
//!
//! Every run prints one JSON line on stdout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use podprobe::daemon::metric_set::MetricSet;
use podprobe::probe::Prober;
use podprobe::runtime::cri::{
    CONTAINER_NAME_LABEL, ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState,
    ContainerStateValue, CriClient, ImageSpec, POD_UID_LABEL, PodSandboxConfig, PodSandboxFilter,
    PodSandboxMetadata,
};
use podprobe_core::spec::probe_spec::ExecAction;
use podprobe_core::spec::probe_spec::extension::Network;
use podprobe_core::spec::{Handler, ProbeKind, ProbeSpec, ProbeTarget, ProbeVerdict};
use podprobe_core::util::pod::ContainerIdentity;
use podprobe_core::util::watch_activity::WatchActivity;
use serde_json::json;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

mod v1 {
    tonic::include_proto!("runtime.v1");
}
use v1::runtime_service_client::RuntimeServiceClient;
use v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};

/// Label on every bench pod and container, to find (and remove) them.
const BENCH_LABEL: &str = "podprobe.io/bench";
const BENCH_VALUE: &str = "exec";
const CONTAINER_NAME: &str = "app";
const BUSYBOX_IMAGE: &str = "docker.io/local/busybox:latest";
const NAMESPACE: &str = "podprobe-bench";

#[derive(Parser)]
struct Cli {
    /// The CRI endpoint (hack/containerd.sh's by default).
    #[arg(
        long,
        global = true,
        default_value = "unix:///tmp/podprobe-cri/containerd.sock"
    )]
    endpoint: String,
    /// tokio worker threads (the daemon uses one per core).
    #[arg(long, global = true, default_value_t = 2)]
    threads: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Makes sure at least `--pods` bench pods run.
    Setup {
        #[arg(long, default_value_t = 100)]
        pods: usize,
        /// Sandboxes created at once.
        #[arg(long, default_value_t = 4)]
        parallel: usize,
    },
    /// Removes every bench pod.
    Teardown,
    /// Real runtime: bare vs podprobe, rotating per call, on a schedule.
    Overhead {
        #[arg(long, default_value_t = 20)]
        pods: usize,
        #[arg(long, default_value_t = 1000)]
        period_ms: u64,
        #[arg(long, default_value_t = 60)]
        duration_s: u64,
        #[arg(long, default_value_t = 5)]
        warmup_s: u64,
        /// The probe command, split on spaces.
        #[arg(long, default_value = "true")]
        cmd: String,
        #[arg(long, default_value_t = 32)]
        cap: usize,
    },
    /// Fake runtime in this process: bare vs podprobe, closed loop.
    Fake {
        /// Calls per side per round.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// What the fake `ExecSync` answers on stdout, in bytes.
        #[arg(long, default_value_t = 3)]
        output_bytes: usize,
        #[arg(long, default_value_t = 32)]
        cap: usize,
    },
    /// N probes due at once every period, podprobe with `--cap` exec slots.
    Cap {
        #[arg(long, default_value_t = 100)]
        pods: usize,
        #[arg(long, default_value_t = 32)]
        cap: usize,
        #[arg(long, default_value_t = 10_000)]
        period_ms: u64,
        #[arg(long, default_value_t = 6)]
        rounds: usize,
        #[arg(long, default_value_t = 1)]
        timeout_s: i32,
        #[arg(long, default_value = "true")]
        cmd: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let line = runtime.block_on(async {
        match cli.command {
            Command::Setup { pods, parallel } => setup(&cli.endpoint, pods, parallel).await,
            Command::Teardown => teardown(&cli.endpoint).await,
            Command::Overhead {
                pods,
                period_ms,
                duration_s,
                warmup_s,
                cmd,
                cap,
            } => {
                overhead(
                    &cli.endpoint,
                    pods,
                    Duration::from_millis(period_ms),
                    Duration::from_secs(duration_s),
                    Duration::from_secs(warmup_s),
                    words(&cmd),
                    cap,
                )
                .await
            }
            Command::Fake {
                calls,
                rounds,
                output_bytes,
                cap,
            } => fake(calls, rounds, output_bytes, cap).await,
            Command::Cap {
                pods,
                cap,
                period_ms,
                rounds,
                timeout_s,
                cmd,
            } => {
                cap_run(
                    &cli.endpoint,
                    pods,
                    cap,
                    Duration::from_millis(period_ms),
                    rounds,
                    timeout_s,
                    words(&cmd),
                )
                .await
            }
        }
    });
    println!("{line}");
}

fn words(cmd: &str) -> Vec<String> {
    cmd.split_whitespace().map(str::to_string).collect()
}

// ---------------------------------------------------------------- pods

/// A running bench container and what it is labelled with.
#[derive(Clone, Debug)]
struct BenchContainer {
    id: String,
    pod_uid: String,
}

fn bench_labels() -> HashMap<String, String> {
    HashMap::from([(BENCH_LABEL.to_string(), BENCH_VALUE.to_string())])
}

async fn bench_containers(cri: &CriClient) -> Vec<BenchContainer> {
    let filter = ContainerFilter {
        state: Some(ContainerStateValue {
            state: ContainerState::ContainerRunning.into(),
        }),
        label_selector: bench_labels(),
        ..Default::default()
    };
    let mut containers: Vec<BenchContainer> = cri
        .list_containers(filter)
        .await
        .expect("ListContainers")
        .into_iter()
        .map(|c| BenchContainer {
            pod_uid: c.labels.get(POD_UID_LABEL).cloned().unwrap_or_default(),
            id: c.id,
        })
        .collect();
    containers.sort_by(|a, b| a.id.cmp(&b.id));
    containers
}

async fn containers_for(cri: &CriClient, pods: usize) -> Vec<BenchContainer> {
    let mut containers = bench_containers(cri).await;
    assert!(
        containers.len() >= pods,
        "{} bench pods run, {pods} wanted: run `exec-bench setup --pods {pods}` first",
        containers.len()
    );
    containers.truncate(pods);
    containers
}

async fn start_pod(cri: &CriClient, index: usize) {
    let uid = format!("{:032x}", rand::random::<u128>());
    let name = format!("exec-bench-{index}-{}", &uid[..8]);
    let sandbox = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: NAMESPACE.to_string(),
            attempt: 0,
        }),
        hostname: name,
        labels: bench_labels(),
        ..Default::default()
    };
    let sandbox_id = cri
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .expect("RunPodSandbox");
    let mut labels = bench_labels();
    labels.insert(POD_UID_LABEL.to_string(), uid);
    labels.insert(CONTAINER_NAME_LABEL.to_string(), CONTAINER_NAME.to_string());
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: CONTAINER_NAME.to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: BUSYBOX_IMAGE.to_string(),
            ..Default::default()
        }),
        // Quiet: no process forks in the container between probes (the
        // tests' `while sleep 1` loop would add 1 fork/s per pod).
        command: words("sleep 2147483647"),
        labels,
        ..Default::default()
    };
    let id = cri
        .create_container(&sandbox_id, config, sandbox)
        .await
        .expect("CreateContainer");
    cri.start_container(&id).await.expect("StartContainer");
}

async fn setup(endpoint: &str, pods: usize, parallel: usize) -> serde_json::Value {
    let cri = CriClient::new(endpoint).expect("endpoint");
    let began = Instant::now();
    let have = bench_containers(&cri).await.len();
    futures::stream::iter(have..pods)
        .map(|i| {
            let cri = cri.clone();
            async move { start_pod(&cri, i).await }
        })
        .buffer_unordered(parallel.max(1))
        .collect::<Vec<()>>()
        .await;
    let now = bench_containers(&cri).await.len();
    json!({"mode": "setup", "had": have, "running": now, "seconds": began.elapsed().as_secs_f64()})
}

async fn teardown(endpoint: &str) -> serde_json::Value {
    let cri = CriClient::new(endpoint).expect("endpoint");
    let sandboxes = cri
        .list_pod_sandbox(PodSandboxFilter {
            label_selector: bench_labels(),
            ..Default::default()
        })
        .await
        .expect("ListPodSandbox");
    let count = sandboxes.len();
    futures::stream::iter(sandboxes)
        .map(|s| {
            let cri = cri.clone();
            async move {
                if let Err(e) = cri.stop_pod_sandbox(&s.id).await {
                    eprintln!("StopPodSandbox {}: {e}", s.id);
                }
                if let Err(e) = cri.remove_pod_sandbox(&s.id).await {
                    eprintln!("RemovePodSandbox {}: {e}", s.id);
                }
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
    json!({"mode": "teardown", "removed": count})
}

// ---------------------------------------------------------------- the sides

/// How one call is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    /// A bare tonic `ExecSync`: build the request, await the reply.
    Bare,
    /// A bare `ContainerStatus`, then a bare `ExecSync`: the two calls
    /// podprobe's workers make per exec probe, and nothing else.
    BareWithStatus,
    /// podprobe as its workers call it: `Prober::probe` with the
    /// container's identity (a `ContainerStatus` first), then `ExecSync`.
    Podprobe,
    /// podprobe without the identity check: the exec handler, retries
    /// wrapper and `CriClient::exec_sync` (exec slot, deadline, decode cap).
    PodprobeNoIdentity,
}

const SIDES: [Side; 4] = [
    Side::Bare,
    Side::BareWithStatus,
    Side::Podprobe,
    Side::PodprobeNoIdentity,
];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Bare => "bare",
            Side::BareWithStatus => "bare_with_status",
            Side::Podprobe => "podprobe",
            Side::PodprobeNoIdentity => "podprobe_no_identity",
        }
    }
}

/// The three ways of calling, set up once.
struct Callers {
    bare: RuntimeServiceClient<Channel>,
    prober: Prober,
    spec: ProbeSpec,
    cmd: Vec<String>,
    timeout_s: i64,
}

/// A tonic channel over the runtime's unix socket, made as podprobe makes
/// its own (same connector, same endpoint settings), connected now.
async fn bare_client(socket: PathBuf) -> RuntimeServiceClient<Channel> {
    let connector = tower::service_fn(move |_: http::Uri| {
        let socket = socket.clone();
        async move { UnixStream::connect(socket).await.map(TokioIo::new) }
    });
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await
        .expect("bare client connects");
    RuntimeServiceClient::new(channel)
}

fn socket_of(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint))
}

fn exec_spec(cmd: &[String], timeout_s: i32) -> ProbeSpec {
    ProbeSpec {
        handler: Handler::Exec(ExecAction {
            command: cmd.to_vec(),
        }),
        initial_delay_seconds: 0,
        timeout_seconds: timeout_s,
        period_seconds: 1,
        period_milliseconds: None,
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
        network: Network::Node,
        markers: Vec::new(),
        workload: Default::default(),
    }
}

/// podprobe's CRI client and prober exactly as `daemon::run` builds them.
fn podprobe_prober(endpoint: &str, cap: usize, metrics: &MetricSet) -> Prober {
    let cri = CriClient::new(endpoint)
        .expect("endpoint")
        .count_exec_in_flight(metrics.exec_in_flight.clone())
        .limit_concurrent_execs(
            cap,
            podprobe::daemon::flags::DEFAULT_MAX_CONCURRENT_EXECS_PER_POD as usize,
            Duration::from_secs(podprobe::daemon::flags::DEFAULT_MAX_EXEC_TIMEOUT_SECONDS.into()),
        );
    Prober::new("1.35", Some(cri))
}

impl Callers {
    async fn new(endpoint: &str, cmd: Vec<String>, timeout_s: i32, prober: Prober) -> Callers {
        Callers {
            bare: bare_client(socket_of(endpoint)).await,
            prober,
            spec: exec_spec(&cmd, timeout_s),
            cmd,
            timeout_s: timeout_s.into(),
        }
    }

    /// One call; `Ok` when the command ran and exited 0.
    async fn call(&self, side: Side, c: &BenchContainer) -> Result<(), String> {
        match side {
            Side::Bare | Side::BareWithStatus => {
                let mut client = self.bare.clone();
                if side == Side::BareWithStatus {
                    client
                        .container_status(v1::ContainerStatusRequest {
                            container_id: c.id.clone(),
                            verbose: false,
                        })
                        .await
                        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
                }
                let reply = client
                    .exec_sync(v1::ExecSyncRequest {
                        container_id: c.id.clone(),
                        cmd: self.cmd.clone(),
                        timeout: self.timeout_s,
                    })
                    .await
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
                    .into_inner();
                if reply.exit_code == 0 {
                    Ok(())
                } else {
                    Err(format!("exit code {}", reply.exit_code))
                }
            }
            Side::Podprobe | Side::PodprobeNoIdentity => {
                let verdict = self.probe(side == Side::Podprobe, c).await;
                if verdict.is_success() {
                    Ok(())
                } else {
                    Err(verdict_reason(&verdict))
                }
            }
        }
    }

    async fn probe(&self, identity: bool, c: &BenchContainer) -> ProbeVerdict {
        let target = ProbeTarget {
            pod_ip: "",
            container_id: Some(&c.id),
            identity: identity.then_some(ContainerIdentity {
                pod_uid: &c.pod_uid,
                container_name: CONTAINER_NAME,
            }),
            namespace: Some(NAMESPACE),
        };
        self.prober
            .probe(ProbeKind::Readiness, &self.spec, target)
            .await
    }
}

fn verdict_reason(v: &ProbeVerdict) -> String {
    match &v.error {
        Some(e) => format!("error after {} attempts: {e}", v.attempts),
        None => format!("{}: {}", v.result, v.output),
    }
}

// ---------------------------------------------------------------- numbers

/// Nearest-rank percentiles of `samples` (µs), and their count.
fn summary(samples: &mut [f64]) -> serde_json::Value {
    if samples.is_empty() {
        return json!({"n": 0});
    }
    samples.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let i = ((p / 100.0) * samples.len() as f64).ceil() as usize;
        samples[i.clamp(1, samples.len()) - 1]
    };
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    json!({
        "n": samples.len(),
        "p50_us": rank(50.0), "p90_us": rank(90.0), "p99_us": rank(99.0),
        "p99_9_us": rank(99.9), "max_us": samples[samples.len() - 1], "mean_us": mean,
    })
}

/// This process's user + system CPU seconds.
fn self_cpu() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: initialised by getrusage (or left zeroed).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(-1.0)
}

/// containerd and its shims, by PID: the containerd of the endpoint (from
/// the PID file next to its socket) and every `containerd-shim-runc-v2`
/// whose `-address` is that socket.
struct RuntimeProcs {
    containerd: u32,
    socket: String,
}

/// CPU seconds of the runtime's processes, in clock ticks, and how many
/// shims were counted.
#[derive(Clone, Copy, Debug, Default)]
struct RuntimeCpu {
    containerd: u64,
    shims: u64,
    shim_count: usize,
}

impl RuntimeProcs {
    fn find(endpoint: &str) -> RuntimeProcs {
        let socket = socket_of(endpoint);
        let pidfile = socket.with_file_name("containerd.pid");
        let containerd = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
            .trim()
            .parse()
            .expect("PID");
        RuntimeProcs {
            containerd,
            socket: socket.display().to_string(),
        }
    }

    fn shims(&self) -> Vec<u32> {
        let mut shims = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline);
            let mut args = cmdline.split('\0');
            let is_shim = args
                .next()
                .is_some_and(|a| a.ends_with("containerd-shim-runc-v2"));
            if is_shim && cmdline.contains(&self.socket) {
                shims.push(pid);
            }
        }
        shims
    }

    /// utime + stime + cutime + cstime: the process's own CPU and that of
    /// the children it has reaped (for a shim: every `runc exec`, `runc
    /// init` and exec'd command, which it reaps as their subreaper).
    fn ticks(pid: u32) -> u64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return 0;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            return 0;
        };
        // rest starts at field 3 (state); utime is field 14.
        rest.split_whitespace()
            .skip(11)
            .take(4)
            .filter_map(|f| f.parse::<u64>().ok())
            .sum()
    }

    fn cpu(&self, shims: &[u32]) -> RuntimeCpu {
        RuntimeCpu {
            containerd: Self::ticks(self.containerd),
            shims: shims.iter().map(|&p| Self::ticks(p)).sum(),
            shim_count: shims.len(),
        }
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

// ---------------------------------------------------------------- overhead

async fn overhead(
    endpoint: &str,
    pods: usize,
    period: Duration,
    duration: Duration,
    warmup: Duration,
    cmd: Vec<String>,
    cap: usize,
) -> serde_json::Value {
    let cri = CriClient::new(endpoint).expect("endpoint");
    let containers = containers_for(&cri, pods).await;
    let metrics = MetricSet::new(WatchActivity::new());
    let callers = Arc::new(
        Callers::new(
            endpoint,
            cmd.clone(),
            1,
            podprobe_prober(endpoint, cap, &metrics),
        )
        .await,
    );
    // Connect both clients before the clock starts.
    for side in SIDES {
        callers
            .call(side, &containers[0])
            .await
            .expect("warm-up call");
    }
    let procs = RuntimeProcs::find(endpoint);
    let shims = procs.shims();
    let samples: Arc<Mutex<Vec<(Side, f64, bool)>>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let mut cpu_mark: Option<(f64, RuntimeCpu)> = None;
    let mut tasks = Vec::new();
    for (i, container) in containers.iter().cloned().enumerate() {
        let (callers, samples, failures) = (callers.clone(), samples.clone(), failures.clone());
        // Evenly spread over the period: `pods / period` calls per second.
        let first = start + period.mul_f64(i as f64 / pods as f64);
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(first, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut k = 0usize;
            loop {
                let due = ticks.tick().await;
                if due >= end {
                    return;
                }
                // Each container rotates through the sides, and neighbours
                // are on different sides at any moment.
                let side = SIDES[(i + k) % SIDES.len()];
                k += 1;
                let began = Instant::now();
                let result = callers.call(side, &container).await;
                let micros = began.elapsed().as_secs_f64() * 1e6;
                if due >= measure_from {
                    samples.lock().unwrap().push((side, micros, result.is_ok()));
                    if let Err(e) = result {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{}: {e}", side.name()));
                    }
                }
            }
        }));
    }
    tokio::time::sleep_until(measure_from).await;
    let load = load_avg();
    cpu_mark.get_or_insert((self_cpu(), procs.cpu(&shims)));
    tokio::time::sleep_until(end).await;
    let (cpu0, rt0) = cpu_mark.expect("set");
    let (cpu1, rt1) = (self_cpu(), procs.cpu(&shims));
    for task in tasks {
        task.await.expect("probe task");
    }
    let samples = samples.lock().unwrap().clone();
    let failures = failures.lock().unwrap().clone();
    let mut sides = serde_json::Map::new();
    let mut p: HashMap<Side, serde_json::Value> = HashMap::new();
    for side in SIDES {
        let mut lat: Vec<f64> = samples
            .iter()
            .filter(|s| s.0 == side)
            .map(|s| s.1)
            .collect();
        let failed = samples.iter().filter(|s| s.0 == side && !s.2).count();
        let mut s = summary(&mut lat);
        s["failures"] = json!(failed);
        p.insert(side, s.clone());
        sides.insert(side.name().to_string(), s);
    }
    let diff = |a: Side, b: Side| {
        let mut d = serde_json::Map::new();
        for key in ["p50_us", "p90_us", "p99_us", "p99_9_us", "mean_us"] {
            let (x, y) = (p[&a][key].as_f64(), p[&b][key].as_f64());
            if let (Some(x), Some(y)) = (x, y) {
                d.insert(key.to_string(), json!(x - y));
            }
        }
        serde_json::Value::Object(d)
    };
    let secs = duration.as_secs_f64();
    let tck = clock_ticks();
    json!({
        "mode": "overhead",
        "pods": pods, "period_ms": period.as_millis() as u64, "duration_s": secs,
        "cmd": cmd, "cap": cap, "threads_note": "tokio workers = --threads",
        "calls_per_s": samples.len() as f64 / secs,
        "loadavg_1m": load,
        "sides": sides,
        "podprobe_minus_bare": diff(Side::Podprobe, Side::Bare),
        "podprobe_minus_bare_with_status": diff(Side::Podprobe, Side::BareWithStatus),
        "podprobe_no_identity_minus_bare": diff(Side::PodprobeNoIdentity, Side::Bare),
        "bench_cpu_cores": (cpu1 - cpu0) / secs,
        "containerd_cpu_cores": (rt1.containerd - rt0.containerd) as f64 / tck / secs,
        "shims_cpu_cores": (rt1.shims - rt0.shims) as f64 / tck / secs,
        "shims": rt1.shim_count,
        "failures_first": failures.iter().take(5).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------- fake runtime

/// A runtime that answers `ExecSync` at once (exit 0, `output` on stdout)
/// and `ContainerStatus` with the bench container's labels.
struct FakeRuntime {
    output: Vec<u8>,
    labels: HashMap<String, String>,
}

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn exec_sync(
        &self,
        _: Request<v1::ExecSyncRequest>,
    ) -> Result<Response<v1::ExecSyncResponse>, Status> {
        Ok(Response::new(v1::ExecSyncResponse {
            stdout: self.output.clone(),
            stderr: Vec::new(),
            exit_code: 0,
        }))
    }
    async fn container_status(
        &self,
        request: Request<v1::ContainerStatusRequest>,
    ) -> Result<Response<v1::ContainerStatusResponse>, Status> {
        Ok(Response::new(v1::ContainerStatusResponse {
            status: Some(v1::ContainerStatus {
                id: request.into_inner().container_id,
                labels: self.labels.clone(),
                ..Default::default()
            }),
            info: HashMap::new(),
        }))
    }
    async fn version(
        &self,
        _: Request<v1::VersionRequest>,
    ) -> Result<Response<v1::VersionResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn run_pod_sandbox(
        &self,
        _: Request<v1::RunPodSandboxRequest>,
    ) -> Result<Response<v1::RunPodSandboxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn stop_pod_sandbox(
        &self,
        _: Request<v1::StopPodSandboxRequest>,
    ) -> Result<Response<v1::StopPodSandboxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn remove_pod_sandbox(
        &self,
        _: Request<v1::RemovePodSandboxRequest>,
    ) -> Result<Response<v1::RemovePodSandboxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn pod_sandbox_status(
        &self,
        _: Request<v1::PodSandboxStatusRequest>,
    ) -> Result<Response<v1::PodSandboxStatusResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_pod_sandbox(
        &self,
        _: Request<v1::ListPodSandboxRequest>,
    ) -> Result<Response<v1::ListPodSandboxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn create_container(
        &self,
        _: Request<v1::CreateContainerRequest>,
    ) -> Result<Response<v1::CreateContainerResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn start_container(
        &self,
        _: Request<v1::StartContainerRequest>,
    ) -> Result<Response<v1::StartContainerResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn stop_container(
        &self,
        _: Request<v1::StopContainerRequest>,
    ) -> Result<Response<v1::StopContainerResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn remove_container(
        &self,
        _: Request<v1::RemoveContainerRequest>,
    ) -> Result<Response<v1::RemoveContainerResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_containers(
        &self,
        _: Request<v1::ListContainersRequest>,
    ) -> Result<Response<v1::ListContainersResponse>, Status> {
        Err(Status::unimplemented(""))
    }
}

async fn fake(calls: usize, rounds: usize, output_bytes: usize, cap: usize) -> serde_json::Value {
    let container = BenchContainer {
        id: "f".repeat(64),
        pod_uid: "0".repeat(32),
    };
    let labels = HashMap::from([
        (POD_UID_LABEL.to_string(), container.pod_uid.clone()),
        (CONTAINER_NAME_LABEL.to_string(), CONTAINER_NAME.to_string()),
    ]);
    let socket = std::env::temp_dir().join(format!("exec-bench-fake-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind fake socket");
    listener.set_nonblocking(true).expect("nonblocking");
    let service = FakeRuntime {
        output: vec![b'x'; output_bytes],
        labels,
    };
    // The runtime on a thread (and tokio runtime) of its own, as containerd
    // is a process of its own.
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("server runtime")
            .block_on(async move {
                let listener = UnixListener::from_std(listener).expect("tokio listener");
                Server::builder()
                    .add_service(RuntimeServiceServer::new(service))
                    .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                    .await
                    .expect("fake runtime serves");
            });
    });
    let endpoint = format!("unix://{}", socket.display());
    let metrics = MetricSet::new(WatchActivity::new());
    let callers = Callers::new(
        &endpoint,
        words("true"),
        1,
        podprobe_prober(&endpoint, cap, &metrics),
    )
    .await;
    for side in SIDES {
        for _ in 0..100 {
            callers.call(side, &container).await.expect("warm-up call");
        }
    }
    let mut lat: HashMap<Side, Vec<f64>> = HashMap::new();
    let mut cpu: HashMap<Side, f64> = HashMap::new();
    let load = load_avg();
    for _ in 0..rounds {
        for side in SIDES {
            let cpu0 = self_cpu();
            for _ in 0..calls {
                let began = Instant::now();
                callers.call(side, &container).await.expect("fake call");
                lat.entry(side)
                    .or_default()
                    .push(began.elapsed().as_secs_f64() * 1e6);
            }
            *cpu.entry(side).or_default() += self_cpu() - cpu0;
        }
    }
    let _ = std::fs::remove_file(&socket);
    let n = (calls * rounds) as f64;
    let mut sides = serde_json::Map::new();
    for side in SIDES {
        let mut s = summary(lat.get_mut(&side).expect("ran"));
        // Client and fake server together: the server's share is the same
        // for every side (one ExecSync, plus one ContainerStatus for
        // `podprobe`).
        s["cpu_us_per_call"] = json!(cpu[&side] / n * 1e6);
        sides.insert(side.name().to_string(), s);
    }
    json!({
        "mode": "fake", "calls_per_side": n, "rounds": rounds, "output_bytes": output_bytes,
        "cap": cap, "loadavg_1m": load, "sides": sides,
    })
}

// ---------------------------------------------------------------- cap

async fn cap_run(
    endpoint: &str,
    pods: usize,
    cap: usize,
    period: Duration,
    rounds: usize,
    timeout_s: i32,
    cmd: Vec<String>,
) -> serde_json::Value {
    let cri = CriClient::new(endpoint).expect("endpoint");
    let containers = containers_for(&cri, pods).await;
    let metrics = MetricSet::new(WatchActivity::new());
    let callers = Arc::new(
        Callers::new(
            endpoint,
            cmd.clone(),
            timeout_s,
            podprobe_prober(endpoint, cap, &metrics),
        )
        .await,
    );
    callers
        .call(Side::Podprobe, &containers[0])
        .await
        .expect("warm-up call");
    let procs = RuntimeProcs::find(endpoint);
    let shims = procs.shims();
    let tck = clock_ticks();

    // Peak ExecSyncs in flight (podprobe_exec_in_flight, past the exec slot),
    // read every 2 ms.
    let in_flight_peak = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop, metrics) = (in_flight_peak.clone(), stop.clone(), metrics.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = metrics.served.encode();
                let now = text
                    .lines()
                    .find_map(|l| l.strip_prefix("podprobe_exec_in_flight "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0) as i64;
                peak.fetch_max(now, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // The runtime's CPU in 500 ms windows. A shim's children's CPU counts
    // when the shim reaps them, so short windows would show lumps.
    let windows: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let cpu_sampler = {
        let (stop, windows, shims) = (stop.clone(), windows.clone(), shims.clone());
        let procs = RuntimeProcs {
            containerd: procs.containerd,
            socket: procs.socket.clone(),
        };
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut last = procs.cpu(&shims);
            let mut last_t = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let now = procs.cpu(&shims);
                let dt = last_t.elapsed().as_secs_f64();
                let used = (now.containerd + now.shims - last.containerd - last.shims) as f64 / tck;
                windows
                    .lock()
                    .unwrap()
                    .push((t0.elapsed().as_secs_f64(), used / dt));
                (last, last_t) = (now, Instant::now());
            }
        })
    };

    let load = load_avg();
    let (cpu0, rt0) = (self_cpu(), procs.cpu(&shims));
    let began = Instant::now();
    let mut latencies = Vec::new();
    let mut drains = Vec::new();
    let mut round_peaks = Vec::new();
    let mut burst_cores = Vec::new();
    let mut retried = 0usize;
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let mut next = tokio::time::Instant::now() + Duration::from_millis(200);
    for _ in 0..rounds {
        tokio::time::sleep_until(next).await;
        next += period;
        in_flight_peak.store(0, std::sync::atomic::Ordering::Relaxed);
        let burst = Instant::now();
        let burst_cpu = procs.cpu(&shims);
        // Every container's probe due at this instant, as 100 workers
        // whose periods lined up.
        let tasks: Vec<_> = containers
            .iter()
            .cloned()
            .map(|c| {
                let callers = callers.clone();
                tokio::spawn(async move {
                    let t = Instant::now();
                    let verdict = callers.probe(true, &c).await;
                    (t.elapsed(), verdict)
                })
            })
            .collect();
        for task in tasks {
            let (took, verdict) = task.await.expect("probe task");
            latencies.push(took.as_secs_f64() * 1e6);
            retried += usize::from(verdict.attempts > 1);
            let outcome = if verdict.is_success() {
                "success".to_string()
            } else if let Some(e) = &verdict.error {
                if e.contains("exec slots") {
                    "error: exec slots busy".to_string()
                } else {
                    format!("error: {}", e.chars().take(80).collect::<String>())
                }
            } else if verdict.output.contains("timed out") {
                "failure: command timed out".to_string()
            } else {
                format!(
                    "failure: {}",
                    verdict.output.chars().take(80).collect::<String>()
                )
            };
            *outcomes.entry(outcome).or_default() += 1;
        }
        let drain = burst.elapsed().as_secs_f64();
        // Every exec's processes are reaped before its reply: the CPU of
        // the whole burst is in by now.
        let after = procs.cpu(&shims);
        let used = (after.containerd + after.shims - burst_cpu.containerd - burst_cpu.shims) as f64;
        burst_cores.push(used / tck / drain);
        drains.push(drain);
        round_peaks.push(in_flight_peak.load(std::sync::atomic::Ordering::Relaxed));
    }
    tokio::time::sleep_until(next).await;
    let wall = began.elapsed().as_secs_f64();
    let (cpu1, rt1) = (self_cpu(), procs.cpu(&shims));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().expect("sampler");
    cpu_sampler.join().expect("cpu sampler");
    let windows = windows.lock().unwrap().clone();
    let mut window_cores: Vec<f64> = windows.iter().map(|w| w.1).collect();
    window_cores.sort_by(f64::total_cmp);
    let runtime_cpu_s = ((rt1.containerd + rt1.shims) - (rt0.containerd + rt0.shims)) as f64 / tck;
    json!({
        "mode": "cap", "pods": pods, "cap": cap, "period_ms": period.as_millis() as u64,
        "rounds": rounds, "timeout_s": timeout_s, "cmd": cmd, "loadavg_1m": load,
        "probes": latencies.len(),
        "outcomes": outcomes,
        "latency": summary(&mut latencies),
        "burst_drain_s": drains,
        "peak_exec_in_flight_per_round": round_peaks,
        "runtime_cpu_s": runtime_cpu_s,
        "runtime_cpu_ms_per_probe": runtime_cpu_s * 1e3 / (pods * rounds) as f64,
        "containerd_cpu_s": (rt1.containerd - rt0.containerd) as f64 / tck,
        "shims_cpu_s": (rt1.shims - rt0.shims) as f64 / tck,
        "shims": shims.len(),
        "runtime_cores_mean": runtime_cpu_s / wall,
        "runtime_cores_during_burst": burst_cores,
        "runtime_cores_500ms_peak": window_cores.last().copied().unwrap_or(0.0),
        "probes_retried": retried,
        "bench_cpu_s": cpu1 - cpu0,
        "wall_s": wall,
    })
}
