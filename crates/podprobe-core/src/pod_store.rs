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
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::worker::StatusSource;

/// The latest object of every watched pod, by UID.
#[derive(Debug, Default)]
pub struct PodStore {
    pods: RwLock<HashMap<String, Arc<Pod>>>,
    /// podprobe's `started` by pod UID and container ID.
    started: RwLock<HashMap<String, HashMap<String, bool>>>,
}

impl PodStore {
    pub fn new() -> Arc<PodStore> {
        Arc::new(PodStore::default())
    }

    /// The latest object of the pod with `uid`.
    pub fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        self.read().get(uid).cloned()
    }

    /// Every cached pod.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.read().values().cloned().collect()
    }

    /// UIDs of every cached pod.
    pub fn uids(&self) -> HashSet<String> {
        self.read().keys().cloned().collect()
    }

    /// podprobe's `started` verdicts for the pod's containers, by container ID.
    pub fn started(&self, uid: &str) -> HashMap<String, bool> {
        let started = self.started.read().unwrap_or_else(PoisonError::into_inner);
        started.get(uid).cloned().unwrap_or_default()
    }

    /// Replaces podprobe's `started` verdicts for the pod with `uid`.
    pub fn set_started(&self, uid: &str, verdicts: HashMap<String, bool>) {
        let mut started = self.started.write().unwrap_or_else(PoisonError::into_inner);
        started.insert(uid.to_string(), verdicts);
    }

    /// Forgets podprobe's verdicts for a pod that went away.
    pub fn forget_started(&self, uid: &str) {
        let mut started = self.started.write().unwrap_or_else(PoisonError::into_inner);
        started.remove(uid);
    }

    /// Stores `pod`, replacing the object with its UID.
    pub fn insert(&self, pod: Arc<Pod>) {
        if let Some(uid) = pod.metadata.uid.clone() {
            self.write().insert(uid, pod);
        }
    }

    /// Forgets `pod`.
    pub fn remove(&self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            self.write().remove(uid);
        }
    }

    /// Entries kept, pods and their `started` verdicts (#39): both follow
    /// the watched pods.
    pub fn entries(&self) -> usize {
        let started = self.started.read().unwrap_or_else(PoisonError::into_inner);
        self.read().len() + started.len()
    }

    /// Drops every pod whose UID is not in `listed` and returns them.
    pub fn retain_listed(&self, listed: &HashSet<String>) -> Vec<Arc<Pod>> {
        let mut pods = self.write();
        let gone: Vec<String> = pods
            .keys()
            .filter(|uid| !listed.contains(*uid))
            .cloned()
            .collect();
        gone.iter().filter_map(|uid| pods.remove(uid)).collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Pod>>> {
        self.pods.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Pod>>> {
        self.pods.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StatusSource for PodStore {
    fn pod_status(&self, pod_uid: &str) -> Option<PodStatus> {
        let mut status = self.get(pod_uid)?.status.clone()?;
        let started = self.started(pod_uid);
        with_started(&mut status, &started);
        Some(status)
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
        let status = store.pod_status("a").unwrap();
        let started: Vec<_> = status
            .container_statuses
            .unwrap()
            .iter()
            .map(|c| c.started)
            .collect();
        assert_eq!(started, [Some(false), None]);
        store.remove(&store.get("a").unwrap());
        assert!(store.pod_status("a").is_none());
    }
}
