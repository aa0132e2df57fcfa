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

/// glibc's malloc keeps up to 8 MiB free at the top of its heap instead of 128 KiB. fast-import
/// deflates every object with a fresh zlib state (about 270 KiB in four allocations at the top of
/// the heap) and frees it, and glibc gave those pages back to the kernel and faulted them in again
/// for each object: four `brk` calls an object, 40,689 for a 10,000-file commit, and half of
/// fast-import's 0.91 s in the kernel. With this it takes 0.45 s, its peak RSS the same 26 MiB;
/// no other git command cordon runs changed (ls-tree, rev-list, read-tree, diff-tree, cat-file,
/// bundle create, index-pack). A glibc that is not there ignores it.
const MALLOC_TUNABLES: &str = "glibc.malloc.trim_threshold=8388608";

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
            .env("GLIBC_TUNABLES", MALLOC_TUNABLES)
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
        let started = Instant::now();
        let left = self.deadline.saturating_duration_since(started);
        let output = tokio::time::timeout(left, command.output())
            .await
            .map_err(|_| Error::Deadline(format!("git {context}")))?
            .map_err(|e| Error::io(format!("running git {context}"), e))?;
        tracing::debug!(
            context,
            ms = started.elapsed().as_millis() as u64,
            "git ran"
        );
        if output.status.success() {
            return Ok(output.stdout);
        }
        Err(git_error(context, &output.stderr))
    }

    /// Run git with `args` and `input` on its stdin, bounded by the deadline; stdout on success,
    /// git's last error lines otherwise.
    pub async fn run_with_input(
        &self,
        context: &str,
        args: &[&str],
        input: Input,
    ) -> Result<Vec<u8>> {
        let (stdout, truncated) = self.run_bounded(context, args, input, usize::MAX).await?;
        if truncated {
            return Err(Error::Internal(format!(
                "git {context}: output beyond any bound"
            )));
        }
        Ok(stdout)
    }

    /// Run git with `args` and `input` on its stdin, keeping at most `max_stdout` bytes of its
    /// output. Beyond that git is killed and what was kept is returned with `true` (its exit
    /// status then does not count); otherwise stdout on success, git's last error lines if it
    /// failed. Bounded by the deadline.
    pub async fn run_bounded(
        &self,
        context: &str,
        args: &[&str],
        input: Input,
        max_stdout: usize,
    ) -> Result<(Vec<u8>, bool)> {
        let (kept, truncated, _) = self.run_keeping(context, args, input, max_stdout).await?;
        Ok((kept, truncated))
    }

    /// [`Self::run_with_input`], with the last of what git wrote to stderr when it succeeded too
    /// (fast-import's statistics).
    pub async fn run_with_input_reporting(
        &self,
        context: &str,
        args: &[&str],
        input: Input,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let (stdout, truncated, stderr) =
            self.run_keeping(context, args, input, usize::MAX).await?;
        if truncated {
            return Err(Error::Internal(format!(
                "git {context}: output beyond any bound"
            )));
        }
        Ok((stdout, stderr))
    }

    /// [`Self::run_bounded`], with the bounded tail of stderr.
    async fn run_keeping(
        &self,
        context: &str,
        args: &[&str],
        input: Input,
        max_stdout: usize,
    ) -> Result<(Vec<u8>, bool, Vec<u8>)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let mut command = self.command();
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let bytes = match input {
            Input::None => None,
            Input::Bytes(bytes) => {
                command.stdin(Stdio::piped());
                Some(bytes)
            }
            Input::File(file) => {
                command.stdin(Stdio::from(file));
                None
            }
            Input::Pipe(pipe) => {
                command.stdin(Stdio::from(pipe));
                None
            }
        };
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|e| Error::io(format!("running git {context}"), e))?;
        let stdin = child.stdin.take();
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal(format!("git {context}: no stdout")))?;
        let mut stderr = child
            .stderr
            .take()
            .ok_or_else(|| Error::Internal(format!("git {context}: no stderr")))?;
        let feed = async move {
            if let (Some(mut stdin), Some(bytes)) = (stdin, bytes) {
                // git may stop reading early (it failed): its status says why, not this write.
                let _ = stdin.write_all(&bytes).await;
                let _ = stdin.shutdown().await;
            }
        };
        let read_out = async move {
            let mut kept = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = stdout.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>((kept, false));
                }
                let room = max_stdout.saturating_sub(kept.len());
                if n > room {
                    kept.extend_from_slice(&buf[..room]);
                    return Ok((kept, true));
                }
                kept.extend_from_slice(&buf[..n]);
            }
        };
        let read_err = stderr_tail(&mut stderr);
        let left = self.deadline.saturating_duration_since(Instant::now());
        let work = async {
            let ((), out, err) = tokio::join!(feed, read_out, read_err);
            (out, err)
        };
        let (out, err) = match tokio::time::timeout(left, work).await {
            Ok(done) => done,
            Err(_) => {
                let _ = child.kill().await;
                return Err(Error::Deadline(format!("git {context}")));
            }
        };
        let (kept, truncated) = out.map_err(|e| Error::io(format!("reading git {context}"), e))?;
        if truncated {
            let _ = child.kill().await;
            return Ok((kept, true, err));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let status = tokio::time::timeout(left, child.wait())
            .await
            .map_err(|_| Error::Deadline(format!("git {context}")))?
            .map_err(|e| Error::io(format!("running git {context}"), e))?;
        tracing::debug!(
            context,
            ms = started.elapsed().as_millis() as u64,
            "git ran"
        );
        if status.success() {
            return Ok((kept, false, err));
        }
        Err(git_error(context, &err))
    }

    /// The repository directory.
    pub fn dir(&self) -> &Path {
        &self.git_dir
    }
}

/// The last bytes git wrote to stderr (only its last lines count): a bounded tail.
async fn stderr_tail(stderr: &mut tokio::process::ChildStderr) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut tail = Vec::new();
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return tail,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 64 * 1024 {
                    tail.drain(..tail.len() - 16 * 1024);
                }
            }
        }
    }
}

/// git's failure: its last two lines of stderr.
fn git_error(context: &str, stderr: &[u8]) -> Error {
    let stderr = String::from_utf8_lossy(stderr);
    let last: Vec<&str> = stderr.lines().rev().take(2).collect();
    Error::Git {
        context: context.to_owned(),
        message: last.into_iter().rev().collect::<Vec<_>>().join(" / "),
    }
}

/// What git reads on its stdin.
#[derive(Debug)]
pub enum Input {
    /// Nothing (`/dev/null`).
    None,
    Bytes(Vec<u8>),
    /// A file cordon wrote (a fast-import stream in scratch space), read from its start.
    File(std::fs::File),
    /// The read end of a pipe cordon writes as git reads (a fast-import stream).
    Pipe(std::io::PipeReader),
}

/// A git command line with no user or system config and no hooks, in a repository cordon made
/// itself (the gate's fixture, the benchmark's generated repository), never in one it was given.
pub fn own_command(dir: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new("git");
    command
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
        .args(args);
    command
}

/// Run [`own_command`] to its end.
pub fn own_repository(dir: &std::path::Path, args: &[&str]) -> Result<()> {
    let output = own_command(dir, args)
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
