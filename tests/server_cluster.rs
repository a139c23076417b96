//! `podprobe run`'s own server, as deployed: a host-process podprobe on the
//! local cluster (`hack/local-cluster.sh`) with `--metrics-auth delegated`,
//! whose `/metrics` asks the cluster's real API server about every bearer
//! token (a `TokenReview`, then a `SubjectAccessReview`). tests/server.rs
//! tests the same server in process, with scripted reviews.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/host_podprobe.rs"]
mod host_podprobe;
#[path = "support/metrics.rs"]
mod metrics;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use podprobe::server::MAX_CONCURRENT_STREAMS;
use serde::Deserialize;
use serde_json::Value;

use cluster::{Namespace, cluster, unique_id, wait_for};
use host_podprobe::HostPodprobe;
use metrics::metric_sum;

/// The DaemonSet's probes of podprobe, as the chart declares them.
struct ChartProbe {
    period: Duration,
    timeout: Duration,
    failure_threshold: u32,
}

/// `probe` (`livenessProbe`, `readinessProbe`) of the chart's DaemonSet,
/// read from its template: what the kubelet gives podprobe's `/healthz`
/// and `/readyz`. Unset fields take the API's defaults.
fn chart_probe(probe: &str) -> ChartProbe {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/podprobe/templates/daemonset.yaml"
    );
    let template = std::fs::read_to_string(path).expect("read the chart's DaemonSet template");
    let start = template
        .find(&format!("{probe}:"))
        .unwrap_or_else(|| panic!("the chart's DaemonSet has no {probe}"));
    let indent = template[..start].len() - template[..start].trim_end_matches(' ').len();
    let mut fields = BTreeMap::new();
    for line in template[start..].lines().skip(1) {
        let deeper = line.len() - line.trim_start().len() > indent;
        if !deeper {
            break;
        }
        if let Some((key, value)) = line.trim().split_once(": ") {
            fields.insert(key.to_string(), value.to_string());
        }
    }
    let field = |name: &str, default: u64| -> u64 {
        fields.get(name).map_or(default, |value| {
            value.parse().unwrap_or_else(|_| {
                panic!("{probe}.{name} of the chart is {value:?}, not a number this test can read")
            })
        })
    };
    ChartProbe {
        period: Duration::from_secs(field("periodSeconds", 10)),
        timeout: Duration::from_secs(field("timeoutSeconds", 1)),
        failure_threshold: field("failureThreshold", 3) as u32,
    }
}

/// Cluster-scoped objects a test created, deleted when dropped.
struct ClusterScoped(Vec<(&'static str, String)>);

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = cluster().kubectl(&["delete", kind, name, "--wait=false"]);
        }
    }
}

/// The ClusterRole of `deploy/base/rbac.yaml` named `name`.
fn shipped_cluster_role(name: &str) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(path).expect("read deploy/base/rbac.yaml");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("rbac.yaml parses"))
        .find(|doc| doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("deploy/base/rbac.yaml has no ClusterRole {name}"))
}

/// A token of ServiceAccount `scraper` in `ns`, bound (as the chart's
/// PodMonitor's account is) to the shipped `podprobe-metrics-reader`
/// ClusterRole, once the API server's authorizer lets it get `/metrics`.
fn scraper_token(ns: &Namespace, created: &mut ClusterScoped) -> String {
    cluster()
        .apply(&shipped_cluster_role("podprobe-metrics-reader"))
        .unwrap_or_else(|e| panic!("{e}"));
    ns.kubectl(&["create", "serviceaccount", "scraper"]);
    let binding = ns.name.clone();
    cluster()
        .kubectl(&[
            "create",
            "clusterrolebinding",
            &binding,
            "--clusterrole=podprobe-metrics-reader",
            &format!("--serviceaccount={}:scraper", ns.name),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    created.0.push(("clusterrolebinding", binding));
    // RBAC reaches the authorizer through an informer: wait for it, so no
    // stale denial is cached.
    let as_ = format!("--as=system:serviceaccount:{}:scraper", ns.name);
    ns.wait_for(
        "the scraper may get /metrics",
        Duration::from_secs(30),
        || cluster().kubectl(&["auth", "can-i", "get", "/metrics", &as_]),
    );
    ns.kubectl(&["create", "token", "scraper"])
        .trim()
        .to_string()
}

/// One answer to a request on a fresh connection, as the kubelet's HTTP
/// prober makes it (`Connection: close`): the status and how long the
/// whole exchange took, or what went wrong within `timeout`.
fn get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let left = || {
        timeout
            .checked_sub(started.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or(format!("no answer within {timeout:?}"))
    };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.37\r\n{authorization}\
         Connection: close\r\n\r\n"
    )
    .map_err(|e| format!("sending: {e}"))?;
    let mut response = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        stream
            .set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "reading after {:?} ({} bytes so far): {e}",
                    started.elapsed(),
                    response.len()
                ));
            }
        }
    }
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&response);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            format!(
                "no HTTP response: {:?}",
                text.chars().take(200).collect::<String>()
            )
        })?;
    Ok((status, took))
}

/// What the flood's requests were answered, by protocol.
#[derive(Default)]
struct FloodCounts {
    h2_unauthorized: AtomicU64,
    h2_throttled: AtomicU64,
    h1_unauthorized: AtomicU64,
    h1_throttled: AtomicU64,
    /// 429s without `Retry-After: 1`.
    throttled_without_retry_after: AtomicU64,
    /// Connections that failed or were closed (evicted, say) and opened
    /// again.
    reconnects: AtomicU64,
    /// Answers other than 401 and 429, the first few of them.
    unexpected: Mutex<Vec<String>>,
    unexpected_count: AtomicU64,
}

impl FloodCounts {
    fn answered(&self) -> u64 {
        self.unauthorized() + self.throttled()
    }

    fn unauthorized(&self) -> u64 {
        self.h2_unauthorized.load(Ordering::Relaxed) + self.h1_unauthorized.load(Ordering::Relaxed)
    }

    fn throttled(&self) -> u64 {
        self.h2_throttled.load(Ordering::Relaxed) + self.h1_throttled.load(Ordering::Relaxed)
    }

    fn count(&self, h2: bool, response: &http::Response<hyper::body::Incoming>) {
        let counter = match (h2, response.status()) {
            (true, StatusCode::UNAUTHORIZED) => &self.h2_unauthorized,
            (true, StatusCode::TOO_MANY_REQUESTS) => &self.h2_throttled,
            (false, StatusCode::UNAUTHORIZED) => &self.h1_unauthorized,
            (false, StatusCode::TOO_MANY_REQUESTS) => &self.h1_throttled,
            (_, status) => {
                self.unexpected_count.fetch_add(1, Ordering::Relaxed);
                let mut unexpected = self.unexpected.lock().unwrap_or_else(|e| e.into_inner());
                if unexpected.len() < 10 {
                    let proto = if h2 { "h2c" } else { "HTTP/1.1" };
                    unexpected.push(format!("{proto}: {status}"));
                }
                return;
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if response.status() == StatusCode::TOO_MANY_REQUESTS
            && response
                .headers()
                .get(http::header::RETRY_AFTER)
                .is_none_or(|v| v != "1")
        {
            self.throttled_without_retry_after
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    fn summary(&self) -> String {
        format!(
            "h2c: {} 401, {} 429; HTTP/1.1: {} 401, {} 429; {} reconnects; {} unexpected {:?}",
            self.h2_unauthorized.load(Ordering::Relaxed),
            self.h2_throttled.load(Ordering::Relaxed),
            self.h1_unauthorized.load(Ordering::Relaxed),
            self.h1_throttled.load(Ordering::Relaxed),
            self.reconnects.load(Ordering::Relaxed),
            self.unexpected_count.load(Ordering::Relaxed),
            self.unexpected.lock().unwrap_or_else(|e| e.into_inner()),
        )
    }
}

/// Random bearer tokens for `/metrics`, as fast as podprobe answers them,
/// from `h2` h2c connections with [`MAX_CONCURRENT_STREAMS`] requests in
/// flight on each, and `h1` HTTP/1.1 keep-alive connections with one each
/// (which the per-connection review limit never throttles: a 429 to them
/// is the full review queue's). Every request is sent again once
/// answered, every connection opened again once closed. From a thread and
/// runtime of its own, as another process would; stops when dropped.
struct Flood {
    counts: Arc<FloodCounts>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type H2Sender = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;
type H1Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

fn forged_request() -> Request<Empty<Bytes>> {
    Request::get("/metrics")
        .header("host", "podprobe")
        .header(
            "authorization",
            format!("Bearer forged-{:016x}", rand::random::<u64>()),
        )
        .body(Empty::new())
        .expect("request")
}

impl Flood {
    fn start(addr: SocketAddr, h2: usize, h1: usize) -> Flood {
        let counts = Arc::new(FloodCounts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (counts, stop) = (counts.clone(), stop.clone());
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("flood runtime");
                runtime.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..h2 {
                        tasks.spawn(Self::h2_connection(addr, counts.clone(), stop.clone()));
                    }
                    for _ in 0..h1 {
                        tasks.spawn(Self::h1_connection(addr, counts.clone(), stop.clone()));
                    }
                    while tasks.join_next().await.is_some() {}
                });
            }
        });
        Flood {
            counts,
            stop,
            thread: Some(thread),
        }
    }

    async fn h2_connection(addr: SocketAddr, counts: Arc<FloodCounts>, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            let Ok(sender) = Self::connect_h2(addr).await else {
                counts.reconnects.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
                continue;
            };
            let streams = (0..MAX_CONCURRENT_STREAMS).map(|_| {
                let (mut sender, counts, stop) = (sender.clone(), counts.clone(), stop.clone());
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(response) = sender.send_request(forged_request()).await else {
                            return;
                        };
                        counts.count(true, &response);
                        if response.into_body().collect().await.is_err() {
                            return;
                        }
                    }
                }
            });
            futures::future::join_all(streams).await;
            counts.reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn h1_connection(addr: SocketAddr, counts: Arc<FloodCounts>, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut sender) = Self::connect_h1(addr).await {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(response) = sender.send_request(forged_request()).await else {
                        break;
                    };
                    counts.count(false, &response);
                    if response.into_body().collect().await.is_err() {
                        break;
                    }
                }
            }
            counts.reconnects.fetch_add(1, Ordering::Relaxed);
            tokio::task::yield_now().await;
        }
    }

    async fn connect_h2(addr: SocketAddr) -> Result<H2Sender, String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        Ok(sender)
    }

    async fn connect_h1(addr: SocketAddr) -> Result<H1Sender, String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `apiserver_request_total` of `TokenReview` creations: every one the
/// API server has answered since it started.
fn api_server_token_reviews() -> f64 {
    let text = cluster()
        .kubectl(&["get", "--raw", "/metrics"])
        .unwrap_or_else(|e| panic!("the API server's metrics: {e}"));
    metric_sum(
        &text,
        "apiserver_request_total",
        &[r#"resource="tokenreviews""#, r#"verb="POST""#],
    )
}

/// Latencies, for the report: the slowest and the median.
fn latency_summary(latencies: &mut [Duration]) -> String {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    format!(
        "{} answers, median {:?}, p99 {:?}, slowest {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        latencies.last().copied().unwrap_or_default()
    )
}

/// A host-process podprobe guarding `/metrics` with reviews by the real API
/// server, flooded with random bearer tokens from as many connections as it
/// takes (`--max-connections`, 64), h2c ones with 16 requests in flight
/// each and HTTP/1.1 ones: each token costs a real `TokenReview`, or a 429
/// with `Retry-After` when the review queue is full. For the kubelet's
/// whole decision window (the chart's liveness `failureThreshold` ×
/// `periodSeconds`), `/healthz` and `/readyz`, each on a fresh connection
/// as the kubelet probes, answer 200 within the chart's `timeoutSeconds`,
/// and a scraper whose token (a ServiceAccount's, bound to the shipped
/// `podprobe-metrics-reader`) was reviewed before the flood keeps getting
/// its metrics within the same time.
#[test]
fn healthz_readyz_and_a_known_scraper_are_answered_on_the_cluster_under_a_flood_of_forged_tokens() {
    let liveness = chart_probe("livenessProbe");
    let readiness = chart_probe("readinessProbe");
    // Each answer must come within the stricter probe's timeout, for the
    // whole time in which the kubelet would restart podprobe (or take it
    // out of its Service) after failed probes.
    let probe_timeout = liveness.timeout.min(readiness.timeout);
    let flood_for = (liveness.period * liveness.failure_threshold)
        .max(readiness.period * readiness.failure_threshold);
    // podprobe serves up to --max-connections (64 by default): the flood
    // takes them all.
    const H2_CONNECTIONS: usize = 48;
    const H1_CONNECTIONS: usize = 16;
    // The kubelet probes every few seconds; the test looks far more often.
    const PROBE_GAP: Duration = Duration::from_millis(100);

    let id = unique_id();
    let ns = Namespace::create(&format!("podprobe-flood-{id}"));
    let mut created = ClusterScoped(Vec::new());
    let token = scraper_token(&ns, &mut created);
    let mut podprobe = HostPodprobe::start_with_args(
        "gate",
        &cluster().node_name(),
        &id,
        // The chart's defaults: delegated auth, info logs (at debug each
        // refused request is a line).
        &["--metrics-auth", "delegated", "--log-level", "info"],
    );
    let addr: SocketAddr = podprobe.listen_addr().parse().expect("listen address");
    let diagnostics = |podprobe: &HostPodprobe| {
        format!(
            "{}\n--- podprobe log (last lines)\n{}",
            ns.diagnostics(),
            podprobe.log_tail(60)
        )
    };
    wait_for(
        "podprobe ready",
        Duration::from_secs(60),
        || match get(addr, "/readyz", None, probe_timeout) {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
        || diagnostics(&podprobe),
    );
    // The scraper's token is reviewed (and cached) before the flood; a
    // forged one is refused after a real review.
    assert_eq!(
        get(addr, "/metrics", Some(&token), probe_timeout).map(|r| r.0),
        Ok(200),
        "the scraper before the flood\n{}",
        diagnostics(&podprobe)
    );
    assert_eq!(
        get(addr, "/metrics", Some("forged"), probe_timeout).map(|r| r.0),
        Ok(401)
    );
    let reviews_before = api_server_token_reviews();

    let flood = Flood::start(addr, H2_CONNECTIONS, H1_CONNECTIONS);
    // Flooding for real: tokens reviewed and refused, the queue full.
    wait_for(
        "the flood answered 401 and 429",
        Duration::from_secs(30),
        || {
            let counts = &flood.counts;
            (counts.unauthorized() > 0 && counts.throttled() > 0)
                .then_some(())
                .ok_or_else(|| counts.summary())
        },
        || diagnostics(&podprobe),
    );
    let flooded = Instant::now();
    let answered_before = flood.counts.answered();
    let mut health = Vec::new();
    let mut scrapes = Vec::new();
    let mut round = 0;
    while flooded.elapsed() < flood_for {
        for path in ["/healthz", "/readyz", "/metrics"] {
            let token = (path == "/metrics").then_some(token.as_str());
            match get(addr, path, token, probe_timeout) {
                Ok((200, took)) if path == "/metrics" => scrapes.push(took),
                Ok((200, took)) => health.push(took),
                other => panic!(
                    "{path} (round {round}, {:?} into the flood) got {other:?}, where the \
                     kubelet's probe wants 200 within {probe_timeout:?}; flood so far: {}\n{}",
                    flooded.elapsed(),
                    flood.counts.summary(),
                    diagnostics(&podprobe)
                ),
            }
        }
        round += 1;
        std::thread::sleep(PROBE_GAP);
    }
    let flood_time = flooded.elapsed();
    let answered = flood.counts.answered() - answered_before;
    let counts = flood.counts.clone();
    drop(flood);
    let reviews = api_server_token_reviews() - reviews_before;

    let text = get_body(addr, "/metrics", &token, probe_timeout)
        .unwrap_or_else(|e| panic!("the scraper after the flood: {e}"));
    let decisions = |outcome: &str| {
        metric_sum(
            &text,
            "podprobe_metrics_auth_decisions_total",
            &[&format!(r#"outcome="{outcome}""#)],
        )
    };
    eprintln!(
        "flood for {flood_time:?}: {answered} forged requests answered ({:.0}/s; {}); the API \
         server answered {reviews} TokenReviews ({:.0}/s); podprobe counted {} unauthenticated \
         and {} throttled\n/healthz and /readyz: {}\nscraper: {}",
        answered as f64 / flood_time.as_secs_f64(),
        counts.summary(),
        reviews / flood_time.as_secs_f64(),
        decisions("unauthenticated"),
        decisions("throttled"),
        latency_summary(&mut health),
        latency_summary(&mut scrapes),
    );
    assert_eq!(
        counts.unexpected_count.load(Ordering::Relaxed),
        0,
        "forged tokens are answered 401 or 429 only: {}",
        counts.summary()
    );
    assert_eq!(
        counts.throttled_without_retry_after.load(Ordering::Relaxed),
        0,
        "every 429 says when to retry: {}",
        counts.summary()
    );
    // One request at a time per connection never meets the per-connection
    // limit: these 429s are the review queue's, full.
    assert!(
        counts.h1_throttled.load(Ordering::Relaxed) > 0
            && counts.h1_unauthorized.load(Ordering::Relaxed) > 0,
        "the HTTP/1.1 flood must be both reviewed (401) and turned away by the full review \
         queue (429): {}",
        counts.summary()
    );
    // Each 401 was a real review: the API server answered at least as
    // many, and podprobe counted every refusal the flood saw.
    assert!(
        reviews >= counts.unauthorized() as f64,
        "{reviews} TokenReviews for {} refused tokens",
        counts.unauthorized()
    );
    assert!(
        decisions("unauthenticated") >= counts.unauthorized() as f64
            && decisions("throttled") >= counts.throttled() as f64,
        "podprobe's decisions ({} unauthenticated, {} throttled) against the flood's {}",
        decisions("unauthenticated"),
        decisions("throttled"),
        counts.summary()
    );
    assert_eq!(
        podprobe.terminate(),
        Some(0),
        "podprobe exits cleanly after the flood\n{}",
        podprobe.log_tail(60)
    );
}

/// `GET path` with a bearer token: the body of a 200.
fn get_body(
    addr: SocketAddr,
    path: &str,
    token: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(response),
    }
}
