//! Workloads that exercise cordon-init's supervision from inside a real container.
//!
//! - `exit N`: exit with N.
//! - `signal-self SIG`: kill itself with SIG (a number).
//! - `sleep MS`: sleep, for deadline and forwarding tests.
//! - `burst N`: leave N orphans that all exit at the same moment, then count zombies until the
//!   init has reaped them all; prints `{"orphans":N,"zombies":Z}` and exits 0 only when Z is 0.
//! - `ignore-term-grandchild`: leave a grandchild that logs and ignores SIGTERM, then exit 0.
//! - `setsid-child`: leave a child in its own session that logs SIGTERM and exits, then exit 0.
//! - `egress-load (--ca PATH | --ca-env NAME) --name HOST (--proxy ADDR | --direct ADDR)
//!   [--bytes N] [--runs R] [--pings P] [--warmup W] [--hold K]`: `cordon bench egress`'s load
//!   against the fake vendor endpoint, through a CONNECT tunnel (`--proxy`, the init's forwarder)
//!   or straight to it (`--direct`), TLS verified against the given CA alone. Without `--hold`:
//!   R runs of an upload (`POST /sink`, N bytes) and a download (`GET /source?bytes=N`) on one
//!   keep-alive connection each, then W unmeasured and P measured `GET /ping` on one more; prints
//!   one JSON line `{"upload_mib_s":[..],"download_mib_s":[..],"ping_median_us","ping_p90_us",
//!   "pings"}`. With `--hold K`: opens K connections at once, one `/ping` on each, prints
//!   `{"holding":K}`, keeps them open [`HOLD_FOR`], then closes them. Every read has a deadline.
//!   With `--credential-env NAME` it speaks the Messages API, as through a terminated vendor host
//!   (`x-api-key` the variable's value): each run's download is a streamed answer of N bytes of
//!   text (no upload), and each ping a whole answer to a 1 KiB prompt.
//! - `relay PORT ADDR`: `cordon bench egress`'s plain relay (`relay.rs`).
//! - `command-check`: what an approved command's container lets it do, as one JSON line on
//!   stdout (and one line on stderr): whether the marker file was already in /work, whether it
//!   could write the marker, a file in a directory of /work (made if missing) and the read-only
//!   metadata, and whether a copy of itself in /tmp runs
//!   (tests run what they build); its working directory.
//! - `check-file PATH NEEDLE`: a stand-in test runner: writes `/work/test-output.log` beside the
//!   sources (as test runners do), then passes (exit 0) when PATH holds NEEDLE and fails (exit 1,
//!   the reason on stderr) when it does not. `format PATH`: a stand-in formatter that appends a
//!   line to PATH.
//! - `command-hostile WHAT`: an approved command's hostile acts, each reporting what it got as
//!   one JSON line (the container must bound each): `flood N` writes N bytes to stdout and
//!   stderr each, invalid UTF-8 and terminal escapes among them; `fork-bomb` forks until the
//!   kernel refuses and leaves every child behind; `fill-bytes` and `fill-inodes` fill /tmp;
//!   `escape-work` tries to reach the work volume beneath a `writes: none` overlay (unmount it,
//!   write its upper layer, write the volume through another path).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe, read, write, ForkResult};

/// Markers the tests look for on stdout.
pub const TERM_IGNORED: &[u8] = b"cordon-probe: grandchild ignored SIGTERM\n";
pub const SETSID_TERM: &[u8] = b"cordon-probe: setsid child got SIGTERM\n";

extern "C" fn log_and_ignore(_: libc::c_int) {
    // SAFETY: write(2) is async-signal-safe; the buffer is static.
    unsafe { libc::write(1, TERM_IGNORED.as_ptr().cast(), TERM_IGNORED.len()) };
}

extern "C" fn log_and_exit(_: libc::c_int) {
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(1, SETSID_TERM.as_ptr().cast(), SETSID_TERM.len());
        libc::_exit(0);
    }
}

fn on_term(handler: extern "C" fn(libc::c_int)) {
    let action = SigAction::new(
        SigHandler::Handler(handler),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handlers only call async-signal-safe functions.
    let _ = unsafe { sigaction(Signal::SIGTERM, &action) };
}

/// Block forever (until a signal ends the process).
fn park() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn number(args: &[String], i: usize) -> Option<u64> {
    args.get(i)?.parse().ok()
}

/// Zombies in the container: processes in state Z.
fn zombies() -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                .filter(|stat| {
                    stat.rsplit_once(')')
                        .map(|(_, rest)| rest.trim_start().starts_with('Z'))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(usize::MAX)
}

fn burst(n: u64) -> i32 {
    let Ok((r, w)) = pipe() else { return 1 };
    // SAFETY: single-threaded here; the children only read, write and _exit.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(w);
            for _ in 0..n {
                // SAFETY: as above.
                if let Ok(ForkResult::Child) = unsafe { fork() } {
                    let mut b = [0u8; 1];
                    let _ = read(&r, &mut b); // returns at EOF, when the parent closes w
                                              // SAFETY: leave without running destructors of the forked copy.
                    unsafe { libc::_exit(0) };
                }
            }
            // SAFETY: as above; the grandchildren are now orphans of PID 1.
            unsafe { libc::_exit(0) };
        }
        Ok(ForkResult::Parent { child }) => {
            drop(r);
            let _ = waitpid(child, None);
            drop(w); // every orphan sees EOF at once and exits
            let start = Instant::now();
            let mut left = zombies();
            while left > 0 && start.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(20));
                left = zombies();
            }
            println!("{{\"orphans\":{n},\"zombies\":{left}}}");
            i32::from(left != 0)
        }
        Err(_) => 1,
    }
}

/// Fork a process that runs `setup`, tells us it is ready, then parks. Returns once it is ready.
fn leave_behind(setup: impl FnOnce(), via_grandchild: bool) -> i32 {
    let Ok((r, w)) = pipe() else { return 1 };
    // SAFETY: single-threaded; the children only call async-signal-safe functions.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(r);
            if via_grandchild {
                // SAFETY: as above.
                if let Ok(ForkResult::Parent { .. }) = unsafe { fork() } {
                    // SAFETY: the middle process leaves; its child becomes an orphan of PID 1.
                    unsafe { libc::_exit(0) };
                }
            }
            setup();
            let _ = write(&w, b"r");
            drop(w);
            park();
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            let mut b = [0u8; 1];
            let ready = matches!(read(&r, &mut b), Ok(1));
            if via_grandchild {
                let _ = waitpid(child, None);
            }
            i32::from(!ready)
        }
        Err(_) => 1,
    }
}

/// How long `egress-load --hold` keeps its connections open (the host reads the proxy's memory).
const HOLD_FOR: Duration = Duration::from_secs(8);
/// The bulk transfers' write size.
const CHUNK: usize = 64 * 1024;

/// `egress-load`'s arguments.
struct Load {
    roots: rustls::RootCertStore,
    name: String,
    via: Via,
    bytes: u64,
    runs: u64,
    pings: u64,
    warmup: u64,
    hold: Option<u64>,
    /// Speak the Messages API instead (a terminated vendor host takes nothing else): the
    /// credential field, its value read from the variable `--credential-env` names.
    messages: Option<(String, String)>,
}

enum Via {
    Proxy(std::net::SocketAddr),
    Direct(std::net::SocketAddr),
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, crate::egress::Conn>;

fn load_args(args: &[String]) -> Result<Load, String> {
    let mut value = std::collections::BTreeMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} without a value"))?;
        value.insert(flag.as_str(), v.as_str());
    }
    let get = |k: &str| value.get(k).copied();
    let num = |k: &str, default: u64| -> Result<u64, String> {
        get(k).map_or(Ok(default), |v| v.parse().map_err(|e| format!("{k}: {e}")))
    };
    let pem = match (get("--ca"), get("--ca-env")) {
        (Some(path), None) => std::fs::read(path).map_err(|e| format!("{path}: {e}"))?,
        (None, Some(var)) => std::env::var(var)
            .map_err(|e| format!("{var}: {e}"))?
            .into_bytes(),
        _ => return Err("one of --ca or --ca-env".into()),
    };
    let addr = |v: &str| v.parse().map_err(|e| format!("{v}: {e}"));
    let via = match (get("--proxy"), get("--direct")) {
        (Some(p), None) => Via::Proxy(addr(p)?),
        (None, Some(d)) => Via::Direct(addr(d)?),
        _ => return Err("one of --proxy or --direct".into()),
    };
    Ok(Load {
        roots: crate::egress::roots_from_pem(&pem)?,
        name: get("--name").ok_or("--name")?.to_owned(),
        via,
        bytes: num("--bytes", 64 << 20)?,
        runs: num("--runs", 1)?,
        pings: num("--pings", 500)?,
        warmup: num("--warmup", 50)?,
        hold: get("--hold").map(|_| num("--hold", 0)).transpose()?,
        messages: match get("--credential-env") {
            None => None,
            Some(var) => {
                let value = std::env::var(var).map_err(|e| format!("{var}: {e}"))?;
                Some(("x-api-key".to_owned(), value))
            }
        },
    })
}

/// A TLS connection to the endpoint (through a tunnel or straight), its handshake done.
fn connect(load: &Load) -> Result<Tls, String> {
    let conn = match load.via {
        Via::Proxy(proxy) => crate::egress::tunnel(proxy, &format!("{}:443", load.name))?,
        Via::Direct(addr) => crate::egress::Conn::open(addr).map_err(|e| format!("{addr}: {e}"))?,
    };
    let name =
        rustls::pki_types::ServerName::try_from(load.name.clone()).map_err(|e| e.to_string())?;
    let config = crate::egress::client_config(load.roots.clone())?;
    let client = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(client, conn);
    tls.sock.step();
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("TLS handshake: {e}"))?;
    }
    Ok(tls)
}

/// One response: its status, the first `keep` bytes of its body, and the body's length.
struct Response {
    code: u16,
    kept: Vec<u8>,
    length: u64,
}

/// One HTTP/1.1 exchange's response, its body (sized or chunked) read and dropped but for the
/// first `keep` bytes. `buf` carries bytes read past the response (none: one request at a time,
/// but kept honest).
fn response(tls: &mut Tls, buf: &mut Vec<u8>, keep: usize) -> Result<Response, String> {
    let mut chunk = vec![0u8; CHUNK];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > 16 * 1024 {
            return Err("a response head over 16 KiB".into());
        }
        tls.sock.step();
        match tls
            .read(&mut chunk)
            .map_err(|e| format!("response head: {e}"))?
        {
            0 => return Err("the connection ended before a response".into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let code: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {:?}", head.lines().next()))?;
    let field = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    buf.drain(..head_end);
    if field("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let length = chunked(tls, buf)?;
        return Ok(Response {
            code,
            kept: Vec::new(),
            length,
        });
    }
    let length: usize = field("content-length")
        .and_then(|v| v.parse().ok())
        .ok_or("no Content-Length")?;
    let mut kept = Vec::new();
    let mut left = length;
    let take = |from: &[u8], kept: &mut Vec<u8>| {
        let room = keep.saturating_sub(kept.len()).min(from.len());
        kept.extend_from_slice(&from[..room]);
    };
    let first = buf.len().min(left);
    take(&buf[..first], &mut kept);
    buf.drain(..first);
    left -= first;
    while left > 0 {
        tls.sock.step();
        let want = left.min(chunk.len());
        match tls
            .read(&mut chunk[..want])
            .map_err(|e| format!("response body: {e}"))?
        {
            0 => return Err(format!("the body ended {left} bytes short")),
            n => {
                take(&chunk[..n], &mut kept);
                left -= n;
            }
        }
    }
    Ok(Response {
        code,
        kept,
        length: length as u64,
    })
}

/// Read more into `buf` (at least one byte, or an error).
fn fill(tls: &mut Tls, buf: &mut Vec<u8>, chunk: &mut [u8]) -> Result<(), String> {
    tls.sock.step();
    match tls.read(chunk).map_err(|e| format!("chunked body: {e}"))? {
        0 => Err("the chunked body ended early".into()),
        n => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// A chunked body, read and dropped: how many data bytes it held.
fn chunked(tls: &mut Tls, buf: &mut Vec<u8>) -> Result<u64, String> {
    let mut chunk = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let line_end = loop {
            if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
                break at;
            }
            if buf.len() > 1024 {
                return Err("a chunk size line over 1 KiB".into());
            }
            fill(tls, buf, &mut chunk)?;
        };
        let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = u64::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {line:?}: {e}"))?;
        buf.drain(..line_end + 2);
        // The data and its CRLF (the last chunk: the trailer's empty line).
        let mut left = size + 2;
        while left > 0 {
            if buf.is_empty() {
                fill(tls, buf, &mut chunk)?;
            }
            let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
            buf.drain(..take);
            left -= take as u64;
        }
        if size == 0 {
            return Ok(total);
        }
        total += size;
    }
}

fn send(tls: &mut Tls, bytes: &[u8]) -> Result<(), String> {
    tls.sock.step();
    tls.write_all(bytes)
        .and_then(|()| tls.flush())
        .map_err(|e| format!("write: {e}"))
}

fn mib_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / 1_048_576.0 / took.as_secs_f64()
}

/// One upload and one download of `load.bytes` on a fresh connection: MiB/s of each.
fn bulk(load: &Load) -> Result<(f64, f64), String> {
    let mut tls = connect(load)?;
    let mut buf = Vec::new();
    let n = load.bytes;
    let body = [b'u'; CHUNK];
    let t = Instant::now();
    send(
        &mut tls,
        format!(
            "POST /sink HTTP/1.1\r\nHost: {}\r\nContent-Length: {n}\r\n\r\n",
            load.name
        )
        .as_bytes(),
    )?;
    let mut left = n;
    while left > 0 {
        let k = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
        tls.sock.step();
        tls.write_all(&body[..k])
            .map_err(|e| format!("upload: {e}"))?;
        left -= k as u64;
    }
    send(&mut tls, &[])?;
    let Response {
        code, kept: answer, ..
    } = response(&mut tls, &mut buf, 32)?;
    let up = mib_s(n, t.elapsed());
    if code != 200 || answer != n.to_string().as_bytes() {
        return Err(format!(
            "POST /sink answered {code} {:?}",
            String::from_utf8_lossy(&answer)
        ));
    }
    let t = Instant::now();
    send(
        &mut tls,
        format!(
            "GET /source?bytes={n} HTTP/1.1\r\nHost: {}\r\n\r\n",
            load.name
        )
        .as_bytes(),
    )?;
    let code = response(&mut tls, &mut buf, 0)?.code;
    let down = mib_s(n, t.elapsed());
    if code != 200 {
        return Err(format!("GET /source answered {code}"));
    }
    Ok((up, down))
}

/// A Messages request with the credential: a streamed answer of `huge` bytes of text (a tool
/// offered, as the fake streams only then), or a whole answer to a 1 KiB prompt.
fn messages_request(load: &Load, field: &(String, String), huge: Option<u64>) -> Vec<u8> {
    let mut body = match huge {
        Some(n) => serde_json::json!({
            "model": "claude-bench", "max_tokens": 1024, "stream": true,
            "messages": [{"role": "user", "content": format!("[[cordon-scenario huge:{n}]] go")}],
            "tools": [{"name": "Read", "description": "Read a file",
                       "input_schema": {"type": "object"}}],
        }),
        None => serde_json::json!({
            "model": "claude-bench", "max_tokens": 1024,
            "messages": [{"role": "user",
                          "content": format!("[[cordon-scenario default]] {}", "x".repeat(1024))}],
        }),
    };
    if huge.is_none() {
        body["stream"] = serde_json::Value::Bool(false);
    }
    let body = body.to_string();
    let mut request = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: {}\r\n{}: {}\r\n\
         content-type: application/json\r\nContent-Length: {}\r\n\r\n",
        load.name,
        field.0,
        field.1,
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body.as_bytes());
    request
}

/// One streamed Messages download of `load.bytes` on a fresh connection: MiB/s.
fn messages_download(load: &Load, field: &(String, String)) -> Result<f64, String> {
    let mut tls = connect(load)?;
    let mut buf = Vec::new();
    let t = Instant::now();
    send(&mut tls, &messages_request(load, field, Some(load.bytes)))?;
    let Response {
        code, length: read, ..
    } = response(&mut tls, &mut buf, 0)?;
    let took = t.elapsed();
    if code != 200 || read < load.bytes {
        return Err(format!(
            "the streamed answer: {code}, {read} of {} bytes",
            load.bytes
        ));
    }
    Ok(mib_s(read, took))
}

/// One whole Messages answer, timed (the latency sample when speaking Messages).
fn messages_ping(
    tls: &mut Tls,
    buf: &mut Vec<u8>,
    load: &Load,
    field: &(String, String),
) -> Result<Duration, String> {
    let t = Instant::now();
    send(tls, &messages_request(load, field, None))?;
    let code = response(tls, buf, 0)?.code;
    let took = t.elapsed();
    if code != 200 {
        return Err(format!("POST /v1/messages answered {code}"));
    }
    Ok(took)
}

/// One `GET /ping` on `tls`, timed.
fn ping(tls: &mut Tls, buf: &mut Vec<u8>, name: &str) -> Result<Duration, String> {
    let t = Instant::now();
    send(
        tls,
        format!("GET /ping HTTP/1.1\r\nHost: {name}\r\n\r\n").as_bytes(),
    )?;
    let Response {
        code, kept: body, ..
    } = response(tls, buf, 16)?;
    let took = t.elapsed();
    if code != 200 || body != b"pong" {
        return Err(format!("GET /ping answered {code}"));
    }
    Ok(took)
}

fn egress_load(args: &[String]) -> Result<String, String> {
    let load = load_args(args)?;
    if let Some(k) = load.hold {
        let mut held = Vec::new();
        for _ in 0..k {
            let mut tls = connect(&load)?;
            let mut buf = Vec::new();
            ping(&mut tls, &mut buf, &load.name)?;
            held.push(tls);
        }
        println!("{{\"holding\":{k}}}");
        std::thread::sleep(HOLD_FOR);
        drop(held);
        return Ok(format!("{{\"held\":{k}}}"));
    }
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for _ in 0..load.runs {
        match &load.messages {
            // A terminated host takes Messages alone: its download is a streamed answer.
            Some(field) => down.push(messages_download(&load, field)?),
            None => {
                let (u, d) = bulk(&load)?;
                up.push(u);
                down.push(d);
            }
        }
    }
    let mut tls = connect(&load)?;
    let mut buf = Vec::new();
    let sample = |tls: &mut Tls, buf: &mut Vec<u8>| match &load.messages {
        Some(field) => messages_ping(tls, buf, &load, field),
        None => ping(tls, buf, &load.name),
    };
    for _ in 0..load.warmup {
        sample(&mut tls, &mut buf)?;
    }
    let mut us: Vec<f64> = Vec::new();
    for _ in 0..load.pings {
        us.push(sample(&mut tls, &mut buf)?.as_secs_f64() * 1e6);
    }
    us.sort_by(|a, b| a.total_cmp(b));
    // q is in [0, 1], so the rounded index is in [0, len - 1]: it fits usize.
    #[allow(clippy::cast_possible_truncation)]
    let at = |q: f64| {
        us.get(((us.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    let line = serde_json::json!({
        "upload_mib_s": up,
        "download_mib_s": down,
        "ping_median_us": at(0.5),
        "ping_p90_us": at(0.9),
        "pings": us.len(),
    });
    Ok(line.to_string())
}

/// The marker file `command-check` looks for and writes.
pub const COMMAND_MARKER: &str = "/work/cordon-command-marker";

/// The directory `command-check` makes (or finds) in /work and writes a file in.
pub const COMMAND_DIR: &str = "/work/cordon-command-dir";

/// One line on stderr in one write(2). `eprintln!` writes each piece of its format on its own
/// (stderr is unbuffered), and the engine copies stdout and stderr separately: a stdout line
/// could then land inside a stderr line (seen in CI as "FAIL: running 1 test: ...").
fn stderr_line(text: &str) {
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

/// `check-file`: pass when `path` holds `needle`.
fn check_file(path: &str, needle: &str) -> i32 {
    println!("running 1 test: {path} holds {needle:?}");
    let _ = std::fs::write("/work/test-output.log", b"the test ran\n");
    match std::fs::read_to_string(path) {
        Ok(text) if text.contains(needle) => {
            println!("test result: PASS");
            0
        }
        Ok(_) => {
            stderr_line(&format!("FAIL: {path} does not hold {needle:?}"));
            1
        }
        Err(e) => {
            stderr_line(&format!("FAIL: {path}: {e}"));
            1
        }
    }
}

/// `command-check`'s line.
fn command_check() -> String {
    let present = std::fs::symlink_metadata(COMMAND_MARKER).is_ok();
    let wrote = std::fs::write(COMMAND_MARKER, b"written by a command\n");
    // A file in a directory of the tree (under an overlay, the directory is copied up first).
    let in_dir = std::fs::create_dir(COMMAND_DIR)
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Ok(()),
            _ => Err(e),
        })
        .and_then(|()| std::fs::write(format!("{COMMAND_DIR}/file"), b"x"));
    let metadata = std::fs::write("/work/.git/cordon-command-marker", b"x");
    let copy = "/tmp/cordon-probe-copy";
    let ran = std::fs::copy("/proc/self/exe", copy)
        .and_then(|_| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(copy, std::fs::Permissions::from_mode(0o755))
        })
        .and_then(|()| {
            std::process::Command::new(copy)
                .args(["workload", "exit", "7"])
                .status()
        });
    serde_json::json!({
        "marker_present": present,
        "wrote_work": wrote.as_ref().map_or_else(|e| e.to_string(), |()| "ok".to_owned()),
        "wrote_in_dir": in_dir.as_ref().map_or_else(|e| e.to_string(), |()| "ok".to_owned()),
        "wrote_metadata": metadata.as_ref().map_or_else(|e| e.to_string(), |()| "ok".to_owned()),
        "tmp_exec_exit": ran.as_ref().ok().and_then(|s| s.code()),
        "tmp_exec_error": ran.as_ref().err().map(|e| e.to_string()),
        "cwd": std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
    })
    .to_string()
}

/// `command-hostile WHAT [N]`'s line, or `None` for an unknown act.
fn command_hostile(what: &str, n: Option<u64>) -> Option<String> {
    use std::io::Write as _;
    let line = match what {
        "flood" => {
            let total = n.unwrap_or(1 << 30);
            // Valid text, an ESC sequence, a C1 CSI, invalid bytes, a bidi override.
            let chunk: Vec<u8> = [
                &b"ok line\n\x1b[2J\x1b]0;title\x07"[..],
                "\u{9b}31m".as_bytes(),
                &[0xff, 0xc0, 0x80, b'\n'],
                "\u{202e}evil\n".as_bytes(),
            ]
            .concat()
            .repeat(2048);
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            let mut written = 0u64;
            while written < total {
                let take = usize::try_from(total - written)
                    .unwrap_or(usize::MAX)
                    .min(chunk.len());
                if out.write_all(&chunk[..take]).is_err() || err.write_all(&chunk[..take]).is_err()
                {
                    break;
                }
                written += take as u64;
            }
            let _ = out.flush();
            serde_json::json!({ "flooded": written })
        }
        "fork-bomb" => {
            let mut forked = 0u64;
            let refused = loop {
                // SAFETY: the child only sleeps (async-signal-safe) until it is killed.
                match unsafe { fork() } {
                    Ok(ForkResult::Child) => park(),
                    Ok(ForkResult::Parent { .. }) => forked += 1,
                    Err(e) => break e.to_string(),
                }
                if forked >= 1_000_000 {
                    break "a million".to_owned();
                }
            };
            serde_json::json!({ "forked": forked, "refused": refused })
        }
        "fill-bytes" => {
            let block = vec![0x5a_u8; 1 << 20];
            let mut written = 0u64;
            let error = match std::fs::File::create("/tmp/fill") {
                Ok(mut file) => loop {
                    match file.write(&block) {
                        Ok(0) => break "wrote nothing".to_owned(),
                        Ok(k) => written += k as u64,
                        Err(e) => break e.to_string(),
                    }
                },
                Err(e) => e.to_string(),
            };
            serde_json::json!({ "bytes": written, "error": error })
        }
        "fill-inodes" => {
            let mut made = 0u64;
            let error = loop {
                match std::fs::File::create(format!("/tmp/inode-{made}")) {
                    Ok(_) => made += 1,
                    Err(e) => break e.to_string(),
                }
            };
            serde_json::json!({ "files": made, "error": error })
        }
        "escape-work" => {
            let outcome =
                |r: std::io::Result<()>| r.map_or_else(|e| e.to_string(), |()| "ok".into());
            // SAFETY: a NUL-terminated literal path; umount2 reads it and nothing else.
            let rc = unsafe { libc::umount2(c"/work".as_ptr(), libc::MNT_DETACH) };
            let unmount = if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            };
            let upper = std::fs::write("/run/cordon/overlay/upper/escaped", b"x");
            let via_root = std::fs::write(format!("/proc/self/root{COMMAND_MARKER}"), b"x");
            serde_json::json!({
                "unmount": outcome(unmount),
                "upper": outcome(upper),
                "via_root": outcome(via_root),
            })
        }
        _ => return None,
    };
    Some(line.to_string())
}

/// Run one workload.
pub fn run(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        // A number beyond i32 is refused like one that does not parse.
        Some("exit") => number(args, 1)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(2),
        Some("signal-self") => {
            let Some(sig) = number(args, 1)
                .and_then(|n| i32::try_from(n).ok())
                .and_then(|n| Signal::try_from(n).ok())
            else {
                return 2;
            };
            let _ = nix::sys::signal::raise(sig);
            // A signal whose default is not to terminate gets here.
            3
        }
        Some("sleep") => {
            std::thread::sleep(Duration::from_millis(number(args, 1).unwrap_or(0)));
            0
        }
        Some("burst") => burst(number(args, 1).unwrap_or(1000)),
        Some("ignore-term-grandchild") => leave_behind(|| on_term(log_and_ignore), true),
        Some("setsid-child") => leave_behind(
            || {
                let _ = nix::unistd::setsid();
                on_term(log_and_exit);
            },
            false,
        ),
        Some("command-check") => {
            println!("{}", command_check());
            stderr_line("cordon-probe: command-check wrote its line");
            0
        }
        Some("check-file") => match (args.get(1), args.get(2)) {
            (Some(path), Some(needle)) => check_file(path, needle),
            _ => 2,
        },
        Some("format") => match args.get(1) {
            Some(path) => {
                let formatted = std::fs::read_to_string(path)
                    .and_then(|text| std::fs::write(path, format!("{text}// formatted\n")));
                match formatted {
                    Ok(()) => {
                        println!("formatted {path}");
                        0
                    }
                    Err(e) => {
                        stderr_line(&format!("format {path}: {e}"));
                        1
                    }
                }
            }
            None => 2,
        },
        Some("command-hostile") => {
            let what = args.get(1).map(String::as_str).unwrap_or("");
            match command_hostile(what, number(args, 2)) {
                Some(line) => {
                    println!("{line}");
                    0
                }
                None => 2,
            }
        }
        Some("relay") => match crate::relay::run(&args[1..]) {
            Ok(()) => 0,
            Err(e) => {
                stderr_line(&format!("cordon-probe: relay: {e}"));
                1
            }
        },
        Some("egress-load") => match egress_load(&args[1..]) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(e) => {
                stderr_line(&format!("cordon-probe: egress-load: {e}"));
                1
            }
        },
        _ => 2,
    }
}
