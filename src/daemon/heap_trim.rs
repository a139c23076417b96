//! Gives the memory malloc holds free back to the system (#27). Pods come
//! and go in waves; glibc's malloc keeps what a wave freed in its arenas
//! (fragmented under chunks still in use, so its own trimming of the top of
//! the heap rarely applies), and podprobe's resident memory ratchets up to
//! its highest wave plus that free memory (bench/RESULTS.md, churn soak).
//! Every [`TRIM_INTERVAL`], when more than [`TRIM_ABOVE_BYTES`] are free,
//! `malloc_trim(0)` hands the free pages back (`madvise(MADV_DONTNEED)`),
//! as Go's scavenger does for Go components. One call takes about a
//! millisecond at 300 pods.

use std::time::Duration;

use crate::server::process_stats::heap_stats;

/// How often the free memory is looked at.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(30);

/// Free bytes in malloc's arenas above which they are handed back.
pub const TRIM_ABOVE_BYTES: usize = 8 * 1024 * 1024;

/// Trims every [`TRIM_INTERVAL`], for as long as the runtime runs.
pub async fn run() {
    let mut ticks = tokio::time::interval(TRIM_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if trim_if_over(TRIM_ABOVE_BYTES) {
            tracing::debug!("returned free heap memory to the system");
        }
    }
}

/// Hands malloc's free memory back if more than `threshold` bytes are free
/// (the figure of `podprobe_heap_free_bytes`); whether it did (glibc only;
/// elsewhere never).
pub fn trim_if_over(threshold: usize) -> bool {
    let free = heap_stats().heap_free_bytes;
    if free.is_none_or(|free| usize::try_from(free).is_ok_and(|free| free <= threshold)) {
        return false;
    }
    malloc_trim();
    true
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_trim() {
    // SAFETY: malloc_trim takes the padding to keep and locks each arena it
    // trims.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Never called: without glibc there are no heap figures.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_trim() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::sync::PoisonError;

    use super::*;
    use crate::server::process_stats::HEAP_TESTS;

    fn resident_kib() -> i64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .expect("VmRSS");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn freed_memory_under_a_live_chunk_goes_back_to_the_system() {
        let _alone = HEAP_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        // 64 MiB in 1 KiB chunks, then one chunk above them that stays, so
        // free() alone cannot shrink the heap: the wave's memory stays
        // resident, as after a wave of deleted pods.
        let wave: Vec<Box<[u8; 1024]>> = (0..64 * 1024).map(|_| Box::new([1u8; 1024])).collect();
        let pinned = Box::new([2u8; 1024]);
        drop(wave);
        let before = resident_kib();
        assert!(
            trim_if_over(TRIM_ABOVE_BYTES),
            "64 MiB free, over the threshold"
        );
        let after = resident_kib();
        // Other tests allocate meanwhile; most of the 64 MiB must go.
        assert!(
            before - after > 32 * 1024,
            "RSS {before} KiB -> {after} KiB"
        );
        assert_eq!(pinned[0], 2);
        // Below the threshold nothing is done.
        assert!(!trim_if_over(usize::MAX));
    }
}
