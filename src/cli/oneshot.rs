//! `podprobe probe`: runs one probe once and reports what the kubelet would
//! conclude. Input is a probe object, or a Pod manifest plus the container
//! and probe kind to pick from it, as YAML or JSON.
//!
//! A probe object is read by the same strict parser as gate mode's
//! annotation ([`probe_spec::decode_probe_object`]), so the two accept exactly the
//! same objects (podprobe's extensions under the `podprobe` key included)
//! and refuse an unknown field with the same words. A Pod manifest is read
//! as a core/v1 Pod, and its chosen probe strictly too; there the `podprobe`
//! key is refused, as it is not part of core/v1 (the API server would drop
//! it from a pod spec: extensions belong in the `podprobe.io/probes`
//! annotation).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::{Container, Pod};
use serde::Serialize;

use crate::api::client_pem::client_identity_from_pem;
use crate::probe::Prober;
use crate::runtime::cri::{CriClient, DEFAULT_ENDPOINT};
use podprobe_core::prober::markers::value_on;
use podprobe_core::prober::worker::verdict_result;
use podprobe_core::spec::probe_spec::extension::marker_options::MarkerTarget;
use podprobe_core::spec::probe_spec::extension::{Method, Network};
use podprobe_core::spec::probe_spec::{self, Handler, HttpProtocol, Scheme};
use podprobe_core::spec::{
    ProbeEvent, ProbeKind, ProbeResult, ProbeSpec, ProbeTarget, ProbeVerdict, join_host_port,
};
use podprobe_core::util::exit_code;
use podprobe_core::util::gofmt::go_quote;
use podprobe_core::util::pod::probed_containers;

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// The probe to run: a file with a probe object (a core/v1 Probe, plus
    /// podprobe's extensions under `podprobe`, as in the podprobe.io/probes
    /// annotation), or with a Pod manifest (then also give --container and
    /// --kind); YAML or JSON; `-` reads stdin. Unknown fields are refused.
    #[arg(long, value_name = "FILE")]
    pub probe: PathBuf,

    /// Container of the Pod manifest whose probe runs; may be omitted when the
    /// pod has one container. Also used to resolve named ports and `$(VAR)`
    /// references; restartable init containers count too.
    #[arg(long, value_name = "NAME")]
    pub container: Option<String>,

    /// Which probe of the container runs; may be omitted when it has exactly
    /// one. For a bare Probe it decides validation and event wording
    /// (default: readiness).
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,

    /// Pod IP that network probes without `host` target.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub pod_ip: String,

    /// Runtime container ID for exec probes (`containerd://` or `cri-o://`
    /// prefixes accepted).
    #[arg(long, value_name = "ID")]
    pub container_id: Option<String>,

    /// CRI runtime endpoint for exec probes.
    #[arg(long, value_name = "URI", env = "PODPROBE_CRI_ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri_endpoint: String,

    /// Version sent in `User-Agent: kube-probe/MAJOR.MINOR`.
    #[arg(long, value_name = "MAJOR.MINOR", default_value = podprobe_core::KUBE_PROBE_VERSION)]
    pub kube_probe_version: String,

    /// How to report the result.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Client certificate (PEM, leaf first) presented by HTTPS probes and by
    /// gRPC probes with `podprobe.tls`, for servers that require mTLS.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,

    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --client-cert.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KindArg {
    Readiness,
    Liveness,
    Startup,
}

impl From<KindArg> for ProbeKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Readiness => ProbeKind::Readiness,
            KindArg::Liveness => ProbeKind::Liveness,
            KindArg::Startup => ProbeKind::Startup,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Input that cannot be run; the message names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ProbeInputError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not valid YAML or JSON: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Selection(String),
    /// The probe object does not decode strictly; names the field.
    #[error(transparent)]
    Decode(#[from] probe_spec::DecodeError),
    #[error(transparent)]
    Spec(#[from] probe_spec::SpecError),
    /// --client-cert/--client-key unusable, or given for a probe without TLS.
    #[error("{0}")]
    ClientCertificate(String),
}

/// The chosen probe, ready to run.
#[derive(Debug)]
pub struct Selected {
    pub kind: ProbeKind,
    pub container: String,
    pub spec: ProbeSpec,
}

/// `selected` presenting the client certificate of --client-cert and
/// --client-key, when given: only an HTTPS probe or a gRPC probe with
/// `podprobe.tls` makes a TLS connection to present it on. The files
/// stand in for a `clientCertificate` Secret, which `podprobe probe` never
/// reads: it has no pod, so no namespace, and may run where no cluster is.
fn with_client_certificate(
    mut selected: Selected,
    args: &ProbeArgs,
) -> Result<Selected, ProbeInputError> {
    let (Some(cert), Some(key)) = (&args.client_cert, &args.client_key) else {
        return match selected.spec.client_certificate_secret() {
            Some(secret) => Err(ProbeInputError::ClientCertificate(format!(
                "podprobe.tls.clientCertificate.secretName {}: podprobe probe reads no Secrets; give the certificate and key with --client-cert FILE --client-key FILE (kubectl get secret {secret} -o jsonpath='{{.data.tls\\.crt}}' | base64 -d > FILE)",
                go_quote(secret)
            ))),
            None => Ok(selected),
        };
    };
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| ProbeInputError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    let identity = client_identity_from_pem(&read(cert)?, &read(key)?).map_err(|e| {
        ProbeInputError::ClientCertificate(format!(
            "--client-cert {} / --client-key {}: {e}",
            cert.display(),
            key.display()
        ))
    })?;
    if !selected.spec.present_client_identity(identity) {
        return Err(ProbeInputError::ClientCertificate(
            "--client-cert: the probe makes no TLS connection (it needs an httpGet with scheme HTTPS, or a grpc probe with podprobe.tls)".into(),
        ));
    }
    Ok(selected)
}

/// `selected` unless it takes header values from Secrets (H25), which
/// `podprobe probe` never reads, as for client certificates: it has no pod,
/// so no namespace.
fn without_secret_headers(selected: Selected) -> Result<Selected, ProbeInputError> {
    match selected.spec.secret_headers().first() {
        None => Ok(selected),
        Some(header) => Err(ProbeInputError::Selection(format!(
            "podprobe.http.headers {}: podprobe probe reads no Secrets; put the value in httpHeaders to try the probe here (kubectl get secret {} -o jsonpath='{{.data.{}}}' | base64 -d)",
            go_quote(&header.name),
            header.secret,
            header.key
        ))),
    }
}

/// The JSON report, one object.
#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub kind: ProbeKind,
    pub container: String,
    pub handler: String,
    pub result: ProbeResult,
    pub output: String,
    pub error: Option<String>,
    pub event: Option<ProbeEvent>,
    pub attempts: u32,
    pub duration_ms: f64,
    /// What the probe's markers would write had this result been cached
    /// (MK3; `podprobe run` applies the thresholds first); none for an
    /// errored run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<MarkerWrite>,
    /// What the probe's workload guard does once it fails past its
    /// threshold (WG1): `restartBudget`, `readinessFloor`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workload: Vec<String>,
}

/// One marker's write, for the report.
#[derive(Debug, Serialize)]
pub struct MarkerWrite {
    /// `label` or `annotation`.
    pub target: &'static str,
    pub key: String,
    /// `None`: the key is removed.
    pub value: Option<String>,
}

/// Entry point of `podprobe probe`.
pub fn main(args: ProbeArgs) -> ExitCode {
    let selected = match read_input(&args.probe)
        .and_then(|doc| select(&doc, &args))
        .and_then(|selected| with_client_certificate(selected, &args))
        .and_then(without_secret_headers)
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("podprobe probe: invalid input: {e}");
            return ExitCode::from(exit_code::USAGE);
        }
    };
    if matches!(selected.spec.handler, Handler::Exec(_)) && args.container_id.is_none() {
        eprintln!("podprobe probe: invalid input: an exec probe needs --container-id");
        return ExitCode::from(exit_code::USAGE);
    }
    // `podprobe run` finds a pod's namespace by the pod's UID through the
    // CRI; here there is no pod, and entering a namespace is better left to
    // the tool made for it, whose privileges the operator sees.
    if selected.spec.network == Network::Pod {
        eprintln!(
            "podprobe probe: invalid input: {}.podprobe.network: \"pod\" runs only under podprobe \
             run; to probe from inside a pod's network, run podprobe probe there without it: \
             nsenter --net=/proc/<PID>/ns/net podprobe probe --pod-ip 127.0.0.1 ...",
            selected.kind.field_name()
        );
        return ExitCode::from(exit_code::USAGE);
    }
    let cri = match CriClient::new(&args.cri_endpoint) {
        Ok(c) => Some(c),
        Err(e) if matches!(selected.spec.handler, Handler::Exec(_)) => {
            eprintln!("podprobe probe: invalid input: --cri-endpoint: {e}");
            return ExitCode::from(exit_code::USAGE);
        }
        Err(_) => None,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("podprobe probe: cannot start the async runtime: {e}");
            return ExitCode::from(exit_code::ERROR);
        }
    };
    let prober = Prober::new(&args.kube_probe_version, cri);
    let target = ProbeTarget {
        pod_ip: &args.pod_ip,
        container_id: args.container_id.as_deref(),
        // The operator names the container; there is no pod status to trust.
        identity: None,
        namespace: None,
    };
    let started = std::time::Instant::now();
    let verdict = runtime.block_on(prober.probe(selected.kind, &selected.spec, target));
    let report = report(&selected, &args.pod_ip, verdict, started.elapsed());
    match args.output {
        OutputFormat::Json => match serde_json::to_string(&report) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("podprobe probe: cannot encode the report: {e}"),
        },
        OutputFormat::Text => print!("{}", render_text(&report)),
    }
    ExitCode::from(report_exit_code(&report))
}

/// Success or warning: 0; failure: [`exit_code::FAILURE`]; unknown or
/// error: [`exit_code::ERROR`].
pub fn report_exit_code(report: &ProbeReport) -> u8 {
    match (report.error.is_some(), report.result) {
        (true, _) | (false, ProbeResult::Unknown) => exit_code::ERROR,
        (false, ProbeResult::Success | ProbeResult::Warning) => 0,
        (false, ProbeResult::Failure) => exit_code::FAILURE,
    }
}

fn read_input(path: &std::path::Path) -> Result<serde_json::Value, ProbeInputError> {
    let shown = path.display().to_string();
    let mut text = String::new();
    let read = if shown == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|source| ProbeInputError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_document(&text).map_err(|message| ProbeInputError::Parse {
        path: shown,
        message,
    })
}

/// Parses YAML (and so JSON) into a JSON value.
pub fn parse_document(text: &str) -> Result<serde_json::Value, String> {
    serde_yaml_ng::from_str::<serde_json::Value>(text).map_err(|e| e.to_string())
}

/// Picks the probe to run from a parsed document.
pub fn select(doc: &serde_json::Value, args: &ProbeArgs) -> Result<Selected, ProbeInputError> {
    let is_pod =
        doc.get("kind").and_then(|k| k.as_str()) == Some("Pod") || doc.get("spec").is_some();
    if !is_pod {
        let kind = args
            .kind
            .map(ProbeKind::from)
            .unwrap_or(ProbeKind::Readiness);
        let object = probe_spec::decode_probe_object(kind, doc)?;
        let container = Container {
            name: args.container.clone().unwrap_or_default(),
            ..Container::default()
        };
        let spec = probe_spec::normalize_object(kind, &object, &container)?;
        return Ok(Selected {
            kind,
            container: container.name,
            spec,
        });
    }
    let pod: Pod = serde_json::from_value(doc.clone())
        .map_err(|e| ProbeInputError::Selection(format!("not a core/v1 Pod: {e}")))?;
    let container = pick_container(&pod, args.container.as_deref())?;
    let kind = match args.kind {
        Some(k) => ProbeKind::from(k),
        None => only_probe_kind(container)?,
    };
    if probe_spec::container_probe(container, kind).is_none() {
        return Err(ProbeInputError::Selection(format!(
            "container {:?} has no {}",
            container.name,
            kind.field_name()
        )));
    }
    let written = written_probe(doc, &container.name, kind)
        .cloned()
        .unwrap_or_default();
    let object = probe_spec::decode_probe_object(kind, &written)?;
    if object.podprobe.is_some() {
        return Err(ProbeInputError::Decode(probe_spec::DecodeError {
            field: format!("{}.{}", kind.field_name(), probe_spec::EXTENSIONS_KEY),
            message: "unknown field (not part of core/v1: the API server drops it from a pod \
                      spec; podprobe's extensions go in the podprobe.io/probes annotation)"
                .into(),
        }));
    }
    let spec = probe_spec::normalize(kind, &object.probe, container)?;
    Ok(Selected {
        kind,
        container: container.name.clone(),
        spec,
    })
}

/// The `kind` probe of container `name` as the manifest `doc` writes it
/// (regular containers first, as [`pick_container`] looks).
fn written_probe<'d>(
    doc: &'d serde_json::Value,
    name: &str,
    kind: ProbeKind,
) -> Option<&'d serde_json::Value> {
    let spec = doc.get("spec")?;
    ["containers", "initContainers"]
        .into_iter()
        .filter_map(|list| spec.get(list)?.as_array())
        .flatten()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(name))?
        .get(kind.field_name())
}

fn pick_container<'p>(pod: &'p Pod, name: Option<&str>) -> Result<&'p Container, ProbeInputError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Err(ProbeInputError::Selection(
            "the Pod manifest has no spec".into(),
        ));
    };
    let candidates: Vec<&Container> = probed_containers(spec).map(|c| c.container).collect();
    let names = || {
        candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(name) => candidates
            .iter()
            .copied()
            .find(|c| c.name == name)
            .ok_or_else(|| {
                ProbeInputError::Selection(format!(
                    "--container {name:?}: no such container in the pod (containers: {})",
                    names()
                ))
            }),
        None if candidates.len() == 1 => Ok(candidates[0]),
        None => Err(ProbeInputError::Selection(format!(
            "--container is required: the pod has {} probeable containers ({})",
            candidates.len(),
            names()
        ))),
    }
}

fn only_probe_kind(container: &Container) -> Result<ProbeKind, ProbeInputError> {
    let present: Vec<ProbeKind> = ProbeKind::ALL
        .into_iter()
        .filter(|k| probe_spec::container_probe(container, *k).is_some())
        .collect();
    match present.as_slice() {
        [kind] => Ok(*kind),
        [] => Err(ProbeInputError::Selection(format!(
            "container {:?} has no probes",
            container.name
        ))),
        _ => Err(ProbeInputError::Selection(format!(
            "--kind is required: container {:?} has several probes",
            container.name
        ))),
    }
}

/// A one-line description of the handler for reports.
pub fn describe_handler(handler: &Handler, pod_ip: &str) -> String {
    match handler {
        Handler::Exec(a) => format!("exec {:?}", a.command),
        Handler::HttpGet(a) => {
            let scheme = match a.scheme {
                Scheme::Http => "http",
                Scheme::Https => "https",
            };
            let host = a.host.as_deref().unwrap_or(pod_ip);
            let method = match a.extensions.method {
                Method::Get => String::new(),
                other => format!("{} ", other.as_str()),
            };
            let protocol = match a.protocol {
                HttpProtocol::Http1 => "",
                HttpProtocol::Http2 => " (h2c)",
            };
            format!(
                "httpGet {method}{scheme}://{}{}{protocol}",
                join_host_port(host, a.port),
                a.path
            )
        }
        Handler::TcpSocket(a) => format!(
            "tcpSocket {}",
            join_host_port(a.host.as_deref().unwrap_or(pod_ip), a.port)
        ),
        Handler::Grpc(a) => format!(
            "grpc {} service {:?}",
            join_host_port(pod_ip, a.port),
            a.service
        ),
        Handler::Unresolvable(error) => format!("unresolvable port: {error}"),
        Handler::Unsupported(unsupported) => format!("unsupported: {unsupported}"),
    }
}

fn report(selected: &Selected, pod_ip: &str, verdict: ProbeVerdict, took: Duration) -> ProbeReport {
    let markers = verdict_result(&verdict)
        .map(|result| {
            selected
                .spec
                .markers
                .iter()
                .filter_map(|marker| {
                    Some(MarkerWrite {
                        target: match marker.target {
                            MarkerTarget::Label => "label",
                            MarkerTarget::Annotation => "annotation",
                        },
                        key: marker.key.clone(),
                        value: value_on(marker, result)?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    ProbeReport {
        markers,
        workload: selected.spec.workload.describe(),
        kind: selected.kind,
        container: selected.container.clone(),
        handler: describe_handler(&selected.spec.handler, pod_ip),
        result: verdict.result,
        output: verdict.output,
        error: verdict.error,
        event: verdict.event,
        attempts: verdict.attempts,
        duration_ms: took.as_secs_f64() * 1000.0,
    }
}

/// The human-readable report.
pub fn render_text(report: &ProbeReport) -> String {
    let mut out = format!(
        "{} probe ({}): {}",
        report.kind, report.handler, report.result
    );
    if let Some(error) = &report.error {
        out.push_str(&format!(
            " (errored after {} attempts: {error})",
            report.attempts
        ));
    }
    out.push('\n');
    if !report.output.is_empty() {
        out.push_str(&format!("output: {}\n", report.output));
    }
    if let Some(event) = &report.event {
        out.push_str(&format!(
            "event: {:?} {}: {}\n",
            event.type_, event.reason, event.message
        ));
    }
    for marker in &report.markers {
        match &marker.value {
            Some(value) => out.push_str(&format!(
                "marker: {} {}={value}\n",
                marker.target, marker.key
            )),
            None => out.push_str(&format!(
                "marker: {} {} removed\n",
                marker.target, marker.key
            )),
        }
    }
    for guard in &report.workload {
        out.push_str(&format!("workload: {guard}\n"));
    }
    out.push_str(&format!("took {:.1} ms\n", report.duration_ms));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args(container: Option<&str>, kind: Option<KindArg>) -> ProbeArgs {
        ProbeArgs {
            probe: PathBuf::from("-"),
            container: container.map(str::to_string),
            kind,
            pod_ip: "127.0.0.1".into(),
            container_id: None,
            cri_endpoint: DEFAULT_ENDPOINT.into(),
            kube_probe_version: podprobe_core::KUBE_PROBE_VERSION.into(),
            output: OutputFormat::Json,
            client_cert: None,
            client_key: None,
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-zA-Z0-9$()/: -]{0,12}".prop_map(serde_json::Value::from),
        ];
        let keys = prop_oneof![
            Just("kind".to_string()),
            Just("spec".to_string()),
            Just("containers".to_string()),
            Just("name".to_string()),
            Just("httpGet".to_string()),
            Just("tcpSocket".to_string()),
            Just("grpc".to_string()),
            Just("exec".to_string()),
            Just("port".to_string()),
            Just("command".to_string()),
            Just("readinessProbe".to_string()),
            "[a-z]{1,8}",
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map(keys.clone(), inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// `podprobe probe` never panics, whatever the document: it either
        /// selects a runnable probe or says what is wrong.
        #[test]
        fn select_never_panics(doc in json_value(), container in proptest::option::of("[a-z]{1,3}")) {
            let _ = select(&doc, &args(container.as_deref(), Some(KindArg::Readiness)));
            let _ = select(&doc, &args(container.as_deref(), None));
        }

        #[test]
        fn parse_document_never_panics(text in "\\PC{0,64}") {
            let _ = parse_document(&text);
        }
    }

    fn select_error(doc: serde_json::Value, container: Option<&str>) -> String {
        match select(&doc, &args(container, None)) {
            Ok(selected) => panic!("expected an error, got {selected:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn probe_objects_are_refused_as_the_annotation_refuses_them() {
        let typo = serde_json::json!({"httpGet": {"path": "/", "port": 1, "sheme": "HTTPS"},
                                      "timeoutSecond": 1, "initialDelaySecond": 5});
        let cli = select_error(typo.clone(), None);
        assert_eq!(cli, "readinessProbe.httpGet.sheme: unknown field");
        let spec = k8s_openapi::api::core::v1::PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Container::default()
            }],
            ..Default::default()
        };
        let annotation = serde_json::json!({"app": {"readinessProbe": typo}}).to_string();
        let daemon = podprobe_core::status::annotation::parse_probes(
            &spec,
            &annotation,
            &mut podprobe_core::spec::probe_spec::budget::PodBudget::default(),
        )
        .unwrap_err();
        assert_eq!(
            daemon.to_string(),
            format!("podprobe.io/probes: container \"app\": {cli}")
        );

        let extension_typo =
            serde_json::json!({"httpGet": {"port": 1}, "podprobe": {"tls": {"caBundel": ""}}});
        assert_eq!(
            select_error(extension_typo, None),
            "readinessProbe.podprobe.tls.caBundel: unknown field"
        );
    }

    #[test]
    fn probe_objects_carry_their_extensions() {
        let object = serde_json::json!({"httpGet": {"port": 8080},
                                        "podprobe": {"method": "HEAD"}});
        let selected = select(&object, &args(None, None)).expect("valid");
        assert_eq!(
            describe_handler(&selected.spec.handler, "10.0.0.1"),
            "httpGet HEAD http://10.0.0.1:8080/"
        );
    }

    #[test]
    fn pod_manifest_probes_are_strict_and_take_no_extensions() {
        let pod = |probe: serde_json::Value| {
            serde_json::json!({"kind": "Pod", "spec": {
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                "containers": [{"name": "app", "readinessProbe": probe}]}})
        };
        assert_eq!(
            select_error(
                pod(serde_json::json!({"tcpSocket": {"port": 1, "hots": "x"}})),
                Some("app")
            ),
            "readinessProbe.tcpSocket.hots: unknown field"
        );
        let refused = select_error(
            pod(serde_json::json!({"httpGet": {"port": 1}, "podprobe": {"method": "HEAD"}})),
            Some("app"),
        );
        assert!(
            refused.starts_with("readinessProbe.podprobe: unknown field (not part of core/v1"),
            "{refused}"
        );
        let plain = select(
            &pod(serde_json::json!({"httpGet": {"port": 1}})),
            &args(Some("app"), None),
        );
        assert!(plain.is_ok(), "{plain:?}");
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        let report = |result, error: Option<&str>| ProbeReport {
            kind: ProbeKind::Readiness,
            container: String::new(),
            handler: String::new(),
            result,
            output: String::new(),
            error: error.map(str::to_string),
            event: None,
            attempts: 1,
            duration_ms: 0.0,
            markers: Vec::new(),
            workload: Vec::new(),
        };
        assert_eq!(report_exit_code(&report(ProbeResult::Success, None)), 0);
        assert_eq!(report_exit_code(&report(ProbeResult::Warning, None)), 0);
        assert_eq!(report_exit_code(&report(ProbeResult::Failure, None)), 1);
        assert_eq!(report_exit_code(&report(ProbeResult::Unknown, None)), 2);
        assert_eq!(
            report_exit_code(&report(ProbeResult::Failure, Some("reset"))),
            2
        );
    }

    /// WG1 in `podprobe probe`: what the budget or floor would do.
    #[test]
    fn wg1_the_report_says_what_the_workload_guard_would_do() {
        let passed = |kind| {
            ProbeVerdict::from_attempt(
                kind,
                Ok(podprobe_core::spec::Outcome::new(ProbeResult::Success, "")),
                1,
            )
        };
        let doc = serde_json::json!({"exec": {"command": ["true"]}, "podprobe": {"readinessFloor": {"minReady": "50%"}}});
        let selected = select(&doc, &args(None, Some(KindArg::Readiness))).expect("selected");
        let text = render_text(&report(
            &selected,
            "127.0.0.1",
            passed(ProbeKind::Readiness),
            Duration::ZERO,
        ));
        assert!(
            text.contains("workload: readinessFloor: podprobe.io/ready stays True while fewer than 50% of its workload's pods would be Ready without this one\n"),
            "{text}"
        );
        let doc = serde_json::json!({"exec": {"command": ["true"]}, "podprobe": {"restartBudget": {"maxUnavailable": 1}}});
        let selected = select(&doc, &args(None, Some(KindArg::Liveness))).expect("selected");
        let text = render_text(&report(
            &selected,
            "127.0.0.1",
            passed(ProbeKind::Liveness),
            Duration::ZERO,
        ));
        assert!(
            text.contains("workload: restartBudget: a restart of this pod while it is Ready waits until fewer than 1 of its workload's pods are unavailable, at most 300 s\n"),
            "{text}"
        );
    }

    /// MK3 in `podprobe probe`: what the markers would write on this
    /// result; nothing for an errored run.
    #[test]
    fn mk3_the_report_says_what_the_markers_would_write() {
        let doc = serde_json::json!({"exec": {"command": ["false"]}, "podprobe": {"markers": [
            {"label": "role", "onSuccess": "primary", "onFailure": "replica"},
            {"annotation": "example.com/up", "onSuccess": "yes"}]}});
        let selected = select(&doc, &args(None, Some(KindArg::Readiness))).expect("selected");
        let failed = ProbeVerdict::from_attempt(
            ProbeKind::Readiness,
            Ok(podprobe_core::spec::Outcome::new(ProbeResult::Failure, "")),
            1,
        );
        let text = render_text(&report(&selected, "127.0.0.1", failed, Duration::ZERO));
        assert!(
            text.contains(
                "marker: label role=replica\nmarker: annotation example.com/up removed\n"
            ),
            "{text}"
        );
        let errored = ProbeVerdict::from_attempt(
            ProbeKind::Readiness,
            Err(podprobe_core::spec::ProbeError::unknown("reset")),
            3,
        );
        let text = render_text(&report(&selected, "127.0.0.1", errored, Duration::ZERO));
        assert!(!text.contains("marker:"), "{text}");
    }
}
