//! The simulation script: when each container starts, how long a killed
//! container takes to run again, and what each of its probes answers over
//! time. Parsing is pure and strict: every error names the field to fix, as
//! a path from the top of the script (`containers.app.readiness[1].result`).
//!
//! ```yaml
//! duration: 120
//! containers:
//!   app:
//!     startAfter: 0
//!     restartDelay: 5
//!     readiness:
//!       - {from: 0, to: 20, result: failure}
//!       - {from: 20, result: success}
//! ```
//!
//! Windows are half-open, `[from, to)`, in seconds since the container
//! instance the probe runs against started; only the last window may leave
//! `to` out (open-ended). Time no window covers answers `success`.
//!
//! The workload form adds `replicas: N` (that many copies of the pod, each
//! following the container scripts) and an `outage: {from, to}` in seconds
//! since the simulation's start, half-open, during which every probe of
//! every replica fails: a dependency they all share is down.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use podprobe_core::spec::ProbeKind;

/// The longest time a script may name: one week of virtual time.
pub const MAX_SECONDS: u64 = 7 * 24 * 3600;

/// The most replicas a workload script may have: each runs a prober of its
/// own, and a hundred already draw a timeline no one reads.
pub const MAX_REPLICAS: u64 = 100;

/// What a scripted probe answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptedResult {
    /// The probe passes.
    Success,
    /// The probe passes with a warning (an HTTP redirect to another host).
    Warning,
    /// The probe fails; counts towards `failureThreshold`.
    Failure,
    /// Every attempt errors (e.g. an exec the runtime cannot start): the
    /// kubelet retries three times and then throws the run away (P2, D11).
    Error,
}

impl ScriptedResult {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "success" => Some(ScriptedResult::Success),
            "warning" => Some(ScriptedResult::Warning),
            "failure" => Some(ScriptedResult::Failure),
            "error" => Some(ScriptedResult::Error),
            _ => None,
        }
    }
}

/// One stretch of time with a fixed probe answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start, since the container instance started.
    pub from: Duration,
    /// End (exclusive); `None` for an open-ended last window.
    pub to: Option<Duration>,
    pub result: ScriptedResult,
}

impl Window {
    fn contains(&self, elapsed: Duration) -> bool {
        elapsed >= self.from && self.to.is_none_or(|to| elapsed < to)
    }
}

/// How one container behaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerScript {
    /// When the first instance starts running, since the pod was added.
    pub start_after: Duration,
    /// How long a killed instance takes to run again.
    pub restart_delay: Duration,
    windows: BTreeMap<ProbeKind, Vec<Window>>,
}

impl ContainerScript {
    /// The scripted windows of `kind`, in time order.
    pub fn windows(&self, kind: ProbeKind) -> &[Window] {
        self.windows.get(&kind).map_or(&[], Vec::as_slice)
    }

    /// What the `kind` probe answers `elapsed` after the instance started.
    pub fn result_at(&self, kind: ProbeKind, elapsed: Duration) -> ScriptedResult {
        self.windows(kind)
            .iter()
            .find(|window| window.contains(elapsed))
            .map_or(ScriptedResult::Success, |window| window.result)
    }
}

/// A stretch of the simulation during which every probe fails: a
/// dependency every replica calls is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// Start, since the simulation's start (`t` 0 of the records).
    pub from: Duration,
    /// End (exclusive), after `from`.
    pub to: Duration,
}

impl Outage {
    /// Whether `t` (since the simulation's start) falls in the outage.
    pub fn contains(&self, t: Duration) -> bool {
        self.from <= t && t < self.to
    }
}

/// A whole script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// How much virtual time to simulate, if the script says.
    pub duration: Option<Duration>,
    /// Scripts by container name; containers left out always succeed and
    /// start at once.
    pub containers: BTreeMap<String, ContainerScript>,
    /// The workload form: how many replicas of the pod run (`None`: one
    /// pod, reported without a `pod` field).
    pub replicas: Option<u32>,
    /// When every probe of every replica fails.
    pub outage: Option<Outage>,
}

impl Script {
    /// Checks that every scripted container is one that can have probes,
    /// `probed` being their names in the pod.
    pub fn check_containers(&self, probed: &[&str]) -> Result<(), ScriptError> {
        let Some(unknown) = self
            .containers
            .keys()
            .find(|name| !probed.contains(&name.as_str()))
        else {
            return Ok(());
        };
        Err(ScriptError::new(
            format!("containers.{unknown}"),
            format!(
                "the pod has no container or restartable init container {unknown:?} (it has: {})",
                probed.join(", ")
            ),
        ))
    }

    /// Checks that the outage ends within the simulated `duration` (the
    /// script's or `--duration`): time past it is never simulated.
    pub fn check_outage(&self, duration: Duration) -> Result<(), ScriptError> {
        match self.outage {
            Some(outage) if outage.to > duration => Err(ScriptError::new(
                "outage.to",
                format!(
                    "{} is past the end of the simulation ({}, the script's duration or --duration)",
                    show_seconds(outage.to),
                    show_seconds(duration)
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// A script that cannot be used, with the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ScriptError {
    /// Path from the top of the script; empty for the document itself.
    pub field: String,
    pub message: String,
}

impl ScriptError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ScriptError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "script: {}", self.message)
        } else {
            write!(f, "script: {}: {}", self.field, self.message)
        }
    }
}

const TOP_LEVEL_FIELDS: &[&str] = &["duration", "containers", "replicas", "outage"];
const CONTAINER_FIELDS: &[&str] = &[
    "startAfter",
    "restartDelay",
    "startup",
    "readiness",
    "liveness",
];
const WINDOW_FIELDS: &[&str] = &["from", "to", "result"];
const OUTAGE_FIELDS: &[&str] = &["from", "to"];

/// Parses a script document (YAML or JSON, already decoded).
pub fn parse(doc: &Value) -> Result<Script, ScriptError> {
    let root = mapping(doc, "")?;
    check_fields(root, "", TOP_LEVEL_FIELDS)?;
    let duration = present(root, "duration")
        .map(|value| positive_seconds(value, "duration"))
        .transpose()?;
    let mut containers = BTreeMap::new();
    if let Some(value) = present(root, "containers") {
        for (name, value) in mapping(value, "containers")? {
            let script = parse_container(value, &format!("containers.{name}"))?;
            containers.insert(name.clone(), script);
        }
    }
    let replicas = present(root, "replicas").map(parse_replicas).transpose()?;
    let outage = present(root, "outage").map(parse_outage).transpose()?;
    Ok(Script {
        duration,
        containers,
        replicas,
        outage,
    })
}

fn parse_replicas(doc: &Value) -> Result<u32, ScriptError> {
    match doc.as_u64() {
        Some(n @ 1..=MAX_REPLICAS) => Ok(n as u32),
        _ => Err(ScriptError::new(
            "replicas",
            format!(
                "expected a whole number from 1 to {MAX_REPLICAS}, got {}",
                shown(doc)
            ),
        )),
    }
}

fn parse_outage(doc: &Value) -> Result<Outage, ScriptError> {
    let fields = mapping(doc, "outage")?;
    check_fields(fields, "outage", OUTAGE_FIELDS)?;
    let at = |name: &str| {
        let path = format!("outage.{name}");
        let value = present(fields, name).ok_or_else(|| ScriptError::new(&path, "required"))?;
        seconds(value, &path)
    };
    let (from, to) = (at("from")?, at("to")?);
    if to <= from {
        return Err(ScriptError::new(
            "outage.to",
            format!(
                "{} must be after from ({})",
                show_seconds(to),
                show_seconds(from)
            ),
        ));
    }
    Ok(Outage { from, to })
}

/// A positive number of seconds given on the command line (`--duration`);
/// the error says what is wrong with it.
pub fn positive_seconds_arg(seconds: f64) -> Result<Duration, String> {
    positive_seconds(&Value::from(seconds), "").map_err(|e| e.message)
}

fn parse_container(doc: &Value, path: &str) -> Result<ContainerScript, ScriptError> {
    // `app:` with nothing after it: named, but nothing scripted.
    if doc.is_null() {
        return Ok(ContainerScript::default());
    }
    let fields = mapping(doc, path)?;
    check_fields(fields, path, CONTAINER_FIELDS)?;
    let duration_field = |name: &str| {
        present(fields, name)
            .map(|value| seconds(value, &format!("{path}.{name}")))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let mut windows = BTreeMap::new();
    for kind in ProbeKind::ALL {
        let name = kind_key(kind);
        if let Some(value) = present(fields, name) {
            windows.insert(kind, parse_windows(value, &format!("{path}.{name}"))?);
        }
    }
    Ok(ContainerScript {
        start_after: duration_field("startAfter")?,
        restart_delay: duration_field("restartDelay")?,
        windows,
    })
}

/// The script's key for `kind`'s windows.
fn kind_key(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Startup => "startup",
        ProbeKind::Readiness => "readiness",
        ProbeKind::Liveness => "liveness",
    }
}

fn parse_windows(doc: &Value, path: &str) -> Result<Vec<Window>, ScriptError> {
    let Value::Array(items) = doc else {
        return Err(ScriptError::new(
            path,
            format!("expected a list of windows, got {}", type_name(doc)),
        ));
    };
    let mut windows: Vec<Window> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let last = index + 1 == items.len();
        let window = parse_window(item, &path, last)?;
        if let Some(previous_end) = windows.last().and_then(|w| w.to)
            && window.from < previous_end
        {
            return Err(ScriptError::new(
                format!("{path}.from"),
                format!(
                    "{} overlaps the previous window, which ends at {}",
                    show_seconds(window.from),
                    show_seconds(previous_end)
                ),
            ));
        }
        windows.push(window);
    }
    Ok(windows)
}

fn parse_window(doc: &Value, path: &str, last: bool) -> Result<Window, ScriptError> {
    let fields = mapping(doc, path)?;
    check_fields(fields, path, WINDOW_FIELDS)?;
    let required = |name: &str| {
        present(fields, name).ok_or_else(|| ScriptError::new(format!("{path}.{name}"), "required"))
    };
    let from = seconds(required("from")?, &format!("{path}.from"))?;
    let to = match present(fields, "to") {
        Some(value) => Some(seconds(value, &format!("{path}.to"))?),
        None if last => None,
        None => {
            return Err(ScriptError::new(
                format!("{path}.to"),
                "required in every window but the last",
            ));
        }
    };
    if let Some(to) = to
        && to <= from
    {
        return Err(ScriptError::new(
            format!("{path}.to"),
            format!(
                "{} must be after from ({})",
                show_seconds(to),
                show_seconds(from)
            ),
        ));
    }
    let result = parse_result(required("result")?, &format!("{path}.result"))?;
    Ok(Window { from, to, result })
}

fn parse_result(doc: &Value, path: &str) -> Result<ScriptedResult, ScriptError> {
    const EXPECTED: &str = "success, warning, failure or error";
    let Value::String(name) = doc else {
        return Err(ScriptError::new(
            path,
            format!("expected one of {EXPECTED}, got {}", type_name(doc)),
        ));
    };
    ScriptedResult::parse(name).ok_or_else(|| {
        ScriptError::new(
            path,
            format!("unknown result {name:?} (expected {EXPECTED})"),
        )
    })
}

/// A field's value, treating an explicit `null` (a YAML key with nothing
/// after it) as absent.
fn present<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    fields.get(name).filter(|value| !value.is_null())
}

fn mapping<'a>(doc: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ScriptError> {
    match doc {
        Value::Object(fields) => Ok(fields),
        other => Err(ScriptError::new(
            path,
            format!("expected a mapping, got {}", type_name(other)),
        )),
    }
}

fn check_fields(
    fields: &Map<String, Value>,
    path: &str,
    known: &[&str],
) -> Result<(), ScriptError> {
    let Some(unknown) = fields.keys().find(|key| !known.contains(&key.as_str())) else {
        return Ok(());
    };
    let field = if path.is_empty() {
        unknown.clone()
    } else {
        format!("{path}.{unknown}")
    };
    Err(ScriptError::new(
        field,
        format!("unknown field (expected {})", one_of(known)),
    ))
}

/// A non-negative number of seconds, at most [`MAX_SECONDS`], kept to the
/// millisecond (the resolution of tokio's timers).
fn seconds(doc: &Value, path: &str) -> Result<Duration, ScriptError> {
    let Some(value) = doc.as_f64() else {
        return Err(ScriptError::new(
            path,
            format!("expected a number of seconds, got {}", type_name(doc)),
        ));
    };
    if value < 0.0 {
        return Err(ScriptError::new(
            path,
            format!("must not be negative (got {value})"),
        ));
    }
    if value > MAX_SECONDS as f64 {
        return Err(ScriptError::new(
            path,
            format!("must be at most {MAX_SECONDS} (one week), got {value}"),
        ));
    }
    Ok(Duration::from_millis((value * 1000.0).round() as u64))
}

fn positive_seconds(doc: &Value, path: &str) -> Result<Duration, ScriptError> {
    let duration = seconds(doc, path)?;
    if duration.is_zero() {
        return Err(ScriptError::new(path, "must be at least 0.001 seconds"));
    }
    Ok(duration)
}

/// Seconds as the script writes them: `40`, `2.5`.
pub fn show_seconds(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{}", duration.as_secs_f64())
    }
}

/// `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [only] => (*only).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// A number as written, anything else by its type.
fn shown(value: &Value) -> String {
    match value {
        Value::Number(n) => n.to_string(),
        other => type_name(other).to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).expect("test YAML parses")
    }

    fn error(text: &str) -> String {
        parse(&yaml(text))
            .expect_err("script is invalid")
            .to_string()
    }

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn parses_every_field() {
        let script = parse(&yaml(
            "
duration: 90.5
containers:
  app:
    startAfter: 2
    restartDelay: 1.25
    startup:
      - {from: 0, to: 30, result: failure}
      - {from: 30, result: success}
    readiness:
      - {from: 10, to: 20, result: warning}
      - {from: 25, to: 26, result: error}
    liveness: []
  side:
",
        ))
        .unwrap();
        assert_eq!(script.duration, Some(Duration::from_millis(90_500)));
        let app = &script.containers["app"];
        assert_eq!(app.start_after, secs(2));
        assert_eq!(app.restart_delay, Duration::from_millis(1250));
        assert_eq!(
            app.windows(ProbeKind::Startup),
            [
                Window {
                    from: secs(0),
                    to: Some(secs(30)),
                    result: ScriptedResult::Failure
                },
                Window {
                    from: secs(30),
                    to: None,
                    result: ScriptedResult::Success
                },
            ]
        );
        assert_eq!(app.windows(ProbeKind::Liveness), []);
        assert_eq!(script.containers["side"], ContainerScript::default());
    }

    #[test]
    fn windows_are_half_open_and_unscripted_time_succeeds() {
        let script = parse(&yaml(
            "containers: {app: {readiness: [{from: 10, to: 20, result: failure}, {from: 30, result: error}]}}",
        ))
        .unwrap();
        let app = &script.containers["app"];
        let at = |ms| app.result_at(ProbeKind::Readiness, Duration::from_millis(ms));
        assert_eq!(at(9_999), ScriptedResult::Success);
        assert_eq!(at(10_000), ScriptedResult::Failure);
        assert_eq!(at(19_999), ScriptedResult::Failure);
        assert_eq!(at(20_000), ScriptedResult::Success, "`to` is exclusive");
        assert_eq!(at(30_000), ScriptedResult::Error);
        assert_eq!(at(1_000_000), ScriptedResult::Error, "last window is open");
        assert_eq!(
            app.result_at(ProbeKind::Liveness, secs(15)),
            ScriptedResult::Success
        );
    }

    #[test]
    fn empty_script_is_valid() {
        assert_eq!(parse(&yaml("{}")).unwrap(), Script::default());
        assert_eq!(parse(&yaml("containers:")).unwrap(), Script::default());
    }

    #[test]
    fn unknown_result_names_the_field_and_the_choices() {
        assert_eq!(
            error(
                "
containers:
  app:
    readiness:
      - {from: 0, to: 5, result: failure}
      - {from: 5, result: ok}
"
            ),
            r#"script: containers.app.readiness[1].result: unknown result "ok" (expected success, warning, failure or error)"#
        );
        assert_eq!(
            error("containers: {app: {liveness: [{from: 0, result: 1}]}}"),
            "script: containers.app.liveness[0].result: expected one of success, warning, failure or error, got a number"
        );
    }

    #[test]
    fn unknown_fields_are_rejected_with_the_known_ones() {
        assert_eq!(
            error("duraton: 5"),
            "script: duraton: unknown field (expected duration, containers, replicas or outage)"
        );
        assert_eq!(
            error("containers: {app: {readyness: []}}"),
            "script: containers.app.readyness: unknown field (expected startAfter, restartDelay, startup, readiness or liveness)"
        );
        assert_eq!(
            error("containers: {app: {startup: [{from: 0, until: 3, result: failure}]}}"),
            "script: containers.app.startup[0].until: unknown field (expected from, to or result)"
        );
    }

    #[test]
    fn required_window_fields() {
        assert_eq!(
            error("containers: {app: {startup: [{to: 3, result: failure}]}}"),
            "script: containers.app.startup[0].from: required"
        );
        assert_eq!(
            error("containers: {app: {startup: [{from: 0, to: 3}]}}"),
            "script: containers.app.startup[0].result: required"
        );
        assert_eq!(
            error(
                "containers: {app: {startup: [{from: 0, result: failure}, {from: 5, result: success}]}}"
            ),
            "script: containers.app.startup[0].to: required in every window but the last"
        );
    }

    #[test]
    fn windows_must_be_ordered_and_not_empty() {
        assert_eq!(
            error(
                "containers: {app: {readiness: [{from: 0, to: 40, result: failure}, {from: 30, result: success}]}}"
            ),
            "script: containers.app.readiness[1].from: 30 overlaps the previous window, which ends at 40"
        );
        assert_eq!(
            error("containers: {app: {readiness: [{from: 5, to: 5, result: failure}]}}"),
            "script: containers.app.readiness[0].to: 5 must be after from (5)"
        );
        // Touching windows and gaps are fine.
        parse(&yaml(
            "containers: {app: {readiness: [{from: 0, to: 5, result: failure}, {from: 5, to: 6, result: error}, {from: 9, result: warning}]}}",
        ))
        .unwrap();
    }

    #[test]
    fn times_are_bounded_non_negative_numbers() {
        assert_eq!(
            error("containers: {app: {startAfter: -1}}"),
            "script: containers.app.startAfter: must not be negative (got -1)"
        );
        assert_eq!(
            error("containers: {app: {restartDelay: soon}}"),
            "script: containers.app.restartDelay: expected a number of seconds, got a string"
        );
        assert_eq!(
            error("duration: 604801"),
            "script: duration: must be at most 604800 (one week), got 604801"
        );
        assert_eq!(
            error("duration: 0"),
            "script: duration: must be at least 0.001 seconds"
        );
        assert_eq!(
            positive_seconds_arg(-3.0).unwrap_err(),
            "must not be negative (got -3)"
        );
        assert_eq!(positive_seconds_arg(2.5), Ok(Duration::from_millis(2500)));
    }

    #[test]
    fn shapes_are_checked() {
        assert_eq!(error("[1, 2]"), "script: expected a mapping, got a list");
        assert_eq!(
            error("containers: [app]"),
            "script: containers: expected a mapping, got a list"
        );
        assert_eq!(
            error("containers: {app: {readiness: {from: 0}}}"),
            "script: containers.app.readiness: expected a list of windows, got a mapping"
        );
        assert_eq!(
            error("containers: {app: {readiness: [failure]}}"),
            "script: containers.app.readiness[0]: expected a mapping, got a string"
        );
    }

    #[test]
    fn scripted_containers_must_exist_in_the_pod() {
        let script = parse(&yaml("containers: {app: {}, ghost: {}}")).unwrap();
        assert_eq!(
            script
                .check_containers(&["app", "side"])
                .unwrap_err()
                .to_string(),
            r#"script: containers.ghost: the pod has no container or restartable init container "ghost" (it has: app, side)"#
        );
        script.check_containers(&["app", "ghost"]).unwrap();
    }

    #[test]
    fn the_workload_form_parses_replicas_and_an_outage() {
        let script = parse(&yaml(
            "{duration: 90, replicas: 6, outage: {from: 30, to: 75.5}}",
        ))
        .unwrap();
        assert_eq!(script.replicas, Some(6));
        let outage = script.outage.unwrap();
        assert_eq!(
            outage,
            Outage {
                from: secs(30),
                to: Duration::from_millis(75_500)
            }
        );
        assert!(!outage.contains(Duration::from_millis(29_999)));
        assert!(outage.contains(secs(30)));
        assert!(outage.contains(Duration::from_millis(75_499)));
        assert!(
            !outage.contains(Duration::from_millis(75_500)),
            "`to` is exclusive"
        );
        let single = parse(&yaml("duration: 9")).unwrap();
        assert_eq!((single.replicas, single.outage), (None, None));
    }

    #[test]
    fn replicas_are_a_whole_number_from_one_to_the_maximum() {
        for (text, got) in [
            ("replicas: 0", "0"),
            ("replicas: 101", "101"),
            ("replicas: -1", "-1"),
            ("replicas: 2.5", "2.5"),
            ("replicas: six", "a string"),
        ] {
            assert_eq!(
                error(text),
                format!("script: replicas: expected a whole number from 1 to 100, got {got}")
            );
        }
        assert_eq!(parse(&yaml("replicas: 100")).unwrap().replicas, Some(100));
        assert_eq!(parse(&yaml("replicas: 1")).unwrap().replicas, Some(1));
    }

    #[test]
    fn an_outage_needs_both_ends_in_order() {
        assert_eq!(
            error("outage: {from: 40, to: 40}"),
            "script: outage.to: 40 must be after from (40)"
        );
        assert_eq!(
            error("outage: {from: 40, to: 10}"),
            "script: outage.to: 10 must be after from (40)"
        );
        assert_eq!(error("outage: {from: 5}"), "script: outage.to: required");
        assert_eq!(error("outage: {to: 5}"), "script: outage.from: required");
        assert_eq!(
            error("outage: {from: -5, to: 5}"),
            "script: outage.from: must not be negative (got -5)"
        );
        assert_eq!(
            error("outage: {from: 0, until: 5}"),
            "script: outage.until: unknown field (expected from or to)"
        );
        assert_eq!(
            error("outage: [0, 5]"),
            "script: outage: expected a mapping, got a list"
        );
    }

    #[test]
    fn an_outage_ends_within_the_simulation() {
        let script = parse(&yaml("outage: {from: 10, to: 60}")).unwrap();
        assert_eq!(
            script.check_outage(secs(45)).unwrap_err().to_string(),
            "script: outage.to: 60 is past the end of the simulation (45, the script's duration or --duration)"
        );
        script.check_outage(secs(60)).unwrap();
        Script::default().check_outage(secs(1)).unwrap();
    }

    #[test]
    fn seconds_render_like_the_script() {
        assert_eq!(show_seconds(secs(40)), "40");
        assert_eq!(show_seconds(Duration::from_millis(2500)), "2.5");
        assert_eq!(show_seconds(Duration::ZERO), "0");
    }
}
