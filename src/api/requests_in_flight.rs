//! How many requests a client has in flight at once.
//!
//! kube's client speaks HTTP/1.1 to the API server, so every request in
//! flight has a TLS connection of its own, and its pool keeps each one
//! idle for 90 s afterwards. The kubelet's client multiplexes its requests
//! over one HTTP/2 connection. Without a bound, a node's pods changing at
//! once (300 pods deleted: their status and marker patches, one task per
//! pod) opened a connection per request the rate limit let through: 137 of
//! them in the churn soak, each with its TLS and read buffers (about
//! 60 KiB), so how high the heap went in a wave depended on how slowly the
//! API server answered it (bench/RESULTS.md, #39 item 2).
//!
//! [`RequestsInFlightLayer`] holds every request but watches and Event
//! writes until one of [`MAX_API_REQUESTS_IN_FLIGHT`] slots is free, and
//! keeps the slot until the response body has been read to its end or
//! dropped, which is when hyper's pool may hand the connection to the next
//! request. Watches stay open for minutes and would hold a slot each;
//! Event writes are sent one at a time by the Event broadcaster, so they
//! need no slot and never wait behind status patches (rule 9.6).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::request_kinds::{is_event, is_watch};

/// Requests the API client has in flight at once, watches and Event writes
/// excepted: above what the rate limit lets through at an API server that
/// answers in 0.3 s (50 a second), far below what a node's pods changing at
/// once would open.
pub const MAX_API_REQUESTS_IN_FLIGHT: usize = 16;

/// The tower layer that bounds a client's requests in flight.
#[derive(Debug, Clone)]
pub struct RequestsInFlightLayer {
    slots: Arc<Semaphore>,
}

impl RequestsInFlightLayer {
    pub fn new(slots: usize) -> Self {
        RequestsInFlightLayer {
            slots: Arc::new(Semaphore::new(slots)),
        }
    }
}

impl<S> tower::Layer<S> for RequestsInFlightLayer {
    type Service = RequestsInFlight<S>;

    fn layer(&self, inner: S) -> RequestsInFlight<S> {
        RequestsInFlight {
            inner,
            slots: self.slots.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RequestsInFlight<S> {
    inner: S,
    slots: Arc<Semaphore>,
}

impl<S, R, B> tower::Service<Request<R>> for RequestsInFlight<S>
where
    S: tower::Service<Request<R>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<SlotBody<B>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    /// The wait is in the returned future: hyper's client connects and
    /// sends only when its future is first polled, so the request is held
    /// back without holding anyone else's `poll_ready`.
    fn call(&mut self, request: Request<R>) -> Self::Future {
        let slots =
            (!is_watch(request.uri()) && !is_event(request.uri())).then(|| self.slots.clone());
        let response = self.inner.call(request);
        Box::pin(async move {
            let slot = match slots {
                // The semaphore is never closed.
                Some(slots) => slots.acquire_owned().await.ok(),
                None => None,
            };
            let response = response.await?;
            Ok(response.map(|body| SlotBody { body, slot }))
        })
    }
}

/// A response body that gives its request's slot back once read to its
/// end (or dropped).
#[derive(Debug)]
pub struct SlotBody<B> {
    body: B,
    slot: Option<OwnedSemaphorePermit>,
}

impl<B> Body for SlotBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.slot = None;
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
    use futures::FutureExt;
    use http_body_util::{BodyExt, Full};
    use tower::{Layer, Service};

    type Answer = Result<Response<Full<Bytes>>, std::convert::Infallible>;

    /// A server that answers every request at once with a body of one
    /// frame.
    fn answering() -> impl tower::Service<
        Request<()>,
        Response = Response<Full<Bytes>>,
        Error = std::convert::Infallible,
        Future = std::future::Ready<Answer>,
    > + Clone {
        tower::service_fn(|_: Request<()>| {
            std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"{}")))))
        })
    }

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_6_a_slot_is_held_until_the_body_is_read_or_dropped() {
        let layer = RequestsInFlightLayer::new(2);
        let mut client = layer.layer(answering());
        let first = client.call(get("/api/v1/pods")).await.unwrap();
        let second = client.call(get("/api/v1/pods")).await.unwrap();
        assert_eq!(layer.slots.available_permits(), 0);

        // A third waits while both bodies are unread.
        let mut third = client.call(get("/api/v1/pods"));
        assert!((&mut third).now_or_never().is_none());

        // Read to its end, the first body gives its slot to the waiting
        // third while the body itself is still held by its reader.
        let mut first = first.into_body();
        assert!(first.frame().await.unwrap().is_ok());
        assert!(first.frame().await.is_none());
        let third = third
            .now_or_never()
            .expect("the third request still waits")
            .unwrap();
        assert_eq!(layer.slots.available_permits(), 0);
        // Dropped unread, the second and third free theirs.
        drop(second);
        assert_eq!(layer.slots.available_permits(), 1);
        drop(third);
        assert_eq!(layer.slots.available_permits(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_6_watches_and_event_writes_take_no_slot() {
        let layer = RequestsInFlightLayer::new(1);
        let mut client = layer.layer(answering());
        let _held = client.call(get("/api/v1/pods")).await.unwrap();
        let watch = "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true";
        let event = "/apis/events.k8s.io/v1/namespaces/a/events";
        for path in [watch, event] {
            let answer =
                tokio::time::timeout(std::time::Duration::from_secs(1), client.call(get(path)));
            assert!(answer.await.is_ok(), "{path} waited for a slot");
        }
        let other = client.call(get("/api/v1/namespaces/a/pods/p"));
        assert!(
            other.now_or_never().is_none(),
            "a read took a slot that was held"
        );
    }
}
