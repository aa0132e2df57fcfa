//! Hostile traffic against the real egress proxy: every spelling of every class is refused with
//! its id and its status alone, nothing the allowlist did not admit is looked up, nothing that was
//! not admitted reaches an upstream, and nothing is left open.
//!
//! Each test starts a [`Fixture`]: the fake vendor's DNS server (scripted per test) and TLS server,
//! a [`Hold`] listener and a [`Trap`], all on 127.0.0.1, and the proxy twice over:
//! [`serve_unix_with`] on a socket in a fresh directory (what a client sees) and
//! [`handle_reported`] on one end of a [`UnixStream::pair`]. Every case runs both ways: both must
//! answer the same bytes and report the same [`Outcome`] (where the refusal id is) and the same
//! address dialed (none, for everything refused before the dial).
//!
//! The rules: `api.vendor.test` (443) is mapped to the fake vendor, `hold.vendor.test` (443) to the
//! hold listener (it records what it is sent and never answers), and `*.resolve.test` on the
//! trap's port is resolved through the scripted DNS server. The trap listens on 127.0.0.1 and ::1
//! at that port, so a loopback answer that were dialed would land there: it must never accept.
//! No case lets a public address be dialed: every scripted answer holds a denied address or the
//! host's own ([`HOST_OWN`]), and the one way to a 200 is a mapping.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_egress::allowlist::{Allowlist, Mapping};
use cordon_egress::decide::Rules;
use cordon_egress::head::{MAX_HEAD, MAX_HEADERS};
use cordon_egress::proxy::{
    handle_reported, serve_unix_with, Config, End, Observe, Outcome, Report, Resolve,
};
use cordon_egress::resolver::{UpstreamResolver, ATTEMPTS};
use cordon_egress::Rejection;
use cordon_fake_vendor::dns::{self, Answer, Script};
use cordon_fake_vendor::{ca, hello, tls};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

/// Listed on 443 and mapped to the fake vendor: the one name a real TLS exchange reaches.
const VENDOR: &str = "api.vendor.test";
/// Listed on 443 and mapped to the [`Hold`] listener.
const HOLD: &str = "hold.vendor.test";
/// `*.resolve.test` is listed on the trap's port and resolved through the scripted DNS server.
const ZONE: &str = "resolve.test";
/// A public address the rules call the host's own: an answer holding it is refused, not dialed.
const HOST_OWN: &str = "160.79.104.20";
/// Public addresses, only ever in answers that also hold a denied address (so never dialed).
const PUBLIC_V4: &str = "160.79.104.10";
const PUBLIC_V6: &str = "2607:6bc0::10";
/// How long the fixture's resolver waits for one query (the proxy's default is 5 s).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(500);
/// The most any one wait of a case may take (a hang guard, never a measurement).
const BOUND: Duration = Duration::from_secs(15);
/// The fixture's bounds (a case may shorten them).
const HEAD_DEADLINE: Duration = Duration::from_secs(2);
const HELLO_DEADLINE: Duration = Duration::from_secs(2);
const IDLE: Duration = Duration::from_secs(5);
const HALF_CLOSE: Duration = Duration::from_secs(2);
const MAX_TUNNELS: usize = 4;

const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";
/// What a case's answer shows, after the 200, for a TLS exchange that got the vendor's answer.
const VENDOR_OK: &[u8] = b"[TLS to api.vendor.test: GET / -> 200 fake-vendor ok]";

// ------------------------------------------------------------------------------------------------
// Cases.

/// One thing a client does.
#[derive(Debug, Clone)]
enum Step {
    /// Write these bytes (a failed write is not the case's failure: the answer tells).
    Write(Vec<u8>),
    /// Write these bytes one at a time, this long apart, until one fails.
    Trickle(Vec<u8>, Duration),
    /// Shut down the write half (a FIN).
    Fin,
    /// Wait this long (the proxy is deciding meanwhile).
    Pause(Duration),
    /// Read the 200 before going on.
    Established,
}

/// What the proxy must do with a case.
#[derive(Debug, Clone, PartialEq)]
enum Want {
    /// Answer this refusal's status and nothing else, then close: `Outcome::Refused`.
    Refused(Rejection),
    /// Close without a byte of answer.
    Unanswered(Outcome),
    /// Answer 200, then close without forwarding a byte: `Outcome::HelloRefused`.
    Hello(&'static str),
    /// Answer 200 and carry a real TLS exchange with the fake vendor (`GET /`).
    Tunnel,
    /// Answer 200 and relay to the hold listener (which answers nothing) until this end.
    Relayed(End),
}

/// One row of a table: what the client does, what the proxy must do, and what it may touch.
#[derive(Debug, Clone)]
struct Case {
    what: String,
    steps: Vec<Step>,
    want: Want,
    /// The DNS queries one run makes, as `name TYPE` (in any order).
    queries: Vec<String>,
    /// For a silent upstream: each of `queries` is asked at least once and at most this many
    /// times per run (the resolver's retransmissions are its own business; its bound is not).
    retried: Option<usize>,
    /// What each connection one run makes to the hold listener receives, in order.
    held: Vec<Vec<u8>>,
    /// The least and the most one run may take.
    took: (Duration, Duration),
}

impl Case {
    fn new(what: impl Into<String>, steps: Vec<Step>, want: Want) -> Case {
        Case {
            what: what.into(),
            steps,
            want,
            queries: Vec::new(),
            retried: None,
            held: Vec::new(),
            took: (Duration::ZERO, BOUND),
        }
    }

    /// A case that writes `head` in one write.
    fn head(what: impl Into<String>, head: Vec<u8>, want: Want) -> Case {
        Case::new(what, vec![Step::Write(head)], want)
    }

    /// `CONNECT target` (with a Host header naming the same) refused as `refusal`.
    fn refused(target: &str, rejection: Rejection) -> Case {
        Case::head(
            format!("{target:?}"),
            connect(target),
            Want::Refused(rejection),
        )
    }

    /// `CONNECT target` answered 200 and tunnelled to the fake vendor.
    fn tunnel(target: &str) -> Case {
        Case::head(
            format!("{target:?} (positive)"),
            connect(target),
            Want::Tunnel,
        )
    }

    /// The run looks `name` up: one A and one AAAA query.
    fn looks_up(mut self, name: &str) -> Case {
        self.queries.push(format!("{name} A"));
        self.queries.push(format!("{name} AAAA"));
        self
    }

    /// The run asks for `name` `times` times of each type (the resolver's tries on a failure).
    fn looks_up_times(mut self, name: &str, times: usize) -> Case {
        for _ in 0..times {
            self = self.looks_up(name);
        }
        self
    }

    /// The run asks for `name`, each type at least once and at most `most` times.
    fn looks_up_retried(mut self, name: &str, most: usize) -> Case {
        self.retried = Some(most);
        self.looks_up(name)
    }

    /// The run makes one connection to the hold listener, which receives `bytes`.
    fn holds(mut self, bytes: &[u8]) -> Case {
        self.held.push(bytes.to_vec());
        self
    }

    fn taking(mut self, least: Duration, most: Duration) -> Case {
        self.took = (least, most);
        self
    }

    /// What the client must read, all of it, until the proxy closes.
    fn answer(&self) -> Vec<u8> {
        match &self.want {
            Want::Refused(rejection) => status_answer(rejection.status()),
            Want::Unanswered(_) => Vec::new(),
            Want::Hello(_) | Want::Relayed(_) => ESTABLISHED.to_vec(),
            Want::Tunnel => [ESTABLISHED, VENDOR_OK].concat(),
        }
    }
}

/// `CONNECT target HTTP/1.1` with `Host: target`.
fn connect(target: &str) -> Vec<u8> {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes()
}

/// A request line and its empty line, nothing else.
fn bare(line: &str) -> Vec<u8> {
    format!("{line}\r\n\r\n").into_bytes()
}

/// `CONNECT api.vendor.test:443 HTTP/1.1` with these header lines.
fn with_headers(headers: &[&str]) -> Vec<u8> {
    let mut head = format!("CONNECT {VENDOR}:443 HTTP/1.1\r\n");
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// The whole answer of a refusal (or of the 503): the status line and two fixed headers.
fn status_answer(status: u16) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        other => panic!("no rejection is answered {other}"),
    };
    format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn ips(texts: &[&str]) -> Vec<IpAddr> {
    texts.iter().map(|t| ip(t)).collect()
}

fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A name of exactly `len` bytes ending in `.resolve.test`, in labels of at most 63.
fn long_name(len: usize) -> String {
    let mut rest = len - ZONE.len() - 1;
    let mut labels = Vec::new();
    while rest > 0 {
        // Leave room for the dot before the next label.
        let take = if rest > 63 { 63.min(rest - 2) } else { rest };
        labels.push("a".repeat(take));
        rest -= take;
        rest = rest.saturating_sub(1);
    }
    let name = format!("{}.{ZONE}", labels.join("."));
    assert_eq!(name.len(), len, "{name}");
    name
}

// ------------------------------------------------------------------------------------------------
// ClientHellos.

fn client_config(roots: rustls::RootCertStore) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The first flight of a real rustls client for `server` (no SNI when it is an IP address).
fn real_hello(server: &str) -> Vec<u8> {
    hello::real(server).unwrap()
}

/// A real ClientHello's handshake message split over two records (legal TLS, refused here).
fn split_hello(server: &str) -> Vec<u8> {
    let hello = real_hello(server);
    let payload = &hello[5..];
    let (first, second) = payload.split_at(payload.len() / 2);
    [hello::record(22, first), hello::record(22, second)].concat()
}

/// A real ClientHello with one more byte in its record, after the handshake message.
fn hello_with_trailing_byte(server: &str) -> Vec<u8> {
    let hello = real_hello(server);
    let mut payload = hello[5..].to_vec();
    payload.push(0);
    hello::record(22, &payload)
}

// ------------------------------------------------------------------------------------------------
// The fixture.

/// A listener on 127.0.0.1 (and ::1) at one port: what a loopback answer would reach if dialed.
struct Trap {
    port: u16,
    accepted: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Trap {
    async fn start() -> Trap {
        let v4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = v4.local_addr().unwrap().port();
        let mut listeners = vec![v4];
        // Best effort: a host without IPv6 loopback cannot be dialed there either.
        if let Ok(v6) = TcpListener::bind(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port)).await {
            listeners.push(v6);
        }
        let accepted = Arc::new(AtomicUsize::new(0));
        let tasks = listeners
            .into_iter()
            .map(|listener| {
                let accepted = accepted.clone();
                tokio::spawn(async move {
                    while let Ok((stream, _)) = listener.accept().await {
                        accepted.fetch_add(1, Ordering::SeqCst);
                        drop(stream);
                    }
                })
            })
            .collect();
        Trap {
            port,
            accepted,
            tasks,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What one connection to the hold listener received, and whether the proxy ended it (EOF).
#[derive(Debug, Clone, Default)]
struct Held {
    bytes: Vec<u8>,
    ended: bool,
}

/// A listener on 127.0.0.1 that records every byte it is sent, answers nothing and never closes
/// first (so a half-closed tunnel to it can only end at the proxy's deadline).
struct Hold {
    addr: SocketAddr,
    connections: Arc<Mutex<Vec<Held>>>,
    task: JoinHandle<()>,
}

impl Hold {
    async fn start() -> Hold {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(Mutex::new(Vec::<Held>::new()));
        let log = connections.clone();
        let task = tokio::spawn(async move {
            let mut open = JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                let at = {
                    let mut log = log.lock().unwrap();
                    log.push(Held::default());
                    log.len() - 1
                };
                let log = log.clone();
                open.spawn(async move {
                    let mut buf = [0u8; 4096];
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => log.lock().unwrap()[at].bytes.extend_from_slice(&buf[..n]),
                        }
                    }
                    log.lock().unwrap()[at].ended = true;
                    // Keep our side open: the proxy is the one to close.
                    std::future::pending::<()>().await;
                    drop(stream);
                });
            }
        });
        Hold {
            addr,
            connections,
            task,
        }
    }

    fn connections(&self) -> Vec<Held> {
        self.connections.lock().unwrap().clone()
    }

    /// The connections made since the first `from`, once `want` of them have ended and a moment
    /// has passed in which one more would have shown (or the bound has passed).
    async fn since(&self, from: usize, want: usize) -> Vec<Held> {
        let started = Instant::now();
        loop {
            let new: Vec<Held> = self.connections()[from..].to_vec();
            let done = new.len() >= want && new.iter().all(|h| h.ended);
            if (done && started.elapsed() > Duration::from_millis(20)) || started.elapsed() > BOUND
            {
                return new;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the proxy on the socket tells: that it listens, and each connection's [`Report`] as it
/// ends.
#[derive(Default)]
struct Reports {
    listening: AtomicBool,
    ended: Mutex<Vec<Report>>,
}

impl Observe for Reports {
    fn listening(&self, _path: &Path) {
        self.listening.store(true, Ordering::SeqCst);
    }

    fn ended(&self, report: &Report) {
        self.ended.lock().unwrap().push(report.clone());
    }
}

impl Reports {
    fn len(&self) -> usize {
        self.ended.lock().unwrap().len()
    }

    /// The reports after the first `from`, once there is one.
    async fn after(&self, from: usize) -> Vec<Report> {
        let started = Instant::now();
        loop {
            let ended = self.ended.lock().unwrap()[from..].to_vec();
            if !ended.is_empty() {
                return ended;
            }
            assert!(started.elapsed() < BOUND, "no report of a connection");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The proxy (on its socket and by `handle`), its resolver, the fake vendor's DNS and TLS
/// servers, the hold listener and the trap, for one test. Dropped, it stops the proxy and removes
/// its directory whatever happened; [`Fixture::finish`] also checks that nothing was left.
struct Fixture {
    dir: PathBuf,
    socket: PathBuf,
    config: Arc<Config>,
    resolver: Arc<UpstreamResolver>,
    dns: dns::Server,
    vendor: tls::Server,
    tls: tokio_rustls::TlsConnector,
    trap: Trap,
    hold: Hold,
    reports: Arc<Reports>,
    /// TLS requests the vendor answered through a tunnel: exactly what its `seen()` must list.
    answered: AtomicUsize,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<io::Result<()>>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Fixture {
    async fn start(script: Script, tune: impl FnOnce(&mut Config)) -> Fixture {
        let dns = dns::start(SocketAddr::from(([127, 0, 0, 1], 0)), script)
            .await
            .unwrap();
        let test_ca = ca::generate(&[VENDOR]).unwrap();
        let identity = tls::Identity {
            cert_pem: test_ca.cert_pem.clone(),
            key_pem: test_ca.key_pem.clone(),
        };
        let vendor =
            tls::start(TcpListener::bind("127.0.0.1:0").await.unwrap(), &identity).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(test_ca.ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(roots)));
        let trap = Trap::start().await;
        let hold = Hold::start().await;

        let rules = Rules {
            allowlist: Allowlist::parse(&[
                VENDOR.to_owned(),
                HOLD.to_owned(),
                format!("*.{ZONE}:{}", trap.port),
            ])
            .unwrap(),
            mappings: vec![
                Mapping::parse(&format!("{VENDOR}={}", vendor.addr())).unwrap(),
                Mapping::parse(&format!("{HOLD}={}", hold.addr)).unwrap(),
            ],
            host_own: vec![ip(HOST_OWN)],
            ..Rules::default()
        };
        let mut config = Config {
            max_tunnels: MAX_TUNNELS,
            idle: IDLE,
            half_close: HALF_CLOSE,
            head_deadline: HEAD_DEADLINE,
            hello_deadline: HELLO_DEADLINE,
            connect_timeout: Duration::from_secs(1),
            ..Config::new(rules)
        };
        tune(&mut config);
        let config = Arc::new(config);
        let resolver = Arc::new(UpstreamResolver::with_timeout(dns.addr(), RESOLVE_TIMEOUT));

        let dir = std::env::temp_dir().join(format!(
            "cordon-egress-hostile-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir(&dir).unwrap();
        let socket = dir.join("egress.sock");
        let (stop, stopped) = oneshot::channel::<()>();
        let reports = Arc::new(Reports::default());
        let server = tokio::spawn({
            let socket = socket.clone();
            let config = config.clone();
            let resolver: Arc<dyn Resolve> = resolver.clone();
            let observer: Arc<dyn Observe> = reports.clone();
            let shutdown = async {
                let _ = stopped.await;
            };
            async move { serve_unix_with(&socket, config, resolver, shutdown, observer).await }
        });
        let fixture = Fixture {
            dir,
            socket,
            config,
            resolver,
            dns,
            vendor,
            tls,
            trap,
            hold,
            reports,
            answered: AtomicUsize::new(0),
            stop: Some(stop),
            server: Some(server),
        };
        let started = Instant::now();
        while !fixture.reports.listening.load(Ordering::SeqCst) {
            assert!(started.elapsed() < BOUND, "the proxy never listened");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        fixture
    }

    /// Run every case, each by `handle` and over the socket.
    async fn check_all(&self, cases: &[Case]) {
        for case in cases {
            self.check(case).await;
        }
    }

    /// Run one case by `handle` and then over the socket, and check the answer, the outcome and
    /// the address dialed (the same both ways), what it looked up, what the hold listener got,
    /// and that the trap was not dialed.
    async fn check(&self, case: &Case) {
        let what = &case.what;
        let asked = self.dns.queries().len();
        let held = self.hold.connections().len();
        let dialed = if case.want == Want::Tunnel {
            Some(self.vendor.addr())
        } else if !case.held.is_empty() {
            Some(self.hold.addr)
        } else {
            None
        };

        let (answer, report, took) = self.by_handle(case).await;
        assert_eq!(shown(&answer), shown(&case.answer()), "{what}: the answer");
        assert_eq!(report.dialed, dialed, "{what}: the address dialed");
        assert_outcome(case, &report.outcome, "by handle");
        let (least, most) = case.took;
        assert!(least <= took && took < most, "{what}: took {took:?}");

        let reported = self.reports.len();
        let (again, took) = self.over_socket(case).await;
        assert_eq!(shown(&again), shown(&answer), "{what}: over the socket");
        assert!(
            least <= took && took < most,
            "{what}: took {took:?} over the socket"
        );
        let reports = self.reports.after(reported).await;
        let [again] = reports.as_slice() else {
            panic!("{what}: one connection, reported {reports:?}");
        };
        assert_eq!(
            again.dialed, dialed,
            "{what}: the address dialed over the socket"
        );
        assert_outcome(case, &again.outcome, "over the socket");

        let mut got: Vec<String> = self.dns.queries()[asked..]
            .iter()
            .map(|q| format!("{} {}", q.name, q.record_type))
            .collect();
        got.sort();
        match case.retried {
            None => {
                let mut want = [case.queries.clone(), case.queries.clone()].concat();
                want.sort();
                assert_eq!(got, want, "{what}: the DNS queries of both runs");
            }
            Some(most) => {
                let mut asked: Vec<String> = got.clone();
                asked.dedup();
                let mut want = case.queries.clone();
                want.sort();
                assert_eq!(asked, want, "{what}: the DNS queries of both runs");
                for query in &want {
                    let n = got.iter().filter(|q| *q == query).count();
                    assert!(
                        (2..=2 * most).contains(&n),
                        "{what}: {query} asked {n} times"
                    );
                }
            }
        }

        let want: Vec<Vec<u8>> = [case.held.clone(), case.held.clone()].concat();
        let got = self.hold.since(held, want.len()).await;
        let got_bytes: Vec<Vec<u8>> = got.iter().map(|h| h.bytes.clone()).collect();
        assert_eq!(got_bytes, want, "{what}: what the hold listener received");
        assert!(got.iter().all(|h| h.ended), "{what}: an upstream left open");
        assert_eq!(self.trap.accepted(), 0, "{what}: an answer was dialed");
    }

    /// One run by `handle` on a socket pair: the answer, the report, how long it took.
    async fn by_handle(&self, case: &Case) -> (Vec<u8>, Report, Duration) {
        let (mut client, server) = UnixStream::pair().unwrap();
        let config = self.config.clone();
        let resolver = self.resolver.clone();
        let started = Instant::now();
        let task = tokio::spawn(async move { handle_reported(server, &config, &*resolver).await });
        let answer = self.drive(&mut client, case).await;
        let report = timeout(BOUND, task)
            .await
            .unwrap_or_else(|_| panic!("{}: handle never returned", case.what))
            .unwrap();
        (answer, report, started.elapsed())
    }

    /// One run over the proxy's socket: the answer, how long it took.
    async fn over_socket(&self, case: &Case) -> (Vec<u8>, Duration) {
        let started = Instant::now();
        let mut client = UnixStream::connect(&self.socket).await.unwrap();
        let answer = self.drive(&mut client, case).await;
        (answer, started.elapsed())
    }

    /// Do the case's steps and read until the proxy closes: everything read.
    async fn drive<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        case: &Case,
    ) -> Vec<u8> {
        let what = &case.what;
        let mut got = Vec::new();
        for step in &case.steps {
            match step {
                Step::Write(bytes) => {
                    let _ = stream.write_all(bytes).await;
                }
                Step::Trickle(bytes, gap) => {
                    for byte in bytes {
                        if stream.write_all(std::slice::from_ref(byte)).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(*gap).await;
                    }
                }
                Step::Fin => {
                    let _ = stream.shutdown().await;
                }
                Step::Pause(pause) => tokio::time::sleep(*pause).await,
                Step::Established => got.extend_from_slice(&read_established(stream, what).await),
            }
        }
        if case.want == Want::Tunnel {
            got.extend_from_slice(&self.get_through(stream, what).await);
        }
        got.extend_from_slice(&read_to_close(stream, what).await);
        got
    }

    /// Read the 200, then `GET /` over TLS through the tunnel: the 200 and [`VENDOR_OK`], or
    /// whatever came instead of the 200.
    async fn get_through<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        what: &str,
    ) -> Vec<u8> {
        let established = read_established(stream, what).await;
        if established != ESTABLISHED {
            return established;
        }
        let name = ServerName::try_from(VENDOR).unwrap();
        let mut tls = timeout(BOUND, self.tls.connect(name, &mut *stream))
            .await
            .unwrap_or_else(|_| panic!("{what}: the TLS handshake hung"))
            .unwrap_or_else(|e| panic!("{what}: the TLS handshake through the tunnel: {e}"));
        tls.write_all(
            format!("GET / HTTP/1.1\r\nHost: {VENDOR}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut response = Vec::new();
        timeout(BOUND, tls.read_to_end(&mut response))
            .await
            .unwrap_or_else(|_| panic!("{what}: the vendor's answer hung"))
            .unwrap_or_else(|e| panic!("{what}: the vendor's answer: {e}"));
        let _ = tls.shutdown().await;
        let text = shown(&response);
        assert!(
            text.starts_with("HTTP/1.1 200 ") && text.ends_with("\r\n\r\nfake-vendor ok\n"),
            "{what}: {text}"
        );
        self.answered.fetch_add(1, Ordering::SeqCst);
        [ESTABLISHED, VENDOR_OK].concat()
    }

    /// The proxy holds no connection: `max_tunnels` silent connections are all taken and one more
    /// is answered 503 (a connection the proxy still held would take a slot, and the last of the
    /// silent ones would get the 503).
    async fn assert_nothing_open(&self) {
        let started = Instant::now();
        loop {
            let mut silent = Vec::new();
            for _ in 0..self.config.max_tunnels {
                silent.push(UnixStream::connect(&self.socket).await.unwrap());
            }
            let mut extra = UnixStream::connect(&self.socket).await.unwrap();
            let answer = read_to_close(&mut extra, "one over max_tunnels").await;
            assert_eq!(shown(&answer), shown(&status_answer(503)));
            let mut answered = 0;
            for stream in &mut silent {
                let mut byte = [0u8; 1];
                if timeout(Duration::from_millis(20), stream.read(&mut byte))
                    .await
                    .is_ok()
                {
                    answered += 1;
                }
            }
            if answered == 0 {
                return;
            }
            assert!(
                started.elapsed() < BOUND,
                "{answered} connection(s) still held by the proxy"
            );
            drop(silent);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Check that nothing was left (no connection held by the proxy, no upstream open, the trap
    /// never dialed, the vendor saw exactly the tunnelled requests), stop the proxy, and check
    /// that its socket and directory are gone.
    async fn finish(mut self) {
        self.assert_nothing_open().await;
        assert_eq!(self.trap.accepted(), 0, "an answer was dialed");
        let held = self.hold.since(0, 0).await;
        assert!(
            held.iter().all(|h| h.ended),
            "an upstream left open: {held:?}"
        );
        let answered = self.answered.load(Ordering::SeqCst);
        let want: Vec<tls::Seen> = (0..answered)
            .map(|_| tls::Seen {
                sni: Some(VENDOR.to_owned()),
                method: "GET".to_owned(),
                path: "/".to_owned(),
            })
            .collect();
        assert_eq!(self.vendor.seen(), want, "what reached the vendor");
        if let Some(stop) = self.stop.take() {
            stop.send(()).unwrap();
        }
        if let Some(server) = self.server.take() {
            timeout(BOUND, server).await.unwrap().unwrap().unwrap();
        }
        assert!(!self.socket.exists(), "the socket is removed at shutdown");
        // Only the socket was ever in it: `remove_dir` fails on anything left.
        std::fs::remove_dir(&self.dir).unwrap();
    }
}

/// The outcome a case wants (`how` it ran, for the message).
fn assert_outcome(case: &Case, outcome: &Outcome, how: &str) {
    let what = &case.what;
    match &case.want {
        Want::Refused(rejection) => {
            assert_eq!(outcome, &Outcome::Refused(*rejection), "{what} {how}")
        }
        Want::Unanswered(want) => assert_eq!(outcome, want, "{what} {how}"),
        Want::Hello(why) => assert_eq!(outcome, &Outcome::HelloRefused(why), "{what} {how}"),
        // TLS's own byte counts vary (a resumed session is shorter): bytes went both ways.
        Want::Tunnel => assert!(
            matches!(outcome, Outcome::Relayed { up, down, end: End::Closed } if *up > 0 && *down > 0),
            "{what} {how}: {outcome:?}"
        ),
        Want::Relayed(end) => {
            let up: usize = case.held.iter().map(Vec::len).sum();
            let want = Outcome::Relayed {
                up: up as u64,
                down: 0,
                end: *end,
            };
            assert_eq!(outcome, &want, "{what} {how}");
        }
    }
}

/// Read exactly the 200's length (or less, if the proxy closes first).
async fn read_established<S: AsyncRead + Unpin>(stream: &mut S, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while got.len() < ESTABLISHED.len() {
        match timeout(BOUND, stream.read(&mut byte)).await {
            Err(_) => panic!("{what}: no answer: {}", shown(&got)),
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(_)) => got.push(byte[0]),
        }
    }
    got
}

/// Read until the proxy closes (an EOF, or a reset when the proxy closed with our bytes unread:
/// a unix socket's way of saying so, after everything it was sent).
async fn read_to_close<S: AsyncRead + Unpin>(stream: &mut S, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(BOUND, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "{what}: the proxy left the connection open: {}",
                shown(&got)
            ),
            Ok(Ok(0)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => return got,
            Ok(Err(e)) => panic!("{what}: reading the answer: {e}"),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// 1. IPv4 literals.

#[tokio::test]
async fn c1_ipv4_literals_in_every_numeric_form_are_refused_unresolved() {
    let fx = Fixture::start(Script::new(), |_| {}).await;
    let trap = fx.trap.port;
    let mut cases: Vec<Case> = [
        "127.0.0.1:443",
        "127.1:443",
        "127.0.1:443",
        "0177.0.0.1:443",
        "0177.1:443",
        "00000177.0.0.1:443",
        "0x7f.0.0.1:443",
        "0X7F.0.0.1:443",
        "0x7f.1:443",
        "0x7f000001:443",
        "0X7F000001:443",
        "0x00007f000001:443",
        "2130706433:443",
        "017700000001:443",
        "0x7f.0.0.01:443",
        "0177.0x0.0.1:443",
        "127.0x0.0x0.1:443",
        "127.0.0.1.:443",
        "0:443",
        "0x:443",
        "0.0.0.0:443",
        "10.0.0.1:443",
        "169.254.169.254:443",
        "4294967295:443",
        "4294967296:443",
        "1.2.3.4.5:443",
        "999.999.999.999:443",
        // The address of an allowed host, and of the proxy's own host.
        "160.79.104.10:443",
        "160.79.104.20:443",
    ]
    .iter()
    .map(|t| Case::refused(t, Rejection::Host))
    .collect();
    // On the port where a dial would reach the trap.
    for literal in ["127.0.0.1", "127.1", "2130706433", "0x7f000001"] {
        cases.push(Case::refused(&format!("{literal}:{trap}"), Rejection::Host));
    }
    // Without a port: no authority at all.
    for literal in [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
    ] {
        cases.push(Case::refused(literal, Rejection::Target));
    }
    // A literal in the Host header of a listed CONNECT.
    cases.push(Case::head(
        "Host: 127.0.0.1:443",
        with_headers(&["Host: 127.0.0.1:443"]),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    assert!(fx.dns.queries().is_empty());
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 2. IPv6 literals, IPv4 inside IPv6.

#[tokio::test]
async fn c2_ipv6_literals_in_any_form_are_refused_unresolved() {
    let fx = Fixture::start(Script::new(), |_| {}).await;
    let trap = fx.trap.port;
    let mut cases: Vec<Case> = [
        "[::1]:443",
        "[0:0:0:0:0:0:0:1]:443",
        "[::]:443",
        "[::ffff:127.0.0.1]:443",
        "[::ffff:7f00:1]:443",
        "[::127.0.0.1]:443",
        "[::ffff:0:127.0.0.1]:443",
        "[64:ff9b::7f00:1]:443",
        "[64:ff9b::127.0.0.1]:443",
        "[2002:7f00:1::]:443",
        "[2001::1]:443",
        "[fe80::1%25eth0]:443",
        "[fe80::1%eth0]:443",
        "[fe80::1%251]:443",
        "[fd00:ec2::254]:443",
        "[::ffff:169.254.169.254]:443",
        "[2607:6bc0::10]:443",
        // Unbracketed: split at the last colon, what is left is no name either.
        "::1:443",
        "::ffff:127.0.0.1:443",
        "fe80::1%eth0:443",
        "2002:7f00:1:::443",
    ]
    .iter()
    .map(|t| Case::refused(t, Rejection::Host))
    .collect();
    cases.push(Case::refused(&format!("[::1]:{trap}"), Rejection::Host));
    cases.push(Case::refused(
        &format!("[::ffff:127.0.0.1]:{trap}"),
        Rejection::Host,
    ));
    // Bracketed, with or without a port: the host rule, before any port is looked for.
    for literal in ["[::1]", "[::ffff:127.0.0.1]", "[fe80::1%25eth0]", "[::1]:"] {
        cases.push(Case::refused(literal, Rejection::Host));
    }
    // Unbracketed, the last colon splits off what is no port.
    cases.push(Case::refused("::ffff:127.0.0.1", Rejection::Port));
    // `::1` unbracketed reads as host `:` and port 1.
    cases.push(Case::refused("::1", Rejection::Host));
    cases.push(Case::head(
        "Host: [::1]:443",
        with_headers(&["Host: [::1]:443"]),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    assert!(fx.dns.queries().is_empty());
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 3. Names resolving to denied addresses, through the real resolver.

#[tokio::test]
async fn c3_names_resolving_to_denied_addresses_are_refused_and_never_dialed() {
    // Each `label.resolve.test` is listed, answers these addresses, is looked up once per run
    // (one A, one AAAA query) and is refused `egress-address`.
    #[rustfmt::skip]
    let denied: &[(&str, &[&str])] = &[
        ("loopback", &["127.0.0.1"]),
        ("loopback-top", &["127.255.255.254"]),
        ("unspecified", &["0.0.0.0"]),
        ("this-network", &["0.1.2.3"]),
        ("metadata", &["169.254.169.254"]),
        ("metadata-ecs", &["169.254.170.2"]),
        ("metadata-alibaba", &["100.100.100.200"]),
        ("metadata-azure", &["168.63.129.16"]),
        ("metadata-aws6", &["fd00:ec2::254"]),
        ("link-local", &["169.254.1.1"]),
        ("private10", &["10.0.0.1"]),
        ("private172", &["172.16.0.1"]),
        ("private172-top", &["172.31.255.255"]),
        ("private192", &["192.168.1.1"]),
        ("cgnat", &["100.64.0.1"]),
        ("cgnat-top", &["100.127.255.255"]),
        ("ietf", &["192.0.0.9"]),
        ("benchmarking", &["198.18.0.1"]),
        ("multicast", &["224.0.0.1"]),
        ("multicast-ssdp", &["239.255.255.250"]),
        ("broadcast", &["255.255.255.255"]),
        ("reserved", &["240.0.0.1"]),
        ("doc1", &["192.0.2.1"]),
        ("doc2", &["198.51.100.1"]),
        ("doc3", &["203.0.113.1"]),
        ("host-own", &[HOST_OWN]),
        ("v6-loopback", &["::1"]),
        ("v6-unspecified", &["::"]),
        ("v6-mapped-private", &["::ffff:10.0.0.1"]),
        ("v6-mapped-loopback", &["::ffff:127.0.0.1"]),
        ("v6-mapped-metadata", &["::ffff:169.254.169.254"]),
        ("v6-mapped-public", &["::ffff:160.79.104.10"]),
        ("v6-mapped-host-own", &["::ffff:160.79.104.20"]),
        ("v6-compatible", &["::10.0.0.1"]),
        ("v6-siit", &["::ffff:0:10.0.0.1"]),
        ("nat64", &["64:ff9b::a00:1"]),
        ("nat64-loopback", &["64:ff9b::7f00:1"]),
        ("nat64-public", &["64:ff9b::a04f:680a"]),
        ("nat64-local", &["64:ff9b:1::a00:1"]),
        ("sixtofour", &["2002:a00:1::"]),
        ("sixtofour-loopback", &["2002:7f00:1::1"]),
        ("teredo", &["2001::1"]),
        ("v6-ula", &["fd00::1"]),
        ("v6-link-local", &["fe80::1"]),
        ("v6-site-local", &["fec0::1"]),
        ("v6-multicast", &["ff02::1"]),
        ("v6-doc", &["2001:db8::1"]),
        ("v6-doc-new", &["3fff::1"]),
        ("v6-discard", &["100::1"]),
        ("no-addresses", &[]),
        // Mixed answers: one denied address refuses the name, wherever it is in the answer.
        ("a-public-aaaa-private", &[PUBLIC_V4, "fd00::1"]),
        ("a-public-aaaa-loopback", &[PUBLIC_V4, "::1"]),
        ("a-private-aaaa-public", &["10.0.0.1", PUBLIC_V6]),
        ("two-a-private-first", &["10.0.0.1", PUBLIC_V4]),
        ("two-a-private-last", &[PUBLIC_V4, "192.168.0.1"]),
        ("two-a-metadata-last", &[PUBLIC_V4, "169.254.169.254"]),
        ("two-aaaa-mapped-last", &[PUBLIC_V6, "::ffff:127.0.0.1"]),
    ];
    // What the resolver gets instead of addresses: the refusal, and how many queries of each
    // type one CONNECT makes (an error code is an answer: asked once; a silence is asked again
    // once its try's timeout has passed, `ATTEMPTS` times in all).
    #[rustfmt::skip]
    let failing: Vec<(&str, Answer, Rejection, usize)> = vec![
        ("servfail", Answer::ServFail, Rejection::Resolve, 1),
        ("nxdomain", Answer::NxDomain, Rejection::Resolve, 1),
        ("empty", Answer::Empty, Rejection::Address, 1),
        ("silent", Answer::Silent, Rejection::Resolve, usize::from(ATTEMPTS)),
        // Rebinding: the host's own address (refused, never dialed), then loopback. Each CONNECT
        // is a new decision on its own answer: the second (over the socket) sees loopback, and
        // the trap shows it was not dialed either.
        ("rebind", Answer::Sequence(vec![ips(&[HOST_OWN]), ips(&[HOST_OWN]), ips(&["127.0.0.1"])]), Rejection::Address, 1),
        ("rebind6", Answer::Sequence(vec![ips(&[HOST_OWN]), ips(&[HOST_OWN]), ips(&["::1"])]), Rejection::Address, 1),
    ];
    let mut script = Script::new();
    for (label, addrs) in denied {
        script = script.answer(&format!("{label}.{ZONE}"), Answer::Addresses(ips(addrs)));
    }
    for (label, answer, _, _) in &failing {
        script = script.answer(&format!("{label}.{ZONE}"), answer.clone());
    }
    let fx = Fixture::start(script, |_| {}).await;
    let trap = fx.trap.port;
    let mut cases: Vec<Case> = denied
        .iter()
        .map(|(label, _)| {
            let name = format!("{label}.{ZONE}");
            Case::refused(&format!("{name}:{trap}"), Rejection::Address).looks_up(&name)
        })
        .collect();
    for (label, answer, rejection, tries) in &failing {
        let name = format!("{label}.{ZONE}");
        let case = Case::refused(&format!("{name}:{trap}"), *rejection);
        cases.push(match answer {
            // The resolver's bound: two tries of its timeout (and slack for a loaded machine),
            // not three.
            Answer::Silent => case.looks_up_times(&name, *tries).taking(
                RESOLVE_TIMEOUT * u32::from(ATTEMPTS),
                RESOLVE_TIMEOUT * 2 + Duration::from_millis(1200),
            ),
            _ => case.looks_up_times(&name, *tries),
        });
    }
    // An unscripted name under the zone: NXDOMAIN from the server.
    let unscripted = format!("unscripted.{ZONE}");
    cases.push(
        Case::refused(&format!("{unscripted}:{trap}"), Rejection::Resolve).looks_up(&unscripted),
    );
    // The positive control: a mapped name is dialed at its mapping, never resolved.
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 4. What is refused before a lookup is never looked up.

#[tokio::test]
async fn c4_a_request_refused_before_its_lookup_asks_the_dns_nothing() {
    // Every name here resolves (to loopback) if asked.
    let mut script = Script::new();
    for name in [
        "loopback.resolve.test",
        "evil.test",
        "resolve.test",
        "xresolve.test",
        "loopback.resolve.test.evil.test",
        "vendor.test",
        "x.api.vendor.test",
        "api.vendor.test",
    ] {
        script = script.answer(name, Answer::Addresses(ips(&["127.0.0.1", "::1"])));
    }
    let fx = Fixture::start(script, |_| {}).await;
    let trap = fx.trap.port;
    let listed = format!("loopback.{ZONE}:{trap}");
    let mut cases = vec![
        // Unlisted names, on any port.
        Case::refused("evil.test:443", Rejection::NotAllowed),
        Case::refused(&format!("evil.test:{trap}"), Rejection::NotAllowed),
        Case::refused(&format!("{ZONE}:{trap}"), Rejection::NotAllowed),
        Case::refused(&format!("x{ZONE}:{trap}"), Rejection::NotAllowed),
        Case::refused(
            &format!("loopback.{ZONE}.evil.test:{trap}"),
            Rejection::NotAllowed,
        ),
        Case::refused("vendor.test:443", Rejection::NotAllowed),
        Case::refused("x.api.vendor.test:443", Rejection::NotAllowed),
        Case::refused("api.vendor.tes:443", Rejection::NotAllowed),
        // Listed names on another port.
        Case::refused(&format!("loopback.{ZONE}:443"), Rejection::Port),
        Case::refused(&format!("loopback.{ZONE}:{}", trap + 1), Rejection::Port),
        // Bad syntax around a listed name.
        Case::refused(&format!("loopback.{ZONE}"), Rejection::Target),
        Case::refused(&format!("loopback.{ZONE}:0{trap}"), Rejection::Port),
        Case::refused(&format!("loop_back.{ZONE}:{trap}"), Rejection::Host),
        Case::refused(&format!("user@loopback.{ZONE}:{trap}"), Rejection::Host),
        Case::refused(&format!("127.0.0.1:{trap}"), Rejection::Host),
        // Other methods and versions naming a listed name.
        Case::head(
            "GET absolute",
            bare(&format!("GET http://{listed}/ HTTP/1.1")),
            Want::Refused(Rejection::Method),
        ),
        Case::head(
            "POST absolute",
            bare(&format!("POST https://{listed}/ HTTP/1.1")),
            Want::Refused(Rejection::Method),
        ),
        Case::head(
            "HTTP/1.0",
            bare(&format!("CONNECT {listed} HTTP/1.0")),
            Want::Refused(Rejection::Version),
        ),
        // A bad head around a listed name.
        Case::head(
            "duplicate Host",
            format!("CONNECT {listed} HTTP/1.1\r\nHost: {listed}\r\nHost: {listed}\r\n\r\n")
                .into_bytes(),
            Want::Refused(Rejection::Malformed),
        ),
        Case::head(
            "Host names another authority",
            format!("CONNECT {listed} HTTP/1.1\r\nHost: evil.test:443\r\n\r\n").into_bytes(),
            Want::Refused(Rejection::Malformed),
        ),
        Case::head(
            "bare LF",
            format!("CONNECT {listed} HTTP/1.1\n\n").into_bytes(),
            Want::Refused(Rejection::Malformed),
        ),
        Case::head(
            "33 headers",
            format!(
                "CONNECT {listed} HTTP/1.1\r\n{}\r\n",
                "X: y\r\n".repeat(MAX_HEADERS + 1)
            )
            .into_bytes(),
            Want::Refused(Rejection::HeadTooLarge),
        ),
        // A mapped name is never resolved either.
        Case::tunnel("api.vendor.test:443"),
    ];
    fx.check_all(&cases).await;
    assert_eq!(
        fx.dns.queries(),
        vec![],
        "a request refused before its lookup was looked up"
    );
    // The control: the same name, admitted, is asked for (so the silence above means something).
    cases = vec![Case::refused(&listed, Rejection::Address).looks_up(&format!("loopback.{ZONE}"))];
    fx.check_all(&cases).await;
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 5. Look-alike hosts.

#[tokio::test]
async fn c5_look_alike_hosts_are_refused_and_case_and_one_dot_are_folded() {
    let label63 = format!("{}.{ZONE}", "a".repeat(63));
    let label64 = format!("{}.{ZONE}", "a".repeat(64));
    let name253 = long_name(253);
    let name254 = long_name(254);
    let loopback = || Answer::Addresses(ips(&["127.0.0.1"]));
    let script = Script::new()
        .answer(&format!("loopback.{ZONE}"), loopback())
        .answer(&label63, loopback())
        .answer(&label64, loopback())
        .answer(&name253, loopback())
        .answer(&name254, loopback());
    let fx = Fixture::start(script, |_| {}).await;
    let trap = fx.trap.port;
    let mut cases = vec![];
    // Bytes no request line may hold.
    for target in [
        "api.vendor.test\0:443",
        "api.vendor.test\0.evil.test:443",
        "api\0.vendor.test:443",
        "api.vendor.test\x01:443",
        "api.vendor.test\x1b:443",
        "api.vendor.test\x7f:443",
        "api.vendor.test\t:443",
        "api\u{ff0e}vendor.test:443",
        "api\u{3002}vendor.test:443",
        "\u{ff41}\u{ff50}\u{ff49}.vendor.test:443",
        "api\u{200b}.vendor.test:443",
        "a\u{200d}pi.vendor.test:443",
        "api.vendor.test\u{200c}:443",
        "\u{feff}api.vendor.test:443",
        "api\u{ad}.vendor.test:443",
        "\u{430}pi.vendor.test:443",
        "api.vendor.te\u{17f}t:443",
    ] {
        cases.push(Case::refused(target, Rejection::Malformed));
    }
    cases.push(Case::head(
        "invalid UTF-8 in the host",
        b"CONNECT api.vendor.\xfftest:443 HTTP/1.1\r\n\r\n".to_vec(),
        Want::Refused(Rejection::Malformed),
    ));
    // ASCII that is not LDH, or not a name.
    for target in [
        "api%2evendor.test:443",
        "api%2Evendor.test:443",
        "%61pi.vendor.test:443",
        "api.vendor.test%00:443",
        "api.vendor.test..:443",
        "api..vendor.test:443",
        ".api.vendor.test:443",
        "..:443",
        ".:443",
        ":443",
        "-api.vendor.test:443",
        "api-.vendor.test:443",
        "api.-vendor.test:443",
        "api.vendor-.test:443",
        "api_vendor.test:443",
        "_api.vendor.test:443",
        "api.vendor.test_:443",
        "api\\.vendor.test:443",
        "*.vendor.test:443",
        "api.vendor.test*:443",
        "api.vendor.test,evil.test:443",
        "api.vendor.test;evil.test:443",
        "'api.vendor.test':443",
        "\"api.vendor.test\":443",
        "<api.vendor.test>:443",
    ] {
        cases.push(Case::refused(target, Rejection::Host));
    }
    // Length bounds, under the resolved zone: the longest are looked up, one more is not.
    cases.push(Case::refused(&format!("{label64}:{trap}"), Rejection::Host));
    cases.push(Case::refused(&format!("{name254}:{trap}"), Rejection::Host));
    cases.push(Case::refused(&format!("{label63}:{trap}"), Rejection::Address).looks_up(&label63));
    cases.push(Case::refused(&format!("{name253}:{trap}"), Rejection::Address).looks_up(&name253));
    cases.push(Case::refused(&format!("{name253}.:{trap}"), Rejection::Address).looks_up(&name253));
    // Case and one trailing dot are folded, once: matched and looked up canonically.
    let canonical = format!("loopback.{ZONE}");
    for target in [
        format!("Loopback.RESOLVE.Test:{trap}"),
        format!("LOOPBACK.RESOLVE.TEST.:{trap}"),
        format!("loopback.{ZONE}.:{trap}"),
    ] {
        cases.push(Case::refused(&target, Rejection::Address).looks_up(&canonical));
    }
    cases.push(Case::refused(
        &format!("loopback.{ZONE}..:{trap}"),
        Rejection::Host,
    ));
    for target in [
        "API.Vendor.TEST:443",
        "api.vendor.test.:443",
        "API.VENDOR.TEST.:443",
    ] {
        cases.push(Case::tunnel(target));
    }
    cases.push(Case::head(
        "a folded Host header",
        with_headers(&["Host: Api.Vendor.Test.:443"]),
        Want::Tunnel,
    ));
    cases.push(Case::head(
        "a look-alike Host header",
        with_headers(&["Host: api\u{ff0e}vendor.test:443"]),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::head(
        "a NUL in the Host header",
        with_headers(&["Host: api.vendor.test\0:443"]),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;

    // The case on the wire. The fake DNS server records names lowercased, so the name the proxy
    // asked for is read from its queries' own bytes, off a socket that never answers.
    let sink = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let resolver =
        UpstreamResolver::with_timeout(sink.local_addr().unwrap(), Duration::from_millis(200));
    let (mut client, server) = UnixStream::pair().unwrap();
    let config = fx.config.clone();
    let task = tokio::spawn(async move { handle_reported(server, &config, &resolver).await });
    let target = format!("Loopback.RESOLVE.Test.:{trap}");
    client.write_all(&connect(&target)).await.unwrap();
    let answer = read_to_close(&mut client, &target).await;
    assert_eq!(shown(&answer), shown(&status_answer(502)));
    let report = timeout(BOUND, task).await.unwrap().unwrap();
    assert_eq!(report.outcome, Outcome::Refused(Rejection::Resolve));
    assert_eq!(report.dialed, None);
    let mut datagram = [0u8; 512];
    let mut queries = 0;
    while let Ok(Ok((n, _))) =
        timeout(Duration::from_millis(50), sink.recv_from(&mut datagram)).await
    {
        // The question's name follows the 12-byte header: the canonical name, one root label.
        let qname = b"\x08loopback\x07resolve\x04test\x00";
        assert_eq!(
            datagram.get(12..12 + qname.len()),
            Some(&qname[..]),
            "{:?}",
            &datagram[..n]
        );
        queries += 1;
    }
    assert!(
        queries >= 2,
        "one A and one AAAA query at least, got {queries}"
    );
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 6. Userinfo and port games.

#[tokio::test]
async fn c6_userinfo_and_port_games_are_refused() {
    let fx = Fixture::start(Script::new(), |_| {}).await;
    let trap = fx.trap.port;
    let vendor_port = fx.vendor.addr().port();
    let hold_port = fx.hold.addr.port();
    let mut cases = vec![];
    for (target, rejection) in [
        ("user@api.vendor.test:443", Rejection::Host),
        ("user:pass@api.vendor.test:443", Rejection::Host),
        ("api.vendor.test:443@evil.test:443", Rejection::Host),
        ("evil.test:443@api.vendor.test:443", Rejection::Host),
        ("evil.test@api.vendor.test:443", Rejection::Host),
        ("api.vendor.test@:443", Rejection::Host),
        ("api.vendor.test:443:443", Rejection::Host),
        ("api.vendor.test:0443", Rejection::Port),
        ("api.vendor.test:00443", Rejection::Port),
        ("api.vendor.test:+443", Rejection::Port),
        ("api.vendor.test:-443", Rejection::Port),
        ("api.vendor.test:65536", Rejection::Port),
        ("api.vendor.test:99999", Rejection::Port),
        ("api.vendor.test:4294967739", Rejection::Port),
        ("api.vendor.test:0", Rejection::Port),
        ("api.vendor.test:", Rejection::Port),
        ("api.vendor.test:0x1bb", Rejection::Port),
        ("api.vendor.test:4_43", Rejection::Port),
        ("api.vendor.test:443.0", Rejection::Port),
        ("api.vendor.test:%34%34%33", Rejection::Port),
        ("api.vendor.test", Rejection::Target),
        // A listed name on another port, the vendor's own port included: the mapping is for 443.
        ("api.vendor.test:80", Rejection::Port),
        ("api.vendor.test:8443", Rejection::Port),
        ("api.vendor.test:65535", Rejection::Port),
        ("hold.vendor.test:444", Rejection::Port),
        ("evil.test:8443", Rejection::NotAllowed),
    ] {
        cases.push(Case::refused(target, rejection));
    }
    cases.push(Case::refused(
        &format!("api.vendor.test:{vendor_port}"),
        Rejection::Port,
    ));
    cases.push(Case::refused(
        &format!("hold.vendor.test:{hold_port}"),
        Rejection::Port,
    ));
    cases.push(Case::refused(
        &format!("api.vendor.test:{trap}"),
        Rejection::Port,
    ));
    cases.push(Case::refused(&format!("x.{ZONE}:443"), Rejection::Port));
    // Whitespace: a request line has exactly two single spaces.
    for line in [
        "CONNECT api.vendor.test: 443 HTTP/1.1",
        "CONNECT api.vendor.test :443 HTTP/1.1",
        "CONNECT api.vendor.test:443  HTTP/1.1",
        "CONNECT api.vendor.test:443 HTTP/1.1 ",
    ] {
        cases.push(Case::head(
            format!("{line:?}"),
            bare(line),
            Want::Refused(Rejection::Target),
        ));
    }
    cases.push(Case::head(
        "Arabic-Indic digits",
        bare("CONNECT api.vendor.test:\u{664}\u{664}\u{663} HTTP/1.1"),
        Want::Refused(Rejection::Malformed),
    ));
    // The same games in the Host header of a good request line.
    for (host, rejection) in [
        ("Host: api.vendor.test:0443", Rejection::Malformed),
        ("Host: api.vendor.test:8443", Rejection::Malformed),
        ("Host: user@api.vendor.test:443", Rejection::Malformed),
        (
            "Host: api.vendor.test:443@evil.test:443",
            Rejection::Malformed,
        ),
        (
            "Host: evil.test:443@api.vendor.test:443",
            Rejection::Malformed,
        ),
    ] {
        cases.push(Case::head(
            host,
            with_headers(&[host]),
            Want::Refused(rejection),
        ));
    }
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    assert!(fx.dns.queries().is_empty());
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 7. Absolute form, other methods, other versions.

#[tokio::test]
async fn c7_other_methods_forms_and_versions_are_refused() {
    let fx = Fixture::start(Script::new(), |_| {}).await;
    let mut cases = vec![];
    for (line, rejection) in [
        ("GET http://api.vendor.test/ HTTP/1.1", Rejection::Method),
        (
            "GET http://api.vendor.test:443/ HTTP/1.1",
            Rejection::Method,
        ),
        ("GET https://api.vendor.test/ HTTP/1.1", Rejection::Method),
        ("GET / HTTP/1.1", Rejection::Method),
        ("GET  http://api.vendor.test/ HTTP/1.1", Rejection::Method),
        (
            "POST https://api.vendor.test/v1/messages HTTP/1.1",
            Rejection::Method,
        ),
        ("PUT https://api.vendor.test/ HTTP/1.1", Rejection::Method),
        (
            "DELETE https://api.vendor.test/ HTTP/1.1",
            Rejection::Method,
        ),
        ("HEAD https://api.vendor.test/ HTTP/1.1", Rejection::Method),
        ("PATCH https://api.vendor.test/ HTTP/1.1", Rejection::Method),
        ("TRACE / HTTP/1.1", Rejection::Method),
        ("OPTIONS * HTTP/1.1", Rejection::Method),
        ("OPTIONS api.vendor.test:443 HTTP/1.1", Rejection::Method),
        ("connect api.vendor.test:443 HTTP/1.1", Rejection::Method),
        ("Connect api.vendor.test:443 HTTP/1.1", Rejection::Method),
        ("CONNECTX api.vendor.test:443 HTTP/1.1", Rejection::Method),
        (" CONNECT api.vendor.test:443 HTTP/1.1", Rejection::Method),
        ("", Rejection::Method),
        (
            "CONNECT http://api.vendor.test:443 HTTP/1.1",
            Rejection::Target,
        ),
        (
            "CONNECT https://api.vendor.test:443/ HTTP/1.1",
            Rejection::Target,
        ),
        ("CONNECT //api.vendor.test:443 HTTP/1.1", Rejection::Target),
        ("CONNECT /path HTTP/1.1", Rejection::Target),
        ("CONNECT * HTTP/1.1", Rejection::Target),
        (
            "CONNECT api.vendor.test:443/path HTTP/1.1",
            Rejection::Target,
        ),
        ("CONNECT api.vendor.test:443? HTTP/1.1", Rejection::Target),
        ("CONNECT api.vendor.test:443#x HTTP/1.1", Rejection::Target),
        ("CONNECT api.vendor.test:443", Rejection::Target),
        ("CONNECT", Rejection::Target),
        ("CONNECT  api.vendor.test:443 HTTP/1.1", Rejection::Target),
        ("CONNECT api.vendor.test:443 HTTP/1.0", Rejection::Version),
        ("CONNECT api.vendor.test:443 HTTP/2", Rejection::Version),
        ("CONNECT api.vendor.test:443 HTTP/2.0", Rejection::Version),
        ("CONNECT api.vendor.test:443 HTTP/1.2", Rejection::Version),
        ("CONNECT api.vendor.test:443 HTTP/0.9", Rejection::Version),
        ("CONNECT api.vendor.test:443 http/1.1", Rejection::Version),
        ("CONNECT api.vendor.test:443 HTTP/1.10", Rejection::Version),
        ("CONNECT api.vendor.test:443 HTTPS/1.1", Rejection::Version),
        (
            "CONNECT\tapi.vendor.test:443\tHTTP/1.1",
            Rejection::Malformed,
        ),
        (
            "CONNECT\tapi.vendor.test:443 HTTP/1.1",
            Rejection::Malformed,
        ),
        (
            "CONNECT api.vendor.test:443\tHTTP/1.1",
            Rejection::Malformed,
        ),
        (
            "CONNECT api.vendor.test:443 HTTP/1.1\t",
            Rejection::Malformed,
        ),
        (
            "CONNECT\u{a0}api.vendor.test:443 HTTP/1.1",
            Rejection::Malformed,
        ),
    ] {
        cases.push(Case::head(
            format!("{line:?}"),
            bare(line),
            Want::Refused(rejection),
        ));
    }
    // With a Host header, as a client would send them.
    cases.push(Case::head(
        "GET with Host",
        b"GET http://api.vendor.test/ HTTP/1.1\r\nHost: api.vendor.test\r\n\r\n".to_vec(),
        Want::Refused(Rejection::Method),
    ));
    // The HTTP/2 preface: a head (`PRI * HTTP/2.0`) with more after it.
    cases.push(Case::head(
        "the HTTP/2 preface",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        Want::Refused(Rejection::Malformed),
    ));
    // A leading empty line (which RFC 9112 lets a server ignore) is no request line here.
    cases.push(Case::head(
        "a leading CRLF",
        format!("\r\nCONNECT {VENDOR}:443 HTTP/1.1\r\n\r\n").into_bytes(),
        Want::Refused(Rejection::Method),
    ));
    // No Host header is refused as one naming another authority is.
    cases.push(Case::head(
        "no Host header",
        bare("CONNECT api.vendor.test:443 HTTP/1.1"),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::head(
        "no Host header, other headers",
        with_headers(&["User-Agent: x", "X-Host: api.vendor.test:443"]),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    assert!(fx.dns.queries().is_empty());
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 8. Head framing and timing.

#[tokio::test]
async fn c8_head_framing_size_timing_and_early_bytes_are_bounded() {
    let head_deadline = Duration::from_secs(1);
    let script = Script::new().answer(&format!("silent.{ZONE}"), Answer::Silent);
    let fx = Fixture::start(script, |c| c.head_deadline = head_deadline).await;
    let trap = fx.trap.port;
    let head = connect("api.vendor.test:443");
    let hold_head = connect("hold.vendor.test:443");
    let silent = format!("silent.{ZONE}:{trap}");

    // A head of exactly MAX_HEAD bytes, and one byte more.
    let sized = |len: usize| {
        let start = format!("CONNECT {VENDOR}:443 HTTP/1.1\r\nHost: {VENDOR}:443\r\nX-Pad: ");
        let pad = "a".repeat(len - start.len() - 4);
        format!("{start}{pad}\r\n\r\n").into_bytes()
    };
    // `n` header lines, the Host header one of them.
    let headers = |n: usize| {
        let lines: Vec<String> = std::iter::once(format!("Host: {VENDOR}:443"))
            .chain((1..n).map(|i| format!("X-{i}: {i}")))
            .collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        with_headers(&lines)
    };
    let line = format!("CONNECT {VENDOR}:443 HTTP/1.1");
    let host = format!("Host: {VENDOR}:443");
    #[rustfmt::skip]
    let framing = [
        ("bare LF", format!("{line}\n\n")),
        ("bare LF in a header", format!("{line}\r\n{host}\n\r\n")),
        ("LF then CRLF", format!("{line}\n\r\n")),
        ("bare CR", format!("{line}\r{host}\r\n\r\n")),
        ("CR CR LF", format!("{line}\r\r\n\r\n")),
        ("CR in a header value", format!("{line}\r\nX: a\rb\r\n\r\n")),
        ("duplicate Host", format!("{line}\r\n{host}\r\n{host}\r\n\r\n")),
        ("duplicate Host, other case", format!("{line}\r\n{host}\r\nhOST: {VENDOR}:443\r\n\r\n")),
    ];
    let mut cases = vec![];
    for (what, bytes) in framing {
        cases.push(Case::head(
            what,
            bytes.into_bytes(),
            Want::Refused(Rejection::Malformed),
        ));
    }
    for (host, rejection) in [
        ("Host: evil.test:443", Rejection::Malformed),
        ("Host: hold.vendor.test:443", Rejection::Malformed),
        ("Host: api.vendor.test:8443", Rejection::Malformed),
        ("Host: api.vendor.test.evil.test:443", Rejection::Malformed),
        // An empty Host names nothing (the name alone, for port 443, is the target: see
        // `head::tests`).
        ("Host: ", Rejection::Malformed),
        ("Host : api.vendor.test:443", Rejection::Malformed),
        ("Host\t: api.vendor.test:443", Rejection::Malformed),
        (" Host: api.vendor.test:443", Rejection::Malformed),
        ("X-Folded: a\r\n b", Rejection::Malformed),
        ("no colon", Rejection::Malformed),
        (": empty name", Rejection::Malformed),
        ("X: a\0b", Rejection::Malformed),
        ("X: a\x7fb", Rejection::Malformed),
        ("X: caf\u{e9}", Rejection::Malformed),
        ("X(: y", Rejection::Malformed),
    ] {
        cases.push(Case::head(
            format!("{host:?}"),
            with_headers(&[host]),
            Want::Refused(rejection),
        ));
    }
    // Sizes: 32 headers and MAX_HEAD bytes pass, one more of either does not.
    cases.push(Case::head(
        format!("{MAX_HEADERS} headers"),
        headers(MAX_HEADERS),
        Want::Tunnel,
    ));
    cases.push(Case::head(
        format!("{} headers", MAX_HEADERS + 1),
        headers(MAX_HEADERS + 1),
        Want::Refused(Rejection::HeadTooLarge),
    ));
    cases.push(Case::head(
        format!("a {MAX_HEAD}-byte head"),
        sized(MAX_HEAD),
        Want::Tunnel,
    ));
    for len in [MAX_HEAD + 1, MAX_HEAD + 2, 9000, 64 * 1024] {
        cases.push(Case::head(
            format!("a {len}-byte head"),
            sized(len),
            Want::Refused(Rejection::HeadTooLarge),
        ));
    }
    cases.push(Case::head(
        "a head of one endless line",
        vec![b'C'; 20_000],
        Want::Refused(Rejection::HeadTooLarge),
    ));
    // Time: a head trickled past the deadline is closed unanswered, one within it is served.
    cases.push(
        Case::new(
            "a head trickled past its deadline",
            vec![Step::Trickle(head.clone(), Duration::from_millis(100))],
            Want::Unanswered(Outcome::HeadTimedOut),
        )
        .taking(head_deadline, head_deadline + Duration::from_secs(3)),
    );
    cases.push(
        Case::new(
            "half a head, then silence",
            vec![Step::Write(head[..20].to_vec())],
            Want::Unanswered(Outcome::HeadTimedOut),
        )
        .taking(head_deadline, head_deadline + Duration::from_secs(3)),
    );
    // In pieces a tenth of the deadline apart, well within it: a byte every 5 ms (70 wakes of
    // the writer) took longer than the whole 1 s deadline once under CI's load.
    let pieces: Vec<Step> = head
        .chunks(10)
        .flat_map(|piece| [Step::Write(piece.to_vec()), Step::Pause(head_deadline / 20)])
        .collect();
    cases.push(Case::new(
        "a head in pieces within its deadline",
        pieces,
        Want::Tunnel,
    ));
    // A FIN while the proxy decides.
    cases.push(Case::new(
        "a FIN and nothing else",
        vec![Step::Fin],
        Want::Unanswered(Outcome::ClosedBeforeHead),
    ));
    cases.push(Case::new(
        "a FIN inside the request line",
        vec![Step::Write(head[..12].to_vec()), Step::Fin],
        Want::Unanswered(Outcome::ClosedBeforeHead),
    ));
    cases.push(Case::new(
        "a FIN before the empty line",
        vec![Step::Write(head[..head.len() - 2].to_vec()), Step::Fin],
        Want::Unanswered(Outcome::ClosedBeforeHead),
    ));
    // The client is watched while the proxy decides: a FIN during the lookup gives the slot back
    // at once, not after the resolver's bound (two tries of its timeout). (A FIN right after the
    // head races the decision: whether a connect or a query starts first is no protection's
    // business; that nothing is answered or forwarded is `proxy::tests`'.)
    cases.push(
        Case::new(
            "a FIN during the lookup, the DNS silent",
            vec![
                Step::Write(connect(&silent)),
                Step::Pause(RESOLVE_TIMEOUT / 2),
                Step::Fin,
            ],
            Want::Unanswered(Outcome::ClosedBeforeHead),
        )
        .looks_up_retried(&format!("silent.{ZONE}"), 1)
        .taking(RESOLVE_TIMEOUT / 2, RESOLVE_TIMEOUT),
    );
    cases.push(Case::new(
        "a FIN right after a refused head",
        vec![Step::Write(connect("evil.test:443")), Step::Fin],
        Want::Refused(Rejection::NotAllowed),
    ));
    // Bytes before the 200: nothing is dialed, nothing forwarded.
    for (what, after) in [
        ("a ClientHello in the head's write", real_hello(VENDOR)),
        ("one byte in the head's write", b"\x16".to_vec()),
        (
            "a second CONNECT in the head's write",
            connect("api.vendor.test:443"),
        ),
        (
            "a request in the head's write",
            b"GET / HTTP/1.1\r\nHost: api.vendor.test\r\n\r\n".to_vec(),
        ),
    ] {
        cases.push(Case::head(
            what,
            [head.clone(), after.clone()].concat(),
            Want::Refused(Rejection::Malformed),
        ));
        cases.push(Case::head(
            format!("{what} (hold)"),
            [hold_head.clone(), after].concat(),
            Want::Refused(Rejection::Malformed),
        ));
    }
    cases.push(Case::head(
        "a body announced and sent",
        format!("CONNECT {VENDOR}:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").into_bytes(),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::head(
        "a chunked body",
        format!("CONNECT {VENDOR}:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
            .into_bytes(),
        Want::Refused(Rejection::Malformed),
    ));
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    // Only the silent name was looked up (its case checked how often).
    let asked: Vec<String> = fx.dns.queries().into_iter().map(|q| q.name).collect();
    assert!(
        asked.iter().all(|n| *n == format!("silent.{ZONE}")),
        "{asked:?}"
    );
    fx.finish().await;
}

// ------------------------------------------------------------------------------------------------
// 9. Tunnels: the first flight, and the bounds.

#[tokio::test]
async fn c9_a_tunnel_carries_only_a_client_hello_for_its_host() {
    let hello_deadline = Duration::from_millis(500);
    let half_close = Duration::from_millis(500);
    let idle = Duration::from_secs(1);
    let fx = Fixture::start(Script::new(), |c| {
        c.hello_deadline = hello_deadline;
        c.half_close = half_close;
        c.idle = idle;
    })
    .await;
    let head = connect("hold.vendor.test:443");
    let after_200 = |first: Vec<u8>| {
        vec![
            Step::Write(head.clone()),
            Step::Established,
            Step::Write(first),
        ]
    };
    let hello = real_hello(HOLD);
    let other = "the ClientHello names another server";
    let one_name = "not exactly one host name";
    let not_handshake = "not a handshake record";
    let (nul, two, twice) = (
        hello::server_name(&[(0, b"hold.vendor.test\0.evil.test")]),
        hello::server_name(&[(0, HOLD.as_bytes()), (0, b"evil.test")]),
        hello::server_name(&[(0, HOLD.as_bytes()), (0, HOLD.as_bytes())]),
    );
    // What the client sends right after the 200, and why the proxy closes without forwarding it.
    #[rustfmt::skip]
    let rows: Vec<(&str, Vec<u8>, &str)> = vec![
        ("another SNI", real_hello("cdn.example.net"), other),
        ("another listed name's SNI", real_hello(VENDOR), other),
        ("a look-alike SNI", real_hello("hold.vendor.test.evil.test"), other),
        ("an SNI with a NUL", hello::with_extensions(&[(0, nul)]), other),
        ("an IP address as SNI", hello::with_extensions(&[(0, hello::server_name(&[(0, b"127.0.0.1")]))]), other),
        ("no SNI (a client dialing an IP address)", real_hello("127.0.0.1"), "no server name"),
        ("no extensions", hello::with_extensions(&[]), "no server name"),
        ("two names", hello::with_extensions(&[(0, two.clone())]), one_name),
        ("the name twice", hello::with_extensions(&[(0, twice)]), one_name),
        ("an empty name list", hello::with_extensions(&[(0, vec![0, 0])]), one_name),
        ("two server_name extensions", hello::with_extensions(&[(0, hello::server_name(&[(0, HOLD.as_bytes())])), (0, two)]), "two server_name extensions"),
        ("plain HTTP", b"GET / HTTP/1.1\r\nHost: hold.vendor.test\r\n\r\n".to_vec(), not_handshake),
        ("an SSH banner", b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(), not_handshake),
        ("an alert record", hello::record(21, &[2, 40]), not_handshake),
        ("an application-data record", hello::record(23, b"hello"), not_handshake),
        ("a ChangeCipherSpec record", hello::record(20, &[1]), not_handshake),
        ("an SSLv2-style hello", vec![0x80, 0x2e, 0x01, 0x03, 0x01], not_handshake),
        ("a bad record version", b"\x16\x02\x00\x00\x05hello".to_vec(), "not a TLS record version"),
        ("an empty record", b"\x16\x03\x01\x00\x00".to_vec(), "a record length out of bounds"),
        ("an oversized record", b"\x16\x03\x01\xff\xff".to_vec(), "a record length out of bounds"),
        ("a ServerHello", hello::record(22, &[2, 0, 0, 0]), "not a ClientHello"),
        ("a ClientHello split over two records", split_hello(HOLD), "a length past the end of the record"),
        ("a ClientHello and a byte more in its record", hello_with_trailing_byte(HOLD), "more than a ClientHello in the first record"),
    ];
    let mut cases = vec![];
    for (what, first, why) in rows {
        // Dialed before the 200, closed unwritten.
        cases.push(Case::new(what, after_200(first), Want::Hello(why)).holds(b""));
    }
    cases.push(
        Case::new(
            "nothing after the 200",
            vec![Step::Write(head.clone()), Step::Established],
            Want::Hello("no ClientHello in time"),
        )
        .holds(b"")
        .taking(hello_deadline, hello_deadline + Duration::from_secs(3)),
    );
    cases.push(
        Case::new(
            "half a ClientHello, then silence",
            after_200(hello[..hello.len() / 2].to_vec()),
            Want::Hello("no ClientHello in time"),
        )
        .holds(b"")
        .taking(hello_deadline, hello_deadline + Duration::from_secs(3)),
    );
    cases.push(
        Case::new(
            "a FIN after the 200",
            vec![Step::Write(head.clone()), Step::Established, Step::Fin],
            Want::Hello("closed before a ClientHello"),
        )
        .holds(b""),
    );
    cases.push(
        Case::new(
            "half a ClientHello, then a FIN",
            [
                after_200(hello[..hello.len() / 2].to_vec()),
                vec![Step::Fin],
            ]
            .concat(),
            Want::Hello("closed before a ClientHello"),
        )
        .holds(b""),
    );
    // A ClientHello for the host is forwarded byte for byte. Half-closed, the tunnel ends at the
    // half-close deadline (the hold listener never finishes); left alone, at the idle deadline.
    cases.push(
        Case::new(
            "a ClientHello for the host, then a FIN",
            [after_200(hello.clone()), vec![Step::Fin]].concat(),
            Want::Relayed(End::HalfClose),
        )
        .holds(&hello)
        .taking(half_close, half_close + Duration::from_secs(3)),
    );
    let folded = hello::with_extensions(&[(0, hello::server_name(&[(0, b"HOLD.Vendor.TEST.")]))]);
    cases.push(
        Case::new(
            "a ClientHello naming the host folded, then a FIN",
            [after_200(folded.clone()), vec![Step::Fin]].concat(),
            Want::Relayed(End::HalfClose),
        )
        .holds(&folded)
        .taking(half_close, half_close + Duration::from_secs(3)),
    );
    cases.push(
        Case::new(
            "a ClientHello for the host, then nothing",
            after_200(hello.clone()),
            Want::Relayed(End::Idle),
        )
        .holds(&hello)
        .taking(idle, idle + Duration::from_secs(3)),
    );
    cases.push(Case::tunnel("api.vendor.test:443"));
    fx.check_all(&cases).await;
    assert!(fx.dns.queries().is_empty());
    fx.finish().await;
}

#[tokio::test]
async fn c9_tunnels_are_bounded_in_number_and_idle_time() {
    let idle = Duration::from_secs(2);
    let fx = Fixture::start(Script::new(), |c| c.idle = idle).await;
    let head = connect("api.vendor.test:443");
    let name = || ServerName::try_from(VENDOR).unwrap();

    // max_tunnels real TLS sessions over the socket, held open.
    let reported = fx.reports.len();
    let mut sessions = Vec::new();
    for i in 0..MAX_TUNNELS {
        let mut client = UnixStream::connect(&fx.socket).await.unwrap();
        client.write_all(&head).await.unwrap();
        assert_eq!(
            shown(&read_established(&mut client, "held").await),
            shown(ESTABLISHED),
            "tunnel {i}"
        );
        let tls = timeout(BOUND, fx.tls.connect(name(), client))
            .await
            .unwrap()
            .unwrap();
        sessions.push(tls);
    }
    // Three more at once: each is answered 503 alone and closed, without being read.
    let mut extra = JoinSet::new();
    for _ in 0..3 {
        let socket = fx.socket.clone();
        let head = head.clone();
        extra.spawn(async move {
            let mut client = UnixStream::connect(&socket).await.unwrap();
            let _ = client.write_all(&head).await;
            read_to_close(&mut client, "over max_tunnels").await
        });
    }
    while let Some(answer) = extra.join_next().await {
        assert_eq!(shown(&answer.unwrap()), shown(&status_answer(503)));
    }
    let busy = fx.reports.ended.lock().unwrap()[reported..].to_vec();
    assert!(
        busy.len() == 3
            && busy
                .iter()
                .all(|r| r.outcome == Outcome::Busy && r.dialed.is_none()),
        "{busy:?}"
    );
    // Every held session still works, then ends.
    for (i, mut tls) in sessions.into_iter().enumerate() {
        tls.write_all(
            format!("GET / HTTP/1.1\r\nHost: {VENDOR}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut response = Vec::new();
        timeout(BOUND, tls.read_to_end(&mut response))
            .await
            .unwrap()
            .unwrap();
        assert!(
            shown(&response).ends_with("\r\n\r\nfake-vendor ok\n"),
            "tunnel {i}"
        );
        fx.answered.fetch_add(1, Ordering::SeqCst);
        let _ = tls.shutdown().await;
        let (mut client, _) = tls.into_inner();
        read_to_close(&mut client, "a held tunnel").await;
    }
    let started = Instant::now();
    while fx.reports.len() < reported + 3 + MAX_TUNNELS {
        assert!(started.elapsed() < BOUND, "a held tunnel never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for report in &fx.reports.ended.lock().unwrap()[reported + 3..] {
        assert!(
            matches!(
                report.outcome,
                Outcome::Relayed {
                    end: End::Closed,
                    ..
                }
            ) && report.dialed == Some(fx.vendor.addr()),
            "{report:?}"
        );
    }

    // A real TLS session left idle ends at the idle deadline (by handle: its outcome).
    let (mut client, server) = UnixStream::pair().unwrap();
    let config = fx.config.clone();
    let resolver = fx.resolver.clone();
    let task = tokio::spawn(async move { handle_reported(server, &config, &*resolver).await });
    client.write_all(&head).await.unwrap();
    assert_eq!(read_established(&mut client, "idle").await, ESTABLISHED);
    let mut tls = timeout(BOUND, fx.tls.connect(name(), &mut client))
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = timeout(BOUND, tls.read_to_end(&mut rest)).await.unwrap();
    drop(tls);
    read_to_close(&mut client, "an idle tunnel").await;
    let took = started.elapsed();
    let report = timeout(BOUND, task).await.unwrap().unwrap();
    assert!(
        matches!(report.outcome, Outcome::Relayed { end: End::Idle, .. }),
        "{report:?}"
    );
    assert!(
        took >= idle - Duration::from_millis(100) && took < idle + Duration::from_secs(3),
        "{took:?}"
    );
    fx.finish().await;
}
