//! What one simulation runs: the validated pod, its probes and the script
//! of its containers, shared by the engine that runs it and the renderer
//! that draws its report.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::script::Script;
use podprobe_core::prober::manager::PodProbes;
use podprobe_core::status::AnnotatedProbes;

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// The pod, with a UID.
    pub pod: Pod,
    /// The probes that run, by container and kind.
    pub probes: PodProbes,
    /// Gate mode: the annotation's probes, which decide the condition.
    pub gate: Option<AnnotatedProbes>,
    pub script: Script,
    pub duration: Duration,
    /// Workload mode: whether the probes' `restartBudget` and
    /// `readinessFloor` apply (`--without-guards` leaves them out, to see
    /// the same workload as the kubelet alone would run it).
    pub guards: bool,
}
