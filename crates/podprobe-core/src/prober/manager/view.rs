//! What the status derivation and the kill decisions read from the prober:
//! the results caches and which workers exist, by pod.

use crate::prober::results::CachedResult;
use crate::spec::ProbeKind;

/// What status derivation and kill decisions read from the prober.
pub trait ProbeStateView {
    /// The cached `kind` result of a container.
    fn cached(&self, kind: ProbeKind, container_id: &str) -> Option<CachedResult>;
    /// Whether the pod has a `kind` worker for `container`.
    fn has_worker(&self, container: &str, kind: ProbeKind) -> bool;
}
