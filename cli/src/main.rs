//! The `cordon` CLI: one subcommand per library entry point, `--json` for runners in other
//! languages. This file parses, dispatches and turns the outcome into an exit code: 0 done (and
//! good), 1 done but not good (a failed case, no answer, a refused tree: a person must look), 2
//! could not do it.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cordon::Controller;

mod audit;
mod bench;
mod doctor;
mod egress;
mod gate;
mod human;
mod image;
mod input;
mod progress;
mod run;
mod task;

#[derive(Debug, Parser)]
#[command(
    name = "cordon",
    version,
    about = "An isolation boundary for AI coding agents"
)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Build the in-container binaries from this cordon workspace instead of using the ones
    /// carried in this binary.
    #[arg(long, global = true)]
    workspace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build (or reuse) the FROM scratch test image from the in-container binaries.
    Image {
        #[command(subcommand)]
        action: image::ImageAction,
    },
    /// Build the images, run the whole gate, print the truth table (exit 0 only if every case passes).
    Gate(gate::GateArgs),
    /// Check the engine and what it gives a hardened container (exit non-zero when not good enough).
    Doctor,
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        action: bench::BenchAction,
    },
    /// Task storage: prepare (stage, check, allocate, seed) and remove.
    Task {
        #[command(subcommand)]
        action: task::TaskAction,
    },
    /// The change audit's reads of task storage: the declared-link snapshot, the pre-launch tree
    /// check.
    Audit {
        #[command(subcommand)]
        action: audit::AuditAction,
    },
    /// Run one agent invocation on a repository: prepare its storage, run, settle, remove the
    /// storage, print the result (exit 0 with an answer, 1 without).
    Run(Box<run::RunArgs>),
    /// Remove what an owner left (containers, networks, interrupted storage) and hand back its
    /// intact task storage.
    Recover(task::RecoverArgs),
    /// The egress proxy's code, outside a container, for diagnosis.
    Egress {
        #[command(subcommand)]
        action: egress::EgressAction,
    },
}

/// What every subcommand gets: the controller (the engine connection and this process's
/// registries) and the global options.
#[derive(Debug)]
pub struct Ctx {
    pub ctl: Controller,
    pub json: bool,
    pub workspace: Option<PathBuf>,
}

/// `value` as JSON, or `text()` for a person.
pub fn print<T: serde::Serialize>(
    json: bool,
    value: &T,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", text());
    }
    Ok(())
}

/// Exit 0 when `good`, else 1 (the command ran; what it found is not good).
pub fn verdict(good: bool) -> ExitCode {
    if good {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    // The only command that needs no engine.
    let command = match cli.command {
        Command::Egress { action } => return egress::run(action).await,
        command => command,
    };
    let ctx = Ctx {
        ctl: Controller::connect()
            .await
            .context("connecting to the Docker engine")?,
        json: cli.json,
        workspace: cli.workspace,
    };
    match command {
        // Handled before connecting; kept total without a panic.
        Command::Egress { action } => egress::run(action).await,
        Command::Image { action } => image::run(&ctx, action).await,
        Command::Gate(args) => gate::run(&ctx, args).await,
        Command::Doctor => doctor::run(&ctx).await,
        Command::Bench { action } => bench::run(&ctx, action).await,
        Command::Task { action } => task::run(&ctx, action).await,
        Command::Audit { action } => audit::run(&ctx, action).await,
        Command::Run(args) => run::run(&ctx, *args).await,
        Command::Recover(args) => task::recover(&ctx, args).await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The egress proxy logs each refusal (its id) at info: what a person running it came to see.
    let default_filter = match cli.command {
        Command::Egress { .. } => "cordon_egress=info,warn",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let json = cli.json;
    match dispatch(cli).await {
        Ok(code) => code,
        Err(e) => {
            // The message can quote the repository, git or the engine: escaped, on one line.
            eprintln!("cordon: {}", human::line(&format!("{e:#}")));
            let library = e.chain().find_map(|c| c.downcast_ref::<cordon::Error>());
            // A refused tree is an answer, not a failure: the task needs a person.
            let refused_tree = match library {
                Some(cordon::Error::TreeRefused { findings, more }) => {
                    Some((serde_json::to_value(findings).unwrap_or_default(), *more))
                }
                Some(cordon::Error::AuditRefused { findings, more }) => {
                    Some((serde_json::to_value(findings).unwrap_or_default(), *more))
                }
                Some(cordon::Error::CommitRefused { findings }) => {
                    Some((serde_json::to_value(findings).unwrap_or_default(), 0))
                }
                _ => None,
            };
            if json {
                // Runners in other languages get the stable id and the refusals, if any.
                let mut report = serde_json::json!({
                    "error": library.map_or("failed", cordon::Error::id),
                    "message": format!("{e:#}"),
                    "refusals": match library {
                        Some(cordon::Error::Refused(r)) => serde_json::to_value(r).unwrap_or_default(),
                        _ => serde_json::Value::Null,
                    },
                });
                if let Some((findings, more)) = refused_tree.clone() {
                    report["needs_person"] = true.into();
                    report["findings"] = findings;
                    report["more"] = more.into();
                }
                println!("{report}");
            } else if refused_tree.is_some() {
                eprintln!(
                    "cordon: the task needs a person: the audit refused (see the reasons above)"
                );
            }
            if refused_tree.is_some() {
                ExitCode::FAILURE
            } else {
                ExitCode::from(2)
            }
        }
    }
}
