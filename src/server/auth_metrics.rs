//! The metrics of delegated authentication: requests counted by what it
//! decided for them. `/metrics` and `/metrics/probes` count theirs in
//! `podprobe_metrics_auth_decisions` ([`AuthDecisions::register`]); the
//! status API counts its own the same way, in a family of its own
//! ([`super::status_api`]).

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What delegated authentication decided for one request of `/metrics` or
/// `/metrics/probes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthOutcome {
    /// Served.
    Allowed,
    /// 401: no token, or one the API server does not accept.
    Unauthenticated,
    /// 403: RBAC does not allow the token's user.
    Forbidden,
    /// A review got no verdict (401 or 500).
    Failed,
    /// 429: the request would have waited on a review, but its connection
    /// or the review queue had no room.
    Throttled,
}

impl AuthOutcome {
    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthOutcome::Allowed => "allowed",
            AuthOutcome::Unauthenticated => "unauthenticated",
            AuthOutcome::Forbidden => "forbidden",
            AuthOutcome::Failed => "failed",
            AuthOutcome::Throttled => "throttled",
        }
    }
}

impl EncodeLabelValue for AuthOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AuthLabels {
    outcome: AuthOutcome,
}

/// A counter family of requests by [`AuthOutcome`]; a cheap handle
/// (reference-counted).
#[derive(Debug, Clone)]
pub struct AuthDecisions(Family<AuthLabels, Counter>);

impl AuthDecisions {
    /// Registers `podprobe_metrics_auth_decisions` in `registry`: the
    /// decisions for `/metrics` and `/metrics/probes`.
    pub fn register(registry: &mut Registry) -> Self {
        Self::register_as(
            registry,
            "podprobe_metrics_auth_decisions",
            "Requests for /metrics and /metrics/probes checked by delegated authentication, by outcome (allowed; unauthenticated: 401; forbidden: 403; failed: a review got no verdict; throttled: 429, too many requests waited on reviews)",
        )
    }

    /// Registers a family of decisions as `name` with `help` in `registry`.
    pub(crate) fn register_as(registry: &mut Registry, name: &str, help: &str) -> Self {
        let decisions = Family::<AuthLabels, Counter>::default();
        registry.register(name, help, decisions.clone());
        // Outcome series exist from the start, so a rate over them is
        // defined before the first request.
        for outcome in [
            AuthOutcome::Allowed,
            AuthOutcome::Unauthenticated,
            AuthOutcome::Forbidden,
            AuthOutcome::Failed,
            AuthOutcome::Throttled,
        ] {
            decisions.get_or_create_owned(&AuthLabels { outcome });
        }
        AuthDecisions(decisions)
    }

    /// Counts one request by what delegated authentication decided.
    pub fn count(&self, outcome: AuthOutcome) {
        self.0.get_or_create(&AuthLabels { outcome }).inc();
    }
}
