//! The egress probe's parsing, and its exchanges against scripted proxies on loopback (a real TLS
//! endpoint behind the positive control's).

use super::*;
use std::net::TcpListener;
use std::path::PathBuf;

use rustls::pki_types::PrivateKeyDer;

const ALLOWED: &str = "api.vendor.test";

fn fixture() -> ProbeFixture {
    ProbeFixture {
        allowed: ALLOWED.into(),
        port: 443,
        unlisted: "unlisted.vendor.test".into(),
        other_port: 8443,
        private_name: "private.vendor.test".into(),
        cname_name: "cname.vendor.test".into(),
        gateway: [172, 30, 0, 1].into(),
        proxy: [172, 30, 0, 2].into(),
        endpoint: [172, 30, 0, 3].into(),
        endpoint_port: 443,
        terminated: None,
    }
}

/// A fresh, empty directory for one test, removed when the test ends however it ends.
struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> TestDir {
    let dir = std::env::temp_dir().join(format!("cordon-egress-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TestDir(dir)
}

// --- HTTPS_PROXY ---

#[test]
fn the_proxy_is_only_the_loopback_forwarder() {
    let addr = |v: &str| proxy_addr(Some(v), None);
    assert_eq!(
        addr("http://127.0.0.1:3128"),
        Ok(SocketAddr::from(([127, 0, 0, 1], 3128)))
    );
    assert_eq!(
        addr(&cordon_contract::egress::proxy_url(FORWARD_PORT)),
        Ok(SocketAddr::from(([127, 0, 0, 1], FORWARD_PORT)))
    );
    for refused in [
        "",
        "127.0.0.1:3128",
        "https://127.0.0.1:3128",
        "HTTP://127.0.0.1:3128",
        "http://127.0.0.1:3128/",
        "http://127.0.0.1",
        "http://127.0.0.1:",
        "http://127.0.0.1:0",
        "http://127.0.0.1:65536",
        "http://127.0.0.1:+3128",
        "http://127.0.0.1:03128x",
        "http://127.0.0.1:003128",
        "http://localhost:3128",
        "http://127.0.0.2:3128",
        "http://10.0.0.1:3128",
        "http://[::1]:3128",
        "http://user:pw@127.0.0.1:3128",
        "http://127.0.0.1:3128@10.0.0.1:80",
        " http://127.0.0.1:3128",
        "http://127.0.0.1:3128\n",
    ] {
        assert!(addr(refused).is_err(), "{refused:?} was accepted");
    }
}

#[test]
fn either_spelling_names_the_proxy_and_both_must_agree() {
    let url = "http://127.0.0.1:3128";
    let expected = Ok(SocketAddr::from(([127, 0, 0, 1], 3128)));
    assert_eq!(proxy_addr(None, Some(url)), expected);
    assert_eq!(proxy_addr(Some(url), Some(url)), expected);
    assert!(proxy_addr(Some(url), Some("http://127.0.0.1:3129")).is_err());
    assert!(proxy_addr(None, None).is_err());
}

// --- status lines ---

#[test]
fn status_lines_are_parsed_strictly() {
    type Case = (&'static [u8], Option<(&'static str, u16)>);
    let cases: &[Case] = &[
        (
            b"HTTP/1.1 200 Connection Established\r\n\r\n",
            Some(("HTTP/1.1", 200)),
        ),
        (b"HTTP/1.0 200 OK\r\n\r\n", Some(("HTTP/1.0", 200))),
        (
            b"HTTP/1.1 403 Forbidden\r\nX: y\r\n\r\n",
            Some(("HTTP/1.1", 403)),
        ),
        (b"HTTP/1.1 204\r\n\r\n", Some(("HTTP/1.1", 204))),
        (b"HTTP/1.1 200 OK\n\n", Some(("HTTP/1.1", 200))),
        (b"HTTP/1.1 2000 OK\r\n\r\n", None),
        (b"HTTP/1.1 20 OK\r\n\r\n", None),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", None),
        (b"HTTP/1.1  200 OK\r\n\r\n", None),
        (b"HTTP/2 200\r\n\r\n", None),
        (b"http/1.1 200 OK\r\n\r\n", None),
        (b"200 OK\r\n\r\n", None),
        (b"SSH-2.0-OpenSSH\r\n", None),
        (b"\x16\x03\x01\x00\x05hello", None),
        (b"", None),
    ];
    for (head, expected) in cases {
        assert_eq!(
            status(head),
            *expected,
            "{:?}",
            String::from_utf8_lossy(head)
        );
    }
}

#[test]
fn any_2xx_is_admitted_and_only_http11_200_opens_the_control_tunnel() {
    assert!(admitted(b"HTTP/1.1 200 Connection Established\r\n\r\n"));
    assert!(admitted(b"HTTP/1.0 204 No Content\r\n\r\n"));
    assert!(admitted(b"HTTP/1.1 299 x\r\n\r\n"));
    assert!(!admitted(b"HTTP/1.1 199 x\r\n\r\n"));
    assert!(!admitted(b"HTTP/1.1 300 x\r\n\r\n"));
    assert!(!admitted(b"HTTP/1.1 403 Forbidden\r\n\r\n"));
    assert!(!admitted(b"garbage 200\r\n\r\n"));
    assert!(tunnel_open(b"HTTP/1.1 200 Connection Established\r\n\r\n"));
    assert!(!tunnel_open(b"HTTP/1.0 200 OK\r\n\r\n"));
    assert!(!tunnel_open(b"HTTP/1.1 201 Created\r\n\r\n"));
}

#[test]
fn evidence_shows_the_status_line_only_printable_and_bounded() {
    assert_eq!(
        shown(b"HTTP/1.1 200 Connection Established\r\nSecret: x\r\n\r\n"),
        "HTTP/1.1 200 Connection Established"
    );
    assert_eq!(
        shown(b"HTTP/1.1 200 \x1b[31m\xff\r\n"),
        "HTTP/1.1 200 ?[31m?"
    );
    assert_eq!(shown(&[b'a'; 500]).len(), 80);
    assert_eq!(shown(b""), "");
}

#[test]
fn the_endpoint_answer_needs_200_and_its_body() {
    assert!(vendor_answered(
        b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nfake-vendor ok\n"
    ));
    assert!(vendor_answered(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nf\r\nfake-vendor ok\n\r\n0\r\n\r\n"
    ));
    assert!(!vendor_answered(
        b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nfake-vendor"
    ));
    assert!(!vendor_answered(
        b"HTTP/1.1 404 Not Found\r\n\r\nfake-vendor ok\n"
    ));
    // The body only: a header that carries the text is no answer.
    assert!(!vendor_answered(
        b"HTTP/1.1 200 OK\r\nX: fake-vendor ok\n\r\n\r\n"
    ));
    assert!(!vendor_answered(b"fake-vendor ok\n"));
}

// --- the fixture and the CA ---

#[test]
fn without_a_fixture_nothing_is_tried() {
    let dir = dir("absent");
    assert_eq!(load_fixture(&dir), Ok(None));
    // No input dir at all: the same.
    assert_eq!(load_fixture(&dir.join("missing")), Ok(None));
}

#[test]
fn a_fixture_is_read_and_checked() {
    let dir = dir("fixture");
    let path = dir.join(PROBE_FIXTURE);
    let json = serde_json::json!({
        "allowed": ALLOWED, "port": 443, "unlisted": "unlisted.vendor.test", "other_port": 8443,
        "private_name": "private.vendor.test", "cname_name": "cname.vendor.test",
        "gateway": "172.30.0.1", "proxy": "172.30.0.2", "endpoint": "172.30.0.3",
        "endpoint_port": 443,
    });
    std::fs::write(&path, json.to_string()).unwrap();
    assert_eq!(load_fixture(&dir), Ok(Some(fixture())));

    let mut unknown = json.clone();
    unknown["extra"] = serde_json::json!(1);
    let mut missing = json.clone();
    missing.as_object_mut().unwrap().remove("gateway");
    let mut injected = json.clone();
    injected["allowed"] = serde_json::json!("api.vendor.test:443 HTTP/1.1\r\nX: y");
    let mut empty = json.clone();
    empty["unlisted"] = serde_json::json!("");
    let mut injected_cname = json.clone();
    injected_cname["cname_name"] = serde_json::json!("a b");
    let mut no_cname = json.clone();
    no_cname.as_object_mut().unwrap().remove("cname_name");
    let mut zero = json.clone();
    zero["other_port"] = serde_json::json!(0);
    let mut bad_address = json.clone();
    bad_address["endpoint"] = serde_json::json!("endpoint");
    for bad in [
        unknown,
        missing,
        injected,
        empty,
        zero,
        bad_address,
        injected_cname,
        no_cname,
    ] {
        std::fs::write(&path, bad.to_string()).unwrap();
        assert!(load_fixture(&dir).is_err(), "{bad} was accepted");
    }
    for bad in [&b"{"[..], b"", b"[]", b"\xff\xfe"] {
        std::fs::write(&path, bad).unwrap();
        assert!(load_fixture(&dir).is_err());
    }
}

#[test]
fn a_fixture_through_a_link_a_directory_or_too_big_is_an_error() {
    let dir = dir("fixture-kinds");
    let path = dir.join(PROBE_FIXTURE);
    let target = dir.join("real.json");
    std::fs::write(&target, "{}").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let linked = load_fixture(&dir).unwrap_err();
    assert!(linked.contains(PROBE_FIXTURE), "{linked}");
    // A dangling link is a link, not an absent fixture.
    std::fs::remove_file(&target).unwrap();
    assert!(load_fixture(&dir).is_err());
    std::fs::remove_file(&path).unwrap();

    std::fs::create_dir(&path).unwrap();
    assert!(load_fixture(&dir).is_err());
    std::fs::remove_dir(&path).unwrap();

    std::fs::write(&path, vec![b' '; usize::try_from(MAX_INPUT).unwrap() + 1]).unwrap();
    assert!(load_fixture(&dir).unwrap_err().contains("over"));
}

/// A throwaway CA and a leaf for `names` signed by it, as PEM: (ca, leaf, leaf key).
fn test_ca(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let leaf = CertificateParams::new(names)
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}

#[test]
fn the_ca_is_the_only_root() {
    let dir = dir("ca");
    assert!(load_roots(&dir).is_err(), "an absent CA is an error");
    let path = dir.join(PROBE_CA);
    std::fs::write(&path, "not a certificate\n").unwrap();
    assert!(load_roots(&dir).unwrap_err().contains("no certificate"));
    let (ca, _, _) = test_ca(&[ALLOWED]);
    std::fs::write(&path, &ca).unwrap();
    assert_eq!(load_roots(&dir).unwrap().len(), 1);
}

// --- exchanges with scripted proxies ---

/// A one-connection proxy on loopback that runs `script` on the connection it accepts.
fn serve(script: impl FnOnce(TcpStream) + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            stream.set_read_timeout(Some(STEP * 3)).unwrap();
            script(stream);
        }
    });
    addr
}

/// Read a request head (through its blank line) from the probe.
fn request_head(stream: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// A proxy that checks the request head, answers `answer`, then runs `then`.
fn proxy(
    expected: String,
    answer: &'static [u8],
    then: impl FnOnce(TcpStream) + Send + 'static,
) -> SocketAddr {
    serve(move |mut stream| {
        assert_eq!(request_head(&mut stream), expected);
        stream.write_all(answer).unwrap();
        then(stream);
    })
}

fn connect_head(authority: &str) -> String {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n")
}

fn hold(stream: TcpStream) {
    // Keep the connection open and silent past the probe's deadline.
    std::thread::sleep(STEP + Duration::from_secs(1));
    drop(stream);
}

#[test]
fn an_admitted_connect_is_the_breach_with_its_status_line() {
    let target = "unlisted.vendor.test:443";
    let admitted = proxy(
        connect_head(target),
        b"HTTP/1.1 200 Connection Established\r\n\r\n",
        hold,
    );
    assert_eq!(
        connect_answer(admitted, target).unwrap(),
        "answered HTTP/1.1 200 Connection Established"
    );
    let refused = proxy(
        connect_head(target),
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        drop,
    );
    assert!(connect_answer(refused, target).is_err());
    let closed = proxy(connect_head(target), b"", drop);
    assert!(connect_answer(closed, target).is_err());
    let garbage = proxy(connect_head(target), b"HTTP/1.1 200\xff\r\n\r\n", drop);
    assert!(connect_answer(garbage, target).is_err());
    let endless = proxy(connect_head(target), &[b'x'; MAX_HEAD + 10], hold);
    assert!(connect_answer(endless, target).is_err());
}

#[test]
fn a_silent_proxy_never_hangs_the_probe() {
    let target = "unlisted.vendor.test:443";
    let silent = serve(|mut stream| {
        request_head(&mut stream);
        hold(stream);
    });
    let start = Instant::now();
    assert!(connect_answer(silent, target).is_err());
    let took = start.elapsed();
    assert!(
        took >= STEP && took < STEP + Duration::from_secs(1),
        "{took:?}"
    );

    // A proxy that drips its head a byte at a time: the deadline is the exchange's, not a read's.
    let drip = serve(|mut stream| {
        request_head(&mut stream);
        for _ in 0..40 {
            if stream.write_all(b"H").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let start = Instant::now();
    assert!(connect_answer(drip, target).is_err());
    assert!(start.elapsed() < STEP + Duration::from_secs(1));
}

#[test]
fn nothing_listening_is_no_breach() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    assert!(connect_answer(addr, "x.test:443").is_err());
    assert!(plain_get_answer(addr, ALLOWED).is_err());
    assert!(tunnel(addr, "x.test:443").is_err());
}

#[test]
fn a_cname_answer_other_than_502_is_the_breach_with_its_status_line() {
    let target = "cname.vendor.test:443";
    let no_answer = proxy(
        connect_head(target),
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
        drop,
    );
    assert_eq!(cname_answer(no_answer, target).unwrap(), None);
    for (answer, shown) in [
        (
            &b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"[..],
            "answered HTTP/1.1 403 Forbidden",
        ),
        (
            b"HTTP/1.1 200 Connection Established\r\n\r\n",
            "answered HTTP/1.1 200 Connection Established",
        ),
        (
            b"HTTP/1.1 503 Service Unavailable\r\n\r\n",
            "answered HTTP/1.1 503 Service Unavailable",
        ),
        (b"HTTP/1.1 5020 Bad\r\n\r\n", "answered HTTP/1.1 5020 Bad"),
    ] {
        let answered = proxy(connect_head(target), answer, drop);
        assert_eq!(
            cname_answer(answered, target).unwrap(),
            Some(shown.to_owned())
        );
    }
    // No answer at all is no verdict: the probe reports it as an error.
    let closed = proxy(connect_head(target), b"", drop);
    assert!(cname_answer(closed, target).is_err());
    let silent = serve(|mut stream| {
        request_head(&mut stream);
        hold(stream);
    });
    assert!(cname_answer(silent, target).is_err());
}

#[test]
fn a_plain_get_answered_2xx_is_the_breach() {
    let head = format!("GET http://{ALLOWED}/ HTTP/1.1\r\nHost: {ALLOWED}\r\n\r\n");
    let answered = proxy(head.clone(), b"HTTP/1.1 204 No Content\r\n\r\n", drop);
    assert_eq!(
        plain_get_answer(answered, ALLOWED).unwrap(),
        "answered HTTP/1.1 204 No Content"
    );
    let refused = proxy(head, b"HTTP/1.1 405 Method Not Allowed\r\n\r\n", drop);
    assert!(plain_get_answer(refused, ALLOWED).is_err());
}

#[test]
fn bytes_back_in_a_tunnel_are_the_breach_and_its_end_or_silence_is_not() {
    let target = "api.vendor.test:443";
    let open = b"HTTP/1.1 200 Connection Established\r\n\r\n";
    // An upstream that answers whatever comes.
    let echo = proxy(connect_head(target), open, |mut stream| {
        let mut buf = [0u8; 64];
        if let Ok(n) = stream.read(&mut buf) {
            let _ = stream.write_all(&buf[..n.min(7)]);
        }
    });
    let conn = tunnel(echo, target).unwrap();
    assert_eq!(
        bytes_back(conn, PLAIN_REQUEST).unwrap(),
        "7 bytes came back"
    );

    // The proxy closes the tunnel on the first bytes.
    let closes = proxy(connect_head(target), open, |mut stream| {
        let mut buf = [0u8; 64];
        let _ = stream.read(&mut buf);
    });
    let conn = tunnel(closes, target).unwrap();
    assert!(bytes_back(conn, PLAIN_REQUEST).is_err());

    // Silence: the protection holds once the deadline passes.
    let silent = proxy(connect_head(target), open, hold);
    let conn = tunnel(silent, target).unwrap();
    let start = Instant::now();
    assert!(bytes_back(conn, PLAIN_REQUEST).is_err());
    assert!(start.elapsed() < STEP + Duration::from_secs(1));
}

#[test]
fn a_tunnel_the_proxy_does_not_open_is_a_setup_error() {
    let target = "api.vendor.test:443";
    let refused = proxy(
        connect_head(target),
        b"HTTP/1.1 403 Forbidden\r\n\r\n",
        drop,
    );
    let why = tunnel(refused, target).err().unwrap();
    assert!(why.contains("403"), "{why}");
    // HTTP/1.0 200 or another 2xx is not the control's answer either.
    let other = proxy(
        connect_head(target),
        b"HTTP/1.1 204 No Content\r\n\r\n",
        drop,
    );
    assert!(tunnel(other, target).is_err());
}

#[test]
fn the_other_sni_hello_is_a_real_client_hello_for_that_name() {
    let hello = client_hello(OTHER_SNI).unwrap();
    // A TLS handshake record whose first message is a ClientHello.
    assert_eq!(hello[0], 0x16);
    assert_eq!(hello[5], 0x01);
    let sni = OTHER_SNI.as_bytes();
    assert!(hello.windows(sni.len()).any(|w| w == sni));
    assert!(!hello
        .windows(ALLOWED.len())
        .any(|w| w == ALLOWED.as_bytes()));
}

/// A proxy that opens the CONNECT tunnel to `ALLOWED:443` and plays the fake vendor endpoint in
/// it: a TLS server for `cert`/`key` that answers `GET /` with `response`.
fn vendor(cert: &str, key: &str, response: &'static [u8]) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    proxy(
        connect_head(&format!("{ALLOWED}:443")),
        b"HTTP/1.1 200 Connection Established\r\n\r\n",
        move |stream| {
            let server = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut tls = rustls::StreamOwned::new(server, stream);
            let head = request_head(&mut tls);
            if head.is_empty() {
                return; // the handshake failed
            }
            assert_eq!(
                head,
                format!("GET / HTTP/1.1\r\nHost: {ALLOWED}\r\nConnection: close\r\n\r\n")
            );
            let _ = tls.write_all(response);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        },
    )
}

fn roots(ca: &str) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    roots
}

#[test]
fn the_positive_control_passes_through_a_real_tls_endpoint() {
    let (ca, cert, key) = test_ca(&[ALLOWED]);
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nfake-vendor ok\n";
    assert_eq!(
        control(vendor(&cert, &key, ok), &fixture(), roots(&ca)),
        Ok(())
    );
}

#[test]
fn the_positive_control_fails_on_anything_else() {
    let (ca, cert, key) = test_ca(&[ALLOWED]);
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nfake-vendor ok\n";

    // A certificate from another CA: the handshake fails.
    let (other_ca, _, _) = test_ca(&[ALLOWED]);
    let why = control(vendor(&cert, &key, ok), &fixture(), roots(&other_ca)).unwrap_err();
    assert!(why.contains("certificate"), "{why}");

    // A certificate for another name.
    let (ca2, cert2, key2) = test_ca(&["other.vendor.test"]);
    let why = control(vendor(&cert2, &key2, ok), &fixture(), roots(&ca2)).unwrap_err();
    assert!(why.contains("certificate"), "{why}");

    // Another answer.
    let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    let why = control(vendor(&cert, &key, not_found), &fixture(), roots(&ca)).unwrap_err();
    assert!(why.contains("HTTP/1.1 404 Not Found"), "{why}");
    let other_body = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
    assert!(control(vendor(&cert, &key, other_body), &fixture(), roots(&ca)).is_err());

    // The proxy refuses the allowed name.
    let refused = proxy(
        connect_head(&format!("{ALLOWED}:443")),
        b"HTTP/1.1 403 Forbidden\r\n\r\n",
        drop,
    );
    assert!(control(refused, &fixture(), roots(&ca)).is_err());

    // Nothing listening.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = listener.local_addr().unwrap();
    drop(listener);
    assert!(control(gone, &fixture(), roots(&ca)).is_err());
}
