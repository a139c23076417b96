//! podprobe's exit statuses: one table for every subcommand, so that
//! `probe`, `lint`, `simulate` and `run` mean the same by the same number.

/// The probe failed (`podprobe probe`), or lint found problems.
pub const FAILURE: u8 = 1;

/// The probe's result is unknown or it errored (`podprobe probe`), or
/// podprobe could not start its async runtime.
pub const ERROR: u8 = 2;

/// Flags or input podprobe cannot run with (BSD `EX_USAGE`).
pub const USAGE: u8 = 64;
