//! WG5 carried out: the PodDisruptionBudgets that opt their pods into the
//! workload guards (`podprobe.io/guards`), kept from a watch of every
//! namespace's budgets, so that a liveness kill or a failing gate finds its
//! pod's budget in memory, without a read. Only opted-in budgets are kept,
//! each as its selector and settings ([`GuardingBudget`]); at most
//! [`MAX_PER_NAMESPACE`] of one namespace, and a selector at most
//! [`MAX_SELECTOR_BYTES`]: past the first the namespace's pods are told
//! why they take no budget; a budget past the second selects nothing, with
//! a log line.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use podprobe_core::spec::probe_spec::extension::disruption_budget::{GuardingBudget, pod_guards};
use podprobe_core::spec::probe_spec::extension::workload_options::WorkloadOptions;
use podprobe_core::util::backoff::RetryPolicy;
use podprobe_core::util::pod::pod_namespace;

use super::pods::WatchBackoff;

/// The most opted-in budgets one namespace may have: a pod's lookup scans
/// its namespace's, and a tenant's budgets must not fill the node's memory.
pub const MAX_PER_NAMESPACE: usize = 100;

/// The largest selector kept, as JSON: a budget's selector is the tenant's,
/// and matched against every lookup of its namespace.
pub const MAX_SELECTOR_BYTES: usize = 8 * 1024;

/// One namespace's opted-in budgets, by name.
type Namespace = BTreeMap<String, GuardingBudget>;

/// The opted-in budgets of every namespace; empty (every lookup `Ok(None)`)
/// until [`PdbGuards::watch`] runs, and for ever when it does not.
#[derive(Clone, Default)]
pub struct PdbGuards {
    namespaces: Arc<RwLock<HashMap<String, Namespace>>>,
}

impl PdbGuards {
    /// The settings `pod` takes from its namespace's opted-in budget, with
    /// the budget's name; `Err` says why it takes none.
    pub fn lookup(&self, pod: &Pod) -> Result<Option<(String, WorkloadOptions)>, String> {
        let namespaces = self
            .namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(budgets) = namespaces.get(pod_namespace(pod)) else {
            return Ok(None);
        };
        if budgets.len() > MAX_PER_NAMESPACE {
            return Err(format!(
                "the namespace has more than {MAX_PER_NAMESPACE} PodDisruptionBudgets with podprobe.io/guards"
            ));
        }
        pod_guards(pod, budgets.values()).map(|found| found.map(|(name, o)| (name.to_string(), o)))
    }

    /// Keeps the budgets current from a watch of `api` (every namespace's).
    /// Never ends: API errors are logged on the transition and retried with
    /// [`RetryPolicy::WATCH`]'s backoff.
    pub async fn watch(self, api: Api<PodDisruptionBudget>) {
        let mut relisted: Option<HashMap<String, Namespace>> = None;
        let mut failing = false;
        let mut events = std::pin::pin!(
            watcher::watcher(api, watcher::Config::default())
                .backoff(WatchBackoff::new(RetryPolicy::WATCH))
        );
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => relisted = Some(HashMap::new()),
                Ok(Event::InitApply(pdb)) => {
                    if let Some(namespaces) = relisted.as_mut() {
                        apply(namespaces, &pdb);
                    }
                }
                Ok(Event::InitDone) => {
                    if let Some(namespaces) = relisted.take() {
                        *self.write() = namespaces;
                    }
                    if failing {
                        tracing::info!("PodDisruptionBudget watch recovered");
                        failing = false;
                    }
                }
                Ok(Event::Apply(pdb)) => apply(&mut self.write(), &pdb),
                Ok(Event::Delete(pdb)) => remove(&mut self.write(), &pdb),
                Err(error) if !failing => {
                    tracing::warn!(%error, "PodDisruptionBudget watch failed; retrying with backoff");
                    failing = true;
                }
                Err(error) => tracing::debug!(%error, "PodDisruptionBudget watch still failing"),
            }
        }
    }

    /// Holds `pdbs` as a watch would have delivered them.
    #[cfg(test)]
    pub(crate) fn of(pdbs: &[PodDisruptionBudget]) -> Self {
        let guards = PdbGuards::default();
        for pdb in pdbs {
            apply(&mut guards.write(), pdb);
        }
        guards
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Namespace>> {
        self.namespaces
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps `pdb` when it opts in (as an error when its selector is too
/// large), forgets it when it no longer does.
fn apply(namespaces: &mut HashMap<String, Namespace>, pdb: &PodDisruptionBudget) {
    let Some(mut budget) = GuardingBudget::read(pdb) else {
        return remove(namespaces, pdb);
    };
    let bytes = serde_json::to_vec(&budget.selector).map_or(usize::MAX, |v| v.len());
    if bytes > MAX_SELECTOR_BYTES {
        tracing::warn!(
            namespace = pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pod_disruption_budget = budget.name,
            bytes,
            "PodDisruptionBudget with podprobe.io/guards ignored: its selector is over {MAX_SELECTOR_BYTES} bytes as JSON"
        );
        // Selects nothing.
        budget.selector = None;
    }
    let namespace = namespaces.entry(namespace_of(pdb)).or_default();
    // One past the bound is kept, so that lookups say the bound is passed.
    if namespace.len() <= MAX_PER_NAMESPACE || namespace.contains_key(&budget.name) {
        namespace.insert(budget.name.clone(), budget);
    }
}

fn remove(namespaces: &mut HashMap<String, Namespace>, pdb: &PodDisruptionBudget) {
    let namespace = namespace_of(pdb);
    if let Some(budgets) = namespaces.get_mut(&namespace) {
        budgets.remove(pdb.metadata.name.as_deref().unwrap_or_default());
        if budgets.is_empty() {
            namespaces.remove(&namespace);
        }
    }
}

fn namespace_of(pdb: &PodDisruptionBudget) -> String {
    pdb.metadata.namespace.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::testing::guarding_pdb;

    fn pdb(namespace: &str, name: &str, labels: usize) -> PodDisruptionBudget {
        let mut match_labels: BTreeMap<String, String> = (0..labels)
            .map(|i| (format!("k{i}"), "v".repeat(64)))
            .collect();
        match_labels.insert("app".into(), "web".into());
        let selector = LabelSelector {
            match_labels: Some(match_labels),
            ..LabelSelector::default()
        };
        let max = Some(IntOrString::Int(1));
        guarding_pdb(
            (namespace, name),
            Some("restartBudget"),
            max,
            None,
            selector,
        )
    }

    fn pod(namespace: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.labels = Some(
            (0..200)
                .map(|i| (format!("k{i}"), "v".repeat(64)))
                .chain([("app".to_string(), "web".to_string())])
                .collect(),
        );
        pod
    }

    #[test]
    fn wg5_a_pod_finds_its_namespaces_budget_and_a_removed_one_is_gone() {
        let kept = PdbGuards::of(&[pdb("a", "web", 0)]);
        let found = kept.lookup(&pod("a")).unwrap().unwrap();
        assert_eq!(found.0, "web");
        assert!(found.1.restart_budget.is_some());
        assert_eq!(kept.lookup(&pod("b")), Ok(None));
        let mut opted_out = pdb("a", "web", 0);
        opted_out.metadata.annotations = None;
        apply(&mut kept.write(), &opted_out);
        assert_eq!(kept.lookup(&pod("a")), Ok(None));
        assert!(kept.namespaces.read().unwrap().is_empty());
    }

    #[test]
    fn wg5_a_tenants_budgets_are_bounded_in_number_and_size() {
        let many: Vec<_> = (0..=MAX_PER_NAMESPACE + 5)
            .map(|i| pdb("crowded", &format!("b{i}"), 0))
            .collect();
        let crowded = PdbGuards::of(&many);
        assert_eq!(
            crowded.namespaces.read().unwrap()["crowded"].len(),
            MAX_PER_NAMESPACE + 1
        );
        let why = crowded.lookup(&pod("crowded")).unwrap_err();
        assert!(why.contains("more than 100"), "{why}");
        // The pod has every label it names, yet takes nothing from it.
        let large = PdbGuards::of(&[pdb("a", "large", 200)]);
        assert_eq!(large.lookup(&pod("a")), Ok(None));
        assert_eq!(
            PdbGuards::of(&[pdb("a", "small", 100)])
                .lookup(&pod("a"))
                .map(|f| f.is_some()),
            Ok(true)
        );
    }
}
