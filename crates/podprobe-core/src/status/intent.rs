//! What podprobe wants for one pod's status: its identity, the fields it
//! owns and its verdicts. The sync loop's tracker produces intents; the
//! patcher turns the latest one into a patch against the freshest pod it
//! knows ([`super::patch_decision`]).

use std::sync::Arc;

use tokio::time::Instant;

use super::annotation::AnnotatedProbes;
use super::gate::FloorHold;
use super::{ContainerProbeView, Mode};

/// What podprobe wants for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    pub namespace: String,
    pub name: String,
    /// The pod the verdicts are about; a pod with another UID is never patched.
    pub uid: String,
    pub owned: Owned,
    pub views: Vec<ContainerProbeView>,
    /// When the probe run ended whose result changed and brought this
    /// intent about (`None`: a resync or a pod change). A newer intent
    /// replacing one not sent yet brings its own.
    pub result_at: Option<Instant>,
    /// The workload's readiness floor holds the gate True (WG3): set by the
    /// daemon's floor keeper, never by the tracker.
    pub floor: Option<FloorHold>,
}

/// The fields podprobe owns for a pod (design.md), with what computing them
/// needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Owned {
    /// The `podprobe.io/ready` condition, from the annotated probes.
    Gate(Arc<AnnotatedProbes>),
    /// Container `ready`/`started` and the `Ready`/`ContainersReady`
    /// conditions.
    Authority,
}

impl Owned {
    pub fn mode(&self) -> Mode {
        match self {
            Owned::Gate(_) => Mode::Gate,
            Owned::Authority => Mode::Authority,
        }
    }
}
