//! The controller-owned copy of the task's git metadata: unpacked from the engine's archive of
//! /work/.git (entries `.git/...`), digested exactly as the seeder's `cordon-init digest` did
//! (init/src/digest.rs), hardened so nothing of the copy's own configuration applies, and then
//! the only repository hardened git ever reads for the audit (base's ignore rules and tree).
//!
//! Nothing here follows a link or writes through one: the archive may hold only directories and
//! regular files with clean names, each created new in a fresh directory of the controller's.

use std::collections::HashSet;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use cordon_contract::audit::{IgnoreFile, IgnoreRules, MAX_IGNORE_FILES, MAX_IGNORE_RULES_BYTES};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::git::{Git, Input};

/// The prefix of every entry of the engine's archive of /work/.git.
const PREFIX: &str = ".git";
/// The configuration the copy gets instead of its own.
pub const CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n";
/// Base's tree listing (`ls-tree -r -t -z -l`) is read up to this many bytes.
pub const MAX_TREE_LISTING_BYTES: usize = 128 * 1024 * 1024;
/// Base's tree holds at most this many entries for the audit (files, links, gitlinks and
/// directories).
pub const MAX_BASE_PATHS: usize = 1_000_000;

/// A controller-owned scratch directory (`cordon-audit-*` under the temp dir): the metadata's
/// copy and git's HOME. Removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    pub fn new() -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let root = std::env::temp_dir().join(format!("cordon-audit-{}", uuid::Uuid::new_v4()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        let scratch = Scratch { root };
        for dir in ["home", "git"] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(scratch.root.join(dir))
                .map_err(|e| Error::io(format!("creating the scratch {dir}"), e))?;
        }
        Ok(scratch)
    }

    /// A copy of its own that borrows the objects of `kept`, a copy as seeded (extracted and
    /// hardened) that git only reads (git's alternates): base's objects are read from `kept`,
    /// and everything git writes goes here, never there. Its configuration is [`CONFIG`]; of
    /// `kept` it takes only the objects and the `shallow` list (base's history may be cut).
    pub fn borrowing(kept: &Path) -> Result<Self> {
        let scratch = Scratch::new()?;
        let git = scratch.git_dir();
        for dir in [
            "objects",
            "objects/info",
            "objects/pack",
            "refs",
            "refs/heads",
            "refs/tags",
        ] {
            DirBuilder::new()
                .mode(0o700)
                .create(git.join(dir))
                .map_err(|e| Error::io(format!("creating the scratch {dir}"), e))?;
        }
        let objects = kept.join("objects");
        let objects = objects
            .to_str()
            .filter(|p| objects.is_absolute() && !p.contains(['\n', '\r']))
            .ok_or_else(|| {
                Error::Internal(format!(
                    "{}: not an absolute one-line path",
                    objects.display()
                ))
            })?;
        for (name, text) in [
            ("HEAD", "ref: refs/heads/cordon\n".to_owned()),
            ("config", CONFIG.to_owned()),
            ("objects/info/alternates", format!("{objects}\n")),
        ] {
            create_private(&git.join(name))?
                .write_all(text.as_bytes())
                .map_err(|e| Error::io(format!("writing the scratch {name}"), e))?;
        }
        match std::fs::symlink_metadata(kept.join("shallow")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("reading the kept shallow list", e)),
            Ok(meta) if meta.is_file() => {
                std::fs::copy(kept.join("shallow"), git.join("shallow"))
                    .map_err(|e| Error::io("copying the kept shallow list", e))?;
            }
            Ok(_) => {
                return Err(Error::Internal(
                    "the kept copy's shallow list is not a file".into(),
                ))
            }
        }
        Ok(scratch)
    }

    /// The metadata's copy (made by [`extract_metadata`]).
    pub fn git_dir(&self) -> PathBuf {
        self.root.join("git")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Hardened git on the copy, bounded by `deadline`.
    pub fn git(&self, deadline: Instant) -> Git {
        Git {
            git_dir: self.git_dir(),
            home: self.root.join("home"),
            deadline,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The bounds of one metadata archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries, the `.git/` root included.
    pub entries: u64,
    /// Bytes of file content in all.
    pub bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: 200_000,
            bytes: 2 * 1024 * 1024 * 1024,
        }
    }
}

/// Unpack the metadata archive `tar` into `into` (an existing, empty directory of the
/// controller's) with the default [`Limits`]; the digest `cordon-init digest` gives over the
/// same tree.
pub fn extract_metadata(tar: impl Read, into: &Path) -> Result<String> {
    extract_metadata_bounded(tar, into, Limits::default())
}

/// [`extract_metadata`] with explicit bounds.
///
/// Only directories and regular files whose names are clean relative paths under `.git/` are
/// taken (the prefix stripped); every other entry type, an unclean or non-UTF-8 name, an entry
/// whose directory came in no earlier entry, a name given twice, or more than `limits` refuses
/// the whole archive ([`Error::ForeignMetadata`]). Files are created new, never through a link, owner
/// read-write only (directories owner-only); the digest comes from the headers' modes and sizes
/// and the content as read, so it is the tree's as the container held it.
pub fn extract_metadata_bounded(tar: impl Read, into: &Path, limits: Limits) -> Result<String> {
    let meta = std::fs::symlink_metadata(into)
        .map_err(|e| Error::io(format!("reading {}", into.display()), e))?;
    if !meta.is_dir() {
        return Err(Error::Invalid(format!(
            "{} is not a directory",
            into.display()
        )));
    }
    let mut listing =
        std::fs::read_dir(into).map_err(|e| Error::io(format!("listing {}", into.display()), e))?;
    if listing.next().is_some() {
        return Err(Error::Invalid(format!(
            "{} is not empty: the metadata is unpacked only into a fresh directory",
            into.display()
        )));
    }

    let bad = |what: String| Error::ForeignMetadata(format!("the metadata archive: {what}"));
    let read_err = |e: std::io::Error| Error::io("reading the metadata archive", e);
    let mut archive = tar::Archive::new(tar);
    let mut lines = Vec::new();
    // Directories made so far ("" is `into` itself).
    let mut dirs: HashSet<String> = HashSet::from([String::new()]);
    let mut files: HashSet<String> = HashSet::new();
    let mut entries = 0u64;
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    for entry in archive.entries().map_err(read_err)? {
        let mut entry = entry.map_err(read_err)?;
        entries += 1;
        if entries > limits.entries {
            return Err(bad(format!("more than {} entries", limits.entries)));
        }
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        let is_dir = kind == tar::EntryType::Directory;
        if !is_dir && kind != tar::EntryType::Regular {
            return Err(bad(format!("{shown:?} is a {kind:?} entry")));
        }
        let rel = clean_name(&raw, is_dir).map_err(|why| bad(format!("{shown:?}: {why}")))?;
        let Some(rel) = rel else {
            // The `.git/` root itself: the digest covers what is beneath it.
            if !is_dir {
                return Err(bad(format!("{shown:?} is not a directory")));
            }
            continue;
        };
        let parent = rel.rfind('/').map_or("", |i| &rel[..i]);
        if !dirs.contains(parent) {
            return Err(bad(format!("{shown:?} comes before its directory")));
        }
        if dirs.contains(&rel) || files.contains(&rel) {
            return Err(bad(format!("{shown:?} is given twice")));
        }
        let mode = entry
            .header()
            .mode()
            .map_err(|e| bad(format!("{shown:?}: {e}")))?
            & 0o7777;
        let path = into.join(&rel);
        if is_dir {
            DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
            lines.push(format!("d {mode:o} {rel}"));
            dirs.insert(rel);
            continue;
        }
        let size = entry.size();
        if size > limits.bytes.saturating_sub(bytes) {
            return Err(bad(format!("more than {} bytes of content", limits.bytes)));
        }
        bytes += size;
        let mut file = create_private(&path)?;
        let mut hasher = Sha256::new();
        let mut read = 0u64;
        loop {
            let n = entry.read(&mut buf).map_err(read_err)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        }
        if read != size {
            return Err(bad(format!("{shown:?} ends after {read} of {size} bytes")));
        }
        lines.push(format!(
            "f {mode:o} {size} {rel} {}",
            hex::encode(hasher.finalize())
        ));
        files.insert(rel);
    }
    Ok(digest_lines(lines))
}

/// The digest over `lines` exactly as init/src/digest.rs makes it: sorted, each followed by a
/// newline, sha256, `sha256:` and hex.
fn digest_lines(mut lines: Vec<String>) -> String {
    lines.sort();
    let mut hasher = Sha256::new();
    for line in &lines {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// An archive name as a path relative to `.git` (`None`: the root itself), or why it is not
/// clean. A directory's name may end with one `/`.
fn clean_name(raw: &[u8], is_dir: bool) -> std::result::Result<Option<String>, &'static str> {
    if raw.contains(&0) {
        return Err("holds NUL");
    }
    let text = std::str::from_utf8(raw).map_err(|_| "is not UTF-8")?;
    let text = match text.strip_suffix('/') {
        Some(rest) if is_dir => rest,
        Some(_) => return Err("a file name ends with /"),
        None => text,
    };
    if text.starts_with('/') {
        return Err("is absolute");
    }
    let rest = match text.strip_prefix(PREFIX) {
        Some("") => return Ok(None),
        Some(rest) => rest.strip_prefix('/').ok_or("is not under .git/")?,
        None => return Err("is not under .git/"),
    };
    for part in rest.split('/') {
        match part {
            "" => return Err("has an empty part"),
            "." | ".." => return Err("has a . or .. part"),
            _ => {}
        }
    }
    Ok(Some(rest.to_owned()))
}

/// Make the unpacked copy at `git_dir` cordon's: its configuration replaced by [`CONFIG`], and
/// its hooks, `info/` (attributes, excludes, grafts), alternates, `commondir` and any
/// `index.lock` removed, so nothing of the copy's own configuration applies to git on it.
pub fn harden(git_dir: &Path) -> Result<()> {
    for name in [
        "config",
        "hooks",
        "info",
        "index.lock",
        "commondir",
        "objects/info/alternates",
        "objects/info/http-alternates",
    ] {
        remove(&git_dir.join(name))?;
    }
    let path = git_dir.join("config");
    let mut file = create_private(&path)?;
    file.write_all(CONFIG.as_bytes())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Remove whatever is at `path` (a directory with all beneath it), without following a link.
/// A new file of the controller's own, owner read-write only: never one already there, never
/// through a link at `path`.
pub(crate) fn create_private(path: &Path) -> Result<std::fs::File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))
}

fn remove(path: &Path) -> Result<()> {
    let result = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    result.map_err(|e| Error::io(format!("removing {}", path.display()), e))
}

/// A full object id (sha1 or sha256, lowercase hex): anything else is refused before it reaches
/// git's command line.
pub fn object_id(id: &str) -> Result<&str> {
    let hex = id
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex && (id.len() == 40 || id.len() == 64) {
        Ok(id)
    } else {
        Err(Error::Invalid(format!(
            "{id:?} is not a full object id (lowercase hex)"
        )))
    }
}

/// Whether `base` names a commit in the copy.
pub async fn is_commit(git: &Git, base: &str) -> Result<bool> {
    let base = object_id(base)?;
    match git
        .run("cat-file -t", &["cat-file", "-t", "--end-of-options", base])
        .await
    {
        Ok(out) => Ok(out == b"commit\n"),
        // Missing or unreadable: not a commit (the deadline and I/O still fail).
        Err(Error::Git { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One entry of base's tree listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// `100644`, `100755`, `120000`, `160000` or `040000`.
    pub mode: String,
    /// `blob`, `tree` or `commit`.
    pub kind: String,
    pub id: String,
    /// A blob's size (none for a tree or gitlink).
    pub size: Option<u64>,
    pub path: String,
}

/// Every entry of `base`'s tree, directories included, in git's order: at most
/// [`MAX_BASE_PATHS`], a name that is not UTF-8 refused (the blob ids a commit's hard-linked
/// content resolves to come from here).
pub async fn list_tree(git: &Git, base: &str) -> Result<Vec<TreeEntry>> {
    let base = object_id(base)?;
    let (out, truncated) = git
        .run_bounded(
            "ls-tree",
            &[
                "ls-tree",
                "-r",
                "-t",
                "-z",
                "-l",
                "--full-tree",
                "--end-of-options",
                base,
            ],
            Input::None,
            MAX_TREE_LISTING_BYTES,
        )
        .await?;
    if truncated {
        return Err(Error::Invalid(format!(
            "base's tree listing is larger than {MAX_TREE_LISTING_BYTES} bytes"
        )));
    }
    let mut entries = Vec::new();
    for record in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        if entries.len() >= MAX_BASE_PATHS {
            return Err(Error::Invalid(format!(
                "base's tree holds more than {MAX_BASE_PATHS} entries"
            )));
        }
        entries.push(parse_entry(record)?);
    }
    Ok(entries)
}

/// `<mode> SP <type> SP <id> SP+ <size> TAB <path>`.
fn parse_entry(record: &[u8]) -> Result<TreeEntry> {
    let bad = || {
        Error::Internal(format!(
            "git ls-tree: unreadable entry {:?}",
            String::from_utf8_lossy(&record[..record.len().min(200)])
        ))
    };
    let tab = record.iter().position(|&b| b == b'\t').ok_or_else(bad)?;
    let head = std::str::from_utf8(&record[..tab]).map_err(|_| bad())?;
    let path = std::str::from_utf8(&record[tab + 1..])
        .map_err(|_| {
            Error::Invalid(format!(
                "base's tree holds a name that is not UTF-8: {:?}",
                String::from_utf8_lossy(&record[tab + 1..])
            ))
        })?
        .to_owned();
    let mut parts = head.split_whitespace();
    let (Some(mode), Some(kind), Some(id), Some(size), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad());
    };
    let size = match size {
        "-" => None,
        n => Some(n.parse().map_err(|_| bad())?),
    };
    Ok(TreeEntry {
        mode: mode.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        size,
        path,
    })
}

/// Every path of `base`'s tree with its mode (`100644`, `100755`, `120000`, `160000`, and
/// `040000` for a directory), in git's order; at most [`MAX_BASE_PATHS`], and a name that is not
/// UTF-8 refused.
pub async fn base_paths(git: &Git, base: &str) -> Result<Vec<(String, String)>> {
    Ok(list_tree(git, base)
        .await?
        .into_iter()
        .map(|e| (e.path, e.mode))
        .collect())
}

/// The most bytes of link targets [`base_for_rules`] reads (each at most 4,095 bytes).
pub const MAX_LINK_TARGET_BYTES: u64 = 64 * 1024 * 1024;

/// Base's tree as the commit's rules read it ([`super::paths::Base`]): every path with its mode,
/// and, when `with_links`, every link's target (one `cat-file --batch`; a target over 4,095
/// bytes, or more than [`MAX_LINK_TARGET_BYTES`] in all, is refused).
pub async fn base_for_rules(git: &Git, base: &str, with_links: bool) -> Result<super::paths::Base> {
    let listed = list_tree(git, base).await?;
    base_for_rules_listed(git, &listed, with_links).await
}

/// As [`base_for_rules`], from base's tree as [`list_tree`] listed it (a caller that needs the
/// listing too lists a 131,072-entry tree once, not twice: 0.25 s each).
pub async fn base_for_rules_listed(
    git: &Git,
    listed: &[TreeEntry],
    with_links: bool,
) -> Result<super::paths::Base> {
    let mut links = std::collections::BTreeMap::new();
    let wanted: Vec<&TreeEntry> = listed
        .iter()
        .filter(|e| with_links && e.mode == "120000" && e.kind == "blob")
        .collect();
    if !wanted.is_empty() {
        let total: u64 = wanted.iter().map(|e| e.size.unwrap_or(0)).sum();
        if total > MAX_LINK_TARGET_BYTES {
            return Err(Error::Invalid(format!(
                "base's link targets take {total} bytes: at most {MAX_LINK_TARGET_BYTES} are read"
            )));
        }
        let blobs = read_blobs(git, &wanted).await?;
        for (e, target) in wanted.iter().zip(blobs) {
            if target.len() > crate::clone::MAX_LINK_TARGET {
                return Err(Error::Invalid(format!(
                    "base's link {:?} has a target of {} bytes",
                    e.path,
                    target.len()
                )));
            }
            links.insert(e.path.as_bytes().to_vec(), target.to_vec());
        }
    }
    Ok(super::paths::Base {
        entries: listed
            .iter()
            .map(|e| (e.path.clone(), e.mode.clone()))
            .collect(),
        links,
    })
}

/// Base's own ignore rules: the text of every `.gitignore` blob of `base`'s tree (a regular
/// file: git reads no rules through a symlinked `.gitignore`), by its directory. More than
/// [`MAX_IGNORE_FILES`] files, more than [`MAX_IGNORE_RULES_BYTES`] of JSON, or text that is not
/// UTF-8 is refused.
pub async fn ignore_rules(git: &Git, base: &str) -> Result<IgnoreRules> {
    ignore_rules_listed(git, &list_tree(git, base).await?).await
}

/// As [`ignore_rules`], from base's tree as [`list_tree`] listed it.
pub async fn ignore_rules_listed(git: &Git, listed: &[TreeEntry]) -> Result<IgnoreRules> {
    let found: Vec<TreeEntry> = listed
        .iter()
        .filter(|e| {
            e.kind == "blob"
                && (e.mode == "100644" || e.mode == "100755")
                && (e.path == ".gitignore" || e.path.ends_with("/.gitignore"))
        })
        .cloned()
        .collect();
    if found.len() > MAX_IGNORE_FILES {
        return Err(Error::Invalid(format!(
            "base holds {} .gitignore files: at most {MAX_IGNORE_FILES} are read",
            found.len()
        )));
    }
    let total: u64 = found.iter().map(|e| e.size.unwrap_or(0)).sum();
    if total > MAX_IGNORE_RULES_BYTES as u64 {
        return Err(too_much_rules(total));
    }
    let mut files = Vec::with_capacity(found.len());
    if !found.is_empty() {
        let found_refs: Vec<&TreeEntry> = found.iter().collect();
        let blobs = read_blobs(git, &found_refs).await?;
        for (e, text) in found.iter().zip(blobs) {
            let text = String::from_utf8(text).map_err(|_| {
                Error::Invalid(format!(
                    "base's {} is not UTF-8: its rules cannot be passed on",
                    e.path
                ))
            })?;
            let dir = e.path.rfind('/').map_or("", |i| &e.path[..i]).to_owned();
            files.push(IgnoreFile { dir, text });
        }
    }
    let rules = IgnoreRules { files };
    let json = serde_json::to_vec(&rules)
        .map_err(|e| Error::Internal(format!("the ignore rules as JSON: {e}")))?;
    if json.len() > MAX_IGNORE_RULES_BYTES {
        return Err(too_much_rules(json.len() as u64));
    }
    Ok(rules)
}

fn too_much_rules(bytes: u64) -> Error {
    Error::Invalid(format!(
        "base's .gitignore rules take {bytes} bytes: at most {MAX_IGNORE_RULES_BYTES} bytes of \
         JSON are passed on"
    ))
}

/// The content of each blob of `entries`, in their order, with one `git cat-file --batch` (the
/// caller bounds their sizes from the listing first).
async fn read_blobs(git: &Git, entries: &[&TreeEntry]) -> Result<Vec<Vec<u8>>> {
    let mut input = Vec::new();
    for e in entries {
        input.extend_from_slice(e.id.as_bytes());
        input.push(b'\n');
    }
    let out = git
        .run_with_input(
            "cat-file --batch",
            &["cat-file", "--batch"],
            Input::Bytes(input),
        )
        .await?;
    let mut rest = &out[..];
    let mut blobs = Vec::with_capacity(entries.len());
    for e in entries {
        let (content, after) = batch_blob(rest, &e.id)?;
        rest = after;
        blobs.push(content.to_vec());
    }
    Ok(blobs)
}

/// One `<id> blob <size>\n<content>\n` of `cat-file --batch`, and what follows it.
fn batch_blob<'a>(out: &'a [u8], id: &str) -> Result<(&'a [u8], &'a [u8])> {
    let bad = || Error::Internal(format!("git cat-file --batch: unreadable answer for {id}"));
    let nl = out.iter().position(|&b| b == b'\n').ok_or_else(bad)?;
    let head = std::str::from_utf8(&out[..nl]).map_err(|_| bad())?;
    let mut parts = head.split(' ');
    let (Some(got), Some("blob"), Some(size), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if got != id {
        return Err(bad());
    }
    let size: usize = size.parse().map_err(|_| bad())?;
    let start = nl + 1;
    let end = start.checked_add(size).ok_or_else(bad)?;
    if out.len() < end + 1 || out[end] != b'\n' {
        return Err(bad());
    }
    Ok((&out[start..end], &out[end + 1..]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// A temp dir `cordon-test-audit-*`, removed when dropped (even when a test panics).
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(what: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "cordon-test-audit-{what}-{}",
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir(&dir).expect("temp dir");
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Trusted, test-only git in `dir` (a working copy), identities fixed by env.
    pub(crate) fn git_in(dir: &Path, args: &[&str]) -> Vec<u8> {
        let out = Command::new("git")
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "A U Thor")
            .env("GIT_AUTHOR_EMAIL", "author@example.com")
            .env("GIT_AUTHOR_DATE", "1700000000 +0000")
            .env("GIT_COMMITTER_NAME", "C O Mitter")
            .env("GIT_COMMITTER_EMAIL", "committer@example.com")
            .env("GIT_COMMITTER_DATE", "1700000100 +0100")
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// init/src/digest.rs's algorithm, copied: the tree under `root`, no link followed.
    pub(crate) fn reference_digest(root: &Path) -> String {
        let mut lines = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("list") {
                let path = entry.expect("entry").path();
                let rel = path
                    .strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned();
                let meta = std::fs::symlink_metadata(&path).expect("meta");
                let kind = meta.file_type();
                let mode = meta.mode() & 0o7777;
                let line = if kind.is_dir() {
                    stack.push(path);
                    format!("d {mode:o} {rel}")
                } else if kind.is_symlink() {
                    let target = std::fs::read_link(&path).expect("link");
                    format!("l {rel} -> {}", target.to_string_lossy())
                } else if kind.is_file() {
                    let bytes = std::fs::read(&path).expect("read");
                    format!(
                        "f {mode:o} {} {rel} {}",
                        meta.len(),
                        hex::encode(Sha256::digest(&bytes))
                    )
                } else {
                    format!("s {mode:o} {rel}")
                };
                lines.push(line);
            }
        }
        digest_lines(lines)
    }

    /// The archive the engine gives of `dir` as `name`: a `name/` root entry, then the tree,
    /// directories before what they hold, modes as on disk (links kept as links).
    pub(crate) fn docker_tar(dir: &Path, name: &str) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        builder.follow_symlinks(false);
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        builder
            .append_data(&mut header, format!("{name}/"), std::io::empty())
            .expect("root");
        add_tree(
            &mut builder,
            dir,
            name,
            &mut std::collections::HashMap::new(),
        );
        builder.into_inner().expect("tar")
    }

    /// A second name of an inode is a hard link to the first (as the engine writes it).
    fn add_tree(
        builder: &mut tar::Builder<Vec<u8>>,
        dir: &Path,
        name: &str,
        inodes: &mut std::collections::HashMap<(u64, u64), String>,
    ) {
        let mut listing: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").path())
            .collect();
        listing.sort();
        for path in listing {
            let file_name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let entry_name = format!("{name}/{file_name}");
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            let mut header = tar::Header::new_gnu();
            header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
            if meta.is_dir() {
                header.set_size(0);
                builder
                    .append_data(&mut header, format!("{entry_name}/"), std::io::empty())
                    .expect("dir");
                add_tree(builder, &path, &entry_name, inodes);
            } else if meta.file_type().is_symlink() {
                header.set_size(0);
                let target = std::fs::read_link(&path).expect("link");
                builder
                    .append_link(&mut header, &entry_name, target)
                    .expect("link");
            } else if let Some(first) = (meta.nlink() > 1)
                .then(|| inodes.get(&(meta.dev(), meta.ino())))
                .flatten()
            {
                header.set_entry_type(tar::EntryType::Link);
                header.set_size(0);
                builder
                    .append_link(&mut header, &entry_name, first)
                    .expect("hard link");
            } else {
                inodes.insert((meta.dev(), meta.ino()), entry_name.clone());
                let file = std::fs::File::open(&path).expect("open");
                builder
                    .append_data(&mut header, &entry_name, file)
                    .expect("file");
            }
        }
    }

    /// A small repository of trusted git: two commits, a nested `.gitignore`, a tag.
    pub(crate) fn sample_repo(root: &Path) -> PathBuf {
        let work = root.join("work");
        std::fs::create_dir(&work).expect("work");
        git_in(&work, &["init", "-q"]);
        std::fs::write(work.join(".gitignore"), "target/\n*.log\n").expect("write");
        std::fs::create_dir_all(work.join("src/deep")).expect("mkdir");
        std::fs::write(work.join("src/.gitignore"), "*.tmp\n").expect("write");
        std::fs::write(work.join("src/main.rs"), "fn main() {}\n").expect("write");
        std::fs::write(work.join("src/deep/ünï.txt"), "non-ASCII name\n").expect("write");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "first"]);
        std::fs::write(work.join("README"), "hello\n").expect("write");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "second"]);
        git_in(&work, &["tag", "v1"]);
        work
    }

    pub(crate) fn head_of(work: &Path) -> String {
        String::from_utf8(git_in(work, &["rev-parse", "HEAD"]))
            .expect("utf8")
            .trim()
            .to_owned()
    }

    /// A scratch copy of `work`'s metadata, unpacked and hardened, with its hardened git.
    pub(crate) fn scratch_of(root: &Path, work: &Path) -> (Git, String) {
        let copy = root.join("copy");
        std::fs::create_dir(&copy).expect("copy");
        let home = root.join("home");
        std::fs::create_dir(&home).expect("home");
        let tar = docker_tar(&work.join(".git"), ".git");
        let digest = extract_metadata(&tar[..], &copy).expect("extract");
        harden(&copy).expect("harden");
        let git = Git {
            git_dir: copy,
            home,
            deadline: Instant::now() + Duration::from_secs(120),
        };
        (git, digest)
    }

    #[test]
    fn the_digest_of_the_archive_is_the_seeders_over_the_tree() {
        let tmp = TempDir::new("digest");
        let work = sample_repo(&tmp.0);
        let git_dir = work.join(".git");
        // A mode the seeder's walk shows (setgid, as a shared repository has) counts too.
        std::fs::set_permissions(
            git_dir.join("refs"),
            std::os::unix::fs::PermissionsExt::from_mode(0o2775),
        )
        .expect("chmod");
        let tar = docker_tar(&git_dir, ".git");
        let into = tmp.0.join("copy");
        std::fs::create_dir(&into).expect("copy");
        let digest = extract_metadata(&tar[..], &into).expect("extract");
        assert_eq!(digest, reference_digest(&git_dir));
        // What was unpacked is the same tree (names, sizes, content).
        let names = |root: &Path| {
            let mut all = Vec::new();
            let mut stack = vec![root.to_path_buf()];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(&dir).expect("list") {
                    let p = e.expect("e").path();
                    let rel = p.strip_prefix(root).expect("rel").to_path_buf();
                    if p.is_dir() {
                        stack.push(p);
                        all.push((rel, None));
                    } else {
                        all.push((rel, Some(std::fs::read(&p).expect("read"))));
                    }
                }
            }
            all.sort();
            all
        };
        assert_eq!(names(&into), names(&git_dir));
        // A changed byte changes the digest.
        std::fs::write(git_dir.join("description"), "changed\n").expect("write");
        assert_ne!(digest, reference_digest(&git_dir));
        // Unpacking needs a fresh, empty directory: cordon's own mistake, not the metadata's
        // changing (the inspection reads only ForeignMetadata as that).
        let again = extract_metadata(&tar[..], &into);
        assert!(matches!(again, Err(Error::Invalid(_))), "{again:?}");
    }

    #[tokio::test]
    async fn the_hardened_copy_answers_and_carries_none_of_its_own_config() {
        let tmp = TempDir::new("harden");
        let work = sample_repo(&tmp.0);
        git_in(&work, &["config", "core.fsmonitor", "/bin/false"]);
        git_in(&work, &["config", "alias.x", "!touch /tmp/never"]);
        std::fs::write(work.join(".git/index.lock"), "").expect("lock");
        std::fs::write(work.join(".git/info/attributes"), "* diff=evil\n").expect("attrs");
        let base = head_of(&work);
        let (git, _) = scratch_of(&tmp.0, &work);
        assert_eq!(
            std::fs::read_to_string(git.git_dir.join("config")).expect("config"),
            CONFIG
        );
        for gone in ["hooks", "info", "index.lock"] {
            assert!(!git.git_dir.join(gone).exists(), "{gone}");
        }
        assert!(is_commit(&git, &base).await.expect("is_commit"));
        let tree = String::from_utf8(
            git.run("rev-parse", &["rev-parse", &format!("{base}^{{tree}}")])
                .await
                .expect("tree"),
        )
        .expect("utf8");
        assert!(!is_commit(&git, tree.trim()).await.expect("a tree"));
        assert!(!is_commit(&git, &"0".repeat(40)).await.expect("missing"));
        assert!(matches!(
            is_commit(&git, "--output=/tmp/x").await,
            Err(Error::Invalid(_))
        ));

        let rules = ignore_rules(&git, &base).await.expect("rules");
        assert_eq!(
            rules,
            IgnoreRules {
                files: vec![
                    IgnoreFile {
                        dir: String::new(),
                        text: "target/\n*.log\n".into()
                    },
                    IgnoreFile {
                        dir: "src".into(),
                        text: "*.tmp\n".into()
                    },
                ]
            }
        );
        let paths = base_paths(&git, &base).await.expect("paths");
        let want: Vec<(String, String)> = [
            (".gitignore", "100644"),
            ("README", "100644"),
            ("src", "040000"),
            ("src/.gitignore", "100644"),
            ("src/deep", "040000"),
            ("src/deep/ünï.txt", "100644"),
            ("src/main.rs", "100644"),
        ]
        .iter()
        .map(|(p, m)| ((*p).to_owned(), (*m).to_owned()))
        .collect();
        assert_eq!(paths, want);
    }

    /// A copy borrowing a kept copy's objects reads base from it, makes a commit of its own, and
    /// leaves the kept copy exactly as it was (git writes only in the borrowing copy).
    #[tokio::test]
    async fn a_borrowing_copy_reads_the_kept_objects_and_writes_only_its_own() {
        let tmp = TempDir::new("borrow");
        let work = sample_repo(&tmp.0);
        std::fs::write(work.join(".git/shallow"), "").expect("a shallow list");
        let base = head_of(&work);
        let (kept, _) = scratch_of(&tmp.0, &work);
        let before = reference_digest(&kept.git_dir);
        let working = Scratch::borrowing(&kept.git_dir).expect("a borrowing copy");
        let git = working.git(Instant::now() + Duration::from_secs(60));
        assert_eq!(
            std::fs::read_to_string(git.git_dir.join("config")).expect("config"),
            CONFIG
        );
        assert!(git.git_dir.join("shallow").is_file());
        assert!(is_commit(&git, &base).await.expect("is_commit"));
        assert_eq!(list_tree(&git, &base).await.expect("base's tree").len(), 7);

        let stream = tmp.0.join("stream");
        std::fs::write(
            &stream,
            format!(
                "blob\nmark :1\ndata 4\nnew\n\ncommit refs/heads/new\n\
                 committer c <c@example.org> 0 +0000\ndata 2\nm\nfrom {base}\n\
                 M 100644 :1 new.txt\n\ndone\n"
            ),
        )
        .expect("a stream");
        let stream = std::fs::File::open(&stream).expect("the stream");
        git.run_with_input(
            "fast-import",
            &["fast-import", "--quiet", "--done"],
            Input::File(stream),
        )
        .await
        .expect("a commit of its own");
        let head = String::from_utf8(
            git.run("rev-parse", &["rev-parse", "refs/heads/new"])
                .await
                .expect("its commit"),
        )
        .expect("utf8");
        let head = head.trim();
        let listed = list_tree(&git, head).await.expect("head's tree");
        assert!(listed.iter().any(|e| e.path == "new.txt"));
        assert_eq!(
            reference_digest(&kept.git_dir),
            before,
            "git wrote in the kept copy"
        );
        assert!(!is_commit(&kept, head).await.expect("is_commit"));
        let root = working.root().to_owned();
        drop(working);
        assert!(!root.exists() && kept.git_dir.join("objects").is_dir());
    }

    #[tokio::test]
    async fn ignore_rules_refuse_too_many_too_large_and_not_utf8() {
        let tmp = TempDir::new("rules");
        let work = tmp.0.join("work");
        std::fs::create_dir(&work).expect("work");
        git_in(&work, &["init", "-q"]);
        for i in 0..=MAX_IGNORE_FILES {
            let dir = work.join(format!("d{i}"));
            std::fs::create_dir(&dir).expect("dir");
            std::fs::write(dir.join(".gitignore"), "x\n").expect("write");
        }
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "many"]);
        let many = head_of(&work);
        git_in(&work, &["rm", "-q", "-r", "d1", "d2", "d3"]);
        std::fs::write(work.join(".gitignore"), "y".repeat(MAX_IGNORE_RULES_BYTES)).expect("w");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "large"]);
        let large = head_of(&work);
        std::fs::write(work.join(".gitignore"), b"caf\xe9\n").expect("w");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "latin1"]);
        let latin1 = head_of(&work);
        let (git, _) = scratch_of(&tmp.0, &work);
        let message = |r: Result<IgnoreRules>| match r {
            Err(Error::Invalid(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(message(ignore_rules(&git, &many).await).contains("files"));
        assert!(message(ignore_rules(&git, &large).await).contains("bytes of JSON"));
        assert!(message(ignore_rules(&git, &latin1).await).contains("not UTF-8"));
    }

    /// A tar of one entry `name` of `kind` (plus the root).
    fn one_entry(kind: tar::EntryType, name: &[u8], link: Option<&str>) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut root = tar::Header::new_gnu();
        root.set_entry_type(tar::EntryType::Directory);
        root.set_mode(0o755);
        root.set_size(0);
        builder
            .append_data(&mut root, ".git/", std::io::empty())
            .expect("root");
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(0);
        // Written raw: the builder's own path checks would refuse the hostile names.
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        if let Some(link) = link {
            h.set_link_name(link).expect("link name");
        }
        h.set_cksum();
        builder.append(&h, std::io::empty()).expect("entry");
        builder.into_inner().expect("tar")
    }

    #[test]
    fn every_entry_but_clean_directories_and_files_is_refused() {
        let cases: Vec<(tar::EntryType, &[u8], Option<&str>)> = vec![
            (tar::EntryType::Symlink, b".git/HEAD", Some("/etc/passwd")),
            (tar::EntryType::Link, b".git/HEAD", Some(".git/config")),
            (tar::EntryType::Fifo, b".git/fifo", None),
            (tar::EntryType::Char, b".git/dev", None),
            (tar::EntryType::Block, b".git/blk", None),
            (tar::EntryType::XGlobalHeader, b".git/pax", None),
            (tar::EntryType::Regular, b".git/../x", None),
            (tar::EntryType::Regular, b"../x", None),
            (tar::EntryType::Regular, b"/etc/x", None),
            (tar::EntryType::Regular, b"/.git/x", None),
            (tar::EntryType::Regular, b".git//x", None),
            (tar::EntryType::Regular, b".git/./x", None),
            (tar::EntryType::Regular, b".git/a/", None),
            (tar::EntryType::Regular, b"work/x", None),
            (tar::EntryType::Regular, b".gitx/y", None),
            (tar::EntryType::Regular, b".git/caf\xe9", None),
            (tar::EntryType::Regular, b".git", None),
            // A file in a directory no earlier entry made.
            (tar::EntryType::Regular, b".git/objects/x", None),
        ];
        for (kind, name, link) in cases {
            let tmp = TempDir::new("refuse");
            let tar = one_entry(kind, name, link);
            let result = extract_metadata(&tar[..], &tmp.0);
            match result {
                Err(Error::ForeignMetadata(m)) => assert!(m.contains("metadata archive"), "{m}"),
                other => panic!("{kind:?} {:?}: {other:?}", String::from_utf8_lossy(name)),
            }
            // Nothing was written outside, nor a link made.
            assert!(!tmp.0.join("HEAD").exists());
        }
    }

    #[test]
    fn the_bounds_refuse() {
        let tmp = TempDir::new("bounds");
        let work = sample_repo(&tmp.0);
        let tar = docker_tar(&work.join(".git"), ".git");
        let into = |n: &str| {
            let d = tmp.0.join(n);
            std::fs::create_dir(&d).expect("dir");
            d
        };
        let few = Limits {
            entries: 5,
            bytes: u64::MAX,
        };
        let r = extract_metadata_bounded(&tar[..], &into("a"), few);
        assert!(
            matches!(&r, Err(Error::ForeignMetadata(m)) if m.contains("entries")),
            "{r:?}"
        );
        let small = Limits {
            entries: 1000,
            bytes: 100,
        };
        let r = extract_metadata_bounded(&tar[..], &into("b"), small);
        assert!(
            matches!(&r, Err(Error::ForeignMetadata(m)) if m.contains("bytes")),
            "{r:?}"
        );
        // Two entries of one name.
        let mut builder = tar::Builder::new(Vec::new());
        for _ in 0..2 {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(0o644);
            h.set_size(1);
            builder
                .append_data(&mut h, ".git/HEAD", &b"x"[..])
                .expect("entry");
        }
        let twice = builder.into_inner().expect("tar");
        let r = extract_metadata(&twice[..], &into("c"));
        assert!(
            matches!(&r, Err(Error::ForeignMetadata(m)) if m.contains("twice")),
            "{r:?}"
        );
    }
}
