//! WG4's compare-and-swap on a real API server (the local cluster, or
//! whichever `KUBECONFIG` names): deciders with a client each, as the
//! podprobes of as many nodes, race for the one unit of a workload's
//! restart budget at the same instant; exactly one takes it, every round,
//! and the Lease then holds exactly that unit.

mod support {
    pub mod cluster;
}

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use podprobe::api::workload_lease::{RECORD_ANNOTATION, WorkloadLeases, lease_name};
use podprobe_core::prober::workload_guard::{GuardRecord, Member, RestartDecision, restart};
use podprobe_core::spec::probe_spec::extension::workload_options::{PodCount, RestartBudget};
use support::cluster::{Namespace, cluster, unique_id};

/// As many podprobes as a large node pool has nodes in one workload's way.
const DECIDERS: usize = 12;

const ROUNDS: usize = 25;

fn client() -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&cluster().kubeconfig).expect("readable kubeconfig");
    let config = futures::executor::block_on(kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &Default::default(),
    ))
    .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wg4_deciders_racing_for_the_last_unit_exactly_one_wins_every_round() {
    let ns = Namespace::create(&format!("podprobe-lease-{}", unique_id()));
    let members: Arc<Vec<Member>> = Arc::new(
        (0..DECIDERS)
            .map(|i| Member {
                uid: format!("pod-{i}"),
                ready: true,
            })
            .collect(),
    );
    let budget = RestartBudget {
        max_unavailable: PodCount::Count(1),
        max_deferral_seconds: 300,
    };
    let leases: Vec<WorkloadLeases> = (0..DECIDERS)
        .map(|_| WorkloadLeases::new(client()))
        .collect();
    let now = 1_000_000;
    for round in 0..ROUNDS {
        let name = lease_name(&format!("round-{round}"));
        let start = Arc::new(tokio::sync::Barrier::new(DECIDERS));
        let deciders: Vec<_> = leases
            .iter()
            .enumerate()
            .map(|(i, leases)| {
                let (leases, members, start) = (leases.clone(), members.clone(), start.clone());
                let (namespace, name) = (ns.name.clone(), name.clone());
                tokio::spawn(async move {
                    let uid = format!("pod-{i}");
                    let node = format!("node-{i}");
                    start.wait().await;
                    leases
                        .decide(&namespace, &name, |record| {
                            match restart(record, &members, &uid, &node, &budget, now) {
                                RestartDecision::Take(record) => (Some(uid.clone()), Some(record)),
                                RestartDecision::Defer { .. } => (None, None),
                                other => panic!("{uid}: {other:?}"),
                            }
                        })
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for decider in deciders {
            match decider.await.expect("a decider") {
                Ok(Some(uid)) => winners.push(uid),
                Ok(None) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: {winners:?} took the one unit"
        );
        let lease: Lease = kube::Api::namespaced(client(), &ns.name)
            .get(&name)
            .await
            .expect("the Lease");
        let record: GuardRecord = serde_json::from_str(
            &lease.metadata.annotations.expect("annotations")[RECORD_ANNOTATION],
        )
        .expect("a record");
        let held: Vec<&String> = record.units.keys().collect();
        assert_eq!(
            held,
            [&winners[0]],
            "round {round}: the Lease holds {held:?}"
        );
    }
}
