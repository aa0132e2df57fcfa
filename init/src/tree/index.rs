//! The git index cordon seeded (`git read-tree` of base), read by hand: versions 2 and 3, the
//! trailing SHA-1 checked, every entry at stage 0, strictly sorted and unique, no skip-worktree
//! or intent-to-add, modes 100644, 100755, 120000 and 160000 only, optional extensions skipped
//! (the checksum covers them; a required one, whose signature starts in lower case, is refused as
//! git itself would). The metadata digest the host compares proves it is the seeded file; this
//! parser only has to refuse, never to guess.
//!
//! [`Base`] is base's tree built from it: per directory its children sorted by name, each an
//! index entry or a directory holding entries (a "tracked directory"), and the range of entries
//! beneath every directory.

use std::os::fd::AsFd;

use sha1::{Digest, Sha1};

use super::fs;

/// The index is at most this long.
pub const MAX_INDEX_BYTES: usize = 128 * 1024 * 1024;
/// And holds at most this many entries.
pub const MAX_INDEX_ENTRIES: usize = 2_000_000;

const HEADER: usize = 12;
const CHECKSUM: usize = 20;
/// ctime, mtime, dev, ino, mode, uid, gid, size (4 bytes each but the times' 8), oid, flags.
const ENTRY_FIXED: usize = 62;

const FLAG_VALID: u16 = 0x8000;
const FLAG_EXTENDED: u16 = 0x4000;
const FLAG_STAGE: u16 = 0x3000;
const FLAG_NAME: u16 = 0x0fff;
const XFLAG_SKIP_WORKTREE: u16 = 0x4000;
const XFLAG_INTENT_TO_ADD: u16 = 0x2000;

/// An entry's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    File,
    Executable,
    Link,
    Gitlink,
}

impl Mode {
    pub fn octal(self) -> &'static str {
        match self {
            Mode::File => "100644",
            Mode::Executable => "100755",
            Mode::Link => "120000",
            Mode::Gitlink => "160000",
        }
    }
}

/// One index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: Vec<u8>,
    pub oid: [u8; 20],
    pub mode: Mode,
}

fn unlike(what: impl std::fmt::Display) -> String {
    format!("the index is not as cordon seeded it: {what}")
}

/// Read `index` in the metadata directory, no link followed, bounded.
pub fn read(metadata: std::os::fd::BorrowedFd<'_>) -> Result<Vec<Entry>, String> {
    let bytes = fs::read_small_at(metadata, c"index", MAX_INDEX_BYTES)
        .map_err(|e| format!("cannot read the index: {e}"))?
        .ok_or_else(|| unlike(format!("longer than {MAX_INDEX_BYTES} bytes")))?;
    parse(&bytes)
}

fn be16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A path git could have written from a tree: not empty, `/`-separated parts that are none of
/// empty, `.`, `..` or `.git`.
fn valid_path(path: &[u8]) -> bool {
    !path.is_empty()
        && path
            .split(|b| *b == b'/')
            .all(|part| !matches!(part, b"" | b"." | b".." | b".git"))
}

/// Parse an index file.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let (version, count, body_end) = header(bytes)?;
    // Never trust the count for an allocation: each entry takes at least 64 bytes.
    let mut entries: Vec<Entry> = Vec::with_capacity(count.min(body_end / 64));
    let mut at = HEADER;
    for number in 0..count {
        let bad = |what: &str| unlike(format!("entry {number}: {what}"));
        let (entry, end) = read_entry(bytes, at, body_end, version).map_err(|what| bad(&what))?;
        if let Some(previous) = entries.last() {
            if previous.path >= entry.path {
                return Err(bad(
                    "not sorted after the entry before it, or the same path",
                ));
            }
        }
        entries.push(entry);
        at = end;
    }
    skip_extensions(bytes, at, body_end)?;
    Ok(entries)
}

/// The header, once the checksum over everything before it matched: the version (2 or 3), the
/// entry count (bounded), and where the entries and extensions end (the checksum's start).
fn header(bytes: &[u8]) -> Result<(u32, usize, usize), String> {
    if bytes.len() < HEADER + CHECKSUM {
        return Err(unlike(format!("{} bytes, too short", bytes.len())));
    }
    let body_end = bytes.len() - CHECKSUM;
    let sum: [u8; 20] = Sha1::digest(&bytes[..body_end]).into();
    if sum[..] != bytes[body_end..] {
        return Err(unlike("its checksum does not match"));
    }
    if &bytes[..4] != b"DIRC" {
        return Err(unlike("no DIRC signature"));
    }
    let version = be32(bytes, 4);
    if version != 2 && version != 3 {
        return Err(unlike(format!("version {version}, not 2 or 3")));
    }
    let count = be32(bytes, 8) as usize;
    if count > MAX_INDEX_ENTRIES {
        return Err(unlike(format!(
            "{count} entries, more than {MAX_INDEX_ENTRIES}"
        )));
    }
    Ok((version, count, body_end))
}

/// The entry at `at` of a version `version` index whose body ends at `body_end`, and where the
/// next one begins; or what is wrong with it (its order among the entries is the caller's).
fn read_entry(
    bytes: &[u8],
    at: usize,
    body_end: usize,
    version: u32,
) -> Result<(Entry, usize), String> {
    if at + ENTRY_FIXED > body_end {
        return Err("truncated".to_owned());
    }
    let raw_mode = be32(bytes, at + 24);
    let mut oid = [0u8; 20];
    oid.copy_from_slice(&bytes[at + 40..at + 60]);
    let flags = be16(bytes, at + 60);
    let name_at = check_flags(bytes, at + ENTRY_FIXED, body_end, version, flags)?;
    let nul = bytes[name_at..body_end]
        .iter()
        .position(|b| *b == 0)
        .map(|n| name_at + n)
        .ok_or_else(|| "a path without its NUL".to_owned())?;
    let path = &bytes[name_at..nul];
    let name_length = (flags & FLAG_NAME) as usize;
    if (name_length < FLAG_NAME as usize && name_length != path.len())
        || (name_length == FLAG_NAME as usize && path.len() < name_length)
    {
        return Err(format!(
            "name length {name_length} for a {}-byte path",
            path.len()
        ));
    }
    // 1 to 8 NULs pad the entry to a multiple of 8 bytes.
    let fixed = name_at - at;
    let end = at + ((fixed + path.len() + 8) & !7);
    if end > body_end || bytes[nul..end].iter().any(|b| *b != 0) {
        return Err("bad padding".to_owned());
    }
    let mode = match raw_mode {
        0o100644 => Mode::File,
        0o100755 => Mode::Executable,
        0o120000 => Mode::Link,
        0o160000 => Mode::Gitlink,
        other => return Err(format!("mode {other:o}")),
    };
    if !valid_path(path) {
        return Err(format!("path {:?}", cordon_contract::tree::quote(path)));
    }
    let entry = Entry {
        path: path.to_vec(),
        oid,
        mode,
    };
    Ok((entry, end))
}

/// An entry's flags (and, in version 3, its extended flags at `name_at`) set nothing cordon
/// did not seed: no skip-worktree, intent-to-add, assume-unchanged or stage. Where its path
/// starts.
fn check_flags(
    bytes: &[u8],
    mut name_at: usize,
    body_end: usize,
    version: u32,
    flags: u16,
) -> Result<usize, String> {
    if flags & FLAG_EXTENDED != 0 {
        if version < 3 {
            return Err("extended flags in a version 2 index".to_owned());
        }
        if name_at + 2 > body_end {
            return Err("truncated".to_owned());
        }
        let extended = be16(bytes, name_at);
        if extended & XFLAG_SKIP_WORKTREE != 0 {
            return Err("skip-worktree".to_owned());
        }
        if extended & XFLAG_INTENT_TO_ADD != 0 {
            return Err("intent-to-add".to_owned());
        }
        if extended != 0 {
            return Err(format!("extended flags {extended:#06x}"));
        }
        name_at += 2;
    }
    if flags & FLAG_VALID != 0 {
        return Err("assume-unchanged".to_owned());
    }
    if flags & FLAG_STAGE != 0 {
        return Err(format!("stage {}", (flags & FLAG_STAGE) >> 12));
    }
    Ok(name_at)
}

/// The extensions after the entries, skipped whole: optional ones only (a required one's
/// signature starts in lower case, and git itself refuses an index it does not understand).
fn skip_extensions(bytes: &[u8], mut at: usize, body_end: usize) -> Result<(), String> {
    while at < body_end {
        if at + 8 > body_end {
            return Err(unlike("a truncated extension"));
        }
        let signature = &bytes[at..at + 4];
        if !signature[0].is_ascii_uppercase() {
            return Err(unlike(format!(
                "a required extension {}",
                signature.escape_ascii()
            )));
        }
        let size = be32(bytes, at + 4) as usize;
        at = at
            .checked_add(8 + size)
            .filter(|end| *end <= body_end)
            .ok_or_else(|| unlike("an extension longer than the index"))?;
    }
    Ok(())
}

/// A node of base's tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// An index entry (by number).
    Entry(usize),
    /// A tracked directory (by number).
    Dir(usize),
}

/// A name in a tracked directory.
#[derive(Debug)]
pub struct Child {
    pub name: Box<[u8]>,
    pub node: Node,
}

/// A tracked directory: its children sorted by name, and the entries beneath it (`first..end`,
/// contiguous because paths sharing a prefix are contiguous in byte order).
#[derive(Debug)]
pub struct Dir {
    pub children: Vec<Child>,
    pub first: usize,
    pub end: usize,
}

/// What a path is in base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Found(Node),
    Missing,
    /// A proper ancestor is this entry (a file, link or gitlink).
    Beneath(usize),
}

/// Base's tree: the index entries and the directories holding them (0 is the root).
#[derive(Debug)]
pub struct Base {
    pub entries: Vec<Entry>,
    pub dirs: Vec<Dir>,
}

impl Base {
    pub const ROOT: usize = 0;

    /// Build the tree of sorted, unique, valid entries; refused when a path is both an entry
    /// and a directory of entries.
    pub fn new(entries: Vec<Entry>) -> Result<Base, String> {
        let count = entries.len();
        let mut dirs = vec![Dir {
            children: Vec::new(),
            first: 0,
            end: count,
        }];
        // The open directories below the root, with their names.
        let mut open: Vec<(usize, &[u8])> = Vec::new();
        for (number, entry) in entries.iter().enumerate() {
            let parts: Vec<&[u8]> = entry.path.split(|b| *b == b'/').collect();
            let (name, parents) = parts.split_last().ok_or_else(|| unlike("an empty path"))?;
            let mut same = 0;
            while same < open.len() && same < parents.len() && open[same].1 == parents[same] {
                same += 1;
            }
            for (closed, _) in open.drain(same..) {
                dirs[closed].end = number;
            }
            for part in &parents[same..] {
                let parent = open.last().map_or(Self::ROOT, |(id, _)| *id);
                let id = dirs.len();
                dirs.push(Dir {
                    children: Vec::new(),
                    first: number,
                    end: count,
                });
                dirs[parent].children.push(Child {
                    name: (*part).into(),
                    node: Node::Dir(id),
                });
                open.push((id, part));
            }
            let parent = open.last().map_or(Self::ROOT, |(id, _)| *id);
            dirs[parent].children.push(Child {
                name: (*name).into(),
                node: Node::Entry(number),
            });
        }
        for dir in &mut dirs {
            dir.children.sort_by(|a, b| a.name.cmp(&b.name));
            if let Some(pair) = dir.children.windows(2).find(|w| w[0].name == w[1].name) {
                let path = match (pair[0].node, pair[1].node) {
                    (Node::Entry(e), _) | (_, Node::Entry(e)) => entries[e].path.clone(),
                    _ => pair[0].name.to_vec(),
                };
                return Err(unlike(format!(
                    "{} is both an entry and a directory",
                    cordon_contract::tree::quote(&path)
                )));
            }
        }
        Ok(Base { entries, dirs })
    }

    /// The child `name` of tracked directory `dir`: its position among the children and node.
    pub fn child(&self, dir: usize, name: &[u8]) -> Option<(usize, Node)> {
        let children = &self.dirs[dir].children;
        children
            .binary_search_by(|c| c.name[..].cmp(name))
            .ok()
            .map(|at| (at, children[at].node))
    }

    /// What a `/`-separated path is in base.
    pub fn lookup(&self, path: &[u8]) -> Lookup {
        let mut dir = Self::ROOT;
        let mut parts = path.split(|b| *b == b'/').peekable();
        while let Some(part) = parts.next() {
            match self.child(dir, part) {
                None => return Lookup::Missing,
                Some((_, Node::Dir(d))) => dir = d,
                Some((_, Node::Entry(e))) if parts.peek().is_some() => return Lookup::Beneath(e),
                Some((_, node)) => return Lookup::Found(node),
            }
        }
        Lookup::Found(Node::Dir(dir))
    }

    /// The gitlinks' paths, in index order.
    pub fn gitlinks(&self) -> impl Iterator<Item = &[u8]> {
        self.entries
            .iter()
            .filter(|e| e.mode == Mode::Gitlink)
            .map(|e| e.path.as_slice())
    }
}

/// Read and build base's tree from the metadata root.
pub fn base(metadata: &impl AsFd) -> Result<Base, String> {
    Base::new(read(metadata.as_fd())?)
}
