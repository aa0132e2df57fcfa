//! The agent's side of a terminated connection, as raw bytes beside hyper: the ClientHello the
//! proxy already read, replayed first ([`Prefixed`]); every plaintext byte watched
//! ([`Watched`]) for the connection's clock and for the request framing ([`Framing`]: CRLF line
//! ends only, at most one `Content-Length`, which hyper does not check), and what the timers find
//! ([`Watch`], [`Due`]).

use super::*;

/// The agent's stream with the bytes the proxy already read from it replayed first.
pub(super) struct Prefixed<C> {
    pub(super) prefix: Vec<u8>,
    pub(super) at: usize,
    pub(super) inner: C,
}

impl<C> Prefixed<C> {
    pub(super) fn new(prefix: Vec<u8>, inner: C) -> Prefixed<C> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<C: AsyncRead + Unpin> AsyncRead for Prefixed<C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rest = this.prefix.get(this.at..).unwrap_or_default();
        if rest.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.at += n;
        if this.at == this.prefix.len() {
            this.prefix = Vec::new();
            this.at = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Prefixed<C> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The agent's plaintext, watched as hyper reads it ([`Framing`]) and as bytes move either way.
pub(super) struct Watched<T> {
    pub(super) inner: T,
    pub(super) ledger: Arc<Ledger>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = buf.filled().get(before..).unwrap_or_default();
        if !read.is_empty() {
            this.ledger.watch.read(read);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if written > 0 {
            this.ledger.watch.touch();
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.ledger.watch.flushed();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What the agent's bytes showed, and the connection's clock.
pub(super) struct Watch {
    pub(super) state: Mutex<WatchState>,
    /// A head began, or a request stopped waiting: the timers look again.
    pub(super) changed: Notify,
}

pub(super) struct WatchState {
    pub(super) framing: Framing,
    /// Heads read whole and not yet handled, in order.
    pub(super) heads: VecDeque<HeadSeen>,
    /// The last byte either way.
    pub(super) last: Instant,
    /// Requests reading their body or waiting for the vendor (their own deadlines apply).
    pub(super) busy: usize,
    /// Requests not yet recorded.
    pub(super) in_flight: usize,
    /// When the last request in flight was recorded: a head read while another request was in
    /// flight (pipelined) is timed from here, its turn.
    pub(super) turn: Instant,
    /// The vendor's connection ended.
    pub(super) vendor_gone: bool,
    /// Flushes of the agent's connection so far, and a cut response waiting for the next.
    pub(super) flushes: u64,
    pub(super) flush_waiter: Option<Waker>,
}

/// One head as the raw bytes showed it.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeadSeen {
    /// Its first byte's arrival.
    pub(super) started: Instant,
    /// A bare LF or CR, a second `Content-Length`, one that does not parse.
    pub(super) malformed: bool,
}

/// What the connection's timers found.
pub(super) enum Due {
    Nothing,
    /// A head did not come whole within [`Limits::request`].
    Head,
    /// Nothing moved for [`Limits::idle`].
    Idle {
        in_flight: bool,
    },
}

impl Watch {
    pub(super) fn new() -> Watch {
        Watch {
            state: Mutex::new(WatchState {
                framing: Framing::default(),
                heads: VecDeque::new(),
                last: Instant::now(),
                busy: 0,
                in_flight: 0,
                turn: Instant::now(),
                vendor_gone: false,
                flushes: 0,
                flush_waiter: None,
            }),
            changed: Notify::new(),
        }
    }

    pub(super) fn read(&self, bytes: &[u8]) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        state.last = now;
        let reading = state.framing.started.is_some();
        let WatchState { framing, heads, .. } = &mut *state;
        framing.read(bytes, now, heads);
        if !reading && state.framing.started.is_some() {
            self.changed.notify_one();
        }
    }

    pub(super) fn touch(&self) {
        lock(&self.state).last = Instant::now();
    }

    pub(super) fn flushes(&self) -> u64 {
        lock(&self.state).flushes
    }

    pub(super) fn flushed(&self) {
        let waiter = {
            let mut state = lock(&self.state);
            state.flushes += 1;
            state.flush_waiter.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }

    /// Whether the connection flushed since the count `at`; if not, `waker` is woken when it
    /// does.
    pub(super) fn flushed_since(&self, at: u64, waker: &Waker) -> bool {
        let mut state = lock(&self.state);
        if state.flushes > at {
            return true;
        }
        state.flush_waiter = Some(waker.clone());
        false
    }

    /// The head of the request hyper hands over now (timed from its first byte, or its turn).
    /// One the bytes did not show (the framing was lost: the connection is closing) counts as
    /// malformed.
    pub(super) fn arrived(&self) -> HeadSeen {
        let mut state = lock(&self.state);
        let turn = state.turn;
        let seen = state.heads.pop_front().unwrap_or(HeadSeen {
            started: Instant::now(),
            malformed: true,
        });
        HeadSeen {
            started: seen.started.max(turn),
            ..seen
        }
    }

    pub(super) fn recorded(&self) {
        let mut state = lock(&self.state);
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.turn = Instant::now();
        }
        drop(state);
        self.changed.notify_one();
    }

    pub(super) fn vendor_gone(&self) {
        lock(&self.state).vendor_gone = true;
        self.changed.notify_one();
    }

    /// A request reads its body or waits for the vendor until the guard drops.
    pub(super) fn busy(&self) -> Busy<'_> {
        lock(&self.state).busy += 1;
        Busy(self)
    }

    /// When the timers next look, and what is due then.
    pub(super) fn deadline(&self, limits: &Limits) -> (Instant, Due) {
        let state = lock(&self.state);
        // A head is timed while nothing else is in flight (hyper reads a pipelined one only
        // once the response before it ended); the idle clock when no head is being read and no
        // request reads its body or waits for the vendor.
        let head = state
            .framing
            .started
            .filter(|_| state.in_flight == 0)
            .map(|started| (started.max(state.turn) + limits.request, Due::Head));
        let idle = (head.is_none() && state.busy == 0).then(|| {
            let due = Due::Idle {
                in_flight: state.in_flight > 0,
            };
            // Without the vendor's connection a quiet one has nothing more to serve.
            let quiet = if state.vendor_gone && state.in_flight == 0 {
                Duration::ZERO
            } else {
                limits.idle
            };
            (state.last + quiet, due)
        });
        head.or(idle)
            .unwrap_or((Instant::now() + limits.idle, Due::Nothing))
    }

    pub(super) fn next_check(&self, limits: &Limits) -> Instant {
        self.deadline(limits).0
    }

    pub(super) fn due(&self, limits: &Limits) -> Due {
        match self.deadline(limits) {
            (at, due) if Instant::now() >= at => due,
            _ => Due::Nothing,
        }
    }
}

pub(super) struct Busy<'a>(&'a Watch);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.busy -= 1;
        state.last = Instant::now();
        drop(state);
        self.0.changed.notify_one();
    }
}

/// How many bytes of a header line are kept to read `content-length` and `transfer-encoding`.
pub(super) const LINE_KEPT: usize = 64;

/// The agent's request framing, followed over the raw bytes beside hyper: each head (CRLF line
/// ends only, at most one `Content-Length` of digits), then as many body bytes as it declared.
/// A head with `Transfer-Encoding` (refused) or a malformed one loses the framing: every head
/// after it counts as malformed.
#[derive(Debug, Default)]
pub(super) struct Framing {
    /// Body bytes still to skip; `None` while reading a head.
    pub(super) body: Option<u64>,
    pub(super) lost: bool,
    /// The current head's first byte's arrival.
    pub(super) started: Option<Instant>,
    /// The current line's first bytes, lowercase; its length.
    pub(super) line: Vec<u8>,
    pub(super) line_len: usize,
    /// The previous byte was a CR.
    pub(super) cr: bool,
    /// Lines of the current head so far (the request line included).
    pub(super) lines: usize,
    pub(super) length: Option<u64>,
    pub(super) chunked: bool,
}

impl Framing {
    pub(super) fn read(&mut self, mut bytes: &[u8], now: Instant, heads: &mut VecDeque<HeadSeen>) {
        while !bytes.is_empty() && !self.lost {
            if let Some(left) = self.body {
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                bytes = &bytes[n..];
                let left = left - n as u64;
                self.body = (left > 0).then_some(left);
                continue;
            }
            let (&byte, rest) = match bytes.split_first() {
                Some(split) => split,
                None => return,
            };
            bytes = rest;
            self.started.get_or_insert(now);
            match byte {
                b'\n' if self.cr => {
                    self.cr = false;
                    self.end_line(now, heads);
                }
                b'\r' if !self.cr => self.cr = true,
                // A bare LF (hyper takes it for a line end) or a bare CR.
                b'\n' | b'\r' => self.lose(now, heads),
                _ if self.cr => self.lose(now, heads),
                _ => {
                    self.line_len += 1;
                    if self.line.len() < LINE_KEPT {
                        self.line.push(byte.to_ascii_lowercase());
                    }
                }
            }
        }
    }

    pub(super) fn end_line(&mut self, now: Instant, heads: &mut VecDeque<HeadSeen>) {
        let line = std::mem::take(&mut self.line);
        let len = std::mem::take(&mut self.line_len);
        if len == 0 && self.lines == 0 {
            // Empty lines before a request line are allowed (and skipped by hyper too).
            return;
        }
        if len > 0 {
            self.lines += 1;
            if self.lines > 1 && !self.header_line(&line, len) {
                self.lose(now, heads);
            }
            return;
        }
        heads.push_back(HeadSeen {
            started: self.started.unwrap_or(now),
            malformed: false,
        });
        // After a chunked head nothing is followed (it is refused, and the connection closed).
        self.lost = self.chunked;
        self.body = self.length.filter(|n| *n > 0);
        self.started = None;
        self.lines = 0;
        self.length = None;
        self.chunked = false;
    }

    /// Note a header line's framing; false when it is malformed.
    pub(super) fn header_line(&mut self, line: &[u8], len: usize) -> bool {
        if let Some(value) = line.strip_prefix(b"content-length:") {
            if len > LINE_KEPT || self.length.is_some() {
                return false;
            }
            let digits = value.trim_ascii();
            let parsed = std::str::from_utf8(digits)
                .ok()
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok());
            self.length = parsed;
            return parsed.is_some();
        }
        if line.starts_with(b"transfer-encoding:") {
            self.chunked = true;
        }
        true
    }

    /// The framing cannot be followed: this head and every later one are malformed.
    pub(super) fn lose(&mut self, now: Instant, heads: &mut VecDeque<HeadSeen>) {
        heads.push_back(HeadSeen {
            started: self.started.unwrap_or(now),
            malformed: true,
        });
        self.lost = true;
        self.started = None;
    }
}
