//! `tree check`: the work tree against base's index, and the declared operations against base.
//!
//! One thread walks the tree from the root's fd (listing each directory, `fstatat` of each name,
//! links read and gitlinks listed inline) and queues the files to hash in batches on a bounded
//! channel; `available_parallelism` workers open and hash them. Every lookup is relative to an
//! open directory, never an absolute path.
//!
//! The findings are sorted by path, then reason. Past [`MAX_UNACCOUNTED`] the reader stops and
//! lists a `too-many-changes` finding first, at the path `.` (the work tree's root: it is about
//! the whole tree).

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

use cordon_contract::tree::{
    clean_path, quote, CheckReport, Finding, OpKind, Operation, Reason, MAX_LISTED_REASONS,
    MAX_OPERATIONS, MAX_PATH_BYTES, MAX_UNACCOUNTED,
};

use super::fs::{self, Stat, Type};
use super::index::{self, Base, Lookup, Mode, Node};

/// The path a finding about the whole tree (and the root itself) carries.
pub const ROOT_PATH: &str = ".";
/// A finding's detail is at most this long.
pub const MAX_DETAIL: usize = 200;
/// Files per hashing batch.
const BATCH: usize = 128;
/// At most this many hashing threads.
const MAX_THREADS: usize = 16;

/// A path as a finding reports it: quoted when not UTF-8, `.` for the root, and at most
/// [`MAX_PATH_BYTES`] (a longer one is cut and ends in `...`).
pub fn report_path(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return ROOT_PATH.to_owned();
    }
    bounded(quote(bytes), MAX_PATH_BYTES)
}

/// `text` cut to at most `max` bytes on a character boundary, `...` marking the cut.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max.saturating_sub(3);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

fn hex(oid: &[u8; 20]) -> String {
    hex::encode(oid)
}

/// A `/`-separated path from a directory's path and a name.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    if !dir.is_empty() {
        path.extend_from_slice(dir);
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// The findings, shared by the walker and the hashing workers.
#[derive(Debug, Default)]
pub struct Findings {
    list: Mutex<Vec<Finding>>,
    stopped: AtomicBool,
}

impl Findings {
    pub fn add(&self, reason: Reason, path: &[u8], detail: impl Into<String>) {
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        list.push(Finding {
            reason,
            path: report_path(path),
            detail: bounded(detail.into(), MAX_DETAIL),
        });
        if list.len() > MAX_UNACCOUNTED {
            self.stopped.store(true, Ordering::Relaxed);
        }
    }

    /// Too many differences (the inspection counts its changes itself): stop reading.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// More than [`MAX_UNACCOUNTED`]: stop reading.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Sorted by path then reason; `too-many-changes` first when the reader stopped; at most
    /// [`MAX_LISTED_REASONS`] listed and the number of the rest.
    pub fn into_listed(self) -> (Vec<Finding>, u64) {
        let stopped = self.stopped();
        let mut all = self
            .list
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        all.sort_by(|a, b| {
            (a.path.as_str(), a.reason, a.detail.as_str()).cmp(&(
                b.path.as_str(),
                b.reason,
                b.detail.as_str(),
            ))
        });
        let mut listed = Vec::new();
        if stopped {
            listed.push(Finding {
                reason: Reason::TooManyChanges,
                path: ROOT_PATH.to_owned(),
                detail: format!("more than {MAX_UNACCOUNTED} differences: stopped reading"),
            });
        }
        let room = MAX_LISTED_REASONS - listed.len();
        let more = all.len().saturating_sub(room) as u64;
        listed.extend(all.into_iter().take(room));
        (listed, more)
    }
}

/// The whole check: [`check_tree`], and the metadata digest beside it.
pub fn check(
    work_root: &Path,
    metadata_root: &Path,
    base: &str,
    ops: &[Operation],
) -> Result<CheckReport, String> {
    let (report, digest) = with_metadata_digest(metadata_root, || {
        check_tree(work_root, metadata_root, base, ops)
    })?;
    Ok(CheckReport {
        metadata_digest: digest,
        ..report
    })
}

/// `body` (a walk of the work tree), with the metadata digest taken on a thread of its own beside
/// it: the two read different trees and neither writes. `body`'s failure is the answer when both
/// fail.
pub fn with_metadata_digest<T>(
    metadata_root: &Path,
    body: impl FnOnce() -> Result<T, String>,
) -> Result<(T, String), String> {
    std::thread::scope(|scope| {
        let digest = std::thread::Builder::new()
            .name("metadata".into())
            .spawn_scoped(scope, || metadata_digest(metadata_root));
        let walked = body();
        let digest = match digest {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the metadata digest's thread panicked".to_owned())),
            // No thread to spare: the digest after the walk, as one thread would.
            Err(_) => metadata_digest(metadata_root),
        };
        Ok((walked?, digest?))
    })
}

/// The digest role's digest of the metadata, byte for byte the seeder's baseline algorithm.
pub fn metadata_digest(metadata_root: &Path) -> Result<String, String> {
    super::digest::tree(metadata_root)
        .map(|(digest, _)| digest)
        .map_err(|e| format!("the metadata digest: {e}"))
}

/// A commit id as cordon seeds it: 40 lowercase hex digits.
pub fn is_commit_id(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// HEAD as cordon seeds it, detached: 40 lowercase hex digits and a newline; anything else (a
/// symbolic ref, unreadable) is `None`.
pub fn read_head(metadata: &OwnedFd) -> Option<String> {
    let bytes = fs::read_small_at(metadata.as_fd(), c"HEAD", 41).ok()??;
    let text = std::str::from_utf8(&bytes).ok()?;
    let hex = text.strip_suffix('\n')?;
    is_commit_id(hex).then(|| hex.to_owned())
}

/// Everything but the metadata digest (left empty).
pub fn check_tree(
    work_root: &Path,
    metadata_root: &Path,
    base: &str,
    ops: &[Operation],
) -> Result<CheckReport, String> {
    if !is_commit_id(base) {
        return Err(format!(
            "base {:?} is not a commit id (40 lowercase hex digits)",
            bounded(base.to_owned(), 64)
        ));
    }
    if ops.len() > MAX_OPERATIONS {
        return Err(format!(
            "{} operations, more than {MAX_OPERATIONS}",
            ops.len()
        ));
    }
    let metadata = fs::open_root(metadata_root)
        .map_err(|e| format!("cannot open the metadata {}: {e}", metadata_root.display()))?;
    let head = read_head(&metadata);
    let tree = index::base(&metadata)?;
    drop(metadata);
    let findings = Findings::default();
    check_operations(&tree, ops, &findings);
    let root = fs::open_root(work_root)
        .map_err(|e| format!("cannot open the work tree {}: {e}", work_root.display()))?;
    walk(root, &tree, &findings);
    let (listed, more) = findings.into_listed();
    Ok(CheckReport {
        head,
        metadata_digest: String::new(),
        entries: tree.entries.len() as u64,
        gitlinks: tree.gitlinks().map(quote).collect(),
        findings: listed,
        more,
    })
}

/// Every declared operation against base's tree.
pub fn check_operations(base: &Base, ops: &[Operation], findings: &Findings) {
    for op in ops {
        if !clean_path(&op.path) {
            findings.add(
                Reason::BadPath,
                op.path.as_bytes(),
                "not a clean relative path",
            );
            continue;
        }
        match (op.kind, op.renamed_from.as_deref()) {
            (OpKind::Rename, None) => {
                findings.add(
                    Reason::BadPath,
                    op.path.as_bytes(),
                    "a rename without renamed_from",
                );
            }
            (OpKind::Rename, Some(from)) => {
                destination(base, &op.path, findings);
                if clean_path(from) {
                    source(base, from, findings);
                } else {
                    findings.add(
                        Reason::BadPath,
                        from.as_bytes(),
                        "the rename's source is not a clean relative path",
                    );
                }
            }
            (kind, Some(_)) => findings.add(
                Reason::BadPath,
                op.path.as_bytes(),
                format!("renamed_from on {kind:?}, not a rename"),
            ),
            (OpKind::Add, None) => destination(base, &op.path, findings),
            (OpKind::Edit | OpKind::Delete, None) => source(base, &op.path, findings),
        }
    }
}

fn beneath(base: &Base, path: &str, entry: usize, findings: &Findings) {
    let entry = &base.entries[entry];
    findings.add(
        Reason::BeneathNonDirectory,
        path.as_bytes(),
        format!(
            "beneath {} {} of base",
            entry.mode.octal(),
            quote(&entry.path)
        ),
    );
}

/// An add's or rename's destination: free in base.
fn destination(base: &Base, path: &str, findings: &Findings) {
    match base.lookup(path.as_bytes()) {
        Lookup::Missing => {}
        Lookup::Beneath(entry) => beneath(base, path, entry, findings),
        Lookup::Found(Node::Entry(entry)) => findings.add(
            Reason::DestinationTaken,
            path.as_bytes(),
            format!("base has {} there", base.entries[entry].mode.octal()),
        ),
        Lookup::Found(Node::Dir(_)) => findings.add(
            Reason::DestinationTaken,
            path.as_bytes(),
            "base has a directory there",
        ),
    }
}

/// An edit's, delete's or rename's source: a file or link of base.
fn source(base: &Base, path: &str, findings: &Findings) {
    match base.lookup(path.as_bytes()) {
        Lookup::Missing => findings.add(
            Reason::SourceNotFile,
            path.as_bytes(),
            "base has nothing there",
        ),
        Lookup::Beneath(entry) => beneath(base, path, entry, findings),
        Lookup::Found(Node::Entry(entry)) if base.entries[entry].mode == Mode::Gitlink => findings
            .add(
                Reason::SourceGitlink,
                path.as_bytes(),
                "base has a gitlink (160000) there",
            ),
        Lookup::Found(Node::Entry(_)) => {}
        Lookup::Found(Node::Dir(_)) => findings.add(
            Reason::SourceNotFile,
            path.as_bytes(),
            "base has a directory there",
        ),
    }
}

/// A file to hash.
struct Job {
    name: CString,
    stat: Stat,
    entry: usize,
}

/// Files of one directory to hash.
struct Batch {
    dir: Arc<OwnedFd>,
    jobs: Vec<Job>,
}

/// A tracked directory still to visit.
struct Pending {
    parent: Arc<OwnedFd>,
    name: CString,
    path: Vec<u8>,
    dir: usize,
}

/// Walk the work tree from its root against base's tree.
pub fn walk(root: OwnedFd, base: &Base, findings: &Findings) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    let (queue, jobs) = sync_channel::<Batch>(threads * 4);
    let jobs = Mutex::new(jobs);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| hash_files(&jobs, base, findings));
        }
        let mut walker = Walker {
            base,
            findings,
            queue,
            pending: Vec::new(),
        };
        walker.run(root);
        // Dropping the walker closes the queue: the workers finish what is queued and end.
    });
}

fn hash_files(jobs: &Mutex<Receiver<Batch>>, base: &Base, findings: &Findings) {
    let mut buf = vec![0u8; fs::READ_BUFFER];
    loop {
        let next = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(batch) = next else { return };
        for job in &batch.jobs {
            if findings.stopped() {
                break;
            }
            hash_file(&batch.dir, job, base, findings, &mut buf);
        }
    }
}

fn hash_file(dir: &OwnedFd, job: &Job, base: &Base, findings: &Findings, buf: &mut [u8]) {
    let entry = &base.entries[job.entry];
    let (mut file, open) = match fs::open_file_at(dir.as_fd(), &job.name, &job.stat) {
        Ok(file) => file,
        Err(e) => return findings.add(Reason::Unreadable, &entry.path, format!("open: {e}")),
    };
    match fs::blob_of_file(&mut file, open.size, buf) {
        Err(e) => findings.add(Reason::Unreadable, &entry.path, format!("read: {e}")),
        Ok((_, read)) if read != open.size => findings.add(
            Reason::ContentChanged,
            &entry.path,
            format!(
                "read {} {} bytes fstat gave",
                if read > open.size {
                    "more than the"
                } else {
                    "fewer than the"
                },
                open.size
            ),
        ),
        Ok((oid, _)) if oid != entry.oid => findings.add(
            Reason::ContentChanged,
            &entry.path,
            format!("base blob {}, found {}", hex(&entry.oid), hex(&oid)),
        ),
        Ok(_) => {}
    }
}

struct Walker<'a> {
    base: &'a Base,
    findings: &'a Findings,
    queue: SyncSender<Batch>,
    pending: Vec<Pending>,
}

impl Walker<'_> {
    fn run(&mut self, root: OwnedFd) {
        self.visit(Arc::new(root), &[], Base::ROOT);
        while let Some(next) = self.pending.pop() {
            if self.findings.stopped() {
                return;
            }
            match fs::open_dir_at(next.parent.as_fd(), &next.name) {
                Ok(fd) => self.visit(Arc::new(fd), &next.path, next.dir),
                Err(e) => self
                    .findings
                    .add(Reason::Unreadable, &next.path, format!("open: {e}")),
            }
        }
    }

    /// One tracked directory: every name in it, then base's entries it does not hold.
    fn visit(&mut self, fd: Arc<OwnedFd>, path: &[u8], dir: usize) {
        let (base, findings) = (self.base, self.findings);
        let node = &base.dirs[dir];
        let top = dir == Base::ROOT;
        // Beyond base's names (and `.git`), every name is untracked: more than MAX_UNACCOUNTED
        // of those stop the reader anyway, so no listing is read further.
        let cap = node.children.len() + 1 + MAX_UNACCOUNTED + 1;
        let (names, complete) = match fs::list_dir(fd.as_fd(), cap) {
            Ok(listing) => listing,
            Err(e) => return findings.add(Reason::Unreadable, path, format!("list: {e}")),
        };
        let mut seen = vec![false; node.children.len()];
        let mut jobs = Vec::new();
        for name in names {
            if findings.stopped() {
                return;
            }
            let bytes = name.to_bytes();
            if top && bytes == b".git" {
                // The metadata's mountpoint: the digest covers it.
                continue;
            }
            let found = base.child(dir, bytes);
            if let Some((at, _)) = found {
                seen[at] = true;
            }
            let stat = match fs::stat_at(fd.as_fd(), &name) {
                Ok(stat) => stat,
                Err(e) => {
                    findings.add(Reason::Unreadable, &join(path, bytes), format!("stat: {e}"));
                    continue;
                }
            };
            match found {
                None => findings.add(
                    Reason::Untracked,
                    &join(path, bytes),
                    format!("found {}", stat.word()),
                ),
                Some((_, Node::Dir(child))) => {
                    if stat.kind() == Type::Dir {
                        let path = join(path, bytes);
                        self.pending.push(Pending {
                            parent: fd.clone(),
                            name,
                            path,
                            dir: child,
                        });
                    } else {
                        findings.add(
                            Reason::TypeChanged,
                            &join(path, bytes),
                            format!("base a directory, found {}", stat.word()),
                        );
                    }
                }
                Some((_, Node::Entry(entry))) => {
                    if let Some(job) = self.entry(&fd, name, stat, entry) {
                        jobs.push(job);
                        if jobs.len() == BATCH {
                            self.send(&fd, std::mem::take(&mut jobs));
                        }
                    }
                }
            }
        }
        if !jobs.is_empty() {
            self.send(&fd, jobs);
        }
        if !complete {
            // More names than the cap: the untracked ones among them stopped the reader.
            return;
        }
        for (at, child) in node.children.iter().enumerate() {
            if seen[at] {
                continue;
            }
            let missing = match child.node {
                Node::Entry(entry) => entry..entry + 1,
                Node::Dir(d) => base.dirs[d].first..base.dirs[d].end,
            };
            for entry in missing {
                if findings.stopped() {
                    return;
                }
                let entry = &base.entries[entry];
                findings.add(
                    Reason::Missing,
                    &entry.path,
                    format!("base {}", entry.mode.octal()),
                );
            }
        }
    }

    fn send(&self, dir: &Arc<OwnedFd>, jobs: Vec<Job>) {
        // The workers only end when the queue closes, or by a panic (which ends the process).
        let _ = self.queue.send(Batch {
            dir: dir.clone(),
            jobs,
        });
    }

    /// A name that is an index entry: its type and mode here, links and gitlinks at once; a
    /// file to hash is handed back.
    fn entry(&self, dir: &OwnedFd, name: CString, stat: Stat, number: usize) -> Option<Job> {
        let findings = self.findings;
        let entry = &self.base.entries[number];
        let kind = stat.kind();
        let type_changed = || {
            findings.add(
                Reason::TypeChanged,
                &entry.path,
                format!("base {}, found {}", entry.mode.octal(), stat.word()),
            )
        };
        match entry.mode {
            Mode::File | Mode::Executable => {
                if kind != Type::File {
                    type_changed();
                    return None;
                }
                let executable = entry.mode == Mode::Executable;
                if stat.executable() != executable {
                    findings.add(
                        Reason::ModeChanged,
                        &entry.path,
                        format!(
                            "base {}, found {}",
                            entry.mode.octal(),
                            if stat.executable() {
                                Mode::Executable.octal()
                            } else {
                                Mode::File.octal()
                            }
                        ),
                    );
                }
                return Some(Job {
                    name,
                    stat,
                    entry: number,
                });
            }
            Mode::Link if kind != Type::Link => type_changed(),
            Mode::Link => match fs::read_link_at(dir.as_fd(), &name) {
                Err(e) => findings.add(Reason::Unreadable, &entry.path, format!("readlink: {e}")),
                Ok(target) => {
                    let oid = fs::blob_of(&target);
                    if oid != entry.oid {
                        findings.add(
                            Reason::ContentChanged,
                            &entry.path,
                            format!("base blob {}, found {}", hex(&entry.oid), hex(&oid)),
                        );
                    }
                }
            },
            Mode::Gitlink if kind != Type::Dir => type_changed(),
            Mode::Gitlink => {
                let listing =
                    fs::open_dir_at(dir.as_fd(), &name).and_then(|fd| fs::list_dir(fd.as_fd(), 0));
                match listing {
                    Err(e) => findings.add(Reason::Unreadable, &entry.path, format!("list: {e}")),
                    Ok((_, true)) => {}
                    Ok((_, false)) => findings.add(
                        Reason::GitlinkContent,
                        &entry.path,
                        "base 160000 (an empty directory), found entries in it",
                    ),
                }
            }
        }
        None
    }
}
