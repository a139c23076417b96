//! One node's decisions for its workloads' guards (WG2, WG3), with the
//! node-wide bounds a tenant cannot lift: at most [`IN_FLIGHT`] decisions
//! at once, whatever number of budgeted containers fail on the node, each
//! given up after [`DECISION_TIMEOUT`] (the caller then does as the kubelet
//! would); and a workload's pods listed once per [`MEMBERS_TTL`] for all
//! of its containers on the node, not once per container.
//!
//! A decision reads the workload ([`members`]) and decides against its
//! Lease ([`WorkloadLeases::decide`], compare-and-swap), so that the units
//! the podprobes of all nodes take stay within the budget even when the
//! list is a second old.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use podprobe_core::prober::workload_guard::{GuardRecord, Member};
use podprobe_core::util::pod::pod_namespace;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::workload_lease::{LeaseError, WorkloadLeases, lease_name};
use super::workload_members::{MembersError, controller, members};

/// Decisions under way at once on the node; the others wait their turn
/// (within [`DECISION_TIMEOUT`]).
pub const IN_FLIGHT: usize = 4;

/// The longest one decision takes, its wait for a turn included.
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a workload's pods, as listed, serve the decisions of its other
/// containers on the node.
pub const MEMBERS_TTL: Duration = Duration::from_secs(1);

/// Why no decision was made.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error(transparent)]
    Members(#[from] MembersError),
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(
        "no decision within {} s (the API server is slow, or the node decides for many workloads at once)",
        DECISION_TIMEOUT.as_secs()
    )]
    TimedOut,
}

/// The node's decider; a cheap handle.
#[derive(Clone)]
pub struct GuardDecisions {
    client: kube::Client,
    leases: WorkloadLeases,
    slots: Arc<Semaphore>,
    /// Workloads listed within [`MEMBERS_TTL`], by owner UID.
    listed: Arc<Mutex<HashMap<String, Listed>>>,
}

/// A workload's pods, and when they were listed.
type Listed = (Instant, Arc<[Member]>);

impl GuardDecisions {
    pub fn new(client: kube::Client) -> Self {
        GuardDecisions {
            leases: WorkloadLeases::new(client.clone()),
            client,
            slots: Arc::new(Semaphore::new(IN_FLIGHT)),
            listed: Arc::default(),
        }
    }

    /// Decides with `decide` for `pod`'s workload: from its record and its
    /// pods, `decide` returns the outcome and the record to write.
    pub async fn decide<T>(
        &self,
        pod: &Pod,
        mut decide: impl FnMut(&GuardRecord, &[Member]) -> (T, Option<GuardRecord>),
    ) -> Result<T, DecisionError> {
        self.bounded(async {
            let owner = controller(pod).ok_or(MembersError::NoOwner)?;
            let members = self.members(pod, &owner.uid).await?;
            let lease = lease_name(&owner.uid);
            let namespace = pod_namespace(pod);
            let outcome = self
                .leases
                .decide(namespace, &lease, |record| decide(record, &members))
                .await?;
            Ok(outcome)
        })
        .await
    }

    /// Changes `pod`'s workload record with `change` (`None`: nothing to
    /// write), without reading the workload's pods.
    pub async fn amend(
        &self,
        pod: &Pod,
        change: impl Fn(&GuardRecord) -> Option<GuardRecord>,
    ) -> Result<(), DecisionError> {
        self.bounded(async {
            let owner = controller(pod).ok_or(MembersError::NoOwner)?;
            let lease = lease_name(&owner.uid);
            self.leases
                .decide(pod_namespace(pod), &lease, |record| ((), change(record)))
                .await?;
            Ok(())
        })
        .await
    }

    /// Runs `work` in a turn, within [`DECISION_TIMEOUT`].
    async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, DecisionError>>,
    ) -> Result<T, DecisionError> {
        let turn = async {
            // Never closed.
            let _slot = self.slots.acquire().await;
            work.await
        };
        tokio::time::timeout(DECISION_TIMEOUT, turn)
            .await
            .unwrap_or(Err(DecisionError::TimedOut))
    }

    /// `pod`'s workload (owned by `owner`), as listed within [`MEMBERS_TTL`].
    async fn members(&self, pod: &Pod, owner: &str) -> Result<Arc<[Member]>, MembersError> {
        let now = Instant::now();
        {
            let mut listed = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
            listed.retain(|_, (at, _)| now.duration_since(*at) < MEMBERS_TTL);
            if let Some((_, members)) = listed.get(owner) {
                return Ok(members.clone());
            }
        }
        let members: Arc<[Member]> = members(&self.client, pod).await?.into();
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(owner.to_string(), (Instant::now(), members.clone()));
        Ok(members)
    }
}

/// The wall clock in Unix seconds, the records' clock: they are read on
/// other nodes, whose monotonic clocks mean nothing here.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
