//! End to end, gate mode: podprobe runs as the real DaemonSet (`tests/e2e`)
//! next to the real kubelet of `hack/local-cluster.sh`, and these tests drive
//! annotated pods through the API and `kubectl`, as a user would.
//!
//! They need root and the cluster up; `hack/test.sh` brings it up, deploys
//! podprobe and runs them with `--ignored`. Each test has its own namespace.

#[allow(dead_code)]
#[path = "support/cluster.rs"]
mod cluster;

use std::time::Duration;

use serde_json::{Value, json};

use cluster::{
    AGNHOST, BUSYBOX, GATE, PODPROBE_NAMESPACE, PODPROBE_SELECTOR, TestNamespace, condition,
    condition_field, ensure_podprobe, gated_pod, kubectl, restart_count, running,
};

/// Long enough for a probe period, a status patch and the kubelet's resync,
/// with slack for a busy two-core machine.
const FLIP: Duration = Duration::from_secs(60);
const START: Duration = Duration::from_secs(120);

/// A shell loop that runs until stopped and exits 0 on SIGTERM.
const SLEEP_LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

fn setup(test: &str) -> TestNamespace {
    ensure_podprobe();
    TestNamespace::create(test)
}

/// A busybox pod running `prelude` then [`SLEEP_LOOP`], gated on podprobe
/// with `probes` for its container `app`.
fn busybox_pod(name: &str, prelude: &str, probes: Value) -> Value {
    let script = format!("{prelude}{SLEEP_LOOP}");
    gated_pod(name, "app", BUSYBOX, &["sh", "-c", &script], &[], probes)
}

fn wait_running(ns: &TestNamespace, pod: &str, container: &str) -> Value {
    ns.wait_for(START, &format!("pod {pod} running"), || {
        ns.pod(pod).filter(|p| running(p, container))
    })
}

/// The READINESS GATES column of `kubectl get pod -o wide` (the last one).
fn readiness_gates_column(ns: &TestNamespace, pod: &str) -> String {
    let line = ns.kubectl(&["get", "pod", pod, "-o", "wide", "--no-headers"]);
    line.split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// Waits until `podprobe.io/ready` and `Ready` are both `want` through the
/// API and `kubectl get pods -o wide` shows the gate as met (`1/1`) or not
/// (`0/1`); returns the pod.
fn wait_gate(ns: &TestNamespace, pod: &str, want: bool) -> Value {
    let status = if want { "True" } else { "False" };
    let column = if want { "1/1" } else { "0/1" };
    let what = format!("{pod}: {GATE} and Ready {status}, READINESS GATES {column}");
    ns.wait_for(FLIP, &what, || {
        let p = ns.pod(pod)?;
        let api = condition(&p, GATE).as_deref() == Some(status)
            && condition(&p, "Ready").as_deref() == Some(status);
        (api && readiness_gates_column(ns, pod) == column).then_some(p)
    })
}

/// Creates `pod`, waits for its container `app`-like first container to
/// run and for the gate to be `initially`, then flips it with `flip` and back
/// with `flip_back`, each seen through the API and kubectl.
fn flips_both_ways(test: &str, pod: Value, initially: bool, flip: &str, flip_back: &str) {
    let ns = setup(test);
    let name = pod["metadata"]["name"]
        .as_str()
        .expect("pod name")
        .to_string();
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .expect("container name")
        .to_string();
    ns.create_pod(&pod);
    wait_running(&ns, &name, &container);
    wait_gate(&ns, &name, initially);
    ns.exec(&name, flip);
    wait_gate(&ns, &name, !initially);
    ns.exec(&name, flip_back);
    wait_gate(&ns, &name, initially);
}

/// A probe that reacts within about a second.
fn fast(handler: Value) -> Value {
    let mut probe = handler;
    probe["periodSeconds"] = json!(1);
    probe["failureThreshold"] = json!(1);
    probe
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn exec_readiness_flips_both_ways() {
    let probes =
        json!({"readinessProbe": fast(json!({"exec": {"command": ["cat", "/tmp/ready"]}}))});
    flips_both_ways(
        "exec",
        busybox_pod("exec", "", probes),
        false,
        "touch /tmp/ready",
        "rm /tmp/ready",
    );
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn http_readiness_flips_both_ways() {
    // busybox httpd answers 200 for /ready while /www/ready exists, 404 after.
    let probes =
        json!({"readinessProbe": fast(json!({"httpGet": {"path": "/ready", "port": 8080}}))});
    flips_both_ways(
        "http",
        busybox_pod("http", "mkdir -p /www && httpd -p 8080 -h /www && ", probes),
        false,
        "touch /www/ready",
        "rm /www/ready",
    );
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn tcp_readiness_flips_both_ways() {
    // Something listens on 8080 only while httpd runs.
    let probes = json!({"readinessProbe": fast(json!({"tcpSocket": {"port": 8080}}))});
    flips_both_ways(
        "tcp",
        busybox_pod("tcp", "", probes),
        false,
        "httpd -p 8080 -h /tmp",
        "killall httpd",
    );
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn grpc_readiness_flips_both_ways() {
    // agnhost grpc-health-checking, as upstream's e2e uses it: SERVING until
    // told otherwise on its HTTP port.
    let probes = json!({"readinessProbe": fast(json!({"grpc": {"port": 5000}}))});
    let pod = gated_pod(
        "grpc",
        "health",
        AGNHOST,
        &[],
        &["grpc-health-checking", "--port=5000", "--http-port=8080"],
        probes,
    );
    flips_both_ways(
        "grpc",
        pod,
        true,
        "wget -qO- http://127.0.0.1:8080/make-not-serving",
        "wget -qO- http://127.0.0.1:8080/make-serving",
    );
}

/// Waits for an event on `pod` with `reason` whose message satisfies `message`.
fn wait_event(
    ns: &TestNamespace,
    pod: &str,
    reason: &str,
    message: impl Fn(&str) -> bool,
) -> Value {
    ns.wait_for(FLIP, &format!("a {reason} event on {pod}"), || {
        ns.events_for(pod)
            .into_iter()
            .find(|e| e["reason"] == reason && e["message"].as_str().is_some_and(&message))
    })
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn failing_liveness_probe_makes_the_kubelet_restart_the_container() {
    let ns = setup("liveness");
    let probes =
        json!({"livenessProbe": fast(json!({"exec": {"command": ["cat", "/tmp/healthy"]}}))});
    ns.create_pod(&busybox_pod("live", "touch /tmp/healthy; ", probes));
    let pod = wait_running(&ns, "live", "app");
    assert_eq!(restart_count(&pod, "app"), Some(0));

    ns.exec("live", "rm /tmp/healthy");
    ns.wait_for(
        FLIP,
        "restartCount 1 and the container running again",
        || {
            ns.pod("live")
                .filter(|p| restart_count(p, "app") == Some(1) && running(p, "app"))
        },
    );
    let unhealthy = wait_event(&ns, "live", "Unhealthy", |m| {
        m.starts_with("Liveness probe failed: ")
    });
    assert_eq!(unhealthy["type"], "Warning");
    assert_eq!(
        unhealthy["involvedObject"]["fieldPath"],
        "spec.containers{app}"
    );
    let killing = wait_event(&ns, "live", "Killing", |m| {
        m == "Container app failed liveness probe, will be restarted"
    });
    assert_eq!(killing["type"], "Normal");
    assert_eq!(
        killing["involvedObject"]["fieldPath"],
        "spec.containers{app}"
    );

    // The restarted container recreates /tmp/healthy: no second kill.
    ns.holds_for(Duration::from_secs(10), "one restart only", || {
        match ns.pod("live").and_then(|p| restart_count(&p, "app")) {
            Some(1) => Ok(()),
            other => Err(format!("restartCount {other:?}")),
        }
    });
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn malformed_annotation_yields_an_event_and_leaves_other_pods_alone() {
    let ns = setup("malformed");
    let good = json!({"readinessProbe": fast(json!({"exec": {"command": ["cat", "/tmp/ready"]}}))});
    ns.create_pod(&busybox_pod("good", "touch /tmp/ready; ", good));
    let mut bad = busybox_pod("bad", "touch /tmp/ready; ", json!({}));
    bad["metadata"]["annotations"]["podprobe.io/probes"] = json!("{\"app\": {\"readinessProbe\": ");
    ns.create_pod(&bad);

    wait_running(&ns, "good", "app");
    let good_pod = wait_gate(&ns, "good", true);
    let event = ns.wait_for(FLIP, "an event on bad naming the annotation", || {
        ns.events_for("bad").into_iter().find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("podprobe.io/probes: invalid JSON"))
        })
    });
    assert_eq!(event["type"], "Warning", "{event:#}");

    // The bad pod is not probed (its gate stays unmet); the good one is
    // untouched.
    stays_ready(&ns, "good", &good_pod, Duration::from_secs(10));
    let bad = ns.pod("bad").expect("pod bad");
    assert_ne!(condition(&bad, GATE).as_deref(), Some("True"), "{bad:#}");
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn ready_stays_stable_while_the_kubelet_syncs() {
    let ns = setup("stable");
    let probes =
        json!({"readinessProbe": fast(json!({"exec": {"command": ["cat", "/tmp/ready"]}}))});
    ns.create_pod(&busybox_pod("steady", "touch /tmp/ready; ", probes));
    wait_running(&ns, "steady", "app");
    let pod = wait_gate(&ns, "steady", true);
    stays_ready(&ns, "steady", &pod, Duration::from_secs(60));
}

/// Checks for `period` that `name` stays Ready with its gate met and neither
/// condition's `lastTransitionTime` moves from what `pod` shows.
fn stays_ready(ns: &TestNamespace, name: &str, pod: &Value, period: Duration) {
    let since = |p: &Value, kind: &str| condition_field(p, kind, "lastTransitionTime");
    let (ready_since, gate_since) = (since(pod, "Ready"), since(pod, GATE));
    ns.holds_for(
        period,
        &format!("{name} Ready without a transition"),
        || {
            let p = ns.pod(name).ok_or("pod gone")?;
            let now = (
                condition(&p, "Ready"),
                condition(&p, GATE),
                since(&p, "Ready"),
                since(&p, GATE),
            );
            let want = (
                Some("True".to_string()),
                Some("True".to_string()),
                ready_since.clone(),
                gate_since.clone(),
            );
            if now == want {
                Ok(())
            } else {
                Err(format!(
                    "(Ready, gate, their lastTransitionTimes) = {now:?}, want {want:?}"
                ))
            }
        },
    );
}

/// The names of podprobe's DaemonSet pods that are Ready.
fn ready_podprobe_pods() -> Vec<String> {
    let list = kubectl()
        .get_json(&["-n", PODPROBE_NAMESPACE, "pods", "-l", PODPROBE_SELECTOR])
        .unwrap_or(Value::Null);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && condition(p, "Ready").as_deref() == Some("True")
        })
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn restarting_podprobe_flips_no_pod() {
    let ns = setup("restart");
    let probes =
        json!({"readinessProbe": fast(json!({"exec": {"command": ["cat", "/tmp/ready"]}}))});
    ns.create_pod(&busybox_pod("calm", "touch /tmp/ready; ", probes));
    wait_running(&ns, "calm", "app");
    let pod = wait_gate(&ns, "calm", true);

    let before = ready_podprobe_pods();
    assert!(
        !before.is_empty(),
        "no Ready podprobe pod\n{}",
        ns.diagnostics()
    );
    let mut args = vec!["-n", PODPROBE_NAMESPACE, "delete", "pod", "--wait=false"];
    args.extend(before.iter().map(String::as_str));
    kubectl().run(&args);

    // The pod stays Ready while podprobe is gone, while the DaemonSet's new
    // pod starts, and for a while after it took over.
    let since = |p: &Value| condition_field(p, "Ready", "lastTransitionTime");
    let ready_since = since(&pod);
    ns.wait_for(START, "a new Ready podprobe pod", || {
        let p = ns.pod("calm")?;
        assert_eq!(
            (condition(&p, "Ready").as_deref(), since(&p)),
            (Some("True"), ready_since.clone()),
            "calm flipped while podprobe restarted\n{}",
            ns.diagnostics()
        );
        let now = ready_podprobe_pods();
        (!now.is_empty() && now.iter().all(|n| !before.contains(n))).then_some(())
    });
    stays_ready(&ns, "calm", &pod, Duration::from_secs(15));
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn readiness_waits_for_the_startup_probe() {
    let ns = setup("startup");
    let probes = json!({
        "startupProbe": {"exec": {"command": ["cat", "/tmp/started"]}, "periodSeconds": 1, "failureThreshold": 600},
        "readinessProbe": fast(json!({"exec": {"command": ["true"]}})),
    });
    ns.create_pod(&busybox_pod("slow", "", probes));
    wait_running(&ns, "slow", "app");
    ns.holds_for(
        Duration::from_secs(8),
        "the gate unmet before startup",
        || {
            let p = ns.pod("slow").ok_or("pod gone")?;
            match condition(&p, GATE).as_deref() {
                Some("True") => {
                    Err("podprobe.io/ready True before the startup probe succeeded".into())
                }
                _ => Ok(()),
            }
        },
    );
    ns.exec("slow", "touch /tmp/started");
    wait_gate(&ns, "slow", true);
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn failing_startup_probe_restarts_the_container_with_the_probe_grace_period() {
    let ns = setup("startupfail");
    // The container ignores SIGTERM and the pod allows 120 s for it to stop:
    // only the probe's own 1 s grace period makes the restart quick.
    let probes = json!({"startupProbe": {
        "exec": {"command": ["cat", "/tmp/never"]},
        "periodSeconds": 1, "failureThreshold": 2, "terminationGracePeriodSeconds": 1,
    }});
    let mut pod = gated_pod(
        "stuck",
        "app",
        BUSYBOX,
        &["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
        &[],
        probes,
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(120);
    ns.create_pod(&pod);
    wait_running(&ns, "stuck", "app");
    ns.wait_for(
        Duration::from_secs(45),
        "a restart well within the pod's 120 s grace period",
        || {
            ns.pod("stuck")
                .filter(|p| restart_count(p, "app").is_some_and(|n| n >= 1))
        },
    );
    wait_event(&ns, "stuck", "Killing", |m| {
        m == "Container app failed startup probe, will be restarted"
    });
}

#[test]
#[ignore = "needs the local cluster (hack/test.sh runs it)"]
fn recreated_pod_gets_no_stale_status() {
    let ns = setup("recreate");
    let probes =
        json!({"readinessProbe": fast(json!({"exec": {"command": ["cat", "/tmp/ready"]}}))});
    ns.create_pod(&busybox_pod(
        "phoenix",
        "touch /tmp/ready; ",
        probes.clone(),
    ));
    wait_running(&ns, "phoenix", "app");
    let old = wait_gate(&ns, "phoenix", true);
    ns.kubectl(&["delete", "pod", "phoenix", "--wait=true"]);

    // Same name, but its probe fails: nothing may carry the old pod's True over.
    ns.create_pod(&busybox_pod("phoenix", "", probes));
    let new = wait_running(&ns, "phoenix", "app");
    assert_ne!(new["metadata"]["uid"], old["metadata"]["uid"]);
    ns.holds_for(Duration::from_secs(10), "the new pod's gate unmet", || {
        let p = ns.pod("phoenix").ok_or("pod gone")?;
        match condition(&p, GATE).as_deref() {
            Some("True") => Err("the recreated pod's podprobe.io/ready is True".into()),
            _ => Ok(()),
        }
    });
    ns.exec("phoenix", "touch /tmp/ready");
    wait_gate(&ns, "phoenix", true);
}
