//! The commit: base plus exactly the approved manifest, as a git bundle.
//!
//! The inspection runs again in its own container; its manifest's digest must be the approved
//! one, and every change must be one a tree may hold ([`cordon_repo::paths::refusals`]). The content
//! then streams out of that same stopped container (the engine's archive of the one content tar
//! its reader wrote, both task volumes still read-only), each file checked against the blob id
//! the inspection hashed as it is piped into `git fast-import` on the controller-owned scratch
//! copy; `index-pack --strict` checks every object the bundle carries before it is kept.
//! Identities, message and trailers are the caller's, validated; nothing comes from the
//! environment or the repository, so the same inputs give the same commit id.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cordon_contract::audit::{content_bytes, CommitFinding, CommitReason, CONTENT_FILE};
use cordon_contract::tree::LinkSnapshot;

use crate::error::{Error, Result};

use super::{inspect, Task};
use cordon_repo::{build, paths, scratch};

/// The commit's default deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// The bundle is at most this large.
pub const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;
/// New content the scratch copy takes at most (the reader writes no more).
pub use cordon_contract::audit::MAX_CONTENT_BYTES;

/// What to commit.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    /// The declared-link snapshot taken before the run.
    pub snapshot: LinkSnapshot,
    /// The approved manifest's digest.
    pub digest: String,
    pub message: String,
    pub trailers: Vec<(String, String)>,
    /// `Name <email> SECONDS OFFSET`, git's raw form.
    pub author: String,
    pub committer: String,
    /// Where the bundle goes (must not exist).
    pub bundle: PathBuf,
    /// Commit names a Windows or macOS checkout cannot hold (a repository that never leaves
    /// Linux); refused by default (`non-portable`).
    pub allow_non_portable: bool,
}

/// A commit made (or none: `unchanged`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Committed {
    /// The new commit, or base when nothing changed.
    pub head: String,
    pub unchanged: bool,
    /// The bundle's path and size (none when unchanged).
    pub bundle: Option<PathBuf>,
    pub bundle_bytes: u64,
    /// The manifest the commit holds.
    pub digest: String,
    pub ms: u64,
}

/// Commit what the approved manifest holds.
pub(super) async fn commit(
    task: &Task<'_>,
    request: &CommitRequest,
    deadline: Duration,
) -> Result<Committed> {
    let started = Instant::now();
    let until = started + deadline;
    let author = build::identity(&request.author)?;
    let committer = build::identity(&request.committer)?;
    let message = build::message(&request.message, &request.trailers)?;
    if std::fs::symlink_metadata(&request.bundle).is_ok() {
        return Err(Error::Invalid(format!(
            "the bundle path {} exists: it is never overwritten",
            request.bundle.display()
        )));
    }
    let base = task.base().to_owned();
    let ctl = task.controller();
    let rules = paths::Rules {
        allow_non_portable: request.allow_non_portable,
    };
    let approved = request.digest.clone();
    let out = request.bundle.clone();
    inspect::inspect_then(
        task,
        &request.snapshot,
        (deadline, true),
        |container, inspection| async move {
            let manifest = &inspection.manifest;
            tracing::debug!(
                ms = started.elapsed().as_millis() as u64,
                changes = manifest.changes.len(),
                "commit: inspected"
            );
            // The manifest's own refusals: its digest against the approved one, and the path
            // rules over base's tree. With changes to build, they are judged beside the content's
            // archive and import, and the commit command waits for them.
            let judged = async {
                let mut findings = Vec::new();
                if manifest.digest != approved {
                    findings.push(CommitFinding {
                        path: ".".into(),
                        reason: CommitReason::DigestMismatch,
                        detail: format!("approved {approved}, inspected {}", manifest.digest),
                    });
                }
                let base_tree = if manifest.metadata_changed {
                    paths::Base::default()
                } else {
                    let links = paths::needs_link_targets(manifest);
                    scratch::base_for_rules_listed(&inspection.git, &inspection.base_tree, links)
                        .await?
                };
                findings.extend(paths::refusals(manifest, &base_tree, rules));
                if findings.is_empty() {
                    return Ok(());
                }
                findings.sort();
                findings.dedup();
                Err(Error::CommitRefused { findings })
            };
            // The reader wrote no content past the bound: refused from the manifest's sizes.
            let content = content_bytes(&manifest.changes);
            if manifest.changes.is_empty() || content > MAX_CONTENT_BYTES {
                judged.await?;
                if content > MAX_CONTENT_BYTES {
                    return Err(Error::CommitScratchFull(format!(
                        "the new content is {content} bytes, more than {MAX_CONTENT_BYTES}"
                    )));
                }
                return Ok(Committed {
                    head: base.clone(),
                    unchanged: true,
                    bundle: None,
                    bundle_bytes: 0,
                    digest: manifest.digest.clone(),
                    ms: started.elapsed().as_millis() as u64,
                });
            }
            let container = container
                .ok_or_else(|| Error::Internal("no reader container to read from".into()))?;
            let spec = build::Spec {
                base: base.clone(),
                changes: manifest.changes.clone(),
                author,
                committer,
                message,
                reference: build::REF.to_owned(),
            };
            let left = until.saturating_duration_since(Instant::now());
            let (imported, _) = build_from_archive(
                ctl.engine(),
                &container,
                &inspection,
                (spec, &inspection.base_tree),
                (MAX_CONTENT_BYTES, left),
                OnSpecial::Refuse,
                judged,
            )
            .await?;
            tracing::debug!(ms = started.elapsed().as_millis() as u64, "commit: built");
            let head = imported.head;
            let bytes = build::fsck_and_bundle(
                &inspection.git,
                (&base, &head),
                imported.pack.as_deref(),
                &manifest.changes,
                &out,
                MAX_BUNDLE_BYTES,
            )
            .await?;
            Ok(Committed {
                head,
                unchanged: false,
                bundle: Some(out),
                bundle_bytes: bytes,
                digest: manifest.digest.clone(),
                ms: started.elapsed().as_millis() as u64,
            })
        },
    )
    .await
}

/// What [`build_from_archive`] does with a `.gitmodules` or `.gitattributes` git's fsck would
/// refuse ([`cordon_repo::special`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSpecial {
    /// Refuse the build before anything is imported (the commit).
    Refuse,
    /// Build anyway and return the findings (the diff export shows them as notices).
    Report,
}

/// Build `spec` on the inspection's scratch copy from the content tar the inspection's reader
/// wrote ([`CONTENT_FILE`], archived out of its stopped `container`): each file checked against
/// the manifest's blob id as it streams, through a pipe, into `git fast-import`, while `judged`
/// (the caller's own refusals of the manifest) runs beside it. The commit command and the
/// stream's `done` follow only once every blob matched, `judged` passed and the special files
/// were checked; a refusal before that closes the pipe on a stream that ends early, which
/// fast-import imports nothing from and names no commit for. `judged`'s refusal is the answer
/// whatever the stream found. What fast-import made (the commit `spec.reference` then names, and
/// its pack when that holds every tree and commit: [`build::Imported`]), and the special files'
/// findings (none, with [`OnSpecial::Refuse`]).
pub async fn build_from_archive(
    engine: &crate::engine::Engine,
    container: &str,
    inspection: &inspect::Inspection,
    (spec, base_listed): (build::Spec, &std::sync::Arc<Vec<scratch::TreeEntry>>),
    (max_bytes, deadline): (u64, Duration),
    on_special: OnSpecial,
    judged: impl std::future::Future<Output = Result<()>>,
) -> Result<(build::Imported, Vec<CommitFinding>)> {
    // Base's blobs by path, for a hard link to a file base holds unchanged: made at the first
    // such link (131,072 entries took 25 ms, before the archive could start).
    let base_listed = base_listed.clone();
    let blobs = std::cell::OnceCell::<std::collections::HashMap<String, String>>::new();
    let base_blob = move |path: &str| {
        blobs
            .get_or_init(|| {
                base_listed
                    .iter()
                    .filter(|e| e.kind == "blob")
                    .map(|e| (e.path.clone(), e.id.clone()))
                    .collect()
            })
            .get(path)
            .cloned()
    };
    let (stream_from, stream_to) =
        std::io::pipe().map_err(|e| Error::io("a pipe for the fast-import stream", e))?;
    let reference = spec.reference.clone();
    let special_paths = cordon_repo::special::paths_of(&spec.changes);
    let importing = build::import_from(
        &inspection.git,
        cordon_repo::git::Input::Pipe(stream_from),
        &reference,
    );
    let writing = async {
        let streamed = super::reader::with_archive(
            engine,
            container,
            CONTENT_FILE,
            deadline,
            move |archive| {
                let mut out = std::io::BufWriter::with_capacity(256 * 1024, stream_to);
                let mut outer = tar::Archive::new(archive);
                let content = the_content_tar(&mut outer)?;
                let contents =
                    build::stream_changes(content, &spec.changes, base_blob, &mut out, max_bytes)?;
                let stream_to = out
                    .into_inner()
                    .map_err(|e| Error::io("writing the fast-import stream", e.into_error()))?;
                Ok((contents, stream_to, spec))
            },
        );
        let (written, judged) = tokio::join!(streamed, judged);
        judged?;
        let (contents, stream_to, spec) = written?;
        let findings = cordon_repo::special::findings(
            &inspection.git,
            inspection.scratch.root(),
            &special_paths,
            &contents.special,
        )
        .await?;
        if on_special == OnSpecial::Refuse && !findings.is_empty() {
            return Err(Error::CommitRefused { findings });
        }
        tokio::task::spawn_blocking(move || build::write_commit(stream_to, &spec, &contents))
            .await
            .map_err(|e| Error::Internal(format!("the stream's commit: {e}")))??;
        Ok(findings)
    };
    let (imported, written) = tokio::join!(importing, writing);
    match (written, imported) {
        (Ok(findings), Ok(imported)) => Ok((imported, findings)),
        (Ok(_), Err(e)) => Err(e.into()),
        // The writer found fast-import gone: fast-import's failure is the reason.
        (Err(Error::Io { source, .. }), Err(e))
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            Err(e.into())
        }
        // The writer's refusal or failure is why fast-import saw its stream end early.
        (Err(e), _) => Err(e),
    }
}

/// The engine's archive of [`CONTENT_FILE`] holds one entry: that file, regular, no larger than
/// the content bound allows with a header for each change (the reader wrote it; the bytes are
/// checked blob by blob as they stream).
fn the_content_tar<'a, R: std::io::Read>(
    outer: &'a mut tar::Archive<R>,
) -> Result<tar::Entry<'a, R>> {
    let reading = |e: std::io::Error| Error::io("reading the archive of the content tar", e);
    let entry = outer
        .entries()
        .map_err(reading)?
        .next()
        .ok_or_else(|| Error::TreeReader("it wrote no content tar".into()))?
        .map_err(reading)?;
    let name = entry.path_bytes().into_owned();
    let expected = CONTENT_FILE.rsplit('/').next().unwrap_or_default();
    if entry.header().entry_type() != tar::EntryType::Regular || name != expected.as_bytes() {
        return Err(Error::TreeReader(format!(
            "the archive of its content tar holds {:?} ({:?}), not the file it writes",
            String::from_utf8_lossy(&name),
            entry.header().entry_type()
        )));
    }
    let bound = MAX_CONTENT_BYTES
        + (cordon_contract::audit::MAX_CHANGES as u64 + 2) * CONTENT_ENTRY_OVERHEAD;
    if entry.size() > bound {
        return Err(Error::TreeReader(format!(
            "its content tar is {} bytes, more than {bound}",
            entry.size()
        )));
    }
    Ok(entry)
}

/// A content tar entry's bytes besides its content, at most: its header, a GNU long-name and a
/// long-link record (each a header and at most 4 KiB of name), and padding.
const CONTENT_ENTRY_OVERHEAD: u64 = 512 * 6 + 2 * 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// An engine archive of one entry: `name`, of `kind`, holding `data`.
    fn outer(name: &str, kind: tar::EntryType, data: &[u8]) -> Vec<u8> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        let mut builder = tar::Builder::new(Vec::new());
        builder
            .append_data(&mut header, name, data)
            .expect("an entry");
        builder.into_inner().expect("the archive")
    }

    /// A header alone, claiming `size` bytes of `content.tar` (none follow).
    fn claiming(size: u64) -> Vec<u8> {
        let mut header = tar::Header::new_gnu();
        header.set_path("content.tar").expect("a name");
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(size);
        header.set_mode(0o600);
        header.set_cksum();
        header.as_bytes().to_vec()
    }

    #[test]
    fn only_the_one_content_tar_within_its_bound_is_read() {
        let inner = b"the inner tar".to_vec();
        let good = outer("content.tar", tar::EntryType::Regular, &inner);
        let mut archive = tar::Archive::new(&good[..]);
        let mut entry = the_content_tar(&mut archive).expect("the content tar");
        let mut read = Vec::new();
        entry.read_to_end(&mut read).expect("read");
        assert_eq!(read, inner);

        let bound = MAX_CONTENT_BYTES
            + (cordon_contract::audit::MAX_CHANGES as u64 + 2) * CONTENT_ENTRY_OVERHEAD;
        for (name, archive) in [
            (
                "another name",
                outer("other.tar", tar::EntryType::Regular, b""),
            ),
            ("a link", outer("content.tar", tar::EntryType::Symlink, b"")),
            (
                "a directory",
                outer("content.tar", tar::EntryType::Directory, b""),
            ),
            ("over the bound", claiming(bound + 1)),
            ("nothing", vec![0u8; 1024]),
        ] {
            let mut reading = tar::Archive::new(&archive[..]);
            match the_content_tar(&mut reading) {
                Err(e) => assert_eq!(e.id(), "tree-reader-failed", "{name}: {e}"),
                Ok(_) => panic!("{name}: taken for the content tar"),
            }
        }
        // At the bound exactly, the header is taken (its bytes are read as they stream).
        let at = claiming(bound);
        assert!(the_content_tar(&mut tar::Archive::new(&at[..])).is_ok());
    }
}
