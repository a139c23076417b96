//! The node's pods as the watch last reported them, by UID (the kubelet's
//! pod manager), and the workers' view of pod status ([`StatusSource`], the
//! kubelet's status manager cache): container IDs, states and the pod IP
//! as the API server last reported them, with `started` as podprobe itself
//! last derived it. The API's `started` is the kubelet's, which knows
//! nothing of annotated startup probes; the workers must see podprobe's, as
//! the kubelet's workers see the kubelet's status manager's (D10).
//!
//! The pod watch is the one writer ([`insert`](PodStore::insert),
//! [`remove`](PodStore::remove), [`retain_listed`](PodStore::retain_listed));
//! the daemon's sync loop and the workers read. Pure memory, so the sync
//! loop's unit tests use this store itself, as kube-runtime's tests use its
//! reflector store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::prober::worker::StatusSource;

/// The latest object of every watched pod, by UID.
#[derive(Debug, Default)]
pub struct PodStore {
    pods: RwLock<HashMap<String, Entry>>,
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
    pub fn new() -> Arc<PodStore> {
        Arc::new(PodStore::default())
    }

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

    /// Replaces podprobe's `started` verdicts for the pod with `uid`; a pod
    /// not stored (gone, or not yet seen) keeps none.
    pub fn set_started(&self, uid: &str, verdicts: HashMap<String, bool>) {
        if let Some(entry) = self.write().get_mut(uid)
            && entry.started != verdicts
        {
            entry.started = verdicts;
            entry.view = OnceLock::new();
        }
    }

    /// Stores `pod`, replacing the object with its UID and keeping its
    /// `started` verdicts.
    pub fn insert(&self, pod: Arc<Pod>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let mut pods = self.write();
        let started = pods
            .remove(&uid)
            .map(|entry| entry.started)
            .unwrap_or_default();
        pods.insert(uid, Entry::new(pod, started));
    }

    /// Forgets `pod` and podprobe's verdicts about it.
    pub fn remove(&self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            self.write().remove(uid);
        }
    }

    /// Entries kept, one per pod (#39): they follow the watched pods.
    pub fn entries(&self) -> usize {
        self.read().len()
    }

    /// Drops every pod whose UID is not in `listed` and returns them.
    pub fn retain_listed(&self, listed: &HashSet<String>) -> Vec<Arc<Pod>> {
        let mut pods = self.write();
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

    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, Entry>> {
        self.pods.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.pods.write().unwrap_or_else(PoisonError::into_inner)
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
        let store = PodStore::new();
        let mut pod = pod("a", vec![container("app"), container("db")], vec![]);
        let statuses = ["app", "db"].map(|name| ContainerStatus {
            name: name.into(),
            container_id: Some(format!("containerd://{name}")),
            started: Some(true),
            ..ContainerStatus::default()
        });
        pod.status = Some(pod_status(statuses.to_vec(), vec![]));
        store.insert(Arc::new(pod));
        store.set_started("a", HashMap::from([("containerd://app".into(), false)]));
        assert_eq!(started_of(&store, "a"), [Some(false), None]);
        store.remove(&store.get("a").unwrap());
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
        let store = PodStore::new();
        let status = |ip: &str| PodStatus {
            pod_ip: Some(ip.into()),
            ..pod_status(
                vec![running("app", "containerd://c1", epoch(), None)],
                vec![],
            )
        };
        let mut object = pod("a", vec![container("app")], vec![]);
        object.status = Some(status("10.0.0.1"));
        store.insert(Arc::new(object.clone()));
        let first = store.pod_status("a").unwrap();
        assert!(Arc::ptr_eq(&first, &store.pod_status("a").unwrap()));
        assert_eq!(started_of(&store, "a"), [None]);

        store.set_started("a", HashMap::from([("containerd://c1".into(), true)]));
        assert_eq!(started_of(&store, "a"), [Some(true)]);
        let second = store.pod_status("a").unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        // The same verdicts again change nothing.
        store.set_started("a", HashMap::from([("containerd://c1".into(), true)]));
        assert!(Arc::ptr_eq(&second, &store.pod_status("a").unwrap()));

        // A new object from the watch keeps podprobe's verdicts.
        object.status = Some(status("10.0.0.2"));
        store.insert(Arc::new(object));
        let third = store.pod_status("a").unwrap();
        assert_eq!(third.pod_ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(started_of(&store, "a"), [Some(true)]);
        assert_eq!(store.entries(), 1);

        // Verdicts about a pod the store no longer has are not kept.
        store.remove(&store.get("a").unwrap());
        store.set_started("a", HashMap::from([("containerd://c1".into(), false)]));
        assert_eq!(store.entries(), 0);
        assert!(store.started("a").is_empty());
    }
}
