//! What podprobe does to containers: stops one whose liveness or startup
//! probe failed ([`kill_container`]) after running its preStop hook
//! ([`lifecycle`]), through the CRI.

pub(crate) mod kill_container;
pub(crate) mod lifecycle;
