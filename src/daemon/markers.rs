//! Keeps each probed pod's markers where its probes' results ask (MK3,
//! MK4): after every sync of the pod (a result change, the 10 s resync),
//! the metadata patch of [`markers::metadata_patch`] is sent if there is
//! one, so a changed result is written once and a marker someone else
//! changed is put back at the next resync. At most one patch per pod is in
//! flight: a result that flips meanwhile is written by the first sync after
//! it completes (the resync at the latest), so a flapping probe costs the
//! API server one write per round trip at most. The same patch is not sent
//! again for [`SENT_HOLD`] while the watch has not shown it yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tokio::time::Instant;

use crate::kube::markers::MarkerApi;
use crate::manager::ProbeStateView;
use crate::markers::{self, PodMarkers};
use crate::server::metrics::Metrics;
use crate::util::pod::{pod_name, pod_namespace};

/// How long a sent patch is not sent again: the status resync period, by
/// which the watch has shown a write.
pub(super) const SENT_HOLD: Duration = Duration::from_secs(10);

/// The marker writes of the node's pods.
#[derive(Clone)]
pub(super) struct MarkerWriter {
    api: Arc<dyn MarkerApi>,
    metrics: Metrics,
    /// By pod UID: the last patch sent.
    sent: Arc<Mutex<HashMap<String, Sent>>>,
}

/// A patch sent for a pod.
struct Sent {
    patch: Value,
    at: Instant,
    /// Not answered yet.
    in_flight: bool,
}

impl MarkerWriter {
    pub(super) fn new(api: impl MarkerApi, metrics: Metrics) -> Self {
        MarkerWriter {
            api: Arc::new(api),
            metrics,
            sent: Arc::default(),
        }
    }

    /// Sends the patch that makes `pod` carry what `markers` ask for, as
    /// `view` has their probes' results, unless it carries it already or
    /// the same patch was sent less than [`SENT_HOLD`] ago.
    pub(super) fn write(&self, pod: &Pod, markers: &PodMarkers, view: &impl ProbeStateView) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let desired = markers.desired(pod, view);
        let Some(patch) = markers::metadata_patch(pod, &desired) else {
            lock(&self.sent).remove(&uid);
            return;
        };
        let now = Instant::now();
        {
            let mut sent = lock(&self.sent);
            if let Some(last) = sent.get(&uid)
                && (last.in_flight || (last.patch == patch && now < last.at + SENT_HOLD))
            {
                return;
            }
            sent.insert(
                uid.clone(),
                Sent {
                    patch: patch.clone(),
                    at: now,
                    in_flight: true,
                },
            );
        }
        let (namespace, name) = (pod_namespace(pod).to_string(), pod_name(pod).to_string());
        let writer = self.clone();
        tokio::spawn(async move {
            match writer.api.patch_metadata(&namespace, &name, &patch).await {
                Ok(()) => {
                    if let Some(sent) = lock(&writer.sent).get_mut(&uid) {
                        sent.in_flight = false;
                    }
                    writer.metrics.marker_write(true);
                    tracing::info!(%namespace, pod = %name, markers = %patch["metadata"], "markers written");
                }
                Err(error) => {
                    writer.metrics.marker_write(false);
                    // Sent again at the next resync.
                    lock(&writer.sent).remove(&uid);
                    tracing::warn!(%namespace, pod = %name, %error, "cannot write the pod's markers; retrying at the next resync");
                }
            }
        });
    }

    /// Forgets a deleted pod.
    pub(super) fn forget(&self, uid: &str) {
        lock(&self.sent).remove(uid);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::future::BoxFuture;

    use super::*;
    use crate::kube::apiclient::RequestError;
    use crate::manager::PodProbes;
    use crate::markers::MarkerKeys;
    use crate::probe::ProbeKind;
    use crate::probe::spec::extension::markers::{Marker, MarkerTarget};
    use crate::results::CachedResult;
    use crate::testing::{container, epoch, pod, pod_status, probe_spec, running};

    /// Counts patches and never answers them.
    #[derive(Clone, Default)]
    struct Stalled(Arc<AtomicUsize>);

    impl MarkerApi for Stalled {
        fn patch_metadata<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a Value,
        ) -> BoxFuture<'a, Result<(), RequestError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::pending())
        }
    }

    struct Cached(CachedResult);

    impl ProbeStateView for Cached {
        fn cached(&self, _: ProbeKind, _: &str) -> Option<CachedResult> {
            Some(self.0)
        }
        fn has_worker(&self, _: &str, _: ProbeKind) -> bool {
            true
        }
    }

    /// MK4: a result that flips while a patch is in flight waits for it.
    #[tokio::test(start_paused = true)]
    async fn mk4_one_patch_per_pod_is_in_flight() {
        let mut spec = probe_spec(1, 0, 1, 1);
        spec.markers = vec![Marker {
            target: MarkerTarget::Label,
            key: "role".into(),
            on_success: Some("primary".into()),
            on_failure: Some("replica".into()),
        }];
        let mut probes = PodProbes::new();
        probes.insert("app", ProbeKind::Readiness, spec);
        let (markers, _) = PodMarkers::of(&probes, &MarkerKeys::new(["role".to_string()]));
        let mut pod = pod("u1", vec![container("app")], vec![]);
        pod.status = Some(pod_status(
            vec![running("app", "c://1", epoch(), Some(true))],
            vec![],
        ));
        let api = Stalled::default();
        let writer = MarkerWriter::new(api.clone(), Metrics::new());
        writer.write(&pod, &markers, &Cached(CachedResult::Success));
        tokio::task::yield_now().await;
        writer.write(&pod, &markers, &Cached(CachedResult::Failure));
        tokio::time::advance(SENT_HOLD * 2).await;
        writer.write(&pod, &markers, &Cached(CachedResult::Failure));
        tokio::task::yield_now().await;
        assert_eq!(api.0.load(Ordering::SeqCst), 1);
    }
}
