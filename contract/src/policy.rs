//! The policy file the host writes into the read-only control dir and cordon-init enforces.
//!
//! The policy is the init's whole view of what the container must be. The host derives it from the
//! same immutable profile that it turns into the create request, so the two layers check the same
//! facts from both sides. The init refuses a policy that is too large, malformed, or inconsistent.

use serde::{Deserialize, Serialize};

use crate::catalogue::Id;
use crate::phase::{Phase, Vendor};

/// The schema version this build writes and accepts.
pub const POLICY_VERSION: u32 = 1;
/// The largest policy file the init reads.
pub const MAX_POLICY_BYTES: usize = 64 * 1024;
/// The Landlock ABI versions the init knows how to enforce.
pub const LANDLOCK_ABI_RANGE: std::ops::RangeInclusive<u8> = 1..=7;

/// What cordon-init must find, enforce and run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub version: u32,
    pub phase: Phase,
    pub vendor: Vendor,
    /// The ids the init switches to before its preflight: the allocation's, never 0.
    pub uid: u32,
    pub gid: u32,
    /// The capabilities (numbers) the init starts with as uid 0 and drops before its preflight:
    /// exactly what it needs to remount the content mounts and to switch ids.
    pub start_capabilities: Vec<u32>,
    pub hostname: String,
    /// The exact environment, as `KEY=value` (order does not matter).
    pub env: Vec<String>,
    /// The workload's working directory.
    pub cwd: String,
    /// Every mount the container may have; anything else is refused.
    pub mounts: Vec<MountRule>,
    pub landlock: LandlockPolicy,
    /// The socket families the seccomp filter lets through.
    pub sockets: SocketPolicy,
    /// Host-describing files that must be masked wherever they exist.
    pub masked: Vec<String>,
    pub cgroup: CgroupLimits,
    /// The workload's argv; argv[0] must be on the exec allowlist.
    pub command: Vec<String>,
    /// Wall-clock budget for the workload, from the end of preflight.
    pub deadline_ms: u64,
    /// How long survivors get between TERM and KILL.
    pub grace_ms: u64,
    /// Protections the init must neither enforce nor check. Only the gate's probe layer sets this
    /// (to show that a probe sees exactly that protection missing); the attestation lists what
    /// was skipped, a profile never produces it, and the host trusts no attestation that skipped
    /// anything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<Id>,
    /// The init's loopback forwarder to the egress proxy's socket; absent when the invocation has
    /// no egress (then nothing listens and the agent has no way out at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressForward>,
    /// The invocation's sentinel: what the agent holds in place of the vendor credential (absent
    /// when it holds none). Public by design; the init checks that nothing else credential-shaped
    /// is in the environment ([`crate::credential`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<String>,
    /// An approved command's throwaway /work (`writes: none`): the init, while it still holds its
    /// start capabilities, lays an overlay on a bounded tmpfs over the read-only work volume, so
    /// what the command writes beside the sources never reaches the volume. Absent for the agent
    /// and for a command that writes /work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<WorkOverlay>,
    /// Whose container this is. An approved command's holds nothing of its agent's (no egress
    /// or commands socket dir: [`crate::paths::AGENT_ONLY_DIRS`]), and may execute beneath its
    /// exec trees.
    #[serde(default, skip_serializing_if = "Role::is_agent")]
    pub role: Role,
    /// A shared snapshot's recorded digest (`sha256:` and 64 hex digits, the `digest` role's over
    /// /work with its metadata): the init computes the tree it mounts and refuses any other before
    /// the workload exists (`snapshot-verified`). Absent over an invocation's own storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_digest: Option<String>,
}

/// Whose container a policy is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The vendor CLI's (the default).
    #[default]
    Agent,
    /// An approved command's, run by the dispatcher beside the agent.
    Command,
}

impl Role {
    pub fn is_agent(&self) -> bool {
        *self == Role::Agent
    }
}

/// The overlay an approved command that may not write /work sees there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkOverlay {
    /// The read-only mount the overlay covers, its lower layer: always /work.
    pub target: String,
    /// The bounded tmpfs holding the overlay's upper and work directories (not in the Landlock
    /// write grants: it is written only through the overlay).
    pub area: String,
    /// Mounts beneath `target` carried onto the overlay (moved aside before it is laid and back
    /// after): the read-only metadata at /work/.git.
    pub carried: Vec<String>,
}

/// Where the init's forwarder listens (127.0.0.1 only) and the socket it forwards each connection
/// to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressForward {
    pub port: u16,
    pub socket: String,
}

/// The socket families (and netlink protocols) the agent may open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketPolicy {
    pub families: Vec<u32>,
    pub netlink_protocols: Vec<u32>,
}

impl SocketPolicy {
    /// What every agent gets (see [`crate::seccomp::AGENT_FAMILIES`]).
    pub fn agent() -> SocketPolicy {
        SocketPolicy {
            families: crate::seccomp::ALLOWED_FAMILIES.to_vec(),
            netlink_protocols: crate::seccomp::ALLOWED_NETLINK_PROTOCOLS.to_vec(),
        }
    }

    /// The filter's view of it.
    pub fn families(&self) -> crate::seccomp::Families<'_> {
        crate::seccomp::Families {
            families: &self.families,
            netlink_protocols: &self.netlink_protocols,
        }
    }
}

/// How a mountpoint may look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Must be mounted read-only; a writable one breaches `protection`.
    ReadOnly,
    /// Agent-writable: must be nosuid, nodev and noexec.
    Writable,
    /// Writable, nosuid and nodev, and may hold executables: an approved command's scratch alone
    /// (tests run what they build). Never in an agent's policy.
    WritableExec,
    /// An engine mount that may be rw but whose root the agent cannot write (/dev, /proc, ...),
    /// carrying at least the listed flags.
    RootOwned,
    /// A masked kernel path: a /dev/null bind or a read-only mount.
    Masked,
}

/// One allowed mountpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountRule {
    pub path: String,
    /// Match mountpoints strictly beneath `path` instead of `path` itself (engine cgroup
    /// hierarchies).
    #[serde(default)]
    pub beneath: bool,
    pub access: Access,
    /// Filesystem type the mount must have, when it matters (bounded areas are tmpfs).
    #[serde(default)]
    pub fstype: Option<String>,
    /// Flags a `RootOwned` mount must carry (Writable always needs all three).
    #[serde(default)]
    pub flags: MountFlags,
    /// The protection a violation breaches.
    pub protection: Id,
    /// The mount must exist (profile mounts) or may exist (engine mounts).
    pub required: bool,
    /// statfs totals the area must have.
    #[serde(default)]
    pub bounded: Option<Bounded>,
    /// The mount is covered by a later one at the same point (an approved command's read-only
    /// work volume beneath its overlay): the first mount at `path` is judged by this rule, the
    /// second by the path's other rule.
    #[serde(default, skip_serializing_if = "is_false")]
    pub covered: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl MountRule {
    /// A mount the profile makes: it must exist, and carry nosuid, nodev and noexec (a writable one
    /// from its options; a read-only one loses them in the engine's remount, and the init restores
    /// them).
    pub fn required(
        path: &str,
        access: Access,
        protection: Id,
        fstype: Option<&str>,
        bounded: Option<Bounded>,
    ) -> MountRule {
        MountRule {
            path: path.to_owned(),
            beneath: false,
            access,
            fstype: fstype.map(str::to_owned),
            flags: MountFlags::ALL,
            protection,
            required: true,
            bounded,
            covered: false,
        }
    }

    /// Whether the workload may write beneath this mount (with or without exec).
    pub fn writable(&self) -> bool {
        matches!(self.access, Access::Writable | Access::WritableExec)
    }
}

/// Paths the engine masks in every unprivileged container (`HostConfig.MaskedPaths` and the
/// masking mounts the init expects).
pub const ENGINE_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
];

/// Host-describing files cordon masks too (`HostConfig.MaskedPaths` adds them to the engine's):
/// the boot line, loaded modules, disks, memory and device maps, the machine's DMI identity. Left
/// visible on purpose, because runtimes read them to size themselves: /proc/cpuinfo, /proc/meminfo,
/// /proc/stat, /proc/uptime, /proc/loadavg, /proc/version (uname tells the same).
pub const CORDON_MASKED_PATHS: &[&str] = &[
    "/proc/cmdline",
    "/proc/modules",
    "/proc/partitions",
    "/proc/diskstats",
    "/proc/swaps",
    "/proc/kallsyms",
    "/proc/consoles",
    "/proc/devices",
    "/proc/misc",
    "/proc/iomem",
    "/proc/ioports",
    "/proc/vmallocinfo",
    "/proc/buddyinfo",
    "/proc/pagetypeinfo",
    "/proc/zoneinfo",
    "/proc/slabinfo",
    "/proc/mtrr",
    "/proc/locks",
    "/sys/devices/virtual/dmi",
];

/// Paths the engine makes read-only in every unprivileged container (`HostConfig.ReadonlyPaths`).
pub const ENGINE_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Mount flags that matter for writable areas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountFlags {
    #[serde(default)]
    pub nosuid: bool,
    #[serde(default)]
    pub nodev: bool,
    #[serde(default)]
    pub noexec: bool,
}

impl MountFlags {
    /// nosuid, nodev, noexec: what every agent-writable mount needs.
    pub const ALL: MountFlags = MountFlags {
        nosuid: true,
        nodev: true,
        noexec: true,
    };
    /// No flag required.
    pub const NONE: MountFlags = MountFlags {
        nosuid: false,
        nodev: false,
        noexec: false,
    };
}

/// A bounded area's exact statfs totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounded {
    pub bytes: u64,
    pub inodes: u64,
    pub bytes_id: Id,
    pub inodes_id: Id,
}

/// The Landlock ruleset for the phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockPolicy {
    /// The ABI to enforce fully (HardRequirement); the init refuses if the kernel has less.
    pub abi: u8,
    /// Trees that may be read (and listed).
    pub read: Vec<String>,
    /// Trees that may be written (this grant never carries execute: an agent's are noexec mounts
    /// too, and a command's exec-capable scratch is executed through its exec tree).
    pub write: Vec<String>,
    /// Character devices that may be opened for reading and writing (/dev/null).
    pub devices: Vec<String>,
    /// Regular files that may be executed: the whole process allowlist, but for what lies beneath
    /// `exec_trees`.
    pub exec: Vec<String>,
    /// The pinned directories (relative to /work; [`crate::tree::pins_of`] the gitlink masks):
    /// no pin's parent grants REMOVE_DIR, so no pin can be renamed or removed, and its gitlink
    /// mask cannot be moved aside. Empty without nested gitlinks.
    #[serde(default)]
    pub pins: Vec<String>,
    /// Directories beneath which anything may be executed: an approved command's image root
    /// (where its toolchain is; the noexec mounts beneath it stay noexec, its exec-capable
    /// scratch does not). Never in an agent's policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exec_trees: Vec<String>,
}

/// cgroup limits as the kernel shows them inside the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupLimits {
    pub pids_max: u64,
    pub memory_bytes: u64,
    pub cpu_quota_us: u64,
    pub cpu_period_us: u64,
}

/// Why a policy is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

fn bad(msg: impl Into<String>) -> PolicyError {
    PolicyError(msg.into())
}

/// An absolute, normalised path: starts with `/`, no empty, `.` or `..` component, no trailing `/`,
/// no NUL, no control character, no comma (Docker's mount syntax cannot carry one).
pub fn is_clean_absolute(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    !rest.is_empty()
        && path.len() <= 4096
        && !path.chars().any(|c| c.is_control() || c == ',')
        && rest
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

impl Policy {
    /// Parse and check a policy file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Policy, PolicyError> {
        if bytes.len() > MAX_POLICY_BYTES {
            return Err(bad(format!(
                "policy is {} bytes, more than {MAX_POLICY_BYTES}",
                bytes.len()
            )));
        }
        let policy: Policy =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("policy is not valid: {e}")))?;
        policy.check()?;
        Ok(policy)
    }

    /// The canonical bytes the host writes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Internal consistency: every path clean, every grant backed by a mount, argv[0] allowlisted.
    /// The checks run in this order; the first that fails is the error.
    pub fn check(&self) -> Result<(), PolicyError> {
        self.check_version()?;
        self.check_start_capabilities()?;
        self.check_masked()?;
        self.check_hostname()?;
        self.check_env()?;
        self.check_cwd()?;
        self.check_mounts()?;
        self.check_landlock()?;
        self.check_command()?;
        self.check_timing()?;
        self.check_skip()?;
        self.check_egress()?;
        self.check_overlay()?;
        self.check_role()?;
        self.check_work_digest()?;
        self.check_cgroup()
    }

    /// A snapshot's digest is a sha256 as the digest role writes it, and only an agent's read-only
    /// phase (nothing writes /work there) mounts a snapshot.
    fn check_work_digest(&self) -> Result<(), PolicyError> {
        let Some(digest) = &self.work_digest else {
            return Ok(());
        };
        let hex = digest.strip_prefix("sha256:").unwrap_or("");
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad(format!(
                "work digest {digest:?} is not sha256:<64 hex>"
            )));
        }
        if self.role != Role::Agent || self.phase.work_writable() {
            return Err(bad(format!(
                "a snapshot is mounted by a read-only phase's agent only, not {:?} in {}",
                self.role, self.phase
            )));
        }
        Ok(())
    }

    /// Only a command's policy has exec trees or an overlay, and it mounts nothing of its agent's.
    fn check_role(&self) -> Result<(), PolicyError> {
        if self.role == Role::Command {
            if let Some(m) = self.mounts.iter().find(|m| {
                crate::paths::AGENT_ONLY_DIRS
                    .iter()
                    .any(|d| m.path == *d || m.path.starts_with(&format!("{d}/")))
            }) {
                return Err(bad(format!(
                    "a command's policy mounts its agent's {}",
                    m.path
                )));
            }
            return Ok(());
        }
        if !self.landlock.exec_trees.is_empty() || self.overlay.is_some() {
            return Err(bad("only a command's policy has exec trees or an overlay"));
        }
        Ok(())
    }

    /// An overlay lies on /work over a covered read-only rule, as an overlay mount the workload
    /// writes, with its area a bounded writable tmpfs outside /work that Landlock does not grant,
    /// and carries only mounts beneath /work. Without one, nothing is covered.
    fn check_overlay(&self) -> Result<(), PolicyError> {
        let Some(overlay) = &self.overlay else {
            if self.mounts.iter().any(|m| m.covered) {
                return Err(bad("a covered mount without an overlay"));
            }
            return Ok(());
        };
        let work = crate::paths::WORK;
        let rules: Vec<&MountRule> = self
            .mounts
            .iter()
            .filter(|m| m.path == work && !m.beneath)
            .collect();
        let laid = matches!(rules.as_slice(), [lower, upper]
            if lower.covered
                && upper.access == Access::Writable
                && upper.fstype.as_deref() == Some("overlay"));
        let area = self
            .mounts
            .iter()
            .find(|m| m.path == overlay.area && !m.beneath && !m.covered);
        let area_ok = area.is_some_and(|a| {
            a.access == Access::Writable
                && a.bounded.is_some()
                && a.fstype.as_deref() == Some("tmpfs")
        });
        let inside_work = |p: &str| p == work || p.starts_with(&format!("{work}/"));
        let carried_ok = overlay.carried.iter().all(|c| {
            is_clean_absolute(c)
                && c.starts_with(&format!("{work}/"))
                && self.mounts.iter().any(|m| m.path == *c && !m.beneath)
        });
        if overlay.target != work
            || !laid
            || !area_ok
            || !is_clean_absolute(&overlay.area)
            || inside_work(&overlay.area)
            || self.landlock.write.contains(&overlay.area)
            || !carried_ok
        {
            return Err(bad(format!(
                "overlay {overlay:?} is not a {work} overlay over its read-only volume on a bounded, ungranted tmpfs"
            )));
        }
        Ok(())
    }

    fn check_version(&self) -> Result<(), PolicyError> {
        if self.version != POLICY_VERSION {
            return Err(bad(format!(
                "policy version {} is not {POLICY_VERSION}",
                self.version
            )));
        }
        Ok(())
    }

    fn check_start_capabilities(&self) -> Result<(), PolicyError> {
        if self.start_capabilities.iter().any(|c| *c >= 64) {
            return Err(bad("a start capability is not a capability number"));
        }
        Ok(())
    }

    fn check_masked(&self) -> Result<(), PolicyError> {
        for path in &self.masked {
            if !is_clean_absolute(path) {
                return Err(bad(format!("masked path {path:?} is not clean")));
            }
        }
        Ok(())
    }

    fn check_hostname(&self) -> Result<(), PolicyError> {
        if self.hostname.is_empty()
            || !self
                .hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(bad(format!(
                "hostname {:?} is not a plain name",
                self.hostname
            )));
        }
        Ok(())
    }

    /// Every entry `KEY=VALUE`, no NUL, no key twice.
    fn check_env(&self) -> Result<(), PolicyError> {
        let mut keys = std::collections::BTreeSet::new();
        for entry in &self.env {
            let Some((key, _)) = entry.split_once('=') else {
                return Err(bad(format!("env entry {entry:?} has no '='")));
            };
            if key.is_empty() || entry.contains('\0') || !keys.insert(key) {
                return Err(bad(format!(
                    "env entry {entry:?} is empty, has NUL or repeats a key"
                )));
            }
        }
        Ok(())
    }

    fn check_cwd(&self) -> Result<(), PolicyError> {
        if !is_clean_absolute(&self.cwd) {
            return Err(bad(format!(
                "cwd {:?} is not a clean absolute path",
                self.cwd
            )));
        }
        Ok(())
    }

    /// Every mount rule's path clean and given once (per `beneath`); a bounded area non-empty
    /// and one the agent writes (a writable mount, or the work tree).
    fn check_mounts(&self) -> Result<(), PolicyError> {
        let mut paths = std::collections::BTreeSet::new();
        for (i, rule) in self.mounts.iter().enumerate() {
            if rule.covered {
                // A covered mount is read-only and the very next rule covers it.
                let next = self.mounts.get(i + 1);
                let covered_by_next = next.is_some_and(|n| n.path == rule.path && !n.covered);
                if rule.beneath || rule.access != Access::ReadOnly || !covered_by_next {
                    return Err(bad(format!(
                        "covered mount {:?} is not read-only and covered by the next rule",
                        rule.path
                    )));
                }
            }
            let key = (rule.path.as_str(), rule.beneath, rule.covered);
            if !is_clean_absolute(&rule.path) || !paths.insert(key) {
                return Err(bad(format!(
                    "mount path {:?} is unclean or repeated",
                    rule.path
                )));
            }
            if let Some(b) = rule.bounded {
                if b.bytes == 0
                    || b.inodes == 0
                    || !rule.writable() && rule.path != crate::paths::WORK
                {
                    return Err(bad(format!(
                        "bounded area {:?} is empty or not an agent area",
                        rule.path
                    )));
                }
            }
        }
        Ok(())
    }

    /// A known ABI, every path clean, and every write grant backed by a writable mount.
    fn check_landlock(&self) -> Result<(), PolicyError> {
        let ll = &self.landlock;
        if !LANDLOCK_ABI_RANGE.contains(&ll.abi) {
            return Err(bad(format!(
                "Landlock ABI {} is outside {LANDLOCK_ABI_RANGE:?}",
                ll.abi
            )));
        }
        for path in ll
            .read
            .iter()
            .chain(&ll.write)
            .chain(&ll.devices)
            .chain(&ll.exec)
            .chain(&ll.exec_trees)
        {
            if !is_clean_absolute(path) {
                return Err(bad(format!(
                    "Landlock path {path:?} is not a clean absolute path"
                )));
            }
        }
        for path in &ll.write {
            let backed = self
                .mounts
                .iter()
                .any(|m| m.path == *path && !m.covered && m.writable());
            if !backed {
                return Err(bad(format!(
                    "Landlock write grant {path:?} is not a writable mount of the policy"
                )));
            }
        }
        Ok(())
    }

    /// A command, its argv[0] on the exec allowlist (or, for an approved command, beneath an
    /// exec tree: its argv[0] may be a link the allowlist holds the target of), no NUL anywhere.
    fn check_command(&self) -> Result<(), PolicyError> {
        let Some(argv0) = self.command.first() else {
            return Err(bad("command is empty"));
        };
        let beneath_tree = self
            .landlock
            .exec_trees
            .iter()
            .any(|t| t == "/" || argv0.starts_with(&format!("{t}/")));
        if !self.landlock.exec.contains(argv0) && !beneath_tree {
            return Err(bad(format!(
                "command {argv0:?} is not on the exec allowlist"
            )));
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return Err(bad("command has a NUL byte"));
        }
        Ok(())
    }

    fn check_timing(&self) -> Result<(), PolicyError> {
        if self.deadline_ms == 0 || self.grace_ms == 0 {
            return Err(bad("deadline and grace must be positive"));
        }
        Ok(())
    }

    /// Only what the init checks can be left out of its checks.
    fn check_skip(&self) -> Result<(), PolicyError> {
        if let Some(id) = self.skip.iter().find(|id| !id.layers().init) {
            return Err(bad(format!(
                "{id} cannot be skipped: the init does not check it"
            )));
        }
        Ok(())
    }

    /// The egress forwarder: a port, and a socket directly in the egress directory.
    fn check_egress(&self) -> Result<(), PolicyError> {
        if let Some(egress) = &self.egress {
            let in_dir = egress
                .socket
                .strip_prefix(crate::paths::EGRESS_DIR)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|name| !name.is_empty() && !name.contains('/'));
            if egress.port == 0 || !is_clean_absolute(&egress.socket) || !in_dir {
                return Err(bad(format!(
                    "egress forwarder {egress:?} needs a port and a socket directly in {}",
                    crate::paths::EGRESS_DIR
                )));
            }
        }
        Ok(())
    }

    fn check_cgroup(&self) -> Result<(), PolicyError> {
        let c = self.cgroup;
        if c.pids_max == 0 || c.memory_bytes == 0 || c.cpu_quota_us == 0 || c.cpu_period_us == 0 {
            return Err(bad("cgroup limits must be positive"));
        }
        Ok(())
    }
}

impl Policy {
    /// The rules for the mounts at a mountpoint, in the order they were mounted: the covered rule
    /// then the rule covering it where the policy has both ([`MountRule::covered`]), else the one
    /// rule [`Policy::rule_for`] finds, else none. The n-th mount at the point is judged by the
    /// n-th rule; a mount beyond the last has none.
    pub fn rules_for(&self, mount_point: &str) -> Vec<&MountRule> {
        let exact: Vec<&MountRule> = self
            .mounts
            .iter()
            .filter(|r| !r.beneath && r.path == mount_point)
            .collect();
        if exact.is_empty() {
            self.rule_for(mount_point).into_iter().collect()
        } else {
            exact
        }
    }

    /// The rule for a mountpoint: an exact one, else one for the mounts beneath a path.
    pub fn rule_for(&self, mount_point: &str) -> Option<&MountRule> {
        self.mounts
            .iter()
            .find(|r| !r.beneath && r.path == mount_point)
            .or_else(|| {
                self.mounts.iter().find(|r| {
                    r.beneath
                        && mount_point
                            .strip_prefix(r.path.as_str())
                            .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
                })
            })
    }
}

/// `sha256:<hex>` of a policy file's exact bytes: what the attestation names.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The mounts the engine itself makes in every hardened container (measured on Docker 20.10 with
/// runc; cgroup v1 and v2). They may appear; anything not here or in the profile is refused.
pub fn engine_mount_rules() -> Vec<MountRule> {
    let mut rules = engine_filesystems();
    rules.extend(engine_read_only_paths());
    rules.extend(engine_masks());
    rules
}

/// A rule the engine's mounts meet: exactly at `path`, any filesystem, not required, unbounded.
fn engine_rule(path: &str, access: Access, flags: MountFlags, protection: Id) -> MountRule {
    MountRule {
        path: path.to_owned(),
        beneath: false,
        access,
        fstype: None,
        flags,
        protection,
        required: false,
        bounded: None,
        covered: false,
    }
}

/// The filesystems the engine mounts: the image's root, /proc, /dev and its pts and mqueue,
/// /sys and its cgroups.
fn engine_filesystems() -> Vec<MountRule> {
    // The engine's device mounts must keep device nodes working; everything else is ALL.
    let no_exec_suid = MountFlags {
        nosuid: true,
        noexec: true,
        nodev: false,
    };
    vec![
        MountRule {
            required: true,
            // The image's root is the one mount that holds executables.
            ..engine_rule("/", Access::ReadOnly, MountFlags::NONE, Id::RootfsReadonly)
        },
        MountRule {
            required: true,
            fstype: Some("proc".into()),
            ..engine_rule(
                "/proc",
                Access::RootOwned,
                MountFlags::ALL,
                Id::NotPrivileged,
            )
        },
        MountRule {
            fstype: Some("tmpfs".into()),
            ..engine_rule("/dev", Access::RootOwned, no_exec_suid, Id::NoHostMounts)
        },
        MountRule {
            fstype: Some("devpts".into()),
            ..engine_rule(
                "/dev/pts",
                Access::RootOwned,
                no_exec_suid,
                Id::NoHostMounts,
            )
        },
        // POSIX message queues: world-writable (1777) but nosuid,nodev,noexec, in the container's
        // private IPC namespace, bounded by RLIMIT_MSGQUEUE.
        MountRule {
            fstype: Some("mqueue".into()),
            ..engine_rule(
                "/dev/mqueue",
                Access::Writable,
                MountFlags::ALL,
                Id::NoHostMounts,
            )
        },
        MountRule {
            fstype: Some("sysfs".into()),
            ..engine_rule("/sys", Access::ReadOnly, MountFlags::ALL, Id::NotPrivileged)
        },
        // cgroup v1: a root-owned tmpfs with one read-only hierarchy per controller beneath;
        // cgroup v2: one read-only cgroup2 mount.
        engine_rule(
            "/sys/fs/cgroup",
            Access::RootOwned,
            MountFlags::ALL,
            Id::NotPrivileged,
        ),
        MountRule {
            beneath: true,
            fstype: Some("cgroup".into()),
            ..engine_rule(
                "/sys/fs/cgroup",
                Access::ReadOnly,
                MountFlags::ALL,
                Id::NotPrivileged,
            )
        },
    ]
}

/// The files the engine binds in read-only (resolver, hostname, hosts), and the parts of /proc
/// it makes read-only.
fn engine_read_only_paths() -> Vec<MountRule> {
    let mut rules = Vec::new();
    for path in ["/etc/resolv.conf", "/etc/hostname", "/etc/hosts"] {
        rules.push(engine_rule(
            path,
            Access::ReadOnly,
            MountFlags::ALL,
            Id::RootfsReadonly,
        ));
    }
    for path in [
        "/proc/bus",
        "/proc/fs",
        "/proc/irq",
        "/proc/sys",
        "/proc/sysrq-trigger",
    ] {
        rules.push(engine_rule(
            path,
            Access::ReadOnly,
            MountFlags::ALL,
            Id::NotPrivileged,
        ));
    }
    rules
}

/// The engine's masks and cordon's own.
fn engine_masks() -> Vec<MountRule> {
    let mut rules = Vec::new();
    // A masked file is a bind of the engine's /dev/null and a masked directory an empty
    // read-only tmpfs: neither can hold anything to map, so no flag is asked of them.
    for path in ENGINE_MASKED_PATHS {
        rules.push(engine_rule(
            path,
            Access::Masked,
            MountFlags::NONE,
            Id::NotPrivileged,
        ));
    }
    for path in CORDON_MASKED_PATHS {
        rules.push(engine_rule(
            path,
            Access::Masked,
            MountFlags::NONE,
            Id::HostInfoMasked,
        ));
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_paths() {
        for ok in ["/", "/work", "/work/.git", "/run/cordon/control"] {
            assert!(is_clean_absolute(ok), "{ok}");
        }
        for bad in [
            "",
            "work",
            "/work/",
            "//work",
            "/work/../etc",
            "/./x",
            "/a,b",
            "/a\nb",
            "/a\0b",
        ] {
            assert!(!is_clean_absolute(bad), "{bad:?}");
        }
    }

    #[test]
    fn engine_rules_are_consistent() {
        let rules = engine_mount_rules();
        let mut seen = std::collections::BTreeSet::new();
        for r in &rules {
            assert!(is_clean_absolute(&r.path));
            assert!(seen.insert((r.path.clone(), r.beneath)));
            assert!(r.bounded.is_none());
        }
    }

    #[test]
    fn oversized_policy_is_refused() {
        let big = vec![b' '; MAX_POLICY_BYTES + 1];
        assert!(Policy::from_bytes(&big).is_err());
    }
}

#[cfg(test)]
mod consistency_tests {
    use super::*;
    use crate::{Phase, Vendor};

    fn policy() -> Policy {
        let mut mounts = engine_mount_rules();
        mounts.push(MountRule::required(
            "/tmp",
            Access::Writable,
            Id::WritableNosuidNodevNoexec,
            Some("tmpfs"),
            Some(Bounded {
                bytes: 4096,
                inodes: 2,
                bytes_id: Id::TmpBytes,
                inodes_id: Id::TmpInodes,
            }),
        ));
        Policy {
            version: POLICY_VERSION,
            phase: Phase::Planning,
            vendor: Vendor::Claude,
            uid: 10001,
            gid: 10001,
            start_capabilities: crate::capabilities::start_capability_numbers(),
            hostname: "cordon".into(),
            env: vec!["PATH=/usr/bin".into()],
            cwd: "/work".into(),
            mounts,
            landlock: LandlockPolicy {
                abi: 6,
                read: vec!["/".into()],
                write: vec!["/tmp".into()],
                devices: vec!["/dev/null".into()],
                exec: vec!["/usr/bin/claude".into()],
                pins: vec![],
                exec_trees: vec![],
            },
            sockets: SocketPolicy::agent(),
            masked: CORDON_MASKED_PATHS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            cgroup: CgroupLimits {
                pids_max: 1,
                memory_bytes: 1,
                cpu_quota_us: 1,
                cpu_period_us: 1,
            },
            command: vec!["/usr/bin/claude".into()],
            deadline_ms: 1,
            grace_ms: 1,
            skip: vec![],
            egress: None,
            sentinel: None,
            overlay: None,
            work_digest: None,
            role: Default::default(),
        }
    }

    #[test]
    fn a_consistent_policy_round_trips() {
        let p = policy();
        assert_eq!(Policy::from_bytes(&p.to_bytes()).unwrap(), p);
    }

    #[test]
    fn inconsistent_policies_are_refused() {
        type Change = Box<dyn Fn(&mut Policy)>;
        let changes: Vec<Change> = vec![
            Box::new(|p| p.version = 2),
            Box::new(|p| p.start_capabilities.push(64)),
            Box::new(|p| p.masked.push("/proc/../etc".into())),
            Box::new(|p| p.hostname = "a b".into()),
            Box::new(|p| p.env.push("PATH=/bin".into())),
            Box::new(|p| p.env.push("NOEQUALS".into())),
            Box::new(|p| p.cwd = "work".into()),
            Box::new(|p| p.landlock.write.push("/etc".into())),
            Box::new(|p| p.landlock.exec.push("/usr/../bin/sh".into())),
            Box::new(|p| p.landlock.abi = 9),
            Box::new(|p| p.command = vec!["/bin/sh".into()]),
            Box::new(|p| p.command.clear()),
            Box::new(|p| p.deadline_ms = 0),
            Box::new(|p| p.cgroup.pids_max = 0),
            Box::new(|p| p.skip = vec![Id::ProfileDrift]),
            Box::new(|p| {
                let dup = p.mounts[0].clone();
                p.mounts.push(dup);
            }),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut p = policy();
            change(&mut p);
            assert!(p.check().is_err(), "change {i} was accepted");
            assert!(
                Policy::from_bytes(&serde_json::to_vec(&p).unwrap()).is_err(),
                "change {i}"
            );
        }
        assert!(Policy::from_bytes(br#"{"version":1,"unknown":true}"#).is_err());
    }

    fn bounded(bytes_id: Id, inodes_id: Id) -> Option<Bounded> {
        Some(Bounded {
            bytes: 4096,
            inodes: 2,
            bytes_id,
            inodes_id,
        })
    }

    /// An approved command that writes nothing to the volume: /work read-only and covered by the
    /// overlay laid on a bounded area, its metadata carried onto it, an exec-capable /tmp.
    fn command_policy() -> Policy {
        let mut p = policy();
        p.mounts.retain(|m| m.path != crate::paths::TMP);
        let mut lower = MountRule::required(
            crate::paths::WORK,
            Access::ReadOnly,
            Id::WorkReadonly,
            Some("tmpfs"),
            None,
        );
        lower.covered = true;
        p.mounts.extend([
            lower,
            MountRule::required(
                crate::paths::WORK,
                Access::Writable,
                Id::WritableNosuidNodevNoexec,
                Some("overlay"),
                bounded(Id::WorkBytes, Id::WorkInodes),
            ),
            MountRule::required(
                crate::paths::METADATA,
                Access::ReadOnly,
                Id::MetadataReadonly,
                Some("tmpfs"),
                None,
            ),
            MountRule::required(
                crate::paths::TMP,
                Access::WritableExec,
                Id::WritableNosuidNodevNoexec,
                Some("tmpfs"),
                bounded(Id::TmpBytes, Id::TmpInodes),
            ),
            MountRule::required(
                crate::paths::OVERLAY_AREA,
                Access::Writable,
                Id::WritableNosuidNodevNoexec,
                Some("tmpfs"),
                bounded(Id::WorkBytes, Id::WorkInodes),
            ),
        ]);
        p.start_capabilities.extend(
            crate::capabilities::OVERLAY_CAPABILITIES
                .iter()
                .map(|c| c.1),
        );
        p.landlock.write = vec![crate::paths::TMP.into(), crate::paths::WORK.into()];
        p.landlock.exec_trees = vec!["/".into()];
        p.role = Role::Command;
        p.overlay = Some(WorkOverlay {
            target: crate::paths::WORK.into(),
            area: crate::paths::OVERLAY_AREA.into(),
            carried: vec![crate::paths::METADATA.into()],
        });
        p
    }

    /// The error `change` makes of the command policy (it must be refused).
    fn refusal(change: impl Fn(&mut Policy)) -> String {
        let mut p = command_policy();
        change(&mut p);
        let e = p.check().expect_err("must be refused").0;
        assert!(Policy::from_bytes(&serde_json::to_vec(&p).unwrap()).is_err());
        e
    }

    fn work_rules(p: &Policy) -> Vec<usize> {
        (0..p.mounts.len())
            .filter(|i| p.mounts[*i].path == crate::paths::WORK)
            .collect()
    }

    #[test]
    fn a_command_overlay_over_its_covered_volume_passes_and_round_trips() {
        let p = command_policy();
        p.check().expect("consistent");
        assert_eq!(Policy::from_bytes(&p.to_bytes()).unwrap(), p);
        // The two rules at /work are the covered one, then its cover.
        let rules = p.rules_for(crate::paths::WORK);
        assert_eq!(rules.len(), 2);
        assert!(rules[0].covered && rules[0].access == Access::ReadOnly);
        assert!(!rules[1].covered && rules[1].fstype.as_deref() == Some("overlay"));
        // One rule elsewhere, a beneath rule for what lies beneath, none off the list.
        assert_eq!(p.rules_for(crate::paths::TMP).len(), 1);
        assert_eq!(p.rules_for("/sys/fs/cgroup/pids").len(), 1);
        assert!(p.rules_for("/mnt").is_empty());
    }

    /// Exec trees and an overlay are a command's alone, and a command's policy mounts nothing of
    /// its agent's (the relay's socket dir, the egress dir, or anything beneath them).
    #[test]
    fn only_a_command_has_its_differences_and_none_of_the_agents_dirs() {
        let e = refusal(|p| p.role = Role::Agent);
        assert!(e.contains("only a command's policy"), "{e}");
        let mut agent = policy();
        agent.landlock.exec_trees = vec!["/".into()];
        assert!(agent.check().is_err());
        for dir in [
            crate::command::SOCKET_DIR.to_owned(),
            crate::paths::EGRESS_DIR.to_owned(),
            format!("{}/inner", crate::command::SOCKET_DIR),
        ] {
            let e = refusal(|p| {
                p.mounts.push(MountRule::required(
                    &dir,
                    Access::ReadOnly,
                    Id::CommandIsolated,
                    Some("tmpfs"),
                    None,
                ))
            });
            assert!(e.contains("mounts its agent's"), "{dir}: {e}");
        }
    }

    #[test]
    fn an_overlay_without_a_covered_rule_is_refused() {
        let e = refusal(|p| {
            let lower = work_rules(p)[0];
            p.mounts.remove(lower);
        });
        assert!(e.contains("is not a /work overlay"), "{e}");
    }

    #[test]
    fn a_covered_rule_not_followed_by_its_cover_is_refused() {
        // The cover first, then the covered rule: nothing follows the covered one at /work.
        let e = refusal(|p| {
            let at = work_rules(p);
            p.mounts.swap(at[0], at[1]);
        });
        assert!(e.contains("covered by the next rule"), "{e}");
        // Another rule between them.
        let e = refusal(|p| {
            let cover = work_rules(p)[1];
            let other = p.mounts.remove(cover + 1);
            p.mounts.insert(cover, other);
        });
        assert!(e.contains("covered by the next rule"), "{e}");
        // A covered rule that is not read-only.
        let e = refusal(|p| {
            let lower = work_rules(p)[0];
            p.mounts[lower].access = Access::Writable;
        });
        assert!(e.contains("covered by the next rule"), "{e}");
    }

    #[test]
    fn a_covered_rule_without_an_overlay_is_refused() {
        let e = refusal(|p| p.overlay = None);
        assert!(e.contains("a covered mount without an overlay"), "{e}");
    }

    #[test]
    fn an_overlay_area_inside_work_is_refused() {
        let move_area = |p: &mut Policy, to: &str| {
            for m in p.mounts.iter_mut() {
                if m.path == crate::paths::OVERLAY_AREA {
                    m.path = to.to_owned();
                }
            }
            if let Some(o) = p.overlay.as_mut() {
                o.area = to.to_owned();
            }
        };
        // Moved elsewhere outside /work, the area still passes: only its place is refused.
        let mut elsewhere = command_policy();
        move_area(&mut elsewhere, "/run/cordon/layer");
        elsewhere.check().expect("an area outside /work");
        let e = refusal(|p| move_area(p, "/work/.overlay"));
        assert!(e.contains("is not a /work overlay"), "{e}");
    }

    #[test]
    fn an_overlay_area_granted_to_landlock_write_is_refused() {
        let e = refusal(|p| p.landlock.write.push(crate::paths::OVERLAY_AREA.into()));
        assert!(e.contains("is not a /work overlay"), "{e}");
    }
}
