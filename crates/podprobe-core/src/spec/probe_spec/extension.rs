//! podprobe's probe extensions (issue #14): everything a probe object holds
//! under its `podprobe` key, beside the core/v1 `Probe` fields, which stay
//! exactly the API server's.
//!
//! ```yaml
//! readinessProbe:
//!   httpGet: {path: /healthz, port: 8080}
//!   podprobe:
//!     expect:
//!       statusCodes: ["200", "204", "300-399"]
//!       bodyContains: "ok"
//!       bodyRegex: "^\\{\"status\":\"UP\""
//!     method: HEAD          # or POST, PUT with `body`
//!     body: '{"deep": true}'   # POST and PUT only, at most 4 KiB
//!     http: {protocol: HTTP2}   # h2c, as `httpGet.protocol: HTTP2`
//!     tls: {caBundle: "...", serverName: app.internal}   # see [`tls`]
//!     network: pod          # see [`network`]
//!     periodMilliseconds: 250   # any handler; overrides periodSeconds
//! ```
//!
//! [`ProbeExtensions`] is the key as written (decoded strictly with the rest
//! of the probe, see [`super::decode`]); [`http_extensions`] validates it
//! against the probe's handler and builds the [`HttpExtensions`] an
//! `httpGet` probe runs with, its regex compiled once, here;
//! [`period_milliseconds`] validates the period. Without the key a probe is
//! the kubelet's in every respect.

use std::fmt;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

use super::validation::{FieldError, is_dns_subdomain};
use crate::util::gofmt::go_quote;

pub(crate) mod body_regex;
pub mod disruption_budget;
pub mod marker_options;
pub(crate) mod tls_options;
pub mod workload_options;

pub use self::body_regex::{BodyRegex, GaveUp, MAX_COMPILED_REGEX_BYTES, MAX_REGEX_DFA_BYTES};
pub use self::tls_options::{CaBundle, ClientIdentity, TlsFields, TlsSettings};

/// The most entries `expect.statusCodes` may hold.
pub const MAX_STATUS_CODES: usize = 32;

/// The longest `expect.bodyRegex` pattern, in bytes.
pub const MAX_BODY_REGEX_BYTES: usize = 1024;

/// The longest `expect.bodyContains` text, in bytes; failure messages quote it.
pub const MAX_BODY_CONTAINS_BYTES: usize = 1024;

/// The longest request `body` of a POST or PUT probe, in bytes (#28): a
/// health request, not an upload.
pub const MAX_REQUEST_BODY_BYTES: usize = 4096;

/// The most `http.headers` taken from Secrets one probe may name.
pub const MAX_SECRET_HEADERS: usize = 8;

/// The longest Secret key a header names: the API server's bound on a
/// Secret's data keys.
pub const MAX_SECRET_KEY_BYTES: usize = 253;

/// The shortest `periodMilliseconds` (#14's contract). Below it a probe's
/// own round trip (an exec through CRI, a TLS handshake) is a large part of
/// the period; what a node pays at this rate (CPU, TIME-WAIT sockets,
/// conntrack entries) is measured in `bench/RESULTS.md`, "Sub-second
/// periods".
pub const MIN_PERIOD_MILLISECONDS: i32 = 100;

/// The probe object's `podprobe` key as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeExtensions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<ExpectFields>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The request body of a `POST` or `PUT` probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpFields>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFields>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Overrides `periodSeconds` (see [`period_milliseconds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_milliseconds: Option<i32>,
    /// The probe's result as labels or annotations of its pod (MK1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub markers: Option<Vec<marker_options::MarkerFields>>,
    /// A liveness probe's restarts under the workload's budget (WG1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_budget: Option<workload_options::RestartBudgetFields>,
    /// A readiness probe's gate held for the workload's floor (WG1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_floor: Option<workload_options::ReadinessFloorFields>,
}

/// Where a network probe's sockets are made (`podprobe.network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Network {
    /// The node's network namespace, as the kubelet's probes; without
    /// `host`, the probe targets the pod IP.
    #[default]
    Node,
    /// The pod's own network namespace; without `host`, the probe targets
    /// the pod's loopback, [`POD_LOOPBACK`].
    Pod,
}

/// The target of a `network: pod` probe without `host`: what a server
/// bound to loopback inside the pod listens on, and what a server bound to
/// every address answers on too.
pub const POD_LOOPBACK: &str = "127.0.0.1";

/// Validates `podprobe.network` of a probe whose handler is `handler`;
/// `root` is the probe's field (`readinessProbe`). Only network probes
/// (`httpGet`, `tcpSocket`, `grpc`) take it: an exec probe runs in the
/// container, through the runtime, wherever its network is.
pub(super) fn network(
    root: &str,
    handler: &str,
    podprobe: &ProbeExtensions,
) -> Result<Network, FieldError> {
    let Some(given) = podprobe.network.as_deref() else {
        return Ok(Network::Node);
    };
    let field = format!("{root}.podprobe.network");
    if !matches!(handler, "httpGet" | "tcpSocket" | "grpc") {
        return Err(FieldError::forbidden(
            field,
            &format!("may only be set for httpGet, tcpSocket and grpc probes, not {handler}"),
        ));
    }
    match given {
        "node" => Ok(Network::Node),
        "pod" => Ok(Network::Pod),
        other => Err(FieldError::not_supported(field, other, &["node", "pod"])),
    }
}

/// `podprobe.http` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpFields {
    /// `HTTP1` or `HTTP2`, as `httpGet.protocol` (see
    /// [`super::normalize_object`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Request headers whose values are read from Secrets at run time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<Vec<SecretHeaderFields>>,
}

/// One `http.headers` entry as written: `{name, valueFrom: {secretKeyRef:
/// {name, key}}}`, the shape of a container's `env` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretHeaderFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HeaderValueFrom>,
}

/// `valueFrom` of an `http.headers` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValueFrom {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
}

/// A key of a Secret in the pod's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A request header whose value is the `key` of Secret `secret` in the
/// pod's namespace, read when the probe runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHeader {
    pub name: String,
    pub secret: String,
    pub key: String,
}

/// `podprobe.expect` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_codes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_contains: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_regex: Option<String>,
}

/// The request method of an `httpGet` probe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Method {
    /// The kubelet's.
    #[default]
    Get,
    /// No body is sent back, so none is read.
    Head,
    /// With the probe's `body` (possibly empty).
    Post,
    Put,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
        }
    }

    /// Whether a request of this method carries the probe's `body`.
    pub fn sends_body(self) -> bool {
        matches!(self, Method::Post | Method::Put)
    }
}

/// What an `httpGet` probe runs with beyond the kubelet's rules; the
/// default is exactly the kubelet's probe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpExtensions {
    pub method: Method,
    /// The request body of a `POST` or `PUT` ([`Method::sends_body`]);
    /// empty for the others.
    pub body: String,
    /// `http.headers`: headers whose values come from Secrets, added to the
    /// request after `httpHeaders` when the probe runs.
    pub secret_headers: Vec<SecretHeader>,
    pub expect: Expect,
    /// `podprobe.tls` for scheme HTTPS; the default is the kubelet's
    /// unverified TLS. Boxed: most probes have none, and it is larger than
    /// the rest of the action.
    pub tls: Box<TlsSettings>,
}

/// The final response's expectations; all unset is the kubelet's rule
/// (2xx success, 3xx warning, anything else failure).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// Replaces the 200-399 rule when set: a listed code is a success.
    pub status_codes: Option<StatusCodes>,
    /// Must occur in the body the kubelet reads (its first 10 KiB).
    pub body_contains: Option<String>,
    /// Must match somewhere in that body.
    pub body_regex: Option<BodyRegex>,
}

/// `expect.statusCodes`: single codes and inclusive ranges, in the order
/// given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCodes(Vec<RangeInclusive<u16>>);

impl StatusCodes {
    pub fn contains(&self, code: u16) -> bool {
        self.0.iter().any(|range| range.contains(&code))
    }
}

/// As failure messages list them: `200, 204 or 300-399`.
impl fmt::Display for StatusCodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|r| {
                if r.start() == r.end() {
                    r.start().to_string()
                } else {
                    format!("{}-{}", r.start(), r.end())
                }
            })
            .collect();
        match entries.split_last() {
            Some((last, [])) => f.write_str(last),
            Some((last, rest)) => write!(f, "{} or {last}", rest.join(", ")),
            None => Ok(()),
        }
    }
}

/// Validates `podprobe` of a probe whose handler is `handler` (`httpGet`,
/// `exec`, ...) and builds what an `httpGet` probe runs with; `root` is the
/// probe's field (`readinessProbe`). The first error is returned, in field
/// order: `method`, `body`, then `expect.statusCodes`, `bodyContains`,
/// `bodyRegex`.
pub(super) fn http_extensions(
    root: &str,
    handler: &str,
    podprobe: &ProbeExtensions,
) -> Result<HttpExtensions, FieldError> {
    let field = |name: &str| format!("{root}.podprobe.{name}");
    if handler != "httpGet" {
        let set = [
            ("method", podprobe.method.is_some()),
            ("body", podprobe.body.is_some()),
            ("http", podprobe.http.is_some()),
            ("expect", podprobe.expect.is_some()),
        ]
        .into_iter()
        .find_map(|(name, set)| set.then_some(name));
        if let Some(set) = set {
            return Err(FieldError::forbidden(
                field(set),
                &format!("may only be set for httpGet probes, not {handler}"),
            ));
        }
    }
    let method = match podprobe.method.as_deref() {
        None | Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        Some("POST") => Method::Post,
        Some("PUT") => Method::Put,
        Some(other) => {
            return Err(FieldError::not_supported(
                field("method"),
                other,
                &["GET", "HEAD", "POST", "PUT"],
            ));
        }
    };
    let body = match &podprobe.body {
        None => String::new(),
        Some(_) if !method.sends_body() => {
            return Err(FieldError::forbidden(
                field("body"),
                &format!(
                    "a {} request has no body (method: POST or PUT)",
                    method.as_str()
                ),
            ));
        }
        Some(body) if body.len() > MAX_REQUEST_BODY_BYTES => {
            return Err(FieldError::too_long_bytes(
                field("body"),
                MAX_REQUEST_BODY_BYTES,
            ));
        }
        Some(body) => body.clone(),
    };
    let secret_headers = match podprobe.http.as_ref().and_then(|h| h.headers.as_ref()) {
        Some(given) => secret_headers(&field("http.headers"), given)?,
        None => Vec::new(),
    };
    let Some(given) = &podprobe.expect else {
        return Ok(HttpExtensions {
            method,
            body,
            secret_headers,
            ..HttpExtensions::default()
        });
    };
    let status_codes = given
        .status_codes
        .as_deref()
        .map(|codes| status_codes(&field("expect.statusCodes"), codes))
        .transpose()?;
    if method == Method::Head {
        let body_field = [
            (given.body_contains.is_some(), "bodyContains"),
            (given.body_regex.is_some(), "bodyRegex"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name));
        if let Some(name) = body_field {
            return Err(FieldError::forbidden(
                field(&format!("expect.{name}")),
                "a HEAD response has no body (method: HEAD)",
            ));
        }
    }
    let body_contains = given
        .body_contains
        .as_deref()
        .map(|text| body_contains(field("expect.bodyContains"), text))
        .transpose()?;
    let body_regex = given
        .body_regex
        .as_deref()
        .map(|pattern| body_regex(field("expect.bodyRegex"), pattern))
        .transpose()?;
    Ok(HttpExtensions {
        method,
        body,
        secret_headers,
        expect: Expect {
            status_codes,
            body_contains,
            body_regex,
        },
        tls: Box::default(),
    })
}

/// Validates `http.headers` (at `field`): at most [`MAX_SECRET_HEADERS`],
/// each with a header name (an HTTP token) and a Secret's name and key.
fn secret_headers(
    field: &str,
    given: &[SecretHeaderFields],
) -> Result<Vec<SecretHeader>, FieldError> {
    if given.len() > MAX_SECRET_HEADERS {
        return Err(FieldError::too_many(
            field.to_string(),
            given.len(),
            MAX_SECRET_HEADERS,
        ));
    }
    let entries = given.iter().enumerate().map(|(index, entry)| {
        let at = |name: &str| format!("{field}[{index}].{name}");
        let name = match entry.name.as_deref() {
            None | Some("") => return Err(FieldError::required(at("name"), "")),
            Some(name) if !name.bytes().all(is_token_byte) => {
                return Err(FieldError::invalid_string(
                    at("name"),
                    name,
                    "a header name must be an HTTP token",
                ));
            }
            Some(name) => name.to_string(),
        };
        let reference = entry
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref());
        let Some(reference) = reference else {
            return Err(FieldError::required(at("valueFrom.secretKeyRef"), ""));
        };
        let secret = match reference.name.as_deref() {
            None | Some("") => {
                return Err(FieldError::required(at("valueFrom.secretKeyRef.name"), ""));
            }
            Some(secret) if !is_dns_subdomain(secret) => {
                return Err(FieldError::invalid_string(
                    at("valueFrom.secretKeyRef.name"),
                    secret,
                    "a Secret name must be a lowercase RFC 1123 subdomain",
                ));
            }
            Some(secret) => secret.to_string(),
        };
        let key = match reference.key.as_deref() {
            None | Some("") => {
                return Err(FieldError::required(at("valueFrom.secretKeyRef.key"), ""));
            }
            Some(key) if !is_secret_key(key) => {
                return Err(FieldError::invalid_string(
                    at("valueFrom.secretKeyRef.key"),
                    key,
                    "a Secret key consists of alphanumeric characters, '-', '_' or '.'",
                ));
            }
            Some(key) => key.to_string(),
        };
        Ok(SecretHeader { name, secret, key })
    });
    entries.collect()
}

/// An HTTP token character (RFC 9110 `tchar`), what a header name is made
/// of.
pub fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The API server's rule for a Secret's data keys.
fn is_secret_key(key: &str) -> bool {
    key.len() <= MAX_SECRET_KEY_BYTES
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Validates `podprobe.periodMilliseconds` of the `root` probe: at least
/// [`MIN_PERIOD_MILLISECONDS`], for any handler. Returns the period to run
/// on instead of `periodSeconds`, if set.
///
/// Nothing else about the probe changes: thresholds still count runs, and
/// a `timeoutSeconds` (at least 1 s) longer than the period is accepted as
/// the API server accepts `timeoutSeconds` above `periodSeconds`. A worker
/// runs its probes one at a time (W6), so a run that outlasts the period
/// delays the next, which then starts at once (W7).
pub(super) fn period_milliseconds(
    root: &str,
    podprobe: &ProbeExtensions,
) -> Result<Option<i32>, FieldError> {
    match podprobe.period_milliseconds {
        Some(millis) if millis < MIN_PERIOD_MILLISECONDS => Err(FieldError::invalid_int(
            format!("{root}.podprobe.periodMilliseconds"),
            millis,
            &format!("must be greater than or equal to {MIN_PERIOD_MILLISECONDS}"),
        )),
        given => Ok(given),
    }
}

const STATUS_CODE_GRAMMAR: &str =
    "must be a status code (100-599) or an inclusive range of them (\"300-399\")";

fn status_codes(field: &str, given: &[String]) -> Result<StatusCodes, FieldError> {
    if given.is_empty() {
        return Err(FieldError::required(
            field.to_string(),
            "at least one status code or range",
        ));
    }
    if given.len() > MAX_STATUS_CODES {
        return Err(FieldError::too_many(
            field.to_string(),
            given.len(),
            MAX_STATUS_CODES,
        ));
    }
    let ranges = given
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let invalid =
                |detail: &str| FieldError::invalid_string(format!("{field}[{i}]"), entry, detail);
            let (first, last) = entry
                .split_once('-')
                .unwrap_or((entry.as_str(), entry.as_str()));
            let (Some(first), Some(last)) = (status_code(first), status_code(last)) else {
                return Err(invalid(STATUS_CODE_GRAMMAR));
            };
            if first > last {
                return Err(invalid("a range's first code may not be above its last"));
            }
            Ok(first..=last)
        })
        .collect::<Result<_, _>>()?;
    Ok(StatusCodes(ranges))
}

/// A status code of three decimal digits, 100 to 599.
fn status_code(text: &str) -> Option<u16> {
    if text.len() != 3 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|code| (100..=599).contains(code))
}

fn body_contains(field: String, text: &str) -> Result<String, FieldError> {
    if text.is_empty() {
        return Err(FieldError::invalid_string(field, text, "may not be empty"));
    }
    if text.len() > MAX_BODY_CONTAINS_BYTES {
        return Err(FieldError::too_long_bytes(field, MAX_BODY_CONTAINS_BYTES));
    }
    Ok(text.to_string())
}

fn body_regex(field: String, pattern: &str) -> Result<BodyRegex, FieldError> {
    if pattern.len() > MAX_BODY_REGEX_BYTES {
        return Err(FieldError::too_long_bytes(field, MAX_BODY_REGEX_BYTES));
    }
    BodyRegex::new(pattern).map_err(|e| FieldError::invalid_string(field, pattern, &e.to_string()))
}

impl Expect {
    /// Why the final response misses its status or `bodyContains`
    /// expectation, in the kubelet's message style; `None` when it meets
    /// them or when, without `statusCodes`, its status is outside 200-399
    /// (the kubelet's rule then fails it with the kubelet's message). The
    /// body expectations only apply to a response whose status passed.
    /// Messages never carry the body. `bodyRegex` is judged after this, by
    /// a search the caller bounds in time ([`Expect::regex_to_match`]).
    pub fn failure(&self, status: u16, body: &str) -> Option<String> {
        if let Some(codes) = &self.status_codes
            && !codes.contains(status)
        {
            return Some(format!(
                "HTTP probe failed with statuscode: {status} (expected {codes})"
            ));
        }
        if !self.judges_body(status) {
            return None;
        }
        if let Some(text) = &self.body_contains
            && !body.contains(text.as_str())
        {
            return Some(format!(
                "HTTP probe failed: body does not contain {}",
                go_quote(text)
            ));
        }
        None
    }

    /// The `bodyRegex` a response with `status` must still match, once
    /// [`Expect::failure`] found nothing.
    pub fn regex_to_match(&self, status: u16) -> Option<&BodyRegex> {
        self.body_regex
            .as_ref()
            .filter(|_| self.judges_body(status))
    }

    /// Whether the body expectations apply to a response with `status`.
    fn judges_body(&self, status: u16) -> bool {
        match &self.status_codes {
            Some(codes) => codes.contains(status),
            None => (200..=399).contains(&status),
        }
    }
}

/// The failure message of a `bodyRegex` search's `verdict`; `None` when it
/// matched.
pub fn regex_failure(regex: &BodyRegex, verdict: Result<bool, GaveUp>) -> Option<String> {
    match verdict {
        Ok(true) => None,
        Ok(false) => Some(format!(
            "HTTP probe failed: body does not match {}",
            regex.as_str()
        )),
        Err(gave_up) => Some(format!(
            "HTTP probe failed: matching the body against {} gave up: {gave_up}",
            regex.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect_fields(value: serde_json::Value) -> ProbeExtensions {
        serde_json::from_value(value).expect("decodes")
    }

    fn built(value: serde_json::Value) -> Result<HttpExtensions, String> {
        http_extensions("readinessProbe", "httpGet", &expect_fields(value))
            .map_err(|e| format!("{}: {}", e.field, e.message))
    }

    fn codes(list: &[&str]) -> Result<StatusCodes, String> {
        let given: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        status_codes("f", &given).map_err(|e| format!("{}: {}", e.field, e.message))
    }

    #[test]
    fn status_codes_are_single_codes_or_ordered_ranges() {
        let parsed = codes(&["200", "204", "300-399"]).unwrap();
        for (code, listed) in [(200, true), (204, true), (201, false), (300, true)] {
            assert_eq!(parsed.contains(code), listed, "{code}");
        }
        assert!(parsed.contains(399) && !parsed.contains(400) && !parsed.contains(299));
        assert_eq!(parsed.to_string(), "200, 204 or 300-399");
        assert_eq!(codes(&["503"]).unwrap().to_string(), "503");
        assert!(codes(&["100", "599", "100-599", "200-200"]).is_ok());
    }

    #[test]
    fn status_codes_grammar_is_refused_with_the_entry_named() {
        let grammar = format!("Invalid value: {{}}: {STATUS_CODE_GRAMMAR}");
        for bad in [
            "99",
            "600",
            "099",
            "2OO",
            "",
            "200-",
            "-200",
            "200-600",
            "20x",
            "+200",
            "200 ",
            "200-300-400",
            "1e2",
        ] {
            assert_eq!(
                codes(&["200", bad]),
                Err(format!("f[1]: {}", grammar.replace("{}", &go_quote(bad)))),
                "{bad:?}"
            );
        }
        assert_eq!(
            codes(&["399-300"]),
            Err(
                r#"f[0]: Invalid value: "399-300": a range's first code may not be above its last"#
                    .to_string()
            )
        );
        assert_eq!(
            codes(&[]),
            Err("f: Required value: at least one status code or range".to_string())
        );
        let many = vec!["200"; MAX_STATUS_CODES + 1];
        assert_eq!(
            codes(&many),
            Err("f: Too many: 33: must have at most 32 items".to_string())
        );
        assert!(codes(&vec!["200"; MAX_STATUS_CODES]).is_ok());
    }

    #[test]
    fn head_with_a_body_expectation_is_refused() {
        for (key, value) in [("bodyContains", "ok"), ("bodyRegex", "ok")] {
            assert_eq!(
                built(serde_json::json!({"method": "HEAD", "expect": {key: value}})),
                Err(format!(
                    "readinessProbe.podprobe.expect.{key}: Forbidden: a HEAD response has no body (method: HEAD)"
                ))
            );
        }
        let head = built(serde_json::json!({"method": "HEAD", "expect": {"statusCodes": ["204"]}}))
            .unwrap();
        assert_eq!(head.method, Method::Head);
        assert_eq!(
            built(serde_json::json!({"method": "PATCH"})).map(|_| ()),
            Err(r#"readinessProbe.podprobe.method: Unsupported value: "PATCH": supported values: "GET", "HEAD", "POST", "PUT""#.to_string())
        );
        assert_eq!(
            built(serde_json::json!({"method": "head"})).map(|_| ()),
            Err(r#"readinessProbe.podprobe.method: Unsupported value: "head": supported values: "GET", "HEAD", "POST", "PUT""#.to_string())
        );
    }

    #[test]
    fn h24_post_and_put_carry_a_bounded_body_that_no_other_method_may_have() {
        let post = built(serde_json::json!({"method": "POST", "body": "{\"deep\":true}"})).unwrap();
        assert_eq!(
            (post.method, post.body.as_str()),
            (Method::Post, r#"{"deep":true}"#)
        );
        let put = built(serde_json::json!({"method": "PUT"})).unwrap();
        assert_eq!((put.method, put.body.as_str()), (Method::Put, ""));
        assert!(put.method.sends_body() && !Method::Get.sends_body());
        for method in ["GET", "HEAD"] {
            assert_eq!(
                built(serde_json::json!({"method": method, "body": "x"})).map(|_| ()),
                Err(format!(
                    "readinessProbe.podprobe.body: Forbidden: a {method} request has no body (method: POST or PUT)"
                ))
            );
        }
        assert_eq!(
            built(serde_json::json!({"body": "x"})).map(|_| ()),
            Err("readinessProbe.podprobe.body: Forbidden: a GET request has no body (method: POST or PUT)".to_string())
        );
        let largest = "b".repeat(MAX_REQUEST_BODY_BYTES);
        assert!(built(serde_json::json!({"method": "POST", "body": largest})).is_ok());
        assert_eq!(
            built(serde_json::json!({"method": "POST", "body": format!("{largest}b")})).map(|_| ()),
            Err(
                "readinessProbe.podprobe.body: Too long: may not be more than 4096 bytes"
                    .to_string()
            )
        );
    }

    #[test]
    fn h25_secret_headers_name_a_header_and_a_secrets_key() {
        let header = |name: &str, secret: &str, key: &str| serde_json::json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}});
        let built_with = |headers: serde_json::Value| {
            built(serde_json::json!({"http": {"headers": headers}})).map(|e| e.secret_headers)
        };
        assert_eq!(
            built_with(serde_json::json!([header(
                "Authorization",
                "probe-auth",
                "token.v1"
            )])),
            Ok(vec![SecretHeader {
                name: "Authorization".into(),
                secret: "probe-auth".into(),
                key: "token.v1".into(),
            }])
        );
        let field = "readinessProbe.podprobe.http.headers";
        for (entry, error) in [
            (
                header("", "s", "k"),
                format!("{field}[0].name: Required value"),
            ),
            (
                header("Bad Name", "s", "k"),
                format!(
                    r#"{field}[0].name: Invalid value: "Bad Name": a header name must be an HTTP token"#
                ),
            ),
            (
                serde_json::json!({"name": "X"}),
                format!("{field}[0].valueFrom.secretKeyRef: Required value"),
            ),
            (
                header("X", "Probe", "k"),
                format!(
                    r#"{field}[0].valueFrom.secretKeyRef.name: Invalid value: "Probe": a Secret name must be a lowercase RFC 1123 subdomain"#
                ),
            ),
            (
                header("X", "s", "a/b"),
                format!(
                    r#"{field}[0].valueFrom.secretKeyRef.key: Invalid value: "a/b": a Secret key consists of alphanumeric characters, '-', '_' or '.'"#
                ),
            ),
        ] {
            assert_eq!(built_with(serde_json::json!([entry])), Err(error));
        }
        let many: Vec<_> = (0..=MAX_SECRET_HEADERS)
            .map(|i| header(&format!("X-{i}"), "s", "k"))
            .collect();
        assert_eq!(
            built_with(serde_json::json!(many)),
            Err(format!("{field}: Too many: 9: must have at most 8 items"))
        );
    }

    #[test]
    fn extensions_on_other_handlers_are_refused() {
        for handler in ["exec", "tcpSocket", "grpc"] {
            let refused = |value| {
                http_extensions("livenessProbe", handler, &expect_fields(value))
                    .map(|_| ())
                    .map_err(|e| format!("{}: {}", e.field, e.message))
            };
            let detail = format!("Forbidden: may only be set for httpGet probes, not {handler}");
            assert_eq!(
                refused(serde_json::json!({"expect": {"bodyContains": "ok"}})),
                Err(format!("livenessProbe.podprobe.expect: {detail}"))
            );
            assert_eq!(
                refused(serde_json::json!({"method": "GET"})),
                Err(format!("livenessProbe.podprobe.method: {detail}"))
            );
            assert_eq!(
                refused(serde_json::json!({"body": "x"})),
                Err(format!("livenessProbe.podprobe.body: {detail}"))
            );
            assert_eq!(
                refused(serde_json::json!({"http": {"protocol": "HTTP2"}})),
                Err(format!("livenessProbe.podprobe.http: {detail}"))
            );
            assert_eq!(refused(serde_json::json!({})), Ok(()), "empty: nothing set");
        }
    }

    #[test]
    fn body_regex_is_bounded_in_length_and_compiled_size() {
        let long = "a".repeat(MAX_BODY_REGEX_BYTES + 1);
        assert_eq!(
            built(serde_json::json!({"expect": {"bodyRegex": long}})).map(|_| ()),
            Err("readinessProbe.podprobe.expect.bodyRegex: Too long: may not be more than 1024 bytes".to_string())
        );
        assert!(
            built(serde_json::json!({"expect": {"bodyRegex": "a".repeat(MAX_BODY_REGEX_BYTES)}}))
                .is_ok()
        );
        // Short, but Unicode classes repeated compile to megabytes.
        let hostile = r"(\w{100}){100}";
        let refused = built(serde_json::json!({"expect": {"bodyRegex": hostile}})).unwrap_err();
        assert_eq!(
            refused,
            format!(
                r#"readinessProbe.podprobe.expect.bodyRegex: Invalid value: "(\\w{{100}}){{100}}": compiles to more than {MAX_COMPILED_REGEX_BYTES} bytes"#
            )
        );
        assert_eq!(
            built(serde_json::json!({"expect": {"bodyRegex": "(unclosed"}})).map(|_| ()),
            Err(r#"readinessProbe.podprobe.expect.bodyRegex: Invalid value: "(unclosed": not a valid regex: unclosed group"#.to_string())
        );
    }

    #[test]
    fn body_contains_may_not_be_empty_or_long() {
        assert_eq!(
            built(serde_json::json!({"expect": {"bodyContains": ""}})).map(|_| ()),
            Err(r#"readinessProbe.podprobe.expect.bodyContains: Invalid value: "": may not be empty"#.to_string())
        );
        let long = "a".repeat(MAX_BODY_CONTAINS_BYTES + 1);
        assert_eq!(
            built(serde_json::json!({"expect": {"bodyContains": long}})).map(|_| ()),
            Err("readinessProbe.podprobe.expect.bodyContains: Too long: may not be more than 1024 bytes".to_string())
        );
    }

    #[test]
    fn failures_name_the_expectation_and_never_the_body() {
        let expect = built(serde_json::json!({"expect": {
            "statusCodes": ["200", "204", "300-399"],
            "bodyContains": "ok",
            "bodyRegex": r#"^\{"status":"UP""#,
        }}))
        .unwrap()
        .expect;
        assert_eq!(
            expect.failure(503, r#"{"status":"UP"} ok"#).as_deref(),
            Some("HTTP probe failed with statuscode: 503 (expected 200, 204 or 300-399)")
        );
        assert_eq!(
            expect.failure(200, r#"{"status":"UP"}"#).as_deref(),
            Some(r#"HTTP probe failed: body does not contain "ok""#)
        );
        assert_eq!(expect.failure(302, r#"ok {"status":"UP"}"#), None);
        let regex = expect
            .regex_to_match(302)
            .expect("status passed: the regex judges");
        assert_eq!(
            regex_failure(regex, regex.is_match(r#"ok {"status":"UP"}"#)).as_deref(),
            Some(r#"HTTP probe failed: body does not match ^\{"status":"UP""#)
        );
        assert_eq!(
            regex_failure(regex, Err(GaveUp::Costly)).as_deref(),
            Some(
                r#"HTTP probe failed: matching the body against ^\{"status":"UP" gave up: too costly to match against this body"#
            )
        );
        assert_eq!(
            regex_failure(regex, regex.is_match(r#"{"status":"UP"}"#)),
            None
        );
        assert!(
            expect.regex_to_match(503).is_none(),
            "status failed: body not judged"
        );
        assert_eq!(expect.failure(204, r#"{"status":"UP"} ok"#), None);
        assert_eq!(
            Expect::default().failure(500, ""),
            None,
            "the status rule is the caller's"
        );
        let body_only = Expect {
            body_contains: Some("ok".into()),
            ..Expect::default()
        };
        assert_eq!(
            body_only.failure(500, ""),
            None,
            "the kubelet's rule fails it"
        );
        assert!(body_only.failure(399, "").is_some());
    }

    #[test]
    fn network_is_node_or_pod_and_only_for_network_probes() {
        let network_of = |handler: &str, value| {
            network("readinessProbe", handler, &expect_fields(value))
                .map_err(|e| format!("{}: {}", e.field, e.message))
        };
        for handler in ["httpGet", "tcpSocket", "grpc"] {
            assert_eq!(
                network_of(handler, serde_json::json!({})),
                Ok(Network::Node)
            );
            let node = serde_json::json!({"network": "node"});
            assert_eq!(network_of(handler, node), Ok(Network::Node));
            let pod = serde_json::json!({"network": "pod"});
            assert_eq!(network_of(handler, pod), Ok(Network::Pod));
        }
        for bad in ["Pod", "host", ""] {
            assert_eq!(
                network_of("tcpSocket", serde_json::json!({"network": bad})),
                Err(format!(
                    r#"readinessProbe.podprobe.network: Unsupported value: "{bad}": supported values: "node", "pod""#
                ))
            );
        }
        for value in ["pod", "node"] {
            assert_eq!(
                network_of("exec", serde_json::json!({"network": value})),
                Err(
                    "readinessProbe.podprobe.network: Forbidden: may only be set for httpGet, \
                     tcpSocket and grpc probes, not exec"
                        .to_string()
                )
            );
        }
        assert_eq!(network_of("exec", serde_json::json!({})), Ok(Network::Node));
    }

    #[test]
    fn period_milliseconds_is_at_least_the_minimum() {
        let period = |millis: Option<i32>| {
            let podprobe = ProbeExtensions {
                period_milliseconds: millis,
                ..ProbeExtensions::default()
            };
            period_milliseconds("startupProbe", &podprobe)
                .map_err(|e| format!("{}: {}", e.field, e.message))
        };
        assert_eq!(period(None), Ok(None));
        assert_eq!(period(Some(100)), Ok(Some(100)));
        assert_eq!(period(Some(i32::MAX)), Ok(Some(i32::MAX)));
        for bad in [99, 0, -250] {
            assert_eq!(
                period(Some(bad)),
                Err(format!(
                    "startupProbe.podprobe.periodMilliseconds: Invalid value: {bad}: must be greater than or equal to 100"
                ))
            );
        }
    }

    #[test]
    fn compiled_regexes_compare_by_pattern() {
        let a = body_regex("f".into(), "a+").unwrap();
        assert_eq!(a, body_regex("f".into(), "a+").unwrap());
        assert_ne!(a, body_regex("f".into(), "a*").unwrap());
    }
}
