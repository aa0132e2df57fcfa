//! The relay on this host: its socket in a temp dir, the host's stdio a socketpair the test
//! holds the other end of, each agent connection a plain `UnixStream`.

use std::io::{BufRead, BufReader};
use std::net::Shutdown;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use cordon_contract::command::Ran;
use nix::sys::signal::{raise, Signal};

use super::*;

/// How long a test waits for anything that should come.
const PROMPT: Duration = Duration::from_secs(5);
/// How long a test waits to be sure nothing comes.
const QUIET: Duration = Duration::from_millis(300);

/// The answer the host sends for `test`, as the peer must read it (canonical serde order).
const ANSWER: &str = r#"{"ran":{"name":"test","exit":0,"signal":null,"timed_out":false,"duration_ms":12,"output_bytes":3,"output":"ok\n","truncated":false}}"#;

fn ran(name: &str) -> Answer {
    Answer::Ran(Ran {
        name: name.into(),
        exit: Some(0),
        signal: None,
        timed_out: false,
        duration_ms: 12,
        output_bytes: 3,
        output: "ok\n".into(),
        truncated: false,
    })
}

/// A temp dir removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cordon-relay-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn socket(&self) -> PathBuf {
        self.0.join("socket")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A relay serving on a thread, and the host's end of its stdio.
struct Rig {
    dir: TempDir,
    host: BufReader<UnixStream>,
    host_out: UnixStream,
    relay: JoinHandle<Result<End, String>>,
}

impl Rig {
    /// Start a relay with this call deadline and read its listening line.
    fn start(deadline: Duration) -> Rig {
        let dir = TempDir::new();
        let path = dir.socket();
        let (relay_end, host_end) = UnixStream::pair().unwrap();
        let relay_in = relay_end.try_clone().unwrap();
        let relay = std::thread::spawn(move || serve(&path, deadline, relay_in, relay_end, None));
        host_end.set_read_timeout(Some(PROMPT)).unwrap();
        let mut rig = Rig {
            dir,
            host: BufReader::new(host_end.try_clone().unwrap()),
            host_out: host_end,
            relay,
        };
        assert_eq!(rig.host_line(), "{\"relay\":\"listening\"}\n");
        rig
    }

    /// The relay's next line to the host.
    fn host_line(&mut self) -> String {
        let mut line = String::new();
        self.host.read_line(&mut line).unwrap();
        assert!(line.ends_with('\n'), "{line:?}");
        line
    }

    /// Nothing comes to the host for a while.
    fn host_quiet(&mut self) {
        self.host.get_ref().set_read_timeout(Some(QUIET)).unwrap();
        let mut line = String::new();
        match self.host.read_line(&mut line) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            other => panic!("the host heard {other:?}: {line:?}"),
        }
        self.host.get_ref().set_read_timeout(Some(PROMPT)).unwrap();
    }

    /// The host writes `text` (a line, or anything).
    fn host_writes(&mut self, text: &[u8]) {
        self.host_out.write_all(text).unwrap();
    }

    fn client(&self) -> UnixStream {
        let conn = UnixStream::connect(self.dir.socket()).unwrap();
        conn.set_read_timeout(Some(PROMPT)).unwrap();
        conn
    }

    /// A client that sent `line`.
    fn call(&self, line: &str) -> UnixStream {
        let mut conn = self.client();
        conn.write_all(line.as_bytes()).unwrap();
        conn
    }

    /// The host closes its stream; how the relay ended.
    fn finish(self) -> Result<End, String> {
        drop(self.host);
        drop(self.host_out);
        self.relay.join().unwrap()
    }

    /// The relay ended by itself (the host's end still open).
    fn ended(self) -> Result<End, String> {
        let result = self.relay.join().unwrap();
        drop(self.host_out);
        result
    }
}

/// Everything the peer reads until the relay closes the connection (a reset after data, when the
/// relay left bytes unread, ends it as well).
fn read_all(mut conn: UnixStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return seen,
            Err(e) => panic!("reading the answer after {} bytes: {e}", seen.len()),
        }
    }
}

/// The one line a peer read, parsed as a refusal: its `observed`.
fn malformed(conn: UnixStream) -> String {
    let seen = read_all(conn);
    assert_eq!(seen.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(seen.last(), Some(&b'\n'));
    match serde_json::from_slice::<Answer>(&seen).unwrap() {
        Answer::Refused {
            refusal: CallRefusal::CommandMalformed,
            expected,
            observed,
        } => {
            assert!(expected.contains("{\"name\":\"...\"}"), "{expected}");
            observed
        }
        other => panic!("{other:?}"),
    }
}

fn call_line(seq: u64, name: &str) -> String {
    format!("{{\"call\":{{\"name\":\"{name}\"}},\"seq\":{seq}}}\n")
}

fn answer_for(seq: u64, name: &str) -> String {
    FromHost {
        seq,
        answer: ran(name),
    }
    .line()
    .unwrap()
}

#[test]
fn the_lines_have_their_shapes() {
    assert_eq!(
        ToHost::Listening.line().unwrap(),
        "{\"relay\":\"listening\"}\n"
    );
    let call = Call {
        name: "test".into(),
    };
    assert_eq!(
        ToHost::Call { seq: 7, call }.line().unwrap(),
        "{\"call\":{\"name\":\"test\"},\"seq\":7}\n"
    );
    assert_eq!(
        ToHost::Cancel { seq: 7 }.line().unwrap(),
        "{\"cancel\":7}\n"
    );
    assert_eq!(
        failure_line("a \"b\"\n"),
        "{\"failure\":\"a \\\"b\\\"\\n\"}\n"
    );
    let line = format!("{{\"seq\":3,\"answer\":{ANSWER}}}");
    let from = FromHost::parse(line.as_bytes()).unwrap();
    assert_eq!(
        from,
        FromHost {
            seq: 3,
            answer: ran("test")
        }
    );
    assert_eq!(from.line().unwrap(), format!("{line}\n"));
    // Either order, whitespace around.
    let spaced = format!(" {{ \"answer\" : {ANSWER} , \"seq\" : 3 }} ");
    assert_eq!(FromHost::parse(spaced.as_bytes()).unwrap(), from);
    for bad in [
        String::new(),
        "garbage".into(),
        "[3]".into(),
        format!("[3,{ANSWER}]"),
        "{\"seq\":3}".into(),
        format!("{{\"answer\":{ANSWER}}}"),
        format!("{{\"seq\":-1,\"answer\":{ANSWER}}}"),
        format!("{{\"seq\":3.0,\"answer\":{ANSWER}}}"),
        format!("{{\"seq\":\"3\",\"answer\":{ANSWER}}}"),
        format!("{{\"seq\":3,\"answer\":{ANSWER},\"more\":1}}"),
        "{\"seq\":3,\"answer\":{\"ran\":{}}}".into(),
        "{\"seq\":3,\"answer\":{\"refused\":{\"refusal\":\"nope\",\"expected\":\"\",\"observed\":\"\"}}}"
            .into(),
    ] {
        assert!(FromHost::parse(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn a_good_call_is_relayed_both_ways_byte_for_byte() {
    let mut rig = Rig::start(CALL_DEADLINE);
    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(
        rig.host_line(),
        "{\"call\":{\"name\":\"test\"},\"seq\":1}\n"
    );
    rig.host_writes(format!("{{\"seq\":1,\"answer\":{ANSWER}}}\n").as_bytes());
    assert_eq!(
        String::from_utf8(read_all(client)).unwrap(),
        format!("{ANSWER}\n")
    );

    // The next call is numbered 2; a refusal from the host travels the same way.
    let client = rig.call("{\"name\":\"lint\"}\n");
    assert_eq!(rig.host_line(), call_line(2, "lint"));
    let refused = Answer::Refused {
        refusal: CallRefusal::CommandUnknown,
        expected: "one of test".into(),
        observed: "lint".into(),
    };
    let line = FromHost {
        seq: 2,
        answer: refused.clone(),
    }
    .line()
    .unwrap();
    rig.host_writes(line.as_bytes());
    let seen = read_all(client);
    assert_eq!(seen.last(), Some(&b'\n'));
    assert_eq!(serde_json::from_slice::<Answer>(&seen).unwrap(), refused);
    assert_eq!(rig.finish(), Ok(End::HostDone));
}

#[test]
fn a_malformed_call_is_refused_and_the_host_never_hears_of_it() {
    let mut rig = Rig::start(CALL_DEADLINE);
    for bad in [
        "not json\n",
        "[\"test\"]\n",
        "{\"name\":\"Test\"}\n",
        "{\"name\":\"../x\"}\n",
        "{\"name\":\"test\",\"argv\":[\"-x\"]}\n",
        "{}\n",
        "\n",
    ] {
        let observed = malformed(rig.call(bad));
        assert!(!observed.is_empty(), "{bad}");
    }
    // A peer that shuts down its writing before a newline still reads its refusal.
    let conn = rig.call("{\"name\":\"test\"}");
    conn.shutdown(Shutdown::Write).unwrap();
    assert!(malformed(conn).contains("before a newline"));
    // A peer that went away entirely is simply closed.
    drop(rig.call("{\"name\":"));
    rig.host_quiet();

    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "test"));
    rig.host_writes(answer_for(1, "test").as_bytes());
    assert_eq!(
        serde_json::from_slice::<Answer>(&read_all(client)).unwrap(),
        ran("test")
    );
    assert_eq!(rig.finish(), Ok(End::HostDone));
}

#[test]
fn an_over_long_call_is_refused() {
    let mut rig = Rig::start(CALL_DEADLINE);
    // MAX_CALL_LINE bytes with the newline: taken (JSON allows the trailing blanks).
    let mut longest = "{\"name\":\"test\"}".to_owned();
    longest.push_str(&" ".repeat(MAX_CALL_LINE - 1 - longest.len()));
    longest.push('\n');
    assert_eq!(longest.len(), MAX_CALL_LINE);
    let client = rig.call(&longest);
    assert_eq!(rig.host_line(), call_line(1, "test"));
    rig.host_writes(answer_for(1, "test").as_bytes());
    assert_eq!(
        serde_json::from_slice::<Answer>(&read_all(client)).unwrap(),
        ran("test")
    );

    // One byte more: refused, as is a line that never ends.
    let mut over = longest.clone();
    over.insert(over.len() - 1, ' ');
    assert!(malformed(rig.call(&over)).contains("too long"));
    let endless = format!("{{\"name\":\"{}", "a".repeat(4 * MAX_CALL_LINE));
    assert!(malformed(rig.call(&endless)).contains("too long"));
    rig.host_quiet();
    assert_eq!(rig.finish(), Ok(End::HostDone));
}

#[test]
fn a_silent_peer_is_refused_past_the_deadline() {
    let deadline = Duration::from_millis(200);
    let mut rig = Rig::start(deadline);
    let started = Instant::now();
    let observed = malformed(rig.client());
    assert!(started.elapsed() >= deadline);
    assert!(observed.contains("0 bytes without a newline when the deadline passed"));
    let observed = malformed(rig.call("{\"name\":\"te"));
    assert!(
        observed.contains("11 bytes without a newline"),
        "{observed}"
    );
    rig.host_quiet();

    // The relay goes on.
    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "test"));
    rig.host_writes(answer_for(1, "test").as_bytes());
    assert_eq!(
        serde_json::from_slice::<Answer>(&read_all(client)).unwrap(),
        ran("test")
    );
    assert_eq!(rig.finish(), Ok(End::HostDone));
}

#[test]
fn a_peer_that_hangs_up_cancels_and_its_answer_is_discarded() {
    let mut rig = Rig::start(CALL_DEADLINE);
    let first = rig.call("{\"name\":\"slow\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "slow"));
    drop(first);
    assert_eq!(rig.host_line(), "{\"cancel\":1}\n");
    // The next call waits until the host has answered the cancelled one.
    let second = rig.call("{\"name\":\"test\"}\n");
    rig.host_quiet();
    rig.host_writes(answer_for(1, "slow").as_bytes());
    assert_eq!(rig.host_line(), call_line(2, "test"));
    rig.host_writes(answer_for(2, "test").as_bytes());
    assert_eq!(
        serde_json::from_slice::<Answer>(&read_all(second)).unwrap(),
        ran("test")
    );

    // A half-close is a hangup too; the cancelled answer must still carry its own number.
    let third = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(3, "test"));
    third.shutdown(Shutdown::Write).unwrap();
    assert_eq!(rig.host_line(), "{\"cancel\":3}\n");
    rig.host_writes(answer_for(2, "test").as_bytes());
    let failure = rig.ended().unwrap_err();
    assert!(
        failure.contains("answered call 2 while call 3"),
        "{failure}"
    );
    drop(third);
}

#[test]
fn a_broken_host_stream_is_a_failure() {
    let good = |seq: u64| format!("{{\"seq\":{seq},\"answer\":{ANSWER}}}\n");
    let cases: Vec<(String, &str)> = vec![
        (good(2), "answered call 2 while call 1"),
        (good(0), "answered call 0 while call 1"),
        ("garbage\n".into(), "not JSON"),
        ("\n".into(), "not JSON"),
        ("[1]\n".into(), "not a JSON object"),
        ("{\"seq\":1}\n".into(), "no answer"),
        (
            format!("{{\"seq\":1,\"answer\":{ANSWER},\"x\":0}}\n"),
            "unknown field",
        ),
        (
            "{\"seq\":1,\"answer\":{\"ran\":{\"name\":\"test\"}}}\n".into(),
            "the answer",
        ),
        (format!("{}{}", good(1), good(2)), "past its answer"),
        (format!("{}{{", good(1)), "past its answer"),
        (good(1)[..20].to_owned(), "ended inside its line for call 1"),
    ];
    for (text, failure) in cases {
        let mut rig = Rig::start(CALL_DEADLINE);
        let client = rig.call("{\"name\":\"test\"}\n");
        assert_eq!(rig.host_line(), call_line(1, "test"));
        rig.host_writes(text.as_bytes());
        let result = if text.ends_with('\n') || text.ends_with('{') {
            rig.ended()
        } else {
            rig.finish()
        };
        let reason = result.unwrap_err();
        assert!(reason.contains(failure), "{text:?}: {reason}");
        // The peer hears nothing.
        assert_eq!(read_all(client), b"");
    }

    // Anything with no call outstanding.
    let mut rig = Rig::start(CALL_DEADLINE);
    rig.host_writes(good(1).as_bytes());
    let reason = rig.ended().unwrap_err();
    assert!(reason.contains("no call outstanding"), "{reason}");
}

#[test]
fn the_host_line_is_bounded() {
    // Exactly MAX_ANSWER_LINE bytes with the newline: taken, and delivered whole.
    let mut rig = Rig::start(CALL_DEADLINE);
    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "test"));
    let empty = FromHost {
        seq: 1,
        answer: Answer::Ran(Ran {
            output: String::new(),
            ..match ran("test") {
                Answer::Ran(ran) => ran,
                Answer::Refused { .. } => unreachable!(),
            }
        }),
    };
    let pad = MAX_ANSWER_LINE - empty.line().unwrap().len();
    let mut full = empty.clone();
    if let Answer::Ran(ran) = &mut full.answer {
        ran.output = "a".repeat(pad);
    }
    let line = full.line().unwrap();
    assert_eq!(line.len(), MAX_ANSWER_LINE);
    let reader = std::thread::spawn(move || read_all(client));
    rig.host_writes(line.as_bytes());
    let seen = reader.join().unwrap();
    assert_eq!(seen.len(), answer_line(&full.answer).unwrap().len());
    assert_eq!(
        serde_json::from_slice::<Answer>(&seen).unwrap(),
        full.answer
    );
    assert_eq!(rig.finish(), Ok(End::HostDone));

    // One byte more and no newline within the bound: a failure.
    let mut rig = Rig::start(CALL_DEADLINE);
    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "test"));
    rig.host_writes(&line.as_bytes()[..MAX_ANSWER_LINE - 1]);
    rig.host_writes(b" ");
    let reason = rig.ended().unwrap_err();
    assert!(reason.contains("longer than"), "{reason}");
    assert_eq!(read_all(client), b"");
}

#[test]
fn eof_from_the_host_ends_cleanly() {
    // Idle.
    let rig = Rig::start(CALL_DEADLINE);
    assert_eq!(rig.finish(), Ok(End::HostDone));

    // With a call outstanding: the peer is closed without an answer.
    let mut rig = Rig::start(CALL_DEADLINE);
    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "test"));
    assert_eq!(rig.finish(), Ok(End::HostDone));
    assert_eq!(read_all(client), b"");

    // After a cancel, waiting for the discarded answer.
    let mut rig = Rig::start(CALL_DEADLINE);
    let client = rig.call("{\"name\":\"test\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "test"));
    drop(client);
    assert_eq!(rig.host_line(), "{\"cancel\":1}\n");
    assert_eq!(rig.finish(), Ok(End::HostDone));
}

#[test]
fn a_stale_socket_is_replaced_and_anything_else_is_left_in_place() {
    let dir = TempDir::new();
    let path = dir.socket();
    drop(UnixListener::bind(&path).unwrap());
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_socket());
    let listener = bind(&path).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o7777, 0o600);
    let _client = UnixStream::connect(&path).unwrap();
    let mut accepted = None;
    for _ in 0..100 {
        if let Ok((conn, _)) = listener.accept() {
            accepted = Some(conn);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(accepted.is_some());
    drop(listener);

    // A regular file, a directory, a link to a socket: refused, untouched.
    let file = dir.0.join("file");
    std::fs::write(&file, b"keep me").unwrap();
    let reason = bind(&file).unwrap_err();
    assert!(reason.contains("is not a socket"), "{reason}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    let sub = dir.0.join("dir");
    std::fs::create_dir(&sub).unwrap();
    assert!(bind(&sub).unwrap_err().contains("is not a socket"));
    assert!(sub.is_dir());

    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(bind(&link).unwrap_err().contains("is not a socket"));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_socket());

    // The whole relay refuses the same way, before it says it listens.
    let (relay_end, mut host_end) = UnixStream::pair().unwrap();
    let relay_in = relay_end.try_clone().unwrap();
    let reason = serve(&file, CALL_DEADLINE, relay_in, relay_end, None).unwrap_err();
    assert!(reason.contains("is not a socket"), "{reason}");
    let mut heard = Vec::new();
    host_end.read_to_end(&mut heard).unwrap();
    assert_eq!(heard, b"");
}

#[test]
fn two_clients_are_served_one_at_a_time_in_order() {
    let mut rig = Rig::start(CALL_DEADLINE);
    let first = rig.call("{\"name\":\"first\"}\n");
    assert_eq!(rig.host_line(), call_line(1, "first"));
    let second = rig.call("{\"name\":\"second\"}\n");
    rig.host_quiet();
    rig.host_writes(answer_for(1, "first").as_bytes());
    assert_eq!(rig.host_line(), call_line(2, "second"));
    rig.host_writes(answer_for(2, "second").as_bytes());
    assert_eq!(
        serde_json::from_slice::<Answer>(&read_all(second)).unwrap(),
        ran("second")
    );
    assert_eq!(
        serde_json::from_slice::<Answer>(&read_all(first)).unwrap(),
        ran("first")
    );
    assert_eq!(rig.finish(), Ok(End::HostDone));
}

/// A signalfd over `signals`, blocked in this test's thread alone (a signal raised here stays
/// pending for this thread and never reaches the harness).
fn thread_signals(signals: &[Signal]) -> SignalFd {
    let mut set = SigSet::empty();
    for s in signals {
        set.add(*s);
    }
    set.thread_block().unwrap();
    SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).unwrap()
}

#[test]
fn term_ends_the_relay_and_other_signals_do_not() {
    let stop = thread_signals(&[Signal::SIGTERM, Signal::SIGUSR1]);
    let dir = TempDir::new();

    // USR1 is read and ignored; the host's EOF ends it.
    raise(Signal::SIGUSR1).unwrap();
    let (relay_in, host_end) = UnixStream::pair().unwrap();
    drop(host_end);
    let mut heard = Vec::new();
    let ended = serve(
        &dir.socket(),
        CALL_DEADLINE,
        relay_in,
        &mut heard,
        Some(&stop),
    );
    assert_eq!(ended, Ok(End::HostDone));
    assert_eq!(heard, b"{\"relay\":\"listening\"}\n");

    // TERM while a call is outstanding (sent by a helper thread once the host holds the call).
    let (relay_end, host_end) = UnixStream::pair().unwrap();
    let relay_in = relay_end.try_clone().unwrap();
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let path = dir.socket();
    let helper = std::thread::spawn(move || {
        host_end.set_read_timeout(Some(PROMPT)).unwrap();
        let mut host = BufReader::new(host_end.try_clone().unwrap());
        let mut line = String::new();
        host.read_line(&mut line).unwrap();
        assert_eq!(line, "{\"relay\":\"listening\"}\n");
        let mut client = UnixStream::connect(&path).unwrap();
        client.set_read_timeout(Some(PROMPT)).unwrap();
        client.write_all(b"{\"name\":\"test\"}\n").unwrap();
        line.clear();
        host.read_line(&mut line).unwrap();
        assert_eq!(line, call_line(1, "test"));
        // SAFETY: `me` is the test's thread, alive until it has joined this one; TERM is blocked
        // there, so it stays pending for that thread's signalfd.
        let rc = unsafe { libc::pthread_kill(me, libc::SIGTERM) };
        assert_eq!(rc, 0);
        (client, host_end)
    });
    let ended = serve(
        &dir.socket(),
        CALL_DEADLINE,
        relay_in,
        relay_end,
        Some(&stop),
    );
    let (client, _host) = helper.join().unwrap();
    assert_eq!(ended, Ok(End::Stopped));
    assert_eq!(read_all(client), b"");
}
