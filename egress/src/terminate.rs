//! The TLS terminator for the vendor's API host (issue 22): once the proxy has answered
//! `CONNECT api.vendor:443` and read a ClientHello naming that host, [`serve`] takes the agent's
//! stream, finishes the handshake with this invocation's leaf certificate, and serves HTTP/1.1
//! (hyper) on it. Each request is held to the rules of [`crate::vendor`] and to the invocation's
//! budgets; an admitted one is forwarded with the sentinel swapped for the real [`Key`] in exactly
//! the header [`Admitted::swap`] names, over one rustls connection to the vendor opened on the
//! TCP stream the proxy dialed (lazily: a refused request never reaches the vendor). The response
//! streams back frame by frame, counted against the response budget (cut when it runs out), its
//! token usage read as it passes ([`crate::usage`]). Each request ends as one [`Call`] record.
//!
//! In order, per request: the head as the agent sent it (CRLF only, at most one
//! `Content-Length`: the raw bytes are read beside hyper, which accepts bare LF and folds
//! repeated equal lengths into one), HTTP/1.1, an origin-form target, [`vendor::admit`], no
//! `Transfer-Encoding`, `Upgrade`, `HTTP2-Settings` or `Expect`, the request budget, the body
//! (bounded, within its deadline). A refusal is answered with its status, a JSON error and
//! `x-cordon-refusal: <id>`; after `vendor-malformed` (and whenever a body was left unread) the
//! connection is closed.
//!
//! Neither the key nor the sentinel is ever logged or recorded: the log carries ids and statuses,
//! never a header value or a body byte; a method, path or model that holds the sentinel is
//! recorded as withheld.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_rustls::{TlsAcceptor, TlsConnector};

mod answer;
mod watch;

use answer::{failed, holds, refused, relay, Answer, Recording};
use watch::{Due, HeadSeen, Prefixed, Watch, Watched};

use crate::usage::{BodyUsage, StreamUsage, Usage};
use crate::vendor::{
    self, Admitted, Budget, CredentialHeader, Head, Skipped, Spent, Terminated, VendorRejection,
    VENDOR_ROUTES,
};

/// The one application protocol either side speaks.
const HTTP_11: &[u8] = b"http/1.1";
/// The longest key (an API key is ~100 bytes, an OAuth token a few hundred).
pub const MAX_KEY: usize = 4096;
/// hyper's read buffer for the agent's connection: a head must fit (the rules allow 32 KiB of
/// headers), bodies stream through it.
const READ_BUFFER: usize = 64 * 1024;
/// A quiet connection closed for idleness has this long to say goodbye (TLS close_notify).
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How much of a method or path a record shows.
const SHOWN_METHOD: usize = 16;
const SHOWN_PATH: usize = 256;
/// The longest model name recorded.
const MAX_MODEL: usize = 128;
/// Headers of this connection alone, never passed on either way (hop-by-hop; and those a
/// `connection` field names, [`connection_options`]).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
/// Request headers the forwarded request sets itself: `accept-encoding` (`identity`: the usage
/// reader reads plain bytes) and `content-length` (the body's length).
const SET_ON_FORWARD: [&str; 2] = ["accept-encoding", "content-length"];
/// Request headers refused outright (`vendor-malformed`): another body framing than
/// `Content-Length` (smuggling), a protocol switch (h2c, websockets), an interim response.
const REFUSED_HEADERS: [&str; 4] = ["transfer-encoding", "upgrade", "http2-settings", "expect"];

/// Why a terminator could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminateError {
    /// The key is empty, over [`MAX_KEY`] bytes, or not visible ASCII (its value never shown).
    Key,
    /// A certificate PEM did not parse, or held no certificate.
    Certificates(String),
    /// The private key PEM held no key that parses (no detail: it is the key's text).
    PrivateKey,
    /// rustls refused the configuration (a key not matching its certificate, a bad root).
    Tls(String),
}

impl fmt::Display for TerminateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TerminateError::Key => write!(
                f,
                "the vendor key must be 1 to {MAX_KEY} bytes of visible ASCII (not shown)"
            ),
            TerminateError::Certificates(why) => write!(f, "the certificate PEM: {why}"),
            TerminateError::PrivateKey => f.write_str("the private key PEM holds no readable key"),
            TerminateError::Tls(why) => write!(f, "the TLS configuration: {why}"),
        }
    }
}

impl std::error::Error for TerminateError {}

/// The vendor credential. Never printed: no `Display`, no `Serialize`, a `Debug` that withholds
/// it; only the forwarded request's (sensitive) header value holds its bytes.
pub struct Key(String);

impl Key {
    /// 1 to [`MAX_KEY`] bytes of visible ASCII (`0x21..=0x7e`), else refused.
    pub fn new(secret: String) -> Result<Key, TerminateError> {
        let visible = secret.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if secret.is_empty() || secret.len() > MAX_KEY || !visible {
            return Err(TerminateError::Key);
        }
        Ok(Key(secret))
    }

    /// The credential header's value, marked sensitive (hyper never logs it).
    fn header_value(&self, header: CredentialHeader) -> Option<HeaderValue> {
        let text = match header {
            CredentialHeader::ApiKey => self.0.clone(),
            CredentialHeader::Bearer => format!("Bearer {}", self.0),
        };
        let mut value = HeaderValue::try_from(text).ok()?;
        value.set_sensitive(true);
        Some(value)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(withheld)")
    }
}

/// The terminator's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The agent's TLS handshake (and the vendor's).
    pub handshake: Duration,
    /// A request's head and body, from its first byte.
    pub request: Duration,
    /// The vendor's response head, from the request sent.
    pub response_head: Duration,
    /// The largest request body.
    pub max_request_body: u64,
    /// No byte either way for this long, no request being read or waited on: closed.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            handshake: Duration::from_secs(10),
            request: Duration::from_secs(60),
            response_head: Duration::from_secs(300),
            max_request_body: 32 * 1024 * 1024,
            idle: Duration::from_secs(60),
        }
    }
}

/// Everything one invocation's terminator holds; shared by every connection (`Arc`).
pub struct Terminator {
    /// The vendor host, canonical lowercase (`api.anthropic.com`).
    pub host: String,
    pub header: CredentialHeader,
    /// What the agent holds in place of the key.
    pub sentinel: String,
    pub key: Key,
    pub budget: Budget,
    /// The invocation's spending, across connections.
    pub spent: Mutex<Spent>,
    /// The agent-facing side: this invocation's leaf.
    pub server: Arc<rustls::ServerConfig>,
    /// The vendor-facing side: the roots the vendor is verified against.
    pub client: Arc<rustls::ClientConfig>,
    pub limits: Limits,
    /// The vendor rules a gate case left out (none for every real invocation).
    pub skip: Skipped,
}

impl Terminator {
    /// A terminator with nothing spent and the default [`Limits`] (the host lowercased).
    pub fn new(
        host: &str,
        header: CredentialHeader,
        sentinel: String,
        key: Key,
        budget: Budget,
        server: Arc<rustls::ServerConfig>,
        client: Arc<rustls::ClientConfig>,
    ) -> Terminator {
        Terminator {
            host: host.to_ascii_lowercase(),
            header,
            sentinel,
            key,
            budget,
            spent: Mutex::new(Spent::default()),
            server,
            client,
            limits: Limits::default(),
            skip: Skipped::default(),
        }
    }

    fn terminated(&self) -> Terminated<'_> {
        Terminated {
            host: &self.host,
            header: self.header,
            sentinel: &self.sentinel,
            routes: &VENDOR_ROUTES,
            skip: self.skip,
        }
    }

    fn spending(&self) -> MutexGuard<'_, Spent> {
        lock(&self.spent)
    }
}

impl fmt::Debug for Terminator {
    /// The sentinel and key withheld; the TLS configurations by name only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Terminator")
            .field("host", &self.host)
            .field("header", &self.header)
            .field("sentinel", &"(withheld)")
            .field("key", &self.key)
            .field("budget", &self.budget)
            .field("spent", &*self.spending())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The agent-facing TLS: ring, TLS 1.2 and 1.3, ALPN exactly `http/1.1` (a client offering only
/// `h2` fails the handshake: rustls answers `no_application_protocol`).
pub fn server_config(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
) -> Result<Arc<rustls::ServerConfig>, TerminateError> {
    let chain = certificates(cert_chain_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TerminateError::PrivateKey)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(tls_error)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(tls_error)?;
    config.alpn_protocols = vec![HTTP_11.to_vec()];
    Ok(Arc::new(config))
}

/// The vendor-facing TLS: Mozilla's roots (webpki-roots) and every certificate in
/// `extra_ca_pem` (a test vendor's CA); ALPN `http/1.1`.
pub fn client_config(
    extra_ca_pem: Option<&[u8]>,
) -> Result<Arc<rustls::ClientConfig>, TerminateError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(pem) = extra_ca_pem {
        for cert in certificates(pem)? {
            roots.add(cert).map_err(tls_error)?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(tls_error)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![HTTP_11.to_vec()];
    Ok(Arc::new(config))
}

/// ring, explicitly: whatever else the build enables, never aws-lc.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TerminateError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TerminateError::Certificates(e.to_string()))?;
    if certs.is_empty() {
        return Err(TerminateError::Certificates(
            "no certificate in the PEM".to_owned(),
        ));
    }
    Ok(certs)
}

fn tls_error(error: rustls::Error) -> TerminateError {
    TerminateError::Tls(error.to_string())
}

/// One vendor call as the record and the proxy's log show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Call {
    /// The method (at most 16 characters; `(withheld)` if it held the sentinel).
    pub method: String,
    /// The path only, never the query (at most 256 characters; `(withheld)` if it held the
    /// sentinel).
    pub path: String,
    /// The status answered; 0 when the agent left before any answer.
    pub status: u16,
    /// Body bytes forwarded to the vendor; 0 when refused.
    pub request_bytes: u64,
    /// Body bytes passed to the agent.
    pub response_bytes: u64,
    /// From the request's first byte to its response's end.
    pub duration_ms: u64,
    /// The request body's JSON `model`: at most 128 characters of `[A-Za-z0-9._:@-]`, else
    /// `None`.
    pub model: Option<String>,
    pub usage: Option<Usage>,
    /// [`VendorRejection::id`] when cordon refused the request.
    pub refusal: Option<&'static str>,
    /// [`vendor::Spend::as_str`] when a budget refused the request or cut its response.
    pub budget: Option<&'static str>,
}

/// What one agent connection came to (for the proxy's per-connection log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Requests recorded.
    pub calls: u64,
    /// Why it ended, when not cleanly: `handshake`, `handshake-timeout` (the agent's TLS),
    /// `upstream-tls` (the vendor's TLS), `upstream` (the vendor's connection failed),
    /// `upstream-timeout` (no response head in time), `response-cut` (a response ended early: a
    /// budget, or the vendor's body failing), `request-timeout` (a head not read in time),
    /// `idle` (a response stalled), `http` (a head hyper refused), `agent-io` (the agent's
    /// connection failed).
    pub error: Option<&'static str>,
}

/// Serve one agent connection. `prefix` is what the proxy already read from `client` (the
/// ClientHello), replayed first; `upstream` is a TCP stream connected to the vendor, on which TLS
/// (SNI = [`Terminator::host`]) is opened at the first admitted request. `record` is called
/// exactly once per request, when its response ends, fails or is dropped.
pub async fn serve<C, U>(
    client: C,
    prefix: Vec<u8>,
    upstream: U,
    terminator: Arc<Terminator>,
    record: Arc<dyn Fn(Call) + Send + Sync>,
) -> Served
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = TlsAcceptor::from(terminator.server.clone());
    let accepted = timeout(
        terminator.limits.handshake,
        acceptor.accept(Prefixed::new(prefix, client)),
    )
    .await;
    let tls = match accepted {
        Ok(Ok(tls)) => tls,
        Ok(Err(_)) => return Served::failed("handshake"),
        Err(_) => return Served::failed("handshake-timeout"),
    };
    let ledger = Arc::new(Ledger {
        record,
        calls: AtomicU64::new(0),
        watch: Watch::new(),
        error: Mutex::new(None),
    });
    let shared = Arc::new(Shared {
        terminator,
        ledger: ledger.clone(),
        upstream: tokio::sync::Mutex::new(Upstream::Dialed(upstream)),
    });
    let io = Watched {
        inner: tls,
        ledger: ledger.clone(),
    };
    let ended = run(TokioIo::new(io), shared).await;
    let error = *lock(&ledger.error);
    Served {
        calls: ledger.calls.load(Ordering::SeqCst),
        error: error.or(ended),
    }
}

impl Served {
    fn failed(error: &'static str) -> Served {
        tracing::info!(error, "vendor connection failed");
        Served {
            calls: 0,
            error: Some(error),
        }
    }
}

/// Drive hyper on the agent's connection until it ends, a head outlives its deadline, or the
/// connection is idle; why it ended, when not cleanly.
async fn run<I, U>(io: I, shared: Arc<Shared<U>>) -> Option<&'static str>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.terminator.limits;
    let ledger = shared.ledger.clone();
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(request, shared).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .half_close(false)
        .max_buf_size(READ_BUFFER)
        // The vendor's headers pass as they are: no `date` added.
        .auto_date_header(false)
        // Heads and idleness are timed here, from the raw bytes (`Watch`).
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(connection);
    loop {
        let wake = ledger.watch.next_check(&limits);
        tokio::select! {
            ended = connection.as_mut() => return ended.err().and_then(|e| hyper_error(&e)),
            () = ledger.watch.changed.notified() => {}
            () = tokio::time::sleep_until(wake) => match ledger.watch.due(&limits) {
                Due::Nothing => {}
                Due::Head => return Some("request-timeout"),
                Due::Idle { in_flight: true } => return Some("idle"),
                Due::Idle { in_flight: false } => {
                    // Nothing in flight: hyper closes at once, with the TLS close_notify.
                    connection.as_mut().graceful_shutdown();
                    return match timeout(CLOSE_GRACE, connection).await {
                        Ok(Ok(())) | Err(_) => None,
                        Ok(Err(e)) => hyper_error(&e),
                    };
                }
            },
        }
    }
}

/// hyper's error on the agent's connection, as [`Served::error`] names it. Its close failing
/// because the agent was gone first is no error: the exchange had ended.
fn hyper_error(error: &hyper::Error) -> Option<&'static str> {
    if error.is_shutdown() {
        None
    } else if error.is_parse() || error.is_parse_too_large() || error.is_parse_status() {
        Some("http")
    } else {
        Some("agent-io")
    }
}

/// One connection's state, shared by its requests.
struct Shared<U> {
    terminator: Arc<Terminator>,
    ledger: Arc<Ledger>,
    upstream: tokio::sync::Mutex<Upstream<U>>,
}

/// What the connection's records, reader and timers share.
struct Ledger {
    record: Arc<dyn Fn(Call) + Send + Sync>,
    calls: AtomicU64,
    watch: Watch,
    /// The first thing that went wrong beyond one request's refusal.
    error: Mutex<Option<&'static str>>,
}

impl Ledger {
    fn fail(&self, error: &'static str) {
        lock(&self.error).get_or_insert(error);
    }
}

/// The vendor connection: the dialed stream until the first admitted request, then TLS and
/// hyper's client on it; after a failure, none (the agent reconnects through the proxy).
enum Upstream<U> {
    Dialed(U),
    Open {
        sender: SendRequest<Full<Bytes>>,
        _task: AbortOnDrop,
    },
    Gone,
}

/// hyper's client connection task, ended with the agent's connection.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a request got no vendor response.
enum Fault {
    Refused(Refusal),
    /// The vendor failed (502) or did not answer in time (504).
    Upstream(u16),
}

/// A refusal: its rule, the status answered (its own, or 408/413 for a body), whether the
/// connection closes after it.
struct Refusal {
    rejection: VendorRejection,
    status: u16,
    close: bool,
}

impl Refusal {
    fn new(rejection: VendorRejection) -> Refusal {
        Refusal {
            rejection,
            status: rejection.status(),
            close: rejection == VendorRejection::Malformed,
        }
    }

    fn malformed(status: u16) -> Refusal {
        Refusal {
            status,
            ..Refusal::new(VendorRejection::Malformed)
        }
    }
}

impl From<VendorRejection> for Fault {
    fn from(rejection: VendorRejection) -> Fault {
        Fault::Refused(Refusal::new(rejection))
    }
}

/// One request, start to answer.
async fn handle<U>(request: Request<Incoming>, shared: Arc<Shared<U>>) -> Response<Answer>
where
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let seen = shared.ledger.watch.arrived();
    let (parts, body) = request.into_parts();
    let mut recording = Recording::start(&shared.ledger, &shared.terminator, &parts, seen.started);
    let unread = !body.is_end_stream();
    match exchange(&shared, &parts, body, &seen, &mut recording).await {
        Ok(response) => relay(response, recording, &shared),
        Err(Fault::Refused(mut refusal)) => {
            // A body left unread may hold anything: the connection does not go on past it.
            refusal.close |= unread && refusal.rejection != VendorRejection::Malformed;
            refused(&refusal, recording)
        }
        Err(Fault::Upstream(status)) => failed(status, recording),
    }
}

/// The rules, the budget, the body, then the vendor's response head.
async fn exchange<U>(
    shared: &Shared<U>,
    parts: &Parts,
    body: Incoming,
    seen: &HeadSeen,
    recording: &mut Recording,
) -> Result<Response<Incoming>, Fault>
where
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let terminator = &shared.terminator;
    let admitted = check(parts, &terminator.terminated(), seen.malformed)?;
    // No transfer-encoding (refused above): hyper frames the body by its one Content-Length.
    let declared = body.size_hint().exact().ok_or(VendorRejection::Malformed)?;
    if declared > terminator.limits.max_request_body {
        return Err(Fault::Refused(Refusal::malformed(413)));
    }
    let spent = match terminator.skip.budget {
        true => Ok(()),
        false => terminator.spending().request(&terminator.budget, declared),
    };
    if let Err(rejection) = spent {
        if let VendorRejection::Budget(spend) = rejection {
            recording.call.budget = Some(spend.as_str());
        }
        return Err(rejection.into());
    }
    let busy = shared.ledger.watch.busy();
    let deadline = seen.started + terminator.limits.request;
    let body = read_body(body, terminator.limits.max_request_body, deadline).await?;
    recording.call.request_bytes = body.len() as u64;
    recording.call.model = model(&body, &terminator.sentinel);
    let outgoing = outgoing(parts, admitted, terminator, body).ok_or(Fault::Upstream(502))?;
    let response = shared.send(outgoing).await;
    drop(busy);
    response
}

/// The rules on a request's head, in order: as sent (CRLF, one length), HTTP/1.1, origin form,
/// [`vendor::admit`], no other framing or protocol switch.
fn check(
    parts: &Parts,
    to: &Terminated<'_>,
    head_malformed: bool,
) -> Result<Admitted, VendorRejection> {
    if head_malformed || parts.version != Version::HTTP_11 {
        return Err(VendorRejection::Malformed);
    }
    if !origin_form(&parts.uri) {
        return Err(VendorRejection::Path);
    }
    let target = parts.uri.path_and_query().map_or("", |pq| pq.as_str());
    let headers: Vec<(&str, &[u8])> = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    let head = Head {
        method: parts.method.as_str(),
        target,
        headers: &headers,
    };
    let admitted = vendor::admit(to, &head)?;
    if headers
        .iter()
        .any(|(name, _)| REFUSED_HEADERS.contains(name))
    {
        return Err(VendorRejection::Malformed);
    }
    Ok(admitted)
}

/// `/path?query`: not absolute (`https://host/...`), authority (`host:443`) or `*` form.
fn origin_form(uri: &Uri) -> bool {
    uri.scheme().is_none() && uri.authority().is_none() && uri.path().starts_with('/')
}

/// The whole body, by `deadline`, at most `limit` bytes.
async fn read_body(mut body: Incoming, limit: u64, deadline: Instant) -> Result<Bytes, Fault> {
    let mut read = BytesMut::new();
    loop {
        let frame = match timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(Fault::Refused(Refusal::malformed(408))),
            Ok(None) => return Ok(read.freeze()),
            Ok(Some(Err(_))) => return Err(Fault::Refused(Refusal::malformed(400))),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if (read.len() + data.len()) as u64 > limit {
                return Err(Fault::Refused(Refusal::malformed(413)));
            }
            read.extend_from_slice(&data);
        }
    }
}

/// The request body's JSON `model`, when it is a plain model name (and not the sentinel).
fn model(body: &[u8], sentinel: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        model: Option<String>,
    }
    let model = serde_json::from_slice::<Named>(body).ok()?.model?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "._:@-".contains(c);
    let fits = !model.is_empty() && model.len() <= MAX_MODEL && model.chars().all(plain);
    (fits && !holds(&model, sentinel)).then_some(model)
}

/// The header names a message's `connection` fields list (lowercase): options of this hop alone
/// (RFC 9110 7.6.1), never forwarded either way.
fn connection_options(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The request to the vendor: the same method and target, HTTP/1.1, the headers in order but
/// the [`HOP_BY_HOP`] and [`SET_ON_FORWARD`] ones, the credential header's value the key, `accept-encoding:
/// identity`, `content-length` the body's.
fn outgoing(
    parts: &Parts,
    admitted: Admitted,
    terminator: &Terminator,
    body: Bytes,
) -> Option<Request<Full<Bytes>>> {
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + 2);
    let this_hop = connection_options(&parts.headers);
    for (at, (name, value)) in parts.headers.iter().enumerate() {
        if Some(at) == admitted.swap() {
            headers.append(
                name.clone(),
                terminator.key.header_value(terminator.header)?,
            );
        } else if !HOP_BY_HOP.contains(&name.as_str())
            && !SET_ON_FORWARD.contains(&name.as_str())
            && !this_hop.iter().any(|hop| hop == name.as_str())
        {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if parts.headers.contains_key(header::CONTENT_LENGTH) || !body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Some(request)
}

impl<U> Shared<U>
where
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    /// Send one request to the vendor (opening the connection first, once) and wait for its
    /// response head. A failure ends the vendor connection for good.
    async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, Fault> {
        let mut upstream = self.upstream.lock().await;
        if let Upstream::Dialed(_) = &*upstream {
            let Upstream::Dialed(stream) = std::mem::replace(&mut *upstream, Upstream::Gone) else {
                return Err(Fault::Upstream(502));
            };
            match open(stream, &self.terminator, self.ledger.clone()).await {
                Some((sender, task)) => {
                    *upstream = Upstream::Open {
                        sender,
                        _task: AbortOnDrop(task),
                    };
                }
                None => {
                    self.ledger.fail("upstream-tls");
                    return Err(Fault::Upstream(502));
                }
            }
        }
        let Upstream::Open { sender, .. } = &mut *upstream else {
            return Err(Fault::Upstream(502));
        };
        let answered = timeout(self.terminator.limits.response_head, async {
            sender.ready().await?;
            sender.send_request(request).await
        })
        .await;
        let (status, error) = match answered {
            Ok(Ok(response)) if !response.status().is_informational() => return Ok(response),
            Ok(_) => (502, "upstream"),
            Err(_) => (504, "upstream-timeout"),
        };
        *upstream = Upstream::Gone;
        self.ledger.fail(error);
        Err(Fault::Upstream(status))
    }
}

/// TLS to the vendor (SNI its host, within the handshake bound) and hyper's client on it.
async fn open<U>(
    stream: U,
    terminator: &Terminator,
    ledger: Arc<Ledger>,
) -> Option<(SendRequest<Full<Bytes>>, JoinHandle<()>)>
where
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let name = ServerName::try_from(terminator.host.clone()).ok()?;
    let connector = TlsConnector::from(terminator.client.clone());
    let tls = timeout(terminator.limits.handshake, connector.connect(name, stream))
        .await
        .ok()?
        .ok()?;
    if tls
        .get_ref()
        .1
        .alpn_protocol()
        .is_some_and(|p| p != HTTP_11)
    {
        return None;
    }
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .ok()?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
        // The vendor closed (an idle keep-alive, a `connection: close`): once nothing is in
        // flight the agent's connection closes too, so its next request opens a new one rather
        // than meeting a 502.
        ledger.watch.vendor_gone();
    });
    Some((sender, task))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
#[path = "terminate_tests.rs"]
mod tests;
