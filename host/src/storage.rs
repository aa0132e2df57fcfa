//! Task storage: the work and metadata volumes (bounded tmpfs, owned by the allocation's uid,
//! nosuid, nodev, noexec), held by a keeper container (cordon-init in keeper role) because a tmpfs
//! volume lives only while some container mounts it. The keeper mounts the metadata volume at
//! /work/.git, so the mountpoint exists when read-only agent containers mount it. An invocation's
//! own volumes are [`crate::launch::volumes`].

use std::time::Duration;

use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::UploadToContainerOptions;
use cordon_contract::paths;

use crate::engine::objects::{self, Labelled};
use crate::engine::pending::{Created, Shared};
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind, Owner};
use crate::launch::volumes::volume_mount;
use crate::profile::{helper_body, tmpfs_volume_options, Area, StorageRef, VolumeSpec};
use crate::uids::{Uid, UidRange};

/// Default work area (seeds: 512 MiB, 131,072 entries).
pub const DEFAULT_WORK: Area = Area {
    bytes: 512 * 1024 * 1024,
    inodes: 131_072,
};
/// Default metadata area.
pub const DEFAULT_METADATA: Area = Area {
    bytes: 256 * 1024 * 1024,
    inodes: 65_536,
};

/// A uid for a new storage allocation: in `range`, known to no host account, held by no live
/// cordon object (see [`crate::uids`]).
pub async fn pick_uid(engine: &Engine, range: &UidRange) -> Result<Uid> {
    let used = objects::live_uids(engine).await?;
    crate::uids::pick(range, &used)
}

/// A new allocation of `owner` with a uid picked from the default range (the gate, the
/// benchmarks, doctor and tests; `task::prepare` picks from the range its request names).
pub async fn new_allocation(engine: &Engine, owner: &Owner, attempt: &str) -> Result<Allocation> {
    let uid = pick_uid(engine, &UidRange::default()).await?;
    Allocation::new(owner, attempt, uid)
}

/// The keeper's command: it digests `digest_root` on SIGUSR1 (recovery reads it back to tell a
/// shared snapshot, whose keeper digests /work, from a task's storage).
pub fn keeper_command(digest_root: &str) -> Vec<String> {
    let mut command = vec![paths::INIT.to_owned(), "keeper".to_owned()];
    if digest_root != paths::METADATA {
        command.push(digest_root.to_owned());
    }
    command
}

/// A task's work and metadata volumes and the keeper that holds them.
#[derive(Debug, Clone)]
pub struct TaskStorage {
    pub allocation: Allocation,
    pub work_volume: String,
    pub work: Area,
    pub metadata_volume: String,
    pub metadata: Area,
    pub keeper: String,
    /// A shared snapshot's recorded digest (see [`StorageRef::snapshot`]).
    pub snapshot: Option<String>,
    created: Created,
}

/// Volume create requests for a task's storage (the gate mutates them to make breach cases).
pub fn task_volume_requests(
    allocation: &Allocation,
    work: Area,
    metadata: Area,
) -> (VolumeCreateRequest, VolumeCreateRequest) {
    let request = |kind: Kind, area: Area| {
        VolumeSpec {
            name: allocation.name(kind),
            labels: allocation.labels(kind),
            options: tmpfs_volume_options(area, 0o755, allocation.uid),
        }
        .request()
    };
    (request(Kind::Work, work), request(Kind::Metadata, metadata))
}

impl TaskStorage {
    /// Storage made elsewhere (a handle): removal goes by these ids.
    pub fn from_parts(
        allocation: Allocation,
        work_volume: String,
        work: Area,
        metadata_volume: String,
        metadata: Area,
        keeper: String,
    ) -> TaskStorage {
        let created = Created {
            containers: vec![keeper.clone()],
            volumes: vec![work_volume.clone(), metadata_volume.clone()],
            ..Created::default()
        };
        TaskStorage {
            allocation,
            work_volume,
            work,
            metadata_volume,
            metadata,
            keeper,
            snapshot: None,
            created,
        }
    }

    /// As [`TaskStorage::create_held_at`], and right after the first create, check that nothing
    /// but that object carries the allocation id; if anything does, remove what was made and
    /// refuse (the check before the create and the create are not atomic). The keeper digests
    /// `digest_root` when asked: the metadata for a task's storage, the whole of /work for a
    /// shared snapshot.
    pub async fn create_checked(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        work: (VolumeCreateRequest, Area),
        metadata: (VolumeCreateRequest, Area),
        metadata_at: &str,
        digest_root: &str,
    ) -> Result<TaskStorage> {
        TaskStorage::create_inner(
            engine,
            allocation,
            image_id,
            work,
            metadata,
            (metadata_at, digest_root),
            true,
        )
        .await
    }

    /// How a volume of this storage was made (a helper mounting it carries it, so a volume that
    /// vanished is never remade unlabelled).
    pub fn volume_spec(&self, name: &str) -> VolumeSpec {
        let (kind, area) = if name == self.metadata_volume {
            (Kind::Metadata, self.metadata)
        } else {
            (Kind::Work, self.work)
        };
        VolumeSpec {
            name: name.to_owned(),
            labels: self.allocation.labels(kind),
            options: tmpfs_volume_options(area, 0o755, self.allocation.uid),
        }
    }

    /// This storage, removed together with more objects of its owner (the gate's decoys).
    pub fn with_extra(mut self, extra: Created) -> TaskStorage {
        self.created.extend(extra);
        self
    }

    /// Give the keeper its final name: the storage is complete.
    pub async fn mark_seeded(&self, engine: &Engine) -> Result<()> {
        objects::rename_container(engine, &self.keeper, &self.allocation.name(Kind::Keeper)).await
    }

    /// What an agent container of `invocation` mounts: this storage, and the invocation's own
    /// control, input and egress volumes (named after the invocation's allocation).
    pub fn mounts_for(&self, invocation: &Allocation) -> StorageRef {
        StorageRef {
            storage: self.allocation.clone(),
            work_volume: self.work_volume.clone(),
            work: self.work,
            metadata_volume: self.metadata_volume.clone(),
            metadata: self.metadata,
            control_volume: invocation.name(Kind::Control),
            input_volume: invocation.name(Kind::Input),
            egress_volume: invocation.name(Kind::Egress),
            snapshot: self.snapshot.clone(),
        }
    }

    /// Create both volumes and start the keeper. On any failure everything made is removed.
    pub async fn create(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        work: Area,
        metadata: Area,
    ) -> Result<TaskStorage> {
        let (w, m) = task_volume_requests(allocation, work, metadata);
        TaskStorage::create_from(engine, allocation, image_id, (w, work), (m, metadata)).await
    }

    /// Create from explicit volume requests (the areas are what the profile will expect).
    pub async fn create_from(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        work: (VolumeCreateRequest, Area),
        metadata: (VolumeCreateRequest, Area),
    ) -> Result<TaskStorage> {
        TaskStorage::create_held_at(
            engine,
            allocation,
            image_id,
            work,
            metadata,
            paths::METADATA,
        )
        .await
    }

    /// As [`TaskStorage::create_from`], with the keeper holding the metadata volume at
    /// `metadata_at` (the gate's "metadata inside the work tree" case holds it elsewhere, so the
    /// work tree's own `.git` is a plain directory).
    pub async fn create_held_at(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        work: (VolumeCreateRequest, Area),
        metadata: (VolumeCreateRequest, Area),
        metadata_at: &str,
    ) -> Result<TaskStorage> {
        TaskStorage::create_inner(
            engine,
            allocation,
            image_id,
            work,
            metadata,
            (metadata_at, paths::METADATA),
            false,
        )
        .await
    }

    async fn create_inner(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        work: (VolumeCreateRequest, Area),
        metadata: (VolumeCreateRequest, Area),
        (metadata_at, digest_root): (&str, &str),
        check_unique: bool,
    ) -> Result<TaskStorage> {
        let mut created = Created::default();
        let record = Shared::new(&mut created);
        let result = async {
            let work_spec = VolumeSpec::from_request(&work.0);
            let metadata_spec = VolumeSpec::from_request(&metadata.0);
            let work_volume = objects::create_volume(engine, work.0, &record).await?;
            if check_unique {
                let holders: Vec<String> = objects::with_allocation(engine, &allocation.id)
                    .await?
                    .iter()
                    .map(Labelled::what)
                    .collect();
                let ours = format!("volume {work_volume}");
                if holders.iter().any(|h| *h != ours) {
                    return Err(Error::AllocationInUse(format!(
                        "{} (also on {})",
                        allocation.id,
                        holders.join(", ")
                    )));
                }
            }
            // The uid was free when it was picked; the pick and this create are not atomic.
            let sharing = crate::labels::others(
                &objects::uid_holders(engine, allocation.uid).await?,
                &allocation.id,
            );
            if !sharing.is_empty() {
                return Err(Error::Uid {
                    id: "uid-in-use",
                    reason: format!(
                        "uid {} of allocation {} is also held by {}",
                        allocation.uid,
                        allocation.id,
                        crate::error::bounded_list(&sharing, 400)
                    ),
                });
            }
            let metadata_volume = objects::create_volume(engine, metadata.0, &record).await?;
            let keeper_name = if check_unique {
                allocation.seeding_keeper_name()
            } else {
                allocation.name(Kind::Keeper)
            };
            let body = helper_body(
                image_id,
                allocation,
                Kind::Keeper,
                keeper_command(digest_root),
                vec![
                    volume_mount(&work_spec, paths::WORK, false),
                    volume_mount(&metadata_spec, metadata_at, false),
                ],
            );
            let keeper = objects::create_container(engine, &keeper_name, body, &record).await?;
            objects::start_container(engine, "keeper", &keeper).await?;
            Ok::<_, Error>((work_volume, metadata_volume, keeper))
        }
        .await;
        match result {
            Ok((work_volume, metadata_volume, keeper)) => Ok(TaskStorage {
                allocation: allocation.clone(),
                work_volume,
                work: work.1,
                metadata_volume,
                metadata: metadata.1,
                keeper,
                snapshot: None,
                created,
            }),
            Err(e) => {
                created.remove_all(engine, Duration::from_secs(10)).await?;
                Err(e)
            }
        }
    }

    /// Extract a tar into the running keeper at `dir` (the work tree, or /work/.git for the
    /// metadata): Docker applies the tar headers' ownership and modes.
    pub async fn upload(&self, engine: &Engine, dir: &str, tar: Vec<u8>) -> Result<()> {
        let options = UploadToContainerOptions {
            path: dir.to_owned(),
            ..Default::default()
        };
        bounded(
            "upload to keeper",
            CALL_TIMEOUT,
            engine.docker().upload_to_container(
                &self.keeper,
                Some(options),
                bollard::body_full(tar.into()),
            ),
        )
        .await
    }

    /// Stop the keeper and remove both volumes.
    pub async fn remove(&self, engine: &Engine) -> Result<()> {
        self.created
            .remove_all(engine, Duration::from_secs(60))
            .await
    }
}
