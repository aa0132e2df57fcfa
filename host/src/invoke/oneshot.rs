//! One invocation end to end, as `cordon run` and the invocation benchmark do it: prepare task
//! storage from a repository, capture, start, settle, remove the storage.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_contract::{Phase, Vendor};

use super::{capture, start, Credential, ImageSource, InvocationResult, Options, Request};
use crate::controller::Controller;
use crate::error::Result;
use crate::labels::Owner;
use crate::profile::Area;
use crate::task::{self, PrepareRequest};

/// What one run needs.
#[derive(Debug, Clone)]
pub struct OneShot {
    pub phase: Phase,
    pub vendor: Vendor,
    pub repo: PathBuf,
    pub head: String,
    pub prompt: String,
    pub schema: Option<PathBuf>,
    pub owner: Owner,
    pub attempt: String,
    /// Defaults to the commit the storage was seeded from.
    pub referenced_code_hash: Option<String>,
    /// For the invocation (storage preparation has its own).
    pub deadline: Duration,
    pub credential: Option<Credential>,
    pub work: Area,
    /// Where the storage's uid comes from.
    pub uids: crate::uids::UidRange,
    /// The network allowlist (empty: no network, no proxy).
    pub allow: Vec<String>,
    /// How its egress is set up.
    pub egress: super::EgressOptions,
    /// How the vendor CLI reaches its API.
    pub vendor_options: super::VendorOptions,
    /// The image's exec allowlist when it is an agent image ([`ImageSource::Agent`]); `None`
    /// for the test image ([`ImageSource::Id`]).
    pub exec: Option<Vec<String>>,
    /// The task's declared file operations (execute and fix: the tree check checks each fits).
    pub operations: Vec<cordon_contract::tree::Operation>,
    /// The task's declared paths (execute and fix: their links are snapshot, and one that
    /// passes through another link is refused).
    pub declared_paths: Vec<String>,
    /// Execute and fix: after the run, commit what the manifest holds.
    pub commit: Option<OneShotCommit>,
    /// The runner's approved commands (review, execute, fix).
    pub commands: Vec<cordon_contract::command::ApprovedCommand>,
    /// A shared snapshot to read instead of storage of the run's own (planning, questions and
    /// review): nothing is prepared or removed, `repo` and `head` are not read.
    pub snapshot: Option<task::StorageHandle>,
}

/// What a one-shot execute or fix commits after its run (see [`crate::audit::CommitRequest`]).
#[derive(Debug, Clone)]
pub struct OneShotCommit {
    pub author: String,
    pub committer: String,
    pub message: String,
    pub trailers: Vec<(String, String)>,
    pub bundle: PathBuf,
    /// Names a Windows or macOS checkout cannot hold are committed (a Linux-only repository).
    pub allow_non_portable: bool,
}

/// After a writable run: the change manifest and the commit, or the refusal that stopped them
/// (then the task needs a person).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PostRun {
    pub manifest: Option<cordon_contract::audit::Manifest>,
    /// The diff export (when nothing needs a person).
    pub export: Option<crate::audit::Export>,
    /// The commit of what the manifest holds (when asked, the run answered and nothing needs a
    /// person).
    pub commit: Option<crate::audit::Committed>,
    /// The refusal's stable id, message and reasons (`audit-refused`, `commit-refused`).
    pub refused: Option<serde_json::Value>,
    /// The audit failing to run (not a refusal): its stable id and message.
    pub failed: Option<serde_json::Value>,
    /// The metadata changed, a declared link's target changed, a gitlink has content, or a
    /// refusal: a person must look before anything of this run is used.
    pub needs_person: bool,
    /// A commit was asked for and none was made: why, with a stable reason.
    pub not_committed: Option<NotCommitted>,
    pub ms: f64,
}

/// Why a commit that was asked for was not made (`id` is always `commit-not-made`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotCommitted {
    pub id: &'static str,
    /// `run-not-answered` (the agent's run gave no answer: it exited non-zero, was stopped, or
    /// its answer was refused), `needs-person` (the manifest routes the task to a person),
    /// `audit-refused` or `audit-failed` (the inspection or the export), `commit-refused` or
    /// `commit-failed` (the commit itself; `refused` or `failed` holds the rest).
    pub reason: &'static str,
    pub detail: String,
}

impl NotCommitted {
    fn new(reason: &'static str, detail: impl Into<String>) -> NotCommitted {
        NotCommitted {
            id: "commit-not-made",
            reason,
            detail: detail.into(),
        }
    }

    /// Why a run gave no answer, in a line.
    fn unanswered(result: &InvocationResult) -> NotCommitted {
        let mut why = Vec::new();
        if let Some(code) = result.exit_code {
            why.push(format!("the agent exited {code}"));
        }
        if let Some(signal) = result.signal {
            why.push(format!("the agent died of signal {signal}"));
        }
        if let Some(stop) = result.stop_reason {
            why.push(format!("stopped: {}", stop.as_str()));
        }
        if let Some(failure) = &result.failure {
            why.push(format!("{}: {}", failure.id, failure.message));
        }
        if why.is_empty() {
            why.push("no answer".to_owned());
        }
        NotCommitted::new("run-not-answered", why.join("; "))
    }
}

/// Where the time went (milliseconds).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct OneShotTimings {
    pub prepare_ms: f64,
    /// The link snapshot and the tree check (execute and fix).
    pub check_ms: f64,
    pub invoke_ms: f64,
    pub remove_ms: f64,
    pub total_ms: f64,
}

/// The settled result, and what happened to the storage.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OneShotReport {
    pub result: InvocationResult,
    /// The tree check the start redeemed (execute and fix): the gitlinks it masked, the pins.
    pub tree_check: Option<crate::audit::TreeCheck>,
    /// The declared links as they were before the start (execute and fix, with declared paths).
    pub link_snapshot: Option<cordon_contract::tree::LinkSnapshot>,
    /// Execute and fix: what the run changed (the manifest, the diff, the commit).
    pub audit: Option<PostRun>,
    /// Set when the storage could not be removed (its id and error); the runner must keep it.
    pub storage_left: Option<String>,
    pub timings: OneShotTimings,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Run one invocation on its own storage. `shutdown` resolving stops it (`shutdown` reason).
pub async fn oneshot(
    ctl: &Controller,
    image_id: &str,
    run: &OneShot,
    shutdown: impl Future<Output = ()>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<OneShotReport> {
    let started = Instant::now();
    if let Some(snapshot) = &run.snapshot {
        let result = invoke(
            ctl,
            image_id,
            run,
            request(run, snapshot, None),
            shutdown,
            progress,
        )
        .await?;
        return Ok(OneShotReport {
            result: result.as_ref().clone(),
            tree_check: None,
            link_snapshot: None,
            audit: None,
            storage_left: None,
            timings: OneShotTimings {
                prepare_ms: 0.0,
                check_ms: 0.0,
                invoke_ms: ms(started),
                remove_ms: 0.0,
                total_ms: ms(started),
            },
        });
    }
    let prepare = PrepareRequest {
        repo: run.repo.clone(),
        head: run.head.clone(),
        owner: run.owner.clone(),
        attempt: run.attempt.clone(),
        allocation: None,
        work: run.work,
        deadline: Duration::from_secs(600),
        uids: run.uids,
        shared: false,
    };
    // The keeper and the audit's readers run the invocation's image.
    let ctl = &ctl.clone().with_helper_image(image_id);
    let storage = task::prepare_with(ctl, &prepare, |_| {}, progress).await?;
    let bound = match ctl.task(&storage) {
        Ok(bound) => bound,
        Err(e) => {
            // Prepared storage always has its head and baseline; removed all the same.
            let _ = task::remove(ctl, &storage).await;
            return Err(e);
        }
    };
    let prepare_ms = ms(started);
    let mut check_ms = 0.0;
    let mut tree_check = None;
    let mut link_snapshot = None;
    let mut invoked = Instant::now();
    let outcome = async {
        if run.phase.work_writable() {
            progress("checking the tree");
            let checked = Instant::now();
            let (snapshot, check) = check_before_start(&bound, run).await?;
            link_snapshot = snapshot;
            tree_check = Some(check);
            check_ms = ms(checked);
            invoked = Instant::now();
        }
        let request = request(run, &storage, tree_check.clone());
        invoke(ctl, image_id, run, request, shutdown, progress).await
    }
    .await;
    let invoke_ms = ms(invoked);
    let audit = match &outcome {
        Ok(result) if run.phase.work_writable() => {
            progress("auditing the changes");
            Some(post_run(&bound, link_snapshot.as_ref(), ask(run, result)).await)
        }
        _ => None,
    };
    progress("removing the task storage");
    let removed = Instant::now();
    let storage_left = bound
        .remove()
        .await
        .err()
        .map(|e| format!("{}: {e}", storage.allocation));
    let remove_ms = ms(removed);
    Ok(OneShotReport {
        result: outcome?.as_ref().clone(),
        tree_check,
        link_snapshot,
        audit,
        storage_left,
        timings: OneShotTimings {
            prepare_ms,
            check_ms,
            invoke_ms,
            remove_ms,
            total_ms: ms(started),
        },
    })
}

/// The invocation's request: the run's, over `storage`, presenting the tree check a writable
/// start redeems; the referenced code is the seeded head unless the run names one.
fn request(
    run: &OneShot,
    storage: &task::StorageHandle,
    tree_check: Option<crate::audit::TreeCheck>,
) -> Request {
    Request {
        phase: run.phase,
        vendor: run.vendor,
        prompt: run.prompt.clone(),
        schema: run.schema.clone(),
        referenced_code_hash: run
            .referenced_code_hash
            .clone()
            .or_else(|| storage.head.clone())
            .unwrap_or_default(),
        deadline: Instant::now() + run.deadline,
        network_allowlist: run.allow.clone(),
        attempt: run.attempt.clone(),
        storage: storage.clone(),
        tree_check,
    }
}

/// Capture `request`, start it in the image (the agent image with the run's exec allowlist, or
/// the test image), and wait for it to settle; `shutdown` resolving first stops it.
async fn invoke(
    ctl: &Controller,
    image_id: &str,
    run: &OneShot,
    request: Request,
    shutdown: impl Future<Output = ()>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Arc<InvocationResult>> {
    let captured = capture(ctl, request)?;
    progress("running the agent");
    let handle = start(
        ctl,
        captured,
        run.credential.clone(),
        Options {
            egress: run.egress.clone(),
            vendor: run.vendor_options.clone(),
            commands: run.commands.clone(),
            uids: run.uids,
            ..Options::new(match &run.exec {
                Some(exec) => ImageSource::Agent {
                    id: image_id.to_owned(),
                    exec: exec.clone(),
                },
                None => ImageSource::Id(image_id.to_owned()),
            })
        },
    )
    .await?;
    tokio::pin!(shutdown);
    let settled = handle.settled();
    tokio::pin!(settled);
    let result = tokio::select! {
        result = &mut settled => result,
        () = &mut shutdown => {
            handle.stop(super::StopReason::Shutdown);
            settled.await
        }
    };
    Ok(result)
}

/// What the post-run audit is asked for: a run without an answer (stopped, failed, refused) is
/// inspected, never committed.
fn ask<'a>(run: &'a OneShot, result: &InvocationResult) -> Ask<'a> {
    match (&run.commit, &result.answer) {
        (None, _) => Ask::None,
        (Some(commit), Some(_)) => Ask::Commit(commit),
        (Some(_), None) => Ask::Skip(NotCommitted::unanswered(result)),
    }
}

/// Before a writable start: the declared links (refused when one passes through another link),
/// then the tree check at the seeded head (refused unless the tree is exactly base's).
async fn check_before_start(
    bound: &crate::audit::Task<'_>,
    run: &OneShot,
) -> Result<(
    Option<cordon_contract::tree::LinkSnapshot>,
    crate::audit::TreeCheck,
)> {
    let deadline = crate::audit::DEFAULT_DEADLINE;
    let snapshot = if run.declared_paths.is_empty() {
        None
    } else {
        let snapshot = bound.snapshot_links(&run.declared_paths, deadline).await?;
        crate::audit::refuse_through_links(&snapshot)?;
        Some(snapshot)
    };
    let check = bound.check_tree(&run.operations, deadline).await?;
    Ok((snapshot, check))
}

/// What the run asks of the post-run audit.
#[derive(Debug)]
enum Ask<'a> {
    /// No commit.
    None,
    Commit(&'a OneShotCommit),
    /// A commit was asked for, and is not made: why.
    Skip(NotCommitted),
}

/// After a writable run (a stopped one too): inspect and export the diff; when asked and the run
/// answered, commit. A refusal is recorded, never raised: the run's result stands, and the task
/// needs a person. A commit asked for and not made always says why (`not_committed`).
async fn post_run(
    bound: &crate::audit::Task<'_>,
    snapshot: Option<&cordon_contract::tree::LinkSnapshot>,
    ask: Ask<'_>,
) -> PostRun {
    let started = Instant::now();
    let mut post = PostRun::default();
    let asked = !matches!(ask, Ask::None);
    let (commit, skipped) = match ask {
        Ask::Commit(commit) => (Some(commit), None),
        Ask::Skip(why) => (None, Some(why)),
        Ask::None => (None, None),
    };
    post.not_committed = skipped;
    let mut committing = false;
    let result = async {
        let snapshot = match snapshot {
            Some(s) => s.clone(),
            None => cordon_contract::tree::LinkSnapshot {
                metadata_digest: bound.baseline().to_owned(),
                links: vec![],
            },
        };
        let deadline = crate::audit::DEFAULT_DEADLINE;
        let manifest = bound.inspect(&snapshot, deadline).await?;
        post.needs_person = manifest.needs_person();
        let digest = manifest.digest.clone();
        if post.needs_person && commit.is_some() {
            post.not_committed = Some(NotCommitted::new(
                "needs-person",
                needs_person_detail(&manifest),
            ));
        }
        post.manifest = Some(manifest);
        if post.needs_person {
            return Ok(());
        }
        post.export = Some(bound.export_diff(deadline).await?);
        if let Some(commit) = commit {
            let request = crate::audit::CommitRequest {
                snapshot,
                digest,
                message: commit.message.clone(),
                trailers: commit.trailers.clone(),
                author: commit.author.clone(),
                committer: commit.committer.clone(),
                bundle: commit.bundle.clone(),
                allow_non_portable: commit.allow_non_portable,
            };
            let deadline = crate::audit::commit::DEFAULT_DEADLINE;
            committing = true;
            post.commit = Some(bound.commit(&request, deadline).await?);
        }
        Ok::<_, crate::Error>(())
    }
    .await;
    if let Err(e) = result {
        let findings = match &e {
            crate::Error::AuditRefused { findings, .. } => serde_json::to_value(findings).ok(),
            crate::Error::CommitRefused { findings } => serde_json::to_value(findings).ok(),
            _ => None,
        };
        let record = serde_json::json!({
            "error": e.id(),
            "message": e.to_string(),
            "findings": findings,
        });
        let refused = findings.is_some();
        if asked && post.not_committed.is_none() {
            let reason = match (committing, refused) {
                (true, true) => "commit-refused",
                (true, false) => "commit-failed",
                (false, true) => "audit-refused",
                (false, false) => "audit-failed",
            };
            post.not_committed = Some(NotCommitted::new(reason, e.to_string()));
        }
        if refused {
            post.needs_person = true;
            post.refused = Some(record);
        } else {
            post.failed = Some(record);
        }
    }
    post.ms = ms(started);
    post
}

/// Which of the manifest's flags route the task to a person.
fn needs_person_detail(manifest: &cordon_contract::audit::Manifest) -> String {
    let mut why = Vec::new();
    if manifest.metadata_changed {
        why.push("the metadata changed".to_owned());
    }
    if !manifest.agent_commits.is_empty() {
        why.push(format!("{} agent commits", manifest.agent_commits.len()));
    }
    if !manifest.link_target_changes.is_empty() {
        why.push(format!(
            "declared links changed: {:?}",
            manifest.link_target_changes
        ));
    }
    if !manifest.nested_gitlink_content.is_empty() {
        why.push(format!(
            "submodule directories with content: {:?}",
            manifest.nested_gitlink_content
        ));
    }
    why.join("; ")
}
