//! Pictures of a finished simulation: an SVG timeline ([`svg`]) and one
//! self-contained HTML page with that timeline and a table of the events
//! ([`html`]), for `podprobe simulate --output svg|html`.
//!
//! Both are pure functions of the [`SimulationReport`] that `--output json` prints
//! and of the probe specs the simulation ran: nothing is simulated twice,
//! so the picture shows exactly the JSON lines. Each container (and
//! restartable init container) gets a lane: a row per probe it has, one
//! mark per probe run coloured by result, its thresholds written above;
//! `started` and `ready` as bands, filled while true; kills and the start
//! of each instance as vertical markers. In gate mode a pod-level band shows
//! the `podprobe.io/ready` condition. In workload mode each replica gets a
//! header and the same lanes, with a band for its `Ready`, and the outage
//! is shaded across the plot.
//!
//! Everything the pod manifest names (pod and container names, kill and
//! condition messages) is user input and goes through [`escape`]. The
//! output grows linearly with the records: one element per probe run and
//! per change, kill or instance, plus a frame whose size depends only on
//! the number of containers (at most [`MAX_TICKS`] axis intervals).

use std::fmt::Write as _;
use std::time::Duration;

use super::engine::{ContainerSummary, Event, Record, SimulationReport};
use super::script::{Outage, ScriptedResult, show_seconds};
use super::simulation::Simulation;
use podprobe_core::spec::{ProbeKind, ProbeSpec};
use podprobe_core::status::gate::READY_CONDITION;
use podprobe_core::util::pod::{ContainerList, probed_containers};

/// The most intervals the time axis is cut into.
pub const MAX_TICKS: u64 = 12;

const WIDTH: f64 = 1200.0;
/// Where the plot starts: the row labels sit left of it.
const PLOT_LEFT: f64 = 170.0;
const PLOT_RIGHT: f64 = WIDTH - 40.0;
const FONT: &str = "DejaVu Sans, Verdana, Arial, sans-serif";
/// Names longer than this are cut in labels (the table shows them whole).
const NAME_CHARS: usize = 48;

const SUCCESS: &str = "#2ca02c";
const WARNING: &str = "#f0a30a";
const FAILURE: &str = "#d62728";
const ERROR: &str = "#8c8c8c";
const STARTED: &str = "#9ecae1";
const READY: &str = "#3182bd";
const CONDITION: &str = "#8e63b8";
const POD_READY: &str = "#1b9e77";
const OUTAGE: &str = "#d62728";
const BAND_OFF: &str = "#eeeeee";
const KILL: &str = "#d62728";
const INSTANCE: &str = "#444444";
const MUTED: &str = "#666666";

/// The timeline of `report` as an SVG document.
pub fn svg(simulation: &Simulation, report: &SimulationReport) -> String {
    let timeline = Timeline::new(simulation, report);
    let mut svg = SvgWriter::new(timeline.end);
    svg.draw(&timeline, simulation, report);
    svg.finish()
}

/// One HTML page, needing nothing from outside (no scripts, styles or
/// images to load): the timeline and a table of every event.
pub fn html(simulation: &Simulation, report: &SimulationReport) -> String {
    let mut out = String::new();
    let title = format!("podprobe simulate: pod {}", escape(&pod_name(simulation)));
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>\n{HTML_STYLE}</style>\n</head>\n<body>\n\
         <h1>{title}</h1>\n<p>{}</p>\n",
        escape(&subtitle(simulation, report))
    );
    out.push_str("<figure>\n");
    out.push_str(&svg(simulation, report));
    // Workload mode: a column for the replica.
    let workload = report.summary.workload.is_some();
    let _ = write!(
        out,
        "</figure>\n<h2>Events</h2>\n<table>\n<thead><tr><th>t (s)</th>{}<th>container</th>\
         <th>instance</th><th>event</th><th>detail</th></tr></thead>\n<tbody>\n",
        if workload { "<th>pod</th>" } else { "" }
    );
    for record in &report.records {
        let (event, detail, class) = describe(record);
        let pod = match &record.pod {
            Some(pod) => format!("<td>{}</td>", escape(pod)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"t\">{}</td>{pod}<td>{}</td><td>{}</td><td>{event}</td><td{}>{}</td></tr>",
            show_seconds(record.t),
            escape(record.container.as_deref().unwrap_or("(pod)")),
            record.instance.map(|i| i.to_string()).unwrap_or_default(),
            class.map(|c| format!(" class=\"{c}\"")).unwrap_or_default(),
            escape(&detail),
        );
    }
    out.push_str("</tbody>\n</table>\n<h2>At the end</h2>\n");
    // One pod's containers; in workload mode they are in each replica's.
    if !workload {
        out.push_str(
            "<table>\n<thead><tr><th>container</th>\
             <th>restarts</th><th>started</th><th>ready</th></tr></thead>\n<tbody>\n",
        );
        for (name, summary) in &report.summary.containers {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(name),
                summary.restarts,
                summary.started,
                summary.ready
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    if let Some(condition) = &report.summary.condition {
        let _ = writeln!(out, "<p>{READY_CONDITION}: {}</p>", escape(condition));
    }
    if let Some(numbers) = &report.summary.workload {
        out.push_str(
            "<table>\n<thead><tr><th>replica</th><th>restarts</th><th>Ready</th></tr></thead>\n<tbody>\n",
        );
        for (name, replica) in &report.summary.replicas {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(name),
                replica.restarts,
                replica.ready
            );
        }
        let _ = writeln!(
            out,
            "</tbody>\n</table>\n<p>At most {} replicas not Ready at once; {} restarted; \
             {} restart decisions deferred; {} floor decisions held a gate, {} let one go.</p>",
            numbers.most_not_ready,
            numbers.restarted,
            numbers.deferred,
            numbers.held,
            numbers.released
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}

const HTML_STYLE: &str = "\
body { font-family: DejaVu Sans, Verdana, Arial, sans-serif; margin: 1.5em; color: #222; }
figure { margin: 1em 0; overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
th { background: #f3f3f3; }
td.t { text-align: right; font-variant-numeric: tabular-nums; }
td.success { color: #1e7a28; }
td.warning { color: #a86f00; }
td.failure, td.killed { color: #b71c1c; font-weight: bold; }
td.error { color: #666; }
";

/// Escapes `text` for XML and HTML text and attribute values. Characters
/// XML 1.0 forbids even escaped (control characters but tab and line
/// breaks, U+FFFE, U+FFFF) become U+FFFD, so the document stays valid.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `name`, cut to [`NAME_CHARS`] characters with an ellipsis.
fn shorten(name: &str) -> String {
    if name.chars().count() <= NAME_CHARS {
        return name.to_string();
    }
    let mut cut: String = name.chars().take(NAME_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The step between axis ticks, in milliseconds: the smallest 1, 2 or 5
/// times a power of ten that cuts `span_ms` into at most [`MAX_TICKS`]
/// intervals.
pub fn tick_step_ms(span_ms: u64) -> u64 {
    let mut magnitude: u64 = 1;
    loop {
        for factor in [1, 2, 5] {
            let step = factor * magnitude;
            if span_ms / step <= MAX_TICKS {
                return step;
            }
        }
        magnitude *= 10;
    }
}

/// The axis ticks of `0..=span_ms`, in milliseconds.
pub fn ticks_ms(span_ms: u64) -> Vec<u64> {
    let step = tick_step_ms(span_ms);
    (0..=span_ms / step).map(|i| i * step).collect()
}

/// The stretches where a flag that changes at `changes` (in time order) is
/// true, up to `end`; empty stretches are left out.
pub fn true_spans(changes: &[(Duration, bool)], end: Duration) -> Vec<(Duration, Duration)> {
    let mut spans = Vec::new();
    let mut since = None;
    for &(t, value) in changes {
        match (value, since) {
            (true, None) => since = Some(t),
            (false, Some(from)) => {
                since = None;
                if t > from {
                    spans.push((from, t));
                }
            }
            _ => {}
        }
    }
    if let Some(from) = since
        && end > from
    {
        spans.push((from, end));
    }
    spans
}

/// Which labels to draw so that none overlaps the one drawn before it:
/// `spans` are the labels' `(left, right)` x ranges, left to right.
pub fn fit_labels(spans: &[(f64, f64)], gap: f64) -> Vec<bool> {
    let mut free_from = f64::NEG_INFINITY;
    spans
        .iter()
        .map(|&(left, right)| {
            let fits = left >= free_from;
            if fits {
                free_from = right + gap;
            }
            fits
        })
        .collect()
}

/// Maps virtual time onto the plot's x range.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    end_ms: u64,
    left: f64,
    right: f64,
}

impl Scale {
    /// `0..=end` onto `left..=right`.
    pub fn new(end: Duration, left: f64, right: f64) -> Self {
        Scale {
            end_ms: millis(end).max(1),
            left,
            right,
        }
    }

    /// The x of time `t`; times past the end are drawn at the end.
    pub fn x(&self, t: Duration) -> f64 {
        self.left + self.px(t.min(Duration::from_millis(self.end_ms)))
    }

    /// How wide a stretch of `d` is.
    pub fn px(&self, d: Duration) -> f64 {
        (self.right - self.left) * millis(d) as f64 / self.end_ms as f64
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The records sorted into what is drawn where.
struct Timeline<'a> {
    end: Duration,
    /// One pod, or in workload mode each replica in order.
    pods: Vec<PodLanes<'a>>,
    outage: Option<Outage>,
}

/// What is drawn for one pod.
struct PodLanes<'a> {
    /// Workload mode: the replica.
    replica: Option<&'a str>,
    lanes: Vec<Lane<'a>>,
    /// Gate mode: the condition's changes (`True` or not).
    condition: Option<Vec<(Duration, bool)>>,
    /// Workload mode: the changes of the replica's `Ready`.
    ready: Option<Vec<(Duration, bool)>>,
    /// Workload mode: the guards' decisions about it.
    deferred: usize,
    held: usize,
}

struct Lane<'a> {
    name: &'a str,
    init: bool,
    rows: Vec<ProbeRow<'a>>,
    started: Vec<(Duration, bool)>,
    ready: Vec<(Duration, bool)>,
    kills: Vec<Kill<'a>>,
    /// When each instance started, and its number.
    instances: Vec<(Duration, u32)>,
}

struct ProbeRow<'a> {
    kind: ProbeKind,
    spec: Option<&'a ProbeSpec>,
    runs: Vec<Run>,
}

struct Run {
    t: Duration,
    instance: u32,
    result: ScriptedResult,
}

struct Kill<'a> {
    t: Duration,
    instance: u32,
    kind: ProbeKind,
    grace_seconds: i64,
    message: &'a str,
}

impl<'a> Lane<'a> {
    fn new(name: &'a str, init: bool, simulation: &'a Simulation) -> Self {
        Lane {
            name,
            init,
            rows: ProbeKind::ALL
                .iter()
                .map(|&kind| ProbeRow {
                    kind,
                    spec: simulation.probes.get(name, kind),
                    runs: Vec::new(),
                })
                .collect(),
            started: Vec::new(),
            ready: Vec::new(),
            kills: Vec::new(),
            instances: Vec::new(),
        }
    }
}

impl<'a> Timeline<'a> {
    fn new(simulation: &'a Simulation, report: &'a SimulationReport) -> Self {
        let pods = if report.summary.replicas.is_empty() {
            vec![PodLanes::new(simulation, None, &report.records)]
        } else {
            (report.summary.replicas.keys())
                .map(|name| {
                    let records: Vec<&Record> = (report.records.iter())
                        .filter(|r| r.pod.as_deref() == Some(name))
                        .collect();
                    PodLanes::new(simulation, Some(name), records)
                })
                .collect()
        };
        Timeline {
            end: report.summary.duration,
            pods,
            outage: simulation.script.outage,
        }
    }

    fn gated(&self) -> bool {
        self.pods.iter().any(|pod| pod.condition.is_some())
    }

    fn workload(&self) -> bool {
        self.pods.iter().any(|pod| pod.replica.is_some())
    }
}

impl<'a> PodLanes<'a> {
    fn new(
        simulation: &'a Simulation,
        replica: Option<&'a str>,
        records: impl IntoIterator<Item = &'a Record>,
    ) -> Self {
        let spec = simulation.pod.spec.as_ref();
        let mut lanes: Vec<Lane<'a>> = spec
            .into_iter()
            .flat_map(probed_containers)
            .map(|placed| {
                let init = placed.list == ContainerList::InitContainers;
                Lane::new(&placed.container.name, init, simulation)
            })
            .collect();
        let mut pod = PodLanes {
            replica,
            lanes: Vec::new(),
            condition: simulation.gate.as_ref().map(|_| Vec::new()),
            ready: replica.map(|_| Vec::new()),
            deferred: 0,
            held: 0,
        };
        for record in records {
            let Some(name) = record.container.as_deref() else {
                match (&record.event, pod.condition.as_mut(), pod.ready.as_mut()) {
                    (Event::Condition { status, .. }, Some(changes), _) => {
                        changes.push((record.t, status == "True"));
                    }
                    (Event::PodReady { value }, _, Some(changes)) => {
                        changes.push((record.t, *value));
                    }
                    (Event::FloorHeld { .. }, _, _) => pod.held += 1,
                    _ => {}
                }
                continue;
            };
            let index = match lanes.iter().position(|lane| lane.name == name) {
                Some(index) => index,
                None => {
                    lanes.push(Lane::new(name, false, simulation));
                    lanes.len() - 1
                }
            };
            let lane = &mut lanes[index];
            let instance = record.instance.unwrap_or(1);
            match &record.event {
                Event::StartedRunning { .. } => lane.instances.push((record.t, instance)),
                Event::Probe { kind, result } => {
                    if let Some(row) = lane.rows.iter_mut().find(|row| row.kind == *kind) {
                        row.runs.push(Run {
                            t: record.t,
                            instance,
                            result: *result,
                        });
                    }
                }
                Event::Started { value } => lane.started.push((record.t, *value)),
                Event::Ready { value } => lane.ready.push((record.t, *value)),
                Event::Killed {
                    kind,
                    grace_seconds,
                    message,
                } => lane.kills.push(Kill {
                    t: record.t,
                    instance,
                    kind: *kind,
                    grace_seconds: *grace_seconds,
                    message,
                }),
                Event::RestartDeferred { .. } => pod.deferred += 1,
                Event::Condition { .. }
                | Event::PodReady { .. }
                | Event::FloorHeld { .. }
                | Event::FloorReleased => {}
            }
        }
        for lane in &mut lanes {
            lane.rows
                .retain(|row| row.spec.is_some() || !row.runs.is_empty());
        }
        pod.lanes = lanes;
        pod
    }

    /// How many bands its pod-level lane has.
    fn pod_bands(&self) -> usize {
        usize::from(self.condition.is_some()) + usize::from(self.ready.is_some())
    }
}

fn pod_name(simulation: &Simulation) -> String {
    simulation.pod.metadata.name.clone().unwrap_or_default()
}

fn mode(simulation: &Simulation) -> &'static str {
    if simulation.gate.is_some() {
        "gate mode: the podprobe.io/probes annotation's probes"
    } else {
        "authority mode: the pod spec's probes"
    }
}

fn subtitle(simulation: &Simulation, report: &SimulationReport) -> String {
    format!(
        "{}; {} s simulated; t is seconds since the pod's first container started",
        mode(simulation),
        show_seconds(report.summary.duration)
    )
}

fn result_name(result: ScriptedResult) -> &'static str {
    match result {
        ScriptedResult::Success => "success",
        ScriptedResult::Warning => "warning",
        ScriptedResult::Failure => "failure",
        ScriptedResult::Error => "error",
    }
}

fn result_colour(result: ScriptedResult) -> &'static str {
    match result {
        ScriptedResult::Success => SUCCESS,
        ScriptedResult::Warning => WARNING,
        ScriptedResult::Failure => FAILURE,
        ScriptedResult::Error => ERROR,
    }
}

fn kind_name(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Startup => "startup",
        ProbeKind::Readiness => "readiness",
        ProbeKind::Liveness => "liveness",
    }
}

/// `readiness: period 1s, success 3, failure 3, initial delay 0s, timeout 1s`
/// (`period 250ms` with `podprobe.periodMilliseconds`).
fn thresholds(kind: ProbeKind, spec: &ProbeSpec) -> String {
    let period = match spec.period_milliseconds {
        Some(millis) => format!("{millis}ms"),
        None => format!("{}s", spec.period_seconds),
    };
    let mut text = format!(
        "{}: period {period}, success {}, failure {}, initial delay {}s, timeout {}s",
        kind_name(kind),
        spec.success_threshold,
        spec.failure_threshold,
        spec.initial_delay_seconds,
        spec.timeout_seconds
    );
    if let Some(grace) = spec.termination_grace_period_seconds {
        let _ = write!(text, ", kill grace {grace}s");
    }
    text
}

/// A record for the table: event name, detail, and the detail's class.
fn describe(record: &Record) -> (&'static str, String, Option<&'static str>) {
    match &record.event {
        Event::StartedRunning { container_id } => ("started_running", container_id.clone(), None),
        Event::Probe { kind, result } => (
            "probe",
            format!("{} {}", kind_name(*kind), result_name(*result)),
            Some(result_name(*result)),
        ),
        Event::Started { value } => ("started", value.to_string(), None),
        Event::Ready { value } => ("ready", value.to_string(), None),
        Event::Killed {
            kind,
            grace_seconds,
            message,
        } => (
            "killed",
            format!("{}, grace {grace_seconds}s: {message}", kind_name(*kind)),
            Some("killed"),
        ),
        Event::Condition {
            type_,
            status,
            reason,
            message,
        } => {
            let mut detail = format!("{type_} {status}");
            if let Some(reason) = reason {
                let _ = write!(detail, " ({reason})");
            }
            if let Some(message) = message {
                let _ = write!(detail, ": {message}");
            }
            ("condition", detail, None)
        }
        Event::PodReady { value } => ("pod_ready", value.to_string(), None),
        Event::RestartDeferred {
            unavailable,
            allowed,
        } => (
            "restart_deferred",
            format!("{unavailable} unavailable, maxUnavailable allows {allowed}"),
            None,
        ),
        Event::FloorHeld { ready, floor } => (
            "floor_held",
            format!("{ready} Ready without this one, minReady {floor}"),
            None,
        ),
        Event::FloorReleased => ("floor_released", String::new(), None),
    }
}

/// A rough width of `text` at `size` px, enough to keep labels apart.
fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

/// Writes the SVG top to bottom; `y` is where the next part goes.
struct SvgWriter {
    body: String,
    scale: Scale,
    y: f64,
}

const LANE_HEADER: f64 = 20.0;
const MARKER_STRIP: f64 = 30.0;
const PROBE_ROW: f64 = 32.0;
const BAND_ROW: f64 = 20.0;
const LANE_GAP: f64 = 16.0;
const REPLICA_HEADER: f64 = 26.0;

impl SvgWriter {
    fn new(end: Duration) -> Self {
        SvgWriter {
            body: String::new(),
            scale: Scale::new(end, PLOT_LEFT, PLOT_RIGHT),
            y: 0.0,
        }
    }

    fn draw(
        &mut self,
        timeline: &Timeline<'_>,
        simulation: &Simulation,
        report: &SimulationReport,
    ) {
        self.text(
            16.0,
            26.0,
            18.0,
            "start",
            "font-weight=\"bold\"",
            &format!("podprobe simulate: pod {}", shorten(&pod_name(simulation))),
        );
        self.text(
            16.0,
            46.0,
            12.0,
            "start",
            &format!("fill=\"{MUTED}\""),
            &subtitle(simulation, report),
        );
        self.legend(70.0, timeline.gated(), timeline.workload());
        self.y = 92.0;
        let plot_top = self.y;
        self.axis_grid(plot_top, timeline);
        for pod in &timeline.pods {
            let containers = match pod.replica {
                Some(name) => {
                    let summary = report.summary.replicas.get(name);
                    self.replica_header(name, pod, summary.map_or(0, |s| s.restarts));
                    summary.map(|s| &s.containers)
                }
                None => Some(&report.summary.containers),
            };
            if pod.pod_bands() > 0 {
                self.pod_lane(pod, timeline.end);
            }
            for lane in &pod.lanes {
                let restarts = containers
                    .and_then(|c| c.get(lane.name))
                    .map_or(0, |s: &ContainerSummary| s.restarts);
                self.lane(lane, restarts, timeline.end);
            }
        }
        if let Some(outage) = timeline.outage {
            self.outage(outage, plot_top);
        }
        self.axis(timeline.end);
    }

    fn finish(self) -> String {
        let height = self.y.ceil();
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
             viewBox=\"0 0 {WIDTH} {height}\" font-family=\"{FONT}\">\n\
             <rect class=\"background\" x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#ffffff\"/>\n\
             {}</svg>\n",
            self.body
        )
    }

    /// `text` (escaped here) at (`x`, `y`); `extra` holds further
    /// attributes, written by this module.
    fn text(&mut self, x: f64, y: f64, size: f64, anchor: &str, extra: &str, text: &str) {
        let _ = writeln!(
            self.body,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" text-anchor=\"{anchor}\" {extra}>{}</text>",
            escape(text)
        );
    }

    fn legend(&mut self, y: f64, gate: bool, workload: bool) {
        let mut x = 16.0;
        self.text(x, y, 12.0, "start", "font-weight=\"bold\"", "probe run:");
        x += text_width("probe run:", 12.0) + 10.0;
        for result in [
            ScriptedResult::Success,
            ScriptedResult::Warning,
            ScriptedResult::Failure,
            ScriptedResult::Error,
        ] {
            let colour = result_colour(result);
            self.swatch(&mut x, y, colour, result_name(result), 5.0, 14.0);
        }
        x += 8.0;
        self.swatch(&mut x, y, STARTED, "started", 22.0, 10.0);
        self.swatch(&mut x, y, READY, "ready", 22.0, 10.0);
        if gate {
            self.swatch(&mut x, y, CONDITION, READY_CONDITION, 22.0, 10.0);
        }
        if workload {
            self.swatch(&mut x, y, POD_READY, "pod Ready", 22.0, 10.0);
            self.swatch(&mut x, y, OUTAGE, "outage", 22.0, 10.0);
        }
        x += 8.0;
        self.marker_swatch(
            &mut x,
            y,
            &format!("stroke=\"{KILL}\" stroke-width=\"2\""),
            "kill",
        );
        let dashed = format!("stroke=\"{INSTANCE}\" stroke-width=\"1\" stroke-dasharray=\"3 2\"");
        self.marker_swatch(&mut x, y, &dashed, "container (re)start");
    }

    /// A legend entry: a `w` by `h` box of `colour`, then `label`; moves
    /// `x` past it.
    fn swatch(&mut self, x: &mut f64, y: f64, colour: &str, label: &str, w: f64, h: f64) {
        let _ = writeln!(
            self.body,
            "<rect class=\"legend\" x=\"{:.1}\" y=\"{:.1}\" width=\"{w}\" height=\"{h}\" fill=\"{colour}\"/>",
            *x,
            y - 4.0 - h / 2.0
        );
        self.text(*x + w + 5.0, y, 12.0, "start", "", label);
        *x += w + 5.0 + text_width(label, 12.0) + 16.0;
    }

    /// A legend entry for a vertical marker drawn with `stroke`.
    fn marker_swatch(&mut self, x: &mut f64, y: f64, stroke: &str, label: &str) {
        let _ = writeln!(
            self.body,
            "<line class=\"legend\" x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" {stroke}/>",
            *x,
            y - 13.0,
            y + 3.0
        );
        self.text(*x + 5.0, y, 12.0, "start", "", label);
        *x += 5.0 + text_width(label, 12.0) + 16.0;
    }

    /// Vertical grid lines at the ticks, drawn first so everything else
    /// sits on top, from `top` down to where the axis will be.
    fn axis_grid(&mut self, top: f64, timeline: &Timeline<'_>) {
        let height = self.lanes_height(timeline);
        for tick in ticks_ms(millis(timeline.end)) {
            let x = self.scale.x(Duration::from_millis(tick));
            let _ = writeln!(
                self.body,
                "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e6e6e6\"/>",
                top + height
            );
        }
    }

    fn lanes_height(&self, timeline: &Timeline<'_>) -> f64 {
        timeline.pods.iter().map(Self::pod_height).sum()
    }

    fn pod_height(pod: &PodLanes<'_>) -> f64 {
        let header = if pod.replica.is_some() {
            REPLICA_HEADER
        } else {
            0.0
        };
        let bands = match pod.pod_bands() {
            0 => 0.0,
            n => LANE_HEADER + BAND_ROW * n as f64 + LANE_GAP,
        };
        let lanes: f64 = pod
            .lanes
            .iter()
            .map(|lane| {
                LANE_HEADER
                    + MARKER_STRIP
                    + PROBE_ROW * lane.rows.len() as f64
                    + 2.0 * BAND_ROW
                    + LANE_GAP
            })
            .sum();
        header + bands + lanes
    }

    fn axis(&mut self, end: Duration) {
        let y = self.y;
        let _ = writeln!(
            self.body,
            "<line class=\"axis\" x1=\"{PLOT_LEFT:.1}\" y1=\"{y:.1}\" x2=\"{PLOT_RIGHT:.1}\" y2=\"{y:.1}\" stroke=\"#333333\"/>"
        );
        for tick in ticks_ms(millis(end)) {
            let t = Duration::from_millis(tick);
            let x = self.scale.x(t);
            let _ = writeln!(
                self.body,
                "<line class=\"tick\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>",
                y + 5.0
            );
            self.text(
                x,
                y + 18.0,
                11.0,
                "middle",
                "",
                &format!("{}s", show_seconds(t)),
            );
        }
        self.text(
            (PLOT_LEFT + PLOT_RIGHT) / 2.0,
            y + 36.0,
            12.0,
            "middle",
            &format!("fill=\"{MUTED}\""),
            "seconds since the pod's first container started",
        );
        self.y = y + 48.0;
    }

    fn lane_header(&mut self, name: &str, note: &str) {
        let y = self.y;
        let _ = writeln!(
            self.body,
            "<line class=\"separator\" x1=\"8\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#bbbbbb\"/>",
            WIDTH - 8.0
        );
        let name = shorten(name);
        self.text(16.0, y + 15.0, 14.0, "start", "font-weight=\"bold\"", &name);
        let x = 16.0 + text_width(&name, 14.0) * 1.05 + 10.0;
        self.text(
            x,
            y + 15.0,
            12.0,
            "start",
            &format!("fill=\"{MUTED}\""),
            note,
        );
        self.y += LANE_HEADER;
    }

    /// The pod-level bands: the gate podprobe sets, and in workload mode
    /// the replica's `Ready`.
    fn pod_lane(&mut self, pod: &PodLanes<'_>, end: Duration) {
        self.body.push_str("<g class=\"gate\">\n");
        let note = if pod.condition.is_some() {
            "readiness gate set by podprobe"
        } else {
            "the kubelet's Ready"
        };
        self.lane_header("pod", note);
        if let Some(changes) = &pod.condition {
            let spans = true_spans(changes, end);
            self.band(READY_CONDITION, "condition", CONDITION, &spans);
        }
        if let Some(changes) = &pod.ready {
            self.band("Ready", "pod-ready", POD_READY, &true_spans(changes, end));
        }
        self.body.push_str("</g>\n");
        self.y += LANE_GAP;
    }

    /// Workload mode: the replica's name, restarts and what the guards
    /// decided about it.
    fn replica_header(&mut self, name: &str, pod: &PodLanes<'_>, restarts: u32) {
        let y = self.y;
        let _ = writeln!(
            self.body,
            "<rect class=\"replica\" x=\"8\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{}\" fill=\"#e8eef5\"/>",
            WIDTH - 16.0,
            REPLICA_HEADER - 4.0
        );
        let title = shorten(name);
        self.text(
            16.0,
            y + 15.0,
            15.0,
            "start",
            "font-weight=\"bold\"",
            &title,
        );
        let times = |n: usize| {
            if n == 1 {
                "once".to_string()
            } else {
                format!("{n} times")
            }
        };
        let note = format!(
            "{restarts} restart{}; a restart deferred by the restartBudget {}, the gate held by the readinessFloor {}",
            if restarts == 1 { "" } else { "s" },
            times(pod.deferred),
            times(pod.held),
        );
        let x = 16.0 + text_width(&title, 15.0) * 1.05 + 10.0;
        self.text(
            x,
            y + 15.0,
            12.0,
            "start",
            &format!("fill=\"{MUTED}\""),
            &note,
        );
        self.y += REPLICA_HEADER;
    }

    /// Shades the outage over every lane, on top, see-through.
    fn outage(&mut self, outage: Outage, top: f64) {
        let (x, right) = (self.scale.x(outage.from), self.scale.x(outage.to));
        let _ = writeln!(
            self.body,
            "<rect class=\"outage\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{OUTAGE}\" fill-opacity=\"0.08\"><title>outage from {}s to {}s: every probe fails</title></rect>",
            (right - x).max(0.5),
            self.y - top,
            show_seconds(outage.from),
            show_seconds(outage.to)
        );
    }

    fn lane(&mut self, lane: &Lane<'_>, restarts: u32, end: Duration) {
        self.body.push_str("<g class=\"lane\">\n");
        let mut note = String::new();
        if lane.init {
            note.push_str("restartable init container, ");
        }
        let _ = write!(
            note,
            "{restarts} restart{}",
            if restarts == 1 { "" } else { "s" }
        );
        if lane.rows.is_empty() {
            note.push_str(", no probes");
        }
        self.lane_header(lane.name, &note);
        let markers_top = self.y;
        self.y += MARKER_STRIP;
        for row in &lane.rows {
            self.probe_row(row);
        }
        self.band(
            "started",
            "started",
            STARTED,
            &true_spans(&lane.started, end),
        );
        self.band("ready", "ready", READY, &true_spans(&lane.ready, end));
        let bottom = self.y;
        self.markers(lane, markers_top, bottom);
        self.body.push_str("</g>\n");
        self.y += LANE_GAP;
    }

    fn probe_row(&mut self, row: &ProbeRow<'_>) {
        let y = self.y;
        let name = kind_name(row.kind);
        if let Some(spec) = row.spec {
            self.text(
                PLOT_LEFT + 4.0,
                y + 10.0,
                10.5,
                "start",
                &format!("fill=\"{MUTED}\" {HALO}"),
                &thresholds(row.kind, spec),
            );
        }
        let top = y + 14.0;
        let height = 16.0;
        self.text(PLOT_LEFT - 10.0, top + 12.0, 12.0, "end", "", name);
        let _ = writeln!(
            self.body,
            "<rect class=\"row\" x=\"{PLOT_LEFT:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height}\" fill=\"#fafafa\"/>",
            PLOT_RIGHT - PLOT_LEFT
        );
        let width = row
            .spec
            .map_or(3.0, |spec| self.scale.px(spec.period()) * 0.5)
            .clamp(1.5, 6.0);
        // Runs at the same instant (a manual trigger on top of a tick)
        // share the mark's height, the first on top.
        let mut start = 0;
        while start < row.runs.len() {
            let t = row.runs[start].t;
            let same = row.runs[start..]
                .iter()
                .take_while(|run| run.t == t)
                .count();
            let part = height / same as f64;
            for (i, run) in row.runs[start..start + same].iter().enumerate() {
                let x = self.scale.x(run.t) - width / 2.0;
                let result = result_name(run.result);
                let _ = writeln!(
                    self.body,
                    "<rect class=\"probe {result}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{width:.1}\" height=\"{part:.1}\" fill=\"{}\"><title>{}s {name} {result} (instance {})</title></rect>",
                    top + part * i as f64,
                    result_colour(run.result),
                    show_seconds(run.t),
                    run.instance
                );
            }
            start += same;
        }
        self.y += PROBE_ROW;
    }

    fn band(&mut self, label: &str, class: &str, colour: &str, spans: &[(Duration, Duration)]) {
        let top = self.y + 3.0;
        let height = 12.0;
        self.text(PLOT_LEFT - 10.0, top + 10.5, 12.0, "end", "", label);
        let _ = writeln!(
            self.body,
            "<rect class=\"band-off\" x=\"{PLOT_LEFT:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height}\" fill=\"{BAND_OFF}\"/>",
            PLOT_RIGHT - PLOT_LEFT
        );
        for &(from, to) in spans {
            let x = self.scale.x(from);
            let _ = writeln!(
                self.body,
                "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height}\" fill=\"{colour}\"><title>{} true from {}s to {}s</title></rect>",
                (self.scale.x(to) - x).max(0.5),
                escape(label),
                show_seconds(from),
                show_seconds(to)
            );
        }
        self.y += BAND_ROW;
    }

    /// Kills and instance starts: a line across the lane, a label in the
    /// strip above the rows where it fits (the line's title always tells).
    fn markers(&mut self, lane: &Lane<'_>, top: f64, bottom: f64) {
        let kills: Vec<Marker> = lane
            .kills
            .iter()
            .map(|kill| Marker {
                t: kill.t,
                title: format!(
                    "{}s instance {} killed by {} probe, grace {}s: {}",
                    show_seconds(kill.t),
                    kill.instance,
                    kind_name(kill.kind),
                    kill.grace_seconds,
                    kill.message,
                ),
                label: format!("kill: {}", kind_name(kill.kind)),
            })
            .collect();
        let kill_line = format!("stroke=\"{KILL}\" stroke-width=\"2\"");
        let kill_text = format!("fill=\"{KILL}\" font-weight=\"bold\"");
        self.marker_line(&kills, "kill", &kill_line, &kill_text, top + 2.0, bottom);
        let instances: Vec<Marker> = lane
            .instances
            .iter()
            .map(|&(t, n)| Marker {
                t,
                title: format!("{}s instance {n} started running", show_seconds(t)),
                label: if n == 1 {
                    "start #1".to_string()
                } else {
                    format!("restart #{n}")
                },
            })
            .collect();
        let dashed = format!("stroke=\"{INSTANCE}\" stroke-width=\"1\" stroke-dasharray=\"3 2\"");
        let instance_text = format!("fill=\"{INSTANCE}\"");
        self.marker_line(
            &instances,
            "instance",
            &dashed,
            &instance_text,
            top + 16.0,
            bottom,
        );
    }

    /// Draws `markers` from `top` to `bottom`, each label on the line at
    /// `top + 10` unless it would overlap the one before.
    fn marker_line(
        &mut self,
        markers: &[Marker],
        class: &str,
        stroke: &str,
        text: &str,
        top: f64,
        bottom: f64,
    ) {
        const SIZE: f64 = 11.0;
        let places: Vec<((f64, f64), bool)> = markers
            .iter()
            .map(|m| place_label(self.scale.x(m.t), text_width(&m.label, SIZE)))
            .collect();
        let spans: Vec<(f64, f64)> = places.iter().map(|&(span, _)| span).collect();
        let fits = fit_labels(&spans, 4.0);
        for ((marker, ((left, right), end)), fits) in markers.iter().zip(places).zip(fits) {
            let x = self.scale.x(marker.t);
            let _ = writeln!(
                self.body,
                "<g class=\"{class}\"><title>{}</title>\
                 <line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" {stroke}/>",
                escape(&marker.title)
            );
            if fits {
                let (at, anchor) = if end { (right, "end") } else { (left, "start") };
                self.text(
                    at,
                    top + 10.0,
                    SIZE,
                    anchor,
                    &format!("{text} {HALO}"),
                    &marker.label,
                );
            }
            self.body.push_str("</g>\n");
        }
    }
}

/// A vertical marker: a kill or a container instance's start.
struct Marker {
    t: Duration,
    /// Unescaped.
    title: String,
    label: String,
}

/// Keeps text readable where it crosses lines: a white outline under it.
const HALO: &str = "stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\"";

/// Where a label `width` wide goes for a marker at `x`: just right of it,
/// or just left of it where it would run past the picture's right edge.
/// Returns the label's `(left, right)` and whether it is anchored at its
/// end.
pub fn place_label(x: f64, width: f64) -> ((f64, f64), bool) {
    if x + 3.0 + width <= WIDTH - 6.0 {
        ((x + 3.0, x + 3.0 + width), false)
    } else {
        ((x - 3.0 - width, x - 3.0), true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn tick_step_is_one_two_or_five_and_keeps_the_axis_within_max_ticks() {
        assert_eq!(tick_step_ms(120_000), 10_000);
        assert_eq!(tick_step_ms(130_000), 20_000);
        assert_eq!(tick_step_ms(40_000), 5_000);
        assert_eq!(tick_step_ms(12), 1);
        assert_eq!(tick_step_ms(1), 1);
        assert_eq!(tick_step_ms(0), 1);
        assert_eq!(tick_step_ms(4_750), 500);
        let week = 7 * 24 * 3600 * 1000;
        assert_eq!(tick_step_ms(week), 50_000_000);
        for span in [1, 7, 999, 1_000, 55_555, 90_000, week] {
            let ticks = ticks_ms(span);
            assert!(ticks.len() as u64 <= MAX_TICKS + 1, "{span}: {ticks:?}");
            assert!(ticks.len() >= 2 || span < 1, "{span}: {ticks:?}");
            assert_eq!(ticks[0], 0);
            assert!(*ticks.last().unwrap() <= span);
        }
    }

    #[test]
    fn ticks_cover_the_span_at_the_step() {
        assert_eq!(
            ticks_ms(72_000),
            [0, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000]
        );
        assert_eq!(ticks_ms(3_000), [0, 500, 1_000, 1_500, 2_000, 2_500, 3_000]);
    }

    #[test]
    fn scale_maps_the_duration_onto_the_plot() {
        let scale = Scale::new(secs(120), 100.0, 1300.0);
        assert_eq!(scale.x(secs(0)), 100.0);
        assert_eq!(scale.x(secs(60)), 700.0);
        assert_eq!(scale.x(secs(120)), 1300.0);
        assert_eq!(scale.x(secs(500)), 1300.0, "clamped to the end");
        assert_eq!(scale.px(secs(10)), 100.0);
        let tiny = Scale::new(Duration::ZERO, 0.0, 10.0);
        assert!(tiny.x(secs(1)).is_finite());
    }

    #[test]
    fn spans_are_where_the_flag_is_true() {
        let changes = [
            (secs(0), true),
            (secs(30), false),
            (secs(30), true),
            (secs(40), false),
            (secs(50), true),
        ];
        assert_eq!(
            true_spans(&changes, secs(90)),
            [
                (secs(0), secs(30)),
                (secs(30), secs(40)),
                (secs(50), secs(90))
            ]
        );
        assert_eq!(
            true_spans(&[(secs(5), true), (secs(5), false)], secs(9)),
            [],
            "an empty stretch is not drawn"
        );
        assert_eq!(true_spans(&[(secs(9), true)], secs(9)), []);
        assert_eq!(true_spans(&[(secs(2), false)], secs(9)), []);
    }

    #[test]
    fn labels_that_would_overlap_the_previous_are_left_out() {
        let spans = [(0.0, 50.0), (40.0, 90.0), (60.0, 110.0), (200.0, 250.0)];
        assert_eq!(fit_labels(&spans, 4.0), [true, false, true, true]);
        assert_eq!(fit_labels(&[(0.0, 50.0), (53.0, 60.0)], 4.0), [true, false]);
        assert_eq!(fit_labels(&[], 4.0), Vec::<bool>::new());
    }

    #[test]
    fn labels_near_the_right_edge_go_left_of_their_marker() {
        assert_eq!(place_label(100.0, 50.0), ((103.0, 153.0), false));
        assert_eq!(
            place_label(PLOT_RIGHT, 50.0),
            ((PLOT_RIGHT - 53.0, PLOT_RIGHT - 3.0), true)
        );
        let ((_, right), end) = place_label(WIDTH - 60.0, 50.0);
        assert!(!end && right <= WIDTH - 6.0, "fits right of the marker");
    }

    #[test]
    fn escape_leaves_no_markup_and_no_characters_xml_forbids() {
        assert_eq!(escape(r#"a<b&"c'>"#), "a&lt;b&amp;&quot;c&#39;&gt;");
        assert_eq!(escape("x\u{1}y\u{FFFF}\tz\n"), "x\u{FFFD}y\u{FFFD}\tz\n");
        assert_eq!(escape("bäd 🙂"), "bäd 🙂");
    }

    #[test]
    fn long_names_are_cut_in_labels() {
        assert_eq!(shorten("app"), "app");
        let long = "x".repeat(100);
        let cut = shorten(&long);
        assert_eq!(cut.chars().count(), NAME_CHARS);
        assert!(cut.ends_with('…'));
    }
}
