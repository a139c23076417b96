//! `podprobe.markers` (#28, MK1): a probe's result written on its own pod
//! as a label or an annotation, e.g. `role=primary` for a Service to select.
//! Validated here as the API server validates label and annotation keys
//! and values; which keys a node may write is its operator's choice
//! (`--marker-keys`), checked where the markers are written.

use serde::{Deserialize, Serialize};

use super::super::validation::{FieldError, is_dns_subdomain};

/// Most markers per probe.
pub const MAX_MARKERS: usize = 4;

/// Longest annotation value a marker may write: markers say a state, not
/// a document.
pub const MAX_ANNOTATION_VALUE_BYTES: usize = 1024;

/// Longest label value, and name part of a key (`IsQualifiedName`).
const MAX_NAME_BYTES: usize = 63;

/// One entry of `podprobe.markers` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MarkerFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_success: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
}

/// Where a marker is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MarkerTarget {
    Label,
    Annotation,
}

impl MarkerTarget {
    /// The metadata field: `labels` or `annotations`.
    pub fn field(self) -> &'static str {
        match self {
            MarkerTarget::Label => "labels",
            MarkerTarget::Annotation => "annotations",
        }
    }
}

/// A validated marker: on each result of its probe, the key is set to
/// that result's value, or removed when the value is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub target: MarkerTarget,
    pub key: String,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

/// Validates `markers` (at `field`, `readinessProbe.podprobe.markers`).
pub(in crate::spec::probe_spec) fn markers(
    field: &str,
    given: &[MarkerFields],
) -> Result<Vec<Marker>, FieldError> {
    if given.len() > MAX_MARKERS {
        return Err(FieldError::too_many(
            field.to_string(),
            given.len(),
            MAX_MARKERS,
        ));
    }
    given
        .iter()
        .enumerate()
        .map(|(index, entry)| marker(&format!("{field}[{index}]"), entry))
        .collect()
}

fn marker(field: &str, entry: &MarkerFields) -> Result<Marker, FieldError> {
    let at = |name: &str| format!("{field}.{name}");
    let (target, key, key_field) = match (&entry.label, &entry.annotation) {
        (Some(key), None) => (MarkerTarget::Label, key, at("label")),
        (None, Some(key)) => (MarkerTarget::Annotation, key, at("annotation")),
        (Some(_), Some(_)) => {
            return Err(FieldError::forbidden(
                at("annotation"),
                "may not be set with `label`: a marker writes one key",
            ));
        }
        (None, None) => {
            return Err(FieldError::required(
                field.to_string(),
                "must set `label` or `annotation`",
            ));
        }
    };
    if let Some(detail) = qualified_name_error(key) {
        return Err(FieldError::invalid_string(key_field, key, detail));
    }
    if key.starts_with("podprobe.io/") {
        return Err(FieldError::invalid_string(
            key_field,
            key,
            "the podprobe.io/ prefix is podprobe's own",
        ));
    }
    if entry.on_success.is_none() && entry.on_failure.is_none() {
        return Err(FieldError::required(
            at("onSuccess"),
            "a marker sets `onSuccess`, `onFailure` or both",
        ));
    }
    for (name, value) in [
        ("onSuccess", &entry.on_success),
        ("onFailure", &entry.on_failure),
    ] {
        let Some(value) = value else { continue };
        match target {
            MarkerTarget::Label => {
                if let Some(detail) = label_value_error(value) {
                    return Err(FieldError::invalid_string(at(name), value, detail));
                }
            }
            MarkerTarget::Annotation if value.len() > MAX_ANNOTATION_VALUE_BYTES => {
                return Err(FieldError::too_long_bytes(
                    at(name),
                    MAX_ANNOTATION_VALUE_BYTES,
                ));
            }
            MarkerTarget::Annotation => {}
        }
    }
    Ok(Marker {
        target,
        key: key.clone(),
        on_success: entry.on_success.clone(),
        on_failure: entry.on_failure.clone(),
    })
}

/// `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name
/// of at most 63 characters, alphanumerics, `-`, `_` and `.`, starting and
/// ending with an alphanumeric.
fn qualified_name_error(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if prefix.is_some_and(|p| p.is_empty() || !is_dns_subdomain(p)) {
        return Some("prefix part must be a DNS subdomain (lower case alphanumerics, '-' and '.')");
    }
    if name.is_empty() || name.len() > MAX_NAME_BYTES || !is_name(name) {
        return Some(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63)",
        );
    }
    None
}

/// `IsValidLabelValue`: empty, or a name of at most 63 characters.
fn label_value_error(value: &str) -> Option<&'static str> {
    if value.is_empty() || (value.len() <= MAX_NAME_BYTES && is_name(value)) {
        None
    } else {
        Some(
            "a label value must be 63 characters or less, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        )
    }
}

fn is_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(value: serde_json::Value) -> Result<Vec<Marker>, String> {
        let given: Vec<MarkerFields> = serde_json::from_value(value).unwrap();
        markers("readinessProbe.podprobe.markers", &given)
            .map_err(|e| format!("{}: {}", e.field, e.message))
    }

    #[test]
    fn mk1_a_label_or_annotation_with_values_per_result() {
        let markers = built(serde_json::json!([
            {"label": "role", "onSuccess": "primary", "onFailure": "replica"},
            {"annotation": "controller.kubernetes.io/pod-deletion-cost", "onFailure": "-100"},
        ]))
        .unwrap();
        assert_eq!(
            markers[0],
            Marker {
                target: MarkerTarget::Label,
                key: "role".into(),
                on_success: Some("primary".into()),
                on_failure: Some("replica".into()),
            }
        );
        assert_eq!(markers[1].target, MarkerTarget::Annotation);
        assert_eq!(markers[1].on_success, None, "removed on success");
    }

    #[test]
    fn mk1_keys_and_values_are_validated_as_the_api_server_does() {
        let refused = |value| built(value).unwrap_err();
        let field = "readinessProbe.podprobe.markers[0]";
        assert_eq!(
            refused(serde_json::json!([{"onSuccess": "x"}])),
            format!("{field}: Required value: must set `label` or `annotation`")
        );
        assert!(
            refused(serde_json::json!([{"label": "a", "annotation": "b", "onSuccess": "x"}]))
                .starts_with(&format!("{field}.annotation: Forbidden"))
        );
        assert!(
            refused(serde_json::json!([{"label": "Bad_Prefix/role", "onSuccess": "x"}]))
                .contains("prefix part")
        );
        assert!(
            refused(serde_json::json!([{"label": "-role", "onSuccess": "x"}]))
                .contains("name part")
        );
        assert!(
            refused(serde_json::json!([{"label": "podprobe.io/ready", "onSuccess": "x"}]))
                .contains("podprobe's own")
        );
        assert!(
            refused(serde_json::json!([{"label": "role"}]))
                .starts_with(&format!("{field}.onSuccess: Required value"))
        );
        assert!(
            refused(serde_json::json!([{"label": "role", "onSuccess": "a b"}]))
                .starts_with(&format!("{field}.onSuccess: Invalid value: \"a b\""))
        );
        assert!(
            refused(serde_json::json!([{"label": "role", "onFailure": "x".repeat(64)}]))
                .contains("63 characters")
        );
        let long = "x".repeat(MAX_ANNOTATION_VALUE_BYTES + 1);
        assert!(
            refused(serde_json::json!([{"annotation": "note", "onFailure": long}]))
                .contains("Too long: may not be more than 1024 bytes")
        );
        let five =
            serde_json::Value::Array(vec![serde_json::json!({"label": "a", "onSuccess": "x"}); 5]);
        assert_eq!(
            refused(five),
            "readinessProbe.podprobe.markers: Too many: 5: must have at most 4 items"
        );
        // An empty label value is a value.
        assert!(built(serde_json::json!([{"label": "role", "onFailure": ""}])).is_ok());
    }
}
