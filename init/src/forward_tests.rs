//! The forwarder on this host: a unix echo server in a temp dir stands in for the proxy, the
//! forwarder listens on an ephemeral loopback port.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicU32;
use std::sync::mpsc;

use super::*;

const PROMPT: Duration = Duration::from_secs(2);

/// A temp dir removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cordon-forward-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn socket(&self) -> PathBuf {
        self.0.join("egress.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the stand-in proxy does with each connection.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// Echo every byte; at EOF shut down its write half.
    Echo,
    /// Read to EOF, then answer with everything it read and a trailer, then close.
    AfterEof,
    /// Send a greeting, shut down its write half, then read to EOF and report the bytes.
    GreetFirst,
}

const TRAILER: &[u8] = b"--the end--";
const GREETING: &[u8] = b"hello from the proxy";

/// Serve `path` on threads; every connection's bytes read are reported on the channel when it
/// ends.
fn serve(path: &Path, server: Server) -> mpsc::Receiver<Vec<u8>> {
    let listener = UnixListener::bind(path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                if let Server::GreetFirst = server {
                    let _ = conn.write_all(GREETING);
                    let _ = conn.shutdown(Shutdown::Write);
                }
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            seen.extend_from_slice(&buf[..n]);
                            if let Server::Echo = server {
                                if conn.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                }
                match server {
                    Server::Echo => {
                        let _ = conn.shutdown(Shutdown::Write);
                    }
                    Server::AfterEof => {
                        let _ = conn.write_all(&seen);
                        let _ = conn.write_all(TRAILER);
                    }
                    Server::GreetFirst => {}
                }
                let _ = tx.send(seen);
            });
        }
    });
    rx
}

fn forwarder(socket: PathBuf, max: usize, idle: Duration) -> Forwarder {
    start(Config {
        port: 0,
        socket,
        max,
        idle,
    })
    .unwrap()
}

fn connect(f: &Forwarder) -> TcpStream {
    let tcp = TcpStream::connect(f.local).unwrap();
    tcp.set_read_timeout(Some(PROMPT)).unwrap();
    tcp
}

/// One echo round trip: the bytes come back unchanged.
fn echo(tcp: &mut TcpStream, bytes: &[u8]) {
    tcp.write_all(bytes).unwrap();
    let mut back = vec![0u8; bytes.len()];
    tcp.read_exact(&mut back).unwrap();
    assert_eq!(back, bytes);
}

/// The connection was closed by the forwarder: EOF (or a reset), promptly.
fn assert_closed(tcp: &mut TcpStream) {
    let t = Instant::now();
    let mut buf = [0u8; 16];
    // A read with a receive timeout is not restarted after a stop or a freeze (signal(7)): CI saw
    // EINTR here once; try again.
    let got = loop {
        match tcp.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => break other,
        }
    };
    match got {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
    assert!(t.elapsed() < PROMPT, "closed after {:?}", t.elapsed());
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < PROMPT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::SeqCst)
}

#[test]
fn listens_on_ipv4_loopback_only_and_names_itself() {
    let dir = TempDir::new();
    let f = forwarder(dir.socket(), 4, IDLE);
    assert_eq!(*f.local.ip(), Ipv4Addr::LOCALHOST);
    assert_ne!(f.local.port(), 0);
    // The port is taken now: a second forwarder on it fails, naming the address.
    let again = start(Config {
        port: f.local.port(),
        ..Config::new(&EgressForward {
            port: 1,
            socket: "/x".into(),
        })
    })
    .unwrap_err();
    assert!(
        again.contains(&format!("bind 127.0.0.1:{}", f.local.port())),
        "{again}"
    );
    let policy = Config::new(&EgressForward {
        port: cordon_contract::egress::FORWARD_PORT,
        socket: cordon_contract::egress::SOCKET.into(),
    });
    assert_eq!(policy.max, MAX_FORWARDED);
    assert_eq!(policy.port, 3128);
}

#[test]
fn echoes_through_the_socket() {
    let dir = TempDir::new();
    let seen = serve(&dir.socket(), Server::Echo);
    let f = forwarder(dir.socket(), 4, IDLE);
    let mut tcp = connect(&f);
    echo(
        &mut tcp,
        b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n",
    );
    // More than one buffer, both ways at once (a writer thread): the directions are independent.
    let big: Vec<u8> = (0..=250u8).cycle().take(BUFFER * 5 + 123).collect();
    let mut writer = tcp.try_clone().unwrap();
    let sent = big.clone();
    let t = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    tcp.read_to_end(&mut back).unwrap();
    t.join().unwrap();
    assert_eq!(back, big);
    let mut whole = b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n".to_vec();
    whole.extend_from_slice(&big);
    assert_eq!(seen.recv_timeout(PROMPT).unwrap(), whole);
    wait_for("the connection to end and free its slot", || {
        load(&f.stats.closed) == 1 && f.stats.active.load(Ordering::SeqCst) == 0
    });
}

/// Send one byte of TCP urgent data (MSG_OOB) on `fd`.
fn send_urgent(fd: BorrowedFd<'_>, byte: u8) {
    // SAFETY: send(2) reads one byte of a live local, on a socket the test owns.
    let sent = unsafe { libc::send(fd.as_raw_fd(), [byte].as_ptr().cast(), 1, libc::MSG_OOB) };
    assert_eq!(sent, 1);
}

/// TCP urgent data from the client: splice(2) reads no further than the urgent mark, so the
/// forwarder takes what follows it with recv(2), which leaves the urgent byte out (as any reader
/// without SO_OOBINLINE does, and as the copying forwarder did). The stream goes on, both
/// mid-stream and with the mark right before the client's EOF.
#[test]
fn urgent_data_is_passed_over_and_the_stream_goes_on() {
    let dir = TempDir::new();
    let seen = serve(&dir.socket(), Server::Echo);
    let f = forwarder(dir.socket(), 4, IDLE);
    let mut tcp = connect(&f);
    echo(&mut tcp, b"before");
    send_urgent(tcp.as_fd(), b'!');
    echo(&mut tcp, b"after");
    send_urgent(tcp.as_fd(), b'?');
    tcp.write_all(b"last").unwrap();
    tcp.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    tcp.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"last");
    assert_eq!(seen.recv_timeout(PROMPT).unwrap(), b"beforeafterlast");
    wait_for("the connection to end", || load(&f.stats.closed) == 1);
}

/// The client shuts down its write half: the proxy sees EOF, and its remaining bytes still
/// arrive.
#[test]
fn a_client_half_close_still_gets_the_answer() {
    let dir = TempDir::new();
    let seen = serve(&dir.socket(), Server::AfterEof);
    let f = forwarder(dir.socket(), 4, IDLE);
    let mut tcp = connect(&f);
    tcp.write_all(b"request").unwrap();
    tcp.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    tcp.read_to_end(&mut back).unwrap();
    assert_eq!(back, [b"request".as_slice(), TRAILER].concat());
    assert_eq!(seen.recv_timeout(PROMPT).unwrap(), b"request");
    wait_for("the connection to end", || load(&f.stats.closed) == 1);
}

/// The proxy shuts down its write half first: the client sees EOF, and what it sends afterwards
/// still reaches the proxy.
#[test]
fn a_proxy_half_close_still_takes_the_client_bytes() {
    let dir = TempDir::new();
    let seen = serve(&dir.socket(), Server::GreetFirst);
    let f = forwarder(dir.socket(), 4, IDLE);
    let mut tcp = connect(&f);
    let mut greeting = Vec::new();
    tcp.read_to_end(&mut greeting).unwrap();
    assert_eq!(greeting, GREETING);
    tcp.write_all(b"still talking").unwrap();
    tcp.shutdown(Shutdown::Write).unwrap();
    assert_eq!(seen.recv_timeout(PROMPT).unwrap(), b"still talking");
    wait_for("the connection to end", || load(&f.stats.closed) == 1);
}

/// No socket yet: the accepted connection is closed at once and the forwarder keeps serving;
/// once the proxy is there, the next connection goes through.
#[test]
fn an_absent_proxy_closes_the_connection_and_a_later_one_works() {
    let dir = TempDir::new();
    let f = forwarder(dir.socket(), 4, IDLE);
    for _ in 0..3 {
        let mut tcp = connect(&f);
        assert_closed(&mut tcp);
    }
    wait_for(
        "the connections to be counted and their slots freed",
        || load(&f.stats.unreachable) == 3 && f.stats.active.load(Ordering::SeqCst) == 0,
    );
    let _seen = serve(&dir.socket(), Server::Echo);
    let mut tcp = connect(&f);
    echo(&mut tcp, b"now it is there");
    assert_eq!(load(&f.stats.unreachable), 3);
}

/// At most `max` at once: one more is closed at once and counted; a freed slot takes the next.
#[test]
fn connections_beyond_the_bound_are_closed_at_once() {
    let dir = TempDir::new();
    let _seen = serve(&dir.socket(), Server::Echo);
    let f = forwarder(dir.socket(), 2, IDLE);
    let mut open: Vec<TcpStream> = (0..2).map(|_| connect(&f)).collect();
    for tcp in &mut open {
        echo(tcp, b"x");
    }
    assert_eq!(f.stats.active.load(Ordering::SeqCst), 2);
    let mut third = connect(&f);
    assert_closed(&mut third);
    assert_eq!(load(&f.stats.busy), 1);
    // The first ones are unaffected.
    echo(&mut open[1], b"still here");
    drop(open.remove(0));
    wait_for("a slot to be freed", || {
        f.stats.active.load(Ordering::SeqCst) == 1
    });
    let mut next = connect(&f);
    echo(&mut next, b"a freed slot");
    assert_eq!(load(&f.stats.busy), 1);
    assert_eq!(load(&f.stats.accepted), 4);
}

/// Nothing moving either way for the idle bound ends the connection; traffic in one direction
/// only keeps it alive.
#[test]
fn an_idle_connection_ends() {
    let dir = TempDir::new();
    let seen = serve(&dir.socket(), Server::Echo);
    let idle = Duration::from_millis(300);
    let f = forwarder(dir.socket(), 4, idle);
    let mut tcp = connect(&f);
    let t = Instant::now();
    for _ in 0..6 {
        std::thread::sleep(idle / 3);
        echo(&mut tcp, b"tick");
    }
    assert!(t.elapsed() > idle, "kept alive past one idle bound");
    let quiet = Instant::now();
    assert_closed(&mut tcp);
    assert!(quiet.elapsed() >= idle - Duration::from_millis(50));
    // The proxy's side is closed too.
    assert_eq!(seen.recv_timeout(PROMPT).unwrap().len(), 24);
    assert_eq!(load(&f.stats.idle), 1);
}

/// A reset from the client closes the proxy's side too.
#[test]
fn an_error_on_one_side_closes_both() {
    let dir = TempDir::new();
    let seen = serve(&dir.socket(), Server::Echo);
    let f = forwarder(dir.socket(), 4, IDLE);
    let mut tcp = connect(&f);
    echo(&mut tcp, b"before the reset");
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads the linger struct we own, within its size.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<libc::linger>()).unwrap(),
        )
    };
    assert_eq!(rc, 0);
    // Unread bytes on close make the reset certain.
    tcp.write_all(b"unanswered").unwrap();
    drop(tcp);
    let got = seen.recv_timeout(PROMPT).unwrap();
    assert!(got.starts_with(b"before the reset"));
    wait_for("the connection to end", || {
        f.stats.active.load(Ordering::SeqCst) == 0
    });
    assert_eq!(load(&f.stats.failed), 1, "closed {}", load(&f.stats.closed));
}

/// The forwarder's threads run under the filters the init installs, exactly as the init starts
/// them: in a child, the init's own filters are installed (TSYNC) on its only thread, then the
/// forwarder starts and forwards one connection; every thread of the child then reads back the
/// same `Seccomp_filters`, and the forwarding worked under them (socket families, clone3 refused,
/// clone without namespace flags allowed).
#[test]
fn the_forwarder_threads_run_under_the_init_filters() {
    let dir = TempDir::new();
    let _seen = serve(&dir.socket(), Server::Echo);
    let policy = crate::judge::tests::good_policy();
    let socket = dir.socket();
    // SAFETY: the child only installs filters, runs the forwarder and exits with _exit; it never
    // returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = (|| {
            let installed = match crate::seccomp::install(&policy) {
                Ok(n) if n > 0 => n,
                _ => return 10,
            };
            let Ok(f) = start(Config {
                port: 0,
                socket,
                max: 4,
                idle: IDLE,
            }) else {
                return 11;
            };
            let Ok(mut tcp) = TcpStream::connect(f.local) else {
                return 12;
            };
            let _ = tcp.set_read_timeout(Some(PROMPT));
            let mut back = [0u8; 2];
            if tcp.write_all(b"ok").is_err() || tcp.read_exact(&mut back).is_err() || back != *b"ok"
            {
                return 13;
            }
            let filters = |tid: &str| {
                std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
                    .ok()?
                    .lines()
                    .find_map(|l| l.strip_prefix("Seccomp_filters:"))?
                    .trim()
                    .parse::<u32>()
                    .ok()
            };
            let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
                return 14;
            };
            let counts: Vec<Option<u32>> = tasks
                .flatten()
                .map(|t| filters(&t.file_name().to_string_lossy()))
                .collect();
            // This thread, the accept thread and the connection's.
            if counts.len() < 3 {
                return 15;
            }
            let mine = filters(&nix::unistd::gettid().to_string());
            if mine.is_none_or(|n| n < installed) || counts.iter().any(|c| *c != mine) {
                return 16;
            }
            0
        })();
        // SAFETY: leave the child at once.
        unsafe { libc::_exit(code) };
    }
    let t = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: waiting for the child forked above.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            break;
        }
        if t.elapsed() > Duration::from_secs(20) {
            // SAFETY: killing the child forked above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status), "child died: {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "10 install, 11 start, 12 connect, 13 echo, 14 tasks, 15 threads, 16 a thread's filters"
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn round_trips(stream: &mut (impl Read + Write), n: usize) -> Vec<Duration> {
    let msg = [7u8; 32];
    let mut back = [0u8; 32];
    (0..n)
        .map(|_| {
            let t = Instant::now();
            stream.write_all(&msg).unwrap();
            stream.read_exact(&mut back).unwrap();
            t.elapsed()
        })
        .collect()
}

/// The round trip the forwarder adds, printed (never asserted: it depends on the machine).
#[test]
fn latency_of_a_small_echo_direct_and_forwarded() {
    let dir = TempDir::new();
    let _seen = serve(&dir.socket(), Server::Echo);
    let f = forwarder(dir.socket(), 4, IDLE);
    let mut direct = UnixStream::connect(dir.socket()).unwrap();
    let mut forwarded = connect(&f);
    forwarded.set_nodelay(true).unwrap();
    // Warm up both paths, then measure them interleaved in rounds (fair under other load).
    round_trips(&mut direct, 100);
    round_trips(&mut forwarded, 100);
    let (mut d, mut w) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        d.extend(round_trips(&mut direct, 100));
        w.extend(round_trips(&mut forwarded, 100));
    }
    let (dm, wm) = (median(d.clone()), median(w.clone()));
    let p99 = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() * 99 / 100]
    };
    println!(
        "echo of 32 bytes, median of {}: direct unix {dm:?}, forwarded {wm:?}, added {:?} \
         (p99 direct {:?}, forwarded {:?})",
        d.len(),
        wm.saturating_sub(dm),
        p99(d),
        p99(w)
    );
}
