//! Observe: read everything the preflight judges, changing nothing. Each fact is kept as the text
//! or value seen, so a refusal can quote it. A fact that cannot be read is kept as an error string;
//! the judge refuses on it rather than guessing.

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use cordon_contract::policy::{Access, Policy, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS};
use cordon_contract::{engine_socket, paths};
use nix::sys::statvfs::{statvfs, FsFlags};
use nix::unistd::{faccessat, AccessFlags};

use cordon_contract::procfs::{self, MountEntry, Status};

/// Facts about one path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathFacts {
    /// lstat file type: "file", "dir", "symlink", "char", "block", "fifo", "socket", or an error.
    pub kind: String,
    /// Device numbers when it is a character device.
    pub rdev: Option<(u64, u64)>,
    /// We (the effective ids) may write it.
    pub writable: bool,
    /// It lies on a read-only mount.
    pub on_readonly_mount: bool,
    /// statfs totals (bytes, inodes).
    pub totals: Option<(u64, u64)>,
}

/// cgroup limit files as read (text, or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupObs {
    pub version: u8,
    pub pids_max: Result<String, String>,
    pub memory: Result<String, String>,
    /// v1 memory.memsw.limit_in_bytes, v2 memory.swap.max.
    pub swap: Result<String, String>,
    /// v1 "quota period", v2 cpu.max.
    pub cpu: Result<String, String>,
}

/// Everything the pure judge needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observations {
    pub pid: i32,
    pub ppid: i32,
    pub pid1_cmdline: String,
    /// /proc/self/status before the init changed anything (its start identity and capabilities).
    pub start: Result<Status, String>,
    /// What the init's remount could not do, one line per mount.
    pub remount: Vec<String>,
    /// What laying the policy's overlay on /work could not do (empty when it is laid, or the
    /// policy has none).
    pub overlay: Vec<String>,
    /// How the init's drop of capabilities and ids went.
    pub dropped: Result<(), String>,
    /// How PR_SET_DUMPABLE went, and what PR_GET_DUMPABLE says now.
    pub sealed: Result<(), String>,
    pub dumpable: Result<i32, String>,
    /// Whether each of the policy's masked paths exists (a missing one needs no mask).
    pub masked: BTreeMap<String, bool>,
    /// Open fds other than 0-2, as "N -> target".
    pub extra_fds: Vec<String>,
    pub cwd: Result<String, String>,
    pub cgroup: Result<Vec<String>, String>,
    pub hostname: Result<String, String>,
    pub status: Result<Status, String>,
    pub cap_last_cap: Result<u32, String>,
    /// fds among 0-2 that are terminals.
    pub ttys: Vec<i32>,
    /// What fd 0 is.
    pub stdin: PathFacts,
    pub interfaces: Result<Vec<String>, String>,
    pub root_readonly: Result<bool, String>,
    pub mounts: Result<Vec<MountEntry>, String>,
    pub shm_present: bool,
    pub daemon_sockets: Vec<String>,
    /// Entries of /dev that a hardened container does not have.
    pub dev_extra: Result<Vec<String>, String>,
    /// Facts per policy mount path, per exec-allowlist file and per exec tree (only those the
    /// judge reads).
    pub paths: BTreeMap<String, PathFacts>,
    /// Each of the policy's pins: a directory reached from /work through no link (`Ok`), or what
    /// it is instead. Read before Landlock, like everything here.
    pub pins: BTreeMap<String, Result<(), String>>,
    pub env: Vec<String>,
    pub cgroup_limits: CgroupObs,
    /// The digest of /work with its metadata, read only when the policy names a shared
    /// snapshot's (the `digest` role's code, so equal trees give the keeper's digest).
    pub work_digest: Option<Result<String, String>>,
}

/// The kernel filesystems the preflight reads most, each opened once: a lookup from "/" walks
/// the image's root first (fuse-overlayfs on this engine: tens of microseconds a lookup, and the
/// preflight makes about a hundred), one from these directories does not. Dropped before the
/// init closes every inherited descriptor.
#[derive(Debug)]
pub struct Kernel {
    proc: Option<OwnedFd>,
    sys: Option<OwnedFd>,
}

impl Kernel {
    pub fn open() -> Kernel {
        let open = |dir: &str| {
            nix::fcntl::open(
                dir,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
                Mode::empty(),
            )
            .ok()
        };
        Kernel {
            proc: open("/proc"),
            sys: open("/sys"),
        }
    }

    /// Lookups from no directory at all (every path from "/").
    pub fn none() -> Kernel {
        Kernel {
            proc: None,
            sys: None,
        }
    }

    fn beneath<'a>(&self, path: &'a str) -> Option<(BorrowedFd<'_>, &'a str)> {
        let (fd, rest) = if let Some(rest) = path.strip_prefix("/proc/") {
            (self.proc.as_ref()?, rest)
        } else {
            (self.sys.as_ref()?, path.strip_prefix("/sys/")?)
        };
        Some((fd.as_fd(), rest))
    }

    pub fn read(&self, path: &str) -> Result<String, String> {
        let err = |e: &dyn std::fmt::Display| format!("{path}: {e}");
        match self.beneath(path) {
            Some((dir, rest)) => {
                let fd = nix::fcntl::openat(
                    dir,
                    rest,
                    OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
                    Mode::empty(),
                )
                .map_err(|e| err(&e))?;
                let mut text = String::new();
                std::io::Read::read_to_string(&mut fs::File::from(fd), &mut text)
                    .map_err(|e| err(&e))?;
                Ok(text)
            }
            None => fs::read_to_string(path).map_err(|e| err(&e)),
        }
    }

    /// An `O_PATH` descriptor of `path`, not following a final link.
    pub fn open_path(&self, path: &str) -> Result<OwnedFd, nix::errno::Errno> {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match self.beneath(path) {
            Some((dir, rest)) => nix::fcntl::openat(dir, rest, flags, Mode::empty()),
            None => nix::fcntl::open(path, flags, Mode::empty()),
        }
    }

    /// lstat(2).
    pub fn lstat(&self, path: &str) -> Result<nix::sys::stat::FileStat, nix::errno::Errno> {
        match self.beneath(path) {
            Some((dir, rest)) => {
                nix::sys::stat::fstatat(dir, rest, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            }
            None => nix::sys::stat::lstat(path),
        }
    }
}

/// How every lookup of a pin resolves: beneath the directory it starts from, through no link of
/// any kind (a link on the way is `ELOOP`; a final one, with `O_PATH | O_NOFOLLOW`, is the link
/// itself, and `ENOTDIR` with `O_DIRECTORY` too).
pub fn no_links_beneath() -> nix::fcntl::ResolveFlag {
    use nix::fcntl::ResolveFlag;
    ResolveFlag::RESOLVE_BENEATH
        | ResolveFlag::RESOLVE_NO_SYMLINKS
        | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

/// An `O_PATH` descriptor of the directory `path` beneath `at` (openat2), reached through no link.
pub fn open_dir_beneath<P: ?Sized + nix::NixPath>(
    at: impl AsFd,
    path: &P,
) -> Result<OwnedFd, nix::errno::Errno> {
    nix::fcntl::openat2(
        at,
        path,
        nix::fcntl::OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(no_links_beneath()),
    )
}

/// Whether each pin is a directory reached from `root` through no link.
fn pin_facts(root: &str, pins: &[String]) -> BTreeMap<String, Result<(), String>> {
    if pins.is_empty() {
        return BTreeMap::new();
    }
    let root_fd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    pins.iter()
        .map(|pin| {
            let fact = match &root_fd {
                Err(e) => Err(format!("{root}: {e}")),
                Ok(root_fd) => pin_fact(root_fd.as_fd(), pin),
            };
            (pin.clone(), fact)
        })
        .collect()
}

fn pin_fact(root: BorrowedFd<'_>, pin: &str) -> Result<(), String> {
    use nix::errno::Errno;
    // Without O_DIRECTORY: a final link comes back as itself (O_PATH | O_NOFOLLOW), so ELOOP
    // means a link on the way, and the type tells the rest.
    let fd = nix::fcntl::openat2(
        root,
        pin,
        nix::fcntl::OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(no_links_beneath()),
    )
    .map_err(|e| match e {
        Errno::ELOOP => format!("{pin}: a link on the way ({e})"),
        Errno::EXDEV => format!("{pin}: resolves outside the work tree ({e})"),
        Errno::ENOTDIR => format!("{pin}: beneath a non-directory ({e})"),
        _ => format!("{pin}: {e}"),
    })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| format!("{pin}: fstat: {e}"))?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Ok(()),
        libc::S_IFLNK => Err(format!("{pin}: a link")),
        _ => Err(format!(
            "{pin}: a {}, not a directory",
            kind_of_mode(st.st_mode)
        )),
    }
}

fn kind_of_mode(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFLNK => "symlink",
        libc::S_IFDIR => "dir",
        libc::S_IFREG => "file",
        libc::S_IFCHR => "char",
        libc::S_IFBLK => "block",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        _ => "unknown",
    }
}

fn major_minor(rdev: u64) -> (u64, u64) {
    (libc::major(rdev) as u64, libc::minor(rdev) as u64)
}

/// Which facts a path needs: each costs syscalls, and the preflight has a 5 ms budget.
#[derive(Debug, Clone, Copy, Default)]
struct Need {
    kind: bool,
    writable: bool,
    vfs: bool,
}

/// Facts about a path, never following a final symlink for its type: one lookup (an `O_PATH`
/// open), then everything from that descriptor; a path that needs only its type gets one
/// `fstatat` (most are masks under /proc and /sys: an open, fstat and close of each cost the
/// preflight ~0.6 ms, measured).
fn path_facts(k: &Kernel, path: &str, need: Need) -> PathFacts {
    let mut facts = PathFacts::default();
    if !need.writable && !need.vfs {
        if need.kind {
            facts.kind = match k.lstat(path) {
                Ok(st) => kind_facts(&mut facts, st.st_mode, st.st_rdev),
                Err(e) => format!("error: {e}"),
            };
        }
        return facts;
    }
    let fd = match k.open_path(path) {
        Ok(fd) => fd,
        Err(e) => {
            if need.kind {
                facts.kind = format!("error: {e}");
            }
            return facts;
        }
    };
    if need.kind {
        facts.kind = match nix::sys::stat::fstat(&fd) {
            Ok(st) => kind_facts(&mut facts, st.st_mode, st.st_rdev),
            Err(e) => format!("error: {e}"),
        };
    }
    if need.writable {
        facts.writable = faccessat(
            &fd,
            "",
            AccessFlags::W_OK,
            nix::fcntl::AtFlags::AT_EACCESS | nix::fcntl::AtFlags::AT_EMPTY_PATH,
        )
        .is_ok();
    }
    if need.vfs {
        if let Ok(vfs) = nix::sys::statvfs::fstatvfs(&fd) {
            facts.on_readonly_mount = vfs.flags().contains(FsFlags::ST_RDONLY);
            let frsize = vfs.fragment_size();
            facts.totals = Some((vfs.blocks() * frsize, vfs.files()));
        }
    }
    facts
}

/// The type's name, recording a character device's numbers.
fn kind_facts(facts: &mut PathFacts, mode: libc::mode_t, rdev: libc::dev_t) -> String {
    if mode & libc::S_IFMT == libc::S_IFCHR {
        facts.rdev = Some(major_minor(rdev));
    }
    kind_of_mode(mode).to_owned()
}

/// Gather only what the judge will look at: write access of writable engine mounts, the device
/// of writable masked paths, statfs of bounded areas, everything about exec-allowlist files and
/// exec trees.
fn policy_path_facts(
    k: &Kernel,
    policy: &Policy,
    mounts: &[MountEntry],
) -> BTreeMap<String, PathFacts> {
    let mut needs: BTreeMap<&str, Need> = BTreeMap::new();
    let mounted_rw = |path: &str| {
        mounts
            .iter()
            .any(|m| m.mount_point == path && !m.read_only())
    };
    for rule in policy.mounts.iter().filter(|r| !r.beneath) {
        let need = needs.entry(rule.path.as_str()).or_default();
        match rule.access {
            Access::RootOwned if mounted_rw(&rule.path) => need.writable = true,
            Access::Masked if mounted_rw(&rule.path) => need.kind = true,
            _ => {}
        }
        if rule.bounded.is_some() {
            need.vfs = true;
        }
    }
    // Executable files and the trees beneath which anything may be executed: what they are,
    // whether we may write them, whether their mount is read-only.
    for exec in policy
        .landlock
        .exec
        .iter()
        .chain(&policy.landlock.exec_trees)
    {
        needs.insert(
            exec.as_str(),
            Need {
                kind: true,
                writable: true,
                vfs: true,
            },
        );
    }
    needs
        .into_iter()
        .map(|(path, need)| (path.to_owned(), path_facts(k, path, need)))
        .collect()
}

fn fd_facts(fd: i32) -> PathFacts {
    // SAFETY: fd 0 is open for the life of the process (the kernel gives every process 0-2, and
    // nothing here closes it); the borrow ends within this function.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut facts = PathFacts::default();
    match nix::sys::stat::fstat(borrowed) {
        Ok(st) => {
            let mode = st.st_mode & libc::S_IFMT;
            facts.kind = match mode {
                libc::S_IFCHR => "char",
                libc::S_IFREG => "file",
                libc::S_IFIFO => "fifo",
                libc::S_IFSOCK => "socket",
                libc::S_IFDIR => "dir",
                _ => "unknown",
            }
            .to_owned();
            if mode == libc::S_IFCHR {
                facts.rdev = Some(major_minor(st.st_rdev));
            }
        }
        Err(e) => facts.kind = format!("error: {e}"),
    }
    facts
}

/// Open fds other than 0-2, excluding the directory handle used to list them.
pub fn extra_fds() -> Vec<String> {
    use nix::dir::Dir;
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    use std::os::fd::AsRawFd;

    let mut dir = match Dir::open(
        "/proc/self/fd",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(e) => return vec![format!("/proc/self/fd unreadable: {e}")],
    };
    let own = dir.as_raw_fd();
    let mut extra: Vec<String> = dir
        .iter()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().ok()?.parse::<i32>().ok())
        .filter(|fd| *fd > 2 && *fd != own)
        .map(|fd| {
            let target = fs::read_link(format!("/proc/self/fd/{fd}"))
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "?".to_owned());
            format!("{fd} -> {target}")
        })
        .collect();
    extra.sort();
    extra
}

fn cgroup_limits(k: &Kernel) -> CgroupObs {
    let read = |p: &str| k.read(p);
    let v2 = fs::metadata("/sys/fs/cgroup/cgroup.controllers").is_ok();
    if v2 {
        return CgroupObs {
            version: 2,
            pids_max: read("/sys/fs/cgroup/pids.max").map(|s| s.trim().to_owned()),
            memory: read("/sys/fs/cgroup/memory.max").map(|s| s.trim().to_owned()),
            swap: read("/sys/fs/cgroup/memory.swap.max").map(|s| s.trim().to_owned()),
            cpu: read("/sys/fs/cgroup/cpu.max").map(|s| s.trim().to_owned()),
        };
    }
    let cpu_dir = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
        .into_iter()
        .find(|d| fs::metadata(format!("{d}/cpu.cfs_quota_us")).is_ok())
        .unwrap_or("/sys/fs/cgroup/cpu");
    let cpu = read(&format!("{cpu_dir}/cpu.cfs_quota_us")).and_then(|q| {
        read(&format!("{cpu_dir}/cpu.cfs_period_us")).map(|p| format!("{} {}", q.trim(), p.trim()))
    });
    CgroupObs {
        version: 1,
        pids_max: read("/sys/fs/cgroup/pids/pids.max").map(|s| s.trim().to_owned()),
        memory: read("/sys/fs/cgroup/memory/memory.limit_in_bytes").map(|s| s.trim().to_owned()),
        swap: read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
            .map(|s| s.trim().to_owned()),
        cpu,
    }
}

/// /proc/self/status, parsed.
pub fn status(k: &Kernel) -> Result<Status, String> {
    k.read("/proc/self/status")
        .and_then(|t| procfs::parse_status(&t))
}

/// /proc/self/mountinfo, parsed.
pub fn mountinfo(k: &Kernel) -> Result<Vec<MountEntry>, String> {
    k.read("/proc/self/mountinfo")
        .and_then(|t| procfs::parse_mountinfo(&t))
}

/// The highest capability number the kernel knows.
pub fn cap_last_cap(k: &Kernel) -> Result<u32, String> {
    k.read("/proc/sys/kernel/cap_last_cap").and_then(|t| {
        t.trim()
            .parse()
            .map_err(|_| format!("cap_last_cap {t:?} is not a number"))
    })
}

/// What the init's own steps did, for the judge.
#[derive(Debug)]
pub struct Acted {
    /// Descriptors other than 0-2 open when the init started (read before it opened any).
    pub inherited: Vec<String>,
    pub start: Result<Status, String>,
    pub remount: Vec<String>,
    /// What laying the policy's overlay could not do (empty without one).
    pub overlay: Vec<String>,
    pub dropped: Result<(), String>,
    pub sealed: Result<(), String>,
}

/// Whatever exists where an engine's socket would be. The parent directories are looked up once
/// (a missing one settles all its sockets).
fn daemon_sockets() -> Vec<String> {
    match nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(root) => existing_beneath(root.as_fd(), engine_socket::PATHS),
        // The judge also refuses any socket mount it sees in mountinfo.
        Err(_) => Vec::new(),
    }
}

/// Which of `paths` (absolute, resolved from `root`, their final link not followed) exist.
fn existing_beneath(root: BorrowedFd<'_>, paths: &[&str]) -> Vec<String> {
    let open_dir = |at: BorrowedFd<'_>, name: &str| {
        nix::fcntl::openat(
            at,
            name,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()
    };
    // Each directory is looked up once, from its parent: most of these names are absent from
    // the image, a lookup on its root (fuse-overlayfs here) is a round trip to the daemon, and
    // a missing /var answers for every path beneath it. Keyed by the path's prefix ("/var/run").
    let mut dirs: BTreeMap<&str, Option<OwnedFd>> = BTreeMap::new();
    let mut found = Vec::new();
    for path in paths {
        let Some((dir, name)) = path.rsplit_once('/') else {
            continue;
        };
        let mut parent = Some(root);
        let component_ends = dir
            .match_indices('/')
            .map(|(i, _)| i)
            .skip(1)
            .chain([dir.len()]);
        let mut start = 0;
        for end in component_ends.filter(|&end| end > 0) {
            let Some(at) = parent else { break };
            let prefix = &dir[..end];
            if !dirs.contains_key(prefix) {
                let opened = open_dir(at, &dir[start + 1..end]);
                dirs.insert(prefix, opened);
            }
            parent = dirs
                .get(prefix)
                .and_then(|fd| fd.as_ref())
                .map(|fd| fd.as_fd());
            start = end;
        }
        let exists = parent.is_some_and(|at| {
            nix::sys::stat::fstatat(at, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
        });
        if exists {
            found.push((*path).to_owned());
        }
    }
    found
}

/// Read everything, after the init's own steps. Nothing here changes state.
/// `taken` is the digest of /work if it was already read (`main.rs`, while the policy was
/// uploaded); otherwise it is read here when the policy asks for it.
pub fn gather(k: &Kernel, policy: &Policy, acted: Acted, taken: Option<String>) -> Observations {
    let read = |p: &str| k.read(p);
    let pid = std::process::id() as i32;
    let ppid = nix::unistd::getppid().as_raw();
    let mounts = mountinfo(k);
    let path_facts = policy_path_facts(k, policy, mounts.as_deref().unwrap_or_default());
    let dev_extra = fs::read_dir("/dev")
        .map_err(|e| format!("/dev: {e}"))
        .map(|dir| {
            let mut extra: Vec<String> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !paths::STANDARD_DEV.contains(&n.as_str()) && n != "shm")
                .collect();
            extra.sort();
            extra
        });
    Observations {
        pid,
        ppid,
        pid1_cmdline: read("/proc/1/cmdline")
            .map(|s| s.replace('\0', " ").trim().to_owned())
            .unwrap_or_default(),
        start: acted.start,
        remount: acted.remount,
        overlay: acted.overlay,
        dropped: acted.dropped,
        sealed: acted.sealed,
        dumpable: crate::privileges::dumpable(),
        masked: policy
            .masked
            .iter()
            .map(String::as_str)
            .chain(ENGINE_MASKED_PATHS.iter().copied())
            .chain(ENGINE_READONLY_PATHS.iter().copied())
            .map(|p| (p.to_owned(), k.lstat(p).is_ok()))
            .collect(),
        extra_fds: acted.inherited,
        cwd: std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| format!("getcwd: {e}")),
        cgroup: read("/proc/self/cgroup").map(|t| t.lines().map(str::to_owned).collect()),
        hostname: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .map_err(|e| format!("gethostname: {e}")),
        status: status(k),
        cap_last_cap: cap_last_cap(k),
        ttys: (0..3)
            .filter(|fd| {
                // SAFETY: isatty only inspects the descriptor number.
                unsafe { libc::isatty(*fd) == 1 }
            })
            .collect(),
        stdin: fd_facts(0),
        interfaces: read("/proc/net/dev").map(|t| procfs::parse_net_dev(&t)),
        root_readonly: statvfs("/")
            .map(|v| v.flags().contains(FsFlags::ST_RDONLY))
            .map_err(|e| format!("statvfs(/): {e}")),
        mounts,
        shm_present: fs::symlink_metadata("/dev/shm").is_ok(),
        daemon_sockets: daemon_sockets(),
        dev_extra,
        paths: path_facts,
        pins: pin_facts(paths::WORK, &policy.landlock.pins),
        env: std::env::vars_os()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect(),
        cgroup_limits: cgroup_limits(k),
        work_digest: policy
            .work_digest
            .as_ref()
            .map(|_| taken.map_or_else(work_digest, Ok)),
    }
}

/// The digest of /work.
fn work_digest() -> Result<String, String> {
    work_digest_while(|| true)?.ok_or_else(|| "the walk was stopped".to_owned())
}

/// The digest of /work, asking `go_on` before every entry and read (`None`: it said no).
pub fn work_digest_while(go_on: impl FnMut() -> bool) -> Result<Option<String>, String> {
    crate::tree::digest::tree_while(std::path::Path::new(paths::WORK), go_on)
        .map(|walked| walked.map(|(d, _)| d))
}

/// Whether /work is mounted read-only and no overlay is to be laid on it: a shared snapshot's
/// mount, or a read-only phase's own storage. Only a hint of whether the policy will ask for the
/// digest of /work (`main.rs` reads it while the policy is uploaded); the judge reads the mount
/// table again.
pub fn work_read_only(mounts: &[MountEntry]) -> bool {
    let work = mounts.iter().rev().find(|m| m.mount_point == paths::WORK);
    let overlay = mounts.iter().any(|m| m.mount_point == paths::OVERLAY_AREA);
    !overlay && work.is_some_and(|m| m.mount_opts.iter().any(|o| o == "ro"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_a_directory_reached_through_no_link() {
        let base = std::env::temp_dir().join(format!("cordon-init-pins-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(base.join("a/b")).unwrap();
        fs::write(base.join("a/f"), "").unwrap();
        std::os::unix::fs::symlink("a", base.join("lnk")).unwrap();
        std::os::unix::fs::symlink("/", base.join("a/abs")).unwrap();
        let root = base.to_string_lossy().into_owned();
        let pins: Vec<String> = [
            "a", "a/b", "lnk", "lnk/b", "a/f", "a/f/x", "a/abs", "missing", "../x",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let facts = pin_facts(&root, &pins);
        fs::remove_dir_all(&base).unwrap();
        let fact = |p: &str| facts[p].clone().err().unwrap_or_else(|| "ok".into());
        assert_eq!(fact("a"), "ok");
        assert_eq!(fact("a/b"), "ok");
        assert_eq!(fact("lnk"), "lnk: a link");
        assert!(
            fact("lnk/b").contains("a link on the way"),
            "{}",
            fact("lnk/b")
        );
        assert_eq!(fact("a/f"), "a/f: a file, not a directory");
        assert!(fact("a/f/x").contains("ENOTDIR"), "{}", fact("a/f/x"));
        assert_eq!(fact("a/abs"), "a/abs: a link");
        assert!(fact("missing").contains("ENOENT"), "{}", fact("missing"));
        assert!(fact("../x").contains("outside"), "{}", fact("../x"));
        assert!(pin_facts(&root, &[]).is_empty());
    }

    #[test]
    fn existing_beneath_walks_each_directory_once_through_links_and_stops_at_a_missing_one() {
        let base = std::env::temp_dir().join(format!("cordon-init-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(base.join("run/containerd")).unwrap();
        fs::create_dir_all(base.join("var")).unwrap();
        std::os::unix::fs::symlink("../run", base.join("var/run")).unwrap();
        fs::write(base.join("run/docker.sock"), "").unwrap();
        fs::write(base.join("run/containerd/containerd.sock"), "").unwrap();
        std::os::unix::fs::symlink("/nowhere", base.join("run/podman.sock")).unwrap();
        let root = nix::fcntl::open(
            &base,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let found = existing_beneath(
            root.as_fd(),
            &[
                "/var/run/docker.sock",
                "/run/docker.sock",
                "/var/run/containerd/containerd.sock",
                "/run/containerd/containerd.sock",
                "/var/run/podman/podman.sock",
                "/run/podman/podman.sock",
                "/opt/missing/x.sock",
                "/run/podman.sock",
                "/top.sock",
            ],
        );
        fs::remove_dir_all(&base).unwrap();
        assert_eq!(
            found,
            [
                "/var/run/docker.sock",
                "/run/docker.sock",
                "/var/run/containerd/containerd.sock",
                "/run/containerd/containerd.sock",
                // A dangling link is still there: its final component is not followed.
                "/run/podman.sock",
            ]
        );
    }
}
