//! A TCP proxy a test puts between podprobe and an API server, to force a
//! race: frozen, it holds everything podprobe sends and tells podprobe
//! nothing, so that the API server moves on while podprobe acts on what it
//! last saw. It fronts the API server of any kubeconfig (the shared local
//! cluster's or a test's private one) and writes a kubeconfig leading
//! through it.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A TCP proxy between podprobe and the API server (TLS passes through it
/// untouched). While frozen it forwards nothing either way: what podprobe
/// sends is held until the thaw, and podprobe hears nothing, its watch
/// included, so it goes on acting on the pods as it last saw them.
pub struct ApiProxy {
    frozen: tokio::sync::watch::Sender<bool>,
    /// Bytes podprobe sent since the last freeze.
    held: Arc<AtomicU64>,
    /// The original kubeconfig with the proxy as the server.
    kubeconfig: tempfile::NamedTempFile,
}

impl ApiProxy {
    /// Starts the proxy on `rt`, listening on a free loopback port, in front
    /// of the API server of the kubeconfig at `kubeconfig_path` (its current
    /// context), and writes [`kubeconfig`](Self::kubeconfig): the same with
    /// the proxy as the server. The server certificate is still checked
    /// against the original host (through `tls-server-name` when that is a
    /// name). Files the kubeconfig names must be given by absolute paths, as
    /// the copy lives elsewhere.
    pub fn start(rt: &tokio::runtime::Runtime, kubeconfig_path: &str) -> ApiProxy {
        let text = std::fs::read_to_string(kubeconfig_path)
            .unwrap_or_else(|e| panic!("read the kubeconfig {kubeconfig_path}: {e}"));
        let mut config: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).expect("kubeconfig YAML");
        let context = config["current-context"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let cluster_name = config["contexts"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|c| c["name"].as_str() == Some(context.as_str()))
            .and_then(|c| c["context"]["cluster"].as_str())
            .expect("the current context's cluster")
            .to_string();
        let entry = config["clusters"]
            .as_sequence_mut()
            .into_iter()
            .flatten()
            .find(|c| c["name"].as_str() == Some(cluster_name.as_str()))
            .and_then(|c| c["cluster"].as_mapping_mut())
            .expect("the current cluster");
        let server = entry
            .get("server")
            .and_then(|s| s.as_str())
            .expect("the cluster's server")
            .to_string();
        let authority = server
            .strip_prefix("https://")
            .expect("an https:// server")
            .split('/')
            .next()
            .unwrap_or_default();
        let (host, upstream) = match authority.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => (host, authority.to_string()),
            _ => (authority, format!("{authority}:443")),
        };

        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the API proxy");
        let addr = listener.local_addr().expect("the API proxy's address");
        entry.insert("server".into(), format!("https://{addr}").into());
        let ip = host.trim_start_matches('[').trim_end_matches(']');
        if ip.parse::<std::net::IpAddr>().is_err() {
            entry.insert("tls-server-name".into(), host.into());
        }
        let kubeconfig = tempfile::NamedTempFile::new().expect("temp file");
        let text = serde_yaml_ng::to_string(&config).expect("kubeconfig YAML");
        std::fs::write(kubeconfig.path(), text).expect("write the proxied kubeconfig");

        let (frozen, _) = tokio::sync::watch::channel(false);
        let held = Arc::new(AtomicU64::new(0));
        let (watch, counter) = (frozen.subscribe(), held.clone());
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (frozen, held, upstream) = (watch.clone(), counter.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (from_client, to_client) = client.into_split();
                    let (from_server, to_server) = server.into_split();
                    tokio::join!(
                        pump(from_client, to_server, frozen.clone(), Some(held)),
                        pump(from_server, to_client, frozen, None),
                    );
                });
            }
        });
        ApiProxy {
            frozen,
            held,
            kubeconfig,
        }
    }

    /// The kubeconfig that leads through the proxy.
    pub fn kubeconfig(&self) -> &str {
        self.kubeconfig.path().to_str().expect("a UTF-8 temp path")
    }

    pub fn freeze(&self) {
        self.held.store(0, Ordering::SeqCst);
        self.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }

    /// Bytes podprobe sent since the last freeze.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }
}

impl Drop for ApiProxy {
    /// A test that fails while frozen still lets podprobe shut down cleanly.
    fn drop(&mut self) {
        self.thaw();
    }
}

/// Copies `from` to `to` until either end closes, holding each chunk while
/// `frozen` (and counting it into `held`).
pub async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
    held: Option<Arc<AtomicU64>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if *frozen.borrow_and_update() {
            if let Some(held) = &held {
                held.fetch_add(n as u64, Ordering::SeqCst);
            }
            if frozen.wait_for(|frozen| !frozen).await.is_err() {
                break;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
