//! The request head: parsed strictly where a lax reading could frame the next request differently
//! (line endings, header names, `Content-Length`, `Transfer-Encoding`), leniently elsewhere (no
//! `Host` required, an absolute-form target taken for its path). A body is framed by
//! `Content-Length` or by `Transfer-Encoding: chunked` alone.

/// The largest body accepted (`Content-Length`), and the most `/source` sends.
pub(crate) const MAX_BODY: u64 = 1 << 30;

/// A request head that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) method: String,
    /// The request target as sent (origin form, path and query), or the path and query of an
    /// absolute-form target.
    pub(crate) target: String,
    /// 0 when chunked.
    pub(crate) content_length: u64,
    /// `Transfer-Encoding: chunked` (and no `Content-Length`).
    pub(crate) chunked: bool,
    pub(crate) keep_alive: bool,
    pub(crate) expect_continue: bool,
    /// Every `x-api-key` and `authorization` field, name lowercase, value trimmed, in order.
    pub(crate) credentials: Vec<(String, Vec<u8>)>,
}

/// Why a head is refused: the status answered, after which the connection closes (the framing of
/// anything after it cannot be trusted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Malformed,
    HeadTooLarge,
    /// A `Transfer-Encoding` other than `chunked` alone.
    NotImplemented,
    BodyTooLarge,
}

impl Refusal {
    pub(crate) fn status(self) -> u16 {
        match self {
            Refusal::Malformed => 400,
            Refusal::HeadTooLarge => 431,
            Refusal::NotImplemented => 501,
            Refusal::BodyTooLarge => 413,
        }
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Parse a complete head (ending in its blank line).
pub(crate) fn parse_head(head: &[u8]) -> Result<Head, Refusal> {
    let mut head = head.strip_suffix(b"\r\n\r\n").ok_or(Refusal::Malformed)?;
    // RFC 9112 2.2: a server should ignore an empty line before the request line.
    if let Some(rest) = head.strip_prefix(b"\r\n") {
        head = rest;
    }
    parse_lines(head)
}

fn parse_lines(head: &[u8]) -> Result<Head, Refusal> {
    // Every line ends in "\r\n" (the last one's was taken with the blank line).
    let mut lines = Vec::new();
    let mut rest = head;
    loop {
        match find(rest, b"\r\n") {
            Some(at) => {
                lines.push(&rest[..at]);
                rest = &rest[at + 2..];
            }
            None => {
                lines.push(rest);
                break;
            }
        }
    }
    if lines
        .iter()
        .any(|line| line.contains(&b'\r') || line.contains(&b'\n'))
    {
        return Err(Refusal::Malformed);
    }
    let (request_line, fields) = lines.split_first().ok_or(Refusal::Malformed)?;
    let request_line = std::str::from_utf8(request_line).map_err(|_| Refusal::Malformed)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed);
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(Refusal::Malformed);
    }
    let target = origin_form(target).ok_or(Refusal::Malformed)?;
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(Refusal::Malformed),
    };

    let mut content_length: Option<u64> = None;
    let mut transfer_encodings = Vec::new();
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut credentials = Vec::new();
    for field in fields {
        let colon = field
            .iter()
            .position(|&b| b == b':')
            .ok_or(Refusal::Malformed)?;
        let (name, value) = (&field[..colon], &field[colon + 1..]);
        // No obs-fold, no whitespace before the colon (RFC 9112 5.1, 5.2).
        if name.is_empty() || !name.iter().copied().all(is_tchar) {
            return Err(Refusal::Malformed);
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(Refusal::Malformed);
        }
        let value = trim_ows(value);
        if name.eq_ignore_ascii_case(b"content-length") {
            let length = parse_length(value).ok_or(Refusal::Malformed)?;
            if content_length.is_some_and(|seen| seen != length) {
                return Err(Refusal::Malformed);
            }
            content_length = Some(length);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encodings.push(value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',') {
                let token = trim_ows(token);
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            expect_continue = value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"x-api-key")
            || name.eq_ignore_ascii_case(b"authorization")
        {
            credentials.push((
                String::from_utf8_lossy(name).to_ascii_lowercase(),
                value.to_vec(),
            ));
        }
    }
    let chunked = !transfer_encodings.is_empty();
    if chunked {
        // With a Content-Length too it is a smuggling attempt, and HTTP/1.0 has no transfer
        // codings (RFC 9112 6.1): either way the framing cannot be trusted.
        if content_length.is_some() || !http11 {
            return Err(Refusal::Malformed);
        }
        // Only `chunked` alone: a coding under it would have to be undone to read the body.
        if !matches!(&transfer_encodings[..], [only] if only.eq_ignore_ascii_case(b"chunked")) {
            return Err(Refusal::NotImplemented);
        }
    }
    let content_length = content_length.unwrap_or(0);
    if content_length > MAX_BODY {
        return Err(Refusal::BodyTooLarge);
    }
    Ok(Head {
        method: method.to_owned(),
        target,
        content_length,
        chunked,
        keep_alive: !close && (http11 || keep_alive_token),
        expect_continue: http11 && expect_continue,
        credentials,
    })
}

/// RFC 9110 5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// Digits only (no sign, no spaces), within u64.
pub(crate) fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The origin-form target (`/path?query`, or `*`), from an origin- or absolute-form one. Visible
/// ASCII only.
fn origin_form(target: &str) -> Option<String> {
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    if target.starts_with('/') || target == "*" {
        return Some(target.to_owned());
    }
    let lower = target.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))?;
    let scheme_len = target.len() - rest.len();
    let after_scheme = &target[scheme_len..];
    match after_scheme.find(['/', '?']) {
        Some(at) if after_scheme[at..].starts_with('/') => Some(after_scheme[at..].to_owned()),
        Some(at) => Some(format!("/{}", &after_scheme[at..])),
        None => Some("/".to_owned()),
    }
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
