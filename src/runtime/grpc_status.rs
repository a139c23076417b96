//! gRPC status as podprobe's two gRPC clients (the CRI runtime's and the
//! health probe's) read and show it: Go's rendering of a status, since the
//! kubelet's events embed it, and a layer that keeps a server's malformed
//! status details from reaching tonic.

use http_body_util::BodyExt;
use tonic::Code;
use tonic::body::Body;

/// A gRPC status, displayed as Go's gRPC renders errors
/// (`rpc error: code = NotFound desc = ...`) because the kubelet's probe
/// events embed that text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcStatus {
    pub code: Code,
    pub message: String,
}

impl std::fmt::Display for GrpcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rpc error: code = {} desc = {}",
            go_code_name(self.code),
            self.message
        )
    }
}

impl From<&tonic::Status> for GrpcStatus {
    fn from(status: &tonic::Status) -> Self {
        GrpcStatus {
            code: status.code(),
            message: status.message().to_string(),
        }
    }
}

/// grpc-go's `codes.Code` names (`codes.Code.String()`), which appear in
/// its status error text.
pub fn go_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// A gRPC client service whose responses carry no `grpc-status-details-bin`.
pub type WithoutStatusDetails<S> =
    tower::util::MapResponse<S, fn(http::Response<Body>) -> http::Response<Body>>;

/// `service` with `grpc-status-details-bin` removed from every response's
/// headers and trailers before tonic reads them: tonic panics on a value
/// that is not base64 (`Status::from_header_map`, grpc/grpc-rust#2618), and
/// any server a pod runs can send one. podprobe never reads status details;
/// the RPC's result is still `grpc-status` and `grpc-message`.
pub fn without_status_details<S>(service: S) -> WithoutStatusDetails<S> {
    tower::util::MapResponse::new(service, strip_status_details)
}

const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";

fn strip_status_details(response: http::Response<Body>) -> http::Response<Body> {
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(GRPC_STATUS_DETAILS);
    let body = body.map_frame(|frame| match frame.into_trailers() {
        Ok(mut trailers) => {
            trailers.remove(GRPC_STATUS_DETAILS);
            hyper::body::Frame::trailers(trailers)
        }
        Err(frame) => frame,
    });
    http::Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fuzz suite found (tests/fuzz.rs,
    /// grpc_health_response_never_panics): a status-details value that is
    /// not base64 panicked the probe inside tonic.
    #[tokio::test]
    async fn status_details_that_are_not_base64_never_reach_tonic() {
        let mut status = http::HeaderMap::new();
        status.insert("grpc-status", http::HeaderValue::from_static("5"));
        status.insert(
            GRPC_STATUS_DETAILS,
            http::HeaderValue::from_static("'#]%2F*"),
        );
        // tonic's own decoding panics on it (grpc/grpc-rust#2618); once it
        // no longer does, without_status_details can go.
        let upstream = std::panic::catch_unwind(|| tonic::Status::from_header_map(&status));
        assert!(upstream.is_err(), "tonic no longer panics on bad details");
        let trailers = status.clone();
        let frames: Vec<Result<_, tonic::Status>> = vec![
            Ok(hyper::body::Frame::data(bytes::Bytes::from_static(b"x"))),
            Ok(hyper::body::Frame::trailers(trailers)),
        ];
        let body = Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )));
        let mut response = http::Response::new(body);
        *response.headers_mut() = status;

        let (parts, body) = strip_status_details(response).into_parts();
        assert!(!parts.headers.contains_key(GRPC_STATUS_DETAILS));
        let trailers = body.collect().await.unwrap().trailers().cloned().unwrap();
        assert!(!trailers.contains_key(GRPC_STATUS_DETAILS));
        for headers in [&parts.headers, &trailers] {
            let status = tonic::Status::from_header_map(headers).expect("a status");
            assert_eq!(status.code(), Code::NotFound);
        }
    }

    #[test]
    fn statuses_read_as_grpc_go_renders_them() {
        let status = tonic::Status::new(Code::Cancelled, "stop");
        assert_eq!(
            GrpcStatus::from(&status).to_string(),
            "rpc error: code = Canceled desc = stop"
        );
    }
}
