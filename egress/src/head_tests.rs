//! The head's rules, with several spellings of each class of hostile request.

use super::*;

fn head(text: &str) -> Vec<u8> {
    text.as_bytes().to_vec()
}

fn parsed(text: &str) -> Result<Connect, Rejection> {
    let bytes = head(text);
    match head_end(&bytes)? {
        Some(end) if end == bytes.len() => parse(&bytes),
        Some(end) => panic!("head ends at {end} of {}: {text:?}", bytes.len()),
        None => panic!("head incomplete: {text:?}"),
    }
}

#[test]
fn a_plain_connect_is_read() {
    let c = parsed("CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\nUser-Agent: x\r\n\r\n").unwrap();
    assert_eq!((c.name.as_str(), c.port), ("api.anthropic.com", 443));
    let c =
        parsed("CONNECT API.Anthropic.com.:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n")
            .unwrap();
    assert_eq!(c.name.as_str(), "api.anthropic.com", "one fold, one dot");
}

#[test]
fn other_methods_and_forms_are_refused() {
    for (text, want) in [
        (
            "GET http://api.anthropic.com/ HTTP/1.1\r\n\r\n",
            Rejection::Method,
        ),
        (
            "GET / HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n",
            Rejection::Method,
        ),
        (
            "POST api.anthropic.com:443 HTTP/1.1\r\n\r\n",
            Rejection::Method,
        ),
        (
            "connect api.anthropic.com:443 HTTP/1.1\r\n\r\n",
            Rejection::Method,
        ),
        (
            "CONNECTX api.anthropic.com:443 HTTP/1.1\r\n\r\n",
            Rejection::Method,
        ),
        ("PRI * HTTP/2.0\r\n\r\n", Rejection::Method),
        ("GET\r\n\r\n", Rejection::Method),
        (
            "CONNECT http://api.anthropic.com:443 HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "CONNECT https://api.anthropic.com:443/ HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "CONNECT /api.anthropic.com:443 HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "CONNECT api.anthropic.com:443/x HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "CONNECT api.anthropic.com HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "CONNECT  api.anthropic.com:443 HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "CONNECT api.anthropic.com:443  HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        ("CONNECT api.anthropic.com:443\r\n\r\n", Rejection::Target),
        (
            "CONNECT api.anthropic.com:443 HTTP/1.0\r\n\r\n",
            Rejection::Version,
        ),
        (
            "CONNECT api.anthropic.com:443 HTTP/2\r\n\r\n",
            Rejection::Version,
        ),
        (
            "CONNECT api.anthropic.com:443 http/1.1\r\n\r\n",
            Rejection::Version,
        ),
    ] {
        assert_eq!(parsed(text), Err(want), "{text:?}");
    }
}

#[test]
fn userinfo_port_and_literal_games_are_refused() {
    for (target, want) in [
        ("a:443@api.anthropic.com:443", Rejection::Host),
        ("api.anthropic.com:443@evil.com:443", Rejection::Host),
        ("user@api.anthropic.com:443", Rejection::Host),
        ("api.anthropic.com:0443", Rejection::Port),
        ("api.anthropic.com:+443", Rejection::Port),
        ("api.anthropic.com:65536", Rejection::Port),
        ("api.anthropic.com:", Rejection::Port),
        ("api.anthropic.com:443:443", Rejection::Host),
        ("127.0.0.1:443", Rejection::Host),
        ("2130706433:443", Rejection::Host),
        ("0x7f.1:443", Rejection::Host),
        ("[::1]:443", Rejection::Host),
        ("[::ffff:127.0.0.1]:443", Rejection::Host),
        ("[fe80::1%25eth0]:443", Rejection::Host),
        ("api%2eanthropic.com:443", Rejection::Host),
        ("api.anthropic.com%00:443", Rejection::Host),
    ] {
        let text = format!("CONNECT {target} HTTP/1.1\r\n\r\n");
        assert_eq!(parsed(&text), Err(want), "{target}");
    }
    // Bytes outside visible ASCII anywhere in the request line.
    for target in [
        "api.anthropic.com\0:443",
        "ａｐｉ.anthropic.com:443",
        "api\u{200b}.anthropic.com:443",
    ] {
        let text = format!("CONNECT {target} HTTP/1.1\r\n\r\n");
        assert!(parsed(&text).is_err(), "{target:?}");
    }
}

#[test]
fn line_endings_sizes_and_headers_are_bounded() {
    let bare_lf = [
        "CONNECT api.anthropic.com:443 HTTP/1.1\n\n",
        "CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: x\n\r\n",
        "CONNECT api.anthropic.com:443 HTTP/1.1\r\n\n",
    ];
    for text in bare_lf {
        assert_eq!(head_end(&head(text)), Err(Rejection::Malformed), "{text:?}");
    }
    assert_eq!(
        head_end(b"CONNECT a.com:443 HTTP/1.1\rX"),
        Err(Rejection::Malformed),
        "bare CR"
    );
    assert_eq!(
        head_end(b"CONNECT a.com:443 HTTP/1.1\r\n"),
        Ok(None),
        "incomplete"
    );
    // Oversized: refused once the bound is passed, with or without an end in sight.
    let long = format!(
        "CONNECT api.anthropic.com:443 HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    assert_eq!(head_end(long.as_bytes()), Err(Rejection::HeadTooLarge));
    assert_eq!(
        head_end(&long.as_bytes()[..MAX_HEAD]),
        Err(Rejection::HeadTooLarge)
    );
    let fits = format!(
        "CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEAD - 150)
    );
    assert!(parsed(&fits).is_ok());
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
    assert_eq!(
        parsed(&format!("CONNECT a.com:443 HTTP/1.1\r\n{many}\r\n")),
        Err(Rejection::HeadTooLarge)
    );
    // The Host header is one of them.
    let enough: String = (1..MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
    assert!(parsed(&format!(
        "CONNECT a.com:443 HTTP/1.1\r\nHost: a.com\r\n{enough}\r\n"
    ))
    .is_ok());
    for bad in [
        "Host: a.com:443\r\nHost: a.com:443",
        "Host: a.com:443\r\nhost: a.com:443",
        "Host: evil.com:443",
        "Host: a.com:8443",
        "NoColon",
        " Folded: x",
        "X: a\r\n continued",
        "Bad Name: x",
        ": x",
        "X: \0",
        "X: \u{1b}[2J",
        "X: caf\u{e9}",
    ] {
        let text = format!("CONNECT a.com:443 HTTP/1.1\r\n{bad}\r\n\r\n");
        assert_eq!(parsed(&text), Err(Rejection::Malformed), "{bad:?}");
    }
    let literal = "CONNECT a.com:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n";
    assert_eq!(
        parsed(literal),
        Err(Rejection::Malformed),
        "a Host header naming anything but the target is malformed, however it fails"
    );
    // The default port may be left out of the Host header (older clients do), nothing else.
    for (host, want) in [
        ("Host: a.com", Ok(())),
        ("Host: A.com.", Ok(())),
        ("Host: b.com", Err(Rejection::Malformed)),
        ("Host: a.com:", Err(Rejection::Malformed)),
    ] {
        let text = format!("CONNECT a.com:443 HTTP/1.1\r\n{host}\r\n\r\n");
        assert_eq!(parsed(&text).map(drop), want, "{host}");
    }
    let elsewhere = "CONNECT a.com:8443 HTTP/1.1\r\nHost: a.com\r\n\r\n";
    assert_eq!(
        parsed(elsewhere),
        Err(Rejection::Malformed),
        "only the default port may be left out"
    );
}

#[test]
fn a_connect_needs_exactly_one_host_header_naming_its_target() {
    // No Host header at all is refused as one naming something else is (RFC 9112 3.2: a client
    // sends one in every HTTP/1.1 request; Node's CONNECT does).
    let mismatching = parsed("CONNECT a.com:443 HTTP/1.1\r\nHost: b.com:443\r\n\r\n");
    assert_eq!(mismatching, Err(Rejection::Malformed));
    for text in [
        "CONNECT a.com:443 HTTP/1.1\r\n\r\n",
        "CONNECT a.com:443 HTTP/1.1\r\nUser-Agent: x\r\n\r\n",
        "CONNECT a.com:443 HTTP/1.1\r\nX-Host: a.com:443\r\nHosts: a.com:443\r\n\r\n",
    ] {
        assert_eq!(parsed(text), mismatching, "{text:?}");
        // The method rule left out changes nothing for an authority-form target.
        assert_eq!(parse_with(text.as_bytes(), true), mismatching, "{text:?}");
    }
    // One, in any case and position, naming the target.
    for text in [
        "CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n",
        "CONNECT a.com:443 HTTP/1.1\r\nUser-Agent: x\r\nhost: a.com:443\r\n\r\n",
        "CONNECT a.com:443 HTTP/1.1\r\nHOST:a.com\r\n\r\n",
    ] {
        assert!(parsed(text).is_ok(), "{text:?}");
    }
}

#[test]
fn every_refusal_has_its_own_id_and_a_status() {
    let all = [
        Rejection::Method,
        Rejection::Target,
        Rejection::Version,
        Rejection::HeadTooLarge,
        Rejection::Malformed,
        Rejection::Host,
        Rejection::Port,
        Rejection::NotAllowed,
        Rejection::Address,
        Rejection::Resolve,
    ];
    let ids: std::collections::BTreeSet<&str> = all.iter().map(|r| r.id()).collect();
    assert_eq!(ids.len(), all.len());
    assert!(all.iter().all(|r| (400..600).contains(&r.status())));
    assert_eq!(Rejection::Method.status(), 405);
}

#[test]
fn any_method_reads_authority_and_absolute_form_only_when_asked() {
    let any = |text: &str| parse_with(text.as_bytes(), true);
    for (text, name, port) in [
        ("GET http://a.example/ HTTP/1.1\r\n\r\n", "a.example", 80),
        ("GET http://a.example HTTP/1.1\r\n\r\n", "a.example", 80),
        ("GET http://a.example?q HTTP/1.1\r\n\r\n", "a.example", 80),
        (
            "HEAD https://A.example./x/y HTTP/1.1\r\n\r\n",
            "a.example",
            443,
        ),
        (
            "DELETE http://a.example:8080/x HTTP/1.1\r\n\r\n",
            "a.example",
            8080,
        ),
        (
            "PUT a.example:8443 HTTP/1.1\r\nHost: a.example:8443\r\n\r\n",
            "a.example",
            8443,
        ),
        (
            "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
            "a.example",
            443,
        ),
        // An absolute-form target is what counts; its Host header is not compared.
        (
            "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
            "a.example",
            80,
        ),
    ] {
        let c = any(text).unwrap_or_else(|r| panic!("{text:?}: {r}"));
        assert_eq!((c.name.as_str(), c.port), (name, port), "{text:?}");
        if !text.starts_with("CONNECT ") {
            assert!(
                parse(text.as_bytes()).is_err(),
                "{text:?} without any_method"
            );
        }
    }
    for (text, want) in [
        ("GET http://a.example:/ HTTP/1.1\r\n\r\n", Rejection::Port),
        (
            "GET http://a.example:99999/ HTTP/1.1\r\n\r\n",
            Rejection::Port,
        ),
        (
            "GET http://a.example/#f HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        (
            "GET http://u:p@a.example/ HTTP/1.1\r\n\r\n",
            Rejection::Target,
        ),
        ("GET HTTP://a.example/ HTTP/1.1\r\n\r\n", Rejection::Target),
        ("GET http:///x HTTP/1.1\r\n\r\n", Rejection::Host),
        ("GET http://0x7f.1/ HTTP/1.1\r\n\r\n", Rejection::Host),
        ("GET http://[fe80::1]/ HTTP/1.1\r\n\r\n", Rejection::Host),
        ("GET * HTTP/1.1\r\n\r\n", Rejection::Target),
        ("GET\r\n\r\n", Rejection::Target),
        ("GET  http://a.example/ HTTP/1.1\r\n\r\n", Rejection::Target),
        ("G@T http://a.example/ HTTP/1.1\r\n\r\n", Rejection::Method),
        ("GET http://a.example/ HTTP/2\r\n\r\n", Rejection::Version),
        (
            "GET http://a.example/ HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
            Rejection::Malformed,
        ),
    ] {
        assert_eq!(any(text), Err(want), "{text:?}");
    }
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X{i}: y\r\n")).collect();
    assert_eq!(
        any(&format!("GET http://a.example/ HTTP/1.1\r\n{many}\r\n")),
        Err(Rejection::HeadTooLarge)
    );
}
