//! The probe layer: cordon-probe, acting as the agent, in each case's container.
//!
//! C0 runs the probes under cordon-init and must report no breach. A container-level C_P runs them
//! as the entrypoint, with no init (whose Landlock and seccomp filter would otherwise hide the
//! missing protection); an init-only C_P runs them under an init told to leave P out. Either way
//! the reported breaches must be exactly the operations [`expected`] names: the protection's ids,
//! and every operation that the removal makes succeed, so dropping one deny check from a probe
//! turns its row red.

use std::collections::BTreeSet;

use cordon_contract::probe::{fixture, ops, Operation, ProbeReport};
use cordon_contract::{Id, Vendor};

use super::cases::Case;
use cordon::archive::Archive;
use cordon::error::{Error, Result};

/// How the probes run in a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Under cordon-init, everything enforced (C0).
    Init,
    /// Under cordon-init, with one init-only protection left out.
    InitSkipping(Id),
    /// cordon-probe is the entrypoint; there is no init.
    WithoutInit,
    /// Under cordon-init, everything enforced, the egress proxy told to leave one rule out.
    ProxySkipping(Id),
}

/// How `case` runs its probes.
pub fn mode(case: &Case) -> Mode {
    match case.removed {
        None => Mode::Init,
        Some(id) if cordon_contract::egress::rule_name(id).is_some() => Mode::ProxySkipping(id),
        Some(id) if id.layers().init_only() || case.under_init => Mode::InitSkipping(id),
        Some(_) => Mode::WithoutInit,
    }
}

/// Whether removing what `case` removes makes `op` succeed with breach `id`.
fn reached(op: &Operation, id: Id, case: &Case) -> bool {
    let removed = case.removed_all();
    if !removed.contains(&id) || (mode(case) == Mode::WithoutInit && op.init_only()) {
        return false;
    }
    // A command that writes nothing writes /work through the init's overlay, in any phase; without
    // the init, /work is the volume, read-only.
    let writable_phase = match case.command {
        Some(cordon_contract::command::Writes::None) => mode(case) != Mode::WithoutInit,
        _ => case.phase.work_writable(),
    };
    let root = removed.contains(&Id::NonRootUser);
    match (op.probe, op.action) {
        // The egress probe tries nothing without the invocation's network.
        ("egress", _) if !case.egress => false,
        // Under the init, Landlock refuses the exec even from an exec-capable mount; the mapping
        // is no exec, and nothing but the mount's noexec refuses it.
        ("exec-policy", "exec-scratch-copy") => mode(case) == Mode::WithoutInit,
        // Only an image with an ELF interpreter on the list has a loader to try, and what it
        // guards (cordon's binaries execute-only in the agent image) is the image's, which no
        // row removes: its breach is `suite::image::the_interpreter_runs_no_cordon_binary`.
        ("exec-policy", "exec-via-interpreter") => false,
        // A writable work tree keeps its flags from its volume's options.
        ("exec-policy", "mmap-exec-work") => !writable_phase,
        ("mounts", "host-paths") => case.facet == Some("disk"),
        ("mounts", "command-relay") => case.command.is_some() && case.facet == Some("relay"),
        ("mounts", "command-egress") => case.command.is_some() && case.facet == Some("egress"),
        // A privileged container keeps the masks and read-only paths a create names explicitly
        // (cordon's always does): only their own removal opens them.
        ("read-only-isolation", "masked-paths" | "proc-sys-readonly") => {
            case.facet == Some("masks")
        }
        _ if id == Id::NotPrivileged && case.facet == Some("masks") => false,
        // Root-owned files: only root writes them once the mount is writable.
        ("read-only-isolation", "image-binaries-write")
        | ("scratch-capacity", "control-write" | "input-write") => root,
        (
            "phase-worktree",
            "gitlink-write" | "gitlink-mkdir" | "gitlink-rmdir" | "gitlink-rename",
        ) => case.gitlinks && writable_phase,
        // Without the init nothing holds a pin on this engine: the probe leaves them out.
        ("phase-worktree", "pin-rename" | "pin-exchange") => {
            case.gitlinks && writable_phase && mode(case) != Mode::WithoutInit
        }
        ("phase-worktree", _) => !writable_phase,
        ("task-capacity", _) => writable_phase,
        ("scratch-capacity", "commands-write") => case.commands,
        ("scratch-capacity", "codex-home-fill-bytes" | "codex-home-fill-inodes") => {
            case.vendor == Vendor::Codex
        }
        // A mountpoint never moves, and hard links never cross filesystems: only metadata that is
        // a plain directory of the writable tree can be moved or linked.
        ("metadata", "mv") | ("metadata-alias", "hardlink-config" | "hardlink-object") => {
            case.metadata_in_work && writable_phase
        }
        // A protection removed by dropping its mount: the mount is missing too.
        ("mounts", "mount-missing") => id == Id::GitlinkMasks || case.metadata_in_work,
        ("lockdown", "pid-namespace") => case.facet == Some("pid"),
        ("lockdown", "cgroup-namespace") => case.facet == Some("cgroup"),
        ("lockdown", "uts-namespace") => case.facet == Some("uts"),
        ("mounts", "mountpoint-set") => case.facet == Some("bind"),
        ("mounts", "devices") => case.facet == Some("device") || id == Id::NotPrivileged,
        _ => true,
    }
}

/// The breaches the probes must report in `case`, as `id/probe/action`.
pub fn expected(case: &Case) -> BTreeSet<String> {
    ops::all()
        .into_iter()
        .flat_map(|op| op.ids.iter().map(move |id| (op, *id)))
        .filter(|(op, id)| reached(op, *id, case))
        .map(|(op, id)| key(id, op.probe, op.action))
        .collect()
}

fn key(id: Id, probe: &str, action: &str) -> String {
    format!("{id}/{probe}/{action}")
}

/// What the probes reported: breaches as `id/probe/action`, errors as `error/probe: message`.
pub fn observed(stdout: &str) -> BTreeSet<String> {
    let reports = ProbeReport::parse_all(stdout);
    let mut seen = BTreeSet::new();
    for report in &reports {
        for breach in &report.breaches {
            seen.insert(key(breach.id, &report.probe, &breach.action));
        }
        for error in &report.errors {
            seen.insert(format!("error/{}: {error}", report.probe));
        }
    }
    let ran: BTreeSet<&str> = reports.iter().map(|r| r.probe.as_str()).collect();
    for probe in cordon_contract::probe::PROBES {
        if !ran.contains(probe) {
            seen.insert(format!("error/{probe}: no report"));
        }
    }
    seen
}

/// The work tree fixture (and, with `metadata`, the `.git` files inside it).
pub fn work_tar(hostile: bool, metadata: bool, uid: u32) -> Result<Vec<u8>> {
    let mut b = Archive::in_memory(uid, "the work tree fixture");
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    let mut files: Vec<(String, &str)> = fixture::WORK_FILES
        .iter()
        .map(|(p, c)| ((*p).to_owned(), *c))
        .collect();
    if metadata {
        files.extend(
            fixture::METADATA_FILES
                .iter()
                .map(|(p, c)| (format!(".git/{p}"), *c)),
        );
    }
    let mut links: Vec<(&str, &str)> = fixture::BENIGN_LINKS.to_vec();
    if hostile {
        links.extend_from_slice(fixture::HOSTILE_LINKS);
    }
    let parents = files
        .iter()
        .map(|(p, _)| p.as_str())
        .chain(links.iter().map(|(p, _)| *p));
    for path in parents {
        let mut dir = std::path::Path::new(path).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(d.to_string_lossy().into_owned());
            dir = d.parent();
        }
    }
    dirs.extend(fixture::WORK_DIRS.iter().map(|d| (*d).to_owned()));
    for dir in &dirs {
        b.dir(format!("{dir}/"), 0o755)?;
    }
    for (path, content) in &files {
        b.file(path, 0o644, content.as_bytes())?;
    }
    for (path, target) in &links {
        b.symlink(path, target)?;
    }
    b.finish()
}

/// The probe fixture as a git repository, for the task seeder: the work files, the benign links,
/// the empty directories as gitlinks (a checkout's empty directories), and `probe/hello.txt`
/// whose blob is the loose object the metadata probes alias.
pub fn fixture_repository(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating the fixture repository", e))?;
    cordon::repo::git::own_repository(dir, &["init", "--quiet"])?;
    let mut files: Vec<(&str, &str)> = fixture::WORK_FILES.to_vec();
    files.push(("probe/hello.txt", "hello\n"));
    for (path, content) in files {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("fixture", e))?;
        }
        std::fs::write(&full, content).map_err(|e| Error::io("fixture", e))?;
    }
    for (path, target) in fixture::BENIGN_LINKS {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("fixture", e))?;
        }
        std::os::unix::fs::symlink(target, &full).map_err(|e| Error::io("fixture", e))?;
    }
    cordon::repo::git::own_repository(dir, &["add", "-A"])?;
    for empty in fixture::WORK_DIRS {
        let info = format!("160000,1234567890123456789012345678901234567890,{empty}");
        cordon::repo::git::own_repository(dir, &["update-index", "--add", "--cacheinfo", &info])?;
    }
    cordon::repo::git::own_repository(dir, &["commit", "--quiet", "-m", "cordon probe fixture"])?;
    Ok(())
}

/// The metadata fixture, for the metadata volume (paths relative to /work/.git).
pub fn metadata_tar(uid: u32) -> Result<Vec<u8>> {
    let mut b = Archive::in_memory(uid, "the metadata fixture");
    b.dir("objects/", 0o755)?;
    b.dir("objects/ce/", 0o755)?;
    for (path, content) in fixture::METADATA_FILES {
        b.file(path, 0o644, content.as_bytes())?;
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::cases;

    /// Every operation of every probe is expected to report its breach in some case: removing
    /// any one deny check from a probe turns that case red.
    #[test]
    fn every_operation_is_reached_by_some_case() {
        let all = cases::all();
        // The one exception, and why: see `reached` (its breach is a suite test).
        for op in ops::all()
            .iter()
            .filter(|op| op.action != ops::EXEC_VIA_INTERPRETER.action)
        {
            let reached_by: Vec<&str> = all
                .iter()
                .filter(|c| c.probe && op.ids.iter().any(|id| reached(op, *id, c)))
                .map(|c| c.name.as_str())
                .collect();
            assert!(
                !reached_by.is_empty(),
                "{}/{} is reached by no case",
                op.probe,
                op.action
            );
        }
    }

    /// C0 expects nothing; every other probe row expects a breach of what it removed, and only that.
    #[test]
    fn expectations_name_only_the_removed_protections() {
        for case in cases::all().iter().filter(|c| c.probe) {
            let expected = expected(case);
            match case.removed {
                None => assert!(expected.is_empty(), "{}", case.name),
                Some(_) => {
                    assert!(!expected.is_empty(), "{} expects no breach", case.name);
                    let removed: Vec<String> =
                        case.removed_all().iter().map(|i| format!("{i}/")).collect();
                    for e in &expected {
                        assert!(
                            removed.iter().any(|r| e.starts_with(r.as_str())),
                            "{}: {e}",
                            case.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn fixtures_build() {
        assert!(!work_tar(true, true, 1_500_000).unwrap().is_empty());
        assert!(!metadata_tar(1_500_000).unwrap().is_empty());
    }
}
