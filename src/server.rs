//! The HTTP endpoints of `podprobe run` (HTTP/1.1 and h2c):
//!
//! - `/healthz`: 200 while the daemon's main loop beats ([`Health::beat`])
//!   at least once per `stale_after`; 503 otherwise.
//! - `/readyz`: 200 once the pod watch has synced and the container runtime
//!   is reachable or not needed; 503 with the reasons otherwise.
//! - `/metrics`: the OpenMetrics text of [`Metrics`]; `/metrics/probes`:
//!   only the prober metrics, where the kubelet serves them.
//!
//! Anything else is 404 (405 for a method other than GET or HEAD on a known
//! path). [`Server::serve`] stops accepting when its shutdown future
//! completes and lets open connections finish their requests.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::metrics::{self, Metrics};

/// How long open connections may take to finish after shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether podprobe can reach the container runtime it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CriState {
    /// No exec probes and no kills are possible without a runtime socket
    /// configured; readiness does not wait for one.
    NotNeeded,
    /// Configured but not (yet) answering; the text says why.
    Unreachable(String),
    /// Answered the last check.
    Reachable,
}

#[derive(Debug)]
struct HealthState {
    last_beat: Instant,
    pods_synced: bool,
    cri: CriState,
}

/// Liveness and readiness of the daemon, set by the daemon and read by the
/// server. Cheap to clone; all clones share one state.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<Mutex<HealthState>>,
    stale_after: Duration,
}

impl Health {
    /// Alive until `stale_after` passes without a [`Health::beat`]; not
    /// ready until the pod watch has synced and the runtime is reachable
    /// (starts `Unreachable("not checked yet")`).
    pub fn new(stale_after: Duration) -> Self {
        Health {
            state: Arc::new(Mutex::new(HealthState {
                last_beat: Instant::now(),
                pods_synced: false,
                cri: CriState::Unreachable("not checked yet".to_string()),
            })),
            stale_after,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HealthState> {
        // The state stays consistent whatever a panicking holder did: every
        // write is a single field assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The main loop is alive; call at least once per `stale_after`.
    pub fn beat(&self) {
        self.lock().last_beat = Instant::now();
    }

    /// Whether the pod watch has listed the node's pods (and still watches).
    pub fn set_pods_synced(&self, synced: bool) {
        self.lock().pods_synced = synced;
    }

    /// Records the result of the daemon's latest runtime check.
    pub fn set_cri(&self, cri: CriState) {
        self.lock().cri = cri;
    }

    /// `Ok` if alive, else why not.
    pub fn liveness(&self) -> Result<(), String> {
        let since = self.lock().last_beat.elapsed();
        if since <= self.stale_after {
            Ok(())
        } else {
            Err(format!(
                "main loop has not run for {:.1}s (limit {:.1}s)",
                since.as_secs_f64(),
                self.stale_after.as_secs_f64()
            ))
        }
    }

    /// `Ok` if ready, else every reason why not.
    pub fn readiness(&self) -> Result<(), String> {
        let state = self.lock();
        let mut reasons = Vec::new();
        if !state.pods_synced {
            reasons.push("pod watch has not synced".to_string());
        }
        if let CriState::Unreachable(why) = &state.cri {
            reasons.push(format!("container runtime unreachable: {why}"));
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    }
}

/// What the request handler reads.
#[derive(Debug, Clone)]
struct Endpoints {
    metrics: Metrics,
    health: Health,
}

/// The bound, not yet serving, HTTP server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    endpoints: Endpoints,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port; see [`Server::local_addr`]).
    pub async fn bind(addr: SocketAddr, metrics: Metrics, health: Health) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Server {
            listener,
            endpoints: Endpoints { metrics, health },
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then stops accepting and waits up
    /// to a few seconds for open connections to finish their requests.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let endpoints = self.endpoints.clone();
                        connections.spawn(serve_connection(stream, endpoints, stop_rx.clone()));
                    }
                    // Per-connection errors (e.g. the peer reset before
                    // accept, or too many open files): keep serving.
                    Err(error) => tracing::warn!(%error, "cannot accept a connection"),
                },
                // Reap finished connections so the set does not grow.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(self.listener);
        let _ = stop_tx.send(true);
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
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    endpoints: Endpoints,
    mut stop: watch::Receiver<bool>,
) {
    let service = service_fn(move |request| {
        let response = respond(&endpoints, &request);
        async move { Ok::<_, Infallible>(response) }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let stopping = async move {
        // An error means the server is gone: stop as well.
        let _ = stop.wait_for(|stop| *stop).await;
    };
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stopping => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "health/metrics connection ended with an error");
    }
}

fn respond(endpoints: &Endpoints, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if !matches!(
        path,
        "/healthz" | "/readyz" | "/metrics" | "/metrics/probes"
    ) {
        return text(StatusCode::NOT_FOUND, "not found\n".to_string());
    }
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".to_string());
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/healthz" => check(endpoints.health.liveness()),
        "/readyz" => check(endpoints.health.readiness()),
        "/metrics" => exposition(endpoints.metrics.encode()),
        _ => exposition(endpoints.metrics.encode_probes()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn healthz_goes_stale_without_beats() {
        let health = Health::new(Duration::from_secs(30));
        assert_eq!(health.liveness(), Ok(()));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(
            health.liveness(),
            Err("main loop has not run for 31.0s (limit 30.0s)".to_string())
        );
        health.beat();
        assert_eq!(health.liveness(), Ok(()));
    }

    #[test]
    fn readyz_lists_every_reason() {
        let health = Health::new(Duration::from_secs(30));
        assert_eq!(
            health.readiness(),
            Err("pod watch has not synced; container runtime unreachable: not checked yet".into())
        );
        health.set_pods_synced(true);
        health.set_cri(CriState::Reachable);
        assert_eq!(health.readiness(), Ok(()));
        health.set_cri(CriState::NotNeeded);
        assert_eq!(health.readiness(), Ok(()));
    }
}
