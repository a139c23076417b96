//! The root crate's test fixtures: the core's (`podprobe_core::testing`),
//! a fake API server for the status patcher, a killer and a marker API
//! that record what the daemon's loop asks of them, and a registry to read
//! one subsystem's metrics back from.

pub use podprobe_core::testing::*;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::api::marker_patch::MarkerApi;
use crate::api::patcher::{ApiError, StatusApi};
use podprobe_core::prober::manager::{Killer, ProbeKill};
use podprobe_core::status::READY_CONDITION;
use podprobe_core::status::conditions::POD_READY;

// The status API: a fake API server for the status patcher.

/// An API server fake: a pod, scripted patch failures, a gate to hold
/// patches in flight, and a log of requests.
pub struct FakeApi {
    pub state: Mutex<FakeState>,
    /// Patches wait for a permit: a test holds them in flight.
    pub hold: tokio::sync::Semaphore,
}

#[derive(Default)]
pub struct FakeState {
    /// The pod as the API server has it.
    pub server: Option<Pod>,
    /// The pod as the watch has it (may lag).
    pub cached: Option<Pod>,
    pub failures: VecDeque<ApiError>,
    pub requests: Vec<String>,
    /// Pods besides `server` by name, each as the API server and the watch
    /// have it: for tests of many pods.
    pub others: HashMap<String, Pod>,
}

impl FakeApi {
    pub fn new(pod: Pod, held: bool) -> Arc<FakeApi> {
        // Each patch takes a permit for good.
        let permits = if held {
            0
        } else {
            tokio::sync::Semaphore::MAX_PERMITS
        };
        let api = FakeApi {
            state: Mutex::default(),
            hold: tokio::sync::Semaphore::new(permits),
        };
        let mut state = api.state.lock().unwrap();
        state.server = Some(pod.clone());
        state.cached = Some(pod);
        drop(state);
        Arc::new(api)
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }

    pub fn requests(&self) -> Vec<String> {
        self.state().requests.clone()
    }
}

impl StatusApi for Arc<FakeApi> {
    fn cached(&self, uid: &str) -> Option<Arc<Pod>> {
        let state = self.state();
        let mut pods = state.cached.iter().chain(state.others.values());
        let pod = pods.find(|pod| pod.metadata.uid.as_deref() == Some(uid))?;
        Some(Arc::new(pod.clone()))
    }

    async fn get(&self, _: &str, name: &str) -> Result<Option<Pod>, ApiError> {
        let mut state = self.state();
        state.requests.push("get".into());
        Ok(state.others.get(name).or(state.server.as_ref()).cloned())
    }

    /// Applies the patch as the API server would, for the fields
    /// podprobe's patches carry: preconditions, whole container status
    /// lists, conditions merged by type; bumps the resourceVersion.
    async fn patch_status(&self, _: &str, name: &str, patch: &Value) -> Result<Pod, ApiError> {
        self.hold.acquire().await.unwrap().forget();
        let mut state = self.state();
        let summary = [READY_CONDITION, POD_READY]
            .iter()
            .find_map(|type_| condition_in(patch, type_))
            .unwrap_or("-")
            .to_string();
        state.requests.push(format!("patch {summary}"));
        if let Some(error) = state.failures.pop_front() {
            return Err(error);
        }
        let FakeState { server, others, .. } = &mut *state;
        let server = match others.get_mut(name) {
            Some(other) => other,
            None => server.as_mut().ok_or(ApiError::NotFound("pod".into()))?,
        };
        if patch["metadata"]["uid"].as_str() != server.metadata.uid.as_deref() {
            return Err(ApiError::Conflict("Precondition failed: UID".into()));
        }
        let version = patch["metadata"]["resourceVersion"].as_str();
        if version.is_some() && version != server.metadata.resource_version.as_deref() {
            return Err(ApiError::Conflict("the object has been modified".into()));
        }
        let mut status = serde_json::to_value(server.status.take()).unwrap();
        for list in ["containerStatuses", "initContainerStatuses"] {
            if let Some(whole) = patch["status"].get(list) {
                status[list] = whole.clone();
            }
        }
        for change in patch["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if !status["conditions"].is_array() {
                status["conditions"] = Value::Array(Vec::new());
            }
            let conditions = status["conditions"].as_array_mut().unwrap();
            match conditions.iter_mut().find(|c| c["type"] == change["type"]) {
                Some(existing) => {
                    for (key, value) in change.as_object().unwrap() {
                        existing[key] = value.clone();
                    }
                }
                None => conditions.push(change.clone()),
            }
        }
        server.status = serde_json::from_value(status).unwrap();
        server.metadata.resource_version = server
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| (v + 1).to_string());
        Ok(server.clone())
    }
}

// The actuator: the kills the daemon's loop asks for.

/// A [`Killer`] that stops nothing and records every kill it is asked for,
/// repeats included (the real one stops each instance once); it keeps the
/// container IDs asked for as the real one does, until `retain` drops them.
#[derive(Debug, Clone, Default)]
pub struct RecordingKiller {
    kills: Arc<Mutex<Vec<ProbeKill>>>,
    kept: Arc<Mutex<HashSet<String>>>,
}

impl RecordingKiller {
    pub fn kills(&self) -> Vec<ProbeKill> {
        self.kills.lock().unwrap().clone()
    }
}

impl Killer for RecordingKiller {
    fn kill(&self, _: &Pod, kill: ProbeKill) {
        self.kept.lock().unwrap().insert(kill.container_id.clone());
        self.kills.lock().unwrap().push(kill);
    }

    fn retain(&self, listed: &HashSet<String>) {
        self.kept.lock().unwrap().retain(|id| listed.contains(id));
    }

    fn containers(&self) -> usize {
        self.kept.lock().unwrap().len()
    }
}

// Markers: the metadata patches the daemon's loop sends.

/// A [`MarkerApi`] that records every patch and accepts it.
#[derive(Debug, Clone, Default)]
pub struct RecordingMarkers {
    patches: Arc<Mutex<Vec<Value>>>,
}

impl RecordingMarkers {
    pub fn patches(&self) -> Vec<Value> {
        self.patches.lock().unwrap().clone()
    }
}

impl MarkerApi for RecordingMarkers {
    fn patch_metadata<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        patch: &'a Value,
    ) -> futures::future::BoxFuture<'a, Result<(), crate::api::apiclient::RequestError>> {
        self.patches.lock().unwrap().push(patch.clone());
        Box::pin(async { Ok(()) })
    }
}

// Metrics: one subsystem's families, read back as `/metrics` serves them.

/// Registers one subsystem's metric families (`register`, e.g.
/// `EventMetrics::register`) in a registry of their own: the subsystem's
/// handle, and the registry to read back.
pub fn registered<T>(register: impl FnOnce(&mut Registry) -> T) -> (T, Exposition) {
    let mut registry = Registry::default();
    let part = register(&mut registry);
    (part, Exposition(registry))
}

/// The registry of [`registered`].
pub struct Exposition(Registry);

impl Exposition {
    /// The OpenMetrics text of every family, `# EOF` included.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.0)
            .expect("a String takes any text");
        text
    }

    /// The value of the sample `series` (its name and labels as exposed),
    /// if there is one.
    pub fn sample(&self, series: &str) -> Option<String> {
        self.encode().lines().find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')
                .map(str::to_string)
        })
    }
}
