//! The library's one error type. Every variant carries what a reader needs to act on it, and a
//! stable id (what `cordon --json` prints as `error`): `invalid-input` is the caller's mistake,
//! `internal` is cordon's own fault, the rest name what refused or failed.

mod input;

use std::time::Duration;

use cordon_contract::Id;

pub use cordon_contract::refusal::Refusal;
pub use cordon_repo::Unusable;
pub use input::InputFault;

/// The ids of [`Error::Snapshot`]: a phase that writes /work over a snapshot, approved commands
/// over one, a handle without the digest recorded when it was made, a handle whose snapshot mark
/// its keeper contradicts, a snapshot still mounted when its removal's wait ran out.
pub const SNAPSHOT_IDS: [&str; 5] = [
    "snapshot-writable-phase",
    "snapshot-commands",
    "snapshot-unverified",
    "snapshot-mark",
    "snapshot-in-use",
];

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
    /// The caller's mistake: a request, a token, a path cordon refuses.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// cordon's own fault (a helper that ended without a result, a stream that ended early, an
    /// answer of its own tools it cannot read): not something the caller can fix.
    #[error("internal: {0}")]
    Internal(String),
    #[error("image build: {0}")]
    Build(String),
    /// A file a caller named (a prompt, a schema, a handle) that cordon will not read: the
    /// path and what was found .
    #[error("{what} {path}: {fault}")]
    Input {
        what: &'static str,
        path: String,
        fault: InputFault,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cleanup could not confirm the removal of: {}", .0.join(", "))]
    Unreleased(Vec<String>),
    #[error("unusable repository ({}): {}", .0.id(), .0)]
    Unusable(Unusable),
    #[error("the repository does not fit task storage: {0}")]
    Overflow(String),
    /// A storage handle without what a task's verbs check against (a recovered handle: the
    /// caller sets the head and the baseline it recorded at prepare).
    #[error("the storage handle carries no {missing} (a recovered handle: set the one recorded at prepare)")]
    HandleIncomplete { missing: &'static str },
    #[error("allocation {0} is already in use")]
    AllocationInUse(String),
    #[error("git {context}: {message}")]
    Git { context: String, message: String },
    #[error("{0} passed its deadline")]
    Deadline(String),
    #[error(
        "recovery incomplete: {message}; removed: {}",
        bounded_list(removed, 2000)
    )]
    Recovery {
        message: String,
        removed: Vec<String>,
    },
    #[error("recovery refused: this process still holds task storage of owner {0}")]
    RecoveryBusy(String),
    #[error("schema: {0}")]
    SchemaMismatch(String),
    #[error("schema refused: {0}")]
    Schema(String),
    #[error("{0}")]
    VendorRefused(String),
    #[error("attempt {0} was already captured: a new attempt needs a new attempt id")]
    AttemptCaptured(String),
    #[error("attempt {0} is still owned: {1}")]
    AttemptOwned(String, String),
    #[error(
        "profile of allocation {0} is retired: an earlier launch could not confirm its cleanup"
    )]
    Retired(String),
    #[error("uid ({id}): {reason}")]
    Uid { id: &'static str, reason: String },
    /// A shared snapshot refused for this use: a phase that writes, approved commands, a handle
    /// without the recorded digest.
    #[error("snapshot ({id}): {reason}")]
    Snapshot { id: &'static str, reason: String },
    /// The pre-launch tree check refused: every reason, each with its path (the same answer on
    /// retry: a person must look).
    #[error("the pre-launch tree check refused: {}", findings_text(.findings, *.more))]
    TreeRefused {
        findings: Vec<cordon_contract::tree::Finding>,
        more: u64,
    },
    /// The tree reader could not do its job (not a refusal).
    #[error("the tree reader failed: {0}")]
    TreeReader(String),
    /// The post-run inspection refused to answer (never a part of an answer): too many changes,
    /// a name it cannot report, too many recorded targets, something unreadable, base not a
    /// commit, the metadata not as seeded (for an export).
    #[error("the audit refused: {}", findings_text(.findings, *.more))]
    AuditRefused {
        findings: Vec<cordon_contract::tree::Finding>,
        more: u64,
    },
    /// The commit was refused: every reason, with its path (a person must look).
    #[error("the commit was refused: {}", commit_findings_text(.findings))]
    CommitRefused {
        findings: Vec<cordon_contract::audit::CommitFinding>,
    },
    /// The commit's new content does not fit its bounded scratch space.
    #[error("the commit's scratch space is full: {0}")]
    CommitScratchFull(String),
    /// The bundle would be larger than its bound.
    #[error("the bundle is too large: {0}")]
    BundleTooLarge(String),
    /// The host has more addresses (its interfaces', every engine network's gateway) than an
    /// egress proxy can be told: leaving some out would leave them dialable.
    #[error(
        "this host has {count} addresses (its interfaces' and every engine network's gateway), \
         more than the {max} an egress proxy can be told never to dial"
    )]
    TooManyHostAddresses { count: usize, max: usize },
    /// The vendor credential cannot be kept out of the agent: its API host is not one the proxy
    /// can terminate, the invocation's CA or leaf could not be made, or the proxy did not attest
    /// terminating exactly that host with that CA. Nothing of the agent's ran.
    #[error("the vendor credential cannot be kept out of the agent: {0}")]
    Custody(String),
    /// A fixture of the proof harness (the fake vendor, its DNS server) took another address on
    /// the invocation network than the one the proxy was told: the proxy never starts.
    #[error(
        "the fixture {fixture} took {observed} on the invocation network, not the {expected} the \
         proxy was told"
    )]
    FixtureAddress {
        fixture: String,
        expected: std::net::Ipv4Addr,
        observed: String,
    },
    /// An approved command's toolchain image cannot serve it: no such local image (cordon never
    /// pulls), or the argv's program is not an executable regular file in it.
    #[error("toolchain image {image:?}: {reason}")]
    CommandImage { image: String, reason: String },
}

/// `reason "path" (detail)` for one finding of a refusal.
fn finding_text(reason: &str, path: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("{reason} {path:?}")
    } else {
        format!("{reason} {path:?} ({detail})")
    }
}

/// The commit's findings, bounded.
fn commit_findings_text(findings: &[cordon_contract::audit::CommitFinding]) -> String {
    let items: Vec<String> = findings
        .iter()
        .map(|f| finding_text(f.reason.id(), &f.path, &f.detail))
        .collect();
    bounded_list(&items, 2000)
}

/// `reason "path"` for each finding, bounded, with the count of those not listed.
fn findings_text(findings: &[cordon_contract::tree::Finding], more: u64) -> String {
    let items: Vec<String> = findings
        .iter()
        .map(|f| finding_text(f.reason.id(), &f.path, &f.detail))
        .collect();
    let mut text = bounded_list(&items, 2000);
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

/// `items` joined with ", ", cut at a character boundary to at most about `max` bytes, with the
/// count of what was left out: an error message stays bounded whatever the engine returned.
pub fn bounded_list(items: &[String], max: usize) -> String {
    let mut out = String::new();
    for (shown, item) in items.iter().enumerate() {
        let next = if shown == 0 {
            item.clone()
        } else {
            format!(", {item}")
        };
        if out.len() + next.len() > max {
            let mut cut = max.saturating_sub(out.len());
            while !next.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push_str(&next[..cut]);
            out.push_str(&format!("… (+{} more)", items.len() - shown - 1));
            return out;
        }
        out.push_str(&next);
    }
    if items.is_empty() {
        out.push_str("nothing");
    }
    out
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
            Error::Internal(_) => "internal",
            Error::Build(_) => "image-build",
            // input-not-regular, input-too-large, input-unreadable, input-not-utf8
            Error::Input { fault, .. } => fault.id(),
            Error::Io { .. } => "io",
            Error::Unreleased(_) => "unreleased",
            Error::Unusable(u) => u.id(),
            Error::Overflow(_) => "storage-overflow",
            Error::HandleIncomplete { .. } => "handle-incomplete",
            Error::AllocationInUse(_) => "allocation-in-use",
            Error::Git { .. } => "git",
            Error::Deadline(_) => "deadline",
            Error::Recovery { .. } => "recovery-incomplete",
            Error::RecoveryBusy(_) => "recovery-busy",
            Error::Retired(_) => "profile-retired",
            Error::SchemaMismatch(_) => "schema-mismatch",
            Error::Schema(_) => "schema-invalid",
            Error::VendorRefused(_) => "vendor-refused",
            Error::AttemptCaptured(_) => "attempt-captured",
            Error::AttemptOwned(..) => "attempt-owned",
            Error::Uid { id, .. } | Error::Snapshot { id, .. } => id,
            Error::TreeRefused { .. } => "tree-refused",
            Error::TreeReader(_) => "tree-reader-failed",
            Error::AuditRefused { .. } => "audit-refused",
            Error::CommitRefused { .. } => "commit-refused",
            Error::CommitScratchFull(_) => "commit-scratch-full",
            Error::BundleTooLarge(_) => "bundle-too-large",
            Error::TooManyHostAddresses { .. } => "egress-host-addresses",
            Error::Custody(_) => "vendor-custody",
            Error::FixtureAddress { .. } => "egress-fixture-address",
            Error::CommandImage { .. } => "command-image",
        }
    }

    /// An I/O error with what was being done (the library's and the proof harness's own file
    /// work).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The repository side's errors are the library's of the same name (one error type for a runner,
/// the same stable ids).
impl From<cordon_repo::Error> for Error {
    fn from(e: cordon_repo::Error) -> Self {
        use cordon_repo::Error as Repo;
        match e {
            Repo::Invalid(m) | Repo::ForeignMetadata(m) => Error::Invalid(m),
            Repo::Internal(m) => Error::Internal(m),
            Repo::Io { context, source } => Error::Io { context, source },
            Repo::Unusable(u) => Error::Unusable(u),
            Repo::Git { context, message } => Error::Git { context, message },
            Repo::Deadline(m) => Error::Deadline(m),
            Repo::CommitRefused { findings } => Error::CommitRefused { findings },
            Repo::CommitScratchFull(m) => Error::CommitScratchFull(m),
            Repo::BundleTooLarge(m) => Error::BundleTooLarge(m),
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of every variant (a new variant fails to compile in [`Error::id`] until it has an
    /// id, and must be added here to be counted).
    fn one_of_each() -> Vec<Error> {
        let io = || std::io::Error::other("x");
        let docker = || bollard::errors::Error::RequestTimeoutError;
        let text = || "x".to_owned();
        let mut all = vec![
            Error::Docker {
                context: text(),
                source: docker(),
            },
            Error::Timeout {
                context: text(),
                after: Duration::from_secs(1),
            },
            Error::Unreachable {
                socket: text(),
                reason: text(),
            },
            Error::EngineTooOld {
                found: text(),
                minimum: text(),
            },
            Error::Refused(Vec::new()),
            Error::Invalid(text()),
            Error::Internal(text()),
            Error::Build(text()),
            Error::Io {
                context: text(),
                source: io(),
            },
            Error::Unreleased(Vec::new()),
            Error::Overflow(text()),
            Error::AllocationInUse(text()),
            Error::HandleIncomplete { missing: "head" },
            Error::Git {
                context: text(),
                message: text(),
            },
            Error::Deadline(text()),
            Error::Recovery {
                message: text(),
                removed: Vec::new(),
            },
            Error::RecoveryBusy(text()),
            Error::Retired(text()),
            Error::SchemaMismatch(text()),
            Error::Schema(text()),
            Error::VendorRefused(text()),
            Error::AttemptCaptured(text()),
            Error::AttemptOwned(text(), text()),
        ];
        for id in [
            "uid-range",
            "uid-range-exhausted",
            "uid-range-host-overlap",
            "uid-in-use",
        ] {
            all.push(Error::Uid { id, reason: text() });
        }
        for id in SNAPSHOT_IDS {
            all.push(Error::Snapshot { id, reason: text() });
        }
        all.push(Error::TreeRefused {
            findings: vec![],
            more: 0,
        });
        all.push(Error::TreeReader(text()));
        all.push(Error::AuditRefused {
            findings: vec![],
            more: 0,
        });
        all.push(Error::CommitRefused { findings: vec![] });
        all.push(Error::CommitScratchFull(text()));
        all.push(Error::BundleTooLarge(text()));
        all.push(Error::TooManyHostAddresses { count: 2, max: 1 });
        for fault in [
            InputFault::NotRegular("a FIFO"),
            InputFault::TooLarge {
                at_least: 2,
                limit: 1,
            },
            InputFault::Unreadable {
                reason: text(),
                errno: None,
            },
            InputFault::NotUtf8 { at: 0 },
        ] {
            all.push(Error::Input {
                what: "prompt",
                path: text(),
                fault,
            });
        }
        for unusable in [
            Unusable::AbsoluteLink {
                path: text(),
                target: text(),
            },
            Unusable::EscapingLink {
                path: text(),
                reaches: text(),
            },
            Unusable::MetadataLink { path: text() },
            Unusable::BadName { path: text() },
            Unusable::CorruptObject {
                object: text(),
                path: text(),
                reason: text(),
            },
            Unusable::Alternates,
            Unusable::NotARepository {
                path: text(),
                reason: text(),
            },
            Unusable::TooLarge {
                what: text(),
                needs_bytes: 0,
                needs_inodes: 0,
                limit_bytes: 0,
                limit_inodes: 0,
            },
        ] {
            all.push(Error::Unusable(unusable));
        }
        all
    }

    /// The ids runners match on: each kind of failure has its own, and none changes (a change
    /// here is a breaking change of the `--json` contract).
    #[test]
    fn every_error_id_is_unique_and_stable() {
        let ids: Vec<&str> = one_of_each().iter().map(Error::id).collect();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "an id is shared: {ids:?}");
        assert_eq!(
            ids,
            [
                "engine-call",
                "engine-timeout",
                "engine-unreachable",
                "engine-too-old",
                "profile-mismatch",
                "invalid-input",
                "internal",
                "image-build",
                "io",
                "unreleased",
                "storage-overflow",
                "allocation-in-use",
                "handle-incomplete",
                "git",
                "deadline",
                "recovery-incomplete",
                "recovery-busy",
                "profile-retired",
                "schema-mismatch",
                "schema-invalid",
                "vendor-refused",
                "attempt-captured",
                "attempt-owned",
                "uid-range",
                "uid-range-exhausted",
                "uid-range-host-overlap",
                "uid-in-use",
                "snapshot-writable-phase",
                "snapshot-commands",
                "snapshot-unverified",
                "snapshot-mark",
                "snapshot-in-use",
                "tree-refused",
                "tree-reader-failed",
                "audit-refused",
                "commit-refused",
                "commit-scratch-full",
                "bundle-too-large",
                "egress-host-addresses",
                "input-not-regular",
                "input-too-large",
                "input-unreadable",
                "input-not-utf8",
                "repo-absolute-link",
                "repo-escaping-link",
                "repo-metadata-link",
                "repo-bad-name",
                "repo-corrupt-object",
                "repo-alternates",
                "repo-not-a-repository",
                "repo-too-large",
            ]
        );
        // Profile refusals carry a protection id, which is not one of these.
        for id in cordon_contract::Id::ALL {
            assert!(!ids.contains(&id.as_str()), "{id} is also an error id");
        }
    }

    /// A hard link in the metadata that does not verify is refused as any other link there is.
    #[test]
    fn a_hard_link_refusal_has_the_metadata_link_id() {
        let err = Error::Unusable(Unusable::MetadataHardLink {
            path: "objects/ab/cd".into(),
            links: 2,
            reason: "it is not a zlib stream (x)".into(),
        });
        assert_eq!(err.id(), "repo-metadata-link");
        assert_eq!(
            Error::Unusable(Unusable::MetadataLink { path: "x".into() }).id(),
            err.id()
        );
    }

    #[test]
    fn bounded_list_cuts_at_a_character_boundary_and_counts_the_rest() {
        let items: Vec<String> = (0..100).map(|i| format!("volume ü{i:03}ü")).collect();
        for max in 0..60 {
            let text = bounded_list(&items, max);
            assert!(text.len() <= max + "… (+100 more)".len(), "{max}: {text}");
        }
        assert_eq!(bounded_list(&items[..2], 100), "volume ü000ü, volume ü001ü");
        assert!(bounded_list(&items, 30).ends_with("… (+97 more)"));
        assert_eq!(bounded_list(&[], 10), "nothing");
    }
}
