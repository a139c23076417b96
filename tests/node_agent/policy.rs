//! Restart policy as the kubelet applies it: a sidecar (an init container
//! with `restartPolicy: Always`) follows its own policy, every other
//! container the pod's (`Always` when unset).

use k8s_openapi::api::core::v1::{Container, Pod};

/// Whether `container` is a restartable init container (a sidecar).
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The pod's `spec.restartPolicy`, `Always` when unset.
pub fn pod_restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether a regular container or a sidecar that exited with `exit_code`
/// is started again. `probe_kill`: whether podprobe stopped it for a failed
/// liveness or startup probe (`None` while unknown). podprobe's node-agent
/// contract (K8): a probe-killed container is restarted whatever its exit
/// code, as the kubelet restarts a container it kills for a probe, so under
/// `OnFailure` an exit 0 restarts it unless it is known not to be a probe
/// kill (while unknown, the caller waits to find out).
pub fn should_restart(
    pod: &Pod,
    container: &Container,
    exit_code: i32,
    probe_kill: Option<bool>,
) -> bool {
    if is_sidecar(container) {
        return true;
    }
    match pod_restart_policy(pod) {
        "Never" => false,
        "OnFailure" => exit_code != 0 || probe_kill != Some(false),
        _ => true,
    }
}

/// Whether a classic init container that failed is run again: unless the
/// pod's policy is `Never` (`Always` acts as `OnFailure` for init containers).
pub fn init_retries(pod: &Pod) -> bool {
    pod_restart_policy(pod) != "Never"
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(policy: Option<&str>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: policy.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn regular_containers_follow_the_pod_policy() {
        let c = Container::default();
        let own = Some(false);
        assert!(should_restart(&pod(None), &c, 0, own));
        assert!(should_restart(&pod(Some("Always")), &c, 0, own));
        assert!(!should_restart(&pod(Some("OnFailure")), &c, 0, own));
        assert!(should_restart(&pod(Some("OnFailure")), &c, 1, own));
        assert!(!should_restart(&pod(Some("Never")), &c, 1, own));
    }

    #[test]
    fn k8_a_probe_killed_container_restarts_whatever_its_exit_code() {
        let c = Container::default();
        let on_failure = pod(Some("OnFailure"));
        assert!(should_restart(&on_failure, &c, 0, Some(true)));
        assert!(
            should_restart(&on_failure, &c, 0, None),
            "undecided until known"
        );
        assert!(!should_restart(&pod(Some("Never")), &c, 0, Some(true)));
    }

    #[test]
    fn sidecars_always_restart() {
        let sidecar = Container {
            restart_policy: Some("Always".into()),
            ..Default::default()
        };
        assert!(is_sidecar(&sidecar));
        assert!(should_restart(
            &pod(Some("Never")),
            &sidecar,
            0,
            Some(false)
        ));
    }

    #[test]
    fn init_containers_retry_unless_never() {
        assert!(init_retries(&pod(None)));
        assert!(init_retries(&pod(Some("OnFailure"))));
        assert!(!init_retries(&pod(Some("Never"))));
    }
}
