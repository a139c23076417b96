//! podprobe's Kubernetes API client: how it is built, how long a request
//! may take, and what the pod watch's responses say about its health.
//!
//! kube's client sets no response timeout (watches must stay open), so
//! without one a single hung connection would hold a pod's status patches,
//! or every Event, for good. Every request that is not the watch goes
//! through [`bounded`]; its caller retries with backoff. The watch has
//! kube-runtime's idle timeout instead, and [`WatchActivity`] tells
//! `/readyz` and the metrics when it last heard from the API server.
//!
//! Like the kubelet's clients, podprobe's sends at most a [`RateLimit`] of
//! requests (the kubelet's `kubeAPIQPS` 50 and `kubeAPIBurst` 100 by
//! default), so no burst of work, however large, floods the API server.
//! Event writes are left out of that limit: they have their own
//! (`events::DEFAULT_EVENT_QPS`), as the kubelet sends Events through a
//! client of their own, so a flood of Events never holds a status patch.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response, Uri};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::util::rate_limit::{RateLimit, TokenBucket};
use crate::util::watch_activity::WatchActivity;

/// How long one API request (a status patch, a read, an Event, a review)
/// may take before it counts as failed and is retried. An answer takes
/// milliseconds from a healthy API server; the API server's own limit for a
/// request is 60 s, by which time the pod's status would be a minute stale.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests a second podprobe's client sends on average, Event writes left
/// out (the kubelet's `kubeAPIQPS`).
pub const DEFAULT_API_QPS: f64 = 50.0;

/// Requests podprobe's client may send at once above [`DEFAULT_API_QPS`]
/// (the kubelet's `kubeAPIBurst`).
pub const DEFAULT_API_BURST: u32 = 100;

/// A request that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
}

/// Runs `request` for at most [`REQUEST_TIMEOUT`].
pub async fn bounded<T>(
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, RequestError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(RequestError::Timeout(REQUEST_TIMEOUT)),
    }
}

/// Builds the client of `config`, with the pod watch's responses reported
/// to `activity` and every request but Event writes held to `limit` (the
/// kubelet's default: [`DEFAULT_API_QPS`], [`DEFAULT_API_BURST`]).
pub fn build(
    config: kube::Config,
    activity: Arc<WatchActivity>,
    limit: RateLimit,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&TrackWatchesLayer(activity))
        .with_layer(&LimitRequestsLayer::new(limit))
        .build())
}

/// Whether `uri` is a watch request (`?watch=true`, as kube sends it).
fn is_watch(uri: &Uri) -> bool {
    uri.query()
        .is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"))
}

/// Whether `uri` is an Event request (podprobe writes `events.k8s.io`
/// Events only), which has a limit of its own.
fn is_event(uri: &Uri) -> bool {
    uri.path().starts_with("/apis/events.k8s.io/")
}

/// The tower layer that holds requests, Event writes excepted, to a
/// [`RateLimit`] shared by every clone of the client.
#[derive(Debug, Clone)]
struct LimitRequestsLayer(Option<Arc<Mutex<TokenBucket>>>);

impl LimitRequestsLayer {
    fn new(limit: RateLimit) -> Self {
        LimitRequestsLayer(
            limit
                .bucket(Instant::now())
                .map(|b| Arc::new(Mutex::new(b))),
        )
    }
}

impl<S> tower::Layer<S> for LimitRequestsLayer {
    type Service = LimitRequests<S>;

    fn layer(&self, inner: S) -> LimitRequests<S> {
        LimitRequests {
            inner,
            bucket: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct LimitRequests<S> {
    inner: S,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

fn lock_bucket(bucket: &Mutex<TokenBucket>) -> MutexGuard<'_, TokenBucket> {
    bucket.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S, R> tower::Service<Request<R>> for LimitRequests<S>
where
    S: tower::Service<Request<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    /// The wait is in the returned future, not in `poll_ready`: kube puts
    /// one buffer in front of the client, so a wait there would hold Event
    /// writes behind other requests. Waiting before the inner future is
    /// first polled holds the request itself back, since hyper's client
    /// connects and sends only when its future is polled.
    fn call(&mut self, request: Request<R>) -> Self::Future {
        let wait = match &self.bucket {
            Some(bucket) if !is_event(request.uri()) => lock_bucket(bucket).reserve(Instant::now()),
            _ => Duration::ZERO,
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            response.await
        })
    }
}

/// The tower layer that reports watch responses to a [`WatchActivity`].
#[derive(Debug, Clone)]
struct TrackWatchesLayer(Arc<WatchActivity>);

impl<S> tower::Layer<S> for TrackWatchesLayer {
    type Service = TrackWatches<S>;

    fn layer(&self, inner: S) -> TrackWatches<S> {
        TrackWatches {
            inner,
            activity: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct TrackWatches<S> {
    inner: S,
    activity: Arc<WatchActivity>,
}

impl<S, B> tower::Service<Request<kube::client::Body>> for TrackWatches<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Display,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let activity = is_watch(request.uri()).then(|| self.activity.clone());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            if let Some(activity) = &activity {
                match &response {
                    Ok(ok) if ok.status().is_success() => activity.received(),
                    Ok(other) => activity.failed(format!("watch answered {}", other.status())),
                    Err(error) => activity.failed(error),
                }
            }
            response.map(|ok| ok.map(|body| TrackedBody { body, activity }))
        })
    }
}

/// A response body that reports its frames (watch responses only).
#[derive(Debug)]
struct TrackedBody<B> {
    body: B,
    activity: Option<Arc<WatchActivity>>,
}

impl<B> Body for TrackedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Display,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let (Poll::Ready(Some(frame)), Some(activity)) = (&polled, &self.activity) {
            match frame {
                Ok(_) => activity.received(),
                Err(error) => activity.failed(error),
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watch_requests_are_tracked() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert!(is_watch(&uri(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true&timeoutSeconds=60"
        )));
        assert!(!is_watch(&uri(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn"
        )));
        assert!(!is_watch(&uri("/api/v1/pods?labelSelector=watch%3Dtrue")));
        assert!(!is_watch(&uri("/version")));
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_requests_time_out() {
        let hung = bounded(std::future::pending::<Result<(), kube::Error>>());
        let error = hung.await.unwrap_err();
        assert!(
            matches!(error, RequestError::Timeout(REQUEST_TIMEOUT)),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_6_requests_keep_to_the_client_rate_but_event_writes_do_not() {
        use tower::{Layer, Service};

        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        // Logs when each request is sent, which is when its future runs.
        let server = tower::service_fn(move |request: Request<()>| {
            let log = log.clone();
            async move {
                log.lock()
                    .unwrap()
                    .push((request.uri().path().to_string(), start.elapsed()));
                Ok::<_, std::convert::Infallible>(())
            }
        });
        let mut client = LimitRequestsLayer::new(RateLimit::new(2.0, 3)).layer(server);
        let request = |path: &str| Request::get(path).body(()).unwrap();
        let mut pending = Vec::new();
        for _ in 0..5 {
            pending.push(client.call(request("/api/v1/pods")));
        }
        pending.push(client.call(request("/apis/events.k8s.io/v1/namespaces/a/events")));
        futures::future::join_all(pending).await;

        let ms = Duration::from_millis;
        let pods = |at| ("/api/v1/pods".to_string(), at);
        let event = (
            "/apis/events.k8s.io/v1/namespaces/a/events".to_string(),
            ms(0),
        );
        assert_eq!(
            *sent.lock().unwrap(),
            [
                pods(ms(0)),
                pods(ms(0)),
                pods(ms(0)),
                event,
                pods(ms(500)),
                pods(ms(1000))
            ]
        );
    }
}
