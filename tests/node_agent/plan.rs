//! What to do next in a running pod, decided from the pod as the API has it
//! and what the runtime shows, without doing it: which containers to start
//! (or restart), which to stop, and which wait (CrashLoopBackOff).
//!
//! The order is the kubelet's: init containers one at a time in spec order
//! (a classic one must exit 0 before the next starts; after a sidecar starts,
//! the next waits until the API shows the sidecar `started`, which podprobe
//! writes once its startup probe passes), then all regular containers. Once
//! every regular container has stopped for good, the sidecars are stopped
//! too and not restarted.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

use crate::backoff::{self, Backoff, Restart};
use crate::observed::{self, Instance};
use crate::policy;
use crate::status::{Waiting, kubernetes_id};

/// Containers to start, to stop, and held back.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// (container name, attempt): instances to create and start, in order.
    pub start: Vec<(String, u32)>,
    /// Instances (CRI IDs) to stop.
    pub stop: Vec<String>,
    /// Containers waiting out a back-off.
    pub waiting: BTreeMap<String, Waiting>,
}

/// The next steps for `pod` at `now`, with the back-off of its containers.
pub fn plan(pod: &Pod, observed: &observed::Pod, now: &Time, backoff: &mut Backoff) -> Plan {
    let mut plan = Plan::default();
    let Some(spec) = pod.spec.as_ref() else {
        return plan;
    };
    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    // Once a regular container exists the pod has been initialized: init
    // containers are not run again, sidecars no longer hold anything up.
    let initialized = spec
        .containers
        .iter()
        .any(|c| observed.latest(&c.name).is_some());
    for container in init_specs {
        let latest = observed.latest(&container.name);
        let blocks = if policy::is_sidecar(container) {
            match latest {
                None => {
                    plan.start.push((container.name.clone(), 0));
                    true
                }
                Some(instance) => match instance.exit() {
                    Some(_) => {
                        plan.restart(pod, container, observed, backoff, now);
                        true
                    }
                    None => !started_in_api(pod, instance),
                },
            }
        } else if initialized {
            false
        } else {
            match latest {
                None => {
                    plan.start.push((container.name.clone(), 0));
                    true
                }
                Some(instance) => match instance.exit() {
                    Some(exit) if exit.exit_code == 0 => false,
                    Some(_) => {
                        if policy::init_retries(pod) {
                            plan.restart(pod, container, observed, backoff, now);
                        }
                        true
                    }
                    None => true,
                },
            }
        };
        if blocks && !initialized {
            return plan;
        }
    }
    let mut all_stopped = true;
    for container in &spec.containers {
        match observed.latest(&container.name) {
            None => {
                all_stopped = false;
                plan.start.push((container.name.clone(), 0));
            }
            Some(instance) => match instance.exit() {
                Some(exit)
                    if policy::should_restart(pod, container, exit.exit_code, exit.probe_kill) =>
                {
                    all_stopped = false;
                    plan.restart(pod, container, observed, backoff, now);
                }
                Some(_) => {}
                None => all_stopped = false,
            },
        }
    }
    if all_stopped {
        let sidecars: Vec<&Container> = init_specs
            .iter()
            .filter(|c| policy::is_sidecar(c))
            .collect();
        let is_sidecar = |name: &String| sidecars.iter().any(|c| &c.name == name);
        plan.start.retain(|(name, _)| !is_sidecar(name));
        plan.waiting.retain(|name, _| !is_sidecar(name));
        // The kubelet stops sidecars in reverse order.
        for sidecar in sidecars.iter().rev() {
            if let Some(instance) = observed
                .latest(&sidecar.name)
                .filter(|i| i.exit().is_none())
            {
                plan.stop.push(instance.id.clone());
            }
        }
    }
    plan
}

impl Plan {
    /// Starts the exited `container` again now, or holds it in
    /// CrashLoopBackOff ([`Backoff`]). Whether podprobe killed it must be
    /// known first: until then nothing is decided.
    fn restart(
        &mut self,
        pod: &Pod,
        container: &Container,
        observed: &observed::Pod,
        backoff: &mut Backoff,
        now: &Time,
    ) {
        let Some(history) = observed.containers.get(&container.name) else {
            return;
        };
        let Some((instance, exit)) = history.latest.as_ref().and_then(|i| Some((i, i.exit()?)))
        else {
            return;
        };
        let name = &container.name;
        let restart = match exit.probe_kill {
            None => return,
            Some(true) => {
                let before = history.previous.as_ref().and_then(Instance::exit);
                let before = before.map(|e| e.finished_at.0);
                backoff.restart_killed(name, &instance.id, before, exit.finished_at.0, now.0)
            }
            Some(false) => backoff.restart(name, Some(exit.finished_at.0), now.0),
        };
        match restart {
            Restart::Now => self.start.push((name.clone(), instance.attempt + 1)),
            Restart::After { backoff } => {
                let meta = &pod.metadata;
                let message = format!(
                    "back-off {} restarting failed container={} pod={}_{}({})",
                    backoff::go_duration(backoff),
                    container.name,
                    meta.name.as_deref().unwrap_or_default(),
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.uid.as_deref().unwrap_or_default(),
                );
                self.waiting.insert(
                    container.name.clone(),
                    Waiting {
                        reason: "CrashLoopBackOff".to_string(),
                        message,
                    },
                );
            }
        }
    }
}

/// Whether the API shows `instance` (a sidecar) as started.
fn started_in_api(pod: &Pod, instance: &Instance) -> bool {
    let id = kubernetes_id(instance);
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .any(|s| s.container_id.as_deref() == Some(id.as_str()) && s.started == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{Exit, State};
    use k8s_openapi::api::core::v1::{ContainerStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + second).unwrap())
    }

    fn named(name: &str) -> Container {
        Container {
            name: name.to_string(),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..named(name)
        }
    }

    fn pod(init: Vec<Container>, containers: &[&str], policy: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(init),
                containers: containers.iter().map(|n| named(n)).collect(),
                restart_policy: Some(policy.into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn instance(id: &str, attempt: u32, state: State) -> Instance {
        Instance {
            id: id.into(),
            attempt,
            image_ref: String::new(),
            state,
        }
    }

    fn running(id: &str) -> Instance {
        instance(id, 0, State::Running { started_at: at(0) })
    }

    fn exited(id: &str, attempt: u32, exit_code: i32, finished: i64) -> Instance {
        instance(
            id,
            attempt,
            State::Exited(Exit {
                exit_code,
                reason: String::new(),
                message: String::new(),
                started_at: Some(at(0)),
                finished_at: at(finished),
                probe_kill: Some(false),
            }),
        )
    }

    fn observed(instances: Vec<(&str, Instance)>) -> observed::Pod {
        observed::Pod {
            sandbox: None,
            containers: instances
                .into_iter()
                .map(|(name, latest)| {
                    (
                        name.to_string(),
                        observed::Container {
                            latest: Some(latest),
                            previous: None,
                        },
                    )
                })
                .collect(),
        }
    }

    fn starts(plan: &Plan) -> Vec<(&str, u32)> {
        plan.start.iter().map(|(n, a)| (n.as_str(), *a)).collect()
    }

    #[test]
    fn init_containers_run_one_at_a_time_before_the_regular_ones() {
        let pod = pod(vec![named("one"), named("two")], &["main"], "Always");
        assert_eq!(
            starts(&plan(
                &pod,
                &observed(vec![]),
                &at(0),
                &mut Backoff::default()
            )),
            [("one", 0)]
        );
        let one_running = observed(vec![("one", running("o1"))]);
        assert_eq!(
            starts(&plan(&pod, &one_running, &at(0), &mut Backoff::default())),
            []
        );
        let one_done = observed(vec![("one", exited("o1", 0, 0, 1))]);
        assert_eq!(
            starts(&plan(&pod, &one_done, &at(2), &mut Backoff::default())),
            [("two", 0)]
        );
        let both_done = observed(vec![
            ("one", exited("o1", 0, 0, 1)),
            ("two", exited("t1", 0, 0, 1)),
        ]);
        assert_eq!(
            starts(&plan(&pod, &both_done, &at(2), &mut Backoff::default())),
            [("main", 0)]
        );
    }

    #[test]
    fn the_next_container_waits_until_the_sidecar_is_started_in_the_api() {
        let mut pod = pod(vec![sidecar("proxy")], &["main"], "Always");
        let proxy_running = observed(vec![("proxy", running("p1"))]);
        assert_eq!(
            starts(&plan(&pod, &proxy_running, &at(0), &mut Backoff::default())),
            []
        );
        pod.status = Some(PodStatus {
            init_container_statuses: Some(vec![ContainerStatus {
                name: "proxy".into(),
                container_id: Some("containerd://p1".into()),
                started: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(
            starts(&plan(&pod, &proxy_running, &at(0), &mut Backoff::default())),
            [("main", 0)]
        );
    }

    #[test]
    fn restarts_back_off_from_the_previous_exit() {
        let pod = pod(vec![], &["main"], "Always");
        let mut backoff = Backoff::default();
        // The first restart is immediate.
        let first = observed(vec![("main", exited("m1", 0, 1, 5))]);
        assert_eq!(
            starts(&plan(&pod, &first, &at(5), &mut backoff)),
            [("main", 1)]
        );
        // The second waits 10 s from the exit.
        let second = observed(vec![("main", exited("m2", 1, 1, 20))]);
        let held = plan(&pod, &second, &at(25), &mut backoff);
        assert_eq!(starts(&held), []);
        assert_eq!(
            held.waiting["main"],
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 10s restarting failed container=main pod=web_default(u1)".into(),
            }
        );
        assert_eq!(
            starts(&plan(&pod, &second, &at(30), &mut backoff)),
            [("main", 2)]
        );
    }

    #[test]
    fn a_probe_kill_restarts_at_once_as_the_kubelets_kill_and_start() {
        let pod = pod(vec![], &["main"], "Always");
        let mut backoff = Backoff::default();
        let killed = |id: &str, attempt, finished| {
            let mut instance = exited(id, attempt, 143, finished);
            if let State::Exited(exit) = &mut instance.state {
                exit.probe_kill = Some(true);
            }
            instance
        };
        let first = observed(vec![("main", killed("m1", 0, 15))]);
        assert_eq!(
            starts(&plan(&pod, &first, &at(15), &mut backoff)),
            [("main", 1)]
        );
        let mut second = observed(vec![("main", killed("m2", 1, 30))]);
        second.containers.get_mut("main").unwrap().previous = Some(killed("m1", 0, 15));
        assert_eq!(
            starts(&plan(&pod, &second, &at(30), &mut backoff)),
            [("main", 2)]
        );
    }

    #[test]
    fn nothing_is_decided_before_it_is_known_whether_a_probe_killed_it() {
        let pod = pod(vec![], &["main"], "Always");
        let mut unknown = exited("m1", 0, 143, 5);
        if let State::Exited(exit) = &mut unknown.state {
            exit.probe_kill = None;
        }
        let observed = observed(vec![("main", unknown)]);
        assert_eq!(
            plan(&pod, &observed, &at(5), &mut Backoff::default()),
            Plan::default()
        );
    }

    #[test]
    fn restart_policy_decides_whether_a_stopped_container_runs_again() {
        let succeeded = observed(vec![("main", exited("m1", 0, 0, 1))]);
        let failed = observed(vec![("main", exited("m1", 0, 1, 1))]);
        let never = pod(vec![], &["main"], "Never");
        let on_failure = pod(vec![], &["main"], "OnFailure");
        assert_eq!(
            plan(&never, &failed, &at(2), &mut Backoff::default()),
            Plan::default()
        );
        assert_eq!(
            plan(&on_failure, &succeeded, &at(2), &mut Backoff::default()),
            Plan::default()
        );
        assert_eq!(
            starts(&plan(&on_failure, &failed, &at(2), &mut Backoff::default())),
            [("main", 1)]
        );
    }

    #[test]
    fn k8_a_probe_killed_container_that_exited_0_restarts_under_on_failure() {
        let on_failure = pod(vec![], &["main"], "OnFailure");
        let mut killed = exited("m1", 0, 0, 1);
        if let State::Exited(exit) = &mut killed.state {
            exit.probe_kill = Some(true);
        }
        let observed = observed(vec![("main", killed)]);
        assert_eq!(
            starts(&plan(
                &on_failure,
                &observed,
                &at(2),
                &mut Backoff::default()
            )),
            [("main", 1)]
        );
    }

    #[test]
    fn a_failed_init_container_stops_the_pod_under_never() {
        let pod = pod(vec![named("init")], &["main"], "Never");
        let failed = observed(vec![("init", exited("i1", 0, 1, 1))]);
        assert_eq!(
            plan(&pod, &failed, &at(2), &mut Backoff::default()),
            Plan::default()
        );
    }

    #[test]
    fn sidecars_stop_once_the_regular_containers_are_done() {
        let pod = pod(vec![sidecar("proxy")], &["main"], "Never");
        let done = observed(vec![
            ("proxy", running("p1")),
            ("main", exited("m1", 0, 0, 1)),
        ]);
        let plan = plan(&pod, &done, &at(2), &mut Backoff::default());
        assert_eq!(starts(&plan), []);
        assert_eq!(plan.stop, ["p1"]);
    }
}
