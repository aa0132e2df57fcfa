//! The commit's path refusals: every change of a manifest that a git tree cannot or must not
//! hold, whatever the agent named it, decided before any git runs ([`refusals`]).
//!
//! The name rules mirror git's own (`read-cache.c` `verify_path` with `core.protectHFS` and
//! `core.protectNTFS` both on, `path.c` `is_ntfs_dotgit` / `is_ntfs_dot_generic`, `utf8.c`
//! `is_hfs_dot_generic`, `fsck.c` `fsck_tree`), applied to every part of a path split at `/` and
//! at `\` (protectNTFS treats a backslash as a separator). Where this module differs from git it
//! refuses more, never less; each place says so.
//!
//! The name rules apply to new entries only (added or changed paths): a deletion can only remove
//! what base holds, and base is not the agent's. The tree rules (names that are one after
//! normalisation and case folding, a path beneath a file, a file where the tree has a directory,
//! a directory git would discover as a repository, a link that leaves the tree) look at the
//! resulting tree: base minus every changed path plus the manifest's new entries.

use std::collections::{BTreeMap, HashMap, HashSet};

use cordon_contract::audit::{CommitFinding, CommitReason, Kind, Manifest};
use unicode_normalization::UnicodeNormalization;

use crate::tree::check_link;
use crate::unusable::Unusable;

/// What a runner may relax.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// Commit names a Windows or macOS checkout cannot hold (for a repository that never leaves
    /// Linux). Off by default: such names are refused (`non-portable`).
    pub allow_non_portable: bool,
}

/// Base's tree as the rules read it.
#[derive(Debug, Clone, Default)]
pub struct Base {
    /// `(path, git mode)` of every file, link and gitlink (no directories).
    pub entries: Vec<(String, String)>,
    /// The targets of base's links, by path; needed only when the manifest adds a link
    /// ([`needs_link_targets`]), empty otherwise.
    pub links: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Whether [`refusals`] needs base's link targets: only a new link can change where a link of
/// the resulting tree leads.
pub fn needs_link_targets(manifest: &Manifest) -> bool {
    manifest
        .changes
        .iter()
        .any(|c| c.new.as_ref().is_some_and(|n| n.kind == Kind::Link))
}

/// git's mode for a tree (a directory); base's listing should hold none, but one is taken as a
/// directory, not as an entry a path could sit beneath.
const TREE_MODE: &str = "040000";

/// Every reason the manifest's changes cannot be committed onto `base`, sorted by path then
/// reason, without duplicates; empty when every change is one a tree may hold.
///
/// The work is bounded by the input: one pass over base's entries, sets and maps keyed by the new
/// entries' path prefixes, no quadratic loop; links are resolved only when a link is new.
pub fn refusals(manifest: &Manifest, base: &Base, rules: Rules) -> Vec<CommitFinding> {
    let mut out = Vec::new();
    let mut push = |path: &str, reason: CommitReason, detail: String| {
        out.push(CommitFinding {
            path: path.to_string(),
            reason,
            detail,
        })
    };

    // The manifest's own flags.
    if manifest.metadata_changed {
        push(
            ".git",
            CommitReason::MetadataChanged,
            "the metadata is not as seeded".into(),
        );
    }
    for commit in &manifest.agent_commits {
        push(".git", CommitReason::AgentCommits, commit.clone());
    }
    for path in &manifest.link_target_changes {
        push(path, CommitReason::LinkTargetChanged, String::new());
    }
    for path in &manifest.nested_gitlink_content {
        push(path, CommitReason::GitlinkContent, String::new());
    }

    // Per change: its kinds, and the name rules for each new entry.
    let mut changed: HashSet<&str> = HashSet::new();
    // (path, the prefix whose last part Windows or macOS cannot hold, why).
    let mut non_portable: Vec<(&str, &str, String)> = Vec::new();
    let mut new_entries: BTreeMap<&str, Kind> = BTreeMap::new();
    for change in &manifest.changes {
        let path = change.path.as_str();
        changed.insert(path);
        let old = change.old.as_ref().map(|s| s.kind);
        let new = change.new.as_ref().map(|s| s.kind);
        match new {
            Some(Kind::Dir) => push(
                path,
                CommitReason::Directory,
                "a directory entry (ignored or empty)".into(),
            ),
            Some(Kind::Fifo) => push(path, CommitReason::SpecialFile, "a fifo".into()),
            Some(Kind::Socket) => push(path, CommitReason::SpecialFile, "a socket".into()),
            Some(Kind::Device) => push(path, CommitReason::SpecialFile, "a device".into()),
            _ => {}
        }
        if old == Some(Kind::Gitlink) || new == Some(Kind::Gitlink) {
            let what = match (old, new) {
                (None, _) => "a gitlink added",
                (_, None) => "a gitlink removed",
                _ => "a gitlink changed",
            };
            push(path, CommitReason::Gitlink, what.into());
        }
        if let Some(kind) = new {
            for (reason, detail) in name_refusals(path, kind) {
                push(path, reason, detail);
            }
            if !rules.allow_non_portable {
                for (prefix, detail) in super::portable::refusals(path) {
                    non_portable.push((path, prefix, detail));
                }
            }
            new_entries.insert(path, kind);
        }
        if let Some(target) = change.new.as_ref().and_then(|n| n.target.as_deref()) {
            if let Some(detail) = link_into_git(target) {
                push(path, CommitReason::GitPath, detail);
            }
        }
    }

    // A name base already holds is base's: the receiver has it whatever the commit does.
    let held = held_by_base(
        non_portable.iter().map(|(_, prefix, _)| *prefix),
        &base.entries,
    );
    for (path, prefix, detail) in non_portable {
        if !held.contains(prefix) {
            push(path, CommitReason::NonPortable, detail);
        }
    }
    tree_refusals(&new_entries, &changed, &base.entries, &mut push);
    if needs_link_targets(manifest) {
        link_escapes(manifest, &changed, &base.links, &mut push);
    }

    out.sort();
    out.dedup();
    out
}

/// Which of `prefixes` base holds, as an entry or as a directory (one pass over base).
fn held_by_base<'a>(
    prefixes: impl Iterator<Item = &'a str>,
    base: &[(String, String)],
) -> HashSet<&'a str> {
    let wanted: HashSet<&str> = prefixes.collect();
    let mut held = HashSet::new();
    if wanted.is_empty() {
        return held;
    }
    for (path, _) in base {
        for (_, _, prefix) in levels(path) {
            if let Some(&found) = wanted.get(prefix) {
                held.insert(found);
            }
        }
    }
    held
}

/// Whether git would add `path` as a regular file: no `.git` part or alias of one, no empty,
/// `.` or `..` part, and no control character or backslash (the name rules of [`refusals`] for
/// an entry that is not a link).
pub fn addable(path: &str) -> bool {
    name_refusals(path, Kind::File).is_empty()
}

/// The name rules for one new entry: GitPath, BadCharacter and (for a link) GitmodulesLink.
fn name_refusals(path: &str, kind: Kind) -> Vec<(CommitReason, String)> {
    let mut found = Vec::new();

    // `verify_path` refuses an empty part (`is_dir_sep(c)` right after a separator, or the end
    // right after one for anything but a sparse directory) and, through `verify_dotfile`, a `.`
    // or `..` part. Split at `/` only: git splits there; a backslash is refused on its own below.
    for part in path.split('/') {
        let what = match part {
            "" => "an empty part",
            "." => "a `.` part",
            ".." => "a `..` part",
            _ => continue,
        };
        found.push((CommitReason::GitPath, what.to_string()));
    }

    let parts: Vec<&str> = path.split(['/', '\\']).collect();
    for part in &parts {
        if let Some(how) = dotgit_alias(part) {
            found.push((
                CommitReason::GitPath,
                format!("part {part:?} is .git {how}"),
            ));
        }
    }

    // `fsck` wants `.gitmodules` and `.gitattributes` to be blobs (gitmodulesBlob,
    // gitattributesBlob): a directory of either name (or an alias) is refused here first.
    if let Some((_, above)) = parts.split_last() {
        for part in above {
            if is_dot_name(part, "gitmodules", b"gi7eba") {
                found.push((
                    CommitReason::Gitmodules,
                    format!("part {part:?} is a directory named .gitmodules"),
                ));
            }
            if is_dot_name(part, "gitattributes", b"gi7d29") {
                found.push((
                    CommitReason::Gitattributes,
                    format!("part {part:?} is a directory named .gitattributes"),
                ));
            }
        }
    }

    if kind == Kind::Link {
        // `verify_path` refuses a link with `.gitmodules` (case-insensitively, `verify_dotfile`;
        // or `is_hfs_dotgitmodules`) as any `/`-part, and with an NTFS alias of it
        // (`is_ntfs_dotgitmodules`) from any `/` or `\` on to the end. Here every alias is
        // refused as any part: a superset (git would take a link at `gitmod~1/x`, which NTFS
        // reads as `.gitmodules/x`).
        for part in &parts {
            if is_dot_name(part, "gitmodules", b"gi7eba") {
                found.push((
                    CommitReason::GitmodulesLink,
                    format!("part {part:?} is .gitmodules"),
                ));
            }
        }
        // `fsck_tree` reports a link whose entry name is `.gitattributes`, `.gitignore` or
        // `.mailmap` or an HFS/NTFS alias (gitattributesSymlink, gitignoreSymlink,
        // mailmapSymlink): git reads each through the tree and the work tree, so a link lets
        // the content come from outside. Refused under the same reason, for the last part.
        if let Some(last) = parts.last() {
            for (name, short) in [
                ("gitattributes", b"gi7d29"),
                ("gitignore", b"gi250a"),
                ("mailmap", b"maba30"),
            ] {
                if is_dot_name(last, name, short) {
                    found.push((
                        CommitReason::GitmodulesLink,
                        format!("a link named .{name}"),
                    ));
                }
            }
        }
    }

    if let Some(c) = path.chars().find(|&c| c == '\\' || c.is_control()) {
        found.push((
            CommitReason::BadCharacter,
            format!("holds U+{:04X}", u32::from(c)),
        ));
    }
    found
}

/// A link whose target names a `.git` part or an alias of one: a link into the git metadata
/// (the CR-in-a-submodule-path attack plants one to `.git/modules/<name>/hooks`). git commits such
/// a link, but a checkout that writes through it writes into a repository's metadata, and
/// cordon's own seeding refuses a repository that holds one: the commit never makes one.
fn link_into_git(target: &str) -> Option<String> {
    target
        .split(['/', '\\'])
        .find_map(dotgit_alias)
        .map(|how| format!("a link to {target:?}, through .git {how}"))
}

/// How `part` (one component, no separator in it) is `.git` to git, if it is.
fn dotgit_alias(part: &str) -> Option<&'static str> {
    let bytes = c_string(part.as_bytes());
    if bytes.eq_ignore_ascii_case(b".git") {
        // `verify_dotfile`: `.git` followed by the end or a separator, case-insensitively.
        Some("(case-insensitively)")
    } else if is_hfs_dot_generic(part, "git") {
        Some("on HFS+ (ignorable code points)")
    } else if is_ntfs_dotgit(bytes) {
        Some("on NTFS (trailing dots or spaces, a stream, or the short name git~1)")
    } else {
        None
    }
}

/// `.<name>` or any HFS+/NTFS alias of it (`is_hfs_dot_generic` || `is_ntfs_dot_generic`).
pub(super) fn is_dot_name(part: &str, name: &str, short_prefix: &[u8; 6]) -> bool {
    is_hfs_dot_generic(part, name)
        || is_ntfs_dot_generic(c_string(part.as_bytes()), name.as_bytes(), short_prefix)
}

/// git reads names as C strings: a NUL ends one. (A NUL is a BadCharacter anyway.)
fn c_string(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or(bytes)
}

/// The code points HFS+ ignores in a name (`utf8.c` `next_hfs_char`).
fn is_hfs_ignorable(c: char) -> bool {
    matches!(c, '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
}

/// git's `utf8.c` `is_hfs_dot_generic(path, needle)`: skipping HFS+-ignorable code points,
/// the name is `.` then `needle` compared ASCII case-insensitively (a code point above 127
/// never matches: "we know our needles contain only ASCII"), then the end of the part. git does
/// no other folding: it notes that is enough for its ASCII needles.
fn is_hfs_dot_generic(part: &str, needle: &str) -> bool {
    let mut chars = part.chars().filter(|&c| !is_hfs_ignorable(c));
    if chars.next() != Some('.') {
        return false;
    }
    for want in needle.chars() {
        match chars.next() {
            Some(c) if c.is_ascii() && c.to_ascii_lowercase() == want => {}
            _ => return false,
        }
    }
    // `if (c && !is_dir_sep(c)) return 0;`: the part is one component, so it must end.
    chars.next().is_none()
}

/// git's `path.c` `is_ntfs_dotgit(name)`: `.git` (case-insensitively) or the 8.3 short name
/// `git~1` (only `~1`: git guarantees `.git` is a directory's first entry, so it is the one
/// given `GIT~1`), followed by any run of `.` and ` ` (NTFS trims them), then the end, a
/// separator or a `:` (any alternate data stream, `.git::$INDEX_ALLOCATION` among them).
fn is_ntfs_dotgit(name: &[u8]) -> bool {
    let rest = if name.len() >= 4 && name[0] == b'.' && name[1..4].eq_ignore_ascii_case(b"git") {
        &name[4..]
    } else if name.len() >= 5
        && name[..3].eq_ignore_ascii_case(b"git")
        && name[3] == b'~'
        && name[4] == b'1'
    {
        &name[5..]
    } else {
        return false;
    };
    only_spaces_and_periods(rest)
}

/// `only_spaces_and_periods:` in git's `is_ntfs_dot_generic` (and `is_ntfs_dotgit`'s loop): the
/// rest is dots and spaces up to the end or a `:`.
fn only_spaces_and_periods(rest: &[u8]) -> bool {
    for &c in rest {
        if c == b':' {
            return true;
        }
        if c != b' ' && c != b'.' {
            return false;
        }
    }
    true
}

/// git's `path.c` `is_ntfs_dot_generic(name, dotgit_name, len, dotgit_ntfs_shortname_prefix)`,
/// step for step:
/// 1. `.` + `dotgit_name` case-insensitively, then only spaces and periods (to the end or `:`);
/// 2. the regular short name: the first 6 characters of `dotgit_name` case-insensitively, `~`,
///    a digit `1`..`4`, then only spaces and periods;
/// 3. the fall-back short name: up to 6 characters matching the lowercase hashed prefix
///    (`gi7eba` for `.gitmodules`), then `~`, a digit `1`..`9`, digits to 8 characters in all,
///    then only spaces and periods; any non-ASCII byte before the `~` fails.
fn is_ntfs_dot_generic(name: &[u8], dotgit_name: &[u8], short_prefix: &[u8; 6]) -> bool {
    let len = dotgit_name.len();
    let at = |i: usize| name.get(i).copied().unwrap_or(0);

    if at(0) == b'.' && name.len() > len && name[1..=len].eq_ignore_ascii_case(dotgit_name) {
        return only_spaces_and_periods(&name[len + 1..]);
    }

    if name.len() >= 8
        && name[..6].eq_ignore_ascii_case(&dotgit_name[..6])
        && name[6] == b'~'
        && (b'1'..=b'4').contains(&name[7])
    {
        return only_spaces_and_periods(&name[8..]);
    }

    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let c = at(i);
        if c == 0 {
            return false;
        } else if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !(b'1'..=b'9').contains(&at(i)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || c.to_ascii_lowercase() != short_prefix[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(name.get(i..).unwrap_or(&[]))
}

/// Every link of the resulting tree (base's that survive, and the new ones) that leaves it as the
/// kernel would resolve it there, by the seeder's own rule ([`check_link`]): an absolute target,
/// a step above the top, a step into `.git`, also through other links. A base link counts too:
/// a new link on its way can make it leave (`x -> sub/y/../../etc` once `sub/y -> ..` is added).
fn link_escapes(
    manifest: &Manifest,
    changed: &HashSet<&str>,
    base_links: &BTreeMap<Vec<u8>, Vec<u8>>,
    push: &mut impl FnMut(&str, CommitReason, String),
) {
    let mut links: BTreeMap<Vec<u8>, Vec<u8>> = base_links
        .iter()
        .filter(|(path, _)| std::str::from_utf8(path).map_or(true, |p| !changed.contains(p)))
        .map(|(path, target)| (path.clone(), target.clone()))
        .collect();
    for change in &manifest.changes {
        if let Some(new) = change.new.as_ref().filter(|n| n.kind == Kind::Link) {
            let target = new.target.as_deref().unwrap_or_default();
            links.insert(change.path.as_bytes().to_vec(), target.as_bytes().to_vec());
        }
    }
    for (path, target) in &links {
        let detail = match check_link(path, target, &links) {
            Ok(()) => continue,
            Err(Unusable::AbsoluteLink { target, .. }) => format!("an absolute target {target:?}"),
            Err(Unusable::EscapingLink { reaches, .. }) => format!("it leads to {reaches}"),
            Err(other) => other.to_string(),
        };
        push(
            &String::from_utf8_lossy(path),
            CommitReason::LinkEscapes,
            detail,
        );
    }
}

/// One spelling of a name in the resulting tree (a path or a directory prefix).
#[derive(Debug, Default, Clone, Copy)]
struct Spelling {
    in_base: bool,
    in_result: bool,
}

/// Each `/`-level of `path`: (parent prefix, part, prefix through the part).
fn levels(path: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    let mut start = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let end = match path[start..].find('/') {
            Some(i) => start + i,
            None => {
                done = true;
                path.len()
            }
        };
        let parent = &path[..start.saturating_sub(1)];
        let level = (parent, &path[start..end], &path[..end]);
        start = end + 1;
        Some(level)
    })
}

/// The key two names of one directory must not share, into `out`: canonical decomposition (NFD,
/// as HFS+ stores names and APFS compares them: `é` and `e` + U+0301, the Ångström sign and
/// `Å`, meet), each character upper- then lower-cased (`ς`/`σ`/`Σ`, `ſ`/`s`, `ı`/`i`, `K`
/// and the Kelvin sign meet, as NTFS's upcase table or APFS/HFS+ folding would make them; `ß`
/// meets `ss` and `ﬁ` meets `fi`, which refuses a little more than a filesystem would),
/// decomposed again (a case mapping can compose), with the HFS+-ignorable code points dropped.
/// No compatibility mapping: `①` and `1` stay apart, as they do on every filesystem.
fn fold_into(part: &str, out: &mut String) {
    out.clear();
    if part.is_ascii() {
        // The same key, without the tables: ASCII is its own NFD, and folds to lower case.
        out.extend(part.chars().map(|c| c.to_ascii_lowercase()));
        return;
    }
    let folded: String = part
        .nfd()
        .filter(|&c| !is_hfs_ignorable(c))
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect();
    out.extend(folded.nfd().filter(|&c| !is_hfs_ignorable(c)));
}

/// What makes git take a directory for a repository (`setup.c` `is_git_directory`): a valid
/// `HEAD`, and `objects` and `refs` there or in the directory its `commondir` names. Here a
/// `HEAD` beside any one of these, or beside a `config` (the part that runs code), is enough,
/// of any kind (an executable file named `objects` passes git's `access(X_OK)`, a link is
/// followed), compared after folding (a case-insensitive receiver reads `head` as `HEAD`).
const REPOSITORY_NAMES: [&str; 5] = ["HEAD", "objects", "refs", "commondir", "config"];

/// The bit of a folded name among [`REPOSITORY_NAMES`] (`HEAD` is bit 0), if it is one.
fn repository_bit(key: &str) -> Option<u8> {
    REPOSITORY_NAMES
        .iter()
        .position(|name| name.eq_ignore_ascii_case(key))
        .map(|i| 1 << i)
}

/// The rules of the resulting tree for the new entries: a case collision at any level, a path
/// beneath a file, and a file where the tree has a directory.
///
/// Two different paths that fold alike first differ at one part whose parents are the same
/// exact prefix, so a collision is always between two siblings: names are grouped by (exact
/// parent, folded part), for the parents on a new entry's path only. Base is read once; a base
/// path's walk stops at the first parent no new entry has.
fn tree_refusals<'a>(
    new_entries: &BTreeMap<&'a str, Kind>,
    changed: &HashSet<&'a str>,
    base: &'a [(String, String)],
    push: &mut impl FnMut(&str, CommitReason, String),
) {
    let mut tree = Tree::of_new(new_entries);
    tree.read_base(new_entries, changed, base);
    tree.new_beneath_new(new_entries);
    tree.nested_repositories(push);
    for (&path, &kind) in new_entries {
        tree.beneath_file(path, kind, new_entries, push);
        tree.case_collision(path, push);
    }
}

/// What the resulting tree holds on and around the new entries' paths, from the new entries and
/// from base (for [`tree_refusals`]).
#[derive(Debug, Default)]
struct Tree<'a> {
    /// The exact parents of every new entry, root ("") included.
    parents: HashSet<&'a str>,
    /// (exact parent, folded part) -> the exact spellings of that name.
    groups: HashMap<(&'a str, String), BTreeMap<&'a str, Spelling>>,
    /// Every directory on a new entry's way -> which parts of a repository the resulting tree
    /// holds there, whoever put them there ([`repository_bit`]).
    repository_parts: HashMap<&'a str, u8>,
    /// A new entry a surviving entry lies beneath (it is a directory of the tree): an example.
    holds: BTreeMap<&'a str, &'a str>,
    /// A proper prefix of a new entry that a surviving base entry (not a directory) holds.
    leaf_parents: HashMap<&'a str, &'a str>,
}

impl<'a> Tree<'a> {
    /// The new entries' side: every level of every new path, its spelling and any repository
    /// part it adds.
    fn of_new(new_entries: &BTreeMap<&'a str, Kind>) -> Self {
        let mut tree = Self::default();
        let mut buf = String::new();
        for &path in new_entries.keys() {
            for (parent, part, prefix) in levels(path) {
                tree.parents.insert(parent);
                fold_into(part, &mut buf);
                if let Some(bit) = repository_bit(&buf) {
                    *tree.repository_parts.entry(parent).or_default() |= bit;
                }
                tree.groups
                    .entry((parent, buf.clone()))
                    .or_default()
                    .entry(prefix)
                    .or_default()
                    .in_result = true;
            }
        }
        tree
    }

    /// Base's side, read once: the new entries a surviving entry lies beneath, the new entries'
    /// parents a surviving non-directory holds, and base's spellings and repository parts
    /// beside the new entries' own.
    fn read_base(
        &mut self,
        new_entries: &BTreeMap<&'a str, Kind>,
        changed: &HashSet<&'a str>,
        base: &'a [(String, String)],
    ) {
        let mut buf = String::new();
        for (path, mode) in base {
            let path = path.as_str();
            let survives = !changed.contains(path);
            if survives && mode != TREE_MODE && self.parents.contains(path) {
                self.leaf_parents.insert(path, mode.as_str());
            }
            for (parent, part, prefix) in levels(path) {
                if survives && !parent.is_empty() && new_entries.contains_key(parent) {
                    self.holds.entry(parent).or_insert(path);
                }
                if !self.parents.contains(parent) {
                    break;
                }
                fold_into(part, &mut buf);
                if survives {
                    if let Some(bit) = repository_bit(&buf) {
                        *self.repository_parts.entry(parent).or_default() |= bit;
                    }
                }
                let key = (parent, std::mem::take(&mut buf));
                if let Some(group) = self.groups.get_mut(&key) {
                    let spelling = group.entry(prefix).or_default();
                    spelling.in_base = true;
                    spelling.in_result |= survives;
                }
                buf = key.1;
            }
        }
    }

    /// A new entry (not a directory) that another new entry lies beneath.
    fn new_beneath_new(&mut self, new_entries: &BTreeMap<&'a str, Kind>) {
        for &path in new_entries.keys() {
            for (_, _, prefix) in levels(path) {
                if prefix.len() < path.len()
                    && new_entries.get(prefix).is_some_and(|&k| k != Kind::Dir)
                {
                    self.holds.entry(prefix).or_insert(path);
                }
            }
        }
    }

    /// A directory on a new entry's way that git would discover as a repository: a HEAD (bit 0)
    /// beside any other part.
    fn nested_repositories(&self, push: &mut impl FnMut(&str, CommitReason, String)) {
        for (&parent, &bits) in &self.repository_parts {
            if bits & 1 == 0 {
                continue;
            }
            let beside: Vec<&str> = REPOSITORY_NAMES
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, name)| *name)
                .collect();
            if !beside.is_empty() {
                push(
                    if parent.is_empty() { "." } else { parent },
                    CommitReason::NestedRepository,
                    format!(
                        "HEAD beside {}: git would take the directory for a repository and read its config",
                        beside.join(", ")
                    ),
                );
            }
        }
    }

    /// A new entry beneath a file, or a new non-directory where the tree has a directory: both
    /// refused as Directory.
    fn beneath_file(
        &self,
        path: &str,
        kind: Kind,
        new_entries: &BTreeMap<&'a str, Kind>,
        push: &mut impl FnMut(&str, CommitReason, String),
    ) {
        // Beneath a file: a proper prefix that is a surviving base entry or a new entry that
        // is not a directory. Refused as Directory: the tree would need a directory there.
        for (_, _, prefix) in levels(path) {
            if prefix.len() == path.len() {
                break;
            }
            let what = match (self.leaf_parents.get(prefix), new_entries.get(prefix)) {
                (_, Some(Kind::Dir)) => None,
                (_, Some(Kind::Link)) => Some("a link"),
                (_, Some(Kind::Gitlink)) => Some("a gitlink"),
                (_, Some(_)) => Some("a file"),
                (Some(&"120000"), None) => Some("a link"),
                (Some(&"160000"), None) => Some("a gitlink"),
                (Some(_), None) => Some("a file"),
                (None, None) => None,
            };
            if let Some(what) = what {
                push(
                    path,
                    CommitReason::Directory,
                    format!("beneath {what} {prefix:?}"),
                );
            }
        }
        if kind != Kind::Dir {
            if let Some(example) = self.holds.get(path) {
                push(
                    path,
                    CommitReason::Directory,
                    format!("a directory in the tree (it holds {example:?})"),
                );
            }
        }
    }

    /// The first level of a new entry's path where another spelling of the same name is in the
    /// tree, unless base already held both (base's own collision, not the agent's).
    fn case_collision(&self, path: &str, push: &mut impl FnMut(&str, CommitReason, String)) {
        let mut buf = String::new();
        for (parent, part, prefix) in levels(path) {
            fold_into(part, &mut buf);
            let key = (parent, std::mem::take(&mut buf));
            let group = self.groups.get(&key);
            buf = key.1;
            let Some(group) = group else {
                continue;
            };
            let mine = group.get(prefix).copied().unwrap_or_default();
            let other = group.iter().find(|(spelling, s)| {
                *spelling != &prefix && s.in_result && !(mine.in_base && s.in_base)
            });
            if let Some((other, s)) = other {
                let whose = if s.in_base { "base's" } else { "a new" };
                push(
                    path,
                    CommitReason::CaseCollision,
                    format!("{prefix:?} and {whose} {other:?} are one name after normalisation and case folding"),
                );
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::audit::{Change, Side};
    use std::collections::BTreeSet;

    fn paths_for(findings: &[CommitFinding], reason: CommitReason) -> BTreeSet<String> {
        findings
            .iter()
            .filter(|f| f.reason == reason)
            .map(|f| f.path.clone())
            .collect()
    }

    fn side(kind: Kind) -> Side {
        Side {
            kind,
            blob: Some("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391".into()),
            size: Some(0),
            target: (kind == Kind::Link).then(|| "target".into()),
        }
    }

    fn added(path: &str, kind: Kind) -> Change {
        Change {
            path: path.into(),
            old: None,
            new: Some(side(kind)),
            ignored: false,
            link_target_traverses_link: None,
        }
    }

    fn modified(path: &str, old: Kind, new: Kind) -> Change {
        Change {
            old: Some(side(old)),
            ..added(path, new)
        }
    }

    fn deleted(path: &str, kind: Kind) -> Change {
        Change {
            path: path.into(),
            old: Some(side(kind)),
            new: None,
            ignored: false,
            link_target_traverses_link: None,
        }
    }

    fn manifest(changes: Vec<Change>) -> Manifest {
        Manifest {
            base: "a".repeat(40),
            changes,
            agent_commits: vec![],
            metadata_changed: false,
            link_target_changes: vec![],
            nested_gitlink_content: vec![],
            digest: String::new(),
        }
    }

    fn base(entries: &[(&str, &str)]) -> Vec<(String, String)> {
        entries
            .iter()
            .map(|(p, m)| (p.to_string(), m.to_string()))
            .collect()
    }

    fn check(changes: Vec<Change>, base_entries: &[(&str, &str)]) -> Vec<CommitFinding> {
        let base = Base {
            entries: base(base_entries),
            links: BTreeMap::new(),
        };
        // The name rules' own tests: names Windows refuses are `non_portable_...`'s.
        let rules = Rules {
            allow_non_portable: true,
        };
        refusals(&manifest(changes), &base, rules)
    }

    fn link_to(path: &str, target: &str) -> Change {
        let mut change = added(path, Kind::Link);
        if let Some(new) = change.new.as_mut() {
            new.target = Some(target.into());
        }
        change
    }

    #[test]
    fn a_link_into_the_git_metadata_is_refused_by_any_spelling() {
        for target in [
            ".git/modules/sub/hooks",
            ".git",
            "../.git/hooks",
            "a/../.GIT/config",
            "x/.git./hooks",
            "git~1/hooks",
            ".g\u{200c}it/hooks",
            "..\\.git\\hooks",
        ] {
            let findings = check(vec![link_to("sub", target)], &[]);
            assert!(
                reasons_of(&findings, "sub").contains(&CommitReason::GitPath),
                "{target:?}: {findings:?}"
            );
        }
        for target in [
            "README.md",
            "a/../up",
            ".github/x",
            ".gitignore",
            "git/x",
            "a.git",
        ] {
            let findings = check(vec![link_to("sub", target)], &[]);
            assert!(findings.is_empty(), "{target:?}: {findings:?}");
        }
    }

    fn reasons_of(findings: &[CommitFinding], path: &str) -> BTreeSet<CommitReason> {
        findings
            .iter()
            .filter(|f| f.path == path)
            .map(|f| f.reason)
            .collect()
    }

    /// Each path, added alone as `kind`, is refused for `reason`.
    fn assert_refused(paths: &[&str], kind: Kind, reason: CommitReason) {
        for path in paths {
            let found = check(vec![added(path, kind)], &[]);
            assert!(
                reasons_of(&found, path).contains(&reason),
                "{path:?} as {kind:?} not refused for {reason:?}: {found:?}"
            );
        }
    }

    /// Each path, added alone as `kind`, passes every rule.
    fn assert_passes(paths: &[&str], kind: Kind) {
        for path in paths {
            let found = check(vec![added(path, kind)], &[]);
            assert!(found.is_empty(), "{path:?} as {kind:?} refused: {found:?}");
        }
    }

    const GIT_PATHS: &[&str] = &[
        ".git",
        ".GIT/hooks/x",
        ".Git",
        "sub/.git/hooks/post-checkout",
        ".git\u{200c}",
        "\u{feff}.git",
        ".g\u{200d}i\u{206a}t/config",
        ".gi\u{202e}T",
        ".git.",
        ".git ",
        ".git . .",
        ".git...  ./x",
        ".git::$INDEX_ALLOCATION",
        ".git::$INDEX_ALLOCATION/config",
        ".git:foo",
        ".git . :x",
        "GIT~1/config",
        "git~1",
        "Git~1. ",
        "git~1:stream",
        "a\\.git\\x",
        "a/b\\GIT~1",
        "x/.",
        "x/..",
        "./x",
        "../x",
        "a//b",
        "a/",
        "/a",
    ];

    /// Look-alikes git itself takes (checked against git below when it is installed).
    const LOOK_ALIKES: &[&str] = &[
        ".github/workflows/x",
        ".gitkeep",
        ".gitignore",
        ".gitmodules",
        ".gitattributes",
        "x.git",
        ".git2",
        "git",
        "git~1x",
        "git~2",
        "git~11",
        "gi~1",
        ".g it",
        "..git",
        "...",
        ".git~1",
        ".\u{0147}it",
        "a.git/b",
        "git~1-not",
    ];

    #[test]
    fn every_alias_of_a_git_part_is_refused() {
        assert_refused(GIT_PATHS, Kind::File, CommitReason::GitPath);
        assert_refused(GIT_PATHS, Kind::Link, CommitReason::GitPath);
        assert_refused(GIT_PATHS, Kind::Executable, CommitReason::GitPath);
        for path in GIT_PATHS {
            assert!(!addable(path), "{path:?}");
        }
    }

    #[test]
    fn look_alikes_of_git_parts_pass() {
        assert_passes(LOOK_ALIKES, Kind::File);
        for path in LOOK_ALIKES {
            assert!(addable(path), "{path:?}");
        }
    }

    #[test]
    fn ntfs_short_names_follow_git_exactly() {
        // .git: only git~1.
        assert!(is_ntfs_dotgit(b"git~1"));
        assert!(is_ntfs_dotgit(b"GIT~1 ."));
        assert!(!is_ntfs_dotgit(b"git~2"));
        assert!(!is_ntfs_dotgit(b"git~1x"));
        let gm = |n: &str| is_ntfs_dot_generic(n.as_bytes(), b"gitmodules", b"gi7eba");
        // The regular short name: gitmod~1 .. gitmod~4.
        for n in ["gitmod~1", "GITMOD~4", "gitmod~2 . ", "gitmod~3:x"] {
            assert!(gm(n), "{n}");
        }
        for n in ["gitmod~5", "gitmod~0", "gitmod~1x", "gitmo~1"] {
            assert!(!gm(n), "{n}");
        }
        // The fall-back hashed name: a prefix of gi7eba, ~, 1..9, digits to 8 characters.
        for n in [
            "gi7eba~1", "GI7EBA~9", "gi7eb~12", "gi7e~123", "g~123456", "~1234567",
        ] {
            assert!(gm(n), "{n}");
        }
        for n in [
            "gi7eba~0",
            "gi7eba~",
            "gi7ebb~1",
            "gi7eba~1x",
            "gi7e~12",
            "gi7eba~10",
        ] {
            assert!(!gm(n), "{n}");
        }
        // `.gitmodules` with dots, spaces and a stream.
        for n in [".gitmodules", ".GitModules . .", ".gitmodules:$DATA"] {
            assert!(gm(n), "{n}");
        }
        assert!(!gm(".gitmodulesx"));
        assert!(!gm(".gitmodule"));
    }

    const GITMODULES_LINKS: &[&str] = &[
        ".gitmodules",
        "sub/dir/.gitmodules",
        ".GITMODULES",
        "a/.GitModules",
        "gitmod~1",
        "sub/GITMOD~2",
        "GI7EBA~1",
        "x/gi7eba~4",
        ".gitmodules.",
        ".gitmodules . ",
        ".gitmodules:x",
        ".gitmodules\u{200c}",
        "\u{feff}.gitmodules",
        "sub\\.gitmodules",
        ".gitmodules/x",
    ];

    const META_LINKS: &[&str] = &[
        ".gitattributes",
        "sub/.GITATTRIBUTES",
        "gi7d29~1",
        "gitatt~1",
        ".gitignore",
        "a/b/.GitIgnore .",
        "gi250a~1",
        ".mailmap",
        "maba30~1",
        "mailma~1",
        ".mailmap\u{200e}",
    ];

    #[test]
    fn a_link_named_gitmodules_or_any_alias_is_refused() {
        assert_refused(GITMODULES_LINKS, Kind::Link, CommitReason::GitmodulesLink);
        assert_refused(META_LINKS, Kind::Link, CommitReason::GitmodulesLink);
        // As regular files they are fine (those not also refused for another reason: a
        // `.gitmodules` directory is `gitmodules`, fsck's gitmodulesBlob).
        let files: Vec<&str> = GITMODULES_LINKS
            .iter()
            .chain(META_LINKS)
            .copied()
            .filter(|p| p.is_ascii() && !p.contains('\\') && !p.starts_with(".gitmodules/"))
            .collect();
        assert_passes(&files, Kind::File);
        assert_passes(&files, Kind::Executable);
    }

    #[test]
    fn links_with_similar_names_pass() {
        assert_passes(
            &[
                ".gitmodules2",
                "x.gitmodules",
                "gitmodules",
                ".gitmodule",
                "gitmod~5",
                "gi7eba~0",
                ".gitattributes.d/x",
                ".gitignore-global",
                ".mailmap2",
                "README",
            ],
            Kind::Link,
        );
    }

    #[test]
    fn control_characters_and_backslashes_are_refused() {
        assert_refused(
            &[
                "a\rb",
                "a\nb",
                "sub\r/x",
                "tab\there",
                "nul\0x",
                "del\u{7f}",
                "c1\u{85}",
                "a\\b",
                "trailing\r",
            ],
            Kind::File,
            CommitReason::BadCharacter,
        );
        assert_passes(
            &["docs/ünïcödé.md", "日本語/ファイル", "emoji 😀.txt", "a b"],
            Kind::File,
        );
    }

    #[test]
    fn the_cr_in_a_submodule_path_shape_is_refused() {
        // A path `sub\r` that a git parsing `.gitmodules` with CR stripped reads as `sub`, and
        // a link at `sub` into the metadata (CVE-2025-48384's shape).
        let found = check(
            vec![
                added("sub\r/hooks/post-checkout", Kind::Executable),
                added("sub", Kind::Link),
                added(".gitmodules", Kind::File),
            ],
            &[],
        );
        assert!(
            reasons_of(&found, "sub\r/hooks/post-checkout").contains(&CommitReason::BadCharacter)
        );
        assert!(reasons_of(&found, "sub").is_empty(), "{found:?}");
        assert!(reasons_of(&found, ".gitmodules").is_empty(), "{found:?}");
    }

    #[test]
    fn kinds_a_tree_cannot_hold_are_refused() {
        let found = check(
            vec![
                added("d", Kind::Dir),
                added("p", Kind::Fifo),
                added("s", Kind::Socket),
                added("dev", Kind::Device),
                added("g", Kind::Gitlink),
                modified("g2", Kind::Gitlink, Kind::Gitlink),
                modified("g3", Kind::Gitlink, Kind::File),
                modified("g4", Kind::File, Kind::Gitlink),
                deleted("g5", Kind::Gitlink),
                modified("ok", Kind::File, Kind::Executable),
                deleted("gone", Kind::File),
            ],
            &[
                ("g2", "160000"),
                ("g3", "160000"),
                ("g4", "100644"),
                ("g5", "160000"),
                ("ok", "100644"),
                ("gone", "100644"),
            ],
        );
        let reason = |p: &str| reasons_of(&found, p);
        assert_eq!(reason("d"), [CommitReason::Directory].into());
        for p in ["p", "s", "dev"] {
            assert_eq!(reason(p), [CommitReason::SpecialFile].into(), "{p}");
        }
        for p in ["g", "g2", "g3", "g4", "g5"] {
            assert_eq!(reason(p), [CommitReason::Gitlink].into(), "{p}");
        }
        assert!(reason("ok").is_empty());
        assert!(reason("gone").is_empty());
    }

    #[test]
    fn deletions_get_no_name_rules() {
        // Base holds these (git took them once, before core.protectNTFS, or from elsewhere):
        // removing them is always fine.
        let found = check(
            vec![
                deleted("a\\b", Kind::File),
                deleted("git~1", Kind::File),
                deleted(".gitmodules", Kind::Link),
                deleted("x\ry", Kind::File),
            ],
            &[
                ("a\\b", "100644"),
                ("git~1", "100644"),
                (".gitmodules", "120000"),
                ("x\ry", "100644"),
            ],
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn case_collisions_with_base_and_each_other_are_refused() {
        let base_tree = [
            ("README", "100644"),
            ("docs/y", "100644"),
            ("src/lib.rs", "100644"),
            ("Straße", "100644"),
            ("kelvin", "100644"),
            ("ok/x", "100644"),
        ];
        let found = check(
            vec![
                added("readme", Kind::Link),
                added("Docs/x", Kind::File),
                added("SRC/LIB.RS", Kind::File),
                added("STRASSE", Kind::File),
                added("\u{212a}elvin", Kind::File),
                added("new/A", Kind::File),
                added("new/a", Kind::File),
                added("σ", Kind::File),
                added("ς", Kind::File),
                added("z\u{200c}z", Kind::File),
                added("zz", Kind::File),
                added("ok/y", Kind::File),
            ],
            &base_tree,
        );
        let collided = paths_for(&found, CommitReason::CaseCollision);
        for p in [
            "readme",
            "Docs/x",
            "SRC/LIB.RS",
            "STRASSE",
            "\u{212a}elvin",
            "new/A",
            "new/a",
            "σ",
            "ς",
            "z\u{200c}z",
            "zz",
        ] {
            assert!(collided.contains(p), "{p:?} not refused: {found:?}");
        }
        assert!(!collided.contains("ok/y"), "{found:?}");
        // Nothing else: base's own entries are never findings.
        assert_eq!(collided.len(), 11, "{found:?}");
        let docs = found
            .iter()
            .find(|f| f.path == "Docs/x")
            .map(|f| f.detail.as_str());
        assert_eq!(
            docs,
            Some("\"Docs\" and base's \"docs\" are one name after normalisation and case folding")
        );
    }

    #[test]
    fn a_deletion_or_a_rename_makes_a_collision_go_away() {
        // Base `A` deleted, new `a`: passes.
        let found = check(
            vec![deleted("A", Kind::File), added("a", Kind::File)],
            &[("A", "100644")],
        );
        assert!(found.is_empty(), "{found:?}");
        // Every file of base's `Docs/` removed, new `docs/x`: passes.
        let found = check(
            vec![
                deleted("Docs/a", Kind::File),
                deleted("Docs/b", Kind::File),
                added("docs/x", Kind::File),
            ],
            &[("Docs/a", "100644"), ("Docs/b", "100644")],
        );
        assert!(found.is_empty(), "{found:?}");
        // One left behind: refused.
        let found = check(
            vec![deleted("Docs/a", Kind::File), added("docs/x", Kind::File)],
            &[("Docs/a", "100644"), ("Docs/b", "100644")],
        );
        assert_eq!(
            paths_for(&found, CommitReason::CaseCollision),
            ["docs/x".to_string()].into()
        );
    }

    #[test]
    fn a_collision_base_already_had_is_not_the_agents() {
        // Base holds both `Docs/` and `docs/`; changing a file in `docs/` adds no spelling.
        let base_tree = [
            ("Docs/a", "100644"),
            ("docs/b", "100644"),
            ("README", "100644"),
            ("readme", "100644"),
        ];
        let found = check(
            vec![
                added("docs/c", Kind::File),
                modified("readme", Kind::File, Kind::File),
            ],
            &base_tree,
        );
        assert!(found.is_empty(), "{found:?}");
        // A third spelling is the agent's.
        let found = check(vec![added("DOCS/c", Kind::File)], &base_tree);
        assert_eq!(
            paths_for(&found, CommitReason::CaseCollision),
            ["DOCS/c".to_string()].into()
        );
    }

    #[test]
    fn a_path_beneath_a_file_or_a_file_on_a_directory_is_refused() {
        let base_tree = [
            ("f", "100644"),
            ("l", "120000"),
            ("g", "160000"),
            ("dir/x", "100644"),
            ("moved", "100644"),
        ];
        let found = check(
            vec![
                added("f/x", Kind::File),
                added("l/x/y", Kind::File),
                added("g/x", Kind::File),
                added("dir", Kind::File),
                // A file replaced by a directory: fine.
                deleted("moved", Kind::File),
                added("moved/x", Kind::File),
                // Two new entries, one beneath the other.
                added("n", Kind::Link),
                added("n/x", Kind::File),
            ],
            &base_tree,
        );
        let detail = |p: &str| -> Vec<String> {
            found
                .iter()
                .filter(|f| f.path == p && f.reason == CommitReason::Directory)
                .map(|f| f.detail.clone())
                .collect()
        };
        assert_eq!(detail("f/x"), ["beneath a file \"f\""]);
        assert_eq!(detail("l/x/y"), ["beneath a link \"l\""]);
        assert_eq!(detail("g/x"), ["beneath a gitlink \"g\""]);
        assert_eq!(
            detail("dir"),
            ["a directory in the tree (it holds \"dir/x\")"]
        );
        assert_eq!(detail("n/x"), ["beneath a link \"n\""]);
        assert_eq!(detail("n"), ["a directory in the tree (it holds \"n/x\")"]);
        assert!(detail("moved/x").is_empty(), "{found:?}");
        assert_eq!(found.len(), 6, "{found:?}");
    }

    #[test]
    fn every_manifest_flag_is_a_finding() {
        let mut m = manifest(vec![]);
        m.metadata_changed = true;
        m.agent_commits = vec!["c1".into(), "c2".into()];
        m.link_target_changes = vec!["decl/link".into()];
        m.nested_gitlink_content = vec!["vendor/lib".into()];
        let found = refusals(&m, &Base::default(), Rules::default());
        let got: Vec<(&str, CommitReason, &str)> = found
            .iter()
            .map(|f| (f.path.as_str(), f.reason, f.detail.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (".git", CommitReason::AgentCommits, "c1"),
                (".git", CommitReason::AgentCommits, "c2"),
                (
                    ".git",
                    CommitReason::MetadataChanged,
                    "the metadata is not as seeded"
                ),
                ("decl/link", CommitReason::LinkTargetChanged, ""),
                ("vendor/lib", CommitReason::GitlinkContent, ""),
            ]
        );
    }

    #[test]
    fn every_reason_is_returned_sorted_and_without_duplicates() {
        let mut m = manifest(vec![
            added("z\\.git", Kind::Link),
            added("a/.gitmodules", Kind::Link),
            added("A/x", Kind::File),
        ]);
        m.link_target_changes = vec!["a/.gitmodules".into(), "a/.gitmodules".into()];
        let found = refusals(&m, &Base::default(), Rules::default());
        let mut sorted = found.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(found, sorted);
        assert_eq!(
            reasons_of(&found, "z\\.git"),
            [CommitReason::GitPath, CommitReason::BadCharacter].into()
        );
        assert_eq!(
            reasons_of(&found, "a/.gitmodules"),
            [
                CommitReason::LinkTargetChanged,
                CommitReason::GitmodulesLink,
                CommitReason::CaseCollision
            ]
            .into()
        );
        assert_eq!(
            found
                .iter()
                .filter(|f| f.reason == CommitReason::LinkTargetChanged)
                .count(),
            1
        );
    }

    fn check_with(
        changes: Vec<Change>,
        base_entries: &[(&str, &str)],
        base_links: &[(&str, &str)],
        rules: Rules,
    ) -> Vec<CommitFinding> {
        let base = Base {
            entries: base(base_entries),
            links: base_links
                .iter()
                .map(|(p, t)| (p.as_bytes().to_vec(), t.as_bytes().to_vec()))
                .collect(),
        };
        refusals(&manifest(changes), &base, rules)
    }

    #[test]
    fn a_link_that_leaves_the_tree_is_refused_as_the_seeder_would() {
        let found = check_with(
            vec![
                link_to("escape-link", "../../../../etc/passwd"),
                link_to("proc-link", "/proc/self/environ"),
                link_to("a/up", "../.."),
                link_to("a/chain", "up/x"),
                link_to("meta", ".git/config"),
                link_to("inside", "src/lib.rs"),
                link_to("a/back", "../src"),
                link_to("a/loop", "loop"),
                link_to("dangling", "not/yet/there"),
                // Harmless alone (it leads to the top)...
                link_to("sub/y", ".."),
            ],
            &[("x", "120000"), ("src/lib.rs", "100644")],
            // ...but base's `x` now leads through it, above the top.
            &[("x", "sub/y/../../etc")],
            Rules::default(),
        );
        let escaping = paths_for(&found, CommitReason::LinkEscapes);
        assert_eq!(
            escaping,
            ["escape-link", "proc-link", "a/up", "a/chain", "meta", "x"]
                .map(String::from)
                .into(),
            "{found:?}"
        );
        let proc_link = found.iter().find(|f| f.path == "proc-link").unwrap();
        assert_eq!(
            proc_link.detail,
            "an absolute target \"/proc/self/environ\""
        );
        // Base's links alone are not looked at again when nothing adds a link.
        let found = check_with(
            vec![added("new.txt", Kind::File)],
            &[("x", "120000")],
            &[("x", "../../etc")],
            Rules::default(),
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn names_that_meet_after_normalisation_and_case_folding_collide() {
        let nfc = "caf\u{e9}";
        let nfd = "cafe\u{301}";
        let found = check(
            vec![
                added(nfc, Kind::File),
                added(nfd, Kind::File),
                // An NFD twin of a name base has.
                added("re\u{301}sume\u{301}.md", Kind::File),
                // CVE-2021-21300: a link beside a directory of the other form holding a hook.
                link_to("d\u{e9}j\u{e0}", ".git/hooks"),
                added("de\u{301}ja\u{300}/post-checkout", Kind::Executable),
                // The Angstrom sign and Å, composed and not.
                added("\u{212b}", Kind::File),
                added("A\u{30a}", Kind::File),
                // Case and normalisation together.
                added("\u{c9}COLE", Kind::File),
                added("e\u{301}cole", Kind::File),
                // Compatibility forms stay apart, as on every filesystem.
                added("x\u{2460}", Kind::File),
                added("x1", Kind::File),
            ],
            &[("r\u{e9}sum\u{e9}.md", "100644")],
        );
        let collided = paths_for(&found, CommitReason::CaseCollision);
        for p in [
            nfc,
            nfd,
            "re\u{301}sume\u{301}.md",
            "d\u{e9}j\u{e0}",
            "de\u{301}ja\u{300}/post-checkout",
            "\u{212b}",
            "A\u{30a}",
            "\u{c9}COLE",
            "e\u{301}cole",
        ] {
            assert!(collided.contains(p), "{p:?} not refused: {found:?}");
        }
        assert!(!collided.contains("x\u{2460}") && !collided.contains("x1"));
    }

    #[test]
    fn a_directory_git_would_take_for_a_repository_is_refused() {
        let found = check(
            vec![
                added("evil/HEAD", Kind::File),
                added("evil/config", Kind::File),
                added("evil/objects/info/x", Kind::File),
                added("evil/refs/heads/main", Kind::File),
                added("evil.git/HEAD", Kind::File),
                added("evil.git/objects/ab/cdef", Kind::File),
                added("evil.git/refs/x", Kind::File),
                // Deep, with a commondir naming objects and refs elsewhere.
                added("a/b/c/HEAD", Kind::Link),
                added("a/b/c/commondir", Kind::File),
                // Other cases, as a case-insensitive receiver reads them.
                added("Mixed/head", Kind::File),
                added("Mixed/Refs/x", Kind::File),
                // HEAD beside a config only: refused too (more than git needs).
                added("cfg/HEAD", Kind::File),
                added("cfg/config", Kind::File),
                // The top.
                added("HEAD", Kind::File),
                added("objects", Kind::Executable),
                // Base holds the rest.
                added("fixture/config", Kind::File),
                // Not a repository: HEAD alone, or the parts without HEAD.
                added("lonely/HEAD", Kind::File),
                added("lonely/README", Kind::File),
                added("parts/objects/x", Kind::File),
                added("parts/refs/y", Kind::File),
                added("parts/config", Kind::File),
                // Beside base's repository-shaped directory, not in it.
                added("kept/readme", Kind::File),
            ],
            &[
                ("fixture/HEAD", "100644"),
                ("fixture/refs/heads/main", "100644"),
                ("kept/repo.git/HEAD", "100644"),
                ("kept/repo.git/objects/x", "100644"),
                ("kept/repo.git/refs/y", "100644"),
            ],
        );
        let repositories = paths_for(&found, CommitReason::NestedRepository);
        assert_eq!(
            repositories,
            ["evil", "evil.git", "a/b/c", "Mixed", "cfg", ".", "fixture"]
                .map(String::from)
                .into(),
            "{found:?}"
        );
        let evil = found.iter().find(|f| f.path == "evil").unwrap();
        assert!(
            evil.detail.starts_with("HEAD beside objects, refs, config"),
            "{evil:?}"
        );
    }

    #[test]
    fn non_portable_names_are_refused_unless_a_runner_allows_them() {
        let changes = || {
            vec![
                added("CON", Kind::File),
                added("src/aux.c", Kind::File),
                added("a:b", Kind::File),
                added("trailing.", Kind::File),
                added("fine.txt", Kind::File),
            ]
        };
        let found = check_with(changes(), &[], &[], Rules::default());
        assert_eq!(
            paths_for(&found, CommitReason::NonPortable),
            ["CON", "src/aux.c", "a:b", "trailing."]
                .map(String::from)
                .into()
        );
        let allowed = Rules {
            allow_non_portable: true,
        };
        assert!(check_with(changes(), &[], &[], allowed).is_empty());
        // Names base already holds are base's: editing `aux.c`, adding beside base's `CON/`.
        let found = check_with(
            vec![
                modified("aux.c", Kind::File, Kind::File),
                added("CON/new.txt", Kind::File),
                added("CON/a:b", Kind::File),
            ],
            &[("aux.c", "100644"), ("CON/old.txt", "100644")],
            &[],
            Rules::default(),
        );
        assert_eq!(
            found
                .iter()
                .map(|f| (f.path.as_str(), f.reason))
                .collect::<Vec<_>>(),
            [("CON/a:b", CommitReason::NonPortable)],
            "{found:?}"
        );
    }

    #[test]
    fn a_directory_named_gitmodules_or_gitattributes_is_refused() {
        let found = check(
            vec![
                added(".gitmodules/x", Kind::File),
                added("sub/.GitAttributes/y", Kind::File),
                added("gitmod~1/z", Kind::File),
                added(".gitmodules", Kind::File),
            ],
            &[],
        );
        assert_eq!(
            paths_for(&found, CommitReason::Gitmodules),
            [".gitmodules/x", "gitmod~1/z"].map(String::from).into()
        );
        assert_eq!(
            paths_for(&found, CommitReason::Gitattributes),
            ["sub/.GitAttributes/y"].map(String::from).into()
        );
    }

    /// How fast is `cordon bench audit`'s (the commit of 10,000 changes against git's); here
    /// only that inputs at the bounds are judged, whatever the machine's load.
    #[test]
    fn large_inputs_are_judged() {
        // 2,000,000 base entries and 10,000 changes, many in the same directories.
        let base_tree: Vec<(String, String)> = (0..2_000_000)
            .map(|i| {
                (
                    format!("d{}/s{}/f{i}", i % 100, i % 7),
                    "100644".to_string(),
                )
            })
            .collect();
        let changes: Vec<Change> = (0..10_000)
            .map(|i| added(&format!("d{}/s{}/new{i}", i % 100, i % 7), Kind::File))
            .collect();
        let base = Base {
            entries: base_tree,
            links: BTreeMap::new(),
        };
        let found = refusals(&manifest(changes), &base, Rules::default());
        assert!(found.is_empty(), "{:?}", &found[..found.len().min(3)]);
        // Deep paths: 10,000 new entries of 50 levels each.
        let deep: Vec<Change> = (0..10_000)
            .map(|i| added(&format!("{i}/{}", ["a"; 50].join("/")), Kind::File))
            .collect();
        assert!(refusals(&manifest(deep), &Base::default(), Rules::default()).is_empty());
    }

    /// git as the oracle: with core.protectNTFS and core.protectHFS, `update-index` refuses
    /// every GitPath spelling and every gitmodules-link spelling, and takes the look-alikes;
    /// `fsck` (its link messages made errors) reports the attributes/ignore/mailmap links.
    #[test]
    fn git_agrees() {
        // git is what the host runs for every audit: without it this fails, never skips.
        let repo = Repo::new().expect("git, to cross-check against");
        let blob = repo.blob();
        let index = |mode: &str, path: &str| {
            repo.git(&[
                "-c",
                "core.protectNTFS=true",
                "-c",
                "core.protectHFS=true",
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("{mode},{blob},{path}"),
            ])
        };
        for path in GIT_PATHS {
            assert!(!index("100644", path), "git takes {path:?}");
        }
        for path in LOOK_ALIKES {
            assert!(index("100644", path), "git refuses {path:?}");
        }
        for path in GITMODULES_LINKS {
            assert!(!index("120000", path), "git takes the link {path:?}");
        }
        for path in [".gitmodules2", "gitmod~5", "gi7eba~0", "x.gitmodules"] {
            assert!(index("120000", path), "git refuses the link {path:?}");
        }
        for name in META_LINKS.iter().map(|p| p.rsplit('/').next().unwrap_or(p)) {
            assert!(
                !repo.fsck_link(name, &blob),
                "git fsck takes the link {name:?}"
            );
        }
        for name in [".gitkeep", ".mailmap2", ".gitignore-global"] {
            assert!(
                repo.fsck_link(name, &blob),
                "git fsck refuses the link {name:?}"
            );
        }
    }

    /// A scratch repository under the temp dir, removed on drop.
    struct Repo {
        dir: std::path::PathBuf,
    }

    impl Repo {
        fn new() -> Option<Repo> {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("cordon-test-paths-{}-{n}", std::process::id()));
            let repo = Repo { dir };
            let _ = std::fs::remove_dir_all(&repo.dir);
            std::fs::create_dir_all(&repo.dir).ok()?;
            repo.git(&["init", "-q"]).then_some(repo)
        }

        fn command(&self, args: &[&str]) -> std::process::Command {
            let mut cmd = std::process::Command::new("git");
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &self.dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .current_dir(&self.dir)
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null());
            cmd
        }

        fn run(&self, args: &[&str], input: &str) -> Option<String> {
            use std::io::Write;
            let mut child = self.command(args).spawn().ok()?;
            child.stdin.take()?.write_all(input.as_bytes()).ok()?;
            let out = child.wait_with_output().ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        }

        fn git(&self, args: &[&str]) -> bool {
            self.run(args, "").is_some()
        }

        fn blob(&self) -> String {
            self.run(&["hash-object", "-w", "--stdin"], "target\n")
                .expect("git hash-object")
        }

        /// Whether `git fsck` passes a repository holding only a tree with one link `name`.
        fn fsck_link(&self, name: &str, blob: &str) -> bool {
            let repo = Repo::new().expect("a scratch repository");
            let blob_here = repo.blob();
            assert_eq!(blob_here, blob);
            repo.run(&["mktree"], &format!("120000 blob {blob}\t{name}\n"))
                .expect("git mktree");
            repo.git(&[
                "-c",
                "fsck.gitmodulesSymlink=error",
                "-c",
                "fsck.gitattributesSymlink=error",
                "-c",
                "fsck.gitignoreSymlink=error",
                "-c",
                "fsck.mailmapSymlink=error",
                "fsck",
                "--no-dangling",
            ])
        }
    }

    impl Drop for Repo {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
