//! The `podprobe` command: flag parsing and wiring only.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The kubelet's prober as a node-local sidecar.
#[derive(Parser, Debug)]
#[command(name = "podprobe", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one probe once and report what the kubelet would conclude.
    Probe(podprobe::oneshot::ProbeArgs),
    /// Run the node daemon: probe the annotated pods of this node and publish
    /// their `podprobe.io/ready` condition.
    Run(podprobe::config::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe(args) => podprobe::oneshot::main(args),
        Command::Run(args) => podprobe::daemon::main(args),
    }
}
