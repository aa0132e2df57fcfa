//! The staging clone: a private, standalone copy of the source repository's objects and refs,
//! made without running anything in the source.
//!
//! git never runs in the source repository (its config, hooks, attributes and filters are the
//! repository's, and the repository is not trusted). The object store and the refs are copied as
//! data, file by file, with [`caller_file`]'s rules (never through a link, never blocking, no
//! more than was listed): a link anywhere in them, or an alternates file that points at another
//! object store, makes the repository unusable. git then runs, hardened, only in the copy, to
//! resolve the head, check that every object it needs is there, and list the tree.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::git::Git;
use super::tree::{self, Entry, Kind, Needs};
use super::Unusable;
use crate::caller_file::{self, InputFault};
use crate::error::{Error, Result};
use crate::labels::Owner;

/// The most a source object store may hold (bytes) before it is refused without copying.
pub const MAX_OBJECT_STORE_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// The most files it may hold.
pub const MAX_OBJECT_STORE_FILES: u64 = 1_000_000;
/// The longest link target a checkout may carry.
pub const MAX_LINK_TARGET: usize = 4095;

/// A staging directory, removed when dropped (also when the future making it is cancelled).
#[derive(Debug)]
pub struct StagingDir(PathBuf);

impl StagingDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The name prefix of an owner's staging directories (recovery removes what a killed process
/// left).
pub fn staging_prefix(owner: &Owner) -> String {
    format!("cordon-stage-{}-", owner.as_str())
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
    pub entries: Vec<Entry>,
    /// Link path -> target bytes.
    pub links: BTreeMap<Vec<u8>, Vec<u8>>,
    /// What the checkout needs in the work volume.
    pub work_needs: Needs,
    /// What the metadata (the copied object store and refs) needs.
    pub metadata_needs: Needs,
}

/// The source's git directory: `path/.git`, or `path` itself when it is a bare repository.
fn git_dir_of(source: &Path) -> Result<PathBuf> {
    let dot_git = source.join(".git");
    match fs::symlink_metadata(&dot_git) {
        Ok(m) if m.is_dir() => return Ok(dot_git),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(Error::Unusable(Unusable::MetadataLink {
                path: ".git".into(),
            }));
        }
        Ok(_) => {
            return Err(Error::Unusable(Unusable::NotARepository {
                path: source.display().to_string(),
                reason: ".git is a file (a linked worktree or a submodule): give the repository it points to".into(),
            }));
        }
        Err(_) => {}
    }
    if fs::symlink_metadata(source.join("objects")).is_ok_and(|m| m.is_dir())
        && source.join("HEAD").is_file()
    {
        return Ok(source.to_path_buf());
    }
    Err(Error::Unusable(Unusable::NotARepository {
        path: source.display().to_string(),
        reason: "no .git directory and not a bare repository".into(),
    }))
}

/// Walk `dir` without following links: (relative path, size) of every regular file; a link or a
/// special file is refused.
fn walk(
    root: &Path,
    rel: &Path,
    out: &mut Vec<(PathBuf, u64)>,
    budget: &mut (u64, u64),
) -> Result<()> {
    let dir = root.join(rel);
    let listing =
        fs::read_dir(&dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    for entry in listing {
        let entry = entry.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
        let rel_path = rel.join(entry.file_name());
        let meta = fs::symlink_metadata(entry.path())
            .map_err(|e| Error::io(format!("{}", rel_path.display()), e))?;
        let shown = || rel_path.display().to_string();
        if meta.file_type().is_symlink() {
            return Err(Error::Unusable(Unusable::MetadataLink { path: shown() }));
        }
        if meta.is_dir() {
            walk(root, &rel_path, out, budget)?;
        } else if meta.is_file() {
            budget.0 += meta.len();
            budget.1 += 1;
            if budget.0 > MAX_OBJECT_STORE_BYTES || budget.1 > MAX_OBJECT_STORE_FILES {
                return Err(Error::Unusable(Unusable::TooLarge {
                    what: "object store".into(),
                    needs_bytes: budget.0,
                    needs_inodes: budget.1,
                    limit_bytes: MAX_OBJECT_STORE_BYTES,
                    limit_inodes: MAX_OBJECT_STORE_FILES,
                }));
            }
            out.push((rel_path, meta.len()));
        } else {
            return Err(Error::Unusable(Unusable::MetadataLink { path: shown() }));
        }
    }
    Ok(())
}

/// Copy one regular file of `listed` bytes with [`caller_file`]'s rules, refusing one that
/// became a link, a FIFO or a device since it was listed (it is never opened blocking), and one
/// that grew: the copy is bounded by what was measured.
fn copy_file(from: &Path, to: &Path, listed: u64) -> Result<()> {
    let changed = |what: &str| {
        Error::Invalid(format!(
            "the source repository changed while it was copied ({} {what}; a git gc?): try again",
            from.display()
        ))
    };
    let src = caller_file::open("repository file", from).map_err(|e| match e {
        Error::Input {
            fault: InputFault::NotRegular(_),
            ..
        } => Error::Unusable(Unusable::MetadataLink {
            path: from.display().to_string(),
        }),
        Error::Input {
            fault:
                InputFault::Unreadable {
                    errno: Some(libc::ENOENT),
                    ..
                },
            ..
        } => changed("went away"),
        other => other,
    })?;
    let mut dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(to)
        .map_err(|e| Error::io(format!("creating {}", to.display()), e))?;
    let copied = std::io::copy(&mut src.into_file().take(listed + 1), &mut dst)
        .map_err(|e| Error::io(format!("copying {}", from.display()), e))?;
    if copied > listed {
        return Err(changed(&format!("grew past the {listed} bytes listed")));
    }
    Ok(())
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
        .ok_or_else(|| Error::Invalid("cat-file stdin".into()))?;
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
            .ok_or_else(|| Error::Invalid("cat-file stdout".into()))?,
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

/// Stage `source` at `head` into a private directory, or refuse it.
pub async fn stage(
    source: &Path,
    head: &str,
    owner: &Owner,
    allocation: &uuid::Uuid,
    deadline: Instant,
) -> Result<Staged> {
    check_revision(head)?;
    let source_git = git_dir_of(source)?;
    if fs::symlink_metadata(source_git.join("objects/info/alternates")).is_ok() {
        return Err(Error::Unusable(Unusable::Alternates));
    }
    // List the object store and the refs (refusing links and oversize stores) before anything
    // is made.
    let mut files = Vec::new();
    let mut budget = (0, 0);
    walk(&source_git, Path::new("objects"), &mut files, &mut budget)?;
    if source_git.join("refs").is_dir() {
        walk(&source_git, Path::new("refs"), &mut files, &mut budget)?;
    }
    for single in ["HEAD", "packed-refs"] {
        match fs::symlink_metadata(source_git.join(single)) {
            Ok(m) if m.is_file() => files.push((PathBuf::from(single), m.len())),
            Ok(_) => {
                return Err(Error::Unusable(Unusable::MetadataLink {
                    path: single.into(),
                }))
            }
            Err(_) => {}
        }
    }
    let dir = staging_root(budget.0).join(format!("{}{allocation}", staging_prefix(owner)));
    fs::create_dir(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let dir = StagingDir(dir);
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

    // Copy them as data.
    let (object_bytes, object_files) = (budget.0, budget.1);
    tracing::debug!(
        files = files.len(),
        bytes = object_bytes,
        "listed the object store"
    );
    let copy_from = source_git.clone();
    let copy_to = repo.clone();
    let list = files.clone();
    tokio::task::spawn_blocking(move || -> Result<()> {
        let parents: std::collections::BTreeSet<PathBuf> = list
            .iter()
            .filter_map(|(rel, _)| rel.parent().map(Path::to_path_buf))
            .collect();
        for parent in parents {
            let dir = copy_to.join(parent);
            fs::create_dir_all(&dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        for (rel, listed) in list {
            let to = copy_to.join(&rel);
            if rel.as_os_str() == "HEAD" {
                let _ = fs::remove_file(&to);
            }
            copy_file(&copy_from.join(&rel), &to, listed)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| Error::Invalid(format!("copy task: {e}")))??;

    tracing::debug!("copied the object store and refs");
    // From here git runs only in the copy.
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
    .map_err(|e| Error::Invalid(format!("link task: {e}")))??;
    tracing::debug!(
        entries = entries.len(),
        links = links.len(),
        "listed the tree"
    );
    let work_needs = tree::check_names_and_size(&entries, &links).map_err(Error::Unusable)?;
    for (path, target) in &links {
        tree::check_link(path, target, &links).map_err(Error::Unusable)?;
    }
    // The copied files, the 256 fan-out directories and a few more, and the index the seeder adds
    // (about 100 bytes an entry).
    let metadata_needs = Needs {
        bytes: files
            .iter()
            .map(|(_, size)| size.div_ceil(4096) * 4096)
            .sum::<u64>()
            + (entries.len() as u64 * 100).div_ceil(4096) * 4096,
        inodes: object_files + 512,
    };
    let _ = object_bytes;
    Ok(Staged {
        dir,
        git,
        head,
        entries,
        links,
        work_needs,
        metadata_needs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What was listed can change before it is copied: a FIFO or a link swapped in is refused
    /// without blocking, a file that grew is not copied past what was listed.
    #[test]
    fn copy_file_refuses_what_changed_since_it_was_listed() {
        let dir = std::env::temp_dir().join(format!("cordon-copy-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let from = dir.join("object");
        fs::write(&from, b"0123456789").unwrap();
        copy_file(&from, &dir.join("copy"), 10).unwrap();
        assert_eq!(fs::read(dir.join("copy")).unwrap(), b"0123456789");
        let grew = copy_file(&from, &dir.join("copy-grew"), 9).unwrap_err();
        assert!(
            matches!(&grew, Error::Invalid(m) if m.contains("grew past the 9 bytes listed")),
            "{grew}"
        );
        let gone = copy_file(&dir.join("absent"), &dir.join("copy-gone"), 1).unwrap_err();
        assert!(
            matches!(&gone, Error::Invalid(m) if m.contains("went away")),
            "{gone}"
        );
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid C string; mkfifo touches no memory of ours.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let link = dir.join("link");
        std::os::unix::fs::symlink(&from, &link).unwrap();
        for special in [fifo, link, PathBuf::from("/dev/zero")] {
            let e = copy_file(&special, &dir.join("copy-special"), 0).unwrap_err();
            assert_eq!(e.id(), "repo-metadata-link", "{}: {e}", special.display());
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
