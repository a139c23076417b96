//! Which `kube-probe/MAJOR.MINOR` podprobe's HTTP probes and hooks send.
//!
//! The kubelet sends its own release (`kube-probe/1.37` from a 1.37
//! kubelet). podprobe sends the release of the kubelet on its node, read
//! once at start from the Node's `status.nodeInfo.kubeletVersion`: in gate
//! mode the kubelet probes the same servers, and a server that answers by
//! User-Agent must see one client version, not two. `--kube-probe-version`
//! overrides it; a Node that cannot be read or a version that does not
//! parse falls back to [`podprobe_core::KUBE_PROBE_VERSION`], with a warning.

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use crate::api::apiclient::bounded;

/// `MAJOR.MINOR` of a kubelet version as the Node reports it (`v1.37.2`,
/// `v1.36.0-rc.1+abc`), or `None` if it is not one.
pub fn major_minor(kubelet_version: &str) -> Option<String> {
    let version = kubelet_version.strip_prefix('v')?;
    let mut parts = version.splitn(3, '.');
    let major = number(parts.next()?)?;
    let minor = number(parts.next()?.split(['-', '+']).next()?)?;
    Some(format!("{major}.{minor}"))
}

/// `part` if it is a version number: 1 to 9 decimal digits.
fn number(part: &str) -> Option<&str> {
    let digits = !part.is_empty() && part.len() <= 9 && part.bytes().all(|b| b.is_ascii_digit());
    digits.then_some(part)
}

/// The version to send on `node`: its kubelet's, or
/// [`podprobe_core::KUBE_PROBE_VERSION`] when the Node or its version cannot be read.
pub async fn of_node(client: Client, node: &str) -> String {
    let fallback = podprobe_core::KUBE_PROBE_VERSION;
    let read = bounded(Api::<Node>::all(client).get(node)).await;
    let reported = match &read {
        Ok(n) => n.status.as_ref().and_then(|s| s.node_info.as_ref()),
        Err(_) => None,
    }
    .map(|info| info.kubelet_version.as_str());
    match (read.as_ref().err(), reported.and_then(major_minor)) {
        (None, Some(version)) => {
            tracing::info!(
                node,
                kubelet_version = reported,
                "probes send User-Agent: kube-probe/{version}"
            );
            version
        }
        (Some(error), _) => {
            tracing::warn!(node, %error, "cannot read the Node's kubelet version; probes send User-Agent: kube-probe/{fallback}");
            fallback.to_string()
        }
        (None, None) => {
            tracing::warn!(
                node,
                kubelet_version = reported,
                "the Node reports no kubelet version of the form vMAJOR.MINOR.PATCH; probes send User-Agent: kube-probe/{fallback}"
            );
            fallback.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_minor_of_kubelet_versions() {
        for (given, want) in [
            ("v1.37.2", Some("1.37")),
            ("v1.35.8-podprobe-agent", Some("1.35")),
            ("v1.36.0-rc.1+0123abc", Some("1.36")),
            ("v1.38", Some("1.38")),
            ("v1.39-alpha.0", Some("1.39")),
            ("1.37.2", None),
            ("v1", None),
            ("v1.x.2", None),
            ("v1..2", None),
            ("", None),
            ("v1.99999999999999999999.0", None),
        ] {
            assert_eq!(major_minor(given).as_deref(), want, "{given:?}");
        }
    }
}
