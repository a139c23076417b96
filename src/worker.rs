//! worker (prober core).
