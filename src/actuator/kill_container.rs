//! The kubelet's `killContainer` for a container whose liveness or startup
//! probe failed (K2, K3, K7): confirm with the runtime that the container is
//! the pod's, record `Killing`, run the container's preStop hook within the
//! grace period, then `StopContainer` with what is left of it.
//!
//! In gate mode the kubelet then sees an exit it did not cause and applies
//! the restart policy to its exit code: under `OnFailure` a container that
//! exits 0 on SIGTERM stays down, where the kubelet restarts a container it
//! killed itself (K8). The `Killing` note says so, and a Warning follows when
//! it happens. In authority mode restarting a probe-killed container
//! whatever its exit code is the node agent's side of the contract.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::time::Instant;

use crate::actuator::lifecycle::{HookRunner, HookTarget, grace_left, pre_stop_hook};
use crate::runtime::cri::{CriClient, CriError};
use podprobe_core::prober::events::record::{PodEvent, reasons};
use podprobe_core::prober::events::recorder::EventRecorder;
use podprobe_core::prober::manager::{Killer, ProbeKill};
use podprobe_core::spec::restart_policy::RestartPolicy;
use podprobe_core::status::Mode;
use podprobe_core::util::pod::ContainerIdentity;
use podprobe_core::util::pod::{find_container, pod_name, pod_namespace};

/// Stops containers for failed probes, each container instance once.
#[derive(Debug, Clone)]
pub struct ContainerKiller {
    mode: Mode,
    cri: CriClient,
    hooks: HookRunner,
    events: Arc<dyn EventRecorder>,
    /// Container IDs being (or already) stopped for a probe failure.
    killing: Arc<Mutex<HashSet<String>>>,
}

impl ContainerKiller {
    pub fn new(mode: Mode, cri: CriClient, hooks: HookRunner, events: impl EventRecorder) -> Self {
        ContainerKiller {
            mode,
            cri,
            hooks,
            events: Arc::new(events),
            killing: Arc::default(),
        }
    }

    /// Whether the container was stopped (or is known not to be this pod's,
    /// which no retry changes).
    async fn kill_container(&self, pod: &Pod, kill: &ProbeKill) -> bool {
        let (name, namespace) = (pod_name(pod), pod_namespace(pod));
        let container = kill.container.as_str();
        let identity = ContainerIdentity {
            pod_uid: pod.metadata.uid.as_deref().unwrap_or_default(),
            container_name: container,
        };
        // The ID comes from the pod's status; whoever may patch that could
        // point it at another pod's container.
        match self.cri.verify_identity(&kill.container_id, identity).await {
            Ok(()) => {}
            Err(error @ CriError::ForeignContainer { .. }) => {
                tracing::warn!(pod = name, namespace, container, %error,
                    "not stopping the container: it is not this pod's");
                self.events
                    .record_opt(PodEvent::kill_refused(pod, container, error.to_string()));
                return true;
            }
            Err(error) => {
                tracing::warn!(pod = name, namespace, container, %error,
                    "cannot check the container with the runtime; will try again");
                return false;
            }
        }
        let spec = pod
            .spec
            .as_ref()
            .and_then(|spec| find_container(spec, container))
            .map(|c| c.container);
        let on_failure =
            self.mode == Mode::Gate && spec.is_some_and(|c| restarts_on_failure(pod, c));
        let mut message = kill.message.clone();
        if on_failure {
            message.push_str(" unless it exits 0 (restartPolicy OnFailure)");
        }
        tracing::info!(pod = name, namespace, container, probe = %kill.kind,
            grace_period_seconds = kill.grace_period_seconds, message, "killing container");
        self.events
            .record_opt(PodEvent::killing(pod, container, message.clone()));
        let hook_seconds = match spec {
            Some(spec) => self.run_pre_stop_hook(pod, spec, kill).await,
            None => 0,
        };
        let grace = grace_left(kill.grace_period_seconds, hook_seconds);
        if let Err(error) = self.cri.stop_container(&kill.container_id, grace).await {
            tracing::warn!(pod = name, namespace, container, %error,
                "cannot stop container; will try again");
            return false;
        }
        if on_failure {
            self.warn_if_not_restarted(pod, kill).await;
        }
        true
    }

    /// K7: runs the container's preStop hook, if any and if the grace period
    /// leaves time for it, for at most the grace period; returns the whole
    /// seconds it took. A failure is logged in full and recorded as the
    /// kubelet records it (`FailedPreStopHook`, without the hook's output).
    async fn run_pre_stop_hook(&self, pod: &Pod, spec: &Container, kill: &ProbeKill) -> i64 {
        let Some(hook) = pre_stop_hook(spec) else {
            return 0;
        };
        if kill.grace_period_seconds <= 0 {
            return 0;
        }
        let (name, namespace, container) =
            (pod_name(pod), pod_namespace(pod), kill.container.as_str());
        let grace = Duration::from_secs(u64::try_from(kill.grace_period_seconds).unwrap_or(0));
        let target = HookTarget {
            pod,
            container,
            container_id: &kill.container_id,
            pod_ip: pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
        };
        tracing::info!(pod = name, namespace, container, "running preStop hook");
        let start = Instant::now();
        match tokio::time::timeout(grace, self.hooks.run(&hook, target, grace)).await {
            Ok(Ok(ran)) => {
                tracing::info!(pod = name, namespace, container, "preStop hook completed");
                if let Some(host) = ran.http_fallback {
                    self.events.record_opt(PodEvent::kill_warning(
                        pod,
                        None,
                        reasons::LIFECYCLE_HTTP_FALLBACK,
                        "PreStopHook",
                        format!("request to HTTPS lifecycle hook {host} got HTTP response, retry with HTTP succeeded"),
                    ));
                }
            }
            Ok(Err(failed)) => {
                tracing::warn!(pod = name, namespace, container, error = %failed, "preStop hook failed");
                // As the kubelet: the hook's output may hold secrets, so the
                // Event does not carry it; the log does.
                self.events.record_opt(PodEvent::kill_warning(
                    pod,
                    Some(container),
                    reasons::FAILED_PRE_STOP_HOOK,
                    "PreStopHook",
                    "PreStopHook failed".to_string(),
                ));
            }
            Err(_) => {
                tracing::info!(
                    pod = name,
                    namespace,
                    container,
                    grace_period_seconds = kill.grace_period_seconds,
                    "preStop hook not completed in grace period"
                );
            }
        }
        i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX)
    }

    /// K8, gate mode under `OnFailure`: the kubelet restarts the stopped
    /// container only if it exited non-zero; say so when it exited 0.
    async fn warn_if_not_restarted(&self, pod: &Pod, kill: &ProbeKill) {
        let exit_code = match self.cri.container_status(&kill.container_id).await {
            Ok(status) => status.exit_code,
            Err(_) => return,
        };
        if exit_code != 0 {
            return;
        }
        let container = kill.container.as_str();
        let note = format!(
            "Container {container} exited 0 after podprobe stopped it for a failed {} probe; \
             with restartPolicy OnFailure the kubelet does not restart it",
            podprobe_core::prober::manager::kill_reason(kill.kind)
        );
        tracing::warn!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            container,
            "{note}"
        );
        self.events.record_opt(PodEvent::kill_warning(
            pod,
            Some(container),
            reasons::PROBE_KILL_NOT_RESTARTED,
            "StopContainer",
            note,
        ));
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.killing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Each container instance once: one that failed to stop is tried again at
/// the next pod sync.
impl Killer for ContainerKiller {
    /// Starts killing `kill`'s container of `pod` unless it is already being
    /// killed; returns at once.
    fn kill(&self, pod: &Pod, kill: ProbeKill) {
        if !self.lock().insert(kill.container_id.clone()) {
            return;
        }
        let killer = self.clone();
        let pod = pod.clone();
        tokio::spawn(async move {
            if !killer.kill_container(&pod, &kill).await {
                // Not stopped: the next pod sync tries again.
                killer.lock().remove(&kill.container_id);
            }
        });
    }

    /// Forgets every killed ID but those in `listed` (the IDs pod statuses
    /// still name): a container killed again and again must not grow the set.
    /// The runtime client it shares with the prober forgets the others'
    /// facts with them (#39).
    fn retain(&self, listed: &HashSet<String>) {
        self.lock().retain(|id| listed.contains(id));
        self.cri.retain_containers(listed);
    }

    fn containers(&self) -> usize {
        self.lock().len() + self.cri.containers_known()
    }
}

/// Whether the kubelet restarts `container` after an exit it did not cause
/// only if the exit code is non-zero.
fn restarts_on_failure(pod: &Pod, container: &Container) -> bool {
    let pod_policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    RestartPolicy::of(container, pod_policy) == RestartPolicy::OnFailure
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(policy: Option<&str>, container_policy: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "restartPolicy": policy,
                "containers": [{"name": "app", "restartPolicy": container_policy}],
                "initContainers": [{"name": "side", "restartPolicy": "Always"}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn k8_only_on_failure_restarts_depend_on_the_exit_code() {
        let on_failure = pod(Some("OnFailure"), None);
        let app = find_container(on_failure.spec.as_ref().unwrap(), "app")
            .unwrap()
            .container;
        assert!(restarts_on_failure(&on_failure, app));
        let side = find_container(on_failure.spec.as_ref().unwrap(), "side")
            .unwrap()
            .container;
        assert!(
            !restarts_on_failure(&on_failure, side),
            "a sidecar always restarts"
        );
        let always = pod(None, None);
        assert!(!restarts_on_failure(
            &always,
            find_container(always.spec.as_ref().unwrap(), "app")
                .unwrap()
                .container
        ));
        let own = pod(Some("Always"), Some("OnFailure"));
        assert!(restarts_on_failure(
            &own,
            find_container(own.spec.as_ref().unwrap(), "app")
                .unwrap()
                .container
        ));
    }
}
