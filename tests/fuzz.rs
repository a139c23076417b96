//! The fuzz suite (issue 10, "no panic, whatever the input"): every parser
//! that reads outside input gets structured but hostile input and must
//! return, never panic; the probes against hostile servers must also return
//! a verdict within their timeout. See `tests/FUZZ.md` for what each target
//! covers and the results of the long runs.
//!
//! A plain `cargo test` runs every target briefly (a smoke run of seconds).
//! `PODPROBE_FUZZ_CASES` sets the number of cases of the pure targets; the
//! network targets run a fraction of it (they are slower), at least one:
//!
//! ```sh
//! PODPROBE_FUZZ_CASES=1000000 cargo test --release --test fuzz -- annotation
//! ```
//!
//! `PODPROBE_FUZZ_CASE_MS` paces the network targets in long runs (see
//! [`min_case_time`]); `PODPROBE_FUZZ_LAST_CASE` keeps each case's input in
//! a file until the next one starts (see [`remember`]).
//!
//! A panic anywhere on the test's thread counts, also inside tasks the code
//! under test spawns (hyper's and tonic's connection tasks): each network
//! case runs on a fresh current-thread runtime, and a panic hook records
//! panics per thread.

mod support {
    pub mod http_server;
}

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use podprobe::cli::simulate::{self, engine, script};
use podprobe::daemon::flags::ModeArg;
use podprobe::probe::http as http_probe;
use podprobe::probe::{exec, grpc};
use podprobe::runtime::cri::{CriClient, ExecSyncResponse};
use podprobe_core::spec::ProbeKind;
use podprobe_core::spec::destinations::{AllowedHost, Destinations};
use podprobe_core::spec::probe_spec::budget::PodBudget;
use podprobe_core::spec::probe_spec::{
    self, Handler, HttpGetAction, Scheme, expand_command, normalize, normalize_accepted,
    resolve_container_port, validate_container_probes,
};
use podprobe_core::status::annotation::parse_probes;
use podprobe_core::status::{PROBES_ANNOTATION, check_hosts, pod_probes};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestCaseError;
use prost::Message;
use serde_json::{Map, Value};
use support::http_server::{Step, TestServer};
use tokio::net::{TcpListener, UnixListener};

const USER_AGENT: &str = "kube-probe/1.35";
const LOCAL: &str = "127.0.0.1:0";

// ---------------------------------------------------------------------------
// Harness

/// Cases of a target: `PODPROBE_FUZZ_CASES` (default 512) divided by
/// `divisor`, at least one.
fn cases(divisor: u32) -> u32 {
    let total = std::env::var("PODPROBE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(512);
    (total / divisor).max(1)
}

fn config(divisor: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(divisor),
        // Network cases are slow to shrink; a readable case soon is enough.
        max_shrink_iters: if divisor > 1 { 256 } else { 4096 },
        ..ProptestConfig::default()
    }
}

thread_local! {
    /// Panics on this thread since the last [`no_panic`].
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Records every panic on its thread (then prints it as usual), so that a
/// panic inside a spawned task, which tokio catches, still fails the case.
fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.borrow_mut().push(info.to_string()));
            default(info);
        }));
    });
}

/// The panics on this thread since the last call.
fn take_panics() -> Vec<String> {
    PANICS.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Fails the case if anything on this thread panicked since the last
/// [`take_panics`].
fn no_panic() -> Result<(), TestCaseError> {
    let panics = take_panics();
    if panics.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "panicked: {}",
            panics.join("\n")
        )))
    }
}

/// Runs `future` on a fresh current-thread runtime (its tasks, and their
/// panics, stay on this thread; they all end with the runtime), failing
/// the case on a panic or when it has not returned after `limit`.
fn run_case<F: Future>(limit: Duration, future: F) -> Result<F::Output, TestCaseError> {
    record_panics();
    // A panic of an earlier case (proptest caught it) is not this one's.
    take_panics();
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let output = runtime.block_on(async { tokio::time::timeout(limit, future).await });
    drop(runtime);
    no_panic()?;
    std::thread::sleep(min_case_time().saturating_sub(started.elapsed()));
    output.map_err(|_| TestCaseError::fail(format!("did not return within {limit:?}")))
}

/// `PODPROBE_FUZZ_CASE_MS`: the least time a network case takes (default
/// none). Every case leaves loopback sockets in TIME_WAIT for a minute; a
/// long run paced at a few milliseconds a case keeps them well short of
/// the ephemeral port range, which other tests on the machine need too.
fn min_case_time() -> Duration {
    static MIN: OnceLock<Duration> = OnceLock::new();
    *MIN.get_or_init(|| {
        let ms = std::env::var("PODPROBE_FUZZ_CASE_MS").ok();
        Duration::from_millis(ms.and_then(|ms| ms.parse().ok()).unwrap_or(0))
    })
}

/// `PODPROBE_FUZZ_LAST_CASE`: a file each case's input is written to
/// before it runs (default none). A case that kills the process (an
/// allocation too large, a stack overflow) cannot be shrunk or reported
/// by proptest; this leaves its input behind.
fn remember(case: &impl std::fmt::Debug) {
    static PATH: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    let path = PATH.get_or_init(|| std::env::var_os("PODPROBE_FUZZ_LAST_CASE").map(Into::into));
    if let Some(path) = path {
        std::fs::write(path, format!("{case:#?}\n")).expect("write the last case");
    }
}

/// Runs a pure case, failing it also on a panic that the code under test
/// caught itself (the simulator's workers log and swallow theirs, W14).
fn pure_case(case: impl FnOnce()) -> Result<(), TestCaseError> {
    record_panics();
    take_panics();
    case();
    no_panic()
}

// ---------------------------------------------------------------------------
// Hostile text, numbers and JSON

/// Text built from what the parsers treat specially (escapes, `$(VAR)`,
/// URL delimiters, quotes), multi-byte and control characters, and
/// arbitrary characters.
fn hostile_text() -> BoxedStrategy<String> {
    const PIECES: &[&str] = &[
        "",
        "a",
        "app",
        "web",
        "0",
        "7",
        "-1",
        "8080",
        "99999999999999999999",
        "%",
        "%25",
        "%zz",
        "%c3",
        "%e2%82",
        "%00",
        "%2F",
        "$",
        "$$",
        "$(",
        ")",
        "$(A)",
        "$(PORT)",
        "\u{e9}",
        "\u{1f600}",
        "\u{202e}",
        "\u{feff}",
        "\u{fffd}",
        "\u{0}",
        "\u{7f}",
        "\n",
        "\r\n",
        "\t",
        " ",
        "/",
        ":",
        "?",
        "#",
        "[",
        "]",
        "@",
        ".",
        "..",
        "//",
        "http:",
        "https://",
        "::1",
        "\\",
        "\"",
        "'",
        "{",
        "}",
        ",",
        "*",
    ];
    let piece = prop_oneof![
        6 => select(PIECES).prop_map(str::to_string),
        1 => any::<char>().prop_map(String::from),
        1 => "\\PC{0,6}",
    ];
    vec(piece, 0..10).prop_map(|v| v.concat()).boxed()
}

/// Integers and floats at and past every boundary the code cares about.
fn hostile_number() -> BoxedStrategy<Value> {
    const EDGES: &[i64] = &[
        0,
        1,
        -1,
        2,
        3,
        10,
        65535,
        65536,
        i32::MAX as i64,
        i32::MIN as i64,
        i32::MAX as i64 + 1,
        i64::MAX,
        i64::MIN,
    ];
    prop_oneof![
        4 => select(EDGES).prop_map(Value::from),
        2 => (-5i64..100).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        1 => select(&[0.5, -0.0, 1e308, -1e308, 1e-300, 604800.0005, 0.0004][..])
            .prop_map(Value::from),
    ]
    .boxed()
}

/// Any JSON value, nested a few levels.
fn any_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        hostile_number(),
        hostile_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            vec((hostile_text(), inner), 0..5)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Mostly `plausible`, sometimes any JSON at all.
fn mostly(plausible: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![5 => plausible, 1 => any_json()].boxed()
}

/// An object with each of `fields` present or not, and sometimes a field
/// the schema does not know.
fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let present: Vec<_> = fields
        .into_iter()
        .map(|(name, value)| proptest::option::of(value).prop_map(move |v| (name, v)))
        .collect();
    let stray = proptest::option::weighted(0.1, (hostile_text(), any_json()));
    (present, stray)
        .prop_map(|(present, stray)| {
            let mut map = Map::new();
            for (name, value) in present {
                if let Some(value) = value {
                    map.insert(name.to_string(), value);
                }
            }
            if let Some((name, value)) = stray {
                map.insert(name, value);
            }
            Value::Object(map)
        })
        .boxed()
}

fn string_from(pool: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![
        3 => select(pool).prop_map(Value::from),
        1 => hostile_text().prop_map(Value::from),
    ]
    .boxed()
}

/// Serialized `value`, sometimes cut short or with text spliced in, to
/// reach the JSON and YAML parsers' own errors.
fn mangled(value: Value) -> BoxedStrategy<String> {
    let text = value.to_string();
    let len = text.len();
    prop_oneof![
        6 => Just(text.clone()),
        1 => (0..=len).prop_map({
            let text = text.clone();
            move |cut| text.chars().take(cut).collect()
        }),
        1 => (0..=len, hostile_text()).prop_map(move |(at, splice)| {
            let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
            format!("{}{splice}{}", &text[..at], &text[at..])
        }),
    ]
    .boxed()
}

/// Text no serializer would write: deep nesting, huge numbers, stray
/// tokens.
fn raw_document() -> BoxedStrategy<String> {
    prop_oneof![
        (1usize..300).prop_map(|depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth))),
        (1usize..300).prop_map(|depth| "{\"a\":".repeat(depth)),
        hostile_text(),
        Just("1e99999".to_string()),
        Just("-0".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("{\"app\": {\"readinessProbe\": {\"httpGet\": {\"port\": 1e400}}}}".to_string()),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------
// Pods, containers and probes

const CONTAINER_NAMES: &[&str] = &["app", "web", "side", "init", "\u{e9}", "", "a b"];
const PORT_NAMES: &[&str] = &[
    "web", "http", "", "8080", "0x50", "-1", "65536", " 80", "+80",
];

/// A port as `httpGet.port` / `tcpSocket.port` may hold it.
fn port_json() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => hostile_number(),
        2 => (1u16..=65535).prop_map(Value::from),
        2 => string_from(PORT_NAMES),
    ]
    .boxed()
}

fn seconds_json() -> BoxedStrategy<Value> {
    prop_oneof![3 => (0i64..30).prop_map(Value::from), 1 => hostile_number()].boxed()
}

/// A core/v1 `Probe` as JSON: any of the four handlers (several at once
/// too), timing fields, values mostly plausible.
fn probe_json() -> BoxedStrategy<Value> {
    let text = || mostly(hostile_text().prop_map(Value::from).boxed());
    let header = object(vec![("name", text()), ("value", text())]);
    let handler = |fields| proptest::option::weighted(0.3, mostly(object(fields)));
    let handlers = (
        handler(vec![(
            "command",
            mostly(vec(text(), 0..4).prop_map(Value::Array).boxed()),
        )]),
        handler(vec![
            ("path", text()),
            ("port", port_json()),
            ("host", string_from(&["127.0.0.1", "::1", "localhost", ""])),
            ("scheme", string_from(&["HTTP", "HTTPS", "http", "", "FTP"])),
            (
                "httpHeaders",
                mostly(vec(header, 0..4).prop_map(Value::Array).boxed()),
            ),
        ]),
        handler(vec![("port", port_json()), ("host", text())]),
        handler(vec![("port", port_json()), ("service", text())]),
    );
    let timing = object(vec![
        ("initialDelaySeconds", seconds_json()),
        ("timeoutSeconds", seconds_json()),
        ("periodSeconds", seconds_json()),
        ("successThreshold", seconds_json()),
        ("failureThreshold", seconds_json()),
        ("terminationGracePeriodSeconds", seconds_json()),
    ]);
    (handlers, timing)
        .prop_map(|((exec, http_get, tcp, grpc), timing)| {
            let mut probe = timing;
            let map = probe.as_object_mut().expect("an object");
            for (name, handler) in [
                ("exec", exec),
                ("httpGet", http_get),
                ("tcpSocket", tcp),
                ("grpc", grpc),
            ] {
                if let Some(handler) = handler {
                    map.insert(name.to_string(), handler);
                }
            }
            probe
        })
        .boxed()
}

fn container(name: &'static str) -> BoxedStrategy<Container> {
    let port = (
        proptest::option::of(select(PORT_NAMES)),
        prop_oneof![3 => 1i32..=65535, 1 => any::<i32>()],
    )
        .prop_map(|(name, number)| ContainerPort {
            name: name.map(str::to_string),
            container_port: number,
            ..ContainerPort::default()
        });
    let env = (
        select(&["A", "PORT", "HOST", "", "$(A)"][..]),
        proptest::option::of(hostile_text()),
    )
        .prop_map(|(name, value)| EnvVar {
            name: name.to_string(),
            value,
            ..EnvVar::default()
        });
    (
        proptest::option::of(vec(port, 0..4)),
        proptest::option::of(vec(env, 0..4)),
        proptest::option::of(select(&["Always", "Never", ""][..])),
    )
        .prop_map(move |(ports, env, restart_policy)| Container {
            name: name.to_string(),
            ports,
            env,
            restart_policy: restart_policy.map(str::to_string),
            ..Container::default()
        })
        .boxed()
}

/// A pod spec with one to three containers and up to two init
/// containers, mostly with distinct names, some with probes in the spec.
fn pod_spec() -> BoxedStrategy<PodSpec> {
    let distinct = proptest::sample::subsequence(CONTAINER_NAMES, 1..=5)
        .prop_shuffle()
        .prop_flat_map(|names| (0..names.len()).prop_map(move |split| (names.clone(), split)))
        .prop_map(|(names, split)| {
            let split = split.max(1);
            (names[..split].to_vec(), names[split..].to_vec())
        });
    let any_names = (
        vec(select(CONTAINER_NAMES), 1..4),
        vec(select(CONTAINER_NAMES), 0..3),
    );
    prop_oneof![5 => distinct, 1 => any_names]
        .prop_flat_map(|(regular, init)| {
            let build = |names: Vec<&'static str>| {
                names
                    .into_iter()
                    .map(|name| with_spec_probes(container(name)))
                    .collect::<Vec<_>>()
            };
            (build(regular), build(init))
        })
        .prop_map(|(containers, init)| PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..PodSpec::default()
        })
        .boxed()
}

/// `container` with, sometimes, probes of its own (authority mode's).
fn with_spec_probes(container: BoxedStrategy<Container>) -> BoxedStrategy<Container> {
    let probe = |kind| proptest::option::weighted(0.3, typed_probe_of(kind));
    (
        container,
        probe(ProbeKind::Liveness),
        probe(ProbeKind::Readiness),
        probe(ProbeKind::Startup),
    )
        .prop_map(|(container, liveness, readiness, startup)| Container {
            liveness_probe: liveness.flatten(),
            readiness_probe: readiness.flatten(),
            startup_probe: startup.flatten(),
            ..container
        })
        .boxed()
}

/// A `kind` probe, mostly valid with a few hostile mutations, when it
/// decodes as a core/v1 `Probe`.
fn typed_probe_of(kind: ProbeKind) -> BoxedStrategy<Option<Probe>> {
    prop_oneof![3 => mutated(valid_probe(kind)), 1 => probe_json()]
        .prop_map(|json| serde_json::from_value(json).ok())
        .boxed()
}

/// Text any handler field could hold as it is.
fn plain() -> BoxedStrategy<String> {
    "[a-z0-9._-]{0,12}".boxed()
}

/// A valid `kind` probe as JSON: one handler, timing in range.
fn valid_probe(kind: ProbeKind) -> BoxedStrategy<Value> {
    let port = prop_oneof![
        4 => (1u16..=65535).prop_map(Value::from),
        1 => select(&["web", "http"][..]).prop_map(Value::from),
    ];
    let header = ("[A-Za-z][A-Za-z-]{0,8}", plain())
        .prop_map(|(name, value)| serde_json::json!({"name": name, "value": value}));
    let handler = prop_oneof![
        vec(plain(), 1..4).prop_map(|command| serde_json::json!({"exec": {"command": command}})),
        (
            plain(),
            port.clone(),
            select(&["HTTP", "HTTPS"][..]),
            vec(header, 0..3)
        )
            .prop_map(
                |(path, port, scheme, headers)| serde_json::json!({"httpGet": {
                    "path": format!("/{path}"), "port": port, "scheme": scheme,
                    "httpHeaders": headers,
                }})
            ),
        port.prop_map(|port| serde_json::json!({"tcpSocket": {"port": port}})),
        (1u16..=65535, proptest::option::of(plain())).prop_map(|(port, service)| {
            let mut grpc = serde_json::json!({"port": port});
            if let Some(service) = service {
                grpc["service"] = service.into();
            }
            serde_json::json!({ "grpc": grpc })
        }),
    ];
    let readiness = kind == ProbeKind::Readiness;
    let success = if readiness { 1..=3 } else { 1..=1 };
    let timing = (
        proptest::option::of(0i32..30),
        proptest::option::of(1i32..5),
        proptest::option::of(1i32..30),
        proptest::option::of(success),
        proptest::option::of(1i32..5),
        proptest::option::of(1i64..60).prop_map(move |g| g.filter(|_| !readiness)),
    );
    (handler, timing)
        .prop_map(
            |(mut probe, (delay, timeout, period, success, failure, grace))| {
                let fields = probe.as_object_mut().expect("an object");
                for (name, value) in [
                    ("initialDelaySeconds", delay.map(i64::from)),
                    ("timeoutSeconds", timeout.map(i64::from)),
                    ("periodSeconds", period.map(i64::from)),
                    ("successThreshold", success.map(i64::from)),
                    ("failureThreshold", failure.map(i64::from)),
                    ("terminationGracePeriodSeconds", grace),
                ] {
                    if let Some(value) = value {
                        fields.insert(name.to_string(), value.into());
                    }
                }
                probe
            },
        )
        .boxed()
}

/// A valid annotation for `spec`: some of its probeable containers, each
/// with some valid probes.
fn valid_annotation(spec: &PodSpec) -> BoxedStrategy<Value> {
    let sidecars = spec.init_containers.iter().flatten();
    let names: Vec<String> = spec
        .containers
        .iter()
        .chain(sidecars.filter(|c| c.restart_policy.as_deref() == Some("Always")))
        .map(|c| c.name.clone())
        .collect();
    let entry = || {
        (
            proptest::option::of(valid_probe(ProbeKind::Startup)),
            proptest::option::of(valid_probe(ProbeKind::Readiness)),
            proptest::option::of(valid_probe(ProbeKind::Liveness)),
        )
            .prop_map(|(startup, readiness, liveness)| {
                let mut entry = Map::new();
                for (kind, probe) in [
                    (ProbeKind::Startup, startup),
                    (ProbeKind::Readiness, readiness),
                    (ProbeKind::Liveness, liveness),
                ] {
                    if let Some(probe) = probe {
                        entry.insert(kind.field_name().to_string(), probe);
                    }
                }
                Value::Object(entry)
            })
    };
    let entries: Vec<_> = names
        .into_iter()
        .map(|name| proptest::option::weighted(0.7, entry()).prop_map(move |e| (name.clone(), e)))
        .collect();
    entries
        .prop_map(|entries| {
            let present = entries.into_iter().filter_map(|(n, e)| e.map(|e| (n, e)));
            Value::Object(present.collect())
        })
        .boxed()
}

/// One change to a document, at a place [`mutate`] picks.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    Remove,
    Insert(String, Value),
}

fn mutation() -> BoxedStrategy<Mutation> {
    let leaf = prop_oneof![
        3 => hostile_number(),
        3 => hostile_text().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Array(Vec::new())),
        1 => Just(Value::Object(Map::new())),
    ];
    prop_oneof![
        5 => leaf.prop_map(Mutation::Replace),
        1 => any_json().prop_map(Mutation::Replace),
        2 => Just(Mutation::Remove),
        1 => (hostile_text(), any_json()).prop_map(|(k, v)| Mutation::Insert(k, v)),
    ]
    .boxed()
}

/// Applies `mutation` at the node `path` leads to: each step descends
/// into a child (three times in four) or stops.
fn mutate(node: &mut Value, path: &[usize], mutation: Mutation) {
    let (step, rest) = match path.split_first() {
        Some((&step, rest)) => (step, rest),
        None => (0, &[][..]),
    };
    let descend = !path.is_empty() && step % 4 != 0;
    match node {
        Value::Object(fields) if descend && !fields.is_empty() => {
            let key = fields.keys().nth(step % fields.len()).cloned();
            if let Some(child) = key.and_then(|k| fields.get_mut(&k)) {
                return mutate(child, rest, mutation);
            }
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let at = step % items.len();
            return mutate(&mut items[at], rest, mutation);
        }
        _ => {}
    }
    match (mutation, node) {
        (Mutation::Replace(value), node) => *node = value,
        (Mutation::Remove, Value::Object(fields)) if !fields.is_empty() => {
            let key = fields.keys().nth(step % fields.len()).cloned();
            key.map(|k| fields.remove(&k));
        }
        (Mutation::Remove, Value::Array(items)) if !items.is_empty() => {
            items.remove(step % items.len());
        }
        (Mutation::Remove, node) => *node = Value::Null,
        (Mutation::Insert(key, value), Value::Object(fields)) => {
            fields.insert(key, value);
        }
        (Mutation::Insert(_, value), Value::Array(items)) => items.push(value),
        (Mutation::Insert(key, value), node) => {
            *node = Value::Object([(key, value)].into_iter().collect())
        }
    }
}

/// `valid` with none to three mutations: a valid document a third of the
/// time, otherwise one a few edits away from valid.
fn mutated(valid: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    let edit = (vec(any::<usize>(), 0..6), mutation());
    let edits = prop_oneof![1 => Just(Vec::new()), 2 => vec(edit, 1..4)];
    (valid, edits)
        .prop_map(|(mut value, mutations)| {
            for (path, mutation) in mutations {
                mutate(&mut value, &path, mutation);
            }
            value
        })
        .boxed()
}

/// A pod spec and a `podprobe.io/probes` value for it: valid and then
/// mutated, or shaped like one with hostile values throughout, or not
/// JSON at all.
fn pod_and_annotation() -> BoxedStrategy<(PodSpec, String)> {
    pod_spec()
        .prop_flat_map(|spec| {
            let value = prop_oneof![
                6 => mutated(valid_annotation(&spec)).prop_flat_map(mangled),
                2 => annotation_value(),
            ];
            (Just(spec), value)
        })
        .boxed()
}

/// A `podprobe.io/probes` value shaped like one, hostile throughout: an
/// object keyed by container names (known or not) holding probes by kind
/// (known keys or not), or any JSON, or text that is not JSON.
fn annotation_value() -> BoxedStrategy<String> {
    let kind = string_from(&[
        "startupProbe",
        "readinessProbe",
        "livenessProbe",
        "readyProbe",
    ])
    .prop_map(|k| k.as_str().map_or_else(|| k.to_string(), str::to_string));
    let entry = mostly(
        vec(
            (kind, prop_oneof![8 => probe_json(), 1 => Just(Value::Null)]),
            0..4,
        )
        .prop_map(|probes| Value::Object(probes.into_iter().collect()))
        .boxed(),
    );
    let container = prop_oneof![
        4 => select(CONTAINER_NAMES).prop_map(str::to_string),
        1 => hostile_text(),
    ];
    let document = mostly(
        vec((container, entry), 0..4)
            .prop_map(|entries| Value::Object(entries.into_iter().collect()))
            .boxed(),
    );
    prop_oneof![
        8 => document.prop_flat_map(mangled),
        1 => raw_document(),
    ]
    .boxed()
}

fn pod(spec: PodSpec, annotation: Option<String>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("fuzz".to_string()),
            namespace: Some("default".to_string()),
            annotations: annotation.map(|value| [(PROBES_ANNOTATION.to_string(), value)].into()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        ..Pod::default()
    }
}

// ---------------------------------------------------------------------------
// Pure targets

proptest! {
    #![proptest_config(config(1))]

    /// The annotation, parsed against the pod it sits on; whatever comes
    /// back is used the way gate mode uses it, its hosts checked against
    /// the operator's allowed hosts.
    #[test]
    fn annotation_never_panics(
        (spec, value) in pod_and_annotation(),
        allowed in vec(
            prop_oneof![
                3 => select(&["127.0.0.1", "10.0.0.0/8", "::1", "fd00::/8", "db.internal.",
                    "LOCALHOST", "0.0.0.0/0", "1.2.3.4/33"][..]).prop_map(str::to_string),
                1 => hostile_text(),
            ],
            0..3,
        ),
    ) {
        remember(&(&spec, &value, &allowed));
        match parse_probes(&spec, &value, &mut PodBudget::default()) {
            Ok(probes) => {
                let allowed = allowed.iter().filter_map(|a| a.parse::<AllowedHost>().ok());
                let destinations = Destinations::new(allowed.collect(), Vec::new());
                let _ = check_hosts(&probes, &destinations).map_err(|e| e.to_string());
                for probe in probes.iter() {
                    let _ = probes.gates_readiness(&probe.container);
                    let _ = probes.get(&probe.container, probe.kind);
                    let _ = (probe.spec.timeout(), probe.spec.period());
                }
            }
            Err(error) => {
                let _ = error.to_string();
            }
        }
        let _ = pod_probes(&pod(spec, Some(value)), &mut PodBudget::default());
    }

    /// Spec normalisation of a pod-spec probe (authority mode) and of an
    /// annotated one: defaults, validation, port resolution, `$(VAR)`
    /// expansion.
    #[test]
    fn spec_normalisation_never_panics(
        probe in select(&ProbeKind::ALL[..]).prop_flat_map(typed_probe_of),
        container in select(CONTAINER_NAMES).prop_flat_map(container),
        is_init in any::<bool>(),
        port in port_json(),
    ) {
        remember(&(&probe, &container, is_init, &port));
        if let Some(probe) = probe {
            for kind in ProbeKind::ALL {
                for result in [
                    normalize(kind, &probe, &container),
                    normalize_accepted(kind, &probe, &container),
                ] {
                    match result {
                        Ok(spec) => {
                            let _ = (spec.timeout(), spec.period());
                            if let Handler::Unresolvable(error) = &spec.handler {
                                let _ = error.to_string();
                            }
                        }
                        Err(error) => {
                            let _ = error.to_string();
                        }
                    }
                }
            }
            let with_probes = Container {
                liveness_probe: Some(probe.clone()),
                readiness_probe: Some(probe.clone()),
                startup_probe: Some(probe.clone()),
                ..container.clone()
            };
            for error in validate_container_probes(&with_probes, is_init) {
                let _ = error.to_string();
            }
            if let Some(exec) = &probe.exec {
                let command = exec.command.clone().unwrap_or_default();
                let _ = expand_command(&command, container.env.as_deref().unwrap_or_default());
            }
        }
        if let Ok(port) = serde_json::from_value::<IntOrString>(port) {
            let _ = resolve_container_port(&port, &container).map_err(|e| e.to_string());
        }
    }

    /// `$(VAR)` expansion on its own, with many and long references.
    #[test]
    fn command_expansion_never_panics(
        command in vec(hostile_text(), 0..6),
        env in vec((select(&["A", "B", "", "$(A)", "\u{e9}"][..]), hostile_text()), 0..4),
    ) {
        remember(&(&command, &env));
        let env: Vec<EnvVar> = env
            .into_iter()
            .map(|(name, value)| EnvVar {
                name: name.to_string(),
                value: Some(value),
                ..EnvVar::default()
            })
            .collect();
        let _ = expand_command(&command, &env);
        let vars = probe_spec::env_map(&env);
        for arg in &command {
            let _ = probe_spec::expand(arg, &vars);
        }
    }

    /// The probe URL built from `httpGet` (path read as a URL reference)
    /// and a server's `Location` resolved against it: the next request's
    /// URL, target and header lines.
    #[test]
    fn http_location_never_panics(
        action in http_action(),
        pod_ip in select(&["10.0.0.1", "fd00::1", "", "[::1]", "a b"][..]),
        location in location_text(8080),
    ) {
        remember(&(&action, pod_ip, &location));
        if let Ok(Some(next)) = http_probe::redirected_request(&action, pod_ip, USER_AGENT, &location) {
            let _ = next.header_lines;
        }
    }

    /// The simulate script (YAML or JSON), then the whole simulation of a
    /// pod under it when both are valid and the run is short.
    #[test]
    fn simulate_script_never_panics(
        (spec, annotation, text) in simulation_input(),
        authority in any::<bool>(),
        duration in proptest::option::of(prop_oneof![0.0..400.0, any::<f64>()]),
    ) {
        remember(&(&spec, &annotation, &text, authority, duration));
        pure_case(|| simulate_pod(spec, annotation, &text, authority, duration))?;
    }
}

/// Parses `text` as a script and, when it and the pod are valid and the
/// run is short, simulates the pod under it.
fn simulate_pod(
    spec: PodSpec,
    annotation: Option<String>,
    text: &str,
    authority: bool,
    duration: Option<f64>,
) {
    let Ok(document) = podprobe::cli::oneshot::parse_document(text) else {
        return;
    };
    let script = match script::parse(&document) {
        Ok(script) => script,
        Err(error) => {
            let _ = error.to_string();
            return;
        }
    };
    for container in script.containers.values() {
        for kind in ProbeKind::ALL {
            let _ = container.result_at(kind, Duration::from_secs(30));
        }
    }
    let duration = duration.and_then(|d| script::positive_seconds_arg(d).ok());
    let mode = if authority {
        ModeArg::Authority
    } else {
        ModeArg::Gate
    };
    let pod = serde_json::to_value(pod(spec, annotation)).expect("a pod serializes");
    let Ok(simulation) = simulate::build(&pod, script, Some(mode), duration) else {
        return;
    };
    // Each replica is simulated in full: a short run in all.
    let replicas = simulation.script.replicas.unwrap_or(1);
    if simulation.duration.saturating_mul(replicas) <= Duration::from_secs(300) {
        let report = engine::run(&simulation).expect("tokio runtime");
        simulate::write_report(&mut Vec::new(), &report).expect("write to memory");
    }
}

/// A pod (its annotation apart) and a script for `podprobe simulate`: both
/// valid often enough to simulate, else as [`pod_and_annotation`] and
/// [`script_text`] make them.
fn simulation_input() -> BoxedStrategy<(PodSpec, Option<String>, String)> {
    pod_spec()
        .prop_flat_map(|spec| {
            let annotation = prop_oneof![
                2 => valid_annotation(&spec).prop_map(|v| v.to_string()),
                1 => mutated(valid_annotation(&spec)).prop_flat_map(mangled),
                1 => annotation_value(),
            ];
            let script = prop_oneof![
                1 => valid_script(&spec).prop_map(|v| v.to_string()),
                1 => valid_script(&spec).prop_map(|v| serde_yaml_ng::to_string(&v).unwrap_or_default()),
                2 => script_text(&spec),
            ];
            (Just(spec), proptest::option::weighted(0.9, annotation), script)
        })
        .boxed()
}

/// A script document: the schema's shape with hostile values, as JSON or
/// YAML, sometimes mangled; or YAML-special text.
fn script_text(spec: &PodSpec) -> BoxedStrategy<String> {
    let window = mostly(object(vec![
        ("from", seconds_json()),
        ("to", seconds_json()),
        (
            "result",
            string_from(&["success", "warning", "failure", "error", "Success"]),
        ),
    ]));
    let windows = || mostly(vec(window.clone(), 0..4).prop_map(Value::Array).boxed());
    let container = mostly(object(vec![
        ("startAfter", seconds_json()),
        ("restartDelay", seconds_json()),
        ("startup", windows()),
        ("readiness", windows()),
        ("liveness", windows()),
    ]));
    let containers = mostly(
        vec((select(CONTAINER_NAMES), container), 0..3)
            .prop_map(|c| Value::Object(c.into_iter().map(|(n, v)| (n.to_string(), v)).collect()))
            .boxed(),
    );
    let replicas = prop_oneof![3 => (0i64..8).prop_map(Value::from), 1 => hostile_number()].boxed();
    let outage = mostly(object(vec![
        ("from", seconds_json()),
        ("to", seconds_json()),
    ]));
    let hostile = mostly(object(vec![
        ("duration", seconds_json()),
        ("containers", containers),
        ("replicas", mostly(replicas)),
        ("outage", outage),
    ]));
    let document = prop_oneof![3 => mutated(valid_script(spec)), 1 => hostile];
    const YAML: &[&str] = &[
        "a: &x [1, 2]\nb: *x\n",
        "<<: {duration: 5}\n",
        "duration: !!binary aGVsbG8=\n",
        "duration: .nan\n",
        "duration: .inf\n",
        "duration: 0x10\n",
        "duration: 1_000\n",
        "? [a, b]\n: c\n",
        "--- a\n--- b\n",
        "%YAML 1.2\n---\n",
        "containers:\n  app:\n    readiness:\n      - {from: 0, to: 1e3, result: failure}\n",
        "a: b: c",
        "- - - - -",
        "{",
        "\t",
        "'",
        "|\n x",
        ": ",
        "&a",
        "*a",
    ];
    prop_oneof![
        4 => document.clone().prop_flat_map(mangled),
        2 => document.prop_map(|d| serde_yaml_ng::to_string(&d).unwrap_or_default()),
        1 => vec(prop_oneof![select(YAML).prop_map(str::to_string), hostile_text()], 0..5)
            .prop_map(|v| v.concat()),
        1 => (1usize..10).prop_map(alias_bomb),
        1 => raw_document(),
    ]
    .boxed()
}

/// A valid script for the containers of `spec`: windows in order, each
/// ending where the next may start.
fn valid_script(spec: &PodSpec) -> BoxedStrategy<Value> {
    let sidecars = spec.init_containers.iter().flatten();
    let names: Vec<String> = spec
        .containers
        .iter()
        .chain(sidecars.filter(|c| c.restart_policy.as_deref() == Some("Always")))
        .map(|c| c.name.clone())
        .collect();
    let windows = || {
        let result = select(&["success", "warning", "failure", "error"][..]);
        (vec((1u32..40, result), 0..4), any::<bool>()).prop_map(|(steps, open_end)| {
            let mut from = 0;
            let count = steps.len();
            let windows: Vec<Value> = steps
                .into_iter()
                .enumerate()
                .map(|(i, (length, result))| {
                    let mut window = serde_json::json!({"from": from, "result": result});
                    if !(open_end && i + 1 == count) {
                        window["to"] = (from + length).into();
                    }
                    from += length;
                    window
                })
                .collect();
            Value::Array(windows)
        })
    };
    let container = (
        proptest::option::of(0u32..20),
        proptest::option::of(0u32..20),
        proptest::option::of(windows()),
        proptest::option::of(windows()),
        proptest::option::of(windows()),
    )
        .prop_map(|(start, restart, startup, readiness, liveness)| {
            let mut fields = Map::new();
            let entries = [
                ("startAfter", start.map(Value::from)),
                ("restartDelay", restart.map(Value::from)),
                ("startup", startup),
                ("readiness", readiness),
                ("liveness", liveness),
            ];
            for (name, value) in entries {
                if let Some(value) = value {
                    fields.insert(name.to_string(), value);
                }
            }
            Value::Object(fields)
        });
    let containers: Vec<_> = names
        .into_iter()
        .map(|name| {
            proptest::option::weighted(0.6, container.clone()).prop_map(move |c| (name.clone(), c))
        })
        .collect();
    // The workload form: a few replicas, an outage within the duration.
    let workload = (1u32..6, 0u32..200, 1u32..100);
    (1u32..200, containers, proptest::option::weighted(0.3, workload))
        .prop_map(|(duration, containers, workload)| {
            let present = containers.into_iter().filter_map(|(n, c)| c.map(|c| (n, c)));
            let mut script = serde_json::json!({"duration": duration, "containers": Value::Object(present.collect())});
            if let Some((replicas, from, length)) = workload {
                let from = from.min(duration - 1);
                let to = (from + length).min(duration);
                script["replicas"] = replicas.into();
                script["outage"] = serde_json::json!({"from": from, "to": to});
            }
            script
        })
        .boxed()
}

/// The "billion laughs": each level a list of ten aliases of the last.
fn alias_bomb(levels: usize) -> String {
    let mut text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n".to_string();
    for level in 1..levels {
        let previous = format!("*l{}", level - 1);
        let items = [previous.as_str(); 10].join(", ");
        text.push_str(&format!("l{level}: &l{level} [{items}]\n"));
    }
    text
}

/// An `httpGet` action with hostile path, host and headers.
fn http_action() -> BoxedStrategy<HttpGetAction> {
    let header = (
        prop_oneof![
            2 => select(&["Host", "User-Agent", "Accept", "Referer", "Connection", "X-A"][..])
                .prop_map(str::to_string),
            1 => hostile_text(),
        ],
        hostile_text(),
    );
    (
        any::<bool>(),
        proptest::option::of(prop_oneof![
            select(&["127.0.0.1", "::1", "[::1]", "example.com", ""][..]).prop_map(str::to_string),
            hostile_text(),
        ]),
        any::<u16>(),
        url_text(),
        vec(header, 0..4),
    )
        .prop_map(|(https, host, port, path, headers)| HttpGetAction {
            scheme: if https { Scheme::Https } else { Scheme::Http },
            host,
            port,
            path,
            headers,
            protocol: Default::default(),
            extensions: Default::default(),
        })
        .boxed()
}

/// Text URL parsing treats specially, as the unit property test in
/// `url.rs` builds it, plus anything [`hostile_text`] makes.
fn url_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => vec(
            select(&[
                "%", "a", "F", "0", "7", "\u{e9}", "\u{1f600}", "/", ":", "?", "#", "[", "]",
                "@", " ", ".", "..", "\u{0}", "\n", "http:", "//", "%25", "%c3", "*", ";",
            ][..]),
            0..24,
        )
        .prop_map(|v| v.concat()),
        1 => hostile_text(),
    ]
    .boxed()
}

/// A `Location` value: relative, or absolute towards the server on
/// `port` (so that it is followed) or elsewhere; never another local port
/// that something else may listen on.
fn location_text(port: u16) -> BoxedStrategy<String> {
    let prefixes: Vec<String> = [
        "",
        "/",
        "http://127.0.0.1:{port}",
        "//127.0.0.1:{port}",
        "http://127.0.0.1:{port}/",
        "https://127.0.0.1:{port}/",
        "HTTP://127.0.0.1:{port}",
        "http://user:pass@127.0.0.1:{port}/",
        "http://localhost:{port}/",
        "http://[::1]:{port}/",
        "http://127.0.0.1:{port}:{port}/",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:1/",
        "ftp://127.0.0.1:{port}/",
        "mailto:",
        "http:",
    ]
    .iter()
    .map(|p| p.replace("{port}", &port.to_string()))
    .collect();
    (select(prefixes), url_text())
        .prop_map(|(prefix, rest)| format!("{prefix}{rest}"))
        .boxed()
}

// ---------------------------------------------------------------------------
// HTTP responses

/// How a scripted connection ends after its bytes.
#[derive(Debug, Clone, Copy)]
enum End {
    Close,
    Reset,
    Stall,
}

fn end() -> BoxedStrategy<End> {
    prop_oneof![10 => Just(End::Close), 2 => Just(End::Reset), 1 => Just(End::Stall)].boxed()
}

/// HTTP/2: `before` written at once, then `answer` as [`steps`] writes it
/// once the client's request has arrived.
fn h2_steps((before, answer): &(Vec<u8>, Vec<u8>), cuts: &[usize], end: End) -> Vec<Step> {
    let mut steps = vec![Step::Write(before.clone()), Step::AwaitH2Request];
    steps.extend(self::steps(answer, cuts, end));
    steps
}

/// `bytes` written in up to three pieces, then `end`.
fn steps(bytes: &[u8], cuts: &[usize], end: End) -> Vec<Step> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut steps = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        if cut > from {
            steps.push(Step::Write(bytes[from..cut].to_vec()));
            from = cut;
        }
    }
    match end {
        End::Close => {}
        End::Reset => steps.push(Step::Reset),
        End::Stall => steps.push(Step::Stall),
    }
    steps
}

fn bytes_of(text: BoxedStrategy<String>) -> BoxedStrategy<Vec<u8>> {
    text.prop_map(String::into_bytes).boxed()
}

fn random_bytes(max: usize) -> BoxedStrategy<Vec<u8>> {
    vec(any::<u8>(), 0..max).boxed()
}

/// An HTTP/1.x response: well formed but for a few hostile parts (status
/// line, framing headers, `Location`, line endings, chunk sizes), then
/// sometimes a byte flipped, dropped or added; or bytes at random.
fn http1_response(port: u16) -> BoxedStrategy<Vec<u8>> {
    let version = prop_oneof![
        30 => Just("HTTP/1.1"),
        3 => Just("HTTP/1.0"),
        1 => select(&[
            "HTTP/0.9", "HTTP/2", "HTTP/2.0", "http/1.1", "HTTP/9.9", "HTTP/1.1 ", "", "HTTP/",
        ][..]),
    ];
    let code = prop_oneof![
        8 => select(&[200u16, 204, 301, 302, 303, 307, 308, 404, 500][..]).prop_map(|c| c.to_string()),
        4 => (100u16..600).prop_map(|c| c.to_string()),
        1 => select(&[
            "199", "299", "399", "999", "1000", "0", "-1", "2000000000000", "20x", "", "+200",
            " 200", "0200", "101",
        ][..]).prop_map(str::to_string),
        1 => any::<u16>().prop_map(|c| c.to_string()),
    ];
    let reason = prop_oneof![
        10 => "[A-Za-z ]{0,12}".prop_map(String::into_bytes),
        1 => bytes_of(hostile_text()),
    ];
    let location = prop_oneof![
        4 => (select(&["", "/", "http://127.0.0.1:{port}/", "//127.0.0.1:{port}/", "http://other/"][..]), "[a-z0-9/._?=&-]{0,16}")
            .prop_map(move |(prefix, rest)| format!("{}{rest}", prefix.replace("{port}", &port.to_string()))),
        1 => location_text(port),
    ];
    let other = prop_oneof![
        14 => (select(&["Content-Type", "Set-Cookie", "X-A", "Server", "Trailer"][..]).prop_map(str::to_string),
            "[ -~]{0,16}".prop_map(String::into_bytes)),
        1 => (select(&["Upgrade", " Location", "Loc ation", "", ":", "Connection"][..]).prop_map(str::to_string),
            bytes_of(hostile_text())),
        1 => (hostile_text(), prop_oneof![bytes_of(hostile_text()), random_bytes(16)]),
    ];
    let framing = prop_oneof![
        4 => Just(Framing::ContentLength(None)),
        1 => select(&[
            "0", "10241", "-1", "18446744073709551616", "1,1", "5, 6", "+5", " 3", "0x10", "",
        ][..]).prop_map(|v| Framing::ContentLength(Some(v))),
        3 => Just(Framing::Chunked("chunked")),
        1 => select(&["gzip, chunked", "chunked, gzip", "identity", "CHUNKED", ""][..])
            .prop_map(Framing::Chunked),
        2 => Just(Framing::UntilClose),
    ];
    let newline = prop_oneof![
        40 => Just("\r\n"),
        2 => Just("\n"),
        1 => select(&["\r", "\r\n ", "\n\r", ""][..]),
    ];
    let body = prop_oneof![
        4 => random_bytes(128),
        1 => (any::<u8>(), 10_000usize..12_000).prop_map(|(b, n)| vec![b; n]),
    ];
    let headers = vec(
        (
            prop_oneof![
                1 => location.prop_map(|l| ("Location".to_string(), l.into_bytes())),
                2 => other,
            ],
            newline.clone(),
        ),
        0..5,
    );
    let response = (
        (version, code, reason, newline.clone()),
        headers,
        (framing, newline.clone(), newline),
        (body, chunked_body()),
    )
        .prop_map(
            |(
                (version, code, reason, status_end),
                headers,
                (framing, frame_end, head_end),
                (body, chunked),
            )| {
                let mut out = format!("{version} {code} ").into_bytes();
                out.extend(reason);
                out.extend(status_end.as_bytes());
                for ((name, value), end) in headers {
                    out.extend(name.as_bytes());
                    out.extend(b": ");
                    out.extend(value);
                    out.extend(end.as_bytes());
                }
                let body = match framing {
                    Framing::ContentLength(value) => {
                        let value = value.map_or_else(|| body.len().to_string(), str::to_string);
                        out.extend(format!("Content-Length: {value}{frame_end}").as_bytes());
                        body
                    }
                    Framing::Chunked(value) => {
                        out.extend(format!("Transfer-Encoding: {value}{frame_end}").as_bytes());
                        chunked
                    }
                    Framing::UntilClose => body,
                };
                out.extend(head_end.as_bytes());
                out.extend(body);
                out
            },
        );
    prop_oneof![
        8 => response.clone(),
        2 => (response, vec((any::<usize>(), byte_edit()), 1..3)).prop_map(|(mut bytes, edits)| {
            for (at, edit) in edits {
                edit.apply(&mut bytes, at);
            }
            bytes
        }),
        1 => random_bytes(512),
    ]
    .boxed()
}

/// How an HTTP/1.x response says where its body ends.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// `Content-Length`: the body's length, or this value.
    ContentLength(Option<&'static str>),
    /// `Transfer-Encoding` with this value and a chunked body.
    Chunked(&'static str),
    /// No framing header: the body runs until the connection closes.
    UntilClose,
}

/// One edit of a byte string, at a position taken modulo its length.
#[derive(Debug, Clone, Copy)]
enum ByteEdit {
    Flip(u8),
    Drop,
    Insert(u8),
}

impl ByteEdit {
    fn apply(self, bytes: &mut Vec<u8>, at: usize) {
        if bytes.is_empty() {
            return;
        }
        let at = at % bytes.len();
        match self {
            ByteEdit::Flip(mask) => bytes[at] ^= mask.max(1),
            ByteEdit::Drop => {
                bytes.remove(at);
            }
            ByteEdit::Insert(byte) => bytes.insert(at, byte),
        }
    }
}

fn byte_edit() -> BoxedStrategy<ByteEdit> {
    prop_oneof![
        any::<u8>().prop_map(ByteEdit::Flip),
        Just(ByteEdit::Drop),
        prop_oneof![
            select(&[b'\r', b'\n', b':', b' ', 0, 0x80][..]),
            any::<u8>()
        ]
        .prop_map(ByteEdit::Insert),
    ]
    .boxed()
}

/// A chunked body with chunk sizes right, wrong, huge or not hex, chunk
/// extensions and trailers.
fn chunked_body() -> BoxedStrategy<Vec<u8>> {
    let chunk = (
        random_bytes(64),
        prop_oneof![
            4 => Just(None),
            1 => select(&[
                "ffffffffffffffffffff", "-1", "0", "1;ext=x", "zz", "", " 5", "7fffffffffffffff",
            ][..]).prop_map(Some),
        ],
    )
        .prop_map(|(data, size)| {
            let size = size.map_or_else(|| format!("{:x}", data.len()), str::to_string);
            [size.into_bytes(), b"\r\n".to_vec(), data, b"\r\n".to_vec()].concat()
        });
    let trailer = select(&["", "X-T: 1\r\n", "Content-Length: 5\r\n", "bad trailer\r\n"][..]);
    (vec(chunk, 0..4), any::<bool>(), trailer)
        .prop_map(|(chunks, last, trailer)| {
            let mut out = chunks.concat();
            if last {
                out.extend_from_slice(b"0\r\n");
                out.extend_from_slice(trailer.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// HTTP/2 frames (HTTPS probes over h2, gRPC)

/// One frame: `kind`, `flags`, stream, payload; the length field is the
/// payload's unless `length` says otherwise.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8], length: Option<u32>) -> Vec<u8> {
    let length = length.unwrap_or(payload.len() as u32) & 0x00ff_ffff;
    let mut out = length.to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK string literal, not Huffman-coded (or claiming to be).
fn hpack_string(value: &[u8], huffman: bool) -> Vec<u8> {
    let mut out = hpack_int(value.len() as u64, 7, if huffman { 0x80 } else { 0 });
    out.extend_from_slice(value);
    out
}

/// An HPACK integer with an `prefix`-bit prefix under `flags`.
fn hpack_int(mut value: u64, prefix: u32, flags: u8) -> Vec<u8> {
    let max = (1u64 << prefix) - 1;
    if value < max {
        return vec![flags | value as u8];
    }
    let mut out = vec![flags | max as u8];
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
    out
}

/// A literal header field (without indexing) with a new name.
fn hpack_literal(name: &str, value: &[u8]) -> Vec<u8> {
    [
        vec![0x00],
        hpack_string(name.as_bytes(), false),
        hpack_string(value, false),
    ]
    .concat()
}

/// A header block: indexed `:status` values, literals for `:status`,
/// `location`, `content-type`, `content-length` and gRPC's headers with
/// hostile values, table size updates, Huffman flags over raw bytes.
fn hpack_block(port: u16) -> BoxedStrategy<Vec<u8>> {
    let value = || {
        prop_oneof![
            3 => select(&[
                "200", "302", "999", "abc", "", "20", "application/grpc", "text/plain", "0",
                "1", "12", "17", "-1", "99999999999999999999", "%", "%zz", "%e2%82",
                "application/grpc+proto",
            ][..]).prop_map(|s| s.as_bytes().to_vec()),
            1 => bytes_of(hostile_text()),
        ]
    };
    let field = prop_oneof![
        3 => select(&[0x88u8, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e][..]).prop_map(|b| vec![b]),
        1 => any::<u8>().prop_map(|b| vec![b]),
        2 => value().prop_map(|v| [vec![0x08], hpack_string(&v, false)].concat()),
        2 => location_text(port)
            .prop_map(|l| [vec![0x0f, 0x1f], hpack_string(l.as_bytes(), false)].concat()),
        2 => value().prop_map(|v| [vec![0x0f, 0x10], hpack_string(&v, false)].concat()),
        1 => value().prop_map(|v| [vec![0x0f, 0x0d], hpack_string(&v, false)].concat()),
        3 => (
            select(&["grpc-status", "grpc-message", "grpc-encoding", "connection", ":path",
                "Upper", ""][..]),
            value(),
        ).prop_map(|(n, v)| hpack_literal(n, &v)),
        1 => any::<u64>().prop_map(|size| hpack_int(size, 5, 0x20)),
        1 => random_bytes(16).prop_map(|b| hpack_string(&b, true)),
    ];
    vec(field, 0..6).prop_map(|fields| fields.concat()).boxed()
}

/// A gRPC length-prefixed message: compression flag and length mostly
/// right.
fn grpc_message(payload: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<Vec<u8>> {
    (
        prop_oneof![12 => Just(0u8), 1 => Just(1u8), 1 => any::<u8>()],
        prop_oneof![
            12 => Just(None),
            1 => select(&[u32::MAX, 0x7fff_ffff, 4 * 1024 * 1024 + 1, 0][..]).prop_map(Some),
            1 => any::<u32>().prop_map(Some),
        ],
        payload,
    )
        .prop_map(|(flag, length, payload)| {
            let length = length.unwrap_or(payload.len() as u32);
            [vec![flag], length.to_be_bytes().to_vec(), payload].concat()
        })
        .boxed()
}

/// A SETTINGS frame: mostly empty (all defaults), else with parameters
/// known or not, values in range or not.
fn h2_settings() -> BoxedStrategy<Vec<u8>> {
    let parameters = vec(
        (
            prop_oneof![3 => 1u16..=8, 1 => any::<u16>()],
            prop_oneof![
                3 => select(&[0u32, 1, 100, 16_384, 16_777_215, 16_777_216, 0x7fff_ffff,
                    u32::MAX][..]),
                1 => any::<u32>(),
            ],
        ),
        1..4,
    )
    .prop_map(|pairs| {
        let payload: Vec<u8> = pairs
            .into_iter()
            .flat_map(|(id, value)| [id.to_be_bytes().to_vec(), value.to_be_bytes().to_vec()])
            .flatten()
            .collect();
        frame(0x4, 0, 0, &payload, None)
    });
    prop_oneof![3 => Just(frame(0x4, 0, 0, &[], None)), 1 => parameters].boxed()
}

/// A frame of any type with hostile flags, stream, length and payload.
fn h2_noise(port: u16) -> BoxedStrategy<Vec<u8>> {
    let payload = prop_oneof![
        3 => hpack_block(port),
        2 => grpc_message(protobuf()),
        2 => random_bytes(64),
    ];
    (
        prop_oneof![
            6 => select(&[0x0u8, 0x1, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9, 0x5, 0x2][..]),
            1 => any::<u8>(),
        ],
        prop_oneof![
            4 => select(&[0x0u8, 0x1, 0x4, 0x5, 0x8, 0x20, 0x25][..]),
            1 => any::<u8>(),
        ],
        prop_oneof![6 => Just(1u32), 2 => Just(0u32), 1 => select(&[3u32, 2, 0x7fff_ffff][..]),
            1 => any::<u32>()],
        payload,
        prop_oneof![8 => Just(None), 1 => (0u32..0x0100_0000).prop_map(Some)],
    )
        .prop_map(|(kind, flags, stream, payload, length)| {
            frame(kind, flags, stream, &payload, length)
        })
        .boxed()
}

/// The server's side of an HTTP/2 connection: what it sends before the
/// client's first request (SETTINGS), and its answer to that request
/// (stream 1): a HEADERS frame (`:status` and some of `content-type`,
/// `location`, `content-length`), DATA frames of `payload`, maybe
/// trailers; then sometimes hostile frames slipped in, bytes edited, or
/// noise in place of either part.
fn h2_response(port: u16, payload: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<(Vec<u8>, Vec<u8>)> {
    const END_STREAM: u8 = 0x1;
    const END_HEADERS: u8 = 0x4;
    let status = prop_oneof![
        4 => Just(vec![0x88]),
        2 => select(&[0x89u8, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e][..]).prop_map(|b| vec![b]),
        1 => (100u16..1000).prop_map(|c| [vec![0x08], hpack_string(c.to_string().as_bytes(), false)].concat()),
    ];
    let content_type = prop_oneof![
        6 => Just("application/grpc"),
        1 => select(&["application/grpc+proto", "text/plain"][..]),
    ]
    .prop_map(|v| [vec![0x0f, 0x10], hpack_string(v.as_bytes(), false)].concat());
    let extra = prop_oneof![
        1 => (select(&["", "/", "http://127.0.0.1:{port}/", "http://other/"][..]), "[a-z0-9/._-]{0,12}")
            .prop_map(move |(prefix, rest)| {
                let location = format!("{}{rest}", prefix.replace("{port}", &port.to_string()));
                [vec![0x0f, 0x1f], hpack_string(location.as_bytes(), false)].concat()
            }),
        1 => (0u32..64).prop_map(|n| [vec![0x0f, 0x0d], hpack_string(n.to_string().as_bytes(), false)].concat()),
        1 => hpack_block(port),
    ];
    let field = prop_oneof![
        4 => content_type.prop_map(|c| vec![c]),
        1 => Just(Vec::new()),
        1 => vec(extra, 1..3),
    ];
    let trailer = prop_oneof![
        4 => select(&["0", "0", "5", "12", "14"][..]).prop_map(|v| hpack_literal("grpc-status", v.as_bytes())),
        1 => "[ -~]{0,12}".prop_map(|m| hpack_literal("grpc-message", m.as_bytes())),
        1 => hpack_block(port),
    ];
    let honest = (
        h2_settings(),
        (status, field),
        vec(payload, 0..3),
        proptest::option::weighted(0.7, vec(trailer, 1..3)),
    )
        .prop_map(|(settings, (status, fields), data, trailers)| {
            let mut out = Vec::new();
            let block = [status, fields.concat()].concat();
            let bodyless = data.is_empty() && trailers.is_none();
            let flags = if bodyless {
                END_HEADERS | END_STREAM
            } else {
                END_HEADERS
            };
            out.extend(frame(0x1, flags, 1, &block, None));
            let count = data.len();
            for (i, chunk) in data.into_iter().enumerate() {
                let last = i + 1 == count && trailers.is_none();
                out.extend(frame(
                    0x0,
                    if last { END_STREAM } else { 0 },
                    1,
                    &chunk,
                    None,
                ));
            }
            if let Some(trailers) = trailers {
                out.extend(frame(
                    0x1,
                    END_HEADERS | END_STREAM,
                    1,
                    &trailers.concat(),
                    None,
                ));
            }
            (settings, out)
        });
    let noise = || vec(h2_noise(port), 0..4).prop_map(|frames| frames.concat());
    prop_oneof![
        6 => honest.clone(),
        2 => (honest.clone(), vec((any::<usize>(), h2_noise(port)), 1..3)).prop_map(
            |((settings, mut answer), noise)| {
                for (at, frame) in noise {
                    let at = frame_boundary(&answer, at);
                    answer.splice(at..at, frame);
                }
                (settings, answer)
            }
        ),
        1 => (honest.clone(), vec((any::<usize>(), byte_edit()), 1..3)).prop_map(
            |((settings, mut answer), edits)| {
                for (at, edit) in edits {
                    edit.apply(&mut answer, at);
                }
                (settings, answer)
            }
        ),
        1 => (honest, noise(), noise(), any::<bool>()).prop_map(
            |((settings, answer), noise, more, first)| {
                if first { (noise, [answer, more].concat()) } else { (settings, noise) }
            }
        ),
    ]
    .boxed()
}

/// The offset of a frame boundary in `frames` (well-formed frames), picked
/// by `pick`.
fn frame_boundary(frames: &[u8], pick: usize) -> usize {
    let mut boundaries = vec![0];
    let mut at = 0;
    while at + 9 <= frames.len() {
        let length = u32::from_be_bytes([0, frames[at], frames[at + 1], frames[at + 2]]) as usize;
        at += 9 + length;
        if at <= frames.len() {
            boundaries.push(at);
        }
    }
    boundaries[pick % boundaries.len()]
}

// ---------------------------------------------------------------------------
// Protobuf and gRPC answers

fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
    out
}

/// Protobuf bytes: fields of any number and wire type (including the
/// invalid ones and groups), varints too long, lengths past the end; or
/// bytes at random.
fn protobuf() -> BoxedStrategy<Vec<u8>> {
    let number = prop_oneof![
        4 => 1u64..=4,
        1 => select(&[0u64, 15, 16, (1 << 29) - 1, 1 << 29, u64::MAX >> 3][..]),
    ];
    let field = (
        number,
        0u64..8,
        any::<u64>(),
        random_bytes(48),
        any::<bool>(),
    )
        .prop_map(|(number, wire, value, bytes, honest)| {
            let mut out = varint(number << 3 | wire);
            match wire {
                0 if honest => out.extend(varint(value)),
                0 => out.extend([0xff; 11]),
                1 => out.extend(value.to_le_bytes()),
                5 => out.extend(&value.to_le_bytes()[..4]),
                2 => {
                    let length = if honest { bytes.len() as u64 } else { value };
                    out.extend(varint(length));
                    out.extend(bytes);
                }
                _ => out.extend(bytes),
            }
            out
        });
    prop_oneof![
        4 => vec(field, 0..6).prop_map(|f| f.concat()),
        1 => random_bytes(64),
    ]
    .boxed()
}

/// A `grpc.health.v1.HealthCheckResponse`: any status number, or hostile
/// protobuf.
fn health_response() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        3 => prop_oneof![4 => 0i32..5, 1 => any::<i32>()].prop_map(|status| {
            tonic_health::pb::HealthCheckResponse { status }.encode_to_vec()
        }),
        1 => protobuf(),
    ]
    .boxed()
}

/// A CRI `ExecSyncResponse`: output of any size (past the 10 KiB cap too)
/// and any exit code, or hostile protobuf.
fn exec_sync_response() -> BoxedStrategy<Vec<u8>> {
    let output = prop_oneof![
        4 => random_bytes(64),
        1 => bytes_of(hostile_text()),
        1 => (any::<u8>(), 0usize..20_000).prop_map(|(b, n)| vec![b; n]),
    ];
    prop_oneof![
        3 => (output.clone(), output, prop_oneof![0..3, any::<i32>()]).prop_map(
            |(stdout, stderr, exit_code)| {
                ExecSyncResponse { stdout, stderr, exit_code }.encode_to_vec()
            }
        ),
        1 => protobuf(),
    ]
    .boxed()
}

/// What a hostile but well-framed HTTP/2 server answers to one RPC.
#[derive(Debug, Clone)]
struct GrpcAnswer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<Vec<u8>>,
    trailers: Option<Vec<(String, Vec<u8>)>>,
}

fn grpc_metadata() -> BoxedStrategy<Vec<(String, Vec<u8>)>> {
    let status = select(
        &[
            "0",
            "1",
            "2",
            "4",
            "5",
            "12",
            "14",
            "16",
            "17",
            "-1",
            "00",
            "+1",
            " 0",
            "abc",
            "",
            "4294967296",
            "99999999999999999999",
        ][..],
    )
    .prop_map(|s| ("grpc-status".to_string(), s.as_bytes().to_vec()));
    let message = bytes_of(hostile_text()).prop_map(|m| ("grpc-message".to_string(), m));
    let details = prop_oneof![bytes_of(hostile_text()), random_bytes(24)]
        .prop_map(|d| ("grpc-status-details-bin".to_string(), d));
    let other = (
        select(
            &[
                "content-type",
                "grpc-encoding",
                "grpc-accept-encoding",
                "x-a-bin",
                "x-a",
            ][..],
        ),
        prop_oneof![
            select(
                &[
                    "application/grpc",
                    "application/grpc+proto",
                    "text/html",
                    "gzip",
                    "identity",
                    "deflate",
                    ""
                ][..]
            )
            .prop_map(|s| s.as_bytes().to_vec()),
            bytes_of(hostile_text()),
        ],
    )
        .prop_map(|(n, v)| (n.to_string(), v));
    vec(
        prop_oneof![3 => status, 2 => message, 1 => details, 2 => other],
        0..5,
    )
    .boxed()
}

fn grpc_answer(message: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<GrpcAnswer> {
    let content_type = prop_oneof![
        6 => Just(vec![("content-type".to_string(), b"application/grpc".to_vec())]),
        1 => Just(Vec::new()),
    ];
    (
        prop_oneof![8 => Just(200u16), 1 => 100u16..=999],
        content_type,
        prop_oneof![3 => Just(Vec::new()), 1 => grpc_metadata()],
        prop_oneof![
            4 => grpc_message(message.clone()).prop_map(|m| vec![m]),
            1 => vec(prop_oneof![5 => grpc_message(message), 1 => random_bytes(16)], 0..3),
        ],
        prop_oneof![
            5 => grpc_metadata().prop_map(|mut trailers| {
                trailers.insert(0, ("grpc-status".to_string(), b"0".to_vec()));
                Some(trailers)
            }),
            2 => grpc_metadata().prop_map(Some),
            1 => Just(None),
        ],
    )
        .prop_map(|(status, mut headers, extra, body, trailers)| {
            headers.extend(extra);
            GrpcAnswer {
                status,
                headers,
                body,
                trailers,
            }
        })
        .boxed()
}

/// Answers every request on `io` (an HTTP/2 connection) with `answer`.
async fn serve_grpc_answer<I>(io: I, answer: GrpcAnswer)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |_request| {
        let answer = answer.clone();
        async move {
            let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = answer
                .body
                .into_iter()
                .map(|data| Ok(Frame::data(Bytes::from(data))))
                .collect();
            if let Some(trailers) = answer.trailers {
                frames.push(Ok(Frame::trailers(header_map(&trailers))));
            }
            let mut response = hyper::Response::new(StreamBody::new(futures::stream::iter(frames)));
            *response.status_mut() =
                http::StatusCode::from_u16(answer.status).unwrap_or(http::StatusCode::OK);
            *response.headers_mut() = header_map(&answer.headers);
            Ok::<_, Infallible>(response)
        }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// The headers that `http` can carry; the others are left out.
fn header_map(headers: &[(String, Vec<u8>)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    map
}

// ---------------------------------------------------------------------------
// Network targets

/// The probe's timeout against hostile servers; whatever they do, the
/// probe must have returned a little after it.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);
const SLACK: Duration = Duration::from_secs(5);

/// How the HTTPS probe meets the hostile bytes.
#[derive(Debug, Clone, Copy)]
enum Wire {
    /// Plain HTTP/1.x.
    Http,
    /// HTTP/1.x inside TLS.
    Https,
    /// HTTP/2 frames inside TLS (`h2` chosen over ALPN).
    H2,
    /// An HTTPS probe against a server that answers in clear text.
    NotTls,
}

/// What a server writes on every connection: before the request
/// (HTTP/2 only) and in answer to it, in pieces cut where the offsets say,
/// then how it ends.
type Exchange = (Wire, (Vec<u8>, Vec<u8>), Vec<usize>, End);

/// A wire and what the server writes on every connection; `port` is
/// unknown until the server is bound, so redirects go to a placeholder
/// port that [`patch_port`] replaces.
fn http_exchange() -> BoxedStrategy<Exchange> {
    let wire = prop_oneof![
        4 => Just(Wire::Http),
        1 => Just(Wire::Https),
        2 => Just(Wire::H2),
        1 => Just(Wire::NotTls),
    ];
    wire.prop_flat_map(|wire| {
        let bytes = match wire {
            Wire::H2 => h2_response(PORT_PLACEHOLDER, random_bytes(128)),
            _ => http1_response(PORT_PLACEHOLDER)
                .prop_map(|answer| (Vec::new(), answer))
                .boxed(),
        };
        (Just(wire), bytes, vec(any::<usize>(), 0..3), end())
    })
    .boxed()
}

/// Stands for the server's port in generated redirects: five digits that
/// no other generated text contains.
const PORT_PLACEHOLDER: u16 = 54_321;

fn patch_port(bytes: &[u8], port: u16) -> Vec<u8> {
    let (from, to) = (PORT_PLACEHOLDER.to_string(), port.to_string());
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.starts_with(from.as_bytes()) {
            out.extend_from_slice(to.as_bytes());
            rest = &rest[from.len()..];
        } else {
            out.push(rest[0]);
            rest = &rest[1..];
        }
    }
    out
}

proptest! {
    #![proptest_config(config(8))]

    /// An HTTP probe against a server that answers every connection with
    /// hostile bytes (redirects to itself included): status line, headers,
    /// framing, body, TLS and HTTP/2 all bent.
    #[test]
    fn http_response_never_panics(
        (wire, bytes, cuts, end) in http_exchange(),
        path in url_text(),
    ) {
        remember(&(wire, &bytes, &cuts, end, &path));
        let attempt = run_case(PROBE_TIMEOUT + SLACK, async move {
            // Redirects go to the server itself, whose port is known once
            // it is bound.
            let port = Arc::new(OnceLock::new());
            let script = {
                let port = port.clone();
                move |_: &support::http_server::Received| {
                    let port = *port.get().expect("bound");
                    let before = patch_port(&bytes.0, port);
                    let answer = patch_port(&bytes.1, port);
                    match wire {
                        Wire::H2 => h2_steps(&(before, answer), &cuts, end),
                        _ => steps(&answer, &cuts, end),
                    }
                }
            };
            let server = match wire {
                Wire::Http | Wire::NotTls => TestServer::start(LOCAL, script).await,
                Wire::Https => TestServer::start_tls(LOCAL, script).await,
                Wire::H2 => TestServer::start_tls_alpn(LOCAL, vec![b"h2".to_vec()], script).await,
            };
            port.set(server.port()).expect("set once");
            let action = HttpGetAction {
                scheme: match wire {
                    Wire::Http => Scheme::Http,
                    _ => Scheme::Https,
                },
                host: None,
                port: server.port(),
                path,
                headers: Vec::new(),
                protocol: Default::default(),
                extensions: Default::default(),
            };
            let destinations = Destinations::default();
            http_probe::probe(&action, "127.0.0.1", PROBE_TIMEOUT, USER_AGENT, &destinations).await
        })?;
        if let Err(error) = attempt {
            prop_assert!(!error.message.is_empty(), "an error says what went wrong");
        }
    }

    /// A gRPC health probe against a well-framed HTTP/2 server whose
    /// answer is hostile: HTTP status, headers, trailers, `grpc-status`
    /// and `grpc-message`, message framing and the protobuf itself.
    #[test]
    fn grpc_health_response_never_panics(
        answer in grpc_answer(health_response()),
        service in hostile_text(),
    ) {
        remember(&(&answer, &service));
        let outcome = run_case(PROBE_TIMEOUT + SLACK, async move {
            let listener = TcpListener::bind(LOCAL).await.expect("bind loopback");
            let port = listener.local_addr().expect("bound").port();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_grpc_answer(stream, answer.clone()));
                }
            });
            let timeout = Duration::from_secs(2);
            let destinations = Destinations::default();
            grpc::probe("127.0.0.1", port, &service, timeout, USER_AGENT, &destinations).await
        })?;
        prop_assert!(outcome.is_ok(), "gRPC probes never error: {:?}", outcome);
    }

    /// A gRPC health probe against a server that writes hostile HTTP/2
    /// frames (a SETTINGS frame first, mostly, so that the probe connects).
    #[test]
    fn grpc_h2_frames_never_panic(
        bytes in h2_response(PORT_PLACEHOLDER, grpc_message(health_response())),
        cuts in vec(any::<usize>(), 0..3),
        end in end(),
    ) {
        remember(&(&bytes, &cuts, end));
        let outcome = run_case(PROBE_TIMEOUT + SLACK, async move {
            let server = TestServer::start(LOCAL, move |_| h2_steps(&bytes, &cuts, end)).await;
            let destinations = Destinations::default();
            let port = server.port();
            grpc::probe("127.0.0.1", port, "", PROBE_TIMEOUT, USER_AGENT, &destinations).await
        })?;
        prop_assert!(outcome.is_ok(), "gRPC probes never error: {:?}", outcome);
    }

    /// An exec probe through a CRI runtime (on a unix socket) that answers
    /// `ExecSync` with hostile output, exit codes, statuses and protobuf.
    #[test]
    fn cri_exec_response_never_panics(
        answer in grpc_answer(exec_sync_response()),
        container_id in prop_oneof![
            6 => Just("containerd://abc".to_string()),
            1 => hostile_text(),
        ],
        command in vec(hostile_text(), 0..3),
    ) {
        remember(&(&answer, &container_id, &command));
        let dir = tempfile::tempdir().expect("temporary directory");
        let socket = dir.path().join("cri.sock");
        let attempt = run_case(PROBE_TIMEOUT + SLACK, async move {
            let listener = UnixListener::bind(&socket).expect("bind unix socket");
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_grpc_answer(stream, answer.clone()));
                }
            });
            let client = CriClient::new(&socket.to_string_lossy()).expect("valid endpoint");
            exec::probe(&client, "fuzz", &container_id, &command, Duration::from_secs(1)).await
        })?;
        if let Err(error) = attempt {
            prop_assert!(!error.message.is_empty(), "an error says what went wrong");
        }
    }
}

/// The panic hook sees panics inside spawned tasks, which tokio catches:
/// without it, the network targets would miss them.
#[test]
fn a_panic_in_a_spawned_task_fails_the_case() {
    let result = run_case(Duration::from_secs(5), async {
        let task = tokio::spawn(async { panic!("inside a task") });
        let _ = task.await;
    });
    assert!(
        result.is_err_and(|e| e.to_string().contains("inside a task")),
        "a task's panic must fail the case"
    );
}

/// A hang fails the case, as a panic does.
#[test]
fn a_case_that_does_not_return_fails() {
    let result = run_case(Duration::from_millis(50), std::future::pending::<()>());
    assert!(result.is_err());
}

/// The generators reach past the first error often enough: annotations
/// that hold valid probes, scripts that get simulated.
#[test]
fn generated_documents_reach_the_deep_paths() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut annotated = 0;
    for _ in 0..300 {
        let tree = pod_and_annotation().new_tree(&mut runner).expect("a case");
        let (spec, value) = tree.current();
        if parse_probes(&spec, &value, &mut PodBudget::default()).is_ok_and(|p| !p.is_empty()) {
            annotated += 1;
        }
    }
    let mut scripted = 0;
    for _ in 0..100 {
        let (spec, value, text) = simulation_input()
            .new_tree(&mut runner)
            .expect("a case")
            .current();
        let script = podprobe::cli::oneshot::parse_document(&text)
            .ok()
            .and_then(|doc| script::parse(&doc).ok());
        let pod = serde_json::to_value(pod(spec, value)).expect("a pod serializes");
        if script.is_some_and(|s| simulate::build(&pod, s, Some(ModeArg::Gate), None).is_ok()) {
            scripted += 1;
        }
    }
    eprintln!("valid annotations: {annotated}/300; simulations built: {scripted}/100");
    assert!(
        annotated >= 25,
        "only {annotated} of 300 annotations held a valid probe"
    );
    assert!(
        scripted >= 10,
        "only {scripted} of 100 scripts could be simulated"
    );
}
