//! The `digest` role: a sha256 over a tree, read inside a container without following any link.
//! The seeder records it for the metadata volume as the baseline that later audits compare with.
//!
//! Every entry contributes its path (relative to the root), type, mode and size, and for a file its
//! content's sha256 and for a link its target, in sorted order, so equal trees give equal digests
//! whatever order the directory listing comes in.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use sha2::{Digest, Sha256};

use super::fs::{self, Stat, Type};

/// The digest of the tree at `root` and its entry count.
pub fn tree(root: &Path) -> Result<(String, u64), String> {
    tree_while(root, || true)?.ok_or_else(|| "the walk was stopped".to_owned())
}

/// [`tree`], asking `go_on` before every entry and every read whether to go on: `None` when it
/// said no (the walk stops there, having read nothing more).
///
/// Every directory and file is reached from a directory fd with [`fs`]'s no-follow primitives
/// (`openat2` beneath the root, no link; across mounts, as a container sees its tree: /work's
/// digest takes in /work/.git; a file is read only when it is still the regular file `fstatat`
/// listed), so no name is looked up from `/` (in a container, the storage driver's mount:
/// fuse-overlayfs here, one round trip to its daemon per lookup) and nothing moves the cwd. This
/// thread and one helper share the work: each lists a directory or hashes a file either listed,
/// files first, so only the few directories whose files are queued are held open. The
/// helper is joined before this returns, so no thread outlives the walk (a privilege drop after
/// it finds the process as it was); if it cannot be started, this thread does everything. Only
/// this thread asks `go_on`, and once it says no the helper stops at its next entry or read.
pub fn tree_while(
    root: &Path,
    go_on: impl FnMut() -> bool,
) -> Result<Option<(String, u64)>, String> {
    walk_tree(root, go_on, true)
}

/// [`tree_while`], with or without the helper thread.
fn walk_tree(
    root: &Path,
    mut go_on: impl FnMut() -> bool,
    helped: bool,
) -> Result<Option<(String, u64)>, String> {
    let fd = fs::open_root(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let walk = Walk::new(fd);
    let (mine, theirs) = std::thread::scope(|scope| {
        let helper = helped.then(|| {
            std::thread::Builder::new()
                .name("digest".into())
                .spawn_scoped(scope, || walk.work(|| !walk.stopped()))
        });
        let mine = walk.work(|| {
            let on = go_on() && !walk.stopped();
            if !on {
                walk.stop();
            }
            on
        });
        let theirs = match helper {
            Some(Ok(helper)) => helper
                .join()
                .unwrap_or_else(|_| Err("the digest's helper thread panicked".to_owned())),
            Some(Err(_)) | None => Ok(Vec::new()),
        };
        (mine, theirs)
    });
    let mut lines = mine?;
    lines.extend(theirs?);
    if walk.stopped() {
        return Ok(None);
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

/// A directory still to list: its path beneath the root as stored, and as its lines show it.
struct DirJob {
    raw: Vec<u8>,
    rel: String,
}

/// A regular file a listing found, to hash from its open directory.
struct FileJob {
    dir: Arc<OwnedFd>,
    name: CString,
    rel: String,
    stat: Stat,
}

/// What is left to do, how many threads are doing something that may add to it, and how many
/// wait for work (a wake-up is a syscall: only made when one waits).
#[derive(Default)]
struct Queue {
    dirs: Vec<DirJob>,
    files: VecDeque<FileJob>,
    busy: usize,
    idle: usize,
}

/// Files a listing queues at a time.
const FILE_BATCH: usize = 32;

enum Job {
    Dir(DirJob),
    File(FileJob),
}

/// The shared state of one walk.
struct Walk {
    root: OwnedFd,
    queue: Mutex<Queue>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Walk {
    fn new(root: OwnedFd) -> Walk {
        let queue = Queue {
            dirs: vec![DirJob {
                raw: Vec::new(),
                rel: String::new(),
            }],
            ..Queue::default()
        };
        Walk {
            root,
            queue: Mutex::new(queue),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Stop both threads (a failure or a no from `go_on`): a thread waiting for work wakes.
    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let queue = self.lock();
        if queue.idle > 0 {
            self.changed.notify_all();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next job, files first; `None` once nothing is left and nobody can add to it, or once
    /// the walk was stopped.
    fn next(&self) -> Option<Job> {
        let mut queue = self.lock();
        loop {
            if self.stopped() {
                return None;
            }
            let job = match queue.files.pop_front() {
                Some(file) => Some(Job::File(file)),
                None => queue.dirs.pop().map(Job::Dir),
            };
            if let Some(job) = job {
                queue.busy += 1;
                return Some(job);
            }
            if queue.busy == 0 {
                return None;
            }
            queue.idle += 1;
            queue = self
                .changed
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
            queue.idle -= 1;
        }
    }

    /// A job is done: when it was the last thing anyone was doing, the other thread may finish.
    fn done(&self) {
        let mut queue = self.lock();
        queue.busy -= 1;
        if queue.busy == 0 && queue.idle > 0 {
            self.changed.notify_all();
        }
    }

    /// Queue what a listing found.
    fn push(&self, dirs: &mut Vec<DirJob>, files: &mut Vec<FileJob>) {
        let mut queue = self.lock();
        queue.dirs.append(dirs);
        queue.files.extend(files.drain(..));
        if queue.idle > 0 {
            self.changed.notify_all();
        }
    }

    /// This thread's share: the lines of what it listed and hashed, asking `go_on` before every
    /// entry and every read (once it said no, the lines are not a digest's: the caller sees the
    /// stop).
    fn work(&self, mut go_on: impl FnMut() -> bool) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        // One read buffer for every file: a fresh zeroed 64 KiB per file was a memset of 320 MB
        // over 5,000 files, most of the digest's time after the hashing itself.
        let mut buf = vec![0u8; fs::READ_BUFFER];
        while let Some(job) = self.next() {
            let did = match job {
                Job::Dir(dir) => self.list(dir, &mut lines, &mut go_on),
                Job::File(file) => hash(&file, &mut buf, &mut go_on).map(|line| {
                    lines.extend(line);
                }),
            };
            self.done();
            if let Err(e) = did {
                // The other thread stops too: the walk fails as a whole.
                self.stop();
                return Err(e);
            }
        }
        Ok(lines)
    }

    /// List one directory: a line for each entry but a file, each file queued for hashing, each
    /// directory queued for listing.
    fn list(
        &self,
        dir: DirJob,
        lines: &mut Vec<String>,
        go_on: &mut impl FnMut() -> bool,
    ) -> Result<(), String> {
        let here = if dir.rel.is_empty() { "." } else { &dir.rel };
        let fd = if dir.raw.is_empty() {
            self.root.try_clone()
        } else {
            fs::c_name(&dir.raw).and_then(|name| fs::open_dir_any_mount(self.root.as_fd(), &name))
        }
        .map_err(|e| format!("{here}: {e}"))?;
        let (names, _) =
            fs::list_dir(fd.as_fd(), usize::MAX).map_err(|e| format!("{here}: {e}"))?;
        let fd = Arc::new(fd);
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        for name in names {
            if files.len() >= FILE_BATCH {
                self.push(&mut dirs, &mut files);
            }
            if !go_on() {
                return Ok(());
            }
            let shown = String::from_utf8_lossy(name.to_bytes());
            let rel = match dir.rel.is_empty() {
                true => shown.into_owned(),
                false => format!("{}/{shown}", dir.rel),
            };
            let stat = fs::stat_at(fd.as_fd(), &name).map_err(|e| format!("{rel}: {e}"))?;
            let mode = stat.mode & 0o7777;
            match stat.kind() {
                Type::Dir => {
                    lines.push(format!("d {mode:o} {rel}"));
                    let mut raw = dir.raw.clone();
                    if !raw.is_empty() {
                        raw.push(b'/');
                    }
                    raw.extend_from_slice(name.to_bytes());
                    dirs.push(DirJob { raw, rel });
                }
                Type::Link => {
                    let target =
                        fs::read_link_at(fd.as_fd(), &name).map_err(|e| format!("{rel}: {e}"))?;
                    let target = std::ffi::OsStr::from_bytes(&target).to_string_lossy();
                    lines.push(format!("l {rel} -> {target}"));
                }
                Type::File => files.push(FileJob {
                    dir: fd.clone(),
                    name,
                    rel,
                    stat,
                }),
                _ => lines.push(format!("s {mode:o} {rel}")),
            }
        }
        self.push(&mut dirs, &mut files);
        Ok(())
    }
}

/// A file's line: its mode, size and the sha256 of its content, asking `go_on` before every read
/// (`None` once it said no).
fn hash(
    file: &FileJob,
    buf: &mut [u8],
    go_on: &mut impl FnMut() -> bool,
) -> Result<Option<String>, String> {
    let rel = &file.rel;
    let (mut opened, stat) = fs::open_file_any_mount(file.dir.as_fd(), &file.name, &file.stat)
        .map_err(|e| format!("{rel}: {e}"))?;
    let mut hasher = Sha256::new();
    loop {
        if !go_on() {
            return Ok(None);
        }
        let n = match opened.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{rel}: {e}")),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(Some(format!(
        "f {:o} {} {rel} {}",
        stat.mode & 0o7777,
        stat.size,
        hex::encode(hasher.finalize())
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
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
    /// digest of part of the tree, and asks nothing more once it said no. Alone, the walk asks
    /// before each of the 5 entries (`a`, and `a`'s `one`, `b` and `link`, and `a/b/two`) and
    /// each of the 7 reads (`one`'s 200,000 bytes in four reads of 64 KiB and its end, `two`'s
    /// three bytes and its end): every one of those 12 places stops it.
    #[test]
    fn a_stopped_walk_gives_no_digest_and_an_unstopped_one_the_whole() {
        let root = tree_of("stopped");
        let whole = tree(&root).unwrap();
        for helped in [false, true] {
            let mut asked = 0u32;
            let unstopped = walk_tree(
                &root,
                || {
                    asked += 1;
                    true
                },
                helped,
            )
            .unwrap();
            assert_eq!(unstopped, Some(whole.clone()));
            if !helped {
                assert_eq!(asked, 12, "alone");
            }
            let mut stopped = 0;
            for stop_at in 1..asked + 4 {
                let mut n = 0u32;
                let walked = walk_tree(
                    &root,
                    || {
                        n += 1;
                        n < stop_at
                    },
                    helped,
                )
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
            if !helped {
                assert_eq!(stopped, 12, "every place stops it");
            }
        }
        fs::remove_dir_all(&root).unwrap();
    }

    /// A directory listed, then swapped for a link before it is opened, is refused, never
    /// followed: the walk opens it beneath the root with no link on the way. Alone, the walk asks
    /// before `a` (1) and `a`'s four entries (2 to 5), then hashes `a/one` (files first: its five
    /// reads ask 6 to 10) before it lists `a/b`: a swap at any of those reads lands between
    /// `a/b`'s listing and its open.
    #[test]
    fn a_directory_swapped_for_a_link_is_refused_not_followed() {
        for swap_at in 6..=10u32 {
            let root = tree_of("swapped");
            fs::create_dir_all(root.join("a/elsewhere")).unwrap();
            fs::write(root.join("a/elsewhere/three"), "three").unwrap();
            let mut n = 0u32;
            let walked = walk_tree(
                &root,
                || {
                    n += 1;
                    if n == swap_at {
                        fs::rename(root.join("a/b"), root.join("a/b.moved")).unwrap();
                        std::os::unix::fs::symlink("elsewhere", root.join("a/b")).unwrap();
                    }
                    true
                },
                false,
            );
            match walked {
                Err(e) => assert!(e.starts_with("a/b: "), "swapped at {swap_at}: {e}"),
                Ok(d) => panic!("swapped at {swap_at}: the link was followed: {d:?}"),
            }
            fs::remove_dir_all(&root).unwrap();
        }
    }

    /// The digest is the sha256 of the sorted lines of every entry, whichever thread hashed a
    /// file: each file once, none left out (checked against the lines written out here).
    #[test]
    fn every_file_is_hashed_once_whichever_thread_takes_it() {
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
