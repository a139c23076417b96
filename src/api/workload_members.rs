//! A pod's workload, read through the API (WG2): the pods its controller
//! owner selects and owns, each with its `Ready` condition. The owner is
//! read for its selector (a ReplicaSet, StatefulSet, DaemonSet, Job or
//! ReplicationController: `get` on those kinds), then the namespace's pods
//! are listed with it, from the API server's watch cache, at most
//! [`MAX_MEMBERS`].

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{ListParams, VersionMatch};
use podprobe_core::prober::workload_guard::Member;
use podprobe_core::util::pod::{is_pod_ready, pod_name, pod_namespace};

use super::apiclient::{RequestError, bounded};

/// The most pods a workload may have for podprobe to decide for it: a
/// list of them is read per decision, so its size is bounded; beyond it
/// the pod's restarts and gate are the kubelet's.
pub const MAX_MEMBERS: u32 = 2000;

/// Why a pod's workload cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    #[error(
        "the pod has no controller owner (metadata.ownerReferences), so no workload to share a budget with"
    )]
    NoOwner,
    #[error(
        "its owner is a {0}; podprobe reads the pods of ReplicaSets, StatefulSets, DaemonSets, Jobs and ReplicationControllers"
    )]
    UnsupportedOwner(String),
    #[error("its owner {kind} {name} has no selector")]
    NoSelector { kind: String, name: String },
    #[error("its workload has more than {MAX_MEMBERS} pods")]
    TooMany,
    #[error(transparent)]
    Request(#[from] RequestError),
}

/// The pod's controller owner reference.
pub fn controller(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Reads the workload of `pod`: its controller owner's pods.
pub async fn members(client: &kube::Client, pod: &Pod) -> Result<Vec<Member>, MembersError> {
    let owner = controller(pod).ok_or(MembersError::NoOwner)?;
    let namespace = pod_namespace(pod);
    let selector = selector(client, namespace, owner).await?;
    let params = ListParams {
        label_selector: Some(selector),
        resource_version: Some("0".to_string()),
        version_match: Some(VersionMatch::NotOlderThan),
        limit: Some(MAX_MEMBERS + 1),
        ..ListParams::default()
    };
    let pods =
        bounded(kube::Api::<Pod>::namespaced(client.clone(), namespace).list(&params)).await?;
    let owned: Vec<Member> = pods
        .items
        .iter()
        .filter(|p| controller(p).is_some_and(|o| o.uid == owner.uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| Member {
            uid: p.metadata.uid.clone().unwrap_or_default(),
            ready: is_pod_ready(p),
        })
        .collect();
    if owned.len() > MAX_MEMBERS as usize {
        return Err(MembersError::TooMany);
    }
    tracing::trace!(
        pod = pod_name(pod),
        namespace,
        members = owned.len(),
        "workload read"
    );
    Ok(owned)
}

/// The label selector of `owner`, as a query string.
async fn selector(
    client: &kube::Client,
    namespace: &str,
    owner: &OwnerReference,
) -> Result<String, MembersError> {
    let name = owner.name.as_str();
    let selector = match (owner.api_version.as_str(), owner.kind.as_str()) {
        ("apps/v1", "ReplicaSet") => Some(
            get::<ReplicaSet>(client, namespace, name)
                .await?
                .spec
                .selector,
        ),
        ("apps/v1", "StatefulSet") => Some(
            get::<StatefulSet>(client, namespace, name)
                .await?
                .spec
                .selector,
        ),
        ("apps/v1", "DaemonSet") => Some(
            get::<DaemonSet>(client, namespace, name)
                .await?
                .spec
                .selector,
        ),
        ("batch/v1", "Job") => get::<Job>(client, namespace, name)
            .await?
            .spec
            .and_then(|s| s.selector),
        ("v1", "ReplicationController") => get::<ReplicationController>(client, namespace, name)
            .await?
            .spec
            .and_then(|s| s.selector)
            .map(|labels| LabelSelector {
                match_labels: Some(labels),
                ..LabelSelector::default()
            }),
        (api_version, kind) => {
            return Err(MembersError::UnsupportedOwner(format!(
                "{kind} ({api_version})"
            )));
        }
    };
    let no_selector = || MembersError::NoSelector {
        kind: owner.kind.clone(),
        name: name.to_string(),
    };
    let selector = selector.ok_or_else(no_selector)?;
    let query = selector_query(&selector);
    if query.is_empty() {
        return Err(no_selector());
    }
    Ok(query)
}

async fn get<K>(client: &kube::Client, namespace: &str, name: &str) -> Result<K, RequestError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    bounded(kube::Api::<K>::namespaced(client.clone(), namespace).get(name)).await
}

/// `selector` as the `labelSelector` query (`a=b,c in (d,e),!f`).
fn selector_query(selector: &LabelSelector) -> String {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.as_deref().unwrap_or_default().join(",");
        let key = &requirement.key;
        terms.push(match requirement.operator.as_str() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.clone(),
            _ => format!("!{key}"),
        });
    }
    terms.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn wg2_selectors_read_as_the_api_server_parses_them() {
        let selector = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "zone".into(),
                    operator: "Exists".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["dev".into()]),
                },
            ]),
        };
        assert_eq!(
            selector_query(&selector),
            "app=web,tier in (a,b),!canary,zone,env notin (dev)"
        );
        assert_eq!(selector_query(&LabelSelector::default()), "");
    }
}
