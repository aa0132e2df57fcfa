//! The request head the proxy reads before it decides: exactly `CONNECT host:port HTTP/1.1`, in
//! authority form, then at most [`MAX_HEADERS`] header lines, all CRLF-terminated, within
//! [`MAX_HEAD`] bytes (and, in the proxy, [`HEAD_DEADLINE`]). The authority is parsed here, not by
//! a URI parser: `http::Uri` reads `a:443@b:80` as host `b` and accepts ports like `0443`.

use std::time::Duration;

use crate::allowlist::parse_port;
use crate::host::Name;
use crate::Refusal;

/// The longest head, request line and headers with their CRLFs.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most header lines.
pub const MAX_HEADERS: usize = 32;
/// How long a client has to send its whole head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(10);

/// A request the rules may still allow: the canonical name and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub name: Name,
    pub port: u16,
}

/// Where the head ends in what has been read so far (the index just past its empty line), or
/// `None` when more must be read. A bare LF, a CR not followed by LF, and a head longer than
/// [`MAX_HEAD`] are refused as soon as they are seen.
pub fn head_end(read: &[u8]) -> Result<Option<usize>, Refusal> {
    for (at, &byte) in read.iter().enumerate() {
        match byte {
            b'\n' if at == 0 || read[at - 1] != b'\r' => return Err(Refusal::Malformed),
            b'\r' if read.get(at + 1).is_some_and(|next| *next != b'\n') => {
                return Err(Refusal::Malformed)
            }
            b'\n' if at >= 3 && &read[at - 3..=at] == b"\r\n\r\n" => {
                return if at < MAX_HEAD {
                    Ok(Some(at + 1))
                } else {
                    Err(Refusal::HeadTooLarge)
                };
            }
            _ => {}
        }
    }
    if read.len() >= MAX_HEAD {
        Err(Refusal::HeadTooLarge)
    } else {
        Ok(None)
    }
}

/// Parse a whole head (what [`head_end`] delimited, its final empty line included).
pub fn parse(head: &[u8]) -> Result<Connect, Refusal> {
    if head.len() > MAX_HEAD {
        return Err(Refusal::HeadTooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| Refusal::Malformed)?;
    let body = text.strip_suffix("\r\n\r\n").ok_or(Refusal::Malformed)?;
    let mut lines = body.split("\r\n");
    let request = lines.next().ok_or(Refusal::Malformed)?;
    let connect = request_line(request)?;
    let mut headers = 0;
    let mut host_seen = false;
    for line in lines {
        headers += 1;
        if headers > MAX_HEADERS {
            return Err(Refusal::HeadTooLarge);
        }
        let (name, value) = header(line)?;
        if name.eq_ignore_ascii_case("host") {
            if host_seen {
                return Err(Refusal::Malformed);
            }
            host_seen = true;
            // The Host header of a CONNECT names the same authority (RFC 9110 9.3.6).
            if authority(value)? != connect {
                return Err(Refusal::Malformed);
            }
        }
    }
    Ok(connect)
}

/// `CONNECT SP host:port SP HTTP/1.1`, single spaces, nothing else.
fn request_line(line: &str) -> Result<Connect, Refusal> {
    if !line.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(Refusal::Malformed);
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        // A method alone, or extra spaces: judge the method first (a GET with an odd line is
        // still a GET), then the shape.
        return Err(match line.split(' ').next() {
            Some("CONNECT") => Refusal::Target,
            _ => Refusal::Method,
        });
    };
    if method != "CONNECT" {
        return Err(Refusal::Method);
    }
    if version != "HTTP/1.1" {
        return Err(Refusal::Version);
    }
    authority(target)
}

/// `host:port` in authority form: no scheme, no path, no userinfo; the port required.
fn authority(target: &str) -> Result<Connect, Refusal> {
    if target.starts_with('/') || target.contains("://") || target.contains(['/', '?', '#']) {
        return Err(Refusal::Target);
    }
    let (host, port) = target.rsplit_once(':').ok_or(Refusal::Target)?;
    let port = parse_port(port)?;
    let name = Name::parse(host)?;
    Ok(Connect { name, port })
}

/// `name: value`, the name a token, the value visible ASCII with spaces and tabs; no folding.
fn header(line: &str) -> Result<(&str, &str), Refusal> {
    let (name, value) = line.split_once(':').ok_or(Refusal::Malformed)?;
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(Refusal::Malformed);
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
    {
        return Err(Refusal::Malformed);
    }
    Ok((name, value.trim_matches([' ', '\t'])))
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
