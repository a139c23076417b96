//! The metrics of the status API: its requests by the outcome of their
//! review, and the requests it forwarded to the pod's node.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::server::auth_metrics::{AuthDecisions, AuthOutcome};

/// The status API's metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct StatusApiMetrics {
    probe_status_auth: AuthDecisions,
    forwarded: Counter,
}

impl StatusApiMetrics {
    /// Registers the status API's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let probe_status_auth = AuthDecisions::register_as(
            registry,
            "podprobe_probe_status_requests",
            "Requests for a pod's probe status (status.podprobe.io, kubectl podprobe) by the outcome of their review (allowed; unauthenticated: 401, no user named by the API server; forbidden: 403, the user may not get the probes object or the pod; failed: a review got no verdict; throttled: 429, over the user's or podprobe's request bounds)",
        );
        let forwarded = Counter::default();
        registry.register(
            "podprobe_status_api_forwarded",
            "Requests for a pod's probe status this podprobe authorized and forwarded to the podprobe of the pod's node",
            forwarded.clone(),
        );
        StatusApiMetrics {
            probe_status_auth,
            forwarded,
        }
    }

    /// Counts one request for a pod's probe status by what delegated
    /// authentication decided.
    pub(super) fn probe_status_auth(&self, outcome: AuthOutcome) {
        self.probe_status_auth.count(outcome);
    }

    /// Counts a status request forwarded to the pod's node.
    pub(super) fn status_api_forwarded(&self) {
        self.forwarded.inc();
    }
}
