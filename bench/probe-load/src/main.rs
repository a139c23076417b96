//! The Rust side of podprobe's probe-handler benchmark (`bench/run.sh`).
//!
//! Runs N concurrent probers through `podprobe::probe::{http, tcp, grpc}`
//! against one of the loopback servers started by `kubelet-probes serve`, with
//! the same schedule as the Go harness in `../kubelet-probes`, and prints one
//! JSON line with the same fields.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use podprobe::probe::{grpc, http, tcp};
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::probe_spec::{HttpGetAction, Scheme};
use podprobe_core::spec::{Attempt, ProbeResult};
use rand::Rng;
use serde::Serialize;
use tokio::time::Instant;

const LOOPBACK: &str = "127.0.0.1";

/// One run of the workload.
#[derive(Parser, Debug, Clone)]
#[command(name = "probe-load", about, long_about = None)]
struct Config {
    /// Handler to drive.
    #[arg(long, value_enum)]
    kind: Kind,
    /// Concurrent probers.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// Probe period of each prober, in milliseconds.
    #[arg(long, default_value_t = 100)]
    period_ms: u64,
    /// Length of the run, in seconds.
    #[arg(long, default_value_t = 20)]
    duration_s: u64,
    /// Probe timeout (`timeoutSeconds`), in milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Port of the server for this kind on 127.0.0.1.
    #[arg(long)]
    port: u16,
    /// tokio worker threads; 0 = one per core (as Go's GOMAXPROCS). The
    /// daemon under the chart's CPU limit of 1 runs one.
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Http,
    Tcp,
    Grpc,
}

/// The JSON line printed per run; `../kubelet-probes` prints the same fields.
#[derive(Debug, Serialize)]
struct Report {
    #[serde(rename = "impl")]
    implementation: &'static str,
    kind: Kind,
    n: usize,
    period_ms: u64,
    duration_s: f64,
    probes: usize,
    failures: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_failure: Option<String>,
    probes_per_sec: f64,
    cpu_user_s: f64,
    cpu_sys_s: f64,
    cpu_s_per_1k: f64,
    max_rss_kib: i64,
    p50_us: u64,
    p99_us: u64,
    /// tokio worker threads (`--threads`; 0 = one per core).
    threads: usize,
}

/// What one prober saw.
#[derive(Debug, Default)]
struct Sample {
    latencies_us: Vec<u64>,
    failures: usize,
    first_failure: Option<String>,
}

/// CPU time and peak RSS of this process so far.
#[derive(Debug, Clone, Copy)]
struct Usage {
    user_s: f64,
    sys_s: f64,
    max_rss_kib: i64,
}

fn main() -> ExitCode {
    let cfg = Config::parse();
    if cfg.n == 0 || cfg.period_ms == 0 || cfg.duration_s == 0 || cfg.port == 0 {
        eprintln!("probe-load: --n, --period-ms, --duration-s and --port must be positive");
        return ExitCode::from(2);
    }
    // Multi-threaded with one worker per core by default, as Go runs with
    // GOMAXPROCS = nproc.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if cfg.threads > 0 {
        builder.worker_threads(cfg.threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("probe-load: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let before = usage();
    let start = Instant::now();
    let samples = runtime.block_on(run_probers(&cfg, start));
    let elapsed = start.elapsed();
    let after = usage();
    match serde_json::to_string(&summarize(&cfg, samples, elapsed, before, after)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("probe-load: cannot encode the report: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts `cfg.n` probers, each first waiting a random part of one period (as
/// a kubelet worker does) and then probing on a fixed schedule until the run
/// ends. A probe that overruns its tick skips the missed ticks.
async fn run_probers(cfg: &Config, start: Instant) -> Vec<Sample> {
    let period = Duration::from_millis(cfg.period_ms);
    let end = start + Duration::from_secs(cfg.duration_s);
    let per_prober = (cfg.duration_s * 1000 / cfg.period_ms) as usize + 1;
    let target = Arc::new(Target::new(cfg));
    let mut rng = rand::rng();
    let handles: Vec<_> = (0..cfg.n)
        .map(|_| {
            let first = start + period.mul_f64(rng.random::<f64>());
            let target = Arc::clone(&target);
            tokio::spawn(async move { prober(&target, first, period, end, per_prober).await })
        })
        .collect();
    let mut samples = Vec::with_capacity(cfg.n);
    for handle in handles {
        // A panicking prober is a bug in a handler: let it show.
        samples.push(handle.await.expect("prober task panicked"));
    }
    samples
}

async fn prober(
    target: &Target,
    first: Instant,
    period: Duration,
    end: Instant,
    capacity: usize,
) -> Sample {
    let mut sample = Sample {
        latencies_us: Vec::with_capacity(capacity),
        ..Sample::default()
    };
    let mut next = first;
    while next < end {
        tokio::time::sleep_until(next).await;
        let t0 = Instant::now();
        let attempt = target.probe().await;
        let t1 = Instant::now();
        sample.latencies_us.push((t1 - t0).as_micros() as u64);
        if let Some(failure) = failure(&attempt) {
            sample.failures += 1;
            sample.first_failure.get_or_insert(failure);
        }
        next += period;
        while next <= t1 {
            next += period;
        }
    }
    sample
}

/// What every prober of a run probes, built once as the kubelet builds its
/// probers once.
struct Target {
    kind: Kind,
    http_action: HttpGetAction,
    port: u16,
    timeout: Duration,
    user_agent: String,
    destinations: Destinations,
}

impl Target {
    fn new(cfg: &Config) -> Self {
        Target {
            kind: cfg.kind,
            http_action: HttpGetAction {
                scheme: Scheme::Http,
                host: None,
                port: cfg.port,
                path: "/healthz".to_string(),
                headers: Vec::new(),
                protocol: Default::default(),
                extensions: Default::default(),
            },
            port: cfg.port,
            timeout: Duration::from_millis(cfg.timeout_ms),
            user_agent: format!("kube-probe/{}", podprobe_core::KUBE_PROBE_VERSION),
            destinations: Destinations::default(),
        }
    }

    async fn probe(&self) -> Attempt {
        // The kubelet's probes have no destination policy; neither do these.
        let anywhere = &self.destinations;
        let (timeout, ua) = (self.timeout, &self.user_agent);
        match self.kind {
            Kind::Http => http::probe(&self.http_action, LOOPBACK, timeout, ua, anywhere).await,
            Kind::Tcp => tcp::probe(LOOPBACK, self.port, timeout, anywhere).await,
            Kind::Grpc => grpc::probe(LOOPBACK, self.port, "", timeout, ua, anywhere).await,
        }
    }
}

/// The text of a run that was not a success, `None` for a success.
fn failure(attempt: &Attempt) -> Option<String> {
    match attempt {
        Ok(outcome) if outcome.result == ProbeResult::Success => None,
        Ok(outcome) => Some(format!("{}: {}", outcome.result, outcome.output)),
        Err(e) => Some(format!("{}: {}", e.result, e.message)),
    }
}

fn summarize(
    cfg: &Config,
    samples: Vec<Sample>,
    elapsed: Duration,
    before: Usage,
    after: Usage,
) -> Report {
    let mut all = Vec::new();
    let mut failures = 0;
    let mut first_failure = None;
    for sample in samples {
        all.extend(sample.latencies_us);
        failures += sample.failures;
        first_failure = first_failure.or(sample.first_failure);
    }
    all.sort_unstable();
    let probes = all.len();
    let cpu_user_s = after.user_s - before.user_s;
    let cpu_sys_s = after.sys_s - before.sys_s;
    Report {
        implementation: "rust-podprobe",
        kind: cfg.kind,
        n: cfg.n,
        period_ms: cfg.period_ms,
        duration_s: elapsed.as_secs_f64(),
        probes,
        failures,
        first_failure,
        probes_per_sec: probes as f64 / elapsed.as_secs_f64(),
        cpu_user_s,
        cpu_sys_s,
        cpu_s_per_1k: if probes == 0 {
            0.0
        } else {
            (cpu_user_s + cpu_sys_s) / probes as f64 * 1000.0
        },
        max_rss_kib: after.max_rss_kib,
        p50_us: percentile(&all, 50),
        p99_us: percentile(&all, 99),
        threads: cfg.threads,
    }
}

/// Nearest-rank percentile of sorted values (0 when empty), as the Go side computes it.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn usage() -> Usage {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    // RUSAGE_SELF with a valid pointer cannot fail; zeroed counters would show if it did.
    debug_assert_eq!(rc, 0);
    // SAFETY: zero-initialised and, on success, filled by the kernel.
    let ru = unsafe { ru.assume_init() };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Usage {
        user_s: seconds(ru.ru_utime),
        sys_s: seconds(ru.ru_stime),
        max_rss_kib: ru.ru_maxrss, // KiB on Linux
    }
}
