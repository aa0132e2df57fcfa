//! The agent container profile: an immutable value built from (phase, vendor, limits, storage),
//! and the one place that turns it into a create request, volume specifications and the init's
//! policy. The validator compares the engine's read-back with what this module produces, so the
//! create request and the expectation cannot drift apart.
//!
//! - `spec.rs`: what a profile is built from, and the checks that freeze it;
//! - `body.rs`: the hardened create request every cordon container shares, and the agent's;
//! - `helper.rs`: the helpers' and the tree reader's create requests;
//! - `volumes.rs`: the volumes and mounts, and their tmpfs options;
//! - `policy.rs`: the policy the init enforces.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::ContainerCreateBody;
use cordon_contract::command::Writes;
use cordon_contract::{paths, Id, Phase, Policy, Vendor};

use crate::engine::{ApiVersion, SUBPATH_API};
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind};

mod body;
pub mod command;
pub mod egress;
mod helper;
mod policy;
mod spec;
mod volumes;

pub use body::{hardened_body, masked_paths, start_capability_names, Hardened};
pub use command::{CommandRole, Role};
pub use egress::EgressSpec;
pub use helper::{helper_body, reader_body};
pub use spec::{
    mountable, ProfileSpec, ENV_ALLOWED_EXTRA, MAX_INPUT_BYTES, MAX_INPUT_FILES, SCHEMA_FILE,
};
pub use volumes::{
    commands_volume, invocation_volume_requests, root_tmpfs_volume_options, tmpfs_volume_options,
    volume_mount, VolumeSpec, COMMANDS_AREA, CONTROL_AREA, EGRESS_AREA, INPUT_AREA,
};

/// A bounded area: exact byte and inode totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Area {
    pub bytes: u64,
    pub inodes: u64,
}

/// The seeder checks a tree against an area's bytes and inodes.
impl From<Area> for cordon_repo::tree::Needs {
    fn from(area: Area) -> Self {
        cordon_repo::tree::Needs {
            bytes: area.bytes,
            inodes: area.inodes,
        }
    }
}

impl Area {
    fn check(self, name: &str) -> Result<()> {
        // tmpfs rounds sizes up to whole pages; exact statfs totals need page-aligned sizes.
        if self.bytes == 0 || !self.bytes.is_multiple_of(4096) || self.inodes < 2 {
            return Err(Error::Invalid(format!(
                "{name}: {} bytes / {} inodes (bytes must be a positive multiple of 4096, inodes at least 2)",
                self.bytes, self.inodes
            )));
        }
        Ok(())
    }
}

/// Resource limits of one agent container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    pub pids: u32,
    pub memory_bytes: u64,
    /// CPU limit in units of 1e-9 CPUs (Docker's NanoCpus).
    pub nano_cpus: u64,
    pub tmp: Area,
    pub home: Area,
    pub output: Area,
    pub codex_home: Area,
    pub deadline: Duration,
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        const MIB: u64 = 1024 * 1024;
        Limits {
            pids: 512,
            memory_bytes: 2048 * MIB,
            nano_cpus: 1_000_000_000,
            tmp: Area {
                bytes: 256 * MIB,
                inodes: 16_384,
            },
            home: Area {
                bytes: 256 * MIB,
                inodes: 16_384,
            },
            output: Area {
                bytes: 16 * MIB,
                inodes: 1_024,
            },
            codex_home: Area {
                bytes: 64 * MIB,
                inodes: 4_096,
            },
            deadline: Duration::from_secs(30 * 60),
            grace: Duration::from_secs(2),
        }
    }
}

/// The volumes one agent container mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRef {
    /// The task storage's allocation: its labels are on the work and metadata volumes, and its uid
    /// is the one every container over this storage runs as.
    pub storage: Allocation,
    pub work_volume: String,
    pub work: Area,
    pub metadata_volume: String,
    pub metadata: Area,
    pub control_volume: String,
    pub input_volume: String,
    pub egress_volume: String,
    /// A shared snapshot's recorded digest: the storage is read by many read-only invocations,
    /// each as a uid of its own (not the storage's), and each init checks the tree against this.
    /// `None` for an invocation's own storage.
    pub snapshot: Option<String>,
}

/// The CFS period Docker uses for NanoCpus.
pub const CFS_PERIOD_US: u64 = 100_000;
/// The Landlock ABI profiles require unless told otherwise (6: adds signal and abstract-socket
/// scoping; Linux 6.12).
pub const DEFAULT_LANDLOCK_ABI: u8 = 6;
/// Size and mode of a gitlink mask.
pub const GITLINK_MASK_BYTES: i64 = 4096;
pub const GITLINK_MASK_MODE: i64 = 0o555;
/// Container logs are bounded by the engine too.
pub const LOG_MAX_SIZE: &str = "1m";

/// An immutable, checked profile.
#[derive(Debug, Clone)]
pub struct Profile {
    spec: ProfileSpec,
    role: Role,
    /// The agent is offered approved commands: the relay's socket dir is mounted read-only.
    commands: bool,
}

/// What one launch sends to the engine and writes into the control dir.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub name: String,
    pub create: ContainerCreateBody,
    pub policy: Policy,
}

impl Profile {
    pub fn phase(&self) -> Phase {
        self.spec.phase
    }
    pub fn vendor(&self) -> Vendor {
        self.spec.vendor
    }
    pub fn image_id(&self) -> &str {
        &self.spec.image_id
    }
    pub fn allocation(&self) -> &Allocation {
        &self.spec.allocation
    }
    pub fn limits(&self) -> &Limits {
        &self.spec.limits
    }
    pub fn storage(&self) -> &StorageRef {
        &self.spec.storage
    }
    pub fn spec(&self) -> &ProfileSpec {
        &self.spec
    }
    pub fn input_files(&self) -> &[(String, Vec<u8>)] {
        &self.spec.input_files
    }
    pub fn egress(&self) -> Option<&EgressSpec> {
        self.spec.egress.as_ref()
    }
    /// The sentinel the agent holds in place of the vendor credential, when the proxy terminates
    /// its vendor host (else the agent holds no credential at all).
    pub fn sentinel(&self) -> Option<&str> {
        self.spec.sentinel()
    }
    /// The gitlinks the profile masks, relative to /work.
    pub fn gitlinks(&self) -> &[String] {
        &self.spec.gitlinks
    }
    /// The directories the init pins (Landlock), relative to /work.
    pub fn pins(&self) -> &[String] {
        &self.spec.pins
    }
    /// The pins that are subpath mounts of the work volume as well (none unless `pin_mounts`).
    pub fn pin_mounts(&self) -> &[String] {
        if self.spec.pin_mounts {
            &self.spec.pins
        } else {
            &[]
        }
    }

    /// The container's environment (without the HOSTNAME the engine adds).
    pub fn env(&self) -> Vec<String> {
        if self.command_role().is_some() {
            return self.command_env();
        }
        let mut env = vec![
            "PATH=/usr/bin:/bin".to_owned(),
            format!("HOME={}", paths::HOME),
            format!("TMPDIR={}", paths::TMP),
            "LANG=C.UTF-8".to_owned(),
        ];
        if self.spec.vendor == Vendor::Codex {
            env.push(format!("CODEX_HOME={}", paths::CODEX_HOME));
        }
        env.extend(self.spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        if self.spec.egress.is_some() {
            let (_, proxy_env) = egress::agent_forward();
            env.extend(proxy_env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        env
    }

    /// The scratch tmpfs areas: (path, area, bytes id, inodes id, mode). A command's are its
    /// /tmp and, when it writes nothing, its overlay's area.
    pub fn scratch_areas(&self) -> Vec<(&'static str, Area, Id, Id, u32)> {
        if let Some(role) = self.command_role() {
            let mut areas = vec![(
                paths::TMP,
                role.scratch,
                Id::TmpBytes,
                Id::TmpInodes,
                0o1777,
            )];
            if role.writes == Writes::None {
                areas.push((
                    paths::OVERLAY_AREA,
                    role.overlay,
                    Id::WorkBytes,
                    Id::WorkInodes,
                    0o700,
                ));
            }
            return areas;
        }
        let l = &self.spec.limits;
        let mut areas = vec![
            (paths::TMP, l.tmp, Id::TmpBytes, Id::TmpInodes, 0o1777),
            (paths::HOME, l.home, Id::HomeBytes, Id::HomeInodes, 0o700),
            (
                paths::OUTPUT_DIR,
                l.output,
                Id::OutputBytes,
                Id::OutputInodes,
                0o700,
            ),
        ];
        if self.spec.vendor == Vendor::Codex {
            areas.push((
                paths::CODEX_HOME,
                l.codex_home,
                Id::CodexHomeBytes,
                Id::CodexHomeInodes,
                0o700,
            ));
        }
        areas
    }

    /// Whether the scratch area at `path` may hold executables: a command's /tmp alone (Docker's
    /// tmpfs is noexec unless told `exec`).
    pub fn exec_scratch(&self, path: &str) -> bool {
        self.command_role().is_some() && path == paths::TMP
    }

    /// `HostConfig.Tmpfs` option string of the scratch area at `path`, owned by the allocation's
    /// uid.
    pub fn tmpfs_options(&self, path: &str, area: Area, mode: u32) -> String {
        let uid = self.spec.allocation.uid;
        let exec = if self.exec_scratch(path) {
            "exec"
        } else {
            "noexec"
        };
        format!(
            "rw,nosuid,nodev,{exec},size={},nr_inodes={},mode={mode:o},uid={uid},gid={uid}",
            area.bytes, area.inodes,
        )
    }

    /// The agent's profile, offered approved commands: the relay's socket dir mounted read-only
    /// (`commands-readonly`). Only an agent, only in a phase that may run them (review, execute,
    /// fix); its exec allowlist must hold the commands' MCP server.
    pub fn offering_commands(mut self) -> Result<Profile> {
        let phase = self.spec.phase;
        if self.command_role().is_some() || matches!(phase, Phase::Planning | Phase::Questions) {
            return Err(Error::Invalid(format!(
                "approved commands are offered to an agent in review, execute or fix, not {phase}"
            )));
        }
        let server = cordon_contract::command::MCP_SERVER;
        if !self.spec.exec.iter().any(|p| p == server) {
            return Err(Error::Invalid(format!(
                "approved commands need {server} on the exec allowlist"
            )));
        }
        self.commands = true;
        Ok(self)
    }

    /// Whether the agent is offered approved commands.
    pub fn offers_commands(&self) -> bool {
        self.commands
    }

    /// What the container is: the agent, or an approved command.
    pub fn kind(&self) -> Kind {
        match self.role {
            Role::Agent => Kind::Agent,
            Role::Command(_) => Kind::Command,
        }
    }

    /// The container's labels.
    pub fn labels(&self) -> HashMap<String, String> {
        self.spec.allocation.labels(self.kind())
    }

    /// The working directory: /work, or the command's.
    pub fn workdir(&self) -> &str {
        self.command_role()
            .map_or(paths::WORK, |role| role.workdir.as_str())
    }

    /// The capabilities the init starts with, as numbers: the shared start set, and the
    /// overlay's for a command whose init lays one.
    pub fn start_capabilities(&self) -> Vec<(&'static str, u32)> {
        let mut caps = cordon_contract::capabilities::START_CAPABILITIES.to_vec();
        if self.overlay().is_some() {
            caps.extend_from_slice(cordon_contract::capabilities::OVERLAY_CAPABILITIES);
        }
        caps
    }

    /// The overlay the init lays on /work (a command that writes nothing).
    pub fn overlay(&self) -> Option<cordon_contract::policy::WorkOverlay> {
        let role = self.command_role()?;
        (role.writes == Writes::None).then(|| cordon_contract::policy::WorkOverlay {
            target: paths::WORK.to_owned(),
            area: paths::OVERLAY_AREA.to_owned(),
            carried: vec![paths::METADATA.to_owned()],
        })
    }

    /// Whether the workload may write /work (through the overlay, for a command that writes
    /// nothing to the volume).
    pub fn work_writable(&self) -> bool {
        self.command_role().is_some() || self.spec.phase.work_writable()
    }

    /// The create request, the container name and the init's policy. Refuses a profile that
    /// needs a field this engine's API would silently drop.
    pub fn plan(&self, api: ApiVersion) -> Result<LaunchPlan> {
        if self.spec.pin_mounts && api < SUBPATH_API {
            return Err(Error::Profile {
                id: Id::PinnedDirs,
                reason: format!(
                    "pinning {} directories needs VolumeOptions.Subpath (API {SUBPATH_API}); the engine speaks {api} and would silently mount the whole volume",
                    self.spec.pins.len()
                ),
            });
        }
        Ok(LaunchPlan {
            name: self.spec.allocation.name(self.kind()),
            create: self.create_body(),
            policy: self.policy(),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
