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
//! - After a rotation the previous generation's certificate
//!   (`previous.crt`, `previous.key`) is shown to a podprobe that trusts
//!   only the previous CA, one whose node has not had the new files yet
//!   (`identity`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tokio::time::Instant;

use super::certificate::common_name;
use super::front_proxy::RequestHeader;
use super::identity::{Identities, NamingTrustedCas};

/// How often the files are looked at again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The files in the TLS directory.
const CA_FILE: &str = "ca.crt";
const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";
/// The previous generation's certificate and key, kept by the chart for one
/// generation after a rotation; absent before the first.
const PREVIOUS_CERT_FILE: &str = "previous.crt";
const PREVIOUS_KEY_FILE: &str = "previous.key";

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
    #[error("{present} is in {dir} but {absent} is not")]
    HalfPair {
        dir: PathBuf,
        present: &'static str,
        absent: &'static str,
    },
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
    /// `previous.crt` and `previous.key`, when both are there.
    previous: Option<(Vec<u8>, Vec<u8>)>,
}

impl Files {
    fn read(dir: &Path) -> Result<Self, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
        };
        let optional = |name: &str| match read(name) {
            Err(TlsError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            other => other.map(Some),
        };
        let half_pair = |present, absent| TlsError::HalfPair {
            dir: dir.to_path_buf(),
            present,
            absent,
        };
        let previous = match (optional(PREVIOUS_CERT_FILE)?, optional(PREVIOUS_KEY_FILE)?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err(half_pair(PREVIOUS_CERT_FILE, PREVIOUS_KEY_FILE)),
            (None, Some(_)) => return Err(half_pair(PREVIOUS_KEY_FILE, PREVIOUS_CERT_FILE)),
        };
        Ok(Files {
            ca: read(CA_FILE)?,
            cert: read(CERT_FILE)?,
            key: read(KEY_FILE)?,
            previous,
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
    let provider = provider();
    let certified = |cert: &[u8], cert_name, key: &[u8], key_name| {
        let chain = certificates(cert, cert_name)?;
        let key =
            PrivateKeyDer::from_pem_slice(key).map_err(|_| pem_error(key_name, "private key"))?;
        Ok::<_, TlsError>(CertifiedKey::from_der(chain, key, &provider)?)
    };
    let ca = certificates(&files.ca, CA_FILE)?;
    let current = certified(&files.cert, CERT_FILE, &files.key, KEY_FILE)?;
    let previous = match &files.previous {
        Some((cert, key)) => Some(certified(cert, PREVIOUS_CERT_FILE, key, PREVIOUS_KEY_FILE)?),
        None => None,
    };
    let identities = Arc::new(Identities::new(current, previous));

    let front_proxy: Arc<dyn ClientCertVerifier> = WebPkiClientVerifier::builder_with_provider(
        roots(&request_header.client_ca)?,
        provider.clone(),
    )
    .build()?;
    let own_roots = roots(&ca)?;
    let peer: Arc<dyn ClientCertVerifier> =
        WebPkiClientVerifier::builder_with_provider(own_roots.clone(), provider.clone()).build()?;
    let either = Arc::new(Either::new(front_proxy.clone(), peer.clone()));
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(either)
        .with_cert_resolver(identities.clone());
    // The API server speaks HTTP/2 to aggregated APIs when offered.
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

    let server_verifier =
        WebPkiServerVerifier::builder_with_provider(own_roots.clone(), provider.clone()).build()?;
    let peer_client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NamingTrustedCas::new(
            server_verifier,
            own_roots.subjects(),
        )))
        .with_client_cert_resolver(identities);
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

    /// Settings read from a directory holding `bundle` (PEM CAs), the
    /// current `leaf` and, when given, the `previous` one.
    fn settings(
        bundle: &str,
        leaf: &(String, String, CertificateDer<'static>),
        previous: Option<&(String, String, CertificateDer<'static>)>,
    ) -> (tempfile::TempDir, Arc<Settings>) {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join(CA_FILE), bundle).expect("write");
        std::fs::write(dir.path().join(CERT_FILE), &leaf.0).expect("write");
        std::fs::write(dir.path().join(KEY_FILE), &leaf.1).expect("write");
        if let Some((cert, key, _)) = previous {
            std::fs::write(dir.path().join(PREVIOUS_CERT_FILE), cert).expect("write");
            std::fs::write(dir.path().join(PREVIOUS_KEY_FILE), key).expect("write");
        }
        let source = TlsSource::new(
            dir.path().to_path_buf(),
            "podprobe-status-api.podprobe-system.svc",
            request_header(&ca("front-proxy-ca")),
        )
        .expect("settings");
        (dir, source.current())
    }

    /// A forward from the podprobe with `client`'s settings to the one with
    /// `server`'s, in memory: who the server saw, or why either end failed.
    async fn forward(client: &Settings, server: &Settings) -> Result<Option<Caller>, String> {
        let (near, far) = tokio::io::duplex(64 * 1024);
        let name = ServerName::try_from("podprobe-status-api.podprobe-system.svc").expect("name");
        let connect =
            tokio_rustls::TlsConnector::from(client.peer_client.clone()).connect(name, near);
        let accept = tokio_rustls::TlsAcceptor::from(server.server.clone()).accept(far);
        let client = async {
            use tokio::io::AsyncWriteExt;
            let mut stream = connect.await.map_err(|e| format!("client: {e}"))?;
            stream
                .write_all(b"x")
                .await
                .map_err(|e| format!("client: {e}"))?;
            stream.flush().await.map_err(|e| format!("client: {e}"))?;
            Ok::<_, String>(stream)
        };
        let server = async {
            use tokio::io::AsyncReadExt;
            let mut stream = accept.await.map_err(|e| format!("server: {e}"))?;
            // The client's certificate is checked before its first byte.
            let mut byte = [0];
            stream
                .read_exact(&mut byte)
                .await
                .map_err(|e| format!("server: {e}"))?;
            let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
            Ok::<_, String>(server.caller(chain))
        };
        let (connected, accepted) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(client, server)
        })
        .await
        .map_err(|_| "no handshake within 10 s".to_string())?;
        // A refused client certificate may leave the client's side looking
        // fine until it reads; the server's verdict decides.
        let _stream = connected?;
        accepted
    }

    /// #38: during a rotation, a podprobe that has read the new files (a
    /// new CA trusted beside the old one, the new certificate, the previous
    /// one kept) and one that has not (the old CA only) forward to each
    /// other both ways: each shows the certificate the other trusts. Without
    /// the previous certificate kept, the old one refuses the new one.
    #[tokio::test]
    async fn ps2_a_rotated_podprobe_and_one_not_yet_rotated_reach_each_other() {
        let (old, new) = (
            ca("podprobe-status-api-ca-1"),
            ca("podprobe-status-api-ca-2"),
        );
        let (old_leaf, new_leaf) = (
            leaf(&old, "podprobe-status-api"),
            leaf(&new, "podprobe-status-api"),
        );
        let bundle = format!("{}{}", new.pem, old.pem);
        let (_a, rotated) = settings(&bundle, &new_leaf, Some(&old_leaf));
        let (_b, not_yet) = settings(&old.pem, &old_leaf, None);
        assert_eq!(forward(&rotated, &not_yet).await, Ok(Some(Caller::Peer)));
        assert_eq!(forward(&not_yet, &rotated).await, Ok(Some(Caller::Peer)));
        // Both rotated: the new certificates.
        let (_c, also_rotated) = settings(&bundle, &new_leaf, Some(&old_leaf));
        assert_eq!(
            forward(&rotated, &also_rotated).await,
            Ok(Some(Caller::Peer))
        );

        let (_d, no_previous) = settings(&bundle, &new_leaf, None);
        let refused = forward(&no_previous, &not_yet).await;
        assert!(refused.is_err(), "{refused:?}");
        let refused = forward(&not_yet, &no_previous).await;
        assert!(refused.is_err(), "{refused:?}");
    }

    /// One of `previous.crt` and `previous.key` without the other is a set
    /// half written: refused, so the settings in force stay.
    #[test]
    fn ps2_a_previous_certificate_needs_its_key() {
        let own = ca("podprobe-status-api-ca");
        let (cert, key, _) = leaf(&own, "podprobe-status-api");
        let dir = tempfile::tempdir().expect("dir");
        write(dir.path(), &own, &cert, &key);
        std::fs::write(dir.path().join(PREVIOUS_CERT_FILE), &cert).expect("write");
        let error = Files::read(dir.path()).expect_err("half a pair");
        assert!(
            error.to_string().contains("previous.crt is in")
                && error.to_string().contains("but previous.key is not"),
            "{error}"
        );
    }
}
