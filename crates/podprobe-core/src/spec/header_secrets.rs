//! Where the values of a probe's `podprobe.http.headers` come from (H25):
//! the prober asks a [`HeaderSecretSource`] and never the API itself, as for
//! client certificates ([`super::client_identity`]).

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;

/// Gives header values held in a pod's Secrets.
pub trait HeaderSecretSource: Debug + Send + Sync + 'static {
    /// The value of `key` in Secret `secret` of `namespace`, or why there
    /// is none (a message for the probe's output that names the Secret and
    /// the key, never the value).
    fn header_value<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<String, String>>;
}

impl<T: HeaderSecretSource> HeaderSecretSource for Arc<T> {
    fn header_value<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        T::header_value(self, namespace, secret, key)
    }
}
