//! `podprobe.tls` (#14): verifying TLS for `httpGet` probes with scheme
//! HTTPS and TLS at all for `grpc` probes.
//!
//! ```yaml
//! podprobe:
//!   tls:
//!     caBundle: |              # PEM: verify the server against exactly these
//!       -----BEGIN CERTIFICATE-----
//!       ...
//!     serverName: app.internal # SNI and the name verified
//!     clientCertificate:       # mTLS: a kubernetes.io/tls Secret of the
//!       secretName: app-client #   pod's namespace, read when the probe runs
//! ```
//!
//! [`TlsFields`] is the key as written; [`tls_settings`] validates it and
//! builds the [`TlsSettings`] a probe connects with, the bundle parsed and
//! each of its certificates checked to be a trust anchor once, here (with
//! webpki, as rustls's root store does; the TLS handlers build the
//! verifier). Without the key an HTTPS probe is the kubelet's (no
//! verification) and a gRPC probe is plain text.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};

use super::super::validation::{FieldError, is_dns_subdomain};

/// The largest `caBundle`, in bytes of PEM.
pub const MAX_CA_BUNDLE_BYTES: usize = 64 * 1024;

/// The longest `serverName`, as DNS names go.
const MAX_SERVER_NAME_BYTES: usize = 253;

/// `podprobe.tls` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificateFields>,
}

/// `podprobe.tls.clientCertificate` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificateFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
}

/// How a probe makes its TLS connection; the default is the kubelet's
/// HTTPS: any server certificate, SNI from the target, no client
/// certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Verify the server against this bundle; `None`: no verification.
    pub ca_bundle: Option<CaBundle>,
    /// The name sent as SNI and verified, in place of the request's.
    pub server_name: Option<ServerName<'static>>,
    /// The certificate presented when the server asks for one.
    pub client_identity: Option<ClientIdentity>,
    /// `clientCertificate.secretName`: the Secret, in the pod's namespace,
    /// that `client_identity` is read from each time the probe runs
    /// ([`crate::client_certificates`]); parsing reads no Secret.
    pub client_certificate_secret: Option<String>,
}

/// `caBundle`, parsed: at least one certificate, each a usable trust
/// anchor. Two are equal when their certificates are.
#[derive(Clone)]
pub struct CaBundle {
    certificates: Vec<CertificateDer<'static>>,
    /// What the TLS handler builds from the certificates (its verifier),
    /// built on first use and shared by every clone of this bundle, so that
    /// a probe's connections do not rebuild it. Typed here as `Any`: this
    /// crate cannot name rustls's types.
    derived: Arc<OnceLock<Arc<dyn Any + Send + Sync>>>,
}

impl CaBundle {
    /// The certificates a server's chain is verified against (not the
    /// system roots).
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certificates
    }

    /// What `build` makes of the certificates, built once per parsed bundle
    /// and shared by its clones (a worker's spec, each run's copy). One
    /// caller (the TLS handler) uses it, with one `T`; a `T` other than the
    /// first is built afresh each time rather than cached.
    pub fn derived<T: Any + Send + Sync>(
        &self,
        build: impl Fn(&[CertificateDer<'static>]) -> Arc<T>,
    ) -> Arc<T> {
        let stored = self.derived.get_or_init(|| {
            let built: Arc<dyn Any + Send + Sync> = build(&self.certificates);
            built
        });
        Arc::clone(stored)
            .downcast::<T>()
            .unwrap_or_else(|_| build(&self.certificates))
    }
}

impl PartialEq for CaBundle {
    fn eq(&self, other: &Self) -> bool {
        self.certificates == other.certificates
    }
}

impl Eq for CaBundle {}

impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CaBundle({} certificates)", self.certificates.len())
    }
}

/// A client certificate chain and its private key (`podprobe probe
/// --client-cert/--client-key`, a `clientCertificate` Secret). Two are
/// equal when their chains are.
#[derive(Clone)]
pub struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl ClientIdentity {
    /// A chain (leaf first) and its key, already checked to be usable by
    /// whoever read them (the TLS handlers' `client_identity_from_pem`).
    pub fn new(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Self {
        ClientIdentity {
            chain,
            key: Arc::new(key),
        }
    }

    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.chain.clone()
    }

    pub fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }
}

impl PartialEq for ClientIdentity {
    fn eq(&self, other: &Self) -> bool {
        self.chain == other.chain
    }
}

impl Eq for ClientIdentity {}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientIdentity({} certificates)", self.chain.len())
    }
}

/// Validates `podprobe.tls` (`given`) of a probe whose handler is
/// `handler` and builds the settings it connects with; `root` is the
/// probe's field, `https` whether an `httpGet` probe's scheme is HTTPS.
/// Errors in field order: where `tls` may be, `caBundle`, `serverName`,
/// `clientCertificate`.
pub(in crate::spec::probe_spec) fn tls_settings(
    root: &str,
    handler: &str,
    https: bool,
    given: &TlsFields,
) -> Result<TlsSettings, FieldError> {
    let field = |name: &str| format!("{root}.podprobe.tls{name}");
    match (handler, https) {
        ("httpGet", true) | ("grpc", _) => {}
        ("httpGet", false) => {
            return Err(FieldError::forbidden(
                field(""),
                "may only be set for httpGet probes with scheme HTTPS and for grpc probes, not scheme HTTP",
            ));
        }
        (other, _) => {
            return Err(FieldError::forbidden(
                field(""),
                &format!(
                    "may only be set for httpGet probes with scheme HTTPS and for grpc probes, not {other}"
                ),
            ));
        }
    }
    let ca_bundle = given
        .ca_bundle
        .as_deref()
        .map(|pem| ca_bundle(field(".caBundle"), pem))
        .transpose()?;
    let server_name = given
        .server_name
        .as_deref()
        .map(|name| server_name(field(".serverName"), name))
        .transpose()?;
    let client_certificate_secret = given
        .client_certificate
        .as_ref()
        .map(|client| secret_name(field(".clientCertificate.secretName"), client))
        .transpose()?;
    Ok(TlsSettings {
        ca_bundle,
        server_name,
        client_identity: None,
        client_certificate_secret,
    })
}

fn secret_name(field: String, given: &ClientCertificateFields) -> Result<String, FieldError> {
    match given.secret_name.as_deref() {
        None | Some("") => Err(FieldError::required(field, "")),
        Some(name) if !is_dns_subdomain(name) => Err(FieldError::invalid_string(
            field,
            name,
            "a Secret name must be a lowercase RFC 1123 subdomain",
        )),
        Some(name) => Ok(name.to_string()),
    }
}

fn ca_bundle(field: String, pem: &str) -> Result<CaBundle, FieldError> {
    if pem.len() > MAX_CA_BUNDLE_BYTES {
        return Err(FieldError::too_long_bytes(field, MAX_CA_BUNDLE_BYTES));
    }
    // The bundle is not quoted back: it is long and says nothing a user
    // could not read in their own manifest.
    let invalid = |detail: String| FieldError {
        field: field.clone(),
        message: format!("Invalid value: {detail}"),
    };
    let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not valid PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(FieldError::required(
            field,
            "at least one PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    for (i, certificate) in certificates.iter().enumerate() {
        // What rustls's root store checks when a certificate is added.
        webpki::anchor_from_trusted_cert(certificate).map_err(|e| {
            invalid(format!(
                "certificate {} is not a usable CA certificate: {e:?}",
                i + 1
            ))
        })?;
    }
    Ok(CaBundle {
        certificates,
        derived: Arc::default(),
    })
}

fn server_name(field: String, name: &str) -> Result<ServerName<'static>, FieldError> {
    if name.len() > MAX_SERVER_NAME_BYTES {
        return Err(FieldError::too_long_bytes(field, MAX_SERVER_NAME_BYTES));
    }
    ServerName::try_from(name.to_string())
        .map_err(|_| FieldError::invalid_string(field, name, "must be a DNS name or an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn settings(
        handler: &str,
        https: bool,
        value: serde_json::Value,
    ) -> Result<TlsSettings, String> {
        let given: TlsFields = serde_json::from_value(value).expect("decodes");
        tls_settings("readinessProbe", handler, https, &given)
            .map_err(|e| format!("{}: {}", e.field, e.message))
    }

    #[test]
    fn a_ca_bundle_is_parsed_once_into_a_verifier() {
        let pem = ca_pem();
        let two = format!("{pem}{}", ca_pem());
        let parsed = settings(
            "httpGet",
            true,
            json!({"caBundle": two, "serverName": "app.internal"}),
        )
        .unwrap();
        let bundle = parsed.ca_bundle.expect("bundle");
        assert_eq!(bundle.certificates.len(), 2);
        assert_eq!(
            parsed.server_name,
            Some(ServerName::try_from("app.internal").unwrap().to_owned())
        );
        let grpc = settings("grpc", false, json!({"caBundle": pem})).unwrap();
        assert!(grpc.ca_bundle.is_some() && grpc.server_name.is_none());
        assert_eq!(
            settings("grpc", false, json!({})),
            Ok(TlsSettings::default())
        );
        let ip = settings("grpc", false, json!({"serverName": "10.0.0.1"})).unwrap();
        assert!(matches!(ip.server_name, Some(ServerName::IpAddress(_))));
    }

    #[test]
    fn what_a_bundle_derives_is_built_once_and_shared_by_its_clones() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let parsed = settings("grpc", false, json!({"caBundle": ca_pem()})).unwrap();
        let bundle = parsed.ca_bundle.expect("bundle");
        let builds = AtomicUsize::new(0);
        let build = |certificates: &[CertificateDer<'static>]| {
            builds.fetch_add(1, Ordering::Relaxed);
            Arc::new(certificates.len())
        };
        let clone = bundle.clone();
        assert_eq!(*bundle.derived(build), 1);
        assert_eq!(*clone.derived(build), 1);
        assert_eq!(*bundle.derived(build), 1);
        assert_eq!(builds.load(Ordering::Relaxed), 1, "built once");
        // Another type is not cached in the slot the first one took.
        assert_eq!(*bundle.derived(|_| Arc::new("other")), "other");
        // Equality is the certificates', whatever was derived.
        let reparsed = CaBundle {
            certificates: bundle.certificates.clone(),
            derived: Arc::default(),
        };
        assert_eq!(reparsed, bundle);
    }

    #[test]
    fn bad_ca_bundles_are_refused_without_quoting_them() {
        let field = "readinessProbe.podprobe.tls.caBundle";
        assert_eq!(
            settings("httpGet", true, json!({"caBundle": "not pem"})),
            Err(format!(
                "{field}: Required value: at least one PEM certificate (-----BEGIN CERTIFICATE-----)"
            ))
        );
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let refused = settings("httpGet", true, json!({"caBundle": garbage})).unwrap_err();
        assert!(
            refused.starts_with(&format!(
                "{field}: Invalid value: certificate 1 is not a usable CA certificate"
            )),
            "{refused}"
        );
        let broken = "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
        let refused = settings("httpGet", true, json!({"caBundle": broken})).unwrap_err();
        assert!(
            refused.starts_with(&format!("{field}: Invalid value: not valid PEM")),
            "{refused}"
        );
        let long = "x".repeat(MAX_CA_BUNDLE_BYTES + 1);
        assert_eq!(
            settings("httpGet", true, json!({"caBundle": long})),
            Err(format!(
                "{field}: Too long: may not be more than 65536 bytes"
            ))
        );
    }

    #[test]
    fn server_names_must_be_dns_names_or_ips() {
        for bad in ["", "a b", "-x.", "exa_mple..com"] {
            assert_eq!(
                settings("httpGet", true, json!({"serverName": bad})),
                Err(format!(
                    "readinessProbe.podprobe.tls.serverName: Invalid value: {}: must be a DNS name or an IP address",
                    crate::util::gofmt::go_quote(bad)
                )),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tls_is_only_for_https_and_grpc() {
        let detail =
            "Forbidden: may only be set for httpGet probes with scheme HTTPS and for grpc probes";
        assert_eq!(
            settings("httpGet", false, json!({})),
            Err(format!(
                "readinessProbe.podprobe.tls: {detail}, not scheme HTTP"
            ))
        );
        for handler in ["exec", "tcpSocket"] {
            assert_eq!(
                settings(handler, false, json!({})),
                Err(format!(
                    "readinessProbe.podprobe.tls: {detail}, not {handler}"
                ))
            );
        }
    }

    #[test]
    fn a_client_certificate_names_a_secret_read_when_the_probe_runs() {
        for (handler, https) in [("httpGet", true), ("grpc", false)] {
            let parsed = settings(
                handler,
                https,
                json!({"clientCertificate": {"secretName": "app-probe-client"}}),
            )
            .unwrap();
            assert_eq!(
                parsed.client_certificate_secret.as_deref(),
                Some("app-probe-client")
            );
            assert_eq!(parsed.client_identity, None, "no Secret read while parsing");
        }
        assert_eq!(
            settings("grpc", false, json!({"clientCertificate": {}})),
            Err("readinessProbe.podprobe.tls.clientCertificate.secretName: Required value".into())
        );
        assert_eq!(
            settings("grpc", false, json!({"clientCertificate": {"secretName": "App"}})),
            Err(r#"readinessProbe.podprobe.tls.clientCertificate.secretName: Invalid value: "App": a Secret name must be a lowercase RFC 1123 subdomain"#.into())
        );
    }
}
