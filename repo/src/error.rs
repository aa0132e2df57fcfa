//! The repository side's error type. The library (`cordon`) takes each variant onto its own of
//! the same name, so a runner sees one error type and the stable ids do not move.

use cordon_contract::audit::CommitFinding;

use crate::unusable::Unusable;

/// Everything that can go wrong in reading, staging, checking or committing a repository.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's mistake: a revision, a name or a request this side refuses.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// An archive of the metadata holds what the seeder never writes (a link, a special file, an
    /// unclean name, more than the bounds): the metadata changed. The library takes it as
    /// invalid input where it is not consumed (the inspection reads it as "metadata changed").
    #[error("invalid input: {0}")]
    ForeignMetadata(String),
    /// cordon's own fault: an answer of its own tools it cannot read.
    #[error("internal: {0}")]
    Internal(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unusable repository ({}): {}", .0.id(), .0)]
    Unusable(Unusable),
    #[error("git {context}: {message}")]
    Git { context: String, message: String },
    #[error("{0} passed its deadline")]
    Deadline(String),
    /// The commit was refused: every reason, with its path (a person must look).
    #[error("the commit was refused: {}", first_of(.findings))]
    CommitRefused { findings: Vec<CommitFinding> },
    /// The commit's new content does not fit its bounded scratch space.
    #[error("the commit's scratch space is full: {0}")]
    CommitScratchFull(String),
    /// The bundle would be larger than its bound.
    #[error("the bundle is too large: {0}")]
    BundleTooLarge(String),
}

/// The first finding and how many there are (the library's own message lists them, bounded).
fn first_of(findings: &[CommitFinding]) -> String {
    match findings.first() {
        None => "nothing".to_owned(),
        Some(f) => format!(
            "{} {:?} and {} more",
            f.reason.id(),
            f.path,
            findings.len() - 1
        ),
    }
}

impl Error {
    /// The stable id, the library's own for the variant of the same name.
    pub fn id(&self) -> &'static str {
        match self {
            Error::Invalid(_) | Error::ForeignMetadata(_) => "invalid-input",
            Error::Internal(_) => "internal",
            Error::Io { .. } => "io",
            Error::Unusable(u) => u.id(),
            Error::Git { .. } => "git",
            Error::Deadline(_) => "deadline",
            Error::CommitRefused { .. } => "commit-refused",
            Error::CommitScratchFull(_) => "commit-scratch-full",
            Error::BundleTooLarge(_) => "bundle-too-large",
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The repository side's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
