//! Differential end-to-end tests of authority mode: the kubelet's own prober
//! is the reference.
//!
//! Each scenario creates the same pod spec (probes in the spec) twice in one
//! namespace: `kubelet`, which the scheduler puts on the kubelet's node (the
//! agent node is tainted), probed natively; and `agent`, bound to the agent
//! node of `hack/agent-node.sh`, whose CRI agent has no prober and where
//! podprobe `--mode authority` owns container `ready`/`started` and the
//! `ContainersReady`/`Ready` conditions. The pods' containers change on a
//! schedule of their own (the agent node has no `kubectl exec`) or the test
//! patches both pods' status. A watch delivers every version of both pods;
//! each phase is met by each pod in the version that stands for it
//! ([`settled`]), then [`differences`] compares the two: per container `ready`,
//! `started` and `restartCount`, and `ContainersReady`/`Ready` with their
//! status, reason, message and (relative) transition time.
//!
//! `#[ignore]`d like the other cluster tests: `hack/test.sh` brings the
//! cluster and the agent node up and runs them with `--ignored`.

#[path = "support/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cluster::{
    AGNHOST_IMAGE, BUSYBOX_IMAGE, Namespace, PodVersion, PodWatch, SLEEP_LOOP, condition,
    container_status, ensure_agent_node, epoch_seconds, now_epoch_seconds, sidecar, spec_pod,
    unique_id,
};

/// From creation to the first phase: image, sandbox, network, first probes.
const START: Duration = Duration::from_secs(120);
/// From one phase to the next when it takes a few probe periods.
const FLIP: Duration = Duration::from_secs(60);
/// A liveness restart, with CrashLoopBackOff after the first.
const RESTART: Duration = Duration::from_secs(90);

/// The two copies of each scenario's pod.
const KUBELET: &str = "kubelet";
const AGENT: &str = "agent";
const COPIES: [&str; 2] = [KUBELET, AGENT];

/// The conditions podprobe owns in authority mode.
const CONDITIONS: [&str; 2] = ["ContainersReady", "Ready"];

/// Slack on transition times, on top of one probe period. The API server's
/// timestamps are whole seconds (truncated), so each of the two relative
/// times compared (`lastTransitionTime - anchor`) is off by less than 1 s
/// and their difference by less than 2 s.
const TIMESTAMP_SLACK: i64 = 2;

/// What a phase's transition times are measured from, in each pod.
#[derive(Clone, Copy, Debug)]
enum Anchor {
    /// The `startedAt` of this container's current run.
    Started(&'static str),
    /// When the test acted on each pod (`[kubelet, agent]`, epoch seconds).
    At([i64; 2]),
}

impl Anchor {
    /// The anchor of `pod` (copy `index` of [`COPIES`]), in epoch seconds.
    fn of(self, pod: &Value, index: usize) -> Option<i64> {
        match self {
            Anchor::Started(container) => container_status(pod, container)
                .and_then(|s| s["state"]["running"]["startedAt"].as_str())
                .and_then(epoch_seconds),
            Anchor::At(at) => Some(at[index]),
        }
    }
}

/// The container names of `pod`'s status lists, init containers first.
fn status_names(pod: &Value) -> Vec<String> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|list| pod["status"][*list].as_array().into_iter().flatten())
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect()
}

/// The condition `type_` of `pod`, or `Null`.
fn condition_of<'a>(pod: &'a Value, type_: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// Every way the `agent` copy's readiness differs from the `kubelet`
/// copy's, one line per field (empty when they agree):
///
/// - per container (init and regular), `ready`, `started` and
///   `restartCount`, and its presence;
/// - `ContainersReady` and `Ready`: `status`, `reason`, `message`;
/// - their `lastTransitionTime`, measured from each pod's anchor
///   (`anchors`, epoch seconds: `[kubelet, agent]`), may differ by one probe
///   `period` (the probers' ticks are not in phase) plus
///   [`TIMESTAMP_SLACK`]; a condition that changed no later than the anchor
///   in both pods belongs to an earlier phase and is not compared.
fn differences(
    kubelet: &Value,
    agent: &Value,
    anchors: [Option<i64>; 2],
    period: i64,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut names = status_names(kubelet);
    for name in status_names(agent) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    for name in &names {
        match (
            container_status(kubelet, name),
            container_status(agent, name),
        ) {
            (Some(k), Some(a)) => {
                for field in ["ready", "started", "restartCount"] {
                    if k[field] != a[field] {
                        out.push(format!(
                            "container {name} {field}: kubelet {}, agent {}",
                            k[field], a[field]
                        ));
                    }
                }
            }
            (k, a) => out.push(format!(
                "container {name} status: kubelet {}, agent {}",
                if k.is_some() { "present" } else { "missing" },
                if a.is_some() { "present" } else { "missing" },
            )),
        }
    }
    for (i, anchor) in anchors.iter().enumerate() {
        if anchor.is_none() {
            out.push(format!(
                "{}: no anchor to measure transition times from",
                COPIES[i]
            ));
        }
    }
    let allowed = period + TIMESTAMP_SLACK;
    for type_ in CONDITIONS {
        let (k, a) = (condition_of(kubelet, type_), condition_of(agent, type_));
        if k.is_null() || a.is_null() {
            if k.is_null() != a.is_null() {
                out.push(format!("condition {type_}: kubelet {k}, agent {a}"));
            }
            continue;
        }
        for field in ["status", "reason", "message"] {
            if k[field] != a[field] {
                out.push(format!(
                    "condition {type_} {field}: kubelet {}, agent {}",
                    k[field], a[field]
                ));
            }
        }
        let relative = |c: &Value, anchor: Option<i64>| {
            Some(epoch_seconds(c["lastTransitionTime"].as_str()?)? - anchor?)
        };
        match (relative(k, anchors[0]), relative(a, anchors[1])) {
            // No later than the anchor on both sides, in whole seconds:
            // not the probes' doing in this phase (e.g. the first False,
            // written when each pod started; the two nodes' start-up times
            // differ).
            (Some(k), Some(a)) if k <= 0 && a <= 0 => {}
            (Some(k), Some(a)) if (k - a).abs() > allowed => out.push(format!(
                "condition {type_} lastTransitionTime: kubelet {k:+}s, agent {a:+}s from the anchor \
                 (may differ by {allowed}s)"
            )),
            (Some(_), Some(_)) => {}
            (k_at, a_at) if anchors.iter().all(Option::is_some) => out.push(format!(
                "condition {type_} lastTransitionTime: kubelet {k_at:?}, agent {a_at:?} ({}, {})",
                k["lastTransitionTime"], a["lastTransitionTime"]
            )),
            _ => {}
        }
    }
    out
}

// ---- expectations: what one pod must show to be in a phase ---------------

fn container<'a>(pod: &'a Value, name: &str) -> Result<&'a Value, String> {
    container_status(pod, name).ok_or_else(|| format!("no status for container {name}"))
}

fn running(pod: &Value, name: &str) -> Result<(), String> {
    let c = container(pod, name)?;
    if c["state"]["running"].is_object() {
        Ok(())
    } else {
        Err(format!("{name} state {}", c["state"]))
    }
}

fn not_running(pod: &Value, name: &str) -> Result<(), String> {
    match container_status(pod, name) {
        Some(c) if c["state"]["running"].is_object() => Err(format!("{name} running")),
        _ => Ok(()),
    }
}

fn field_is(pod: &Value, name: &str, field: &str, want: bool) -> Result<(), String> {
    let c = container(pod, name)?;
    if c[field] == want {
        Ok(())
    } else {
        Err(format!("{name} {field} {}", c[field]))
    }
}

fn ready(pod: &Value, name: &str, want: bool) -> Result<(), String> {
    field_is(pod, name, "ready", want)
}

fn started(pod: &Value, name: &str, want: bool) -> Result<(), String> {
    field_is(pod, name, "started", want)
}

fn condition_is(pod: &Value, type_: &str, want: bool) -> Result<(), String> {
    let want = if want { "True" } else { "False" };
    match condition(pod, type_) {
        Some((status, _)) if status == want => Ok(()),
        seen => Err(format!("{type_} {seen:?}")),
    }
}

/// Exactly `count` restarts: the watch delivers every version, so each
/// node is compared at its own `count`th restart, however far the other
/// has run ahead by then.
fn restarted(pod: &Value, name: &str, count: u64) -> Result<(), String> {
    match container(pod, name)?["restartCount"].as_u64() {
        Some(n) if n == count => Ok(()),
        seen => Err(format!("{name} restartCount {seen:?}")),
    }
}

/// How long a version must last to stand for its phase: on the agent node
/// two writers update a pod one after the other (the agent reports a
/// container running, podprobe then its `started`, tens of milliseconds
/// later), and the version in between is no state the kubelet would ever
/// publish. Every phase of these scenarios lasts several probe periods
/// (≥ 1 s each).
const SETTLE: Duration = Duration::from_secs(1);

/// What one pod must show to be in a phase.
type Expect<'a> = &'a dyn Fn(&Value) -> Result<(), String>;

/// One step of a scenario.
struct Phase<'a> {
    what: &'a str,
    timeout: Duration,
    expect: Expect<'a>,
    anchor: Anchor,
}

/// Where a pod's versions stand against a phase (see [`settled`]).
#[derive(Debug, PartialEq)]
enum Settled {
    /// The phase was met; this version (an index into the versions given)
    /// stands for it.
    Met(usize),
    /// Not (yet): why.
    Waiting(String),
}

/// Finds, in one pod's `versions` (in the order the watch delivered them),
/// the version that stands for the phase `expect` describes: the first
/// matching version that lasted [`SETTLE`] (until the next version, or until
/// `now` for the last one); when the run of matching versions ended before
/// any lasted that long, the longest-lived of them (the phase was short,
/// but it happened). Versions before the first match belong to earlier
/// states and are skipped.
fn settled(versions: &[PodVersion], expect: Expect, now: Instant) -> Settled {
    let mut longest: Option<(usize, Duration)> = None;
    let mut why = "no version yet".to_string();
    for (i, version) in versions.iter().enumerate() {
        let until = versions.get(i + 1).map_or(now, |next| next.at);
        let lasted = until.saturating_duration_since(version.at);
        match expect(&version.pod) {
            Ok(()) if lasted >= SETTLE => return Settled::Met(i),
            Ok(()) => {
                if longest.is_none_or(|(_, l)| lasted > l) {
                    longest = Some((i, lasted));
                }
                why = format!("settling ({lasted:?} so far)");
            }
            Err(e) => match longest {
                Some((i, _)) => return Settled::Met(i),
                None => why = e,
            },
        }
    }
    Settled::Waiting(why)
}

/// One scenario's namespace, its two pods, and every version of them.
struct Differential {
    ns: Namespace,
    /// The probe period (seconds) transition times may differ by.
    period: i64,
    agent_node: String,
    watch: PodWatch,
    /// Every version of each copy (indexed as [`COPIES`]) seen so far.
    versions: [Vec<PodVersion>; 2],
    /// Per copy, the first version the next phase may be met in.
    next: [usize; 2],
}

impl Differential {
    /// Creates `build(name, node)` as [`KUBELET`] (no node: the scheduler
    /// picks the kubelet's) and as [`AGENT`] (bound to the agent node), and
    /// watches both from their creation.
    fn start(test: &str, period: i64, build: impl Fn(&str, Option<&str>) -> Value) -> Self {
        let agent_node = ensure_agent_node().name.clone();
        let ns = Namespace::create(&format!("podprobe-diff-{test}-{}", unique_id()));
        let watch = PodWatch::start(&ns.name);
        ns.create_pod(&build(KUBELET, None));
        ns.create_pod(&build(AGENT, Some(&agent_node)));
        Differential {
            ns,
            period,
            agent_node,
            watch,
            versions: [Vec::new(), Vec::new()],
            next: [0, 0],
        }
    }

    /// Takes what the watch delivers: waits until one version arrives or
    /// `until`, then takes whatever else is there already.
    fn receive(&mut self, until: Instant) {
        let mut deadline = until;
        loop {
            match self.watch.next_until(deadline) {
                Ok(Some(version)) => {
                    let name = version.pod["metadata"]["name"].as_str().unwrap_or_default();
                    if let Some(i) = COPIES.iter().position(|c| *c == name) {
                        self.versions[i].push(version);
                    }
                    deadline = Instant::now();
                }
                Ok(None) => return,
                Err(e) => panic!("{}: {e}\n{}", self.ns.name, self.ns.diagnostics()),
            }
        }
    }

    /// Follows each pod through `phases` in order, each at its own pace (the
    /// two containers do not start at the same instant), in every version
    /// the watch delivers, then compares the two pods as they were in the
    /// version that stands for each phase (see [`settled`]).
    fn run(&mut self, phases: &[Phase]) {
        let total: Duration = phases.iter().map(|p| p.timeout).sum();
        let deadline = Instant::now() + total;
        let mut at = [0usize; 2];
        let mut seen: Vec<[Option<Value>; 2]> = phases.iter().map(|_| [None, None]).collect();
        loop {
            let now = Instant::now();
            let mut waiting = Vec::new();
            for (i, copy) in COPIES.iter().enumerate() {
                while let Some(phase) = phases.get(at[i]) {
                    let from = self.next[i];
                    match settled(&self.versions[i][from..], phase.expect, now) {
                        Settled::Met(k) => {
                            seen[at[i]][i] = Some(self.versions[i][from + k].pod.clone());
                            self.next[i] = from + k + 1;
                            at[i] += 1;
                        }
                        Settled::Waiting(why) => {
                            waiting.push(format!("{copy} not yet {:?}: {why}", phase.what));
                            break;
                        }
                    }
                }
            }
            if waiting.is_empty() {
                break;
            }
            if now >= deadline {
                panic!(
                    "{}: timed out after {total:?} waiting for every phase on both pods \
                     ({} and {} versions seen); last: {}\n{}",
                    self.ns.name,
                    self.versions[0].len(),
                    self.versions[1].len(),
                    waiting.join("; "),
                    self.ns.diagnostics()
                );
            }
            self.receive(deadline.min(now + SETTLE));
        }
        for (phase, pods) in phases.iter().zip(seen) {
            let [Some(kubelet), Some(agent)] = pods else {
                unreachable!("every phase was met on both pods");
            };
            self.compare(phase.what, &[kubelet, agent], phase.anchor);
        }
    }

    /// Checks `holds` on every version of both pods for `period` (from the
    /// version current when it starts), then compares them as last seen.
    fn hold(&mut self, what: &str, period: Duration, holds: Expect, anchor: Anchor) {
        let start = Instant::now();
        self.receive(start);
        // The version current at the start: the last one delivered by then.
        let first = self.versions.each_ref().map(|v| v.len().saturating_sub(1));
        let end = start + period;
        while Instant::now() < end {
            self.receive(end);
        }
        for (i, copy) in COPIES.iter().enumerate() {
            let versions = &self.versions[i][first[i]..];
            assert!(!versions.is_empty(), "{copy}: no version of the pod seen");
            for version in versions {
                if let Err(why) = holds(&version.pod) {
                    panic!(
                        "{}: {what} stopped holding for {copy} after {:?}: {why}\n{}",
                        self.ns.name,
                        version.at.saturating_duration_since(start),
                        self.ns.diagnostics()
                    );
                }
            }
            self.next[i] = self.versions[i].len();
        }
        let last = self
            .versions
            .each_ref()
            .map(|v| v.last().expect("a version").pod.clone());
        self.compare(what, &last, anchor);
    }

    /// Panics, listing every difference and the diagnostics, unless the two
    /// pods agree (see [`differences`]).
    fn compare(&self, phase: &str, pods: &[Value; 2], anchor: Anchor) {
        let [kubelet, agent] = pods;
        let kubelet_node = kubelet["spec"]["nodeName"].as_str().unwrap_or_default();
        assert!(
            !kubelet_node.is_empty() && kubelet_node != self.agent_node,
            "the kubelet copy runs on {kubelet_node:?}, not on the kubelet's node"
        );
        assert_eq!(agent["spec"]["nodeName"], self.agent_node.as_str());
        let anchors = [anchor.of(kubelet, 0), anchor.of(agent, 1)];
        let diff = differences(kubelet, agent, anchors, self.period);
        assert!(
            diff.is_empty(),
            "phase {phase:?}: the agent node's pod (podprobe) differs from the kubelet's \
             (anchor {anchor:?} = {anchors:?}):\n  {}\n--- kubelet copy status\n{:#}\n--- agent copy status\n{:#}\n{}",
            diff.join("\n  "),
            kubelet["status"],
            agent["status"],
            self.ns.diagnostics()
        );
        eprintln!("{}: phase {phase:?}: the two pods agree", self.ns.name);
    }

    /// Strategic-merge-patches `conditions` into both pods' status, as a
    /// controller owning readiness gates does; the anchor of what follows.
    fn patch_conditions(&self, conditions: Value) -> Anchor {
        let patch = json!({"status": {"conditions": conditions}}).to_string();
        let mut at = [0; 2];
        for (i, name) in COPIES.iter().enumerate() {
            at[i] = now_epoch_seconds();
            self.ns.kubectl(&[
                "patch",
                "pod",
                name,
                "--subresource=status",
                "--type=strategic",
                "-p",
                &patch,
            ]);
        }
        Anchor::At(at)
    }
}

fn exec(command: &[&str]) -> Value {
    json!({"exec": {"command": command}})
}

/// `handler` with the given probe fields merged in.
fn probe(handler: Value, fields: Value) -> Value {
    let mut probe = handler;
    if let (Some(p), Some(f)) = (probe.as_object_mut(), fields.as_object()) {
        p.extend(f.clone());
    }
    probe
}

/// A busybox pod whose container `app` runs `script` then [`SLEEP_LOOP`],
/// with `probes` in its spec.
fn busybox(script: &str, probes: Value) -> impl Fn(&str, Option<&str>) -> Value {
    let script = format!("{script}{SLEEP_LOOP}");
    move |name, node| {
        spec_pod(
            name,
            "app",
            BUSYBOX_IMAGE,
            &["sh", "-c", &script],
            &[],
            probes.clone(),
            node,
        )
    }
}

/// The whole pod ready: `app` running and ready, `Ready` True.
fn app_ready(pod: &Value) -> Result<(), String> {
    running(pod, "app")?;
    ready(pod, "app", true)?;
    condition_is(pod, "Ready", true)
}

/// `app` running but not ready, `Ready` False.
fn app_not_ready(pod: &Value) -> Result<(), String> {
    running(pod, "app")?;
    ready(pod, "app", false)?;
    condition_is(pod, "Ready", false)
}

/// A readiness probe of `handler` succeeding from the start (period 2 s).
fn handler_readiness(test: &str, build: impl Fn(&str, Option<&str>) -> Value) {
    let mut pair = Differential::start(test, 2, build);
    pair.run(&[Phase {
        what: "ready",
        timeout: START,
        expect: &app_ready,
        anchor: Anchor::Started("app"),
    }]);
}

fn readiness(handler: Value) -> Value {
    json!({"readinessProbe": probe(handler, json!({"periodSeconds": 2}))})
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn exec_readiness_succeeding() {
    let probes = readiness(exec(&["cat", "/tmp/ready"]));
    handler_readiness("exec", busybox("touch /tmp/ready; ", probes));
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn http_get_readiness_succeeding() {
    // busybox httpd answers 200 for /ready.
    let probes = readiness(json!({"httpGet": {"path": "/ready", "port": 8080}}));
    let script = "mkdir -p /www && touch /www/ready && httpd -p 8080 -h /www; ";
    handler_readiness("http", busybox(script, probes));
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn tcp_readiness_succeeding() {
    let probes = readiness(json!({"tcpSocket": {"port": 8080}}));
    handler_readiness("tcp", busybox("httpd -p 8080 -h /tmp; ", probes));
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn grpc_readiness_succeeding() {
    // agnhost grpc-health-checking, as upstream's e2e runs it: SERVING.
    let probes = readiness(json!({"grpc": {"port": 5000}}));
    handler_readiness("grpc", move |name, node| {
        spec_pod(
            name,
            "app",
            AGNHOST_IMAGE,
            &[],
            &["grpc-health-checking", "--port=5000", "--http-port=8080"],
            probes.clone(),
            node,
        )
    });
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn success_and_failure_thresholds() {
    // The readiness file exists for the first 14 s, is gone for the next
    // 14 s, then is back: ready after 3 successes, not ready after 3
    // failures, ready again after 3 successes.
    let probes = json!({"readinessProbe": probe(exec(&["cat", "/tmp/ready"]), json!({
        "periodSeconds": 2, "successThreshold": 3, "failureThreshold": 3,
    }))});
    let script = "touch /tmp/ready; sleep 14; rm /tmp/ready; sleep 14; touch /tmp/ready; ";
    let mut pair = Differential::start("thresholds", 2, busybox(script, probes));
    let anchor = Anchor::Started("app");
    pair.run(&[
        Phase {
            what: "ready after successThreshold successes",
            timeout: START,
            expect: &app_ready,
            anchor,
        },
        Phase {
            what: "not ready after failureThreshold failures",
            timeout: FLIP,
            expect: &app_not_ready,
            anchor,
        },
        Phase {
            what: "ready again",
            timeout: FLIP,
            expect: &app_ready,
            anchor,
        },
    ]);
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn initial_delay() {
    let probes = json!({"readinessProbe": probe(exec(&["cat", "/tmp/ready"]), json!({
        "periodSeconds": 2, "initialDelaySeconds": 10,
    }))});
    let mut pair = Differential::start("initialdelay", 2, busybox("touch /tmp/ready; ", probes));
    let anchor = Anchor::Started("app");
    pair.run(&[
        Phase {
            what: "running, not ready during the initial delay",
            timeout: START,
            expect: &app_not_ready,
            anchor,
        },
        Phase {
            what: "ready after the initial delay",
            timeout: FLIP,
            expect: &app_ready,
            anchor,
        },
    ]);
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn startup_probe_gates_readiness_and_liveness() {
    // Readiness would pass at once and liveness fail at once: until the
    // startup probe succeeds (after 10 s), neither may run.
    let every_second = json!({"periodSeconds": 1, "failureThreshold": 1});
    let probes = json!({
        "startupProbe": probe(exec(&["cat", "/tmp/started"]),
            json!({"periodSeconds": 1, "failureThreshold": 60})),
        "readinessProbe": probe(exec(&["true"]), every_second.clone()),
        "livenessProbe": probe(exec(&["cat", "/tmp/started"]), every_second),
    });
    let script = "sleep 10; touch /tmp/started; ";
    let mut pair = Differential::start("startup", 1, busybox(script, probes));
    let anchor = Anchor::Started("app");
    pair.run(&[
        Phase {
            what: "running, not started, not ready",
            timeout: START,
            expect: &|p| {
                running(p, "app")?;
                started(p, "app", false)?;
                ready(p, "app", false)?;
                condition_is(p, "Ready", false)
            },
            anchor,
        },
        Phase {
            what: "started and ready",
            timeout: FLIP,
            expect: &|p| {
                started(p, "app", true)?;
                app_ready(p)
            },
            anchor,
        },
    ]);
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn failing_readiness_probe() {
    let probes = json!({"readinessProbe": probe(exec(&["cat", "/tmp/never"]),
        json!({"periodSeconds": 1}))});
    let mut pair = Differential::start("readyfail", 1, busybox("", probes));
    let anchor = Anchor::Started("app");
    pair.run(&[Phase {
        what: "running",
        timeout: START,
        expect: &|p| running(p, "app"),
        anchor,
    }]);
    pair.hold(
        "never ready",
        Duration::from_secs(10),
        &app_not_ready,
        anchor,
    );
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn liveness_restarts() {
    // Healthy for 3 s after each start, then the liveness probe fails.
    let probes = json!({"livenessProbe": probe(exec(&["cat", "/tmp/alive"]),
        json!({"periodSeconds": 1, "failureThreshold": 1}))});
    let script = "touch /tmp/alive; sleep 3; rm /tmp/alive; ";
    let mut pair = Differential::start("liveness", 1, busybox(script, probes));
    let anchor = Anchor::Started("app");
    let restarted_ready = |n| {
        move |p: &Value| {
            restarted(p, "app", n)?;
            app_ready(p)
        }
    };
    pair.run(&[
        Phase {
            what: "restarted once, running and ready",
            timeout: RESTART,
            expect: &restarted_ready(1),
            anchor,
        },
        Phase {
            what: "restarted twice, running and ready",
            timeout: RESTART,
            expect: &restarted_ready(2),
            anchor,
        },
    ]);
}

/// K7 in authority mode: podprobe runs the container's preStop hook before
/// a probe kill on the agent node too. `app`'s liveness probe fails 3 s
/// after each start; its `sleep` hook of 5 s must lie between podprobe's
/// `Killing` event and the container's end (it exits at once on SIGTERM).
/// The agent node has no `kubectl exec` or logs, so the hook is a sleep and
/// the times come from the API.
#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn probe_kill_runs_the_pre_stop_hook_on_the_agent_node() {
    const HOOK_SECONDS: i64 = 5;
    let ns = Namespace::create(&format!("podprobe-authority-prestop-{}", unique_id()));
    let probes = json!({
        "livenessProbe": probe(exec(&["cat", "/tmp/alive"]),
            json!({"periodSeconds": 1, "failureThreshold": 1})),
        "lifecycle": {"preStop": {"sleep": {"seconds": HOOK_SECONDS}}},
    });
    let script = format!("touch /tmp/alive; sleep 3; rm /tmp/alive; {SLEEP_LOOP}");
    let node = &ensure_agent_node().name;
    let mut pod = spec_pod(
        "prestop",
        "app",
        BUSYBOX_IMAGE,
        &["sh", "-c", &script],
        &[],
        probes,
        Some(node),
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
    ns.create_pod(&pod);
    let finished = ns.wait_for("app's first instance ended", RESTART, || {
        let pod = ns.pod("prestop")?;
        let app = container_status(&pod, "app").ok_or("no status for app")?;
        app["lastState"]["terminated"]["finishedAt"]
            .as_str()
            .and_then(epoch_seconds)
            .ok_or(format!("lastState {}", app["lastState"]))
    });
    let killing = ns.wait_for("podprobe's Killing event", START, || {
        let events = ns.events_for("prestop");
        events
            .iter()
            .filter(|e| e["reason"] == "Killing")
            .filter_map(|e| {
                let at = e["eventTime"].as_str().or(e["firstTimestamp"].as_str())?;
                epoch_seconds(at)
            })
            .min()
            .ok_or(format!("{events:#?}"))
    });
    // Whole seconds on both sides: a true gap of 5 s or more shows as 4 or
    // more; an immediate stop (no hook) as 0 or 1.
    assert!(
        finished - killing >= HOOK_SECONDS - 1,
        "the container ended {} s after the Killing event, before the {HOOK_SECONDS} s preStop \
         sleep could have ended\n{}",
        finished - killing,
        ns.diagnostics()
    );
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn restartable_init_container_with_startup_and_readiness_probes() {
    // The sidecar starts (startup probe) after 6 s and turns ready 8 s
    // later; `main` may only start once the sidecar has started.
    let probes = json!({
        "startupProbe": probe(exec(&["cat", "/tmp/started"]),
            json!({"periodSeconds": 1, "failureThreshold": 60})),
        "readinessProbe": probe(exec(&["cat", "/tmp/ready"]), json!({"periodSeconds": 1})),
    });
    let script = format!("sleep 6; touch /tmp/started; sleep 8; touch /tmp/ready; {SLEEP_LOOP}");
    let mut pair = Differential::start("sidecar", 1, |name, node| {
        sidecar(spec_pod(
            name,
            "app",
            BUSYBOX_IMAGE,
            &["sh", "-c", &script],
            &[],
            probes.clone(),
            node,
        ))
    });
    let anchor = Anchor::Started("app");
    pair.run(&[
        Phase {
            what: "sidecar running, not started; main not running",
            timeout: START,
            expect: &|p| {
                running(p, "app")?;
                started(p, "app", false)?;
                not_running(p, "main")?;
                condition_is(p, "Ready", false)
            },
            anchor,
        },
        Phase {
            what: "sidecar started, not ready; main running and ready",
            timeout: FLIP,
            expect: &|p| {
                started(p, "app", true)?;
                ready(p, "app", false)?;
                running(p, "main")?;
                ready(p, "main", true)?;
                condition_is(p, "Ready", false)
            },
            anchor,
        },
        Phase {
            what: "sidecar ready, pod ready",
            timeout: FLIP,
            expect: &|p| {
                ready(p, "app", true)?;
                ready(p, "main", true)?;
                condition_is(p, "Ready", true)
            },
            anchor,
        },
    ]);
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn readiness_gate_set_by_the_test() {
    const TEST_GATE: &str = "podprobe.io/test-gate";
    let probes = json!({"readinessProbe": probe(exec(&["cat", "/tmp/ready"]),
        json!({"periodSeconds": 1}))});
    let build = busybox("touch /tmp/ready; ", probes);
    let mut pair = Differential::start("gates", 1, |name, node| {
        let mut pod = build(name, node);
        pod["spec"]["readinessGates"] = json!([{"conditionType": TEST_GATE}]);
        pod
    });
    let containers_ready_only = |p: &Value| {
        running(p, "app")?;
        ready(p, "app", true)?;
        condition_is(p, "ContainersReady", true)?;
        condition_is(p, "Ready", false)
    };
    pair.run(&[Phase {
        what: "containers ready, the gate's condition missing",
        timeout: START,
        expect: &containers_ready_only,
        anchor: Anchor::Started("app"),
    }]);
    let anchor = pair.patch_conditions(json!([{"type": TEST_GATE, "status": "True"}]));
    pair.run(&[Phase {
        what: "the gate True: Ready",
        timeout: FLIP,
        expect: &app_ready,
        anchor,
    }]);
    let anchor = pair.patch_conditions(json!([{"type": TEST_GATE, "status": "False"}]));
    pair.run(&[Phase {
        what: "the gate False: not Ready, containers still ready",
        timeout: FLIP,
        expect: &containers_ready_only,
        anchor,
    }]);
}

#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn pod_without_probes() {
    // No probe: ready as soon as running. The period allowed is the
    // kubelet's 1 s PLEG relist, the nearest thing it has.
    let mut pair = Differential::start("noprobes", 1, busybox("", json!({})));
    pair.run(&[Phase {
        what: "running, started and ready",
        timeout: START,
        expect: &|p| {
            started(p, "app", true)?;
            app_ready(p)
        },
        anchor: Anchor::Started("app"),
    }]);
}

/// H23: a probe asking for HTTP/2 over cleartext (`httpGet.protocol:
/// HTTP2`, Kubernetes 1.37 behind the `H2CContainerProbe` gate, which
/// `hack/local-cluster.sh` turns on) speaks h2c with prior knowledge, as the
/// kubelet's `ProbeH2C`: against agnhost's gRPC server (grpc-go, h2c) a GET
/// reaches the server and gets grpc-go's answer to a request that is not
/// gRPC, 415. Over HTTP/1.1 it would get no HTTP response at all.
#[test]
#[ignore = "needs the local cluster and the agent node (hack/test.sh runs it)"]
fn h23_h2c_probe_of_a_1_37_spec_reaches_an_h2c_server() {
    let node = ensure_agent_node().name.clone();
    let ns = Namespace::create(&format!("podprobe-h2c-{}", unique_id()));
    let h2c = json!({"httpGet": {"port": 5000, "protocol": "HTTP2"}});
    let probes = json!({"readinessProbe": probe(h2c, json!({"periodSeconds": 1}))});
    let pod = spec_pod(
        "h2c",
        "app",
        AGNHOST_IMAGE,
        &[],
        &["grpc-health-checking", "--port=5000", "--http-port=8080"],
        probes,
        Some(&node),
    );
    ns.create_pod(&pod);
    let stored = ns.pod("h2c").expect("the pod");
    let protocol = &stored["spec"]["containers"][0]["readinessProbe"]["httpGet"]["protocol"];
    assert_eq!(
        protocol, "HTTP2",
        "the API server dropped httpGet.protocol: its H2CContainerProbe feature gate is off"
    );
    let note = "Readiness probe failed: HTTP probe failed with statuscode: 415";
    // Until agnhost listens, the runs are refused; then each gets the 415.
    ns.wait_for("an Unhealthy event with grpc-go's answer", START, || {
        let events = ns.events_for("h2c");
        let unhealthy = |e: &&Value| e["reason"] == "Unhealthy" && e["message"] == note;
        events
            .iter()
            .find(unhealthy)
            .map(|_| ())
            .ok_or_else(|| format!("{events:#?}"))
    });
    let events = ns.events_for("h2c");
    assert!(
        events.iter().all(|e| e["reason"] != "ProbeSpecInvalid"),
        "{events:#?}"
    );
    ns.holds_for("app never ready", Duration::from_secs(3), || {
        let p = ns.pod("h2c")?;
        ready(&p, "app", false)?;
        condition_is(&p, "Ready", false)
    });
}

mod differences {
    use super::*;

    /// A running pod with container `app`, anchored (started) at 12:00:00.
    fn pod(ready: bool, restarts: u64, transition: &str, reason: Option<&str>) -> Value {
        let status = if ready { "True" } else { "False" };
        let condition = |type_: &str| {
            let mut c = json!({"type": type_, "status": status, "lastTransitionTime": transition});
            if let Some(reason) = reason {
                c["reason"] = json!(reason);
                c["message"] = json!("containers with unready status: [app]");
            }
            c
        };
        json!({
            "spec": {"containers": [{"name": "app"}]},
            "status": {
                "conditions": [condition("Ready"), condition("ContainersReady")],
                "containerStatuses": [{
                    "name": "app", "ready": ready, "started": true, "restartCount": restarts,
                    "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}},
                }],
            },
        })
    }

    fn anchors(kubelet: &Value, agent: &Value) -> [Option<i64>; 2] {
        let anchor = Anchor::Started("app");
        [anchor.of(kubelet, 0), anchor.of(agent, 1)]
    }

    #[test]
    fn equal_pods_have_no_differences() {
        let kubelet = pod(true, 0, "2026-01-01T12:00:04Z", None);
        let agent = kubelet.clone();
        assert_eq!(
            differences(&kubelet, &agent, anchors(&kubelet, &agent), 2),
            Vec::<String>::new()
        );
    }

    #[test]
    fn every_differing_field_is_listed() {
        let kubelet = pod(true, 0, "2026-01-01T12:00:04Z", None);
        let mut agent = pod(false, 1, "2026-01-01T12:00:04Z", Some("ContainersNotReady"));
        agent["status"]["containerStatuses"][0]["started"] = json!(false);
        let diff = differences(&kubelet, &agent, anchors(&kubelet, &agent), 2);
        let want = [
            "container app ready: kubelet true, agent false",
            "container app started: kubelet true, agent false",
            "container app restartCount: kubelet 0, agent 1",
            "condition ContainersReady status: kubelet \"True\", agent \"False\"",
            "condition ContainersReady reason: kubelet null, agent \"ContainersNotReady\"",
            "condition ContainersReady message: kubelet null, agent \"containers with unready status: [app]\"",
            "condition Ready status: kubelet \"True\", agent \"False\"",
            "condition Ready reason: kubelet null, agent \"ContainersNotReady\"",
            "condition Ready message: kubelet null, agent \"containers with unready status: [app]\"",
        ];
        assert_eq!(diff, want);
    }

    #[test]
    fn transition_times_may_differ_by_one_period_plus_the_slack() {
        let kubelet = pod(true, 0, "2026-01-01T12:00:01Z", None);
        let within = pod(true, 0, "2026-01-01T12:00:05Z", None);
        assert_eq!(
            differences(&kubelet, &within, anchors(&kubelet, &within), 2),
            Vec::<String>::new()
        );
        let late = pod(true, 0, "2026-01-01T12:00:06Z", None);
        let diff = differences(&kubelet, &late, anchors(&kubelet, &late), 2);
        assert_eq!(
            diff,
            [
                "condition ContainersReady lastTransitionTime: kubelet +1s, agent +6s from the anchor (may differ by 4s)",
                "condition Ready lastTransitionTime: kubelet +1s, agent +6s from the anchor (may differ by 4s)",
            ]
        );
    }

    #[test]
    fn transition_times_are_relative_to_each_pods_anchor() {
        // The agent's container started 30 s later; its condition turned 3 s
        // after its start, the kubelet's 1 s after its own.
        let kubelet = pod(true, 0, "2026-01-01T12:00:01Z", None);
        let mut agent = pod(true, 0, "2026-01-01T12:00:33Z", None);
        agent["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] =
            json!("2026-01-01T12:00:30Z");
        assert_eq!(
            differences(&kubelet, &agent, anchors(&kubelet, &agent), 2),
            Vec::<String>::new()
        );
        // The same, measured from instants the test recorded.
        let at = Anchor::At([
            epoch_seconds("2026-01-01T12:00:00Z").unwrap(),
            epoch_seconds("2026-01-01T12:00:25Z").unwrap(),
        ]);
        let diff = differences(&kubelet, &agent, [at.of(&kubelet, 0), at.of(&agent, 1)], 2);
        assert_eq!(
            diff,
            [
                "condition ContainersReady lastTransitionTime: kubelet +1s, agent +8s from the anchor (may differ by 4s)",
                "condition Ready lastTransitionTime: kubelet +1s, agent +8s from the anchor (may differ by 4s)",
            ]
        );
    }

    #[test]
    fn transitions_before_the_anchor_in_both_pods_are_an_earlier_phases() {
        let kubelet = pod(true, 0, "2026-01-01T11:59:00Z", None);
        let agent = pod(true, 0, "2026-01-01T11:58:00Z", None);
        assert_eq!(
            differences(&kubelet, &agent, anchors(&kubelet, &agent), 2),
            Vec::<String>::new()
        );
        // The first False of each pod, from its start: the kubelet's node
        // took 4 s longer to start the container.
        let kubelet_start = pod(false, 0, "2026-01-01T11:59:56Z", None);
        let agent_start = pod(false, 0, "2026-01-01T12:00:00Z", None);
        assert_eq!(
            differences(
                &kubelet_start,
                &agent_start,
                anchors(&kubelet_start, &agent_start),
                2
            ),
            Vec::<String>::new()
        );
        // Only one of them changed in this phase: that is a difference.
        let agent = pod(true, 0, "2026-01-01T12:00:01Z", None);
        assert_eq!(
            differences(&kubelet, &agent, anchors(&kubelet, &agent), 2).len(),
            2
        );
    }

    #[test]
    fn missing_statuses_conditions_and_anchors_are_differences() {
        let kubelet = pod(true, 0, "2026-01-01T12:00:01Z", None);
        let mut agent = kubelet.clone();
        agent["status"]["containerStatuses"] = json!([]);
        agent["status"]["conditions"] = json!([kubelet["status"]["conditions"][0]]);
        let diff = differences(&kubelet, &agent, anchors(&kubelet, &agent), 2);
        assert_eq!(diff.len(), 3, "{diff:#?}");
        assert_eq!(
            diff[0],
            "container app status: kubelet present, agent missing"
        );
        assert_eq!(diff[1], "agent: no anchor to measure transition times from");
        assert!(
            diff[2].starts_with("condition ContainersReady: kubelet {"),
            "{}",
            diff[2]
        );
    }
}

mod settled {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Versions of a pod whose `n` is the given value, delivered at the
    /// given milliseconds after `t0`.
    fn versions(t0: Instant, seq: &[(u64, i64)]) -> Vec<PodVersion> {
        seq.iter()
            .map(|&(ms, n)| PodVersion {
                at: t0 + MS * ms as u32,
                pod: json!({"n": n}),
            })
            .collect()
    }

    fn is(n: i64) -> impl Fn(&Value) -> Result<(), String> {
        move |p| {
            if p["n"] == n {
                Ok(())
            } else {
                Err(format!("n {}", p["n"]))
            }
        }
    }

    #[test]
    fn the_first_version_that_lasted_stands_for_the_phase() {
        let t0 = Instant::now();
        // The version at 500 ms is the agent's write, 30 ms before
        // podprobe's: both match, the lasting one (index 2) stands.
        let v = versions(t0, &[(0, 0), (500, 1), (530, 1), (5000, 1), (6000, 2)]);
        assert_eq!(settled(&v, &is(1), t0 + MS * 7000), Settled::Met(2));
    }

    #[test]
    fn a_matching_version_younger_than_settle_is_waited_for() {
        let t0 = Instant::now();
        let v = versions(t0, &[(0, 0), (500, 1)]);
        assert!(matches!(
            settled(&v, &is(1), t0 + MS * 900),
            Settled::Waiting(why) if why.starts_with("settling")
        ));
        assert_eq!(settled(&v, &is(1), t0 + MS * 1500), Settled::Met(1));
    }

    #[test]
    fn a_short_phase_is_met_in_its_longest_version() {
        // The phase lasted 700 ms in all, in three versions: polling could
        // miss it, the watch cannot.
        let t0 = Instant::now();
        let v = versions(t0, &[(0, 0), (100, 1), (150, 1), (600, 1), (800, 2)]);
        assert_eq!(settled(&v, &is(1), t0 + MS * 5000), Settled::Met(2));
    }

    #[test]
    fn states_before_the_phase_are_skipped_and_reported() {
        let t0 = Instant::now();
        let v = versions(t0, &[(0, 0), (100, 2)]);
        assert_eq!(
            settled(&v, &is(1), t0 + MS * 5000),
            Settled::Waiting("n 2".into())
        );
        assert_eq!(
            settled(&[], &is(1), t0),
            Settled::Waiting("no version yet".into())
        );
    }
}
