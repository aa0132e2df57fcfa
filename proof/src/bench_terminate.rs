//! `cordon bench terminate`: what the vendor host's TLS terminator (`cordon_egress::terminate`)
//! costs by itself, against a direct client of the same fake Messages API, side by side in one
//! run; reported, never asserted. Everything is in this process, on loopback: the fake vendor's
//! TLS endpoint (taking only the key), and the terminator serving each accepted connection with
//! the invocation's leaf, swapping the sentinel for the key and forwarding over its own TLS
//! connection to the same endpoint. The container hops (the init's forwarder, the proxy's unix
//! socket, the bridge) are `cordon bench egress`'s; this is the terminator's share on top of them.
//!
//! - Latency: one keep-alive connection per arm, 20 unmeasured requests each, then `requests`
//!   Messages-shaped requests (a 1 KiB prompt, a whole JSON answer), the arms alternating request
//!   by request; the median of each and their difference.
//! - Download: `runs` streamed answers of `bytes` of text each (the fake's `huge` scenario, as
//!   server-sent events), the arms alternating; each arm's median throughput and their ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cordon_egress::terminate::{self, client_config, server_config, Key, Terminator};
use cordon_egress::vendor::{Budget, CredentialHeader, MAX_BUDGET};
use cordon_fake_vendor::tls::{self as fake, Auth, Identity};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};

use crate::bench::median;
use cordon::error::{Error, Result};

const HOST: &str = "api.vendor.test";
const KEY: &str = "sk-bench-real-key";
const SENTINEL: &str = "sk-ant-api03-bench-sentinelAA";
const WARM_UP: usize = 20;
const MIB: f64 = 1_048_576.0;

/// What `cordon bench terminate` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TerminateReport {
    pub requests: usize,
    pub direct_p50_us: f64,
    pub terminated_p50_us: f64,
    /// The terminator's added latency at the median (target: under 1 ms).
    pub added_p50_us: f64,
    pub runs: usize,
    pub download_bytes: u64,
    pub direct_mib_s: f64,
    pub terminated_mib_s: f64,
    /// Terminated over direct (target: at least 0.8).
    pub download_ratio: f64,
}

impl TerminateReport {
    pub fn text(&self) -> String {
        format!(
            "terminator, in process on loopback, {} requests and {} downloads of {:.0} MiB, arms alternating\n\
             Messages request p50: direct {:.0} us, terminated {:.0} us, added {:.0} us (target < 1000)\n\
             streamed download:    direct {:.0} MiB/s, terminated {:.0} MiB/s, ratio {:.2} (target >= 0.8)",
            self.requests,
            self.runs,
            self.download_bytes as f64 / MIB,
            self.direct_p50_us,
            self.terminated_p50_us,
            self.added_p50_us,
            self.direct_mib_s,
            self.terminated_mib_s,
            self.download_ratio,
        )
    }
}

fn failed(what: &str, error: impl std::fmt::Display) -> Error {
    Error::Internal(format!("bench terminate: {what}: {error}"))
}

/// Run the benchmark: `requests` latency samples per arm, `runs` downloads of `bytes` per arm.
pub async fn terminate(requests: usize, runs: usize, bytes: u64) -> Result<TerminateReport> {
    let vendor = cordon_fake_vendor::ca::generate(&[HOST]).map_err(|e| failed("vendor CA", e))?;
    let invocation =
        cordon_fake_vendor::ca::generate(&[HOST]).map_err(|e| failed("invocation CA", e))?;
    let identity = Identity {
        cert_pem: vendor.cert_pem.clone(),
        key_pem: vendor.key_pem.clone(),
    };
    let auth = Auth::from_hex(&Auth::hex_of(KEY));
    let endpoint =
        fake::start_with(listen().await?, &identity, auth).map_err(|e| failed("fake vendor", e))?;
    let terminator = Arc::new(Terminator::new(
        HOST,
        CredentialHeader::ApiKey,
        SENTINEL.to_owned(),
        Key::new(KEY.to_owned()).map_err(|e| failed("key", e))?,
        Budget {
            requests: MAX_BUDGET,
            request_bytes: MAX_BUDGET,
            response_bytes: MAX_BUDGET,
        },
        server_config(
            invocation.cert_pem.as_bytes(),
            invocation.key_pem.as_bytes(),
        )
        .map_err(|e| failed("leaf", e))?,
        client_config(Some(vendor.ca_pem.as_bytes())).map_err(|e| failed("upstream CA", e))?,
    ));
    let terminated = serve_terminated(endpoint.addr(), terminator).await?;
    let direct = Arm {
        addr: endpoint.addr(),
        ca: vendor.ca_pem,
        credential: KEY,
    };
    let through = Arm {
        addr: terminated,
        ca: invocation.ca_pem,
        credential: SENTINEL,
    };
    let (direct_us, terminated_us) = latency(&direct, &through, requests).await?;
    let (direct_rate, terminated_rate) = download(&direct, &through, runs, bytes).await?;
    let (direct_p50_us, terminated_p50_us) = (median(&direct_us), median(&terminated_us));
    let (direct_mib_s, terminated_mib_s) = (median(&direct_rate), median(&terminated_rate));
    Ok(TerminateReport {
        requests,
        direct_p50_us,
        terminated_p50_us,
        added_p50_us: terminated_p50_us - direct_p50_us,
        runs,
        download_bytes: bytes,
        direct_mib_s,
        terminated_mib_s,
        download_ratio: terminated_mib_s / direct_mib_s,
    })
}

async fn listen() -> Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| failed("listening on loopback", e))
}

/// A loopback listener whose every connection the terminator serves, each with its own
/// connection to the endpoint (as the proxy dials one per CONNECT).
async fn serve_terminated(
    endpoint: std::net::SocketAddr,
    terminator: Arc<Terminator>,
) -> Result<std::net::SocketAddr> {
    let listener = listen().await?;
    let addr = listener
        .local_addr()
        .map_err(|e| failed("listener address", e))?;
    tokio::spawn(async move {
        while let Ok((agent, _)) = listener.accept().await {
            let _ = agent.set_nodelay(true);
            let terminator = terminator.clone();
            tokio::spawn(async move {
                let Ok(upstream) = TcpStream::connect(endpoint).await else {
                    return;
                };
                let _ = upstream.set_nodelay(true);
                let record: Arc<dyn Fn(terminate::Call) + Send + Sync> = Arc::new(|_| {});
                terminate::serve(agent, Vec::new(), upstream, terminator, record).await;
            });
        }
    });
    Ok(addr)
}

/// One side of the comparison: where the client connects, what it trusts, what it sends.
struct Arm {
    addr: std::net::SocketAddr,
    ca: String,
    credential: &'static str,
}

impl Arm {
    /// A keep-alive HTTP/1.1 connection over TLS trusting this arm's CA.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| failed("connect", e))?;
        let _ = tcp.set_nodelay(true);
        let config = client_config(Some(self.ca.as_bytes())).map_err(|e| failed("client", e))?;
        let name = ServerName::try_from(HOST.to_owned()).map_err(|e| failed("name", e))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| failed("handshake", e))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| failed("http handshake", e))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    /// One Messages request; the bytes of its answer's body.
    async fn ask(
        &self,
        sender: &mut SendRequest<Full<Bytes>>,
        prompt: &str,
        stream: bool,
    ) -> Result<u64> {
        let mut body = serde_json::json!({
            "model": "claude-bench",
            "max_tokens": 1024,
            "stream": stream,
            "messages": [{"role": "user", "content": prompt}],
        });
        // Streamed, a tool is offered: the fake answers a request offering none with a short
        // side answer, whatever its scenario.
        if stream {
            body["tools"] = serde_json::json!([{"name": "Read", "description": "Read a file",
                "input_schema": {"type": "object"}}]);
        }
        let body = body.to_string();
        let request = http::Request::post("/v1/messages?beta=true")
            .header("host", HOST)
            .header("x-api-key", self.credential)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| failed("request", e))?;
        sender.ready().await.map_err(|e| failed("connection", e))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| failed("send", e))?;
        if response.status() != http::StatusCode::OK {
            return Err(failed("answer", response.status()));
        }
        let mut body = response.into_body();
        let mut read = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| failed("body", e))?;
            if let Ok(data) = frame.into_data() {
                read += data.len() as u64;
            }
        }
        Ok(read)
    }
}

/// Alternate a request on each arm's one connection; each request's microseconds, per arm.
async fn latency(direct: &Arm, through: &Arm, requests: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let prompt = format!("[[cordon-scenario default]] {}", "x".repeat(1024));
    let mut senders = [direct.connect().await?, through.connect().await?];
    let arms = [direct, through];
    let mut took = [Vec::with_capacity(requests), Vec::with_capacity(requests)];
    for i in 0..WARM_UP + requests {
        for (at, arm) in arms.iter().enumerate() {
            let started = Instant::now();
            arm.ask(&mut senders[at], &prompt, false).await?;
            if i >= WARM_UP {
                took[at].push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let [direct_us, terminated_us] = took;
    Ok((direct_us, terminated_us))
}

/// Alternate a streamed answer of `bytes` on each arm, the order swapping run by run; each
/// download's MiB/s, per arm.
async fn download(
    direct: &Arm,
    through: &Arm,
    runs: usize,
    bytes: u64,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let prompt = format!("[[cordon-scenario huge:{bytes}]] go");
    let mut rates = [Vec::new(), Vec::new()];
    for run in 0..runs {
        let order = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for at in order {
            let arm = [direct, through][at];
            let mut sender = arm.connect().await?;
            let started = Instant::now();
            let read = arm.ask(&mut sender, &prompt, true).await?;
            // The events' framing comes on top of the text: fewer bytes is a short answer.
            if read < bytes {
                return Err(failed("download", format!("{read} of {bytes} bytes")));
            }
            let seconds = started
                .elapsed()
                .max(Duration::from_micros(1))
                .as_secs_f64();
            rates[at].push(read as f64 / MIB / seconds);
        }
    }
    let [direct_rate, terminated_rate] = rates;
    Ok((direct_rate, terminated_rate))
}
