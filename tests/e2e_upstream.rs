//! Upstream's probe e2e scenarios (`test/e2e/common/node/container_probe.go`,
//! "Probing container" and "Probing restartable init container") ported to
//! both of podprobe's modes:
//!
//! - gate mode (`container::*`, `restartable_init_container::*`): the probes
//!   live in the `podprobe.io/probes` annotation, the pod lists the
//!   `podprobe.io/ready` readiness gate, and podprobe runs as the real
//!   DaemonSet (`tests/e2e`) next to the real kubelet of
//!   `hack/local-cluster.sh`; readiness is the gate and `Ready`;
//! - authority mode (`authority::container::*`,
//!   `authority::restartable_init_container::*`): the probes live in the pod
//!   spec, the pod is bound to the agent node of `hack/agent-node.sh` (a CRI
//!   agent without a prober) and podprobe `--mode authority` owns container
//!   `ready`/`started` and `Ready`/`ContainersReady`; readiness is the
//!   container's `ready` and `Ready`, exactly as upstream reads it. Upstream's
//!   "should support pod readiness gates" (`test/e2e/common/node/pods.go`)
//!   runs there too (`authority::should_support_pod_readiness_gates`).
//!
//! Each scenario runs as a regular container and as a restartable init
//! container, with the test named after the upstream `It`; in gate mode the
//! two termination scenarios check the gate, not `Ready`, and are named
//! `should_mark_the_gate_false_*`. Upstream's timings (15 s initial delays,
//! 4 min observation windows) are scaled down so the file runs in a few
//! minutes; `tests/UPSTREAM_E2E.md` lists every upstream scenario and how it
//! maps here.
//!
//! `#[ignore]`d like `e2e_gate`: `hack/test.sh` deploys podprobe, brings the
//! agent node up and runs them with `--ignored`.

#[path = "support/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cluster::{
    AGNHOST_IMAGE, BUSYBOX_IMAGE, GATE, Namespace, PodWatch, SLEEP_LOOP, condition,
    container_status, ensure_agent_node, ensure_podprobe, epoch_seconds, gated_pod, sidecar,
    spec_pod, unique_id,
};

/// How long a restart may take to show: probe delay and period, the kill's
/// grace period, the kubelet's restart and status sync, on a busy machine.
const RESTART: Duration = Duration::from_secs(90);
/// Upstream's 4 min "nothing happens" window, scaled down: several probe
/// periods past the point where a wrong verdict would have restarted.
const OBSERVE: Duration = Duration::from_secs(20);
const START: Duration = Duration::from_secs(120);

/// Who runs the probes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    /// Gate mode: probes in the annotation, podprobe's DaemonSet next to the
    /// kubelet, readiness = `podprobe.io/ready` and `Ready`.
    Gate,
    /// Authority mode: probes in the spec, the pod bound to the agent node,
    /// readiness = the container's `ready` and `Ready`.
    Authority,
    /// The reference for authority mode: the same spec pods on the
    /// kubelet's node, probed by the kubelet itself (no podprobe). What
    /// upstream's suite tests; it checks the scaled-down ports.
    Kubelet,
}

/// Where the probed container sits: upstream runs every scenario both ways.
#[derive(Clone, Copy, Debug)]
enum Variant {
    /// `spec.containers[0]`.
    Container,
    /// `spec.initContainers[0]` with `restartPolicy: Always` (a sidecar),
    /// next to a main container that only sleeps.
    RestartableInit,
}

/// One scenario's run: which mode, which container.
#[derive(Clone, Copy, Debug)]
struct Case {
    target: Target,
    variant: Variant,
}

impl Case {
    /// The namespace of one test, with what runs the probes up: podprobe's
    /// DaemonSet (a rolled out one is used as it is, as `hack/test.sh`
    /// deploys it just before, else it is deployed from this tree) or the
    /// agent node with podprobe in authority mode.
    fn setup(self, test: &str) -> Namespace {
        let mode = match self.target {
            Target::Gate => {
                ensure_podprobe();
                "up"
            }
            Target::Authority => {
                ensure_agent_node();
                "upa"
            }
            Target::Kubelet => "upk",
        };
        Namespace::create(&format!("podprobe-{mode}-{test}-{}", unique_id()))
    }

    /// A pod whose probed container `name` runs `image` with `command` and
    /// `args` and has `probes`: in the annotation of a gated pod, or in the
    /// spec of a pod bound to the agent node.
    fn pod(
        self,
        pod: &str,
        name: &str,
        image: &str,
        command: &[&str],
        args: &[&str],
        probes: Value,
    ) -> Value {
        let pod = match self.target {
            Target::Gate => gated_pod(pod, name, image, command, args, probes),
            Target::Authority => {
                let node = &ensure_agent_node().name;
                spec_pod(pod, name, image, command, args, probes, Some(node))
            }
            Target::Kubelet => spec_pod(pod, name, image, command, args, probes, None),
        };
        match self.variant {
            Variant::Container => pod,
            Variant::RestartableInit => sidecar(pod),
        }
    }

    /// The kubelet's `Killing` message for a liveness kill of `name`.
    fn liveness_kill_message(self, name: &str) -> String {
        match self.variant {
            Variant::Container => {
                format!("Container {name} failed liveness probe, will be restarted")
            }
            Variant::RestartableInit => format!("Init container {name} failed liveness probe"),
        }
    }

    /// The involved object's field path of the probed container's events.
    fn field_path(self, name: &str) -> String {
        match self.variant {
            Variant::Container => format!("spec.containers{{{name}}}"),
            Variant::RestartableInit => format!("spec.initContainers{{{name}}}"),
        }
    }

    /// The readiness upstream reads, as `(what, status)` pairs: the gate
    /// and `Ready` in gate mode; the probed container's `ready` and `Ready`
    /// in authority mode.
    fn readiness(self, pod: &Value) -> Vec<(&'static str, Option<bool>)> {
        let first = match self.target {
            Target::Gate => ("gate", status(pod, GATE).map(|s| s == "True")),
            Target::Authority | Target::Kubelet => (
                "container ready",
                container_status(pod, &probed_name(pod)).and_then(|s| s["ready"].as_bool()),
            ),
        };
        vec![first, ("Ready", status(pod, "Ready").map(|s| s == "True"))]
    }

    /// The conditions whose `lastTransitionTime` says when readiness came.
    fn readiness_conditions(self) -> [&'static str; 2] {
        match self.target {
            Target::Gate => [GATE, "Ready"],
            Target::Authority | Target::Kubelet => ["ContainersReady", "Ready"],
        }
    }
}

/// A busybox pod running `sh -c script`, probed as container `busybox`.
fn busybox(case: Case, script: &str, probes: Value) -> Value {
    case.pod(
        "busybox",
        "busybox",
        BUSYBOX_IMAGE,
        &["sh", "-c", script],
        &[],
        probes,
    )
}

/// agnhost `liveness`: `/healthz` answers 200 for 10 s after start, then 500;
/// `/redirect?loc=` redirects; port 8080.
fn agnhost_liveness(case: Case, probes: Value) -> Value {
    case.pod(
        "liveness",
        "agnhost",
        AGNHOST_IMAGE,
        &[],
        &["liveness"],
        probes,
    )
}

/// agnhost `test-webserver` on port 80 (answers 200 on `/`).
fn test_webserver(case: Case, probes: Value) -> Value {
    case.pod(
        "test-webserver",
        "test-webserver",
        AGNHOST_IMAGE,
        &[],
        &["test-webserver", "--port", "80"],
        probes,
    )
}

/// agnhost `grpc-health-checking`: SERVING on gRPC port 5000.
fn grpc_server(case: Case, probes: Value) -> Value {
    case.pod(
        "grpc",
        "agnhost",
        AGNHOST_IMAGE,
        &[],
        &["grpc-health-checking", "--port=5000", "--http-port=8080"],
        probes,
    )
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The probed container: the first init container if any, else the first.
fn probed_name(pod: &Value) -> String {
    let spec = &pod["spec"];
    let c = if spec["initContainers"].is_array() {
        &spec["initContainers"][0]
    } else {
        &spec["containers"][0]
    };
    c["name"].as_str().unwrap_or_default().to_string()
}

fn restarts(pod: &Value, container: &str) -> Option<u64> {
    container_status(pod, container)?["restartCount"].as_u64()
}

fn status(pod: &Value, kind: &str) -> Option<String> {
    condition(pod, kind).map(|(status, _)| status)
}

/// Creates `pod` and waits until its probed container is no longer waiting
/// (running or terminated), as upstream's `runLivenessTest` does.
fn create_and_start(ns: &Namespace, pod: &Value) -> Value {
    ns.create_pod(pod);
    let (name, container) = (name_of(pod), probed_name(pod));
    ns.wait_for(&format!("{name}/{container} not waiting"), START, || {
        let p = ns.pod(&name)?;
        let state = container_status(&p, &container).map(|s| &s["state"]);
        match state {
            Some(s) if s["running"].is_object() || s["terminated"].is_object() => Ok(p),
            other => Err(format!("state {other:?}")),
        }
    })
}

/// Upstream's `RunLivenessTest`: the probed container's restart count only
/// grows, reaches `expect` more than at start within `timeout` when `expect`
/// is positive, and stays put for `timeout` when it is zero.
fn run_liveness_test(ns: &Namespace, pod: &Value, expect: u64, timeout: Duration) {
    let p = create_and_start(ns, pod);
    let (name, container) = (name_of(pod), probed_name(pod));
    let initial = restarts(&p, &container).unwrap_or_default();
    let mut last = initial;
    let mut seen = |what: &str| -> Result<u64, String> {
        let p = ns.pod(&name)?;
        let now = restarts(&p, &container).ok_or("no restartCount")?;
        assert!(
            now >= last,
            "{what}: restartCount went from {last} to {now}\n{}",
            ns.diagnostics()
        );
        last = now;
        Ok(now - initial)
    };
    if expect == 0 {
        ns.holds_for("no restart", timeout, || match seen("no restart")? {
            0 => Ok(()),
            n => Err(format!("{n} restarts")),
        });
    } else {
        ns.wait_for(&format!("{expect} restarts"), timeout, || {
            match seen("restarts")? {
                n if n >= expect => Ok(()),
                n => Err(format!("{n} restarts")),
            }
        });
    }
}

/// Waits until the readiness upstream reads ([`Case::readiness`]) is all
/// `want`; returns the pod.
fn wait_ready(ns: &Namespace, case: Case, pod: &str, want: bool) -> Value {
    let what = match case.target {
        Target::Gate => "the gate and Ready",
        Target::Authority | Target::Kubelet => "the container's ready and Ready",
    };
    ns.wait_for(&format!("{pod}: {what} {want}"), START, || {
        let p = ns.pod(pod)?;
        let seen = case.readiness(&p);
        if seen.iter().all(|(_, ready)| *ready == Some(want)) {
            Ok(p)
        } else {
            Err(format!("{seen:?}"))
        }
    })
}

/// Upstream's `runReadinessFailTest`: never ready for `window`.
fn never_ready(ns: &Namespace, case: Case, pod: &str, window: Duration) {
    ns.holds_for(&format!("{pod} never ready"), window, || {
        let p = ns.pod(pod)?;
        let seen = case.readiness(&p);
        if seen.iter().any(|(_, ready)| *ready == Some(true)) {
            Err(format!("turned ready: {seen:?}"))
        } else {
            Ok(())
        }
    });
}

fn exec(command: &[&str]) -> Value {
    json!({"exec": {"command": command}})
}

fn http_get(path: &str, port: u16) -> Value {
    json!({"httpGet": {"path": path, "port": port}})
}

/// `handler` with the given probe fields merged in.
fn probe(handler: Value, fields: Value) -> Value {
    let mut probe = handler;
    if let (Some(p), Some(f)) = (probe.as_object_mut(), fields.as_object()) {
        p.extend(f.clone());
    }
    probe
}

/// Deletes `pod` quickly (for pods with a long grace period).
fn delete_now(ns: &Namespace, pod: &str) {
    ns.kubectl(&["delete", "pod", pod, "--grace-period=1", "--wait=false"]);
}

// ---- the scenarios, in upstream's order --------------------------------

fn readiness_initial_delay(case: Case) {
    const DELAY: i64 = 5;
    let ns = case.setup("initdelay");
    let probes = json!({"readinessProbe": probe(http_get("/", 80),
        json!({"initialDelaySeconds": DELAY, "periodSeconds": 1}))});
    let pod = test_webserver(case, probes);
    let (name, container) = (name_of(&pod), probed_name(&pod));
    create_and_start(&ns, &pod);
    let p = wait_ready(&ns, case, &name, true);
    let started = container_status(&p, &container)
        .and_then(|s| s["state"]["running"]["startedAt"].as_str())
        .and_then(epoch_seconds)
        .expect("startedAt of the running container");
    for kind in case.readiness_conditions() {
        let (_, at) = condition(&p, kind).expect("condition present");
        let at = epoch_seconds(&at).expect("lastTransitionTime");
        assert!(
            at - started >= DELAY,
            "{kind} turned True {}s after the container started, before the {DELAY}s initial delay\n{}",
            at - started,
            ns.diagnostics()
        );
    }
    assert_eq!(restarts(&p, &container), Some(0), "{}", ns.diagnostics());
}

fn readiness_fails(case: Case) {
    let ns = case.setup("readyfail");
    // Nothing listens on 81.
    let probes = json!({"readinessProbe": probe(http_get("/", 81), json!({"periodSeconds": 1}))});
    let pod = test_webserver(case, probes);
    create_and_start(&ns, &pod);
    never_ready(&ns, case, &name_of(&pod), OBSERVE);
    let p = ns.pod(&name_of(&pod)).expect("pod");
    assert_eq!(restarts(&p, &probed_name(&pod)), Some(0));
}

/// Upstream's liveness probe shape: delay, generous timeout, one failure.
fn liveness(handler: Value, delay: u32) -> Value {
    json!({"livenessProbe": probe(handler, json!({
        "initialDelaySeconds": delay, "timeoutSeconds": 5, "failureThreshold": 1, "periodSeconds": 2,
    }))})
}

fn exec_cat_health_restart(case: Case) {
    let ns = case.setup("catrestart");
    let script = "echo ok >/tmp/health; sleep 3; rm -rf /tmp/health; sleep 600";
    let pod = busybox(case, script, liveness(exec(&["cat", "/tmp/health"]), 5));
    run_liveness_test(&ns, &pod, 1, RESTART);
    let field_path = case.field_path("busybox");
    let message = case.liveness_kill_message("busybox");
    let name = name_of(&pod);
    ns.wait_for(&format!("a Killing event on {field_path}"), START, || {
        let events = ns.events_for(&name);
        events
            .iter()
            .find(|e| {
                e["reason"] == "Killing"
                    && e["message"] == message.as_str()
                    && e["involvedObject"]["fieldPath"] == field_path.as_str()
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} events, none matches", events.len()))
    });
}

fn exec_cat_health_no_restart(case: Case) {
    let ns = case.setup("catok");
    let script = "echo ok >/tmp/health; sleep 600";
    let pod = busybox(case, script, liveness(exec(&["cat", "/tmp/health"]), 2));
    run_liveness_test(&ns, &pod, 0, OBSERVE);
}

fn healthz_restart(case: Case) {
    let ns = case.setup("healthz");
    let pod = agnhost_liveness(case, liveness(http_get("/healthz", 8080), 3));
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn tcp_no_restart(case: Case) {
    let ns = case.setup("tcp");
    // /healthz fails after 10 s, but the socket stays open.
    let pod = agnhost_liveness(case, liveness(json!({"tcpSocket": {"port": 8080}}), 3));
    run_liveness_test(&ns, &pod, 0, OBSERVE);
}

fn monotonic_restarts(case: Case) {
    // Upstream counts 5 restarts (minutes of CrashLoopBackOff); 2 show the
    // same thing: every time /healthz turns bad the container is restarted.
    let ns = case.setup("monotonic");
    let pod = agnhost_liveness(case, liveness(http_get("/healthz", 8080), 3));
    run_liveness_test(&ns, &pod, 2, RESTART * 2);
}

fn healthz_no_restart(case: Case) {
    let ns = case.setup("webok");
    let probes = json!({"livenessProbe": probe(http_get("/", 80), json!({
        "initialDelaySeconds": 3, "timeoutSeconds": 5, "failureThreshold": 5, "periodSeconds": 2,
    }))});
    run_liveness_test(&ns, &test_webserver(case, probes), 0, OBSERVE);
}

/// An exec probe that outlives its 1 s timeout.
fn slow_exec(kind: &str, command: &str) -> Value {
    json!({kind: probe(exec(&["/bin/sh", "-c", command]), json!({
        "initialDelaySeconds": 2, "timeoutSeconds": 1, "failureThreshold": 1, "periodSeconds": 2,
    }))})
}

fn exec_liveness_timeout(case: Case) {
    let ns = case.setup("exectimeout");
    let pod = busybox(case, "sleep 600", slow_exec("livenessProbe", "sleep 10"));
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn exec_readiness_timeout(case: Case) {
    let ns = case.setup("readytimeout");
    let pod = busybox(case, "sleep 600", slow_exec("readinessProbe", "sleep 10"));
    create_and_start(&ns, &pod);
    never_ready(&ns, case, &name_of(&pod), OBSERVE);
}

fn failing_exec_longer_than_timeout(case: Case) {
    let ns = case.setup("execfail");
    let pod = busybox(
        case,
        "sleep 600",
        slow_exec("livenessProbe", "sleep 10 & exit 1"),
    );
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn local_redirect_restart(case: Case) {
    let ns = case.setup("localredirect");
    let pod = agnhost_liveness(
        case,
        liveness(http_get("/redirect?loc=%2Fhealthz", 8080), 3),
    );
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn non_local_redirect_no_restart(case: Case) {
    let ns = case.setup("remoteredirect");
    let pod = agnhost_liveness(
        case,
        liveness(http_get("/redirect?loc=http%3A%2F%2F0.0.0.0%2F", 8080), 3),
    );
    run_liveness_test(&ns, &pod, 0, OBSERVE);
    let name = name_of(&pod);
    let want = "Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>.";
    let event = ns.wait_for("a ProbeWarning event", START, || {
        let events = ns.events_for(&name);
        events
            .iter()
            .find(|e| {
                e["reason"] == "ProbeWarning"
                    && e["message"].as_str().is_some_and(|m| m.contains(want))
            })
            .cloned()
            .ok_or_else(|| format!("{} events, none matches", events.len()))
    });
    assert_eq!(event["type"], "Warning", "{event:#}");
}

fn startup_fails_restart(case: Case) {
    let ns = case.setup("startupfail");
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/true"]), json!({"initialDelaySeconds": 3, "failureThreshold": 1})),
        "startupProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 3, "periodSeconds": 1})),
    });
    run_liveness_test(&ns, &busybox(case, "sleep 600", probes), 1, RESTART);
}

fn startup_delays_liveness(case: Case) {
    let ns = case.setup("startupdelay");
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 1})),
        "startupProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 60, "periodSeconds": 1})),
    });
    run_liveness_test(&ns, &busybox(case, "sleep 600", probes), 0, OBSERVE);
}

fn liveness_after_startup(case: Case) {
    let ns = case.setup("afterstartup");
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 1})),
        "startupProbe": probe(exec(&["cat", "/tmp/startup"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 60, "periodSeconds": 1})),
    });
    let script = "sleep 3; echo ok >/tmp/startup; sleep 600";
    run_liveness_test(&ns, &busybox(case, script, probes), 1, RESTART);
}

fn ready_right_after_startup(case: Case) {
    match case.target {
        Target::Gate => ready_right_after_startup_gate(case),
        Target::Authority | Target::Kubelet => ready_right_after_startup_spec(case),
    }
}

/// Gate mode. Upstream: readiness every 30 s, ready within 25 s of startup
/// success, so readiness must run as soon as startup succeeds; it times from
/// the container's `started`, which in gate mode is the kubelet's (true at
/// once: it sees no startup probe). Scaled: every 30 s, the gate True within
/// 10 s of the container creating the startup file. Both instants are read
/// from the node's clock (the container's `date` as it writes the file, the
/// gate's `lastTransitionTime`), never from how fast `kubectl` runs on a
/// loaded machine; upstream reads status timestamps too.
///
/// As upstream's spec variant does, the container writes the file 32 s
/// after it starts, past the 30 s readiness period: a podprobe that started
/// less than one period before the pod (the kind suite restarts its
/// DaemonSet) delays the readiness worker's first run by up to a period
/// (W5), and no trigger cuts that short, in the kubelet either.
fn ready_right_after_startup_gate(case: Case) {
    let ns = case.setup("readyafterstartup");
    let probes = json!({
        "readinessProbe": probe(exec(&["/bin/cat", "/tmp/health"]), json!({"periodSeconds": 30})),
        "startupProbe": probe(exec(&["/bin/cat", "/tmp/startup"]),
            json!({"failureThreshold": 120, "periodSeconds": 1})),
    });
    let script = format!("echo ok >/tmp/health; sleep 32; date +%s >/tmp/startup; {SLEEP_LOOP}");
    let pod = busybox(case, &script, probes);
    let name = name_of(&pod);
    create_and_start(&ns, &pod);
    never_ready(&ns, case, &name, Duration::from_secs(5));
    let p = wait_ready(&ns, case, &name, true);
    let container = probed_name(&pod);
    let written = ns.kubectl(&["exec", &name, "-c", &container, "--", "cat", "/tmp/startup"]);
    let written: i64 = written.trim().parse().expect("epoch seconds from date +%s");
    let (_, at) = condition(&p, GATE).expect("the gate condition");
    let ready_in = epoch_seconds(&at).expect("lastTransitionTime") - written;
    assert!(
        (0..=10).contains(&ready_in),
        "the gate turned True {ready_in}s after the startup file was written: readiness must run right after startup, never before it\n{}",
        ns.diagnostics()
    );
}

/// Probes in the spec, with upstream's timing and reading: whoever probes
/// owns `started` (podprobe in authority mode), so the test waits for the container's `started`, then for
/// `Ready`, and requires Ready within 25 s of started, with a 30 s readiness
/// period (and never before started).
fn ready_right_after_startup_spec(case: Case) {
    let ns = case.setup("readyafterstartup");
    let probes = json!({
        "readinessProbe": probe(exec(&["/bin/cat", "/tmp/health"]), json!({"periodSeconds": 30})),
        "startupProbe": probe(exec(&["/bin/cat", "/tmp/startup"]),
            json!({"failureThreshold": 120, "periodSeconds": 5})),
    });
    // Upstream: the 32 s before startup outlast the 30 s readiness period.
    let script = format!("echo ok >/tmp/health; sleep 32; echo ok >/tmp/startup; {SLEEP_LOOP}");
    let pod = busybox(case, &script, probes);
    let (name, container) = (name_of(&pod), probed_name(&pod));
    ns.create_pod(&pod);
    ns.wait_for(
        &format!("{name}/{container} started"),
        START + Duration::from_secs(32),
        || {
            let p = ns.pod(&name)?;
            match container_status(&p, &container).map(|s| &s["started"]) {
                Some(Value::Bool(true)) => Ok(()),
                seen => {
                    assert_ne!(
                        status(&p, "Ready").as_deref(),
                        Some("True"),
                        "{name} became Ready before its startup probe succeeded\n{}",
                        ns.diagnostics()
                    );
                    Err(format!("started {seen:?}"))
                }
            }
        },
    );
    let started = Instant::now();
    wait_ready(&ns, case, &name, true);
    let ready_in = started.elapsed();
    assert!(
        ready_in <= Duration::from_secs(25),
        "ready {ready_in:?} after started, more than 25 s: readiness did not run right after startup\n{}",
        ns.diagnostics()
    );
}

/// A pod that ignores SIGTERM with a 500 s grace period, whose `probes` use
/// a probe-level 2 s grace period: only that makes the restart quick.
fn grace_override(case: Case, test: &str, probes: Value) {
    let ns = case.setup(test);
    let mut pod = busybox(case, "trap '' TERM; while true; do sleep 1; done", probes);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(500);
    run_liveness_test(&ns, &pod, 1, Duration::from_secs(60));
    delete_now(&ns, &name_of(&pod));
}

fn liveness_grace_override(case: Case) {
    // Nothing listens on 8080.
    let probes = json!({"livenessProbe": probe(http_get("/healthz", 8080), json!({
        "initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 2, "terminationGracePeriodSeconds": 2,
    }))});
    grace_override(case, "livegrace", probes);
}

fn startup_grace_override(case: Case) {
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/true"]), json!({"initialDelaySeconds": 3, "failureThreshold": 1})),
        "startupProbe": probe(exec(&["/bin/cat", "/tmp/startup"]), json!({
            "initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 2, "terminationGracePeriodSeconds": 2,
        })),
    });
    grace_override(case, "startgrace", probes);
}

fn grpc_no_restart(case: Case) {
    let ns = case.setup("grpcok");
    let pod = grpc_server(case, liveness(json!({"grpc": {"port": 5000}}), 3));
    run_liveness_test(&ns, &pod, 0, OBSERVE);
}

fn grpc_restart(case: Case) {
    let ns = case.setup("grpcbad");
    // Nothing serves gRPC on 2333.
    let pod = grpc_server(case, liveness(json!({"grpc": {"port": 2333}}), 3));
    run_liveness_test(&ns, &pod, 1, RESTART);
}

/// Upstream's terminating pods' grace period.
const TERMINATING_GRACE: Duration = Duration::from_secs(30);

/// Upstream's script for its terminating pod (`container_probe.go`, "should
/// mark readiness on pods to false while pod is in progress of
/// terminating"): on SIGTERM it removes its readiness file and keeps running
/// for 30 s.
const TERMINATING_SCRIPT: &str = r#"
_term() {
	rm -f /tmp/ready
	sleep 30
	exit 0
}
trap _term SIGTERM

touch /tmp/ready

while true; do
  echo \"hello\"
  sleep 10
done
			"#;

/// Upstream's script for its terminating pod with a liveness probe too
/// ("... and disable liveness probes ..."): on SIGTERM it removes both
/// files and keeps running for 20 s.
const TERMINATING_LIVENESS_SCRIPT: &str = r#"
_term() {
	rm -f /tmp/ready
	rm -f /tmp/liveness
	sleep 20
	exit 0
}
trap _term SIGTERM

touch /tmp/ready
touch /tmp/liveness

while true; do
  echo \"hello\"
  sleep 10
done
"#;

/// Upstream's terminating pod, unchanged: agnhost running `/bin/bash -c`
/// `script` with `probes` and a 30 s grace period. Once the pod was ready,
/// deletes it, and returns the namespace, the pod name, a watch of every
/// version from just before the deletion, and when it was requested.
fn terminate_ready_pod(
    case: Case,
    test: &str,
    script: &str,
    probes: Value,
) -> (Namespace, String, PodWatch, Instant) {
    let ns = case.setup(test);
    let mut pod = case.pod(
        "probe-test",
        "probe-test",
        AGNHOST_IMAGE,
        &["/bin/bash"],
        &["-c", script],
        probes,
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(TERMINATING_GRACE.as_secs());
    let name = name_of(&pod);
    create_and_start(&ns, &pod);
    wait_ready(&ns, case, &name, true);
    let watch = PodWatch::start(&ns.name);
    let deleted = Instant::now();
    ns.kubectl(&["delete", "pod", &name, "--wait=false"]);
    (ns, name, watch, deleted)
}

/// What upstream asserts, with the probes in the spec: `pod` turns not
/// `Ready` while it still exists (its readiness probe kept running after
/// SIGTERM).
fn not_ready_while_deleted(ns: &Namespace, case: Case, pod: &str) {
    let p = ns.wait_for(
        &format!("{pod}: Ready False while terminating"),
        START,
        || {
            let p = ns.pod(pod)?;
            match status(&p, "Ready").as_deref() {
                Some("False") => Ok(p),
                seen => Err(format!("Ready {seen:?}")),
            }
        },
    );
    assert!(p["metadata"]["deletionTimestamp"].is_string(), "{p:#}");
    eprintln!(
        "{pod}: Ready False while terminating; readiness {:?}",
        case.readiness(&p)
    );
}

/// Gate mode's part of it: podprobe's gate on `pod` turns False within the
/// pod's grace period of its deletion (`deleted`), while the probed
/// container still runs. Only a readiness probe run after SIGTERM does that:
/// once the container exited, the gate would be False anyway. The first
/// version with the gate False (from `watch`, which sees every version) is
/// the one checked, so a slow poll cannot see it only after the container
/// stopped.
///
/// `Ready` is not checked, only reported: the kubelet does not recompute it
/// from a readiness gate for a terminating pod (see `tests/UPSTREAM_E2E.md`).
fn gate_false_while_deleted(
    ns: &Namespace,
    case: Case,
    pod: &str,
    watch: &PodWatch,
    deleted: Instant,
) {
    let deadline = deleted + TERMINATING_GRACE;
    let p = loop {
        match watch.next_until(deadline) {
            Ok(Some(v))
                if v.pod["metadata"]["name"] == pod
                    && status(&v.pod, GATE).as_deref() == Some("False") =>
            {
                break v.pod;
            }
            Ok(Some(_)) => {}
            Ok(None) => panic!(
                "{pod}: {GATE} not False within {TERMINATING_GRACE:?} of the deletion\n{}",
                ns.diagnostics()
            ),
            Err(e) => panic!("{pod}: {e}\n{}", ns.diagnostics()),
        }
    };
    let after = deleted.elapsed();
    assert!(
        p["metadata"]["deletionTimestamp"].is_string(),
        "{pod}: {GATE} False after {after:?}, but the pod is not terminating: {p:#}"
    );
    let container = probed_name(&p);
    let state = container_status(&p, &container).map(|s| &s["state"]);
    assert!(
        state.is_some_and(|s| s["running"].is_object()),
        "{pod}: {GATE} False after {after:?} only once {container} stopped running \
         ({state:?}): the readiness probe did not turn it False while terminating\n{}",
        ns.diagnostics()
    );
    eprintln!(
        "{pod}: {GATE} False {after:?} after the deletion, {container} still running; readiness {:?}",
        case.readiness(&p)
    );
}

/// The readiness probe of upstream's terminating pods: fails as soon as
/// SIGTERM removed `/tmp/ready`.
fn terminating_readiness_probe() -> Value {
    probe(
        exec(&["cat", "/tmp/ready"]),
        json!({"failureThreshold": 1, "initialDelaySeconds": 5, "periodSeconds": 2}),
    )
}

fn not_ready_while_terminating(case: Case) {
    let probes = json!({"readinessProbe": terminating_readiness_probe()});
    let (ns, name, _, _) = terminate_ready_pod(case, "terminating", TERMINATING_SCRIPT, probes);
    not_ready_while_deleted(&ns, case, &name);
}

fn gate_false_while_terminating(case: Case) {
    let probes = json!({"readinessProbe": terminating_readiness_probe()});
    let (ns, name, watch, deleted) =
        terminate_ready_pod(case, "terminating", TERMINATING_SCRIPT, probes);
    gate_false_while_deleted(&ns, case, &name, &watch, deleted);
}

/// Upstream's terminating pod with a liveness probe too: `readiness_false`
/// checks readiness turning False after the deletion; then no liveness
/// failure for [`OBSERVE`], although SIGTERM removed the liveness file.
fn readiness_false_and_no_liveness_while_terminating(
    case: Case,
    readiness_false: impl FnOnce(&Namespace, &str, &PodWatch, Instant),
) {
    let probes = json!({
        "readinessProbe": terminating_readiness_probe(),
        "livenessProbe": probe(exec(&["cat", "/tmp/liveness"]),
            json!({"failureThreshold": 1, "initialDelaySeconds": 5, "periodSeconds": 1})),
    });
    let (ns, name, watch, deleted) =
        terminate_ready_pod(case, "terminatinglive", TERMINATING_LIVENESS_SCRIPT, probes);
    readiness_false(&ns, &name, &watch, deleted);
    ns.holds_for("no liveness failure while terminating", OBSERVE, || {
        let events = ns.events_for(&name);
        match events.iter().find(|e| {
            e["message"].as_str().is_some_and(|m| {
                m.contains("failed liveness probe") || m.starts_with("Liveness probe failed")
            })
        }) {
            Some(e) => Err(format!("liveness ran while terminating: {}", e["message"])),
            None => Ok(()),
        }
    });
}

fn not_ready_and_no_liveness_while_terminating(case: Case) {
    readiness_false_and_no_liveness_while_terminating(case, |ns, name, _, _| {
        not_ready_while_deleted(ns, case, name);
    });
}

fn gate_false_and_no_liveness_while_terminating(case: Case) {
    readiness_false_and_no_liveness_while_terminating(case, |ns, name, watch, deleted| {
        gate_false_while_deleted(ns, case, name, watch, deleted);
    });
}

/// One `#[test]` per upstream `It` for one [`Target`] and [`Variant`],
/// ignored for `$ignore`: `scenarios!(gate, variant, ignore)` for gate mode,
/// `scenarios!(target, variant, ignore)` for the targets with the probes in
/// the spec. Each test is named after its `It`, except the two gate-mode
/// tests of termination, which check podprobe's gate rather than `Ready`
/// and are named for that.
macro_rules! scenarios {
    (gate, $variant:expr, $ignore:literal) => {
        scenarios!(@shared Target::Gate, $variant, $ignore);

        /// Upstream's "should mark readiness on pods to false while pod is
        /// in progress of terminating when a pod has a readiness probe", for
        /// the gate: `podprobe.io/ready` turns False within the grace period
        /// of the deletion, while the container still runs. `Ready` is only
        /// reported (the kubelet does not recompute it from a gate then).
        #[test]
        #[ignore = $ignore]
        fn should_mark_the_gate_false_while_pod_is_in_progress_of_terminating_when_a_pod_has_a_readiness_probe()
         {
            gate_false_while_terminating(CASE);
        }

        /// Upstream's "should mark readiness on pods to false and disable
        /// liveness probes while pod is in progress of terminating", for the
        /// gate: as the test above, then no liveness failure.
        #[test]
        #[ignore = $ignore]
        fn should_mark_the_gate_false_and_disable_liveness_probes_while_pod_is_in_progress_of_terminating()
         {
            gate_false_and_no_liveness_while_terminating(CASE);
        }
    };
    (@shared $target:expr, $variant:expr, $ignore:literal) => {
        use crate::*;

        const CASE: Case = Case {
            target: $target,
            variant: $variant,
        };

        /// "with readiness probe should not be ready before initial delay and never restart"
        #[test]
        #[ignore = $ignore]
        fn with_readiness_probe_should_not_be_ready_before_initial_delay_and_never_restart() {
            readiness_initial_delay(CASE);
        }

        /// "with readiness probe that fails should never be ready and never restart"
        #[test]
        #[ignore = $ignore]
        fn with_readiness_probe_that_fails_should_never_be_ready_and_never_restart() {
            readiness_fails(CASE);
        }

        /// "should be restarted with a exec \"cat /tmp/health\" liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_with_a_exec_cat_tmp_health_liveness_probe() {
            exec_cat_health_restart(CASE);
        }

        /// "should *not* be restarted with a exec \"cat /tmp/health\" liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_restarted_with_a_exec_cat_tmp_health_liveness_probe() {
            exec_cat_health_no_restart(CASE);
        }

        /// "should be restarted with a /healthz http liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_with_a_healthz_http_liveness_probe() {
            healthz_restart(CASE);
        }

        /// "should *not* be restarted with a tcp:8080 liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_restarted_with_a_tcp_8080_liveness_probe() {
            tcp_no_restart(CASE);
        }

        /// "should have monotonically increasing restart count"
        #[test]
        #[ignore = $ignore]
        fn should_have_monotonically_increasing_restart_count() {
            monotonic_restarts(CASE);
        }

        /// "should *not* be restarted with a /healthz http liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_restarted_with_a_healthz_http_liveness_probe() {
            healthz_no_restart(CASE);
        }

        /// "should be restarted with an exec liveness probe with timeout"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_with_an_exec_liveness_probe_with_timeout() {
            exec_liveness_timeout(CASE);
        }

        /// "should not be ready with an exec readiness probe timeout"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_ready_with_an_exec_readiness_probe_timeout() {
            exec_readiness_timeout(CASE);
        }

        /// "should be restarted with a failing exec liveness probe that took longer than the timeout"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_with_a_failing_exec_liveness_probe_that_took_longer_than_the_timeout()
        {
            failing_exec_longer_than_timeout(CASE);
        }

        /// "should be restarted with a local redirect http liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_with_a_local_redirect_http_liveness_probe() {
            local_redirect_restart(CASE);
        }

        /// "should *not* be restarted with a non-local redirect http liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_restarted_with_a_non_local_redirect_http_liveness_probe() {
            non_local_redirect_no_restart(CASE);
        }

        /// "should be restarted startup probe fails"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_startup_probe_fails() {
            startup_fails_restart(CASE);
        }

        /// "should *not* be restarted by liveness probe because startup probe delays it"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_restarted_by_liveness_probe_because_startup_probe_delays_it() {
            startup_delays_liveness(CASE);
        }

        /// "should be restarted by liveness probe after startup probe enables it"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_by_liveness_probe_after_startup_probe_enables_it() {
            liveness_after_startup(CASE);
        }

        /// "should be ready immediately after startupProbe succeeds"
        #[test]
        #[ignore = $ignore]
        fn should_be_ready_immediately_after_startup_probe_succeeds() {
            ready_right_after_startup(CASE);
        }

        /// "should override timeoutGracePeriodSeconds when LivenessProbe field is set"
        #[test]
        #[ignore = $ignore]
        fn should_override_timeout_grace_period_seconds_when_liveness_probe_field_is_set() {
            liveness_grace_override(CASE);
        }

        /// "should override timeoutGracePeriodSeconds when StartupProbe field is set"
        #[test]
        #[ignore = $ignore]
        fn should_override_timeout_grace_period_seconds_when_startup_probe_field_is_set() {
            startup_grace_override(CASE);
        }

        /// "should *not* be restarted with a GRPC liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_not_be_restarted_with_a_grpc_liveness_probe() {
            grpc_no_restart(CASE);
        }

        /// "should be restarted with a GRPC liveness probe"
        #[test]
        #[ignore = $ignore]
        fn should_be_restarted_with_a_grpc_liveness_probe() {
            grpc_restart(CASE);
        }
    };
    ($target:expr, $variant:expr, $ignore:literal) => {
        // Gate mode's termination tests check the gate, not `Ready`: they
        // come from the `gate` arm, under their own names.
        const _: () = assert!(
            !matches!($target, Target::Gate),
            "gate mode is `scenarios!(gate, ...)`"
        );
        scenarios!(@shared $target, $variant, $ignore);

        /// "should mark readiness on pods to false while pod is in progress of
        /// terminating when a pod has a readiness probe"
        #[test]
        #[ignore = $ignore]
        fn should_mark_readiness_on_pods_to_false_while_pod_is_in_progress_of_terminating_when_a_pod_has_a_readiness_probe()
         {
            not_ready_while_terminating(CASE);
        }

        /// "should mark readiness on pods to false and disable liveness probes
        /// while pod is in progress of terminating"
        #[test]
        #[ignore = $ignore]
        fn should_mark_readiness_on_pods_to_false_and_disable_liveness_probes_while_pod_is_in_progress_of_terminating()
         {
            not_ready_and_no_liveness_while_terminating(CASE);
        }
    };
}

/// "Probing container", gate mode.
mod container {
    scenarios!(
        gate,
        Variant::Container,
        "needs the local cluster (hack/test.sh runs it)"
    );
}

/// "Probing restartable init container" (`SidecarContainers`), gate mode.
mod restartable_init_container {
    scenarios!(
        gate,
        Variant::RestartableInit,
        "needs the local cluster (hack/test.sh runs it)"
    );
}

/// Upstream's `test/e2e/common/node/pods.go` "should support pod
/// readiness gates": a pod with two readiness gates whose conditions the
/// test patches; `Ready` follows them. With probes in the spec on the
/// agent node podprobe owns `Ready`, so it must recompute it from the
/// gates as the kubelet does.
fn readiness_gates(target: Target) {
    const GATE_1: &str = "k8s.io/test-condition1";
    const GATE_2: &str = "k8s.io/test-condition2";
    let case = Case {
        target,
        variant: Variant::Container,
    };
    let ns = case.setup("readinessgates");
    let mut pod = case.pod(
        "pod-ready",
        "pod-readiness-gate",
        BUSYBOX_IMAGE,
        &["/bin/sh", "-c", "echo container is alive; sleep 10000"],
        &[],
        json!({}),
    );
    pod["spec"]["readinessGates"] = json!([{"conditionType": GATE_1}, {"conditionType": GATE_2}]);
    let name = name_of(&pod);
    let is_ready = |p: &Value| status(p, "Ready").as_deref() == Some("True");
    // Upstream polls every second for a minute.
    let validate_pod_readiness = |expect_ready: bool| {
        ns.wait_for(
            &format!("{name}: Ready {expect_ready}"),
            Duration::from_secs(60),
            || {
                let p = ns.pod(&name)?;
                if is_ready(&p) == expect_ready {
                    Ok(())
                } else {
                    Err(format!("conditions {}", p["status"]["conditions"]))
                }
            },
        )
    };
    let patch_gate = |gate: &str, status: &str| {
        let patch = json!({"status": {"conditions": [{"type": gate, "status": status}]}});
        ns.kubectl(&[
            "patch",
            "pod",
            &name,
            "--subresource=status",
            "--type=strategic",
            "-p",
            &patch.to_string(),
        ]);
    };

    let p = create_and_start(&ns, &pod);
    assert!(
        !is_ready(&p),
        "Expect pod {name}'s Ready condition to be false initially\n{}",
        ns.diagnostics()
    );

    patch_gate(GATE_1, "True");
    // Upstream sleeps one kubelet sync loop (10 s) and checks once; this
    // checks all along.
    ns.holds_for(
        &format!("{name} not Ready with only {GATE_1} True"),
        Duration::from_secs(10),
        || {
            let p = ns.pod(&name)?;
            if is_ready(&p) {
                Err("Ready True with only one readiness gate True".to_string())
            } else {
                Ok(())
            }
        },
    );

    patch_gate(GATE_2, "True");
    validate_pod_readiness(true);

    patch_gate(GATE_1, "False");
    validate_pod_readiness(false);
}

/// The scenarios with the probes in the pod spec, for `$target`: both
/// variants, and upstream's readiness-gates test.
macro_rules! spec_probe_scenarios {
    ($target:expr, $ignore:literal) => {
        /// "Probing container".
        mod container {
            scenarios!($target, Variant::Container, $ignore);
        }

        /// "Probing restartable init container" (`SidecarContainers`).
        mod restartable_init_container {
            scenarios!($target, Variant::RestartableInit, $ignore);
        }

        /// "Pods should support pod readiness gates" (`pods.go`).
        #[test]
        #[ignore = $ignore]
        fn should_support_pod_readiness_gates() {
            crate::readiness_gates($target);
        }
    };
}

/// Authority mode: the pods on the agent node, probed by podprobe.
mod authority {
    spec_probe_scenarios!(
        crate::Target::Authority,
        "needs the local cluster and the agent node (hack/test.sh runs it)"
    );
}

/// The reference: the same pods on the kubelet's node, probed by the
/// kubelet.
mod kubelet {
    spec_probe_scenarios!(
        crate::Target::Kubelet,
        "needs the local cluster (hack/test.sh runs it)"
    );
}
