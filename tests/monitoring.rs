//! podprobe's alerts and Grafana dashboard (`charts/podprobe/files/`), without
//! a Prometheus: `promtool check rules` and `promtool test rules`
//! (`tests/monitoring/alerts_test.yaml`), and that every metric an alert or
//! a dashboard query reads is one podprobe exports
//! ([`podprobe::daemon::metric_set::MetricSet`]), scraped under the job the
//! chart's PodMonitor sets.
//!
//! promtool comes from `PODPROBE_PROMTOOL` (hack/test.sh exports it) or the
//! cache of `hack/promtool.sh`; without it the promtool tests fail, saying to
//! run that.

#[path = "support/go_tools.rs"]
mod go_tools;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use go_tools::{promtool, repo, run_ok, yaml_docs, yaml_file};
use k8s_openapi::api::core::v1::{Container, Pod};
use podprobe::daemon::metric_set::MetricSet;
use podprobe::daemon::probe_metrics::ProbeMetrics;
use podprobe_core::prober::results::CachedResult;
use podprobe_core::prober::worker::WorkerConfig;
use podprobe_core::spec::ProbeKind;
use podprobe_core::spec::probe_spec::normalize;
use podprobe_core::util::watch_activity::WatchActivity;
use serde_json::Value;

const ALERTS: &str = "charts/podprobe/files/alerts.yaml";
const DASHBOARD: &str = "charts/podprobe/files/dashboard.json";
/// The job label of podprobe's series: the chart's PodMonitor sets it.
const JOB: &str = r#"job="podprobe""#;
/// Series that Prometheus itself adds for every target.
const SCRAPE_SERIES: [&str; 1] = ["up"];

/// One vector selector of a PromQL expression: the metric name and what its
/// braces hold.
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: String,
}

/// The vector selectors of `expr` (a PromQL expression, possibly with
/// Grafana's `$variables`): identifiers that are neither functions,
/// keywords nor label names of `by (...)` and the like.
fn selectors(expr: &str) -> Vec<Selector> {
    const KEYWORDS: [&str; 7] = ["bool", "and", "or", "unless", "offset", "atan2", "inf"];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    // The characters up to the one that closes what opens at `i`.
    let skip_to = |i: usize, close: char| -> usize {
        let mut j = i + 1;
        let mut quote = None;
        while j < chars.len() {
            match (quote, chars[j]) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), '\\') => j += 1,
                (Some(_), _) => {}
                (None, '"' | '\'' | '`') => quote = Some(chars[j]),
                (None, c) if c == close => return j + 1,
                _ => {}
            }
            j += 1;
        }
        panic!("unclosed {close:?} in {expr}");
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != c {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
        } else if c == '[' {
            i = skip_to(i, ']');
        } else if c == '{' {
            // Braces without a name before them: a selector by __name__.
            i = skip_to(i, '}');
        } else if c.is_ascii_digit() || c == '$' || c == '.' {
            // Numbers, durations, Grafana variables.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_.".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let followed_by = chars.get(next).copied();
            let rest: String = chars[next..].iter().collect();
            // `sum by (...) (...)`: an aggregation with its grouping first.
            let grouping_follows = ["by", "without"].iter().any(|g| {
                rest.strip_prefix(g)
                    .is_some_and(|after| after.trim_start().starts_with('('))
            });
            if LABEL_LISTS.contains(&word.as_str()) {
                if followed_by == Some('(') {
                    i = skip_to(next, ')');
                }
            } else if followed_by == Some('(')
                || grouping_follows
                || KEYWORDS.contains(&word.to_lowercase().as_str())
            {
                // A function (its arguments are scanned as they come) or a
                // keyword.
            } else if followed_by == Some('{') {
                let end = skip_to(next, '}');
                found.push(Selector {
                    metric: word,
                    matchers: chars[next + 1..end - 1].iter().collect(),
                });
                i = end;
            } else {
                found.push(Selector {
                    metric: word,
                    matchers: String::new(),
                });
            }
        } else {
            i += 1;
        }
    }
    found
}

/// The series names `/metrics` can expose: each family by its type
/// (a counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`, an
/// info's `_info`). A labelled family shows its type only once it has a
/// series, so first one probe run is recorded and the build information
/// published, as `podprobe run` does at start.
fn exported_series() -> BTreeSet<String> {
    let metrics = MetricSet::new(WatchActivity::new());
    record_one_probe(&metrics.probes);
    metrics.build_info.set("gate");
    let text = metrics.served.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (family, kind) = rest.split_once(' ').expect("# TYPE name type");
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        for suffix in suffixes {
            names.insert(format!("{family}{suffix}"));
        }
    }
    names
}

/// Records one successful readiness probe run of a TCP probe, through the
/// same calls a worker makes.
fn record_one_probe(metrics: &ProbeMetrics) {
    let container: Container = serde_json::from_value(serde_json::json!({
        "name": "app",
        "readinessProbe": {"tcpSocket": {"port": 8080}},
    }))
    .unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-1"},
        "spec": {"containers": [container]},
    }))
    .unwrap();
    let probe = container.readiness_probe.as_ref().unwrap();
    let spec = normalize(ProbeKind::Readiness, probe, &container).expect("a valid probe");
    let config = WorkerConfig::new(ProbeKind::Readiness, spec, Arc::new(pod), &container);
    metrics.probe_completed(&config, CachedResult::Success, Duration::from_millis(3));
}

/// Every alert rule of files/alerts.yaml.
fn alert_rules() -> Vec<Value> {
    let file = yaml_file(ALERTS);
    file["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join(DASHBOARD)).expect("read the dashboard");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} does not parse: {e}"))
}

/// The panels of the dashboard, those inside rows included, rows excluded.
fn panels(dashboard: &Value) -> Vec<Value> {
    fn walk(panels: &Value, out: &mut Vec<Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            if panel["type"] == "row" {
                walk(&panel["panels"], out);
            } else {
                out.push(panel.clone());
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Every query of the dashboard, named by where it is: the panels'
/// targets and the template variables' `label_values(...)` series.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push((
                format!("panel {:?}", panel["title"].as_str().unwrap_or("?")),
                target["expr"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .unwrap_or_default();
        // label_values(SERIES, LABEL): SERIES is the query.
        let series = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map_or(query, |(series, _)| series);
        queries.push((format!("variable {}", variable["name"]), series.to_string()));
    }
    queries
}

#[test]
fn promtool_checks_the_rules() {
    let promtool = promtool();
    for file in [ALERTS, "deploy/monitoring/alerts.yaml"] {
        let out = run_ok(&promtool, &["check", "rules", file]);
        assert!(out.contains("SUCCESS"), "{file}: {out}");
    }
}

#[test]
fn promtool_unit_tests_of_the_alerts_pass() {
    let out = run_ok(
        &promtool(),
        &["test", "rules", "tests/monitoring/alerts_test.yaml"],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn the_selector_parser_finds_metrics_only() {
    let names =
        |expr: &str| -> Vec<String> { selectors(expr).into_iter().map(|s| s.metric).collect() };
    assert_eq!(
        names(
            r#"histogram_quantile(0.9, sum by (le, probe_type) (rate(a_bucket{job="x", node=~"$node"}[$__rate_interval])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        names(
            r#"sum(b{outcome="failed"}) by (node) / on (node) group_left (x) c offset 5m > bool 0.1 or absent(up)"#
        ),
        ["b", "c", "up"]
    );
    assert_eq!(
        selectors(r#"d{job="podprobe", x="{}"}"#)[0].matchers,
        r#"job="podprobe", x="{}""#
    );
}

/// The alerts and the dashboard read only metrics podprobe exports (or
/// Prometheus adds), each selected by the PodMonitor's job.
#[test]
fn every_metric_queried_is_exported() {
    let exported = exported_series();
    let mut queries: Vec<(String, String)> = alert_rules()
        .iter()
        .map(|rule| {
            (
                format!("alert {}", rule["alert"]),
                rule["expr"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    queries.extend(dashboard_queries(&dashboard()));
    assert!(queries.len() > 20, "{queries:?}");
    let mut unknown = Vec::new();
    let mut unselected = Vec::new();
    for (place, expr) in &queries {
        let found = selectors(expr);
        assert!(!found.is_empty(), "{place}: no metric in {expr:?}");
        for selector in found {
            if !exported.contains(&selector.metric)
                && !SCRAPE_SERIES.contains(&selector.metric.as_str())
            {
                unknown.push(format!("{place}: {}", selector.metric));
            }
            if !selector.matchers.contains(JOB) {
                unselected.push(format!(
                    "{place}: {}{{{}}}",
                    selector.metric, selector.matchers
                ));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics that podprobe does not export (MetricSet::new(..).served.encode()):\n{}\nexported: {exported:?}",
        unknown.join("\n")
    );
    assert!(
        unselected.is_empty(),
        "selectors without {JOB} (the job of the chart's PodMonitor):\n{}",
        unselected.join("\n")
    );
}

/// The job the alerts and dashboard select is the one the PodMonitor sets.
#[test]
fn the_pod_monitor_sets_the_job_and_node_labels() {
    let text = std::fs::read_to_string(repo().join("deploy/monitoring/podmonitor.yaml")).unwrap();
    let monitor = yaml_docs(&text).remove(0);
    let relabelings = &monitor["spec"]["podMetricsEndpoints"][0]["relabelings"];
    let sets = |label: &str| {
        relabelings
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["targetLabel"] == label)
            .cloned()
            .unwrap_or_else(|| panic!("the PodMonitor does not set {label}: {relabelings}"))
    };
    assert_eq!(
        format!(r#"job="{}""#, sets("job")["replacement"].as_str().unwrap()),
        JOB
    );
    assert_eq!(
        sets("node")["sourceLabels"],
        serde_json::json!(["__meta_kubernetes_pod_node_name"])
    );
}

#[test]
fn every_alert_has_severity_summary_description_and_a_runbook() {
    let runbook =
        std::fs::read_to_string(repo().join("docs/monitoring.md")).expect("docs/monitoring.md");
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|heading| {
            heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let rules = alert_rules();
    let names: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for expected in [
        "PodprobeDown",
        "PodprobeWatchStale",
        "PodprobeStatusPatchesFailing",
        "PodprobeProbeErrorsRising",
        "PodprobeEventsDropped",
    ] {
        assert!(names.contains(expected), "no alert {expected} in {names:?}");
    }
    for rule in &rules {
        let name = rule["alert"].as_str().expect("only alerting rules");
        assert!(rule["for"].is_string(), "{name}: no `for`");
        assert!(
            ["critical", "warning", "info"]
                .contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: severity {}",
            rule["labels"]["severity"]
        );
        for key in ["summary", "description"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name}: no {key}"
            );
        }
        let link = rule["annotations"]["runbook"].as_str().unwrap_or_default();
        let anchor = link
            .strip_prefix("docs/monitoring.md#")
            .unwrap_or_else(|| panic!("{name}: runbook {link:?} is not docs/monitoring.md#..."));
        assert_eq!(anchor, name.to_lowercase(), "{name}: runbook anchor");
        assert!(
            anchors.contains(anchor),
            "{name}: docs/monitoring.md has no `### {name}` section ({anchors:?})"
        );
    }
}

#[test]
fn dashboard_panels_each_have_a_query() {
    let dashboard = dashboard();
    let panels = panels(&dashboard);
    assert!(panels.len() >= 12, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    for panel in &dashboard["panels"].as_array().expect("panels").clone() {
        assert!(
            ids.insert(panel["id"].to_string()),
            "panel id {} twice",
            panel["id"]
        );
    }
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or("?");
        assert!(
            !title.is_empty() && title != "?",
            "a panel without a title: {panel}"
        );
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for target in targets {
            assert!(
                target["expr"]
                    .as_str()
                    .is_some_and(|e| !e.trim().is_empty()),
                "panel {title:?}: a target without an expression: {target}"
            );
        }
        assert!(
            panel["gridPos"]["w"].as_u64().is_some(),
            "panel {title:?}: no gridPos"
        );
    }
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for metric in [
        "prober_probe_total",
        "prober_probe_duration_seconds_bucket",
        "podprobe_status_patches_total",
        "podprobe_workers",
        "podprobe_pods_tracked",
        "podprobe_pod_watch_idle_seconds",
        "podprobe_exec_in_flight",
        "podprobe_network_probes_in_flight",
        "podprobe_events_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "podprobe_build_info",
    ] {
        assert!(
            dashboard_queries(&dashboard)
                .iter()
                .any(|(_, expr)| selectors(expr).iter().any(|s| s.metric == metric)),
            "no panel shows {metric} (panels: {titles:?})"
        );
    }
}
