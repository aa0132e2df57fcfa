//! Phases of agent work and vendors.

use serde::{Deserialize, Serialize};

/// One phase of agent work; it decides whether /work is writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Planning,
    Questions,
    Review,
    Execute,
    Fix,
}

impl Phase {
    /// Every phase, in the order work flows through them.
    pub const ALL: [Phase; 5] = [
        Phase::Planning,
        Phase::Questions,
        Phase::Review,
        Phase::Execute,
        Phase::Fix,
    ];

    /// Whether the agent may write /work in this phase (execute and fix only).
    pub const fn work_writable(self) -> bool {
        matches!(self, Phase::Execute | Phase::Fix)
    }

    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Planning => "planning",
            Phase::Questions => "questions",
            Phase::Review => "review",
            Phase::Execute => "execute",
            Phase::Fix => "fix",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown phase {s:?}"))
    }
}

/// The vendor CLI an agent container runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vendor {
    Claude,
    /// Codex has a container profile (the isolation probes exercise its CODEX_HOME), but invocations
    /// refuse it in every phase: it cannot read code without its shell.
    Codex,
}

impl Vendor {
    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Vendor::Claude => "claude",
            Vendor::Codex => "codex",
        }
    }

    /// Where the vendor CLI lives in the agent image.
    pub const fn cli_path(self) -> &'static str {
        match self {
            Vendor::Claude => crate::paths::CLAUDE_CLI,
            Vendor::Codex => crate::paths::CODEX_CLI,
        }
    }
}

impl std::fmt::Display for Vendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Vendor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "claude" => Ok(Vendor::Claude),
            "codex" => Ok(Vendor::Codex),
            _ => Err(format!("unknown vendor {s:?}")),
        }
    }
}
