//! The kubelet's common probe wrapper (`prober.probe`): dispatch to the
//! handler, up to three attempts on errors only, the mapping of low-level
//! results to success or failure, and the Event the run would record.

use std::borrow::Cow;
use std::time::Duration;

use tokio::time::{Instant, timeout_at};

use crate::probe::{exec, grpc, http, tcp};
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::pod_network::PodNetwork;
use podprobe_core::spec::probe_spec::extension::{
    ClientIdentity, Network, POD_LOOPBACK, SecretHeader,
};
use podprobe_core::spec::probe_spec::{Handler, ProbeSpec};
use podprobe_core::spec::verdict::{ProbeTarget, ProbeVerdict, probe_with_retries, reasons};
use podprobe_core::spec::{Attempt, ProbeError, ProbeKind};
use podprobe_core::util::gofmt::go_quote;
use std::sync::Arc;

use crate::runtime::cri::CriClient;
use crate::runtime::in_flight::{InFlightGauge, InFlightGuard};
use podprobe_core::spec::client_identity::ClientIdentitySource;
use podprobe_core::spec::header_secrets::HeaderSecretSource;
use podprobe_core::util::fair_slots::{FairSlots, Slot, SlotsBusy};

/// Runs probes; shared by every worker.
#[derive(Clone, Debug)]
pub struct Prober {
    user_agent: String,
    cri: Option<CriClient>,
    destinations: Destinations,
    client_certificates: Option<Arc<dyn ClientIdentitySource>>,
    header_secrets: Option<Arc<dyn HeaderSecretSource>>,
    network_limits: Option<NetworkLimits>,
}

/// What the network probes (HTTP, TCP, gRPC) of the node's pods may hold
/// (#37): a probe holds a connection, and the buffers of its response, for
/// up to its timeout, which a pod's server chooses to use to the end.
#[derive(Clone, Debug)]
pub struct NetworkLimits {
    /// Attempts in flight (each holds at most one connection), node-wide
    /// and per pod (`--max-concurrent-network-probes`, `...-per-pod`).
    pub slots: Arc<FairSlots>,
    /// The longest timeout a network probe runs with
    /// (`--max-network-timeout-seconds`).
    pub max_timeout: Duration,
    /// Counts the attempts in flight (`podprobe_network_probes_in_flight`).
    pub in_flight: InFlightGauge,
}

/// A network probe attempt in flight: its slot and its count in
/// [`NetworkLimits::in_flight`], both given back when it ends.
struct InFlight {
    _slot: Option<Slot>,
    _counted: InFlightGuard,
}

/// The error of an attempt that got no slot within its timeout.
fn network_slots_busy(slots: &FairSlots, waited: Duration) -> ProbeError {
    ProbeError::unknown(format!(
        "probe not started: no network probe slot became free for this pod within {waited:?} \
         ({} on this node, --max-concurrent-network-probes; at most {} per pod, \
         --max-concurrent-network-probes-per-pod)",
        slots.limit(),
        slots.per_pod()
    ))
}

impl Prober {
    /// `kube_probe_version` is `MAJOR.MINOR`, sent as `kube-probe/MAJOR.MINOR`.
    /// Without a CRI client exec probes error.
    pub fn new(kube_probe_version: &str, cri: Option<CriClient>) -> Self {
        Prober {
            user_agent: format!("kube-probe/{kube_probe_version}"),
            cri,
            destinations: Destinations::default(),
            client_certificates: None,
            header_secrets: None,
            network_limits: None,
        }
    }

    /// Network probes hold at most `limits`' slots and run with at most its
    /// timeout; without, as many as the probes ask for, as long (the
    /// kubelet's way, and `podprobe probe`'s).
    pub fn with_network_limits(self, limits: NetworkLimits) -> Self {
        Prober {
            network_limits: Some(limits),
            ..self
        }
    }

    /// Probes taking header values from Secrets (`podprobe.http.headers`)
    /// read them through `secrets`; without, such probes fail.
    pub fn with_header_secrets(self, secrets: impl HeaderSecretSource) -> Self {
        Prober {
            header_secrets: Some(Arc::new(secrets)),
            ..self
        }
    }

    /// Probes naming a `clientCertificate` Secret read it through
    /// `certificates`; without, such probes fail.
    pub fn with_client_certificates(self, certificates: impl ClientIdentitySource) -> Self {
        Prober {
            client_certificates: Some(Arc::new(certificates)),
            ..self
        }
    }

    /// Network probes connect only where `destinations` allows; by default
    /// anywhere, as the kubelet's.
    pub fn with_destinations(self, destinations: Destinations) -> Self {
        Prober {
            destinations,
            ..self
        }
    }

    pub fn user_agent(&self) -> &str {
        &self.user_agent
    }

    /// Runs `spec` once, retrying errors up to [`super::verdict::MAX_PROBE_RETRIES`] times.
    /// A `clientCertificate` Secret, and the Secrets of `http.headers`
    /// (H25), are read (or taken from the cache) once per run, before the
    /// first attempt and outside `timeoutSeconds`: a read is bounded by the
    /// API request timeout instead, and cancelling it at the probe's
    /// deadline would leave nothing cached to back off with, so a hung API
    /// server would be asked again every period.
    pub async fn probe(
        &self,
        kind: ProbeKind,
        spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> ProbeVerdict {
        let secret = spec.client_certificate_secret();
        if secret.is_none() && spec.secret_headers().is_empty() {
            return probe_with_retries(kind, || self.run_handler(spec, target)).await;
        }
        let mut resolved = spec.clone();
        if let Some(secret) = secret {
            match self.client_identity(secret, target).await {
                Ok(identity) => resolved.present_client_identity(identity),
                Err(message) => {
                    return ProbeVerdict::secret_unavailable(
                        kind,
                        reasons::CLIENT_CERTIFICATE_UNAVAILABLE,
                        message,
                    );
                }
            };
        }
        let mut headers = Vec::with_capacity(spec.secret_headers().len());
        for header in spec.secret_headers() {
            match self.header_value(header, target).await {
                Ok(value) => headers.push((header.name.clone(), value)),
                Err(message) => {
                    let reason = reasons::HEADER_SECRET_UNAVAILABLE;
                    return ProbeVerdict::secret_unavailable(kind, reason, message);
                }
            }
        }
        resolved.present_secret_headers(headers);
        probe_with_retries(kind, || self.run_handler(&resolved, target)).await
    }

    /// The value of `header` from its Secret in the target pod's namespace,
    /// or why there is none.
    async fn header_value(
        &self,
        header: &SecretHeader,
        target: ProbeTarget<'_>,
    ) -> Result<String, String> {
        let read = match (&self.header_secrets, target.namespace) {
            (Some(secrets), Some(namespace)) => {
                secrets
                    .header_value(namespace, &header.secret, &header.key)
                    .await
            }
            _ => Err(format!(
                "Secret {}: this prober reads no Secrets",
                go_quote(&header.secret)
            )),
        };
        read.map_err(|why| format!("{}: {why}", header.name))
    }

    /// The client certificate of Secret `secret` in the target pod's
    /// namespace, or why there is none.
    async fn client_identity(
        &self,
        secret: &str,
        target: ProbeTarget<'_>,
    ) -> Result<ClientIdentity, String> {
        match (&self.client_certificates, target.namespace) {
            (Some(certificates), Some(namespace)) => {
                certificates.client_identity(namespace, secret).await
            }
            _ => Err(format!(
                "client certificate: Secret {}: this prober reads no Secrets",
                go_quote(secret)
            )),
        }
    }

    /// One attempt, dispatched to the spec's handler.
    pub async fn run_handler(&self, spec: &ProbeSpec, target: ProbeTarget<'_>) -> Attempt {
        let (_slot, mut timeout) = self.network_slot(spec, target).await?;
        let (pod_ip, destinations) = match spec.network {
            Network::Node => (target.pod_ip, Cow::Borrowed(&self.destinations)),
            Network::Pod => {
                // Finding the namespace counts against the probe's timeout.
                let deadline = Instant::now() + timeout;
                let too_late = || {
                    ProbeError::unknown(
                        "network: pod: the runtime did not name the pod's network namespace \
                         within the probe's timeout",
                    )
                };
                let network = timeout_at(deadline, self.pod_network(target))
                    .await
                    .map_err(|_| too_late())??;
                // What is left, never zero: a zero timeout is "no deadline"
                // to the HTTP probe.
                timeout = Some(deadline.saturating_duration_since(Instant::now()))
                    .filter(|left| !left.is_zero())
                    .ok_or_else(too_late)?;
                let destinations = self.destinations.in_pod_network(network);
                (POD_LOOPBACK, Cow::Owned(destinations))
            }
        };
        let destinations = destinations.as_ref();
        // Each large handler's run is boxed on its own, so a probe in
        // flight holds the state of its own kind of exchange, not room for
        // the largest of them (a gRPC call's, a CRI exec's): the probe runs
        // in flight when a node's pods go away at once were the largest
        // share of the heap's peak (bench/RESULTS.md, #39). A TCP dial's
        // state is small (744 bytes in a debug build) and stays inline.
        match &spec.handler {
            Handler::HttpGet(action) => {
                let ua = &self.user_agent;
                Box::pin(http::probe(action, pod_ip, timeout, ua, destinations)).await
            }
            Handler::TcpSocket(action) => {
                let host = action.host.as_deref().unwrap_or(pod_ip);
                tcp::probe(host, action.port, timeout, destinations).await
            }
            Handler::Grpc(action) => {
                Box::pin(grpc::probe_with_tls(
                    pod_ip,
                    action.port,
                    &action.service,
                    timeout,
                    &self.user_agent,
                    destinations,
                    action.tls.as_ref(),
                ))
                .await
            }
            Handler::Exec(action) => {
                let (Some(cri), Some(id)) = (&self.cri, target.container_id) else {
                    return Err(ProbeError::unknown(
                        "exec probe needs a container ID and a CRI endpoint",
                    ));
                };
                if let Some(identity) = target.identity {
                    cri.verify_identity(id, identity)
                        .await
                        .map_err(|e| ProbeError::unknown(e.to_string()))?;
                }
                let pod = target.identity.map_or("", |identity| identity.pod_uid);
                Box::pin(exec::probe(
                    cri,
                    pod,
                    id,
                    &action.command,
                    exec_timeout(timeout),
                ))
                .await
            }
            Handler::Unresolvable(error) => Err(ProbeError::unknown(error.to_string())),
            Handler::Unsupported(unsupported) => Err(ProbeError::unknown(unsupported.to_string())),
        }
    }
}

impl Prober {
    /// A network probe's place in flight (none for exec probes or without
    /// limits; its slot none without a pod to charge it to) and the
    /// attempt's timeout: its own, cut to the longest allowed. The wait for
    /// the slot, up to that timeout, does not shorten the attempt (as for
    /// exec slots): a probe kept waiting by other pods errors (no verdict)
    /// rather than failing on a deadline the kubelet would not have set.
    async fn network_slot(
        &self,
        spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> Result<(Option<InFlight>, Duration), ProbeError> {
        let timeout = spec.timeout();
        let network = matches!(
            spec.handler,
            Handler::HttpGet(_) | Handler::TcpSocket(_) | Handler::Grpc(_)
        );
        let Some(limits) = self.network_limits.as_ref().filter(|_| network) else {
            return Ok((None, timeout));
        };
        let timeout = match timeout.is_zero() {
            true => limits.max_timeout,
            false => timeout.min(limits.max_timeout),
        };
        let slot = match target.identity {
            Some(identity) => Some(
                (limits.slots.acquire(identity.pod_uid, timeout).await)
                    .map_err(|SlotsBusy| network_slots_busy(&limits.slots, timeout))?,
            ),
            None => None,
        };
        let in_flight = InFlight {
            _slot: slot,
            _counted: limits.in_flight.enter(),
        };
        Ok((Some(in_flight), timeout))
    }

    /// `network: pod`: the network namespace of the target's pod, found
    /// through the runtime by the pod's UID. An error fails the attempt as
    /// an error (retried, never a verdict), as a runtime failure of an exec
    /// probe does.
    async fn pod_network(&self, target: ProbeTarget<'_>) -> Result<PodNetwork, ProbeError> {
        let (Some(cri), Some(identity)) = (&self.cri, target.identity) else {
            return Err(ProbeError::unknown(
                "network: pod needs the pod's UID and a CRI endpoint",
            ));
        };
        let path = cri
            .pod_network_namespace(identity.pod_uid, target.container_id)
            .await
            .map_err(|e| {
                ProbeError::unknown(format!(
                    "network: pod: cannot find the pod's network namespace: {e}"
                ))
            })?;
        PodNetwork::open(&path).map_err(|e| {
            if let Some(id) = target.container_id {
                cri.forget_network_namespace(id);
            }
            ProbeError::unknown(format!(
                "network: pod: cannot open the pod's network namespace {}: {e}",
                path.display()
            ))
        })
    }
}

/// Exec probes pass the timeout to the runtime in whole seconds.
fn exec_timeout(timeout: Duration) -> Duration {
    Duration::from_secs(timeout.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use podprobe_core::spec::Outcome;
    use podprobe_core::spec::ProbeResult;
    use podprobe_core::spec::probe_spec::{
        AtoiFailure, ExecAction, HttpGetAction, PortError, Scheme, TcpSocketAction,
    };
    use podprobe_core::spec::verdict::{EventType, MAX_PROBE_RETRIES, ProbeEvent, reasons};

    fn spec(handler: Handler) -> ProbeSpec {
        ProbeSpec {
            handler,
            initial_delay_seconds: 0,
            timeout_seconds: 1,
            period_seconds: 10,
            period_milliseconds: None,
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
            network: Default::default(),
            markers: Vec::new(),
            workload: Default::default(),
        }
    }

    const TARGET: ProbeTarget<'static> = ProbeTarget {
        pod_ip: "127.0.0.1",
        container_id: None,
        identity: None,
        namespace: None,
    };

    /// What a probe in flight holds on the heap while it waits: its own
    /// handler's state, each step of an HTTP exchange boxed and freed once
    /// done, not room for every handler and every step at once (19,200
    /// and 18,880 bytes in a debug build before, 3,008 and 3,920 after;
    /// #39, bench/RESULTS.md).
    #[test]
    fn a_probe_in_flight_holds_only_its_own_handlers_state() {
        const AT_MOST: usize = 8 * 1024;
        let prober = Prober::new("1.35", None);
        let tcp = spec(Handler::TcpSocket(TcpSocketAction {
            host: None,
            port: 80,
        }));
        let attempt = prober.run_handler(&tcp, TARGET);
        assert!(
            size_of_val(&attempt) <= AT_MOST,
            "{}",
            size_of_val(&attempt)
        );
        let action = HttpGetAction {
            scheme: Scheme::Http,
            host: None,
            port: 80,
            path: "/".into(),
            headers: Vec::new(),
            protocol: Default::default(),
            extensions: Default::default(),
        };
        let timeout = Duration::from_secs(1);
        let exchange = http::probe(&action, "127.0.0.1", timeout, "ua", &prober.destinations);
        assert!(
            size_of_val(&exchange) <= AT_MOST,
            "{}",
            size_of_val(&exchange)
        );
    }

    #[tokio::test]
    async fn p2_clean_failure_is_not_retried() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let tcp = spec(Handler::TcpSocket(TcpSocketAction { host: None, port }));
        let v = Prober::new("1.35", None)
            .probe(ProbeKind::Readiness, &tcp, TARGET)
            .await;
        assert_eq!(
            (v.result, v.attempts, v.error),
            (ProbeResult::Failure, 1, None)
        );
    }

    #[tokio::test]
    async fn p2_errors_are_retried_up_to_three_times() {
        let exec = spec(Handler::Exec(ExecAction {
            command: vec!["true".into()],
        }));
        let v = Prober::new("1.35", None)
            .probe(ProbeKind::Startup, &exec, TARGET)
            .await;
        assert_eq!(v.attempts, MAX_PROBE_RETRIES);
        assert!(v.error.is_some());
        assert_eq!(v.event.map(|e| e.reason), Some(reasons::UNHEALTHY));
    }

    /// Without a runtime to name the pod's namespace, a `network: pod`
    /// probe errors (retried, never a verdict) and never falls back to the
    /// node's network.
    #[tokio::test]
    async fn a_pod_network_probe_without_its_namespace_errors() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let tcp = ProbeSpec {
            network: Network::Pod,
            ..spec(Handler::TcpSocket(TcpSocketAction { host: None, port }))
        };
        let v = Prober::new("1.35", None)
            .probe(ProbeKind::Readiness, &tcp, TARGET)
            .await;
        assert_eq!(v.attempts, MAX_PROBE_RETRIES);
        assert_eq!(
            v.error.as_deref(),
            Some("network: pod needs the pod's UID and a CRI endpoint")
        );
    }

    #[tokio::test]
    async fn h19_an_unresolvable_port_errors_every_run_as_the_kubelets() {
        let unresolvable = spec(Handler::Unresolvable(PortError::NotANumber {
            port: "web".into(),
            reason: AtoiFailure::InvalidSyntax,
        }));
        let v = Prober::new("1.35", None)
            .probe(ProbeKind::Readiness, &unresolvable, TARGET)
            .await;
        assert_eq!(v.attempts, MAX_PROBE_RETRIES);
        assert_eq!(
            v.event.map(|e| e.message).as_deref(),
            Some(
                r#"Readiness probe errored and resulted in unknown state: strconv.Atoi: parsing "web": invalid syntax"#
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_client_certificate_fails_the_run_without_connecting() {
        use crate::api::client_certificates::ClientCertificates;
        use crate::api::secret_cache::testing::Fake;
        use crate::api::secret_cache::{ReadError, SECRET_TTL};
        let mut https = spec(Handler::HttpGet(HttpGetAction {
            scheme: Scheme::Https,
            host: None,
            port: 1,
            path: "/".into(),
            headers: Vec::new(),
            protocol: Default::default(),
            extensions: Default::default(),
        }));
        let Handler::HttpGet(action) = &mut https.handler else {
            unreachable!()
        };
        action.extensions.tls.client_certificate_secret = Some("app-client".into());
        let fake = Fake::new(Err(ReadError::NotFound), Duration::ZERO);
        let prober = Prober::new("1.35", None)
            .with_client_certificates(ClientCertificates::new(fake.clone(), SECRET_TTL));
        let in_shop = ProbeTarget {
            namespace: Some("shop"),
            ..TARGET
        };
        for _ in 0..3 {
            let v = prober.probe(ProbeKind::Readiness, &https, in_shop).await;
            let message =
                r#"client certificate: Secret "app-client" in namespace "shop": it does not exist"#;
            assert_eq!(
                v,
                ProbeVerdict {
                    result: ProbeResult::Failure,
                    output: message.into(),
                    error: None,
                    event: Some(ProbeEvent {
                        type_: EventType::Warning,
                        reason: reasons::CLIENT_CERTIFICATE_UNAVAILABLE,
                        message: format!("Readiness probe failed: {message}"),
                    }),
                    attempts: 0,
                }
            );
        }
        assert_eq!(fake.gets(), 1, "the failed read is reused, not repeated");
        let v = Prober::new("1.35", None)
            .probe(ProbeKind::Readiness, &https, in_shop)
            .await;
        assert_eq!(
            v.output,
            r#"client certificate: Secret "app-client": this prober reads no Secrets"#
        );
    }

    /// H25: a probe's `http.headers` values are read from their Secret in
    /// the pod's namespace and sent after `httpHeaders`; a Secret that
    /// cannot give one fails the run without connecting, with a Warning.
    #[tokio::test]
    async fn h25_secret_headers_are_read_then_sent_or_the_run_fails() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::Secret;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        use crate::api::header_secret_cache::HeaderSecrets;
        use crate::api::secret_cache::testing::Fake;
        use crate::api::secret_cache::{ReadError, SECRET_TTL};
        use podprobe_core::spec::probe_spec::extension::SecretHeader;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                head.extend_from_slice(&buf[..n]);
            }
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            stream.write_all(answer).await.unwrap();
            String::from_utf8(head).unwrap()
        });
        let mut probe = spec(Handler::HttpGet(HttpGetAction {
            scheme: Scheme::Http,
            host: None,
            port,
            path: "/".into(),
            headers: vec![("X-Plain".into(), "1".into())],
            protocol: Default::default(),
            extensions: Default::default(),
        }));
        let Handler::HttpGet(action) = &mut probe.handler else {
            unreachable!()
        };
        action.extensions.secret_headers = vec![SecretHeader {
            name: "Authorization".into(),
            secret: "probe-auth".into(),
            key: "token".into(),
        }];
        let secret = |key: &str| Secret {
            data: Some([(key.to_string(), ByteString(b"Bearer s3cret".to_vec()))].into()),
            ..Secret::default()
        };
        let in_shop = ProbeTarget {
            namespace: Some("shop"),
            ..TARGET
        };
        let fake = Fake::new(Ok(secret("token")), Duration::ZERO);
        let prober =
            Prober::new("1.35", None).with_header_secrets(HeaderSecrets::new(fake, SECRET_TTL));
        let v = prober.probe(ProbeKind::Readiness, &probe, in_shop).await;
        assert_eq!((v.result, v.output.as_str()), (ProbeResult::Success, "ok"));
        let head = server.await.unwrap();
        assert!(head.contains("Authorization: Bearer s3cret\r\n"), "{head}");

        for (answer, why) in [
            (Err(ReadError::NotFound), "it does not exist"),
            (Ok(secret("other")), r#"it has no key "token""#),
        ] {
            let fake = Fake::new(answer, Duration::ZERO);
            let prober = Prober::new("1.35", None)
                .with_header_secrets(HeaderSecrets::new(fake.clone(), SECRET_TTL));
            let v = prober.probe(ProbeKind::Liveness, &probe, in_shop).await;
            let message = format!(
                r#"Authorization: header value: Secret "probe-auth" in namespace "shop": {why}"#
            );
            assert_eq!(
                v,
                ProbeVerdict {
                    result: ProbeResult::Failure,
                    output: message.clone(),
                    error: None,
                    event: Some(ProbeEvent {
                        type_: EventType::Warning,
                        reason: reasons::HEADER_SECRET_UNAVAILABLE,
                        message: format!("Liveness probe failed: {message}"),
                    }),
                    attempts: 0,
                }
            );
        }
    }

    fn verdict(attempt: Attempt) -> ProbeVerdict {
        ProbeVerdict::from_attempt(ProbeKind::Liveness, attempt, 1)
    }

    #[test]
    fn p4_success_has_no_event() {
        let v = verdict(Ok(Outcome::new(ProbeResult::Success, "ok")));
        assert!(v.is_success());
        assert_eq!(v.event, None);
    }

    #[test]
    fn p4_warning_is_success_with_probe_warning_event() {
        let v = verdict(Ok(Outcome::new(
            ProbeResult::Warning,
            "Probe terminated redirects, Response body: x",
        )));
        assert!(v.is_success());
        let event = v.event.unwrap();
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "ProbeWarning");
        assert_eq!(
            event.message,
            "Liveness probe warning: Probe terminated redirects, Response body: x"
        );
    }

    #[test]
    fn p4_failure_records_unhealthy_with_output() {
        let v = verdict(Ok(Outcome::new(
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 404",
        )));
        assert!(!v.is_success());
        let event = v.event.unwrap();
        assert_eq!(event.reason, "Unhealthy");
        assert_eq!(
            event.message,
            "Liveness probe failed: HTTP probe failed with statuscode: 404"
        );
    }

    #[test]
    fn p4_unknown_without_error_fails_silently() {
        let v = verdict(Ok(Outcome::new(ProbeResult::Unknown, "")));
        assert!(!v.is_success());
        assert_eq!(v.event, None);
    }

    #[test]
    fn p3_error_records_errored_event_with_last_result() {
        let v = ProbeVerdict::from_attempt(
            ProbeKind::Readiness,
            Err(ProbeError {
                result: ProbeResult::Failure,
                message: "connection reset by peer".into(),
            }),
            3,
        );
        assert!(!v.is_success());
        assert_eq!(v.error.as_deref(), Some("connection reset by peer"));
        assert_eq!(
            v.event.unwrap().message,
            "Readiness probe errored and resulted in failure state: connection reset by peer"
        );
    }
}
