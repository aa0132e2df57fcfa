//! The endpoint's HTTP/1.1, over any byte stream (TLS or plain TCP): keep-alive, every head and
//! body bounded, so a misbehaving client under test can hold a connection task only so long.
//!
//! Routes: `GET /ping` (`pong`, for round-trip latency), `POST /sink` (reads the body, answers its
//! length), `GET /source?bytes=N` (N bytes), anything else `fake-vendor ok\n`.

use super::head::{find, parse_head, parse_length, Refusal, MAX_BODY};
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

const CHUNK: usize = 64 * 1024;
/// What `/source` sends, a chunk at a time.
static SOURCE_BYTES: [u8; CHUNK] = [b'x'; CHUNK];

/// Serve requests on `io` until the client closes, a bound is hit or a request is refused.
/// `on_request(method, target)` is called for each head that parsed, before its body is read.
pub(crate) async fn serve<S>(io: S, on_request: &(dyn Fn(&str, &str) + Send + Sync))
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    serve_bounded(io, on_request, IO_BOUND).await;
}

/// `serve` with `bound` for `IO_BOUND` (tests shorten it).
async fn serve_bounded<S>(io: S, on_request: &(dyn Fn(&str, &str) + Send + Sync), bound: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = Conn {
        io,
        bound,
        buf: Vec::new(),
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
        on_request(&head.method, &head.target);
        if head.expect_continue
            && head.content_length > 0
            && conn.write(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            break;
        }
        if conn.read_body(head.content_length).await.is_err() {
            break;
        }
        let (path, query) = head
            .target
            .split_once('?')
            .unwrap_or((head.target.as_str(), ""));
        let body = match (head.method.as_str(), path) {
            ("GET" | "HEAD", "/ping") => Body::Bytes(b"pong".to_vec()),
            ("POST" | "PUT", "/sink") => Body::Bytes(head.content_length.to_string().into_bytes()),
            ("GET" | "HEAD", "/source") => match source_bytes(query) {
                Some(n) => Body::Source(n),
                None => {
                    conn.refuse(400).await;
                    break;
                }
            },
            _ => Body::Bytes(b"fake-vendor ok\n".to_vec()),
        };
        let keep_alive = head.keep_alive && served < MAX_REQUESTS;
        let head_only = head.method == "HEAD";
        if conn
            .respond(200, &body, head_only, keep_alive)
            .await
            .is_err()
            || !keep_alive
        {
            break;
        }
    }
    conn.close().await;
}

/// What a 200 carries.
enum Body {
    Bytes(Vec<u8>),
    /// This many bytes of `SOURCE_BYTES`, streamed.
    Source(u64),
}

enum HeadError {
    /// The peer closed, reset or failed before a complete head.
    Closed,
    TooLarge,
}

/// One connection: the stream, its progress bound, and bytes read past the current request (a
/// pipelined next one).
struct Conn<S> {
    io: S,
    bound: Duration,
    buf: Vec<u8>,
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

    /// Read and discard a `length`-byte body, the bytes already in `buf` first; what is in `buf`
    /// beyond it stays for the next request.
    async fn read_body(&mut self, length: u64) -> Result<(), ()> {
        let buffered = usize::try_from(length)
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        self.buf.drain(..buffered);
        let mut left = length - buffered as u64;
        let mut chunk = vec![0u8; CHUNK];
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            match timeout(self.bound, self.io.read(&mut chunk[..want])).await {
                Ok(Ok(n)) if n > 0 => left -= n as u64,
                _ => return Err(()),
            }
        }
        Ok(())
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

    async fn respond(
        &mut self,
        status: u16,
        body: &Body,
        head_only: bool,
        keep_alive: bool,
    ) -> Result<(), ()> {
        let length = match body {
            Body::Bytes(bytes) => bytes.len() as u64,
            Body::Source(n) => *n,
        };
        let mut out = response_head(status, length, keep_alive).into_bytes();
        match body {
            _ if head_only => self.write(&out).await,
            Body::Bytes(bytes) => {
                out.extend_from_slice(bytes);
                self.write(&out).await
            }
            Body::Source(n) => {
                self.write_unflushed(&out).await?;
                let mut left = *n;
                while left > 0 {
                    let chunk = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
                    self.write_unflushed(&SOURCE_BYTES[..chunk]).await?;
                    left -= chunk as u64;
                }
                self.write(&[]).await
            }
        }
    }

    /// An empty answer with `Connection: close`; the caller then closes.
    async fn refuse(&mut self, status: u16) {
        let _ = self
            .respond(status, &Body::Bytes(Vec::new()), false, false)
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

/// `bytes=N` from the query, N at most `MAX_BODY`.
fn source_bytes(query: &str) -> Option<u64> {
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("bytes="))?;
    parse_length(value.as_bytes()).filter(|&n| n <= MAX_BODY)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        _ => "",
    }
}

fn response_head(status: u16, length: u64, keep_alive: bool) -> String {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {length}\r\nConnection: {connection}\r\n\r\n",
        reason(status)
    )
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
