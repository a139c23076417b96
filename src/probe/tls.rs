//! The TLS client side of HTTPS and gRPC probes: the rustls configuration a
//! probe's [`TlsSettings`] (`podprobe.tls`, #14) asks for, and the one place
//! rustls errors become the text Go's `crypto/tls` and `crypto/x509` print.
//!
//! Without settings a probe is the kubelet's: any server certificate
//! (Go's `InsecureSkipVerify`), no client certificate. With a `caBundle`
//! the chain is verified against exactly that bundle, never the system
//! roots, and the name against [`TlsSettings::server_name`] or the
//! caller's name.

use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use podprobe_core::spec::probe_spec::extension::TlsSettings;

/// The client configuration for `settings` offering `alpn`: ring provider,
/// TLS 1.2 and 1.3. The kubelet's (default settings) is built once per
/// `alpn` list by the caller; this builds afresh, around the verifier its
/// `caBundle` built once.
pub fn client_config(settings: &TlsSettings, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match &settings.ca_bundle {
        // Built once per parsed bundle, not per connection.
        Some(bundle) => bundle.derived(|certificates| {
            // Trusting only the bundle, never the system roots.
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certificates.iter().cloned());
            assert!(
                added > 0,
                "a caBundle's certificates were checked when read"
            );
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .expect("a root store with certificates builds a verifier")
        }),
        None => Arc::new(AcceptAnyCertificate(
            provider.signature_verification_algorithms,
        )),
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &settings.client_identity {
        // The key was checked to be usable when it was read.
        Some(identity) => builder
            .with_client_auth_cert(identity.chain(), identity.key())
            .expect("a client key checked when read"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// [`client_config`] for the kubelet's HTTPS (default settings), offering
/// `h2` then `http/1.1` as Go's transport with the kubelet's HTTP/2
/// defaults does; built once.
pub fn kubelet_https_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| client_config(&TlsSettings::default(), &[b"h2", b"http/1.1"]))
        .clone()
}

/// The name a connection sends as SNI and verifies: `podprobe.tls.serverName`
/// when set, else `fallback` (a DNS name or an IP address; a trailing dot
/// dropped), else `peer`.
pub fn server_name(
    settings: &TlsSettings,
    fallback: &str,
    peer: std::net::IpAddr,
) -> ServerName<'static> {
    if let Some(name) = &settings.server_name {
        return name.clone();
    }
    ServerName::try_from(fallback.trim_end_matches('.').to_string())
        .unwrap_or_else(|_| ServerName::IpAddress(peer.into()))
}

/// Go's text for a TLS error rustls reported, without the `Get "<url>": `
/// that the caller adds.
pub fn error_text(err: &rustls::Error) -> String {
    match err {
        rustls::Error::AlertReceived(alert) => {
            format!("remote error: tls: {}", alert_text(*alert))
        }
        rustls::Error::InvalidCertificate(cert) => {
            format!("tls: failed to verify certificate: {}", x509_text(cert))
        }
        other => format!("tls: {other}"),
    }
}

/// Go's `crypto/x509` texts for a certificate that does not verify.
fn x509_text(err: &CertificateError) -> String {
    match err {
        CertificateError::UnknownIssuer => "x509: certificate signed by unknown authority".into(),
        CertificateError::Expired
        | CertificateError::ExpiredContext { .. }
        | CertificateError::NotValidYet
        | CertificateError::NotValidYetContext { .. } => {
            "x509: certificate has expired or is not yet valid".into()
        }
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => name_mismatch_text(expected, presented),
        CertificateError::NotValidForName => "x509: certificate is not valid for the name".into(),
        other => format!("x509: {other}"),
    }
}

/// Go's `x509.HostnameError` text: the names of the kind asked for (IP
/// addresses for an IP, DNS names otherwise) that the certificate holds.
fn name_mismatch_text(expected: &ServerName<'_>, presented: &[String]) -> String {
    let wanted = expected.to_str();
    // rustls lists them as webpki prints them: `DnsName("a")`, `IpAddress(1.2.3.4)`.
    let (prefix, ip) = match expected {
        ServerName::IpAddress(_) => ("IpAddress(", true),
        _ => ("DnsName(", false),
    };
    let names: Vec<String> = presented
        .iter()
        .filter_map(|name| name.strip_prefix(prefix)?.strip_suffix(')'))
        .map(|name| name.trim_matches('"').to_string())
        .collect();
    if names.is_empty() {
        return if ip {
            format!(
                "x509: cannot validate certificate for {wanted} because it doesn't contain any IP SANs"
            )
        } else {
            format!("x509: certificate is not valid for any names, but wanted to match {wanted}")
        };
    }
    format!(
        "x509: certificate is valid for {}, not {wanted}",
        names.join(", ")
    )
}

/// Go's `crypto/tls` alert descriptions.
fn alert_text(alert: rustls::AlertDescription) -> String {
    let text = match u8::from(alert) {
        0 => "close notify",
        10 => "unexpected message",
        20 => "bad record MAC",
        21 => "decryption failed",
        22 => "record overflow",
        30 => "decompression failure",
        40 => "handshake failure",
        42 => "bad certificate",
        43 => "unsupported certificate",
        44 => "revoked certificate",
        45 => "expired certificate",
        46 => "unknown certificate",
        47 => "illegal parameter",
        48 => "unknown certificate authority",
        49 => "access denied",
        50 => "error decoding message",
        51 => "error decrypting message",
        70 => "protocol version not supported",
        71 => "insufficient security level",
        80 => "internal error",
        86 => "inappropriate fallback",
        90 => "user canceled",
        100 => "no renegotiation",
        109 => "missing extension",
        110 => "unsupported extension",
        112 => "unrecognized name",
        116 => "certificate required",
        120 => "no application protocol",
        other => return format!("alert({other})"),
    };
    text.to_string()
}

/// Accepts any server certificate, as Go's `InsecureSkipVerify` does, but
/// still checks the handshake signatures made with the certificate's key.
#[derive(Debug)]
struct AcceptAnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_mismatches_read_as_go_prints_them() {
        let dns = ServerName::try_from("app.internal").unwrap();
        let presented = vec![
            r#"DnsName("other.internal")"#.to_string(),
            r#"DnsName("b.internal")"#.to_string(),
            "IpAddress(10.0.0.1)".to_string(),
        ];
        assert_eq!(
            name_mismatch_text(&dns, &presented),
            "x509: certificate is valid for other.internal, b.internal, not app.internal"
        );
        let ip = ServerName::try_from("127.0.0.1").unwrap();
        assert_eq!(
            name_mismatch_text(&ip, &presented),
            "x509: certificate is valid for 10.0.0.1, not 127.0.0.1"
        );
        assert_eq!(
            name_mismatch_text(&ip, &presented[..1]),
            "x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
        );
    }
}
