//! `mounts`: the mountpoints in /proc/self/mountinfo are exactly the policy's (nothing more,
//! nothing missing), writable ones carry nosuid, nodev and noexec, every other one the flags its
//! rule names (the image's root alone may hold executables), the profile's own mounts show no host
//! path and no host disk, no engine socket and no extra device is present.

use cordon_contract::policy::{Access, MountFlags, MountRule, Policy, Role};
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

    let command = policy.role == Role::Command;
    if command {
        agent_dirs(p, &mounts);
    }

    // /dev/shm, sockets and (in a command's container) the agent's dirs have their own
    // operations; every other mountpoint must be listed.
    let unknown: Vec<&str> = mounts
        .iter()
        .filter(|m| !(command && agent_dir(&m.mount_point).is_some()))
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
    // Each mount judged by its rule: the n-th mount at a point by the point's n-th rule (an
    // approved command's /work: the covered volume, then the overlay over it).
    let judged = paired(&policy, &mounts);
    let writable_flags = |r: &MountRule| match r.access {
        Access::Writable => Some(MountFlags::ALL),
        // An approved command's scratch runs what it builds: nothing set-id or a device there.
        Access::WritableExec => Some(MountFlags {
            nosuid: true,
            nodev: true,
            noexec: false,
        }),
        Access::ReadOnly | Access::RootOwned | Access::Masked => None,
    };
    let lacks = |m: &MountEntry, need: MountFlags| {
        (need.nosuid && !m.has("nosuid"))
            || (need.nodev && !m.has("nodev"))
            || (need.noexec && !m.has("noexec"))
    };
    let weak: Vec<String> = judged
        .iter()
        .filter(|(m, _)| !m.read_only())
        .filter(|(m, r)| writable_flags(r).is_some_and(|need| lacks(m, need)))
        .map(|(m, _)| m.line.clone())
        .collect();
    p.require(&ops::WRITABLE_FLAGS, weak.is_empty(), || {
        format!("writable without its flags: {weak:?}")
    });
    // Every other mount: the flags its rule names. The engine's read-only remount strips them
    // from content mounts; only the init puts them back.
    let exec_capable: Vec<String> = judged
        .iter()
        .filter(|(m, r)| writable_flags(r).is_none() || m.read_only())
        .filter(|(m, r)| lacks(m, r.flags))
        .map(|(m, _)| m.line.clone())
        .collect();
    p.require(&ops::CONTENT_FLAGS, exec_capable.is_empty(), || {
        format!("mounts missing their flags: {exec_capable:?}")
    });
    // The profile's own mounts are whole tmpfs: a bind of a host directory, or a plain local
    // volume (a directory on the host's disk), shows its host path as the mount's root.
    let host_backed: Vec<String> = judged
        .iter()
        .filter(|(m, r)| {
            r.required && r.path == m.mount_point && r.fstype.as_deref() == Some("tmpfs")
        })
        .filter(|(m, _)| m.root != "/" || m.fstype != "tmpfs")
        .map(|(m, _)| format!("{} ({} {})", m.mount_point, m.fstype, m.root))
        .collect();
    p.require(&ops::HOST_PATHS, host_backed.is_empty(), || {
        format!("mounts backed by the host: {host_backed:?}")
    });
}

/// Which of the agent's own dirs `point` is, or lies beneath.
fn agent_dir(point: &str) -> Option<&'static str> {
    cordon_contract::paths::AGENT_ONLY_DIRS
        .iter()
        .copied()
        .find(|d| point == *d || point.starts_with(&format!("{d}/")))
}

/// An approved command's container: nothing of its agent's is mounted, and neither the relay's
/// socket nor the proxy's is there to dial.
fn agent_dirs(p: &mut Probe<'_>, mounts: &[MountEntry]) {
    use cordon_contract::command::SOCKET_DIR;
    for (op, dir, socket) in [
        (
            &ops::COMMAND_RELAY,
            SOCKET_DIR,
            cordon_contract::command::SOCKET,
        ),
        (
            &ops::COMMAND_EGRESS,
            paths::EGRESS_DIR,
            cordon_contract::egress::SOCKET,
        ),
    ] {
        if !p.runs(op) {
            continue;
        }
        let mounted: Vec<&str> = mounts
            .iter()
            .filter(|m| agent_dir(&m.mount_point) == Some(dir))
            .map(|m| m.mount_point.as_str())
            .collect();
        if !mounted.is_empty() {
            p.found(
                op,
                op.id(),
                format!("the agent's {dir} is mounted: {mounted:?}"),
            );
        } else if let Ok(meta) = std::fs::symlink_metadata(socket) {
            p.found(
                op,
                op.id(),
                format!("{socket} exists: {:?}", meta.file_type()),
            );
        }
    }
}

/// Each mount with the rule that judges it, in mountinfo's order: the n-th mount at a point by
/// the point's n-th rule, one beyond its point's last by the last; a mount with no rule is left
/// out (the mountpoint set's operation names it).
fn paired<'a>(
    policy: &'a Policy,
    mounts: &'a [MountEntry],
) -> Vec<(&'a MountEntry, &'a MountRule)> {
    let mut seen: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    mounts
        .iter()
        .filter_map(|m| {
            let nth = seen.entry(m.mount_point.as_str()).or_default();
            let rules = policy.rules_for(&m.mount_point);
            let rule = rules.get(*nth).or(rules.last()).copied();
            *nth += 1;
            Some((m, rule?))
        })
        .collect()
}
