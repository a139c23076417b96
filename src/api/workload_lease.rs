//! A workload's [`GuardRecord`] in a `coordination.k8s.io/v1` Lease of the
//! workload's namespace (WG4), written with a compare-and-swap: an update
//! names the `resourceVersion` it read, a create fails if the Lease exists,
//! and the API server refuses either (409) when another podprobe wrote
//! first; the decision is then made again against what that one wrote.
//! So two nodes deciding at once never both take the last unit.
//!
//! Per decision: one read, one write when something is taken or given
//! back, and on a conflict a read and a write again, [`MAX_ATTEMPTS`] in
//! all. The record is one annotation, at most [`MAX_RECORD_BYTES`]; the
//! Lease is the tenant's to read and write too, so what it holds is parsed
//! as untrusted input: it can only change decisions for its own workload.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, PostParams};
use podprobe_core::prober::workload_guard::GuardRecord;

use super::apiclient::{RequestError, bounded};

/// The annotation of the Lease that holds the record.
pub const RECORD_ANNOTATION: &str = "podprobe.io/workload-guard";

/// The prefix of every Lease podprobe writes; the chart's admission policy
/// lets podprobe write no other Lease.
pub const LEASE_PREFIX: &str = "podprobe-guard-";

/// The largest record read: a unit per pod taking part, some 150 bytes
/// each, for workloads of a thousand failing pods; anything larger was not
/// written by podprobe.
pub const MAX_RECORD_BYTES: usize = 192 * 1024;

/// Attempts of one decision before it gives up (a conflict each time means
/// as many other podprobes decided for the same workload meanwhile).
pub const MAX_ATTEMPTS: usize = 5;

/// The Lease of the workload owned by the controller with UID `owner_uid`.
pub fn lease_name(owner_uid: &str) -> String {
    format!("{LEASE_PREFIX}{owner_uid}")
}

/// Why a decision could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("the Lease's {RECORD_ANNOTATION} annotation is not podprobe's record: {0}")]
    Malformed(String),
    #[error("{MAX_ATTEMPTS} attempts each lost to another podprobe's write")]
    Contended,
}

/// A record as read, with the version a write must name.
struct Read {
    record: GuardRecord,
    /// `None`: no Lease yet.
    version: Option<String>,
}

/// The Leases of one API server.
#[derive(Clone)]
pub struct WorkloadLeases {
    client: kube::Client,
}

impl WorkloadLeases {
    pub fn new(client: kube::Client) -> Self {
        WorkloadLeases { client }
    }

    /// Decides with `decide` against the record of Lease `namespace/name`
    /// until what it says to write lands (or it says to write nothing):
    /// `decide` returns its outcome and the record to write.
    pub async fn decide<T>(
        &self,
        namespace: &str,
        name: &str,
        mut decide: impl FnMut(&GuardRecord) -> (T, Option<GuardRecord>),
    ) -> Result<T, LeaseError> {
        let api = kube::Api::<Lease>::namespaced(self.client.clone(), namespace);
        for _ in 0..MAX_ATTEMPTS {
            let read = read(&api, name).await?;
            let (outcome, write) = decide(&read.record);
            let Some(record) = write else {
                return Ok(outcome);
            };
            if swap(&api, name, &record, read.version).await? {
                return Ok(outcome);
            }
        }
        Err(LeaseError::Contended)
    }
}

async fn read(api: &kube::Api<Lease>, name: &str) -> Result<Read, LeaseError> {
    let Some(lease) = bounded(api.get_opt(name)).await? else {
        return Ok(Read {
            record: GuardRecord::default(),
            version: None,
        });
    };
    let text = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RECORD_ANNOTATION));
    let record = match text {
        None => GuardRecord::default(),
        Some(text) if text.len() > MAX_RECORD_BYTES => {
            return Err(LeaseError::Malformed(format!(
                "{} bytes, more than {MAX_RECORD_BYTES}",
                text.len()
            )));
        }
        Some(text) => {
            serde_json::from_str(text).map_err(|e| LeaseError::Malformed(e.to_string()))?
        }
    };
    Ok(Read {
        record,
        version: lease.metadata.resource_version,
    })
}

/// Writes `record` if the Lease is still at `version` (absent when
/// `None`); `false` when another write came first.
async fn swap(
    api: &kube::Api<Lease>,
    name: &str,
    record: &GuardRecord,
    version: Option<String>,
) -> Result<bool, LeaseError> {
    let text = serde_json::to_string(record).map_err(|e| LeaseError::Malformed(e.to_string()))?;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some([(RECORD_ANNOTATION.to_string(), text)].into()),
            resource_version: version.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("podprobe".to_string()),
            ..LeaseSpec::default()
        }),
    };
    let params = PostParams::default();
    let written = match version {
        Some(_) => conflicted(bounded(api.replace(name, &params, &lease)).await)?,
        None => conflicted(bounded(api.create(&params, &lease)).await)?,
    };
    Ok(written)
}

/// `true` for a write that landed, `false` for one another write beat
/// (409: a changed `resourceVersion`, or a Lease created meanwhile).
fn conflicted<T>(result: Result<T, RequestError>) -> Result<bool, LeaseError> {
    match result {
        Ok(_) => Ok(true),
        Err(RequestError::Kube(kube::Error::Api(status))) if status.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
