//! `egress`: the agent's only way out is the egress proxy behind its loopback forwarder, and the
//! proxy holds its rules.
//!
//! The gate says what to try in the input dir: the fixture ([`PROBE_FIXTURE`]) names the
//! invocation network's addresses and the names and ports the proxy knows, and [`PROBE_CA`] is the
//! test CA that signed the fake vendor endpoint's certificate. Without the fixture the probe has
//! nothing to try: it reports no check and no breach.
//!
//! - Direct: no TCP connect to the gateway, the proxy or the endpoint, and no UDP to the gateway's
//!   port 53, could leave: judged by the routing decision first, as in `network` (no packet is
//!   ever sent where there is a route).
//! - The positive control (not an operation: a failure is an error, so a broken setup never passes
//!   as "blocked"): through `HTTPS_PROXY`, a CONNECT to the allowed name is answered 200, a real
//!   TLS handshake verifies the endpoint's certificate against the test CA alone, and `GET /`
//!   answers 200 with the endpoint's body.
//! - The proxy's rules: a CONNECT to an unlisted name, to the allowed name on another port or to a
//!   name that resolves to a private address gets no 2xx; a plain `GET http://...` gets no 2xx;
//!   in a tunnel to the allowed name, a ClientHello naming another server, or bytes that are no
//!   TLS at all, get nothing back; and a CONNECT to a name whose answer is only a CNAME to an
//!   unlisted name gets 502 (no answer: a 403 means the proxy asked for the target itself and
//!   found its address).
//!
//! Every connect, read and write has a deadline ([`STEP`] each exchange): the probe never hangs.
//! A breach's evidence names what answered (a status line, a byte count), never the data.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_contract::egress::{ProbeFixture, FORWARD_PORT, PROBE_CA, PROBE_FIXTURE};
use cordon_contract::paths;
use cordon_contract::probe::{ops, Operation};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::network;
use crate::report::Probe;

mod vendor;

/// Each exchange's deadline: the connect, a response head, a handshake, the wait for bytes back.
pub(crate) const STEP: Duration = Duration::from_secs(3);
/// The most an input file may hold.
const MAX_INPUT: u64 = 64 * 1024;
/// The most a response head may hold.
const MAX_HEAD: usize = 8 * 1024;
/// The most of the endpoint's response the positive control reads.
const MAX_RESPONSE: usize = 16 * 1024;
/// The server a ClientHello in a tunnel to the allowed name names instead.
const OTHER_SNI: &str = "other.vendor.test";
/// What the fake vendor endpoint answers `GET /` with.
const VENDOR_BODY: &[u8] = b"fake-vendor ok\n";
/// What the no-TLS check sends into a tunnel.
const PLAIN_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// Read `name` from the input dir `dir`: a regular file, not through a link (O_NOFOLLOW), at most
/// [`MAX_INPUT`] bytes.
pub(crate) fn read_input(dir: &Path, name: &str) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(name))?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_INPUT + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT {
        return Err(io::Error::other(format!("over {MAX_INPUT} bytes")));
    }
    Ok(bytes)
}

/// A name the probe puts in a request line: a DNS name's characters only.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// The fixture in `dir`: None when there is none (nothing to try), an error when it is there but
/// unreadable or malformed.
fn load_fixture(dir: &Path) -> Result<Option<ProbeFixture>, String> {
    let path = dir.join(PROBE_FIXTURE);
    let shown = path.display();
    let bytes = match read_input(dir, PROBE_FIXTURE) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
        Ok(bytes) => bytes,
    };
    let fixture: ProbeFixture =
        serde_json::from_slice(&bytes).map_err(|e| format!("{shown}: {e}"))?;
    for name in [
        &fixture.allowed,
        &fixture.unlisted,
        &fixture.private_name,
        &fixture.cname_name,
    ] {
        if !valid_name(name) {
            return Err(format!("{shown}: a name that is no DNS name"));
        }
    }
    if [fixture.port, fixture.other_port, fixture.endpoint_port].contains(&0) {
        return Err(format!("{shown}: port 0"));
    }
    Ok(Some(fixture))
}

/// The test CA from `dir`, as the only root.
fn load_roots(dir: &Path) -> Result<rustls::RootCertStore, String> {
    let shown = dir.join(PROBE_CA).display().to_string();
    let pem = read_input(dir, PROBE_CA).map_err(|e| format!("{shown}: {e}"))?;
    roots_from_pem(&pem).map_err(|e| format!("{shown}: {e}"))
}

/// The certificates of a PEM as the only roots.
pub(crate) fn roots_from_pem(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("no certificate".into());
    }
    Ok(roots)
}

/// The proxy the agent's environment names: `HTTPS_PROXY` (or `https_proxy`; both, if set, must
/// agree), which must be exactly `http://127.0.0.1:PORT` (the init's forwarder).
fn proxy_addr(upper: Option<&str>, lower: Option<&str>) -> Result<SocketAddr, String> {
    let value = match (upper, lower) {
        (Some(u), Some(l)) if u != l => return Err("HTTPS_PROXY and https_proxy differ".into()),
        (Some(v), _) | (None, Some(v)) => v,
        (None, None) => return Err("HTTPS_PROXY is not set".into()),
    };
    value
        .strip_prefix("http://127.0.0.1:")
        .filter(|port| !port.is_empty() && port.len() <= 5)
        .filter(|port| port.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|port| port.parse::<u16>().ok())
        .filter(|port| *port != 0)
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
        .ok_or_else(|| "HTTPS_PROXY is not http://127.0.0.1:PORT".into())
}

fn proxy_from_env() -> Result<SocketAddr, String> {
    let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    proxy_addr(var("HTTPS_PROXY").as_deref(), var("https_proxy").as_deref())
}

/// A response head's status line: its version (`HTTP/1.0` or `HTTP/1.1`) and its code.
pub(crate) fn status(head: &[u8]) -> Option<(&str, u16)> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line.strip_suffix(b"\r").unwrap_or(line)).ok()?;
    let (version, rest) = line.split_once(' ')?;
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return None;
    }
    let code = rest.get(..3)?;
    if !code.bytes().all(|b| b.is_ascii_digit()) || !(rest.len() == 3 || rest[3..].starts_with(' '))
    {
        return None;
    }
    Some((version, code.parse().ok()?))
}

/// The proxy admitted the request: any 2xx (a client takes any 2xx to a CONNECT as its tunnel).
fn admitted(head: &[u8]) -> bool {
    status(head).is_some_and(|(_, code)| (200..300).contains(&code))
}

/// What the positive control's CONNECT must get: `HTTP/1.1 200`.
fn tunnel_open(head: &[u8]) -> bool {
    status(head) == Some(("HTTP/1.1", 200))
}

/// A head's first line as evidence: printable ASCII only, at most 80 characters.
pub(crate) fn shown(head: &[u8]) -> String {
    let line = head
        .split(|b| *b == b'\r' || *b == b'\n')
        .next()
        .unwrap_or_default();
    line.iter()
        .take(80)
        .map(|b| {
            if b.is_ascii_graphic() || *b == b' ' {
                char::from(*b)
            } else {
                '?'
            }
        })
        .collect()
}

fn refused(why: impl Into<String>) -> io::Error {
    io::Error::other(why.into())
}

/// A TCP connection whose every read has to finish before the current exchange's deadline.
pub(crate) struct Conn {
    sock: TcpStream,
    deadline: Instant,
}

impl Conn {
    pub(crate) fn open(addr: SocketAddr) -> io::Result<Conn> {
        let sock = TcpStream::connect_timeout(&addr, STEP)?;
        sock.set_write_timeout(Some(STEP))?;
        sock.set_nodelay(true)?;
        Ok(Conn {
            sock,
            deadline: Instant::now() + STEP,
        })
    }

    /// The next exchange: a fresh [`STEP`].
    pub(crate) fn step(&mut self) {
        self.deadline = Instant::now() + STEP;
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.sock.set_read_timeout(Some(left))?;
        self.sock.read(buf)
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// Read a response head (through its blank line, not a byte further: a tunnel's bytes follow it).
fn read_head(conn: &mut Conn) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err(refused(format!("a response head over {MAX_HEAD} bytes")));
        }
        match conn.read(&mut byte)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            _ => head.push(byte[0]),
        }
    }
    Ok(head)
}

/// Send `request` to the proxy and read its answer's head.
fn ask(proxy: SocketAddr, request: &[u8]) -> io::Result<(Conn, Vec<u8>)> {
    let mut conn = Conn::open(proxy)?;
    conn.write_all(request)?;
    conn.step();
    let head = read_head(&mut conn)?;
    Ok((conn, head))
}

fn connect_request(authority: &str) -> Vec<u8> {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").into_bytes()
}

/// A CONNECT to `authority` through the proxy: Ok (a breach) when it is admitted.
fn connect_answer(proxy: SocketAddr, authority: &str) -> io::Result<String> {
    let (_, head) = ask(proxy, &connect_request(authority))?;
    if admitted(&head) {
        Ok(format!("answered {}", shown(&head)))
    } else {
        Err(refused(shown(&head)))
    }
}

/// A CONNECT to a name answered only with a CNAME: `None` when it is answered 502 (no answer, the
/// chain rule holding), the breach's evidence for any other answer; an error when none came.
fn cname_answer(proxy: SocketAddr, authority: &str) -> io::Result<Option<String>> {
    let (_, head) = ask(proxy, &connect_request(authority))?;
    Ok(match status(&head) {
        Some((_, 502)) => None,
        _ => Some(format!("answered {}", shown(&head))),
    })
}

/// A plain-HTTP GET in absolute form through the proxy: Ok (a breach) when it is answered 2xx.
/// It names the allowed port, so nothing but the method rule stands in its way.
fn plain_get_answer(proxy: SocketAddr, authority: &str) -> io::Result<String> {
    let request = format!("GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    let (_, head) = ask(proxy, request.as_bytes())?;
    if admitted(&head) {
        Ok(format!("answered {}", shown(&head)))
    } else {
        Err(refused(shown(&head)))
    }
}

/// A tunnel to `authority`, which the proxy must open (`HTTP/1.1 200`): its failure is the
/// setup's, not a protection's.
pub(crate) fn tunnel(proxy: SocketAddr, authority: &str) -> Result<Conn, String> {
    let (conn, head) =
        ask(proxy, &connect_request(authority)).map_err(|e| format!("CONNECT {authority}: {e}"))?;
    if !tunnel_open(&head) {
        return Err(format!("CONNECT {authority} answered {}", shown(&head)));
    }
    Ok(conn)
}

/// Send `payload` into a tunnel: Ok (a breach) when any byte comes back within [`STEP`]; the end
/// of the tunnel, a reset or silence is the protection holding.
fn bytes_back(mut conn: Conn, payload: &[u8]) -> io::Result<String> {
    conn.write_all(payload)?;
    conn.step();
    let mut buf = [0u8; 4096];
    match conn.read(&mut buf)? {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        n => Ok(format!("{n} bytes came back")),
    }
}

pub(crate) fn client_config(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A real ClientHello for `server` (rustls's first flight).
fn client_hello(server: &str) -> Result<Vec<u8>, String> {
    let config = client_config(rustls::RootCertStore::empty())?;
    let name = ServerName::try_from(server.to_owned()).map_err(|e| e.to_string())?;
    let mut client =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut hello = Vec::new();
    client.write_tls(&mut hello).map_err(|e| e.to_string())?;
    Ok(hello)
}

/// Whether a response is the endpoint's answer to `GET /`: 200, with its body.
fn vendor_answered(response: &[u8]) -> bool {
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let body = &response[end + 4..];
    status(response).is_some_and(|(_, code)| code == 200)
        && body.windows(VENDOR_BODY.len()).any(|w| w == VENDOR_BODY)
}

/// The positive control: through the proxy to the allowed name, a TLS handshake that verifies
/// against `roots` alone, and the endpoint's answer to `GET /`.
fn control(
    proxy: SocketAddr,
    fixture: &ProbeFixture,
    roots: rustls::RootCertStore,
) -> Result<(), String> {
    let authority = format!("{}:{}", fixture.allowed, fixture.port);
    let conn = tunnel(proxy, &authority)?;
    let name = ServerName::try_from(fixture.allowed.clone()).map_err(|e| e.to_string())?;
    let client = rustls::ClientConnection::new(Arc::new(client_config(roots)?), name)
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(client, conn);
    tls.sock.step();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        fixture.allowed
    );
    // The first write completes the handshake (verifying the certificate) before it sends.
    tls.write_all(request.as_bytes())
        .and_then(|()| tls.flush())
        .map_err(|e| format!("TLS to {authority} through the proxy: {e}"))?;
    tls.sock.step();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let mut ended = None;
    while !vendor_answered(&response) && response.len() < MAX_RESPONSE {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => {
                ended = Some(e);
                break;
            }
        }
    }
    if vendor_answered(&response) {
        return Ok(());
    }
    if status(&response).is_some() {
        return Err(format!(
            "GET / through the tunnel to {authority} answered {} (not 200 with the endpoint's body)",
            shown(&response)
        ));
    }
    Err(match ended {
        Some(e) => format!("GET / through the tunnel to {authority}: {e}"),
        None => format!(
            "GET / through the tunnel to {authority}: {} bytes, no response",
            response.len()
        ),
    })
}

/// No direct connection to the invocation network could leave: judged as `network` judges its
/// connects (a route is the breach, found without sending anything).
fn direct(p: &mut Probe<'_>, fixture: &ProbeFixture) {
    let tcp = [
        (&ops::EGRESS_DIRECT_GATEWAY, fixture.gateway, 443),
        (&ops::EGRESS_DIRECT_GATEWAY, fixture.gateway, 80),
        (&ops::EGRESS_DIRECT_PROXY, fixture.proxy, FORWARD_PORT),
        (
            &ops::EGRESS_DIRECT_ENDPOINT,
            fixture.endpoint,
            fixture.endpoint_port,
        ),
    ];
    for (op, ip, port) in tcp {
        let addr = SocketAddrV4::new(ip, port);
        p.deny(op, &format!("TCP connect to {addr}"), || {
            network::connect(addr.into())
        });
    }
    let dns = SocketAddrV4::new(fixture.gateway, 53);
    p.deny(
        &ops::EGRESS_UDP_GATEWAY,
        &format!("a route for UDP to {dns}"),
        || network::udp_route(dns.into()),
    );
}

/// Send `payload` into a tunnel to `authority`: bytes back are the breach. A tunnel the proxy does
/// not open is the setup's error (the check proves nothing then).
fn tunnel_check(
    p: &mut Probe<'_>,
    op: &Operation,
    proxy: SocketAddr,
    authority: &str,
    payload: &[u8],
    sent: &str,
) {
    let mut setup = None;
    p.deny_answered(
        op,
        &format!("{sent} in a tunnel to {authority}"),
        || match tunnel(proxy, authority) {
            Ok(conn) => bytes_back(conn, payload),
            Err(e) => {
                setup = Some(e);
                Err(refused("no tunnel"))
            }
        },
    );
    if let Some(e) = setup {
        p.error(format!("{}: {e}", op.action));
    }
}

/// The proxy's rules, each tried on a fresh connection to it.
fn rules(p: &mut Probe<'_>, proxy: SocketAddr, fixture: &ProbeFixture) {
    let connects = [
        (&ops::EGRESS_UNLISTED, &fixture.unlisted, fixture.port),
        (
            &ops::EGRESS_OTHER_PORT,
            &fixture.allowed,
            fixture.other_port,
        ),
        (
            &ops::EGRESS_DENIED_ANSWER,
            &fixture.private_name,
            fixture.port,
        ),
    ];
    for (op, name, port) in connects {
        let authority = format!("{name}:{port}");
        p.deny_answered(op, &format!("CONNECT {authority}"), || {
            connect_answer(proxy, &authority)
        });
    }
    p.deny_answered(
        &ops::EGRESS_PLAIN_GET,
        &format!("GET http://{}/", fixture.allowed),
        || plain_get_answer(proxy, &format!("{}:{}", fixture.allowed, fixture.port)),
    );
    let allowed = format!("{}:{}", fixture.allowed, fixture.port);
    match client_hello(OTHER_SNI) {
        Ok(hello) => tunnel_check(
            p,
            &ops::EGRESS_OTHER_SNI,
            proxy,
            &allowed,
            &hello,
            &format!("a ClientHello for {OTHER_SNI}"),
        ),
        Err(e) => p.error(format!("{}: {e}", ops::EGRESS_OTHER_SNI.action)),
    }
    tunnel_check(
        p,
        &ops::EGRESS_NO_TLS,
        proxy,
        &allowed,
        PLAIN_REQUEST,
        "a plain GET",
    );
    let chained = format!("{}:{}", fixture.cname_name, fixture.port);
    let mut setup = None;
    p.deny_answered(
        &ops::EGRESS_CNAME_CHASE,
        &format!("CONNECT {chained} (only a CNAME in its answer)"),
        || match cname_answer(proxy, &chained) {
            Ok(Some(answered)) => Ok(answered),
            Ok(None) => Err(refused("502")),
            Err(e) => {
                setup = Some(e);
                Err(refused("no answer"))
            }
        },
    );
    if let Some(e) = setup {
        p.error(format!(
            "{}: no answer to CONNECT {chained}: {e}",
            ops::EGRESS_CNAME_CHASE.action
        ));
    }
}

pub fn run(p: &mut Probe<'_>) {
    let dir = Path::new(paths::INPUT_DIR);
    let fixture = match load_fixture(dir) {
        Ok(Some(fixture)) => fixture,
        Ok(None) => return,
        Err(e) => {
            p.error(e);
            return;
        }
    };
    direct(p, &fixture);
    // Without the init there is no forwarder to reach the proxy through: only the direct
    // routes can be judged (the gate's run with the agent on the invocation network).
    if p.ctx.without_init {
        return;
    }
    let proxy = match proxy_from_env() {
        Ok(proxy) => proxy,
        Err(e) => {
            p.error(e);
            return;
        }
    };
    match load_roots(dir).and_then(|roots| control(proxy, &fixture, roots)) {
        Ok(()) => {}
        Err(e) => p.error(format!("positive control: {e}")),
    }
    rules(p, proxy, &fixture);
    vendor::run(p, proxy, dir, &fixture);
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
