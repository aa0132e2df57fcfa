//! The request head the proxy reads before it decides: exactly `CONNECT host:port HTTP/1.1`, in
//! authority form, then at most [`MAX_HEADERS`] header lines, exactly one of them a Host header
//! naming the same authority, all CRLF-terminated, within [`MAX_HEAD`] bytes (and, in the proxy,
//! [`HEAD_DEADLINE`]). The authority is parsed here, not by
//! a URI parser: `http::Uri` reads `a:443@b:80` as host `b` and accepts ports like `0443`.
//!
//! With the method rule left out ([`parse_with`], `any_method`, for a gate case only) any method
//! token is read, and the target may also be in absolute form, `http://host[:port][/path]` or
//! `https://...` (port 80 or 443 by default); every other bound of the head still holds.

use std::time::Duration;

use crate::allowlist::parse_port;
use crate::host::Name;
use crate::Rejection;

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
pub fn head_end(read: &[u8]) -> Result<Option<usize>, Rejection> {
    for (at, &byte) in read.iter().enumerate() {
        match byte {
            b'\n' if at == 0 || read[at - 1] != b'\r' => return Err(Rejection::Malformed),
            b'\r' if read.get(at + 1).is_some_and(|next| *next != b'\n') => {
                return Err(Rejection::Malformed)
            }
            b'\n' if at >= 3 && &read[at - 3..=at] == b"\r\n\r\n" => {
                return if at < MAX_HEAD {
                    Ok(Some(at + 1))
                } else {
                    Err(Rejection::HeadTooLarge)
                };
            }
            _ => {}
        }
    }
    if read.len() >= MAX_HEAD {
        Err(Rejection::HeadTooLarge)
    } else {
        Ok(None)
    }
}

impl std::fmt::Display for Connect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.port)
    }
}

/// How a request line named its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `host:port`.
    Authority,
    /// `http://host[:port][/path]` (only with any method allowed).
    Absolute,
}

/// Parse a whole head (what [`head_end`] delimited, its final empty line included).
pub fn parse(head: &[u8]) -> Result<Connect, Rejection> {
    parse_with(head, false)
}

/// [`parse`], or, with `any_method` (the method rule left out), any method token and a target in
/// authority or absolute form. The size, header, line-ending and Host rules hold either way: an
/// authority-form target needs exactly one Host header naming it (RFC 9112 3.2; none at all is
/// refused as one naming something else is); an absolute-form target is what a proxy goes by
/// (RFC 9112 3.2.2), so its Host header is not compared, and one is enough.
pub fn parse_with(head: &[u8], any_method: bool) -> Result<Connect, Rejection> {
    if head.len() > MAX_HEAD {
        return Err(Rejection::HeadTooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| Rejection::Malformed)?;
    let body = text.strip_suffix("\r\n\r\n").ok_or(Rejection::Malformed)?;
    let mut lines = body.split("\r\n");
    let request = lines.next().ok_or(Rejection::Malformed)?;
    let (connect, form) = request_line(request, any_method)?;
    let mut headers = 0;
    let mut host_seen = false;
    for line in lines {
        headers += 1;
        if headers > MAX_HEADERS {
            return Err(Rejection::HeadTooLarge);
        }
        let (name, value) = header(line)?;
        if name.eq_ignore_ascii_case("host") {
            if host_seen {
                return Err(Rejection::Malformed);
            }
            host_seen = true;
            // The Host header of a CONNECT names the same authority (RFC 9110 9.3.6); anything
            // else in it, however it fails, is a malformed header, not a second target.
            if form == Form::Authority && !names_target(value, &connect) {
                return Err(Rejection::Malformed);
            }
        }
    }
    if form == Form::Authority && !host_seen {
        return Err(Rejection::Malformed);
    }
    Ok(connect)
}

/// `CONNECT SP host:port SP HTTP/1.1`, single spaces, nothing else (with `any_method`: any
/// method token, and an absolute-form target too).
fn request_line(line: &str, any_method: bool) -> Result<(Connect, Form), Rejection> {
    if !line.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(Rejection::Malformed);
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        // A method alone, or extra spaces: judge the method first (a GET with an odd line is
        // still a GET), then the shape.
        return Err(match line.split(' ').next() {
            Some("CONNECT") => Rejection::Target,
            Some(method) if any_method && is_token(method) => Rejection::Target,
            _ => Rejection::Method,
        });
    };
    let method_allowed = if any_method {
        is_token(method)
    } else {
        method == "CONNECT"
    };
    if !method_allowed {
        return Err(Rejection::Method);
    }
    if version != "HTTP/1.1" {
        return Err(Rejection::Version);
    }
    if any_method {
        for (scheme, default_port) in [("http://", 80), ("https://", 443)] {
            if let Some(rest) = target.strip_prefix(scheme) {
                return Ok((absolute(rest, default_port)?, Form::Absolute));
            }
        }
    }
    Ok((authority(target)?, Form::Authority))
}

/// An RFC 9110 token (a method, a header name).
fn is_token(text: &str) -> bool {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !text.is_empty() && text.bytes().all(token)
}

/// What follows `http://` or `https://` in an absolute-form target: `host[:port]`, then nothing
/// or a path or query; no userinfo, no fragment, no IP literal (the host rule as for CONNECT).
fn absolute(rest: &str, default_port: u16) -> Result<Connect, Rejection> {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if path.contains('#') || authority.contains('@') {
        return Err(Rejection::Target);
    }
    if authority.starts_with('[') {
        // An IPv6 literal.
        return Err(Rejection::Host);
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, parse_port(port)?),
        None => (authority, default_port),
    };
    let name = Name::parse(host)?;
    Ok(Connect { name, port })
}

/// Whether a Host header names the CONNECT's authority: `host:port` as the request line has it,
/// or the name alone when the port is 443 (clients that leave out the default port: the target
/// is the request line's either way).
fn names_target(value: &str, connect: &Connect) -> bool {
    match authority(value) {
        Ok(named) => named == *connect,
        Err(_) => {
            connect.port == 443
                && !value.contains(':')
                && Name::parse(value).is_ok_and(|name| name == connect.name)
        }
    }
}

/// `host:port` in authority form: no scheme, no path, no userinfo; the port required.
fn authority(target: &str) -> Result<Connect, Rejection> {
    if target.starts_with('/') || target.contains("://") || target.contains(['/', '?', '#']) {
        return Err(Rejection::Target);
    }
    if target.starts_with('[') {
        // An IPv6 literal, with or without a port: the host rule, before any port is looked for
        // (its last `:` may be inside the brackets).
        return Err(Rejection::Host);
    }
    let (host, port) = target.rsplit_once(':').ok_or(Rejection::Target)?;
    let port = parse_port(port)?;
    let name = Name::parse(host)?;
    Ok(Connect { name, port })
}

/// `name: value`, the name a token, the value visible ASCII with spaces and tabs; no folding.
fn header(line: &str) -> Result<(&str, &str), Rejection> {
    let (name, value) = line.split_once(':').ok_or(Rejection::Malformed)?;
    if !is_token(name) {
        return Err(Rejection::Malformed);
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
    {
        return Err(Rejection::Malformed);
    }
    Ok((name, value.trim_matches([' ', '\t'])))
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
