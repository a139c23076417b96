//! A stream whose writes wait for the next flush, or for the next read, and
//! then leave in one `write`.
//!
//! h2 writes the connection preface on its own and flushes each poll's
//! frames separately, so a gRPC probe made over a plain socket sent the
//! preface, SETTINGS, HEADERS and DATA in separate segments; on loopback and
//! on the node's bridge each `write` also runs the receiver's TCP path, and
//! that was most of the system time the gRPC probe spent above the floor
//! (bench/RESULTS.md, "gRPC against the kubelet and the floor"). Batched,
//! everything the client has to say before the server answers leaves at
//! once, as grpc-go's buffered writer sends it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes held for a flush. A probe's client writes a few hundred;
/// past this, a write goes out before more is taken.
const MAX_PENDING_BYTES: usize = 16 * 1024;

/// `inner` with its writes held until a flush or a read.
pub(crate) struct BatchedWrites<S> {
    inner: S,
    pending: Vec<u8>,
    /// How much of `pending` has been written.
    written: usize,
}

impl<S> BatchedWrites<S> {
    pub(crate) fn new(inner: S) -> Self {
        BatchedWrites {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

impl<S: AsyncWrite + Unpin> BatchedWrites<S> {
    /// Writes everything held.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for BatchedWrites<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Whoever waits for the server has said all it will say before the
        // answer: it must not wait behind its own held bytes.
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for BatchedWrites<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.pending.len() >= MAX_PENDING_BYTES {
            ready!(this.poll_drain(cx))?;
        }
        let take = buf.len().min(MAX_PENDING_BYTES - this.pending.len());
        this.pending.extend_from_slice(&buf[..take]);
        Poll::Ready(Ok(take))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A socket pair on loopback; the client side batched.
    async fn pair() -> (BatchedWrites<TcpStream>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let client = client.expect("connect");
        client.set_nodelay(true).expect("nodelay");
        (BatchedWrites::new(client), accepted.expect("accept").0)
    }

    #[tokio::test]
    async fn writes_leave_together_at_the_flush() {
        let (mut client, mut server) = pair().await;
        client.write_all(b"PRI * HTTP/2.0").await.expect("write");
        client.write_all(b" and frames").await.expect("write");
        // Nothing left before the flush: the server reads nothing.
        let mut one = [0u8; 1];
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(50), server.read(&mut one)).await;
        assert!(early.is_err(), "a byte left before the flush");
        client.flush().await.expect("flush");
        let mut got = vec![0u8; 25];
        server.read_exact(&mut got).await.expect("read");
        assert_eq!(got, b"PRI * HTTP/2.0 and frames");
    }

    #[tokio::test]
    async fn a_read_sends_what_is_held_first() {
        let (mut client, mut server) = pair().await;
        client.write_all(b"ping").await.expect("write");
        let answer = tokio::spawn(async move {
            let mut got = [0u8; 4];
            server.read_exact(&mut got).await.expect("server read");
            server.write_all(b"pong").await.expect("server write");
            got
        });
        let mut pong = [0u8; 4];
        // Without the held bytes sent first, both sides would wait forever.
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_exact(&mut pong),
        )
        .await
        .expect("the server answered: the held bytes went out before the read")
        .expect("client read");
        assert_eq!(&pong, b"pong");
        assert_eq!(&answer.await.expect("server task"), b"ping");
    }

    #[tokio::test]
    async fn no_more_than_the_bound_is_held() {
        let (mut client, _server) = pair().await;
        let big = vec![7u8; MAX_PENDING_BYTES * 3];
        client.write_all(&big).await.expect("write");
        assert!(client.pending.len() <= MAX_PENDING_BYTES);
    }
}
