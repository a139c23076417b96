//! Gate-mode set-up mistakes that leave a pod NotReady for ever or its
//! probes without effect: the `podprobe.io/probes` annotation without the
//! `podprobe.io/ready` readiness gate, the gate without the annotation, and
//! an annotation podprobe refuses. `podprobe run` reports them on a pod's
//! first sight (a Warning Event and a log line); `podprobe lint` runs the
//! same checks offline on manifests, before anything is applied.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::Value;

use podprobe_core::prober::liveness_pause::{self, DEFAULT_MAX_PAUSE, PauseError};
use podprobe_core::spec::destinations::{AllowedHost, Destinations};
use podprobe_core::spec::probe_spec::budget::PodBudget;
use podprobe_core::spec::probe_spec::extension::disruption_budget::{
    GUARDS_ANNOTATION, GuardingBudget, pod_guards,
};
use podprobe_core::status::annotation::pod_probes;
use podprobe_core::status::gate_setup::pod_findings;
use podprobe_core::util::exit_code;

/// A pod template found in a manifest, with what names it.
#[derive(Debug)]
struct Template {
    /// `Kind namespace/name` of the object that holds it.
    object: String,
    /// Its `metadata.namespace`, empty when the manifest leaves it out.
    namespace: String,
    /// The object's workload, as the workload guard sees it (WG1).
    workload: Workload,
    pod: Result<Pod, String>,
}

/// What a template's pods share a restart budget or a readiness floor with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    /// A Pod written as such: no controller owner, nothing to share with.
    Bare,
    /// A controller with this many replicas (`spec.replicas`, default 1).
    Replicas(usize),
    /// A controller whose pods are not counted here (DaemonSet, Job).
    Uncounted,
}

/// The kinds whose pod template `podprobe lint` checks, and where it is.
fn template_of(kind: &str, object: &Value) -> Option<Value> {
    let template = match kind {
        "Pod" => return Some(object.clone()),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            object.pointer("/spec/template")
        }
        "CronJob" => object.pointer("/spec/jobTemplate/spec/template"),
        _ => None,
    }?;
    Some(template.clone())
}

/// A PodDisruptionBudget with `podprobe.io/guards` found in a manifest
/// (WG5).
#[derive(Debug)]
struct Budget {
    /// `PodDisruptionBudget namespace/name`.
    object: String,
    namespace: String,
    budget: GuardingBudget,
}

/// What one stream holds that `podprobe lint` checks.
#[derive(Debug, Default)]
struct Manifests {
    templates: Vec<Template>,
    budgets: Vec<Budget>,
}

/// The pod templates and opted-in PodDisruptionBudgets of one YAML or JSON
/// stream (`kind: List` items included), in order; objects of other kinds
/// are skipped.
fn manifests(text: &str) -> Result<Manifests, String> {
    let mut found = Manifests::default();
    let mut stack = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value: Value = serde::Deserialize::deserialize(document)
            .map_err(|e| format!("document {}: {e}", index + 1))?;
        stack.push(value);
    }
    stack.reverse();
    while let Some(object) = stack.pop() {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind == "List" {
            if let Some(items) = object.get("items").and_then(Value::as_array) {
                stack.extend(items.iter().rev().cloned());
            }
            continue;
        }
        let meta = |field: &str| {
            object
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let namespace = meta("namespace");
        let name = meta("name");
        let object_name = match namespace.as_str() {
            "" => format!("{kind} {name}"),
            namespace => format!("{kind} {namespace}/{name}"),
        };
        if kind == "PodDisruptionBudget" {
            let pdb = serde_json::from_value::<PodDisruptionBudget>(object)
                .map_err(|e| format!("{object_name}: not a PodDisruptionBudget: {e}"))?;
            if let Some(budget) = GuardingBudget::read(&pdb) {
                found.budgets.push(Budget {
                    object: object_name,
                    namespace,
                    budget,
                });
            }
            continue;
        }
        let Some(template) = template_of(kind, &object) else {
            continue;
        };
        let pod = serde_json::from_value::<Pod>(template)
            .map_err(|e| format!("{object_name}: not a pod template: {e}"));
        let workload = match kind {
            "Pod" => Workload::Bare,
            "Deployment" | "StatefulSet" | "ReplicaSet" => {
                let replicas = object.pointer("/spec/replicas").and_then(Value::as_u64);
                Workload::Replicas(replicas.map_or(1, |r| r as usize))
            }
            _ => Workload::Uncounted,
        };
        found.templates.push(Template {
            object: object_name,
            namespace,
            workload,
            pod,
        });
    }
    Ok(found)
}

/// What is wrong with a stream's opted-in PodDisruptionBudgets (WG5), as
/// `(object, finding)`: one podprobe cannot apply, one that selects none of
/// the stream's pod templates of its namespace, and a template two select.
fn budget_findings(manifests: &Manifests) -> Vec<(String, String)> {
    let mut findings = Vec::new();
    let pods: Vec<(&Template, &Pod)> = manifests
        .templates
        .iter()
        .filter_map(|t| t.pod.as_ref().ok().map(|pod| (t, pod)))
        .collect();
    for b in &manifests.budgets {
        if let Err(why) = &b.budget.options {
            findings.push((b.object.clone(), format!("{why}: podprobe would apply none of {GUARDS_ANNOTATION}, with a Warning at each pod's failure")));
        } else if !pods
            .iter()
            .any(|(t, pod)| t.namespace == b.namespace && b.budget.selects(pod))
        {
            findings.push((
                b.object.clone(),
                format!("{GUARDS_ANNOTATION}: spec.selector selects none of the pod templates here: no pod would take its numbers"),
            ));
        }
    }
    for (template, pod) in pods {
        let namespace = manifests
            .budgets
            .iter()
            .filter(|b| b.namespace == template.namespace && b.budget.options.is_ok())
            .map(|b| &b.budget);
        if let Err(why) = pod_guards(pod, namespace) {
            findings.push((template.object.clone(), why));
        }
    }
    findings
}

/// Flags of `podprobe lint`.
#[derive(Args, Debug)]
pub struct LintArgs {
    /// Manifests to check (YAML streams or JSON; `-` reads stdin): Pods and
    /// the pod templates of Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets, Jobs and CronJobs, and PodDisruptionBudgets with
    /// podprobe.io/guards; other objects are skipped.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Probe hosts the cluster's podprobe allows (its --allow-probe-hosts);
    /// an annotated probe with another `host` is reported.
    #[arg(long, value_delimiter = ',', value_name = "HOSTS")]
    pub allow_probe_hosts: Vec<String>,
}

/// `after_help` of `podprobe lint`.
pub const AFTER_HELP: &str = "\
Reports, per pod template, what would leave it NotReady for ever or make its
podprobe probes useless in gate mode: the podprobe.io/probes annotation
without the podprobe.io/ready readiness gate, the gate without the
annotation, and an annotation podprobe would refuse (invalid JSON or probe,
a port the container does not have, a probe host not allowed), and a
podprobe.io/pause-liveness-until that is not an RFC 3339 time, is past, or is
more than a day ahead (the chart's default bound). `podprobe run` reports the
same on the cluster as Warning Events (ReadinessGateMissing,
ProbeAnnotationMissing, ProbeAnnotationInvalid, LivenessPauseInvalid).
Also a restartBudget or readinessFloor that cannot work as meant: on a bare
Pod (no workload to share it with), or as large as the object's replicas (a
budget that holds nothing back, a floor that holds every pod); and a
PodDisruptionBudget with podprobe.io/guards that podprobe cannot apply (an
unknown guard, a value out of range), that selects none of the pod
templates given with it, or that selects a template another one selects
too (--pdb-guards, WG5).

Output: one line per finding, `FILE: KIND NAMESPACE/NAME: message`.

Exit status: 0 no findings, 1 findings, 64 a file that cannot be read or
parsed.";

/// `podprobe lint`.
pub fn main(args: LintArgs) -> ExitCode {
    let allowed = args
        .allow_probe_hosts
        .iter()
        .filter(|h| !h.is_empty())
        .map(|h| h.parse::<AllowedHost>())
        .collect::<Result<Vec<_>, _>>();
    let allowed = match allowed {
        Ok(allowed) => allowed,
        Err(error) => {
            eprintln!("podprobe lint: --allow-probe-hosts: {error}");
            return ExitCode::from(exit_code::USAGE);
        }
    };
    let destinations = Destinations::new(allowed, Destinations::node_local());
    let mut findings = 0usize;
    let mut invalid = BTreeSet::new();
    let now = k8s_openapi::jiff::Timestamp::now();
    for file in &args.files {
        let name = file.display().to_string();
        let text = if name == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        } else {
            std::fs::read_to_string(file)
        };
        let parsed = text.map_err(|e| e.to_string()).and_then(|t| manifests(&t));
        let manifests = match parsed {
            Ok(manifests) => manifests,
            Err(error) => {
                eprintln!("{name}: {error}");
                invalid.insert(name);
                continue;
            }
        };
        for (object, finding) in budget_findings(&manifests) {
            println!("{name}: {object}: {finding}");
            findings += 1;
        }
        for template in manifests.templates {
            match template.pod {
                Ok(pod) => {
                    for finding in pod_findings(&pod, &destinations) {
                        println!("{name}: {}: {finding}", template.object);
                        findings += 1;
                    }
                    if let Some(refused) = refused_pause(&pod, now) {
                        println!("{name}: {}: {refused}", template.object);
                        findings += 1;
                    }
                    for finding in guard_findings(template.workload, &pod) {
                        println!("{name}: {}: {finding}", template.object);
                        findings += 1;
                    }
                }
                Err(error) => {
                    eprintln!("{name}: {error}");
                    invalid.insert(name.clone());
                }
            }
        }
    }
    if !invalid.is_empty() {
        ExitCode::from(exit_code::USAGE)
    } else if findings > 0 {
        ExitCode::from(exit_code::FAILURE)
    } else {
        ExitCode::SUCCESS
    }
}

/// Restart budgets and readiness floors (WG1) that would do nothing, or
/// everything, for `workload`'s pods.
fn guard_findings(workload: Workload, pod: &Pod) -> Vec<String> {
    let Ok(probes) = pod_probes(pod, &mut PodBudget::default()) else {
        // Reported as an invalid annotation.
        return Vec::new();
    };
    let mut findings = Vec::new();
    for probe in probes.iter() {
        let field = |name: &str| {
            format!(
                "{}.{}.podprobe.{name}",
                probe.container,
                probe.kind.field_name()
            )
        };
        let settings = &probe.spec.workload;
        let budget = settings.restart_budget.map(|b| b.max_unavailable);
        let floor = settings.readiness_floor.map(|f| f.min_ready);
        for (name, count) in [("restartBudget", budget), ("readinessFloor", floor)] {
            let Some(count) = count else { continue };
            match workload {
                Workload::Bare => findings.push(format!(
                    "{}: a bare Pod has no workload to share it with: podprobe would act as the kubelet does, with a Warning",
                    field(name)
                )),
                Workload::Replicas(replicas) if count.of(replicas) >= replicas => {
                    findings.push(match name {
                        "restartBudget" => format!(
                            "{}.maxUnavailable: {count} of {replicas} replicas holds no restart back",
                            field(name)
                        ),
                        _ => format!(
                            "{}.minReady: {count} of {replicas} replicas holds every failing pod Ready: its readiness would never take it out of service",
                            field(name)
                        ),
                    })
                }
                _ => {}
            }
        }
    }
    findings
}

/// Why the daemon would refuse `pod`'s liveness pause at `now` under the
/// chart's default bound (LP4), if it has one the daemon would refuse.
fn refused_pause(pod: &Pod, now: k8s_openapi::jiff::Timestamp) -> Option<PauseError> {
    let value = liveness_pause::annotation(pod)?;
    liveness_pause::read(value, now, DEFAULT_MAX_PAUSE).err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use podprobe_core::status::gate_setup::{Finding, gate_mismatch};
    use podprobe_core::status::{PROBES_ANNOTATION, READY_CONDITION};

    fn pod(annotation: Option<&str>, gate: bool) -> Pod {
        let mut value = serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]}
        });
        if let Some(annotation) = annotation {
            value["metadata"]["annotations"] = serde_json::json!({PROBES_ANNOTATION: annotation});
        }
        if gate {
            value["spec"]["readinessGates"] =
                serde_json::json!([{"conditionType": READY_CONDITION}]);
        }
        serde_json::from_value(value).expect("pod")
    }

    const PROBES: &str = r#"{"app": {"readinessProbe": {"httpGet": {"port": "http"}}}}"#;

    fn gate_policy() -> Destinations {
        Destinations::new(Vec::new(), Destinations::node_local())
    }

    #[test]
    fn lp4_lint_reports_a_pause_the_daemon_would_refuse() {
        let now: k8s_openapi::jiff::Timestamp = "2026-11-27T12:00:00Z".parse().unwrap();
        let paused = |value: &str| {
            let mut pod = pod(Some(PROBES), true);
            let annotations = pod.metadata.annotations.get_or_insert_default();
            annotations.insert(
                liveness_pause::PAUSE_LIVENESS_ANNOTATION.into(),
                value.into(),
            );
            pod
        };
        assert_eq!(refused_pause(&pod(Some(PROBES), true), now), None);
        assert_eq!(refused_pause(&paused("2026-11-27T18:00:00Z"), now), None);
        assert!(matches!(
            refused_pause(&paused("2026-11-29T18:00:00Z"), now),
            Some(PauseError::TooFar { .. })
        ));
        assert!(matches!(
            refused_pause(&paused("noon"), now),
            Some(PauseError::NotATime { .. })
        ));
    }

    #[test]
    fn annotation_and_gate_go_together() {
        assert_eq!(gate_mismatch(&pod(Some(PROBES), true)), None);
        assert_eq!(gate_mismatch(&pod(None, false)), None);
        assert_eq!(
            gate_mismatch(&pod(Some(PROBES), false)),
            Some(Finding::GateMissing)
        );
        assert_eq!(
            gate_mismatch(&pod(None, true)),
            Some(Finding::AnnotationMissing)
        );
    }

    #[test]
    fn a_refused_annotation_is_a_finding() {
        let policy = gate_policy();
        assert!(pod_findings(&pod(Some(PROBES), true), &policy).is_empty());
        let missing_port = r#"{"app": {"readinessProbe": {"httpGet": {"port": "web"}}}}"#;
        let findings = pod_findings(&pod(Some(missing_port), true), &policy);
        assert!(
            matches!(&findings[..], [Finding::AnnotationInvalid(e)] if e.contains("\"web\"")),
            "{findings:?}"
        );
        let host =
            r#"{"app": {"readinessProbe": {"tcpSocket": {"port": 80, "host": "db.internal"}}}}"#;
        let findings = pod_findings(&pod(Some(host), false), &policy);
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert_eq!(findings[0], Finding::GateMissing);
    }

    #[test]
    fn wg1_budgets_and_floors_that_cannot_work_are_findings() {
        let manifest = |kind: &str, replicas: u32, floor: &str| {
            let probes = format!(
                r#"{{"app": {{"readinessProbe": {{"exec": {{"command": ["true"]}}, "podprobe": {{"readinessFloor": {{"minReady": {floor}}}}}}}, "livenessProbe": {{"exec": {{"command": ["true"]}}, "podprobe": {{"restartBudget": {{"maxUnavailable": 2}}}}}}}}}}"#
            );
            let pod = serde_json::json!({
                "metadata": {"annotations": {PROBES_ANNOTATION: probes}},
                "spec": {"readinessGates": [{"conditionType": READY_CONDITION}],
                         "containers": [{"name": "app", "image": "x"}]},
            });
            let mut object = match kind {
                "Pod" => pod,
                _ => serde_json::json!({"spec": {"replicas": replicas, "template": pod}}),
            };
            object["kind"] = kind.into();
            object["metadata"]["name"] = "web".into();
            let found = manifests(&object.to_string()).unwrap().templates.remove(0);
            guard_findings(found.workload, &found.pod.unwrap())
        };
        let bare = manifest("Pod", 0, "1");
        assert_eq!(bare.len(), 2, "{bare:?}");
        assert!(
            bare[0].starts_with("app.readinessProbe.podprobe.readinessFloor: a bare Pod")
                && bare[1].starts_with("app.livenessProbe.podprobe.restartBudget: a bare Pod"),
            "{bare:?}"
        );
        assert!(manifest("Deployment", 6, "\"50%\"").is_empty());
        let two = manifest("Deployment", 2, "2");
        assert_eq!(
            two,
            [
                "app.readinessProbe.podprobe.readinessFloor.minReady: 2 of 2 replicas holds every failing pod Ready: its readiness would never take it out of service",
                "app.livenessProbe.podprobe.restartBudget.maxUnavailable: 2 of 2 replicas holds no restart back",
            ]
        );
        assert!(manifest("DaemonSet", 0, "100").is_empty());
    }

    #[test]
    fn templates_of_workloads_lists_and_streams() {
        let text = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    metadata: {annotations: {podprobe.io/probes: "{}"}}
    spec: {containers: [{name: app}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
---
apiVersion: v1
kind: List
items:
  - {kind: Pod, metadata: {name: a}, spec: {containers: [{name: app}]}}
  - kind: CronJob
    metadata: {name: nightly, namespace: ops}
    spec: {jobTemplate: {spec: {template: {spec: {containers: [{name: job}]}}}}}
"#;
        let found = manifests(text).expect("parses").templates;
        let names: Vec<_> = found.iter().map(|t| t.object.as_str()).collect();
        assert_eq!(
            names,
            ["Deployment shop/web", "Pod a", "CronJob ops/nightly"]
        );
        assert!(found.iter().all(|t| t.pod.is_ok()));
        assert!(manifests("kind: Pod\nspec: [").is_err());
        let bad = manifests("kind: Pod\nmetadata: {name: x}\nspec: {containers: 3}")
            .expect("yaml")
            .templates;
        assert!(bad[0].pod.is_err());
    }

    #[test]
    fn wg5_budgets_podprobe_cannot_apply_select_nothing_or_overlap_are_findings() {
        // The other namespace's budget first: it must count for no pod here.
        let text = r#"
kind: PodDisruptionBudget
metadata: {name: web, namespace: other, annotations: {podprobe.io/guards: restartBudget}}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
---
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app}]}
---
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop, annotations: {podprobe.io/guards: restartBudget}}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
---
kind: PodDisruptionBudget
metadata: {name: all, namespace: shop, annotations: {podprobe.io/guards: readinessFloor}}
spec: {minAvailable: 1, selector: {}}
---
kind: PodDisruptionBudget
metadata: {name: db, namespace: shop, annotations: {podprobe.io/guards: readinessFloor}}
spec: {minAvailable: 1, selector: {matchLabels: {app: db}}}
---
kind: PodDisruptionBudget
metadata: {name: typo, namespace: shop, annotations: {podprobe.io/guards: restartbudget}}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
---
kind: PodDisruptionBudget
metadata: {name: plain, namespace: shop}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: nothing}}}
"#;
        let found = manifests(text).expect("parses");
        assert_eq!(
            found.budgets.len(),
            5,
            "the one without the annotation is not podprobe's"
        );
        let findings = budget_findings(&found);
        assert_eq!(
            findings,
            [
                (
                    "PodDisruptionBudget other/web".to_string(),
                    "podprobe.io/guards: spec.selector selects none of the pod templates here: no pod would take its numbers".to_string()
                ),
                (
                    "PodDisruptionBudget shop/db".to_string(),
                    "podprobe.io/guards: spec.selector selects none of the pod templates here: no pod would take its numbers".to_string()
                ),
                (
                    "PodDisruptionBudget shop/typo".to_string(),
                    "metadata.annotations[podprobe.io/guards]: Invalid value: \"restartbudget\": supported values: \"readinessFloor\", \"restartBudget\" (comma-separated): podprobe would apply none of podprobe.io/guards, with a Warning at each pod's failure".to_string()
                ),
                (
                    "Deployment shop/web".to_string(),
                    "PodDisruptionBudgets web and all both select the pod and set podprobe.io/guards; podprobe applies neither".to_string()
                ),
            ]
        );
        // One budget alone: nothing to say.
        let one = text
            .split("---")
            .skip(1)
            .take(2)
            .collect::<Vec<_>>()
            .join("---");
        assert_eq!(budget_findings(&manifests(&one).unwrap()), []);
    }
}
