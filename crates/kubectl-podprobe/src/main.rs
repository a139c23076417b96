//! `kubectl podprobe`: what podprobe's probes of a pod last saw (`status`)
//! and why the pod is not Ready (`why`), without access to the node
//! (PS3-PS4 in docs/kubelet-semantics.md).
//!
//! The pod comes from the API server with the caller's own credentials; its
//! probe status from the podprobe of the pod's node, reached through the
//! API server's pods/proxy subresource (see [`reach`]). That podprobe
//! answers only a caller who may `get` the pod, which it asks the API
//! server with the caller's bearer token.

mod reach;
mod render;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use podprobe_core::not_ready;
use podprobe_core::probe_ledger::PodReport;

use crate::reach::{Podprobe, ReachError};

/// What podprobe's probes of a pod last saw, and why the pod is not Ready.
///
/// Reads the pod with your kubeconfig, then asks the podprobe on the pod's
/// node through the API server (pods/proxy). You need: `get` on the pod;
/// `list` pods and `get` pods/proxy in podprobe's namespace (the chart's
/// Role `podprobe-status-reader`); and a bearer token (your kubeconfig's,
/// or --token), which podprobe has the API server review.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl podprobe",
    bin_name = "kubectl podprobe",
    version,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// The pod's namespace [default: the kubeconfig context's].
    #[arg(short, long, global = true)]
    namespace: Option<String>,

    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,

    /// The namespace podprobe runs in.
    #[arg(
        long,
        global = true,
        env = "KUBECTL_PODPROBE_NAMESPACE",
        default_value = "podprobe-system"
    )]
    podprobe_namespace: String,

    /// The label selector of podprobe's pods.
    #[arg(
        long,
        global = true,
        env = "KUBECTL_PODPROBE_SELECTOR",
        default_value = "app.kubernetes.io/name=podprobe"
    )]
    podprobe_selector: String,

    /// Bearer token to identify you to podprobe [default: the kubeconfig
    /// user's token or token file]. Needed when the kubeconfig
    /// authenticates with a client certificate or an exec plugin.
    #[arg(
        long,
        global = true,
        env = "KUBECTL_PODPROBE_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Per container and probe: the last result, when it ran, the
    /// consecutive count against its threshold, the next run and the last
    /// output (up to 4 KiB).
    Status {
        /// The pod's name.
        pod: String,
    },
    /// Why the pod is not Ready, in one paragraph: which probe, which
    /// threshold, what it saw, or that the kubelet's own part is the reason.
    Why {
        /// The pod's name.
        pod: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
    Yaml,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The text to print.
async fn run(cli: Cli) -> Result<String, ReachError> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| ReachError::Config(e.to_string()))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let token = match cli.token.clone() {
        Some(token) => token,
        None => reach::kubeconfig_token(&config)?,
    };
    let client = kube::Client::try_from(config).map_err(|e| ReachError::Config(e.to_string()))?;
    let (Command::Status { pod: name } | Command::Why { pod: name }) = &cli.command;
    let pod = Api::<Pod>::namespaced(client.clone(), &namespace)
        .get(name)
        .await
        .map_err(|source| ReachError::Pod {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    let podprobe = Podprobe {
        client,
        namespace: cli.podprobe_namespace.clone(),
        selector: cli.podprobe_selector.clone(),
        token,
    };
    let report = podprobe.report(&pod).await;
    match cli.command {
        Command::Status { .. } => {
            let report = report?;
            match cli.output {
                Format::Table => Ok(render::status_table(&report, now())),
                Format::Json => json(&report),
                Format::Yaml => yaml(&report),
            }
        }
        Command::Why { .. } => {
            // A pod podprobe runs no probe of is still explained, from the
            // pod alone; any other failure to reach podprobe is an error.
            let report: Option<PodReport> = match report {
                Ok(report) => Some(report),
                Err(ReachError::NoProbes { .. }) => None,
                Err(error) => return Err(error),
            };
            let explanation = not_ready::explain(&pod, report.as_ref());
            match cli.output {
                Format::Table => Ok(format!("{}\n", explanation.paragraph())),
                Format::Json => json(&explanation),
                Format::Yaml => yaml(&explanation),
            }
        }
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

fn json(value: &impl serde::Serialize) -> Result<String, ReachError> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| ReachError::Encode(e.to_string()))
}

fn yaml(value: &impl serde::Serialize) -> Result<String, ReachError> {
    serde_yaml_ng::to_string(value).map_err(|e| ReachError::Encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_flag_has_help() {
        Cli::command().debug_assert();
        for sub in Cli::command().get_subcommands() {
            for arg in sub.get_arguments() {
                assert!(arg.get_help().is_some(), "{} has no help", arg.get_id());
            }
        }
    }
}
