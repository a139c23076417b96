//! Rule-by-rule tests of [`normalize`] and [`validate_container_probes`].

use k8s_openapi::api::core::v1::{Container, Probe};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn probe(value: Value) -> Probe {
    serde_json::from_value(value).expect("test probe is a valid core/v1 Probe")
}

/// A container named "app" with ports `web` (8080) and `metrics` (9090) and a
/// little `env`.
fn app() -> Container {
    serde_json::from_value(json!({
        "name": "app",
        "ports": [
            {"name": "web", "containerPort": 8080},
            {"name": "metrics", "containerPort": 9090},
            {"containerPort": 7070}
        ],
        "env": [
            {"name": "HEALTH_FILE", "value": "/tmp/healthy"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]
    }))
    .expect("test container is a valid core/v1 Container")
}

fn ok(kind: ProbeKind, value: Value) -> ProbeSpec {
    normalize(kind, &probe(value), &app()).expect("probe is valid")
}

/// The Display of the error `normalize` gives.
fn err(kind: ProbeKind, value: Value) -> String {
    normalize(kind, &probe(value), &app())
        .expect_err("probe is invalid")
        .to_string()
}

/// Every error of `app` carrying `value` as its `kind` probe.
fn all_errors(kind: ProbeKind, value: Value) -> Vec<String> {
    let mut container = app();
    let slot = match kind {
        ProbeKind::Liveness => &mut container.liveness_probe,
        ProbeKind::Readiness => &mut container.readiness_probe,
        ProbeKind::Startup => &mut container.startup_probe,
    };
    *slot = Some(probe(value));
    validate_container_probes(&container, false)
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

fn tcp_web() -> Value {
    json!({"tcpSocket": {"port": "web"}})
}

fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    base
}

#[test]
fn v1_defaults_applied_when_unset() {
    let spec = ok(ProbeKind::Readiness, json!({"httpGet": {"port": 8080}}));
    assert_eq!(spec.initial_delay_seconds, 0);
    assert_eq!(spec.timeout_seconds, 1);
    assert_eq!(spec.period_seconds, 10);
    assert_eq!(spec.success_threshold, 1);
    assert_eq!(spec.failure_threshold, 3);
    assert_eq!(spec.termination_grace_period_seconds, None);
    assert_eq!(
        spec.handler,
        Handler::HttpGet(HttpGetAction {
            scheme: Scheme::Http,
            host: None,
            port: 8080,
            path: "/".into(),
            headers: vec![],
            protocol: Default::default(),
            extensions: Default::default(),
        })
    );
}

#[test]
fn v1_defaults_applied_when_zero() {
    let spec = ok(
        ProbeKind::Liveness,
        json!({
            "httpGet": {"port": 8080, "path": "", "scheme": ""},
            "initialDelaySeconds": 0, "timeoutSeconds": 0, "periodSeconds": 0,
            "successThreshold": 0, "failureThreshold": 0
        }),
    );
    assert_eq!(
        (
            spec.initial_delay_seconds,
            spec.timeout_seconds,
            spec.period_seconds,
            spec.success_threshold,
            spec.failure_threshold
        ),
        (0, 1, 10, 1, 3)
    );
    let Handler::HttpGet(http) = spec.handler else {
        panic!("expected httpGet, got {:?}", spec.handler);
    };
    assert_eq!((http.scheme, http.path.as_str()), (Scheme::Http, "/"));
}

#[test]
fn v1_explicit_values_kept() {
    let spec = ok(
        ProbeKind::Readiness,
        json!({
            "httpGet": {"port": 8080, "path": "/healthz?full=1", "scheme": "HTTPS", "host": "10.0.0.9",
                        "httpHeaders": [{"name": "X-B", "value": "2"}, {"name": "accept", "value": "a"},
                                        {"name": "X-B", "value": "1"}]},
            "initialDelaySeconds": 5, "timeoutSeconds": 3, "periodSeconds": 7,
            "successThreshold": 2, "failureThreshold": 9
        }),
    );
    assert_eq!(
        (
            spec.initial_delay_seconds,
            spec.timeout_seconds,
            spec.period_seconds,
            spec.success_threshold,
            spec.failure_threshold
        ),
        (5, 3, 7, 2, 9)
    );
    assert_eq!(
        spec.handler,
        Handler::HttpGet(HttpGetAction {
            scheme: Scheme::Https,
            host: Some("10.0.0.9".into()),
            port: 8080,
            path: "/healthz?full=1".into(),
            headers: vec![
                ("X-B".into(), "2".into()),
                ("accept".into(), "a".into()),
                ("X-B".into(), "1".into()),
            ],
            protocol: Default::default(),
            extensions: Default::default(),
        })
    );
}

#[test]
fn v1_grpc_service_defaults_to_empty() {
    let spec = ok(ProbeKind::Liveness, json!({"grpc": {"port": 9000}}));
    assert_eq!(
        spec.handler,
        Handler::Grpc(GrpcAction {
            port: 9000,
            service: String::new(),
            tls: None,
        })
    );
    let spec = ok(
        ProbeKind::Liveness,
        json!({"grpc": {"port": 9000, "service": "db"}}),
    );
    assert_eq!(
        spec.handler,
        Handler::Grpc(GrpcAction {
            port: 9000,
            service: "db".into(),
            tls: None,
        })
    );
}

#[test]
fn empty_host_means_pod_ip() {
    let spec = ok(
        ProbeKind::Readiness,
        json!({"tcpSocket": {"port": 80, "host": ""}}),
    );
    assert_eq!(
        spec.handler,
        Handler::TcpSocket(TcpSocketAction {
            host: None,
            port: 80
        })
    );
    let spec = ok(
        ProbeKind::Readiness,
        json!({"httpGet": {"port": 80, "host": ""}}),
    );
    let Handler::HttpGet(http) = spec.handler else {
        panic!("expected httpGet, got {:?}", spec.handler);
    };
    assert_eq!(http.host, None);
}

#[test]
fn v3_negative_fields_rejected() {
    for field in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        assert_eq!(
            err(ProbeKind::Readiness, with(tcp_web(), json!({ field: -1 }))),
            format!(
                "readinessProbe.{field}: Invalid value: -1: must be greater than or equal to 0"
            )
        );
    }
}

#[test]
fn v3_negative_success_threshold_on_liveness_breaks_two_rules() {
    assert_eq!(
        all_errors(
            ProbeKind::Liveness,
            with(tcp_web(), json!({"successThreshold": -2}))
        ),
        [
            "livenessProbe.successThreshold: Invalid value: -2: must be greater than or equal to 0",
            "livenessProbe.successThreshold: Invalid value: -2: must be 1",
        ]
    );
}

#[test]
fn v4_no_handler_rejected() {
    assert_eq!(
        err(ProbeKind::Readiness, json!({"periodSeconds": 5})),
        "readinessProbe: Required value: must specify a handler type"
    );
}

#[test]
fn v4_more_than_one_handler_rejected() {
    assert_eq!(
        err(
            ProbeKind::Startup,
            json!({"exec": {"command": ["true"]}, "httpGet": {"port": 80}})
        ),
        "startupProbe.httpGet: Forbidden: may not specify more than 1 handler type"
    );
    // Handlers are taken in the order exec, httpGet, tcpSocket, grpc; only the
    // first is checked, every further one is forbidden.
    assert_eq!(
        all_errors(
            ProbeKind::Readiness,
            json!({"grpc": {"port": 9000}, "tcpSocket": {"port": 0}, "httpGet": {"port": 80}})
        ),
        [
            "readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
            "readinessProbe.grpc: Forbidden: may not specify more than 1 handler type",
        ]
    );
    assert_eq!(
        all_errors(
            ProbeKind::Readiness,
            json!({"httpGet": {"port": 0}, "exec": {"command": []}})
        ),
        [
            "readinessProbe.exec.command: Required value",
            "readinessProbe.httpGet: Forbidden: may not specify more than 1 handler type",
        ]
    );
}

#[test]
fn v5_liveness_success_threshold_must_be_1() {
    assert_eq!(
        err(
            ProbeKind::Liveness,
            with(tcp_web(), json!({"successThreshold": 2}))
        ),
        "livenessProbe.successThreshold: Invalid value: 2: must be 1"
    );
}

#[test]
fn v5_startup_success_threshold_must_be_1() {
    assert_eq!(
        err(
            ProbeKind::Startup,
            with(tcp_web(), json!({"successThreshold": 3}))
        ),
        "startupProbe.successThreshold: Invalid value: 3: must be 1"
    );
}

#[test]
fn v5_zero_success_threshold_defaults_to_1_on_liveness() {
    let spec = ok(
        ProbeKind::Liveness,
        with(tcp_web(), json!({"successThreshold": 0})),
    );
    assert_eq!(spec.success_threshold, 1);
}

#[test]
fn v5_readiness_success_threshold_may_exceed_1() {
    let spec = ok(
        ProbeKind::Readiness,
        with(tcp_web(), json!({"successThreshold": 3})),
    );
    assert_eq!(spec.success_threshold, 3);
}

#[test]
fn v6_probe_grace_period_must_be_positive() {
    for (kind, value) in [(ProbeKind::Liveness, 0), (ProbeKind::Startup, -5)] {
        assert_eq!(
            err(
                kind,
                with(tcp_web(), json!({"terminationGracePeriodSeconds": value}))
            ),
            format!(
                "{}.terminationGracePeriodSeconds: Invalid value: {value}: must be greater than 0",
                kind.field_name()
            )
        );
    }
}

#[test]
fn v6_probe_grace_period_kept_for_liveness_and_startup() {
    for kind in [ProbeKind::Liveness, ProbeKind::Startup] {
        let spec = ok(
            kind,
            with(tcp_web(), json!({"terminationGracePeriodSeconds": 7})),
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(7));
    }
}

#[test]
fn v6_probe_grace_period_forbidden_on_readiness() {
    assert_eq!(
        err(
            ProbeKind::Readiness,
            with(tcp_web(), json!({"terminationGracePeriodSeconds": 30}))
        ),
        "readinessProbe.terminationGracePeriodSeconds: Invalid value: 30: must not be set for readinessProbes"
    );
    assert_eq!(
        all_errors(
            ProbeKind::Readiness,
            with(tcp_web(), json!({"terminationGracePeriodSeconds": 0}))
        ),
        [
            "readinessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
            "readinessProbe.terminationGracePeriodSeconds: Invalid value: 0: must not be set for readinessProbes",
        ]
    );
}

#[test]
fn v7_exec_command_required() {
    for exec in [json!({}), json!({"command": []})] {
        assert_eq!(
            err(ProbeKind::Startup, json!({ "exec": exec })),
            "startupProbe.exec.command: Required value"
        );
    }
}

#[test]
fn v7_http_scheme_must_be_http_or_https() {
    for scheme in ["FTP", "https", "http"] {
        assert_eq!(
            err(
                ProbeKind::Readiness,
                json!({"httpGet": {"port": 80, "scheme": scheme}})
            ),
            format!(
                "readinessProbe.httpGet.scheme: Unsupported value: \"{scheme}\": supported values: \"HTTP\", \"HTTPS\""
            )
        );
    }
}

#[test]
fn v7_http_protocol_is_http1_or_http2_and_http2_needs_plain_http_without_host() {
    for (http_get, error) in [
        (
            json!({"port": 80, "protocol": "h2c"}),
            r#"readinessProbe.httpGet.protocol: Unsupported value: "h2c": supported values: "HTTP1", "HTTP2""#,
        ),
        (
            json!({"port": 80, "protocol": "HTTP2", "scheme": "HTTPS"}),
            r#"readinessProbe.httpGet.protocol: Invalid value: "HTTP2": is only supported with HTTP (H2C)"#,
        ),
        (
            json!({"port": 80, "protocol": "HTTP2", "host": "10.0.0.1"}),
            r#"readinessProbe.httpGet.host: Invalid value: "10.0.0.1": must be empty when `protocol` is "HTTP2""#,
        ),
    ] {
        let probe = json!({"httpGet": http_get});
        assert_eq!(err(ProbeKind::Readiness, probe.clone()), error);
        assert_eq!(all_errors(ProbeKind::Readiness, probe), [error]);
    }
    let http1 = ok(
        ProbeKind::Readiness,
        json!({"httpGet": {"port": 80, "protocol": "HTTP1"}}),
    );
    assert!(matches!(http1.handler, Handler::HttpGet(_)));
}

#[test]
fn v7_grpc_mode_is_plaintext_or_tls() {
    assert_eq!(
        err(
            ProbeKind::Liveness,
            json!({"grpc": {"port": 9, "mode": "tls"}})
        ),
        r#"livenessProbe.grpc.mode: Unsupported value: "tls": supported values: "Plaintext", "TLS""#
    );
}

#[test]
fn g8_grpc_mode_tls_is_tls_without_verification_and_plaintext_is_plain() {
    let grpc = |mode: Value| match ok(
        ProbeKind::Readiness,
        json!({"grpc": {"port": 9, "mode": mode}}),
    )
    .handler
    {
        Handler::Grpc(action) => action.tls,
        other => panic!("{other:?}"),
    };
    assert_eq!(grpc(json!("TLS")), Some(TlsSettings::default()));
    assert_eq!(grpc(json!("Plaintext")), None);
    assert_eq!(grpc(Value::Null), None);
}

#[test]
fn g8_podprobe_tls_refines_grpc_mode_tls_and_conflicts_with_plaintext() {
    let object = |mode: &str| {
        decode_probe_object(
            ProbeKind::Readiness,
            &json!({"grpc": {"port": 9, "mode": mode},
                    "podprobe": {"tls": {"serverName": "health.example"}}}),
        )
        .unwrap()
    };
    let spec = normalize_object(ProbeKind::Readiness, &object("TLS"), &app()).unwrap();
    let tls = spec.tls().expect("TLS");
    assert_eq!(
        tls.server_name.as_ref().map(|n| n.to_str().to_string()),
        Some("health.example".into())
    );
    assert_eq!(
        normalize_object(ProbeKind::Readiness, &object("Plaintext"), &app())
            .unwrap_err()
            .to_string(),
        "readinessProbe.podprobe.tls: Forbidden: may not be set with `grpc.mode: Plaintext`"
    );
}

#[test]
fn h23_http2_is_h2c_in_annotations_and_in_the_spec() {
    let h2c = json!({"httpGet": {"port": "web", "protocol": "HTTP2"}, "periodSeconds": 3});
    let protocol = |spec: &ProbeSpec| match &spec.handler {
        Handler::HttpGet(action) => action.protocol,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        protocol(&ok(ProbeKind::Readiness, h2c.clone())),
        HttpProtocol::Http2
    );
    let accepted = normalize_accepted(ProbeKind::Readiness, &probe(h2c), &app()).unwrap();
    assert_eq!(protocol(&accepted), HttpProtocol::Http2);
    let http1 = json!({"httpGet": {"port": "web", "protocol": "HTTP1"}});
    assert_eq!(
        protocol(&ok(ProbeKind::Readiness, http1)),
        HttpProtocol::Http1
    );
    assert_eq!(
        protocol(&ok(
            ProbeKind::Readiness,
            json!({"httpGet": {"port": "web"}})
        )),
        HttpProtocol::Http1
    );
}

#[test]
fn h23_podprobe_http_protocol_is_http_get_protocol_with_its_rules() {
    let object = |http_get: Value, protocol: &str| {
        decode_probe_object(
            ProbeKind::Readiness,
            &json!({"httpGet": http_get, "podprobe": {"http": {"protocol": protocol}}}),
        )
        .unwrap()
    };
    let built = |http_get: Value, protocol: &str| {
        normalize_object(ProbeKind::Readiness, &object(http_get, protocol), &app())
            .map(|spec| match spec.handler {
                Handler::HttpGet(action) => action.protocol,
                other => panic!("{other:?}"),
            })
            .map_err(|e| e.to_string())
    };
    let port = json!({"port": "web"});
    assert_eq!(built(port.clone(), "HTTP2"), Ok(HttpProtocol::Http2));
    assert_eq!(built(port.clone(), "HTTP1"), Ok(HttpProtocol::Http1));
    assert_eq!(
        built(json!({"port": "web", "protocol": "HTTP2"}), "HTTP2"),
        Ok(HttpProtocol::Http2)
    );
    assert_eq!(
        built(json!({"port": "web", "protocol": "HTTP1"}), "HTTP2"),
        Err("readinessProbe.podprobe.http.protocol: Forbidden: may not differ from `httpGet.protocol`".into())
    );
    assert_eq!(
        built(port, "HTTP3"),
        Err(r#"readinessProbe.podprobe.http.protocol: Unsupported value: "HTTP3": supported values: "HTTP1", "HTTP2""#.into())
    );
    assert_eq!(
        built(json!({"port": "web", "scheme": "HTTPS"}), "HTTP2"),
        Err(r#"readinessProbe.podprobe.http.protocol: Invalid value: "HTTP2": is only supported with HTTP (H2C)"#.into())
    );
    assert!(
        built(json!({"port": "web", "host": "10.0.0.1"}), "HTTP2")
            .unwrap_err()
            .contains("must be empty when `protocol` is \"HTTP2\""),
    );
}

#[test]
fn v7_port_number_must_be_in_range() {
    for (handler, port) in [("httpGet", 0), ("tcpSocket", 65536), ("grpc", -1)] {
        assert_eq!(
            err(ProbeKind::Readiness, json!({ handler: {"port": port} })),
            format!(
                "readinessProbe.{handler}.port: Invalid value: {port}: must be between 1 and 65535, inclusive"
            )
        );
    }
}

#[test]
fn v7_port_name_must_be_iana_service_name() {
    assert_eq!(
        err(ProbeKind::Readiness, json!({"httpGet": {"port": "8080"}})),
        r#"readinessProbe.httpGet.port: Invalid value: "8080": must contain at least one letter (a-z)"#
    );
    assert_eq!(
        all_errors(
            ProbeKind::Liveness,
            json!({"tcpSocket": {"port": "-Web--"}})
        ),
        [
            r#"livenessProbe.tcpSocket.port: Invalid value: "-Web--": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"#,
            r#"livenessProbe.tcpSocket.port: Invalid value: "-Web--": must not contain consecutive hyphens"#,
            r#"livenessProbe.tcpSocket.port: Invalid value: "-Web--": must not begin or end with a hyphen"#,
        ]
    );
}

#[test]
fn v7_header_names_must_be_tokens() {
    assert_eq!(
        all_errors(
            ProbeKind::Readiness,
            json!({"httpGet": {"port": 80, "httpHeaders": [
                {"name": "X Bad", "value": "1"},
                {"name": "X-Good", "value": "2"},
                {"name": "", "value": "3"}
            ]}})
        ),
        [
            "readinessProbe.httpGet.httpHeaders: Invalid value: \"X Bad\": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
            "readinessProbe.httpGet.httpHeaders: Invalid value: \"\": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
        ]
    );
}

#[test]
fn v7_errors_come_in_api_server_order() {
    assert_eq!(
        all_errors(
            ProbeKind::Liveness,
            json!({
                "httpGet": {"port": 0, "scheme": "FTP"},
                "periodSeconds": -1,
                "successThreshold": 2,
                "terminationGracePeriodSeconds": -1
            })
        ),
        [
            "livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive",
            r#"livenessProbe.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS""#,
            "livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
            "livenessProbe.terminationGracePeriodSeconds: Invalid value: -1: must be greater than 0",
            "livenessProbe.successThreshold: Invalid value: 2: must be 1",
        ]
    );
    // normalize reports the first of them.
    assert_eq!(
        err(
            ProbeKind::Liveness,
            json!({"httpGet": {"port": 0, "scheme": "FTP"}, "periodSeconds": -1})
        ),
        "livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"
    );
}

#[test]
fn spec_error_names_container_kind_and_field() {
    let e = normalize(
        ProbeKind::Startup,
        &probe(json!({"grpc": {"port": 0}})),
        &app(),
    )
    .expect_err("port 0 is invalid");
    assert_eq!(e.container, "app");
    assert_eq!(e.kind, ProbeKind::Startup);
    assert_eq!(e.field, "startupProbe.grpc.port");
    assert_eq!(
        e.message,
        "Invalid value: 0: must be between 1 and 65535, inclusive"
    );
}

#[test]
fn v9_init_container_without_restart_always_may_not_set_probes() {
    let mut init = app();
    init.liveness_probe = Some(probe(tcp_web()));
    init.startup_probe = Some(probe(json!({"exec": {"command": ["true"]}})));
    let errs: Vec<String> = validate_container_probes(&init, true)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        [
            "livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
            "startupProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
        ]
    );
    init.restart_policy = Some("OnFailure".into());
    assert_eq!(validate_container_probes(&init, true).len(), 2);
}

#[test]
fn v9_restartable_init_and_regular_containers_are_validated() {
    let mut sidecar = app();
    sidecar.restart_policy = Some("Always".into());
    sidecar.readiness_probe = Some(probe(tcp_web()));
    sidecar.liveness_probe = Some(probe(json!({"exec": {}})));
    for is_init in [true, false] {
        let errs = validate_container_probes(&sidecar, is_init);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].to_string(),
            "livenessProbe.exec.command: Required value"
        );
        assert_eq!(
            (errs[0].kind, errs[0].container.as_str()),
            (ProbeKind::Liveness, "app")
        );
    }
    sidecar.liveness_probe = None;
    assert!(validate_container_probes(&sidecar, true).is_empty());
}

#[test]
fn h19_named_port_resolved_against_container() {
    let spec = ok(
        ProbeKind::Readiness,
        json!({"httpGet": {"port": "metrics"}}),
    );
    let Handler::HttpGet(http) = spec.handler else {
        panic!("expected httpGet, got {:?}", spec.handler);
    };
    assert_eq!(http.port, 9090);
    let spec = ok(ProbeKind::Liveness, tcp_web());
    assert_eq!(
        spec.handler,
        Handler::TcpSocket(TcpSocketAction {
            host: None,
            port: 8080
        })
    );
}

#[test]
fn h19_unknown_port_name_is_a_friendly_error() {
    assert_eq!(
        err(ProbeKind::Readiness, json!({"httpGet": {"port": "web2"}})),
        r#"readinessProbe.httpGet.port: port "web2" not found in container "app""#
    );
    assert_eq!(
        err(ProbeKind::Liveness, json!({"tcpSocket": {"port": "db"}})),
        r#"livenessProbe.tcpSocket.port: port "db" not found in container "app""#
    );
    let bare = Container {
        name: "app".into(),
        ..Container::default()
    };
    let e = normalize(
        ProbeKind::Readiness,
        &probe(json!({"httpGet": {"port": "web"}})),
        &bare,
    )
    .expect_err("no ports declared");
    assert_eq!(
        e.to_string(),
        r#"readinessProbe.httpGet.port: port "web" not found in container "app""#
    );
}

#[test]
fn h20_named_port_declared_out_of_range() {
    let broken: Container = serde_json::from_value(json!({
        "name": "app",
        "ports": [{"name": "web", "containerPort": 70000}]
    }))
    .expect("container");
    let e = normalize(ProbeKind::Readiness, &probe(tcp_web()), &broken).expect_err("port 70000");
    assert_eq!(
        e.to_string(),
        "readinessProbe.tcpSocket.port: invalid port number: 70000"
    );
}

#[test]
fn e1_exec_command_expanded_from_container_env() {
    let spec = ok(
        ProbeKind::Liveness,
        json!({"exec": {"command": ["cat", "$(HEALTH_FILE)", "$(HOME)", "$$(HEALTH_FILE)"]}}),
    );
    assert_eq!(
        spec.handler,
        Handler::Exec(ExecAction {
            command: vec![
                "cat".into(),
                "/tmp/healthy".into(),
                "$(HOME)".into(),
                "$(HEALTH_FILE)".into()
            ],
        })
    );
}

#[test]
fn e2_value_from_expands_to_empty_in_normalize() {
    let spec = ok(
        ProbeKind::Readiness,
        json!({"exec": {"command": ["ping", "-c1", "[$(POD_IP)]"]}}),
    );
    assert_eq!(
        spec.handler,
        Handler::Exec(ExecAction {
            command: vec!["ping".into(), "-c1".into(), "[]".into()],
        })
    );
}

/// Any JSON-ish probe: each field absent or set to an arbitrary value of its
/// type, with values biased towards the edges the rules care about.
/// A probe object with podprobe's extensions, through the one strict parser.
fn object_spec(kind: ProbeKind, value: Value) -> Result<ProbeSpec, String> {
    let object = decode_probe_object(kind, &value).map_err(|e| e.to_string())?;
    normalize_object(kind, &object, &app()).map_err(|e| e.to_string())
}

#[test]
fn period_milliseconds_overrides_period_seconds_for_any_handler() {
    for handler in [
        tcp_web(),
        json!({"exec": {"command": ["true"]}}),
        json!({"httpGet": {"port": 8080}}),
        json!({"grpc": {"port": 9090}}),
    ] {
        let spec = object_spec(
            ProbeKind::Liveness,
            with(
                handler.clone(),
                json!({"periodSeconds": 7, "podprobe": {"periodMilliseconds": 250}}),
            ),
        )
        .unwrap();
        assert_eq!(spec.period(), Duration::from_millis(250), "{handler}");
        assert_eq!(spec.period_seconds, 7, "kept as written");
        let plain =
            object_spec(ProbeKind::Liveness, with(handler, json!({"podprobe": {}}))).unwrap();
        assert_eq!(plain.period(), Duration::from_secs(10), "the default");
    }
    assert_eq!(
        object_spec(
            ProbeKind::Readiness,
            with(tcp_web(), json!({"podprobe": {"periodMilliseconds": 99}}))
        ),
        Err("readinessProbe.podprobe.periodMilliseconds: Invalid value: 99: must be greater than or equal to 100".to_string())
    );
    // The core probe is validated first, with the API server's own rules,
    // and a timeout longer than the period is no error (it never is there).
    assert_eq!(
        object_spec(
            ProbeKind::Readiness,
            with(
                tcp_web(),
                json!({"periodSeconds": -1, "podprobe": {"periodMilliseconds": 50}})
            )
        ),
        Err(
            "readinessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0"
                .to_string()
        )
    );
    let slow = object_spec(
        ProbeKind::Readiness,
        with(
            tcp_web(),
            json!({"timeoutSeconds": 5, "podprobe": {"periodMilliseconds": 100}}),
        ),
    )
    .unwrap();
    assert_eq!(
        (slow.timeout(), slow.period()),
        (Duration::from_secs(5), Duration::from_millis(100))
    );
}

fn arb_probe() -> impl Strategy<Value = Value> {
    let int = prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(65535),
        Just(65536),
        any::<i32>().prop_map(i64::from)
    ];
    let text = prop_oneof![
        Just(String::new()),
        Just("web".to_string()),
        Just("8080".to_string()),
        Just("HTTPS".to_string()),
        "[ -~]{0,20}",
        ".{0,8}",
    ];
    let port = prop_oneof![
        int.clone().prop_map(Value::from),
        text.clone().prop_map(Value::from)
    ];
    let opt = |s: BoxedStrategy<Value>| proptest::option::of(s).boxed();
    let headers = proptest::collection::vec(
        (text.clone(), text.clone()).prop_map(|(n, v)| json!({"name": n, "value": v})),
        0..3,
    )
    .prop_map(Value::from);
    let http = (port.clone(), opt(text.clone().prop_map(Value::from).boxed()), opt(text.clone().prop_map(Value::from).boxed()), opt(headers.boxed()))
        .prop_map(|(port, path, scheme, headers)| json!({"port": port, "path": path, "scheme": scheme, "httpHeaders": headers}));
    let exec = proptest::collection::vec(text.clone(), 0..4).prop_map(|c| json!({"command": c}));
    let tcp = (port, opt(text.clone().prop_map(Value::from).boxed()))
        .prop_map(|(port, host)| json!({"port": port, "host": host}));
    let grpc = (any::<i32>(), opt(text.prop_map(Value::from).boxed()))
        .prop_map(|(port, service)| json!({"port": port, "service": service}));
    let ints = proptest::collection::vec(opt(int.prop_map(Value::from).boxed()), 6);
    (
        opt(exec.boxed()),
        opt(http.boxed()),
        opt(tcp.boxed()),
        opt(grpc.boxed()),
        ints,
    )
        .prop_map(|(exec, http, tcp, grpc, ints)| {
            let mut p = json!({
                "exec": exec, "httpGet": http, "tcpSocket": tcp, "grpc": grpc,
                "initialDelaySeconds": ints[0], "timeoutSeconds": ints[1], "periodSeconds": ints[2],
                "successThreshold": ints[3], "failureThreshold": ints[4],
                "terminationGracePeriodSeconds": ints[5]
            });
            if let Some(map) = p.as_object_mut() {
                map.retain(|_, v| !v.is_null());
            }
            p
        })
}

proptest! {
    #[test]
    fn normalize_never_panics_and_accepts_only_valid_probes(
        value in arb_probe(),
        kind in prop_oneof![Just(ProbeKind::Liveness), Just(ProbeKind::Readiness), Just(ProbeKind::Startup)],
    ) {
        // Out-of-range integers (terminationGracePeriodSeconds is i64, the
        // others i32) make some documents unparsable; those are skipped.
        if let Ok(p) = serde_json::from_value::<Probe>(value) {
            match normalize(kind, &p, &app()) {
                Ok(spec) => {
                    prop_assert!(spec.timeout_seconds >= 1 && spec.period_seconds >= 1);
                    prop_assert!(spec.success_threshold >= 1 && spec.failure_threshold >= 1);
                    prop_assert!(spec.initial_delay_seconds >= 0);
                    if kind != ProbeKind::Readiness {
                        prop_assert_eq!(spec.success_threshold, 1);
                    }
                }
                Err(e) => {
                    prop_assert!(e.field.starts_with(kind.field_name()), "{}", e);
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn e2_expansion_without_dollar_is_identity(input in "[^$]*") {
        let env = app().env.unwrap_or_default();
        let vars = env_map(&env);
        prop_assert_eq!(expand(&input, &vars), input);
    }
}

#[test]
fn h19_accepted_probe_with_an_undeclared_port_name_keeps_the_port_error() {
    let accepted = |value| normalize_accepted(ProbeKind::Readiness, &probe(value), &app());
    let spec = accepted(json!({"tcpSocket": {"port": "admin"}, "periodSeconds": 3})).unwrap();
    assert_eq!(
        spec.handler,
        Handler::Unresolvable(PortError::NotANumber {
            port: "admin".into(),
            reason: AtoiFailure::InvalidSyntax
        })
    );
    assert_eq!((spec.period_seconds, spec.timeout_seconds), (3, 1));
    // A resolvable probe is normalised as usual.
    assert_eq!(
        accepted(tcp_web()).unwrap(),
        ok(ProbeKind::Readiness, tcp_web())
    );
    // Anything else the API server would have refused stays an error.
    let invalid = accepted(json!({"tcpSocket": {"port": "admin"}, "periodSeconds": -1}));
    assert!(invalid.is_err(), "{invalid:?}");
}

#[test]
fn an_exec_command_too_long_once_expanded_is_a_field_error() {
    let mut container = app();
    container.env = Some(vec![
        serde_json::from_value(json!({"name": "A", "value": "x".repeat(100_000)}))
            .expect("env var"),
    ]);
    let bomb = probe(json!({"exec": {"command": ["sh", "-c", "$(A) ".repeat(2_000)]}}));
    let error = normalize(ProbeKind::Readiness, &bomb, &container)
        .expect_err("a 200 MB command is refused")
        .to_string();
    assert!(
        error.contains(
            "readinessProbe.exec.command: Too long: may not be more than 2097152 bytes \
             (once `$(VAR)` references are expanded from the container's env)"
        ),
        "{error}"
    );
}

/// A probe object of the annotation, extensions and all.
fn ok_object(value: Value) -> ProbeSpec {
    let object = decode_probe_object(ProbeKind::Readiness, &value).expect("decodes");
    normalize_object(ProbeKind::Readiness, &object, &app()).expect("probe is valid")
}

#[test]
fn a_client_identity_stands_in_for_the_secret_on_either_tls_handler() {
    let identity = || {
        let (cert, key) = crate::testing::pem_pair();
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        ClientIdentity::new(
            chain,
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
    };
    let secret = json!({"tls": {"clientCertificate": {"secretName": "app-client"}}});
    for handler in [
        json!({"httpGet": {"port": 8443, "scheme": "HTTPS"}}),
        json!({"grpc": {"port": 9443}}),
    ] {
        let mut spec = ok_object(with(handler, json!({"podprobe": secret})));
        assert_eq!(spec.client_certificate_secret(), Some("app-client"));
        let presented = identity();
        assert!(spec.present_client_identity(presented.clone()));
        assert_eq!(spec.client_certificate_secret(), None);
        assert_eq!(
            spec.tls().and_then(|tls| tls.client_identity.clone()),
            Some(presented)
        );
    }
    for no_tls in [
        json!({"httpGet": {"port": 8080}}),
        json!({"grpc": {"port": 9090}}),
        tcp_web(),
    ] {
        let mut spec = ok_object(no_tls);
        assert_eq!(spec.tls(), None);
        assert!(!spec.present_client_identity(identity()));
    }
}

#[test]
fn wg1_restart_budget_on_liveness_and_floor_on_readiness_only() {
    use super::extension::workload_options::PodCount;
    let normalized = |kind: ProbeKind, podprobe: Value| {
        let object = decode_probe_object(
            kind,
            &json!({"tcpSocket": {"port": 80}, "podprobe": podprobe}),
        )
        .map_err(|e| e.to_string())?;
        normalize_object(kind, &object, &app()).map_err(|e| e.to_string())
    };
    let budget = json!({"restartBudget": {"maxUnavailable": "25%", "maxDeferralSeconds": 60}});
    let floor = json!({"readinessFloor": {"minReady": 2}});
    let live = normalized(ProbeKind::Liveness, budget.clone()).unwrap();
    let restart = live.workload.restart_budget.expect("a budget");
    assert_eq!(
        (restart.max_unavailable, restart.max_deferral_seconds),
        (PodCount::Percent(25), 60)
    );
    let ready = normalized(ProbeKind::Readiness, floor.clone()).unwrap();
    let held = ready.workload.readiness_floor.expect("a floor");
    assert_eq!(held.min_ready, PodCount::Count(2));
    let bad = normalized(
        ProbeKind::Readiness,
        json!({"readinessFloor": {"minReady": "0%"}}),
    )
    .unwrap_err();
    assert!(
        bad.contains("readinessFloor.minReady: Invalid value"),
        "{bad}"
    );
    for (kind, podprobe, field) in [
        (
            ProbeKind::Readiness,
            budget.clone(),
            "readinessProbe.podprobe.restartBudget",
        ),
        (
            ProbeKind::Startup,
            budget,
            "startupProbe.podprobe.restartBudget",
        ),
        (
            ProbeKind::Liveness,
            floor,
            "livenessProbe.podprobe.readinessFloor",
        ),
    ] {
        let error = normalized(kind, podprobe).unwrap_err();
        assert!(error.starts_with(&format!("{field}: Forbidden")), "{error}");
    }
    let error = normalized(
        ProbeKind::Liveness,
        json!({"restartBudget": {"maxUnavailable": 1, "other": 2}}),
    )
    .unwrap_err();
    assert!(error.contains("restartBudget.other"), "{error}");
}
