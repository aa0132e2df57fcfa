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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

/// The digest of the tree at `root` and its entry count.
pub fn tree(root: &Path) -> Result<(String, u64), String> {
    tree_while(root, || true)?.ok_or_else(|| "the walk was stopped".to_owned())
}

/// [`tree`], asking `go_on` before every entry and every read whether to go on: `None` when it
/// said no (the walk stops there, having read nothing more).
///
/// The listing is one thread's; the files' content is hashed by this thread and one helper, which
/// take the next file in turn. The helper is joined before this returns, so no thread outlives
/// the walk (a privilege drop after it finds the process as it was); if it cannot be started,
/// this thread hashes every file. Only this thread asks `go_on`, and once it says no the helper
/// stops at its next read.
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
    let mut files = Vec::new();
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
            if kind.is_dir() {
                stack.push(path);
                lines.push(format!("d {mode:o} {rel}"));
            } else if kind.is_symlink() {
                let target = fs::read_link(&path).map_err(|e| format!("{rel}: {e}"))?;
                lines.push(format!("l {rel} -> {}", target.to_string_lossy()));
            } else if kind.is_file() {
                files.push(File {
                    path,
                    rel,
                    mode,
                    len: meta.len(),
                });
            } else {
                lines.push(format!("s {mode:o} {rel}"));
            }
        }
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let hashed = std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("digest".into())
            .spawn_scoped(scope, || {
                hash_files(&files, &next, || !stop.load(Ordering::Relaxed))
            });
        let mine = hash_files(&files, &next, || {
            let on = go_on() && !stop.load(Ordering::Relaxed);
            if !on {
                stop.store(true, Ordering::Relaxed);
            }
            on
        });
        if mine.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let theirs = match helper {
            Ok(helper) => helper
                .join()
                .unwrap_or_else(|_| Err("the digest's helper thread panicked".to_owned())),
            Err(_) => Ok(Some(Vec::new())),
        };
        (mine, theirs)
    });
    match hashed {
        (Err(e), _) | (_, Err(e)) => return Err(e),
        (Ok(Some(mine)), Ok(Some(theirs))) if !stop.load(Ordering::Relaxed) => {
            lines.extend(mine);
            lines.extend(theirs);
        }
        _ => return Ok(None),
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

/// A regular file the listing found, with what its line says of it besides its content.
struct File {
    path: std::path::PathBuf,
    rel: String,
    mode: u32,
    len: u64,
}

/// The lines of the files this thread takes from `files`, in turn with the other (`next`), asking
/// `go_on` before every read: `None` once it said no.
fn hash_files(
    files: &[File],
    next: &AtomicUsize,
    mut go_on: impl FnMut() -> bool,
) -> Result<Option<Vec<String>>, String> {
    let mut lines = Vec::new();
    // One read buffer for every file: a fresh zeroed 64 KiB per file was a memset of 320 MB
    // over 5,000 files, most of the digest's time after the hashing itself.
    let mut buf = vec![0u8; 64 * 1024];
    while let Some(file) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
        let rel = &file.rel;
        let mut opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&file.path)
            .map_err(|e| format!("{rel}: {e}"))?;
        let mut hasher = Sha256::new();
        loop {
            if !go_on() {
                return Ok(None);
            }
            let n = opened.read(&mut buf).map_err(|e| format!("{rel}: {e}"))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        lines.push(format!(
            "f {:o} {} {rel} {}",
            file.mode,
            file.len,
            hex::encode(hasher.finalize())
        ));
    }
    Ok(Some(lines))
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
    use std::os::unix::fs::PermissionsExt;

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
        assert_eq!(unstopped, Some(whole.clone()));
        // Every entry the listing finds asked (5: `a`, and `a`'s `one`, `b` and `link`, and
        // `a/b/two`), and every read of the files this thread hashed: the helper takes its
        // share in turn and may take both, so that part can be nothing.
        assert!(asked >= 5, "asked {asked} times");
        let mut stopped = 0;
        for stop_at in 1..asked + 4 {
            let mut n = 0u32;
            let walked = tree_while(&root, || {
                n += 1;
                n < stop_at
            })
            .unwrap();
            if n >= stop_at {
                stopped += 1;
                assert_eq!(walked, None, "stopped at call {stop_at}");
                assert_eq!(n, stop_at, "nothing more asked once it said no");
            } else {
                assert_eq!(
                    walked,
                    Some(whole.clone()),
                    "never told to stop at {stop_at}"
                );
            }
        }
        assert!(stopped >= 5, "stopped {stopped} times");
        fs::remove_dir_all(&root).unwrap();
    }

    /// The digest is the sha256 of the sorted lines of every entry, whichever thread hashed a
    /// file: each file once, none left out (checked against the lines written out here).
    #[test]
    fn every_file_is_hashed_once_whichever_thread_takes_it() {
        with_cwd_kept(many_files);
    }

    fn many_files() {
        let root =
            std::env::temp_dir().join(format!("cordon-init-digest-many-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let mut lines = Vec::new();
        for d in 0..7 {
            fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
            lines.push(format!("d 755 d{d}"));
        }
        for i in 0..300u32 {
            let rel = format!("d{}/f{i}", i % 7);
            let data = vec![(i % 251) as u8; (i as usize * 977) % 150_000];
            fs::write(root.join(&rel), &data).unwrap();
            fs::set_permissions(root.join(&rel), fs::Permissions::from_mode(0o644)).unwrap();
            let hash = hex::encode(Sha256::digest(&data));
            lines.push(format!("f 644 {} {rel} {hash}", data.len()));
        }
        for d in 0..7 {
            fs::set_permissions(
                root.join(format!("d{d}")),
                fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        }
        lines.sort();
        let mut hasher = Sha256::new();
        for line in &lines {
            hasher.update(line.as_bytes());
            hasher.update(b"\n");
        }
        let expected = format!("sha256:{}", hex::encode(hasher.finalize()));
        for _ in 0..20 {
            assert_eq!(tree(&root).unwrap(), (expected.clone(), lines.len() as u64));
        }
        fs::remove_dir_all(&root).unwrap();
    }
}
