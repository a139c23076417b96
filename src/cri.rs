//! CRI `RuntimeService` client over the runtime's unix socket.

/// containerd's CRI socket, the default endpoint.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// Errors talking to the container runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("invalid CRI endpoint {0:?}: expected unix:///path/to/socket")]
    InvalidEndpoint(String),
}

/// A CRI runtime client that reconnects by itself.
#[derive(Clone, Debug)]
pub struct CriClient {}

impl CriClient {
    /// A client for `endpoint` (`unix:///path`); connects lazily.
    pub fn new(endpoint: &str) -> Result<CriClient, CriError> {
        let _ = endpoint;
        unimplemented!("cri client")
    }
}
