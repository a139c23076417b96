//! Exec probes through the runtime's CRI `ExecSync` (E3-E5).
//!
//! As in the kubelet (`pkg/probe/exec`, the prober's `execInContainer` and
//! the CRI client's `ExecSync`): the runtime runs the command with the probe's
//! timeout in whole seconds; the output is stdout followed by stderr, of which
//! the first 10 KiB are kept; exit code 0 is success, any other is failure; a
//! runtime timeout is a failure whose output says so; anything else is an
//! error, which the wrapper retries.

use std::time::Duration;

use tonic::Code;

use crate::runtime::cri::{CriClient, ExecSyncResponse};
use podprobe_core::spec::{Attempt, MAX_OUTPUT_BYTES, Outcome, ProbeError, ProbeResult};
use podprobe_core::util::gofmt::{go_duration, go_quote};

/// Runs `command` in `container_id` of `pod` (its UID) through CRI with
/// `timeout`, cut to the longest a probe may hold an exec slot.
pub async fn probe(
    cri: &CriClient,
    pod: &str,
    container_id: &str,
    command: &[String],
    timeout: Duration,
) -> Attempt {
    let timeout = cri.exec_timeout(timeout);
    match cri.exec_sync(pod, container_id, command, timeout).await {
        Ok(response) => Ok(outcome(&response)),
        Err(err) if err.code() == Some(Code::DeadlineExceeded) => Ok(Outcome::new(
            ProbeResult::Failure,
            timed_out_message(command, timeout),
        )),
        Err(err) => Err(ProbeError::unknown(err.to_string())),
    }
}

/// Success on exit code 0, failure otherwise; the output either way.
fn outcome(response: &ExecSyncResponse) -> Outcome {
    let result = if response.exit_code == 0 {
        ProbeResult::Success
    } else {
        ProbeResult::Failure
    };
    Outcome::new(result, capped_output(&response.stdout, &response.stderr))
}

/// stdout then stderr (not interleaved), cut at [`MAX_OUTPUT_BYTES`]; the rest
/// is dropped silently, like the kubelet's limit writer.
fn capped_output(stdout: &[u8], stderr: &[u8]) -> String {
    let data: Vec<u8> = stdout
        .iter()
        .chain(stderr)
        .take(MAX_OUTPUT_BYTES)
        .copied()
        .collect();
    String::from_utf8_lossy(&data).into_owned()
}

/// The CRI client's wording for a runtime timeout (`ErrCommandTimedOut`):
/// `command timed out: "<cmd>" timed out after <timeout>`.
fn timed_out_message(command: &[String], timeout: Duration) -> String {
    format!(
        "command timed out: {} timed out after {}",
        go_quote(&command.join(" ")),
        go_duration(timeout)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(stdout: &[u8], stderr: &[u8], exit_code: i32) -> ExecSyncResponse {
        ExecSyncResponse {
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            exit_code,
        }
    }

    #[test]
    fn e5_exit_zero_is_success_with_output() {
        assert_eq!(
            outcome(&response(b"ok\n", b"", 0)),
            Outcome::new(ProbeResult::Success, "ok\n")
        );
    }

    #[test]
    fn e5_non_zero_exit_is_failure_with_stdout_then_stderr() {
        assert_eq!(
            outcome(&response(b"out\n", b"err\n", 3)),
            Outcome::new(ProbeResult::Failure, "out\nerr\n")
        );
    }

    #[test]
    fn e4_output_is_cut_at_10_kib_across_both_streams() {
        let stdout = vec![b'o'; 10_000];
        let stderr = vec![b'e'; 1_000];
        let output = capped_output(&stdout, &stderr);
        assert_eq!(output.len(), MAX_OUTPUT_BYTES);
        assert!(output.starts_with(&"o".repeat(10_000)));
        assert!(output.ends_with(&"e".repeat(240)));
    }

    #[test]
    fn e5_timeout_message_matches_cri_client() {
        let cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            "sleep 5; echo \"done\"".to_string(),
        ];
        assert_eq!(
            timed_out_message(&cmd, Duration::from_secs(1)),
            r#"command timed out: "sh -c sleep 5; echo \"done\"" timed out after 1s"#
        );
    }
}
