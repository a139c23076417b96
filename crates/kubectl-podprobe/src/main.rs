//! `kubectl podprobe`: what podprobe's probes of a pod last saw (`status`)
//! and why the pod is not Ready (`why`), without access to the node
//! (PS3-PS4 in docs/kubelet-semantics.md).
//!
//! Both read the pod's `PodProbes` from the API server, `GET /apis/
//! status.podprobe.io/v1alpha1/namespaces/{namespace}/probes/{pod}`, which
//! podprobe serves through API aggregation (see [`reach`]); `why` reads the
//! pod too. The API server authenticates the caller with whatever the
//! kubeconfig holds; podprobe answers a caller who may `get` the pod and
//! `get probes.status.podprobe.io`, and shows the probes' outputs only to
//! one who may also `get pods/log` of the pod.

mod reach;
mod render;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use podprobe_core::prober::not_ready;

use crate::reach::ReachError;

/// What podprobe's probes of a pod last saw, and why the pod is not Ready.
///
/// Reads the pod's probes from podprobe's aggregated API
/// (status.podprobe.io/v1alpha1, resource probes) with your kubeconfig,
/// whatever it authenticates with. You need, in the pod's namespace: `get`
/// on probes.status.podprobe.io (the chart's ClusterRole
/// podprobe-status-reader, aggregated to view) and `get` on the pod; to
/// see the probes' outputs, `get` on pods/log too (view grants all three).
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

    /// Output format: json and yaml print the PodProbes object as served
    /// (status) or the explanation (why).
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Per container and probe: the last result, when it ran, the
    /// consecutive count against its threshold, the next run and the last
    /// output (up to 4 KiB; only if you may get pods/log of the pod).
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
    let client = kube::Client::try_from(config).map_err(|e| ReachError::Config(e.to_string()))?;
    match &cli.command {
        Command::Status { pod: name } => {
            let served = reach::pod_probes(&client, &namespace, name).await?;
            match cli.output {
                Format::Table => Ok(render::status_table(&served.probes, now())),
                Format::Json => json(&served.raw),
                Format::Yaml => yaml(&served.raw),
            }
        }
        Command::Why { pod: name } => {
            let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
            let (pod, probes) =
                tokio::join!(pods.get(name), reach::pod_probes(&client, &namespace, name));
            let pod = pod.map_err(|source| ReachError::Pod {
                namespace: namespace.clone(),
                name: name.clone(),
                source,
            })?;
            // A pod podprobe runs no probe of is still explained, from the
            // pod alone; any other failure to read its probes is an error.
            let probes = match probes {
                Ok(served) => Some(served.probes),
                Err(ReachError::NoProbes { .. }) => None,
                Err(error) => return Err(error),
            };
            let hidden = probes
                .as_ref()
                .is_some_and(|p| !p.output_shown && !p.probes.is_empty());
            let report = probes.map(|p| p.into_report());
            let explanation = not_ready::explain(&pod, report.as_ref());
            match cli.output {
                Format::Table if hidden => Ok(format!(
                    "{}\n{}\n",
                    explanation.paragraph(),
                    render::OUTPUT_HIDDEN
                )),
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
