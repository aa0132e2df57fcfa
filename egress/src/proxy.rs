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
//!
//! The rules [`Rules::skip`] leaves out are left out here too: with [`Rule::Method`] any method
//! is answered 200 and tunnelled like a CONNECT (its head is not forwarded), with [`Rule::Sni`]
//! the tunnel relays from its first byte, with [`Rule::Address`] the dial does not classify. The
//! chain rule ([`Rule::Cname`]) is the resolver's: the binary builds its resolver to chase when it
//! is left out ([`crate::serve`]).
//!
//! [`serve_unix_with`] tells an [`Observe`] when the socket is bound and, for each connection,
//! what happened ([`Report`]): [`crate::journal`] writes these as the proxy binary's log lines.
//! At shutdown each running connection ends as [`Outcome::Shutdown`] or, relaying,
//! [`End::Shutdown`], and is reported.

use std::any::Any;
use std::future::{poll_fn, Future};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

use crate::address::{check_answer, classify, Class};
use crate::decide::{self, Admitted, Rule, Rules};
use crate::head::{self, Connect, HEAD_DEADLINE, MAX_HEAD};
use crate::host::Name;
use crate::splice;
use crate::terminate::Call;
use crate::tls::{self, Hello, MAX_RECORD};
use crate::vault::Termination;
use crate::Rejection;

/// How long a dial of one address may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused client (503, over the tunnel bound) has to take its answer.
const BUSY_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// The copying relay's buffer per direction, and the spliced relay's pipe per direction
/// (`cordon bench egress` here, copying: 16 KiB gave an upload ratio of 0.32 against a direct
/// connection, 64 KiB 0.84, 256 KiB no better; spliced, 256 KiB pipes no better either). 32
/// tunnels hold at most 4 MiB.
const RELAY_BUFFER: usize = 64 * 1024;
/// How long, at shutdown, the running connections have to report their end before they are
/// aborted.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

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
    /// The vendor host this proxy terminates ([`crate::terminate`]), when it holds a credential:
    /// a CONNECT to it is never an opaque tunnel.
    pub terminate: Option<Termination>,
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
            terminate: None,
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
    /// The proxy shut down (a signal, the invocation's lifetime).
    Shutdown,
}

impl End {
    /// The stable name the log shows.
    pub const fn as_str(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::Idle => "idle",
            End::HalfClose => "half-close",
            End::Error => "error",
            End::Shutdown => "shutdown",
        }
    }
}

/// What happened to one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Refused with this id and status (answered, nothing forwarded).
    Refused(Rejection),
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
    /// The terminated vendor host served `calls` requests (each reported on its own); `error`
    /// names what ended the connection early, if anything did.
    Terminated {
        calls: u64,
        error: Option<&'static str>,
    },
    /// Over [`Config::max_tunnels`]: answered 503, nothing read.
    Busy,
    /// The proxy shut down before the tunnel ran: closed.
    Shutdown,
}

/// What happened to one connection, with what its log line shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The request as parsed (canonical name and port); `None` when the head did not parse.
    pub target: Option<Connect>,
    /// The address connected to, once one was.
    pub dialed: Option<SocketAddr>,
    pub outcome: Outcome,
    /// What the log adds to the outcome's reason: the resolver's error, or the denied address
    /// and its class (never sent to the client).
    pub detail: Option<String>,
}

impl Report {
    fn new(outcome: Outcome) -> Report {
        Report {
            target: None,
            dialed: None,
            outcome,
            detail: None,
        }
    }
}

/// What [`serve_unix_with`] tells about its work. Both are called from the runtime's tasks: keep
/// them short.
pub trait Observe: Send + Sync {
    /// The socket is bound and has its mode: connections are taken from now on.
    fn listening(&self, _path: &Path) {}
    /// One connection ended.
    fn ended(&self, _report: &Report) {}
    /// One request to the terminated vendor host ended.
    fn vendor_call(&self, _call: &Call) {}
}

/// An [`Observe`] that ignores everything (what [`serve_unix`] uses).
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observe for Silent {}

/// The shutdown signal a connection watches: `None` never fires.
struct Stop(Option<watch::Receiver<bool>>);

impl Stop {
    /// Complete once shutdown has begun (or whoever could begin it is gone).
    async fn fired(&mut self) {
        match &mut self.0 {
            None => std::future::pending().await,
            Some(stop) => {
                let _ = stop.wait_for(|stopped| *stopped).await;
            }
        }
    }
}

/// Serve the proxy on a unix socket at `path` until `shutdown` completes: [`serve_unix_with`],
/// observed by nothing.
pub async fn serve_unix(
    path: &Path,
    config: Arc<Config>,
    resolver: Arc<dyn Resolve>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_unix_with(path, config, resolver, shutdown, Arc::new(Silent)).await
}

/// Serve the proxy on a unix socket at `path` until `shutdown` completes. A stale socket at
/// `path` is removed first (only a socket: a link or any other file there is an error, and is left
/// alone); the socket is made 0660, then `observer` is told it is listening. Each connection is
/// handled in its own task, at most [`Config::max_tunnels`] at once: one more is answered 503 and
/// closed. Each connection's [`Report`] goes to `observer`. At shutdown the accept loop stops,
/// the running connections end (and are reported) or, after a short grace, are aborted, and the
/// socket is removed if it is still the one bound here.
pub async fn serve_unix_with(
    path: &Path,
    config: Arc<Config>,
    resolver: Arc<dyn Resolve>,
    shutdown: impl Future<Output = ()>,
    observer: Arc<dyn Observe>,
) -> io::Result<()> {
    remove_stale_socket(path)?;
    let listener = UnixListener::bind(path)?;
    let bound = std::fs::symlink_metadata(path)?;
    let made = (bound.dev(), bound.ino());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    observer.listening(path);
    let permits = Arc::new(Semaphore::new(config.max_tunnels));
    let (stop, stopped) = watch::channel(false);
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
        let observer = observer.clone();
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let config = config.clone();
                let resolver = resolver.clone();
                let stop = Stop(Some(stopped.clone()));
                tasks.spawn(async move {
                    let report = run(stream, &config, &*resolver, stop, observer.clone()).await;
                    tracing::debug!(outcome = ?report.outcome, "egress connection ended");
                    observer.ended(&report);
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
                    observer.ended(&Report::new(Outcome::Busy));
                });
            }
        }
    }
    drop(listener);
    stop.send_replace(true);
    let _ = timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.shutdown().await;
    remove_own_socket(path, made)
}

/// Remove the socket at `path` if it is still the one made (same device and inode), never
/// following a link; anything else there (or nothing) is left as it is.
fn remove_own_socket(path: &Path, made: (u64, u64)) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() && (meta.dev(), meta.ino()) == made => {
            std::fs::remove_file(path)
        }
        Ok(_) => {
            tracing::warn!(path = %path.display(), "egress socket replaced: left alone");
            Ok(())
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
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

/// What a client stream must be: the terminator owns it for the connection's life.
pub trait Client: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Client for S {}

/// Handle one client connection, start to end.
pub async fn handle<S: Client>(client: S, config: &Config, resolver: &dyn Resolve) -> Outcome {
    handle_reported(client, config, resolver).await.outcome
}

/// Handle one client connection, start to end, and tell what its log line shows.
pub async fn handle_reported<S: Client>(
    client: S,
    config: &Config,
    resolver: &dyn Resolve,
) -> Report {
    run(client, config, resolver, Stop(None), Arc::new(Silent)).await
}

async fn run<S: Client>(
    mut client: S,
    config: &Config,
    resolver: &dyn Resolve,
    mut stop: Stop,
    observer: Arc<dyn Observe>,
) -> Report {
    let mut report = Report::new(Outcome::ClosedBeforeHead);
    report.outcome = match steps(&mut client, config, resolver, &mut stop, &mut report).await {
        Ok(Next::Done(outcome)) | Err(outcome) => outcome,
        Ok(Next::Terminate {
            termination,
            first,
            upstream,
        }) => terminate(client, first, upstream, termination, &mut stop, observer).await,
    };
    report
}

/// What follows the ClientHello: the tunnel ran already, or the terminator takes the connection.
enum Next {
    Done(Outcome),
    Terminate {
        termination: Termination,
        first: Vec<u8>,
        upstream: TcpStream,
    },
}

/// Serve the terminated vendor host on this connection until it ends or the proxy stops; each
/// request is reported to `observer` as it ends.
async fn terminate<S: Client>(
    client: S,
    first: Vec<u8>,
    upstream: TcpStream,
    termination: Termination,
    stop: &mut Stop,
    observer: Arc<dyn Observe>,
) -> Outcome {
    let record: Arc<dyn Fn(Call) + Send + Sync> = Arc::new(move |call| observer.vendor_call(&call));
    let served = crate::terminate::serve(
        client,
        first,
        upstream,
        termination.terminator.clone(),
        record,
    );
    tokio::select! {
        served = served => Outcome::Terminated { calls: served.calls, error: served.error },
        () = stop.fired() => Outcome::Terminated { calls: 0, error: Some("shutdown") },
    }
}

/// The steps of [`handle`]: the outcome, and on the way what `report` shows. A step that ends
/// the connection before the relay gives its outcome as the error.
async fn steps<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    client: &mut S,
    config: &Config,
    resolver: &dyn Resolve,
    stop: &mut Stop,
    report: &mut Report,
) -> Result<Next, Outcome> {
    // 1. The head.
    let head = head_step(client, config, stop).await?;

    // 2. The allowlist, before any lookup.
    let admitted = admit(client, config, &head, report).await?;

    // 3. The addresses, and the dial.
    let upstream = dial(client, config, resolver, stop, &admitted, report).await?;

    // Nothing may come before the 200 (a client that does not wait for it is not a CONNECT
    // client); a client that closed meanwhile has nothing to tunnel.
    match early_input(client).await {
        Early::Nothing => {}
        Early::Bytes => return Err(refuse(client, Rejection::Malformed).await),
        Early::Closed => return Err(Outcome::ClosedBeforeHead),
    }

    // 4. The 200.
    if client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return Err(Outcome::Relayed {
            up: 0,
            down: 0,
            end: End::Error,
        });
    }

    // 5. The ClientHello.
    let first = client_hello(client, config, stop, &admitted).await?;

    // 6. The terminated vendor host: never an opaque tunnel.
    let by_name_alone = config.rules.skips(Rule::HostBound);
    if let Some(termination) = config
        .terminate
        .as_ref()
        .filter(|_| !config.rules.skips(Rule::Terminate))
        .filter(|t| t.is(admitted.name(), admitted.port(), by_name_alone))
    {
        tracing::info!(name = %admitted.name(), port = admitted.port(), "egress terminated");
        return Ok(Next::Terminate {
            termination: termination.clone(),
            first,
            upstream,
        });
    }
    tracing::info!(name = %admitted.name(), port = admitted.port(), "egress tunnel");

    // 7. The relay.
    let mut upstream = upstream;
    if upstream.write_all(&first).await.is_err() {
        return Ok(Next::Done(Outcome::Relayed {
            up: 0,
            down: 0,
            end: End::Error,
        }));
    }
    let (up, down, end) = relay(client, &mut upstream, config.idle, config.half_close, stop).await;
    Ok(Next::Done(Outcome::Relayed {
        up: up + first.len() as u64,
        down,
        end,
    }))
}

/// Step 1: the head, read within its deadline.
async fn head_step<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut S,
    config: &Config,
    stop: &mut Stop,
) -> Result<Vec<u8>, Outcome> {
    let read = tokio::select! {
        read = timeout(config.head_deadline, read_head(client)) => read,
        () = stop.fired() => return Err(Outcome::Shutdown),
    };
    match read {
        Err(_) => {
            tracing::info!("egress head timed out");
            Err(Outcome::HeadTimedOut)
        }
        Ok(HeadRead::Closed) => Err(Outcome::ClosedBeforeHead),
        Ok(HeadRead::Refused(rejection)) => Err(refuse(client, rejection).await),
        Ok(HeadRead::Head(head)) => Ok(head),
    }
}

/// Step 2: the request parsed (the report shows its target from here), then held against the
/// allowlist; no name is looked up before it is admitted.
async fn admit<S: AsyncWrite + Unpin>(
    client: &mut S,
    config: &Config,
    head: &[u8],
    report: &mut Report,
) -> Result<Admitted, Outcome> {
    let parsed = match decide::parse(&config.rules, head) {
        Ok(parsed) => parsed,
        Err(rejection) => return Err(refuse(client, rejection).await),
    };
    report.target = Some(parsed.clone());
    match decide::admit_parsed(&config.rules, parsed) {
        Ok(admitted) => Ok(admitted),
        Err(rejection) => Err(refuse(client, rejection).await),
    }
}

/// Step 3: the addresses, and the dial. The client is watched meanwhile: one that closes (or
/// sends before the 200) gives its slot back at once, not after the resolver's bound.
async fn dial<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut S,
    config: &Config,
    resolver: &dyn Resolve,
    stop: &mut Stop,
    admitted: &Admitted,
    report: &mut Report,
) -> Result<TcpStream, Outcome> {
    let dialed = tokio::select! {
        // The client first: one already gone, or already sending, dials nothing.
        biased;
        early = input(client) => return Err(match early {
            Early::Bytes => refuse(client, Rejection::Malformed).await,
            Early::Closed | Early::Nothing => Outcome::ClosedBeforeHead,
        }),
        () = stop.fired() => return Err(Outcome::Shutdown),
        dialed = connect(admitted, config, resolver) => dialed,
    };
    match dialed {
        Ok((upstream, addr)) => {
            report.dialed = Some(addr);
            Ok(upstream)
        }
        Err(Dial::Refused(rejection, detail)) => {
            report.detail = detail;
            Err(refuse(client, rejection).await)
        }
        Err(Dial::Failed) => {
            tracing::info!(name = %admitted.name(), "egress upstream failed");
            let _ = client.write_all(&answer(502, "Bad Gateway")).await;
            let _ = client.shutdown().await;
            Err(Outcome::UpstreamFailed)
        }
    }
}

/// Step 5: the ClientHello, naming the CONNECT host (unless that rule is left out: then the relay
/// starts at the first byte). The bytes read, which the relay sends first.
async fn client_hello<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut S,
    config: &Config,
    stop: &mut Stop,
    admitted: &Admitted,
) -> Result<Vec<u8>, Outcome> {
    if config.rules.skips(Rule::Sni) {
        return Ok(Vec::new());
    }
    let read = tokio::select! {
        read = timeout(config.hello_deadline, read_hello(client)) => read,
        () = stop.fired() => return Err(Outcome::Shutdown),
    };
    let first = match read {
        Err(_) => Err("no ClientHello in time"),
        Ok(read) => read,
    };
    match first.and_then(|(hello, bytes)| {
        decide::check_hello(&config.rules, admitted, &hello).map(|()| bytes)
    }) {
        Ok(bytes) => Ok(bytes),
        Err(why) => {
            tracing::info!(name = %admitted.name(), reason = why, "egress tunnel refused");
            // Both sides closed: the caller drops the upstream unwritten.
            let _ = client.shutdown().await;
            Err(Outcome::HelloRefused(why))
        }
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
async fn refuse<S: AsyncWrite + Unpin>(client: &mut S, rejection: Rejection) -> Outcome {
    tracing::info!(refusal = rejection.id(), "egress refused");
    let status = rejection.status();
    let _ = client.write_all(&answer(status, reason(status))).await;
    let _ = client.shutdown().await;
    Outcome::Refused(rejection)
}

enum HeadRead {
    Head(Vec<u8>),
    Closed,
    Refused(Rejection),
}

/// Read until the head ends, never more than [`MAX_HEAD`] bytes; bytes past its end (sent before
/// the answer) are refused.
async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> HeadRead {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    loop {
        let Some(room) = buf.get_mut(len..) else {
            return HeadRead::Refused(Rejection::HeadTooLarge);
        };
        if room.is_empty() {
            return HeadRead::Refused(Rejection::HeadTooLarge);
        }
        let n = match client.read(room).await {
            Ok(0) | Err(_) => return HeadRead::Closed,
            Ok(n) => n,
        };
        len += n;
        let read = &buf[..len];
        match head::head_end(read) {
            Err(rejection) => return HeadRead::Refused(rejection),
            Ok(None) => {}
            Ok(Some(end)) if end == len => {
                buf.truncate(len);
                return HeadRead::Head(buf);
            }
            Ok(Some(_)) => return HeadRead::Refused(Rejection::Malformed),
        }
    }
}

enum Early {
    Nothing,
    Bytes,
    Closed,
}

/// Whether the client has sent anything (or closed) since its head, without waiting.
/// Wait for the client's next input: bytes, or its end.
async fn input<S: AsyncRead + Unpin>(client: &mut S) -> Early {
    let mut byte = [0u8; 1];
    match client.read(&mut byte).await {
        Ok(0) | Err(_) => Early::Closed,
        Ok(_) => Early::Bytes,
    }
}

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
    /// Refused, with what the log adds (the resolver's error, the denied address).
    Refused(Rejection, Option<String>),
    Failed,
}

/// Connect to the mapping, or to the first of the checked addresses that connects; the stream
/// and the address it is connected to.
async fn connect(
    admitted: &Admitted,
    config: &Config,
    resolver: &dyn Resolve,
) -> Result<(TcpStream, SocketAddr), Dial> {
    let classified = !config.rules.skips(Rule::Address);
    let addrs: Vec<SocketAddr> = match admitted.mapped() {
        Some(to) => vec![to],
        None => {
            let answer = resolver.lookup(admitted.name()).await;
            let detail = match &answer {
                Err(error) => Some(error.clone()),
                Ok(addrs) if classified => check_answer(addrs, &config.rules.host_own)
                    .err()
                    .map(|why| why.to_string()),
                Ok(addrs) if addrs.is_empty() => Some("the name resolved to no address".into()),
                Ok(_) => None,
            };
            decide::dial(&config.rules, admitted, answer)
                .map_err(|rejection| Dial::Refused(rejection, detail))?
        }
    };
    for addr in addrs {
        // Defence in depth: what is dialed is classified right here, whatever passed before
        // (a mapping is the one deliberate exception, a left-out address rule the other).
        if admitted.mapped().is_none() && classified {
            if let Class::Denied(class) = classify(addr.ip(), &config.rules.host_own) {
                return Err(Dial::Refused(
                    Rejection::Address,
                    Some(format!("{} is denied ({class})", addr.ip())),
                ));
            }
        }
        match timeout(config.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok((stream, addr)),
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

/// What both directions of a relay share: when a byte last moved, the bytes each way, whether
/// either failed.
struct Tally {
    activity: Activity,
    up: AtomicU64,
    down: AtomicU64,
    failed: AtomicBool,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            activity: Activity {
                start: Instant::now(),
                last: AtomicU64::new(0),
            },
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        }
    }
}

/// Relay both ways: (client to upstream bytes, upstream to client bytes, why it ended). A client
/// that is a unix socket (every client of [`serve_unix`]) is relayed by splice(2), kernel pipe to
/// socket, with no copy through the proxy ([`crate::splice`]); any other stream is copied.
async fn relay<C>(
    client: &mut C,
    upstream: &mut TcpStream,
    idle: Duration,
    half_close: Duration,
    stop: &mut Stop,
) -> (u64, u64, End)
where
    C: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let tally = Tally::new();
    if let Some(unix) = (client as &mut dyn Any).downcast_mut::<UnixStream>() {
        let unix: &UnixStream = unix;
        let upstream: &TcpStream = upstream;
        let (Ok(up_pipe), Ok(down_pipe)) = (
            splice::Pipe::new(RELAY_BUFFER),
            splice::Pipe::new(RELAY_BUFFER),
        ) else {
            return (0, 0, End::Error);
        };
        let touch = || tally.activity.touch();
        let upward = splice::pump(unix, upstream, up_pipe, touch, &tally.up, &tally.failed);
        let downward = splice::pump(upstream, unix, down_pipe, touch, &tally.down, &tally.failed);
        return watch(upward, downward, &tally, idle, half_close, stop).await;
    }
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = tokio::io::split(upstream);
    let upward = pump(
        client_read,
        upstream_write,
        &tally.activity,
        &tally.up,
        &tally.failed,
    );
    let downward = pump(
        upstream_read,
        client_write,
        &tally.activity,
        &tally.down,
        &tally.failed,
    );
    watch(upward, downward, &tally, idle, half_close, stop).await
}

/// Drive both directions until both are done, either fails, nothing moves for `idle`, a
/// half-closed tunnel outlives `half_close`, or the proxy stops.
async fn watch(
    upward: impl Future<Output = ()>,
    downward: impl Future<Output = ()>,
    tally: &Tally,
    idle: Duration,
    half_close: Duration,
    stop: &mut Stop,
) -> (u64, u64, End) {
    tokio::pin!(upward, downward);
    let (mut up_done, mut down_done) = (false, false);
    let mut half_closed: Option<Instant> = None;
    let end = loop {
        if tally.failed.load(Ordering::Relaxed) {
            break End::Error;
        }
        if up_done && down_done {
            break End::Closed;
        }
        let idle_at = tally.activity.last() + idle;
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
            () = stop.fired() => break End::Shutdown,
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if half_at.is_some_and(|h| now >= h) {
                    break End::HalfClose;
                }
                if now >= tally.activity.last() + idle {
                    break End::Idle;
                }
            }
        }
    };
    (
        tally.up.load(Ordering::Relaxed),
        tally.down.load(Ordering::Relaxed),
        end,
    )
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
