//! Who a request the API server proxied is from: the request-header
//! authentication every aggregated API server uses. The API server connects
//! with its front-proxy client certificate (signed by the request-header
//! CA, `--requestheader-client-ca-file`, its common name one of
//! `--requestheader-allowed-names` when that list is not empty) and names
//! the user it authenticated in headers (`X-Remote-User`, `X-Remote-Group`,
//! `X-Remote-Extra-<key>` by default). The API server publishes all of it
//! in the ConfigMap `kube-system/extension-apiserver-authentication`, which
//! [`RequestHeader::from_config_map`] reads. The headers are believed only
//! on a connection whose certificate passed that check
//! (`status_api::hop_tls`), never from anyone else.

use std::collections::BTreeMap;

use http::HeaderMap;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::server::delegated_auth::UserInfo;

/// The ConfigMap the API server publishes its front-proxy settings in.
pub const CONFIG_MAP_NAMESPACE: &str = "kube-system";
pub const CONFIG_MAP_NAME: &str = "extension-apiserver-authentication";

/// The API server's request-header settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHeader {
    /// The CA that signs the front-proxy client certificate.
    pub client_ca: Vec<CertificateDer<'static>>,
    /// Common names a front-proxy certificate may have; empty: any.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_header_prefixes: Vec<String>,
}

/// Why the ConfigMap cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestHeaderError {
    #[error(
        "{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME} has no requestheader-client-ca-file: the API server runs without --requestheader-client-ca-file, so it cannot proxy to an aggregated API"
    )]
    NoClientCa,
    #[error(
        "{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME}: requestheader-client-ca-file holds no certificate"
    )]
    BadClientCa,
    #[error(
        "{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME}: {key} is not a JSON list of strings: {value}"
    )]
    BadList { key: String, value: String },
    #[error("{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME}: requestheader-username-headers is empty")]
    NoUsernameHeader,
}

impl RequestHeader {
    /// The settings in the ConfigMap's `data`.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Self, RequestHeaderError> {
        let ca = data
            .get("requestheader-client-ca-file")
            .ok_or(RequestHeaderError::NoClientCa)?;
        let client_ca: Vec<_> = CertificateDer::pem_slice_iter(ca.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|_| RequestHeaderError::BadClientCa)?;
        if client_ca.is_empty() {
            return Err(RequestHeaderError::BadClientCa);
        }
        let list = |key: &str| -> Result<Vec<String>, RequestHeaderError> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(value) => {
                    serde_json::from_str(value).map_err(|_| RequestHeaderError::BadList {
                        key: key.to_string(),
                        value: value.chars().take(200).collect(),
                    })
                }
            }
        };
        let username_headers = list("requestheader-username-headers")?;
        if username_headers.is_empty() {
            return Err(RequestHeaderError::NoUsernameHeader);
        }
        Ok(RequestHeader {
            client_ca,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_header_prefixes: list("requestheader-extra-headers-prefix")?,
        })
    }

    /// Whether a front-proxy certificate with common name `cn` is one the
    /// API server's settings allow.
    pub fn allows(&self, cn: Option<&str>) -> bool {
        self.allowed_names.is_empty()
            || cn.is_some_and(|cn| self.allowed_names.iter().any(|n| n == cn))
    }

    /// The user the API server named in `headers`; `None` without a user
    /// name (the API server always sends one for a user's request).
    pub fn user(&self, headers: &HeaderMap) -> Option<UserInfo> {
        let values = |names: &[String]| -> Vec<String> {
            names
                .iter()
                .flat_map(|name| headers.get_all(name.as_str()))
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let username = values(&self.username_headers)
            .into_iter()
            .find(|u| !u.is_empty())?;
        let uid = values(&self.uid_headers)
            .into_iter()
            .next()
            .unwrap_or_default();
        let groups = values(&self.group_headers);
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            let Some(key) = self
                .extra_header_prefixes
                .iter()
                .find_map(|prefix| strip_prefix_ignore_case(name.as_str(), prefix))
            else {
                continue;
            };
            if let Ok(value) = value.to_str() {
                // Keys come percent-encoded (the API server's
                // `headerKeyToExtraKey`), and lower case.
                extra
                    .entry(percent_decode(key).to_lowercase())
                    .or_default()
                    .push(value.to_string());
            }
        }
        Some(UserInfo {
            username,
            uid,
            groups,
            extra,
        })
    }
}

fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
        .filter(|rest| !rest.is_empty())
}

/// `%XX` decoded; anything malformed is kept as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "front-proxy-ca");
        params.self_signed(&key).expect("ca").pem()
    }

    fn config_map(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", ca_pem().as_str()),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            data.insert(k.to_string(), v.to_string());
        }
        data
    }

    #[test]
    fn the_user_comes_from_the_configured_headers_only() {
        let config = RequestHeader::from_config_map(&config_map(&[])).expect("valid");
        assert_eq!(config.client_ca.len(), 1);
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().expect("value"));
        headers.append("x-remote-group", "dev".parse().expect("value"));
        headers.append(
            "x-remote-group",
            "system:authenticated".parse().expect("value"),
        );
        headers.insert("x-remote-extra-scopes%2fA", "s1".parse().expect("value"));
        headers.insert("x-podprobe-user", "root".parse().expect("value"));
        let user = config.user(&headers).expect("a user");
        assert_eq!(user.username, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        assert_eq!(user.extra["scopes/a"], ["s1"]);
        headers.remove("x-remote-user");
        assert_eq!(config.user(&headers), None);
    }

    #[test]
    fn a_config_map_without_a_client_ca_or_with_bad_lists_is_refused() {
        let mut data = config_map(&[]);
        data.remove("requestheader-client-ca-file");
        assert_eq!(
            RequestHeader::from_config_map(&data),
            Err(RequestHeaderError::NoClientCa)
        );
        let data = config_map(&[("requestheader-client-ca-file", "not pem")]);
        assert_eq!(
            RequestHeader::from_config_map(&data),
            Err(RequestHeaderError::BadClientCa)
        );
        let data = config_map(&[("requestheader-allowed-names", "front-proxy-client")]);
        assert!(matches!(
            RequestHeader::from_config_map(&data),
            Err(RequestHeaderError::BadList { .. })
        ));
        let data = config_map(&[("requestheader-username-headers", "[]")]);
        assert_eq!(
            RequestHeader::from_config_map(&data),
            Err(RequestHeaderError::NoUsernameHeader)
        );
    }

    #[test]
    fn allowed_names_are_checked_when_listed() {
        let config = RequestHeader::from_config_map(&config_map(&[])).expect("valid");
        assert!(config.allows(Some("front-proxy-client")));
        assert!(!config.allows(Some("podprobe-status-api")));
        assert!(!config.allows(None));
        let any =
            RequestHeader::from_config_map(&config_map(&[("requestheader-allowed-names", "[]")]))
                .expect("valid");
        assert!(any.allows(None));
    }
}
