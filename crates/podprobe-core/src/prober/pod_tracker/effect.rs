//! What the tracker is told ([`Input`]), what it asks for ([`Effect`]) and
//! what it reads of the prober while it decides ([`ProbeStates`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::prober::events::record::PodEvent;
use crate::prober::manager::{PodProbes, ProbeKill, ProbeStateView, ProberManager};
use crate::prober::markers::Desired;
use crate::prober::results::ResultUpdate;
use crate::prober::worker::{ProbeRunner, StatusSource};
use crate::spec::ProbeKind;
use crate::spec::probe_spec::UnknownProbeField;
use crate::spec::probe_spec::budget::{Budget, PodBudget};
use crate::status::{AnnotatedProbes, AnnotationError, Intent};

/// Something that happened, for [`super::PodTracker::step`]. Every pod an
/// input carries is the freshest object the caller has (the watch's
/// cache), so the tracker keeps none of its own.
#[derive(Debug)]
pub enum Input {
    /// The watch delivered a new or changed pod.
    PodApplied {
        pod: Arc<Pod>,
        /// Fields of its spec probes podprobe does not implement (V10).
        unknown: Vec<UnknownProbeField>,
    },
    /// The watch says the pod is gone.
    PodDeleted(Arc<Pod>),
    /// The watch listed every pod of the node again: these are their UIDs.
    Relisted(HashSet<String>),
    /// A cached probe result changed (K1), for this pod (`None`: gone).
    Result {
        pod: Option<Arc<Pod>>,
        update: ResultUpdate,
    },
    /// The status resync: every pod the watch has.
    Resync(Vec<Arc<Pod>>),
    /// The time of the earliest pause came ([`super::PodTracker::next_pause_end`]):
    /// every pod the watch has.
    PauseTimer(Vec<Arc<Pod>>),
    /// An annotation [`Effect::ReadAnnotation`] asked for was read; `current`
    /// is the pod as the watch has it now.
    AnnotationRead {
        reading: Reading,
        current: Option<Arc<Pod>>,
    },
}

/// The time of a step: the monotonic clock the sync schedule and the
/// debounce run on, and the wall clock pauses are written in.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub at: Instant,
    pub wall: Timestamp,
}

/// Gate mode: a pod's `podprobe.io/probes` annotation, parsed and compiled
/// by whoever carried out [`Effect::ReadAnnotation`] (the daemon does it on
/// a blocking thread: within the pod's budgets that takes up to tens of
/// milliseconds, which a loop serving every pod of the node does not wait
/// for).
#[derive(Debug)]
pub struct Reading {
    pub uid: String,
    pub pod: Arc<Pod>,
    pub annotation: String,
    pub probes: Result<AnnotatedProbes, AnnotationError>,
    /// What `probes` hold, charged to the node's budget.
    pub budget: PodBudget,
}

impl Reading {
    /// Carries out an [`Effect::ReadAnnotation`]: parses and compiles the
    /// annotation within `budget`.
    pub fn read(uid: String, pod: Arc<Pod>, annotation: String, mut budget: PodBudget) -> Self {
        let probes = crate::status::pod_probes(&pod, &mut budget);
        Reading {
            uid,
            pod,
            annotation,
            probes,
            budget,
        }
    }
}

/// What the tracker asks its executor to do, in order: a later effect may
/// rely on an earlier one (workers read the `started` of
/// [`Effect::ShowStarted`] before [`WorkerCommand::NudgeReadiness`] wakes
/// them).
#[derive(Debug)]
pub enum Effect {
    /// Parse the pod's annotation and come back with
    /// [`Input::AnnotationRead`].
    ReadAnnotation {
        uid: String,
        pod: Arc<Pod>,
        annotation: String,
        budget: PodBudget,
    },
    /// Start, stop or wake workers (the same in every executor).
    Workers(WorkerCommand),
    /// podprobe's `started` verdicts of the pod's containers, by container
    /// ID, which its workers read.
    ShowStarted {
        uid: String,
        started: HashMap<String, bool>,
    },
    /// The status podprobe wants for the pod.
    Patch(Intent),
    /// The markers the pod should carry (MK3, MK4).
    WriteMarkers { pod: Arc<Pod>, desired: Desired },
    /// Stop a container whose liveness or startup probe failed (K2, K3).
    Kill { pod: Arc<Pod>, kill: ProbeKill },
    /// Record an Event about the pod.
    Record(PodEvent),
    /// A probe or annotation was refused for this budget (a metric).
    BudgetRefused(Budget),
    /// This many pods have their liveness paused now (a metric).
    PausedPods(usize),
}

/// What the tracker asks of the prober's workers. Every executor carries it
/// out the same way, through [`WorkerCommand::apply`], so that `podprobe
/// simulate` starts and stops the workers `podprobe run` would.
#[derive(Debug)]
pub enum WorkerCommand {
    /// Start a worker for each of these probes that has none (W1-W3).
    Start { pod: Arc<Pod>, probes: PodProbes },
    /// Stop these workers at once (an edited or paused probe).
    Stop {
        pod: Arc<Pod>,
        probes: Vec<(String, ProbeKind)>,
    },
    /// W11: a terminating pod keeps only its readiness workers.
    StopLivenessAndStartup(Arc<Pod>),
    /// The pod is gone: stop its workers (W12). The daemon also forgets
    /// what its status and marker writers keep for the pod.
    Forget(Arc<Pod>),
    /// W13: stop every worker of a pod not in this set.
    StopExcept(HashSet<String>),
    /// W8: trigger a run of these containers' readiness workers.
    NudgeReadiness {
        pod: Arc<Pod>,
        containers: Vec<String>,
    },
}

impl WorkerCommand {
    /// Carries the command out on `manager`.
    pub fn apply<R: ProbeRunner, S: StatusSource>(self, manager: &ProberManager<R, S>) {
        match self {
            WorkerCommand::Start { pod, probes } => manager.add_pod(&pod, &probes),
            WorkerCommand::Stop { pod, probes } => manager.stop_probes(&pod, &probes),
            WorkerCommand::StopLivenessAndStartup(pod) => manager.stop_liveness_and_startup(&pod),
            WorkerCommand::Forget(pod) => manager.remove_pod(&pod),
            WorkerCommand::StopExcept(uids) => manager.cleanup_pods(&uids),
            WorkerCommand::NudgeReadiness { pod, containers } => {
                manager.nudge_readiness(&pod, containers);
            }
        }
    }
}

/// What the tracker reads of the prober while it decides: the results
/// caches and the workers (through [`ProbeStateView`]), the failure notes,
/// and when the prober started.
pub trait ProbeStates {
    /// The prober's state as seen from one pod.
    fn view<'a>(&'a self, pod_uid: &'a str) -> impl ProbeStateView + 'a;
    /// The note of the last failure of the `kind` probe of a container.
    fn note(&self, kind: ProbeKind, container_id: &str) -> Option<Arc<str>>;
    /// When the prober started (S1's "started before podprobe").
    fn started_wall(&self) -> Timestamp;
}

impl<R: ProbeRunner, S: StatusSource> ProbeStates for ProberManager<R, S> {
    fn view<'a>(&'a self, pod_uid: &'a str) -> impl ProbeStateView + 'a {
        ProberManager::view(self, pod_uid)
    }

    fn note(&self, kind: ProbeKind, container_id: &str) -> Option<Arc<str>> {
        self.caches().get(kind).note(container_id)
    }

    fn started_wall(&self) -> Timestamp {
        self.context().started_wall
    }
}
