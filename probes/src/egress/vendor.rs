//! The egress probe's part for the terminated vendor host (issue 22): the agent holds only a
//! sentinel, and the proxy holds the vendor host's rules. The gate's fake vendor behind it takes
//! only the key, and echoes each credential field it receives as a digest
//! ([`CREDENTIALS_ECHO`]), so the probe can tell where the sentinel was swapped without ever
//! seeing the key.
//!
//! - `vendor-unterminated`: a handshake with the vendor host that verifies against the test CA
//!   (the vendor's own certificate) means the proxy did not terminate it. When it did, the
//!   positive control: the invocation's CA alone verifies the proxy's leaf, and a settings read
//!   with the sentinel is answered 200 by a vendor that takes only the key (the swap happened);
//!   and another allowed host's certificate is not the invocation CA's (it is not terminated).
//! - `vendor-path`, `vendor-credential`: requests the rules refuse (another path, another query,
//!   another `Host`; a foreign credential, a second one, the sentinel in another header, none)
//!   must be answered by the proxy with exactly that id (`x-cordon-refusal`), never by the vendor.
//! - `sentinel-elsewhere`: the sentinel sent to another port of the vendor host, and to another
//!   allowed host, must arrive there exactly as sent (the echo's digest is the sentinel's).
//! - `vendor-over-budget`, last (a spent budget stays spent): one request past the fixture's
//!   request budget must be refused `vendor-budget`.
//!
//! A failed exchange (no tunnel, no handshake where one must succeed, no answer) is an error of
//! the setup, never a protection holding.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use cordon_contract::egress::{ProbeFixture, TerminatedFixture, CREDENTIALS_ECHO, PROBE_CA};
use cordon_contract::probe::{ops, Operation};
use rustls::pki_types::ServerName;
use sha2::Digest;

use super::{client_config, read_input, roots_from_pem, shown, status, tunnel, valid_name};
use crate::report::Probe;

/// The most of a response read.
const MAX_RESPONSE: usize = 64 * 1024;
/// The route every exchange asks for unless it tries another: it takes no body.
const SETTINGS: &str = "/api/claude_code/settings";

/// A response: its status line as evidence, its code, its headers (names lowercase).
struct Answer {
    line: String,
    code: u16,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn parse(bytes: &[u8]) -> Option<Answer> {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
        let (_, code) = status(bytes)?;
        let head = std::str::from_utf8(&bytes[..end]).ok()?;
        let headers = head
            .split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Some(Answer {
            line: shown(bytes),
            code,
            headers,
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The proxy refused it with `id`.
    fn refused(&self, id: &str) -> bool {
        self.header("x-cordon-refusal") == Some(id)
    }

    fn shown(&self) -> String {
        match self.header("x-cordon-refusal") {
            Some(id) => format!("{} (refused {id})", self.line),
            None => format!("{} (from the vendor)", self.line),
        }
    }
}

/// One request in a fresh tunnel to `authority`, over TLS to `server` verified against `roots`.
fn exchange(
    proxy: SocketAddr,
    authority: &str,
    server: &str,
    roots: &rustls::RootCertStore,
    request: &[u8],
) -> Result<Answer, String> {
    let conn = tunnel(proxy, authority)?;
    let name = ServerName::try_from(server.to_owned()).map_err(|e| e.to_string())?;
    let client = rustls::ClientConnection::new(Arc::new(client_config(roots.clone())?), name)
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(client, conn);
    tls.sock.step();
    tls.write_all(request)
        .and_then(|()| tls.flush())
        .map_err(|e| format!("TLS to {authority}: {e}"))?;
    tls.sock.step();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while response.len() < MAX_RESPONSE {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
    Answer::parse(&response)
        .ok_or_else(|| format!("no response through {authority} ({} bytes)", response.len()))
}

/// What the probe knows of the terminated host, and holds.
struct Vendor {
    proxy: SocketAddr,
    fixture: TerminatedFixture,
    /// The credential field as the CLI sends it: its name and value (the sentinel in it).
    field: (String, String),
    sentinel: String,
    /// The test CA (the fake vendor's own certificates), the invocation's CA, and both.
    test_ca: rustls::RootCertStore,
    invocation_ca: rustls::RootCertStore,
    either: rustls::RootCertStore,
}

impl Vendor {
    fn authority(&self) -> String {
        format!("{}:{}", self.fixture.host, self.fixture.port)
    }

    /// `method target` with `headers` (a host, then these), `Connection: close`.
    fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut out = format!("{method} {target} HTTP/1.1\r\n");
        for (name, value) in headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("Connection: close\r\n\r\n");
        out.into_bytes()
    }

    /// A settings read as the CLI makes it, to `host`.
    fn settings(&self, host: &str) -> Vec<u8> {
        let (name, value) = &self.field;
        Vendor::request("GET", SETTINGS, &[("host", host), (name, value)])
    }

    /// Through the vendor host's tunnel, trusting either CA (so a request the proxy did not
    /// terminate still reaches the vendor, which then answers it).
    fn ask(&self, request: &[u8]) -> Result<Answer, String> {
        let host = &self.fixture.host;
        exchange(self.proxy, &self.authority(), host, &self.either, request)
    }
}

/// Try `request` at the vendor host: a breach unless the proxy refused it with `id`; an error
/// when no answer came.
fn refused_with(
    p: &mut Probe<'_>,
    v: &Vendor,
    op: &Operation,
    id: &str,
    what: &str,
    request: &[u8],
) {
    let mut setup = None;
    p.deny_answered(op, what, || match v.ask(request) {
        Ok(answer) if answer.refused(id) => Err(io::Error::other(answer.shown())),
        Ok(answer) => Ok(format!("answered {}", answer.shown())),
        Err(e) => {
            setup = Some(e);
            Err(io::Error::other("no answer"))
        }
    });
    if let Some(e) = setup {
        p.error(format!("{}: {e}", op.action));
    }
}

/// The handshake, the swap and the other host's certificate (`allowed` at `port`).
fn terminated(p: &mut Probe<'_>, v: &Vendor, allowed: &str, port: u16) {
    let authority = v.authority();
    let host = v.fixture.host.clone();
    let settings = v.settings(&host);
    let breached = p.deny_answered(
        &ops::VENDOR_UNTERMINATED,
        &format!("TLS to {authority} verified against the vendor's own CA"),
        || {
            exchange(v.proxy, &authority, &host, &v.test_ca, &settings)
                .map(|answer| format!("the vendor's certificate, answered {}", answer.shown()))
                .map_err(io::Error::other)
        },
    );
    if breached {
        return;
    }
    match exchange(v.proxy, &authority, &host, &v.invocation_ca, &settings) {
        Ok(answer) if answer.code == 200 => {}
        Ok(answer) => p.error(format!(
            "positive control: a settings read with the sentinel answered {} (a vendor that \
             takes only the key answers 200 once the sentinel is swapped)",
            answer.shown()
        )),
        Err(e) => p.error(format!("positive control: the invocation's CA: {e}")),
    }
    let other = v.settings(allowed);
    let at = format!("{allowed}:{port}");
    if let Ok(answer) = exchange(v.proxy, &at, allowed, &v.invocation_ca, &other) {
        p.error(format!(
            "{allowed} is not the terminated host, yet the invocation's CA verified it ({})",
            answer.shown()
        ));
    }
}

/// The vendor host's route rule.
fn paths(p: &mut Probe<'_>, v: &Vendor, allowed: &str) {
    let (name, value) = (v.field.0.as_str(), v.field.1.as_str());
    let host = v.fixture.host.as_str();
    let body = [("host", host), (name, value), ("content-length", "2")];
    let mut telemetry = Vendor::request("POST", "/api/event_logging/batch", &body);
    telemetry.extend_from_slice(b"{}");
    let query = Vendor::request(
        "GET",
        &format!("{SETTINGS}?debug=1"),
        &[("host", host), (name, value)],
    );
    let other_host = v.settings(allowed);
    for (op, what, request) in [
        (
            &ops::VENDOR_OTHER_PATH,
            "POST /api/event_logging/batch",
            telemetry,
        ),
        (
            &ops::VENDOR_OTHER_QUERY,
            "a query the route does not take",
            query,
        ),
        (
            &ops::VENDOR_OTHER_HOST,
            "Host: another allowed host",
            other_host,
        ),
    ] {
        refused_with(p, v, op, "vendor-path", what, &request);
    }
}

/// The credential rule.
fn credentials(p: &mut Probe<'_>, v: &Vendor) {
    let host = v.fixture.host.as_str();
    let (name, value) = (v.field.0.as_str(), v.field.1.as_str());
    let other_field = if name == "x-api-key" {
        ("authorization", format!("Bearer {}", v.sentinel))
    } else {
        ("x-api-key", v.sentinel.clone())
    };
    let foreign = value.replace(&v.sentinel, "sk-ant-api03-not-this-invocations-sentinel");
    let tries = [
        (
            &ops::VENDOR_FOREIGN_CREDENTIAL,
            "a credential that is not the sentinel",
            Vendor::request("GET", SETTINGS, &[("host", host), (name, &foreign)]),
        ),
        (
            &ops::VENDOR_SECOND_CREDENTIAL,
            "the sentinel in both credential headers",
            Vendor::request(
                "GET",
                SETTINGS,
                &[
                    ("host", host),
                    (name, value),
                    (other_field.0, &other_field.1),
                ],
            ),
        ),
        (
            &ops::VENDOR_SENTINEL_ELSEWHERE,
            "the sentinel in another header too",
            Vendor::request(
                "GET",
                SETTINGS,
                &[("host", host), (name, value), ("x-note", &v.sentinel)],
            ),
        ),
        (
            &ops::VENDOR_NO_CREDENTIAL,
            "no credential",
            Vendor::request("GET", SETTINGS, &[("host", host)]),
        ),
    ];
    for (op, what, request) in tries {
        refused_with(p, v, op, "vendor-credential", what, &request);
    }
}

/// The digest the echo must name for the credential field as sent.
fn digest(value: &str) -> String {
    sha2::Sha256::digest(value.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The sentinel sent to another port of the vendor host and to another allowed host (`allowed`
/// at `port`) arrives exactly as sent.
fn host_bound(p: &mut Probe<'_>, v: &Vendor, allowed: &str, port: u16) {
    let host = v.fixture.host.as_str();
    let other_port = format!("{host}:{}", v.fixture.other_port);
    let other_host = format!("{allowed}:{port}");
    let sent = format!("{}={}", v.field.0, digest(&v.field.1));
    let places = [
        (other_port.as_str(), host, &v.either),
        (other_host.as_str(), allowed, &v.test_ca),
    ];
    let mut setup = Vec::new();
    p.deny_answered(
        &ops::SENTINEL_ELSEWHERE,
        "the sentinel sent to another port and another host",
        || {
            let mut changed = Vec::new();
            for (authority, server, roots) in places {
                match exchange(v.proxy, authority, server, roots, &v.settings(server)) {
                    Ok(answer) => match answer.header(CREDENTIALS_ECHO) {
                        Some(echo) if echo == sent => {}
                        Some(_) => changed.push(format!("{authority} received another value")),
                        None => setup.push(format!("{authority}: no echo, {}", answer.shown())),
                    },
                    Err(e) => setup.push(format!("{authority}: {e}")),
                }
            }
            if changed.is_empty() {
                Err(io::Error::other("arrived as sent"))
            } else {
                Ok(changed.join("; "))
            }
        },
    );
    for e in setup {
        p.error(format!("{}: {e}", ops::SENTINEL_ELSEWHERE.action));
    }
}

/// One request past the budget is refused `vendor-budget` (requests the rules refused spent
/// nothing; the ones before spent some of it).
fn budget(p: &mut Probe<'_>, v: &Vendor) {
    let settings = v.settings(&v.fixture.host);
    let tries = v.fixture.max_requests.saturating_add(1);
    let mut setup = None;
    p.deny_answered(
        &ops::VENDOR_OVER_BUDGET,
        &format!(
            "{tries} settings reads, the budget {}",
            v.fixture.max_requests
        ),
        || {
            for sent in 1..=tries {
                match v.ask(&settings) {
                    Ok(answer) if answer.refused("vendor-budget") => {
                        return Err(io::Error::other(format!("refused at {sent}")));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        setup = Some(e);
                        return Err(io::Error::other("no answer"));
                    }
                }
            }
            Ok(format!("all {tries} answered, none refused vendor-budget"))
        },
    );
    if let Some(e) = setup {
        p.error(format!("{}: {e}", ops::VENDOR_OVER_BUDGET.action));
    }
}

/// What the probe needs, from the fixture, the input dir and its environment.
fn load(proxy: SocketAddr, dir: &Path, fixture: TerminatedFixture) -> Result<Vendor, String> {
    if !valid_name(&fixture.host) || fixture.port == 0 || fixture.other_port == 0 {
        return Err("the terminated host's name or ports are not usable".into());
    }
    let sentinel =
        std::env::var(&fixture.variable).map_err(|_| format!("{} is not set", fixture.variable))?;
    let field = match fixture.header.as_str() {
        "x-api-key" => ("x-api-key".to_owned(), sentinel.clone()),
        "authorization" => ("authorization".to_owned(), format!("Bearer {sentinel}")),
        other => return Err(format!("no credential header {other:?}")),
    };
    let pem = |name: &str| read_input(dir, name).map_err(|e| format!("{name}: {e}"));
    let (test_pem, invocation_pem) = (pem(PROBE_CA)?, pem(&fixture.ca_file)?);
    let roots = |bytes: &[u8]| roots_from_pem(bytes);
    Ok(Vendor {
        proxy,
        field,
        sentinel,
        test_ca: roots(&test_pem)?,
        invocation_ca: roots(&invocation_pem)?,
        either: roots(&[test_pem, invocation_pem].concat())?,
        fixture,
    })
}

/// Every vendor check, the budget last.
pub(crate) fn run(p: &mut Probe<'_>, proxy: SocketAddr, dir: &Path, fixture: &ProbeFixture) {
    let Some(terminated_fixture) = fixture.terminated.clone() else {
        return;
    };
    let v = match load(proxy, dir, terminated_fixture) {
        Ok(v) => v,
        Err(e) => {
            p.error(format!("vendor: {e}"));
            return;
        }
    };
    let (allowed, port) = (fixture.allowed.as_str(), fixture.port);
    terminated(p, &v, allowed, port);
    paths(p, &v, allowed);
    credentials(p, &v);
    host_bound(p, &v, allowed, port);
    budget(p, &v);
}
