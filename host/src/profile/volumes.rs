//! The volumes an agent container mounts and their mounts: bounded tmpfs volumes, `nocopy`,
//! labelled with their allocation; the gitlink masks and pins.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    Mount, MountTmpfsOptions, MountType, MountVolumeOptions, VolumeCreateRequest,
};
use cordon_contract::{paths, Id};

use super::{Area, Profile, GITLINK_MASK_BYTES, GITLINK_MASK_MODE};
use crate::labels::Kind;
use crate::uids::Uid;

impl Profile {
    /// What each volume the container mounts is: its name, labels and local-driver options (the
    /// validator compares the volume's inspect with these; the mount carries them too, so a volume
    /// the engine makes on its own for a create that outlived its volume comes back labelled and
    /// bounded).
    pub fn volumes(&self) -> Vec<(Kind, VolumeSpec)> {
        let s = &self.spec.storage;
        let uid = s.storage.uid;
        let spec = |name: &str, labels, options| VolumeSpec {
            name: name.to_owned(),
            labels,
            options,
        };
        let mut volumes = vec![
            (
                Kind::Work,
                spec(
                    &s.work_volume,
                    s.storage.labels(Kind::Work),
                    tmpfs_volume_options(s.work, 0o755, uid),
                ),
            ),
            (
                Kind::Metadata,
                spec(
                    &s.metadata_volume,
                    s.storage.labels(Kind::Metadata),
                    tmpfs_volume_options(s.metadata, 0o755, uid),
                ),
            ),
            (
                Kind::Control,
                spec(
                    &s.control_volume,
                    self.spec.allocation.labels(Kind::Control),
                    root_tmpfs_volume_options(CONTROL_AREA),
                ),
            ),
            (
                Kind::Input,
                spec(
                    &s.input_volume,
                    self.spec.allocation.labels(Kind::Input),
                    root_tmpfs_volume_options(INPUT_AREA),
                ),
            ),
            (
                Kind::Egress,
                spec(
                    &s.egress_volume,
                    self.spec.allocation.labels(Kind::Egress),
                    // The agent's, as before (its mount is read-only: `egress-readonly`); the proxy,
                    // its own uid in the agent's group, makes its socket here. The agent's uid,
                    // not the storage's: over a shared snapshot the two differ.
                    tmpfs_volume_options(EGRESS_AREA, 0o770, self.spec.allocation.uid),
                ),
            ),
        ];
        // A command has no way out: no egress dir.
        if self.command_role().is_some() {
            volumes.retain(|(kind, _)| *kind != Kind::Egress);
        }
        if self.offers_commands() {
            volumes.push((Kind::Commands, commands_volume(&self.spec.allocation)));
        }
        volumes
    }

    /// The read-only invocation dirs the container mounts (volume, path, protection): control
    /// and input, the egress dir for the agent, and the commands dir when it offers commands.
    pub fn invocation_dirs(&self) -> Vec<(Kind, &'static str, Id)> {
        let mut dirs = vec![
            (Kind::Control, paths::CONTROL_DIR, Id::ControlReadonly),
            (Kind::Input, paths::INPUT_DIR, Id::InputReadonly),
        ];
        if self.command_role().is_none() {
            dirs.push((Kind::Egress, paths::EGRESS_DIR, Id::EgressReadonly));
        }
        if self.offers_commands() {
            dirs.push((
                Kind::Commands,
                cordon_contract::command::SOCKET_DIR,
                Id::CommandsReadonly,
            ));
        }
        dirs
    }

    /// Every mount of `HostConfig.Mounts`, in order, with the protection each one carries.
    pub fn mounts(&self) -> Vec<(Mount, Id)> {
        let volumes: BTreeMap<Kind, VolumeSpec> = self.volumes().into_iter().collect();
        let volume = |kind: Kind, target: &str, read_only: bool| {
            let spec = volumes.get(&kind).cloned().unwrap_or_default();
            volume_mount(&spec, target, read_only, None)
        };
        // The work volume is writable in the phases that write it, and under a command that
        // writes /work; under an overlay it is the overlay's read-only lower layer.
        let work_writable = self.work_writable() && self.overlay().is_none();
        let mut mounts = vec![
            (
                volume(Kind::Work, paths::WORK, !work_writable),
                Id::WorkReadonly,
            ),
            (
                volume(Kind::Metadata, paths::METADATA, true),
                Id::MetadataReadonly,
            ),
        ];
        for (kind, path, protection) in self.invocation_dirs() {
            mounts.push((volume(kind, path, true), protection));
        }
        let work = volumes.get(&Kind::Work).cloned().unwrap_or_default();
        for pin in self.pin_mounts() {
            mounts.push((
                volume_mount(
                    &work,
                    &format!("{}/{pin}", paths::WORK),
                    false,
                    Some(pin.clone()),
                ),
                Id::PinnedDirs,
            ));
        }
        for gitlink in &self.spec.gitlinks {
            mounts.push((
                Mount {
                    typ: Some(MountType::TMPFS),
                    target: Some(format!("{}/{gitlink}", paths::WORK)),
                    read_only: Some(true),
                    tmpfs_options: Some(MountTmpfsOptions {
                        size_bytes: Some(GITLINK_MASK_BYTES),
                        mode: Some(GITLINK_MASK_MODE),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Id::GitlinkMasks,
            ));
        }
        mounts
    }
}

/// A volume as cordon makes it: its name, labels and local-driver options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeSpec {
    pub name: String,
    pub labels: HashMap<String, String>,
    pub options: HashMap<String, String>,
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
    /// The create request of this volume.
    pub fn request(&self) -> VolumeCreateRequest {
        VolumeCreateRequest {
            name: Some(self.name.clone()),
            driver: Some("local".to_owned()),
            driver_opts: Some(self.options.clone()),
            labels: Some(self.labels.clone()),
            ..Default::default()
        }
    }
}

/// A volume mount, always `nocopy` (a copy-up from the image would replace the volume root's
/// owner and mode). It carries the volume's labels and driver options: should the engine make the
/// volume itself (a create that completes after cleanup removed the volume: the engine makes any
/// missing named volume), it is made labelled and bounded like the original, so recovery and the
/// leftover checks see it.
pub fn volume_mount(
    volume: &VolumeSpec,
    target: &str,
    read_only: bool,
    subpath: Option<String>,
) -> Mount {
    Mount {
        typ: Some(MountType::VOLUME),
        source: Some(volume.name.clone()),
        target: Some(target.to_owned()),
        read_only: Some(read_only),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(true),
            subpath,
            labels: Some(volume.labels.clone()),
            driver_config: Some(bollard::models::MountVolumeOptionsDriverConfig {
                name: Some("local".to_owned()),
                options: Some(volume.options.clone()),
            }),
        }),
        ..Default::default()
    }
}

/// Local-driver options of a bounded tmpfs volume owned by `uid`.
pub fn tmpfs_volume_options(area: Area, mode: u32, uid: Uid) -> HashMap<String, String> {
    tmpfs_options_with(area, &format!("uid={uid},gid={uid},mode={mode:04o}"))
}

/// Local-driver options of a bounded tmpfs volume whose root belongs to root (control, input: the
/// agent can read them and never change them, not even their mode).
pub fn root_tmpfs_volume_options(area: Area) -> HashMap<String, String> {
    tmpfs_options_with(area, "mode=0755")
}

fn tmpfs_options_with(area: Area, owner: &str) -> HashMap<String, String> {
    HashMap::from([
        ("type".to_owned(), "tmpfs".to_owned()),
        ("device".to_owned(), "tmpfs".to_owned()),
        (
            "o".to_owned(),
            format!(
                "size={},nr_inodes={},{owner},nosuid,nodev,noexec",
                area.bytes, area.inodes
            ),
        ),
    ])
}

/// The approved commands' socket dir: the relay's socket and nothing else.
pub const COMMANDS_AREA: Area = Area {
    bytes: 256 * 1024,
    inodes: 16,
};

/// The commands volume of an invocation's `allocation`: the relay's, writable there and
/// read-only in the agent (`commands-readonly`).
pub fn commands_volume(allocation: &crate::labels::Allocation) -> VolumeSpec {
    VolumeSpec {
        name: allocation.name(Kind::Commands),
        labels: allocation.labels(Kind::Commands),
        options: tmpfs_volume_options(COMMANDS_AREA, 0o700, allocation.uid),
    }
}

/// The egress socket dir: a small tmpfs volume, read-only to the agent.
pub const EGRESS_AREA: Area = Area {
    bytes: 1024 * 1024,
    inodes: 64,
};
/// The control dir (the policy, at most 64 KiB).
pub const CONTROL_AREA: Area = Area {
    bytes: 256 * 1024,
    inodes: 16,
};
/// The input dir (at most [`MAX_INPUT_FILES`] files, [`MAX_INPUT_BYTES`] in all).
pub const INPUT_AREA: Area = Area {
    bytes: 2 * 1024 * 1024,
    inodes: 32,
};

/// The proxy's vault: a small tmpfs volume of its own uid, mode 0500, that the agent never
/// mounts (only the loader, to write it, and the proxy, read-only).
pub const VAULT_AREA: Area = Area {
    bytes: 256 * 1024,
    inodes: 16,
};

impl Profile {
    /// The proxy's vault, when it terminates a vendor host.
    pub fn vault_volume(&self) -> Option<VolumeSpec> {
        self.egress()?.terminate.as_ref()?;
        let allocation = &self.spec.allocation;
        Some(VolumeSpec {
            name: allocation.name(Kind::Vault),
            labels: allocation.labels(Kind::Vault),
            options: tmpfs_options_with(
                VAULT_AREA,
                &format!("uid={0},gid={0},mode=0500", allocation.uid.proxy()),
            ),
        })
    }
}

/// Create requests for one profile's control, input and egress volumes, and the proxy's vault
/// when it has one.
pub fn invocation_volume_requests(profile: &Profile) -> BTreeMap<Kind, VolumeCreateRequest> {
    profile
        .volumes()
        .into_iter()
        .filter(|(kind, _)| matches!(kind, Kind::Control | Kind::Input | Kind::Egress))
        .chain(profile.vault_volume().map(|v| (Kind::Vault, v)))
        .map(|(kind, spec)| (kind, spec.request()))
        .collect()
}
