//! The `relay` role: the approved commands' socket inside a helper container, bridged to the host
//! over this process's own stdio.
//!
//! The host controller cannot listen on [`SOCKET`] itself (no host path is mounted into a
//! container), so the relay (the allocation's uid, no capability, no network, the commands
//! directory a tmpfs volume it mounts writable and the agent read-only) listens there and moves
//! each call to the host and its answer back. The host attaches to the relay's stdio (stdin open,
//! not a TTY): protocol lines on stdout and stdin only, diagnostics on stderr.
//!
//! - Bound once, with a small backlog ([`BACKLOG`]): a stale socket at the path is removed first,
//!   anything else there (a file, a directory, a link) is left in place and refused. The socket is
//!   `0600` (the agent runs as the same uid). Once it listens: [`ToHost::Listening`].
//! - Connections are served one at a time, in the order they were accepted (calls are serial in an
//!   invocation); the next waits in the backlog.
//! - A connection sends one line of at most [`MAX_CALL_LINE`] bytes (its newline included) within
//!   the call deadline ([`CALL_DEADLINE`]); anything after the newline is ignored. A peer that
//!   sends nothing, too much, no newline, or a line [`parse_call`] refuses is answered
//!   `command-malformed` (if it is still there to read it) and closed; the host never hears of it.
//! - A call is [`ToHost::Call`] with the next sequence number (from 1), and the host's one line
//!   [`FromHost`] for that number carries the [`Answer`], written to the peer as one line (within
//!   the call deadline: a peer that does not read is closed). If the peer hangs up first, the host
//!   is told [`ToHost::Cancel`] and the relay still waits for that number's answer (and discards
//!   it) before it serves anyone else: the host decides when the command is gone.
//! - The host is trusted: a line from it that is malformed, over-long, for another number, or
//!   written with no call outstanding is a broken stream, a `{"failure":...}` line on stderr and
//!   exit code 1. Its EOF ends the relay with 0 (the host is done), as TERM, INT or HUP do.
//! - Every read is bounded: the call line by [`MAX_CALL_LINE`], the host's line by
//!   [`MAX_ANSWER_LINE`]; nothing else is buffered.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use cordon_contract::command::{
    parse_call, Answer, Call, CallRefusal, FromHost, ToHost, MAX_ANSWER_LINE, MAX_CALL_LINE, SOCKET,
};
use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::SigSet;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::nonblocking::{recv, send, would_block};

/// How long a connection has to send its call line, and to take its answer.
pub const CALL_DEADLINE: Duration = Duration::from_secs(5);
/// Connections waiting while one is served, at most (more are refused by the kernel).
pub const BACKLOG: libc::c_int = 4;
/// The exit code of a broken host stream (or a relay that could not listen).
pub const EXIT_FAILURE: i32 = 1;
/// The host's stream is read this much at a time (its line is still bounded whole).
const CHUNK: usize = 64 * 1024;
/// How long the accept loop rests after a failed accept (out of descriptors or memory).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The diagnostic line on stderr when the relay fails: `{"failure":"..."}`, its newline included.
pub fn failure_line(reason: &str) -> String {
    let mut line = serde_json::json!({ "failure": reason }).to_string();
    line.push('\n');
    line
}

/// How the relay ended without a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The host closed its stream.
    HostDone,
    /// TERM, INT or HUP.
    Stopped,
}

/// `cordon-init relay [SOCKET_PATH]`: serve until the host is done or a stop signal; exit 0 then,
/// 1 on a broken host stream.
pub fn main(mask: &SigSet) -> ! {
    if std::process::id() != 1 {
        crate::refuse(
            cordon_contract::Id::InitEntrypoint,
            "pid 1",
            format!("pid {}", std::process::id()),
        );
    }
    let args: Vec<String> = std::env::args().skip(2).take(2).collect();
    let path = match args.as_slice() {
        [] => SOCKET,
        [path] => path.as_str(),
        _ => exit_failure("relay takes at most one argument, the socket's path"),
    };
    crate::close_inherited_fds();
    // Nothing this process creates is for anyone else (the socket is chmod'ed as well).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let stop = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .unwrap_or_else(|e| exit_failure(&format!("signalfd: {e}")));
    // Unbuffered copies of fds 0 and 1: a buffer poll(2) cannot see would hide the host's line.
    let stdio = |fd: BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map(std::fs::File::from)
            .unwrap_or_else(|e| exit_failure(&format!("stdio: {e}")))
    };
    let host_in = stdio(io::stdin().as_fd());
    let host_out = stdio(io::stdout().as_fd());
    match serve(
        Path::new(path),
        CALL_DEADLINE,
        host_in,
        host_out,
        Some(&stop),
    ) {
        Ok(_) => std::process::exit(0),
        Err(reason) => exit_failure(&reason),
    }
}

fn exit_failure(reason: &str) -> ! {
    let _ = io::stderr()
        .lock()
        .write_all(failure_line(reason).as_bytes());
    std::process::exit(EXIT_FAILURE);
}

/// Listen at `path`, say so on `host_out`, then serve connections one at a time until the host's
/// EOF on `host_in` or a stop signal on `stop`. `Err` is a broken host stream (or no socket).
pub fn serve<R: Read + AsFd, W: Write>(
    path: &Path,
    deadline: Duration,
    host_in: R,
    host_out: W,
    stop: Option<&SignalFd>,
) -> Result<End, String> {
    let listener = bind(path)?;
    let mut relay = Relay {
        listener,
        host_in: HostIn::new(host_in),
        host_out,
        stop,
        deadline,
        seq: 0,
    };
    relay.say(&ToHost::Listening)?;
    loop {
        let conn = match relay.next_connection()? {
            Next::Connection(conn) => conn,
            Next::End(end) => return Ok(end),
        };
        if let Some(end) = relay.handle(&conn)? {
            return Ok(end);
        }
    }
}

/// Bind and listen at `path` (mode 0600, backlog [`BACKLOG`], nonblocking accepts). A socket
/// already there (a previous relay's) is removed; anything else is refused and left in place.
pub fn bind(path: &Path) -> Result<UnixListener, String> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)
            .map_err(|e| format!("removing the stale socket {shown}: {e}"))?,
        Ok(meta) => {
            return Err(format!(
                "{shown} exists and is not a socket ({:?}): left in place",
                meta.file_type()
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    let addr = crate::forward::unix_address(path)
        .ok_or_else(|| format!("{shown} is not a unix socket path"))?;
    // SAFETY: socket(2) with integer arguments only.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a descriptor socket(2) just returned, owned by nothing else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: bind(2) reads `addr`, which lives for the call, within the length passed.
    let rc = unsafe {
        libc::bind(
            owned.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            crate::forward::SOCKADDR_UN_LEN,
        )
    };
    if rc != 0 {
        return Err(format!("bind {shown}: {}", io::Error::last_os_error()));
    }
    // Before listen(2): until then a connect is refused, so nobody connects through a wider mode.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod 0600 {shown}: {e}"))?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.file_type().is_socket() || meta.mode() & 0o7777 != 0o600 {
        return Err(format!(
            "{shown} is not the socket just bound with mode 0600 (mode {:o})",
            meta.mode()
        ));
    }
    // SAFETY: listen(2) with integer arguments only, on the descriptor owned above.
    if unsafe { libc::listen(owned.as_raw_fd(), BACKLOG) } != 0 {
        return Err(format!("listen {shown}: {}", io::Error::last_os_error()));
    }
    let listener = UnixListener::from(owned);
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("nonblocking {shown}: {e}"))?;
    Ok(listener)
}

/// The host's stream, read into one buffer bounded by [`MAX_ANSWER_LINE`].
struct HostIn<R> {
    from: R,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    chunk: Box<[u8]>,
}

impl<R: Read + AsFd> HostIn<R> {
    fn new(from: R) -> HostIn<R> {
        HostIn {
            from,
            buf: Vec::new(),
            scanned: 0,
            chunk: vec![0; CHUNK].into_boxed_slice(),
        }
    }

    /// One read(2), after poll(2) said the stream is readable. Returns false at EOF.
    fn read_once(&mut self) -> Result<bool, String> {
        let room = MAX_ANSWER_LINE.saturating_sub(self.buf.len());
        if room == 0 {
            return Err(format!(
                "the host's line is longer than {MAX_ANSWER_LINE} bytes"
            ));
        }
        let want = room.min(self.chunk.len());
        let n = loop {
            match self.from.read(&mut self.chunk[..want]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the host's stream: {e}")),
            }
        };
        if n == 0 {
            return Ok(false);
        }
        // Grow to what is needed, doubling, never past the bound.
        let needed = self.buf.len() + n;
        if needed > self.buf.capacity() {
            let target = needed
                .max(self.buf.capacity().saturating_mul(2))
                .min(MAX_ANSWER_LINE);
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(true)
    }

    /// A complete line (without its newline) when one is buffered; `Err` when the bound is reached
    /// without one.
    fn line(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(at) => {
                let end = self.scanned + at;
                let rest = self.buf.split_off(end + 1);
                let mut line = std::mem::replace(&mut self.buf, rest);
                line.pop();
                self.scanned = 0;
                Ok(Some(line))
            }
            None if self.buf.len() >= MAX_ANSWER_LINE => Err(format!(
                "the host's line is longer than {MAX_ANSWER_LINE} bytes"
            )),
            None => {
                self.scanned = self.buf.len();
                Ok(None)
            }
        }
    }
}

enum Next {
    Connection(UnixStream),
    End(End),
}

/// What waiting woke up to.
enum Woke {
    Stop,
    Timeout,
    /// The revents of the fds waited on, in their order.
    Ready([PollFlags; 2]),
}

/// What a connection sent.
enum Got {
    Call(Call),
    Malformed { expected: String, observed: String },
    Stop,
}

struct Relay<'s, R, W> {
    listener: UnixListener,
    host_in: HostIn<R>,
    host_out: W,
    stop: Option<&'s SignalFd>,
    deadline: Duration,
    seq: u64,
}

/// The peer shut down its writing or closed (nix names no such flag; Linux has had it since 2.6.17).
const RDHUP: PollFlags = PollFlags::from_bits_retain(libc::POLLRDHUP);
const GONE: PollFlags = PollFlags::POLLHUP
    .union(PollFlags::POLLERR)
    .union(PollFlags::POLLNVAL);

impl<R: Read + AsFd, W: Write> Relay<'_, R, W> {
    /// Write one line on the host's stream and flush it.
    fn say(&mut self, line: &ToHost) -> Result<(), String> {
        let text = line.line()?;
        self.host_out
            .write_all(text.as_bytes())
            .and_then(|()| self.host_out.flush())
            .map_err(|e| format!("writing to the host: {e}"))
    }

    /// Wait for `fds` (at most two) and the stop signals, until `until` when given.
    fn wait(
        &self,
        fds: &[(BorrowedFd<'_>, PollFlags)],
        until: Option<Instant>,
    ) -> Result<Woke, String> {
        let timeout: libc::c_int = match until {
            None => -1,
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(Woke::Timeout);
                }
                // Rounded up: poll(2) never wakes before `until`.
                libc::c_int::try_from(left.as_nanos().div_ceil(1_000_000))
                    .unwrap_or(libc::c_int::MAX)
            }
        };
        // poll(2) itself, not nix's: nix reports no revents at all when POLLRDHUP is among them.
        // A negative fd is an entry poll(2) skips.
        let entry = |fd: Option<BorrowedFd<'_>>, events: PollFlags| libc::pollfd {
            fd: fd.map_or(-1, |fd| fd.as_raw_fd()),
            events: events.bits(),
            revents: 0,
        };
        let first = fds.first().copied();
        let second = fds.get(1).copied();
        let mut polled = [
            entry(
                first.map(|(fd, _)| fd),
                first.map_or(PollFlags::empty(), |(_, e)| e),
            ),
            entry(
                second.map(|(fd, _)| fd),
                second.map_or(PollFlags::empty(), |(_, e)| e),
            ),
            entry(self.stop.map(AsFd::as_fd), PollFlags::POLLIN),
        ];
        // SAFETY: poll(2) reads and writes the three entries of `polled`, which lives for the call;
        // every fd in it is borrowed for at least as long.
        let rc = unsafe { libc::poll(polled.as_mut_ptr(), 3, timeout) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(Woke::Ready([PollFlags::empty(); 2]));
            }
            return Err(format!("poll: {e}"));
        }
        if rc == 0 {
            return Ok(match until {
                Some(until) if Instant::now() >= until => Woke::Timeout,
                _ => Woke::Ready([PollFlags::empty(); 2]),
            });
        }
        let [first, second, stop] = polled.map(|p| PollFlags::from_bits_retain(p.revents));
        if !stop.is_empty() && self.stopped()? {
            return Ok(Woke::Stop);
        }
        Ok(Woke::Ready([first, second]))
    }

    /// Read every pending signal: whether TERM, INT or HUP was among them.
    fn stopped(&self) -> Result<bool, String> {
        let Some(stop) = self.stop else {
            return Ok(false);
        };
        let mut stopped = false;
        loop {
            match stop.read_signal() {
                Ok(Some(info)) => {
                    let signo = i32::try_from(info.ssi_signo).unwrap_or(0);
                    stopped |= [libc::SIGTERM, libc::SIGINT, libc::SIGHUP].contains(&signo);
                }
                Ok(None) => return Ok(stopped),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(format!("signalfd read: {e}")),
            }
        }
    }

    /// Wait for the next connection, watching the host's stream: no call is outstanding, so its
    /// EOF ends the relay and anything it writes is a broken stream.
    fn next_connection(&mut self) -> Result<Next, String> {
        loop {
            let fds = [
                (self.host_in.from.as_fd(), PollFlags::POLLIN),
                (self.listener.as_fd(), PollFlags::POLLIN),
            ];
            let [host, listener] = match self.wait(&fds, None)? {
                Woke::Stop => return Ok(Next::End(End::Stopped)),
                Woke::Timeout => continue,
                Woke::Ready(ready) => ready,
            };
            if !host.is_empty() {
                if !self.host_in.read_once()? {
                    return Ok(Next::End(End::HostDone));
                }
                return Err(format!(
                    "the host wrote {} bytes with no call outstanding",
                    self.host_in.buf.len()
                ));
            }
            if listener.is_empty() {
                continue;
            }
            match self.listener.accept() {
                Ok((conn, _)) => return Ok(Next::Connection(conn)),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(_) => std::thread::sleep(ACCEPT_BACKOFF),
            }
        }
    }

    /// Serve one connection to its end. `Some` when the relay ends.
    fn handle(&mut self, conn: &UnixStream) -> Result<Option<End>, String> {
        let call = match self.read_call(conn)? {
            Got::Call(call) => call,
            Got::Stop => return Ok(Some(End::Stopped)),
            Got::Malformed { expected, observed } => {
                let refusal = Answer::Refused {
                    refusal: CallRefusal::CommandMalformed,
                    expected,
                    observed,
                };
                let line = answer_line(&refusal)?;
                return Ok(self.deliver(conn, &line)?.then_some(End::Stopped));
            }
        };
        self.seq += 1;
        let seq = self.seq;
        self.say(&ToHost::Call { seq, call })?;
        match self.await_answer(seq, conn)? {
            Awaited::Answer(answer) => {
                let line = answer_line(&answer)?;
                Ok(self.deliver(conn, &line)?.then_some(End::Stopped))
            }
            Awaited::Discarded => Ok(None),
            Awaited::End(end) => Ok(Some(end)),
        }
    }

    /// Read the call line: at most [`MAX_CALL_LINE`] bytes, its newline included, within the
    /// deadline.
    fn read_call(&self, conn: &UnixStream) -> Result<Got, String> {
        let until = Instant::now() + self.deadline;
        let mut buf = [0u8; MAX_CALL_LINE];
        let mut len = 0;
        let expected = || {
            format!(
                "one JSON line {{\"name\":\"...\"}} of at most {MAX_CALL_LINE} bytes within {} ms",
                self.deadline.as_millis()
            )
        };
        let malformed = |observed: String| Got::Malformed {
            expected: expected(),
            observed,
        };
        loop {
            match recv(conn.as_fd(), &mut buf[len..]) {
                Ok(0) => {
                    return Ok(malformed(format!(
                        "the connection closed after {len} bytes, before a newline"
                    )))
                }
                Ok(n) => {
                    if let Some(at) = buf[len..len + n].iter().position(|&b| b == b'\n') {
                        let line = &buf[..len + at];
                        return Ok(match parse_call(line) {
                            Ok(call) => Got::Call(call),
                            Err(e) => malformed(e),
                        });
                    }
                    len += n;
                    if len >= buf.len() {
                        return Ok(malformed(format!(
                            "{len} bytes without a newline (too long)"
                        )));
                    }
                }
                Err(e) if would_block(&e) => {
                    match self.wait(&[(conn.as_fd(), PollFlags::POLLIN)], Some(until))? {
                        Woke::Stop => return Ok(Got::Stop),
                        Woke::Timeout => {
                            return Ok(malformed(format!(
                                "{len} bytes without a newline when the deadline passed"
                            )))
                        }
                        Woke::Ready(_) => {}
                    }
                }
                Err(e) => return Ok(malformed(format!("the connection failed: {e}"))),
            }
        }
    }

    /// Wait for the host's answer to `seq`, telling it when the peer hangs up first.
    fn await_answer(&mut self, seq: u64, conn: &UnixStream) -> Result<Awaited, String> {
        let mut cancelled = false;
        loop {
            if let Some(line) = self.host_in.line()? {
                let from = FromHost::parse(&line)
                    .map_err(|e| format!("the host's line for {seq}: {e}"))?;
                if from.seq != seq {
                    return Err(format!(
                        "the host answered call {} while call {seq} was outstanding",
                        from.seq
                    ));
                }
                if !self.host_in.buf.is_empty() {
                    return Err(format!("the host wrote past its answer to call {seq}"));
                }
                return Ok(if cancelled {
                    Awaited::Discarded
                } else {
                    Awaited::Answer(from.answer)
                });
            }
            let host = (self.host_in.from.as_fd(), PollFlags::POLLIN);
            let peer = (conn.as_fd(), RDHUP);
            let fds: &[_] = if cancelled { &[host] } else { &[host, peer] };
            let [host, peer] = match self.wait(fds, None)? {
                Woke::Stop => return Ok(Awaited::End(End::Stopped)),
                Woke::Timeout => continue,
                Woke::Ready(ready) => ready,
            };
            if !host.is_empty() {
                if !self.host_in.read_once()? {
                    if self.host_in.buf.is_empty() {
                        return Ok(Awaited::End(End::HostDone));
                    }
                    return Err(format!(
                        "the host's stream ended inside its line for call {seq}"
                    ));
                }
                // The loop's top takes a line now complete (an answer that came with the hangup
                // is the answer); a hangup still there is seen by the next poll.
                continue;
            }
            if !cancelled && peer.intersects(GONE | RDHUP) {
                self.say(&ToHost::Cancel { seq })?;
                cancelled = true;
            }
        }
    }

    /// Write `line` to the peer within the deadline, then leave the connection to be closed.
    /// Returns true when a stop signal came meanwhile. A peer gone or not reading is not an error.
    fn deliver(&self, conn: &UnixStream, line: &[u8]) -> Result<bool, String> {
        let until = Instant::now() + self.deadline;
        let mut sent = 0;
        while sent < line.len() {
            match send(conn.as_fd(), &line[sent..]) {
                Ok(n) => sent += n,
                Err(e) if would_block(&e) => {
                    match self.wait(&[(conn.as_fd(), PollFlags::POLLOUT)], Some(until))? {
                        Woke::Stop => return Ok(true),
                        Woke::Timeout => return Ok(false),
                        Woke::Ready([flags, _]) if flags.intersects(GONE) => return Ok(false),
                        Woke::Ready(_) => {}
                    }
                }
                Err(_) => return Ok(false),
            }
        }
        Ok(false)
    }
}

enum Awaited {
    Answer(Answer),
    /// The peer hung up; the answer came and was dropped.
    Discarded,
    End(End),
}

/// The answer as the peer reads it: one line, at most [`MAX_ANSWER_LINE`] bytes.
fn answer_line(answer: &Answer) -> Result<Vec<u8>, String> {
    let mut line = serde_json::to_vec(answer).map_err(|e| format!("the answer: {e}"))?;
    line.push(b'\n');
    if line.len() > MAX_ANSWER_LINE {
        return Err(format!(
            "the host's answer is {} bytes as a line, more than {MAX_ANSWER_LINE}",
            line.len()
        ));
    }
    Ok(line)
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
