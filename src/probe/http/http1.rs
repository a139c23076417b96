//! One HTTP/1.1 request and its response on a connection of its own (H9),
//! read with no more memory than the answer needs.
//!
//! A probe waiting for its answer holds this exchange for up to its
//! timeout, and when a node's pods go away at once hundreds of them wait
//! together: with hyper's client each held a dispatch channel, an 8 KiB
//! read buffer and an 8 KiB write buffer, about 25 KiB before the first
//! byte of the answer (bench/RESULTS.md, #39). Here the request goes out
//! from one buffer that is freed once written, and the head is read into a
//! buffer that starts at [`FIRST_READ_BYTES`] and doubles only while a
//! larger head keeps arriving, up to [`MAX_RESPONSE_HEAD_BYTES`].
//!
//! The response is framed as hyper frames it (RFC 9112 section 6.3): no
//! body for 1xx, 204, 304 or a HEAD request; `Transfer-Encoding` ending in
//! `chunked`, chunked; any other `Transfer-Encoding`, read until the
//! connection closes; else `Content-Length`, when every value agrees, or
//! until the connection closes. Informational responses other than 101 are
//! skipped, up to Go's five ([`MAX_INFORMATIONAL_RESPONSES`]); a 101 is
//! final and has no body.

use std::io;

use http::StatusCode;
use http::header::HeaderValue;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::informational::MAX_INFORMATIONAL_RESPONSES;
use super::request::HeaderLine;
use podprobe_core::util::gofmt::go_quote_bytes;

/// The largest response head read (status line and header lines), and the
/// most the trailers of a chunked body may add: a server that sends a large
/// head and stalls holds this much until the probe's deadline. Go's client
/// reads up to 10 MiB (`MaxResponseHeaderBytes`). The HTTP/2 side accepts
/// as large a header block.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 64 * 1024;

/// The most header lines of a response head (as hyper's client; Go has no
/// such limit, but 64 KiB of head holds few more real ones).
pub const MAX_RESPONSE_HEADER_LINES: usize = 100;

/// The read buffer a response starts with: room for the heads of ordinary
/// servers, and for the body bytes that arrive with them.
const FIRST_READ_BYTES: usize = 512;

/// The longest chunk-size line of a chunked body (with its extensions).
const MAX_CHUNK_LINE_BYTES: usize = 4096;

/// What went wrong on the connection, for the transport to word as Go does.
#[derive(Debug)]
pub enum Error {
    /// A read or a write failed.
    Io(io::Error),
    /// The connection closed before a whole response head arrived.
    Eof,
    /// The connection closed before the body's framing said it ends.
    UnexpectedEof,
    /// The head (or a chunked body's trailers) exceeded
    /// [`MAX_RESPONSE_HEAD_BYTES`] or [`MAX_RESPONSE_HEADER_LINES`].
    HeadTooLarge,
    /// More than [`MAX_INFORMATIONAL_RESPONSES`] 1xx responses.
    TooManyInformational,
    /// What the server sent is not HTTP/1.x; the text says what.
    Malformed(String),
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        Error::Io(err)
    }
}

/// The request head as Go's HTTP/1 writer sends it: the request line, then
/// `lines` in their order, names in Go's canonical case.
pub fn request_head(method: &str, target: &str, lines: &[HeaderLine<'_>]) -> Vec<u8> {
    let size = lines
        .iter()
        .map(|(name, value)| name.len() + value.len() + 4)
        .sum::<usize>()
        + method.len()
        + target.len()
        + 13;
    let mut head = Vec::with_capacity(size);
    head.extend_from_slice(method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in lines {
        canonical_name(&mut head, name);
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// `name` with each word capitalized and the rest in lower case
/// (`x-request-ID` → `X-Request-Id`), as Go's `CanonicalMIMEHeaderKey`
/// writes a valid name.
fn canonical_name(out: &mut Vec<u8>, name: &str) {
    let mut upper = true;
    for byte in name.bytes() {
        out.push(if upper {
            byte.to_ascii_uppercase()
        } else {
            byte.to_ascii_lowercase()
        });
        upper = byte == b'-';
    }
}

/// A stream a request can go over: TCP, or TLS over TCP.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A final response whose head has arrived; its body is read from
/// [`Body`], and the connection closes when that is dropped.
pub struct Response {
    pub status: StatusCode,
    /// The first `Location` value.
    pub location: Option<HeaderValue>,
    pub body: Body,
}

/// Writes `head` and `body` to `stream`, then reads the final response's
/// head. `head_request`: the request is a HEAD, so the response has no body.
pub async fn send(
    stream: Box<dyn Stream>,
    head: Vec<u8>,
    body: &[u8],
    head_request: bool,
) -> Result<Response, Error> {
    let mut conn = Conn {
        stream,
        buf: Vec::new(),
        start: 0,
    };
    conn.stream.write_all(&head).await?;
    drop(head);
    conn.stream.write_all(body).await?;
    conn.stream.flush().await?;
    conn.buf.reserve_exact(FIRST_READ_BYTES);
    let mut informational = 0;
    loop {
        let Some(head) = parse_head(conn.pending(), head_request)? else {
            conn.read_line_end(MAX_RESPONSE_HEAD_BYTES).await?;
            continue;
        };
        conn.consume(head.len);
        if let Some(framing) = head.framing {
            return Ok(Response {
                status: head.status,
                location: head.location,
                body: Body { conn, framing },
            });
        }
        informational += 1;
        if informational > MAX_INFORMATIONAL_RESPONSES {
            return Err(Error::TooManyInformational);
        }
    }
}

/// A response head, parsed.
struct Head {
    /// Its length in bytes.
    len: usize,
    status: StatusCode,
    location: Option<HeaderValue>,
    /// How its body is framed; `None` for a 1xx response other than 101,
    /// which another response follows.
    framing: Option<Framing>,
}

/// The head at the start of `bytes`, `None` while it is incomplete.
fn parse_head(bytes: &[u8], head_request: bool) -> Result<Option<Head>, Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADER_LINES];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Error::HeadTooLarge),
        Err(err) => return Err(Error::Malformed(malformed(bytes, err))),
    };
    let code = response.code.unwrap_or_default();
    let status = StatusCode::from_u16(code)
        .map_err(|_| Error::Malformed(format!("malformed HTTP status code \"{code}\"")))?;
    let headers = response.headers;
    let location = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("location"))
        .map(|h| HeaderValue::from_bytes(h.value))
        .transpose()
        .map_err(|_| Error::Malformed("invalid Location value".into()))?;
    let framing = match code {
        101 => Some(Framing::Done),
        100..=199 => None,
        204 | 304 => Some(Framing::Done),
        _ if head_request => Some(Framing::Done),
        _ => Some(body_framing(headers, response.version == Some(0))?),
    };
    Ok(Some(Head {
        len,
        status,
        location,
        framing,
    }))
}

/// Go's words for a head that does not parse (`http.ReadResponse`): what
/// is wrong with the status line, quoted; else with a header line.
fn malformed(bytes: &[u8], err: httparse::Error) -> String {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(space) = line.iter().position(|&b| b == b' ') else {
        return format!("malformed HTTP response {}", go_quote_bytes(line));
    };
    let (proto, status) = (&line[..space], line[space + 1..].trim_ascii_start());
    let code = status.split(|&b| b == b' ').next().unwrap_or_default();
    if code.len() != 3 || !code.iter().all(u8::is_ascii_digit) {
        return format!("malformed HTTP status code {}", go_quote_bytes(code));
    }
    if !go_http_version(proto) {
        return format!("malformed HTTP version {}", go_quote_bytes(proto));
    }
    match err {
        // A version Go reads (HTTP/2.0 say) but hyper's parser does not.
        httparse::Error::Version | httparse::Error::Status => {
            format!("malformed HTTP response {}", go_quote_bytes(line))
        }
        other => format!("malformed MIME header: {other}"),
    }
}

/// Whether Go's `ParseHTTPVersion` reads `proto`: `HTTP/` and one digit,
/// a dot, one digit.
fn go_http_version(proto: &[u8]) -> bool {
    match proto.strip_prefix(b"HTTP/") {
        Some(&[major, b'.', minor]) => major.is_ascii_digit() && minor.is_ascii_digit(),
        _ => false,
    }
}

/// The framing of a response that may have a body (RFC 9112 section 6.3).
fn body_framing(headers: &[httparse::Header<'_>], http10: bool) -> Result<Framing, Error> {
    let named = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    if let Some(last) = named("transfer-encoding").next_back() {
        if http10 {
            return Err(Error::Malformed(
                "unexpected Transfer-Encoding in an HTTP/1.0 response".into(),
            ));
        }
        let chunked = last
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        return Ok(if chunked {
            Framing::Chunked(Chunk::Size)
        } else {
            Framing::Close
        });
    }
    let mut length = None;
    for value in named("content-length") {
        for part in value.split(|&b| b == b',') {
            let parsed = content_length(part.trim_ascii())
                .filter(|n| length.is_none_or(|seen| seen == *n))
                .ok_or_else(|| Error::Malformed("invalid Content-Length".into()))?;
            length = Some(parsed);
        }
    }
    Ok(match length {
        Some(0) => Framing::Done,
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

/// A `Content-Length` value: decimal digits only.
fn content_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Where a body is in its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes are still to come.
    Length(u64),
    /// Everything until the connection closes.
    Close,
    Chunked(Chunk),
    /// Nothing more.
    Done,
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// A chunk-size line comes next.
    Size,
    /// This many bytes of the current chunk's data are still to come.
    Data(u64),
    /// The CRLF after a chunk's data comes next.
    DataEnd,
    /// The trailer section after the last chunk, this many bytes of it read.
    Trailers(usize),
}

/// A response body, read on demand from the response's connection.
pub struct Body {
    conn: Conn,
    framing: Framing,
}

impl Body {
    /// Reads the body into `out` until it ends or `out` holds `limit` bytes;
    /// nothing past the limit is read.
    pub async fn read(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), Error> {
        while out.len() < limit {
            let room = limit - out.len();
            match self.framing {
                Framing::Done => return Ok(()),
                Framing::Length(left) => {
                    let taken = self
                        .take(out, left.min(room as u64), Error::UnexpectedEof)
                        .await?;
                    self.framing = match left - taken {
                        0 => Framing::Done,
                        left => Framing::Length(left),
                    };
                }
                Framing::Close => {
                    if self.conn.pending().is_empty() && self.fill().await? == 0 {
                        self.framing = Framing::Done;
                        continue;
                    }
                    let pending = self.conn.pending();
                    let taken = pending.len().min(room);
                    out.extend_from_slice(&pending[..taken]);
                    self.conn.consume(taken);
                }
                Framing::Chunked(chunk) => self.chunked(chunk, out, room).await?,
            }
        }
        Ok(())
    }

    /// One step of a chunked body.
    async fn chunked(&mut self, chunk: Chunk, out: &mut Vec<u8>, room: usize) -> Result<(), Error> {
        self.framing = match chunk {
            Chunk::Size => {
                let line = self.line(MAX_CHUNK_LINE_BYTES, chunk_line_too_long).await?;
                match chunk_size(&line)? {
                    0 => Framing::Chunked(Chunk::Trailers(0)),
                    size => Framing::Chunked(Chunk::Data(size)),
                }
            }
            Chunk::Data(left) => {
                let taken = self
                    .take(out, left.min(room as u64), Error::UnexpectedEof)
                    .await?;
                Framing::Chunked(match left - taken {
                    0 => Chunk::DataEnd,
                    left => Chunk::Data(left),
                })
            }
            Chunk::DataEnd => {
                if !self
                    .line(MAX_CHUNK_LINE_BYTES, chunk_line_too_long)
                    .await?
                    .is_empty()
                {
                    return Err(Error::Malformed("malformed chunked encoding".into()));
                }
                Framing::Chunked(Chunk::Size)
            }
            Chunk::Trailers(read) => {
                let room = MAX_RESPONSE_HEAD_BYTES.saturating_sub(read);
                let line = self.line(room, || Error::HeadTooLarge).await?;
                if line.is_empty() {
                    Framing::Done
                } else {
                    Framing::Chunked(Chunk::Trailers(read + line.len() + 2))
                }
            }
        };
        Ok(())
    }

    /// Moves up to `want` bytes to `out`, reading if none are pending;
    /// `eof` if the connection closes first. Returns how many moved.
    async fn take(&mut self, out: &mut Vec<u8>, want: u64, eof: Error) -> Result<u64, Error> {
        if self.conn.pending().is_empty() && self.fill().await? == 0 {
            return Err(eof);
        }
        let pending = self.conn.pending();
        let taken = pending
            .len()
            .min(usize::try_from(want).unwrap_or(usize::MAX));
        out.extend_from_slice(&pending[..taken]);
        self.conn.consume(taken);
        Ok(taken as u64)
    }

    /// The next line without its CRLF (or bare LF), at most `max` bytes
    /// (else `too_long`'s error).
    async fn line(&mut self, max: usize, too_long: fn() -> Error) -> Result<Vec<u8>, Error> {
        // Each byte is looked at once, however the line arrives.
        let mut scanned = 0;
        loop {
            let pending = self.conn.pending();
            if let Some(end) = pending[scanned..]
                .iter()
                .position(|&b| b == b'\n')
                .map(|i| scanned + i)
            {
                let line = pending[..end]
                    .strip_suffix(b"\r")
                    .unwrap_or(&pending[..end]);
                if line.len() > max {
                    return Err(too_long());
                }
                let line = line.to_vec();
                self.conn.consume(end + 1);
                return Ok(line);
            }
            if pending.len() > max + 1 {
                return Err(too_long());
            }
            scanned = pending.len();
            match self.conn.fill(max + 2).await? {
                Some(0) => return Err(Error::UnexpectedEof),
                Some(_) => {}
                None => return Err(too_long()),
            }
        }
    }

    /// Reads more of the body once every byte read so far is used: into the
    /// buffer as it is, which is not full then.
    async fn fill(&mut self) -> Result<usize, Error> {
        Ok(self.conn.fill(usize::MAX).await?.unwrap_or_default())
    }
}

fn chunk_line_too_long() -> Error {
    Error::Malformed("header line too long".into())
}

/// The size on a chunk-size line, before any extension: hex digits, then
/// optional whitespace (hyper's rule: no sign, no leading whitespace).
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii_end();
    let invalid = || Error::Malformed("invalid byte in chunk length".into());
    if digits.is_empty() || digits.len() > 16 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(invalid());
    }
    let digits = std::str::from_utf8(digits).map_err(|_| invalid())?;
    u64::from_str_radix(digits, 16).map_err(|_| invalid())
}

/// The connection and the bytes read from it but not yet used.
struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    /// Where the unused bytes in `buf` start.
    start: usize,
}

impl Conn {
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads until a line ends in what arrives: only then can an
    /// incomplete head parse further, and a head dripped byte by byte is
    /// parsed once a line, not once a byte (which would cost the square of
    /// its length).
    async fn read_line_end(&mut self, max: usize) -> Result<(), Error> {
        loop {
            let before = self.pending().len();
            match self.fill(max).await? {
                Some(0) => return Err(Error::Eof),
                Some(_) if self.pending()[before..].contains(&b'\n') => return Ok(()),
                Some(_) => {}
                None => return Err(Error::HeadTooLarge),
            }
        }
    }

    /// Reads what the connection has, keeping the unused bytes; the buffer
    /// doubles while full, up to `max` bytes. Returns how many bytes
    /// arrived, 0 when the connection closed, `None` when the buffer holds
    /// `max` unused bytes already.
    async fn fill(&mut self, max: usize) -> io::Result<Option<usize>> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let len = self.buf.len();
        if len == self.buf.capacity() {
            if len >= max {
                return Ok(None);
            }
            let grown = (len * 2).clamp(FIRST_READ_BYTES, max);
            self.buf.reserve_exact(grown - len);
        }
        self.stream.read_buf(&mut self.buf).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    #[test]
    fn request_heads_carry_canonical_names_in_order() {
        let lines: Vec<HeaderLine<'_>> = vec![
            ("Host", Cow::Borrowed("10.0.0.1:8080")),
            ("x-request-ID", Cow::Borrowed("a b")),
            ("Connection", Cow::Borrowed("close")),
        ];
        assert_eq!(
            request_head("GET", "/healthz?x=1", &lines),
            b"GET /healthz?x=1 HTTP/1.1\r\nHost: 10.0.0.1:8080\r\nX-Request-Id: a b\r\n\
              Connection: close\r\n\r\n"
        );
    }

    fn framing(head: &str) -> Result<Framing, Error> {
        let head = format!("{head}\r\n\r\n");
        Ok(parse_head(head.as_bytes(), false)?
            .unwrap()
            .framing
            .unwrap())
    }

    #[test]
    fn bodies_are_framed_as_rfc_9112_says() {
        assert_eq!(framing("HTTP/1.1 200 OK").unwrap(), Framing::Close);
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 7").unwrap(),
            Framing::Length(7)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 0").unwrap(),
            Framing::Done
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\ncontent-length: 7").unwrap(),
            Framing::Length(7)
        );
        assert!(matches!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8"),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: +7"),
            Err(Error::Malformed(_))
        ));
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\nContent-Length: 7")
                .unwrap(),
            Framing::Chunked(Chunk::Size)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip").unwrap(),
            Framing::Close
        );
        assert!(matches!(
            framing("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked"),
            Err(Error::Malformed(_))
        ));
        for code in [101, 204, 304] {
            let head = format!("HTTP/1.1 {code} X\r\nContent-Length: 7");
            assert_eq!(framing(&head).unwrap(), Framing::Done, "{code}");
        }
        let head = b"HTTP/1.1 100 Continue\r\n\r\n";
        assert_eq!(parse_head(head, false).unwrap().unwrap().framing, None);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n";
        assert_eq!(
            parse_head(head, true).unwrap().unwrap().framing,
            Some(Framing::Done)
        );
    }

    #[test]
    fn malformed_status_lines_are_worded_as_go_words_them() {
        let text = |head: &[u8]| match parse_head(head, false) {
            Err(Error::Malformed(text)) => text,
            _ => panic!("{head:?} parsed"),
        };
        assert_eq!(
            text(b"PRI * HTTP/2.0\r\n\r\n"),
            r#"malformed HTTP status code "*""#
        );
        assert_eq!(
            text(b"SSH-2.0-OpenSSH\r\n"),
            r#"malformed HTTP response "SSH-2.0-OpenSSH""#
        );
        assert_eq!(
            text(b"HTTP/1.1 2000 OK\r\n"),
            r#"malformed HTTP status code "2000""#
        );
        assert_eq!(
            text(b"HTTP/x 200 OK\r\n"),
            r#"malformed HTTP version "HTTP/x""#
        );
    }

    #[test]
    fn chunk_sizes_are_hex_before_any_extension() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"1A ; name=value").unwrap(), 26);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        assert_eq!(chunk_size(b"ff\t").unwrap(), 255);
        for bad in [
            &b""[..],
            b"x",
            b"-1",
            b"+1",
            b" 1",
            b"; name=value",
            b"11111111111111111",
        ] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }

    /// Serves `answer` to one request on a duplex pipe, read in pieces of
    /// `piece` bytes, and returns the response's status and body (up to
    /// `limit`).
    async fn answer(answer: &[u8], piece: usize, limit: usize) -> Result<(u16, Vec<u8>), Error> {
        let (client, mut server) = tokio::io::duplex(64);
        let answer = answer.to_vec();
        let server = tokio::spawn(async move {
            let mut request = [0u8; 256];
            let _ = server.read(&mut request).await;
            for part in answer.chunks(piece) {
                if server.write_all(part).await.is_err() {
                    return;
                }
            }
        });
        let lines: Vec<HeaderLine<'_>> = vec![("Host", Cow::Borrowed("a"))];
        let result = async {
            let mut response = send(
                Box::new(client),
                request_head("GET", "/", &lines),
                b"",
                false,
            )
            .await?;
            let mut body = Vec::new();
            response.body.read(&mut body, limit).await?;
            Ok((response.status.as_u16(), body))
        }
        .await;
        server.abort();
        result
    }

    #[tokio::test]
    async fn bodies_are_read_in_any_pieces_up_to_the_limit() {
        let chunked =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                        3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: 1\r\n\r\n";
        let sized = b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nabcde";
        let closed = b"HTTP/1.0 500 Oops\r\n\r\nabcde";
        for piece in [1, 2, 7, 4096] {
            assert_eq!(
                answer(chunked, piece, 100).await.unwrap(),
                (200, b"abcde".to_vec())
            );
            assert_eq!(
                answer(chunked, piece, 4).await.unwrap(),
                (200, b"abcd".to_vec())
            );
            assert_eq!(
                answer(sized, piece, 100).await.unwrap(),
                (404, b"abcde".to_vec())
            );
            assert_eq!(
                answer(closed, piece, 100).await.unwrap(),
                (500, b"abcde".to_vec())
            );
        }
    }

    #[tokio::test]
    async fn a_cut_short_answer_says_where_it_ended() {
        assert!(matches!(answer(b"", 1, 10).await, Err(Error::Eof)));
        assert!(matches!(
            answer(b"HTTP/1.1 200 OK\r\n", 1, 10).await,
            Err(Error::Eof)
        ));
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc";
        assert!(matches!(
            answer(short, 2, 10).await,
            Err(Error::UnexpectedEof)
        ));
        let short = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
        assert!(matches!(
            answer(short, 2, 10).await,
            Err(Error::UnexpectedEof)
        ));
        let too_many = b"HTTP/1.1 102 Processing\r\n\r\n".repeat(MAX_INFORMATIONAL_RESPONSES + 1);
        assert!(matches!(
            answer(&too_many, 64, 10).await,
            Err(Error::TooManyInformational)
        ));
        let enough = [
            b"HTTP/1.1 102 Processing\r\n\r\n".repeat(MAX_INFORMATIONAL_RESPONSES),
            b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
        ]
        .concat();
        assert_eq!(answer(&enough, 64, 10).await.unwrap(), (204, Vec::new()));
        assert!(matches!(
            answer(b"HTTP/9 200 OK\r\n\r\n", 64, 10).await,
            Err(Error::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn heads_past_either_limit_are_refused() {
        let mut big = b"HTTP/1.1 200 OK\r\nX-Filler: ".to_vec();
        big.resize(MAX_RESPONSE_HEAD_BYTES + 10, b'x');
        assert!(matches!(
            answer(&big, 4096, 10).await,
            Err(Error::HeadTooLarge)
        ));
        let many = [
            b"HTTP/1.1 200 OK\r\n".to_vec(),
            b"A: b\r\n".repeat(MAX_RESPONSE_HEADER_LINES + 1),
            b"\r\n".to_vec(),
        ]
        .concat();
        assert!(matches!(
            answer(&many, 4096, 10).await,
            Err(Error::HeadTooLarge)
        ));
    }
}
