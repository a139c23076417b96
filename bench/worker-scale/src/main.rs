//! Scale check of podprobe's prober core (issue 3): 10,000 workers made by
//! the real `ProberManager`, with a `StatusSource` reporting every container
//! running and an instant `ProbeRunner` that records when it is called.
//!
//! Modes, each printing one JSON line:
//! - `paused`: tokio's paused clock; simulates N virtual seconds and checks
//!   that every worker probed exactly once per period.
//! - `real`: the real clock on a multi-threaded runtime; scheduling lateness,
//!   probes/s, CPU, and memory (RSS and live heap) per worker.
//! - `substrate`: the same schedule with bare tokio tasks shaped like the
//!   kubelet's worker loop (ticker, stop and trigger channels, no prober
//!   state), the counterpart of the goroutine harness in `go/`.
//! - `cleanup`: the kubelet's `TestCleanupRepeated` (X2), timed.
//!
//! `real` can also probe for real (`--probe tcp|http`): every worker runs
//! podprobe's prober against a loopback server, on `--period-ms` periods
//! (`podprobe.periodMilliseconds`, #14), and the line adds the node's
//! socket picture over the run (TIME-WAIT sockets, conntrack entries).
//!
//! A measurement, not a test: CI does not run it (`run.sh` does).

use std::alloc::{GlobalAlloc, Layout};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use podprobe::probe::Prober;
use podprobe_core::prober::manager::{PodProbes, ProberManager};
use podprobe_core::prober::results::{ProbeCaches, ResultReceivers};
use podprobe_core::prober::worker::{
    Clock, NoopObserver, ProbeRunner, StatusSource, SystemClock, TokioClock,
};
use podprobe_core::spec::probe_spec::{Handler, HttpGetAction, Scheme, TcpSocketAction};
use podprobe_core::spec::{ProbeKind, ProbeResult, ProbeSpec, ProbeTarget, ProbeVerdict};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

// --- live heap ----------------------------------------------------------------

/// Live heap bytes, kept by [`Counting`].
static LIVE_HEAP: AtomicIsize = AtomicIsize::new(0);

/// Allocations (`alloc`, `alloc_zeroed`) and `realloc` calls so far, kept by
/// [`Counting`]: divided by the probes of a run, the prober's allocations
/// per probe, which the daemon's node-level CPU follows (#39 item 3).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static REALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The allocator under test with a count of live bytes, so that memory per
/// worker is read exactly and not only through RSS (which allocator caching
/// blurs): the system's (glibc) malloc, or with `--features mimalloc` /
/// `jemalloc` that one (#39 item 2's comparison).
struct Counting;

#[cfg(not(any(feature = "mimalloc", feature = "jemalloc")))]
const INNER: std::alloc::System = std::alloc::System;
#[cfg(feature = "mimalloc")]
const INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
const INNER: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator the counting wrapper forwards to, as the JSON line names it.
const ALLOCATOR_NAME: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else if cfg!(feature = "jemalloc") {
    "jemalloc"
} else {
    "glibc"
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn signed(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every call goes to `INNER` unchanged; only a counter is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { INNER.alloc(layout) };
        ALLOCATIONS.fetch_add(1, Relaxed);
        if !ptr.is_null() {
            LIVE_HEAP.fetch_add(signed(layout.size()), Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { INNER.alloc_zeroed(layout) };
        ALLOCATIONS.fetch_add(1, Relaxed);
        if !ptr.is_null() {
            LIVE_HEAP.fetch_add(signed(layout.size()), Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded; the caller guarantees `ptr` came from this allocator with `layout`.
        unsafe { INNER.dealloc(ptr, layout) };
        LIVE_HEAP.fetch_sub(signed(layout.size()), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded; the caller guarantees the realloc contract.
        let new = unsafe { INNER.realloc(ptr, layout, new_size) };
        REALLOCATIONS.fetch_add(1, Relaxed);
        if !new.is_null() {
            LIVE_HEAP.fetch_add(signed(new_size) - signed(layout.size()), Relaxed);
        }
        new
    }
}

// --- command line -------------------------------------------------------------

#[derive(Parser, Debug)]
#[command(name = "worker-scale", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// podprobe's workers on tokio's paused clock (current-thread runtime).
    Paused {
        #[command(flatten)]
        fleet: FleetArgs,
        /// Virtual seconds to simulate.
        #[arg(long, default_value_t = 60)]
        virtual_s: u64,
    },
    /// podprobe's workers on the real clock.
    Real {
        #[command(flatten)]
        fleet: FleetArgs,
        #[command(flatten)]
        clock: RealArgs,
    },
    /// Bare tokio tasks with the kubelet worker loop's shape (no podprobe).
    Substrate {
        #[command(flatten)]
        fleet: FleetArgs,
        #[command(flatten)]
        clock: RealArgs,
    },
    /// `TestCleanupRepeated` (X2): add pods, cleanup with an empty set 10 times.
    Cleanup {
        /// Pods per round, each one container with all three probes.
        #[arg(long, default_value_t = 100)]
        pods: usize,
        /// Rounds, each with a fresh manager.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// tokio worker threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

/// The pods: every container has a readiness and a liveness probe.
#[derive(Args, Debug, Clone, Copy)]
struct FleetArgs {
    #[arg(long, default_value_t = 2500)]
    pods: usize,
    /// Containers per pod.
    #[arg(long, default_value_t = 2)]
    containers: usize,
    /// `periodSeconds` of every probe.
    #[arg(long, default_value_t = 10)]
    period_s: u64,
    /// `podprobe.periodMilliseconds` of every probe (at least 100), which
    /// overrides --period-s.
    #[arg(long)]
    period_ms: Option<u64>,
    /// What a probe does: succeed at once without I/O, or probe
    /// 127.0.0.1:--port for real through podprobe's prober (`real` only).
    #[arg(long, value_enum, default_value = "instant")]
    probe: ProbeArg,
    /// Port of the loopback server for --probe tcp|http.
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProbeArg {
    Instant,
    Tcp,
    Http,
}

#[derive(Args, Debug, Clone, Copy)]
struct RealArgs {
    /// Seconds to run, from adding the workers; a multiple of the period.
    #[arg(long, default_value_t = 30)]
    duration_s: u64,
    /// tokio worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

impl FleetArgs {
    fn validate(&self) -> Result<(), String> {
        if self.pods == 0 || self.containers == 0 || self.period_s == 0 {
            return Err("--pods, --containers and --period-s must be positive".to_string());
        }
        if self.period_ms.is_some_and(|ms| ms < 100) {
            return Err("--period-ms must be at least 100, as podprobe.periodMilliseconds".into());
        }
        if self.probe != ProbeArg::Instant && self.port == 0 {
            return Err("--probe tcp|http needs --port".to_string());
        }
        Ok(())
    }

    fn period(&self) -> Duration {
        self.period_ms
            .map_or(Duration::from_secs(self.period_s), Duration::from_millis)
    }

    fn period_us(&self) -> u64 {
        u64::try_from(self.period().as_micros()).unwrap_or(u64::MAX)
    }

    /// Recorder slots per worker for a run of `seconds`: one probe per
    /// period, the first one and a few manual runs.
    fn capacity(&self, seconds: u64) -> usize {
        (seconds * 1_000_000 / self.period_us() + 3) as usize
    }
}

/// The probe kinds of the main runs.
const FLEET_KINDS: [ProbeKind; 2] = [ProbeKind::Readiness, ProbeKind::Liveness];

/// Per container, one recorder slot for each kind.
const SLOTS_PER_CONTAINER: usize = ProbeKind::ALL.len();

fn slot(container: usize, kind: ProbeKind) -> usize {
    let kind_index = ProbeKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
    container * SLOTS_PER_CONTAINER + kind_index
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let report = match cli.mode {
        Mode::Paused { fleet, virtual_s } => paused(fleet, virtual_s),
        Mode::Real { fleet, clock } => real(fleet, clock, Subject::Podprobe),
        Mode::Substrate { fleet, clock } => real(fleet, clock, Subject::Substrate),
        Mode::Cleanup {
            pods,
            rounds,
            threads,
        } => cleanup(pods, rounds, threads),
    };
    match report {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("worker-scale: {e}");
            ExitCode::FAILURE
        }
    }
}

// --- what the workers see -----------------------------------------------------

/// When each worker probed, in microseconds since `origin`, kept in memory
/// allocated and written before the workers start, so that recording adds
/// nothing to the memory measured.
struct Recorder {
    origin: Instant,
    capacity: usize,
    counts: Box<[AtomicU32]>,
    times: Box<[AtomicU32]>,
    overflow: AtomicU64,
    unrecognized: AtomicU64,
}

/// A time slot not written yet. Not zero, so that the allocation is touched.
const UNSET: u32 = u32::MAX;

impl Recorder {
    fn new(slots: usize, capacity: usize) -> Self {
        Recorder {
            origin: Instant::now(),
            capacity,
            counts: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            times: (0..slots * capacity)
                .map(|_| AtomicU32::new(UNSET))
                .collect(),
            overflow: AtomicU64::new(0),
            unrecognized: AtomicU64::new(0),
        }
    }

    fn elapsed_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn record(&self, slot: usize) {
        let micros = u32::try_from(self.elapsed_us()).unwrap_or(UNSET - 1);
        let Some(count) = self.counts.get(slot) else {
            self.unrecognized.fetch_add(1, Relaxed);
            return;
        };
        let index = count.fetch_add(1, Relaxed) as usize;
        if index < self.capacity {
            self.times[slot * self.capacity + index].store(micros, Relaxed);
        } else {
            self.overflow.fetch_add(1, Relaxed);
        }
    }

    /// The recorded times of one slot, in order.
    fn times(&self, slot: usize) -> Vec<u64> {
        let count = (self.counts[slot].load(Relaxed) as usize).min(self.capacity);
        let start = slot * self.capacity;
        self.times[start..start + count]
            .iter()
            .map(|t| t.load(Relaxed))
            .filter(|&t| t != UNSET)
            .map(u64::from)
            .collect()
    }
}

/// Records when it was called, then succeeds at once or, with a prober,
/// probes for real.
struct RecordingRunner {
    recorder: Arc<Recorder>,
    network: Option<Prober>,
    failures: Arc<Failures>,
}

/// Real probes that did not succeed.
#[derive(Default)]
struct Failures {
    count: AtomicU64,
    first: std::sync::OnceLock<String>,
}

impl ProbeRunner for RecordingRunner {
    fn probe(
        &self,
        kind: ProbeKind,
        spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> impl Future<Output = ProbeVerdict> + Send {
        match target.container_id.and_then(|id| id.parse::<usize>().ok()) {
            Some(container) => self.recorder.record(slot(container, kind)),
            None => {
                self.recorder.unrecognized.fetch_add(1, Relaxed);
            }
        }
        async move {
            let Some(prober) = &self.network else {
                return ProbeVerdict {
                    result: ProbeResult::Success,
                    output: String::new(),
                    error: None,
                    event: None,
                    attempts: 1,
                };
            };
            let verdict = prober.probe(kind, spec, target).await;
            if !verdict.is_success() {
                self.failures.count.fetch_add(1, Relaxed);
                let _ = self
                    .failures
                    .first
                    .set(format!("{:?}: {}", verdict.result, verdict.output));
            }
            verdict
        }
    }
}

/// The runner `args` asks for, recording into `recorder`.
fn recording_runner(args: &FleetArgs, recorder: Arc<Recorder>) -> RecordingRunner {
    let network = match args.probe {
        ProbeArg::Instant => None,
        ProbeArg::Tcp | ProbeArg::Http => {
            Some(Prober::new(podprobe_core::KUBE_PROBE_VERSION, None))
        }
    };
    RecordingRunner {
        recorder,
        network,
        failures: Arc::default(),
    }
}

/// The status manager's cache, as the kubelet's `GetPodStatus` serves it.
struct Statuses(HashMap<String, Arc<PodStatus>>);

impl StatusSource for Statuses {
    fn pod_status(&self, pod_uid: &str) -> Option<Arc<PodStatus>> {
        self.0.get(pod_uid).cloned()
    }
}

/// Pods, their probes (the same for every pod) and their statuses. Container
/// `c` of pod `p` has the runtime ID `p * containers + c`.
struct Fleet {
    /// The pod objects, as the watch cache holds them: workers share them.
    pods: Vec<Arc<Pod>>,
    probes: PodProbes,
    statuses: HashMap<String, Arc<PodStatus>>,
    slots: Vec<usize>,
}

fn build_fleet(args: &FleetArgs, kinds: &[ProbeKind], started_at: Timestamp) -> Fleet {
    let names: Vec<String> = (0..args.containers).map(|c| format!("c{c}")).collect();
    let mut probes = PodProbes::new();
    for name in &names {
        for &kind in kinds {
            probes.insert(name.clone(), kind, probe_spec(args));
        }
    }
    let mut pods = Vec::with_capacity(args.pods);
    let mut statuses = HashMap::with_capacity(args.pods);
    let mut slots = Vec::new();
    for p in 0..args.pods {
        let uid = format!("pod-{p}");
        let containers = names.iter().map(|name| Container {
            name: name.clone(),
            ..Container::default()
        });
        pods.push(Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(format!("scale-{p}")),
                namespace: Some("default".to_string()),
                uid: Some(uid.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: containers.collect(),
                ..PodSpec::default()
            }),
            status: None,
        }));
        let container_statuses = names.iter().enumerate().map(|(c, name)| {
            let id = p * args.containers + c;
            slots.extend(kinds.iter().map(|&kind| slot(id, kind)));
            running(name, id, started_at)
        });
        let status = PodStatus {
            phase: Some("Running".to_string()),
            pod_ip: Some(match args.probe {
                ProbeArg::Instant => {
                    format!("10.{}.{}.{}", (p >> 16) & 255, (p >> 8) & 255, p & 255)
                }
                ProbeArg::Tcp | ProbeArg::Http => LOOPBACK.to_string(),
            }),
            container_statuses: Some(container_statuses.collect()),
            ..PodStatus::default()
        };
        statuses.insert(uid, Arc::new(status));
    }
    Fleet {
        pods,
        probes,
        statuses,
        slots,
    }
}

/// Where real probes go: the servers of `kubelet-probes serve`.
const LOOPBACK: &str = "127.0.0.1";

fn probe_spec(args: &FleetArgs) -> ProbeSpec {
    let port = if args.port == 0 { 8080 } else { args.port };
    let handler = match args.probe {
        ProbeArg::Instant | ProbeArg::Tcp => {
            Handler::TcpSocket(TcpSocketAction { host: None, port })
        }
        ProbeArg::Http => Handler::HttpGet(HttpGetAction {
            scheme: Scheme::Http,
            host: None,
            port,
            path: "/healthz".to_string(),
            headers: Vec::new(),
            protocol: Default::default(),
            extensions: Default::default(),
        }),
    };
    ProbeSpec {
        handler,
        initial_delay_seconds: 0,
        timeout_seconds: 1,
        period_seconds: i32::try_from(args.period_s).unwrap_or(i32::MAX),
        period_milliseconds: args
            .period_ms
            .map(|ms| i32::try_from(ms).unwrap_or(i32::MAX)),
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
        network: Default::default(),
        markers: Vec::new(),
        workload: Default::default(),
    }
}

fn running(name: &str, id: usize, started_at: Timestamp) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        container_id: Some(format!("containerd://{id}")),
        image: "registry.k8s.io/pause:3.10".to_string(),
        ready: false,
        started: Some(true),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(started_at)),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// Consumes the caches' update channels as the status side does, so that
/// workers never wait for room in them (R6). Returns the number of updates.
fn drain_updates(receivers: ResultReceivers) -> Arc<AtomicU64> {
    let count = Arc::new(AtomicU64::new(0));
    for mut updates in [receivers.liveness, receivers.readiness, receivers.startup] {
        let count = count.clone();
        tokio::spawn(async move {
            while updates.recv().await.is_some() {
                count.fetch_add(1, Relaxed);
            }
        });
    }
    count
}

fn start_manager(
    fleet: &mut Fleet,
    runner: RecordingRunner,
    clock: Arc<dyn Clock>,
) -> (ProberManager<RecordingRunner, Statuses>, Arc<AtomicU64>) {
    let (caches, receivers) = ProbeCaches::new();
    let statuses = Statuses(std::mem::take(&mut fleet.statuses));
    let manager = ProberManager::new(runner, statuses, caches, clock, Arc::new(NoopObserver));
    let updates = drain_updates(receivers);
    for pod in &fleet.pods {
        manager.add_pod(pod, &fleet.probes);
    }
    (manager, updates)
}

/// Waits at most a minute until `done`: spinning (yielding to the runtime)
/// for the first 10 ms so that short waits are timed finely, then polling
/// every millisecond.
async fn wait_until(done: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    while !done() {
        let waited = started.elapsed();
        if waited >= Duration::from_secs(60) {
            return false;
        }
        if waited < Duration::from_millis(10) {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    true
}

// --- bare tasks (the substrate) -------------------------------------------------

/// A bare worker's stop and trigger ends, as the kubelet's `worker` holds them.
struct BareHandle {
    stop: mpsc::Sender<()>,
    _trigger: mpsc::Sender<()>,
}

/// The kubelet's worker loop with nothing in it: start jitter, a ticker, and a
/// select over stop, manual trigger and tick; the "probe" is one record.
fn spawn_bare(
    slot: usize,
    period: Duration,
    recorder: Arc<Recorder>,
    alive: Arc<AtomicUsize>,
) -> BareHandle {
    let (stop, mut stop_rx) = mpsc::channel(1);
    let (trigger, mut trigger_rx) = mpsc::channel(1);
    alive.fetch_add(1, Relaxed);
    tokio::spawn(async move {
        tokio::time::sleep(period.mul_f64(rand::random())).await;
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            recorder.record(slot);
            tokio::select! {
                biased;
                _ = stop_rx.recv() => break,
                Some(()) = trigger_rx.recv() => ticker.reset(),
                _ = ticker.tick() => {}
            }
        }
        alive.fetch_sub(1, Relaxed);
    });
    BareHandle {
        stop,
        _trigger: trigger,
    }
}

// --- measurements -------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Memory {
    rss_kib: u64,
    heap_bytes: i64,
}

fn memory() -> Memory {
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    Memory {
        rss_kib,
        heap_bytes: LIVE_HEAP.load(Relaxed) as i64,
    }
}

/// User and system CPU seconds of this process so far.
fn cpu() -> (f64, f64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    debug_assert_eq!(rc, 0);
    // SAFETY: zero-initialised and, on success, filled by the kernel.
    let ru = unsafe { ru.assume_init() };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (seconds(ru.ru_utime), seconds(ru.ru_stime))
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Memory growth per worker between two readings, in bytes.
fn per_worker(before: Memory, after: Memory, workers: usize) -> Value {
    let workers = workers.max(1) as f64;
    json!({
        "rss_bytes": (after.rss_kib as f64 - before.rss_kib as f64) * 1024.0 / workers,
        "heap_bytes": (after.heap_bytes - before.heap_bytes) as f64 / workers,
    })
}

/// Live heap bytes that `make` allocates and keeps.
fn heap_of<T>(make: impl FnOnce() -> T) -> (T, i64) {
    let before = LIVE_HEAP.load(Relaxed);
    let value = make();
    (value, (LIVE_HEAP.load(Relaxed) - before) as i64)
}

/// Where a worker's memory goes, in bytes: what one pod object takes (the
/// workers share the caller's, as the daemon's come from its watch cache,
/// so it is not in the per-worker figures) and what a copy of a container
/// would, with the inline sizes of the API types involved.
fn breakdown(fleet: &Fleet) -> Value {
    let Some(pod) = fleet.pods.first() else {
        return Value::Null;
    };
    let (snapshot, pod_heap) = heap_of(|| Arc::new((**pod).clone()));
    let container = pod.spec.as_ref().and_then(|s| s.containers.first());
    let (copy, container_heap) = heap_of(|| container.cloned());
    drop((snapshot, copy));
    json!({
        "pod_snapshot_heap": pod_heap,
        "container_copy_heap": container_heap,
        "size_of_container": std::mem::size_of::<Container>(),
        "size_of_pod": std::mem::size_of::<Pod>(),
        "size_of_pod_status": std::mem::size_of::<PodStatus>(),
        "size_of_probe_spec": std::mem::size_of::<ProbeSpec>(),
    })
}

/// The node's TCP sockets and connection tracking over `duration`, read
/// every 500 ms: the most TIME-WAIT and allocated TCP sockets
/// (`/proc/net/sockstat`) and conntrack entries at any reading, against
/// the ephemeral port range and the conntrack table's size.
async fn sample_sockets(duration: Duration) -> Value {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let number = |path: &str| read(path).trim().parse::<u64>().ok();
    let sockstat = || {
        let text = read("/proc/net/sockstat");
        let tcp = text
            .lines()
            .find(|l| l.starts_with("TCP:"))
            .unwrap_or_default()
            .to_string();
        let field = |name: &str| {
            let mut words = tcp.split_whitespace();
            words.find(|w| *w == name)?;
            words.next()?.parse::<u64>().ok()
        };
        (field("tw").unwrap_or(0), field("alloc").unwrap_or(0))
    };
    let conntrack_path = "/proc/sys/net/netfilter/nf_conntrack_count";
    let (mut tw_max, mut alloc_max, mut conntrack_max) = (0, 0, None::<u64>);
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let (tw, alloc) = sockstat();
        tw_max = tw_max.max(tw);
        alloc_max = alloc_max.max(alloc);
        if let Some(count) = number(conntrack_path) {
            conntrack_max = Some(conntrack_max.unwrap_or(0).max(count));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    json!({
        "time_wait_max": tw_max,
        "tcp_alloc_max": alloc_max,
        "conntrack_max": conntrack_max,
        "conntrack_limit": number("/proc/sys/net/netfilter/nf_conntrack_max"),
        "ephemeral_port_range": read("/proc/sys/net/ipv4/ip_local_port_range").split_whitespace().collect::<Vec<_>>().join("-"),
        "tcp_tw_reuse": number("/proc/sys/net/ipv4/tcp_tw_reuse"),
    })
}

fn memory_json(m: Memory) -> Value {
    json!({ "rss_kib": m.rss_kib, "heap_bytes": m.heap_bytes })
}

/// How closely recorded probe times follow each worker's schedule.
///
/// A worker's ticker is created just before its first probe, so the grid's
/// anchor is at or a little before that probe; since no tick fires early,
/// the anchor is estimated as the earliest of the first probe and every
/// later probe moved back by its nearest whole number of periods (robust to
/// a first probe delayed by preemption). Every later probe is due at the
/// first grid point after the previous probe (a late tick fires once, then
/// the grid resumes: W7, Go's ticker and tokio's `Skip` alike); lateness =
/// actual - due. In `[period/2, period/2 + m * period)` every on-schedule
/// worker probes exactly `m` times, whatever its phase: that window gives the
/// rate, half a period clear of the run's start and end.
fn schedule(series: &[Vec<u64>], period_us: u64, end_us: u64) -> Value {
    let mut lateness: Vec<i64> = Vec::new();
    let window_periods = (end_us.saturating_sub(period_us) / period_us).max(1);
    let window = period_us / 2..period_us / 2 + period_us * window_periods;
    let mut in_window = 0u64;
    let mut off_schedule = 0u64;
    let mut without_probe = 0u64;
    let mut probes = 0u64;
    for times in series {
        let Some(&first) = times.first() else {
            without_probe += 1;
            continue;
        };
        let anchor = times.iter().fold(first, |anchor, &t| {
            let periods = (t - first + period_us / 2) / period_us;
            anchor.min(t - periods * period_us)
        });
        probes += times.len() as u64;
        let mut previous = anchor;
        for &t in &times[1..] {
            let due = anchor + ((previous - anchor) / period_us + 1) * period_us;
            lateness.push(t as i64 - due as i64);
            previous = t;
        }
        let count = times.iter().filter(|t| window.contains(t)).count() as u64;
        in_window += count;
        if count != window_periods {
            off_schedule += 1;
        }
    }
    lateness.sort_unstable();
    let window_s = (window.end - window.start) as f64 / 1e6;
    let over = |ms: i64| lateness.iter().filter(|&&l| l > ms * 1000).count();
    json!({
        "probes": probes,
        "window_s": window_s,
        "probes_in_window": in_window,
        "expected_in_window": window_periods * series.len() as u64,
        "probes_per_s": in_window as f64 / window_s,
        "expected_per_s": series.len() as f64 * 1e6 / period_us as f64,
        "workers_off_schedule": off_schedule,
        "workers_without_probe": without_probe,
        "lateness_samples": lateness.len(),
        "lateness_p50_us": percentile(&lateness, 500),
        "lateness_p99_us": percentile(&lateness, 990),
        "lateness_p999_us": percentile(&lateness, 999),
        "lateness_max_us": lateness.last().copied().unwrap_or(0),
        "early": lateness.iter().filter(|&&l| l < 0).count(),
        "late_over_1ms": over(1),
        "late_over_10ms": over(10),
        "late_over_100ms": over(100),
    })
}

/// Nearest-rank percentile (per mille) of sorted values; 0 when empty.
fn percentile(sorted: &[i64], per_mille: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (per_mille * sorted.len()).div_ceil(1000).max(1);
    sorted[rank - 1]
}

fn recorded(recorder: &Recorder, slots: &[usize], end_us: u64) -> Vec<Vec<u64>> {
    slots
        .iter()
        .map(|&s| {
            let mut times = recorder.times(s);
            times.retain(|&t| t < end_us);
            times
        })
        .collect()
}

fn merge(mut line: Value, more: Value) -> Value {
    if let (Some(line), Value::Object(more)) = (line.as_object_mut(), more) {
        line.extend(more);
    }
    line
}

// --- modes ----------------------------------------------------------------------

/// Simulates `virtual_s` seconds on the paused clock.
fn paused(args: FleetArgs, virtual_s: u64) -> Result<Value, String> {
    args.validate()?;
    if args.probe != ProbeArg::Instant {
        return Err("--probe tcp|http needs the real clock (mode `real`)".to_string());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let wall_origin = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let mut fleet = build_fleet(&args, &FLEET_KINDS, wall_origin);
        let recorder = Arc::new(Recorder::new(
            args.pods * args.containers * SLOTS_PER_CONTAINER,
            args.capacity(virtual_s),
        ));
        let base = memory();
        let (cpu_user0, cpu_sys0) = cpu();
        let wall = std::time::Instant::now();
        let clock = Arc::new(TokioClock::new(wall_origin));
        let runner = recording_runner(&args, recorder.clone());
        let (manager, updates) = start_manager(&mut fleet, runner, clock);
        let add_wall = wall.elapsed();
        let after_add = memory();
        tokio::time::sleep(Duration::from_secs(virtual_s)).await;
        let simulated = wall.elapsed();
        let (cpu_user1, cpu_sys1) = cpu();
        let end = memory();
        let workers = manager.worker_count();
        let end_us = virtual_s * 1_000_000;
        let series = recorded(&recorder, &fleet.slots, end_us);
        let cpu_s = cpu_user1 - cpu_user0 + cpu_sys1 - cpu_sys0;
        let line = json!({
            "mode": "paused",
            "impl": "rust-podprobe",
            "workers": workers,
            "pods": args.pods,
            "containers": args.containers,
            "period_s": args.period_s,
            "period_ms": args.period().as_millis(),
            "virtual_s": virtual_s,
            "add_ms": add_wall.as_secs_f64() * 1e3,
            "wall_s": simulated.as_secs_f64(),
            "virtual_s_per_wall_s": virtual_s as f64 / simulated.as_secs_f64(),
            "cpu_user_s": cpu_user1 - cpu_user0,
            "cpu_sys_s": cpu_sys1 - cpu_sys0,
            "result_updates": updates.load(Relaxed),
            "overflow": recorder.overflow.load(Relaxed),
            "unrecognized": recorder.unrecognized.load(Relaxed),
            "memory_base": memory_json(base),
            "memory_after_add": memory_json(after_add),
            "memory_end": memory_json(end),
            "per_worker_after_add": per_worker(base, after_add, workers),
            "per_worker_end": per_worker(base, end, workers),
            "breakdown": breakdown(&fleet),
        });
        let line = merge(line, schedule(&series, args.period_us(), end_us));
        let probes = line["probes"].as_f64().unwrap_or(0.0);
        Ok(merge(
            line,
            json!({ "cpu_us_per_probe": cpu_s * 1e6 / probes.max(1.0) }),
        ))
    })
}

/// What runs the workers on the real clock.
#[derive(Debug, Clone, Copy)]
enum Subject {
    Podprobe,
    Substrate,
}

/// Workers started by a [`Subject`].
enum Running {
    Podprobe {
        manager: ProberManager<RecordingRunner, Statuses>,
        updates: Arc<AtomicU64>,
    },
    Substrate {
        handles: Vec<BareHandle>,
        alive: Arc<AtomicUsize>,
    },
}

impl Running {
    fn start(
        subject: Subject,
        fleet: &mut Fleet,
        period: Duration,
        runner: RecordingRunner,
    ) -> Self {
        let recorder = runner.recorder.clone();
        match subject {
            Subject::Podprobe => {
                let (manager, updates) = start_manager(fleet, runner, Arc::new(SystemClock));
                Running::Podprobe { manager, updates }
            }
            Subject::Substrate => {
                let alive = Arc::new(AtomicUsize::new(0));
                let handles = fleet
                    .slots
                    .iter()
                    .map(|&slot| spawn_bare(slot, period, recorder.clone(), alive.clone()))
                    .collect();
                Running::Substrate { handles, alive }
            }
        }
    }

    fn workers(&self) -> usize {
        match self {
            Running::Podprobe { manager, .. } => manager.worker_count(),
            Running::Substrate { alive, .. } => alive.load(Relaxed),
        }
    }

    /// Stops every worker and waits until all have ended; whether they did.
    async fn stop(&self) -> bool {
        match self {
            Running::Podprobe { manager, .. } => {
                manager.cleanup_pods(&HashSet::new());
                wait_until(|| manager.worker_count() == 0).await
            }
            Running::Substrate { handles, alive } => {
                for handle in handles {
                    let _ = handle.stop.try_send(());
                }
                wait_until(|| alive.load(Relaxed) == 0).await
            }
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Running::Podprobe { .. } => "rust-podprobe",
            Running::Substrate { .. } => "rust-tokio-tasks",
        }
    }

    fn result_updates(&self) -> Option<u64> {
        match self {
            Running::Podprobe { updates, .. } => Some(updates.load(Relaxed)),
            Running::Substrate { .. } => None,
        }
    }
}

/// Runs the workers for `clock.duration_s` on the real clock.
fn real(args: FleetArgs, clock: RealArgs, subject: Subject) -> Result<Value, String> {
    args.validate()?;
    let duration_us = clock.duration_s * 1_000_000;
    if !duration_us.is_multiple_of(args.period_us()) || duration_us <= args.period_us() {
        return Err("--duration-s must be a multiple of the period, above it".to_string());
    }
    // I/O too: `--probe tcp|http` opens real sockets.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(clock.threads)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    Ok(runtime.block_on(run_real(args, clock, subject)))
}

async fn run_real(args: FleetArgs, clock: RealArgs, subject: Subject) -> Value {
    let period = args.period();
    let duration = Duration::from_secs(clock.duration_s);
    let mut fleet = build_fleet(&args, &FLEET_KINDS, SystemClock.now());
    let recorder = Arc::new(Recorder::new(
        args.pods * args.containers * SLOTS_PER_CONTAINER,
        args.capacity(clock.duration_s),
    ));
    let runner = recording_runner(&args, recorder.clone());
    let failures = runner.failures.clone();
    let sockets = tokio::spawn(sample_sockets(duration));
    let tasks_base = alive_tasks();
    let base = memory();
    let (cpu_user0, cpu_sys0) = cpu();
    let allocations0 = (ALLOCATIONS.load(Relaxed), REALLOCATIONS.load(Relaxed));
    let origin = recorder.origin;
    let running = Running::start(subject, &mut fleet, period, runner);
    let add = origin.elapsed();
    let after_add = memory();
    let tasks_after_add = alive_tasks();
    // By then every worker has probed once and built its ticker.
    tokio::time::sleep_until(origin + period + Duration::from_secs(1)).await;
    let first_period = memory();
    tokio::time::sleep_until(origin + duration).await;
    let end_us = recorder.elapsed_us();
    let (cpu_user1, cpu_sys1) = cpu();
    let allocations1 = (ALLOCATIONS.load(Relaxed), REALLOCATIONS.load(Relaxed));
    let end = memory();
    let tasks_end = alive_tasks();
    let workers = running.workers();
    let stop_started = Instant::now();
    let stopped = running.stop().await;
    let stop = stop_started.elapsed();
    let series = recorded(&recorder, &fleet.slots, end_us);
    let cpu_s = cpu_user1 - cpu_user0 + cpu_sys1 - cpu_sys0;
    let wall_s = end_us as f64 / 1e6;
    let line = json!({
        "mode": "real",
        "impl": running.name(),
        "allocator": ALLOCATOR_NAME,
        "workers": workers,
        "pods": args.pods,
        "containers": args.containers,
        "period_s": args.period_s,
        "period_ms": args.period().as_millis(),
        "probe": format!("{:?}", args.probe).to_lowercase(),
        "probe_failures": failures.count.load(Relaxed),
        "first_probe_failure": failures.first.get(),
        "sockets": sockets.await.unwrap_or(Value::Null),
        "duration_s": wall_s,
        "threads": clock.threads,
        "add_ms": add.as_secs_f64() * 1e3,
        "stop_ms": stop.as_secs_f64() * 1e3,
        "all_stopped": stopped,
        "cpu_user_s": cpu_user1 - cpu_user0,
        "cpu_sys_s": cpu_sys1 - cpu_sys0,
        "cpu_cores": cpu_s / wall_s,
        "tasks_base": tasks_base,
        "tasks_after_add": tasks_after_add,
        "tasks_end": tasks_end,
        "result_updates": running.result_updates(),
        "overflow": recorder.overflow.load(Relaxed),
        "unrecognized": recorder.unrecognized.load(Relaxed),
        "memory_base": memory_json(base),
        "memory_after_add": memory_json(after_add),
        "memory_first_period": memory_json(first_period),
        "memory_end": memory_json(end),
        "per_worker_first_period": per_worker(base, first_period, workers),
        "per_worker_end": per_worker(base, end, workers),
    });
    let line = merge(line, schedule(&series, args.period_us(), end_us));
    let probes = line["probes"].as_f64().unwrap_or(0.0);
    merge(
        line,
        json!({
            "cpu_us_per_probe": cpu_s * 1e6 / probes.max(1.0),
            "allocations_per_probe": (allocations1.0 - allocations0.0) as f64 / probes.max(1.0),
            "reallocations_per_probe": (allocations1.1 - allocations0.1) as f64 / probes.max(1.0),
        }),
    )
}

/// `TestCleanupRepeated`: per round, a fresh manager gets `pods` pods of one
/// container with startup, readiness and liveness probes (`periodSeconds`
/// 1, as the kubelet test's `defaultProbe`); then `cleanup_pods` with an
/// empty set runs 10 times; then we wait for every worker to end. Done twice
/// per round: right after adding (as the kubelet test does; workers still in
/// their start jitter only see the stop after it, W5) and once every worker
/// is past its first probe (the stop latency proper).
fn cleanup(pods: usize, rounds: usize, threads: usize) -> Result<Value, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let args = FleetArgs {
            pods,
            containers: 1,
            period_s: 1,
            period_ms: None,
            probe: ProbeArg::Instant,
            port: 0,
        };
        let settle = Duration::from_millis(1100);
        let mut rows: [Vec<[i64; 3]>; 2] = [Vec::new(), Vec::new()];
        let mut workers = 0;
        for _ in 0..rounds.max(1) {
            for (row, wait) in rows.iter_mut().zip([None, Some(settle)]) {
                let (count, timings) = cleanup_round(&args, wait).await?;
                workers = count;
                row.push(timings);
            }
        }
        let summary = |row: &[[i64; 3]], i: usize| {
            let mut values: Vec<i64> = row.iter().map(|t| t[i]).collect();
            values.sort_unstable();
            json!({ "p50": percentile(&values, 500), "max": values.last().copied().unwrap_or(0) })
        };
        let phase = |row: &[[i64; 3]]| {
            json!({
                "add_us": summary(row, 0),
                "cleanup_x10_us": summary(row, 1),
                "all_exited_us": summary(row, 2),
            })
        };
        Ok(json!({
            "mode": "cleanup-repeated",
            "impl": "rust-podprobe",
            "pods": pods,
            "workers": workers,
            "period_s": args.period_s,
            "rounds": rounds,
            "threads": threads,
            "immediate": phase(&rows[0]),
            "after_first_probe": phase(&rows[1]),
        }))
    })
}

/// One round of [`cleanup`]: worker count and the microseconds to add the
/// pods, to call `cleanup_pods` 10 times, and until every worker ended.
async fn cleanup_round(
    args: &FleetArgs,
    wait: Option<Duration>,
) -> Result<(usize, [i64; 3]), String> {
    let mut fleet = build_fleet(args, &ProbeKind::ALL, SystemClock.now());
    let recorder = Arc::new(Recorder::new(args.pods * SLOTS_PER_CONTAINER, 4));
    let started = Instant::now();
    let runner = recording_runner(args, recorder);
    let (manager, _) = start_manager(&mut fleet, runner, Arc::new(SystemClock));
    let add = micros(started.elapsed());
    let workers = manager.worker_count();
    if let Some(wait) = wait {
        tokio::time::sleep(wait).await;
    }
    let started = Instant::now();
    for _ in 0..10 {
        manager.cleanup_pods(&HashSet::new());
    }
    let cleanup = micros(started.elapsed());
    let started = Instant::now();
    if !wait_until(|| manager.worker_count() == 0).await {
        return Err("workers did not end within a minute of cleanup".to_string());
    }
    Ok((workers, [add, cleanup, micros(started.elapsed())]))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
