//! What cordon-init says: one JSON line per event on stderr, and its reserved exit codes.
//!
//! The first stderr line of an agent container is always the init's (a refusal or the
//! attestation); it is written before any workload process exists, so the workload cannot forge
//! it. The host trusts no later line.

use serde::{Deserialize, Serialize};

use crate::catalogue::Id;
use crate::refusal::Refusal;

/// Preflight refused: the first stderr line is a [`InitLine::Refusal`].
pub const EXIT_REFUSED: i32 = 120;
/// The workload outlived the policy's deadline and was killed.
pub const EXIT_DEADLINE: i32 = 121;
/// The init itself failed after preflight (a panic, a failed fork): never a workload result.
pub const EXIT_INIT_FAILURE: i32 = 122;

/// The reserved codes: none is 125-127 (Docker's) or 128+n (signals).
pub const RESERVED_EXIT_CODES: [i32; 3] = [EXIT_REFUSED, EXIT_DEADLINE, EXIT_INIT_FAILURE];

/// One line the init writes to stderr.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cordon", rename_all = "kebab-case", deny_unknown_fields)]
pub enum InitLine {
    /// Preflight failed: the protection (`id`), what it expected and observed; nothing was
    /// started.
    Refusal(Refusal),
    /// Preflight passed; the workload starts after this line.
    Attestation {
        policy_digest: String,
        checks: Vec<Id>,
        /// Init-only protections the policy told the init not to enforce (gate only).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<Id>,
        landlock_abi: u8,
        preflight_us: u64,
        /// The loopback port of the egress forwarder, listening before the workload starts
        /// (absent when the policy has no egress).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        egress_forward: Option<u16>,
        /// The directories Landlock pinned (relative to /work: the policy's pins, each above a
        /// nested gitlink); absent when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pins: Vec<String>,
    },
    /// The deadline passed; the workload is being killed.
    Deadline { deadline_ms: u64 },
    /// A trusted helper role (the storage keeper) is up.
    Ready { role: String },
    /// The `digest` role's result: sha256 over a tree read without following links.
    Digest { digest: String, entries: u64 },
    /// The init failed (never a preflight verdict).
    Failure { reason: String },
    /// The init is exiting: the main child's status and how many survivors needed TERM or KILL.
    Exit {
        code: i32,
        terminated: u32,
        killed: u32,
    },
}

impl InitLine {
    /// The line as written (no trailing newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|_| String::from("{\"cordon\":\"failure\",\"reason\":\"unprintable\"}"))
    }

    /// Parse one line; anything that is not exactly an init line is `None`.
    pub fn parse(line: &str) -> Option<InitLine> {
        serde_json::from_str(line.trim_end()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_codes_avoid_docker_and_signal_codes() {
        for code in RESERVED_EXIT_CODES {
            assert!(code > 0 && code < 125, "{code}");
        }
    }

    #[test]
    fn lines_round_trip() {
        let lines = [
            InitLine::Refusal(Refusal::new(Id::RootfsReadonly, "ro", "rw")),
            InitLine::Attestation {
                policy_digest: "sha256:00".into(),
                checks: vec![Id::Landlock],
                skipped: vec![],
                landlock_abi: 6,
                preflight_us: 10,
                egress_forward: Some(3128),
                pins: vec!["a".into(), "a/b".into()],
            },
            InitLine::Attestation {
                policy_digest: "sha256:00".into(),
                checks: vec![Id::Landlock],
                skipped: vec![],
                landlock_abi: 6,
                preflight_us: 10,
                egress_forward: None,
                pins: vec![],
            },
            InitLine::Exit {
                code: 0,
                terminated: 1,
                killed: 0,
            },
        ];
        for line in lines {
            let text = line.to_line();
            assert!(!text.contains('\n'));
            assert_eq!(InitLine::parse(&text), Some(line));
        }
        assert_eq!(InitLine::parse("{\"cordon\":\"refusal\"}"), None);
        // The refusal's shape is the contract's one: `id`, no unknown key.
        assert_eq!(
            InitLine::parse(r#"{"cordon":"refusal","id":"policy","expected":"a","observed":"b"}"#),
            Some(InitLine::Refusal(Refusal::new(Id::Policy, "a", "b")))
        );
        assert_eq!(
            InitLine::parse(
                r#"{"cordon":"refusal","id":"policy","expected":"a","observed":"b","extra":1}"#
            ),
            None
        );
        assert_eq!(InitLine::parse("hello"), None);
        // No pins: the key is left out, and a line without it (an older init's) parses.
        let plain = r#"{"cordon":"attestation","policy_digest":"d","checks":[],"landlock_abi":6,"preflight_us":1}"#;
        let Some(InitLine::Attestation { pins, .. }) = InitLine::parse(plain) else {
            panic!("an attestation without pins");
        };
        assert!(pins.is_empty());
        assert_eq!(
            InitLine::parse(plain).map(|l| l.to_line()).as_deref(),
            Some(plain)
        );
    }
}
