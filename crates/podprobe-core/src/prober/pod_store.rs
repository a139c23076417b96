//! The node's pods as the watch last reported them, by UID (the kubelet's
//! pod manager), and the workers' view of pod status ([`StatusSource`], the
//! kubelet's status manager cache): container IDs, states and the pod IP
//! as the API server last reported them, with `started` as podprobe itself
//! last derived it. The API's `started` is the kubelet's, which knows
//! nothing of annotated startup probes; the workers must see podprobe's, as
//! the kubelet's workers see the kubelet's status manager's (D10).
//!
//! Three handles, as kube-runtime's reflector has a `Writer` and the
//! `Store`s it hands out:
//!
//! - [`PodStoreWriter`], the pod watch's: the one that inserts and removes
//!   pods. Not `Clone`; the store and the other handles come from it;
//! - [`PodStore`] (shared as `Arc<PodStore>`), everyone else's: the sync
//!   loop, the workers (as their [`StatusSource`]), the status patcher. It
//!   only reads;
//! - [`StartedWriter`], the sync loop's: it records podprobe's `started`
//!   verdicts and nothing else (see there why that is not the watch's job).
//!
//! Pure memory, so the sync loop's unit tests use this store itself, filled
//! through a writer as the watch would, as kube-runtime's tests use its
//! reflector store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::prober::worker::StatusSource;

/// The latest object of every watched pod, by UID: the read-only handle
/// (shared as `Arc<PodStore>`); [`PodStoreWriter::as_reader`] hands it out.
#[derive(Debug)]
pub struct PodStore {
    pods: RwLock<HashMap<String, Entry>>,
}

/// The pod watch's handle on the [`PodStore`]: the one writer of its pods,
/// as kube-runtime's reflector `Writer` is its store's. Not `Clone`: whoever
/// holds it is the watch (or plays it, in tests).
#[derive(Debug)]
pub struct PodStoreWriter {
    store: Arc<PodStore>,
}

/// Records podprobe's `started` verdicts in the [`PodStore`], for the
/// workers to see (D10): the sync loop carries out the pod tracker's
/// `Effect::ShowStarted` with it, as the kubelet's prober writes `started`
/// to its status manager (`SetContainerStartup`), not to its pod manager.
///
/// A capability of its own rather than the [`PodStoreWriter`]: the verdicts
/// are podprobe's, not the API server's, so they do not come from the
/// watch, and the sync loop, which derives them, must not be able to add,
/// replace or drop pods, which only the watch knows. It can only replace
/// the verdicts of a pod the watch stored.
#[derive(Debug)]
pub struct StartedWriter {
    store: Arc<PodStore>,
}

/// One watched pod.
#[derive(Debug)]
struct Entry {
    pod: Arc<Pod>,
    /// podprobe's `started` by container ID.
    started: HashMap<String, bool>,
    /// The status the workers see, made from `pod` and `started` at the
    /// first read after either changed: every probe run reads it, so it is
    /// shared rather than copied per run (#39).
    view: OnceLock<Option<Arc<PodStatus>>>,
}

impl Entry {
    fn new(pod: Arc<Pod>, started: HashMap<String, bool>) -> Self {
        Entry {
            pod,
            started,
            view: OnceLock::new(),
        }
    }

    fn view(&self) -> Option<Arc<PodStatus>> {
        self.view
            .get_or_init(|| {
                let mut status = self.pod.status.clone()?;
                with_started(&mut status, &self.started);
                Some(Arc::new(status))
            })
            .clone()
    }
}

impl PodStore {
    /// The latest object of the pod with `uid`.
    pub fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        self.read().get(uid).map(|entry| entry.pod.clone())
    }

    /// Every cached pod.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.read()
            .values()
            .map(|entry| entry.pod.clone())
            .collect()
    }

    /// UIDs of every cached pod.
    pub fn uids(&self) -> HashSet<String> {
        self.read().keys().cloned().collect()
    }

    /// podprobe's `started` verdicts for the pod's containers, by container ID.
    pub fn started(&self, uid: &str) -> HashMap<String, bool> {
        self.read()
            .get(uid)
            .map(|entry| entry.started.clone())
            .unwrap_or_default()
    }

    /// Entries kept, one per pod (#39): they follow the watched pods.
    pub fn entries(&self) -> usize {
        self.read().len()
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, Entry>> {
        self.pods.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.pods.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PodStoreWriter {
    /// A new, empty store and its writer.
    pub fn new() -> Self {
        let store = PodStore {
            pods: RwLock::default(),
        };
        PodStoreWriter {
            store: Arc::new(store),
        }
    }

    /// A read-only handle on the store.
    pub fn as_reader(&self) -> Arc<PodStore> {
        self.store.clone()
    }

    /// The sync loop's handle for podprobe's `started` verdicts.
    pub fn started_writer(&self) -> StartedWriter {
        StartedWriter {
            store: self.store.clone(),
        }
    }

    /// Stores `pod`, replacing the object with its UID and keeping its
    /// `started` verdicts.
    pub fn insert(&mut self, pod: Arc<Pod>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let mut pods = self.store.write();
        let started = pods
            .remove(&uid)
            .map(|entry| entry.started)
            .unwrap_or_default();
        pods.insert(uid, Entry::new(pod, started));
    }

    /// Forgets `pod` and podprobe's verdicts about it.
    pub fn remove(&mut self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            self.store.write().remove(uid);
        }
    }

    /// Drops every pod whose UID is not in `listed` and returns them.
    pub fn retain_listed(&mut self, listed: &HashSet<String>) -> Vec<Arc<Pod>> {
        let mut pods = self.store.write();
        let gone: Vec<String> = pods
            .keys()
            .filter(|uid| !listed.contains(*uid))
            .cloned()
            .collect();
        gone.iter()
            .filter_map(|uid| pods.remove(uid))
            .map(|entry| entry.pod)
            .collect()
    }
}

impl Default for PodStoreWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl StartedWriter {
    /// Replaces podprobe's `started` verdicts for the pod with `uid`; a pod
    /// not stored (gone, or not yet seen) keeps none.
    pub fn set_started(&mut self, uid: &str, verdicts: HashMap<String, bool>) {
        if let Some(entry) = self.store.write().get_mut(uid)
            && entry.started != verdicts
        {
            entry.started = verdicts;
            entry.view = OnceLock::new();
        }
    }
}

impl StatusSource for PodStore {
    fn pod_status(&self, pod_uid: &str) -> Option<Arc<PodStatus>> {
        self.read().get(pod_uid)?.view()
    }
}

/// Sets `started` of every container status to the verdict about its
/// container ID, or to none when there is none yet (a new instance).
pub fn with_started(status: &mut PodStatus, started: &HashMap<String, bool>) {
    let init = status.init_container_statuses.iter_mut().flatten();
    for container in init.chain(status.container_statuses.iter_mut().flatten()) {
        let id = container.container_id.as_deref().unwrap_or_default();
        container.started = started.get(id).copied();
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerStatus;

    use super::*;
    use crate::testing::*;

    #[test]
    fn status_source_reports_podprobes_started_not_the_kubelets() {
        let mut writer = PodStoreWriter::new();
        let mut verdicts = writer.started_writer();
        let store = writer.as_reader();
        let mut pod = pod("a", vec![container("app"), container("db")], vec![]);
        let statuses = ["app", "db"].map(|name| ContainerStatus {
            name: name.into(),
            container_id: Some(format!("containerd://{name}")),
            started: Some(true),
            ..ContainerStatus::default()
        });
        pod.status = Some(pod_status(statuses.to_vec(), vec![]));
        writer.insert(Arc::new(pod));
        verdicts.set_started("a", HashMap::from([("containerd://app".into(), false)]));
        assert_eq!(started_of(&store, "a"), [Some(false), None]);
        writer.remove(&store.get("a").unwrap());
        assert!(store.pod_status("a").is_none());
    }

    fn started_of(store: &PodStore, uid: &str) -> Vec<Option<bool>> {
        let status = store.pod_status(uid).unwrap();
        let statuses = status.container_statuses.as_deref().unwrap_or_default();
        statuses.iter().map(|c| c.started).collect()
    }

    /// #39: every probe run reads its pod's status; the reads share one
    /// copy until the pod or podprobe's verdicts change, and then see the
    /// change at once.
    #[test]
    fn the_workers_view_is_shared_until_the_pod_or_a_verdict_changes() {
        let mut writer = PodStoreWriter::new();
        let mut verdicts = writer.started_writer();
        let store = writer.as_reader();
        let status = |ip: &str| PodStatus {
            pod_ip: Some(ip.into()),
            ..pod_status(
                vec![running("app", "containerd://c1", epoch(), None)],
                vec![],
            )
        };
        let mut object = pod("a", vec![container("app")], vec![]);
        object.status = Some(status("10.0.0.1"));
        writer.insert(Arc::new(object.clone()));
        let first = store.pod_status("a").unwrap();
        assert!(Arc::ptr_eq(&first, &store.pod_status("a").unwrap()));
        assert_eq!(started_of(&store, "a"), [None]);

        verdicts.set_started("a", HashMap::from([("containerd://c1".into(), true)]));
        assert_eq!(started_of(&store, "a"), [Some(true)]);
        let second = store.pod_status("a").unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        // The same verdicts again change nothing.
        verdicts.set_started("a", HashMap::from([("containerd://c1".into(), true)]));
        assert!(Arc::ptr_eq(&second, &store.pod_status("a").unwrap()));

        // A new object from the watch keeps podprobe's verdicts.
        object.status = Some(status("10.0.0.2"));
        writer.insert(Arc::new(object));
        let third = store.pod_status("a").unwrap();
        assert_eq!(third.pod_ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(started_of(&store, "a"), [Some(true)]);
        assert_eq!(store.entries(), 1);

        // Verdicts about a pod the store no longer has are not kept.
        writer.remove(&store.get("a").unwrap());
        verdicts.set_started("a", HashMap::from([("containerd://c1".into(), false)]));
        assert_eq!(store.entries(), 0);
        assert!(store.started("a").is_empty());
    }
}
