//! Judge: a pure function from the policy and the observations to the ordered verdicts. The first
//! failing check refuses; its id, the expected and the observed value go into the refusal line.
//!
//! The order is part of the contract: a container with exactly one protection removed must be
//! refused with that protection's id, so checks whose observations overlap are ordered from the
//! most specific cause to the most general (privileged before capabilities, the Docker socket
//! before unknown mounts, a TTY before stdin).

use cordon_contract::capabilities::{all_capabilities, capability_mask, holds_engine_defaults};
use cordon_contract::policy::{
    Access, MountFlags, MountRule, Policy, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS,
};
use cordon_contract::procfs::{MountEntry, Status};
use cordon_contract::{engine_socket, seccomp, Id, Refusal};

use crate::observe::{Observations, PathFacts};

fn refuse(check: Id, expected: impl Into<String>, observed: impl Into<String>) -> Refusal {
    Refusal::new(check, expected, observed)
}

/// Unwrap an observation or refuse with `check` and the read error.
fn seen<'a, T>(check: Id, what: &str, obs: &'a Result<T, String>) -> Result<&'a T, Refusal> {
    obs.as_ref()
        .map_err(|e| refuse(check, format!("{what} readable"), e.clone()))
}

/// One named check: the ids it passed, or the first refusal.
type Check = fn(&Policy, &Observations) -> Result<Vec<Id>, Refusal>;

/// The preflight, in order. The order is part of the contract (see the module docs): the start
/// state (before the init's own steps) is judged before what those steps produced, so a container
/// started without the init's capabilities is refused as `init-privileges`, not as whatever step
/// could not run.
const CHECKS: &[(&str, Check)] = &[
    ("pid 1", pid_one),
    ("nothing inherited", inherited),
    ("private namespaces", namespaces),
    ("not privileged", not_privileged),
    ("start privileges", start_privileges),
    ("identity", identity),
    ("capabilities dropped", capabilities_dropped),
    ("terminal and stdin", terminal_and_stdin),
    ("the engine's no_new_privs and seccomp", engine_restrictions),
    ("network", network),
    ("mounts", mounts),
    ("engine masks", engine_masks),
    ("host files masked", host_files_masked),
    ("environment", environment),
    ("cgroup limits", cgroup_limits),
    ("exec allowlist", exec_allowlist),
    ("socket families", socket_families),
    ("sealed", sealed),
];

/// Run every preflight check in order. Returns the ids that passed. A check that fails with a
/// protection the policy skips (the gate's probe layer only) is passed over, not counted.
pub fn preflight(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mut passed = Vec::new();
    for (_, check) in CHECKS {
        match check(policy, obs) {
            Ok(ids) => {
                for id in ids {
                    if !passed.contains(&id) && !policy.skip.contains(&id) {
                        passed.push(id);
                    }
                }
            }
            Err(refusal) if policy.skip.contains(&refusal.id) => {}
            Err(refusal) => return Err(refusal),
        }
    }
    Ok(passed)
}

/// PID 1, and not under Docker's own init.
fn pid_one(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    if obs.pid == 1 {
        return Ok(vec![Id::InitEntrypoint]);
    }
    let id = if obs.ppid == 1 {
        Id::InitEntrypoint
    } else {
        Id::HostNamespaces
    };
    Err(refuse(
        id,
        "pid 1",
        format!(
            "pid {} ppid {} (pid 1 is {:?})",
            obs.pid, obs.ppid, obs.pid1_cmdline
        ),
    ))
}

/// Nothing inherited: only fds 0-2, and a cwd inside the container.
fn inherited(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    if !obs.extra_fds.is_empty() {
        return Err(refuse(
            Id::FdHygiene,
            "only fds 0-2 open",
            obs.extra_fds.join(", "),
        ));
    }
    let cwd = seen(Id::FdHygiene, "cwd", &obs.cwd)?;
    if !cwd.starts_with('/') {
        return Err(refuse(Id::FdHygiene, "a reachable cwd", cwd.clone()));
    }
    Ok(vec![Id::FdHygiene])
}

/// Private cgroup and UTS namespaces.
fn namespaces(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let cgroup = seen(Id::HostNamespaces, "/proc/self/cgroup", &obs.cgroup)?;
    if let Some(line) = cgroup.iter().find(|l| !l.ends_with(":/")) {
        return Err(refuse(
            Id::HostNamespaces,
            "a private cgroup namespace (every path /)",
            line.clone(),
        ));
    }
    let hostname = seen(Id::HostNamespaces, "hostname", &obs.hostname)?;
    if *hostname != policy.hostname {
        return Err(refuse(
            Id::HostNamespaces,
            format!("hostname {}", policy.hostname),
            format!("hostname {hostname}"),
        ));
    }
    Ok(vec![Id::HostNamespaces])
}

/// Privileged: every capability in the start bounding set, or a writable /sys.
fn not_privileged(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let start = seen(Id::NotPrivileged, "/proc/self/status at start", &obs.start)?;
    let last = *seen(Id::NotPrivileged, "cap_last_cap", &obs.cap_last_cap)?;
    let full = all_capabilities(last);
    let mounts = seen(Id::NoHostMounts, "/proc/self/mountinfo", &obs.mounts)?;
    let sys_rw = mounts
        .iter()
        .any(|m| m.mount_point == "/sys" && !m.read_only());
    if start.cap_bnd == full || sys_rw {
        return Err(refuse(
            Id::NotPrivileged,
            "a partial bounding set and a read-only /sys",
            format!(
                "CapBnd {:016x} (full {full:016x}), /sys writable: {sys_rw}",
                start.cap_bnd
            ),
        ));
    }
    Ok(vec![Id::NotPrivileged])
}

/// The start state: uid 0 holding exactly the policy's start capabilities (bounding, permitted
/// and effective), nothing inheritable or ambient. Docker's whole default set means `CapDrop:
/// ALL` is missing; anything beyond the start set means a `CapAdd`.
fn start_privileges(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let start = seen(Id::InitPrivileges, "/proc/self/status at start", &obs.start)?;
    let want = capability_mask(&policy.start_capabilities);
    let sets = |s: &Status| format!("uid {:?} {}", s.uid, s.describe_capabilities());
    let expected = format!("uid 0 with exactly CapBnd=CapPrm=CapEff {want:x}");
    if holds_engine_defaults(start.cap_bnd) {
        return Err(refuse(Id::CapsDropped, expected, sets(start)));
    }
    if start.cap_bnd & !want != 0 {
        return Err(refuse(Id::CapAdded, expected, sets(start)));
    }
    let exact = start.uid.iter().all(|u| *u == 0)
        && start.cap_bnd == want
        && start.cap_prm == want
        && start.cap_eff == want
        && start.cap_inh == 0
        && start.cap_amb == 0;
    if !exact {
        return Err(refuse(Id::InitPrivileges, expected, sets(start)));
    }
    Ok(vec![Id::CapsDropped, Id::CapAdded, Id::InitPrivileges])
}

/// After the switch: every uid and gid the policy's (never 0), no supplementary group.
fn identity(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let status = seen(Id::NonRootUser, "/proc/self/status", &obs.status)?;
    let ids_ok = policy.uid != 0
        && policy.gid != 0
        && status.uid.len() == 4
        && status.uid.iter().all(|u| *u == policy.uid)
        && status.gid.len() == 4
        && status.gid.iter().all(|g| *g == policy.gid)
        && status.groups.is_empty();
    if !ids_ok {
        return Err(refuse(
            Id::NonRootUser,
            format!(
                "uid {} gid {} (not 0), no supplementary group",
                policy.uid, policy.gid
            ),
            format!(
                "uid {:?} gid {:?} groups {:?}{}",
                status.uid,
                status.gid,
                status.groups,
                obs.dropped
                    .as_ref()
                    .err()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(vec![Id::NonRootUser])
}

/// After the drop: all five capability sets empty.
fn capabilities_dropped(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let status = seen(Id::InitPrivileges, "/proc/self/status", &obs.status)?;
    if status.capability_sets().iter().any(|s| *s != 0) || obs.dropped.is_err() {
        return Err(refuse(
            Id::InitPrivileges,
            "CapInh CapPrm CapEff CapBnd CapAmb all 0 after the init's drop",
            format!(
                "{}{}",
                status.describe_capabilities(),
                obs.dropped
                    .as_ref()
                    .err()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(vec![Id::InitPrivileges])
}

/// No terminal, then stdin is /dev/null.
fn terminal_and_stdin(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    if !obs.ttys.is_empty() {
        return Err(refuse(
            Id::NoTty,
            "no terminal on fds 0-2",
            format!("terminal on fds {:?}", obs.ttys),
        ));
    }
    if obs.stdin.kind != "char" || obs.stdin.rdev != Some((1, 3)) {
        return Err(refuse(
            Id::StdinClosed,
            "fd 0 is /dev/null (char 1:3)",
            format!("fd 0 is {} {:?}", obs.stdin.kind, obs.stdin.rdev),
        ));
    }
    Ok(vec![Id::NoTty, Id::StdinClosed])
}

/// Set by the engine before the init ran.
fn engine_restrictions(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let start = seen(
        Id::NoNewPrivileges,
        "/proc/self/status at start",
        &obs.start,
    )?;
    if start.no_new_privs != 1 {
        return Err(refuse(
            Id::NoNewPrivileges,
            "NoNewPrivs 1",
            format!("NoNewPrivs {}", start.no_new_privs),
        ));
    }
    if start.seccomp != 2 {
        return Err(refuse(
            Id::SeccompDefault,
            "Seccomp 2 (filter)",
            format!("Seccomp {}", start.seccomp),
        ));
    }
    Ok(vec![Id::NoNewPrivileges, Id::SeccompDefault])
}

/// No network but loopback.
fn network(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let ifaces = seen(Id::NetworkNone, "/proc/net/dev", &obs.interfaces)?;
    if ifaces.iter().any(|i| i != "lo") {
        return Err(refuse(
            Id::NetworkNone,
            "interfaces [lo]",
            format!("interfaces {ifaces:?}"),
        ));
    }
    Ok(vec![Id::NetworkNone])
}

fn mounts(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mounts = seen(Id::NoHostMounts, "/proc/self/mountinfo", &obs.mounts)?;
    let mut passed = Vec::new();
    judge_mounts(policy, obs, mounts, &mut |id| passed.push(id))?;
    Ok(passed)
}

/// The engine's masked and read-only paths are in place wherever they exist (a missing one is
/// not a mount the mount check could miss: it is the kernel's own file).
fn engine_masks(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mounts = seen(Id::NoHostMounts, "/proc/self/mountinfo", &obs.mounts)?;
    let exists = |p: &str| obs.masked.get(p).copied().unwrap_or(true);
    for path in ENGINE_MASKED_PATHS.iter().chain(ENGINE_READONLY_PATHS) {
        let mounted = mounts.iter().any(|m| m.mount_point == *path);
        if exists(path) && !mounted {
            return Err(refuse(
                Id::NotPrivileged,
                format!("{path} masked or read-only"),
                format!("{path} is the kernel's own"),
            ));
        }
    }
    Ok(vec![Id::NotPrivileged])
}

/// Cordon's host-describing files are masked wherever they exist.
fn host_files_masked(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mounts = seen(Id::NoHostMounts, "/proc/self/mountinfo", &obs.mounts)?;
    for path in &policy.masked {
        let exists = obs.masked.get(path).copied().unwrap_or(true);
        if exists && !mounts.iter().any(|m| m.mount_point == *path) {
            return Err(refuse(
                Id::HostInfoMasked,
                format!("{path} masked"),
                format!("{path} is the kernel's own"),
            ));
        }
    }
    Ok(vec![Id::HostInfoMasked])
}

/// The environment is exactly the policy's.
fn environment(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mut want: Vec<&String> = policy.env.iter().collect();
    let mut have: Vec<&String> = obs.env.iter().collect();
    want.sort();
    have.sort();
    if want != have {
        let extra: Vec<&&String> = have.iter().filter(|e| !want.contains(e)).collect();
        let missing: Vec<&&String> = want.iter().filter(|e| !have.contains(e)).collect();
        // Values are never quoted: a leaked variable may be a secret.
        let key = |e: &&&String| e.split_once('=').map_or(e.as_str(), |(k, _)| k).to_owned();
        return Err(refuse(
            Id::EnvAllowlist,
            "the environment equals the policy's",
            format!(
                "unexpected {:?}, missing {:?}",
                extra.iter().map(key).collect::<Vec<_>>(),
                missing.iter().map(key).collect::<Vec<_>>()
            ),
        ));
    }
    Ok(vec![Id::EnvAllowlist])
}

fn cgroup_limits(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mut passed = Vec::new();
    judge_cgroup(policy, obs, &mut |id| passed.push(id))?;
    Ok(passed)
}

/// The exec allowlist names regular files nobody in here can change.
fn exec_allowlist(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    for path in &policy.landlock.exec {
        let facts = obs.paths.get(path).cloned().unwrap_or_default();
        if facts.kind != "file" || !facts.on_readonly_mount || facts.writable {
            return Err(refuse(
                Id::ExecAllowlist,
                format!("{path} is a regular file on a read-only mount"),
                format!(
                    "{path}: {} on a {} mount, writable: {}",
                    facts.kind,
                    if facts.on_readonly_mount {
                        "read-only"
                    } else {
                        "writable"
                    },
                    facts.writable
                ),
            ));
        }
    }
    Ok(vec![Id::ExecAllowlist])
}

/// The policy lets through no socket family beyond what the agent needs.
fn socket_families(policy: &Policy, _: &Observations) -> Result<Vec<Id>, Refusal> {
    let s = &policy.sockets;
    let extra: Vec<u32> = s
        .families
        .iter()
        .copied()
        .filter(|f| !seccomp::ALLOWED_FAMILIES.contains(f))
        .collect();
    let extra_netlink: Vec<u32> = s
        .netlink_protocols
        .iter()
        .copied()
        .filter(|p| !seccomp::ALLOWED_NETLINK_PROTOCOLS.contains(p))
        .collect();
    if !extra.is_empty() || !extra_netlink.is_empty() {
        return Err(refuse(
            Id::SocketFamilies,
            format!(
                "families within {:?}, netlink protocols within {:?}",
                seccomp::ALLOWED_FAMILIES,
                seccomp::ALLOWED_NETLINK_PROTOCOLS
            ),
            format!("also families {extra:?}, netlink protocols {extra_netlink:?}"),
        ));
    }
    Ok(vec![Id::SocketFamilies])
}

/// The init made itself non-dumpable.
fn sealed(_: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let dumpable = seen(Id::InitSealed, "PR_GET_DUMPABLE", &obs.dumpable)?;
    if obs.sealed.is_err() || *dumpable != 0 {
        return Err(refuse(
            Id::InitSealed,
            "PR_SET_DUMPABLE 0 took",
            format!(
                "dumpable {dumpable}{}",
                obs.sealed
                    .as_ref()
                    .err()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(vec![Id::InitSealed])
}

fn judge_mounts(
    policy: &Policy,
    obs: &Observations,
    mounts: &[MountEntry],
    pass: &mut impl FnMut(Id),
) -> Result<(), Refusal> {
    let root_ro = *seen(Id::RootfsReadonly, "statvfs(/)", &obs.root_readonly)?;
    if !root_ro {
        return Err(refuse(Id::RootfsReadonly, "/ read-only", "/ writable"));
    }
    pass(Id::RootfsReadonly);

    if obs.shm_present || mounts.iter().any(|m| m.mount_point == "/dev/shm") {
        return Err(refuse(Id::IpcNone, "no /dev/shm", "/dev/shm exists"));
    }
    pass(Id::IpcNone);

    let socket_mount = mounts
        .iter()
        .find(|m| engine_socket::is_socket_mountpoint(&m.mount_point))
        .map(|m| m.mount_point.clone());
    if !obs.daemon_sockets.is_empty() || socket_mount.is_some() {
        let mut found = obs.daemon_sockets.clone();
        found.extend(socket_mount);
        return Err(refuse(
            Id::NoDockerSocket,
            "no daemon socket",
            found.join(", "),
        ));
    }
    pass(Id::NoDockerSocket);

    // Root owns the engine's mounts: as root (the gate's non-root-user row only) they are
    // writable by their mode, and that is the identity's breach.
    let root = obs.status.as_ref().is_ok_and(|s| s.uid.contains(&0));
    let mut seen_points = std::collections::BTreeSet::new();
    for m in mounts {
        let Some(rule) = policy.rule_for(&m.mount_point) else {
            return Err(refuse(
                Id::NoHostMounts,
                "every mountpoint on the policy's list",
                m.line.clone(),
            ));
        };
        if !seen_points.insert(m.mount_point.as_str()) {
            return Err(refuse(
                Id::NoHostMounts,
                format!("one mount at {}", m.mount_point),
                m.line.clone(),
            ));
        }
        if let Some(fstype) = &rule.fstype {
            if *fstype != m.fstype {
                return Err(refuse(
                    Id::NoHostMounts,
                    format!("{} is {fstype}", m.mount_point),
                    m.line.clone(),
                ));
            }
        }
        let facts = obs.paths.get(&m.mount_point).cloned().unwrap_or_default();
        judge_access(rule, m, &facts, root)?;
    }
    // The flags last: a removal that makes a mount writable is named as that mount's protection
    // even where the flags differ too.
    for m in mounts {
        if let Some(rule) = policy.rule_for(&m.mount_point) {
            judge_flags(rule, m, &policy.skip, &obs.remount)?;
        }
    }
    for rule in policy.mounts.iter().filter(|r| r.required && !r.beneath) {
        if !seen_points.contains(rule.path.as_str()) {
            return Err(refuse(
                rule.protection,
                format!("a mount at {}", rule.path),
                "no such mount",
            ));
        }
    }
    let dev_extra = seen(Id::NoHostMounts, "/dev", &obs.dev_extra)?;
    if !dev_extra.is_empty() {
        return Err(refuse(
            Id::NoHostMounts,
            "only the standard /dev entries",
            format!("/dev also has {dev_extra:?}"),
        ));
    }
    for rule in &policy.mounts {
        let Some(b) = rule.bounded else { continue };
        let totals = obs.paths.get(&rule.path).and_then(|f| f.totals);
        let Some((bytes, inodes)) = totals else {
            return Err(refuse(
                b.bytes_id,
                format!("statfs of {}", rule.path),
                "statfs failed",
            ));
        };
        if bytes != b.bytes {
            return Err(refuse(
                b.bytes_id,
                format!("{} holds {} bytes", rule.path, b.bytes),
                format!("{bytes} bytes"),
            ));
        }
        if inodes != b.inodes {
            return Err(refuse(
                b.inodes_id,
                format!("{} holds {} inodes", rule.path, b.inodes),
                format!("{inodes} inodes"),
            ));
        }
        pass(b.bytes_id);
        pass(b.inodes_id);
    }
    for rule in &policy.mounts {
        pass(rule.protection);
    }
    pass(Id::WritableNosuidNodevNoexec);
    pass(Id::ContentNoexec);
    pass(Id::NoHostMounts);
    Ok(())
}

/// Read-only where the rule says so; an engine mount the agent cannot write; a mask that masks.
fn judge_access(
    rule: &MountRule,
    m: &MountEntry,
    facts: &PathFacts,
    root: bool,
) -> Result<(), Refusal> {
    match rule.access {
        Access::ReadOnly if !m.read_only() => Err(refuse(
            rule.protection,
            format!("{} read-only", m.mount_point),
            m.line.clone(),
        )),
        Access::RootOwned if !m.read_only() && facts.writable => Err(refuse(
            if root {
                Id::NonRootUser
            } else {
                rule.protection
            },
            format!("{} not writable by the agent", m.mount_point),
            m.line.clone(),
        )),
        Access::Masked if !m.read_only() && facts.rdev != Some((1, 3)) => Err(refuse(
            rule.protection,
            format!("{} masked (/dev/null or read-only)", m.mount_point),
            m.line.clone(),
        )),
        _ => Ok(()),
    }
}

/// The flags a rule asks for: every writable mount nosuid, nodev and noexec (the profile's
/// options give them); every other mount the rule's flags (the init's remount restores what the
/// engine's read-only remount strips). The image's root is the one mount that may hold executables.
fn judge_flags(
    rule: &MountRule,
    m: &MountEntry,
    skip: &[Id],
    remount_errors: &[String],
) -> Result<(), Refusal> {
    let writable = rule.access == Access::Writable && !m.read_only();
    let (need, id) = if writable {
        (MountFlags::ALL, Id::WritableNosuidNodevNoexec)
    } else {
        (rule.flags, Id::ContentNoexec)
    };
    if skip.contains(&id) {
        return Ok(());
    }
    let missing: Vec<&str> = [
        ("nosuid", need.nosuid),
        ("nodev", need.nodev),
        ("noexec", need.noexec),
    ]
    .into_iter()
    .filter(|(flag, needed)| *needed && !m.has(flag))
    .map(|(flag, _)| flag)
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let remount = remount_errors
        .iter()
        .find(|e| e.contains(&format!(" {}:", m.mount_point)))
        .map(|e| format!("; {e}"))
        .unwrap_or_default();
    Err(refuse(
        id,
        format!(
            "{} {}",
            m.mount_point,
            ["nosuid", "nodev", "noexec"]
                .into_iter()
                .zip([need.nosuid, need.nodev, need.noexec])
                .filter(|(_, n)| *n)
                .map(|(f, _)| f)
                .collect::<Vec<_>>()
                .join(",")
        ),
        format!("missing {}: {}{remount}", missing.join(","), m.line),
    ))
}

fn judge_cgroup(
    policy: &Policy,
    obs: &Observations,
    pass: &mut impl FnMut(Id),
) -> Result<(), Refusal> {
    let c = &obs.cgroup_limits;
    let want = policy.cgroup;
    let pids = seen(Id::PidsLimit, "pids.max", &c.pids_max)?;
    if *pids != want.pids_max.to_string() {
        return Err(refuse(
            Id::PidsLimit,
            format!("pids.max {}", want.pids_max),
            format!("pids.max {pids}"),
        ));
    }
    pass(Id::PidsLimit);
    let memory = seen(Id::MemoryLimit, "memory limit", &c.memory)?;
    let swap = seen(Id::MemoryLimit, "memory+swap limit", &c.swap)?;
    // v1 memsw is memory plus swap (equal to memory: no swap); v2 swap.max is swap alone.
    let want_swap = if c.version == 2 {
        "0".to_owned()
    } else {
        want.memory_bytes.to_string()
    };
    if *memory != want.memory_bytes.to_string() || *swap != want_swap {
        return Err(refuse(
            Id::MemoryLimit,
            format!("memory {} swap {want_swap}", want.memory_bytes),
            format!("memory {memory} swap {swap}"),
        ));
    }
    pass(Id::MemoryLimit);
    let cpu = seen(Id::CpuLimit, "cpu quota", &c.cpu)?;
    let want_cpu = format!("{} {}", want.cpu_quota_us, want.cpu_period_us);
    if *cpu != want_cpu {
        return Err(refuse(
            Id::CpuLimit,
            format!("quota/period {want_cpu}"),
            format!("quota/period {cpu}"),
        ));
    }
    pass(Id::CpuLimit);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    //! One good observation set, then one change per check: each must be refused with its own id.

    use std::collections::BTreeMap;

    use cordon_contract::capabilities::{self, ENGINE_DEFAULT_CAPS};
    use cordon_contract::policy::{self, Bounded, CgroupLimits, LandlockPolicy};
    use cordon_contract::{Phase, Vendor};

    use super::*;
    use crate::observe::CgroupObs;
    use cordon_contract::procfs::{parse_mountinfo, Status};

    const MOUNTINFO: &str = "\
71 46 0:39 / / ro,noatime - fuse.fuse-overlayfs fuse-overlayfs rw
72 71 0:42 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
73 71 0:43 / /dev rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755
74 73 0:44 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5
75 71 0:45 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
76 75 0:46 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
77 76 0:29 / /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
86 73 0:41 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw
87 71 0:40 / /work ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=8192k,nr_inodes=200
88 71 0:47 / /tmp rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=4096k,nr_inodes=100
89 87 0:48 / /work/.git ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
90 71 0:49 / /run/cordon/control ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
91 71 254:0 /h /etc/hosts ro,nosuid,nodev,noexec,relatime - ext4 /dev/vda rw
52 72 0:43 /null /proc/keys rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755
53 72 0:43 /null /proc/cmdline rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755
47 72 0:42 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
";

    fn rule(
        path: &str,
        access: Access,
        protection: Id,
        bounded: Option<Bounded>,
    ) -> policy::MountRule {
        policy::MountRule::required(path, access, protection, None, bounded)
    }

    pub(crate) fn good_policy() -> Policy {
        let mut mounts = policy::engine_mount_rules();
        mounts.push(rule(
            "/work",
            Access::ReadOnly,
            Id::WorkReadonly,
            Some(Bounded {
                bytes: 8 << 20,
                inodes: 200,
                bytes_id: Id::WorkBytes,
                inodes_id: Id::WorkInodes,
            }),
        ));
        mounts.push(rule(
            "/work/.git",
            Access::ReadOnly,
            Id::MetadataReadonly,
            None,
        ));
        mounts.push(rule(
            "/tmp",
            Access::Writable,
            Id::WritableNosuidNodevNoexec,
            Some(Bounded {
                bytes: 4 << 20,
                inodes: 100,
                bytes_id: Id::TmpBytes,
                inodes_id: Id::TmpInodes,
            }),
        ));
        mounts.push(rule(
            "/run/cordon/control",
            Access::ReadOnly,
            Id::ControlReadonly,
            None,
        ));
        Policy {
            version: policy::POLICY_VERSION,
            phase: Phase::Planning,
            vendor: Vendor::Claude,
            uid: 10001,
            gid: 10001,
            start_capabilities: capabilities::start_capability_numbers(),
            hostname: "cordon".into(),
            env: vec!["PATH=/usr/bin".into(), "HOSTNAME=cordon".into()],
            cwd: "/work".into(),
            mounts,
            landlock: LandlockPolicy {
                abi: 6,
                read: vec!["/".into()],
                write: vec!["/tmp".into()],
                devices: vec!["/dev/null".into()],
                exec: vec!["/usr/bin/claude".into()],
            },
            sockets: policy::SocketPolicy::agent(),
            masked: vec!["/proc/cmdline".into(), "/proc/modules".into()],
            cgroup: CgroupLimits {
                pids_max: 64,
                memory_bytes: 1 << 28,
                cpu_quota_us: 100_000,
                cpu_period_us: 100_000,
            },
            command: vec!["/usr/bin/claude".into()],
            deadline_ms: 1000,
            grace_ms: 100,
            skip: vec![],
        }
    }

    fn start_caps() -> u64 {
        capabilities::capability_mask(&good_policy().start_capabilities)
    }

    fn with_start(change: impl Fn(&mut Status)) -> impl Fn(&mut Observations) {
        move |o: &mut Observations| {
            if let Ok(s) = &mut o.start {
                change(s)
            }
        }
    }

    fn good_observations() -> Observations {
        let facts = |kind: &str, rdev, writable, ro, totals| PathFacts {
            kind: kind.into(),
            rdev,
            writable,
            on_readonly_mount: ro,
            totals,
        };
        Observations {
            pid: 1,
            ppid: 0,
            pid1_cmdline: "/sbin/cordon-init".into(),
            start: Ok(Status {
                uid: vec![0; 4],
                gid: vec![0; 4],
                cap_prm: start_caps(),
                cap_eff: start_caps(),
                cap_bnd: start_caps(),
                no_new_privs: 1,
                seccomp: 2,
                seccomp_filters: 1,
                ..Status::default()
            }),
            remount: vec![],
            dropped: Ok(()),
            sealed: Ok(()),
            dumpable: Ok(0),
            // /proc/modules does not exist here: it needs no mask. Of the engine's paths only
            // /proc/keys and /proc/sys exist (and are in MOUNTINFO).
            masked: ENGINE_MASKED_PATHS
                .iter()
                .chain(ENGINE_READONLY_PATHS)
                .map(|p| ((*p).to_owned(), ["/proc/keys", "/proc/sys"].contains(p)))
                .chain([
                    ("/proc/cmdline".to_owned(), true),
                    ("/proc/modules".to_owned(), false),
                ])
                .collect(),
            extra_fds: vec![],
            cwd: Ok("/work".into()),
            cgroup: Ok(vec!["8:pids:/".into(), "0::/".into()]),
            hostname: Ok("cordon".into()),
            status: Ok(Status {
                uid: vec![10001; 4],
                gid: vec![10001; 4],
                groups: vec![],
                no_new_privs: 1,
                seccomp: 2,
                seccomp_filters: 1,
                ..Status::default()
            }),
            cap_last_cap: Ok(40),
            ttys: vec![],
            stdin: facts("char", Some((1, 3)), true, false, None),
            interfaces: Ok(vec!["lo".into()]),
            root_readonly: Ok(true),
            mounts: parse_mountinfo(MOUNTINFO),
            shm_present: false,
            daemon_sockets: vec![],
            dev_extra: Ok(vec![]),
            paths: BTreeMap::from([
                (
                    "/work".into(),
                    facts("", None, false, false, Some((8 << 20, 200))),
                ),
                (
                    "/tmp".into(),
                    facts("", None, false, false, Some((4 << 20, 100))),
                ),
                (
                    "/proc/keys".into(),
                    facts("char", Some((1, 3)), true, false, None),
                ),
                (
                    "/proc/cmdline".into(),
                    facts("char", Some((1, 3)), true, false, None),
                ),
                (
                    "/usr/bin/claude".into(),
                    facts("file", None, false, true, None),
                ),
            ]),
            env: vec!["HOSTNAME=cordon".into(), "PATH=/usr/bin".into()],
            cgroup_limits: CgroupObs {
                version: 1,
                pids_max: Ok("64".into()),
                memory: Ok((1u64 << 28).to_string()),
                swap: Ok((1u64 << 28).to_string()),
                cpu: Ok("100000 100000".into()),
            },
        }
    }

    fn with_mount(line_match: &'static str, replace: &'static str) -> impl Fn(&mut Observations) {
        move |o: &mut Observations| {
            let text = MOUNTINFO.replace(line_match, replace);
            o.mounts = parse_mountinfo(&text);
        }
    }

    fn refused(change: impl Fn(&mut Observations)) -> Id {
        let mut o = good_observations();
        change(&mut o);
        preflight(&good_policy(), &o).expect_err("must refuse").id
    }

    #[test]
    fn the_good_observations_pass_every_check() {
        let passed = preflight(&good_policy(), &good_observations()).unwrap();
        for id in [
            Id::InitEntrypoint,
            Id::FdHygiene,
            Id::HostNamespaces,
            Id::NonRootUser,
            Id::NotPrivileged,
            Id::NoTty,
            Id::StdinClosed,
            Id::NoNewPrivileges,
            Id::SeccompDefault,
            Id::CapsDropped,
            Id::CapAdded,
            Id::NetworkNone,
            Id::RootfsReadonly,
            Id::IpcNone,
            Id::NoDockerSocket,
            Id::NoHostMounts,
            Id::WorkReadonly,
            Id::MetadataReadonly,
            Id::WorkBytes,
            Id::TmpInodes,
            Id::EnvAllowlist,
            Id::PidsLimit,
            Id::MemoryLimit,
            Id::CpuLimit,
            Id::ExecAllowlist,
            Id::InitPrivileges,
            Id::ContentNoexec,
            Id::HostInfoMasked,
            Id::SocketFamilies,
            Id::InitSealed,
        ] {
            assert!(passed.contains(&id), "{id} not passed");
        }
    }

    #[test]
    fn each_change_is_refused_with_its_own_id() {
        type Change = Box<dyn Fn(&mut Observations)>;
        let cases: Vec<(Id, Change)> = vec![
            (
                Id::InitEntrypoint,
                Box::new(|o| {
                    o.pid = 7;
                    o.ppid = 1;
                }),
            ),
            (
                Id::HostNamespaces,
                Box::new(|o| {
                    o.pid = 4242;
                    o.ppid = 4000;
                }),
            ),
            (
                Id::FdHygiene,
                Box::new(|o| o.extra_fds = vec!["3 -> /".into()]),
            ),
            (
                Id::FdHygiene,
                Box::new(|o| o.cwd = Ok("(unreachable)/x".into())),
            ),
            (
                Id::HostNamespaces,
                Box::new(|o| o.cgroup = Ok(vec!["8:pids:/docker/abc".into()])),
            ),
            (
                Id::HostNamespaces,
                Box::new(|o| o.hostname = Ok("host".into())),
            ),
            (
                Id::NonRootUser,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.uid = vec![0; 4]
                    }
                }),
            ),
            (
                Id::NonRootUser,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.groups = vec![10001]
                    }
                }),
            ),
            (
                Id::NotPrivileged,
                Box::new(with_start(|s| s.cap_bnd = (1 << 41) - 1)),
            ),
            (
                Id::InitPrivileges,
                Box::new(with_start(|s| {
                    s.uid = vec![10001; 4];
                    s.cap_eff = 0;
                    s.cap_prm = 0;
                })),
            ),
            (
                Id::InitPrivileges,
                Box::new(with_start(|s| s.cap_bnd &= !(1 << 21))),
            ),
            (
                Id::InitPrivileges,
                Box::new(with_start(|s| s.cap_amb = 1 << 21)),
            ),
            (
                Id::InitPrivileges,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.cap_bnd = 1 << 21
                    }
                }),
            ),
            (
                Id::InitPrivileges,
                Box::new(|o| o.dropped = Err("PR_CAPBSET_DROP 0: EPERM".into())),
            ),
            (
                Id::NotPrivileged,
                Box::new(with_mount("/sys ro,", "/sys rw,")),
            ),
            (Id::NoTty, Box::new(|o| o.ttys = vec![0, 1, 2])),
            (
                Id::StdinClosed,
                Box::new(|o| {
                    o.stdin = PathFacts {
                        kind: "fifo".into(),
                        ..PathFacts::default()
                    }
                }),
            ),
            (
                Id::NoNewPrivileges,
                Box::new(with_start(|s| s.no_new_privs = 0)),
            ),
            (
                Id::SeccompDefault,
                Box::new(with_start(|s| s.seccomp = 0)),
            ),
            (
                Id::CapsDropped,
                Box::new(with_start(|s| {
                    s.cap_bnd |= ENGINE_DEFAULT_CAPS;
                    s.cap_eff |= ENGINE_DEFAULT_CAPS;
                    s.cap_prm |= ENGINE_DEFAULT_CAPS;
                })),
            ),
            (
                Id::CapAdded,
                Box::new(with_start(|s| {
                    s.cap_bnd |= 1;
                    s.cap_eff |= 1;
                    s.cap_prm |= 1;
                })),
            ),
            (
                Id::ContentNoexec,
                Box::new(with_mount(
                    "/work/.git ro,nosuid,nodev,noexec,",
                    "/work/.git ro,",
                )),
            ),
            (
                Id::ContentNoexec,
                Box::new(with_mount(
                    "/run/cordon/control ro,nosuid,nodev,noexec,",
                    "/run/cordon/control ro,nosuid,nodev,",
                )),
            ),
            (
                Id::ContentNoexec,
                Box::new(with_mount("/dev rw,nosuid,noexec ", "/dev rw,nosuid ")),
            ),

            (
                Id::HostInfoMasked,
                Box::new(with_mount(
                    "53 72 0:43 /null /proc/cmdline rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755\n",
                    "",
                )),
            ),
            (
                Id::HostInfoMasked,
                Box::new(|o| {
                    o.masked.insert("/proc/modules".into(), true);
                }),
            ),
            (
                Id::NotPrivileged,
                Box::new(with_mount(
                    "47 72 0:42 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw\n",
                    "",
                )),
            ),
            (
                Id::NotPrivileged,
                Box::new(|o| {
                    o.masked.insert("/proc/kcore".into(), true);
                }),
            ),
            (Id::InitSealed, Box::new(|o| o.dumpable = Ok(1))),
            (
                Id::InitSealed,
                Box::new(|o| o.sealed = Err("PR_SET_DUMPABLE: EACCES".into())),
            ),
            (
                Id::NetworkNone,
                Box::new(|o| o.interfaces = Ok(vec!["lo".into(), "eth0".into()])),
            ),
            (
                Id::RootfsReadonly,
                Box::new(|o| o.root_readonly = Ok(false)),
            ),
            (Id::IpcNone, Box::new(|o| o.shm_present = true)),
            (
                Id::NoDockerSocket,
                Box::new(|o| o.daemon_sockets = vec!["/var/run/docker.sock".into()]),
            ),
            (
                Id::NoHostMounts,
                Box::new(with_mount(
                    "91 71 254:0 /h /etc/hosts",
                    "91 71 254:0 /h /mnt/host",
                )),
            ),
            (
                Id::NoHostMounts,
                Box::new(|o| o.dev_extra = Ok(vec!["fuse".into()])),
            ),
            (
                Id::WorkReadonly,
                Box::new(with_mount("/work ro,", "/work rw,")),
            ),
            (
                Id::MetadataReadonly,
                Box::new(with_mount("/work/.git ro,", "/work/.git rw,")),
            ),
            (
                Id::ControlReadonly,
                Box::new(with_mount(
                    "/run/cordon/control ro,",
                    "/run/cordon/control rw,",
                )),
            ),
            (
                Id::WritableNosuidNodevNoexec,
                Box::new(with_mount(
                    "/tmp rw,nosuid,nodev,noexec,",
                    "/tmp rw,nosuid,nodev,",
                )),
            ),

            (
                Id::RootfsReadonly,
                Box::new(with_mount("/etc/hosts ro,", "/etc/hosts rw,")),
            ),
            (
                Id::ContentNoexec,
                Box::new(with_mount("/etc/hosts ro,nosuid,nodev,noexec,", "/etc/hosts ro,")),
            ),
            (
                Id::NotPrivileged,
                Box::new(with_mount("/proc/sys ro,", "/proc/sys rw,")),
            ),
            (
                Id::NotPrivileged,
                Box::new(|o| {
                    o.paths.insert(
                        "/proc/keys".into(),
                        PathFacts {
                            kind: "file".into(),
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::NoHostMounts,
                Box::new(|o| {
                    o.paths.insert(
                        "/dev".into(),
                        PathFacts {
                            writable: true,
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::WorkBytes,
                Box::new(|o| {
                    o.paths.insert(
                        "/work".into(),
                        PathFacts {
                            totals: Some((12 << 30, 200)),
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::WorkInodes,
                Box::new(|o| {
                    o.paths.insert(
                        "/work".into(),
                        PathFacts {
                            totals: Some((8 << 20, 999_999)),
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::TmpBytes,
                Box::new(|o| {
                    o.paths.insert(
                        "/tmp".into(),
                        PathFacts {
                            totals: Some((1 << 30, 100)),
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::TmpInodes,
                Box::new(|o| {
                    o.paths.insert(
                        "/tmp".into(),
                        PathFacts {
                            totals: Some((4 << 20, 1)),
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::EnvAllowlist,
                Box::new(|o| o.env.push("SECRET=x".into())),
            ),
            (
                Id::EnvAllowlist,
                Box::new(|o| o.env.retain(|e| !e.starts_with("PATH"))),
            ),
            (
                Id::PidsLimit,
                Box::new(|o| o.cgroup_limits.pids_max = Ok("max".into())),
            ),
            (
                Id::MemoryLimit,
                Box::new(|o| o.cgroup_limits.memory = Ok("9223372036854771712".into())),
            ),
            (
                Id::MemoryLimit,
                Box::new(|o| {
                    o.cgroup_limits.swap = Err("memory.memsw.limit_in_bytes: absent".into())
                }),
            ),
            (
                Id::CpuLimit,
                Box::new(|o| o.cgroup_limits.cpu = Ok("-1 100000".into())),
            ),
            (
                Id::ExecAllowlist,
                Box::new(|o| {
                    o.paths.insert(
                        "/usr/bin/claude".into(),
                        PathFacts {
                            kind: "dir".into(),
                            on_readonly_mount: true,
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::ExecAllowlist,
                Box::new(|o| {
                    o.paths.insert(
                        "/usr/bin/claude".into(),
                        PathFacts {
                            kind: "file".into(),
                            on_readonly_mount: false,
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
            (
                Id::ExecAllowlist,
                Box::new(|o| {
                    o.paths.insert(
                        "/usr/bin/claude".into(),
                        PathFacts {
                            kind: "symlink".into(),
                            on_readonly_mount: true,
                            ..PathFacts::default()
                        },
                    );
                }),
            ),
        ];
        for (i, (want, change)) in cases.iter().enumerate() {
            assert_eq!(refused(change), *want, "case {i}");
        }
    }

    #[test]
    fn a_missing_required_mount_is_refused() {
        let mut o = good_observations();
        o.mounts = parse_mountinfo(&MOUNTINFO.replace(
            "89 87 0:48 / /work/.git ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw\n",
            "",
        ));
        assert_eq!(
            preflight(&good_policy(), &o).unwrap_err().id,
            Id::MetadataReadonly
        );
    }

    #[test]
    fn unreadable_facts_refuse_instead_of_passing() {
        assert_eq!(refused(|o| o.status = Err("gone".into())), Id::NonRootUser);
        assert_eq!(refused(|o| o.start = Err("gone".into())), Id::NotPrivileged);
        assert_eq!(refused(|o| o.dumpable = Err("gone".into())), Id::InitSealed);
        assert_eq!(refused(|o| o.mounts = Err("gone".into())), Id::NoHostMounts);
        assert_eq!(
            refused(|o| o.cgroup_limits.pids_max = Err("gone".into())),
            Id::PidsLimit
        );
    }

    #[test]
    fn v2_swap_must_be_zero() {
        let mut o = good_observations();
        o.cgroup_limits = CgroupObs {
            version: 2,
            pids_max: Ok("64".into()),
            memory: Ok((1u64 << 28).to_string()),
            swap: Ok("0".into()),
            cpu: Ok("100000 100000".into()),
        };
        assert!(preflight(&good_policy(), &o).is_ok());
        o.cgroup_limits.swap = Ok("max".into());
        assert_eq!(
            preflight(&good_policy(), &o).unwrap_err().id,
            Id::MemoryLimit
        );
    }

    #[test]
    fn a_policy_that_lets_another_socket_family_through_is_refused() {
        let mut p = good_policy();
        p.sockets.families.push(libc::AF_VSOCK as u32);
        let refusal = preflight(&p, &good_observations()).unwrap_err();
        assert_eq!(refusal.id, Id::SocketFamilies);
        let mut p = good_policy();
        p.sockets.netlink_protocols.push(libc::NETLINK_AUDIT as u32);
        assert_eq!(
            preflight(&p, &good_observations()).unwrap_err().id,
            Id::SocketFamilies
        );
    }

    #[test]
    fn a_policy_naming_uid_0_is_refused() {
        let mut p = good_policy();
        p.uid = 0;
        let mut o = good_observations();
        if let Ok(s) = &mut o.status {
            s.uid = vec![0; 4];
        }
        assert_eq!(preflight(&p, &o).unwrap_err().id, Id::NonRootUser);
    }

    /// A skipped protection (the gate's probe layer) is neither refused nor counted, and the
    /// checks after it still run.
    #[test]
    fn a_skipped_check_is_passed_over_and_not_attested() {
        let mut p = good_policy();
        p.skip = vec![Id::WritableNosuidNodevNoexec];
        let mut o = good_observations();
        with_mount("/tmp rw,nosuid,nodev,noexec,", "/tmp rw,nosuid,nodev,")(&mut o);
        let passed = preflight(&p, &o).unwrap();
        assert!(!passed.contains(&Id::WritableNosuidNodevNoexec));
        assert!(passed.contains(&Id::ExecAllowlist));
        o.env.push("SECRET=x".into());
        assert_eq!(preflight(&p, &o).unwrap_err().id, Id::EnvAllowlist);
        let mut p = good_policy();
        p.skip = vec![Id::NonRootUser];
        let mut o = good_observations();
        if let Ok(s) = &mut o.status {
            s.uid = vec![0; 4];
        }
        assert!(!preflight(&p, &o).unwrap().contains(&Id::NonRootUser));
    }
}
