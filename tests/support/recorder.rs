//! A record of every version of a namespace's pods as the API server
//! delivered them (a list, then one watch resumed at the last
//! resourceVersion), so that a test judges what the API server held over
//! time and not only where it ended up.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, WatchParams};
use kube::core::WatchEvent;
use serde_json::Value;

/// Seconds from `t0` (a test's start) to `t`, as failure messages give the
/// times of recorded versions and switch flips.
pub fn secs_since(t0: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(t0).as_secs_f64()
}

/// One version of a pod as the watch delivered it.
#[derive(Clone)]
pub struct Seen {
    /// When the recorder received it.
    pub at: Instant,
    pub pod: Value,
    /// Whether it came as a deletion (the pod's last version).
    pub deleted: bool,
}

/// Records every version of the pods of a namespace, from a list and one
/// watch resumed at the last resourceVersion.
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    problems: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Lists `pods` and watches them from there, on `rt` (any `Api<Pod>`:
    /// any client, any namespace). Stops when dropped.
    pub fn start(rt: &tokio::runtime::Runtime, pods: Api<Pod>) -> Recorder {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let problems: Arc<Mutex<Vec<String>>> = Arc::default();
        let list = rt
            .block_on(pods.list(&ListParams::default()))
            .expect("list pods");
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        for pod in list.items {
            seen.lock().unwrap().push(Seen {
                at: Instant::now(),
                pod: serde_json::to_value(pod).unwrap(),
                deleted: false,
            });
        }
        let (into, problems_into) = (seen.clone(), problems.clone());
        let task = rt.spawn(async move {
            loop {
                let params = WatchParams::default().timeout(240);
                let stream = match pods.watch(&params, &version).await {
                    Ok(stream) => stream,
                    Err(e) => {
                        problems_into.lock().unwrap().push(format!("watch: {e}"));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let (pod, deleted) = match event {
                        Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => (pod, false),
                        Ok(WatchEvent::Deleted(pod)) => (pod, true),
                        Ok(WatchEvent::Bookmark(bookmark)) => {
                            version = bookmark.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(status)) => {
                            // 410 Gone: versions were missed; the test fails on it.
                            problems_into
                                .lock()
                                .unwrap()
                                .push(format!("watch error: {status:?}"));
                            break;
                        }
                        Err(e) => {
                            problems_into
                                .lock()
                                .unwrap()
                                .push(format!("watch stream: {e}"));
                            break;
                        }
                    };
                    if let Some(v) = &pod.metadata.resource_version {
                        version.clone_from(v);
                    }
                    into.lock().unwrap().push(Seen {
                        at: Instant::now(),
                        pod: serde_json::to_value(pod).unwrap(),
                        deleted,
                    });
                }
            }
        });
        Recorder {
            seen,
            problems,
            task,
        }
    }

    /// Every version recorded so far, in the order received.
    pub fn snapshot(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Asserts that the watch saw every version (no gap, no 410).
    pub fn assert_complete(&self) {
        let problems = self.problems.lock().unwrap();
        let gaps: Vec<&String> = problems
            .iter()
            .filter(|p| p.contains("watch error") || p.contains("410"))
            .collect();
        assert!(
            gaps.is_empty(),
            "the watch missed versions, the checks below would be blind: {gaps:?}"
        );
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The versions of the pod with `uid` (deletions excluded), each with the
/// time it was first seen and the time its successor was (or `end`).
pub fn held_versions<'a>(
    seen: &'a [Seen],
    uid: &str,
    end: Instant,
) -> Vec<(Instant, Instant, &'a Value)> {
    let mine: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.pod["metadata"]["uid"] == uid)
        .collect();
    mine.iter()
        .enumerate()
        .filter(|(_, s)| !s.deleted)
        .map(|(i, s)| {
            let until = mine.get(i + 1).map_or(end, |next| next.at);
            (s.at, until, &s.pod)
        })
        .collect()
}
