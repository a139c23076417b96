//! A real HTTP/1.1 server on loopback, plain or TLS, whose answers are
//! scripted byte for byte per request. Probe tests need wire-level control
//! and sight that a conforming server library hides: header names as sent,
//! repeated header lines, stalls, resets, bodies cut short or endless.
//!
//! Every accepted connection is counted and every request head recorded
//! before the script runs, so a test can assert on them as soon as the
//! probe returns.

#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    /// `GET /path HTTP/1.1`, or empty when the bytes were not HTTP.
    pub request_line: String,
    /// Header lines in order, names exactly as sent.
    pub headers: Vec<(String, String)>,
    /// The TLS server name the client sent, if any.
    pub sni: Option<String>,
    /// The request body: as many bytes as `Content-Length` announced (at
    /// most [`MAX_RECORDED_BODY`]) for HTTP/1.1, the whole body for HTTP/2.
    pub body: Vec<u8>,
}

/// The most of an HTTP/1.1 request body the scripted server reads.
const MAX_RECORDED_BODY: usize = 64 * 1024;

impl Received {
    /// The request target.
    pub fn target(&self) -> &str {
        self.request_line.split(' ').nth(1).unwrap_or_default()
    }

    /// Values of every line whose name is exactly `name`, in order.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Whether any line's name equals `name` ignoring case.
    pub fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}

/// What the server does on a connection after reading the request head.
/// After the last step the connection is closed gracefully.
#[derive(Debug, Clone)]
pub enum Step {
    Write(Vec<u8>),
    /// Keep writing this chunk until the client goes away.
    WriteForever(Vec<u8>),
    /// Send nothing more and keep the connection open until the client closes it.
    Stall,
    /// Abort the connection with a TCP RST.
    Reset,
    /// Read the client's HTTP/2 frames until its first HEADERS frame (its
    /// request) has arrived, so that what follows answers that request;
    /// the connection is closed if the client goes away first.
    AwaitH2Request,
}

type Script = dyn Fn(&Received) -> Vec<Step> + Send + Sync;
type Log = Arc<Mutex<Vec<Received>>>;

/// A running server; stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    received: Log,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Serves plain HTTP/1.1 on `bind` (`127.0.0.1:0`, `[::1]:0`).
    pub async fn start(
        bind: &str,
        script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static,
    ) -> TestServer {
        let script: Arc<Script> = Arc::new(script);
        Self::listen(bind, move |stream, log| {
            let script = script.clone();
            async move { serve_script(stream, None, &log, &*script).await }
        })
        .await
    }

    /// Serves HTTPS (HTTP/1.1, no ALPN) on `bind` with a fresh self-signed
    /// certificate.
    pub async fn start_tls(
        bind: &str,
        script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static,
    ) -> TestServer {
        Self::start_tls_alpn(bind, Vec::new(), script).await
    }

    /// [`TestServer::start_tls`], selecting a protocol of `alpn` over ALPN
    /// when the client offers one; the script still writes raw bytes (with
    /// `h2`: HTTP/2 frames, after reading the client's preface).
    pub async fn start_tls_alpn(
        bind: &str,
        alpn: Vec<Vec<u8>>,
        script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static,
    ) -> TestServer {
        Self::start_with_acceptor(bind, self_signed_acceptor(alpn), script).await
    }

    /// Serves HTTPS with `acceptor`'s certificate and settings; the script
    /// writes raw bytes as for [`TestServer::start_tls`]. A failed
    /// handshake ends the connection.
    pub async fn start_with_acceptor(
        bind: &str,
        acceptor: tokio_rustls::TlsAcceptor,
        script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static,
    ) -> TestServer {
        let script: Arc<Script> = Arc::new(script);
        Self::listen(bind, move |stream, log| {
            let (script, acceptor) = (script.clone(), acceptor.clone());
            async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let sni = stream.get_ref().1.server_name().map(str::to_string);
                serve_script(stream, sni, &log, &*script).await;
            }
        })
        .await
    }

    /// Serves HTTPS that selects `h2` over ALPN, through hyper's HTTP/2
    /// server, answering every request with `status` and `body`. Recorded
    /// header names are lower-case, with `:authority` first.
    pub async fn start_h2(bind: &str, status: u16, body: &'static [u8]) -> TestServer {
        let acceptor = self_signed_acceptor(vec![b"h2".to_vec()]);
        Self::listen(bind, move |stream, log| {
            let acceptor = acceptor.clone();
            async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let sni = stream.get_ref().1.server_name().map(str::to_string);
                serve_h2(stream, sni, log, status, body, 0).await;
            }
        })
        .await
    }

    /// Serves HTTP/2 over cleartext with prior knowledge (h2c) through
    /// hyper's HTTP/2 server, as [`TestServer::start_h2`] does over TLS; a
    /// client speaking HTTP/1.1 gets no answer but a closed connection.
    pub async fn start_h2c(bind: &str, status: u16, body: &'static [u8]) -> TestServer {
        Self::start_h2c_with_header_bytes(bind, status, body, 0).await
    }

    /// [`TestServer::start_h2c`] answering with `header_bytes` more of
    /// response headers (`x-pad-<n>` lines of 1 KiB each).
    pub async fn start_h2c_with_header_bytes(
        bind: &str,
        status: u16,
        body: &'static [u8],
        header_bytes: usize,
    ) -> TestServer {
        Self::listen(bind, move |stream, log| {
            serve_h2(stream, None, log, status, body, header_bytes)
        })
        .await
    }

    /// Requests received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Accepts connections on `bind`, counting them, and runs `serve` on
    /// each in its own task.
    async fn listen<F, Fut>(bind: &str, serve: F) -> TestServer
    where
        F: Fn(TcpStream, Log) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind(bind)
            .await
            .expect("bind loopback test server");
        let addr = listener.local_addr().unwrap();
        let received = Log::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let (log, count) = (received.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, log.clone()));
            }
        });
        TestServer {
            addr,
            received,
            connections,
            task,
        }
    }
}

/// Gives access to the TCP socket under a stream, to reset it.
trait TcpBacked {
    fn tcp(&self) -> &TcpStream;
}

impl TcpBacked for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl TcpBacked for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

async fn serve_script<S>(
    mut stream: S,
    sni: Option<String>,
    log: &Mutex<Vec<Received>>,
    script: &Script,
) where
    S: AsyncRead + AsyncWrite + TcpBacked + Unpin,
{
    let head = read_head(&mut stream).await;
    let mut request = parse_head(&head, sni);
    read_body(&mut stream, &head, &mut request).await;
    log.lock().unwrap().push(request.clone());
    for step in script(&request) {
        match step {
            Step::Write(bytes) => {
                if stream.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Step::WriteForever(chunk) => while stream.write_all(&chunk).await.is_ok() {},
            Step::Stall => {
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            Step::Reset => {
                #[allow(deprecated)] // SO_LINGER 0 is exactly how to send a RST
                let _ = stream.tcp().set_linger(Some(std::time::Duration::ZERO));
                return;
            }
            Step::AwaitH2Request => {
                if !await_h2_request(&mut stream, &head).await {
                    return;
                }
            }
        }
    }
    let _ = stream.shutdown().await;
}

/// Reads the client's HTTP/2 frames, after its connection preface (`head`
/// holds what was read of them already), until a HEADERS frame; `false`
/// when the connection ends first.
async fn await_h2_request<S: AsyncRead + Unpin>(stream: &mut S, head: &[u8]) -> bool {
    const PREFACE_LEN: usize = 24;
    const HEADERS: u8 = 0x1;
    let mut skip = PREFACE_LEN;
    let mut buf = head.to_vec();
    let mut chunk = [0u8; 4096];
    loop {
        let skipped = skip.min(buf.len());
        buf.drain(..skipped);
        skip -= skipped;
        while skip == 0 && buf.len() >= 9 {
            if buf[3] == HEADERS {
                return true;
            }
            skip = 9 + u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            let skipped = skip.min(buf.len());
            buf.drain(..skipped);
            skip -= skipped;
        }
        match stream.read(&mut chunk).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
}

/// Reads `request`'s body, announced by its `Content-Length` (some of it
/// may have come with the head), into `request.body`.
async fn read_body<S: AsyncRead + Unpin>(stream: &mut S, head: &[u8], request: &mut Received) {
    let length = request
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_RECORDED_BODY);
    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let mut body = head[end + 4..].to_vec();
    let mut buf = [0u8; 4096];
    while body.len() < length {
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => body.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    body.truncate(length);
    request.body = body;
}

/// Serves one HTTP/2 connection with hyper, answering every request with
/// `status`, `header_bytes` of padding headers and `body` once its own body
/// has arrived.
async fn serve_h2<S>(
    stream: S,
    sni: Option<String>,
    log: Log,
    status: u16,
    body: &'static [u8],
    header_bytes: usize,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let (log, sni) = (log.clone(), sni.clone());
        async move {
            let (parts, incoming) = request.into_parts();
            let sent = incoming.collect().await.map(|c| c.to_bytes());
            let mut received = received_h2(&parts, sni);
            received.body = sent.unwrap_or_default().to_vec();
            log.lock().unwrap().push(received);
            let mut response = hyper::Response::builder().status(status);
            for n in 0..header_bytes / 1024 {
                response = response.header(format!("x-pad-{n}"), "p".repeat(1000));
            }
            response.body(Full::new(Bytes::from_static(body)))
        }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Reads up to the blank line ending a request head; stops early at bytes
/// that cannot be HTTP (a TLS hello), so that the script can still answer.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => break,
        }
        if !head[0].is_ascii_uppercase() {
            break;
        }
    }
    head
}

fn parse_head(head: &[u8], sni: Option<String>) -> Received {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let request_line = if first.starts_with(|c: char| c.is_ascii_uppercase()) {
        first.to_string()
    } else {
        String::new()
    };
    let headers = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_string(), value.trim().to_string()))
        .collect();
    Received {
        request_line,
        headers,
        sni,
        body: Vec::new(),
    }
}

/// An HTTP/2 request's head as received, `:scheme` and `:authority` first.
fn received_h2(request: &http::request::Parts, sni: Option<String>) -> Received {
    let target = request.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let authority = request.uri.authority().map_or("", |a| a.as_str());
    let scheme = request.uri.scheme_str().unwrap_or_default();
    let mut headers = vec![
        (":scheme".to_string(), scheme.to_string()),
        (":authority".to_string(), authority.to_string()),
    ];
    headers.extend(request.headers.iter().map(|(name, value)| {
        (
            name.to_string(),
            String::from_utf8_lossy(value.as_bytes()).into_owned(),
        )
    }));
    Received {
        request_line: format!("{} {target} {:?}", request.method, request.version),
        headers,
        sni,
        body: Vec::new(),
    }
}

fn self_signed_acceptor(alpn: Vec<Vec<u8>>) -> tokio_rustls::TlsAcceptor {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = alpn;
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A complete response with `Content-Length`.
pub fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} Scripted\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Script step: answer `status` with `body`.
pub fn reply(status: u16, body: &[u8]) -> Vec<Step> {
    vec![Step::Write(response(status, &[], body))]
}

/// Script step: redirect with `status` to `location`, with a small body.
pub fn redirect(status: u16, location: &str) -> Vec<Step> {
    vec![Step::Write(response(
        status,
        &[("Location", location)],
        b"moved",
    ))]
}
