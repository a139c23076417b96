//! `podprobe.restartBudget` on a liveness probe and `podprobe.readinessFloor`
//! on a readiness probe (#41, WG1): what podprobe may do to the workload a
//! pod belongs to (its controller owner's pods) when every replica's probes
//! fail together. Validated here; the decisions they drive are
//! [`crate::prober::workload_guard`]'s.
//!
//! ```yaml
//! livenessProbe:
//!   podprobe:
//!     restartBudget: {maxUnavailable: "25%", maxDeferralSeconds: 300}
//! readinessProbe:
//!   podprobe:
//!     readinessFloor: {minReady: 1}
//! ```

use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::super::validation::FieldError;
use crate::spec::ProbeKind;

/// How long a restart waits for a unit of its budget when `maxDeferralSeconds`
/// is not set: five liveness periods of a minute, long enough for a shared
/// dependency's blip, short enough that a container truly stuck is
/// restarted within minutes.
pub const DEFAULT_MAX_DEFERRAL_SECONDS: i64 = 300;

/// The longest `maxDeferralSeconds`: a day, as a paused liveness probe's
/// (LP2); past it a container that never recovers would never be restarted.
pub const MAX_DEFERRAL_SECONDS: i64 = 86_400;

/// The largest count a budget or floor may name: the API server's own
/// bound on a workload is far above any workload one namespace runs, and
/// a count is only compared, never allocated.
const MAX_COUNT: i32 = 100_000;

/// `podprobe.restartBudget` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartBudgetFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_deferral_seconds: Option<i64>,
}

/// `podprobe.readinessFloor` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessFloorFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready: Option<IntOrString>,
}

/// A number of a workload's pods: a count, or a percentage of the
/// workload's pods rounded up, as a PodDisruptionBudget's
/// `maxUnavailable` and `minAvailable` are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodCount {
    Count(u32),
    Percent(u32),
    /// All of the workload's pods but a count: a PodDisruptionBudget's
    /// `minAvailable` read as a restart budget, its `maxUnavailable` as a
    /// floor (WG5).
    AllBut(u32),
    /// All but a percentage, rounded up.
    AllButPercent(u32),
}

impl PodCount {
    /// The number of `pods` this amounts to (a percentage rounded up, as
    /// the disruption controller's `GetScaledValueFromIntOrPercent` with
    /// `roundUp`).
    pub fn of(self, pods: usize) -> usize {
        match self {
            PodCount::Count(n) => n as usize,
            PodCount::Percent(p) => (pods * p as usize).div_ceil(100),
            PodCount::AllBut(n) => pods.saturating_sub(n as usize),
            PodCount::AllButPercent(p) => pods - PodCount::Percent(p).of(pods).min(pods),
        }
    }
}

impl std::fmt::Display for PodCount {
    /// As written: `2`, `25%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodCount::Count(n) => write!(f, "{n}"),
            PodCount::Percent(p) => write!(f, "{p}%"),
            PodCount::AllBut(n) => write!(f, "all but {n}"),
            PodCount::AllButPercent(p) => write!(f, "all but {p}%"),
        }
    }
}

/// A validated `restartBudget`: a liveness restart of a Ready pod takes a
/// unit of it (at most `max_unavailable` of the workload's pods unavailable
/// at once), and waits at most `max_deferral` for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartBudget {
    pub max_unavailable: PodCount,
    pub max_deferral_seconds: i64,
}

/// A validated `readinessFloor`: podprobe's gate is held True on pods whose
/// readiness probe fails while fewer than `min_ready` of the workload's
/// pods would be Ready without them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadinessFloor {
    pub min_ready: PodCount,
}

/// What a probe's `podprobe` key asks of its workload (WG1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadOptions {
    pub restart_budget: Option<RestartBudget>,
    pub readiness_floor: Option<ReadinessFloor>,
}

impl WorkloadOptions {
    /// What the settings do when the probe fails, in a sentence each, for
    /// `podprobe probe`.
    pub fn describe(&self) -> Vec<String> {
        let budget = self.restart_budget.map(|b| {
            format!(
                "restartBudget: a restart of this pod while it is Ready waits until fewer than {} of its workload's pods are unavailable, at most {} s",
                b.max_unavailable, b.max_deferral_seconds
            )
        });
        let floor = self.readiness_floor.map(|f| {
            format!(
                "readinessFloor: podprobe.io/ready stays True while fewer than {} of its workload's pods would be Ready without this one",
                f.min_ready
            )
        });
        budget.into_iter().chain(floor).collect()
    }
}

/// Validates the `restartBudget` and `readinessFloor` of the `kind` probe
/// whose `podprobe` key is at `root` (`livenessProbe.podprobe`): each only
/// on the probe it acts for.
pub(in crate::spec::probe_spec) fn workload_options(
    root: &str,
    kind: ProbeKind,
    restart_budget_fields: Option<&RestartBudgetFields>,
    readiness_floor_fields: Option<&ReadinessFloorFields>,
) -> Result<WorkloadOptions, FieldError> {
    let field = |name: &str| format!("{root}.{name}");
    let only_on = |name: &str, on: ProbeKind| {
        FieldError::forbidden(
            field(name),
            &format!("may only be set on a {}", on.field_name()),
        )
    };
    let restart_budget = match (restart_budget_fields, kind) {
        (None, _) => None,
        (Some(given), ProbeKind::Liveness) => Some(restart_budget(&field("restartBudget"), given)?),
        (Some(_), _) => return Err(only_on("restartBudget", ProbeKind::Liveness)),
    };
    let readiness_floor = match (readiness_floor_fields, kind) {
        (None, _) => None,
        (Some(given), ProbeKind::Readiness) => {
            Some(readiness_floor(&field("readinessFloor"), given)?)
        }
        (Some(_), _) => return Err(only_on("readinessFloor", ProbeKind::Readiness)),
    };
    Ok(WorkloadOptions {
        restart_budget,
        readiness_floor,
    })
}

/// Validates `restartBudget` (at `field`, `livenessProbe.podprobe.restartBudget`).
fn restart_budget(field: &str, given: &RestartBudgetFields) -> Result<RestartBudget, FieldError> {
    let max_unavailable = pod_count(
        &format!("{field}.maxUnavailable"),
        given.max_unavailable.as_ref(),
    )?;
    let max_deferral_seconds = match given.max_deferral_seconds {
        None => DEFAULT_MAX_DEFERRAL_SECONDS,
        Some(s) if (1..=MAX_DEFERRAL_SECONDS).contains(&s) => s,
        Some(s) => {
            return Err(FieldError::invalid_int(
                format!("{field}.maxDeferralSeconds"),
                s,
                &format!("must be between 1 and {MAX_DEFERRAL_SECONDS}"),
            ));
        }
    };
    Ok(RestartBudget {
        max_unavailable,
        max_deferral_seconds,
    })
}

/// Validates `readinessFloor` (at `field`, `readinessProbe.podprobe.readinessFloor`).
fn readiness_floor(
    field: &str,
    given: &ReadinessFloorFields,
) -> Result<ReadinessFloor, FieldError> {
    let min_ready = pod_count(&format!("{field}.minReady"), given.min_ready.as_ref())?;
    Ok(ReadinessFloor { min_ready })
}

/// A count from 1 or a percentage from 1 % to 100 %, required: 0 would be a
/// budget that defers every restart for its whole deferral, or a floor that
/// holds nothing.
fn pod_count(field: &str, given: Option<&IntOrString>) -> Result<PodCount, FieldError> {
    match given {
        None => Err(FieldError::required(
            field.to_string(),
            "a count (e.g. 1) or a percentage (e.g. \"25%\") of the workload's pods",
        )),
        Some(given) => share(field, given, 1),
    }
}

/// A count from `least` to [`MAX_COUNT`] or a percentage from `least` % to
/// 100 %, as a PodDisruptionBudget's `IntOrString` fields are written.
pub(super) fn share(field: &str, given: &IntOrString, least: u32) -> Result<PodCount, FieldError> {
    let range = least as i32..=MAX_COUNT;
    match given {
        IntOrString::Int(n) if range.contains(n) => Ok(PodCount::Count(*n as u32)),
        IntOrString::Int(n) => Err(FieldError::invalid_int(
            field.to_string(),
            *n,
            &format!("must be between {least} and {MAX_COUNT}"),
        )),
        IntOrString::String(s) => match s
            .strip_suffix('%')
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok())
        {
            Some(p) if (least..=100).contains(&p) => Ok(PodCount::Percent(p)),
            _ => Err(FieldError::invalid_string(
                field.to_string(),
                s,
                &format!("a percentage from \"{least}%\" to \"100%\", or a count"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(max: IntOrString, deferral: Option<i64>) -> Result<RestartBudget, String> {
        restart_budget(
            "livenessProbe.podprobe.restartBudget",
            &RestartBudgetFields {
                max_unavailable: Some(max),
                max_deferral_seconds: deferral,
            },
        )
        .map_err(|e| format!("{}: {}", e.field, e.message))
    }

    #[test]
    fn wg1_counts_and_percentages_of_the_workload() {
        let b = budget(IntOrString::String("25%".into()), None).unwrap();
        assert_eq!(b.max_unavailable, PodCount::Percent(25));
        assert_eq!(b.max_deferral_seconds, DEFAULT_MAX_DEFERRAL_SECONDS);
        // Rounded up, as a PodDisruptionBudget's percentages.
        assert_eq!(PodCount::Percent(25).of(6), 2);
        assert_eq!(PodCount::Percent(50).of(5), 3);
        assert_eq!(PodCount::Percent(1).of(1), 1);
        assert_eq!(PodCount::Percent(100).of(0), 0);
        assert_eq!(PodCount::Count(2).of(1), 2);
        let b = budget(IntOrString::Int(1), Some(60)).unwrap();
        assert_eq!(
            (b.max_unavailable, b.max_deferral_seconds),
            (PodCount::Count(1), 60)
        );
    }

    #[test]
    fn wg1_out_of_range_values_name_their_field() {
        for (max, deferral, field) in [
            (IntOrString::Int(0), None, "restartBudget.maxUnavailable"),
            (IntOrString::Int(-3), None, "restartBudget.maxUnavailable"),
            (
                IntOrString::Int(100_001),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::String("0%".into()),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::String("101%".into()),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::String("25".into()),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::String("%".into()),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::String("-5%".into()),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::String("99999999999%".into()),
                None,
                "restartBudget.maxUnavailable",
            ),
            (
                IntOrString::Int(1),
                Some(0),
                "restartBudget.maxDeferralSeconds",
            ),
            (
                IntOrString::Int(1),
                Some(86_401),
                "restartBudget.maxDeferralSeconds",
            ),
            (
                IntOrString::Int(1),
                Some(i64::MAX),
                "restartBudget.maxDeferralSeconds",
            ),
        ] {
            let error = budget(max.clone(), deferral).unwrap_err();
            assert!(error.contains(field), "{max:?}/{deferral:?}: {error}");
        }
        let missing = restart_budget("r", &RestartBudgetFields::default()).unwrap_err();
        assert_eq!(missing.field, "r.maxUnavailable");
        let floor = readiness_floor(
            "readinessProbe.podprobe.readinessFloor",
            &ReadinessFloorFields {
                min_ready: Some(IntOrString::String("150%".into())),
            },
        )
        .unwrap_err();
        assert_eq!(
            floor.field,
            "readinessProbe.podprobe.readinessFloor.minReady"
        );
    }
}
