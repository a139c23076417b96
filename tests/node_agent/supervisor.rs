//! Watches the pods bound to the node and keeps one [`PodWorker`] per pod
//! UID, feeding it every new version of its pod (or `None` once the pod is
//! gone). After each full listing, sandboxes of pods that are no longer
//! bound to the node (deleted while the agent was not watching) are removed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::pod::PodWorker;
use crate::runtime::Runtime;

/// Runs the pods bound to `node_name` until the watch ends (it does not on
/// its own: errors are retried with back-off).
pub async fn run(client: kube::Client, runtime: Runtime, node_name: &str, node_ip: &str) {
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    let mut events = watcher::watcher(Api::<Pod>::all(client.clone()), config)
        .default_backoff()
        .boxed();
    let mut supervisor = Supervisor {
        client,
        runtime,
        node_ip: node_ip.to_string(),
        workers: HashMap::new(),
    };
    let mut listed: Option<HashSet<String>> = None;
    let mut failing = false;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("pod watch works again");
                }
                event
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "pod watch failed; retrying");
                }
                continue;
            }
        };
        match event {
            Event::Init => listed = Some(HashSet::new()),
            Event::InitApply(pod) => {
                if let Some(listed) = listed.as_mut() {
                    listed.insert(uid(&pod));
                }
                supervisor.apply(pod);
            }
            Event::InitDone => {
                let listed = listed.take().unwrap_or_default();
                supervisor.relisted(&listed).await;
            }
            Event::Apply(pod) => supervisor.apply(pod),
            Event::Delete(pod) => supervisor.gone(&uid(&pod)),
        }
    }
}

struct Supervisor {
    client: kube::Client,
    runtime: Runtime,
    node_ip: String,
    /// The update channel of each pod's worker, by pod UID.
    workers: HashMap<String, watch::Sender<Option<Arc<Pod>>>>,
}

impl Supervisor {
    /// Hands a new version of a pod to its worker, starting one for a new pod.
    fn apply(&mut self, pod: Pod) {
        let uid = uid(&pod);
        if let Some(updates) = self.workers.get(&uid) {
            // A worker that ended has finished its pod (deleted it): a late
            // event about it must not run it again.
            if !updates.is_closed() {
                updates.send_replace(Some(Arc::new(pod)));
            }
            return;
        }
        let (updates, receiver) = watch::channel(Some(Arc::new(pod)));
        if let Some(worker) = PodWorker::new(
            self.client.clone(),
            self.runtime.clone(),
            self.node_ip.clone(),
            receiver,
        ) {
            tokio::spawn(worker.run());
        }
        self.workers.insert(uid, updates);
    }

    /// The pod `uid` is gone from the API.
    fn gone(&mut self, uid: &str) {
        if let Some(updates) = self.workers.remove(uid) {
            updates.send_replace(None);
        }
    }

    /// After a full listing: pods not in it are gone, and so is whatever the
    /// runtime still holds for pods that are not bound here any more.
    async fn relisted(&mut self, listed: &HashSet<String>) {
        // Workers of gone pods remove their own sandboxes.
        let mut keep = listed.clone();
        keep.extend(self.workers.keys().cloned());
        let gone: Vec<String> = self
            .workers
            .keys()
            .filter(|uid| !listed.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.gone(&uid);
        }
        match self.runtime.remove_all_but(&keep).await {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(uids = ?removed, "removed sandboxes and containers of pods no longer bound to this node");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot remove the containers of pods no longer bound here")
            }
        }
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}
