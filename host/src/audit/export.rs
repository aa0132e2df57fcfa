//! The diff export: at most 1 MiB of unified diff of what a writable attempt changed (a stopped
//! one too), with a `cordon:` notice line for each thing a diff cannot show. It runs the
//! inspection (refused when the metadata is not as seeded), builds the changes a diff can show
//! into a scratch commit exactly as the commit would (content checked against the inspection's
//! blob ids), and diffs base against it with hardened git on the scratch copy.

use std::time::Duration;

use cordon_contract::audit::{content_bytes, needs_content, Change, CommitReason, Kind, Manifest};
use cordon_contract::tree::{Finding, LinkSnapshot, Reason};

use crate::error::{Error, Result};

use super::{inspect, Task};
use cordon_repo::git::Input;
use cordon_repo::{build, paths};

/// The export is at most this long, notices included.
pub const MAX_DIFF_BYTES: usize = 1024 * 1024;
/// A changed file over this size is a notice, not a diff.
pub const MAX_DIFF_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// The scratch ref the export's commit is made on (in the scratch copy only).
const EXPORT_REF: &str = "refs/cordon/export";
/// The scratch commit's fixed identity (the export's commit is never handed out).
const EXPORT_IDENTITY: &str = "cordon export <export@cordon.invalid> 0 +0000";

/// The diff of a writable attempt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Export {
    /// Notice lines first (`cordon: ...`), then the unified diff.
    pub diff: String,
    /// Cut at [`MAX_DIFF_BYTES`].
    pub truncated: bool,
    /// The manifest the export shows.
    pub digest: String,
}

/// Export the diff of `task`'s storage against its base.
pub(super) async fn export_diff(task: &Task<'_>, deadline: Duration) -> Result<Export> {
    let until = std::time::Instant::now() + deadline;
    let snapshot = LinkSnapshot {
        metadata_digest: task.baseline().to_owned(),
        links: vec![],
    };
    let base = task.base().to_owned();
    let ctl = task.controller();
    inspect::inspect_then(
        task,
        &snapshot,
        (deadline, true),
        |container, inspection| async move {
            let manifest = &inspection.manifest;
            if manifest.metadata_changed {
                return Err(Error::AuditRefused {
                    findings: vec![Finding {
                        path: ".git".into(),
                        reason: Reason::MetadataChanged,
                        detail: "the metadata is not as seeded: no git command runs".into(),
                    }],
                    more: 0,
                });
            }
            let (mut shown, mut notices) = split(manifest);
            // Past the bound the reader wrote no content: only what needs none is shown.
            let content = content_bytes(&manifest.changes);
            if content > super::commit::MAX_CONTENT_BYTES && shown.iter().any(needs_content) {
                shown.retain(|c| !needs_content(c));
                notices.push(format!(
                    "cordon: the new content is {content} bytes, more than {}: no file's content is shown",
                    super::commit::MAX_CONTENT_BYTES
                ));
            }
            // What git would take for a repository (bare ones too): the commit refuses it.
            let listed = &inspection.base_tree;
            let base_tree =
                cordon_repo::scratch::base_for_rules_listed(&inspection.git, listed, false)
                    .await?;
            for finding in paths::refusals(manifest, &base_tree, paths::Rules::default()) {
                if finding.reason == CommitReason::NestedRepository {
                    notices.push(format!(
                        "cordon: a nested repository {:?} ({})",
                        finding.path, finding.detail
                    ));
                }
            }
            let mut text = String::new();
            for notice in &notices {
                text.push_str(notice);
                text.push('\n');
            }
            notices.clear();
            let mut truncated = false;
            if !shown.is_empty() {
                let container = container
                    .ok_or_else(|| Error::Internal("no reader container to read from".into()))?;
                let spec = build::Spec {
                    base: base.clone(),
                    changes: shown.clone(),
                    author: build::identity(EXPORT_IDENTITY)?,
                    committer: build::identity(EXPORT_IDENTITY)?,
                    message: build::message("cordon export", &[])?,
                    reference: EXPORT_REF.to_owned(),
                };
                let left = until.saturating_duration_since(std::time::Instant::now());
                let (imported, special) = super::commit::build_from_archive(
                    ctl.engine(),
                    &container,
                    &inspection,
                    (spec, listed),
                    (super::commit::MAX_CONTENT_BYTES, left),
                    super::commit::OnSpecial::Report,
                    std::future::ready(Ok(())),
                )
                .await?;
                let head = imported.head;
                for finding in special {
                    text.push_str(&format!(
                        "cordon: the commit refuses {:?} ({}: {})\n",
                        finding.path,
                        finding.reason.id(),
                        finding.detail
                    ));
                }
                let left = MAX_DIFF_BYTES.saturating_sub(text.len());
                let (diff, cut) = build::diff(&inspection.git, &base, &head, left).await?;
                for line in attribute_notices(&inspection.git, &head, &shown).await? {
                    text.push_str(&line);
                    text.push('\n');
                }
                text.push_str(&diff);
                truncated = cut;
            }
            if text.len() > MAX_DIFF_BYTES {
                let mut cut = MAX_DIFF_BYTES;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                truncated = true;
            }
            Ok(Export {
                diff: text,
                truncated,
                digest: manifest.digest.clone(),
            })
        },
    )
    .await
}

/// The changes a diff can show, and a notice for each it cannot.
pub fn split(manifest: &Manifest) -> (Vec<Change>, Vec<String>) {
    let mut shown = Vec::new();
    let mut notices = Vec::new();
    // A new path with a `.git` part below the top: the directory above it is a nested repository.
    let nested_repos: std::collections::BTreeSet<String> = manifest
        .changes
        .iter()
        .filter(|c| c.old.is_none())
        .filter_map(|c| {
            let parts: Vec<&str> = c.path.split('/').collect();
            let at = parts.iter().position(|p| p.eq_ignore_ascii_case(".git"))?;
            (at > 0).then(|| parts[..at].join("/"))
        })
        .collect();
    for dir in &nested_repos {
        notices.push(format!("cordon: an untracked nested repository {dir:?}"));
    }
    for path in &manifest.nested_gitlink_content {
        notices.push(format!(
            "cordon: a submodule directory with content {path:?}"
        ));
    }
    for change in &manifest.changes {
        let path = &change.path;
        let kind = change.new.as_ref().map(|n| n.kind);
        let has_git_part = path.split('/').any(|p| p.eq_ignore_ascii_case(".git"));
        let notice = if has_git_part {
            Some(format!("cordon: an entry named .git {path:?}"))
        } else if matches!(kind, Some(Kind::Fifo | Kind::Socket | Kind::Device)) {
            Some(format!("cordon: a fifo or socket {path:?}"))
        } else if change.ignored {
            Some(format!("cordon: an ignored untracked path {path:?}"))
        } else if kind == Some(Kind::Dir)
            || change.old.as_ref().map(|o| o.kind) == Some(Kind::Gitlink)
        {
            // Gitlink content has its notice above; an empty directory has no diff.
            (kind == Some(Kind::Dir) && change.old.is_none())
                .then(|| format!("cordon: an empty directory {path:?}"))
        } else if change
            .new
            .as_ref()
            .and_then(|n| n.size)
            .is_some_and(|size| size > MAX_DIFF_FILE_BYTES)
        {
            Some(format!("cordon: a changed file over 8 MiB {path:?}"))
        } else if !paths::addable(path) {
            Some(format!("cordon: a path git will not add {path:?}"))
        } else {
            shown.push(change.clone());
            None
        };
        notices.extend(notice);
    }
    (shown, notices)
}

/// A notice for each shown file whose `ident` or `working-tree-encoding` attribute (as the
/// exported tree's own `.gitattributes` set them) makes git store other bytes than the diff
/// shows: the audit stores the bytes as read, with no filter.
async fn attribute_notices(
    git: &cordon_repo::git::Git,
    head: &str,
    shown: &[Change],
) -> Result<Vec<String>> {
    let files: Vec<&str> = shown
        .iter()
        .filter(|c| {
            c.new
                .as_ref()
                .is_some_and(|n| matches!(n.kind, Kind::File | Kind::Executable))
        })
        .map(|c| c.path.as_str())
        .collect();
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = Vec::new();
    for path in &files {
        input.extend_from_slice(path.as_bytes());
        input.push(0);
    }
    let source = format!("--source={head}");
    let out = git
        .run_with_input(
            "check-attr",
            &[
                "check-attr",
                &source,
                "-z",
                "--stdin",
                "ident",
                "working-tree-encoding",
            ],
            Input::Bytes(input),
        )
        .await?;
    let text = String::from_utf8_lossy(&out);
    let fields: Vec<&str> = text.split('\0').collect();
    let mut notices = std::collections::BTreeSet::new();
    for triple in fields.chunks(3) {
        let [path, attribute, value] = triple else {
            continue;
        };
        let filtered = match *attribute {
            "ident" => *value == "set",
            "working-tree-encoding" => !matches!(*value, "unspecified" | "unset"),
            _ => false,
        };
        if filtered {
            notices.insert(format!(
                "cordon: {path:?} has the {attribute} attribute: git would store other bytes than this diff shows"
            ));
        }
    }
    Ok(notices.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::audit::Side;

    fn side(kind: Kind, size: Option<u64>) -> Option<Side> {
        Some(Side {
            kind,
            blob: Some("0".repeat(40)),
            size,
            target: None,
        })
    }

    fn added(path: &str, kind: Kind, size: Option<u64>, ignored: bool) -> Change {
        Change {
            path: path.into(),
            old: None,
            new: side(kind, size),
            ignored,
            link_target_traverses_link: None,
        }
    }

    #[test]
    fn what_a_diff_cannot_show_is_a_notice_and_the_rest_is_shown() {
        let manifest = Manifest {
            base: "b".repeat(40),
            changes: vec![
                added("a.txt", Kind::File, Some(1), false),
                added("link", Kind::Link, None, false),
                added("pipe", Kind::Fifo, None, false),
                added("sock", Kind::Socket, None, false),
                added("debug.log", Kind::File, Some(1), true),
                added("build", Kind::Dir, None, true),
                added("empty", Kind::Dir, None, false),
                added("huge", Kind::File, Some(MAX_DIFF_FILE_BYTES + 1), false),
                added("nested/.git/HEAD", Kind::File, Some(1), false),
                added("bad\\name", Kind::File, Some(1), false),
                Change {
                    path: "gone.txt".into(),
                    old: side(Kind::File, None),
                    new: None,
                    ignored: false,
                    link_target_traverses_link: None,
                },
            ],
            agent_commits: vec![],
            metadata_changed: false,
            link_target_changes: vec![],
            nested_gitlink_content: vec!["vendor/sub".into()],
            digest: String::new(),
        };
        let (shown, notices) = split(&manifest);
        let shown: Vec<&str> = shown.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(shown, ["a.txt", "link", "gone.txt"]);
        for want in [
            "cordon: an untracked nested repository \"nested\"",
            "cordon: a submodule directory with content \"vendor/sub\"",
            "cordon: a fifo or socket \"pipe\"",
            "cordon: a fifo or socket \"sock\"",
            "cordon: an ignored untracked path \"debug.log\"",
            "cordon: an ignored untracked path \"build\"",
            "cordon: an empty directory \"empty\"",
            "cordon: a changed file over 8 MiB \"huge\"",
            "cordon: an entry named .git \"nested/.git/HEAD\"",
            "cordon: a path git will not add \"bad\\\\name\"",
        ] {
            assert!(
                notices.iter().any(|n| n == want),
                "{want} not in {notices:#?}"
            );
        }
    }
}
