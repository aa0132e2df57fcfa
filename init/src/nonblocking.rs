//! Nonblocking socket calls the relay and the forwarder share: one recv(2) or send(2) that never
//! waits (`MSG_DONTWAIT`), and which of their errors only mean "not now".

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::sys::socket::{self, MsgFlags};

/// One recv(2) into `buf` without waiting.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    Ok(socket::recv(fd.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT)?)
}

/// One send(2) of `buf` without waiting. MSG_NOSIGNAL: a gone peer is EPIPE, never SIGPIPE.
pub fn send(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(socket::send(
        fd.as_raw_fd(),
        buf,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    )?)
}

/// Whether `e` only means "try again later".
pub fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}
