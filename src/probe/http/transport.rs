//! One HTTP exchange on a fresh connection, made the way the kubelet's Go
//! transport makes it (H9): a new connection per request from the probe
//! dialer ([`crate::probe::dial`], SO_LINGER {on, 1 s}), no proxy, no
//! compression; HTTP/1.1 with `Connection: close`,
//! or for `https` (certificate not verified unless `podprobe.tls` gives a
//! `caBundle`, see [`crate::probe::tls`]) HTTP/2 when the server picks
//! `h2` over ALPN, since the kubelet's transport is set up for HTTP/2
//! (`utilnet.SetTransportDefaults`); HTTP/2 with prior knowledge on a
//! cleartext connection for `protocol: HTTP2` (h2c, H23); and Go's error
//! texts for what can go wrong on the way (H16, H17).
//!
//! Go texts reproduced exactly: `dial tcp <addr>: connect: <errno>`,
//! `read tcp <local>-><peer>: read: <errno>` (and `write ...` for a broken
//! pipe), `EOF` (peer closed before answering), `unexpected EOF` (body cut
//! short), `unsupported protocol scheme "<s>"`, `http: no Host in request
//! URL`, `net/http: invalid header field name/value ...`,
//! `http: server gave HTTP response to HTTPS client`,
//! `remote error: tls: <alert>`, `net/http: TLS handshake timeout`.
//! `tls: failed to verify certificate: x509: ...` (the common causes).
//! Approximated: DNS failures (`dial tcp: lookup <host>: no such host`,
//! without Go's resolver address), other TLS failures (`tls: <rustls
//! error>`), malformed header lines (`net/http: HTTP/1.x transport
//! connection broken: malformed MIME header: <what>`, where Go quotes the
//! line; a malformed status line is worded as Go words it), HTTP/2
//! protocol errors (hyper's text). The HTTP/1.1 exchange itself is
//! [`super::http1`]; HTTP/2 is hyper's.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Either, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::http1::{self, MAX_RESPONSE_HEAD_BYTES, MAX_RESPONSE_HEADER_LINES};
use super::informational::{H2Headers, Informational};
use super::request::{HeaderLine, Hop};
use crate::probe::dial::{DialError, ProbeStream, dial, go_errno_text};
use crate::probe::tap::{ReadObserver, ReadTap};
use crate::probe::tls;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::probe_spec::HttpProtocol;
use podprobe_core::spec::probe_spec::extension::{Method, TlsSettings};
use podprobe_core::util::gofmt::go_quote;

/// The dial deadline when the probe has none (Go's client without a
/// timeout): the dialer needs an instant, and no probe waits this long.
const NO_DEADLINE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// HTTP/2 flow-control windows of a probe's connection: room for the
/// 10 KiB of body the probe reads (H14), not the megabytes hyper would let
/// a server push into podprobe's memory before it is read.
const H2_WINDOW_BYTES: u32 = 64 * 1024;

/// The largest HTTP/2 response header block accepted (Go's client allows
/// 10 MiB, hyper 16 MiB); a larger one fails the probe. As much as the
/// HTTP/1.1 side reads of a response head.
const H2_MAX_HEADER_LIST_BYTES: u32 = MAX_RESPONSE_HEAD_BYTES as u32;

/// Go's `Transport.TLSHandshakeTimeout` as the kubelet's transport defaults set it.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an exchange produced no response, or its body was cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportError {
    /// The probe's deadline passed.
    Timeout,
    /// Anything else, as Go's transport words it.
    Failed(String),
}

/// A response whose headers have arrived; the connection stays open until
/// this is dropped.
pub struct Exchange {
    pub status: StatusCode,
    /// The response's first `Location` value.
    pub location: Option<HeaderValue>,
    body: Body,
    addrs: ConnAddrs,
}

/// Where a response's body is read from.
enum Body {
    Http1(http1::Body),
    /// hyper's body, and the task driving its connection.
    Http2 {
        incoming: Incoming,
        _connection: AbortOnDrop,
    },
}

/// Both ends of a connection, for Go-style read/write error texts.
#[derive(Debug, Clone, Copy)]
struct ConnAddrs {
    local: SocketAddr,
    peer: SocketAddr,
}

/// Stops the task driving a connection (and so closes it) when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Exchange {
    /// Reads at most `limit` bytes of the body; reaching the limit is not an
    /// error and nothing past it is read.
    pub async fn read_body(
        &mut self,
        limit: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, TransportError> {
        let mut body = Vec::new();
        let incoming = match &mut self.body {
            Body::Http1(http1) => {
                let addrs = self.addrs;
                return match within(deadline, http1.read(&mut body, limit)).await {
                    Err(_) => Err(TransportError::Timeout),
                    Ok(Err(err)) => Err(TransportError::Failed(http1_body_error_text(err, addrs))),
                    Ok(Ok(())) => Ok(body),
                };
            }
            Body::Http2 { incoming, .. } => incoming,
        };
        while body.len() < limit {
            let frame = match within(deadline, incoming.frame()).await {
                Err(_) => return Err(TransportError::Timeout),
                Ok(None) => break,
                Ok(Some(Err(err))) => {
                    return Err(TransportError::Failed(body_error_text(&err, self.addrs)));
                }
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                let take = data.len().min(limit - body.len());
                body.extend_from_slice(&data[..take]);
            }
        }
        Ok(body)
    }
}

/// Runs `future` until `deadline` (no deadline: until it completes).
async fn within<F: Future>(
    deadline: Option<Instant>,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await,
        None => Ok(future.await),
    }
}

/// Sends `hop` on a new connection to an address `destinations` allows and
/// waits for the response headers, all before `deadline`.
pub async fn exchange(
    hop: &Hop,
    tls_settings: &TlsSettings,
    deadline: Option<Instant>,
    destinations: &Destinations,
) -> Result<Exchange, TransportError> {
    let tls = match hop.url.scheme.as_str() {
        "http" => false,
        "https" => true,
        other => {
            return Err(TransportError::Failed(format!(
                "unsupported protocol scheme {}",
                go_quote(other)
            )));
        }
    };
    let lines = hop.header_lines().map_err(TransportError::Failed)?;
    if hop.url.host.is_empty() {
        return Err(TransportError::Failed(
            "http: no Host in request URL".into(),
        ));
    }
    let target = request_target(&hop.url.request_uri())?;
    let port = dial_port(hop)?;
    let dial_deadline = deadline.unwrap_or_else(|| Instant::now() + NO_DEADLINE);
    // Each step is boxed on its own and freed when done: a probe waiting
    // for its answer then holds only the exchange it waits on, not room
    // for a dial, a TLS handshake and both HTTP versions at once (the
    // probes in flight when a node's pods go away at once were the
    // largest share of the heap's peak, bench/RESULTS.md, #39).
    within(deadline, async {
        let stream = Box::pin(dial(hop.url.hostname(), port, dial_deadline, destinations))
            .await
            .map_err(|err| dial_failure(&err, deadline))?;
        let addrs = ConnAddrs {
            local: stream.get_ref().local_addr().map_err(io_failure)?,
            peer: stream.get_ref().peer_addr().map_err(io_failure)?,
        };
        if !tls {
            return match hop.protocol {
                HttpProtocol::Http1 => {
                    Box::pin(send_http1(stream, hop, &target, &lines, addrs)).await
                }
                HttpProtocol::Http2 => {
                    let request = http2_request(hop, http::uri::Scheme::HTTP, target, &lines)?;
                    Box::pin(send_http2(stream, request, addrs)).await
                }
            };
        }
        let handshake = tls_handshake(stream, hop, tls_settings, addrs, deadline);
        let stream = Box::pin(handshake).await?;
        if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
            let request = http2_request(hop, http::uri::Scheme::HTTPS, target, &lines)?;
            Box::pin(send_http2(stream, request, addrs)).await
        } else {
            Box::pin(send_http1(stream, hop, &target, &lines, addrs)).await
        }
    })
    .await
    .unwrap_or(Err(TransportError::Timeout))
}

/// The port to dial: the URL's, else the scheme's default. The URL parser
/// accepts any digits, so a port past 65535 first fails here, as in Go's
/// dialer.
fn dial_port(hop: &Hop) -> Result<u16, TransportError> {
    let port = match (hop.url.port(), hop.url.scheme.as_str()) {
        ("", "https") => "443",
        ("", _) => "80",
        (port, _) => port,
    };
    port.parse()
        .map_err(|_| TransportError::Failed(format!("dial tcp: address {port}: invalid port")))
}

/// A dial that failed once the probe deadline had passed is the client's
/// timeout, which Go reports in place of the dialer's error.
fn dial_failure(err: &DialError, deadline: Option<Instant>) -> TransportError {
    if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
        TransportError::Timeout
    } else {
        TransportError::Failed(err.to_string())
    }
}

/// The request target as `http` can carry it.
fn request_target(target: &str) -> Result<PathAndQuery, TransportError> {
    PathAndQuery::try_from(target)
        .or_else(|_| PathAndQuery::try_from(escape_request_line(target)))
        .map_err(|e| {
            TransportError::Failed(format!(
                "net/http: invalid request target {}: {e}",
                go_quote(target)
            ))
        })
}

/// Percent-encodes what a request line cannot carry (a space in the query):
/// Go would send such bytes raw and get a malformed request line.
fn escape_request_line(target: &str) -> String {
    target
        .bytes()
        .map(|b| {
            if b.is_ascii_graphic() && !b"\"<>\\^`{|}".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Header lines that Go's HTTP/2 transport does not send as headers (the
/// `Host` line becomes `:authority`).
const NOT_SENT_OVER_HTTP2: [&str; 6] = [
    "Host",
    "Connection",
    "Keep-Alive",
    "Proxy-Connection",
    "Transfer-Encoding",
    "Upgrade",
];

/// The HTTP/2 request: the `Host` line as `:authority`, connection-specific
/// lines dropped, as Go's HTTP/2 transport sends it; `scheme` is
/// `:scheme`, `https` over TLS and `http` for h2c.
fn http2_request(
    hop: &Hop,
    scheme: http::uri::Scheme,
    target: PathAndQuery,
    lines: &[HeaderLine<'_>],
) -> Result<Request, TransportError> {
    let authority = lines
        .iter()
        .find(|(name, _)| *name == "Host")
        .map_or("", |(_, value)| value.as_ref());
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(target)
        .build()
        .map_err(|_| TransportError::Failed("http2: invalid Host header".into()))?;
    let lines: Vec<HeaderLine<'_>> = lines
        .iter()
        .filter(|(name, _)| !NOT_SENT_OVER_HTTP2.contains(name))
        .cloned()
        .collect();
    build_request(hop, uri, http::Version::HTTP_2, &lines)
}

/// A probe request: bodiless, or a `POST`/`PUT` with the probe's body.
type Request = http::Request<Either<Empty<Bytes>, Full<Bytes>>>;

/// `hop`'s request to `uri` with the given header lines.
fn build_request(
    hop: &Hop,
    uri: Uri,
    version: http::Version,
    lines: &[HeaderLine<'_>],
) -> Result<Request, TransportError> {
    let body = match &hop.body {
        None => Either::Left(Empty::new()),
        Some(body) => Either::Right(Full::new(body.clone())),
    };
    let mut request = http::Request::new(body);
    *request.method_mut() = match hop.method {
        Method::Get => http::Method::GET,
        Method::Head => http::Method::HEAD,
        Method::Post => http::Method::POST,
        Method::Put => http::Method::PUT,
    };
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    let headers = request.headers_mut();
    for (name, value) in lines {
        let (name, value) = header(name, value)?;
        headers.append(name, value);
    }
    Ok(request)
}

/// A header line as `http` holds it; Go's error text for one that cannot
/// be sent.
fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), TransportError> {
    let invalid_name = || format!("net/http: invalid header field name {}", go_quote(name));
    let invalid_value = || {
        format!(
            "net/http: invalid header field value for {}",
            go_quote(name)
        )
    };
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| TransportError::Failed(invalid_name()))?;
    let value = HeaderValue::from_bytes(value.as_bytes())
        .map_err(|_| TransportError::Failed(invalid_value()))?;
    Ok((name, value))
}

/// Performs an HTTP/1.1 exchange over an established connection: `hop`'s
/// request to the origin-form `target` with Go's header `lines`.
async fn send_http1<S>(
    stream: S,
    hop: &Hop,
    target: &PathAndQuery,
    lines: &[HeaderLine<'_>],
    addrs: ConnAddrs,
) -> Result<Exchange, TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The lines were checked as Go's transport checks them
    // (`Hop::header_lines`); the head is written from them as they are.
    let head = http1::request_head(hop.method.as_str(), target.as_str(), lines);
    let body = hop.body.as_deref().unwrap_or_default();
    let response = http1::send(Box::new(stream), head, body, hop.method == Method::Head)
        .await
        .map_err(|err| TransportError::Failed(http1_response_error_text(err, addrs)))?;
    Ok(Exchange {
        status: response.status,
        location: response.location,
        body: Body::Http1(response.body),
        addrs,
    })
}

/// Performs an HTTP/2 exchange over a TLS connection that negotiated `h2`,
/// or over a cleartext one with prior knowledge (h2c).
async fn send_http2<S>(
    stream: S,
    request: Request,
    addrs: ConnAddrs,
) -> Result<Exchange, TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let informational = Informational::default();
    let stream = ReadTap::new(stream, H2Headers::new(informational.clone()));
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(H2_WINDOW_BYTES)
        .initial_connection_window_size(H2_WINDOW_BYTES)
        .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| TransportError::Failed(response_error_text(&e, addrs)))?;
    let response = async {
        tokio::select! {
            // First: the refused read fails the request too.
            biased;
            () = informational.too_many() => Err(None),
            response = sender.send_request(request) => response.map_err(Some),
        }
    };
    finish(connection, response, addrs).await
}

/// Drives `connection` in its own task while waiting for `response`, which
/// fails with `None` after too many 1xx responses.
async fn finish<C>(
    connection: C,
    response: impl Future<Output = Result<http::Response<Incoming>, Option<hyper::Error>>>,
    addrs: ConnAddrs,
) -> Result<Exchange, TransportError>
where
    C: Future + Send + 'static,
    C::Output: Send,
{
    let connection = AbortOnDrop(tokio::spawn(async move {
        // Its errors reach the response and the body; nothing to add here.
        let _ = connection.await;
    }));
    let response = response.await.map_err(|e| {
        TransportError::Failed(match e {
            Some(e) => response_error_text(&e, addrs),
            None => "http2: too many 1xx informational responses".into(),
        })
    })?;
    let (parts, incoming) = response.into_parts();
    Ok(Exchange {
        status: parts.status,
        location: parts.headers.get(http::header::LOCATION).cloned(),
        body: Body::Http2 {
            incoming,
            _connection: connection,
        },
        addrs,
    })
}

/// The TLS client handshake, SNI only for DNS names, within Go's 10 s
/// handshake timeout as well as the probe deadline. Without `podprobe.tls`
/// any certificate is accepted (Go's `InsecureSkipVerify`) and the name is
/// the URL's host, as in the kubelet; with a `caBundle` the name verified
/// is `serverName`, else the `Host` header's host, else the URL's.
async fn tls_handshake(
    stream: ProbeStream,
    hop: &Hop,
    settings: &TlsSettings,
    addrs: ConnAddrs,
    deadline: Option<Instant>,
) -> Result<tokio_rustls::client::TlsStream<ReadTap<ProbeStream, FirstBytes>>, TransportError> {
    let name = match (&settings.ca_bundle, host_header_hostname(&hop.host)) {
        (Some(_), Some(host)) => host,
        _ => hop.url.hostname(),
    };
    let server_name = tls::server_name(settings, name, addrs.peer.ip());
    let config = if *settings == TlsSettings::default() {
        tls::kubelet_https_config()
    } else {
        tls::client_config(settings, &[b"h2", b"http/1.1"])
    };
    let handshake = TlsConnector::from(config)
        .connect(server_name, ReadTap::new(stream, FirstBytes::default()))
        .into_fallible();
    let handshake_deadline = Instant::now() + TLS_HANDSHAKE_TIMEOUT;
    if deadline.is_some_and(|d| d <= handshake_deadline) {
        // The probe deadline comes first; the caller reports it.
        return handshake
            .await
            .map_err(|(err, io)| tls_failure(&err, &io, addrs));
    }
    match tokio::time::timeout_at(handshake_deadline, handshake).await {
        Err(_) => Err(TransportError::Failed(
            "net/http: TLS handshake timeout".into(),
        )),
        Ok(result) => result.map_err(|(err, io)| tls_failure(&err, &io, addrs)),
    }
}

fn tls_failure(
    err: &io::Error,
    io: &ReadTap<ProbeStream, FirstBytes>,
    addrs: ConnAddrs,
) -> TransportError {
    TransportError::Failed(tls_error_text(err, &io.observer.0, addrs))
}

/// Go's texts for a failed TLS handshake.
fn tls_error_text(err: &io::Error, first_bytes: &[u8], addrs: ConnAddrs) -> String {
    if first_bytes.starts_with(b"HTTP/") {
        return "http: server gave HTTP response to HTTPS client".into();
    }
    match err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidMessage(_))
            if first_bytes
                .first()
                .is_some_and(|b| !(0x14..=0x18).contains(b)) =>
        {
            "tls: first record does not look like a TLS handshake".into()
        }
        Some(other) => tls::error_text(other),
        None if err.kind() == io::ErrorKind::UnexpectedEof => "EOF".into(),
        None => io_error_text(err, addrs),
    }
}

/// The host of a `Host` header value (`name`, `name:port`, `[v6]:port`);
/// `None` when there is none.
fn host_header_hostname(host: &str) -> Option<&str> {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or(bracketed, |(ip, _)| ip),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    (!name.is_empty()).then_some(name)
}

/// The first bytes a connection reads, so that a failed TLS handshake can
/// tell a plain-HTTP answer apart, as Go's transport does.
#[derive(Default)]
struct FirstBytes(Vec<u8>);

impl FirstBytes {
    const KEEP: usize = 5;
}

impl ReadObserver for FirstBytes {
    fn observe(&mut self, _read: &io::Result<()>, bytes: &[u8]) {
        let missing = Self::KEEP.saturating_sub(self.0.len());
        self.0.extend_from_slice(&bytes[..bytes.len().min(missing)]);
    }
}

/// Go's text for an error before the response headers arrived.
fn response_error_text(err: &hyper::Error, addrs: ConnAddrs) -> String {
    if let Some(io_err) = source_io_error(err) {
        return io_response_error_text(io_err, addrs);
    }
    if err.is_incomplete_message() {
        return "EOF".into();
    }
    err.to_string()
}

/// Go's text for a read or write that failed before a response arrived.
fn io_response_error_text(err: &io::Error, addrs: ConnAddrs) -> String {
    // With TLS 1.3 a server refusing the client's certificate says so
    // after the client's side of the handshake is done: on the first read.
    if let Some(tls_err) = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        return tls::error_text(tls_err);
    }
    match err.kind() {
        io::ErrorKind::UnexpectedEof => "EOF".into(),
        _ => io_error_text(err, addrs),
    }
}

/// Go's text for an HTTP/1.1 exchange that produced no response.
fn http1_response_error_text(err: http1::Error, addrs: ConnAddrs) -> String {
    match err {
        http1::Error::Io(err) => io_response_error_text(&err, addrs),
        http1::Error::Eof | http1::Error::UnexpectedEof => "EOF".into(),
        http1::Error::HeadTooLarge => format!(
            "net/http: server response headers exceeded {MAX_RESPONSE_HEAD_BYTES} bytes or \
             {MAX_RESPONSE_HEADER_LINES} lines; aborted"
        ),
        http1::Error::TooManyInformational => {
            "net/http: too many 1xx informational responses".into()
        }
        http1::Error::Malformed(what) => {
            format!("net/http: HTTP/1.x transport connection broken: {what}")
        }
    }
}

/// Go's text for an error while reading an HTTP/1.1 body.
fn http1_body_error_text(err: http1::Error, addrs: ConnAddrs) -> String {
    match err {
        http1::Error::Io(err) if err.kind() != io::ErrorKind::UnexpectedEof => {
            io_error_text(&err, addrs)
        }
        http1::Error::Io(_) | http1::Error::Eof | http1::Error::UnexpectedEof => {
            "unexpected EOF".into()
        }
        http1::Error::HeadTooLarge => {
            format!("http: trailers exceeded {MAX_RESPONSE_HEAD_BYTES} bytes")
        }
        http1::Error::Malformed(what) => what,
        http1::Error::TooManyInformational => {
            "net/http: too many 1xx informational responses".into()
        }
    }
}

/// Go's text for an error while reading the body.
fn body_error_text(err: &hyper::Error, addrs: ConnAddrs) -> String {
    match source_io_error(err) {
        Some(io_err) if io_err.kind() != io::ErrorKind::UnexpectedEof => {
            io_error_text(io_err, addrs)
        }
        Some(_) => "unexpected EOF".into(),
        None if err.is_incomplete_message() => "unexpected EOF".into(),
        None => err.to_string(),
    }
}

/// The first `io::Error` in `err`'s source chain.
fn source_io_error(err: &hyper::Error) -> Option<&io::Error> {
    let mut source = std::error::Error::source(err);
    while let Some(current) = source {
        if let Some(io_err) = current.downcast_ref::<io::Error>() {
            return Some(io_err);
        }
        source = current.source();
    }
    None
}

/// Go's `*net.OpError` text for a failed read or write on the connection.
fn io_error_text(err: &io::Error, addrs: ConnAddrs) -> String {
    if err.raw_os_error().is_none() {
        return err.to_string();
    }
    let op = if err.kind() == io::ErrorKind::BrokenPipe {
        "write"
    } else {
        "read"
    };
    format!(
        "{op} tcp {}->{}: {op}: {}",
        addrs.local,
        addrs.peer,
        go_errno_text(err)
    )
}

fn io_failure(err: io::Error) -> TransportError {
    TransportError::Failed(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_targets_with_spaces_are_escaped() {
        assert_eq!(escape_request_line("/a?b c"), "/a?b%20c");
    }

    #[test]
    fn host_header_hostnames_drop_the_port() {
        assert_eq!(
            host_header_hostname("app.internal:8443"),
            Some("app.internal")
        );
        assert_eq!(host_header_hostname("app.internal"), Some("app.internal"));
        assert_eq!(host_header_hostname("[::1]:8443"), Some("::1"));
        assert_eq!(host_header_hostname(""), None);
    }
}
