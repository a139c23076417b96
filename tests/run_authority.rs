//! `podprobe run --mode authority` against the real API server of the local
//! cluster, without a real node agent.
//!
//! Each test registers a Node object of its own (heartbeating its Lease so
//! that the node lifecycle controller leaves its pods alone), binds pods to it
//! through `spec.nodeName`, and plays the node agent itself, with exactly the
//! write discipline a node agent must follow next to podprobe: strategic-merge
//! patches of `pods/status` carrying `metadata.uid` and
//! `metadata.resourceVersion` preconditions, re-read and retried on 409, that
//! carry podprobe's `ready`/`started` for the same container ID (the
//! container status lists are atomic). Probes are HTTP GETs against loopback
//! servers the test switches between 200 and 503 (`status.podIP` is
//! `127.0.0.1`). A watch records every version of the test's pods, so the
//! tests judge what the API server held, not only where it ended up. To force
//! a race, a test can put a proxy it freezes between podprobe and the API
//! server ([`ApiProxy`]).
//!
//! The rig's parts that other suites share live in `support`: the Node
//! ([`TestNode`]), the watch ([`Recorder`]), the proxy, the backends
//! ([`Backend`]) and the metrics readers.

mod support {
    pub mod api_proxy;
    pub mod backend;
    pub mod cluster;
    pub mod host_podprobe;
    pub mod http_server;
    pub mod metrics;
    pub mod recorder;
    pub mod test_node;
}

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::api_proxy::ApiProxy;
use support::backend::{Backend, Switch};
use support::cluster::{
    BUSYBOX_IMAGE, Namespace, TEST_RUN_LABEL, cluster, condition, unique_id, wait_for,
};
use support::host_podprobe::HostPodprobe;
use support::metrics::{http_get, metric_lines, metric_sum};
use support::recorder::{Recorder, held_versions, secs_since};
use support::test_node::{AGENT_TAINT, TestNode, rfc3339};

/// `periodSeconds` of every probe here.
const PERIOD: Duration = Duration::from_secs(1);

/// What podprobe may take beyond `failureThreshold × periodSeconds` (resp.
/// `successThreshold × periodSeconds`) to get a verdict into the API server:
/// the probe's phase within its period, the probe itself, the patch and its
/// retries after conflicts, and the watch delivering the version to the test.
const SLACK: Duration = Duration::from_secs(3);

/// How long podprobe's log is allowed to be in a failure message (its tail).
const LOG_TAIL_LINES: usize = 300;

// ---------------------------------------------------------------------------
// Driving the backends.

/// Flips `switch` until `stop`: healthy for 0.3-1.5 s, failing for 0.2-1.2 s,
/// and every third failure for `long_failure` (longer than
/// `failureThreshold × period + SLACK`, so podprobe must report it). Returns
/// how many long failures it started.
async fn flip(
    switch: Arc<Switch>,
    stop: Arc<AtomicBool>,
    seed: u64,
    long_failure: Duration,
) -> u32 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = 0u32;
    let mut long = 0u32;
    while !stop.load(Ordering::SeqCst) {
        let healthy = !switch.is_healthy();
        switch.set(healthy);
        let hold = if healthy {
            Duration::from_millis(rng.random_range(300..1500))
        } else {
            failures += 1;
            if failures % 3 == 1 {
                long += 1;
                long_failure
            } else {
                Duration::from_millis(rng.random_range(200..1200))
            }
        };
        let until = tokio::time::Instant::now() + hold;
        while tokio::time::Instant::now() < until && !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    long
}

// ---------------------------------------------------------------------------
// Pod status helpers.

fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
}

fn container_ready(pod: &Value, name: &str) -> Option<bool> {
    container_status(pod, name).and_then(|s| s["ready"].as_bool())
}

fn restart_count(pod: &Value, name: &str) -> Option<u64> {
    container_status(pod, name).and_then(|s| s["restartCount"].as_u64())
}

fn pod_condition<'a>(pod: &'a Value, type_: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn rv(pod: &Value) -> &str {
    pod["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

/// Checks `ContainersReady` and `Ready` as the kubelet generates them
/// (status.md 3.1/3.2; no readiness gates) for containers `names` in spec
/// order, `ready[i]` saying whether container `i` is ready.
fn check_conditions(pod: &Value, names: &[String], ready: &[bool]) -> Result<(), String> {
    let unready: Vec<&str> = names
        .iter()
        .zip(ready)
        .filter(|(_, r)| !**r)
        .map(|(n, _)| n.as_str())
        .collect();
    let (status, reason, message) = if unready.is_empty() {
        ("True", None, None)
    } else {
        (
            "False",
            Some("ContainersNotReady".to_string()),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    for type_ in ["ContainersReady", "Ready"] {
        let c = pod_condition(pod, type_).ok_or(format!("no {type_} condition"))?;
        let got = (
            c["status"].as_str(),
            c["reason"].as_str().map(str::to_string),
            c["message"].as_str().map(str::to_string),
        );
        if got != (Some(status), reason.clone(), message.clone()) {
            return Err(format!(
                "{type_} is {got:?}, expected {:?}",
                (status, &reason, &message)
            ));
        }
        if c["lastTransitionTime"].as_str().is_none() {
            return Err(format!("{type_} has no lastTransitionTime"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The test playing the node agent.

/// A container as the fake node agent runs it.
#[derive(Clone)]
struct FakeContainer {
    name: String,
    id: String,
    started_at: String,
}

/// What the agent last wrote about a container besides its running state.
#[derive(Clone, Default)]
struct AgentState {
    restart_count: u64,
    /// `lastState.terminated.exitCode`, rewritten by the hammer.
    last_exit: Option<u64>,
}

/// The pod status the agent writes: phase, IP, and the whole container
/// status list (atomic), carrying podprobe's `ready`/`started` from `pod`
/// (the pod as just read) for the same container ID.
fn agent_status(pod: &Value, containers: &[FakeContainer], states: &[AgentState]) -> Value {
    let statuses: Vec<Value> = containers
        .iter()
        .zip(states)
        .map(|(c, state)| {
            let current = container_status(pod, &c.name).filter(|s| s["containerID"] == c.id);
            let mut status = json!({
                "name": c.name,
                "containerID": c.id,
                "image": BUSYBOX_IMAGE,
                "imageID": "",
                "restartCount": state.restart_count,
                "state": {"running": {"startedAt": c.started_at}},
                "lastState": {},
                "ready": current.and_then(|s| s["ready"].as_bool()).unwrap_or(false),
            });
            if let Some(started) = current.and_then(|s| s["started"].as_bool()) {
                status["started"] = json!(started);
            }
            if let Some(code) = state.last_exit {
                status["lastState"] = json!({"terminated": {
                    "exitCode": code,
                    "reason": "Error",
                    "startedAt": c.started_at,
                    "finishedAt": c.started_at,
                }});
            }
            status
        })
        .collect();
    let start_time = pod["status"]["startTime"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| rfc3339(Timestamp::now()));
    json!({
        "phase": "Running",
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": start_time,
        "containerStatuses": statuses,
    })
}

async fn get_pod(pods: &Api<Pod>, name: &str) -> Result<Value, String> {
    pods.get(name)
        .await
        .map(|p| serde_json::to_value(p).unwrap())
        .map_err(|e| format!("get pod {name}: {e}"))
}

/// One strategic-merge patch of `pods/status` with the uid and
/// resourceVersion of `pod` as preconditions.
async fn patch_guarded(pods: &Api<Pod>, pod: &Value, status: Value) -> Result<Value, kube::Error> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let body = json!({
        "metadata": {
            "uid": pod["metadata"]["uid"],
            "resourceVersion": pod["metadata"]["resourceVersion"],
        },
        "status": status,
    });
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
        .await
        .map(|p| serde_json::to_value(p).unwrap())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The agent's write discipline: read, build from what was read, patch with
/// preconditions; on 409 read again and rebuild. Returns the written pod and
/// the number of conflicts.
async fn agent_write(
    pods: &Api<Pod>,
    name: &str,
    containers: &[FakeContainer],
    states: &[AgentState],
) -> Result<(Value, u64), String> {
    let mut conflicts = 0;
    loop {
        let pod = get_pod(pods, name).await?;
        match patch_guarded(pods, &pod, agent_status(&pod, containers, states)).await {
            Ok(written) => return Ok((written, conflicts)),
            Err(e) if is_conflict(&e) => conflicts += 1,
            Err(e) => return Err(format!("agent status patch of {name}: {e}")),
        }
        if conflicts > 200 {
            return Err(format!("{name}: 200 conflicts in a row"));
        }
    }
}

/// What a hammering agent did to one pod.
#[derive(Debug, Default)]
struct HammerReport {
    pod: String,
    /// Per container: successful writes that incremented its restart count.
    increments: Vec<u64>,
    /// Per container: the exit code of the agent's last successful write.
    last_exit: Vec<Option<u64>>,
    writes: u64,
    conflicts: u64,
    /// Non-409 errors (their outcome settled by reading the pod again).
    errors: u64,
    /// Reads whose restart counts differed from the agent's own writes: a
    /// lost update.
    lost: Vec<String>,
}

/// Hammers `name`'s container statuses until `stop` or `max_writes`: each
/// successful write increments one container's restart count and rewrites
/// its `lastState`, round robin, with the same container IDs; every read
/// checks that all earlier writes are still there.
async fn hammer(
    pods: Api<Pod>,
    name: String,
    containers: Vec<FakeContainer>,
    stop: Arc<AtomicBool>,
    max_writes: u64,
    pace: Duration,
) -> HammerReport {
    let n = containers.len();
    let mut states = vec![AgentState::default(); n];
    let mut report = HammerReport {
        pod: name.clone(),
        increments: vec![0; n],
        last_exit: vec![None; n],
        ..Default::default()
    };
    while !stop.load(Ordering::SeqCst) && report.writes < max_writes {
        let next_round = tokio::time::Instant::now() + pace;
        let pod = match get_pod(&pods, &name).await {
            Ok(pod) => pod,
            Err(e) => {
                report.errors += 1;
                eprintln!("hammer read: {e}");
                tokio::time::sleep_until(next_round).await;
                continue;
            }
        };
        for (c, state) in containers.iter().zip(&states) {
            let seen = restart_count(&pod, &c.name).unwrap_or(0);
            if seen != state.restart_count && report.lost.len() < 5 {
                report.lost.push(format!(
                    "{name}/{}: restartCount {seen} in resourceVersion {}, the agent wrote {}:\n{pod:#}",
                    c.name,
                    rv(&pod),
                    state.restart_count
                ));
            }
        }
        let target = (report.writes as usize) % n;
        let mut wanted = states.clone();
        wanted[target].restart_count += 1;
        wanted[target].last_exit = Some(report.writes % 256);
        match patch_guarded(&pods, &pod, agent_status(&pod, &containers, &wanted)).await {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {
                report.conflicts += 1;
                continue;
            }
            Err(e) => {
                report.errors += 1;
                eprintln!("hammer write of {name}: {e}");
                // Only the agent writes restart counts: a fresh read settles
                // whether the write went through.
                let applied = get_pod(&pods, &name).await.ok().is_some_and(|p| {
                    restart_count(&p, &containers[target].name)
                        == Some(wanted[target].restart_count)
                });
                if !applied {
                    tokio::time::sleep_until(next_round).await;
                    continue;
                }
            }
        }
        states = wanted;
        report.increments[target] += 1;
        report.last_exit[target] = states[target].last_exit;
        report.writes += 1;
        tokio::time::sleep_until(next_round).await;
    }
    report
}

// ---------------------------------------------------------------------------
// One test's rig.

/// One test's runtime, namespace, node, podprobe and the pods' recorder.
struct Rig {
    t0: Instant,
    run_id: String,
    podprobe: Option<HostPodprobe>,
    recorder: Option<Recorder>,
    pods: Api<Pod>,
    node: TestNode,
    ns: Namespace,
    rt: tokio::runtime::Runtime,
}

impl Rig {
    fn new(test: &str) -> Rig {
        let t0 = Instant::now();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let client = rt.block_on(cluster().client());
        let run_id = unique_id();
        let ns = Namespace::create(&format!("podprobe-auth-{test}-{run_id}"));
        let node = TestNode::register(&rt, &client, &format!("podprobe-rel-{run_id}"));
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
        let recorder = Recorder::start(&rt, pods.clone());
        Rig {
            t0,
            run_id,
            podprobe: None,
            recorder: Some(recorder),
            pods,
            node,
            ns,
            rt,
        }
    }

    fn start_podprobe(&mut self) {
        self.podprobe = Some(HostPodprobe::start(
            "authority",
            self.node.name(),
            &self.run_id,
        ));
    }

    /// Starts podprobe with its API traffic through an [`ApiProxy`], which
    /// is returned.
    fn start_podprobe_behind_proxy(&mut self) -> ApiProxy {
        let proxy = ApiProxy::start(&self.rt, &cluster().kubeconfig);
        self.podprobe = Some(HostPodprobe::start_with_kubeconfig(
            "authority",
            self.node.name(),
            &self.run_id,
            proxy.kubeconfig(),
        ));
        proxy
    }

    fn podprobe(&self) -> &HostPodprobe {
        self.podprobe.as_ref().expect("podprobe started")
    }

    fn recorder(&self) -> &Recorder {
        self.recorder.as_ref().expect("recorder")
    }

    fn backend(&self, healthy: bool) -> Backend {
        Backend::start(&self.rt, healthy)
    }

    /// Creates pod `name` bound to the test's node, one container per
    /// `(name, port)` with an HTTP readiness probe on that port; its uid.
    fn create_pod(&self, name: &str, containers: &[(&str, u16)], failure_threshold: u32) -> String {
        self.create_probed_pod(name, containers, "readinessProbe", failure_threshold)
    }

    /// [`create_pod`](Self::create_pod) with the HTTP probe as `probe`
    /// (`readinessProbe` or `livenessProbe`).
    fn create_probed_pod(
        &self,
        name: &str,
        containers: &[(&str, u16)],
        probe: &str,
        failure_threshold: u32,
    ) -> String {
        let containers: Vec<Value> = containers
            .iter()
            .map(|(c, port)| {
                json!({
                    "name": c,
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    probe: {
                        "httpGet": {"path": "/ready", "port": port},
                        "periodSeconds": PERIOD.as_secs(),
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": failure_threshold,
                    },
                })
            })
            .collect();
        let toleration =
            |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {TEST_RUN_LABEL: self.run_id}},
            "spec": {
                "nodeName": self.node.name(),
                "terminationGracePeriodSeconds": 0,
                // Without tolerationSeconds: nothing evicts them mid-test.
                "tolerations": [
                    toleration("node.kubernetes.io/not-ready"),
                    toleration("node.kubernetes.io/unreachable"),
                    {"key": AGENT_TAINT, "operator": "Exists"},
                ],
                "containers": containers,
            },
        }))
        .expect("pod manifest");
        let created = wait_for(
            &format!("creating pod {name}"),
            Duration::from_secs(20),
            || {
                self.rt
                    .block_on(self.pods.create(&PostParams::default(), &pod))
                    .map_err(|e| e.to_string())
            },
            || self.diagnostics(),
        );
        created.metadata.uid.expect("uid")
    }

    /// Deletes pod `name` at once (no kubelet will confirm a graceful one).
    fn force_delete(&self, name: &str) {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        self.rt
            .block_on(self.pods.delete(name, &params))
            .unwrap_or_else(|e| panic!("delete pod {name}: {e}"));
    }

    fn pod(&self, name: &str) -> Result<Value, String> {
        self.rt.block_on(get_pod(&self.pods, name))
    }

    /// The agent's write of `containers` running in pod `name`.
    fn agent_write(
        &self,
        name: &str,
        containers: &[FakeContainer],
        states: &[AgentState],
    ) -> Value {
        self.rt
            .block_on(agent_write(&self.pods, name, containers, states))
            .unwrap_or_else(|e| panic!("{e}\n{}", self.diagnostics()))
            .0
    }

    /// Containers `names` of a pod, started now, with fresh container IDs.
    fn fake_containers(&self, names: &[&str], id_prefix: &str) -> Vec<FakeContainer> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let started_at = rfc3339(Timestamp::now());
        names
            .iter()
            .map(|name| FakeContainer {
                name: name.to_string(),
                id: format!(
                    "containerd://{id_prefix}{:016x}{:08x}",
                    NEXT.fetch_add(1, Ordering::SeqCst),
                    std::process::id()
                ),
                started_at: started_at.clone(),
            })
            .collect()
    }

    /// Waits until `check` accepts pod `name`.
    fn wait_pod<T>(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Value) -> Result<T, String>,
    ) -> T {
        wait_for(
            &format!("{name}: {what}"),
            timeout,
            || check(&self.pod(name)?),
            || self.diagnostics(),
        )
    }

    fn diagnostics(&self) -> String {
        let pods = cluster()
            .kubectl(&["-n", &self.ns.name, "get", "pods", "-o", "yaml"])
            .unwrap_or_else(|e| e);
        let log = self.podprobe.as_ref().map(|p| p.log_tail(LOG_TAIL_LINES));
        format!(
            "--- pods\n{pods}\n--- podprobe stderr (last {LOG_TAIL_LINES} lines)\n{}",
            log.unwrap_or_default()
        )
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.recorder.take();
        self.podprobe.take();
        let _ = cluster().kubectl(&[
            "-n",
            &self.ns.name,
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]);
    }
}

// ---------------------------------------------------------------------------
// Tests.

/// Checks over every recorded version of pod `uid` that container `c`
/// (served by `switch`) was never held ready while its server had been
/// failing for longer than `failure_window`, and never turned ready without
/// its server having answered 200 within `success_window` before.
fn readiness_violations(
    t0: Instant,
    versions: &[(Instant, Instant, &Value)],
    c: &str,
    switch: &Switch,
    failure_window: Duration,
    success_window: Duration,
) -> Vec<String> {
    let mut violations = Vec::new();
    let failing = switch.failing_stretches();
    let mut was_ready = false;
    for &(from, until, pod) in versions {
        let ready = container_ready(pod, c) == Some(true);
        if ready {
            for &(fail_from, fail_until) in &failing {
                let lo = from.max(fail_from + failure_window);
                let hi = until.min(fail_until.unwrap_or(until));
                if lo < hi {
                    violations.push(format!(
                        "{c} ready in resourceVersion {} (held {:.2}s..{:.2}s) while its server failed since {:.2}s",
                        rv(pod),
                        secs_since(t0, from),
                        secs_since(t0, until),
                        secs_since(t0, fail_from)
                    ));
                }
            }
            if !was_ready && !switch.healthy_between(from - success_window, from) {
                violations.push(format!(
                    "{c} turned ready in resourceVersion {} at {:.2}s, but its server answered no 200 since {:.2}s",
                    rv(pod),
                    secs_since(t0, from),
                    secs_since(t0, from - success_window)
                ));
            }
        }
        was_ready = ready;
    }
    violations
}

/// Ready → not ready transitions of container `c` over the versions.
fn falls(versions: &[(Instant, Instant, &Value)], c: &str) -> usize {
    versions
        .windows(2)
        .filter(|w| {
            container_ready(w[0].2, c) == Some(true) && container_ready(w[1].2, c) == Some(false)
        })
        .count()
}

/// For each failing stretch of `switch` longer than `window`: how long after
/// it began the API server first held container `c` not ready (or the
/// stretch ended without that: `None`, which the violation check reports).
fn unready_lags(
    versions: &[(Instant, Instant, &Value)],
    c: &str,
    switch: &Switch,
    window: Duration,
) -> Vec<Option<Duration>> {
    switch
        .failing_stretches()
        .into_iter()
        .filter(|(from, until)| until.is_none_or(|until| until - *from > window))
        .map(|(from, until)| {
            versions
                .iter()
                .find(|(at, held_until, pod)| {
                    *held_until > from
                        && until.is_none_or(|until| *at < until)
                        && container_ready(pod, c) == Some(false)
                })
                .map(|(at, _, _)| at.saturating_duration_since(from))
        })
        .collect()
}

#[test]
fn hammering_agent_loses_no_write_and_readiness_follows_the_servers() {
    const PODS: usize = 3;
    const CONTAINERS: [&str; 2] = ["c1", "c2"];
    const FAILURE_THRESHOLD: u32 = 2;
    const HAMMER: Duration = Duration::from_secs(40);
    const PACE: Duration = Duration::from_millis(25);
    const MAX_WRITES_PER_POD: u64 = 1600;
    let failure_window = PERIOD * FAILURE_THRESHOLD + SLACK;
    let success_window = PERIOD + SLACK;
    let long_failure = failure_window + Duration::from_secs(2);

    let mut rig = Rig::new("hammer");
    let backends: Vec<Vec<Backend>> = (0..PODS)
        .map(|_| CONTAINERS.iter().map(|_| rig.backend(true)).collect())
        .collect();
    let names: Vec<String> = (0..PODS).map(|p| format!("hammer-{p}")).collect();
    let mut uids = Vec::new();
    let mut fakes = Vec::new();
    for (p, name) in names.iter().enumerate() {
        let ports: Vec<(&str, u16)> = CONTAINERS
            .iter()
            .zip(&backends[p])
            .map(|(c, b)| (*c, b.port()))
            .collect();
        uids.push(rig.create_pod(name, &ports, FAILURE_THRESHOLD));
        fakes.push(rig.fake_containers(&CONTAINERS, &format!("h{p}")));
    }
    rig.start_podprobe();
    let zero = vec![AgentState::default(); CONTAINERS.len()];
    for (name, fake) in names.iter().zip(&fakes) {
        rig.agent_write(name, fake, &zero);
    }
    let spec_names: Vec<String> = CONTAINERS.iter().map(|c| c.to_string()).collect();
    for name in &names {
        rig.wait_pod(
            name,
            "Ready with all servers healthy",
            Duration::from_secs(30),
            |pod| check_conditions(pod, &spec_names, &[true, true]),
        );
    }

    // Hammer: the agent rewrites container statuses while the servers flip.
    let hammer_start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let flippers: Vec<_> = backends
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, b)| {
            rig.rt.spawn(flip(
                b.switch.clone(),
                stop.clone(),
                7 + i as u64,
                long_failure,
            ))
        })
        .collect();
    let agents: Vec<_> = names
        .iter()
        .zip(&fakes)
        .map(|(name, fake)| {
            rig.rt.spawn(hammer(
                rig.pods.clone(),
                name.clone(),
                fake.clone(),
                stop.clone(),
                MAX_WRITES_PER_POD,
                PACE,
            ))
        })
        .collect();
    std::thread::sleep(HAMMER);
    stop.store(true, Ordering::SeqCst);
    let long_failures: Vec<u32> = flippers
        .into_iter()
        .map(|f| rig.rt.block_on(f).expect("flipper"))
        .collect();
    let reports: Vec<HammerReport> = agents
        .into_iter()
        .map(|a| rig.rt.block_on(a).expect("agent"))
        .collect();
    let hammer_secs = hammer_start.elapsed().as_secs_f64();

    // Settle: hammer-0 all healthy, hammer-1 c1 only, hammer-2 none.
    let finals: Vec<Vec<bool>> = (0..PODS)
        .map(|p| {
            (0..CONTAINERS.len())
                .map(|c| p == 0 || (p == 1 && c == 0))
                .collect()
        })
        .collect();
    for (backends, finals) in backends.iter().zip(&finals) {
        for (b, healthy) in backends.iter().zip(finals) {
            b.switch.set(*healthy);
        }
    }
    let settle_start = Instant::now();
    for (p, name) in names.iter().enumerate() {
        rig.wait_pod(
            name,
            "readiness of the final server states",
            Duration::from_secs(20),
            |pod| {
                for (c, want) in CONTAINERS.iter().zip(&finals[p]) {
                    let ready = container_ready(pod, c);
                    if ready != Some(*want) {
                        return Err(format!("{c} ready {ready:?}, its server says {want}"));
                    }
                }
                check_conditions(pod, &spec_names, &finals[p])
            },
        );
    }
    let settle_secs = settle_start.elapsed().as_secs_f64();

    // Nothing the agent wrote was lost.
    for (report, fake) in reports.iter().zip(&fakes) {
        assert!(
            report.lost.is_empty(),
            "a write of the agent was lost (podprobe replaced the container statuses from a stale read):\n{}\n{}",
            report.lost.join("\n"),
            rig.diagnostics()
        );
        let pod = rig.pod(&report.pod).expect("get pod");
        for (i, c) in fake.iter().enumerate() {
            let status = container_status(&pod, &c.name).expect("container status");
            assert_eq!(
                (
                    status["restartCount"].as_u64(),
                    status["lastState"]["terminated"]["exitCode"].as_u64(),
                    status["containerID"].as_str(),
                ),
                (
                    Some(report.increments[i]),
                    report.last_exit[i],
                    Some(c.id.as_str())
                ),
                "{}/{}: the API server's restartCount/lastState/containerID is not what the agent's successful writes made it\n{}",
                report.pod,
                c.name,
                rig.diagnostics()
            );
        }
    }

    // Every version the API server held, judged against the servers.
    let recorder = rig.recorder();
    recorder.assert_complete();
    let seen = recorder.snapshot();
    let end = Instant::now();
    let mut violations = Vec::new();
    let mut transitions = Vec::new();
    let mut lags = Vec::new();
    let mut version_count = 0;
    for (p, uid) in uids.iter().enumerate() {
        let versions = held_versions(&seen, uid, end);
        version_count += versions.len();
        for (c, b) in CONTAINERS.iter().zip(&backends[p]) {
            violations.extend(
                readiness_violations(
                    rig.t0,
                    &versions,
                    c,
                    &b.switch,
                    failure_window,
                    success_window,
                )
                .into_iter()
                .map(|v| format!("{}: {v}", names[p])),
            );
            transitions.push((format!("{}/{c}", names[p]), falls(&versions, c)));
            lags.extend(unready_lags(&versions, c, &b.switch, failure_window));
        }
        let mut last = vec![0u64; CONTAINERS.len()];
        for (_, _, pod) in &versions {
            for (i, c) in CONTAINERS.iter().enumerate() {
                let count = restart_count(pod, c).unwrap_or(0);
                if count < last[i] {
                    violations.push(format!(
                        "{}/{c}: restartCount went back from {} to {count} in resourceVersion {}",
                        names[p],
                        last[i],
                        rv(pod)
                    ));
                }
                last[i] = count;
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} violations in {version_count} recorded versions:\n{}\n{}",
        violations.len(),
        violations
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        rig.diagnostics()
    );
    // Each container had long failures: podprobe must have reported them.
    for (container, count) in &transitions {
        assert!(
            *count >= 1,
            "{container} never turned not ready in the API server during the hammer (long failures per server: {long_failures:?})\n{}",
            rig.diagnostics()
        );
    }

    let metrics = http_get(&rig.podprobe().listen_addr(), "/metrics").expect("/metrics");
    let patches = metric_lines(&metrics, "podprobe_status_patches");
    let sent = metric_sum(
        &metrics,
        "podprobe_status_patches_total",
        &["outcome=\"sent\""],
    );
    let agent_conflicts: u64 = reports.iter().map(|r| r.conflicts).sum();
    eprintln!(
        "hammer: {hammer_secs:.1}s hammer, settled in {settle_secs:.1}s; agent writes {:?}, agent conflicts {agent_conflicts}, \
         agent errors {}; {version_count} versions recorded; ready→not-ready transitions {transitions:?}; \
         long failures per server {long_failures:?}; server failing → API not ready: max {:?} over {} long failures; \
         podprobe patches: {patches:?}",
        reports.iter().map(|r| r.writes).collect::<Vec<_>>(),
        reports.iter().map(|r| r.errors).sum::<u64>(),
        lags.iter().flatten().max(),
        lags.len(),
    );
    assert!(
        sent > 0.0,
        "podprobe's /metrics counts no status patch sent:\n{metrics}"
    );
    assert!(
        agent_conflicts > 0,
        "the agent never met a conflict: podprobe and the agent never raced, the test proved nothing\n{}",
        rig.diagnostics()
    );
}

#[test]
fn restarted_podprobe_resumes_without_flapping_readiness() {
    const FAILURE_THRESHOLD: u32 = 2;
    let mut rig = Rig::new("restart");
    let steady: [(&str, &[&str]); 2] = [("web", &["app", "proxy"]), ("solo", &["app"])];
    // Not Ready throughout because of `side`; its `app` is ready and must
    // stay so (the kubelet's S4 alone would reset it: the pod is not Ready).
    let mixed: (&str, &[&str]) = ("mixed", &["app", "side"]);
    let all = || {
        steady
            .iter()
            .copied()
            .chain([("sick", &["app"][..]), mixed])
    };
    let mut backends: HashMap<String, Backend> = HashMap::new();
    let mut uids = HashMap::new();
    for (pod, containers) in all() {
        let mut ports = Vec::new();
        for c in containers {
            let b = rig.backend((pod, *c) != ("mixed", "side"));
            ports.push((*c, b.port()));
            backends.insert(format!("{pod}/{c}"), b);
        }
        uids.insert(pod, rig.create_pod(pod, &ports, FAILURE_THRESHOLD));
    }
    rig.start_podprobe();
    // Started now: the first restart comes within 10 s of the containers'
    // start, where only the vouch of a True ContainersReady keeps them ready.
    let mut fakes = HashMap::new();
    for (pod, containers) in all() {
        let fake = rig.fake_containers(containers, pod);
        rig.agent_write(pod, &fake, &vec![AgentState::default(); fake.len()]);
        fakes.insert(pod, fake);
    }
    let mut baseline = HashMap::new();
    for pod in ["web", "solo", "sick", "mixed"] {
        let names: Vec<String> = fakes[pod].iter().map(|c| c.name.clone()).collect();
        let want: Vec<bool> = names
            .iter()
            .map(|c| (pod, c.as_str()) != ("mixed", "side"))
            .collect();
        let ready = rig.wait_pod(pod, "settled", Duration::from_secs(30), |p| {
            check_conditions(p, &names, &want)?;
            Ok(p.clone())
        });
        baseline.insert(
            pod,
            (
                condition(&ready, "Ready"),
                condition(&ready, "ContainersReady"),
            ),
        );
    }
    let sick = &backends["sick/app"].switch;
    let app_names = vec!["app".to_string()];

    // Waits until podprobe `generation` has probed every steady container
    // successfully three times: it has run, and had every chance to flap.
    let wait_probed = |rig: &Rig, round: &str| {
        let addr = rig.podprobe().listen_addr();
        wait_for(
            &format!("{round}: three successful readiness probes of every steady container"),
            Duration::from_secs(30),
            || {
                let exposition = http_get(&addr, "/metrics/probes")?;
                for (pod, containers) in steady.iter().copied().chain([("mixed", &["app"][..])]) {
                    for c in containers {
                        let labels = [
                            "probe_type=\"Readiness\"",
                            "result=\"successful\"",
                            &format!("pod=\"{pod}\""),
                            &format!("container=\"{c}\""),
                        ];
                        let n = metric_sum(&exposition, "prober_probe_total", &labels);
                        if n < 3.0 {
                            return Err(format!("{pod}/{c}: {n} successful probes"));
                        }
                    }
                }
                Ok(())
            },
            || rig.diagnostics(),
        )
    };

    let mut timings = Vec::new();
    for round in ["SIGTERM", "SIGKILL"] {
        let down = Instant::now();
        {
            let podprobe = rig.podprobe.as_mut().expect("podprobe");
            if round == "SIGTERM" {
                let code = podprobe.terminate();
                assert_eq!(
                    code,
                    Some(0),
                    "graceful exit on SIGTERM\n{}",
                    podprobe.logs()
                );
            } else {
                podprobe.kill();
            }
        }
        // Turns unhealthy while no podprobe watches.
        sick.set(false);
        rig.start_podprobe();
        rig.wait_pod(
            "sick",
            &format!("not ready after the {round} restart"),
            PERIOD * FAILURE_THRESHOLD + SLACK + Duration::from_secs(10),
            |p| {
                (container_ready(p, "app") == Some(false))
                    .then_some(())
                    .ok_or("app still ready".to_string())?;
                check_conditions(p, &app_names, &[false])
            },
        );
        let unready_after = down.elapsed().as_secs_f64();
        wait_probed(&rig, round);
        sick.set(true);
        rig.wait_pod("sick", "Ready again", Duration::from_secs(20), |p| {
            check_conditions(p, &app_names, &[true])
        });
        timings.push((round, unready_after));
    }

    let recorder = rig.recorder();
    recorder.assert_complete();
    let seen = recorder.snapshot();
    let end = Instant::now();
    for (pod, containers) in steady {
        let versions = held_versions(&seen, &uids[pod], end);
        let first_ready = versions
            .iter()
            .position(|v| condition(v.2, "Ready").is_some_and(|c| c.0 == "True"))
            .expect("a Ready version");
        let (ready, containers_ready) = &baseline[pod];
        for (_, _, version) in &versions[first_ready..] {
            let now = (
                condition(version, "Ready"),
                condition(version, "ContainersReady"),
            );
            assert_eq!(
                (&now.0, &now.1),
                (ready, containers_ready),
                "{pod}: Ready/ContainersReady moved across a podprobe restart in resourceVersion {}:\n{version:#}\n{}",
                rv(version),
                rig.diagnostics()
            );
            for c in containers {
                let status = container_status(version, c);
                assert_eq!(
                    status.map(|s| (s["ready"].as_bool(), s["started"].as_bool())),
                    Some((Some(true), Some(true))),
                    "{pod}/{c} was not ready and started in resourceVersion {}:\n{version:#}\n{}",
                    rv(version),
                    rig.diagnostics()
                );
            }
        }
        eprintln!(
            "restart: {pod}: {} versions held Ready throughout",
            versions.len() - first_ready
        );
    }
    // `mixed`: its ready container stayed ready and started, its
    // ContainersReady False with the same transition time.
    let versions = held_versions(&seen, &uids["mixed"], end);
    let first_ready = versions
        .iter()
        .position(|v| container_ready(v.2, "app") == Some(true))
        .expect("a version with mixed/app ready");
    for (_, _, version) in &versions[first_ready..] {
        let app = container_status(version, "app");
        assert_eq!(
            app.map(|s| (s["ready"].as_bool(), s["started"].as_bool())),
            Some((Some(true), Some(true))),
            "mixed/app was not ready and started in resourceVersion {}:\n{version:#}\n{}",
            rv(version),
            rig.diagnostics()
        );
        assert_eq!(
            condition(version, "ContainersReady"),
            baseline["mixed"].1,
            "mixed: ContainersReady moved across a podprobe restart in resourceVersion {}:\n{version:#}\n{}",
            rv(version),
            rig.diagnostics()
        );
    }
    eprintln!(
        "restart: mixed: {} versions kept app ready",
        versions.len() - first_ready
    );
    eprintln!("restart: sick reported not ready this long after podprobe went down: {timings:?}");
}

/// Creates pod `same` as generation `generations.len()`, its container `app`
/// probed on `port`, and reports that container as the agent (container IDs
/// `containerd://gen<N>x...`); records its UID and ID prefix.
fn new_generation(rig: &Rig, port: u16, generations: &mut Vec<(String, String)>) {
    let uid = rig.create_pod("same", &[("app", port)], 1);
    let prefix = format!("gen{}x", generations.len());
    let fake = rig.fake_containers(&["app"], &prefix);
    rig.agent_write("same", &fake, &[AgentState::default()]);
    generations.push((uid, prefix));
}

/// What in `pod` belongs to a pod other than the one whose containers have
/// IDs starting with `containerd://<prefix>`: container statuses with other
/// IDs, and `Ready`/`ContainersReady` True while its own containers are not
/// all ready.
fn foreign_status(pod: &Value, prefix: &str) -> Vec<String> {
    let mut foreign = Vec::new();
    let statuses = pod["status"]["containerStatuses"].as_array();
    for status in statuses.into_iter().flatten() {
        let id = status["containerID"].as_str().unwrap_or_default();
        if !id.starts_with(&format!("containerd://{prefix}")) {
            foreign.push(format!("container status {id} of another pod"));
        }
    }
    let all_ready = statuses.is_some_and(|s| s.iter().all(|c| c["ready"] == true));
    for type_ in ["Ready", "ContainersReady"] {
        if condition(pod, type_).is_some_and(|c| c.0 == "True") && !all_ready {
            foreign.push(format!("{type_} True without its own containers ready"));
        }
    }
    foreign
}

/// Whether a line of `log` contains all of `parts`.
fn logged(log: &str, parts: &[&str]) -> bool {
    log.lines()
        .any(|l| parts.iter().all(|part| l.contains(part)))
}

/// A status patch podprobe built for a pod before it was deleted and
/// recreated under the same name, and that reaches the API server after,
/// must not land on the new pod (every patch carries the pod's UID and, in
/// authority mode, its resourceVersion as preconditions). The race is forced
/// for each recreation: the test freezes podprobe's way to the API server (an
/// [`ApiProxy`]), lets the probe succeed so that podprobe builds its patch on
/// the pod it knows and sends it into the proxy, deletes and recreates the
/// pod and reports the new pod's container as the agent, and only then lets
/// the held patch through. It must be rejected, and podprobe must then leave
/// the new pod to the new pod's own verdicts.
#[test]
fn recreated_pod_never_receives_the_old_pods_status() {
    const GENERATIONS: usize = 3;
    let mut rig = Rig::new("recreate");
    // Failing: each generation is not ready until the race; the success is
    // what podprobe writes about the old pod while it is being replaced.
    let backend = rig.backend(false);
    let proxy = rig.start_podprobe_behind_proxy();
    let app = ["app".to_string()];
    let mut generations: Vec<(String, String)> = Vec::new();
    new_generation(&rig, backend.port(), &mut generations);
    for _ in 1..GENERATIONS {
        let (old_uid, _) = generations.last().cloned().expect("a generation");
        rig.wait_pod(
            "same",
            "podprobe's not-ready verdict, nothing left to send",
            Duration::from_secs(20),
            |p| {
                (p["metadata"]["uid"] == old_uid.as_str())
                    .then_some(())
                    .ok_or("another uid".to_string())?;
                let status = container_status(p, "app");
                let seen = status.map(|s| (s["ready"].as_bool(), s["started"].as_bool()));
                (seen == Some((Some(false), Some(true))))
                    .then_some(())
                    .ok_or(format!("app (ready, started) = {seen:?}"))?;
                check_conditions(p, &app, &[false])
            },
        );

        let log_from = rig.podprobe().logs().len();
        proxy.freeze();
        backend.switch.set(true);
        // successThreshold (1) × periodSeconds until the verdict, SLACK for
        // the probe's phase and building the patch.
        wait_for(
            "podprobe's patch of the pod it knows, held by the proxy",
            PERIOD + SLACK,
            || {
                let logs = rig.podprobe().logs();
                let since = logs.get(log_from..).unwrap_or_default();
                let success = logged(since, &["probe result changed", "result=Success"]);
                match (success, proxy.held()) {
                    (true, held) if held > 0 => Ok(()),
                    seen => Err(format!("(readiness success logged, bytes held) = {seen:?}")),
                }
            },
            || rig.diagnostics(),
        );
        // Whenever podprobe builds that patch before the thaw, it builds it on
        // this generation: it cannot hear of the deletion.
        rig.force_delete("same");
        backend.switch.set(false);
        new_generation(&rig, backend.port(), &mut generations);
        let (new_uid, new_prefix) = generations.last().cloned().expect("a generation");

        let log_from = rig.podprobe().logs().len();
        proxy.thaw();
        // The held request, its answer, one retry backoff and a fresh read,
        // on a loaded machine.
        let stale = wait_for(
            "podprobe's held patch rejected and the recreated pod left alone",
            Duration::from_secs(20),
            || {
                let seen = rig.recorder().snapshot();
                let foreign: Vec<String> = held_versions(&seen, &new_uid, Instant::now())
                    .into_iter()
                    .flat_map(|(_, _, pod)| {
                        foreign_status(pod, &new_prefix)
                            .into_iter()
                            .map(move |f| format!("resourceVersion {}: {f}", rv(pod)))
                    })
                    .collect();
                if !foreign.is_empty() {
                    return Ok(foreign);
                }
                let logs = rig.podprobe().logs();
                let since = logs.get(log_from..).unwrap_or_default();
                let rejected = since.contains("pod status patch conflicted")
                    || since.contains("pod status patch failed");
                let refused =
                    since.contains("decision=UidChanged") || since.contains("decision=PodGone");
                if rejected && refused {
                    Ok(Vec::new())
                } else {
                    Err(format!(
                        "podprobe's log since the thaw: patch rejected {rejected}, old pod refused {refused}"
                    ))
                }
            },
            || rig.diagnostics(),
        );
        assert!(
            stale.is_empty(),
            "the recreated pod (uid {new_uid}, containers {new_prefix}*) received the old pod's status (uid {old_uid}):\n{}\n{}",
            stale.join("\n"),
            rig.diagnostics()
        );
    }
    backend.switch.set(true);
    let (last_uid, _) = generations.last().cloned().expect("a generation");
    rig.wait_pod(
        "same",
        "the last generation Ready",
        Duration::from_secs(20),
        |p| {
            (p["metadata"]["uid"] == last_uid.as_str())
                .then_some(())
                .ok_or("another uid".to_string())?;
            check_conditions(p, &app, &[true])
        },
    );

    let recorder = rig.recorder();
    recorder.assert_complete();
    let seen = recorder.snapshot();
    let end = Instant::now();
    let mut count = 0;
    for (uid, prefix) in &generations {
        for (_, _, pod) in held_versions(&seen, uid, end) {
            count += 1;
            let foreign = foreign_status(pod, prefix);
            assert!(
                foreign.is_empty(),
                "pod uid {uid} (containers {prefix}*) in resourceVersion {}: {}:\n{pod:#}\n{}",
                rv(pod),
                foreign.join("; "),
                rig.diagnostics()
            );
        }
    }
    let metrics = http_get(&rig.podprobe().listen_addr(), "/metrics").expect("/metrics");
    let logs = rig.podprobe().logs();
    eprintln!(
        "recreate: {GENERATIONS} generations, {count} versions recorded, podprobe patches {:?}; \
         podprobe log: {} UidChanged, {} PodGone",
        metric_lines(&metrics, "podprobe_status_patches"),
        logs.matches("decision=UidChanged").count(),
        logs.matches("decision=PodGone").count(),
    );
}

/// A node agent's status (or anyone allowed to patch `pods/status`) names
/// another pod's container as this pod's: podprobe must not stop it when this
/// pod's liveness probe fails, and must say why.
#[test]
fn a_liveness_kill_is_refused_for_a_container_of_another_pod() {
    let mut rig = Rig::new("forged-id");
    // The victim runs on the kubelet's node, in the same runtime podprobe
    // talks to.
    let victim = support::cluster::pod(
        "victim",
        "app",
        BUSYBOX_IMAGE,
        &["sh", "-c", support::cluster::SLEEP_LOOP],
        &[],
    );
    rig.ns.create_pod(&victim);
    let running = rig.wait_pod("victim", "running", Duration::from_secs(60), |pod| {
        let status = container_status(pod, "app").ok_or("no container status")?;
        status["state"]["running"]
            .is_object()
            .then(|| {
                status["containerID"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .ok_or_else(|| "not running".to_string())
    });
    let backend = rig.backend(false);
    rig.start_podprobe();
    let attacker_uid =
        rig.create_probed_pod("attacker", &[("app", backend.port())], "livenessProbe", 1);
    let forged = [FakeContainer {
        name: "app".to_string(),
        id: running.clone(),
        started_at: rfc3339(Timestamp::now()),
    }];
    rig.agent_write("attacker", &forged, &[AgentState::default()]);
    let expected = format!(
        "container {running} is not container \"app\" of pod {attacker_uid}: the runtime labels it \
         \"app\" of pod"
    );
    rig.ns.wait_for(
        "a ContainerMismatch event on the attacker",
        Duration::from_secs(30),
        || {
            let events = rig.ns.events_for("attacker");
            events
                .iter()
                .any(|e| {
                    e["reason"] == "ContainerMismatch"
                        && e["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with(&expected))
                })
                .then_some(())
                .ok_or_else(|| format!("events: {events:?}"))
        },
    );
    // The liveness probe keeps failing; the victim must stay untouched.
    rig.ns.holds_for(
        "the victim keeps running, never restarted",
        3 * PERIOD,
        || {
            let pod = rig.pod("victim")?;
            let status = container_status(&pod, "app").ok_or("no container status")?;
            (status["containerID"] == running.as_str()
                && status["state"]["running"].is_object()
                && status["restartCount"] == 0)
                .then_some(())
                .ok_or_else(|| format!("{status}"))
        },
    );
    assert!(
        logged(
            &rig.podprobe().logs(),
            &["not stopping the container: it is not this pod's"]
        ),
        "{}",
        rig.podprobe().log_tail(LOG_TAIL_LINES)
    );
    assert!(
        !rig.podprobe().logs().contains("killing container"),
        "{}",
        rig.podprobe().log_tail(LOG_TAIL_LINES)
    );
}
