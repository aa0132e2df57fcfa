//! The proxy runtime: it applies the rules of [`crate::decide`], [`crate::head`] and
//! [`crate::tls`] to connections on a unix socket. Per connection, in order: read the head
//! (bounded by [`MAX_HEAD`], within [`Config::head_deadline`]), [`decide::admit`] it, resolve the
//! name (unless it is mapped) and dial exactly the addresses [`decide::dial`] passed, answer 200,
//! read the tunnel's first bytes (bounded by [`MAX_RECORD`], within [`Config::hello_deadline`])
//! and require a ClientHello naming the CONNECT host, then relay both ways until either side
//! errors, nothing moves for [`Config::idle`], or a half-closed tunnel outlives
//! [`Config::half_close`].
//!
//! Every read is bounded, every wait has a deadline, and a refusal is answered with its status
//! only (no detail about addresses); the log carries the refusal id, never the client's bytes.

use std::future::{poll_fn, Future};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixListener};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

use crate::address::{classify, Class};
use crate::decide::{self, Admitted, Rules};
use crate::head::{self, HEAD_DEADLINE, MAX_HEAD};
use crate::host::Name;
use crate::tls::{self, Hello, MAX_RECORD};
use crate::Refusal;

/// How long a dial of one address may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused client (503, over the tunnel bound) has to take its answer.
const BUSY_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// The relay's buffer, per direction.
const RELAY_BUFFER: usize = 16 * 1024;

/// What the runtime applies, and its bounds.
#[derive(Debug, Clone)]
pub struct Config {
    pub rules: Rules,
    /// The most connections handled at once; one more is answered 503.
    pub max_tunnels: usize,
    /// No byte either way for this long ends a tunnel.
    pub idle: Duration,
    /// Once one side has shut down its write half, the other has this long to finish.
    pub half_close: Duration,
    /// How long a client has to send its whole head.
    pub head_deadline: Duration,
    /// How long a client has, after the 200, to send a whole ClientHello.
    pub hello_deadline: Duration,
    /// How long a dial of one address may take.
    pub connect_timeout: Duration,
}

impl Config {
    /// The default bounds around these rules.
    pub fn new(rules: Rules) -> Config {
        Config {
            rules,
            max_tunnels: 32,
            idle: Duration::from_secs(60),
            half_close: Duration::from_secs(10),
            head_deadline: HEAD_DEADLINE,
            hello_deadline: Duration::from_secs(10),
            connect_timeout: CONNECT_TIMEOUT,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config::new(Rules::default())
    }
}

/// A boxed, sendable future (what [`Resolve::lookup`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The proxy's resolver: the addresses a name has, or why there are none to be had. Only an
/// [`Admitted`] name is ever passed (the allowlist is checked first).
pub trait Resolve: Send + Sync {
    fn lookup(&self, name: &Name) -> BoxFuture<'_, Result<Vec<IpAddr>, String>>;
}

/// A resolver that always fails: every unmapped name is refused 502 (until a real one is wired).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoResolver;

impl Resolve for NoResolver {
    fn lookup(&self, _name: &Name) -> BoxFuture<'_, Result<Vec<IpAddr>, String>> {
        Box::pin(async { Err("no resolver".to_owned()) })
    }
}

/// Why a relayed tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both sides shut down their write halves.
    Closed,
    /// No byte moved either way for [`Config::idle`].
    Idle,
    /// One side shut down its write half and the other did not finish within
    /// [`Config::half_close`].
    HalfClose,
    /// A read or write on either side failed.
    Error,
}

/// What happened to one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Refused with this id and status (answered, nothing forwarded).
    Refused(Refusal),
    /// The client closed (or failed) before its head ended: no answer.
    ClosedBeforeHead,
    /// The client did not send its whole head within [`Config::head_deadline`]: closed.
    HeadTimedOut,
    /// The tunnel's first bytes were not a ClientHello naming the CONNECT host (or did not come in
    /// time): both sides closed, nothing forwarded.
    HelloRefused(&'static str),
    /// No address of the name could be connected to: answered 502.
    UpstreamFailed,
    /// The tunnel ran: `up` bytes client to upstream (the ClientHello included), `down` back.
    Relayed { up: u64, down: u64, end: End },
}

/// Serve the proxy on a unix socket at `path` until `shutdown` completes. A stale socket at
/// `path` is removed first (only a socket: a link or any other file there is an error, and is left
/// alone); the socket is made 0660. Each connection is handled in its own task, at most
/// [`Config::max_tunnels`] at once: one more is answered 503 and closed. At shutdown the accept
/// loop stops, the running tunnels are aborted and the socket is removed.
pub async fn serve_unix(
    path: &Path,
    config: Arc<Config>,
    resolver: Arc<dyn Resolve>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    remove_stale_socket(path)?;
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    let permits = Arc::new(Semaphore::new(config.max_tunnels));
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let mut stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors and the like: wait rather than spin.
                tracing::warn!(%error, "egress accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let config = config.clone();
                let resolver = resolver.clone();
                tasks.spawn(async move {
                    let outcome = handle(stream, &config, &*resolver).await;
                    tracing::debug!(?outcome, "egress connection ended");
                    drop(permit);
                });
            }
            Err(_) => {
                tracing::info!(refusal = "egress-busy", "egress refused");
                tasks.spawn(async move {
                    let _ = timeout(BUSY_ANSWER_TIMEOUT, async {
                        let _ = stream.write_all(&answer(503, "Service Unavailable")).await;
                        let _ = stream.shutdown().await;
                    })
                    .await;
                });
            }
        }
    }
    drop(listener);
    tasks.shutdown().await;
    // Remove the socket we bound, and only a socket.
    remove_stale_socket(path)
}

/// Remove what is at `path` if it is a socket (never following a link); nothing there is fine;
/// anything else is an error and is left alone.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket: not removed", path.display()),
        )),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Handle one client connection, start to end.
pub async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    mut client: S,
    config: &Config,
    resolver: &dyn Resolve,
) -> Outcome {
    // 1. The head.
    let head = match timeout(config.head_deadline, read_head(&mut client)).await {
        Err(_) => {
            tracing::info!("egress head timed out");
            return Outcome::HeadTimedOut;
        }
        Ok(HeadRead::Closed) => return Outcome::ClosedBeforeHead,
        Ok(HeadRead::Refused(refusal)) => return refuse(&mut client, refusal).await,
        Ok(HeadRead::Head(head)) => head,
    };

    // 2. The allowlist, before any lookup.
    let admitted = match decide::admit(&config.rules, &head) {
        Ok(admitted) => admitted,
        Err(refusal) => return refuse(&mut client, refusal).await,
    };

    // 3. The addresses, and the dial.
    let upstream = match connect(&admitted, config, resolver).await {
        Ok(upstream) => upstream,
        Err(Dial::Refused(refusal)) => return refuse(&mut client, refusal).await,
        Err(Dial::Failed) => {
            tracing::info!(name = %admitted.name(), "egress upstream failed");
            let _ = client.write_all(&answer(502, "Bad Gateway")).await;
            let _ = client.shutdown().await;
            return Outcome::UpstreamFailed;
        }
    };

    // Nothing may come before the 200 (a client that does not wait for it is not a CONNECT
    // client); a client that closed meanwhile has nothing to tunnel.
    match early_input(&mut client).await {
        Early::Nothing => {}
        Early::Bytes => return refuse(&mut client, Refusal::Malformed).await,
        Early::Closed => return Outcome::ClosedBeforeHead,
    }

    // 4. The 200.
    if client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return Outcome::Relayed {
            up: 0,
            down: 0,
            end: End::Error,
        };
    }

    // 5. The ClientHello, naming the CONNECT host.
    let first = match timeout(config.hello_deadline, read_hello(&mut client)).await {
        Err(_) => Err("no ClientHello in time"),
        Ok(read) => read,
    };
    let first = match first.and_then(|(hello, bytes)| {
        if tls::names(&hello, admitted.name()) {
            Ok(bytes)
        } else {
            Err(match hello {
                Hello::NotTls(why) => why,
                _ => "the ClientHello names another server",
            })
        }
    }) {
        Ok(bytes) => bytes,
        Err(why) => {
            tracing::info!(name = %admitted.name(), reason = why, "egress tunnel refused");
            // Both sides closed: `upstream` is dropped unwritten.
            let _ = client.shutdown().await;
            return Outcome::HelloRefused(why);
        }
    };
    tracing::info!(name = %admitted.name(), port = admitted.port(), "egress tunnel");

    // 6. The relay.
    let mut upstream = upstream;
    if upstream.write_all(&first).await.is_err() {
        return Outcome::Relayed {
            up: 0,
            down: 0,
            end: End::Error,
        };
    }
    let (up, down, end) = relay(&mut client, &mut upstream, config.idle, config.half_close).await;
    Outcome::Relayed {
        up: up + first.len() as u64,
        down,
        end,
    }
}

/// The status line and headers of a refusal (no body, no detail).
fn answer(status: u16, reason: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// Answer a refusal, log its id, close.
async fn refuse<S: AsyncWrite + Unpin>(client: &mut S, refusal: Refusal) -> Outcome {
    tracing::info!(refusal = refusal.id(), "egress refused");
    let status = refusal.status();
    let _ = client.write_all(&answer(status, reason(status))).await;
    let _ = client.shutdown().await;
    Outcome::Refused(refusal)
}

enum HeadRead {
    Head(Vec<u8>),
    Closed,
    Refused(Refusal),
}

/// Read until the head ends, never more than [`MAX_HEAD`] bytes; bytes past its end (sent before
/// the answer) are refused.
async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> HeadRead {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    loop {
        let Some(room) = buf.get_mut(len..) else {
            return HeadRead::Refused(Refusal::HeadTooLarge);
        };
        if room.is_empty() {
            return HeadRead::Refused(Refusal::HeadTooLarge);
        }
        let n = match client.read(room).await {
            Ok(0) | Err(_) => return HeadRead::Closed,
            Ok(n) => n,
        };
        len += n;
        let read = &buf[..len];
        match head::head_end(read) {
            Err(refusal) => return HeadRead::Refused(refusal),
            Ok(None) => {}
            Ok(Some(end)) if end == len => {
                buf.truncate(len);
                return HeadRead::Head(buf);
            }
            Ok(Some(_)) => return HeadRead::Refused(Refusal::Malformed),
        }
    }
}

enum Early {
    Nothing,
    Bytes,
    Closed,
}

/// Whether the client has sent anything (or closed) since its head, without waiting.
async fn early_input<S: AsyncRead + Unpin>(client: &mut S) -> Early {
    let mut byte = [0u8; 1];
    poll_fn(|cx| {
        let mut buf = ReadBuf::new(&mut byte);
        Poll::Ready(match Pin::new(&mut *client).poll_read(cx, &mut buf) {
            Poll::Pending => Early::Nothing,
            Poll::Ready(Ok(())) if buf.filled().is_empty() => Early::Closed,
            Poll::Ready(Ok(())) => Early::Bytes,
            Poll::Ready(Err(_)) => Early::Closed,
        })
    })
    .await
}

enum Dial {
    Refused(Refusal),
    Failed,
}

/// Connect to the mapping, or to the first of the checked addresses that connects.
async fn connect(
    admitted: &Admitted,
    config: &Config,
    resolver: &dyn Resolve,
) -> Result<TcpStream, Dial> {
    let addrs: Vec<SocketAddr> = match admitted.mapped() {
        Some(to) => vec![to],
        None => {
            let answer = resolver.lookup(admitted.name()).await;
            decide::dial(&config.rules, admitted, answer).map_err(Dial::Refused)?
        }
    };
    for addr in addrs {
        // Defence in depth: what is dialed is classified right here, whatever passed before
        // (a mapping is the one deliberate exception).
        if admitted.mapped().is_none()
            && classify(addr.ip(), &config.rules.host_own) != Class::Global
        {
            return Err(Dial::Refused(Refusal::Address));
        }
        match timeout(config.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => tracing::debug!(%error, "egress dial failed"),
            Err(_) => tracing::debug!("egress dial timed out"),
        }
    }
    Err(Dial::Failed)
}

/// Read the tunnel's first bytes until they are judged, at most [`MAX_RECORD`].
async fn read_hello<S: AsyncRead + Unpin>(
    client: &mut S,
) -> Result<(Hello, Vec<u8>), &'static str> {
    let mut buf = vec![0u8; MAX_RECORD];
    let mut len = 0;
    loop {
        let room = buf.get_mut(len..).unwrap_or_default();
        if room.is_empty() {
            return Err("no ClientHello within a record");
        }
        let n = match client.read(room).await {
            Ok(0) | Err(_) => return Err("closed before a ClientHello"),
            Ok(n) => n,
        };
        len += n;
        match tls::client_hello(&buf[..len]) {
            Hello::Incomplete => {}
            hello => {
                buf.truncate(len);
                return Ok((hello, buf));
            }
        }
    }
}

/// The relay's shared clock and counters.
struct Activity {
    start: Instant,
    /// Microseconds since `start` of the last byte either way.
    last: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let now = self.start.elapsed().as_micros();
        self.last
            .store(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_micros(self.last.load(Ordering::Relaxed))
    }
}

/// Copy one direction until its reader ends (then shut the writer) or either fails.
async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut from: R,
    mut to: W,
    activity: &Activity,
    count: &AtomicU64,
    failed: &AtomicBool,
) {
    let mut buf = vec![0u8; RELAY_BUFFER];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                if to.shutdown().await.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                return;
            }
            Ok(n) => n,
            Err(_) => {
                failed.store(true, Ordering::Relaxed);
                return;
            }
        };
        activity.touch();
        if to.write_all(&buf[..n]).await.is_err() {
            failed.store(true, Ordering::Relaxed);
            return;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// Relay both ways: (client to upstream bytes, upstream to client bytes, why it ended).
async fn relay<C, U>(
    client: &mut C,
    upstream: &mut U,
    idle: Duration,
    half_close: Duration,
) -> (u64, u64, End)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = tokio::io::split(upstream);
    let activity = Activity {
        start: Instant::now(),
        last: AtomicU64::new(0),
    };
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let failed = AtomicBool::new(false);
    let upward = pump(client_read, upstream_write, &activity, &up, &failed);
    let downward = pump(upstream_read, client_write, &activity, &down, &failed);
    tokio::pin!(upward, downward);
    let (mut up_done, mut down_done) = (false, false);
    let mut half_closed: Option<Instant> = None;
    let end = loop {
        if failed.load(Ordering::Relaxed) {
            break End::Error;
        }
        if up_done && down_done {
            break End::Closed;
        }
        let idle_at = activity.last() + idle;
        let half_at = half_closed.map(|at| at + half_close);
        let deadline = half_at.map_or(idle_at, |h| h.min(idle_at));
        tokio::select! {
            () = &mut upward, if !up_done => {
                up_done = true;
                half_closed.get_or_insert_with(Instant::now);
            }
            () = &mut downward, if !down_done => {
                down_done = true;
                half_closed.get_or_insert_with(Instant::now);
            }
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if half_at.is_some_and(|h| now >= h) {
                    break End::HalfClose;
                }
                if now >= activity.last() + idle {
                    break End::Idle;
                }
            }
        }
    };
    (
        up.load(Ordering::Relaxed),
        down.load(Ordering::Relaxed),
        end,
    )
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
