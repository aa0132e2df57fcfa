//! git, hardened: only ever on a repository cordon made itself (the staging copy), with no system
//! or global config, no hooks, no fsmonitor, no protocol but the local one it needs, and a
//! scratch HOME. Never on a repository the runner handed in, never on one an agent wrote.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use tokio::process::Command;

use crate::error::{Error, Result};

/// A git command line on one repository.
#[derive(Debug, Clone)]
pub struct Git {
    pub git_dir: PathBuf,
    pub home: PathBuf,
    pub deadline: Instant,
}

/// Configuration that neutralises everything a repository could make git run.
const HARDENING: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.askPass=",
    "core.sshCommand=false",
    "core.protectNTFS=true",
    "core.protectHFS=true",
    "protocol.allow=never",
    "gc.auto=0",
    "maintenance.auto=false",
    "safe.bareRepository=explicit",
    "diff.external=",
    "credential.helper=",
];

impl Git {
    /// A command with the hardened environment; arguments follow.
    pub fn command(&self) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .env("HOME", &self.home)
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for setting in HARDENING {
            command.arg("-c").arg(setting);
        }
        command
    }

    /// Run git with `args`, bounded by the deadline; stdout on success, git's last error lines
    /// otherwise.
    pub async fn run(&self, context: &str, args: &[&str]) -> Result<Vec<u8>> {
        let mut command = self.command();
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let left = self.deadline.saturating_duration_since(Instant::now());
        let output = tokio::time::timeout(left, command.output())
            .await
            .map_err(|_| Error::Deadline(format!("git {context}")))?
            .map_err(|e| Error::io(format!("running git {context}"), e))?;
        if output.status.success() {
            return Ok(output.stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last: Vec<&str> = stderr.lines().rev().take(2).collect();
        Err(Error::Git {
            context: context.to_owned(),
            message: last.into_iter().rev().collect::<Vec<_>>().join(" / "),
        })
    }

    /// The repository directory.
    pub fn dir(&self) -> &Path {
        &self.git_dir
    }
}

/// Run git, with no user or system config and no hooks, in a repository cordon made itself
/// (the gate's fixture, the benchmark's generated repository), never in one it was given.
pub fn own_repository(dir: &std::path::Path, args: &[&str]) -> Result<()> {
    let output = std::process::Command::new("git")
        .current_dir(dir)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "cordon gate")
        .env("GIT_AUTHOR_EMAIL", "gate@cordon.invalid")
        .env("GIT_COMMITTER_NAME", "cordon gate")
        .env("GIT_COMMITTER_EMAIL", "gate@cordon.invalid")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
        ])
        .args(args)
        .output()
        .map_err(|e| Error::io("running git", e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Git {
            context: args.first().unwrap_or(&"").to_string(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}
