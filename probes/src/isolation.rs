//! `read-only-isolation`: the root filesystem, /proc/sys, /sys and the cgroup hierarchies are
//! read-only, masked paths are masked, the image's binaries cannot be opened for write, and
//! (under cordon-init) Landlock refuses writes where a mount would allow them.
//!
//! Kernel control files (core_pattern, sysrq-trigger, release_agent) are only ever checked with
//! access(2) and statfs: never opened for writing.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use cordon_contract::paths;
use cordon_contract::probe::ops;
use nix::sys::statvfs::{statvfs, FsFlags};
use nix::unistd::{access, AccessFlags};

use crate::report::Probe;

fn read_only(path: &str) -> Option<bool> {
    statvfs(path)
        .ok()
        .map(|v| v.flags().contains(FsFlags::ST_RDONLY))
}

fn is_null_device(path: &str) -> bool {
    std::fs::metadata(path)
        .map(|m| {
            m.file_type().is_char_device()
                && libc::major(m.rdev()) == 1
                && libc::minor(m.rdev()) == 3
        })
        .unwrap_or(false)
}

/// The host-describing files the policy masks tell nothing: a masked file reads empty (it is the
/// engine's /dev/null), a masked directory lists nothing. Only whether a byte or an entry came
/// back is kept, never what.
fn host_info(p: &mut Probe<'_>) {
    use std::io::Read;
    let mut told = Vec::new();
    for path in p.ctx.policy.masked.clone() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let tells = if meta.is_dir() {
            std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_some())
        } else {
            let mut byte = [0u8; 1];
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(&path)
                .and_then(|mut f| f.read(&mut byte))
                .is_ok_and(|n| n > 0)
        };
        if tells {
            told.push(path);
        }
    }
    p.require(&ops::HOST_INFO, told.is_empty(), || {
        format!("readable host-describing files: {told:?}")
    });
}

pub fn run(p: &mut Probe<'_>) {
    let token = p.ctx.token.clone();
    p.require(&ops::ROOTFS_STATFS, read_only("/") == Some(true), || {
        "statvfs(/) is not ST_RDONLY".into()
    });
    // /var/tmp is world-writable in the image: only the read-only root stops this.
    let scratch = format!("/var/tmp/cordon-probe-{token}");
    if p.deny(
        &ops::ROOTFS_CREATE,
        "create /var/tmp/cordon-probe-*",
        || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&scratch)
        },
    ) {
        let _ = std::fs::remove_file(&scratch);
    }
    for binary in [
        paths::CLAUDE_CLI,
        paths::CODEX_CLI,
        paths::INIT,
        paths::PROBE,
        "/proc/1/exe",
    ] {
        // Opened for write without O_TRUNC or O_CREAT; nothing is written.
        p.deny(
            &ops::IMAGE_BINARIES_WRITE,
            &format!("open {binary} for writing"),
            || OpenOptions::new().write(true).open(binary),
        );
    }

    let sysctl_ro = read_only("/proc/sys") == Some(true);
    let core_pattern = access("/proc/sys/kernel/core_pattern", AccessFlags::W_OK).is_ok();
    let sysrq = access("/proc/sysrq-trigger", AccessFlags::W_OK).is_ok();
    p.require(&ops::PROC_SYS, sysctl_ro && !core_pattern && !sysrq, || {
        format!("/proc/sys read-only: {sysctl_ro}; core_pattern writable: {core_pattern}; sysrq-trigger writable: {sysrq}")
    });
    p.require(&ops::SYS, read_only("/sys") == Some(true), || {
        "/sys is writable".into()
    });
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let cgroups: Vec<String> = cordon_contract::procfs::parse_mountinfo(&mounts)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
        .filter(|m| !m.read_only())
        .map(|m| m.mount_point)
        .collect();
    let release_agent = access("/sys/fs/cgroup/memory/release_agent", AccessFlags::W_OK).is_ok();
    p.require(&ops::CGROUPFS, cgroups.is_empty() && !release_agent, || {
        format!("writable cgroup hierarchies {cgroups:?}, release_agent writable: {release_agent}")
    });

    let mut unmasked = Vec::new();
    for path in [
        "/proc/keys",
        "/proc/timer_list",
        "/proc/kcore",
        "/proc/sched_debug",
        "/proc/timer_stats",
        "/proc/latency_stats",
    ] {
        if std::fs::symlink_metadata(path).is_ok()
            && !is_null_device(path)
            && read_only(path) != Some(true)
        {
            unmasked.push(path);
        }
    }
    for dir in ["/sys/firmware", "/proc/acpi", "/proc/scsi", "/proc/asound"] {
        if std::fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
        {
            unmasked.push(dir);
        }
    }
    p.require(&ops::MASKED_PATHS, unmasked.is_empty(), || {
        format!("not masked: {unmasked:?}")
    });
    host_info(p);

    // Writable mounts that are not writable areas: only Landlock stops these.
    let queue = format!("/dev/mqueue/cordon-probe-{token}");
    if p.deny(&ops::MQUEUE_CREATE, "create a file in /dev/mqueue", || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&queue)
    }) {
        let _ = std::fs::remove_file(&queue);
    }
    p.deny(
        &ops::PROC_COMM_WRITE,
        "open /proc/self/comm for writing",
        || OpenOptions::new().write(true).open("/proc/self/comm"),
    );
    p.deny(
        &ops::PTMX_OPEN,
        "open /dev/ptmx (allocate a terminal)",
        || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open("/dev/ptmx")
        },
    );
}
