//! Scratch git repositories for the tests: git runs here on the tests' own fixtures only.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// A directory removed on drop.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("cordon-{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// git in `dir` with no system or global config and fixed identities; its stdout, trimmed. Panics
/// when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .current_dir(dir)
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository at `dir` (made with `init_args` after `init`) with `commits` commits of a few
/// files each.
pub fn repo(dir: &Path, init_args: &[&str], commits: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut args = vec!["init", "--quiet", "--initial-branch=main"];
    args.extend_from_slice(init_args);
    git(dir, &args);
    for i in 0..commits {
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(
            dir.join(format!("src/f{i}.rs")),
            format!("pub fn f{i}() {{}}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("README"), format!("commit {i}\n")).unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "--quiet", "-m", &format!("commit {i}")]);
    }
}

/// The files below `dir`, relative to it, sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(dir).unwrap().to_owned();
                found.push(rel.display().to_string());
            }
        }
    }
    found.sort();
    found
}
