//! The connection a client keeps to the API server: HTTP/2, as client-go's.
//!
//! kube's own client offers TLS with HTTP/1.1 only, and HTTP/1.1 carries one
//! request at a time, so its pool opens a TLS connection for every request
//! in flight and keeps each idle for 90 s. A node's pods changing at once
//! (300 pods deleted: a status and a marker patch each) made up to 403 of
//! them, some 70 KiB each: how high podprobe's heap went in such a wave
//! depended on how slowly the API server answered (bench/RESULTS.md, #39).
//! The kubelet's client offers `h2` and sends everything, watches included,
//! as streams of one connection; so does this one, falling back to HTTP/1.1
//! only with an API server (or a proxy in front of it) that does not speak
//! HTTP/2 (rule 9.6). How many requests share the connection is then the
//! API server's to bound (its `--http2-max-streams-per-connection`, 1000 by
//! kube-apiserver's default), not ours.
//!
//! The stack around the connection is kube's, layer for layer (the base
//! URI, kube's retry of 429/503/504 when `default_retry` is set, the
//! credentials, the impersonation and extra headers), but for its tracing
//! spans and its read and write timeouts on the socket: an HTTP/2
//! connection is shared, so a dead one is found by PING instead, as
//! client-go does, and every request but the watch is bounded by
//! `apiclient::REQUEST_TIMEOUT` anyway. A kubeconfig with a `proxy-url`
//! keeps kube's own client (HTTP/1.1).

use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody, RustlsTlsError};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// client-go's HTTP/2 health check (`ReadIdleTimeout`): a PING when the
/// connection has been quiet this long...
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// ... and the connection closed, its requests failed, if the answer takes
/// longer than this (`PingTimeout`).
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client's stack, as kube boxes it.
pub type ApiService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// The builder of a client of `config` that speaks HTTP/2 to the API server
/// when it can (see the module's comment).
pub fn client_builder(config: kube::Config) -> Result<ClientBuilder<ApiService>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(config.connect_timeout);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|e| kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(e)))?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    // ALPN offers h2 first, then http/1.1.
    let connector = tls.enable_all_versions().wrap_connector(tcp);
    let connection = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(connection)
        .map_response(|response| {
            response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>)
        });
    Ok(ClientBuilder::new(
        BoxService::new(service),
        config.default_namespace,
    ))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use http::Version;
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;
    use tokio::sync::Barrier;

    use super::*;

    /// Requests sent at once; the server answers none before all arrived,
    /// so over HTTP/1.1 each would need a connection of its own.
    const AT_ONCE: usize = 20;

    /// What a TLS server on loopback saw: connections accepted, and each
    /// request's HTTP version.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        versions: Mutex<Vec<Version>>,
    }

    /// A TLS server offering `alpn` that answers `GET /version` at once and
    /// every other request `{}` once [`AT_ONCE`] of them have arrived; its
    /// URL, CA certificate and what it saw.
    async fn server(alpn: &[&[u8]]) -> (http::Uri, Vec<u8>, Arc<Seen>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
        let certificate = params.self_signed(&key).expect("certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![certificate.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("server config");
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("https://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Seen::default());
        let barrier = Arc::new(Barrier::new(AT_ONCE));
        let served = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.expect("accept");
                served.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, seen, barrier) = (acceptor.clone(), served.clone(), barrier.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let answer = service_fn(move |request: Request<Incoming>| {
                        let (seen, barrier) = (seen.clone(), barrier.clone());
                        async move {
                            seen.versions.lock().unwrap().push(request.version());
                            if request.uri().path() != "/version" {
                                barrier.wait().await;
                            }
                            Ok::<_, Infallible>(Response::new("{}".to_string()))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                });
            }
        });
        (url.parse().expect("url"), certificate.der().to_vec(), seen)
    }

    /// Sends one request, then [`AT_ONCE`] at once, through a client of
    /// [`client_builder`]; what the server saw. (The first makes the
    /// connection, as podprobe's first reads do: requests that all start
    /// before any connection exists each begin a TLS handshake of their
    /// own, and hyper-util drops all but one once ALPN has chosen h2.)
    async fn requests_at_once(alpn: &[&[u8]]) -> Arc<Seen> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (url, ca, seen) = server(alpn).await;
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![ca]);
        let client = client_builder(config).expect("client").build();
        let first = Request::get("/version").body(Vec::new()).expect("request");
        assert_eq!(client.request_text(first).await.expect("answered"), "{}");
        let requests = (0..AT_ONCE).map(|i| {
            let client = client.clone();
            async move {
                let request = Request::get(format!("/api/v1/namespaces/n{i}"))
                    .body(Vec::new())
                    .expect("request");
                client.request_text(request).await
            }
        });
        for answer in futures::future::join_all(requests).await {
            assert_eq!(answer.expect("answered"), "{}");
        }
        seen
    }

    #[tokio::test]
    async fn rule9_6_requests_in_flight_share_one_http2_connection() {
        let seen = requests_at_once(&[b"h2", b"http/1.1"]).await;
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
        let versions = seen.versions.lock().unwrap().clone();
        assert_eq!(versions, vec![Version::HTTP_2; AT_ONCE + 1]);
    }

    #[tokio::test]
    async fn rule9_6_a_server_without_http2_is_spoken_to_in_http1() {
        let seen = requests_at_once(&[b"http/1.1"]).await;
        // The first request's connection is reused by one of the others.
        assert_eq!(seen.connections.load(Ordering::SeqCst), AT_ONCE);
        let versions = seen.versions.lock().unwrap().clone();
        assert_eq!(versions, vec![Version::HTTP_11; AT_ONCE + 1]);
    }
}
