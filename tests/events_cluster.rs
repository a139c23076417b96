//! Events recorded through the real API server of the local cluster
//! (`hack/local-cluster.sh`) and read back, as `kubectl describe pod` sees
//! them (`core/v1`) and as written (`events.k8s.io/v1`).

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Namespace, cluster, unique_id};
use k8s_openapi::api::core::v1::{Container, Event as CoreEvent, Pod, PodSpec};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use podprobe::api::event_broadcaster::{self, PodEvent};
use podprobe::daemon::metric_set::MetricSet;
use podprobe_core::prober::worker::WorkerConfig;
use podprobe_core::spec::probe_spec::{Handler, TcpSocketAction};
use podprobe_core::spec::{Outcome, ProbeKind, ProbeResult, ProbeSpec, ProbeVerdict};
use podprobe_core::status::annotation::AnnotationError;
use podprobe_core::util::watch_activity::WatchActivity;

const NODE: &str = "obs-test-node";

fn busybox(name: &str) -> Container {
    Container {
        name: name.to_string(),
        image: Some("docker.io/local/busybox:latest".to_string()),
        image_pull_policy: Some("Never".to_string()),
        command: Some(vec!["sleep".to_string(), "3600".to_string()]),
        ..Container::default()
    }
}

/// Creates a pod with one container `app`, retrying while the namespace's
/// default service account does not exist yet.
async fn create_pod(client: &Client, namespace: &str) -> Pod {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("target".to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![busybox("app")],
            termination_grace_period_seconds: Some(0),
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &pod).await {
            Ok(created) => return created,
            Err(error)
                if Instant::now() < deadline && error.to_string().contains("serviceaccount") =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("create pod in {namespace}: {error}"),
        }
    }
}

fn readiness_worker(pod: &Pod) -> WorkerConfig {
    let spec = ProbeSpec {
        handler: Handler::TcpSocket(TcpSocketAction {
            host: None,
            port: 8080,
        }),
        initial_delay_seconds: 0,
        timeout_seconds: 1,
        period_seconds: 10,
        period_milliseconds: None,
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
        network: Default::default(),
        markers: Vec::new(),
        workload: Default::default(),
    };
    WorkerConfig::new(
        ProbeKind::Readiness,
        spec,
        Arc::new(pod.clone()),
        &busybox("app"),
    )
}

fn failure_event(config: &WorkerConfig, output: &str) -> PodEvent {
    let verdict = ProbeVerdict::from_attempt(
        ProbeKind::Readiness,
        Ok(Outcome::new(ProbeResult::Failure, output)),
        1,
    );
    PodEvent::probe(
        config,
        verdict.event.as_ref().expect("failure has an event"),
    )
    .expect("pod has name and namespace")
}

/// podprobe's events in `namespace` by note, in `events.k8s.io/v1` (the
/// scheduler and the kubelet record their own about the pod).
async fn events_by_note(client: &Client, namespace: &str) -> BTreeMap<String, Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("podprobe"))
        .map(|event| (event.note.clone().unwrap_or_default(), event))
        .collect()
}

#[tokio::test]
async fn p5_k2_events_reach_the_api_with_kubelet_reasons_and_field_paths() {
    let client = cluster().client().await;
    let namespace = Namespace::create(&format!("podprobe-obs-{}", unique_id()));
    let pod = create_pod(&client, &namespace.name).await;
    let uid = pod.metadata.uid.clone().expect("created pod has a UID");

    let parts = MetricSet::new(WatchActivity::new());
    let metrics = &parts.served;
    let (sink, queue) = event_broadcaster::channel_with(
        event_broadcaster::QueueConfig {
            capacity: 16,
            ..Default::default()
        },
        parts.events.clone(),
    );
    let publisher = tokio::spawn({
        let client = client.clone();
        async move { queue.run(client, NODE).await }
    });

    let config = readiness_worker(&pod);
    sink.record(failure_event(&config, "boom"));
    sink.record(failure_event(&config, "boom"));
    sink.record(failure_event(&config, "bang"));
    sink.record(
        PodEvent::killing(
            &pod,
            "app",
            "Container app failed liveness probe, will be restarted".to_string(),
        )
        .unwrap(),
    );
    sink.record(
        PodEvent::invalid_annotation(&pod, &AnnotationError::InvalidJson("EOF".to_string()))
            .unwrap(),
    );
    // Dropping the last sink lets the publisher drain the queue and end.
    drop(sink);
    tokio::time::timeout(Duration::from_secs(30), publisher)
        .await
        .expect("publisher drains within 30 s")
        .unwrap();
    assert!(
        metrics
            .encode()
            .lines()
            .any(|l| l == r#"podprobe_events_total{outcome="recorded"} 5"#),
        "{}",
        metrics.encode()
    );

    let events = events_by_note(&client, &namespace.name).await;
    assert_eq!(events.len(), 4, "{events:#?}");

    let boom = &events["Readiness probe failed: boom"];
    assert_eq!(boom.type_.as_deref(), Some("Warning"));
    assert_eq!(boom.reason.as_deref(), Some("Unhealthy"));
    assert_eq!(boom.reporting_controller.as_deref(), Some("podprobe"));
    assert_eq!(boom.reporting_instance.as_deref(), Some(NODE));
    let regarding = boom.regarding.as_ref().expect("regarding");
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.name.as_deref(), Some("target"));
    assert_eq!(regarding.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        regarding.field_path.as_deref(),
        Some("spec.containers{app}")
    );
    // The repeat folded into the first event's series.
    assert_eq!(boom.series.as_ref().map(|s| s.count), Some(2));

    let bang = &events["Readiness probe failed: bang"];
    assert_eq!(bang.reason.as_deref(), Some("Unhealthy"));
    assert!(bang.series.is_none());

    let killing = &events["Container app failed liveness probe, will be restarted"];
    assert_eq!(killing.type_.as_deref(), Some("Normal"));
    assert_eq!(killing.reason.as_deref(), Some("Killing"));
    assert_eq!(
        killing
            .regarding
            .as_ref()
            .and_then(|r| r.field_path.as_deref()),
        Some("spec.containers{app}")
    );

    let invalid = &events["podprobe.io/probes: invalid JSON: EOF"];
    assert_eq!(invalid.type_.as_deref(), Some("Warning"));
    assert_eq!(invalid.reason.as_deref(), Some("ProbeAnnotationInvalid"));
    assert_eq!(
        invalid
            .regarding
            .as_ref()
            .and_then(|r| r.field_path.as_deref()),
        None
    );

    // What `kubectl describe pod` reads: the core/v1 view of the same events.
    let core = Api::<CoreEvent>::namespaced(client.clone(), &namespace.name)
        .list(&ListParams::default())
        .await
        .expect("list core/v1 events")
        .items;
    let boom_core = core
        .iter()
        .find(|e| e.message.as_deref() == Some("Readiness probe failed: boom"))
        .expect("core/v1 view of the Unhealthy event");
    assert_eq!(boom_core.series.as_ref().and_then(|s| s.count), Some(2));
    assert_eq!(
        boom_core.involved_object.field_path.as_deref(),
        Some("spec.containers{app}")
    );
    assert_eq!(boom_core.reporting_component.as_deref(), Some("podprobe"));
}

#[tokio::test]
async fn rule9_4_a_flood_of_different_notes_is_one_combined_event_in_the_api() {
    let client = cluster().client().await;
    let namespace = Namespace::create(&format!("podprobe-obs-{}", unique_id()));
    let pod = create_pod(&client, &namespace.name).await;

    let parts = MetricSet::new(WatchActivity::new());
    let metrics = &parts.served;
    let (sink, queue) = event_broadcaster::channel_with(
        event_broadcaster::QueueConfig::default(),
        parts.events.clone(),
    );
    let publisher = tokio::spawn({
        let client = client.clone();
        async move { queue.run(client, NODE).await }
    });
    // A server that resets the connection: the client's port in every note.
    let config = readiness_worker(&pod);
    for port in 40_000..40_030 {
        sink.record(failure_event(
            &config,
            &format!("read tcp 10.0.0.1:{port}->10.0.0.2:8080: connection reset by peer"),
        ));
    }
    drop(sink);
    tokio::time::timeout(Duration::from_secs(30), publisher)
        .await
        .expect("publisher drains within 30 s")
        .unwrap();

    // 9 notes of their own, then one combined Event, created with the
    // tenth and given its count of two with the eleventh; the other 19 are
    // counted, and their count written once when the queue shuts down:
    // 12 writes, well inside the pod's spam budget of 25.
    let text = metrics.encode();
    for line in [
        r#"podprobe_events_total{outcome="recorded"} 11"#,
        r#"podprobe_events_total{outcome="held"} 19"#,
        r#"podprobe_events_total{outcome="filtered"} 0"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let events = events_by_note(&client, &namespace.name).await;
    assert_eq!(events.len(), 10, "{:#?}", events.keys());
    let combined = events
        .iter()
        .find(|(note, _)| note.starts_with("(combined from similar events): "))
        .map(|(_, event)| event)
        .expect("a combined event");
    assert_eq!(
        combined.note.as_deref(),
        Some(
            "(combined from similar events): Readiness probe failed: \
             read tcp 10.0.0.1:40009->10.0.0.2:8080: connection reset by peer"
        )
    );
    assert_eq!(combined.series.as_ref().map(|s| s.count), Some(21));
    assert_eq!(
        combined
            .regarding
            .as_ref()
            .and_then(|r| r.field_path.as_deref()),
        Some("spec.containers{app}")
    );
}
