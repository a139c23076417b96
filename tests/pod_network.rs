//! `podprobe.network: pod` (#14) below the prober: TCP, HTTP and gRPC
//! probes whose sockets are made in another network namespace reach
//! servers bound to that namespace's loopback, with the usual socket
//! options, and the node's own namespace is never taken for a pod's.
//!
//! The "pod" is a network namespace of the test's own (`unshare(2)`, so
//! the tests need root, as `hack/test.sh` runs them), held by a parked
//! thread; tests/run_gate.rs does the same against real pods.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use podprobe::probe::dial::{PROBE_LINGER, dial};
use podprobe::probe::{grpc, http, tcp};
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::pod_network::PodNetwork;
use podprobe_core::spec::probe_spec::extension::HttpExtensions;
use podprobe_core::spec::probe_spec::{HttpGetAction, Scheme};
use podprobe_core::spec::{Outcome, ProbeResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

const TIMEOUT: Duration = Duration::from_secs(2);
const USER_AGENT: &str = "kube-probe/1.35";

/// A network namespace made for the test, with loopback up, and listeners
/// bound to its `127.0.0.1`; it lives until the value is dropped.
struct TestNamespace {
    path: PathBuf,
    listeners: Vec<StdListener>,
    _keep: mpsc::Sender<()>,
}

impl TestNamespace {
    fn new(listeners: usize) -> TestNamespace {
        let (made, made_rx) = mpsc::channel();
        let (keep, parked) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let result = enter_new_namespace().map(|()| {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let path = PathBuf::from(format!("/proc/{}/task/{tid}/ns/net", std::process::id()));
                let bound = (0..listeners)
                    .map(|_| StdListener::bind("127.0.0.1:0").expect("bind in the namespace"))
                    .collect::<Vec<_>>();
                (path, bound)
            });
            made.send(result).expect("test waits");
            // The namespace lives as long as this thread is in it.
            let _ = parked.recv();
        });
        let (path, listeners) = made_rx
            .recv()
            .expect("namespace thread")
            .unwrap_or_else(|e| {
                panic!("cannot make a network namespace (these tests need root): {e}")
            });
        TestNamespace {
            path,
            listeners,
            _keep: keep,
        }
    }

    /// The next of its listeners, for tokio.
    fn listener(&mut self) -> TcpListener {
        let listener = self.listeners.remove(0);
        listener.set_nonblocking(true).expect("non-blocking");
        TcpListener::from_std(listener).expect("tokio listener")
    }

    fn destinations(&self) -> Destinations {
        let network = PodNetwork::open(&self.path).expect("open the test namespace");
        // Gate mode's default policy: loopback is refused from the node.
        Destinations::new(Vec::new(), Destinations::node_local()).in_pod_network(network)
    }
}

/// Moves the calling thread into a new network namespace and brings its
/// loopback up (a new namespace's `lo` is down, without addresses).
fn enter_new_namespace() -> std::io::Result<()> {
    // SAFETY: plain system calls on this thread; results checked.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK) as libc::c_short;
        let up = libc::ioctl(fd, libc::SIOCSIFFLAGS, &request);
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if up != 0 {
            return Err(error);
        }
    }
    Ok(())
}

/// Answers every request on `listener` with 200 and `ok`.
fn serve_http(listener: TcpListener) {
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
}

fn http_get(port: u16) -> HttpGetAction {
    HttpGetAction {
        scheme: Scheme::Http,
        host: None,
        port,
        path: "/healthz".into(),
        headers: Vec::new(),
        protocol: Default::default(),
        extensions: HttpExtensions::default(),
    }
}

fn success(output: &str) -> Outcome {
    Outcome::new(ProbeResult::Success, output)
}

#[tokio::test]
async fn tcp_http_and_grpc_probes_reach_the_namespaces_loopback() {
    let mut pod = TestNamespace::new(3);
    let (tcp_listener, http_listener, grpc_listener) =
        (pod.listener(), pod.listener(), pod.listener());
    let tcp_port = tcp_listener.local_addr().unwrap().port();
    let http_port = http_listener.local_addr().unwrap().port();
    let grpc_port = grpc_listener.local_addr().unwrap().port();
    serve_http(http_listener);
    let (_reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(Server::builder().serve_with_incoming(health, TcpIncoming::from(grpc_listener)));
    let inside = pod.destinations();

    assert_eq!(
        tcp::probe("127.0.0.1", tcp_port, TIMEOUT, &inside).await,
        Ok(success(""))
    );
    assert_eq!(
        http::probe(
            &http_get(http_port),
            "127.0.0.1",
            TIMEOUT,
            USER_AGENT,
            &inside
        )
        .await,
        Ok(success("ok"))
    );
    assert_eq!(
        grpc::probe("127.0.0.1", grpc_port, "", TIMEOUT, USER_AGENT, &inside).await,
        Ok(success("service healthy"))
    );

    // The same socket options as every probe socket (T3).
    let stream = dial("127.0.0.1", tcp_port, Instant::now() + TIMEOUT, &inside)
        .await
        .expect("dial inside");
    assert_eq!(stream.get_ref().linger().unwrap(), Some(PROBE_LINGER));
    assert!(stream.get_ref().nodelay().unwrap());
}

#[test]
fn the_nodes_own_namespace_is_not_taken_for_a_pods() {
    let error = PodNetwork::open(std::path::Path::new("/proc/self/ns/net")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "/proc/self/ns/net is the node's own network namespace, not the pod's"
    );
}

/// #25: the helper `podprobe run --pod-network` starts (the real binary)
/// makes a socket in the namespace it is handed, which connects to that
/// namespace's loopback; it refuses the node's own namespace; it ends when
/// its daemon closes the control socket.
#[test]
fn the_namespace_helper_makes_sockets_in_the_namespace_it_is_handed() {
    use podprobe::probe::netns::NamespaceHelper;
    use std::os::fd::OwnedFd;

    let mut pod = TestNamespace::new(1);
    let listener = pod.listeners.remove(0);
    let port = listener.local_addr().unwrap().port();
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_podprobe"));
    let (helper, mut child) = NamespaceHelper::spawn(program).expect("start the helper");

    let namespace = std::fs::File::open(&pod.path).expect("the test namespace");
    let socket: OwnedFd = helper.socket_in(&namespace, false).expect("a socket");
    let stream = std::net::TcpStream::from(socket);
    stream.set_nonblocking(false).unwrap();
    let socket = socket2_connect(&stream, port);
    assert!(
        socket.is_ok(),
        "connect to the namespace's loopback: {socket:?}"
    );
    let (accepted, _) = listener
        .accept()
        .expect("the connection arrives in the namespace");
    drop(accepted);

    let node = std::fs::File::open("/proc/self/ns/net").unwrap();
    let refused = helper.socket_in(&node, false).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");

    drop(helper);
    let status = child.wait().expect("the helper ends");
    assert!(status.success(), "{status:?}");
}

/// Connects a socket made elsewhere to `127.0.0.1:port` (std has no
/// connect for an existing socket).
fn socket2_connect(stream: &std::net::TcpStream, port: u16) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid sockaddr_in of the right length.
    let connected = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            (&address as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if connected != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
