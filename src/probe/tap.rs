//! A stream wrapper that shows every read to an observer before passing it
//! on. Probes use it to look at what a server sends first without taking it
//! from the protocol code: the HTTP probe keeps the first bytes of a failed
//! TLS handshake (to tell a plain-HTTP answer apart), the gRPC probe checks
//! that the server's first HTTP/2 frame is SETTINGS.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Sees each completed read on a [`ReadTap`].
pub(crate) trait ReadObserver {
    /// `read` is what the read returned; `bytes` what it added to the buffer
    /// (empty at the end of the stream and on an error).
    fn observe(&mut self, read: &io::Result<()>, bytes: &[u8]);

    /// An error to give the reader instead of the read just observed: the
    /// observer has seen enough to end the stream (the bytes are never
    /// parsed).
    fn refusal(&mut self) -> Option<io::Error> {
        None
    }
}

/// `inner` with its reads shown to `observer`; writes pass straight through.
pub(crate) struct ReadTap<S, O> {
    inner: S,
    pub(crate) observer: O,
}

impl<S, O> ReadTap<S, O> {
    pub(crate) fn new(inner: S, observer: O) -> Self {
        ReadTap { inner, observer }
    }
}

impl<S: AsyncRead + Unpin, O: ReadObserver + Unpin> AsyncRead for ReadTap<S, O> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = ready!(Pin::new(&mut this.inner).poll_read(cx, buf));
        this.observer.observe(&read, &buf.filled()[before..]);
        match this.observer.refusal() {
            Some(refused) => {
                buf.set_filled(before);
                Poll::Ready(Err(refused))
            }
            None => Poll::Ready(read),
        }
    }
}

impl<S: AsyncWrite + Unpin, O: Unpin> AsyncWrite for ReadTap<S, O> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Default)]
    struct Record(Vec<Vec<u8>>);

    impl ReadObserver for Record {
        fn observe(&mut self, _read: &io::Result<()>, bytes: &[u8]) {
            self.0.push(bytes.to_vec());
        }
    }

    #[tokio::test]
    async fn observer_sees_each_read_and_the_reader_gets_every_byte() {
        let (client, mut server) = tokio::io::duplex(64);
        let mut tap = ReadTap::new(client, Record::default());
        server.write_all(b"abc").await.expect("write to the duplex");
        drop(server);
        let mut got = Vec::new();
        tap.read_to_end(&mut got).await.expect("read the duplex");
        assert_eq!(got, b"abc");
        assert_eq!(tap.observer.0, vec![b"abc".to_vec(), Vec::new()]);
    }
}
