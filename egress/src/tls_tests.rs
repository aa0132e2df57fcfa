//! The tunnel's first bytes, from real ClientHellos (rustls) and hand-made hostile ones.

use super::*;
use std::sync::Arc;

/// A real ClientHello for `server` (rustls, as a client would send it); the proxy's tests use it
/// too.
pub(crate) fn real_hello(server: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server.to_owned()).unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    client.write_tls(&mut out).unwrap();
    out
}

fn name(text: &str) -> Name {
    Name::parse(text).unwrap()
}

#[test]
fn a_real_client_hello_names_its_server() {
    let hello = real_hello("api.anthropic.com");
    assert_eq!(
        client_hello(&hello),
        Hello::Named("api.anthropic.com".into())
    );
    assert!(names(&client_hello(&hello), &name("api.anthropic.com")));
    assert!(!names(&client_hello(&hello), &name("evil.example")));
    let other = real_hello("cdn.example.net");
    assert!(
        !names(&client_hello(&other), &name("api.anthropic.com")),
        "fronting"
    );
    // Every prefix is incomplete, never a verdict either way.
    for cut in 0..hello.len() {
        assert_eq!(client_hello(&hello[..cut]), Hello::Incomplete, "{cut}");
    }
}

#[test]
fn a_client_hello_without_a_name_or_with_an_ip_is_not_the_host() {
    // rustls sends no SNI for an IP address.
    let by_ip = real_hello("127.0.0.1");
    assert_eq!(client_hello(&by_ip), Hello::NotTls("no server name"));
    assert!(!names(&client_hello(&by_ip), &name("api.anthropic.com")));
}

#[test]
fn what_is_not_tls_is_refused_at_once() {
    for bytes in [
        &b"GET / HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n"[..],
        b"\x16\x02\x00\x00\x05hello",
        b"\x17\x03\x03\x00\x05hello",
        b"\x16\x03\x03\x00\x00",
        b"\x16\x03\x03\xff\xff",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"\0\0\0\0\0\0",
    ] {
        assert!(matches!(client_hello(bytes), Hello::NotTls(_)), "{bytes:?}");
    }
}

/// A ClientHello record with these extensions (types and payloads).
fn hello_with(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut ext = Vec::new();
    for (kind, data) in extensions {
        ext.extend_from_slice(&kind.to_be_bytes());
        ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
        ext.extend_from_slice(data);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[0; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut handshake = vec![1];
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

fn sni(names: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (kind, name) in names {
        list.push(*kind);
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&list);
    data
}

#[test]
fn hand_made_hellos_are_held_to_one_exact_name() {
    let ok = hello_with(&[(0, sni(&[(0, b"api.anthropic.com")]))]);
    assert_eq!(client_hello(&ok), Hello::Named("api.anthropic.com".into()));
    let dotted = hello_with(&[(0, sni(&[(0, b"API.anthropic.com.")]))]);
    assert!(
        names(&client_hello(&dotted), &name("api.anthropic.com")),
        "canonical compare"
    );
    for (what, record) in [
        (
            "two names",
            hello_with(&[(0, sni(&[(0, b"api.anthropic.com"), (0, b"evil.example")]))]),
        ),
        (
            "two extensions",
            hello_with(&[
                (0, sni(&[(0, b"api.anthropic.com")])),
                (0, sni(&[(0, b"evil.example")])),
            ]),
        ),
        ("no extension", hello_with(&[(10, vec![0, 0])])),
        ("empty list", hello_with(&[(0, vec![0, 0])])),
        (
            "a length past the end",
            hello_with(&[(0, vec![0, 9, 0, 0, 3, b'a'])]),
        ),
    ] {
        assert!(matches!(client_hello(&record), Hello::NotTls(_)), "{what}");
    }
    for evil in [
        &b"api.anthropic.com\0.evil"[..],
        b"api.anthropic.com.evil",
        b"127.0.0.1",
        "ａpi.anthropic.com".as_bytes(),
    ] {
        let record = hello_with(&[(0, sni(&[(0, evil)]))]);
        assert!(
            !names(&client_hello(&record), &name("api.anthropic.com")),
            "{evil:?}"
        );
    }
    // A record that carries more than the ClientHello, and bytes after the extensions.
    let mut trailing = ok.clone();
    trailing.push(0);
    let len = u16::from_be_bytes([trailing[3], trailing[4]]) + 1;
    trailing[3..5].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(client_hello(&trailing), Hello::NotTls(_)));
}
