//! `credential`: the vendor credential is nowhere the agent can read (`credential-absent`).
//!
//! The probe does not know the key; it knows the invocation's sentinel (the policy names it) and
//! what a vendor credential looks like ([`cordon_contract::credential`]). It reads, as the agent
//! could, the environment and argv of every process it can see (`/proc/*/environ`,
//! `/proc/*/cmdline`) and every regular file under the directories the agent's tools would look
//! in first (cordon's own dirs, HOME, /tmp, /etc, /work), and reports a breach when anything
//! credential-shaped there is not exactly the sentinel, or a credential variable holds anything
//! else. The evidence names where, never what.
//!
//! Everything is bounded: how many processes and files, how deep, how many bytes each and in
//! all; files are opened without following links and without blocking, and checked to be
//! regular files before they are read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use cordon_contract::credential::{foreign_entry, foreign_tokens};
use cordon_contract::paths;
use cordon_contract::probe::ops;

use crate::report::Probe;

/// The directories walked, in order.
const ROOTS: &[&str] = &["/run/cordon", paths::HOME, paths::TMP, "/etc", paths::WORK];
/// At most this many processes, files, directory levels, bytes per file and bytes in all.
const MAX_PROCESSES: usize = 256;
const MAX_FILES: usize = 4096;
const MAX_DEPTH: usize = 8;
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
const MAX_TOTAL_BYTES: u64 = 128 * 1024 * 1024;
/// At most this many places named in the evidence.
const MAX_SHOWN: usize = 8;

/// Open `path` for reading as the agent would, without following a final link and without
/// blocking on a FIFO.
fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// A regular file's first [`MAX_FILE_BYTES`]; `None` for anything else or what cannot be read.
fn read_regular(path: &Path) -> Option<Vec<u8>> {
    let file = open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// What the scan found, and how much it read.
#[derive(Default)]
struct Scan {
    found: Vec<String>,
    files: usize,
    bytes: u64,
}

impl Scan {
    fn bytes_of(&mut self, place: &str, bytes: &[u8], sentinel: Option<&str>) {
        self.bytes += bytes.len() as u64;
        if !foreign_tokens(bytes, sentinel).is_empty() {
            self.found.push(place.to_owned());
        }
    }

    /// `/proc/PID/environ` entry by entry (a credential variable must hold the sentinel), and
    /// `/proc/PID/cmdline`, for every process this one can see.
    fn processes(&mut self, sentinel: Option<&str>) {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let pids = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .take(MAX_PROCESSES);
        for pid in pids {
            let environ = format!("/proc/{pid}/environ");
            if let Some(bytes) = read_regular(Path::new(&environ)) {
                let foreign = bytes
                    .split(|b| *b == 0)
                    .filter_map(|entry| std::str::from_utf8(entry).ok())
                    .any(|entry| foreign_entry(entry, sentinel));
                if foreign || !foreign_tokens(&bytes, sentinel).is_empty() {
                    self.found.push(environ);
                }
            }
            let cmdline = format!("/proc/{pid}/cmdline");
            if let Some(bytes) = read_regular(Path::new(&cmdline)) {
                self.bytes_of(&cmdline, &bytes, sentinel);
            }
        }
    }

    /// Every regular file under `dir`, depth first, links never followed.
    fn walk(&mut self, dir: &Path, depth: usize, sentinel: Option<&str>) {
        if depth > MAX_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        // A directory the agent filled is read no further than the file bound.
        let mut children: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .take(MAX_FILES)
            .collect();
        children.sort();
        for path in children {
            if self.files >= MAX_FILES || self.bytes >= MAX_TOTAL_BYTES {
                return;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                self.walk(&path, depth + 1, sentinel);
            } else if meta.is_file() {
                self.files += 1;
                if let Some(bytes) = read_regular(&path) {
                    self.bytes_of(&path.display().to_string(), &bytes, sentinel);
                }
            }
        }
    }
}

/// Where a credential other than the sentinel can be read; an error when there is none.
fn readable(sentinel: Option<&str>) -> io::Result<String> {
    let mut scan = Scan::default();
    scan.processes(sentinel);
    for root in ROOTS {
        scan.walk(Path::new(root), 0, sentinel);
    }
    if scan.found.is_empty() {
        return Err(io::Error::other(format!(
            "none in {} files, {} bytes",
            scan.files, scan.bytes
        )));
    }
    let shown: Vec<&str> = scan
        .found
        .iter()
        .take(MAX_SHOWN)
        .map(String::as_str)
        .collect();
    Ok(format!(
        "in {} place(s): {}",
        scan.found.len(),
        shown.join(", ")
    ))
}

pub fn run(p: &mut Probe<'_>) {
    let sentinel = p.ctx.policy.sentinel.clone();
    p.deny_answered(
        &ops::CREDENTIAL_READABLE,
        "a credential other than the invocation's sentinel",
        || readable(sentinel.as_deref()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_a_foreign_credential_and_passes_over_the_sentinel() {
        let dir = std::env::temp_dir().join(format!("cordon-credential-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        let sentinel = "sk-ant-api03-sentinel-of-a-credentials-length-0123456789AA";
        std::fs::write(dir.join("a/held"), format!("KEY={sentinel}\n")).unwrap();
        let mut scan = Scan::default();
        scan.walk(&dir, 0, Some(sentinel));
        assert!(scan.found.is_empty(), "{:?}", scan.found);
        std::fs::write(
            dir.join("a/b/leak"),
            "token sk-ant-api03-the-key-of-a-credentials-length-0123456789AA\n",
        )
        .unwrap();
        // A link to it is never followed: the file itself is found once.
        std::os::unix::fs::symlink(dir.join("a/b/leak"), dir.join("link")).unwrap();
        let mut scan = Scan::default();
        scan.walk(&dir, 0, Some(sentinel));
        assert_eq!(scan.found, vec![dir.join("a/b/leak").display().to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
