//! Why a pod is not Ready, in words, for `kubectl podprobe why` (PS4): from
//! the pod as the API server has it and podprobe's ledger of its probes.
//! Pure: the plugin fetches both.
//!
//! The reasons, in the order a reader acts on them: the pod is over; a
//! container does not run (the kubelet's part: a waiting or terminated
//! container has no probe to blame); a startup probe has not passed; a
//! readiness probe fails or has not passed often enough; a readiness gate
//! that is not podprobe's is not True. When none applies, the kubelet's
//! own Ready condition is quoted.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use serde::{Deserialize, Serialize};

use crate::prober::probe_ledger::{PodReport, ProbeReport, RunResult};
use crate::spec::ProbeKind;
use crate::status::gate::{self, READY_CONDITION};
use crate::util::pod::{all_container_statuses, pod_name, pod_namespace};

/// Most bytes of a probe's output quoted in a reason.
const QUOTED_OUTPUT_BYTES: usize = 200;

/// Why a pod is (not) Ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub namespace: String,
    pub name: String,
    pub ready: bool,
    /// One sentence per reason, most pressing first; when ready, empty or
    /// why it is Ready although a readiness probe fails (WG3).
    pub reasons: Vec<String>,
}

impl Explanation {
    /// The reasons as one paragraph.
    pub fn paragraph(&self) -> String {
        let subject = format!("Pod {}/{}", self.namespace, self.name);
        let mut text = if self.ready {
            format!("{subject} is Ready.")
        } else {
            format!("{subject} is not Ready.")
        };
        for reason in &self.reasons {
            text.push(' ');
            text.push_str(reason);
        }
        text
    }
}

/// Why `pod` is or is not Ready, given podprobe's `report` of its probes
/// (`None`: podprobe has run none of them).
pub fn explain(pod: &Pod, report: Option<&PodReport>) -> Explanation {
    let ready = condition(pod, "Ready").is_some_and(|c| c.status == "True");
    let reasons = if ready {
        held_by_floor(pod).into_iter().collect()
    } else {
        not_ready_reasons(pod, report)
    };
    Explanation {
        namespace: pod_namespace(pod).to_string(),
        name: pod_name(pod).to_string(),
        ready,
        reasons,
    }
}

fn not_ready_reasons(pod: &Pod, report: Option<&PodReport>) -> Vec<String> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if let Some(phase @ ("Succeeded" | "Failed")) = phase {
        return vec![format!(
            "It has terminated (phase {phase}); its containers do not run again."
        )];
    }
    let probes = report.map_or(&[][..], |r| r.probes.as_slice());
    // A probe's ledger entry belongs to this pod only if the UIDs match.
    let probes = match (report, pod.metadata.uid.as_deref()) {
        (Some(r), Some(uid)) if r.uid != uid => &[][..],
        _ => probes,
    };
    let mut reasons = Vec::new();
    for status in all_container_statuses(pod) {
        if let Some(reason) = not_running(status) {
            reasons.push(reason);
            continue;
        }
        let probe = |kind| {
            probes
                .iter()
                .find(|p| p.container == status.name && p.probe == kind)
        };
        if let (Some(false), Some(startup)) = (status.started, probe(ProbeKind::Startup)) {
            reasons.push(probe_reason(startup));
            continue;
        }
        // Gate mode: the container's `ready` is the kubelet's view, which
        // podprobe's readiness probe does not set; its last run says more.
        match probe(ProbeKind::Readiness) {
            Some(readiness) if !passes(readiness) => reasons.push(probe_reason(readiness)),
            Some(_) => {}
            None if !status.ready => reasons.push(format!(
                "Container {:?} is running but not ready, and podprobe has no readiness probe result for it: the kubelet's own prober or status decides.",
                status.name
            )),
            None => {}
        }
    }
    reasons.extend(other_gates(pod));
    if reasons.is_empty() {
        reasons.push(match condition(pod, "Ready") {
            Some(c) => format!(
                "The kubelet reports Ready={} ({}{}); podprobe's probes do not explain it.",
                c.status,
                c.reason.as_deref().unwrap_or("no reason"),
                c.message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            None => "The pod has no Ready condition yet: the kubelet has not reported its status."
                .to_string(),
        });
    }
    reasons
}

/// WG3: podprobe's gate is held True by the workload's readiness floor,
/// in its condition's words.
fn held_by_floor(pod: &Pod) -> Option<String> {
    let gate = condition(pod, READY_CONDITION)?;
    (gate.reason.as_deref() == Some(gate::reason::READINESS_FLOOR)).then(|| {
        format!(
            "Its readiness probe fails, but podprobe holds {READY_CONDITION} True: {}.",
            quote(gate.message.as_deref().unwrap_or_default())
        )
    })
}

/// The kubelet's part: a container that is not running has no probe to
/// blame.
fn not_running(status: &ContainerStatus) -> Option<String> {
    let state = status.state.as_ref()?;
    let name = &status.name;
    if let Some(waiting) = &state.waiting {
        let reason = waiting.reason.as_deref().unwrap_or("no reason");
        let message = waiting
            .message
            .as_deref()
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {}", quote(m)))
            .unwrap_or_default();
        return Some(format!(
            "Container {name:?} is waiting ({reason}{message}), which is the kubelet's part, not a probe's."
        ));
    }
    if let Some(terminated) = &state.terminated {
        let reason = terminated.reason.as_deref().unwrap_or("no reason");
        return Some(format!(
            "Container {name:?} has terminated ({reason}, exit code {}), which is the kubelet's part, not a probe's.",
            terminated.exit_code
        ));
    }
    None
}

/// Whether a probe's last run holds nobody back: a success at or past its
/// threshold.
fn passes(probe: &ProbeReport) -> bool {
    probe.result == RunResult::Success && probe.consecutive >= i64::from(probe.threshold)
}

/// One probe's part, from its last run.
fn probe_reason(probe: &ProbeReport) -> String {
    let subject = format!(
        "The {} probe of container {:?}",
        kind_word(probe.probe),
        probe.container
    );
    let saw = if probe.output.is_empty() {
        String::new()
    } else {
        format!(" It saw: {}", quote(&probe.output))
    };
    match probe.result {
        RunResult::Failure => {
            let reached = if probe.consecutive >= i64::from(probe.threshold) {
                "reached"
            } else {
                "not reached yet"
            };
            format!(
                "{subject} failed its last {} run(s) (failureThreshold {}, {reached}).{saw}",
                probe.consecutive, probe.threshold
            )
        }
        RunResult::Error => format!(
            "{subject} could not run (an error, which does not count towards failureThreshold {}).{saw}",
            probe.threshold
        ),
        RunResult::Success => format!(
            "{subject} succeeded {} time(s) in a row of the {} it needs (successThreshold), or its result is not written yet.{saw}",
            probe.consecutive, probe.threshold
        ),
    }
}

/// Readiness gates that are not podprobe's and are not True: another
/// controller's part.
fn other_gates(pod: &Pod) -> Vec<String> {
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map_or(&[][..], Vec::as_slice);
    gates
        .iter()
        .filter(|g| g.condition_type != READY_CONDITION)
        .filter(|g| condition(pod, &g.condition_type).is_none_or(|c| c.status != "True"))
        .map(|g| {
            format!(
                "Readiness gate {:?} is not True; another controller sets it, not podprobe.",
                g.condition_type
            )
        })
        .collect()
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn kind_word(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Liveness => "liveness",
        ProbeKind::Readiness => "readiness",
        ProbeKind::Startup => "startup",
    }
}

/// `text` in quotes, on one line, cut to [`QUOTED_OUTPUT_BYTES`].
fn quote(text: &str) -> String {
    let one_line: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut end = one_line.len().min(QUOTED_OUTPUT_BYTES);
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    let ellipsis = if end < one_line.len() { "..." } else { "" };
    format!("{:?}", format!("{}{ellipsis}", &one_line[..end]))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStateWaiting, PodReadinessGate};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::testing::{container, epoch, pod, pod_status, running, terminated, waiting};

    fn with_status(statuses: Vec<ContainerStatus>, ready: &str) -> Pod {
        let mut pod = pod("u1", vec![container("app")], vec![]);
        let mut status = pod_status(statuses, vec![]);
        status.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: ready.into(),
            reason: Some("ContainersNotReady".into()),
            message: Some("containers with unready status: [app]".into()),
            ..PodCondition::default()
        }]);
        pod.status = Some(status);
        pod
    }

    fn report(probes: Vec<ProbeReport>) -> PodReport {
        PodReport {
            namespace: "default".into(),
            name: "pod-u1".into(),
            uid: "u1".into(),
            probes,
        }
    }

    fn probe(kind: ProbeKind, result: RunResult, consecutive: i64, output: &str) -> ProbeReport {
        ProbeReport {
            container: "app".into(),
            probe: kind,
            result,
            ran_at: Time(epoch()),
            duration_ms: 3,
            consecutive,
            threshold: 3,
            next_run: Time(epoch()),
            output: output.into(),
            output_truncated: false,
        }
    }

    #[test]
    fn ps4_a_ready_pod_needs_no_reasons() {
        let pod = with_status(vec![running("app", "c://1", epoch(), Some(true))], "True");
        let why = explain(&pod, None);
        assert!(why.ready);
        assert_eq!(why.paragraph(), "Pod default/pod-u1 is Ready.");
    }

    #[test]
    fn wg3_a_pod_held_ready_by_the_floor_says_so() {
        let mut pod = with_status(vec![running("app", "c://1", epoch(), Some(true))], "True");
        let conditions = pod.status.as_mut().and_then(|s| s.conditions.as_mut());
        conditions.unwrap().push(PodCondition {
            type_: READY_CONDITION.into(),
            status: "True".into(),
            reason: Some(gate::reason::READINESS_FLOOR.into()),
            message: Some("held Ready by the readiness floor: 1 of the workload's pods are Ready without this one, minReady is 2; containers with unready status: [app]".into()),
            ..PodCondition::default()
        });
        let why = explain(&pod, None);
        assert!(why.ready);
        assert_eq!(
            why.paragraph(),
            "Pod default/pod-u1 is Ready. Its readiness probe fails, but podprobe holds podprobe.io/ready True: \"held Ready by the readiness floor: 1 of the workload's pods are Ready without this one, minReady is 2; containers with unready status: [app]\"."
        );
    }

    #[test]
    fn ps4_a_failing_readiness_probe_is_named_with_its_threshold_and_output() {
        let pod = with_status(vec![running("app", "c://1", epoch(), Some(true))], "False");
        let failing = probe(
            ProbeKind::Readiness,
            RunResult::Failure,
            4,
            "HTTP probe failed with statuscode: 503\n",
        );
        let why = explain(&pod, Some(&report(vec![failing])));
        assert_eq!(
            why.paragraph(),
            "Pod default/pod-u1 is not Ready. The readiness probe of container \"app\" failed its last 4 run(s) (failureThreshold 3, reached). It saw: \"HTTP probe failed with statuscode: 503\""
        );
        let errored = probe(
            ProbeKind::Readiness,
            RunResult::Error,
            0,
            "dial tcp: connection refused",
        );
        let why = explain(&pod, Some(&report(vec![errored])));
        assert!(why.reasons[0].contains("could not run"), "{why:?}");
    }

    /// Gate mode: the kubelet calls the container ready (it has no
    /// readiness probe of its own); podprobe's failing one is the reason.
    #[test]
    fn ps4_a_failing_readiness_probe_counts_when_the_kubelet_calls_the_container_ready() {
        let mut kubelet_ready = running("app", "c://1", epoch(), Some(true));
        kubelet_ready.ready = true;
        let pod = with_status(vec![kubelet_ready], "False");
        let failing = probe(ProbeKind::Readiness, RunResult::Failure, 4, "503");
        let why = explain(&pod, Some(&report(vec![failing])));
        assert!(
            why.reasons[0]
                .starts_with("The readiness probe of container \"app\" failed its last 4 run(s)"),
            "{why:?}"
        );
        // A passing one is no reason: the kubelet's condition is quoted.
        let passing = probe(ProbeKind::Readiness, RunResult::Success, 3, "");
        let why = explain(&pod, Some(&report(vec![passing])));
        assert!(
            why.reasons[0].starts_with("The kubelet reports Ready=False"),
            "{why:?}"
        );
    }

    #[test]
    fn ps4_an_unstarted_container_is_its_startup_probes_part() {
        let pod = with_status(vec![running("app", "c://1", epoch(), Some(false))], "False");
        let startup = probe(ProbeKind::Startup, RunResult::Failure, 1, "");
        let readiness = probe(ProbeKind::Readiness, RunResult::Failure, 9, "");
        let why = explain(&pod, Some(&report(vec![readiness, startup])));
        assert_eq!(why.reasons.len(), 1);
        assert!(why.reasons[0].starts_with("The startup probe of container \"app\" failed its last 1 run(s) (failureThreshold 3, not reached yet)."), "{why:?}");
    }

    #[test]
    fn ps4_the_kubelets_part_is_said_to_be_the_kubelets() {
        let mut crashing = waiting("app", "c://1");
        crashing.state.as_mut().unwrap().waiting = Some(ContainerStateWaiting {
            reason: Some("CrashLoopBackOff".into()),
            message: Some("back-off 10s restarting failed container".into()),
        });
        let pod = with_status(vec![crashing], "False");
        let failing = probe(ProbeKind::Readiness, RunResult::Failure, 3, "");
        let why = explain(&pod, Some(&report(vec![failing])));
        assert_eq!(
            why.reasons,
            [
                "Container \"app\" is waiting (CrashLoopBackOff: \"back-off 10s restarting failed container\"), which is the kubelet's part, not a probe's."
            ]
        );
        let pod = with_status(vec![terminated("app", "c://1", 137)], "False");
        assert!(explain(&pod, None).reasons[0].contains("exit code 137"));
        // Nothing podprobe knows explains it: the kubelet's condition is
        // quoted.
        let mut ready_container = running("app", "c://1", epoch(), Some(true));
        ready_container.ready = true;
        let pod = with_status(vec![ready_container], "False");
        assert_eq!(
            explain(&pod, None).reasons,
            [
                "The kubelet reports Ready=False (ContainersNotReady: containers with unready status: [app]); podprobe's probes do not explain it."
            ]
        );
    }

    #[test]
    fn ps4_another_controllers_gate_and_a_stale_report_are_told_apart() {
        let mut ready_container = running("app", "c://1", epoch(), Some(true));
        ready_container.ready = true;
        let mut pod = with_status(vec![ready_container], "False");
        pod.spec.as_mut().unwrap().readiness_gates = Some(vec![
            PodReadinessGate {
                condition_type: READY_CONDITION.into(),
            },
            PodReadinessGate {
                condition_type: "example.com/lb".into(),
            },
        ]);
        let why = explain(&pod, None);
        assert_eq!(
            why.reasons,
            [
                "Readiness gate \"example.com/lb\" is not True; another controller sets it, not podprobe."
            ]
        );
        // A report of an older pod of the same name is not this pod's.
        let pod = with_status(vec![running("app", "c://1", epoch(), Some(true))], "False");
        let mut stale = report(vec![probe(ProbeKind::Readiness, RunResult::Failure, 3, "")]);
        stale.uid = "u0".into();
        assert!(explain(&pod, Some(&stale)).reasons[0].contains("has no readiness probe result"));
    }

    #[test]
    fn ps4_outputs_are_quoted_on_one_line_and_cut() {
        let long = format!("line one\nline two {}", "x".repeat(500));
        let quoted = quote(&long);
        assert!(quoted.starts_with("\"line one line two"));
        assert!(quoted.ends_with("...\""));
        assert!(quoted.len() < QUOTED_OUTPUT_BYTES + 10);
    }
}
