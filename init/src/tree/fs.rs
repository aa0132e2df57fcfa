//! The no-follow primitives of the tree reader: every directory and file is opened relative to its
//! parent directory's fd with `openat2` and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` (the digest's `*_any_mount` variants without the last:
//! it reads a tree as the container sees it), classified with `fstatat(AT_SYMLINK_NOFOLLOW)`, and
//! a file is only opened when it was a regular file and is still the same one once open. Nothing
//! here trusts a name or a size: a file's blob id is of the bytes actually read, and the count
//! read is handed back for the caller to compare with the size.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sha1::{Digest, Sha1};

/// A link target is at most this long (bytes); a longer one is refused, never truncated.
pub const MAX_LINK_TARGET: usize = 4096;

/// The read buffer of a file's content.
pub const READ_BUFFER: usize = 64 * 1024;

/// `struct open_how` (linux/openat2.h); libc's is `#[non_exhaustive]`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// One name beneath its directory, no link anywhere, on the same mount.
const BENEATH: u64 = libc::RESOLVE_BENEATH
    | libc::RESOLVE_NO_SYMLINKS
    | libc::RESOLVE_NO_MAGICLINKS
    | libc::RESOLVE_NO_XDEV;

/// [`BENEATH`] across mounts: the digest reads a tree as the container sees it (the digest of
/// /work takes in /work/.git, another volume; nothing in a container can mount).
const BENEATH_ANY_MOUNT: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

const FILE_FLAGS: i32 =
    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
const DIR_FLAGS: i32 = FILE_FLAGS | libc::O_DIRECTORY;

fn openat2(dir: RawFd, name: &CStr, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: flags as u32 as u64,
        mode: 0,
        resolve,
    };
    // EAGAIN: the kernel saw a rename or mount race during a RESOLVE_BENEATH walk; try again a
    // few times (nothing runs beside the reader, so this is never a loop in practice).
    let mut races = 0;
    loop {
        // SAFETY: `name` is NUL-terminated, `how` lives across the call and its size is passed.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                name.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if rc >= 0 {
            // The kernel returns an int; a wider value would not be a descriptor.
            let fd = RawFd::try_from(rc).map_err(|_| {
                io::Error::other(format!("openat2 returned {rc}, not a descriptor"))
            })?;
            // SAFETY: the kernel just handed us this descriptor and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) if races < 8 => races += 1,
            _ => return Err(e),
        }
    }
}

/// What an entry is, from its own inode (never a link's target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    File,
    Dir,
    Link,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Type {
    /// A few words for a finding's detail.
    pub fn word(self, mode: u32) -> &'static str {
        match self {
            Type::File if mode & 0o100 != 0 => "an executable file",
            Type::File => "a file",
            Type::Dir => "a directory",
            Type::Link => "a link",
            Type::Fifo => "a fifo",
            Type::Socket => "a socket",
            Type::CharDevice => "a character device",
            Type::BlockDevice => "a block device",
            Type::Unknown => "an entry of unknown type",
        }
    }
}

/// The parts of `struct stat` the reader uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: u64,
    /// Bytes allocated (`st_blocks` of 512 bytes): far fewer than `size` is a sparse file.
    pub allocated: u64,
    /// Last modification and status change, (seconds, nanoseconds): a file whose `fstat` differs
    /// after its content was read changed while it was read.
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stat {
    fn from(st: &libc::stat) -> Stat {
        Stat {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            size: st.st_size.max(0) as u64,
            allocated: (st.st_blocks.max(0) as u64).saturating_mul(512),
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    pub fn kind(&self) -> Type {
        match self.mode & libc::S_IFMT {
            libc::S_IFREG => Type::File,
            libc::S_IFDIR => Type::Dir,
            libc::S_IFLNK => Type::Link,
            libc::S_IFIFO => Type::Fifo,
            libc::S_IFSOCK => Type::Socket,
            libc::S_IFCHR => Type::CharDevice,
            libc::S_IFBLK => Type::BlockDevice,
            _ => Type::Unknown,
        }
    }

    /// The owner's execute bit: git's 100755.
    pub fn executable(&self) -> bool {
        self.mode & 0o100 != 0
    }

    pub fn word(&self) -> &'static str {
        self.kind().word(self.mode)
    }
}

/// A name as the kernel takes it. A listed name never holds a NUL; a declared one was checked.
pub fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Open a root (/work, /work/.git, or a test's temp dir) as a directory, following no link on the
/// way. It is a mountpoint in the container, so it may cross mounts.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let name = c_name(path.as_os_str().as_bytes())?;
    openat2(
        libc::AT_FDCWD,
        &name,
        DIR_FLAGS,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// Open the directory `name` beneath `dir`.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    openat2(dir.as_raw_fd(), name, DIR_FLAGS, BENEATH)
}

/// [`open_dir_at`] across mounts (a path of several names beneath `dir` too).
pub fn open_dir_any_mount(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    openat2(dir.as_raw_fd(), name, DIR_FLAGS, BENEATH_ANY_MOUNT)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated and `st` is large enough for the kernel to fill.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(Stat::from(unsafe { &st.assume_init() }))
}

/// `fstat(fd)`.
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is large enough for the kernel to fill.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(Stat::from(unsafe { &st.assume_init() }))
}

/// Open the regular file `name` beneath `dir` that `fstatat` showed as `expected`: refused unless
/// the open file is a regular file with the same device and inode (so a fifo, socket or device
/// is never opened, and nothing swapped in between is read). With the open file's own `fstat`,
/// whose size is the one its content is read against.
pub fn open_file_at(dir: BorrowedFd<'_>, name: &CStr, expected: &Stat) -> io::Result<(File, Stat)> {
    open_file_resolving(dir, name, expected, BENEATH)
}

/// [`open_file_at`] across mounts.
pub fn open_file_any_mount(
    dir: BorrowedFd<'_>,
    name: &CStr,
    expected: &Stat,
) -> io::Result<(File, Stat)> {
    open_file_resolving(dir, name, expected, BENEATH_ANY_MOUNT)
}

fn open_file_resolving(
    dir: BorrowedFd<'_>,
    name: &CStr,
    expected: &Stat,
    resolve: u64,
) -> io::Result<(File, Stat)> {
    if expected.kind() != Type::File {
        return Err(io::Error::other(format!(
            "not opened: {} is not a file",
            expected.word()
        )));
    }
    let fd = openat2(dir.as_raw_fd(), name, FILE_FLAGS, resolve)?;
    let open = stat_fd(std::os::fd::AsFd::as_fd(&fd))?;
    if open.kind() != Type::File || (open.dev, open.ino) != (expected.dev, expected.ino) {
        return Err(io::Error::other("the entry changed between stat and open"));
    }
    Ok((File::from(fd), open))
}

/// A link's target as stored, at most [`MAX_LINK_TARGET`] bytes.
pub fn read_link_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; MAX_LINK_TARGET + 1];
    // SAFETY: `name` is NUL-terminated and the kernel writes at most `buf.len()` bytes.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n > MAX_LINK_TARGET {
        return Err(io::Error::other(format!(
            "a link target longer than {MAX_LINK_TARGET} bytes"
        )));
    }
    buf.truncate(n);
    Ok(buf)
}

/// The names in a directory (never `.` or `..`), from its fd, at most `cap` of them; the flag is
/// false when there were more (the listing stops there).
pub fn list_dir(dir: BorrowedFd<'_>, cap: usize) -> io::Result<(Vec<CString>, bool)> {
    // u64 words: the kernel's records are 8-byte aligned within the buffer.
    let mut buf = vec![0u64; 4096];
    let mut names = Vec::new();
    loop {
        // SAFETY: the kernel writes at most the buffer's length in bytes into it.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len() * 8,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok((names, true));
        }
        // Positive here, and at most the buffer's length by getdents64's contract.
        let n = usize::try_from(n)
            .map_err(|_| io::Error::other(format!("getdents64 returned {n} bytes")))?;
        // SAFETY: a u64 buffer viewed as its bytes; the kernel filled the first `n`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        let mut at = 0;
        // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        while at < bytes.len() {
            let bad = || io::Error::other("a malformed directory record");
            let header = bytes.get(at..at + 19).ok_or_else(bad)?;
            let reclen = u16::from_ne_bytes([header[16], header[17]]) as usize;
            let record = bytes
                .get(at..at + reclen)
                .filter(|_| reclen >= 19)
                .ok_or_else(bad)?;
            let name = CStr::from_bytes_until_nul(&record[19..]).map_err(|_| bad())?;
            at += reclen;
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            if names.len() == cap {
                return Ok((names, false));
            }
            names.push(name.to_owned());
        }
    }
}

/// git's blob id of these bytes.
pub fn blob_of(bytes: &[u8]) -> [u8; 20] {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", bytes.len()).as_bytes());
    hasher.update(bytes);
    hasher.finalize().into()
}

/// git's blob id of an open file whose size is `size`, and the bytes actually read: the header
/// says `size`, so a count that differs means the content is not what was hashed (the caller
/// treats it as a change). Reading stops one buffer past `size`.
pub fn blob_of_file(file: &mut File, size: u64, buf: &mut [u8]) -> io::Result<([u8; 20], u64)> {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {size}\0").as_bytes());
    let mut read = 0u64;
    loop {
        let n = match file.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        read += n as u64;
        if read > size {
            break;
        }
    }
    Ok((hasher.finalize().into(), read))
}

/// Read a small file beneath `dir` without following links: `None` when it is longer than `max`.
pub fn read_small_at(dir: BorrowedFd<'_>, name: &CStr, max: usize) -> io::Result<Option<Vec<u8>>> {
    let stat = stat_at(dir, name)?;
    let (file, _) = open_file_at(dir, name, &stat)?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= max).then_some(bytes))
}
