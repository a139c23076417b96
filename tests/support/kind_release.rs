//! The kind cluster's Helm release of podprobe (`hack/kind-e2e.sh` installs
//! it), for the tests that upgrade it: `tests/e2e_kind.rs` and
//! `tests/e2e_upgrade.rs`. Needs the `cluster` and `go_tools` support
//! modules beside it.

use crate::cluster::{PODPROBE_NAMESPACE, cluster};
use crate::go_tools;

/// `helm upgrade` of the kind install with its values and `flag setting`
/// (`--set` or `--set-string`).
pub fn helm_upgrade_reusing_values(flag: &str, setting: &str) {
    go_tools::run_ok(
        &go_tools::helm(),
        &[
            "upgrade",
            "podprobe",
            &go_tools::repo().join("charts/podprobe").to_string_lossy(),
            "--kubeconfig",
            &cluster().kubeconfig,
            "--namespace",
            PODPROBE_NAMESPACE,
            "--reuse-values",
            flag,
            setting,
        ],
    );
}
