//! The vendor's HTTPS endpoint: one certificate for every connection (whatever the SNI, so a
//! client that asks for another name still gets a handshake, and fails its own verification), the
//! bounded HTTP/1.1 of `http` behind it (with the fake Messages API of `crate::messages` on
//! `POST /v1/messages`), and a record of every request. The same handler serves plain TCP for a
//! benchmark baseline without TLS.

mod head;
mod http;

use crate::messages::MessagesRecord;
use crate::{echo, lock, Error};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;

/// Connections served at once; more are closed on accept (a fixture, not a load balancer).
const MAX_CONNECTIONS: usize = 512;

/// The server's certificate chain and key, PEM.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The leaf first, then any intermediates.
    pub cert_pem: String,
    /// PKCS#8, PKCS#1 or SEC1.
    pub key_pem: String,
}

/// One request the endpoint answered (for tests to assert on).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Seen {
    /// The client's SNI; `None` over plain TCP or when the client sent none (an IP address).
    pub sni: Option<String>,
    pub method: String,
    /// The request target as sent: path and query (`/source?bytes=10`).
    pub path: String,
}

/// A running endpoint. Dropping it stops the accept loop and every connection.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    log: Arc<Log>,
    task: JoinHandle<()>,
}

/// What every connection records into.
#[derive(Debug, Default)]
struct Log {
    seen: Mutex<Vec<Seen>>,
    messages: Mutex<Vec<MessagesRecord>>,
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request answered so far, in the order their heads arrived.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.log.seen).clone()
    }

    /// Every Messages API request answered so far, in the order they were answered (a record is
    /// kept before its answer is sent).
    pub fn messages(&self) -> Vec<MessagesRecord> {
        lock(&self.log.messages).clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serve TLS on `listener` in the background (a tokio task) until the Server is dropped.
pub fn start(listener: TcpListener, identity: &Identity) -> Result<Server, Error> {
    start_with(listener, identity, None)
}

/// [`start`], answering 401 to an API request (`/v1/...`, `/api/...`) unless its one credential
/// (`x-api-key: KEY` or `authorization: Bearer KEY`) is the key `auth` holds the digest of.
pub fn start_with(
    listener: TcpListener,
    identity: &Identity,
    auth: Option<Auth>,
) -> Result<Server, Error> {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(identity)?));
    spawn(listener, Some(acceptor), auth)
}

/// Serve the same HTTP over plain TCP on `listener` (the benchmark's baseline), until dropped.
pub fn start_plain(listener: TcpListener) -> Result<Server, Error> {
    spawn(listener, None, None)
}

/// The key an endpoint requires, as its SHA-256 only: the endpoint's configuration (its
/// container's environment) never holds the key itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auth {
    pub key_sha256: [u8; 32],
}

impl Auth {
    /// From the digest in lowercase hex.
    pub fn from_hex(hex: &str) -> Option<Auth> {
        if hex.len() != 64 {
            return None;
        }
        let mut key_sha256 = [0u8; 32];
        for (at, byte) in key_sha256.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(at * 2..at * 2 + 2)?, 16).ok()?;
        }
        Some(Auth { key_sha256 })
    }

    /// The digest of `key`, in lowercase hex (what the endpoint is given).
    pub fn hex_of(key: &str) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Exactly one credential field, holding the key (`x-api-key: KEY`, `authorization: Bearer
    /// KEY`).
    fn admits(&self, credentials: &[(String, Vec<u8>)]) -> bool {
        use sha2::Digest;
        let [(name, value)] = credentials else {
            return false;
        };
        let key = match name.as_str() {
            "x-api-key" => value.as_slice(),
            "authorization" => match value.strip_prefix(b"Bearer ") {
                Some(key) => key,
                None => return false,
            },
            _ => return false,
        };
        sha2::Sha256::digest(key).as_slice() == self.key_sha256
    }
}

/// rustls on ring (explicitly, whatever other crates in the same build enable), TLS 1.2 and 1.3,
/// ALPN `http/1.1` only.
fn server_config(identity: &Identity) -> Result<rustls::ServerConfig, Error> {
    let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Identity(format!("the certificate PEM: {e}")))?;
    if chain.is_empty() {
        return Err(Error::Identity("no certificate in the PEM".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
        .map_err(|e| Error::Identity(format!("the key PEM: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| Error::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn spawn(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    auth: Option<Auth>,
) -> Result<Server, Error> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let addr = listener.local_addr()?;
    let log = Arc::new(Log::default());
    let task = runtime.spawn(accept_loop(listener, acceptor, log.clone(), auth));
    Ok(Server { addr, log, task })
}

/// Accept until aborted. The connections live in this task's JoinSet, so aborting it (dropping
/// the Server) drops them all.
async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    log: Arc<Log>,
    auth: Option<Auth>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => {
                    if connections.len() >= MAX_CONNECTIONS {
                        continue;
                    }
                    connections.spawn(connection(tcp, acceptor.clone(), log.clone(), auth));
                }
                // Out of descriptors, or a connection reset before accept: wait a little, go on.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn connection(
    tcp: TcpStream,
    acceptor: Option<TlsAcceptor>,
    log: Arc<Log>,
    auth: Option<Auth>,
) {
    // Round-trip measurements (`/ping`) must not wait on Nagle's algorithm.
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = acceptor else {
        http::serve(
            tcp,
            &Recorder {
                sni: None,
                log,
                auth,
            },
        )
        .await;
        return;
    };
    let Ok(Ok(stream)) = timeout(http::IO_BOUND, acceptor.accept(tcp)).await else {
        return;
    };
    let sni = stream.get_ref().1.server_name().map(str::to_owned);
    http::serve(stream, &Recorder { sni, log, auth }).await;
}

/// What `http::serve` reports to, for one connection: each request is recorded, and echoed when
/// running as the binary.
#[derive(Debug)]
struct Recorder {
    sni: Option<String>,
    log: Arc<Log>,
    auth: Option<Auth>,
}

impl http::Observer for Recorder {
    fn request(&self, method: &str, target: &str) {
        let request = Seen {
            sni: self.sni.clone(),
            method: method.to_owned(),
            path: target.to_owned(),
        };
        echo("tls_request", &request);
        lock(&self.log.seen).push(request);
    }

    fn messages(&self, record: MessagesRecord) {
        echo("messages_request", &record);
        lock(&self.log.messages).push(record);
    }

    fn authorized(&self, credentials: &[(String, Vec<u8>)]) -> bool {
        let admitted = self.auth.is_none_or(|auth| auth.admits(credentials));
        if !admitted {
            // Which fields came, never their values.
            let names: Vec<&str> = credentials.iter().map(|(n, _)| n.as_str()).collect();
            echo("unauthorized", &names);
        }
        admitted
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
