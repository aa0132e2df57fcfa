//! Act: the loopback forwarder, the agent's only way out. The container has no network but `lo`;
//! the vendor CLI's `HTTPS_PROXY` names `127.0.0.1:{port}`, and the init forwards each connection
//! accepted there to the egress proxy's unix socket (in the read-only egress dir), which applies
//! every egress rule. The forwarder itself decides nothing: it only moves bytes, bounded.
//!
//! - It listens on IPv4 loopback only, and is bound before the workload exists (so the workload
//!   can neither find the port free nor squat it; no `SO_REUSEPORT`, so nothing can share it).
//! - The socket is connected per accepted connection, never once at start: the proxy may start
//!   after the agent, or restart. A connect that fails (no socket yet, the proxy's backlog full)
//!   closes the accepted connection at once; the next connection tries again.
//! - At most [`Config::max`] connections at once; one more is closed at once and counted.
//! - One thread per connection relays both ways with poll(2) on both sockets (nonblocking calls,
//!   one kernel pipe of [`BUFFER`] per direction that splice(2) fills and drains, so no byte is
//!   copied through the init's memory; the directions independent of each other; a pipe that
//!   cannot be made ends the connection as an error). When one side reaches EOF, the other
//!   side's write half is shut down once what was read is delivered, and the other direction
//!   goes on; both done closes both. An error on either side closes both.
//!   No byte moving either way for [`Config::idle`] ends the connection (as the proxy's own idle
//!   bound does: a long one-way stream is not idle).
//! - Its threads start after Landlock and seccomp are in place (see `main`), so each inherits the
//!   init's domain and filters at clone(2); they inherit its blocked signal mask too, so every
//!   signal still reaches the supervision's signalfd. They share no lock with the supervision and
//!   end with the process (exit_group).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_contract::egress::MAX_FORWARDED;
use cordon_contract::policy::EgressForward;
use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::pipe2;

use crate::nonblocking::{recv, would_block};

/// No byte either way for this long ends a forwarded connection (the proxy's own idle bound).
pub const IDLE: Duration = Duration::from_secs(60);
/// The pipe of each direction of each connection (`cordon bench egress` here, when these were
/// user-space buffers: the upload ratio 0.84 at 64 KiB, 0.92 at 256 KiB; 64 connections at
/// 128 KiB hold 16 MiB of pipe pages, charged to the container's memory).
pub const BUFFER: usize = 128 * 1024;
/// The forwarder's threads need little stack (the bytes they move stay in the kernel); a small
/// reserve bounds their address space, and each is one task of the container's pids limit.
const STACK: usize = 256 * 1024;
/// How long the accept loop rests after a failed accept (out of descriptors or memory), so it
/// never spins.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Where the forwarder listens, what it forwards to, and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The loopback port (0: any free one, for tests).
    pub port: u16,
    /// The proxy's socket.
    pub socket: PathBuf,
    /// The most connections forwarded at once.
    pub max: usize,
    pub idle: Duration,
}

impl Config {
    /// The policy's forwarder with the contract's bounds.
    pub fn new(forward: &EgressForward) -> Config {
        Config {
            port: forward.port,
            socket: PathBuf::from(&forward.socket),
            max: MAX_FORWARDED,
            idle: IDLE,
        }
    }
}

/// What the forwarder did, counted.
#[derive(Debug, Default)]
pub struct Stats {
    pub accepted: AtomicU64,
    /// Forwarded connections open now.
    pub active: AtomicUsize,
    /// Closed at once: [`Config::max`] were open.
    pub busy: AtomicU64,
    /// Closed at once: no thread could be started for it (the pids limit).
    pub no_thread: AtomicU64,
    /// Closed at once: the proxy's socket did not take the connect.
    pub unreachable: AtomicU64,
    /// Ended with both sides done.
    pub closed: AtomicU64,
    /// Ended by the idle bound.
    pub idle: AtomicU64,
    /// Ended by an error on either side.
    pub failed: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A running forwarder. Its threads are detached: they end with the process.
#[derive(Debug)]
pub struct Forwarder {
    /// Where it listens.
    pub local: SocketAddrV4,
    /// Read by the tests; no init line carries the counts (a contract field would).
    #[cfg_attr(not(test), allow(dead_code))]
    pub stats: Arc<Stats>,
}

/// Bind `127.0.0.1:{port}` and start accepting. Fails only when it cannot listen (the port is
/// taken, no loopback) or no thread can be started; a missing proxy socket is not a failure.
pub fn start(config: Config) -> Result<Forwarder, String> {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, config.port);
    let listener = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    let local = match listener.local_addr() {
        Ok(SocketAddr::V4(local)) => local,
        Ok(other) => return Err(format!("bound {other}, not IPv4 loopback")),
        Err(e) => return Err(format!("local address of {addr}: {e}")),
    };
    let stats = Arc::new(Stats::default());
    let shared = Arc::clone(&stats);
    std::thread::Builder::new()
        .name("egress-accept".into())
        .stack_size(STACK)
        .spawn(move || accept_loop(&listener, &Arc::new(config), &shared))
        .map_err(|e| format!("accept thread: {e}"))?;
    Ok(Forwarder { local, stats })
}

/// A slot of the bound, given back when its connection ends (or never started).
struct Slot(Arc<Stats>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: &TcpListener, config: &Arc<Config>, stats: &Arc<Stats>) {
    loop {
        let tcp = match listener.accept() {
            Ok((tcp, _)) => tcp,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(_) => {
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        count(&stats.accepted);
        // Only this thread takes slots, so the check and the increment cannot race past the bound.
        if stats.active.load(Ordering::SeqCst) >= config.max {
            count(&stats.busy);
            drop(tcp);
            continue;
        }
        stats.active.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(Arc::clone(stats));
        let config = Arc::clone(config);
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .stack_size(STACK)
            .spawn(move || {
                serve(tcp, &config, &slot.0);
                drop(slot);
            });
        // A thread that did not start dropped its closure: the connection is closed, the slot
        // given back.
        if spawned.is_err() {
            count(&stats.no_thread);
        }
    }
}

fn serve(tcp: TcpStream, config: &Config, stats: &Stats) {
    let Ok(unix) = connect_unix(&config.socket) else {
        count(&stats.unreachable);
        return;
    };
    // The forwarder writes what it read as soon as it read it; coalescing is the ends' business.
    let _ = tcp.set_nodelay(true);
    // splice(2) into a socket blocks unless the socket itself is nonblocking.
    if tcp.set_nonblocking(true).is_err() {
        count(&stats.failed);
        return;
    }
    let end = relay(tcp.as_fd(), unix.as_fd(), config.idle);
    count(match end {
        End::Closed => &stats.closed,
        End::Idle => &stats.idle,
        End::Error => &stats.failed,
    });
}

// AF_UNIX is 1, which fits sa_family_t (u16).
#[allow(clippy::cast_possible_truncation)]
const AF_UNIX_FAMILY: libc::sa_family_t = libc::AF_UNIX as libc::sa_family_t;
// sockaddr_un is 110 bytes, which fits socklen_t (u32).
#[allow(clippy::cast_possible_truncation)]
pub(crate) const SOCKADDR_UN_LEN: libc::socklen_t =
    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;

/// The address of a named unix socket at `path`; `None` for a path no `sockaddr_un` holds (empty,
/// too long for its terminator, or holding NUL).
pub(crate) fn unix_address(path: &Path) -> Option<libc::sockaddr_un> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) address.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    // One byte stays zero: the path's terminator.
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return None;
    }
    addr.sun_family = AF_UNIX_FAMILY;
    for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    Some(addr)
}

/// Connect to a named unix socket without blocking: a full backlog is refused (EAGAIN) instead of
/// waiting, so a stuck proxy never holds a slot.
fn connect_unix(path: &Path) -> io::Result<UnixStream> {
    let addr = unix_address(path).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: socket(2) with integer arguments only.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor socket(2) just returned, owned by nothing else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: connect(2) reads `addr`, which lives for the call, within the length passed.
    let rc = unsafe {
        libc::connect(
            owned.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            SOCKADDR_UN_LEN,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixStream::from(owned))
}

/// Why a forwarded connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Both sides reached EOF and every byte was delivered.
    Closed,
    /// No byte moved either way for the idle bound.
    Idle,
    /// A read, write or shutdown failed on either side, or a peer went away with bytes undelivered.
    Error,
}

fn shutdown_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown(2) with integer arguments only.
    if unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// At most what one recv(2) takes past TCP's urgent mark: one page, which an empty pipe always
/// has room for (a write of at most `PIPE_BUF` bytes is whole or nothing).
const PAST_MARK: usize = 4096;

/// Take what follows TCP's urgent mark, where splice(2) stops for good: it never passes the mark,
/// so a socket stopped there would stay readable and be polled in a loop, and with a FIN behind
/// the mark splice answers 0 as if the stream had ended. recv(2) leaves the urgent byte out, as
/// any reader without SO_OOBINLINE does, and reads on. The bytes go into the empty pipe. Their
/// count, 0 at the real EOF, or EAGAIN when there is nothing at all.
fn past_urgent_mark(from: BorrowedFd<'_>, pipe: BorrowedFd<'_>) -> io::Result<usize> {
    let mut buf = [0u8; PAST_MARK];
    let n = recv(from, &mut buf)?;
    if n > 0 && nix::unistd::write(pipe, &buf[..n])? != n {
        return Err(io::Error::other("the pipe took part of what was read"));
    }
    Ok(n)
}

/// One direction: bytes spliced from `from` into a kernel pipe and not yet spliced on to `to`.
/// splice(2) moves page references, so the bytes never pass through the init's memory: each hop
/// costs no copy of its own (`cordon bench egress`).
struct Pipe<'a> {
    from: BorrowedFd<'a>,
    to: BorrowedFd<'a>,
    read_end: OwnedFd,
    write_end: OwnedFd,
    /// Bytes in the pipe: spliced in and not yet out.
    held: usize,
    /// `from` reached EOF.
    eof: bool,
    /// `to`'s write half is shut down (or `to` can take no more): this direction is done.
    done: bool,
}

/// SPLICE_F_NONBLOCK makes the pipe's side nonblocking (the sockets are O_NONBLOCK themselves);
/// SPLICE_F_MOVE asks for the pages to be moved, not copied.
const SPLICE: SpliceFFlags = SpliceFFlags::SPLICE_F_NONBLOCK.union(SpliceFFlags::SPLICE_F_MOVE);

impl<'a> Pipe<'a> {
    fn new(from: BorrowedFd<'a>, to: BorrowedFd<'a>) -> io::Result<Pipe<'a>> {
        let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // A larger pipe moves more per call. Where the kernel refuses it (the user's pipe budget
        // spent), the default size still relays every byte, in smaller steps.
        if let Ok(size) = libc::c_int::try_from(BUFFER) {
            let _ = fcntl(&write_end, FcntlArg::F_SETPIPE_SZ(size));
        }
        Ok(Pipe {
            from,
            to,
            read_end,
            write_end,
            held: 0,
            eof: false,
            done: false,
        })
    }

    /// Only an empty pipe is filled: an EAGAIN then means `from` has nothing, never that the pipe
    /// is full (its room is counted in pages, not bytes), so a readable socket is never polled
    /// while nothing can be taken from it.
    fn wants_read(&self) -> bool {
        !self.eof && self.held == 0
    }

    fn pending(&self) -> bool {
        self.held > 0
    }

    /// Read if `readable`, write what is pending, shut `to` down once EOF is delivered. Returns
    /// whether a byte moved.
    fn step(&mut self, readable: bool) -> io::Result<bool> {
        let mut moved = false;
        if readable && self.wants_read() {
            let filled = match splice(self.from, None, &self.write_end, None, BUFFER, SPLICE) {
                // Readable, yet splice takes nothing (or sees an end): TCP's urgent mark may be
                // next, where splice stops even with bytes and a FIN behind it.
                Ok(0) | Err(Errno::EAGAIN) => past_urgent_mark(self.from, self.write_end.as_fd()),
                other => other.map_err(io::Error::from),
            };
            match filled {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.held += n;
                    moved = true;
                }
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if self.pending() {
            // A peer gone is EPIPE here. splice(2) to a socket cannot pass MSG_NOSIGNAL, so the
            // kernel also raises SIGPIPE at this thread, where it stays blocked and pending (the
            // init's mask) and ends with the thread; the supervision's signalfd never sees it.
            match splice(&self.read_end, None, self.to, None, self.held, SPLICE) {
                Ok(n) => {
                    self.held = self.held.saturating_sub(n);
                    moved |= n > 0;
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if self.eof && !self.pending() && !self.done {
            shutdown_write(self.to)?;
            self.done = true;
        }
        Ok(moved)
    }

    /// What this direction waits for on `from` and on `to`.
    fn interest(&self) -> (PollFlags, PollFlags) {
        let read = if self.wants_read() {
            PollFlags::POLLIN
        } else {
            PollFlags::empty()
        };
        let write = if self.pending() {
            PollFlags::POLLOUT
        } else {
            PollFlags::empty()
        };
        (read, write)
    }
}

/// Relay between `tcp` and `unix` until both directions are done, either side fails, or nothing
/// moves for `idle`.
fn relay(tcp: BorrowedFd<'_>, unix: BorrowedFd<'_>, idle: Duration) -> End {
    let (Ok(mut up), Ok(mut down)) = (Pipe::new(tcp, unix), Pipe::new(unix, tcp)) else {
        return End::Error;
    };
    let mut last = Instant::now();
    // Anything already waiting is read before the first poll.
    let (mut tcp_ready, mut unix_ready) = (PollFlags::POLLIN, PollFlags::POLLIN);
    loop {
        let readable = |r: PollFlags| {
            r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
        };
        let moved = match (
            up.step(readable(tcp_ready)),
            down.step(readable(unix_ready)),
        ) {
            (Ok(a), Ok(b)) => a || b,
            _ => return End::Error,
        };
        if moved {
            last = Instant::now();
        }
        // A peer that hung up can take no more: bytes still for it are lost (an error); with none,
        // its direction is done, and the other one drains to its EOF.
        for (pipe, ready) in [(&mut up, unix_ready), (&mut down, tcp_ready)] {
            if ready.contains(PollFlags::POLLHUP) && !pipe.done {
                if pipe.pending() {
                    return End::Error;
                }
                pipe.eof = true;
                pipe.done = true;
            }
        }
        if up.done && down.done {
            return End::Closed;
        }
        let (up_read, up_write) = up.interest();
        let (down_read, down_write) = down.interest();
        let tcp_wants = up_read | down_write;
        let unix_wants = down_read | up_write;
        // A socket with nothing to wait for is left out: poll would report its hangup forever.
        let mut fds = Vec::with_capacity(2);
        if !tcp_wants.is_empty() {
            fds.push(PollFd::new(tcp, tcp_wants));
        }
        if !unix_wants.is_empty() {
            fds.push(PollFd::new(unix, unix_wants));
        }
        if fds.is_empty() {
            // Unreachable (a direction not done either reads or has bytes pending); end cleanly.
            return End::Closed;
        }
        let left = (last + idle).saturating_duration_since(Instant::now());
        if left.is_zero() {
            return End::Idle;
        }
        let timeout = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, timeout) {
            Ok(0) => {
                if last.elapsed() >= idle {
                    return End::Idle;
                }
                tcp_ready = PollFlags::empty();
                unix_ready = PollFlags::empty();
                continue;
            }
            Ok(_) => {}
            Err(Errno::EINTR) => {
                tcp_ready = PollFlags::empty();
                unix_ready = PollFlags::empty();
                continue;
            }
            Err(_) => return End::Error,
        }
        let revents = |fds: &[PollFd<'_>], fd: BorrowedFd<'_>| {
            fds.iter()
                .find(|p| p.as_fd().as_raw_fd() == fd.as_raw_fd())
                .and_then(PollFd::revents)
                .unwrap_or(PollFlags::empty())
        };
        tcp_ready = revents(&fds, tcp);
        unix_ready = revents(&fds, unix);
        if (tcp_ready | unix_ready).contains(PollFlags::POLLERR) {
            return End::Error;
        }
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
