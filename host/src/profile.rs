//! The agent container profile: an immutable value built from (phase, vendor, limits, storage),
//! and the one place that turns it into a create request, volume specifications and the init's
//! policy. The validator compares the engine's read-back with what this module produces, so the
//! create request and the expectation cannot drift apart.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, HostConfigLogConfig, Mount,
    MountTmpfsOptions, MountType, MountVolumeOptions, RestartPolicy, RestartPolicyNameEnum,
    VolumeCreateRequest,
};
use cordon_contract::capabilities::{start_capability_numbers, START_CAPABILITIES};
use cordon_contract::paths;
use cordon_contract::policy::{
    self, Access, Bounded, CgroupLimits, LandlockPolicy, MountRule, Policy, SocketPolicy,
    CORDON_MASKED_PATHS, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS,
};
use cordon_contract::{Id, Phase, Vendor};

use crate::engine::{ApiVersion, SUBPATH_API};
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind};
use crate::uids::Uid;

/// A bounded area: exact byte and inode totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Area {
    pub bytes: u64,
    pub inodes: u64,
}

impl Area {
    fn check(self, name: &str) -> Result<()> {
        // tmpfs rounds sizes up to whole pages; exact statfs totals need page-aligned sizes.
        if self.bytes == 0 || self.bytes % 4096 != 0 || self.inodes < 2 {
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
}

/// Environment variables a profile may add (values come from the caller, as data).
pub const ENV_ALLOWED_EXTRA: &[&str] = &[
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "CLAUDE_CODE_OAUTH_TOKEN",
];

/// The CFS period Docker uses for NanoCpus.
pub const CFS_PERIOD_US: u64 = 100_000;
/// The Landlock ABI profiles require unless told otherwise (6: adds signal and abstract-socket
/// scoping; Linux 6.12).
pub const DEFAULT_LANDLOCK_ABI: u8 = 6;
/// Size and mode of a gitlink mask.
pub const GITLINK_MASK_BYTES: i64 = 4096;
pub const GITLINK_MASK_MODE: i64 = 0o555;
/// At most this many gitlink masks and pins (seeds: 256 each).
pub const MAX_GITLINKS: usize = 256;
/// Container logs are bounded by the engine too.
pub const LOG_MAX_SIZE: &str = "1m";

/// Everything a profile is built from. Its `Debug` names environment variables but never shows
/// their values (a credential travels there).
#[derive(Clone)]
pub struct ProfileSpec {
    pub phase: Phase,
    pub vendor: Vendor,
    /// The image id (`sha256:...`) the container must run.
    pub image_id: String,
    pub allocation: Allocation,
    pub limits: Limits,
    pub storage: StorageRef,
    /// The workload argv; argv[0] must be in `exec`.
    pub command: Vec<String>,
    /// Files the workload may execute (Landlock EXECUTE).
    pub exec: Vec<String>,
    /// Extra environment, names from [`ENV_ALLOWED_EXTRA`].
    pub env: Vec<(String, String)>,
    /// Gitlink paths under /work (execute and fix), masked by empty read-only tmpfs.
    pub gitlinks: Vec<String>,
    /// Directories under /work pinned by a subpath mount of the work volume (needs API 1.45).
    pub pins: Vec<String>,
    pub landlock_abi: u8,
    /// Files written into the read-only input dir (name, content), such as `schema.json`.
    pub input_files: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for ProfileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        let inputs: Vec<(&str, usize)> = self
            .input_files
            .iter()
            .map(|(n, c)| (n.as_str(), c.len()))
            .collect();
        f.debug_struct("ProfileSpec")
            .field("phase", &self.phase)
            .field("vendor", &self.vendor)
            .field("image_id", &self.image_id)
            .field("allocation", &self.allocation)
            .field("limits", &self.limits)
            .field("storage", &self.storage)
            .field("uid", &self.allocation.uid)
            .field("command", &self.command)
            .field("exec", &self.exec)
            .field("env (values withheld)", &env)
            .field("gitlinks", &self.gitlinks)
            .field("pins", &self.pins)
            .field("landlock_abi", &self.landlock_abi)
            .field("input_files (bytes)", &inputs)
            .finish()
    }
}

/// The input file a `--json-schema` argument must equal, byte for byte.
pub const SCHEMA_FILE: &str = "schema.json";
/// At most this many input files, this many bytes in all.
pub const MAX_INPUT_FILES: usize = 16;
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// The command's `--json-schema` text must be exactly the mounted `schema.json`: what the agent is
/// told to answer and what a reader of the input dir sees cannot differ.
fn check_schema_argument(command: &[String], input_files: &[(String, Vec<u8>)]) -> Result<()> {
    if command.iter().any(|a| a.starts_with("--json-schema=")) {
        return Err(Error::SchemaMismatch(
            "the schema must be passed as a separate argument".into(),
        ));
    }
    let at: Vec<usize> = command
        .iter()
        .enumerate()
        .filter(|(_, a)| *a == "--json-schema")
        .map(|(i, _)| i)
        .collect();
    let mounted = input_files
        .iter()
        .find(|(name, _)| name == SCHEMA_FILE)
        .map(|(_, content)| content.as_slice());
    match (at.as_slice(), mounted) {
        ([], _) => Ok(()),
        ([i], Some(mounted)) if command.get(i + 1).map(String::as_bytes) == Some(mounted) => Ok(()),
        ([_], Some(_)) => Err(Error::SchemaMismatch(format!(
            "the --json-schema text differs from the mounted {SCHEMA_FILE}"
        ))),
        ([_], None) => Err(Error::SchemaMismatch(format!(
            "--json-schema without a mounted {SCHEMA_FILE}"
        ))),
        _ => Err(Error::SchemaMismatch(
            "--json-schema given more than once".into(),
        )),
    }
}

/// An immutable, checked profile.
#[derive(Debug, Clone)]
pub struct Profile {
    spec: ProfileSpec,
}

/// What one launch sends to the engine and writes into the control dir.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub name: String,
    pub create: ContainerCreateBody,
    pub policy: Policy,
}

fn relative_clean(path: &str) -> bool {
    !path.is_empty() && policy::is_clean_absolute(&format!("/{path}")) && !path.contains('"')
}

/// Whether `path` (relative to /work) can be a mount target: clean, no `"` or `,`, not in `.git`.
pub fn mountable(path: &str) -> bool {
    relative_clean(path) && path != ".git" && !path.starts_with(".git/")
}

impl Profile {
    /// Check a spec and freeze it.
    pub fn new(spec: ProfileSpec) -> Result<Profile> {
        let l = &spec.limits;
        l.tmp.check("tmp")?;
        l.home.check("home")?;
        l.output.check("output")?;
        l.codex_home.check("codex home")?;
        spec.storage.work.check("work")?;
        spec.storage.metadata.check("metadata")?;
        if spec.allocation.uid != spec.storage.storage.uid {
            return Err(Error::Invalid(format!(
                "the invocation's uid {} is not its storage's {}",
                spec.allocation.uid, spec.storage.storage.uid
            )));
        }
        if l.pids == 0 || l.memory_bytes < 16 * 1024 * 1024 || l.nano_cpus < 10_000_000 {
            return Err(Error::Invalid(
                "pids, memory (>= 16 MiB) and CPU (>= 0.01) must be set".into(),
            ));
        }
        if l.deadline.is_zero() || l.grace.is_zero() {
            return Err(Error::Invalid("deadline and grace must be positive".into()));
        }
        if !spec.image_id.starts_with("sha256:") {
            return Err(Error::Invalid(format!(
                "image {:?} is not an image id",
                spec.image_id
            )));
        }
        let Some(argv0) = spec.command.first() else {
            return Err(Error::Invalid("empty command".into()));
        };
        if !spec.exec.contains(argv0) {
            return Err(Error::Invalid(format!(
                "command {argv0:?} is not on the exec allowlist"
            )));
        }
        if spec.command.iter().any(|a| a.contains('\0')) {
            return Err(Error::Invalid("command has a NUL byte".into()));
        }
        for path in &spec.exec {
            if !policy::is_clean_absolute(path) || path == "/" {
                return Err(Error::Invalid(format!(
                    "exec path {path:?} is not a clean absolute file path"
                )));
            }
        }
        for (key, value) in &spec.env {
            if !ENV_ALLOWED_EXTRA.contains(&key.as_str()) || value.contains(['\0', '\n']) {
                return Err(Error::Invalid(format!(
                    "environment variable {key:?} is not allowed"
                )));
            }
        }
        if (!spec.gitlinks.is_empty() || !spec.pins.is_empty()) && !spec.phase.work_writable() {
            return Err(Error::Invalid(
                "gitlink masks and pins exist only in execute and fix".into(),
            ));
        }
        if spec.gitlinks.len() > MAX_GITLINKS || spec.pins.len() > MAX_GITLINKS {
            return Err(Error::Invalid(format!(
                "more than {MAX_GITLINKS} gitlinks or pins"
            )));
        }
        for path in spec.gitlinks.iter().chain(&spec.pins) {
            if !mountable(path) {
                return Err(Error::Invalid(format!(
                    "gitlink or pin {path:?} is not a mountable path under /work"
                )));
            }
        }
        if spec.input_files.len() > MAX_INPUT_FILES
            || spec.input_files.iter().map(|(_, c)| c.len()).sum::<usize>() > MAX_INPUT_BYTES
        {
            return Err(Error::Invalid(format!(
                "more than {MAX_INPUT_FILES} input files or {MAX_INPUT_BYTES} bytes of input"
            )));
        }
        for (name, _) in &spec.input_files {
            let plain = !name.is_empty()
                && name.len() <= 255
                && name != "."
                && name != ".."
                && !name.contains(['/', '\0']);
            if !plain {
                return Err(Error::Invalid(format!(
                    "input file name {name:?} is not a plain file name"
                )));
            }
        }
        check_schema_argument(&spec.command, &spec.input_files)?;
        if !policy::LANDLOCK_ABI_RANGE.contains(&spec.landlock_abi) {
            return Err(Error::Invalid(format!(
                "Landlock ABI {} unsupported",
                spec.landlock_abi
            )));
        }
        Ok(Profile { spec })
    }

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

    /// The container's environment (without the HOSTNAME the engine adds).
    pub fn env(&self) -> Vec<String> {
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
        env
    }

    /// The scratch tmpfs areas: (path, area, bytes id, inodes id, mode).
    pub fn scratch_areas(&self) -> Vec<(&'static str, Area, Id, Id, u32)> {
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

    /// `HostConfig.Tmpfs` option string of a scratch area, owned by the allocation's uid.
    pub fn tmpfs_options(&self, area: Area, mode: u32) -> String {
        let uid = self.spec.allocation.uid;
        format!(
            "rw,nosuid,nodev,noexec,size={},nr_inodes={},mode={mode:o},uid={uid},gid={uid}",
            area.bytes, area.inodes,
        )
    }

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
        vec![
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
                    tmpfs_volume_options(EGRESS_AREA, 0o750, uid),
                ),
            ),
        ]
    }

    /// Every mount of `HostConfig.Mounts`, in order, with the protection each one carries.
    pub fn mounts(&self) -> Vec<(Mount, Id)> {
        let volumes: BTreeMap<Kind, VolumeSpec> = self.volumes().into_iter().collect();
        let volume = |kind: Kind, target: &str, read_only: bool| {
            let spec = volumes.get(&kind).cloned().unwrap_or_default();
            volume_mount(&spec, target, read_only, None)
        };
        let mut mounts = vec![
            (
                volume(Kind::Work, paths::WORK, !self.spec.phase.work_writable()),
                Id::WorkReadonly,
            ),
            (
                volume(Kind::Metadata, paths::METADATA, true),
                Id::MetadataReadonly,
            ),
            (
                volume(Kind::Control, paths::CONTROL_DIR, true),
                Id::ControlReadonly,
            ),
            (
                volume(Kind::Input, paths::INPUT_DIR, true),
                Id::InputReadonly,
            ),
            (
                volume(Kind::Egress, paths::EGRESS_DIR, true),
                Id::EgressReadonly,
            ),
        ];
        let work = volumes.get(&Kind::Work).cloned().unwrap_or_default();
        for pin in &self.spec.pins {
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

    /// The container's labels.
    pub fn labels(&self) -> HashMap<String, String> {
        self.spec.allocation.labels(Kind::Agent)
    }

    /// The create request, the container name and the init's policy. Refuses a profile that
    /// needs a field this engine's API would silently drop.
    pub fn plan(&self, api: ApiVersion) -> Result<LaunchPlan> {
        if !self.spec.pins.is_empty() && api < SUBPATH_API {
            return Err(Error::Profile {
                id: Id::PinnedDirs,
                reason: format!(
                    "pinning {} directories needs VolumeOptions.Subpath (API {SUBPATH_API}); the engine speaks {api} and would silently mount the whole volume",
                    self.spec.pins.len()
                ),
            });
        }
        Ok(LaunchPlan {
            name: self.spec.allocation.name(Kind::Agent),
            create: self.create_body(),
            policy: self.policy(),
        })
    }

    /// The exact create request.
    pub fn create_body(&self) -> ContainerCreateBody {
        let l = &self.spec.limits;
        let tmpfs: HashMap<String, String> = self
            .scratch_areas()
            .into_iter()
            .map(|(path, area, _, _, mode)| (path.to_owned(), self.tmpfs_options(area, mode)))
            .collect();
        let mut body = hardened_body(Hardened {
            image_id: &self.spec.image_id,
            labels: self.labels(),
            // The init starts as root with exactly what it needs to remount the content mounts
            // and to switch to the allocation's ids; it drops all of it before its preflight.
            user: "0:0".to_owned(),
            cap_add: start_capability_names(),
            entrypoint: vec![paths::INIT.to_owned()],
            env: self.env(),
            mounts: self.mounts().into_iter().map(|(m, _)| m).collect(),
            pids: l.pids,
            memory_bytes: l.memory_bytes,
            nano_cpus: l.nano_cpus,
            log_max_size: LOG_MAX_SIZE,
        });
        body.working_dir = Some(paths::WORK.to_owned());
        if let Some(host) = body.host_config.as_mut() {
            host.tmpfs = Some(tmpfs);
        }
        body
    }

    /// The policy cordon-init enforces.
    pub fn policy(&self) -> Policy {
        let s = &self.spec.storage;
        let writable = self.spec.phase.work_writable();
        let mut mounts = policy::engine_mount_rules();
        mounts.push(MountRule::required(
            paths::WORK,
            if writable {
                Access::Writable
            } else {
                Access::ReadOnly
            },
            if writable {
                Id::WritableNosuidNodevNoexec
            } else {
                Id::WorkReadonly
            },
            Some("tmpfs"),
            Some(Bounded {
                bytes: s.work.bytes,
                inodes: s.work.inodes,
                bytes_id: Id::WorkBytes,
                inodes_id: Id::WorkInodes,
            }),
        ));
        mounts.push(MountRule::required(
            paths::METADATA,
            Access::ReadOnly,
            Id::MetadataReadonly,
            Some("tmpfs"),
            None,
        ));
        let mut write = Vec::new();
        for (path, area, bytes_id, inodes_id, _) in self.scratch_areas() {
            mounts.push(MountRule::required(
                path,
                Access::Writable,
                Id::WritableNosuidNodevNoexec,
                Some("tmpfs"),
                Some(Bounded {
                    bytes: area.bytes,
                    inodes: area.inodes,
                    bytes_id,
                    inodes_id,
                }),
            ));
            write.push(path.to_owned());
        }
        if writable {
            write.push(paths::WORK.to_owned());
        }
        mounts.push(MountRule::required(
            paths::CONTROL_DIR,
            Access::ReadOnly,
            Id::ControlReadonly,
            Some("tmpfs"),
            None,
        ));
        mounts.push(MountRule::required(
            paths::INPUT_DIR,
            Access::ReadOnly,
            Id::InputReadonly,
            Some("tmpfs"),
            None,
        ));
        mounts.push(MountRule::required(
            paths::EGRESS_DIR,
            Access::ReadOnly,
            Id::EgressReadonly,
            Some("tmpfs"),
            None,
        ));
        for pin in &self.spec.pins {
            mounts.push(MountRule::required(
                &format!("{}/{pin}", paths::WORK),
                Access::Writable,
                Id::PinnedDirs,
                Some("tmpfs"),
                None,
            ));
        }
        for gitlink in &self.spec.gitlinks {
            mounts.push(MountRule::required(
                &format!("{}/{gitlink}", paths::WORK),
                Access::ReadOnly,
                Id::GitlinkMasks,
                Some("tmpfs"),
                None,
            ));
        }
        let mut env = self.env();
        env.push(format!("HOSTNAME={}", paths::HOSTNAME));
        let l = &self.spec.limits;
        Policy {
            version: policy::POLICY_VERSION,
            phase: self.spec.phase,
            vendor: self.spec.vendor,
            uid: self.spec.allocation.uid.get(),
            gid: self.spec.allocation.uid.get(),
            start_capabilities: start_capability_numbers(),
            hostname: paths::HOSTNAME.to_owned(),
            env,
            cwd: paths::WORK.to_owned(),
            mounts,
            landlock: LandlockPolicy {
                abi: self.spec.landlock_abi,
                read: vec!["/".to_owned()],
                write,
                devices: vec!["/dev/null".to_owned()],
                exec: self.spec.exec.clone(),
            },
            sockets: SocketPolicy::agent(),
            masked: CORDON_MASKED_PATHS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            cgroup: CgroupLimits {
                pids_max: u64::from(l.pids),
                memory_bytes: l.memory_bytes,
                cpu_quota_us: l.nano_cpus * CFS_PERIOD_US / 1_000_000_000,
                cpu_period_us: CFS_PERIOD_US,
            },
            command: self.spec.command.clone(),
            deadline_ms: l.deadline.as_millis() as u64,
            grace_ms: l.grace.as_millis() as u64,
            skip: vec![],
        }
    }
}

/// The capabilities the agent's init starts with, in Docker's names.
pub fn start_capability_names() -> Vec<String> {
    START_CAPABILITIES
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect()
}

/// Every path the engine and cordon mask (`HostConfig.MaskedPaths` replaces the engine's list,
/// so it carries the engine's too).
pub fn masked_paths() -> Vec<String> {
    ENGINE_MASKED_PATHS
        .iter()
        .chain(CORDON_MASKED_PATHS)
        .map(|p| (*p).to_owned())
        .collect()
}

/// What differs between hardened containers (the agent, the keeper, the loader).
#[derive(Debug, Clone)]
pub struct Hardened<'a> {
    pub image_id: &'a str,
    pub labels: HashMap<String, String>,
    /// `uid:gid`: the agent's init starts as 0:0; every helper runs as its allocation's uid.
    pub user: String,
    pub cap_add: Vec<String>,
    pub entrypoint: Vec<String>,
    pub env: Vec<String>,
    pub mounts: Vec<Mount>,
    pub pids: u32,
    pub memory_bytes: u64,
    pub nano_cpus: u64,
    pub log_max_size: &'a str,
}

/// Every cordon container's hardening: a numeric user, read-only root, every capability dropped
/// (the agent's init alone adds back what it drops itself), no-new-privileges, no network, no IPC,
/// private cgroup namespace, no TTY or stdin, cordon-init as PID 1 (Docker's init off), host
/// files masked, memory without swap, bounded logs, no restart.
pub fn hardened_body(h: Hardened<'_>) -> ContainerCreateBody {
    ContainerCreateBody {
        hostname: Some(paths::HOSTNAME.to_owned()),
        user: Some(h.user),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        tty: Some(false),
        open_stdin: Some(false),
        stdin_once: Some(false),
        env: Some(h.env),
        image: Some(h.image_id.to_owned()),
        entrypoint: Some(h.entrypoint),
        labels: Some(h.labels),
        host_config: Some(HostConfig {
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".to_owned()]),
            cap_add: (!h.cap_add.is_empty()).then_some(h.cap_add),
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            masked_paths: Some(masked_paths()),
            readonly_paths: Some(
                ENGINE_READONLY_PATHS
                    .iter()
                    .map(|p| (*p).to_owned())
                    .collect(),
            ),
            privileged: Some(false),
            ipc_mode: Some("none".to_owned()),
            network_mode: Some("none".to_owned()),
            cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
            pids_limit: Some(i64::from(h.pids)),
            memory: Some(h.memory_bytes as i64),
            memory_swap: Some(h.memory_bytes as i64),
            nano_cpus: Some(h.nano_cpus as i64),
            init: Some(false),
            mounts: Some(h.mounts),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_owned()),
                config: Some(HashMap::from([
                    ("max-size".to_owned(), h.log_max_size.to_owned()),
                    ("max-file".to_owned(), "1".to_owned()),
                ])),
            }),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: Some(0),
            }),
            auto_remove: Some(false),
            ..Default::default()
        }),
        ..Default::default()
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

/// Create requests for one profile's control, input and egress volumes.
pub fn invocation_volume_requests(profile: &Profile) -> BTreeMap<Kind, VolumeCreateRequest> {
    profile
        .volumes()
        .into_iter()
        .filter(|(kind, _)| matches!(kind, Kind::Control | Kind::Input | Kind::Egress))
        .map(|(kind, spec)| (kind, spec.request()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Owner;

    fn spec() -> ProfileSpec {
        let uid = Uid::new(1_500_000).unwrap();
        let owner = Owner::random("t");
        let allocation = Allocation::new(&owner, "a", uid).unwrap();
        ProfileSpec {
            phase: Phase::Execute,
            vendor: Vendor::Claude,
            image_id: "sha256:00".into(),
            storage: StorageRef {
                storage: Allocation::new(&owner, "a", uid).unwrap(),
                work_volume: "w".into(),
                work: Area {
                    bytes: 1 << 20,
                    inodes: 100,
                },
                metadata_volume: "m".into(),
                metadata: Area {
                    bytes: 1 << 20,
                    inodes: 100,
                },
                control_volume: "c".into(),
                input_volume: "i".into(),
                egress_volume: "e".into(),
            },
            allocation,
            limits: Limits::default(),
            command: vec![paths::CLAUDE_CLI.into()],
            exec: vec![paths::CLAUDE_CLI.into()],
            env: vec![],
            gitlinks: vec![],
            pins: vec![],
            input_files: vec![],
            landlock_abi: DEFAULT_LANDLOCK_ABI,
        }
    }

    fn refused(change: impl FnOnce(&mut ProfileSpec)) -> String {
        let mut s = spec();
        change(&mut s);
        Profile::new(s).expect_err("must be refused").to_string()
    }

    #[test]
    fn the_default_spec_is_accepted_and_its_policy_is_consistent() {
        let profile = Profile::new(spec()).unwrap();
        let policy = profile.policy();
        policy.check().unwrap();
        assert!(policy.landlock.write.contains(&paths::WORK.to_owned()));
        assert!(policy
            .env
            .contains(&format!("HOSTNAME={}", paths::HOSTNAME)));
        let bytes = policy.to_bytes();
        assert_eq!(Policy::from_bytes(&bytes).unwrap(), policy);
    }

    #[test]
    fn read_only_phases_do_not_grant_work() {
        let mut s = spec();
        s.phase = Phase::Planning;
        let profile = Profile::new(s).unwrap();
        assert!(!profile
            .policy()
            .landlock
            .write
            .contains(&paths::WORK.to_owned()));
        let work = profile
            .mounts()
            .into_iter()
            .find(|(m, _)| m.target.as_deref() == Some(paths::WORK))
            .unwrap();
        assert_eq!(work.0.read_only, Some(true));
    }

    #[test]
    fn hostile_specs_are_refused_with_a_reason() {
        for (want, change) in [
            (
                "exec allowlist",
                Box::new(|s: &mut ProfileSpec| s.command = vec!["/bin/sh".into()])
                    as Box<dyn FnOnce(&mut ProfileSpec)>,
            ),
            (
                "exec path",
                Box::new(|s: &mut ProfileSpec| s.exec.push("/usr/../bin/sh".into())),
            ),
            (
                "exec path",
                Box::new(|s: &mut ProfileSpec| s.exec.push("/".into())),
            ),
            (
                "not allowed",
                Box::new(|s: &mut ProfileSpec| s.env.push(("LD_PRELOAD".into(), "/x".into()))),
            ),
            (
                "not allowed",
                Box::new(|s: &mut ProfileSpec| s.env.push(("HTTPS_PROXY".into(), "a\nb".into()))),
            ),
            (
                "only in execute and fix",
                Box::new(|s: &mut ProfileSpec| {
                    s.phase = Phase::Review;
                    s.gitlinks = vec!["sub".into()];
                }),
            ),
            (
                "mountable",
                Box::new(|s: &mut ProfileSpec| s.gitlinks = vec!["../escape".into()]),
            ),
            (
                "mountable",
                Box::new(|s: &mut ProfileSpec| s.gitlinks = vec!["a,b".into()]),
            ),
            (
                "mountable",
                Box::new(|s: &mut ProfileSpec| s.pins = vec![".git/hooks".into()]),
            ),
            (
                "more than 256",
                Box::new(|s: &mut ProfileSpec| {
                    s.gitlinks = (0..257).map(|i| format!("g{i}")).collect()
                }),
            ),
            (
                "multiple of 4096",
                Box::new(|s: &mut ProfileSpec| s.limits.tmp.bytes = 1000),
            ),
            (
                "image id",
                Box::new(|s: &mut ProfileSpec| s.image_id = "ubuntu:latest".into()),
            ),
            (
                "NUL",
                Box::new(|s: &mut ProfileSpec| s.command.push("a\0b".into())),
            ),
            (
                "Landlock ABI",
                Box::new(|s: &mut ProfileSpec| s.landlock_abi = 0),
            ),
            (
                "not its storage's",
                Box::new(|s: &mut ProfileSpec| s.allocation.uid = Uid::new(1_500_001).unwrap()),
            ),
        ] {
            let reason = refused(change);
            assert!(reason.contains(want), "{want}: {reason}");
        }
    }

    #[test]
    fn the_init_starts_as_root_with_exactly_its_capabilities_and_runs_the_agent_as_the_uid() {
        let profile = Profile::new(spec()).unwrap();
        let body = profile.create_body();
        assert_eq!(body.user.as_deref(), Some("0:0"));
        let host = body.host_config.unwrap();
        assert_eq!(
            host.cap_add.unwrap(),
            ["SETGID", "SETPCAP", "SETUID", "SYS_ADMIN"]
        );
        assert_eq!(host.cap_drop.unwrap(), ["ALL"]);
        assert!(host
            .masked_paths
            .unwrap()
            .contains(&"/proc/cmdline".to_owned()));
        let policy = profile.policy();
        assert_eq!((policy.uid, policy.gid), (1_500_000, 1_500_000));
        for (_, options) in host.tmpfs.unwrap() {
            assert!(options.contains("uid=1500000,gid=1500000"), "{options}");
        }
        for (kind, volume) in profile.volumes() {
            let o = &volume.options["o"];
            assert!(o.ends_with("nosuid,nodev,noexec"), "{kind:?} {o}");
            let root = matches!(kind, Kind::Control | Kind::Input);
            assert_eq!(o.contains("uid="), !root, "{kind:?} {o}");
            assert_eq!(volume.labels[crate::labels::UID], "1500000");
        }
        // A volume the engine would make for a mount is made labelled and bounded.
        for (mount, _) in profile
            .mounts()
            .iter()
            .filter(|(m, _)| m.typ == Some(MountType::VOLUME))
        {
            let options = mount.volume_options.clone().unwrap();
            assert!(options.labels.unwrap().contains_key(crate::labels::OWNER));
            assert!(options.driver_config.unwrap().options.unwrap()["o"].contains("size="));
        }
    }

    #[test]
    fn pins_need_the_subpath_api() {
        let mut s = spec();
        s.pins = vec!["src".into()];
        let profile = Profile::new(s).unwrap();
        let old = ApiVersion {
            major: 1,
            minor: 41,
        };
        match profile.plan(old) {
            Err(Error::Profile {
                id: Id::PinnedDirs, ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(profile.plan(SUBPATH_API).is_ok());
    }
}
