//! Whether a `LabelSelector` selects a set of labels, as the API server's
//! `metav1.LabelSelectorAsSelector` reads it: every `matchLabels` pair and
//! every `matchExpressions` requirement must hold; an empty selector
//! selects everything. The disruption controller matches a
//! PodDisruptionBudget's selector to pods so (WG5).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Whether `selector` selects an object with `labels`.
pub fn selects(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value))
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|requirement| holds(requirement, labels))
}

/// One requirement; an operator the API server would refuse holds for
/// nothing, as `LabelSelectorAsSelector`'s error selects nothing.
fn holds(requirement: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&requirement.key);
    let among = |v: &String| requirement.values.iter().flatten().any(|w| w == v);
    match requirement.operator.as_str() {
        "In" => value.is_some_and(among),
        "NotIn" => !value.is_some_and(among),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn wg5_selectors_match_labels_as_the_api_server_does() {
        let pod = labels(&[("app", "web"), ("tier", "front")]);
        let by_labels = |pairs: &[(&str, &str)]| LabelSelector {
            match_labels: Some(labels(pairs)),
            ..LabelSelector::default()
        };
        assert!(selects(&LabelSelector::default(), Some(&pod)));
        assert!(selects(&LabelSelector::default(), None));
        assert!(selects(&by_labels(&[("app", "web")]), Some(&pod)));
        assert!(!selects(&by_labels(&[("app", "db")]), Some(&pod)));
        assert!(!selects(&by_labels(&[("app", "web")]), None));
        let by = |r: LabelSelectorRequirement| LabelSelector {
            match_expressions: Some(vec![r]),
            ..LabelSelector::default()
        };
        assert!(selects(
            &by(requirement("app", "In", &["db", "web"])),
            Some(&pod)
        ));
        assert!(!selects(&by(requirement("app", "In", &["db"])), Some(&pod)));
        assert!(!selects(&by(requirement("zone", "In", &["a"])), Some(&pod)));
        assert!(selects(
            &by(requirement("app", "NotIn", &["db"])),
            Some(&pod)
        ));
        assert!(selects(
            &by(requirement("zone", "NotIn", &["a"])),
            Some(&pod)
        ));
        assert!(!selects(
            &by(requirement("app", "NotIn", &["web"])),
            Some(&pod)
        ));
        assert!(selects(&by(requirement("tier", "Exists", &[])), Some(&pod)));
        assert!(!selects(
            &by(requirement("zone", "Exists", &[])),
            Some(&pod)
        ));
        assert!(selects(
            &by(requirement("zone", "DoesNotExist", &[])),
            Some(&pod)
        ));
        assert!(!selects(
            &by(requirement("app", "DoesNotExist", &[])),
            Some(&pod)
        ));
        assert!(!selects(&by(requirement("app", "Gt", &["1"])), Some(&pod)));
        // Labels and expressions together: all must hold.
        let both = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![requirement("tier", "In", &["back"])]),
        };
        assert!(!selects(&both, Some(&pod)));
    }
}
