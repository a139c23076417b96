//! gRPC health probes (G1-G7): `grpc.health.v1.Health/Check` over a
//! plain-text HTTP/2 connection, with one deadline over connecting and the
//! RPC. Every outcome is a result, never an error, so a gRPC probe is never
//! retried by the wrapper.
//!
//! Connecting follows grpc-go's blocking dial, which the kubelet uses: a
//! connection counts only once the server's HTTP/2 SETTINGS frame has
//! arrived, and failed attempts are retried with grpc-go's backoff until the
//! deadline. So a closed port or a server that does not speak HTTP/2 ends in
//! `timeout: failed to connect service ... context deadline exceeded`, as in
//! the kubelet, not in an immediate connection error.
//!
//! With `podprobe.tls` (#14) the connection is TLS (ALPN `h2`), made here
//! over the probe dialer with tokio-rustls and HTTP/2 runs over it,
//! verified as an HTTPS probe is ([`crate::probe::tls`]); the
//! name is `serverName`, else the target address. A TLS failure is retried
//! like any failed attempt, and the deadline message then ends with it, as
//! grpc-go's `WithReturnConnectionError` reports it.
//!
//! The call is made with h2 in the probe's own task, its first frames in
//! one write (`batched_writes`), and read as grpc-go reads it
//! (`health_call`).

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout_at};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::probe::dial::{DialError, ProbeStream, dial};
use crate::probe::tap::{ReadObserver, ReadTap};
use crate::probe::tls;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::probe_spec::extension::TlsSettings;
use podprobe_core::spec::{Attempt, Outcome, ProbeResult, join_host_port};
use podprobe_core::util::gofmt::go_duration;

mod batched_writes;
mod health_call;

use batched_writes::BatchedWrites;
pub use health_call::MAX_HEALTH_RESPONSE_BYTES;
use health_call::{Answer, CHECK_PATH, grpc_timeout, read_answer, request_message};

/// grpc-go's connection backoff: first delay, growth factor, jitter, ceiling.
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MULTIPLIER: f64 = 1.6;
const BACKOFF_JITTER: f64 = 0.2;
const BACKOFF_MAX: Duration = Duration::from_secs(120);
/// grpc-go gives each connection attempt at least this long.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// HTTP/2 frame header length and the SETTINGS frame type.
const FRAME_HEADER_LEN: usize = 9;
const FRAME_TYPE_SETTINGS: u8 = 0x4;

/// Checks `service` (empty: the whole server) on `host:port`, sending
/// `User-Agent: <user_agent>`, with one deadline of `timeout` over connecting
/// and the RPC; a `host` that `destinations` denies fails at once.
pub async fn probe(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
    user_agent: &str,
    destinations: &Destinations,
) -> Attempt {
    probe_with_tls(host, port, service, timeout, user_agent, destinations, None).await
}

/// [`probe`] over TLS with `tls` (`podprobe.tls`) when given.
pub async fn probe_with_tls(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
    user_agent: &str,
    destinations: &Destinations,
    tls: Option<&TlsSettings>,
) -> Attempt {
    let addr = join_host_port(host, port);
    let deadline = Instant::now() + timeout;
    // The dialer checks every address it dials too, but a refused dial
    // would only show as the deadline grpc-go reports; say why instead.
    if let Ok(ip) = host.parse::<IpAddr>()
        && let Err(denied) = destinations.check(ip)
    {
        let addr = SocketAddr::new(ip, port);
        let error = DialError::Denied { addr, denied };
        return Ok(Outcome::new(ProbeResult::Failure, error.to_string()));
    }
    let uri = match format!("http://{addr}{CHECK_PATH}").parse::<Uri>() {
        Ok(uri) => uri,
        Err(error) => {
            return Ok(failure(format!(
                "error: failed to connect service at {addr:?}: invalid URI: {error}"
            )));
        }
    };
    let tls = tls.map(|settings| TlsTarget {
        config: tls::client_config(settings, &[b"h2"]),
        settings: settings.clone(),
    });
    let call = Call {
        uri,
        user_agent: format!("{user_agent} {USER_AGENT_SUFFIX}"),
        message: request_message(service),
    };
    let target = Target {
        host,
        port,
        tls: tls.as_ref(),
    };
    let connected = match connect(&call, target, deadline, destinations).await {
        Ok(connected) => connected,
        Err(last_tls_error) => {
            tracing::debug!(addr, service, "gRPC probe could not connect in time");
            let mut outcome = connect_timeout_outcome(&addr, timeout);
            if let Some(text) = last_tls_error {
                outcome.output.push_str(&format!(
                    ": connection error: desc = \"transport: authentication handshake failed: {text}\""
                ));
            }
            return Ok(outcome);
        }
    };
    let check = check(connected, deadline).await;
    Ok(check_outcome(check, timeout))
}

/// What podprobe adds to the kubelet's User-Agent, as grpc-go adds
/// `grpc-go/<version>`.
const USER_AGENT_SUFFIX: &str = concat!("podprobe/", env!("CARGO_PKG_VERSION"));

/// HTTP/2 flow-control windows, per stream and per connection: how much a
/// server can make podprobe buffer ahead of what it reads. grpc-go starts
/// at 64 KiB too (and grows it by bandwidth estimates a probe never
/// needs); h2's default is 64 KiB less one byte.
const FLOW_CONTROL_WINDOW_BYTES: u32 = 64 * 1024;

/// The largest response header block (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`);
/// grpc-go and hyper allow 16 MiB.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// The Check request, the same for every attempt of a probe.
struct Call {
    uri: Uri,
    user_agent: String,
    /// The length-prefixed `HealthCheckRequest`.
    message: Bytes,
}

impl Call {
    /// The request's head; `grpc-timeout` is what is left of `deadline`, as
    /// grpc-go sends its context's deadline.
    fn head(&self, deadline: Instant) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        if let Ok(value) = http::HeaderValue::from_str(&self.user_agent) {
            headers.insert(http::header::USER_AGENT, value);
        }
        headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        let left = deadline.saturating_duration_since(Instant::now());
        if let Ok(value) = http::HeaderValue::from_str(&grpc_timeout(left)) {
            headers.insert("grpc-timeout", value);
        }
        request
    }
}

/// Where a probe connects: host, port and, with `podprobe.tls`, how.
#[derive(Clone, Copy)]
struct Target<'a> {
    host: &'a str,
    port: u16,
    tls: Option<&'a TlsTarget>,
}

/// `podprobe.tls` with its client configuration, built once per probe.
#[derive(Clone)]
struct TlsTarget {
    settings: TlsSettings,
    config: Arc<ClientConfig>,
}

/// A probe's connection as h2 sees it: writes batched, reads watched for
/// the server's SETTINGS.
type ProbeConnection = BatchedWrites<ReadTap<GrpcStream, PrefaceWatch>>;

/// A connection the server has started with SETTINGS, with the Check sent.
struct Connected {
    connection: h2::client::Connection<ProbeConnection, Bytes>,
    /// Kept so that h2 does not end the connection with a GOAWAY before
    /// the answer: with no request handle and no stream left, it would.
    _requests: h2::client::SendRequest<Bytes>,
    response: h2::client::ResponseFuture,
}

/// Connects as grpc-go's blocking dial does and sends the call; when
/// `deadline` passes first, the error is the last attempt's TLS failure
/// text, if any.
async fn connect(
    call: &Call,
    target: Target<'_>,
    deadline: Instant,
    destinations: &Destinations,
) -> Result<Connected, Option<String>> {
    let (host, port) = (target.host, target.port);
    let mut retries = 0;
    let mut last_tls_error = None;
    loop {
        let backoff = reconnect_backoff(retries, rand::random());
        let attempt_deadline = deadline.min(Instant::now() + backoff.max(MIN_CONNECT_TIMEOUT));
        let attempt = connect_once(call, target, attempt_deadline, deadline, destinations);
        match timeout_at(attempt_deadline, attempt).await {
            Ok(Ok(connected)) => return Ok(connected),
            Ok(Err(error)) => {
                tracing::debug!(%error, host, port, "gRPC connection attempt failed");
                last_tls_error = error.tls_failure().or(last_tls_error);
            }
            Err(_) => tracing::debug!(host, port, "gRPC connection attempt timed out"),
        }
        if timeout_at(deadline, tokio::time::sleep(backoff))
            .await
            .is_err()
        {
            return Err(last_tls_error);
        }
        retries += 1;
    }
}

/// Why one connection attempt failed; only logged, since the kubelet reports
/// every failed attempt as the deadline it eventually runs into.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The TLS handshake failed; Go's text.
    #[error("{0}")]
    Tls(String),
    #[error(transparent)]
    Http2(#[from] h2::Error),
    #[error("the server did not start HTTP/2 with a SETTINGS frame")]
    NotHttp2,
}

impl AttemptError {
    /// Go's text for the TLS handshake failure that ended this attempt.
    fn tls_failure(&self) -> Option<String> {
        match self {
            AttemptError::Tls(text) => Some(text.clone()),
            _ => None,
        }
    }
}

/// One attempt: dial, TLS if asked, the HTTP/2 handshake and the Check,
/// all in one write; then the server's first frame, which must be SETTINGS
/// (grpc-go's "server preface") for the connection to count.
///
/// grpc-go sends the call only once the connection counts; sending it with
/// the handshake saves a round of writes per probe and changes no outcome:
/// an answer on a connection that does not count is never read.
async fn connect_once(
    call: &Call,
    target: Target<'_>,
    attempt_deadline: Instant,
    deadline: Instant,
    destinations: &Destinations,
) -> Result<Connected, AttemptError> {
    let stream = dial(target.host, target.port, attempt_deadline, destinations).await?;
    let stream = match target.tls {
        None => GrpcStream::Plain(stream),
        Some(tls) => {
            let peer = stream.get_ref().peer_addr()?;
            let name: ServerName<'static> = tls::server_name(&tls.settings, target.host, peer.ip());
            let connected = tokio_rustls::TlsConnector::from(tls.config.clone())
                .connect(name, stream)
                .await
                .map_err(|err| AttemptError::Tls(tls_handshake_text(&err)))?;
            GrpcStream::Tls(Box::new(connected))
        }
    };
    let (preface_tx, mut preface_rx) = oneshot::channel();
    // Above TLS, so the preface is read in clear.
    let io = BatchedWrites::new(ReadTap::new(stream, PrefaceWatch::new(preface_tx)));
    let (mut requests, mut connection) = h2::client::Builder::new()
        .initial_window_size(FLOW_CONTROL_WINDOW_BYTES)
        .initial_connection_window_size(FLOW_CONTROL_WINDOW_BYTES)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .handshake::<_, Bytes>(io)
        .await?;
    let (response, mut body) = requests.send_request(call.head(deadline), false)?;
    body.send_data(call.message.clone(), true)?;
    tokio::select! {
        biased;
        verdict = &mut preface_rx => match verdict {
            Ok(true) => Ok(Connected { connection, _requests: requests, response }),
            Ok(false) | Err(_) => Err(AttemptError::NotHttp2),
        },
        ended = &mut connection => Err(ended.err().map_or(AttemptError::NotHttp2, AttemptError::Http2)),
    }
}

/// grpc-go's exponential backoff before reconnect number `retries + 1`;
/// `jitter_sample` is uniform in `[0, 1)`.
fn reconnect_backoff(retries: u32, jitter_sample: f64) -> Duration {
    if retries == 0 {
        return BACKOFF_BASE;
    }
    let max = BACKOFF_MAX.as_secs_f64();
    let mut backoff = BACKOFF_BASE.as_secs_f64();
    for _ in 0..retries {
        if backoff >= max {
            break;
        }
        backoff *= BACKOFF_MULTIPLIER;
    }
    let jitter = 1.0 + BACKOFF_JITTER * (jitter_sample * 2.0 - 1.0);
    Duration::from_secs_f64((backoff.min(max) * jitter).max(0.0))
}

/// What the Check RPC came back with.
#[derive(Debug)]
enum Check {
    /// The call ended with this answer.
    Answered(Answer),
    /// The probe deadline passed first.
    TimedOut,
}

/// Reads the answer, driving the connection in the same task.
async fn check(connected: Connected, deadline: Instant) -> Check {
    let Connected {
        mut connection,
        _requests,
        response,
    } = connected;
    let answer = read_answer(response);
    tokio::pin!(answer);
    let mut connection_open = true;
    let answered = timeout_at(deadline, async {
        loop {
            tokio::select! {
                answer = &mut answer => return answer,
                // A lost connection fails the stream too; its error is the
                // answer's to report.
                _ = &mut connection, if connection_open => connection_open = false,
            }
        }
    })
    .await;
    // grpc-go's client gives up at its own deadline, so an answer seen only
    // then lost that race. It may be the server's reaction to the expired
    // `grpc-timeout` (tonic servers answer CANCELLED), not a health answer.
    if Instant::now() >= deadline {
        return Check::TimedOut;
    }
    match answered {
        Ok(answer) => Check::Answered(answer),
        Err(_) => Check::TimedOut,
    }
}

fn failure(output: String) -> Outcome {
    Outcome::new(ProbeResult::Failure, output)
}

fn connect_timeout_outcome(addr: &str, timeout: Duration) -> Outcome {
    // grpc-go returns the context's own error here, whatever the last
    // connection attempt failed with.
    failure(format!(
        "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
        go_duration(timeout)
    ))
}

fn check_outcome(check: Check, timeout: Duration) -> Outcome {
    let answer = match check {
        Check::TimedOut => return rpc_timeout(timeout),
        Check::Answered(answer) => answer,
    };
    match answer {
        Answer::Responded(status) if status == ServingStatus::Serving as i32 => {
            Outcome::new(ProbeResult::Success, "service healthy")
        }
        Answer::Responded(status) => failure(format!(
            "service unhealthy (responded with {:?})",
            serving_status_name(status)
        )),
        Answer::Failed(status) if status.code == Code::Unimplemented => failure(format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            status.message
        )),
        Answer::Failed(status) if status.code == Code::DeadlineExceeded => rpc_timeout(timeout),
        Answer::Failed(status) => failure(format!("error: health rpc probe failed: {status}")),
        // grpc-go's unary call returns `io.EOF` itself here, and the kubelet
        // prints it.
        Answer::NoMessage => failure("error: health rpc probe failed: EOF".to_owned()),
    }
}

fn rpc_timeout(timeout: Duration) -> Outcome {
    failure(format!(
        "timeout: health rpc did not complete within {}",
        go_duration(timeout)
    ))
}

/// The proto enum name, or the bare number for values the proto does not
/// define (as Go's generated `String()` does).
fn serving_status_name(status: i32) -> String {
    ServingStatus::try_from(status)
        .map(|known| known.as_str_name().to_owned())
        .unwrap_or_else(|_| status.to_string())
}

/// Go's text for a failed TLS handshake of a gRPC connection.
fn tls_handshake_text(err: &std::io::Error) -> String {
    match err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(tls_err) => tls::error_text(tls_err),
        None => err.to_string(),
    }
}

/// A gRPC connection: plain text as the kubelet's, or TLS (`podprobe.tls`).
enum GrpcStream {
    Plain(ProbeStream),
    Tls(Box<tokio_rustls::client::TlsStream<ProbeStream>>),
}

impl AsyncRead for GrpcStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            GrpcStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            GrpcStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for GrpcStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            GrpcStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            GrpcStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            GrpcStream::Plain(s) => Pin::new(s).poll_flush(cx),
            GrpcStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            GrpcStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            GrpcStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Reads the first HTTP/2 frame header the server sends.
#[derive(Debug, Default)]
struct PrefaceSniffer {
    header: [u8; FRAME_HEADER_LEN],
    seen: usize,
}

impl PrefaceSniffer {
    /// Feeds bytes read from the server (empty: end of stream). Returns
    /// whether the first frame is a SETTINGS frame on stream 0 once that is
    /// known.
    fn feed(&mut self, bytes: &[u8]) -> Option<bool> {
        if bytes.is_empty() {
            return Some(false);
        }
        let take = bytes.len().min(FRAME_HEADER_LEN - self.seen);
        self.header[self.seen..self.seen + take].copy_from_slice(&bytes[..take]);
        self.seen += take;
        if self.seen < FRAME_HEADER_LEN {
            return None;
        }
        let stream_id = u32::from_be_bytes([
            self.header[5],
            self.header[6],
            self.header[7],
            self.header[8],
        ]);
        Some(self.header[3] == FRAME_TYPE_SETTINGS && stream_id & 0x7fff_ffff == 0)
    }
}

/// Tells the connecting probe whether the server spoke HTTP/2 first.
struct PrefaceWatch {
    sniffer: PrefaceSniffer,
    verdict: Option<oneshot::Sender<bool>>,
}

impl PrefaceWatch {
    fn new(verdict: oneshot::Sender<bool>) -> Self {
        PrefaceWatch {
            sniffer: PrefaceSniffer::default(),
            verdict: Some(verdict),
        }
    }
}

impl ReadObserver for PrefaceWatch {
    fn observe(&mut self, read: &std::io::Result<()>, bytes: &[u8]) {
        let Some(sender) = self.verdict.take() else {
            return;
        };
        let verdict = match read {
            Err(_) => Some(false),
            Ok(()) => self.sniffer.feed(bytes),
        };
        match verdict {
            // The probe may have given up on this attempt already.
            Some(verdict) => drop(sender.send(verdict)),
            None => self.verdict = Some(sender),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::grpc_status::GrpcStatus;

    const TIMEOUT: Duration = Duration::from_secs(2);

    fn rpc_error(code: Code, message: &str) -> Check {
        Check::Answered(Answer::Failed(GrpcStatus {
            code,
            message: message.to_owned(),
        }))
    }

    fn output(check: Check) -> (ProbeResult, String) {
        let outcome = check_outcome(check, TIMEOUT);
        (outcome.result, outcome.output)
    }

    #[test]
    fn g5_serving_is_success() {
        assert_eq!(
            output(Check::Answered(Answer::Responded(
                ServingStatus::Serving as i32
            ))),
            (ProbeResult::Success, "service healthy".to_owned())
        );
    }

    #[test]
    fn g5_other_statuses_fail_with_their_proto_names() {
        let cases = [
            (
                ServingStatus::Unknown as i32,
                r#"service unhealthy (responded with "UNKNOWN")"#,
            ),
            (
                ServingStatus::NotServing as i32,
                r#"service unhealthy (responded with "NOT_SERVING")"#,
            ),
            (
                ServingStatus::ServiceUnknown as i32,
                r#"service unhealthy (responded with "SERVICE_UNKNOWN")"#,
            ),
            (7, r#"service unhealthy (responded with "7")"#),
        ];
        for (status, want) in cases {
            assert_eq!(
                output(Check::Answered(Answer::Responded(status))),
                (ProbeResult::Failure, want.to_owned())
            );
        }
    }

    #[test]
    fn g5_rpc_errors_read_like_grpc_go() {
        let cases = [
            (
                rpc_error(Code::Unimplemented, "unknown service grpc.health.v1.Health"),
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service grpc.health.v1.Health",
            ),
            (
                rpc_error(Code::DeadlineExceeded, "whatever"),
                "timeout: health rpc did not complete within 2s",
            ),
            (
                Check::TimedOut,
                "timeout: health rpc did not complete within 2s",
            ),
            (
                Check::Answered(Answer::NoMessage),
                "error: health rpc probe failed: EOF",
            ),
            (
                rpc_error(Code::NotFound, "unknown service"),
                "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service",
            ),
            (
                rpc_error(Code::Cancelled, "Timeout expired"),
                "error: health rpc probe failed: rpc error: code = Canceled desc = Timeout expired",
            ),
        ];
        for (check, want) in cases {
            assert_eq!(output(check), (ProbeResult::Failure, want.to_owned()));
        }
    }

    #[test]
    fn g6_connect_timeout_renders_go_duration() {
        let outcome = connect_timeout_outcome(":32", Duration::from_secs(1));
        assert_eq!(
            outcome.output,
            r#"timeout: failed to connect service ":32" within 1s: context deadline exceeded"#
        );
        let outcome = connect_timeout_outcome("[::1]:9", Duration::from_millis(500));
        assert_eq!(
            outcome.output,
            r#"timeout: failed to connect service "[::1]:9" within 500ms: context deadline exceeded"#
        );
    }

    #[test]
    fn backoff_follows_grpc_go() {
        assert_eq!(reconnect_backoff(0, 0.0), Duration::from_secs(1));
        assert_eq!(reconnect_backoff(0, 0.99), Duration::from_secs(1));
        let second = reconnect_backoff(1, 0.5).as_secs_f64();
        assert!((second - 1.6).abs() < 1e-9, "{second}");
        let low = reconnect_backoff(2, 0.0).as_secs_f64();
        assert!((low - 1.6 * 1.6 * 0.8).abs() < 1e-9, "{low}");
        let capped = reconnect_backoff(100, 0.5);
        assert_eq!(capped, Duration::from_secs(120));
    }

    #[test]
    fn preface_sniffer_accepts_settings_split_across_reads() {
        let settings = [
            0,
            0,
            6,
            FRAME_TYPE_SETTINGS,
            0,
            0,
            0,
            0,
            0,
            0,
            3,
            0,
            0,
            0,
            100,
        ];
        let mut sniffer = PrefaceSniffer::default();
        assert_eq!(sniffer.feed(&settings[..4]), None);
        assert_eq!(sniffer.feed(&settings[4..]), Some(true));
    }

    #[test]
    fn g7_preface_sniffer_rejects_http1_and_early_close() {
        assert_eq!(
            PrefaceSniffer::default().feed(b"HTTP/1.1 400 Bad Request\r\n"),
            Some(false)
        );
        let mut sniffer = PrefaceSniffer::default();
        assert_eq!(sniffer.feed(&[0, 0]), None);
        assert_eq!(sniffer.feed(&[]), Some(false));
        let headers_frame = [0, 0, 0, 0x1, 0x4, 0, 0, 0, 1];
        assert_eq!(PrefaceSniffer::default().feed(&headers_frame), Some(false));
    }
}
