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

use crate::usage::{BodyUsage, StreamUsage, Usage};
use crate::vendor::{
    self, Admitted, Budget, CredentialHeader, Head, Spent, Terminated, VendorRejection,
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
/// Request headers never forwarded: the hop-by-hop ones (this connection's, not the vendor's),
/// `accept-encoding` (set to `identity`: the usage reader reads plain bytes) and
/// `content-length` (set to the body's length).
const NOT_FORWARDED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "accept-encoding",
    "content-length",
];
/// Response headers never passed back (hop-by-hop).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
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
        }
    }

    fn terminated(&self) -> Terminated<'_> {
        Terminated {
            host: &self.host,
            header: self.header,
            sentinel: &self.sentinel,
            routes: &VENDOR_ROUTES,
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
    if let Err(rejection) = terminator.spending().request(&terminator.budget, declared) {
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

/// The request to the vendor: the same method and target, HTTP/1.1, the headers in order but
/// the ones [`NOT_FORWARDED`], the credential header's value the key, `accept-encoding:
/// identity`, `content-length` the body's.
fn outgoing(
    parts: &Parts,
    admitted: Admitted,
    terminator: &Terminator,
    body: Bytes,
) -> Option<Request<Full<Bytes>>> {
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + 2);
    for (at, (name, value)) in parts.headers.iter().enumerate() {
        if at == admitted.swap() {
            headers.append(
                name.clone(),
                terminator.key.header_value(terminator.header)?,
            );
        } else if !NOT_FORWARDED.contains(&name.as_str()) {
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

/// The vendor's response to the agent: its status and headers (not the hop-by-hop ones), its
/// body streamed through an [`Answer`].
fn relay<U>(
    response: Response<Incoming>,
    mut recording: Recording,
    shared: &Shared<U>,
) -> Response<Answer> {
    let (parts, body) = response.into_parts();
    recording.call.status = parts.status.as_u16();
    let reader = Reader::for_type(&parts.headers);
    let chunked = parts.headers.contains_key(header::TRANSFER_ENCODING);
    // The vendor closes after this one: so does the agent's connection, cleanly.
    let closes = parts.headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.to_ascii_lowercase().contains("close"))
    });
    let mut headers = HeaderMap::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        let framing = chunked && name == header::CONTENT_LENGTH;
        if !HOP_BY_HOP.contains(&name.as_str()) && !framing {
            headers.append(name.clone(), value.clone());
        }
    }
    if closes {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let answer = Answer {
        source: Source::Vendor(body),
        reader,
        recording: Some(recording),
        terminator: Some(shared.terminator.clone()),
        ledger: shared.ledger.clone(),
        cut: None,
    };
    let mut out = Response::new(answer);
    *out.status_mut() = parts.status;
    *out.headers_mut() = headers;
    out
}

/// A refusal's answer: its status, a JSON error naming it, `x-cordon-refusal`.
fn refused(refusal: &Refusal, mut recording: Recording) -> Response<Answer> {
    let id = refusal.rejection.id();
    tracing::info!(
        refusal = id,
        status = refusal.status,
        "vendor request refused"
    );
    recording.call.status = refusal.status;
    recording.call.refusal = Some(id);
    let body = format!(
        "{{\"type\":\"error\",\"error\":{{\"type\":\"cordon_refusal\",\
         \"message\":\"cordon refused this request: {id}\"}}}}"
    );
    let budget = recording.call.budget;
    let mut response = fixed(refusal.status, body, recording, refusal.close);
    let headers = response.headers_mut();
    headers.insert("x-cordon-refusal", HeaderValue::from_static(id));
    if let Some(spend) = budget {
        headers.insert("x-cordon-budget", HeaderValue::from_static(spend));
    }
    response
}

/// The vendor failed or did not answer: 502 or 504, and the connection closes (the vendor's is
/// gone; the agent reconnects through the proxy).
fn failed(status: u16, mut recording: Recording) -> Response<Answer> {
    tracing::info!(status, "vendor request failed upstream");
    recording.call.status = status;
    let body = "{\"type\":\"error\",\"error\":{\"type\":\"cordon_upstream\",\
                \"message\":\"cordon: the vendor did not answer\"}}";
    fixed(status, body.to_owned(), recording, true)
}

fn fixed(status: u16, body: String, recording: Recording, close: bool) -> Response<Answer> {
    let answer = Answer {
        source: Source::Fixed(Some(Bytes::from(body))),
        reader: Reader::None,
        ledger: recording.ledger.clone(),
        recording: Some(recording),
        terminator: None,
        cut: None,
    };
    let mut response = Response::new(answer);
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if close {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request's record in the making: recorded once, when dropped (its response ended, failed,
/// or was dropped with the connection).
struct Recording {
    call: Call,
    arrival: Instant,
    ledger: Arc<Ledger>,
}

impl Recording {
    fn start(
        ledger: &Arc<Ledger>,
        terminator: &Terminator,
        parts: &Parts,
        arrival: Instant,
    ) -> Recording {
        lock(&ledger.watch.state).in_flight += 1;
        let sentinel = &terminator.sentinel;
        Recording {
            call: Call {
                method: shown(parts.method.as_str(), SHOWN_METHOD, sentinel),
                path: shown(parts.uri.path(), SHOWN_PATH, sentinel),
                status: 0,
                request_bytes: 0,
                response_bytes: 0,
                duration_ms: 0,
                model: None,
                usage: None,
                refusal: None,
                budget: None,
            },
            arrival,
            ledger: ledger.clone(),
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let elapsed = self.arrival.elapsed().as_millis();
        self.call.duration_ms = u64::try_from(elapsed).unwrap_or(u64::MAX);
        let call = self.call.clone();
        self.ledger.calls.fetch_add(1, Ordering::SeqCst);
        self.ledger.watch.recorded();
        (self.ledger.record)(call);
    }
}

/// `text` for a record: withheld if it holds the sentinel, else at most `max` characters.
fn shown(text: &str, max: usize, sentinel: &str) -> String {
    if holds(text, sentinel) {
        return "(withheld)".to_owned();
    }
    text.chars().take(max).collect()
}

fn holds(text: &str, sentinel: &str) -> bool {
    !sentinel.is_empty() && text.contains(sentinel)
}

/// A response body to the agent: cordon's own (a refusal), or the vendor's, streamed, counted
/// against the response budget and read for usage.
struct Answer {
    source: Source,
    reader: Reader,
    recording: Option<Recording>,
    /// The budget the vendor's bytes count against (`None` for cordon's own answers).
    terminator: Option<Arc<Terminator>>,
    ledger: Arc<Ledger>,
    /// The response budget ran out (at this count of the agent connection's flushes): once
    /// what passed is flushed, the body ends with an error (before, hyper would drop it unsent).
    cut: Option<u64>,
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer").finish_non_exhaustive()
    }
}

enum Source {
    Fixed(Option<Bytes>),
    Vendor(Incoming),
}

/// The usage reader a response's content type calls for.
enum Reader {
    None,
    Stream(StreamUsage),
    Body(BodyUsage),
}

impl Reader {
    fn for_type(headers: &HeaderMap) -> Reader {
        let kind = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase());
        match kind.as_deref() {
            Some("text/event-stream") => Reader::Stream(StreamUsage::default()),
            Some("application/json") => Reader::Body(BodyUsage::default()),
            _ => Reader::None,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        match self {
            Reader::None => {}
            Reader::Stream(reader) => reader.feed(bytes),
            Reader::Body(reader) => reader.feed(bytes),
        }
    }

    fn usage(&self) -> Option<Usage> {
        match self {
            Reader::None => None,
            Reader::Stream(reader) => reader.usage(),
            Reader::Body(reader) => reader.usage(),
        }
    }
}

/// Why a response ended early (the agent sees a cut body; hyper closes the connection).
#[derive(Debug)]
struct Cut(&'static str);

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the response was cut: {}", self.0)
    }
}

impl std::error::Error for Cut {}

impl Answer {
    /// Record the call, once: its usage as read so far.
    fn finish(&mut self) {
        if let Some(mut recording) = self.recording.take() {
            recording.call.usage = self.reader.usage();
        }
    }

    /// Pass `data` as far as the response budget allows; past it, cut.
    fn pass(&mut self, mut data: Bytes) -> Bytes {
        if let Some(terminator) = &self.terminator {
            let n = data.len() as u64;
            let passed = terminator.spending().response(&terminator.budget, n);
            if passed < n {
                self.cut = Some(self.ledger.watch.flushes());
                // `passed` is below a `usize` length.
                data.truncate(usize::try_from(passed).unwrap_or(0));
            }
        }
        self.reader.feed(&data);
        if let Some(recording) = &mut self.recording {
            recording.call.response_bytes += data.len() as u64;
            if self.cut.is_some() {
                recording.call.budget = Some(vendor::Spend::ResponseBytes.as_str());
            }
        }
        data
    }

    fn end(&mut self, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        self.ledger.fail("response-cut");
        self.finish();
        Poll::Ready(Some(Err(Cut(why))))
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        let this = self.get_mut();
        if let Some(at) = this.cut {
            if !this.ledger.watch.flushed_since(at, cx.waker()) {
                return Poll::Pending;
            }
            return this.end("the response budget ran out");
        }
        let body = match &mut this.source {
            Source::Fixed(bytes) => {
                let frame = bytes.take().map(|b| Ok(Frame::data(b)));
                if frame.is_none() {
                    this.finish();
                }
                return Poll::Ready(frame);
            }
            Source::Vendor(body) => body,
        };
        loop {
            match ready!(Pin::new(&mut *body).poll_frame(cx)) {
                None => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Some(Err(_)) => return this.end("the vendor's body failed"),
                Some(Ok(frame)) => {
                    // Trailers are not passed on (HTTP/1.1 agents do not ask for them).
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let data = this.pass(data);
                    if data.is_empty() && this.cut.is_some() {
                        // Nothing of it passes: end once what passed before is flushed.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Fixed(bytes) => bytes.is_none(),
            Source::Vendor(body) => self.cut.is_none() && body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Fixed(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Source::Fixed(None) => SizeHint::with_exact(0),
            Source::Vendor(body) => body.size_hint(),
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The agent's stream with the bytes the proxy already read from it replayed first.
struct Prefixed<C> {
    prefix: Vec<u8>,
    at: usize,
    inner: C,
}

impl<C> Prefixed<C> {
    fn new(prefix: Vec<u8>, inner: C) -> Prefixed<C> {
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
struct Watched<T> {
    inner: T,
    ledger: Arc<Ledger>,
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
struct Watch {
    state: Mutex<WatchState>,
    /// A head began, or a request stopped waiting: the timers look again.
    changed: Notify,
}

struct WatchState {
    framing: Framing,
    /// Heads read whole and not yet handled, in order.
    heads: VecDeque<HeadSeen>,
    /// The last byte either way.
    last: Instant,
    /// Requests reading their body or waiting for the vendor (their own deadlines apply).
    busy: usize,
    /// Requests not yet recorded.
    in_flight: usize,
    /// When the last request in flight was recorded: a head read while another request was in
    /// flight (pipelined) is timed from here, its turn.
    turn: Instant,
    /// The vendor's connection ended.
    vendor_gone: bool,
    /// Flushes of the agent's connection so far, and a cut response waiting for the next.
    flushes: u64,
    flush_waiter: Option<Waker>,
}

/// One head as the raw bytes showed it.
#[derive(Debug, Clone, Copy)]
struct HeadSeen {
    /// Its first byte's arrival.
    started: Instant,
    /// A bare LF or CR, a second `Content-Length`, one that does not parse.
    malformed: bool,
}

/// What the connection's timers found.
enum Due {
    Nothing,
    /// A head did not come whole within [`Limits::request`].
    Head,
    /// Nothing moved for [`Limits::idle`].
    Idle {
        in_flight: bool,
    },
}

impl Watch {
    fn new() -> Watch {
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

    fn read(&self, bytes: &[u8]) {
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

    fn touch(&self) {
        lock(&self.state).last = Instant::now();
    }

    fn flushes(&self) -> u64 {
        lock(&self.state).flushes
    }

    fn flushed(&self) {
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
    fn flushed_since(&self, at: u64, waker: &Waker) -> bool {
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
    fn arrived(&self) -> HeadSeen {
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

    fn recorded(&self) {
        let mut state = lock(&self.state);
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.turn = Instant::now();
        }
        drop(state);
        self.changed.notify_one();
    }

    fn vendor_gone(&self) {
        lock(&self.state).vendor_gone = true;
        self.changed.notify_one();
    }

    /// A request reads its body or waits for the vendor until the guard drops.
    fn busy(&self) -> Busy<'_> {
        lock(&self.state).busy += 1;
        Busy(self)
    }

    /// When the timers next look, and what is due then.
    fn deadline(&self, limits: &Limits) -> (Instant, Due) {
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

    fn next_check(&self, limits: &Limits) -> Instant {
        self.deadline(limits).0
    }

    fn due(&self, limits: &Limits) -> Due {
        match self.deadline(limits) {
            (at, due) if Instant::now() >= at => due,
            _ => Due::Nothing,
        }
    }
}

struct Busy<'a>(&'a Watch);

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
const LINE_KEPT: usize = 64;

/// The agent's request framing, followed over the raw bytes beside hyper: each head (CRLF line
/// ends only, at most one `Content-Length` of digits), then as many body bytes as it declared.
/// A head with `Transfer-Encoding` (refused) or a malformed one loses the framing: every head
/// after it counts as malformed.
#[derive(Debug, Default)]
struct Framing {
    /// Body bytes still to skip; `None` while reading a head.
    body: Option<u64>,
    lost: bool,
    /// The current head's first byte's arrival.
    started: Option<Instant>,
    /// The current line's first bytes, lowercase; its length.
    line: Vec<u8>,
    line_len: usize,
    /// The previous byte was a CR.
    cr: bool,
    /// Lines of the current head so far (the request line included).
    lines: usize,
    length: Option<u64>,
    chunked: bool,
}

impl Framing {
    fn read(&mut self, mut bytes: &[u8], now: Instant, heads: &mut VecDeque<HeadSeen>) {
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

    fn end_line(&mut self, now: Instant, heads: &mut VecDeque<HeadSeen>) {
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
    fn header_line(&mut self, line: &[u8], len: usize) -> bool {
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
    fn lose(&mut self, now: Instant, heads: &mut VecDeque<HeadSeen>) {
        heads.push_back(HeadSeen {
            started: self.started.unwrap_or(now),
            malformed: true,
        });
        self.lost = true;
        self.started = None;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
#[path = "terminate_tests.rs"]
mod tests;
