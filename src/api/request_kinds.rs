//! Which API requests the client's layers treat apart: watches stay open
//! for minutes (no answer time, no in-flight slot, their frames tell the
//! watch's health) and Event writes have a limit of their own (rule 9.6).

use http::Uri;

/// Whether `uri` is a watch request (`?watch=true`, as kube sends it).
pub(crate) fn is_watch(uri: &Uri) -> bool {
    uri.query()
        .is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"))
}

/// Whether `uri` is an Event request (podprobe writes `events.k8s.io`
/// Events only), which has a limit of its own.
pub(crate) fn is_event(uri: &Uri) -> bool {
    uri.path().starts_with("/apis/events.k8s.io/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn only_watch_requests_are_watches() {
        assert!(is_watch(&uri(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true&timeoutSeconds=60"
        )));
        assert!(!is_watch(&uri(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn"
        )));
        assert!(!is_watch(&uri("/api/v1/pods?labelSelector=watch%3Dtrue")));
        assert!(!is_watch(&uri("/version")));
    }

    #[test]
    fn only_events_k8s_io_requests_are_event_writes() {
        assert!(is_event(&uri("/apis/events.k8s.io/v1/namespaces/a/events")));
        assert!(!is_event(&uri("/api/v1/namespaces/a/events")));
        assert!(!is_event(&uri("/api/v1/namespaces/a/pods/p/status")));
    }
}
