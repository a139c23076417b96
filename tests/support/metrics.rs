//! Reading a host podprobe's metrics: a bare `GET` on its loopback listener
//! and sums over the Prometheus text exposition, so that a test can assert
//! on what podprobe counted without a metrics client.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::time::Duration;

/// `GET path` on loopback `addr`: the body when the status is 200.
pub fn http_get(addr: &str, path: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    if !response.starts_with("HTTP/1.1 200") {
        return Err(response);
    }
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default())
}

/// Sum of the samples of metric `name` whose labels include every one of
/// `labels` (`key="value"` strings), from a Prometheus text exposition.
pub fn metric_sum(exposition: &str, name: &str, labels: &[&str]) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|label| rest.contains(label)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Every sample of metrics whose name starts with `prefix`.
pub fn metric_lines(exposition: &str, prefix: &str) -> Vec<String> {
    exposition
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}
