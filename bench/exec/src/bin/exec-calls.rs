//! podprobe's side of `bench/exec/calls.sh` (#27, item 4): exec probes
//! through podprobe's own prober and CRI client, set up as the daemon sets
//! them up (`Prober::probe` with the container's identity, a `CriClient`
//! with the default exec slots), each container probed once per period,
//! spread evenly over the period; the counterpart of `kubelet-exec/`, which
//! drives the kubelet's CRI client the same way. A measurement, not a test.
//!
//!   exec-calls list --endpoint E --pods N   prints "<container id> <pod uid>" per bench container
//!   exec-calls probe --endpoint E --ids FILE --period-ms 1000 --duration-s 60 --cmd "test -f /www/exec-ok"
//!
//! `probe` prints one JSON line (calls, errors, latency p50/p99).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use podprobe::daemon::metric_set::MetricSet;
use podprobe::probe::Prober;
use podprobe::runtime::cri::{
    CONTAINER_NAME_LABEL, ContainerFilter, ContainerState, ContainerStateValue, CriClient,
    POD_UID_LABEL,
};
use podprobe_core::spec::probe_spec::ExecAction;
use podprobe_core::spec::probe_spec::extension::Network;
use podprobe_core::spec::{Handler, ProbeKind, ProbeSpec, ProbeTarget};
use podprobe_core::util::pod::ContainerIdentity;
use podprobe_core::util::watch_activity::WatchActivity;
use serde_json::json;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let endpoint = arg(
        &args,
        "--endpoint",
        "unix:///tmp/podprobe-cri/containerd.sock",
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match args.get(1).map(String::as_str) {
        Some("list") => {
            let pods: usize = arg(&args, "--pods", "20").parse().expect("--pods");
            runtime.block_on(list(&endpoint, pods));
        }
        Some("probe") => {
            let ids = std::fs::read_to_string(arg(&args, "--ids", "ids.txt")).expect("--ids");
            let containers: Vec<(String, String)> = ids
                .lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    Some((w.next()?.to_string(), w.next().unwrap_or("").to_string()))
                })
                .collect();
            let period =
                Duration::from_millis(arg(&args, "--period-ms", "1000").parse().expect("ms"));
            let duration =
                Duration::from_secs(arg(&args, "--duration-s", "60").parse().expect("s"));
            let timeout_s: i32 = arg(&args, "--timeout-s", "1").parse().expect("timeout");
            let cmd: Vec<String> = arg(&args, "--cmd", "test -f /www/exec-ok")
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let line = runtime.block_on(probe(
                &endpoint, containers, period, duration, timeout_s, cmd,
            ));
            println!("{line}");
        }
        _ => {
            eprintln!("usage: exec-calls list|probe [--endpoint E] ...");
            std::process::exit(2);
        }
    }
}

async fn list(endpoint: &str, pods: usize) {
    let cri = CriClient::new(endpoint).expect("endpoint");
    let filter = ContainerFilter {
        state: Some(ContainerStateValue {
            state: ContainerState::ContainerRunning.into(),
        }),
        label_selector: [("podprobe.io/bench".to_string(), "exec".to_string())].into(),
        ..Default::default()
    };
    let mut containers = cri.list_containers(filter).await.expect("ListContainers");
    containers.sort_by(|a, b| a.id.cmp(&b.id));
    for c in containers.iter().take(pods) {
        let uid = c.labels.get(POD_UID_LABEL).cloned().unwrap_or_default();
        let name = c
            .labels
            .get(CONTAINER_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        assert_eq!(name, "app", "bench container {} is named {name:?}", c.id);
        println!("{} {uid}", c.id);
    }
}

async fn probe(
    endpoint: &str,
    containers: Vec<(String, String)>,
    period: Duration,
    duration: Duration,
    timeout_s: i32,
    cmd: Vec<String>,
) -> serde_json::Value {
    // As `daemon::run` and bench/exec's `podprobe_prober` build them.
    let metrics = MetricSet::new(WatchActivity::new());
    let cri = CriClient::new(endpoint)
        .expect("endpoint")
        .count_exec_in_flight(metrics.exec_in_flight.clone())
        .limit_concurrent_execs(
            podprobe::daemon::flags::DEFAULT_MAX_CONCURRENT_EXECS as usize,
            podprobe::daemon::flags::DEFAULT_MAX_CONCURRENT_EXECS_PER_POD as usize,
            Duration::from_secs(podprobe::daemon::flags::DEFAULT_MAX_EXEC_TIMEOUT_SECONDS.into()),
        );
    let prober = Arc::new(Prober::new("1.35", Some(cri)));
    let spec = Arc::new(ProbeSpec {
        handler: Handler::Exec(ExecAction {
            command: cmd.clone(),
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
    });
    #[derive(Default)]
    struct Tally {
        lat: Vec<f64>,
        success: usize,
        failure: usize,
        errors: usize,
        retried: usize,
        first_errors: Vec<String>,
    }
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let n = containers.len();
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let end = start + duration;
    let mut tasks = Vec::new();
    for (i, (id, uid)) in containers.into_iter().enumerate() {
        let (prober, spec, tally) = (prober.clone(), spec.clone(), tally.clone());
        let first = start + period.mul_f64(i as f64 / n as f64);
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(first, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                if ticks.tick().await >= end {
                    return;
                }
                let target = ProbeTarget {
                    pod_ip: "",
                    container_id: Some(&id),
                    identity: Some(ContainerIdentity {
                        pod_uid: &uid,
                        container_name: "app",
                    }),
                    namespace: Some("podprobe-bench"),
                };
                let t = Instant::now();
                let verdict = prober.probe(ProbeKind::Readiness, &spec, target).await;
                let us = t.elapsed().as_secs_f64() * 1e6;
                let mut tally = tally.lock().unwrap();
                tally.lat.push(us);
                tally.retried += usize::from(verdict.attempts > 1);
                if verdict.is_success() {
                    tally.success += 1;
                } else if let Some(e) = &verdict.error {
                    tally.errors += 1;
                    if tally.first_errors.len() < 5 {
                        tally.first_errors.push(e.clone());
                    }
                } else {
                    tally.failure += 1;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("probe task");
    }
    let mut tally = tally.lock().unwrap();
    let lat = &mut tally.lat;
    lat.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((p / 100.0) * lat.len() as f64).ceil() as usize;
        lat[i.clamp(1, lat.len()) - 1]
    };
    let (p50, p99, calls) = (rank(50.0), rank(99.0), lat.len());
    json!({
        "side": "podprobe", "containers": n, "period_ms": period.as_millis() as u64,
        "duration_s": duration.as_secs_f64(), "cmd": cmd, "timeout_s": timeout_s,
        "calls": calls, "success": tally.success, "exit_nonzero": tally.failure,
        "errors": tally.errors, "retried": tally.retried,
        "latency": {"p50_us": p50, "p99_us": p99},
        "errors_first": tally.first_errors,
    })
}
