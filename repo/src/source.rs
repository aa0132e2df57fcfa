//! Reading the source repository from one directory descriptor down, never following a link.
//!
//! The caller names the repository's directory once ([`open_root`]: links in the caller's own
//! path are the caller's and are followed). Everything beneath it is opened relative to that
//! descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` and
//! `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, so a link in any component of the path (not only the
//! last) fails the open, and a FIFO never blocks it. What was opened is checked with `fstat` to
//! be the directory or the regular file that was wanted; directories are listed from their
//! descriptor, each entry checked with `fstatat(AT_SYMLINK_NOFOLLOW)`. On a kernel without
//! openat2 (before 5.6, or a seccomp profile that refuses it) the same is done one component at
//! a time with `openat(O_NOFOLLOW)`, every intermediate component opened `O_DIRECTORY`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

/// What is at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File {
        size: u64,
    },
    Link,
    /// A FIFO, a socket, a device.
    Special,
}

impl Kind {
    fn of(stat: &FileStat) -> Kind {
        match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFREG => Kind::File {
                size: u64::try_from(stat.st_size).unwrap_or(0),
            },
            SFlag::S_IFLNK => Kind::Link,
            _ => Kind::Special,
        }
    }
}

/// Why a path beneath the root was not opened.
#[derive(Debug)]
pub enum Refused {
    /// A link on the way to it or at it, or it is not what was wanted (a FIFO, socket or device;
    /// a directory where a file was wanted, or the reverse).
    NotPlain,
    /// Nothing is there (a component is missing).
    Missing,
    /// Anything else.
    Io(std::io::Error),
}

impl From<Errno> for Refused {
    fn from(errno: Errno) -> Refused {
        match errno {
            // ELOOP: a link (RESOLVE_NO_SYMLINKS, O_NOFOLLOW); EXDEV: out of the root
            // (RESOLVE_BENEATH); ENOTDIR: a component that is not a directory (O_DIRECTORY);
            // ENXIO: a socket; EISDIR: a directory opened as a file.
            Errno::ELOOP | Errno::EXDEV | Errno::ENOTDIR | Errno::ENXIO | Errno::EISDIR => {
                Refused::NotPlain
            }
            Errno::ENOENT => Refused::Missing,
            other => Refused::Io(std::io::Error::from(other)),
        }
    }
}

/// Open the repository directory the caller names (links in the caller's path are followed).
pub fn open_root(path: &Path) -> Result<OwnedFd, Refused> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .map_err(Refused::from)
}

/// The flags a directory or a file beneath the root is opened with.
fn flags(dir: bool) -> OFlag {
    let base = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    if dir {
        base | OFlag::O_DIRECTORY
    } else {
        base
    }
}

const RESOLVE: ResolveFlag = ResolveFlag::RESOLVE_BENEATH
    .union(ResolveFlag::RESOLVE_NO_SYMLINKS)
    .union(ResolveFlag::RESOLVE_NO_MAGICLINKS);

/// A relative path of plain names ("objects/ab/cd..."): no root, no `.`, no `..`.
fn plain_components(rel: &Path) -> Result<Vec<&OsStr>, Refused> {
    let parts: Vec<&OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(()),
        })
        .collect::<Result<_, _>>()
        .map_err(|()| Refused::NotPlain)?;
    if parts.is_empty() {
        return Err(Refused::NotPlain);
    }
    Ok(parts)
}

/// Open `rel` beneath `root` with `flags`, following no link in any component: `openat2` with
/// [`RESOLVE`], or, where the kernel has no openat2, [`open_by_components`].
fn open_at(root: BorrowedFd<'_>, rel: &Path, flags: OFlag) -> Result<OwnedFd, Refused> {
    plain_components(rel)?;
    let how = OpenHow::new().flags(flags).resolve(RESOLVE);
    // openat2 with RESOLVE_BENEATH answers EAGAIN when a rename raced the lookup: try again.
    for _ in 0..16 {
        match nix::fcntl::openat2(root, rel, how) {
            Ok(fd) => return Ok(fd),
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(Errno::ENOSYS | Errno::EPERM) => return open_by_components(root, rel, flags),
            Err(errno) => return Err(errno.into()),
        }
    }
    Err(Refused::Io(std::io::Error::from(Errno::EAGAIN)))
}

/// [`open_at`] without openat2: every component but the last opened `O_DIRECTORY | O_NOFOLLOW`
/// from the one before, the last with `flags` (which carry `O_NOFOLLOW`).
pub fn open_by_components(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
) -> Result<OwnedFd, Refused> {
    let parts = plain_components(rel)?;
    let step = OFlag::O_RDONLY
        | OFlag::O_DIRECTORY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC;
    let mut held: Option<OwnedFd> = None;
    for (i, name) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let at = held.as_ref().map_or(root, AsFd::as_fd);
        let fd = nix::fcntl::openat(
            at,
            *name,
            if last {
                flags | OFlag::O_NOFOLLOW
            } else {
                step
            },
            Mode::empty(),
        )?;
        held = Some(fd);
    }
    held.ok_or(Refused::NotPlain)
}

/// Open the directory `rel` beneath `root`.
pub fn open_dir(root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, Refused> {
    let fd = open_at(root, rel, flags(true))?;
    match Kind::of(&nix::sys::stat::fstat(&fd)?) {
        Kind::Dir => Ok(fd),
        _ => Err(Refused::NotPlain),
    }
}

/// A regular file opened beneath the root, with what `fstat` said of the descriptor it is read
/// from.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    pub size: u64,
    /// Its link count: more than one, and the same file is also elsewhere.
    pub links: u64,
    /// Its owner.
    pub uid: u32,
}

/// Open the regular file `rel` beneath `root` for reading.
pub fn open_file(root: BorrowedFd<'_>, rel: &Path) -> Result<Opened, Refused> {
    let fd = open_at(root, rel, flags(false))?;
    let stat = nix::sys::stat::fstat(&fd)?;
    // nlink_t is u64 here and u32 on some targets.
    #[allow(clippy::useless_conversion)]
    let links = u64::from(stat.st_nlink);
    match Kind::of(&stat) {
        Kind::File { size } => Ok(Opened {
            file: File::from(fd),
            size,
            links,
            uid: stat.st_uid,
        }),
        _ => Err(Refused::NotPlain),
    }
}

/// The owner of an open file or directory.
pub fn owner(fd: BorrowedFd<'_>) -> Result<u32, Refused> {
    Ok(nix::sys::stat::fstat(fd)?.st_uid)
}

/// What is at `rel` beneath `root`, without opening it (`O_PATH`: a FIFO or a device is not
/// opened): a link as the last component is [`Kind::Link`], a link before it is
/// [`Refused::NotPlain`].
pub fn kind(root: BorrowedFd<'_>, rel: &Path) -> Result<Kind, Refused> {
    let fd = open_at(
        root,
        rel,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
    )?;
    Ok(Kind::of(&nix::sys::stat::fstat(&fd)?))
}

/// The entries of the directory `dir` (read from its descriptor), sorted by name, each with its
/// kind (`fstatat(AT_SYMLINK_NOFOLLOW)` on the directory's descriptor). An entry that went away
/// between the listing and its stat is left out. At most `most + 1` entries are read (the
/// caller refuses a directory with more).
pub fn list(dir: OwnedFd, most: u64) -> Result<Vec<(OsString, Kind)>, Refused> {
    let mut dir = nix::dir::Dir::from_fd(dir)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_owned());
            if names.len() as u64 > most {
                break;
            }
        }
    }
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match nix::sys::stat::fstatat(
            &dir,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(stat) => out.push((name, Kind::of(&stat))),
            Err(Errno::ENOENT) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Read;
    use std::time::{Duration, Instant};

    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// root/a/b/file, root/a/link -> b (a link in the middle of a/link/file), root/fifo,
    /// root/dir, root/tolink -> a/b/file, root/out -> .. (a link leading out of the root).
    fn tree() -> Scratch {
        let dir = std::env::temp_dir().join(format!("cordon-source-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::create_dir(dir.join("dir")).unwrap();
        std::fs::write(dir.join("a/b/file"), b"content").unwrap();
        std::os::unix::fs::symlink("b", dir.join("a/link")).unwrap();
        std::os::unix::fs::symlink("a/b/file", dir.join("tolink")).unwrap();
        std::os::unix::fs::symlink("..", dir.join("out")).unwrap();
        nix::unistd::mkfifo(&dir.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        Scratch(dir)
    }

    fn not_plain<T: std::fmt::Debug>(r: Result<T, Refused>) -> bool {
        matches!(r, Err(Refused::NotPlain))
    }

    #[test]
    fn a_plain_file_and_directory_open() {
        let t = tree();
        let root = open_root(&t.0).unwrap();
        let mut opened = open_file(root.as_fd(), Path::new("a/b/file")).unwrap();
        let mut content = String::new();
        opened.file.read_to_string(&mut content).unwrap();
        assert_eq!((content.as_str(), opened.size), ("content", 7));
        assert_eq!(opened.links, 1);
        // The link count is the descriptor's: a second name is seen.
        std::fs::hard_link(t.0.join("a/b/file"), t.0.join("second")).unwrap();
        assert_eq!(
            open_file(root.as_fd(), Path::new("a/b/file"))
                .unwrap()
                .links,
            2
        );
        assert_eq!(
            open_file(root.as_fd(), Path::new("a/b/file")).unwrap().uid,
            owner(root.as_fd()).unwrap()
        );
        open_dir(root.as_fd(), Path::new("a/b")).unwrap();
        assert_eq!(
            kind(root.as_fd(), Path::new("a/b/file")).unwrap(),
            Kind::File { size: 7 }
        );
        assert!(matches!(
            open_file(root.as_fd(), Path::new("a/b/none")),
            Err(Refused::Missing)
        ));
    }

    #[test]
    fn a_link_in_the_middle_or_at_the_end_is_refused() {
        let t = tree();
        let root = open_root(&t.0).unwrap();
        let root = root.as_fd();
        assert!(not_plain(open_file(root, Path::new("a/link/file"))));
        assert!(not_plain(open_dir(root, Path::new("a/link"))));
        assert!(not_plain(open_file(root, Path::new("tolink"))));
        assert!(not_plain(open_file(root, Path::new("out/x"))));
        assert!(not_plain(kind(root, Path::new("a/link/file"))));
        assert_eq!(kind(root, Path::new("a/link")).unwrap(), Kind::Link);
        // Without openat2, component by component.
        for rel in ["a/link/file", "tolink", "out/x", "a/link"] {
            assert!(
                not_plain(open_by_components(root, Path::new(rel), flags(false))),
                "{rel}"
            );
        }
        open_by_components(root, Path::new("a/b/file"), flags(false)).unwrap();
        // Names that are not plain.
        for rel in ["../x", "/etc/passwd", "a/../a/b/file", ""] {
            assert!(not_plain(open_file(root, Path::new(rel))), "{rel:?}");
        }
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let t = tree();
        let root = open_root(&t.0).unwrap();
        let started = Instant::now();
        assert!(not_plain(open_file(root.as_fd(), Path::new("fifo"))));
        assert!(not_plain(open_dir(root.as_fd(), Path::new("fifo"))));
        assert!(not_plain(
            open_by_components(root.as_fd(), Path::new("fifo"), flags(false)).and_then(|fd| {
                match Kind::of(&nix::sys::stat::fstat(&fd)?) {
                    Kind::File { .. } => Ok(fd),
                    _ => Err(Refused::NotPlain),
                }
            })
        ));
        assert_eq!(
            kind(root.as_fd(), Path::new("fifo")).unwrap(),
            Kind::Special
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_directory_where_a_file_is_wanted_and_the_reverse_are_refused() {
        let t = tree();
        let root = open_root(&t.0).unwrap();
        assert!(not_plain(open_file(root.as_fd(), Path::new("dir"))));
        assert!(not_plain(open_dir(root.as_fd(), Path::new("a/b/file"))));
        assert!(not_plain(open_file(root.as_fd(), Path::new("a/b/file/x"))));
    }

    #[test]
    fn a_listing_names_every_kind_without_following() {
        let t = tree();
        let root = open_root(&t.0).unwrap();
        let listed = list(open_dir(root.as_fd(), Path::new("a")).unwrap(), 100).unwrap();
        assert_eq!(
            listed,
            vec![
                (OsString::from("b"), Kind::Dir),
                (OsString::from("link"), Kind::Link)
            ]
        );
        let top = list(open_root(&t.0).unwrap(), 100).unwrap();
        // Reading stops one past the bound.
        assert_eq!(list(open_root(&t.0).unwrap(), 2).unwrap().len(), 3);
        let kinds: Vec<(String, Kind)> = top
            .into_iter()
            .map(|(n, k)| (n.to_string_lossy().into_owned(), k))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("a".to_owned(), Kind::Dir),
                ("dir".to_owned(), Kind::Dir),
                ("fifo".to_owned(), Kind::Special),
                ("out".to_owned(), Kind::Link),
                ("tolink".to_owned(), Kind::Link),
            ]
        );
    }
}
