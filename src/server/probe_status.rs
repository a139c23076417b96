//! `GET /pods/{namespace}/{name}/probes`: the last run of each of a pod's
//! probes from the [`ProbeLedger`], as JSON (a [`PodReport`]), for
//! `kubectl podprobe status` and `why` (PS2).
//!
//! The plugin reaches this endpoint through the API server's pods/proxy
//! subresource of the podprobe pod on the pod's node. That proxy drops the
//! caller's `Authorization` header, so the plugin sends the caller's bearer
//! token in [`CALLER_TOKEN_HEADER`]; podprobe has the API server review it
//! and answers only if its owner may `get` the pod (a `TokenReview`, then a
//! `SubjectAccessReview` with `resourceAttributes`), with that pod's data
//! and no other's. Authorisation comes before the lookup, so a refused
//! caller cannot learn whether podprobe knows the pod.

use std::sync::Arc;

use http::HeaderMap;

use super::DelegatedAuth;
use super::delegated_auth::bearer_token_in;
use crate::probe::spec::is_dns_subdomain;
use crate::probe_ledger::ProbeLedger;

/// The header with the caller's `Bearer` token.
pub const CALLER_TOKEN_HEADER: &str = "x-podprobe-authorization";

/// Longest namespace (a DNS-1123 label).
const MAX_NAMESPACE_LEN: usize = 63;

/// What the endpoint reads: who may ask, and the ledger.
#[derive(Debug, Clone)]
pub struct ProbeStatus {
    auth: DelegatedAuth,
    ledger: Arc<ProbeLedger>,
}

impl ProbeStatus {
    /// Answers from `ledger` whom `auth` allows.
    pub fn new(auth: DelegatedAuth, ledger: Arc<ProbeLedger>) -> Self {
        ProbeStatus { auth, ledger }
    }

    pub(super) fn auth(&self) -> &DelegatedAuth {
        &self.auth
    }

    /// The pod's report, for a caller already allowed to get the pod.
    pub(super) fn answer(&self, namespace: &str, name: &str) -> Answer {
        match self.ledger.report(namespace, name) {
            None => Answer::NotFound(format!(
                "podprobe on this node has run no probe of pod {namespace}/{name}: it is on another node, has no probe podprobe runs, or its probes have not run yet\n"
            )),
            Some(report) => match serde_json::to_vec(&report) {
                Ok(json) => Answer::Report(json),
                Err(error) => Answer::Unencodable(format!("cannot encode the report: {error}\n")),
            },
        }
    }
}

/// What [`ProbeStatus::answer`] found.
#[derive(Debug)]
pub(super) enum Answer {
    /// 200: the report, as JSON.
    Report(Vec<u8>),
    /// 404: podprobe runs none of the pod's probes; why, in text.
    NotFound(String),
    /// 500: the report could not be encoded.
    Unencodable(String),
}

/// The caller's token from [`CALLER_TOKEN_HEADER`].
pub(super) fn caller_token(headers: &HeaderMap) -> Option<&str> {
    bearer_token_in(headers, CALLER_TOKEN_HEADER)
}

/// The namespace and name that `path` (`/pods/{namespace}/{name}/probes`)
/// names, if both are valid: a namespace is a DNS label, a pod name a DNS
/// subdomain.
pub fn pod_of(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/pods/")?.strip_suffix("/probes")?;
    let (namespace, name) = rest.split_once('/')?;
    let valid = namespace.len() <= MAX_NAMESPACE_LEN
        && !namespace.contains('.')
        && is_dns_subdomain(namespace)
        && is_dns_subdomain(name);
    valid.then_some((namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_a_pod_only_with_valid_names() {
        assert_eq!(
            pod_of("/pods/default/web-0/probes"),
            Some(("default", "web-0"))
        );
        assert_eq!(
            pod_of("/pods/team-a/web.example-1/probes"),
            Some(("team-a", "web.example-1"))
        );
        for bad in [
            "/pods/default/probes",
            "/pods//web/probes",
            "/pods/default/web/x/probes",
            "/pods/Default/web/probes",
            "/pods/default/-web/probes",
            "/pods/default/web./probes",
            "/pods/default/web%2F..%2Fx/probes",
            "/pods/default/web/probes/",
            "/pods/default/web",
        ] {
            assert_eq!(pod_of(bad), None, "{bad}");
        }
        let long = format!("/pods/{}/web/probes", "a".repeat(64));
        assert_eq!(pod_of(&long), None);
        let long_name = format!("/pods/default/{}/probes", vec!["a".repeat(63); 4].join("."));
        assert_eq!(pod_of(&long_name), None, "255 bytes");
    }

    #[test]
    fn the_caller_token_is_read_from_its_own_header() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, "Bearer api".parse().unwrap());
        assert_eq!(caller_token(&headers), None);
        headers.insert(CALLER_TOKEN_HEADER, "bearer caller".parse().unwrap());
        assert_eq!(caller_token(&headers), Some("caller"));
    }
}
