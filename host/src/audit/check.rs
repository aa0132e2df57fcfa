//! The pre-launch tree check and its one-shot capability.
//!
//! [`check_tree`] runs the reader's `tree check` over the storage and refuses
//! ([`Error::TreeRefused`], every reason with its path, the same answer on retry) unless the work
//! tree is exactly base's tree, the metadata is as seeded, HEAD is base, every declared operation
//! fits, and every gitlink can get its mask and pins. What it returns is a [`TreeCheck`]: an
//! execute or fix start redeems exactly one ([`redeem`]), made by the same controller for the
//! same storage and head, unused and unaltered; a read-only phase takes none.

use std::time::{Duration, Instant};

use cordon_contract::tree::{
    self, CheckReport, Finding, Operation, Reason, CHECK, MAX_GITLINKS, MAX_LISTED_REASONS,
    MAX_MOUNT_PATH_BYTES, MAX_OPERATIONS, MAX_PATH_BYTES, MAX_PINS,
};
use cordon_contract::{Id, Phase};
use serde::{Deserialize, Serialize};

use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::task::StorageHandle;

use super::Task;

/// A passed check: what it was made for and what the profile masks and pins. Only
/// [`check_tree`] issues one, and its controller redeems it once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeCheck {
    /// This check's own id (what the controller remembers).
    pub id: uuid::Uuid,
    /// The storage it was made for.
    pub allocation: uuid::Uuid,
    pub work_volume: String,
    /// The base it found the tree equal to (HEAD).
    pub head: String,
    /// Every gitlink of base: each gets an empty read-only tmpfs.
    pub gitlinks: Vec<String>,
    /// Every directory above a nested gitlink ([`tree::pins_of`]): pinned by the init.
    pub pins: Vec<String>,
    /// Entries of base compared.
    pub entries: u64,
    /// The metadata digest it found (the seeder's baseline).
    pub metadata_digest: String,
    /// How long the check took, container included.
    pub ms: u64,
}

/// What a redeemed check gives the profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masks {
    pub gitlinks: Vec<String>,
    pub pins: Vec<String>,
}

/// Check the tree of `task`'s storage against its base and the declared `operations`.
pub(super) async fn check_tree(
    task: &Task<'_>,
    operations: &[Operation],
    deadline: Duration,
) -> Result<TreeCheck> {
    let started = Instant::now();
    let (ctl, handle, base, baseline) = (
        task.controller(),
        task.handle(),
        task.base(),
        task.baseline(),
    );
    check_operations(operations)?;
    let mut args = vec![CHECK.to_owned(), base.to_owned()];
    for op in operations {
        args.push(serde_json::to_string(op).map_err(|e| Error::Internal(e.to_string()))?);
    }
    let report: CheckReport =
        super::reader::read(ctl.engine(), task.image(), handle, args, deadline).await?;
    let (findings, more) = judge(&report, base, baseline);
    if !findings.is_empty() {
        return Err(Error::TreeRefused { findings, more });
    }
    let pins = tree::pins_of(&report.gitlinks);
    let check = TreeCheck {
        id: uuid::Uuid::new_v4(),
        allocation: handle.allocation,
        work_volume: handle.work_volume.clone(),
        head: base.to_owned(),
        gitlinks: report.gitlinks,
        pins,
        entries: report.entries,
        metadata_digest: report.metadata_digest,
        ms: started.elapsed().as_millis() as u64,
    };
    ctl.issue_tree_check(check.id, canonical(&check)?)?;
    Ok(check)
}

/// A base is a full commit id.
pub(super) fn check_base(base: &str) -> Result<()> {
    if base.len() == 40
        && base
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "base {base:?} is not a full lowercase commit id"
        )))
    }
}

/// At most [`MAX_OPERATIONS`], each path at most [`MAX_PATH_BYTES`] (what the reader's argv
/// carries); whether a path is clean is the reader's finding, so it is listed with the rest.
fn check_operations(operations: &[Operation]) -> Result<()> {
    if operations.len() > MAX_OPERATIONS {
        return Err(Error::Invalid(format!(
            "{} declared operations; at most {MAX_OPERATIONS}",
            operations.len()
        )));
    }
    let long = operations
        .iter()
        .flat_map(|op| std::iter::once(&op.path).chain(&op.renamed_from))
        .find(|p| p.len() > MAX_PATH_BYTES || p.contains('\0'));
    if let Some(path) = long {
        return Err(Error::Invalid(format!(
            "a declared path of {} bytes (at most {MAX_PATH_BYTES}, no NUL)",
            path.len()
        )));
    }
    Ok(())
}

/// Every reason the report gives to refuse, the host's own among them (HEAD, the metadata, what
/// the masks and pins can carry), in one order: the listed ones and how many more.
pub fn judge(report: &CheckReport, base: &str, baseline: &str) -> (Vec<Finding>, u64) {
    let mut found = report.findings.clone();
    let mut add = |reason, path: &str, detail: String| {
        found.push(Finding {
            reason,
            path: path.to_owned(),
            detail,
        })
    };
    if report.head.as_deref() != Some(base) {
        add(
            Reason::HeadMoved,
            "HEAD",
            format!(
                "base {base}, HEAD {}",
                report.head.as_deref().unwrap_or("unreadable")
            ),
        );
    }
    if report.metadata_digest != baseline {
        add(
            Reason::MetadataChanged,
            ".git",
            format!("seeded {baseline}, found {}", report.metadata_digest),
        );
    }
    if report.gitlinks.len() > MAX_GITLINKS {
        add(
            Reason::GitlinkLimit,
            ".",
            format!("{} gitlinks, at most {MAX_GITLINKS}", report.gitlinks.len()),
        );
    }
    for gitlink in &report.gitlinks {
        if !crate::profile::mountable(gitlink) {
            add(
                Reason::GitlinkName,
                gitlink,
                "no mount can carry this name".into(),
            );
        }
    }
    let pins = tree::pins_of(&report.gitlinks);
    if pins.len() > MAX_PINS {
        add(
            Reason::PinLimit,
            ".",
            format!("{} pinned directories, at most {MAX_PINS}", pins.len()),
        );
    }
    let bytes = tree::mount_path_bytes(&report.gitlinks, &pins);
    if bytes > MAX_MOUNT_PATH_BYTES {
        add(
            Reason::MountPathsLimit,
            ".",
            format!("{bytes} bytes of mount paths, at most {MAX_MOUNT_PATH_BYTES}"),
        );
    }
    found.sort();
    found.dedup();
    let listed = found.len().min(MAX_LISTED_REASONS);
    let more = report.more + (found.len() - listed) as u64;
    found.truncate(listed);
    (found, more)
}

/// The one text a check is compared by.
fn canonical(check: &TreeCheck) -> Result<String> {
    serde_json::to_string(check).map_err(|e| Error::Internal(format!("a tree check: {e}")))
}

fn refused(reason: String) -> Error {
    Error::Profile {
        id: Id::TreeCheck,
        reason,
    }
}

/// Redeem the check an invocation in `phase` over `storage` presents: execute and fix need one,
/// which this controller issued for that storage and head and nobody redeemed or altered; a
/// read-only phase takes none. Redeeming takes it out before anything is compared, so a check
/// presented wrongly is spent too: check again.
pub fn redeem(
    ctl: &Controller,
    phase: Phase,
    check: Option<&TreeCheck>,
    storage: &StorageHandle,
) -> Result<Masks> {
    let Some(check) = check else {
        if phase.work_writable() {
            return Err(refused(format!(
                "{phase} starts only on a checked tree: run the tree check first"
            )));
        }
        return Ok(Masks::default());
    };
    if !phase.work_writable() {
        return Err(refused(format!(
            "{phase} mounts /work read-only and takes no tree check"
        )));
    }
    let issued = ctl.redeem_tree_check(&check.id)?.ok_or_else(|| {
        refused(format!(
            "the tree check {} was never issued by this controller, or was used already",
            check.id
        ))
    })?;
    if issued != canonical(check)? {
        return Err(refused(format!(
            "the tree check {} differs from the one issued",
            check.id
        )));
    }
    if check.allocation != storage.allocation || check.work_volume != storage.work_volume {
        return Err(refused(format!(
            "the tree check was made for the storage of allocation {}, not {}",
            check.allocation, storage.allocation
        )));
    }
    if let Some(head) = &storage.head {
        if *head != check.head {
            return Err(refused(format!(
                "the tree check was made at {}, the storage's head is {head}",
                check.head
            )));
        }
    }
    Ok(Masks {
        gitlinks: check.gitlinks.clone(),
        pins: check.pins.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "0123456789abcdef0123456789abcdef01234567";

    fn report() -> CheckReport {
        CheckReport {
            head: Some(BASE.into()),
            metadata_digest: "sha256:seeded".into(),
            entries: 3,
            gitlinks: vec!["a/b/sub".into(), "top".into()],
            findings: vec![],
            more: 0,
        }
    }

    fn reasons(r: &CheckReport) -> Vec<Reason> {
        judge(r, BASE, "sha256:seeded")
            .0
            .iter()
            .map(|f| f.reason)
            .collect()
    }

    #[test]
    fn a_clean_report_passes_and_each_host_reason_refuses() {
        assert_eq!(reasons(&report()), vec![]);
        let mut r = report();
        r.head = Some("f".repeat(40));
        assert_eq!(reasons(&r), vec![Reason::HeadMoved]);
        r.head = None;
        assert_eq!(reasons(&r), vec![Reason::HeadMoved]);
        let mut r = report();
        r.metadata_digest = "sha256:other".into();
        assert_eq!(reasons(&r), vec![Reason::MetadataChanged]);
        for bad in ["a,b", "a\"b", "a\\xffb", "a\nb"] {
            let mut r = report();
            r.gitlinks.push(bad.into());
            assert_eq!(reasons(&r), vec![Reason::GitlinkName], "{bad:?}");
        }
        let mut r = report();
        r.gitlinks = (0..=MAX_GITLINKS).map(|i| format!("g{i}")).collect();
        assert_eq!(reasons(&r), vec![Reason::GitlinkLimit]);
        let mut r = report();
        r.gitlinks = (0..=MAX_PINS).map(|i| format!("p{i}/sub")).collect();
        assert_eq!(reasons(&r), vec![Reason::GitlinkLimit, Reason::PinLimit]);
        let mut r = report();
        r.gitlinks = (0..200)
            .map(|i| format!("{}/{i}", "d".repeat(700)))
            .collect();
        assert_eq!(reasons(&r), vec![Reason::MountPathsLimit]);
    }

    #[test]
    fn the_answer_is_ordered_bounded_and_counts_the_rest() {
        let mut r = report();
        r.findings = (0..MAX_LISTED_REASONS)
            .rev()
            .map(|i| Finding {
                reason: Reason::Untracked,
                path: format!("f{i:04}"),
                detail: String::new(),
            })
            .collect();
        r.more = 7;
        r.metadata_digest = "sha256:other".into();
        let (listed, more) = judge(&r, BASE, "sha256:seeded");
        assert_eq!(listed.len(), MAX_LISTED_REASONS);
        assert_eq!(more, 8);
        assert!(listed.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(judge(&r, BASE, "sha256:seeded"), (listed, more));
    }

    #[test]
    fn a_base_is_a_full_lowercase_commit_id() {
        assert!(check_base(BASE).is_ok());
        for bad in [
            "",
            "abc",
            &BASE.to_uppercase(),
            &format!("{BASE}0"),
            "--all",
        ] {
            assert!(check_base(bad).is_err(), "{bad}");
        }
    }
}
