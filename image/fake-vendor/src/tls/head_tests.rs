//! The head parser: what parses, how keep-alive follows from the version and `Connection`, and
//! every refusal.

#![allow(clippy::unwrap_used)]

use super::*;

fn parsed(head: &str) -> Result<Head, Refusal> {
    parse_head(head.as_bytes())
}

#[test]
fn h0_a_head_parses_with_keep_alive_by_version_and_connection() {
    let head = parsed("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(
        head,
        Head {
            method: "GET".to_owned(),
            target: "/ping".to_owned(),
            content_length: 0,
            chunked: false,
            keep_alive: true,
            expect_continue: false,
            credentials: Vec::new(),
        }
    );
    assert!(
        !parsed("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n")
            .unwrap()
            .keep_alive
    );
    assert!(!parsed("GET / HTTP/1.0\r\n\r\n").unwrap().keep_alive);
    assert!(
        parsed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .keep_alive
    );
    let post =
        parsed("POST /sink HTTP/1.1\r\ncontent-length:  42 \r\nExpect: 100-continue\r\n\r\n")
            .unwrap();
    assert_eq!((post.content_length, post.expect_continue), (42, true));
    let chunked =
        parsed("POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap();
    assert_eq!((chunked.content_length, chunked.chunked), (0, true));
    // The same length twice is one length.
    assert_eq!(
        parsed("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
            .unwrap()
            .content_length,
        5
    );
    // One empty line before the request line is ignored; an absolute-form target is its path.
    assert_eq!(parsed("\r\nGET / HTTP/1.1\r\n\r\n").unwrap().target, "/");
    assert_eq!(
        parsed("GET https://API.vendor.test:443/v1?x=1 HTTP/1.1\r\n\r\n")
            .unwrap()
            .target,
        "/v1?x=1"
    );
    assert_eq!(
        parsed("GET http://h?q HTTP/1.1\r\n\r\n").unwrap().target,
        "/?q"
    );
    assert_eq!(parsed("OPTIONS * HTTP/1.1\r\n\r\n").unwrap().target, "*");
}

#[test]
fn h1_malformed_heads_are_refused() {
    for bad in [
        "GET / HTTP/1.1\n\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\nFoo: y\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
        "GET / HTTP/1.1\r\nNo colon\r\n\r\n",
        "GET / HTTP/1.1\r\n: empty name\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
        "GET / HTTP/2.0\r\n\r\n",
        "GET /  HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1 extra\r\n\r\n",
        "GET\r\n\r\n",
        "G(T / HTTP/1.1\r\n\r\n",
        "GET relative HTTP/1.1\r\n\r\n",
        "GET /\x7f HTTP/1.1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "\r\n\r\n",
    ] {
        assert_eq!(parsed(bad), Err(Refusal::Malformed), "{bad:?}");
    }
    for coding in [
        "gzip",
        "gzip, chunked",
        "chunked\r\nTransfer-Encoding: chunked",
    ] {
        assert_eq!(
            parsed(&format!(
                "POST / HTTP/1.1\r\nTransfer-Encoding: {coding}\r\n\r\n"
            )),
            Err(Refusal::NotImplemented),
            "{coding}"
        );
    }
    assert_eq!(
        parsed(&format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        )),
        Err(Refusal::BodyTooLarge)
    );
    assert!(parsed(&format!(
        "POST / HTTP/1.1\r\nContent-Length: {MAX_BODY}\r\n\r\n"
    ))
    .is_ok());
}
