//! The HTTP endpoints of `podprobe run` (HTTP/1.1 and h2c), served on the
//! node's network to anyone who can reach it:
//!
//! - `/healthz`: 200 while the daemon's main loop beats ([`Health::beat`])
//!   at least once per `stale_after`; 503 otherwise. Open, for the
//!   DaemonSet's own liveness probe.
//! - `/readyz`: 200 while podprobe sees the node's pods and can act on
//!   them ([`Health::readiness`]); 503 with the reasons otherwise. Open.
//! - `/metrics`: the OpenMetrics text of [`Metrics`]; `/metrics/probes`:
//!   only the prober metrics, where the kubelet serves them. Guarded by
//!   [`MetricsAccess`]: by default a bearer token the API server authorises
//!   to `get` the path ([`delegated_auth`]), as the kubelet guards its own.
//!   An extra listener ([`ServerConfig::plain_metrics_listen`]) can serve
//!   them without authentication, for scrapers on the node.
//!
//! The probe status of pods (`kubectl podprobe`, PS2) is not served here but
//! through the Kubernetes API, on a listener of its own ([`status_api`]).
//!
//! Anything else is 404 (405 for a method other than GET or HEAD on a known
//! path, 413 for a request with a body). [`Server::serve`] stops accepting
//! when its shutdown future completes and lets open connections finish their
//! requests.
//!
//! No client can hold the server ([`Limits`]): request headers must arrive
//! within a timeout and fit a size limit, a connection with no request in
//! flight is closed after an idle timeout (from its first byte on: the
//! protocol detection of hyper-util's `auto` builder has no timeout of its
//! own), and open connections are capped, the connection idle the longest
//! making room for a new one ([`connections`] explains why).
//!
//! Nor can a flood of forged tokens for `/metrics`: the requests waiting on
//! a review of their token are bounded ([`delegated_auth`]: a few in flight,
//! a few queued per client address, shared fairly between addresses, the
//! rest answered 429 at once), a connection may have at
//! most [`MAX_REVIEWS_PER_CONNECTION`] of them, and a connection whose
//! requests all wait on reviews makes room for a new connection as an idle
//! one does, after the idle ones. So `/healthz` and `/readyz`, which wait on
//! nothing, keep being answered on the same port.

pub mod auth_metrics;
mod connections;
pub mod delegated_auth;
pub mod health;
pub mod metrics;
pub(crate) mod process_stats;
mod review_turns;
pub mod status_api;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::connections::{Admission, Busy, ConnectionTable, SentBytes, Slot};
pub use self::delegated_auth::DelegatedAuth;
use self::delegated_auth::{AccessDecision, Attributes, Review};

use self::auth_metrics::{AuthDecisions, AuthOutcome};
pub use self::health::Health;
use self::metrics::Metrics;

/// How long open connections may take to finish after shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle connection being closed may take to say goodbye (an h2
/// GOAWAY) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (e.g. out of file descriptors), so the
/// loop does not spin on an error that persists.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// Default of [`Limits::max_connections`] (`--max-connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// Most request header fields (HTTP/1.1).
const MAX_HEADERS: usize = 64;

/// Concurrent h2 streams per connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 16;

/// Requests of one connection that may wait on a review of their bearer
/// token at once; more are answered 429. A scraper sends one request at a
/// time; without this, one h2 connection could fill the whole review queue
/// with [`MAX_CONCURRENT_STREAMS`] forged tokens.
pub const MAX_REVIEWS_PER_CONNECTION: usize = 2;

/// `Retry-After` of a 429, in seconds: as the API server's max-in-flight
/// filter answers. A review takes about a round trip to the API server, so
/// turns free up within a second unless it is slow.
const RETRY_AFTER_SECONDS: &str = "1";

/// h2 flow-control windows: request bodies are never read, so a client
/// cannot make the server buffer more than this per stream and connection.
const H2_WINDOW: u32 = 65_535;

/// hyper's smallest HTTP/1 read buffer; a smaller one panics.
const MIN_HTTP1_BUFFER: usize = 8192;

/// Bounds on what one client can hold of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections per listener; at the cap a new connection evicts the
    /// one idle the longest, or is closed when every one is busy.
    pub max_connections: usize,
    /// A connection with no request in flight for this long is closed: one
    /// that has sent nothing, or only part of a request line (`PRI * HT`),
    /// one between keep-alive requests, an h2 connection without streams.
    pub idle_timeout: Duration,
    /// The request line and headers of an HTTP/1.1 request must arrive
    /// within this long (the slowloris timeout).
    pub header_read_timeout: Duration,
    /// Most bytes of a request's line and headers (HTTP/1.1; at least
    /// 8 KiB) or header list (h2); larger is answered 431.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    /// 64 connections, 10 s to send headers, 10 s idle, 16 KiB of headers
    /// (a service account token is about 1 KiB).
    fn default() -> Self {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// Who may read `/metrics` and `/metrics/probes` on the main listener.
#[derive(Debug, Clone)]
pub enum MetricsAccess {
    /// Anyone (`--metrics-auth=none`).
    Open,
    /// A bearer token the API server authorises (`--metrics-auth=delegated`).
    Delegated(DelegatedAuth),
}

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `/healthz`, `/readyz` and the guarded `/metrics`.
    pub listen: SocketAddr,
    /// Who may read the metrics on `listen`.
    pub metrics_access: MetricsAccess,
    /// Also serve `/metrics` and `/metrics/probes`, and nothing else,
    /// without authentication here.
    pub plain_metrics_listen: Option<SocketAddr>,
    pub limits: Limits,
}

impl ServerConfig {
    /// `listen` with `metrics_access`, default limits, no plain listener.
    pub fn new(listen: SocketAddr, metrics_access: MetricsAccess) -> Self {
        ServerConfig {
            listen,
            metrics_access,
            plain_metrics_listen: None,
            limits: Limits::default(),
        }
    }
}

/// A listener that cannot be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: io::Error,
}

/// What the request handler of one listener reads.
#[derive(Debug)]
struct Endpoints {
    metrics: Metrics,
    /// Counts what delegated authentication decided.
    auth_decisions: AuthDecisions,
    health: Health,
    access: MetricsAccess,
    /// Whether `/healthz` and `/readyz` are served here (not on the plain
    /// metrics listener).
    health_checks: bool,
}

#[derive(Debug)]
struct Listener {
    tcp: TcpListener,
    endpoints: Arc<Endpoints>,
}

/// The bound, not yet serving, HTTP server.
#[derive(Debug)]
pub struct Server {
    main: Listener,
    plain_metrics: Option<Listener>,
    limits: Limits,
}

impl Server {
    /// Binds `config.listen` and the plain metrics listener, if any (port 0
    /// picks a free port; see [`Server::local_addr`]); serves `metrics` and
    /// counts the decisions of delegated authentication in `auth_decisions`.
    pub async fn bind(
        config: ServerConfig,
        metrics: Metrics,
        auth_decisions: AuthDecisions,
        health: Health,
    ) -> Result<Self, BindError> {
        let bind = |addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| BindError { addr, source })
        };
        let main = Listener {
            tcp: bind(config.listen).await?,
            endpoints: Arc::new(Endpoints {
                metrics: metrics.clone(),
                auth_decisions: auth_decisions.clone(),
                health: health.clone(),
                access: config.metrics_access,
                health_checks: true,
            }),
        };
        let plain_metrics = match config.plain_metrics_listen {
            Some(addr) => Some(Listener {
                tcp: bind(addr).await?,
                endpoints: Arc::new(Endpoints {
                    metrics,
                    auth_decisions,
                    health,
                    access: MetricsAccess::Open,
                    health_checks: false,
                }),
            }),
            None => None,
        };
        Ok(Server {
            main,
            plain_metrics,
            limits: config.limits,
        })
    }

    /// The address actually bound for `/healthz`, `/readyz` and `/metrics`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.main.tcp.local_addr()
    }

    /// The address actually bound for plain `/metrics`, if asked for one.
    pub fn plain_metrics_addr(&self) -> Option<io::Result<SocketAddr>> {
        self.plain_metrics.as_ref().map(|l| l.tcp.local_addr())
    }

    /// Serves until `shutdown` completes, then stops accepting and waits up
    /// to a few seconds for open connections to finish their requests.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let builder = Arc::new(builder(&self.limits));
        if let Some(Ok(addr)) = self.plain_metrics_addr() {
            tracing::info!(%addr, "serving /metrics without authentication");
        }
        let listeners = std::iter::once(self.main).chain(self.plain_metrics);
        let serving = futures::future::join_all(listeners.map(|listener| {
            accept_loop(
                listener,
                self.limits.clone(),
                builder.clone(),
                stop_rx.clone(),
            )
        }));
        tokio::pin!(serving);
        tokio::select! {
            () = shutdown => {
                let _ = stop_tx.send(true);
                serving.await;
            }
            _ = &mut serving => {}
        }
    }
}

/// hyper's connection settings for `limits`.
fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper applies a header read timeout only when it has a timer.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(MIN_HTTP1_BUFFER))
        .max_headers(MAX_HEADERS);
    // No h2 keep-alive pings: a connection without streams is closed by the
    // idle timeout anyway, and one with a stream in flight is answering.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_stream_window_size(H2_WINDOW)
        .initial_connection_window_size(H2_WINDOW);
    builder
}

/// Accepts connections on one listener until `stop`, then drains them.
async fn accept_loop(
    listener: Listener,
    limits: Limits,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut stop: watch::Receiver<bool>,
) {
    let table = ConnectionTable::new(limits.max_connections);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            accepted = listener.tcp.accept() => match accepted {
                Ok((stream, peer)) => {
                    if let Some((stream, slot)) = admit(&table, stream, peer) {
                        connections.spawn(serve_connection(
                            stream,
                            peer.ip(),
                            listener.endpoints.clone(),
                            builder.clone(),
                            slot,
                            limits.idle_timeout,
                            stop.clone(),
                        ));
                    }
                }
                // Per-connection errors (e.g. the peer reset before
                // accept, or too many open files): keep serving.
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "closing connections still open after shutdown"
        );
    }
}

/// Admits a newly accepted connection into `table`, or closes it (by
/// dropping it) when every slot is busy.
fn admit(
    table: &ConnectionTable,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<(TcpStream, Slot)> {
    let sent_bytes = match sent_bytes(&stream) {
        Ok(sent_bytes) => sent_bytes,
        Err(error) => {
            tracing::debug!(%peer, %error, "cannot look at a new connection");
            return None;
        }
    };
    match table.admit(sent_bytes) {
        Admission::Admitted(slot) => Some((stream, slot)),
        // Debug level: a flood would flood the log too.
        Admission::Full => {
            tracing::debug!(
                %peer,
                "closing a new connection: every connection is busy answering a request"
            );
            None
        }
    }
}

/// Whether the peer has sent bytes the server has not read yet (see
/// [`connections`] for why that matters): a peek through a duplicate of the
/// socket's descriptor, outside the reactor, as tokio would answer from
/// readiness it may not have polled yet. Non-blocking, as the socket is.
fn sent_bytes(stream: &TcpStream) -> io::Result<SentBytes> {
    let socket = std::net::TcpStream::from(stream.as_fd().try_clone_to_owned()?);
    Ok(SentBytes::new(
        move || matches!(socket.peek(&mut [0u8; 1]), Ok(n) if n > 0),
    ))
}

/// Completes once the server stops (or is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn serve_connection(
    stream: TcpStream,
    peer: IpAddr,
    endpoints: Arc<Endpoints>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    slot: Slot,
    idle_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let slot = Arc::new(slot);
    // Whose reviews this connection's wait beside (review_turns).
    let source: Arc<str> = peer.to_string().into();
    let service = service_fn({
        let slot = slot.clone();
        move |request: Request<Incoming>| {
            // Busy from the request's headers until its response is ready:
            // neither evicted nor idle meanwhile, except while it reviews.
            let busy = slot.busy();
            let endpoints = endpoints.clone();
            let source = source.clone();
            async move {
                let response = respond(&endpoints, &request, &busy, &source).await;
                drop(busy);
                Ok::<_, Infallible>(response)
            }
        }
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut idle_check = Instant::now() + idle_timeout;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            () = stopped(&mut stop) => {
                connection.as_mut().graceful_shutdown();
                break connection.await;
            }
            () = slot.evicted() => {
                tracing::debug!("closing the connection idle the longest: connection cap reached");
                return;
            }
            () = tokio::time::sleep_until(idle_check) => match slot.idle_since() {
                Some(since) if since + idle_timeout <= Instant::now() => {
                    tracing::debug!(?idle_timeout, "closing an idle connection");
                    connection.as_mut().graceful_shutdown();
                    break tokio::time::timeout(CLOSE_GRACE, connection.as_mut())
                        .await
                        .unwrap_or(Ok(()));
                }
                Some(since) => idle_check = since + idle_timeout,
                None => idle_check = Instant::now() + idle_timeout,
            },
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "health/metrics connection ended with an error");
    }
}

async fn respond(
    endpoints: &Endpoints,
    request: &Request<Incoming>,
    busy: &Busy,
    source: &str,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let known = match path {
        "/healthz" | "/readyz" => endpoints.health_checks,
        "/metrics" | "/metrics/probes" => true,
        _ => false,
    };
    if !known {
        return text(StatusCode::NOT_FOUND, "not found\n".to_string());
    }
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".to_string());
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    // The body is never read: hyper reads at most a buffer of it (HTTP/1.1,
    // then closes the connection) or a flow-control window (h2).
    if !request.body().is_end_stream() {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "these endpoints take no request body\n".to_string(),
        );
    }
    match path {
        "/healthz" => check(endpoints.health.liveness()),
        "/readyz" => check(endpoints.health.readiness()),
        _ => {
            if let MetricsAccess::Delegated(auth) = &endpoints.access {
                // HEAD is `get` to the authorizer, as in the kubelet.
                let decision =
                    reviewed(busy, auth.authorize(request.headers(), path, "get", source)).await;
                endpoints.auth_decisions.count(outcome(&decision));
                let attributes = Attributes::NonResource {
                    path: path.to_string(),
                    verb: "get".to_string(),
                };
                if let Some(refusal) = refusal(decision, &attributes) {
                    return refusal;
                }
            }
            if path == "/metrics" {
                exposition(endpoints.metrics.encode())
            } else {
                exposition(endpoints.metrics.encode_probes())
            }
        }
    }
}

/// `decision`, counted as one of the connection's reviews even when the
/// cache answers (that takes no time, so only requests a review holds up
/// stay); throttled when the connection has its share of reviews already.
async fn reviewed(busy: &Busy, decision: impl Future<Output = AccessDecision>) -> AccessDecision {
    match busy.review(MAX_REVIEWS_PER_CONNECTION) {
        Some(reviewing) => {
            let decision = decision.await;
            drop(reviewing);
            decision
        }
        None => AccessDecision::Throttled,
    }
}

/// How `decision` is counted.
fn outcome(decision: &AccessDecision) -> AuthOutcome {
    match decision {
        AccessDecision::Allowed { .. } => AuthOutcome::Allowed,
        AccessDecision::Unauthenticated { .. } => AuthOutcome::Unauthenticated,
        AccessDecision::Forbidden { .. } => AuthOutcome::Forbidden,
        AccessDecision::Failed { .. } => AuthOutcome::Failed,
        AccessDecision::Throttled => AuthOutcome::Throttled,
    }
}

/// The answer to a request [`DelegatedAuth`] did not allow, as the
/// kubelet's: 401, 403, or 500 when the access review failed; 429 when it
/// could not be reviewed now. Logged at debug level only: anyone on the
/// network can make these.
fn refusal(decision: AccessDecision, attributes: &Attributes) -> Option<Response<Full<Bytes>>> {
    match decision {
        AccessDecision::Allowed { .. } => None,
        AccessDecision::Unauthenticated { reason } => {
            tracing::debug!(%attributes, reason, "unauthenticated request");
            Some(unauthorized())
        }
        AccessDecision::Forbidden { user, reason } => {
            tracing::debug!(%attributes, user, reason, "forbidden request");
            Some(text(
                StatusCode::FORBIDDEN,
                format!("Forbidden (user={user}, {attributes})\n"),
            ))
        }
        // Logged by `DelegatedAuth`.
        AccessDecision::Failed {
            review: Review::Token,
            ..
        } => Some(unauthorized()),
        AccessDecision::Failed {
            review: Review::Access,
            ..
        } => Some(text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Server Error: the access review failed\n".to_string(),
        )),
        AccessDecision::Throttled => {
            tracing::debug!(%attributes, "throttled request: too many reviews waiting");
            let mut response = text(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many requests, please try again later.\n".to_string(),
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
            Some(response)
        }
    }
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut response = text(StatusCode::UNAUTHORIZED, "Unauthorized\n".to_string());
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

fn exposition(text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(metrics::CONTENT_TYPE),
    );
    response
}

fn check(result: Result<(), String>) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => text(StatusCode::OK, "ok\n".to_string()),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
