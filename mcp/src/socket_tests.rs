use std::io::{BufRead, BufReader, Cursor, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::thread::JoinHandle;

use cordon_contract::command::{CallRefusal, Offered, Ran};

use super::*;
use crate::rpc::Server;
use crate::scratch_tests::Scratch;

fn ran() -> Ran {
    Ran {
        name: "test".into(),
        exit: Some(0),
        signal: None,
        timed_out: false,
        duration_ms: 42,
        output_bytes: 3,
        output: "ok\n".into(),
        truncated: false,
    }
}

/// A dispatcher for one connection: it reads the call line, returns its exact bytes, and lets
/// `answer` write whatever it likes back.
fn dispatcher_once(
    path: &Path,
    answer: impl FnOnce(&mut UnixStream) + Send + 'static,
) -> JoinHandle<Vec<u8>> {
    let listener = UnixListener::bind(path).expect("bind");
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut received = Vec::new();
        BufReader::new(&mut stream)
            .read_until(b'\n', &mut received)
            .expect("read the call");
        answer(&mut stream);
        received
    })
}

fn answer_with(answer: &Answer) -> impl FnOnce(&mut UnixStream) + Send + 'static {
    let line = format!("{}\n", serde_json::to_string(answer).expect("JSON"));
    move |stream| stream.write_all(line.as_bytes()).expect("answer")
}

fn call_test(path: &Path) -> Result<Answer, String> {
    Socket::new(path.to_path_buf()).call(&Call {
        name: "test".into(),
    })
}

/// The tool result's text for a call of `test` through the whole server.
fn tool_text(path: &Path) -> (String, bool) {
    let server = Server::new(vec![Offered {
        name: "test".into(),
        description: "Run the unit tests".into(),
    }]);
    let line = server
        .handle(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"}}}"#,
            &mut Socket::new(path.to_path_buf()),
        )
        .expect("a reply");
    let reply: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    let result = &reply["result"];
    (
        result["content"][0]["text"]
            .as_str()
            .expect("a text")
            .to_owned(),
        result["isError"].as_bool().expect("isError"),
    )
}

#[test]
fn a_call_sends_exactly_its_name_and_reads_a_ran() {
    let dir = Scratch::new();
    let path = dir.path().join("socket");
    let peer = dispatcher_once(&path, answer_with(&Answer::Ran(ran())));
    assert_eq!(call_test(&path), Ok(Answer::Ran(ran())));
    assert_eq!(
        peer.join().expect("the dispatcher"),
        b"{\"name\":\"test\"}\n"
    );
}

#[test]
fn a_call_reads_a_refusal() {
    let dir = Scratch::new();
    let path = dir.path().join("socket");
    let refused = Answer::Refused {
        refusal: CallRefusal::CommandDeadline,
        expected: "time left to run".into(),
        observed: "3 s".into(),
    };
    let peer = dispatcher_once(&path, answer_with(&refused));
    assert_eq!(
        tool_text(&path),
        (
            "command-deadline: expected time left to run, observed 3 s".to_owned(),
            true
        )
    );
    assert_eq!(
        peer.join().expect("the dispatcher"),
        b"{\"name\":\"test\"}\n"
    );
}

#[test]
fn the_whole_server_shows_a_ran() {
    let dir = Scratch::new();
    let path = dir.path().join("socket");
    let peer = dispatcher_once(&path, answer_with(&Answer::Ran(ran())));
    assert_eq!(
        tool_text(&path),
        ("exit 0 after 42 ms\n\nok\n".to_owned(), false)
    );
    assert_eq!(
        peer.join().expect("the dispatcher"),
        b"{\"name\":\"test\"}\n"
    );
}

fn assert_unavailable(path: &Path, why: &str) {
    let (text, is_error) = tool_text(path);
    assert!(is_error, "{text}");
    assert!(text.starts_with("command-unavailable: "), "{text}");
    assert!(text.contains(why), "{text}");
}

#[test]
fn a_peer_that_closes_early_is_unavailable() {
    let dir = Scratch::new();
    let path = dir.path().join("socket");
    let peer = dispatcher_once(&path, |stream| {
        stream
            .write_all(br#"{"ran":{"name":"te"#)
            .expect("half an answer");
    });
    assert_unavailable(&path, "closed the connection after 18 bytes");
    peer.join().expect("the dispatcher");

    let peer = {
        std::fs::remove_file(&path).expect("the old socket");
        dispatcher_once(&path, |_| {})
    };
    assert_unavailable(&path, "closed the connection after 0 bytes");
    peer.join().expect("the dispatcher");
}

#[test]
fn an_answer_past_the_bound_is_unavailable() {
    let dir = Scratch::new();
    let path = dir.path().join("socket");
    let peer = dispatcher_once(&path, |stream| {
        // The server stops reading at the bound and hangs up: the rest may not be written.
        let _ = stream.write_all(&vec![b'x'; MAX_ANSWER_LINE + 1]);
    });
    assert_unavailable(&path, "longer than");
    peer.join().expect("the dispatcher");
}

#[test]
fn garbage_is_unavailable() {
    let dir = Scratch::new();
    let path = dir.path().join("socket");
    for garbage in [
        &b"hello\n"[..],
        b"{\"ran\":{\"name\":\"test\"}}\n",
        b"{\"refused\":{\"refusal\":\"command-nope\",\"expected\":\"\",\"observed\":\"\"}}\n",
        b"{\"ran\":{\"name\":\"test\",\"exit\":0,\"signal\":null,\"timed_out\":false,\"duration_ms\":1,\"output_bytes\":0,\"output\":\"\",\"truncated\":false,\"argv\":[]}}\n",
        b"\xff\xfe\n",
        b"\n",
    ] {
        let _ = std::fs::remove_file(&path);
        let peer = dispatcher_once(&path, move |stream| {
            stream.write_all(garbage).expect("garbage");
        });
        assert_unavailable(&path, "a malformed answer");
        peer.join().expect("the dispatcher");
    }
}

#[test]
fn no_dispatcher_is_unavailable() {
    let dir = Scratch::new();
    assert_unavailable(&dir.path().join("socket"), "the dispatcher's socket");
    // A file that is not a socket.
    let file = dir.path().join("file");
    std::fs::write(&file, b"").expect("write");
    assert_unavailable(&file, "the dispatcher's socket");
}

#[test]
fn an_answer_of_exactly_the_bound_is_read() {
    let mut big = ran();
    big.output = String::new();
    let empty = serde_json::to_string(&Answer::Ran(big.clone())).expect("JSON");
    big.output = "y".repeat(MAX_ANSWER_LINE - empty.len() - 1);
    let line = format!(
        "{}\n",
        serde_json::to_string(&Answer::Ran(big.clone())).expect("JSON")
    );
    assert_eq!(line.len(), MAX_ANSWER_LINE);
    assert_eq!(
        read_answer(Cursor::new(line.as_bytes())),
        Ok(Answer::Ran(big))
    );
    let mut longer = line.into_bytes();
    longer.insert(longer.len() - 3, b'y');
    let error = read_answer(Cursor::new(longer)).expect_err("one byte more");
    assert!(error.contains("longer than"), "{error}");
}
