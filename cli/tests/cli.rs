//! The `cordon` binary as runners in other languages use it: JSON on stdout, exit codes that mean
//! something, a loud failure when the engine is unreachable.

// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]

use std::process::Command;

fn cordon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cordon"))
}

fn json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn gate_json_exits_zero_when_every_case_passes() {
    let output = cordon()
        .args(["gate", "--json", "--filter", "cap"])
        .output()
        .expect("run cordon");
    let report = json(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["failed"], 0);
    assert_eq!(
        report["passed"], 6,
        "caps-dropped and cap-added, three layers each: {report}"
    );
}

#[test]
fn doctor_json_reports_and_exits_zero_here() {
    let output = cordon()
        .args(["doctor", "--json"])
        .output()
        .expect("run cordon");
    let report = json(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["ok"], true);
    assert_eq!(
        report["engine"]["api"],
        report["engine"]["api"].as_str().unwrap_or("?")
    );
}

#[test]
fn image_build_json_names_a_digest_tag() {
    let output = cordon()
        .args(["image", "build", "--json"])
        .output()
        .expect("run cordon");
    let built = json(&output);
    assert!(output.status.success(), "{built}");
    assert!(built["tag"]
        .as_str()
        .unwrap_or("")
        .starts_with("cordon-test:"));
    assert!(built["size_bytes"].as_i64().unwrap_or(0) > 0);
}

#[test]
fn unreachable_engine_fails_loudly() {
    let output = cordon()
        .args(["doctor", "--json"])
        .env("DOCKER_HOST", "unix:///nonexistent/cordon-test.sock")
        .output()
        .expect("run cordon");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(json(&output)["error"], "engine-unreachable");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unreachable") && stderr.contains("/nonexistent/cordon-test.sock"),
        "{stderr}"
    );
}

/// `cordon egress proxy` runs the proxy's rules on a unix socket with no engine: a request the
/// rules refuse gets its status, and a mapped allowed name is tunnelled to its mapping (a listener
/// on this machine's loopback).
#[test]
fn egress_proxy_answers_raw_requests_by_its_rules() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let dir = std::env::temp_dir().join(format!("cordon-egress-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("egress.sock");
    let vendor = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = vendor.local_addr().unwrap().port();
    /// The proxy and its directory, gone however the test ends.
    struct Running(std::process::Child, std::path::PathBuf);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let mut running = Running(
        std::process::Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["egress", "proxy", "--allow", "fake.vendor.test"])
            .arg(format!("--listen=unix:{}", socket.display()))
            .arg(format!("--map=fake.vendor.test=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        dir.clone(),
    );
    let proxy = &mut running.0;
    let started = std::time::Instant::now();
    while UnixStream::connect(&socket).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the proxy never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ask = |request: &str| {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = [0u8; 64];
        let n = stream.read(&mut answer).unwrap();
        String::from_utf8_lossy(&answer[..n]).into_owned()
    };
    let refused = [
        (
            "GET http://fake.vendor.test/ HTTP/1.1\r\n\r\n",
            "HTTP/1.1 405",
        ),
        (
            "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
            "HTTP/1.1 403",
        ),
        (
            "CONNECT fake.vendor.test:80 HTTP/1.1\r\nHost: fake.vendor.test:80\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (
            "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n",
            "HTTP/1.1 400",
        ),
        ("CONNECT fake.vendor.test:443 HTTP/1.1\n\n", "HTTP/1.1 400"),
        // No Host header.
        (
            "CONNECT fake.vendor.test:443 HTTP/1.1\r\nUser-Agent: x\r\n\r\n",
            "HTTP/1.1 400",
        ),
    ];
    for (request, status) in refused {
        assert!(ask(request).starts_with(status), "{request:?}");
    }
    assert!(
        ask("CONNECT fake.vendor.test:443 HTTP/1.1\r\nHost: fake.vendor.test:443\r\n\r\n")
            .starts_with("HTTP/1.1 200")
    );
    vendor.set_nonblocking(true).unwrap();
    // Only the allowed request was dialed.
    let mut dialed = 0;
    while vendor.accept().is_ok() {
        dialed += 1;
    }
    assert_eq!(dialed, 1);
    // SAFETY: a plain signal to the child we started.
    unsafe { libc::kill(proxy.id() as i32, libc::SIGINT) };
    let status = proxy.wait().unwrap();
    let mut log = String::new();
    proxy
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{status}: {log}");
    // The proxy's own JSON lines: its attestation first, one line per connection, its stop.
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(lines[0]["egress"], "listening", "{log}");
    assert_eq!(lines[0]["allow"][0], "fake.vendor.test:443", "{log}");
    // Each connection's line comes when it ends, so in any order: the six refused requests, and
    // the admitted CONNECT, which ends without a ClientHello (`egress-sni`) or at the interrupt
    // if that comes first (`egress-shutdown`).
    let mut refused: Vec<&str> = lines
        .iter()
        .filter(|l| l["egress"] == "refused")
        .filter_map(|l| l["id"].as_str())
        // The test's own connects while it waited for the socket.
        .filter(|id| *id != "egress-closed")
        .map(|id| {
            if id == "egress-shutdown" {
                "egress-sni"
            } else {
                id
            }
        })
        .collect();
    refused.sort_unstable();
    assert_eq!(
        refused,
        [
            "egress-host",
            "egress-malformed",
            "egress-malformed",
            "egress-method",
            "egress-not-allowed",
            "egress-port",
            "egress-sni",
        ],
        "{log}"
    );
    assert_eq!(lines[lines.len() - 1]["egress"], "stopped", "{log}");
    assert!(!socket.exists(), "the socket is removed on shutdown");
}

/// `--vendor` is a closed set: a value outside it is a usage error (exit 2) that names the valid
/// ones, refused before anything reaches the engine; `bench invoke` has its own, smaller set.
#[test]
fn an_unknown_vendor_is_refused_with_the_valid_ones() {
    for (args, valid) in [
        (
            &[
                "run",
                "--vendor",
                "tset",
                "--phase",
                "questions",
                "--repo",
                ".",
                "--prompt",
                "hi",
            ][..],
            "[possible values: test, claude, codex]",
        ),
        (
            &["bench", "invoke", "--vendor", "codex"][..],
            "[possible values: test, claude]",
        ),
    ] {
        let output = cordon().args(args).output().expect("run cordon");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("invalid value") && stderr.contains("'--vendor <VENDOR>'"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(valid), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}
