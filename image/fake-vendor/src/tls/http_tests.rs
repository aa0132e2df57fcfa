//! `serve` over an in-memory stream: pipelining, 100-continue, HEAD, every bound and refusal.

#![allow(clippy::unwrap_used)]

use super::*;
use std::sync::{Arc, Mutex};
use tokio::io::DuplexStream;

type Log = Arc<Mutex<Vec<(String, String)>>>;

/// `serve` on one end of an in-memory pipe; the other end, and what it records.
fn serving() -> (DuplexStream, Log, tokio::task::JoinHandle<()>) {
    serving_bounded(IO_BOUND)
}

fn serving_bounded(bound: Duration) -> (DuplexStream, Log, tokio::task::JoinHandle<()>) {
    let (client, server) = tokio::io::duplex(256 * 1024);
    let log: Log = Arc::default();
    let record = log.clone();
    let task = tokio::spawn(async move {
        let on_request = move |method: &str, target: &str| {
            record
                .lock()
                .unwrap()
                .push((method.to_owned(), target.to_owned()));
        };
        serve_bounded(server, &on_request, bound).await;
    });
    (client, log, task)
}

/// Everything the server sends until it closes.
async fn all_output(client: &mut DuplexStream) -> String {
    let mut out = Vec::new();
    timeout(Duration::from_secs(5), client.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn h2_pipelined_requests_are_answered_in_order() {
    let (mut client, log, _task) = serving();
    client
        .write_all(
            b"POST /sink HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /ping HTTP/1.1\r\n\r\nHEAD /source?bytes=10 HTTP/1.1\r\n\r\nGET /source?bytes=3 HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let out = all_output(&mut client).await;
    let ok = |length: usize, body: &str, connection: &str| {
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {length}\r\nConnection: {connection}\r\n\r\n{body}")
    };
    let expected = [
        ok(1, "3", "keep-alive"),
        ok(4, "pong", "keep-alive"),
        ok(10, "", "keep-alive"),
        ok(3, "xxx", "close"),
    ]
    .concat();
    assert_eq!(out, expected);
    assert_eq!(
        log.lock().unwrap().clone(),
        [
            ("POST", "/sink"),
            ("GET", "/ping"),
            ("HEAD", "/source?bytes=10"),
            ("GET", "/source?bytes=3"),
        ]
        .map(|(m, t)| (m.to_owned(), t.to_owned()))
    );
}

#[tokio::test]
async fn h3_expect_100_continue_is_answered_before_the_body() {
    let (mut client, _log, _task) = serving();
    client
        .write_all(b"POST /sink HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let mut interim = vec![0u8; 25];
    timeout(Duration::from_secs(5), client.read_exact(&mut interim))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    client.write_all(b"body").await.unwrap();
    client.shutdown().await.unwrap();
    let out = all_output(&mut client).await;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\n4"), "{out}");
}

#[tokio::test]
async fn h4_refusals_answer_then_close() {
    let cases: [(Vec<u8>, &str); 5] = [
        (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n".to_vec(), "400"),
        (
            b"POST /sink HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
            "501",
        ),
        (
            format!(
                "POST /sink HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            )
            .into_bytes(),
            "413",
        ),
        (
            b"GET /source?bytes=1073741825 HTTP/1.1\r\n\r\n".to_vec(),
            "400",
        ),
        (
            format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD)).into_bytes(),
            "431",
        ),
    ];
    for (request, status) in cases {
        let (mut client, _log, task) = serving();
        client.write_all(&request).await.unwrap();
        let out = all_output(&mut client).await;
        assert!(
            out.starts_with(&format!("HTTP/1.1 {status} ")),
            "{status}: {out}"
        );
        assert!(out.contains("Connection: close\r\n"), "{out}");
        // The server is lingering, reading what else comes: closing ends it.
        drop(client);
        timeout(Duration::from_millis(500), task)
            .await
            .unwrap()
            .unwrap();
    }
    // A head that never ends is cut off at the bound, without waiting for more.
    let (mut client, _log, _task) = serving();
    client.write_all(&vec![b'a'; MAX_HEAD + 100]).await.unwrap();
    assert!(all_output(&mut client).await.starts_with("HTTP/1.1 431 "));
}

#[tokio::test]
async fn h5_a_connection_serves_at_most_max_requests() {
    let (client, _log, task) = serving();
    let (read, mut write) = tokio::io::split(client);
    let writer = tokio::spawn(async move {
        for _ in 0..MAX_REQUESTS + 5 {
            if write
                .write_all(b"GET /ping HTTP/1.1\r\n\r\n")
                .await
                .is_err()
            {
                break;
            }
        }
        write
    });
    let mut read = read;
    let mut out = Vec::new();
    timeout(Duration::from_secs(20), read.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), MAX_REQUESTS);
    assert_eq!(out.matches("Connection: close").count(), 1);
    assert!(out.ends_with("Connection: close\r\n\r\npong"));
    // The requests beyond the bound are read and dropped, until the client closes.
    let mut write = writer.await.unwrap();
    write.shutdown().await.unwrap();
    timeout(Duration::from_millis(500), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn h6_a_slow_head_times_out() {
    let bound = Duration::from_millis(200);
    let (mut client, log, task) = serving_bounded(bound);
    client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let out = all_output(&mut client).await;
    assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
    timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(log.lock().unwrap().is_empty());

    // An idle keep-alive connection is closed quietly.
    let (mut client, _log, _task) = serving_bounded(bound);
    client
        .write_all(b"GET /ping HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let out = all_output(&mut client).await;
    assert_eq!(out.matches("HTTP/1.1").count(), 1);
    assert!(out.ends_with("pong"));
}

#[tokio::test]
async fn h7_a_client_that_closes_mid_body_ends_the_connection() {
    let (mut client, log, task) = serving();
    client
        .write_all(b"POST /sink HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly some")
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(all_output(&mut client).await, "");
    timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    // It was recorded: its head arrived.
    assert_eq!(log.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn h8_a_chunked_body_is_counted_and_the_next_request_framed_after_it() {
    let (mut client, log, _task) = serving();
    client
        .write_all(
            b"POST /sink HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\nA \r\n0123456789\r\n0\r\nX-Sum: 1\r\n\r\nGET /ping HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let out = all_output(&mut client).await;
    assert!(out.contains("\r\n\r\n13HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\npong"), "{out}");
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn h9_bad_chunked_framing_is_refused_with_400() {
    for framing in [
        &b"zz\r\n"[..],
        b"-1\r\n",
        b"\r\n",
        b"12345678901234567\r\n",
        b"3\r\nabcX\r\n",
        b"3\nabc\r\n",
        b"0\r\nBad\rTrailer: x\r\n\r\n",
    ] {
        let (mut client, _log, _task) = serving();
        let mut request = b"POST /sink HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        request.extend_from_slice(framing);
        client.write_all(&request).await.unwrap();
        let out = all_output(&mut client).await;
        assert!(
            out.starts_with("HTTP/1.1 400 "),
            "{:?}: {out}",
            String::from_utf8_lossy(framing)
        );
    }
    // A chunk-size line that never ends is cut off at its bound.
    let (mut client, _log, _task) = serving();
    let mut request = b"POST /sink HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1".to_vec();
    request.extend(std::iter::repeat_n(b'0', MAX_CHUNK_LINE + 10));
    client.write_all(&request).await.unwrap();
    assert!(all_output(&mut client).await.starts_with("HTTP/1.1 400 "));
}

#[test]
fn the_credentials_are_echoed_as_names_and_digests_never_values() {
    use sha2::Digest;
    let hex = |value: &[u8]| -> String {
        sha2::Sha256::digest(value)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    assert_eq!(credentials_echo(&[]), "");
    let line = credentials_echo(&[
        ("x-api-key".to_owned(), b"abc".to_vec()),
        ("authorization".to_owned(), b"Bearer abc".to_vec()),
    ]);
    assert_eq!(
        line,
        format!(
            "x-fake-vendor-credentials: x-api-key={}, authorization={}\r\n",
            hex(b"abc"),
            hex(b"Bearer abc")
        )
    );
    assert_eq!(
        hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}
