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

fn rule(path: &str, access: Access, protection: Id, bounded: Option<Bounded>) -> policy::MountRule {
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
            pins: vec![],
            exec_trees: vec![],
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
        egress: None,
        sentinel: None,
        overlay: None,
        work_digest: None,
        role: Default::default(),
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
        overlay: vec![],
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
        pins: BTreeMap::new(),
        env: vec!["HOSTNAME=cordon".into(), "PATH=/usr/bin".into()],
        cgroup_limits: CgroupObs {
            version: 1,
            pids_max: Ok("64".into()),
            memory: Ok((1u64 << 28).to_string()),
            swap: Ok((1u64 << 28).to_string()),
            cpu: Ok("100000 100000".into()),
        },
        work_digest: None,
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
        Id::CredentialAbsent,
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
        // A credential in the environment is refused as one, not as an unexpected variable.
        (
            Id::CredentialAbsent,
            Box::new(|o| o.env.push("ANTHROPIC_API_KEY=sk-ant-api03-key".into())),
        ),
        (
            Id::CredentialAbsent,
            Box::new(|o| o.env[0] = "PATH=/bin:sk-ant-oat01-a-key-of-a-credentials-length-0123456789".into()),
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

/// With a forwarder, the proxy's socket dir must be a required read-only mount of the policy
/// (the mounts check holds the mount itself to that rule).
#[test]
fn a_forwarder_needs_its_socket_dir_a_read_only_mount_of_the_policy() {
    let forwarding = |rule: Option<policy::MountRule>| {
        let mut p = good_policy();
        p.egress = Some(policy::EgressForward {
            port: cordon_contract::egress::FORWARD_PORT,
            socket: cordon_contract::egress::SOCKET.into(),
        });
        p.mounts.extend(rule);
        p
    };
    let ro_rule = || {
        rule(
            paths::EGRESS_DIR,
            Access::ReadOnly,
            Id::EgressReadonly,
            None,
        )
    };
    let mount = |options: &str| {
        let mut o = good_observations();
        let text = format!(
            "{MOUNTINFO}92 71 0:50 / {} {options},nosuid,nodev,noexec,relatime - tmpfs tmpfs rw\n",
            paths::EGRESS_DIR
        );
        o.mounts = parse_mountinfo(&text);
        o
    };

    // No forwarder, no rule: nothing to hold.
    assert!(preflight(&good_policy(), &good_observations()).is_ok());
    // A forwarder and no rule for its dir.
    let refusal = preflight(&forwarding(None), &good_observations()).unwrap_err();
    assert_eq!(refusal.id, Id::EgressReadonly);
    assert_eq!(refusal.observed, "no rule");
    // A writable rule: the mounts check alone would pass the writable mount.
    let writable = rule(
        paths::EGRESS_DIR,
        Access::Writable,
        Id::WritableNosuidNodevNoexec,
        None,
    );
    assert_eq!(
        preflight(&forwarding(Some(writable)), &mount("rw"))
            .unwrap_err()
            .id,
        Id::EgressReadonly
    );
    // The read-only rule and a read-only mount pass; a writable mount is the mounts check's.
    let passed = preflight(&forwarding(Some(ro_rule())), &mount("ro")).unwrap();
    assert!(passed.contains(&Id::EgressReadonly));
    assert_eq!(
        preflight(&forwarding(Some(ro_rule())), &mount("rw"))
            .unwrap_err()
            .id,
        Id::EgressReadonly
    );
    // The gate's probe layer skips it like any other init check.
    let mut p = forwarding(None);
    p.skip = vec![Id::EgressReadonly];
    assert!(!preflight(&p, &good_observations())
        .unwrap()
        .contains(&Id::EgressReadonly));
}

/// A policy masking `gitlinks` and pinning `pins`, and observations with every mask mounted and
/// every pin a directory reached through no link.
fn pinning(gitlinks: &[&str], pins: &[&str]) -> (Policy, Observations) {
    let mut p = good_policy();
    let mut text = MOUNTINFO.to_owned();
    for (i, gitlink) in gitlinks.iter().enumerate() {
        let path = format!("/work/{gitlink}");
        p.mounts.push(policy::MountRule::required(
            &path,
            Access::ReadOnly,
            Id::GitlinkMasks,
            Some("tmpfs"),
            None,
        ));
        text.push_str(&format!(
            "{} 87 0:{} / {path} ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=4k,mode=555\n",
            100 + i,
            60 + i
        ));
    }
    p.landlock.pins = pins.iter().map(|s| (*s).to_owned()).collect();
    let mut o = good_observations();
    o.mounts = parse_mountinfo(&text);
    o.pins = pins.iter().map(|s| ((*s).to_owned(), Ok(()))).collect();
    (p, o)
}

#[test]
fn the_pins_are_exactly_those_above_the_nested_gitlinks() {
    // Equal: passes (nothing attested here: the pins hold once Landlock is enforced).
    let (p, o) = pinning(&["a/b/sub", "top"], &["a", "a/b"]);
    assert!(!preflight(&p, &o).unwrap().contains(&Id::PinnedDirs));
    // Only top-level gitlinks: no pins.
    let (p, o) = pinning(&["top"], &[]);
    assert!(preflight(&p, &o).is_ok());

    let refused_pins = |p: &Policy, o: &Observations| {
        let refusal = preflight(p, o).expect_err("must refuse");
        assert_eq!(refusal.id, Id::PinnedDirs, "{refusal:?}");
        refusal
    };
    // A pin missing.
    let (mut p, o) = pinning(&["a/b/sub"], &["a", "a/b"]);
    p.landlock.pins = vec!["a".into()];
    let refusal = refused_pins(&p, &o);
    assert_eq!(refusal.observed, r#"pins ["a"]"#);
    assert!(
        refusal.expected.starts_with(r#"pins ["a", "a/b"]"#),
        "{}",
        refusal.expected
    );
    // Every pin missing: a policy that pins nothing.
    p.landlock.pins = vec![];
    refused_pins(&p, &o);
    // An extra pin.
    let (mut p, o) = pinning(&["a/b/sub"], &["a", "a/b"]);
    p.landlock.pins.push("c".into());
    refused_pins(&p, &o);
    // Out of pins_of's order.
    p.landlock.pins = vec!["a/b".into(), "a".into()];
    refused_pins(&p, &o);
    // Pins with no gitlinks at all.
    let (p, o) = pinning(&[], &["a"]);
    refused_pins(&p, &o);
    // A pin that is a link (or lies beneath one).
    let (p, mut o) = pinning(&["a/b/sub"], &["a", "a/b"]);
    o.pins.insert("a/b".into(), Err("a/b: a link".into()));
    let refusal = refused_pins(&p, &o);
    assert_eq!(refusal.observed, "a/b: a link");
    o.pins.insert(
        "a/b".into(),
        Err("a/b: a link on the way (ELOOP: Too many levels of symbolic links)".into()),
    );
    refused_pins(&p, &o);
    // A pin never observed.
    o.pins.remove("a/b");
    refused_pins(&p, &o);
}

/// The gate's probe layer skips the pins like any other init check: the policy's pins removed,
/// the init passes over its refusal, and the checks after it still run.
#[test]
fn skipped_pins_are_passed_over() {
    let (mut p, mut o) = pinning(&["a/b/sub"], &[]);
    p.skip = vec![Id::PinnedDirs];
    let passed = preflight(&p, &o).unwrap();
    assert!(!passed.contains(&Id::PinnedDirs));
    assert!(passed.contains(&Id::ExecAllowlist));
    o.env.push("SECRET=x".into());
    assert_eq!(preflight(&p, &o).unwrap_err().id, Id::EnvAllowlist);
}

/// The policy's sentinel is the one credential the workload may hold, in its variable; the key
/// put into both the environment and the policy's copy of it (so the environment check passes)
/// is still refused, and so is one in the workload's argv.
#[test]
fn only_the_policys_sentinel_may_be_held() {
    let sentinel = "sk-ant-api03-sentinel-of-a-credentials-length-0123456789AA";
    let mut p = good_policy();
    p.sentinel = Some(sentinel.to_owned());
    p.env.push(format!("ANTHROPIC_API_KEY={sentinel}"));
    let mut o = good_observations();
    o.env.push(format!("ANTHROPIC_API_KEY={sentinel}"));
    assert!(preflight(&p, &o).unwrap().contains(&Id::CredentialAbsent));
    let key = "ANTHROPIC_API_KEY=sk-ant-api03-the-key-AA".to_owned();
    let (mut keyed_p, mut keyed_o) = (p.clone(), o.clone());
    *keyed_p.env.last_mut().unwrap() = key.clone();
    *keyed_o.env.last_mut().unwrap() = key;
    assert_eq!(
        preflight(&keyed_p, &keyed_o).unwrap_err().id,
        Id::CredentialAbsent
    );
    let mut argv = p.clone();
    argv.command
        .push("--key=sk-ant-api03-the-key-of-a-credentials-length-0123456789AA".into());
    assert_eq!(preflight(&argv, &o).unwrap_err().id, Id::CredentialAbsent);
    // A prompt that names the shape holds no credential.
    argv.command.push("keys look like sk-ant-api03-...".into());
    argv.command.push(format!("--sentinel={sentinel}"));
    argv.command.remove(argv.command.len() - 3);
    assert!(preflight(&argv, &o).is_ok());
}

/// An approved command's mounts once its init laid the overlay: the work volume read-only and
/// covered, the overlay over it with its layer in the area, the metadata carried onto it, an
/// exec-capable /tmp.
const COMMAND_MOUNTINFO: &str = "\
71 46 0:39 / / ro,noatime - fuse.fuse-overlayfs fuse-overlayfs rw
72 71 0:42 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
73 71 0:43 / /dev rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755
74 73 0:44 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5
75 71 0:45 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
76 75 0:46 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
77 76 0:29 / /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
86 73 0:41 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw
87 71 0:40 / /work ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=8192k,nr_inodes=200
88 71 0:47 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=4096k,nr_inodes=100
90 71 0:49 / /run/cordon/control ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
91 71 254:0 /h /etc/hosts ro,nosuid,nodev,noexec,relatime - ext4 /dev/vda rw
92 71 0:50 / /run/cordon/overlay rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=2048k,nr_inodes=50,mode=700,uid=10001,gid=10001
95 87 0:51 / /work rw,nosuid,nodev,noexec,relatime - overlay overlay rw,lowerdir=/work,upperdir=/run/cordon/overlay/upper,workdir=/run/cordon/overlay/work
89 95 0:48 / /work/.git ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
52 72 0:43 /null /proc/keys rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755
53 72 0:43 /null /proc/cmdline rw,nosuid,noexec - tmpfs tmpfs rw,size=65536k,mode=755
47 72 0:42 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
";

const OVERLAY_LINE: &str = "95 87 0:51 / /work rw,nosuid,nodev,noexec,relatime - overlay overlay rw,lowerdir=/work,upperdir=/run/cordon/overlay/upper,workdir=/run/cordon/overlay/work\n";

/// The area's (and so the overlay's) totals.
const AREA: (u64, u64) = (2 << 20, 50);

/// The command's policy, as the host writes it: the good policy with /work covered by an overlay
/// on a bounded area, /tmp exec-capable, the image's root an exec tree, DAC_OVERRIDE to start.
fn command_policy() -> Policy {
    let mut p = good_policy();
    p.mounts.retain(|m| m.path != "/work" && m.path != "/tmp");
    let bounded = |bytes_id, inodes_id| {
        Some(Bounded {
            bytes: AREA.0,
            inodes: AREA.1,
            bytes_id,
            inodes_id,
        })
    };
    let mut lower = policy::MountRule::required(
        paths::WORK,
        Access::ReadOnly,
        Id::WorkReadonly,
        Some("tmpfs"),
        None,
    );
    lower.covered = true;
    let at = p
        .mounts
        .iter()
        .position(|m| m.path == paths::METADATA)
        .expect("the metadata rule");
    p.mounts.insert(at, lower);
    p.mounts.insert(
        at + 1,
        policy::MountRule::required(
            paths::WORK,
            Access::Writable,
            Id::WritableNosuidNodevNoexec,
            Some("overlay"),
            bounded(Id::WorkBytes, Id::WorkInodes),
        ),
    );
    p.mounts.push(rule(
        paths::TMP,
        Access::WritableExec,
        Id::WritableNosuidNodevNoexec,
        Some(Bounded {
            bytes: 4 << 20,
            inodes: 100,
            bytes_id: Id::TmpBytes,
            inodes_id: Id::TmpInodes,
        }),
    ));
    p.mounts.push(policy::MountRule::required(
        paths::OVERLAY_AREA,
        Access::Writable,
        Id::WritableNosuidNodevNoexec,
        Some("tmpfs"),
        bounded(Id::WorkBytes, Id::WorkInodes),
    ));
    p.start_capabilities
        .extend(capabilities::OVERLAY_CAPABILITIES.iter().map(|c| c.1));
    p.landlock.write = vec![paths::TMP.into(), paths::WORK.into()];
    p.landlock.exec_trees = vec!["/".into()];
    p.role = policy::Role::Command;
    p.overlay = Some(policy::WorkOverlay {
        target: paths::WORK.into(),
        area: paths::OVERLAY_AREA.into(),
        carried: vec![paths::METADATA.into()],
    });
    p.check().expect("a consistent command policy");
    p
}

fn command_observations() -> Observations {
    let mut o = good_observations();
    let caps = capabilities::capability_mask(&command_policy().start_capabilities);
    if let Ok(s) = &mut o.start {
        s.cap_bnd = caps;
        s.cap_prm = caps;
        s.cap_eff = caps;
    }
    o.mounts = parse_mountinfo(COMMAND_MOUNTINFO);
    let totals = |t| PathFacts {
        totals: Some(t),
        ..PathFacts::default()
    };
    o.paths.insert(paths::WORK.into(), totals(AREA));
    o.paths.insert(paths::OVERLAY_AREA.into(), totals(AREA));
    o.paths.insert(
        "/".into(),
        PathFacts {
            kind: "dir".into(),
            on_readonly_mount: true,
            ..PathFacts::default()
        },
    );
    o
}

/// The command's observations with `line` of its mountinfo replaced by `with`.
fn command_mount(line: &str, with: &str) -> Observations {
    assert!(COMMAND_MOUNTINFO.contains(line), "{line}");
    let mut o = command_observations();
    o.mounts = parse_mountinfo(&COMMAND_MOUNTINFO.replace(line, with));
    o
}

fn command_refusal(o: &Observations) -> Refusal {
    preflight(&command_policy(), o).expect_err("must refuse")
}

#[test]
fn a_command_with_its_overlay_laid_passes() {
    let passed = preflight(&command_policy(), &command_observations()).expect("passes");
    for id in [
        Id::WorkReadonly,
        Id::WritableNosuidNodevNoexec,
        Id::MetadataReadonly,
        Id::WorkBytes,
        Id::WorkInodes,
        Id::ExecAllowlist,
        Id::ContentNoexec,
        Id::NoHostMounts,
    ] {
        assert!(passed.contains(&id), "{id} not passed");
    }
}

#[test]
fn an_overlay_the_init_could_not_lay_is_refused_with_its_reasons() {
    let mut o = command_observations();
    // What the judge sees when the move aside failed: the volume alone at /work.
    o.mounts = parse_mountinfo(&COMMAND_MOUNTINFO.replace(OVERLAY_LINE, ""));
    o.overlay = vec![
        "overlay on /work: move the mount at /work/.git to /run/cordon/overlay/stage/0: EINVAL"
            .into(),
    ];
    let refusal = command_refusal(&o);
    assert_eq!(refusal.id, Id::WorkReadonly);
    assert!(refusal.observed.contains("EINVAL"), "{}", refusal.observed);
    // Without the reasons, the missing cover is the covering rule's mount missing.
    o.overlay.clear();
    let refusal = command_refusal(&o);
    assert_eq!(refusal.id, Id::WritableNosuidNodevNoexec);
    assert!(
        refusal.expected.contains("mount 2 at /work"),
        "{}",
        refusal.expected
    );
    // No area at all: that mount is what is missing, whatever it made of the overlay.
    let mut o = command_mount(
        "92 71 0:50 / /run/cordon/overlay rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=2048k,nr_inodes=50,mode=700,uid=10001,gid=10001\n",
        "",
    );
    o.overlay = vec!["overlay on /work: mkdir /run/cordon/overlay/upper: EROFS".into()];
    let refusal = command_refusal(&o);
    assert_eq!(refusal.id, Id::WritableNosuidNodevNoexec);
    assert!(
        refusal.expected.contains("/run/cordon/overlay"),
        "{}",
        refusal.expected
    );
}

#[test]
fn a_second_work_mount_without_a_covered_rule_is_refused() {
    // The agent's policy: one rule at /work. The same overlay over its volume is a second mount.
    let mut o = good_observations();
    o.mounts = parse_mountinfo(&format!("{MOUNTINFO}{OVERLAY_LINE}"));
    let refusal = preflight(&good_policy(), &o).expect_err("must refuse");
    assert_eq!(refusal.id, Id::NoHostMounts);
    assert_eq!(refusal.expected, "one mount at /work");
    // The agent's /work an overlay of its own: refused although its rule names no fstype here.
    let mut o = good_observations();
    o.mounts = parse_mountinfo(&MOUNTINFO.replace(
        "87 71 0:40 / /work ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=8192k,nr_inodes=200",
        "87 71 0:40 / /work ro,nosuid,nodev,noexec,relatime - overlay overlay rw,lowerdir=/work,upperdir=/tmp/u,workdir=/tmp/w",
    ));
    let refusal = preflight(&good_policy(), &o).expect_err("must refuse");
    assert_eq!(refusal.id, Id::NoHostMounts);
    assert!(
        refusal.expected.contains("no overlay at /work"),
        "{}",
        refusal.expected
    );
}

#[test]
fn a_third_work_mount_is_refused() {
    let third = "96 95 0:52 / /work rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=2048k,nr_inodes=50\n";
    let o = command_mount(OVERLAY_LINE, &format!("{OVERLAY_LINE}{third}"));
    let refusal = command_refusal(&o);
    assert_eq!(refusal.id, Id::NoHostMounts);
    assert!(
        refusal.expected.starts_with("2 mounts at /work"),
        "{}",
        refusal.expected
    );
    assert!(
        refusal.observed.starts_with("96 95"),
        "{}",
        refusal.observed
    );
}

#[test]
fn the_covered_mount_and_its_cover_are_each_held_to_their_rule() {
    // The volume beneath the overlay writable: the covered rule's protection.
    let o = command_mount("87 71 0:40 / /work ro,", "87 71 0:40 / /work rw,");
    assert_eq!(command_refusal(&o).id, Id::WorkReadonly);
    // The overlay is writable and must be noexec (its rule is the second, not the first).
    let o = command_mount(
        "/work rw,nosuid,nodev,noexec,relatime - overlay",
        "/work rw,nosuid,nodev,relatime - overlay",
    );
    let refusal = command_refusal(&o);
    assert_eq!(refusal.id, Id::WritableNosuidNodevNoexec);
    assert!(
        refusal.observed.starts_with("missing noexec"),
        "{}",
        refusal.observed
    );
    // The overlay under the volume instead of over it: the first /work is no tmpfs.
    let volume = "87 71 0:40 / /work ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=8192k,nr_inodes=200\n";
    let swapped = COMMAND_MOUNTINFO
        .replace(volume, "")
        .replace(OVERLAY_LINE, &format!("{OVERLAY_LINE}{volume}"));
    let mut o = command_observations();
    o.mounts = parse_mountinfo(&swapped);
    let refusal = command_refusal(&o);
    assert_eq!(refusal.id, Id::NoHostMounts);
    assert_eq!(refusal.expected, "/work is tmpfs");
}

#[test]
fn a_writable_exec_scratch_must_be_nosuid_and_nodev_and_may_be_exec() {
    let tmp = "88 71 0:47 / /tmp rw,nosuid,nodev,relatime";
    let refusal = command_refusal(&command_mount(tmp, "88 71 0:47 / /tmp rw,nosuid,relatime"));
    assert_eq!(refusal.id, Id::WritableNosuidNodevNoexec);
    assert!(
        refusal.expected.ends_with("/tmp nosuid,nodev"),
        "{}",
        refusal.expected
    );
    assert!(
        refusal.observed.starts_with("missing nodev:"),
        "{}",
        refusal.observed
    );
    let refusal = command_refusal(&command_mount(tmp, "88 71 0:47 / /tmp rw,relatime"));
    assert!(
        refusal.observed.starts_with("missing nosuid,nodev:"),
        "{}",
        refusal.observed
    );
    // noexec is allowed, not asked for.
    let o = command_mount(tmp, "88 71 0:47 / /tmp rw,nosuid,nodev,noexec,relatime");
    assert!(preflight(&command_policy(), &o).is_ok());
    // The same mount under the agent's rule (writable, noexec) is refused.
    let mut p = command_policy();
    for m in p.mounts.iter_mut().filter(|m| m.path == paths::TMP) {
        m.access = Access::Writable;
    }
    let refusal = preflight(&p, &command_observations()).expect_err("must refuse");
    assert_eq!(refusal.id, Id::WritableNosuidNodevNoexec);
    assert!(
        refusal.observed.starts_with("missing noexec:"),
        "{}",
        refusal.observed
    );
}

#[test]
fn an_exec_tree_must_be_a_directory_on_a_read_only_mount() {
    let with_root = |facts: PathFacts| {
        let mut o = command_observations();
        o.paths.insert("/".into(), facts);
        o
    };
    let dir = |ro: bool, writable: bool| PathFacts {
        kind: "dir".into(),
        on_readonly_mount: ro,
        writable,
        ..PathFacts::default()
    };
    for o in [
        with_root(dir(false, false)),
        with_root(dir(true, true)),
        with_root(PathFacts {
            kind: "file".into(),
            on_readonly_mount: true,
            ..PathFacts::default()
        }),
        // Never observed.
        {
            let mut o = command_observations();
            o.paths.remove("/");
            o
        },
    ] {
        let refusal = command_refusal(&o);
        assert_eq!(refusal.id, Id::ExecAllowlist);
        assert_eq!(refusal.expected, "/ is a directory on a read-only mount");
    }
    // An exec tree on the writable scratch.
    let mut p = command_policy();
    p.landlock.exec_trees.push(paths::TMP.into());
    let mut o = command_observations();
    o.paths.insert(
        paths::TMP.into(),
        PathFacts {
            totals: Some((4 << 20, 100)),
            ..dir(false, true)
        },
    );
    let refusal = preflight(&p, &o).expect_err("must refuse");
    assert_eq!(refusal.id, Id::ExecAllowlist);
    assert!(
        refusal
            .observed
            .starts_with("/tmp: dir on a writable mount"),
        "{}",
        refusal.observed
    );
}

#[test]
fn an_overlay_laid_from_elsewhere_is_refused() {
    let options =
        "rw,lowerdir=/work,upperdir=/run/cordon/overlay/upper,workdir=/run/cordon/overlay/work";
    for other in [
        "rw,lowerdir=/tmp,upperdir=/run/cordon/overlay/upper,workdir=/run/cordon/overlay/work",
        "rw,lowerdir=/work:/tmp,upperdir=/run/cordon/overlay/upper,workdir=/run/cordon/overlay/work",
        "rw,lowerdir=/work,lowerdir+=/tmp,upperdir=/run/cordon/overlay/upper,workdir=/run/cordon/overlay/work",
        "rw,lowerdir=/work,upperdir=/tmp/upper,workdir=/run/cordon/overlay/work",
        "rw,lowerdir=/work,upperdir=/run/cordon/overlay,workdir=/run/cordon/overlay/work",
        "rw,lowerdir=/work,upperdir=/run/cordon/overlay/upper,workdir=/tmp/work",
        "rw,lowerdir=/work",
    ] {
        let refusal = command_refusal(&command_mount(options, other));
        assert_eq!(refusal.id, Id::WorkReadonly, "{other}");
        assert!(refusal.observed.ends_with(other), "{}", refusal.observed);
    }
    // Options the kernel adds on its own are no concern.
    let o = command_mount(options, &format!("{options},xino=off,uuid=null"));
    assert!(preflight(&command_policy(), &o).is_ok());
}

/// Over a shared snapshot the tree must be the one recorded: a changed one, an unreadable one
/// and one never read are each refused; the recorded one passes and is attested.
#[test]
fn a_snapshot_passes_only_with_its_recorded_digest() {
    let recorded = format!("sha256:{}", "a".repeat(64));
    let mut p = good_policy();
    p.work_digest = Some(recorded.clone());
    let mut o = good_observations();
    let breach = |found: Option<Result<String, String>>| {
        let mut o = good_observations();
        o.work_digest = found;
        let refusal = preflight(&p, &o).unwrap_err();
        assert_eq!(refusal.id, Id::SnapshotVerified, "{refusal:?}");
        refusal
    };
    let changed = breach(Some(Ok(format!("sha256:{}", "b".repeat(64)))));
    assert_eq!(changed.expected, recorded);
    assert_eq!(changed.observed, format!("sha256:{}", "b".repeat(64)));
    breach(Some(Err("./x: Permission denied".into())));
    breach(None);
    o.work_digest = Some(Ok(recorded));
    assert!(preflight(&p, &o).unwrap().contains(&Id::SnapshotVerified));
    // Without a snapshot nothing is read and nothing is attested.
    let passed = preflight(&good_policy(), &good_observations()).unwrap();
    assert!(!passed.contains(&Id::SnapshotVerified));
}
