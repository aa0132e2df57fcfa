//! Judge: a pure function from the policy and the observations to the ordered verdicts. The first
//! failing check refuses; its id, the expected and the observed value go into the refusal line.
//!
//! The order is part of the contract: a container with exactly one protection removed must be
//! refused with that protection's id, so checks whose observations overlap are ordered from the
//! most specific cause to the most general (privileged before capabilities, the Docker socket
//! before unknown mounts, a TTY before stdin).

use std::collections::BTreeMap;

use cordon_contract::capabilities::{all_capabilities, capability_mask, holds_engine_defaults};
use cordon_contract::policy::{
    Access, MountFlags, MountRule, Policy, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS,
};
use cordon_contract::procfs::{MountEntry, Status};
use cordon_contract::{engine_socket, paths, seccomp, tree, Id, Refusal};

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
    ("pinned dirs", pinned_dirs),
    ("egress socket dir", egress_dir),
    ("engine masks", engine_masks),
    ("host files masked", host_files_masked),
    ("no credential but the sentinel", no_credential),
    ("environment", environment),
    ("cgroup limits", cgroup_limits),
    ("exec allowlist", exec_allowlist),
    ("socket families", socket_families),
    ("sealed", sealed),
    ("snapshot", snapshot),
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

/// The policy's pins are exactly the directories above its nested gitlink masks
/// ([`tree::pins_of`]), and each is a directory reached from /work through no link: Landlock pins
/// what the policy names, so a pin left out (or a policy that pins nothing) leaves a mask free to
/// be moved aside with its parent. After the mounts check, which holds the masks themselves.
/// Nothing is attested here: the pins hold once Landlock is enforced.
fn pinned_dirs(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let prefix = format!("{}/", paths::WORK);
    let gitlinks: Vec<String> = policy
        .mounts
        .iter()
        .filter(|r| r.protection == Id::GitlinkMasks)
        .map(|r| r.path.strip_prefix(&prefix).unwrap_or(&r.path).to_owned())
        .collect();
    let want = tree::pins_of(&gitlinks);
    if policy.landlock.pins != want {
        return Err(refuse(
            Id::PinnedDirs,
            format!("pins {want:?} (above the gitlinks {gitlinks:?})"),
            format!("pins {:?}", policy.landlock.pins),
        ));
    }
    for pin in &policy.landlock.pins {
        match obs.pins.get(pin) {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return Err(refuse(
                    Id::PinnedDirs,
                    format!("{}/{pin} a directory reached through no link", paths::WORK),
                    e.clone(),
                ))
            }
            None => {
                return Err(refuse(
                    Id::PinnedDirs,
                    format!("{}/{pin} a directory reached through no link", paths::WORK),
                    "not observed",
                ))
            }
        }
    }
    Ok(Vec::new())
}

/// With a forwarder, the policy itself keeps the proxy's socket dir a required read-only mount
/// (`egress-readonly`): the mounts check then holds the mount to it, but only to what the policy
/// says, and a policy without that rule (or with a writable one) would let the forwarder's socket
/// dir be missing or the agent's to write. The mount itself is the mounts check's.
fn egress_dir(policy: &Policy, _: &Observations) -> Result<Vec<Id>, Refusal> {
    if policy.egress.is_none() {
        return Ok(Vec::new());
    }
    let rule = policy
        .mounts
        .iter()
        .find(|r| !r.beneath && r.path == paths::EGRESS_DIR);
    let held = rule.is_some_and(|r| {
        r.required && r.access == Access::ReadOnly && r.protection == Id::EgressReadonly
    });
    if !held {
        return Err(refuse(
            Id::EgressReadonly,
            format!(
                "a required read-only mount rule for {} (the forwarder's socket dir)",
                paths::EGRESS_DIR
            ),
            match rule {
                Some(r) => format!(
                    "rule {:?}, required: {}, protection {}",
                    r.access, r.required, r.protection
                ),
                None => "no rule".to_owned(),
            },
        ));
    }
    Ok(vec![Id::EgressReadonly])
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

/// Nothing the workload starts with holds a vendor credential but the policy's sentinel: not
/// its environment (this process's, which it inherits) and not its argv. Before the environment
/// check, so a credential put into both the environment and the policy's copy of it is refused
/// as what it is.
fn no_credential(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    use cordon_contract::credential;
    let sentinel = policy.sentinel.as_deref();
    let in_env: Vec<&str> = obs
        .env
        .iter()
        .filter(|entry| credential::foreign_entry(entry, sentinel))
        .map(|entry| entry.split('=').next().unwrap_or(""))
        .collect();
    let in_argv = policy
        .command
        .iter()
        .position(|arg| !credential::foreign_tokens(arg.as_bytes(), sentinel).is_empty());
    if in_env.is_empty() && in_argv.is_none() {
        return Ok(vec![Id::CredentialAbsent]);
    }
    // Names and positions only: the value may be the key.
    Err(refuse(
        Id::CredentialAbsent,
        "no credential but the sentinel in the environment or argv",
        format!("variables {in_env:?}, argv index {in_argv:?}"),
    ))
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

/// The exec allowlist names regular files nobody in here can change, and the exec trees
/// directories nobody in here can change (beneath them only exec-capable mounts hold anything
/// the workload wrote).
fn exec_allowlist(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let files = policy
        .landlock
        .exec
        .iter()
        .map(|p| (p, "file", "a regular file"));
    let trees = policy
        .landlock
        .exec_trees
        .iter()
        .map(|p| (p, "dir", "a directory"));
    for (path, kind, what) in files.chain(trees) {
        let facts = obs.paths.get(path).cloned().unwrap_or_default();
        if facts.kind != kind || !facts.on_readonly_mount || facts.writable {
            let mount = if facts.on_readonly_mount {
                "read-only"
            } else {
                "writable"
            };
            return Err(refuse(
                Id::ExecAllowlist,
                format!("{path} is {what} on a read-only mount"),
                format!(
                    "{path}: {} on a {mount} mount, writable: {}",
                    facts.kind, facts.writable
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

/// Over a shared snapshot, /work is the tree whose digest was recorded when it was made.
fn snapshot(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let (Some(want), Some(seen_digest)) = (&policy.work_digest, &obs.work_digest) else {
        return match &policy.work_digest {
            None => Ok(vec![]),
            Some(want) => Err(refuse(Id::SnapshotVerified, want.clone(), "not read")),
        };
    };
    let found = seen(Id::SnapshotVerified, "the digest of /work", seen_digest)?;
    if found != want {
        return Err(refuse(Id::SnapshotVerified, want.clone(), found.clone()));
    }
    Ok(vec![Id::SnapshotVerified])
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

    no_daemon_socket(obs, mounts)?;
    pass(Id::NoDockerSocket);

    overlay_laid(policy, obs, mounts)?;

    // Root owns the engine's mounts: as root (the gate's non-root-user row only) they are
    // writable by their mode, and that is the identity's breach.
    let root = obs.status.as_ref().is_ok_and(|s| s.uid.contains(&0));
    // How many mounts each point has so far: the n-th is judged by the point's n-th rule (a
    // covered rule, then its cover; else the one rule).
    let mut seen_points: BTreeMap<&str, usize> = BTreeMap::new();
    let mut judged = Vec::with_capacity(mounts.len());
    for m in mounts {
        let rules = policy.rules_for(&m.mount_point);
        if rules.is_empty() {
            return Err(refuse(
                unlisted_mount_id(policy, &m.mount_point),
                "every mountpoint on the policy's list",
                m.line.clone(),
            ));
        }
        let nth = seen_points.entry(m.mount_point.as_str()).or_default();
        let Some(rule) = rules.get(*nth).copied() else {
            return Err(refuse(
                Id::NoHostMounts,
                match rules.len() {
                    1 => format!("one mount at {}", m.mount_point),
                    n => format!(
                        "{n} mounts at {}: the covered one, then its cover",
                        m.mount_point
                    ),
                },
                m.line.clone(),
            ));
        };
        *nth += 1;
        if let Some(fstype) = &rule.fstype {
            if *fstype != m.fstype {
                return Err(refuse(
                    Id::NoHostMounts,
                    format!("{} is {fstype}", m.mount_point),
                    m.line.clone(),
                ));
            }
        }
        judge_overlay(policy, m)?;
        let facts = obs.paths.get(&m.mount_point).cloned().unwrap_or_default();
        judge_access(rule, m, &facts, root)?;
        judged.push((m, rule));
    }
    // The flags last: a removal that makes a mount writable is named as that mount's protection
    // even where the flags differ too.
    for (m, rule) in &judged {
        judge_flags(rule, m, &policy.skip, &obs.remount)?;
    }
    // In the policy's order, each point once.
    let mut required_points: Vec<&str> = Vec::new();
    for rule in policy.mounts.iter().filter(|r| r.required && !r.beneath) {
        if !required_points.contains(&rule.path.as_str()) {
            required_points.push(&rule.path);
        }
    }
    for point in required_points {
        let count = seen_points.get(point).copied().unwrap_or(0);
        for (nth, rule) in policy.rules_for(point).into_iter().enumerate() {
            if rule.required && count <= nth {
                return Err(refuse(
                    rule.protection,
                    if nth == 0 {
                        format!("a mount at {point}")
                    } else {
                        format!("mount {} at {point} (over the covered one)", nth + 1)
                    },
                    if count == 0 {
                        "no such mount".to_owned()
                    } else {
                        format!("{count} mount(s) at {point}")
                    },
                ));
            }
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
    judge_totals(policy, obs, pass)?;
    for rule in &policy.mounts {
        pass(rule.protection);
    }
    pass(Id::WritableNosuidNodevNoexec);
    pass(Id::ContentNoexec);
    pass(Id::NoHostMounts);
    if policy.role == cordon_contract::policy::Role::Command {
        pass(Id::CommandIsolated);
    }
    Ok(())
}

/// The id of a mountpoint the policy does not list: one of the agent's own directories in a
/// command's container is that isolation's breach; anything else is a mount that is not the
/// policy's.
fn unlisted_mount_id(policy: &Policy, point: &str) -> Id {
    let agent_only = cordon_contract::paths::AGENT_ONLY_DIRS
        .iter()
        .any(|d| point == *d || point.starts_with(&format!("{d}/")));
    if policy.role == cordon_contract::policy::Role::Command && agent_only {
        Id::CommandIsolated
    } else {
        Id::NoHostMounts
    }
}

/// The policy's overlay was laid. Before the mounts are matched to their rules, so an overlay the
/// init could not lay is refused with its reasons rather than as the mount it left missing; a
/// missing area (the engine's tmpfs the overlay is laid on) is refused as that mount.
fn overlay_laid(policy: &Policy, obs: &Observations, mounts: &[MountEntry]) -> Result<(), Refusal> {
    let Some(overlay) = &policy.overlay else {
        return Ok(());
    };
    if obs.overlay.is_empty() {
        return Ok(());
    }
    let area_rule = policy.rule_for(&overlay.area).filter(|r| r.required);
    if let Some(rule) = area_rule {
        if !mounts.iter().any(|m| m.mount_point == overlay.area) {
            return Err(refuse(
                rule.protection,
                format!("a mount at {}", overlay.area),
                format!("no such mount; {}", obs.overlay.join("; ")),
            ));
        }
    }
    Err(refuse(
        Id::WorkReadonly,
        format!(
            "an overlay on {} over the read-only volume, its layer in {}",
            overlay.target, overlay.area
        ),
        obs.overlay.join("; "),
    ))
}

/// An overlay mount at the policy's overlay target is the policy's overlay: its one lower layer
/// the target itself (the covered volume), its upper and work directories in the policy's area.
/// An overlay at or beneath /work without one in the policy is refused (elsewhere the rules
/// decide: the image's root is an overlay on an overlay2 engine).
fn judge_overlay(policy: &Policy, m: &MountEntry) -> Result<(), Refusal> {
    if m.fstype != "overlay" {
        return Ok(());
    }
    let under = |path: &str, dir: &str| {
        path.strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
    };
    let Some(overlay) = policy
        .overlay
        .as_ref()
        .filter(|o| o.target == m.mount_point)
    else {
        if m.mount_point == paths::WORK || under(&m.mount_point, paths::WORK) {
            return Err(refuse(
                Id::NoHostMounts,
                format!("no overlay at {} (the policy lays none)", m.mount_point),
                m.line.clone(),
            ));
        }
        return Ok(());
    };
    let values = |key: &str| -> Vec<&str> {
        m.super_opts
            .iter()
            .filter_map(|o| o.strip_prefix(key))
            .collect()
    };
    let layers: Vec<String> = m
        .super_opts
        .iter()
        .filter(|o| {
            ["lowerdir=", "lowerdir+=", "datadir+="]
                .iter()
                .any(|k| o.starts_with(k))
        })
        .cloned()
        .collect();
    let lower_ok = layers == [format!("lowerdir={}", overlay.target)];
    let in_area = |key: &str| matches!(values(key).as_slice(), [dir] if under(dir, &overlay.area));
    if !lower_ok || !in_area("upperdir=") || !in_area("workdir=") {
        return Err(refuse(
            Id::WorkReadonly,
            format!(
                "the overlay at {} with lowerdir={} alone and its upper and work dirs in {}",
                m.mount_point, overlay.target, overlay.area
            ),
            m.line.clone(),
        ));
    }
    Ok(())
}

/// Nothing where an engine's socket would be, and no socket file mounted in.
fn no_daemon_socket(obs: &Observations, mounts: &[MountEntry]) -> Result<(), Refusal> {
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
    Ok(())
}

/// Every bounded mount holds exactly its bytes and inodes.
fn judge_totals(
    policy: &Policy,
    obs: &Observations,
    pass: &mut impl FnMut(Id),
) -> Result<(), Refusal> {
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
/// options give them), an exec-capable scratch nosuid and nodev; every other mount the rule's
/// flags (the init's remount restores what the engine's read-only remount strips). The image's
/// root and a command's scratch are the mounts that may hold executables.
fn judge_flags(
    rule: &MountRule,
    m: &MountEntry,
    skip: &[Id],
    remount_errors: &[String],
) -> Result<(), Refusal> {
    let (need, id) = match rule.access {
        Access::Writable if !m.read_only() => (MountFlags::ALL, Id::WritableNosuidNodevNoexec),
        // An approved command's scratch: it runs what it builds there, nothing set-id or a device.
        Access::WritableExec => (
            MountFlags {
                nosuid: true,
                nodev: true,
                noexec: false,
            },
            Id::WritableNosuidNodevNoexec,
        ),
        _ => (rule.flags, Id::ContentNoexec),
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
#[path = "judge_tests.rs"]
pub(crate) mod tests;
