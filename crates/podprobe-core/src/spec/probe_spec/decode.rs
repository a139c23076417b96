//! The one strict parser of probe objects, shared by gate mode's
//! `podprobe.io/probes` annotation and `podprobe probe`: a core/v1 `Probe`
//! plus podprobe's extensions under the `podprobe` key.
//!
//! Fields are checked strictly (an unknown field is an error, as with
//! `kubectl --validate=strict`), at every level and under `podprobe` too,
//! because a misspelt field would otherwise be dropped without a word and
//! the probe run with a default the user never chose.

use k8s_openapi::api::core::v1::Probe;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::extension::ProbeExtensions;
use crate::spec::ProbeKind;

/// The key of a probe object that holds podprobe's extensions.
pub const EXTENSIONS_KEY: &str = "podprobe";

/// The longest field path an error repeats: a probe object may hold a key
/// of 256 KiB, and every error goes to a log line and an Event.
const MAX_QUOTED_PATH_BYTES: usize = 253;

/// A probe object as decoded: the core/v1 `Probe` and, when given, the
/// `podprobe` key beside it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeObject {
    pub probe: Probe,
    pub podprobe: Option<ProbeExtensions>,
}

/// A probe object that does not decode: the path of the field to fix from
/// the probe's own field (`readinessProbe.httpGet.sheme`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct DecodeError {
    pub field: String,
    pub message: String,
}

/// Decodes `value`, the `kind` probe, strictly: it must be a core/v1
/// `Probe` with no field the schema lacks, plus optionally a `podprobe` key
/// with no field [`ProbeExtensions`] lacks. A null field is an absent one,
/// as when Go decodes a nil pointer.
pub fn decode_probe_object(kind: ProbeKind, value: &Value) -> Result<ProbeObject, DecodeError> {
    let root = kind.field_name();
    let (core, podprobe) = match value {
        Value::Object(fields) if fields.contains_key(EXTENSIONS_KEY) => {
            let mut core = fields.clone();
            let podprobe = core.remove(EXTENSIONS_KEY).filter(|v| !v.is_null());
            (Value::Object(core), podprobe)
        }
        _ => (value.clone(), None),
    };
    let probe = decode_strict(root, &core)?;
    let podprobe = podprobe
        .map(|v| decode_strict(&format!("{root}.{EXTENSIONS_KEY}"), &v))
        .transpose()?;
    Ok(ProbeObject { probe, podprobe })
}

/// Decodes `value` as a `T`, rejecting fields `T` does not have; `root` is
/// the path of `value`, which errors start with.
pub(super) fn decode_strict<T: DeserializeOwned + Serialize>(
    root: &str,
    value: &Value,
) -> Result<T, DecodeError> {
    let invalid = |field: String, message: String| DecodeError { field, message };
    let decoded: T =
        serde_json::from_value(value.clone()).map_err(|e| invalid(root.into(), e.to_string()))?;
    // The schema's fields are exactly those that survive a round trip.
    let known = serde_json::to_value(&decoded).map_err(|e| invalid(root.into(), e.to_string()))?;
    if let Some(path) = unknown_field(value, &known) {
        return Err(invalid(
            format!("{root}{}", clipped(&path)),
            "unknown field".into(),
        ));
    }
    Ok(decoded)
}

/// `text`, cut to [`MAX_QUOTED_PATH_BYTES`] on a character boundary with
/// `...` appended when cut. Also used for the names that annotation errors
/// repeat.
pub fn clipped(text: &str) -> String {
    if text.len() <= MAX_QUOTED_PATH_BYTES {
        return text.to_string();
    }
    let end = text.floor_char_boundary(MAX_QUOTED_PATH_BYTES);
    format!("{}...", &text[..end])
}

/// The path (`.httpGet.prot`, `.httpHeaders[0].nmae`) of the first field of
/// `given` that is missing from `known`, the same document after a round trip
/// through the typed schema. Null fields are skipped: they decode to absent.
fn unknown_field(given: &Value, known: &Value) -> Option<String> {
    match (given, known) {
        (Value::Object(given), Value::Object(known)) => unknown_in_object(given, known),
        (Value::Array(given), Value::Array(known)) => given
            .iter()
            .zip(known)
            .enumerate()
            .find_map(|(i, (g, k))| unknown_field(g, k).map(|path| format!("[{i}]{path}"))),
        _ => None,
    }
}

fn unknown_in_object(given: &Map<String, Value>, known: &Map<String, Value>) -> Option<String> {
    given
        .iter()
        .filter(|(_, v)| !v.is_null())
        .find_map(|(key, value)| match known.get(key) {
            None => Some(format!(".{key}")),
            Some(known) => unknown_field(value, known).map(|path| format!(".{key}{path}")),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error(kind: ProbeKind, value: Value) -> String {
        match decode_probe_object(kind, &value) {
            Ok(object) => panic!("expected an error, got {object:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn null_fields_are_not_unknown() {
        let given = json!({"periodSeconds": null, "tcpSocket": {"port": 80, "host": null}});
        let known = json!({"tcpSocket": {"port": 80}});
        assert_eq!(unknown_field(&given, &known), None);
    }

    #[test]
    fn unknown_fields_are_named_at_every_level() {
        let readiness = ProbeKind::Readiness;
        for (value, field) in [
            (
                json!({"httpGet": {"path": "/", "port": 1, "sheme": "HTTPS"}, "timeoutSecond": 1}),
                "readinessProbe.httpGet.sheme",
            ),
            (
                json!({"tcpSocket": {"port": 1}, "timeoutSecond": 1}),
                "readinessProbe.timeoutSecond",
            ),
            (
                json!({"httpGet": {"port": 1, "httpHeaders": [{"name": "a", "value": "b"}, {"name": "c", "vlaue": "d", "value": ""}]}}),
                "readinessProbe.httpGet.httpHeaders[1].vlaue",
            ),
            (
                json!({"httpGet": {"port": 1}, "podprobe": {"tls": {"caBundel": "x"}}}),
                "readinessProbe.podprobe.tls.caBundel",
            ),
            (
                json!({"httpGet": {"port": 1}, "podprobe": {"expect": {"statusCode": ["200"]}}}),
                "readinessProbe.podprobe.expect.statusCode",
            ),
            (
                json!({"httpGet": {"port": 1}, "podprobe": {"periodMiliseconds": 100}}),
                "readinessProbe.podprobe.periodMiliseconds",
            ),
        ] {
            assert_eq!(
                error(readiness, value.clone()),
                format!("{field}: unknown field"),
                "{value}"
            );
        }
        assert_eq!(
            error(
                ProbeKind::Liveness,
                json!({"exec": {"command": []}, "podprobe": {"x": 1}})
            ),
            "livenessProbe.podprobe.x: unknown field"
        );
    }

    #[test]
    fn wrong_types_name_the_object_holding_them() {
        let message = error(
            ProbeKind::Readiness,
            json!({"httpGet": {"port": 1}, "podprobe": {"expect": {"statusCodes": [200]}}}),
        );
        assert!(
            message.starts_with("readinessProbe.podprobe: invalid type: integer `200`"),
            "{message}"
        );
        let message = error(ProbeKind::Startup, json!([]));
        assert!(
            message.starts_with("startupProbe: invalid type"),
            "{message}"
        );
    }

    #[test]
    fn the_podprobe_key_is_split_from_the_core_probe() {
        let object = decode_probe_object(
            ProbeKind::Readiness,
            &json!({"httpGet": {"port": 1}, "periodSeconds": 2,
                    "podprobe": {"method": "HEAD", "expect": {"statusCodes": ["204"]}}}),
        )
        .unwrap();
        assert_eq!(object.probe.period_seconds, Some(2));
        let podprobe = object.podprobe.expect("podprobe key");
        assert_eq!(podprobe.method.as_deref(), Some("HEAD"));
        assert_eq!(
            podprobe.expect.and_then(|e| e.status_codes),
            Some(vec!["204".to_string()])
        );
        let plain = decode_probe_object(
            ProbeKind::Readiness,
            &json!({"tcpSocket": {"port": 1}, "podprobe": null}),
        )
        .unwrap();
        assert_eq!(plain.podprobe, None);
    }

    #[test]
    fn long_unknown_keys_are_clipped() {
        let key = "k".repeat(1000);
        let message = error(
            ProbeKind::Readiness,
            json!({"tcpSocket": {"port": 1}, key: 1}),
        );
        assert!(message.ends_with("...: unknown field"), "{message}");
        assert!(message.len() < 300, "{}", message.len());
    }
}
