//! One `grpc.health.v1.Health/Check` call on an HTTP/2 connection, read as
//! grpc-go's client reads a unary answer (the kubelet's `pkg/probe/grpc`
//! uses it): the response headers' HTTP status and content-type, the one
//! length-prefixed message, then `grpc-status` and `grpc-message` from the
//! trailers. The statuses and their texts are grpc-go's
//! (`internal/transport/http2_client.go` `operateHeaders`, `rpc_util.go`
//! `recvMsg`/`checkRecvPayload`, `stream.go` `recvMsg`), so that a probe's
//! message is the kubelet's.
//!
//! The call runs in the probe's own task with its connection (no spawned
//! connection task, no channel between them), and holds at most one
//! message of [`MAX_HEALTH_RESPONSE_BYTES`] plus one DATA frame.

use bytes::{Buf, Bytes, BytesMut};
use h2::Reason;
use h2::client::ResponseFuture;
use http::{HeaderMap, StatusCode};
use prost::Message;
use tonic::Code;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::runtime::grpc_status::GrpcStatus;
use podprobe_core::util::gofmt::{go_quote, go_quote_bytes};

/// The largest health response decoded. A `HealthCheckResponse` is a
/// status number, a few bytes; grpc-go (the kubelet) accepts 4 MiB, which a
/// server could send and then hold its trailers until the probe's timeout,
/// pinning it per probe. Larger responses fail on their length prefix,
/// before any of them is buffered.
pub const MAX_HEALTH_RESPONSE_BYTES: usize = 4 * 1024;

/// The method's path.
pub(super) const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// A gRPC message's prefix: compressed flag and big-endian length.
const MESSAGE_PREFIX_LEN: usize = 5;

/// What the Check call came back with.
#[derive(Debug)]
pub(super) enum Answer {
    /// The server answered with this `ServingStatus` number.
    Responded(i32),
    /// The RPC failed with this status.
    Failed(GrpcStatus),
    /// The stream ended well without a message: grpc-go's unary call then
    /// returns `io.EOF` itself, not a status.
    NoMessage,
}

/// The request's message with its length prefix, as sent on the wire.
pub(super) fn request_message(service: &str) -> Bytes {
    let request = HealthCheckRequest {
        service: service.to_owned(),
    };
    let length = request.encoded_len();
    let mut framed = BytesMut::with_capacity(MESSAGE_PREFIX_LEN + length);
    framed.extend_from_slice(&[0]);
    // A service name is bounded by the pod spec (V-rules) far below 4 GiB.
    framed.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    request
        .encode(&mut framed)
        .expect("a BytesMut sized to the message has room for it");
    framed.freeze()
}

/// grpc-go's `grpc-timeout` value for `timeout`: the finest unit whose
/// count fits in 8 digits, rounded up (`grpcutil.EncodeDuration`).
pub(super) fn grpc_timeout(timeout: std::time::Duration) -> String {
    const MAX_VALUE: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    if nanos == 0 {
        return "0n".to_owned();
    }
    let units: [(u128, char); 5] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
    ];
    for (size, unit) in units {
        let count = nanos.div_ceil(size);
        if count <= MAX_VALUE {
            return format!("{count}{unit}");
        }
    }
    format!("{}H", nanos.div_ceil(3_600_000_000_000))
}

/// Reads the answer to the request `response` belongs to.
pub(super) async fn read_answer(response: ResponseFuture) -> Answer {
    match read(response).await {
        Ok(answer) => answer,
        Err(status) => Answer::Failed(status),
    }
}

async fn read(response: ResponseFuture) -> Result<Answer, GrpcStatus> {
    let (parts, mut body) = response.await.map_err(stream_error)?.into_parts();
    let trailers_only = body.is_end_stream();
    let head = read_headers(Some(parts.status), &parts.headers, trailers_only)?;
    let encoding = grpc_encoding(&parts.headers);
    let mut messages = MessageReader::default();
    let mut answer = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(stream_error)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        messages.push(&chunk);
        while let Some(message) = messages.next(encoding.as_deref())? {
            if answer.is_some() {
                return Err(status(
                    Code::Unknown,
                    "grpc: client streaming protocol violation: get <nil>, want <EOF>",
                ));
            }
            answer = Some(decode(message)?);
        }
    }
    let end = match head {
        Some(end) => end,
        None => match body.trailers().await.map_err(stream_error)? {
            Some(trailers) => read_headers(None, &trailers, true)?.unwrap_or_else(ok_status),
            None => {
                return Err(status(
                    Code::Internal,
                    "server closed the stream without sending trailers",
                ));
            }
        },
    };
    if messages.partial() {
        return Err(status(Code::Internal, "unexpected EOF"));
    }
    if end.code != Code::Ok {
        return Err(end);
    }
    Ok(answer.map_or(Answer::NoMessage, Answer::Responded))
}

fn status(code: Code, message: impl Into<String>) -> GrpcStatus {
    GrpcStatus {
        code,
        message: message.into(),
    }
}

fn ok_status() -> GrpcStatus {
    status(Code::Ok, "")
}

/// grpc-go's reading of a HEADERS block: `http_status` is the initial
/// block's, `None` for trailers. An error ends the call; `Some` is the
/// call's status when the block ends the stream.
fn read_headers(
    http_status: Option<StatusCode>,
    headers: &HeaderMap,
    end_stream: bool,
) -> Result<Option<GrpcStatus>, GrpcStatus> {
    let mut code = Code::Unknown;
    for value in headers.get_all("grpc-status") {
        let text = String::from_utf8_lossy(value.as_bytes());
        match text.parse::<i32>() {
            Ok(number) => code = Code::from_i32(number),
            Err(error) => {
                return Err(status(
                    Code::Internal,
                    format!(
                        "transport: malformed grpc-status: strconv.ParseInt: parsing {}: {}",
                        go_quote_bytes(value.as_bytes()),
                        go_parse_int_reason(&error)
                    ),
                ));
            }
        }
    }
    if let Some(http_status) = http_status {
        let content_type_error = match headers
            .get_all(http::header::CONTENT_TYPE)
            .iter()
            .next_back()
        {
            None => Some("malformed header: missing HTTP content-type".to_owned()),
            Some(value) if is_grpc_content_type(value.as_bytes()) => None,
            Some(value) => Some(format!(
                "transport: received unexpected content-type {}",
                go_quote_bytes(value.as_bytes())
            )),
        };
        let status_error = (http_status != StatusCode::OK).then(|| {
            format!(
                "unexpected HTTP status code received from server: {} ({})",
                http_status.as_u16(),
                http_status.canonical_reason().unwrap_or("")
            )
        });
        if content_type_error.is_some() || status_error.is_some() {
            let errors: Vec<String> = status_error.into_iter().chain(content_type_error).collect();
            return Err(status(code_of_http_status(http_status), errors.join("; ")));
        }
    }
    if !end_stream {
        return Ok(None);
    }
    let message = headers
        .get_all("grpc-message")
        .iter()
        .next_back()
        .map(|value| percent_decode(value.as_bytes()))
        .unwrap_or_default();
    Ok(Some(status(code, message)))
}

/// grpc-go's `HTTPStatusConvTab`, `Unknown` for the rest (200 included:
/// a 200 answer lands here only with a wrong content-type).
fn code_of_http_status(http_status: StatusCode) -> Code {
    match http_status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// `application/grpc`, alone or followed by `+` or `;` (grpc-go's
/// `grpcutil.ContentSubtype`).
fn is_grpc_content_type(value: &[u8]) -> bool {
    const BASE: &[u8] = b"application/grpc";
    value == BASE
        || (value.starts_with(BASE) && matches!(value.get(BASE.len()), Some(b'+') | Some(b';')))
}

fn grpc_encoding(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all("grpc-encoding")
        .iter()
        .next_back()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// grpc-go's `decodeGrpcMessage`: `%XX` decoded, anything else kept.
fn percent_decode(value: &[u8]) -> String {
    let mut decoded = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let hex = (value[i] == b'%' && i + 2 < value.len())
            .then(|| std::str::from_utf8(&value[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|digits| u8::from_str_radix(digits, 16).ok());
        match hex {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(value[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// The reason strconv.ParseInt gives for a value Rust's parser refused.
fn go_parse_int_reason(error: &std::num::ParseIntError) -> &'static str {
    use std::num::IntErrorKind;
    match error.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
        _ => "invalid syntax",
    }
}

/// The call's status for a stream error: grpc-go's for a server's
/// RST_STREAM (`http2ErrConvTab`), else the connection's loss.
fn stream_error(error: h2::Error) -> GrpcStatus {
    if let Some(reason) = error.reason()
        && error.is_reset()
        && error.is_remote()
    {
        return status(
            code_of_reset(reason),
            format!(
                "stream terminated by RST_STREAM with error code: {}",
                reason_name(reason)
            ),
        );
    }
    let cause = match error.get_io() {
        Some(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::BrokenPipe
            ) =>
        {
            "EOF".to_owned()
        }
        Some(io) => io.to_string(),
        None => error.to_string(),
    };
    status(
        Code::Unavailable,
        format!("error reading from server: {cause}"),
    )
}

fn code_of_reset(reason: Reason) -> Code {
    match reason {
        Reason::FLOW_CONTROL_ERROR | Reason::ENHANCE_YOUR_CALM => Code::ResourceExhausted,
        Reason::REFUSED_STREAM => Code::Unavailable,
        Reason::CANCEL => Code::Cancelled,
        Reason::INADEQUATE_SECURITY => Code::PermissionDenied,
        Reason::NO_ERROR
        | Reason::PROTOCOL_ERROR
        | Reason::INTERNAL_ERROR
        | Reason::SETTINGS_TIMEOUT
        | Reason::STREAM_CLOSED
        | Reason::FRAME_SIZE_ERROR
        | Reason::COMPRESSION_ERROR
        | Reason::CONNECT_ERROR
        | Reason::HTTP_1_1_REQUIRED => Code::Internal,
        _ => Code::Unknown,
    }
}

/// Go's `http2.ErrCode.String()`.
fn reason_name(reason: Reason) -> String {
    let name = match reason {
        Reason::NO_ERROR => "NO_ERROR",
        Reason::PROTOCOL_ERROR => "PROTOCOL_ERROR",
        Reason::INTERNAL_ERROR => "INTERNAL_ERROR",
        Reason::FLOW_CONTROL_ERROR => "FLOW_CONTROL_ERROR",
        Reason::SETTINGS_TIMEOUT => "SETTINGS_TIMEOUT",
        Reason::STREAM_CLOSED => "STREAM_CLOSED",
        Reason::FRAME_SIZE_ERROR => "FRAME_SIZE_ERROR",
        Reason::REFUSED_STREAM => "REFUSED_STREAM",
        Reason::CANCEL => "CANCEL",
        Reason::COMPRESSION_ERROR => "COMPRESSION_ERROR",
        Reason::CONNECT_ERROR => "CONNECT_ERROR",
        Reason::ENHANCE_YOUR_CALM => "ENHANCE_YOUR_CALM",
        Reason::INADEQUATE_SECURITY => "INADEQUATE_SECURITY",
        Reason::HTTP_1_1_REQUIRED => "HTTP_1_1_REQUIRED",
        other => return format!("unknown error code 0x{:x}", u32::from(other)),
    };
    name.to_owned()
}

fn decode(message: Bytes) -> Result<i32, GrpcStatus> {
    HealthCheckResponse::decode(message)
        .map(|response| response.status)
        .map_err(|_| {
            // Go's proto package words every malformed input this way.
            status(
                Code::Internal,
                "grpc: failed to unmarshal the received message: proto: cannot parse invalid wire-format data",
            )
        })
}

/// Length-prefixed messages out of a stream's DATA.
#[derive(Default)]
struct MessageReader {
    buffered: BytesMut,
}

impl MessageReader {
    fn push(&mut self, chunk: &Bytes) {
        self.buffered.extend_from_slice(chunk);
    }

    /// The next whole message, checked as grpc-go's parser checks it: its
    /// length against the limit as soon as the prefix is in (so nothing of
    /// a larger one is kept), its format once it is whole.
    fn next(&mut self, encoding: Option<&str>) -> Result<Option<Bytes>, GrpcStatus> {
        if self.buffered.len() < MESSAGE_PREFIX_LEN {
            return Ok(None);
        }
        let format = self.buffered[0];
        let length = u32::from_be_bytes([
            self.buffered[1],
            self.buffered[2],
            self.buffered[3],
            self.buffered[4],
        ]) as usize;
        if length > MAX_HEALTH_RESPONSE_BYTES {
            return Err(status(
                Code::ResourceExhausted,
                format!(
                    "grpc: received message larger than max ({length} vs. {MAX_HEALTH_RESPONSE_BYTES})"
                ),
            ));
        }
        if self.buffered.len() < MESSAGE_PREFIX_LEN + length {
            return Ok(None);
        }
        self.buffered.advance(MESSAGE_PREFIX_LEN);
        let message = self.buffered.split_to(length).freeze();
        match (format, encoding) {
            (0, _) => Ok(Some(message)),
            (1, None | Some("identity" | "")) => Err(status(
                Code::Internal,
                "grpc: compressed flag set with identity or empty encoding",
            )),
            // The kubelet's client registers no decompressor.
            (1, Some(encoding)) => Err(status(
                Code::Internal,
                format!(
                    "grpc: Decompressor is not installed for grpc-encoding {}",
                    go_quote(encoding)
                ),
            )),
            (other, _) => Err(status(
                Code::Internal,
                format!("grpc: received unexpected payload format {other}"),
            )),
        }
    }

    /// Whether the stream ended inside a message.
    fn partial(&self) -> bool {
        !self.buffered.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::Duration;

    fn headers(fields: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        map
    }

    fn err(code: Code, message: &str) -> Result<Option<GrpcStatus>, GrpcStatus> {
        Err(status(code, message))
    }

    #[test]
    fn g5_response_headers_are_read_as_grpc_go_reads_them() {
        let grpc = [("content-type", "application/grpc")];
        assert_eq!(
            read_headers(Some(StatusCode::OK), &headers(&grpc), false),
            Ok(None)
        );
        assert_eq!(
            read_headers(
                Some(StatusCode::OK),
                &headers(&[("content-type", "application/grpc+proto")]),
                false
            ),
            Ok(None)
        );
        assert_eq!(
            read_headers(
                Some(StatusCode::NOT_FOUND),
                &headers(&[("content-type", "text/html")]),
                false
            ),
            err(
                Code::Unimplemented,
                "unexpected HTTP status code received from server: 404 (Not Found); \
                 transport: received unexpected content-type \"text/html\""
            )
        );
        assert_eq!(
            read_headers(
                Some(StatusCode::OK),
                &headers(&[("content-type", "application/grpcx")]),
                false
            ),
            err(
                Code::Unknown,
                "transport: received unexpected content-type \"application/grpcx\""
            )
        );
        assert_eq!(
            read_headers(Some(StatusCode::SERVICE_UNAVAILABLE), &headers(&grpc), true),
            err(
                Code::Unavailable,
                "unexpected HTTP status code received from server: 503 (Service Unavailable)"
            )
        );
        assert_eq!(
            read_headers(Some(StatusCode::OK), &HeaderMap::new(), false),
            err(Code::Unknown, "malformed header: missing HTTP content-type")
        );
        // Trailers-only: the status is in the one block.
        assert_eq!(
            read_headers(
                Some(StatusCode::OK),
                &headers(&[
                    ("content-type", "application/grpc"),
                    ("grpc-status", "5"),
                    ("grpc-message", "unknown%20service%ZZ")
                ]),
                true
            ),
            Ok(Some(status(Code::NotFound, "unknown service%ZZ")))
        );
        // Trailers need no content-type; without grpc-status the code is
        // Unknown.
        assert_eq!(
            read_headers(None, &HeaderMap::new(), true),
            Ok(Some(status(Code::Unknown, "")))
        );
        assert_eq!(
            read_headers(None, &headers(&[("grpc-status", "x1")]), true),
            err(
                Code::Internal,
                "transport: malformed grpc-status: strconv.ParseInt: parsing \"x1\": invalid syntax"
            )
        );
        assert_eq!(
            read_headers(None, &headers(&[("grpc-status", "99999999999")]), true),
            err(
                Code::Internal,
                "transport: malformed grpc-status: strconv.ParseInt: parsing \"99999999999\": value out of range"
            )
        );
    }

    fn framed(format: u8, message: &[u8]) -> Bytes {
        let mut bytes = vec![format];
        bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
        bytes.extend_from_slice(message);
        Bytes::from(bytes)
    }

    #[test]
    fn g5_messages_are_split_across_chunks_and_bounded_on_their_prefix() {
        let mut reader = MessageReader::default();
        let whole = framed(0, &[8, 1]);
        reader.push(&whole.slice(..3));
        assert_eq!(reader.next(None), Ok(None));
        assert!(reader.partial());
        reader.push(&whole.slice(3..));
        assert_eq!(reader.next(None), Ok(Some(Bytes::from_static(&[8, 1]))));
        assert!(!reader.partial());

        let mut reader = MessageReader::default();
        reader.push(&Bytes::from_static(&[0, 0x40, 0, 0, 0]));
        assert_eq!(
            reader.next(None),
            Err(status(
                Code::ResourceExhausted,
                "grpc: received message larger than max (1073741824 vs. 4096)"
            ))
        );

        let mut reader = MessageReader::default();
        reader.push(&framed(1, &[8, 1]));
        assert_eq!(
            reader.next(Some("identity")),
            Err(status(
                Code::Internal,
                "grpc: compressed flag set with identity or empty encoding"
            ))
        );
        let mut reader = MessageReader::default();
        reader.push(&framed(1, &[8, 1]));
        assert_eq!(
            reader.next(Some("gzip")),
            Err(status(
                Code::Internal,
                "grpc: Decompressor is not installed for grpc-encoding \"gzip\""
            ))
        );
        let mut reader = MessageReader::default();
        reader.push(&framed(2, &[8, 1]));
        assert_eq!(
            reader.next(None),
            Err(status(
                Code::Internal,
                "grpc: received unexpected payload format 2"
            ))
        );
    }

    #[test]
    fn g4_grpc_timeout_is_encoded_as_grpc_go_encodes_it() {
        assert_eq!(grpc_timeout(Duration::ZERO), "0n");
        assert_eq!(grpc_timeout(Duration::from_nanos(99_999_999)), "99999999n");
        assert_eq!(grpc_timeout(Duration::from_secs(1)), "1000000u");
        assert_eq!(
            grpc_timeout(Duration::from_nanos(1_000_000_001)),
            "1000001u"
        );
        assert_eq!(grpc_timeout(Duration::from_secs(100)), "100000m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
    }

    #[test]
    fn g5_resets_read_as_grpc_go_reads_them() {
        assert_eq!(code_of_reset(Reason::CANCEL), Code::Cancelled);
        assert_eq!(code_of_reset(Reason::REFUSED_STREAM), Code::Unavailable);
        assert_eq!(code_of_reset(Reason::from(0xff)), Code::Unknown);
        assert_eq!(reason_name(Reason::PROTOCOL_ERROR), "PROTOCOL_ERROR");
        assert_eq!(reason_name(Reason::from(0xff)), "unknown error code 0xff");
    }

    #[test]
    fn the_request_is_one_length_prefixed_message() {
        let message = request_message("svc");
        assert_eq!(&message[..], &[0, 0, 0, 0, 5, 10, 3, b's', b'v', b'c']);
        assert_eq!(&request_message("")[..], &[0, 0, 0, 0, 0]);
    }
}
