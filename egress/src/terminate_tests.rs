//! The terminator end to end in this process: an agent (a rustls client writing raw HTTP/1.1
//! bytes) on a duplex pipe, [`serve`] on the other end, and a fake vendor (tokio-rustls,
//! hand-written HTTP/1.1) on 127.0.0.1 that records every request that reached it. Nothing leaves
//! the host.

use super::watch::Framing;
use super::*;
use crate::vendor::Route;
use cordon_fake_vendor::ca::{self, TestCa};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::OnceLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::client::TlsStream as ClientTls;
use CredentialHeader::{ApiKey, Bearer};

const HOST: &str = "api.vendor.test";
const SENTINEL: &str = "sk-ant-cordon-sentinel-5f2a9c";
const KEY: &str = "sk-ant-real-key-7d41e0b3";
/// How long a test waits for what should happen.
const WAIT: Duration = Duration::from_secs(5);

/// The vendor's test CA and leaf, and the invocation's (the one the agent trusts), made once.
fn cas() -> &'static (TestCa, TestCa) {
    static CAS: OnceLock<(TestCa, TestCa)> = OnceLock::new();
    CAS.get_or_init(|| {
        (
            ca::generate(&[HOST]).unwrap(),
            ca::generate(&[HOST]).unwrap(),
        )
    })
}

/// Bounds short enough for a test, long enough for a slow machine.
fn limits() -> Limits {
    Limits {
        handshake: Duration::from_secs(3),
        request: Duration::from_secs(3),
        response_head: Duration::from_secs(3),
        max_request_body: 1024 * 1024,
        idle: Duration::from_secs(10),
    }
}

fn terminator(header: CredentialHeader, budget: Budget, limits: Limits) -> Arc<Terminator> {
    let (vendor_ca, agent_ca) = cas();
    terminator_with(
        header,
        budget,
        limits,
        client_config(Some(vendor_ca.ca_pem.as_bytes())).unwrap(),
        agent_ca,
    )
}

fn terminator_with(
    header: CredentialHeader,
    budget: Budget,
    limits: Limits,
    client: Arc<rustls::ClientConfig>,
    leaf: &TestCa,
) -> Arc<Terminator> {
    let server = server_config(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    let key = Key::new(KEY.to_owned()).unwrap();
    let mut terminator = Terminator::new(
        "API.Vendor.Test",
        header,
        SENTINEL.to_owned(),
        key,
        budget,
        server,
        client,
    );
    terminator.limits = limits;
    Arc::new(terminator)
}

// ---- The fake vendor ----

/// One request as it reached the vendor.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// How often `needle` occurs in the target, header names and values, and body.
    fn count(&self, needle: &str) -> usize {
        let head = self
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\n"))
            .collect::<String>();
        let body = String::from_utf8_lossy(&self.body);
        [self.target.as_str(), &head, &body]
            .iter()
            .map(|text| text.matches(needle).count())
            .sum()
    }
}

/// One step of a scripted answer.
#[derive(Clone)]
enum Step {
    Send(Vec<u8>),
    Sleep(Duration),
    /// Wait for one of the gate's permits (the test adds them).
    Gate(Arc<tokio::sync::Semaphore>),
    /// Never answer, keep the connection.
    Hang,
    /// Close the connection.
    Close,
}

type Script = Arc<dyn Fn(&Seen) -> Vec<Step> + Send + Sync>;

fn always(reply: Vec<u8>) -> Script {
    Arc::new(move |_| vec![Step::Send(reply.clone())])
}

/// The fake vendor: TLS with the vendor's test leaf, each request recorded, then answered by
/// its script.
struct Vendor {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections on which any byte arrived.
    touched: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Vendor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Vendor {
    async fn start(script: Script) -> Vendor {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let leaf = &cas().0;
        let config = server_config(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
        let acceptor = TlsAcceptor::from(config);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let touched = Arc::new(AtomicUsize::new(0));
        let (record, count) = (seen.clone(), touched.clone());
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                connections.spawn(vendor_connection(
                    tcp,
                    acceptor.clone(),
                    script.clone(),
                    record.clone(),
                    count.clone(),
                ));
            }
        });
        Vendor {
            addr,
            seen,
            touched,
            task,
        }
    }

    /// What the proxy hands `serve`: a TCP stream connected to the vendor.
    async fn dial(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// No byte ever reached the vendor (not even a ClientHello).
    fn assert_untouched(&self) {
        assert_eq!(
            self.touched.load(Ordering::SeqCst),
            0,
            "the vendor was reached"
        );
        assert!(self.seen().is_empty());
    }
}

async fn vendor_connection(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    script: Script,
    seen: Arc<Mutex<Vec<Seen>>>,
    touched: Arc<AtomicUsize>,
) {
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(n) if n > 0 => touched.fetch_add(1, Ordering::SeqCst),
        _ => return,
    };
    let Ok(mut tls) = acceptor.accept(tcp).await else {
        return;
    };
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut tls, &mut buf).await {
        seen.lock().unwrap().push(request.clone());
        for step in script(&request) {
            match step {
                Step::Send(bytes) => {
                    if tls.write_all(&bytes).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                }
                Step::Sleep(pause) => tokio::time::sleep(pause).await,
                Step::Gate(gate) => gate.acquire().await.unwrap().forget(),
                Step::Hang => std::future::pending::<()>().await,
                Step::Close => {
                    let _ = tls.shutdown().await;
                    return;
                }
            }
        }
    }
}

/// One request as the terminator's hyper client writes it (CRLF, a Content-Length body).
async fn read_request<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Option<Seen> {
    let end = loop {
        if let Some(at) = find(buf, b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8(buf[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap().split(' ');
    let method = request_line.next().unwrap().to_owned();
    let target = request_line.next().unwrap().to_owned();
    assert_eq!(request_line.next(), Some("HTTP/1.1"));
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_owned(), value.trim().to_owned())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    buf.drain(..end + 4);
    while buf.len() < length {
        let mut chunk = [0u8; 65536];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf.drain(..length).collect();
    Some(Seen {
        method,
        target,
        headers,
        body,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// ---- The vendor's answers ----

const MESSAGE: &str = "{\"id\":\"msg_1\",\"type\":\"message\",\"model\":\"claude-test\",\
                       \"content\":[],\"usage\":{\"input_tokens\":12,\"output_tokens\":34}}";

fn json_reply(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nrequest-id: req_test\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\
                        cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";

/// A streamed Messages response's events: usage in `message_start` and `message_delta`.
fn sse_events() -> Vec<String> {
    vec![
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\
         \"model\":\"claude-test\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1,\
         \"cache_read_input_tokens\":3}}}\n\n"
            .to_owned(),
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\
         \"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
            .to_owned(),
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\
         \"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n"
            .to_owned(),
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned(),
    ]
}

const SSE_USAGE: Usage = Usage {
    input_tokens: Some(25),
    output_tokens: Some(15),
    cache_creation_input_tokens: None,
    cache_read_input_tokens: Some(3),
};

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

/// The streamed answer, an event per chunk, `gate` (if any) held before every event after the
/// first, a pause between the others.
fn sse_script(gate: Option<Arc<tokio::sync::Semaphore>>) -> Script {
    Arc::new(move |_| {
        let mut steps = vec![Step::Send(SSE_HEAD.as_bytes().to_vec())];
        for (at, event) in sse_events().iter().enumerate() {
            if at > 0 {
                steps.push(match &gate {
                    Some(gate) => Step::Gate(gate.clone()),
                    None => Step::Sleep(Duration::from_millis(20)),
                });
            }
            steps.push(Step::Send(chunk(event)));
        }
        steps.push(Step::Send(b"0\r\n\r\n".to_vec()));
        steps
    })
}

// ---- The agent ----

fn agent_config(alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(cas().1.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// The agent's end: TLS to the terminator, raw bytes each way.
struct Agent {
    tls: ClientTls<DuplexStream>,
    buf: Vec<u8>,
}

/// A response as the agent read it.
#[derive(Debug, Clone, Default)]
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    /// The body, de-chunked.
    body: Vec<u8>,
    /// The bytes as they came.
    raw: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Agent {
    async fn send(&mut self, bytes: &[u8]) {
        self.tls.write_all(bytes).await.unwrap();
        self.tls.flush().await.unwrap();
    }

    /// Read more; false at the end (or a failure).
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match timeout(WAIT, self.tls.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Ok(_) => false,
            Err(_) => panic!("the agent waited {WAIT:?} for bytes"),
        }
    }

    async fn need(&mut self, len: usize) -> bool {
        while self.buf.len() < len {
            if !self.fill().await {
                return false;
            }
        }
        true
    }

    /// Read until `needle` has come (true), or the end (false).
    async fn read_until(&mut self, needle: &[u8]) -> bool {
        while find(&self.buf, needle).is_none() {
            if !self.fill().await {
                return false;
            }
        }
        true
    }

    /// The next response, whole; `Err` with what came when it was cut.
    async fn response(&mut self) -> Result<Got, Got> {
        let mut got = Got::default();
        if !self.read_until(b"\r\n\r\n").await {
            return Err(got);
        }
        let end = find(&self.buf, b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8(self.buf[..end - 4].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        got.status = lines.next().unwrap()[9..12].parse().unwrap();
        for line in lines {
            let (name, value) = line.split_once(':').unwrap();
            got.headers.push((name.to_owned(), value.trim().to_owned()));
        }
        let mut at = end;
        if let Some(length) = got.header("content-length") {
            let length: usize = length.parse().unwrap();
            let whole = self.need(at + length).await;
            let upto = (at + length).min(self.buf.len());
            got.body = self.buf[at..upto].to_vec();
            at = upto;
            if !whole {
                return Err(got);
            }
        } else if got.header("transfer-encoding") == Some("chunked") {
            loop {
                if !self.read_until_from(at, b"\r\n").await {
                    got.body.extend_from_slice(&self.buf[at..]);
                    return Err(got);
                }
                let line_end = at + find(&self.buf[at..], b"\r\n").unwrap();
                let size_text = std::str::from_utf8(&self.buf[at..line_end]).unwrap();
                let size = usize::from_str_radix(size_text, 16).unwrap();
                at = line_end + 2;
                let whole = self.need(at + size + 2).await;
                let upto = (at + size).min(self.buf.len());
                got.body.extend_from_slice(&self.buf[at..upto]);
                if !whole {
                    return Err(got);
                }
                at += size + 2;
                if size == 0 {
                    break;
                }
            }
        }
        got.raw = self.buf.drain(..at).collect();
        Ok(got)
    }

    async fn read_until_from(&mut self, from: usize, needle: &[u8]) -> bool {
        while self.buf.len() < from || find(&self.buf[from..], needle).is_none() {
            if !self.fill().await {
                return false;
            }
        }
        true
    }

    /// The terminator closed the connection (nothing more came).
    async fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        let ended = timeout(WAIT, self.tls.read_to_end(&mut rest)).await;
        matches!(ended, Ok(Ok(_)) | Ok(Err(_))) && rest.is_empty()
    }

    /// Close cleanly (a TLS close_notify, then the end).
    async fn close(mut self) {
        let _ = self.tls.shutdown().await;
    }
}

/// One agent connection through `serve`, and what it recorded.
struct Session {
    agent: Agent,
    served: JoinHandle<Served>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Session {
    async fn open(terminator: &Arc<Terminator>, vendor: &Vendor) -> Session {
        let (agent, served, calls) = connect(terminator, vendor.dial().await, &[HTTP_11]).await;
        Session {
            agent: agent.unwrap(),
            served,
            calls,
        }
    }

    /// Close the agent's end cleanly; what `serve` came to, and every record.
    async fn finish(self) -> (Served, Vec<Call>) {
        self.agent.close().await;
        ended(self.served, &self.calls).await
    }
}

async fn ended(served: JoinHandle<Served>, calls: &Arc<Mutex<Vec<Call>>>) -> (Served, Vec<Call>) {
    let served = timeout(WAIT, served)
        .await
        .expect("serve did not end")
        .unwrap();
    (served, calls.lock().unwrap().clone())
}

/// What the proxy does: read the tunnel's first record (the ClientHello) and hand the stream,
/// that record and the vendor's to `serve`. The agent's handshake result.
async fn connect(
    terminator: &Arc<Terminator>,
    upstream: TcpStream,
    alpn: &[&[u8]],
) -> (io::Result<Agent>, JoinHandle<Served>, Arc<Mutex<Vec<Call>>>) {
    let (near, mut far) = tokio::io::duplex(1 << 20);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let kept = calls.clone();
    let record: Arc<dyn Fn(Call) + Send + Sync> =
        Arc::new(move |call| kept.lock().unwrap().push(call));
    let terminator = terminator.clone();
    let served = tokio::spawn(async move {
        let mut prefix = vec![0u8; 5];
        far.read_exact(&mut prefix).await.unwrap();
        let len = usize::from(u16::from_be_bytes([prefix[3], prefix[4]]));
        prefix.resize(5 + len, 0);
        far.read_exact(&mut prefix[5..]).await.unwrap();
        serve(far, prefix, upstream, terminator, record).await
    });
    let name = ServerName::try_from(HOST).unwrap();
    let agent = TlsConnector::from(agent_config(alpn))
        .connect(name, near)
        .await
        .map(|tls| Agent {
            tls,
            buf: Vec::new(),
        });
    (agent, served, calls)
}

// ---- The agent's requests ----

fn raw(method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("{method} {target} HTTP/1.1\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out.into_bytes()
}

/// The credential header as the agent sends it (the sentinel), and as the vendor must see it
/// (the key).
fn credential(header: CredentialHeader) -> (&'static str, String, String) {
    match header {
        ApiKey => ("x-api-key", SENTINEL.to_owned(), KEY.to_owned()),
        Bearer => (
            "authorization",
            format!("Bearer {SENTINEL}"),
            format!("Bearer {KEY}"),
        ),
    }
}

/// A request as the CLI sends it: host, version, the sentinel, a length when there is a body.
fn request(method: &str, target: &str, header: CredentialHeader, body: &str) -> Vec<u8> {
    request_with(method, target, header, body, &[])
}

fn request_with(
    method: &str,
    target: &str,
    header: CredentialHeader,
    body: &str,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let (name, value, _) = credential(header);
    let length = body.len().to_string();
    let mut headers = vec![
        ("host", HOST),
        ("anthropic-version", "2023-06-01"),
        (name, value.as_str()),
    ];
    if !body.is_empty() {
        headers.push(("content-type", "application/json"));
        headers.push(("content-length", &length));
    }
    headers.extend_from_slice(extra);
    raw(method, target, &headers, body)
}

const BODY: &str = "{\"model\":\"claude-test-4.5\",\"max_tokens\":16,\"messages\":[]}";

fn messages(header: CredentialHeader) -> Vec<u8> {
    request("POST", "/v1/messages?beta=true", header, BODY)
}

fn settings(header: CredentialHeader) -> Vec<u8> {
    request("GET", "/api/claude_code/settings", header, "")
}

fn target_of(route: &Route) -> String {
    match route.queries.first() {
        Some(query) => format!("{}?{query}", route.path),
        None => route.path.to_owned(),
    }
}

/// A refusal as the agent must see it.
fn assert_refused(got: &Got, status: u16, id: &str) {
    assert_eq!(got.status, status, "{got:?}");
    assert_eq!(got.header("x-cordon-refusal"), Some(id));
    assert_eq!(got.header("content-type"), Some("application/json"));
    let expected = format!(
        "{{\"type\":\"error\",\"error\":{{\"type\":\"cordon_refusal\",\
         \"message\":\"cordon refused this request: {id}\"}}}}"
    );
    assert_eq!(String::from_utf8_lossy(&got.body), expected);
}

// ---- Admitted calls ----

#[tokio::test]
async fn every_route_with_either_credential_reaches_the_vendor_with_the_key_once() {
    let reply = json_reply("200 OK", MESSAGE);
    let vendor = Vendor::start(always(reply.clone())).await;
    for header in [ApiKey, Bearer] {
        let terminator = terminator(header, Budget::default(), limits());
        for route in VENDOR_ROUTES {
            let body = if route.method == "POST" { BODY } else { "" };
            let mut session = Session::open(&terminator, &vendor).await;
            let target = target_of(&route);
            session
                .agent
                .send(&request(route.method, &target, header, body))
                .await;
            let got = session.agent.response().await.unwrap();
            // The vendor's answer, byte for byte: status line, headers, body.
            assert_eq!(
                String::from_utf8_lossy(&got.raw),
                String::from_utf8_lossy(&reply)
            );
            let seen = vendor.seen().pop().unwrap();
            assert_eq!(
                (seen.method.as_str(), seen.target.as_str()),
                (route.method, target.as_str())
            );
            assert_eq!(seen.body, body.as_bytes());
            let (name, _, forwarded) = credential(header);
            assert_eq!(seen.values(name), vec![forwarded.as_str()], "{route:?}");
            assert_eq!(seen.count(KEY), 1, "{seen:?}");
            assert_eq!(seen.count(SENTINEL), 0, "{seen:?}");
            assert_eq!(seen.values("host"), vec![HOST]);
            let (served, calls) = session.finish().await;
            assert_eq!(
                served,
                Served {
                    calls: 1,
                    error: None
                }
            );
            let expected_usage = Usage {
                input_tokens: Some(12),
                output_tokens: Some(34),
                ..Usage::default()
            };
            assert_eq!(
                calls,
                vec![Call {
                    method: route.method.to_owned(),
                    path: route.path.to_owned(),
                    status: 200,
                    request_bytes: body.len() as u64,
                    response_bytes: MESSAGE.len() as u64,
                    duration_ms: calls[0].duration_ms,
                    model: (!body.is_empty()).then(|| "claude-test-4.5".to_owned()),
                    usage: Some(expected_usage),
                    refusal: None,
                    budget: None,
                }]
            );
        }
    }
    assert_eq!(vendor.seen().len(), 2 * VENDOR_ROUTES.len());
}

#[tokio::test]
async fn the_forwarded_head_drops_hop_by_hop_headers_and_sets_identity_and_length() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let mut session = Session::open(&terminator, &vendor).await;
    let extra = [
        ("connection", "keep-alive, x-hop"),
        // Named by `connection`: this hop's alone (RFC 9110 7.6.1), never forwarded.
        ("x-hop", "this-hop-only"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("te", "trailers"),
        ("trailer", "x-later"),
        ("accept-encoding", "gzip, br"),
        ("x-stainless-lang", "js"),
        ("user-agent", "claude-cli/2.0"),
    ];
    let sent = request_with("POST", "/v1/messages?beta=true", ApiKey, BODY, &extra);
    session.agent.send(&sent).await;
    assert_eq!(session.agent.response().await.unwrap().status, 200);
    let seen = vendor.seen().pop().unwrap();
    let names: Vec<&str> = seen.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "host",
            "anthropic-version",
            "x-api-key",
            "content-type",
            "x-stainless-lang",
            "user-agent",
            "accept-encoding",
            "content-length",
        ]
    );
    assert_eq!(seen.values("accept-encoding"), ["identity"]);
    assert_eq!(seen.values("content-length"), [BODY.len().to_string()]);
    assert_eq!(seen.values("x-api-key"), [KEY]);
    session.finish().await;
}

/// The vendor's own hop-by-hop headers, and those its `connection` names, stop at the proxy.
#[tokio::test]
async fn the_relayed_head_drops_the_vendors_hop_by_hop_headers() {
    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nrequest-id: req_test\r\n\
                 connection: keep-alive, x-vendor-hop\r\nx-vendor-hop: this-hop-only\r\n\
                 keep-alive: timeout=5\r\ncontent-length: 2\r\n\r\n{}";
    let vendor = Vendor::start(always(reply.as_bytes().to_vec())).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&messages(ApiKey)).await;
    let response = session.agent.response().await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.header("request-id"), Some("req_test"));
    for hop in ["x-vendor-hop", "keep-alive"] {
        assert_eq!(response.header(hop), None, "{hop}: {:?}", response.headers);
    }
    session.finish().await;
}

#[tokio::test]
async fn a_stream_reaches_the_agent_event_by_event_and_its_usage_is_recorded() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let vendor = Vendor::start(sse_script(Some(gate.clone()))).await;
    let terminator = terminator(Bearer, Budget::default(), limits());
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&messages(Bearer)).await;
    let events = sse_events();
    // The first event arrives while the vendor holds the second back.
    assert!(session.agent.read_until(events[0].as_bytes()).await);
    assert!(find(&session.agent.buf, b"content_block_delta").is_none());
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.add_permits(events.len());
    let got = session.agent.response().await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.body, events.concat().as_bytes());
    assert_eq!(
        got.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(got.header("cache-control"), Some("no-cache"));
    let (served, calls) = session.finish().await;
    assert_eq!(served.error, None);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].usage, Some(SSE_USAGE));
    assert_eq!(calls[0].model.as_deref(), Some("claude-test-4.5"));
    assert_eq!(calls[0].response_bytes, events.concat().len() as u64);
    assert_eq!(calls[0].request_bytes, BODY.len() as u64);
    // Timed from the request's arrival to its response's end.
    assert!(calls[0].duration_ms >= 50, "{calls:?}");
}

#[tokio::test]
async fn a_token_count_records_its_usage_and_a_vendor_error_passes_through() {
    let vendor = Vendor::start(Arc::new(|seen: &Seen| {
        let reply = if seen.target.starts_with("/v1/messages/count_tokens") {
            json_reply("200 OK", "{\"input_tokens\":42}")
        } else {
            json_reply(
                "500 Internal Server Error",
                "{\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}",
            )
        };
        vec![Step::Send(reply)]
    }))
    .await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let mut session = Session::open(&terminator, &vendor).await;
    let count = request("POST", "/v1/messages/count_tokens?beta=true", ApiKey, BODY);
    session.agent.send(&count).await;
    assert_eq!(session.agent.response().await.unwrap().status, 200);
    session.agent.send(&messages(ApiKey)).await;
    let failed = session.agent.response().await.unwrap();
    assert_eq!(failed.status, 500);
    assert_eq!(
        failed.raw,
        json_reply(
            "500 Internal Server Error",
            "{\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}"
        )
    );
    let (served, calls) = session.finish().await;
    assert_eq!(
        served,
        Served {
            calls: 2,
            error: None
        }
    );
    assert_eq!(
        calls[0].usage,
        Some(Usage {
            input_tokens: Some(42),
            ..Usage::default()
        })
    );
    assert_eq!(
        (calls[1].status, calls[1].refusal, calls[1].usage),
        (500, None, None)
    );
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_and_one_past_the_budget_is_refused() {
    let vendor = Vendor::start(Arc::new(|seen: &Seen| {
        let body = format!("{{\"target\":\"{}\"}}", seen.target);
        vec![Step::Send(json_reply("200 OK", &body))]
    }))
    .await;
    let terminator = terminator(
        ApiKey,
        Budget {
            requests: 3,
            ..Budget::default()
        },
        limits(),
    );
    let mut session = Session::open(&terminator, &vendor).await;
    let policy = request("GET", "/api/claude_code/policy_limits", ApiKey, "");
    let all = [settings(ApiKey), messages(ApiKey), policy, settings(ApiKey)].concat();
    session.agent.send(&all).await;
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let got = session.agent.response().await.unwrap();
        assert_eq!(got.status, 200);
        bodies.push(String::from_utf8(got.body).unwrap());
    }
    assert_eq!(
        bodies,
        [
            "{\"target\":\"/api/claude_code/settings\"}",
            "{\"target\":\"/v1/messages?beta=true\"}",
            "{\"target\":\"/api/claude_code/policy_limits\"}",
        ]
    );
    let refused = session.agent.response().await.unwrap();
    assert_refused(&refused, 429, "vendor-budget");
    assert_eq!(refused.header("x-cordon-budget"), Some("requests"));
    assert_eq!(vendor.seen().len(), 3);
    let (served, calls) = session.finish().await;
    assert_eq!(served.calls, 4);
    assert_eq!(calls[3].budget, Some("requests"));
}

// ---- Refusals ----

/// Send `bytes` on a fresh connection: the answer and what `serve` recorded. With `closes`, the
/// connection must be closed after the answer; without, it must still serve a request.
async fn refused_on_its_own(
    terminator: &Arc<Terminator>,
    vendor: &Vendor,
    bytes: &[u8],
    closes: bool,
) -> (Got, Vec<Call>) {
    let mut session = Session::open(terminator, vendor).await;
    session.agent.send(bytes).await;
    let got = session.agent.response().await.unwrap();
    if closes {
        assert!(session.agent.closed().await, "the connection stayed open");
    } else {
        // Still open: a request the rules refuse (never forwarded) is answered.
        session.agent.send(&request("GET", "/", ApiKey, "")).await;
        assert_refused(&session.agent.response().await.unwrap(), 403, "vendor-path");
    }
    let (_, mut calls) = session.finish().await;
    if !closes {
        calls.pop();
    }
    (got, calls)
}

#[tokio::test]
async fn http_1_0_is_refused_malformed_and_the_connection_closed() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let sent = String::from_utf8(settings(ApiKey))
        .unwrap()
        .replace("HTTP/1.1", "HTTP/1.0");
    let (got, calls) = refused_on_its_own(&terminator, &vendor, sent.as_bytes(), true).await;
    assert_refused(&got, 400, "vendor-malformed");
    assert_eq!(calls[0].refusal, Some("vendor-malformed"));
    vendor.assert_untouched();
}

#[tokio::test]
async fn targets_not_in_origin_form_are_refused_as_paths() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let absolute = format!("https://{HOST}/v1/messages?beta=true");
    let authority = format!("{HOST}:443");
    for (method, target) in [
        ("POST", absolute.as_str()),
        ("CONNECT", authority.as_str()),
        ("OPTIONS", "*"),
    ] {
        let sent = request(method, target, ApiKey, "");
        let (got, calls) = refused_on_its_own(&terminator, &vendor, &sent, false).await;
        assert_refused(&got, 403, "vendor-path");
        assert_eq!(calls.len(), 1, "{target}");
        assert_eq!(calls[0].refusal, Some("vendor-path"));
    }
    vendor.assert_untouched();
}

#[tokio::test]
async fn the_vendor_rules_refuse_with_their_status_and_the_connection_goes_on() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let other = format!("x-api-key: {SENTINEL}");
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (request("GET", "/v1/models", ApiKey, ""), 403, "vendor-path"),
        (
            request("GET", "/api/claude_code/settings?x=1", ApiKey, ""),
            403,
            "vendor-path",
        ),
        (
            request("POST", "/v1/messages?beta=false", ApiKey, ""),
            403,
            "vendor-path",
        ),
        (
            raw(
                "GET",
                "/api/claude_code/settings",
                &[("host", "evil.test"), ("x-api-key", SENTINEL)],
                "",
            ),
            403,
            "vendor-path",
        ),
        (
            raw("GET", "/api/claude_code/settings", &[("host", HOST)], ""),
            401,
            "vendor-credential",
        ),
        (
            request("GET", "/api/claude_code/settings", Bearer, ""),
            401,
            "vendor-credential",
        ),
        (
            request_with(
                "GET",
                "/api/claude_code/settings",
                ApiKey,
                "",
                &[("x-note", &other)],
            ),
            401,
            "vendor-credential",
        ),
        (
            raw(
                "GET",
                "/api/claude_code/settings",
                &[("host", HOST), ("x-api-key", "sk-ant-guess")],
                "",
            ),
            401,
            "vendor-credential",
        ),
    ];
    // One connection: each refusal answered, the connection kept (no body was left unread).
    let mut session = Session::open(&terminator, &vendor).await;
    for (sent, status, id) in &cases {
        session.agent.send(sent).await;
        let got = session.agent.response().await.unwrap();
        assert_refused(&got, *status, id);
        assert_eq!(got.header("connection"), None);
    }
    // And an admitted request after them still goes through.
    session.agent.send(&settings(ApiKey)).await;
    assert_eq!(session.agent.response().await.unwrap().status, 200);
    let (served, calls) = session.finish().await;
    assert_eq!(served.calls, cases.len() as u64 + 1);
    for ((_, status, id), call) in cases.iter().zip(&calls) {
        assert_eq!((call.status, call.refusal), (*status, Some(*id)));
        assert_eq!(call.request_bytes, 0);
    }
    assert_eq!(vendor.seen().len(), 1);
}

#[tokio::test]
async fn other_framings_and_protocol_switches_are_refused_malformed_and_closed() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let target = "/v1/messages?beta=true";
    let chunked = format!("{:x}\r\n{BODY}\r\n0\r\n\r\n", BODY.len());
    let length: &'static str = Box::leak(BODY.len().to_string().into_boxed_str());
    let (name, value, _) = credential(ApiKey);
    let base = [("host", HOST), (name, value.as_str())];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&str, &str)> {
        let mut headers: Vec<(&str, &str)> = base.to_vec();
        headers.extend_from_slice(extra);
        headers
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "chunked",
            raw(
                "POST",
                target,
                &with(&[("transfer-encoding", "chunked")]),
                &chunked,
            ),
        ),
        (
            "chunked and a length",
            raw(
                "POST",
                target,
                &with(&[("content-length", length), ("transfer-encoding", "chunked")]),
                &chunked,
            ),
        ),
        (
            "h2c",
            raw(
                "POST",
                target,
                &with(&[
                    ("content-length", length),
                    ("connection", "Upgrade, HTTP2-Settings"),
                    ("upgrade", "h2c"),
                    ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"),
                ]),
                BODY,
            ),
        ),
        (
            "websocket",
            raw(
                "GET",
                "/api/claude_code/settings",
                &with(&[("connection", "upgrade"), ("upgrade", "websocket")]),
                "",
            ),
        ),
        (
            "http2-settings alone",
            raw(
                "GET",
                "/api/claude_code/settings",
                &with(&[("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA")]),
                "",
            ),
        ),
        (
            "expect",
            raw(
                "POST",
                target,
                &with(&[("content-length", length), ("expect", "100-continue")]),
                "",
            ),
        ),
    ];
    for (case, sent) in cases {
        let (got, calls) = refused_on_its_own(&terminator, &vendor, &sent, true).await;
        assert_refused(&got, 400, "vendor-malformed");
        assert_eq!(calls.len(), 1, "{case}");
        assert_eq!(calls[0].refusal, Some("vendor-malformed"), "{case}");
    }
    vendor.assert_untouched();
}

/// Who refused a smuggling shape.
#[derive(Debug, PartialEq, Eq)]
enum RefusedBy {
    /// hyper's parser: its own 400, the request never reached `serve`'s handler.
    Hyper,
    /// The terminator, with this refusal id.
    Terminator(&'static str),
}

#[tokio::test]
async fn smuggling_shapes_are_refused_and_never_reach_the_vendor() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let head = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nhost: {HOST}\r\nx-api-key: {SENTINEL}\r\n"
    );
    let shape = |lines: &str, body: &str| format!("{head}{lines}\r\n{body}").into_bytes();
    let bare_lf = format!(
        "POST /v1/messages?beta=true HTTP/1.1\nhost: {HOST}\nx-api-key: {SENTINEL}\n\
         content-length: 2\n\n{{}}"
    );
    let one_bare_lf = format!("{head}x-note: a\ncontent-length: 2\r\n\r\n{{}}");
    let no_host = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nx-api-key: {SENTINEL}\r\n\
         content-length: 2\r\n\r\n{{}}"
    );
    let cases: Vec<(&str, Vec<u8>, RefusedBy)> = vec![
        (
            "two equal lengths",
            shape("content-length: 2\r\ncontent-length: 2\r\n", "{}"),
            RefusedBy::Terminator("vendor-malformed"),
        ),
        (
            "two lengths",
            shape("content-length: 2\r\ncontent-length: 3\r\n", "{}x"),
            RefusedBy::Hyper,
        ),
        (
            "a length list",
            shape("content-length: 2, 2\r\n", "{}"),
            RefusedBy::Hyper,
        ),
        (
            "a signed length",
            shape("content-length: +2\r\n", "{}"),
            RefusedBy::Hyper,
        ),
        (
            "a space before the colon",
            shape("content-length : 2\r\n", "{}"),
            RefusedBy::Hyper,
        ),
        (
            "obs-fold",
            shape("x-note: a\r\n folded\r\ncontent-length: 2\r\n", "{}"),
            RefusedBy::Hyper,
        ),
        (
            "bare LF everywhere",
            bare_lf.into_bytes(),
            RefusedBy::Terminator("vendor-malformed"),
        ),
        (
            "one bare LF",
            one_bare_lf.into_bytes(),
            RefusedBy::Terminator("vendor-malformed"),
        ),
        (
            "a bare CR",
            shape("x-note: a\rb\r\ncontent-length: 2\r\n", "{}"),
            RefusedBy::Hyper,
        ),
        (
            "no host",
            no_host.into_bytes(),
            RefusedBy::Terminator("vendor-path"),
        ),
    ];
    for (case, sent, by) in cases {
        let mut session = Session::open(&terminator, &vendor).await;
        session.agent.send(&sent).await;
        let got = session.agent.response().await.unwrap();
        let (_, calls) = session.finish().await;
        let refused_by = match calls.as_slice() {
            [] => RefusedBy::Hyper,
            [call] => RefusedBy::Terminator(call.refusal.unwrap()),
            _ => panic!("{case}: {calls:?}"),
        };
        assert_eq!(refused_by, by, "{case}");
        let status = match by {
            RefusedBy::Terminator("vendor-path") => 403,
            _ => 400,
        };
        assert_eq!(got.status, status, "{case}");
    }
    vendor.assert_untouched();
}

#[tokio::test]
async fn a_body_over_its_bound_is_refused_413_and_a_slow_one_at_its_deadline() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let short = Limits {
        request: Duration::from_millis(500),
        max_request_body: 64,
        ..limits()
    };
    let terminator = terminator(ApiKey, Budget::default(), short);
    let big = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "x".repeat(64));
    let sent = request("POST", "/v1/messages?beta=true", ApiKey, &big);
    let (got, calls) = refused_on_its_own(&terminator, &vendor, &sent, true).await;
    assert_refused(&got, 413, "vendor-malformed");
    assert_eq!((calls[0].status, calls[0].request_bytes), (413, 0));

    // Ten bytes declared, three sent, then nothing.
    let mut session = Session::open(&terminator, &vendor).await;
    let (name, value, _) = credential(ApiKey);
    let slow = raw(
        "POST",
        "/v1/messages?beta=true",
        &[("host", HOST), (name, &value), ("content-length", "10")],
        "{\"m",
    );
    session.agent.send(&slow).await;
    match session.agent.response().await {
        Ok(got) => assert_refused(&got, 408, "vendor-malformed"),
        Err(cut) => assert_eq!(cut.status, 0, "neither a 408 nor closed: {cut:?}"),
    }
    let (_, calls) = session.finish().await;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].refusal, Some("vendor-malformed"));
    vendor.assert_untouched();
}

// ---- Budgets ----

#[tokio::test]
async fn the_request_budget_runs_out_and_stays_out() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(
        ApiKey,
        Budget {
            requests: 2,
            ..Budget::default()
        },
        limits(),
    );
    let mut session = Session::open(&terminator, &vendor).await;
    for _ in 0..2 {
        session.agent.send(&settings(ApiKey)).await;
        assert_eq!(session.agent.response().await.unwrap().status, 200);
    }
    for _ in 0..2 {
        session.agent.send(&settings(ApiKey)).await;
        let got = session.agent.response().await.unwrap();
        assert_refused(&got, 429, "vendor-budget");
        assert_eq!(got.header("x-cordon-budget"), Some("requests"));
    }
    let (_, calls) = session.finish().await;
    assert_eq!(calls[2].budget, Some("requests"));
    // Another connection of the same invocation: still out.
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&settings(ApiKey)).await;
    assert_refused(
        &session.agent.response().await.unwrap(),
        429,
        "vendor-budget",
    );
    session.finish().await;
    assert_eq!(vendor.seen().len(), 2);
}

#[tokio::test]
async fn the_request_bytes_budget_refuses_before_the_body_and_stays_out() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let terminator = terminator(
        ApiKey,
        Budget {
            request_bytes: BODY.len() as u64 - 1,
            ..Budget::default()
        },
        limits(),
    );
    // Its body was never read: the connection does not go on past it.
    let (got, calls) = refused_on_its_own(&terminator, &vendor, &messages(ApiKey), true).await;
    assert_refused(&got, 429, "vendor-budget");
    assert_eq!(got.header("x-cordon-budget"), Some("request-bytes"));
    assert_eq!(calls[0].budget, Some("request-bytes"));
    // A bodyless request now: refused too.
    let (got, _) = refused_on_its_own(&terminator, &vendor, &settings(ApiKey), false).await;
    assert_eq!(got.header("x-cordon-budget"), Some("request-bytes"));
    vendor.assert_untouched();
}

#[tokio::test]
async fn the_response_budget_cuts_a_stream_midway_and_stays_out() {
    let vendor = Vendor::start(sse_script(None)).await;
    let first = sse_events()[0].len() as u64;
    let budget = Budget {
        response_bytes: first + 10,
        ..Budget::default()
    };
    let terminator = terminator(ApiKey, budget, limits());
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&messages(ApiKey)).await;
    let cut = session.agent.response().await.unwrap_err();
    assert_eq!(cut.status, 200);
    let events = sse_events().concat();
    assert_eq!(cut.body, events.as_bytes()[..cut.body.len()]);
    assert_eq!(cut.body.len() as u64, first + 10);
    let (served, calls) = ended(session.served, &session.calls).await;
    assert_eq!(served.error, Some("response-cut"));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].budget, Some("response-bytes"));
    assert_eq!(calls[0].response_bytes, first + 10);
    assert_eq!(calls[0].status, 200);
    // The input counts came in the first event; the output count never did.
    assert_eq!(calls[0].usage.and_then(|u| u.input_tokens), Some(25));
    assert_eq!(calls[0].usage.and_then(|u| u.output_tokens), Some(1));

    let (got, _) = refused_on_its_own(&terminator, &vendor, &settings(ApiKey), false).await;
    assert_refused(&got, 429, "vendor-budget");
    assert_eq!(got.header("x-cordon-budget"), Some("response-bytes"));
    assert_eq!(vendor.seen().len(), 1);
}

#[tokio::test]
async fn the_response_budget_cuts_a_sized_body() {
    let vendor = Vendor::start(always(json_reply("200 OK", MESSAGE))).await;
    let budget = Budget {
        response_bytes: 20,
        ..Budget::default()
    };
    let terminator = terminator(ApiKey, budget, limits());
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&messages(ApiKey)).await;
    let cut = session.agent.response().await.unwrap_err();
    assert_eq!(cut.body, MESSAGE.as_bytes()[..20]);
    let (_, calls) = ended(session.served, &session.calls).await;
    assert_eq!(
        (calls[0].response_bytes, calls[0].budget),
        (20, Some("response-bytes"))
    );
}

// ---- The connection ----

#[tokio::test]
async fn a_record_is_made_once_when_the_agent_leaves_mid_response() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let vendor = Vendor::start(sse_script(Some(gate.clone()))).await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&messages(ApiKey)).await;
    let first = sse_events()[0].clone();
    assert!(session.agent.read_until(first.as_bytes()).await);
    drop(session.agent);
    gate.add_permits(4);
    let (served, calls) = ended(session.served, &session.calls).await;
    assert!(served.error.is_some());
    assert_eq!(served.calls, 1);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, 200);
    assert!(calls[0].response_bytes >= first.len() as u64);
    assert!(calls[0].response_bytes < sse_events().concat().len() as u64);
}

#[tokio::test]
async fn the_handshake_has_a_deadline_and_needs_http_1_1() {
    let terminator = terminator(
        ApiKey,
        Budget::default(),
        Limits {
            handshake: Duration::from_millis(300),
            ..limits()
        },
    );
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    // Nothing past the proxy's first bytes: a ClientHello cut short.
    let (_near, far) = tokio::io::duplex(1024);
    let record: Arc<dyn Fn(Call) + Send + Sync> = Arc::new(|_| panic!("no request was made"));
    let partial = vec![0x16, 0x03, 0x01, 0x01, 0x00, 0x01];
    let serving = serve(
        far,
        partial,
        vendor.dial().await,
        terminator.clone(),
        record,
    );
    let served = timeout(WAIT, serving).await.expect("no handshake deadline");
    assert_eq!(
        served,
        Served {
            calls: 0,
            error: Some("handshake-timeout")
        }
    );

    // An agent offering only h2: no protocol in common, the handshake fails.
    let (agent, served, _) = connect(&terminator, vendor.dial().await, &[b"h2"]).await;
    // (The agent reads rustls' `no_application_protocol` alert, or finds the pipe closed.)
    assert!(agent.is_err());
    let served = timeout(WAIT, served).await.unwrap().unwrap();
    assert_eq!(
        served,
        Served {
            calls: 0,
            error: Some("handshake")
        }
    );

    // No ALPN at all is HTTP/1.1.
    let (agent, served, calls) = connect(&terminator, vendor.dial().await, &[]).await;
    let mut agent = agent.unwrap();
    agent.send(&settings(ApiKey)).await;
    assert_eq!(agent.response().await.unwrap().status, 200);
    agent.close().await;
    assert_eq!(ended(served, &calls).await.0.calls, 1);
}

#[tokio::test]
async fn an_untrusted_vendor_is_answered_502_and_never_sent_the_request() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    // Mozilla's roots only: the test vendor's CA is not among them.
    let terminator = terminator_with(
        ApiKey,
        Budget::default(),
        limits(),
        client_config(None).unwrap(),
        &cas().1,
    );
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&settings(ApiKey)).await;
    let got = session.agent.response().await.unwrap();
    assert_eq!(got.status, 502);
    assert_eq!(got.header("connection"), Some("close"));
    let (served, calls) = session.finish().await;
    assert_eq!(
        served,
        Served {
            calls: 1,
            error: Some("upstream-tls")
        }
    );
    assert_eq!((calls[0].status, calls[0].refusal), (502, None));
    assert!(vendor.seen().is_empty());
}

#[tokio::test]
async fn a_vendor_that_never_answers_is_504_at_the_head_deadline() {
    let vendor = Vendor::start(Arc::new(|_: &Seen| vec![Step::Hang])).await;
    let short = Limits {
        response_head: Duration::from_millis(300),
        idle: Duration::from_millis(100),
        ..limits()
    };
    let terminator = terminator(ApiKey, Budget::default(), short);
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&settings(ApiKey)).await;
    // Waiting for the vendor is not idleness: the head deadline answers, not the idle clock.
    let got = session.agent.response().await.unwrap();
    assert_eq!(got.status, 504);
    let (served, calls) = session.finish().await;
    assert_eq!(served.error, Some("upstream-timeout"));
    assert_eq!(calls[0].status, 504);
}

#[tokio::test]
async fn when_the_vendor_closes_the_agents_connection_closes_once_quiet() {
    let vendor = Vendor::start(Arc::new(|seen: &Seen| {
        let reply = json_reply("200 OK", "{}");
        if seen.target.contains("policy") {
            // A `connection: close` answer.
            let closing =
                String::from_utf8(reply)
                    .unwrap()
                    .replacen("\r\n", "\r\nconnection: close\r\n", 1);
            vec![Step::Send(closing.into_bytes()), Step::Close]
        } else {
            // A keep-alive answer, then the vendor's idle close.
            vec![
                Step::Send(reply),
                Step::Sleep(Duration::from_millis(100)),
                Step::Close,
            ]
        }
    }))
    .await;
    let terminator = terminator(ApiKey, Budget::default(), limits());
    for target in [
        "/api/claude_code/policy_limits",
        "/api/claude_code/settings",
    ] {
        let mut session = Session::open(&terminator, &vendor).await;
        session
            .agent
            .send(&request("GET", target, ApiKey, ""))
            .await;
        let got = session.agent.response().await.unwrap();
        assert_eq!(got.status, 200);
        if target.contains("policy") {
            assert_eq!(got.header("connection"), Some("close"));
        } else {
            assert_eq!(got.header("connection"), None);
        }
        // Closed well before the idle bound (10 s), with no error.
        let closed = tokio::time::Instant::now();
        assert!(session.agent.closed().await);
        assert!(closed.elapsed() < Duration::from_secs(2));
        let (served, _) = ended(session.served, &session.calls).await;
        assert_eq!(
            served,
            Served {
                calls: 1,
                error: None
            },
            "{target}"
        );
    }
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_trickling_head_timed_out() {
    let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
    let short = Limits {
        request: Duration::from_millis(300),
        idle: Duration::from_millis(300),
        ..limits()
    };
    let terminator = terminator(ApiKey, Budget::default(), short);
    let mut session = Session::open(&terminator, &vendor).await;
    session.agent.send(&settings(ApiKey)).await;
    assert_eq!(session.agent.response().await.unwrap().status, 200);
    assert!(session.agent.closed().await);
    let (served, _) = ended(session.served, &session.calls).await;
    assert_eq!(
        served,
        Served {
            calls: 1,
            error: None
        }
    );

    let mut session = Session::open(&terminator, &vendor).await;
    session
        .agent
        .send(b"GET /api/claude_code/settings HTTP/1.1\r\nhost: ")
        .await;
    assert!(session.agent.closed().await);
    let (served, calls) = ended(session.served, &session.calls).await;
    assert_eq!(
        served,
        Served {
            calls: 0,
            error: Some("request-timeout")
        }
    );
    assert!(calls.is_empty());
}

// ---- What is never shown ----

/// A tracing subscriber that keeps every field of every event and span, as text.
struct Capture(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        span.record(&mut Fields(&mut self.0.lock().unwrap()));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        event.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn neither_the_key_nor_the_sentinel_is_logged_recorded_or_printed() {
    // The process's subscriber (a scoped one misses events when other tests register the same
    // callsites from their threads): every test's events are held to the same check.
    let log = Arc::new(Mutex::new(String::new()));
    tracing::subscriber::set_global_default(Capture(log.clone())).unwrap();
    let vendor = Vendor::start(always(json_reply("200 OK", MESSAGE))).await;
    let terminator = terminator(Bearer, Budget::default(), limits());
    let mut session = Session::open(&terminator, &vendor).await;
    let in_path = format!("/v1/{SENTINEL}");
    let in_method = request(SENTINEL, "/v1/messages", Bearer, "");
    let model = format!("{{\"model\":\"{SENTINEL}\"}}");
    for sent in [
        messages(Bearer),
        request("GET", &in_path, Bearer, ""),
        in_method,
        request("POST", "/v1/messages?beta=true", Bearer, &model),
    ] {
        session.agent.send(&sent).await;
        session.agent.response().await.unwrap();
    }
    let (_, calls) = session.finish().await;
    assert_eq!(calls[1].path, "(withheld)");
    assert_eq!(calls[2].method, "(withheld)");
    assert_eq!(calls[3].model, None);
    let log = log.lock().unwrap().clone();
    assert!(
        log.contains("refusal=\"vendor-path\""),
        "nothing captured: {log}"
    );
    let shown = [
        log,
        format!("{calls:?}"),
        serde_json::to_string(&calls).unwrap(),
        format!("{terminator:?}"),
        format!("{:?}", terminator.key),
        TerminateError::Key.to_string(),
    ];
    for text in shown {
        assert!(!text.contains(KEY), "the key shown: {text}");
        assert!(!text.contains(SENTINEL), "the sentinel shown: {text}");
    }
    assert_eq!(format!("{:?}", terminator.key), "Key(withheld)");
}

// ---- The parts ----

#[test]
fn a_key_is_1_to_4096_bytes_of_visible_ascii() {
    assert!(Key::new("k".to_owned()).is_ok());
    assert!(Key::new("~".repeat(MAX_KEY)).is_ok());
    for bad in [
        String::new(),
        "k".repeat(MAX_KEY + 1),
        "sk ant".to_owned(),
        "sk-ant\n".to_owned(),
        "sk-ant\t".to_owned(),
        "sk-ant-é".to_owned(),
        "sk\u{7f}".to_owned(),
    ] {
        assert_eq!(Key::new(bad).err(), Some(TerminateError::Key));
    }
}

#[test]
fn the_configs_need_certificates_and_a_matching_key() {
    let (vendor_ca, agent_ca) = cas();
    assert!(client_config(None).is_ok());
    let both = format!("{}{}", vendor_ca.ca_pem, agent_ca.ca_pem);
    assert!(client_config(Some(both.as_bytes())).is_ok());
    for not_certificates in [&b""[..], b"junk", agent_ca.key_pem.as_bytes()] {
        assert!(matches!(
            client_config(Some(not_certificates)),
            Err(TerminateError::Certificates(_))
        ));
    }
    let server = server_config(agent_ca.cert_pem.as_bytes(), agent_ca.key_pem.as_bytes()).unwrap();
    assert_eq!(server.alpn_protocols, vec![b"http/1.1".to_vec()]);
    assert_eq!(
        server_config(agent_ca.cert_pem.as_bytes(), b"").err(),
        Some(TerminateError::PrivateKey)
    );
    assert!(matches!(
        server_config(agent_ca.cert_pem.as_bytes(), vendor_ca.key_pem.as_bytes()),
        Err(TerminateError::Tls(_))
    ));
    assert!(matches!(
        server_config(b"", agent_ca.key_pem.as_bytes()),
        Err(TerminateError::Certificates(_))
    ));
}

#[test]
fn a_model_is_recorded_only_when_it_is_a_plain_name() {
    let of = |body: &str| model(body.as_bytes(), SENTINEL);
    assert_eq!(
        of("{\"model\":\"claude-opus-4@2025.1:x_y\"}").as_deref(),
        Some("claude-opus-4@2025.1:x_y")
    );
    assert_eq!(
        of(&format!("{{\"model\":\"{}\"}}", "m".repeat(128))).map(|m| m.len()),
        Some(128)
    );
    for none in [
        "".to_owned(),
        "[]".to_owned(),
        "{}".to_owned(),
        "{\"model\":7}".to_owned(),
        "{\"model\":\"\"}".to_owned(),
        "{\"model\":\"a b\"}".to_owned(),
        "{\"model\":\"a/b\"}".to_owned(),
        "{\"model\":\"a\",\"model\":\"b\"}".to_owned(),
        format!("{{\"model\":\"{}\"}}", "m".repeat(129)),
        format!("{{\"model\":\"x{SENTINEL}\"}}"),
    ] {
        assert_eq!(of(&none), None, "{none}");
    }
}

/// The heads `Framing` sees in `bytes` fed in pieces of `step` bytes: (malformed, lost after).
fn framed(bytes: &[u8], step: usize) -> (Vec<bool>, bool) {
    let mut framing = Framing::default();
    let mut heads = VecDeque::new();
    let now = Instant::now();
    for piece in bytes.chunks(step) {
        framing.read(piece, now, &mut heads);
    }
    (heads.iter().map(|h| h.malformed).collect(), framing.lost)
}

#[test]
fn framing_follows_heads_and_bodies_and_loses_itself_at_a_malformed_head() {
    let two = [messages(ApiKey), settings(ApiKey), messages(Bearer)].concat();
    let crlf_first = [b"\r\n".to_vec(), two.clone()].concat();
    for step in [1, 3, 7, two.len()] {
        assert_eq!(
            framed(&two, step),
            (vec![false, false, false], false),
            "step {step}"
        );
        assert_eq!(
            framed(&crlf_first, step),
            (vec![false, false, false], false)
        );
    }
    // A body holding what would be a head is skipped as a body.
    let inner = String::from_utf8(settings(ApiKey)).unwrap();
    let hidden = request("POST", "/v1/messages", ApiKey, &inner);
    assert_eq!(framed(&hidden, 1), (vec![false], false));
    // Bare LF in a body is a body's business.
    let lf_body = request("POST", "/v1/messages", ApiKey, "{\n}\n");
    assert_eq!(framed(&lf_body, 1), (vec![false], false));
    for malformed in [
        b"GET / HTTP/1.1\nhost: x\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nhost: x\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nhost: x\rx\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx".to_vec(),
        b"GET / HTTP/1.1\r\ncontent-length: 1x\r\n\r\nx".to_vec(),
        format!(
            "GET / HTTP/1.1\r\ncontent-length: {}1\r\n\r\nx",
            " ".repeat(60)
        )
        .into_bytes(),
    ] {
        let text = String::from_utf8_lossy(&malformed).into_owned();
        assert_eq!(framed(&malformed, 1), (vec![true], true), "{text:?}");
        // After a good head too: that one stands, the bad one is marked.
        let after = [settings(ApiKey), malformed].concat();
        assert_eq!(framed(&after, 5), (vec![false, true], true), "{text:?}");
    }
    // A chunked head is read; nothing after it is followed.
    let chunked = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec();
    assert_eq!(framed(&chunked, 1), (vec![false], true));
}

// ---- A gate case's removals ----

/// Each vendor rule a gate case leaves out lets through exactly what that rule refuses: a path,
/// a foreign credential (forwarded as it came, never swapped), a request past the budget; and
/// leaves the other two in force.
#[tokio::test]
async fn each_vendor_rule_left_out_opens_only_itself() {
    let other_path = request("GET", "/api/event_logging/batch", ApiKey, "");
    let foreign = raw(
        "GET",
        "/api/claude_code/settings",
        &[("host", HOST), ("x-api-key", "sk-ant-api03-foreign")],
        "",
    );
    let budget = Budget {
        requests: 1,
        ..Budget::default()
    };
    for skip in [
        Skipped::default(),
        Skipped {
            path: true,
            ..Skipped::default()
        },
        Skipped {
            credential: true,
            ..Skipped::default()
        },
        Skipped {
            budget: true,
            ..Skipped::default()
        },
    ] {
        let vendor = Vendor::start(always(json_reply("200 OK", "{}"))).await;
        let mut terminator = Terminator {
            skip,
            ..Terminator::new(
                HOST,
                ApiKey,
                SENTINEL.to_owned(),
                Key::new(KEY.to_owned()).unwrap(),
                budget,
                server_config(cas().1.cert_pem.as_bytes(), cas().1.key_pem.as_bytes()).unwrap(),
                client_config(Some(cas().0.ca_pem.as_bytes())).unwrap(),
            )
        };
        terminator.limits = limits();
        let terminator = Arc::new(terminator);
        let mut session = Session::open(&terminator, &vendor).await;
        let mut statuses = Vec::new();
        for sent in [&other_path, &foreign, &settings(ApiKey), &settings(ApiKey)] {
            session.agent.send(sent).await;
            statuses.push(session.agent.response().await.unwrap().status);
        }
        session.finish().await;
        // Refused: a path 403, a credential 401; the first admitted request spends the budget.
        let expected = match skip {
            Skipped { path: true, .. } => [200, 401, 429, 429],
            Skipped {
                credential: true, ..
            } => [403, 200, 429, 429],
            Skipped { budget: true, .. } => [403, 401, 200, 200],
            _ => [403, 401, 200, 429],
        };
        assert_eq!(statuses, expected, "{skip:?}");
        let seen = vendor.seen();
        let keys: Vec<Option<&str>> = seen
            .iter()
            .map(|s| s.values("x-api-key").first().copied())
            .collect();
        let key = Some(KEY);
        let expected_keys = match skip {
            Skipped { path: true, .. } => vec![key],
            // A credential that is not the sentinel arrives as it was sent.
            Skipped {
                credential: true, ..
            } => vec![Some("sk-ant-api03-foreign")],
            Skipped { budget: true, .. } => vec![key, key],
            _ => vec![key],
        };
        assert_eq!(keys, expected_keys, "{skip:?}");
    }
}
