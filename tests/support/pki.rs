//! Certificates for TLS tests: a CA of the test's own, made with rcgen,
//! leaf certificates it signs, and rustls server configurations (one that
//! requires a client certificate signed by a given CA).

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate authority for one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate with its key, PEM and DER.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        TestCa { issuer }
    }

    /// The CA certificate as PEM, for `caBundle`.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf for `names` (DNS names or IP addresses), valid now.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_with(names, |_| {})
    }

    /// A leaf for `names` that expired in 2020.
    pub fn expired_leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_with(names, |params| {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        })
    }

    fn leaf_with(&self, names: &[&str], adjust: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(|name| match name.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(name.to_string().try_into().unwrap()),
            })
            .collect();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        adjust(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        roots
    }
}

/// A server configuration presenting `leaf`, offering `alpn`, and when
/// `client_ca` is given requiring a client certificate it signed.
pub fn server_config(
    leaf: &Leaf,
    client_ca: Option<&TestCa>,
    alpn: &[&[u8]],
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(ca.roots()),
                provider,
            )
            .build()
            .unwrap(),
        ),
        None => builder.with_no_client_auth(),
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der.clone()));
    let mut config = builder
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}
