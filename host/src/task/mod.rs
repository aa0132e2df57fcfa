//! Task storage for one repository: stage it, check it, allocate bounded storage, seed it, record
//! the metadata baseline, hand out a handle; remove by handle; recover by owner.
//!
//! Every failure after the first create removes everything the allocation made before it returns;
//! nothing partial is handed out.

pub mod recover;
pub mod seed;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bollard::models::VolumeCreateRequest;
use cordon_contract::{paths, InitLine};

use crate::controller::Controller;
use crate::engine::objects::{self, Labelled};
use crate::engine::pending::{Created, Shared};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind, Owner, ALLOCATION, ATTEMPT, KIND, OWNER, UID};
use crate::profile::Area;
use crate::storage::{self, TaskStorage};
use crate::uids::{Uid, UidRange};
use cordon_repo::{clone, tree};

pub use crate::error::Unusable;

/// What `prepare` returns and `remove` takes: everything needed to mount and to remove the storage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StorageHandle {
    pub owner: String,
    pub attempt: String,
    pub allocation: uuid::Uuid,
    pub work_volume: String,
    pub metadata_volume: String,
    pub keeper: String,
    pub work: Area,
    pub metadata: Area,
    /// The uid (and gid) every container over this storage runs as: its own, no other live
    /// allocation's.
    pub uid: Uid,
    /// The commit the storage was seeded from (absent in a recovered handle).
    pub head: Option<String>,
    /// The gitlinks (submodules) of the seeded tree, as paths under /work (absent in a recovered
    /// handle, and when one has a name that is not UTF-8). For the record only: what execute and
    /// fix mask and pin is what their tree check found (`Task::check_tree`).
    #[serde(default)]
    pub gitlinks: Option<Vec<String>>,
    /// The metadata digest the seeder recorded (absent in a recovered handle: pass back the one
    /// you recorded).
    pub metadata_baseline: Option<String>,
    /// Present when this storage is a shared snapshot: many read-only invocations mount it, each
    /// as a uid of its own; no phase that writes does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Snapshot>,
}

/// What a shared snapshot's handle holds besides its storage's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The digest of /work with its metadata, taken by its keeper once seeding finished: every
    /// init over the snapshot refuses another tree (absent in a recovered handle: pass back the
    /// one you recorded; a snapshot without it is never mounted).
    pub digest: Option<String>,
}

impl StorageHandle {
    /// The storage as the launch code uses it (a snapshot's only with its recorded digest).
    pub fn storage(&self) -> Result<TaskStorage> {
        let owner = Owner::new(&self.owner)?;
        let mut allocation = Allocation::new(&owner, &self.attempt, self.uid)?;
        allocation.id = self.allocation;
        let mut storage = TaskStorage::from_parts(
            allocation,
            self.work_volume.clone(),
            self.work,
            self.metadata_volume.clone(),
            self.metadata,
            self.keeper.clone(),
        );
        if let Some(snapshot) = &self.snapshot {
            storage.snapshot = Some(snapshot.digest.clone().ok_or_else(|| Error::Snapshot {
                id: "snapshot-unverified",
                reason: format!(
                    "snapshot {} has no recorded digest: pass back the one its prepare returned",
                    self.allocation
                ),
            })?);
        }
        Ok(storage)
    }
}

impl StorageHandle {
    /// The labels this handle's object of `kind` carries.
    fn labels(&self, kind: Kind) -> BTreeMap<String, String> {
        BTreeMap::from([
            (OWNER.to_owned(), self.owner.clone()),
            (ATTEMPT.to_owned(), self.attempt.clone()),
            (ALLOCATION.to_owned(), self.allocation.to_string()),
            (KIND.to_owned(), kind.as_str().to_owned()),
            (UID.to_owned(), self.uid.to_string()),
        ])
    }

    /// Whether `labels` are this handle's object of `kind`'s.
    fn carries(&self, labels: &std::collections::HashMap<String, String>, kind: Kind) -> bool {
        self.labels(kind)
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }

    /// Whether the engine's keeper of this storage (by the handle's id, carrying its labels) is
    /// a shared snapshot's, which digests /work: `None` when there is no such keeper.
    async fn kept_as_snapshot(&self, engine: &Engine) -> Result<Option<bool>> {
        let Some(keeper) = objects::inspect_container(engine, &self.keeper).await? else {
            return Ok(None);
        };
        let config = keeper.config.unwrap_or_default();
        if !self.carries(&config.labels.unwrap_or_default(), Kind::Keeper) {
            return Ok(None);
        }
        Ok(Some(
            config.entrypoint.unwrap_or_default() == storage::keeper_command(paths::WORK),
        ))
    }

    /// The handle's snapshot mark agrees with its keeper (`snapshot-mark`): a shared snapshot's
    /// keeper digests /work, a task storage's its metadata. The engine's record decides, not the
    /// caller's: a snapshot passed without its mark would run as the snapshot's uid and, in
    /// execute or fix, write the tree other invocations are reading. One inspect; a keeper that is
    /// gone or not this storage's is refused too, since then nothing can tell.
    pub async fn check_mark(&self, engine: &Engine) -> Result<()> {
        let kind = |snapshot: bool| {
            if snapshot {
                "a shared snapshot"
            } else {
                "a task's storage"
            }
        };
        let marked = kind(self.snapshot.is_some());
        let observed = match self.kept_as_snapshot(engine).await? {
            Some(kept) if kind(kept) == marked => return Ok(()),
            Some(kept) => format!("{}, by its keeper's command", kind(kept)),
            None => format!("no keeper of this storage at {}", self.keeper),
        };
        Err(Error::Snapshot {
            id: "snapshot-mark",
            reason: format!(
                "storage {}: expected {marked}, as the handle says; observed {observed}",
                self.allocation
            ),
        })
    }
}

/// An allocation id callers record first: a lowercase UUID v4.
pub fn parse_allocation(text: &str) -> Result<uuid::Uuid> {
    let id = uuid::Uuid::parse_str(text)
        .map_err(|_| Error::Invalid(format!("allocation {text:?} is not a UUID")))?;
    if id.get_version_num() != 4 || id.to_string() != text {
        return Err(Error::Invalid(format!(
            "allocation {text:?} is not a lowercase UUID v4"
        )));
    }
    Ok(id)
}

/// Every container, volume and network carrying this allocation id.
pub async fn objects_with_allocation(engine: &Engine, id: &uuid::Uuid) -> Result<Vec<String>> {
    Ok(objects::with_allocation(engine, id)
        .await?
        .iter()
        .map(Labelled::what)
        .collect())
}

/// The owner of an allocation, from its objects' labels: every object carrying the id must name
/// the same owner, or nothing is touched.
pub async fn owner_of_allocation(engine: &Engine, id: &uuid::Uuid) -> Result<Owner> {
    let objects = objects::with_allocation(engine, id).await?;
    let owners: std::collections::BTreeSet<Option<&String>> =
        objects.iter().map(|o| o.labels.get(OWNER)).collect();
    match owners.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(owner)] => Owner::new(owner),
        [] => Err(Error::Invalid(format!("no object carries allocation {id}"))),
        _ => Err(Error::Invalid(format!(
            "the objects of allocation {id} do not name one owner: {}",
            objects
                .iter()
                .map(|o| format!(
                    "{} (owner {})",
                    o.what(),
                    o.labels.get(OWNER).map_or("none", String::as_str)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// What `prepare` needs.
#[derive(Debug, Clone)]
pub struct PrepareRequest {
    pub repo: std::path::PathBuf,
    pub head: String,
    pub owner: Owner,
    pub attempt: String,
    /// Recorded by the caller first; generated when absent.
    pub allocation: Option<uuid::Uuid>,
    pub work: Area,
    pub deadline: Duration,
    /// Where the storage's uid comes from (and, for a snapshot, each invocation's over it).
    pub uids: UidRange,
    /// Make a shared snapshot for read-only phases rather than one invocation's storage.
    pub shared: bool,
}

/// Size the metadata volume from what the clone needs, with room for git's own files.
fn metadata_area(needs: tree::Needs) -> Area {
    let bytes = (needs.bytes + needs.bytes / 4 + 16 * 1024 * 1024).div_ceil(4096) * 4096;
    Area {
        bytes,
        inodes: needs.inodes + 1024,
    }
}

/// Stage, check, allocate, seed, record the baseline; the keeper and the digest's tool run the
/// controller's helper image. `edit_work` changes the work volume's request before it is made
/// (only the gate uses it, to make a breach case).
pub async fn prepare_with(
    ctl: &Controller,
    request: &PrepareRequest,
    edit_work: impl FnOnce(&mut VolumeCreateRequest),
    progress: &(dyn Fn(&str) + Sync),
) -> Result<StorageHandle> {
    let deadline = Instant::now() + request.deadline;
    let image_id = ctl.helper_image()?;
    request.uids.check()?;
    // A placeholder uid until the engine was asked which are free (the claim comes first).
    let mut allocation = Allocation::new(
        &request.owner,
        &request.attempt,
        Uid::new(request.uids.first)?,
    )?;
    if let Some(id) = request.allocation {
        allocation.id = id;
    }
    let engine = ctl.engine();
    let hold = ctl.hold_allocation(allocation.id, &request.owner)?;
    let result = async {
        // Everything about the repository is decided before anything exists in Docker.
        progress("staging the repository");
        let staged = clone::stage(
            &request.repo,
            &request.head,
            request.owner.as_str(),
            &allocation.id,
            deadline,
        )
        .await?;
        tree::check_fits(staged.work_needs, request.work.into(), "checkout")
            .map_err(Error::Unusable)?;
        let metadata = metadata_area(staged.metadata_needs);
        let taken = objects_with_allocation(engine, &allocation.id).await?;
        if !taken.is_empty() {
            return Err(Error::AllocationInUse(format!(
                "{} ({})",
                allocation.id,
                taken.join(", ")
            )));
        }
        allocation.uid = storage::pick_uid(engine, &request.uids).await?;
        let (mut work_request, metadata_request) =
            storage::task_volume_requests(&allocation, request.work, metadata);
        edit_work(&mut work_request);
        tracing::debug!("staged; allocating");
        progress("allocating task storage");
        // A snapshot's keeper digests the whole tree: that is what each init over it checks.
        let digest_root = if request.shared {
            paths::WORK
        } else {
            paths::METADATA
        };
        let storage = TaskStorage::create_checked(
            engine,
            &allocation,
            image_id,
            (work_request, request.work),
            (metadata_request, metadata),
            paths::METADATA,
            digest_root,
        )
        .await?;
        tracing::debug!("allocated; seeding");
        progress("seeding");
        let seeded = async {
            tokio::time::timeout(
                deadline.saturating_duration_since(Instant::now()),
                seed::upload(engine, &storage, &staged),
            )
            .await
            .map_err(|_| Error::Deadline("seeding".into()))??;
            let t = Instant::now();
            let baseline = keeper_digest(engine, &storage).await?;
            tracing::debug!(ms = t.elapsed().as_millis() as u64, "took the baseline");
            storage.mark_seeded(engine).await?;
            Ok(baseline)
        }
        .await;
        match seeded {
            Ok(baseline) => Ok(StorageHandle {
                owner: request.owner.as_str().to_owned(),
                attempt: request.attempt.clone(),
                allocation: allocation.id,
                work_volume: storage.work_volume.clone(),
                metadata_volume: storage.metadata_volume.clone(),
                keeper: storage.keeper.clone(),
                work: request.work,
                metadata,
                uid: allocation.uid,
                head: Some(staged.head.clone()),
                gitlinks: tree::gitlinks(&staged.entries),
                metadata_baseline: (!request.shared).then(|| baseline.clone()),
                snapshot: request.shared.then_some(Snapshot {
                    digest: Some(baseline),
                }),
            }),
            Err(e) => {
                storage.remove(engine).await?;
                Err(e)
            }
        }
    }
    .await;
    if result.is_ok() {
        hold.keep();
    }
    result
}

/// [`prepare_with`] as runners call it.
pub async fn prepare(ctl: &Controller, request: &PrepareRequest) -> Result<StorageHandle> {
    prepare_with(ctl, request, |_| {}, &|_| {}).await
}

/// The handle of an allocation's storage, found by its labels (all three parts must carry the
/// owner's labels and agree).
pub async fn find(
    ctl: &Controller,
    owner: &Owner,
    allocation: &uuid::Uuid,
) -> Result<StorageHandle> {
    if ctl.holds_allocation(allocation) {
        return Err(Error::Invalid(
            "this process holds that storage: remove it by its handle".into(),
        ));
    }
    let report = recover::recover_one(ctl.engine(), owner, allocation).await?;
    report.ok_or_else(|| {
        Error::Invalid(format!(
            "no intact storage of owner {} with allocation {allocation}",
            owner.as_str()
        ))
    })
}

/// The keeper's answer to a digest request: the first line after the `before` it had, skipping
/// its own "ready" (which may land in its log after `before` was counted: seen under load in CI,
/// where it was taken for a failed digest).
fn digest_answer(seen: &[InitLine], before: usize) -> Option<&InitLine> {
    seen.iter()
        .skip(before)
        .find(|l| !matches!(l, InitLine::Ready { .. }))
}

/// The metadata digest as the keeper computes it on SIGUSR1 (the seeder's baseline: the same
/// code as [`metadata_digest`], without starting another container). Reads the keeper's log for
/// the digest line that follows the request.
///
/// The request is sent once the keeper said it is ready (it blocks its signals from the start
/// of main, so only a request landing before that could be dropped: the keeper is PID 1 of its
/// namespace), and again every few seconds until an answer comes. CI once saw a seeding wait out
/// its 120 s for an answer, under load, for a cause not pinned down: asking again is harmless,
/// since only the first digest after the request counts.
pub async fn keeper_digest(engine: &Engine, storage: &TaskStorage) -> Result<String> {
    const RESEND: Duration = Duration::from_secs(5);
    let mut keeper = crate::launch::Launch::adopt(storage.keeper.clone());
    let lines =
        |stderr: &str| -> Vec<InitLine> { stderr.lines().filter_map(InitLine::parse).collect() };
    let before = lines(&keeper.output(engine).await?.stderr).len();
    let asked = Instant::now();
    let mut sent: Option<Instant> = None;
    loop {
        let seen = lines(&keeper.output(engine).await?.stderr);
        let ready = seen.iter().any(|l| matches!(l, InitLine::Ready { .. }));
        if ready && sent.is_none_or(|at| at.elapsed() > RESEND) {
            keeper.kill(engine, "USR1").await?;
            sent = Some(Instant::now());
        }
        match digest_answer(&seen, before) {
            Some(InitLine::Digest { digest, .. }) => return Ok(digest.clone()),
            Some(other) => {
                return Err(Error::Internal(format!(
                    "the keeper's digest failed: {}",
                    other.to_line()
                )))
            }
            None if asked.elapsed() > Duration::from_secs(120) => {
                return Err(Error::Timeout {
                    context: "the keeper's digest".into(),
                    after: Duration::from_secs(120),
                })
            }
            None => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
}

/// The metadata volume's digest, read inside a hardened container with the volume read-only.
pub async fn metadata_digest(
    engine: &Engine,
    image_id: &str,
    storage: &TaskStorage,
) -> Result<String> {
    volume_digest(engine, image_id, storage, &storage.metadata_volume).await
}

/// The digest of one of the storage's volumes (cordon-init's `digest` role, the volume mounted
/// read-only in a hardened container; nothing on the host reads agent-writable content).
pub async fn volume_digest(
    engine: &Engine,
    image_id: &str,
    storage: &TaskStorage,
    volume: &str,
) -> Result<String> {
    let spec = storage.volume_spec(volume);
    let body = crate::profile::helper_body(
        image_id,
        &storage.allocation,
        Kind::Tool,
        vec![
            paths::INIT.to_owned(),
            "digest".to_owned(),
            "/tree".to_owned(),
        ],
        vec![crate::profile::volume_mount(&spec, "/tree", true, None)],
    );
    let mut created = Created::default();
    let record = Shared::new(&mut created);
    let result = async {
        let id =
            objects::create_container(engine, &crate::labels::tool_name(), body, &record).await?;
        let mut run = crate::launch::Launch::adopt(id);
        run.start(engine).await?;
        let code = run.wait(engine, Duration::from_secs(120)).await?;
        let output = run.output(engine).await?;
        match output.stderr.lines().next().and_then(InitLine::parse) {
            Some(InitLine::Digest { digest, .. }) if code == 0 => Ok(digest),
            _ => Err(Error::Internal(format!(
                "digest of {volume} failed (exit {code}): {}",
                output.stderr.chars().take(300).collect::<String>()
            ))),
        }
    }
    .await;
    created.remove_all(engine, Duration::from_secs(30)).await?;
    result
}

/// Remove storage by its handle: the keeper and both volumes, each only if it still carries the
/// handle's owner labels. Idempotent; names what it could not confirm removed. A shared snapshot
/// (by the handle's mark or its keeper's command) that an invocation still mounts is refused
/// (`snapshot-in-use`) and left whole: see [`remove_when_unused`].
pub async fn remove(ctl: &Controller, handle: &StorageHandle) -> Result<()> {
    remove_when_unused(ctl, handle, Duration::ZERO).await
}

/// [`remove`], waiting up to `wait` for the last invocation that mounts a shared snapshot to be
/// gone (its containers, whatever their state: a created one holds the volume too).
pub async fn remove_when_unused(
    ctl: &Controller,
    handle: &StorageHandle,
    wait: Duration,
) -> Result<()> {
    let engine = ctl.engine();
    // A snapshot by its mark or by its keeper's command: a handle whose mark was dropped still
    // waits for (or is refused over) the invocations that read it.
    let snapshot =
        handle.snapshot.is_some() || handle.kept_as_snapshot(engine).await? == Some(true);
    if snapshot {
        let until = Instant::now() + wait;
        loop {
            let mut users =
                objects::volume_users(engine, &[&handle.work_volume, &handle.metadata_volume])
                    .await?;
            users.retain(|id| !id.starts_with(handle.keeper.as_str()));
            if users.is_empty() {
                break;
            }
            if Instant::now() >= until {
                return Err(Error::Snapshot {
                    id: "snapshot-in-use",
                    reason: format!(
                        "snapshot {} is still mounted by {} container(s) after {wait:?}: {}",
                        handle.allocation,
                        users.len(),
                        crate::error::bounded_list(&users.into_iter().collect::<Vec<_>>(), 400)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let mut foreign = Vec::new();
    let mut created = Created::default();
    if let Some(c) = objects::inspect_container(engine, &handle.keeper).await? {
        let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
        if handle.carries(&labels, Kind::Keeper) {
            created.containers.push(handle.keeper.clone());
        } else {
            foreign.push(format!("container {} (labels differ)", handle.keeper));
        }
    }
    for (name, kind) in [
        (&handle.work_volume, Kind::Work),
        (&handle.metadata_volume, Kind::Metadata),
    ] {
        match objects::inspect_volume(engine, name).await? {
            Some(v) if handle.carries(&v.labels, kind) => created.volumes.push(name.clone()),
            Some(_) => foreign.push(format!("volume {name} (labels differ)")),
            None => {}
        }
    }
    created.remove_all(engine, Duration::from_secs(60)).await?;
    ctl.release_allocation(&handle.allocation);
    if foreign.is_empty() {
        Ok(())
    } else {
        Err(Error::Unreleased(foreign))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "ready" counted after the request is not the answer (it was taken for a failed digest).
    #[test]
    fn the_keepers_late_ready_line_is_not_its_digest() {
        let ready = InitLine::Ready {
            role: "keeper".into(),
        };
        let digest = InitLine::Digest {
            digest: "sha256:1".into(),
            entries: 3,
        };
        let failure = InitLine::Failure {
            reason: "no".into(),
        };
        assert_eq!(digest_answer(std::slice::from_ref(&ready), 0), None);
        let late = [ready.clone(), digest.clone()];
        assert_eq!(digest_answer(&late, 0), Some(&digest));
        assert_eq!(digest_answer(&[ready, failure.clone()], 0), Some(&failure));
        assert_eq!(digest_answer(&[digest], 1), None);
    }
}
