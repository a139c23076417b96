//! Exec probes and the CRI client against a real containerd (see
//! `hack/containerd.sh`; `PODPROBE_CRI_ENDPOINT` picks another runtime).
//! Every test runs its own pod sandbox, so they run in any order and in
//! parallel.

#[path = "support/cri.rs"]
mod cri_support;

use std::time::{Duration, Instant};

use cri_support::{CONTAINER_NAME, TestPod, client, containerd_sh, containerd_up, strings};
use podprobe::probe::{Prober, exec};
use podprobe::runtime::cri::{ContainerFilter, ContainerState, CriClient, CriError};
use podprobe_core::spec::probe_spec::ExecAction;
use podprobe_core::spec::{
    Handler, MAX_OUTPUT_BYTES, Outcome, ProbeKind, ProbeResult, ProbeSpec, ProbeTarget,
};
use podprobe_core::util::pod::ContainerIdentity;

/// The pod UID exec slots are shared by, for tests of one pod.
const POD: &str = "pod-uid";
const ONE_SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn e5_exit_zero_is_success_with_output() {
    let cri = client();
    let pod = TestPod::start(&cri, "e5-exit-zero").await;
    let attempt = exec::probe(
        &cri,
        POD,
        &pod.kubernetes_container_id(),
        &strings(&["echo", "ok"]),
        ONE_SECOND,
    )
    .await;
    assert_eq!(attempt, Ok(Outcome::new(ProbeResult::Success, "ok\n")));
}

#[tokio::test]
async fn e4_e5_non_zero_exit_is_failure_with_stdout_then_stderr() {
    let cri = client();
    let pod = TestPod::start(&cri, "e5-non-zero").await;
    // stderr is written first: the output still puts stdout first.
    let cmd = strings(&["sh", "-c", "echo to-stderr >&2; echo to-stdout; exit 3"]);
    let attempt = exec::probe(&cri, POD, &pod.container_id, &cmd, ONE_SECOND).await;
    assert_eq!(
        attempt,
        Ok(Outcome::new(ProbeResult::Failure, "to-stdout\nto-stderr\n"))
    );
}

#[tokio::test]
async fn e4_output_is_capped_at_10240_bytes() {
    let cri = client();
    let pod = TestPod::start(&cri, "e4-output-cap").await;
    let cmd = strings(&["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x"]);
    // The runtime returns all of it; the cap is the prober's job.
    let whole = cri
        .exec_sync(POD, &pod.container_id, &cmd, ONE_SECOND)
        .await
        .unwrap();
    assert_eq!(whole.stdout.len(), 100_000);
    let outcome = exec::probe(&cri, POD, &pod.container_id, &cmd, ONE_SECOND)
        .await
        .unwrap();
    assert_eq!(outcome.result, ProbeResult::Success);
    assert_eq!(outcome.output.len(), MAX_OUTPUT_BYTES);
    assert_eq!(outcome.output, "x".repeat(10_240));
}

#[tokio::test]
async fn e5_runtime_timeout_is_failure_with_command_timed_out() {
    let cri = client();
    let pod = TestPod::start(&cri, "e5-timeout").await;
    let started = Instant::now();
    let attempt = exec::probe(
        &cri,
        POD,
        &pod.container_id,
        &strings(&["sleep", "5"]),
        ONE_SECOND,
    )
    .await;
    assert_eq!(
        attempt,
        Ok(Outcome::new(
            ProbeResult::Failure,
            r#"command timed out: "sleep 5" timed out after 1s"#
        ))
    );
    // The runtime enforced the timeout, not the 2 min call deadline.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn e5_exec_in_missing_container_errors_and_is_retried() {
    let prober = Prober::new("1.35", Some(client()));
    let spec = ProbeSpec {
        handler: Handler::Exec(ExecAction {
            command: strings(&["true"]),
        }),
        initial_delay_seconds: 0,
        timeout_seconds: 1,
        period_seconds: 10,
        period_milliseconds: None,
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
        network: Default::default(),
        markers: Vec::new(),
        workload: Default::default(),
    };
    let missing = format!("containerd://{:064x}", rand::random::<u128>());
    let target = ProbeTarget {
        pod_ip: "",
        container_id: Some(&missing),
        identity: None,
        namespace: None,
    };
    let verdict = prober.probe(ProbeKind::Liveness, &spec, target).await;
    assert_eq!(verdict.attempts, 3);
    assert_eq!(verdict.result, ProbeResult::Unknown);
    assert!(!verdict.is_success());
    let error = verdict
        .error
        .expect("an exec into a missing container is an error");
    assert!(
        error.starts_with("rpc error: code = NotFound desc = "),
        "{error}"
    );
    let event = verdict.event.expect("errored runs record an event");
    assert_eq!(
        event.message,
        format!("Liveness probe errored and resulted in unknown state: {error}")
    );
}

#[tokio::test]
async fn stop_container_with_grace_period_stops_it() {
    let cri = client();
    let pod = TestPod::start(&cri, "stop-container").await;
    cri.stop_container(&pod.kubernetes_container_id(), 30)
        .await
        .unwrap();
    let status = cri.container_status(&pod.container_id).await.unwrap();
    assert_eq!(
        status.state(),
        ContainerState::ContainerExited,
        "{status:?}"
    );
    // Exit code 0 is the trap on SIGTERM: it stopped gracefully, not by SIGKILL.
    assert_eq!(status.exit_code, 0, "{status:?}");
    // Stopping a stopped container succeeds.
    cri.stop_container(&pod.container_id, 30).await.unwrap();
}

#[tokio::test]
async fn list_containers_finds_the_pod_container() {
    let cri = client();
    let pod = TestPod::start(&cri, "list-containers").await;
    let filter = ContainerFilter {
        pod_sandbox_id: pod.sandbox_id.clone(),
        ..Default::default()
    };
    let containers = cri.list_containers(filter).await.unwrap();
    let ids: Vec<&str> = containers.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [pod.container_id.as_str()]);
    assert_eq!(containers[0].state(), ContainerState::ContainerRunning);
}

#[tokio::test]
async fn version_names_the_runtime_and_cri_v1() {
    let version = client().version().await.unwrap();
    assert!(!version.runtime_name.is_empty(), "{version:?}");
    assert!(!version.runtime_version.is_empty(), "{version:?}");
    assert_eq!(version.runtime_api_version, "v1", "{version:?}");
}

#[tokio::test]
async fn missing_socket_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/missing.sock", dir.path().display());
    let err = CriClient::new(&endpoint)
        .unwrap()
        .version()
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot reach the container runtime at {endpoint}: no such file or directory \
             (is the container runtime running?)"
        )
    );
}

#[tokio::test]
async fn a_grpc_server_without_cri_is_not_a_cri_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("health-only.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let incoming = futures::stream::unfold(listener, |listener| async move {
        Some((listener.accept().await.map(|(stream, _)| stream), listener))
    });
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server =
        tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(health, incoming));
    let endpoint = format!("unix://{}", socket.display());
    let err = CriClient::new(&endpoint)
        .unwrap()
        .version()
        .await
        .unwrap_err();
    assert!(matches!(err, CriError::NotCriRuntime { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "{endpoint} is not a CRI v1 runtime: rpc error: code = Unimplemented"
        )),
        "{err}"
    );
    server.abort();
}

/// Restarts a containerd of its own (its own directory, bridge and subnet),
/// so the other tests' runtime is never interrupted.
#[tokio::test]
async fn client_reconnects_after_runtime_restart() {
    let env = [
        ("PODPROBE_CRI_DIR", "/tmp/podprobe-cri-restart"),
        ("PODPROBE_CRI_BRIDGE", "podprobe1"),
        ("PODPROBE_CRI_SUBNET", "10.88.79.0/24"),
    ];
    let _down = Down(&env);
    let endpoint = containerd_up(&env);
    let cri = CriClient::new(&endpoint).unwrap();
    let pod = TestPod::start(&cri, "reconnect").await;
    let echo = strings(&["echo", "before"]);
    assert_eq!(
        cri.exec_sync(POD, &pod.container_id, &echo, ONE_SECOND)
            .await
            .unwrap()
            .stdout,
        b"before\n"
    );

    // Off the runtime's thread, so the client sees the connection close
    // while containerd is down, as it would in a long-running process.
    tokio::task::spawn_blocking(move || containerd_sh("restart", &env))
        .await
        .unwrap();

    // The same client, and the container survived the restart.
    let echo = strings(&["echo", "after"]);
    let response = cri
        .exec_sync(POD, &pod.container_id, &echo, ONE_SECOND)
        .await
        .unwrap();
    assert_eq!(response.stdout, b"after\n");
    drop(pod);
}

/// Tears a private containerd down when the test ends, however it ends.
struct Down<'a>(&'a [(&'a str, &'a str)]);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        // No panic here: this may run while the test is already unwinding.
        let status = std::process::Command::new("bash")
            .arg(cri_support::containerd_script())
            .arg("down")
            .envs(self.0.iter().copied())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("hack/containerd.sh down failed: {status:?}");
        }
    }
}

/// `podprobe_exec_in_flight` counts an ExecSync call while it runs, and
/// drops back when it returns.
#[tokio::test]
async fn exec_in_flight_gauge_counts_running_execs() {
    let parts = podprobe::daemon::metric_set::MetricSet::new(
        podprobe_core::util::watch_activity::WatchActivity::new(),
    );
    let metrics = &parts.served;
    let cri = client().count_exec_in_flight(parts.exec_in_flight.clone());
    let pod = TestPod::start(&cri, "exec-gauge").await;
    let gauge_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("podprobe_exec_in_flight "))
            .map(str::to_string)
    };
    let running = {
        let cri = cri.clone();
        let id = pod.container_id.clone();
        tokio::spawn(async move {
            exec::probe(
                &cri,
                POD,
                &id,
                &strings(&["sleep", "2"]),
                Duration::from_secs(10),
            )
            .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while gauge_line(&metrics.encode()).as_deref() != Some("podprobe_exec_in_flight 1") {
        assert!(Instant::now() < deadline, "{}", metrics.encode());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let attempt = running.await.expect("exec task");
    assert_eq!(attempt.map(|o| o.result), Ok(ProbeResult::Success));
    assert_eq!(
        gauge_line(&metrics.encode()).as_deref(),
        Some("podprobe_exec_in_flight 0")
    );
}

fn exec_spec(command: &[&str], timeout_seconds: i32) -> ProbeSpec {
    ProbeSpec {
        handler: Handler::Exec(ExecAction {
            command: strings(command),
        }),
        initial_delay_seconds: 0,
        timeout_seconds,
        period_seconds: 10,
        period_milliseconds: None,
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
        network: Default::default(),
        markers: Vec::new(),
        workload: Default::default(),
    }
}

#[tokio::test]
async fn exec_runs_only_in_the_container_the_runtime_labels_as_the_pods() {
    let cri = client();
    let (victim, attacker) = tokio::join!(
        TestPod::start(&cri, "identity-victim"),
        TestPod::start(&cri, "identity-attacker")
    );
    let prober = Prober::new("1.35", Some(cri.clone()));
    // The attacker's status points at the victim's container.
    let victim_id = victim.kubernetes_container_id();
    let forged = ProbeTarget {
        pod_ip: "",
        container_id: Some(&victim_id),
        identity: Some(ContainerIdentity {
            pod_uid: &attacker.pod_uid,
            container_name: CONTAINER_NAME,
        }),
        namespace: None,
    };
    let touch = exec_spec(&["touch", "/tmp/attacked"], 5);
    let verdict = prober.probe(ProbeKind::Liveness, &touch, forged).await;
    let error = verdict.error.expect("a foreign container is refused");
    assert!(
        error.starts_with(&format!(
            "container {victim_id} is not container \"busybox\" of pod {}: the runtime labels it \
             \"busybox\" of pod \"{}\"",
            attacker.pod_uid, victim.pod_uid
        )),
        "{error}"
    );
    let marker = cri
        .exec_sync(
            POD,
            &victim.container_id,
            &strings(&["test", "-e", "/tmp/attacked"]),
            ONE_SECOND,
        )
        .await
        .unwrap();
    assert_eq!(
        marker.exit_code, 1,
        "the command ran in the victim's container"
    );
    // The genuine owner's probe runs.
    let own = ProbeTarget {
        identity: Some(ContainerIdentity {
            pod_uid: &victim.pod_uid,
            container_name: CONTAINER_NAME,
        }),
        ..forged
    };
    let ok = prober
        .probe(ProbeKind::Liveness, &exec_spec(&["true"], 5), own)
        .await;
    assert!(ok.is_success(), "{ok:?}");
    let wrong_name = ContainerIdentity {
        pod_uid: &victim.pod_uid,
        container_name: "sidecar",
    };
    assert!(matches!(
        cri.verify_identity(&victim_id, wrong_name).await,
        Err(CriError::ForeignContainer { .. })
    ));
}

#[tokio::test]
async fn exec_slots_bound_the_execs_in_flight_and_a_waiting_probe_errors_at_its_timeout() {
    let cri = client().limit_concurrent_execs(1, 1, Duration::from_secs(60));
    let pod = TestPod::start(&cri, "exec-slots").await;
    let busy = tokio::spawn({
        let (cri, id) = (cri.clone(), pod.container_id.clone());
        let held = strings(&["sh", "-c", "touch /tmp/slot-held; sleep 3"]);
        async move {
            cri.exec_sync(POD, &id, &held, Duration::from_secs(10))
                .await
        }
    });
    // Wait until the first exec holds the only slot: its command runs.
    let started = Instant::now();
    let check = strings(&["test", "-e", "/tmp/slot-held"]);
    loop {
        let held = client()
            .exec_sync(POD, &pod.container_id, &check, ONE_SECOND)
            .await
            .unwrap();
        if held.exit_code == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the first exec never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = Instant::now();
    let refused = cri
        .exec_sync(POD, &pod.container_id, &strings(&["true"]), ONE_SECOND)
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "exec not started: no exec slot became free for this pod within 1s (1 on this node, \
         --max-concurrent-execs; at most 1 per pod, --max-concurrent-execs-per-pod)"
    );
    assert!(waited.elapsed() >= ONE_SECOND, "{:?}", waited.elapsed());
    assert_eq!(busy.await.unwrap().unwrap().exit_code, 0);
    // The slot is free again.
    let after = cri
        .exec_sync(POD, &pod.container_id, &strings(&["true"]), ONE_SECOND)
        .await
        .unwrap();
    assert_eq!(after.exit_code, 0);
}

/// #25: a pod whose exec probes never finish holds at most its share of
/// the slots, and each for at most the longest exec timeout; another pod's
/// exec runs at once.
#[tokio::test]
async fn a_pods_endless_execs_hold_only_its_share_and_only_until_the_exec_timeout_cap() {
    let cri = client().limit_concurrent_execs(2, 1, Duration::from_secs(2));
    let pod = TestPod::start(&cri, "exec-fair").await;
    let endless = strings(&["sleep", "infinity"]);
    let started = Instant::now();
    let hostile = tokio::spawn({
        let (cri, id, endless) = (cri.clone(), pod.container_id.clone(), endless.clone());
        async move {
            cri.exec_sync("hostile", &id, &endless, Duration::from_secs(3600))
                .await
        }
    });
    // One turn of this (current-thread) runtime lets the task take its slot:
    // taking a free slot does not wait.
    tokio::task::yield_now().await;
    // Its second endless exec finds the pod's share (1) taken.
    let second = cri
        .exec_sync("hostile", &pod.container_id, &endless, ONE_SECOND)
        .await
        .unwrap_err();
    assert!(second.to_string().contains("at most 1 per pod"), "{second}");
    // A bystander pod's exec gets the other slot at once.
    let bystander = cri
        .exec_sync(
            "bystander",
            &pod.container_id,
            &strings(&["true"]),
            ONE_SECOND,
        )
        .await
        .unwrap();
    assert_eq!(bystander.exit_code, 0);
    // The runtime stops the endless one at the 2 s cap, not after an hour.
    let cut = hostile.await.unwrap().unwrap_err();
    assert_eq!(cut.code(), Some(tonic::Code::DeadlineExceeded), "{cut}");
    // The runtime's own timeout, plus 10 s for a loaded machine; without
    // the cap the call would end after an hour (or the CRI call's own
    // deadline, the timeout plus 120 s).
    let took = started.elapsed();
    assert!(took < Duration::from_secs(12), "{took:?}");
}

/// #37: pods that hold every exec slot of the node cannot keep another
/// pod's exec probe waiting: a pod running none gets a slot at once.
#[tokio::test]
async fn a_pod_running_no_exec_gets_one_while_others_hold_every_slot() {
    let cri = client().limit_concurrent_execs(1, 1, Duration::from_secs(10));
    let pod = TestPod::start(&cri, "exec-guaranteed").await;
    let hostile = tokio::spawn({
        let (cri, id) = (cri.clone(), pod.container_id.clone());
        async move {
            let endless = strings(&["sleep", "infinity"]);
            cri.exec_sync("hostile", &id, &endless, Duration::from_secs(3600))
                .await
        }
    });
    // One turn of this (current-thread) runtime lets the task take the
    // node's only slot, for 10 s.
    tokio::task::yield_now().await;
    // Without the guarantee this waits its 5 s for the slot and errors.
    let bystander = cri
        .exec_sync(
            "bystander",
            &pod.container_id,
            &strings(&["true"]),
            Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|e| panic!("the bystander's exec got no slot: {e}"));
    assert_eq!(bystander.exit_code, 0);
    assert!(
        !hostile.is_finished(),
        "the hostile exec still holds its slot"
    );
    hostile.abort();
}

#[tokio::test]
async fn exec_output_beyond_one_mebibyte_is_an_error_not_a_verdict() {
    let cri = client();
    let pod = TestPod::start(&cri, "exec-flood").await;
    let flood = strings(&["sh", "-c", "head -c 2000000 /dev/zero"]);
    let error = cri
        .exec_sync(POD, &pod.container_id, &flood, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("message length too large"),
        "{error}"
    );
}
