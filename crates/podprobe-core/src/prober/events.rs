//! Events as the core decides them: what a probe run or a kill records
//! ([`record`]) and the seam through which the core records it
//! ([`recorder`]). The queue, the spam filter and the writes are the
//! `podprobe` crate's `events` module.

pub mod record;
pub mod recorder;
