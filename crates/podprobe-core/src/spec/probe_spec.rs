//! One probe as podprobe runs it: the core/v1 `Probe` with the API server's
//! defaults applied, validated as the API server validates it, its port
//! resolved against the owning container and its exec command expanded.
//!
//! Everything here is pure; errors name the probe kind, the container and the
//! field, so that a user can fix the manifest or annotation at once.
//!
//! The steps, each after its upstream counterpart:
//! - defaults: `SetDefaults_Probe` / `SetDefaults_HTTPGetAction` (V1, V2);
//! - validation: the API server's `validateProbe` (V3-V7),
//!   and for whole containers the init-container rule (V9);
//! - ports: the kubelet's `ResolveContainerPort` ([`resolve_container_port`],
//!   H19-H22);
//! - exec commands: the kubelet's `$(VAR)` expansion ([`expand_command`],
//!   E1, E2).
//!
//! Gate mode's annotation and `podprobe probe` read probe objects with the
//! one strict parser [`decode_probe_object`], which also takes podprobe's
//! extensions (the `podprobe` key, [`extension`]); [`normalize_object`]
//! then validates those against the probe's handler.

pub mod budget;
mod decode;
mod expand;
pub mod extension;
mod port;
mod skew;
pub mod timeout_caps;
mod validation;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use self::extension::{ClientIdentity, HttpExtensions, Network, TlsSettings};
use self::validation::{FieldError, HandlerRef, int};
use super::ProbeKind;
use crate::util::gofmt::go_quote;
use crate::util::pod::is_restartable_init_container;

pub use self::decode::{DecodeError, EXTENSIONS_KEY, ProbeObject, clipped, decode_probe_object};
pub use self::expand::{
    CommandTooLong, MAX_EXPANDED_COMMAND_BYTES, env_map, expand, expand_command,
};
pub use self::port::{AtoiFailure, PortError, resolve_container_port};
pub use self::skew::{UnknownProbeField, unknown_probe_fields};
pub use self::validation::{is_dns_label, is_dns_subdomain};

/// A probe after defaulting, validation and resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub handler: Handler,
    pub initial_delay_seconds: i32,
    pub timeout_seconds: i32,
    pub period_seconds: i32,
    /// `podprobe.periodMilliseconds` (#14), validated: the period to run on
    /// instead of `period_seconds`.
    pub period_milliseconds: Option<i32>,
    pub success_threshold: i32,
    pub failure_threshold: i32,
    /// Probe-level `terminationGracePeriodSeconds` (liveness and startup only).
    pub termination_grace_period_seconds: Option<i64>,
    /// `podprobe.network` (#14): where a network probe's sockets are made.
    pub network: Network,
    /// `podprobe.markers` (MK1): what the probe's result writes on its pod.
    pub markers: Vec<extension::marker_options::Marker>,
    /// `podprobe.restartBudget` and `podprobe.readinessFloor` (WG1).
    pub workload: extension::workload_options::WorkloadOptions,
}

impl ProbeSpec {
    /// `timeoutSeconds` as a duration: the budget of one handler run.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.max(0) as u64)
    }

    /// The period the worker runs on: `periodMilliseconds` when set, else
    /// `periodSeconds`.
    pub fn period(&self) -> Duration {
        match self.period_milliseconds {
            Some(millis) => Duration::from_millis(millis.max(0) as u64),
            None => Duration::from_secs(self.period_seconds.max(0) as u64),
        }
    }

    /// How the probe's TLS connection is made, for a probe that makes one:
    /// an `httpGet` with scheme HTTPS, or a `grpc` probe with `podprobe.tls`.
    pub fn tls(&self) -> Option<&TlsSettings> {
        match &self.handler {
            Handler::HttpGet(action) if action.scheme == Scheme::Https => {
                Some(&action.extensions.tls)
            }
            Handler::Grpc(action) => action.tls.as_ref(),
            _ => None,
        }
    }

    /// The `clientCertificate` Secret the probe still has to read before it
    /// runs; `None` once [`present_client_identity`](Self::present_client_identity)
    /// gave it a certificate.
    pub fn client_certificate_secret(&self) -> Option<&str> {
        self.tls()?.client_certificate_secret.as_deref()
    }

    /// The headers an `httpGet` probe takes from Secrets when it runs
    /// (`podprobe.http.headers`, H25).
    pub fn secret_headers(&self) -> &[extension::SecretHeader] {
        match &self.handler {
            Handler::HttpGet(action) => &action.extensions.secret_headers,
            _ => &[],
        }
    }

    /// Sends the headers read for [`Self::secret_headers`] (`values`, in
    /// their order) after `httpHeaders`, in place of the references.
    pub fn present_secret_headers(&mut self, values: Vec<(String, String)>) {
        if let Handler::HttpGet(action) = &mut self.handler {
            action.headers.extend(values);
            action.extensions.secret_headers.clear();
        }
    }

    /// Presents `identity` on the probe's TLS connection, in place of any
    /// `clientCertificate` Secret (the certificate read from it, or one
    /// given on the command line); `false` if the probe makes no TLS
    /// connection to present it on.
    pub fn present_client_identity(&mut self, identity: ClientIdentity) -> bool {
        let tls = match &mut self.handler {
            Handler::HttpGet(action) if action.scheme == Scheme::Https => {
                &mut *action.extensions.tls
            }
            Handler::Grpc(GrpcAction { tls: Some(tls), .. }) => tls,
            _ => return false,
        };
        tls.client_identity = Some(identity);
        tls.client_certificate_secret = None;
        true
    }
}

/// The one handler of a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    Exec(ExecAction),
    HttpGet(HttpGetAction),
    TcpSocket(TcpSocketAction),
    Grpc(GrpcAction),
    /// An `httpGet`/`tcpSocket` probe of the pod spec whose port does not
    /// resolve (a name the container does not declare). The API server
    /// accepts it; the kubelet runs it, and every run errors with this
    /// (H19, H20). Only [`normalize_accepted`] builds it.
    Unresolvable(PortError),
    /// A probe of the pod spec that asks for what podprobe does not do: a
    /// field of a newer API than podprobe's (version skew, V10) or a value
    /// it does not implement (`httpGet.protocol: HTTP2`). Every run errors
    /// with this, as for [`Handler::Unresolvable`]: readiness stays False,
    /// startup never succeeds, liveness never kills. Only
    /// [`normalize_accepted`] and [`Handler::unsupported`] build it.
    Unsupported(Unsupported),
}

impl Handler {
    /// The handler of a probe that has `field`, which podprobe does not
    /// implement, for `reason`.
    pub fn unsupported(field: impl Into<String>, reason: impl Into<String>) -> Handler {
        Handler::Unsupported(Unsupported {
            field: field.into(),
            reason: reason.into(),
        })
    }
}

/// A probe field podprobe does not implement: the path from the probe's own
/// field (`readinessProbe.httpGet.protocol`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Unsupported {
    pub field: String,
    pub reason: String,
}

impl Unsupported {
    /// This as the error of `container`'s `kind` probe, to report.
    pub fn spec_error(&self, container: &str, kind: ProbeKind) -> SpecError {
        SpecError {
            container: container.to_string(),
            kind,
            field: self.field.clone(),
            message: self.reason.clone(),
        }
    }
}

/// `exec`: the command with `$(VAR)` references already expanded from the
/// container's own `env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecAction {
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// `httpGet` with defaults applied and the port resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGetAction {
    pub scheme: Scheme,
    /// `httpGet.host`; `None` means the pod IP.
    pub host: Option<String>,
    pub port: u16,
    /// `httpGet.path` as given (default `/`); the URL is built at probe time.
    pub path: String,
    /// `httpHeaders` in order, names as the user wrote them.
    pub headers: Vec<(String, String)>,
    /// `httpGet.protocol` (Kubernetes 1.37), or `podprobe.http.protocol`.
    pub protocol: HttpProtocol,
    /// The probe's `podprobe` key (#14); the default is the kubelet's probe.
    pub extensions: HttpExtensions,
}

/// The wire protocol of an `httpGet` probe's cleartext connections (H23).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HttpProtocol {
    /// HTTP/1.1 (HTTPS: HTTP/2 when the server picks `h2` over ALPN, H9).
    #[default]
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (h2c): `HTTP2`.
    Http2,
}

/// `tcpSocket` with the port resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSocketAction {
    /// `tcpSocket.host`; `None` means the pod IP.
    pub host: Option<String>,
    pub port: u16,
}

/// `grpc`: always against the pod IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcAction {
    pub port: u16,
    /// `grpc.service`, empty for the server's overall health.
    pub service: String,
    /// `podprobe.tls` (#14): TLS on, with these settings; `None`: plain
    /// text, as the kubelet.
    pub tls: Option<TlsSettings>,
}

/// A probe that cannot be run as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// Container the probe belongs to (empty for a bare probe).
    pub container: String,
    pub kind: ProbeKind,
    /// Path of the offending field, starting at the probe (`readinessProbe.httpGet.port`).
    pub field: String,
    pub message: String,
}

/// The `kind` probe of `container`, if it has one.
pub fn container_probe(container: &Container, kind: ProbeKind) -> Option<&Probe> {
    match kind {
        ProbeKind::Liveness => container.liveness_probe.as_ref(),
        ProbeKind::Readiness => container.readiness_probe.as_ref(),
        ProbeKind::Startup => container.startup_probe.as_ref(),
    }
}

/// Defaults, validates and resolves `probe`, the `kind` probe of `container`.
///
/// Validation is the API server's, after its defaulting; when the probe has
/// several errors the first, in the API server's order, is returned
/// ([`validate_container_probes`] gives them all). A valid probe then has its
/// `httpGet`/`tcpSocket` port resolved against the container's ports; a port
/// name the container does not declare is an error here
/// (`readinessProbe.httpGet.port: port "web" not found in container "app"`),
/// where the kubelet would accept the pod and let every run of the probe
/// error. `exec` commands get the container's `env` expanded into them.
///
/// Whether `container` may have probes at all (V9) is the caller's question:
/// see [`validate_container_probes`].
pub fn normalize(
    kind: ProbeKind,
    probe: &Probe,
    container: &Container,
) -> Result<ProbeSpec, SpecError> {
    let to_spec_error = |e: FieldError| spec_error(kind, container, e);
    let probe = with_defaults(probe);
    if let Some(first) = validation::validate_probe(kind, &probe).into_iter().next() {
        return Err(to_spec_error(first));
    }
    match build_handler(kind, &probe, container).map_err(to_spec_error)? {
        Handler::Unsupported(unsupported) => Err(unsupported.spec_error(&container.name, kind)),
        handler => Ok(spec_with(handler, &probe)),
    }
}

/// [`normalize`] for a probe object with podprobe's extensions: the core
/// probe is defaulted, validated and resolved first, then its `podprobe`
/// key is validated against the handler (`expect` and `method` only for
/// `httpGet`, `tls` for HTTPS and gRPC, `periodMilliseconds` for any) and
/// built into the spec, a `bodyRegex` compiled once here.
pub fn normalize_object(
    kind: ProbeKind,
    object: &ProbeObject,
    container: &Container,
) -> Result<ProbeSpec, SpecError> {
    let mut spec = normalize(kind, &object.probe, container)?;
    let Some(podprobe) = &object.podprobe else {
        return Ok(spec);
    };
    let defaulted = with_defaults(&object.probe);
    let handler = validation::handlers(&defaulted)
        .first()
        .map_or("", HandlerRef::field_name);
    let to_spec_error = |e| spec_error(kind, container, e);
    let mut extensions =
        extension::http_extensions(kind.field_name(), handler, podprobe).map_err(to_spec_error)?;
    let https = matches!(&spec.handler, Handler::HttpGet(a) if a.scheme == Scheme::Https);
    let tls = podprobe
        .tls
        .as_ref()
        .map(|given| extension::tls_options::tls_settings(kind.field_name(), handler, https, given))
        .transpose()
        .map_err(to_spec_error)?;
    let plaintext = object.probe.grpc.as_ref().and_then(|g| g.mode.as_deref()) == Some("Plaintext");
    if tls.is_some() && plaintext {
        return Err(to_spec_error(FieldError::forbidden(
            format!("{}.{EXTENSIONS_KEY}.tls", kind.field_name()),
            "may not be set with `grpc.mode: Plaintext`",
        )));
    }
    spec.period_milliseconds =
        extension::period_milliseconds(kind.field_name(), podprobe).map_err(to_spec_error)?;
    match &mut spec.handler {
        Handler::HttpGet(action) => {
            let given = object.probe.http_get.as_ref();
            if let Some(protocol) = extension_protocol(kind, podprobe, given) {
                action.protocol = protocol.map_err(to_spec_error)?;
            }
            extensions.tls = Box::new(tls.unwrap_or_default());
            action.extensions = extensions;
        }
        // `podprobe.tls` refines `grpc.mode: TLS`; without it the mode stands.
        Handler::Grpc(action) if tls.is_some() => action.tls = tls,
        _ => {}
    }
    spec.network =
        extension::network(kind.field_name(), handler, podprobe).map_err(to_spec_error)?;
    if let Some(given) = &podprobe.markers {
        let field = format!("{}.{EXTENSIONS_KEY}.markers", kind.field_name());
        spec.markers = extension::marker_options::markers(&field, given).map_err(to_spec_error)?;
    }
    spec.workload = extension::workload_options::workload_options(
        &format!("{}.{EXTENSIONS_KEY}", kind.field_name()),
        kind,
        podprobe.restart_budget.as_ref(),
        podprobe.readiness_floor.as_ref(),
    )
    .map_err(to_spec_error)?;
    Ok(spec)
}

/// `podprobe.http.protocol` of an `httpGet` probe whose core action is
/// `given`, if set (#28): `httpGet.protocol`'s values and rules (V7), for
/// annotations written against an API without that field; it may not say
/// otherwise than `httpGet.protocol` itself.
fn extension_protocol(
    kind: ProbeKind,
    podprobe: &extension::ProbeExtensions,
    given: Option<&k8s_openapi::api::core::v1::HTTPGetAction>,
) -> Option<Result<HttpProtocol, FieldError>> {
    let protocol = podprobe.http.as_ref()?.protocol.as_deref()?;
    let field = format!("{}.{EXTENSIONS_KEY}.http.protocol", kind.field_name());
    let core = given.and_then(|http| http.protocol.as_deref());
    let mut as_core = given.cloned().unwrap_or_default();
    as_core.protocol = Some(protocol.to_string());
    let checked = match validation::http_protocol_error("", &as_core) {
        Some(mut error) => {
            error.field = field;
            Err(error)
        }
        None if core.is_some_and(|core| core != protocol) => Err(FieldError::forbidden(
            field,
            "may not differ from `httpGet.protocol`",
        )),
        None if protocol == validation::HTTP2 => Ok(HttpProtocol::Http2),
        None => Ok(HttpProtocol::Http1),
    };
    Some(checked)
}

/// `handler` with the timing of `probe`, defaults applied.
fn spec_with(handler: Handler, probe: &Probe) -> ProbeSpec {
    ProbeSpec {
        handler,
        initial_delay_seconds: int(probe.initial_delay_seconds),
        timeout_seconds: int(probe.timeout_seconds),
        period_seconds: int(probe.period_seconds),
        period_milliseconds: None,
        success_threshold: int(probe.success_threshold),
        failure_threshold: int(probe.failure_threshold),
        termination_grace_period_seconds: probe.termination_grace_period_seconds,
        network: Network::Node,
        markers: Vec::new(),
        workload: Default::default(),
    }
}

/// [`normalize`] for a probe the API server has accepted (a probe of the pod
/// spec): a port that does not resolve is no error, as in the kubelet, which
/// runs the probe and has every run error (the handler is then
/// [`Handler::Unresolvable`]). Any other error is returned as by
/// [`normalize`].
pub fn normalize_accepted(
    kind: ProbeKind,
    probe: &Probe,
    container: &Container,
) -> Result<ProbeSpec, SpecError> {
    let to_spec_error = |e: FieldError| spec_error(kind, container, e);
    let defaulted = with_defaults(probe);
    if let Some(first) = validation::validate_probe(kind, &defaulted)
        .into_iter()
        .next()
    {
        return Err(to_spec_error(first));
    }
    let error = match build_handler(kind, &defaulted, container) {
        Ok(handler) => return Ok(spec_with(handler, &defaulted)),
        Err(error) => error,
    };
    let port = match validation::handlers(&defaulted).first() {
        Some(HandlerRef::HttpGet(http)) => &http.port,
        Some(HandlerRef::TcpSocket(tcp)) => &tcp.port,
        _ => return Err(to_spec_error(error)),
    };
    match resolve_container_port(port, container) {
        Err(port_error) => Ok(spec_with(Handler::Unresolvable(port_error), &defaulted)),
        Ok(_) => Err(to_spec_error(error)),
    }
}

/// Every probe error of `container` as the API server reports them, in its
/// order (liveness, readiness, startup). An init container (`is_init`)
/// without `restartPolicy: Always` may not have probes at all (V9); other
/// containers have each probe validated as [`normalize`] validates it.
/// Ports are not resolved here: the API server does not resolve them either.
pub fn validate_container_probes(container: &Container, is_init: bool) -> Vec<SpecError> {
    let may_have_probes = !is_init || is_restartable_init_container(container);
    let mut errs = Vec::new();
    for kind in [
        ProbeKind::Liveness,
        ProbeKind::Readiness,
        ProbeKind::Startup,
    ] {
        let Some(probe) = container_probe(container, kind) else {
            continue;
        };
        let found = if may_have_probes {
            validation::validate_probe(kind, &with_defaults(probe))
        } else {
            vec![FieldError::forbidden(
                kind.field_name().to_string(),
                "may not be set for init containers without restartPolicy=Always",
            )]
        };
        errs.extend(found.into_iter().map(|e| spec_error(kind, container, e)));
    }
    errs
}

fn spec_error(kind: ProbeKind, container: &Container, e: FieldError) -> SpecError {
    SpecError {
        container: container.name.clone(),
        kind,
        field: e.field,
        message: e.message,
    }
}

/// The probe as the API server stores it: `SetDefaults_Probe` (0 or unset
/// means the default, V1/V2), `SetDefaults_HTTPGetAction` (path `/`, scheme
/// `HTTP`) and the declarative `grpc.service` default "".
fn with_defaults(probe: &Probe) -> Probe {
    let mut probe = probe.clone();
    for (field, default) in [
        (&mut probe.timeout_seconds, 1),
        (&mut probe.period_seconds, 10),
        (&mut probe.success_threshold, 1),
        (&mut probe.failure_threshold, 3),
    ] {
        if int(*field) == 0 {
            *field = Some(default);
        }
    }
    if let Some(http) = probe.http_get.as_mut() {
        default_empty(&mut http.path, "/");
        default_empty(&mut http.scheme, "HTTP");
    }
    if let Some(grpc) = probe.grpc.as_mut() {
        grpc.service.get_or_insert_with(String::new);
    }
    probe
}

fn default_empty(field: &mut Option<String>, default: &str) {
    if field.as_deref().unwrap_or_default().is_empty() {
        *field = Some(default.to_string());
    }
}

/// The runnable handler of a valid, defaulted probe.
fn build_handler(
    kind: ProbeKind,
    probe: &Probe,
    container: &Container,
) -> Result<Handler, FieldError> {
    let root = kind.field_name();
    let handler = match validation::handlers(probe).first() {
        None => return Err(validation::no_handler(root)),
        Some(HandlerRef::Exec(exec)) => Handler::Exec(ExecAction {
            command: expand_command(
                exec.command.as_deref().unwrap_or_default(),
                container.env.as_deref().unwrap_or_default(),
            )
            .map_err(|CommandTooLong| {
                FieldError::too_long(
                    format!("{root}.exec.command"),
                    MAX_EXPANDED_COMMAND_BYTES,
                    "once `$(VAR)` references are expanded from the container's env",
                )
            })?,
        }),
        Some(HandlerRef::HttpGet(http)) => {
            let port = container_port(format!("{root}.httpGet.port"), &http.port, container)?;
            Handler::HttpGet(http_get_with_port(http, port))
        }
        Some(HandlerRef::TcpSocket(tcp)) => Handler::TcpSocket(TcpSocketAction {
            host: non_empty(&tcp.host),
            port: container_port(format!("{root}.tcpSocket.port"), &tcp.port, container)?,
        }),
        Some(HandlerRef::Grpc(grpc)) => Handler::Grpc(GrpcAction {
            port: validation::port_number(format!("{root}.grpc.port"), grpc.port)?,
            service: grpc.service.clone().unwrap_or_default(),
            // GRPCContainerProbeTLS (alpha in 1.37): TLS without
            // verification, the kubelet's `InsecureSkipVerify` (G8).
            tls: (grpc.mode.as_deref() == Some(validation::GRPC_TLS)).then(TlsSettings::default),
        }),
    };
    Ok(handler)
}

/// `http` with its defaults and `port`.
fn http_get_with_port(
    http: &k8s_openapi::api::core::v1::HTTPGetAction,
    port: u16,
) -> HttpGetAction {
    HttpGetAction {
        scheme: match http.scheme.as_deref() {
            Some("HTTPS") => Scheme::Https,
            _ => Scheme::Http,
        },
        host: non_empty(&http.host),
        port,
        path: http.path.clone().unwrap_or_default(),
        headers: http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
        // H23: validated (V7), so HTTP2 comes with scheme HTTP and no host.
        protocol: match http.protocol.as_deref() {
            Some(validation::HTTP2) => HttpProtocol::Http2,
            _ => HttpProtocol::Http1,
        },
        extensions: HttpExtensions::default(),
    }
}

/// The `httpGet` of a lifecycle hook of `container` (which the API server
/// validated), defaulted as a probe's, with its port resolved as the
/// kubelet resolves it when it sends the request.
pub fn http_get_action(
    http: &k8s_openapi::api::core::v1::HTTPGetAction,
    container: &Container,
) -> Result<HttpGetAction, PortError> {
    Ok(http_get_with_port(
        http,
        resolve_container_port(&http.port, container)?,
    ))
}

/// An empty host means the pod IP, as unset does.
fn non_empty(host: &Option<String>) -> Option<String> {
    host.clone().filter(|h| !h.is_empty())
}

/// Resolves a validated `httpGet`/`tcpSocket` port. Validation has made a
/// string port a service name (it has a letter), so the kubelet's only
/// possible failure for it is a name the container does not declare, which
/// is reported as such.
fn container_port(
    field: String,
    port: &IntOrString,
    container: &Container,
) -> Result<u16, FieldError> {
    resolve_container_port(port, container).map_err(|e| {
        let message = match e {
            PortError::NotANumber { port, .. } => format!(
                "port {} not found in container {}",
                go_quote(&port),
                go_quote(&container.name)
            ),
            PortError::OutOfRange(_) => e.to_string(),
        };
        FieldError { field, message }
    })
}

#[cfg(test)]
mod tests;
