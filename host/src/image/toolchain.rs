//! A toolchain image for approved commands: a runner's local image with cordon's static init
//! added at [`paths::INIT`] as the entrypoint, derived without a pull, tagged by the digest of
//! what it was made of (the source image's id and the init's bytes), and the check that an argv's
//! program is in it.
//!
//! The runner's image is the runner's choice and is trusted as a toolchain, never as a boundary:
//! the command container built from it gets the agent's hardening whatever the image says
//! (entrypoint, user, working directory and limits come from the create request; its `ENV` is
//! read back and reported with the image).

use bollard::query_parameters::ContainerArchiveInfoOptions;
use cordon_contract::paths;
use sha2::{Digest, Sha256};

use crate::archive::Archive;
use crate::engine::{bounded, objects, pending, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::{self, Allocation, Kind};

/// The derived images' repository name.
pub const REPOSITORY: &str = "cordon-toolchain";
/// How long one derivation may go without a message from the builder.
const BUILD_STEP: std::time::Duration = std::time::Duration::from_secs(120);

/// A derived toolchain image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Toolchain {
    /// The image the runner named, as named.
    pub source: String,
    /// Its id when derived.
    pub source_id: String,
    pub tag: String,
    pub id: String,
    /// The source image's own environment (`NAME=value`), which every command of it gets
    /// before its own entries.
    pub env: Vec<String>,
    /// An image with this tag existed already.
    pub reused: bool,
}

fn refused(image: &str, reason: impl Into<String>) -> Error {
    Error::CommandImage {
        image: image.to_owned(),
        reason: reason.into(),
    }
}

/// The build context: the source image by id, the init as a root-owned 0555 file.
fn context(source_id: &str, init: &[u8]) -> Result<Vec<u8>> {
    let mut context = Archive::in_memory(0, "the toolchain image's build context");
    let dockerfile = format!(
        "FROM {source_id}\nCOPY rootfs/ /\nENTRYPOINT [\"{}\"]\nCMD []\n",
        paths::INIT
    );
    context.file("Dockerfile", 0o644, dockerfile.as_bytes())?;
    context.dir("rootfs/", 0o755)?;
    context.dir("rootfs/sbin/", 0o755)?;
    context.file(format!("rootfs{}", paths::INIT), 0o555, init)?;
    context.finish()
}

/// The tag of a context: its digest, so an image of this tag holds exactly these inputs.
fn tag_for(context: &[u8]) -> String {
    format!(
        "{REPOSITORY}:{}",
        &hex::encode(Sha256::digest(context))[..32]
    )
}

/// The id and environment of a local image; `None` when the engine has no such image.
async fn local(engine: &Engine, image: &str) -> Result<Option<(String, Vec<String>)>> {
    match bounded(
        "inspect image",
        CALL_TIMEOUT,
        engine.docker().inspect_image(image),
    )
    .await
    {
        Ok(inspect) => Ok(Some((
            inspect.id.unwrap_or_default(),
            inspect.config.and_then(|c| c.env).unwrap_or_default(),
        ))),
        Err(e) if objects::not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Derive (or find) the toolchain image of `source`, a local image: never pulled. `init` is
/// cordon's static init, checked static-pie.
pub async fn derive(
    engine: &Engine,
    source: &str,
    init: &[u8],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Toolchain> {
    if source.is_empty() || source.len() > 256 || source.chars().any(char::is_control) {
        return Err(refused(source, "not an image name"));
    }
    super::check_static_pie(std::path::Path::new("cordon-init"), init)?;
    let Some((source_id, env)) = local(engine, source).await? else {
        return Err(refused(
            source,
            "no such local image (cordon never pulls one)",
        ));
    };
    if !source_id.starts_with("sha256:") {
        return Err(refused(
            source,
            format!("the engine gave the id {source_id:?}"),
        ));
    }
    let ctx = context(&source_id, init)?;
    let tag = tag_for(&ctx);
    let reused = local(engine, &tag).await?.is_some();
    if !reused {
        progress(&format!("deriving {tag} from {source} ({source_id})"));
        // The classic builder resolves FROM by id from the local store; no pull is asked for.
        let stream = engine.docker().build_image(
            super::build_options(&tag),
            None,
            Some(bollard::body_full(ctx.into())),
        );
        super::drain_build(stream, BUILD_STEP, progress).await?;
    }
    let Some((id, _)) = local(engine, &tag).await? else {
        return Err(Error::Build(format!("{tag} is gone right after its build")));
    };
    Ok(Toolchain {
        source: source.to_owned(),
        source_id,
        tag,
        id,
        env,
        reused,
    })
}

/// Go's `os.FileMode` bits the engine reports a path's type with.
const MODE_DIR: u32 = 1 << 31;
const MODE_SYMLINK: u32 = 1 << 27;
const MODE_TYPE: u32 = MODE_DIR
    | MODE_SYMLINK
    | (1 << 26) // device
    | (1 << 25) // named pipe
    | (1 << 24) // socket
    | (1 << 21) // character device
    | (1 << 19); // irregular

/// What a path in an image is, as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stat {
    Missing,
    Link(String),
    File {
        mode: u32,
    },
    Other {
        mode: u32,
    },
    /// The engine could not resolve its links.
    Unresolved(String),
}

async fn stat(engine: &Engine, container: &str, path: &str) -> Result<Stat> {
    let options = ContainerArchiveInfoOptions {
        path: path.to_owned(),
    };
    match bounded(
        "stat a path in a toolchain image",
        CALL_TIMEOUT,
        engine
            .docker()
            .get_container_archive_info(container, Some(options)),
    )
    .await
    {
        Ok(found) => {
            // Go's FileMode, as the engine gives it.
            let mode = found.file_mode;
            if mode & MODE_SYMLINK != 0 {
                Ok(Stat::Link(found.link_target))
            } else if mode & MODE_TYPE == 0 {
                Ok(Stat::File { mode })
            } else {
                Ok(Stat::Other { mode })
            }
        }
        Err(e) if objects::not_found(&e) => Ok(Stat::Missing),
        // The engine resolves a link itself and answers 500 for one it cannot (a loop, too many
        // hops): the path names no program either way.
        Err(Error::Docker {
            source:
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 500,
                    message,
                },
            ..
        }) => Ok(Stat::Unresolved(message)),
        Err(e) => Err(e),
    }
}

/// The file `path` names in the image after its links (the engine resolves the parents'; each
/// link of the last component is followed here, at most [`paths::MAX_LINK_HOPS`]), which must be
/// a regular file with an execute bit.
async fn resolve_program(
    engine: &Engine,
    container: &str,
    image: &str,
    path: &str,
) -> Result<String> {
    let mut at = path.to_owned();
    for _ in 0..=paths::MAX_LINK_HOPS {
        match stat(engine, container, &at).await? {
            Stat::Missing => {
                return Err(refused(image, format!("{path}: no such file ({at})")));
            }
            Stat::File { mode } if mode & 0o111 != 0 => return Ok(at),
            Stat::File { mode } => {
                return Err(refused(
                    image,
                    format!("{path}: {at} is not executable (mode {:o})", mode & 0o7777),
                ));
            }
            Stat::Other { mode } => {
                return Err(refused(
                    image,
                    format!("{path}: {at} is not a regular file (mode {mode:#x})"),
                ));
            }
            Stat::Unresolved(why) => {
                return Err(refused(
                    image,
                    format!("{path}: its links do not resolve ({at}: {why:?})"),
                ));
            }
            Stat::Link(target) => {
                // The engine gives the target resolved against the container's root.
                if !cordon_contract::policy::is_clean_absolute(&target) {
                    return Err(refused(image, format!("{path}: {at} links to {target:?}")));
                }
                at = target;
            }
        }
    }
    Err(refused(
        image,
        format!("{path}: more than {} links", paths::MAX_LINK_HOPS),
    ))
}

/// Check that each of `programs` is an executable regular file in `toolchain` (after links), in
/// a container of `allocation` created for the look and never started. Returns each program's
/// resolved path. The container is removed before this returns, however it returns.
pub async fn check_programs(
    engine: &Engine,
    toolchain: &Toolchain,
    allocation: &Allocation,
    programs: &[&str],
) -> Result<Vec<String>> {
    let mut created = pending::Created::default();
    let checked = look(engine, toolchain, allocation, programs, &mut created).await;
    let removed = created.remove_all(engine, CALL_TIMEOUT).await;
    let resolved = checked?;
    removed?;
    Ok(resolved)
}

async fn look(
    engine: &Engine,
    toolchain: &Toolchain,
    allocation: &Allocation,
    programs: &[&str],
    created: &mut pending::Created,
) -> Result<Vec<String>> {
    let body = crate::profile::helper_body(
        &toolchain.id,
        allocation,
        Kind::Tool,
        vec![paths::INIT.to_owned()],
        Vec::new(),
    );
    let name = labels::tool_name();
    let record = created.shared();
    let container = objects::create_container(engine, &name, body, &record).await?;
    let mut resolved = Vec::with_capacity(programs.len());
    for program in programs {
        if !cordon_contract::policy::is_clean_absolute(program) {
            return Err(refused(
                &toolchain.source,
                format!("{program:?} is not a clean absolute path"),
            ));
        }
        resolved.push(resolve_program(engine, &container, &toolchain.source, program).await?);
    }
    Ok(resolved)
}

/// The largest init read out of an image.
const MAX_INIT_BYTES: u64 = 32 * 1024 * 1024;

/// The static init the image `image_id` (the agent's) carries at [`paths::INIT`], read from a
/// container of `allocation` created for the read and never started: the command images get
/// exactly the init the agent runs. It must be one regular file within [`MAX_INIT_BYTES`].
pub async fn init_of(engine: &Engine, image_id: &str, allocation: &Allocation) -> Result<Vec<u8>> {
    let body = crate::profile::helper_body(
        image_id,
        allocation,
        Kind::Tool,
        vec![paths::INIT.to_owned()],
        Vec::new(),
    );
    let mut created = pending::Created::default();
    let record = created.shared();
    let read = async {
        let container =
            objects::create_container(engine, &labels::tool_name(), body, &record).await?;
        crate::audit::reader::with_archive(engine, &container, paths::INIT, CALL_TIMEOUT, |tar| {
            read_init(tar)
        })
        .await
    }
    .await;
    let removed = created.remove_all(engine, CALL_TIMEOUT).await;
    let init = read?;
    removed?;
    Ok(init)
}

/// The one regular file of an archive of [`paths::INIT`].
fn read_init(tar: &mut dyn std::io::Read) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let bad = |why: String| Error::Build(format!("the agent image's {}: {why}", paths::INIT));
    let mut archive = tar::Archive::new(tar);
    let mut entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    let mut entry = match entries.next() {
        Some(entry) => entry.map_err(|e| bad(e.to_string()))?,
        None => return Err(bad("an empty archive".into())),
    };
    let size = entry.header().size().map_err(|e| bad(e.to_string()))?;
    if entry.header().entry_type() != tar::EntryType::Regular || size > MAX_INIT_BYTES {
        return Err(bad(format!(
            "not a regular file of at most {MAX_INIT_BYTES} bytes"
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    entry
        .by_ref()
        .take(MAX_INIT_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_follows_the_source_id_and_the_init() {
        let a = context("sha256:aa", b"init").unwrap();
        assert_eq!(
            tag_for(&a),
            tag_for(&context("sha256:aa", b"init").unwrap())
        );
        assert_ne!(
            tag_for(&a),
            tag_for(&context("sha256:bb", b"init").unwrap())
        );
        assert_ne!(
            tag_for(&a),
            tag_for(&context("sha256:aa", b"other").unwrap())
        );
        assert!(tag_for(&a).starts_with("cordon-toolchain:"));
    }

    #[test]
    fn the_init_is_read_as_one_bounded_regular_file() {
        let mut tar = Archive::in_memory(0, "test");
        tar.file("cordon-init", 0o555, b"\x7fELF init").unwrap();
        let bytes = tar.finish().unwrap();
        assert_eq!(read_init(&mut bytes.as_slice()).unwrap(), b"\x7fELF init");
        let mut link = Archive::in_memory(0, "test");
        link.symlink("cordon-init", "/bin/sh").unwrap();
        let bytes = link.finish().unwrap();
        assert!(read_init(&mut bytes.as_slice()).is_err());
        assert!(read_init(&mut [0u8; 1024].as_slice()).is_err());
    }
}
