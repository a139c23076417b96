//! Keeps each probed pod's markers where its probes' results ask (MK3,
//! MK4): after every sync of the pod (a result change, the 10 s resync),
//! the metadata patch of [`markers::metadata_patch`] is sent if there is
//! one, so a changed result is written once and a marker someone else
//! changed is put back at the next resync. One patch per pod is in flight;
//! the same patch is not sent again for [`SENT_HOLD`] while the watch has
//! not shown it yet.

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
    /// By pod UID: the patch in flight or sent, and when.
    sent: Arc<Mutex<HashMap<String, (Value, Instant)>>>,
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
            if let Some((last, at)) = sent.get(&uid)
                && *last == patch
                && now < *at + SENT_HOLD
            {
                return;
            }
            sent.insert(uid.clone(), (patch.clone(), now));
        }
        let (namespace, name) = (pod_namespace(pod).to_string(), pod_name(pod).to_string());
        let writer = self.clone();
        tokio::spawn(async move {
            match writer.api.patch_metadata(&namespace, &name, &patch).await {
                Ok(()) => {
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
