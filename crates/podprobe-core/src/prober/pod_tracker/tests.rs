//! The tracker's rules, on its step function: no runtime, no workers, a
//! prober whose results each test sets.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::probe_reading::{authority_probes, gate_probes};
use super::*;
use crate::prober::manager::ProbeStateView;
use crate::prober::results::{CachedResult, ResultUpdate};
use crate::spec::probe_spec::budget::{BudgetLimits, PodBudget};
use crate::spec::probe_spec::{AtoiFailure, HttpProtocol, PortError, UnknownProbeField};
use crate::spec::{Handler, ProbeKind};
use crate::status::{PROBES_ANNOTATION, pod_probes};
use crate::testing::{FakeView, TRACKED_ID as ID, first_container_status, tracked_pod as pod};

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).unwrap())
}

/// A prober just restarted: a readiness worker, nothing cached yet (D5).
struct JustRestarted;

impl ProbeStateView for JustRestarted {
    fn cached(&self, _: ProbeKind, _: &str) -> Option<CachedResult> {
        None
    }
    fn has_worker(&self, _: &str, kind: ProbeKind) -> bool {
        kind == ProbeKind::Readiness
    }
}

/// podprobe's verdict about `app` right after a restart at `prober_start`.
fn verdict_after_restart(mode: Mode, pod: &Pod, prober_start: i64) -> ContainerProbeView {
    let probes = match mode {
        Mode::Gate => {
            let mut budget = PodBudget::default();
            let annotated = pod_probes(pod, &mut budget).unwrap();
            gate_probes(pod, annotated, budget)
        }
        Mode::Authority => authority_probes(pod, &[], PodBudget::default()).0,
    };
    assert_eq!(probes.manager.len(), 1);
    let mut status = pod.status.clone().unwrap();
    rebuild(&mut status, &takeover::seed_started(pod, mode));
    let inputs = StatusInputs {
        pod,
        probes: &probes.manager,
        prober_start: at(prober_start).0,
        pod_ready: takeover::own_condition_is_true(pod, mode),
    };
    set_started_and_ready(&inputs, &JustRestarted, &mut status);
    ContainerProbeView::from_status(&status).remove(0)
}

const MODES: [Mode; 2] = [Mode::Gate, Mode::Authority];

#[test]
fn s4_restart_keeps_a_ready_container_ready() {
    for mode in MODES {
        let view = verdict_after_restart(mode, &pod(mode, 100, Some(("True", 105))), 200);
        assert!(view.started && view.ready, "{mode:?}: {view:?}");
    }
}

#[test]
fn s4_restart_keeps_a_not_ready_container_not_ready() {
    for mode in MODES {
        let view = verdict_after_restart(mode, &pod(mode, 100, Some(("False", 105))), 200);
        assert!(!view.ready, "{mode:?}: {view:?}");
    }
}

#[test]
fn restart_keeps_ready_a_container_started_just_before_podprobe() {
    // Within RESTART_GRACE_PERIOD of the prober's start, so the kubelet's
    // rule alone would reset it; podprobe's True condition vouches for it.
    for mode in MODES {
        let view = verdict_after_restart(mode, &pod(mode, 195, Some(("True", 196))), 200);
        assert!(view.started && view.ready, "{mode:?}: {view:?}");
    }
}

#[test]
fn restart_resets_a_container_restarted_after_the_condition_turned_true() {
    // Started after the condition's last transition and within the grace
    // period: no podprobe saw it start, so it starts over.
    for mode in MODES {
        let mut pod = pod(mode, 197, Some(("True", 196)));
        // A new instance the node agent reported: podprobe never wrote it.
        let app = first_container_status(&mut pod);
        app.ready = false;
        app.started = Some(false);
        let view = verdict_after_restart(mode, &pod, 200);
        assert!(!view.ready, "{mode:?}: {view:?}");
    }
}

#[test]
fn s6_restart_does_not_pass_readiness_to_a_replacement_container() {
    // kubernetes #141473/#141487: the condition turned True at 105 about
    // the instance then running; a replacement started at 150 while no
    // podprobe watched (so, by start time, it predates podprobe's start
    // at 200) and the condition was never written since. It must not
    // inherit the old instance's readiness (nor `started`, #141342).
    for mode in MODES {
        let mut pod = pod(mode, 150, Some(("True", 105)));
        let app = first_container_status(&mut pod);
        app.container_id = Some("containerd://replacement".into());
        app.ready = false;
        app.started = Some(false);
        let view = verdict_after_restart(mode, &pod, 200);
        assert!(!view.ready, "{mode:?}: {view:?}");
    }
}

#[test]
fn authority_restart_keeps_a_ready_container_of_a_not_ready_pod_ready() {
    // Another container keeps ContainersReady False; `app` was reported
    // ready and started just before podprobe restarted: the kubelet's S4
    // would reset it, podprobe's own verdict about the instance keeps it.
    let mut pod = pod(Mode::Authority, 195, Some(("False", 190)));
    let app = first_container_status(&mut pod);
    app.ready = true;
    app.started = Some(true);
    let view = verdict_after_restart(Mode::Authority, &pod, 200);
    assert!(view.started && view.ready, "{view:?}");
}

#[test]
fn rebuild_drops_the_previous_ready_and_started() {
    let mut status = pod(Mode::Gate, 100, Some(("True", 105))).status.unwrap();
    rebuild(&mut status, &HashMap::new());
    let app = &status.container_statuses.unwrap()[0];
    assert_eq!((app.ready, app.started), (false, None));
}

#[test]
fn authority_probes_come_from_the_spec() {
    let mut pod = pod(Mode::Authority, 100, None);
    pod.metadata.annotations = None;
    let (probes, errors, _) = authority_probes(&pod, &[], PodBudget::default());
    assert!(errors.is_empty(), "{errors:?}");
    assert!(probes.manager.get("app", ProbeKind::Readiness).is_some());
    assert_eq!(probes.owned, Owned::Authority);
}

#[test]
fn v10_authority_probe_with_a_field_podprobe_lacks_is_reported_and_errors_every_run() {
    let mut pod = pod(Mode::Authority, 100, None);
    let app = &mut pod.spec.as_mut().unwrap().containers[0];
    // H23: an h2c probe of a 1.37 spec runs as such.
    app.liveness_probe = Some(
        serde_json::from_value(serde_json::json!({"httpGet": {"port": 80, "protocol": "HTTP2"}}))
            .unwrap(),
    );
    let unknown = [UnknownProbeField {
        container: "app".into(),
        kind: ProbeKind::Readiness,
        field: "readinessProbe.exec.fromTheFuture".into(),
    }];
    let (probes, errors, _) = authority_probes(&pod, &unknown, PodBudget::default());
    let reported: Vec<String> = errors
        .iter()
        .map(|e| format!("{} {e}", e.container))
        .collect();
    assert_eq!(
        reported,
        [
            "app readinessProbe.exec.fromTheFuture: unknown field: not in the Kubernetes 1.37 API that podprobe implements"
        ]
    );
    let spec = probes.manager.get("app", ProbeKind::Readiness).unwrap();
    assert!(
        matches!(spec.handler, Handler::Unsupported(_)),
        "{:?}",
        spec.handler
    );
    let spec = probes.manager.get("app", ProbeKind::Liveness).unwrap();
    assert!(
        matches!(&spec.handler, Handler::HttpGet(a) if a.protocol == HttpProtocol::Http2),
        "{:?}",
        spec.handler
    );
    let (probes, errors, _) = authority_probes(&pod, &[], PodBudget::default());
    assert!(errors.is_empty(), "{errors:?}");
    assert!(matches!(
        probes
            .manager
            .get("app", ProbeKind::Readiness)
            .unwrap()
            .handler,
        Handler::Exec(_)
    ));
}

#[test]
fn authority_probe_over_the_pods_budget_is_reported_and_errors_every_run() {
    let mut pod = pod(Mode::Authority, 100, None);
    let app = &mut pod.spec.as_mut().unwrap().containers[0];
    app.liveness_probe = Some(
        serde_json::from_value(serde_json::json!({"exec": {"command": ["x".repeat(600)]}}))
            .unwrap(),
    );
    let limits = BudgetLimits {
        command_bytes: 1000,
        ..BudgetLimits::default()
    };
    let (probes, errors, over) = authority_probes(&pod, &[], PodBudget::new(limits));
    assert!(errors.is_empty(), "{errors:?}");
    // Readiness (an exec of a few bytes) comes after liveness in the
    // kubelet's order and still fits; nothing else is charged.
    let refused: Vec<_> = over
        .iter()
        .map(|o| (o.container.as_str(), o.kind))
        .collect();
    assert_eq!(refused, [], "600 + the readiness command fit 1000 bytes");
    let limits = BudgetLimits {
        command_bytes: 500,
        ..BudgetLimits::default()
    };
    let (probes_over, _, over) = authority_probes(&pod, &[], PodBudget::new(limits));
    let refused: Vec<_> = over
        .iter()
        .map(|o| (o.container.as_str(), o.kind))
        .collect();
    assert_eq!(refused, [("app", ProbeKind::Liveness)]);
    assert!(matches!(
        probes_over
            .manager
            .get("app", ProbeKind::Liveness)
            .unwrap()
            .handler,
        Handler::Unsupported(_)
    ));
    assert!(matches!(
        probes
            .manager
            .get("app", ProbeKind::Liveness)
            .unwrap()
            .handler,
        Handler::Exec(_)
    ));
}

#[test]
fn authority_probe_with_an_undeclared_port_name_runs_and_errors() {
    let mut pod = pod(Mode::Authority, 100, None);
    let app = &mut pod.spec.as_mut().unwrap().containers[0];
    app.liveness_probe =
        Some(serde_json::from_value(serde_json::json!({"httpGet": {"port": "web"}})).unwrap());
    let (probes, errors, _) = authority_probes(&pod, &[], PodBudget::default());
    assert!(errors.is_empty(), "{errors:?}");
    let liveness = probes.manager.get("app", ProbeKind::Liveness).unwrap();
    assert_eq!(
        liveness.handler,
        Handler::Unresolvable(PortError::NotANumber {
            port: "web".into(),
            reason: AtoiFailure::InvalidSyntax
        })
    );
    assert_eq!(
        (liveness.period_seconds, liveness.failure_threshold),
        (10, 3)
    );
}

/// The prober as the tracker reads it: the results and workers a test
/// sets, started at the epoch.
#[derive(Default)]
struct Prober {
    view: FakeView,
}

struct Seen<'a>(&'a FakeView);

impl ProbeStateView for Seen<'_> {
    fn cached(&self, kind: ProbeKind, container_id: &str) -> Option<CachedResult> {
        self.0.cached(kind, container_id)
    }

    fn has_worker(&self, container: &str, kind: ProbeKind) -> bool {
        self.0.has_worker(container, kind)
    }
}

impl ProbeStates for Prober {
    fn view<'a>(&'a self, _: &'a str) -> impl ProbeStateView + 'a {
        Seen(&self.view)
    }

    fn note(&self, _: ProbeKind, _: &str) -> Option<Arc<str>> {
        None
    }

    fn started_wall(&self) -> Timestamp {
        at(0).0
    }
}

fn tracker(mode: Mode) -> PodTracker {
    let config = TrackerConfig {
        mode,
        annotation_rules: Some(AnnotationRules {
            destinations: Destinations::default(),
            pod_network: false,
        }),
        budget: BudgetLimits::default(),
        node_budget: NodeBudget::new(),
        max_liveness_pause: crate::prober::liveness_pause::DEFAULT_MAX_PAUSE,
        marker_keys: MarkerKeys::new(["role".to_string()]),
        timeout_caps: TimeoutCaps {
            exec: Duration::from_secs(60),
            network: Duration::from_secs(60),
        },
    };
    PodTracker::new(config, Box::new(|| 0.5))
}

/// A clock for one test: `second` seconds after its start, on both clocks.
struct Clock(Instant);

impl Clock {
    fn at(&self, second: u64) -> Now {
        Now {
            at: self.0 + Duration::from_secs(second),
            wall: at(200 + i64::try_from(second).unwrap()).0,
        }
    }
}

fn names(effects: &[Effect]) -> Vec<&'static str> {
    effects
        .iter()
        .map(|effect| match effect {
            Effect::ReadAnnotation { .. } => "ReadAnnotation",
            Effect::Workers(WorkerCommand::Start { .. }) => "StartWorkers",
            Effect::Workers(WorkerCommand::Stop { .. }) => "StopWorkers",
            Effect::Workers(WorkerCommand::StopLivenessAndStartup(_)) => "StopLivenessAndStartup",
            Effect::Workers(WorkerCommand::Forget(_)) => "Forget",
            Effect::Workers(WorkerCommand::StopExcept(_)) => "StopWorkersExcept",
            Effect::ShowStarted { .. } => "ShowStarted",
            Effect::Workers(WorkerCommand::NudgeReadiness { .. }) => "NudgeReadiness",
            Effect::Patch(_) => "Patch",
            Effect::WriteMarkers { .. } => "WriteMarkers",
            Effect::Kill { .. } => "Kill",
            Effect::Record(_) => "Record",
            Effect::BudgetRefused(_) => "BudgetRefused",
            Effect::PausedPods(_) => "PausedPods",
        })
        .collect()
}

fn applied(pod: &Pod) -> Input {
    Input::PodApplied {
        pod: Arc::new(pod.clone()),
        unknown: Vec::new(),
    }
}

/// Gate mode: the tracker asks for the annotation, then probes what it
/// read.
fn gate_tracked(pod: &Pod, clock: &Clock, prober: &Prober) -> (PodTracker, Vec<Effect>) {
    let mut tracker = tracker(Mode::Gate);
    let effects = tracker.step(applied(pod), clock.at(0), prober);
    let Some(Effect::ReadAnnotation {
        uid,
        pod: read,
        annotation,
        budget,
    }) = effects.into_iter().last()
    else {
        panic!("no reading asked for");
    };
    let reading = Reading::read(uid, read, annotation, budget);
    let effects = tracker.step(
        Input::AnnotationRead {
            reading,
            current: Some(Arc::new(pod.clone())),
        },
        clock.at(0),
        prober,
    );
    (tracker, effects)
}

#[test]
fn k1_authority_first_sight_starts_workers_and_asks_for_the_status() {
    let clock = Clock(Instant::now());
    let mut tracker = tracker(Mode::Authority);
    let pod = pod(Mode::Authority, 100, None);
    let effects = tracker.step(applied(&pod), clock.at(0), &Prober::default());
    assert_eq!(
        names(&effects),
        [
            "ShowStarted",
            "StartWorkers",
            "ShowStarted",
            "NudgeReadiness",
            "Patch"
        ]
    );
    let Some(Effect::Patch(intent)) = effects.last() else {
        unreachable!()
    };
    assert_eq!(intent.owned, Owned::Authority);
    assert_eq!(
        (intent.views[0].started, intent.views[0].ready),
        (true, false),
        "S3: the readiness worker this step started has no Success yet"
    );
    assert_eq!(tracker.tracked_pods(), 1);
}

#[test]
fn gate_a_new_pod_is_read_then_probed_and_its_intent_is_the_gate() {
    let clock = Clock(Instant::now());
    let prober = Prober {
        view: FakeView::default().with_worker("app", ProbeKind::Readiness),
    };
    let (_, effects) = gate_tracked(&pod(Mode::Gate, 100, None), &clock, &prober);
    assert_eq!(
        names(&effects),
        [
            "ShowStarted",
            "StartWorkers",
            "ShowStarted",
            "NudgeReadiness",
            "Patch"
        ]
    );
    let Some(Effect::Workers(WorkerCommand::NudgeReadiness { containers, .. })) = effects.get(3)
    else {
        unreachable!()
    };
    assert_eq!(containers, &["app"], "W8: started, not ready");
    let Some(Effect::Patch(intent)) = effects.last() else {
        unreachable!()
    };
    assert!(matches!(intent.owned, Owned::Gate(_)));
}

#[test]
fn w12_a_deleted_pod_is_forgotten() {
    let clock = Clock(Instant::now());
    let mut tracker = tracker(Mode::Authority);
    let pod = pod(Mode::Authority, 100, None);
    tracker.step(applied(&pod), clock.at(0), &Prober::default());
    let effects = tracker.step(
        Input::PodDeleted(Arc::new(pod)),
        clock.at(1),
        &Prober::default(),
    );
    assert_eq!(names(&effects), ["Forget"]);
    assert_eq!(tracker.tracked_pods(), 0);
}

#[test]
fn w13_a_relist_stops_the_workers_of_pods_it_no_longer_has() {
    let clock = Clock(Instant::now());
    let mut tracker = tracker(Mode::Authority);
    let uids = HashSet::from(["a".to_string()]);
    let effects = tracker.step(
        Input::Relisted(uids.clone()),
        clock.at(0),
        &Prober::default(),
    );
    assert!(
        matches!(&effects[..], [Effect::Workers(WorkerCommand::StopExcept(kept))] if *kept == uids)
    );
}

/// A gate pod whose `app` has a liveness probe, failed (K2).
fn failed_liveness(pause_until: Option<i64>) -> (Pod, Prober) {
    let mut pod = pod(Mode::Gate, 100, None);
    // Events name their pod.
    pod.metadata.name = Some("web".to_string());
    pod.metadata.namespace = Some("team".to_string());
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(
        PROBES_ANNOTATION.to_string(),
        r#"{"app": {"livenessProbe": {"exec": {"command": ["true"]}}}}"#.to_string(),
    );
    if let Some(until) = pause_until {
        annotations.insert(
            crate::prober::liveness_pause::PAUSE_LIVENESS_ANNOTATION.to_string(),
            at(until).0.to_string(),
        );
    }
    let prober = Prober {
        view: FakeView::default()
            .with_worker("app", ProbeKind::Liveness)
            .with_result(ProbeKind::Liveness, ID, CachedResult::Failure),
    };
    (pod, prober)
}

fn liveness_failed(pod: &Pod, clock: &Clock) -> Input {
    let _ = clock;
    Input::Result {
        pod: Some(Arc::new(pod.clone())),
        update: ResultUpdate {
            kind: ProbeKind::Liveness,
            pod_uid: "uid".to_string(),
            container_id: ID.to_string(),
            result: CachedResult::Failure,
            at: clock.0,
        },
    }
}

#[test]
fn k2_a_liveness_failure_asks_for_a_kill() {
    let clock = Clock(Instant::now());
    let (pod, prober) = failed_liveness(None);
    let (mut tracker, _) = gate_tracked(&pod, &clock, &prober);
    let effects = tracker.step(liveness_failed(&pod, &clock), clock.at(1), &prober);
    let kills: Vec<_> = (effects.iter())
        .filter_map(|e| match e {
            Effect::Kill { kill, .. } => Some((kill.container.as_str(), kill.kind)),
            _ => None,
        })
        .collect();
    assert_eq!(kills, [("app", ProbeKind::Liveness)]);
}

#[test]
fn lp1_a_paused_pod_starts_no_liveness_worker_and_kills_nothing() {
    let clock = Clock(Instant::now());
    let (pod, prober) = failed_liveness(Some(260));
    let (mut tracker, effects) = gate_tracked(&pod, &clock, &prober);
    assert!(
        effects.iter().all(|e| match e {
            Effect::Workers(WorkerCommand::Start { probes, .. }) =>
                probes.get("app", ProbeKind::Liveness).is_none(),
            _ => true,
        }),
        "{:?}",
        names(&effects)
    );
    assert_eq!(tracker.next_pause_end(), Some(at(260).0));
    let effects = tracker.step(liveness_failed(&pod, &clock), clock.at(1), &prober);
    assert!(!names(&effects).contains(&"Kill"), "{:?}", names(&effects));
    // LP3: the pause ends at its time, and the worker starts over.
    let effects = tracker.step(
        Input::PauseTimer(vec![Arc::new(pod.clone())]),
        clock.at(60),
        &prober,
    );
    assert_eq!(names(&effects), ["Record", "StartWorkers", "PausedPods"]);
    assert_eq!(tracker.next_pause_end(), None);
}

#[test]
fn an_annotation_edit_within_the_debounce_waits_for_the_resync() {
    let clock = Clock(Instant::now());
    let prober = Prober::default();
    let pod = pod(Mode::Gate, 100, None);
    let (mut tracker, _) = gate_tracked(&pod, &clock, &prober);
    let mut edited = pod.clone();
    edited
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            PROBES_ANNOTATION.to_string(),
            r#"{"app": {"readinessProbe": {"exec": {"command": ["false"]}}}}"#.to_string(),
        );
    let effects = tracker.step(applied(&edited), clock.at(1), &prober);
    assert!(
        !names(&effects).contains(&"ReadAnnotation"),
        "{:?}",
        names(&effects)
    );
    let effects = tracker.step(Input::Resync(vec![Arc::new(edited)]), clock.at(10), &prober);
    assert_eq!(names(&effects)[..2], ["PausedPods", "ReadAnnotation"]);
}
