//! Probe results caches: one per probe kind, keyed by container ID, with
//! change notifications (the kubelet's `results.Manager`).

/// A cached probe result (`results.Result`). The kubelet's zero value is
/// `Success`, which matters for a worker's initial `last_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub enum CachedResult {
    Unknown,
    #[default]
    Success,
    Failure,
}
