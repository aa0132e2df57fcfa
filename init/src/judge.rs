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
use cordon_contract::procfs::MountEntry;

use cordon_contract::paths::ENGINE_DEFAULT_CAPS as DOCKER_DEFAULT_CAPS;

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
            format!(
                "pid {} ppid {} (pid 1 is {:?})",
                obs.pid, obs.ppid, obs.pid1_cmdline
            ),
        ));
    }
    pass(Id::InitEntrypoint);

    // 2. Nothing inherited: only fds 0-2, and a cwd inside the container.
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
    pass(Id::FdHygiene);

    // 3. Private cgroup and UTS namespaces.
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
            format!(
                "uid {} gid {} groups [{}]",
                policy.uid, policy.gid, policy.gid
            ),
            format!(
                "uid {:?} gid {:?} groups {:?}",
                status.uid, status.gid, status.groups
            ),
        ));
    }
    pass(Id::NonRootUser);

    // 5. Privileged: every capability in the bounding set, or a writable /sys.
    let last = *seen(Id::NotPrivileged, "cap_last_cap", &obs.cap_last_cap)?;
    let full = if last >= 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    };
    let mounts = seen(Id::NoHostMounts, "/proc/self/mountinfo", &obs.mounts)?;
    let sys_rw = mounts
        .iter()
        .any(|m| m.mount_point == "/sys" && !m.read_only());
    if status.cap_bnd == full || sys_rw {
        return Err(refuse(
            Id::NotPrivileged,
            "a partial bounding set and a read-only /sys",
            format!(
                "CapBnd {:016x} (full {full:016x}), /sys writable: {sys_rw}",
                status.cap_bnd
            ),
        ));
    }
    pass(Id::NotPrivileged);

    // 6-7. No terminal, then stdin is /dev/null.
    if !obs.ttys.is_empty() {
        return Err(refuse(
            Id::NoTty,
            "no terminal on fds 0-2",
            format!("terminal on fds {:?}", obs.ttys),
        ));
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
        return Err(refuse(
            Id::NoNewPrivileges,
            "NoNewPrivs 1",
            format!("NoNewPrivs {}", status.no_new_privs),
        ));
    }
    pass(Id::NoNewPrivileges);
    if status.seccomp != 2 {
        return Err(refuse(
            Id::SeccompDefault,
            "Seccomp 2 (filter)",
            format!("Seccomp {}", status.seccomp),
        ));
    }
    pass(Id::SeccompDefault);

    // 10. Capabilities: all five sets empty.
    let sets = [
        status.cap_inh,
        status.cap_prm,
        status.cap_eff,
        status.cap_bnd,
        status.cap_amb,
    ];
    if sets.iter().any(|s| *s != 0) {
        let id =
            if status.cap_bnd & DOCKER_DEFAULT_CAPS == DOCKER_DEFAULT_CAPS || status.cap_bnd == 0 {
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
        return Err(refuse(
            Id::NetworkNone,
            "interfaces [lo]",
            format!("interfaces {ifaces:?}"),
        ));
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
        return Err(refuse(
            Id::NoDockerSocket,
            "no daemon socket",
            found.join(", "),
        ));
    }
    pass(Id::NoDockerSocket);

    let mut seen_points = std::collections::BTreeSet::new();
    for m in mounts {
        let Some(rule) = rule_for(&policy.mounts, &m.mount_point) else {
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
        judge_access(rule, m, &facts)?;
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
    pass(Id::NoHostMounts);
    Ok(())
}

fn judge_access(rule: &MountRule, m: &MountEntry, facts: &PathFacts) -> Result<(), Refusal> {
    let missing_flags = |need: cordon_contract::policy::MountFlags| -> Vec<&'static str> {
        [
            ("nosuid", need.nosuid),
            ("nodev", need.nodev),
            ("noexec", need.noexec),
        ]
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
                    format!(
                        "{} not writable by the agent, with its engine flags",
                        m.mount_point
                    ),
                    format!(
                        "writable: {}, missing {:?}: {}",
                        facts.writable, missing, m.line
                    ),
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
mod tests {
    //! One good observation set, then one change per check: each must be refused with its own id.

    use std::collections::BTreeMap;

    use cordon_contract::policy::{self, Bounded, CgroupLimits, LandlockPolicy};
    use cordon_contract::{Phase, Vendor};

    use super::*;
    use crate::observe::CgroupObs;
    use cordon_contract::procfs::{parse_mountinfo, Status};

    const MOUNTINFO: &str = "\
71 46 0:39 / / ro,noatime - fuse.fuse-overlayfs fuse-overlayfs rw
72 71 0:42 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
73 71 0:43 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
74 73 0:44 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5
75 71 0:45 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
76 75 0:46 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
77 76 0:29 / /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
86 73 0:41 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw
87 71 0:40 / /work ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=8192k,nr_inodes=200
88 71 0:47 / /tmp rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=4096k,nr_inodes=100
89 87 0:48 / /work/.git ro,relatime - tmpfs tmpfs rw
90 71 254:0 /c /run/cordon/control ro,relatime - ext4 /dev/vda rw
91 71 254:0 /h /etc/hosts ro,relatime - ext4 /dev/vda rw
52 72 0:43 /null /proc/keys rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
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

    fn good_policy() -> Policy {
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
            extra_fds: vec![],
            cwd: Ok("/work".into()),
            cgroup: Ok(vec!["8:pids:/".into(), "0::/".into()]),
            hostname: Ok("cordon".into()),
            status: Ok(Status {
                uid: vec![10001; 4],
                gid: vec![10001; 4],
                groups: vec![10001],
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
        preflight(&good_policy(), &o)
            .expect_err("must refuse")
            .check
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
                        s.groups = vec![10001, 0]
                    }
                }),
            ),
            (
                Id::NotPrivileged,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.cap_bnd = (1 << 41) - 1
                    }
                }),
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
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.no_new_privs = 0
                    }
                }),
            ),
            (
                Id::SeccompDefault,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.seccomp = 0
                    }
                }),
            ),
            (
                Id::CapsDropped,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.cap_bnd = DOCKER_DEFAULT_CAPS
                    }
                }),
            ),
            (
                Id::CapAdded,
                Box::new(|o| {
                    if let Ok(s) = &mut o.status {
                        s.cap_bnd = 1
                    }
                }),
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
        o.mounts = parse_mountinfo(
            &MOUNTINFO.replace("89 87 0:48 / /work/.git ro,relatime - tmpfs tmpfs rw\n", ""),
        );
        assert_eq!(
            preflight(&good_policy(), &o).unwrap_err().check,
            Id::MetadataReadonly
        );
    }

    #[test]
    fn unreadable_facts_refuse_instead_of_passing() {
        assert_eq!(refused(|o| o.status = Err("gone".into())), Id::NonRootUser);
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
            preflight(&good_policy(), &o).unwrap_err().check,
            Id::MemoryLimit
        );
    }
}
