//! The connection cap of the node-facing server, and which connection makes
//! room when it is reached.
//!
//! Every accepted connection holds a slot in a [`ConnectionTable`] until it
//! ends. A connection is *idle* while no request of it is being answered
//! (it has sent nothing yet, is between keep-alive requests, or is still
//! sending a request's headers), *busy* while one is.
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
//! The victim is a *silent* connection if there is one, the one idle the
//! longest among them; else the longest idle of the others. Silent means no
//! request so far and, asked at eviction time ([`SentBytes`]), no bytes
//! waiting in its socket either. That second question matters under a
//! flood: the server accepts connections in bursts (a task runs a while
//! before it yields), so dozens may be accepted after the probe's before the
//! probe's own task has read its request, which is already in the socket;
//! oldest first, they would evict it. A flood whose connections each send a
//! byte is on an equal footing with the probe again: it evicts the probe
//! only if the probe's request is not read while the server accepts `max`
//! more connections.

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
    /// Requests being answered.
    in_flight: usize,
    /// When the last request was answered (or the connection accepted).
    idle_since: Instant,
    /// Whether it has sent a request, or had bytes waiting when a victim
    /// was sought.
    spoken: bool,
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
                idle_since: now,
                spoken: false,
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
    /// The idle connection to evict: the longest idle silent one, else the
    /// longest idle one; `None` when every connection is busy.
    fn victim(&mut self) -> Option<u64> {
        let mut idle: Vec<(bool, Instant, u64)> = self
            .open
            .iter()
            .filter(|(_, entry)| entry.in_flight == 0)
            .map(|(id, entry)| (entry.spoken, entry.idle_since, *id))
            .collect();
        idle.sort_unstable();
        for &(spoken, _, id) in &idle {
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
        self.open
            .iter()
            .filter(|(_, entry)| entry.in_flight == 0)
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
    /// one is answered, or once it was evicted.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let table = self.table.lock();
        let entry = table.open.get(&self.id)?;
        (entry.in_flight == 0).then_some(entry.idle_since)
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

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(entry) = self.slot.table.lock().open.get_mut(&self.slot.id) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            if entry.in_flight == 0 {
                entry.idle_since = Instant::now();
            }
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
        tokio::time::advance(Duration::from_secs(1)).await;
        let second = admitted(&table);
        let third = admitted(&table);
        assert_eq!(table.len(), 3);

        // `first` answers a request and is the most recently idle afterwards.
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(first.busy());

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
    async fn silent_connections_are_evicted_before_those_that_have_spoken() {
        let table = ConnectionTable::new(3);
        // Oldest: its request waits, unread, in the socket.
        let unread_request = admitted_with(&table, Arc::new(AtomicBool::new(true)));
        tokio::time::advance(Duration::from_secs(1)).await;
        let made_a_request = admitted(&table);
        drop(made_a_request.busy());
        tokio::time::advance(Duration::from_secs(1)).await;
        let silent = admitted(&table);
        tokio::time::advance(Duration::from_secs(1)).await;

        let flood = admitted(&table);
        assert!(was_evicted(&silent).await, "the only silent one");
        let more = admitted(&table);
        assert!(was_evicted(&flood).await, "the next silent one");
        assert!(!was_evicted(&unread_request).await);
        assert!(!was_evicted(&made_a_request).await);

        // Once none is silent, the longest idle goes, spoken or not.
        drop(more.busy());
        let _still_more = admitted(&table);
        assert!(was_evicted(&unread_request).await);
        assert!(!was_evicted(&made_a_request).await);
        assert!(!was_evicted(&more).await);
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
