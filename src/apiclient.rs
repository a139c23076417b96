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

/// A client-side request rate: `qps` requests a second on average and up
/// to `burst` at once, as client-go's token bucket (`flowcontrol`) has it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Requests a second; zero, a negative or a non-finite number means no
    /// limit, as the kubelet's `eventRecordQPS: 0` does.
    pub qps: f64,
    /// Requests allowed at once; at least one is, whatever it says, so a
    /// limit never stops requests altogether.
    pub burst: u32,
}

impl RateLimit {
    pub const fn new(qps: f64, burst: u32) -> Self {
        RateLimit { qps, burst }
    }

    /// A full bucket of this limit at `now`; `None` if it limits nothing.
    pub fn bucket(self, now: Instant) -> Option<TokenBucket> {
        if !(self.qps.is_finite() && self.qps > 0.0) {
            return None;
        }
        // `try_from_secs_f64` fails only for rates so low that one token
        // would take longer than `Duration::MAX`: no refill then.
        let per_token = Duration::try_from_secs_f64(1.0 / self.qps).unwrap_or(Duration::MAX);
        Some(TokenBucket::new(self.burst, per_token, now))
    }
}

/// A token bucket: `burst` tokens, one more every `per_token` up to
/// `burst`, full at the start (client-go's `NewTokenBucketRateLimiter`).
///
/// Time is passed in, never read, so the bucket is plain data that tests
/// drive with any clock; tokens are counted in whole numbers and time in
/// nanoseconds, so a refill every 300 s gives a token at exactly 300 s.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    burst: i64,
    per_token: Duration,
    /// Tokens in the bucket; negative when [`TokenBucket::reserve`] lent
    /// tokens ahead of their refill.
    tokens: i64,
    /// Since when the next token has been filling.
    since: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least one) at `now`.
    pub fn new(burst: u32, per_token: Duration, now: Instant) -> Self {
        let burst = i64::from(burst.max(1));
        TokenBucket {
            burst,
            per_token,
            tokens: burst,
            since: now,
        }
    }

    /// Adds the tokens that filled up to `now`.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        let per_token = self.per_token.as_nanos().max(1);
        let filled = i64::try_from(elapsed.as_nanos() / per_token).unwrap_or(i64::MAX);
        if self.tokens.saturating_add(filled) >= self.burst {
            self.tokens = self.burst;
            self.since = now;
        } else {
            self.tokens += filled;
            // `filled` tokens of `per_token` fit in `elapsed`, so this
            // stays at or before `now`.
            self.since += self.per_token * u32::try_from(filled).unwrap_or(u32::MAX);
        }
    }

    /// Takes a token if there is one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }

    /// Takes a token now or ahead of its refill, and says how long to wait
    /// before using it (zero if it was there): callers that wait in turn
    /// go out at the bucket's rate, in the order they reserved.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1;
        if self.tokens >= 0 {
            return Duration::ZERO;
        }
        // The token lent is the `-tokens`-th to fill from `since`.
        let owed = u32::try_from(-self.tokens).unwrap_or(u32::MAX);
        (self.since + self.per_token.saturating_mul(owed)).saturating_duration_since(now)
    }
}

/// When the pod watch last received something from the API server (a
/// watch's response, an event, a bookmark) and whether it failed since.
#[derive(Debug)]
pub struct WatchActivity {
    state: Mutex<ActivityState>,
}

#[derive(Debug)]
struct ActivityState {
    /// The last receipt, or when tracking started.
    received: Instant,
    /// A failure after the last receipt, and why.
    failure: Option<String>,
}

impl WatchActivity {
    /// Tracking from now on, with nothing received yet.
    pub fn new() -> Arc<WatchActivity> {
        Arc::new(WatchActivity {
            state: Mutex::new(ActivityState {
                received: Instant::now(),
                failure: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch response or part of one arrived.
    pub fn received(&self) {
        let mut state = self.lock();
        state.received = Instant::now();
        state.failure = None;
    }

    /// A watch request or its stream failed.
    pub fn failed(&self, why: impl Display) {
        self.lock().failure = Some(why.to_string());
    }

    /// How long since the watch last received anything (or since tracking
    /// started).
    pub fn idle(&self) -> Duration {
        self.lock().received.elapsed()
    }

    /// `Ok` while the watch works: no failure since it last received, and
    /// it received within `silence_bound`; else why not.
    pub fn health(&self, silence_bound: Duration) -> Result<(), String> {
        let state = self.lock();
        if let Some(why) = &state.failure {
            return Err(format!("pod watch failing: {why}"));
        }
        let idle = state.received.elapsed();
        if idle > silence_bound {
            return Err(format!(
                "pod watch silent for {:.0}s (limit {:.0}s)",
                idle.as_secs_f64(),
                silence_bound.as_secs_f64()
            ));
        }
        Ok(())
    }
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
    async fn a_failure_counts_until_the_watch_receives_again() {
        let activity = WatchActivity::new();
        let bound = Duration::from_secs(90);
        assert_eq!(activity.health(bound), Ok(()));
        activity.failed("connection refused");
        assert_eq!(
            activity.health(bound),
            Err("pod watch failing: connection refused".into())
        );
        activity.received();
        assert_eq!(activity.health(bound), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_watch_turns_unhealthy_after_the_bound() {
        let activity = WatchActivity::new();
        let bound = Duration::from_secs(90);
        tokio::time::advance(Duration::from_secs(89)).await;
        assert_eq!(activity.health(bound), Ok(()));
        activity.received();
        tokio::time::advance(Duration::from_secs(91)).await;
        assert_eq!(
            activity.health(bound),
            Err("pod watch silent for 91s (limit 90s)".into())
        );
        assert_eq!(activity.idle(), Duration::from_secs(91));
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

    #[test]
    fn rule9_6_token_bucket_bursts_then_refills_at_its_rate() {
        let start = Instant::now();
        let every = Duration::from_secs(300);
        let mut bucket = TokenBucket::new(25, every, start);
        assert!((0..25).all(|_| bucket.try_take(start)));
        assert!(!bucket.try_take(start));
        assert!(!bucket.try_take(start + every - Duration::from_nanos(1)));
        assert!(bucket.try_take(start + every));
        assert!(!bucket.try_take(start + every));
        // Idle for long, it holds its burst and no more.
        let later = start + every * 1000;
        assert!((0..25).all(|_| bucket.try_take(later)));
        assert!(!bucket.try_take(later));
    }

    #[test]
    fn rule9_6_reservations_go_out_at_the_rate_in_turn() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2, Duration::from_millis(500), start);
        let waits: Vec<_> = (0..4).map(|_| bucket.reserve(start)).collect();
        let ms = Duration::from_millis;
        assert_eq!(waits, [ms(0), ms(0), ms(500), ms(1000)]);
        assert_eq!(bucket.reserve(start + ms(250)), ms(1250));
        // Tokens lent ahead are not there to take.
        assert!(!bucket.try_take(start + ms(1500)));
        assert!(bucket.try_take(start + ms(2000)));
    }

    #[test]
    fn rule9_6_a_rate_of_zero_limits_nothing() {
        let now = Instant::now();
        assert!(RateLimit::new(0.0, 10).bucket(now).is_none());
        assert!(RateLimit::new(f64::NAN, 10).bucket(now).is_none());
        let mut fifty = RateLimit::new(50.0, 0).bucket(now).expect("a limit");
        // A burst of zero still lets one through.
        assert_eq!(fifty.reserve(now), Duration::ZERO);
        assert_eq!(fifty.reserve(now), Duration::from_millis(20));
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
