//! The endpoint's HTTP/1.1, over any byte stream (TLS or plain TCP): keep-alive, every head and
//! body bounded, so a misbehaving client under test can hold a connection task only so long.
//!
//! Routes: `GET /ping` (`pong`, for round-trip latency), `POST /sink` (reads the body, answers its
//! length), `GET /source?bytes=N` (N bytes), `POST /v1/messages` (the fake Messages API of
//! `crate::messages`), `POST /v1/messages/count_tokens`, anything else `fake-vendor ok\n`. Bodies
//! come by `Content-Length` or chunked.

use super::head::{find, parse_head, parse_length, Head, Refusal, MAX_BODY};
use crate::messages::{self, Answer, MessagesRecord, MAX_REQUEST_BODY};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::timeout;

/// The largest request head (request line and headers) read.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Requests served on one connection; the last answer says `Connection: close`.
pub(crate) const MAX_REQUESTS: usize = 1000;
/// How long a head may take to arrive, and how long any read or write may make no progress.
pub(crate) const IO_BOUND: Duration = Duration::from_secs(10);
/// How long, and how much, is read after the last answer before the connection is dropped.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 1 << 20;
/// How long a `hang` answer holds the connection if the client never goes away.
const HANG: Duration = Duration::from_secs(2 * 60 * 60);
/// A chunk-size line (with any extensions).
const MAX_CHUNK_LINE: usize = 4096;

const CHUNK: usize = 64 * 1024;
/// What `/source` sends, a chunk at a time.
static SOURCE_BYTES: [u8; CHUNK] = [b'x'; CHUNK];

/// What `serve` reports: each head that parsed (before its body is read), and each Messages API
/// request answered (before its answer is sent).
pub(crate) trait Observer: Send + Sync {
    fn request(&self, method: &str, target: &str);
    fn messages(&self, record: MessagesRecord);
    /// Whether a request to the API (`/v1/...`, `/api/...`) with these credential fields is let
    /// in (every one is, unless the endpoint was given its key).
    fn authorized(&self, _credentials: &[(String, Vec<u8>)]) -> bool {
        true
    }
}

/// A closure observes heads alone.
impl<F: Fn(&str, &str) + Send + Sync> Observer for F {
    fn request(&self, method: &str, target: &str) {
        self(method, target);
    }

    fn messages(&self, _record: MessagesRecord) {}
}

/// Serve requests on `io` until the client closes, a bound is hit or a request is refused.
pub(crate) async fn serve<S>(io: S, observer: &dyn Observer)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    serve_bounded(io, observer, IO_BOUND).await;
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Ping,
    Sink,
    Source,
    Messages,
    CountTokens,
    Other,
}

fn route(method: &str, path: &str) -> Route {
    match (method, path) {
        ("GET" | "HEAD", "/ping") => Route::Ping,
        ("POST" | "PUT", "/sink") => Route::Sink,
        ("GET" | "HEAD", "/source") => Route::Source,
        ("POST", "/v1/messages") => Route::Messages,
        ("POST", "/v1/messages/count_tokens") => Route::CountTokens,
        _ => Route::Other,
    }
}

/// `serve` with `bound` for `IO_BOUND` (tests shorten it).
async fn serve_bounded<S>(io: S, observer: &dyn Observer, bound: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = Conn {
        io,
        bound,
        buf: Vec::new(),
        echo: String::new(),
    };
    for served in 1..=MAX_REQUESTS {
        let head_end = match timeout(bound, conn.read_head()).await {
            Err(_elapsed) => {
                // Idle between requests is a quiet close; a head begun and not finished is not.
                if !conn.buf.is_empty() {
                    conn.refuse(408).await;
                }
                break;
            }
            Ok(Err(HeadError::Closed)) => break,
            Ok(Err(HeadError::TooLarge)) => {
                conn.refuse(Refusal::HeadTooLarge.status()).await;
                break;
            }
            Ok(Ok(end)) => end,
        };
        let head = match parse_head(&conn.buf[..head_end]) {
            Ok(head) => head,
            Err(refusal) => {
                conn.refuse(refusal.status()).await;
                break;
            }
        };
        conn.buf.drain(..head_end);
        conn.echo = credentials_echo(&head.credentials);
        observer.request(&head.method, &head.target);
        let (path, query) = head
            .target
            .split_once('?')
            .unwrap_or((head.target.as_str(), ""));
        let route = route(&head.method, path);
        let api = path.starts_with("/v1/") || path.starts_with("/api/");
        if api && !observer.authorized(&head.credentials) {
            // Answered like the vendor: 401, its error body; the connection stays usable, as the
            // body (unread) is drained by closing.
            let _ = conn
                .respond(Body::Answer(messages::unauthorized()), false, false)
                .await;
            break;
        }
        // The Messages API's bodies are kept (up to a bound); any other is counted and dropped.
        let keep =
            matches!(route, Route::Messages | Route::CountTokens).then_some(MAX_REQUEST_BODY);
        if keep.is_some_and(|limit| head.content_length > limit) {
            conn.refuse(413).await;
            break;
        }
        if head.expect_continue
            && (head.content_length > 0 || head.chunked)
            && conn.write(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            break;
        }
        let (length, body) = match conn.read_body(&head, keep).await {
            Ok(read) => read,
            Err(BodyError::Closed) => break,
            Err(BodyError::TooLarge) => {
                conn.refuse(413).await;
                break;
            }
            Err(BodyError::Malformed) => {
                conn.refuse(400).await;
                break;
            }
        };
        let text = |bytes: Vec<u8>| {
            Body::Answer(Answer::Whole {
                status: 200,
                content_type: "text/plain",
                body: bytes,
            })
        };
        let body = match route {
            Route::Ping => text(b"pong".to_vec()),
            Route::Sink => text(length.to_string().into_bytes()),
            Route::Source => match source_bytes(query) {
                Some(n) => Body::Source(n),
                None => {
                    conn.refuse(400).await;
                    break;
                }
            },
            Route::Messages => {
                let (answer, record) = messages::answer(&head.target, &body);
                observer.messages(record);
                Body::Answer(answer)
            }
            Route::CountTokens => Body::Answer(messages::count_tokens()),
            Route::Other => text(b"fake-vendor ok\n".to_vec()),
        };
        let keep_alive = head.keep_alive && served < MAX_REQUESTS;
        let head_only = head.method == "HEAD";
        match conn.respond(body, head_only, keep_alive).await {
            Ok(true) if keep_alive => {}
            _ => break,
        }
    }
    conn.close().await;
}

/// What an answer carries.
enum Body {
    Answer(Answer),
    /// This many bytes of `SOURCE_BYTES`, streamed.
    Source(u64),
}

enum HeadError {
    /// The peer closed, reset or failed before a complete head.
    Closed,
    TooLarge,
}

#[derive(Debug)]
enum BodyError {
    /// The peer closed, reset, failed or stalled.
    Closed,
    TooLarge,
    /// A chunked framing that does not parse.
    Malformed,
}

/// One connection: the stream, its progress bound, and bytes read past the current request (a
/// pipelined next one).
struct Conn<S> {
    io: S,
    bound: Duration,
    buf: Vec<u8>,
    /// The current request's [`credentials_echo`] line.
    echo: String,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Read into `buf` until it holds a complete head; the index just past its blank line.
    async fn read_head(&mut self) -> Result<usize, HeadError> {
        let mut searched = 0;
        let mut chunk = [0u8; 8 * 1024];
        loop {
            if let Some(at) = find(&self.buf[searched..], b"\r\n\r\n") {
                let end = searched + at + 4;
                return if end > MAX_HEAD {
                    Err(HeadError::TooLarge)
                } else {
                    Ok(end)
                };
            }
            if self.buf.len() >= MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
            searched = self.buf.len().saturating_sub(3);
            let room = (MAX_HEAD + 4 - self.buf.len()).min(chunk.len());
            match self.io.read(&mut chunk[..room]).await {
                Ok(n) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return Err(HeadError::Closed),
            }
        }
    }

    /// Read the body `head` frames: its length, and with `keep` (the most kept) its bytes; what is
    /// in `buf` beyond it stays for the next request.
    async fn read_body(
        &mut self,
        head: &Head,
        keep: Option<u64>,
    ) -> Result<(u64, Vec<u8>), BodyError> {
        let mut kept = Vec::new();
        let out = keep.is_some().then_some(&mut kept);
        let length = if head.chunked {
            self.read_chunked(keep.unwrap_or(MAX_BODY), out).await?
        } else {
            self.read_exactly(head.content_length, out).await?;
            head.content_length
        };
        Ok((length, kept))
    }

    /// `length` bytes, the ones already in `buf` first, into `out` or dropped.
    async fn read_exactly(
        &mut self,
        length: u64,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<(), BodyError> {
        let buffered = usize::try_from(length)
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        if let Some(out) = out.as_deref_mut() {
            out.extend_from_slice(&self.buf[..buffered]);
        }
        self.buf.drain(..buffered);
        let mut left = length - buffered as u64;
        let mut chunk = vec![0u8; CHUNK];
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            match timeout(self.bound, self.io.read(&mut chunk[..want])).await {
                Ok(Ok(n)) if n > 0 => {
                    if let Some(out) = out.as_deref_mut() {
                        out.extend_from_slice(&chunk[..n]);
                    }
                    left -= n as u64;
                }
                _ => return Err(BodyError::Closed),
            }
        }
        Ok(())
    }

    /// A chunked body of at most `limit` bytes (RFC 9112 7.1): its length. Extensions are
    /// ignored, trailers read and dropped.
    async fn read_chunked(
        &mut self,
        limit: u64,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<u64, BodyError> {
        let mut total: u64 = 0;
        loop {
            let line = self.read_line(MAX_CHUNK_LINE).await?;
            let size = chunk_size(&line).ok_or(BodyError::Malformed)?;
            if size == 0 {
                break;
            }
            total = total
                .checked_add(size)
                .filter(|&total| total <= limit)
                .ok_or(BodyError::TooLarge)?;
            self.read_exactly(size, out.as_deref_mut()).await?;
            if !self.read_line(0).await?.is_empty() {
                return Err(BodyError::Malformed);
            }
        }
        let mut trailers = 0;
        loop {
            let line = self.read_line(MAX_HEAD).await?;
            if line.is_empty() {
                return Ok(total);
            }
            trailers += line.len() + 2;
            if trailers > MAX_HEAD {
                return Err(BodyError::Malformed);
            }
        }
    }

    /// One CRLF-ended line of at most `max` bytes, without its CRLF; a bare CR or LF in it is
    /// malformed.
    async fn read_line(&mut self, max: usize) -> Result<Vec<u8>, BodyError> {
        let mut chunk = [0u8; 8 * 1024];
        loop {
            if let Some(at) = find(&self.buf, b"\r\n") {
                if at > max {
                    return Err(BodyError::Malformed);
                }
                let line = self.buf[..at].to_vec();
                self.buf.drain(..at + 2);
                if line.iter().any(|&b| b == b'\r' || b == b'\n') {
                    return Err(BodyError::Malformed);
                }
                return Ok(line);
            }
            if self.buf.len() > max + 1 {
                return Err(BodyError::Malformed);
            }
            match timeout(self.bound, self.io.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return Err(BodyError::Closed),
            }
        }
    }

    /// Write all of `bytes` and flush, each step bounded.
    async fn write(&mut self, bytes: &[u8]) -> Result<(), ()> {
        self.write_unflushed(bytes).await?;
        match timeout(self.bound, self.io.flush()).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    async fn write_unflushed(&mut self, bytes: &[u8]) -> Result<(), ()> {
        match timeout(self.bound, self.io.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    /// Send `body`; whether the connection may carry another request (a `hang` answer, or a
    /// status that has no body, ends it).
    async fn respond(&mut self, body: Body, head_only: bool, keep_alive: bool) -> Result<bool, ()> {
        match body {
            Body::Answer(Answer::Whole {
                status,
                content_type,
                body,
            }) => {
                if no_body(status) {
                    // 1xx, 204 and 304 frame no body: the head alone, then close.
                    let head = format!(
                        "HTTP/1.1 {status} {}\r\nConnection: close\r\n\r\n",
                        reason(status)
                    );
                    self.write(head.as_bytes()).await?;
                    return Ok(false);
                }
                let mut out = response_head(
                    status,
                    content_type,
                    Some(body.len() as u64),
                    keep_alive,
                    &self.echo,
                )
                .into_bytes();
                if !head_only {
                    out.extend_from_slice(&body);
                }
                self.write(&out).await?;
                Ok(true)
            }
            Body::Source(n) => {
                let out = response_head(200, "text/plain", Some(n), keep_alive, &self.echo);
                if head_only {
                    self.write(out.as_bytes()).await?;
                    return Ok(true);
                }
                self.write_unflushed(out.as_bytes()).await?;
                let mut left = n;
                while left > 0 {
                    let chunk = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
                    self.write_unflushed(&SOURCE_BYTES[..chunk]).await?;
                    left -= chunk as u64;
                }
                self.write(&[]).await?;
                Ok(true)
            }
            Body::Answer(Answer::Streamed {
                content_type,
                pieces,
                hang,
            }) => {
                let keep_alive = keep_alive && !hang;
                self.write(
                    response_head(200, content_type, None, keep_alive, &self.echo).as_bytes(),
                )
                .await?;
                for piece in pieces.filter(|p| !p.is_empty()) {
                    let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                    chunk.extend_from_slice(&piece);
                    chunk.extend_from_slice(b"\r\n");
                    // Flushed piece by piece: a streaming client sees each event as it is sent.
                    self.write(&chunk).await?;
                }
                if hang {
                    self.wait_for_close().await;
                    return Ok(false);
                }
                self.write(b"0\r\n\r\n").await?;
                Ok(true)
            }
        }
    }

    /// Hold the connection, reading and dropping whatever comes, until the client closes it (or
    /// `HANG` passes). Reads block: no busy loop.
    async fn wait_for_close(&mut self) {
        let mut chunk = vec![0u8; CHUNK];
        let drain = async {
            loop {
                match self.io.read(&mut chunk).await {
                    Ok(n) if n > 0 => {}
                    _ => return,
                }
            }
        };
        let _ = timeout(HANG, drain).await;
    }

    /// An empty answer with `Connection: close`; the caller then closes.
    async fn refuse(&mut self, status: u16) {
        let _ = self
            .respond(
                Body::Answer(Answer::Whole {
                    status,
                    content_type: "text/plain",
                    body: Vec::new(),
                }),
                false,
                false,
            )
            .await;
    }

    /// A TLS close_notify, then the FIN. Closing with unread bytes makes the kernel send a reset,
    /// which can destroy the answer before the client reads it (a refusal, or the last of
    /// `MAX_REQUESTS` with more pipelined behind it): so read and discard a little first. All
    /// bounded, as the peer may not be reading.
    async fn close(mut self) {
        if timeout(self.bound, self.io.shutdown()).await.is_err() {
            return;
        }
        let mut chunk = vec![0u8; CHUNK];
        let discard = async {
            let mut read = 0;
            while read < LINGER_BYTES {
                match self.io.read(&mut chunk).await {
                    Ok(n) if n > 0 => read += n,
                    _ => return,
                }
            }
        };
        let _ = timeout(LINGER.min(self.bound), discard).await;
    }
}

/// A chunk-size line: hex digits, then optional whitespace and `;extensions`.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let size = match line.iter().position(|&b| b == b';') {
        Some(at) => &line[..at],
        None => line,
    };
    let mut size = size;
    while let [rest @ .., b' ' | b'\t'] = size {
        size = rest;
    }
    if size.is_empty() || size.len() > 16 || !size.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(size).ok()?, 16).ok()
}

/// Statuses whose responses carry no body (RFC 9110 6.4.1).
fn no_body(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}

/// `bytes=N` from the query, N at most `MAX_BODY`.
fn source_bytes(query: &str) -> Option<u64> {
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("bytes="))?;
    parse_length(value.as_bytes()).filter(|&n| n <= MAX_BODY)
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "",
    }
}

/// The status line and headers; `length` `None` is a chunked body.
fn response_head(
    status: u16,
    content_type: &str,
    length: Option<u64>,
    keep_alive: bool,
    echo: &str,
) -> String {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let framing = match length {
        Some(length) => format!("Content-Length: {length}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\n{framing}\r\n{echo}Connection: {connection}\r\n\r\n",
        reason(status)
    )
}

/// The header that echoes the request's credential fields: each one's name and the SHA-256 of
/// its value (never the value: a log line or a probe's evidence may show it), in order.
pub(crate) const ECHO_HEADER: &str = "x-fake-vendor-credentials";

/// The [`ECHO_HEADER`] line for `credentials` (empty when there are none).
fn credentials_echo(credentials: &[(String, Vec<u8>)]) -> String {
    use sha2::Digest;
    if credentials.is_empty() {
        return String::new();
    }
    let fields: Vec<String> = credentials
        .iter()
        .map(|(name, value)| {
            let digest: String = sha2::Sha256::digest(value)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("{name}={digest}")
        })
        .collect();
    format!("{ECHO_HEADER}: {}\r\n", fields.join(", "))
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
