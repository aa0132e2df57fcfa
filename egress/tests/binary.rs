//! The built `cordon-egress` binary, as its container runs it: the attestation line once the
//! socket is there, a refused CONNECT and its line, then SIGTERM (or the lifetime's end): exit 0,
//! the socket gone. Sockets live in a fresh directory under the system temp dir, removed at the end.

// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_cordon-egress");
const WAIT: Duration = Duration::from_secs(10);

/// A fresh directory, removed (with the proxy killed, if it still runs) however the test ends.
struct Scratch {
    dir: PathBuf,
    child: Option<Child>,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("cordon-egress-bin-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("a scratch directory");
        Scratch { dir, child: None }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("egress.sock")
    }

    /// Start the proxy on this directory's socket; its stdout lines come on the receiver.
    fn start(&mut self, args: &[&str]) -> Receiver<String> {
        let listen = format!("unix:{}", self.socket().display());
        let mut child = Command::new(BIN)
            .args(["proxy", "--listen", listen.as_str()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cordon-egress");
        let stdout = child.stdout.take().expect("its stdout");
        self.child = Some(child);
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        lines
    }

    fn signal(&self, signal: Signal) {
        let pid = self.child.as_ref().expect("a running proxy").id();
        let pid = Pid::from_raw(i32::try_from(pid).expect("a pid"));
        kill(pid, signal).expect("signal the proxy");
    }

    fn wait(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("a running proxy");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("its status") {
                self.child = None;
                return status;
            }
            assert!(started.elapsed() < WAIT, "the proxy did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn next(lines: &Receiver<String>) -> Value {
    let line = lines.recv_timeout(WAIT).expect("a log line");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// Send a head, read the answer's head.
fn ask(socket: &Path, head: &str) -> String {
    let mut stream = UnixStream::connect(socket).expect("connect to the proxy");
    stream.set_read_timeout(Some(WAIT)).expect("a read timeout");
    stream.write_all(head.as_bytes()).expect("send the head");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("the answer, then the close");
    answer
}

#[test]
fn the_binary_attests_logs_a_refusal_and_stops_on_sigterm() {
    let mut scratch = Scratch::new("term");
    let socket = scratch.socket();
    let lines = scratch.start(&[
        "--allow",
        "fake.vendor.test",
        "--map",
        "fake.vendor.test=127.0.0.1:9",
        "--host-address",
        "172.17.0.1",
        "--max-tunnels",
        "4",
        "--skip",
        "sni",
    ]);
    assert_eq!(
        next(&lines),
        json!({
            "egress": "listening",
            "socket": socket.to_str().unwrap(),
            "allow": ["fake.vendor.test:443"],
            "map": ["fake.vendor.test=127.0.0.1:9"],
            "terminate": null,
            "resolver": null,
            "host_addresses": ["172.17.0.1"],
            "max_tunnels": 4,
            "skipped": ["sni"],
        })
    );
    // The attestation comes once the socket is bound and has its mode.
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o660);

    let answer = ask(
        &socket,
        "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    let refused = next(&lines);
    assert_eq!(refused["egress"], "refused");
    assert_eq!(refused["id"], "egress-not-allowed");
    assert_eq!(refused["status"], 403);
    assert_eq!(refused["target"], "evil.example:443");
    assert!(refused["reason"].is_string());

    scratch.signal(Signal::SIGTERM);
    let status = scratch.wait();
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(next(&lines), json!({"egress": "stopped", "by": "sigterm"}));
    assert!(!socket.exists(), "the socket is removed");
}

#[test]
fn the_binary_refuses_unmapped_names_without_a_resolver_and_stops_on_sigint() {
    let mut scratch = Scratch::new("int");
    let socket = scratch.socket();
    let lines = scratch.start(&["--allow", "real.vendor.test"]);
    assert_eq!(next(&lines)["egress"], "listening");
    let answer = ask(
        &socket,
        "CONNECT real.vendor.test:443 HTTP/1.1\r\nHost: real.vendor.test:443\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    let refused = next(&lines);
    assert_eq!(
        (&refused["id"], &refused["status"], &refused["target"]),
        (
            &json!("egress-resolve"),
            &json!(502),
            &json!("real.vendor.test:443")
        )
    );
    let answer = ask(&socket, "GET http://real.vendor.test/ HTTP/1.1\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
    let refused = next(&lines);
    assert_eq!(
        (&refused["id"], &refused["target"]),
        (&json!("egress-method"), &Value::Null)
    );
    scratch.signal(Signal::SIGINT);
    assert_eq!(scratch.wait().code(), Some(0));
    assert_eq!(next(&lines), json!({"egress": "stopped", "by": "sigint"}));
    assert!(!socket.exists());
}

#[test]
fn the_binary_exits_at_the_end_of_its_lifetime() {
    let mut scratch = Scratch::new("lifetime");
    let socket = scratch.socket();
    let started = Instant::now();
    let lines = scratch.start(&["--lifetime-s", "1"]);
    assert_eq!(next(&lines)["egress"], "listening");
    assert!(socket.exists());
    assert_eq!(scratch.wait().code(), Some(0));
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(next(&lines), json!({"egress": "stopped", "by": "lifetime"}));
    assert!(!socket.exists());
}

#[test]
fn refused_arguments_exit_2_with_a_message() {
    for args in [
        vec!["proxy", "--listen", "unix:/tmp/x.sock", "--bogus"],
        vec![
            "proxy",
            "--listen",
            "unix:/tmp/x.sock",
            "--skip",
            "sni",
            "--skip",
            "sni",
        ],
        vec!["proxy", "--listen", "unix:/tmp/x.sock", "--allow"],
        vec![
            "proxy",
            "--listen",
            "unix:/tmp/x.sock",
            "--skip",
            "everything",
        ],
        vec!["proxy"],
        vec![],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("cordon-egress: "), "{args:?}: {stderr}");
    }
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--listen unix:PATH"));
}

#[test]
fn a_socket_that_cannot_be_bound_exits_1() {
    let scratch = Scratch::new("nobind");
    // A regular file where the socket would go is left alone.
    std::fs::write(scratch.socket(), b"keep").unwrap();
    let listen = format!("unix:{}", scratch.socket().display());
    let out = Command::new(BIN)
        .args(["proxy", "--listen", listen.as_str()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(scratch.socket()).unwrap(), b"keep");
}

/// Asked to terminate a host, the binary reads its vault (once its ready marker is there: the
/// wait itself is `vault::tests`) before it listens: a vault missing a file exits 1 with no
/// attestation (the host then gives the agent no policy); a whole vault attests the host, the
/// CA's fingerprint and the budgets, and never prints the key.
#[test]
fn a_vault_is_read_before_the_attestation_and_a_bad_one_exits_1() {
    let mut scratch = Scratch::new("vault");
    let vault = scratch.dir.join("vault");
    std::fs::create_dir(&vault).unwrap();
    let ca = cordon_fake_vendor::ca::generate(&["fake.vendor.test"]).unwrap();
    for (name, bytes) in [
        ("credential", &b"sk-the-real-key"[..]),
        ("sentinel", b"sk-ant-api03-sentinelAA"),
        ("leaf.pem", ca.cert_pem.as_bytes()),
        ("leaf-key.pem", ca.key_pem.as_bytes()),
        (cordon_egress::vendor::VAULT_READY, b""),
    ] {
        std::fs::write(vault.join(name), bytes).unwrap();
    }
    let args = [
        "--allow",
        "fake.vendor.test",
        "--terminate",
        "fake.vendor.test:443",
        "--vault",
        vault.to_str().unwrap(),
        "--credential-header",
        "x-api-key",
        "--max-requests",
        "7",
    ];
    let listen = format!("unix:{}", scratch.socket().display());
    // No ca.pem: refused, nothing attested, the key not shown.
    let out = Command::new(BIN)
        .args(["proxy", "--listen", listen.as_str()])
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ca.pem") && !stderr.contains("sk-the-real-key"),
        "{stderr}"
    );
    assert!(!scratch.socket().exists());
    // Whole: the attestation names what it terminates.
    std::fs::write(vault.join("ca.pem"), ca.ca_pem.as_bytes()).unwrap();
    let lines = scratch.start(&args);
    let attested = next(&lines);
    let terminate = &attested["terminate"];
    assert_eq!(terminate["target"], "fake.vendor.test:443");
    assert_eq!(terminate["header"], "x-api-key");
    assert_eq!(terminate["budget"]["requests"], 7);
    assert_eq!(terminate["ca_sha256"].as_str().map(str::len), Some(64));
    assert!(!attested.to_string().contains("sk-the-real-key"));
    scratch.signal(Signal::SIGTERM);
    assert!(scratch.wait().success());
}
