//! When the kubelet syncs a pod (K6), and so runs `UpdatePodStatus`, which
//! nudges the readiness workers of started, not-ready containers (S3, W8).
//!
//! podprobe recomputes its verdicts far more often than that (on its own and
//! the kubelet's status writes, and every 10 s to repair drift); nudging on
//! each of those would probe a not-ready container many times per period.
//! This module tells the daemon which of its derivations stand for a kubelet
//! pod sync: a change of what the kubelet's pod config source delivers (the
//! spec, labels, annotations, deletion), a change of a container's instance
//! or state (what the kubelet's PLEG reports), a probe result change (K1),
//! and the pod worker's periodic resync. A write that changes only status
//! conditions or `ready`/`started` is none of these.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use crate::prober::results::{CachedResult, ResultUpdate};
use crate::spec::ProbeKind;
use crate::util::pod::all_container_statuses;

/// The pod worker's resync interval (the kubelet's `--sync-frequency`,
/// default 1 minute); each resync is delayed by up to half of it at random
/// (`workerResyncIntervalJitterFactor`).
pub const POD_RESYNC_INTERVAL: Duration = Duration::from_secs(60);

/// What of a pod makes the kubelet sync it when it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncFingerprint(u64);

/// The fingerprint of `pod`: its spec, labels, annotations and deletion
/// (the kubelet's config source ignores an update that changes none of
/// them), and each container's ID and state (running, waiting, terminated:
/// the PLEG's events).
pub fn fingerprint(pod: &Pod) -> SyncFingerprint {
    let mut hasher = DefaultHasher::new();
    // Serialising cannot fail for these types; an empty string for a
    // failure would only cost a nudge.
    serde_json::to_string(&pod.spec)
        .unwrap_or_default()
        .hash(&mut hasher);
    pod.metadata.labels.hash(&mut hasher);
    pod.metadata.annotations.hash(&mut hasher);
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0)
        .hash(&mut hasher);
    pod.metadata.deletion_grace_period_seconds.hash(&mut hasher);
    for status in all_container_statuses(pod) {
        status.name.hash(&mut hasher);
        status.container_id.hash(&mut hasher);
        let state = status.state.as_ref();
        let kind = match state {
            Some(s) if s.running.is_some() => 1u8,
            Some(s) if s.terminated.is_some() => 2,
            Some(s) if s.waiting.is_some() => 3,
            _ => 0,
        };
        kind.hash(&mut hasher);
    }
    SyncFingerprint(hasher.finish())
}

/// K1: whether a result change makes the kubelet sync the pod: every
/// readiness and startup change, a liveness change only to `Failure`.
pub fn result_syncs(update: &ResultUpdate) -> bool {
    match update.kind {
        ProbeKind::Liveness => update.result == CachedResult::Failure,
        ProbeKind::Readiness | ProbeKind::Startup => true,
    }
}

/// One pod's sync schedule: the fingerprint of the last version synced and
/// when the pod worker's resync falls due.
#[derive(Debug, Clone)]
pub struct SyncSchedule {
    synced: Option<SyncFingerprint>,
    resync_at: Instant,
}

impl SyncSchedule {
    /// A pod not synced yet.
    pub fn new(now: Instant) -> Self {
        SyncSchedule {
            synced: None,
            resync_at: now,
        }
    }

    /// A new version of the pod arrived: whether the kubelet would sync it.
    pub fn on_update(&mut self, pod: &Pod) -> bool {
        let fingerprint = fingerprint(pod);
        let changed = self.synced != Some(fingerprint);
        self.synced = Some(fingerprint);
        changed
    }

    /// Whether the periodic resync is due at `now`.
    pub fn resync_due(&self, now: Instant) -> bool {
        now >= self.resync_at
    }

    /// The pod was synced at `now` (for any reason): the pod worker
    /// requeues it for a resync `POD_RESYNC_INTERVAL` plus up to half of it
    /// later; `unit` in `[0, 1)` picks where.
    pub fn synced(&mut self, now: Instant, unit: f64) {
        self.resync_at = now + crate::util::backoff::with_jitter(POD_RESYNC_INTERVAL, unit);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
        PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn pod() -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u", "annotations": {"a": "1"}},
            "spec": {"containers": [{"name": "app"}]},
        }))
        .unwrap();
        pod.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                container_id: Some("containerd://c1".into()),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        pod
    }

    fn app(pod: &mut Pod) -> &mut ContainerStatus {
        &mut pod
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
    }

    #[test]
    fn k6_status_writes_do_not_sync() {
        let mut schedule = SyncSchedule::new(Instant::now());
        let mut pod = pod();
        assert!(schedule.on_update(&pod), "first sight syncs");
        assert!(!schedule.on_update(&pod), "the same version again does not");
        let status = pod.status.as_mut().unwrap();
        status.conditions = Some(vec![PodCondition {
            type_: "podprobe.io/ready".into(),
            status: "True".into(),
            ..PodCondition::default()
        }]);
        let container = &mut status.container_statuses.as_mut().unwrap()[0];
        container.ready = true;
        container.started = Some(true);
        container.restart_count = 0;
        assert!(
            !schedule.on_update(&pod),
            "conditions and ready/started are status writes, not sync occasions"
        );
    }

    #[test]
    fn k6_container_events_and_spec_changes_sync() {
        let mut schedule = SyncSchedule::new(Instant::now());
        let base = pod();
        schedule.on_update(&base);

        let mut stopped = base.clone();
        app(&mut stopped).state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..ContainerState::default()
        });
        assert!(schedule.on_update(&stopped), "a container died");

        let mut replaced = base.clone();
        app(&mut replaced).container_id = Some("containerd://c2".into());
        assert!(schedule.on_update(&replaced), "a new container instance");

        let mut annotated = replaced.clone();
        annotated
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("a".into(), "2".into());
        assert!(schedule.on_update(&annotated), "an annotation changed");

        let mut deleted = annotated.clone();
        deleted.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(schedule.on_update(&deleted), "the pod is being deleted");
    }

    #[test]
    fn k6_resync_falls_due_one_to_one_and_a_half_intervals_after_a_sync() {
        let start = Instant::now();
        let mut schedule = SyncSchedule::new(start);
        assert!(schedule.resync_due(start), "a new pod is due at once");
        schedule.synced(start, 0.0);
        assert!(!schedule.resync_due(start + POD_RESYNC_INTERVAL - Duration::from_millis(1)));
        assert!(schedule.resync_due(start + POD_RESYNC_INTERVAL));
        schedule.synced(start, 0.999);
        assert!(!schedule.resync_due(start + POD_RESYNC_INTERVAL.mul_f64(1.49)));
        assert!(schedule.resync_due(start + POD_RESYNC_INTERVAL.mul_f64(1.5)));
    }

    #[test]
    fn k1_liveness_successes_do_not_sync() {
        let update = |kind, result| ResultUpdate {
            kind,
            container_id: "containerd://c1".into(),
            result,
            pod_uid: "u".into(),
            at: Instant::now(),
        };
        assert!(!result_syncs(&update(
            ProbeKind::Liveness,
            CachedResult::Success
        )));
        assert!(result_syncs(&update(
            ProbeKind::Liveness,
            CachedResult::Failure
        )));
        assert!(result_syncs(&update(
            ProbeKind::Readiness,
            CachedResult::Success
        )));
        assert!(result_syncs(&update(
            ProbeKind::Startup,
            CachedResult::Failure
        )));
    }
}
