//! The one-shot commands (`main.rs` parses the command line): `podprobe
//! probe` runs one probe as the kubelet would ([`oneshot`]), `podprobe lint`
//! checks a pod's probes and its gate ([`lint`]), `podprobe simulate` plays
//! a pod's probes on a paused clock ([`simulate`]). `podprobe run` is the
//! [`crate::daemon`]'s.

pub mod lint;
pub mod oneshot;
pub mod simulate;
