//! Header values (`podprobe.http.headers`, H25) from the Secrets probes
//! name: a [`SecretCache`] of each Secret's keys as header values, read and
//! bounded as every Secret probes name is ([`super::secret_cache`]). A
//! value goes only into its probe's request; errors name the Secret and
//! the key, never the value.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;

use crate::api::secret_cache::{Lookup, SecretCache, SecretReader};
use podprobe_core::spec::header_secrets::HeaderSecretSource;
use podprobe_core::util::gofmt::go_quote;

/// The most keys of a Secret that header values are read from (H25): each
/// is kept, as it cannot be known which ones the node's probes will name.
pub const MAX_HEADER_SECRET_KEYS: usize = 16;

/// The longest header value read from a Secret, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;

/// A Secret's keys as header values (H25), each a value or why it cannot
/// be one.
pub type HeaderValues = Arc<BTreeMap<String, Result<String, String>>>;

/// Cached header values from Secrets, shared by every probe of one podprobe.
pub type HeaderSecrets = SecretCache<HeaderValues>;

impl HeaderSecrets {
    /// Reads header values through `reader`, each read good for `ttl`.
    pub fn new(reader: impl SecretReader, ttl: Duration) -> Self {
        SecretCache::reading(reader, ttl, "header value", |secret| {
            let values = header_values(secret)?;
            let bytes = values
                .iter()
                .map(|(key, value)| match value {
                    Ok(text) | Err(text) => key.len() + text.len(),
                })
                .sum();
            Ok((values, bytes))
        })
    }
}

impl HeaderSecretSource for HeaderSecrets {
    fn header_value<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Lookup<String>> {
        Box::pin(async move {
            let values = self.get(namespace, secret).await?;
            let why = match values.get(key) {
                Some(Ok(value)) => return Ok(value.clone()),
                Some(Err(why)) => format!("key {}: {why}", go_quote(key)),
                None => format!("it has no key {}", go_quote(key)),
            };
            Err(format!(
                "header value: Secret {} in namespace {}: {why}",
                go_quote(secret),
                go_quote(namespace)
            ))
        })
    }
}

/// The keys of a Secret as header values: at most
/// [`MAX_HEADER_SECRET_KEYS`] of them, each UTF-8 text of at most
/// [`MAX_HEADER_VALUE_BYTES`] (a value a header cannot carry, a line break,
/// fails the probe with Go's `invalid header field value` when it is sent).
pub fn header_values(secret: &Secret) -> Result<HeaderValues, String> {
    let data = secret.data.clone().unwrap_or_default();
    if data.len() > MAX_HEADER_SECRET_KEYS {
        return Err(format!(
            "it has {} keys, more than the {MAX_HEADER_SECRET_KEYS} podprobe reads header values from",
            data.len()
        ));
    }
    let values = data.into_iter().map(|(key, value)| {
        let value = if value.0.len() > MAX_HEADER_VALUE_BYTES {
            Err(format!("longer than {MAX_HEADER_VALUE_BYTES} bytes"))
        } else {
            String::from_utf8(value.0).map_err(|_| "not UTF-8 text".to_string())
        };
        (key, value)
    });
    Ok(Arc::new(values.collect()))
}
