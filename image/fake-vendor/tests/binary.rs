//! The `fake-vendor` binary as a container runs it, on 127.0.0.1: the listening line, one JSON
//! line per query or request, SIGTERM, and exit 2 for bad arguments.

#![allow(clippy::unwrap_used)]
// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]

use cordon_fake_vendor::ca;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::{TcpStream, UdpSocket};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::timeout;

/// One environment variable given to the child.
type Env<'a> = (&'a str, &'a str);

const BIN: &str = env!("CARGO_BIN_EXE_fake-vendor");
const WAIT: Duration = Duration::from_secs(10);

struct Running {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Running {
    fn spawn(args: &[&str], env: &[Env]) -> Running {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Running { child, stdout }
    }

    async fn raw_line(&mut self) -> String {
        timeout(WAIT, self.stdout.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    }

    async fn line(&mut self) -> Value {
        serde_json::from_str(&self.raw_line().await).unwrap()
    }

    /// The listening line, as text (its key order is part of the contract) and its address.
    async fn listening(&mut self, kind: &str) -> SocketAddr {
        let line = self.raw_line().await;
        let prefix = format!(r#"{{"fake_vendor":"listening","{kind}":""#);
        assert!(line.starts_with(&prefix), "{line}");
        let value: Value = serde_json::from_str(&line).unwrap();
        value[kind].as_str().unwrap().parse().unwrap()
    }

    /// SIGTERM, as `docker stop` sends to PID 1; the exit code.
    async fn terminate(mut self) -> i32 {
        let pid = i32::try_from(self.child.id().unwrap()).unwrap();
        // SAFETY: kill(2) on the child this test spawned and has not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = timeout(WAIT, self.child.wait()).await.unwrap().unwrap();
        status.code().unwrap()
    }
}

#[tokio::test]
async fn b0_dns_says_where_it_listens_answers_and_logs_each_query() {
    let mut dns = Running::spawn(
        &[
            "dns",
            "--listen",
            "127.0.0.1:0",
            "--answer",
            "api.vendor.test=192.0.2.10,2001:db8::10",
            "--answer",
            "quiet.test=silent",
        ],
        &[],
    );
    let server = dns.listening("dns").await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut query = Message::query();
    query.add_query(Query::query(
        Name::from_ascii("API.vendor.test.").unwrap(),
        RecordType::A,
    ));
    socket
        .send_to(&query.to_vec().unwrap(), server)
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = timeout(WAIT, socket.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let answer = Message::from_vec(&buf[..n]).unwrap();
    let addrs: Vec<_> = answer
        .answers
        .iter()
        .map(|record| match &record.data {
            RData::A(a) => a.0.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(addrs, ["192.0.2.10"]);
    // As text: the field order is part of what a log is grepped for.
    assert_eq!(
        dns.raw_line().await,
        r#"{"dns_query":{"name":"api.vendor.test","record_type":"A"}}"#
    );
    assert_eq!(dns.terminate().await, 0);
}

#[tokio::test]
async fn b1_tls_and_plain_say_where_they_listen_answer_and_log_each_request() {
    let ca = ca::generate(&["api.vendor.test"]).unwrap();
    let mut endpoint = Running::spawn(
        &["tls", "--listen", "127.0.0.1:0", "--plain", "127.0.0.1:0"],
        &[
            ("FAKE_VENDOR_CERT", &ca.cert_pem),
            ("FAKE_VENDOR_KEY", &ca.key_pem),
        ],
    );
    let tls_addr = endpoint.listening("tls").await;
    let plain_addr = endpoint.listening("plain").await;

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(tls_addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("api.vendor.test").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /ping HTTP/1.1\r\nHost: api.vendor.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    let _ = timeout(WAIT, tls.read_to_end(&mut response)).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\npong"), "{response}");
    assert_eq!(
        endpoint.raw_line().await,
        r#"{"tls_request":{"sni":"api.vendor.test","method":"GET","path":"/ping"}}"#
    );

    let mut plain = TcpStream::connect(plain_addr).await.unwrap();
    plain.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, plain.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8(response)
        .unwrap()
        .ends_with("\r\n\r\nfake-vendor ok\n"));
    assert_eq!(
        endpoint.line().await,
        json!({"tls_request": {"sni": null, "method": "GET", "path": "/"}})
    );
    assert_eq!(endpoint.terminate().await, 0);
}

#[tokio::test]
async fn b3_a_messages_request_is_answered_and_logged_as_a_record() {
    let ca = ca::generate(&["api.vendor.test"]).unwrap();
    let mut endpoint = Running::spawn(
        &["tls", "--listen", "127.0.0.1:0", "--plain", "127.0.0.1:0"],
        &[
            ("FAKE_VENDOR_CERT", &ca.cert_pem),
            ("FAKE_VENDOR_KEY", &ca.key_pem),
        ],
    );
    let _tls = endpoint.listening("tls").await;
    let plain = endpoint.listening("plain").await;
    let body = json!({
        "model": "claude-test", "stream": false, "max_tokens": 10, "system": "sys",
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": r#"[[cordon-script [{"tool": "Bash", "input": {"command": "ls"}}]]"#}],
    })
    .to_string();
    let mut io = TcpStream::connect(plain).await.unwrap();
    let request = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    io.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, io.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    let response = String::from_utf8(response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains(r#""name":"Bash""#), "{response}");
    assert_eq!(
        endpoint.line().await,
        json!({"tls_request": {"sni": null, "method": "POST", "path": "/v1/messages?beta=true"}})
    );
    // As text: the record's fields in their declared order, the reply untagged; the usage a token
    // per 4 bytes of the request (its 240-some bytes) and of the reply's 16-byte tool input.
    assert_eq!(
        endpoint.raw_line().await,
        r#"{"messages_request":{"path":"/v1/messages?beta=true","model":"claude-test","stream":false,"tools":["Bash"],"scenario":"script","step":0,"tool_results":[],"reply":{"tool":"Bash","input":{"command":"ls"}},"system_bytes":3,"usage":{"input_tokens":60,"output_tokens":4}}}"#
    );
    assert_eq!(endpoint.terminate().await, 0);
}

#[tokio::test]
async fn b2_bad_arguments_and_a_missing_identity_exit_2() {
    let ca = ca::generate(&["api.vendor.test"]).unwrap();
    let cases: [(&[&str], &[Env]); 5] = [
        (&[], &[]),
        (&["tls", "--listen", "localhost:443"], &[]),
        (
            &["dns", "--listen", "127.0.0.1:0", "--answer", "x.test=bad"],
            &[],
        ),
        // No identity in the environment.
        (&["tls", "--listen", "127.0.0.1:0"], &[]),
        (
            &["tls", "--listen", "127.0.0.1:0"],
            &[("FAKE_VENDOR_CERT", &ca.cert_pem)],
        ),
    ];
    for (args, env) in cases {
        let output = Command::new(BIN)
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output();
        let output = timeout(WAIT, output).await.unwrap().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.starts_with("fake-vendor: "), "{args:?}: {stderr}");
    }
}
