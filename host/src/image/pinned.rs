//! The pinned Claude Code CLI: one member of one PyPI wheel, each checked against its pinned
//! sha256, fetched with `pip download` into a cache beside the build and reused from there once
//! it verifies. A missing pip, a failing download and every mismatch are errors that say what;
//! nothing is skipped and nothing falls back to another copy.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// One CLI, as a member of a pinned wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PinnedCli {
    /// The PyPI package.
    pub package: &'static str,
    /// Its pinned version.
    pub version: &'static str,
    /// The wheel's file name (pip must save exactly this).
    pub wheel: &'static str,
    /// The wheel's sha256 (hex).
    pub wheel_sha256: &'static str,
    /// The CLI's path inside the wheel.
    pub member: &'static str,
    /// The CLI's sha256 (hex).
    pub cli_sha256: &'static str,
    /// The CLI's size.
    pub cli_bytes: u64,
    /// What `claude --version` prints.
    pub cli_version: &'static str,
}

/// Claude Code 2.1.332, as bundled by claude-agent-sdk 0.2.189 for manylinux x86-64.
pub const CLAUDE_CLI: PinnedCli = PinnedCli {
    package: "claude-agent-sdk",
    version: "0.2.189",
    wheel: "claude_agent_sdk-0.2.189-py3-none-manylinux_2_17_x86_64.whl",
    wheel_sha256: "b26a6a30a4e2cb025a6f5c95e1ce4469b38fcc51015c392f627bea7c948d67ad",
    member: "claude_agent_sdk/_bundled/claude",
    cli_sha256: "a2df1f41bb00250992926420d0063f89b127cb81abdd284dbefb80c50ff1d026",
    cli_bytes: 402_325_736,
    cli_version: "2.1.332 (Claude Code)",
};

/// The platform and Python version pip resolves the wheel for.
const PLATFORM: &str = "manylinux_2_17_x86_64";
const PYTHON_VERSION: &str = "3.11";
/// The bound on one `pip download` (the wheel is 178 MB).
pub const PIP_DEADLINE: Duration = Duration::from_secs(600);
/// How many of pip's last output lines an error carries.
const PIP_TAIL_LINES: usize = 20;

/// Where a workspace keeps fetched CLIs: `<workspace>/target/claude-cli`.
pub fn default_cache(workspace: &Path) -> PathBuf {
    workspace.join("target").join("claude-cli")
}

/// Where the verified CLI of `pin` lives in `cache`: `<cache>/<first 16 hex of its sha256>/claude`.
pub fn cached_path(pin: &PinnedCli, cache: &Path) -> PathBuf {
    let prefix = pin.cli_sha256.get(..16).unwrap_or(pin.cli_sha256);
    cache.join(prefix).join("claude")
}

/// The verified CLI of `pin`, fetched into `cache` unless a copy there verifies (a regular file,
/// not through a link, of the pinned size and sha256). `progress` hears each step.
pub async fn fetch(
    pin: &PinnedCli,
    cache: &Path,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<PathBuf> {
    let target = cached_path(pin, cache);
    let check = target.clone();
    let copy = *pin;
    if blocking(move || verify_file(&copy, &check)).await?.is_ok() {
        progress(&format!(
            "reusing the verified {} {} at {}",
            pin.member,
            pin.cli_version,
            target.display()
        ));
        return Ok(target);
    }
    if std::fs::symlink_metadata(&target).is_ok() {
        progress(&format!(
            "{} is not the pinned CLI (kind, size or sha256): fetching it again",
            target.display()
        ));
    }
    std::fs::create_dir_all(cache)
        .map_err(|e| Error::io(format!("creating {}", cache.display()), e))?;
    let scratch = Scratch::new(cache)?;
    progress(&format!(
        "downloading {}=={} ({}) with pip",
        pin.package, pin.version, pin.wheel
    ));
    pip_download(pin, scratch.path()).await?;
    let wheel = scratch.path().join(pin.wheel);
    if std::fs::symlink_metadata(&wheel).is_err() {
        let saved: Vec<String> = std::fs::read_dir(scratch.path())
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        return Err(Error::Build(format!(
            "pip download of {}=={} did not save {} (it saved: {})",
            pin.package,
            pin.version,
            pin.wheel,
            crate::error::bounded_list(&saved, 1000)
        )));
    }
    progress(&format!(
        "verifying {} and extracting {}",
        pin.wheel, pin.member
    ));
    let copy = *pin;
    let into = target.clone();
    let dir = scratch.path().to_path_buf();
    blocking(move || extract(&copy, &wheel, &dir, &into)).await??;
    drop(scratch);
    progress(&format!(
        "{} {} at {}",
        pin.member,
        pin.cli_version,
        target.display()
    ));
    Ok(target)
}

/// Run blocking file work off the runtime.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("a file task of the CLI fetch ended: {e}")))
}

/// A directory under the cache that is removed whatever happens.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Scratch {
    fn new(cache: &Path) -> Result<Scratch> {
        let dir = cache.join(format!(".fetch-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The cached copy does not verify (or is not there): fetch it.
#[derive(Debug)]
struct Absent;

/// Whether `path` is the verified CLI of `pin`: a regular file (opened without following a
/// link, checked with fstat) of the pinned size whose sha256 matches.
///
/// The 400 MB file is hashed only when its record (`claude.verified` beside it) does not name
/// its identity as the kernel keeps it (device, inode, size, modification and change times) with
/// the pinned digest: any write to it moves its change time (to the kernel's clock tick), which
/// only the kernel sets, so a file unchanged since it last hashed to the pin is not read again (the trust the agent image's
/// recipe already places in the same identity). A hash that passes writes the record, with the
/// identity taken before and after it (a file changed while it was read is not recorded).
fn verify_file(pin: &PinnedCli, path: &Path) -> std::result::Result<(), Absent> {
    let file = open_regular(path).map_err(|_| Absent)?;
    let meta = file.metadata().map_err(|_| Absent)?;
    if !meta.is_file() || meta.len() != pin.cli_bytes {
        return Err(Absent);
    }
    let identity = super::identity(&file, path).map_err(|_| Absent)?;
    let record = format!("{identity} sha256:{}\n", pin.cli_sha256);
    let record_path = record_path(path);
    if read_record(&record_path).as_deref() == Some(record.as_bytes()) {
        return Ok(());
    }
    let (digest, read) = sha256_of((&file).take(pin.cli_bytes + 1)).map_err(|_| Absent)?;
    if read != pin.cli_bytes || digest != pin.cli_sha256 {
        return Err(Absent);
    }
    if super::identity(&file, path).ok().as_deref() == Some(identity.as_str()) {
        // Only a cache of the answer: failing to write it means the next fetch hashes again.
        let _ = write_record(&record_path, record.as_bytes());
    }
    Ok(())
}

/// Where the record of a verified CLI lives: beside it.
fn record_path(cli: &Path) -> PathBuf {
    cli.with_extension("verified")
}

/// Open `path` for reading without following a link or blocking on a FIFO.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
}

/// A record's bytes: a regular file of at most 1 KiB, else nothing.
fn read_record(path: &Path) -> Option<Vec<u8>> {
    const MAX_RECORD: u64 = 1024;
    let file = open_regular(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_RECORD {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_RECORD + 1).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Write a record whole or not at all (a temporary file renamed over it).
fn write_record(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension(format!("verified-{}", uuid::Uuid::new_v4().simple()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// The hex sha256 of everything `reader` yields, and how many bytes that was.
fn sha256_of(mut reader: impl Read) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            return Ok((hex::encode(hasher.finalize()), total));
        }
        hasher.update(&buffer[..n]);
        total += n as u64;
    }
}

/// The pip to run: `$PIP`, else `pip3`, else `pip` on the PATH.
fn find_pip() -> Result<PathBuf> {
    if let Some(pip) = std::env::var_os("PIP").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(pip));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["pip3", "pip"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            let executable = std::fs::metadata(&candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            if executable {
                return Ok(candidate);
            }
        }
    }
    Err(Error::Build(format!(
        "no pip to fetch {}: set PIP, or put pip3 or pip on the PATH ({})",
        CLAUDE_CLI.package,
        std::env::var("PATH").unwrap_or_default()
    )))
}

/// The last `n` non-empty lines of `text`.
fn tail(text: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `pip download` of the pinned wheel (no dependencies, binary only, for the pinned platform)
/// into `dir`, bounded by [`PIP_DEADLINE`].
async fn pip_download(pin: &PinnedCli, dir: &Path) -> Result<()> {
    let pip = find_pip()?;
    let requirement = format!("{}=={}", pin.package, pin.version);
    let mut command = tokio::process::Command::new(&pip);
    command
        .args([
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            PLATFORM,
            "--python-version",
            PYTHON_VERSION,
            "--progress-bar",
            "off",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
        ])
        .arg(dir)
        .arg(&requirement)
        .stdin(std::process::Stdio::null())
        // A cancelled fetch (or one past its deadline) stops pip too.
        .kill_on_drop(true);
    let output = tokio::time::timeout(PIP_DEADLINE, command.output())
        .await
        .map_err(|_| {
            Error::Deadline(format!(
                "{} download {requirement} ({}s)",
                pip.display(),
                PIP_DEADLINE.as_secs()
            ))
        })?
        .map_err(|e| {
            Error::io(
                format!("running {} download {requirement}", pip.display()),
                e,
            )
        })?;
    if !output.status.success() {
        let mut said = tail(&output.stderr, PIP_TAIL_LINES);
        if said.is_empty() {
            said = tail(&output.stdout, PIP_TAIL_LINES);
        }
        if said.is_empty() {
            said = "(it printed nothing)".to_owned();
        }
        return Err(Error::Build(format!(
            "{} download {requirement} failed ({}): {said}",
            pip.display(),
            output.status
        )));
    }
    Ok(())
}

/// Removes a file unless disarmed.
struct RemoveOnDrop<'a>(Option<&'a Path>);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Check the wheel at `wheel` against `pin`, extract its CLI member into a temporary file in
/// `scratch` while hashing it (refusing more than the pinned size), check it, make it 0755 and
/// rename it to `target` (in the same file system as `scratch`). Nothing is left in `scratch`
/// but what the caller removes.
pub fn extract(pin: &PinnedCli, wheel: &Path, scratch: &Path, target: &Path) -> Result<()> {
    let open = |path: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))
    };
    let file = open(wheel)?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("fstat of {}", wheel.display()), e))?;
    if !meta.is_file() {
        return Err(Error::Build(format!(
            "{} is not a regular file",
            wheel.display()
        )));
    }
    let (digest, _) =
        sha256_of(&file).map_err(|e| Error::io(format!("reading {}", wheel.display()), e))?;
    if digest != pin.wheel_sha256 {
        return Err(Error::Build(format!(
            "{} sha256 mismatch: expected {}, observed {digest} ({} bytes at {})",
            pin.wheel,
            pin.wheel_sha256,
            meta.len(),
            wheel.display()
        )));
    }
    // The same descriptor that was hashed is read as a zip.
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| Error::Build(format!("{}: not a readable zip: {e}", pin.wheel)))?;
    let mut member = archive
        .by_name(pin.member)
        .map_err(|e| Error::Build(format!("{} has no member {}: {e}", pin.wheel, pin.member)))?;
    if member.size() > pin.cli_bytes {
        return Err(Error::Build(format!(
            "{} in {} says it is {} bytes, more than the pinned {}",
            pin.member,
            pin.wheel,
            member.size(),
            pin.cli_bytes
        )));
    }
    let partial = scratch.join(format!(".claude-{}", uuid::Uuid::new_v4()));
    let mut guard = RemoveOnDrop(Some(&partial));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&partial)
        .map_err(|e| Error::io(format!("creating {}", partial.display()), e))?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    let mut buffer = vec![0u8; 1 << 20];
    let mut bounded = (&mut member).take(pin.cli_bytes + 1);
    loop {
        let n = bounded.read(&mut buffer).map_err(|e| {
            Error::Build(format!("extracting {} from {}: {e}", pin.member, pin.wheel))
        })?;
        if n == 0 {
            break;
        }
        written += n as u64;
        if written > pin.cli_bytes {
            return Err(Error::Build(format!(
                "{} in {} is larger than the pinned {} bytes",
                pin.member, pin.wheel, pin.cli_bytes
            )));
        }
        hasher.update(&buffer[..n]);
        out.write_all(&buffer[..n])
            .map_err(|e| Error::io(format!("writing {}", partial.display()), e))?;
    }
    let digest = hex::encode(hasher.finalize());
    if written != pin.cli_bytes || digest != pin.cli_sha256 {
        return Err(Error::Build(format!(
            "{} in {} mismatch: expected {} bytes with sha256 {}, observed {written} bytes with sha256 {digest}",
            pin.member, pin.wheel, pin.cli_bytes, pin.cli_sha256
        )));
    }
    out.set_permissions(std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(format!("chmod 0755 {}", partial.display()), e))?;
    out.sync_all()
        .map_err(|e| Error::io(format!("syncing {}", partial.display()), e))?;
    drop(out);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    }
    std::fs::rename(&partial, target).map_err(|e| {
        Error::io(
            format!("renaming {} to {}", partial.display(), target.display()),
            e,
        )
    })?;
    guard.0 = None;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::fs::File;

    use crate::image::TestDir as TempDir;

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    fn sha(data: &[u8]) -> String {
        hex::encode(Sha256::digest(data))
    }

    const MEMBER: &str = "fake_sdk/_bundled/claude";
    const CLI: &[u8] = b"\x7fELF not really a CLI, but its bytes are pinned all the same\n";

    /// A small wheel holding `members` (deflated), and its path.
    fn wheel(dir: &Path, members: &[(&str, &[u8])]) -> PathBuf {
        let path = dir.join("fake_sdk-1.0-py3-none-manylinux_2_17_x86_64.whl");
        let mut writer = zip::ZipWriter::new(File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in members {
            writer.start_file(*name, options).unwrap();
            writer.write_all(data).unwrap();
        }
        writer.finish().unwrap();
        path
    }

    /// A made-up pin of `wheel` and its member `cli`.
    fn pin_of(wheel: &Path, cli: &[u8]) -> PinnedCli {
        PinnedCli {
            package: "cordon-test-not-a-package",
            version: "1.0",
            wheel: leak(wheel.file_name().unwrap().to_string_lossy().into_owned()),
            wheel_sha256: leak(sha(&std::fs::read(wheel).unwrap())),
            member: MEMBER,
            cli_sha256: leak(sha(cli)),
            cli_bytes: cli.len() as u64,
            cli_version: "1.0 (Fake)",
        }
    }

    #[test]
    fn the_member_is_extracted_verified_and_executable() {
        let dir = TempDir::new("extract");
        let wheel = wheel(&dir.0, &[("fake_sdk/__init__.py", b""), (MEMBER, CLI)]);
        let pin = pin_of(&wheel, CLI);
        let target = cached_path(&pin, &dir.0.join("cache"));
        extract(&pin, &wheel, &dir.0, &target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), CLI);
        let meta = std::fs::symlink_metadata(&target).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert!(target.ends_with(format!("{}/claude", &pin.cli_sha256[..16])));
        // Nothing partial is left beside the wheel.
        let left: Vec<_> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".claude-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(verify_file(&pin, &target).ok(), Some(()));
    }

    #[test]
    fn a_wheel_of_another_digest_is_refused_naming_both() {
        let dir = TempDir::new("wheel-sha");
        let wheel = wheel(&dir.0, &[(MEMBER, CLI)]);
        let right = pin_of(&wheel, CLI);
        let pin = PinnedCli {
            wheel_sha256: "00".repeat(32).leak(),
            ..right
        };
        let target = dir.0.join("out/claude");
        let e = extract(&pin, &wheel, &dir.0, &target).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.id(), "image-build");
        assert!(
            text.contains("sha256 mismatch")
                && text.contains(&"00".repeat(32))
                && text.contains(right.wheel_sha256),
            "{text}"
        );
        assert!(std::fs::symlink_metadata(&target).is_err());
    }

    #[test]
    fn a_member_of_another_digest_or_size_or_missing_is_refused() {
        let dir = TempDir::new("member");
        let wheel = wheel(&dir.0, &[(MEMBER, CLI)]);
        let right = pin_of(&wheel, CLI);
        let target = dir.0.join("out/claude");
        let other_sha = PinnedCli {
            cli_sha256: "11".repeat(32).leak(),
            ..right
        };
        let text = extract(&other_sha, &wheel, &dir.0, &target)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("mismatch") && text.contains(right.cli_sha256),
            "{text}"
        );
        let smaller = PinnedCli {
            cli_bytes: right.cli_bytes - 1,
            ..right
        };
        let text = extract(&smaller, &wheel, &dir.0, &target)
            .unwrap_err()
            .to_string();
        assert!(text.contains("more than the pinned"), "{text}");
        let larger = PinnedCli {
            cli_bytes: right.cli_bytes + 1,
            ..right
        };
        let text = extract(&larger, &wheel, &dir.0, &target)
            .unwrap_err()
            .to_string();
        assert!(text.contains("mismatch"), "{text}");
        let absent = PinnedCli {
            member: "fake_sdk/_bundled/other",
            ..right
        };
        let text = extract(&absent, &wheel, &dir.0, &target)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("has no member fake_sdk/_bundled/other"),
            "{text}"
        );
        assert!(std::fs::symlink_metadata(&target).is_err());
        let left = std::fs::read_dir(&dir.0)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".claude-")
            })
            .count();
        assert_eq!(left, 0);
    }

    #[tokio::test]
    async fn a_verified_cached_copy_is_reused_without_pip() {
        let dir = TempDir::new("cached");
        let wheel = wheel(&dir.0, &[(MEMBER, CLI)]);
        let pin = pin_of(&wheel, CLI);
        let cache = dir.0.join("cache");
        let target = cached_path(&pin, &cache);
        extract(&pin, &wheel, &dir.0, &target).unwrap();
        let heard = std::sync::Mutex::new(Vec::new());
        // The package does not exist: reaching pip would fail.
        let path = fetch(&pin, &cache, &|m: &str| {
            heard.lock().unwrap().push(m.to_owned())
        })
        .await
        .unwrap();
        assert_eq!(path, target);
        let heard = heard.into_inner().unwrap();
        assert!(heard.iter().any(|m| m.starts_with("reusing")), "{heard:?}");
        // Only the CLI's own directory is in the cache: no scratch directory was made.
        let entries: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(entries, [&pin.cli_sha256[..16]]);
    }

    #[test]
    fn a_cached_copy_that_does_not_verify_is_not_used() {
        let dir = TempDir::new("stale");
        let wheel = wheel(&dir.0, &[(MEMBER, CLI)]);
        let pin = pin_of(&wheel, CLI);
        let target = dir.0.join("claude");
        // Same size, other bytes.
        let mut other = CLI.to_vec();
        other[5] ^= 1;
        std::fs::write(&target, &other).unwrap();
        assert!(verify_file(&pin, &target).is_err());
        // The right bytes through a link: not followed.
        let real = dir.0.join("real");
        std::fs::write(&real, CLI).unwrap();
        assert!(verify_file(&pin, &real).is_ok());
        let link = dir.0.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(verify_file(&pin, &link).is_err());
        // A directory.
        assert!(verify_file(&pin, &dir.0).is_err());
    }

    /// A copy that hashed to the pin is not read again while its identity stands: its record
    /// answers (shown by a record naming the identity of a file with other bytes, which then
    /// passes unread). Any write moves the identity, and the file is hashed again: other bytes of
    /// the same size are refused, the pinned bytes pass and are recorded anew. A record that is
    /// not a regular file, or too large, is not read.
    #[test]
    fn a_copy_unchanged_since_it_verified_is_not_hashed_again() {
        let dir = TempDir::new("record");
        let wheel = wheel(&dir.0, &[(MEMBER, CLI)]);
        let pin = pin_of(&wheel, CLI);
        let target = dir.0.join("claude");
        let record = record_path(&target);
        std::fs::write(&target, CLI).unwrap();
        assert!(verify_file(&pin, &target).is_ok());
        let written = std::fs::read_to_string(&record).unwrap();
        assert!(
            written.ends_with(&format!(" sha256:{}\n", pin.cli_sha256)),
            "{written}"
        );
        assert!(verify_file(&pin, &target).is_ok());

        // Other bytes, same size: the write moves the identity, the hash refuses them. (The
        // kernel's times move by its clock tick: each rewrite here also sets a modification time
        // of its own, so that two writes within one tick still differ.)
        let rewrite = |bytes: &[u8], secs: u64| {
            std::fs::write(&target, bytes).unwrap();
            File::options()
                .write(true)
                .open(&target)
                .unwrap()
                .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs))
                .unwrap();
        };
        let mut other = CLI.to_vec();
        other[5] ^= 1;
        rewrite(&other, 1);
        assert!(verify_file(&pin, &target).is_err());
        // A record naming that file's identity is trusted without a read: the record is the
        // whole of the fast path, and only a hash that passed writes one.
        let identity = crate::image::identity(&File::open(&target).unwrap(), &target).unwrap();
        std::fs::write(&record, format!("{identity} sha256:{}\n", pin.cli_sha256)).unwrap();
        assert!(verify_file(&pin, &target).is_ok());
        std::fs::remove_file(&record).unwrap();
        assert!(verify_file(&pin, &target).is_err());
        assert!(!record.exists(), "a failed hash records nothing");

        // The pinned bytes again: hashed, passed, recorded with the new identity.
        rewrite(CLI, 2);
        assert!(verify_file(&pin, &target).is_ok());
        assert_ne!(
            std::fs::read_to_string(&record).unwrap(),
            format!("{identity} sha256:{}\n", pin.cli_sha256)
        );

        // Records that are not regular files or are too large are ignored, never followed.
        std::fs::remove_file(&record).unwrap();
        std::os::unix::fs::symlink(&wheel, &record).unwrap();
        assert_eq!(read_record(&record), None);
        std::fs::remove_file(&record).unwrap();
        std::fs::write(&record, vec![b'x'; 2048]).unwrap();
        assert_eq!(read_record(&record), None);
    }

    #[test]
    fn the_pin_is_self_consistent() {
        let p = CLAUDE_CLI;
        assert!(p.wheel.starts_with("claude_agent_sdk-0.2.189-"));
        assert!(p.wheel.ends_with(&format!("{PLATFORM}.whl")));
        for digest in [p.wheel_sha256, p.cli_sha256] {
            assert_eq!(digest.len(), 64);
            assert!(digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
        assert_eq!(
            cached_path(&p, Path::new("/c")),
            Path::new("/c/a2df1f41bb002509/claude")
        );
        assert_eq!(
            default_cache(Path::new("/w")),
            Path::new("/w/target/claude-cli")
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail(b"a\n\nb\nc\n", 2), "b\nc");
        assert_eq!(tail(b"", 2), "");
    }
}
