//! `CAP_SYS_ADMIN` outside the daemon (#25): entering a pod's network
//! namespace (`setns(2)`) needs it, and a daemon that parses every tenant's
//! annotation and talks to every tenant's servers should not hold it. With
//! `--pod-network`, `podprobe run` starts this helper (`podprobe
//! netns-helper`, the same binary) before anything else, then drops the
//! capability from its own effective, permitted and inheritable sets; the
//! container's `allowPrivilegeEscalation: false` (no_new_privs) keeps an
//! `execve` from getting it back.
//!
//! The helper does one thing: given an open network namespace and an
//! address family, it makes a TCP socket in that namespace and passes it
//! back. Each request carries a socket pair's end for the answer, so
//! requests run at once without matching replies to them; both descriptors
//! travel as `SCM_RIGHTS` over a `SOCK_SEQPACKET` pair. It refuses its own
//! (the node's) namespace and ends when the daemon goes away.

use std::fs::File;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// The descriptor the helper finds its end of the control pair on.
pub const CONTROL_FD: RawFd = 3;

/// `SOCK_STREAM` sockets of these families only.
const IPV4: u8 = 4;
const IPV6: u8 = 6;

/// The daemon's end of the helper.
#[derive(Debug)]
pub struct NamespaceHelper {
    control: OwnedFd,
}

impl NamespaceHelper {
    /// Starts `program netns-helper` with its end of a new control pair on
    /// [`CONTROL_FD`]. The caller drops `CAP_SYS_ADMIN` after this
    /// ([`drop_sys_admin`]).
    pub fn spawn(program: &std::path::Path) -> io::Result<(NamespaceHelper, Child)> {
        let (ours, theirs) = seqpacket_pair()?;
        let theirs_raw = theirs.as_raw_fd();
        let mut command = Command::new(program);
        command.arg("netns-helper");
        // SAFETY: only async-signal-safe calls between fork and exec. dup2
        // makes a copy without close-on-exec; a descriptor already on
        // CONTROL_FD has the flag cleared instead.
        unsafe {
            command.pre_exec(move || {
                let kept = if theirs_raw == CONTROL_FD {
                    libc::fcntl(CONTROL_FD, libc::F_SETFD, 0)
                } else {
                    libc::dup2(theirs_raw, CONTROL_FD)
                };
                if kept < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        drop(theirs);
        Ok((NamespaceHelper { control: ours }, child))
    }

    /// A non-blocking, close-on-exec TCP socket for `ipv6` or IPv4 made in
    /// `namespace` by the helper. Blocks until it answers: call it off the
    /// async runtime.
    pub fn socket_in(&self, namespace: &File, ipv6: bool) -> io::Result<OwnedFd> {
        let (answer, answer_theirs) = seqpacket_pair()?;
        let family = if ipv6 { IPV6 } else { IPV4 };
        send_with_fds(
            self.control.as_raw_fd(),
            &[family],
            &[namespace.as_raw_fd(), answer_theirs.as_raw_fd()],
        )?;
        drop(answer_theirs);
        let mut reply = [0u8; 5];
        let (len, mut fds) = recv_with_fds(answer.as_raw_fd(), &mut reply)?;
        match (len, reply[0], fds.pop()) {
            (1, 0, Some(socket)) => Ok(socket),
            (5, 1, None) => {
                let errno = i32::from_le_bytes([reply[1], reply[2], reply[3], reply[4]]);
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => Err(io::Error::other(
                "the network namespace helper gave no answer (has it exited?)",
            )),
        }
    }
}

/// `podprobe netns-helper`: serves the daemon on [`CONTROL_FD`] until it
/// closes its end.
pub fn serve() -> io::Result<()> {
    // SAFETY: the daemon put the control socket on this descriptor, and
    // nothing else in this process owns it.
    let control = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    let own = std::fs::metadata("/proc/self/ns/net")?;
    loop {
        let mut request = [0u8; 1];
        let (len, fds) = recv_with_fds(control.as_raw_fd(), &mut request)?;
        if len == 0 {
            // The daemon is gone.
            return Ok(());
        }
        let [namespace, answer]: [OwnedFd; 2] = match fds.try_into() {
            Ok(fds) => fds,
            Err(_) => continue,
        };
        let family = request[0];
        let own = (own.dev(), own.ino());
        // A thread per request: it is left in the pod's namespace and ends.
        std::thread::spawn(move || {
            let made = make_socket(File::from(namespace), own, family);
            let _ = match made {
                Ok(socket) => send_with_fds(answer.as_raw_fd(), &[0], &[socket.as_raw_fd()]),
                Err(error) => {
                    let errno = error.raw_os_error().unwrap_or(libc::EINVAL).to_le_bytes();
                    send_with_fds(
                        answer.as_raw_fd(),
                        &[1, errno[0], errno[1], errno[2], errno[3]],
                        &[],
                    )
                }
            };
        });
    }
}

/// On a thread of its own: enters `namespace` (never the node's, `own`)
/// and makes the socket there.
fn make_socket(namespace: File, own: (u64, u64), family: u8) -> io::Result<OwnedFd> {
    let opened = namespace.metadata()?;
    if (opened.dev(), opened.ino()) == own {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    let domain = match family {
        IPV4 => libc::AF_INET,
        IPV6 => libc::AF_INET6,
        _ => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
    };
    // SAFETY: setns only reads the descriptor, which `namespace` keeps open.
    if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain system call; the result is checked before use.
    let fd = unsafe { libc::socket(domain, kind, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `capget`/`capset`'s header and data (`linux/capability.h`, version 3:
/// two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_SYS_ADMIN: u32 = 21;

/// Drops `CAP_SYS_ADMIN` from the calling thread's effective, permitted
/// and inheritable sets. Capabilities are per thread: call it before any
/// other thread starts, so that all of them inherit the result.
pub fn drop_sys_admin() -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: an all-zero CapData is valid plain data.
    let mut data: [CapData; 2] = unsafe { zeroed() };
    // SAFETY: header and two data words, as version 3 requires.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let bit = !(1u32 << CAP_SYS_ADMIN);
    data[0].effective &= bit;
    data[0].permitted &= bit;
    data[0].inheritable &= bit;
    // SAFETY: as above; only lowers the sets.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds` on success.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for the most descriptors a message carries (two).
const MAX_FDS: usize = 2;

fn control_space() -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) as usize }
}

fn send_with_fds(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut control = vec![0u8; control_space()];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; its pointers are set below to
    // buffers that outlive the call.
    let mut message: libc::msghdr = unsafe { zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    if !fds.is_empty() {
        let fd_bytes = std::mem::size_of_val(fds);
        message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        // SAFETY: pure size computation.
        message.msg_controllen = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as _;
        // SAFETY: msg_control points at a buffer of at least CMSG_SPACE
        // bytes, so the first header and its data fit.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(header),
                fd_bytes,
            );
        }
    }
    // SAFETY: `message` describes live buffers.
    let sent = unsafe { libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn recv_with_fds(socket: RawFd, data: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control = vec![0u8; control_space()];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: as in `send_with_fds`.
    let mut message: libc::msghdr = unsafe { zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    message.msg_controllen = control.len() as _;
    let received = loop {
        // SAFETY: `message` describes live buffers; descriptors arrive
        // close-on-exec.
        let received = unsafe { libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC) };
        if received >= 0 {
            break received as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header) as *const RawFd;
                for i in 0..bytes / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    Ok((received, fds))
}
