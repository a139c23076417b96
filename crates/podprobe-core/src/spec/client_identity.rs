//! Where a probe's `podprobe.tls.clientCertificate` comes from: the prober
//! asks a [`ClientIdentitySource`] and never the API itself, so the handlers
//! need no Kubernetes client (the daemon passes its Secret cache).

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::probe_spec::extension::ClientIdentity;

/// Gives the client certificate held in a pod's Secret.
pub trait ClientIdentitySource: Debug + Send + Sync + 'static {
    /// The certificate and key of Secret `secret` in `namespace`, or why
    /// there is none (a message for the probe's output).
    fn client_identity<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
    ) -> BoxFuture<'a, Result<ClientIdentity, String>>;
}

impl<T: ClientIdentitySource> ClientIdentitySource for Arc<T> {
    fn client_identity<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
    ) -> BoxFuture<'a, Result<ClientIdentity, String>> {
        T::client_identity(self, namespace, secret)
    }
}
