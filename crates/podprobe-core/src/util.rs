//! Small pure helpers every layer may use: pod accessors ([`pod`]), token
//! buckets ([`rate_limit`]), slots shared fairly between pods
//! ([`fair_slots`]), retry delays ([`backoff`]), the exit codes
//! ([`exit_code`]), when the watch last heard from the API server
//! ([`watch_activity`]) and what a cache of objects read by namespace and
//! name keeps ([`ttl_cache`]).

pub mod backoff;
pub mod exit_code;
pub mod fair_slots;
pub mod gofmt;
pub mod label_selector;
pub mod pod;
pub mod rate_limit;
pub mod ttl_cache;
pub mod watch_activity;
