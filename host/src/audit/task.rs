//! A task: one storage handle bound to the controller that audits it. What every audit step
//! needs from the handle (base, the commit it was seeded from; the seeder's metadata baseline)
//! is checked once, when the task is made ([`Controller::task`]); a recovered handle that lacks
//! either is refused then (`handle-incomplete`), not at each step. The verbs take base from the
//! task and run their reader containers on the controller's helper image.

use std::time::Duration;

use cordon_contract::audit::Manifest;
use cordon_contract::tree::{LinkSnapshot, Operation};

use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::task::StorageHandle;

use super::{CommitRequest, Committed, Export, TreeCheck};

/// One task's storage, bound to its controller; see the module docs.
#[derive(Debug, Clone)]
pub struct Task<'c> {
    ctl: &'c Controller,
    handle: StorageHandle,
    /// The commit the storage was seeded from: a full lowercase commit id.
    base: String,
    /// The metadata digest the seeder recorded.
    baseline: String,
    image: String,
}

impl Controller {
    /// Bind `handle` to this controller: its head must be a full commit id and its metadata
    /// baseline present (a recovered handle carries them only when the caller set the ones it
    /// recorded), and this controller must know its helper image.
    pub fn task(&self, handle: &StorageHandle) -> Result<Task<'_>> {
        let base = handle
            .head
            .clone()
            .ok_or(Error::HandleIncomplete { missing: "head" })?;
        super::check::check_base(&base)?;
        let baseline = handle
            .metadata_baseline
            .clone()
            .ok_or(Error::HandleIncomplete {
                missing: "metadata baseline",
            })?;
        Ok(Task {
            ctl: self,
            handle: handle.clone(),
            base,
            baseline,
            image: self.helper_image()?.to_owned(),
        })
    }
}

impl<'c> Task<'c> {
    pub fn controller(&self) -> &'c Controller {
        self.ctl
    }

    pub fn handle(&self) -> &StorageHandle {
        &self.handle
    }

    /// The commit the storage was seeded from.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The metadata digest the seeder recorded.
    pub fn baseline(&self) -> &str {
        &self.baseline
    }

    /// The image the reader containers run.
    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    /// The declared-link snapshot, before a writable run ([`super::links`]).
    pub async fn snapshot_links(
        &self,
        paths: &[String],
        deadline: Duration,
    ) -> Result<LinkSnapshot> {
        super::links::snapshot_links(self, paths, deadline).await
    }

    /// The pre-launch tree check against base and the declared `operations`
    /// ([`super::check`]).
    pub async fn check_tree(
        &self,
        operations: &[Operation],
        deadline: Duration,
    ) -> Result<TreeCheck> {
        super::check::check_tree(self, operations, deadline).await
    }

    /// The change manifest against base, the declared links compared with `snapshot`
    /// ([`super::inspect`]).
    pub async fn inspect(&self, snapshot: &LinkSnapshot, deadline: Duration) -> Result<Manifest> {
        super::inspect::inspect(self, snapshot, deadline).await
    }

    /// The diff against base ([`super::export`]).
    pub async fn export_diff(&self, deadline: Duration) -> Result<Export> {
        super::export::export_diff(self, deadline).await
    }

    /// Commit what the approved manifest holds, on base ([`super::commit`]).
    pub async fn commit(&self, request: &CommitRequest, deadline: Duration) -> Result<Committed> {
        super::commit::commit(self, request, deadline).await
    }

    /// Remove the storage ([`crate::task::remove`]).
    pub async fn remove(self) -> Result<()> {
        crate::task::remove(self.ctl, &self.handle).await
    }
}
