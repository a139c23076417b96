//! The metrics of the API clients' requests (counted through
//! [`RequestObserver`]): how long each waited for its client's request
//! limit and how long the API server took to answer it, by client;
//! client-go's `rest_client_rate_limiter_duration_seconds` and
//! `rest_client_request_duration_seconds`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::apiclient::{ClientName, RequestObserver};

/// Buckets of `podprobe_api_rate_limiter_wait_seconds` and
/// `podprobe_api_request_duration_seconds`: client-go's for
/// `rest_client_rate_limiter_duration_seconds` and
/// `rest_client_request_duration_seconds`.
const API_CLIENT_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClientLabels {
    /// `api` or `reviews` ([`ClientName`]).
    client: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn api_client_histogram() -> Histogram {
    Histogram::new(API_CLIENT_BUCKETS)
}

/// The API clients' metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct RequestMetrics {
    rate_limiter_wait: HistogramFamily<ClientLabels>,
    api_request_duration: HistogramFamily<ClientLabels>,
}

impl RequestMetrics {
    /// Registers the clients' families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = RequestMetrics {
            rate_limiter_wait: Family::new_with_constructor(api_client_histogram),
            api_request_duration: Family::new_with_constructor(api_client_histogram),
        };
        registry.register(
            "podprobe_api_rate_limiter_wait_seconds",
            "Time each API request waited for its client's request limit before it was sent, by client (api: --kube-api-qps, everything but reviews and Event writes; reviews: --review-qps; guards: --workload-guard-qps, the restartBudget and readinessFloor decisions); client-go's rest_client_rate_limiter_duration_seconds",
            metrics.rate_limiter_wait.clone(),
        );
        registry.register(
            "podprobe_api_request_duration_seconds",
            "Time the API server took to answer each API request once sent, watches left out, by client; client-go's rest_client_request_duration_seconds",
            metrics.api_request_duration.clone(),
        );
        metrics
    }
}

impl RequestObserver for RequestMetrics {
    fn waited(&self, client: ClientName, wait: Duration) {
        self.rate_limiter_wait
            .get_or_create(&ClientLabels {
                client: client.as_str(),
            })
            .observe(wait.as_secs_f64());
    }

    fn answered(&self, client: ClientName, took: Duration) {
        self.api_request_duration
            .get_or_create(&ClientLabels {
                client: client.as_str(),
            })
            .observe(took.as_secs_f64());
    }
}
