//! `podprobe simulate` end to end, as a process: real manifests and scripts
//! in, the real prober on a virtual clock, the JSON lines it prints checked
//! event by event.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tempfile::TempDir;

/// Writes `pod` and `script` into a fresh directory and runs
/// `podprobe simulate` on them with `extra` flags.
fn simulate(pod: &str, script: &str, extra: &[&str]) -> Output {
    let dir = TempDir::new().expect("temp dir");
    let pod_path = write(dir.path(), "pod.yaml", pod);
    let script_path = write(dir.path(), "script.yaml", script);
    Command::new(env!("CARGO_BIN_EXE_podprobe"))
        .args(["simulate", "--pod", &pod_path, "--script", &script_path])
        .args(extra)
        .output()
        .expect("run podprobe")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write input");
    path.display().to_string()
}

/// The output lines of a successful run, parsed.
fn lines(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "podprobe simulate failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout.clone()).expect("UTF-8 output");
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

/// One event in a compact, readable form: `20 app#1 killed liveness 30`,
/// `0 condition False`.
fn brief(event: &Value) -> String {
    let t = event["t"].as_f64().expect("t");
    let mut parts = vec![if t.fract() == 0.0 {
        format!("{t}")
    } else {
        format!("{t:.3}")
    }];
    if let Some(container) = event["container"].as_str() {
        parts.push(format!("{container}#{}", event["instance"]));
    }
    let name = event["event"].as_str().expect("event");
    parts.push(name.to_string());
    let detail = match name {
        "probe" => vec![&event["kind"], &event["result"]],
        "started" | "ready" => vec![&event["value"]],
        "killed" => vec![&event["kind"], &event["grace_seconds"]],
        "condition" => vec![&event["status"]],
        _ => vec![],
    };
    parts.extend(detail.into_iter().map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }));
    parts.join(" ")
}

/// All events but the summary, in brief form, keeping those for which
/// `keep` holds.
fn events(lines: &[Value], keep: impl Fn(&str) -> bool) -> Vec<String> {
    lines
        .iter()
        .filter(|line| line["event"] != "summary")
        .map(brief)
        .filter(|b| keep(b))
        .collect()
}

fn summary(lines: &[Value]) -> &Value {
    let last = lines.last().expect("output is not empty");
    assert_eq!(last["event"], "summary");
    last
}

/// Times of the events whose brief form contains `what`.
fn times(lines: &[Value], what: &str) -> Vec<f64> {
    lines
        .iter()
        .filter(|line| line["event"] != "summary" && brief(line).contains(what))
        .map(|line| line["t"].as_f64().expect("t"))
        .collect()
}

fn every(start: u32, step: u32, end: u32) -> Vec<f64> {
    (start..=end)
        .step_by(step as usize)
        .map(f64::from)
        .collect()
}

const SLOW_APP_LIVENESS_ONLY: &str = "
apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  containers:
  - name: app
    image: app
    livenessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 10
      failureThreshold: 3
";

/// The same slow app with a startup probe budget of 30 x 2 s.
const SLOW_APP_WITH_STARTUP: &str = "
apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  terminationGracePeriodSeconds: 45
  containers:
  - name: app
    image: app
    startupProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 2
      failureThreshold: 30
      terminationGracePeriodSeconds: 7
    readinessProbe:
      httpGet: {path: /ready, port: 8080}
      periodSeconds: 10
    livenessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 10
      failureThreshold: 3
";

/// Every probe of the app fails until it has run for `healthy_after` seconds.
fn slow_app_script(healthy_after: u32, duration: u32) -> String {
    format!(
        "
duration: {duration}
containers:
  app:
    startup: [{{from: 0, to: {healthy_after}, result: failure}}]
    readiness: [{{from: 0, to: {healthy_after}, result: failure}}]
    liveness: [{{from: 0, to: {healthy_after}, result: failure}}]
"
    )
}

#[test]
fn k2_slow_start_without_startup_probe_is_killed_by_liveness_in_a_loop() {
    // A plain manifest (no annotation): its spec's probes, without --mode.
    let out = lines(&simulate(
        SLOW_APP_LIVENESS_ONLY,
        &slow_app_script(60, 100),
        &[],
    ));
    // The liveness worker's first run (at admission) finds no container
    // yet; it probes from its first tick (no startup probe: started at
    // start), fails at 10, 20 and 30; the third failure reaches the
    // threshold and kills.
    assert_eq!(
        events(&out, |_| true)[..12],
        [
            "0 app#1 started_running",
            "0 app#1 started true",
            "0 app#1 ready true",
            "10 app#1 probe liveness failure",
            "20 app#1 probe liveness failure",
            "30 app#1 probe liveness failure",
            "30 app#1 killed liveness 30",
            "30 app#1 started false",
            "30 app#1 ready false",
            "30 app#2 started_running",
            "30 app#2 started true",
            "30 app#2 ready true",
        ]
    );
    // The new instance is probed on the worker's grid (40, 50, 60) and, never
    // older than 60 s, never becomes healthy: a restart loop.
    assert_eq!(
        events(&out, |e| e.contains("killed")),
        [
            "30 app#1 killed liveness 30",
            "60 app#2 killed liveness 30",
            "90 app#3 killed liveness 30",
        ]
    );
    let killed = out.iter().find(|l| l["event"] == "killed").unwrap();
    assert_eq!(
        killed["message"],
        "Container app failed liveness probe, will be restarted"
    );
    assert_eq!(summary(&out)["containers"]["app"]["restarts"], 3);
    assert_eq!(summary(&out)["duration"], 100.0);
}

#[test]
fn d10_startup_probe_saves_the_slow_app() {
    let out = lines(&simulate(
        SLOW_APP_WITH_STARTUP,
        &slow_app_script(55, 90),
        &["--mode", "authority"],
    ));
    assert_eq!(events(&out, |e| e.contains("killed")), Vec::<String>::new());
    // The startup worker's first run (at 0) finds no container yet, so it
    // probes from its first tick: fails every 2 s from 2 to 54 (27 runs,
    // below 30), passes at 56.
    assert_eq!(times(&out, "probe startup failure"), every(2, 2, 54));
    assert_eq!(times(&out, "probe startup success"), [56.0]);
    assert_eq!(times(&out, "started true"), [56.0]);
    // Liveness and readiness never ran before the container was started.
    assert_eq!(times(&out, "probe liveness"), [60.0, 70.0, 80.0, 90.0]);
    assert!(times(&out, "probe readiness").iter().all(|&t| t >= 56.0));
    let app = &summary(&out)["containers"]["app"];
    assert_eq!(
        (&app["restarts"], &app["started"], &app["ready"]),
        (&Value::from(0), &Value::from(true), &Value::from(true))
    );
}

#[test]
fn k3_startup_budget_counts_from_the_first_probe() {
    // The first startup probe comes at the worker's first tick after the
    // container started (2 s); healthy at exactly 62 s is too late: the
    // 30th failure comes at 60 s. The kill uses the startup probe's own
    // grace period.
    let out = lines(&simulate(
        SLOW_APP_WITH_STARTUP,
        &slow_app_script(62, 200),
        &["--mode", "authority", "--duration", "72"],
    ));
    assert_eq!(
        events(&out, |e| e.contains("killed")
            || e.contains("started_running")),
        [
            "0 app#1 started_running",
            "60 app#1 killed startup 7",
            "60 app#2 started_running",
        ]
    );
    assert_eq!(
        times(&out, "probe startup").len(),
        30 + 6,
        "2..60 and 62..72"
    );
    assert_eq!(summary(&out)["duration"], 72.0);
}

#[test]
fn w8_readiness_runs_at_once_when_startup_succeeds() {
    let out = lines(&simulate(
        SLOW_APP_WITH_STARTUP,
        &slow_app_script(55, 80),
        &["--mode", "authority"],
    ));
    assert_eq!(
        events(&out, |e| e.starts_with("56 ")),
        [
            "56 app#1 probe startup success",
            "56 app#1 started true",
            "56 app#1 probe readiness success",
            "56 app#1 ready true",
        ]
    );
    // The manual run reset the ticker: the next readiness probe is one period
    // later, not on the old grid (60).
    assert_eq!(times(&out, "probe readiness"), [56.0, 66.0, 76.0]);
}

const FLAPPING: &str = "
apiVersion: v1
kind: Pod
metadata: {name: flappy}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 5
      failureThreshold: 3
      successThreshold: 2
";

#[test]
fn d14_readiness_flaps_only_across_its_thresholds() {
    let script = "
duration: 70
containers:
  app:
    readiness:
      - {from: 20, to: 30, result: failure}   # two failures: below the threshold
      - {from: 30, to: 40, result: success}
      - {from: 40, to: 55, result: failure}   # three failures
";
    let out = lines(&simulate(FLAPPING, script, &["--mode", "authority"]));
    assert_eq!(
        events(&out, |e| e.contains(" ready ")),
        [
            "0 app#1 ready true",
            "50 app#1 ready false",
            "60 app#1 ready true"
        ]
    );
    // At 0 the status sync after the container started triggered a second
    // run at once (W8), which made the two successes; at 50 the sync after
    // the failure triggered another run and reset the ticker.
    let mut expected = vec![0.0];
    expected.extend(every(0, 5, 50));
    expected.extend(every(50, 5, 70));
    assert_eq!(times(&out, "probe readiness"), expected);
    assert_eq!(
        events(&out, |e| e.starts_with("50 ")),
        [
            "50 app#1 probe readiness failure",
            "50 app#1 ready false",
            "50 app#1 probe readiness failure",
        ]
    );
}

#[test]
fn gate_mode_reports_the_podprobe_ready_condition() {
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: gated
  annotations:
    podprobe.io/probes: '{"app": {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5}}}'
spec:
  readinessGates: [{conditionType: podprobe.io/ready}]
  containers:
  - name: app
    image: app
    readinessProbe:          # the kubelet's own probe: not podprobe's in gate mode
      tcpSocket: {port: 8080}
      periodSeconds: 7
"#;
    let script = "
duration: 40
containers:
  app:
    readiness:
      - {from: 0, to: 20, result: failure}
      - {from: 25, to: 30, result: error}   # thrown away (D11)
      - {from: 30, result: failure}
";
    // The annotation selects gate mode.
    let out = lines(&simulate(pod, script, &[]));
    assert_eq!(
        events(&out, |e| e.contains("condition") || e.contains(" ready ")),
        [
            "0 condition False",
            "20 app#1 ready true",
            "20 condition True",
            "40 app#1 ready false",
            "40 condition False",
        ]
    );
    let first = out.iter().find(|l| l["event"] == "condition").unwrap();
    assert_eq!(first["type"], "podprobe.io/ready");
    assert_eq!(first["reason"], "ContainersNotReady");
    assert_eq!(first["message"], "containers with unready status: [app]");
    assert!(first.get("container").is_none());
    // The annotation's period, not the spec's; errors (D11) change nothing.
    // At 0: the manual run the pod sync after the container started asked
    // for (the worker's own first run found no container yet), and another
    // one the sync after the initial Failure was cached asked for (W8, K6);
    // at 40 the one after the flip to Failure.
    let mut expected = vec![0.0];
    expected.extend(every(0, 5, 40));
    expected.push(40.0);
    assert_eq!(times(&out, "probe readiness"), expected);
    assert_eq!(summary(&out)["condition"], "False");
}

/// `podprobe.periodMilliseconds` (#14): the same thresholds, counted in runs
/// 200 ms apart.
#[test]
fn d14_period_milliseconds_runs_the_thresholds_on_its_period() {
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: fast
  annotations:
    podprobe.io/probes: '{"app": {"readinessProbe": {"tcpSocket": {"port": 8080}, "successThreshold": 2, "podprobe": {"periodMilliseconds": 200}}}}'
spec:
  readinessGates: [{conditionType: podprobe.io/ready}]
  containers:
  - name: app
    image: app
"#;
    let script = "
duration: 2.5
containers:
  app:
    readiness:
      - {from: 1, to: 2, result: failure}
";
    let out = lines(&simulate(pod, script, &[]));
    // The third failure (1.0, 1.2, 1.4) turns it unready; the sync after
    // the flip runs it once more at once and resets the ticker (W8); the
    // second success after the window (2.0, 2.2) turns it ready again.
    assert_eq!(
        events(&out, |e| e.contains("condition") || e.contains(" ready ")),
        [
            "0 app#1 ready true",
            "0 condition False",
            "0 condition True",
            "1.400 app#1 ready false",
            "1.400 condition False",
            "2.200 app#1 ready true",
            "2.200 condition True",
        ]
    );
    let tenths: Vec<f64> = times(&out, "probe readiness")
        .iter()
        .map(|t| (t * 10.0).round())
        .collect();
    assert_eq!(
        tenths,
        [0, 0, 2, 4, 6, 8, 10, 12, 14, 14, 16, 18, 20, 22, 24].map(f64::from)
    );
    let svg = stdout(&simulate(pod, script, &["--output", "svg"]));
    assert!(
        svg.contains(
            ">readiness: period 200ms, success 2, failure 3, initial delay 0s, timeout 1s</text>"
        ),
        "{svg}"
    );
}

const SIDECAR_POD: &str = "
apiVersion: v1
kind: Pod
metadata: {name: busy}
spec:
  initContainers:
  - name: setup
    image: x
  - name: proxy
    image: x
    restartPolicy: Always
    startupProbe: {exec: {command: [ok]}, periodSeconds: 1, failureThreshold: 3, terminationGracePeriodSeconds: 5}
    readinessProbe: {exec: {command: [ok]}, periodSeconds: 3}
  containers:
  - name: app
    image: x
    readinessProbe: {exec: {command: [ok]}, periodSeconds: 4, successThreshold: 2}
    livenessProbe: {exec: {command: [ok]}, periodSeconds: 4, failureThreshold: 2}
  - name: web
    image: x
    livenessProbe: {exec: {command: [ok]}, periodSeconds: 3}
";

const SIDECAR_SCRIPT: &str = "
duration: 90
containers:
  proxy:
    startAfter: 1
    restartDelay: 2.5
    startup:
      - {from: 0, to: 2, result: error}
      - {from: 2, to: 4.2, result: failure}
      - {from: 4.2, to: 6, result: warning}
  app:
    startAfter: 2
    restartDelay: 1.5
    readiness:
      - {from: 3, to: 9, result: failure}
    liveness:
      - {from: 5, to: 10.2, result: failure}
  web:
    startAfter: 0.25
";

#[test]
fn same_input_gives_byte_identical_output() {
    let first = simulate(SIDECAR_POD, SIDECAR_SCRIPT, &["--mode", "authority"]);
    let second = simulate(SIDECAR_POD, SIDECAR_SCRIPT, &["--mode", "authority"]);
    let out = lines(&first);
    assert!(out.len() > 50, "a busy run: {} lines", out.len());
    assert_eq!(first.stdout, second.stdout);
    // The run exercises restarts of both a sidecar and a regular container.
    assert_eq!(
        events(&out, |e| e.contains("killed")),
        [
            "4.750 proxy#1 killed startup 5",
            "11.750 app#1 killed liveness 30"
        ]
    );
    let containers = &summary(&out)["containers"];
    assert_eq!(containers["proxy"]["restarts"], 1);
    assert_eq!(containers["app"]["restarts"], 1);
    assert_eq!(containers["web"]["restarts"], 0);
    // Sorted by time, then container.
    let keys: Vec<(f64, String)> = out
        .iter()
        .filter(|l| l["event"] != "summary")
        .map(|l| {
            (
                l["t"].as_f64().unwrap(),
                l["container"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{keys:?}");
}

/// Runs with invalid input and returns stderr, checking exit status 64 and
/// an empty stdout.
fn rejected(pod: &str, script: &str, extra: &[&str]) -> String {
    let output = simulate(pod, script, extra);
    assert_eq!(output.status.code(), Some(64), "{output:?}");
    assert!(output.stdout.is_empty());
    String::from_utf8(output.stderr).expect("UTF-8")
}

#[test]
fn invalid_script_exits_64_naming_the_field() {
    let authority = ["--mode", "authority"];
    let cases = [
        (
            "containers: {app: {readiness: [{from: 0, to: 5, result: failure}, {from: 5, result: ok}]}}",
            r#"script: containers.app.readiness[1].result: unknown result "ok" (expected success, warning, failure or error)"#,
        ),
        (
            "containers: {app: {liveness: [{from: 0, to: 9, result: failure}, {from: 3, result: success}]}}",
            "script: containers.app.liveness[1].from: 3 overlaps the previous window, which ends at 9",
        ),
        (
            "containers: {ghost: {}}",
            r#"script: containers.ghost: the pod has no container or restartable init container "ghost" (it has: app)"#,
        ),
        (
            "containers: {app: {startAfter: later}}",
            "script: containers.app.startAfter: expected a number of seconds, got a string",
        ),
        ("{}", "script: duration: required (or pass --duration)"),
    ];
    for (script, message) in cases {
        let stderr = rejected(SLOW_APP_LIVENESS_ONLY, script, &authority);
        assert_eq!(
            stderr,
            format!("podprobe simulate: invalid input: {message}\n")
        );
    }
    let stderr = rejected(
        SLOW_APP_LIVENESS_ONLY,
        "duration: 5",
        &["--mode", "authority", "--duration", "-2"],
    );
    assert_eq!(
        stderr,
        "podprobe simulate: invalid input: --duration: must not be negative (got -2)\n"
    );
}

#[test]
fn invalid_pod_exits_64_naming_the_field() {
    let bad_probe = SLOW_APP_LIVENESS_ONLY.replace("failureThreshold: 3", "failureThreshold: -1");
    let stderr = rejected(&bad_probe, "duration: 5", &["--mode", "authority"]);
    assert!(
        stderr.starts_with(
            "podprobe simulate: invalid input: pod: spec.containers[0].livenessProbe.failureThreshold: "
        ),
        "{stderr}"
    );
    let stderr = rejected(SLOW_APP_LIVENESS_ONLY, "duration: 5", &["--mode", "gate"]);
    assert!(
        stderr
            .contains(r#"pod: metadata.annotations["podprobe.io/probes"]: required in gate mode"#),
        "{stderr}"
    );
    let bad_annotation = r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations: {podprobe.io/probes: '{"app": {"readinessProbe": {"tcpSocket": {"prot": 80}}}}'}
spec:
  containers: [{name: app, image: x}]
"#;
    let stderr = rejected(bad_annotation, "duration: 5", &["--mode", "gate"]);
    assert_eq!(
        stderr,
        "podprobe simulate: invalid input: pod: podprobe.io/probes: container \"app\": \
         readinessProbe.tcpSocket.prot: unknown field\n"
    );
    let stderr = rejected("[not, a, pod]", "duration: 5", &["--mode", "authority"]);
    assert_eq!(
        stderr,
        "podprobe simulate: invalid input: pod: not a core/v1 Pod: invalid type: sequence, expected Pod\n"
    );
}

/// The workload the docs simulate: tests/e2e_kind.rs's
/// `server_dependent_deployment` as one pod manifest (six replicas come
/// from the script), readiness and liveness both calling a dependency.
const REPLICAS: u64 = 6;
/// Its `readinessFloor: {minReady: "50%"}` of six, rounded up.
const MIN_READY: u64 = 3;

/// The docs' workload example run with `extra` flags: its summary's
/// `workload`, parsed and as printed.
fn docs_workload(extra: &[&str]) -> (Value, String) {
    let (pod, script) = (
        cli_doc_heredoc("/tmp/workload.yaml"),
        cli_doc_heredoc("/tmp/outage.yaml"),
    );
    let output = simulate(&pod, &script, extra);
    let again = simulate(&pod, &script, extra);
    assert_eq!(
        output.stdout, again.stdout,
        "the same input, the same bytes"
    );
    let text = stdout(&output);
    let last = text.lines().last().unwrap_or_default();
    let printed = last
        .split_once("\"workload\":")
        .and_then(|(_, rest)| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("no workload in the summary: {last}"));
    (
        summary(&lines(&output))["workload"].clone(),
        printed.to_string(),
    )
}

/// WG2 and WG3 together, the kind scenario
/// (`wg2_wg3_a_deployment_on_a_failing_dependency_keeps_its_floor_and_its_budget`)
/// simulated: the dependency is down for 45 s (the kind run's
/// SERVER_DOWN). The bounds come from the settings: the floor lets at most
/// REPLICAS - MIN_READY gates go; those replicas are NotReady, so their
/// restarts are free, and they keep more than `maxUnavailable: 1`
/// unavailable, so no held replica gets a unit before its
/// `maxDeferralSeconds` (600, beyond the outage): at most REPLICAS -
/// MIN_READY restart. The control, the same script without the guards,
/// goes down whole.
///
/// The kind run measured: control 6 of 6 NotReady at once and 6
/// restarted; guarded at most 3 NotReady at once, 3 held Ready, 3
/// restarted, 16 deferred and 14 held decisions. The simulation gives
/// the same 6/6 and 3/3, with 18 deferred and 15 held decisions. The
/// decision counts depend on when the resyncs fall and on the API's
/// latency, neither of which is the kind run's here (not measured), so
/// only their being there is checked.
#[test]
fn wg2_wg3_the_kind_outage_simulated_keeps_its_floor_and_its_budget() {
    let (control, control_printed) = docs_workload(&["--without-guards"]);
    assert_eq!(control["most_not_ready"], REPLICAS, "{control}");
    assert_eq!(control["restarted"], REPLICAS, "{control}");
    assert_eq!(
        (control["deferred"].as_u64(), control["held"].as_u64()),
        (Some(0), Some(0))
    );
    let (guarded, guarded_printed) = docs_workload(&[]);
    let number = |key: &str| {
        guarded[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {guarded}"))
    };
    assert!(
        number("most_not_ready") <= REPLICAS - MIN_READY,
        "{guarded}"
    );
    assert!(number("restarted") <= REPLICAS - MIN_READY, "{guarded}");
    assert!(number("held") > 0, "{guarded}");
    assert!(number("deferred") > 0, "{guarded}");
    // What docs/cli.md says the example prints, the control first.
    let doc = include_str!("../docs/cli.md");
    let printed =
        format!("```text\n\"workload\":{control_printed}\n\"workload\":{guarded_printed}\n```");
    assert!(doc.contains(&printed), "docs/cli.md lacks {printed}");
}

#[test]
fn invalid_workload_script_exits_64_naming_the_field() {
    let pod = cli_doc_heredoc("/tmp/workload.yaml");
    let cases = [
        (
            "{duration: 9, replicas: 0}",
            "script: replicas: expected a whole number from 1 to 100, got 0",
        ),
        (
            "{duration: 9, replicas: 101}",
            "script: replicas: expected a whole number from 1 to 100, got 101",
        ),
        (
            "{duration: 9, replicas: 2, outage: {from: 5, to: 5}}",
            "script: outage.to: 5 must be after from (5)",
        ),
        (
            "{duration: 9, replicas: 2, outage: {from: 5}}",
            "script: outage.to: required",
        ),
        (
            "{duration: 9, replicas: 2, outage: {from: 5, to: 10}}",
            "script: outage.to: 10 is past the end of the simulation (9, the script's duration or --duration)",
        ),
    ];
    for (script, message) in cases {
        assert_eq!(
            rejected(&pod, script, &[]),
            format!("podprobe simulate: invalid input: {message}\n")
        );
    }
    let stderr = rejected(
        &pod,
        "{duration: 60, replicas: 2, outage: {from: 5, to: 30}}",
        &["--duration", "20"],
    );
    assert_eq!(
        stderr,
        "podprobe simulate: invalid input: script: outage.to: 30 is past the end of the simulation \
         (20, the script's duration or --duration)\n"
    );
}

#[test]
fn help_explains_every_flag_and_the_script() {
    let output = Command::new(env!("CARGO_BIN_EXE_podprobe"))
        .args(["simulate", "--help"])
        .output()
        .expect("run podprobe");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).expect("UTF-8");
    for needle in [
        "--pod",
        "--script",
        "--mode",
        "authority otherwise",
        "--duration",
        "startAfter",
        "restartDelay",
        "{from: 0, to: 55, result: failure}",
        "Example (a plain manifest",
        "--output",
        "--output svg draws the same events as a timeline",
        "self-contained page",
        "--output svg > timeline.svg",
        "replicas: 6",
        "outage: {from: 10, to: 55}",
        "--without-guards",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

/// The stdout of a successful run, as text.
fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "podprobe simulate failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

/// Renders `svg` to PNG with `rsvg-convert`, which refuses malformed XML
/// and SVG it cannot draw. Fails, never skips, without `rsvg-convert`.
fn assert_renders(svg: &str) {
    let dir = TempDir::new().expect("temp dir");
    let svg_path = write(dir.path(), "timeline.svg", svg);
    let png_path = dir.path().join("timeline.png");
    let output = match Command::new("rsvg-convert")
        .args(["--format", "png", "--output"])
        .arg(&png_path)
        .arg(&svg_path)
        .output()
    {
        Ok(output) => output,
        Err(e) => panic!(
            "cannot run rsvg-convert ({e}): the SVG tests need it to check that the SVG \
             renders; install librsvg2-bin (hack/install-deps.sh does)"
        ),
    };
    assert!(
        output.status.success(),
        "rsvg-convert rejected the SVG: {}\n{svg}",
        String::from_utf8_lossy(&output.stderr)
    );
    let png = std::fs::read(&png_path).expect("rsvg-convert wrote the PNG");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}

/// How many times `needle` occurs in `text`.
fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// The SVG elements (one a line) whose class starts with `class`.
fn elements<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
    let needle = format!("class=\"{class}");
    svg.lines().filter(|l| l.contains(&needle)).collect()
}

/// Checks the timeline against the JSON lines of the same run: one mark
/// per probe run, coloured by its result; one marker per kill and per
/// container instance; the condition band only in gate mode.
fn assert_svg_matches_json(svg: &str, json: &[Value], gate: bool) {
    let records: Vec<&Value> = json.iter().filter(|l| l["event"] != "summary").collect();
    let of = |event: &str| records.iter().filter(|r| r["event"] == event).count();
    assert_eq!(elements(svg, "probe ").len(), of("probe"));
    for (result, colour) in [
        ("success", "#2ca02c"),
        ("warning", "#f0a30a"),
        ("failure", "#d62728"),
        ("error", "#8c8c8c"),
    ] {
        let marks = elements(svg, &format!("probe {result}\""));
        let runs = records
            .iter()
            .filter(|r| r["event"] == "probe" && r["result"] == result)
            .count();
        assert_eq!(marks.len(), runs, "{result} marks");
        let fill = format!("fill=\"{colour}\"");
        assert!(marks.iter().all(|m| m.contains(&fill)), "{result}: {fill}");
    }
    assert_eq!(count(svg, "<g class=\"kill\">"), of("killed"));
    for kill in records.iter().filter(|r| r["event"] == "killed") {
        let label = format!("killed by {} probe", kill["kind"].as_str().unwrap());
        assert!(svg.contains(&label), "{label}");
    }
    assert_eq!(count(svg, "<g class=\"instance\">"), of("started_running"));
    assert_eq!(count(svg, "<g class=\"gate\">") == 1, gate);
    if !gate {
        assert_eq!(count(svg, "class=\"condition\""), 0);
        assert!(!svg.contains("podprobe.io/ready"));
    }
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.ends_with("</svg>\n"));
    assert_renders(svg);
}

/// The heredoc `cat > {file} <<'YAML'` of docs/cli.md's simulate section.
fn cli_doc_heredoc(file: &str) -> String {
    let doc = include_str!("../docs/cli.md");
    let opening = format!("cat > {file} <<'YAML'\n");
    let start = doc.find(&opening).expect("docs/cli.md writes the file") + opening.len();
    let length = doc[start..].find("\nYAML\n").expect("heredoc ends");
    doc[start..=start + length].to_string()
}

/// Workload mode draws a header, a pod lane (the gate and `Ready`) and
/// the container lanes per replica, every probe run, kill and instance
/// of every replica, and the outage shaded once; the HTML page names the
/// replica of each event.
#[test]
fn svg_and_html_of_a_workload_have_a_lane_per_replica_and_the_outage() {
    let (pod, script) = (
        cli_doc_heredoc("/tmp/workload.yaml"),
        cli_doc_heredoc("/tmp/outage.yaml"),
    );
    let json = lines(&simulate(&pod, &script, &[]));
    let svg = stdout(&simulate(&pod, &script, &["--output", "svg"]));
    let records: Vec<&Value> = json.iter().filter(|l| l["event"] != "summary").collect();
    let of = |event: &str| records.iter().filter(|r| r["event"] == event).count();
    assert_eq!(elements(&svg, "probe ").len(), of("probe"));
    assert_eq!(count(&svg, "<g class=\"kill\">"), of("killed"));
    assert_eq!(count(&svg, "<g class=\"instance\">"), of("started_running"));
    let replicas = usize::try_from(REPLICAS).expect("a few replicas");
    assert_eq!(elements(&svg, "replica\"").len(), replicas);
    assert_eq!(count(&svg, "<g class=\"gate\">"), replicas);
    for n in 0..replicas {
        assert!(svg.contains(&format!(">replica-{n}</text>")), "replica-{n}");
    }
    assert!(!elements(&svg, "pod-ready\"").is_empty());
    let outage = elements(&svg, "outage\"");
    assert_eq!(outage.len(), 1, "{outage:?}");
    assert!(
        outage[0].contains("outage from 10s to 55s"),
        "{}",
        outage[0]
    );
    assert!(svg.contains("the gate held by the readinessFloor"));
    assert_renders(&svg);
    let html = stdout(&simulate(&pod, &script, &["--output", "html"]));
    assert!(html.contains("<th>pod</th>"));
    assert_eq!(count(&html, "<tr><td class=\"t\">"), records.len());
    assert!(html.contains("<td>replica-5</td>"));
    assert!(html.contains("At most 3 replicas not Ready at once; 3 restarted;"));
}

#[test]
fn svg_draws_the_docs_example_event_for_event() {
    let (pod, script) = (
        cli_doc_heredoc("pod.yaml"),
        cli_doc_heredoc("/tmp/script.yaml"),
    );
    let json = lines(&simulate(&pod, &script, &[]));
    let svg = stdout(&simulate(&pod, &script, &["--output", "svg"]));
    // The restart loop: killed at 30, 60, 90 and 120.
    assert_eq!(
        events(&json, |e| e.contains("killed")).len(),
        4,
        "{:?}",
        events(&json, |_| true)
    );
    assert_svg_matches_json(&svg, &json, false);
    assert!(svg.contains(
        ">liveness: period 10s, success 1, failure 3, initial delay 0s, timeout 1s</text>"
    ));
    assert!(svg.contains(">kill: liveness</text>"));
    assert!(svg.contains(">restart #2</text>"));
    for tick in ["0s", "10s", "60s", "120s"] {
        assert!(svg.contains(&format!(">{tick}</text>")), "axis tick {tick}");
    }
    assert!(
        !svg.contains(">130s</text>"),
        "the axis ends at the duration"
    );
}

#[test]
fn svg_of_a_busy_pod_matches_its_json() {
    let json = lines(&simulate(
        SIDECAR_POD,
        SIDECAR_SCRIPT,
        &["--mode", "authority"],
    ));
    let svg = stdout(&simulate(
        SIDECAR_POD,
        SIDECAR_SCRIPT,
        &["--mode", "authority", "--output", "svg"],
    ));
    assert_svg_matches_json(&svg, &json, false);
    // A lane per container, the sidecar after the regular ones; the classic
    // init container has none.
    assert_eq!(count(&svg, "<g class=\"lane\">"), 3);
    let order: Vec<usize> = [">app</text>", ">web</text>", ">proxy</text>"]
        .iter()
        .map(|name| svg.find(name).expect(name))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert!(!svg.contains(">setup</text>"));
    assert!(svg.contains("restartable init container"));
    // Rows only for the probes each container has: app readiness and
    // liveness, web liveness, proxy startup and readiness.
    assert_eq!(count(&svg, "<rect class=\"row\""), 5);
    assert!(svg.contains(">startup: period 1s, success 1, failure 3, initial delay 0s, timeout 1s, kill grace 5s</text>"));
}

const GATED_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: gated
  annotations:
    podprobe.io/probes: '{"app": {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5}}}'
spec:
  readinessGates: [{conditionType: podprobe.io/ready}]
  containers:
  - name: app
    image: app
"#;

const GATED_SCRIPT: &str = "
duration: 60
containers:
  app:
    readiness:
      - {from: 0, to: 20, result: failure}
      - {from: 25, to: 30, result: error}
      - {from: 30, to: 45, result: failure}
      - {from: 45, result: warning}        # passes
";

#[test]
fn svg_in_gate_mode_has_the_condition_band() {
    let json = lines(&simulate(GATED_POD, GATED_SCRIPT, &[]));
    let svg = stdout(&simulate(GATED_POD, GATED_SCRIPT, &["--output", "svg"]));
    assert_eq!(
        events(&json, |e| e.contains("condition")),
        [
            "0 condition False",
            "20 condition True",
            "40 condition False",
            "45 condition True"
        ]
    );
    assert_svg_matches_json(&svg, &json, true);
    // Filled where True: 20-40 and from 45 (a warning passes) to the end.
    let bands = elements(&svg, "condition\"");
    assert_eq!(bands.len(), 2, "{bands:?}");
    assert!(bands[0].contains("true from 20s to 40s"), "{}", bands[0]);
    assert!(bands[1].contains("true from 45s to 60s"), "{}", bands[1]);
    assert!(svg.contains("gate mode"));
}

/// A pod whose names try to inject markup; its liveness probe kills it, so
/// the kill message (which names the container) is drawn too.
const HOSTILE_NAMES_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: "p</text><script>alert(1)</script>"}
spec:
  containers:
  - name: 'a<b&"c'
    image: x
    livenessProbe: {exec: {command: [ok]}, periodSeconds: 1, failureThreshold: 1}
"#;

const HOSTILE_NAMES_SCRIPT: &str = r#"
duration: 3
containers:
  'a<b&"c':
    liveness: [{from: 0, to: 1.5, result: failure}]
"#;

#[test]
fn names_from_the_manifest_cannot_inject_markup() {
    let json = lines(&simulate(HOSTILE_NAMES_POD, HOSTILE_NAMES_SCRIPT, &[]));
    assert!(!events(&json, |e| e.contains("killed")).is_empty());
    for output in ["svg", "html"] {
        let text = stdout(&simulate(
            HOSTILE_NAMES_POD,
            HOSTILE_NAMES_SCRIPT,
            &["--output", output],
        ));
        assert!(!text.contains("a<b"), "{output}: raw container name");
        assert!(!text.contains("&\"c"), "{output}: raw container name");
        assert!(!text.contains("<script"), "{output}: raw pod name");
        assert!(text.contains("a&lt;b&amp;&quot;c"), "{output}");
        assert!(text.contains("p&lt;/text&gt;&lt;script&gt;"), "{output}");
        assert!(
            text.contains("Container a&lt;b&amp;&quot;c failed liveness probe"),
            "{output}: the kill message"
        );
        let svg = if output == "svg" {
            text.as_str()
        } else {
            embedded_svg(&text)
        };
        assert_svg_matches_json(svg, &json, false);
    }
}

/// The `<svg>` element of an HTML page.
fn embedded_svg(html: &str) -> &str {
    let start = html.find("<svg ").expect("the page embeds an SVG");
    let end = html.find("</svg>\n").expect("the SVG ends") + "</svg>\n".len();
    &html[start..end]
}

#[test]
fn html_is_one_self_contained_page_with_the_timeline_and_every_event() {
    for (pod, script) in [
        (SLOW_APP_WITH_STARTUP, slow_app_script(62, 80)),
        (GATED_POD, GATED_SCRIPT.to_string()),
    ] {
        let json = lines(&simulate(pod, &script, &[]));
        let html = stdout(&simulate(pod, &script, &["--output", "html"]));
        assert!(html.starts_with("<!DOCTYPE html>\n"));
        assert!(html.ends_with("</html>\n"));
        // Nothing to fetch, nothing to run: the only URL is the SVG
        // namespace, which names and does not load.
        for needle in ["<script", "<link", "src=", "href=", "url(", "@import"] {
            assert!(!html.contains(needle), "the page has {needle:?}");
        }
        assert_eq!(count(&html, "http"), 1, "only the SVG namespace");
        let svg = embedded_svg(&html);
        assert_eq!(
            svg,
            stdout(&simulate(pod, &script, &["--output", "svg"])),
            "the page embeds the SVG as --output svg prints it"
        );
        assert_svg_matches_json(svg, &json, pod == GATED_POD);
        // One table row per JSON line but the summary.
        let rows = count(&html, "<tr><td class=\"t\">");
        assert_eq!(rows, json.len() - 1);
        assert_eq!(
            count(&html, "<td>probe</td>"),
            json.iter().filter(|l| l["event"] == "probe").count()
        );
    }
}

#[test]
fn svg_size_follows_the_events_not_the_duration() {
    // A week of a probe that runs once an hour: few events, a small SVG.
    let sparse_pod = SLOW_APP_LIVENESS_ONLY.replace("periodSeconds: 10", "periodSeconds: 3600");
    let week = "604800";
    let json = lines(&simulate(&sparse_pod, "duration: 1", &["--duration", week]));
    let svg = stdout(&simulate(
        &sparse_pod,
        "duration: 1",
        &["--duration", week, "--output", "svg"],
    ));
    assert_eq!(
        json.len(),
        4 + 168,
        "three changes, a probe an hour, the summary"
    );
    assert!(svg.len() < 60_000, "{} bytes", svg.len());
    assert_svg_matches_json(&svg, &json, false);
    // Ten times the events, about ten times the marks and no more.
    let dense = |seconds: &str| {
        stdout(&simulate(
            FLAPPING,
            "duration: 1",
            &["--duration", seconds, "--output", "svg"],
        ))
        .len()
    };
    let (short, long) = (dense("100"), dense("1000"));
    let per_run = (long - short) as f64 / 180.0;
    assert!(per_run < 200.0, "{per_run} bytes per probe run");
}

/// docs/simulate-timeline.svg is docs/cli.md's example drawn by the binary;
/// `PODPROBE_UPDATE_DOCS=1` rewrites it.
#[test]
fn docs_timeline_is_what_the_docs_example_draws() {
    let (pod, script) = (
        cli_doc_heredoc("pod.yaml"),
        cli_doc_heredoc("/tmp/script.yaml"),
    );
    let svg = stdout(&simulate(&pod, &script, &["--output", "svg"]));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/simulate-timeline.svg");
    if std::env::var("PODPROBE_UPDATE_DOCS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &svg).expect("write docs/simulate-timeline.svg");
    }
    let committed = std::fs::read_to_string(&path).expect("docs/simulate-timeline.svg");
    assert!(
        committed == svg,
        "docs/simulate-timeline.svg is not what docs/cli.md's example draws now; \
         regenerate it with PODPROBE_UPDATE_DOCS=1 cargo test --test cli_simulate docs_timeline"
    );
}
