//! What the agent saw of one pod in the container runtime, as plain data:
//! filled by `runtime`, read by `pod` (what to do next) and `status` (what
//! to report).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The pod's current sandbox.
#[derive(Clone, Debug, PartialEq)]
pub struct Sandbox {
    pub id: String,
    /// `PodSandboxMetadata.attempt`: how many sandboxes the pod had before.
    pub attempt: u32,
    /// `SANDBOX_READY`: its network namespace is set up and it can run containers.
    pub ready: bool,
    /// `PodSandboxStatus.network.ip`; none until the network is set up.
    pub ip: Option<String>,
}

/// One run of a container (a CRI container; `attempt` counts the restarts
/// before it, as the kubelet's restart count).
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub id: String,
    pub attempt: u32,
    /// The image reference the runtime resolved (`imageID` in the API).
    pub image_ref: String,
    pub state: State,
}

#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// Created, not started yet.
    Created,
    Running {
        started_at: Time,
    },
    Exited(Exit),
    /// The runtime lost track of it.
    Unknown,
}

/// How an instance ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Exit {
    pub exit_code: i32,
    /// The runtime's reason (`Completed`, `Error`, `OOMKilled`); may be empty.
    pub reason: String,
    pub message: String,
    pub started_at: Option<Time>,
    pub finished_at: Time,
    /// Whether podprobe stopped it for a failed liveness or startup probe
    /// (its `Killing` event); `None` until that is known.
    pub probe_kill: Option<bool>,
}

/// The two newest instances of one container: the kubelet reports the
/// newest and, as `lastState`, the one before it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Container {
    pub latest: Option<Instance>,
    pub previous: Option<Instance>,
}

/// A pod in the runtime: its sandbox and its containers by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub sandbox: Option<Sandbox>,
    pub containers: BTreeMap<String, Container>,
}

impl Instance {
    /// The exit of a finished instance.
    pub fn exit(&self) -> Option<&Exit> {
        match &self.state {
            State::Exited(exit) => Some(exit),
            _ => None,
        }
    }
}

/// A CRI timestamp (nanoseconds since the epoch; 0 when unset) in whole
/// seconds, the precision the API keeps, so that reports compare equal to
/// what the API server returns.
pub fn time(unix_nanos: i64) -> Option<Time> {
    if unix_nanos <= 0 {
        return None;
    }
    Timestamp::from_second(unix_nanos / 1_000_000_000)
        .ok()
        .map(Time)
}

/// Now, in whole seconds.
pub fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).expect("now is a valid time"))
}

impl Pod {
    /// The newest instance of container `name`.
    pub fn latest(&self, name: &str) -> Option<&Instance> {
        self.containers.get(name)?.latest.as_ref()
    }
}
