//! `mounts`: the mountpoints in /proc/self/mountinfo are exactly the policy's (nothing more,
//! nothing missing), writable ones carry nosuid, nodev and noexec, every other one the flags its
//! rule names (the image's root alone may hold executables), the profile's own mounts show no host
//! path and no host disk, no engine socket and no extra device is present.

use cordon_contract::policy::Access;
use cordon_contract::probe::ops;
use cordon_contract::procfs::{self, MountEntry};
use cordon_contract::{engine_socket, paths};

use crate::report::Probe;

pub fn run(p: &mut Probe<'_>) {
    let text = match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(t) => t,
        Err(e) => return p.error(format!("mountinfo: {e}")),
    };
    let mounts: Vec<MountEntry> = match procfs::parse_mountinfo(&text) {
        Ok(m) => m,
        Err(e) => return p.error(e),
    };
    let policy = p.ctx.policy.clone();
    let rules = policy.mounts.clone();
    let tty = p.ctx.tty;

    for socket in engine_socket::PATHS {
        p.deny(&ops::DAEMON_SOCKET, &format!("{socket} exists"), || {
            std::fs::symlink_metadata(socket)
        });
    }
    for m in mounts.iter().filter(|m| {
        engine_socket::is_socket_mountpoint(&m.mount_point)
            && !engine_socket::PATHS.contains(&m.mount_point.as_str())
    }) {
        p.found(
            &ops::DAEMON_SOCKET,
            ops::DAEMON_SOCKET.id(),
            format!("socket mounted at {}", m.mount_point),
        );
    }

    let extra: Vec<String> = std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !paths::STANDARD_DEV.contains(&n.as_str()) && n != "shm")
                // The console of an attached terminal is the tty check's.
                .filter(|n| !(tty && n == "console"))
                .collect()
        })
        .unwrap_or_default();
    p.require(&ops::DEVICES, extra.is_empty(), || {
        format!(
            "/dev also has {} entries: {:?}",
            extra.len(),
            extra.iter().take(8).collect::<Vec<_>>()
        )
    });

    // /dev/shm and sockets have their own operations; every other mountpoint must be listed.
    let unknown: Vec<&str> = mounts
        .iter()
        .filter(|m| {
            m.mount_point != "/dev/shm" && !engine_socket::is_socket_mountpoint(&m.mount_point)
        })
        .filter(|m| !(tty && m.mount_point == "/dev/console"))
        .filter(|m| policy.rule_for(&m.mount_point).is_none())
        .map(|m| m.mount_point.as_str())
        .collect();
    p.require(&ops::MOUNT_SET, unknown.is_empty(), || {
        format!("mountpoints not in the policy: {unknown:?}")
    });
    if p.runs(&ops::MOUNT_MISSING) {
        for rule in rules.iter().filter(|r| r.required && !r.beneath) {
            if !mounts.iter().any(|m| m.mount_point == rule.path) {
                p.found(
                    &ops::MOUNT_MISSING,
                    rule.protection,
                    format!("no mount at {}", rule.path),
                );
            }
        }
    }
    let weak: Vec<String> = mounts
        .iter()
        .filter(|m| !m.read_only())
        .filter(|m| {
            policy
                .rule_for(&m.mount_point)
                .is_some_and(|r| r.access == Access::Writable)
        })
        .filter(|m| !(m.has("nosuid") && m.has("nodev") && m.has("noexec")))
        .map(|m| m.line.clone())
        .collect();
    p.require(&ops::WRITABLE_FLAGS, weak.is_empty(), || {
        format!("writable without nosuid,nodev,noexec: {weak:?}")
    });
    // Every other mount: the flags its rule names. The engine's read-only remount strips them
    // from content mounts; only the init puts them back.
    let exec_capable: Vec<String> = mounts
        .iter()
        .filter_map(|m| Some((m, policy.rule_for(&m.mount_point)?)))
        .filter(|(m, r)| r.access != Access::Writable || m.read_only())
        .filter(|(m, r)| {
            (r.flags.nosuid && !m.has("nosuid"))
                || (r.flags.nodev && !m.has("nodev"))
                || (r.flags.noexec && !m.has("noexec"))
        })
        .map(|(m, _)| m.line.clone())
        .collect();
    p.require(&ops::CONTENT_FLAGS, exec_capable.is_empty(), || {
        format!("mounts missing their flags: {exec_capable:?}")
    });
    // The profile's own mounts are whole tmpfs: a bind of a host directory, or a plain local
    // volume (a directory on the host's disk), shows its host path as the mount's root.
    let host_backed: Vec<String> = mounts
        .iter()
        .filter(|m| {
            rules.iter().any(|r| {
                r.required && r.path == m.mount_point && r.fstype.as_deref() == Some("tmpfs")
            })
        })
        .filter(|m| m.root != "/" || m.fstype != "tmpfs")
        .map(|m| format!("{} ({} {})", m.mount_point, m.fstype, m.root))
        .collect();
    p.require(&ops::HOST_PATHS, host_backed.is_empty(), || {
        format!("mounts backed by the host: {host_backed:?}")
    });
}
