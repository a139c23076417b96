use std::collections::HashSet;

use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, ContainerRestartRuleOnExitCodes,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::prober::takeover::Takeover;
use crate::spec::ProbeResult;
use crate::testing::*;

const ID: &str = "containerd://c1";
const ID2: &str = "containerd://c2";

/// The prober started at `epoch()`; the container at +100 s, now is +200 s.
fn observed(status: Option<&PodStatus>) -> Observation<'_> {
    Observation {
        status,
        now: at(200),
        prober_start: epoch(),
    }
}

fn running_app(started: Option<bool>) -> PodStatus {
    pod_status(vec![running("app", ID, at(100), started)], vec![])
}

/// A status in which `kind` gets to probe (D10).
fn probing_status(kind: ProbeKind) -> PodStatus {
    running_app(Some(kind != ProbeKind::Startup))
}

fn set(id: &str, result: CachedResult) -> CacheWrite {
    CacheWrite::Set(id.to_string(), result)
}

#[test]
fn d1_no_pod_status_continues_without_writes() {
    for kind in ProbeKind::ALL {
        let mut state = WorkerState::default();
        let step = state.before_probe(&worker_config(kind, default_spec()), &observed(None));
        assert_eq!(
            step,
            Step {
                writes: vec![],
                action: Action::Continue
            },
            "{kind}"
        );
    }
}

#[test]
fn d2_terminal_pod_stops_without_writes() {
    for phase in ["Failed", "Succeeded"] {
        for kind in ProbeKind::ALL {
            let mut status = probing_status(kind);
            status.phase = Some(phase.to_string());
            let mut state = WorkerState::default();
            let step = state.before_probe(
                &worker_config(kind, default_spec()),
                &observed(Some(&status)),
            );
            assert_eq!(
                step,
                Step {
                    writes: vec![],
                    action: Action::Stop
                },
                "{kind} {phase}"
            );
        }
    }
}

#[test]
fn d3_missing_container_status_waits() {
    let other = pod_status(vec![running("other", ID, at(100), Some(true))], vec![]);
    let mut no_id = probing_status(ProbeKind::Liveness);
    no_id.container_statuses.as_mut().unwrap()[0].container_id = Some(String::new());
    for status in [other, no_id] {
        let mut state = WorkerState::default();
        let step = state.before_probe(
            &worker_config(ProbeKind::Liveness, default_spec()),
            &observed(Some(&status)),
        );
        assert_eq!(
            step,
            Step {
                writes: vec![],
                action: Action::Continue
            }
        );
        assert_eq!(state.container_id, None);
    }
}

#[test]
fn d3_empty_container_id_falls_back_to_init_statuses() {
    let pod = pod("uid-1", vec![], vec![sidecar("app")]);
    let config = worker_config_in(ProbeKind::Readiness, default_spec(), pod, "app");
    let mut stale = running("app", "", at(100), Some(true));
    stale.container_id = None;
    let status = pod_status(vec![stale], vec![running("app", ID2, at(100), Some(true))]);
    let mut state = WorkerState::default();
    let step = state.before_probe(&config, &observed(Some(&status)));
    assert_eq!(step.action, Action::Probe);
    assert_eq!(state.container_id.as_deref(), Some(ID2));
}

#[test]
fn w4_initial_value_per_kind() {
    let expected = [
        (ProbeKind::Startup, CachedResult::Unknown),
        (ProbeKind::Readiness, CachedResult::Failure),
        (ProbeKind::Liveness, CachedResult::Success),
    ];
    for (kind, initial) in expected {
        let spec = probe_spec(10, 60, 1, 3);
        let mut state = WorkerState::default();
        let step = state.before_probe(
            &worker_config(kind, spec),
            &observed(Some(&probing_status(kind))),
        );
        assert_eq!(step.writes, vec![set(ID, initial)], "{kind}");
    }
}

#[test]
fn d4_new_container_id_replaces_result_and_lifts_hold() {
    let config = worker_config(ProbeKind::Liveness, default_spec());
    let mut state = WorkerState {
        container_id: Some(ID.to_string()),
        last_result: CachedResult::Failure,
        result_run: 0,
        on_hold: true,
    };
    let status = pod_status(vec![running("app", ID2, at(150), Some(true))], vec![]);
    let step = state.before_probe(&config, &observed(Some(&status)));
    assert_eq!(
        step.writes,
        vec![
            CacheWrite::Remove(ID.to_string()),
            set(ID2, CachedResult::Success)
        ]
    );
    assert_eq!(step.action, Action::Probe);
    assert_eq!(state.container_id.as_deref(), Some(ID2));
    assert!(!state.on_hold);
    assert_eq!(
        state.last_result,
        CachedResult::Failure,
        "D19: counters carry over"
    );
}

#[test]
fn k4_restarted_container_is_probed_after_its_own_initial_delay() {
    let config = worker_config(ProbeKind::Liveness, probe_spec(10, 30, 1, 3));
    let restarted = pod_status(vec![running("app", ID2, at(150), Some(true))], vec![]);
    let on_hold = || WorkerState {
        container_id: Some(ID.to_string()),
        last_result: CachedResult::Failure,
        on_hold: true,
        ..WorkerState::default()
    };
    let at_time = |now| Observation {
        status: Some(&restarted),
        now,
        prober_start: epoch(),
    };
    let mut early = on_hold();
    let step = early.before_probe(&config, &at_time(at(179)));
    assert_eq!(
        step.action,
        Action::Continue,
        "29 s after the new startedAt"
    );
    assert_eq!(step.writes[1], set(ID2, CachedResult::Success));
    assert!(!early.on_hold);
    let mut late = on_hold();
    assert_eq!(
        late.before_probe(&config, &at_time(at(180))).action,
        Action::Probe
    );
}

#[test]
fn d4_same_container_id_writes_nothing() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, 300, 1, 3));
    let mut state = WorkerState::default();
    let status = probing_status(ProbeKind::Readiness);
    state.before_probe(&config, &observed(Some(&status)));
    let step = state.before_probe(&config, &observed(Some(&status)));
    assert_eq!(
        step,
        Step {
            writes: vec![],
            action: Action::Continue
        }
    );
}

#[test]
fn d5_container_running_before_prober_start_keeps_cache_empty() {
    // Started 10.001 s before the prober: pre-existing.
    let started = Timestamp::from_nanosecond(epoch().as_nanosecond() - 10_001_000_000).unwrap();
    for kind in ProbeKind::ALL {
        let status = pod_status(
            vec![running(
                "app",
                ID,
                started,
                Some(kind != ProbeKind::Startup),
            )],
            vec![],
        );
        let mut state = WorkerState::default();
        let step = state.before_probe(
            &worker_config(kind, default_spec()),
            &observed(Some(&status)),
        );
        assert_eq!(step.writes, vec![], "{kind}");
        assert_eq!(step.action, Action::Probe, "{kind}");
        assert_eq!(state.container_id.as_deref(), Some(ID));
    }
}

#[test]
fn s6_a_replacement_that_predates_the_prober_is_seeded_unless_vouched() {
    // kubernetes #141487: the instance started long before the prober
    // (by start time it survived the restart), but the previous
    // prober's verdicts were about another instance it replaced.
    let started = Timestamp::from_nanosecond(epoch().as_nanosecond() - 60_000_000_000).unwrap();
    let status = pod_status(vec![running("app", ID, started, Some(false))], vec![]);
    for kind in ProbeKind::ALL {
        let replaced =
            worker_config(kind, default_spec()).with_takeover(Takeover::Vouched(HashSet::from([
                "containerd://replaced".to_string(),
            ])));
        let mut state = WorkerState::default();
        let step = state.before_probe(&replaced, &observed(Some(&status)));
        assert_eq!(
            step.writes,
            vec![CacheWrite::Set(ID.to_string(), replaced.initial_value())],
            "{kind}"
        );
    }
}

#[test]
fn d5_vouched_container_keeps_cache_empty_within_grace() {
    // Started 5 s before the prober, but vouched for.
    let status = pod_status(vec![running("app", ID, at(-5), Some(true))], vec![]);
    let vouched = worker_config(ProbeKind::Readiness, default_spec())
        .with_takeover(Takeover::Vouched(HashSet::from([ID.to_string()])));
    let mut state = WorkerState::default();
    let step = state.before_probe(&vouched, &observed(Some(&status)));
    assert_eq!(step.writes, vec![]);

    // Another instance was vouched for: this one starts over.
    let another = worker_config(ProbeKind::Readiness, default_spec()).with_takeover(
        Takeover::Vouched(HashSet::from(["containerd://before".to_string()])),
    );
    let mut state = WorkerState::default();
    let step = state.before_probe(&another, &observed(Some(&status)));
    assert_eq!(
        step.writes,
        vec![CacheWrite::Set(ID.to_string(), CachedResult::Failure)]
    );
}

#[test]
fn d5_container_started_within_grace_gets_initial_value() {
    let started = at(-10);
    let status = pod_status(vec![running("app", ID, started, Some(true))], vec![]);
    let mut state = WorkerState::default();
    let step = state.before_probe(
        &worker_config(ProbeKind::Readiness, default_spec()),
        &observed(Some(&status)),
    );
    assert_eq!(step.writes, vec![set(ID, CachedResult::Failure)]);
}

#[test]
fn d5_started_restartable_init_container_seeds_startup_success() {
    // kubernetes #137146: without the seed, a restarted prober would
    // leave the sidecar's startup result empty and hold every regular
    // container back. `started` here is podprobe's own verdict about
    // this very instance (the daemon's status source, S6).
    let pod = pod("uid-1", vec![container("main")], vec![sidecar("app")]);
    let config = worker_config_in(ProbeKind::Startup, default_spec(), pod, "app");
    // Pre-existing sidecar: only the Success seed.
    let old = pod_status(vec![], vec![running("app", ID, at(-3600), Some(true))]);
    let mut state = WorkerState::default();
    let step = state.before_probe(&config, &observed(Some(&old)));
    assert_eq!(step.writes, vec![set(ID, CachedResult::Success)]);
    assert_eq!(
        step.action,
        Action::Continue,
        "started: startup is parked (D10)"
    );
    // Fresh sidecar: the seed, then the initial value, as upstream writes both.
    let fresh = pod_status(vec![], vec![running("app", ID2, at(100), Some(true))]);
    let step = state.before_probe(&config, &observed(Some(&fresh)));
    assert_eq!(
        step.writes,
        vec![
            CacheWrite::Remove(ID.to_string()),
            set(ID2, CachedResult::Success),
            set(ID2, CachedResult::Unknown),
        ]
    );
}

#[test]
fn d6_on_hold_skips_probe() {
    let config = worker_config(ProbeKind::Liveness, default_spec());
    let mut state = WorkerState {
        container_id: Some(ID.to_string()),
        on_hold: true,
        ..WorkerState::default()
    };
    // Even a stopped container is left alone while on hold.
    for status in [
        probing_status(ProbeKind::Liveness),
        pod_status(vec![waiting("app", ID)], vec![]),
    ] {
        let step = state.before_probe(&config, &observed(Some(&status)));
        assert_eq!(
            step,
            Step {
                writes: vec![],
                action: Action::Continue
            }
        );
    }
}

#[test]
fn d7_not_running_writes_failure() {
    for kind in ProbeKind::ALL {
        let status = pod_status(vec![waiting("app", ID)], vec![]);
        let mut state = WorkerState {
            container_id: Some(ID.to_string()),
            ..WorkerState::default()
        };
        let step = state.before_probe(
            &worker_config(kind, default_spec()),
            &observed(Some(&status)),
        );
        assert_eq!(step.writes, vec![set(ID, CachedResult::Failure)], "{kind}");
        assert_eq!(
            step.action,
            Action::Continue,
            "{kind}: a waiting container may start"
        );
    }
}

fn d7_action(pod_policy: Option<&str>, container: Container, exit_code: i32) -> Action {
    let mut pod = pod("uid-1", vec![container], vec![]);
    pod.spec.as_mut().unwrap().restart_policy = pod_policy.map(str::to_string);
    let config = worker_config_in(ProbeKind::Readiness, default_spec(), pod, "app");
    let status = pod_status(vec![terminated("app", ID, exit_code)], vec![]);
    let mut state = WorkerState::default();
    let step = state.before_probe(&config, &observed(Some(&status)));
    assert_eq!(step.writes.last(), Some(&set(ID, CachedResult::Failure)));
    step.action
}

#[test]
fn d7_terminated_container_follows_pod_restart_policy() {
    use Action::{Continue, Stop};
    let cases = [
        (None, 0, Continue),
        (Some("Always"), 0, Continue),
        (Some("OnFailure"), 0, Stop),
        (Some("OnFailure"), 1, Continue),
        (Some("Never"), 1, Stop),
    ];
    for (policy, exit_code, want) in cases {
        assert_eq!(
            d7_action(policy, container("app"), exit_code),
            want,
            "{policy:?} {exit_code}"
        );
    }
}

#[test]
fn d7_container_restart_policy_overrides_pod() {
    let with_policy = |policy: &str| Container {
        restart_policy: Some(policy.to_string()),
        ..container("app")
    };
    assert_eq!(
        d7_action(Some("Never"), with_policy("Always"), 0),
        Action::Continue
    );
    assert_eq!(
        d7_action(Some("Never"), with_policy("OnFailure"), 2),
        Action::Continue
    );
    assert_eq!(
        d7_action(Some("Always"), with_policy("OnFailure"), 0),
        Action::Stop
    );
    assert_eq!(
        d7_action(Some("Always"), with_policy("Never"), 1),
        Action::Stop
    );
}

#[test]
fn d7_restart_rules_match_exit_codes() {
    let rule = |operator: &str, values: Vec<i32>| ContainerRestartRule {
        action: "Restart".to_string(),
        exit_codes: Some(ContainerRestartRuleOnExitCodes {
            operator: operator.to_string(),
            values: Some(values),
        }),
    };
    let with_rules = |policy: Option<&str>, rules| Container {
        restart_policy: policy.map(str::to_string),
        restart_policy_rules: Some(rules),
        ..container("app")
    };
    let never_but_42 = with_rules(Some("Never"), vec![rule("In", vec![42])]);
    assert_eq!(
        d7_action(Some("Never"), never_but_42.clone(), 42),
        Action::Continue
    );
    assert_eq!(d7_action(Some("Never"), never_but_42, 1), Action::Stop);
    let never_unless_0 = with_rules(Some("Never"), vec![rule("NotIn", vec![0])]);
    assert_eq!(
        d7_action(Some("Never"), never_unless_0.clone(), 3),
        Action::Continue
    );
    assert_eq!(d7_action(Some("Never"), never_unless_0, 0), Action::Stop);
    // Rules are ignored without a container-level restartPolicy.
    let rules_only = with_rules(None, vec![rule("In", vec![42])]);
    assert_eq!(d7_action(Some("Never"), rules_only, 42), Action::Stop);
}

#[test]
fn d7_restartable_init_container_keeps_probing_after_exit() {
    let mut pod = pod("uid-1", vec![container("main")], vec![sidecar("app")]);
    pod.spec.as_mut().unwrap().restart_policy = Some("Never".to_string());
    let config = worker_config_in(ProbeKind::Liveness, default_spec(), pod, "app");
    let status = pod_status(vec![], vec![terminated("app", ID, 0)]);
    let mut state = WorkerState::default();
    assert_eq!(
        state.before_probe(&config, &observed(Some(&status))).action,
        Action::Continue
    );
}

#[test]
fn d8_deleting_pod_liveness_and_startup_write_success_and_stop() {
    for kind in ProbeKind::ALL {
        let mut pod = pod("uid-1", vec![container("app")], vec![]);
        pod.metadata.deletion_timestamp = Some(Time(at(150)));
        let config = worker_config_in(kind, default_spec(), pod, "app");
        let mut state = WorkerState {
            container_id: Some(ID.to_string()),
            ..WorkerState::default()
        };
        let step = state.before_probe(&config, &observed(Some(&probing_status(kind))));
        if kind == ProbeKind::Readiness {
            assert_eq!(
                step,
                Step {
                    writes: vec![],
                    action: Action::Probe
                }
            );
        } else {
            let want = Step {
                writes: vec![set(ID, CachedResult::Success)],
                action: Action::Stop,
            };
            assert_eq!(step, want, "{kind}");
        }
    }
}

#[test]
fn d9_initial_delay_counts_whole_seconds_from_started_at() {
    let delayed = worker_config(ProbeKind::Liveness, probe_spec(10, 100, 1, 3));
    let status = probing_status(ProbeKind::Liveness); // started at +100 s
    let mut state = WorkerState::default();
    let step_at = |state: &mut WorkerState, nanos_after_start: i128| {
        let now = Timestamp::from_nanosecond(at(100).as_nanosecond() + nanos_after_start).unwrap();
        let observed = Observation {
            status: Some(&status),
            now,
            prober_start: epoch(),
        };
        state.before_probe(&delayed, &observed).action
    };
    assert_eq!(
        step_at(&mut state, 99_999_999_999),
        Action::Continue,
        "99.99 s truncates to 99"
    );
    assert_eq!(step_at(&mut state, 100_000_000_000), Action::Probe);
    // A startedAt in the future (clock skew) truncates toward zero.
    let config = worker_config(ProbeKind::Liveness, probe_spec(10, 0, 1, 3));
    let skewed = Observation {
        status: Some(&status),
        now: Timestamp::from_nanosecond(at(100).as_nanosecond() - 900_000_000).unwrap(),
        prober_start: epoch(),
    };
    assert_eq!(
        WorkerState::default().before_probe(&config, &skewed).action,
        Action::Probe
    );
}

#[test]
fn d9_negative_initial_delay_means_none() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, -100, 1, 3));
    let status = pod_status(vec![running("app", ID, at(200), Some(true))], vec![]);
    let mut state = WorkerState::default();
    assert_eq!(
        state.before_probe(&config, &observed(Some(&status))).action,
        Action::Probe
    );
}

#[test]
fn d10_started_flag_gates_probes() {
    let cases = [
        (ProbeKind::Startup, None, Action::Probe),
        (ProbeKind::Startup, Some(false), Action::Probe),
        (ProbeKind::Startup, Some(true), Action::Continue),
        (ProbeKind::Readiness, None, Action::Continue),
        (ProbeKind::Readiness, Some(false), Action::Continue),
        (ProbeKind::Readiness, Some(true), Action::Probe),
        (ProbeKind::Liveness, Some(false), Action::Continue),
        (ProbeKind::Liveness, Some(true), Action::Probe),
    ];
    for (kind, started, want) in cases {
        let mut state = WorkerState::default();
        let status = running_app(started);
        let step = state.before_probe(
            &worker_config(kind, default_spec()),
            &observed(Some(&status)),
        );
        assert_eq!(step.action, want, "{kind} started={started:?}");
    }
}

/// A state that has adopted `ID`, as after the first iteration.
fn adopted() -> WorkerState {
    WorkerState {
        container_id: Some(ID.to_string()),
        ..WorkerState::default()
    }
}

#[test]
fn d11_errored_verdict_maps_to_no_result() {
    assert_eq!(verdict_result(&errored(ProbeKind::Liveness)), None);
    let failed = verdict(ProbeKind::Liveness, ProbeResult::Failure);
    assert_eq!(verdict_result(&failed), Some(CachedResult::Failure));
    let warned = verdict(ProbeKind::Liveness, ProbeResult::Warning);
    assert_eq!(verdict_result(&warned), Some(CachedResult::Success));
    let unknown = verdict(ProbeKind::Liveness, ProbeResult::Unknown);
    assert_eq!(verdict_result(&unknown), Some(CachedResult::Failure));
}

#[test]
fn d13_result_run_counts_consecutive_results() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, 0, 5, 5));
    let mut state = adopted();
    for (result, run) in [
        (CachedResult::Success, 1),
        (CachedResult::Success, 2),
        (CachedResult::Failure, 1),
        (CachedResult::Failure, 2),
        (CachedResult::Success, 1),
    ] {
        state.after_probe(&config, result);
        assert_eq!((state.last_result, state.result_run), (result, run));
    }
}

#[test]
fn d14_d15_results_are_written_from_their_threshold_on() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, 0, 2, 3));
    let mut state = adopted();
    let writes: Vec<_> = [
        CachedResult::Failure,
        CachedResult::Failure,
        CachedResult::Failure,
        CachedResult::Failure,
        CachedResult::Success,
        CachedResult::Success,
        CachedResult::Success,
    ]
    .into_iter()
    .map(|result| state.after_probe(&config, result))
    .collect();
    let failure = Some(set(ID, CachedResult::Failure));
    let success = Some(set(ID, CachedResult::Success));
    assert_eq!(
        writes,
        vec![
            None,
            None,
            failure.clone(),
            failure,
            None,
            success.clone(),
            success
        ]
    );
}

#[test]
fn d16_liveness_failure_puts_worker_on_hold() {
    let config = worker_config(ProbeKind::Liveness, probe_spec(10, 0, 1, 2));
    let mut state = adopted();
    assert_eq!(
        state.after_probe(&config, CachedResult::Success),
        Some(set(ID, CachedResult::Success))
    );
    assert!(!state.on_hold, "liveness success does not hold");
    assert_eq!(state.after_probe(&config, CachedResult::Failure), None);
    assert_eq!(
        state.after_probe(&config, CachedResult::Failure),
        Some(set(ID, CachedResult::Failure))
    );
    assert!(state.on_hold);
    assert_eq!(state.result_run, 0);
}

#[test]
fn d16_startup_holds_after_either_threshold() {
    for (result, threshold) in [(CachedResult::Success, 1), (CachedResult::Failure, 3)] {
        let config = worker_config(ProbeKind::Startup, probe_spec(10, 0, 1, 3));
        let mut state = adopted();
        for _ in 1..threshold {
            assert_eq!(state.after_probe(&config, result), None);
            assert!(!state.on_hold);
        }
        assert_eq!(state.after_probe(&config, result), Some(set(ID, result)));
        assert!(state.on_hold, "{result:?}");
        assert_eq!(state.result_run, 0);
    }
}

#[test]
fn d17_readiness_never_holds() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, 0, 1, 1));
    let mut state = adopted();
    assert_eq!(
        state.after_probe(&config, CachedResult::Failure),
        Some(set(ID, CachedResult::Failure))
    );
    assert!(!state.on_hold);
    assert_eq!(
        state.after_probe(&config, CachedResult::Success),
        Some(set(ID, CachedResult::Success))
    );
    assert!(!state.on_hold);
}

#[test]
fn d19_first_success_counts_from_zero_value() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, 0, 1, 3));
    let mut state = adopted();
    assert_eq!(state.last_result, CachedResult::Success);
    state.after_probe(&config, CachedResult::Success);
    assert_eq!(state.result_run, 1);
}

#[test]
fn d19_run_carries_over_container_change() {
    let config = worker_config(ProbeKind::Readiness, probe_spec(10, 0, 3, 3));
    let mut state = WorkerState::default();
    state.before_probe(
        &config,
        &observed(Some(&probing_status(ProbeKind::Readiness))),
    );
    assert_eq!(state.after_probe(&config, CachedResult::Success), None);
    assert_eq!(state.after_probe(&config, CachedResult::Success), None);
    let restarted = pod_status(vec![running("app", ID2, at(150), Some(true))], vec![]);
    let step = state.before_probe(&config, &observed(Some(&restarted)));
    assert_eq!(step.writes[1], set(ID2, CachedResult::Failure));
    assert_eq!(
        state.after_probe(&config, CachedResult::Success),
        Some(set(ID2, CachedResult::Success))
    );
}
