//! Client certificates (`podprobe.tls.clientCertificate`, #14) from the
//! `kubernetes.io/tls` Secret a probe names: a [`SecretCache`] of
//! [`ClientIdentity`], read and bounded as every Secret probes name is
//! ([`super::secret_cache`]).
//!
//! The certificate and key never leave this module but as a
//! [`ClientIdentity`], whose `Debug` shows no key material; errors name the
//! Secret and the field, never their contents.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;

use crate::api::client_pem::client_identity_from_pem;
use crate::api::secret_cache::{Lookup, SecretCache, SecretReader};
use podprobe_core::spec::client_identity::ClientIdentitySource;
use podprobe_core::spec::probe_spec::extension::ClientIdentity;
use podprobe_core::util::gofmt::go_quote;

/// The largest `tls.crt` and the largest `tls.key` accepted, in bytes of
/// PEM. A chain of a few certificates takes a few KiB; the API server's
/// own bound on a Secret (1 MiB) would let one pod's Secret hold a
/// megabyte in podprobe's memory per name.
pub const MAX_SECRET_FIELD_BYTES: usize = 64 * 1024;

/// The Secret type a client certificate must have (`kubectl create secret
/// tls`, cert-manager's Certificates).
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// Cached client certificates, shared by every probe of one podprobe.
pub type ClientCertificates = SecretCache<ClientIdentity>;

impl ClientIdentitySource for ClientCertificates {
    fn client_identity<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
    ) -> BoxFuture<'a, Lookup<ClientIdentity>> {
        Box::pin(self.get(namespace, secret))
    }
}

impl ClientCertificates {
    /// Reads client certificates through `reader`, each read good for `ttl`.
    pub fn new(reader: impl SecretReader, ttl: Duration) -> Self {
        SecretCache::reading(reader, ttl, "client certificate", |secret| {
            let identity = identity(secret)?;
            // The PEM read: more than the DER kept, and known before parsing.
            let bytes = ["tls.crt", "tls.key"]
                .iter()
                .filter_map(|key| secret.data.as_ref()?.get(*key))
                .map(|value| value.0.len())
                .sum();
            Ok((identity, bytes))
        })
    }
}

/// The client certificate of a `kubernetes.io/tls` Secret: `tls.crt` (the
/// chain, leaf first) and `tls.key`, each PEM of at most
/// [`MAX_SECRET_FIELD_BYTES`].
pub fn identity(secret: &Secret) -> Result<ClientIdentity, String> {
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != TLS_SECRET_TYPE {
        return Err(format!(
            "type is {}, not {TLS_SECRET_TYPE}",
            go_quote(type_)
        ));
    }
    let field = |key: &str| -> Result<&[u8], String> {
        let value = secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .ok_or_else(|| format!("no {key}"))?;
        if value.0.len() > MAX_SECRET_FIELD_BYTES {
            return Err(format!(
                "{key} is longer than {MAX_SECRET_FIELD_BYTES} bytes"
            ));
        }
        Ok(&value.0)
    };
    client_identity_from_pem(field("tls.crt")?, field("tls.key")?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::secret_cache::testing::tls_secret;
    use crate::testing::pem_pair;

    fn identity_of(crt: &str, key: &str) -> ClientIdentity {
        client_identity_from_pem(crt.as_bytes(), key.as_bytes()).unwrap()
    }

    #[test]
    fn only_a_bounded_kubernetes_io_tls_secret_is_a_certificate() {
        let (crt, key) = pem_pair();
        assert_eq!(
            identity(&tls_secret(&crt, &key)),
            Ok(identity_of(&crt, &key))
        );
        let opaque = Secret {
            type_: Some("Opaque".into()),
            ..tls_secret(&crt, &key)
        };
        assert_eq!(
            identity(&opaque),
            Err(r#"type is "Opaque", not kubernetes.io/tls"#.into())
        );
        let mut no_key = tls_secret(&crt, &key);
        no_key.data.as_mut().unwrap().remove("tls.key");
        assert_eq!(identity(&no_key), Err("no tls.key".into()));
        let long = format!("{crt}{}", " ".repeat(MAX_SECRET_FIELD_BYTES));
        assert_eq!(
            identity(&tls_secret(&long, &key)),
            Err("tls.crt is longer than 65536 bytes".into())
        );
        let swapped = identity(&tls_secret(&key, &crt)).unwrap_err();
        assert!(
            swapped.starts_with("client certificate: no PEM certificate"),
            "{swapped}"
        );
        assert!(
            !swapped.contains("PRIVATE KEY-----\n"),
            "no key material: {swapped}"
        );
    }
}
