//! Secrets that probes name (client certificates, #14; header values, H25),
//! read with a GET by name in the pod's namespace, and nothing more.
//! podprobe's ClusterRole grants no access to Secrets; a namespace owner
//! grants `get` on one Secret's name to podprobe's ServiceAccount with a
//! Role, and only there does the read succeed. Nothing here lists or
//! watches Secrets. [`client_certificates`](super::client_certificates)
//! and [`header_secret_cache`](super::header_secret_cache) are the two
//! users, each turning a Secret into what its probes use.
//!
//! [`SecretCache`] caches each Secret, keyed by namespace and name, as the
//! kubelet's TTL-based secret manager does
//! (`pkg/kubelet/util/manager/cache_based_manager.go`, `defaultTTL`): a
//! read is good for [`SECRET_TTL`], after which the next probe that needs it
//! reads it again, so a rotated certificate is presented within one TTL.
//! Probes naming the same Secret wait for one read in flight rather than
//! each sending their own. A read that fails (forbidden, not found, not
//! usable) is remembered too, for a backoff that grows from
//! [`FAILURE_BACKOFF`]'s `initial` to the TTL, so that a pod probing every
//! second while its Role is missing costs the API server a request every
//! minute at most, not every second. When the API server does not answer
//! at all, what was read before stays in use until it does.
//!
//! What a cache keeps is bounded so that one namespace cannot fill it for
//! another (#37):
//! - Failed reads take no room from Secrets read: any pod may name Secrets
//!   that do not exist, no grant needed. Each is remembered apart, as its
//!   error and backoff only, at most [`MAX_FAILED_READS_PER_NAMESPACE`] of
//!   one namespace, and a namespace's first read of a Secret it does not
//!   hold takes a place among them. While all its places are taken and
//!   none is due for another read, a Secret it names for the first time
//!   fails without a read, saying so; once one is due, the new one is read
//!   in its place, its backoff continuing that one's. So a namespace naming
//!   thousands of Secrets that do not exist costs the API client's budget
//!   (shared with status patches and Events) at most that many reads per
//!   backoff, not one per probe run, and another namespace's failures are
//!   never forgotten for it.
//! - Secrets read are held up to [`MAX_SECRETS_PER_NAMESPACE`] of one
//!   namespace, and [`MAX_SECRETS`] and [`MAX_SECRET_BYTES`] in all. When
//!   a cache is full, a namespace under its share (the bound divided among
//!   the namespaces holding Secrets, itself included) takes room from the
//!   namespace holding the most, which lets go of its least recently used
//!   Secret; a namespace at its share gets no more, and its probe fails
//!   saying which bound it met.
//!
//! What a cache knows, and the decisions above, are the core's
//! [`TtlCache`]; this module makes the reads, holds the lock, and words
//! the errors and logs. Errors name the Secret, never its contents.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::time::Instant;

use crate::api::apiclient::{RequestError, bounded};
use podprobe_core::util::backoff::RetryPolicy;
use podprobe_core::util::gofmt::go_quote;
use podprobe_core::util::ttl_cache::{
    Failure, FailuresBackingOff, Full, Limits, Next, Outcome, Settled, TtlCache,
};

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
///
/// [`MAX_SECRET_FIELD_BYTES`]: super::client_certificates::MAX_SECRET_FIELD_BYTES
/// [`MAX_HEADER_SECRET_KEYS`]: super::header_secret_cache::MAX_HEADER_SECRET_KEYS
pub const MAX_SECRETS_PER_NAMESPACE: usize = 32;

/// Most Secrets a cache holds node-wide, whatever their namespaces. Once it
/// holds this many, a namespace holding fewer than its share (this divided
/// among the namespaces holding Secrets, itself included) takes room from
/// the namespace holding the most, which lets go of its least recently
/// used Secret (and reads it again, room permitting, when a probe next
/// names it); a namespace at its share gets no more until one goes idle.
pub const MAX_SECRETS: usize = 256;

/// Most bytes of Secrets a cache holds node-wide, shared between
/// namespaces as [`MAX_SECRETS`] is. A certificate counts its `tls.crt`
/// and `tls.key` PEM (more than the DER kept), header values their keys
/// and values (or why a value is unusable). Entries alone would let
/// [`MAX_SECRETS`] certificates of [`MAX_SECRET_FIELD_BYTES`] twice hold
/// 32 MiB; this is what one namespace at its most holds of them.
///
/// [`MAX_SECRET_FIELD_BYTES`]: super::client_certificates::MAX_SECRET_FIELD_BYTES
pub const MAX_SECRET_BYTES: usize = 4 * 1024 * 1024;

/// Most failed reads of one namespace a cache remembers, each as its error
/// and backoff only, apart from the Secrets held, so that Secrets that do
/// not exist (which any pod may name) take no room from those read. It
/// bounds a namespace's reads of Secrets it does not hold too: a first read
/// takes a place among the failures, and while a namespace remembers this
/// many and none is due for another read, a Secret it names for the first
/// time fails without a read (`not read: 32 Secrets of this namespace that
/// probes name could not be read ...`, with when the next is due); once one
/// is due, the new one is read in its place and takes over its count of
/// failures, so that place's backoff grows from [`FAILURE_BACKOFF`]'s
/// `initial` to the TTL whichever names take it in turn. A namespace's
/// reads of Secrets it does not hold are thus at most this many per
/// backoff: at the default TTL, at most 160 in its first minute (each place
/// read at 0, 2, 6, 14 and 30 s at the earliest), then at most 32 per TTL
/// once the backoff has reached it, 32 a minute, out of the API client's
/// requests that status patches and Events share (`--kube-api-qps`). The
/// backoff stops at the TTL, or at a minute (plus up to half again of
/// jitter) when `--secret-ttl-seconds` is longer, so a TTL under a minute
/// allows 32 per TTL. Secrets held are read apart, each once per TTL.
/// Another namespace's failures are never forgotten for it, and a namespace
/// with no more Secrets that fail than this keeps each one's own backoff.
pub const MAX_FAILED_READS_PER_NAMESPACE: usize = 32;

/// A Secret held or a failure remembered that is unused for this long (its
/// pods gone, their probes changed) is dropped at the next lookup of any
/// Secret.
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
    /// Never held across a read.
    state: Mutex<TtlCache<T>>,
    /// What a Secret is read for, in errors and logs (`client certificate`).
    what: &'static str,
    /// What probes use of a Secret and the bytes it holds, or why it is
    /// unusable.
    convert: fn(&Secret) -> Result<(T, usize), String>,
}

impl<T> std::fmt::Debug for SecretCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCache")
            .field("what", &self.inner.what)
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

impl<T: Clone> SecretCache<T> {
    /// Reads through `reader`, each read good for `ttl` and turned into
    /// what probes use, and the bytes that holds, by `convert`; `what`
    /// names the use in errors.
    pub fn reading(
        reader: impl SecretReader,
        ttl: Duration,
        what: &'static str,
        convert: fn(&Secret) -> Result<(T, usize), String>,
    ) -> Self {
        let limits = Limits {
            ttl,
            backoff: FAILURE_BACKOFF,
            idle: IDLE_EVICTION,
            per_namespace: MAX_SECRETS_PER_NAMESPACE,
            total: MAX_SECRETS,
            total_bytes: MAX_SECRET_BYTES,
            failed_per_namespace: MAX_FAILED_READS_PER_NAMESPACE,
        };
        SecretCache {
            inner: Arc::new(Inner {
                reader: Box::new(reader),
                ttl,
                state: Mutex::new(TtlCache::new(limits)),
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
        let next = self.state().next(namespace, name, Instant::now());
        let reading = match next {
            Next::Cached(lookup) => {
                return lookup.map_err(|failure| self.error(namespace, name, &failure));
            }
            Next::Refused(full) => {
                let why = self.why(namespace, name, &format!("not read: {}", no_room(&full)));
                tracing::warn!(secret = %name, error = %why, "cannot use the probe's Secret");
                return Err(why);
            }
            Next::BackingOff(failing) => {
                let why = self.why(
                    namespace,
                    name,
                    &format!("not read: {}", backing_off(&failing)),
                );
                // Each failure it waits for was logged when read; a warning
                // per refused lookup would let one namespace naming
                // thousands of Secrets flood the log instead.
                tracing::debug!(secret = %name, error = %why, "cannot use the probe's Secret");
                return Err(why);
            }
            Next::Read(reading) => reading,
        };
        // Should the probe that started the read give up on it (its
        // timeout), one still waiting makes it instead.
        reading
            .get_or_init(|| self.read(namespace, name))
            .await
            .clone()
            .map_err(|failure| self.error(namespace, name, &failure))
    }

    /// Reads `name` in `namespace`, keeps what the read came to, and logs
    /// it.
    async fn read(&self, namespace: &str, name: &str) -> Result<T, Failure> {
        let outcome = match self.inner.reader.get(namespace, name).await {
            Ok(secret) => match (self.inner.convert)(&secret) {
                Ok((value, bytes)) => Outcome::Usable(value, bytes),
                Err(why) => Outcome::Unusable(why),
            },
            Err(error @ ReadError::Failed(_)) => Outcome::Unanswered(error.to_string()),
            Err(error) => Outcome::Unusable(error.to_string()),
        };
        let settled = self
            .state()
            .settle(namespace, name, outcome, Instant::now());
        let what = self.inner.what;
        match settled {
            Settled::Held { value, evicted } => {
                for (other, secret) in evicted {
                    tracing::info!(
                        namespace = %other,
                        secret = %secret,
                        for_namespace = %namespace,
                        "let go of a {what} Secret held for probes: its namespace holds the most, and another holds less than its share"
                    );
                }
                Ok(value)
            }
            Settled::Kept { value, why } => {
                tracing::warn!(
                    secret = %name,
                    error = %self.why(namespace, name, &why),
                    "cannot read the probe's {what} Secret again; using what was read before until it can"
                );
                Ok(value)
            }
            Settled::Failed(failure) => {
                tracing::warn!(
                    secret = %name,
                    error = %self.error(namespace, name, &failure),
                    "cannot use the probe's {what} Secret; the probe fails until it can"
                );
                Err(failure)
            }
        }
    }

    /// A failed read of Secret `name` in `namespace`, as probes and logs
    /// get it.
    fn error(&self, namespace: &str, name: &str, failure: &Failure) -> String {
        let why = match failure {
            Failure::Read(why) => why.clone(),
            Failure::NotHeld(full) => format!("read, but not held: {}", no_room(full)),
        };
        self.why(namespace, name, &why)
    }

    /// An error about Secret `name` in `namespace`, for probes and logs.
    fn why(&self, namespace: &str, name: &str, why: &str) -> String {
        format!(
            "{}: Secret {} in namespace {}: {why}",
            self.inner.what,
            go_quote(name),
            go_quote(namespace)
        )
    }

    fn state(&self) -> MutexGuard<'_, TtlCache<T>> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn counts(&self) -> podprobe_core::util::ttl_cache::Counts {
        self.state().counts()
    }
}

/// Which bound a Secret met, and when it may fit.
fn no_room(full: &Full) -> String {
    let let_go = format!(
        "one is let go {} minutes after its last use",
        IDLE_EVICTION.as_secs() / 60
    );
    match full {
        Full::Namespace { held } => format!(
            "podprobe holds {held} Secrets of this namespace for probes already, the most it holds per namespace; {let_go}"
        ),
        Full::Node {
            held,
            most,
            namespace_holds,
            sharing,
        } => format!(
            "podprobe holds {held} Secrets for probes already, the most it holds on a node, and this namespace holds {namespace_holds} of them, its share of {most} among the {sharing} namespaces holding some; {let_go}"
        ),
        Full::Bytes {
            held,
            adding,
            most,
            namespace_would_hold,
            share,
            sharing,
        } => format!(
            "podprobe holds {held} bytes of Secrets for probes already, and with this one's {adding} would hold more than the {most} it holds on a node; this namespace would hold {namespace_would_hold}, more than its share of them, {share} among the {sharing} namespaces holding some; {let_go}"
        ),
    }
}

/// Why a namespace's new Secret waits, and what to do about it.
fn backing_off(failing: &FailuresBackingOff) -> String {
    let next = match failing.next_due_in {
        Some(due_in) => format!(
            "the next read of one of them is due in {}s",
            due_in.as_secs_f64().ceil()
        ),
        None => "each of them is being read now".to_string(),
    };
    format!(
        "{} Secrets of this namespace that probes name could not be read, the most whose failures podprobe remembers per namespace, and none is due for another read; create the Secrets the probes name or grant podprobe get on them, or name fewer; {next}",
        failing.remembered
    )
}

/// A scripted [`SecretReader`] and Secrets for it, shared by the unit
/// tests of the caches and of the prober.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::ByteString;

    use super::*;
    use crate::api::client_certificates::TLS_SECRET_TYPE;

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
    use crate::api::client_certificates::ClientCertificates;
    use crate::api::client_pem::client_identity_from_pem;
    use crate::api::header_secret_cache::{
        HeaderSecrets, MAX_HEADER_SECRET_KEYS, MAX_HEADER_VALUE_BYTES,
    };
    use crate::testing::pem_pair;
    use podprobe_core::spec::probe_spec::extension::ClientIdentity;
    use podprobe_core::util::ttl_cache::Counts;

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

    /// A namespace holds at most [`MAX_SECRETS_PER_NAMESPACE`], and once
    /// the node holds [`MAX_SECRETS`], a namespace at its share of them no
    /// more; a Secret over either fails without a read, and fits again
    /// once one goes idle.
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
        // 224 namespaces of one Secret each fill the node: with 225
        // namespaces holding some, a namespace's share is one.
        for namespace in 0..MAX_SECRETS - MAX_SECRETS_PER_NAMESPACE {
            certificates
                .get(&format!("ns{namespace}"), "s")
                .await
                .unwrap();
        }
        assert_eq!(certificates.counts().held, MAX_SECRETS);
        let gets = fake.gets();
        let refused = certificates.get("ns0", "another").await.unwrap_err();
        assert_eq!(
            refused,
            "client certificate: Secret \"another\" in namespace \"ns0\": not read: podprobe holds 256 Secrets for probes already, the most it holds on a node, and this namespace holds 1 of them, its share of 256 among the 225 namespaces holding some; one is let go 10 minutes after its last use"
        );
        assert_eq!(fake.gets(), gets, "no read for it");
        assert_eq!(certificates.counts().held, MAX_SECRETS, "nothing let go");
        tokio::time::advance(IDLE_EVICTION).await;
        assert!(certificates.get("shop", "one-more").await.is_ok());
    }

    /// The attack of #37: a tenant with pods on one node in eight
    /// namespaces names 32 Secrets in each that do not exist (no grant
    /// needed). Their failures are remembered apart from the Secrets held,
    /// so another namespace's Secret is still read and held.
    #[tokio::test(start_paused = true)]
    async fn failed_reads_fill_no_slot_another_namespace_needs() {
        let fake = Fake::new(Err(ReadError::NotFound), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        for namespace in 0..8 {
            for name in 0..MAX_SECRETS_PER_NAMESPACE {
                let failed = certificates
                    .get(&format!("tenant{namespace}"), &format!("missing{name}"))
                    .await;
                assert!(failed.unwrap_err().ends_with("it does not exist"));
            }
        }
        let (crt, key) = pem_pair();
        fake.answer(Ok(tls_secret(&crt, &key)));
        assert_eq!(
            certificates.get("victim", "client").await,
            Ok(identity_of(&crt, &key))
        );
        let gets = fake.gets();
        assert_eq!(
            certificates.get("victim", "client").await,
            Ok(identity_of(&crt, &key))
        );
        assert_eq!(fake.gets(), gets, "held: no second read");
        assert_eq!(certificates.counts().held, 1);
        assert_eq!(certificates.counts().failed, 8 * MAX_SECRETS_PER_NAMESPACE);
    }

    /// Once the node holds [`MAX_SECRETS`], a namespace under its share
    /// takes room from the namespace holding the most, whose least
    /// recently used Secret is let go; a namespace at its share takes
    /// none.
    #[tokio::test(start_paused = true)]
    async fn a_namespace_under_its_share_takes_room_from_the_one_holding_most() {
        let (crt, key) = pem_pair();
        let fake = Fake::new(Ok(tls_secret(&crt, &key)), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        let fill = async |namespace: &str, names: std::ops::Range<usize>| {
            for i in names {
                certificates.get(namespace, &format!("s{i}")).await.unwrap();
            }
        };
        // Eight namespaces at the most each holds; "hog"'s s0 is the
        // least recently used of all.
        fill("hog", 0..MAX_SECRETS_PER_NAMESPACE).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        fill("hog", 1..MAX_SECRETS_PER_NAMESPACE).await;
        for namespace in 0..7 {
            fill(&format!("ns{namespace}"), 0..MAX_SECRETS_PER_NAMESPACE).await;
        }
        assert_eq!(certificates.counts().held, MAX_SECRETS);
        let gets = fake.gets();
        // With nine namespaces holding some, each one's share is 28.
        assert_eq!(
            certificates.get("new", "s0").await,
            Ok(identity_of(&crt, &key))
        );
        assert_eq!(fake.gets(), gets + 1);
        assert_eq!(certificates.counts().held, MAX_SECRETS);
        let refused = certificates.get("hog", "s0").await.unwrap_err();
        assert_eq!(
            refused,
            "client certificate: Secret \"s0\" in namespace \"hog\": not read: podprobe holds 256 Secrets for probes already, the most it holds on a node, and this namespace holds 31 of them, its share of 256 among the 9 namespaces holding some; one is let go 10 minutes after its last use"
        );
        assert!(certificates.get("hog", "s1").await.is_ok());
        assert_eq!(fake.gets(), gets + 1, "hog's others are held still");
        // "new" takes room until it holds its share, then no more.
        fill("new", 1..28).await;
        let gets = fake.gets();
        let refused = certificates.get("new", "s28").await.unwrap_err();
        assert!(
            refused.ends_with("not read: podprobe holds 256 Secrets for probes already, the most it holds on a node, and this namespace holds 28 of them, its share of 256 among the 9 namespaces holding some; one is let go 10 minutes after its last use"),
            "{refused}"
        );
        assert_eq!(fake.gets(), gets, "no read for it");
        // Each gave way only while it held the most: none holds less than
        // its share, and none of the refused lookups read.
        for namespace in ["hog", "ns0", "ns1", "ns2", "ns3", "ns4", "ns5", "ns6"] {
            let mut held = 0;
            for i in 0..MAX_SECRETS_PER_NAMESPACE {
                held += usize::from(certificates.get(namespace, &format!("s{i}")).await.is_ok());
            }
            assert!(
                (28..MAX_SECRETS_PER_NAMESPACE).contains(&held),
                "{namespace}: {held}"
            );
        }
        assert_eq!(fake.gets(), gets);
        assert_eq!(certificates.counts().held, MAX_SECRETS);
    }

    /// A namespace's failures are remembered up to
    /// [`MAX_FAILED_READS_PER_NAMESPACE`]. While none of them is due, a
    /// Secret of that namespace named for the first time is not read; once
    /// one is, the new one is read and takes its place, never the place of
    /// one still backing off, nor another namespace's.
    #[tokio::test(start_paused = true)]
    async fn failed_reads_are_remembered_per_namespace_and_never_forgotten_for_another() {
        let fake = Fake::new(Err(ReadError::NotFound), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        for i in 0..MAX_FAILED_READS_PER_NAMESPACE {
            let _ = certificates.get("a", &format!("a{i}")).await;
        }
        // b0's backoff ends within 2 to 3 s, the others' 1.1 s later (and
        // a's at b0's).
        let _ = certificates.get("b", "b0").await;
        tokio::time::advance(Duration::from_millis(1100)).await;
        for i in 1..MAX_FAILED_READS_PER_NAMESPACE {
            let _ = certificates.get("b", &format!("b{i}")).await;
        }
        assert_eq!(fake.gets(), 2 * MAX_FAILED_READS_PER_NAMESPACE);
        let refused = certificates.get("b", "b32").await.unwrap_err();
        let expected = "client certificate: Secret \"b32\" in namespace \"b\": not read: 32 Secrets of this namespace that probes name could not be read, the most whose failures podprobe remembers per namespace, and none is due for another read; create the Secrets the probes name or grant podprobe get on them, or name fewer; the next read of one of them is due in ";
        assert!(
            [format!("{expected}1s"), format!("{expected}2s")].contains(&refused),
            "{refused}"
        );
        assert_eq!(fake.gets(), 2 * MAX_FAILED_READS_PER_NAMESPACE, "no read");
        let gets = fake.gets();
        for i in 0..MAX_FAILED_READS_PER_NAMESPACE {
            let failed = certificates.get("a", &format!("a{i}")).await;
            assert!(failed.unwrap_err().ends_with("it does not exist"));
        }
        for i in 0..MAX_FAILED_READS_PER_NAMESPACE {
            let _ = certificates.get("b", &format!("b{i}")).await;
        }
        assert_eq!(fake.gets(), gets, "all remembered, within their backoff");
        // b0's backoff has ended (and a's), b1's to b31's have not.
        tokio::time::advance(Duration::from_millis(1900)).await;
        let failed = certificates.get("b", "b32").await;
        assert!(failed.unwrap_err().ends_with("it does not exist"));
        assert_eq!(fake.gets(), gets + 1, "read in b0's place");
        for i in 1..=MAX_FAILED_READS_PER_NAMESPACE {
            let _ = certificates.get("b", &format!("b{i}")).await;
        }
        let refused = certificates.get("b", "b0").await.unwrap_err();
        assert!(
            refused.replace("\"b0\"", "\"b32\"").starts_with(expected),
            "{refused}"
        );
        assert_eq!(fake.gets(), gets + 1, "b0 was forgotten, and waits now");
        let state = certificates.state();
        for namespace in ["a", "b"] {
            assert_eq!(
                state.failed(namespace).len(),
                MAX_FAILED_READS_PER_NAMESPACE
            );
        }
        assert!(!state.failed("b").contains("b0"));
    }

    /// The attack after #37 item 2: one namespace's probes name 1,000
    /// Secrets that do not exist, each asked every second. The namespace's
    /// reads of Secrets it does not hold are its remembered failures'
    /// retries: each of the [`MAX_FAILED_READS_PER_NAMESPACE`] reads again
    /// only once its backoff has ended, whichever name takes its place, so
    /// a minute costs each at most the reads [`FAILURE_BACKOFF`] allows in
    /// a minute, not one per probe run; another namespace is read as
    /// always.
    #[tokio::test(start_paused = true)]
    async fn a_namespace_naming_many_missing_secrets_reads_at_the_backoffs_pace() {
        let fake = Fake::new(Err(ReadError::NotFound), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        let minute = Duration::from_secs(60);
        // One of them reads at 0 s, then after 2, 4, 8, 16 s at least
        // (jitter only adds): at 0, 2, 6, 14 and 30 s, the next at 62.
        let (mut per_failure, mut at) = (0, Duration::ZERO);
        while at < minute {
            per_failure += 1;
            at += FAILURE_BACKOFF.delay(per_failure).min(SECRET_TTL);
        }
        let bound = MAX_FAILED_READS_PER_NAMESPACE * per_failure as usize;
        assert_eq!(bound, 32 * 5);
        let (crt, key) = pem_pair();
        let mut tenant_gets = 0;
        for second in 0..minute.as_secs() {
            let gets = fake.gets();
            for name in 0..1000 {
                let failed = certificates.get("tenant", &format!("missing{name}")).await;
                assert!(failed.is_err());
            }
            tenant_gets += fake.gets() - gets;
            if second == 30 {
                fake.answer(Ok(tls_secret(&crt, &key)));
                assert_eq!(
                    certificates.get("victim", "client").await,
                    Ok(identity_of(&crt, &key))
                );
                fake.answer(Err(ReadError::NotFound));
                let gets = fake.gets();
                assert!(certificates.get("victim", "client").await.is_ok());
                assert_eq!(fake.gets(), gets, "held: no second read");
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert!(
            tenant_gets <= bound,
            "{tenant_gets} GETs in a minute for 60,000 lookups, more than {bound}"
        );
        assert!(certificates.counts().failed <= MAX_FAILED_READS_PER_NAMESPACE);
    }

    /// A first read takes its place among the failures when it starts:
    /// probes naming 100 new Secrets at once make 32 reads, not 100.
    #[tokio::test(start_paused = true)]
    async fn first_reads_in_flight_take_their_places() {
        let fake = Fake::new(Err(ReadError::NotFound), Duration::from_millis(50));
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        let names: Vec<String> = (0..100).map(|i| format!("missing{i}")).collect();
        let answers =
            futures::future::join_all(names.iter().map(|name| certificates.get("tenant", name)))
                .await;
        assert_eq!(fake.gets(), MAX_FAILED_READS_PER_NAMESPACE);
        let refused = answers
            .iter()
            .filter(|answer| {
                answer
                    .as_ref()
                    .unwrap_err()
                    .ends_with("; each of them is being read now")
            })
            .count();
        assert_eq!(refused, 100 - MAX_FAILED_READS_PER_NAMESPACE);
        assert_eq!(certificates.counts().failed, MAX_FAILED_READS_PER_NAMESPACE);
    }

    /// A header Secret of 16 keys of 4 KiB, as [`HeaderSecrets`] counts it.
    fn large_header_secret() -> (Secret, usize) {
        let data = (0..MAX_HEADER_SECRET_KEYS).map(|i| {
            (
                format!("k{i:02}"),
                k8s_openapi::ByteString(vec![b'v'; MAX_HEADER_VALUE_BYTES]),
            )
        });
        let secret = Secret {
            data: Some(data.collect()),
            ..Secret::default()
        };
        (
            secret,
            MAX_HEADER_SECRET_KEYS * (3 + MAX_HEADER_VALUE_BYTES),
        )
    }

    /// The bytes a cache holds stay within [`MAX_SECRET_BYTES`], shared
    /// between namespaces as the Secrets are: a Secret that would take a
    /// namespace over its share of a full cache is refused once read (its
    /// size is known only then) and the refusal is remembered as a failed
    /// read; a namespace under its share takes room from the one holding
    /// the most bytes.
    #[tokio::test(start_paused = true)]
    async fn bytes_held_are_bounded_and_shared_between_namespaces() {
        let (secret, size) = large_header_secret();
        let fake = Fake::new(Ok(secret), Duration::ZERO);
        let headers = HeaderSecrets::new(fake.clone(), SECRET_TTL);
        for i in 0..MAX_SECRETS_PER_NAMESPACE {
            headers.get("big", &format!("s{i}")).await.unwrap();
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let fit = MAX_SECRET_BYTES / size;
        for i in 0..fit - MAX_SECRETS_PER_NAMESPACE {
            headers.get("second", &format!("s{i}")).await.unwrap();
        }
        assert_eq!(
            headers.counts(),
            Counts {
                held: fit,
                bytes: fit * size,
                failed: 0,
                reading: 0
            }
        );
        let refused = headers.get("second", "s31").await.unwrap_err();
        assert_eq!(
            refused,
            "header value: Secret \"s31\" in namespace \"second\": read, but not held: podprobe holds 4131792 bytes of Secrets for probes already, and with this one's 65584 would hold more than the 4194304 it holds on a node; this namespace would hold 2098688, more than its share of them, 2097152 among the 2 namespaces holding some; one is let go 10 minutes after its last use"
        );
        let gets = fake.gets();
        assert_eq!(headers.get("second", "s31").await.unwrap_err(), refused);
        assert_eq!(fake.gets(), gets, "refused within its backoff, unread");
        // A third namespace takes room from "big", which holds the most.
        headers.get("third", "s0").await.unwrap();
        assert_eq!(
            headers.counts(),
            Counts {
                held: fit,
                bytes: fit * size,
                failed: 1,
                reading: 0
            }
        );
        let gets = fake.gets();
        for i in 0..fit - MAX_SECRETS_PER_NAMESPACE {
            headers.get("second", &format!("s{i}")).await.unwrap();
        }
        assert_eq!(fake.gets(), gets, "none of second's let go");
        for i in 0..MAX_SECRETS_PER_NAMESPACE {
            let _ = headers.get("big", &format!("s{i}")).await;
        }
        assert_eq!(fake.gets(), gets + 1, "one of big's let go, read again");
        assert!(headers.counts().bytes <= MAX_SECRET_BYTES);
    }

    /// Probes naming a Secret wait for one read whatever it comes to, and a
    /// read the first probe gives up on is made by the next one waiting, or
    /// leaves nothing behind if none is.
    #[tokio::test(start_paused = true)]
    async fn a_read_in_flight_is_shared_and_outlives_the_probe_that_gave_up() {
        let fake = Fake::new(Err(ReadError::NotFound), Duration::from_millis(50));
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        let answers =
            futures::future::join_all((0..8).map(|_| certificates.get("shop", "gone"))).await;
        assert_eq!(fake.gets(), 1, "one GET for eight probes");
        assert!(answers.iter().all(|answer| answer == &answers[0]));
        let (crt, key) = pem_pair();
        fake.answer(Ok(tls_secret(&crt, &key)));
        let (first, second) = tokio::join!(
            tokio::time::timeout(
                Duration::from_millis(10),
                certificates.get("shop", "client")
            ),
            certificates.get("shop", "client"),
        );
        assert!(first.is_err(), "gave up");
        assert_eq!(second, Ok(identity_of(&crt, &key)));
        assert_eq!(fake.gets(), 3, "the read given up on, and the second's");
        let given_up =
            tokio::time::timeout(Duration::from_millis(10), certificates.get("shop", "other"))
                .await;
        assert!(given_up.is_err());
        let _ = certificates.get("shop", "client").await;
        assert_eq!(certificates.counts().reading, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_entries_are_dropped() {
        let (crt, key) = pem_pair();
        let fake = Fake::new(Ok(tls_secret(&crt, &key)), Duration::ZERO);
        let certificates = ClientCertificates::new(fake.clone(), SECRET_TTL);
        certificates.get("shop", "kept").await.unwrap();
        fake.answer(Err(ReadError::NotFound));
        let _ = certificates.get("shop", "gone").await;
        tokio::time::advance(IDLE_EVICTION).await;
        let _ = certificates.get("shop", "used").await;
        assert_eq!(
            certificates.counts(),
            Counts {
                held: 0,
                bytes: 0,
                failed: 1,
                reading: 0
            }
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
