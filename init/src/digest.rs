//! The `digest` role: a sha256 over a tree, read inside a container without following any link.
//! The seeder records it for the metadata volume as the baseline that later audits compare with.
//!
//! Every entry contributes its path (relative to the root), type, mode and size, and for a file its
//! content's sha256 and for a link its target, in sorted order, so equal trees give equal digests
//! whatever order the directory listing comes in.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};

/// The digest of the tree at `root` and its entry count.
pub fn tree(root: &Path) -> Result<(String, u64), String> {
    tree_while(root, || true)?.ok_or_else(|| "the walk was stopped".to_owned())
}

/// [`tree`], asking `go_on` before every entry and every read whether to go on: `None` when it
/// said no (the walk stops there, having read nothing more).
pub fn tree_while(
    root: &Path,
    mut go_on: impl FnMut() -> bool,
) -> Result<Option<(String, u64)>, String> {
    // Walk relative to the root: every absolute path would be looked up from / again, and in a
    // container / is the storage driver's mount (fuse-overlayfs here: one round trip to its
    // daemon per lookup, ten times the cost of the whole read).
    std::env::set_current_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let root = Path::new(".");
    let mut lines = Vec::new();
    // One read buffer for every file: a fresh zeroed 64 KiB per file was a memset of 320 MB
    // over 5,000 files, most of the digest's time after the hashing itself.
    let mut buf = vec![0u8; 64 * 1024];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let listing = fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in listing {
            if !go_on() {
                return Ok(None);
            }
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let meta = fs::symlink_metadata(&path).map_err(|e| format!("{rel}: {e}"))?;
            let kind = meta.file_type();
            let mode = meta.mode() & 0o7777;
            let line = if kind.is_dir() {
                stack.push(path);
                format!("d {mode:o} {rel}")
            } else if kind.is_symlink() {
                let target = fs::read_link(&path).map_err(|e| format!("{rel}: {e}"))?;
                format!("l {rel} -> {}", target.to_string_lossy())
            } else if kind.is_file() {
                let mut file = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| format!("{rel}: {e}"))?;
                let mut hasher = Sha256::new();
                loop {
                    if !go_on() {
                        return Ok(None);
                    }
                    let n = file.read(&mut buf).map_err(|e| format!("{rel}: {e}"))?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                format!(
                    "f {mode:o} {} {rel} {}",
                    meta.len(),
                    hex::encode(hasher.finalize())
                )
            } else {
                format!("s {mode:o} {rel}")
            };
            lines.push(line);
        }
    }
    lines.sort();
    let mut hasher = Sha256::new();
    for line in &lines {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    Ok(Some((
        format!("sha256:{}", hex::encode(hasher.finalize())),
        lines.len() as u64,
    )))
}

/// Runs `body` with the process's cwd put back afterwards, one such body at a time: a walk
/// moves the cwd, which every test thread shares.
#[cfg(test)]
pub fn with_cwd_kept<R>(body: impl FnOnce() -> R) -> R {
    static CWD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = CWD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cwd = std::env::current_dir().expect("cwd");
    let out = body();
    std::env::set_current_dir(cwd).expect("cwd back");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_of(name: &str) -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("cordon-init-digest-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/one"), vec![1u8; 200_000]).unwrap();
        fs::write(root.join("a/b/two"), "two").unwrap();
        std::os::unix::fs::symlink("one", root.join("a/link")).unwrap();
        root
    }

    /// A walk that is never stopped is the digest; one stopped anywhere gives none, never a
    /// digest of part of the tree.
    #[test]
    fn a_stopped_walk_gives_no_digest_and_an_unstopped_one_the_whole() {
        with_cwd_kept(stopped_walks);
    }

    fn stopped_walks() {
        let root = tree_of("stopped");
        let whole = tree(&root).unwrap();
        let mut asked = 0u32;
        let unstopped = tree_while(&root, || {
            asked += 1;
            true
        })
        .unwrap();
        assert_eq!(unstopped, Some(whole));
        // Every entry and every read asked: 6 entries (with the root's own 'a'), and the
        // 200,000-byte file's reads in 64 KiB pieces.
        assert!(asked >= 6 + 4, "asked {asked} times");
        for stop_at in 1..asked {
            let mut n = 0u32;
            let walked = tree_while(&root, || {
                n += 1;
                n < stop_at
            })
            .unwrap();
            assert_eq!(walked, None, "stopped at call {stop_at}");
            assert_eq!(n, stop_at, "nothing more asked once it said no");
        }
        fs::remove_dir_all(&root).unwrap();
    }
}
