//! manager (prober core).
