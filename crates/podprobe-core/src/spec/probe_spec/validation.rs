//! The API server's validation of one probe (`validateProbe`,
//! `validateHandler` and the per-handler checks in
//! `pkg/apis/core/validation/validation.go`), run on the defaulted probe and
//! worded as its field errors are (`Invalid value: 2: must be 1`), rules
//! V3-V7. Errors come in the API server's order.

use std::fmt;

use k8s_openapi::api::core::v1::{ExecAction, GRPCAction, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::spec::ProbeKind;
use crate::util::gofmt::go_quote;

/// One field error: the path from the probe field of the container
/// (`readinessProbe.httpGet.port`) and the API server's error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FieldError {
    pub field: String,
    pub message: String,
}

/// The offending value, printed as the API server prints it: numbers plain,
/// strings Go-quoted.
enum BadValue<'a> {
    Int(i64),
    Str(&'a str),
}

impl fmt::Display for BadValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Int(n) => write!(f, "{n}"),
            BadValue::Str(s) => f.write_str(&go_quote(s)),
        }
    }
}

impl FieldError {
    fn invalid(field: String, value: BadValue<'_>, detail: &str) -> Self {
        FieldError {
            field,
            message: format!("Invalid value: {value}: {detail}"),
        }
    }

    /// `Invalid value` for an integer field.
    pub(super) fn invalid_int(field: String, value: impl Into<i64>, detail: &str) -> Self {
        FieldError::invalid(field, BadValue::Int(value.into()), detail)
    }

    /// `Invalid value` for a string field, Go-quoted as the API server prints it.
    pub(super) fn invalid_string(field: String, value: &str, detail: &str) -> Self {
        FieldError::invalid(field, BadValue::Str(value), detail)
    }

    pub(super) fn required(field: String, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        FieldError { field, message }
    }

    pub(super) fn forbidden(field: String, detail: &str) -> Self {
        FieldError {
            field,
            message: format!("Forbidden: {detail}"),
        }
    }

    /// The API server's `field.TooLong` wording, with what was measured.
    pub(super) fn too_long(field: String, max_bytes: usize, detail: &str) -> Self {
        FieldError {
            field,
            message: format!("Too long: may not be more than {max_bytes} bytes ({detail})"),
        }
    }

    /// The API server's `field.TooLong` wording without further detail.
    pub(super) fn too_long_bytes(field: String, max_bytes: usize) -> Self {
        FieldError {
            field,
            message: format!("Too long: may not be more than {max_bytes} bytes"),
        }
    }

    /// The API server's `field.TooMany` wording.
    pub(super) fn too_many(field: String, actual: usize, max: usize) -> Self {
        FieldError {
            field,
            message: format!("Too many: {actual}: must have at most {max} items"),
        }
    }

    pub(super) fn not_supported(field: String, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        FieldError {
            field,
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_quote(value),
                supported.join(", ")
            ),
        }
    }
}

const NEGATIVE: &str = "must be greater than or equal to 0";
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const HTTP_HEADER_NAME: &str = "a valid HTTP header must consist of alphanumeric characters or '-' \
     (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')";
const SUPPORTED_SCHEMES: [&str; 2] = ["HTTP", "HTTPS"];
const SUPPORTED_HTTP_PROTOCOLS: [&str; 2] = ["HTTP1", HTTP2];
const SUPPORTED_GRPC_MODES: [&str; 2] = ["Plaintext", GRPC_TLS];
/// `httpGet.protocol` for HTTP/2 over cleartext with prior knowledge (h2c).
pub(super) const HTTP2: &str = "HTTP2";
/// `grpc.mode` for TLS without certificate verification.
pub(super) const GRPC_TLS: &str = "TLS";

/// A probe handler as written, in the API server's checking order.
pub(super) enum HandlerRef<'a> {
    Exec(&'a ExecAction),
    HttpGet(&'a HTTPGetAction),
    TcpSocket(&'a TCPSocketAction),
    Grpc(&'a GRPCAction),
}

impl HandlerRef<'_> {
    /// The `Probe` field holding this handler.
    pub(super) fn field_name(&self) -> &'static str {
        match self {
            HandlerRef::Exec(_) => "exec",
            HandlerRef::HttpGet(_) => "httpGet",
            HandlerRef::TcpSocket(_) => "tcpSocket",
            HandlerRef::Grpc(_) => "grpc",
        }
    }
}

/// The handlers set on `probe`, in the order the API server looks at them
/// (`exec`, `httpGet`, `tcpSocket`, `grpc`); a valid probe has exactly one.
pub(super) fn handlers(probe: &Probe) -> Vec<HandlerRef<'_>> {
    [
        probe.exec.as_ref().map(HandlerRef::Exec),
        probe.http_get.as_ref().map(HandlerRef::HttpGet),
        probe.tcp_socket.as_ref().map(HandlerRef::TcpSocket),
        probe.grpc.as_ref().map(HandlerRef::Grpc),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A probe field as Go sees it: absent is zero.
pub(super) fn int(value: Option<i32>) -> i32 {
    value.unwrap_or(0)
}

/// All errors of the defaulted `kind` probe, in the API server's order:
/// handler (V4, V7), ranges (V3), probe-level grace period (V6), then the
/// kind's own rule (V5 for liveness and startup, V6 for readiness).
pub(super) fn validate_probe(kind: ProbeKind, probe: &Probe) -> Vec<FieldError> {
    let root = kind.field_name();
    let mut errs = validate_handlers(root, probe);
    let ranges = [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ];
    for (name, value) in ranges {
        let value = int(value);
        if value < 0 {
            errs.push(FieldError::invalid(
                format!("{root}.{name}"),
                BadValue::Int(value.into()),
                NEGATIVE,
            ));
        }
    }
    let grace_field = format!("{root}.terminationGracePeriodSeconds");
    if let Some(grace) = probe.termination_grace_period_seconds
        && grace <= 0
    {
        errs.push(FieldError::invalid(
            grace_field.clone(),
            BadValue::Int(grace),
            "must be greater than 0",
        ));
    }
    match kind {
        ProbeKind::Liveness | ProbeKind::Startup => {
            let success = int(probe.success_threshold);
            if success != 1 {
                errs.push(FieldError::invalid(
                    format!("{root}.successThreshold"),
                    BadValue::Int(success.into()),
                    "must be 1",
                ));
            }
        }
        ProbeKind::Readiness => {
            if let Some(grace) = probe.termination_grace_period_seconds {
                errs.push(FieldError::invalid(
                    grace_field,
                    BadValue::Int(grace),
                    "must not be set for readinessProbes",
                ));
            }
        }
    }
    errs
}

/// The error for a probe without any handler (V4).
pub(super) fn no_handler(root: &str) -> FieldError {
    FieldError::required(root.to_string(), "must specify a handler type")
}

/// V4: exactly one handler; the first is checked (V7), every further one is
/// forbidden.
fn validate_handlers(root: &str, probe: &Probe) -> Vec<FieldError> {
    let all = handlers(probe);
    let Some((first, others)) = all.split_first() else {
        return vec![no_handler(root)];
    };
    let mut errs = validate_action(&format!("{root}.{}", first.field_name()), first);
    errs.extend(others.iter().map(|h| {
        FieldError::forbidden(
            format!("{root}.{}", h.field_name()),
            "may not specify more than 1 handler type",
        )
    }));
    errs
}

/// V7 for one handler; `path` is the handler's field (`livenessProbe.exec`).
fn validate_action(path: &str, handler: &HandlerRef<'_>) -> Vec<FieldError> {
    let port_field = format!("{path}.port");
    match handler {
        HandlerRef::Exec(exec) => {
            if exec.command.as_deref().unwrap_or_default().is_empty() {
                vec![FieldError::required(format!("{path}.command"), "")]
            } else {
                Vec::new()
            }
        }
        // `path` needs no check: defaulting has made an empty one "/".
        HandlerRef::HttpGet(http) => {
            let mut errs = validate_port_num_or_name(port_field, &http.port);
            let scheme = http.scheme.as_deref().unwrap_or_default();
            if !SUPPORTED_SCHEMES.contains(&scheme) {
                errs.push(FieldError::not_supported(
                    format!("{path}.scheme"),
                    scheme,
                    &SUPPORTED_SCHEMES,
                ));
            }
            let headers = http.http_headers.iter().flatten();
            errs.extend(headers.filter(|h| !is_http_header_name(&h.name)).map(|h| {
                FieldError::invalid(
                    format!("{path}.httpHeaders"),
                    BadValue::Str(&h.name),
                    HTTP_HEADER_NAME,
                )
            }));
            errs.extend(validate_http_protocol(path, http, scheme));
            errs
        }
        HandlerRef::TcpSocket(tcp) => validate_port_num_or_name(port_field, &tcp.port),
        HandlerRef::Grpc(grpc) => {
            let mut errs: Vec<FieldError> = port_number(port_field, grpc.port)
                .err()
                .into_iter()
                .collect();
            if let Some(mode) = grpc.mode.as_deref()
                && !SUPPORTED_GRPC_MODES.contains(&mode)
            {
                errs.push(FieldError::not_supported(
                    format!("{path}.mode"),
                    mode,
                    &SUPPORTED_GRPC_MODES,
                ));
            }
            errs
        }
    }
}

/// [`validate_http_protocol`] of `http` with its scheme defaulted.
pub(super) fn http_protocol_error(path: &str, http: &HTTPGetAction) -> Option<FieldError> {
    let scheme = http.scheme.as_deref().unwrap_or("HTTP");
    validate_http_protocol(path, http, scheme)
}

/// V7, Kubernetes 1.37: `httpGet.protocol` is `HTTP1` or `HTTP2`, and
/// `HTTP2` (h2c) needs scheme `HTTP` and no `host`; at most one error.
fn validate_http_protocol(path: &str, http: &HTTPGetAction, scheme: &str) -> Option<FieldError> {
    let protocol = http.protocol.as_deref()?;
    let field = format!("{path}.protocol");
    if !SUPPORTED_HTTP_PROTOCOLS.contains(&protocol) {
        Some(FieldError::not_supported(
            field,
            protocol,
            &SUPPORTED_HTTP_PROTOCOLS,
        ))
    } else if protocol == HTTP2 && scheme != "HTTP" {
        Some(FieldError::invalid_string(
            field,
            protocol,
            "is only supported with HTTP (H2C)",
        ))
    } else if protocol == HTTP2 && !http.host.as_deref().unwrap_or_default().is_empty() {
        Some(FieldError::invalid_string(
            format!("{path}.host"),
            http.host.as_deref().unwrap_or_default(),
            "must be empty when `protocol` is \"HTTP2\"",
        ))
    } else {
        None
    }
}

/// `ValidatePortNumOrName`: a number in 1-65535, or a valid IANA service
/// name, with one error per broken rule of the name.
fn validate_port_num_or_name(field: String, port: &IntOrString) -> Vec<FieldError> {
    match port {
        IntOrString::Int(n) => port_number(field, *n).err().into_iter().collect(),
        IntOrString::String(name) => port_name_problems(name)
            .into_iter()
            .map(|detail| FieldError::invalid(field.clone(), BadValue::Str(name), detail))
            .collect(),
    }
}

/// A port number checked as `IsValidPortNum` checks it.
pub(super) fn port_number(field: String, n: i32) -> Result<u16, FieldError> {
    match u16::try_from(n) {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(FieldError::invalid(
            field,
            BadValue::Int(n.into()),
            PORT_RANGE,
        )),
    }
}

/// `IsValidPortName`: at most 15 characters of `[-a-z0-9]`, at least one
/// letter, no `--`, no hyphen at either end. Every broken rule is reported.
fn port_name_problems(name: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters");
    }
    let charset_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !charset_ok {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen");
    }
    problems
}

/// `IsHTTPHeaderName`: `[-A-Za-z0-9]+`.
fn is_http_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// RFC 1123 subdomain: how the API server validates the names of most
/// objects (Nodes, Secrets).
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_label)
}

/// RFC 1123 label: how the API server validates the names of Namespaces.
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && is_label(name)
}

/// One label of either, of any length.
fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_labels_and_names_subdomains() {
        assert!(is_dns_label("kube-system") && is_dns_label(&"a".repeat(63)));
        for bad in ["", "a.b", "-a", "a-", "A", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        // The API server's IsDNS1123Subdomain bounds the whole name only.
        assert!(is_dns_subdomain("a.b-c.d") && is_dns_subdomain(&"a".repeat(253)));
        for bad in ["", "a..b", ".a", "a.", "a_b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn v7_port_name_rules_match_is_valid_port_name() {
        let cases: [(&str, &[&str]); 8] = [
            ("http", &[]),
            ("web-8080", &[]),
            ("8080", &["must contain at least one letter (a-z)"]),
            (
                "",
                &[
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                    "must contain at least one letter (a-z)",
                ],
            ),
            (
                "Web",
                &["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"],
            ),
            ("a--b", &["must not contain consecutive hyphens"]),
            ("-web", &["must not begin or end with a hyphen"]),
            ("abcdefghijklmnop", &["must be no more than 15 characters"]),
        ];
        for (name, want) in cases {
            assert_eq!(port_name_problems(name), want, "{name:?}");
        }
    }

    #[test]
    fn v7_http_header_names_are_tokens_of_letters_digits_and_hyphens() {
        assert!(is_http_header_name("X-Header-Name"));
        assert!(is_http_header_name("accept"));
        assert!(!is_http_header_name(""));
        assert!(!is_http_header_name("X Header"));
        assert!(!is_http_header_name("X_Header"));
        assert!(!is_http_header_name("Ünicode"));
    }

    #[test]
    fn field_errors_are_worded_as_the_api_server_words_them() {
        let e = FieldError::invalid("a.b".into(), BadValue::Int(2), "must be 1");
        assert_eq!(e.message, "Invalid value: 2: must be 1");
        let e = FieldError::invalid("a.b".into(), BadValue::Str("x\"y"), "bad");
        assert_eq!(e.message, r#"Invalid value: "x\"y": bad"#);
        assert_eq!(
            FieldError::required("a".into(), "").message,
            "Required value"
        );
        assert_eq!(
            FieldError::not_supported("s".into(), "FTP", &SUPPORTED_SCHEMES).message,
            r#"Unsupported value: "FTP": supported values: "HTTP", "HTTPS""#
        );
    }
}
