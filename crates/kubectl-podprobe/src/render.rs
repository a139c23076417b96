//! The table of `kubectl podprobe status` (PS3): one row per container and
//! probe, then each probe's last output. A probe's output is the pod's
//! (hostile, maybe): control characters are shown escaped, never sent to
//! the terminal. A caller who may not read the pod's logs gets no outputs
//! from podprobe (`outputShown: false`); the table then says so in their
//! place.

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;
use podprobe_core::prober::probe_ledger::RunResult;
use podprobe_core::prober::probe_ledger::api_types::PodProbes;

/// Most characters of an output's first line in the table.
const OUTPUT_COLUMN_CHARS: usize = 48;

/// What the table says in place of outputs podprobe did not show.
pub const OUTPUT_HIDDEN: &str = "output hidden: you may not get pods/log of this pod";

/// The table of `object` as seen at `now`.
pub fn status_table(object: &PodProbes, now: Timestamp) -> String {
    let shown = object.output_shown;
    let mut header = vec!["CONTAINER", "PROBE", "RESULT", "RAN", "COUNT", "NEXT"];
    if shown {
        header.push("OUTPUT");
    }
    let rows: Vec<Vec<String>> = object
        .probes
        .iter()
        .map(|p| {
            let mut row = vec![
                p.container.clone(),
                p.probe.as_str().to_lowercase(),
                result_word(p.result).to_string(),
                format!("{} ago", seconds(now, p.ran_at.0)),
                format!("{}/{}", p.consecutive, p.threshold),
                if p.next_run.0 > now {
                    format!("in {}", seconds(p.next_run.0, now))
                } else {
                    "due".to_string()
                },
            ];
            if shown {
                row.push(first_line(&p.output));
            }
            row
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let meta = &object.metadata;
    let mut text = format!(
        "Pod {}/{} (uid {}) on node {}\n",
        meta.namespace,
        meta.name,
        meta.uid,
        escape(&object.node)
    );
    let line = |text: &mut String, cells: &[&str]| {
        let last = cells.len() - 1;
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                let _ = writeln!(text, "{cell}");
            } else {
                let _ = write!(text, "{cell:<width$}   ", width = widths[i]);
            }
        }
    };
    line(&mut text, &header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut text, &cells);
    }
    if !shown {
        if !object.probes.is_empty() {
            let _ = writeln!(text, "\n{OUTPUT_HIDDEN}");
        }
        return text;
    }
    for p in object.probes.iter().filter(|p| !p.output.is_empty()) {
        let truncated = if p.output_truncated {
            ", truncated"
        } else {
            ""
        };
        let _ = writeln!(
            text,
            "\nLast output of the {} probe of {} ({} bytes{truncated}):",
            p.probe.as_str().to_lowercase(),
            p.container,
            p.output.len()
        );
        for output_line in p.output.lines() {
            let _ = writeln!(text, "  {}", escape(output_line));
        }
    }
    text
}

fn result_word(result: RunResult) -> &'static str {
    match result {
        RunResult::Success => "success",
        RunResult::Failure => "failure",
        RunResult::Error => "error",
    }
}

/// Whole seconds from `earlier` to `later`, as `12s`, `3m4s` or `2h5m`.
fn seconds(later: Timestamp, earlier: Timestamp) -> String {
    let total = (later.as_second() - earlier.as_second()).max(0);
    match total {
        0..60 => format!("{total}s"),
        60..3600 => format!("{}m{}s", total / 60, total % 60),
        _ => format!("{}h{}m", total / 3600, total % 3600 / 60),
    }
}

/// The output's first line, escaped and cut to the column.
fn first_line(output: &str) -> String {
    let line = escape(output.lines().next().unwrap_or_default());
    if line.chars().count() <= OUTPUT_COLUMN_CHARS {
        return line;
    }
    let cut: String = line.chars().take(OUTPUT_COLUMN_CHARS - 3).collect();
    format!("{cut}...")
}

/// `text` with control characters escaped (`\u{1b}`), so that a pod's
/// output cannot drive the terminal.
pub fn escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use podprobe_core::prober::probe_ledger::{PodReport, ProbeReport};
    use podprobe_core::spec::ProbeKind;

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn object(output_shown: bool) -> PodProbes {
        let report = PodReport {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: "u1".into(),
            probes: vec![
                ProbeReport {
                    container: "app".into(),
                    probe: ProbeKind::Readiness,
                    result: RunResult::Failure,
                    ran_at: Time(at(0)),
                    duration_ms: 12,
                    consecutive: 2,
                    threshold: 3,
                    next_run: Time(at(10)),
                    output: "HTTP probe failed with statuscode: 503\n\u{1b}[2Jboom".into(),
                    output_truncated: false,
                },
                ProbeReport {
                    container: "app".into(),
                    probe: ProbeKind::Liveness,
                    result: RunResult::Success,
                    ran_at: Time(at(-200)),
                    duration_ms: 3,
                    consecutive: 20,
                    threshold: 1,
                    next_run: Time(at(-190)),
                    output: String::new(),
                    output_truncated: false,
                },
            ],
        };
        PodProbes::new(report, "node-a", output_shown)
    }

    #[test]
    fn ps3_the_table_has_a_row_per_probe_then_each_output() {
        let table = status_table(&object(true), at(4));
        assert_eq!(
            table,
            "Pod shop/web-0 (uid u1) on node node-a\n\
             CONTAINER   PROBE       RESULT    RAN         COUNT   NEXT    OUTPUT\n\
             app         readiness   failure   4s ago      2/3     in 6s   HTTP probe failed with statuscode: 503\n\
             app         liveness    success   3m24s ago   20/1    due     \n\
             \n\
             Last output of the readiness probe of app (47 bytes):\n  \
             HTTP probe failed with statuscode: 503\n  \
             \\u{1b}[2Jboom\n"
        );
    }

    #[test]
    fn ps3_hidden_outputs_are_one_line_in_their_place() {
        let table = status_table(&object(false), at(4));
        assert_eq!(
            table,
            "Pod shop/web-0 (uid u1) on node node-a\n\
             CONTAINER   PROBE       RESULT    RAN         COUNT   NEXT\n\
             app         readiness   failure   4s ago      2/3     in 6s\n\
             app         liveness    success   3m24s ago   20/1    due\n\
             \n\
             output hidden: you may not get pods/log of this pod\n"
        );
        let mut none = object(false);
        none.probes.clear();
        assert!(!status_table(&none, at(4)).contains("output hidden"));
    }
}
