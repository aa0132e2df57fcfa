//! The post-run change audit's contract: what `cordon-init tree inspect` answers (every
//! difference between the work tree and base, each new file with the blob id a commit would
//! store), the manifest the host builds from it, and the name rule both sides hold.
//!
//! Paths are as in [`crate::tree`]: relative to /work, `/`-separated, no empty, `.` or `..` part.
//! A changed name is reported only when [`reportable`]: otherwise the reader refuses the whole
//! answer (`bad-name`), it never reports a part.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::tree::{DeclaredLink, Finding, MAX_PATH_BYTES};

/// The role name (argv: `tree inspect <BASE> <RULES_JSON> [<DECLARED_PATH>...]`): base's own
/// ignore rules come from the host, read from base's objects, never from the work tree's
/// `.gitignore` files (the agent may have changed them).
pub const INSPECT: &str = "inspect";
/// At most this many changes (a populated gitlink directory counts as one).
pub const MAX_CHANGES: usize = 10_000;
/// The role name (argv as [`INSPECT`]'s): the inspection, then the content of every change that
/// has some written as one tar at [`CONTENT_FILE`], for the commit and the diff export.
pub const INSPECT_CONTENT: &str = "inspect-content";
/// Where `inspect-content` writes its tar: on a scratch volume only that reader mounts (the image
/// holds the directory, world-writable with the sticky bit, and the engine copies its mode into
/// the fresh volume).
pub const CONTENT_DIR: &str = "/var/tmp";
pub const CONTENT_FILE: &str = "/var/tmp/content.tar";
/// The content a commit takes at most (files' bytes and links' targets); past it
/// `inspect-content`'s tar holds no entry and the host refuses the commit from the manifest.
pub const MAX_CONTENT_BYTES: u64 = 512 * 1024 * 1024;
/// Base's ignore rules travel in one argv element: at most this many bytes of JSON (the kernel
/// takes 128 KiB per argument).
pub const MAX_IGNORE_RULES_BYTES: usize = 96 * 1024;
/// At most this many `.gitignore` files of base are read for the rules.
pub const MAX_IGNORE_FILES: usize = 256;

/// Base's own ignore rules: the text of every `.gitignore` in base's tree, by the directory that
/// holds it (`""` for the top), read from base's objects on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreRules {
    pub files: Vec<IgnoreFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreFile {
    /// The directory holding it, relative to /work; `""` for the top.
    pub dir: String,
    pub text: String,
}

/// What an entry is, on one side of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A regular file, mode 100644.
    File,
    /// A regular file with an executable bit, mode 100755.
    Executable,
    /// A symbolic link, mode 120000 (its target is the blob).
    Link,
    /// A gitlink of base, mode 160000.
    Gitlink,
    /// A directory: new and ignored by base's rules (one entry for all beneath it), or new and
    /// empty. A tree cannot hold either.
    Dir,
    Fifo,
    Socket,
    /// A character or block device.
    Device,
}

impl Kind {
    /// git's mode for the kinds a tree holds.
    pub fn git_mode(self) -> Option<&'static str> {
        match self {
            Kind::File => Some("100644"),
            Kind::Executable => Some("100755"),
            Kind::Link => Some("120000"),
            Kind::Gitlink => Some("160000"),
            _ => None,
        }
    }
}

/// One side of a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Side {
    pub kind: Kind,
    /// git's blob id (sha1 of `blob <size>\0` and the bytes as read, no filters) of a file's
    /// content or a link's target; a gitlink's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// A file's size in bytes, as read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A link's target as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// One difference between the work tree and base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub path: String,
    /// What base has there (none: added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Side>,
    /// What the work tree has there (none: deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Side>,
    /// New, and ignored by base's rules.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// For a new link: its target, resolved one component at a time as the agent's kernel
    /// would, passes through a link or is one; outside the work tree or in the metadata counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target_traverses_link: Option<bool>,
}

/// What `tree inspect` answers. Non-empty `findings` refuse the whole answer (the changes are
/// then empty): too many changes, a name that cannot be reported, too many recorded targets,
/// anything unreadable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectReport {
    /// HEAD as the metadata holds it, if readable.
    pub head: Option<String>,
    pub metadata_digest: String,
    /// Entries of base's index compared.
    pub entries: u64,
    /// Every change, in path order (byte order of the paths).
    pub changes: Vec<Change>,
    /// Base's gitlinks whose directory is not empty (each also a change).
    pub nested_gitlink_content: Vec<String>,
    /// The declared paths, snapshotted now (compared with the snapshot taken before the run).
    pub links: Vec<DeclaredLink>,
    pub findings: Vec<Finding>,
    pub more: u64,
}

/// The change manifest: what an execute or fix run changed, as the audit read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub base: String,
    pub changes: Vec<Change>,
    /// Commits the metadata holds beyond base (the metadata is read-only to agents: any means a
    /// protection failed).
    pub agent_commits: Vec<String>,
    /// The metadata is not as seeded: nothing else was read and every list is empty.
    pub metadata_changed: bool,
    /// Declared links whose target or target state is not what the snapshot before the run held.
    pub link_target_changes: Vec<String>,
    pub nested_gitlink_content: Vec<String>,
    /// `sha256:` over the manifest's canonical JSON without this field ([`Manifest::digest_of`]).
    pub digest: String,
}

impl Manifest {
    /// The digest of everything but `digest`: the same manifest always gives the same digest.
    pub fn digest_of(&self) -> String {
        let mut copy = self.clone();
        copy.digest = String::new();
        // Serialising plain structs, vectors and strings cannot fail.
        let text = serde_json::to_vec(&copy).unwrap_or_default();
        format!("sha256:{}", hex::encode(Sha256::digest(&text)))
    }

    /// This manifest with its digest set.
    pub fn sealed(mut self) -> Self {
        self.digest = self.digest_of();
        self
    }

    /// Anything that routes the task to a person before any commit.
    pub fn needs_person(&self) -> bool {
        self.metadata_changed
            || !self.agent_commits.is_empty()
            || !self.link_target_changes.is_empty()
            || !self.nested_gitlink_content.is_empty()
    }
}

/// Why a commit is refused. Each is a stable id; the finding's path says where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommitReason {
    /// The inspection's digest is not the approved one: the tree changed after the audit.
    DigestMismatch,
    AgentCommits,
    MetadataChanged,
    LinkTargetChanged,
    GitlinkContent,
    /// A directory entry (ignored or empty): a tree cannot hold it.
    Directory,
    /// A fifo, socket or device.
    SpecialFile,
    /// A path with a `.git` part, or any alias of one (case, HFS ignorables, NTFS short names,
    /// trailing dots or spaces, alternate streams); or a new link whose target has one.
    GitPath,
    /// A symlink named `.gitmodules` (or an alias of it).
    GitmodulesLink,
    /// CR, LF or another control character, or a backslash, in a path.
    BadCharacter,
    /// Two entries of the resulting tree that are one name after Unicode normalisation and case
    /// folding together (NFC and NFD twins, `ß` and `ss`, the Kelvin sign and `K`).
    CaseCollision,
    /// A gitlink added, changed or removed: the audit never commits one.
    Gitlink,
    /// Content streamed out for the commit that is not what the inspection hashed (a file
    /// swapped or changed during the reading).
    ContentMismatch,
    /// A link with an absolute target, or one that leaves the tree as the kernel would resolve
    /// it in the resulting tree (the seeder's rule): cordon's own seeding would refuse the result.
    LinkEscapes,
    /// A directory git would discover as a repository (a `HEAD` beside `objects`, `refs`,
    /// `commondir` or `config`), bare or not, at any depth: its config runs code on a receiver.
    NestedRepository,
    /// A `.gitmodules` git's fsck refuses (a `..` or empty name, a path or url that is an
    /// option, a url that decodes to a line break or escapes with `../`, `update = !command`),
    /// that does not parse, is too large, or is not a file.
    Gitmodules,
    /// A `.gitattributes` with a line git will not parse (2,048 bytes or more), or not a file.
    Gitattributes,
    /// `git fsck --strict` refused the commit (git's message in the detail).
    Fsck,
    /// A name a Windows or macOS checkout cannot hold (a reserved device name, a trailing dot or
    /// space, `:` and the other characters Windows refuses); a runner may allow them for a
    /// repository that never leaves Linux.
    NonPortable,
}

impl CommitReason {
    pub fn id(self) -> &'static str {
        match self {
            CommitReason::DigestMismatch => "digest-mismatch",
            CommitReason::AgentCommits => "agent-commits",
            CommitReason::MetadataChanged => "metadata-changed",
            CommitReason::LinkTargetChanged => "link-target-changed",
            CommitReason::GitlinkContent => "gitlink-content",
            CommitReason::Directory => "directory",
            CommitReason::SpecialFile => "special-file",
            CommitReason::GitPath => "git-path",
            CommitReason::GitmodulesLink => "gitmodules-link",
            CommitReason::BadCharacter => "bad-character",
            CommitReason::CaseCollision => "case-collision",
            CommitReason::Gitlink => "gitlink",
            CommitReason::ContentMismatch => "content-mismatch",
            CommitReason::LinkEscapes => "link-escapes",
            CommitReason::NestedRepository => "nested-repository",
            CommitReason::Gitmodules => "gitmodules",
            CommitReason::Gitattributes => "gitattributes",
            CommitReason::Fsck => "fsck",
            CommitReason::NonPortable => "non-portable",
        }
    }
}

/// One reason a commit is refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitFinding {
    pub path: String,
    pub reason: CommitReason,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// Why a changed name (or a link target) cannot be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreportable {
    TooLong,
    NotUtf8,
    /// A Unicode control (Cc), format (Cf), line (Zl) or paragraph (Zp) separator, or an
    /// unassigned (Cn) character.
    Character(char),
}

impl std::fmt::Display for Unreportable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreportable::TooLong => write!(f, "longer than {MAX_PATH_BYTES} bytes"),
            Unreportable::NotUtf8 => write!(f, "not UTF-8"),
            Unreportable::Character(c) => write!(f, "holds U+{:04X}", u32::from(*c)),
        }
    }
}

/// A change whose new side has content a commit stores: a file's bytes or a link's target.
pub fn needs_content(change: &Change) -> bool {
    matches!(
        change.new.as_ref().map(|s| s.kind),
        Some(Kind::File | Kind::Executable | Kind::Link)
    )
}

/// The content `changes` hold: each file's size and each link's target length, as the
/// manifest says (saturating).
pub fn content_bytes(changes: &[Change]) -> u64 {
    changes
        .iter()
        .filter(|c| needs_content(c))
        .filter_map(|c| c.new.as_ref())
        .map(|new| match new.kind {
            Kind::Link => new.target.as_ref().map_or(0, |t| t.len() as u64),
            _ => new.size.unwrap_or(0),
        })
        .fold(0u64, u64::saturating_add)
}

/// A changed name or link target the manifest can carry: at most [`MAX_PATH_BYTES`], strict
/// UTF-8, and no control, format, separator or unassigned character.
pub fn reportable(bytes: &[u8]) -> Result<&str, Unreportable> {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    if bytes.len() > MAX_PATH_BYTES {
        return Err(Unreportable::TooLong);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Unreportable::NotUtf8)?;
    match text.chars().find(|&c| {
        matches!(
            get_general_category(c),
            G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator | G::Unassigned
        )
    }) {
        Some(c) => Err(Unreportable::Character(c)),
        None => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_the_bound_pass_and_one_byte_more_does_not() {
        assert!(reportable("a".repeat(MAX_PATH_BYTES).as_bytes()).is_ok());
        assert_eq!(
            reportable("a".repeat(MAX_PATH_BYTES + 1).as_bytes()),
            Err(Unreportable::TooLong)
        );
        // Multi-byte characters count in bytes.
        assert!(reportable("é".repeat(MAX_PATH_BYTES / 2).as_bytes()).is_ok());
        assert!(reportable(format!("{}a", "é".repeat(MAX_PATH_BYTES / 2)).as_bytes()).is_err());
    }

    #[test]
    fn every_refused_class_is_refused() {
        assert_eq!(reportable(b"a\xffb"), Err(Unreportable::NotUtf8));
        // Overlong and surrogate encodings are not strict UTF-8.
        assert_eq!(reportable(b"\xc0\xaf"), Err(Unreportable::NotUtf8));
        assert_eq!(reportable(b"\xed\xa0\x80"), Err(Unreportable::NotUtf8));
        for c in [
            '\n',
            '\r',
            '\t',
            '\u{7f}',
            '\u{85}',
            '\u{200b}',
            '\u{200e}',
            '\u{202e}',
            '\u{feff}',
            '\u{2028}',
            '\u{2029}',
            '\u{e0001}',
            '\u{0378}',
            '\u{10ffff}',
        ] {
            let name = format!("a{c}b");
            assert_eq!(
                reportable(name.as_bytes()),
                Err(Unreportable::Character(c)),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn ordinary_names_in_any_script_pass() {
        for name in [
            "src/main.rs",
            "docs/ünïcödé.md",
            "日本語/ファイル",
            "emoji 😀.txt",
            "a b",
        ] {
            assert_eq!(reportable(name.as_bytes()), Ok(name));
        }
    }

    #[test]
    fn the_digest_covers_every_field_but_itself() {
        let manifest = Manifest {
            base: "a".repeat(40),
            changes: vec![],
            agent_commits: vec![],
            metadata_changed: false,
            link_target_changes: vec![],
            nested_gitlink_content: vec![],
            digest: String::new(),
        }
        .sealed();
        assert!(manifest.digest.starts_with("sha256:"));
        assert_eq!(manifest.clone().sealed().digest, manifest.digest);
        let mut other = manifest.clone();
        other.metadata_changed = true;
        assert_ne!(other.digest_of(), manifest.digest);
    }
}
