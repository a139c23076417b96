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
//! The `TokenReview`s and `SubjectAccessReview`s of `/metrics` and probe
//! status callers go through a second client ([`Clients::reviews`]) with a
//! limit of its own ([`DEFAULT_REVIEW_QPS`]): anyone who reaches the port
//! can make reviews, one per forged token, and in a shared bucket those
//! would hold the status patches back. (The kubelet reviews through its
//! main client; its reviews wait in the same bucket as its status updates.)
//! The workload guards' reads and Lease writes (#41) go through a third
//! ([`Clients::guards`], [`DEFAULT_GUARD_QPS`]): a tenant decides how many
//! of its budgeted or floored pods fail at once.

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

use podprobe_core::util::rate_limit::{RateLimit, TokenBucket};
use podprobe_core::util::watch_activity::WatchActivity;

use crate::api::api_connection;

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

/// Reviews a second podprobe's review client sends on average. A scraper
/// needs two reviews per token and path every two minutes (the review
/// caches' `AUTHORIZED_TTL`) and a `kubectl podprobe status` one or two, so
/// this is far above what real callers ask; it bounds what a flood of
/// forged tokens makes each node send the API server, below
/// [`DEFAULT_API_QPS`] because every node may be flooded at once. At most
/// 8 reviews are in flight (`delegated_auth::MAX_REVIEWS_IN_FLIGHT`), the
/// rest wait for a turn before they reach this bucket, so a review waits
/// here at most 0.4 s, well within the 10 s it may take.
pub const DEFAULT_REVIEW_QPS: f64 = 20.0;

/// Reviews the review client may send at once above
/// [`DEFAULT_REVIEW_QPS`]: a restarted podprobe's scrapers, both metrics
/// paths, two reviews each, are answered without waiting.
pub const DEFAULT_REVIEW_BURST: u32 = 40;

/// Requests a second the workload guards' client sends on average: a
/// restart-budget or readiness-floor decision takes one to three (the
/// workload's pods, shared for a second; its Lease; a write when something
/// is taken), and a waiting one is made again every 5 s, so this keeps
/// about 20 deferred restarts or held gates on a node decided on time; more
/// wait here, and one that waits past its 10 s is the kubelet's
/// (`guard_decisions::DECISION_TIMEOUT`). It bounds what a tenant's failing
/// pods make a node send, apart from the status patches' bucket.
pub const DEFAULT_GUARD_QPS: f64 = 10.0;

/// Requests the workload guards' client may send at once above
/// [`DEFAULT_GUARD_QPS`].
pub const DEFAULT_GUARD_BURST: u32 = 20;

/// podprobe's clients of one API server, each with a request limit of its
/// own.
#[derive(Clone)]
pub struct Clients {
    /// Everything but reviews and the guards: the pod watch, status and
    /// marker patches, reads, Events (whose writes have their own limit).
    pub api: kube::Client,
    /// `TokenReview`s and `SubjectAccessReview`s only.
    pub reviews: kube::Client,
    /// The workload guards' reads and Lease writes only.
    pub guards: kube::Client,
}

/// The request limit of each of [`Clients`].
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    pub api: RateLimit,
    pub reviews: RateLimit,
    pub guards: RateLimit,
}

/// Which of [`Clients`] a request went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientName {
    Api,
    Reviews,
    Guards,
}

impl ClientName {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientName::Api => "api",
            ClientName::Reviews => "reviews",
            ClientName::Guards => "guards",
        }
    }
}

/// Told about every request a client's [`RateLimit`] holds (Event writes
/// have a limit of their own, elsewhere).
pub trait RequestObserver: Send + Sync {
    /// How long it waited for its turn, zero for most: client-go's
    /// `rest_client_rate_limiter_duration_seconds`, which shows whether
    /// status patches ever wait behind other requests.
    fn waited(&self, client: ClientName, wait: Duration);

    /// How long the API server took to answer it once sent (or to fail):
    /// client-go's `rest_client_request_duration_seconds`. Watches are left
    /// out; their answers last minutes.
    fn answered(&self, client: ClientName, took: Duration);
}

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

/// Builds the clients of `config`: [`Clients::api`] with the pod watch's
/// responses reported to `activity` and every request but Event writes
/// held to `limits.api` (the kubelet's default: [`DEFAULT_API_QPS`],
/// [`DEFAULT_API_BURST`]), [`Clients::reviews`] held to `limits.reviews`
/// ([`DEFAULT_REVIEW_QPS`], [`DEFAULT_REVIEW_BURST`]), [`Clients::guards`]
/// to `limits.guards` ([`DEFAULT_GUARD_QPS`], [`DEFAULT_GUARD_BURST`]),
/// each request's wait told to `observer`. Each has its own HTTP/2
/// connection ([`api_connection`]), so none waits for another's either.
pub fn build(
    config: kube::Config,
    activity: Arc<WatchActivity>,
    limits: ClientLimits,
    observer: Arc<dyn RequestObserver>,
) -> Result<Clients, kube::Error> {
    let limited = |limit, name| LimitRequestsLayer::new(limit, name, observer.clone());
    let api = api_connection::client_builder(config.clone())?
        .with_layer(&TrackWatchesLayer(activity))
        .with_layer(&limited(limits.api, ClientName::Api))
        .build();
    let reviews = api_connection::client_builder(config.clone())?
        .with_layer(&limited(limits.reviews, ClientName::Reviews))
        .build();
    let guards = api_connection::client_builder(config)?
        .with_layer(&limited(limits.guards, ClientName::Guards))
        .build();
    Ok(Clients {
        api,
        reviews,
        guards,
    })
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
/// [`RateLimit`] shared by every clone of the client, and tells a
/// [`RequestObserver`] how long each waited and took.
#[derive(Clone)]
struct LimitRequestsLayer {
    bucket: Option<Arc<Mutex<TokenBucket>>>,
    client: ClientName,
    observer: Arc<dyn RequestObserver>,
}

impl LimitRequestsLayer {
    fn new(limit: RateLimit, client: ClientName, observer: Arc<dyn RequestObserver>) -> Self {
        LimitRequestsLayer {
            bucket: limit
                .bucket(Instant::now())
                .map(|b| Arc::new(Mutex::new(b))),
            client,
            observer,
        }
    }
}

impl<S> tower::Layer<S> for LimitRequestsLayer {
    type Service = LimitRequests<S>;

    fn layer(&self, inner: S) -> LimitRequests<S> {
        LimitRequests {
            inner,
            limit: self.clone(),
        }
    }
}

#[derive(Clone)]
struct LimitRequests<S> {
    inner: S,
    limit: LimitRequestsLayer,
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
        let limit = &self.limit;
        let Some(bucket) = limit.bucket.as_ref().filter(|_| !is_event(request.uri())) else {
            return Box::pin(self.inner.call(request));
        };
        let wait = lock_bucket(bucket).reserve(Instant::now());
        limit.observer.waited(limit.client, wait);
        let timed = !is_watch(request.uri());
        let (observer, client) = (limit.observer.clone(), limit.client);
        let response = self.inner.call(request);
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let sent = Instant::now();
            let response = response.await;
            if timed {
                observer.answered(client, sent.elapsed());
            }
            response
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

    /// Logs each wait, and how many requests were answered.
    #[derive(Default)]
    struct Recorder {
        waits: Mutex<Vec<(ClientName, Duration)>>,
        answered: Mutex<Vec<ClientName>>,
    }

    impl RequestObserver for Recorder {
        fn waited(&self, client: ClientName, wait: Duration) {
            self.waits.lock().unwrap().push((client, wait));
        }

        fn answered(&self, client: ClientName, _: Duration) {
            self.answered.lock().unwrap().push(client);
        }
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

    /// #37: reviews wait in a bucket of their own, and (#41) so do the
    /// workload guards' requests. The clients as [`build`] makes them,
    /// against a server on 127.0.0.1 logging what it is sent; in real time,
    /// since a paused clock would skip the bucket's wait whenever the
    /// sockets are idle.
    #[tokio::test]
    async fn rule9_6_reviews_and_guards_wait_in_buckets_of_their_own() {
        const PATCH: &str = "/api/v1/namespaces/a/pods/p/status";
        const REVIEW: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
        const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/a/leases/podprobe-guard-u";
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                let answer = hyper::service::service_fn(move |request: Request<_>| {
                    log.lock().unwrap().push(request.uri().path().to_string());
                    let body = http_body_util::Full::new(Bytes::from_static(b"{}"));
                    async move { Ok::<_, std::convert::Infallible>(Response::new(body)) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), answer);
                tokio::spawn(connection);
            }
        });
        // One request at once, the next 1,000 s later.
        let one = RateLimit::new(0.001, 1);
        let limits = ClientLimits {
            api: one,
            reviews: one,
            guards: one,
        };
        let config = kube::Config::new(url.parse().unwrap());
        let recorder = Arc::new(Recorder::default());
        let clients = build(config, WatchActivity::new(), limits, recorder.clone()).unwrap();
        let post = |path: &str| {
            Request::post(path)
                .body(kube::client::Body::empty())
                .unwrap()
        };

        let mut waiting = Vec::new();
        for (client, path) in [(&clients.reviews, REVIEW), (&clients.guards, LEASE)] {
            client.send(post(path)).await.unwrap();
            let client = client.clone();
            waiting.push(tokio::spawn(async move { client.send(post(path)).await }));
        }
        let patched = tokio::time::timeout(Duration::from_secs(5), clients.api.send(post(PATCH)));
        assert!(
            patched.await.is_ok_and(|sent| sent.is_ok()),
            "the status patch waited behind the reviews or the guards"
        );
        assert_eq!(*sent.lock().unwrap(), [REVIEW, LEASE, PATCH]);
        assert!(
            waiting.iter().all(|w| !w.is_finished()),
            "the second review and lease request wait their turns"
        );
        waiting.iter().for_each(tokio::task::JoinHandle::abort);
        // Each request's wait is told, under its own client's name.
        let mut waits = recorder.waits.lock().unwrap().clone();
        waits.sort();
        let (api, reviews, guards) = (ClientName::Api, ClientName::Reviews, ClientName::Guards);
        assert_eq!(waits.len(), 5, "{waits:?}");
        assert_eq!(waits[0], (api, Duration::ZERO));
        for (i, name) in [(1, reviews), (3, guards)] {
            assert_eq!(waits[i], (name, Duration::ZERO), "{waits:?}");
            assert!(
                waits[i + 1].0 == name && waits[i + 1].1 > Duration::from_secs(990),
                "{waits:?}"
            );
        }
        // The three requests answered, the two waiting not yet.
        let mut answered = recorder.answered.lock().unwrap().clone();
        answered.sort();
        assert_eq!(answered, [api, reviews, guards]);
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
        let recorder = Arc::new(Recorder::default());
        let mut client =
            LimitRequestsLayer::new(RateLimit::new(2.0, 3), ClientName::Api, recorder.clone())
                .layer(server);
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
        // Every limited request's wait is told; the Event's is not.
        let api = |wait| (ClientName::Api, ms(wait));
        assert_eq!(
            *recorder.waits.lock().unwrap(),
            [api(0), api(0), api(0), api(500), api(1000)]
        );
    }
}
