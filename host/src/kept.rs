//! The metadata as seeded, kept by the controller: the copy an inspection read out of a storage,
//! whose digest was that storage's metadata baseline, held (extracted and hardened) for the next
//! inspection or commit of any storage with that baseline, so that they read only the work tree.
//!
//! A storage's metadata is read-only to agents, and the reader digests it on every inspection:
//! a storage whose metadata is not its baseline any more is the metadata changing whatever is
//! kept (the inspection's `judge`). What is kept is the controller's own copy of bytes it has
//! already checked; git only reads it. Each inspection works in a copy of its own that borrows
//! the kept copy's objects ([`Scratch::borrowing`]): fast-import's objects, refs and packs go
//! there and go with it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use cordon_repo::git::Git;
use cordon_repo::scratch::{self, Scratch, TreeEntry};

use crate::error::{Error, Result};

/// A copy larger than this (its archive's bytes) is read afresh each time rather than kept.
pub const MAX_KEPT_BYTES: u64 = 256 * 1024 * 1024;

/// One storage metadata's copy as seeded, and the last base's tree listed from it.
#[derive(Debug)]
pub struct KeptMetadata {
    /// Extracted, digested as the baseline, hardened; git never writes in it.
    copy: Scratch,
    /// Its archive's size.
    pub bytes: u64,
    /// Base's tree as [`scratch::list_tree`] lists it, for the last base asked about (only a
    /// commit is ever listed).
    listed: Mutex<Option<Listed>>,
}

/// A base and its tree's listing.
type Listed = (String, Arc<Vec<TreeEntry>>);

impl KeptMetadata {
    /// Keep `copy` (as seeded, hardened), of `bytes`, with `base`'s tree already listed.
    pub fn new(copy: Scratch, bytes: u64, base: &str, listed: Arc<Vec<TreeEntry>>) -> Self {
        KeptMetadata {
            copy,
            bytes,
            listed: Mutex::new(Some((base.to_owned(), listed))),
        }
    }

    /// A copy of one inspection's own, borrowing this one's objects, and its git bounded by
    /// `until`.
    pub fn working(&self, until: Instant) -> Result<(Scratch, Git)> {
        let scratch = Scratch::borrowing(&self.copy.git_dir())?;
        let git = scratch.git(until);
        Ok((scratch, git))
    }

    /// Base's tree through `git` (a [`working`](Self::working) copy's): listed once per base,
    /// after checking base is a commit (`None` when it is not).
    pub async fn base_tree(&self, git: &Git, base: &str) -> Result<Option<Arc<Vec<TreeEntry>>>> {
        if let Some((listed_base, listed)) = self.listed()?.as_ref() {
            if listed_base == base {
                return Ok(Some(listed.clone()));
            }
        }
        if !scratch::is_commit(git, base).await? {
            return Ok(None);
        }
        let listed = Arc::new(scratch::list_tree(git, base).await?);
        *self.listed()? = Some((base.to_owned(), listed.clone()));
        Ok(Some(listed))
    }

    fn listed(&self) -> Result<std::sync::MutexGuard<'_, Option<Listed>>> {
        self.listed
            .lock()
            .map_err(|_| Error::Internal("the kept metadata's listing is poisoned".into()))
    }
}
