//! Sockets made in a pod's network namespace (`podprobe.network: pod`,
//! issue #14): a probe connects from inside the pod, so a server bound to
//! the pod's loopback can be probed and the pod IP need not be reachable
//! from the node.
//!
//! A network namespace belongs to a thread (`setns(2)` with
//! `CLONE_NEWNET`), and a socket stays in the namespace it was made in. So
//! each socket is made on a short-lived thread of its own that enters the
//! namespace, makes the socket and ends; the connected socket is then
//! driven by tokio like any other. A tokio thread never enters a
//! namespace: whatever ran on it next (a DNS lookup, the API client) would
//! run inside the pod. At most [`MAX_NAMESPACE_THREADS`] such threads exist
//! at once, node-wide, and a probe waits for one only until its deadline.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use tokio::net::TcpSocket;
use tokio::sync::{Semaphore, oneshot};
use tokio::time::{Instant, timeout_at};

use podprobe_core::spec::pod_network::PodNetwork;

pub mod helper;

pub use self::helper::NamespaceHelper;

/// The helper that makes sockets in pod namespaces for the daemon, which
/// then holds no `CAP_SYS_ADMIN` (see [`helper`]); without one (tests,
/// `podprobe probe`) this process enters namespaces itself.
static HELPER: OnceLock<NamespaceHelper> = OnceLock::new();

/// Makes every later pod-network socket through `helper`; `false` if one
/// was already set (it stays).
pub fn use_helper(helper: NamespaceHelper) -> bool {
    HELPER.set(helper).is_ok()
}

/// Threads making sockets in pod namespaces at once, node-wide. Each lives
/// for two system calls, so this bounds bursts, not steady load.
pub const MAX_NAMESPACE_THREADS: usize = 16;

static NAMESPACE_THREADS: Semaphore = Semaphore::const_new(MAX_NAMESPACE_THREADS);

/// A non-blocking TCP socket for `addr`'s family, made inside `network`'s
/// namespace, before `deadline`.
pub async fn socket(
    network: &PodNetwork,
    addr: SocketAddr,
    deadline: Instant,
) -> io::Result<TcpSocket> {
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "i/o timeout");
    let slot = timeout_at(deadline, NAMESPACE_THREADS.acquire())
        .await
        .map_err(|_| timed_out())?
        .map_err(io::Error::other)?;
    let namespace = Arc::clone(network.namespace());
    let (made, socket) = oneshot::channel();
    std::thread::Builder::new()
        .name("podprobe-netns".into())
        .spawn(move || {
            let _slot = slot;
            // The receiver is gone only if the probe gave up; the
            // socket then closes here.
            let _ = made.send(socket_in(&namespace, addr));
        })?;
    let socket = timeout_at(deadline, socket)
        .await
        .map_err(|_| timed_out())?
        .map_err(io::Error::other)??;
    Ok(TcpSocket::from_std_stream(socket.into()))
}

/// Runs on a thread of its own: asks the helper, if there is one;
/// otherwise enters `namespace` itself, and the thread ends right after.
fn socket_in(namespace: &File, addr: SocketAddr) -> io::Result<OwnedFd> {
    if let Some(helper) = HELPER.get() {
        return helper
            .socket_in(namespace, addr.is_ipv6())
            .map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!("making a socket in the pod's network namespace: {error}"),
                )
            });
    }
    // SAFETY: setns only reads the descriptor, which `namespace` keeps open.
    if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!("entering the pod's network namespace: {error}"),
        ));
    }
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // Non-blocking as tokio requires; close-on-exec as Rust's own sockets.
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain system call; the result is checked before use.
    let fd = unsafe { libc::socket(domain, kind, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
