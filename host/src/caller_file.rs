//! Reading a file a caller named: a prompt file, a schema, a storage handle, the source
//! repository's object store and refs. Nothing a caller names can make cordon block, follow a
//! link, open a device, or read without a bound.
//!
//! - the path is checked with `lstat` first, so a device, a FIFO or a socket is refused without
//!   being opened;
//! - it is then opened with `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY`, so a
//!   FIFO swapped in since cannot block the open, a link swapped in is not followed, and a
//!   terminal cannot become ours;
//! - `fstat` on the opened descriptor must say regular file (that is the check that counts);
//! - at most `max + 1` bytes are read, and more than `max` is refused.
//!
//! Every refusal is [`Error::Input`]: what the file was for, its path and what was found, with a
//! stable id: `input-not-regular` (a FIFO, a directory, a symlink, a device, a socket),
//! `input-too-large` (`N+ bytes, the limit is M`), `input-unreadable` (missing, no permission,
//! an I/O error; the OS error is in the message) and `input-not-utf8` (text that must be UTF-8).

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

pub use crate::error::InputFault;

/// What a file that is not a regular file is.
fn kind(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_symlink() {
        "a symlink"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "an unknown kind of file"
    }
}

/// A regular file a caller named, opened and not yet read.
#[derive(Debug)]
pub struct Opened {
    what: &'static str,
    path: String,
    file: File,
    meta: Metadata,
}

fn refused(what: &'static str, path: &Path, fault: InputFault) -> Error {
    Error::Input {
        what,
        path: path.display().to_string(),
        fault,
    }
}

fn unreadable(e: &std::io::Error) -> InputFault {
    InputFault::Unreadable {
        reason: e.to_string(),
        errno: e.raw_os_error(),
    }
}

/// Open the file a caller named at `path` (`what` says what it is for, in errors): a regular
/// file, not through a link, without blocking.
pub fn open(what: &'static str, path: &Path) -> Result<Opened> {
    let fail = |fault| refused(what, path, fault);
    // Refuse what is not a regular file before opening it (opening a device can do things).
    let before = std::fs::symlink_metadata(path).map_err(|e| fail(unreadable(&e)))?;
    if !before.is_file() {
        return Err(fail(InputFault::NotRegular(kind(before.file_type()))));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // Replaced by a link since the lstat.
            Some(libc::ELOOP) => fail(InputFault::NotRegular("a symlink")),
            _ => fail(unreadable(&e)),
        })?;
    // What was opened is what counts.
    let meta = file.metadata().map_err(|e| fail(unreadable(&e)))?;
    if !meta.is_file() {
        return Err(fail(InputFault::NotRegular(kind(meta.file_type()))));
    }
    Ok(Opened {
        what,
        path: path.display().to_string(),
        file,
        meta,
    })
}

impl Opened {
    /// Its hard link count (when opened).
    pub fn links(&self) -> u64 {
        self.meta.nlink()
    }

    /// Its size when opened (it may change; [`Opened::read`] holds its bound regardless).
    pub fn len(&self) -> u64 {
        self.meta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meta.len() == 0
    }

    /// The opened file, for a caller that streams it (with its own bound).
    pub fn into_file(self) -> File {
        self.file
    }

    fn fail(&self, fault: InputFault) -> Error {
        Error::Input {
            what: self.what,
            path: self.path.clone(),
            fault,
        }
    }

    /// Read it whole: at most `max` bytes, else `input-too-large` (a file already larger when
    /// opened is refused without reading).
    pub fn read(self, max: usize) -> Result<Vec<u8>> {
        let limit = u64::try_from(max).unwrap_or(u64::MAX);
        if self.meta.len() > limit {
            return Err(self.fail(InputFault::TooLarge {
                at_least: self.meta.len(),
                limit,
            }));
        }
        let expected = usize::try_from(self.meta.len()).unwrap_or(max).min(max);
        let mut bytes = Vec::with_capacity(expected.saturating_add(1));
        (&self.file)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| self.fail(unreadable(&e)))?;
        if bytes.len() > max {
            return Err(self.fail(InputFault::TooLarge {
                at_least: bytes.len() as u64,
                limit,
            }));
        }
        Ok(bytes)
    }
}

/// Read the file a caller named at `path`: a regular file, not through a link, opened without
/// blocking, at most `max` bytes (see the module's rules; `what` names it in errors).
pub fn read(what: &'static str, path: &Path, max: usize) -> Result<Vec<u8>> {
    open(what, path)?.read(max)
}

/// [`read`], and the bytes must be UTF-8 (`input-not-utf8`).
pub fn read_utf8(what: &'static str, path: &Path, max: usize) -> Result<String> {
    let bytes = read(what, path, max)?;
    String::from_utf8(bytes).map_err(|e| {
        refused(
            what,
            path,
            InputFault::NotUtf8 {
                at: e.utf8_error().valid_up_to(),
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A fresh directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("cordon-caller-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid C string; mkfifo touches no memory of ours.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// `read` on another thread: its result, or None when it did not return within `within`
    /// (the thread is left blocked; the test fails instead of hanging).
    fn read_within(path: &Path, max: usize, within: Duration) -> Option<Result<Vec<u8>>> {
        let (tx, rx) = mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(read("test file", &path, max));
        });
        rx.recv_timeout(within).ok()
    }

    fn fault(result: Result<Vec<u8>>) -> (&'static str, String) {
        match result {
            Err(e @ Error::Input { .. }) => (e.id(), e.to_string()),
            Err(other) => panic!("not an input error: {other:?}"),
            Ok(bytes) => panic!("read {} bytes", bytes.len()),
        }
    }

    #[test]
    fn a_regular_file_at_the_bound_is_read_and_one_byte_more_is_refused() {
        let dir = scratch("bound");
        let path = dir.join("prompt");
        std::fs::write(&path, vec![b'a'; 100]).unwrap();
        assert_eq!(read("test file", &path, 100).unwrap(), vec![b'a'; 100]);
        assert_eq!(read("test file", &path, 1000).unwrap().len(), 100);
        let (id, message) = fault(read("test file", &path, 99));
        assert_eq!(id, "input-too-large");
        assert!(
            message.contains("100+ bytes, the limit is 99") && message.contains("/prompt"),
            "{message}"
        );
        // procfs says 0 bytes whatever it holds: the bound is on what is read.
        let (id, message) = fault(read("test file", Path::new("/proc/self/status"), 10));
        assert_eq!(id, "input-too-large");
        assert!(message.contains("11+ bytes, the limit is 10"), "{message}");
        // An empty file is a regular file too.
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read("test file", &path, 0).unwrap(), Vec::<u8>::new());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dev_zero_is_refused_without_reading() {
        let started = Instant::now();
        let result = read_within(Path::new("/dev/zero"), 1024, Duration::from_secs(5))
            .expect("reading /dev/zero did not return within 5 s");
        let (id, message) = fault(result);
        assert_eq!(id, "input-not-regular");
        assert!(
            message.contains("/dev/zero") && message.contains("a character device"),
            "{message}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = scratch("fifo");
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let started = Instant::now();
        let result = read_within(&fifo, 1024, Duration::from_secs(5));
        // Unblock a reader the old code left waiting, so the thread ends.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        let result = result.expect("reading a FIFO blocked (no answer within 5 s)");
        let (id, message) = fault(result);
        assert_eq!(id, "input-not-regular");
        assert!(message.contains("a FIFO"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_is_refused_not_followed() {
        let dir = scratch("symlink");
        let target = dir.join("target");
        std::fs::write(&target, b"secret").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (id, message) = fault(read("test file", &link, 1024));
        assert_eq!(id, "input-not-regular");
        assert!(message.contains("a symlink"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = scratch("dir");
        let (id, message) = fault(read("test file", &dir, 1024));
        assert_eq!(id, "input-not-regular");
        assert!(message.contains("a directory"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_file_is_refused_with_its_id() {
        let dir = scratch("missing");
        let (id, message) = fault(read("test file", &dir.join("absent"), 1024));
        assert_eq!(id, "input-unreadable");
        assert!(
            message.contains("absent") && message.contains("No such file"),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn text_must_be_utf8() {
        let dir = scratch("utf8");
        let path = dir.join("prompt");
        std::fs::write(&path, b"ok \xff").unwrap();
        let e = read_utf8("test file", &path, 1024).unwrap_err();
        assert_eq!(e.id(), "input-not-utf8");
        std::fs::write(&path, "é ok").unwrap();
        assert_eq!(read_utf8("test file", &path, 1024).unwrap(), "é ok");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
