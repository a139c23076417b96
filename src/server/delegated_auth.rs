//! Delegated authentication and authorisation of `/metrics`, as the
//! kubelet's webhook authenticator and authorizer and controller-runtime's
//! secure metrics do it: the API server says who a bearer token belongs to
//! (a `TokenReview`, authentication.k8s.io/v1) and whether that user may
//! `get` the path (a `SubjectAccessReview` with `nonResourceAttributes`,
//! authorization.k8s.io/v1), so RBAC decides who scrapes podprobe:
//!
//! ```yaml
//! rules:
//!   - nonResourceURLs: ["/metrics", "/metrics/probes"]
//!     verbs: [get]
//! ```
//!
//! The probe status of a pod (`kubectl podprobe status`, PS2) is decided the
//! same way, with `resourceAttributes`: whether the caller may `get` that
//! pod ([`Attributes::GetPod`]).
//!
//! [`DelegatedAuth::authorize`] is the decision: 401 without a token the API
//! server accepts, 403 when RBAC denies, as the kubelet answers. Both
//! reviews are cached for a short time, keyed by a keyed hash of the token
//! (the token itself is not kept): accepted tokens and allowed requests for
//! [`AUTHORIZED_TTL`], rejected ones for [`UNAUTHORIZED_TTL`], at most
//! [`CACHE_CAPACITY`] of each kind in each cache, so that a flood of forged
//! tokens, whose rejections anyone can make, never pushes the real
//! scraper's accepted token out. Granted verdicts are charged to the user
//! the `TokenReview` named, at most [`PER_USER_CAPACITY`] each, and a full
//! cache evicts from the users holding the most: one user who mints tokens,
//! or asks about every pod name RBAC lets it get, pushes out only its own
//! verdicts, never the scraper's one or two. A failed review is not cached.
//!
//! At most [`MAX_REVIEWS_IN_FLIGHT`] reviews are sent at once, shared
//! fairly between the sources that ask ([`review_turns`]: the address a
//! `/metrics` request came from, the user the status API's front proxy
//! named): a source holds a few places, in flight or waiting, and a freed
//! turn goes to the source holding the fewest. A request that would need
//! another place is [`AccessDecision::Throttled`] at once (429) instead of
//! waiting, and so is one whose review got no turn within its time: it was
//! never sent, so no verdict is claimed. A flood of forged tokens from one
//! pod thus holds neither the API server nor a scraper elsewhere for longer
//! than a turn takes. The
//! reviews go through the [`Reviewer`] trait: [`KubeReviewer`] asks the API
//! server, through a client of its own with its own request limit
//! (`--review-qps`, `api_types::apiclient::Clients::reviews`), so that reviews
//! never hold podprobe's status patches back; tests script the answers.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use http::HeaderMap;
use http::header::AUTHORIZATION;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use podprobe_core::prober::probe_ledger::api_types;

pub use super::review_turns::{
    MAX_REVIEW_PLACES, MAX_REVIEWS_IN_FLIGHT, PLACES_PER_SOURCE, TURNS_PER_SOURCE,
};
use super::review_turns::{NoTurn, ReviewTurns};
use tokio::time::Instant;

/// How long an accepted token and an allowed request are remembered (the
/// kubelet's webhook token cache TTL).
pub const AUTHORIZED_TTL: Duration = Duration::from_secs(120);

/// How long a rejected token and a denied request are remembered (the
/// kubelet's webhook authorizer's unauthorized TTL).
pub const UNAUTHORIZED_TTL: Duration = Duration::from_secs(30);

/// Most tokens and most (token, path, verb) decisions remembered, granted
/// (an accepted token, an allowed request) and refused ones each: the
/// backstop of [`PER_USER_CAPACITY`].
pub const CACHE_CAPACITY: usize = 1024;

/// Most accepted tokens, and most allowed (token, path, verb) decisions, of
/// one user (as the `TokenReview` names it) remembered. A scraper holds one
/// or two tokens (a projected token is replaced hourly) and two paths each;
/// a person running `kubectl podprobe status` one decision per pod asked
/// about in the last [`AUTHORIZED_TTL`]. A user past it is still served,
/// reviewed again; what it cannot do is push out another user's verdicts.
/// At 64, sixteen users fill [`CACHE_CAPACITY`].
pub const PER_USER_CAPACITY: usize = 64;

/// How long one review may take, waiting for its turn included.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Who a token belongs to, as the API server's `TokenReview` said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// A `TokenReview`'s verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    Authenticated(UserInfo),
    /// The API server does not accept the token; the text says why, when it
    /// said.
    Unauthenticated(String),
}

/// A `SubjectAccessReview`'s verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    Allowed,
    /// Denied, or no authorizer had an opinion; the text is the API
    /// server's reason.
    Denied(String),
}

/// A review that got no verdict: the request is refused and nothing is
/// cached, so the next request asks again.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the API server refused the {kind}: {source}")]
    Api {
        kind: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("the {kind} got no answer within {timeout:?}")]
    Timeout {
        kind: &'static str,
        timeout: Duration,
    },
    #[error("the API server answered the {kind} without a status")]
    NoStatus { kind: &'static str },
    #[error("the {kind} was not sent: its source holds its share of reviews, or all are taken")]
    Throttled { kind: &'static str },
}

/// The two questions asked of the API server.
pub trait Reviewer: Send + Sync + 'static {
    /// Who `token` belongs to (a `TokenReview`).
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>>;

    /// Whether `user` may do what `attributes` say (a
    /// `SubjectAccessReview`).
    fn review_access<'a>(
        &'a self,
        user: &'a UserInfo,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>>;
}

/// What a request asks to do, in a `SubjectAccessReview`'s terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// `verb` on the non-resource URL `path` (`get /metrics`).
    NonResource { path: String, verb: String },
    /// `get` on the pod `namespace/name` (its probe status, PS2).
    GetPod { namespace: String, name: String },
    /// `get` on `pods/log` of the pod `namespace/name`: its probes' output
    /// (PS2).
    GetPodLog { namespace: String, name: String },
    /// `get` on the pod's `probes` object of `status.podprobe.io` (PS2).
    GetProbes { namespace: String, name: String },
}

impl std::fmt::Display for Attributes {
    /// As the API server's forbidden message names them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attributes::NonResource { path, verb } => write!(f, "verb={verb}, path={path}"),
            Attributes::GetPod { namespace, name } => {
                write!(
                    f,
                    "verb=get, resource=pods, namespace={namespace}, name={name}"
                )
            }
            Attributes::GetPodLog { namespace, name } => write!(
                f,
                "verb=get, resource=pods, subresource=log, namespace={namespace}, name={name}"
            ),
            Attributes::GetProbes { namespace, name } => write!(
                f,
                "verb=get, resource=probes.status.podprobe.io, namespace={namespace}, name={name}"
            ),
        }
    }
}

/// [`Reviewer`] through the API server (needs `create` on
/// `tokenreviews.authentication.k8s.io` and
/// `subjectaccessreviews.authorization.k8s.io`), with a client for reviews
/// only.
#[derive(Clone)]
pub struct KubeReviewer {
    client: kube::Client,
}

impl KubeReviewer {
    pub fn new(client: kube::Client) -> Self {
        KubeReviewer { client }
    }
}

impl Reviewer for KubeReviewer {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
        const KIND: &str = "TokenReview";
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_string(),
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let reviewed = Api::<TokenReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(|source| ReviewError::Api { kind: KIND, source })?;
            let status = reviewed
                .status
                .ok_or(ReviewError::NoStatus { kind: KIND })?;
            Ok(match (status.authenticated, status.user) {
                (Some(true), Some(user)) => Authentication::Authenticated(UserInfo {
                    username: user.username.unwrap_or_default(),
                    uid: user.uid.unwrap_or_default(),
                    groups: user.groups.unwrap_or_default(),
                    extra: user.extra.unwrap_or_default(),
                }),
                _ => Authentication::Unauthenticated(
                    status
                        .error
                        .unwrap_or_else(|| "token not authenticated".to_string()),
                ),
            })
        })
    }

    fn review_access<'a>(
        &'a self,
        user: &'a UserInfo,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
        const KIND: &str = "SubjectAccessReview";
        Box::pin(async move {
            let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
            let (non_resource_attributes, resource_attributes) = match attributes {
                Attributes::NonResource { path, verb } => (
                    Some(NonResourceAttributes {
                        path: Some(path.clone()),
                        verb: Some(verb.clone()),
                    }),
                    None,
                ),
                Attributes::GetPod { namespace, name }
                | Attributes::GetPodLog { namespace, name }
                | Attributes::GetProbes { namespace, name } => {
                    let (group, version, resource, subresource) = match attributes {
                        Attributes::GetProbes { .. } => (
                            api_types::GROUP,
                            api_types::VERSION,
                            api_types::RESOURCE,
                            None,
                        ),
                        Attributes::GetPodLog { .. } => ("", "v1", "pods", Some("log")),
                        _ => ("", "v1", "pods", None),
                    };
                    (
                        None,
                        Some(ResourceAttributes {
                            namespace: Some(namespace.clone()),
                            verb: Some("get".to_string()),
                            group: non_empty(group),
                            version: Some(version.to_string()),
                            resource: Some(resource.to_string()),
                            subresource: subresource.map(str::to_string),
                            name: Some(name.clone()),
                            ..ResourceAttributes::default()
                        }),
                    )
                }
            };
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: non_empty(&user.username),
                    uid: non_empty(&user.uid),
                    groups: Some(user.groups.clone()),
                    extra: Some(user.extra.clone()),
                    non_resource_attributes,
                    resource_attributes,
                },
                ..SubjectAccessReview::default()
            };
            let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(|source| ReviewError::Api { kind: KIND, source })?;
            let status = reviewed
                .status
                .ok_or(ReviewError::NoStatus { kind: KIND })?;
            Ok(if status.allowed {
                Authorization::Allowed
            } else {
                let reason = status
                    .reason
                    .or(status.evaluation_error)
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| "no RBAC rule allows it".to_string());
                Authorization::Denied(reason)
            })
        })
    }
}

/// What to answer a request for a guarded path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessDecision {
    /// Serve it.
    Allowed { user: String },
    /// 401: no bearer token, or one the API server does not accept.
    Unauthenticated { reason: String },
    /// 403: RBAC does not let `user` do it.
    Forbidden { user: String, reason: String },
    /// A review got no verdict: 401 when it was the `TokenReview`, 500 when
    /// the `SubjectAccessReview`, as the kubelet answers.
    Failed { review: Review, reason: String },
    /// 429: a review is needed but cannot be waited for: every turn is
    /// taken and the queue for them full (the server answers the same when
    /// the request's connection has its share of reviews already).
    Throttled,
}

/// Which of the two reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    Token,
    Access,
}

/// How often a failing review is logged at warn level; repeats in between
/// go to debug.
const REVIEW_FAILURE_WARN_INTERVAL: Duration = Duration::from_secs(60);

/// A keyed hash of a bearer token: the caches never hold the token. Two
/// SipHash keys drawn per process make a collision, accidental or aimed
/// (the keys are secret), out of reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TokenKey(u64, u64);

/// `/metrics`' guard: [`DelegatedAuth::authorize`] each request. Cheap to
/// clone; clones share the caches.
#[derive(Clone)]
pub struct DelegatedAuth {
    inner: Arc<Inner>,
}

struct Inner {
    reviewer: Box<dyn Reviewer>,
    keys: (RandomState, RandomState),
    tokens: Mutex<Verdicts<TokenKey, Authentication>>,
    access: Mutex<Verdicts<(TokenKey, Attributes), Authorization>>,
    turns: ReviewTurns,
    last_failure_warning: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for DelegatedAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatedAuth").finish_non_exhaustive()
    }
}

impl DelegatedAuth {
    /// Reviews through the API server `client` talks to; a client of its
    /// own, whose request limit only reviews use.
    pub fn kube(client: kube::Client) -> Self {
        Self::new(KubeReviewer::new(client))
    }

    /// Reviews through `reviewer`.
    pub fn new(reviewer: impl Reviewer) -> Self {
        DelegatedAuth {
            inner: Arc::new(Inner {
                reviewer: Box::new(reviewer),
                keys: (RandomState::new(), RandomState::new()),
                tokens: Mutex::new(Verdicts::new(CACHE_CAPACITY, PER_USER_CAPACITY)),
                access: Mutex::new(Verdicts::new(CACHE_CAPACITY, PER_USER_CAPACITY)),
                turns: ReviewTurns::default(),
                last_failure_warning: Mutex::new(None),
            }),
        }
    }

    /// Decides a request for the non-resource URL `path` with `verb` (`get`
    /// for GET and HEAD) from its `Authorization: Bearer` header; `source`
    /// is where it came from (its peer's address), whose reviews wait
    /// fairly beside other sources'.
    pub async fn authorize(
        &self,
        headers: &HeaderMap,
        path: &str,
        verb: &str,
        source: &str,
    ) -> AccessDecision {
        let attributes = Attributes::NonResource {
            path: path.to_string(),
            verb: verb.to_string(),
        };
        self.decide(bearer_token(headers), attributes, source).await
    }

    /// Decides whether the owner of `token` may do what `attributes` say,
    /// for a request from `source`.
    pub async fn decide(
        &self,
        token: Option<&str>,
        attributes: Attributes,
        source: &str,
    ) -> AccessDecision {
        let Some(token) = token else {
            return AccessDecision::Unauthenticated {
                reason: "no bearer token".to_string(),
            };
        };
        let key = self.key(token);
        let user = match self.authenticate(key, token, source).await {
            Ok(Authentication::Authenticated(user)) => user,
            Ok(Authentication::Unauthenticated(reason)) => {
                return AccessDecision::Unauthenticated { reason };
            }
            Err(error) => return self.failed(Review::Token, error),
        };
        match self.authorize_user(key, &user, attributes, source).await {
            Ok(Authorization::Allowed) => AccessDecision::Allowed {
                user: user.username,
            },
            Ok(Authorization::Denied(reason)) => AccessDecision::Forbidden {
                user: user.username,
                reason,
            },
            Err(error) => self.failed(Review::Access, error),
        }
    }

    /// Decides whether `user`, whom the API server authenticated and named
    /// (the status API's front proxy), may do what `attributes` say: a
    /// `SubjectAccessReview`, cached and capped per user as the token
    /// owners' are; the user is the source whose reviews wait fairly.
    pub async fn decide_for(&self, user: &UserInfo, attributes: Attributes) -> AccessDecision {
        let key = self.user_key(user);
        let source = format!("user {}", user.username);
        match self.authorize_user(key, user, attributes, &source).await {
            Ok(Authorization::Allowed) => AccessDecision::Allowed {
                user: user.username.clone(),
            },
            Ok(Authorization::Denied(reason)) => AccessDecision::Forbidden {
                user: user.username.clone(),
                reason,
            },
            Err(error) => self.failed(Review::Access, error),
        }
    }

    /// A keyed hash of everything a `SubjectAccessReview` is asked about a
    /// user, so that two users never share a cached verdict.
    fn user_key(&self, user: &UserInfo) -> TokenKey {
        let identity = (&user.username, &user.uid, &user.groups, &user.extra);
        TokenKey(
            self.inner.keys.0.hash_one(identity),
            self.inner.keys.1.hash_one(identity),
        )
    }

    /// A failed review: podprobe cannot check anyone's access (the API
    /// server is down, or podprobe's RBAC lacks `create` on the reviews),
    /// which an operator must hear about, but not once per scrape. A
    /// throttled one is not logged: anyone can cause it, and it is counted
    /// (`podprobe_metrics_auth_decisions_total`).
    fn failed(&self, review: Review, error: ReviewError) -> AccessDecision {
        if let ReviewError::Throttled { .. } = error {
            return AccessDecision::Throttled;
        }
        let now = Instant::now();
        let warn = {
            let mut last = lock(&self.inner.last_failure_warning);
            let due = last.is_none_or(|at| now >= at + REVIEW_FAILURE_WARN_INTERVAL);
            if due {
                *last = Some(now);
            }
            due
        };
        if warn {
            tracing::warn!(
                %error,
                "cannot review a request for /metrics or a pod's probe status; refusing it (more failures in the next minute are logged at debug level)"
            );
        } else {
            tracing::debug!(%error, "cannot review a request; refusing it");
        }
        AccessDecision::Failed {
            review,
            reason: error.to_string(),
        }
    }

    fn key(&self, token: &str) -> TokenKey {
        TokenKey(
            self.inner.keys.0.hash_one(token),
            self.inner.keys.1.hash_one(token),
        )
    }

    async fn authenticate(
        &self,
        key: TokenKey,
        token: &str,
        source: &str,
    ) -> Result<Authentication, ReviewError> {
        if let Some(cached) = lock(&self.inner.tokens).get(&key, Instant::now()) {
            return Ok(cached);
        }
        let verdict = self
            .bounded(
                "TokenReview",
                source,
                self.inner.reviewer.review_token(token),
            )
            .await?;
        let mut tokens = lock(&self.inner.tokens);
        match &verdict {
            Authentication::Authenticated(user) => {
                tokens.grant(key, verdict.clone(), &user.username, Instant::now());
            }
            Authentication::Unauthenticated(_) => {
                tokens.refuse(key, verdict.clone(), Instant::now());
            }
        }
        Ok(verdict)
    }

    async fn authorize_user(
        &self,
        key: TokenKey,
        user: &UserInfo,
        attributes: Attributes,
        source: &str,
    ) -> Result<Authorization, ReviewError> {
        let cache_key = (key, attributes);
        if let Some(cached) = lock(&self.inner.access).get(&cache_key, Instant::now()) {
            return Ok(cached);
        }
        let verdict = self
            .bounded(
                "SubjectAccessReview",
                source,
                self.inner.reviewer.review_access(user, &cache_key.1),
            )
            .await?;
        let mut access = lock(&self.inner.access);
        match &verdict {
            Authorization::Allowed => {
                access.grant(cache_key, verdict.clone(), &user.username, Instant::now());
            }
            Authorization::Denied(_) => access.refuse(cache_key, verdict.clone(), Instant::now()),
        }
        Ok(verdict)
    }

    /// Runs a review of `source`'s once it has a turn, all within
    /// [`REVIEW_TIMEOUT`]; throttled at once when `source` (or everyone)
    /// holds its places already, and when no turn came in time (the review
    /// was never sent).
    async fn bounded<T>(
        &self,
        kind: &'static str,
        source: &str,
        review: BoxFuture<'_, Result<T, ReviewError>>,
    ) -> Result<T, ReviewError> {
        let deadline = Instant::now() + REVIEW_TIMEOUT;
        let throttled = |_: NoTurn| ReviewError::Throttled { kind };
        let place = self.inner.turns.place(source).map_err(throttled)?;
        let _turn = place.turn(REVIEW_TIMEOUT).await.map_err(throttled)?;
        if Instant::now() >= deadline {
            // The turn came with no time left to use it.
            return Err(ReviewError::Throttled { kind });
        }
        tokio::time::timeout_at(deadline, review)
            .await
            .unwrap_or(Err(ReviewError::Timeout {
                kind,
                timeout: REVIEW_TIMEOUT,
            }))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A cache is consistent after every call; a panic elsewhere leaves it
    // usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The token of `Authorization: Bearer <token>`, parsed as the API server's
/// bearer token authenticator parses it (scheme case-insensitive, exactly
/// one space, the token up to the next space).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    bearer_token_in(headers, AUTHORIZATION)
}

/// The token of `<name>: Bearer <token>`, parsed as [`bearer_token`] parses
/// `Authorization`.
pub fn bearer_token_in(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> Option<&str> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Verdicts by key, granted ones (an accepted token, an allowed request) for
/// [`AUTHORIZED_TTL`] and refused ones for [`UNAUTHORIZED_TTL`], each kind
/// in a bounded cache of its own: anyone can make refused verdicts, one per
/// forged token, and in a shared cache those would push out the granted
/// ones, which only a real client has, once a flood makes them the closest
/// to expiring. Granted verdicts are charged to the user the `TokenReview`
/// named, at most [`PER_USER_CAPACITY`] each, since a user can make many of
/// them too: a token per request (`create serviceaccounts/token`), or a
/// pod name per request when RBAC lets it `get` every pod of a namespace.
#[derive(Debug)]
struct Verdicts<K, V> {
    granted: TtlCache<K, V, String>,
    refused: TtlCache<K, V, ()>,
}

impl<K: Hash + Eq + Clone, V: Clone> Verdicts<K, V> {
    /// At most `capacity` granted verdicts, `per_user` of one user, and
    /// `capacity` refused ones.
    fn new(capacity: usize, per_user: usize) -> Self {
        Verdicts {
            granted: TtlCache::new(capacity, per_user),
            refused: TtlCache::new(capacity, capacity),
        }
    }

    fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        self.granted
            .get(key, now)
            .or_else(|| self.refused.get(key, now))
    }

    /// Remembers the latest verdict only: two requests with the same key may
    /// have been reviewed at once, and answered differently.
    fn grant(&mut self, key: K, value: V, user: &str, now: Instant) {
        self.refused.remove(&key);
        self.granted
            .insert(key, value, user.to_string(), AUTHORIZED_TTL, now);
    }

    /// As [`Verdicts::grant`], for a refusal.
    fn refuse(&mut self, key: K, value: V, now: Instant) {
        self.granted.remove(&key);
        self.refused.insert(key, value, (), UNAUTHORIZED_TTL, now);
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.granted.len(), self.refused.len())
    }
}

/// A map whose entries expire, each charged to an owner, of bounded size:
/// at most `per_owner` entries of one owner, whose new entry replaces its
/// own closest to expiring, and at most `capacity` in all. When full,
/// expired entries go first, then the one closest to expiring of the owners
/// holding the most, so an owner of a few entries keeps them whoever else
/// fills the cache.
#[derive(Debug)]
struct TtlCache<K, V, O> {
    entries: HashMap<K, Entry<V, O>>,
    /// Entries held by each owner that holds any.
    held: HashMap<O, usize>,
    capacity: usize,
    per_owner: usize,
}

#[derive(Debug)]
struct Entry<V, O> {
    value: V,
    expires: Instant,
    owner: O,
}

impl<K: Hash + Eq + Clone, V: Clone, O: Hash + Eq + Clone> TtlCache<K, V, O> {
    fn new(capacity: usize, per_owner: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            held: HashMap::new(),
            capacity: capacity.max(1),
            per_owner: per_owner.max(1),
        }
    }

    fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some(entry) if entry.expires > now => Some(entry.value.clone()),
            Some(_) => {
                self.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: K, value: V, owner: O, ttl: Duration, now: Instant) {
        // A replaced entry makes room for its replacement: it never evicts
        // another.
        self.remove(&key);
        if self.held(&owner) >= self.per_owner {
            self.remove_expired(now);
            if self.held(&owner) >= self.per_owner
                && let Some(own) = self.soonest(|o| *o == owner)
            {
                self.remove(&own);
            }
        }
        if self.entries.len() >= self.capacity {
            self.remove_expired(now);
            let most = self.held.values().copied().max().unwrap_or(0);
            if self.entries.len() >= self.capacity
                && let Some(largest) = self.soonest(|o| self.held(o) == most)
            {
                self.remove(&largest);
            }
        }
        *self.held.entry(owner.clone()).or_default() += 1;
        self.entries.insert(
            key,
            Entry {
                value,
                expires: now + ttl,
                owner,
            },
        );
    }

    fn remove(&mut self, key: &K) {
        if let Some(entry) = self.entries.remove(key) {
            self.release(&entry.owner);
        }
    }

    fn held(&self, owner: &O) -> usize {
        self.held.get(owner).copied().unwrap_or(0)
    }

    /// Takes one entry off `owner`'s count; an owner without entries is
    /// forgotten.
    fn release(&mut self, owner: &O) {
        if let Some(held) = self.held.get_mut(owner) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(owner);
            }
        }
    }

    fn remove_expired(&mut self, now: Instant) {
        let expired: Vec<K> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.expires <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
    }

    /// The entry closest to expiring of the owners `of` picks.
    fn soonest(&self, of: impl Fn(&O) -> bool) -> Option<K> {
        self.entries
            .iter()
            .filter(|(_, entry)| of(&entry.owner))
            .min_by_key(|(_, entry)| entry.expires)
            .map(|(key, _)| key.clone())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    fn held_by(&self, owner: &O) -> usize {
        self.held(owner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http::HeaderValue;

    use super::*;

    /// Tokens `good-<user>` and `good-<user>/<n>` (more tokens of one user)
    /// belong to `<user>`, who is allowed everything unless it is
    /// `stranger` (denied); `flaky` makes the review fail; `slow` never
    /// gets an answer; anything else is rejected. Counts the reviews.
    #[derive(Default)]
    struct Script {
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
        fail_access: std::sync::atomic::AtomicBool,
    }

    impl Reviewer for Arc<Script> {
        fn review_token<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
            Box::pin(async move {
                // Counted when sent (polled), as the API server would see it.
                self.token_reviews.fetch_add(1, Ordering::SeqCst);
                match token {
                    "slow" => std::future::pending().await,
                    "flaky" => Err(ReviewError::NoStatus {
                        kind: "TokenReview",
                    }),
                    _ => Ok(match token.strip_prefix("good-") {
                        Some(user) => Authentication::Authenticated(UserInfo {
                            username: user.split('/').next().unwrap_or(user).to_string(),
                            ..UserInfo::default()
                        }),
                        None => Authentication::Unauthenticated("invalid bearer token".into()),
                    }),
                }
            })
        }

        fn review_access<'a>(
            &'a self,
            user: &'a UserInfo,
            attributes: &'a Attributes,
        ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
            Box::pin(async move {
                self.access_reviews.fetch_add(1, Ordering::SeqCst);
                if self.fail_access.load(Ordering::SeqCst) {
                    return Err(ReviewError::NoStatus {
                        kind: "SubjectAccessReview",
                    });
                }
                Ok(if user.username == "stranger" {
                    Authorization::Denied(format!("{} may not {attributes}", user.username))
                } else {
                    Authorization::Allowed
                })
            })
        }
    }

    impl Script {
        fn counts(&self) -> (usize, usize) {
            (
                self.token_reviews.load(Ordering::SeqCst),
                self.access_reviews.load(Ordering::SeqCst),
            )
        }
    }

    fn auth() -> (DelegatedAuth, Arc<Script>) {
        let script = Arc::new(Script::default());
        (DelegatedAuth::new(script.clone()), script)
    }

    /// Where the scraper's requests come from, and a flood's.
    const SCRAPER: &str = "10.0.0.1";
    const FLOOD: &str = "10.244.0.9";

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn bearer_tokens_are_parsed_as_the_api_server_parses_them() {
        assert_eq!(bearer_token(&bearer("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&bearer("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&bearer("  BEARER abc  ")), Some("abc"));
        assert_eq!(bearer_token(&bearer("Bearer abc def")), Some("abc"));
        for bad in ["Bearer", "Bearer ", "Bearer  abc", "Basic YWJj", "abc"] {
            assert_eq!(bearer_token(&bearer(bad)), None, "{bad:?}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
        let mut opaque = HeaderMap::new();
        opaque.insert(
            AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
        );
        assert_eq!(bearer_token(&opaque), None);
    }

    #[tokio::test(start_paused = true)]
    async fn no_token_is_401_without_asking_the_api_server() {
        let (auth, script) = auth();
        let decision = auth
            .authorize(&HeaderMap::new(), "/metrics", "get", SCRAPER)
            .await;
        assert_eq!(
            decision,
            AccessDecision::Unauthenticated {
                reason: "no bearer token".into()
            }
        );
        assert_eq!(script.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_allowed_token_is_cached_for_the_authorized_ttl() {
        let (auth, script) = auth();
        let headers = bearer("Bearer good-scraper");
        let allowed = AccessDecision::Allowed {
            user: "scraper".into(),
        };
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            allowed
        );
        assert_eq!(script.counts(), (1, 1));

        tokio::time::advance(AUTHORIZED_TTL - Duration::from_secs(1)).await;
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            allowed
        );
        assert_eq!(script.counts(), (1, 1), "both answers cached");

        // Another path is another question; the token is still known.
        assert_eq!(
            auth.authorize(&headers, "/metrics/probes", "get", SCRAPER)
                .await,
            allowed
        );
        assert_eq!(script.counts(), (1, 2));

        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            allowed
        );
        assert_eq!(script.counts(), (2, 3), "both expired");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rejected_token_is_401_and_cached_for_the_unauthorized_ttl() {
        let (auth, script) = auth();
        let headers = bearer("Bearer forged");
        let rejected = AccessDecision::Unauthenticated {
            reason: "invalid bearer token".into(),
        };
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            rejected
        );
        tokio::time::advance(UNAUTHORIZED_TTL - Duration::from_secs(1)).await;
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            rejected
        );
        assert_eq!(script.counts(), (1, 0));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            rejected
        );
        assert_eq!(script.counts(), (2, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_denied_user_is_403_and_cached_for_the_unauthorized_ttl() {
        let (auth, script) = auth();
        let headers = bearer("Bearer good-stranger");
        let forbidden = AccessDecision::Forbidden {
            user: "stranger".into(),
            reason: "stranger may not verb=get, path=/metrics".into(),
        };
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            forbidden
        );
        tokio::time::advance(UNAUTHORIZED_TTL - Duration::from_secs(1)).await;
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            forbidden
        );
        assert_eq!(script.counts(), (1, 1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await,
            forbidden
        );
        assert_eq!(script.counts(), (1, 2), "the token is still known");
    }

    #[tokio::test(start_paused = true)]
    async fn failed_reviews_are_not_cached() {
        let (auth, script) = auth();
        let flaky = bearer("Bearer flaky");
        for _ in 0..2 {
            assert!(matches!(
                auth.authorize(&flaky, "/metrics", "get", SCRAPER).await,
                AccessDecision::Failed { review: Review::Token, reason } if reason.contains("without a status")
            ));
        }
        assert_eq!(script.counts(), (2, 0));

        script.fail_access.store(true, Ordering::SeqCst);
        let good = bearer("Bearer good-scraper");
        for _ in 0..2 {
            assert!(matches!(
                auth.authorize(&good, "/metrics", "get", SCRAPER).await,
                AccessDecision::Failed {
                    review: Review::Access,
                    ..
                }
            ));
        }
        assert_eq!(script.counts(), (3, 2));
        script.fail_access.store(false, Ordering::SeqCst);
        assert_eq!(
            auth.authorize(&good, "/metrics", "get", SCRAPER).await,
            AccessDecision::Allowed {
                user: "scraper".into()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_without_an_answer_times_out() {
        let (auth, _) = auth();
        let started = Instant::now();
        let decision = auth
            .authorize(&bearer("Bearer slow"), "/metrics", "get", SCRAPER)
            .await;
        assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
        assert_eq!(
            decision,
            AccessDecision::Failed {
                review: Review::Token,
                reason: "the TokenReview got no answer within 10s".into()
            }
        );
    }

    /// Stuck reviews of `sources` sources, each at its places, spawned.
    fn stuck(auth: &DelegatedAuth, sources: usize) -> tokio::task::JoinSet<AccessDecision> {
        let mut stuck = tokio::task::JoinSet::new();
        for source in 0..sources {
            for _ in 0..PLACES_PER_SOURCE {
                let auth = auth.clone();
                stuck.spawn(async move {
                    let source = format!("10.244.1.{source}");
                    auth.authorize(&bearer("Bearer slow"), "/metrics", "get", &source)
                        .await
                });
            }
        }
        stuck
    }

    /// Stuck reviews hold the turns for their time; those that waited for a
    /// turn in vain were never sent, and are throttled, not refused.
    #[tokio::test(start_paused = true)]
    async fn stuck_reviews_hold_at_most_their_turns() {
        let (auth, script) = auth();
        let mut stuck = stuck(&auth, MAX_REVIEW_PLACES / PLACES_PER_SOURCE);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(script.counts().0, MAX_REVIEWS_IN_FLIGHT);
        let mut failed = 0;
        while let Some(decision) = stuck.join_next().await {
            match decision.unwrap() {
                AccessDecision::Failed { .. } => failed += 1,
                AccessDecision::Throttled => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(failed, MAX_REVIEWS_IN_FLIGHT);
    }

    /// Reviews beyond the places are not waited for: the request is
    /// throttled at once, nothing is sent, and an accepted token still in
    /// the cache is served as before.
    #[tokio::test(start_paused = true)]
    async fn reviews_beyond_the_places_are_throttled_at_once() {
        let (auth, script) = auth();
        let scraper = bearer("Bearer good-scraper");
        let allowed = AccessDecision::Allowed {
            user: "scraper".into(),
        };
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        let mut stuck = stuck(&auth, MAX_REVIEW_PLACES / PLACES_PER_SOURCE);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(script.counts(), (1 + MAX_REVIEWS_IN_FLIGHT, 1));

        let asked = Instant::now();
        let decision = auth
            .authorize(&bearer("Bearer forged"), "/metrics", "get", FLOOD)
            .await;
        assert_eq!(decision, AccessDecision::Throttled);
        assert_eq!(asked.elapsed(), Duration::ZERO, "not waited for");
        assert_eq!(script.counts(), (1 + MAX_REVIEWS_IN_FLIGHT, 1));
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );

        while let Some(decision) = stuck.join_next().await {
            assert!(matches!(
                decision.unwrap(),
                AccessDecision::Failed { .. } | AccessDecision::Throttled
            ));
        }
        assert!(matches!(
            auth.authorize(&bearer("Bearer forged"), "/metrics", "get", FLOOD)
                .await,
            AccessDecision::Unauthenticated { .. }
        ));
    }

    /// #37, seen on kind: a flood of forged tokens from one pod kept every
    /// review place, and a scraper whose token was not cached yet was
    /// throttled or refused for as long as the flood lasted. Its reviews
    /// now wait beside the flood's, not behind them.
    #[tokio::test(start_paused = true)]
    async fn a_flood_from_one_source_does_not_hold_up_a_scrapers_first_review() {
        let (auth, _) = auth();
        let mut flood = tokio::task::JoinSet::new();
        for _ in 0..4 * MAX_REVIEWS_IN_FLIGHT {
            let auth = auth.clone();
            flood.spawn(async move {
                auth.authorize(&bearer("Bearer slow"), "/metrics", "get", FLOOD)
                    .await
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let asked = Instant::now();
        assert_eq!(
            auth.authorize(&bearer("Bearer good-scraper"), "/metrics", "get", SCRAPER)
                .await,
            AccessDecision::Allowed {
                user: "scraper".into()
            }
        );
        assert_eq!(asked.elapsed(), Duration::ZERO, "reviewed at once");
        let mut throttled = 0;
        while let Some(decision) = flood.join_next().await {
            throttled += usize::from(decision.unwrap() == AccessDecision::Throttled);
        }
        assert!(throttled >= 4 * MAX_REVIEWS_IN_FLIGHT - PLACES_PER_SOURCE);
    }

    #[test]
    fn the_cache_is_bounded_and_drops_the_soonest_to_expire() {
        let now = Instant::now();
        let mut cache = TtlCache::new(3, 3);
        cache.insert(1, "a", (), Duration::from_secs(30), now);
        cache.insert(2, "b", (), Duration::from_secs(10), now);
        cache.insert(3, "c", (), Duration::from_secs(20), now);
        cache.insert(4, "d", (), Duration::from_secs(40), now);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&2, now), None, "closest to expiring");
        assert_eq!(cache.get(&1, now), Some("a"));

        // Expired entries go first, however many.
        let later = now + Duration::from_secs(25);
        cache.insert(5, "e", (), Duration::from_secs(1), later);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&3, later), None);
        assert_eq!(cache.get(&4, later), Some("d"));
        assert_eq!(cache.get(&5, later), Some("e"));

        // Replacing an entry never evicts another.
        cache.insert(5, "E", (), Duration::from_secs(1), later);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&5, later), Some("E"));
    }

    #[test]
    fn an_owner_at_its_cap_replaces_its_own_and_a_full_cache_the_largest_owners() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let mut cache = TtlCache::new(6, 3);
        // The scraper's entry is the closest to expiring throughout.
        cache.insert(0, "scraper", "scraper", secs(10), now);
        for i in 1..=4 {
            cache.insert(i, "a", "a", secs(10 + i), now);
        }
        assert_eq!(cache.held_by(&"a"), 3, "a's fourth replaced its first");
        assert_eq!(cache.get(&1, now), None);
        assert_eq!(cache.get(&2, now), Some("a"));

        // Full: b's third entry evicts from a, holding the most.
        for i in 11..=13 {
            cache.insert(i, "b", "b", secs(20 + i), now);
        }
        assert_eq!(cache.len(), 6);
        assert_eq!(cache.get(&2, now), None, "a's closest to expiring");
        assert_eq!((cache.held_by(&"a"), cache.held_by(&"b")), (2, 3));
        // b at its cap replaces its own, never a's.
        cache.insert(14, "b", "b", secs(40), now);
        assert_eq!((cache.held_by(&"a"), cache.held_by(&"b")), (2, 3));
        assert_eq!(cache.get(&11, now), None);
        // A newcomer evicts from b, holding the most.
        cache.insert(21, "c", "c", secs(50), now);
        assert_eq!((cache.held_by(&"a"), cache.held_by(&"b")), (2, 2));
        assert_eq!(cache.get(&0, now), Some("scraper"));

        // An entry replaced by another owner's moves between them.
        cache.insert(21, "a", "a", secs(50), now);
        assert_eq!((cache.held_by(&"a"), cache.held_by(&"c")), (3, 0));
        assert_eq!(cache.len(), 6);
        // Expired entries are counted out.
        let later = now + secs(100);
        assert_eq!(cache.get(&0, later), None);
        assert_eq!(cache.held_by(&"scraper"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn many_distinct_tokens_stay_within_the_capacity() {
        let (auth, _) = auth();
        for i in 0..CACHE_CAPACITY + 10 {
            let headers = bearer(&format!("Bearer good-user{i}"));
            auth.authorize(&headers, "/metrics", "get", SCRAPER).await;
        }
        assert_eq!(lock(&auth.inner.tokens).len(), (CACHE_CAPACITY, 0));
        assert_eq!(lock(&auth.inner.access).len(), (CACHE_CAPACITY, 0));
    }

    /// The flood comes when the scraper's verdicts are the closest to
    /// expiring, so that a cache evicting the soonest to expire from one
    /// pool would pick them.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_forged_tokens_cannot_push_out_an_accepted_one() {
        let (auth, script) = auth();
        let scraper = bearer("Bearer good-scraper");
        let allowed = AccessDecision::Allowed {
            user: "scraper".into(),
        };
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        tokio::time::advance(AUTHORIZED_TTL - UNAUTHORIZED_TTL + Duration::from_secs(1)).await;
        let flood = 2 * CACHE_CAPACITY;
        for i in 0..flood {
            let forged = bearer(&format!("Bearer forged-{i}"));
            assert!(matches!(
                auth.authorize(&forged, "/metrics", "get", SCRAPER).await,
                AccessDecision::Unauthenticated { .. }
            ));
        }
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        assert_eq!(
            script.counts(),
            (1 + flood, 1),
            "the scraper's token was reviewed again"
        );
        assert_eq!(lock(&auth.inner.tokens).len(), (1, CACHE_CAPACITY));
    }

    /// #37: a tenant who may `get` pods in its namespace asks for the
    /// probe status of many pod names, each allowed (namespace-wide RBAC
    /// allows any name), when the scraper's verdicts are the closest to
    /// expiring.
    #[tokio::test(start_paused = true)]
    async fn one_users_many_allowed_requests_cannot_push_out_the_scrapers() {
        let (auth, script) = auth();
        let scraper = bearer("Bearer good-scraper");
        let allowed = AccessDecision::Allowed {
            user: "scraper".into(),
        };
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let flood = 2 * CACHE_CAPACITY;
        for i in 0..flood {
            let pod = Attributes::GetPod {
                namespace: "tenant".into(),
                name: format!("pod-{i}"),
            };
            assert_eq!(
                auth.decide(Some("good-tenant"), pod, SCRAPER).await,
                AccessDecision::Allowed {
                    user: "tenant".into()
                }
            );
        }
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        assert_eq!(
            script.counts(),
            (2, 1 + flood),
            "the scraper's request was reviewed again"
        );
        let access = lock(&auth.inner.access);
        assert_eq!(access.granted.held_by(&"tenant".into()), PER_USER_CAPACITY);
    }

    /// Many users, each at its cap, fill the cache: the evictions come from
    /// them, never from the scraper holding one entry.
    #[tokio::test(start_paused = true)]
    async fn a_cache_filled_by_many_users_evicts_from_the_largest_holders() {
        let (auth, script) = auth();
        let scraper = bearer("Bearer good-scraper");
        assert!(matches!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            AccessDecision::Allowed { .. }
        ));
        tokio::time::advance(Duration::from_secs(1)).await;
        let users = 2 * CACHE_CAPACITY / PER_USER_CAPACITY;
        for user in 0..users {
            let token = format!("good-tenant{user}");
            for pod in 0..PER_USER_CAPACITY {
                let pod = Attributes::GetPod {
                    namespace: "tenant".into(),
                    name: format!("pod-{pod}"),
                };
                auth.decide(Some(&token), pod, SCRAPER).await;
            }
        }
        assert!(matches!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            AccessDecision::Allowed { .. }
        ));
        assert_eq!(script.counts(), (1 + users, 1 + users * PER_USER_CAPACITY));
        assert_eq!(lock(&auth.inner.access).len(), (CACHE_CAPACITY, 0));
    }

    /// #37: a user who can mint tokens (`create serviceaccounts/token`)
    /// sends a new one with every request.
    #[tokio::test(start_paused = true)]
    async fn one_users_many_tokens_cannot_push_out_the_scrapers() {
        let (auth, script) = auth();
        let scraper = bearer("Bearer good-scraper");
        let allowed = AccessDecision::Allowed {
            user: "scraper".into(),
        };
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let flood = 2 * CACHE_CAPACITY;
        for i in 0..flood {
            let minted = bearer(&format!("Bearer good-tenant/{i}"));
            assert!(matches!(
                auth.authorize(&minted, "/metrics", "get", SCRAPER).await,
                AccessDecision::Allowed { .. }
            ));
        }
        assert_eq!(
            auth.authorize(&scraper, "/metrics", "get", SCRAPER).await,
            allowed
        );
        assert_eq!(
            script.counts(),
            (1 + flood, 1 + flood),
            "the scraper's token or request was reviewed again"
        );
        let tokens = lock(&auth.inner.tokens);
        assert_eq!(tokens.granted.held_by(&"tenant".into()), PER_USER_CAPACITY);
    }

    #[test]
    fn a_new_verdict_replaces_the_other_kind() {
        let now = Instant::now();
        let mut verdicts = Verdicts::new(2, 2);
        verdicts.refuse(1, "refused", now);
        verdicts.grant(1, "granted", "user", now);
        assert_eq!(verdicts.len(), (1, 0));
        assert_eq!(verdicts.get(&1, now), Some("granted"));
        assert_eq!(
            verdicts.get(&1, now + AUTHORIZED_TTL),
            None,
            "granted verdicts last the authorized TTL"
        );
        verdicts.grant(1, "granted", "user", now);
        verdicts.refuse(1, "refused", now);
        assert_eq!(verdicts.len(), (0, 1));
        assert_eq!(verdicts.get(&1, now), Some("refused"));
        assert_eq!(verdicts.get(&1, now + UNAUTHORIZED_TTL), None);
    }
}
