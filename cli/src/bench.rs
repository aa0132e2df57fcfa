//! `cordon bench`: launch, gate, invoke, snapshot, density, seed, check, audit, command, egress
//! and terminate benchmarks, and all of the speed targets at once.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use cordon_proof::bench;

use crate::{image, print, verdict, Ctx};

/// What `bench invoke --vendor` may name: anything else is a usage error, not the fake CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchVendor {
    /// The fake vendor CLI of the test image.
    Test,
    /// The real Claude Code CLI in the agent image, against the fake Messages API.
    Claude,
}

#[derive(Debug, Subcommand)]
pub enum BenchAction {
    /// Cold launch through cordon against a bare create+start of the same container.
    Launch {
        #[arg(long, default_value_t = 20)]
        runs: usize,
    },
    /// An approved command's round trip (from the decided call to its answer) against a bare
    /// `docker run --rm` of the same image and argv, and what commands add to an execute
    /// invocation.
    Command {
        #[arg(long, default_value_t = 7)]
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
        /// `claude` with `--fake-vendor`: the real CLI (agent image, fake Messages API) against
        /// the fake CLI, interleaved, and the agent image's build time and size.
        #[arg(long, value_enum, default_value_t = BenchVendor::Test)]
        vendor: BenchVendor,
        #[arg(long)]
        fake_vendor: bool,
    },
    /// Questions invocations over one shared snapshot (warm) and over storage of their own
    /// (cold), against a bare hardened run of the same image and flags, interleaved.
    Snapshot {
        #[arg(long, default_value_t = 5_000)]
        files: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Many questions invocations at once over one shared snapshot, each attested, until the
    /// last settles, against as many bare hardened runs at once.
    Density {
        #[arg(long, default_value_t = 16)]
        invocations: usize,
        #[arg(long, default_value_t = 1_000)]
        files: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// The egress path (forwarder, proxy) against a direct TLS connection to the same endpoint
    /// and the same connection through a plain relay (one more TCP hop, no policy): throughput,
    /// added round-trip latency, and the proxy's memory with 32 tunnels open.
    Egress {
        /// Interleaved pairs (one proxied and one direct container each, and one relayed between).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// MiB of each upload and each download (at most 1024: the fake vendor's largest body).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
        mib: u64,
        /// Measured `/ping`s per container (after 50 unmeasured).
        #[arg(long, default_value_t = 500)]
        pings: usize,
    },
    /// The vendor host's TLS terminator, in process on loopback, against a direct client of the
    /// same fake Messages API: a Messages request's added latency, a streamed download's ratio.
    Terminate {
        /// Measured requests per arm (after 20 unmeasured).
        #[arg(long, default_value_t = 500)]
        requests: usize,
        /// Downloads per arm.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// MiB of each streamed answer.
        #[arg(long, default_value_t = 64)]
        mib: u64,
    },
    /// The pre-launch tree check on a generated tree against git's refresh and status of the
    /// same tree on the host, and what the check adds to an execute invocation's start.
    Check {
        #[arg(long, default_value_t = 131_072)]
        entries: usize,
        #[arg(long, default_value_t = 64)]
        mib: u64,
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// The post-run inspection (every file hashed) of a generated tree with changed files
    /// against git's refresh and status of the same tree on the host; then the commit of more
    /// changed files against git's add and commit of them, with the peak memory of each.
    Audit {
        #[arg(long, default_value_t = 131_072)]
        entries: usize,
        #[arg(long, default_value_t = 64)]
        mib: u64,
        /// Files changed before the inspections.
        #[arg(long, default_value_t = 1_000)]
        changes: usize,
        /// Files changed in all before the commits.
        #[arg(long, default_value_t = 10_000)]
        commit_files: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Leave base's objects loose (by default they are in one pack, as a clone brings them).
        #[arg(long)]
        loose: bool,
    },
    /// Every speed target in order (seed, snapshot, the real CLI over a warm snapshot, commit,
    /// egress, density, the gate), each against its target, with the machine and the date.
    All {
        /// Interleaved runs of each benchmark (the gate runs once).
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Seeding a generated repository against a plain upload of the same tree.
    Seed {
        #[arg(long, default_value_t = 20_000)]
        files: usize,
        #[arg(long, default_value_t = 200)]
        mib: u64,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Leave the repository's objects loose (by default they are in one pack, as a clone
        /// brings them).
        #[arg(long)]
        loose: bool,
    },
}

pub async fn run(ctx: &Ctx, action: BenchAction) -> anyhow::Result<ExitCode> {
    if let BenchAction::Terminate {
        requests,
        runs,
        mib,
    } = action
    {
        return terminate(ctx, requests, runs, mib).await;
    }
    let built = image::build(ctx).await?;
    let engine = &ctx.ctl;
    match action {
        BenchAction::All { runs } => all(ctx, &built.id, runs).await,
        seed @ BenchAction::Seed { .. } => seeding(ctx, &built.id, seed).await,
        BenchAction::Check { entries, mib, runs } => {
            let report =
                cordon_proof::bench_check::check(engine, &built.id, entries, mib << 20, runs)
                    .await
                    .context("benchmarking the tree check")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Audit {
            entries,
            mib,
            changes,
            commit_files,
            runs,
            loose,
        } => {
            let report = cordon_proof::bench_audit::audit(
                engine,
                &built.id,
                entries,
                mib << 20,
                changes,
                commit_files,
                runs,
                !loose,
            )
            .await
            .context("benchmarking the change audit")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Terminate {
            requests,
            runs,
            mib,
        } => terminate(ctx, requests, runs, mib).await,
        BenchAction::Egress { runs, mib, pings } => {
            let report =
                cordon_proof::bench_egress::egress(engine, &built.id, runs, mib << 20, pings)
                    .await
                    .context("benchmarking egress")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Invoke {
            files,
            runs,
            vendor: BenchVendor::Claude,
            fake_vendor,
            ..
        } => {
            if !fake_vendor {
                anyhow::bail!(
                    "bench invoke --vendor claude needs --fake-vendor (no credential is used)"
                );
            }
            let spec = cordon::image::agent::AgentImageSpec::new(
                claude_cli().await?,
                crate::image::binary_source(ctx),
            );
            let report =
                cordon_proof::bench_claude::invoke_claude(&ctx.ctl, &built.id, &spec, files, runs)
                    .await
                    .context("benchmarking the real CLI's invocations")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Invoke {
            files,
            runs,
            launch_runs,
            ..
        } => {
            let report = bench::invoke(engine, &built.id, files, runs, launch_runs)
                .await
                .context("benchmarking invocations")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Snapshot { .. } | BenchAction::Density { .. } => {
            snapshots(ctx, &built.id, action).await
        }
        BenchAction::Gate { parallel } => {
            let agent = crate::image::agent(ctx, None).await?;
            let report = bench::gate(engine, &built.id, Some((&agent).into()), parallel)
                .await
                .context("benchmarking the gate")?;
            print(ctx.json, &report, || report.text())?;
            Ok(verdict(report.failed == 0))
        }
        BenchAction::Command { runs } => {
            let report = cordon_proof::bench_command::command(engine, &built.id, runs)
                .await
                .context("benchmarking approved commands")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Launch { runs } => {
            let report = bench::launch(engine, &built.id, runs)
                .await
                .context("benchmarking launch")?;
            shown(ctx, &report, report.text())
        }
    }
}

/// `bench all`: every target in order; fails when one is missed.
async fn all(ctx: &Ctx, image: &str, runs: usize) -> anyhow::Result<ExitCode> {
    let spec = cordon::image::agent::AgentImageSpec::new(
        claude_cli().await?,
        crate::image::binary_source(ctx),
    );
    let bar = crate::progress::spinner(ctx.json);
    let report = cordon_proof::bench_all::all(&ctx.ctl, image, &spec, runs, &|step| {
        bar.set_message(step.to_owned())
    })
    .await;
    bar.finish_and_clear();
    let report = report.context("running every benchmark")?;
    print(ctx.json, &report, || report.text())?;
    Ok(verdict(report.missed == 0))
}

/// The pinned Claude Code CLI, fetched (or found in the cache).
async fn claude_cli() -> anyhow::Result<std::path::PathBuf> {
    let cache = cordon::image::pinned::default_cache(&cordon::image::default_workspace());
    cordon::image::pinned::fetch(&cordon::image::pinned::CLAUDE_CLI, &cache, &|_| {})
        .await
        .context("fetching the pinned Claude Code CLI")
}

/// `cordon bench snapshot` and `cordon bench density`.
async fn snapshots(ctx: &Ctx, image: &str, action: BenchAction) -> anyhow::Result<ExitCode> {
    use cordon_proof::bench_snapshot as b;
    match action {
        BenchAction::Density {
            invocations,
            files,
            runs,
        } => {
            let report = b::density(&ctx.ctl, image, invocations, files, runs)
                .await
                .context("benchmarking density")?;
            shown(ctx, &report, report.text())
        }
        BenchAction::Snapshot { files, runs } => {
            let report = b::snapshot(&ctx.ctl, image, files, runs)
                .await
                .context("benchmarking shared snapshots")?;
            shown(ctx, &report, report.text())
        }
        _ => anyhow::bail!("not a snapshot benchmark"),
    }
}

/// Print a benchmark's report (JSON, or its text): it ran.
fn shown<R: serde::Serialize>(ctx: &Ctx, report: &R, text: String) -> anyhow::Result<ExitCode> {
    print(ctx.json, report, move || text)?;
    Ok(ExitCode::SUCCESS)
}

/// `bench terminate`: no engine, no image, the terminator alone.
/// `cordon bench seed`.
async fn seeding(ctx: &Ctx, image: &str, action: BenchAction) -> anyhow::Result<ExitCode> {
    let BenchAction::Seed {
        files,
        mib,
        runs,
        loose,
    } = action
    else {
        anyhow::bail!("not the seed benchmark")
    };
    let report = bench::seed(&ctx.ctl, image, (files, mib * 1024 * 1024), !loose, runs)
        .await
        .context("benchmarking seeding")?;
    shown(ctx, &report, report.text())
}

async fn terminate(ctx: &Ctx, requests: usize, runs: usize, mib: u64) -> anyhow::Result<ExitCode> {
    let report = cordon_proof::bench_terminate::terminate(requests, runs, mib << 20)
        .await
        .context("benchmarking the terminator")?;
    print(ctx.json, &report, || report.text())?;
    Ok(ExitCode::SUCCESS)
}
