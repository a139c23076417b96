//! Keeps each probed pod's markers where its probes' results ask (MK3,
//! MK4): after every sync of the pod (a result change, the 10 s resync),
//! the metadata patch of [`markers::metadata_patch`] is sent if there is
//! one, so a changed result is written once and a marker someone else
//! changed is put back at the next resync. At most one patch per pod is in
//! flight, and each pod's patches keep to a rate of their own
//! ([`WRITE_BURST`] at once, then one per [`WRITE_INTERVAL`]): a result
//! that flips meanwhile, or faster, is written by the first sync after the
//! answer that finds a token. That sync derives the patch from the results
//! it sees, so nothing stale is ever sent and no timer waits for the
//! bucket: a flapping probe costs the API server a few writes, and the
//! result it settles on is written within 15 s of its last flip (by the
//! next resync, or the one after it when the bucket was still empty). The same patch is not
//! sent again for [`SENT_HOLD`] while the watch has not shown it yet.
//! Node-wide, at most [`WRITES_IN_FLIGHT`] patches are in flight, in the
//! order the pods asked; a pod waiting for its turn sends what its latest
//! sync asked for when the turn comes, so waiting never makes a patch stale.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tokio::time::Instant;

use super::marker_metrics::{MarkerMetrics, MarkerOutcome};
use crate::api::marker_patch::MarkerApi;
use crate::api::turns::Turns;
use podprobe_core::prober::markers::{self, Desired};
use podprobe_core::util::pod::{pod_name, pod_namespace};
use podprobe_core::util::rate_limit::TokenBucket;

/// How long a sent patch is not sent again: the status resync period, by
/// which the watch has shown a write.
pub(super) const SENT_HOLD: Duration = Duration::from_secs(10);

/// Marker patches one pod may send at once: a result and its reversal (a
/// blip) are both written without waiting.
pub(super) const WRITE_BURST: u32 = 2;

/// One more marker patch per pod this often, beyond [`WRITE_BURST`]: half
/// the resync period, so a resync finds a token unless the bucket ran dry
/// less than 5 s before, and a pod flapping for good costs 12 writes a minute rather than
/// one per round trip (110 such pods: 22 a second, under half of the
/// client's 50, which the status patches share).
pub(super) const WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// Marker patches in flight at most, node-wide, as the status patches'
/// `patcher::PATCHES_IN_FLIGHT`: without a bound, the patches in flight are
/// the write rate times the API server's answer time, and 300 pods turning
/// ready under a loaded API server held a few hundred, each with its answer
/// (bench/RESULTS.md, #39).
pub(super) const WRITES_IN_FLIGHT: usize = 8;

/// The marker writes of the node's pods.
#[derive(Clone)]
pub(super) struct MarkerWriter {
    api: Arc<dyn MarkerApi>,
    metrics: MarkerMetrics,
    /// [`WRITES_IN_FLIGHT`] turns, first come, first served.
    turns: Arc<Turns>,
    /// By pod UID, from the pod's first write until it is forgotten.
    pods: Arc<Mutex<HashMap<String, PodWrites>>>,
}

/// The marker writes of one pod.
struct PodWrites {
    /// Kept while the pod lives, whatever it carries: a pod whose markers
    /// flap back to what it carries must not get a fresh burst.
    bucket: TokenBucket,
    /// The last patch sent, until it failed or the pod carries what its
    /// markers ask for.
    sent: Option<Sent>,
}

/// A patch sent for a pod.
struct Sent {
    patch: Value,
    at: Instant,
    /// Not answered yet.
    in_flight: bool,
    /// Waiting for a turn: a newer patch the pod asks for replaces it.
    queued: bool,
}

impl MarkerWriter {
    pub(super) fn new(api: impl MarkerApi, metrics: MarkerMetrics) -> Self {
        let turns = Arc::new(Turns::new(WRITES_IN_FLIGHT, metrics.turns.clone()));
        MarkerWriter {
            api: Arc::new(api),
            metrics,
            turns,
            pods: Arc::default(),
        }
    }

    /// Sends the patch that makes `pod` carry the `desired` markers (what
    /// its markers ask for, as their probes' results stand), unless it carries it already, the
    /// same patch was sent less than [`SENT_HOLD`] ago, a patch is in flight
    /// or the pod's writes are at their rate (deferred: a later call sends
    /// what is asked for then).
    pub(super) fn write(&self, pod: &Pod, desired: &Desired) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let Some(patch) = markers::metadata_patch(pod, desired) else {
            if let Some(writes) = lock(&self.pods).get_mut(&uid) {
                writes.sent = None;
            }
            return;
        };
        let now = Instant::now();
        {
            let mut pods = lock(&self.pods);
            let writes = pods.entry(uid.clone()).or_insert_with(|| PodWrites {
                bucket: TokenBucket::new(WRITE_BURST, WRITE_INTERVAL, now),
                sent: None,
            });
            if let Some(last) = &mut writes.sent
                && last.queued
            {
                // Sent when its turn comes, as asked for now; no token
                // taken: it is the same write.
                last.patch = patch;
                return;
            }
            if let Some(last) = &writes.sent
                && (last.in_flight || (last.patch == patch && now < last.at + SENT_HOLD))
            {
                return;
            }
            if !writes.bucket.try_take(now) {
                self.metrics.marker_write(MarkerOutcome::Deferred);
                tracing::debug!(
                    namespace = pod_namespace(pod),
                    pod = pod_name(pod),
                    "marker write deferred: the pod's markers changed faster than their write rate"
                );
                return;
            }
            writes.sent = Some(Sent {
                patch,
                at: now,
                in_flight: true,
                queued: true,
            });
        }
        let (namespace, name) = (pod_namespace(pod).to_string(), pod_name(pod).to_string());
        let writer = self.clone();
        tokio::spawn(async move {
            let Some(_turn) = writer.turns.take().await else {
                return;
            };
            // What the pod's latest sync asked for; nothing once the pod is
            // forgotten or carries what it asked for.
            let patch = lock(&writer.pods)
                .get_mut(&uid)
                .and_then(|writes| writes.sent.as_mut())
                .filter(|sent| sent.queued)
                .map(|sent| {
                    sent.queued = false;
                    sent.at = Instant::now();
                    sent.patch.clone()
                });
            let Some(patch) = patch else {
                return;
            };
            match writer.api.patch_metadata(&namespace, &name, &patch).await {
                Ok(()) => {
                    if let Some(sent) = lock(&writer.pods)
                        .get_mut(&uid)
                        .and_then(|writes| writes.sent.as_mut())
                    {
                        sent.in_flight = false;
                    }
                    writer.metrics.marker_write(MarkerOutcome::Sent);
                    tracing::info!(%namespace, pod = %name, markers = %patch["metadata"], "markers written");
                }
                Err(error) => {
                    writer.metrics.marker_write(MarkerOutcome::Failed);
                    // Sent again at the next resync, with a token.
                    if let Some(writes) = lock(&writer.pods).get_mut(&uid) {
                        writes.sent = None;
                    }
                    tracing::warn!(%namespace, pod = %name, %error, "cannot write the pod's markers; retrying at the next resync");
                }
            }
        });
    }

    /// Forgets a deleted pod.
    pub(super) fn forget(&self, uid: &str) {
        lock(&self.pods).remove(uid);
    }

    /// Pods with marker writes kept (#39).
    pub(super) fn pods(&self) -> usize {
        lock(&self.pods).len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::future::BoxFuture;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::api::apiclient::RequestError;
    use crate::testing::{
        RecordingMarkers, container, epoch, pod, pod_status, probe_spec, registered, running,
    };
    use podprobe_core::prober::manager::{PodProbes, ProbeStateView};
    use podprobe_core::prober::markers::{MarkerKeys, PodMarkers};
    use podprobe_core::prober::results::CachedResult;
    use podprobe_core::spec::ProbeKind;
    use podprobe_core::spec::probe_spec::extension::marker_options::{Marker, MarkerTarget};

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

    /// A running pod whose readiness probe marks `role`: `primary` on
    /// success, `replica` on failure.
    fn marked_pod() -> (Pod, PodMarkers) {
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
        (pod, markers)
    }

    /// MK4: a result that flips while a patch is in flight waits for it.
    #[tokio::test(start_paused = true)]
    async fn mk4_one_patch_per_pod_is_in_flight() {
        let (pod, markers) = marked_pod();
        let api = Stalled::default();
        let writer = MarkerWriter::new(api.clone(), registered(MarkerMetrics::register).0);
        writer.write(&pod, &markers.desired(&pod, &Cached(CachedResult::Success)));
        tokio::task::yield_now().await;
        writer.write(&pod, &markers.desired(&pod, &Cached(CachedResult::Failure)));
        tokio::time::advance(SENT_HOLD * 2).await;
        writer.write(&pod, &markers.desired(&pod, &Cached(CachedResult::Failure)));
        tokio::task::yield_now().await;
        assert_eq!(api.0.load(Ordering::SeqCst), 1);
    }

    /// Counts the patches asked for and records each once the test lets
    /// it through.
    #[derive(Clone)]
    struct Held {
        asked: Arc<AtomicUsize>,
        hold: Arc<Semaphore>,
        sent: Arc<Mutex<Vec<Value>>>,
    }

    impl MarkerApi for Held {
        fn patch_metadata<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            patch: &'a Value,
        ) -> BoxFuture<'a, Result<(), RequestError>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                self.hold.acquire().await.expect("open").forget();
                self.sent.lock().unwrap().push(patch.clone());
                Ok(())
            })
        }
    }

    /// MK4: node-wide, [`WRITES_IN_FLIGHT`] patches are in flight; a pod
    /// that waits for its turn sends what it asked for last.
    #[tokio::test(start_paused = true)]
    async fn mk4_marker_writes_in_flight_are_bounded_node_wide() {
        let (pod, markers) = marked_pod();
        let api = Held {
            asked: Arc::default(),
            hold: Arc::new(Semaphore::new(0)),
            sent: Arc::default(),
        };
        let (marker_metrics, metrics) = registered(MarkerMetrics::register);
        let writer = MarkerWriter::new(api.clone(), marker_metrics);
        let pods: Vec<Pod> = (0..=WRITES_IN_FLIGHT)
            .map(|i| {
                let mut pod = pod.clone();
                pod.metadata.uid = Some(format!("u{i}"));
                pod
            })
            .collect();
        for pod in &pods {
            writer.write(pod, &markers.desired(pod, &Cached(CachedResult::Success)));
        }
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(api.asked.load(Ordering::SeqCst), WRITES_IN_FLIGHT);
        let gauges = || {
            [
                "podprobe_marker_writes_in_flight",
                "podprobe_marker_writes_waiting",
            ]
            .map(|series| metrics.sample(series))
        };
        assert_eq!(
            gauges(),
            [Some(WRITES_IN_FLIGHT.to_string()), Some("1".to_string())]
        );
        // The last pod, still waiting, fails its probe.
        let last = &pods[WRITES_IN_FLIGHT];
        writer.write(last, &markers.desired(last, &Cached(CachedResult::Failure)));
        api.hold.add_permits(100);
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let sent = api.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), WRITES_IN_FLIGHT + 1);
        assert_eq!(gauges(), [Some("0".to_string()), Some("0".to_string())]);
        let uid = format!("u{WRITES_IN_FLIGHT}");
        let replica = serde_json::json!({"metadata": {"uid": uid, "labels": {"role": "replica"}}});
        assert_eq!(sent.last(), Some(&replica));
    }

    /// MK4: a probe flapping 100 times in 10 s, each flip a sync of its
    /// pod, is written at most as often as the pod's bucket allows; the
    /// result it settles on is written by a later sync (the resync), not a
    /// stale one.
    #[tokio::test(start_paused = true)]
    async fn mk4_a_flapping_probe_is_written_at_the_pods_rate() {
        let (pod, markers) = marked_pod();
        let api = RecordingMarkers::default();
        let (marker_metrics, metrics) = registered(MarkerMetrics::register);
        let writer = MarkerWriter::new(api.clone(), marker_metrics);
        let flip = Duration::from_millis(100);
        let flapping = flip * 100;
        for i in 0..100 {
            let result = if i % 2 == 0 {
                CachedResult::Success
            } else {
                CachedResult::Failure
            };
            writer.write(&pod, &markers.desired(&pod, &Cached(result)));
            tokio::time::advance(flip).await;
        }
        let allowance =
            WRITE_BURST as usize + (flapping.as_secs() / WRITE_INTERVAL.as_secs()) as usize;
        let sent = api.patches().len();
        assert!(sent <= allowance, "{sent} patches");
        // The other flips asked for the patch sent last: held, not deferred.
        let text = metrics.encode();
        let deferred: usize = text
            .lines()
            .find_map(|line| {
                line.strip_prefix(r#"podprobe_marker_writes_total{outcome="deferred"} "#)
            })
            .and_then(|count| count.parse().ok())
            .unwrap_or_default();
        assert!((1..=100 - sent).contains(&deferred), "{text}");
        let replica = serde_json::json!({"metadata": {"uid": "u1", "labels": {"role": "replica"}}});
        assert_ne!(
            api.patches().last(),
            Some(&replica),
            "the settled result waits for a token"
        );

        // Settled on Failure; the resyncs go on.
        for _ in 0..2 {
            writer.write(&pod, &markers.desired(&pod, &Cached(CachedResult::Failure)));
            tokio::time::advance(SENT_HOLD).await;
        }
        assert_eq!(api.patches().last(), Some(&replica));
    }

    /// The rate is the pod's own: another pod is written at once, and a
    /// deleted pod's bucket goes with it.
    #[tokio::test(start_paused = true)]
    async fn mk4_each_pod_has_its_own_rate_and_forgets_it_with_the_pod() {
        let (pod, markers) = marked_pod();
        let mut other = pod.clone();
        other.metadata.uid = Some("u2".into());
        let api = RecordingMarkers::default();
        let writer = MarkerWriter::new(api.clone(), registered(MarkerMetrics::register).0);
        let flip = Duration::from_millis(100);
        for result in [
            CachedResult::Success,
            CachedResult::Failure,
            CachedResult::Success,
        ] {
            writer.write(&pod, &markers.desired(&pod, &Cached(result)));
            tokio::time::advance(flip).await;
        }
        assert_eq!(api.patches().len(), WRITE_BURST as usize);
        writer.write(
            &other,
            &markers.desired(&other, &Cached(CachedResult::Success)),
        );
        tokio::time::advance(flip).await;
        assert_eq!(api.patches().len(), WRITE_BURST as usize + 1);
        writer.forget("u1");
        writer.forget("u2");
        assert!(lock(&writer.pods).is_empty());
    }
}
