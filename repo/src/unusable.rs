//! Why a repository cannot be seeded.

/// Why a repository cannot be seeded. Report it to the user as a repository the agent cannot run
/// on; do not retry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "unusable", rename_all = "kebab-case")]
pub enum Unusable {
    AbsoluteLink {
        path: String,
        target: String,
    },
    EscapingLink {
        path: String,
        reaches: String,
    },
    MetadataLink {
        path: String,
    },
    /// A file of the git metadata with more than one link (it is also elsewhere) that is not
    /// verifiably what its name says.
    MetadataHardLink {
        path: String,
        links: u64,
        reason: String,
    },
    BadName {
        path: String,
    },
    /// A loose object the checkout needs that is not the blob the tree names there (read back
    /// by the seeder).
    CorruptObject {
        object: String,
        path: String,
        reason: String,
    },
    Alternates,
    NotARepository {
        path: String,
        reason: String,
    },
    TooLarge {
        what: String,
        needs_bytes: u64,
        needs_inodes: u64,
        limit_bytes: u64,
        limit_inodes: u64,
    },
}

impl Unusable {
    /// The stable id.
    pub fn id(&self) -> &'static str {
        match self {
            Unusable::AbsoluteLink { .. } => "repo-absolute-link",
            Unusable::EscapingLink { .. } => "repo-escaping-link",
            Unusable::MetadataLink { .. } | Unusable::MetadataHardLink { .. } => {
                "repo-metadata-link"
            }
            Unusable::BadName { .. } => "repo-bad-name",
            Unusable::CorruptObject { .. } => "repo-corrupt-object",
            Unusable::Alternates => "repo-alternates",
            Unusable::NotARepository { .. } => "repo-not-a-repository",
            Unusable::TooLarge { .. } => "repo-too-large",
        }
    }
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::AbsoluteLink { path, target } => write!(f, "the link {path:?} has an absolute target {target:?}"),
            Unusable::EscapingLink { path, reaches } => write!(f, "the link {path:?} leads out of the checkout, to {reaches}"),
            Unusable::MetadataLink { path } => write!(f, "the git metadata holds a link or special file at {path:?}"),
            Unusable::MetadataHardLink { path, links, reason } => write!(f, "the git metadata file {path:?} has {links} links, and {reason}"),
            Unusable::BadName { path } => write!(f, "git would not check out {path:?}"),
            Unusable::CorruptObject { object, path, reason } => write!(f, "the loose object {object} (the tree's {path:?}) is not the blob the tree names: {reason}"),
            Unusable::Alternates => write!(f, "the object store borrows objects from another (objects/info/alternates)"),
            Unusable::NotARepository { path, reason } => write!(f, "{path}: {reason}"),
            Unusable::TooLarge { what, needs_bytes, needs_inodes, limit_bytes, limit_inodes } => write!(
                f,
                "the {what} needs {needs_bytes} bytes and {needs_inodes} entries; the limit is {limit_bytes} bytes and {limit_inodes} entries"
            ),
        }
    }
}
