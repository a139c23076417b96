//! `podprobe run` in gate mode against the real local cluster: podprobe runs
//! as a host process scoped by `--pod-selector podprobe.io/test-run=<id>` to
//! this test's pods, next to the real kubelet.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/host_podprobe.rs"]
mod host_podprobe;
#[path = "support/metrics.rs"]
mod metrics;

use std::time::{Duration, Instant};

use cluster::{
    BUSYBOX_IMAGE, Namespace, PodWatch, TEST_RUN_LABEL, cluster, condition, restart_count,
    unique_id, wait_for,
};
use host_podprobe::HostPodprobe;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use metrics::{http_get, metric_sum};
use podprobe::daemon::STATUS_RESYNC_PERIOD;
use serde_json::{Value, json};

const GATE: &str = "podprobe.io/ready";

/// One test's namespace, run ID and podprobe.
struct Rig {
    ns: Namespace,
    run_id: String,
    podprobe: HostPodprobe,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_args(&[])
    }

    /// A rig whose podprobe runs with `extra` flags.
    fn with_args(extra: &[&str]) -> Rig {
        let run_id = unique_id();
        let ns = Namespace::create(&format!("podprobe-run-{run_id}"));
        let podprobe =
            HostPodprobe::start_with_args("gate", &cluster().node_name(), &run_id, extra);
        Rig {
            ns,
            run_id,
            podprobe,
        }
    }

    /// A busybox pod gated on `podprobe.io/ready` with `probes` as its
    /// annotation (a JSON string, possibly malformed on purpose).
    fn create_pod(&self, name: &str, probes: &str) {
        self.create_custom_pod(name, probes, busybox_spec(IDLE));
    }

    fn pod(&self, name: &str) -> Result<Value, String> {
        self.ns.pod(name)
    }

    fn exec(&self, pod: &str, command: &[&str]) {
        self.try_exec(pod, command).expect("kubectl exec");
    }

    /// Runs `command` in `pod`'s `app` container; its output, or why not.
    fn try_exec(&self, pod: &str, command: &[&str]) -> Result<String, String> {
        let mut args = vec!["-n", self.ns.name.as_str(), "exec", pod, "-c", "app", "--"];
        args.extend_from_slice(command);
        cluster().kubectl(&args)
    }

    fn diagnostics(&self) -> String {
        format!(
            "{}\n--- podprobe stderr\n{}",
            self.ns.diagnostics(),
            self.podprobe.logs()
        )
    }

    /// Waits until condition `type_` of `pod` has `status`.
    fn wait_condition(&self, pod: &str, type_: &str, status: &str, timeout: Duration) -> Value {
        wait_for(
            &format!("{pod} {type_}={status}"),
            timeout,
            || {
                let object = self.pod(pod)?;
                match condition(&object, type_) {
                    Some((s, _)) if s == status => Ok(object),
                    other => Err(format!("{type_} is {other:?}")),
                }
            },
            || self.diagnostics(),
        )
    }

    /// Waits until `container` of `pod` has restarted; the pod then.
    fn wait_restarted(&self, pod: &str, container: &str, timeout: Duration) -> Value {
        wait_for(
            &format!("{pod}/{container} restarted"),
            timeout,
            || {
                let object = self.pod(pod)?;
                let count = restart_count(&object, container).unwrap_or(0);
                (count >= 1)
                    .then_some(object)
                    .ok_or(format!("restartCount {count}"))
            },
            || self.diagnostics(),
        )
    }

    fn wait_running(&self, pod: &str) {
        wait_for(
            &format!("{pod} running"),
            Duration::from_secs(60),
            || {
                let object = self.pod(pod)?;
                let phase = object["status"]["phase"].as_str().unwrap_or_default();
                (phase == "Running")
                    .then_some(())
                    .ok_or(format!("phase {phase:?}"))
            },
            || self.diagnostics(),
        );
    }
}

/// What an idle busybox container runs: it exits 0 on SIGTERM.
const IDLE: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// A spec of one busybox container `app` running `sh -c script`, with a
/// grace period of 2 s.
fn busybox_spec(script: &str) -> Value {
    json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [{
            "name": "app",
            "image": BUSYBOX_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
        }],
    })
}

/// `GET path` on `addr`: Ok when the status is 200, else the status line.
fn http_status(addr: &str, path: &str) -> Result<(), String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response.lines().next().unwrap_or_default().to_string();
    status
        .starts_with("HTTP/1.1 200")
        .then_some(())
        .ok_or(response)
}

const READINESS_FILE_PROBE: &str = r#"{"app": {"readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}}}"#;

/// How long after `/tmp/ready` is removed [`READINESS_FILE_PROBE`] must have
/// turned the gate False: `failureThreshold` (3, the default) ×
/// `periodSeconds` (1 s) = 3 s of failed probes, plus up to one period for
/// the probe's phase, plus up to `timeoutSeconds` (1 s) for the last exec,
/// plus 5 s of slack for the patch, the API server and the test's `kubectl
/// get` on a loaded two-core machine.
const GATE_FALSE_WITHIN: Duration = Duration::from_secs(3 + 1 + 1 + 5);

/// How long after the gate turned False the kubelet must have turned `Ready`
/// False: one pod sync after its watch delivers the gate's change, with the
/// same slack.
const READY_FOLLOWS_WITHIN: Duration = Duration::from_secs(10);

#[test]
fn readiness_exec_probe_flips_gate_and_ready_both_ways() {
    let rig = Rig::new();
    rig.create_pod("web", READINESS_FILE_PROBE);
    rig.wait_running("web");
    let pod = rig.wait_condition("web", GATE, "False", Duration::from_secs(30));
    assert_eq!(
        condition(&pod, "Ready").map(|c| c.0).as_deref(),
        Some("False")
    );
    // Never ready yet, so no result changed: the first failure reaches the
    // message at podprobe's next resync (10 s), plus a probe period.
    wait_for(
        "the gate says which probe fails and how",
        Duration::from_secs(30),
        || {
            let why = gate_why(&rig.pod("web")?);
            (why == why_not_ready())
                .then_some(())
                .ok_or(format!("{why:?}"))
        },
        || rig.diagnostics(),
    );

    rig.exec("web", &["touch", "/tmp/ready"]);
    rig.wait_condition("web", GATE, "True", Duration::from_secs(20));
    rig.wait_condition("web", "Ready", "True", Duration::from_secs(20));
    let addr = rig.podprobe.listen_addr();
    wait_for(
        "/readyz 200",
        Duration::from_secs(30),
        || http_status(&addr, "/readyz"),
        || rig.diagnostics(),
    );

    rig.exec("web", &["rm", "/tmp/ready"]);
    let pod = rig.wait_condition("web", GATE, "False", Duration::from_secs(20));
    // The failure that flipped it is in the flip's own write.
    assert_eq!(gate_why(&pod), why_not_ready(), "{}", rig.diagnostics());
    rig.wait_condition("web", "Ready", "False", Duration::from_secs(20));
}

/// The gate's reason and message while `cat /tmp/ready` fails.
fn why_not_ready() -> (String, String) {
    (
        "ReadinessProbeFailed".to_string(),
        "containers with unready status: [app]; \
         app: Readiness probe failed: cat: can't open '/tmp/ready': No such file or directory\n"
            .to_string(),
    )
}

/// The gate condition's reason and message.
fn gate_why(pod: &Value) -> (String, String) {
    let conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let gate = conditions.iter().find(|c| c["type"] == GATE);
    let text = |field: &str| {
        gate.and_then(|c| c[field].as_str())
            .unwrap_or_default()
            .to_string()
    };
    (text("reason"), text("message"))
}

#[test]
fn failing_liveness_probe_makes_the_kubelet_restart_the_container() {
    let rig = Rig::new();
    let probes = r#"{"app": {"livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 2, "initialDelaySeconds": 2}}}"#;
    rig.create_pod("live", probes);
    rig.wait_running("live");
    rig.wait_restarted("live", "app", Duration::from_secs(60));
    wait_for(
        "a Killing event",
        Duration::from_secs(20),
        || {
            let events = cluster().kubectl(&["-n", &rig.ns.name, "get", "events"])?;
            events
                .contains("Container app failed liveness probe, will be restarted")
                .then_some(())
                .ok_or(events)
        },
        || rig.diagnostics(),
    );
}

#[test]
fn restart_of_podprobe_does_not_flip_a_ready_pod() {
    let mut rig = Rig::new();
    rig.create_pod("steady", READINESS_FILE_PROBE);
    rig.wait_running("steady");
    rig.exec("steady", &["touch", "/tmp/ready"]);
    rig.wait_condition("steady", "Ready", "True", Duration::from_secs(30));
    let pod = rig.wait_condition("steady", GATE, "True", Duration::from_secs(30));
    // D5/S4 apply to containers running since 10 s before podprobe starts.
    std::thread::sleep(Duration::from_secs(11));
    let before = (condition(&pod, GATE), condition(&pod, "Ready"));

    assert_eq!(
        rig.podprobe.terminate(),
        Some(0),
        "graceful exit on SIGTERM\n{}",
        rig.podprobe.logs()
    );
    rig.podprobe = HostPodprobe::start("gate", &cluster().node_name(), &rig.run_id);
    // Long enough for the new instance to list, probe and sync several times.
    for _ in 0..40 {
        let pod = rig.pod("steady").expect("get pod");
        let now = (condition(&pod, GATE), condition(&pod, "Ready"));
        assert_eq!(
            now,
            before,
            "readiness moved across a podprobe restart\n{}",
            rig.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        rig.podprobe.logs().contains("probing pod"),
        "{}",
        rig.diagnostics()
    );

    // A restarted podprobe that did nothing would pass the checks above: the
    // new instance (the old one has exited) must also react to the probe
    // failing.
    rig.exec("steady", &["rm", "/tmp/ready"]);
    rig.wait_condition("steady", GATE, "False", GATE_FALSE_WITHIN);
    rig.wait_condition("steady", "Ready", "False", READY_FOLLOWS_WITHIN);
}

#[test]
fn malformed_annotation_gives_an_event_and_other_pods_keep_working() {
    let rig = Rig::new();
    rig.create_pod(
        "broken",
        r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "periodSecond": 1}}}"#,
    );
    rig.create_pod("fine", READINESS_FILE_PROBE);
    rig.wait_running("fine");
    rig.exec("fine", &["touch", "/tmp/ready"]);
    rig.wait_condition("fine", GATE, "True", Duration::from_secs(30));
    wait_for(
        "a ProbeAnnotationInvalid event on the broken pod",
        Duration::from_secs(30),
        || {
            let events = cluster().kubectl(&[
                "-n",
                &rig.ns.name,
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=broken",
            ])?;
            (events.contains("ProbeAnnotationInvalid") && events.contains("periodSecond"))
                .then_some(())
                .ok_or(events)
        },
        || rig.diagnostics(),
    );
}

/// An edited annotation updates a running pod's probes (#14): an unchanged
/// probe keeps its worker and result, a changed one starts over from its
/// initial result, a removed one stops gating, an added one starts; each
/// edit gets a `ProbesChanged` event, an invalid one changes nothing.
#[test]
fn editing_the_annotation_updates_the_probes_without_a_restart() {
    let rig = Rig::new();
    let readiness = |file: &str| json!({"exec": {"command": ["cat", file]}, "periodSeconds": 1});
    let liveness =
        json!({"exec": {"command": ["sh", "-c", "echo >> /tmp/live-runs"]}, "periodSeconds": 1});
    let annotate = |probes: &Value| {
        rig.ns.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            "web",
            &format!("podprobe.io/probes={probes}"),
        ]);
    };
    rig.create_pod(
        "web",
        &json!({"app": {"readinessProbe": readiness("/tmp/ready")}}).to_string(),
    );
    rig.wait_running("web");
    rig.exec("web", &["touch", "/tmp/ready"]);
    let pod = rig.wait_condition("web", GATE, "True", Duration::from_secs(30));
    let since = condition(&pod, GATE).map(|c| c.1);

    // Added liveness, unchanged readiness.
    let marker = rig.podprobe.logs().len();
    annotate(
        &json!({"app": {"readinessProbe": readiness("/tmp/ready"), "livenessProbe": liveness}}),
    );
    rig.wait_event(
        "web",
        "ProbesChanged: podprobe.io/probes changed: added: Liveness probe of app",
    );
    // Three liveness runs: well past any new readiness worker's first run
    // (within one 1 s period), whose initial Failure would have been logged.
    wait_for(
        "three liveness runs",
        Duration::from_secs(30),
        || {
            let out = rig.try_exec("web", &["cat", "/tmp/live-runs"])?;
            (out.lines().count() >= 3).then_some(()).ok_or(out)
        },
        || rig.diagnostics(),
    );
    let pod = rig.pod("web").expect("pod");
    assert_eq!(
        condition(&pod, GATE).map(|c| c.1),
        since,
        "the gate never moved"
    );
    let logs = rig.podprobe.logs();
    assert!(
        !logs[marker..]
            .lines()
            .any(|l| l.contains("probe result changed") && l.contains("Readiness")),
        "the unchanged readiness probe kept its result\n{}",
        rig.diagnostics()
    );

    // Changed readiness: starts over (not ready) and follows the new command.
    annotate(
        &json!({"app": {"readinessProbe": readiness("/tmp/ready2"), "livenessProbe": liveness}}),
    );
    rig.wait_event(
        "web",
        "ProbesChanged: podprobe.io/probes changed: changed: Readiness probe of app",
    );
    rig.wait_condition("web", GATE, "False", Duration::from_secs(20));
    rig.exec("web", &["touch", "/tmp/ready2"]);
    rig.wait_condition("web", GATE, "True", Duration::from_secs(20));

    // Removed readiness: no longer holds the pod back.
    rig.exec("web", &["rm", "/tmp/ready2"]);
    rig.wait_condition("web", GATE, "False", GATE_FALSE_WITHIN);
    annotate(&json!({"app": {"livenessProbe": liveness}}));
    rig.wait_event(
        "web",
        "ProbesChanged: podprobe.io/probes changed: removed: Readiness probe of app",
    );
    rig.wait_condition("web", GATE, "True", Duration::from_secs(20));

    // An invalid edit is reported and changes nothing.
    annotate(&json!({"app": {"livenessProbe": liveness, "readinessProbe": {"periodSeconds": 1}}}));
    rig.wait_event("web", "ProbeAnnotationInvalid");
    let pod = rig.pod("web").expect("pod");
    assert_eq!(condition(&pod, GATE).map(|c| c.0).as_deref(), Some("True"));
    assert_eq!(restart_count(&pod, "app"), Some(0), "{}", rig.diagnostics());
}

/// src/daemon.rs's `EDIT_DEBOUNCE` (private there): an annotation edit this
/// soon after the pod's annotation was last read waits for the next resync.
const EDIT_DEBOUNCE: Duration = Duration::from_secs(2);

/// How long the storm of [`an_annotation_edit_storm_is_debounced_and_its_last_edit_wins`]
/// goes on, at the least: one resync period, so that it spans a resync
/// and several debounce windows and each term of [`most_applied_edits`]
/// is exercised.
const STORM_FOR: Duration = STATUS_RESYNC_PERIOD;

/// Edits in the storm, at the least.
const STORM_EDITS: usize = 40;

/// How much later than the test's own patch returned podprobe's watch may
/// deliver an edit on a loaded two-core machine: the span over which
/// podprobe sees the storm is at most the storm's plus this.
const WATCH_LAG: Duration = Duration::from_secs(2);

/// `periodSeconds` and `timeoutSeconds` of the storm's last probe, which
/// passes (`successThreshold` 1).
const LAST_PERIOD: Duration = Duration::from_secs(1);
const LAST_TIMEOUT: Duration = Duration::from_secs(1);

/// Slack for the status patch, the API server and the test's watch on a
/// loaded two-core machine, as [`GATE_FALSE_WITHIN`]'s.
const SLACK: Duration = Duration::from_secs(5);

/// How long after the storm's last edit was accepted its probe must have
/// turned the gate True: podprobe's watch delivers it within
/// [`WATCH_LAG`]; arriving within [`EDIT_DEBOUNCE`] of the last read it
/// waits for the next resync, at most one [`STATUS_RESYNC_PERIOD`] away (the
/// debounce adds nothing to that: a deferred edit waits for the resync,
/// not for its window to end); then the new worker's first run, within one
/// period (× `successThreshold` 1) plus the exec's timeout, passes; plus
/// [`SLACK`].
const LAST_EDIT_WITHIN: Duration = Duration::from_secs(
    WATCH_LAG.as_secs()
        + STATUS_RESYNC_PERIOD.as_secs()
        + LAST_PERIOD.as_secs()
        + LAST_TIMEOUT.as_secs()
        + SLACK.as_secs(),
);

/// Events the correlator lets one pod write at once (`SPAM_BURST` of
/// src/api/event_broadcaster/correlator.rs, private there): more `ProbesChanged` than this
/// would not all be visible as Events.
const SPAM_BURST: u32 = 25;

/// The most edits podprobe can apply (and record a `ProbesChanged` for)
/// when a storm's edits reach it over `span`: one read triggered by a watch
/// event per [`EDIT_DEBOUNCE`] (each read restarts the window, whatever
/// triggered it), at most `span / EDIT_DEBOUNCE + 1` of them; one per
/// resync tick within the span, at most `span / STATUS_RESYNC_PERIOD + 1`; and
/// one after it, the deferred last edit, at the first resync or watch event
/// after the storm (once applied, the annotation no longer differs).
fn most_applied_edits(span: Duration) -> u32 {
    let within = |period: Duration| (span.as_secs_f64() / period.as_secs_f64()).floor() as u32 + 1;
    within(EDIT_DEBOUNCE) + within(STATUS_RESYNC_PERIOD) + 1
}

/// A readiness probe that passes but is held back by an initial delay no
/// test outlives: it never runs, and its worker keeps the initial Failure.
/// `n` makes each edit a different probe.
fn held_back(n: usize) -> String {
    json!({"app": {"readinessProbe": {
        "exec": {"command": ["true"]},
        "periodSeconds": LAST_PERIOD.as_secs(),
        "initialDelaySeconds": 3600 + n,
    }}})
    .to_string()
}

/// `ProbesChanged` Events about `pod`, as `events.k8s.io/v1` has them: the
/// occurrences each Event's series counts (an Event without a series is
/// one), the largest count of each note (a series whose Event vanished
/// goes on in a new Event that starts from the count so far), summed over
/// notes (a combined Event is a note of its own).
fn probes_changed_events(ns: &str, pod: &str) -> Result<u32, String> {
    let list = cluster().json(&["-n", ns, "get", "events.events.k8s.io"])?;
    let mut by_note = std::collections::BTreeMap::<String, u32>::new();
    for event in list["items"].as_array().into_iter().flatten() {
        if event["reason"] != "ProbesChanged" || event["regarding"]["name"] != pod {
            continue;
        }
        let count = event["series"]["count"].as_u64().unwrap_or(1) as u32;
        let note = event["note"].as_str().unwrap_or_default().to_string();
        let seen = by_note.entry(note).or_default();
        *seen = (*seen).max(count);
    }
    Ok(by_note.values().sum())
}

/// #25: a storm of `podprobe.io/probes` edits, as fast as the API server
/// takes them, costs at most one read (worker restart, `ProbesChanged`
/// Event) per [`EDIT_DEBOUNCE`] plus one per resync, not one per edit; the
/// last edit still wins within a resync; and the gate never shows what no
/// edit could cause. Every edit but the last is a probe held back by its
/// initial delay (the gate stays False); the last one passes at once, so
/// the gate can turn True only once the last edit is applied.
#[test]
fn an_annotation_edit_storm_is_debounced_and_its_last_edit_wins() {
    let mut rig = Rig::new();
    rig.create_pod("storm", &held_back(0));
    rig.wait_running("storm");
    // Podprobe's False: it tracks the pod and runs its (held back) probe.
    rig.wait_condition("storm", GATE, "False", Duration::from_secs(30));
    let watch = PodWatch::start(&rig.ns.name);
    let last = json!({"app": {"readinessProbe": {
        "exec": {"command": ["true"]},
        "periodSeconds": LAST_PERIOD.as_secs(),
        "timeoutSeconds": LAST_TIMEOUT.as_secs(),
    }}})
    .to_string();

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (started, ended, edits) = runtime.block_on(async {
        let pods: Api<Pod> = Api::namespaced(cluster().client().await, &rig.ns.name);
        let annotate = |probes: String| {
            let pods = pods.clone();
            async move {
                let patch = json!({"metadata": {"annotations": {"podprobe.io/probes": probes}}});
                pods.patch("storm", &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap_or_else(|e| panic!("annotation edit: {e}"));
            }
        };
        let started = Instant::now();
        let mut edits = 0;
        while edits + 1 < STORM_EDITS || started.elapsed() < STORM_FOR {
            edits += 1;
            annotate(held_back(edits)).await;
        }
        annotate(last.clone()).await;
        (started, Instant::now(), edits + 1)
    });
    let storm = ended - started;

    // (b) and (c), from every version of the pod in the API server's order.
    let deadline = ended + LAST_EDIT_WITHIN;
    let mut last_seen = false;
    let ready_at = loop {
        let version = match watch.next_until(deadline) {
            Ok(Some(version)) => version,
            Ok(None) => panic!(
                "the gate did not turn True within {LAST_EDIT_WITHIN:?} of the storm's last \
                 edit ({edits} edits over {storm:?})\n{}",
                rig.diagnostics()
            ),
            Err(e) => panic!("{e}"),
        };
        if version.pod["metadata"]["name"] != "storm" {
            continue;
        }
        let annotation = &version.pod["metadata"]["annotations"]["podprobe.io/probes"];
        last_seen |= annotation.as_str() == Some(last.as_str());
        let gate = condition(&version.pod, GATE).map(|c| c.0);
        if gate.as_deref() == Some("True") {
            assert!(
                last_seen,
                "the gate turned True while every edit so far held the probe back: \
                 annotation {annotation}\n{}",
                rig.diagnostics()
            );
            break version.at;
        }
    };
    // Nothing is left to apply: the gate stays True through another resync.
    let settled = Instant::now() + STATUS_RESYNC_PERIOD + SLACK;
    while let Some(version) = watch.next_until(settled).unwrap_or_else(|e| panic!("{e}")) {
        let gate = condition(&version.pod, GATE).map(|c| c.0);
        assert_eq!(
            gate.as_deref(),
            Some("True"),
            "the gate left True after the last edit was applied\n{}",
            rig.diagnostics()
        );
    }

    // (a): podprobe's log says each edit it applied; each has its Event.
    // A series' Event is written with its first and second event; later
    // ones are counted and written when the series ends, or when podprobe
    // stops (rule 9.4), which is what this waits for.
    let applied = || {
        rig.podprobe
            .logs()
            .lines()
            .filter(|l| {
                l.contains("podprobe.io/probes changed; updating the pod's probes")
                    && l.contains(r#"pod="storm""#)
            })
            .count() as u32
    };
    let applied = applied();
    assert_eq!(
        rig.podprobe.terminate(),
        Some(0),
        "podprobe stops cleanly\n{}",
        rig.diagnostics()
    );
    let mut recorded = 0;
    let _ = wait_for_optional(Duration::from_secs(30), || {
        recorded = probes_changed_events(&rig.ns.name, "storm")?;
        (recorded >= applied)
            .then_some(())
            .ok_or_else(|| format!("{recorded} ProbesChanged recorded, {applied} applied"))
    });
    let bound = most_applied_edits(storm + WATCH_LAG);
    eprintln!(
        "{edits} edits in {storm:?} ({:.0}/s); {applied} applied, {recorded} ProbesChanged \
         recorded (at most {bound}); gate True {:?} after the last edit (at most {LAST_EDIT_WITHIN:?})",
        edits as f64 / storm.as_secs_f64(),
        ready_at.saturating_duration_since(ended),
    );
    assert!(
        bound < SPAM_BURST,
        "the bound must stay below what the spam filter lets through, or Events could not show a breach"
    );
    assert!(
        recorded <= bound && applied <= bound,
        "{edits} edits over {storm:?}: {applied} applied and {recorded} ProbesChanged recorded, \
         where debouncing allows at most {bound}\n{}",
        rig.diagnostics()
    );
    assert_eq!(
        recorded,
        applied,
        "each applied edit records one ProbesChanged\n{}",
        rig.diagnostics()
    );
}

/// Polls `check` until it returns `Ok` or `timeout` passes: its last
/// answer, for waits whose outcome the caller asserts on itself.
fn wait_for_optional(
    timeout: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = check();
        if last.is_ok() || Instant::now() >= deadline {
            return last;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A pod with the probes annotation but without the readiness gate (its
/// probes would change nothing), and one with the gate but without the
/// annotation (it would stay NotReady), each get a Warning saying what to
/// fix, on first sight.
#[test]
fn annotation_and_gate_without_each_other_are_warned_about() {
    let rig = Rig::new();
    let spec = busybox_spec(IDLE);
    rig.create_pod_with("ungated", Some(READINESS_FILE_PROBE), false, spec.clone());
    rig.create_pod_with("unannotated", None, true, spec);
    rig.wait_event(
        "ungated",
        "ReadinessGateMissing: the pod has the podprobe.io/probes annotation but does not list the readiness gate podprobe.io/ready",
    );
    rig.wait_event(
        "unannotated",
        "ProbeAnnotationMissing: the pod lists the readiness gate podprobe.io/ready but has no podprobe.io/probes annotation",
    );
    let logs = rig.podprobe.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("ungated") && l.contains("does not list the readiness gate")),
        "no log line names the pod:\n{logs}"
    );
}

/// docs/install.md's Uninstall: its query (run as written, with bash and
/// kubectl) lists the pods that still use the gate as `namespace/name`, and
/// no pod without it. No podprobe is needed: only the pods' specs count.
#[test]
fn the_uninstall_query_lists_the_pods_that_use_the_gate() {
    let query = include_str!("../docs/install.md")
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("kubectl get pods -A -o jsonpath="))
        .expect("docs/install.md's Uninstall query");
    let run_id = unique_id();
    let ns = Namespace::create(&format!("podprobe-uninstall-{run_id}"));
    for (name, gated) in [("gated", true), ("ungated", false)] {
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {TEST_RUN_LABEL: run_id}},
            "spec": {
                "containers": [{
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }],
            },
        });
        if gated {
            pod["spec"]["readinessGates"] = json!([{"conditionType": GATE}]);
        }
        ns.create_pod(&pod);
    }
    let kubectl_dir = cluster()
        .kubectl
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", query])
        .env("KUBECONFIG", &cluster().kubeconfig)
        .env(
            "PATH",
            format!(
                "{kubectl_dir}:{}",
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .expect("bash runs");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines.contains(&format!("{}/gated", ns.name).as_str()),
        "{listed}"
    );
    assert!(
        !lines.contains(&format!("{}/ungated", ns.name).as_str()),
        "{listed}"
    );
}

/// Pods that turn ready at once: their status patches, Events and the pod
/// watch share one HTTP/2 connection to the API server, as the kubelet's
/// requests do, rather than a TLS connection each (#39 item 2). podprobe
/// has one connection per client that made a request: the main one (the
/// watch, reads, patches, Events) and the workload guards' (the
/// PodDisruptionBudget watch); the review client is idle with
/// `--metrics-auth none`. Over HTTP/1.1 the pod watch alone holds a
/// connection, and every patch or Event write beside it needs another.
#[test]
fn pods_turning_ready_at_once_share_one_api_connection() {
    const PODS: usize = 20;
    const READY_NOW: &str =
        r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}}"#;
    let rig = Rig::new();
    for i in 0..PODS {
        rig.create_pod(&format!("web-{i}"), READY_NOW);
    }
    for i in 0..PODS {
        // Twenty busybox pods starting on a loaded two-core node.
        rig.wait_condition(&format!("web-{i}"), GATE, "True", Duration::from_secs(120));
    }
    let port = cluster_port();
    let connections = api_connections(rig.podprobe.pid(), port);
    assert!(
        (1..=2).contains(&connections),
        "podprobe has {connections} connections to the API server (port {port}), \
         one per client expected\n{}",
        rig.diagnostics()
    );
}

/// The local cluster's API server port, from its kubeconfig.
fn cluster_port() -> u16 {
    let server = cluster()
        .kubectl(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .expect("kubectl config view");
    let uri: http::Uri = server.trim().parse().expect("server URL");
    uri.port_u16().unwrap_or(443)
}

/// How many established TCP connections process `pid` has to `port`: its
/// sockets (`/proc/<pid>/fd`) found in its network namespace's tables.
fn api_connections(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("podprobe's fds")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let remote_port = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .flat_map(|table| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .map(|line| {
                    line.split_whitespace()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .filter(|fields| {
            fields.len() > 9
                && fields[2].ends_with(&remote_port)
                && fields[3] == "01"
                && inodes.contains(&fields[9])
        })
        .count()
}

/// K6: a readiness probe that keeps failing runs on its period while the
/// container is not ready, plus one run per kubelet pod sync (the pod's
/// start, its initial result and the pod worker's resync, 60-90 s apart),
/// not once per status write. Another controller writes a condition of the
/// pod every 2 s meanwhile, and the kubelet writes its own status: each is
/// a watch event podprobe sees, and none may nudge the worker.
#[test]
fn unready_readiness_probe_runs_on_its_period_not_on_status_writes() {
    const PERIOD: u64 = 30;
    const OBSERVE: Duration = Duration::from_secs(95);
    let rig = Rig::new();
    let probes = json!({"app": {"readinessProbe": {
        "exec": {"command": ["sh", "-c", "date +%s >> /tmp/runs; exit 1"]},
        "periodSeconds": PERIOD,
    }}});
    rig.create_pod("slow", &probes.to_string());
    rig.wait_running("slow");
    let runs = || -> Vec<i64> {
        let out = rig.ns.kubectl(&[
            "exec",
            "slow",
            "-c",
            "app",
            "--",
            "sh",
            "-c",
            "cat /tmp/runs 2>/dev/null || true",
        ]);
        out.lines().filter_map(|l| l.trim().parse().ok()).collect()
    };
    wait_for(
        "the first readiness run",
        Duration::from_secs(30),
        || {
            (!runs().is_empty())
                .then_some(())
                .ok_or("no run yet".to_string())
        },
        || rig.diagnostics(),
    );
    let start = std::time::Instant::now();
    let mut writes = 0;
    while start.elapsed() < OBSERVE {
        writes += 1;
        let patch = json!({"status": {"conditions": [{
            "type": "example.com/tick", "status": "True", "message": format!("write {writes}"),
        }]}});
        rig.ns.kubectl(&[
            "patch",
            "pod",
            "slow",
            "--subresource",
            "status",
            "--type",
            "strategic",
            "-p",
            &patch.to_string(),
        ]);
        std::thread::sleep(Duration::from_secs(2));
    }
    let runs = runs();
    let gaps: Vec<i64> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    // The kubelet's schedule over the first run and OBSERVE: the nudged run
    // at the start and the one the initial Failure's sync asks for at once,
    // then one every PERIOD (3), and at most one extra for the resync.
    let short = gaps.iter().filter(|&&g| g < PERIOD as i64 - 2).count();
    assert!(
        short <= 2 && runs.len() <= 2 + 3 + 1,
        "{} runs over {OBSERVE:?} with periodSeconds {PERIOD} and {writes} status writes; gaps {gaps:?}\n{}",
        runs.len(),
        rig.diagnostics()
    );
    assert!(
        runs.len() >= 4,
        "the probe must keep running on its period: runs at {runs:?}\n{}",
        rig.diagnostics()
    );
    eprintln!("{} runs, gaps {gaps:?}, {writes} status writes", runs.len());
}

/// `podprobe.periodMilliseconds` of [`fast_readiness_flips_the_gate_and_patches_only_on_transitions`].
const FAST_PERIOD: Duration = Duration::from_millis(200);
const FAST_SUCCESS_THRESHOLD: u32 = 2;
const FAST_FAILURE_THRESHOLD: u32 = 3;

/// How long after the server's answer changes the gate must have followed:
/// `threshold` runs of the new answer, the first up to one period away,
/// each answered at once (busybox httpd on the pod's bridge), plus the same
/// 5 s of slack as [`GATE_FALSE_WITHIN`] for the patch, the API server and
/// the test's reads.
fn fast_gate_within(threshold: u32) -> Duration {
    FAST_PERIOD * (threshold + 1) + Duration::from_secs(5)
}

/// #14: a readiness probe every 200 ms turns the gate True after its
/// `successThreshold` and False after its `failureThreshold`, runs on its
/// period in the real daemon, and while its result holds writes no status,
/// however many runs go by: status writes follow transitions, not the probe
/// rate.
#[test]
fn fast_readiness_flips_the_gate_and_patches_only_on_transitions() {
    let rig = Rig::new();
    let probes = json!({"app": {"readinessProbe": {
        "httpGet": {"path": "/ready", "port": 8080},
        "successThreshold": FAST_SUCCESS_THRESHOLD,
        "failureThreshold": FAST_FAILURE_THRESHOLD,
        "podprobe": {"periodMilliseconds": FAST_PERIOD.as_millis()},
    }}});
    rig.create_custom_pod(
        "fast",
        &probes.to_string(),
        busybox_spec("mkdir -p /www && exec httpd -f -p 8080 -h /www"),
    );
    rig.wait_running("fast");
    let addr = rig.podprobe.listen_addr();
    rig.wait_condition("fast", GATE, "False", Duration::from_secs(30));
    rig.assert_steady_on_period(&addr, "failed");

    rig.exec("fast", &["touch", "/www/ready"]);
    rig.wait_condition(
        "fast",
        GATE,
        "True",
        fast_gate_within(FAST_SUCCESS_THRESHOLD),
    );
    rig.assert_steady_on_period(&addr, "successful");

    rig.exec("fast", &["rm", "/www/ready"]);
    rig.wait_condition(
        "fast",
        GATE,
        "False",
        fast_gate_within(FAST_FAILURE_THRESHOLD),
    );
}

impl Rig {
    /// While the readiness result holds (every run `result`), the probe
    /// runs every [`FAST_PERIOD`] and podprobe sends no status patch over
    /// [`STEADY_RUNS`] runs.
    fn assert_steady_on_period(&self, addr: &str, result: &str) {
        const STEADY_RUNS: f64 = 25.0;
        let scrape = || {
            let text = http_get(addr, "/metrics").unwrap_or_else(|e| panic!("/metrics: {e}"));
            let runs = metric_sum(
                &text,
                "prober_probe_total",
                &["probe_type=\"Readiness\"", &format!("result=\"{result}\"")],
            );
            let patches = metric_sum(&text, "podprobe_status_patches_total", &[]);
            (std::time::Instant::now(), runs, patches)
        };
        // A few runs first, so that the patch of the transition just seen
        // has been counted.
        let (_, settled, _) = scrape();
        let runs_after = |base: f64, more: f64| {
            wait_for(
                &format!("{more} more {result} readiness runs"),
                FAST_PERIOD.mul_f64(more * 4.0) + Duration::from_secs(10),
                || {
                    let now = scrape();
                    (now.1 >= base + more)
                        .then_some(now)
                        .ok_or(format!("{} runs", now.1 - base))
                },
                || self.diagnostics(),
            )
        };
        let (start, base, patches_before) = runs_after(settled, 3.0);
        let (end, runs, patches_after) = runs_after(base, STEADY_RUNS);
        assert_eq!(
            patches_after,
            patches_before,
            "status patches while the result held over {} runs\n{}",
            runs - base,
            self.diagnostics()
        );
        // The schedule: one run per period (W7), a few manual runs at most
        // (W8, a kubelet sync). Half the rate still tells 200 ms from the 1 s
        // a seconds-only worker would keep.
        let elapsed = end - start;
        let expected = elapsed.as_secs_f64() / FAST_PERIOD.as_secs_f64();
        let ran = runs - base;
        assert!(
            ran >= expected / 2.0 && ran <= expected + 3.0,
            "{ran} runs in {elapsed:?}, {expected:.1} expected every {FAST_PERIOD:?}\n{}",
            self.diagnostics()
        );
    }
}

impl Rig {
    /// A pod gated on `podprobe.io/ready`, labelled for this run, with
    /// `probes` as its annotation and `spec` merged over a minimal spec.
    fn create_custom_pod(&self, name: &str, probes: &str, spec: Value) {
        self.create_pod_with(name, Some(probes), true, spec);
    }

    /// A pod labelled for this run, with `probes` as its annotation if any,
    /// the `podprobe.io/ready` readiness gate if `gate`, and `spec` merged
    /// over a minimal spec.
    fn create_pod_with(&self, name: &str, probes: Option<&str>, gate: bool, spec: Value) {
        let manifest = self.manifest(name, probes, gate, spec);
        cluster().apply(&manifest).expect("create pod");
    }

    /// The manifest [`Self::create_pod_with`] applies.
    fn manifest(&self, name: &str, probes: Option<&str>, gate: bool, spec: Value) -> Value {
        let mut manifest = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.ns.name,
                "labels": {TEST_RUN_LABEL: self.run_id},
            },
            "spec": {"terminationGracePeriodSeconds": 30},
        });
        if let Some(probes) = probes {
            manifest["metadata"]["annotations"] = json!({"podprobe.io/probes": probes});
        }
        if gate {
            manifest["spec"]["readinessGates"] = json!([{"conditionType": GATE}]);
        }
        if let (Some(base), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        manifest
    }

    /// The reasons and notes of the events about `pod`, as "Reason: note".
    fn events(&self, pod: &str) -> Vec<String> {
        self.ns
            .events_for(pod)
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["message"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// Waits for an event about `pod` whose "Reason: note" contains `text`.
    fn wait_event(&self, pod: &str, text: &str) -> String {
        wait_for(
            &format!("an event about {pod} with {text:?}"),
            Duration::from_secs(60),
            || {
                let events = self.events(pod);
                events
                    .iter()
                    .find(|e| e.contains(text))
                    .cloned()
                    .ok_or(format!("{events:#?}"))
            },
            || self.diagnostics(),
        )
    }

    /// The log of the previous instance of `container` in `pod`.
    fn previous_log(&self, pod: &str, container: &str) -> String {
        self.ns
            .kubectl(&["logs", pod, "-c", container, "--previous"])
    }
}

/// A busybox container that prints on SIGTERM when it came and when it was
/// drained (`/shared/<name>-drained`, written by its preStop hook) and exits
/// 0 within a second. With `serve`, it also serves `/cgi-bin/drain` on port
/// 8080, which records the drain.
fn drainable(name: &str, serve: bool) -> Value {
    let mut script = String::new();
    if serve {
        script.push_str(&format!(
            "mkdir -p /www/cgi-bin; \
             echo '#!/bin/sh' > /www/cgi-bin/drain; \
             echo 'date +%s > /shared/{name}-drained' >> /www/cgi-bin/drain; \
             echo 'printf \"Content-Type: text/plain\\r\\n\\r\\nok\"' >> /www/cgi-bin/drain; \
             chmod +x /www/cgi-bin/drain; \
             httpd -p 8080 -h /www; "
        ));
    }
    script.push_str(&format!(
        "trap 'echo \"TERM at $(date +%s), drained at $(cat /shared/{name}-drained 2>/dev/null || echo never)\"; exit 0' TERM; \
         while true; do sleep 1; done"
    ));
    let mut container = json!({
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
    });
    if serve {
        container["ports"] = json!([{"name": "http", "containerPort": 8080}]);
    }
    container
}

/// A liveness probe that fails once `/tmp/kill-me` exists: a restarted
/// container (a new root filesystem) passes again.
fn kill_switch() -> Value {
    json!({"livenessProbe": {
        "exec": {"command": ["sh", "-c", "test ! -f /tmp/kill-me"]},
        "periodSeconds": 1, "failureThreshold": 1,
    }})
}

/// K7, L1-L3: a probe kill runs the container's preStop hook first, as the
/// kubelet's `killContainer` does, in gate mode next to the real kubelet.
/// `web`'s httpGet hook (a named port) reaches its server, which sees the
/// drain before SIGTERM; `exec`'s exec hook runs in the container and fails
/// (FailedPreStopHook, without its output); `sleeper`'s sleep hook holds
/// SIGTERM back for its 4 s.
#[test]
fn probe_kill_runs_the_pre_stop_hook_first() {
    let rig = Rig::new();
    let mut web = drainable("web", true);
    web["lifecycle"] = json!({"preStop": {"httpGet": {"path": "/cgi-bin/drain", "port": "http"}}});
    let mut exec = drainable("exec", false);
    exec["lifecycle"] = json!({"preStop": {"exec": {"command": [
        "sh", "-c", "date +%s > /shared/exec-drained; echo secret-output; exit 3",
    ]}}});
    let mut sleeper = drainable("sleeper", false);
    sleeper["lifecycle"] = json!({"preStop": {"sleep": {"seconds": 4}}});
    let probes = json!({"web": kill_switch(), "exec": kill_switch(), "sleeper": kill_switch()});
    rig.create_custom_pod(
        "hooks",
        &probes.to_string(),
        json!({
            "containers": [web, exec, sleeper],
            "volumes": [{"name": "shared", "emptyDir": {}}],
        }),
    );
    rig.wait_running("hooks");
    for container in ["web", "exec", "sleeper"] {
        let triggered = chrono_seconds(&rig, container);
        rig.ns.kubectl(&[
            "exec",
            "hooks",
            "-c",
            container,
            "--",
            "touch",
            "/tmp/kill-me",
        ]);
        wait_for(
            &format!("{container} restarted"),
            Duration::from_secs(90),
            || {
                let pod = rig.pod("hooks")?;
                let count = restart_count(&pod, container).unwrap_or(0);
                (count >= 1)
                    .then_some(())
                    .ok_or(format!("restartCount {count}"))
            },
            || rig.diagnostics(),
        );
        let log = rig.previous_log("hooks", container);
        let (term, drained) = parse_term_line(&log).unwrap_or_else(|| {
            panic!(
                "{container}: no TERM line in {log:?}\n{}",
                rig.diagnostics()
            )
        });
        match container {
            "web" | "exec" => {
                let drained = drained.unwrap_or_else(|| {
                    panic!(
                        "{container}: SIGTERM came without the hook's drain: {log:?}\n{}",
                        rig.diagnostics()
                    )
                });
                assert!(
                    drained <= term,
                    "{container}: drained at {drained}, after SIGTERM at {term}"
                );
            }
            _ => {
                // The sleep hook takes 4 s between the kill (within a
                // probe period of the trigger) and SIGTERM.
                assert!(
                    term - triggered >= 4,
                    "sleeper: SIGTERM {} s after the trigger, before its 4 s preStop sleep ended",
                    term - triggered
                );
            }
        }
    }
    let failed = rig.wait_event("hooks", "FailedPreStopHook");
    assert_eq!(failed, "FailedPreStopHook: PreStopHook failed");
    assert!(
        !rig.events("hooks")
            .iter()
            .any(|e| e.contains("secret-output")),
        "the hook's output must stay out of Events"
    );
    let logs = rig.podprobe.logs();
    assert!(
        logs.contains("Exec lifecycle hook ([sh -c date +%s > /shared/exec-drained; echo secret-output; exit 3]) for Container \\\"exec\\\"")
            || logs.contains("Exec lifecycle hook ([sh -c date +%s > /shared/exec-drained; echo secret-output; exit 3]) for Container \"exec\""),
        "the log says which hook failed and why:\n{}",
        rig.podprobe.log_tail(100)
    );
}

/// The container's clock (`date +%s` in it), which its TERM line uses.
fn chrono_seconds(rig: &Rig, container: &str) -> i64 {
    rig.ns
        .kubectl(&["exec", "hooks", "-c", container, "--", "date", "+%s"])
        .trim()
        .parse()
        .expect("date +%s")
}

/// `TERM at <s>, drained at <s|never>` from a [`drainable`] container's log.
fn parse_term_line(log: &str) -> Option<(i64, Option<i64>)> {
    let line = log.lines().find(|l| l.starts_with("TERM at "))?;
    let rest = line.strip_prefix("TERM at ")?;
    let (term, drained) = rest.split_once(", drained at ")?;
    Some((term.trim().parse().ok()?, drained.trim().parse().ok()))
}

/// K8, gate mode: under `restartPolicy: OnFailure` a container that exits 0
/// on SIGTERM after a probe kill stays down (the kubelet saw an exit it did
/// not cause); the `Killing` note does not promise a restart, and a Warning
/// says what happened.
#[test]
fn probe_killed_container_that_exits_0_under_on_failure_is_reported() {
    let rig = Rig::new();
    let app = drainable("app", false);
    rig.create_custom_pod(
        "once",
        &json!({"app": kill_switch()}).to_string(),
        json!({
            "restartPolicy": "OnFailure",
            "containers": [app],
            "volumes": [{"name": "shared", "emptyDir": {}}],
        }),
    );
    rig.wait_running("once");
    rig.ns
        .kubectl(&["exec", "once", "-c", "app", "--", "touch", "/tmp/kill-me"]);
    let killing = rig.wait_event("once", "Killing");
    assert_eq!(
        killing,
        "Killing: Container app failed liveness probe, will be restarted unless it exits 0 \
         (restartPolicy OnFailure)"
    );
    let warning = rig.wait_event("once", "ProbeKillNotRestarted");
    assert_eq!(
        warning,
        "ProbeKillNotRestarted: Container app exited 0 after podprobe stopped it for a failed \
         liveness probe; with restartPolicy OnFailure the kubelet does not restart it"
    );
    let pod = rig.pod("once").expect("pod");
    assert_eq!(restart_count(&pod, "app"), Some(0), "{pod:#}");
}

/// S6 (kubernetes #141473, #141487): a container replaced while podprobe
/// was down does not inherit the gate's True, however long before
/// podprobe's restart it started. The replacement has no `/tmp/ready`, and
/// its probe would need 100 failures to turn the gate False: only a
/// replacement that starts over from the initial Failure turns it False
/// within the bound.
#[test]
fn a_container_replaced_while_podprobe_was_down_starts_over() {
    let mut rig = Rig::new();
    let probes = json!({"app": {"readinessProbe": {
        "exec": {"command": ["cat", "/tmp/ready"]},
        "periodSeconds": 1, "failureThreshold": 100,
    }}});
    rig.create_pod("replaced", &probes.to_string());
    rig.wait_running("replaced");
    rig.exec("replaced", &["touch", "/tmp/ready"]);
    rig.wait_condition("replaced", GATE, "True", Duration::from_secs(30));
    assert_eq!(rig.podprobe.terminate(), Some(0), "{}", rig.podprobe.logs());

    // PID 1 (the shell) exits 0 on SIGTERM; the kubelet starts a new instance.
    rig.exec("replaced", &["kill", "1"]);
    wait_for(
        "a running replacement",
        Duration::from_secs(60),
        || {
            let pod = rig.pod("replaced")?;
            let count = restart_count(&pod, "app").unwrap_or(0);
            (count >= 1 && cluster::running(&pod, "app"))
                .then_some(())
                .ok_or(format!("restartCount {count}"))
        },
        || rig.diagnostics(),
    );
    // By start time alone (D5, S4: 10 s), the replacement now predates the
    // podprobe about to start.
    std::thread::sleep(Duration::from_secs(11));
    let pod = rig.pod("replaced").expect("pod");
    assert_eq!(
        condition(&pod, GATE).map(|c| c.0).as_deref(),
        Some("True"),
        "nobody wrote the gate since: it still speaks of the old instance"
    );
    rig.podprobe = HostPodprobe::start("gate", &cluster().node_name(), &rig.run_id);
    rig.wait_condition("replaced", GATE, "False", Duration::from_secs(20));
}

/// A busybox container whose HTTP server listens on the pod's loopback
/// only (`127.0.0.1:8080`): nothing outside the pod, the node included,
/// can reach it.
fn loopback_server() -> Value {
    busybox_spec(
        "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 127.0.0.1:8080 -h /www",
    )
}

/// Startup (tcpSocket) and readiness (httpGet) probes of port 8080 with
/// `podprobe.network` set to `network`: the gate turns True only once both
/// have passed.
fn loopback_probes(network: &str) -> String {
    let podprobe = json!({"network": network});
    json!({"app": {
        "startupProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "podprobe": podprobe},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1,
                           "podprobe": podprobe},
    }})
    .to_string()
}

/// #14 `network: pod`: with `--pod-network`, TCP and HTTP probes run from
/// inside the pod's network namespace and reach a server bound to the
/// pod's loopback; the same probes from the node's network (the pod IP,
/// the kubelet's way) are refused by the server's bind.
#[test]
fn pod_network_probes_reach_a_server_bound_to_the_pods_loopback() {
    let rig = Rig::with_args(&["--pod-network"]);
    // #25: once up, no thread of the daemon holds CAP_SYS_ADMIN; its
    // helper does.
    rig.podprobe.listen_addr();
    let main = rig.podprobe.pid();
    let threads: Vec<u32> = std::fs::read_dir(format!("/proc/{main}/task"))
        .expect("podprobe's threads")
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    assert!(threads.len() > 1, "the runtime's threads: {threads:?}");
    for thread in threads {
        assert!(
            !has_sys_admin(&format!("{main}/task/{thread}")),
            "podprobe run's thread {thread} holds CAP_SYS_ADMIN"
        );
    }
    let children = std::fs::read_to_string(format!("/proc/{main}/task/{main}/children"))
        .expect("podprobe's children");
    let helper: u32 = children
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("podprobe run --pod-network started no helper: {children:?}"));
    assert!(
        has_sys_admin(&helper.to_string()),
        "the helper (pid {helper}) lacks CAP_SYS_ADMIN"
    );
    rig.create_custom_pod("inside", &loopback_probes("pod"), loopback_server());
    rig.create_custom_pod("outside", &loopback_probes("node"), loopback_server());
    rig.wait_condition("inside", GATE, "True", Duration::from_secs(60));
    rig.wait_condition("inside", "Ready", "True", Duration::from_secs(20));
    let refused = rig.wait_event("outside", "Startup probe failed: dial tcp");
    assert!(
        refused.contains(":8080: connect: connection refused"),
        "{refused}"
    );
    let pod = rig.pod("outside").expect("pod");
    assert_ne!(
        condition(&pod, GATE).map(|c| c.0).as_deref(),
        Some("True"),
        "{}",
        rig.diagnostics()
    );
}

/// #14 `network: pod` without `--pod-network`: the probes do not run; a
/// Warning on the pod and a log line say why and what to enable, and the
/// gate never turns True.
#[test]
fn pod_network_without_the_flag_is_refused_with_an_event() {
    let rig = Rig::new();
    rig.create_custom_pod("refused", &loopback_probes("pod"), loopback_server());
    let event = rig.wait_event("refused", "ProbeAnnotationInvalid");
    assert_eq!(
        event,
        "ProbeAnnotationInvalid: podprobe.io/probes: container \"app\": \
         startupProbe.podprobe.network: Forbidden: \"pod\" is not enabled on this node (podprobe \
         run --pod-network; Helm value podNetwork.enabled)"
    );
    let logs = rig.podprobe.logs();
    assert!(
        logs.lines().any(|l| l.contains(r#"pod="refused""#)
            && l.contains(&format!("namespace=\"{}\"", rig.ns.name))
            && l.contains(r#"container="app""#)
            && l.contains("is not enabled on this node")),
        "no log line names the pod, namespace and container:\n{logs}"
    );
    rig.wait_running("refused");
    let pod = rig.pod("refused").expect("pod");
    assert_eq!(condition(&pod, GATE), None, "{pod:#}");
    assert_eq!(
        condition(&pod, "Ready").map(|c| c.0).as_deref(),
        Some("False")
    );
}

/// Whether `/proc/<task>` (a process or `pid/task/tid`) has CAP_SYS_ADMIN
/// (bit 21) in its effective set.
fn has_sys_admin(task: &str) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{task}/status")).expect("/proc status");
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .expect("CapEff");
    effective & (1 << 21) != 0
}

/// The wall clock `seconds` from now, as RFC 3339 (podprobe runs on this
/// host, so on this clock).
fn wall_in(seconds: i64) -> String {
    let span = k8s_openapi::jiff::SignedDuration::from_secs(seconds);
    (k8s_openapi::jiff::Timestamp::now() + span).to_string()
}

/// `date -u -d <offset>` in the README's liveness pause example's format.
fn date_in(offset: &str) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", offset, "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    assert!(out.status.success(), "date: {out:?}");
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string()
}

/// Sets (or with `None` removes) `pod`'s liveness pause annotation.
fn set_pause(rig: &Rig, pod: &str, until: Option<&str>) {
    let value = match until {
        Some(until) => format!("podprobe.io/pause-liveness-until={until}"),
        None => "podprobe.io/pause-liveness-until-".to_string(),
    };
    rig.ns
        .kubectl(&["annotate", "--overwrite", "pod", pod, &value]);
}

/// A pod whose annotated liveness probe always fails (every second, killed
/// at the second failure), with a spec livenessProbe that always succeeds
/// (the kubelet's, which the pause does not cover: LP5), created with
/// `pause_until` as its liveness pause if given.
fn failing_liveness_pod(rig: &Rig, name: &str, pause_until: Option<&str>) {
    let probes = r#"{"app": {"livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 2}}}"#;
    let mut spec = busybox_spec(IDLE);
    spec["containers"][0]["livenessProbe"] =
        json!({"exec": {"command": ["true"]}, "periodSeconds": 10});
    let mut manifest = rig.manifest(name, Some(probes), true, spec);
    if let Some(until) = pause_until {
        manifest["metadata"]["annotations"]["podprobe.io/pause-liveness-until"] = json!(until);
    }
    cluster().apply(&manifest).expect("create pod");
}

/// When `pod`'s `app` container last terminated, in epoch seconds.
fn last_finished(pod: &Value) -> Option<i64> {
    let statuses = pod["status"]["containerStatuses"].as_array()?;
    let app = statuses.iter().find(|s| s["name"] == "app")?;
    cluster::epoch_seconds(app["lastState"]["terminated"]["finishedAt"].as_str()?)
}

/// LP1, LP3, LP5: a paused pod's failing liveness probe kills nothing while
/// the pause holds; moved to a near time, the pause ends at that time and
/// the container is killed after `failureThreshold` failures from then.
#[test]
fn lp1_lp3_a_paused_pod_is_not_killed_until_the_pause_ends() {
    let rig = Rig::new();
    // Paused when podprobe first sees it: its liveness worker never starts.
    failing_liveness_pod(&rig, "paused", Some(&wall_in(3600)));
    rig.wait_running("paused");
    let paused = rig.wait_event("paused", "LivenessPaused");
    assert!(
        paused.contains("podprobe stops no container for them (containers app)")
            && paused.contains("the kubelet's own livenessProbe of app is not paused"),
        "{paused}"
    );
    // Unpaused, the probe kills within two periods; paused, not in eight.
    rig.ns
        .holds_for("no restart while paused", Duration::from_secs(8), || {
            let pod = rig.pod("paused")?;
            match restart_count(&pod, "app") {
                Some(0) => Ok(()),
                other => Err(format!("restartCount {other:?}")),
            }
        });
    // The pause now ends in 5 s (a move: LivenessPaused again), the time
    // written as the README's example writes it.
    let until = date_in("+5 seconds");
    set_pause(&rig, "paused", Some(&until));
    let until_s = cluster::epoch_seconds(&until).expect("an RFC 3339 time");
    let pod = rig.wait_restarted("paused", "app", Duration::from_secs(90));
    let finished = last_finished(&pod).expect("lastState.terminated.finishedAt");
    // Not before the pause ended (the API's times are whole seconds); the
    // kill itself is two failing runs a second apart after it, then at
    // most the grace period (2 s); the rest is the loaded machine's.
    assert!(
        finished >= until_s,
        "killed at {finished}, before the pause ended at {until_s}\n{}",
        rig.diagnostics()
    );
    rig.wait_event("paused", "LivenessResumed: Liveness probes resumed");
    let notes = rig.events("paused");
    let moved = notes
        .iter()
        .filter(|e| e.starts_with("LivenessPaused"))
        .count();
    assert_eq!(moved, 2, "{notes:#?}");
    assert!(
        notes
            .iter()
            .any(|e| e.contains("Container app failed liveness probe, will be restarted")),
        "{notes:#?}"
    );
}

/// LP2, LP4: a pause beyond the node's bound (`--max-liveness-pause-seconds`)
/// is refused with a Warning naming the bound, and liveness kills as usual.
#[test]
fn lp4_a_pause_beyond_the_bound_is_a_warning_and_liveness_kills() {
    let rig = Rig::with_args(&["--max-liveness-pause-seconds=60"]);
    failing_liveness_pod(&rig, "refused", None);
    rig.wait_running("refused");
    set_pause(&rig, "refused", Some(&wall_in(3600)));
    let warning = rig.wait_event("refused", "LivenessPauseInvalid");
    assert!(
        warning.contains(
            "is more than 60 s from now, the longest pause this node allows; liveness probes run"
        ),
        "{warning}"
    );
    rig.wait_restarted("refused", "app", Duration::from_secs(60));
}

/// MK1-MK4 on the cluster: a Service selects `role=primary`; a pod's
/// readiness probe (`cat /tmp/primary`, every second, thresholds 1) marks
/// its pod `role=primary` on success and `role=replica` on failure. The
/// Service's EndpointSlice follows the file, and a label someone else
/// changes is put back. A marker of a key the node does not allow is a
/// MarkerNotAllowed event and is never written.
#[test]
fn mk1_mk4_a_service_selecting_role_primary_follows_a_probe() {
    let rig = Rig::with_args(&["--marker-keys", "role"]);
    let probes = r#"{"app": {"readinessProbe": {"exec": {"command": ["cat", "/tmp/primary"]}, "periodSeconds": 1, "failureThreshold": 1, "podprobe": {"markers": [
        {"label": "role", "onSuccess": "primary", "onFailure": "replica"},
        {"annotation": "example.com/not-allowed", "onSuccess": "x"}]}}}}"#;
    let mut manifest = rig.manifest("db-0", Some(probes), true, busybox_spec(IDLE));
    manifest["metadata"]["labels"]["app"] = json!("db");
    cluster().apply(&manifest).expect("create pod");
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "primary", "namespace": rig.ns.name},
        "spec": {
            "selector": {"app": "db", "role": "primary", TEST_RUN_LABEL: rig.run_id},
            "ports": [{"port": 80, "targetPort": 8080}],
        },
    });
    cluster().apply(&service).expect("create service");
    rig.wait_running("db-0");
    // A marker follows the cached result (MK3): one failed run, a status
    // resync (10 s) at most for the write, and slack for a loaded machine.
    let within = Duration::from_secs(1 + 1 + 10 + 20);
    let label_is = |want: &str| {
        wait_for(
            &format!("db-0 labelled role={want}"),
            within,
            || {
                let pod = rig.pod("db-0")?;
                let role = pod["metadata"]["labels"]["role"]
                    .as_str()
                    .unwrap_or("(none)")
                    .to_string();
                (role == want).then_some(()).ok_or(format!("role={role}"))
            },
            || rig.diagnostics(),
        )
    };
    // The Service's endpoints: the pods it selects, ready or not.
    let endpoints = || -> Result<Vec<String>, String> {
        let slices = cluster().kubectl(&[
            "-n",
            &rig.ns.name,
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=primary",
            "-o",
            "json",
        ])?;
        let slices: Value = serde_json::from_str(&slices).map_err(|e| e.to_string())?;
        Ok(slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["targetRef"]["name"].as_str().map(str::to_string))
            .collect())
    };
    let endpoints_are = |want: &[&str]| {
        wait_for(
            &format!("the Service's endpoints {want:?}"),
            within,
            || {
                let have = endpoints()?;
                (have == want).then_some(()).ok_or(format!("{have:?}"))
            },
            || rig.diagnostics(),
        )
    };
    label_is("replica");
    endpoints_are(&[]);
    let refused = rig.wait_event("db-0", "MarkerNotAllowed");
    assert!(
        refused.contains("marker annotation \"example.com/not-allowed\" is not written")
            && refused.contains("--marker-keys, chart markers.allowedKeys: role"),
        "{refused}"
    );

    rig.exec("db-0", &["touch", "/tmp/primary"]);
    label_is("primary");
    endpoints_are(&["db-0"]);

    rig.exec("db-0", &["rm", "/tmp/primary"]);
    label_is("replica");
    endpoints_are(&[]);

    // Drift: someone else marks it primary; podprobe puts it back.
    rig.ns
        .kubectl(&["label", "--overwrite", "pod", "db-0", "role=primary"]);
    label_is("replica");
    let pod = rig.pod("db-0").expect("pod");
    assert!(
        pod["metadata"]["annotations"]["example.com/not-allowed"].is_null(),
        "a key the node does not allow was written: {}",
        pod["metadata"]
    );
}
