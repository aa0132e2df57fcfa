//! Seeding: the checkout and the metadata as tar streams built here (the allocation's uid; regular files,
//! directories and links only), uploaded into the running keeper. Nothing is buffered whole: file
//! contents stream from the staged copy's loose objects (read and checked here) or from
//! `git cat-file --batch` (the packed ones) through a bounded channel into the upload.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use bollard::query_parameters::UploadToContainerOptions;
use bytes::Bytes;
use cordon_contract::paths;
use futures_util::StreamExt;

use cordon_repo::loose::LooseBlobs;
use cordon_repo::verify::{Format, Mismatch};

use super::clone::Staged;
use super::tree::{Entry, Kind};
use super::Unusable;
use crate::archive::Archive;
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::storage::TaskStorage;

/// Chunks in flight between the tar builder and the upload (16 x 256 KiB).
const CHUNK: usize = 256 * 1024;
const IN_FLIGHT: usize = 16;

/// A `Write` that hands full chunks to the async side.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    buffer: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped reading"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

fn os_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Write the checkout: directories, files, links, gitlinks as empty directories. A blob that is
/// loose in the staged copy is read here ([`cordon_repo::loose`]: opened once, checked against
/// its name); the rest come from one `cat-file --batch`, asked for in the checkout's order (it
/// runs only when a blob is packed).
fn write_work(staged: &StagedTree, out: ChannelWriter) -> Result<()> {
    let StagedTree {
        git,
        format,
        entries,
        links,
        uid,
    } = staged;
    let mut archive = Archive::new(out, *uid, "the work tree tar");
    let files = || {
        entries.iter().filter_map(|e| match e.kind {
            Kind::File { .. } => Some(e.oid.as_str()),
            _ => None,
        })
    };
    let loose = LooseBlobs::list(&git.git_dir, *format, files())
        .map_err(|e| Error::io("listing the staged loose objects", e))?;
    let packed: Vec<String> = files()
        .filter(|oid| !loose.contains(oid))
        .map(str::to_owned)
        .collect();
    tracing::debug!(
        loose = loose.len(),
        packed = packed.len(),
        "the checkout's blobs"
    );
    let mut cat_file = if packed.is_empty() {
        None
    } else {
        Some(CatFile::start(git, packed)?)
    };
    let tar_err = |e: io::Error| Error::io("writing the work tree tar", e);
    for entry in entries {
        let path = os_path(&entry.path);
        match &entry.kind {
            Kind::Dir | Kind::Gitlink => archive.dir(path, 0o755)?,
            Kind::Link => {
                let target = links
                    .get(&entry.path)
                    .ok_or_else(|| Error::Internal("link without a target".into()))?;
                archive.symlink(path, os_path(target))?;
            }
            Kind::File { executable, size } => {
                let mode = if *executable { 0o755 } else { 0o644 };
                if loose.contains(&entry.oid) {
                    let corrupt = |reason: &Mismatch| {
                        Error::Unusable(Unusable::CorruptObject {
                            object: entry.oid.clone(),
                            path: String::from_utf8_lossy(&entry.path).into_owned(),
                            reason: reason.to_string(),
                        })
                    };
                    let mut blob = loose.open(&entry.oid, *size).map_err(|m| corrupt(&m))?;
                    let written = archive.file_from(path, mode, *size, &mut blob);
                    if let Some(reason) = blob.failure() {
                        return Err(corrupt(reason));
                    }
                    written?;
                    if !blob.verified() {
                        return Err(Error::Internal(format!(
                            "the loose blob {} was not read to its end",
                            entry.oid
                        )));
                    }
                } else {
                    let blobs = cat_file
                        .as_mut()
                        .ok_or_else(|| Error::Internal("a packed blob without cat-file".into()))?;
                    blobs.next_header(&entry.oid, *size)?;
                    archive.file_from(path, mode, *size, &mut blobs.out)?;
                    let mut newline = [0u8; 1];
                    blobs.out.read_exact(&mut newline).map_err(tar_err)?;
                }
            }
        }
    }
    drop(cat_file);
    archive.finish().map(drop)
}

/// What the checkout is written from.
struct StagedTree {
    git: cordon_repo::git::Git,
    format: Format,
    entries: Vec<Entry>,
    links: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    uid: u32,
}

/// `git cat-file --batch --buffer` in the staged copy, asked for `oids` in order by a thread of
/// its own (which ends when git has read them all, or is gone). Dropped, git is killed and
/// reaped: on a refusal part way it is not left running.
struct CatFile {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

/// The longest answer line cat-file writes for a blob (`<oid> blob <size>`): more is a stream
/// out of step, not an id.
const MAX_CAT_FILE_LINE: u64 = 256;

impl CatFile {
    fn start(git: &cordon_repo::git::Git, oids: Vec<String>) -> Result<CatFile> {
        let mut child = git
            .command()
            .into_std()
            .args(["cat-file", "--batch", "--buffer"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| Error::io("running git cat-file", e))?;
        let mut requests = child
            .stdin
            .take()
            .ok_or_else(|| Error::Internal("cat-file stdin".into()))?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("cat-file stdout".into()))?;
        std::thread::spawn(move || {
            for oid in oids {
                if writeln!(requests, "{oid}").is_err() {
                    break;
                }
            }
        });
        Ok(CatFile {
            child,
            out: BufReader::with_capacity(CHUNK, out),
        })
    }

    /// The next answer's header line: it must be `oid`, a blob of `size` bytes.
    fn next_header(&mut self, oid: &str, size: u64) -> Result<()> {
        let mut line = String::new();
        (&mut self.out)
            .take(MAX_CAT_FILE_LINE)
            .read_line(&mut line)
            .map_err(|e| Error::io("reading git cat-file", e))?;
        let mut fields = line.split_whitespace();
        let (named, kind, reported) = (fields.next(), fields.next(), fields.next());
        let reported: Option<u64> = reported.and_then(|s| s.parse().ok());
        if named != Some(oid) || kind != Some("blob") || reported != Some(size) {
            return Err(Error::Git {
                context: "cat-file".into(),
                message: format!("answered {line:?} for the blob {oid} of {size} bytes"),
            });
        }
        Ok(())
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write the metadata: HEAD (the head, detached), a minimal config of ours, the copied objects and
/// refs, and an index of the head's tree.
fn write_metadata(
    repo: &Path,
    head: &str,
    index: &Path,
    uid: u32,
    out: ChannelWriter,
) -> Result<()> {
    let mut archive = Archive::new(out, uid, "the metadata tar");
    let tar_err = |e: io::Error| Error::io("writing the metadata tar", e);
    let config = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n";
    for (name, content) in [("HEAD", format!("{head}\n")), ("config", config.to_owned())] {
        archive.file(name, 0o644, content.as_bytes())?;
    }
    let index_len = std::fs::metadata(index).map_err(tar_err)?.len();
    let index_file = std::fs::File::open(index).map_err(tar_err)?;
    archive.file_from("index", 0o644, index_len, index_file)?;
    let mut stack = vec![PathBuf::from("objects"), PathBuf::from("refs")];
    if repo.join("packed-refs").is_file() {
        let len = std::fs::metadata(repo.join("packed-refs"))
            .map_err(tar_err)?
            .len();
        let packed = std::fs::File::open(repo.join("packed-refs")).map_err(tar_err)?;
        archive.file_from("packed-refs", 0o644, len, packed)?;
    }
    while let Some(rel) = stack.pop() {
        archive.dir(&rel, 0o755)?;
        let mut names: Vec<_> = std::fs::read_dir(repo.join(&rel))
            .map_err(tar_err)?
            .flatten()
            .collect();
        names.sort_by_key(std::fs::DirEntry::file_name);
        for entry in names {
            let meta = std::fs::symlink_metadata(entry.path()).map_err(tar_err)?;
            let child = rel.join(entry.file_name());
            if meta.is_dir() {
                stack.push(child);
            } else if meta.is_file() {
                let file = std::fs::File::open(entry.path()).map_err(tar_err)?;
                archive.file_from(&child, 0o444, meta.len(), file)?;
            }
        }
    }
    archive.finish().map(drop)
}

/// Run a blocking tar writer and upload what it writes into the keeper at `dir`.
async fn upload_stream<F>(engine: &Engine, storage: &TaskStorage, dir: &str, write: F) -> Result<()>
where
    F: FnOnce(ChannelWriter) -> Result<()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    let writer = tokio::task::spawn_blocking(move || {
        let out = ChannelWriter {
            tx: tx.clone(),
            buffer: Vec::with_capacity(CHUNK),
        };
        let result = write(out);
        // The upload already gone: the writer failed because nobody reads (the upload's error
        // says why). Otherwise the writer's failure is the cause, and it ends the upload.
        let upload_gone = tx.is_closed();
        if let Err(e) = &result {
            let _ = tx.blocking_send(Err(io::Error::other(e.to_string())));
        }
        (result, upload_gone)
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed();
    let options = UploadToContainerOptions {
        path: dir.to_owned(),
        ..Default::default()
    };
    let uploaded = bounded(
        "upload into task storage",
        CALL_TIMEOUT * 10,
        engine.docker().upload_to_container(
            &storage.keeper,
            Some(options),
            bollard::body_try_stream(body),
        ),
    )
    .await;
    let (written, upload_gone) = writer
        .await
        .map_err(|e| Error::Internal(format!("tar writer: {e}")))?;
    match (uploaded, written) {
        (Err(Error::Docker { source, .. }), _)
            if source.to_string().contains("no space left on device") =>
        {
            Err(Error::Overflow(format!("{dir}: {source}")))
        }
        (_, Err(e)) if !upload_gone => Err(e),
        (Err(e), _) => Err(e),
        (Ok(()), written) => written,
    }
}

/// Upload the staged checkout into /work and the metadata into /work/.git of the keeper.
pub async fn upload(engine: &Engine, storage: &TaskStorage, staged: &Staged) -> Result<()> {
    // The two go to different mounts of the keeper: upload them side by side.
    let t = std::time::Instant::now();
    tokio::try_join!(
        upload_work(engine, storage, staged),
        upload_metadata(engine, storage, staged)
    )?;
    tracing::debug!(
        ms = t.elapsed().as_millis() as u64,
        "uploaded the checkout and metadata"
    );
    Ok(())
}

/// The checkout, streamed from the staged objects into /work.
pub async fn upload_work(engine: &Engine, storage: &TaskStorage, staged: &Staged) -> Result<()> {
    let tree = StagedTree {
        git: staged.git.clone(),
        format: staged.format,
        entries: staged.entries.clone(),
        links: staged.links.clone(),
        uid: storage.allocation.uid.get(),
    };
    upload_stream(engine, storage, paths::WORK, move |out| {
        write_work(&tree, out)
    })
    .await
}

/// The metadata (with an index of the head's tree) into /work/.git.
pub async fn upload_metadata(
    engine: &Engine,
    storage: &TaskStorage,
    staged: &Staged,
) -> Result<()> {
    let index = staged.dir.path().join("index");
    let mut read_tree = staged.git.command();
    read_tree
        .env("GIT_INDEX_FILE", &index)
        .args(["read-tree", &staged.head]);
    let status = read_tree
        .status()
        .await
        .map_err(|e| Error::io("git read-tree", e))?;
    if !status.success() {
        return Err(Error::Git {
            context: "read-tree".into(),
            message: status.to_string(),
        });
    }
    let repo = staged.git.git_dir.clone();
    let head = staged.head.clone();
    let uid = storage.allocation.uid.get();
    upload_stream(engine, storage, paths::METADATA, move |out| {
        write_metadata(&repo, &head, &index, uid, out)
    })
    .await
}

/// The benchmark's baseline: a plain tar of a directory on disk (links as links, the same
/// ownership), streamed into /work the same way.
pub async fn upload_plain_dir(engine: &Engine, storage: &TaskStorage, dir: &Path) -> Result<()> {
    let dir = dir.to_path_buf();
    let storage_uid = storage.allocation.uid.get();
    upload_stream(engine, storage, paths::WORK, move |out| {
        let mut archive = Archive::new(out, storage_uid, "the baseline tar");
        let listing = std::fs::read_dir(&dir).map_err(|e| Error::io("baseline tar", e))?;
        for entry in listing.flatten() {
            let name = entry.file_name();
            if name != ".git" {
                archive.host_tree(&name, &entry.path())?;
            }
        }
        archive.finish().map(drop)
    })
    .await
}
