//! Informational (1xx) responses counted before the final one over
//! HTTP/2, so that a server sending them without end is given up on as Go's
//! transports do (`max1xxResponses`, 5 in `net/http` and in `x/net/http2`),
//! not read until the deadline. (The HTTP/1.1 exchange counts its own,
//! [`super::http1`].)
//!
//! hyper skips HTTP/2 1xx responses silently, so the frames are counted as
//! they are read ([`H2Headers`]): a HEADERS frame on the request's stream
//! without END_STREAM is a 1xx response or the final one with a body
//! (trailers always end the stream), so more than six of them mean more
//! than five 1xx responses. (A sixth 1xx followed by a final response
//! without a body is let through, which Go would refuse: the frames' HPACK
//! is not decoded here.)

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::probe::tap::ReadObserver;

/// Informational (1xx) responses accepted before the final one: Go's
/// transport gives up after five (`max1xxResponses`); hyper would read any
/// number until the deadline.
pub const MAX_INFORMATIONAL_RESPONSES: usize = 5;

/// The 1xx responses of one request, counted as they arrive; clones share
/// the count.
#[derive(Clone, Default)]
pub(super) struct Informational(Arc<(AtomicUsize, Notify)>);

impl Informational {
    /// One more response, of which `allowed` are: whether that is too many.
    fn seen(&self, allowed: usize) -> bool {
        let (seen, too_many) = &*self.0;
        let over = seen.fetch_add(1, Ordering::Relaxed) + 1 > allowed;
        if over {
            too_many.notify_one();
        }
        over
    }

    /// Resolves once more than [`MAX_INFORMATIONAL_RESPONSES`] arrived.
    pub(super) async fn too_many(&self) {
        self.0.1.notified().await;
    }
}

/// The HTTP/2 stream of a connection's only request: the client's first.
const REQUEST_STREAM: u32 = 1;
const FRAME_HEADER_BYTES: usize = 9;
const HEADERS: u8 = 0x1;
const END_STREAM: u8 = 0x1;

/// Counts, on an HTTP/2 connection's reads (a [`ReadTap`]'s observer), the
/// HEADERS frames of the request's stream that do not end it: the 1xx
/// responses and the final one.
///
/// [`ReadTap`]: crate::probe::tap::ReadTap
pub(super) struct H2Headers {
    counted: Informational,
    /// The frame header being read, and how much of it.
    header: [u8; FRAME_HEADER_BYTES],
    filled: usize,
    /// Payload bytes of the current frame still to skip.
    payload: usize,
    /// Too many seen: the reads end here, before hyper's HTTP/2 code
    /// parses (and queues) any more of them.
    too_many: bool,
}

impl H2Headers {
    pub(super) fn new(counted: Informational) -> Self {
        H2Headers {
            counted,
            header: [0; FRAME_HEADER_BYTES],
            filled: 0,
            payload: 0,
            too_many: false,
        }
    }

    fn frame(&mut self) {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = self.header;
        self.payload = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
        let stream = u32::from_be_bytes([s0 & 0x7f, s1, s2, s3]);
        if kind == HEADERS && stream == REQUEST_STREAM && flags & END_STREAM == 0 {
            self.too_many |= self.counted.seen(MAX_INFORMATIONAL_RESPONSES + 1);
        }
    }
}

impl ReadObserver for H2Headers {
    fn observe(&mut self, _read: &io::Result<()>, mut bytes: &[u8]) {
        // The server sends frames from its first byte (its preface is a
        // SETTINGS frame).
        while !bytes.is_empty() {
            if self.payload > 0 {
                let skipped = self.payload.min(bytes.len());
                self.payload -= skipped;
                bytes = &bytes[skipped..];
                continue;
            }
            let taken = (FRAME_HEADER_BYTES - self.filled).min(bytes.len());
            self.header[self.filled..self.filled + taken].copy_from_slice(&bytes[..taken]);
            self.filled += taken;
            bytes = &bytes[taken..];
            if self.filled == FRAME_HEADER_BYTES {
                self.filled = 0;
                self.frame();
            }
        }
    }

    fn refusal(&mut self) -> Option<io::Error> {
        self.too_many
            .then(|| io::Error::other("http2: too many 1xx informational responses"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len().to_be_bytes();
        let mut frame = vec![len[5], len[6], len[7], kind, flags];
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    /// `:status: 100`, a literal with the static table's `:status` name.
    const STATUS_100: &[u8] = b"\x08\x03100";

    fn count(bytes: &[u8], read_size: usize) -> (usize, bool) {
        let counted = Informational::default();
        let mut observer = H2Headers::new(counted.clone());
        for read in bytes.chunks(read_size) {
            observer.observe(&Ok(()), read);
        }
        let too_many = {
            let waiting = counted.too_many();
            tokio::pin!(waiting);
            futures::FutureExt::now_or_never(waiting).is_some()
        };
        assert_eq!(observer.refusal().is_some(), too_many);
        (counted.0.0.load(Ordering::Relaxed), too_many)
    }

    #[test]
    fn headers_of_the_request_stream_that_do_not_end_it_are_counted_in_any_reads() {
        let mut bytes = frame(0x4, 0, 0, &[0; 6]); // SETTINGS
        for _ in 0..MAX_INFORMATIONAL_RESPONSES {
            bytes.extend(frame(HEADERS, 0x4, 1, STATUS_100));
        }
        bytes.extend(frame(0x6, 0, 0, &[0; 8])); // PING
        bytes.extend(frame(HEADERS, 0x4, 1, b"\x88")); // :status 200
        bytes.extend(frame(0x0, 0, 1, &[b'x'; 300])); // DATA
        bytes.extend(frame(HEADERS, 0x5, 1, b"")); // trailers
        bytes.extend(frame(HEADERS, 0x4, 3, STATUS_100)); // another stream
        for read_size in [1, 2, 9, 10, 4096] {
            assert_eq!(
                count(&bytes, read_size),
                (MAX_INFORMATIONAL_RESPONSES + 1, false),
                "reads of {read_size}"
            );
        }
    }

    #[test]
    fn a_seventh_header_block_that_does_not_end_the_stream_is_too_many() {
        let bytes: Vec<u8> = (0..=MAX_INFORMATIONAL_RESPONSES + 1)
            .flat_map(|_| frame(HEADERS, 0x4, 1, STATUS_100))
            .collect();
        assert_eq!(count(&bytes, 7), (MAX_INFORMATIONAL_RESPONSES + 2, true));
    }
}
