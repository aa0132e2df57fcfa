//! `tree inspect`: every difference between the work tree and base's index, each new file and
//! link with the blob id a commit would store (git's sha1 of the bytes as read, no filters), and
//! the declared links as they are now.
//!
//! The walk is `tree check`'s: one thread lists each directory from its parent's fd (`fstatat` of
//! each name, links read and gitlinks listed inline) and queues the regular files in batches on a
//! bounded channel; `available_parallelism` workers open and hash them. Nothing follows a link
//! ([`super::fs`]).
//!
//! Base's ignore rules come from the host (read from base's objects), never from the work tree,
//! whose `.gitignore` files the agent may have changed. They are matched as git matches them: the
//! deepest `.gitignore` with a matching line decides, the last matching line of a file wins, `!`
//! un-ignores, and everything beneath an ignored directory is ignored. A new directory they ignore
//! is one change and is not descended (unless a part of its path is `.git`); an empty new
//! directory is one change; a base gitlink whose directory is not empty is one change.
//!
//! Refusals never come with a part of the answer: past [`MAX_CHANGES`], a changed name or new
//! link target the manifest cannot carry ([`reportable`]), more than the recorded targets the
//! link snapshot holds, anything unreadable, a sparse file. `changes` and
//! `nested_gitlink_content` are then empty and `findings` say why.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

use cordon_contract::audit::{
    reportable, Change, IgnoreRules, InspectReport, Kind, Side, MAX_CHANGES, MAX_IGNORE_FILES,
};
use cordon_contract::tree::{clean_path, Reason, MAX_DECLARED_PATHS};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use super::check::{bounded, is_commit_id, join, read_head, with_metadata_digest, Findings};
use super::fs::{self, Stat, Type};
use super::index::{self, Base, Mode, Node};
use super::links;

/// A file with an apparent size over this, and fewer allocated bytes than half of it, is sparse:
/// never read (a terabyte of holes reads as a terabyte of zeros).
pub const SPARSE_ABOVE: u64 = 1024 * 1024;
/// Files per hashing batch.
const BATCH: usize = 128;
/// At most this many hashing threads.
const MAX_THREADS: usize = 16;

/// The whole inspection: [`inspect_tree`], and the metadata digest beside it.
pub fn inspect(
    work_root: &Path,
    metadata_root: &Path,
    base: &str,
    rules: &IgnoreRules,
    declared: &[String],
) -> Result<InspectReport, String> {
    let (report, digest) = with_metadata_digest(metadata_root, || {
        inspect_tree(work_root, metadata_root, base, rules, declared)
    })?;
    Ok(InspectReport {
        metadata_digest: digest,
        ..report
    })
}

/// Everything but the metadata digest (left empty).
pub fn inspect_tree(
    work_root: &Path,
    metadata_root: &Path,
    base: &str,
    rules: &IgnoreRules,
    declared: &[String],
) -> Result<InspectReport, String> {
    if !is_commit_id(base) {
        return Err(format!(
            "base {:?} is not a commit id (40 lowercase hex digits)",
            bounded(base.to_owned(), 64)
        ));
    }
    if declared.len() > MAX_DECLARED_PATHS {
        return Err(format!(
            "{} declared paths, more than {MAX_DECLARED_PATHS}",
            declared.len()
        ));
    }
    if let Some(bad) = declared.iter().find(|p| !clean_path(p)) {
        return Err(format!(
            "the declared path {:?} is not a clean relative path",
            bounded(bad.clone(), 256)
        ));
    }
    let rules = Rules::new(rules)?;
    let metadata = fs::open_root(metadata_root)
        .map_err(|e| format!("cannot open the metadata {}: {e}", metadata_root.display()))?;
    let head = read_head(&metadata);
    let tree = index::base(&metadata)?;
    drop(metadata);
    let root = fs::open_root(work_root)
        .map_err(|e| format!("cannot open the work tree {}: {e}", work_root.display()))?;
    let findings = Findings::default();
    let sink = Sink {
        findings: &findings,
        changes: Mutex::new(Vec::new()),
        nested: Mutex::new(Vec::new()),
        count: AtomicUsize::new(0),
    };
    walk(&root, &tree, &rules, &sink)?;
    let links = match links::declared_links(&root, declared) {
        Ok(links) => links,
        Err(e) if e.too_many_targets => {
            findings.add(Reason::TooManyTargets, b"", e.detail);
            Vec::new()
        }
        Err(e) => {
            findings.add(Reason::Unreadable, e.path.as_bytes(), e.detail);
            Vec::new()
        }
    };
    let Sink {
        changes, nested, ..
    } = sink;
    let mut changes = changes.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut nested = nested.into_inner().unwrap_or_else(PoisonError::into_inner);
    let (findings, more) = findings.into_listed();
    if findings.is_empty() {
        changes.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        nested.sort();
    } else {
        changes = Vec::new();
        nested = Vec::new();
    }
    Ok(InspectReport {
        head,
        metadata_digest: String::new(),
        entries: tree.entries.len() as u64,
        changes,
        nested_gitlink_content: nested,
        links,
        findings,
        more,
    })
}

fn hex(oid: &[u8; 20]) -> String {
    hex::encode(oid)
}

/// Base's side of an index entry.
fn base_side(mode: Mode, oid: &[u8; 20]) -> Side {
    Side {
        kind: match mode {
            Mode::File => Kind::File,
            Mode::Executable => Kind::Executable,
            Mode::Link => Kind::Link,
            Mode::Gitlink => Kind::Gitlink,
        },
        blob: Some(hex(oid)),
        size: None,
        target: None,
    }
}

fn bare(kind: Kind) -> Side {
    Side {
        kind,
        blob: None,
        size: None,
        target: None,
    }
}

/// A part of the path is `.git` (in any case): such a directory is always descended, never
/// collapsed as ignored (what is in it is listed, never hidden).
fn has_git_part(path: &[u8]) -> bool {
    path.split(|b| *b == b'/')
        .any(|part| part.eq_ignore_ascii_case(b".git"))
}

/// Base's ignore rules: one matcher per `.gitignore`, by the directory that holds it.
pub struct Rules {
    by_dir: HashMap<Vec<u8>, Gitignore>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("files", &self.by_dir.len())
            .finish()
    }
}

impl Rules {
    /// At most [`MAX_IGNORE_FILES`], each in a clean directory (or `""`), once each. A line the
    /// matcher cannot take matches nothing (as git skips a pattern it cannot use).
    pub fn new(rules: &IgnoreRules) -> Result<Rules, String> {
        if rules.files.len() > MAX_IGNORE_FILES {
            return Err(format!(
                "{} ignore files, more than {MAX_IGNORE_FILES}",
                rules.files.len()
            ));
        }
        let mut by_dir = HashMap::new();
        for file in &rules.files {
            if !file.dir.is_empty() && !clean_path(&file.dir) {
                return Err(format!(
                    "the ignore file's directory {:?} is not a clean relative path",
                    bounded(file.dir.clone(), 256)
                ));
            }
            let mut builder = GitignoreBuilder::new(format!("/{}", file.dir));
            let text = file.text.strip_prefix('\u{feff}').unwrap_or(&file.text);
            for line in text.split('\n') {
                // git drops a CR before the LF.
                let line = line.strip_suffix('\r').unwrap_or(line);
                let _ = builder.add_line(None, line);
            }
            let matcher = builder.build().map_err(|e| {
                format!(
                    "the ignore rules of {:?}: {e}",
                    bounded(file.dir.clone(), 256)
                )
            })?;
            if by_dir
                .insert(file.dir.as_bytes().to_vec(), matcher)
                .is_some()
            {
                return Err(format!(
                    "the ignore rules hold the directory {:?} twice",
                    bounded(file.dir.clone(), 256)
                ));
            }
        }
        Ok(Rules { by_dir })
    }

    /// The entry `path` (not its directories: the caller carries whether one is ignored) as the
    /// rules of its directories decide, the deepest first: ignored, un-ignored, or no rule.
    fn decide(&self, path: &[u8], is_dir: bool) -> Option<bool> {
        if self.by_dir.is_empty() {
            return None;
        }
        let mut full = Vec::with_capacity(path.len() + 1);
        full.push(b'/');
        full.extend_from_slice(path);
        let full = Path::new(OsStr::from_bytes(&full));
        let mut ends: Vec<usize> = path
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(at, _)| at)
            .collect();
        ends.insert(0, 0);
        for &end in ends.iter().rev() {
            let Some(matcher) = self.by_dir.get(&path[..end]) else {
                continue;
            };
            match matcher.matched(full, is_dir) {
                Match::Ignore(_) => return Some(true),
                Match::Whitelist(_) => return Some(false),
                Match::None => {}
            }
        }
        None
    }

    /// A new entry in a directory (itself ignored or not) is ignored.
    fn ignored(&self, parent_ignored: bool, path: &[u8], is_dir: bool) -> bool {
        parent_ignored || self.decide(path, is_dir) == Some(true)
    }
}

/// The changes, shared by the walker and the hashing workers.
struct Sink<'a> {
    findings: &'a Findings,
    changes: Mutex<Vec<Change>>,
    nested: Mutex<Vec<String>>,
    count: AtomicUsize,
}

impl Sink<'_> {
    fn stopped(&self) -> bool {
        self.findings.stopped()
    }

    fn unreadable(&self, path: &[u8], detail: impl Into<String>) {
        self.findings.add(Reason::Unreadable, path, detail);
    }

    /// A changed path the manifest can carry, or a `bad-name` finding.
    fn name(&self, path: &[u8]) -> Option<String> {
        match reportable(path) {
            Ok(text) => Some(text.to_owned()),
            Err(why) => {
                self.findings.add(Reason::BadName, path, why.to_string());
                None
            }
        }
    }

    /// Record a change; past [`MAX_CHANGES`] the reading stops.
    fn push(
        &self,
        path: &[u8],
        old: Option<Side>,
        new: Option<Side>,
        ignored: bool,
        traverses: Option<bool>,
    ) -> bool {
        let Some(path) = self.name(path) else {
            return false;
        };
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 > MAX_CHANGES {
            self.findings.stop();
            return false;
        }
        self.changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Change {
                path,
                old,
                new,
                ignored,
                link_target_traverses_link: traverses,
            });
        true
    }

    fn deleted(&self, base: &Base, entry: usize) {
        let entry = &base.entries[entry];
        self.push(
            &entry.path,
            Some(base_side(entry.mode, &entry.oid)),
            None,
            false,
            None,
        );
    }
}

/// A file to hash.
struct Job {
    name: CString,
    stat: Stat,
    path: Vec<u8>,
    /// Base's entry at this path (none: new).
    old: Option<usize>,
    ignored: bool,
}

/// Files of one directory to hash.
struct Batch {
    dir: Arc<OwnedFd>,
    jobs: Vec<Job>,
}

/// How to visit a directory still to list.
#[derive(Debug, Clone, Copy)]
enum Visit {
    /// A directory of base's tree (ignored by base's rules, or not).
    Tracked { dir: usize, ignored: bool },
    /// A directory base does not have there; `replaces` base's file, link or gitlink at its path.
    New {
        ignored: bool,
        replaces: Option<usize>,
    },
}

struct Pending {
    parent: Arc<OwnedFd>,
    name: CString,
    path: Vec<u8>,
    visit: Visit,
}

fn walk(root: &OwnedFd, base: &Base, rules: &Rules, sink: &Sink<'_>) -> Result<(), String> {
    let top = Arc::new(
        root.try_clone()
            .map_err(|e| format!("dup the work tree's fd: {e}"))?,
    );
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    let (queue, jobs) = sync_channel::<Batch>(threads * 4);
    let jobs = Mutex::new(jobs);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| hash_files(&jobs, base, sink));
        }
        let mut walker = Walker {
            base,
            rules,
            sink,
            root,
            queue,
            pending: Vec::new(),
        };
        walker.run(top);
        // Dropping the walker closes the queue: the workers finish what is queued and end.
    });
    Ok(())
}

fn hash_files(jobs: &Mutex<Receiver<Batch>>, base: &Base, sink: &Sink<'_>) {
    let mut buf = vec![0u8; fs::READ_BUFFER];
    loop {
        let next = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(batch) = next else { return };
        for job in &batch.jobs {
            if sink.stopped() {
                break;
            }
            hash_file(&batch.dir, job, base, sink, &mut buf);
        }
    }
}

/// A regular file as read: its blob and size (none, with a finding, when it cannot be).
fn file_side(dir: &OwnedFd, job: &Job, sink: &Sink<'_>, buf: &mut [u8]) -> Option<Side> {
    let sparse = |stat: &Stat| stat.size > SPARSE_ABOVE && stat.allocated < stat.size / 2;
    let refuse_sparse = |stat: &Stat| {
        sink.unreadable(
            &job.path,
            format!("sparse: size {}, allocated {}", stat.size, stat.allocated),
        )
    };
    if sparse(&job.stat) {
        refuse_sparse(&job.stat);
        return None;
    }
    let (mut file, open) = match fs::open_file_at(dir.as_fd(), &job.name, &job.stat) {
        Ok(file) => file,
        Err(e) => {
            sink.unreadable(&job.path, format!("open: {e}"));
            return None;
        }
    };
    if sparse(&open) {
        refuse_sparse(&open);
        return None;
    }
    let (oid, read) = match fs::blob_of_file(&mut file, open.size, buf) {
        Ok(done) => done,
        Err(e) => {
            sink.unreadable(&job.path, format!("read: {e}"));
            return None;
        }
    };
    if read != open.size {
        sink.unreadable(
            &job.path,
            format!(
                "read {} bytes where fstat gave {}: changed while read",
                if read > open.size {
                    format!("more than {}", open.size)
                } else {
                    read.to_string()
                },
                open.size
            ),
        );
        return None;
    }
    match fs::stat_fd(file.as_fd()) {
        Err(e) => {
            sink.unreadable(&job.path, format!("fstat after reading: {e}"));
            return None;
        }
        Ok(after)
            if (after.size, after.mtime, after.ctime) != (open.size, open.mtime, open.ctime) =>
        {
            sink.unreadable(
                &job.path,
                "changed while read (fstat differs after reading)",
            );
            return None;
        }
        Ok(_) => {}
    }
    Some(Side {
        kind: if open.executable() {
            Kind::Executable
        } else {
            Kind::File
        },
        blob: Some(hex(&oid)),
        size: Some(read),
        target: None,
    })
}

fn hash_file(dir: &OwnedFd, job: &Job, base: &Base, sink: &Sink<'_>, buf: &mut [u8]) {
    let Some(new) = file_side(dir, job, sink, buf) else {
        return;
    };
    match job.old {
        None => {
            sink.push(&job.path, None, Some(new), job.ignored, None);
        }
        Some(number) => {
            let entry = &base.entries[number];
            let old = base_side(entry.mode, &entry.oid);
            if old.kind != new.kind || old.blob != new.blob {
                sink.push(&job.path, Some(old), Some(new), false, None);
            }
        }
    }
}

struct Walker<'a, 's> {
    base: &'a Base,
    rules: &'a Rules,
    sink: &'a Sink<'s>,
    /// The work tree's root, for resolving new links.
    root: &'a OwnedFd,
    queue: SyncSender<Batch>,
    pending: Vec<Pending>,
}

impl Walker<'_, '_> {
    fn run(&mut self, top: Arc<OwnedFd>) {
        self.visit_tracked(top, &[], Base::ROOT, false);
        while let Some(next) = self.pending.pop() {
            if self.sink.stopped() {
                return;
            }
            match fs::open_dir_at(next.parent.as_fd(), &next.name) {
                Ok(fd) => match next.visit {
                    Visit::Tracked { dir, ignored } => {
                        self.visit_tracked(Arc::new(fd), &next.path, dir, ignored)
                    }
                    Visit::New { ignored, replaces } => {
                        self.visit_new(Arc::new(fd), &next.path, ignored, replaces)
                    }
                },
                Err(e) => self.sink.unreadable(&next.path, format!("open: {e}")),
            }
        }
    }

    fn send(&self, dir: &Arc<OwnedFd>, jobs: &mut Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        // The workers only end when the queue closes, or by a panic (which ends the process).
        let _ = self.queue.send(Batch {
            dir: dir.clone(),
            jobs: std::mem::take(jobs),
        });
    }

    fn job(&self, dir: &Arc<OwnedFd>, jobs: &mut Vec<Job>, job: Job) {
        jobs.push(job);
        if jobs.len() == BATCH {
            self.send(dir, jobs);
        }
    }

    /// One directory of base: every name in it, then base's entries it does not hold.
    fn visit_tracked(&mut self, fd: Arc<OwnedFd>, path: &[u8], dir: usize, ignored: bool) {
        let (base, sink) = (self.base, self.sink);
        let node = &base.dirs[dir];
        let top = dir == Base::ROOT;
        // Beyond base's names (and `.git`), every name is at least one change or finding: more
        // than MAX_CHANGES of those refuse the answer anyway, so no listing is read further.
        let cap = node.children.len() + 1 + MAX_CHANGES + 1;
        let (names, complete) = match fs::list_dir(fd.as_fd(), cap) {
            Ok(listing) => listing,
            Err(e) => return sink.unreadable(path, format!("list: {e}")),
        };
        let mut seen = vec![false; node.children.len()];
        let mut jobs = Vec::new();
        for name in names {
            if sink.stopped() {
                return;
            }
            let bytes = name.to_bytes();
            if top && bytes == b".git" {
                // The metadata's mountpoint: its digest covers it.
                continue;
            }
            let found = base.child(dir, bytes);
            if let Some((at, _)) = found {
                seen[at] = true;
            }
            let full = join(path, bytes);
            let stat = match fs::stat_at(fd.as_fd(), &name) {
                Ok(stat) => stat,
                Err(e) => {
                    sink.unreadable(&full, format!("stat: {e}"));
                    continue;
                }
            };
            match found {
                None => self.new_entry(&fd, &mut jobs, name, full, stat, ignored),
                Some((_, Node::Dir(child))) if stat.kind() == Type::Dir => {
                    let ignored = self.rules.ignored(ignored, &full, true);
                    self.pending.push(Pending {
                        parent: fd.clone(),
                        name,
                        path: full,
                        visit: Visit::Tracked {
                            dir: child,
                            ignored,
                        },
                    });
                }
                Some((_, Node::Dir(child))) => {
                    // A directory of base that is now something else: all beneath it is gone,
                    // and what is there is new.
                    let d = &base.dirs[child];
                    for entry in d.first..d.end {
                        if sink.stopped() {
                            return;
                        }
                        sink.deleted(base, entry);
                    }
                    self.new_entry(&fd, &mut jobs, name, full, stat, ignored);
                }
                Some((_, Node::Entry(entry))) => {
                    self.entry(&fd, &mut jobs, name, full, stat, entry, ignored)
                }
            }
        }
        self.send(&fd, &mut jobs);
        if !complete {
            // More names than the cap: the changes among them are more than MAX_CHANGES.
            self.sink.findings.stop();
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
                if sink.stopped() {
                    return;
                }
                sink.deleted(base, entry);
            }
        }
    }

    /// A directory base does not have: each entry in it is new; empty, it is one change.
    fn visit_new(&mut self, fd: Arc<OwnedFd>, path: &[u8], ignored: bool, replaces: Option<usize>) {
        let (base, sink) = (self.base, self.sink);
        let (names, complete) = match fs::list_dir(fd.as_fd(), MAX_CHANGES + 1) {
            Ok(listing) => listing,
            Err(e) => return sink.unreadable(path, format!("list: {e}")),
        };
        if names.is_empty() {
            let old = replaces.map(|n| base_side(base.entries[n].mode, &base.entries[n].oid));
            let ignored = ignored && replaces.is_none();
            sink.push(path, old, Some(bare(Kind::Dir)), ignored, None);
            return;
        }
        if let Some(entry) = replaces {
            sink.deleted(base, entry);
        }
        let mut jobs = Vec::new();
        for name in names {
            if sink.stopped() {
                return;
            }
            let full = join(path, name.to_bytes());
            match fs::stat_at(fd.as_fd(), &name) {
                Ok(stat) => self.new_entry(&fd, &mut jobs, name, full, stat, ignored),
                Err(e) => sink.unreadable(&full, format!("stat: {e}")),
            }
        }
        self.send(&fd, &mut jobs);
        if !complete {
            // Each of more than MAX_CHANGES names is at least one change.
            sink.findings.stop();
        }
    }

    /// A new link's side: its target (which must be reportable), its blob, and whether it
    /// traverses a link (or leaves the tree, reaches the metadata, loops).
    fn link_side(&self, fd: &OwnedFd, name: &CString, path: &[u8]) -> Option<(Side, bool)> {
        let sink = self.sink;
        let target = match fs::read_link_at(fd.as_fd(), name) {
            Ok(target) => target,
            Err(e) => {
                sink.unreadable(path, format!("readlink: {e}"));
                return None;
            }
        };
        let text = match reportable(&target) {
            Ok(text) => text.to_owned(),
            Err(why) => {
                sink.findings
                    .add(Reason::BadName, path, format!("its target: {why}"));
                return None;
            }
        };
        let traverses = match links::link_traverses(self.root, path, &target) {
            Ok(traverses) => traverses,
            Err(e) => {
                sink.unreadable(path, format!("resolving its target: {e}"));
                return None;
            }
        };
        Some((
            Side {
                kind: Kind::Link,
                blob: Some(hex(&fs::blob_of(&target))),
                size: None,
                target: Some(text),
            },
            traverses,
        ))
    }

    /// A special file's side.
    fn special(stat: &Stat) -> Side {
        bare(match stat.kind() {
            Type::Fifo => Kind::Fifo,
            Type::Socket => Kind::Socket,
            _ => Kind::Device,
        })
    }

    /// An entry base does not have (in a directory `parent_ignored` or not).
    fn new_entry(
        &mut self,
        fd: &Arc<OwnedFd>,
        jobs: &mut Vec<Job>,
        name: CString,
        path: Vec<u8>,
        stat: Stat,
        parent_ignored: bool,
    ) {
        let sink = self.sink;
        let kind = stat.kind();
        let ignored = self.rules.ignored(parent_ignored, &path, kind == Type::Dir);
        match kind {
            Type::Dir if ignored && !has_git_part(&path) => {
                sink.push(&path, None, Some(bare(Kind::Dir)), true, None);
            }
            Type::Dir => self.pending.push(Pending {
                parent: fd.clone(),
                name,
                path,
                visit: Visit::New {
                    ignored,
                    replaces: None,
                },
            }),
            Type::File => self.job(
                fd,
                jobs,
                Job {
                    name,
                    stat,
                    path,
                    old: None,
                    ignored,
                },
            ),
            Type::Link => {
                if let Some((side, traverses)) = self.link_side(fd, &name, &path) {
                    sink.push(&path, None, Some(side), ignored, Some(traverses));
                }
            }
            _ => {
                sink.push(&path, None, Some(Self::special(&stat)), ignored, None);
            }
        }
    }

    /// A name that is an index entry: unchanged, changed, or of another type.
    #[allow(clippy::too_many_arguments)]
    fn entry(
        &mut self,
        fd: &Arc<OwnedFd>,
        jobs: &mut Vec<Job>,
        name: CString,
        path: Vec<u8>,
        stat: Stat,
        number: usize,
        parent_ignored: bool,
    ) {
        let sink = self.sink;
        let entry = &self.base.entries[number];
        let old = || base_side(entry.mode, &entry.oid);
        match (entry.mode, stat.kind()) {
            (_, Type::File) => self.job(
                fd,
                jobs,
                Job {
                    name,
                    stat,
                    path,
                    old: Some(number),
                    ignored: false,
                },
            ),
            (Mode::Gitlink, Type::Dir) => {
                let listing =
                    fs::open_dir_at(fd.as_fd(), &name).and_then(|sub| fs::list_dir(sub.as_fd(), 0));
                match listing {
                    Err(e) => sink.unreadable(&path, format!("list: {e}")),
                    Ok((_, true)) => {}
                    Ok((_, false)) => {
                        if sink.push(&path, Some(old()), Some(bare(Kind::Dir)), false, None) {
                            if let Ok(text) = reportable(&path) {
                                sink.nested
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .push(text.to_owned());
                            }
                        }
                    }
                }
            }
            (_, Type::Dir) => {
                // A file or link of base that is now a directory: base's entry is gone, and what
                // the directory holds is new.
                let ignored = self.rules.ignored(parent_ignored, &path, true);
                self.pending.push(Pending {
                    parent: fd.clone(),
                    name,
                    path,
                    visit: Visit::New {
                        ignored,
                        replaces: Some(number),
                    },
                });
            }
            (_, Type::Link) => {
                if entry.mode == Mode::Link {
                    match fs::read_link_at(fd.as_fd(), &name) {
                        Err(e) => return sink.unreadable(&path, format!("readlink: {e}")),
                        Ok(target) if fs::blob_of(&target) == entry.oid => return,
                        Ok(_) => {}
                    }
                }
                if let Some((side, traverses)) = self.link_side(fd, &name, &path) {
                    sink.push(&path, Some(old()), Some(side), false, Some(traverses));
                }
            }
            _ => {
                sink.push(&path, Some(old()), Some(Self::special(&stat)), false, None);
            }
        }
    }
}
