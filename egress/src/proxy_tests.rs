//! The runtime, end to end on this machine: a client on a duplex pipe or a unix socket, the
//! "vendor" a TCP listener on 127.0.0.1 reached through a mapping. Nothing leaves the host.

use super::*;
use crate::allowlist::{Allowlist, Mapping};
use crate::tls::tests::real_hello;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;
use tokio::io::DuplexStream;
use tokio::net::{TcpListener, UnixStream};

const MAPPED: &str = "fake.vendor.test";

/// A vendor listener on loopback and the rules that map `fake.vendor.test` (and list
/// `real.vendor.test`, unmapped, and `other.vendor.test`, mapped but on another port) to it.
async fn vendor() -> (TcpListener, Config) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let rules = Rules {
        allowlist: Allowlist::parse(&[
            format!("{MAPPED}:{port}"),
            format!("real.vendor.test:{port}"),
        ])
        .unwrap(),
        mappings: vec![Mapping::parse(&format!("{MAPPED}=127.0.0.1:{port}")).unwrap()],
        host_own: vec![],
        skip: Default::default(),
    };
    let config = Config {
        head_deadline: Duration::from_secs(5),
        hello_deadline: Duration::from_secs(5),
        ..Config::new(rules)
    };
    (listener, config)
}

fn connect_head(name: &str, listener: &TcpListener) -> Vec<u8> {
    let port = listener.local_addr().unwrap().port();
    format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n").into_bytes()
}

/// Nothing connected to the listener: a dial completes in the kernel before `handle` returns, so
/// a connection made would already be queued.
async fn assert_never_dialed(listener: &TcpListener) {
    assert!(
        timeout(Duration::from_millis(100), listener.accept())
            .await
            .is_err(),
        "the vendor was dialed"
    );
}

/// What a vendor connection saw.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    ended: AtomicUsize,
    bytes: Mutex<Vec<u8>>,
}

impl Seen {
    fn bytes(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }

    /// Wait until every accepted connection has read its end.
    async fn settled(&self) {
        for _ in 0..500 {
            if self.ended.load(Ordering::SeqCst) == self.accepted.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("a vendor connection never ended");
    }
}

/// Serve the listener: record every byte; once `reply_after` bytes came, send `reply`; at the
/// client's end close too, unless `hold` (then keep the connection open, silent).
fn serve_vendor(
    listener: TcpListener,
    reply_after: usize,
    reply: &'static [u8],
    hold: bool,
) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let out = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen.accepted.fetch_add(1, Ordering::SeqCst);
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut total = 0;
                let mut replied = false;
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            seen.bytes.lock().unwrap().extend_from_slice(&buf[..n]);
                            total += n;
                            if !replied && total >= reply_after && reply_after > 0 {
                                replied = true;
                                let _ = stream.write_all(reply).await;
                            }
                        }
                    }
                }
                seen.ended.fetch_add(1, Ordering::SeqCst);
                if hold {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            });
        }
    });
    out
}

/// A resolver stub: records what it was asked, answers the same each time.
struct Stub {
    answer: Result<Vec<IpAddr>, String>,
    asked: Mutex<Vec<String>>,
}

impl Stub {
    fn new(answer: Result<Vec<IpAddr>, String>) -> Arc<Stub> {
        Arc::new(Stub {
            answer,
            asked: Mutex::new(Vec::new()),
        })
    }
}

impl Resolve for Stub {
    fn lookup(&self, name: &Name) -> BoxFuture<'_, Result<Vec<IpAddr>, String>> {
        self.asked.lock().unwrap().push(name.as_str().to_owned());
        let answer = self.answer.clone();
        Box::pin(async move { answer })
    }
}

/// A client end and the task running `handle` on the other.
type Started<C> = (C, tokio::task::JoinHandle<Outcome>);

/// Run `handle` on one end of a unix socket pair, as [`serve_unix`] does (its tunnels are
/// spliced); the test holds the other.
fn start(config: Config, resolver: Arc<dyn Resolve>) -> Started<UnixStream> {
    let (client, server) = UnixStream::pair().unwrap();
    let task = tokio::spawn(async move { handle(server, &config, &*resolver).await });
    (client, task)
}

/// Run `handle` on one end of an in-memory pipe (its tunnels are copied); the test holds the
/// other.
fn start_in_memory(config: Config, resolver: Arc<dyn Resolve>) -> Started<DuplexStream> {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(async move { handle(server, &config, &*resolver).await });
    (client, task)
}

/// Read an answer's head (up to its empty line), or what came before the end.
async fn read_answer<S: AsyncRead + Unpin>(client: &mut S) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match timeout(Duration::from_secs(5), client.read(&mut byte)).await {
            Ok(Ok(1)) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

async fn outcome(task: tokio::task::JoinHandle<Outcome>) -> Outcome {
    timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap()
}

const ESTABLISHED: &str = "HTTP/1.1 200 Connection Established\r\n\r\n";

#[tokio::test]
async fn c0_a_mapped_name_tunnels_its_client_hello_byte_for_byte() {
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    let hello = real_hello(MAPPED);
    let seen = serve_vendor(listener, hello.len(), b"server says hi", false);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    client.write_all(&hello).await.unwrap();
    let mut back = [0u8; 14];
    timeout(Duration::from_secs(5), client.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"server says hi");
    client.write_all(b"more").await.unwrap();
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    assert_eq!(
        outcome(task).await,
        Outcome::Relayed {
            up: hello.len() as u64 + 4,
            down: 14,
            end: End::Closed
        }
    );
    seen.settled().await;
    let mut want = hello.clone();
    want.extend_from_slice(b"more");
    assert_eq!(seen.bytes(), want);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
}

/// Bytes no two positions of which a dropped, repeated or reordered chunk would keep in place.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 13) as u8)
        .collect()
}

/// A vendor that, after the ClientHello, streams `down` while it reads everything the client
/// sends, then closes: what it read after the hello.
fn bulk_vendor(
    listener: TcpListener,
    hello: usize,
    down: Vec<u8>,
) -> tokio::task::JoinHandle<Vec<u8>> {
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut read, mut write) = stream.into_split();
        let writer = tokio::spawn(async move {
            write.write_all(&down).await.unwrap();
            write.shutdown().await.unwrap();
        });
        // Late to read: the relay's writes meet a full socket and are taken in part.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut got = Vec::new();
        read.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        got.split_off(hello)
    })
}

/// 8 MiB each way at once through a tunnel whose client `start` makes, both ends late to read:
/// every byte arrives, in order, counted, and both ends' closes end it.
async fn megabytes_both_ways<C>(start: fn(Config, Arc<dyn Resolve>) -> Started<C>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    const LEN: usize = 8 << 20;
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    let hello = real_hello(MAPPED);
    let (up, down) = (pattern(LEN, 7), pattern(LEN + 12_345, 91));
    let vendor = bulk_vendor(listener, hello.len(), down.clone());
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    client.write_all(&hello).await.unwrap();
    let (mut read, mut write) = tokio::io::split(client);
    let sent = up.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&sent).await.unwrap();
        write.shutdown().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut got = Vec::new();
    timeout(Duration::from_secs(30), read.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    // Compared whole, never printed: 8 MiB in a panic message helps nobody.
    assert!(
        got == down,
        "the client got {} bytes, not the vendor's {}",
        got.len(),
        down.len()
    );
    let seen = timeout(Duration::from_secs(30), vendor)
        .await
        .unwrap()
        .unwrap();
    assert!(
        seen == up,
        "the vendor got {} bytes, not the client's {}",
        seen.len(),
        up.len()
    );
    assert_eq!(
        outcome(task).await,
        Outcome::Relayed {
            up: (hello.len() + LEN) as u64,
            down: down.len() as u64,
            end: End::Closed
        }
    );
}

#[tokio::test]
async fn megabytes_cross_a_spliced_tunnel_intact_both_ways() {
    megabytes_both_ways(start).await;
}

#[tokio::test]
async fn megabytes_cross_a_copied_tunnel_intact_both_ways() {
    megabytes_both_ways(start_in_memory).await;
}

/// Send one byte of TCP urgent data (MSG_OOB) on `stream`.
fn send_urgent(stream: &tokio::net::TcpStream, byte: u8) {
    use std::os::fd::AsRawFd;
    // SAFETY: send(2) reads one byte of a live local, on a socket the test owns.
    let sent = unsafe { libc::send(stream.as_raw_fd(), [byte].as_ptr().cast(), 1, libc::MSG_OOB) };
    assert_eq!(sent, 1);
}

/// TCP urgent data from the upstream: splice(2) reads no further than the urgent mark, so the
/// relay takes what follows it with recv(2), which leaves the urgent byte out (as any reader
/// without SO_OOBINLINE does, and as the copying relay does). The stream goes on, both
/// mid-stream and with the mark right before the upstream's EOF.
#[tokio::test]
async fn urgent_data_from_upstream_is_passed_over_and_the_stream_goes_on() {
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    let hello = real_hello(MAPPED);
    let hello_len = hello.len();
    let (go_on, on) = tokio::sync::oneshot::channel::<()>();
    let upstream = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut got = vec![0u8; hello_len];
        stream.read_exact(&mut got).await.unwrap();
        stream.write_all(b"before").await.unwrap();
        send_urgent(&stream, b'!');
        stream.write_all(b"after").await.unwrap();
        on.await.unwrap();
        send_urgent(&stream, b'?');
        stream.write_all(b"last").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    });
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    client.write_all(&hello).await.unwrap();
    let mut got = [0u8; 11];
    timeout(Duration::from_secs(5), client.read_exact(&mut got))
        .await
        .expect("the bytes after the urgent mark, mid-stream")
        .unwrap();
    assert_eq!(&got, b"beforeafter");
    go_on.send(()).unwrap();
    let mut rest = Vec::new();
    timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&rest), "last");
    client.shutdown().await.unwrap();
    assert_eq!(
        outcome(task).await,
        Outcome::Relayed {
            up: hello_len as u64,
            down: 15,
            end: End::Closed
        }
    );
    upstream.await.unwrap();
}

#[tokio::test]
async fn refusals_are_answered_with_their_status_and_dial_nothing() {
    let (listener, config) = vendor().await;
    let port = listener.local_addr().unwrap().port();
    let oversize = format!(
        "CONNECT {MAPPED}:{port} HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    let cases: Vec<(Vec<u8>, Rejection, &str)> = vec![
        (
            format!("CONNECT evil.example:{port} HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n").into(),
            Rejection::NotAllowed,
            "403 Forbidden",
        ),
        (
            format!("CONNECT {MAPPED}:443 HTTP/1.1\r\nHost: {MAPPED}:443\r\n\r\n").into(),
            Rejection::Port,
            "400 Bad Request",
        ),
        (
            format!("GET http://{MAPPED}:{port}/ HTTP/1.1\r\n\r\n").into(),
            Rejection::Method,
            "405 Method Not Allowed",
        ),
        // A mapped, allowed name: only the missing Host header refuses it.
        (
            format!("CONNECT {MAPPED}:{port} HTTP/1.1\r\nUser-Agent: x\r\n\r\n").into(),
            Rejection::Malformed,
            "400 Bad Request",
        ),
        (
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into(),
            Rejection::Host,
            "400 Bad Request",
        ),
        (
            format!("CONNECT {MAPPED}:{port} HTTP/1.1\n\n").into(),
            Rejection::Malformed,
            "400 Bad Request",
        ),
        (
            oversize.into(),
            Rejection::HeadTooLarge,
            "431 Request Header Fields Too Large",
        ),
        (
            format!(
                "CONNECT {MAPPED}:{port} HTTP/1.1\r\nHost: {MAPPED}:{port}\r\nHost: {MAPPED}:{port}\r\n\r\n"
            )
            .into(),
            Rejection::Malformed,
            "400 Bad Request",
        ),
        (
            format!("CONNECT {MAPPED}:{port} HTTP/1.0\r\n\r\n").into(),
            Rejection::Version,
            "505 HTTP Version Not Supported",
        ),
    ];
    for (head, want, status) in cases {
        let (mut client, task) = start(config.clone(), Arc::new(NoResolver));
        // A refusal may come before the whole (oversize) head is written: ignore a broken pipe.
        let _ = client.write_all(&head).await;
        let got = read_answer(&mut client).await;
        assert_eq!(
            got,
            format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            "{want:?}"
        );
        assert_eq!(outcome(task).await, Outcome::Refused(want));
        assert_never_dialed(&listener).await;
    }
}

#[tokio::test]
async fn bytes_before_the_200_are_refused_and_nothing_is_dialed() {
    let (listener, config) = vendor().await;
    let mut sent = connect_head(MAPPED, &listener);
    sent.extend_from_slice(&real_hello(MAPPED));
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&sent).await.unwrap();
    assert!(read_answer(&mut client).await.starts_with("HTTP/1.1 400 "));
    assert_eq!(outcome(task).await, Outcome::Refused(Rejection::Malformed));
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn input_after_the_head_is_seen_without_waiting() {
    // What the proxy checks right before the 200 (bytes that came while it dialed).
    let (mut client, mut server) = tokio::io::duplex(1024);
    assert!(matches!(early_input(&mut server).await, Early::Nothing));
    client.write_all(b"\x16").await.unwrap();
    assert!(matches!(early_input(&mut server).await, Early::Bytes));
    client.shutdown().await.unwrap();
    assert!(matches!(early_input(&mut server).await, Early::Closed));
}

#[tokio::test]
async fn a_slow_head_is_closed_at_its_deadline() {
    let (listener, mut config) = vendor().await;
    config.head_deadline = Duration::from_millis(200);
    let head = connect_head(MAPPED, &listener);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    let started = Instant::now();
    client.write_all(&head[..10]).await.unwrap();
    assert_eq!(outcome(task).await, Outcome::HeadTimedOut);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "no answer to a slow head");
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn a_fin_before_the_head_ends_closes_and_dials_nothing() {
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head[..head.len() - 2]).await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(outcome(task).await, Outcome::ClosedBeforeHead);
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn a_fin_right_after_the_head_gets_no_200_and_forwards_nothing() {
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    let seen = serve_vendor(listener, 1, b"", false);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    client.shutdown().await.unwrap();
    // The mapping is dialed, then the FIN is seen before the 200.
    assert_eq!(outcome(task).await, Outcome::ClosedBeforeHead);
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "no 200 after a FIN");
    seen.settled().await;
    assert!(seen.bytes().is_empty());
}

/// After the 200, send `first` (or nothing), and check the tunnel is closed unforwarded.
async fn refused_after_the_200(first: Option<Vec<u8>>, want: &'static str) {
    let (listener, mut config) = vendor().await;
    config.hello_deadline = Duration::from_millis(200);
    let head = connect_head(MAPPED, &listener);
    let seen = serve_vendor(listener, 1, b"", false);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    if let Some(first) = first {
        client.write_all(&first).await.unwrap();
    }
    assert_eq!(outcome(task).await, Outcome::HelloRefused(want));
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    seen.settled().await;
    assert!(seen.bytes().is_empty(), "{want}: bytes reached the vendor");
}

#[tokio::test]
async fn a_client_hello_for_another_name_is_not_forwarded() {
    refused_after_the_200(
        Some(real_hello("cdn.example.net")),
        "the ClientHello names another server",
    )
    .await;
}

#[tokio::test]
async fn plain_http_in_the_tunnel_is_not_forwarded() {
    refused_after_the_200(
        Some(b"GET / HTTP/1.1\r\nHost: fake.vendor.test\r\n\r\n".to_vec()),
        "not a handshake record",
    )
    .await;
}

#[tokio::test]
async fn no_client_hello_in_time_is_not_forwarded() {
    refused_after_the_200(None, "no ClientHello in time").await;
    // Half a ClientHello, then silence: the same.
    let hello = real_hello(MAPPED);
    refused_after_the_200(
        Some(hello[..hello.len() / 2].to_vec()),
        "no ClientHello in time",
    )
    .await;
}

/// Open a tunnel (the vendor replies once the hello came and then stays silent) and return the
/// client, the task and what the vendor saw.
async fn open_tunnel(
    config: impl FnOnce(&mut Config),
) -> (UnixStream, tokio::task::JoinHandle<Outcome>, Arc<Seen>) {
    let (listener, mut cfg) = vendor().await;
    config(&mut cfg);
    let head = connect_head(MAPPED, &listener);
    let hello = real_hello(MAPPED);
    let seen = serve_vendor(listener, hello.len(), b"ok", true);
    let (mut client, task) = start(cfg, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    client.write_all(&hello).await.unwrap();
    let mut back = [0u8; 2];
    client.read_exact(&mut back).await.unwrap();
    (client, task, seen)
}

#[tokio::test]
async fn an_idle_tunnel_ends() {
    let started = Instant::now();
    let (_client, task, _seen) = open_tunnel(|c| c.idle = Duration::from_millis(300)).await;
    match outcome(task).await {
        Outcome::Relayed {
            down: 2,
            end: End::Idle,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_half_closed_tunnel_ends_at_its_deadline() {
    let (mut client, task, _seen) =
        open_tunnel(|c| c.half_close = Duration::from_millis(300)).await;
    let started = Instant::now();
    // The client is done sending; the vendor (holding) never finishes.
    client.shutdown().await.unwrap();
    match outcome(task).await {
        Outcome::Relayed {
            end: End::HalfClose,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test]
async fn an_unmapped_name_dials_only_what_the_classifier_passed() {
    let (listener, config) = vendor().await;
    let port = listener.local_addr().unwrap().port();
    let head = format!(
        "CONNECT real.vendor.test:{port} HTTP/1.1\r\nHost: real.vendor.test:{port}\r\n\r\n"
    )
    .into_bytes();

    // Loopback is denied: 403, not dialed.
    let stub = Stub::new(Ok(vec!["127.0.0.1".parse().unwrap()]));
    let (mut client, task) = start(config.clone(), stub.clone());
    client.write_all(&head).await.unwrap();
    assert!(read_answer(&mut client)
        .await
        .starts_with("HTTP/1.1 403 Forbidden\r\n"));
    assert_eq!(outcome(task).await, Outcome::Refused(Rejection::Address));
    assert_never_dialed(&listener).await;
    assert_eq!(*stub.asked.lock().unwrap(), ["real.vendor.test"]);

    // A resolver failure: 502.
    let stub = Stub::new(Err("SERVFAIL".into()));
    let (mut client, task) = start(config.clone(), stub.clone());
    client.write_all(&head).await.unwrap();
    assert!(read_answer(&mut client)
        .await
        .starts_with("HTTP/1.1 502 Bad Gateway\r\n"));
    assert_eq!(outcome(task).await, Outcome::Refused(Rejection::Resolve));
    assert_never_dialed(&listener).await;

    // An unlisted name never reaches the resolver.
    let stub = Stub::new(Ok(vec!["127.0.0.1".parse().unwrap()]));
    let (mut client, task) = start(config, stub.clone());
    client
        .write_all(
            format!("CONNECT unlisted.test:{port} HTTP/1.1\r\nHost: unlisted.test:{port}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    assert!(read_answer(&mut client).await.starts_with("HTTP/1.1 403 "));
    assert_eq!(outcome(task).await, Outcome::Refused(Rejection::NotAllowed));
    assert!(stub.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_mapping_that_does_not_connect_is_502() {
    // Bind then drop a listener: its port is (almost surely) closed now.
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    drop(listener);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert!(read_answer(&mut client)
        .await
        .starts_with("HTTP/1.1 502 Bad Gateway\r\n"));
    assert_eq!(outcome(task).await, Outcome::UpstreamFailed);
}

/// A fresh directory for a socket under the system temp dir.
fn scratch(tag: &str) -> std::path::PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "cordon-egress-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    dir
}

async fn connect_unix(path: &Path) -> UnixStream {
    for _ in 0..200 {
        if let Ok(stream) = UnixStream::connect(path).await {
            return stream;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the proxy never listened");
}

#[tokio::test]
async fn over_max_tunnels_a_client_gets_503() {
    let (listener, mut config) = vendor().await;
    config.max_tunnels = 2;
    let head = connect_head(MAPPED, &listener);
    let _seen = serve_vendor(listener, 0, b"", true);
    let dir = scratch("busy");
    let path = dir.join("egress.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn({
        let path = path.clone();
        async move {
            serve_unix(&path, Arc::new(config), Arc::new(NoResolver), async {
                let _ = stopped.await;
            })
            .await
        }
    });
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut client = connect_unix(&path).await;
        client.write_all(&head).await.unwrap();
        assert_eq!(read_answer(&mut client).await, ESTABLISHED);
        held.push(client);
    }
    let mut third = connect_unix(&path).await;
    assert_eq!(
        read_answer(&mut third).await,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    // One tunnel ends: its slot is free again.
    drop(held.pop());
    let mut again = None;
    for _ in 0..100 {
        let mut client = connect_unix(&path).await;
        client.write_all(&head).await.unwrap();
        if read_answer(&mut client).await == ESTABLISHED {
            again = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the freed slot was never reused");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    assert!(!path.exists(), "the socket is removed at shutdown");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn serve_unix_replaces_a_stale_socket_only() {
    let dir = scratch("stale");
    let path = dir.join("egress.sock");
    // A stale socket: bound, then its listener gone.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_socket());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn({
        let path = path.clone();
        async move {
            serve_unix(
                &path,
                Arc::new(Config::default()),
                Arc::new(NoResolver),
                async {
                    let _ = stopped.await;
                },
            )
            .await
        }
    });
    let mut client = connect_unix(&path).await;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    client
        .write_all(b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_answer(&mut client).await.starts_with("HTTP/1.1 403 "));
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();

    // A regular file is refused and left alone.
    let file = dir.join("file.sock");
    std::fs::write(&file, b"keep me").unwrap();
    let err = serve_unix(
        &file,
        Arc::new(Config::default()),
        Arc::new(NoResolver),
        async {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    // A link, even to a stale socket, is refused: neither it nor its target is removed.
    let target = dir.join("target.sock");
    drop(std::os::unix::net::UnixListener::bind(&target).unwrap());
    let link = dir.join("link.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = serve_unix(
        &link,
        Arc::new(Config::default()),
        Arc::new(NoResolver),
        async {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(&target)
        .unwrap()
        .file_type()
        .is_socket());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// These rules left out of `config`.
fn skipping(mut config: Config, rules: &[Rule]) -> Config {
    config.rules.skip = rules.iter().copied().collect();
    config
}

/// Every way to leave out one rule other than `rule`, and leaving out none.
fn all_but(rule: Rule) -> Vec<Vec<Rule>> {
    let mut others: Vec<Vec<Rule>> = Rule::ALL
        .into_iter()
        .filter(|r| *r != rule)
        .map(|r| vec![r])
        .collect();
    others.push(vec![]);
    others
}

#[tokio::test]
async fn skipping_sni_relays_raw_bytes_and_nothing_else_does() {
    let raw: &[u8] = b"GET / HTTP/1.1\r\nHost: fake.vendor.test\r\n\r\n";
    // Left out: the plain bytes reach the vendor, and its answer comes back.
    let (listener, config) = vendor().await;
    let head = connect_head(MAPPED, &listener);
    let seen = serve_vendor(listener, raw.len(), b"plain back", false);
    let (mut client, task) = start(skipping(config, &[Rule::Sni]), Arc::new(NoResolver));
    client.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    client.write_all(raw).await.unwrap();
    let mut back = [0u8; 10];
    timeout(Duration::from_secs(5), client.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"plain back");
    client.shutdown().await.unwrap();
    assert_eq!(
        outcome(task).await,
        Outcome::Relayed {
            up: raw.len() as u64,
            down: 10,
            end: End::Closed
        }
    );
    seen.settled().await;
    assert_eq!(seen.bytes(), raw);

    // In force (whatever else is left out): closed, nothing forwarded.
    for skip in all_but(Rule::Sni) {
        let (listener, config) = vendor().await;
        let head = connect_head(MAPPED, &listener);
        let seen = serve_vendor(listener, 1, b"", false);
        let (mut client, task) = start(skipping(config, &skip), Arc::new(NoResolver));
        client.write_all(&head).await.unwrap();
        assert_eq!(read_answer(&mut client).await, ESTABLISHED);
        client.write_all(raw).await.unwrap();
        assert_eq!(
            outcome(task).await,
            Outcome::HelloRefused("not a handshake record"),
            "{skip:?}"
        );
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        seen.settled().await;
        assert!(
            seen.bytes().is_empty(),
            "{skip:?}: bytes reached the vendor"
        );
    }
}

#[tokio::test]
async fn skipping_the_method_rule_tunnels_a_get_without_forwarding_its_head() {
    let get = format!("GET http://{MAPPED}/ HTTP/1.1\r\nHost: {MAPPED}\r\n\r\n");
    let with_80 = |mut config: Config| {
        let mut entries: Vec<String> = config
            .rules
            .allowlist
            .entries()
            .iter()
            .map(ToString::to_string)
            .collect();
        entries.push(format!("{MAPPED}:80"));
        config.rules.allowlist = Allowlist::parse(&entries).unwrap();
        config
    };
    // Left out: 200, then the tunnel as for a CONNECT (its ClientHello checked), the GET's head
    // never forwarded.
    let (listener, config) = vendor().await;
    let hello = real_hello(MAPPED);
    let seen = serve_vendor(listener, hello.len(), b"ok", false);
    let config = skipping(with_80(config), &[Rule::Method]);
    let (mut client, task) = start(config, Arc::new(NoResolver));
    client.write_all(get.as_bytes()).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    client.write_all(&hello).await.unwrap();
    let mut back = [0u8; 2];
    timeout(Duration::from_secs(5), client.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(
        outcome(task).await,
        Outcome::Relayed {
            up: hello.len() as u64,
            down: 2,
            end: End::Closed
        }
    );
    seen.settled().await;
    assert_eq!(seen.bytes(), hello, "only the tunnel's bytes, not the GET");

    // In force: 405, nothing dialed.
    for skip in all_but(Rule::Method) {
        let (listener, config) = vendor().await;
        let (mut client, task) = start(skipping(with_80(config), &skip), Arc::new(NoResolver));
        client.write_all(get.as_bytes()).await.unwrap();
        assert!(read_answer(&mut client)
            .await
            .starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert_eq!(
            outcome(task).await,
            Outcome::Refused(Rejection::Method),
            "{skip:?}"
        );
        assert_never_dialed(&listener).await;
    }
}

#[tokio::test]
async fn skipping_the_allowlist_dials_an_unlisted_mapped_name() {
    let (listener, _) = vendor().await;
    let port = listener.local_addr().unwrap().port();
    let head =
        format!("CONNECT unlisted.test:{port} HTTP/1.1\r\nHost: unlisted.test:{port}\r\n\r\n");
    let with_mapping = |skip: &[Rule]| {
        let mut config = Config {
            hello_deadline: Duration::from_secs(5),
            ..Config::default()
        };
        config.rules.mappings =
            vec![Mapping::parse(&format!("unlisted.test=127.0.0.1:{port}")).unwrap()];
        skipping(config, skip)
    };
    for skip in all_but(Rule::Allowlist) {
        let (mut client, task) = start(with_mapping(&skip), Arc::new(NoResolver));
        client.write_all(head.as_bytes()).await.unwrap();
        assert!(read_answer(&mut client).await.starts_with("HTTP/1.1 403 "));
        assert_eq!(
            outcome(task).await,
            Outcome::Refused(Rejection::NotAllowed),
            "{skip:?}"
        );
        assert_never_dialed(&listener).await;
    }
    let (mut client, task) = start(with_mapping(&[Rule::Allowlist]), Arc::new(NoResolver));
    client.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    assert!(
        timeout(Duration::from_secs(5), listener.accept())
            .await
            .is_ok(),
        "the mapping was dialed"
    );
    drop(client);
    assert!(matches!(outcome(task).await, Outcome::HelloRefused(_)));
}

#[tokio::test]
async fn skipping_the_address_rule_dials_a_denied_answer() {
    let (listener, config) = vendor().await;
    let port = listener.local_addr().unwrap().port();
    let head = format!(
        "CONNECT real.vendor.test:{port} HTTP/1.1\r\nHost: real.vendor.test:{port}\r\n\r\n"
    );
    let loopback = || Stub::new(Ok(vec!["127.0.0.1".parse().unwrap()]));
    for skip in all_but(Rule::Address) {
        let (mut client, task) = start(skipping(config.clone(), &skip), loopback());
        client.write_all(head.as_bytes()).await.unwrap();
        assert!(read_answer(&mut client).await.starts_with("HTTP/1.1 403 "));
        assert_eq!(
            outcome(task).await,
            Outcome::Refused(Rejection::Address),
            "{skip:?}"
        );
        assert_never_dialed(&listener).await;
    }
    // Left out: the loopback answer is dialed (and reported as dialed).
    let (client, server) = tokio::io::duplex(64 * 1024);
    let skip = skipping(config.clone(), &[Rule::Address]);
    let task = tokio::spawn(async move {
        let resolver = loopback();
        handle_reported(server, &skip, &*resolver).await
    });
    let mut client = client;
    client.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(read_answer(&mut client).await, ESTABLISHED);
    assert!(timeout(Duration::from_secs(5), listener.accept())
        .await
        .is_ok());
    drop(client);
    let report = timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        report.dialed,
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    );
    assert_eq!(
        report.target.map(|t| t.to_string()),
        Some(format!("real.vendor.test:{port}"))
    );
    // An empty answer or a resolver failure still refuses.
    for (answer, want) in [
        (Ok(vec![]), Rejection::Address),
        (Err("SERVFAIL".to_owned()), Rejection::Resolve),
    ] {
        let (mut client, task) = start(
            skipping(config.clone(), &[Rule::Address]),
            Stub::new(answer),
        );
        client.write_all(head.as_bytes()).await.unwrap();
        let _ = read_answer(&mut client).await;
        assert_eq!(outcome(task).await, Outcome::Refused(want));
        assert_never_dialed(&listener).await;
    }
}

#[tokio::test]
async fn a_report_carries_the_target_dialed_address_and_detail() {
    let (listener, config) = vendor().await;
    let port = listener.local_addr().unwrap().port();
    // Refused by the allowlist: the target as parsed.
    let (client, server) = tokio::io::duplex(4096);
    let mut client = client;
    client
        .write_all(b"CONNECT EVIL.example.:443 HTTP/1.1\r\nHost: EVIL.example.:443\r\n\r\n")
        .await
        .unwrap();
    let report = handle_reported(server, &config, &NoResolver).await;
    assert_eq!(report.outcome, Outcome::Refused(Rejection::NotAllowed));
    assert_eq!(
        report.target.map(|t| t.to_string()).as_deref(),
        Some("evil.example:443")
    );
    assert_eq!((report.dialed, report.detail), (None, None));
    // A head that does not parse: no target.
    let (mut client, server) = tokio::io::duplex(4096);
    client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let report = handle_reported(server, &config, &NoResolver).await;
    assert_eq!(
        (report.outcome, report.target),
        (Outcome::Refused(Rejection::Method), None)
    );
    // The resolver's error and the denied address are the detail.
    for (answer, want) in [
        (Err("no resolver".to_owned()), "no resolver"),
        (
            Ok(vec!["10.1.2.3".parse().unwrap()]),
            "10.1.2.3 is denied (private)",
        ),
    ] {
        let (mut client, server) = tokio::io::duplex(4096);
        client
            .write_all(format!("CONNECT real.vendor.test:{port} HTTP/1.1\r\nHost: real.vendor.test:{port}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let report = handle_reported(server, &config, &*Stub::new(answer)).await;
        assert_eq!(report.detail.as_deref(), Some(want));
    }
    drop(listener);
}

/// Collects what [`serve_unix_with`] reports.
#[derive(Default)]
struct Collect {
    listening: Mutex<Vec<std::path::PathBuf>>,
    reports: Mutex<Vec<Report>>,
}

impl Observe for Collect {
    fn listening(&self, path: &Path) {
        self.listening.lock().unwrap().push(path.to_owned());
    }

    fn ended(&self, report: &Report) {
        self.reports.lock().unwrap().push(report.clone());
    }
}

impl Collect {
    async fn reported(&self, n: usize) -> Vec<Report> {
        for _ in 0..500 {
            let reports = self.reports.lock().unwrap().clone();
            if reports.len() >= n {
                return reports;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("fewer than {n} reports");
    }
}

#[tokio::test]
async fn serve_unix_reports_each_connection_and_ends_tunnels_at_shutdown() {
    let (listener, config) = vendor().await;
    let port = listener.local_addr().unwrap().port();
    let head = connect_head(MAPPED, &listener);
    let hello = real_hello(MAPPED);
    let _seen = serve_vendor(listener, hello.len(), b"ok", true);
    let dir = scratch("observe");
    let path = dir.join("egress.sock");
    let observer = Arc::new(Collect::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn({
        let (path, observer) = (path.clone(), observer.clone());
        async move {
            serve_unix_with(
                &path,
                Arc::new(config),
                Arc::new(NoResolver),
                async {
                    let _ = stopped.await;
                },
                observer,
            )
            .await
        }
    });
    let mut refused = connect_unix(&path).await;
    assert_eq!(
        *observer.listening.lock().unwrap(),
        std::slice::from_ref(&path)
    );
    refused
        .write_all(b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_answer(&mut refused).await.starts_with("HTTP/1.1 403 "));
    let reports = observer.reported(1).await;
    assert_eq!(reports[0].outcome, Outcome::Refused(Rejection::NotAllowed));

    // A tunnel still open at shutdown ends as such, and is reported.
    let mut tunnel = connect_unix(&path).await;
    tunnel.write_all(&head).await.unwrap();
    assert_eq!(read_answer(&mut tunnel).await, ESTABLISHED);
    tunnel.write_all(&hello).await.unwrap();
    let mut back = [0u8; 2];
    tunnel.read_exact(&mut back).await.unwrap();
    // And a client that never finishes its head.
    let mut slow = connect_unix(&path).await;
    slow.write_all(b"CONN").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.send(()).unwrap();
    timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let mut reports = observer.reported(3).await;
    reports.remove(0);
    reports.sort_by_key(|r| r.target.is_none());
    assert_eq!(
        reports[0],
        Report {
            target: Some(Connect {
                name: Name::parse(MAPPED).unwrap(),
                port
            }),
            dialed: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            outcome: Outcome::Relayed {
                up: hello.len() as u64,
                down: 2,
                end: End::Shutdown
            },
            detail: None,
        }
    );
    assert_eq!(reports[1].outcome, Outcome::Shutdown);
    assert!(!path.exists());
    let mut rest = Vec::new();
    tunnel.read_to_end(&mut rest).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn serve_unix_leaves_a_socket_that_replaced_its_own() {
    let dir = scratch("replaced");
    let path = dir.join("egress.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn({
        let path = path.clone();
        async move {
            serve_unix(
                &path,
                Arc::new(Config::default()),
                Arc::new(NoResolver),
                async {
                    let _ = stopped.await;
                },
            )
            .await
        }
    });
    drop(connect_unix(&path).await);
    std::fs::remove_file(&path).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket(),
        "another's socket is left alone"
    );
    drop(other);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The proxy's whole path for a terminated vendor host, beside an allowed host it only tunnels:
/// each name is mapped to a fake vendor on loopback with the vendor's own certificate; the one
/// behind the terminated name takes only the real key, the other takes exactly the sentinel (so
/// a 200 there proves the sentinel arrived unchanged).
mod terminated {
    use super::*;
    use crate::terminate::{client_config, server_config, Key, Terminator};
    use crate::vault::Termination;
    use crate::vendor::{Budget, CredentialHeader};
    use cordon_fake_vendor::tls::{self as fake, Auth, Identity};
    use rustls::pki_types::ServerName;

    pub(super) const KEY: &str = "sk-the-real-key";
    pub(super) const SENTINEL: &str = "sk-ant-api03-sentinel-of-this-invocationAA";
    pub(super) const API: &str = "api.vendor.test";
    pub(super) const OTHER: &str = "other.vendor.test";

    pub(super) struct World {
        pub(super) config: Arc<Config>,
        pub(super) api: fake::Server,
        other: fake::Server,
        /// What the vendor's own certificates chain to.
        vendor_ca: String,
        /// What the proxy's leaf for the vendor host chains to.
        pub(super) invocation_ca: String,
    }

    pub(super) async fn world() -> World {
        world_skipping(&[]).await
    }

    /// The world with `skip` left out of the proxy's rules (a gate case's removal).
    async fn world_skipping(skip: &[Rule]) -> World {
        let vendor = cordon_fake_vendor::ca::generate(&[API, OTHER]).unwrap();
        let identity = Identity {
            cert_pem: vendor.cert_pem.clone(),
            key_pem: vendor.key_pem.clone(),
        };
        let listen = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
        let takes = |key: &str| Auth::from_hex(&Auth::hex_of(key));
        let api = fake::start_with(listen().await, &identity, takes(KEY)).unwrap();
        let other = fake::start_with(listen().await, &identity, takes(SENTINEL)).unwrap();
        let invocation = cordon_fake_vendor::ca::generate(&[API]).unwrap();
        let terminator = Terminator::new(
            API,
            CredentialHeader::ApiKey,
            SENTINEL.into(),
            Key::new(KEY.into()).unwrap(),
            Budget::default(),
            server_config(
                invocation.cert_pem.as_bytes(),
                invocation.key_pem.as_bytes(),
            )
            .unwrap(),
            client_config(Some(vendor.ca_pem.as_bytes())).unwrap(),
        );
        let rules = Rules {
            allowlist: Allowlist::parse(&[API, &format!("{API}:8443"), OTHER]).unwrap(),
            mappings: vec![
                Mapping::parse(&format!("{API}={}", api.addr())).unwrap(),
                Mapping::parse(&format!("{OTHER}={}", other.addr())).unwrap(),
            ],
            host_own: vec![],
            skip: skip.iter().copied().collect(),
        };
        let config = Config {
            terminate: Some(Termination {
                name: Name::parse(API).unwrap(),
                port: 443,
                ca_sha256: String::new(),
                terminator: Arc::new(terminator),
            }),
            ..Config::new(rules)
        };
        World {
            config: Arc::new(config),
            api,
            other,
            vendor_ca: vendor.ca_pem,
            invocation_ca: invocation.ca_pem,
        }
    }

    /// CONNECT to `name:443` through a proxy task, then a TLS handshake trusting `ca` alone
    /// (besides the public roots, which trust no test certificate).
    pub(super) async fn open(
        world: &World,
        name: &str,
        ca: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<DuplexStream>> {
        open_at(world, name, 443, ca).await
    }

    async fn open_at(
        world: &World,
        name: &str,
        port: u16,
        ca: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<DuplexStream>> {
        let (mut client, proxy_side) = tokio::io::duplex(64 * 1024);
        let config = world.config.clone();
        tokio::spawn(async move { handle(proxy_side, &config, &NoResolver).await });
        client
            .write_all(
                format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n").as_bytes(),
            )
            .await?;
        let mut answer = [0u8; 39];
        client.read_exact(&mut answer).await?;
        assert_eq!(&answer[..], b"HTTP/1.1 200 Connection Established\r\n\r\n");
        let server_name = ServerName::try_from(name.to_owned()).unwrap();
        tokio_rustls::TlsConnector::from(client_config(Some(ca.as_bytes())).unwrap())
            .connect(server_name, client)
            .await
    }

    /// One request with `x-api-key: credential`; the status and the whole answer.
    async fn ask(
        tls: &mut tokio_rustls::client::TlsStream<DuplexStream>,
        name: &str,
        path: &str,
        credential: &str,
    ) -> (u16, String) {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {name}\r\nx-api-key: {credential}\r\nConnection: close\r\n\r\n"
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        // The close may come without a TLS close_notify: what was read counts.
        let _ = timeout(Duration::from_secs(10), tls.read_to_end(&mut answer)).await;
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, text)
    }

    #[tokio::test]
    async fn the_vendor_host_is_terminated_with_the_invocations_ca_and_the_key_swapped_in() {
        let w = world().await;
        // The agent trusting only the invocation's CA gets a handshake: the leaf is the proxy's.
        let mut tls = open(&w, API, &w.invocation_ca).await.unwrap();
        let (status, text) = ask(&mut tls, API, "/api/claude_code/settings", SENTINEL).await;
        // The fake takes only the key: a 200 means the sentinel was swapped for it.
        assert_eq!(status, 200, "{text}");
        assert!(!text.contains(KEY), "{text}");
        // The vendor's own certificate is never what the agent sees there.
        assert!(open(&w, API, &w.vendor_ca).await.is_err());
        // Refused at the proxy, never forwarded: another path, another credential.
        let before = w.api.seen().len();
        let mut tls = open(&w, API, &w.invocation_ca).await.unwrap();
        let (status, text) = ask(&mut tls, API, "/api/event_logging/batch", SENTINEL).await;
        assert_eq!(status, 403, "{text}");
        assert!(text.contains("x-cordon-refusal: vendor-path"), "{text}");
        let mut tls = open(&w, API, &w.invocation_ca).await.unwrap();
        let (status, text) = ask(&mut tls, API, "/api/claude_code/settings", "sk-mine").await;
        assert_eq!(status, 401, "{text}");
        assert!(
            text.contains("x-cordon-refusal: vendor-credential"),
            "{text}"
        );
        assert_eq!(w.api.seen().len(), before, "{:?}", w.api.seen());
    }

    #[tokio::test]
    async fn another_allowed_host_is_an_opaque_tunnel_and_the_sentinel_arrives_unchanged() {
        let w = world().await;
        // The vendor's own certificate: not terminated.
        let mut tls = open(&w, OTHER, &w.vendor_ca).await.unwrap();
        // That fake takes exactly the sentinel: a 200 means it arrived as the agent sent it.
        let (status, text) = ask(&mut tls, OTHER, "/api/claude_code/settings", SENTINEL).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(w.other.seen().len(), 1);
        // Any path goes through a tunnel: the route policy is the terminated host's alone.
        let mut tls = open(&w, OTHER, &w.vendor_ca).await.unwrap();
        let (status, _) = ask(&mut tls, OTHER, "/ping", SENTINEL).await;
        assert_eq!(status, 200);
        // The invocation's CA vouches for nothing there.
        assert!(open(&w, OTHER, &w.invocation_ca).await.is_err());
    }

    /// The sentinel is swapped at its host and port alone: another allowed port of the same name
    /// is an opaque tunnel, where the vendor sees the sentinel. With the port binding left out
    /// (`host-bound`) that port is terminated and the vendor there gets the key.
    #[tokio::test]
    async fn another_port_of_the_vendor_host_is_a_tunnel_unless_the_binding_is_left_out() {
        let w = world().await;
        let mut tls = open_at(&w, API, 8443, &w.vendor_ca).await.unwrap();
        let (status, text) = ask(&mut tls, API, "/api/claude_code/settings", SENTINEL).await;
        // The fake at API takes only the key: 401 means the sentinel arrived as sent.
        assert_eq!(status, 401, "{text}");
        let w = world_skipping(&[Rule::HostBound]).await;
        let mut tls = open_at(&w, API, 8443, &w.invocation_ca).await.unwrap();
        let (status, text) = ask(&mut tls, API, "/api/claude_code/settings", SENTINEL).await;
        assert_eq!(status, 200, "{text}");
    }

    /// With termination left out the vendor host is an opaque tunnel: its own certificate, and
    /// the sentinel reaches it unchanged (refused there).
    #[tokio::test]
    async fn with_termination_left_out_the_vendor_host_is_a_tunnel() {
        let w = world_skipping(&[Rule::Terminate]).await;
        assert!(open(&w, API, &w.invocation_ca).await.is_err());
        let mut tls = open(&w, API, &w.vendor_ca).await.unwrap();
        let (status, text) = ask(&mut tls, API, "/api/claude_code/settings", SENTINEL).await;
        assert_eq!(status, 401, "{text}");
        assert!(!text.contains("x-cordon-refusal"), "{text}");
    }
}

/// Hostile requests through the whole path (CONNECT, the ClientHello check, the terminator with
/// the invocation's leaf): every spelling of the terminated host is terminated, never tunnelled;
/// each request-level shape is refused with its status and id, and none reaches the vendor.
mod terminated_hostile {
    use super::terminated::*;
    use super::*;
    use crate::terminate::client_config;
    use rustls::pki_types::ServerName;

    /// Raw bytes through a fresh terminated connection to `name`; `answers` responses (each
    /// with a length), or what came before the connection closed.
    async fn raw_exchange(world: &World, name: &str, bytes: &[u8], answers: usize) -> String {
        let mut tls = open(world, name, &world.invocation_ca).await.unwrap();
        tls.write_all(bytes).await.unwrap();
        let mut answer = Vec::new();
        let complete = |text: &str| {
            let mut rest = text;
            for _ in 0..answers {
                let Some(end) = rest.find("\r\n\r\n") else {
                    return false;
                };
                let length: usize = rest[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let Some(next) = rest.get(end + 4 + length..) else {
                    return false;
                };
                rest = next;
            }
            true
        };
        let mut buf = [0u8; 4096];
        while !complete(&String::from_utf8_lossy(&answer)) {
            match timeout(Duration::from_secs(10), tls.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn every_spelling_of_the_vendor_host_is_terminated() {
        let w = world().await;
        for spelling in ["API.VENDOR.TEST", "Api.Vendor.Test.", "api.vendor.test."] {
            // The invocation's CA verifies the leaf (SNI the canonical name): terminated.
            let (mut client, proxy_side) = tokio::io::duplex(64 * 1024);
            let config = w.config.clone();
            tokio::spawn(async move { handle(proxy_side, &config, &NoResolver).await });
            let connect =
                format!("CONNECT {spelling}:443 HTTP/1.1\r\nHost: {spelling}:443\r\n\r\n");
            client.write_all(connect.as_bytes()).await.unwrap();
            let mut answer = [0u8; 39];
            client.read_exact(&mut answer).await.unwrap();
            assert_eq!(
                &answer[..],
                b"HTTP/1.1 200 Connection Established\r\n\r\n",
                "{spelling}"
            );
            let name = ServerName::try_from(API.to_owned()).unwrap();
            let tls = tokio_rustls::TlsConnector::from(
                client_config(Some(w.invocation_ca.as_bytes())).unwrap(),
            )
            .connect(name, client)
            .await;
            assert!(tls.is_ok(), "{spelling}: not terminated");
        }
    }

    #[tokio::test]
    async fn request_shapes_are_refused_with_their_id_and_never_reach_the_vendor() {
        let w = world().await;
        let key = format!("x-api-key: {SENTINEL}\r\n");
        let get = |extra: &str| {
            format!("GET /api/claude_code/settings HTTP/1.1\r\nHost: {API}\r\n{key}{extra}\r\n")
        };
        let post = |extra: &str, body: &str| {
            format!("POST /v1/messages?beta=true HTTP/1.1\r\nHost: {API}\r\n{key}{extra}\r\n{body}")
        };
        let cases: Vec<(&str, String, &str)> = vec![
            ("two equal lengths", post("Content-Length: 2\r\nContent-Length: 2\r\n", "{}"), "400"),
            ("two lengths", post("Content-Length: 2\r\nContent-Length: 3\r\n", "{}"), "400"),
            (
                "length and chunked",
                post("Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"),
                "400",
            ),
            ("chunked", post("Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"), "400"),
            ("obs-fold", get("X-Fold: a\r\n b\r\n"), "400"),
            (
                "bare LF",
                format!("GET /api/claude_code/settings HTTP/1.1\nHost: {API}\n{key}\n"),
                "400",
            ),
            (
                "absolute form",
                format!("GET https://{API}/api/claude_code/settings HTTP/1.1\r\nHost: {API}\r\n{key}\r\n"),
                "vendor-path",
            ),
            (
                "another Host",
                format!("GET /api/claude_code/settings HTTP/1.1\r\nHost: {OTHER}\r\n{key}\r\n"),
                "vendor-path",
            ),
            ("two Hosts", get(&format!("Host: {OTHER}\r\n")), "vendor-path"),
            ("h2c upgrade", get("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"), "400"),
            ("expect", post("Content-Length: 2\r\nExpect: 100-continue\r\n", "{}"), "400"),
            ("a 64 MiB body", post("Content-Length: 67108864\r\n", ""), "413"),
            ("HTTP/1.0", format!("GET /api/claude_code/settings HTTP/1.0\r\nHost: {API}\r\n{key}\r\n"), "vendor-malformed"),
            ("the sentinel in the query", format!("GET /api/claude_code/settings?k={SENTINEL} HTTP/1.1\r\nHost: {API}\r\n{key}\r\n"), "vendor-path"),
            ("a second key header", get(&format!("X-Api-Key: {SENTINEL}\r\n")), "vendor-credential"),
            ("the sentinel as a cookie", get(&format!("Cookie: k={SENTINEL}\r\n")), "vendor-credential"),
        ];
        let before = w.api.seen().len();
        for (what, request, expected) in cases {
            let answer = raw_exchange(&w, API, request.as_bytes(), 1).await;
            let line = answer.lines().next().unwrap_or("");
            let refused_as = answer
                .lines()
                .find_map(|l| l.strip_prefix("x-cordon-refusal: "))
                .unwrap_or("");
            let matches = if expected.starts_with("vendor-") {
                refused_as == expected
            } else {
                line.starts_with(&format!("HTTP/1.1 {expected}"))
            };
            assert!(matches, "{what}: {answer:?}");
            assert!(!answer.contains(KEY), "{what}");
        }
        assert_eq!(w.api.seen().len(), before, "{:?}", w.api.seen());
        // Pipelined: both answered, in order, each swapped.
        let two = format!("{}{}", get(""), get("Connection: close\r\n"));
        let answer = raw_exchange(&w, API, two.as_bytes(), 2).await;
        assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
        assert_eq!(w.api.seen().len(), before + 2);
    }
}
