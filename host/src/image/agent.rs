//! The production agent image: FROM scratch, holding the vendor CLI, what its dynamic linking
//! needs (its interpreter and the closure of its libraries, copied from the host as regular
//! files), a CA bundle, and cordon's own static binaries. Nothing else: no shell, no directory at
//! any of the profile's tmpfs mountpoints (or their parents), so what the engine mounts there is
//! exactly what the profile says. The image's contents are the real exec allowlist (the ELF
//! loader can map any readable dynamic binary), so this is the whole of it: the CLI and its
//! interpreter are the only executables the agent's policy needs.
//!
//! The build context (about 400 MB with the real CLI) is never held in memory: it is written,
//! and hashed as it is written, into a temporary file (`cordon-agent-context-<uuid>` in the
//! temporary directory, removed whatever happens). The tag is `cordon-agent:<first 16 hex of its
//! sha256>`; when an image has that tag already it is reused and the context is not sent,
//! otherwise the file is streamed to the engine's classic builder.
//!
//! Finding an image built before costs no read of the CLI: its recipe (the layout, each host
//! file's and the CLI's identity as the kernel keeps it, the CA bundle's and cordon's binaries'
//! digests) names a second tag, `cordon-agent:recipe-<16 hex of the recipe>-<16 hex of the
//! context's digest>-<the CLI's sha256>`, put only on the image its context's tag names, right
//! after the context was hashed. An image carries no label (the engine would copy it into every
//! container's labels, which the validator holds to the profile's). A recipe tag on an image that
//! does not also carry the context tag it names is not trusted: the context is written and hashed
//! as before.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_contract::paths;
use sha2::{Digest, Sha256};

use super::elf::{self, Closure};
use super::{BinarySource, BuiltImage};
use crate::archive::Archive;
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, InputFault, Result};

/// The agent image's repository name.
pub const REPOSITORY: &str = "cordon-agent";
/// Where the CA bundle is in the image (and, by default, on the host).
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Where every library of the closure is in the image (the host loader's first default dir).
pub const LIB_DIR: &str = "/lib/x86_64-linux-gnu";
/// The largest CLI accepted (the pinned one is 402 MB).
pub const MAX_CLI_BYTES: u64 = 1 << 30;
/// The largest CA bundle accepted (Debian's is about 220 KB).
pub const MAX_CA_BUNDLE_BYTES: u64 = 16 << 20;
/// The largest library or interpreter copied (libc is about 2 MB).
pub const MAX_LIBRARY_BYTES: u64 = 256 << 20;
/// The longest the engine may be silent during a build: uploading the context and committing a
/// 400 MB layer take longer than one ordinary engine call.
pub const BUILD_STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// Every tmpfs mountpoint of an agent profile. The engine gives a tmpfs mounted over a directory
/// the image has that directory's mode and owner, so the image has none of these, nothing under
/// them, and none of their parents (`/home`, `/run`, `/run/cordon`).
pub const TMPFS_MOUNTPOINTS: [&str; 9] = [
    paths::WORK,
    paths::METADATA,
    paths::TMP,
    paths::HOME,
    paths::CODEX_HOME,
    paths::OUTPUT_DIR,
    paths::CONTROL_DIR,
    paths::INPUT_DIR,
    paths::EGRESS_DIR,
];
/// What the runtime mounts itself: nothing of the image goes there either.
pub const RUNTIME_MOUNTPOINTS: [&str; 3] = ["/dev", "/proc", "/sys"];

/// cordon's static binaries in the agent image: (cargo name, path in the image).
const STATIC_BINARIES: [(&str, &str); 4] = [
    ("cordon-init", paths::INIT),
    // The MCP server of approved commands: on the exec allowlist only when a request has some.
    ("cordon-mcp", cordon_contract::command::MCP_SERVER),
    ("cordon-probe", paths::PROBE),
    ("cordon-egress", crate::profile::egress::PROXY_BINARY),
];

/// The same Dockerfile as the test image's: no `USER` (the profile sets the user; the init drops
/// to the agent's uid) and no `WORKDIR` (it would make `/work` in the image).
const DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/sbin/cordon-init\"]\n";

/// What the agent image is built from.
#[derive(Debug, Clone)]
pub struct AgentImageSpec {
    /// The vendor CLI on the host (for example [`super::pinned::fetch`]'s answer): a regular
    /// file, not a link, an x86-64 dynamically linked ELF executable of at most
    /// [`MAX_CLI_BYTES`].
    pub cli: PathBuf,
    /// cordon's static binaries.
    pub binaries: BinarySource,
    /// The CA bundle to install (default: the host's [`CA_BUNDLE`]).
    pub ca_bundle: PathBuf,
    /// Where the CLI's libraries are looked for, in order (default: [`elf::default_lib_dirs`]).
    pub lib_dirs: Vec<PathBuf>,
    /// The mode of cordon's static binaries in the image ([`STATIC_MODE`]; a readable mode is
    /// only for the test that shows what it would let run).
    pub static_mode: u32,
}

/// cordon's static binaries are executable but not readable by the agent: the ELF interpreter
/// is on the agent's exec allowlist (the kernel opens it for execution with the CLI), and
/// `ld-linux-x86-64.so.2 FILE` runs any ELF it can read and map, static ones included (measured:
/// `ld.so cordon-probe workload exit 0` exits 0). The kernel runs a static binary it cannot read
/// for whoever may execute it; the loader cannot open one.
pub const STATIC_MODE: u32 = 0o711;

impl AgentImageSpec {
    /// The CLI at `cli`, cordon's binaries from `binaries`, the host's CA bundle and libraries.
    pub fn new(cli: PathBuf, binaries: BinarySource) -> AgentImageSpec {
        AgentImageSpec {
            cli,
            binaries,
            ca_bundle: PathBuf::from(CA_BUNDLE),
            lib_dirs: elf::default_lib_dirs(),
            static_mode: STATIC_MODE,
        }
    }
}

/// A built (or reused) agent image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgentImage {
    /// The tag, id, size and build time (`binaries`: cordon's static binaries and `claude`, by
    /// name, with their sizes).
    pub built: BuiltImage,
    /// The sha256 of the CLI in the image (hex).
    pub cli_sha256: String,
    /// What the agent may execute: the CLI's path in the image, then its interpreter's.
    pub exec: Vec<String>,
    /// Every file in the image with its size, by path.
    pub files: Vec<(String, u64)>,
}

/// Where a file's content comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The CLI (the descriptor opened and checked from [`AgentImageSpec::cli`]).
    Cli,
    /// A host file: the interpreter or a library (links followed: the host's own).
    Host(PathBuf),
    /// The CA bundle (read and checked).
    CaBundle,
    /// One of cordon's static binaries, by cargo name.
    Static(&'static str),
}

/// One entry of the image's tree: every one is a directory or a regular file, owned by root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        source: Source,
    },
}

impl Entry {
    /// Its absolute path in the image.
    pub fn path(&self) -> &str {
        match self {
            Entry::Dir { path, .. } | Entry::File { path, .. } => path,
        }
    }

    pub fn mode(&self) -> u32 {
        match self {
            Entry::Dir { mode, .. } | Entry::File { mode, .. } => *mode,
        }
    }
}

/// `path` is `base` or beneath it.
fn at_or_under(path: &str, base: &str) -> bool {
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Refuse a place in the image where nothing may be: at or under a tmpfs or runtime mountpoint,
/// or a parent of a tmpfs mountpoint.
fn check_place(path: &str) -> Result<()> {
    for mount in TMPFS_MOUNTPOINTS.iter().chain(RUNTIME_MOUNTPOINTS.iter()) {
        if at_or_under(path, mount) {
            return Err(Error::Build(format!(
                "the agent image cannot hold {path}: it is at or under the mountpoint {mount}"
            )));
        }
    }
    if path != "/" {
        if let Some(mount) = TMPFS_MOUNTPOINTS.iter().find(|m| at_or_under(m, path)) {
            return Err(Error::Build(format!(
                "the agent image cannot hold {path}: it is a parent of the mountpoint {mount}"
            )));
        }
    }
    Ok(())
}

/// The image's tree for a CLI of `closure`, sorted by path (each directory before what it
/// holds): the CLI (0755) at [`paths::CLAUDE_CLI`], its interpreter (0755) at its `PT_INTERP`
/// path, each library at [`LIB_DIR`]`/<soname>` (0644: mapped by the loader, never executed),
/// the CA bundle (0644), cordon's static binaries (`static_mode`: [`STATIC_MODE`]), and the
/// directories these need (0755).
pub fn layout(closure: &Closure, static_mode: u32) -> Result<Vec<Entry>> {
    let Some(interpreter) = &closure.interpreter else {
        return Err(Error::Build(
            "the CLI has no interpreter: the agent image is for a dynamically linked CLI".into(),
        ));
    };
    let file = |path: &str, mode: u32, source: Source| Entry::File {
        path: path.to_owned(),
        mode,
        source,
    };
    let mut files = vec![
        file(paths::CLAUDE_CLI, 0o755, Source::Cli),
        file(interpreter, 0o755, Source::Host(PathBuf::from(interpreter))),
        file(CA_BUNDLE, 0o644, Source::CaBundle),
    ];
    for library in &closure.libraries {
        files.push(file(
            &format!("{LIB_DIR}/{}", library.soname),
            0o644,
            Source::Host(library.host_path.clone()),
        ));
    }
    for (name, path) in STATIC_BINARIES {
        files.push(file(path, static_mode, Source::Static(name)));
    }
    let mut entries = vec![Entry::Dir {
        path: "/".into(),
        mode: 0o755,
    }];
    let mut seen = std::collections::BTreeSet::new();
    for entry in &files {
        let path = entry.path();
        check_place(path)?;
        if !seen.insert(path.to_owned()) {
            return Err(Error::Build(format!(
                "two files of the agent image at {path}"
            )));
        }
        // Every parent but the root.
        for dir in Path::new(path).ancestors().skip(1) {
            if dir == Path::new("/") {
                break;
            }
            let dir = dir.to_string_lossy().into_owned();
            check_place(&dir)?;
            if !entries.iter().any(|e| e.path() == dir) {
                entries.push(Entry::Dir {
                    path: dir,
                    mode: 0o755,
                });
            }
        }
    }
    for entry in &entries {
        if seen.contains(entry.path()) {
            return Err(Error::Build(format!(
                "the agent image needs {} as a file and as a directory",
                entry.path()
            )));
        }
    }
    entries.extend(files);
    entries.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(entries)
}

/// What the context is written from: checked, and open where that matters.
#[derive(Debug)]
struct Inputs {
    entries: Vec<Entry>,
    /// The CLI's interpreter (its path in the image and on the host).
    interpreter: String,
    /// The CLI as opened and checked (it is read through this descriptor, never reopened).
    cli: File,
    cli_len: u64,
    ca: Vec<u8>,
    binaries: Vec<(&'static str, Vec<u8>)>,
}

/// What writing the context found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    /// The context's sha256 (hex).
    digest: String,
    cli_sha256: String,
    files: Vec<(String, u64)>,
}

/// A writer that hashes what it passes on.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader of exactly `left` more bytes, hashing them: ending early is an error (the file
/// changed while it was read), so the tar never holds a short entry.
struct Exact<R> {
    inner: R,
    left: u64,
    hasher: Sha256,
    what: String,
}

impl<R: Read> Exact<R> {
    fn new(inner: R, size: u64, what: &Path) -> Exact<R> {
        Exact {
            inner,
            left: size,
            hasher: Sha256::new(),
            what: what.display().to_string(),
        }
    }

    fn sha256(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{} ended {} bytes early: it changed while it was read",
                    self.what, self.left
                ),
            ));
        }
        self.left -= n as u64;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Open a host file (links followed: the host's own) without blocking; it must be a regular file
/// of at most `max` bytes. Returns it and its size.
fn open_host(what: &str, path: &Path, max: u64) -> Result<(File, u64)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| Error::io(format!("opening the {what} {}", path.display()), e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("fstat of the {what} {}", path.display()), e))?;
    if !meta.is_file() {
        return Err(Error::Build(format!(
            "the {what} {} is not a regular file",
            path.display()
        )));
    }
    if meta.len() > max {
        return Err(Error::Build(format!(
            "the {what} {} is {} bytes, more than {max}",
            path.display(),
            meta.len()
        )));
    }
    Ok((file, meta.len()))
}

/// The tar path of an image path: `rootfs/...`, a directory with a trailing slash.
fn tar_path(entry: &Entry) -> String {
    match entry {
        Entry::Dir { path, .. } if path == "/" => "rootfs/".to_owned(),
        Entry::Dir { path, .. } => format!("rootfs{path}/"),
        Entry::File { path, .. } => format!("rootfs{path}"),
    }
}

/// Write the build context of `inputs` to `out`: the Dockerfile, then the tree, deterministic
/// (sorted, mtime 0, root-owned), every file a regular file of exactly the size it had when
/// opened.
fn write_context<W: Write>(inputs: &Inputs, out: W) -> Result<(W, Written)> {
    let hashing = Hashing {
        inner: out,
        hasher: Sha256::new(),
    };
    let mut tar = Archive::new(hashing, 0, "the agent image build context");
    tar.file("Dockerfile", 0o644, DOCKERFILE.as_bytes())?;
    let mut cli_sha256 = String::new();
    let mut files = Vec::new();
    for entry in &inputs.entries {
        let name = tar_path(entry);
        let Entry::File { path, mode, source } = entry else {
            tar.dir(&name, entry.mode())?;
            continue;
        };
        let size = match source {
            Source::Cli => {
                let mut cli = &inputs.cli;
                cli.seek(SeekFrom::Start(0))
                    .map_err(|e| Error::io("rewinding the CLI", e))?;
                let mut reader = Exact::new(
                    BufReader::with_capacity(1 << 20, cli),
                    inputs.cli_len,
                    Path::new("the CLI"),
                );
                tar.file_from(&name, *mode, inputs.cli_len, &mut reader)?;
                cli_sha256 = reader.sha256();
                inputs.cli_len
            }
            Source::Host(host) => {
                let (file, size) = open_host("host file", host, MAX_LIBRARY_BYTES)?;
                let mut reader = Exact::new(BufReader::with_capacity(1 << 20, file), size, host);
                tar.file_from(&name, *mode, size, &mut reader)?;
                size
            }
            Source::CaBundle => {
                tar.file(&name, *mode, &inputs.ca)?;
                inputs.ca.len() as u64
            }
            Source::Static(binary) => {
                let Some((_, data)) = inputs.binaries.iter().find(|(n, _)| n == binary) else {
                    return Err(Error::Internal(format!(
                        "the agent image's {binary} was not read"
                    )));
                };
                tar.file(&name, *mode, data)?;
                data.len() as u64
            }
        };
        files.push((path.clone(), size));
    }
    let hashing = tar.finish()?;
    let written = Written {
        digest: hex::encode(hashing.hasher.finalize()),
        cli_sha256,
        files,
    };
    Ok((hashing.inner, written))
}

/// The tag of a context of this digest.
pub fn tag_for_digest(digest: &str) -> String {
    format!("{REPOSITORY}:{}", digest.get(..16).unwrap_or(digest))
}

/// The tag part of a recipe's tag (the repository is [`REPOSITORY`]).
fn recipe_tag_part(recipe: &str) -> String {
    format!("recipe-{}", recipe.get(..16).unwrap_or(recipe))
}

/// The recipe of `inputs` (what names their context without reading the CLI or the libraries:
/// the Dockerfile, every entry's path and mode, the CLI's and each host file's identity, the CA
/// bundle's and cordon's binaries' digests) and every file's size, by path.
fn recipe_of(inputs: &Inputs) -> Result<(String, Vec<(String, u64)>)> {
    let digest = |bytes: &[u8]| hex::encode(Sha256::digest(bytes));
    let mut recipe = Sha256::new();
    recipe.update(b"cordon agent recipe 1\n");
    recipe.update(DOCKERFILE.as_bytes());
    let mut files = Vec::new();
    for entry in &inputs.entries {
        let Entry::File { path, mode, source } = entry else {
            recipe.update(format!("dir {} {:o}\n", entry.path(), entry.mode()));
            continue;
        };
        let (id, size) = match source {
            Source::Cli => (
                super::identity(&inputs.cli, Path::new("the CLI"))?,
                inputs.cli_len,
            ),
            Source::Host(host) => {
                let (file, size) = open_host("host file", host, MAX_LIBRARY_BYTES)?;
                (super::identity(&file, host)?, size)
            }
            Source::CaBundle => (digest(&inputs.ca), inputs.ca.len() as u64),
            Source::Static(binary) => {
                let Some((_, data)) = inputs.binaries.iter().find(|(n, _)| n == binary) else {
                    return Err(Error::Internal(format!(
                        "the agent image's {binary} was not read"
                    )));
                };
                (digest(data), data.len() as u64)
            }
        };
        recipe.update(format!("file {path} {mode:o} {id}\n"));
        files.push((path.clone(), size));
    }
    Ok((hex::encode(recipe.finalize()), files))
}

/// What a recipe's tag found: the image its context's tag names too.
struct Found {
    context_tag: String,
    id: String,
    size_bytes: i64,
    cli_sha256: String,
}

impl Found {
    /// The agent image it is, for `inputs` (their files' sizes `files`), found since `started`.
    fn image(self, inputs: &Inputs, files: Vec<(String, u64)>, started: Instant) -> AgentImage {
        AgentImage {
            built: BuiltImage {
                tag: self.context_tag,
                id: self.id,
                size_bytes: self.size_bytes,
                reused: true,
                binaries: binary_sizes(inputs),
                build_ms: started.elapsed().as_millis(),
            },
            cli_sha256: self.cli_sha256,
            exec: vec![paths::CLAUDE_CLI.to_owned(), inputs.interpreter.clone()],
            files,
        }
    }
}

/// Put the recipe's tag (with the CLI's digest) on the image the context's `tag` names, built or
/// reused just now from the context just written, and take its older recipe tags off (an input
/// that moved leaves one behind: they would only pile up).
async fn tag_recipe(engine: &Engine, tag: &str, written: &Written, recipe: &str) -> Result<()> {
    let context = written.digest.get(..16).unwrap_or(&written.digest);
    let part = format!(
        "{}-{context}-{}",
        recipe_tag_part(recipe),
        written.cli_sha256
    );
    let options = bollard::query_parameters::TagImageOptions {
        repo: Some(REPOSITORY.to_owned()),
        tag: Some(part.clone()),
    };
    bounded(
        "tag image",
        CALL_TIMEOUT,
        engine.docker().tag_image(tag, Some(options)),
    )
    .await?;
    let image = bounded(
        "inspect image",
        CALL_TIMEOUT,
        engine.docker().inspect_image(tag),
    )
    .await?;
    let ours = format!("{REPOSITORY}:{part}");
    let older = format!("{REPOSITORY}:recipe-");
    for stale in image
        .repo_tags
        .unwrap_or_default()
        .into_iter()
        .filter(|t| *t != ours && t.starts_with(&older))
    {
        // Untagging only: the image keeps its context's tag.
        bounded(
            "untag image",
            CALL_TIMEOUT,
            engine.docker().remove_image(
                &stale,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            ),
        )
        .await?;
    }
    Ok(())
}

/// The image a recipe's tag names: one image, holding one such tag, which names the context's
/// tag (16 hex) and the CLI's digest (64 hex), and holding that context tag too. Only
/// [`tag_recipe`] puts a recipe's tag anywhere, after hashing that context.
async fn by_recipe(engine: &Engine, recipe: &str) -> Result<Option<Found>> {
    let prefix = format!("{REPOSITORY}:{}-", recipe_tag_part(recipe));
    let options = bollard::query_parameters::ListImagesOptions {
        filters: Some([("reference".to_owned(), vec![format!("{prefix}*")])].into()),
        ..Default::default()
    };
    let images = bounded(
        "list images",
        CALL_TIMEOUT,
        engine.docker().list_images(Some(options)),
    )
    .await?;
    let [listed] = images.as_slice() else {
        return Ok(None);
    };
    // The listing shows only the tags the filter matched: the image's own are in its inspect.
    let image = bounded(
        "inspect image",
        CALL_TIMEOUT,
        engine.docker().inspect_image(&listed.id),
    )
    .await?;
    let tags = image.repo_tags.unwrap_or_default();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let named: Vec<(&str, &str)> = tags
        .iter()
        .filter_map(|t| t.strip_prefix(&prefix)?.split_once('-'))
        .filter(|(context, cli)| hex(context, 16) && hex(cli, 64))
        .collect();
    let [(context, cli)] = named.as_slice() else {
        return Ok(None);
    };
    let context_tag = format!("{REPOSITORY}:{context}");
    if !tags.contains(&context_tag) {
        return Ok(None);
    }
    Ok(Some(Found {
        context_tag,
        id: listed.id.clone(),
        size_bytes: image.size.unwrap_or(listed.size),
        cli_sha256: (*cli).to_owned(),
    }))
}

/// A file removed when dropped.
#[derive(Debug)]
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Run blocking work off the runtime.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("a file task of the agent image build ended: {e}")))
}

/// Open and check the CLI: a regular file, not through a link, opened without blocking, at most
/// [`MAX_CLI_BYTES`], an ELF64 x86-64 executable with an interpreter; and its closure.
fn open_cli(path: &Path, lib_dirs: &[PathBuf]) -> Result<(File, u64, Closure)> {
    let opened = crate::caller_file::open("agent CLI", path)?;
    let len = opened.len();
    if len > MAX_CLI_BYTES {
        return Err(Error::Input {
            what: "agent CLI",
            path: path.display().to_string(),
            fault: InputFault::TooLarge {
                at_least: len,
                limit: MAX_CLI_BYTES,
            },
        });
    }
    let file = opened.into_file();
    let closure = elf::closure_of(&file, path, lib_dirs)?;
    if closure.interpreter.is_none() {
        return Err(Error::Build(format!(
            "the agent CLI {} is not dynamically linked (no PT_INTERP)",
            path.display()
        )));
    }
    Ok((file, len, closure))
}

/// Read and check the CA bundle: a regular file (links followed: a host file) of at most
/// [`MAX_CA_BUNDLE_BYTES`], PEM text holding at least one certificate.
fn read_ca_bundle(path: &Path) -> Result<Vec<u8>> {
    let (file, _) = open_host("CA bundle", path, MAX_CA_BUNDLE_BYTES)?;
    let mut data = Vec::new();
    file.take(MAX_CA_BUNDLE_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| Error::io(format!("reading the CA bundle {}", path.display()), e))?;
    if data.len() as u64 > MAX_CA_BUNDLE_BYTES {
        return Err(Error::Build(format!(
            "the CA bundle {} grew past {MAX_CA_BUNDLE_BYTES} bytes while it was read",
            path.display()
        )));
    }
    let text = std::str::from_utf8(&data).map_err(|e| {
        Error::Build(format!(
            "the CA bundle {} is not PEM text (not UTF-8 at byte {})",
            path.display(),
            e.valid_up_to()
        ))
    })?;
    if !text.contains("-----BEGIN CERTIFICATE-----") || !text.contains("-----END CERTIFICATE-----")
    {
        return Err(Error::Build(format!(
            "the CA bundle {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(data)
}

/// Everything the context is written from, checked (nothing of the engine yet).
async fn prepare(spec: &AgentImageSpec, progress: &(dyn Fn(&str) + Sync)) -> Result<Inputs> {
    progress(&format!(
        "checking the CLI {} and its libraries",
        spec.cli.display()
    ));
    let (cli_path, lib_dirs, ca_path) = (
        spec.cli.clone(),
        spec.lib_dirs.clone(),
        spec.ca_bundle.clone(),
    );
    let (cli, cli_len, closure, ca) = blocking(move || {
        let (cli, len, closure) = open_cli(&cli_path, &lib_dirs)?;
        let ca = read_ca_bundle(&ca_path)?;
        Ok::<_, Error>((cli, len, closure, ca))
    })
    .await??;
    let entries = layout(&closure, spec.static_mode)?;
    let interpreter = closure.interpreter.unwrap_or_default();
    let names: Vec<&'static str> = STATIC_BINARIES.iter().map(|(n, _)| *n).collect();
    let binaries = super::static_binaries(&spec.binaries, &names, progress).await?;
    Ok(Inputs {
        entries,
        interpreter,
        cli,
        cli_len,
        ca,
        binaries,
    })
}

/// The digest of `spec`'s build context, written to nowhere: what finding an image built before
/// cost before it had a recipe (the benchmark's baseline).
pub async fn context_digest(spec: &AgentImageSpec) -> Result<String> {
    let inputs = prepare(spec, &|_| {}).await?;
    blocking(move || write_context(&inputs, std::io::sink()).map(|(_, written)| written.digest))
        .await?
}

/// Build the agent image of `spec` (or reuse the one of its tag) and report it. `progress` hears
/// each step and each line the engine's builder prints.
pub async fn build_agent_image(
    engine: &Engine,
    spec: &AgentImageSpec,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<AgentImage> {
    let started = Instant::now();
    let inputs = Arc::new(prepare(spec, progress).await?);
    let (recipe, files) = {
        let inputs = Arc::clone(&inputs);
        blocking(move || recipe_of(&inputs)).await??
    };
    if let Some(found) = by_recipe(engine, &recipe).await? {
        let image = found.image(&inputs, files, started);
        progress(&format!(
            "found {} by its recipe ({} ms)",
            image.built.tag, image.built.build_ms
        ));
        return Ok(image);
    }
    // Written (and hashed) once, whether or not it is sent: reading and hashing the CLI is the
    // cost, not the writing.
    let temp = TempFile(
        std::env::temp_dir().join(format!("cordon-agent-context-{}", uuid::Uuid::new_v4())),
    );
    progress(&format!(
        "writing the build context to {}",
        temp.0.display()
    ));
    // Made here, not in the blocking task: once the guard exists, so does the file it removes.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temp.0)
        .map_err(|e| Error::io(format!("creating {}", temp.0.display()), e))?;
    let written = {
        let inputs = Arc::clone(&inputs);
        let path = temp.0.clone();
        blocking(move || {
            let (out, written) = write_context(&inputs, BufWriter::with_capacity(1 << 20, file))?;
            out.into_inner()
                .map_err(|e| Error::io(format!("writing {}", path.display()), e.into_error()))?;
            Ok::<_, Error>(written)
        })
        .await??
    };
    let tag = tag_for_digest(&written.digest);
    let reused = super::image_exists(engine, &tag).await?;
    if !reused {
        progress(&format!("building {tag} (classic builder, FROM scratch)"));
        let context = tokio::fs::File::open(&temp.0)
            .await
            .map_err(|e| Error::io(format!("opening {}", temp.0.display()), e))?;
        // The engine answers only once it has the whole context: the request's own bound must
        // cover the upload.
        let docker = engine.docker().clone().with_timeout(BUILD_STEP_TIMEOUT);
        let stream = docker.build_image(
            super::build_options(&tag),
            None,
            Some(bollard::body_try_stream(file_chunks(context))),
        );
        super::drain_build(stream, BUILD_STEP_TIMEOUT, progress).await?;
    }
    drop(temp);
    let inspect = bounded(
        "inspect image",
        CALL_TIMEOUT,
        engine.docker().inspect_image(&tag),
    )
    .await?;
    tag_recipe(engine, &tag, &written, &recipe).await?;
    let built = BuiltImage {
        tag,
        id: inspect.id.unwrap_or_default(),
        size_bytes: inspect.size.unwrap_or_default(),
        reused,
        binaries: binary_sizes(&inputs),
        build_ms: started.elapsed().as_millis(),
    };
    progress(&format!(
        "{} {} ({} bytes, {} ms)",
        if reused { "reused" } else { "built" },
        built.tag,
        built.size_bytes,
        built.build_ms
    ));
    Ok(AgentImage {
        built,
        cli_sha256: written.cli_sha256,
        exec: vec![paths::CLAUDE_CLI.to_owned(), inputs.interpreter.clone()],
        files: written.files,
    })
}

/// cordon's static binaries and `claude`, by name, with their sizes.
fn binary_sizes(inputs: &Inputs) -> Vec<(String, u64)> {
    let mut binaries: Vec<(String, u64)> = inputs
        .binaries
        .iter()
        .map(|(n, d)| ((*n).to_owned(), d.len() as u64))
        .collect();
    binaries.push(("claude".to_owned(), inputs.cli_len));
    binaries
}

/// A file as a stream of 1 MiB chunks (an error ends it).
fn file_chunks(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures_util::stream::unfold(Some(file), |state| async move {
        use tokio::io::AsyncReadExt;
        let mut file = state?;
        let mut buffer = vec![0u8; 1 << 20];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(n) => {
                buffer.truncate(n);
                Some((Ok(bytes::Bytes::from(buffer)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::image::elf::Library;

    use crate::image::TestDir as TempDir;

    fn fake_closure(interpreter: &str) -> Closure {
        Closure {
            interpreter: Some(interpreter.to_owned()),
            libraries: ["libc.so.6", "libm.so.6", "libpthread.so.0"]
                .into_iter()
                .map(|soname| Library {
                    soname: soname.to_owned(),
                    host_path: PathBuf::from(format!("/host/lib/{soname}")),
                })
                .collect(),
        }
    }

    #[test]
    fn the_layout_is_the_cli_its_loader_libraries_ca_and_cordon_binaries_only() {
        let entries = layout(&fake_closure("/lib64/ld-linux-x86-64.so.2"), STATIC_MODE).unwrap();
        let listed: Vec<(&str, bool, u32)> = entries
            .iter()
            .map(|e| (e.path(), matches!(e, Entry::Dir { .. }), e.mode()))
            .collect();
        assert_eq!(
            listed,
            [
                ("/", true, 0o755),
                ("/etc", true, 0o755),
                ("/etc/ssl", true, 0o755),
                ("/etc/ssl/certs", true, 0o755),
                ("/etc/ssl/certs/ca-certificates.crt", false, 0o644),
                ("/lib", true, 0o755),
                ("/lib/x86_64-linux-gnu", true, 0o755),
                ("/lib/x86_64-linux-gnu/libc.so.6", false, 0o644),
                ("/lib/x86_64-linux-gnu/libm.so.6", false, 0o644),
                ("/lib/x86_64-linux-gnu/libpthread.so.0", false, 0o644),
                ("/lib64", true, 0o755),
                ("/lib64/ld-linux-x86-64.so.2", false, 0o755),
                ("/sbin", true, 0o755),
                ("/sbin/cordon-init", false, 0o711),
                ("/usr", true, 0o755),
                ("/usr/bin", true, 0o755),
                ("/usr/bin/claude", false, 0o755),
                ("/usr/bin/cordon-egress", false, 0o711),
                ("/usr/bin/cordon-mcp", false, 0o711),
                ("/usr/bin/cordon-probe", false, 0o711),
            ]
        );
        let source = |path: &str| match entries.iter().find(|e| e.path() == path) {
            Some(Entry::File { source, .. }) => source.clone(),
            other => panic!("{path}: {other:?}"),
        };
        assert_eq!(source(paths::CLAUDE_CLI), Source::Cli);
        assert_eq!(
            source("/lib64/ld-linux-x86-64.so.2"),
            Source::Host("/lib64/ld-linux-x86-64.so.2".into())
        );
        assert_eq!(
            source("/lib/x86_64-linux-gnu/libm.so.6"),
            Source::Host("/host/lib/libm.so.6".into())
        );
        assert_eq!(source(paths::INIT), Source::Static("cordon-init"));
        assert_eq!(source(CA_BUNDLE), Source::CaBundle);
    }

    #[test]
    fn no_entry_is_at_under_or_above_a_mountpoint() {
        let entries = layout(&fake_closure("/lib64/ld-linux-x86-64.so.2"), STATIC_MODE).unwrap();
        for entry in &entries {
            let path = entry.path();
            for mount in TMPFS_MOUNTPOINTS {
                assert!(!at_or_under(path, mount), "{path} at or under {mount}");
                assert!(
                    path == "/" || !at_or_under(mount, path),
                    "{path} is a parent of {mount}"
                );
            }
            for mount in RUNTIME_MOUNTPOINTS {
                assert!(!at_or_under(path, mount), "{path} at or under {mount}");
            }
        }
        for path in ["/home", "/run", "/run/cordon", "/work", "/tmp"] {
            assert!(entries.iter().all(|e| e.path() != path), "{path}");
        }
    }

    #[test]
    fn an_interpreter_at_a_mountpoint_or_a_clash_is_refused() {
        for bad in [
            "/tmp/ld.so",
            "/home/agent/ld.so",
            "/home/ld.so",
            "/run/ld.so",
            "/run/cordon/input/ld.so",
            "/work/ld.so",
            "/proc/self/exe",
        ] {
            let e = layout(&fake_closure(bad), STATIC_MODE)
                .unwrap_err()
                .to_string();
            assert!(e.contains("mountpoint"), "{bad}: {e}");
        }
        // The CLI's own path, and a directory that is a file elsewhere.
        assert!(layout(&fake_closure(paths::CLAUDE_CLI), STATIC_MODE)
            .unwrap_err()
            .to_string()
            .contains("two files"));
        assert!(layout(&fake_closure("/usr/bin/claude/ld.so"), STATIC_MODE)
            .unwrap_err()
            .to_string()
            .contains("as a file and as a directory"));
        let static_cli = Closure {
            interpreter: None,
            libraries: Vec::new(),
        };
        assert!(layout(&static_cli, STATIC_MODE).is_err());
    }

    /// Inputs of the test runner's own closure (real host files), with a small stand-in CLI.
    fn inputs(dir: &Path, cli: &[u8]) -> Inputs {
        let me = std::env::current_exe().unwrap();
        let closure = elf::closure(&me, &elf::default_lib_dirs()).unwrap();
        let path = dir.join("cli");
        std::fs::write(&path, cli).unwrap();
        Inputs {
            entries: layout(&closure, STATIC_MODE).unwrap(),
            interpreter: closure.interpreter.clone().unwrap(),
            cli: File::open(&path).unwrap(),
            cli_len: cli.len() as u64,
            ca: b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".to_vec(),
            binaries: STATIC_BINARIES
                .iter()
                .map(|(n, _)| (*n, n.as_bytes().to_vec()))
                .collect(),
        }
    }

    /// The recipe names the inputs without reading the CLI: the same files give the same recipe
    /// (and the context's sizes), a CLI written again (same bytes, a new change time), another CA
    /// bundle or another static binary give another.
    #[test]
    fn a_recipe_changes_with_any_input_and_only_then() {
        let dir = TempDir::new("recipe");
        let first = inputs(&dir.0, b"cli one");
        let (recipe, files) = recipe_of(&first).unwrap();
        assert_eq!(recipe_of(&first).unwrap(), (recipe.clone(), files.clone()));
        let (_, written) = write_context(&first, Vec::new()).unwrap();
        assert_eq!(files, written.files);
        assert_eq!(recipe_tag_part(&recipe).len(), "recipe-".len() + 16);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let rewritten = inputs(&dir.0, b"cli one");
        assert_ne!(recipe_of(&rewritten).unwrap().0, recipe);
        let mut ca = inputs(&dir.0, b"cli one");
        let now = recipe_of(&ca).unwrap().0;
        ca.ca.push(b'\n');
        assert_ne!(recipe_of(&ca).unwrap().0, now);
        let mut binary = inputs(&dir.0, b"cli one");
        let now = recipe_of(&binary).unwrap().0;
        binary.binaries[0].1.push(0);
        assert_ne!(recipe_of(&binary).unwrap().0, now);
    }

    #[test]
    fn the_context_is_deterministic_and_holds_only_regular_files_and_directories() {
        let dir = TempDir::new("context");
        let first = inputs(&dir.0, b"cli one");
        let (bytes, written) = write_context(&first, Vec::new()).unwrap();
        let (again, rewritten) = write_context(&first, Vec::new()).unwrap();
        assert_eq!(bytes, again);
        assert_eq!(written, rewritten);
        assert_eq!(written.digest, hex::encode(Sha256::digest(&bytes)));
        assert_eq!(written.cli_sha256, hex::encode(Sha256::digest(b"cli one")));
        let other = inputs(&dir.0, b"cli two");
        let (_, changed) = write_context(&other, Vec::new()).unwrap();
        assert_ne!(
            tag_for_digest(&changed.digest),
            tag_for_digest(&written.digest)
        );
        assert!(tag_for_digest(&written.digest).starts_with("cordon-agent:"));
        assert_eq!(
            tag_for_digest(&written.digest).len(),
            "cordon-agent:".len() + 16
        );

        let mut archive = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let h = entry.header();
            assert_eq!(
                (h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()),
                (0, 0, 0)
            );
            let kind = h.entry_type();
            assert!(kind.is_file() || kind.is_dir(), "{kind:?}");
            seen.push((
                entry.path().unwrap().display().to_string(),
                kind.is_dir(),
                h.size().unwrap(),
            ));
        }
        assert_eq!(seen[0].0, "Dockerfile");
        // Every file of the layout, with its size, in order, and only those.
        let files: Vec<(String, u64)> = seen
            .iter()
            .filter(|(p, dir, _)| !dir && p != "Dockerfile")
            .map(|(p, _, s)| (p.trim_start_matches("rootfs").to_owned(), *s))
            .collect();
        assert_eq!(files, written.files);
        assert!(files.contains(&(paths::CLAUDE_CLI.to_owned(), 7)));
        let interpreter = first
            .entries
            .iter()
            .find(|e| e.path().starts_with("/lib64/"))
            .unwrap()
            .path();
        let on_host = std::fs::metadata(interpreter).unwrap().len();
        assert!(files.contains(&(interpreter.to_owned(), on_host)));
    }

    #[test]
    fn a_cli_that_shrinks_while_read_is_refused() {
        let dir = TempDir::new("shrink");
        let mut inputs = inputs(&dir.0, b"cli");
        inputs.cli_len = 100;
        let e = write_context(&inputs, std::io::sink())
            .unwrap_err()
            .to_string();
        assert!(e.contains("changed while it was read"), "{e}");
    }

    #[test]
    fn the_cli_must_be_a_regular_dynamic_elf_file() {
        let dir = TempDir::new("cli");
        let dirs = elf::default_lib_dirs();
        let script = dir.0.join("claude");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let e = open_cli(&script, &dirs).unwrap_err().to_string();
        assert!(e.contains("not an ELF64 file"), "{e}");
        let link = dir.0.join("link");
        let me = std::env::current_exe().unwrap();
        std::os::unix::fs::symlink(&me, &link).unwrap();
        assert_eq!(
            open_cli(&link, &dirs).unwrap_err().id(),
            "input-not-regular"
        );
        let (_, len, closure) = open_cli(&me, &dirs).unwrap();
        assert!(len > 0 && closure.interpreter.is_some());
        // A static binary, where the host has one.
        if let Ok(found) = elf::closure(Path::new("/sbin/ldconfig"), &dirs) {
            if found.interpreter.is_none() {
                let e = open_cli(Path::new("/sbin/ldconfig"), &dirs)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("not dynamically linked"), "{e}");
            }
        }
    }

    #[test]
    fn the_ca_bundle_must_be_pem() {
        let dir = TempDir::new("ca");
        let path = dir.0.join("ca.crt");
        std::fs::write(&path, "not a certificate\n").unwrap();
        assert!(read_ca_bundle(&path)
            .unwrap_err()
            .to_string()
            .contains("no PEM certificate"));
        std::fs::write(&path, b"\xff\xfe").unwrap();
        assert!(read_ca_bundle(&path)
            .unwrap_err()
            .to_string()
            .contains("not PEM"));
        let pem = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
        std::fs::write(&path, pem).unwrap();
        assert_eq!(read_ca_bundle(&path).unwrap(), pem.as_bytes());
        assert!(read_ca_bundle(&dir.0).is_err());
    }
}
