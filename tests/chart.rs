//! The Helm chart `charts/podprobe`, without a cluster: `helm lint`, what
//! `helm template` renders for the defaults and for each value that changes
//! the objects, and that `deploy/base` and `deploy/monitoring` are exactly
//! what `hack/render-manifests.sh` renders from it (the chart is their single
//! source).
//!
//! helm comes from `PODPROBE_HELM` (hack/test.sh exports it) or the cache of
//! `hack/helm.sh`; without it every test here fails, saying to run that.

#[path = "support/go_tools.rs"]
mod go_tools;

use std::collections::BTreeSet;
use std::path::Path;

use go_tools::{helm, repo, run, run_ok, yaml_docs, yaml_file};
use serde_json::{Value, json};

const CHART: &str = "charts/podprobe";

/// `helm template podprobe charts/podprobe -n podprobe-system` with `args`
/// (`--set ...`, `-f ...`), parsed.
fn template(args: &[&str]) -> Vec<Value> {
    template_as("podprobe", "podprobe-system", args)
}

fn template_as(release: &str, namespace: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", release, CHART, "--namespace", namespace];
    all.extend_from_slice(args);
    yaml_docs(&run_ok(&helm(), &all))
}

/// What `helm template` says when it refuses `args`.
fn template_error(args: &[&str]) -> String {
    let mut all = vec!["template", "podprobe", CHART];
    all.extend_from_slice(args);
    let output = run(&helm(), &all);
    assert!(
        !output.status.success(),
        "helm template {} should fail, rendered:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .map(|d| d["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            panic!(
                "no {kind} {name} among {:?}",
                docs.iter()
                    .map(|d| format!("{} {}", d["kind"], d["metadata"]["name"]))
                    .collect::<Vec<_>>()
            )
        })
}

fn daemonset(docs: &[Value]) -> &Value {
    find(docs, "DaemonSet", "podprobe")
}

fn pod_spec(docs: &[Value]) -> &Value {
    &daemonset(docs)["spec"]["template"]["spec"]
}

fn container(docs: &[Value]) -> &Value {
    let containers = pod_spec(docs)["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    &containers[0]
}

fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

/// The CRI endpoint flag, the hostPath of the `cri` volume and where it is
/// mounted.
fn cri(docs: &[Value]) -> (String, Value, Value) {
    let endpoint = args(docs)
        .into_iter()
        .find(|a| a.starts_with("--cri-endpoint="))
        .expect("--cri-endpoint");
    let volume = pod_spec(docs)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cri")
        .expect("volume cri")["hostPath"]
        .clone();
    let mount = container(docs)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "cri")
        .expect("mount cri")
        .clone();
    (endpoint, volume, mount)
}

#[test]
fn lint_passes_strict() {
    let helm = helm();
    for extra in [
        &[][..],
        &["--set", "mode=authority"][..],
        &[
            "--set",
            "podMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
        ][..],
        &["--values", "tests/e2e/values.yaml"][..],
    ] {
        for strict in [false, true] {
            let mut all = vec!["lint", CHART];
            if strict {
                all.push("--strict");
            }
            all.extend_from_slice(extra);
            let out = run_ok(&helm, &all);
            assert!(out.contains("0 chart(s) failed"), "{out}");
        }
    }
}

/// The default render; deploy/base is the same with statusApi.enabled=false
/// (hack/render-manifests.sh; generated_manifests_match_the_chart).
#[test]
fn defaults_are_deploy_base() {
    let docs = template(&[]);
    assert_eq!(
        kinds(&docs),
        [
            "APIService",
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
        .map(String::from)
        .into(),
        "no monitoring objects unless asked for"
    );
    for (kind, name) in [
        ("ServiceAccount", "podprobe"),
        ("ServiceAccount", "podprobe-authority"),
        ("ClusterRole", "podprobe"),
        ("ClusterRole", "podprobe-metrics-reader"),
        ("ClusterRoleBinding", "podprobe"),
        ("ClusterRole", "podprobe-status-reader"),
        (
            "RoleBinding",
            "podprobe-extension-apiserver-authentication-reader",
        ),
        ("Secret", "podprobe-status-api-tls"),
        ("Service", "podprobe-status-api"),
        ("APIService", "v1alpha1.status.podprobe.io"),
        ("ValidatingAdmissionPolicy", "podprobe-status-writes"),
        ("ValidatingAdmissionPolicyBinding", "podprobe-status-writes"),
        ("ValidatingAdmissionPolicy", "podprobe-event-writes"),
        ("ValidatingAdmissionPolicyBinding", "podprobe-event-writes"),
    ] {
        find(&docs, kind, name);
    }
    assert_eq!(
        args(&docs),
        [
            "run",
            "--mode=gate",
            "--cri-endpoint=unix:///run/containerd/containerd.sock",
            "--listen=0.0.0.0:9440",
            "--metrics-auth=delegated",
            "--max-connections=64",
            "--log-format=json",
            "--max-pod-regex-bytes=1048576",
            "--max-pod-command-bytes=4194304",
            "--max-annotation-bytes=262144",
            "--max-node-regex-bytes=16777216",
            "--max-node-command-bytes=33554432",
            "--max-pod-probe-rate=50",
            "--max-node-probe-rate=1000",
            "--max-concurrent-execs-per-pod=8",
            "--max-exec-timeout-seconds=60",
            "--max-concurrent-network-probes=256",
            "--max-concurrent-network-probes-per-pod=16",
            "--max-network-timeout-seconds=60",
            "--max-liveness-pause-seconds=86400",
            "--status-output-budget-bytes=1048576",
            "--status-api-listen=0.0.0.0:9443",
            "--status-api-tls-dir=/etc/podprobe/status-api",
            "--status-api-peer-name=podprobe-status-api.podprobe-system.svc",
        ]
    );
    let (_, volume, mount) = cri(&docs);
    assert_eq!(
        volume,
        json!({"path": "/run/containerd", "type": "Directory"})
    );
    assert_eq!(mount["mountPath"], "/run/containerd");
    assert_eq!(mount["readOnly"], true);

    let ds = daemonset(&docs);
    assert_eq!(ds["metadata"]["namespace"], "podprobe-system");
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}})
    );
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "podprobe", "app.kubernetes.io/instance": "podprobe"})
    );
    let spec = pod_spec(&docs);
    assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(spec["serviceAccountName"], "podprobe");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["dnsPolicy"], "Default");
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [{"key": "podprobe.io/agent-node", "operator": "DoesNotExist"}]}])
    );
    let c = container(&docs);
    assert_eq!(c["image"], "docker.io/local/podprobe:dev");
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        c["securityContext"],
        json!({
            "runAsUser": 0,
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    );
    assert_eq!(
        c["env"],
        json!([{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
    );
    assert_eq!(
        find(&docs, "ClusterRole", "podprobe-metrics-reader")["rules"],
        json!([{"nonResourceURLs": ["/metrics", "/metrics/probes"], "verbs": ["get"]}])
    );
}

#[test]
fn no_cluster_role_grants_secrets() {
    // Client certificates are read where a namespace's owner grants `get`
    // on one Secret (docs/extensions.md: Client certificates), never
    // cluster-wide.
    let docs = template(&[
        "--set",
        "podMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
    ]);
    let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert!(roles.len() >= 2, "{roles:#?}");
    for role in roles {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let resources = rule["resources"].as_array().into_iter().flatten();
            for resource in resources {
                assert!(
                    resource != "secrets" && resource != "*",
                    "{} grants {resource}: {rule}",
                    role["metadata"]["name"]
                );
            }
        }
    }
}

#[test]
fn authority_mode_runs_as_its_account_on_agent_nodes_only() {
    let docs = template(&["--set", "mode=authority"]);
    assert!(args(&docs).contains(&"--mode=authority".to_string()));
    let spec = pod_spec(&docs);
    assert_eq!(spec["serviceAccountName"], "podprobe-authority");
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [{"key": "podprobe.io/agent-node", "operator": "In", "values": ["true"]}]}])
    );

    // An affinity of one's own replaces the chart's, in either mode.
    let own = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}});
    let docs = template(&["--set-json", &format!("affinity={own}")]);
    assert_eq!(pod_spec(&docs)["affinity"], own);
}

#[test]
fn cri_socket_presets_and_custom_path() {
    for (set, endpoint, dir) in [
        (
            "cri.runtime=containerd",
            "unix:///run/containerd/containerd.sock",
            "/run/containerd",
        ),
        (
            "cri.runtime=crio",
            "unix:///var/run/crio/crio.sock",
            "/var/run/crio",
        ),
        (
            "cri.runtime=custom,cri.socketPath=/var/lib/agent/run/cri.sock",
            "unix:///var/lib/agent/run/cri.sock",
            "/var/lib/agent/run",
        ),
    ] {
        let docs = template(&["--set", set]);
        let (flag, volume, mount) = cri(&docs);
        assert_eq!(flag, format!("--cri-endpoint={endpoint}"), "{set}");
        assert_eq!(volume, json!({"path": dir, "type": "Directory"}), "{set}");
        assert_eq!(mount["mountPath"], dir, "{set}");
    }
    // A custom runtime needs an absolute path in a directory of its own.
    for bad in ["", "cri.sock", "/cri.sock"] {
        let error = template_error(&[
            "--set",
            "cri.runtime=custom",
            "--set-string",
            &format!("cri.socketPath={bad}"),
        ]);
        assert!(error.contains("cri.socketPath"), "{bad:?}: {error}");
    }
    let error = template_error(&["--set", "cri.runtime=docker"]);
    assert!(names(&error, "cri.runtime"), "{error}");
}

/// Whether helm's `error` names the value `path`: the templates' own checks
/// say `cri.runtime`, values.schema.json says `/cri/runtime`.
fn names(error: &str, path: &str) -> bool {
    error.contains(path) || error.contains(&format!("/{}", path.replace('.', "/")))
}

#[test]
fn bad_values_are_refused_with_the_value_named() {
    let error = template_error(&["--set", "mode=both"]);
    assert!(names(&error, "mode"), "{error}");
    let error = template_error(&["--set", "metrics.auth=basic"]);
    assert!(names(&error, "metrics.auth"), "{error}");
    // A misspelt value is an error, not silently ignored.
    let error = template_error(&["--set", "podmonitor.enabled=true"]);
    assert!(error.contains("podmonitor"), "{error}");
    // Without the schema, the templates refuse them too.
    let error = template_error(&["--skip-schema-validation", "--set", "mode=both"]);
    assert!(error.contains("mode must be gate or authority"), "{error}");
}

#[test]
fn monitoring_objects_appear_only_when_enabled() {
    let docs = template(&["--set", "podMonitor.enabled=true"]);
    let monitor = find(&docs, "PodMonitor", "podprobe");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert!(!kinds(&docs).contains("PrometheusRule"));
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "http");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(
        endpoint["authorization"],
        json!({"type": "Bearer", "credentials": {"name": "podprobe-metrics-scraper", "key": "token"}})
    );
    assert_eq!(
        endpoint["relabelings"],
        json!([
            {"targetLabel": "job", "replacement": "podprobe"},
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
        ])
    );
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        daemonset(&docs)["spec"]["selector"]["matchLabels"]
    );
    // The token it sends: a ServiceAccount bound to the metrics reader role.
    let secret = find(&docs, "Secret", "podprobe-metrics-scraper");
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    find(&docs, "ServiceAccount", "podprobe-metrics-scraper");
    let binding = find(&docs, "ClusterRoleBinding", "podprobe-metrics-scraper");
    assert_eq!(binding["roleRef"]["name"], "podprobe-metrics-reader");

    // With an existing token Secret, or no authentication, nothing extra.
    let docs = template(&[
        "--set",
        "podMonitor.enabled=true,podMonitor.tokenSecret=mine",
    ]);
    assert!(!has_scraper_token(&docs));
    assert_eq!(
        find(&docs, "PodMonitor", "podprobe")["spec"]["podMetricsEndpoints"][0]["authorization"]["credentials"]
            ["name"],
        "mine"
    );
    let docs = template(&["--set", "podMonitor.enabled=true,metrics.auth=none"]);
    assert!(!has_scraper_token(&docs));
    assert!(args(&docs).contains(&"--metrics-auth=none".to_string()));
    assert!(
        find(&docs, "PodMonitor", "podprobe")["spec"]["podMetricsEndpoints"][0]
            .get("authorization")
            .is_none()
    );

    let docs = template(&["--set", "prometheusRule.enabled=true"]);
    assert!(!kinds(&docs).contains("PodMonitor"));
    let rule = find(&docs, "PrometheusRule", "podprobe");
    assert_eq!(
        rule["spec"],
        yaml_file("charts/podprobe/files/alerts.yaml"),
        "the PrometheusRule carries files/alerts.yaml unchanged"
    );

    let docs = template(&["--set", "grafanaDashboard.enabled=true"]);
    let config_map = find(&docs, "ConfigMap", "podprobe-dashboard");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value =
        serde_json::from_str(config_map["data"]["podprobe.json"].as_str().unwrap()).unwrap();
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("charts/podprobe/files/dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(dashboard, file);
}

/// Whether the chart renders the metrics scraper's token Secret.
fn has_scraper_token(docs: &[Value]) -> bool {
    docs.iter()
        .any(|d| d["kind"] == "Secret" && d["type"] == "kubernetes.io/service-account-token")
}

#[test]
fn admission_policy_names_the_release_accounts_and_can_be_left_out() {
    let docs = template(&["--set", "admissionPolicy.enabled=false"]);
    let kinds = kinds(&docs);
    assert!(!kinds.contains("ValidatingAdmissionPolicy"), "{kinds:?}");
    assert!(
        !kinds.contains("ValidatingAdmissionPolicyBinding"),
        "{kinds:?}"
    );

    // In another namespace, under another release name, the CEL names the
    // accounts the release creates (kustomize could not rewrite them).
    let docs = template_as("edge", "probes", &[]);
    for name in ["edge-podprobe-status-writes", "edge-podprobe-event-writes"] {
        let text = find(&docs, "ValidatingAdmissionPolicy", name).to_string();
        assert!(
            text.contains("system:serviceaccount:probes:edge-podprobe'")
                && text.contains("system:serviceaccount:probes:edge-podprobe-authority'"),
            "{text}"
        );
        assert!(!text.contains("podprobe-system"), "{text}");
        assert_eq!(
            find(&docs, "ValidatingAdmissionPolicyBinding", name)["spec"]["policyName"],
            name
        );
    }
    find(&docs, "ServiceAccount", "edge-podprobe");
    find(&docs, "ServiceAccount", "edge-podprobe-authority");
}

#[test]
fn events_are_granted_only_through_events_k8s_io() {
    // podprobe writes events.k8s.io/v1 Events only; the API server checks
    // no field of a core v1 Event update, so it gets no grant there.
    let docs = template(&[]);
    let role = find(&docs, "ClusterRole", "podprobe");
    let event_rules: Vec<&Value> = role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rule| {
            rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r == "events"))
        })
        .collect();
    assert_eq!(
        event_rules,
        [&json!({
            "apiGroups": ["events.k8s.io"],
            "resources": ["events"],
            "verbs": ["create", "patch"],
        })],
        "{role:#}"
    );
}

#[test]
fn extra_args_env_image_and_update_strategy() {
    let docs = template(&[
        "--set-json",
        r#"extraArgs=["--pod-selector=!podprobe.io/test-run","--allow-probe-hosts=10.0.0.0/8"]"#,
        "--set-json",
        r#"extraEnv=[{"name":"RUST_LOG","value":"debug"}]"#,
        "--set",
        "image.repository=registry.example/podprobe,image.digest=sha256:0123,image.pullPolicy=Always",
        "--set",
        "updateStrategy.rollingUpdate.maxUnavailable=2,priorityClassName=",
        "--set",
        "metrics.plainListen=127.0.0.1:9441",
    ]);
    let args = args(&docs);
    assert_eq!(
        &args[args.len() - 2..],
        [
            "--pod-selector=!podprobe.io/test-run",
            "--allow-probe-hosts=10.0.0.0/8"
        ],
        "extraArgs come last, after the chart's"
    );
    assert!(args.contains(&"--plain-metrics-listen=127.0.0.1:9441".to_string()));
    let c = container(&docs);
    assert_eq!(c["env"][1], json!({"name": "RUST_LOG", "value": "debug"}));
    assert_eq!(c["env"][0]["name"], "NODE_NAME");
    assert_eq!(c["image"], "registry.example/podprobe@sha256:0123");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        daemonset(&docs)["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        2
    );
    assert!(pod_spec(&docs).get("priorityClassName").is_none());
}

/// `podNetwork.enabled` is the one way to `--pod-network`, and brings what
/// it needs (SYS_ADMIN, the runtime's namespace files as they appear); off,
/// podprobe keeps no capability and no extra mount.
#[test]
fn pod_network_adds_the_flag_the_capability_and_the_namespaces_only_when_enabled() {
    let off = template(&[]);
    assert!(!args(&off).contains(&"--pod-network".to_string()));
    let c = container(&off);
    assert_eq!(
        c["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    assert!(!c.to_string().contains("netns"), "{c:#}");

    let on = template(&["--set", "podNetwork.enabled=true"]);
    assert!(args(&on).contains(&"--pod-network".to_string()));
    let c = container(&on);
    assert_eq!(
        c["securityContext"]["capabilities"],
        json!({"drop": ["ALL"], "add": ["SYS_ADMIN"]})
    );
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    let mount = c["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "netns"))
        .unwrap_or_else(|| panic!("no netns mount: {c:#}"));
    assert_eq!(
        mount,
        &json!({"name": "netns", "mountPath": "/var/run/netns", "readOnly": true,
                "mountPropagation": "HostToContainer"})
    );
    let volume = pod_spec(&on)["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "netns").cloned());
    assert_eq!(
        volume,
        Some(
            json!({"name": "netns", "hostPath": {"path": "/var/run/netns", "type": "DirectoryOrCreate"}})
        )
    );
    assert!(
        template_error(&["--set", "podNetwork.namespacesPath=run/netns"])
            .contains("/podNetwork/namespacesPath")
    );
}

/// tests/e2e/values.yaml deploys what tests/e2e's kustomization deploys:
/// deploy/local's image, pull policy, environment and containerd, plus the
/// e2e patch's arguments.
#[test]
fn e2e_values_match_the_e2e_kustomization() {
    let docs = template(&["--values", "tests/e2e/values.yaml"]);
    let local = yaml_file("deploy/local/daemonset.yaml");
    let local_spec = &local["spec"]["template"]["spec"];
    let local_container = &local_spec["containers"][0];
    let c = container(&docs);
    assert_eq!(c["image"], local_container["image"]);
    assert_eq!(c["imagePullPolicy"], local_container["imagePullPolicy"]);
    for env in local_container["env"].as_array().unwrap() {
        assert!(
            c["env"].as_array().unwrap().contains(env),
            "{env} missing from {}",
            c["env"]
        );
    }
    let local_dir = local_spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cri")
        .unwrap()["hostPath"]["path"]
        .as_str()
        .unwrap();
    let (endpoint, volume, _) = cri(&docs);
    assert_eq!(volume["path"], local_dir);
    assert_eq!(
        endpoint,
        format!("--cri-endpoint=unix://{local_dir}/containerd.sock")
    );

    let e2e = yaml_file("tests/e2e/kustomization.yaml");
    let patch = yaml_docs(e2e["patches"][0]["patch"].as_str().unwrap()).remove(0);
    for op in patch.as_array().unwrap() {
        assert_eq!(op["path"], "/spec/template/spec/containers/0/args/-");
        let arg = op["value"].as_str().unwrap().to_string();
        assert!(args(&docs).contains(&arg), "{arg} missing");
    }
}

/// deploy/base and deploy/monitoring are exactly what
/// hack/render-manifests.sh renders from the chart now, and every file there
/// that says it is generated is still generated.
#[test]
fn generated_manifests_match_the_chart() {
    let out = tempfile::tempdir().expect("temporary directory");
    let output = std::process::Command::new("bash")
        .arg(repo().join("hack/render-manifests.sh"))
        .args(["--out".as_ref(), out.path().as_os_str()])
        .env("PODPROBE_HELM", helm())
        .output()
        .expect("run hack/render-manifests.sh");
    assert!(
        output.status.success(),
        "hack/render-manifests.sh failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut rendered = BTreeSet::new();
    let mut stale = Vec::new();
    for dir in ["deploy/base", "deploy/monitoring"] {
        for entry in std::fs::read_dir(out.path().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            let fresh = std::fs::read_to_string(&path).unwrap();
            let checked_in = std::fs::read_to_string(repo().join(&name)).unwrap_or_default();
            if fresh != checked_in {
                stale.push(name.clone());
            }
            rendered.insert(name);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what the chart renders: run hack/render-manifests.sh and commit the result (edit charts/podprobe, not the generated files)"
    );
    for dir in ["deploy/base", "deploy/monitoring"] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("Generated by hack/render-manifests.sh") || rendered.contains(&name),
                "{name} says it is generated, but the chart no longer renders it: delete it"
            );
        }
    }
    for must in [
        "deploy/base/daemonset.yaml",
        "deploy/base/rbac.yaml",
        "deploy/base/admission-policy.yaml",
        "deploy/monitoring/podmonitor.yaml",
        "deploy/monitoring/prometheusrule.yaml",
        "deploy/monitoring/dashboard.json",
    ] {
        assert!(
            rendered.contains(must),
            "{must} is not rendered: {rendered:?}"
        );
    }
}

/// Every value of values.yaml is in the chart README's table.
#[test]
fn readme_documents_every_value() {
    fn leaves(prefix: &str, value: &Value, out: &mut Vec<String>) {
        match value.as_object() {
            // Maps passed through whole (resources, labels, ...) are one
            // value, as is a map that is empty by default.
            Some(map)
                if !map.is_empty()
                    && !["resources", "nodeSelector", "updateStrategy"].contains(&prefix)
                    && !prefix.ends_with("labels") =>
            {
                for (key, value) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    leaves(&path, value, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let values = yaml_file("charts/podprobe/values.yaml");
    let mut paths = Vec::new();
    leaves("", &values, &mut paths);
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/podprobe/README.md"),
    )
    .expect("charts/podprobe/README.md");
    let missing: Vec<_> = paths
        .iter()
        .filter(|p| !readme.contains(&format!("| `{p}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "charts/podprobe/README.md's values table lacks {missing:?}"
    );
}

/// #38: the ClusterRole for `kubectl podprobe` grants `get` on the
/// aggregated `probes` and nothing else, joins `view` unless told not to,
/// and is bound cluster-wide to `statusReaders.groups` only when some are
/// given.
#[test]
fn the_status_reader_cluster_role_gets_probes_and_is_bound_only_when_asked() {
    let docs = template(&[]);
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "Role" && d["metadata"]["name"] == "podprobe-status-reader"),
        "the namespaced Role of pods/proxy is gone"
    );
    let role = find(&docs, "ClusterRole", "podprobe-status-reader");
    assert!(role["metadata"].get("namespace").is_none(), "{role:#}");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["status.podprobe.io"], "resources": ["probes"], "verbs": ["get"]}])
    );
    assert_eq!(
        role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "podprobe-status-reader"
                && d["kind"].as_str().unwrap().ends_with("Binding")),
        "bound only with statusReaders.groups"
    );

    let docs = template(&["--set", "statusReaders.aggregateToView=false"]);
    let labels = &find(&docs, "ClusterRole", "podprobe-status-reader")["metadata"]["labels"];
    assert!(
        labels
            .get("rbac.authorization.k8s.io/aggregate-to-view")
            .is_none(),
        "{labels:#}"
    );

    let docs = template(&[
        "--set",
        "statusReaders.groups={system:authenticated,team-a}",
    ]);
    assert!(!kinds(&docs).contains("Role"));
    let binding = find(&docs, "ClusterRoleBinding", "podprobe-status-reader");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "podprobe-status-reader"})
    );
    assert_eq!(
        binding["subjects"],
        json!([
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "team-a"},
        ])
    );
}

/// Every optional feature on at once, for checks that must hold whatever
/// is enabled.
const EVERYTHING_ON: &[&str] = &[
    "--set",
    "podMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
    "--set",
    "podNetwork.enabled=true,metrics.plainListen=127.0.0.1:9441",
    "--set",
    "markers.allowedKeys={role},statusReaders.groups={system:authenticated}",
    "--set",
    "statusApi.enabled=true,statusReaders.aggregateToView=true,admissionPolicy.enabled=true",
];

/// #38: no Role or ClusterRole the chart renders grants a proxy
/// subresource (`pods/proxy` of a host-network pod reaches any port of its
/// node) or a wildcard, in the default render, with every feature on, in
/// either mode.
#[test]
fn no_role_grants_proxy_subresources_or_wildcards() {
    const PROXIES: [&str; 3] = ["pods/proxy", "nodes/proxy", "services/proxy"];
    let mut renders = vec![("defaults".to_string(), template(&[]))];
    for mode in ["gate", "authority"] {
        let mut args = EVERYTHING_ON.to_vec();
        let set = format!("mode={mode}");
        args.extend_from_slice(&["--set", &set]);
        renders.push((format!("everything on, {set}"), template(&args)));
    }
    for (render, docs) in &renders {
        let roles: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
            .collect();
        assert!(roles.len() >= 3, "{render}: {roles:#?}");
        for role in roles {
            let name = &role["metadata"]["name"];
            assert!(
                role.get("aggregationRule").is_none(),
                "{render}: {name} aggregates other roles"
            );
            for rule in role["rules"].as_array().into_iter().flatten() {
                for field in ["apiGroups", "resources", "verbs", "nonResourceURLs"] {
                    for item in rule[field].as_array().into_iter().flatten() {
                        let item = item.as_str().expect("a string");
                        assert!(
                            !item.contains('*'),
                            "{render}: {name} has a wildcard in {field}: {rule}"
                        );
                        assert!(
                            !(field == "resources" && PROXIES.contains(&item)),
                            "{render}: {name} grants {item}: {rule}"
                        );
                    }
                }
            }
        }
    }
}

/// The documents named like the status API's (#38), by kind and name.
fn status_api_objects(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .filter(|d| {
            let name = d["metadata"]["name"].as_str().unwrap_or("");
            name.contains("status-api")
                || name.contains("status.podprobe.io")
                || name.contains("extension-apiserver")
                || name.contains("status-reader")
        })
        .map(|d| format!("{} {}", d["kind"], d["metadata"]["name"]))
        .collect()
}

/// The certificates of a PEM bundle, DER.
fn pem_certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .map(|c| c.expect("a PEM certificate").to_vec())
        .collect()
}

/// A Secret's `data[key]`, decoded.
fn secret_data(secret: &Value, key: &str) -> Vec<u8> {
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(secret.clone()).expect("a Secret");
    secret.data.unwrap_or_default()[key].0.clone()
}

/// #38: the aggregated status API: a TLS Secret generated at install
/// (never the CA's key), a Service over every podprobe, the APIService
/// trusting exactly that Secret's CA bundle, and the DaemonSet's listener,
/// mount and flags.
#[test]
fn the_status_api_is_served_by_the_daemonset_with_the_charts_certificates() {
    let docs = template(&[]);
    let secret = find(&docs, "Secret", "podprobe-status-api-tls");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(secret["metadata"]["namespace"], "podprobe-system");
    assert_eq!(
        secret["metadata"]["annotations"],
        json!({"podprobe.io/tls-generation": "1"})
    );
    let keys: Vec<&str> = secret["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
    // The CA's private key is kept nowhere: ca.crt holds certificates only.
    let ca = secret_data(secret, "ca.crt");
    assert_eq!(pem_certificates(&ca).len(), 1, "a fresh install has one CA");
    assert_eq!(
        String::from_utf8(ca)
            .unwrap()
            .matches("-----BEGIN ")
            .count(),
        1,
        "ca.crt holds nothing but the CA's certificate"
    );
    let leaf = pem_certificates(&secret_data(secret, "tls.crt"));
    assert_eq!(leaf.len(), 1);
    // Both sides of the podprobes' mutual TLS use this one certificate.
    const SERVER_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
    const CLIENT_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
    for (usage, oid) in [("serverAuth", SERVER_AUTH), ("clientAuth", CLIENT_AUTH)] {
        assert!(
            leaf[0].windows(oid.len()).any(|w| w == oid),
            "tls.crt lacks the extended key usage {usage}"
        );
    }
    for name in [
        "podprobe-status-api",
        "podprobe-status-api.podprobe-system",
        "podprobe-status-api.podprobe-system.svc",
    ] {
        assert!(
            leaf[0].windows(name.len()).any(|w| w == name.as_bytes()),
            "tls.crt does not name {name}"
        );
    }
    let key = String::from_utf8(secret_data(secret, "tls.key")).unwrap();
    assert_eq!(
        key.matches("-----BEGIN ").count(),
        1,
        "tls.key holds the serving key only"
    );
    assert!(key.contains("PRIVATE KEY-----"));

    let service = find(&docs, "Service", "podprobe-status-api");
    assert_eq!(service["metadata"]["namespace"], "podprobe-system");
    assert_eq!(
        service["spec"]["selector"],
        daemonset(&docs)["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "status-api", "port": 443, "targetPort": "status-api", "protocol": "TCP"}])
    );

    let api_service = find(&docs, "APIService", "v1alpha1.status.podprobe.io");
    assert_eq!(api_service["apiVersion"], "apiregistration.k8s.io/v1");
    assert_eq!(
        api_service["spec"],
        json!({
            "group": "status.podprobe.io",
            "version": "v1alpha1",
            "service": {"namespace": "podprobe-system", "name": "podprobe-status-api", "port": 443},
            "caBundle": secret["data"]["ca.crt"],
            "groupPriorityMinimum": 1000,
            "versionPriority": 100,
        }),
        "the caBundle is the Secret's ca.crt, and TLS is always verified"
    );
    assert_eq!(
        format!(
            "{}.{}",
            podprobe_core::prober::probe_ledger::api_types::VERSION,
            podprobe_core::prober::probe_ledger::api_types::GROUP
        ),
        podprobe_core::prober::probe_ledger::api_types::API_SERVICE
    );
    assert_eq!(
        api_service["metadata"]["name"],
        podprobe_core::prober::probe_ledger::api_types::API_SERVICE
    );

    let binding = find(
        &docs,
        "RoleBinding",
        "podprobe-extension-apiserver-authentication-reader",
    );
    assert_eq!(binding["metadata"]["namespace"], "kube-system");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
               "name": "extension-apiserver-authentication-reader"})
    );
    assert_eq!(
        binding["subjects"],
        find(&docs, "ClusterRoleBinding", "podprobe")["subjects"]
    );

    let c = container(&docs);
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "status-api", "containerPort": 9443, "protocol": "TCP"})),
        "{:#}",
        c["ports"]
    );
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "status-api-tls")
        .expect("mount status-api-tls");
    assert_eq!(
        mount,
        &json!({"name": "status-api-tls", "mountPath": "/etc/podprobe/status-api", "readOnly": true})
    );
    let volume = pod_spec(&docs)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "status-api-tls")
        .expect("volume status-api-tls");
    assert_eq!(volume["secret"]["secretName"], "podprobe-status-api-tls");
    // podprobe re-reads the mounted files: a new certificate must not
    // restart the DaemonSet.
    assert!(
        daemonset(&docs)["spec"]["template"]["metadata"]
            .get("annotations")
            .is_none()
    );

    // Another release, namespace and port: the names follow.
    let docs = template_as(
        "edge",
        "probes",
        &["--set", "statusApi.port=10443,statusApi.tls.generation=3"],
    );
    let edge_args = find(&docs, "DaemonSet", "edge-podprobe")["spec"]["template"]["spec"]
        ["containers"][0]["args"]
        .clone();
    for arg in [
        "--status-api-listen=0.0.0.0:10443",
        "--status-api-peer-name=edge-podprobe-status-api.probes.svc",
    ] {
        assert!(
            edge_args.as_array().unwrap().contains(&json!(arg)),
            "{arg}: {edge_args:#}"
        );
    }
    assert_eq!(
        find(&docs, "Secret", "edge-podprobe-status-api-tls")["metadata"]["annotations"]["podprobe.io/tls-generation"],
        "3"
    );
    assert_eq!(
        find(&docs, "APIService", "v1alpha1.status.podprobe.io")["spec"]["service"],
        json!({"namespace": "probes", "name": "edge-podprobe-status-api", "port": 443})
    );
    find(
        &docs,
        "RoleBinding",
        "edge-podprobe-extension-apiserver-authentication-reader",
    );

    // Without a cluster (no `lookup`), each render makes new certificates:
    // why deploy/ leaves the status API out.
    let again = template(&[]);
    assert_ne!(
        find(&again, "Secret", "podprobe-status-api-tls")["data"]["tls.key"],
        secret["data"]["tls.key"]
    );
}

/// statusApi.enabled=false renders none of the status API: no Secret,
/// Service, APIService, kube-system binding or reader role, and no
/// listener, port or mount in the DaemonSet.
#[test]
fn the_status_api_can_be_left_out() {
    let docs = template(&["--set", "statusApi.enabled=false"]);
    assert_eq!(status_api_objects(&docs), Vec::<String>::new());
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["namespace"] == "kube-system")
    );
    assert!(!args(&docs).iter().any(|a| a.starts_with("--status-api")));
    let c = container(&docs);
    assert_eq!(
        c["ports"],
        json!([{"name": "http", "containerPort": 9440, "protocol": "TCP"}])
    );
    assert!(!c.to_string().contains("status-api"), "{c:#}");
    assert!(
        !pod_spec(&docs)["volumes"]
            .to_string()
            .contains("status-api")
    );

    // The status API's port must be a port of its own.
    let error = template_error(&["--skip-schema-validation", "--set", "statusApi.port=9440"]);
    assert!(
        error.contains("statusApi.port must differ from listen.port"),
        "{error}"
    );
    let error = template_error(&["--set", "statusApi.tls.generation=0"]);
    assert!(names(&error, "statusApi.tls.generation"), "{error}");
}

/// Whether the ClusterRole `podprobe` grants `patch` on pods themselves (not
/// pods/status).
fn patches_pods(docs: &[Value]) -> bool {
    find(docs, "ClusterRole", "podprobe")["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|rule| {
            rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "pods")
                && rule["verbs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == "patch" || v == "*")
        })
}

/// Whether the marker policy `podprobe-marker-writes` and its binding are
/// rendered (both or neither).
fn has_marker_policy(docs: &[Value]) -> bool {
    let of_kind = |kind: &str| {
        docs.iter()
            .any(|d| d["kind"] == kind && d["metadata"]["name"] == "podprobe-marker-writes")
    };
    let policy = of_kind("ValidatingAdmissionPolicy");
    assert_eq!(
        policy,
        of_kind("ValidatingAdmissionPolicyBinding"),
        "the marker policy and its binding go together"
    );
    policy
}

/// MK2: marker keys reach the flag, and only then does podprobe get `patch`
/// on pods, with the policy that narrows it to those keys.
#[test]
fn marker_keys_grant_patch_on_pods_only_with_their_policy() {
    let docs = template(&[]);
    assert!(!patches_pods(&docs));
    assert!(!args(&docs).iter().any(|a| a.starts_with("--marker-keys")));
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "podprobe-marker-writes")
    );

    let docs = template(&[
        "--set",
        "markers.allowedKeys={role,controller.kubernetes.io/pod-deletion-cost}",
    ]);
    assert!(patches_pods(&docs));
    assert!(
        args(&docs)
            .contains(&"--marker-keys=role,controller.kubernetes.io/pod-deletion-cost".to_string())
    );
    let policy = find(&docs, "ValidatingAdmissionPolicy", "podprobe-marker-writes");
    let allowed = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "allowedKeys")
        .unwrap();
    assert_eq!(
        allowed["expression"],
        r#"["role","controller.kubernetes.io/pod-deletion-cost"]"#
    );
    find(
        &docs,
        "ValidatingAdmissionPolicyBinding",
        "podprobe-marker-writes",
    );
    // Keys the API server would refuse are refused at install.
    assert!(template_error(&["--set", "markers.allowedKeys={Bad Key}"]).contains("allowedKeys"));
}

/// #37: marker keys without the admission policy would leave podprobe's
/// `patch pods` unnarrowed (any pod, any namespace, any field, from one
/// node's token), so the chart refuses to render them, saying why and what
/// to do; with or without the schema.
#[test]
fn marker_keys_without_the_admission_policy_are_refused() {
    for extra in [&[][..], &["--skip-schema-validation"][..]] {
        let mut all = extra.to_vec();
        all.extend_from_slice(&[
            "--set",
            "markers.allowedKeys={role},admissionPolicy.enabled=false",
        ]);
        let error = template_error(&all);
        assert!(
            error.contains("markers.allowedKeys needs admissionPolicy.enabled")
                && error.contains("podprobe-marker-writes")
                && error.contains("any pod")
                && error.contains("set admissionPolicy.enabled=true")
                && error.contains("or remove markers.allowedKeys"),
            "{extra:?}: {error}"
        );
    }
    // The schema admits no other spelling of "off" that the templates would
    // read as off, nor leaving the value out.
    let error = template_error(&[
        "--set",
        "markers.allowedKeys={role}",
        "--set-string",
        "admissionPolicy.enabled=false",
    ]);
    assert!(names(&error, "admissionPolicy.enabled"), "{error}");
    let error = template_error(&[
        "--set",
        "markers.allowedKeys={role},admissionPolicy.enabled=null",
    ]);
    assert!(
        error.contains("/admissionPolicy") && error.contains("'enabled'"),
        "{error}"
    );
    // Without the schema, keys that are not a list of keys are refused too
    // (a string would reach the flag and the policy's CEL as one value).
    for keys in ["markers.allowedKeys=role", "markers.allowedKeys.role=true"] {
        let error = template_error(&["--skip-schema-validation", "--set", keys]);
        assert!(
            error.contains("markers.allowedKeys must be a list of label or annotation keys"),
            "{keys}: {error}"
        );
    }
}

/// #37: `patch` on pods is granted only with both marker keys and the
/// admission policy, and then the marker policy narrows it; no keys, no
/// `patch` on pods, no marker policy and no flag, whatever the policy.
#[test]
fn patch_on_pods_needs_marker_keys_and_the_admission_policy() {
    let docs = template(&[
        "--set",
        "markers.allowedKeys={role},admissionPolicy.enabled=true",
    ]);
    assert!(patches_pods(&docs));
    assert!(has_marker_policy(&docs));
    assert!(args(&docs).contains(&"--marker-keys=role".to_string()));

    for enabled in [true, false] {
        let policy = format!("admissionPolicy.enabled={enabled}");
        // No keys: the default [], or the value taken away with null (which
        // only the schema refuses; the templates read it as no keys).
        for keys in [
            &[][..],
            &[
                "--skip-schema-validation",
                "--set",
                "markers.allowedKeys=null",
            ][..],
        ] {
            let mut all = vec!["--set", policy.as_str()];
            all.extend_from_slice(keys);
            let docs = template(&all);
            assert!(!patches_pods(&docs), "{all:?}");
            assert!(!has_marker_policy(&docs), "{all:?}");
            assert!(
                !args(&docs).iter().any(|a| a.starts_with("--marker-keys")),
                "{all:?}"
            );
            assert_eq!(
                kinds(&docs).contains("ValidatingAdmissionPolicy"),
                enabled,
                "{all:?}"
            );
        }
    }
}

/// WG5: PodDisruptionBudgets are read (list, watch; never written) and
/// `--pdb-guards` passed only when `workloadGuard.podDisruptionBudgets`
/// asks, and only with the workload guard (and its admission policy).
#[test]
fn pdb_guards_grant_reading_pod_disruption_budgets_only_when_asked() {
    let pdb_rules = |docs: &[Value]| -> Vec<Value> {
        find(docs, "ClusterRole", "podprobe")["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|rule| {
                rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "poddisruptionbudgets")
            })
            .cloned()
            .collect()
    };
    let flag = |docs: &[Value]| args(docs).contains(&"--pdb-guards".to_string());
    let docs = template(&[]);
    assert!(pdb_rules(&docs).is_empty() && !flag(&docs));
    let docs = template(&["--set", "workloadGuard.podDisruptionBudgets=true"]);
    assert_eq!(
        pdb_rules(&docs),
        vec![
            serde_json::json!({"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]})
        ]
    );
    assert!(flag(&docs));
    for off in [
        "workloadGuard.enabled=false",
        "admissionPolicy.enabled=false",
    ] {
        let docs = template(&[
            "--set",
            &format!("workloadGuard.podDisruptionBudgets=true,{off}"),
        ]);
        assert!(pdb_rules(&docs).is_empty() && !flag(&docs), "{off}");
    }
}
