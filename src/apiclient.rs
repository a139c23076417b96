//! podprobe's Kubernetes API client: how it is built, how long a request
//! may take, and what the pod watch's responses say about its health.
//!
//! kube's client sets no response timeout (watches must stay open), so
//! without one a single hung connection would hold a pod's status patches,
//! or every Event, for good. Every request that is not the watch goes
//! through [`bounded`]; its caller retries with backoff. The watch has
//! kube-runtime's idle timeout instead, and [`WatchActivity`] tells
//! `/readyz` and the metrics when it last heard from the API server.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
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
/// to `activity`.
pub fn build(
    config: kube::Config,
    activity: Arc<WatchActivity>,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(&TrackWatchesLayer(activity)).build())
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
}
