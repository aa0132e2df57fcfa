//! Nonblocking socket calls the relay and the forwarder share: one recv(2) or send(2) that never
//! waits (`MSG_DONTWAIT`), and which of their errors only mean "not now".

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One recv(2) into `buf` without waiting.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv(2) writes at most `buf.len()` bytes into `buf`, which we own mutably.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One send(2) of `buf` without waiting.
pub fn send(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: send(2) reads at most `buf.len()` bytes from `buf`. MSG_NOSIGNAL: a gone peer is
    // EPIPE, never SIGPIPE.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Whether `e` only means "try again later".
pub fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}
