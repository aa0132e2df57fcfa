//! `cordon audit snapshot-links` and `cordon audit check-tree`: the change audit's reads of task
//! storage before a writable run, by hand. A check made here cannot start an invocation in
//! another process (its capability is this process's controller's); `cordon run --phase
//! execute|fix` makes its own.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use crate::input::{parse_trailers, read_operations, MAX_MESSAGE_BYTES};
use crate::task::parse_handle;
use crate::{image, print, Ctx};

#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Where each declared link resolves, and whether it passes through another link.
    SnapshotLinks {
        /// The storage handle (JSON, or @FILE).
        handle: String,
        /// A declared path under /work (repeatable).
        #[arg(long = "path", value_name = "P")]
        paths: Vec<String>,
        /// The image whose cordon-init reads the tree (the test image when absent).
        #[arg(long)]
        image: Option<String>,
        #[arg(long, default_value_t = 120)]
        deadline_secs: u64,
    },
    /// The pre-launch tree check: refused unless the work tree is exactly base's and every
    /// declared operation fits (exit 1, `tree-refused`: a person must look).
    CheckTree {
        /// The storage handle (JSON, or @FILE).
        handle: String,
        /// The commit the storage was seeded from.
        #[arg(long)]
        base: String,
        /// The declared operations: a JSON array of `{"kind":"add|edit|delete|rename","path":P,
        /// "renamed_from":P}`.
        #[arg(long)]
        ops: Option<PathBuf>,
        #[arg(long)]
        image: Option<String>,
        #[arg(long, default_value_t = 120)]
        deadline_secs: u64,
    },
    /// The change manifest after a writable run: every difference from base, with blob ids
    /// (exit 1 with `needs_person` when the metadata changed, a declared link's target changed or
    /// a gitlink has content; `audit-refused` when it cannot answer whole).
    Inspect {
        /// The storage handle (JSON, or @FILE).
        handle: String,
        #[arg(long)]
        base: String,
        /// The link snapshot taken before the run (JSON from `snapshot-links`); none declared
        /// when absent.
        #[arg(long)]
        links: Option<PathBuf>,
        #[arg(long)]
        image: Option<String>,
        #[arg(long, default_value_t = 120)]
        deadline_secs: u64,
    },
    /// At most 1 MiB of unified diff of what a writable attempt (a stopped one too) changed, with
    /// a `cordon:` notice line for each thing a diff cannot show.
    ExportDiff {
        /// The storage handle (JSON, or @FILE; a recovered one with its recorded baseline).
        handle: String,
        #[arg(long)]
        base: String,
        #[arg(long)]
        image: Option<String>,
        #[arg(long, default_value_t = 120)]
        deadline_secs: u64,
    },
    /// Commit what the approved manifest holds, as a git bundle with one ref,
    /// `refs/heads/cordon` (exit 1, `commit-refused`: a person must look).
    Commit(CommitArgs),
}

/// The arguments of `cordon audit commit`.
#[derive(Debug, clap::Args)]
pub struct CommitArgs {
    /// The storage handle (JSON, or @FILE).
    handle: String,
    #[arg(long)]
    base: String,
    /// The approved manifest's digest.
    #[arg(long)]
    digest: String,
    /// The link snapshot taken before the run (none declared when absent).
    #[arg(long)]
    links: Option<PathBuf>,
    /// The commit message (UTF-8, at most 64 KiB).
    #[arg(long)]
    message_file: PathBuf,
    /// `Name <email> SECONDS OFFSET` (git's raw form).
    #[arg(long)]
    author: String,
    #[arg(long)]
    committer: String,
    /// A trailer `KEY=VALUE` (repeatable).
    #[arg(long = "trailer", value_name = "K=V")]
    trailers: Vec<String>,
    /// Where the bundle goes (must not exist).
    #[arg(long)]
    bundle: PathBuf,
    /// Commit names a Windows or macOS checkout cannot hold, for a repository that never
    /// leaves Linux; refused by default (`non-portable`).
    #[arg(long)]
    allow_non_portable_names: bool,
    #[arg(long)]
    image: Option<String>,
    #[arg(long, default_value_t = 300)]
    deadline_secs: u64,
}

/// The most a `--links` file may hold (the reader's report bound).
const MAX_LINKS_BYTES: usize = cordon_contract::tree::MAX_REPORT_BYTES;

/// The link snapshot in `path`, or an empty one over `handle`'s baseline.
fn read_links(
    path: Option<&std::path::Path>,
    handle: &cordon::task::StorageHandle,
) -> anyhow::Result<cordon_contract::tree::LinkSnapshot> {
    match path {
        Some(path) => {
            let text = cordon::caller_file::read_utf8("link snapshot", path, MAX_LINKS_BYTES)?;
            serde_json::from_str(&text).context("the links file is not a link snapshot")
        }
        None => Ok(cordon_contract::tree::LinkSnapshot {
            metadata_digest: handle.metadata_baseline.clone().unwrap_or_default(),
            links: vec![],
        }),
    }
}

async fn image_id(ctx: &Ctx, image: Option<String>) -> anyhow::Result<String> {
    Ok(match image {
        Some(id) => id,
        None => image::build(ctx).await?.id,
    })
}

/// The controller with `image` (or the test image) as its helper image, and the handle with
/// `base` as its head when given (what the verbs check against: a recovered handle gets it here,
/// and a base other than the seeded head is what the check and inspection then refuse).
async fn helper_and_handle(
    ctx: &Ctx,
    image: Option<String>,
    handle: &str,
    base: Option<String>,
) -> anyhow::Result<(cordon::Controller, cordon::task::StorageHandle)> {
    let mut handle = parse_handle(handle)?;
    if let Some(base) = base {
        handle.head = Some(base);
    }
    let image_id = image_id(ctx, image).await?;
    Ok((ctx.ctl.clone().with_helper_image(&image_id), handle))
}

pub async fn run(ctx: &Ctx, action: AuditAction) -> anyhow::Result<ExitCode> {
    match action {
        AuditAction::SnapshotLinks {
            handle,
            paths,
            image,
            deadline_secs,
        } => snapshot_links(ctx, &handle, &paths, image, deadline_secs).await,
        AuditAction::CheckTree {
            handle,
            base,
            ops,
            image,
            deadline_secs,
        } => check_tree(ctx, &handle, base, ops, image, deadline_secs).await,
        AuditAction::Inspect {
            handle,
            base,
            links,
            image,
            deadline_secs,
        } => inspect(ctx, &handle, base, links, image, deadline_secs).await,
        AuditAction::ExportDiff {
            handle,
            base,
            image,
            deadline_secs,
        } => export_diff(ctx, &handle, base, image, deadline_secs).await,
        AuditAction::Commit(args) => commit(ctx, args).await,
    }
}

/// `cordon audit snapshot-links`.
async fn snapshot_links(
    ctx: &Ctx,
    handle: &str,
    paths: &[String],
    image: Option<String>,
    deadline_secs: u64,
) -> anyhow::Result<ExitCode> {
    let (ctl, handle) = helper_and_handle(ctx, image, handle, None).await?;
    let snapshot = ctl
        .task(&handle)?
        .snapshot_links(paths, std::time::Duration::from_secs(deadline_secs))
        .await?;
    print(ctx.json, &snapshot, || {
        snapshot
            .links
            .iter()
            .map(|l| {
                format!(
                    "{:?}: {:?}{}{}\n",
                    l.path,
                    l.kind,
                    l.resolution
                        .map(|r| format!(", resolves {r:?}"))
                        .unwrap_or_default(),
                    if l.through_link {
                        ", through a link"
                    } else {
                        ""
                    }
                )
            })
            .collect()
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `cordon audit check-tree`: the operations file is read before anything else is done.
async fn check_tree(
    ctx: &Ctx,
    handle: &str,
    base: String,
    ops: Option<PathBuf>,
    image: Option<String>,
    deadline_secs: u64,
) -> anyhow::Result<ExitCode> {
    let operations = match ops {
        Some(path) => read_operations(&path)?,
        None => Vec::new(),
    };
    let (ctl, handle) = helper_and_handle(ctx, image, handle, Some(base)).await?;
    let check = ctl
        .task(&handle)?
        .check_tree(&operations, std::time::Duration::from_secs(deadline_secs))
        .await?;
    print(ctx.json, &check, || {
        format!(
            "the tree is base's ({} entries); {} gitlinks masked, {} directories pinned\n",
            check.entries,
            check.gitlinks.len(),
            check.pins.len()
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `cordon audit inspect`: exit 1 when the manifest needs a person.
async fn inspect(
    ctx: &Ctx,
    handle: &str,
    base: String,
    links: Option<PathBuf>,
    image: Option<String>,
    deadline_secs: u64,
) -> anyhow::Result<ExitCode> {
    let (ctl, handle) = helper_and_handle(ctx, image, handle, Some(base)).await?;
    let snapshot = read_links(links.as_deref(), &handle)?;
    let manifest = ctl
        .task(&handle)?
        .inspect(&snapshot, std::time::Duration::from_secs(deadline_secs))
        .await?;
    print(ctx.json, &manifest, || manifest_text(&manifest))?;
    Ok(if manifest.needs_person() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `cordon audit export-diff`.
async fn export_diff(
    ctx: &Ctx,
    handle: &str,
    base: String,
    image: Option<String>,
    deadline_secs: u64,
) -> anyhow::Result<ExitCode> {
    let (ctl, handle) = helper_and_handle(ctx, image, handle, Some(base)).await?;
    let export = ctl
        .task(&handle)?
        .export_diff(std::time::Duration::from_secs(deadline_secs))
        .await?;
    // The diff quotes the agent's bytes: JSON escapes them; text shows them framed.
    print(ctx.json, &export, || {
        crate::human::framed("diff", &export.diff)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `cordon audit commit`: the link snapshot, then the message file, then the trailers are read
/// before the commit starts.
async fn commit(ctx: &Ctx, args: CommitArgs) -> anyhow::Result<ExitCode> {
    let (ctl, handle) = helper_and_handle(ctx, args.image, &args.handle, Some(args.base)).await?;
    let request = cordon::audit::CommitRequest {
        snapshot: read_links(args.links.as_deref(), &handle)?,
        digest: args.digest,
        message: cordon::caller_file::read_utf8(
            "message file",
            &args.message_file,
            MAX_MESSAGE_BYTES,
        )?,
        trailers: parse_trailers(&args.trailers)?,
        author: args.author,
        committer: args.committer,
        bundle: args.bundle,
        allow_non_portable: args.allow_non_portable_names,
    };
    let committed = ctl
        .task(&handle)?
        .commit(&request, std::time::Duration::from_secs(args.deadline_secs))
        .await?;
    print(ctx.json, &committed, || {
        if committed.unchanged {
            "nothing changed: no commit, no bundle\n".to_owned()
        } else {
            format!(
                "{} on refs/heads/cordon, {} bytes of bundle\n",
                committed.head, committed.bundle_bytes
            )
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The manifest for a person: one line per change, then what needs a person.
pub fn manifest_text(manifest: &cordon_contract::audit::Manifest) -> String {
    let mut text = String::new();
    for change in &manifest.changes {
        let word = match (&change.old, &change.new) {
            (None, Some(_)) => "added",
            (Some(_), None) => "deleted",
            _ => "changed",
        };
        text.push_str(&format!(
            "{word} {:?}{}\n",
            change.path,
            if change.ignored { " (ignored)" } else { "" }
        ));
    }
    if manifest.metadata_changed {
        text.push_str("the metadata changed: the task needs a person\n");
    }
    for path in &manifest.link_target_changes {
        text.push_str(&format!("declared link {path:?}: its target changed\n"));
    }
    for path in &manifest.nested_gitlink_content {
        text.push_str(&format!("gitlink {path:?} has content\n"));
    }
    text.push_str(&format!("digest {}\n", manifest.digest));
    text
}
