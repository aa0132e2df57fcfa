//! Act: the phase's Landlock ruleset, FullyEnforced at the policy's ABI or not at all.
//!
//! The pins (`policy.landlock.pins`, the directories above a nested gitlink): the work tree's
//! write grant leaves out `REMOVE_DIR`, and each existing child directory of a pinned parent that
//! is itself no pinned parent and no mount (a gitlink mask) gets `REMOVE_DIR` back, for everything
//! beneath it. Landlock checks `REMOVE_DIR` on the parent of the directory removed or renamed (on
//! both sides of an exchange), so no pin, no child directory of a pinned parent, and no directory
//! made in a pinned parent after this (nor anything beneath one) can be removed or renamed; files
//! stay free everywhere (a file's move is judged on file rights alone).

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use cordon_contract::policy::LandlockPolicy;
use cordon_contract::{paths, tree};
use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::observe::{no_links_beneath, open_dir_beneath};

/// At most this many `REMOVE_DIR` rules for the children of the pinned parents.
pub const MAX_REMOVE_DIR_RULES: usize = 65_536;

/// The kernel's Landlock ABI (the contract's query), as a policy ABI.
pub fn kernel_abi() -> Result<u8, String> {
    let abi = cordon_contract::landlock::kernel_abi()
        .map_err(|e| format!("landlock_create_ruleset(VERSION): {e}"))?;
    u8::try_from(abi).map_err(|_| format!("landlock ABI {abi} out of range"))
}

fn abi_of(version: u8) -> ABI {
    ABI::from(i32::from(version))
}

/// What the ruleset covers: the filesystem (the `landlock` protection), execution (the
/// `exec-allowlist` protection), or both (always, outside the gate's probe layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cover {
    pub filesystem: bool,
    pub execute: bool,
}

/// Enforce the ruleset on this thread (and so every later child and thread: `restrict_self`
/// without TSYNC). Returns the enforced ABI (0 when the cover is empty, which only the gate asks
/// for).
pub fn enforce(policy: &LandlockPolicy, cover: Cover) -> Result<u8, String> {
    enforce_at(policy, cover, paths::WORK)
}

/// [`enforce`], with the pins relative to `root` (/work; a temporary tree in the tests).
fn enforce_at(policy: &LandlockPolicy, cover: Cover, root: &str) -> Result<u8, String> {
    let kernel = kernel_abi()?;
    if kernel < policy.abi {
        return Err(format!(
            "kernel Landlock ABI {kernel}, policy needs {}",
            policy.abi
        ));
    }
    let abi = abi_of(policy.abi);
    let mut all = AccessFs::from_all(abi);
    if !cover.filesystem {
        all = BitFlags::from(AccessFs::Execute);
    }
    if !cover.execute {
        all &= !BitFlags::from(AccessFs::Execute);
    }
    if all.is_empty() {
        return Ok(0);
    }
    let read = all & (AccessFs::ReadFile | AccessFs::ReadDir);
    let write = all & !BitFlags::from(AccessFs::Execute);
    // An executable file, and a tree beneath which anything may be executed (the read grants
    // give its directories their listing).
    let exec = all & (AccessFs::Execute | AccessFs::ReadFile);
    // A character device needs read, write, and (where handled) truncate and ioctl.
    let device =
        all & (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev);

    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    // The pins hold only where the work tree is written: without a write grant on it, nothing
    // under it has REMOVE_DIR to take away.
    let remove_dir = all & AccessFs::RemoveDir;
    let pinning =
        !policy.pins.is_empty() && !remove_dir.is_empty() && policy.write.iter().any(|p| p == root);
    let root_fd = if pinning {
        if let Some(other) = policy
            .write
            .iter()
            .find(|p| *p != root && overlaps(p, root))
        {
            return Err(format!(
                "the write grant {other} overlaps the pinned tree {root}"
            ));
        }
        Some(
            nix::fcntl::open(
                root,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| err(root, &e))?,
        )
    } else {
        None
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|e| err("handle_access", &e))?;
    if policy.abi >= 6 && cover.filesystem {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| err("scope", &e))?;
    }
    let mut created = ruleset.create().map_err(|e| err("create", &e))?;
    // (paths, access, whether it is the write grant)
    let grants = [
        (&policy.read, read, false),
        (&policy.write, write, true),
        (&policy.devices, device, false),
        (&policy.exec, exec, false),
        (&policy.exec_trees, exec, false),
    ];
    for (paths, access, writes) in grants {
        if access.is_empty() {
            continue;
        }
        for path in paths {
            let rule = match &root_fd {
                // The work tree's write grant, without REMOVE_DIR (the pins' rules give it back).
                Some(fd) if writes && path == root => PathBeneath::new(
                    PathFdOrOwned::Owned(fd.try_clone().map_err(|e| err(path, &e))?),
                    access & !remove_dir,
                ),
                _ => PathBeneath::new(
                    PathFdOrOwned::Path(PathFd::new(path).map_err(|e| err(path, &e))?),
                    access,
                ),
            };
            created = created.add_rule(rule).map_err(|e| err(path, &e))?;
        }
    }
    if let Some(fd) = &root_fd {
        created = pin_rules(
            created,
            fd.as_fd(),
            &policy.pins,
            remove_dir,
            MAX_REMOVE_DIR_RULES,
        )
        .map_err(|e| format!("pins under {root}: {e}"))?
        .0;
    }
    let status = created
        .restrict_self()
        .map_err(|e| err("restrict_self", &e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!("ruleset {:?}, not FullyEnforced", status.ruleset));
    }
    Ok(policy.abi)
}

/// A rule's directory: a path the crate opened, or a descriptor the pins opened.
#[derive(Debug)]
enum PathFdOrOwned {
    Path(PathFd),
    Owned(OwnedFd),
}

impl AsFd for PathFdOrOwned {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            PathFdOrOwned::Path(fd) => fd.as_fd(),
            PathFdOrOwned::Owned(fd) => fd.as_fd(),
        }
    }
}

/// `path` is `root`, above it or beneath it (both absolute and clean, as the policy writes them).
fn overlaps(path: &str, root: &str) -> bool {
    let under = |a: &str, b: &str| {
        a == b || b == "/" || a.strip_prefix(b).is_some_and(|r| r.starts_with('/'))
    };
    under(path, root) || under(root, path)
}

/// Add `REMOVE_DIR` on every existing child directory of each pinned parent, except the pinned
/// parents themselves and mounts (the gitlink masks): each opened from `root` without following
/// any link, and listed from its own descriptor. Returns the ruleset and how many rules it added;
/// more than `limit` is an error.
fn pin_rules(
    mut created: RulesetCreated,
    root: BorrowedFd<'_>,
    pins: &[String],
    access: BitFlags<AccessFs>,
    limit: usize,
) -> Result<(RulesetCreated, usize), String> {
    if let Some(bad) = pins.iter().find(|p| !tree::clean_path(p)) {
        return Err(format!("the pin {bad:?} is not a clean relative path"));
    }
    let parents = tree::pinned_parents(pins);
    let held: BTreeSet<&str> = parents.iter().map(String::as_str).collect();
    let mut added = 0usize;
    for parent in &parents {
        let shown = if parent.is_empty() {
            "."
        } else {
            parent.as_str()
        };
        let err = |what: &str, e: &dyn std::fmt::Display| format!("{shown}: {what}: {e}");
        let dir = if parent.is_empty() {
            root.try_clone_to_owned().map_err(|e| err("dup", &e))?
        } else {
            open_dir_beneath(root, parent.as_str()).map_err(|e| err("open", &e))?
        };
        let dev = nix::sys::stat::fstat(&dir)
            .map_err(|e| err("fstat", &e))?
            .st_dev;
        let listing = nix::fcntl::openat2(
            &dir,
            ".",
            nix::fcntl::OpenHow::new()
                .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
                .resolve(no_links_beneath()),
        )
        .map_err(|e| err("open for listing", &e))?;
        let mut entries = nix::dir::Dir::from_fd(listing).map_err(|e| err("list", &e))?;
        for entry in entries.iter() {
            let entry = entry.map_err(|e| err("list", &e))?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            if !matches!(entry.file_type(), None | Some(nix::dir::Type::Directory)) {
                continue;
            }
            // A name that is not UTF-8 is never a pin's parent (pins are UTF-8).
            if let Ok(name) = name.to_str() {
                let path = if parent.is_empty() {
                    name.to_owned()
                } else {
                    format!("{parent}/{name}")
                };
                if held.contains(path.as_str()) {
                    continue;
                }
            }
            let child = match open_dir_beneath(&dir, name) {
                Ok(fd) => fd,
                // A link, or no directory after all: no rule (a link is a file to Landlock).
                Err(Errno::ELOOP | Errno::ENOTDIR) => continue,
                Err(e) => return Err(err(&format!("open {name:?}"), &e)),
            };
            let st =
                nix::sys::stat::fstat(&child).map_err(|e| err(&format!("fstat {name:?}"), &e))?;
            if st.st_dev != dev {
                // A mount (a gitlink mask): nothing beneath it is the agent's to remove.
                continue;
            }
            added += 1;
            if added > limit {
                return Err(format!(
                    "more than {limit} directories beside the pins (REMOVE_DIR rules)"
                ));
            }
            created = created
                .add_rule(PathBeneath::new(child, access))
                .map_err(|e| err(&format!("rule for {name:?}"), &e))?;
        }
    }
    Ok((created, added))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A temporary tree `w/` with a nested gitlink `a/b/sub`, a sibling `s`, a non-pinned
    /// `other/deep`, and a link `lnk -> a` (a link to a pinned parent, which must not be followed).
    fn tree(name: &str) -> PathBuf {
        let base =
            std::env::temp_dir().join(format!("cordon-landlock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let w = base.join("w");
        for dir in ["a/b/sub", "s", "other/deep"] {
            std::fs::create_dir_all(w.join(dir)).expect("tree");
        }
        std::fs::write(w.join("a/b/kept.txt"), "kept\n").expect("tree");
        std::os::unix::fs::symlink("a", w.join("lnk")).expect("tree");
        w
    }

    fn policy(root: &Path, pins: &[&str]) -> LandlockPolicy {
        LandlockPolicy {
            abi: kernel_abi().expect("this kernel has Landlock"),
            read: vec![],
            write: vec![root.to_string_lossy().into_owned()],
            devices: vec![],
            exec: vec![],
            pins: pins.iter().map(|p| (*p).to_owned()).collect(),
            exec_trees: vec![],
        }
    }

    const ALL: Cover = Cover {
        filesystem: true,
        execute: true,
    };

    /// One operation's outcome: `None` for success, else the errno.
    type Outcome = (&'static str, Option<i32>);

    fn outcome(what: &'static str, r: std::io::Result<()>) -> Outcome {
        (what, r.err().map(|e| e.raw_os_error().unwrap_or(-1)))
    }

    fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            a,
            nix::fcntl::AT_FDCWD,
            b,
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        )
        .map_err(std::io::Error::from)
    }

    /// Enforce in a thread of its own (`restrict_self` restricts the calling thread only: the
    /// crate sets no TSYNC), run `ops` there under the ruleset, and hand back their outcomes.
    fn restricted(
        policy: LandlockPolicy,
        root: PathBuf,
        ops: impl FnOnce(&Path) -> Vec<Outcome> + Send + 'static,
    ) -> Result<Vec<Outcome>, String> {
        std::thread::spawn(move || {
            let root_str = root.to_string_lossy().into_owned();
            enforce_at(&policy, ALL, &root_str)?;
            Ok(ops(&root))
        })
        .join()
        .expect("the restricted thread")
    }

    fn pinned_ops(w: &Path) -> Vec<Outcome> {
        use std::fs;
        let j = |p: &str| w.join(p);
        vec![
            outcome("rename a", fs::rename(j("a"), j("a2"))),
            outcome("rmdir a", fs::remove_dir(j("a"))),
            outcome("rename a/b", fs::rename(j("a/b"), j("a/b2"))),
            outcome("rmdir a/b", fs::remove_dir(j("a/b"))),
            outcome("move a/b into other", fs::rename(j("a/b"), j("other/b"))),
            outcome("exchange a with s", exchange(&j("a"), &j("s"))),
            outcome(
                "exchange a/b with other/deep",
                exchange(&j("a/b"), &j("other/deep")),
            ),
            outcome("create a/b/f", fs::write(j("a/b/f"), "x")),
            outcome("rename a/b/f to a/b/g", fs::rename(j("a/b/f"), j("a/b/g"))),
            outcome(
                "move the file a/b/g into other",
                fs::rename(j("a/b/g"), j("other/g")),
            ),
            outcome("remove other/g", fs::remove_file(j("other/g"))),
            outcome("remove a/b/kept.txt", fs::remove_file(j("a/b/kept.txt"))),
            outcome("mkdir x", fs::create_dir(j("x"))),
            outcome("mkdir x/y", fs::create_dir(j("x/y"))),
            outcome("rmdir x/y", fs::remove_dir(j("x/y"))),
            outcome("rmdir x", fs::remove_dir(j("x"))),
            outcome("rename x", fs::rename(j("x"), j("x2"))),
            outcome("rmdir s", fs::remove_dir(j("s"))),
            outcome("mkdir other/deep/n", fs::create_dir(j("other/deep/n"))),
            outcome(
                "rename other/deep/n",
                fs::rename(j("other/deep/n"), j("other/deep/n2")),
            ),
            outcome("rmdir other/deep/n2", fs::remove_dir(j("other/deep/n2"))),
            outcome(
                "rename other/deep",
                fs::rename(j("other/deep"), j("other/deep2")),
            ),
            outcome("rmdir other/deep2", fs::remove_dir(j("other/deep2"))),
            outcome("remove the link lnk", fs::remove_file(j("lnk"))),
            outcome("mkdir other/m", fs::create_dir(j("other/m"))),
            outcome("move other/m to m", fs::rename(j("other/m"), j("m"))),
            outcome("rmdir m", fs::remove_dir(j("m"))),
            outcome("move m back to other/m", fs::rename(j("m"), j("other/m"))),
            outcome("mkdir other/r", fs::create_dir(j("other/r"))),
            outcome(
                "replace the empty s with other/r",
                fs::rename(j("other/r"), j("s")),
            ),
            // The gitlink itself is the mask's to hold (a mountpoint: EBUSY), not the pins'.
            outcome("rmdir a/b/sub", fs::remove_dir(j("a/b/sub"))),
        ]
    }

    #[test]
    fn the_pins_hold_and_everything_else_stays_writable() {
        let w = tree("pinned");
        let got = restricted(policy(&w, &["a", "a/b"]), w.clone(), pinned_ops).expect("enforce");
        for (what, errno) in &got {
            eprintln!(
                "pinned: {what}: {}",
                errno.map_or("ok".to_owned(), |e| Errno::from_raw(e).to_string())
            );
        }
        let eacces = Some(libc::EACCES);
        let want: Vec<Outcome> = vec![
            ("rename a", eacces),
            ("rmdir a", eacces),
            ("rename a/b", eacces),
            ("rmdir a/b", eacces),
            ("move a/b into other", eacces),
            ("exchange a with s", eacces),
            ("exchange a/b with other/deep", eacces),
            ("create a/b/f", None),
            ("rename a/b/f to a/b/g", None),
            ("move the file a/b/g into other", None),
            ("remove other/g", None),
            ("remove a/b/kept.txt", None),
            ("mkdir x", None),
            ("mkdir x/y", None),
            // Made in a pinned parent after the ruleset: no rule gives it REMOVE_DIR.
            ("rmdir x/y", eacces),
            ("rmdir x", eacces),
            ("rename x", eacces),
            // An existing child of a pinned parent: everything beneath it is free, not itself.
            ("rmdir s", eacces),
            ("mkdir other/deep/n", None),
            ("rename other/deep/n", None),
            ("rmdir other/deep/n2", None),
            ("rename other/deep", None),
            ("rmdir other/deep2", None),
            ("remove the link lnk", None),
            // A directory moved into a pinned parent loses REMOVE_DIR (allowed: it gains
            // nothing), and is stuck there.
            ("mkdir other/m", None),
            ("move other/m to m", None),
            ("rmdir m", eacces),
            ("move m back to other/m", eacces),
            // Replacing a directory removes it: not in a pinned parent.
            ("mkdir other/r", None),
            ("replace the empty s with other/r", eacces),
            ("rmdir a/b/sub", None),
        ];
        assert_eq!(got, want);
        let _ = std::fs::remove_dir_all(w.parent().expect("base"));
    }

    #[test]
    fn without_pins_a_directory_above_a_gitlink_moves() {
        let w = tree("control");
        let got = restricted(policy(&w, &[]), w.clone(), |w| {
            vec![
                outcome("rename a", std::fs::rename(w.join("a"), w.join("a2"))),
                outcome("rename a2 back", std::fs::rename(w.join("a2"), w.join("a"))),
                outcome("exchange a with s", exchange(&w.join("a"), &w.join("s"))),
                outcome("mkdir x", std::fs::create_dir(w.join("x"))),
                outcome("rmdir x", std::fs::remove_dir(w.join("x"))),
                outcome("rmdir s", std::fs::remove_dir(w.join("s"))),
            ]
        })
        .expect("enforce");
        for (what, errno) in &got {
            eprintln!(
                "control: {what}: {}",
                errno.map_or("ok".to_owned(), |e| Errno::from_raw(e).to_string())
            );
        }
        // `s` was exchanged with `a`: the name `s` now holds the non-empty tree.
        assert_eq!(
            got,
            vec![
                ("rename a", None),
                ("rename a2 back", None),
                ("exchange a with s", None),
                ("mkdir x", None),
                ("rmdir x", None),
                ("rmdir s", Some(libc::ENOTEMPTY)),
            ]
        );
        let _ = std::fs::remove_dir_all(w.parent().expect("base"));
    }

    #[test]
    fn a_pinned_parent_reached_through_a_link_or_an_overlapping_grant_is_an_error() {
        // `lnk -> a`: the pins name `lnk`, a link.
        let w = tree("link");
        let e = restricted(policy(&w, &["lnk", "lnk/b"]), w.clone(), |_| vec![])
            .expect_err("a link on the way");
        // O_PATH | O_NOFOLLOW | O_DIRECTORY on a final link: ENOTDIR (ELOOP for one on the way).
        assert!(e.contains("lnk: open: ENOTDIR"), "{e}");
        let e = restricted(
            policy(&w, &["lnk/b/sub", "lnk/b/sub/x"]),
            w.clone(),
            |_| vec![],
        )
        .expect_err("a link on the way");
        // The pinned parents are `lnk/b` and `lnk/b/sub`: `lnk/b` is reached through `lnk`.
        assert!(e.contains("lnk/b: open: ELOOP"), "{e}");
        // A second write grant beneath the pinned tree would give REMOVE_DIR back.
        let mut p = policy(&w, &["a", "a/b"]);
        p.write.push(w.join("a").to_string_lossy().into_owned());
        let e = restricted(p, w.clone(), |_| vec![]).expect_err("an overlapping grant");
        assert!(e.contains("overlaps"), "{e}");
        // A pin that is not a clean relative path.
        let e =
            restricted(policy(&w, &["../w"]), w.clone(), |_| vec![]).expect_err("an unclean pin");
        assert!(e.contains("clean"), "{e}");
        let _ = std::fs::remove_dir_all(w.parent().expect("base"));
    }

    /// An exec tree grants execution of anything beneath the directory: without one (and an
    /// empty exec allowlist) nothing runs, with "/" a file the allowlist never names does.
    #[test]
    fn an_exec_tree_grants_execution_beneath_a_directory() {
        let run_true = |exec_trees: Vec<String>| {
            let policy = LandlockPolicy {
                abi: kernel_abi().expect("this kernel has Landlock"),
                read: vec!["/".into()],
                write: vec![],
                devices: vec!["/dev/null".into()],
                exec: vec![],
                pins: vec![],
                exec_trees,
            };
            std::thread::spawn(move || {
                enforce_at(&policy, ALL, "/nonexistent")?;
                Ok::<_, String>(
                    std::process::Command::new("/bin/true")
                        .stdin(std::process::Stdio::null())
                        .status()
                        .map(|s| s.success())
                        .map_err(|e| e.raw_os_error()),
                )
            })
            .join()
            .expect("the restricted thread")
            .expect("enforce")
        };
        assert_eq!(run_true(vec![]), Err(Some(libc::EACCES)));
        assert_eq!(run_true(vec!["/".into()]), Ok(true));
    }

    /// More children of a pinned parent than the limit is an error (the limit lowered here; no
    /// ruleset is enforced).
    #[test]
    fn more_rules_than_the_limit_is_an_error() {
        let w = tree("limit");
        let root = nix::fcntl::open(
            &w,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .expect("root");
        let abi = abi_of(kernel_abi().expect("Landlock"));
        let ruleset = || {
            Ruleset::default()
                .handle_access(AccessFs::from_all(abi))
                .expect("handle")
                .create()
                .expect("create")
        };
        let pins = vec!["a".to_owned(), "a/b".to_owned()];
        let remove = BitFlags::from(AccessFs::RemoveDir);
        // Children of /work other than `a`: s and other (lnk is a link, a/b/sub's parent is a
        // pin, not a pinned parent); of `a`: b.
        let (_, added) = pin_rules(ruleset(), root.as_fd(), &pins, remove, 3).expect("three");
        assert_eq!(added, 3);
        let e = pin_rules(ruleset(), root.as_fd(), &pins, remove, 2).expect_err("over the limit");
        assert!(e.contains("more than 2"), "{e}");
        let _ = std::fs::remove_dir_all(w.parent().expect("base"));
    }
}
