//! The declared-link snapshot: for each declared path that is a symlink, where it resolves (one
//! component at a time, as the agent container's kernel would), the state of the target and
//! everything beneath it, and whether a link lies on the way. The caller keeps it for the audit
//! after the run; a declared link that passes through another link must not be launched.

use std::time::Duration;

use cordon_contract::tree::{
    clean_path, Finding, LinkSnapshot, Reason, MAX_DECLARED_PATHS, SNAPSHOT_LINKS,
};

use crate::error::{Error, Result};

use super::Task;

/// Snapshot the declared `paths` (relative to /work) of `task`'s storage. Refused when the
/// metadata is not as seeded.
pub(super) async fn snapshot_links(
    task: &Task<'_>,
    paths: &[String],
    deadline: Duration,
) -> Result<LinkSnapshot> {
    if paths.len() > MAX_DECLARED_PATHS {
        return Err(Error::Invalid(format!(
            "{} declared paths; at most {MAX_DECLARED_PATHS}",
            paths.len()
        )));
    }
    if let Some(bad) = paths.iter().find(|p| !clean_path(p)) {
        return Err(Error::Invalid(format!(
            "the declared path {bad:?} is not a clean path under /work"
        )));
    }
    let (handle, baseline) = (task.handle(), task.baseline());
    let mut args = vec![SNAPSHOT_LINKS.to_owned()];
    args.extend(paths.iter().cloned());
    let snapshot: LinkSnapshot = super::reader::read(
        task.controller().engine(),
        task.image(),
        handle,
        args,
        deadline,
    )
    .await?;
    if snapshot.metadata_digest != baseline {
        return Err(Error::TreeRefused {
            findings: vec![Finding {
                reason: Reason::MetadataChanged,
                path: ".git".into(),
                detail: format!("seeded {baseline}, found {}", snapshot.metadata_digest),
            }],
            more: 0,
        });
    }
    Ok(snapshot)
}

/// Refuse a snapshot in which a declared link passes through another link.
pub fn refuse_through_links(snapshot: &LinkSnapshot) -> Result<()> {
    let findings: Vec<Finding> = snapshot
        .links
        .iter()
        .filter(|l| l.through_link)
        .map(|l| Finding {
            reason: Reason::ThroughLink,
            path: l.path.clone(),
            detail: format!("resolves {:?}", l.resolution),
        })
        .collect();
    if findings.is_empty() {
        Ok(())
    } else {
        Err(Error::TreeRefused { findings, more: 0 })
    }
}
