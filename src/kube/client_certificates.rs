//! Client certificates (`podprobe.tls.clientCertificate`, #14) and header
//! values (`podprobe.http.headers`, H25) from Secrets: the Secret a probe
//! names, read with a GET by name in the pod's namespace, and nothing more. podprobe's ClusterRole grants no
//! access to Secrets; a namespace owner grants `get` on one Secret's name
//! to podprobe's ServiceAccount with a Role, and only there does the read
//! succeed. Nothing here lists or watches Secrets.
//!
//! [`ClientCertificates`] caches each Secret, keyed by namespace and name,
//! as the kubelet's TTL-based secret manager does
//! (`pkg/kubelet/util/manager/cache_based_manager.go`, `defaultTTL`): a
//! read is good for [`SECRET_TTL`], after which the next probe that needs it
//! reads it again, so a rotated certificate is presented within one TTL.
//! Probes naming the same Secret wait for one read in flight rather than
//! each sending their own. A read that fails (forbidden, not found, not a
//! usable certificate) is cached too, for a backoff that grows from
//! [`FAILURE_BACKOFF`]'s `initial` to the TTL, so that a pod probing every
//! second while its Role is missing costs the API server a request every
//! minute at most, not every second. When the API server does not answer
//! at all, a certificate read before stays in use until it does.
//!
//! The certificate and key never leave this module but as a
//! [`ClientIdentity`], whose `Debug` shows no key material; errors name the
//! Secret and the field, never their contents.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::time::Instant;

use crate::kube::apiclient::{RequestError, bounded};
use crate::probe::client_identity::ClientIdentitySource;
use crate::probe::client_pem::client_identity_from_pem;
use crate::probe::go_quote;
use crate::probe::header_secrets::HeaderSecretSource;
use crate::probe::spec::extension::ClientIdentity;
use crate::util::backoff::RetryPolicy;

/// How long a read Secret is used before it is read again: the kubelet's
/// secret manager's default TTL (one minute). A rotated certificate is
/// presented at most this long after the Secret changed.
pub const SECRET_TTL: Duration = Duration::from_secs(60);

/// The backoff after failed reads of one Secret: the first retry after
/// `initial`, doubling, at most the TTL in effect (`max` here is the
/// default TTL's). Soon enough that a Role granted after the pod started is
/// noticed within seconds; slow enough not to load the API server.
pub const FAILURE_BACKOFF: RetryPolicy = RetryPolicy {
    initial: Duration::from_secs(2),
    max: SECRET_TTL,
    attempts: u32::MAX,
};

/// Most Secrets of one namespace a cache holds: a namespace's owner may
/// grant podprobe any number of Secrets and name each in a probe, and each
/// may hold up to [`MAX_SECRET_FIELD_BYTES`] twice (a certificate) or
/// [`MAX_HEADER_SECRET_KEYS`] values. A probe naming one more fails with
/// its Secret reason, without a read, until one of them goes idle.
pub const MAX_SECRETS_PER_NAMESPACE: usize = 32;

/// Most Secrets a cache holds node-wide, whatever their namespaces: with
/// the per-namespace bound, eight namespaces at their most.
pub const MAX_SECRETS: usize = 256;

/// The largest `tls.crt` and the largest `tls.key` accepted, in bytes of
/// PEM. A chain of a few certificates takes a few KiB; the API server's
/// own bound on a Secret (1 MiB) would let one pod's Secret hold a
/// megabyte in podprobe's memory per name.
pub const MAX_SECRET_FIELD_BYTES: usize = 64 * 1024;

/// The most keys of a Secret that header values are read from (H25): each
/// is kept, as it cannot be known which ones the node's probes will name.
pub const MAX_HEADER_SECRET_KEYS: usize = 16;

/// The longest header value read from a Secret, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;

/// The Secret type a client certificate must have (`kubectl create secret
/// tls`, cert-manager's Certificates).
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// An entry unused for this long (its pods gone, their probes changed) is
/// dropped at the next lookup of any Secret.
const IDLE_EVICTION: Duration = Duration::from_secs(10 * 60);

/// Why a Secret could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// podprobe may not `get` it: no Role grants it in this namespace.
    #[error(
        "podprobe may not read it; grant get on it to podprobe's ServiceAccount with a Role and RoleBinding in the namespace ({0})"
    )]
    Forbidden(String),
    #[error("it does not exist")]
    NotFound,
    /// Nothing was said about the Secret itself: no answer in time, no
    /// connection, or another error status (a 5xx, podprobe's own token
    /// refused).
    #[error("{0}")]
    Failed(String),
}

impl From<RequestError> for ReadError {
    fn from(error: RequestError) -> Self {
        match error {
            RequestError::Kube(kube::Error::Api(status)) if status.code == 403 => {
                ReadError::Forbidden(status.message)
            }
            RequestError::Kube(kube::Error::Api(status)) if status.code == 404 => {
                ReadError::NotFound
            }
            other => ReadError::Failed(other.to_string()),
        }
    }
}

/// Reads one Secret by name: a GET, the only verb podprobe may be granted.
pub trait SecretReader: Send + Sync + 'static {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Secret, ReadError>>;
}

/// [`SecretReader`] through the API server.
#[derive(Clone)]
pub struct KubeSecrets(pub kube::Client);

impl SecretReader for KubeSecrets {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Secret, ReadError>> {
        Box::pin(async move {
            let secrets: Api<Secret> = Api::namespaced(self.0.clone(), namespace);
            Ok(bounded(secrets.get(name)).await?)
        })
    }
}

/// What a Secret holds for a probe (`T`), or why it holds nothing usable;
/// the error names the Secret and says what to fix.
pub type Lookup<T> = Result<T, String>;

/// Cached client certificates, shared by every probe of one podprobe.
pub type ClientCertificates = SecretCache<ClientIdentity>;

/// Secrets read for probes, each turned into what probes use of it (`T`)
/// once per read, shared by every probe of one podprobe. Cheap to clone;
/// clones share the cache.
pub struct SecretCache<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for SecretCache<T> {
    fn clone(&self) -> Self {
        SecretCache {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<T> {
    reader: Box<dyn SecretReader>,
    ttl: Duration,
    entries: Mutex<HashMap<(String, String), Slot<T>>>,
    /// What a Secret is read for, in errors and logs (`client certificate`).
    what: &'static str,
    /// What probes use of a Secret, or why it is unusable.
    convert: fn(&Secret) -> Result<T, String>,
}

struct Slot<T> {
    /// Held across the read, so that lookups of the same Secret wait for
    /// one read instead of each making their own.
    entry: Arc<tokio::sync::Mutex<Entry<T>>>,
    last_used: Instant,
}

struct Entry<T> {
    /// The last read's result and until when it is used.
    cached: Option<(Lookup<T>, Instant)>,
    /// Failed reads since the last success, for the backoff.
    failures: u32,
}

impl<T> Default for Entry<T> {
    fn default() -> Self {
        Entry {
            cached: None,
            failures: 0,
        }
    }
}

impl ClientIdentitySource for ClientCertificates {
    fn client_identity<'a>(
        &'a self,
        namespace: &'a str,
        secret: &'a str,
    ) -> BoxFuture<'a, Lookup<ClientIdentity>> {
        Box::pin(self.get(namespace, secret))
    }
}

impl<T> std::fmt::Debug for SecretCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCache")
            .field("what", &self.inner.what)
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

impl ClientCertificates {
    /// Reads client certificates through `reader`, each read good for `ttl`.
    pub fn new(reader: impl SecretReader, ttl: Duration) -> Self {
        SecretCache::reading(reader, ttl, "client certificate", identity)
    }
}

impl<T: Clone> SecretCache<T> {
    /// Reads through `reader`, each read good for `ttl` and turned into
    /// what probes use by `convert`; `what` names the use in errors.
    pub fn reading(
        reader: impl SecretReader,
        ttl: Duration,
        what: &'static str,
        convert: fn(&Secret) -> Result<T, String>,
    ) -> Self {
        SecretCache {
            inner: Arc::new(Inner {
                reader: Box::new(reader),
                ttl,
                entries: Mutex::new(HashMap::new()),
                what,
                convert,
            }),
        }
    }

    /// What Secret `name` in `namespace` holds for probes: from the cache
    /// while its read is younger than the TTL (a failed read: within its
    /// backoff), else read now. A failed read is logged when it is made,
    /// not each time a probe reuses it, so the log repeats at the
    /// backoff's pace; the caller's span names the pod and container.
    ///
    /// When the API server does not answer (as opposed to refusing, or
    /// answering that the Secret is gone or unusable), what was read before
    /// is used until the Secret can be read again: an API server outage
    /// must not fail every such probe of the node.
    pub async fn get(&self, namespace: &str, name: &str) -> Lookup<T> {
        let slot = match self.slot(namespace, name) {
            Ok(slot) => slot,
            Err(full) => {
                let why = format!(
                    "{}: Secret {} in namespace {}: not read: {full}",
                    self.inner.what,
                    go_quote(name),
                    go_quote(namespace)
                );
                tracing::warn!(secret = %name, error = %why, "cannot use the probe's Secret");
                return Err(why);
            }
        };
        let mut entry = slot.lock().await;
        if let Some((lookup, until)) = &entry.cached
            && *until > Instant::now()
        {
            return lookup.clone();
        }
        let read = self.inner.reader.get(namespace, name).await;
        let stale = match (&read, &entry.cached) {
            (Err(ReadError::Failed(_)), Some((Ok(previous), _))) => Some(previous.clone()),
            _ => None,
        };
        let what = self.inner.what;
        let result = read
            .map_err(|error| error.to_string())
            .and_then(|secret| (self.inner.convert)(&secret))
            .map_err(|why| {
                format!(
                    "{what}: Secret {} in namespace {}: {why}",
                    go_quote(name),
                    go_quote(namespace)
                )
            });
        let now = Instant::now();
        let (lookup, until) = match result {
            Ok(value) => {
                entry.failures = 0;
                (Ok(value), now + self.inner.ttl)
            }
            Err(why) => {
                entry.failures = entry.failures.saturating_add(1);
                let until = now + FAILURE_BACKOFF.jittered(entry.failures).min(self.inner.ttl);
                match stale {
                    Some(previous) => {
                        tracing::warn!(
                            secret = %name,
                            error = %why,
                            "cannot read the probe's {what} Secret again; using what was read before until it can"
                        );
                        (Ok(previous), until)
                    }
                    None => {
                        tracing::warn!(
                            secret = %name,
                            error = %why,
                            "cannot use the probe's {what} Secret; the probe fails until it can"
                        );
                        (Err(why), until)
                    }
                }
            }
        };
        entry.cached = Some((lookup.clone(), until));
        lookup
    }

    /// The entry of one Secret, made on first use unless the cache holds
    /// [`MAX_SECRETS_PER_NAMESPACE`] of its namespace or [`MAX_SECRETS`]
    /// already (why not, then); idle entries are dropped while the map is
    /// held anyway.
    fn slot(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<tokio::sync::Mutex<Entry<T>>>, String> {
        let now = Instant::now();
        let mut entries = self
            .inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, slot| now.duration_since(slot.last_used) < IDLE_EVICTION);
        let key = (namespace.to_string(), name.to_string());
        if !entries.contains_key(&key) {
            let in_namespace = entries.keys().filter(|(ns, _)| ns == namespace).count();
            if in_namespace >= MAX_SECRETS_PER_NAMESPACE {
                return Err(format!(
                    "podprobe holds {in_namespace} Secrets of this namespace for probes already, the most it holds per namespace; one is let go 10 minutes after its last use"
                ));
            }
            if entries.len() >= MAX_SECRETS {
                return Err(format!(
                    "podprobe holds {} Secrets for probes already, the most it holds on a node; one is let go 10 minutes after its last use",
                    entries.len()
                ));
            }
        }
        let slot = entries.entry(key).or_insert_with(|| Slot {
            entry: Arc::default(),
            last_used: now,
        });
        slot.last_used = now;
        Ok(slot.entry.clone())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A Secret's keys as header values (H25), each a value or why it cannot
/// be one.
pub type HeaderValues = Arc<BTreeMap<String, Result<String, String>>>;

/// Cached header values from Secrets, shared by every probe of one podprobe.
pub type HeaderSecrets = SecretCache<HeaderValues>;

impl HeaderSecrets {
    /// Reads header values through `reader`, each read good for `ttl`.
    pub fn new(reader: impl SecretReader, ttl: Duration) -> Self {
        SecretCache::reading(reader, ttl, "header value", header_values)
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

/// A scripted [`SecretReader`] and Secrets for it, shared by the unit
/// tests of the cache and of the prober.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::ByteString;

    use super::*;

    pub fn tls_secret(crt: &str, key: &str) -> Secret {
        Secret {
            type_: Some(TLS_SECRET_TYPE.into()),
            data: Some(BTreeMap::from([
                ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
                ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
            ])),
            ..Secret::default()
        }
    }

    /// Answers each GET with the current `answer`, after `delay`, counting
    /// the GETs.
    #[derive(Clone)]
    pub struct Fake(Arc<FakeState>);

    pub struct FakeState {
        answer: Mutex<Result<Secret, ReadError>>,
        gets: AtomicUsize,
        delay: Duration,
    }

    impl Fake {
        pub fn new(answer: Result<Secret, ReadError>, delay: Duration) -> Self {
            Fake(Arc::new(FakeState {
                answer: Mutex::new(answer),
                gets: AtomicUsize::new(0),
                delay,
            }))
        }

        pub fn answer(&self, answer: Result<Secret, ReadError>) {
            *self.0.answer.lock().unwrap() = answer;
        }

        pub fn gets(&self) -> usize {
            self.0.gets.load(Ordering::SeqCst)
        }
    }

    impl SecretReader for Fake {
        fn get<'a>(
            &'a self,
            _namespace: &'a str,
            _name: &'a str,
        ) -> BoxFuture<'a, Result<Secret, ReadError>> {
            Box::pin(async move {
                self.0.gets.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.0.delay).await;
                self.0.answer.lock().unwrap().clone()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Fake, tls_secret};
    use super::*;
    use crate::testing::pem_pair;

    fn identity_of(crt: &str, key: &str) -> ClientIdentity {
        client_identity_from_pem(crt.as_bytes(), key.as_bytes()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn probes_naming_one_secret_share_one_read() {
        let (crt, key) = pem_pair();
        let fake = Fake::new(Ok(tls_secret(&crt, &key)), Duration::from_millis(50));
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        let answers =
            futures::future::join_all((0..8).map(|_| certificates.get("shop", "app-probe-client")))
                .await;
        assert_eq!(fake.gets(), 1, "one GET for eight probes");
        for answer in answers {
            assert_eq!(answer, Ok(identity_of(&crt, &key)));
        }
        let _ = certificates.get("other", "app-probe-client").await;
        assert_eq!(fake.gets(), 2, "another namespace is another Secret");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_secret_is_presented_within_one_ttl() {
        let (old_crt, old_key) = pem_pair();
        let fake = Fake::new(Ok(tls_secret(&old_crt, &old_key)), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        let _ = certificates.get("shop", "client").await;
        let (new_crt, new_key) = pem_pair();
        fake.answer(Ok(tls_secret(&new_crt, &new_key)));
        tokio::time::advance(SECRET_TTL - Duration::from_millis(1)).await;
        let answer = certificates.get("shop", "client").await;
        assert_eq!(answer, Ok(identity_of(&old_crt, &old_key)));
        assert_eq!(fake.gets(), 1, "no GET within the TTL");
        tokio::time::advance(Duration::from_millis(1)).await;
        let answer = certificates.get("shop", "client").await;
        assert_eq!(answer, Ok(identity_of(&new_crt, &new_key)));
        assert_eq!(fake.gets(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_reads_back_off_up_to_the_ttl_and_a_grant_is_noticed() {
        let forbidden = ReadError::Forbidden(
            r#"secrets "client" is forbidden: User "system:serviceaccount:podprobe-system:podprobe" cannot get resource "secrets""#.into(),
        );
        let fake = Fake::new(Err(forbidden), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        assert_eq!(
            certificates.get("shop", "client").await.unwrap_err(),
            r#"client certificate: Secret "client" in namespace "shop": podprobe may not read it; grant get on it to podprobe's ServiceAccount with a Role and RoleBinding in the namespace (secrets "client" is forbidden: User "system:serviceaccount:podprobe-system:podprobe" cannot get resource "secrets")"#
        );
        // A probe every 100 ms for ten minutes: the GETs are the backoff's
        // (2, 4, 8, 16, 32 s with up to half again of jitter, then one a
        // TTL), never one per probe.
        let mut gets_at = vec![Instant::now()];
        for _ in 0..6000 {
            tokio::time::advance(Duration::from_millis(100)).await;
            let before = fake.gets();
            let _ = certificates.get("shop", "client").await;
            if fake.gets() > before {
                gets_at.push(Instant::now());
            }
        }
        assert_eq!(fake.gets(), gets_at.len());
        let gaps: Vec<Duration> = gets_at.windows(2).map(|w| w[1] - w[0]).collect();
        for (i, gap) in gaps.iter().enumerate() {
            let floor = FAILURE_BACKOFF.delay(i as u32 + 1).min(SECRET_TTL);
            assert!(
                *gap >= floor && *gap <= floor.mul_f64(1.5) + Duration::from_millis(100),
                "gap {i}: {gap:?}"
            );
        }
        assert!((11..=16).contains(&gets_at.len()), "{gaps:?}");
        // The Role is granted: the next read after the backoff succeeds,
        // and a success resets the backoff.
        let (crt, key) = pem_pair();
        fake.answer(Ok(tls_secret(&crt, &key)));
        tokio::time::advance(SECRET_TTL.mul_f64(1.5)).await;
        assert_eq!(
            certificates.get("shop", "client").await,
            Ok(identity_of(&crt, &key))
        );
        fake.answer(Err(ReadError::NotFound));
        tokio::time::advance(SECRET_TTL).await;
        assert_eq!(
            certificates.get("shop", "client").await.unwrap_err(),
            r#"client certificate: Secret "client" in namespace "shop": it does not exist"#
        );
        let before = fake.gets();
        tokio::time::advance(FAILURE_BACKOFF.initial.mul_f64(1.5)).await;
        let _ = certificates.get("shop", "client").await;
        assert_eq!(fake.gets(), before + 1, "the backoff starts over");
    }

    #[tokio::test(start_paused = true)]
    async fn an_api_server_that_does_not_answer_keeps_the_certificate_read_before() {
        let (crt, key) = pem_pair();
        let fake = Fake::new(Ok(tls_secret(&crt, &key)), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        certificates.get("shop", "client").await.unwrap();
        fake.answer(Err(ReadError::Failed(
            "the API server did not answer within 10s".into(),
        )));
        tokio::time::advance(SECRET_TTL).await;
        assert_eq!(
            certificates.get("shop", "client").await,
            Ok(identity_of(&crt, &key))
        );
        assert_eq!(fake.gets(), 2);
        tokio::time::advance(FAILURE_BACKOFF.initial.mul_f64(1.5)).await;
        certificates.get("shop", "client").await.unwrap();
        assert_eq!(fake.gets(), 3, "read again at the backoff's pace");
        // An answer that the Secret is gone is believed.
        fake.answer(Err(ReadError::NotFound));
        tokio::time::advance(SECRET_TTL).await;
        assert!(certificates.get("shop", "client").await.is_err());
        // With nothing read before, no answer is a failure too.
        fake.answer(Err(ReadError::Failed("connection refused".into())));
        tokio::time::advance(SECRET_TTL).await;
        assert_eq!(
            certificates.get("shop", "client").await,
            Err(
                r#"client certificate: Secret "client" in namespace "shop": connection refused"#
                    .into()
            )
        );
    }

    /// A namespace holds at most its share of the cache, and the node at
    /// most the whole; a Secret over either fails without a read, and
    /// fits again once one goes idle.
    #[tokio::test(start_paused = true)]
    async fn secrets_held_are_bounded_per_namespace_and_per_node() {
        let (crt, key) = pem_pair();
        let fake = Fake::new(Ok(tls_secret(&crt, &key)), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        for i in 0..MAX_SECRETS_PER_NAMESPACE {
            assert!(certificates.get("shop", &format!("s{i}")).await.is_ok());
        }
        let refused = certificates.get("shop", "one-more").await.unwrap_err();
        assert_eq!(
            refused,
            "client certificate: Secret \"one-more\" in namespace \"shop\": not read: podprobe holds 32 Secrets of this namespace for probes already, the most it holds per namespace; one is let go 10 minutes after its last use"
        );
        assert_eq!(fake.gets(), MAX_SECRETS_PER_NAMESPACE, "no read for it");
        assert!(
            certificates.get("shop", "s0").await.is_ok(),
            "a held one still serves"
        );
        let mut namespace = 0;
        while certificates.len() < MAX_SECRETS {
            let _ = certificates
                .get(
                    &format!("ns{namespace}"),
                    &format!("s{}", certificates.len()),
                )
                .await;
            namespace += 1;
        }
        let refused = certificates.get("fresh", "s").await.unwrap_err();
        assert!(refused.contains("the most it holds on a node"), "{refused}");
        tokio::time::advance(IDLE_EVICTION).await;
        assert!(certificates.get("shop", "one-more").await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_entries_are_dropped() {
        let fake = Fake::new(Err(ReadError::NotFound), Duration::ZERO);
        let certificates = ClientCertificates::new(fake, SECRET_TTL);
        let _ = certificates.get("shop", "gone").await;
        tokio::time::advance(IDLE_EVICTION).await;
        let _ = certificates.get("shop", "used").await;
        assert_eq!(certificates.len(), 1);
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

    #[test]
    fn forbidden_and_not_found_are_told_apart() {
        let status = |code: u16| {
            RequestError::Kube(kube::Error::Api(
                kube::core::Status::failure("denied", "Forbidden")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert_eq!(
            ReadError::from(status(403)),
            ReadError::Forbidden("denied".into())
        );
        assert_eq!(ReadError::from(status(404)), ReadError::NotFound);
        assert!(matches!(ReadError::from(status(500)), ReadError::Failed(_)));
    }
}
