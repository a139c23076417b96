//! The node-scoped pod watch: every pod bound to this node (field selector
//! `spec.nodeName=<node>`, plus the optional label selector), kept in a
//! [`PodStore`] by UID (through its one [`PodStoreWriter`], which the
//! watch holds) and turned into a stream of [`PodUpdate`]s. The
//! watch reconnects (relisting when it must) on API errors with [`RetryPolicy::WATCH`]'s backoff; a relist that no longer
//! contains a pod reports it as deleted, so no worker outlives its pod.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use podprobe_core::prober::pod_store::PodStoreWriter;
use podprobe_core::spec::probe_spec::{UnknownProbeField, unknown_probe_fields};
use podprobe_core::util::backoff::RetryPolicy;

/// A Pod as the watch decodes it: the typed object and the probe fields it
/// had that the types dropped (V10). Decoding goes through a JSON value to
/// see those fields; only the probes are compared. `metadata.managedFields`
/// is left out: podprobe never reads it, and decoded (a tree of JSON maps)
/// it was half of the heap a watched pod costs (bench/RESULTS.md, churn
/// soak).
#[derive(Debug, Clone, Default)]
pub struct WatchedPod {
    pub pod: Pod,
    pub unknown_probe_fields: Vec<UnknownProbeField>,
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut raw = serde_json::Value::deserialize(deserializer)?;
        if let Some(metadata) = raw
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            metadata.remove("managedFields");
        }
        let unknown_probe_fields = unknown_probe_fields(&raw);
        let pod = Pod::deserialize(raw).map_err(D::Error::custom)?;
        Ok(WatchedPod {
            pod,
            unknown_probe_fields,
        })
    }
}

impl k8s_openapi::Resource for WatchedPod {
    const API_VERSION: &'static str = Pod::API_VERSION;
    const GROUP: &'static str = Pod::GROUP;
    const KIND: &'static str = Pod::KIND;
    const VERSION: &'static str = Pod::VERSION;
    const URL_PATH_SEGMENT: &'static str = Pod::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for WatchedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.pod.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.pod.metadata
    }
}

/// A pod appeared or changed, or went away.
#[derive(Debug, Clone)]
pub enum PodUpdate {
    /// With the probe fields of the pod that podprobe's types lack (V10).
    Applied(Arc<Pod>, Vec<UnknownProbeField>),
    Deleted(Arc<Pod>),
    /// The watch (re)listed every pod; the cache now holds exactly these.
    Synced,
}

/// Applies watcher events to the cache and says what changed for the daemon.
/// Pure over the cache, so it is tested without an API server.
#[derive(Debug, Default)]
struct Applier {
    /// UIDs seen since the last `Init`, while a relist is in progress.
    listing: Option<HashSet<String>>,
}

impl Applier {
    fn apply(&mut self, cache: &mut PodStoreWriter, event: Event<WatchedPod>) -> Vec<PodUpdate> {
        match event {
            Event::Init => {
                self.listing = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(watched) => {
                if let (Some(listing), Some(uid)) = (&mut self.listing, &watched.pod.metadata.uid) {
                    listing.insert(uid.clone());
                }
                vec![Self::applied(cache, watched)]
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let mut events: Vec<PodUpdate> = cache
                    .retain_listed(&listed)
                    .into_iter()
                    .map(PodUpdate::Deleted)
                    .collect();
                events.push(PodUpdate::Synced);
                events
            }
            Event::Apply(watched) => vec![Self::applied(cache, watched)],
            Event::Delete(WatchedPod { pod, .. }) => {
                cache.remove(&pod);
                vec![PodUpdate::Deleted(Arc::new(pod))]
            }
        }
    }

    fn applied(cache: &mut PodStoreWriter, watched: WatchedPod) -> PodUpdate {
        let pod = Arc::new(watched.pod);
        cache.insert(pod.clone());
        PodUpdate::Applied(pod, watched.unknown_probe_fields)
    }
}

/// Watches the pods `api` lists under `config` (field and label selectors),
/// keeps the store `cache` writes current and yields what changed. Never
/// ends: API errors are logged on the transition and retried with
/// [`RetryPolicy::WATCH`]'s backoff (relisting as needed).
pub fn watch(
    api: Api<WatchedPod>,
    config: watcher::Config,
    mut cache: PodStoreWriter,
) -> impl Stream<Item = PodUpdate> + Send {
    let mut applier = Applier::default();
    let mut failing = false;
    watcher::watcher(api, config)
        .backoff(WatchBackoff::new(RetryPolicy::WATCH))
        .flat_map(move |event| {
            let events = match event {
                Ok(event) => {
                    if failing && matches!(event, Event::InitDone) {
                        tracing::info!(
                            pods = cache.as_reader().uids().len(),
                            "pod watch recovered"
                        );
                        failing = false;
                    }
                    applier.apply(&mut cache, event)
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(%error, "pod watch failed; retrying with backoff");
                        failing = true;
                    } else {
                        tracing::debug!(%error, "pod watch still failing");
                    }
                    Vec::new()
                }
            };
            futures::stream::iter(events)
        })
}

/// [`RetryPolicy`] as kube-runtime's watcher backoff: the delays of
/// consecutive failures, reset by the watcher once it receives again.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    policy: RetryPolicy,
    failures: u32,
}

impl WatchBackoff {
    pub fn new(policy: RetryPolicy) -> Self {
        WatchBackoff {
            policy,
            failures: 0,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(self.policy.jittered(self.failures))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use podprobe_core::prober::worker::StatusSource;

    fn pod(uid: &str, ip: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{uid}")),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                pod_ip: Some(ip.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn watched(pod: Pod) -> WatchedPod {
        WatchedPod {
            pod,
            unknown_probe_fields: Vec::new(),
        }
    }

    #[test]
    fn a_watched_pod_is_kept_without_its_managed_fields() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "a",
                "uid": "uid-a",
                "managedFields": [{
                    "manager": "kubelet",
                    "operation": "Update",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}}},
                }],
            },
        });
        let watched: WatchedPod = serde_json::from_value(json).expect("decodes");
        assert_eq!(watched.pod.metadata.name.as_deref(), Some("a"));
        assert_eq!(watched.pod.metadata.managed_fields, None);
    }

    #[test]
    fn v10_the_watch_decodes_a_pod_and_the_probe_fields_its_types_lack() {
        let json = r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "i",
                "readinessProbe": {"grpc": {"port": 9, "mode": "TLS", "tlsServerName": "x"}}}]}}"#;
        let watched: WatchedPod = serde_json::from_str(json).unwrap();
        assert_eq!(watched.pod.metadata.uid.as_deref(), Some("u"));
        let grpc = watched.pod.spec.unwrap().containers[0]
            .readiness_probe
            .clone()
            .and_then(|p| p.grpc)
            .unwrap();
        assert_eq!(grpc.mode.as_deref(), Some("TLS"));
        let fields: Vec<_> = watched
            .unknown_probe_fields
            .iter()
            .map(|u| (u.container.as_str(), u.field.as_str()))
            .collect();
        assert_eq!(fields, [("app", "readinessProbe.grpc.tlsServerName")]);
        let mut events = Applier::default().apply(
            &mut PodStoreWriter::new(),
            Event::Apply(serde_json::from_str(json).unwrap()),
        );
        let Some(PodUpdate::Applied(_, unknown)) = events.pop() else {
            panic!("an applied pod");
        };
        assert_eq!(unknown, watched.unknown_probe_fields);
    }

    fn names(events: &[PodUpdate]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                PodUpdate::Applied(p, _) => {
                    format!("applied {}", p.metadata.uid.as_deref().unwrap())
                }
                PodUpdate::Deleted(p) => format!("deleted {}", p.metadata.uid.as_deref().unwrap()),
                PodUpdate::Synced => "synced".to_string(),
            })
            .collect()
    }

    #[test]
    fn status_source_returns_latest_status_by_uid() {
        let mut writer = PodStoreWriter::new();
        let cache = writer.as_reader();
        let mut applier = Applier::default();
        applier.apply(&mut writer, Event::Apply(watched(pod("a", "10.0.0.1"))));
        applier.apply(&mut writer, Event::Apply(watched(pod("a", "10.0.0.2"))));
        let status = cache.pod_status("a").unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.2"));
        assert!(cache.pod_status("b").is_none());
        applier.apply(&mut writer, Event::Delete(watched(pod("a", "10.0.0.2"))));
        assert!(cache.pod_status("a").is_none());
    }

    #[test]
    fn relist_reports_pods_missing_from_it_as_deleted() {
        let mut writer = PodStoreWriter::new();
        let cache = writer.as_reader();
        let mut applier = Applier::default();
        let mut before = applier.apply(&mut writer, Event::Apply(watched(pod("a", "10.0.0.1"))));
        before.extend(applier.apply(&mut writer, Event::Apply(watched(pod("b", "10.0.0.2")))));
        assert_eq!(names(&before), ["applied a", "applied b"], "not synced yet");
        let mut events = applier.apply(&mut writer, Event::Init);
        events.extend(applier.apply(&mut writer, Event::InitApply(watched(pod("b", "10.0.0.2")))));
        events.extend(applier.apply(&mut writer, Event::InitApply(watched(pod("c", "10.0.0.3")))));
        events.extend(applier.apply(&mut writer, Event::InitDone));
        assert_eq!(
            names(&events),
            ["applied b", "applied c", "deleted a", "synced"]
        );
        assert_eq!(cache.uids(), HashSet::from(["b".into(), "c".into()]));
    }

    #[test]
    fn watch_backoff_grows_to_five_seconds_and_resets() {
        use kube::runtime::utils::Backoff;

        let mut backoff = WatchBackoff::new(RetryPolicy::WATCH);
        let delays: Vec<_> = backoff.by_ref().take(5).collect();
        assert!(
            delays[0] >= Duration::from_millis(800) && delays[0] <= Duration::from_millis(1200)
        );
        assert!(delays[4] >= Duration::from_secs(5) && delays[4] <= Duration::from_millis(7500));
        backoff.reset();
        assert!(backoff.next().unwrap() <= Duration::from_millis(1200));
    }
}
