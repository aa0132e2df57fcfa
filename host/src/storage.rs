//! Storage an agent container mounts.
//!
//! - Task storage: the work and metadata volumes (bounded tmpfs, owned by the agent, nosuid, nodev,
//!   noexec), held by a keeper container (cordon-init in keeper role) because a tmpfs volume lives
//!   only while some container mounts it. The keeper mounts the metadata volume at /work/.git, so
//!   the mountpoint exists when read-only agent containers mount it.
//! - Invocation volumes: control (the policy), input, and the egress socket dir, all tmpfs (no host
//!   path or host disk figure shows inside). Control and input are written into a loader container
//!   that holds them mounted (a tmpfs volume lives only while some container mounts it) until the
//!   invocation's cleanup removes it.

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, Mount, VolumeCreateRequest};
use bollard::query_parameters::{CreateContainerOptions, UploadToContainerOptions};
use cordon_contract::paths;

use crate::cleanup::{Created, ObjectKind, Shared};
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind};
use crate::profile::{hardened_body, tmpfs_volume_options, Area, Hardened, StorageRef, VolumeSpec};

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

fn volume_mount(volume: &VolumeSpec, target: &str, read_only: bool) -> Mount {
    crate::profile::volume_mount(volume, target, read_only, None)
}

impl VolumeSpec {
    /// What a create request makes (the gate edits requests to make breach cases).
    pub fn from_request(request: &VolumeCreateRequest) -> VolumeSpec {
        VolumeSpec {
            name: request.name.clone().unwrap_or_default(),
            labels: request.labels.clone().unwrap_or_default(),
            options: request.driver_opts.clone().unwrap_or_default(),
        }
    }
}

/// The create request of a trusted helper (keeper, loader, tool) of `allocation`: the agent's
/// hardening, the allocation's uid, no capability at all, small limits.
pub fn helper_body(
    image_id: &str,
    allocation: &Allocation,
    kind: Kind,
    entrypoint: Vec<String>,
    mounts: Vec<Mount>,
) -> ContainerCreateBody {
    hardened_body(Hardened {
        image_id,
        labels: allocation.labels(kind),
        user: format!("{0}:{0}", allocation.uid),
        cap_add: Vec::new(),
        entrypoint,
        env: vec!["PATH=/usr/bin:/bin".to_owned()],
        mounts,
        pids: 16,
        memory_bytes: 64 * 1024 * 1024,
        // One CPU: helpers run only cordon's own bounded jobs, and a digest of 5,000 files at a
        // tenth of a CPU took 0.8 s instead of 0.1 s.
        nano_cpus: 1_000_000_000,
        log_max_size: "64k",
    })
}

pub(crate) async fn create_volume(
    engine: &Engine,
    request: VolumeCreateRequest,
    created: &mut Created,
) -> Result<String> {
    create_volume_shared(engine, request, &Shared::new(created)).await
}

/// [`create_volume`] into a record other creates share.
pub(crate) async fn create_volume_shared(
    engine: &Engine,
    request: VolumeCreateRequest,
    created: &Shared<'_>,
) -> Result<String> {
    let name = request.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(Error::Internal("volume request without a name".into()));
    }
    let labels = request.labels.clone().unwrap_or_default();
    created.with(|c| c.begin(ObjectKind::Volume, &name, &labels));
    let result = bounded(
        "create volume",
        CALL_TIMEOUT,
        engine.docker().create_volume(request),
    )
    .await;
    answered(created, ObjectKind::Volume, &name, result.map(|v| v.name))
}

/// Record a create's answer; an error the engine did not answer leaves the object pending.
fn answered(
    created: &Shared<'_>,
    kind: ObjectKind,
    name: &str,
    result: Result<String>,
) -> Result<String> {
    match result {
        Ok(id) => {
            created.with(|c| c.answered(kind, name, Some(&id)));
            Ok(id)
        }
        Err(e) => {
            if crate::cleanup::engine_answered(&e) {
                created.with(|c| c.answered(kind, name, None));
            }
            Err(e)
        }
    }
}

pub(crate) async fn create_container(
    engine: &Engine,
    name: &str,
    body: ContainerCreateBody,
    created: &mut Created,
) -> Result<String> {
    create_container_shared(engine, name, body, &Shared::new(created)).await
}

/// [`create_container`] into a record other creates share.
pub(crate) async fn create_container_shared(
    engine: &Engine,
    name: &str,
    body: ContainerCreateBody,
    created: &Shared<'_>,
) -> Result<String> {
    let options = CreateContainerOptions {
        name: Some(name.to_owned()),
        ..Default::default()
    };
    let labels = body.labels.clone().unwrap_or_default();
    created.with(|c| c.begin(ObjectKind::Container, name, &labels));
    let result = bounded(
        "create container",
        CALL_TIMEOUT,
        engine.docker().create_container(Some(options), body),
    )
    .await;
    answered(created, ObjectKind::Container, name, result.map(|r| r.id))
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
            created,
        }
    }

    /// As [`TaskStorage::create_held_at`], and right after the first create, check that nothing
    /// but that object carries the allocation id; if anything does, remove what was made and
    /// refuse (the check before the create and the create are not atomic).
    pub async fn create_checked(
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
            metadata_at,
            true,
        )
        .await
    }

    /// The keeper's name while its storage is being seeded: recovery hands back only storage
    /// whose keeper carries the final name, given once seeding and the baseline succeeded.
    pub fn seeding_name(allocation: &Allocation) -> String {
        format!("cordon-seeding-{}", allocation.id)
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
        let options = bollard::query_parameters::RenameContainerOptions {
            name: self.allocation.name(Kind::Keeper),
        };
        bounded(
            "rename keeper",
            CALL_TIMEOUT,
            engine.docker().rename_container(&self.keeper, options),
        )
        .await
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
            metadata_at,
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
        metadata_at: &str,
        check_unique: bool,
    ) -> Result<TaskStorage> {
        let mut created = Created::default();
        let result = async {
            let work_spec = VolumeSpec::from_request(&work.0);
            let metadata_spec = VolumeSpec::from_request(&metadata.0);
            let work_volume = create_volume(engine, work.0, &mut created).await?;
            if check_unique {
                let holders = crate::task::objects_with_allocation(engine, &allocation.id).await?;
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
            let sharing = crate::uids::others(
                &crate::uids::holders(engine, allocation.uid).await?,
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
            let metadata_volume = create_volume(engine, metadata.0, &mut created).await?;
            let keeper_name = if check_unique {
                TaskStorage::seeding_name(allocation)
            } else {
                allocation.name(Kind::Keeper)
            };
            let body = helper_body(
                image_id,
                allocation,
                Kind::Keeper,
                vec![paths::INIT.to_owned(), "keeper".to_owned()],
                vec![
                    volume_mount(&work_spec, paths::WORK, false),
                    volume_mount(&metadata_spec, metadata_at, false),
                ],
            );
            let keeper = create_container(engine, &keeper_name, body, &mut created).await?;
            bounded(
                "start keeper",
                CALL_TIMEOUT,
                engine.docker().start_container(&keeper, None),
            )
            .await?;
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

/// One invocation's control, input and egress volumes, and the loader that holds control and
/// input mounted.
#[derive(Debug, Clone)]
pub struct InvocationVolumes {
    pub names: BTreeMap<Kind, String>,
    pub loader: String,
}

fn tar_of(files: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o444);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, name, *data)
            .map_err(|e| Error::io(format!("tar entry {name}"), e))?;
    }
    builder.into_inner().map_err(|e| Error::io("tar", e))
}

impl InvocationVolumes {
    /// Create the volumes from `requests` (in order: each is recorded as it is made).
    pub async fn create_volumes(
        engine: &Engine,
        requests: BTreeMap<Kind, VolumeCreateRequest>,
        created: &Shared<'_>,
    ) -> Result<(BTreeMap<Kind, String>, BTreeMap<Kind, VolumeSpec>)> {
        let mut names = BTreeMap::new();
        let mut specs = BTreeMap::new();
        for (kind, request) in requests {
            specs.insert(kind, VolumeSpec::from_request(&request));
            names.insert(kind, create_volume_shared(engine, request, created).await?);
        }
        Ok((names, specs))
    }

    /// Create the loader that will hold control and input mounted (not started: see [`deliver`]).
    pub async fn create_loader(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        specs: &BTreeMap<Kind, VolumeSpec>,
        created: &Shared<'_>,
    ) -> Result<String> {
        let spec = |kind: Kind| specs.get(&kind).cloned().unwrap_or_default();
        let body = helper_body(
            image_id,
            allocation,
            Kind::Loader,
            vec![paths::INIT.to_owned(), "keeper".to_owned()],
            vec![
                volume_mount(&spec(Kind::Control), paths::CONTROL_DIR, false),
                volume_mount(&spec(Kind::Input), paths::INPUT_DIR, false),
            ],
        );
        create_container_shared(engine, &allocation.name(Kind::Loader), body, created).await
    }

    /// [`create_volumes`](Self::create_volumes)' loader, created and delivered: the control dir
    /// is ready before this returns (the benchmark's bare arm).
    #[allow(clippy::too_many_arguments)]
    pub async fn load(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        names: BTreeMap<Kind, String>,
        specs: &BTreeMap<Kind, VolumeSpec>,
        policy_bytes: &[u8],
        input_files: &[(&str, &[u8])],
        created: &Shared<'_>,
    ) -> Result<InvocationVolumes> {
        let loader = Self::create_loader(engine, allocation, image_id, specs, created).await?;
        deliver(engine, &loader, &Uploads::new(policy_bytes, input_files)?).await?;
        Ok(InvocationVolumes { names, loader })
    }
}

/// What goes into a loader: the policy, the input files (root-owned, 0444), then the ready
/// marker the init waits for.
#[derive(Debug, Clone)]
pub struct Uploads {
    control: Vec<u8>,
    input: Option<Vec<u8>>,
    ready: Vec<u8>,
}

impl Uploads {
    pub fn new(policy_bytes: &[u8], input_files: &[(&str, &[u8])]) -> Result<Uploads> {
        Ok(Uploads {
            control: tar_of(&[("policy.json", policy_bytes)])?,
            input: if input_files.is_empty() {
                None
            } else {
                Some(tar_of(input_files)?)
            },
            ready: tar_of(&[("ready", b"")])?,
        })
    }
}

/// Start the loader (it holds control and input mounted: a tmpfs volume lives only while some
/// container mounts it, and the agent container may start at the same time) and write into it,
/// the ready marker last. The loader runs no agent code and stays until cleanup.
pub async fn deliver(engine: &Engine, loader: &str, uploads: &Uploads) -> Result<()> {
    bounded(
        "start loader",
        CALL_TIMEOUT,
        engine.docker().start_container(loader, None),
    )
    .await?;
    let upload = |dir: &str, tar: Vec<u8>| {
        let options = UploadToContainerOptions {
            path: dir.to_owned(),
            ..Default::default()
        };
        async move {
            bounded(
                "upload to loader",
                CALL_TIMEOUT,
                engine.docker().upload_to_container(
                    loader,
                    Some(options),
                    bollard::body_full(tar.into()),
                ),
            )
            .await
        }
    };
    upload(paths::CONTROL_DIR, uploads.control.clone()).await?;
    if let Some(input) = &uploads.input {
        upload(paths::INPUT_DIR, input.clone()).await?;
    }
    upload(paths::CONTROL_DIR, uploads.ready.clone()).await
}
