//! `cordon task prepare`, `cordon task remove` and `cordon recover`: task storage by hand.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use cordon::labels::Owner;

use crate::{image, print, progress, Ctx};

/// The most a `cordon task remove @FILE` handle file may hold.
const MAX_HANDLE_BYTES: usize = 64 * 1024;

/// A storage handle given as JSON, or as `@FILE` holding it.
pub fn parse_handle(text: &str) -> anyhow::Result<cordon::task::StorageHandle> {
    let text = match text.strip_prefix('@') {
        Some(path) => cordon::caller_file::read_utf8(
            "handle file",
            std::path::Path::new(path),
            MAX_HANDLE_BYTES,
        )?,
        None => text.to_owned(),
    };
    serde_json::from_str(&text).context("the handle is not a storage handle")
}

#[derive(Debug, Subcommand)]
pub enum TaskAction {
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
        /// Make a shared snapshot: read by many planning, questions and review invocations at
        /// once, each as a uid of its own, its digest checked by each before it starts.
        #[arg(long)]
        shared: bool,
    },
    /// Remove task storage: by its handle (JSON, or @FILE), or by --allocation (and --owner).
    Remove {
        handle: Option<String>,
        #[arg(long)]
        allocation: Option<String>,
        #[arg(long)]
        owner: Option<String>,
        /// For a shared snapshot an invocation still mounts: wait this long for the last one to
        /// be gone (0: refuse at once, `snapshot-in-use`).
        #[arg(long, default_value_t = 0)]
        wait_secs: u64,
    },
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    #[arg(long)]
    owner: String,
    /// Also list other owners' objects (never touched).
    #[arg(long)]
    foreign: bool,
}

pub async fn run(ctx: &Ctx, action: TaskAction) -> anyhow::Result<ExitCode> {
    let ctl = &ctx.ctl;
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
            shared,
        } => {
            let request = cordon::task::PrepareRequest {
                repo,
                head,
                owner: Owner::new(&owner)?,
                attempt,
                allocation: allocation
                    .as_deref()
                    .map(cordon::task::parse_allocation)
                    .transpose()?,
                work: cordon::profile::Area {
                    bytes: work_bytes,
                    inodes: work_inodes,
                },
                deadline: std::time::Duration::from_secs(deadline_secs),
                uids: uid_range,
                shared,
            };
            let built = image::build(ctx).await?;
            // The steps go to stderr with --json too: stdout carries only the handle.
            let bar = progress::spinner(false);
            let ctl = &ctl.clone().with_helper_image(&built.id);
            let handle = cordon::task::prepare_with(ctl, &request, |_| {}, &|step| {
                bar.set_message(step.to_owned())
            })
            .await;
            bar.finish_and_clear();
            let handle = handle?;
            print(ctx.json, &handle, || {
                format!("{}\n", serde_json::to_string(&handle).unwrap_or_default())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        TaskAction::Remove {
            handle,
            allocation,
            owner,
            wait_secs,
        } => {
            let handle: cordon::task::StorageHandle = match (handle, allocation, owner) {
                (Some(text), None, None) => parse_handle(&text)?,
                (None, Some(allocation), owner) => {
                    let allocation = cordon::task::parse_allocation(&allocation)?;
                    // The owner, when not given, is the one every object of the id names.
                    let owner = match owner {
                        Some(owner) => Owner::new(&owner)?,
                        None => {
                            cordon::task::owner_of_allocation(ctl.engine(), &allocation).await?
                        }
                    };
                    cordon::task::find(ctl, &owner, &allocation).await?
                }
                _ => anyhow::bail!("give a handle or --allocation (with --owner to require it)"),
            };
            let wait = std::time::Duration::from_secs(wait_secs);
            cordon::task::remove_when_unused(ctl, &handle, wait).await?;
            print(
                ctx.json,
                &serde_json::json!({"removed": handle.allocation}),
                || format!("removed {}\n", handle.allocation),
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub async fn recover(ctx: &Ctx, args: RecoverArgs) -> anyhow::Result<ExitCode> {
    let owner = Owner::new(&args.owner)?;
    let bar = progress::spinner(ctx.json);
    bar.set_message("recovering");
    let report = cordon::task::recover::recover(&ctx.ctl, &owner, args.foreign).await;
    bar.finish_and_clear();
    let report = report?;
    print(ctx.json, &report, || {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    })?;
    Ok(ExitCode::SUCCESS)
}
