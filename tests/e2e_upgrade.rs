//! A Kubernetes upgrade from one minor to the next with podprobe running
//! (issue #42), on the kind cluster of `hack/kind-upgrade.sh`, which runs
//! this test and does each node's upgrade when the test asks it to
//! (`hack/kind-upgrade.sh node NODE`: kubeadm, drain, the kubelet, uncordon).
//!
//! Every node carries two gated pods, pinned to it and left by the drain
//! (the script spares the label [`STAYS`]), so that they live through their
//! node's kubelet upgrade: a calm one whose probes always pass, and a
//! flipping one whose readiness probe passes and fails in turns of [`FLIP`]
//! seconds of wall-clock time (the node's clock is the test's). The nodes
//! are upgraded one at a time, the control plane first (its API server,
//! controller manager, scheduler and etcd restart), with a `helm upgrade`
//! that replaces every podprobe pod after the first worker. A pod watch,
//! started again whenever the API server drops it, sees every version of
//! the pods until the flipping pods have turned twice after the last node;
//! what it saw must show that:
//!
//! - no calm pod's gate or `Ready` ever moved (same status, same
//!   `lastTransitionTime`: a change in a gap of the watch moves it too);
//! - a flipping pod's gate and `Ready` never said what its probe did not:
//!   each version's state held for the probe at some second of the
//!   [`FOLLOW`] (for `Ready`, the kubelet's, [`READY_FOLLOW`]) seconds before
//!   its `lastTransitionTime`, so a gate that drops while the probe passes,
//!   or turns up while it fails, fails the test;
//! - a flipping pod's gate kept turning with its probe: two turns at most
//!   [`FLIP`] + [`FOLLOW`] seconds apart, but for the seconds no write could
//!   be made (the watch blind, or the API server's `/readyz` failing, asked
//!   every second: kubeadm replacing etcd leaves the API server up and
//!   unable to write for a minute or two) and the roll-out of podprobe, so
//!   a gate that stops following (which makes no version at all) fails it;
//! - no pod was killed or replaced: the same UID, no restart (each pod also
//!   has a liveness probe that passes), no deletion;
//! - the flipping pods kept turning after the upgrade, every node runs the
//!   new release and every podprobe pod was replaced.
//!
//! `#[ignore]`d: only `hack/kind-upgrade.sh` runs it (never `hack/test.sh`).

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/go_tools.rs"]
mod go_tools;
#[path = "support/kind_release.rs"]
mod kind_release;

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cluster::{
    BUSYBOX_IMAGE, GATE, Namespace, PodWatch, cluster, condition, epoch_seconds, gated_pod,
    now_epoch_seconds, podprobe_rolled_out, ready_podprobe_pods, restart_count, unique_id,
};
use kind_release::helm_upgrade_reusing_values;

/// The label `hack/kind-upgrade.sh` leaves on its node when it drains.
const STAYS: &str = "podprobe.io/upgrade-stays";

/// A flipping pod's probe passes while `now / FLIP` is even, fails while it
/// is odd (seconds since the epoch).
const FLIP: i64 = 30;

/// How long after its probe changed a gate may follow: a period (1 s) and a
/// timeout (1 s) of the probe, 1 s for the pod's own loop that moves the
/// file, and 12 s for podprobe's patch on a loaded machine (as
/// `tests/e2e_kind.rs`'s `FAST_FALSE_WITHIN`).
const FOLLOW: i64 = 1 + 1 + 1 + 12;

/// How long after the probe changed `Ready` may follow: [`FOLLOW`] and the
/// kubelet's sync of the pod after the gate's change.
const READY_FOLLOW: i64 = FOLLOW + 10;

/// How long the test waits for a pod to start and its gate to turn True.
const START: Duration = Duration::from_secs(180);

/// Whether a flipping pod's probe passes at `second` (since the epoch).
fn probe_passes(second: i64) -> bool {
    second.div_euclid(FLIP) % 2 == 0
}

/// The script of a flipping pod: keeps `/tmp/ready` present while the
/// probe should pass and absent while it should fail, looking every second.
fn flipping_script() -> String {
    format!(
        "touch /tmp/alive; trap 'exit 0' TERM; while true; do \
         if [ $(( $(date +%s) / {FLIP} % 2 )) = 0 ]; then touch /tmp/ready; else rm -f /tmp/ready; fi; \
         sleep 1; done"
    )
}

/// A gated pod `name` on `node` running `script`, with a readiness probe
/// `cat /tmp/ready` (every second, one failure turns it False) and a
/// liveness probe `cat /tmp/alive` that always passes.
fn stays_pod(name: &str, node: &str, script: &str) -> Value {
    let probes = json!({
        "readinessProbe": {
            "exec": {"command": ["cat", "/tmp/ready"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
        "livenessProbe": {
            "exec": {"command": ["cat", "/tmp/alive"]},
            "periodSeconds": 2,
            "failureThreshold": 3,
        },
    });
    let mut pod = gated_pod(
        name,
        "app",
        BUSYBOX_IMAGE,
        &["sh", "-c", script],
        &[],
        probes,
    );
    pod["spec"]["nodeName"] = json!(node);
    // On the control plane too, whose taint keeps other pods away.
    pod["spec"]["tolerations"] = json!([{
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Exists",
        "effect": "NoSchedule",
    }]);
    pod["metadata"]["labels"] = json!({STAYS: "true"});
    pod
}

/// Every node (control plane first, then the workers), sorted.
fn nodes() -> Vec<String> {
    let names = cluster()
        .kubectl(&["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"])
        .expect("list nodes");
    let mut nodes: Vec<String> = names.split_whitespace().map(str::to_string).collect();
    nodes.sort_by_key(|n| (!n.ends_with("-control-plane"), n.clone()));
    nodes
}

fn kubelet_version(node: &str) -> String {
    cluster()
        .kubectl(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.nodeInfo.kubeletVersion}",
        ])
        .unwrap_or_else(|e| panic!("node {node}: {e}"))
}

/// `hack/kind-upgrade.sh node NODE`, which must succeed; its progress goes
/// to the test's stderr.
fn upgrade_node(script: &str, node: &str) {
    let start = Instant::now();
    let status = Command::new("bash")
        .args([script, "node", node])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(status.success(), "{script} node {node} failed: {status}");
    eprintln!("upgrade: {node} upgraded in {:?}", start.elapsed());
}

/// What the pod watch saw: every version of the namespace's pods, and
/// when it was blind (seconds since the epoch, from the watch ending to the
/// first version of the next one), which is when the API server was down.
/// `unready` adds when the API server answered but said it was not ready
/// (`/readyz`: etcd restarting under it, say), which no watch shows but
/// which fails every write.
struct Seen {
    versions: Vec<Value>,
    outages: Vec<(i64, i64)>,
}

/// The seconds within `from..to` that any of `windows` (each from its
/// first second to its last; they may overlap) covers.
fn seconds_within(windows: &[(i64, i64)], from: i64, to: i64) -> i64 {
    let mut clipped: Vec<(i64, i64)> = windows
        .iter()
        .map(|&(start, end)| (start.max(from), end.min(to)))
        .filter(|(start, end)| start < end)
        .collect();
    clipped.sort_unstable();
    let (mut covered, mut reached) = (0, from);
    for (start, end) in clipped {
        covered += (end - start.max(reached)).max(0);
        reached = reached.max(end);
    }
    covered
}

/// Every version of the namespace's pods from now until `stop` is set,
/// collected by a thread; the watch is started again whenever it ends (the
/// API server restarts during the upgrade), each new one listing every pod
/// first.
fn collect_versions(namespace: String, stop: &'static AtomicBool) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen {
            versions: Vec::new(),
            outages: Vec::new(),
        };
        let readyz = std::thread::spawn(move || unready_windows(stop));
        let mut blind_since = None;
        let mut watch = PodWatch::start(&namespace);
        while !stop.load(Ordering::Relaxed) {
            match watch.next_until(Instant::now() + Duration::from_millis(500)) {
                Ok(Some(version)) => {
                    if let Some(start) = blind_since.take() {
                        seen.outages.push((start, now_epoch_seconds() + 1));
                    }
                    seen.versions.push(version.pod);
                }
                Ok(None) => {}
                Err(why) => {
                    if blind_since.is_none() {
                        eprintln!("upgrade: the pod watch ended ({why}); starting it again");
                        blind_since = Some(now_epoch_seconds());
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    watch = PodWatch::start(&namespace);
                }
            }
        }
        if let Some(start) = blind_since {
            seen.outages.push((start, now_epoch_seconds() + 1));
        }
        let unready = readyz.join().expect("the /readyz thread");
        eprintln!("upgrade: the API server was not ready {unready:?}");
        seen.outages.extend(unready);
        seen
    })
}

/// When the API server's `/readyz` failed, asked every second until `stop`
/// (seconds since the epoch, each window from the first failure to the
/// first success after it).
fn unready_windows(stop: &'static AtomicBool) -> Vec<(i64, i64)> {
    let mut windows = Vec::new();
    let mut since = None;
    while !stop.load(Ordering::Relaxed) {
        let ready = cluster()
            .kubectl(&["get", "--raw", "/readyz", "--request-timeout=2s"])
            .is_ok();
        match (ready, since) {
            (false, None) => since = Some(now_epoch_seconds()),
            (true, Some(start)) => {
                windows.push((start, now_epoch_seconds() + 1));
                since = None;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    windows.extend(since.map(|start| (start, now_epoch_seconds() + 1)));
    windows
}

/// Whether a condition that says `status` (True or False) since `since`
/// (seconds since the epoch) is one the probe allowed: it passed (True) or
/// failed (False) at some second of the `follow` seconds before, up to the
/// second after (`lastTransitionTime` drops the fraction).
fn allowed(status: &str, since: i64, follow: i64) -> bool {
    let want = status == "True";
    (since - follow..=since + 1).any(|s| probe_passes(s) == want)
}

#[test]
#[ignore = "needs hack/kind-upgrade.sh's cluster; only that script runs it"]
fn an_upgrade_node_by_node_with_a_helm_upgrade_between_flips_no_pod() {
    let script = std::env::var("PODPROBE_UPGRADE_SCRIPT")
        .expect("PODPROBE_UPGRADE_SCRIPT is not set: run this test through hack/kind-upgrade.sh");
    let to = std::env::var("PODPROBE_UPGRADE_TO").expect("PODPROBE_UPGRADE_TO");
    let ns = Namespace::create(&format!("podprobe-upgrade-{}", unique_id()));
    let nodes = nodes();
    assert!(
        nodes.len() >= 3,
        "a control plane and two workers: {nodes:?}"
    );

    let mut calm = Vec::new();
    let mut flipping = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let name = format!("calm-{i}");
        ns.create_pod(&stays_pod(
            &name,
            node,
            "touch /tmp/ready /tmp/alive; trap 'exit 0' TERM; while true; do sleep 1; done",
        ));
        calm.push(name);
        let name = format!("flipping-{i}");
        ns.create_pod(&stays_pod(&name, node, &flipping_script()));
        flipping.push(name);
    }
    // Each pod running and, for the calm ones, Ready through the gate.
    let mut uid = HashMap::new();
    let mut calm_conditions = HashMap::new();
    for name in calm.iter().chain(&flipping) {
        let pod = ns.wait_for(&format!("{name} started"), START, || {
            let pod = ns.pod(name)?;
            let gated = condition(&pod, GATE).is_some();
            if gated
                && (flipping.contains(name)
                    || condition(&pod, "Ready").is_some_and(|(s, _)| s == "True"))
            {
                Ok(pod)
            } else {
                Err(format!("status {}", pod["status"]))
            }
        });
        uid.insert(name.clone(), pod["metadata"]["uid"].clone());
        if calm.contains(name) {
            calm_conditions.insert(
                name.clone(),
                (condition(&pod, GATE), condition(&pod, "Ready")),
            );
        }
    }

    static STOP: AtomicBool = AtomicBool::new(false);
    let collector = collect_versions(ns.name.clone(), &STOP);
    let upgrade_start = Instant::now();

    // The control plane, the first worker, podprobe, the other workers.
    upgrade_node(&script, &nodes[0]);
    upgrade_node(&script, &nodes[1]);
    let before = ready_podprobe_pods();
    let rollout_start = now_epoch_seconds();
    let rollout = format!("podAnnotations.podprobe\\.io/e2e-upgrade={}", unique_id());
    helm_upgrade_reusing_values("--set-string", &rollout);
    podprobe_rolled_out();
    let after = ready_podprobe_pods();
    let rollout_window = (rollout_start, now_epoch_seconds() + 1);
    eprintln!("upgrade: podprobe rolled from {before:?} to {after:?}");
    for node in &nodes[2..] {
        upgrade_node(&script, node);
    }
    let upgraded = now_epoch_seconds();
    eprintln!(
        "upgrade: every node upgraded {:?} after the first began",
        upgrade_start.elapsed()
    );

    // The flipping pods turn twice more, and a while after.
    std::thread::sleep(Duration::from_secs(
        (2 * FLIP + FOLLOW + READY_FOLLOW) as u64,
    ));
    STOP.store(true, Ordering::Relaxed);
    let observed_until = now_epoch_seconds();
    let seen = collector.join().expect("the watch's thread");
    let versions = &seen.versions;
    eprintln!(
        "upgrade: {} pod versions seen; the watch was blind {:?}",
        versions.len(),
        seen.outages
    );

    let mut violations = Vec::new();
    let mut turned_after_upgrade: HashMap<String, usize> = HashMap::new();
    let mut transitions: HashMap<String, std::collections::BTreeSet<i64>> = HashMap::new();
    for pod in versions {
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let rv = pod["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        if pod["metadata"]["uid"] != uid[&name] || !pod["metadata"]["deletionTimestamp"].is_null() {
            violations.push(format!(
                "{name} (rv {rv}) was replaced or deleted: {}",
                pod["metadata"]
            ));
        }
        if restart_count(pod, "app") != Some(0) {
            violations.push(format!(
                "{name} (rv {rv}) restarted: {}",
                pod["status"]["containerStatuses"]
            ));
        }
        if let Some((gate, ready)) = calm_conditions.get(&name) {
            if &condition(pod, GATE) != gate || &condition(pod, "Ready") != ready {
                violations.push(format!(
                    "{name} (rv {rv}): the gate or Ready moved from {gate:?}, {ready:?}: {}",
                    pod["status"]["conditions"]
                ));
            }
            continue;
        }
        for (type_, follow) in [(GATE, FOLLOW), ("Ready", READY_FOLLOW)] {
            let Some((status, since)) = condition(pod, type_) else {
                violations.push(format!("{name} (rv {rv}) has no {type_}"));
                continue;
            };
            let since = epoch_seconds(&since).unwrap_or_default();
            if !allowed(&status, since, follow) {
                violations.push(format!(
                    "{name} (rv {rv}): {type_} {status} since {since}, but its probe {} all through the {follow} s before",
                    if status == "True" { "failed" } else { "passed" }
                ));
            }
            if type_ == GATE {
                transitions.entry(name.clone()).or_default().insert(since);
                if since > upgraded {
                    *turned_after_upgrade
                        .entry(format!("{name} {status}"))
                        .or_default() += 1;
                }
            }
        }
    }
    // A gate that stopped following its probe makes no version at all: its
    // turns must come a probe's turn apart, but for the time the API
    // server was down (podprobe cannot write then) and the roll-out of
    // podprobe (a node's podprobe is replaced; its successor takes over).
    let mut blind = seen.outages.clone();
    blind.push(rollout_window);
    for name in &flipping {
        let mut turns: Vec<i64> = transitions
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        turns.push(observed_until);
        for pair in turns.windows(2) {
            let (from, to) = (pair[0], pair[1]);
            let bound = FLIP + FOLLOW + seconds_within(&blind, from, to);
            if to - from > bound {
                violations.push(format!(
                    "{name}'s gate did not turn from {from} to {to} ({} s, more than {bound} s): it stopped following its probe",
                    to - from
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} of {} versions broke the upgrade's rules:\n{}\n{}",
        violations.len(),
        versions.len(),
        violations.join("\n"),
        ns.diagnostics()
    );
    for name in &flipping {
        for status in ["True", "False"] {
            assert!(
                turned_after_upgrade.contains_key(&format!("{name} {status}")),
                "{name}'s gate never turned {status} after the upgrade: {turned_after_upgrade:?}\n{}",
                ns.diagnostics()
            );
        }
    }
    // Every pod is still there, as it was.
    for (name, want) in &uid {
        let pod = ns.pod(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&pod["metadata"]["uid"], want, "{name} was replaced");
        assert_eq!(restart_count(&pod, "app"), Some(0), "{name} restarted");
    }
    for node in &nodes {
        assert_eq!(kubelet_version(node), to, "{node}'s kubelet");
    }
    assert!(
        !after.is_empty()
            && after.len() >= before.len()
            && after.iter().all(|p| !before.contains(p)),
        "the helm upgrade did not replace every podprobe pod: before {before:?}, after {after:?}"
    );
}
