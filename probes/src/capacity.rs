//! `scratch-capacity` and `task-capacity`: each bounded area stops a byte fill and a file fill at
//! its limit, and each fill proves it wrote something first (a fill that fails at once proves
//! nothing). The control and input dirs cannot be written, nor the egress socket dir.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use cordon_contract::paths;
use cordon_contract::policy::Role;
use cordon_contract::probe::{ops, Operation};
use cordon_contract::Vendor;

use crate::report::Probe;

const CHUNK: usize = 64 * 1024;
/// How far past the limit a fill goes before it calls the limit missing.
const SLACK_BYTES: u64 = 1024 * 1024;
const SLACK_FILES: u64 = 16;

/// Write until the area refuses or the limit is passed. Removes what it wrote.
fn fill_bytes(p: &mut Probe<'_>, op: &Operation, dir: &str, limit: u64) {
    if !p.runs(op) {
        return;
    }
    let path = format!("{dir}/cordon-fill-{}", p.ctx.token);
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            return p.error(format!(
                "{}: cannot create a fill file in {dir}: {e}",
                op.action
            ))
        }
    };
    let chunk = vec![0x5au8; CHUNK];
    let mut written: u64 = 0;
    while written <= limit + SLACK_BYTES {
        match file.write(&chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n as u64,
        }
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    if written == 0 {
        return p.error(format!(
            "{}: wrote nothing into {dir} before it stopped",
            op.action
        ));
    }
    if written > limit {
        p.found(
            op,
            op.id(),
            format!("wrote {written} bytes into {dir}, past its {limit}-byte limit"),
        );
    }
}

/// Create empty files until the area refuses or its inode limit is passed. Removes them.
fn fill_inodes(p: &mut Probe<'_>, op: &Operation, dir: &str, limit: u64) {
    if !p.runs(op) {
        return;
    }
    let mut created = Vec::new();
    while (created.len() as u64) <= limit + SLACK_FILES {
        let path = format!("{dir}/cordon-n-{}-{}", p.ctx.token, created.len());
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(_) => created.push(path),
            Err(_) => break,
        }
    }
    let count = created.len() as u64;
    for path in &created {
        let _ = std::fs::remove_file(path);
    }
    if count == 0 {
        return p.error(format!(
            "{}: created no file in {dir} before it stopped",
            op.action
        ));
    }
    if count >= limit {
        p.found(
            op,
            op.id(),
            format!("created {count} files in {dir}, past its {limit}-inode limit"),
        );
    }
}

/// The bounded area at `path` in the policy: (bytes, inodes). The last rule at a point is the
/// one the workload writes (an approved command's /work: the overlay over the covered volume).
fn area(p: &Probe<'_>, path: &str) -> Option<(u64, u64)> {
    p.ctx
        .policy
        .rules_for(path)
        .last()
        .and_then(|r| r.bounded)
        .map(|b| (b.bytes, b.inodes))
}

pub fn scratch(p: &mut Probe<'_>) {
    let mut areas = vec![
        (paths::TMP, &ops::TMP_BYTES, &ops::TMP_INODES),
        (paths::HOME, &ops::HOME_BYTES, &ops::HOME_INODES),
        (paths::OUTPUT_DIR, &ops::OUTPUT_BYTES, &ops::OUTPUT_INODES),
    ];
    if p.ctx.policy.vendor == Vendor::Codex {
        areas.push((
            paths::CODEX_HOME,
            &ops::CODEX_HOME_BYTES,
            &ops::CODEX_HOME_INODES,
        ));
    }
    // An approved command's container has /tmp alone of these.
    let command = p.ctx.policy.role == Role::Command;
    for (dir, bytes_op, inodes_op) in areas {
        if command && p.ctx.policy.rule_for(dir).is_none() {
            continue;
        }
        let Some((bytes, inodes)) = area(p, dir) else {
            p.error(format!("the policy bounds no area at {dir}"));
            continue;
        };
        fill_bytes(p, bytes_op, dir, bytes);
        fill_inodes(p, inodes_op, dir, inodes);
    }
    let token = p.ctx.token.clone();
    let mut dirs = vec![
        (&ops::CONTROL_WRITE, paths::CONTROL_DIR),
        (&ops::INPUT_WRITE, paths::INPUT_DIR),
        (&ops::EGRESS_WRITE, paths::EGRESS_DIR),
    ];
    // The approved commands' socket dir exists only where the agent is offered commands.
    let commands = cordon_contract::command::SOCKET_DIR;
    if p.ctx.policy.rule_for(commands).is_some() {
        dirs.push((&ops::COMMANDS_WRITE, commands));
    }
    for (op, dir) in dirs {
        let forged = format!("{dir}/forged-{token}");
        if p.deny(op, &format!("create a file in {dir}"), || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&forged)
        }) {
            let _ = std::fs::remove_file(&forged);
        }
    }
    p.deny(&ops::CONTROL_WRITE, "open the policy for writing", || {
        OpenOptions::new().write(true).open(paths::POLICY_FILE)
    });
    let socket = format!("{}/agent-{token}.sock", paths::EGRESS_DIR);
    if p.deny(
        &ops::EGRESS_WRITE,
        "bind a unix socket in the egress dir",
        || std::os::unix::net::UnixListener::bind(&socket),
    ) {
        let _ = std::fs::remove_file(&socket);
    }
}

pub fn task(p: &mut Probe<'_>) {
    if !p.ctx.work_writable {
        return;
    }
    let Some((bytes, inodes)) = area(p, paths::WORK) else {
        return p.error("the policy bounds no work area");
    };
    fill_bytes(p, &ops::WORK_BYTES, paths::WORK, bytes);
    fill_inodes(p, &ops::WORK_INODES, paths::WORK, inodes);
}
