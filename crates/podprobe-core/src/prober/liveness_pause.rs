//! Paused liveness (LP1-LP5 of `docs/kubelet-semantics.md`, #28): the pod
//! annotation `podprobe.io/pause-liveness-until: <RFC 3339 time>` stops
//! podprobe's liveness probes of that pod, and so their kills, until then;
//! readiness and startup keep running. The kubelet has nothing like it.
//!
//! This module is the pure half: reading the annotation's value against the
//! node's bound ([`read`]) and one pod's pause as its annotation and the
//! clock move ([`LivenessPause`]). The daemon stops and restarts the
//! liveness workers and records the Events the changes stand for.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The annotation that pauses a pod's liveness probes.
pub const PAUSE_LIVENESS_ANNOTATION: &str = "podprobe.io/pause-liveness-until";

/// The longest pause a node accepts unless configured otherwise
/// (`--max-liveness-pause-seconds`): a day, long enough to debug or
/// upgrade, short enough that a forgotten annotation does not disable
/// liveness for good.
pub const DEFAULT_MAX_PAUSE: Duration = Duration::from_secs(24 * 60 * 60);

/// The most of a refused value an Event or log line quotes (LP4): an RFC 3339
/// time with nanoseconds and an offset is 35 bytes.
const QUOTED_VALUE_BYTES: usize = 64;

/// Why a pause annotation's value is refused (LP4); the pod's liveness
/// probes then run as if it were absent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PauseError {
    #[error(
        "{PAUSE_LIVENESS_ANNOTATION}: {value:?} is not an RFC 3339 time (e.g. 2026-11-28T09:00:00Z)"
    )]
    NotATime { value: String },
    #[error("{PAUSE_LIVENESS_ANNOTATION}: {until} is in the past")]
    InThePast { until: Timestamp },
    #[error(
        "{PAUSE_LIVENESS_ANNOTATION}: {until} is more than {max_seconds} s from now, the longest pause this node allows"
    )]
    TooFar { until: Timestamp, max_seconds: u64 },
    #[error("{PAUSE_LIVENESS_ANNOTATION}: pausing liveness probes is turned off on this node")]
    Disabled,
}

/// The pause `value` asks for, read at `now` on a node that allows pauses
/// of up to `max` (zero: none): its end, later than `now` and at most `max`
/// after it (LP2, LP4).
pub fn read(value: &str, now: Timestamp, max: Duration) -> Result<Timestamp, PauseError> {
    if max.is_zero() {
        return Err(PauseError::Disabled);
    }
    let until: Timestamp = value.trim().parse().map_err(|_| PauseError::NotATime {
        value: quoted(value),
    })?;
    if until <= now {
        return Err(PauseError::InThePast { until });
    }
    let max_signed = SignedDuration::try_from(max).unwrap_or(SignedDuration::MAX);
    if now.duration_until(until) > max_signed {
        return Err(PauseError::TooFar {
            until,
            max_seconds: max.as_secs(),
        });
    }
    Ok(until)
}

/// The pause annotation's value on `pod`, if it has one.
pub fn annotation(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(PAUSE_LIVENESS_ANNOTATION)
        .map(String::as_str)
}

/// What changed about a pod's pause, for its Events and its workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseChange {
    /// Liveness probes stop until then (a Normal `LivenessPaused`).
    Started(Timestamp),
    /// A running pause now ends at another time (a Normal `LivenessPaused`
    /// with the new end); the workers stay stopped.
    Moved(Timestamp),
    /// Liveness probes run again: the time came, or the annotation went or
    /// became invalid (a Normal `LivenessResumed`).
    Ended,
}

/// What one observation of a pod's annotation found (LP3, LP4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// A new value that is refused (a Warning `LivenessPauseInvalid`).
    pub refused: Option<PauseError>,
    pub change: Option<PauseChange>,
}

/// One pod's pause, as its annotation and the clock move (LP1-LP4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LivenessPause {
    /// The annotation's value as last observed; `None` before the first
    /// observation and while the pod has none.
    value: Option<String>,
    /// When the running pause ends; `None`: not paused.
    until: Option<Timestamp>,
    observed: bool,
}

impl LivenessPause {
    /// Whether the pod's liveness probes are paused.
    pub fn paused(&self) -> bool {
        self.until.is_some()
    }

    /// When the running pause ends.
    pub fn until(&self) -> Option<Timestamp> {
        self.until
    }

    /// Takes the pod's annotation `value` at `now` on a node allowing
    /// pauses of up to `max`.
    ///
    /// A new value is read once ([`read`]); a refused one is reported once,
    /// and ends a running pause (the annotation no longer asks for one).
    /// A value that is already in the past when this pause is first
    /// observed (podprobe started after the pause ended) is a pause that
    /// has run its course, not a mistake: it is ignored without a report.
    /// An unchanged value only ends the pause once its time has come.
    pub fn observe(&mut self, value: Option<&str>, now: Timestamp, max: Duration) -> Observed {
        let first = !std::mem::replace(&mut self.observed, true);
        if value == self.value.as_deref() && !first {
            return match self.until {
                Some(until) if until <= now => self.end(None),
                _ => Observed::default(),
            };
        }
        self.value = value.map(str::to_string);
        let Some(value) = value else {
            return self.end(None);
        };
        match read(value, now, max) {
            Ok(until) => {
                let change = match self.until.replace(until) {
                    None => PauseChange::Started(until),
                    Some(previous) if previous == until => return Observed::default(),
                    Some(_) => PauseChange::Moved(until),
                };
                Observed {
                    refused: None,
                    change: Some(change),
                }
            }
            Err(PauseError::InThePast { .. }) if first => Observed::default(),
            Err(error) => self.end(Some(error)),
        }
    }

    fn end(&mut self, refused: Option<PauseError>) -> Observed {
        let change = self.until.take().map(|_| PauseChange::Ended);
        Observed { refused, change }
    }
}

/// Cuts a refused value to what a report quotes, on a character boundary.
fn quoted(value: &str) -> String {
    let mut end = value.len().min(QUOTED_VALUE_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = DEFAULT_MAX_PAUSE;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    const NOW: &str = "2026-11-27T12:00:00Z";

    #[test]
    fn lp2_a_time_within_the_bound_is_the_pause_end() {
        let now = at(NOW);
        assert_eq!(
            read("2026-11-27T13:00:00Z", now, DAY),
            Ok(at("2026-11-27T13:00:00Z"))
        );
        // Offsets are RFC 3339's, and the bound is inclusive.
        assert_eq!(
            read("2026-11-28T13:00:00+01:00", now, DAY),
            Ok(at("2026-11-28T12:00:00Z"))
        );
    }

    #[test]
    fn lp4_refusals_say_what_is_wrong() {
        let now = at(NOW);
        assert_eq!(
            read("tomorrow", now, DAY),
            Err(PauseError::NotATime {
                value: "tomorrow".into()
            })
        );
        // RFC 3339 needs an offset: a local time is ambiguous.
        assert!(matches!(
            read("2026-11-27T13:00:00", now, DAY),
            Err(PauseError::NotATime { .. })
        ));
        assert_eq!(
            read(NOW, now, DAY),
            Err(PauseError::InThePast { until: now })
        );
        assert_eq!(
            read("2026-11-28T12:00:01Z", now, DAY),
            Err(PauseError::TooFar {
                until: at("2026-11-28T12:00:01Z"),
                max_seconds: 86_400
            })
        );
        assert_eq!(
            read("2026-11-27T13:00:00Z", now, Duration::ZERO),
            Err(PauseError::Disabled)
        );
        assert_eq!(
            PauseError::TooFar {
                until: at("2026-11-28T12:00:01Z"),
                max_seconds: 86_400
            }
            .to_string(),
            "podprobe.io/pause-liveness-until: 2026-11-28T12:00:01Z is more than 86400 s from now, \
             the longest pause this node allows"
        );
    }

    #[test]
    fn lp4_a_long_value_is_quoted_cut_on_a_character_boundary() {
        let value = format!("{}é{}", "x".repeat(63), "y".repeat(10_000));
        let Err(PauseError::NotATime { value: quoted }) = read(&value, at(NOW), DAY) else {
            panic!("not refused");
        };
        assert_eq!(quoted, "x".repeat(63));
        // Whatever the bound, the arithmetic does not overflow.
        assert!(read("9000-01-01T00:00:00Z", at(NOW), Duration::MAX).is_ok());
    }

    #[test]
    fn lp1_lp3_a_pause_starts_moves_and_ends_when_its_time_comes() {
        let mut pause = LivenessPause::default();
        let now = at(NOW);
        let seen = pause.observe(Some("2026-11-27T13:00:00Z"), now, DAY);
        assert_eq!(
            seen.change,
            Some(PauseChange::Started(at("2026-11-27T13:00:00Z")))
        );
        assert!(pause.paused());
        // The same value again: nothing, until its time comes.
        let later = at("2026-11-27T12:59:59Z");
        assert_eq!(
            pause.observe(Some("2026-11-27T13:00:00Z"), later, DAY),
            Observed::default()
        );
        let seen = pause.observe(Some("2026-11-27T14:00:00+00:00"), later, DAY);
        assert_eq!(
            seen.change,
            Some(PauseChange::Moved(at("2026-11-27T14:00:00Z")))
        );
        // The same time written differently moves nothing.
        let seen = pause.observe(Some("2026-11-27T15:00:00+01:00"), later, DAY);
        assert_eq!(seen, Observed::default());
        let end = at("2026-11-27T14:00:00Z");
        let seen = pause.observe(Some("2026-11-27T15:00:00+01:00"), end, DAY);
        assert_eq!(seen.change, Some(PauseChange::Ended));
        assert!(!pause.paused());
        // Ended once; the stale annotation then changes nothing.
        let seen = pause.observe(Some("2026-11-27T15:00:00+01:00"), end, DAY);
        assert_eq!(seen, Observed::default());
    }

    #[test]
    fn lp3_removing_the_annotation_ends_the_pause() {
        let mut pause = LivenessPause::default();
        pause.observe(Some("2026-11-27T13:00:00Z"), at(NOW), DAY);
        let seen = pause.observe(None, at(NOW), DAY);
        assert_eq!(seen.change, Some(PauseChange::Ended));
        assert_eq!(seen.refused, None);
    }

    #[test]
    fn lp4_a_refused_edit_is_reported_once_and_ends_a_running_pause() {
        let mut pause = LivenessPause::default();
        pause.observe(Some("2026-11-27T13:00:00Z"), at(NOW), DAY);
        let seen = pause.observe(Some("2026-11-27T11:00:00Z"), at(NOW), DAY);
        assert_eq!(
            seen,
            Observed {
                refused: Some(PauseError::InThePast {
                    until: at("2026-11-27T11:00:00Z")
                }),
                change: Some(PauseChange::Ended),
            }
        );
        let seen = pause.observe(Some("2026-11-27T11:00:00Z"), at(NOW), DAY);
        assert_eq!(seen, Observed::default());
    }

    #[test]
    fn lp4_a_past_time_is_refused_when_set_but_not_when_first_observed() {
        // podprobe (re)started after the pause ended: nothing to say.
        let mut pause = LivenessPause::default();
        let seen = pause.observe(Some("2026-11-27T11:00:00Z"), at(NOW), DAY);
        assert_eq!(seen, Observed::default());
        // A value set to the past while podprobe watches is a mistake.
        let mut pause = LivenessPause::default();
        pause.observe(None, at(NOW), DAY);
        let seen = pause.observe(Some("2026-11-27T11:00:00Z"), at(NOW), DAY);
        assert!(matches!(seen.refused, Some(PauseError::InThePast { .. })));
        assert_eq!(seen.change, None);
        // Other refusals are reported even when first observed.
        let mut pause = LivenessPause::default();
        let seen = pause.observe(Some("soon"), at(NOW), DAY);
        assert!(matches!(seen.refused, Some(PauseError::NotATime { .. })));
    }
}
