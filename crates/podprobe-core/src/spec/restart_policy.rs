//! Whether the kubelet restarts a container: one home for the rule that
//! the worker (D7), the probe-kill message (K2) and the kill's warning about
//! `OnFailure` (K8) each ask a question of. The kubelet's counterparts are
//! `podutil.ContainerShouldRestart` and `kubecontainer.ShouldContainerBeRestarted`.

use k8s_openapi::api::core::v1::Container;

/// A container's effective restart policy: its own `restartPolicy` (a
/// sidecar's is `Always`), else the pod's, else `Always`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    fn parse(value: &str) -> Option<RestartPolicy> {
        match value {
            "Always" => Some(RestartPolicy::Always),
            "OnFailure" => Some(RestartPolicy::OnFailure),
            "Never" => Some(RestartPolicy::Never),
            _ => None,
        }
    }

    /// `container`'s policy in a pod whose `restartPolicy` is
    /// `pod_restart_policy`. A value the API server would reject falls back
    /// to the next one, as upstream's `switch` does.
    pub fn of(container: &Container, pod_restart_policy: Option<&str>) -> RestartPolicy {
        container
            .restart_policy
            .as_deref()
            .and_then(RestartPolicy::parse)
            .or_else(|| pod_restart_policy.and_then(RestartPolicy::parse))
            .unwrap_or(RestartPolicy::Always)
    }

    /// Whether a container exiting with `exit_code` is restarted.
    pub fn restarts_after(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// Whether the kubelet would restart `container` after it exited with
/// `exit_code` (`podutil.ContainerShouldRestart`, D7): the container's first
/// matching restart rule with action `Restart`, else its effective
/// [`RestartPolicy`]. Rules are only read when the container sets a
/// `restartPolicy`, as upstream does.
pub fn container_should_restart(
    container: &Container,
    pod_restart_policy: Option<&str>,
    exit_code: i32,
) -> bool {
    if container.restart_policy.is_some()
        && matching_restart_rule_action(container, exit_code) == Some("Restart")
    {
        return true;
    }
    RestartPolicy::of(container, pod_restart_policy).restarts_after(exit_code)
}

/// Action of the first `restartPolicyRules` entry matching `exit_code`.
fn matching_restart_rule_action(container: &Container, exit_code: i32) -> Option<&str> {
    let rules = container
        .restart_policy_rules
        .as_deref()
        .unwrap_or_default();
    rules.iter().find_map(|rule| {
        let exit_codes = rule.exit_codes.as_ref()?;
        let listed = exit_codes
            .values
            .as_deref()
            .unwrap_or_default()
            .contains(&exit_code);
        let matched = match exit_codes.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        };
        matched.then_some(rule.action.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(policy: Option<&str>) -> Container {
        Container {
            name: "app".into(),
            restart_policy: policy.map(Into::into),
            ..Container::default()
        }
    }

    #[test]
    fn the_containers_policy_wins_then_the_pods_then_always() {
        let policies = [None, Some("Always"), Some("OnFailure"), Some("Never")];
        for own in policies {
            for pod in policies {
                let want = match own.or(pod) {
                    Some("OnFailure") => RestartPolicy::OnFailure,
                    Some("Never") => RestartPolicy::Never,
                    _ => RestartPolicy::Always,
                };
                assert_eq!(
                    RestartPolicy::of(&container(own), pod),
                    want,
                    "{own:?} {pod:?}"
                );
            }
        }
        assert_eq!(
            RestartPolicy::of(&container(Some("Bogus")), Some("Never")),
            RestartPolicy::Never,
            "an invalid value falls back to the pod's"
        );
    }

    #[test]
    fn d7_exit_codes_decide_only_under_on_failure() {
        for exit in [0, 1, 137] {
            assert!(RestartPolicy::Always.restarts_after(exit));
            assert!(!RestartPolicy::Never.restarts_after(exit));
            assert_eq!(RestartPolicy::OnFailure.restarts_after(exit), exit != 0);
        }
    }
}
