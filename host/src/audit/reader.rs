//! One run of the tree reader: cordon-init's `tree` role in a tool container over both task
//! volumes, read-only, with no network and a helper's hardening; its one JSON document parsed
//! with limits. The call settles only after the container is gone.

use std::time::Duration;

use cordon_contract::paths;
use cordon_contract::report::EXIT_INIT_FAILURE;
use cordon_contract::tree::{ReaderFailure, MAX_REPORT_BYTES, ROLE};

use crate::engine::objects;
use crate::engine::pending::{Created, Shared};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::launch::volumes::reader_body;
use crate::launch::Launch;
use crate::task::StorageHandle;

/// The reader's default deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// The metadata digest the seeder recorded, which every read compares with (a recovered handle
/// carries it only when the caller set the one it recorded).
pub(super) fn baseline(handle: &StorageHandle) -> Result<&str> {
    handle.metadata_baseline.as_deref().ok_or_else(|| {
        Error::Invalid(
            "the storage handle carries no metadata baseline (a recovered handle: set the one \
             recorded at prepare)"
                .into(),
        )
    })
}

/// Run `cordon-init tree <args>` over `handle`'s storage and parse what it printed as `T`.
pub(super) async fn read<T: serde::de::DeserializeOwned>(
    engine: &Engine,
    image_id: &str,
    handle: &StorageHandle,
    args: Vec<String>,
    deadline: Duration,
) -> Result<T> {
    let storage = handle.storage()?;
    let mounts = vec![
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
    let mut entrypoint = vec![paths::INIT.to_owned(), ROLE.to_owned()];
    entrypoint.extend(args);
    let body = reader_body(image_id, &storage.allocation, entrypoint, mounts);
    let mut created = Created::default();
    let record = Shared::new(&mut created);
    let result = async {
        let id =
            objects::create_container(engine, &crate::labels::tool_name(), body, &record).await?;
        let mut run = Launch::adopt(id);
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
        parse(code, &output.raw.stdout, output.truncated, &output.stderr)
    }
    .await;
    created.remove_all(engine, Duration::from_secs(30)).await?;
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
