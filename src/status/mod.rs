//! Pod status: the pure decisions are `podprobe_core::status`'s, re-exported
//! here; [`patcher`] is the edge that writes them to the API server.

pub mod patcher;

pub use podprobe_core::status::*;
