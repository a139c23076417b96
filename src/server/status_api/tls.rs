//! The status API's TLS (#38): both ends of every hop verified.
//!
//! - The serving certificate (`tls.crt`, `tls.key`) and the CA bundle that
//!   signed it (`ca.crt`, the `APIService`'s `caBundle`) are files in
//!   `--status-api-tls-dir`, the chart's Secret mounted there. They are
//!   re-read every [`RELOAD_INTERVAL`]; a changed set takes effect for new
//!   connections, so a rotation needs no restart.
//! - A client must present a certificate: either the API server's
//!   front-proxy certificate (signed by the request-header CA, a common name
//!   the API server allows: [`Caller::FrontProxy`]), or another podprobe's,
//!   signed by the status API's own CA ([`Caller::Peer`]), which forwards a
//!   request for a pod of this node.
//! - Forwarding, podprobe presents its certificate and verifies the other
//!   podprobe's against the same CA, under the name `--status-api-peer-name`
//!   (the Service's DNS name, which every podprobe's certificate carries).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tokio::time::Instant;

use super::front_proxy::{RequestHeader, common_name};

/// How often the files are looked at again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The files in the TLS directory.
const CA_FILE: &str = "ca.crt";
const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";

/// Why the TLS settings cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM {what}")]
    Pem { path: PathBuf, what: &'static str },
    #[error("invalid TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("invalid CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("invalid peer name {0:?}")]
    PeerName(String),
}

/// Who is at the other end of a connection, as its certificate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The API server, proxying a user's request (the user is in the
    /// request-header headers).
    FrontProxy,
    /// Another podprobe, forwarding a request it authorized.
    Peer,
}

/// The TLS settings in force, rebuilt when a file or the API server's
/// request-header settings change.
pub struct Settings {
    pub server: Arc<ServerConfig>,
    pub peer_client: Arc<ClientConfig>,
    front_proxy: Arc<dyn ClientCertVerifier>,
    peer: Arc<dyn ClientCertVerifier>,
    request_header: RequestHeader,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings").finish_non_exhaustive()
    }
}

impl Settings {
    /// The caller a verified connection's certificate chain names, or
    /// `None` for one that is neither (never accepted by the handshake).
    pub fn caller(&self, chain: &[CertificateDer<'_>]) -> Option<Caller> {
        let (end_entity, intermediates) = chain.split_first()?;
        let now = UnixTime::now();
        if self
            .front_proxy
            .verify_client_cert(end_entity, intermediates, now)
            .is_ok()
            && self
                .request_header
                .allows(common_name(end_entity.as_ref()).as_deref())
        {
            return Some(Caller::FrontProxy);
        }
        self.peer
            .verify_client_cert(end_entity, intermediates, now)
            .is_ok()
            .then_some(Caller::Peer)
    }

    pub fn request_header(&self) -> &RequestHeader {
        &self.request_header
    }
}

/// The files as read, to see whether they changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Files {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Files {
    fn read(dir: &Path) -> Result<Self, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
        };
        Ok(Files {
            ca: read(CA_FILE)?,
            cert: read(CERT_FILE)?,
            key: read(KEY_FILE)?,
        })
    }
}

/// The TLS directory and the settings built from it, kept current.
pub struct TlsSource {
    dir: PathBuf,
    peer_name: ServerName<'static>,
    state: Mutex<State>,
}

struct State {
    checked: Instant,
    files: Files,
    request_header: RequestHeader,
    settings: Arc<Settings>,
}

impl std::fmt::Debug for TlsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSource")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl TlsSource {
    /// Reads `dir` and builds the settings with the API server's
    /// `request_header`; `peer_name` is the name other podprobes'
    /// certificates are verified under.
    pub fn new(
        dir: PathBuf,
        peer_name: &str,
        request_header: RequestHeader,
    ) -> Result<Self, TlsError> {
        let peer_name = ServerName::try_from(peer_name.to_string())
            .map_err(|_| TlsError::PeerName(peer_name.to_string()))?;
        let files = Files::read(&dir)?;
        let settings = Arc::new(build(&dir, &files, &request_header)?);
        Ok(TlsSource {
            dir,
            peer_name,
            state: Mutex::new(State {
                checked: Instant::now(),
                files,
                request_header,
                settings,
            }),
        })
    }

    /// The name another podprobe's certificate is verified under.
    pub fn peer_name(&self) -> &ServerName<'static> {
        &self.peer_name
    }

    /// The settings for a new connection: rebuilt first when the files
    /// changed (looked at once per [`RELOAD_INTERVAL`]). A set of files that
    /// does not build (half-written, say) keeps the previous settings.
    pub fn current(&self) -> Arc<Settings> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if now >= state.checked + RELOAD_INTERVAL {
            state.checked = now;
            match Files::read(&self.dir) {
                Ok(files) if files != state.files => {
                    match build(&self.dir, &files, &state.request_header) {
                        Ok(settings) => {
                            tracing::info!(dir = %self.dir.display(), "status API certificates reloaded");
                            state.settings = Arc::new(settings);
                            state.files = files;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "status API certificates changed but cannot be used; keeping the previous ones")
                        }
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "cannot re-read the status API certificates; keeping the previous ones")
                }
            }
        }
        state.settings.clone()
    }

    /// Takes the API server's request-header settings as read again.
    pub fn set_request_header(&self, request_header: RequestHeader) -> Result<(), TlsError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.request_header == request_header {
            return Ok(());
        }
        let settings = build(&self.dir, &state.files, &request_header)?;
        state.settings = Arc::new(settings);
        state.request_header = request_header;
        tracing::info!("the API server's front-proxy settings changed; using them");
        Ok(())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(certificates: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates {
        roots.add(certificate.clone())?;
    }
    Ok(Arc::new(roots))
}

fn build(dir: &Path, files: &Files, request_header: &RequestHeader) -> Result<Settings, TlsError> {
    let pem_error = |name: &str, what| TlsError::Pem {
        path: dir.join(name),
        what,
    };
    let certificates =
        |bytes: &[u8], name: &str| -> Result<Vec<CertificateDer<'static>>, TlsError> {
            let certificates: Vec<_> = CertificateDer::pem_slice_iter(bytes)
                .collect::<Result<_, _>>()
                .map_err(|_| pem_error(name, "certificate"))?;
            if certificates.is_empty() {
                return Err(pem_error(name, "certificate"));
            }
            Ok(certificates)
        };
    let ca = certificates(&files.ca, CA_FILE)?;
    let chain = certificates(&files.cert, CERT_FILE)?;
    let key = PrivateKeyDer::from_pem_slice(&files.key)
        .map_err(|_| pem_error(KEY_FILE, "private key"))?;

    let provider = provider();
    let front_proxy: Arc<dyn ClientCertVerifier> = WebPkiClientVerifier::builder_with_provider(
        roots(&request_header.client_ca)?,
        provider.clone(),
    )
    .build()?;
    let peer: Arc<dyn ClientCertVerifier> =
        WebPkiClientVerifier::builder_with_provider(roots(&ca)?, provider.clone()).build()?;
    let either = Arc::new(Either::new(front_proxy.clone(), peer.clone()));
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(either)
        .with_single_cert(chain.clone(), key.clone_key())?;
    // The API server speaks HTTP/2 to aggregated APIs when offered.
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

    let server_verifier =
        WebPkiServerVerifier::builder_with_provider(roots(&ca)?, provider.clone()).build()?;
    let peer_client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_webpki_verifier(server_verifier)
        .with_client_auth_cert(chain, key)?;
    Ok(Settings {
        server: Arc::new(server),
        peer_client: Arc::new(peer_client),
        front_proxy,
        peer,
        request_header: request_header.clone(),
    })
}

/// Accepts a client certificate either verifier accepts.
#[derive(Debug)]
struct Either {
    first: Arc<dyn ClientCertVerifier>,
    second: Arc<dyn ClientCertVerifier>,
    hints: Vec<DistinguishedName>,
}

impl Either {
    fn new(first: Arc<dyn ClientCertVerifier>, second: Arc<dyn ClientCertVerifier>) -> Self {
        let hints = first
            .root_hint_subjects()
            .iter()
            .chain(second.root_hint_subjects())
            .cloned()
            .collect();
        Either {
            first,
            second,
            hints,
        }
    }
}

impl ClientCertVerifier for Either {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.first
            .verify_client_cert(end_entity, intermediates, now)
            .or_else(|_| {
                self.second
                    .verify_client_cert(end_entity, intermediates, now)
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.first.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.first.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.first.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A CA and a way to sign leaves with it.
    struct Ca {
        pem: String,
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let pem = params.self_signed(&key).expect("ca").pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf for both ends of a connection: (certificate PEM, key PEM, DER).
    fn leaf(ca: &Ca, cn: &str) -> (String, String, CertificateDer<'static>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec![
            "podprobe-status-api.podprobe-system.svc".to_string(),
        ])
        .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &ca.issuer).expect("leaf");
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }

    fn request_header(front_proxy_ca: &Ca) -> RequestHeader {
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", front_proxy_ca.pem.as_str()),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        RequestHeader::from_config_map(&data).expect("valid")
    }

    fn write(dir: &Path, ca: &Ca, cert: &str, key: &str) {
        std::fs::write(dir.join(CA_FILE), &ca.pem).expect("write");
        std::fs::write(dir.join(CERT_FILE), cert).expect("write");
        std::fs::write(dir.join(KEY_FILE), key).expect("write");
    }

    /// Only the API server's front-proxy certificate (its CA, an allowed
    /// name) makes a caller the front proxy: a podprobe certificate named
    /// like it is a peer, and a front-proxy-CA certificate of another name
    /// is nobody.
    #[tokio::test]
    async fn ps2_the_certificate_says_who_calls() {
        let (own, front) = (ca("podprobe-status-api-ca"), ca("front-proxy-ca"));
        let dir = tempfile::tempdir().expect("dir");
        let (cert, key, peer) = leaf(&own, "podprobe-status-api");
        write(dir.path(), &own, &cert, &key);
        let source = TlsSource::new(
            dir.path().to_path_buf(),
            "podprobe-status-api.podprobe-system.svc",
            request_header(&front),
        )
        .expect("settings");
        let settings = source.current();
        assert_eq!(settings.caller(&[peer]), Some(Caller::Peer));
        assert_eq!(
            settings.caller(&[leaf(&front, "front-proxy-client").2]),
            Some(Caller::FrontProxy)
        );
        assert_eq!(
            settings.caller(&[leaf(&own, "front-proxy-client").2]),
            Some(Caller::Peer)
        );
        assert_eq!(settings.caller(&[leaf(&front, "someone-else").2]), None);
        assert_eq!(
            settings.caller(&[leaf(&ca("stranger"), "front-proxy-client").2]),
            None
        );
        assert_eq!(settings.caller(&[]), None);
    }

    /// A rotated certificate is used for new connections after the reload
    /// interval, without a restart; a half-written set keeps the old one.
    #[tokio::test(start_paused = true)]
    async fn ps2_rotated_files_are_picked_up_and_broken_ones_ignored() {
        let (old, new, front) = (ca("old"), ca("new"), ca("front-proxy-ca"));
        let dir = tempfile::tempdir().expect("dir");
        let (cert, key, _) = leaf(&old, "podprobe-status-api");
        write(dir.path(), &old, &cert, &key);
        let source = TlsSource::new(
            dir.path().to_path_buf(),
            "podprobe-status-api.podprobe-system.svc",
            request_header(&front),
        )
        .expect("settings");
        let new_peer = leaf(&new, "podprobe-status-api");
        assert_eq!(
            source.current().caller(std::slice::from_ref(&new_peer.2)),
            None
        );
        write(dir.path(), &new, &new_peer.0, &new_peer.1);
        assert_eq!(
            source.current().caller(std::slice::from_ref(&new_peer.2)),
            None,
            "before the interval"
        );
        tokio::time::advance(RELOAD_INTERVAL).await;
        assert_eq!(
            source.current().caller(std::slice::from_ref(&new_peer.2)),
            Some(Caller::Peer)
        );
        std::fs::write(dir.path().join(KEY_FILE), "not a key").expect("write");
        tokio::time::advance(RELOAD_INTERVAL).await;
        assert_eq!(source.current().caller(&[new_peer.2]), Some(Caller::Peer));
    }
}
