//! The built binary end to end: the CLI's messages on its stdin, a dispatcher on a unix socket,
//! the replies on its stdout; and what it refuses to start with.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_cordon-mcp");

/// A scratch directory under the system's temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cordon-mcp-e2e-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("a scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const OFFERED: &str = r#"[{"name":"test","description":"Run the unit tests"},{"name":"lint","description":"Run the linter"}]"#;

fn run(args: &[&Path], offered: Option<&Path>, input: &str) -> Output {
    let mut command = Command::new(BIN);
    if let Some(offered) = offered {
        command.arg("--offered").arg(offered);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cordon-mcp starts");
    // A server that refused to start may be gone before its input is written.
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes());
    if let Err(error) = written {
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    child.wait_with_output().expect("cordon-mcp ends")
}

#[test]
fn the_cli_s_session_runs_one_approved_command() {
    let dir = Scratch::new("session");
    let offered = dir.0.join("commands.json");
    std::fs::write(&offered, OFFERED).expect("write the list");
    let socket = dir.0.join("socket");
    let listener = UnixListener::bind(&socket).expect("bind");
    let dispatcher = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(&stream);
        let mut call = Vec::new();
        reader.read_until(b'\n', &mut call).expect("the call");
        let answer = json!({"ran": {
            "name": "test", "exit": 1, "signal": null, "timed_out": false, "duration_ms": 1500,
            "output_bytes": 12, "output": "1 failed\nFAIL", "truncated": false,
        }});
        (&stream)
            .write_all(format!("{answer}\n").as_bytes())
            .expect("the answer");
        call
    });
    // What the Claude Code CLI sends (its clientInfo and an id of 0 first).
    let input = [
        r#"{"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"claude-code","version":"2.1.0"}},"jsonrpc":"2.0","id":0}"#,
        r#"{"method":"notifications/initialized","jsonrpc":"2.0"}"#,
        r#"{"method":"tools/list","jsonrpc":"2.0","id":1}"#,
        r#"{"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test","args":"-x"}},"jsonrpc":"2.0","id":2}"#,
        r#"{"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"},"_meta":{"claudecode/toolUseId":"toolu_1"}},"jsonrpc":"2.0","id":3}"#,
        "",
    ]
    .join("\n");
    let out = run(&[Path::new("--socket"), &socket], Some(&offered), &input);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        dispatcher.join().expect("the dispatcher"),
        b"{\"name\":\"test\"}\n"
    );
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let replies: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    assert_eq!(replies.len(), 4, "{stdout}");
    assert_eq!(
        replies[0]["result"],
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "cordon", "version": env!("CARGO_PKG_VERSION")},
        })
    );
    let tool = &replies[1]["result"]["tools"][0];
    assert_eq!(tool["name"], "run_approved_command");
    assert_eq!(
        tool["inputSchema"]["properties"]["name"]["enum"],
        json!(["test", "lint"])
    );
    assert_eq!(replies[2]["id"], 2);
    assert_eq!(replies[2]["result"]["isError"], true);
    assert!(replies[2]["result"]["content"][0]["text"]
        .as_str()
        .expect("a text")
        .starts_with("command-arguments: "));
    assert_eq!(
        replies[3],
        json!({"jsonrpc": "2.0", "id": 3, "result": {
            "content": [{"type": "text", "text": "exit 1 after 1500 ms\n\n1 failed\nFAIL"}],
            "isError": true,
        }})
    );
}

#[test]
fn without_a_dispatcher_a_call_is_unavailable_and_the_server_goes_on() {
    let dir = Scratch::new("nodispatcher");
    let offered = dir.0.join("commands.json");
    std::fs::write(&offered, OFFERED).expect("write the list");
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"lint"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        "\n",
    );
    let absent = dir.0.join("socket");
    let out = run(&[Path::new("--socket"), &absent], Some(&offered), input);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let replies: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(replies.len(), 2, "{stdout}");
    assert!(replies[0]["result"]["content"][0]["text"]
        .as_str()
        .expect("a text")
        .starts_with("command-unavailable: "));
    assert_eq!(replies[1]["result"], json!({}));
}

#[test]
fn a_bad_command_line_or_list_stops_it_before_any_message() {
    let dir = Scratch::new("refused");
    let good = dir.0.join("commands.json");
    std::fs::write(&good, OFFERED).expect("write");
    let bad = dir.0.join("bad.json");
    std::fs::write(&bad, r#"[{"name":"a b","description":"d"}]"#).expect("write");
    let link = dir.0.join("link.json");
    std::os::unix::fs::symlink(&good, &link).expect("symlink");
    let ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
    let cases: [(&[&Path], Option<&Path>); 5] = [
        (&[Path::new("--bogus")], Some(&good)),
        (&[Path::new("sh")], Some(&good)),
        (&[], Some(&bad)),
        (&[], Some(&link)),
        (&[], Some(&dir.0)),
    ];
    for (args, offered) in cases {
        let out = run(args, offered, ping);
        assert_eq!(out.status.code(), Some(2), "{args:?} {offered:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(!out.stderr.is_empty(), "{out:?}");
    }
}
