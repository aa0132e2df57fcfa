//! What cordon-init's seccomp filters refuse, as data: the init compiles its filters from these
//! tables and cordon-probe makes every canary call, so a rule cannot exist in one and be forgotten
//! in the other.
//!
//! Each filter answers with an errno of its own: Docker's default profile answers EPERM and the
//! kernel its own errno, so a probe can tell *which* layer refused a call. A rule dropped from
//! cordon's filter shows even where Docker's profile would refuse the call too (x86_64 only: the
//! numbers are `libc::SYS_*` of the one target cordon builds for).

use crate::catalogue::Id;

/// What cordon's deny filter answers (Docker's profile answers EPERM).
pub const DENY_ERRNO: i32 = libc::EACCES;
/// What the socket family filter answers: the family does not exist, as far as the agent knows.
pub const FAMILY_ERRNO: i32 = libc::EAFNOSUPPORT;
/// What the clone3 filter answers: glibc falls back to clone(2) only on ENOSYS, and clone's flags
/// are readable by a filter where clone3's (behind a pointer) are not.
pub const CLONE3_ERRNO: i32 = libc::ENOSYS;

/// `MFD_NOEXEC_SEAL`: a memfd created with it can never be executed.
pub const MFD_NOEXEC_SEAL: u64 = 0x0008;

/// One comparison of a syscall argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// The argument has none of `bits` (memfd_create without MFD_NOEXEC_SEAL).
    Lacks { arg: u8, bits: u64 },
    /// The argument has all of `bits` (clone with a namespace flag).
    Has { arg: u8, bits: u64 },
    /// The 32-bit argument is `value`.
    Is { arg: u8, value: u32 },
    /// The 32-bit argument is not `value` (a pid other than 0, the caller).
    Not { arg: u8, value: u32 },
}

impl Cond {
    /// Whether a call with `args` meets this comparison (the BPF the init compiles does the same).
    pub fn holds(self, args: &[u64; 6]) -> bool {
        match self {
            Cond::Lacks { arg, bits } => args[arg as usize] & bits == 0,
            Cond::Has { arg, bits } => args[arg as usize] & bits == bits,
            Cond::Is { arg, value } => args[arg as usize] as u32 == value,
            Cond::Not { arg, value } => args[arg as usize] as u32 != value,
        }
    }
}

/// When a rule refuses a call: any one of the alternatives, each a conjunction of comparisons.
/// No alternative at all means always (seccompiler's model: rules OR, conditions AND).
pub type When = &'static [&'static [Cond]];

/// Whether a call with `args` meets `when`.
pub fn meets(when: &[&[Cond]], args: &[u64; 6]) -> bool {
    when.is_empty() || when.iter().any(|all| all.iter().all(|c| c.holds(args)))
}

/// One syscall a filter refuses, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub name: &'static str,
    pub nr: i64,
    pub when: When,
    /// The protection the rule belongs to (a gate row leaves exactly its rules out).
    pub protection: Id,
}

impl Rule {
    pub fn refuses(&self, nr: i64, args: &[u64; 6]) -> bool {
        self.nr == nr && meets(self.when, args)
    }
}

const ALWAYS: When = &[];
/// A pid argument other than 0 (0 is the caller; PID 1 and every other process are refused).
const NOT_SELF: When = &[&[Cond::Not { arg: 0, value: 0 }]];

macro_rules! rules {
    ($protection:ident: $( $name:ident $(= $when:expr)? ),* $(,)?) => {
        &[ $( Rule {
            name: stringify!($name),
            nr: paste_nr!($name),
            when: rules!(@when $($when)?),
            protection: Id::$protection,
        }, )* ]
    };
    (@when) => { ALWAYS };
    (@when $when:expr) => { $when };
}

macro_rules! paste_nr {
    ($name:ident) => {
        syscall_nr::$name
    };
}

/// Syscall numbers by name (x86_64).
#[allow(non_upper_case_globals)]
mod syscall_nr {
    macro_rules! nrs {
        ($($name:ident),* $(,)?) => { $( pub const $name: i64 = paste_sys!($name); )* };
    }
    macro_rules! paste_sys {
        (io_uring_setup) => {
            libc::SYS_io_uring_setup
        };
        (io_uring_enter) => {
            libc::SYS_io_uring_enter
        };
        (io_uring_register) => {
            libc::SYS_io_uring_register
        };
        (ptrace) => {
            libc::SYS_ptrace
        };
        (process_vm_readv) => {
            libc::SYS_process_vm_readv
        };
        (process_vm_writev) => {
            libc::SYS_process_vm_writev
        };
        (pidfd_getfd) => {
            libc::SYS_pidfd_getfd
        };
        (kcmp) => {
            libc::SYS_kcmp
        };
        (keyctl) => {
            libc::SYS_keyctl
        };
        (add_key) => {
            libc::SYS_add_key
        };
        (request_key) => {
            libc::SYS_request_key
        };
        (bpf) => {
            libc::SYS_bpf
        };
        (userfaultfd) => {
            libc::SYS_userfaultfd
        };
        (perf_event_open) => {
            libc::SYS_perf_event_open
        };
        (mount) => {
            libc::SYS_mount
        };
        (umount2) => {
            libc::SYS_umount2
        };
        (pivot_root) => {
            libc::SYS_pivot_root
        };
        (chroot) => {
            libc::SYS_chroot
        };
        (move_mount) => {
            libc::SYS_move_mount
        };
        (open_tree) => {
            libc::SYS_open_tree
        };
        (fsopen) => {
            libc::SYS_fsopen
        };
        (fsconfig) => {
            libc::SYS_fsconfig
        };
        (fsmount) => {
            libc::SYS_fsmount
        };
        (fspick) => {
            libc::SYS_fspick
        };
        (mount_setattr) => {
            libc::SYS_mount_setattr
        };
        (unshare) => {
            libc::SYS_unshare
        };
        (setns) => {
            libc::SYS_setns
        };
        (execveat) => {
            libc::SYS_execveat
        };
        (name_to_handle_at) => {
            libc::SYS_name_to_handle_at
        };
        (open_by_handle_at) => {
            libc::SYS_open_by_handle_at
        };
        (kexec_load) => {
            libc::SYS_kexec_load
        };
        (kexec_file_load) => {
            libc::SYS_kexec_file_load
        };
        (init_module) => {
            libc::SYS_init_module
        };
        (finit_module) => {
            libc::SYS_finit_module
        };
        (delete_module) => {
            libc::SYS_delete_module
        };
        (quotactl) => {
            libc::SYS_quotactl
        };
        (quotactl_fd) => {
            libc::SYS_quotactl_fd
        };
        (swapon) => {
            libc::SYS_swapon
        };
        (swapoff) => {
            libc::SYS_swapoff
        };
        (reboot) => {
            libc::SYS_reboot
        };
        (acct) => {
            libc::SYS_acct
        };
        (fanotify_init) => {
            libc::SYS_fanotify_init
        };
        (sethostname) => {
            libc::SYS_sethostname
        };
        (setdomainname) => {
            libc::SYS_setdomainname
        };
        (syslog) => {
            libc::SYS_syslog
        };
        (memfd_create) => {
            libc::SYS_memfd_create
        };
        (clone) => {
            libc::SYS_clone
        };
        (clone3) => {
            libc::SYS_clone3
        };
        (prlimit64) => {
            libc::SYS_prlimit64
        };
        (setpriority) => {
            libc::SYS_setpriority
        };
        (sched_setscheduler) => {
            libc::SYS_sched_setscheduler
        };
        (sched_setparam) => {
            libc::SYS_sched_setparam
        };
        (sched_setattr) => {
            libc::SYS_sched_setattr
        };
        (sched_setaffinity) => {
            libc::SYS_sched_setaffinity
        };
        (ioprio_set) => {
            libc::SYS_ioprio_set
        };
        (migrate_pages) => {
            libc::SYS_migrate_pages
        };
        (move_pages) => {
            libc::SYS_move_pages
        };
        (process_madvise) => {
            libc::SYS_process_madvise
        };
        (process_mrelease) => {
            libc::SYS_process_mrelease
        };
        (socket) => {
            libc::SYS_socket
        };
        (socketpair) => {
            libc::SYS_socketpair
        };
    }
    nrs!(
        io_uring_setup,
        io_uring_enter,
        io_uring_register,
        ptrace,
        process_vm_readv,
        process_vm_writev,
        pidfd_getfd,
        kcmp,
        keyctl,
        add_key,
        request_key,
        bpf,
        userfaultfd,
        perf_event_open,
        mount,
        umount2,
        pivot_root,
        chroot,
        move_mount,
        open_tree,
        fsopen,
        fsconfig,
        fsmount,
        fspick,
        mount_setattr,
        unshare,
        setns,
        execveat,
        name_to_handle_at,
        open_by_handle_at,
        kexec_load,
        kexec_file_load,
        init_module,
        finit_module,
        delete_module,
        quotactl,
        quotactl_fd,
        swapon,
        swapoff,
        reboot,
        acct,
        fanotify_init,
        sethostname,
        setdomainname,
        syslog,
        memfd_create,
        clone,
        clone3,
        prlimit64,
        setpriority,
        sched_setscheduler,
        sched_setparam,
        sched_setattr,
        sched_setaffinity,
        ioprio_set,
        migrate_pages,
        move_pages,
        process_madvise,
        process_mrelease,
        socket,
        socketpair,
    );
}

/// Namespace flags `clone` must not carry (clone3's are behind a pointer: it is refused whole).
const CLONE_NAMESPACE: When = &[
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWNS as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWCGROUP as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWUTS as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWIPC as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWUSER as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWPID as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: libc::CLONE_NEWNET as u64,
    }],
    &[Cond::Has {
        arg: 0,
        bits: 0x0000_0080,
    }], // CLONE_NEWTIME
];

/// The deny filter (answers [`DENY_ERRNO`]): kernel surfaces an agent never needs. Docker's
/// profile refuses most of these too, but not on every engine, and not once the init's start
/// capabilities (SYS_ADMIN) loosen it: with SYS_ADMIN in the container's set Docker allows the
/// mount family, unshare, setns, clone with namespace flags, quotactl, fanotify and syslog.
pub const DENIED: &[Rule] = rules!(SeccompStacked:
    io_uring_setup, io_uring_enter, io_uring_register, ptrace, process_vm_readv,
    process_vm_writev, pidfd_getfd, kcmp, keyctl, add_key, request_key, bpf, userfaultfd,
    perf_event_open, mount, umount2, pivot_root, chroot, move_mount, open_tree, fsopen, fsconfig,
    fsmount, fspick, mount_setattr, unshare, setns, execveat, name_to_handle_at,
    open_by_handle_at, kexec_load, kexec_file_load, init_module, finit_module, delete_module,
    quotactl, quotactl_fd, swapon, swapoff, reboot, acct, fanotify_init, sethostname,
    setdomainname, syslog,
    memfd_create = &[&[Cond::Lacks { arg: 1, bits: MFD_NOEXEC_SEAL }]],
    clone = CLONE_NAMESPACE,
);

/// Calls that tune or inspect another process (answers [`DENY_ERRNO`]): the workload shares the
/// init's uid, so the kernel would let it lower PID 1's limits and priority.
pub const SEALED: &[Rule] = rules!(InitSealed:
    prlimit64 = NOT_SELF,
    // Only (PRIO_PROCESS, 0): PRIO_USER 0 would reach every process of the uid, the init included.
    setpriority = &[&[Cond::Not { arg: 0, value: 0 }], &[Cond::Not { arg: 1, value: 0 }]],
    sched_setscheduler = NOT_SELF,
    sched_setparam = NOT_SELF,
    sched_setattr = NOT_SELF,
    sched_setaffinity = NOT_SELF,
    // Only (IOPRIO_WHO_PROCESS, 0).
    ioprio_set = &[&[Cond::Not { arg: 0, value: 1 }], &[Cond::Not { arg: 1, value: 0 }]],
    migrate_pages = NOT_SELF,
    move_pages = NOT_SELF,
    process_madvise,
    process_mrelease,
);

/// The clone3 filter (answers [`CLONE3_ERRNO`]).
pub const CLONE3: &[Rule] = rules!(SeccompStacked: clone3);

/// Socket families the agent may use: what a vendor runtime needs to reach its proxy on loopback
/// and to read its own interfaces (glibc's getaddrinfo and getifaddrs ask NETLINK_ROUTE).
pub const ALLOWED_FAMILIES: &[u32] = &[
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
    libc::AF_NETLINK as u32,
];
/// The only netlink protocol allowed (NETLINK_ROUTE: in a private network namespace it sees `lo`).
pub const ALLOWED_NETLINK_PROTOCOLS: &[u32] = &[libc::NETLINK_ROUTE as u32];

/// The socket families a policy allows, as the family filter (answers [`FAMILY_ERRNO`]) applies
/// them to `socket` and `socketpair`: refused when the family is none of `families`, or when it is
/// netlink with a protocol not in `netlink_protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families<'a> {
    pub families: &'a [u32],
    pub netlink_protocols: &'a [u32],
}

impl Families<'_> {
    /// The syscalls the family filter reads.
    pub const SYSCALLS: [(&'static str, i64); 2] = [
        ("socket", syscall_nr::socket),
        ("socketpair", syscall_nr::socketpair),
    ];

    /// The alternatives of the refusal, as comparisons (each inner list is a conjunction).
    pub fn when(&self) -> Vec<Vec<Cond>> {
        let unknown: Vec<Cond> = self
            .families
            .iter()
            .map(|f| Cond::Not { arg: 0, value: *f })
            .collect();
        let mut when = vec![unknown];
        if self.families.contains(&(libc::AF_NETLINK as u32)) {
            let mut other = vec![Cond::Is {
                arg: 0,
                value: libc::AF_NETLINK as u32,
            }];
            other.extend(
                self.netlink_protocols
                    .iter()
                    .map(|p| Cond::Not { arg: 2, value: *p }),
            );
            when.push(other);
        }
        when
    }

    /// Whether the filter refuses `socket`/`socketpair` with `args`.
    pub fn refuses(&self, nr: i64, args: &[u64; 6]) -> bool {
        Self::SYSCALLS.iter().any(|(_, n)| *n == nr)
            && self
                .when()
                .iter()
                .any(|all| all.iter().all(|c| c.holds(args)))
    }
}

/// What cordon allows.
pub const AGENT_FAMILIES: Families<'static> = Families {
    families: ALLOWED_FAMILIES,
    netlink_protocols: ALLOWED_NETLINK_PROTOCOLS,
};

/// A call that must be refused, made with arguments the kernel itself would reject (or accept
/// harmlessly), so the errno says which layer answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canary {
    /// The probe operation's action name.
    pub action: &'static str,
    pub nr: i64,
    pub args: [u64; 6],
    /// What an unfiltered kernel answers for these arguments (a capless process; root too).
    pub unfiltered: &'static str,
}

/// -1 as a 32-bit fd argument.
const BAD_FD: u64 = 0xffff_ffff;
/// A pid no kernel hands out (pid_max is at most 2^22).
const NO_PID: u64 = 0x3fff_ffff;
/// A pointer the kernel cannot read.
const BAD_PTR: u64 = 1;

macro_rules! canaries {
    ($( $action:literal: $name:ident($($arg:expr),*) => $unfiltered:literal; )*) => {
        &[ $( Canary {
            action: $action,
            nr: syscall_nr::$name,
            args: pad([$($arg as u64),*]),
            unfiltered: $unfiltered,
        }, )* ]
    };
}

/// Six arguments from fewer.
const fn pad<const N: usize>(given: [u64; N]) -> [u64; 6] {
    let mut out = [0u64; 6];
    let mut i = 0;
    while i < N {
        out[i] = given[i];
        i += 1;
    }
    out
}

/// One canary per rule of [`DENIED`], [`SEALED`] and [`CLONE3`] (a test checks the coverage).
pub const CANARIES: &[Canary] = canaries! {
    "io-uring-setup": io_uring_setup(0, 0) => "EFAULT (params NULL)";
    "io-uring-enter": io_uring_enter(BAD_FD, 0, 0, 0, 0, 0) => "EBADF";
    "io-uring-register": io_uring_register(BAD_FD, 0, 0, 0) => "EBADF";
    "ptrace": ptrace(0xdead, 0, 0, 0) => "ESRCH (pid 0)";
    "process-vm-readv": process_vm_readv(0, 0, 0, 0, 0, 0xffff) => "EINVAL (flags)";
    "process-vm-writev": process_vm_writev(0, 0, 0, 0, 0, 0xffff) => "EINVAL (flags)";
    "pidfd-getfd": pidfd_getfd(BAD_FD, 0, 0) => "EBADF";
    "kcmp": kcmp(0, 0, 0xff, 0, 0) => "ESRCH (pid 0)";
    "keyctl": keyctl(0xffff) => "EOPNOTSUPP";
    "add-key": add_key(0, 0, 0, 0, 0) => "EFAULT (type NULL)";
    "request-key": request_key(0, 0, 0, 0) => "EFAULT (type NULL)";
    "bpf": bpf(0xffff, 0, 0) => "EINVAL (command)";
    "userfaultfd": userfaultfd(0x3) => "EINVAL (UFFD_USER_MODE_ONLY with an unknown flag)";
    "perf-event-open": perf_event_open(0, 0, 0, 0, 0) => "EFAULT (attr NULL)";
    "mount": mount(0, BAD_PTR, 0, 0, 0) => "EFAULT (target)";
    "umount2": umount2(BAD_PTR, 0) => "EFAULT (target)";
    "pivot-root": pivot_root(BAD_PTR, BAD_PTR) => "EPERM without CAP_SYS_ADMIN, EFAULT with it";
    "chroot": chroot(BAD_PTR) => "EFAULT";
    "move-mount": move_mount(BAD_FD, 0, BAD_FD, 0, 0xffff_ffff) => "EPERM or EINVAL (flags)";
    "open-tree": open_tree(BAD_FD, 0, 0xffff_ffff) => "EINVAL (flags)";
    "fsopen": fsopen(0, 0xffff_ffff) => "EPERM or EINVAL (flags)";
    "fsconfig": fsconfig(BAD_FD, 0xff, 0, 0, 0) => "EINVAL or EBADF";
    "fsmount": fsmount(BAD_FD, 0xffff_ffff, 0) => "EPERM or EINVAL (flags)";
    "fspick": fspick(BAD_FD, 0, 0xffff_ffff) => "EPERM or EINVAL (flags)";
    "mount-setattr": mount_setattr(BAD_FD, 0, 0xffff_ffff, 0, 0) => "EINVAL (flags)";
    "unshare": unshare(libc::CLONE_NEWUSER as u64 | 0x1) => "EINVAL (flag 0x1)";
    "setns": setns(BAD_FD, 0) => "EBADF";
    "execveat": execveat(BAD_FD, 0, 0, 0, 0xffff) => "EINVAL (flags) or EFAULT";
    "name-to-handle-at": name_to_handle_at(BAD_FD, 0, 0, 0, 0xffff) => "EINVAL (flags)";
    "open-by-handle-at": open_by_handle_at(BAD_FD, 0, 0) => "EPERM without CAP_DAC_READ_SEARCH, else EBADF";
    "kexec-load": kexec_load(0, 0, 0, 0xffff_ffff) => "EPERM or EINVAL (flags)";
    "kexec-file-load": kexec_file_load(BAD_FD, BAD_FD, 0, 0, 0xffff_ffff) => "EPERM or EINVAL (flags)";
    "init-module": init_module(0, 0, 0) => "EPERM or ENOEXEC (empty image)";
    "finit-module": finit_module(BAD_FD, 0, 0xffff) => "EPERM or EINVAL (flags)";
    "delete-module": delete_module(0, 0) => "EPERM or EFAULT";
    "quotactl": quotactl(0xffff_ffff, 0, 0, 0) => "EINVAL (type)";
    "quotactl-fd": quotactl_fd(BAD_FD, 0xffff_ffff, 0, 0) => "EINVAL or EBADF";
    "swapon": swapon(0, 0) => "EPERM or EFAULT";
    "swapoff": swapoff(0) => "EPERM or EFAULT";
    "reboot": reboot(0, 0, 0, 0) => "EPERM or EINVAL (magic)";
    "acct": acct(BAD_PTR) => "EPERM or EFAULT";
    "fanotify-init": fanotify_init(0xffff_ffff, 0) => "EINVAL or EPERM";
    "sethostname": sethostname(0, 0xffff) => "EPERM or EINVAL (length)";
    "setdomainname": setdomainname(0, 0xffff) => "EPERM or EINVAL (length)";
    "syslog": syslog(0xffff, 0, 0) => "EPERM or EINVAL (type)";
    "memfd-create-executable": memfd_create(BAD_PTR, 0) => "EFAULT (name)";
    "clone-newns": clone(libc::CLONE_NEWNS as u64 | libc::CLONE_THREAD as u64) => "EINVAL (CLONE_THREAD without CLONE_SIGHAND)";
    "clone-newcgroup": clone(libc::CLONE_NEWCGROUP as u64 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone-newuts": clone(libc::CLONE_NEWUTS as u64 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone-newipc": clone(libc::CLONE_NEWIPC as u64 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone-newuser": clone(libc::CLONE_NEWUSER as u64 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone-newpid": clone(libc::CLONE_NEWPID as u64 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone-newnet": clone(libc::CLONE_NEWNET as u64 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone-newtime": clone(0x80 | libc::CLONE_THREAD as u64) => "EINVAL";
    "clone3": clone3(0, 0) => "EINVAL (size 0); Docker 20.10's profile answers ENOSYS too";
    // Every argument-filtered rule has a canary aimed at PID 1 and one at another process
    // (`every_filtered_rule_is_aimed_at_pid_1_and_at_another_process`).
    "prlimit-pid1": prlimit64(1, libc::RLIMIT_CPU as u64, BAD_PTR, 0) => "EFAULT (new limit)";
    "prlimit-other": prlimit64(NO_PID, libc::RLIMIT_CPU as u64, BAD_PTR, 0) => "EFAULT (new limit)";
    // No argument makes the kernel refuse this one: unfiltered, PID 1 is reniced to 19 (see
    // [`CARRIED_OUT_UNFILTERED`]), or EPERM for another uid.
    "setpriority-pid1": setpriority(0, 1, 19) => "0 (PID 1 reniced to 19) or EPERM";
    "setpriority-other-pid": setpriority(0, NO_PID, 0) => "ESRCH";
    "setpriority-user": setpriority(2, 0xffff_fffe, 0) => "ESRCH (no process of that uid)";
    "sched-setscheduler-pid1": sched_setscheduler(1, 0, BAD_PTR) => "EFAULT (param)";
    "sched-setscheduler-other": sched_setscheduler(NO_PID, 0, BAD_PTR) => "EFAULT (param)";
    "sched-setparam-pid1": sched_setparam(1, BAD_PTR) => "EFAULT (param)";
    "sched-setparam-other": sched_setparam(NO_PID, BAD_PTR) => "EFAULT (param)";
    "sched-setattr-pid1": sched_setattr(1, 0, 0) => "EINVAL (attr NULL)";
    "sched-setattr-other": sched_setattr(NO_PID, 0, 0) => "EINVAL (attr NULL)";
    "sched-setaffinity-pid1": sched_setaffinity(1, 8, BAD_PTR) => "EFAULT (mask)";
    "sched-setaffinity-other": sched_setaffinity(NO_PID, 8, BAD_PTR) => "EFAULT (mask)";
    "ioprio-set-pid1": ioprio_set(1, 1, 0xffff_ffff) => "EINVAL (class)";
    "ioprio-set-other": ioprio_set(1, NO_PID, 0xffff_ffff) => "EINVAL (class)";
    "ioprio-set-group": ioprio_set(2, 0, 0xffff_ffff) => "EINVAL (class)";
    "migrate-pages-pid1": migrate_pages(1, 0x10_0000, BAD_PTR, BAD_PTR) => "EINVAL (maxnode), or ENOSYS without NUMA";
    "migrate-pages-other": migrate_pages(NO_PID, 0, 0, 0) => "ESRCH";
    "move-pages-pid1": move_pages(1, 0, 0, 0, 0, 0xffff) => "EINVAL (flags)";
    "move-pages-other": move_pages(NO_PID, 0, 0, 0, 0, 0xffff) => "EINVAL (flags)";
    "process-madvise": process_madvise(BAD_FD, 0, 0, 0, 0) => "EBADF";
    "process-mrelease": process_mrelease(BAD_FD, 0) => "EBADF";
};

/// Canaries an unfiltered kernel would carry out: harmless in a container (its own PID 1), never
/// to be called unfiltered anywhere else (a host-side test skips them).
pub const CARRIED_OUT_UNFILTERED: &[&str] = &["setpriority-pid1"];

/// Whether a call of `nr` that succeeds returns a new file descriptor (which the caller of a
/// canary closes). Every other success returns a number that is no descriptor of the caller's
/// (`setpriority`'s 0 among them: closing it would close stdin).
pub fn returns_fd(nr: i64) -> bool {
    [
        syscall_nr::io_uring_setup,
        syscall_nr::pidfd_getfd,
        syscall_nr::userfaultfd,
        syscall_nr::perf_event_open,
        syscall_nr::open_tree,
        syscall_nr::fsopen,
        syscall_nr::fsmount,
        syscall_nr::fspick,
        syscall_nr::open_by_handle_at,
        syscall_nr::memfd_create,
        syscall_nr::fanotify_init,
        syscall_nr::bpf,
        syscall_nr::socket,
    ]
    .contains(&nr)
}

/// A socket type no kernel has: `socket(family, BAD_TYPE, proto)` fails with EINVAL in the kernel
/// for every family, before the family's own code runs, so a canary never makes a socket.
pub const BAD_SOCKET_TYPE: u64 = 15;

macro_rules! family_canaries {
    ($( $action:literal: $call:ident($family:expr, $proto:expr); )*) => {
        &[ $( Canary {
            action: $action,
            nr: syscall_nr::$call,
            args: [$family as u64, BAD_SOCKET_TYPE, $proto as u64, BAD_PTR, 0, 0],
            unfiltered: "EINVAL (socket type 15), or EFAULT (socketpair's vector)",
        }, )* ]
    };
}

/// Families the agent must not get (answers [`FAMILY_ERRNO`]): the vsock bridge out of the VM,
/// raw packets, the kernel crypto and key APIs, netlink beyond routing, and the rarer protocol
/// families whose code a sandbox has no reason to reach.
pub const FAMILY_CANARIES: &[Canary] = family_canaries! {
    "socket-vsock": socket(libc::AF_VSOCK, 0);
    "socketpair-vsock": socketpair(libc::AF_VSOCK, 0);
    "socket-packet": socket(libc::AF_PACKET, 0);
    "socket-alg": socket(libc::AF_ALG, 0);
    "socket-key": socket(libc::AF_KEY, 0);
    "socket-netlink-sock-diag": socket(libc::AF_NETLINK, libc::NETLINK_SOCK_DIAG);
    "socket-netlink-audit": socket(libc::AF_NETLINK, libc::NETLINK_AUDIT);
    "socket-netlink-uevent": socket(libc::AF_NETLINK, libc::NETLINK_KOBJECT_UEVENT);
    "socket-netlink-generic": socket(libc::AF_NETLINK, libc::NETLINK_GENERIC);
    "socketpair-netlink-generic": socketpair(libc::AF_NETLINK, libc::NETLINK_GENERIC);
    "socket-bluetooth": socket(libc::AF_BLUETOOTH, 0);
    "socket-xdp": socket(libc::AF_XDP, 0);
    "socket-tipc": socket(libc::AF_TIPC, 0);
    "socket-rds": socket(libc::AF_RDS, 0);
    "socket-can": socket(libc::AF_CAN, 0);
    "socket-qipcrtr": socket(42, 0);
    "socket-smc": socket(43, 0);
    "socket-mctp": socket(45, 0);
    "socket-llc": socket(libc::AF_LLC, 0);
    "socket-appletalk": socket(libc::AF_APPLETALK, 0);
    "socket-ieee802154": socket(libc::AF_IEEE802154, 0);
    "socket-phonet": socket(libc::AF_PHONET, 0);
    "socket-kcm": socket(41, 0);
    "socket-nfc": socket(libc::AF_NFC, 0);
    "socket-x25": socket(libc::AF_X25, 0);
    "socket-ax25": socket(libc::AF_AX25, 0);
    "socket-rxrpc": socket(libc::AF_RXRPC, 0);
    "socket-caif": socket(libc::AF_CAIF, 0);
    "socket-pppox": socket(libc::AF_PPPOX, 0);
    "socket-unspec": socket(libc::AF_UNSPEC, 0);
};

/// Families the agent needs: these must reach the kernel (an error of the kernel's for the bad
/// type or vector, never the filter's), or the filter refuses more than it should.
pub const FAMILY_ALLOWED: &[Canary] = family_canaries! {
    "socket-unix": socket(libc::AF_UNIX, 0);
    "socketpair-unix": socketpair(libc::AF_UNIX, 0);
    "socket-inet": socket(libc::AF_INET, 0);
    "socket-inet6": socket(libc::AF_INET6, 0);
    "socket-netlink-route": socket(libc::AF_NETLINK, libc::NETLINK_ROUTE);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn all_rules() -> Vec<Rule> {
        DENIED.iter().chain(SEALED).chain(CLONE3).copied().collect()
    }

    /// Every alternative of every rule has a canary that meets it, and every canary meets a rule:
    /// a probe calls them all, so a rule is never without its evidence.
    #[test]
    fn every_rule_has_a_canary_and_every_canary_a_rule() {
        let rules = all_rules();
        for rule in &rules {
            let alternatives: Vec<&[Cond]> = if rule.when.is_empty() {
                vec![&[]]
            } else {
                rule.when.to_vec()
            };
            for all in alternatives {
                let met = CANARIES
                    .iter()
                    .any(|c| c.nr == rule.nr && all.iter().all(|cond| cond.holds(&c.args)));
                assert!(met, "{} ({all:?}) has no canary", rule.name);
            }
        }
        for canary in CANARIES {
            assert!(
                rules.iter().any(|r| r.refuses(canary.nr, &canary.args)),
                "{} meets no rule",
                canary.action
            );
        }
    }

    #[test]
    fn names_and_actions_are_unique() {
        let mut names = std::collections::BTreeSet::new();
        for rule in all_rules() {
            assert!(names.insert(rule.name), "{} twice", rule.name);
        }
        let mut actions = std::collections::BTreeSet::new();
        for canary in CANARIES.iter().chain(FAMILY_CANARIES).chain(FAMILY_ALLOWED) {
            assert!(actions.insert(canary.action), "{} twice", canary.action);
        }
    }

    /// A canary's caller closes what a success returns only when it is a descriptor: the sealed
    /// calls return none (`setpriority` at PID 1 succeeds with 0 where it is let through, and
    /// closing 0 closed the probe's stdin), the descriptor-making ones do.
    #[test]
    fn only_descriptor_making_calls_have_their_answer_closed() {
        for rule in SEALED {
            assert!(!returns_fd(rule.nr), "{}", rule.name);
        }
        for name in CARRIED_OUT_UNFILTERED {
            let canary = CANARIES.iter().find(|c| c.action == *name).unwrap();
            assert!(!returns_fd(canary.nr), "{name}");
        }
        for nr in [
            syscall_nr::memfd_create,
            syscall_nr::io_uring_setup,
            syscall_nr::socket,
        ] {
            assert!(returns_fd(nr), "{nr}");
        }
    }

    /// The process an argument-filtered sealed rule's call is aimed at: (which argument holds the
    /// pid, the value the "which" argument must hold for that pid to be a process id), or None
    /// for a rule that takes a pidfd (refused whatever it names).
    fn aim(rule: &Rule) -> Option<(usize, Option<(usize, u32)>)> {
        match rule.name {
            "prlimit64" | "sched_setscheduler" | "sched_setparam" | "sched_setattr"
            | "sched_setaffinity" | "migrate_pages" | "move_pages" => Some((0, None)),
            // (PRIO_PROCESS, pid) and (IOPRIO_WHO_PROCESS, pid).
            "setpriority" => Some((1, Some((0, 0)))),
            "ioprio_set" => Some((1, Some((0, 1)))),
            _ => None,
        }
    }

    /// Each sealed rule admits exactly the calls aimed at the caller itself (pid 0, with the
    /// process "which"), over a grid of pids and "which" values: PID 1, another pid, -1, and
    /// values whose low 32 bits are 0 or 1 (the kernel reads a 32-bit pid_t, as the filter does).
    #[test]
    fn each_sealed_rule_admits_exactly_the_caller_itself() {
        const VALUES: [u64; 9] = [
            0,
            1,
            2,
            3,
            NO_PID,
            0xffff_ffff,
            0x1_0000_0000,
            0x1_0000_0001,
            u64::MAX,
        ];
        let low = |v: u64| v as u32;
        for rule in SEALED {
            for a in VALUES {
                for b in VALUES {
                    let args = [a, b, 0, 0, 0, 0];
                    let at_self = match aim(rule) {
                        None => false,
                        Some((pid, which)) => {
                            low(args[pid]) == 0
                                && which.is_none_or(|(arg, value)| low(args[arg]) == value)
                        }
                    };
                    assert_eq!(
                        rule.refuses(rule.nr, &args),
                        !at_self,
                        "{} with {args:x?}: {}",
                        rule.name,
                        if at_self {
                            "the caller itself is refused"
                        } else {
                            "a call aimed at another process is admitted"
                        }
                    );
                }
            }
        }
    }

    /// Every argument-filtered rule has a canary aimed at PID 1 and one at another process (with
    /// the process "which"), so a rule that lets either through shows in the probes.
    #[test]
    fn every_filtered_rule_is_aimed_at_pid_1_and_at_another_process() {
        for rule in SEALED.iter().filter(|r| !r.when.is_empty()) {
            let Some((pid, which)) = aim(rule) else {
                panic!("{} is filtered by argument but has no aim", rule.name);
            };
            let aimed = |want: &dyn Fn(u32) -> bool| {
                CANARIES.iter().any(|c| {
                    c.nr == rule.nr
                        && want(c.args[pid] as u32)
                        && which.is_none_or(|(arg, value)| c.args[arg] as u32 == value)
                })
            };
            assert!(
                aimed(&|p| p == 1),
                "{}: no canary aimed at PID 1",
                rule.name
            );
            assert!(
                aimed(&|p| p != 0 && p != 1),
                "{}: no canary aimed at another process",
                rule.name
            );
        }
    }

    #[test]
    fn the_caller_itself_is_not_refused() {
        for rule in SEALED.iter().filter(|r| !r.when.is_empty()) {
            let mut args = [0u64; 6];
            if rule.name == "ioprio_set" {
                args[0] = 1; // IOPRIO_WHO_PROCESS, 0
            }
            assert!(
                !rule.refuses(rule.nr, &args),
                "{} refuses the caller",
                rule.name
            );
        }
        let seal = [0, MFD_NOEXEC_SEAL, 0, 0, 0, 0];
        assert!(!DENIED
            .iter()
            .any(|r| r.refuses(syscall_nr::memfd_create, &seal)));
        let plain_fork = [libc::SIGCHLD as u64, 0, 0, 0, 0, 0];
        assert!(!DENIED
            .iter()
            .any(|r| r.refuses(syscall_nr::clone, &plain_fork)));
    }

    #[test]
    fn the_family_filter_refuses_exactly_the_canaries() {
        for canary in FAMILY_CANARIES {
            assert!(
                AGENT_FAMILIES.refuses(canary.nr, &canary.args),
                "{} is let through",
                canary.action
            );
        }
        for canary in FAMILY_ALLOWED {
            assert!(
                !AGENT_FAMILIES.refuses(canary.nr, &canary.args),
                "{} is refused",
                canary.action
            );
        }
    }
}
