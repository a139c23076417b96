//! The probe dialer shared by the TCP, HTTP and gRPC probes (the kubelet's
//! `probe.ProbeDialer`): every probe socket gets `SO_LINGER = {on, 1 s}` (T3)
//! and dial failures read like Go's `net.Dialer` errors, because the TCP and
//! HTTP probes put that text into their output.
//!
//! Like Go's serial dialer, a host name is resolved and its addresses are
//! tried in order, each with a share of the remaining time, and the first
//! error is the one reported. Every address is checked against the
//! operator's [`Destinations`] policy before it is dialled, so neither a
//! name that resolves to the node nor a redirect can reach a denied address.
//!
//! With [`Destinations::in_pod_network`] the socket is made inside the
//! pod's network namespace ([`super::netns`]) and connected from tokio as
//! any other. Names are still resolved by the node's resolver, as for every
//! probe (`dnsPolicy: Default`).
//!
//! Name lookups run the system resolver on tokio's blocking pool; at most
//! [`MAX_CONCURRENT_LOOKUPS`] run at once, so names that resolve slowly (a
//! pod author may choose them) cannot take every blocking thread.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout_at};

use crate::probe::netns;
use podprobe_core::spec::destinations::{DestinationDenied, Destinations};

/// The linger time the kubelet sets on probe sockets (T3): long enough for a
/// clean FIN, short enough that the socket does not hold a port for 60 s.
pub const PROBE_LINGER: Duration = Duration::from_secs(1);

/// Go never gives one address less than this share of the remaining time
/// when a name resolves to several addresses.
const MIN_SHARE_PER_ADDRESS: Duration = Duration::from_secs(2);

/// Name lookups in progress at once, node-wide. A lookup holds its slot
/// until the resolver returns, even when its probe has given up on it,
/// because the blocking thread is busy until then.
pub const MAX_CONCURRENT_LOOKUPS: usize = 16;

static LOOKUP_SLOTS: Semaphore = Semaphore::const_new(MAX_CONCURRENT_LOOKUPS);

/// A failed dial. `Display` gives Go's `net.OpError` text, e.g.
/// `dial tcp 127.0.0.1:1: connect: connection refused`.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The host name did not resolve (or resolved to no address).
    #[error("dial tcp: lookup {host}: {reason}")]
    Lookup { host: String, reason: String },
    /// A socket call (`socket`, `connect`) failed for `addr`.
    #[error("dial tcp {addr}: {syscall}: {}", go_errno_text(.source))]
    Syscall {
        addr: SocketAddr,
        syscall: &'static str,
        #[source]
        source: io::Error,
    },
    /// The deadline passed before `addr` accepted the connection.
    #[error("dial tcp {addr}: i/o timeout")]
    Timeout { addr: SocketAddr },
    /// The destination policy refuses `addr`; nothing was sent to it.
    #[error("dial tcp {addr}: {denied}")]
    Denied {
        addr: SocketAddr,
        denied: DestinationDenied,
    },
}

/// Connects to `host:port` before `deadline` with the probe socket options,
/// to an address `destinations` allows.
///
/// `host` may be an IP literal (no lookup), a name (resolved with the
/// system resolver) or empty, which Go takes to mean the local system.
pub async fn dial(
    host: &str,
    port: u16,
    deadline: Instant,
    destinations: &Destinations,
) -> Result<ProbeStream, DialError> {
    let addrs = resolve(host, port, deadline).await?;
    let mut first_error = None;
    for (tried, &addr) in addrs.iter().enumerate() {
        if let Err(denied) = destinations.check(addr.ip()) {
            first_error.get_or_insert(DialError::Denied { addr, denied });
            continue;
        }
        let Some(attempt_deadline) =
            share_of_deadline(Instant::now(), deadline, addrs.len() - tried)
        else {
            first_error.get_or_insert(DialError::Timeout { addr });
            break;
        };
        match connect(addr, attempt_deadline, destinations).await {
            Ok(stream) => return Ok(ProbeStream::new(stream)),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| no_such_host(host)))
}

/// The addresses to try for `host`, never empty.
async fn resolve(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, DialError> {
    if host.is_empty() {
        return Ok(vec![SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)]);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let lookup_error = |reason: String| DialError::Lookup {
        host: host.to_owned(),
        reason,
    };
    let lookup = async {
        let slot = LOOKUP_SLOTS
            .acquire()
            .await
            .map_err(|_| io::Error::other("lookups are shut down"))?;
        let name = host.to_owned();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect::<Vec<_>>)
        })
        .await
        .map_err(io::Error::other)?
    };
    match timeout_at(deadline, lookup).await {
        Err(_) => Err(lookup_error("i/o timeout".to_owned())),
        Ok(Err(error)) => Err(lookup_error(go_lookup_text(&error))),
        Ok(Ok(addrs)) => {
            if addrs.is_empty() {
                Err(no_such_host(host))
            } else {
                Ok(addrs)
            }
        }
    }
}

fn no_such_host(host: &str) -> DialError {
    DialError::Lookup {
        host: host.to_owned(),
        reason: "no such host".to_owned(),
    }
}

/// The deadline for one of `remaining` addresses still to try: an equal share
/// of the time left, but at least [`MIN_SHARE_PER_ADDRESS`] (or all of it
/// when less is left). `None` when the time is up.
fn share_of_deadline(now: Instant, deadline: Instant, remaining: usize) -> Option<Instant> {
    let left = deadline
        .checked_duration_since(now)
        .filter(|d| !d.is_zero())?;
    let share = left / u32::try_from(remaining.max(1)).unwrap_or(u32::MAX);
    Some(now + share.max(MIN_SHARE_PER_ADDRESS.min(left)))
}

async fn connect(
    addr: SocketAddr,
    deadline: Instant,
    destinations: &Destinations,
) -> Result<TcpStream, DialError> {
    let syscall_error = |syscall, source| DialError::Syscall {
        addr,
        syscall,
        source,
    };
    let socket = match (destinations.pod_network(), addr) {
        (Some(network), _) => netns::socket(network, addr, deadline).await,
        (None, SocketAddr::V4(_)) => TcpSocket::new_v4(),
        (None, SocketAddr::V6(_)) => TcpSocket::new_v6(),
    }
    .map_err(|source| match source.kind() {
        // Waiting for a namespace thread used up the time.
        io::ErrorKind::TimedOut => DialError::Timeout { addr },
        _ => syscall_error("socket", source),
    })?;
    set_probe_linger(&socket);
    // Go's net package sets TCP_NODELAY on every TCP connection; without it
    // the small HTTP/2 frames of a gRPC probe wait for the peer's delayed ACK
    // (~40 ms per probe on loopback, see bench/RESULTS.md).
    if let Err(error) = socket.set_nodelay(true) {
        tracing::debug!(%error, "could not set TCP_NODELAY on a probe socket");
    }
    match timeout_at(deadline, socket.connect(addr)).await {
        Err(_) => Err(DialError::Timeout { addr }),
        Ok(Err(source)) => Err(syscall_error("connect", source)),
        Ok(Ok(stream)) => Ok(stream),
    }
}

/// Sets `SO_LINGER = {on, 1 s}`. Like the kubelet's dialer, a failure is not
/// a dial failure: the probe works without it, only its socket lingers longer.
fn set_probe_linger(socket: &TcpSocket) {
    // Deprecated because closing a lingering socket can block the closing
    // thread; `ProbeStream` clears it before closing for that reason.
    #[allow(deprecated)]
    let set = socket.set_linger(Some(PROBE_LINGER));
    if let Err(error) = set {
        tracing::debug!(%error, "could not set SO_LINGER on a probe socket");
    }
}

/// Go's text for an OS error: the C library's message with a lower-case
/// first letter (`connection refused`), without Rust's ` (os error N)`.
pub(crate) fn go_errno_text(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match error.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_owned(),
        None => text,
    };
    lower_first(&text)
}

/// Approximates Go's resolver text from the system resolver's error: an
/// unknown name is `no such host` in Go; other failures keep the resolver's
/// own message.
fn go_lookup_text(error: &io::Error) -> String {
    let text = error.to_string();
    let reason = text
        .strip_prefix("failed to lookup address information: ")
        .unwrap_or(&text);
    if reason.starts_with("Name or service not known")
        || reason.starts_with("No address associated with hostname")
    {
        "no such host".to_owned()
    } else {
        lower_first(reason)
    }
}

fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A connected probe socket.
///
/// It carries the kubelet's `SO_LINGER {on, 1 s}` (T3) for its whole life,
/// and drops the option just before it is closed. On Linux a non-zero
/// linger changes nothing on the wire: the FIN (or, with unread data, the
/// RST) and TIME-WAIT are the same; it only makes `close` block until the
/// peer acknowledges the FIN, up to the full second. Go parks only a
/// goroutine there, while here it would stall a runtime worker (a pod's
/// server that never acknowledges could hold it per probe), and handing
/// every close to the blocking pool cost a thread wake-up per probe
/// (bench/RESULTS.md, "The probe path against the machine's floor").
#[derive(Debug)]
pub struct ProbeStream {
    stream: TcpStream,
}

impl ProbeStream {
    fn new(stream: TcpStream) -> Self {
        ProbeStream { stream }
    }

    /// The underlying socket, e.g. to read its options.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }
}

impl Drop for ProbeStream {
    fn drop(&mut self) {
        // Off, not {on, 0}: a zero linger would reset the connection.
        #[allow(deprecated)]
        if let Err(error) = self.stream.set_linger(None) {
            tracing::debug!(%error, "could not clear SO_LINGER before closing a probe socket");
        }
    }
}

impl AsyncRead for ProbeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ProbeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};

    /// A probe socket dialled to a fresh loopback listener, and the
    /// server's end (blocking).
    async fn probe_pair() -> (ProbeStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let deadline = Instant::now() + Duration::from_secs(5);
        let probe = dial("127.0.0.1", port, deadline, &Destinations::default())
            .await
            .expect("dial the listener");
        let (server, _) = listener.accept().expect("accept");
        (probe, server)
    }

    #[tokio::test]
    async fn closing_sends_the_fin_as_a_lingering_close_does() {
        let (probe, mut server) = probe_pair().await;
        drop(probe);
        // A FIN, not the reset a zero linger would send.
        assert_eq!(server.read(&mut [0; 8]).expect("read the FIN"), 0);
    }

    #[tokio::test]
    async fn closing_with_unread_data_resets_as_the_kubelets_close_does() {
        let (probe, mut server) = probe_pair().await;
        server.write_all(b"banner\r\n").expect("send a banner");
        probe
            .get_ref()
            .peek(&mut [0; 1])
            .await
            .expect("the banner arrives");
        drop(probe);
        let read = server.read(&mut [0; 8]);
        assert_eq!(
            read.map_err(|error| error.kind()),
            Err(io::ErrorKind::ConnectionReset)
        );
    }

    #[tokio::test]
    async fn closing_never_waits_for_a_peer_that_does_not_take_the_fin() {
        let (probe, server) = probe_pair().await;
        // The server never reads: fill its window and our send buffer, so
        // that the FIN waits behind data. A lingering close would now block
        // this thread for the full linger time.
        let chunk = [0u8; 64 * 1024];
        loop {
            match probe.get_ref().try_write(&chunk) {
                Ok(_) => continue,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => panic!("fill the send buffer: {error}"),
            }
        }
        let closing = std::time::Instant::now();
        drop(probe);
        let took = closing.elapsed();
        drop(server);
        assert!(took < PROBE_LINGER, "the close blocked for {took:?}");
    }

    #[test]
    fn go_errno_text_lowercases_and_drops_the_os_error_suffix() {
        let refused = io::Error::from_raw_os_error(111);
        assert_eq!(go_errno_text(&refused), "connection refused");
        let unreachable = io::Error::from_raw_os_error(113);
        assert_eq!(go_errno_text(&unreachable), "no route to host");
    }

    #[test]
    fn dial_error_reads_like_go() {
        let addr: SocketAddr = "10.0.0.1:80".parse().expect("literal address");
        let refused = DialError::Syscall {
            addr,
            syscall: "connect",
            source: io::Error::from_raw_os_error(111),
        };
        assert_eq!(
            refused.to_string(),
            "dial tcp 10.0.0.1:80: connect: connection refused"
        );
        assert_eq!(
            DialError::Timeout { addr }.to_string(),
            "dial tcp 10.0.0.1:80: i/o timeout"
        );
        let v6: SocketAddr = "[fd00::1]:8080".parse().expect("literal address");
        assert_eq!(
            DialError::Timeout { addr: v6 }.to_string(),
            "dial tcp [fd00::1]:8080: i/o timeout"
        );
        assert_eq!(
            no_such_host("db").to_string(),
            "dial tcp: lookup db: no such host"
        );
    }

    #[test]
    fn go_lookup_text_maps_unknown_names_to_no_such_host() {
        let unknown =
            io::Error::other("failed to lookup address information: Name or service not known");
        assert_eq!(go_lookup_text(&unknown), "no such host");
        let other = io::Error::other(
            "failed to lookup address information: Temporary failure in name resolution",
        );
        assert_eq!(
            go_lookup_text(&other),
            "temporary failure in name resolution"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_address_gets_an_equal_share_but_at_least_two_seconds() {
        let now = Instant::now();
        let ten = now + Duration::from_secs(10);
        assert_eq!(
            share_of_deadline(now, ten, 2),
            Some(now + Duration::from_secs(5))
        );
        assert_eq!(
            share_of_deadline(now, ten, 10),
            Some(now + Duration::from_secs(2))
        );
        let one = now + Duration::from_secs(1);
        assert_eq!(share_of_deadline(now, one, 3), Some(one));
        assert_eq!(share_of_deadline(now, now, 1), None);
        assert_eq!(share_of_deadline(one, now, 1), None);
    }
}
