//! The probes of one pod ([`PodProbes`]): from the pod spec (authority mode)
//! or the annotation (gate mode), defaulted and validated; and what changed
//! between two of them ([`ProbeChanges`]), for the log and the Event.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::prober::takeover::Takeover;
use crate::spec::probe_spec::budget::{OverBudget, PodBudget};
use crate::spec::probe_spec::{UnknownProbeField, container_probe, normalize_accepted};
use crate::spec::{Handler, ProbeKind, ProbeSpec, SpecError};
use crate::util::pod;

/// The probes of one pod, already defaulted and validated, by container
/// name and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodProbes {
    containers: HashMap<String, HashMap<ProbeKind, ProbeSpec>>,
    /// Which container instances count as predating the prober (D5, S4,
    /// S6; see [`predates_prober`]), shared with the pod's workers.
    takeover: Arc<Takeover>,
}

impl PodProbes {
    pub fn new() -> Self {
        PodProbes::default()
    }

    /// Sets `container`'s `kind` probe, replacing any previous one.
    pub fn insert(&mut self, container: impl Into<String>, kind: ProbeKind, spec: ProbeSpec) {
        self.containers
            .entry(container.into())
            .or_default()
            .insert(kind, spec);
    }

    /// `container`'s `kind` probe, if it has one.
    pub fn get(&self, container: &str, kind: ProbeKind) -> Option<&ProbeSpec> {
        self.containers.get(container)?.get(&kind)
    }

    /// The probes of `pod`'s own spec (authority mode): every probe of its
    /// regular and restartable init containers, defaulted and resolved as
    /// the kubelet takes them ([`normalize_accepted`]), and the errors of
    /// those podprobe cannot take (none, for a pod the API server admitted).
    /// A probe with a field podprobe does not implement, a value
    /// (`httpGet.protocol: HTTP2`) or one of `unknown` (V10), keeps its
    /// timing and gets a [`Handler::Unsupported`] that errors every run;
    /// it is also returned as an error, to be reported.
    ///
    /// The probes are charged to the pod's `budget` in the
    /// kubelet's order; one over it (#25) also errors every run, and is
    /// returned in the third list.
    pub fn from_spec(
        pod: &Pod,
        unknown: &[UnknownProbeField],
        budget: &mut PodBudget,
    ) -> (PodProbes, Vec<SpecError>, Vec<OverBudget>) {
        let mut probes = PodProbes::new();
        let mut errors = Vec::new();
        let mut over_budget = Vec::new();
        for container in probed_containers(pod) {
            for kind in ProbeKind::ALL {
                let Some(probe) = container_probe(container, kind) else {
                    continue;
                };
                let mut spec = match normalize_accepted(kind, probe, container) {
                    Ok(spec) => spec,
                    Err(error) => {
                        errors.push(error);
                        continue;
                    }
                };
                if let Some(field) = unknown
                    .iter()
                    .find(|u| u.container == container.name && u.kind == kind)
                {
                    spec.handler = Handler::unsupported(
                        field.field.clone(),
                        format!(
                            "unknown field: not in the Kubernetes {} API that podprobe implements",
                            crate::KUBE_PROBE_VERSION
                        ),
                    );
                }
                if let Handler::Unsupported(unsupported) = &spec.handler {
                    errors.push(unsupported.spec_error(&container.name, kind));
                } else if let Err(over) = budget.charge(&container.name, kind, &spec) {
                    spec.handler = Handler::unsupported(over.budget.field(kind), over.reason());
                    over_budget.push(over);
                }
                probes.insert(container.name.clone(), kind, spec);
            }
        }
        (probes, errors, over_budget)
    }

    pub fn is_empty(&self) -> bool {
        self.containers.values().all(HashMap::is_empty)
    }

    /// How many probes there are.
    pub fn len(&self) -> usize {
        self.containers.values().map(HashMap::len).sum()
    }

    /// These probes without their `kind` probes: what runs of a pod whose
    /// liveness is paused (P1).
    pub fn without(&self, kind: ProbeKind) -> PodProbes {
        let mut rest = self.clone();
        for probes in rest.containers.values_mut() {
            probes.remove(&kind);
        }
        rest
    }

    /// The containers with a `kind` probe, sorted by name.
    pub fn containers_with(&self, kind: ProbeKind) -> Vec<&str> {
        let mut names: Vec<&str> = (self.containers.iter())
            .filter(|(_, probes)| probes.contains_key(&kind))
            .map(|(name, _)| name.as_str())
            .collect();
        names.sort_unstable();
        names
    }

    /// Vouches for exactly the container instances (status `containerID`s)
    /// a previous podprobe reported ready: only they are treated as
    /// predating the prober, so a restart of the prober resets neither their
    /// `started` nor their `ready`, and resets every other instance (D5, S4,
    /// S6).
    pub fn vouch(&mut self, ids: impl IntoIterator<Item = String>) {
        self.takeover = Arc::new(Takeover::Vouched(ids.into_iter().collect()));
    }

    pub fn takeover(&self) -> &Arc<Takeover> {
        &self.takeover
    }

    /// What turns these probes into `new`, by (container, kind), each list
    /// sorted.
    pub fn changes_to(&self, new: &PodProbes) -> ProbeChanges {
        let mut changes = ProbeChanges::default();
        for (container, kind, spec) in self.entries() {
            match new.get(container, kind) {
                None => changes.removed.push((container.to_string(), kind)),
                Some(next) if next != spec => changes.changed.push((container.to_string(), kind)),
                Some(_) => {}
            }
        }
        for (container, kind, _) in new.entries() {
            if self.get(container, kind).is_none() {
                changes.added.push((container.to_string(), kind));
            }
        }
        for list in [
            &mut changes.added,
            &mut changes.changed,
            &mut changes.removed,
        ] {
            list.sort();
        }
        changes
    }

    /// Every probe: its container, kind and spec, by container then kind.
    pub fn entries(&self) -> impl Iterator<Item = (&str, ProbeKind, &ProbeSpec)> {
        self.containers.iter().flat_map(|(container, probes)| {
            probes
                .iter()
                .map(move |(kind, spec)| (container.as_str(), *kind, spec))
        })
    }
}

/// How a pod's probes changed (gate mode: an edited annotation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeChanges {
    pub added: Vec<(String, ProbeKind)>,
    pub changed: Vec<(String, ProbeKind)>,
    pub removed: Vec<(String, ProbeKind)>,
}

impl ProbeChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// Probes a [`ProbeChanges`] names per list; the rest are counted. A pod
/// may change hundreds of probes at once, and this text goes into a log
/// line and an Event note: 8 names of at most 253 bytes each, three lists,
/// keep it under 7 KiB (SECURITY.md promises 16 KiB per log line).
const MAX_NAMED_CHANGES: usize = 8;

/// `changed: Readiness probe of app; added: Liveness probe of app`, the
/// empty lists left out, each cut after [`MAX_NAMED_CHANGES`] probes
/// (`..., and 12 more`).
impl std::fmt::Display for ProbeChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lists = [
            ("changed", &self.changed),
            ("added", &self.added),
            ("removed", &self.removed),
        ];
        let mut first = true;
        for (what, list) in lists.into_iter().filter(|(_, list)| !list.is_empty()) {
            let mut probes: Vec<String> = list
                .iter()
                .take(MAX_NAMED_CHANGES)
                .map(|(container, kind)| format!("{kind} probe of {container}"))
                .collect();
            if list.len() > MAX_NAMED_CHANGES {
                probes.push(format!("and {} more", list.len() - MAX_NAMED_CHANGES));
            }
            let separator = if first { "" } else { "; " };
            write!(f, "{separator}{what}: {}", probes.join(", "))?;
            first = false;
        }
        Ok(())
    }
}

/// Containers that may have workers, in the kubelet's order (W1).
pub(super) fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec
        .iter()
        .flat_map(pod::probed_containers)
        .map(|c| c.container)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn changes_to_sorts_probes_into_added_changed_and_removed() {
        use ProbeKind::{Liveness, Readiness, Startup};
        let old = pod_probes(&[("a", Readiness), ("a", Liveness), ("b", Startup)]);
        let mut new = pod_probes(&[("a", Readiness), ("b", Readiness), ("a", Startup)]);
        new.insert("a", Liveness, probe_spec(1, 0, 1, 3));
        let changes = old.changes_to(&new);
        assert_eq!(
            changes,
            ProbeChanges {
                added: vec![("a".into(), Startup), ("b".into(), Readiness)],
                changed: vec![("a".into(), Liveness)],
                removed: vec![("b".into(), Startup)],
            }
        );
        assert_eq!(
            changes.to_string(),
            "changed: Liveness probe of a; added: Startup probe of a, Readiness probe of b; \
             removed: Startup probe of b"
        );
        assert!(old.changes_to(&old.clone()).is_empty());
        assert_eq!(
            old.changes_to(&PodProbes::new()).to_string(),
            "removed: Liveness probe of a, Readiness probe of a, Startup probe of b"
        );
    }

    #[test]
    fn changes_name_at_most_eight_probes_per_list() {
        let name = "c".repeat(253);
        let many = |n: usize| -> Vec<(String, ProbeKind)> {
            (0..n)
                .map(|i| (format!("{name}{i}"), ProbeKind::Readiness))
                .collect()
        };
        let changes = ProbeChanges {
            added: many(1000),
            changed: many(9),
            removed: many(8),
        };
        let text = changes.to_string();
        assert!(text.len() < 7 * 1024, "{} bytes", text.len());
        assert!(text.contains(", and 992 more; "), "{text}");
        assert!(text.contains(", and 1 more; "), "{text}");
        assert!(
            !text.ends_with("more"),
            "the last list has exactly 8: {text}"
        );
    }
}
