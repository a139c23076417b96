//! Probe targets whose health a test switches: loopback HTTP servers that
//! answer 200 or 503 as their [`Switch`] says, which remembers every change
//! and its time so that a test can judge a recorded pod version against what
//! the server answered then.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::http_server::{TestServer, reply};

/// Whether a backend answers 200 or 503, with every change and its time.
pub struct Switch {
    healthy: AtomicBool,
    flips: Mutex<Vec<(Instant, bool)>>,
}

impl Switch {
    pub fn new(healthy: bool) -> Switch {
        Switch {
            healthy: AtomicBool::new(healthy),
            flips: Mutex::new(vec![(Instant::now(), healthy)]),
        }
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::SeqCst)
    }

    pub fn set(&self, healthy: bool) {
        let mut flips = self.flips.lock().unwrap();
        if flips.last().map(|f| f.1) != Some(healthy) {
            self.healthy.store(healthy, Ordering::SeqCst);
            flips.push((Instant::now(), healthy));
        }
    }

    /// Every stretch of failing answers: from, and until (`None`: still).
    pub fn failing_stretches(&self) -> Vec<(Instant, Option<Instant>)> {
        let flips = self.flips.lock().unwrap();
        let mut stretches = Vec::new();
        let mut since = None;
        for &(at, healthy) in flips.iter() {
            match (healthy, since) {
                (false, None) => since = Some(at),
                (true, Some(from)) => {
                    stretches.push((from, Some(at)));
                    since = None;
                }
                _ => {}
            }
        }
        if let Some(from) = since {
            stretches.push((from, None));
        }
        stretches
    }

    /// Whether it answered 200 at any moment of `[from, to]`.
    pub fn healthy_between(&self, from: Instant, to: Instant) -> bool {
        let flips = self.flips.lock().unwrap();
        let at_from = flips
            .iter()
            .rev()
            .find(|f| f.0 <= from)
            .or(flips.first())
            .is_some_and(|f| f.1);
        at_from || flips.iter().any(|&(at, h)| h && at > from && at <= to)
    }
}

/// A loopback server answering `GET` with 200 or 503 as its switch says;
/// stops when dropped.
pub struct Backend {
    server: TestServer,
    pub switch: Arc<Switch>,
}

impl Backend {
    /// Starts a backend on `rt`, on a free loopback port, answering 200 if
    /// `healthy` and 503 otherwise until its switch is flipped.
    pub fn start(rt: &tokio::runtime::Runtime, healthy: bool) -> Backend {
        let switch = Arc::new(Switch::new(healthy));
        let answer = switch.clone();
        let server = rt.block_on(TestServer::start("127.0.0.1:0", move |_| {
            if answer.is_healthy() {
                reply(200, b"ok")
            } else {
                reply(503, b"failing")
            }
        }));
        Backend { server, switch }
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }
}
