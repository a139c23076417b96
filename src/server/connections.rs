//! The connection cap of the node-facing server, and which connection makes
//! room when it is reached.
//!
//! Every accepted connection holds a slot in a [`ConnectionTable`] until it
//! ends. A connection is *idle* while no request of it is being answered
//! (it has sent nothing yet, is between keep-alive requests, or is still
//! sending a request's headers), *busy* while one is, and *reviewing* while
//! its only requests in flight wait for the API server to review their
//! bearer token ([`Busy::review`]).
//!
//! At the cap a new connection evicts an idle one rather than being
//! refused. Refusing new connections would hand the port to whoever opens
//! connections fastest: an idle-connection flood would keep every slot taken
//! (each flooder's connection is replaced as soon as the idle timeout reaps
//! it) and the kubelet's liveness probe of `/healthz`, which opens a fresh
//! connection every period, would fail until the kubelet restarts podprobe.
//! With eviction a flood only churns its own connections: the probe's
//! connection sends its request at once, turns busy and cannot be evicted
//! while it is answered. A new connection is refused (closed at once) only
//! when every slot is busy answering a request, which each request leaves
//! within its bounded time.
//!
//! A reviewing connection is not idle (the idle timeout leaves it alone: the
//! review has a timeout of its own) but holds no claim to its slot either:
//! anyone can make requests wait on reviews, one forged token each, and
//! were those connections protected like busy ones, a flood of them would
//! fill the table for the length of a review, refusing the probe's
//! connection. They make room after every idle connection; the kubelet's
//! probe of `/healthz` never waits on a review, so it is never among them.
//! At most a few requests of a connection review at once
//! ([`Busy::review`]'s `max`): more would tie up the server's bounded review
//! queue from one connection.
//!
//! The victim is, the longest idle first in each group:
//!
//! 1. an *answered* connection, one between keep-alive requests: its client
//!    has had its answers and pays a handshake for its next request. A new
//!    connection may be the probe's, its request on the way. Were the
//!    answered ones not first, a flood that reconnects whenever evicted (its
//!    connections busy most of the time, answered 429 or from the cache)
//!    would chain evictions, each new connection of it evicting the oldest
//!    of the rest: the probe's, in the instant between its connect and its
//!    request, or while its request waits unread.
//! 2. a *silent* connection: no request so far and, asked at eviction time
//!    ([`SentBytes`]), no bytes waiting in its socket either. That second
//!    question matters under a flood: the server accepts connections in
//!    bursts (a task runs a while before it yields), so dozens may be
//!    accepted after the probe's before the probe's own task has read its
//!    request, which is already in the socket; oldest first, they would
//!    evict it.
//! 3. any other idle one: its first request waits unread. A flood whose
//!    connections each send a byte is on an equal footing with the probe
//!    here: it evicts the probe only if the probe's request is not read while
//!    the server accepts `max` more connections.
//! 4. a reviewing one, the one with no busy request the longest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Whether a connection's peer has sent bytes that the server has not read
/// yet: a peek at its socket.
pub(crate) struct SentBytes(Box<dyn Fn() -> bool + Send>);

impl SentBytes {
    pub(crate) fn new(peek: impl Fn() -> bool + Send + 'static) -> Self {
        SentBytes(Box::new(peek))
    }
}

impl std::fmt::Debug for SentBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SentBytes")
    }
}

/// The open connections of one listener, at most `max` of them.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionTable {
    table: Arc<Mutex<Table>>,
    max: usize,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// Requests being answered, not counting those reviewing.
    in_flight: usize,
    /// Requests waiting on a review of their bearer token.
    reviewing: usize,
    /// When `in_flight` last fell to zero (or the connection was accepted).
    idle_since: Instant,
    /// Whether it has sent a request, or had bytes waiting when a victim
    /// was sought.
    spoken: bool,
    /// Whether a request of it has been answered: idle, it is between
    /// keep-alive requests.
    answered: bool,
    sent_bytes: SentBytes,
    /// Woken when the connection is evicted.
    evicted: Arc<Notify>,
}

/// What [`ConnectionTable::admit`] decided.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Serve the connection; it holds its slot until dropped.
    Admitted(Slot),
    /// Every slot is busy answering a request: close the new connection.
    Full,
}

impl ConnectionTable {
    /// A table of at most `max` connections (at least one).
    pub(crate) fn new(max: usize) -> Self {
        ConnectionTable {
            table: Arc::default(),
            max: max.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every change below leaves the table consistent before it can
        // panic, so a poisoned lock holds a usable table.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a newly accepted connection, evicting an idle connection when
    /// the table is full (see the module docs for which and why).
    pub(crate) fn admit(&self, sent_bytes: SentBytes) -> Admission {
        let now = Instant::now();
        let mut table = self.lock();
        if table.open.len() >= self.max {
            match table.victim() {
                Some(id) => {
                    if let Some(entry) = table.open.remove(&id) {
                        // `notify_one` keeps the wake-up for a task that is
                        // not waiting yet.
                        entry.evicted.notify_one();
                    }
                }
                None => return Admission::Full,
            }
        }
        let id = table.next_id;
        table.next_id += 1;
        let evicted = Arc::new(Notify::new());
        table.open.insert(
            id,
            Entry {
                in_flight: 0,
                reviewing: 0,
                idle_since: now,
                spoken: false,
                answered: false,
                sent_bytes,
                evicted: evicted.clone(),
            },
        );
        Admission::Admitted(Slot {
            id,
            table: self.clone(),
            evicted,
        })
    }

    #[cfg(test)]
    /// Connections holding a slot.
    pub(crate) fn len(&self) -> usize {
        self.lock().open.len()
    }
}

impl Table {
    /// The connection to evict (see the module docs for the order); `None`
    /// when every connection is busy.
    fn victim(&mut self) -> Option<u64> {
        let idle = |entry: &Entry| entry.in_flight == 0 && entry.reviewing == 0;
        if let Some(answered) = self.longest(|entry| idle(entry) && entry.answered) {
            return Some(answered);
        }
        let mut unanswered: Vec<(bool, Instant, u64)> = self
            .open
            .iter()
            .filter(|(_, entry)| idle(entry))
            .map(|(id, entry)| (entry.spoken, entry.idle_since, *id))
            .collect();
        unanswered.sort_unstable();
        for &(spoken, _, id) in &unanswered {
            if spoken {
                break;
            }
            let Some(entry) = self.open.get_mut(&id) else {
                continue;
            };
            if (entry.sent_bytes.0)() {
                entry.spoken = true;
            } else {
                return Some(id);
            }
        }
        self.longest(idle)
            .or_else(|| self.longest(|entry| entry.in_flight == 0))
    }

    /// The connection `which` picks that has had no busy request the
    /// longest.
    fn longest(&self, which: impl Fn(&Entry) -> bool) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, entry)| which(entry))
            .min_by_key(|(id, entry)| (entry.idle_since, **id))
            .map(|(id, _)| *id)
    }
}

/// One admitted connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct Slot {
    id: u64,
    table: ConnectionTable,
    evicted: Arc<Notify>,
}

impl Slot {
    /// Marks a request as being answered until the returned guard drops.
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        if let Some(entry) = self.table.lock().open.get_mut(&self.id) {
            entry.in_flight += 1;
            entry.spoken = true;
        }
        Busy { slot: self.clone() }
    }

    /// Since when the connection has had no request in flight; `None` while
    /// one is answered or reviewing, or once it was evicted.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let table = self.table.lock();
        let entry = table.open.get(&self.id)?;
        (entry.in_flight == 0 && entry.reviewing == 0).then_some(entry.idle_since)
    }

    /// Completes once the connection has been evicted to make room.
    pub(crate) async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.lock().open.remove(&self.id);
    }
}

/// A request being answered; see [`Slot::busy`].
#[derive(Debug)]
pub(crate) struct Busy {
    slot: Arc<Slot>,
}

impl Busy {
    /// Marks the request as reviewing (see the module docs) until the
    /// returned guard drops; `None`, and the request stays busy, when `max`
    /// requests of its connection already review or the connection was
    /// evicted (its answer cannot be sent: it must not take a review's turn).
    pub(crate) fn review(&self, max: usize) -> Option<Reviewing<'_>> {
        let mut table = self.slot.table.lock();
        let entry = table.open.get_mut(&self.slot.id)?;
        if entry.reviewing >= max {
            return None;
        }
        entry.reviewing += 1;
        entry.leave_in_flight();
        Some(Reviewing { busy: self })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(entry) = self.slot.table.lock().open.get_mut(&self.slot.id) {
            entry.answered = true;
            entry.leave_in_flight();
        }
    }
}

impl Entry {
    /// One request fewer being answered; idle from now if it was the last.
    fn leave_in_flight(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            self.idle_since = Instant::now();
        }
    }
}

/// A request reviewing; see [`Busy::review`]. Busy again once dropped.
#[derive(Debug)]
pub(crate) struct Reviewing<'a> {
    busy: &'a Busy,
}

impl Drop for Reviewing<'_> {
    fn drop(&mut self) {
        let slot = &self.busy.slot;
        if let Some(entry) = slot.table.lock().open.get_mut(&slot.id) {
            entry.reviewing = entry.reviewing.saturating_sub(1);
            entry.in_flight += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    /// A silent connection.
    fn admitted(table: &ConnectionTable) -> Arc<Slot> {
        admitted_with(table, Arc::new(AtomicBool::new(false)))
    }

    /// A connection whose socket holds unread bytes while `sent` is true.
    fn admitted_with(table: &ConnectionTable, sent: Arc<AtomicBool>) -> Arc<Slot> {
        match table.admit(SentBytes::new(move || sent.load(Ordering::SeqCst))) {
            Admission::Admitted(slot) => Arc::new(slot),
            Admission::Full => panic!("refused with {} open", table.len()),
        }
    }

    /// Whether `slot` was told it is evicted, without waiting.
    async fn was_evicted(slot: &Slot) -> bool {
        tokio::time::timeout(Duration::ZERO, slot.evicted())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn admits_up_to_the_cap_then_evicts_the_longest_idle() {
        let table = ConnectionTable::new(3);
        let first = admitted(&table);
        let second = admitted(&table);
        let third = admitted(&table);
        assert_eq!(table.len(), 3);

        // Each answers a request, `first` last: the most recently idle.
        for slot in [&second, &third, &first] {
            drop(slot.busy());
            tokio::time::advance(Duration::from_secs(1)).await;
        }

        let fourth = admitted(&table);
        assert_eq!(table.len(), 3);
        assert!(was_evicted(&second).await, "second was idle the longest");
        assert_eq!(second.idle_since(), None, "an evicted slot is gone");
        assert!(!was_evicted(&first).await);
        assert!(!was_evicted(&third).await);
        assert!(!was_evicted(&fourth).await);
    }

    #[tokio::test(start_paused = true)]
    async fn busy_connections_are_never_evicted() {
        let table = ConnectionTable::new(2);
        let first = admitted(&table);
        let second = admitted(&table);
        let busy_first = first.busy();
        let busy_second = second.busy();
        tokio::time::advance(Duration::from_secs(60)).await;
        let never_read = SentBytes::new(|| panic!("busy connections are not peeked"));
        assert!(matches!(table.admit(never_read), Admission::Full));
        assert!(!was_evicted(&first).await);
        assert!(!was_evicted(&second).await);

        drop(busy_second);
        let third = admitted(&table);
        assert!(was_evicted(&second).await);
        assert!(!was_evicted(&first).await);
        drop((busy_first, third));
    }

    #[tokio::test(start_paused = true)]
    async fn answered_then_silent_then_unread_connections_make_room() {
        let table = ConnectionTable::new(3);
        // Oldest: its request waits, unread, in the socket.
        let unread_request = admitted_with(&table, Arc::new(AtomicBool::new(true)));
        tokio::time::advance(Duration::from_secs(1)).await;
        let silent = admitted(&table);
        tokio::time::advance(Duration::from_secs(1)).await;
        let answered = admitted(&table);
        drop(answered.busy());
        tokio::time::advance(Duration::from_secs(1)).await;

        let flood = admitted(&table);
        assert!(
            was_evicted(&answered).await,
            "answered, though idle the shortest"
        );
        let more = admitted(&table);
        assert!(was_evicted(&silent).await, "the longest idle silent one");
        let still_more = admitted(&table);
        assert!(was_evicted(&flood).await, "the next silent one");
        assert!(!was_evicted(&unread_request).await);

        // Once none is answered or silent, the longest idle goes.
        let _busy = (more.busy(), still_more.busy());
        let _last = admitted(&table);
        assert!(was_evicted(&unread_request).await);
        assert!(!was_evicted(&more).await);
        assert!(!was_evicted(&still_more).await);
    }

    #[tokio::test(start_paused = true)]
    async fn reviewing_connections_make_room_after_idle_ones_but_are_not_idle() {
        let table = ConnectionTable::new(2);
        let reviewing = admitted(&table);
        let request = reviewing.busy();
        let review = request.review(2).expect("the connection's first review");
        assert_eq!(reviewing.idle_since(), None, "not reaped as idle");
        let second = reviewing.busy();
        let second_review = second.review(2).expect("its second review");
        let third = reviewing.busy();
        assert!(third.review(2).is_none(), "at most 2 reviews a connection");
        drop(second_review);
        drop((third, second));

        tokio::time::advance(Duration::from_secs(1)).await;
        let idle = admitted(&table);
        drop(idle.busy());
        let answering = admitted(&table);
        assert!(was_evicted(&idle).await, "idle, so first to go");
        assert!(!was_evicted(&reviewing).await);

        let _answering = answering.busy();
        let newest = admitted(&table);
        assert!(was_evicted(&reviewing).await, "reviewing, not busy");
        let _newest = newest.busy();
        assert!(
            request.review(2).is_none(),
            "an evicted connection takes no review's turn"
        );
        assert!(matches!(
            table.admit(SentBytes::new(|| false)),
            Admission::Full
        ));
        drop(review);
        drop(request);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_busy_again_after_its_review() {
        let table = ConnectionTable::new(1);
        let slot = admitted(&table);
        let request = slot.busy();
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(request.review(1));
        assert_eq!(slot.idle_since(), None, "busy again");
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(request);
        assert_eq!(
            slot.idle_since(),
            Some(Instant::now()),
            "idle from the answer on"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_since_follows_requests() {
        let table = ConnectionTable::new(1);
        let accepted = Instant::now();
        let slot = admitted(&table);
        assert_eq!(slot.idle_since(), Some(accepted));
        let one = slot.busy();
        let two = slot.busy();
        assert_eq!(slot.idle_since(), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        drop(one);
        assert_eq!(slot.idle_since(), None, "one request still in flight");
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(two);
        assert_eq!(slot.idle_since(), Some(accepted + Duration::from_secs(3)));
    }

    #[tokio::test]
    async fn dropping_a_slot_frees_it() {
        let table = ConnectionTable::new(1);
        let slot = admitted(&table);
        assert_eq!(table.len(), 1);
        drop(slot);
        assert_eq!(table.len(), 0);
        let again = admitted(&table);
        assert!(!was_evicted(&again).await);
    }

    #[tokio::test]
    async fn a_cap_of_zero_still_serves_one_connection() {
        let table = ConnectionTable::new(0);
        let _slot = admitted(&table);
        assert_eq!(table.len(), 1);
    }
}
