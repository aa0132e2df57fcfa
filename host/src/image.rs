//! The test image: the static in-container binaries (built from a cordon workspace, or carried by
//! the caller), assembled into a build context here, and built FROM scratch by the engine's
//! classic builder. The tag is the digest of the context, so unchanged binaries reuse the image.
//! Nothing here draws: progress goes to the caller's callback.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use cordon_contract::{paths, static_build};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::archive::Archive;
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};

pub mod agent;
pub mod elf;
pub mod pinned;
pub mod toolchain;

pub use cordon_contract::static_build::{PROFILE, TARGET};
/// The test image's repository name.
pub const REPOSITORY: &str = "cordon-test";

/// A built (or reused) image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BuiltImage {
    pub tag: String,
    pub id: String,
    pub size_bytes: i64,
    pub reused: bool,
    pub binaries: Vec<(String, u64)>,
    pub build_ms: u128,
}

/// The source tree this library was compiled from (the tests build the binaries from it; an
/// installed `cordon` carries its own, see [`BinarySource::Embedded`]).
pub fn default_workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The largest in-container binary read back from the build (each is about 2 MiB).
pub const MAX_BINARY_BYTES: usize = 64 * 1024 * 1024;

/// The in-container binaries by the name cargo gives them: what every [`BinarySource`] provides.
pub const BINARY_NAMES: [&str; 6] = cordon_contract::static_build::BINARIES;

/// Where the in-container binaries come from.
#[derive(Clone)]
pub enum BinarySource {
    /// Built with cargo from this cordon source tree (into its `target/static`).
    Workspace(PathBuf),
    /// Carried by the caller, by name ([`BINARY_NAMES`]): an installed `cordon` embeds them, so
    /// it needs no source tree.
    Embedded(&'static [(&'static str, &'static [u8])]),
}

// By hand: the derived form would print every embedded byte.
impl std::fmt::Debug for BinarySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BinarySource::Workspace(dir) => f.debug_tuple("Workspace").field(dir).finish(),
            BinarySource::Embedded(list) => f
                .debug_tuple("Embedded")
                .field(&list.iter().map(|(n, d)| (n, d.len())).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// Which binaries go where.
const BINARIES: &[(&str, &str)] = &[
    ("cordon-init", paths::INIT),
    ("cordon-mcp", cordon_contract::command::MCP_SERVER),
    ("cordon-probe", paths::PROBE),
    ("cordon-egress", crate::profile::egress::PROXY_BINARY),
    ("fake-vendor", crate::profile::egress::FAKE_VENDOR_BINARY),
    ("claude", paths::CLAUDE_CLI),
    // The fake vendor CLI also stands in for Codex (whose profile the probes exercise).
    ("claude", paths::CODEX_CLI),
];

/// Build the static binaries with glibc `+crt-static` and an explicit `--target` (proc macros
/// and build scripts then build for the host without the flag).
pub async fn build_static_binaries(workspace: &Path, quiet: bool) -> Result<PathBuf> {
    let target_dir = static_build::TARGET_DIR
        .iter()
        .fold(workspace.to_path_buf(), |dir, part| dir.join(part));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = tokio::process::Command::new(cargo);
    command
        .current_dir(workspace)
        .args([
            "build",
            "--locked",
            "--profile",
            PROFILE,
            "--target",
            TARGET,
        ])
        .args(static_build::PACKAGES.iter().flat_map(|p| ["-p", p]))
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", static_build::RUSTFLAGS)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        // A cancelled build (an invocation stopped while building its image) stops cargo too.
        .kill_on_drop(true);
    if quiet {
        command.arg("--quiet");
    }
    let output = command
        .output()
        .await
        .map_err(|e| Error::io("running cargo for the static binaries", e))?;
    if !output.status.success() {
        return Err(Error::Build(format!(
            "cargo build of the static binaries failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(target_dir.join(TARGET).join(PROFILE))
}

/// Refuse anything but a static-pie ELF: no interpreter, position independent.
pub fn check_static_pie(path: &Path, bytes: &[u8]) -> Result<()> {
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    let elf = ElfFile64::<object::Endianness>::parse(bytes)
        .map_err(|e| Error::Build(format!("{}: not an ELF64 file: {e}", path.display())))?;
    let endian = elf.endian();
    let header = elf.elf_header();
    let pie = header.e_type(endian) == object::elf::ET_DYN;
    let interp = elf
        .elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP);
    if !pie || interp {
        return Err(Error::Build(format!(
            "{} is not static-pie (position independent: {pie}, interpreter: {interp})",
            path.display()
        )));
    }
    Ok(())
}

/// The build context: a Dockerfile and the image's root tree, deterministic (sorted, mtime 0,
/// root-owned), so equal inputs give an equal digest.
pub fn context(binaries: &[(&str, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut context = Archive::in_memory(0, "the image build context");
    let dockerfile = format!(
        "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"{}\"]\n",
        paths::INIT
    );
    context.file("Dockerfile", 0o644, dockerfile.as_bytes())?;
    let dirs: &[(&str, u32)] = &[
        ("rootfs/", 0o755),
        ("rootfs/home/", 0o755),
        ("rootfs/home/agent/", 0o755),
        ("rootfs/run/", 0o755),
        ("rootfs/run/cordon/", 0o755),
        ("rootfs/sbin/", 0o755),
        ("rootfs/tmp/", 0o1777),
        ("rootfs/usr/", 0o755),
        ("rootfs/usr/bin/", 0o755),
        // World-writable on the read-only root, as in most real images: the probes show that
        // only the read-only root stops a write here.
        ("rootfs/var/", 0o755),
        ("rootfs/var/tmp/", 0o1777),
        ("rootfs/work/", 0o755),
    ];
    for (dir, mode) in dirs {
        context.dir(dir, *mode)?;
    }
    let mut files: Vec<(String, &[u8])> = BINARIES
        .iter()
        .filter_map(|(name, dest)| {
            binaries
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, data)| (format!("rootfs{dest}"), data.as_slice()))
        })
        .collect();
    files.sort();
    for (path, data) in files {
        context.file(&path, 0o755, data)?;
    }
    context.finish()
}

/// The tag for a context.
pub fn tag_for(context: &[u8]) -> String {
    format!(
        "{REPOSITORY}:{}",
        &hex::encode(Sha256::digest(context))[..16]
    )
}

/// The in-container binaries from `source`, each checked to be static-pie.
async fn binaries(
    source: &BinarySource,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<(&'static str, Vec<u8>)>> {
    static_binaries(source, &BINARY_NAMES, progress).await
}

/// The in-container binaries of `names` (of [`BINARY_NAMES`]) from `source`, in that order, each
/// checked to be static-pie (a workspace source builds them all, and reads only these).
pub(crate) async fn static_binaries(
    source: &BinarySource,
    names: &[&'static str],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut binaries = Vec::new();
    match source {
        BinarySource::Workspace(workspace) => {
            progress("building the static in-container binaries");
            let dir = build_static_binaries(workspace, true).await?;
            for &name in names {
                let path = dir.join(name);
                // The workspace is the caller's: its build products are read with the same rules.
                let from = path.clone();
                let data = tokio::task::spawn_blocking(move || {
                    crate::caller_file::read("built binary", &from, MAX_BINARY_BYTES)
                })
                .await
                .map_err(|e| Error::Build(format!("reading {}: {e}", path.display())))??;
                check_static_pie(&path, &data)?;
                binaries.push((name, data));
            }
        }
        BinarySource::Embedded(list) => {
            for &name in names {
                let Some((_, data)) = list.iter().find(|(n, _)| *n == name) else {
                    return Err(Error::Build(format!(
                        "the embedded in-container binaries lack {name} (they hold: {})",
                        list.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    )));
                };
                check_static_pie(Path::new(&format!("embedded {name}")), data)?;
                binaries.push((name, data.to_vec()));
            }
        }
    }
    Ok(binaries)
}

/// Whether an image tagged `tag` exists: only "no such image" is `false`, any other engine error
/// stops here.
pub(crate) async fn image_exists(engine: &Engine, tag: &str) -> Result<bool> {
    match bounded(
        "inspect image",
        CALL_TIMEOUT,
        engine.docker().inspect_image(tag),
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(e) if crate::engine::objects::not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// How every cordon image is built: the classic builder, without its cache, tagged `tag`.
pub(crate) fn build_options(tag: &str) -> BuildImageOptions {
    BuildImageOptions {
        dockerfile: "Dockerfile".to_owned(),
        t: Some(tag.to_owned()),
        rm: true,
        forcerm: true,
        // The classic builder's cache can be poisoned for FROM scratch builds
        // (CVE-2024-24557, unfixed before 23.x): never use it.
        nocache: true,
        version: BuilderVersion::BuilderV1,
        ..Default::default()
    }
}

/// Follow a build to its end: each line the builder prints goes to `progress`, its error is
/// [`Error::Build`], and no more than `step` may pass between two of its messages.
pub(crate) async fn drain_build<S>(
    mut stream: S,
    step: std::time::Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<()>
where
    S: futures_util::Stream<Item = Result<bollard::models::BuildInfo, bollard::errors::Error>>
        + Unpin,
{
    while let Some(item) = tokio::time::timeout(step, stream.next())
        .await
        .map_err(|_| Error::Timeout {
            context: "image build".into(),
            after: step,
        })?
    {
        let info = item.map_err(|source| Error::Docker {
            context: "image build".into(),
            source,
        })?;
        if let Some(detail) = info.error_detail.and_then(|d| d.message) {
            return Err(Error::Build(detail));
        }
        if let Some(line) = info.stream.as_deref() {
            let line = line.trim();
            if !line.is_empty() {
                progress(line);
            }
        }
    }
    Ok(())
}

/// Build the test image from this workspace's static binaries (or reuse it), and report its size.
pub async fn build_test_image(engine: &Engine, workspace: &Path) -> Result<BuiltImage> {
    build_image(
        engine,
        &BinarySource::Workspace(workspace.to_path_buf()),
        &|_| {},
    )
    .await
}

/// Build the test image from `source`'s binaries (or reuse it), and report its size. `progress`
/// hears each step and each line the engine's builder prints.
pub async fn build_image(
    engine: &Engine,
    source: &BinarySource,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<BuiltImage> {
    let started = Instant::now();
    let binaries = binaries(source, progress).await?;
    let ctx = context(&binaries)?;
    let tag = tag_for(&ctx);
    let sizes = binaries
        .iter()
        .map(|(n, d)| ((*n).to_owned(), d.len() as u64))
        .collect();
    let reused = image_exists(engine, &tag).await?;
    if !reused {
        progress(&format!("building {tag} (classic builder, FROM scratch)"));
        let stream = engine.docker().build_image(
            build_options(&tag),
            None,
            Some(bollard::body_full(ctx.into())),
        );
        drain_build(stream, CALL_TIMEOUT, progress).await?;
    }
    let inspect = bounded(
        "inspect image",
        CALL_TIMEOUT,
        engine.docker().inspect_image(&tag),
    )
    .await?;
    Ok(BuiltImage {
        tag,
        id: inspect.id.unwrap_or_default(),
        size_bytes: inspect.size.unwrap_or_default(),
        reused,
        binaries: sizes,
        build_ms: started.elapsed().as_millis(),
    })
}

/// A directory for a test of the image modules, removed when the test ends, however it ends.
#[cfg(test)]
pub(crate) struct TestDir(pub(crate) PathBuf);

#[cfg(test)]
impl TestDir {
    #[allow(clippy::unwrap_used)]
    pub(crate) fn new(name: &str) -> TestDir {
        let dir =
            std::env::temp_dir().join(format!("cordon-image-{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        TestDir(dir)
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file's identity as the kernel keeps it: device, inode, size, and its modification and
/// change times to the nanosecond. Any write moves the change time, which only the kernel sets.
pub(crate) fn identity(file: &std::fs::File, what: &Path) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = file
        .metadata()
        .map_err(|e| Error::io(format!("fstat {}", what.display()), e))?;
    Ok(format!(
        "{}:{} {} {}.{} {}.{}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_deterministic() {
        let bins = vec![
            ("cordon-init", vec![1u8; 10]),
            ("cordon-probe", vec![2u8; 10]),
            ("claude", vec![3u8; 10]),
        ];
        let a = context(&bins).unwrap();
        let b = context(&bins).unwrap();
        assert_eq!(a, b);
        assert_eq!(tag_for(&a), tag_for(&b));
        let other = vec![
            ("cordon-init", vec![9u8; 10]),
            ("cordon-probe", vec![2u8; 10]),
            ("claude", vec![3u8; 10]),
        ];
        assert_ne!(tag_for(&a), tag_for(&context(&other).unwrap()));
    }

    #[tokio::test]
    async fn embedded_binaries_are_checked_and_a_missing_one_is_named() {
        let none = binaries(&BinarySource::Embedded(&[]), &|_| {}).await;
        let Err(Error::Build(why)) = none else {
            panic!("{none:?}")
        };
        assert!(why.contains("lack cordon-init"), "{why}");
        let script = binaries(
            &BinarySource::Embedded(&[("cordon-init", b"#!/bin/sh\n")]),
            &|_| {},
        )
        .await;
        let Err(Error::Build(why)) = script else {
            panic!("{script:?}")
        };
        assert!(why.contains("embedded cordon-init"), "{why}");
    }

    #[test]
    fn non_elf_is_refused() {
        assert!(check_static_pie(Path::new("x"), b"#!/bin/sh\n").is_err());
    }

    #[test]
    fn dynamic_binary_is_refused() {
        // The test runner itself is a dynamically linked PIE: it has an interpreter.
        let me = std::env::current_exe().unwrap();
        let data = std::fs::read(&me).unwrap();
        assert!(check_static_pie(&me, &data).is_err());
    }
}
