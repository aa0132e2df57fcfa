//! The endpoint on 127.0.0.1 with a freshly generated CA, driven by rustls clients: the handshake,
//! the SNI record, a name the certificate does not cover, keep-alive, the throughput routes, and
//! a malformed request.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::ca::{self, TestCa};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

const NAME: &str = "api.vendor.test";
const MIB: usize = 1024 * 1024;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn identity(ca: &TestCa) -> Identity {
    Identity {
        cert_pem: ca.cert_pem.clone(),
        key_pem: ca.key_pem.clone(),
    }
}

async fn endpoint() -> (TestCa, Server) {
    let ca = ca::generate(&[NAME, "127.0.0.1"]).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, &identity(&ca)).unwrap();
    (ca, server)
}

fn roots(ca_pem: &str) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(roots)
}

/// A client that trusts only the test CA.
fn client_config(ca_pem: &str) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca_pem))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    name: &str,
) -> std::io::Result<BufReader<Tls>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    Ok(BufReader::new(tls))
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Read one response: the head line by line, then exactly Content-Length bytes (so the next
/// response on a keep-alive connection is left unread).
async fn read_response<S: AsyncRead + Unpin>(io: &mut BufReader<S>) -> Response {
    let mut line = String::new();
    io.read_line(&mut line).await.unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        io.read_line(&mut line).await.unwrap();
        let line = line.trim_end_matches("\r\n");
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let length: usize = response.header("content-length").unwrap().parse().unwrap();
    response.body = vec![0; length];
    io.read_exact(&mut response.body).await.unwrap();
    response
}

async fn get<S: AsyncRead + AsyncWrite + Unpin>(io: &mut BufReader<S>, path: &str) -> Response {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {NAME}\r\n\r\n");
    io.get_mut().write_all(request.as_bytes()).await.unwrap();
    io.get_mut().flush().await.unwrap();
    read_response(io).await
}

/// Read until the peer closes; what it sent.
async fn read_to_close<S: AsyncRead + Unpin>(io: &mut S) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = timeout(Duration::from_secs(5), io.read_to_end(&mut out))
        .await
        .unwrap();
    out
}

#[tokio::test]
async fn t0_a_client_trusting_the_ca_gets_ok_and_its_sni_is_recorded() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    assert_eq!(
        io.get_ref().get_ref().1.alpn_protocol(),
        Some(&b"http/1.1"[..])
    );
    let response = get(&mut io, "/").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"fake-vendor ok\n");
    assert_eq!(response.header("connection"), Some("keep-alive"));
    assert_eq!(
        server.seen(),
        vec![Seen {
            sni: Some(NAME.to_owned()),
            method: "GET".to_owned(),
            path: "/".to_owned(),
        }]
    );
}

#[tokio::test]
async fn t1_an_unknown_path_is_ok_and_recorded_with_its_query() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    let response = get(&mut io, "/v1/messages?beta=true").await;
    assert_eq!(
        (response.status, &response.body[..]),
        (200, &b"fake-vendor ok\n"[..])
    );
    assert_eq!(server.seen()[0].path, "/v1/messages?beta=true");
}

/// Records every rejection of the real verifier, then accepts anyway: a client that sees what a
/// verifying client would have refused, and still completes the exchange.
#[derive(Debug)]
struct Recording {
    inner: Arc<WebPkiServerVerifier>,
    refused: std::sync::Mutex<Vec<rustls::Error>>,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Err(e) = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            self.refused.lock().unwrap().push(e);
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[tokio::test]
async fn t2_another_sni_gets_an_answer_but_fails_verification_for_that_name() {
    let (ca, server) = endpoint().await;
    // A verifying client refuses the handshake: the certificate does not cover the name.
    let refused = connect(
        server.addr(),
        client_config(&ca.ca_pem),
        "other.vendor.test",
    )
    .await;
    let error = refused.unwrap_err();
    let rustls_error = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .unwrap();
    assert!(
        matches!(
            rustls_error,
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{rustls_error:?}"
    );

    // One that goes on regardless is answered, under the SNI it sent, with the same certificate.
    let verifier = Arc::new(Recording {
        inner: WebPkiServerVerifier::builder_with_provider(roots(&ca.ca_pem), provider())
            .build()
            .unwrap(),
        refused: std::sync::Mutex::new(Vec::new()),
    });
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let mut io = connect(server.addr(), Arc::new(config), "other.vendor.test")
        .await
        .unwrap();
    let response = get(&mut io, "/").await;
    assert_eq!(
        (response.status, &response.body[..]),
        (200, &b"fake-vendor ok\n"[..])
    );
    let refusals = verifier.refused.lock().unwrap().clone();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(matches!(
        refusals[0],
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    ));
    assert_eq!(
        server
            .seen()
            .into_iter()
            .map(|seen| seen.sni)
            .collect::<Vec<_>>(),
        vec![Some("other.vendor.test".to_owned())]
    );
}

#[tokio::test]
async fn t3_a_client_by_ip_address_sends_no_sni_and_verifies() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), "127.0.0.1")
        .await
        .unwrap();
    assert_eq!(get(&mut io, "/").await.status, 200);
    assert_eq!(server.seen()[0].sni, None);
}

#[tokio::test]
async fn t4_ping_repeats_on_one_keep_alive_connection() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    for _ in 0..3 {
        let response = get(&mut io, "/ping").await;
        assert_eq!((response.status, &response.body[..]), (200, &b"pong"[..]));
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.path == "/ping" && s.method == "GET"));
}

#[tokio::test]
async fn t5_sink_counts_an_upload_and_source_sends_a_download() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    let upload = 3 * MIB + 17;
    let head = format!("POST /sink HTTP/1.1\r\nHost: {NAME}\r\nContent-Length: {upload}\r\n\r\n");
    io.get_mut().write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'u'; 64 * 1024];
    let mut left = upload;
    while left > 0 {
        let n = left.min(chunk.len());
        io.get_mut().write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    io.get_mut().flush().await.unwrap();
    let response = read_response(&mut io).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, upload.to_string().as_bytes());

    // The same connection, then: the body was read to its end and no further.
    let download = 4 * MIB + 1;
    let response = get(&mut io, &format!("/source?bytes={download}")).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body.len(), download);
    assert!(response.body.iter().all(|&b| b == b'x'));
    assert_eq!(get(&mut io, "/ping").await.body, b"pong");
    let methods: Vec<_> = server
        .seen()
        .into_iter()
        .map(|s| (s.method, s.path))
        .collect();
    assert_eq!(
        methods,
        vec![
            ("POST".to_owned(), "/sink".to_owned()),
            ("GET".to_owned(), format!("/source?bytes={download}")),
            ("GET".to_owned(), "/ping".to_owned()),
        ]
    );
}

#[tokio::test]
async fn t6_a_malformed_request_gets_400_and_the_connection_closes() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    io.get_mut()
        .write_all(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
        .await
        .unwrap();
    io.get_mut().flush().await.unwrap();
    let response = read_response(&mut io).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.header("connection"), Some("close"));
    assert_eq!(read_to_close(&mut io).await, b"");
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn t7_plain_serves_the_same_http_without_tls() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start_plain(listener).unwrap();
    let mut io = BufReader::new(TcpStream::connect(server.addr()).await.unwrap());
    assert_eq!(get(&mut io, "/").await.body, b"fake-vendor ok\n");
    assert_eq!(get(&mut io, "/ping").await.body, b"pong");
    assert_eq!(get(&mut io, "/source?bytes=5").await.body, b"xxxxx");
    assert_eq!(server.seen()[0].sni, None);
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn t8_a_bad_identity_is_refused() {
    let ca = ca::generate(&[NAME]).unwrap();
    let other = ca::generate(&[NAME]).unwrap();
    let listener = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let no_cert = Identity {
        cert_pem: String::new(),
        key_pem: ca.key_pem.clone(),
    };
    assert!(matches!(
        start(listener().await, &no_cert),
        Err(Error::Identity(_))
    ));
    let no_key = Identity {
        cert_pem: ca.cert_pem.clone(),
        key_pem: "not a key".to_owned(),
    };
    assert!(matches!(
        start(listener().await, &no_key),
        Err(Error::Identity(_))
    ));
    // Another certificate's key.
    let mismatched = Identity {
        cert_pem: ca.cert_pem.clone(),
        key_pem: other.key_pem.clone(),
    };
    assert!(matches!(
        start(listener().await, &mismatched),
        Err(Error::Tls(_))
    ));
}

#[tokio::test]
async fn t9_dropping_the_server_closes_its_connections() {
    let (ca, server) = endpoint().await;
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    assert_eq!(get(&mut io, "/ping").await.status, 200);
    let addr = server.addr();
    drop(server);
    // The open connection ends (its task is gone), and nobody accepts any more.
    let _ = read_to_close(&mut io).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[test]
fn t10_start_outside_a_runtime_is_an_error_not_a_panic() {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    // A tokio listener needs a runtime to be made; one made then left has none current.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime.block_on(async { TcpListener::from_std(std_listener).unwrap() });
    assert!(matches!(start_plain(listener), Err(Error::NoRuntime)));
}

/// Given the digest of its key, the endpoint answers an API request (`/v1/...`, `/api/...`) only
/// when its one credential field holds that key, as `x-api-key` or `authorization: Bearer`; every
/// other credential (none, another key, a sentinel, two fields, the key in the wrong shape) is
/// answered 401 in the vendor's shape and the connection closes. A test route takes anything.
#[tokio::test]
async fn with_a_key_the_api_takes_that_key_alone() {
    const KEY: &str = "sk-the-real-test-key";
    let ca = ca::generate(&[NAME]).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let auth = Auth::from_hex(&Auth::hex_of(KEY)).unwrap();
    let server = start_with(listener, &identity(&ca), Some(auth)).unwrap();
    let status = |headers: String| {
        let config = client_config(&ca.ca_pem);
        let addr = server.addr();
        async move {
            let mut io = connect(addr, config, NAME).await.unwrap();
            let request =
                format!("GET /api/claude_code/settings HTTP/1.1\r\nHost: {NAME}\r\n{headers}\r\n");
            io.get_mut().write_all(request.as_bytes()).await.unwrap();
            read_response(&mut io).await
        }
    };
    for good in [
        format!("x-api-key: {KEY}\r\n"),
        format!("Authorization: Bearer {KEY}\r\n"),
    ] {
        assert_eq!(status(good.clone()).await.status, 200, "{good}");
    }
    for bad in [
        String::new(),
        "x-api-key: sk-ant-api03-sentinelAA\r\n".to_owned(),
        format!("x-api-key: {KEY}x\r\n"),
        format!("Authorization: {KEY}\r\n"),
        format!("Authorization: Basic {KEY}\r\n"),
        format!("x-api-key: {KEY}\r\nx-api-key: {KEY}\r\n"),
        format!("x-api-key: {KEY}\r\nAuthorization: Bearer {KEY}\r\n"),
    ] {
        let response = status(bad.clone()).await;
        assert_eq!(response.status, 401, "{bad}");
        let body = String::from_utf8_lossy(&response.body).into_owned();
        assert!(body.contains("authentication_error"), "{body}");
    }
    // Not the API: no credential needed.
    let mut io = connect(server.addr(), client_config(&ca.ca_pem), NAME)
        .await
        .unwrap();
    assert_eq!(get(&mut io, "/ping").await.status, 200);
    // A digest that is not 64 hex digits is no key.
    for bad in ["", "00", &"g".repeat(64), &"0".repeat(63)] {
        assert!(Auth::from_hex(bad).is_none(), "{bad}");
    }
}
