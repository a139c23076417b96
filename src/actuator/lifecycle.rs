//! A container's preStop hook, run before a probe kill as the kubelet's
//! `killContainer` runs it (K7) with the handler rules of its
//! `pkg/kubelet/lifecycle` (L1-L3).
//!
//! The hook comes from the pod spec (`lifecycle.preStop`) in both modes: it
//! is what the kubelet would run before stopping the container itself. What
//! is pure here (reading the hook from the spec, the messages, the grace
//! period left after it) is apart from [`HookRunner`], which does the I/O.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::probe::http;
use crate::runtime::cri::CriClient;
use podprobe_core::spec::MAX_OUTPUT_BYTES;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::probe_spec::{HttpGetAction, Scheme, http_get_action};
use podprobe_core::util::gofmt::go_quote;

/// The `User-Agent` product of lifecycle hooks (`kube-lifecycle/MAJOR.MINOR`).
const USER_AGENT_PRODUCT: &str = "kube-lifecycle";

/// Go's transport error when an HTTPS request gets a plain HTTP answer: the
/// one error after which the kubelet retries a hook over HTTP (L2).
const HTTP_RESPONSE_TO_HTTPS: &str = "server gave HTTP response to HTTPS client";

/// The preStop hook of a container, read from its spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreStopHook {
    /// `exec`: the command as written (the kubelet expands no `$(VAR)` in
    /// hooks, unlike probes).
    Exec(Vec<String>),
    /// `httpGet`, defaulted, with its port resolved; or why it cannot be
    /// sent (a port name the container does not declare), which makes the
    /// hook fail when it runs, as in the kubelet.
    HttpGet {
        path: String,
        action: Result<Box<HttpGetAction>, String>,
    },
    /// `sleep`: seconds to wait.
    Sleep(i64),
    /// A handler the kubelet cannot run (`tcpSocket`, deprecated and
    /// accepted by the API server, or none at all).
    Invalid,
}

/// The preStop hook of `container`, if it has one.
pub fn pre_stop_hook(container: &Container) -> Option<PreStopHook> {
    let handler = container.lifecycle.as_ref()?.pre_stop.as_ref()?;
    Some(hook_of(handler, container))
}

fn hook_of(handler: &LifecycleHandler, container: &Container) -> PreStopHook {
    if let Some(exec) = &handler.exec {
        return PreStopHook::Exec(exec.command.clone().unwrap_or_default());
    }
    if let Some(get) = &handler.http_get {
        return PreStopHook::HttpGet {
            path: get.path.clone().unwrap_or_default(),
            action: (http_get_action(get, container).map(Box::new)).map_err(|e| e.to_string()),
        };
    }
    if let Some(sleep) = &handler.sleep {
        return PreStopHook::Sleep(sleep.seconds);
    }
    PreStopHook::Invalid
}

/// K7: the grace period `StopContainer` gets after a preStop hook that took
/// `hook_seconds` (whole seconds, rounded down, as the kubelet counts them)
/// out of `grace_seconds`: the rest, never below the kubelet's 2 s minimum.
pub fn grace_left(grace_seconds: i64, hook_seconds: i64) -> i64 {
    grace_seconds
        .saturating_sub(hook_seconds)
        .max(podprobe_core::prober::manager::MINIMUM_GRACE_PERIOD_SECONDS)
}

/// The pod as the kubelet's `format.Pod` names it in hook messages:
/// `name_namespace(uid)`.
pub fn format_pod(pod: &Pod) -> String {
    let meta = &pod.metadata;
    format!(
        "{}_{}({})",
        meta.name.as_deref().unwrap_or_default(),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default()
    )
}

/// Why a hook failed: the kubelet's message for its log, which names the
/// handler, the container and the pod (L1-L3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookFailed(pub String);

/// What a hook run needs to know about its container.
#[derive(Debug, Clone, Copy)]
pub struct HookTarget<'a> {
    pub pod: &'a Pod,
    pub container: &'a str,
    /// Container ID as in the pod status (`containerd://abc`).
    pub container_id: &'a str,
    /// The pod's IP, the host of an `httpGet` hook without its own.
    pub pod_ip: Option<&'a str>,
}

/// A hook run that succeeded; `http_fallback` names the `host:port` of an
/// HTTPS hook that only succeeded over HTTP (the kubelet records a Warning
/// `LifecycleHTTPFallback` event for it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookRan {
    pub http_fallback: Option<String>,
}

/// Runs hooks: exec through CRI, `httpGet` from the node, `sleep` in place.
#[derive(Debug, Clone)]
pub struct HookRunner {
    cri: CriClient,
    destinations: Destinations,
    user_agent: String,
}

impl HookRunner {
    /// `kube_version` is `MAJOR.MINOR`, sent as `kube-lifecycle/MAJOR.MINOR`;
    /// `httpGet` hooks connect only where `destinations` allows, and name a
    /// `host` of their own only where it allows that host (as probes do).
    pub fn new(cri: CriClient, destinations: Destinations, kube_version: &str) -> Self {
        HookRunner {
            cri,
            destinations,
            user_agent: format!("{USER_AGENT_PRODUCT}/{kube_version}"),
        }
    }

    /// Runs `hook` for `target` to its end; the caller bounds it by the
    /// grace period (K7), which also bounds the exec command in the runtime.
    pub async fn run(
        &self,
        hook: &PreStopHook,
        target: HookTarget<'_>,
        grace: Duration,
    ) -> Result<HookRan, HookFailed> {
        let pod = format_pod(target.pod);
        let container = target.container;
        match hook {
            PreStopHook::Exec(command) => self
                .exec(command, target.container_id, grace)
                .await
                .map(|()| HookRan::default())
                .map_err(|(error, output)| {
                    HookFailed(format!(
                        "Exec lifecycle hook ({}) for Container {} in Pod {} failed - error: {error}, message: {}",
                        go_slice(command),
                        go_quote(container),
                        go_quote(&pod),
                        go_quote(&output)
                    ))
                }),
            PreStopHook::HttpGet { path, action } => {
                self.http_get(action, target.pod_ip).await.map_err(|error| {
                    HookFailed(format!(
                        "HTTP lifecycle hook ({path}) for Container {} in Pod {} failed - error: {error}",
                        go_quote(container),
                        go_quote(&pod)
                    ))
                })
            }
            PreStopHook::Sleep(seconds) => {
                // L3: the whole sleep; the grace period cuts it short.
                let seconds = u64::try_from(*seconds).unwrap_or(0);
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                Ok(HookRan::default())
            }
            PreStopHook::Invalid => Err(HookFailed(
                "Cannot run handler: invalid handler: no exec, httpGet or sleep action".to_string(),
            )),
        }
    }

    /// L1: the command in the container; a non-zero exit fails the hook.
    /// Error and output as the kubelet's CRI client words them.
    async fn exec(
        &self,
        command: &[String],
        container_id: &str,
        grace: Duration,
    ) -> Result<(), (String, String)> {
        // Hooks do not take the probes' exec slots: a pod whose hook runs
        // for its whole grace period must not hold other pods' probes back.
        let response = self
            .cri
            .exec_sync_unslotted(container_id, command, grace)
            .await
            .map_err(|e| (e.to_string(), String::new()))?;
        if response.exit_code == 0 {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&response.stderr);
        let error = format!(
            "command '{}' exited with {}: {}",
            command.join(" "),
            response.exit_code,
            truncate(&stderr)
        );
        let mut output = response.stdout;
        output.extend_from_slice(&response.stderr);
        Err((error, truncate(&String::from_utf8_lossy(&output))))
    }

    /// L2: one GET as the kubelet's lifecycle client sends it; any response
    /// is a success. An HTTPS hook answered in plain HTTP is sent again over
    /// HTTP without its `Authorization` header; if that fails too, the first
    /// error stands.
    async fn http_get(
        &self,
        action: &Result<Box<HttpGetAction>, String>,
        pod_ip: Option<&str>,
    ) -> Result<HookRan, String> {
        let action = action.as_ref().map_err(Clone::clone)?;
        if let Some(host) = action.host.as_deref().filter(|h| !h.is_empty())
            && !self.destinations.allows_host(host)
        {
            return Err(format!(
                "host {} is refused by podprobe (--allow-probe-hosts)",
                go_quote(host)
            ));
        }
        let pod_ip = match (action.host.as_deref(), pod_ip) {
            (Some(host), _) if !host.is_empty() => host,
            (_, Some(ip)) => ip,
            _ => return Err("failed to find networking container: the pod has no IP".to_string()),
        };
        let first = http::get_and_discard(action, pod_ip, &self.user_agent, &self.destinations);
        let error = match first.await {
            Ok(()) => return Ok(HookRan::default()),
            Err(error) => error,
        };
        if action.scheme != Scheme::Https || !error.contains(HTTP_RESPONSE_TO_HTTPS) {
            return Err(error);
        }
        let plain = HttpGetAction {
            scheme: Scheme::Http,
            headers: action
                .headers
                .iter()
                .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
                .cloned()
                .collect(),
            ..HttpGetAction::clone(action)
        };
        match http::get_and_discard(&plain, pod_ip, &self.user_agent, &self.destinations).await {
            Ok(()) => Ok(HookRan {
                http_fallback: Some(podprobe_core::spec::join_host_port(pod_ip, action.port)),
            }),
            Err(_) => Err(error),
        }
    }
}

/// Go's `%v` of a string slice: `[a b c]`.
fn go_slice(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// At most [`MAX_OUTPUT_BYTES`] of a pod-controlled text, cut on a
/// character boundary.
fn truncate(text: &str) -> String {
    text[..text.floor_char_boundary(MAX_OUTPUT_BYTES)].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(lifecycle: serde_json::Value) -> Container {
        serde_json::from_value(json!({
            "name": "app",
            "ports": [{"name": "http", "containerPort": 8080}],
            "lifecycle": {"preStop": lifecycle},
        }))
        .unwrap()
    }

    #[test]
    fn l1_exec_hook_keeps_the_command_as_written() {
        let hook = pre_stop_hook(&container(
            json!({"exec": {"command": ["sh", "-c", "echo $(X)"]}}),
        ));
        assert_eq!(
            hook,
            Some(PreStopHook::Exec(vec![
                "sh".into(),
                "-c".into(),
                "echo $(X)".into()
            ]))
        );
    }

    #[test]
    fn l2_http_hook_resolves_named_ports_and_defaults() {
        let hook = pre_stop_hook(&container(
            json!({"httpGet": {"path": "/drain", "port": "http"}}),
        ));
        let Some(PreStopHook::HttpGet { path, action }) = hook else {
            panic!("{hook:?}");
        };
        assert_eq!(path, "/drain");
        let action = action.unwrap();
        assert_eq!((action.port, action.scheme), (8080, Scheme::Http));
        let hook = pre_stop_hook(&container(
            json!({"httpGet": {"path": "/", "port": "nope"}}),
        ));
        let Some(PreStopHook::HttpGet { action, .. }) = hook else {
            panic!("{hook:?}");
        };
        assert!(action.unwrap_err().contains("nope"));
    }

    #[test]
    fn l3_sleep_and_invalid_hooks() {
        assert_eq!(
            pre_stop_hook(&container(json!({"sleep": {"seconds": 5}}))),
            Some(PreStopHook::Sleep(5))
        );
        assert_eq!(
            pre_stop_hook(&container(json!({"tcpSocket": {"port": 80}}))),
            Some(PreStopHook::Invalid)
        );
        let plain: Container = serde_json::from_value(json!({"name": "app"})).unwrap();
        assert_eq!(pre_stop_hook(&plain), None);
    }

    #[test]
    fn k7_grace_left_after_the_hook_never_below_the_minimum() {
        assert_eq!(grace_left(30, 0), 30);
        assert_eq!(grace_left(30, 12), 18);
        assert_eq!(grace_left(30, 29), 2);
        assert_eq!(grace_left(30, 45), 2);
        assert_eq!(grace_left(i64::MAX, -1), i64::MAX);
    }

    #[test]
    fn pods_are_named_as_format_pod_names_them() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        }))
        .unwrap();
        assert_eq!(format_pod(&pod), "web_shop(u-1)");
    }

    #[test]
    fn hook_output_is_bounded_on_a_character_boundary() {
        let text = "é".repeat(MAX_OUTPUT_BYTES);
        let cut = truncate(&text);
        assert!(cut.len() <= MAX_OUTPUT_BYTES && cut.len() >= MAX_OUTPUT_BYTES - 1);
    }
}
