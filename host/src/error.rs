//! The library's one error type. Every variant carries what a reader needs to act on it.

use std::time::Duration;

use cordon_contract::Id;

/// A difference between a created object and its profile: the protection it breaches, the field,
/// what the profile says and what the engine reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    pub id: Id,
    pub field: String,
    pub expected: String,
    pub observed: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} expected {} observed {}",
            self.id, self.field, self.expected, self.observed
        )
    }
}

/// Everything that can go wrong in the cordon library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("docker engine: {context}: {source}")]
    Docker {
        context: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker engine: {context} timed out after {after:?}")]
    Timeout { context: String, after: Duration },
    #[error("docker engine unreachable at {socket}: {reason}")]
    Unreachable { socket: String, reason: String },
    #[error("engine API {found} is older than the minimum {minimum}")]
    EngineTooOld { found: String, minimum: String },
    #[error("the created container differs from its profile: {}", join(.0))]
    Refused(Vec<Refusal>),
    #[error("profile refused ({id}): {reason}")]
    Profile { id: Id, reason: String },
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("image build: {0}")]
    Build(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cleanup could not confirm the removal of: {}", .0.join(", "))]
    Unreleased(Vec<String>),
    #[error("unusable repository ({}): {}", .0.id(), .0)]
    Unusable(crate::task::Unusable),
    #[error("the repository does not fit task storage: {0}")]
    Overflow(String),
    #[error("allocation {0} is already in use")]
    AllocationInUse(String),
    #[error("git {context}: {message}")]
    Git { context: String, message: String },
    #[error("{0} passed its deadline")]
    Deadline(String),
    #[error("recovery incomplete: {message}")]
    Recovery {
        message: String,
        removed: Vec<String>,
    },
    #[error("recovery refused: this process still holds task storage of owner {0}")]
    RecoveryBusy(String),
}

fn join(refusals: &[Refusal]) -> String {
    refusals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// A stable id for the kind of failure (what `cordon --json` prints as `error`).
    pub fn id(&self) -> &'static str {
        match self {
            Error::Docker { .. } => "engine-call",
            Error::Timeout { .. } => "engine-timeout",
            Error::Unreachable { .. } => "engine-unreachable",
            Error::EngineTooOld { .. } => "engine-too-old",
            Error::Refused(_) => "profile-mismatch",
            Error::Profile { id, .. } => id.as_str(),
            Error::Invalid(_) => "invalid-input",
            Error::Build(_) => "image-build",
            Error::Io { .. } => "io",
            Error::Unreleased(_) => "unreleased",
            Error::Unusable(u) => u.id(),
            Error::Overflow(_) => "storage-overflow",
            Error::AllocationInUse(_) => "allocation-in-use",
            Error::Git { .. } => "git",
            Error::Deadline(_) => "deadline",
            Error::Recovery { .. } => "recovery-incomplete",
            Error::RecoveryBusy(_) => "recovery-busy",
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
