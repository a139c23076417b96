//! Which of its certificates a podprobe shows the other end of a status API
//! connection, so that a rotation (`statusApi.tls.generation`) needs no
//! window of failed forwards.
//!
//! A rotation puts a new CA and certificate in the chart's Secret
//! (`tls.crt`, `tls.key`), keeps the previous generation's certificate
//! beside them (`previous.crt`, `previous.key`), and has `ca.crt` trust
//! both CAs. The kubelet updates each node's copy of the Secret at its own
//! time, so for up to a minute a podprobe that has read the new files
//! forwards to, or is forwarded to by, one that trusts only the old CA.
//! Each end tells the other which CAs it trusts (TLS 1.3's
//! `certificate_authorities`: the client in its hello, the server in its
//! certificate request), and each shows the first of its certificates that
//! one of those CAs signed: the current one, else the previous one. A
//! caller that names no CAs (the API server) gets the current one; the
//! `APIService`'s `caBundle` trusts both CAs from the upgrade on.

use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::certificate::issuer;

/// A podprobe's certificates with their keys, the current one first.
#[derive(Debug)]
pub struct Identities(Vec<(Vec<u8>, Arc<CertifiedKey>)>);

impl Identities {
    /// `current`, then `previous` when there is one. A certificate whose
    /// issuer cannot be read is shown only to callers that name no CAs.
    pub fn new(current: CertifiedKey, previous: Option<CertifiedKey>) -> Self {
        let with_issuer = |key: CertifiedKey| {
            let issuer = key
                .end_entity_cert()
                .ok()
                .and_then(|cert| issuer(cert.as_ref()))
                .unwrap_or_default()
                .to_vec();
            (issuer, Arc::new(key))
        };
        Identities(
            std::iter::once(current)
                .chain(previous)
                .map(with_issuer)
                .collect(),
        )
    }

    /// The first certificate signed by a CA in `trusted`, or the current
    /// one when none is (or `trusted` is empty: the caller named none).
    fn for_peer_trusting<'a>(
        &self,
        trusted: impl Iterator<Item = &'a [u8]> + Clone,
    ) -> Arc<CertifiedKey> {
        let (_, key) = self
            .0
            .iter()
            .find(|(issuer, _)| trusted.clone().any(|ca| ca == issuer.as_slice()))
            .unwrap_or(&self.0[0]);
        key.clone()
    }
}

impl ResolvesServerCert for Identities {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let trusted = hello.certificate_authorities().unwrap_or_default();
        Some(self.for_peer_trusting(trusted.iter().map(AsRef::as_ref)))
    }
}

impl ResolvesClientCert for Identities {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        _: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.for_peer_trusting(root_hint_subjects.iter().copied()))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verifies another podprobe's certificate as `WebPkiServerVerifier` does,
/// and names the CAs it trusts in the client hello.
#[derive(Debug)]
pub struct NamingTrustedCas {
    verifier: Arc<WebPkiServerVerifier>,
    trusted: Vec<DistinguishedName>,
}

impl NamingTrustedCas {
    pub fn new(verifier: Arc<WebPkiServerVerifier>, trusted: Vec<DistinguishedName>) -> Self {
        NamingTrustedCas { verifier, trusted }
    }
}

impl ServerCertVerifier for NamingTrustedCas {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        Some(&self.trusted)
    }
}
