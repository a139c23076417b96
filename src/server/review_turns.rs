//! Turns to send a review to the API server, shared fairly between the
//! sources that ask for them (#37).
//!
//! A source is whoever a review is for before it is known who the caller
//! is: the address a `/metrics` request came from, or the user the API
//! server named for the status API. With one queue, first come first
//! served, a flood of forged tokens from one pod kept every turn and every
//! waiting place taken: a scraper whose token was not cached yet was
//! throttled, or waited out its review's time and was refused. Here a source
//! holds at most [`PLACES_PER_SOURCE`] places (reviews in flight or waiting)
//! and [`TURNS_PER_SOURCE`] turns, and a freed turn goes to the waiting
//! source that holds the fewest ([`FairSlots`]): a source with nothing in
//! flight is served at the next free turn, however many others flood.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use podprobe_core::util::fair_slots::{FairSlots, Slot};

/// Reviews sent to the API server at once; the review client's own rate
/// (`--review-qps`) then spaces them.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 8;

/// Reviews of one source sent at once.
pub const TURNS_PER_SOURCE: usize = 2;

/// Reviews of one source in flight or waiting for a turn: a burst of one
/// scraper (both metrics paths, a token each) is reviewed, not refused.
pub const PLACES_PER_SOURCE: usize = 4;

/// Reviews of all sources in flight or waiting: sixteen sources at their
/// share.
pub const MAX_REVIEW_PLACES: usize = 64;

/// The turns, and the places of those waiting for them.
#[derive(Debug)]
pub struct ReviewTurns {
    turns: Arc<FairSlots>,
    places: Mutex<Places>,
}

#[derive(Debug, Default)]
struct Places {
    total: usize,
    by_source: HashMap<String, usize>,
}

/// A place among those in flight or waiting, given back when dropped.
#[derive(Debug)]
pub struct Place<'a> {
    turns: &'a ReviewTurns,
    source: String,
}

/// Why a review was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTurn {
    /// The source holds its places already, or all sources all places.
    NoPlace,
    /// A place, but no turn within the wait.
    NotWithin,
}

impl Default for ReviewTurns {
    fn default() -> Self {
        ReviewTurns {
            turns: FairSlots::new(MAX_REVIEWS_IN_FLIGHT, TURNS_PER_SOURCE),
            places: Mutex::default(),
        }
    }
}

impl ReviewTurns {
    /// A place for `source`, at once or not at all.
    pub fn place(&self, source: &str) -> Result<Place<'_>, NoTurn> {
        let mut places = self.lock();
        let held = places.by_source.get(source).copied().unwrap_or(0);
        if held >= PLACES_PER_SOURCE || places.total >= MAX_REVIEW_PLACES {
            return Err(NoTurn::NoPlace);
        }
        places.total += 1;
        *places.by_source.entry(source.to_string()).or_default() += 1;
        Ok(Place {
            turns: self,
            source: source.to_string(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Places> {
        // The counts are consistent between statements.
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Place<'_> {
    /// A turn to send the review, waiting at most `within`.
    pub async fn turn(&self, within: Duration) -> Result<Slot, NoTurn> {
        self.turns
            .turns
            .acquire(&self.source, within)
            .await
            .map_err(|_| NoTurn::NotWithin)
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut places = self.turns.lock();
        places.total -= 1;
        if let Some(held) = places.by_source.get_mut(&self.source) {
            *held -= 1;
            if *held == 0 {
                places.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_source_holds_at_most_its_places_and_turns() {
        let turns = ReviewTurns::default();
        let places: Vec<_> = (0..PLACES_PER_SOURCE)
            .map(|_| turns.place("flood").unwrap())
            .collect();
        assert_eq!(turns.place("flood").unwrap_err(), NoTurn::NoPlace);
        let first = places[0].turn(WAIT).await.unwrap();
        let _second = places[1].turn(WAIT).await.unwrap();
        assert_eq!(
            places[2].turn(Duration::from_secs(1)).await.unwrap_err(),
            NoTurn::NotWithin
        );
        drop(first);
        places[2].turn(WAIT).await.unwrap();
        drop(places);
        assert!(turns.place("flood").is_ok(), "places are given back");
    }

    /// A source with nothing in flight gets the next free turn, ahead of
    /// the sources that hold turns already and queue more.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_source_is_served_at_the_next_free_turn() {
        let turns = Arc::new(ReviewTurns::default());
        let mut held = Vec::new();
        let mut floods = Vec::new();
        for source in 0..MAX_REVIEWS_IN_FLIGHT / TURNS_PER_SOURCE {
            for _ in 0..TURNS_PER_SOURCE {
                let place = turns.place(&format!("flood-{source}")).unwrap();
                held.push(place.turn(WAIT).await.unwrap());
            }
            // Each flooding source queues its other places too.
            for _ in TURNS_PER_SOURCE..PLACES_PER_SOURCE {
                let turns = turns.clone();
                let source = format!("flood-{source}");
                floods.push(tokio::spawn(async move {
                    let place = turns.place(&source).unwrap();
                    place.turn(WAIT).await.map(drop)
                }));
            }
        }
        tokio::task::yield_now().await;
        let scraper = turns.place("scraper").unwrap();
        let waiting = scraper.turn(WAIT);
        tokio::pin!(waiting);
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "every turn is taken"
        );
        held.pop();
        assert!(
            futures::poll!(waiting.as_mut()).is_ready(),
            "the freed turn went to the scraper, not to a flood's queue"
        );
        drop(held);
        for flood in floods {
            flood.await.unwrap().unwrap();
        }
    }

    #[test]
    fn all_places_are_bounded() {
        let turns = ReviewTurns::default();
        let places: Vec<_> = (0..MAX_REVIEW_PLACES)
            .map(|i| turns.place(&format!("source-{}", i / PLACES_PER_SOURCE)))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(turns.place("another").unwrap_err(), NoTurn::NoPlace);
        drop(places);
    }
}
