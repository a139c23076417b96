//! A client identity read from PEM (`podprobe probe --client-cert/
//! --client-key`, a `clientCertificate` Secret): the chain and the key,
//! the key checked to be one rustls can sign with, so that a TLS handler
//! never meets an unusable one. Here rather than in the core, which has no
//! TLS stack, and below both the Secret reader and the handlers.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use podprobe_core::spec::probe_spec::extension::ClientIdentity;

/// Reads a PEM certificate chain (leaf first) and a PEM private key
/// (PKCS#8, PKCS#1 or SEC1) into a client identity whose key rustls can
/// sign with (`podprobe probe --client-cert/--client-key`, a
/// `clientCertificate` Secret); the error says which of the two is wrong.
pub fn client_identity_from_pem(chain: &[u8], key: &[u8]) -> Result<ClientIdentity, String> {
    let chain = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("client certificate: not valid PEM: {e}"))?;
    if chain.is_empty() {
        return Err("client certificate: no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("client key: no PEM private key: {e}"))?;
    rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("client key: not a usable private key: {e}"))?;
    Ok(ClientIdentity::new(chain, key))
}
