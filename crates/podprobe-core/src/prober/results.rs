//! Probe results caches: one per probe kind, keyed by container ID, with
//! change notifications (the kubelet's `results.Manager`).
//!
//! A worker writes the thresholded result of its probe here; the status side
//! reads it (`get`) and reacts to changes (the updates channel). Only a
//! change produces an update (R3); removing an entry is silent (R4).
//!
//! Back-pressure (R6): the updates channel is a bounded tokio `mpsc` channel
//! of [`UPDATES_CAPACITY`] entries, like the kubelet's buffered Go channel of
//! 20. [`ResultsCache::set`] is `async` and waits for room when the channel is
//! full, so a worker whose updates are not consumed stalls instead of
//! queueing without bound. If the receiver has been dropped, updates are
//! discarded and the cache keeps working.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::spec::ProbeKind;

/// Capacity of each cache's updates channel (the kubelet's `make(chan Update, 20)`).
pub const UPDATES_CAPACITY: usize = 20;

/// The longest failure note kept per container, in bytes: the condition that
/// shows it stays small however much a probed server or command writes.
pub const MAX_CONDITION_NOTE_BYTES: usize = 256;

/// A cached probe result (`results.Result`). The kubelet's zero value is
/// `Success`, which matters for a worker's initial `last_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub enum CachedResult {
    Unknown,
    #[default]
    Success,
    Failure,
}

/// A change of one cached result (`results.Update`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultUpdate {
    /// Which cache changed.
    pub kind: ProbeKind,
    /// Container ID as the runtime reports it (`containerd://abc`).
    pub container_id: String,
    pub result: CachedResult,
    pub pod_uid: String,
    /// When the result was stored: the end of the probe run that changed
    /// it (podprobe's `podprobe_result_to_status_seconds` starts here).
    pub at: Instant,
}

/// The results of one probe kind, keyed by container ID.
#[derive(Debug)]
pub struct ResultsCache {
    kind: ProbeKind,
    entries: RwLock<HashMap<String, CachedResult>>,
    /// podprobe's addition to the kubelet's cache: the last failure a
    /// container's probe reported (its `Unhealthy` event text), for the gate
    /// condition's message. Setting one is silent, so it never causes a
    /// status write of its own.
    notes: RwLock<HashMap<String, Arc<str>>>,
    updates: mpsc::Sender<ResultUpdate>,
}

impl ResultsCache {
    /// An empty cache for `kind` and the receiving end of its updates.
    pub fn new(kind: ProbeKind) -> (ResultsCache, mpsc::Receiver<ResultUpdate>) {
        let (updates, receiver) = mpsc::channel(UPDATES_CAPACITY);
        let cache = ResultsCache {
            kind,
            entries: RwLock::new(HashMap::new()),
            notes: RwLock::new(HashMap::new()),
            updates,
        };
        (cache, receiver)
    }

    /// The probe kind whose results this cache holds.
    pub fn kind(&self) -> ProbeKind {
        self.kind
    }

    /// The cached result for `container_id`, if any (R5).
    pub fn get(&self, container_id: &str) -> Option<CachedResult> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries.get(container_id).copied()
    }

    /// Stores `result` and, if the entry was absent or different, sends an
    /// update, waiting while the updates channel is full (R3, R6).
    pub async fn set(&self, container_id: &str, result: CachedResult, pod_uid: &str) {
        if !self.store(container_id, result) {
            return;
        }
        let update = ResultUpdate {
            kind: self.kind,
            container_id: container_id.to_string(),
            result,
            pod_uid: pod_uid.to_string(),
            at: Instant::now(),
        };
        // A dropped receiver means nobody reacts to changes any more (shutdown,
        // or a caller that only polls); the cache itself stays authoritative.
        let _ = self.updates.send(update).await;
    }

    /// Deletes the entry for `container_id`, and its note, without sending
    /// an update (R4).
    pub fn remove(&self, container_id: &str) {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        entries.remove(container_id);
        let mut notes = self.notes.write().unwrap_or_else(PoisonError::into_inner);
        notes.remove(container_id);
    }

    /// Keeps `note` as the last failure of `container_id`'s probe, cut to
    /// [`MAX_CONDITION_NOTE_BYTES`] (`...` marks a cut). Sends no update.
    pub fn set_note(&self, container_id: &str, note: &str) {
        let note: Arc<str> = bounded_note(note).into();
        let mut notes = self.notes.write().unwrap_or_else(PoisonError::into_inner);
        notes.insert(container_id.to_string(), note);
    }

    /// The last failure note of `container_id`'s probe, if any.
    pub fn note(&self, container_id: &str) -> Option<Arc<str>> {
        let notes = self.notes.read().unwrap_or_else(PoisonError::into_inner);
        notes.get(container_id).cloned()
    }

    /// Number of cached entries.
    pub fn len(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no result is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Results and notes kept (#39).
    fn entries(&self) -> usize {
        let notes = self.notes.read().unwrap_or_else(PoisonError::into_inner);
        self.len() + notes.len()
    }

    /// Writes `result`; returns whether this is a change worth an update.
    /// The lock is released before the (possibly waiting) send.
    fn store(&self, container_id: &str, result: CachedResult) -> bool {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        let previous = entries.insert(container_id.to_string(), result);
        previous != Some(result)
    }
}

/// `note` cut on a character boundary so that, with `...` appended, it
/// takes at most [`MAX_CONDITION_NOTE_BYTES`].
fn bounded_note(note: &str) -> String {
    if note.len() <= MAX_CONDITION_NOTE_BYTES {
        return note.to_string();
    }
    const MARK: &str = "...";
    let end = note.floor_char_boundary(MAX_CONDITION_NOTE_BYTES - MARK.len());
    format!("{}{MARK}", &note[..end])
}

/// The three caches of one prober (R2).
#[derive(Debug)]
pub struct ProbeCaches {
    pub liveness: ResultsCache,
    pub readiness: ResultsCache,
    pub startup: ResultsCache,
}

/// The receiving ends of the three caches' updates channels.
#[derive(Debug)]
pub struct ResultReceivers {
    pub liveness: mpsc::Receiver<ResultUpdate>,
    pub readiness: mpsc::Receiver<ResultUpdate>,
    pub startup: mpsc::Receiver<ResultUpdate>,
}

impl ProbeCaches {
    /// Three empty caches and their update receivers.
    pub fn new() -> (ProbeCaches, ResultReceivers) {
        let (liveness, liveness_rx) = ResultsCache::new(ProbeKind::Liveness);
        let (readiness, readiness_rx) = ResultsCache::new(ProbeKind::Readiness);
        let (startup, startup_rx) = ResultsCache::new(ProbeKind::Startup);
        let caches = ProbeCaches {
            liveness,
            readiness,
            startup,
        };
        let receivers = ResultReceivers {
            liveness: liveness_rx,
            readiness: readiness_rx,
            startup: startup_rx,
        };
        (caches, receivers)
    }

    /// The cache holding `kind`'s results.
    pub fn get(&self, kind: ProbeKind) -> &ResultsCache {
        match kind {
            ProbeKind::Liveness => &self.liveness,
            ProbeKind::Readiness => &self.readiness,
            ProbeKind::Startup => &self.startup,
        }
    }

    /// Results and notes kept in the three caches (#39): each goes with
    /// its worker (W10).
    pub fn entries(&self) -> usize {
        ProbeKind::ALL
            .iter()
            .map(|&kind| self.get(kind).entries())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    const ID: &str = "containerd://abc";

    #[test]
    fn r1_cached_result_zero_value_is_success() {
        assert_eq!(CachedResult::default(), CachedResult::Success);
    }

    #[tokio::test]
    async fn r2_one_cache_per_kind() {
        let (caches, mut rx) = ProbeCaches::new();
        caches
            .get(ProbeKind::Readiness)
            .set(ID, CachedResult::Failure, "uid")
            .await;
        assert_eq!(caches.readiness.get(ID), Some(CachedResult::Failure));
        assert_eq!(caches.liveness.get(ID), None);
        assert_eq!(caches.startup.get(ID), None);
        let update = rx.readiness.try_recv().unwrap();
        assert_eq!(update.kind, ProbeKind::Readiness);
        assert!(rx.liveness.try_recv().is_err());
        assert!(rx.startup.try_recv().is_err());
    }

    #[tokio::test]
    async fn r3_set_notifies_only_on_change() {
        let (cache, mut rx) = ResultsCache::new(ProbeKind::Liveness);
        let before = Instant::now();
        cache.set(ID, CachedResult::Success, "uid-1").await;
        let update = rx.try_recv().unwrap();
        assert!((before..=Instant::now()).contains(&update.at));
        assert_eq!(
            update,
            ResultUpdate {
                kind: ProbeKind::Liveness,
                container_id: ID.to_string(),
                result: CachedResult::Success,
                pod_uid: "uid-1".to_string(),
                at: update.at,
            }
        );
        cache.set(ID, CachedResult::Success, "uid-1").await;
        assert!(
            rx.try_recv().is_err(),
            "re-setting the same value is silent"
        );
        cache.set(ID, CachedResult::Failure, "uid-1").await;
        assert_eq!(rx.try_recv().unwrap().result, CachedResult::Failure);
    }

    #[tokio::test]
    async fn r4_remove_is_silent() {
        let (cache, mut rx) = ResultsCache::new(ProbeKind::Readiness);
        cache.set(ID, CachedResult::Failure, "uid").await;
        rx.try_recv().unwrap();
        cache.remove(ID);
        assert!(rx.try_recv().is_err());
        assert_eq!(cache.get(ID), None);
        // Absent again, so the same value is a change once more.
        cache.set(ID, CachedResult::Failure, "uid").await;
        assert_eq!(rx.try_recv().unwrap().result, CachedResult::Failure);
    }

    #[tokio::test]
    async fn notes_are_silent_bounded_and_go_with_the_entry() {
        let (cache, mut rx) = ResultsCache::new(ProbeKind::Readiness);
        cache.set(ID, CachedResult::Failure, "uid").await;
        rx.try_recv().unwrap();
        cache.set_note(
            ID,
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
        );
        assert!(rx.try_recv().is_err(), "a note sends no update");
        assert_eq!(
            cache.note(ID).as_deref(),
            Some("Readiness probe failed: HTTP probe failed with statuscode: 503")
        );
        // A long note with a multi-byte character across the cut.
        let long = format!(
            "{}é{}",
            "x".repeat(MAX_CONDITION_NOTE_BYTES - 4),
            "y".repeat(1000)
        );
        cache.set_note(ID, &long);
        let kept = cache.note(ID).unwrap();
        assert!(
            kept.len() <= MAX_CONDITION_NOTE_BYTES,
            "{} bytes",
            kept.len()
        );
        assert!(kept.ends_with("x..."), "{kept}");
        cache.remove(ID);
        assert_eq!(cache.note(ID), None);
    }

    #[tokio::test]
    async fn r5_get_returns_value_and_presence() {
        let (cache, _rx) = ResultsCache::new(ProbeKind::Startup);
        assert_eq!(cache.get(ID), None);
        cache.set(ID, CachedResult::Unknown, "uid").await;
        assert_eq!(cache.get(ID), Some(CachedResult::Unknown));
        assert_eq!(cache.get("containerd://other"), None);
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn r6_full_updates_channel_blocks_the_writer() {
        let (cache, mut rx) = ResultsCache::new(ProbeKind::Readiness);
        for i in 0..UPDATES_CAPACITY {
            cache
                .set(&format!("containerd://{i}"), CachedResult::Failure, "uid")
                .await;
        }
        let blocked = cache.set("containerd://one-too-many", CachedResult::Failure, "uid");
        let mut blocked = Box::pin(blocked);
        assert!(
            (&mut blocked).now_or_never().is_none(),
            "21st update must wait"
        );
        // The value is already stored; only the notification waits.
        assert_eq!(
            cache.get("containerd://one-too-many"),
            Some(CachedResult::Failure)
        );
        rx.recv().await.unwrap();
        assert!(
            blocked.now_or_never().is_some(),
            "room made, the writer proceeds"
        );
        // Re-sets that change nothing never wait, even with a full channel.
        let unchanged = cache.set("containerd://0", CachedResult::Failure, "uid");
        assert!(unchanged.now_or_never().is_some());
    }

    #[tokio::test]
    async fn r6_dropped_receiver_does_not_block() {
        let (cache, rx) = ResultsCache::new(ProbeKind::Liveness);
        drop(rx);
        for i in 0..(UPDATES_CAPACITY + 5) {
            cache
                .set(&format!("containerd://{i}"), CachedResult::Success, "uid")
                .await;
        }
        assert_eq!(cache.len(), UPDATES_CAPACITY + 5);
    }
}
