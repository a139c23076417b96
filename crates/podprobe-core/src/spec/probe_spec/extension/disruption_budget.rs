//! WG5: a PodDisruptionBudget opts the pods it selects into the workload
//! guards, with the annotation `podprobe.io/guards: restartBudget,
//! readinessFloor` (either or both). Its numbers become the settings a
//! probe's own `podprobe` key would give (WG1):
//!
//! | guard | from `maxUnavailable: m` | from `minAvailable: n` |
//! |---|---|---|
//! | `restartBudget` | `maxUnavailable: m` | all of the workload's pods but `n` |
//! | `readinessFloor` | all of the workload's pods but `m` | `minReady: n` |
//!
//! A budget waits the default `maxDeferralSeconds`. A probe's own setting
//! wins over its pod's PDB's; a pod two opted-in PDBs select takes
//! neither (the API's eviction refuses such a pod too).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::super::validation::FieldError;
use super::workload_options::{
    DEFAULT_MAX_DEFERRAL_SECONDS, PodCount, ReadinessFloor, RestartBudget, WorkloadOptions, share,
};
use crate::util::label_selector::selects;

/// The annotation by which a PodDisruptionBudget opts in.
pub const GUARDS_ANNOTATION: &str = "podprobe.io/guards";

/// The guards the annotation may name.
const GUARDS: [&str; 2] = ["readinessFloor", "restartBudget"];

/// The longest annotation value read: both guards with room for spaces. A
/// longer one is refused unread, so that a refusal never keeps a tenant's
/// value (up to the API server's 256 KiB) in the message podprobe holds.
const MAX_GUARDS_BYTES: usize = 64;

/// An opted-in PodDisruptionBudget, as podprobe keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardingBudget {
    pub name: String,
    /// `None` selects no pod (policy/v1).
    pub selector: Option<LabelSelector>,
    /// What it asks, or what is wrong with it (`field: message`).
    pub options: Result<WorkloadOptions, String>,
}

impl GuardingBudget {
    /// `pdb` as an opted-in budget; `None` when it does not opt in.
    pub fn read(pdb: &PodDisruptionBudget) -> Option<GuardingBudget> {
        let guards = pdb.metadata.annotations.as_ref()?.get(GUARDS_ANNOTATION)?;
        let spec = pdb.spec.clone().unwrap_or_default();
        let options = options(
            guards,
            spec.max_unavailable.as_ref(),
            spec.min_available.as_ref(),
        )
        .map_err(|e| format!("{}: {}", e.field, e.message));
        Some(GuardingBudget {
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector: spec.selector,
            options,
        })
    }

    /// Whether it selects `pod` (of its namespace).
    pub fn selects(&self, pod: &Pod) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| selects(s, pod.metadata.labels.as_ref()))
    }
}

/// The settings `pod` takes from `budgets`, the opted-in PodDisruptionBudgets
/// of its namespace: `Ok(None)` when none selects it; the budget's name
/// with them when one does; why it takes none when that one is invalid or
/// more than one selects it.
pub fn pod_guards<'a>(
    pod: &Pod,
    budgets: impl IntoIterator<Item = &'a GuardingBudget>,
) -> Result<Option<(&'a str, WorkloadOptions)>, String> {
    let mut selecting = budgets.into_iter().filter(|b| b.selects(pod));
    let Some(first) = selecting.next() else {
        return Ok(None);
    };
    if let Some(second) = selecting.next() {
        return Err(format!(
            "PodDisruptionBudgets {} and {} both select the pod and set {GUARDS_ANNOTATION}; podprobe applies neither",
            first.name, second.name
        ));
    }
    match &first.options {
        Ok(options) => Ok(Some((&first.name, *options))),
        Err(why) => Err(format!("PodDisruptionBudget {}: {why}", first.name)),
    }
}

/// The settings the annotation's `guards` ask for with the PDB's numbers.
fn options(
    guards: &str,
    max_unavailable: Option<&IntOrString>,
    min_available: Option<&IntOrString>,
) -> Result<WorkloadOptions, FieldError> {
    let field = format!("metadata.annotations[{GUARDS_ANNOTATION}]");
    if guards.len() > MAX_GUARDS_BYTES {
        return Err(FieldError::too_long_bytes(field, MAX_GUARDS_BYTES));
    }
    let mut named = Vec::new();
    for guard in guards.split(',').map(str::trim) {
        if !GUARDS.contains(&guard) {
            return Err(FieldError::invalid_string(
                field,
                guard,
                "supported values: \"readinessFloor\", \"restartBudget\" (comma-separated)",
            ));
        }
        named.push(guard);
    }
    // The API server lets a PDB set exactly one of the two. The guard it
    // reads directly takes at least 1 (a budget of 0 would defer every
    // restart for its whole deferral, a floor of 0 hold nothing); the other
    // is the remainder of the workload's pods, from 0.
    let (field, given, from_max) = match (max_unavailable, min_available) {
        (Some(m), _) => ("spec.maxUnavailable", m, true),
        (None, Some(n)) => ("spec.minAvailable", n, false),
        (None, None) => {
            return Err(FieldError::required(
                "spec".to_string(),
                "minAvailable or maxUnavailable, the numbers podprobe's guards take",
            ));
        }
    };
    let count = |direct: bool| {
        if direct {
            return share(field, given, 1);
        }
        share(field, given, 0).map(|count| match count {
            PodCount::Percent(p) | PodCount::AllButPercent(p) => PodCount::AllButPercent(p),
            PodCount::Count(n) | PodCount::AllBut(n) => PodCount::AllBut(n),
        })
    };
    let restart_budget = named
        .contains(&"restartBudget")
        .then(|| {
            count(from_max).map(|max_unavailable| RestartBudget {
                max_unavailable,
                max_deferral_seconds: DEFAULT_MAX_DEFERRAL_SECONDS,
            })
        })
        .transpose()?;
    let readiness_floor = named
        .contains(&"readinessFloor")
        .then(|| count(!from_max).map(|min_ready| ReadinessFloor { min_ready }))
        .transpose()?;
    Ok(WorkloadOptions {
        restart_budget,
        readiness_floor,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::testing::guarding_pdb;

    fn pdb(
        name: &str,
        guards: Option<&str>,
        max: Option<IntOrString>,
        min: Option<IntOrString>,
    ) -> PodDisruptionBudget {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            ..LabelSelector::default()
        };
        guarding_pdb(("", name), guards, max, min, selector)
    }

    fn read(guards: &str, max: Option<IntOrString>, min: Option<IntOrString>) -> WorkloadOptions {
        GuardingBudget::read(&pdb("b", Some(guards), max, min))
            .unwrap()
            .options
            .unwrap()
    }

    fn refused(guards: &str, max: Option<IntOrString>, min: Option<IntOrString>) -> String {
        GuardingBudget::read(&pdb("b", Some(guards), max, min))
            .unwrap()
            .options
            .unwrap_err()
    }

    fn pod(app: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.labels = Some(BTreeMap::from([("app".into(), app.into())]));
        pod
    }

    #[test]
    fn wg5_a_budget_opts_in_with_its_own_numbers_and_their_remainders() {
        let both = "restartBudget, readinessFloor";
        let from_max = read(both, Some(IntOrString::Int(1)), None);
        assert_eq!(
            from_max.restart_budget,
            Some(RestartBudget {
                max_unavailable: PodCount::Count(1),
                max_deferral_seconds: DEFAULT_MAX_DEFERRAL_SECONDS
            })
        );
        assert_eq!(
            from_max.readiness_floor.map(|f| f.min_ready),
            Some(PodCount::AllBut(1))
        );
        let from_min = read(both, None, Some(IntOrString::String("50%".into())));
        assert_eq!(
            from_min.restart_budget.map(|b| b.max_unavailable),
            Some(PodCount::AllButPercent(50))
        );
        assert_eq!(
            from_min.readiness_floor.map(|f| f.min_ready),
            Some(PodCount::Percent(50))
        );
        // The remainders of 5 pods: minAvailable 50 % is 3 (rounded up),
        // so 2 may restart; maxUnavailable 1 leaves a floor of 4.
        assert_eq!(PodCount::AllButPercent(50).of(5), 2);
        assert_eq!(PodCount::AllBut(1).of(5), 4);
        assert_eq!(PodCount::AllBut(7).of(5), 0);
        assert_eq!(PodCount::AllBut(2).to_string(), "all but 2");
        // One guard alone.
        let floor_only = read("readinessFloor", None, Some(IntOrString::Int(2)));
        assert_eq!(floor_only.restart_budget, None);
        assert_eq!(
            floor_only.readiness_floor.map(|f| f.min_ready),
            Some(PodCount::Count(2))
        );
        // A remainder may start from 0: minAvailable 0 lets every pod
        // restart, maxUnavailable 0 holds every pod's gate.
        let zero = read("readinessFloor", Some(IntOrString::Int(0)), None);
        assert_eq!(zero.readiness_floor.map(|f| f.min_ready.of(3)), Some(3));
        // Without the annotation a PDB is not podprobe's.
        assert_eq!(
            GuardingBudget::read(&pdb("b", None, Some(IntOrString::Int(1)), None)),
            None
        );
    }

    #[test]
    fn wg5_a_budget_podprobe_cannot_apply_names_its_field() {
        assert_eq!(
            refused("restartBudget,floor", Some(IntOrString::Int(1)), None),
            "metadata.annotations[podprobe.io/guards]: Invalid value: \"floor\": supported values: \"readinessFloor\", \"restartBudget\" (comma-separated)"
        );
        assert_eq!(
            refused("", Some(IntOrString::Int(1)), None),
            "metadata.annotations[podprobe.io/guards]: Invalid value: \"\": supported values: \"readinessFloor\", \"restartBudget\" (comma-separated)"
        );
        let long = "restartBudget,".repeat(20_000);
        let why = refused(&long, Some(IntOrString::Int(1)), None);
        assert!(
            why.starts_with("metadata.annotations[podprobe.io/guards]: Too long")
                && why.len() < 200,
            "{why}"
        );
        assert_eq!(
            refused("restartBudget", Some(IntOrString::Int(0)), None),
            "spec.maxUnavailable: Invalid value: 0: must be between 1 and 100000"
        );
        assert_eq!(
            refused(
                "readinessFloor",
                None,
                Some(IntOrString::String("0%".into()))
            ),
            "spec.minAvailable: Invalid value: \"0%\": a percentage from \"1%\" to \"100%\", or a count"
        );
        assert_eq!(
            refused("restartBudget", None, Some(IntOrString::String("x".into()))),
            "spec.minAvailable: Invalid value: \"x\": a percentage from \"0%\" to \"100%\", or a count"
        );
        assert_eq!(
            refused("restartBudget", None, None),
            "spec: Required value: minAvailable or maxUnavailable, the numbers podprobe's guards take"
        );
    }

    #[test]
    fn wg5_a_pod_takes_the_one_budget_that_selects_it() {
        let one = GuardingBudget::read(&pdb(
            "one",
            Some("restartBudget"),
            Some(IntOrString::Int(1)),
            None,
        ))
        .unwrap();
        let two = GuardingBudget {
            name: "two".into(),
            ..one.clone()
        };
        let bad = GuardingBudget {
            name: "bad".into(),
            options: Err("spec: Required value".into()),
            ..one.clone()
        };
        let nothing = GuardingBudget {
            name: "nothing".into(),
            selector: None,
            ..one.clone()
        };
        assert_eq!(pod_guards(&pod("db"), [&one]), Ok(None));
        assert_eq!(
            pod_guards(&pod("web"), [&one, &nothing]).map(|g| g.map(|(name, _)| name)),
            Ok(Some("one"))
        );
        assert_eq!(
            pod_guards(&pod("web"), [&one, &two]),
            Err("PodDisruptionBudgets one and two both select the pod and set podprobe.io/guards; podprobe applies neither".into())
        );
        assert_eq!(
            pod_guards(&pod("web"), [&bad]),
            Err("PodDisruptionBudget bad: spec: Required value".into())
        );
    }
}
