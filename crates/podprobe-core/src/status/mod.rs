//! Desired pod status and the patches that reach it: the probe half of the
//! kubelet's status manager, as pure functions over k8s-openapi types.
//!
//! podprobe runs in one of two [`Mode`]s and writes only the fields it owns in
//! that mode (design.md, "Who owns which status field"):
//!
//! - **gate mode**: probes come from the `podprobe.io/probes` annotation
//!   ([`annotation`]); podprobe owns one pod condition, `podprobe.io/ready`
//!   ([`gate`]), and nothing the kubelet writes;
//! - **authority mode**: probes come from the pod spec; podprobe owns container
//!   `ready`/`started` and the `ContainersReady`/`Ready` conditions
//!   ([`authority`]), generated exactly as the kubelet generates them
//!   ([`conditions`]).
//!
//! The input is the prober core's per-container verdict, [`ContainerProbeView`]
//! (status.md rule 1, already applied). The output is a desired [`PodStatus`]
//! that [`build_patch`] turns into the strategic-merge patch for
//! `pods/<name>/status`, or into nothing when no owned field changes;
//! [`patch_decision`] picks the pod object that patch is built against and
//! says what the patcher sends for an [`Intent`].
//!
//! [`PodStatus`]: k8s_openapi::api::core::v1::PodStatus

pub mod annotation;
pub(crate) mod authority;
pub mod conditions;
pub mod gate;
pub mod gate_setup;
pub(crate) mod intent;
pub mod patch;
pub mod patch_decision;

#[cfg(test)]
mod proptests;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};

use crate::util::pod::is_restartable_init_container;

pub use annotation::{
    AnnotatedProbe, AnnotatedProbes, AnnotationError, MAX_ANNOTATION_BYTES, PROBES_ANNOTATION,
    check_hosts, check_network, pod_probes,
};
pub use authority::desired_authority_status;
pub use gate::{READY_CONDITION, desired_gate_status};
pub use intent::{Intent, Owned};
pub use patch::{PatchError, build_patch};

/// Which status fields podprobe owns (design.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Next to a stock kubelet: podprobe owns only the `podprobe.io/ready`
    /// condition.
    Gate,
    /// On nodes without a prober of their own: podprobe owns container
    /// `ready`/`started` and the `ContainersReady`/`Ready` conditions.
    Authority,
}

impl Mode {
    /// The mode's name, as `--mode` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Gate => "gate",
            Mode::Authority => "authority",
        }
    }
}

/// The prober core's verdict for one container instance: `started` and `ready`
/// as status.md rule 1 derives them from the results caches and workers.
///
/// `container_id` is the runtime ID the verdict was derived for, exactly as in
/// the status's `containerID` (`containerd://...`, `None` before the container
/// exists). A verdict applies only to the status of that same instance: the
/// kubelet matches results by container ID too (rule 2.1), so a verdict about
/// an old instance never makes its successor ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProbeView {
    pub name: String,
    pub container_id: Option<String>,
    pub started: bool,
    pub ready: bool,
    /// The last failure of the probe that holds this instance back (its
    /// startup probe while not started, else its readiness probe), as its
    /// `Unhealthy` event says it; gate mode shows it in its condition.
    pub note: Option<Arc<str>>,
}

impl ContainerProbeView {
    /// The verdicts a status already carries (`started`, `ready`), one per
    /// container status, init containers first; without notes.
    pub fn from_status(status: &PodStatus) -> Vec<ContainerProbeView> {
        let init = status.init_container_statuses.iter().flatten();
        init.chain(status.container_statuses.iter().flatten())
            .map(|c| ContainerProbeView {
                name: c.name.clone(),
                container_id: c.container_id.clone(),
                started: c.started == Some(true),
                ready: c.ready,
                note: None,
            })
            .collect()
    }

    /// Whether this verdict is about the instance `status` describes.
    fn describes(&self, status: &ContainerStatus) -> bool {
        self.name == status.name && self.container_id == status.container_id
    }
}

/// The verdict in `views` about the instance `status` describes, if any.
fn view_for<'a>(
    views: &'a [ContainerProbeView],
    status: &ContainerStatus,
) -> Option<&'a ContainerProbeView> {
    views.iter().find(|view| view.describes(status))
}

/// The containers whose readiness makes up `ContainersReady`, in the order the
/// kubelet walks them: restartable init containers, then regular containers,
/// each in spec order. Classic init containers never count.
fn readiness_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    sidecars.chain(spec.containers.iter())
}

/// The first status named `name`, searching init container statuses and then
/// container statuses (the kubelet's concatenation for condition generation).
fn status_named<'a>(status: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    let init = status.init_container_statuses.iter().flatten();
    let regular = status.container_statuses.iter().flatten();
    init.chain(regular).find(|s| s.name == name)
}
