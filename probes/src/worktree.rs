//! `phase-worktree`: in planning, questions and review every form of write to /work fails; in
//! execute and fix /work can be written. Nothing can be written beneath a gitlink mask.

use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use cordon_contract::paths;
use cordon_contract::probe::ops;
use cordon_contract::Id;

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
}

pub fn run(p: &mut Probe<'_>) {
    if p.ctx.policy.phase.work_writable() {
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
    for mask in masks {
        let path = format!("{mask}/cordon-probe-{}", p.ctx.token);
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
    }
}
