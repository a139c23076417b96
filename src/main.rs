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
    Probe(podprobe::cli::oneshot::ProbeArgs),
    /// Run the node daemon: probe the pods of this node and publish their
    /// readiness (gate mode: the `podprobe.io/ready` condition of annotated
    /// pods; authority mode: container ready/started and Ready/ContainersReady).
    // Boxed: its flags are most of the enum's size.
    Run(Box<podprobe::daemon::flags::RunArgs>),
    /// Simulate a pod's probes in virtual time against a script of how its
    /// containers behave, printing what the kubelet would observe and do.
    #[command(after_help = podprobe::cli::simulate::AFTER_HELP)]
    Simulate(podprobe::cli::simulate::SimulateArgs),
    /// Check manifests offline for gate-mode set-up mistakes (the probe
    /// annotation without the readiness gate, or the gate without it).
    #[command(after_help = podprobe::cli::lint::AFTER_HELP)]
    Lint(podprobe::cli::lint::LintArgs),
    /// Internal: the process `podprobe run --pod-network` starts to make
    /// sockets in pods' network namespaces, so that the daemon itself holds
    /// no CAP_SYS_ADMIN.
    #[command(hide = true)]
    NetnsHelper,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe(args) => podprobe::cli::oneshot::main(args),
        Command::Run(args) => podprobe::daemon::main(*args),
        Command::Simulate(args) => podprobe::cli::simulate::main(args),
        Command::Lint(args) => podprobe::cli::lint::main(args),
        Command::NetnsHelper => match podprobe::probe::netns::helper::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("podprobe netns-helper: {error}");
                ExitCode::FAILURE
            }
        },
    }
}
