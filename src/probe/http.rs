//! HTTP GET probes with the kubelet's exact request, redirect and result
//! rules (`pkg/probe/http`, spec section 6).
//!
//! One probe run: build the request as the kubelet does ([`request`]), send
//! it on a fresh connection ([`transport`]), follow same-host redirects the
//! way Go's client does with the kubelet's redirect checker (H12), read at
//! most 10 KiB of the final body and map the status to a result (H13-H15).
//! A single deadline covers all of it (H10). What goes wrong before the
//! final response's headers is a `failure` whose output is Go's client
//! error text (H16); what goes wrong while reading the body is an error,
//! which the wrapper retries (H17).
//!
//! A probe's `podprobe` extensions (#14) can make the request a `HEAD`
//! (no body read) and set expectations on the final response
//! ([`Expect`]); without them the probe is exactly the kubelet's.

mod http1;
mod informational;
mod request;
mod transport;
mod url;

use std::borrow::Cow;
use std::time::Duration;

use http::StatusCode;
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub use self::http1::MAX_RESPONSE_HEAD_BYTES;
use self::request::Hop;
use self::transport::{Exchange, TransportError};
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::probe_spec::HttpGetAction;
use podprobe_core::spec::probe_spec::extension::{
    BodyRegex, Expect, GaveUp, Method, TlsSettings, regex_failure,
};
use podprobe_core::spec::{Attempt, MAX_OUTPUT_BYTES, Outcome, ProbeError, ProbeResult};
use podprobe_core::util::gofmt::go_quote;

/// Requests Go's client sends before giving up on a redirect chain.
const MAX_REQUESTS: usize = 10;

/// Go's client error when the deadline passes before the response headers.
const HEADERS_TIMEOUT: &str =
    "context deadline exceeded (Client.Timeout exceeded while awaiting headers)";

/// Go's body-read error when the deadline passes while reading the body.
const BODY_TIMEOUT: &str =
    "context deadline exceeded (Client.Timeout or context cancellation while reading body)";

/// Runs one HTTP GET probe against `action` (host defaulting to `pod_ip`)
/// within `timeout` (zero: no limit, as for Go's client), sending
/// `user_agent` unless the action sets its own `User-Agent`, and connecting
/// only where `destinations` allows (redirect targets included).
pub async fn probe(
    action: &HttpGetAction,
    pod_ip: &str,
    timeout: Duration,
    user_agent: &str,
    destinations: &Destinations,
) -> Attempt {
    let first =
        Hop::first(action, pod_ip, user_agent).map_err(|e| ProbeError::unknown(e.to_string()))?;
    let deadline = (!timeout.is_zero()).then(|| Instant::now() + timeout);
    let tls = &action.extensions.tls;
    let mut exchange = match follow_redirects(&first, tls, deadline, destinations).await {
        Ok(exchange) => exchange,
        Err(client_error) => return Ok(Outcome::new(ProbeResult::Failure, client_error)),
    };
    let body = match action.extensions.method {
        // A HEAD response has no body. The transport already gives it an empty
        // one (the request says HEAD); not reading at all keeps that so
        // whatever the transport.
        Method::Head => Vec::new(),
        Method::Get | Method::Post | Method::Put => exchange
            .read_body(MAX_OUTPUT_BYTES, deadline)
            .await
            .map_err(|err| ProbeError {
                result: ProbeResult::Failure,
                message: match err {
                    TransportError::Timeout => BODY_TIMEOUT.to_string(),
                    TransportError::Failed(text) => text,
                },
            })?,
    };
    let status = exchange.status;
    let expect = &action.extensions.expect;
    if let Some(message) = body_regex_failure(status, &body, expect, deadline).await {
        return Ok(Outcome::new(ProbeResult::Failure, message));
    }
    Ok(outcome(status, &body, expect))
}

/// One GET for `action` (host defaulting to `pod_ip`) as the kubelet's
/// lifecycle hook client sends it (L2): the probe's request and redirect
/// rules, no deadline of its own (the caller's grace period bounds it), the
/// first 10 KiB of the final body read and dropped. The status is not
/// judged: any response succeeds. Errors are Go's client error text.
pub async fn get_and_discard(
    action: &HttpGetAction,
    pod_ip: &str,
    user_agent: &str,
    destinations: &Destinations,
) -> Result<(), String> {
    let first = Hop::first(action, pod_ip, user_agent).map_err(|e| e.to_string())?;
    let tls = &action.extensions.tls;
    let mut exchange = follow_redirects(&first, tls, None, destinations).await?;
    // As Go's discard: a body that fails half-way changes nothing.
    let _ = exchange.read_body(MAX_OUTPUT_BYTES, None).await;
    Ok(())
}

/// H13-H15: the result for the final response. Failures never carry the
/// body (issue #99425); non-UTF-8 bodies are converted lossily.
///
/// With expectations (`podprobe.expect`, #14) a response that misses one
/// fails, its message naming it; `statusCodes`, when set, replaces the
/// status rule, a listed code being a plain success (a listed 3xx is what
/// the user asked for, not a warning). Body expectations are checked on the
/// body read, the first 10 KiB as the kubelet reads them; `bodyRegex` by
/// [`body_regex_failure`] before this.
fn outcome(status: StatusCode, body: &[u8], expect: &Expect) -> Outcome {
    let body = String::from_utf8_lossy(body);
    let code = status.as_u16();
    if let Some(message) = expect.failure(code, &body) {
        return Outcome::new(ProbeResult::Failure, message);
    }
    if expect.status_codes.is_some() {
        return Outcome::new(ProbeResult::Success, body);
    }
    match code {
        200..=299 => Outcome::new(ProbeResult::Success, body),
        300..=399 => Outcome::new(
            ProbeResult::Warning,
            format!("Probe terminated redirects, Response body: {body}"),
        ),
        code => Outcome::new(
            ProbeResult::Failure,
            format!("HTTP probe failed with statuscode: {code}"),
        ),
    }
}

/// Why the final response misses its `bodyRegex` (#14), when its status and
/// `bodyContains` pass (otherwise [`outcome`] says why it fails): the
/// search is bounded by `deadline` and never holds a runtime worker.
async fn body_regex_failure(
    status: StatusCode,
    body: &[u8],
    expect: &Expect,
    deadline: Option<Instant>,
) -> Option<String> {
    let code = status.as_u16();
    let regex = expect.regex_to_match(code)?;
    let body = String::from_utf8_lossy(body);
    if expect.failure(code, &body).is_some() {
        return None;
    }
    regex_failure(regex, search_body(regex, body.as_bytes(), deadline).await)
}

/// `bodyRegex` searches running at once, node-wide; each holds a lazy DFA
/// cache of up to [`super::spec::extension::MAX_REGEX_DFA_BYTES`].
const MAX_CONCURRENT_BODY_SEARCHES: usize = 8;

static BODY_SEARCH_SLOTS: Semaphore = Semaphore::const_new(MAX_CONCURRENT_BODY_SEARCHES);

/// Body bytes searched between two looks at the deadline; a slice costs
/// microseconds, or about 1.5 ms when every byte builds a DFA state.
const SEARCH_SLICE_BYTES: usize = 1024;

/// Searches `body` for `regex` by slices, yielding to the runtime between
/// them so no other probe waits behind it, and giving up at `deadline`
/// (waiting for a search slot included).
async fn search_body(
    regex: &BodyRegex,
    body: &[u8],
    deadline: Option<Instant>,
) -> Result<bool, GaveUp> {
    let slot = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, BODY_SEARCH_SLOTS.acquire())
            .await
            .map_err(|_| GaveUp::Timeout)?,
        None => BODY_SEARCH_SLOTS.acquire().await,
    };
    let _slot = slot.expect("the search semaphore is never closed");
    let mut search = regex.search(body);
    loop {
        if let Some(verdict) = search.step(SEARCH_SLICE_BYTES) {
            return verdict;
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(GaveUp::Timeout);
        }
        tokio::task::yield_now().await;
    }
}

/// H12: sends `first` and follows redirects whose target has the first
/// request's hostname, up to Go's limit; a redirect elsewhere is the final
/// response. Every hop connects with `tls` (`podprobe.tls`): a followed
/// redirect is verified against the same bundle. Errors are Go's client error text (`Get "<url>": ...`).
async fn follow_redirects(
    first: &Hop,
    tls: &TlsSettings,
    deadline: Option<Instant>,
    destinations: &Destinations,
) -> Result<Exchange, String> {
    // The first request is sent as built; only a redirect makes a new one.
    let mut hop = Cow::Borrowed(first);
    let mut sent = 0;
    loop {
        let exchange = transport::exchange(&hop, tls, deadline, destinations)
            .await
            .map_err(|err| {
                let text = match err {
                    TransportError::Timeout => HEADERS_TIMEOUT.to_string(),
                    TransportError::Failed(text) => text,
                };
                client_error(hop.method, &hop.url.to_string(), &text)
            })?;
        sent += 1;
        let Some(location) = redirect_location(&exchange) else {
            return Ok(exchange);
        };
        let status = exchange.status.as_u16();
        let Some(next) = next_hop(first, &hop, status, &location)? else {
            return Ok(exchange);
        };
        if sent >= MAX_REQUESTS {
            return Err(client_error(
                hop.method,
                &location,
                &format!("stopped after {MAX_REQUESTS} redirects"),
            ));
        }
        hop = Cow::Owned(next);
    }
}

/// The request that follows `hop`'s redirect (`status`) to `location` in a
/// chain that began with `first`: `None` when `location` leads to another
/// host, so the redirect is the final response; Go's client error text
/// when `location` does not parse.
fn next_hop(first: &Hop, hop: &Hop, status: u16, location: &str) -> Result<Option<Hop>, String> {
    let next = hop.url.resolve(location).map_err(|err| {
        let text = format!(
            "failed to parse Location header {}: {err}",
            go_quote(location)
        );
        client_error(hop.method, &hop.url.to_string(), &text)
    })?;
    if next.hostname() != first.url.hostname() {
        return Ok(None);
    }
    Ok(Some(hop.redirected(first, status, location, next)))
}

/// The request a probe of `action` sends after its first request was
/// redirected to `location`, worked out without any I/O.
///
/// An entry point for outside input (the pod's `httpGet` and a server's
/// `Location` header) that the fuzz suite (`tests/fuzz.rs`) drives: the
/// probe runs the same steps on the wire. `Ok(None)`: `location` leads to
/// another host and is not followed. `Err`: Go's error text, when the first
/// request cannot be built (H18) or `location` does not parse.
pub fn redirected_request(
    action: &HttpGetAction,
    pod_ip: &str,
    user_agent: &str,
    location: &str,
) -> Result<Option<RedirectedRequest>, String> {
    let first = Hop::first(action, pod_ip, user_agent).map_err(|e| e.to_string())?;
    let next = next_hop(&first, &first, FOUND, location)?;
    Ok(next.map(|hop| RedirectedRequest {
        url: hop.url.to_string(),
        request_uri: hop.url.request_uri(),
        header_lines: hop.header_lines().map(|lines| {
            lines
                .into_iter()
                .map(|(name, value)| (name.to_string(), value.into_owned()))
                .collect()
        }),
    }))
}

/// The redirect [`redirected_request`] works out: a 302 Found, which
/// changes no GET.
const FOUND: u16 = 302;

/// A followed redirect's request, as [`redirected_request`] works it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedirectedRequest {
    /// The URL as Go prints it in client errors.
    pub url: String,
    /// The request target on the request line.
    pub request_uri: String,
    /// The header lines in the order Go writes them, or Go's transport
    /// error for an invalid header.
    pub header_lines: Result<Vec<(String, String)>, String>,
}

/// The `Location` of a response Go's client would follow: 301, 302, 303,
/// 307 or 308 with a non-empty first `Location` value.
fn redirect_location(exchange: &Exchange) -> Option<String> {
    let follows = matches!(exchange.status.as_u16(), 301 | 302 | 303 | 307 | 308);
    let location = exchange.location.as_ref()?;
    let location = String::from_utf8_lossy(location.as_bytes());
    (follows && !location.is_empty()).then(|| location.into_owned())
}

/// Go's `*url.Error` text: the method as its `Op` (`Get`, `Head`, `Post`,
/// `Put`).
fn client_error(method: Method, url: &str, text: &str) -> String {
    let op = match method {
        Method::Get => "Get",
        Method::Head => "Head",
        Method::Post => "Post",
        Method::Put => "Put",
    };
    format!("{op} {}: {text}", go_quote(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h13_status_classes() {
        let result = |code: u16| {
            outcome(
                StatusCode::from_u16(code).unwrap(),
                b"body",
                &Expect::default(),
            )
        };
        assert_eq!(result(200), Outcome::new(ProbeResult::Success, "body"));
        assert_eq!(result(299).result, ProbeResult::Success);
        assert_eq!(
            result(301),
            Outcome::new(
                ProbeResult::Warning,
                "Probe terminated redirects, Response body: body"
            )
        );
        assert_eq!(result(399).result, ProbeResult::Warning);
        assert_eq!(
            result(199),
            Outcome::new(
                ProbeResult::Failure,
                "HTTP probe failed with statuscode: 199"
            )
        );
        assert_eq!(result(400).result, ProbeResult::Failure);
    }

    #[test]
    fn h15_failure_output_never_has_the_body() {
        let out = outcome(
            StatusCode::INTERNAL_SERVER_ERROR,
            b"secret",
            &Expect::default(),
        );
        assert_eq!(out.output, "HTTP probe failed with statuscode: 500");
    }

    #[test]
    fn non_utf8_bodies_are_converted_lossily() {
        let out = outcome(StatusCode::OK, b"ok\xff", &Expect::default());
        assert_eq!(out.output, "ok\u{fffd}");
    }

    #[test]
    fn redirected_request_resolves_location_against_the_probe_url() {
        let action = HttpGetAction {
            scheme: podprobe_core::spec::probe_spec::Scheme::Http,
            host: None,
            port: 8080,
            path: "/a/b".to_string(),
            headers: Vec::new(),
            protocol: Default::default(),
            extensions: Default::default(),
        };
        let redirect = |location: &str| redirected_request(&action, "10.0.0.1", "ua", location);
        let next = redirect("../c?x").unwrap().expect("same host: followed");
        assert_eq!(next.url, "http://10.0.0.1:8080/c?x");
        assert_eq!(next.request_uri, "/c?x");
        let lines = next.header_lines.unwrap();
        assert!(lines.contains(&(
            "Referer".to_string(),
            "http://10.0.0.1:8080/a/b".to_string()
        )));
        assert_eq!(redirect("http://other/"), Ok(None));
        assert_eq!(
            redirect("%zz"),
            Err(r#"Get "http://10.0.0.1:8080/a/b": failed to parse Location header "%zz": parse "%zz": invalid URL escape "%zz""#.to_string())
        );
    }

    #[test]
    fn head_client_errors_name_the_method_as_go_does() {
        assert_eq!(
            client_error(Method::Head, "http://127.0.0.1:1/", "EOF"),
            "Head \"http://127.0.0.1:1/\": EOF"
        );
    }

    #[test]
    fn client_errors_quote_the_url_like_go() {
        assert_eq!(
            client_error(
                Method::Get,
                "http://127.0.0.1:1/",
                "dial tcp 127.0.0.1:1: connect: connection refused"
            ),
            "Get \"http://127.0.0.1:1/\": dial tcp 127.0.0.1:1: connect: connection refused"
        );
    }
}
