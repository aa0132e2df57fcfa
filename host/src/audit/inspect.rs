//! The post-run inspection: the change manifest of a writable run.
//!
//! 1. the metadata comes out of the storage as a tar (the engine's archive, from a reader
//!    container that is never started) into a controller-owned scratch directory, its digest
//!    computed from those bytes; not the seeder's baseline → the manifest says
//!    `metadata_changed`, no git command runs on it, and no reader runs after it (one already
//!    running beside it, step 3, has its answer set aside);
//! 2. hardened git on that copy only: base must be a commit (`audit-refused`, `base-not-commit`);
//!    base's own `.gitignore` blobs are the ignore rules; the controller keeps the copy
//!    ([`crate::kept`]) and git works in a copy of the inspection's own that borrows its objects;
//! 3. cordon-init's `tree inspect` reads the work tree in a read-only, no-network container
//!    ([`super::reader`]), with base's rules from step 2, or, when this controller already
//!    knows them for this metadata baseline and base, beside steps 1 and 2, or, when it also
//!    keeps that baseline's copy, without them: the reader's digest of the metadata says alone
//!    whether it is still as seeded (a reader that fails then leaves steps 1 and 2 to say
//!    whether the metadata changed). The host judges its one answer:
//! - the metadata as the reader saw it (its digest, HEAD) must be as seeded: otherwise the
//!   manifest says `metadata_changed` and lists nothing else (and no git command ever runs on
//!   it);
//! - any finding refuses the whole answer (`audit-refused`), never a part of it;
//! - the declared links are compared with the snapshot taken before the run.
//!
//! [`inspect_then`] hands the reader's stopped container on before it is removed, for a later
//! step to read the very content the inspection hashed (written by the reader as one tar, when
//! asked).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_contract::audit::{InspectReport, Manifest, INSPECT, INSPECT_CONTENT};
use cordon_contract::tree::{DeclaredLink, Finding, LinkSnapshot, Reason, MAX_DECLARED_PATHS};

use super::Task;
use crate::error::{Error, Result};
use crate::kept::KeptMetadata;
use cordon_repo::git::Git;

use cordon_repo::scratch::{self, Scratch};

/// What one inspection read: the manifest, the reader's report (none when the metadata was not
/// as seeded: no reader ran), and the scratch copy of the metadata with its git.
#[derive(Debug)]
pub struct Inspection {
    pub manifest: Manifest,
    pub report: Option<InspectReport>,
    /// Base's tree as [`scratch::list_tree`] lists it (empty when no reader ran).
    pub base_tree: Arc<Vec<scratch::TreeEntry>>,
    pub scratch: Scratch,
    pub git: Git,
    /// The kept copy `scratch` borrows its objects from, held while this inspection lives (none
    /// when the metadata was not as seeded).
    pub borrowed: Option<Arc<KeptMetadata>>,
}

/// The change manifest of `handle`'s storage against `base`, with the declared links compared
/// with `snapshot` (the one taken before the run).
pub(super) async fn inspect(
    task: &Task<'_>,
    snapshot: &LinkSnapshot,
    deadline: Duration,
) -> Result<Manifest> {
    let inspection = inspect_then(
        task,
        snapshot,
        (deadline, false),
        |_, inspection| async move { Ok(inspection) },
    )
    .await?;
    Ok(inspection.manifest)
}

/// The inspection, then `then` with the reader's stopped container (none when the metadata was
/// not as seeded) and what it read, before that container is removed. With `content`, the
/// reader also writes the content of the changes as one tar
/// ([`cordon_contract::audit::CONTENT_FILE`]) for `then` to archive out of that container.
///
/// The reader takes base's ignore rules, which come from the metadata. The first inspection of
/// a base reads the metadata, then the work tree; once this controller knows the rules for
/// that metadata baseline and base ([`Controller::known_ignore_rules`]), the metadata is read
/// beside the work tree, and the reader's answer counts only if the metadata is as seeded.
///
/// [`Controller::known_ignore_rules`]: crate::controller::Controller
pub(super) async fn inspect_then<U, F, Fut>(
    task: &Task<'_>,
    snapshot: &LinkSnapshot,
    (deadline, content): (Duration, bool),
    then: F,
) -> Result<U>
where
    F: FnOnce(Option<String>, Inspection) -> Fut,
    Fut: std::future::Future<Output = Result<U>>,
{
    let until = Instant::now() + deadline;
    let declared = declared_paths(snapshot, task.baseline())?;
    let reading = Reading {
        task,
        snapshot,
        declared,
        content,
        until,
    };
    let ctl = task.controller();
    match (
        ctl.known_ignore_rules(task.baseline(), task.base())?,
        ctl.kept_metadata(task.baseline())?,
    ) {
        (Some(rules), Some(kept)) => reading.kept(kept, &rules, then).await,
        (Some(rules), None) => reading.beside(&rules, then).await,
        (None, _) => reading.in_order(then).await,
    }
}

/// One inspection's inputs.
struct Reading<'a, 't> {
    task: &'a Task<'t>,
    snapshot: &'a LinkSnapshot,
    declared: Vec<String>,
    content: bool,
    until: Instant,
}

/// The storage's metadata as the host read it.
enum Metadata {
    /// Not the seeder's baseline: no git command ran on it.
    Changed(Scratch, Git),
    /// As seeded, base a commit in it, and base's tree listed: a copy of this inspection's own
    /// borrowing the objects of the copy as read, which the controller keeps.
    AsSeeded(Borrowed),
}

/// A working copy, its git, base's tree, and the kept copy it borrows from.
type Borrowed = (
    Scratch,
    Git,
    Arc<Vec<scratch::TreeEntry>>,
    Arc<KeptMetadata>,
);

impl Reading<'_, '_> {
    /// The metadata first; then, if it is as seeded, base's rules and the reader.
    async fn in_order<U, F, Fut>(self, then: F) -> Result<U>
    where
        F: FnOnce(Option<String>, Inspection) -> Fut,
        Fut: std::future::Future<Output = Result<U>>,
    {
        let borrowed = match self.metadata().await? {
            Metadata::Changed(scratch, git) => {
                return then(None, changed_inspection(self.task.base(), scratch, git)).await
            }
            Metadata::AsSeeded(borrowed) => borrowed,
        };
        let rules = scratch::ignore_rules_listed(&borrowed.1, &borrowed.2).await?;
        let rules: std::sync::Arc<str> = serde_json::to_string(&rules)
            .map_err(|e| Error::Internal(e.to_string()))?
            .into();
        let ctl = self.task.controller();
        ctl.learn_ignore_rules(self.task.baseline(), self.task.base(), rules.clone())?;
        let task = self.task;
        let (base, baseline, before) = (task.base(), task.baseline(), self.snapshot);
        self.read_tree(&rules, move |id, report| async move {
            let inspection = judged(report, (base, baseline, before), borrowed)?;
            then(Some(id), inspection).await
        })
        .await
    }

    /// The reader over the storage with base's `rules`, then `answer` with its stopped
    /// container and its report, before the container is removed.
    async fn read_tree<U, F, Fut>(&self, rules: &str, answer: F) -> Result<U>
    where
        F: FnOnce(String, InspectReport) -> Fut,
        Fut: std::future::Future<Output = Result<U>>,
    {
        let task = self.task;
        super::reader::read_then(
            task.controller().engine(),
            task.image(),
            task.handle(),
            (self.args(rules), self.content),
            left(self.until)?,
            answer,
        )
        .await
    }

    /// The work tree alone, over the controller's copy of this baseline's metadata and base's
    /// known `rules`: the reader's digest of the storage's metadata is what says it is still as
    /// seeded ([`judge`]). A reader that fails before it answers leaves the metadata to be read:
    /// a changed metadata is then the answer, as it is when the metadata is read first or beside.
    async fn kept<U, F, Fut>(self, kept: Arc<KeptMetadata>, rules: &str, then: F) -> Result<U>
    where
        F: FnOnce(Option<String>, Inspection) -> Fut,
        Fut: std::future::Future<Output = Result<U>>,
    {
        let task = self.task;
        let (base, baseline, before) = (task.base(), task.baseline(), self.snapshot);
        let (scratch, git) = kept.working(self.until)?;
        let base_tree = kept
            .base_tree(&git, base)
            .await?
            .ok_or_else(|| base_not_commit(base))?;
        let mut then = Some(then);
        let then_slot = &mut then;
        let answered = self
            .read_tree(rules, move |id, report| async move {
                let then = then_slot
                    .take()
                    .ok_or_else(|| Error::Internal("the inspection answered twice".into()))?;
                let borrowed = (scratch, git, base_tree, kept);
                then(
                    Some(id),
                    judged(report, (base, baseline, before), borrowed)?,
                )
                .await
            })
            .await;
        match (answered, then) {
            (Err(failed), Some(then)) => match self.metadata().await? {
                Metadata::Changed(scratch, git) => {
                    then(None, changed_inspection(base, scratch, git)).await
                }
                Metadata::AsSeeded(_) => Err(failed),
            },
            (answered, _) => answered,
        }
    }

    /// The metadata and the reader at once, the reader with base's known `rules`. Both run to
    /// their end (each removes its own container); a changed metadata is the answer whatever the
    /// reader said, as it is when the metadata is read first.
    async fn beside<U, F, Fut>(self, rules: &str, then: F) -> Result<U>
    where
        F: FnOnce(Option<String>, Inspection) -> Fut,
        Fut: std::future::Future<Output = Result<U>>,
    {
        let task = self.task;
        let (base, baseline, before) = (task.base(), task.baseline(), self.snapshot);
        let (sent, mut metadata) = tokio::sync::oneshot::channel::<Result<Metadata>>();
        let mut then = Some(then);
        let read_metadata = async {
            // Unclaimed when the reader failed first: looked at below.
            let _ = sent.send(self.metadata().await);
        };
        let (then_slot, metadata_slot) = (&mut then, &mut metadata);
        let read_tree = self.read_tree(rules, move |id, report| async move {
            let metadata = metadata_slot
                .await
                .map_err(|_| Error::Internal("the metadata read ended unanswered".into()))??;
            let then = then_slot
                .take()
                .ok_or_else(|| Error::Internal("the inspection answered twice".into()))?;
            match metadata {
                Metadata::Changed(scratch, git) => {
                    then(None, changed_inspection(base, scratch, git)).await
                }
                Metadata::AsSeeded(borrowed) => {
                    let seen = (base, baseline, before);
                    then(Some(id), judged(report, seen, borrowed)?).await
                }
            }
        });
        let ((), answered) = tokio::join!(read_metadata, read_tree);
        // The reader failed before the metadata was looked at: the metadata's own answer comes
        // first, as it would have in order.
        match (answered, metadata.try_recv(), then) {
            (Err(_), Ok(Err(e)), Some(_)) => Err(e),
            (Err(_), Ok(Ok(Metadata::Changed(scratch, git))), Some(then)) => {
                then(None, changed_inspection(base, scratch, git)).await
            }
            (answered, _, _) => answered,
        }
    }

    /// The reader's arguments: its role, base, the rules, the declared paths.
    fn args(&self, rules: &str) -> Vec<String> {
        let role = if self.content {
            INSPECT_CONTENT
        } else {
            INSPECT
        };
        let mut args = vec![
            role.to_owned(),
            self.task.base().to_owned(),
            rules.to_owned(),
        ];
        args.extend(self.declared.iter().cloned());
        args
    }

    /// The storage's metadata out through a never-started reader container into a scratch
    /// copy; if its digest is the baseline, that copy hardened, base checked to be a commit in
    /// it (`audit-refused`, `base-not-commit`) and base's tree listed, and the copy kept by the
    /// controller: this inspection works in a copy of its own borrowing its objects.
    async fn metadata(&self) -> Result<Metadata> {
        let task = self.task;
        let scratch = Scratch::new()?;
        let git = scratch.git(self.until);
        let into = scratch.git_dir();
        let (digest, bytes) = super::reader::archive_of(
            task.controller().engine(),
            task.image(),
            task.handle(),
            cordon_contract::paths::METADATA,
            left(self.until)?,
            move |tar| {
                let mut counted = Counted {
                    inner: tar,
                    bytes: 0,
                };
                let digest = scratch::extract_metadata(&mut counted, &into);
                Ok((digest, counted.bytes))
            },
        )
        .await?;
        // A metadata archive holding what the seeder never writes (a link, a special file) is
        // the metadata changing too.
        let changed = match digest {
            Ok(digest) => digest != task.baseline(),
            Err(cordon_repo::Error::ForeignMetadata(_)) => true,
            Err(e) => return Err(e.into()),
        };
        if changed {
            return Ok(Metadata::Changed(scratch, git));
        }
        scratch::harden(&scratch.git_dir())?;
        let base = task.base();
        if !scratch::is_commit(&git, base).await? {
            return Err(base_not_commit(base));
        }
        // Base's tree, listed once: its ignore rules, the commit's rules and blobs later.
        let base_tree = Arc::new(scratch::list_tree(&git, base).await?);
        let kept = Arc::new(KeptMetadata::new(scratch, bytes, base, base_tree.clone()));
        task.controller()
            .keep_metadata(task.baseline(), kept.clone())?;
        let (scratch, git) = kept.working(self.until)?;
        Ok(Metadata::AsSeeded((scratch, git, base_tree, kept)))
    }
}

/// Counts what is read through it.
struct Counted<'a> {
    inner: &'a mut dyn std::io::Read,
    bytes: u64,
}

impl std::io::Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Base is not a commit in the metadata as seeded.
fn base_not_commit(base: &str) -> Error {
    Error::AuditRefused {
        findings: vec![Finding {
            path: ".git".into(),
            reason: Reason::BaseNotCommit,
            detail: format!("base {base} is not a commit in the storage"),
        }],
        more: 0,
    }
}

/// The inspection of the reader's `report`, [`judge`]d against base, the baseline and the link
/// snapshot before the run, with the metadata's copy (as seeded) and base's tree.
fn judged(
    report: InspectReport,
    (base, baseline, before): (&str, &str, &LinkSnapshot),
    (scratch, git, base_tree, kept): Borrowed,
) -> Result<Inspection> {
    Ok(Inspection {
        manifest: judge(&report, base, baseline, before)?,
        report: Some(report),
        base_tree,
        scratch,
        git,
        borrowed: Some(kept),
    })
}

/// The inspection of metadata that is not as seeded: that, and nothing else.
fn changed_inspection(base: &str, scratch: Scratch, git: Git) -> Inspection {
    Inspection {
        manifest: metadata_changed(base),
        report: None,
        base_tree: Arc::default(),
        scratch,
        git,
        borrowed: None,
    }
}

/// Time left before `until`, or the deadline's error.
fn left(until: Instant) -> Result<Duration> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(Error::Deadline("the inspection".into()))
    } else {
        Ok(left)
    }
}

/// The declared paths of a snapshot of this storage (taken with this baseline).
fn declared_paths(snapshot: &LinkSnapshot, baseline: &str) -> Result<Vec<String>> {
    if snapshot.metadata_digest != baseline {
        return Err(Error::Invalid(format!(
            "the link snapshot was taken over metadata {}, not this storage's {baseline}",
            snapshot.metadata_digest
        )));
    }
    if snapshot.links.len() > MAX_DECLARED_PATHS {
        return Err(Error::Invalid(format!(
            "the link snapshot holds {} declared paths; at most {MAX_DECLARED_PATHS}",
            snapshot.links.len()
        )));
    }
    let paths: Vec<String> = snapshot.links.iter().map(|l| l.path.clone()).collect();
    if let Some(bad) = paths.iter().find(|p| !cordon_contract::tree::clean_path(p)) {
        return Err(Error::Invalid(format!(
            "the link snapshot's path {bad:?} is not a clean path under /work"
        )));
    }
    Ok(paths)
}

/// The manifest of a storage whose metadata is not as seeded: that, and nothing else.
pub fn metadata_changed(base: &str) -> Manifest {
    Manifest {
        base: base.to_owned(),
        changes: vec![],
        agent_commits: vec![],
        metadata_changed: true,
        link_target_changes: vec![],
        nested_gitlink_content: vec![],
        digest: String::new(),
    }
    .sealed()
}

/// The reader's answer as a manifest: its findings refuse it whole; the metadata as the reader
/// saw it must still be the baseline and HEAD base (the metadata is read-only to agents: either
/// differing is the metadata changing, and then nothing else is listed).
pub fn judge(
    report: &InspectReport,
    base: &str,
    baseline: &str,
    before: &LinkSnapshot,
) -> Result<Manifest> {
    if report.metadata_digest != baseline || report.head.as_deref() != Some(base) {
        return Ok(metadata_changed(base));
    }
    if !report.findings.is_empty() {
        return Err(Error::AuditRefused {
            findings: report.findings.clone(),
            more: report.more,
        });
    }
    Ok(Manifest {
        base: base.to_owned(),
        changes: report.changes.clone(),
        agent_commits: vec![],
        metadata_changed: false,
        link_target_changes: link_target_changes(&before.links, &report.links),
        nested_gitlink_content: report.nested_gitlink_content.clone(),
        digest: String::new(),
    }
    .sealed())
}

/// The declared paths whose link, resolution or target state is not what it was before.
pub fn link_target_changes(before: &[DeclaredLink], now: &[DeclaredLink]) -> Vec<String> {
    let mut changed: Vec<String> = before
        .iter()
        .filter(|b| now.iter().find(|n| n.path == b.path) != Some(b))
        .map(|b| b.path.clone())
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::audit::{Change, Kind, Side};
    use cordon_contract::tree::{EntryKind, Resolution, TargetEntry};

    fn report(base: &str) -> InspectReport {
        InspectReport {
            head: Some(base.to_owned()),
            metadata_digest: "sha256:seeded".into(),
            entries: 3,
            changes: vec![Change {
                path: "a.txt".into(),
                old: None,
                new: Some(Side {
                    kind: Kind::File,
                    blob: Some("0".repeat(40)),
                    size: Some(1),
                    target: None,
                }),
                ignored: false,
                link_target_traverses_link: None,
            }],
            nested_gitlink_content: vec![],
            links: vec![],
            findings: vec![],
            more: 0,
        }
    }

    fn link(path: &str, blob: &str) -> DeclaredLink {
        DeclaredLink {
            path: path.into(),
            kind: EntryKind::Link,
            target: Some("t".into()),
            resolution: Some(Resolution::Inside),
            resolved: Some("t".into()),
            through_link: false,
            target_state: vec![TargetEntry {
                path: "t".into(),
                kind: EntryKind::File,
                blob: Some(blob.into()),
            }],
        }
    }

    fn snapshot(links: Vec<DeclaredLink>) -> LinkSnapshot {
        LinkSnapshot {
            metadata_digest: "sha256:seeded".into(),
            links,
        }
    }

    #[test]
    fn a_clean_answer_is_a_sealed_manifest() {
        let base = "b".repeat(40);
        let manifest = judge(&report(&base), &base, "sha256:seeded", &snapshot(vec![])).unwrap();
        assert!(!manifest.metadata_changed && !manifest.needs_person());
        assert_eq!(manifest.changes.len(), 1);
        assert_eq!(manifest.digest, manifest.digest_of());
    }

    #[test]
    fn metadata_or_head_not_as_seeded_lists_nothing_else() {
        let base = "b".repeat(40);
        let mut moved = report(&base);
        moved.head = Some("c".repeat(40));
        let mut changed = report(&base);
        changed.metadata_digest = "sha256:other".into();
        for r in [moved, changed] {
            let m = judge(&r, &base, "sha256:seeded", &snapshot(vec![])).unwrap();
            assert!(m.metadata_changed && m.changes.is_empty() && m.needs_person());
        }
    }

    #[test]
    fn any_finding_refuses_the_whole_answer() {
        let base = "b".repeat(40);
        let mut r = report(&base);
        r.findings.push(Finding {
            path: ".".into(),
            reason: Reason::TooManyChanges,
            detail: String::new(),
        });
        let e = judge(&r, &base, "sha256:seeded", &snapshot(vec![])).unwrap_err();
        assert_eq!(e.id(), "audit-refused");
    }

    #[test]
    fn a_declared_link_whose_target_state_moved_is_listed() {
        let before = vec![link("l", "1"), link("m", "1")];
        let now = vec![link("l", "1"), link("m", "2")];
        assert_eq!(link_target_changes(&before, &now), vec!["m".to_owned()]);
        assert_eq!(link_target_changes(&before, &before), Vec::<String>::new());
        assert_eq!(
            link_target_changes(&before, &now[..1]),
            vec!["m".to_owned()]
        );
    }

    #[test]
    fn a_snapshot_of_other_metadata_is_refused() {
        let mut s = snapshot(vec![]);
        s.metadata_digest = "sha256:other".into();
        assert_eq!(
            declared_paths(&s, "sha256:seeded").unwrap_err().id(),
            "invalid-input"
        );
    }

    #[test]
    fn the_scratch_directory_goes_with_its_owner() {
        let scratch = Scratch::new().unwrap();
        let root = scratch.root().to_owned();
        assert!(root.join("home").is_dir());
        drop(scratch);
        assert!(!root.exists());
    }
}
