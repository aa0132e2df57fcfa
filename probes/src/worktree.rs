//! `phase-worktree`: in planning, questions and review every form of write to /work fails; in
//! execute and fix /work can be written. Nothing can be written beneath a gitlink mask, and the
//! mask cannot be removed or renamed; no directory above a nested gitlink (the pins, derived here
//! from the masks, never read from the policy's Landlock pins) can be renamed or exchanged, and
//! every mask is still in place afterwards, while files inside the pins stay writable.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

use cordon_contract::paths;
use cordon_contract::probe::ops;
use cordon_contract::{tree, Id};

use crate::report::Probe;

fn fixture(path: &str) -> String {
    format!("{}/{path}", paths::WORK)
}

fn read_only_phase(p: &mut Probe<'_>) {
    let token = p.ctx.token.clone();
    for (file, _) in cordon_contract::probe::fixture::WORK_FILES {
        if std::fs::symlink_metadata(fixture(file)).is_err() {
            p.error(format!(
                "fixture {file} is missing: the write checks would prove nothing"
            ));
        }
    }
    let created = fixture(&format!("probe/new-{token}"));
    if p.deny(&ops::WORK_CREATE, "create a file in /work", || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&created)
    }) {
        let _ = std::fs::remove_file(&created);
    }
    p.deny(
        &ops::WORK_APPEND,
        "open a file in /work for appending",
        || {
            OpenOptions::new()
                .append(true)
                .open(fixture("probe/append.txt"))
        },
    );
    p.deny(&ops::WORK_TRUNCATE, "truncate a file in /work", || {
        OpenOptions::new()
            .write(true)
            .open(fixture("probe/truncate.txt"))?
            .set_len(0)
    });
    p.deny(&ops::WORK_CHMOD, "chmod a file in /work", || {
        std::fs::set_permissions(
            fixture("probe/chmod.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
    });
    p.deny(&ops::WORK_RENAME, "rename a file in /work", || {
        std::fs::rename(
            fixture("probe/rename.txt"),
            fixture(&format!("probe/renamed-{token}.txt")),
        )
    });
    p.deny(&ops::WORK_UNLINK, "unlink a file in /work", || {
        std::fs::remove_file(fixture("probe/unlink.txt"))
    });
    p.deny(&ops::WORK_MKDIR, "mkdir in /work", || {
        std::fs::create_dir(fixture(&format!("probe/dir-{token}")))
    });
    p.deny(&ops::WORK_RMDIR, "rmdir in /work", || {
        std::fs::remove_dir(fixture("probe/rmdir"))
    });
    p.deny(&ops::WORK_SYMLINK, "symlink in /work", || {
        std::os::unix::fs::symlink("append.txt", fixture(&format!("probe/sym-{token}")))
    });
    p.deny(&ops::WORK_HARDLINK, "hard link in /work", || {
        std::fs::hard_link(
            fixture("probe/link-src.txt"),
            fixture(&format!("probe/hard-{token}")),
        )
    });
}

fn writable_phase(p: &mut Probe<'_>) {
    let path = fixture(&format!("cordon-probe-{}", p.ctx.token));
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
    {
        Ok(_) => {
            if let Err(e) = std::fs::remove_file(&path) {
                p.error(format!("cannot remove {path} in a writable phase: {e}"));
            }
        }
        Err(e) => p.error(format!(
            "/work is not writable in {}: {e}",
            p.ctx.policy.phase
        )),
    }
    // A directory beneath a directory that is not pinned is made, moved and removed freely.
    let made = fixture(&format!("probe/cordon-probe-dir-{}", p.ctx.token));
    let moved = format!("{made}-moved");
    let steps = std::fs::create_dir(&made)
        .map_err(|e| format!("mkdir {made}: {e}"))
        .and_then(|()| std::fs::rename(&made, &moved).map_err(|e| format!("rename {made}: {e}")))
        .and_then(|()| std::fs::remove_dir(&moved).map_err(|e| format!("rmdir {moved}: {e}")));
    if let Err(e) = steps {
        p.error(format!(
            "a directory beneath /work/probe cannot be made, moved and removed in {}: {e}",
            p.ctx.policy.phase
        ));
    }
}

/// The gitlink mask at `mask` (absolute): nothing can be made beneath it, and it can be neither
/// removed nor renamed. Whatever succeeds is undone.
fn gitlink(p: &mut Probe<'_>, mask: &str) {
    let token = p.ctx.token.clone();
    let path = format!("{mask}/cordon-probe-{token}");
    if p.deny(
        &ops::GITLINK_WRITE,
        &format!("create a file beneath the gitlink {mask}"),
        || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)
        },
    ) {
        let _ = std::fs::remove_file(&path);
    }
    let dir = format!("{mask}/cordon-probe-dir-{token}");
    if p.deny(
        &ops::GITLINK_MKDIR,
        &format!("mkdir beneath the gitlink {mask}"),
        || std::fs::create_dir(&dir),
    ) {
        let _ = std::fs::remove_dir(&dir);
    }
    if p.deny(
        &ops::GITLINK_RMDIR,
        &format!("rmdir the gitlink {mask}"),
        || std::fs::remove_dir(mask),
    ) {
        if let Err(e) = std::fs::create_dir(mask) {
            p.error(format!("cannot make the removed gitlink {mask} again: {e}"));
        }
    }
    let aside = format!("{mask}-cordon-probe-{token}");
    if p.deny(
        &ops::GITLINK_RENAME,
        &format!("rename the gitlink {mask} to {aside}"),
        || std::fs::rename(mask, &aside),
    ) {
        if let Err(e) = std::fs::rename(&aside, mask) {
            p.error(format!("cannot rename the gitlink back from {aside}: {e}"));
        }
    }
}

/// The device of `path` and of its parent (never following a final link), when `path` is a
/// directory.
fn devices(path: &str) -> Option<(u64, u64)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let parent = std::path::Path::new(path).parent()?;
    let up = std::fs::symlink_metadata(parent).ok()?;
    meta.is_dir().then_some((meta.dev(), up.dev()))
}

/// A mountpoint: a directory on another device than its parent.
fn mounted(path: &str) -> bool {
    devices(path).is_some_and(|(own, parent)| own != parent)
}

fn exchange(a: &str, b: &str) -> std::io::Result<()> {
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        a,
        nix::fcntl::AT_FDCWD,
        b,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .map_err(std::io::Error::from)
}

/// The pins of `masks` (absolute, beneath `root`, /work): none can be renamed, nor exchanged with
/// a fresh sibling; every mask in place before is in place after. Files inside each pin stay
/// writable.
fn pins(p: &mut Probe<'_>, root: &str, masks: &[String]) {
    let fixture = |path: &str| format!("{root}/{path}");
    let prefix = format!("{root}/");
    let gitlinks: Vec<String> = masks
        .iter()
        .filter_map(|m| m.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect();
    let pins = tree::pins_of(&gitlinks);
    if pins.is_empty() {
        return;
    }
    let token = p.ctx.token.clone();
    let before: Vec<(String, u64)> = masks
        .iter()
        .filter_map(|m| match devices(m) {
            Some((own, parent)) if own != parent => Some((m.clone(), own)),
            _ => None,
        })
        .collect();
    for (i, pin) in pins.iter().enumerate() {
        let path = fixture(pin);
        // Without the init only a mount could hold a pin (this engine has none: its pins are
        // the init's Landlock): a pin that is no mountpoint is not tried.
        if p.ctx.without_init && !mounted(&path) {
            continue;
        }
        let aside = format!("{path}-cordon-probe-{token}");
        if p.deny(
            &ops::PIN_RENAME,
            &format!("rename the pinned directory {path} to {aside}"),
            || std::fs::rename(&path, &aside),
        ) {
            if let Err(e) = std::fs::rename(&aside, &path) {
                p.error(format!("cannot rename the pin back from {aside}: {e}"));
            }
        }
        // A fresh sibling: made in the pin's parent, which stays writable. Under the pins it
        // cannot be removed again (nothing made in a pinned parent can): it stays, empty.
        let sibling = format!("{path}-cordon-probe-x{i}-{token}");
        if let Err(e) = std::fs::create_dir(&sibling) {
            p.error(format!(
                "cannot make the directory {sibling} beside the pin: {e}"
            ));
            continue;
        }
        if p.deny(
            &ops::PIN_EXCHANGE,
            &format!("exchange the pinned directory {path} with {sibling}"),
            || exchange(&path, &sibling),
        ) {
            if let Err(e) = exchange(&path, &sibling) {
                p.error(format!("cannot exchange the pin {path} back: {e}"));
            }
        }
        let _ = std::fs::remove_dir(&sibling);
    }
    for (mask, dev) in before {
        let now = devices(&mask);
        if !now.is_some_and(|(own, parent)| own == dev && own != parent) {
            p.found(
                &ops::PIN_RENAME,
                Id::PinnedDirs,
                format!("the gitlink mask {mask} is no longer in place after the pin probes"),
            );
        }
    }
    if !p.ctx.work_writable {
        return;
    }
    // The positive control: a pin's own files are the agent's.
    for pin in &pins {
        let file = fixture(&format!("{pin}/cordon-probe-{token}"));
        let steps = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&file)
            .and_then(|mut f| f.write_all(b"pinned\n"))
            .and_then(|()| std::fs::remove_file(&file));
        if let Err(e) = steps {
            p.error(format!(
                "a file inside the pinned directory {} cannot be created, written and removed: {e}",
                fixture(pin)
            ));
        }
    }
}

pub fn run(p: &mut Probe<'_>) {
    if p.ctx.work_writable {
        writable_phase(p);
    } else {
        read_only_phase(p);
    }
    let masks: Vec<String> = p
        .ctx
        .policy
        .mounts
        .iter()
        .filter(|r| r.protection == Id::GitlinkMasks)
        .map(|r| r.path.clone())
        .collect();
    for mask in &masks {
        gitlink(p, mask);
    }
    pins(p, paths::WORK, &masks);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Ctx;
    use cordon_contract::policy::{self, CgroupLimits, LandlockPolicy, Policy};
    use cordon_contract::{Phase, Vendor};

    fn ctx(without_init: bool) -> Ctx {
        Ctx {
            policy: Policy {
                version: policy::POLICY_VERSION,
                phase: Phase::Execute,
                vendor: Vendor::Claude,
                uid: 10001,
                gid: 10001,
                start_capabilities: vec![],
                hostname: "cordon".into(),
                env: vec![],
                cwd: "/work".into(),
                mounts: vec![],
                landlock: LandlockPolicy {
                    abi: 6,
                    read: vec![],
                    write: vec![],
                    devices: vec![],
                    exec: vec![],
                    pins: vec![],
                    exec_trees: vec![],
                },
                sockets: policy::SocketPolicy::agent(),
                masked: vec![],
                cgroup: CgroupLimits {
                    pids_max: 64,
                    memory_bytes: 1 << 28,
                    cpu_quota_us: 100_000,
                    cpu_period_us: 100_000,
                },
                command: vec![],
                deadline_ms: 1000,
                grace_ms: 100,
                skip: vec![],
                egress: None,
                sentinel: None,
                overlay: None,
                work_digest: None,
                role: Default::default(),
            },
            without_init,
            token: "t0k".into(),
            privileged: false,
            tty: false,
            foreign_user: false,
            work_writable: true,
        }
    }

    /// Over a plain tree (no mask mounted, no Landlock) every gitlink and pin operation succeeds,
    /// is reported, and is undone; without the init a pin that no mount holds is not tried.
    #[test]
    fn every_operation_is_reported_and_undone_where_nothing_holds() {
        let base = std::env::temp_dir().join(format!("cordon-probe-pins-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("vendor/module")).expect("tree");
        std::fs::create_dir_all(base.join("top")).expect("tree");
        let root = base.to_string_lossy().into_owned();
        let masks = vec![format!("{root}/vendor/module"), format!("{root}/top")];

        let c = ctx(false);
        let mut p = Probe::new("phase-worktree", &c);
        for mask in &masks {
            gitlink(&mut p, mask);
        }
        pins(&mut p, &root, &masks);
        let report = p.finish();
        let actions: Vec<(&str, Id)> = report
            .breaches
            .iter()
            .map(|b| (b.action.as_str(), b.id))
            .collect();
        let gitlink_ops = [
            ("gitlink-write", Id::GitlinkMasks),
            ("gitlink-mkdir", Id::GitlinkMasks),
            ("gitlink-rmdir", Id::GitlinkMasks),
            ("gitlink-rename", Id::GitlinkMasks),
        ];
        let mut want: Vec<(&str, Id)> = gitlink_ops.iter().chain(&gitlink_ops).copied().collect();
        // `top` is a top-level gitlink: only `vendor` is pinned.
        want.extend([
            ("pin-rename", Id::PinnedDirs),
            ("pin-exchange", Id::PinnedDirs),
        ]);
        assert_eq!(actions, want);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        // Everything undone: the tree is as it was.
        let mut left: Vec<String> = walk(&base);
        left.sort();
        assert_eq!(left, ["top", "vendor", "vendor/module"]);

        let c = ctx(true);
        let mut p = Probe::new("phase-worktree", &c);
        pins(&mut p, &root, &masks);
        let report = p.finish();
        assert!(report.breaches.is_empty(), "{:?}", report.breaches);
        assert_eq!(report.checks, 0);
        std::fs::remove_dir_all(&base).expect("cleanup");
    }

    fn walk(dir: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
                let path = entry.path();
                out.push(
                    path.strip_prefix(dir)
                        .expect("beneath")
                        .to_string_lossy()
                        .into_owned(),
                );
                if entry.file_type().expect("type").is_dir() {
                    stack.push(path);
                }
            }
        }
        out
    }
}
