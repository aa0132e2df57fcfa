//! The `cordon` CLI: one subcommand per library entry point, `--json` for runners in other
//! languages.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cordon::gate::GateOptions;
use cordon::{bench, doctor, gate, image, Engine};

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
    /// The cordon workspace the in-container binaries are built from.
    #[arg(long, global = true)]
    workspace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build (or reuse) the FROM scratch test image from this workspace.
    Image {
        #[command(subcommand)]
        action: ImageAction,
    },
    /// Build the images, run the whole gate, print the truth table (exit 0 only if every case passes).
    Gate {
        /// Cases run at once.
        #[arg(long, default_value_t = 6)]
        parallel: usize,
        /// Run only the cases whose name contains this.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Check the engine and what it gives a hardened container (exit non-zero when not good enough).
    Doctor,
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        action: BenchAction,
    },
}

#[derive(Debug, Subcommand)]
enum ImageAction {
    /// Build the static binaries and the test image; report its tag and size.
    Build,
}

#[derive(Debug, Subcommand)]
enum BenchAction {
    /// Cold launch through cordon against a bare create+start of the same container.
    Launch {
        #[arg(long, default_value_t = 20)]
        runs: usize,
    },
    /// Wall time of the full gate and the time of each case.
    Gate {
        #[arg(long, default_value_t = 6)]
        parallel: usize,
    },
}

fn print<T: serde::Serialize>(
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

async fn build(engine: &Engine, cli: &Cli) -> anyhow::Result<image::BuiltImage> {
    let workspace = cli
        .workspace
        .clone()
        .unwrap_or_else(image::default_workspace);
    image::build_test_image(engine, &workspace, !cli.json)
        .await
        .context("building the test image")
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let engine = Engine::connect()
        .await
        .context("connecting to the Docker engine")?;
    match &cli.command {
        Command::Image {
            action: ImageAction::Build,
        } => {
            let built = build(&engine, &cli).await?;
            print(cli.json, &built, || {
                format!(
                    "{} {} ({} bytes{}, {} ms)\n",
                    built.tag,
                    built.id,
                    built.size_bytes,
                    if built.reused { ", reused" } else { "" },
                    built.build_ms
                )
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Gate { parallel, filter } => {
            let built = build(&engine, &cli).await?;
            let options = GateOptions {
                parallel: *parallel,
                filter: filter.clone(),
            };
            let report = gate::run(&engine, &built.id, &options)
                .await
                .context("running the gate")?;
            print(cli.json, &report, || report.table())?;
            Ok(if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Doctor => {
            let built = build(&engine, &cli).await?;
            let report = doctor::run(&engine, &built.id)
                .await
                .context("running doctor")?;
            print(cli.json, &report, || report.text())?;
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Bench {
            action: BenchAction::Gate { parallel },
        } => {
            let built = build(&engine, &cli).await?;
            let report = bench::gate(&engine, &built.id, *parallel)
                .await
                .context("benchmarking the gate")?;
            print(cli.json, &report, || report.text())?;
            Ok(if report.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Bench {
            action: BenchAction::Launch { runs },
        } => {
            let built = build(&engine, &cli).await?;
            let report = bench::launch(&engine, &built.id, *runs)
                .await
                .context("benchmarking launch")?;
            print(cli.json, &report, || report.text())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cordon: {e:#}");
            if json {
                // Runners in other languages get the stable id and the refusals, if any.
                let library = e.chain().find_map(|c| c.downcast_ref::<cordon::Error>());
                let report = serde_json::json!({
                    "error": library.map_or("failed", cordon::Error::id),
                    "message": format!("{e:#}"),
                    "refusals": match library {
                        Some(cordon::Error::Refused(r)) => serde_json::to_value(r).unwrap_or_default(),
                        _ => serde_json::Value::Null,
                    },
                });
                println!("{report}");
            }
            ExitCode::from(2)
        }
    }
}
