//! The commit of an approved manifest, without git ever reading agent-written content through a
//! path: the content streams from the engine's archive of /work, each new file's or link's bytes
//! hashed as git would (`blob <len>\0` and the bytes) and compared with the blob id the
//! inspection computed, into a `git fast-import` stream in bounded scratch space; only a stream
//! whose every blob matched is imported, on the controller-owned copy of the metadata. The
//! identities, message and trailers are the caller's, validated here, so the same inputs give the
//! same commit id.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cordon_contract::audit::{needs_content, Change, CommitFinding, CommitReason, Kind};
use sha1::{Digest, Sha1};

use crate::error::{Error, Result};
use crate::git::{Git, Input};

use super::scratch::{create_private, object_id};
use super::{source, special};

/// The ref the commit is made on.
pub const REF: &str = "refs/heads/cordon";
/// The prefix of every entry of the engine's archive of /work.
const WORK: &str = "work/";
/// The metadata inside that archive (never read from it).
const METADATA: &str = "work/.git";

/// What to commit: base plus `changes`, with validated identities ([`identity`]) and message
/// ([`message`]), on `reference`.
#[derive(Debug, Clone)]
pub struct Spec {
    pub base: String,
    pub changes: Vec<Change>,
    pub author: String,
    pub committer: String,
    pub message: String,
    /// The ref to write ([`REF`] for a commit).
    pub reference: String,
}

/// Where a path's new content is in the stream: a blob written with this mark, or an object base
/// already holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DataRef {
    Mark(u64),
    Object(String),
}

/// The blobs [`stream_changes`] wrote, by path.
#[derive(Debug, Default)]
pub struct Contents {
    data: BTreeMap<String, DataRef>,
    /// Content bytes written into the stream.
    pub bytes: u64,
    /// Blobs written (a content shared by several paths is written once).
    pub blobs: u64,
    /// What was read of each blob a `.gitmodules` or `.gitattributes` holds, by blob id (for
    /// [`special::findings`]).
    pub special: BTreeMap<String, special::Seen>,
}

/// What an entry of the archive was, for a later hard link to it.
#[derive(Debug, Clone)]
struct Seen {
    blob: String,
    link: bool,
    data: DataRef,
}

fn mismatch(path: &str, detail: impl Into<String>) -> CommitFinding {
    CommitFinding {
        path: path.to_owned(),
        reason: CommitReason::ContentMismatch,
        detail: detail.into(),
    }
}

fn write_err(e: std::io::Error) -> Error {
    Error::io("writing the fast-import stream", e)
}

/// Refuse what a tree cannot hold (the paths module refuses these earlier; this is the last
/// line).
fn refusals(changes: &[Change]) -> Vec<CommitFinding> {
    let mut findings = Vec::new();
    let mut paths = HashSet::new();
    for change in changes {
        let finding = |reason, detail: &str| CommitFinding {
            path: change.path.clone(),
            reason,
            detail: detail.to_owned(),
        };
        if !paths.insert(change.path.as_str()) {
            findings.push(finding(CommitReason::ContentMismatch, "changed twice"));
        }
        if change
            .path
            .bytes()
            .any(|b| b == b'\n' || b == b'\r' || b == 0)
        {
            findings.push(finding(CommitReason::BadCharacter, ""));
        }
        for side in [&change.old, &change.new].into_iter().flatten() {
            match side.kind {
                Kind::Gitlink => findings.push(finding(CommitReason::Gitlink, "")),
                Kind::Dir => findings.push(finding(CommitReason::Directory, "")),
                Kind::Fifo | Kind::Socket | Kind::Device => {
                    findings.push(finding(CommitReason::SpecialFile, ""))
                }
                Kind::File | Kind::Executable | Kind::Link => {}
            }
        }
        if change.old.is_none() && change.new.is_none() {
            findings.push(finding(CommitReason::ContentMismatch, "neither side"));
        }
        if needs_content(change) {
            let blob = change.new.as_ref().and_then(|s| s.blob.as_deref());
            if blob.is_none_or(|b| object_id(b).is_err() || b.len() != 40) {
                findings.push(finding(CommitReason::ContentMismatch, "no blob id"));
            }
        }
    }
    findings
}

/// Walk the engine's archive of /work (`work/...`; `work/.git/` skipped) and write into `out`,
/// as `git fast-import` blobs, the content of every change of `changes` with a new file,
/// executable or link, each hashed as it streams and compared with the manifest's blob id.
///
/// The entry's type must be the change's kind (a regular file, its owner-executable bit as the
/// kind says, or a symlink, whose data is its target); a hard link resolves to the earlier entry
/// it names (if that was a change written here) or to `base_blob` of that name (a file base
/// holds unchanged). Every such change must be found exactly once. Any mismatch refuses the
/// commit with every finding ([`Error::CommitRefused`], [`CommitReason::ContentMismatch`]); more
/// than `max_bytes` of content is [`Error::CommitScratchFull`].
pub fn stream_changes(
    content_tar: impl Read,
    changes: &[Change],
    base_blob: impl Fn(&str) -> Option<String>,
    out: impl Write,
    max_bytes: u64,
) -> Result<Contents> {
    let findings = refusals(changes);
    if !findings.is_empty() {
        return Err(Error::CommitRefused { findings });
    }
    let mut stream = Stream::new(changes, base_blob, out, max_bytes);
    let mut archive = tar::Archive::new(content_tar);
    for entry in archive.entries().map_err(read_err)? {
        stream.entry(entry.map_err(read_err)?)?;
    }
    stream.finish()
}

fn read_err(e: std::io::Error) -> Error {
    Error::io("reading the archive of /work", e)
}

/// The manifest path an archive entry's name stands for (`work/<path>`, a trailing `/` dropped),
/// or `None`: the metadata, a name outside `work/`, or one that is not UTF-8 (no manifest path
/// is, so the commit needs none of them).
fn work_path(raw: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(raw).ok()?;
    let name = name.strip_suffix('/').unwrap_or(name);
    if name == METADATA || name.starts_with(&format!("{METADATA}/")) {
        return None;
    }
    name.strip_prefix(WORK).map(str::to_owned)
}

/// [`stream_changes`] under way: what it wants from the archive, what it has found and written,
/// and every finding so far (all are reported at the end, not only the first).
struct Stream<'a, B, W> {
    /// The changes that need content, by path.
    wanted: HashMap<&'a str, &'a Change>,
    /// The blobs a `.gitmodules` or `.gitattributes` will hold: read as they stream, whichever
    /// path brings them.
    special_blobs: HashMap<String, special::Special>,
    base_blob: B,
    out: W,
    max_bytes: u64,
    contents: Contents,
    findings: Vec<CommitFinding>,
    found: HashSet<String>,
    /// Archive names of written entries (for hard links).
    seen: HashMap<String, Seen>,
    /// Blobs already written, by blob id.
    marks: HashMap<String, u64>,
    buf: Vec<u8>,
}

impl<'a, B, W> Stream<'a, B, W>
where
    B: Fn(&str) -> Option<String>,
    W: Write,
{
    fn new(changes: &'a [Change], base_blob: B, out: W, max_bytes: u64) -> Self {
        let wanted = changes
            .iter()
            .filter(|c| needs_content(c))
            .map(|c| (c.path.as_str(), c))
            .collect();
        let mut special_blobs: HashMap<String, special::Special> = HashMap::new();
        for (_, kind, blob) in special::paths_of(changes) {
            let known = special_blobs.entry(blob).or_insert(kind);
            // A blob both hold is kept as a `.gitmodules` (and measured as attributes too).
            *known = (*known).min(kind);
        }
        Self {
            wanted,
            special_blobs,
            base_blob,
            out,
            max_bytes,
            contents: Contents::default(),
            findings: Vec::new(),
            found: HashSet::new(),
            seen: HashMap::new(),
            marks: HashMap::new(),
            buf: vec![0u8; 64 * 1024],
        }
    }

    /// One entry of the archive: passed over unless a wanted change's, then found once, its type
    /// and mode the change's kind, and its content checked by type.
    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<()> {
        let Some(path) = work_path(&entry.path_bytes()) else {
            return Ok(());
        };
        let Some(&change) = self.wanted.get(path.as_str()) else {
            return Ok(());
        };
        if !self.found.insert(path.clone()) {
            self.findings.push(mismatch(&path, "in the archive twice"));
            return Ok(());
        }
        // `needs_content` and `refusals` made sure of both.
        let Some(new) = change.new.as_ref() else {
            return Ok(());
        };
        let Some(expected) = new.blob.as_deref() else {
            return Ok(());
        };
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0);
        let want_link = new.kind == Kind::Link;
        if !want_link && matches!(kind, tar::EntryType::Regular | tar::EntryType::Link) {
            let exec = mode & 0o100 != 0;
            if exec != (new.kind == Kind::Executable) {
                self.findings.push(mismatch(
                    &path,
                    format!("mode {:o} is not {:?}", mode & 0o7777, new.kind),
                ));
                return Ok(());
            }
        }
        match kind {
            tar::EntryType::Link => {
                self.hard_link(&entry, path, expected, want_link);
                Ok(())
            }
            tar::EntryType::Symlink if want_link => self.symlink(&entry, path, expected),
            tar::EntryType::Regular if !want_link => {
                self.regular(&mut entry, path, new.size, expected)
            }
            other => {
                self.findings.push(mismatch(
                    &path,
                    format!("a {other:?} entry where the manifest has {:?}", new.kind),
                ));
                Ok(())
            }
        }
    }

    /// A hard link takes the content of what it names: an earlier entry written here (a link
    /// only if the change wants one), else that path's blob in base; anything else is not known.
    fn hard_link<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        path: String,
        expected: &str,
        want_link: bool,
    ) {
        let target = entry
            .link_name_bytes()
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default();
        let target = target.strip_prefix(WORK).unwrap_or("").to_owned();
        let resolved = match self.seen.get(&target) {
            Some(s) if s.link != want_link => None,
            Some(s) => Some((s.blob.clone(), s.data.clone())),
            None if target.is_empty() => None,
            None => (self.base_blob)(&target).map(|id| (id.clone(), DataRef::Object(id))),
        };
        match resolved {
            Some((blob, data)) if blob == expected => {
                self.contents.data.insert(path, data);
            }
            Some((blob, _)) => self.findings.push(mismatch(
                &path,
                format!("hard link to {target:?}: blob {blob}, not {expected}"),
            )),
            None => self.findings.push(mismatch(
                &path,
                format!("hard link to {target:?}, whose content is not known"),
            )),
        }
    }

    /// A symlink: its data is its target, written once per blob.
    fn symlink<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        path: String,
        expected: &str,
    ) -> Result<()> {
        let target = entry
            .link_name_bytes()
            .map(|t| t.into_owned())
            .unwrap_or_default();
        let blob = blob_id(&target);
        if blob != expected {
            self.findings
                .push(mismatch(&path, format!("target's blob {blob}")));
            return Ok(());
        }
        let data = match self.marks.get(&blob) {
            Some(&mark) => DataRef::Mark(mark),
            None => {
                let mark = self.open_blob(target.len() as u64)?;
                self.out.write_all(&target).map_err(write_err)?;
                self.out.write_all(b"\n").map_err(write_err)?;
                self.contents.blobs = mark;
                self.marks.insert(blob.clone(), mark);
                DataRef::Mark(mark)
            }
        };
        self.seen.insert(
            path.clone(),
            Seen {
                blob,
                link: true,
                data: data.clone(),
            },
        );
        self.contents.data.insert(path, data);
        Ok(())
    }

    /// A regular file: the size the manifest has (if it has one), its bytes hashed as they
    /// stream and written once per blob, and measured if a special file holds that blob.
    fn regular<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: String,
        manifest_size: Option<u64>,
        expected: &str,
    ) -> Result<()> {
        let size = entry.size();
        if manifest_size.is_some_and(|s| s != size) {
            self.findings.push(mismatch(
                &path,
                format!("{size} bytes, not {}", manifest_size.unwrap_or(0)),
            ));
            return Ok(());
        }
        let known = self.marks.get(expected).copied();
        let mark = match known {
            Some(mark) => mark,
            None => self.open_blob(size)?,
        };
        let mut measured = self
            .special_blobs
            .get(expected)
            .filter(|_| !self.contents.special.contains_key(expected))
            .map(|&kind| special::Seen::new(kind));
        let blob = self.copy(entry, &path, size, known.is_none(), measured.as_mut())?;
        if known.is_none() {
            self.out.write_all(b"\n").map_err(write_err)?;
            self.contents.blobs = mark;
        }
        if blob != expected {
            self.findings
                .push(mismatch(&path, format!("content's blob {blob}")));
            return Ok(());
        }
        if let Some(measured) = measured {
            self.contents.special.insert(blob.clone(), measured);
        }
        self.marks.insert(blob.clone(), mark);
        self.seen.insert(
            path.clone(),
            Seen {
                blob,
                link: false,
                data: DataRef::Mark(mark),
            },
        );
        self.contents.data.insert(path, DataRef::Mark(mark));
        Ok(())
    }

    /// Count `size` content bytes against the bound and start the next blob of the stream; its
    /// mark.
    fn open_blob(&mut self, size: u64) -> Result<u64> {
        reserve(&mut self.contents, size, self.max_bytes)?;
        let mark = self.contents.blobs + 1;
        write!(self.out, "blob\nmark :{mark}\ndata {size}\n").map_err(write_err)?;
        Ok(mark)
    }

    /// Read all `size` bytes of a regular file's entry: each hashed as git hashes a blob, fed to
    /// `measured`, and written to the stream if `write`. Its blob id; an entry that ends early
    /// is an internal error (the archive is the engine's, not the agent's).
    fn copy(
        &mut self,
        entry: &mut impl Read,
        path: &str,
        size: u64,
        write: bool,
        mut measured: Option<&mut special::Seen>,
    ) -> Result<String> {
        let mut hasher = Sha1::new();
        hasher.update(format!("blob {size}\0").as_bytes());
        let mut read = 0u64;
        loop {
            let n = entry.read(&mut self.buf).map_err(read_err)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            hasher.update(&self.buf[..n]);
            if let Some(measured) = measured.as_mut() {
                measured.feed(&self.buf[..n]);
            }
            if write {
                self.out.write_all(&self.buf[..n]).map_err(write_err)?;
            }
        }
        if read != size {
            return Err(Error::Internal(format!(
                "the archive of /work: {path:?} ends after {read} of {size} bytes"
            )));
        }
        Ok(hex::encode(hasher.finalize()))
    }

    /// The end of the archive: every wanted change must have been found; any finding refuses
    /// the commit with all of them, sorted.
    fn finish(mut self) -> Result<Contents> {
        for path in self.wanted.keys() {
            if !self.found.contains(*path) {
                self.findings.push(mismatch(path, "not in the archive"));
            }
        }
        if !self.findings.is_empty() {
            self.findings.sort();
            return Err(Error::CommitRefused {
                findings: self.findings,
            });
        }
        self.out.flush().map_err(write_err)?;
        Ok(self.contents)
    }
}

/// Count `size` more content bytes against the bound.
fn reserve(contents: &mut Contents, size: u64, max_bytes: u64) -> Result<()> {
    if size > max_bytes.saturating_sub(contents.bytes) {
        return Err(Error::CommitScratchFull(format!(
            "the new content takes more than {max_bytes} bytes"
        )));
    }
    contents.bytes += size;
    Ok(())
}

/// git's blob id of `bytes`.
pub fn blob_id(bytes: &[u8]) -> String {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", bytes.len()).as_bytes());
    hasher.update(bytes);
    hex::encode(hasher.finalize())
}

/// A path as fast-import reads it: always C-quoted (`"`, `\` and every control byte escaped,
/// octal), so no path is ever read as something else.
fn quoted(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 2);
    out.push('"');
    for c in path.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\{:03o}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The commit command of the stream, after the blobs of `contents`: every deletion, then every
/// addition or change, each in path order (a file replacing a directory, or the reverse, then
/// lands right), and `done`.
pub fn write_commit(mut out: impl Write, spec: &Spec, contents: &Contents) -> Result<()> {
    let base = object_id(&spec.base)?;
    reference(&spec.reference)?;
    let mut text = format!(
        "commit {}\nauthor {}\ncommitter {}\ndata {}\n{}\nfrom {base}\n",
        spec.reference,
        spec.author,
        spec.committer,
        spec.message.len(),
        spec.message
    );
    let mut deletions: Vec<&str> = Vec::new();
    let mut modifications: Vec<(&str, &str, &DataRef)> = Vec::new();
    for change in &spec.changes {
        match &change.new {
            None => deletions.push(&change.path),
            Some(side) => {
                let mode = side.kind.git_mode().ok_or_else(|| {
                    Error::Internal(format!(
                        "{:?}: a {:?} in the commit",
                        change.path, side.kind
                    ))
                })?;
                let data = contents.data.get(&change.path).ok_or_else(|| {
                    Error::Internal(format!("{:?}: no content streamed", change.path))
                })?;
                modifications.push((&change.path, mode, data));
            }
        }
    }
    deletions.sort_unstable();
    modifications.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for path in deletions {
        text.push_str(&format!("D {}\n", quoted(path)));
    }
    for (path, mode, data) in modifications {
        let data = match data {
            DataRef::Mark(mark) => format!(":{mark}"),
            DataRef::Object(id) => id.clone(),
        };
        text.push_str(&format!("M {mode} {data} {}\n", quoted(path)));
    }
    text.push_str("\ndone\n");
    out.write_all(text.as_bytes()).map_err(write_err)?;
    out.flush().map_err(write_err)
}

/// A ref cordon writes: `refs/` and plain parts only.
fn reference(name: &str) -> Result<&str> {
    let plain = name.strip_prefix("refs/").is_some_and(|rest| {
        rest.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && !part.ends_with(".lock")
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && !part.contains("..")
        })
    });
    if plain {
        Ok(name)
    } else {
        Err(Error::Invalid(format!(
            "{name:?} is not a ref cordon writes"
        )))
    }
}

/// The whole stream: [`stream_changes`] then [`write_commit`].
pub fn write_stream(
    content_tar: impl Read,
    spec: &Spec,
    base_blob: impl Fn(&str) -> Option<String>,
    mut out: impl Write,
    max_bytes: u64,
) -> Result<Contents> {
    let contents = stream_changes(content_tar, &spec.changes, base_blob, &mut out, max_bytes)?;
    write_commit(&mut out, spec, &contents)?;
    Ok(contents)
}

/// fast-import deflates what it imports as fast as zlib can, as `git add` and `git commit` write
/// their loose objects (`core.looseCompression` is 1 by default): base's trees a change touches
/// are rewritten whole, and trees of hashes hardly compress at any level (a 10,000-file import
/// took 0.93 s at the pack default, 6, and 0.83 s at 1).
const IMPORT_COMPRESSION: &str = "pack.compression=1";

/// What fast-import made of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The commit the reference names.
    pub head: String,
    /// The one pack fast-import wrote, when it stored every tree and commit it made. fast-import
    /// does not store again an object a pack of the copy already holds (its statistics count
    /// it as a duplicate); with none, this pack holds every tree and commit a bundle of `head`
    /// beyond base carries, and [`fsck_and_bundle`] checks it beside the bundle's writing.
    /// `None` otherwise (a duplicate tree or commit, more than one pack, statistics it could not
    /// read): the bundle's own pack is checked once it is written.
    pub pack: Option<PathBuf>,
}

/// Import `stream` (written by [`write_stream`]: a file, or a pipe written as fast-import reads
/// it: a stream that ends before its `done`, as a writer that stopped leaves it, imports nothing
/// and names no commit) into `git`'s repository; the commit `reference_name` then names.
pub async fn import_from(git: &Git, stream: Input, reference_name: &str) -> Result<Imported> {
    let reference = reference(reference_name)?;
    let edges = git.dir().join(format!(
        "cordon-pack-edges-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let edges_arg = format!(
        "--export-pack-edges={}",
        edges
            .to_str()
            .ok_or_else(|| Error::Internal("the scratch path is not UTF-8".into()))?
    );
    let guard = Remove(edges.clone());
    let (_, stats) = git
        .run_with_input_reporting(
            "fast-import",
            &[
                "-c",
                IMPORT_COMPRESSION,
                // Its pack kept, however few objects (by default it loosens fewer than 100):
                // the pack is what the bundle's check reads.
                "-c",
                "fastimport.unpackLimit=0",
                "fast-import",
                "--quiet",
                "--stats",
                "--done",
                "--force",
                "--date-format=raw",
                &edges_arg,
            ],
            stream,
        )
        .await?;
    let out = git
        .run(
            "rev-parse",
            &[
                "rev-parse",
                "--verify",
                "--end-of-options",
                &format!("{reference}^{{commit}}"),
            ],
        )
        .await?;
    let head = String::from_utf8(out)
        .map_err(|_| Error::Internal("git rev-parse: not UTF-8".into()))?
        .trim()
        .to_owned();
    object_id(&head).map_err(|_| Error::Internal(format!("git rev-parse: {head:?}")))?;
    let pack = whole_pack(
        &git.dir().join("objects/pack"),
        &read_scratch_file(&edges, MAX_PACK_EDGES)?,
        &String::from_utf8_lossy(&stats),
    );
    drop(guard);
    Ok(Imported { head, pack })
}

/// fast-import's pack edges file (a line per pack it wrote) is at most this long.
const MAX_PACK_EDGES: u64 = 64 * 1024;

/// At most `max` bytes of a file git wrote in scratch space: opened as the seeder opens what it
/// reads ([`source::open_file`]: no link followed, never blocking, a regular file).
fn read_scratch_file(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::os::fd::AsFd;
    let refused = |e: source::Refused| Error::Internal(format!("{}: {e:?}", path.display()));
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::Internal(format!("{} names no file", path.display())));
    };
    let root = source::open_root(dir).map_err(refused)?;
    let opened = source::open_file(root.as_fd(), Path::new(name)).map_err(refused)?;
    let mut bytes = Vec::new();
    opened
        .file
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if bytes.len() as u64 > max {
        return Err(Error::Internal(format!(
            "{} is longer than {max} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// The pack fast-import's `edges` name, when it is the only one, lies in `objects_pack`, and its
/// `stats` say no tree or commit was a duplicate; `None` otherwise (what cannot be read is not
/// trusted).
fn whole_pack(objects_pack: &Path, edges: &[u8], stats: &str) -> Option<PathBuf> {
    if duplicates(stats, "trees")? != 0 || duplicates(stats, "commits")? != 0 {
        return None;
    }
    let text = std::str::from_utf8(edges).ok()?;
    let mut lines = text.lines();
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    // `<path>.pack: <commit>...`
    let path = Path::new(&line[..line.rfind(".pack:")? + ".pack".len()]);
    let name = path.file_name()?.to_str()?;
    let named = name.starts_with("pack-") && name.ends_with(".pack");
    (named && path.parent()? == objects_pack).then(|| path.to_path_buf())
}

/// How many objects of `kind` (`trees`, `commits`) fast-import's statistics count as duplicates:
/// the line `      trees  :    101 (     0 duplicates ...)` beneath their heading. fast-import
/// prints them last, so only what follows the last heading is read: a warning before them that
/// names something of the stream cannot pass for them.
fn duplicates(stats: &str, kind: &str) -> Option<u64> {
    let (_, block) = stats.rsplit_once("fast-import statistics:")?;
    block.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != kind {
            return None;
        }
        let (_, counts) = rest.split_once('(')?;
        let mut words = counts.split_whitespace();
        let n = words.next()?.parse().ok()?;
        (words.next()? == "duplicates").then_some(n)
    })
}

/// The commit of `spec` on `git`'s copy from the archive `content_tar`: the stream written at
/// `stream_path` (created new; removed after), then imported. No change makes no commit: base
/// is returned as it is, with no pack. The archive is read on a blocking thread.
pub async fn commit<R, F>(
    git: &Git,
    spec: Spec,
    content_tar: R,
    base_blob: F,
    stream_path: PathBuf,
    max_bytes: u64,
) -> Result<Imported>
where
    R: Read + Send + 'static,
    F: Fn(&str) -> Option<String> + Send + 'static,
{
    object_id(&spec.base)?;
    reference(&spec.reference)?;
    if spec.changes.is_empty() {
        return Ok(Imported {
            head: spec.base,
            pack: None,
        });
    }
    let file = create_private(&stream_path)?;
    let guard = Remove(stream_path.clone());
    let reference_name = spec.reference.clone();
    let special_paths = special::paths_of(&spec.changes);
    let written = tokio::task::spawn_blocking(move || {
        let out = std::io::BufWriter::with_capacity(256 * 1024, file);
        write_stream(content_tar, &spec, base_blob, out, max_bytes)
    })
    .await
    .map_err(|e| Error::Internal(format!("the stream writer: {e}")))?;
    let contents = written?;
    let scratch = stream_path
        .parent()
        .ok_or_else(|| Error::Internal("the stream has no directory".into()))?;
    let findings = special::findings(git, scratch, &special_paths, &contents.special).await?;
    if !findings.is_empty() {
        return Err(Error::CommitRefused { findings });
    }
    let file = std::fs::File::open(&stream_path)
        .map_err(|e| Error::io(format!("opening {}", stream_path.display()), e))?;
    let imported = import_from(git, Input::File(file), &reference_name).await;
    drop(guard);
    imported
}

/// git fsck's refusal as the commit's finding: at the path of the change whose blob its message
/// names (`error in blob <id>: ...`), else at the top.
fn fsck_finding(message: &str, changes: &[Change]) -> CommitFinding {
    let named = message.split_whitespace().find_map(|word| {
        let id = word.trim_end_matches(':');
        changes
            .iter()
            .find(|c| c.new.as_ref().and_then(|n| n.blob.as_deref()) == Some(id))
    });
    CommitFinding {
        path: named.map_or_else(|| ".".to_owned(), |c| c.path.clone()),
        reason: CommitReason::Fsck,
        // git names what it refused; a hostile url in its message is bounded here.
        detail: message.chars().take(1024).collect(),
    }
}

/// Removes a file when dropped.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether `c` is a Unicode noncharacter (U+FDD0..U+FDEF, and the last two of every plane).
fn noncharacter(c: char) -> bool {
    let u = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&u) || u & 0xFFFE == 0xFFFE
}

/// A validated git identity in git's raw form, `Name <email> SECONDS OFFSET`, returned as given.
///
/// Name and email are non-empty, hold no `<`, `>`, control character (LF, NUL, ...) or
/// noncharacter, and the name neither starts nor ends with a space; the seconds are a
/// non-negative integer without a leading zero below `i64::MAX` (git's range); the offset is
/// `[+-]HHMM` with hours at most 14 and minutes at most 59 (fast-import takes at most 1400), and a
/// zero offset is `+0000`.
pub fn identity(raw: &str) -> Result<String> {
    let bad = |why: &str| Error::Invalid(format!("identity {raw:?}: {why}"));
    if let Some(c) = raw.chars().find(|&c| noncharacter(c) || c.is_control()) {
        return Err(bad(&format!("holds U+{:04X}", u32::from(c))));
    }
    let open = raw.find(" <").ok_or_else(|| bad("no \" <email>\""))?;
    let name = &raw[..open];
    let rest = &raw[open + 2..];
    let close = rest.find('>').ok_or_else(|| bad("no closing >"))?;
    let email = &rest[..close];
    let rest = rest[close + 1..]
        .strip_prefix(' ')
        .ok_or_else(|| bad("no space before the date"))?;
    if name.is_empty() || name.starts_with(' ') || name.ends_with(' ') {
        return Err(bad("the name is empty or starts or ends with a space"));
    }
    if email.is_empty() {
        return Err(bad("the email is empty"));
    }
    if name.contains(['<', '>']) || email.contains(['<', '>']) {
        return Err(bad("< or > in the name or email"));
    }
    let (seconds, offset) = rest
        .split_once(' ')
        .ok_or_else(|| bad("not \"SECONDS OFFSET\""))?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(seconds) || (seconds.len() > 1 && seconds.starts_with('0')) {
        return Err(bad("the seconds are not a non-negative integer"));
    }
    match seconds.parse::<i64>() {
        Ok(s) if s < i64::MAX => {}
        _ => return Err(bad("the seconds are out of git's range")),
    }
    let (sign, hhmm) = offset.split_at(offset.len().min(1));
    if !(sign == "+" || sign == "-") || hhmm.len() != 4 || !digits(hhmm) {
        return Err(bad("the offset is not [+-]HHMM"));
    }
    let hours: u32 = hhmm[..2].parse().map_err(|_| bad("the offset's hours"))?;
    let minutes: u32 = hhmm[2..].parse().map_err(|_| bad("the offset's minutes"))?;
    if hours > 14 || minutes > 59 || hours * 100 + minutes > 1400 {
        return Err(bad("the offset is out of range (at most 14 hours)"));
    }
    if sign == "-" && hhmm == "0000" {
        return Err(bad("a zero offset is written +0000"));
    }
    Ok(raw.to_owned())
}

/// A commit message: `text` without trailing whitespace lines, then (if any) a blank line and
/// one `Key: value` line per trailer; ending with exactly one newline. No NUL or noncharacter
/// anywhere; trailer keys are `[A-Za-z0-9-]+` (not starting with `-`), values one line. An
/// empty message is refused.
pub fn message(text: &str, trailers: &[(String, String)]) -> Result<String> {
    let bad_char = |c: char| c == '\0' || noncharacter(c);
    if let Some(c) = text.chars().find(|&c| bad_char(c)) {
        return Err(Error::Invalid(format!(
            "the commit message holds U+{:04X}",
            u32::from(c)
        )));
    }
    let body = text.trim_end();
    if body.trim_start().is_empty() {
        return Err(Error::Invalid("the commit message is empty".into()));
    }
    let mut out = body.to_owned();
    out.push('\n');
    for (i, (key, value)) in trailers.iter().enumerate() {
        let key_ok = !key.is_empty()
            && !key.starts_with('-')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !key_ok {
            return Err(Error::Invalid(format!(
                "trailer key {key:?}: not [A-Za-z0-9-]+"
            )));
        }
        if let Some(c) = value
            .chars()
            .find(|&c| bad_char(c) || c == '\n' || c == '\r')
        {
            return Err(Error::Invalid(format!(
                "trailer {key}: the value holds U+{:04X}",
                u32::from(c)
            )));
        }
        if value.trim().is_empty() {
            return Err(Error::Invalid(format!("trailer {key}: the value is empty")));
        }
        if i == 0 {
            out.push('\n');
        }
        out.push_str(&format!("{key}: {}\n", value.trim()));
    }
    Ok(out)
}

/// A bundle of [`REF`] (which must be `head`) beyond `base`; every object it carries checked as
/// `fsck --strict` checks objects (a refusal is the commit's, `fsck`, git's message, the path of
/// the change whose blob it names); at most `max_bytes` ([`Error::BundleTooLarge`], nothing left
/// at `out`), verified, and only then put at `out`, which must not exist (never overwritten).
/// Its size.
///
/// With `imported_pack` ([`Imported::pack`]: fast-import's pack, holding every tree and commit
/// the import made) that pack is checked ([`check_pack`]) while `bundle create` writes, one
/// beside the other: the bundle's trees and commit are all in it, and a blob it carries that is
/// not was already in the copy, with nothing fsck checks in a blob but `.gitmodules` and
/// `.gitattributes`, which the check reads from the copy when a tree it checks names them.
/// Otherwise the bundle's own pack is checked once it is written ([`check_bundle`]). For a
/// 10,000-file commit the two took 310 and 280 ms one after the other.
pub async fn fsck_and_bundle(
    git: &Git,
    (base, head): (&str, &str),
    imported_pack: Option<&Path>,
    changes: &[Change],
    out: &Path,
    max_bytes: u64,
) -> Result<u64> {
    let base = object_id(base)?;
    let head = object_id(head)?;
    if base == head {
        return Err(Error::Invalid(
            "no commit beyond base: nothing to bundle".into(),
        ));
    }
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(Error::Invalid(format!(
            "{} exists: a bundle never overwrites anything",
            out.display()
        )));
    }
    let at = git
        .run(
            "rev-parse",
            &[
                "rev-parse",
                "--verify",
                "--end-of-options",
                &format!("{REF}^{{commit}}"),
            ],
        )
        .await?;
    if String::from_utf8_lossy(&at).trim() != head {
        return Err(Error::Internal(format!("{REF} is not {head}")));
    }
    let tmp = git.dir().join(format!(
        "cordon-bundle-{}.tmp",
        uuid::Uuid::new_v4().simple()
    ));
    let guard = Remove(tmp.clone());
    let tmp_text = tmp
        .to_str()
        .ok_or_else(|| Error::Internal("the scratch path is not UTF-8".into()))?;
    let exclude = format!("^{base}");
    // Not the sparse walk: the bundle then carries exactly what `rev-list --objects` lists of REF
    // beyond base (the sparse walk may add base's own trees when a directory moved), so every
    // tree and commit it carries is one fast-import made.
    let create_args = [
        "-c",
        "pack.useSparse=false",
        "bundle",
        "create",
        "-q",
        tmp_text,
        REF,
        &exclude,
    ];
    let create = git.run("bundle create", &create_args);
    let refusal = |e: Error| match e {
        Error::Git { message, .. } => Error::CommitRefused {
            findings: vec![fsck_finding(&message, changes)],
        },
        e => e,
    };
    match imported_pack {
        Some(pack) => {
            let (created, checked) = tokio::join!(create, check_pack(git, pack, &tmp));
            // The check's refusal is the answer whatever became of the bundle.
            checked.map_err(refusal)?;
            created?;
        }
        None => {
            create.await?;
            check_bundle(git, &tmp).await.map_err(refusal)?;
        }
    }
    let size = std::fs::metadata(&tmp)
        .map_err(|e| Error::io(format!("reading {}", tmp.display()), e))?
        .len();
    if size > max_bytes {
        return Err(Error::BundleTooLarge(format!(
            "{size} bytes, at most {max_bytes}"
        )));
    }
    git.run("bundle verify", &["bundle", "verify", "-q", tmp_text])
        .await?;
    let mut from = std::fs::File::open(&tmp)
        .map_err(|e| Error::io(format!("opening {}", tmp.display()), e))?;
    let mut to = create_private(out)?;
    let copied = std::io::copy(&mut from, &mut to).and_then(|n| to.sync_all().map(|()| n));
    match copied {
        Ok(n) if n == size => {}
        Ok(n) => {
            let _ = std::fs::remove_file(out);
            return Err(Error::Internal(format!(
                "the bundle: {n} of {size} bytes copied"
            )));
        }
        Err(e) => {
            let _ = std::fs::remove_file(out);
            return Err(Error::io(format!("writing {}", out.display()), e));
        }
    }
    drop(guard);
    Ok(size)
}

/// A bundle's header is at most this long (one ref, one prerequisite: far less).
const MAX_BUNDLE_HEADER: usize = 64 * 1024;

/// `index-pack --strict` of the pack `input` or `pack` names, as a server with
/// `receive.fsckObjects` checks a push: each object fsck-checked in strict mode (`.gitmodules`
/// blobs included, wherever they come from) and every link it holds resolved against the copy.
/// Only the new objects are checked, not every object base brought: `fsck --strict` over the
/// whole copy took 1.5 s of a 131,072-file commit. What it writes goes beside `bundle` and is
/// removed.
async fn index_strictly(git: &Git, bundle: &Path, pack: Option<&Path>, input: Input) -> Result<()> {
    let text = |p: &Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| Error::Internal("the scratch path is not UTF-8".into()))
    };
    let stem = bundle.with_extension("check");
    let (indexed, index, reverse) = (
        stem.with_extension("check.pack"),
        stem.with_extension("check.idx"),
        stem.with_extension("check.rev"),
    );
    let guards = [
        Remove(indexed.clone()),
        Remove(index.clone()),
        Remove(reverse),
    ];
    let (indexed, index) = (text(&indexed)?, text(&index)?);
    let args: Vec<String> = match pack {
        // Read where it lies: only an index is written.
        Some(pack) => [
            "index-pack",
            "--strict",
            "--no-rev-index",
            "-o",
            &index,
            &text(pack)?,
        ]
        .map(str::to_owned)
        .to_vec(),
        // A thin pack on stdin, copied to `indexed` with its bases appended: that copy is removed
        // unread, so they are stored, not deflated again.
        None => [
            "-c",
            "core.compression=0",
            "index-pack",
            "--strict",
            "--no-rev-index",
            "--stdin",
            "--fix-thin",
            "-o",
            &index,
            &indexed,
        ]
        .map(str::to_owned)
        .to_vec(),
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let checked = git
        .run_with_input("index-pack --strict", &args, input)
        .await;
    drop(guards);
    checked.map(|_| ())
}

/// Check fast-import's `pack` ([`Imported::pack`]) where it lies: it is whole (no thin deltas).
async fn check_pack(git: &Git, pack: &Path, bundle: &Path) -> Result<()> {
    index_strictly(git, bundle, Some(pack), Input::None).await
}

/// Check the pack of the bundle at `bundle`, a thin pack whose bases come from the copy (base's
/// objects).
async fn check_bundle(git: &Git, bundle: &Path) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(bundle)
        .map_err(|e| Error::io(format!("opening {}", bundle.display()), e))?;
    let mut head = vec![0u8; MAX_BUNDLE_HEADER];
    let mut filled = 0;
    while filled < head.len() {
        let n = file
            .read(&mut head[filled..])
            .map_err(|e| Error::io("reading the bundle's header", e))?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    let pack_at = head[..filled]
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|at| at + 2)
        .ok_or_else(|| Error::Internal("the bundle has no header end".into()))?;
    file.seek(SeekFrom::Start(pack_at as u64))
        .map_err(|e| Error::io("seeking to the bundle's pack", e))?;
    index_strictly(git, bundle, None, Input::File(file)).await
}

/// The diff of `base` and `head` (a commit or tree), for a person: no colour, no external diff
/// or textconv (nothing of the repository's attributes runs), full blob ids, no rename
/// detection (the manifest's own delete and add), and binary files named, not encoded (the
/// bundle carries the content; the diff is for reading). At most `max_bytes`, cut at a line
/// boundary (a character boundary if one line is longer), with whether it was cut. Content that is
/// not UTF-8 shows as U+FFFD.
pub async fn diff(git: &Git, base: &str, head: &str, max_bytes: usize) -> Result<(String, bool)> {
    let base = object_id(base)?;
    let head = object_id(head)?;
    let (out, cut) = git
        .run_bounded(
            "diff",
            &[
                "diff",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--full-index",
                "--no-renames",
                "--end-of-options",
                base,
                head,
                "--",
            ],
            Input::None,
            max_bytes,
        )
        .await?;
    let text = String::from_utf8_lossy(&out).into_owned();
    if !cut && text.len() <= max_bytes {
        return Ok((text, false));
    }
    let mut end = max_bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = match text[..end].rfind('\n') {
        Some(nl) => nl + 1,
        None => end,
    };
    Ok((text[..end].to_owned(), true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::tests::{docker_tar, git_in, head_of, sample_repo, scratch_of, TempDir};
    use cordon_contract::audit::Side;
    use std::os::unix::fs::PermissionsExt;

    const AUTHOR: &str = "A U Thor <author@example.com> 1700000000 +0000";
    const COMMITTER: &str = "C O Mitter <committer@example.com> 1700000100 +0100";

    fn kind_of(mode: &str) -> Kind {
        match mode {
            "100644" => Kind::File,
            "100755" => Kind::Executable,
            "120000" => Kind::Link,
            "160000" => Kind::Gitlink,
            other => panic!("mode {other}"),
        }
    }

    /// The manifest's changes of the trusted working copy `work` against `base`, from trusted
    /// git (`add -A`, then the staged diff's raw form).
    fn changes_of(work: &Path, base: &str) -> Vec<Change> {
        git_in(work, &["add", "-A"]);
        let raw = git_in(
            work,
            &[
                "diff",
                "--cached",
                "--raw",
                "-z",
                "--no-renames",
                "--no-abbrev",
                base,
            ],
        );
        let mut fields = raw.split(|&b| b == 0).filter(|f| !f.is_empty());
        let mut changes = Vec::new();
        while let (Some(head), Some(path)) = (fields.next(), fields.next()) {
            let head = std::str::from_utf8(head).expect("utf8");
            let path = String::from_utf8(path.to_vec()).expect("utf8");
            let parts: Vec<&str> = head.trim_start_matches(':').split(' ').collect();
            let side = |mode: &str, blob: &str| {
                (mode != "000000").then(|| Side {
                    kind: kind_of(mode),
                    blob: Some(blob.to_owned()),
                    size: None,
                    target: None,
                })
            };
            let mut new = side(parts[1], parts[3]);
            if let Some(new) = new.as_mut() {
                let on_disk = work.join(&path);
                if new.kind == Kind::Link {
                    let target = std::fs::read_link(&on_disk).expect("link");
                    new.target = Some(target.to_string_lossy().into_owned());
                } else {
                    new.size = Some(std::fs::metadata(&on_disk).expect("meta").len());
                }
            }
            changes.push(Change {
                path,
                old: side(parts[0], parts[2]),
                new,
                ignored: false,
                link_target_traverses_link: None,
            });
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        changes
    }

    fn spec(base: &str, changes: Vec<Change>) -> Spec {
        Spec {
            base: base.to_owned(),
            changes,
            author: identity(AUTHOR).expect("author"),
            committer: identity(COMMITTER).expect("committer"),
            message: message("the change\n\nIn detail.", &[]).expect("message"),
            reference: REF.to_owned(),
        }
    }

    async fn base_blobs(git: &Git, base: &str) -> HashMap<String, String> {
        crate::scratch::list_tree(git, base)
            .await
            .expect("tree")
            .into_iter()
            .filter(|e| e.kind == "blob")
            .map(|e| (e.path, e.id))
            .collect()
    }

    fn rev(dir: &Path, what: &str) -> String {
        String::from_utf8(git_in(dir, &["rev-parse", what]))
            .expect("utf8")
            .trim()
            .to_owned()
    }

    /// The objects the bundle carries are checked as `fsck --strict` checks them: a new tree that
    /// names base's own hostile `.gitmodules` is refused with git's words (special.rs checks only
    /// what the agent wrote), and nothing is left at `out` or beside the copy.
    #[tokio::test]
    async fn every_object_the_bundle_carries_is_checked_strictly() {
        let tmp = TempDir::new("strict");
        let work = sample_repo(&tmp.0);
        std::fs::write(
            work.join(".gitmodules"),
            "[submodule \"x\"]\n\tpath = x\n\turl = https://e.invalid/x\n\tupdate = !rm -rf /\n",
        )
        .expect("w");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "hostile base"]);
        let base = head_of(&work);
        let scratch_root = tmp.0.join("scratch");
        std::fs::create_dir(&scratch_root).expect("scratch");
        let (git, _) = scratch_of(&scratch_root, &work);
        std::fs::write(work.join("new.txt"), "new\n").expect("w");
        let changes = changes_of(&work, &base);
        let blobs = base_blobs(&git, &base).await;
        let imported = commit(
            &git,
            spec(&base, changes.clone()),
            std::io::Cursor::new(docker_tar(&work, "work")),
            move |p: &str| blobs.get(p).cloned(),
            tmp.0.join("stream"),
            64 << 20,
        )
        .await
        .expect("built");
        assert!(imported.pack.is_some(), "every tree and commit is new");
        let out = tmp.0.join("out.bundle");
        // fast-import's pack checked beside the bundle, and the bundle's own pack.
        for pack in [imported.pack.as_deref(), None] {
            let bundled = fsck_and_bundle(
                &git,
                (&base, &imported.head),
                pack,
                &changes,
                &out,
                64 << 20,
            )
            .await;
            assert_gitmodules_refused(bundled, ".");
            assert!(!out.exists());
        }
        let left: Vec<_> = std::fs::read_dir(&git.git_dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("cordon-bundle-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    fn assert_gitmodules_refused(bundled: Result<u64>, path: &str) {
        match bundled {
            Err(Error::CommitRefused { findings }) => assert!(
                findings.len() == 1
                    && findings[0].reason == CommitReason::Fsck
                    && findings[0].path == path
                    && findings[0].detail.contains("gitmodulesUpdate"),
                "{findings:?}"
            ),
            other => panic!("not refused by the strict check: {other:?}"),
        }
    }

    /// A tree fast-import did not store because a pack of the copy already held it (here the
    /// root tree of another branch) is not in fast-import's pack, so that pack is not the one
    /// checked: the bundle's own is, and the hostile `.gitmodules` that tree names is refused.
    /// The stream goes straight to fast-import (the commit's own `.gitmodules` rules, which run
    /// before it, are not what this is about).
    #[tokio::test]
    async fn a_tree_the_copy_already_held_is_checked_in_the_bundle() {
        let tmp = TempDir::new("held-tree");
        let work = sample_repo(&tmp.0);
        let base = head_of(&work);
        let hostile =
            "[submodule \"x\"]\n\tpath = x\n\turl = https://e.invalid/x\n\tupdate = !rm -rf /\n";
        git_in(&work, &["checkout", "-q", "-b", "other"]);
        std::fs::write(work.join(".gitmodules"), hostile).expect("w");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "other"]);
        git_in(&work, &["checkout", "-q", "-"]);
        git_in(&work, &["repack", "-a", "-d", "-q"]);
        let scratch_root = tmp.0.join("scratch");
        std::fs::create_dir(&scratch_root).expect("scratch");
        let (git, _) = scratch_of(&scratch_root, &work);
        let stream = format!(
            "commit {REF}\nauthor {AUTHOR}\ncommitter {COMMITTER}\ndata 2\nm\n\nfrom {base}\n\
             M 100644 inline .gitmodules\ndata {}\n{hostile}\ndone\n",
            hostile.len()
        );
        let imported = import_from(&git, Input::Bytes(stream.into_bytes()), REF)
            .await
            .expect("imported");
        assert_eq!(imported.pack, None, "its root tree was already in a pack");
        let out = tmp.0.join("out.bundle");
        let bundled = fsck_and_bundle(
            &git,
            (&base, &imported.head),
            imported.pack.as_deref(),
            &[],
            &out,
            64 << 20,
        )
        .await;
        assert_gitmodules_refused(bundled, ".");
        assert!(!out.exists());
    }

    /// fast-import's pack edges are read from a regular file only, never through a link or from
    /// a FIFO (which would block), and at most the bound.
    #[test]
    fn the_pack_edges_file_is_read_plain_and_bounded() {
        let tmp = TempDir::new("edges");
        let file = tmp.0.join("edges");
        std::fs::write(&file, "p.pack: c\n").expect("w");
        assert_eq!(read_scratch_file(&file, 64).expect("read"), b"p.pack: c\n");
        assert!(read_scratch_file(&file, 4).is_err(), "past the bound");
        let link = tmp.0.join("link");
        std::os::unix::fs::symlink(&file, &link).expect("link");
        assert!(read_scratch_file(&link, 64).is_err(), "through a link");
        let fifo = tmp.0.join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("c");
        // SAFETY: a NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(read_scratch_file(&fifo, 64).is_err(), "a FIFO");
        assert!(
            read_scratch_file(&tmp.0.join("none"), 64).is_err(),
            "nothing there"
        );
    }

    /// fast-import's statistics and pack edges: its pack is the one checked only when it is the
    /// one pack, in the copy's pack directory, and no tree or commit was a duplicate.
    #[test]
    fn fast_imports_pack_is_whole_only_without_duplicate_trees_or_commits() {
        let stats = |trees: u64, commits: u64| {
            format!(
                "git-fast-import statistics:\n\
                 Total objects:        10102 (         0 duplicates                  )\n      \
                 blobs  :        10000 (         7 duplicates          0 deltas of       9999 attempts)\n      \
                 trees  :          101 (         {trees} duplicates          0 deltas of          0 attempts)\n      \
                 commits:            1 (         {commits} duplicates          0 deltas of          0 attempts)\n"
            )
        };
        let dir = Path::new("/scratch/copy/objects/pack");
        let pack = dir.join("pack-ab60.pack");
        let edges = format!("{}: 548c67b1\n", pack.display());
        assert_eq!(
            whole_pack(dir, edges.as_bytes(), &stats(0, 0)),
            Some(pack.clone())
        );
        assert_eq!(whole_pack(dir, edges.as_bytes(), &stats(1, 0)), None);
        assert_eq!(whole_pack(dir, edges.as_bytes(), &stats(0, 1)), None);
        assert_eq!(whole_pack(dir, edges.as_bytes(), "no statistics"), None);
        // Lines shaped like the statistics before them (a warning naming a path) are not read.
        let forged = format!("warning: {}{}", stats(0, 0), stats(1, 0));
        assert_eq!(whole_pack(dir, edges.as_bytes(), &forged), None);
        let headless = stats(0, 0).replace("git-fast-import statistics:", "");
        assert_eq!(whole_pack(dir, edges.as_bytes(), &headless), None);
        assert_eq!(whole_pack(dir, b"", &stats(0, 0)), None, "no pack");
        let two = format!("{edges}{}: 548c67b1\n", dir.join("pack-cd.pack").display());
        assert_eq!(whole_pack(dir, two.as_bytes(), &stats(0, 0)), None);
        for elsewhere in [
            "/scratch/other/pack-ab60.pack: 548c",
            "/scratch/copy/objects/pack/sub/pack-ab60.pack: 548c",
            "/scratch/copy/objects/pack/ab60.pack: 548c",
            "/scratch/copy/objects/pack/pack-ab60.idx: 548c",
        ] {
            assert_eq!(
                whole_pack(dir, elsewhere.as_bytes(), &stats(0, 0)),
                None,
                "{elsewhere}"
            );
        }
    }

    /// A piped stream that ends before its `done` (the writer refused and closed the pipe) imports
    /// nothing and names no commit, even with a whole commit command in it; the same stream with
    /// its `done` names the commit.
    #[tokio::test]
    async fn a_piped_stream_that_ends_before_done_names_no_commit() {
        use std::io::Write as _;
        let tmp = TempDir::new("piped");
        let work = sample_repo(&tmp.0);
        let base = head_of(&work);
        let scratch_root = tmp.0.join("scratch");
        std::fs::create_dir(&scratch_root).expect("scratch");
        let (git, _) = scratch_of(&scratch_root, &work);
        let body = format!(
            "blob\nmark :1\ndata 4\nnew\n\ncommit {REF}\nauthor {AUTHOR}\ncommitter {COMMITTER}\n\
             data 2\nm\n\nfrom {base}\nM 100644 :1 new.txt\n\n"
        );
        for done in [false, true] {
            let (from, mut to) = std::io::pipe().expect("pipe");
            let text = if done {
                format!("{body}done\n")
            } else {
                body.clone()
            };
            let writer = std::thread::spawn(move || to.write_all(text.as_bytes()));
            let imported = import_from(&git, Input::Pipe(from), REF).await;
            writer.join().expect("writer").expect("written");
            let named = git
                .run("rev-parse", &["rev-parse", "--verify", "-q", REF])
                .await;
            if done {
                let head = imported.expect("imported").head;
                assert_eq!(
                    String::from_utf8(named.expect("named"))
                        .expect("utf8")
                        .trim(),
                    head
                );
            } else {
                assert!(imported.is_err(), "a stream without its done was imported");
                assert!(named.is_err(), "a stream without its done named a commit");
            }
        }
    }

    /// fast-import refusing a piped stream part way leaves its writer a broken pipe, not a write
    /// that waits forever: nothing but fast-import holds the pipe's read end once it is gone.
    #[tokio::test]
    async fn a_refused_piped_stream_breaks_its_writers_pipe() {
        use std::io::Write as _;
        let tmp = TempDir::new("piped-refused");
        let work = sample_repo(&tmp.0);
        let scratch_root = tmp.0.join("scratch");
        std::fs::create_dir(&scratch_root).expect("scratch");
        let (git, _) = scratch_of(&scratch_root, &work);
        let (from, mut to) = std::io::pipe().expect("pipe");
        let writer = std::thread::spawn(move || {
            to.write_all(b"not a command\n")?;
            // Far more than a pipe holds: only a closed read end ends this.
            to.write_all(&vec![b'x'; 16 << 20])
        });
        assert!(import_from(&git, Input::Pipe(from), REF).await.is_err());
        let written = tokio::task::spawn_blocking(move || writer.join().expect("writer"));
        let written = tokio::time::timeout(std::time::Duration::from_secs(30), written)
            .await
            .expect("the writer was left waiting")
            .expect("joined");
        assert_eq!(
            written.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::BrokenPipe)
        );
    }

    #[tokio::test]
    async fn the_commit_is_what_git_add_and_commit_make_of_the_same_tree() {
        let tmp = TempDir::new("oracle");
        let work = sample_repo(&tmp.0);
        // Base: a script, a link, a file that becomes a directory, a directory that becomes a file.
        std::fs::write(work.join("tool.sh"), "#!/bin/sh\necho hi\n").expect("w");
        std::os::unix::fs::symlink("README", work.join("link")).expect("link");
        std::fs::write(work.join("dirfile"), "a file\n").expect("w");
        std::fs::create_dir(work.join("filedir")).expect("dir");
        std::fs::write(work.join("filedir/inner"), "inner\n").expect("w");
        git_in(&work, &["add", "-A"]);
        git_in(&work, &["commit", "-q", "-m", "base"]);
        let base = head_of(&work);
        let clone = tmp.0.join("clone");
        git_in(&tmp.0, &["clone", "-q", "--no-local", "work", "clone"]);
        let scratch_root = tmp.0.join("scratch");
        std::fs::create_dir(&scratch_root).expect("scratch");
        let (git, _) = scratch_of(&scratch_root, &work);

        // The corpus.
        std::fs::write(work.join("src/main.rs"), "fn main() { println!(\"x\"); }\n").expect("w");
        std::fs::remove_file(work.join("README")).expect("rm");
        std::fs::create_dir_all(work.join("new/nested/deep")).expect("mkdir");
        std::fs::write(work.join("new/nested/deep/file.txt"), "deep\n").expect("w");
        std::fs::create_dir(work.join("renamed")).expect("mkdir");
        std::fs::rename(work.join("src/deep/ünï.txt"), work.join("renamed/ünï.txt")).expect("mv");
        std::fs::set_permissions(work.join("tool.sh"), PermissionsExt::from_mode(0o755))
            .expect("chmod");
        std::os::unix::fs::symlink("../src/main.rs", work.join("new/link")).expect("link");
        std::fs::remove_file(work.join("link")).expect("rm");
        std::os::unix::fs::symlink("src/main.rs", work.join("link")).expect("link");
        let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        std::fs::write(work.join("bin.dat"), &binary).expect("w");
        std::fs::write(work.join("empty"), "").expect("w");
        std::fs::create_dir_all(work.join("日本語")).expect("mkdir");
        std::fs::write(work.join("日本語/ファイル.txt"), "こんにちは\n").expect("w");
        std::fs::write(work.join("a \"quoted\" name.txt"), "q\n").expect("w");
        std::fs::remove_file(work.join("dirfile")).expect("rm");
        std::fs::create_dir(work.join("dirfile")).expect("mkdir");
        std::fs::write(work.join("dirfile/inner.txt"), "now a dir\n").expect("w");
        std::fs::remove_dir_all(work.join("filedir")).expect("rm");
        std::fs::write(work.join("filedir"), "now a file\n").expect("w");
        // Second names of one inode: of a new file, and of an unchanged base file.
        std::fs::hard_link(
            work.join("new/nested/deep/file.txt"),
            work.join("hard2.txt"),
        )
        .expect("ln");
        std::fs::hard_link(work.join("src/.gitignore"), work.join("zz-hard")).expect("ln");
        // The same content at two paths is one blob.
        std::fs::write(
            work.join("copy-of-main.rs"),
            "fn main() { println!(\"x\"); }\n",
        )
        .expect("w");

        let changes = changes_of(&work, &base);
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        for want in [
            "README",
            "hard2.txt",
            "zz-hard",
            "link",
            "tool.sh",
            "empty",
            "filedir",
        ] {
            assert!(paths.contains(&want), "{want} in {paths:?}");
        }
        let tar = docker_tar(&work, "work");
        // The archive holds hard links and the metadata, as the engine's does.
        let mut kinds = Vec::new();
        for e in tar::Archive::new(&tar[..]).entries().expect("entries") {
            let e = e.expect("entry");
            kinds.push((
                e.path().expect("p").display().to_string(),
                e.header().entry_type(),
            ));
        }
        assert!(kinds.iter().any(|(_, k)| *k == tar::EntryType::Link));
        assert!(kinds.iter().any(|(p, _)| p.starts_with("work/.git/")));

        let blobs = base_blobs(&git, &base).await;
        let lookup = move |p: &str| blobs.get(p).cloned();
        let spec = spec(&base, changes);
        let imported = commit(
            &git,
            spec.clone(),
            std::io::Cursor::new(tar.clone()),
            lookup.clone(),
            tmp.0.join("stream-1"),
            64 << 20,
        )
        .await
        .expect("commit");
        let head = imported.head.clone();
        assert!(imported.pack.is_some(), "every tree and commit is new");
        assert!(!tmp.0.join("stream-1").exists(), "the stream is removed");

        // The oracle: trusted git on the trusted copy, same identities and message.
        git_in(&work, &["commit", "-q", "-m", "the change\n\nIn detail."]);
        let trusted = head_of(&work);
        let tree = |dir: &Path, c: &str| rev(dir, &format!("{c}^{{tree}}"));
        let ours = String::from_utf8(
            git.run("rev-parse", &["rev-parse", &format!("{head}^{{tree}}")])
                .await
                .expect("tree"),
        )
        .expect("utf8");
        assert_eq!(ours.trim(), tree(&work, &trusted));
        assert_eq!(head, trusted, "the commit itself is git's");

        // Twice: the same id.
        let again = commit(
            &git,
            spec.clone(),
            std::io::Cursor::new(tar.clone()),
            lookup.clone(),
            tmp.0.join("stream-2"),
            64 << 20,
        )
        .await
        .expect("again");
        assert_eq!(again.head, head);
        assert_eq!(again.pack, None, "every tree and commit was already there");

        // No change: no commit.
        let none = commit(
            &git,
            Spec {
                changes: vec![],
                ..spec.clone()
            },
            std::io::Cursor::new(tar.clone()),
            lookup.clone(),
            tmp.0.join("stream-3"),
            64 << 20,
        )
        .await
        .expect("none");
        assert_eq!(none.head, base);
        assert!(!tmp.0.join("stream-3").exists());

        // The content bound.
        let full = commit(
            &git,
            spec.clone(),
            std::io::Cursor::new(tar.clone()),
            lookup,
            tmp.0.join("stream-4"),
            1000,
        )
        .await;
        assert!(matches!(full, Err(Error::CommitScratchFull(_))), "{full:?}");

        // The bundle: verified, fetched by a clone of base with every object checked, whichever
        // pack was checked (fast-import's beside it, or its own after it).
        for (n, pack) in [imported.pack.as_deref(), None].into_iter().enumerate() {
            let out = tmp.0.join(format!("out-{n}.bundle"));
            let size = fsck_and_bundle(&git, (&base, &head), pack, &[], &out, 64 << 20)
                .await
                .expect("bundle");
            assert_eq!(std::fs::metadata(&out).expect("out").len(), size);
            git_in(
                &clone,
                &["bundle", "verify", "-q", out.to_str().expect("utf8")],
            );
            git_in(
                &clone,
                &[
                    "-c",
                    "transfer.fsckObjects=true",
                    "fetch",
                    "-q",
                    out.to_str().expect("utf8"),
                    &format!("+{REF}:refs/heads/got-{n}"),
                ],
            );
            assert_eq!(rev(&clone, &format!("refs/heads/got-{n}")), head);
            // Never over an existing file; over the bound nothing is left.
            let again = fsck_and_bundle(&git, (&base, &head), pack, &[], &out, 64 << 20).await;
            assert!(matches!(again, Err(Error::Invalid(_))), "{again:?}");
            let small = tmp.0.join("small.bundle");
            let r = fsck_and_bundle(&git, (&base, &head), pack, &[], &small, 100).await;
            assert!(matches!(r, Err(Error::BundleTooLarge(_))), "{r:?}");
            assert!(!small.exists());
        }
        let leftovers: Vec<_> = std::fs::read_dir(&git.git_dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("cordon-bundle-")
            })
            .collect();
        assert!(leftovers.is_empty());

        // The diff: whole, and cut at a line.
        let (text, cut) = diff(&git, &base, &head, 1 << 20).await.expect("diff");
        assert!(!cut);
        assert!(
            text.contains("diff --git a/src/main.rs b/src/main.rs"),
            "{text}"
        );
        assert!(
            text.contains("Binary files /dev/null and b/bin.dat differ"),
            "{text}"
        );
        assert!(text.contains("old mode 100644\nnew mode 100755"));
        let (short, cut) = diff(&git, &base, &head, 300).await.expect("diff");
        assert!(
            cut && short.len() <= 300 && short.ends_with('\n'),
            "{short:?}"
        );
        assert!(text.starts_with(&short));
    }

    /// A `/work` archive of `entries`: (name under work/, kind, mode, data or link target).
    fn work_tar(entries: &[(&str, tar::EntryType, u32, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, mode, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            let name = format!("work/{name}");
            match kind {
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    h.set_size(0);
                    let target = std::str::from_utf8(data).expect("utf8");
                    b.append_link(&mut h, &name, target).expect("link");
                }
                _ => {
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, &name, *data).expect("data");
                }
            }
        }
        b.into_inner().expect("tar")
    }

    fn added(path: &str, kind: Kind, content: &[u8]) -> Change {
        Change {
            path: path.to_owned(),
            old: None,
            new: Some(Side {
                kind,
                blob: Some(blob_id(content)),
                size: (kind != Kind::Link).then_some(content.len() as u64),
                target: None,
            }),
            ignored: false,
            link_target_traverses_link: None,
        }
    }

    fn refused(result: Result<Contents>) -> Vec<(String, CommitReason)> {
        match result {
            Err(Error::CommitRefused { findings }) => {
                findings.into_iter().map(|f| (f.path, f.reason)).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn content_that_is_not_the_manifests_is_refused() {
        use tar::EntryType::{Directory, Fifo, Link, Regular, Symlink};
        let none = |_: &str| None;
        let file = added("a.txt", Kind::File, b"approved\n");
        let mismatch = |p: &str| vec![(p.to_owned(), CommitReason::ContentMismatch)];
        let run = |tar: Vec<u8>, changes: Vec<Change>| {
            refused(stream_changes(
                &tar[..],
                &changes,
                none,
                std::io::sink(),
                1 << 20,
            ))
        };
        // What matches passes (and the metadata's copy of the name is never read).
        let ok = work_tar(&[
            (".git/a.txt", Regular, 0o644, b"other"),
            ("a.txt", Regular, 0o644, b"approved\n"),
        ]);
        let contents = stream_changes(
            &ok[..],
            std::slice::from_ref(&file),
            none,
            std::io::sink(),
            1 << 20,
        )
        .expect("matches");
        assert_eq!(contents.blobs, 1);
        // Other bytes of the same size.
        let tar = work_tar(&[("a.txt", Regular, 0o644, b"APPROVED\n")]);
        assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"));
        // Another size.
        let tar = work_tar(&[("a.txt", Regular, 0o644, b"approved!\n")]);
        assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"));
        // A symlink, a fifo, a directory where a file is approved.
        for (kind, data) in [(Symlink, &b"approved\n"[..]), (Fifo, b""), (Directory, b"")] {
            let tar = work_tar(&[("a.txt", kind, 0o644, data)]);
            assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"), "{kind:?}");
        }
        // A file where a link is approved.
        let link = added("l", Kind::Link, b"target");
        let tar = work_tar(&[("l", Regular, 0o644, b"target")]);
        assert_eq!(run(tar, vec![link.clone()]), mismatch("l"));
        // Another target.
        let tar = work_tar(&[("l", Symlink, 0o777, b"elsewhere")]);
        assert_eq!(run(tar, vec![link]), mismatch("l"));
        // The executable bit is not the kind's.
        let tar = work_tar(&[("a.txt", Regular, 0o755, b"approved\n")]);
        assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"));
        // Missing, or given twice.
        let tar = work_tar(&[("b.txt", Regular, 0o644, b"approved\n")]);
        assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"));
        let tar = work_tar(&[
            ("a.txt", Regular, 0o644, b"approved\n"),
            ("a.txt", Regular, 0o644, b"approved\n"),
        ]);
        assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"));
        // A hard link to content nobody hashed, or to a base file of other content.
        let tar = work_tar(&[("a.txt", Link, 0o644, b"work/unknown")]);
        assert_eq!(run(tar, vec![file.clone()]), mismatch("a.txt"));
        let tar = work_tar(&[("a.txt", Link, 0o644, b"work/base.txt")]);
        let other = |_: &str| Some(blob_id(b"base\n"));
        let r = stream_changes(
            &tar[..],
            std::slice::from_ref(&file),
            other,
            std::io::sink(),
            1 << 20,
        );
        assert_eq!(refused(r), mismatch("a.txt"));
        let same = |p: &str| (p == "base.txt").then(|| blob_id(b"approved\n"));
        let r = stream_changes(
            &tar[..],
            std::slice::from_ref(&file),
            same,
            std::io::sink(),
            1 << 20,
        );
        assert!(r.is_ok(), "{r:?}");
        // Every finding is reported, not only the first.
        let two = vec![file.clone(), added("b.txt", Kind::File, b"b")];
        let tar = work_tar(&[("a.txt", Regular, 0o644, b"wrong")]);
        assert_eq!(run(tar, two).len(), 2);
        // A gitlink or directory is never committed.
        let mut gitlink = added("sub", Kind::Gitlink, b"");
        gitlink.new.as_mut().expect("new").blob = Some("a".repeat(40));
        let tar = work_tar(&[]);
        assert_eq!(
            run(tar, vec![gitlink]),
            vec![("sub".to_owned(), CommitReason::Gitlink)]
        );
        // The scratch bound.
        let tar = work_tar(&[("a.txt", Regular, 0o644, b"approved\n")]);
        let r = stream_changes(&tar[..], &[file], none, std::io::sink(), 5);
        assert!(matches!(r, Err(Error::CommitScratchFull(_))), "{r:?}");
    }

    #[test]
    fn the_stream_quotes_every_path() {
        assert_eq!(quoted("a b"), "\"a b\"");
        assert_eq!(quoted("\"q\"\\x"), "\"\\\"q\\\"\\\\x\"");
        assert_eq!(quoted("a\nb\tc\u{7f}"), "\"a\\012b\\011c\\177\"");
        assert_eq!(quoted("日本"), "\"日本\"");
    }

    #[test]
    fn identities_are_git_raw_and_nothing_else() {
        for ok in [
            AUTHOR,
            "A <a@b> 0 +0000",
            "Ünï Cödé <u@example.com> 1700000000 -0530",
            "A <a@b> 1700000000 +1400",
        ] {
            assert_eq!(identity(ok).expect(ok), ok);
        }
        for bad in [
            "A <a@b> 1700000000 -0000",
            "A <a@b> 1700000000 +0000 ",
            " A <a@b> 1700000000 +0000",
            "<a@b> 1700000000 +0000",
            "A <> 1700000000 +0000",
            "A a@b 1700000000 +0000",
            "A <a<b> 1700000000 +0000",
            "A> <a@b> 1700000000 +0000",
            "A <a@b> 1700000000",
            "A <a@b> -1 +0000",
            "A <a@b> 01700000000 +0000",
            "A <a@b> 1.5 +0000",
            "A <a@b> 99999999999999999999 +0000",
            "A <a@b> 1700000000 +000",
            "A <a@b> 1700000000 0000",
            "A <a@b> 1700000000 +1500",
            "A <a@b> 1700000000 +0160",
            "A <a@b>  1700000000 +0000",
            "A\n <a@b> 1700000000 +0000",
            "A\0 <a@b> 1700000000 +0000",
            "A\u{fdd0} <a@b> 1700000000 +0000",
            "A <a@b\u{fffe}> 1700000000 +0000",
            "A <a@b\u{10ffff}> 1700000000 +0000",
            "A <a@b\u{1fffe}> 1700000000 +0000",
        ] {
            assert!(
                matches!(identity(bad), Err(Error::Invalid(_))),
                "{bad:?} passed"
            );
        }
    }

    #[test]
    fn messages_end_with_one_newline_and_trailers_as_git_writes_them() {
        assert_eq!(message("subject", &[]).expect("m"), "subject\n");
        assert_eq!(message("subject\n\n\n", &[]).expect("m"), "subject\n");
        let trailers = vec![
            ("Signed-off-by".to_owned(), "A <a@b>".to_owned()),
            ("Cordon-Task".to_owned(), "t-1".to_owned()),
        ];
        assert_eq!(
            message("subject\n\nbody\n", &trailers).expect("m"),
            "subject\n\nbody\n\nSigned-off-by: A <a@b>\nCordon-Task: t-1\n"
        );
        for (text, trailers) in [
            ("", vec![]),
            ("\n \n", vec![]),
            ("a\0b", vec![]),
            ("a\u{fdef}", vec![]),
            ("a", vec![("Bad Key".to_owned(), "v".to_owned())]),
            ("a", vec![("Key:".to_owned(), "v".to_owned())]),
            ("a", vec![("Key".to_owned(), "two\nlines".to_owned())]),
            ("a", vec![("Key".to_owned(), "\u{ffff}".to_owned())]),
            ("a", vec![("Key".to_owned(), " ".to_owned())]),
        ] {
            assert!(
                matches!(message(text, &trailers), Err(Error::Invalid(_))),
                "{text:?} {trailers:?}"
            );
        }
    }
}
