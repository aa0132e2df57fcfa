//! Act, as uid 0 with the start capabilities, before the preflight judges anything: restore the
//! flags the engine's read-only remount strips from content mounts, drop every capability
//! (bounding set included), switch to the policy's ids, and make the init non-dumpable.
//!
//! Every step only takes privilege away, so running it before the judge cannot widen anything,
//! whatever the container turns out to be. Each step reports what failed instead of stopping: the
//! judge then refuses in its own order (a container started without the capabilities is refused
//! as `init-privileges`, not by whichever step happened to fail first).

use std::ffi::CString;

use cordon_contract::policy::{MountFlags, MountRule, Policy};
use cordon_contract::procfs::MountEntry;
use cordon_contract::Id;

fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// The mount flags a remount must pass: what the mount has, plus what the rule requires. The
/// read-only bit is kept as it is (a writable mount where the rule wants read-only is the judge's
/// to refuse, not the init's to repair).
fn remount_flags(entry: &MountEntry, need: MountFlags) -> libc::c_ulong {
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND;
    if entry.read_only() {
        flags |= libc::MS_RDONLY;
    }
    if need.nosuid || entry.has("nosuid") {
        flags |= libc::MS_NOSUID;
    }
    if need.nodev || entry.has("nodev") {
        flags |= libc::MS_NODEV;
    }
    if need.noexec || entry.has("noexec") {
        flags |= libc::MS_NOEXEC;
    }
    flags
}

/// Mounts whose rule asks for flags they lack. Writable mounts (exec-capable ones too) are left
/// alone: their flags come from the profile's options and the judge checks them as
/// `writable-nosuid-nodev-noexec`. Before the overlay is laid, a covered mount is the only mount
/// at its point, and its rule (the first) is the one [`Policy::rule_for`] finds.
pub fn needing_remount<'a>(
    policy: &'a Policy,
    mounts: &'a [MountEntry],
) -> Vec<(&'a MountEntry, &'a MountRule)> {
    mounts
        .iter()
        .filter_map(|m| Some((m, policy.rule_for(&m.mount_point)?)))
        .filter(|(m, rule)| {
            !rule.writable()
                && ((rule.flags.nosuid && !m.has("nosuid"))
                    || (rule.flags.nodev && !m.has("nodev"))
                    || (rule.flags.noexec && !m.has("noexec")))
        })
        .collect()
}

/// Remount each mount that lacks its rule's flags (`content-noexec`). Returns one line per
/// failure.
pub fn remount(policy: &Policy, mounts: &[MountEntry]) -> Vec<String> {
    let mut failed = Vec::new();
    for (entry, rule) in needing_remount(policy, mounts) {
        let Ok(target) = CString::new(entry.mount_point.as_str()) else {
            failed.push(format!("{}: not a C string", entry.mount_point));
            continue;
        };
        // SAFETY: a remount of an existing mountpoint with a valid C string and no data; it only
        // adds per-mount flags (MS_BIND with MS_REMOUNT changes nothing else).
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                target.as_ptr(),
                std::ptr::null(),
                remount_flags(entry, rule.flags),
                std::ptr::null(),
            )
        };
        if rc != 0 {
            failed.push(os_error(&format!("remount {}", entry.mount_point)));
        }
    }
    failed
}

/// `capset(2)`'s header and data (version 3: two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drop every capability: the bounding set (needs CAP_SETPCAP), then the supplementary groups, the
/// gid and the uid (CAP_SETGID, CAP_SETUID; the kernel clears the permitted and effective sets
/// when the uid leaves 0), then whatever is left of the effective, permitted, inheritable and
/// ambient sets. With `switch_ids` false (the gate's `non-root-user` row only) the ids stay 0.
pub fn drop_all(policy: &Policy, cap_last_cap: u32, switch_ids: bool) -> Result<(), String> {
    let mut failed = Vec::new();
    for cap in 0..=cap_last_cap.min(63) {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            failed.push(os_error(&format!("PR_CAPBSET_DROP {cap}")));
            break;
        }
    }
    // SAFETY: setgroups with a zero count reads no memory.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        failed.push(os_error("setgroups([])"));
    }
    if switch_ids {
        let (uid, gid) = (policy.uid, policy.gid);
        // SAFETY: plain id changes; the gid first, while CAP_SETGID is still held.
        if unsafe { libc::setresgid(gid, gid, gid) } != 0 {
            failed.push(os_error(&format!("setresgid({gid})")));
        }
        // SAFETY: as above.
        if unsafe { libc::setresuid(uid, uid, uid) } != 0 {
            failed.push(os_error(&format!("setresuid({uid})")));
        }
    }
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads the header and two data words we own; all zero lowers every set.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) } != 0 {
        failed.push(os_error("capset(0)"));
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
    {
        failed.push(os_error("PR_CAP_AMBIENT_CLEAR_ALL"));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Make the init non-dumpable (`init-sealed`): /proc/1's environ, memory and maps are then closed
/// to the workload, which shares the init's uid. Leaving the protection out (the gate) makes it
/// dumpable on purpose, since the uid switch alone already clears the flag.
pub fn seal(policy: &Policy) -> Result<(), String> {
    let dumpable: libc::c_ulong = if policy.skip.contains(&Id::InitSealed) {
        1
    } else {
        0
    };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, dumpable, 0, 0, 0) } != 0 {
        return Err(os_error("PR_SET_DUMPABLE"));
    }
    Ok(())
}

/// PR_GET_DUMPABLE.
pub fn dumpable() -> Result<i32, String> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    if rc < 0 {
        Err(os_error("PR_GET_DUMPABLE"))
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::procfs::parse_mountinfo;

    /// Writable mounts, exec-capable or not, keep the flags their options gave them; a read-only
    /// one missing its rule's flags is remounted.
    #[test]
    fn writable_mounts_are_never_remounted() {
        use cordon_contract::policy::Access;
        let entries = parse_mountinfo(
            "88 71 0:47 / /tmp rw,relatime - tmpfs tmpfs rw\n\
             89 71 0:48 / /home/agent rw,relatime - tmpfs tmpfs rw\n\
             90 71 0:49 / /run/cordon/control ro,relatime - tmpfs tmpfs rw\n",
        )
        .unwrap();
        let policy = |tmp: Access| {
            let mut mounts = cordon_contract::policy::engine_mount_rules();
            for (path, access) in [
                ("/tmp", tmp),
                ("/home/agent", Access::Writable),
                ("/run/cordon/control", Access::ReadOnly),
            ] {
                mounts.push(MountRule::required(
                    path,
                    access,
                    Id::NoHostMounts,
                    None,
                    None,
                ));
            }
            mounts
        };
        for tmp in [Access::Writable, Access::WritableExec] {
            let p = Policy {
                mounts: policy(tmp),
                ..crate::judge::tests::good_policy()
            };
            let remounted: Vec<&str> = needing_remount(&p, &entries)
                .iter()
                .map(|(m, _)| m.mount_point.as_str())
                .collect();
            assert_eq!(remounted, ["/run/cordon/control"], "{tmp:?}");
        }
        // The same /tmp under a read-only rule would be remounted: the filter is what keeps it.
        let p = Policy {
            mounts: policy(Access::ReadOnly),
            ..crate::judge::tests::good_policy()
        };
        assert_eq!(needing_remount(&p, &entries).len(), 2);
    }

    #[test]
    fn remount_keeps_what_a_mount_has_and_adds_what_its_rule_needs() {
        let entries = parse_mountinfo(
            "89 87 0:48 / /work/.git ro,relatime - tmpfs tmpfs rw\n\
             73 71 0:43 / /dev rw,nosuid - tmpfs tmpfs rw\n",
        )
        .unwrap();
        let all = remount_flags(&entries[0], MountFlags::ALL);
        assert_eq!(
            all,
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC
        );
        let dev = remount_flags(
            &entries[1],
            MountFlags {
                nosuid: true,
                nodev: false,
                noexec: true,
            },
        );
        assert_eq!(dev & libc::MS_RDONLY, 0, "a writable mount stays writable");
        assert_eq!(dev & libc::MS_NODEV, 0, "/dev keeps its devices");
        assert_ne!(dev & libc::MS_NOEXEC, 0);
    }
}
