//! `lockdown`: identity, capabilities, no_new_privs, seccomp (the engine's profile and every rule
//! of cordon's stacked filters, by canary syscalls), PID 1 sealed, IPC, stdin, TTY, namespaces,
//! environment, the pids limit.

use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;

use cordon_contract::capabilities::holds_engine_defaults;
use cordon_contract::probe::ops;
use cordon_contract::procfs;
use cordon_contract::{seccomp, Id};

use crate::report::{check, Probe};

fn syscall6(nr: libc::c_long, a: [usize; 6]) -> std::io::Result<i64> {
    // SAFETY: every canary passes arguments the kernel validates and rejects (or, for memfd,
    // accepts harmlessly); no pointer here is dereferenced into our memory for writing.
    check(unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) })
}

/// The engine's own profile, for a container without the init's start capabilities: the gate's
/// container-level rows, which run the probe as the workload from the start. Under the init the
/// container starts with SYS_ADMIN, which loosens Docker's profile (mount, unshare, bpf are let
/// through): there cordon's own filter answers, and its canaries below prove it.
fn engine_canaries(p: &mut Probe<'_>) {
    if !p.ctx.without_init {
        return;
    }
    let pid = std::process::id() as usize;
    p.deny_syscall(
        &ops::ENGINE_PROCESS_VM_READV,
        "process_vm_readv(self, flags=invalid)",
        || syscall6(libc::SYS_process_vm_readv, [pid, 0, 0, 0, 0, 0xffff]),
    );
    p.deny_syscall(
        &ops::ENGINE_PROCESS_VM_WRITEV,
        "process_vm_writev(self, flags=invalid)",
        || syscall6(libc::SYS_process_vm_writev, [pid, 0, 0, 0, 0, 0xffff]),
    );
    p.deny_syscall(&ops::ENGINE_KEYCTL, "keyctl(invalid command)", || {
        syscall6(libc::SYS_keyctl, [0xffff, 0, 0, 0, 0, 0])
    });
    p.deny_syscall(&ops::ENGINE_BPF, "bpf(invalid command)", || {
        syscall6(libc::SYS_bpf, [0xffff, 0, 0, 0, 0, 0])
    });
    p.deny_syscall(
        &ops::ENGINE_UNSHARE_USER,
        "unshare(CLONE_NEWUSER | invalid flag)",
        || {
            syscall6(
                libc::SYS_unshare,
                [(libc::CLONE_NEWUSER as usize) | 0x1, 0, 0, 0, 0, 0],
            )
        },
    );
    p.deny_syscall(&ops::ENGINE_MOUNT, "mount(target=invalid pointer)", || {
        syscall6(libc::SYS_mount, [0, 1, 0, 0, 0, 0])
    });
}

/// cordon-init's own filters: every canary of the shared table must be answered by the filter's
/// own errno (EACCES; ENOSYS for clone3), not by Docker's EPERM and not by the kernel: so a rule
/// dropped from cordon's filter shows even where Docker's profile refuses the call too.
fn init_canaries(p: &mut Probe<'_>) {
    for (op, canary) in ops::canaries() {
        if op.probe != "lockdown" {
            continue;
        }
        // clone3 is ENOSYS (glibc falls back to clone): Docker's profile answers the same for a
        // container without SYS_ADMIN, but the init starts with SYS_ADMIN, and with it Docker's
        // profile lets clone3 through: cordon's filter is the one that answers here.
        let errno = if canary.nr == libc::SYS_clone3 {
            seccomp::CLONE3_ERRNO
        } else {
            seccomp::DENY_ERRNO
        };
        p.refused_with(&op, errno, canary.unfiltered, || {
            crate::report::canary(&canary)
        });
    }
}

/// PID 1 is non-dumpable: its environment and memory are closed to the workload, which shares its
/// uid (only the open is tried: nothing is read).
fn pid1_sealed(p: &mut Probe<'_>) {
    p.deny(&ops::PROC1_ENVIRON, "open /proc/1/environ", || {
        std::fs::File::open("/proc/1/environ")
    });
    p.deny(&ops::PROC1_MEM, "open /proc/1/mem", || {
        std::fs::File::open("/proc/1/mem")
    });
}

/// Fork children that wait on a pipe until the pids limit stops us; release and reap them.
fn fork_flood(p: &mut Probe<'_>) {
    let limit = p.ctx.policy.cgroup.pids_max;
    let ceiling = limit + 8;
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) into a local array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        p.error("fork-flood: pipe failed");
        return;
    }
    let mut children = Vec::new();
    let mut stopped = None;
    while (children.len() as u64) < ceiling {
        // SAFETY: the child only reads the pipe and exits.
        match unsafe { libc::fork() } {
            0 => {
                let mut b = [0u8; 1];
                // SAFETY: closing our copy of the write end, then a blocking read until EOF.
                unsafe {
                    libc::close(fds[1]);
                    libc::read(fds[0], b.as_mut_ptr().cast(), 1);
                    libc::_exit(0);
                }
            }
            -1 => {
                stopped = Some(std::io::Error::last_os_error());
                break;
            }
            pid => children.push(pid),
        }
    }
    // SAFETY: closing both ends releases every child; then reap exactly those children.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
        for pid in &children {
            libc::waitpid(*pid, std::ptr::null_mut(), 0);
        }
    }
    if children.is_empty() {
        p.error(format!(
            "fork-flood: no child could be forked ({stopped:?})"
        ));
        return;
    }
    let forked = children.len() as u64;
    p.require(&ops::FORK_FLOOD, forked < limit, || {
        format!("forked {forked} processes without reaching pids.max {limit}")
    });
}

pub fn run(p: &mut Probe<'_>) {
    let status = match std::fs::read_to_string("/proc/self/status")
        .map_err(|e| e.to_string())
        .and_then(|t| procfs::parse_status(&t))
    {
        Ok(s) => s,
        Err(e) => {
            p.error(format!("/proc/self/status: {e}"));
            return;
        }
    };
    identity_and_privileges(p, &status);
    engine_canaries(p);
    init_canaries(p);
    pid1_sealed(p);
    ipc_and_terminal(p);
    namespaces(p);
    environment(p);
    fork_flood(p);
}

/// The policy's ids (every real, effective, saved and filesystem id, and the groups), no
/// capability in any set, no_new_privs, and seccomp filtering.
fn identity_and_privileges(p: &mut Probe<'_>, status: &procfs::Status) {
    let policy = &p.ctx.policy;
    let (uid, gid) = (policy.uid, policy.gid);
    let ids_ok = status.uid.iter().all(|u| *u == uid)
        && status.gid.iter().all(|g| *g == gid)
        && status.groups.iter().all(|g| *g == gid);
    p.require(&ops::IDENTITY, ids_ok, || {
        format!(
            "uid {:?} gid {:?} groups {:?}",
            status.uid, status.gid, status.groups
        )
    });

    let all_empty = status.capability_sets().iter().all(|s| *s == 0);
    let class = if p.ctx.privileged {
        Id::NotPrivileged
    } else if holds_engine_defaults(status.cap_bnd) || status.cap_bnd == 0 {
        Id::CapsDropped
    } else {
        Id::CapAdded
    };
    p.require_as(&ops::CAPABILITY_SETS, class, all_empty, || {
        status.describe_capabilities()
    });
    p.require(&ops::NO_NEW_PRIVS, status.no_new_privs == 1, || {
        format!("NoNewPrivs {}", status.no_new_privs)
    });
    p.require(&ops::SECCOMP_MODE, status.seccomp == 2, || {
        format!("Seccomp {}", status.seccomp)
    });
}

/// No shared memory mount, no terminal on fds 0-2, and stdin is /dev/null.
fn ipc_and_terminal(p: &mut Probe<'_>) {
    p.deny(&ops::DEV_SHM, "/dev/shm exists", || {
        std::fs::symlink_metadata("/dev/shm")
    });
    // SAFETY: isatty only inspects descriptor numbers.
    let ttys: Vec<i32> = (0..3)
        .filter(|fd| unsafe { libc::isatty(*fd) } == 1)
        .collect();
    p.require(&ops::TTY, ttys.is_empty(), || {
        format!("terminal on fds {ttys:?}")
    });
    // A terminal on fd 0 is the TTY breach above; otherwise fd 0 must be /dev/null.
    if !ttys.contains(&0) {
        let stdin = std::fs::metadata("/proc/self/fd/0");
        let null = stdin
            .as_ref()
            .map(|m| {
                m.file_type().is_char_device()
                    && libc::major(m.rdev()) == 1
                    && libc::minor(m.rdev()) == 3
            })
            .unwrap_or(false);
        p.require(&ops::STDIN, null, || {
            format!("fd 0 is not /dev/null: {:?}", stdin.map(|m| m.file_type()))
        });
    }
}

/// The container's own pid, cgroup and UTS namespaces: PID 1 is the init (or the probe), every
/// cgroup path is the namespace's root, the hostname is the policy's.
fn namespaces(p: &mut Probe<'_>) {
    let pid1 = std::fs::read_to_string("/proc/1/cmdline").unwrap_or_default();
    let pid1 = pid1.split('\0').next().unwrap_or("").to_owned();
    let ours = pid1 == cordon_contract::paths::INIT || pid1 == cordon_contract::paths::PROBE;
    p.require(&ops::PID_NAMESPACE, ours, || {
        format!("pid 1 is {pid1:?}, not this container's")
    });
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let foreign: Vec<&str> = cgroup.lines().filter(|l| !l.ends_with(":/")).collect();
    p.require(&ops::CGROUP_NAMESPACE, foreign.is_empty(), || {
        format!("cgroup paths {foreign:?}")
    });
    let hostname = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.require(
        &ops::UTS_NAMESPACE,
        hostname == p.ctx.policy.hostname,
        || format!("hostname {hostname:?}"),
    );
}

/// The environment is exactly the policy's (reported by name only).
fn environment(p: &mut Probe<'_>) {
    // HOSTNAME is the engine's copy of the hostname, which uts-namespace checks; TERM is what the
    // engine sets for a terminal, which the tty check reports.
    let tty = p.ctx.tty;
    let engine_set = |e: &String| e.starts_with("HOSTNAME=") || (tty && e.starts_with("TERM="));
    let not_hostname = |e: &String| !engine_set(e);
    let mut want: Vec<String> = p
        .ctx
        .policy
        .env
        .iter()
        .filter(|e| not_hostname(e))
        .cloned()
        .collect();
    let mut have: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .filter(not_hostname)
        .collect();
    want.sort();
    have.sort();
    p.require(&ops::ENVIRONMENT, want == have, || {
        let names = |v: &[String], other: &[String]| -> Vec<String> {
            v.iter()
                .filter(|e| !other.contains(e))
                .map(|e| e.split('=').next().unwrap_or("").to_owned())
                .collect()
        };
        // Names only: a leaked value may be a secret.
        format!(
            "unexpected {:?}, missing {:?}",
            names(&have, &want),
            names(&want, &have)
        )
    });
}
