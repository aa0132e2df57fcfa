//! The `cordon` CLI: one subcommand per library entry point, `--json` for runners in other
//! languages.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cordon::gate::GateOptions;
use cordon::{bench, doctor, gate, image};

mod human;

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
    /// Task storage: prepare (stage, check, allocate, seed) and remove.
    Task {
        #[command(subcommand)]
        action: TaskAction,
    },
    /// Run one agent invocation on a repository: prepare its storage, run, settle, remove the
    /// storage, print the result (exit 0 with an answer, 1 without).
    Run {
        #[arg(long)]
        phase: cordon_contract::Phase,
        #[arg(long)]
        repo: PathBuf,
        #[arg(long, default_value = "HEAD")]
        head: String,
        #[arg(
            long,
            conflicts_with = "prompt_file",
            required_unless_present = "prompt_file"
        )]
        prompt: Option<String>,
        #[arg(long)]
        prompt_file: Option<PathBuf>,
        /// The planning answer's JSON schema (`schema.json`).
        #[arg(long)]
        schema: Option<PathBuf>,
        /// `test` runs the fake vendor CLI of the test image (no credential); `claude` needs
        /// `--image` with the real CLI and CLAUDE_CODE_OAUTH_TOKEN in the environment.
        #[arg(long, default_value = "test")]
        vendor: String,
        /// The image for `--vendor claude`.
        #[arg(long)]
        image: Option<String>,
        /// Owner token for every object made (generated when absent).
        #[arg(long)]
        owner: Option<String>,
        /// Attempt id (generated when absent).
        #[arg(long)]
        attempt: Option<String>,
        /// Echoed in the result (defaults to the commit the storage was seeded from).
        #[arg(long)]
        code_hash: Option<String>,
        #[arg(long, default_value_t = 600)]
        deadline_secs: u64,
        /// The uids storage allocations may run as (`FIRST-LAST`): no host account may use one.
        #[arg(long, default_value = "1100000-1999999")]
        uid_range: cordon::uids::UidRange,
    },
    /// Remove what an owner left (containers, networks, interrupted storage) and hand back its
    /// intact task storage.
    Recover {
        #[arg(long)]
        owner: String,
        /// Also list other owners' objects (never touched).
        #[arg(long)]
        foreign: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TaskAction {
    /// Give a repository's head its own bounded storage; prints the storage handle.
    Prepare {
        #[arg(long)]
        repo: PathBuf,
        #[arg(long)]
        head: String,
        #[arg(long)]
        owner: String,
        #[arg(long)]
        attempt: String,
        /// A lowercase UUID v4 you recorded first (generated when absent).
        #[arg(long)]
        allocation: Option<String>,
        #[arg(long, default_value_t = cordon::storage::DEFAULT_WORK.bytes)]
        work_bytes: u64,
        #[arg(long, default_value_t = cordon::storage::DEFAULT_WORK.inodes)]
        work_inodes: u64,
        #[arg(long, default_value_t = 600)]
        deadline_secs: u64,
        /// The uids storage allocations may run as (`FIRST-LAST`): no host account may use one.
        #[arg(long, default_value = "1100000-1999999")]
        uid_range: cordon::uids::UidRange,
    },
    /// Remove task storage: by its handle (JSON, or @FILE), or by --allocation (and --owner).
    Remove {
        handle: Option<String>,
        #[arg(long)]
        allocation: Option<String>,
        #[arg(long)]
        owner: Option<String>,
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
    /// Questions-phase invocations end to end on a generated repository, and the launch ratio.
    Invoke {
        #[arg(long, default_value_t = 5_000)]
        files: usize,
        #[arg(long, default_value_t = 7)]
        runs: usize,
        #[arg(long, default_value_t = 10)]
        launch_runs: usize,
    },
    /// Seeding a generated repository against a plain upload of the same tree.
    Seed {
        #[arg(long, default_value_t = 20_000)]
        files: usize,
        #[arg(long, default_value_t = 200)]
        mib: u64,
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
}

/// The most a `cordon task remove @FILE` handle file may hold.
const MAX_HANDLE_BYTES: usize = 64 * 1024;

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

async fn build(ctl: &cordon::Controller, cli: &Cli) -> anyhow::Result<image::BuiltImage> {
    let workspace = cli
        .workspace
        .clone()
        .unwrap_or_else(image::default_workspace);
    image::build_test_image(ctl.engine(), &workspace, !cli.json)
        .await
        .context("building the test image")
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ctl = cordon::Controller::connect()
        .await
        .context("connecting to the Docker engine")?;
    match &cli.command {
        Command::Image {
            action: ImageAction::Build,
        } => {
            let built = build(&ctl, &cli).await?;
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
            let built = build(&ctl, &cli).await?;
            let options = GateOptions {
                parallel: *parallel,
                filter: filter.clone(),
            };
            let report = gate::run(&ctl, &built.id, &options)
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
            let built = build(&ctl, &cli).await?;
            let report = doctor::run(&ctl, &built.id)
                .await
                .context("running doctor")?;
            print(cli.json, &report, || report.text())?;
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Task { action } => task(&ctl, &cli, action).await,
        Command::Run { .. } => run_invocation(&ctl, &cli).await,
        Command::Bench {
            action: BenchAction::Seed { files, mib, runs },
        } => {
            let built = build(&ctl, &cli).await?;
            let report = bench::seed(&ctl, &built.id, *files, mib * 1024 * 1024, *runs)
                .await
                .context("benchmarking seeding")?;
            print(cli.json, &report, || report.text())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench {
            action:
                BenchAction::Invoke {
                    files,
                    runs,
                    launch_runs,
                },
        } => {
            let built = build(&ctl, &cli).await?;
            let report = bench::invoke(&ctl, &built.id, *files, *runs, *launch_runs)
                .await
                .context("benchmarking invocations")?;
            print(cli.json, &report, || report.text())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Recover { owner, foreign } => {
            let owner = cordon::labels::Owner::new(owner)?;
            let bar = spinner(cli.json);
            bar.set_message("recovering");
            let report = cordon::task::recover::recover(&ctl, &owner, *foreign).await;
            bar.finish_and_clear();
            let report = report?;
            print(cli.json, &report, || {
                serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench {
            action: BenchAction::Gate { parallel },
        } => {
            let built = build(&ctl, &cli).await?;
            let report = bench::gate(&ctl, &built.id, *parallel)
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
            let built = build(&ctl, &cli).await?;
            let report = bench::launch(&ctl, &built.id, *runs)
                .await
                .context("benchmarking launch")?;
            print(cli.json, &report, || report.text())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn spinner(json: bool) -> indicatif::ProgressBar {
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

async fn task(
    ctl: &cordon::Controller,
    cli: &Cli,
    action: &TaskAction,
) -> anyhow::Result<ExitCode> {
    match action {
        TaskAction::Prepare {
            repo,
            head,
            owner,
            attempt,
            allocation,
            work_bytes,
            work_inodes,
            deadline_secs,
            uid_range,
        } => {
            let request = cordon::task::PrepareRequest {
                repo: repo.clone(),
                head: head.clone(),
                owner: cordon::labels::Owner::new(owner)?,
                attempt: attempt.clone(),
                allocation: allocation
                    .as_deref()
                    .map(cordon::task::parse_allocation)
                    .transpose()?,
                work: cordon::profile::Area {
                    bytes: *work_bytes,
                    inodes: *work_inodes,
                },
                deadline: std::time::Duration::from_secs(*deadline_secs),
                uids: *uid_range,
            };
            let built = build(ctl, cli).await?;
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            let handle = cordon::task::prepare_with(ctl, &built.id, &request, |_| {}, &|step| {
                bar.set_message(step.to_owned())
            })
            .await;
            bar.finish_and_clear();
            let handle = handle?;
            print(cli.json, &handle, || {
                format!("{}\n", serde_json::to_string(&handle).unwrap_or_default())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        TaskAction::Remove {
            handle,
            allocation,
            owner,
        } => {
            let handle: cordon::task::StorageHandle = match (handle, allocation, owner) {
                (Some(text), None, None) => {
                    let text = match text.strip_prefix('@') {
                        Some(path) => cordon::caller_file::read_utf8(
                            "handle file",
                            std::path::Path::new(path),
                            MAX_HANDLE_BYTES,
                        )?,
                        None => text.clone(),
                    };
                    serde_json::from_str(&text).context("the handle is not a storage handle")?
                }
                (None, Some(allocation), owner) => {
                    let allocation = cordon::task::parse_allocation(allocation)?;
                    // The owner, when not given, is the one every object of the id names.
                    let owner = match owner {
                        Some(owner) => cordon::labels::Owner::new(owner)?,
                        None => {
                            cordon::task::owner_of_allocation(ctl.engine(), &allocation).await?
                        }
                    };
                    cordon::task::find(ctl, &owner, &allocation).await?
                }
                _ => anyhow::bail!("give a handle or --allocation (with --owner to require it)"),
            };
            cordon::task::remove(ctl, &handle).await?;
            print(
                cli.json,
                &serde_json::json!({"removed": handle.allocation}),
                || format!("removed {}\n", handle.allocation),
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run_invocation(ctl: &cordon::Controller, cli: &Cli) -> anyhow::Result<ExitCode> {
    let Command::Run {
        phase,
        repo,
        head,
        prompt,
        prompt_file,
        schema,
        vendor,
        image,
        owner,
        attempt,
        code_hash,
        deadline_secs,
        uid_range,
    } = &cli.command
    else {
        anyhow::bail!("not a run command");
    };
    let prompt = match (prompt, prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => cordon::caller_file::read_utf8(
            "prompt file",
            f,
            cordon::invoke::claude::MAX_PROMPT_BYTES,
        )?,
        (None, None) => anyhow::bail!("give --prompt or --prompt-file"),
    };
    // A schema cordon will not read is refused before anything is prepared (the capture reads
    // it again, and that read is the one used).
    if let Some(schema) = schema {
        cordon::invoke::claude::read_schema(schema)?;
    }
    let (vendor, image_id, credential) = match vendor.as_str() {
        "test" => (
            cordon_contract::Vendor::Claude,
            build(ctl, cli).await?.id,
            None,
        ),
        "claude" => {
            let Some(image) = image else {
                anyhow::bail!("--vendor claude needs --image (an image with the real Claude CLI)");
            };
            let token = std::env::var("CLAUDE_CODE_OAUTH_TOKEN")
                .context("--vendor claude needs CLAUDE_CODE_OAUTH_TOKEN in the environment")?;
            (
                cordon_contract::Vendor::Claude,
                image.clone(),
                Some(cordon::invoke::Credential::new(token)?),
            )
        }
        other => (
            other
                .parse::<cordon_contract::Vendor>()
                .map_err(anyhow::Error::msg)?,
            String::new(),
            None,
        ),
    };
    let token = || uuid::Uuid::new_v4().simple().to_string();
    let owner = match owner {
        Some(o) => cordon::labels::Owner::new(o)?,
        None => cordon::labels::Owner::random("run"),
    };
    let run = cordon::invoke::oneshot::OneShot {
        phase: *phase,
        vendor,
        repo: repo.clone(),
        head: head.clone(),
        prompt,
        schema: schema.clone(),
        owner,
        attempt: attempt
            .clone()
            .unwrap_or_else(|| format!("run-{}", &token()[..12])),
        referenced_code_hash: code_hash.clone(),
        deadline: std::time::Duration::from_secs(*deadline_secs),
        credential,
        work: cordon::storage::DEFAULT_WORK,
        uids: *uid_range,
    };
    // A refused vendor is refused before anything is prepared.
    if cordon::invoke::allowed_phases(vendor).is_empty() {
        return Err(cordon::Error::VendorRefused(format!(
            "{vendor} is refused in every phase: use claude (or --vendor test)"
        ))
        .into());
    }
    let bar = spinner(cli.json);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let report = cordon::invoke::oneshot::oneshot(ctl, &image_id, &run, shutdown, &|step| {
        bar.set_message(step.to_owned())
    })
    .await;
    bar.finish_and_clear();
    let report = report?;
    let result = &report.result;
    // Text output shows the agent's text escaped and framed (see `human`); JSON is exact.
    print(cli.json, &report, || human::run_report(&report))?;
    Ok(
        if result.answer.is_some() && report.storage_left.is_none() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
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
            // The message can quote the repository, git or the engine: escaped, on one line.
            eprintln!("cordon: {}", human::line(&format!("{e:#}")));
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
