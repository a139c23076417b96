//! Upstream's probe e2e scenarios (`test/e2e/common/node/container_probe.go`,
//! "Probing container" and "Probing restartable init container") ported to
//! gate mode: the probes live in the `podprobe.io/probes` annotation, the pod
//! lists the `podprobe.io/ready` readiness gate, and podprobe runs as the real
//! DaemonSet (`tests/e2e`) next to the real kubelet of `hack/local-cluster.sh`.
//!
//! Each scenario runs twice, as a regular container (`container::*`) and as a
//! restartable init container (`restartable_init_container::*`), with the
//! test named after the upstream `It`. Upstream's timings (15 s initial
//! delays, 4 min observation windows) are scaled down so the file runs in a
//! few minutes; `tests/UPSTREAM_E2E.md` lists every upstream scenario and how
//! it maps here.
//!
//! `#[ignore]`d like `e2e_gate`: `hack/test.sh` deploys podprobe and runs them
//! with `--ignored`.

#[path = "support/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cluster::{
    AGNHOST_IMAGE, BUSYBOX_IMAGE, GATE, Namespace, condition, ensure_podprobe, gated_pod, unique_id,
};

/// How long a restart may take to show: probe delay and period, the kill's
/// grace period, the kubelet's restart and status sync, on a busy machine.
const RESTART: Duration = Duration::from_secs(90);
/// Upstream's 4 min "nothing happens" window, scaled down: several probe
/// periods past the point where a wrong verdict would have restarted.
const OBSERVE: Duration = Duration::from_secs(20);
const START: Duration = Duration::from_secs(120);

/// A busybox loop that runs until stopped and exits 0 on SIGTERM.
const SLEEP_LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// Where the probed container sits: upstream runs every scenario both ways.
#[derive(Clone, Copy, Debug)]
enum Variant {
    /// `spec.containers[0]`.
    Container,
    /// `spec.initContainers[0]` with `restartPolicy: Always` (a sidecar),
    /// next to a main container that only sleeps.
    RestartableInit,
}

impl Variant {
    /// A gated pod whose probed container `name` runs `image` with `command`
    /// and `args` and has `probes` in the annotation.
    fn pod(
        self,
        pod: &str,
        name: &str,
        image: &str,
        command: &[&str],
        args: &[&str],
        probes: Value,
    ) -> Value {
        let mut pod = gated_pod(pod, name, image, command, args, probes);
        if let Variant::RestartableInit = self {
            let mut sidecar = pod["spec"]["containers"][0].take();
            sidecar["restartPolicy"] = json!("Always");
            pod["spec"]["initContainers"] = json!([sidecar]);
            pod["spec"]["containers"] = json!([{
                "name": "main",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", SLEEP_LOOP],
            }]);
        }
        pod
    }

    /// The kubelet's `Killing` message for a liveness kill of `name`.
    fn liveness_kill_message(self, name: &str) -> String {
        match self {
            Variant::Container => {
                format!("Container {name} failed liveness probe, will be restarted")
            }
            Variant::RestartableInit => format!("Init container {name} failed liveness probe"),
        }
    }

    /// The involved object's field path of the probed container's events.
    fn field_path(self, name: &str) -> String {
        match self {
            Variant::Container => format!("spec.containers{{{name}}}"),
            Variant::RestartableInit => format!("spec.initContainers{{{name}}}"),
        }
    }
}

/// A busybox pod running `sh -c script`, probed as container `busybox`.
fn busybox(variant: Variant, script: &str, probes: Value) -> Value {
    variant.pod(
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
fn agnhost_liveness(variant: Variant, probes: Value) -> Value {
    variant.pod(
        "liveness",
        "agnhost",
        AGNHOST_IMAGE,
        &[],
        &["liveness"],
        probes,
    )
}

/// agnhost `test-webserver` on port 80 (answers 200 on `/`).
fn test_webserver(variant: Variant, probes: Value) -> Value {
    variant.pod(
        "test-webserver",
        "test-webserver",
        AGNHOST_IMAGE,
        &[],
        &["test-webserver", "--port", "80"],
        probes,
    )
}

/// agnhost `grpc-health-checking`: SERVING on gRPC port 5000.
fn grpc_server(variant: Variant, probes: Value) -> Value {
    variant.pod(
        "grpc",
        "agnhost",
        AGNHOST_IMAGE,
        &[],
        &["grpc-health-checking", "--port=5000", "--http-port=8080"],
        probes,
    )
}

/// The namespace of one test, with podprobe's DaemonSet running: a rolled
/// out one is used as it is (`hack/test.sh` deploys it just before), else it
/// is deployed from this tree.
fn setup(test: &str) -> Namespace {
    ensure_podprobe();
    Namespace::create(&format!("podprobe-up-{test}-{}", unique_id()))
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

/// The status of `container` in either status list.
fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    let status = &pod["status"];
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .flat_map(|list| status[*list].as_array().into_iter().flatten())
        .find(|s| s["name"] == container)
}

fn restarts(pod: &Value, container: &str) -> Option<u64> {
    container_status(pod, container)?["restartCount"].as_u64()
}

fn status(pod: &Value, kind: &str) -> Option<String> {
    condition(pod, kind).map(|(status, _)| status)
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`...Z`, as the API
/// server writes them).
fn epoch_seconds(rfc3339: &str) -> Option<i64> {
    let (date, time) = rfc3339.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(str::parse::<i64>);
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(str::parse::<i64>);
    let (h, min, s) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + s)
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

/// Waits until the gate and `Ready` are both `want`; returns the pod.
fn wait_ready(ns: &Namespace, pod: &str, want: bool) -> Value {
    let want = if want { "True" } else { "False" };
    ns.wait_for(&format!("{pod}: {GATE} and Ready {want}"), START, || {
        let p = ns.pod(pod)?;
        match (status(&p, GATE), status(&p, "Ready")) {
            (Some(g), Some(r)) if g == want && r == want => Ok(p),
            seen => Err(format!("(gate, Ready) = {seen:?}")),
        }
    })
}

/// Upstream's `runReadinessFailTest`: never ready for `window`.
fn never_ready(ns: &Namespace, pod: &str, window: Duration) {
    ns.holds_for(&format!("{pod} never ready"), window, || {
        let p = ns.pod(pod)?;
        match (status(&p, GATE), status(&p, "Ready")) {
            (Some(g), _) | (_, Some(g)) if g == "True" => {
                Err("the gate or Ready turned True".to_string())
            }
            _ => Ok(()),
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

fn readiness_initial_delay(variant: Variant) {
    const DELAY: i64 = 5;
    let ns = setup("initdelay");
    let probes = json!({"readinessProbe": probe(http_get("/", 80),
        json!({"initialDelaySeconds": DELAY, "periodSeconds": 1}))});
    let pod = test_webserver(variant, probes);
    let (name, container) = (name_of(&pod), probed_name(&pod));
    create_and_start(&ns, &pod);
    let p = wait_ready(&ns, &name, true);
    let started = container_status(&p, &container)
        .and_then(|s| s["state"]["running"]["startedAt"].as_str())
        .and_then(epoch_seconds)
        .expect("startedAt of the running container");
    for kind in [GATE, "Ready"] {
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

fn readiness_fails(variant: Variant) {
    let ns = setup("readyfail");
    // Nothing listens on 81.
    let probes = json!({"readinessProbe": probe(http_get("/", 81), json!({"periodSeconds": 1}))});
    let pod = test_webserver(variant, probes);
    create_and_start(&ns, &pod);
    never_ready(&ns, &name_of(&pod), OBSERVE);
    let p = ns.pod(&name_of(&pod)).expect("pod");
    assert_eq!(restarts(&p, &probed_name(&pod)), Some(0));
}

/// Upstream's liveness probe shape: delay, generous timeout, one failure.
fn liveness(handler: Value, delay: u32) -> Value {
    json!({"livenessProbe": probe(handler, json!({
        "initialDelaySeconds": delay, "timeoutSeconds": 5, "failureThreshold": 1, "periodSeconds": 2,
    }))})
}

fn exec_cat_health_restart(variant: Variant) {
    let ns = setup("catrestart");
    let script = "echo ok >/tmp/health; sleep 3; rm -rf /tmp/health; sleep 600";
    let pod = busybox(variant, script, liveness(exec(&["cat", "/tmp/health"]), 5));
    run_liveness_test(&ns, &pod, 1, RESTART);
    let field_path = variant.field_path("busybox");
    let message = variant.liveness_kill_message("busybox");
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

fn exec_cat_health_no_restart(variant: Variant) {
    let ns = setup("catok");
    let script = "echo ok >/tmp/health; sleep 600";
    let pod = busybox(variant, script, liveness(exec(&["cat", "/tmp/health"]), 2));
    run_liveness_test(&ns, &pod, 0, OBSERVE);
}

fn healthz_restart(variant: Variant) {
    let ns = setup("healthz");
    let pod = agnhost_liveness(variant, liveness(http_get("/healthz", 8080), 3));
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn tcp_no_restart(variant: Variant) {
    let ns = setup("tcp");
    // /healthz fails after 10 s, but the socket stays open.
    let pod = agnhost_liveness(variant, liveness(json!({"tcpSocket": {"port": 8080}}), 3));
    run_liveness_test(&ns, &pod, 0, OBSERVE);
}

fn monotonic_restarts(variant: Variant) {
    // Upstream counts 5 restarts (minutes of CrashLoopBackOff); 2 show the
    // same thing: every time /healthz turns bad the container is restarted.
    let ns = setup("monotonic");
    let pod = agnhost_liveness(variant, liveness(http_get("/healthz", 8080), 3));
    run_liveness_test(&ns, &pod, 2, RESTART * 2);
}

fn healthz_no_restart(variant: Variant) {
    let ns = setup("webok");
    let probes = json!({"livenessProbe": probe(http_get("/", 80), json!({
        "initialDelaySeconds": 3, "timeoutSeconds": 5, "failureThreshold": 5, "periodSeconds": 2,
    }))});
    run_liveness_test(&ns, &test_webserver(variant, probes), 0, OBSERVE);
}

/// An exec probe that outlives its 1 s timeout.
fn slow_exec(kind: &str, command: &str) -> Value {
    json!({kind: probe(exec(&["/bin/sh", "-c", command]), json!({
        "initialDelaySeconds": 2, "timeoutSeconds": 1, "failureThreshold": 1, "periodSeconds": 2,
    }))})
}

fn exec_liveness_timeout(variant: Variant) {
    let ns = setup("exectimeout");
    let pod = busybox(variant, "sleep 600", slow_exec("livenessProbe", "sleep 10"));
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn exec_readiness_timeout(variant: Variant) {
    let ns = setup("readytimeout");
    let pod = busybox(
        variant,
        "sleep 600",
        slow_exec("readinessProbe", "sleep 10"),
    );
    create_and_start(&ns, &pod);
    never_ready(&ns, &name_of(&pod), OBSERVE);
}

fn failing_exec_longer_than_timeout(variant: Variant) {
    let ns = setup("execfail");
    let pod = busybox(
        variant,
        "sleep 600",
        slow_exec("livenessProbe", "sleep 10 & exit 1"),
    );
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn local_redirect_restart(variant: Variant) {
    let ns = setup("localredirect");
    let pod = agnhost_liveness(
        variant,
        liveness(http_get("/redirect?loc=%2Fhealthz", 8080), 3),
    );
    run_liveness_test(&ns, &pod, 1, RESTART);
}

fn non_local_redirect_no_restart(variant: Variant) {
    let ns = setup("remoteredirect");
    let pod = agnhost_liveness(
        variant,
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

fn startup_fails_restart(variant: Variant) {
    let ns = setup("startupfail");
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/true"]), json!({"initialDelaySeconds": 3, "failureThreshold": 1})),
        "startupProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 3, "periodSeconds": 1})),
    });
    run_liveness_test(&ns, &busybox(variant, "sleep 600", probes), 1, RESTART);
}

fn startup_delays_liveness(variant: Variant) {
    let ns = setup("startupdelay");
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 1})),
        "startupProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 60, "periodSeconds": 1})),
    });
    run_liveness_test(&ns, &busybox(variant, "sleep 600", probes), 0, OBSERVE);
}

fn liveness_after_startup(variant: Variant) {
    let ns = setup("afterstartup");
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/false"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 1})),
        "startupProbe": probe(exec(&["cat", "/tmp/startup"]),
            json!({"initialDelaySeconds": 3, "failureThreshold": 60, "periodSeconds": 1})),
    });
    let script = "sleep 3; echo ok >/tmp/startup; sleep 600";
    run_liveness_test(&ns, &busybox(variant, script, probes), 1, RESTART);
}

fn ready_right_after_startup(variant: Variant) {
    // Upstream: readiness every 30 s, ready within 25 s of startup success,
    // so readiness must run as soon as startup succeeds. Scaled: every 30 s,
    // ready within 10 s of the startup file appearing.
    let ns = setup("readyafterstartup");
    let probes = json!({
        "readinessProbe": probe(exec(&["/bin/cat", "/tmp/health"]), json!({"periodSeconds": 30})),
        "startupProbe": probe(exec(&["/bin/cat", "/tmp/startup"]),
            json!({"failureThreshold": 120, "periodSeconds": 1})),
    });
    let pod = busybox(
        variant,
        &format!("echo ok >/tmp/health; {SLEEP_LOOP}"),
        probes,
    );
    let name = name_of(&pod);
    create_and_start(&ns, &pod);
    never_ready(&ns, &name, Duration::from_secs(5));
    let started = Instant::now();
    let mut cmd = vec!["exec", name.as_str()];
    let container = probed_name(&pod);
    cmd.extend(["-c", &container, "--", "sh", "-c", "echo ok >/tmp/startup"]);
    ns.kubectl(&cmd);
    wait_ready(&ns, &name, true);
    let ready_in = started.elapsed();
    assert!(
        ready_in <= Duration::from_secs(10),
        "ready {ready_in:?} after the startup probe could succeed: readiness did not run right after startup\n{}",
        ns.diagnostics()
    );
}

/// A pod that ignores SIGTERM with a 500 s grace period, whose `probes` use
/// a probe-level 2 s grace period: only that makes the restart quick.
fn grace_override(variant: Variant, test: &str, probes: Value) {
    let ns = setup(test);
    let mut pod = busybox(
        variant,
        "trap '' TERM; while true; do sleep 1; done",
        probes,
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(500);
    run_liveness_test(&ns, &pod, 1, Duration::from_secs(60));
    delete_now(&ns, &name_of(&pod));
}

fn liveness_grace_override(variant: Variant) {
    // Nothing listens on 8080.
    let probes = json!({"livenessProbe": probe(http_get("/healthz", 8080), json!({
        "initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 2, "terminationGracePeriodSeconds": 2,
    }))});
    grace_override(variant, "livegrace", probes);
}

fn startup_grace_override(variant: Variant) {
    let probes = json!({
        "livenessProbe": probe(exec(&["/bin/true"]), json!({"initialDelaySeconds": 3, "failureThreshold": 1})),
        "startupProbe": probe(exec(&["/bin/cat", "/tmp/startup"]), json!({
            "initialDelaySeconds": 3, "failureThreshold": 1, "periodSeconds": 2, "terminationGracePeriodSeconds": 2,
        })),
    });
    grace_override(variant, "startgrace", probes);
}

fn grpc_no_restart(variant: Variant) {
    let ns = setup("grpcok");
    let pod = grpc_server(variant, liveness(json!({"grpc": {"port": 5000}}), 3));
    run_liveness_test(&ns, &pod, 0, OBSERVE);
}

fn grpc_restart(variant: Variant) {
    let ns = setup("grpcbad");
    // Nothing serves gRPC on 2333.
    let pod = grpc_server(variant, liveness(json!({"grpc": {"port": 2333}}), 3));
    run_liveness_test(&ns, &pod, 1, RESTART);
}

/// Upstream's terminating pod: on SIGTERM it removes its probe files and
/// keeps running for a while; returns the namespace and pod name once the
/// pod is Ready and its deletion started.
fn terminate_ready_pod(variant: Variant, test: &str, probes: Value) -> (Namespace, String) {
    let ns = setup(test);
    let script = "trap 'rm -f /tmp/ready /tmp/liveness; sleep 10; exit 0' TERM; \
                  touch /tmp/ready /tmp/liveness; while true; do sleep 1; done";
    let mut pod = busybox(variant, script, probes);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(15);
    let name = name_of(&pod);
    create_and_start(&ns, &pod);
    wait_ready(&ns, &name, true);
    ns.kubectl(&["delete", "pod", &name, "--wait=false"]);
    (ns, name)
}

/// Waits until podprobe's gate turns False while `pod` still exists (its
/// readiness probe kept running after SIGTERM). `Ready` is the kubelet's to
/// recompute; it is reported, not required (see `tests/UPSTREAM_E2E.md`).
fn gate_false_while_terminating(ns: &Namespace, pod: &str) {
    let p = ns.wait_for(
        &format!("{pod}: {GATE} False while terminating"),
        START,
        || {
            let p = ns.pod(pod)?;
            match status(&p, GATE).as_deref() {
                Some("False") => Ok(p),
                seen => Err(format!("gate {seen:?}")),
            }
        },
    );
    assert!(p["metadata"]["deletionTimestamp"].is_string(), "{p:#}");
    eprintln!(
        "{pod}: gate False while terminating; Ready {:?}",
        status(&p, "Ready")
    );
}

fn not_ready_while_terminating(variant: Variant) {
    let probes = json!({"readinessProbe": probe(exec(&["cat", "/tmp/ready"]),
        json!({"failureThreshold": 1, "initialDelaySeconds": 1, "periodSeconds": 1}))});
    let (ns, name) = terminate_ready_pod(variant, "terminating", probes);
    gate_false_while_terminating(&ns, &name);
}

fn not_ready_and_no_liveness_while_terminating(variant: Variant) {
    let probes = json!({
        "readinessProbe": probe(exec(&["cat", "/tmp/ready"]),
            json!({"failureThreshold": 1, "initialDelaySeconds": 1, "periodSeconds": 1})),
        "livenessProbe": probe(exec(&["cat", "/tmp/liveness"]),
            json!({"failureThreshold": 1, "initialDelaySeconds": 1, "periodSeconds": 1})),
    });
    let (ns, name) = terminate_ready_pod(variant, "terminatinglive", probes);
    gate_false_while_terminating(&ns, &name);
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

/// One `#[test]` per upstream `It`, named after it, for one [`Variant`].
macro_rules! scenarios {
    ($variant:expr) => {
        use super::*;

        const VARIANT: Variant = $variant;

        /// "with readiness probe should not be ready before initial delay and never restart"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn with_readiness_probe_should_not_be_ready_before_initial_delay_and_never_restart() {
            readiness_initial_delay(VARIANT);
        }

        /// "with readiness probe that fails should never be ready and never restart"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn with_readiness_probe_that_fails_should_never_be_ready_and_never_restart() {
            readiness_fails(VARIANT);
        }

        /// "should be restarted with a exec \"cat /tmp/health\" liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_with_a_exec_cat_tmp_health_liveness_probe() {
            exec_cat_health_restart(VARIANT);
        }

        /// "should *not* be restarted with a exec \"cat /tmp/health\" liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_restarted_with_a_exec_cat_tmp_health_liveness_probe() {
            exec_cat_health_no_restart(VARIANT);
        }

        /// "should be restarted with a /healthz http liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_with_a_healthz_http_liveness_probe() {
            healthz_restart(VARIANT);
        }

        /// "should *not* be restarted with a tcp:8080 liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_restarted_with_a_tcp_8080_liveness_probe() {
            tcp_no_restart(VARIANT);
        }

        /// "should have monotonically increasing restart count"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_have_monotonically_increasing_restart_count() {
            monotonic_restarts(VARIANT);
        }

        /// "should *not* be restarted with a /healthz http liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_restarted_with_a_healthz_http_liveness_probe() {
            healthz_no_restart(VARIANT);
        }

        /// "should be restarted with an exec liveness probe with timeout"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_with_an_exec_liveness_probe_with_timeout() {
            exec_liveness_timeout(VARIANT);
        }

        /// "should not be ready with an exec readiness probe timeout"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_ready_with_an_exec_readiness_probe_timeout() {
            exec_readiness_timeout(VARIANT);
        }

        /// "should be restarted with a failing exec liveness probe that took longer than the timeout"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_with_a_failing_exec_liveness_probe_that_took_longer_than_the_timeout()
        {
            failing_exec_longer_than_timeout(VARIANT);
        }

        /// "should be restarted with a local redirect http liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_with_a_local_redirect_http_liveness_probe() {
            local_redirect_restart(VARIANT);
        }

        /// "should *not* be restarted with a non-local redirect http liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_restarted_with_a_non_local_redirect_http_liveness_probe() {
            non_local_redirect_no_restart(VARIANT);
        }

        /// "should be restarted startup probe fails"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_startup_probe_fails() {
            startup_fails_restart(VARIANT);
        }

        /// "should *not* be restarted by liveness probe because startup probe delays it"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_restarted_by_liveness_probe_because_startup_probe_delays_it() {
            startup_delays_liveness(VARIANT);
        }

        /// "should be restarted by liveness probe after startup probe enables it"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_by_liveness_probe_after_startup_probe_enables_it() {
            liveness_after_startup(VARIANT);
        }

        /// "should be ready immediately after startupProbe succeeds"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_ready_immediately_after_startup_probe_succeeds() {
            ready_right_after_startup(VARIANT);
        }

        /// "should override timeoutGracePeriodSeconds when LivenessProbe field is set"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_override_timeout_grace_period_seconds_when_liveness_probe_field_is_set() {
            liveness_grace_override(VARIANT);
        }

        /// "should override timeoutGracePeriodSeconds when StartupProbe field is set"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_override_timeout_grace_period_seconds_when_startup_probe_field_is_set() {
            startup_grace_override(VARIANT);
        }

        /// "should *not* be restarted with a GRPC liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_not_be_restarted_with_a_grpc_liveness_probe() {
            grpc_no_restart(VARIANT);
        }

        /// "should be restarted with a GRPC liveness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_be_restarted_with_a_grpc_liveness_probe() {
            grpc_restart(VARIANT);
        }

        /// "should mark readiness on pods to false while pod is in progress of
        /// terminating when a pod has a readiness probe"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_mark_readiness_on_pods_to_false_while_pod_is_in_progress_of_terminating_when_a_pod_has_a_readiness_probe()
         {
            not_ready_while_terminating(VARIANT);
        }

        /// "should mark readiness on pods to false and disable liveness probes
        /// while pod is in progress of terminating"
        #[test]
        #[ignore = "needs the local cluster (hack/test.sh runs it)"]
        fn should_mark_readiness_on_pods_to_false_and_disable_liveness_probes_while_pod_is_in_progress_of_terminating()
         {
            not_ready_and_no_liveness_while_terminating(VARIANT);
        }
    };
}

/// "Probing container".
mod container {
    scenarios!(Variant::Container);
}

/// "Probing restartable init container" (`SidecarContainers`).
mod restartable_init_container {
    scenarios!(Variant::RestartableInit);
}
