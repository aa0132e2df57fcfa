//! `metadata-alias` and `metadata`: Git metadata cannot be changed in any phase, directly or
//! through an alias (a hard link, a symlink in a writable area), cannot be removed or moved, and
//! its digest is the same before and after. `all` runs the alias probe first: `metadata` removes
//! what it can when the protection is missing.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use cordon_contract::paths;
use cordon_contract::probe::{fixture, ops, Operation};
use sha2::{Digest, Sha256};

use crate::report::Probe;

fn git(path: &str) -> String {
    format!("{}/{path}", paths::METADATA)
}

/// sha256 over every entry's path, type and content, read without following links.
pub fn digest(root: &str) -> Result<String, String> {
    let mut entries = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let listing = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
        for entry in listing {
            let entry = entry.map_err(|e| format!("{dir}: {e}"))?;
            let path = entry.path().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{path}: {e}"))?;
            if meta.is_dir() {
                stack.push(path.clone());
                entries.push(format!("d {path}"));
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| format!("{path}: {e}"))?;
                entries.push(format!("l {path} {}", target.to_string_lossy()));
            } else {
                let mut content = Vec::new();
                OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .and_then(|mut f| f.read_to_end(&mut content))
                    .map_err(|e| format!("{path}: {e}"))?;
                entries.push(format!(
                    "f {path} {} {}",
                    content.len(),
                    hex::encode(Sha256::digest(&content))
                ));
            }
        }
    }
    entries.sort();
    Ok(hex::encode(Sha256::digest(entries.join("\n").as_bytes())))
}

/// The writable scratch areas an alias can be made in: /tmp, and HOME where the policy mounts
/// one (an approved command's HOME is its /tmp).
fn scratch_dirs(p: &Probe<'_>) -> Vec<&'static str> {
    [paths::TMP, paths::HOME]
        .into_iter()
        .filter(|d| p.ctx.policy.rule_for(d).is_some_and(|r| r.writable()))
        .collect()
}

fn alias_targets(p: &Probe<'_>, name: &str) -> Vec<String> {
    std::iter::once(paths::WORK)
        .chain(scratch_dirs(p))
        .map(|dir| format!("{dir}/{name}-{}", p.ctx.token))
        .collect()
}

fn hardlinks(p: &mut Probe<'_>, op: &Operation, source: &str, name: &str) {
    for target in alias_targets(p, name) {
        if p.deny(op, &format!("hard link {source} to {target}"), || {
            std::fs::hard_link(source, &target)
        }) {
            let _ = std::fs::remove_file(&target);
        }
    }
}

/// A symlink in a writable area pointing into the metadata, then an append through it.
fn symlink_append(p: &mut Probe<'_>, op: &Operation, source: &str, name: &str) {
    for dir in scratch_dirs(p) {
        let alias = format!("{dir}/{name}-{}", p.ctx.token);
        if let Err(e) = std::os::unix::fs::symlink(source, &alias) {
            p.error(format!(
                "cannot create the alias {alias} in a writable area: {e}"
            ));
            continue;
        }
        // Git keeps objects 0444; the agent owns them, so it makes one writable first.
        p.deny(op, &format!("append to {source} through {alias}"), || {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&alias, std::fs::Permissions::from_mode(0o644));
            OpenOptions::new().append(true).open(&alias)
        });
        let _ = std::fs::remove_file(&alias);
    }
}

pub fn alias(p: &mut Probe<'_>) {
    let config = git("config");
    let object = git(fixture::METADATA_OBJECT);
    for path in [&config, &object] {
        if std::fs::symlink_metadata(path).is_err() {
            p.error(format!(
                "fixture {path} is missing: the alias checks would prove nothing"
            ));
        }
    }
    hardlinks(p, &ops::ALIAS_HARDLINK_CONFIG, &config, "config-link");
    hardlinks(p, &ops::ALIAS_HARDLINK_OBJECT, &object, "object-link");
    symlink_append(p, &ops::ALIAS_APPEND_CONFIG, &config, "config-alias");
    symlink_append(p, &ops::ALIAS_APPEND_OBJECT, &object, "object-alias");
    p.deny(
        &ops::ALIAS_OVERWRITE_CONFIG,
        "overwrite .git/config",
        || {
            OpenOptions::new()
                .write(true)
                .open(&config)?
                .write_all(b"[cordon-probe]\n")
        },
    );
    p.deny(&ops::ALIAS_TRUNCATE_CONFIG, "truncate .git/config", || {
        OpenOptions::new().write(true).open(&config)?.set_len(0)
    });
}

/// Remove everything beneath `dir` (rm -rf), deepest first; true if anything went.
fn remove_all(dir: &str) -> std::io::Result<()> {
    let mut removed = false;
    let mut last_error = None;
    let mut stack = vec![(dir.to_owned(), false)];
    while let Some((path, visited)) = stack.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                last_error = Some(e);
                continue;
            }
        };
        if meta.is_dir() && !visited {
            stack.push((path.clone(), true));
            if let Ok(listing) = std::fs::read_dir(&path) {
                for entry in listing.flatten() {
                    stack.push((entry.path().to_string_lossy().into_owned(), false));
                }
            }
            continue;
        }
        let result = if meta.is_dir() {
            std::fs::remove_dir(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match result {
            Ok(()) => removed = true,
            Err(e) => last_error = Some(e),
        }
    }
    if removed {
        Ok(())
    } else {
        Err(last_error.unwrap_or_else(|| std::io::Error::other("nothing to remove")))
    }
}

pub fn run(p: &mut Probe<'_>) {
    let before = match digest(paths::METADATA) {
        Ok(d) => d,
        Err(e) => return p.error(format!("metadata digest: {e}")),
    };
    let token = p.ctx.token.clone();
    let created = git(&format!("cordon-probe-{token}"));
    p.deny(&ops::METADATA_CREATE, "create a file in .git", || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&created)
    });
    p.deny(
        &ops::METADATA_APPEND,
        "open .git/config for appending",
        || OpenOptions::new().append(true).open(git("config")),
    );
    p.deny(&ops::METADATA_MKDIR, "mkdir in .git", || {
        std::fs::create_dir(git(&format!("dir-{token}")))
    });
    for target in [
        format!("{}/.git-moved-{token}", paths::WORK),
        format!("{}/git-{token}", paths::TMP),
    ] {
        if p.deny(
            &ops::METADATA_MOVE,
            &format!("mv /work/.git {target}"),
            || std::fs::rename(paths::METADATA, &target),
        ) {
            // Put it back, so the removal below is tried on the real thing.
            let _ = std::fs::rename(&target, paths::METADATA);
        }
    }
    p.deny(&ops::METADATA_REMOVE, "rm -rf /work/.git", || {
        remove_all(paths::METADATA)
    });
    let after = digest(paths::METADATA).unwrap_or_else(|e| format!("unreadable: {e}"));
    p.require(&ops::METADATA_DIGEST, after == before, || {
        format!("metadata digest {before} became {after}")
    });
}
