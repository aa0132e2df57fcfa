//! One run of the tree reader: cordon-init's `tree` role in a tool container over both task
//! volumes, read-only, with no network and a helper's hardening; its one JSON document parsed
//! with limits. The call settles only after the container is gone.

use std::time::Duration;

use cordon_contract::audit::CONTENT_DIR;
use cordon_contract::paths;
use cordon_contract::report::EXIT_INIT_FAILURE;
use cordon_contract::tree::{ReaderFailure, MAX_REPORT_BYTES, ROLE};

use crate::engine::objects;
use crate::engine::pending::{Created, Shared};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::launch::Launch;
use crate::profile::reader_body;
use crate::profile::VolumeSpec;
use crate::task::StorageHandle;

/// The reader's default deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// The reader's create body: `cordon-init tree <args>` over both of `handle`'s volumes,
/// read-only, and the scratch volume `content` (if any) writable at [`CONTENT_DIR`].
fn body(
    image_id: &str,
    handle: &StorageHandle,
    args: Vec<String>,
    content: Option<&VolumeSpec>,
) -> Result<bollard::models::ContainerCreateBody> {
    let storage = handle.storage()?;
    let mut mounts = vec![
        crate::profile::volume_mount(
            &storage.volume_spec(&storage.work_volume),
            paths::WORK,
            true,
            None,
        ),
        crate::profile::volume_mount(
            &storage.volume_spec(&storage.metadata_volume),
            paths::METADATA,
            true,
            None,
        ),
    ];
    if let Some(spec) = content {
        let mut mount = crate::profile::volume_mount(spec, CONTENT_DIR, false, None);
        // The one volume cordon lets the engine copy up: the image's /var/tmp (sticky,
        // world-writable) gives the fresh volume's root a mode the reader's uid can write to.
        if let Some(options) = mount.volume_options.as_mut() {
            options.no_copy = Some(false);
        }
        mounts.push(mount);
    }
    let mut entrypoint = vec![paths::INIT.to_owned(), ROLE.to_owned()];
    entrypoint.extend(args);
    Ok(reader_body(
        image_id,
        &storage.allocation,
        entrypoint,
        mounts,
    ))
}

/// The scratch volume a content reader of `handle`'s storage writes its tar on: plain local
/// storage, made fresh for one reader and removed with it (a tmpfs volume would be gone once the
/// reader stops, before the host archives it). The reader bounds what it writes
/// ([`cordon_contract::audit::MAX_CONTENT_BYTES`] of content).
fn content_volume(handle: &StorageHandle) -> Result<VolumeSpec> {
    let storage = handle.storage()?;
    Ok(VolumeSpec {
        name: crate::labels::tool_name(),
        labels: storage.allocation.labels(crate::labels::Kind::Tool),
        options: Default::default(),
    })
}

/// The archive of `path` (under /work) of `handle`'s storage, read by `consume` from a reader
/// container that is created and never started: the volumes by the handle's names, never a
/// container the handle names.
pub(super) async fn archive_of<T, F>(
    engine: &Engine,
    image_id: &str,
    handle: &StorageHandle,
    path: &str,
    deadline: Duration,
    consume: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn std::io::Read) -> Result<T> + Send + 'static,
{
    let body = body(image_id, handle, vec![], None)?;
    let mut created = Created::default();
    let record = Shared::new(&mut created);
    let result = async {
        let id =
            objects::create_container(engine, &crate::labels::tool_name(), body, &record).await?;
        with_archive(engine, &id, path, deadline, consume).await
    }
    .await;
    created.remove_all(engine, Duration::from_secs(30)).await?;
    result
}

/// Stream the archive (a tar) of `path` in container `id` into `consume`, which runs on a
/// blocking thread and reads it synchronously; bounded by `deadline` (past it the stream ends
/// early, so the consumer sees a cut archive, and the call fails with the deadline). The engine
/// writes links as links and reads nothing through them.
pub(crate) async fn with_archive<T, F>(
    engine: &Engine,
    id: &str,
    path: &str,
    deadline: Duration,
    consume: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn std::io::Read) -> Result<T> + Send + 'static,
{
    use futures_util::StreamExt;
    let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
        .path(path)
        .build();
    let (chunks, received) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(16);
    let work = tokio::task::spawn_blocking(move || {
        let mut reader = Chunks {
            received,
            current: bytes::Bytes::new(),
        };
        consume(&mut reader)
    });
    let mut stream = engine.docker().download_from_container(id, Some(options));
    let started = std::time::Instant::now();
    let until = tokio::time::Instant::now() + deadline;
    let mut late = false;
    let mut bytes = 0usize;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Err(_) => {
                late = true;
                break;
            }
            Ok(None) => break,
            Ok(Some(chunk)) => {
                if bytes == 0 {
                    let ms = started.elapsed().as_millis() as u64;
                    tracing::debug!(path, ms, "archive: first bytes");
                }
                bytes += chunk.as_ref().map_or(0, bytes::Bytes::len);
                let chunk = chunk.map_err(std::io::Error::other);
                let failed = chunk.is_err();
                // The consumer stopped early (it refused what it read): nothing more to send.
                if chunks.send(chunk).await.is_err() || failed {
                    break;
                }
            }
        }
    }
    drop(chunks);
    drop(stream);
    let ms = started.elapsed().as_millis() as u64;
    tracing::debug!(path, ms, bytes, "archive: streamed");
    let result = work
        .await
        .map_err(|e| Error::Internal(format!("the archive reader: {e}")))?;
    if late {
        return Err(Error::Deadline(format!("reading the archive of {path}")));
    }
    result
}

/// A synchronous reader over the chunks the engine sends.
struct Chunks {
    received: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.received.blocking_recv() {
                None => return Ok(0),
                Some(chunk) => self.current = chunk?,
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Run `cordon-init tree <args>` over `handle`'s storage and parse what it printed as `T`.
pub(super) async fn read<T: serde::de::DeserializeOwned>(
    engine: &Engine,
    image_id: &str,
    handle: &StorageHandle,
    args: Vec<String>,
    deadline: Duration,
) -> Result<T> {
    read_then(
        engine,
        image_id,
        handle,
        (args, false),
        deadline,
        |_, answer| async { Ok(answer) },
    )
    .await
}

/// As [`read`], then `then` with the stopped container's id and the answer, before the
/// container is removed: the commit streams its content out of the very container whose reads
/// it commits. With `content`, the reader also has a fresh scratch volume writable at
/// [`CONTENT_DIR`] (removed with it), for `inspect-content`'s tar.
pub(super) async fn read_then<T, U, F, Fut>(
    engine: &Engine,
    image_id: &str,
    handle: &StorageHandle,
    (args, content): (Vec<String>, bool),
    deadline: Duration,
    then: F,
) -> Result<U>
where
    T: serde::de::DeserializeOwned,
    F: FnOnce(String, T) -> Fut,
    Fut: std::future::Future<Output = Result<U>>,
{
    let scratch = content.then(|| content_volume(handle)).transpose()?;
    let body = body(image_id, handle, args, scratch.as_ref())?;
    let mut created = Created::default();
    let record = Shared::new(&mut created);
    let result = async {
        if let Some(spec) = &scratch {
            objects::create_volume(engine, spec.request(), &record).await?;
        }
        let id =
            objects::create_container(engine, &crate::labels::tool_name(), body, &record).await?;
        let mut run = Launch::adopt(id.clone());
        run.start(engine).await?;
        let code = match run.wait(engine, deadline).await {
            Ok(code) => code,
            Err(Error::Timeout { .. }) => {
                return Err(Error::Deadline(format!(
                    "the tree reader ({} s)",
                    deadline.as_secs()
                )))
            }
            Err(e) => return Err(e),
        };
        // One byte over the bound shows a report that is too long.
        let output = run.log_output(engine, MAX_REPORT_BYTES + 1).await?;
        let answer = parse(code, &output.raw.stdout, output.truncated, &output.stderr)?;
        then(id, answer).await
    }
    .await;
    let started = std::time::Instant::now();
    created.remove_all(engine, Duration::from_secs(30)).await?;
    let ms = started.elapsed().as_millis() as u64;
    tracing::debug!(ms, "reader: removed");
    result
}

/// The reader's answer: its document on exit 0, its own failure on the init's failure code,
/// anything else (a kill, a truncated or malformed document) a failure with what it showed.
fn parse<T: serde::de::DeserializeOwned>(
    code: i64,
    stdout: &[u8],
    truncated: bool,
    stderr: &str,
) -> Result<T> {
    let shown = |s: &str| s.chars().take(300).collect::<String>();
    if truncated || stdout.len() > MAX_REPORT_BYTES {
        return Err(Error::TreeReader(format!(
            "its report is over {MAX_REPORT_BYTES} bytes"
        )));
    }
    match code {
        0 => serde_json::from_slice(stdout).map_err(|e| {
            Error::TreeReader(format!(
                "its report is not what the contract says ({e}): {}",
                shown(&String::from_utf8_lossy(stdout))
            ))
        }),
        _ if code == i64::from(EXIT_INIT_FAILURE) => {
            match serde_json::from_slice::<ReaderFailure>(stdout) {
                Ok(failure) => Err(Error::TreeReader(shown(&failure.failure))),
                Err(_) => Err(Error::TreeReader(format!("exit {code}: {}", shown(stderr)))),
            }
        }
        _ => Err(Error::TreeReader(format!("exit {code}: {}", shown(stderr)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::tree::CheckReport;

    #[test]
    fn only_a_whole_document_on_exit_zero_is_an_answer() {
        let good = br#"{"head":null,"metadata_digest":"sha256:1","entries":0,"gitlinks":[],"findings":[],"more":0}"#;
        assert!(parse::<CheckReport>(0, good, false, "").is_ok());
        for (code, out, truncated) in [
            (0, &good[..20], false),
            (0, &good[..], true),
            (0, &br#"{"head":null,"extra":1}"#[..], false),
            (
                i64::from(EXIT_INIT_FAILURE),
                &br#"{"failure":"x"}"#[..],
                false,
            ),
            (i64::from(EXIT_INIT_FAILURE), &b"garbage"[..], false),
            (137, &good[..], false),
        ] {
            let e = parse::<CheckReport>(code, out, truncated, "stderr").unwrap_err();
            assert_eq!(e.id(), "tree-reader-failed", "{code} {truncated}");
        }
        let big = vec![b' '; MAX_REPORT_BYTES + 1];
        assert!(parse::<CheckReport>(0, &big, false, "").is_err());
    }
}
