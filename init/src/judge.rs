//! Judge: a pure function from the policy and the observations to the ordered verdicts. The first
//! failing check refuses; its id, the expected and the observed value go into the refusal line.
//!
//! The order is part of the contract: a container with exactly one protection removed must be
//! refused with that protection's id, so checks whose observations overlap are ordered from the
//! most specific cause to the most general (privileged before capabilities, the Docker socket
//! before unknown mounts, a TTY before stdin).

use cordon_contract::policy::{Access, MountRule, Policy};
use cordon_contract::Id;

use crate::observe::{Observations, PathFacts};
use crate::procfs::MountEntry;

/// Docker's default bounding set (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID,
/// SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD, AUDIT_WRITE, SETFCAP).
pub const DOCKER_DEFAULT_CAPS: u64 = 0xa804_25fb;

/// A failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub check: Id,
    pub expected: String,
    pub observed: String,
}

fn refuse(check: Id, expected: impl Into<String>, observed: impl Into<String>) -> Refusal {
    Refusal {
        check,
        expected: expected.into(),
        observed: observed.into(),
    }
}

/// Unwrap an observation or refuse with `check` and the read error.
fn seen<'a, T>(check: Id, what: &str, obs: &'a Result<T, String>) -> Result<&'a T, Refusal> {
    obs.as_ref()
        .map_err(|e| refuse(check, format!("{what} readable"), e.clone()))
}

/// Run every preflight check in order. Returns the ids that passed.
pub fn preflight(policy: &Policy, obs: &Observations) -> Result<Vec<Id>, Refusal> {
    let mut passed = Vec::new();
    let mut pass = |id: Id| {
        if !passed.contains(&id) {
            passed.push(id);
        }
    };

    // 1. PID 1, and not under Docker's own init.
    if obs.pid != 1 {
        let id = if obs.ppid == 1 {
            Id::InitEntrypoint
        } else {
            Id::HostNamespaces
        };
        return Err(refuse(
            id,
            "pid 1",
            format!("pid {} ppid {} (pid 1 is {:?})", obs.pid, obs.ppid, obs.pid1_cmdline),
        ));
    }
    pass(Id::InitEntrypoint);

    // 2. Nothing inherited: only fds 0-2, and a cwd inside the container.
    if !obs.extra_fds.is_empty() {
        return Err(refuse(Id::FdHygiene, "only fds 0-2 open", obs.extra_fds.join(", ")));
    }
    let cwd = seen(Id::FdHygiene, "cwd", &obs.cwd)?;
    if !cwd.starts_with('/') {
        return Err(refuse(Id::FdHygiene, "a reachable cwd", cwd.clone()));
    }
    pass(Id::FdHygiene);

    // 3. Private cgroup and UTS namespaces.
    let cgroup = seen(Id::HostNamespaces, "/proc/self/cgroup", &obs.cgroup)?;
    if let Some(line) = cgroup.iter().find(|l| !l.ends_with(":/")) {
        return Err(refuse(Id::HostNamespaces, "a private cgroup namespace (every path /)", line.clone()));
    }
    let hostname = seen(Id::HostNamespaces, "hostname", &obs.hostname)?;
    if *hostname != policy.hostname {
        return Err(refuse(Id::HostNamespaces, format!("hostname {}", policy.hostname), format!("hostname {hostname}")));
    }
    pass(Id::HostNamespaces);

    // 4. Identity.
    let status = seen(Id::NonRootUser, "/proc/self/status", &obs.status)?;
    let ids_ok = status.uid.len() == 4
        && status.uid.iter().all(|u| *u == policy.uid)
        && status.gid.len() == 4
        && status.gid.iter().all(|g| *g == policy.gid)
        && status.groups.iter().all(|g| *g == policy.gid);
    if !ids_ok {
        return Err(refuse(
            Id::NonRootUser,
            format!("uid {} gid {} groups [{}]", policy.uid, policy.gid, policy.gid),
            format!("uid {:?} gid {:?} groups {:?}", status.uid, status.gid, status.groups),
        ));
    }
    pass(Id::NonRootUser);

    // 5. Privileged: every capability in the bounding set, or a writable /sys.
    let last = *seen(Id::NotPrivileged, "cap_last_cap", &obs.cap_last_cap)?;
    let full = if last >= 63 { u64::MAX } else { (1u64 << (last + 1)) - 1 };
    let mounts = seen(Id::NoHostMounts, "/proc/self/mountinfo", &obs.mounts)?;
    let sys_rw = mounts.iter().any(|m| m.mount_point == "/sys" && !m.read_only());
    if status.cap_bnd == full || sys_rw {
        return Err(refuse(
            Id::NotPrivileged,
            "a partial bounding set and a read-only /sys",
            format!("CapBnd {:016x} (full {full:016x}), /sys writable: {sys_rw}", status.cap_bnd),
        ));
    }
    pass(Id::NotPrivileged);

    // 6-7. No terminal, then stdin is /dev/null.
    if !obs.ttys.is_empty() {
        return Err(refuse(Id::NoTty, "no terminal on fds 0-2", format!("terminal on fds {:?}", obs.ttys)));
    }
    pass(Id::NoTty);
    if obs.stdin.kind != "char" || obs.stdin.rdev != Some((1, 3)) {
        return Err(refuse(
            Id::StdinClosed,
            "fd 0 is /dev/null (char 1:3)",
            format!("fd 0 is {} {:?}", obs.stdin.kind, obs.stdin.rdev),
        ));
    }
    pass(Id::StdinClosed);

    // 8-9. Set by the engine before we ran.
    if status.no_new_privs != 1 {
        return Err(refuse(Id::NoNewPrivileges, "NoNewPrivs 1", format!("NoNewPrivs {}", status.no_new_privs)));
    }
    pass(Id::NoNewPrivileges);
    if status.seccomp != 2 {
        return Err(refuse(Id::SeccompDefault, "Seccomp 2 (filter)", format!("Seccomp {}", status.seccomp)));
    }
    pass(Id::SeccompDefault);

    // 10. Capabilities: all five sets empty.
    let sets = [status.cap_inh, status.cap_prm, status.cap_eff, status.cap_bnd, status.cap_amb];
    if sets.iter().any(|s| *s != 0) {
        let id = if status.cap_bnd & DOCKER_DEFAULT_CAPS == DOCKER_DEFAULT_CAPS || status.cap_bnd == 0 {
            Id::CapsDropped
        } else {
            Id::CapAdded
        };
        return Err(refuse(
            id,
            "CapInh CapPrm CapEff CapBnd CapAmb all 0",
            format!(
                "CapInh {:x} CapPrm {:x} CapEff {:x} CapBnd {:x} CapAmb {:x}",
                sets[0], sets[1], sets[2], sets[3], sets[4]
            ),
        ));
    }
    pass(Id::CapsDropped);
    pass(Id::CapAdded);

    // 11. No network but loopback.
    let ifaces = seen(Id::NetworkNone, "/proc/net/dev", &obs.interfaces)?;
    if ifaces.iter().any(|i| i != "lo") {
        return Err(refuse(Id::NetworkNone, "interfaces [lo]", format!("interfaces {ifaces:?}")));
    }
    pass(Id::NetworkNone);

    // 12-15. Filesystems.
    judge_mounts(policy, obs, mounts, &mut pass)?;

    // 16. Environment.
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
    pass(Id::EnvAllowlist);

    // 17. cgroup limits.
    judge_cgroup(policy, obs, &mut pass)?;

    // 18. The exec allowlist names regular files nobody in here can change.
    for path in &policy.landlock.exec {
        let facts = obs.paths.get(path).cloned().unwrap_or_default();
        if facts.kind != "file" || !facts.on_readonly_mount || facts.writable {
            return Err(refuse(
                Id::ExecAllowlist,
                format!("{path} is a regular file on a read-only mount"),
                format!(
                    "{path}: {} on a {} mount, writable: {}",
                    facts.kind,
                    if facts.on_readonly_mount { "read-only" } else { "writable" },
                    facts.writable
                ),
            ));
        }
    }
    pass(Id::ExecAllowlist);
    Ok(passed)
}

fn rule_for<'a>(rules: &'a [MountRule], mount_point: &str) -> Option<&'a MountRule> {
    rules
        .iter()
        .find(|r| !r.beneath && r.path == mount_point)
        .or_else(|| {
            rules.iter().find(|r| {
                r.beneath
                    && mount_point
                        .strip_prefix(r.path.as_str())
                        .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
            })
        })
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
        .find(|m| m.mount_point.ends_with(".sock"))
        .map(|m| m.mount_point.clone());
    if !obs.daemon_sockets.is_empty() || socket_mount.is_some() {
        let mut found = obs.daemon_sockets.clone();
        found.extend(socket_mount);
        return Err(refuse(Id::NoDockerSocket, "no daemon socket", found.join(", ")));
    }
    pass(Id::NoDockerSocket);

    let mut seen_points = std::collections::BTreeSet::new();
    for m in mounts {
        let Some(rule) = rule_for(&policy.mounts, &m.mount_point) else {
            return Err(refuse(Id::NoHostMounts, "every mountpoint on the policy's list", m.line.clone()));
        };
        if !seen_points.insert(m.mount_point.as_str()) {
            return Err(refuse(Id::NoHostMounts, format!("one mount at {}", m.mount_point), m.line.clone()));
        }
        if let Some(fstype) = &rule.fstype {
            if *fstype != m.fstype {
                return Err(refuse(Id::NoHostMounts, format!("{} is {fstype}", m.mount_point), m.line.clone()));
            }
        }
        let facts = obs.paths.get(&m.mount_point).cloned().unwrap_or_default();
        judge_access(rule, m, &facts)?;
    }
    for rule in policy.mounts.iter().filter(|r| r.required && !r.beneath) {
        if !seen_points.contains(rule.path.as_str()) {
            return Err(refuse(rule.protection, format!("a mount at {}", rule.path), "no such mount"));
        }
    }
    let dev_extra = seen(Id::NoHostMounts, "/dev", &obs.dev_extra)?;
    if !dev_extra.is_empty() {
        return Err(refuse(Id::NoHostMounts, "only the standard /dev entries", format!("/dev also has {dev_extra:?}")));
    }
    for rule in &policy.mounts {
        let Some(b) = rule.bounded else { continue };
        let totals = obs.paths.get(&rule.path).and_then(|f| f.totals);
        let Some((bytes, inodes)) = totals else {
            return Err(refuse(b.bytes_id, format!("statfs of {}", rule.path), "statfs failed"));
        };
        if bytes != b.bytes {
            return Err(refuse(b.bytes_id, format!("{} holds {} bytes", rule.path, b.bytes), format!("{bytes} bytes")));
        }
        if inodes != b.inodes {
            return Err(refuse(b.inodes_id, format!("{} holds {} inodes", rule.path, b.inodes), format!("{inodes} inodes")));
        }
        pass(b.bytes_id);
        pass(b.inodes_id);
    }
    for rule in &policy.mounts {
        pass(rule.protection);
    }
    pass(Id::WritableNosuidNodevNoexec);
    pass(Id::NoHostMounts);
    Ok(())
}

fn judge_access(rule: &MountRule, m: &MountEntry, facts: &PathFacts) -> Result<(), Refusal> {
    let missing_flags = |need: cordon_contract::policy::MountFlags| -> Vec<&'static str> {
        [("nosuid", need.nosuid), ("nodev", need.nodev), ("noexec", need.noexec)]
            .into_iter()
            .filter(|(flag, needed)| *needed && !m.has(flag))
            .map(|(flag, _)| flag)
            .collect()
    };
    match rule.access {
        Access::ReadOnly if !m.read_only() => Err(refuse(
            rule.protection,
            format!("{} read-only", m.mount_point),
            m.line.clone(),
        )),
        Access::Writable if !m.read_only() => {
            let missing = missing_flags(cordon_contract::policy::MountFlags::ALL);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(refuse(
                    cordon_contract::Id::WritableNosuidNodevNoexec,
                    format!("{} nosuid,nodev,noexec", m.mount_point),
                    format!("missing {}: {}", missing.join(","), m.line),
                ))
            }
        }
        Access::RootOwned if !m.read_only() => {
            let missing = missing_flags(rule.flags);
            if facts.writable || !missing.is_empty() {
                Err(refuse(
                    rule.protection,
                    format!("{} not writable by the agent, with its engine flags", m.mount_point),
                    format!("writable: {}, missing {:?}: {}", facts.writable, missing, m.line),
                ))
            } else {
                Ok(())
            }
        }
        Access::Masked if !m.read_only() && facts.rdev != Some((1, 3)) => Err(refuse(
            rule.protection,
            format!("{} masked (/dev/null or read-only)", m.mount_point),
            m.line.clone(),
        )),
        _ => Ok(()),
    }
}

fn judge_cgroup(policy: &Policy, obs: &Observations, pass: &mut impl FnMut(Id)) -> Result<(), Refusal> {
    let c = &obs.cgroup_limits;
    let want = policy.cgroup;
    let pids = seen(Id::PidsLimit, "pids.max", &c.pids_max)?;
    if *pids != want.pids_max.to_string() {
        return Err(refuse(Id::PidsLimit, format!("pids.max {}", want.pids_max), format!("pids.max {pids}")));
    }
    pass(Id::PidsLimit);
    let memory = seen(Id::MemoryLimit, "memory limit", &c.memory)?;
    let swap = seen(Id::MemoryLimit, "memory+swap limit", &c.swap)?;
    // v1 memsw is memory plus swap (equal to memory: no swap); v2 swap.max is swap alone.
    let want_swap = if c.version == 2 { "0".to_owned() } else { want.memory_bytes.to_string() };
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
        return Err(refuse(Id::CpuLimit, format!("quota/period {want_cpu}"), format!("quota/period {cpu}")));
    }
    pass(Id::CpuLimit);
    Ok(())
}
