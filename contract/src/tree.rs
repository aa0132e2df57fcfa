//! The tree reader's contract: what the host asks cordon-init's `tree` roles (run in a read-only,
//! no-network container over task storage), what they answer (one JSON document on stdout), the
//! limits both sides hold, and the pure rules both sides derive the same way (the pins above
//! nested gitlinks, the names a mount can carry).
//!
//! Paths are relative to /work, `/`-separated, without empty, `.` or `..` parts; `.` alone is the
//! root itself (a finding about the whole tree). A path that is not UTF-8 is reported in its
//! quoted form ([`quote`]) and never used as a mount target.

use serde::{Deserialize, Serialize};

/// At most this many gitlinks get a mask (seeds: 256).
pub const MAX_GITLINKS: usize = 256;
/// At most this many pinned directories (seeds: 256).
pub const MAX_PINS: usize = 256;
/// At most this many bytes of mount targets (gitlink masks and pins together).
pub const MAX_MOUNT_PATH_BYTES: usize = 128 * 1024;
/// Past this many differences the check stops reading: the tree is refused, not listed.
pub const MAX_UNACCOUNTED: usize = 10_000;
/// At most this many reasons are listed in full; the rest are counted.
pub const MAX_LISTED_REASONS: usize = 256;
/// At most this many declared operations, and declared paths for a link snapshot.
pub const MAX_OPERATIONS: usize = 256;
pub const MAX_DECLARED_PATHS: usize = 256;
/// A declared path or a reported name is at most this long (bytes).
pub const MAX_PATH_BYTES: usize = 1024;
/// A link snapshot records at most this many target entries in all.
pub const MAX_RECORDED_TARGETS: usize = 20_000;
/// The reader's answer is at most this long on stdout: 20,000 recorded targets with paths of a
/// few hundred bytes each fit; past it the reader fails, and says so.
pub const MAX_REPORT_BYTES: usize = 8 * 1024 * 1024;
/// The role names (argv[1] is `tree`, argv[2] one of these).
pub const ROLE: &str = "tree";
pub const CHECK: &str = "check";
pub const SNAPSHOT_LINKS: &str = "snapshot-links";

/// A declared file operation of the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    pub kind: OpKind,
    pub path: String,
    /// The source of a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Add,
    Edit,
    Delete,
    Rename,
}

/// Why the tree is refused. Each is a stable id; the path says where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// An entry base does not have (untracked or ignored; an empty directory too).
    Untracked,
    /// An entry of base that is not there.
    Missing,
    /// A file or link whose content is not base's blob.
    ContentChanged,
    /// A file whose executable bit is not base's.
    ModeChanged,
    /// An entry of another type than base's (a directory replaced by a link shows here).
    TypeChanged,
    /// A gitlink directory that is not empty.
    GitlinkContent,
    /// Something the reader could not open or read.
    Unreadable,
    /// More than [`MAX_UNACCOUNTED`] differences: the reader stopped.
    TooManyChanges,
    /// The metadata's HEAD is not base.
    HeadMoved,
    /// The metadata's digest is not the seeder's baseline.
    MetadataChanged,
    /// More than [`MAX_GITLINKS`] gitlinks.
    GitlinkLimit,
    /// A gitlink name a mount cannot carry (a comma, a double quote, a control character, not UTF-8).
    GitlinkName,
    /// More than [`MAX_PINS`] pinned directories.
    PinLimit,
    /// More than [`MAX_MOUNT_PATH_BYTES`] of mount targets.
    MountPathsLimit,
    /// An add or rename destination that is taken.
    DestinationTaken,
    /// An edit, delete or rename source that is not a file or symlink of base (missing, a
    /// directory).
    SourceNotFile,
    /// An edit, delete or rename source that is a gitlink.
    SourceGitlink,
    /// A declared path beneath a file, symlink or gitlink of base.
    BeneathNonDirectory,
    /// A declared path that is not a clean relative path of at most [`MAX_PATH_BYTES`].
    BadPath,
    /// A declared link whose resolution passes through another link (a write through it would
    /// land where its target does not cover).
    ThroughLink,
    /// A changed name or link target the manifest cannot carry ([`crate::audit::reportable`]).
    BadName,
    /// More than [`MAX_RECORDED_TARGETS`] entries recorded beneath declared links.
    TooManyTargets,
    /// Base is not a commit in the storage's metadata.
    BaseNotCommit,
}

impl Reason {
    pub fn id(self) -> &'static str {
        match self {
            Reason::Untracked => "untracked",
            Reason::Missing => "missing",
            Reason::ContentChanged => "content-changed",
            Reason::ModeChanged => "mode-changed",
            Reason::TypeChanged => "type-changed",
            Reason::GitlinkContent => "gitlink-content",
            Reason::Unreadable => "unreadable",
            Reason::TooManyChanges => "too-many-changes",
            Reason::HeadMoved => "head-moved",
            Reason::MetadataChanged => "metadata-changed",
            Reason::GitlinkLimit => "gitlink-limit",
            Reason::GitlinkName => "gitlink-name",
            Reason::PinLimit => "pin-limit",
            Reason::MountPathsLimit => "mount-paths-limit",
            Reason::DestinationTaken => "destination-taken",
            Reason::SourceNotFile => "source-not-file",
            Reason::SourceGitlink => "source-gitlink",
            Reason::BeneathNonDirectory => "beneath-non-directory",
            Reason::BadPath => "bad-path",
            Reason::ThroughLink => "through-link",
            Reason::BadName => "bad-name",
            Reason::TooManyTargets => "too-many-targets",
            Reason::BaseNotCommit => "base-not-commit",
        }
    }
}

/// One reason the tree is refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// The path, quoted when it is not UTF-8 ([`quote`]). First: findings order by path, then
    /// reason.
    pub path: String,
    pub reason: Reason,
    /// Expected and observed, in a few words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// What `tree check` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// HEAD as the metadata holds it (a detached commit id), if it could be read.
    pub head: Option<String>,
    /// The metadata's digest (the `digest` role's, over /work/.git).
    pub metadata_digest: String,
    /// Entries of base's index compared.
    pub entries: u64,
    /// Base's gitlinks, in index order (quoted when not UTF-8).
    pub gitlinks: Vec<String>,
    /// Every reason found, in path order, at most [`MAX_LISTED_REASONS`].
    pub findings: Vec<Finding>,
    /// Reasons found beyond those listed.
    pub more: u64,
}

/// What a declared path is in the work tree, as the agent's kernel would see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    Missing,
    File,
    Executable,
    Dir,
    Link,
    Special,
}

/// Where a declared link resolves, one component at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resolution {
    /// To an entry inside the work tree (which exists).
    Inside,
    /// To a path inside the work tree that does not exist (yet).
    Dangling,
    /// Into /work/.git.
    Metadata,
    /// Outside /work (absolute elsewhere, or above it).
    Outside,
    /// More than [`crate::paths::MAX_LINK_HOPS`] links.
    Loop,
}

/// One entry at or beneath a link's target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetEntry {
    /// Relative to /work.
    pub path: String,
    pub kind: EntryKind,
    /// git's blob id of a file's bytes or a link's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

/// One declared path in a link snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredLink {
    pub path: String,
    /// What the declared path itself is (only a `link` has the rest).
    pub kind: EntryKind,
    /// The link's target as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// Where it resolves, relative to /work (inside, dangling or metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// A link lies on the way, the target is a link, or a link lies inside a directory target.
    pub through_link: bool,
    /// The target and everything beneath it, in path order.
    #[serde(default)]
    pub target_state: Vec<TargetEntry>,
}

/// What `tree snapshot-links` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSnapshot {
    pub metadata_digest: String,
    pub links: Vec<DeclaredLink>,
}

/// What the reader prints when it cannot do its job (not a refusal: the check failing to run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaderFailure {
    pub failure: String,
}

/// A path as reported: itself when UTF-8, else its bytes with every non-ASCII byte escaped
/// (`a\xffb` for the bytes `a`, 0xff, `b`), which no mount takes ([`mountable`] refuses `\\`).
pub fn quote(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.escape_ascii().to_string(),
    }
}

/// A clean relative path: not empty, at most [`MAX_PATH_BYTES`], no empty, `.` or `..` part, no
/// NUL, no leading or trailing `/`, not `.git` or beneath it.
pub fn clean_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH_BYTES
        && !path.contains('\0')
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && path.split('/').next() != Some(".git")
}

/// A name a mount target can carry: clean, no comma or double quote (Docker's `--mount` syntax),
/// no control character and no backslash (mountinfo's escapes; and a [`quote`]d name that was not
/// UTF-8 holds one, so it is never taken for a real name).
pub fn mountable(path: &str) -> bool {
    clean_path(path)
        && !path
            .chars()
            .any(|c| c == ',' || c == '"' || c == '\\' || c.is_control())
}

/// The directories pinned for these gitlinks: every directory above a nested gitlink, below the
/// top level, sorted and once each. A top-level gitlink needs none (/work is a mountpoint).
pub fn pins_of(gitlinks: &[String]) -> Vec<String> {
    let mut pins = std::collections::BTreeSet::new();
    for gitlink in gitlinks {
        let mut at = gitlink.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            pins.insert(parent.to_owned());
            at = parent;
        }
    }
    pins.into_iter().collect()
}

/// The directories that must not grant REMOVE_DIR when these are pinned: each pin's parent (""
/// is /work itself), sorted and once each.
pub fn pinned_parents(pins: &[String]) -> Vec<String> {
    let mut parents = std::collections::BTreeSet::new();
    for pin in pins {
        parents.insert(
            pin.rsplit_once('/')
                .map(|(p, _)| p.to_owned())
                .unwrap_or_default(),
        );
    }
    parents.into_iter().collect()
}

/// The bytes of mount targets the masks and pins take (`/work/` and the path, each).
pub fn mount_path_bytes(gitlinks: &[String], pins: &[String]) -> usize {
    gitlinks
        .iter()
        .chain(pins)
        .map(|p| crate::paths::WORK.len() + 1 + p.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_every_directory_above_a_nested_gitlink() {
        let gitlinks = vec!["top".to_owned(), "a/b/sub".to_owned(), "a/c".to_owned()];
        assert_eq!(pins_of(&gitlinks), vec!["a", "a/b"]);
        assert_eq!(pinned_parents(&pins_of(&gitlinks)), vec!["", "a"]);
        assert!(pins_of(&["top".to_owned()]).is_empty());
        assert_eq!(
            mount_path_bytes(&gitlinks, &pins_of(&gitlinks)),
            "/work/top/work/a/b/sub/work/a/c/work/a/work/a/b".len()
        );
    }

    #[test]
    fn a_mount_carries_only_clean_names_without_commas_quotes_or_controls() {
        for good in ["sub", "a/b", "vendor/lib-1.2", "ünïcode"] {
            assert!(mountable(good), "{good}");
        }
        for bad in [
            "", "a,b", "a\"b", "a\nb", "a\tb", "/abs", "a/", "a//b", "./a", "a/../b", "..", ".git",
            ".git/x", "a\u{7f}", "a\\xffb",
        ] {
            assert!(!mountable(bad), "{bad:?}");
        }
        assert!(!mountable(&"a".repeat(MAX_PATH_BYTES + 1)));
    }

    #[test]
    fn a_path_that_is_not_utf8_is_quoted() {
        assert_eq!(quote(b"plain"), "plain");
        assert_eq!(quote(b"a\xffb"), "a\\xffb");
    }

    #[test]
    fn reasons_serialize_as_their_ids() {
        for reason in [
            Reason::Untracked,
            Reason::BeneathNonDirectory,
            Reason::HeadMoved,
        ] {
            assert_eq!(
                serde_json::to_string(&reason).unwrap(),
                format!("\"{}\"", reason.id())
            );
        }
    }
}
