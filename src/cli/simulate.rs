//! `podprobe simulate`: runs a pod's probes against a script of how its
//! containers answer, in virtual time, and prints what the kubelet would
//! observe and do: every probe, every change of container `started`/`ready`,
//! every kill and restart, and in gate mode every change of the
//! `podprobe.io/ready` condition.
//!
//! The prober is the real one ([`podprobe_core::prober::manager`], [`podprobe_core::prober::worker`]); only
//! the probe handlers and the kubelet around them are simulated
//! ([`engine`]). The script format is in [`script`]; [`render`] draws the
//! events as an SVG timeline or an HTML page for `--output svg|html`. A
//! script with `replicas` simulates a workload, its guards decided as the
//! daemon decides them (the `workload` module).

pub mod engine;
pub mod script;
mod simulation;
pub(crate) mod timeline;
mod workload;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::Pod;

use self::script::{Script, ScriptError};
pub use self::simulation::Simulation;
use crate::cli::oneshot::parse_document;
use crate::daemon::flags::ModeArg;
use podprobe_core::prober::manager::PodProbes;
use podprobe_core::spec::probe_spec::budget::PodBudget;
use podprobe_core::spec::probe_spec::{self, container_probe, validate_container_probes};
use podprobe_core::spec::{ProbeKind, SpecError};
use podprobe_core::status::gate_setup::has_annotation;
use podprobe_core::status::{AnnotatedProbes, AnnotationError, PROBES_ANNOTATION, pod_probes};
use podprobe_core::util::exit_code;
use podprobe_core::util::pod::{all_containers, probed_containers};

/// `after_help` of `podprobe simulate`: the script format and an example.
pub const AFTER_HELP: &str = "\
Script (YAML or JSON; times in seconds, to the millisecond):

  duration: 120              # virtual seconds to simulate (--duration overrides)
  containers:                # containers left out start at once and always pass
    app:                     # a container or restartable init container
      startAfter: 0          # when its first instance runs, after the pod is added
      restartDelay: 0        # how long a killed instance takes to run again
      startup:               # windows per probe: startup, readiness, liveness
        - {from: 0, to: 55, result: failure}
        - {from: 55, result: success}   # only the last window may leave out `to`
      liveness:
        - {from: 0, to: 55, result: failure}

A workload (the pod's restartBudget and readinessFloor applied, as
podprobe run decides them, against one record all replicas share):

  replicas: 6                # copies of the pod, 1 to 100; each record names its replica
  outage: {from: 10, to: 55} # [from, to) in seconds since t 0, within the duration: every
                             # probe of every replica fails (a shared dependency is down)

Windows are [from, to) in seconds since that instance started. A result is
success, warning (passes, as an HTTP redirect to another host), failure or
error (all three attempts error, so the run is thrown away). Unscripted time
answers success. Windows for probes the pod does not have are ignored.

Output (--output json, the default): one JSON object per line, in time
order. Each has `t` (seconds since the pod's first container started),
`container`, `instance` (1 for the first run, one more per restart) and
`event`: started_running, probe (`kind`, `result`), started / ready
(`value`, when the status changes), killed (`kind`, `grace_seconds`,
`message`) and, in gate mode, condition (`podprobe.io/ready` status,
pod-level). Events of one time are ordered by container name, each
container's in the order they happened, pod-level events last. The last line is the summary.

With replicas, each record has `pod` (replica-0, ...) and events of one time
are ordered by replica first; pod-level events add pod_ready (the replica's
Ready), restart_deferred (`unavailable`, `allowed`: waits for a unit of the
restartBudget), floor_held (`ready`, `floor`) and floor_released, one per
decision; podprobe's status resync (every 10 s) decides them again. The
summary has each replica's restarts and Ready, and the workload's
most_not_ready, restarted, deferred, held and released. --without-guards
runs the same workload without restartBudget and readinessFloor.

--output svg draws the same events as a timeline: a lane per container
(and restartable init container) with a row per probe it has, its
thresholds written above, one mark per probe run coloured by result
(success green, warning amber, failure red, error grey); `started` and
`ready` as bands, filled while true; kills and container (re)starts as
vertical lines; in gate mode the podprobe.io/ready condition as a band of
its own. --output html writes one self-contained page (nothing to load,
no scripts) with that timeline and a table of the events.

The simulated kubelet admits the pod before its containers run, so each
worker's first probe comes at its first tick after the container started,
or at once for readiness, which the pod sync after the start nudges. It
syncs the pod (nudging not-ready readiness workers) on every readiness or
startup result change, on a liveness failure and when a container starts;
kills take effect at once (exit code 137); there is no crash-loop back-off
beyond restartDelay.

Example (a plain manifest: its spec's probes, authority mode):
  podprobe simulate --pod pod.yaml --script script.yaml
  podprobe simulate --pod pod.yaml --script script.yaml --output svg > timeline.svg";

/// Flags of `podprobe simulate`.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Pod manifest, YAML or JSON; `-` reads stdin. Its containers and
    /// restartable init containers are simulated; the probes come from the
    /// spec or the annotation, per --mode.
    #[arg(long, value_name = "FILE")]
    pub pod: PathBuf,

    /// Script of how the containers behave over time (format below), YAML or
    /// JSON; `-` reads stdin.
    #[arg(long, value_name = "FILE")]
    pub script: PathBuf,

    /// Where the probes come from: `gate` reads the `podprobe.io/probes`
    /// annotation and reports the `podprobe.io/ready` condition; `authority`
    /// reads the pod spec's probes. Default: gate if the pod has the
    /// annotation, authority otherwise (a plain manifest's spec probes).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,

    /// Virtual seconds to simulate; overrides the script's `duration`.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub duration: Option<f64>,

    /// What to print: `json`, one JSON object per event and a summary
    /// line; `svg`, the same events drawn as a timeline; `html`, one
    /// self-contained page with that timeline and a table of the events.
    #[arg(long, value_enum, default_value = "json")]
    pub output: OutputArg,

    /// Workload mode (`replicas` in the script): ignore the probes'
    /// `restartBudget` and `readinessFloor`, to compare the same workload
    /// without them, as the kubelet alone would run it.
    #[arg(long)]
    pub without_guards: bool,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputArg {
    /// JSON lines, the summary last.
    Json,
    /// An SVG timeline.
    Svg,
    /// An HTML page: the SVG timeline and a table of the events.
    Html,
}

/// Input that cannot be simulated; the message names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum SimulateInputError {
    #[error("{flag} {path}: cannot read: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{flag} {path}: not valid YAML or JSON: {message}")]
    Parse {
        flag: &'static str,
        path: String,
        message: String,
    },
    #[error("--pod and --script cannot both read stdin")]
    BothStdin,
    #[error("--duration: {0}")]
    Duration(String),
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// `field` is a path in the manifest, empty for the whole document.
    #[error("pod: {}{message}", field_prefix(.field))]
    Pod { field: String, message: String },
    #[error("pod: {0}")]
    Annotation(#[from] AnnotationError),
}

impl SimulateInputError {
    fn pod(field: impl Into<String>, message: impl Into<String>) -> Self {
        SimulateInputError::Pod {
            field: field.into(),
            message: message.into(),
        }
    }
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// Entry point of `podprobe simulate`.
pub fn main(args: SimulateArgs) -> ExitCode {
    let simulation = match prepare(&args) {
        Ok(simulation) => simulation,
        Err(e) => {
            eprintln!("podprobe simulate: invalid input: {e}");
            return ExitCode::from(exit_code::USAGE);
        }
    };
    let report = match engine::run(&simulation) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("podprobe simulate: cannot start the async runtime: {e}");
            return ExitCode::from(exit_code::ERROR);
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.output {
        OutputArg::Json => write_report(&mut out, &report),
        OutputArg::Svg => out.write_all(timeline::svg(&simulation, &report).as_bytes()),
        OutputArg::Html => out.write_all(timeline::html(&simulation, &report).as_bytes()),
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // Most likely a closed pipe (`| head`): nothing left to tell.
        Err(_) => ExitCode::FAILURE,
    }
}

/// Writes the report as JSON lines, the summary last.
pub fn write_report(
    out: &mut impl Write,
    report: &engine::SimulationReport,
) -> std::io::Result<()> {
    for record in &report.records {
        serde_json::to_writer(&mut *out, record)?;
        out.write_all(b"\n")?;
    }
    serde_json::to_writer(&mut *out, &report.summary)?;
    out.write_all(b"\n")
}

/// Reads and validates the input files.
pub fn prepare(args: &SimulateArgs) -> Result<Simulation, SimulateInputError> {
    if is_stdin(&args.pod) && is_stdin(&args.script) {
        return Err(SimulateInputError::BothStdin);
    }
    let pod = read_document("--pod", &args.pod)?;
    let script = script::parse(&read_document("--script", &args.script)?)?;
    let duration = match args.duration {
        Some(seconds) => {
            Some(script::positive_seconds_arg(seconds).map_err(SimulateInputError::Duration)?)
        }
        None => None,
    };
    let simulation = build(&pod, script, args.mode, duration)?;
    Ok(Simulation {
        guards: !args.without_guards,
        ..simulation
    })
}

/// Validates a parsed pod and script and pairs them up; `duration`
/// overrides the script's.
pub fn build(
    pod: &serde_json::Value,
    script: Script,
    mode: Option<ModeArg>,
    duration: Option<Duration>,
) -> Result<Simulation, SimulateInputError> {
    let pod = load_pod(pod)?;
    let mode = mode.unwrap_or_else(|| default_mode(&pod));
    let (probes, gate) = match mode {
        ModeArg::Authority => (spec_probes(&pod)?, None),
        ModeArg::Gate => {
            let annotated = annotation_probes(&pod)?;
            let mut probes = PodProbes::new();
            for probe in annotated.iter() {
                probes.insert(probe.container.clone(), probe.kind, probe.spec.clone());
            }
            (probes, Some(annotated))
        }
    };
    let probed: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(probed_containers)
        .map(|c| c.container.name.as_str())
        .collect();
    script.check_containers(&probed)?;
    let duration = duration.or(script.duration).ok_or_else(|| ScriptError {
        field: "duration".to_string(),
        message: "required (or pass --duration)".to_string(),
    })?;
    script.check_outage(duration)?;
    Ok(Simulation {
        pod,
        probes,
        gate,
        script,
        duration,
        guards: true,
    })
}

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

fn read_document(flag: &'static str, path: &Path) -> Result<serde_json::Value, SimulateInputError> {
    let shown = path.display().to_string();
    let mut text = String::new();
    let read = if is_stdin(path) {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|source| SimulateInputError::Read {
        flag,
        path: shown.clone(),
        source,
    })?;
    parse_document(&text).map_err(|message| SimulateInputError::Parse {
        flag,
        path: shown,
        message,
    })
}

/// `spec.terminationGracePeriodSeconds` when the manifest leaves it out
/// (`SetDefaults_PodSpec`).
const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;

/// The UID a pod without one gets: workers and statuses are keyed by it.
const DEFAULT_UID: &str = "00000000-0000-0000-0000-000000000001";

fn load_pod(doc: &serde_json::Value) -> Result<Pod, SimulateInputError> {
    if doc
        .get("kind")
        .and_then(|k| k.as_str())
        .is_some_and(|k| k != "Pod")
    {
        return Err(SimulateInputError::pod("kind", "expected a Pod"));
    }
    let mut pod: Pod = serde_json::from_value(doc.clone())
        .map_err(|e| SimulateInputError::pod("", format!("not a core/v1 Pod: {e}")))?;
    let Some(spec) = pod.spec.as_ref() else {
        return Err(SimulateInputError::pod("spec", "required"));
    };
    if spec.containers.is_empty() {
        return Err(SimulateInputError::pod(
            "spec.containers",
            "must have at least one container",
        ));
    }
    check_unique_names(&pod)?;
    pod.metadata
        .uid
        .get_or_insert_with(|| DEFAULT_UID.to_string());
    // The API server's defaults for what the simulation reads: the grace
    // period of a kill (K3) and whether a killed container restarts.
    if let Some(spec) = pod.spec.as_mut() {
        spec.termination_grace_period_seconds
            .get_or_insert(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
        spec.restart_policy
            .get_or_insert_with(|| "Always".to_string());
    }
    Ok(pod)
}

/// Container statuses are matched by name, so names must be unique across
/// containers and init containers, as the API server requires.
fn check_unique_names(pod: &Pod) -> Result<(), SimulateInputError> {
    let mut seen = HashSet::new();
    for placed in pod.spec.iter().flat_map(all_containers) {
        let container = placed.container;
        if !seen.insert(container.name.as_str()) {
            return Err(SimulateInputError::pod(
                format!("{}.name", placed.path()),
                format!("duplicate container name {:?}", container.name),
            ));
        }
    }
    Ok(())
}

/// Authority mode: the spec's probes, defaulted and validated as the API
/// server does, ports resolved.
fn spec_probes(pod: &Pod) -> Result<PodProbes, SimulateInputError> {
    let at = |path: &str, e: SpecError| {
        SimulateInputError::pod(format!("{path}.{}", e.field), e.message)
    };
    // Classic init containers may not have probes.
    for placed in pod
        .spec
        .iter()
        .flat_map(all_containers)
        .filter(|c| !c.is_probed())
    {
        if let Some(e) = validate_container_probes(placed.container, true)
            .into_iter()
            .next()
        {
            return Err(at(&placed.path(), e));
        }
    }
    let mut probes = PodProbes::new();
    for placed in pod.spec.iter().flat_map(probed_containers) {
        let (path, container) = (placed.path(), placed.container);
        for kind in ProbeKind::ALL {
            let Some(probe) = container_probe(container, kind) else {
                continue;
            };
            let spec = probe_spec::normalize(kind, probe, container).map_err(|e| at(&path, e))?;
            probes.insert(container.name.clone(), kind, spec);
        }
    }
    Ok(probes)
}

/// The mode a pod is written for: gate if it carries the probe
/// annotation, authority (the spec's probes, as the kubelet runs them)
/// otherwise.
fn default_mode(pod: &Pod) -> ModeArg {
    if has_annotation(pod) {
        ModeArg::Gate
    } else {
        ModeArg::Authority
    }
}

/// Gate mode: the annotation's probes. Asked for explicitly on a pod
/// without the annotation, this is an error.
fn annotation_probes(pod: &Pod) -> Result<AnnotatedProbes, SimulateInputError> {
    if !has_annotation(pod) {
        return Err(SimulateInputError::pod(
            format!("metadata.annotations[{PROBES_ANNOTATION:?}]"),
            "required in gate mode, which reads the probes from it (--mode authority reads the spec's probes)",
        ));
    }
    Ok(pod_probes(pod, &mut PodBudget::default())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    fn script(duration: Option<u64>) -> Script {
        Script {
            duration: duration.map(Duration::from_secs),
            ..Script::default()
        }
    }

    fn error(pod: serde_json::Value, mode: ModeArg) -> String {
        build(&pod, script(Some(10)), Some(mode), None)
            .expect_err("input is invalid")
            .to_string()
    }

    #[test]
    fn authority_mode_reads_spec_probes_with_api_defaults() {
        let pod = pod(json!([
            {"name": "app", "readinessProbe": {"tcpSocket": {"port": 80}}}
        ]));
        let sim = build(&pod, script(Some(10)), Some(ModeArg::Authority), None).unwrap();
        let spec = sim.probes.get("app", ProbeKind::Readiness).unwrap();
        assert_eq!((spec.period_seconds, spec.failure_threshold), (10, 3));
        assert!(sim.probes.get("app", ProbeKind::Liveness).is_none());
        assert!(sim.gate.is_none());
        assert_eq!(sim.pod.metadata.uid.as_deref(), Some(DEFAULT_UID));
    }

    #[test]
    fn invalid_spec_probe_names_the_container_path_and_field() {
        let pod = pod(json!([
            {"name": "app", "livenessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2}}
        ]));
        assert_eq!(
            error(pod, ModeArg::Authority),
            "pod: spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"
        );
    }

    #[test]
    fn classic_init_container_may_not_have_probes() {
        let mut pod = pod(json!([{"name": "app"}]));
        pod["spec"]["initContainers"] =
            json!([{"name": "setup", "readinessProbe": {"exec": {"command": ["true"]}}}]);
        let got = error(pod, ModeArg::Authority);
        assert!(
            got.starts_with("pod: spec.initContainers[0].readinessProbe: "),
            "{got}"
        );
    }

    #[test]
    fn gate_mode_reads_the_annotation() {
        let mut pod = pod(json!([
            {"name": "app", "readinessProbe": {"tcpSocket": {"port": 80}}}
        ]));
        pod["metadata"]["annotations"] = json!({
            "podprobe.io/probes": r#"{"app": {"livenessProbe": {"tcpSocket": {"port": 81}, "periodSeconds": 3}}}"#
        });
        let sim = build(&pod, script(Some(10)), Some(ModeArg::Gate), None).unwrap();
        assert_eq!(
            sim.probes
                .get("app", ProbeKind::Liveness)
                .map(|s| s.period_seconds),
            Some(3)
        );
        assert!(
            sim.probes.get("app", ProbeKind::Readiness).is_none(),
            "the spec's own probes are the kubelet's in gate mode"
        );
        assert!(sim.gate.is_some());
    }

    #[test]
    fn gate_mode_without_annotation_says_how_to_fix_it() {
        assert_eq!(
            error(pod(json!([{"name": "app"}])), ModeArg::Gate),
            "pod: metadata.annotations[\"podprobe.io/probes\"]: required in gate mode, which reads the \
             probes from it (--mode authority reads the spec's probes)"
        );
    }

    #[test]
    fn mode_defaults_to_the_annotation_if_present_else_the_spec() {
        let mut plain = pod(json!([
            {"name": "app", "readinessProbe": {"tcpSocket": {"port": 80}}}
        ]));
        let sim = build(&plain, script(Some(10)), None, None).unwrap();
        assert!(sim.gate.is_none(), "a plain manifest runs its spec probes");
        assert!(sim.probes.get("app", ProbeKind::Readiness).is_some());
        plain["metadata"]["annotations"] = json!({
            "podprobe.io/probes": r#"{"app": {"livenessProbe": {"tcpSocket": {"port": 81}}}}"#
        });
        let sim = build(&plain, script(Some(10)), None, None).unwrap();
        assert!(sim.gate.is_some(), "an annotated pod runs in gate mode");
        assert!(sim.probes.get("app", ProbeKind::Readiness).is_none());
        assert!(sim.probes.get("app", ProbeKind::Liveness).is_some());
    }

    #[test]
    fn pod_shape_errors() {
        assert_eq!(
            error(json!({"kind": "Deployment"}), ModeArg::Authority),
            "pod: kind: expected a Pod"
        );
        assert_eq!(
            error(json!({"kind": "Pod"}), ModeArg::Authority),
            "pod: spec: required"
        );
        assert_eq!(
            error(pod(json!([])), ModeArg::Authority),
            "pod: spec.containers: must have at least one container"
        );
        assert_eq!(
            error(
                pod(json!([{"name": "a"}, {"name": "a"}])),
                ModeArg::Authority
            ),
            "pod: spec.containers[1].name: duplicate container name \"a\""
        );
    }

    #[test]
    fn duration_comes_from_the_flag_or_the_script() {
        let pod = pod(json!([{"name": "app"}]));
        let sim = build(
            &pod,
            script(Some(10)),
            Some(ModeArg::Authority),
            Some(Duration::from_secs(3)),
        );
        assert_eq!(sim.unwrap().duration, Duration::from_secs(3));
        let got = build(&pod, script(None), Some(ModeArg::Authority), None).unwrap_err();
        assert_eq!(
            got.to_string(),
            "script: duration: required (or pass --duration)"
        );
    }
}
