//! The opaque tunnel's bytes moved socket to socket through kernel pipes (splice(2)): each
//! direction fills its pipe from one socket and drains it into the other, so the bytes do not pass
//! through the proxy's memory (but for what follows TCP's urgent mark, [`fill`]) and the hop
//! costs no copy of its own (`cordon bench egress`).
//!
//! Each direction reads only into an empty pipe. An EAGAIN on the way in then never means the
//! pipe is full (a pipe's room is counted in pages, not bytes, so "full" could not be told
//! apart otherwise): it means the socket has nothing, or TCP's urgent mark is next, which
//! splice(2) never passes and recv(2) does ([`fill`]).
//!
//! A peer gone is EPIPE on the way out. splice(2) cannot pass MSG_NOSIGNAL, so the kernel also
//! raises SIGPIPE at the process: the proxy binary ignores it (Rust's runtime sets SIGPIPE to
//! SIG_IGN before `main`), and the error ends the tunnel as every failed write does.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::{self, MsgFlags, Shutdown};
use nix::unistd::pipe2;
use tokio::io::{Interest, Ready};
use tokio::net::{TcpStream, UnixStream};

/// SPLICE_F_NONBLOCK: the pipe's side never blocks (the sockets are nonblocking themselves, as
/// tokio makes them). SPLICE_F_MOVE: move the pages rather than copy them where the kernel can.
const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_NONBLOCK.union(SpliceFFlags::SPLICE_F_MOVE);

/// A tokio socket splice(2) can read from and write to: ready for an interest, and one
/// nonblocking call made under that interest (readiness cleared on EAGAIN).
pub(crate) trait Socket: AsFd + Sync {
    fn ready(
        &self,
        interest: Interest,
    ) -> impl std::future::Future<Output = io::Result<Ready>> + Send;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

/// Both tokio sockets a tunnel joins delegate to their own inherent methods.
macro_rules! socket {
    ($($stream:ty),*) => {$(
        impl Socket for $stream {
            fn ready(
                &self,
                interest: Interest,
            ) -> impl std::future::Future<Output = io::Result<Ready>> + Send {
                <$stream>::ready(self, interest)
            }
            fn try_io<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                <$stream>::try_io(self, interest, f)
            }
        }
    )*};
}

socket!(UnixStream, TcpStream);

/// One direction's kernel pipe.
pub(crate) struct Pipe {
    read_end: OwnedFd,
    write_end: OwnedFd,
    /// What one call moves at most: the pipe's size.
    size: usize,
}

impl Pipe {
    /// A pipe of `size` bytes. Where the kernel refuses that size (the user's pipe budget spent)
    /// the default one still relays every byte, in smaller steps.
    pub(crate) fn new(size: usize) -> io::Result<Pipe> {
        let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let size = libc::c_int::try_from(size)
            .ok()
            .and_then(|want| fcntl(&write_end, FcntlArg::F_SETPIPE_SZ(want)).ok())
            .and_then(|got| usize::try_from(got).ok())
            .unwrap_or(PIPE_DEFAULT);
        Ok(Pipe {
            read_end,
            write_end,
            size,
        })
    }
}

/// Linux's default pipe size (16 pages).
const PIPE_DEFAULT: usize = 64 * 1024;

/// What one splice did: moved bytes, or met the end of its input.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Moved(usize),
    Eof,
}

/// At most what one recv(2) takes past TCP's urgent mark: one page, which an empty pipe always
/// has room for (a write of at most `PIPE_BUF` bytes is whole or nothing).
const PAST_MARK: usize = 4096;

/// Fill the empty pipe from `from`: a splice, or, where splice takes nothing or sees an end, what
/// follows TCP's urgent mark. splice(2) never passes that mark: a tunnel stopped there would
/// stall until its idle bound, and with a FIN behind the mark splice answers 0 as if the stream
/// had ended. recv(2) leaves the urgent byte out, as any reader without SO_OOBINLINE does (and
/// the copying relay does), and reads on. Their count, 0 at the real EOF, or EAGAIN when there is
/// nothing.
fn fill(from: BorrowedFd<'_>, pipe: &Pipe) -> io::Result<usize> {
    match splice(from, None, &pipe.write_end, None, pipe.size, FLAGS) {
        Ok(0) | Err(nix::errno::Errno::EAGAIN) => {}
        other => return other.map_err(io::Error::from),
    }
    let mut buf = [0u8; PAST_MARK];
    let n = socket::recv(from.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT)?;
    if n > 0 && nix::unistd::write(&pipe.write_end, &buf[..n])? != n {
        return Err(io::Error::other("the pipe took part of what was read"));
    }
    Ok(n)
}

/// One nonblocking call under `socket`'s `interest`, awaited until it moves something, reaches
/// EOF, or fails.
async fn spliced<S: Socket>(
    socket: &S,
    interest: Interest,
    mut call: impl FnMut() -> io::Result<usize>,
) -> io::Result<Step> {
    loop {
        socket.ready(interest).await?;
        match socket.try_io(interest, &mut call) {
            Ok(0) => return Ok(Step::Eof),
            Ok(n) => return Ok(Step::Moved(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Shut down `fd`'s write half.
fn shutdown_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(socket::shutdown(fd.as_raw_fd(), Shutdown::Write)?)
}

/// Move one direction until `from` ends (then shut `to`'s write half) or either fails; every
/// move is reported to `touch` and counted in `count`, a failure set in `failed`.
pub(crate) async fn pump<F: Socket, T: Socket>(
    from: &F,
    to: &T,
    pipe: Pipe,
    touch: impl Fn(),
    count: &AtomicU64,
    failed: &AtomicBool,
) {
    let result: io::Result<()> = async {
        loop {
            let filled = spliced(from, Interest::READABLE, || fill(from.as_fd(), &pipe)).await?;
            let Step::Moved(mut held) = filled else {
                return shutdown_write(to.as_fd());
            };
            touch();
            while held > 0 {
                let (read_end, len) = (&pipe.read_end, held);
                let drain = move || {
                    splice(read_end, None, to.as_fd(), None, len, FLAGS).map_err(io::Error::from)
                };
                match spliced(to, Interest::WRITABLE, drain).await? {
                    Step::Moved(n) => {
                        held = held.saturating_sub(n);
                        count.fetch_add(n as u64, Ordering::Relaxed);
                        touch();
                    }
                    // Nothing left in the pipe to write: it cannot be, as `held` counts it.
                    Step::Eof => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                }
            }
        }
    }
    .await;
    if result.is_err() {
        failed.store(true, Ordering::Relaxed);
    }
}
