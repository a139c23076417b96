//! Node-wide turns for podprobe's writes to the API server: at most a fixed
//! number of requests in flight, handed out first come, first served (the
//! status patches of Rule 6.3, the marker patches of MK4). How many writes
//! wait for a turn and how many hold one are gauges: an API server that
//! answers slowly shows as a queue on the node, not only as latency.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Semaphore, SemaphorePermit};

/// What [`Turns`] reports: the writes waiting for a turn and the turns
/// taken; cheap handles (reference-counted), registered by the writer's
/// metrics.
#[derive(Debug, Clone, Default)]
pub struct TurnGauges {
    pub waiting: Gauge,
    pub taken: Gauge,
}

impl TurnGauges {
    /// Registers `{writes}_waiting` and `{writes}_in_flight` in `registry`,
    /// each with its help text.
    pub fn register(registry: &mut Registry, writes: &str, help: [&str; 2]) -> Self {
        let gauges = TurnGauges::default();
        let [waiting, in_flight] = help;
        registry.register(format!("{writes}_waiting"), waiting, gauges.waiting.clone());
        registry.register(
            format!("{writes}_in_flight"),
            in_flight,
            gauges.taken.clone(),
        );
        gauges
    }
}

/// A fixed number of turns, handed out in the order they were asked for
/// (tokio's semaphore is fair).
#[derive(Debug)]
pub struct Turns {
    semaphore: Semaphore,
    gauges: TurnGauges,
}

/// A turn held; given back when dropped.
#[derive(Debug)]
pub struct Turn<'a> {
    _permit: SemaphorePermit<'a>,
    _taken: Counted<'a>,
}

/// One in `gauge` for as long as it lives: a future dropped while it waits
/// (a cancelled write) stops counting as it goes.
#[derive(Debug)]
struct Counted<'a>(&'a Gauge);

impl<'a> Counted<'a> {
    fn new(gauge: &'a Gauge) -> Self {
        gauge.inc();
        Counted(gauge)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Turns {
    pub fn new(turns: usize, gauges: TurnGauges) -> Self {
        Turns {
            semaphore: Semaphore::new(turns),
            gauges,
        }
    }

    /// Waits for a turn behind every write that asked before. `None` never
    /// happens: the semaphore is private and never closed.
    pub async fn take(&self) -> Option<Turn<'_>> {
        let permit = {
            let _waiting = Counted::new(&self.gauges.waiting);
            self.semaphore.acquire().await.ok()?
        };
        Some(Turn {
            _permit: permit,
            _taken: Counted::new(&self.gauges.taken),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn counts(gauges: &TurnGauges) -> (i64, i64) {
        (gauges.waiting.get(), gauges.taken.get())
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_gauges_count_writes_waiting_and_turns_taken() {
        let gauges = TurnGauges::default();
        let turns = Arc::new(Turns::new(2, gauges.clone()));
        let first = turns.take().await.expect("a turn");
        let second = turns.take().await.expect("a turn");
        assert_eq!(counts(&gauges), (0, 2));

        let (order, mut done) = tokio::sync::mpsc::unbounded_channel();
        for waiter in 0..3 {
            let (turns, order) = (turns.clone(), order.clone());
            tokio::spawn(async move {
                let _turn = turns.take().await.expect("a turn");
                order.send(waiter).expect("the test waits");
            });
            // Each asks after the one before.
            settle().await;
        }
        assert_eq!(counts(&gauges), (3, 2));

        // Turns go in the order they were asked for.
        drop(first);
        settle().await;
        drop(second);
        settle().await;
        let mut seen = Vec::new();
        while let Ok(waiter) = done.try_recv() {
            seen.push(waiter);
        }
        assert_eq!(seen, vec![0, 1, 2]);
        assert_eq!(counts(&gauges), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_stops_waiting_is_no_longer_counted() {
        let gauges = TurnGauges::default();
        let turns = Turns::new(1, gauges.clone());
        let held = turns.take().await.expect("a turn");
        let gave_up = tokio::time::timeout(std::time::Duration::from_secs(1), turns.take()).await;
        assert!(gave_up.is_err(), "no turn was free");
        assert_eq!(counts(&gauges), (0, 1));
        drop(held);
        assert_eq!(counts(&gauges), (0, 0));
    }
}
