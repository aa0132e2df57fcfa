//! One invocation's control, input and egress volumes, and the loader: a trusted helper through
//! which the proxy's vault, the policy and the input files are written. A tmpfs volume lives only
//! while some container mounts it: the loader never runs, and what goes in through it goes in
//! once the container that reads it (the proxy, the agent) holds it mounted. All tmpfs: no host
//! path or host disk figure shows inside.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use bollard::models::{ContainerCreateBody, Mount, VolumeCreateRequest};
use bollard::query_parameters::UploadToContainerOptions;
use cordon_contract::paths;
use futures_util::StreamExt;

use crate::archive::Archive;
use crate::custody::{VaultTar, VAULT_DIR};
use crate::engine::pending::Shared;
use crate::engine::{bounded, objects, Engine, CALL_TIMEOUT};
use crate::error::Result;
use crate::labels::{Allocation, Kind};
use crate::profile::{helper_body, VolumeSpec};

/// A helper's mount of `volume` (carrying how the volume was made, so a volume that vanished is
/// never remade unlabelled).
pub fn volume_mount(volume: &VolumeSpec, target: &str, read_only: bool) -> Mount {
    crate::profile::volume_mount(volume, target, read_only, None)
}

/// One invocation's control, input and egress volumes, and the loader that holds control and
/// input mounted.
#[derive(Debug, Clone)]
pub struct InvocationVolumes {
    pub names: BTreeMap<Kind, String>,
    pub loader: String,
}

/// Root-owned, read-only files.
fn tar_of(files: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let mut archive = Archive::in_memory(0, "loader files");
    for (name, data) in files {
        archive.file(name, 0o444, data)?;
    }
    archive.finish()
}

impl InvocationVolumes {
    /// Create the volumes from `requests` (in order: each is recorded as it is made).
    pub async fn create_volumes(
        engine: &Engine,
        requests: BTreeMap<Kind, VolumeCreateRequest>,
        created: &Shared<'_>,
    ) -> Result<(BTreeMap<Kind, String>, BTreeMap<Kind, VolumeSpec>)> {
        let specs = requests
            .iter()
            .map(|(kind, request)| (*kind, VolumeSpec::from_request(request)))
            .collect();
        // Side by side: each is recorded before its request is sent.
        let made = requests.into_iter().map(|(kind, request)| async move {
            Ok::<_, crate::error::Error>((
                kind,
                objects::create_volume(engine, request, created).await?,
            ))
        });
        let names = futures_util::future::try_join_all(made).await?;
        Ok((names.into_iter().collect(), specs))
    }

    /// Create the loader that will hold control and input mounted (not started: see [`deliver`]).
    pub async fn create_loader(
        engine: &Engine,
        allocation: &Allocation,
        image_id: &str,
        specs: &BTreeMap<Kind, VolumeSpec>,
        created: &Shared<'_>,
    ) -> Result<String> {
        let mut loader = Loader::planned(allocation, image_id, specs);
        loader.make(engine, created).await?;
        Ok(loader.id()?.to_owned())
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
        deliver(
            engine,
            &loader,
            &Uploads::new(policy_bytes, input_files)?,
            Part::Everything,
        )
        .await?;
        Ok(InvocationVolumes { names, loader })
    }
}

/// The loader, which never starts: made with the agent's container when it must hold a proxy's
/// vault before the agent starts, otherwise only planned and made beside the agent's start (nothing
/// is written through it before the start's volume mounts), so the agent's create does not share
/// the engine with it.
#[derive(Debug, Clone)]
pub enum Loader {
    Planned {
        name: String,
        body: Box<ContainerCreateBody>,
    },
    Made(String),
}

impl Loader {
    /// The loader's create request: control and input mounted, and the vault when `specs` has one.
    pub fn planned(
        allocation: &Allocation,
        image_id: &str,
        specs: &BTreeMap<Kind, VolumeSpec>,
    ) -> Loader {
        let spec = |kind: Kind| specs.get(&kind).cloned().unwrap_or_default();
        let mut mounts = vec![
            volume_mount(&spec(Kind::Control), paths::CONTROL_DIR, false),
            volume_mount(&spec(Kind::Input), paths::INPUT_DIR, false),
        ];
        // The proxy's vault, written through here once the proxy holds it; the agent never
        // mounts it.
        if let Some(vault) = specs.get(&Kind::Vault) {
            mounts.push(volume_mount(vault, VAULT_DIR, false));
        }
        let body = helper_body(
            image_id,
            allocation,
            Kind::Loader,
            vec![paths::INIT.to_owned(), "keeper".to_owned()],
            mounts,
        );
        Loader::Planned {
            name: allocation.name(Kind::Loader),
            body: Box::new(body),
        }
    }

    /// Create a planned loader (recorded in `created` before the request); nothing once made.
    pub async fn make(&mut self, engine: &Engine, created: &Shared<'_>) -> Result<()> {
        if let Loader::Planned { name, body } = self {
            let id = objects::create_container(engine, name, (**body).clone(), created).await?;
            *self = Loader::Made(id);
        }
        Ok(())
    }

    /// The loader's id once made. Never its name: someone else's container may hold the name,
    /// and what goes through the loader (a vault, a policy) reaches our container or nothing.
    pub fn id(&self) -> Result<&str> {
        match self {
            Loader::Planned { name, .. } => Err(crate::error::Error::Internal(format!(
                "the loader {name} was never made"
            ))),
            Loader::Made(id) => Ok(id),
        }
    }
}

/// What goes into a loader: the proxy's vault (as the proxy starts, ending in its own marker),
/// the input files (root-owned, 0444), then the policy and the ready marker the init waits for,
/// in one tar whose last entry is the marker (the engine extracts entries in order: the policy is
/// whole before the marker exists). One upload fewer than a tar each: each is a round trip of the
/// engine's extractor, 60-150 ms here.
#[derive(Clone)]
pub struct Uploads {
    control: Vec<u8>,
    input: Option<Vec<u8>>,
    vault: Option<VaultTar>,
    /// The control and input volumes' names: a loader that never starts writes into them once
    /// the agent's container holds them mounted ([`mounted_by`]).
    held: Vec<String>,
    /// The vault volume's name: written once the proxy holds it mounted.
    vault_volume: Option<String>,
}

impl std::fmt::Debug for Uploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploads")
            .field("control (bytes)", &self.control.len())
            .field("input (bytes)", &self.input.as_ref().map(Vec::len))
            .field("vault", &self.vault)
            .finish()
    }
}

impl Uploads {
    pub fn new(policy_bytes: &[u8], input_files: &[(&str, &[u8])]) -> Result<Uploads> {
        Ok(Uploads {
            control: tar_of(&[("policy.json", policy_bytes), ("ready", b"")])?,
            input: if input_files.is_empty() {
                None
            } else {
                Some(tar_of(input_files)?)
            },
            vault: None,
            held: Vec::new(),
            vault_volume: None,
        })
    }

    /// The control and input volumes' names (see [`mounted_by`]).
    pub fn held_in(mut self, names: Vec<String>) -> Uploads {
        self.held = names;
        self
    }

    /// The control and input volumes' names.
    pub fn held(&self) -> &[String] {
        &self.held
    }

    /// The vault volume's name (see [`take_vault`]).
    pub fn vault_in(mut self, name: Option<String>) -> Uploads {
        self.vault_volume = name;
        self
    }

    /// The proxy's vault, delivered by [`deliver_vault`] as the proxy starts.
    pub fn with_vault(mut self, tar: Option<VaultTar>) -> Uploads {
        self.vault = tar;
        self
    }
}

impl Uploads {
    /// The input files replaced by `files` (the gate's probe fixture, known only once the
    /// invocation's network exists).
    pub fn replace_inputs(&mut self, files: &[(&str, &[u8])]) -> Result<()> {
        self.input = if files.is_empty() {
            None
        } else {
            Some(tar_of(files)?)
        };
        Ok(())
    }
}

/// Write `tar` into the loader's `dir`.
async fn upload(engine: &Engine, loader: &str, dir: &str, tar: Vec<u8>) -> Result<()> {
    let options = UploadToContainerOptions {
        path: dir.to_owned(),
        ..Default::default()
    };
    bounded(
        "upload to loader",
        CALL_TIMEOUT,
        engine
            .docker()
            .upload_to_container(loader, Some(options), bollard::body_full(tar.into())),
    )
    .await
}

/// Take the proxy's vault out of `uploads` (nothing when there is none) for [`deliver_vault`].
pub fn take_vault(loader: &Loader, uploads: &mut Uploads) -> Result<Option<VaultDelivery>> {
    if uploads.vault.is_none() {
        return Ok(None);
    }
    let loader = loader.id()?.to_owned();
    Ok(uploads.vault.take().map(|vault| VaultDelivery {
        loader,
        vault,
        volume: uploads.vault_volume.clone(),
    }))
}

/// The proxy's vault on its way in through the loader (which never starts), taken by
/// [`take_vault`]: written once the proxy holds the vault volume mounted, as the control dir is
/// once the agent holds it (a tmpfs volume keeps what is written only while a container mounts
/// it); the proxy waits for the vault's ready marker, the tar's last entry.
#[derive(Debug)]
pub struct VaultDelivery {
    loader: String,
    vault: VaultTar,
    volume: Option<String>,
}

impl VaultDelivery {
    /// The vault volume's name, whose mount by the proxy the delivery waits for.
    pub fn volume(&self) -> Option<&str> {
        self.volume.as_deref()
    }
}

/// Write the proxy's vault through the loader.
pub async fn deliver_vault(engine: &Engine, delivery: VaultDelivery) -> Result<()> {
    upload(
        engine,
        &delivery.loader,
        VAULT_DIR,
        delivery.vault.into_bytes(),
    )
    .await
}

/// What one delivery writes: everything (the inputs, then the policy and the ready marker), or
/// the inputs alone (the policy and the marker follow once the proxy attested, [`Part::Control`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Everything,
    Inputs,
    Control,
}

/// Start the loader (it holds control and input mounted: a tmpfs volume lives only while some
/// container mounts it) and write `part` into it, the ready marker last: a helper's loader, and
/// the benchmark's bare arm (an invocation's never starts, [`deliver_held`]). The loader runs no
/// agent code and stays until cleanup.
pub async fn deliver(engine: &Engine, loader: &str, uploads: &Uploads, part: Part) -> Result<()> {
    objects::start_container(engine, "loader", loader).await?;
    write(engine, loader, uploads, part).await
}

/// Write `part` into a loader that is never started, once the agent's container (which mounts
/// the same control and input volumes) holds them mounted ([`mounted_by`], or its start
/// returned). The engine's archive of a stopped container mounts its volumes for the upload
/// alone, and a tmpfs volume keeps what was written while another container still mounts it:
/// one container start fewer per invocation.
/// The loader is then only the engine's way in to those volumes; it never runs.
pub async fn deliver_held(
    engine: &Engine,
    loader: &str,
    uploads: &Uploads,
    part: Part,
) -> Result<()> {
    write(engine, loader, uploads, part).await
}

/// Resolves once the engine has reported `container` mounting every volume in `names` (its
/// `volume mount` events, which it sends once the volume's driver has mounted it); never, when
/// `names` is empty or the stream ends or fails first. A caller races it with that container's
/// start, whose return means the same: the engine mounts a container's volumes early in its start
/// (here about 250 ms before the start returns), and from then on they hold what is written.
/// `sent` is when the start was asked for ([`objects::events_since`]).
pub async fn mounted_by(engine: &Engine, container: &str, names: &[String], sent: SystemTime) {
    let mut left: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    if left.is_empty() {
        return std::future::pending().await;
    }
    let filters = HashMap::from([
        ("type".to_owned(), vec!["volume".to_owned()]),
        ("event".to_owned(), vec!["mount".to_owned()]),
        ("volume".to_owned(), names.to_vec()),
    ]);
    let mut events = objects::events_since(engine, filters, sent);
    while let Some(Ok(event)) = events.next().await {
        let Some(actor) = event.actor else { continue };
        let by = actor.attributes.as_ref().and_then(|a| a.get("container"));
        if by.map(String::as_str) == Some(container) {
            if let Some(id) = actor.id.as_deref() {
                left.remove(id);
            }
        }
        if left.is_empty() {
            return;
        }
    }
    std::future::pending().await
}

/// The inputs, then the policy and the ready marker (one tar, the marker last): those `part`
/// names.
async fn write(engine: &Engine, loader: &str, uploads: &Uploads, part: Part) -> Result<()> {
    if part != Part::Control {
        if let Some(input) = &uploads.input {
            upload(engine, loader, paths::INPUT_DIR, input.clone()).await?;
        }
    }
    if part == Part::Inputs {
        return Ok(());
    }
    upload(engine, loader, paths::CONTROL_DIR, uploads.control.clone()).await
}
