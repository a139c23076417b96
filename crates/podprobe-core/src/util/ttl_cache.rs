//! What a cache of objects read by namespace and name knows, as plain data:
//! the state of podprobe's Secret caches (`api::secret_cache`), without the
//! reads, the lock or the words. The caller reads when [`TtlCache::next`]
//! says so and hands what the read came to to [`TtlCache::settle`].
//!
//! A value read is used for the TTL, as the kubelet's TTL-based secret
//! manager does (`pkg/kubelet/util/manager/cache_based_manager.go`). A
//! failed read is remembered too, for a backoff that grows to the TTL, so
//! that lookups every second cost a read per backoff, not one each. A
//! value whose read again got no answer is used for a backoff more.
//! Lookups of one key while it is read wait for that read.
//!
//! What the cache keeps is bounded so that one namespace cannot fill it for
//! another (#37), by [`Limits`]:
//! - Failed reads take no room from values held: each is remembered apart,
//!   as its error and backoff only, at most `failed_per_namespace` of one
//!   namespace, and a namespace's first read of a key it does not hold
//!   takes a place among them. While all its places are taken and none is
//!   due for another read, a key it names for the first time gets no read;
//!   once one is due, the new one is read in its place, its backoff
//!   continuing that one's. A namespace's reads of keys it does not hold
//!   are thus at most `failed_per_namespace` per backoff, and another
//!   namespace's failures are never forgotten for it.
//! - Values are held up to `per_namespace` of one namespace, and `total`
//!   and `total_bytes` in all. When the cache is full, a namespace under
//!   its share (the bound divided among the namespaces holding values,
//!   itself included) takes room from the namespace holding the most,
//!   which lets go of its least recently used value; a namespace at its
//!   share gets no more.
//!
//! Anything unused for `idle` is forgotten at the next lookup.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::util::backoff::RetryPolicy;

/// An object: its namespace and name.
pub type Key = (String, String);

/// A read in flight, which every lookup of its key waits for; the first
/// lookup to wait makes it, and one still waiting when that one gives up
/// makes it instead.
pub type Reading<T> = Arc<OnceCell<Result<T, Failure>>>;

/// How long what a cache keeps is used, and how much it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a value read is used before it is read again.
    pub ttl: Duration,
    /// The backoff after failed reads of one key (or reads that got no
    /// answer), at most `ttl`.
    pub backoff: RetryPolicy,
    /// A value or failure unused for this long is forgotten.
    pub idle: Duration,
    /// Most values of one namespace held.
    pub per_namespace: usize,
    /// Most values held in all.
    pub total: usize,
    /// Most bytes of values held in all, as the caller counts them.
    pub total_bytes: usize,
    /// Most failed reads of one namespace remembered.
    pub failed_per_namespace: usize,
}

/// Why a cache has no room for one more value of a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Full {
    /// The namespace holds `held` values, [`Limits::per_namespace`].
    Namespace { held: usize },
    /// The cache holds `held` values, at least `most` ([`Limits::total`]),
    /// and the namespace `namespace_holds` of them, at least its share of
    /// `most` among the `sharing` namespaces holding values (itself
    /// included).
    Node {
        held: usize,
        most: usize,
        namespace_holds: usize,
        sharing: usize,
    },
    /// The cache holds `held` bytes, and with `adding` would hold more than
    /// `most` ([`Limits::total_bytes`]); the namespace would hold
    /// `namespace_would_hold`, more than its `share` among the `sharing`
    /// namespaces holding values.
    Bytes {
        held: usize,
        adding: usize,
        most: usize,
        namespace_would_hold: usize,
        share: usize,
        sharing: usize,
    },
}

/// Why a namespace's first read of a key gets no place among its failed
/// reads: it remembers `remembered` ([`Limits::failed_per_namespace`]) and
/// none is due for another read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailuresBackingOff {
    pub remembered: usize,
    /// When the next of them is due; none while each is being read.
    pub next_due_in: Option<Duration>,
}

/// Why a read left nothing to use, as lookups within its backoff get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// What the read said (refused, not found, unusable, no answer), in
    /// the caller's words.
    Read(String),
    /// Read and usable, but there is no room to hold it.
    NotHeld(Full),
}

/// What a read came to, for [`TtlCache::settle`].
#[derive(Debug)]
pub enum Outcome<T> {
    /// The value, and the bytes it holds.
    Usable(T, usize),
    /// Nothing was said about the object: no answer in time, no connection,
    /// another error status. A value held is used for a backoff more.
    Unanswered(String),
    /// Refused, not found, or not usable.
    Unusable(String),
}

/// What a lookup does next.
#[derive(Debug)]
pub enum Next<T> {
    /// The value held, or the failure remembered, within its TTL or backoff.
    Cached(Result<T, Failure>),
    /// Not read: what it read could not be held.
    Refused(Full),
    /// Not read: its namespace's failed reads are all backing off.
    BackingOff(FailuresBackingOff),
    /// Read, or wait for the read in flight.
    Read(Reading<T>),
}

/// What a read was settled as, for the caller to log and answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled<T> {
    /// Held for the TTL; `evicted`, of namespaces holding the most, were
    /// let go to make room for it.
    Held { value: T, evicted: Vec<Key> },
    /// Not answered (`why`): `value`, held before, is used for a backoff
    /// more.
    Kept { value: T, why: String },
    /// Remembered for a backoff.
    Failed(Failure),
}

/// What a cache knows: values held, failed reads remembered and reads in
/// flight. Plain data; the caller keeps it under a lock that is never held
/// across a read.
#[derive(Debug)]
pub struct TtlCache<T> {
    limits: Limits,
    /// Values read and usable, within the limits.
    held: HashMap<Key, Held<T>>,
    /// Failed reads by namespace, then name, within
    /// [`Limits::failed_per_namespace`], and first reads in flight of keys
    /// not held, which take their place among them when they start; never
    /// of a key held.
    failed: HashMap<String, HashMap<String, Failed>>,
    /// Reads in flight, which lookups of the same key wait for instead of
    /// each making their own.
    reading: HashMap<Key, Reading<T>>,
}

#[derive(Debug)]
struct Held<T> {
    value: T,
    bytes: usize,
    /// Until when `value` is used without a read: a TTL after a read, a
    /// backoff while reads get no answer.
    until: Instant,
    /// Reads since the last success that got no answer, for the backoff.
    failures: u32,
    last_used: Instant,
}

#[derive(Debug)]
struct Failed {
    /// The failure, as lookups within the backoff get it; none while its
    /// first read is in flight, which holds its namespace's place among
    /// the failures from the start. A first read that every lookup waiting
    /// for it gave up on leaves its place due at once, its count of
    /// failures unchanged, as a retry given up on does.
    why: Option<Failure>,
    until: Instant,
    /// Failed reads since the last success, for the backoff.
    failures: u32,
    last_used: Instant,
}

/// What a cache holds, for tests.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, PartialEq, Eq)]
pub struct Counts {
    pub held: usize,
    pub bytes: usize,
    pub failed: usize,
    pub reading: usize,
}

impl<T: Clone> TtlCache<T> {
    pub fn new(limits: Limits) -> Self {
        TtlCache {
            limits,
            held: HashMap::new(),
            failed: HashMap::new(),
            reading: HashMap::new(),
        }
    }

    /// What a lookup of `name` in `namespace` at `now` does: answer from
    /// the cache, refuse without a read a key that could not be held once
    /// read, or read (with the lookups already waiting for a read).
    pub fn next(&mut self, namespace: &str, name: &str, now: Instant) -> Next<T> {
        self.forget_idle(now);
        let key = (namespace.to_string(), name.to_string());
        if let Some(held) = self.held.get_mut(&key) {
            held.last_used = now;
            if held.until > now {
                return Next::Cached(Ok(held.value.clone()));
            }
        } else {
            let failed = self
                .failed
                .get_mut(namespace)
                .and_then(|names| names.get_mut(name));
            let remembered = failed.is_some();
            if let Some(failed) = failed {
                failed.last_used = now;
                if let Some(why) = failed.why.as_ref().filter(|_| failed.until > now) {
                    return Next::Cached(Err(why.clone()));
                }
            }
            // Its size is known once read; the number of values before.
            if let Err(full) = self.room(namespace, 0) {
                return Next::Refused(full);
            }
            if !remembered
                && !self.reading.contains_key(&key)
                && let Err(failing) = self.place_among_failures(namespace, name, now)
            {
                return Next::BackingOff(failing);
            }
        }
        Next::Read(self.reading.entry(key).or_default().clone())
    }

    /// Keeps what the read of `name` in `namespace` that [`Self::next`]
    /// asked for came to at `now`, and ends it.
    pub fn settle(
        &mut self,
        namespace: &str,
        name: &str,
        outcome: Outcome<T>,
        now: Instant,
    ) -> Settled<T> {
        let key = (namespace.to_string(), name.to_string());
        self.reading.remove(&key);
        // Out of the way while the read finds room: what it holds now
        // replaces it.
        let held = self.held.remove(&key);
        let failures = match (&held, self.failure(namespace, name)) {
            (Some(held), _) => held.failures,
            (None, Some(failed)) => failed.failures,
            (None, None) => 0,
        }
        .saturating_add(1);
        let backoff = self.limits.backoff.jittered(failures).min(self.limits.ttl);
        let failure = match (outcome, held) {
            (Outcome::Usable(value, bytes), _) => match self.room(namespace, bytes) {
                Ok(evicted) => {
                    for other in &evicted {
                        self.held.remove(other);
                    }
                    self.forget_failure(namespace, name);
                    self.held.insert(
                        key,
                        Held {
                            value: value.clone(),
                            bytes,
                            until: now + self.limits.ttl,
                            failures: 0,
                            last_used: now,
                        },
                    );
                    return Settled::Held { value, evicted };
                }
                Err(full) => Failure::NotHeld(full),
            },
            (Outcome::Unanswered(why), Some(mut held)) => {
                held.failures = failures;
                held.until = now + backoff;
                held.last_used = now;
                let value = held.value.clone();
                self.held.insert(key, held);
                return Settled::Kept { value, why };
            }
            (Outcome::Unanswered(why) | Outcome::Unusable(why), _) => Failure::Read(why),
        };
        self.remember_failure(
            namespace,
            name,
            Failed {
                why: Some(failure.clone()),
                until: now + backoff,
                failures,
                last_used: now,
            },
        );
        Settled::Failed(failure)
    }

    /// A place among `namespace`'s failed reads for the first read of
    /// `name`, which is neither held nor remembered: a free one, or that
    /// of a failure whose backoff has ended and that is not being read,
    /// whose count of failures it takes over. Without one, why not.
    ///
    /// Any pod may name objects that do not exist (Secrets: no grant
    /// needed), and a name forgotten would be read again at once: were a
    /// new name read without a place, a namespace naming thousands would
    /// have one read on nearly every lookup. Taking over the count keeps the place's backoff growing to
    /// the TTL whichever names take it in turn, so a namespace's reads of
    /// keys it does not hold are at most [`Limits::failed_per_namespace`]
    /// per backoff.
    fn place_among_failures(
        &mut self,
        namespace: &str,
        name: &str,
        now: Instant,
    ) -> Result<(), FailuresBackingOff> {
        let names = self.failed.entry(namespace.to_string()).or_default();
        let failures = if names.len() < self.limits.failed_per_namespace {
            0
        } else {
            // One being read is due once its read ends, not before.
            let being_read: HashSet<&str> = self
                .reading
                .keys()
                .filter(|(of, _)| of == namespace)
                .map(|(_, name)| name.as_str())
                .collect();
            let soonest = names
                .iter()
                .filter(|(other, _)| !being_read.contains(other.as_str()))
                .min_by_key(|(_, failed)| failed.until);
            match soonest {
                Some((due, failed)) if failed.until <= now => {
                    let (due, failures) = (due.clone(), failed.failures);
                    names.remove(&due);
                    failures
                }
                soonest => {
                    return Err(FailuresBackingOff {
                        remembered: names.len(),
                        next_due_in: soonest.map(|(_, failed)| failed.until - now),
                    });
                }
            }
        };
        names.insert(
            name.to_string(),
            Failed {
                why: None,
                until: now,
                failures,
                last_used: now,
            },
        );
        Ok(())
    }

    fn forget_idle(&mut self, now: Instant) {
        let idle = self.limits.idle;
        let live = |last_used: Instant| now.duration_since(last_used) < idle;
        self.held.retain(|_, held| live(held.last_used));
        self.failed.retain(|_, names| {
            names.retain(|_, failed| live(failed.last_used));
            !names.is_empty()
        });
        // A read that every lookup waiting for it gave up on, before it
        // was made.
        self.reading
            .retain(|_, reading| Arc::strong_count(reading) > 1);
    }

    fn failure(&self, namespace: &str, name: &str) -> Option<&Failed> {
        self.failed.get(namespace)?.get(name)
    }

    /// Remembers a failed read, forgetting the failure of the same
    /// namespace due soonest if it remembers as many as it may: a key held
    /// that fails to read again takes a place without waiting for one, as
    /// its reads are bounded by the values held (a key not held waits in
    /// [`Self::place_among_failures`]).
    fn remember_failure(&mut self, namespace: &str, name: &str, failed: Failed) {
        let names = self.failed.entry(namespace.to_string()).or_default();
        if !names.contains_key(name) && names.len() >= self.limits.failed_per_namespace {
            let soonest = names
                .iter()
                .min_by_key(|(_, failed)| failed.until)
                .map(|(name, _)| name.clone());
            if let Some(soonest) = soonest {
                names.remove(&soonest);
            }
        }
        names.insert(name.to_string(), failed);
    }

    fn forget_failure(&mut self, namespace: &str, name: &str) {
        if let Some(names) = self.failed.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                self.failed.remove(namespace);
            }
        }
    }

    /// Room for one more value of `namespace`, holding `bytes`: the values
    /// of other namespaces to let go of for it (none while the cache is
    /// not full), or why there is none.
    fn room(&self, namespace: &str, bytes: usize) -> Result<Vec<Key>, Full> {
        /// What one namespace holds.
        #[derive(Default)]
        struct Holding<'a> {
            count: usize,
            bytes: usize,
            /// Its values, the least recently used last.
            by_use: Vec<(Instant, &'a Key, usize)>,
        }
        let limits = &self.limits;
        let mut holdings: BTreeMap<&str, Holding> = BTreeMap::new();
        for (key, held) in &self.held {
            let holding = holdings.entry(&key.0).or_default();
            holding.count += 1;
            holding.bytes += held.bytes;
            holding.by_use.push((held.last_used, key, held.bytes));
        }
        let (count, held_bytes) = holdings
            .get(namespace)
            .map_or((0, 0), |holding| (holding.count, holding.bytes));
        if count >= limits.per_namespace {
            return Err(Full::Namespace { held: count });
        }
        let mut total = self.held.len();
        let mut total_bytes: usize = holdings.values().map(|holding| holding.bytes).sum();
        if total < limits.total && total_bytes + bytes <= limits.total_bytes {
            return Ok(Vec::new());
        }
        let sharing = holdings.len() + usize::from(!holdings.contains_key(namespace));
        let share = limits.total / sharing;
        if total >= limits.total && count >= share {
            return Err(Full::Node {
                held: total,
                most: limits.total,
                namespace_holds: count,
                sharing,
            });
        }
        let share_bytes = limits.total_bytes / sharing;
        if total_bytes + bytes > limits.total_bytes && held_bytes + bytes > share_bytes {
            return Err(Full::Bytes {
                held: total_bytes,
                adding: bytes,
                most: limits.total_bytes,
                namespace_would_hold: held_bytes + bytes,
                share: share_bytes,
                sharing,
            });
        }
        for holding in holdings.values_mut() {
            holding
                .by_use
                .sort_by_key(|(last_used, ..)| Reverse(*last_used));
        }
        let mut evicted = Vec::new();
        while total >= limits.total || total_bytes + bytes > limits.total_bytes {
            let by_count = total >= limits.total;
            // Of the namespaces holding the most of what is short, the one
            // whose least recently used value is the oldest. Never this
            // one: under its share, it holds less than the others do on
            // average.
            let most = holdings
                .values_mut()
                .max_by_key(|holding| {
                    let held = if by_count {
                        holding.count
                    } else {
                        holding.bytes
                    };
                    (held, Reverse(holding.by_use.last().map(|(used, ..)| *used)))
                })
                .expect("a full cache holds values");
            let (_, key, freed) = most
                .by_use
                .pop()
                .expect("the namespace holding the most holds some");
            most.count -= 1;
            most.bytes -= freed;
            total -= 1;
            total_bytes -= freed;
            evicted.push(key.clone());
        }
        Ok(evicted)
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn counts(&self) -> Counts {
        Counts {
            held: self.held.len(),
            bytes: self.held.values().map(|held| held.bytes).sum(),
            failed: self.failed.values().map(HashMap::len).sum(),
            reading: self.reading.len(),
        }
    }

    /// The names of `namespace` whose failed reads are remembered, for
    /// tests.
    #[cfg(any(test, feature = "testing"))]
    pub fn failed(&self, namespace: &str) -> std::collections::BTreeSet<&str> {
        self.failed
            .get(namespace)
            .into_iter()
            .flat_map(HashMap::keys)
            .map(String::as_str)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    /// Small bounds, so that a few keys reach them.
    const LIMITS: Limits = Limits {
        ttl: TTL,
        backoff: RetryPolicy {
            initial: Duration::from_secs(2),
            max: TTL,
            attempts: u32::MAX,
        },
        idle: Duration::from_secs(600),
        per_namespace: 2,
        total: 4,
        total_bytes: 100,
        failed_per_namespace: 2,
    };

    const MS: Duration = Duration::from_millis(1);

    fn secs(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    /// Reads `name` of `namespace` at `now` to `outcome`, as a caller does
    /// when the cache asks for a read.
    fn read(
        cache: &mut TtlCache<u32>,
        namespace: &str,
        name: &str,
        outcome: Outcome<u32>,
        now: Instant,
    ) -> Settled<u32> {
        let next = cache.next(namespace, name, now);
        assert!(
            matches!(next, Next::Read(_)),
            "{namespace}/{name}: {next:?}"
        );
        cache.settle(namespace, name, outcome, now)
    }

    fn held(value: u32) -> Settled<u32> {
        Settled::Held {
            value,
            evicted: Vec::new(),
        }
    }

    fn key(namespace: &str, name: &str) -> Key {
        (namespace.to_string(), name.to_string())
    }

    fn gone() -> Failure {
        Failure::Read("gone".into())
    }

    fn is_read(next: &Next<u32>) -> bool {
        matches!(next, Next::Read(_))
    }

    fn cached(next: Next<u32>) -> Result<u32, Failure> {
        match next {
            Next::Cached(lookup) => lookup,
            other => panic!("not cached: {other:?}"),
        }
    }

    #[test]
    fn a_value_is_used_for_the_ttl_then_read_again() {
        let mut cache = TtlCache::new(LIMITS);
        let t0 = Instant::now();
        let read_at_t0 = read(&mut cache, "a", "x", Outcome::Usable(1, 10), t0);
        assert_eq!(read_at_t0, held(1));
        assert_eq!(cached(cache.next("a", "x", t0 + TTL - MS)), Ok(1));
        assert!(is_read(&cache.next("a", "x", t0 + TTL)));
        let settled = cache.settle("a", "x", Outcome::Usable(2, 10), t0 + TTL);
        assert_eq!(settled, held(2));
        assert_eq!(cached(cache.next("a", "x", t0 + TTL)), Ok(2));
    }

    #[test]
    fn lookups_of_a_key_wait_for_the_read_in_flight() {
        let mut cache = TtlCache::<u32>::new(LIMITS);
        let t0 = Instant::now();
        let (Next::Read(first), Next::Read(second)) =
            (cache.next("a", "x", t0), cache.next("a", "x", t0))
        else {
            panic!("not read");
        };
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(cache.counts().reading, 1);
        cache.settle("a", "x", Outcome::Usable(1, 10), t0);
        assert_eq!(cache.counts().reading, 0);
    }

    #[test]
    fn failed_reads_back_off_to_the_ttl_and_a_success_starts_over() {
        let mut cache = TtlCache::new(LIMITS);
        let mut at = Instant::now();
        for failures in 1..=8 {
            let settled = read(&mut cache, "a", "x", Outcome::Unusable("gone".into()), at);
            assert_eq!(settled, Settled::Failed(gone()));
            let floor = LIMITS.backoff.delay(failures).min(TTL);
            let most = floor.mul_f64(1.5).min(TTL);
            assert_eq!(cached(cache.next("a", "x", at + floor - MS)), Err(gone()));
            at += most;
        }
        assert_eq!(
            read(&mut cache, "a", "x", Outcome::Usable(1, 10), at),
            held(1)
        );
        at += TTL;
        read(&mut cache, "a", "x", Outcome::Unusable("gone".into()), at);
        assert!(
            is_read(&cache.next("a", "x", at + LIMITS.backoff.initial.mul_f64(1.5))),
            "the backoff starts over"
        );
    }

    #[test]
    fn a_value_held_outlives_reads_that_get_no_answer() {
        let mut cache = TtlCache::new(LIMITS);
        let t0 = Instant::now();
        read(&mut cache, "a", "x", Outcome::Usable(1, 10), t0);
        let unanswered = Outcome::Unanswered("no answer".into());
        assert_eq!(
            read(&mut cache, "a", "x", unanswered, t0 + TTL),
            Settled::Kept {
                value: 1,
                why: "no answer".into()
            }
        );
        assert_eq!(cached(cache.next("a", "x", t0 + TTL + MS)), Ok(1));
        let retry = t0 + TTL + secs(3);
        assert_eq!(
            read(
                &mut cache,
                "a",
                "x",
                Outcome::Unusable("gone".into()),
                retry
            ),
            Settled::Failed(gone()),
            "an answer that it is gone is believed"
        );
        let unanswered = Outcome::Unanswered("no answer".into());
        assert_eq!(
            read(&mut cache, "a", "y", unanswered, retry),
            Settled::Failed(Failure::Read("no answer".into())),
            "nothing held before"
        );
    }

    /// A namespace holds at most `per_namespace`; once the cache holds
    /// `total`, a namespace under its share takes room from the one
    /// holding the most, which lets go of its least recently used value,
    /// and a namespace at its share gets none.
    #[test]
    fn values_held_are_bounded_per_namespace_and_shared_between_namespaces() {
        let mut cache = TtlCache::new(LIMITS);
        let t0 = Instant::now();
        read(&mut cache, "a", "x", Outcome::Usable(1, 1), t0);
        read(&mut cache, "a", "y", Outcome::Usable(1, 1), t0 + secs(1));
        assert!(matches!(
            cache.next("a", "z", t0 + secs(1)),
            Next::Refused(Full::Namespace { held: 2 })
        ));
        read(&mut cache, "b", "x", Outcome::Usable(1, 1), t0 + secs(2));
        read(&mut cache, "c", "x", Outcome::Usable(1, 1), t0 + secs(2));
        assert_eq!(
            read(&mut cache, "d", "x", Outcome::Usable(1, 1), t0 + secs(3)),
            Settled::Held {
                value: 1,
                evicted: vec![key("a", "x")]
            }
        );
        let refused = cache.next("d", "y", t0 + secs(3));
        let full = Full::Node {
            held: 4,
            most: 4,
            namespace_holds: 1,
            sharing: 4,
        };
        assert!(
            matches!(refused, Next::Refused(ref f) if *f == full),
            "{refused:?}"
        );
        assert_eq!(cache.counts().held, 4);
    }

    /// Bytes are shared as values are; a value that would take its
    /// namespace over its share of a full cache is refused once read and
    /// remembered as a failure.
    #[test]
    fn bytes_held_are_bounded_and_shared_between_namespaces() {
        let mut cache = TtlCache::new(LIMITS);
        let t0 = Instant::now();
        read(&mut cache, "a", "x", Outcome::Usable(1, 60), t0);
        read(&mut cache, "b", "x", Outcome::Usable(1, 30), t0);
        assert_eq!(
            read(&mut cache, "b", "y", Outcome::Usable(1, 20), t0),
            Settled::Held {
                value: 1,
                evicted: vec![key("a", "x")]
            }
        );
        let not_held = Failure::NotHeld(Full::Bytes {
            held: 50,
            adding: 60,
            most: 100,
            namespace_would_hold: 60,
            share: 50,
            sharing: 2,
        });
        assert_eq!(
            read(&mut cache, "a", "x", Outcome::Usable(1, 60), t0),
            Settled::Failed(not_held.clone())
        );
        assert_eq!(cached(cache.next("a", "x", t0 + MS)), Err(not_held));
        let counts = cache.counts();
        assert_eq!((counts.held, counts.bytes, counts.failed), (2, 50, 1));
    }

    /// A namespace remembers `failed_per_namespace` failures; while none is
    /// due, a key it names for the first time is not read; once one is,
    /// the new key takes its place and its count of failures. Another
    /// namespace is read as always.
    #[test]
    fn a_namespaces_new_keys_wait_for_a_place_among_its_failures() {
        let mut cache = TtlCache::new(LIMITS);
        let t0 = Instant::now();
        read(&mut cache, "a", "m0", Outcome::Unusable("gone".into()), t0);
        read(
            &mut cache,
            "a",
            "m1",
            Outcome::Unusable("gone".into()),
            t0 + secs(1),
        );
        let Next::BackingOff(backing_off) = cache.next("a", "m2", t0 + secs(1)) else {
            panic!("read");
        };
        assert_eq!(backing_off.remembered, 2);
        let due_in = backing_off.next_due_in.expect("none being read");
        assert!((secs(1)..secs(2)).contains(&due_in), "{due_in:?}");
        assert!(is_read(&cache.next("b", "m0", t0 + secs(1))));
        // m0 is due, m1 is not: m2 takes m0's place and its one failure.
        let at = t0 + secs(3);
        read(&mut cache, "a", "m2", Outcome::Unusable("gone".into()), at);
        assert_eq!(cache.failed("a"), ["m1", "m2"].into());
        let second_backoff = LIMITS.backoff.delay(2);
        assert_eq!(
            cached(cache.next("a", "m2", at + second_backoff - MS)),
            Err(gone())
        );
        // Places whose reads are in flight are due once they end.
        let (Next::Read(_c0), Next::Read(_c1)) =
            (cache.next("c", "m0", at), cache.next("c", "m1", at))
        else {
            panic!("not read");
        };
        let Next::BackingOff(backing_off) = cache.next("c", "m2", at) else {
            panic!("read");
        };
        assert_eq!(
            backing_off,
            FailuresBackingOff {
                remembered: 2,
                next_due_in: None
            }
        );
    }

    #[test]
    fn idle_values_failures_and_abandoned_reads_are_forgotten() {
        let mut cache = TtlCache::new(LIMITS);
        let t0 = Instant::now();
        read(&mut cache, "a", "x", Outcome::Usable(1, 10), t0);
        read(&mut cache, "a", "y", Outcome::Unusable("gone".into()), t0);
        drop(cache.next("b", "z", t0));
        assert_eq!(
            cache.counts(),
            Counts {
                held: 1,
                bytes: 10,
                failed: 2,
                reading: 1
            }
        );
        let _reading = cache.next("c", "w", t0 + LIMITS.idle);
        assert_eq!(
            cache.counts(),
            Counts {
                held: 0,
                bytes: 0,
                failed: 1,
                reading: 1
            }
        );
    }
}
