//! The tunnel's first bytes, from real ClientHellos (rustls) and hand-made hostile ones.

use super::*;
use cordon_fake_vendor::hello::{server_name, with_extensions};

/// A real ClientHello for `server` (rustls, as a client would send it); the proxy's tests use it
/// too.
pub(crate) fn real_hello(server: &str) -> Vec<u8> {
    cordon_fake_vendor::hello::real(server).unwrap()
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

#[test]
fn hand_made_hellos_are_held_to_one_exact_name() {
    let ok = with_extensions(&[(0, server_name(&[(0, b"api.anthropic.com")]))]);
    assert_eq!(client_hello(&ok), Hello::Named("api.anthropic.com".into()));
    let dotted = with_extensions(&[(0, server_name(&[(0, b"API.anthropic.com.")]))]);
    assert!(
        names(&client_hello(&dotted), &name("api.anthropic.com")),
        "canonical compare"
    );
    for (what, record) in [
        (
            "two names",
            with_extensions(&[(
                0,
                server_name(&[(0, b"api.anthropic.com"), (0, b"evil.example")]),
            )]),
        ),
        (
            "two extensions",
            with_extensions(&[
                (0, server_name(&[(0, b"api.anthropic.com")])),
                (0, server_name(&[(0, b"evil.example")])),
            ]),
        ),
        ("no extension", with_extensions(&[(10, vec![0, 0])])),
        ("empty list", with_extensions(&[(0, vec![0, 0])])),
        (
            "a length past the end",
            with_extensions(&[(0, vec![0, 9, 0, 0, 3, b'a'])]),
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
        let record = with_extensions(&[(0, server_name(&[(0, evil)]))]);
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
