//! Markers (MK1-MK4 in docs/kubelet-semantics.md): a probe's cached
//! result written on its own pod as a label or annotation
//! (`podprobe.markers`), e.g. `role=primary` for a Service to select, or
//! `controller.kubernetes.io/pod-deletion-cost`. The kubelet has nothing
//! like it. Pure: which markers a pod's probes may write on this node,
//! what their results ask for, and the metadata patch that gets there.
//!
//! - Only keys the node's operator allows (`--marker-keys`, chart
//!   `markers.allowedKeys`) are written; the admission policy enforces the
//!   same list on podprobe's writes. A marker with another key, or a key a
//!   second probe of the pod also marks, is refused (MK2).
//! - A marker follows its probe's cached result, after thresholds, as
//!   readiness does: `Success` writes `onSuccess`, `Failure` `onFailure`
//!   (`None`: remove the key); no result yet writes nothing (MK3).
//! - A patch carries only the keys whose value differs from the pod's, and
//!   the pod's UID as a precondition (MK4).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

use crate::prober::manager::{PodProbes, ProbeStateView};
use crate::prober::results::CachedResult;
use crate::spec::ProbeKind;
use crate::spec::probe_spec::extension::marker_options::{Marker, MarkerTarget};
use crate::util::pod::all_container_statuses;

/// The keys this node writes (`--marker-keys`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkerKeys(BTreeSet<String>);

impl MarkerKeys {
    pub fn new(keys: impl IntoIterator<Item = String>) -> Self {
        MarkerKeys(keys.into_iter().collect())
    }

    pub fn allows(&self, key: &str) -> bool {
        self.0.contains(key)
    }

    /// The keys, comma-separated, for messages; `none` for none.
    pub fn listed(&self) -> String {
        if self.0.is_empty() {
            "none".to_string()
        } else {
            self.0.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    }
}

/// One marker of one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    container: String,
    kind: ProbeKind,
    marker: Marker,
}

/// The markers a pod's probes write on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMarkers(Vec<Entry>);

/// A marker that is not written, and why (MK2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerRefusal {
    pub container: String,
    pub kind: ProbeKind,
    pub message: String,
}

/// What a pod's markers ask for now: per key, the value, or `None` to
/// remove it.
pub type Desired = BTreeMap<(MarkerTarget, String), Option<String>>;

impl PodMarkers {
    /// The markers of `probes` that `allowed` lets this node write, and the
    /// refusals of the others (MK2), in container and kind order.
    pub fn of(probes: &PodProbes, allowed: &MarkerKeys) -> (PodMarkers, Vec<MarkerRefusal>) {
        let mut kept: Vec<Entry> = Vec::new();
        let mut refusals = Vec::new();
        // A fixed order: the first probe of a key keeps it.
        let mut entries: Vec<_> = probes.entries().collect();
        entries.sort_by_key(|(container, kind, _)| (*container, *kind));
        for (container, kind, spec) in entries {
            for marker in &spec.markers {
                let what = format!("{} {:?}", target_word(marker.target), marker.key);
                let refuse = if !allowed.allows(&marker.key) {
                    Some(format!(
                        "marker {what} is not written: this node writes only the keys its operator allows (--marker-keys, chart markers.allowedKeys: {})",
                        allowed.listed()
                    ))
                } else {
                    kept.iter().find(|e| e.marker.key == marker.key).map(|first| {
                        format!(
                            "marker {what} is not written: the {} probe of container {:?} marks it already",
                            first.kind.as_str().to_lowercase(),
                            first.container
                        )
                    })
                };
                match refuse {
                    Some(message) => refusals.push(MarkerRefusal {
                        container: container.to_string(),
                        kind,
                        message,
                    }),
                    None => kept.push(Entry {
                        container: container.to_string(),
                        kind,
                        marker: marker.clone(),
                    }),
                }
            }
        }
        (PodMarkers(kept), refusals)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// MK3: what each marker's probe result asks for, for `pod`'s current
    /// containers as `view` has their results; a probe without a result
    /// asks for nothing.
    pub fn desired(&self, pod: &Pod, view: &impl ProbeStateView) -> Desired {
        let mut desired = Desired::new();
        for entry in &self.0 {
            let id = all_container_statuses(pod)
                .find(|c| c.name == entry.container)
                .and_then(|c| c.container_id.as_deref())
                .filter(|id| !id.is_empty());
            let result = id.and_then(|id| view.cached(entry.kind, id));
            if let Some(value) = result.and_then(|r| value_on(&entry.marker, r)) {
                desired.insert((entry.marker.target, entry.marker.key.clone()), value);
            }
        }
        desired
    }
}

/// MK3: what `marker` writes on `result`: the value, `Some(None)` to
/// remove the key, `None` (for `Unknown`) nothing.
pub fn value_on(marker: &Marker, result: CachedResult) -> Option<Option<String>> {
    match result {
        CachedResult::Success => Some(marker.on_success.clone()),
        CachedResult::Failure => Some(marker.on_failure.clone()),
        CachedResult::Unknown => None,
    }
}

/// MK4: the strategic-merge patch of `pod`'s metadata that makes it carry
/// `desired`: the pod's UID as a precondition and only the keys whose value
/// differs (`null` removes one); `None` when it carries them already.
pub fn metadata_patch(pod: &Pod, desired: &Desired) -> Option<Value> {
    let uid = pod.metadata.uid.as_deref()?;
    let mut fields: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for ((target, key), want) in desired {
        let have = match target {
            MarkerTarget::Label => pod.metadata.labels.as_ref(),
            MarkerTarget::Annotation => pod.metadata.annotations.as_ref(),
        }
        .and_then(|map| map.get(key));
        if have == want.as_ref() {
            continue;
        }
        let value = want.clone().map_or(Value::Null, Value::String);
        fields
            .entry(target.field())
            .or_default()
            .insert(key.clone(), value);
    }
    if fields.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    metadata.insert("uid".to_string(), Value::String(uid.to_string()));
    for (field, values) in fields {
        metadata.insert(field.to_string(), Value::Object(values));
    }
    Some(serde_json::json!({ "metadata": metadata }))
}

fn target_word(target: MarkerTarget) -> &'static str {
    match target {
        MarkerTarget::Label => "label",
        MarkerTarget::Annotation => "annotation",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::testing::{container, epoch, pod, pod_status, probe_spec, running};

    fn marker(target: MarkerTarget, key: &str, ok: Option<&str>, bad: Option<&str>) -> Marker {
        Marker {
            target,
            key: key.into(),
            on_success: ok.map(str::to_string),
            on_failure: bad.map(str::to_string),
        }
    }

    fn probes(entries: &[(&str, ProbeKind, Vec<Marker>)]) -> PodProbes {
        let mut probes = PodProbes::new();
        for (container, kind, markers) in entries {
            let mut spec = probe_spec(10, 0, 1, 3);
            spec.markers = markers.clone();
            probes.insert(*container, *kind, spec);
        }
        probes
    }

    struct Results(HashMap<(ProbeKind, String), CachedResult>);

    impl ProbeStateView for Results {
        fn cached(&self, kind: ProbeKind, id: &str) -> Option<CachedResult> {
            self.0.get(&(kind, id.to_string())).copied()
        }
        fn has_worker(&self, _: &str, _: ProbeKind) -> bool {
            true
        }
    }

    fn role() -> Marker {
        marker(
            MarkerTarget::Label,
            "role",
            Some("primary"),
            Some("replica"),
        )
    }

    #[test]
    fn mk2_only_allowed_keys_and_one_probe_per_key() {
        let cost = marker(
            MarkerTarget::Annotation,
            "controller.kubernetes.io/pod-deletion-cost",
            Some("100"),
            None,
        );
        let probes = probes(&[
            ("app", ProbeKind::Readiness, vec![role(), cost]),
            ("db", ProbeKind::Readiness, vec![role()]),
        ]);
        let (kept, refusals) = PodMarkers::of(&probes, &MarkerKeys::new(["role".to_string()]));
        assert_eq!(kept.0.len(), 1);
        assert_eq!(kept.0[0].container, "app");
        let messages: Vec<_> = refusals.iter().map(|r| r.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "marker annotation \"controller.kubernetes.io/pod-deletion-cost\" is not written: this node writes only the keys its operator allows (--marker-keys, chart markers.allowedKeys: role)",
                "marker label \"role\" is not written: the readiness probe of container \"app\" marks it already",
            ]
        );
        let (none, refusals) = PodMarkers::of(&probes, &MarkerKeys::default());
        assert!(none.is_empty());
        assert!(refusals[0].message.ends_with("markers.allowedKeys: none)"));
    }

    #[test]
    fn mk3_mk4_the_result_picks_the_value_and_only_differences_are_patched() {
        let probes = probes(&[("app", ProbeKind::Readiness, vec![role()])]);
        let (markers, _) = PodMarkers::of(&probes, &MarkerKeys::new(["role".to_string()]));
        let mut pod = pod("u1", vec![container("app")], vec![]);
        pod.status = Some(pod_status(
            vec![running("app", "c://1", epoch(), Some(true))],
            vec![],
        ));
        let results = |r: Option<CachedResult>| {
            Results(
                r.map(|r| ((ProbeKind::Readiness, "c://1".to_string()), r))
                    .into_iter()
                    .collect(),
            )
        };
        // No result yet: nothing asked, nothing written.
        assert!(markers.desired(&pod, &results(None)).is_empty());
        let success = markers.desired(&pod, &results(Some(CachedResult::Success)));
        assert_eq!(
            metadata_patch(&pod, &success),
            Some(serde_json::json!({"metadata": {"uid": "u1", "labels": {"role": "primary"}}}))
        );
        pod.metadata.labels = Some([("role".to_string(), "primary".to_string())].into());
        assert_eq!(metadata_patch(&pod, &success), None, "already carried");
        let failure = markers.desired(&pod, &results(Some(CachedResult::Failure)));
        assert_eq!(
            metadata_patch(&pod, &failure),
            Some(serde_json::json!({"metadata": {"uid": "u1", "labels": {"role": "replica"}}}))
        );
        // A value of None removes the key.
        let removing = probes_with_removal();
        let (markers, _) = PodMarkers::of(&removing, &MarkerKeys::new(["role".to_string()]));
        let failure = markers.desired(&pod, &results(Some(CachedResult::Failure)));
        assert_eq!(
            metadata_patch(&pod, &failure),
            Some(serde_json::json!({"metadata": {"uid": "u1", "labels": {"role": null}}}))
        );
    }

    fn probes_with_removal() -> PodProbes {
        probes(&[(
            "app",
            ProbeKind::Readiness,
            vec![marker(MarkerTarget::Label, "role", Some("primary"), None)],
        )])
    }
}
