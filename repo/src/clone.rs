//! The staging clone: a private, standalone copy of the source repository's objects and refs,
//! made without running anything in the source.
//!
//! git never runs in the source repository (its config, hooks, attributes and filters are the
//! repository's, and the repository is not trusted). The object store and the refs are copied as
//! data, file by file, from one descriptor of the repository's directory down, with no link
//! followed in any component ([`super::source`]): a link or a special file anywhere on the way
//! (`.git` itself, `objects`, a fan-out directory, `objects/info`, `objects/pack`, `refs` and
//! below, `packed-refs`, `HEAD`), or an alternates file that points at another object store,
//! makes the repository unusable. Every file is opened non-blocking, checked to be a regular file
//! on the descriptor it is then read from, and read with a bound; one with more than one link on
//! that descriptor (it is also elsewhere) is copied only if it is the owner's and verifies as what
//! its name says ([`super::verify`]). The listing and the copy run on a thread of their own that
//! the caller gives up on at the deadline. git then runs, hardened, only in the copy, to resolve
//! the head, check that every object it needs is there, and list the tree.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::git::Git;
use super::source::{self, Kind as SourceKind, Refused};
use super::tree::{self, Entry, Kind, Needs};
use super::verify::{self, Linked, Mismatch, Verifier};
use crate::error::{Error, Result};
use crate::unusable::Unusable;

/// The most a source object store may hold (bytes) before it is refused without copying.
pub const MAX_OBJECT_STORE_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// The most files it may hold.
pub const MAX_OBJECT_STORE_FILES: u64 = 1_000_000;
/// The longest link target a checkout may carry.
pub const MAX_LINK_TARGET: usize = 4095;

/// A staging directory, removed when dropped (also when the future making it is cancelled).
/// Dropping it first tells a copy still running into it to stop.
#[derive(Debug)]
pub struct StagingDir {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl StagingDir {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // A copy thread given up on may create one more file after it last looked at the flag
        // (then removal finds a directory not empty): try again.
        for _ in 0..5 {
            match fs::remove_dir_all(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                _ => return,
            }
        }
    }
}

/// When the work on the source stops: at the deadline, or when the caller gave up on it.
#[derive(Debug, Clone)]
struct Stop {
    deadline: Instant,
    given_up: Arc<AtomicBool>,
}

impl Stop {
    fn check(&self) -> Result<()> {
        if self.given_up.load(Ordering::SeqCst) {
            return Err(Error::Invalid("staging was given up".into()));
        }
        if Instant::now() >= self.deadline {
            return Err(Error::Deadline("staging the repository".into()));
        }
        Ok(())
    }
}

/// Sets the flag when dropped: the future waiting for the work finished, timed out or was
/// cancelled.
struct GiveUp(Arc<AtomicBool>);

impl Drop for GiveUp {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Run `work` on a thread of its own and wait for it until the deadline: a thread stuck in a
/// system call (a hung file system) does not hold the caller past it. It is a plain thread, not
/// a tokio blocking task, so one that never returns does not hold up the runtime's shutdown
/// either. The work checks its [`Stop`] between files and between chunks of a file; it is told
/// to give up when this returns or is dropped.
async fn off_thread<T: Send + 'static>(
    what: &str,
    stop: &Stop,
    work: impl FnOnce(Stop) -> Result<T> + Send + 'static,
) -> Result<T> {
    stop.check()?;
    let (send, receive) = tokio::sync::oneshot::channel();
    let for_work = stop.clone();
    std::thread::Builder::new()
        .name("cordon-stage".into())
        .spawn(move || {
            let _ = send.send(work(for_work));
        })
        .map_err(|e| Error::io(format!("starting the thread for {what}"), e))?;
    let _give_up = GiveUp(stop.given_up.clone());
    let left = stop.deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, receive).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Error::Internal(format!(
            "{what}: the thread ended without a result"
        ))),
        Err(_) => Err(Error::Deadline(what.to_owned())),
    }
}

/// The name prefix of an owner's staging directories (recovery removes what a killed process
/// left). `owner` is the runner's owner token (`cordon::labels::Owner`: `[a-z0-9-]`).
pub fn staging_prefix(owner: &str) -> String {
    format!("cordon-stage-{owner}-")
}

/// Where staging directories may be: `CORDON_STAGING_DIR` when set, /dev/shm, the temp dir.
/// Recovery looks in all of them.
pub fn staging_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(dir) = std::env::var_os("CORDON_STAGING_DIR").filter(|d| !d.is_empty()) {
        roots.push(PathBuf::from(dir));
    }
    roots.push(PathBuf::from("/dev/shm"));
    roots.push(std::env::temp_dir());
    roots.dedup();
    roots
}

/// Where this staging copy goes: `CORDON_STAGING_DIR` when set; else /dev/shm when it is a tmpfs
/// with room for twice the copy (a copy is thousands of small files, and on a journaled disk each
/// create costs: 5,100 objects took 2.3 s on this machine's ext4 and 0.17 s on tmpfs); else the
/// temp dir.
fn staging_root(bytes: u64) -> PathBuf {
    if let Some(dir) = std::env::var_os("CORDON_STAGING_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    let roomy_tmpfs = std::ffi::CString::new("/dev/shm")
        .ok()
        .and_then(|c| {
            let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
            // SAFETY: a valid C string and a buffer of the right type; statfs only writes it.
            let ok = unsafe { libc::statfs(c.as_ptr(), fs.as_mut_ptr()) } == 0;
            // SAFETY: statfs succeeded, so it filled the buffer.
            ok.then(|| unsafe { fs.assume_init() })
        })
        .is_some_and(|fs| {
            const TMPFS_MAGIC: i64 = 0x0102_1994;
            let free = fs.f_bavail.saturating_mul(fs.f_bsize as u64);
            fs.f_type == TMPFS_MAGIC && free / 2 > bytes + 64 * 1024 * 1024
        });
    let writable = fs::metadata(shm).is_ok_and(|m| m.is_dir());
    if roomy_tmpfs && writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A staged repository, ready to seed.
#[derive(Debug)]
pub struct Staged {
    pub dir: StagingDir,
    pub git: Git,
    /// The head commit's full id.
    pub head: String,
    /// The copy's object format.
    pub format: verify::Format,
    pub entries: Vec<Entry>,
    /// Link path -> target bytes.
    pub links: BTreeMap<Vec<u8>, Vec<u8>>,
    /// What the checkout needs in the work volume.
    pub work_needs: Needs,
    /// What the metadata (the copied object store and refs) needs.
    pub metadata_needs: Needs,
}

/// The error for `rel` (relative to the git directory) that could not be read as wanted.
fn refusal(rel: &Path, refused: Refused) -> Error {
    let path = rel.display().to_string();
    match refused {
        Refused::NotPlain => Error::Unusable(Unusable::MetadataLink { path }),
        Refused::Missing => Error::Invalid(format!(
            "the source repository changed while it was copied ({path} went away; a git gc?): try again"
        )),
        Refused::Io(e) => Error::io(format!("reading {path} in the source repository"), e),
    }
}

/// The source's git directory, opened: `path/.git`, or `path` itself when it is a bare
/// repository (objects and HEAD at its root). The caller's path is opened as given; from the
/// repository's root down nothing is followed.
fn open_git_dir(source_path: &Path) -> Result<OwnedFd> {
    let not_a_repository = |reason: &str| {
        Error::Unusable(Unusable::NotARepository {
            path: source_path.display().to_string(),
            reason: reason.into(),
        })
    };
    let root = source::open_root(source_path).map_err(|r| match r {
        Refused::Io(e) => Error::io(format!("opening {}", source_path.display()), e),
        Refused::Missing => not_a_repository("no such directory"),
        Refused::NotPlain => not_a_repository("not a directory"),
    })?;
    let dot_git = Path::new(".git");
    match source::kind(root.as_fd(), dot_git) {
        Ok(SourceKind::Dir) => {
            source::open_dir(root.as_fd(), dot_git).map_err(|r| refusal(dot_git, r))
        }
        Ok(SourceKind::File { .. }) => Err(not_a_repository(
            ".git is a file (a linked worktree or a submodule): give the repository it points to",
        )),
        Ok(SourceKind::Link | SourceKind::Special) => Err(refusal(dot_git, Refused::NotPlain)),
        Err(Refused::Missing) => {
            // Bare: what is at objects and HEAD (a link, a FIFO) is refused as the rest is.
            let present = |name: &str| {
                !matches!(
                    source::kind(root.as_fd(), Path::new(name)),
                    Err(Refused::Missing)
                )
            };
            if present("objects") && present("HEAD") {
                Ok(root)
            } else {
                Err(not_a_repository(
                    "no .git directory and not a bare repository",
                ))
            }
        }
        Err(r) => Err(refusal(dot_git, r)),
    }
}

/// What the copy takes from the source, listed before anything is made.
#[derive(Debug)]
struct Listing {
    /// The source's git directory.
    git_dir: OwnedFd,
    /// Its owner: a file with more than one link must be theirs.
    owner: u32,
    /// Directories to make in the copy (relative to the git directory), parents first.
    dirs: Vec<PathBuf>,
    /// Regular files in the order they are copied: the object store and the refs (each sorted),
    /// then packed-refs and HEAD.
    files: Vec<PathBuf>,
    /// Their bytes and the entries (files and directories) when listed.
    bytes: u64,
    entries: u64,
}

fn too_large(bytes: u64, entries: u64) -> Error {
    Error::Unusable(Unusable::TooLarge {
        what: "object store".into(),
        needs_bytes: bytes,
        needs_inodes: entries,
        limit_bytes: MAX_OBJECT_STORE_BYTES,
        limit_inodes: MAX_OBJECT_STORE_FILES,
    })
}

impl Listing {
    /// Count one more entry of `bytes`; refuse a store past the limits.
    fn count(&mut self, bytes: u64) -> Result<()> {
        self.bytes += bytes;
        self.entries += 1;
        if self.bytes > MAX_OBJECT_STORE_BYTES || self.entries > MAX_OBJECT_STORE_FILES {
            return Err(too_large(self.bytes, self.entries));
        }
        Ok(())
    }

    /// Add every directory and regular file below `top`; a link or a special file is refused.
    fn walk(&mut self, top: &Path, stop: &Stop) -> Result<()> {
        let first = self.files.len();
        self.dirs.push(top.to_path_buf());
        let mut pending = vec![top.to_path_buf()];
        while let Some(rel) = pending.pop() {
            stop.check()?;
            let dir = source::open_dir(self.git_dir.as_fd(), &rel).map_err(|r| refusal(&rel, r))?;
            let most = MAX_OBJECT_STORE_FILES.saturating_sub(self.entries);
            for (name, kind) in source::list(dir, most).map_err(|r| refusal(&rel, r))? {
                let path = rel.join(name);
                match kind {
                    SourceKind::Dir => {
                        self.count(0)?;
                        self.dirs.push(path.clone());
                        pending.push(path);
                    }
                    SourceKind::File { size } => {
                        self.count(size)?;
                        self.files.push(path);
                    }
                    SourceKind::Link | SourceKind::Special => {
                        return Err(refusal(&path, Refused::NotPlain))
                    }
                }
            }
        }
        self.files[first..].sort();
        Ok(())
    }

    /// Add the single file `name` when it is there.
    fn single(&mut self, name: &str) -> Result<()> {
        let rel = Path::new(name);
        match source::kind(self.git_dir.as_fd(), rel) {
            Ok(SourceKind::File { size }) => {
                self.count(size)?;
                self.files.push(rel.to_path_buf());
                Ok(())
            }
            Err(Refused::Missing) => Ok(()),
            Ok(_) => Err(refusal(rel, Refused::NotPlain)),
            Err(r) => Err(refusal(rel, r)),
        }
    }
}

/// Open the source and list what the copy takes (refusing links, special files, alternates and
/// oversize stores).
fn list_source(source_path: &Path, stop: &Stop) -> Result<Listing> {
    let git_dir = open_git_dir(source_path)?;
    let owner = source::owner(git_dir.as_fd()).map_err(|r| refusal(Path::new("."), r))?;
    let mut listing = Listing {
        git_dir,
        owner,
        dirs: Vec::new(),
        files: Vec::new(),
        bytes: 0,
        entries: 0,
    };
    let objects = Path::new("objects");
    match source::kind(listing.git_dir.as_fd(), objects) {
        Ok(SourceKind::Dir) => {}
        Err(Refused::Missing) => {
            return Err(Error::Unusable(Unusable::NotARepository {
                path: source_path.display().to_string(),
                reason: "the git directory has no objects directory".into(),
            }))
        }
        Ok(_) => return Err(refusal(objects, Refused::NotPlain)),
        Err(r) => return Err(refusal(objects, r)),
    }
    let info = Path::new("objects/info");
    match source::kind(listing.git_dir.as_fd(), info) {
        Ok(SourceKind::Dir) | Err(Refused::Missing) => {}
        Ok(_) => return Err(refusal(info, Refused::NotPlain)),
        Err(r) => return Err(refusal(info, r)),
    }
    // An alternates file of any kind: the store borrows another.
    let alternates = Path::new("objects/info/alternates");
    match source::kind(listing.git_dir.as_fd(), alternates) {
        Err(Refused::Missing) => {}
        Ok(_) => return Err(Error::Unusable(Unusable::Alternates)),
        Err(r) => return Err(refusal(alternates, r)),
    }
    listing.walk(objects, stop)?;
    let refs = Path::new("refs");
    match source::kind(listing.git_dir.as_fd(), refs) {
        Ok(SourceKind::Dir) => listing.walk(refs, stop)?,
        // Not a directory git would read refs from: nothing is copied from it.
        Ok(SourceKind::File { .. }) | Err(Refused::Missing) => {}
        Ok(_) => return Err(refusal(refs, Refused::NotPlain)),
        Err(r) => return Err(refusal(refs, r)),
    }
    listing.single("packed-refs")?;
    listing.single("HEAD")?;
    listing.dirs.sort();
    Ok(listing)
}

/// What the copy read.
#[derive(Debug, Clone, Copy)]
struct Copied {
    /// Each file's bytes rounded up to 4 KiB blocks.
    block_bytes: u64,
    /// Files and directories.
    entries: u64,
}

/// The most copied between two looks at the deadline.
const CHUNK: u64 = 8 * 1024 * 1024;

/// Copy `from` into `to`, looking at `stop` between chunks: the bytes copied, at most `limit` + 1
/// (more than `limit` is for the caller to refuse).
fn copy_bounded(from: &File, to: &mut File, limit: u64, stop: &Stop, rel: &Path) -> Result<u64> {
    let mut total = 0u64;
    while total <= limit {
        let want = (limit - total + 1).min(CHUNK);
        let n = std::io::copy(&mut from.take(want), to)
            .map_err(|e| Error::io(format!("copying {}", rel.display()), e))?;
        total += n;
        if n < want {
            // The end of the file (io::copy reads until the end or `want`).
            break;
        }
        stop.check()?;
    }
    Ok(total)
}

/// The bytes read between two looks at a verified file's checks and the deadline.
const VERIFY_CHUNK: usize = 64 * 1024;

/// [`copy_bounded`], every byte read given to `verifier` before it is written: the bytes copied
/// (at most `limit` + 1), or the first mismatch.
fn copy_verified(
    from: &File,
    to: &mut File,
    limit: u64,
    stop: &Stop,
    rel: &Path,
    verifier: &mut Verifier,
) -> Result<std::result::Result<u64, Mismatch>> {
    let mut reader = from.take(limit.saturating_add(1));
    let mut buffer = vec![0u8; VERIFY_CHUNK];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buffer) {
            Ok(0) => return Ok(Ok(total)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(format!("copying {}", rel.display()), e)),
        };
        if let Err(mismatch) = verifier.update(&buffer[..n]) {
            return Ok(Err(mismatch));
        }
        to.write_all(&buffer[..n])
            .map_err(|e| Error::io(format!("copying {}", rel.display()), e))?;
        total += n as u64;
        stop.check()?;
    }
}

/// Copy what was listed into the staging repository `to` (its own directory, made by git init,
/// of object format `format`): each file opened again beneath the source's git directory and
/// checked again, read from the descriptor it was checked on (one with more than one link
/// verified as it is read), the whole copy bounded by the object store's limit.
fn copy_source(
    listing: &Listing,
    to: &Path,
    format: verify::Format,
    stop: &Stop,
) -> Result<Copied> {
    let dest = nix::fcntl::open(
        to,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(format!("opening {}", to.display()), e.into()))?;
    let io =
        |rel: &Path, e: Errno| Error::io(format!("creating {}", to.join(rel).display()), e.into());
    for dir in &listing.dirs {
        match nix::sys::stat::mkdirat(&dest, dir.as_path(), Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(io(dir, e)),
        }
    }
    let mut copied = Copied {
        block_bytes: 0,
        entries: listing.dirs.len() as u64,
    };
    let mut left = MAX_OBJECT_STORE_BYTES;
    for rel in &listing.files {
        stop.check()?;
        let opened =
            source::open_file(listing.git_dir.as_fd(), rel).map_err(|r| refusal(rel, r))?;
        let from = opened.file;
        let links = opened.links;
        let hard_link = |mismatch: Mismatch| {
            Error::Unusable(Unusable::MetadataHardLink {
                path: rel.display().to_string(),
                links,
                reason: mismatch.to_string(),
            })
        };
        // Decided on the descriptor the bytes come from: a file linked after the listing is seen.
        let mut verifier = None;
        if links > 1 {
            match verify::linked(rel, format, MAX_OBJECT_STORE_BYTES) {
                Linked::LeaveOut => continue,
                Linked::Refuse(mismatch) => return Err(hard_link(mismatch)),
                Linked::Verify(_) if opened.uid != listing.owner => {
                    return Err(hard_link(Mismatch::NotTheOwners {
                        file: opened.uid,
                        dir: listing.owner,
                    }))
                }
                Linked::Verify(v) => verifier = Some(v),
            }
        }
        let create = || {
            nix::fcntl::openat(
                &dest,
                rel.as_path(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )
        };
        // git init made a HEAD of its own.
        let made = match create() {
            Err(Errno::EEXIST) => nix::unistd::unlinkat(
                &dest,
                rel.as_path(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .and_then(|()| create()),
            other => other,
        }
        .map_err(|e| io(rel, e))?;
        let mut made = File::from(made);
        let n = match verifier {
            None => copy_bounded(&from, &mut made, left, stop, rel)?,
            Some(mut verifier) => {
                let n = copy_verified(&from, &mut made, left, stop, rel, &mut verifier)?
                    .map_err(hard_link)?;
                // Past the limit the store is refused below, as too large.
                if n <= left {
                    verifier.finish().map_err(hard_link)?;
                }
                n
            }
        };
        if n > left {
            // The store grew past the limit since it was listed.
            return Err(too_large(
                MAX_OBJECT_STORE_BYTES - left + n,
                copied.entries + 1,
            ));
        }
        left -= n;
        copied.block_bytes += n.div_ceil(4096) * 4096;
        copied.entries += 1;
    }
    Ok(copied)
}

/// A revision git will take literally (no option, no shell meaning).
fn check_revision(rev: &str) -> Result<()> {
    let ok = !rev.is_empty()
        && rev.len() <= 256
        && !rev.starts_with('-')
        && rev
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-~^@{}".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "revision {rev:?} is not a plain revision"
        )))
    }
}

/// Read link targets with one `git cat-file --batch`.
fn link_targets(git: &Git, links: &[&Entry]) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut targets = BTreeMap::new();
    if links.is_empty() {
        return Ok(targets);
    }
    let mut child = git
        .command()
        .into_std()
        .args(["cat-file", "--batch"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| Error::io("running git cat-file", e))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| Error::Internal("cat-file stdin".into()))?;
    let oids: Vec<String> = links.iter().map(|e| e.oid.clone()).collect();
    let writer = std::thread::spawn(move || {
        for oid in oids {
            if writeln!(stdin, "{oid}").is_err() {
                break;
            }
        }
    });
    let mut out = BufReader::new(
        child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("cat-file stdout".into()))?,
    );
    for entry in links {
        let mut header = String::new();
        out.read_line(&mut header)
            .map_err(|e| Error::io("cat-file", e))?;
        let size: usize = header
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::Git {
                context: "cat-file".into(),
                message: format!("unexpected {header:?}"),
            })?;
        if size > MAX_LINK_TARGET {
            return Err(Error::Unusable(Unusable::BadName {
                path: String::from_utf8_lossy(&entry.path).into_owned(),
            }));
        }
        let mut target = vec![0u8; size + 1];
        out.read_exact(&mut target)
            .map_err(|e| Error::io("cat-file", e))?;
        target.pop();
        targets.insert(entry.path.clone(), target);
    }
    let _ = writer.join();
    let _ = child.wait();
    Ok(targets)
}

/// In the copy: the head as a full commit id (connected: every object it needs is there), its
/// tree's entries and its links' targets.
async fn resolve_tree(
    git: &Git,
    head: &str,
) -> Result<(String, Vec<Entry>, BTreeMap<Vec<u8>, Vec<u8>>)> {
    let spec = format!("{head}^{{commit}}");
    let resolved = git
        .run(
            "rev-parse",
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &spec,
            ],
        )
        .await?;
    let head = String::from_utf8_lossy(&resolved).trim().to_owned();
    if head.len() != 40 || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Git {
            context: "rev-parse".into(),
            message: format!("unexpected id {head:?}"),
        });
    }
    git.run("rev-list", &["rev-list", "--objects", "--quiet", &head])
        .await?;
    tracing::debug!("checked connectivity");
    let listing = git
        .run(
            "ls-tree",
            &["ls-tree", "-r", "-t", "-l", "-z", "--full-tree", &head],
        )
        .await?;
    let entries = tree::parse_ls_tree(&listing).map_err(|message| Error::Git {
        context: "ls-tree".into(),
        message,
    })?;
    let link_entries: Vec<&Entry> = entries.iter().filter(|e| e.kind == Kind::Link).collect();
    let git_for_links = git.clone();
    let owned_links: Vec<Entry> = link_entries.into_iter().cloned().collect();
    let links = tokio::task::spawn_blocking(move || {
        link_targets(&git_for_links, &owned_links.iter().collect::<Vec<_>>())
    })
    .await
    .map_err(|e| Error::Internal(format!("link task: {e}")))??;
    tracing::debug!(
        entries = entries.len(),
        links = links.len(),
        "listed the tree"
    );
    Ok((head, entries, links))
}

/// Stage `source` at `head` into a private directory, or refuse it.
pub async fn stage(
    source: &Path,
    head: &str,
    owner: &str,
    allocation: &uuid::Uuid,
    deadline: Instant,
) -> Result<Staged> {
    check_revision(head)?;
    // The owner names a directory: nothing but the owner token's own characters.
    if owner.is_empty()
        || owner.len() > 64
        || !owner
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(Error::Invalid(format!(
            "owner token {owner:?} is not 1-64 characters of [a-z0-9-]"
        )));
    }
    // Open the source and list the object store and the refs (refusing links, special files and
    // oversize stores) before anything is made.
    let listing_stop = Stop {
        deadline,
        given_up: Arc::new(AtomicBool::new(false)),
    };
    let source_path = source.to_path_buf();
    let listing = off_thread("listing the repository", &listing_stop, move |stop| {
        list_source(&source_path, &stop)
    })
    .await?;
    tracing::debug!(
        files = listing.files.len(),
        bytes = listing.bytes,
        "listed the object store"
    );
    let dir = staging_root(listing.bytes).join(format!("{}{allocation}", staging_prefix(owner)));
    fs::create_dir(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let dir = StagingDir {
        path: dir,
        stop: Arc::new(AtomicBool::new(false)),
    };
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io("chmod staging", e))?;
    let home = dir.path().join("home");
    let repo = dir.path().join("repo.git");
    fs::create_dir(&home).map_err(|e| Error::io("creating the scratch HOME", e))?;
    let git = Git {
        git_dir: repo.clone(),
        home,
        deadline,
    };
    git.run("init", &["init", "--quiet", "--bare", "--template="])
        .await?;
    let format = git
        .run("rev-parse", &["rev-parse", "--show-object-format"])
        .await?;
    let format = String::from_utf8_lossy(&format).trim().to_owned();
    let format = verify::Format::from_git(&format).ok_or_else(|| Error::Git {
        context: "rev-parse".into(),
        message: format!("unknown object format {format:?}"),
    })?;

    // Copy them as data (the object store first, HEAD last).
    let copy_stop = Stop {
        deadline,
        given_up: dir.stop.clone(),
    };
    let copy_to = repo.clone();
    let copied = off_thread("copying the repository", &copy_stop, move |stop| {
        copy_source(&listing, &copy_to, format, &stop)
    })
    .await?;

    tracing::debug!("copied the object store and refs");
    // From here git runs only in the copy.
    let (head, entries, links) = resolve_tree(&git, head).await?;
    let work_needs = tree::check_names_and_size(&entries, &links).map_err(Error::Unusable)?;
    for (path, target) in &links {
        tree::check_link(path, target, &links).map_err(Error::Unusable)?;
    }
    // The copied files and directories, a few more git makes, and the index the seeder adds
    // (about 100 bytes an entry).
    let metadata_needs = Needs {
        bytes: copied.block_bytes + (entries.len() as u64 * 100).div_ceil(4096) * 4096,
        inodes: copied.entries + 512,
    };
    Ok(Staged {
        dir,
        git,
        head,
        format,
        entries,
        links,
        work_needs,
        metadata_needs,
    })
}

#[cfg(test)]
#[path = "clone_tests.rs"]
mod tests;
