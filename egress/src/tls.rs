//! The first bytes of a tunnel: they must be one TLS record holding a whole ClientHello whose
//! server name (SNI) is the CONNECT host, so a tunnel carries TLS to the name that was allowed and
//! nothing else (no opaque tunnels, no fronting through another name). Parsed by hand, bounded,
//! reading only the lengths and the one extension the rule needs.

use crate::host::Name;

/// The largest TLS record (2^14 bytes of payload) and its 5-byte header.
pub const MAX_RECORD: usize = 5 + 16 * 1024;

/// What the first bytes of a tunnel are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed to judge (at most [`MAX_RECORD`] in all).
    Incomplete,
    /// A ClientHello naming this server (the name as sent, not yet checked).
    Named(String),
    /// Not a TLS record holding a whole ClientHello with exactly one host name.
    NotTls(&'static str),
}

/// Judge what has arrived so far.
pub fn client_hello(bytes: &[u8]) -> Hello {
    let Some(header) = bytes.get(..5) else {
        return match bytes.first() {
            Some(&b) if b != 22 => Hello::NotTls("not a handshake record"),
            _ => Hello::Incomplete,
        };
    };
    if header[0] != 22 {
        return Hello::NotTls("not a handshake record");
    }
    if header[1] != 3 || header[2] > 4 {
        return Hello::NotTls("not a TLS record version");
    }
    let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if length == 0 || 5 + length > MAX_RECORD {
        return Hello::NotTls("a record length out of bounds");
    }
    let Some(record) = bytes.get(5..5 + length) else {
        return Hello::Incomplete;
    };
    match parse_hello(record) {
        Ok(name) => Hello::Named(name),
        Err(why) => Hello::NotTls(why),
    }
}

/// Whether the tunnel's first bytes name `expected` (compared on the canonical form, so a
/// client's trailing dot or case does not matter and nothing else does).
pub fn names(hello: &Hello, expected: &Name) -> bool {
    match hello {
        Hello::Named(sent) => Name::parse(sent).is_ok_and(|n| n == *expected),
        _ => false,
    }
}

/// A cursor over a byte slice that refuses to read past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("a length past the end of the record");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, &'static str> {
        Ok(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Result<usize, &'static str> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn u24(&mut self) -> Result<usize, &'static str> {
        let b = self.take(3)?;
        Ok((usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }

    /// A vector with a length prefix of `width` bytes.
    fn vector(&mut self, width: usize) -> Result<Reader<'a>, &'static str> {
        let n = match width {
            1 => self.u8()?,
            2 => self.u16()?,
            _ => self.u24()?,
        };
        Ok(Reader(self.take(n)?))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The ClientHello in one record: its single host name.
fn parse_hello(record: &[u8]) -> Result<String, &'static str> {
    let mut r = Reader(record);
    if r.u8()? != 1 {
        return Err("not a ClientHello");
    }
    let mut hello = r.vector(3)?;
    if !r.is_empty() {
        return Err("more than a ClientHello in the first record");
    }
    hello.take(2)?; // legacy_version
    hello.take(32)?; // random
    hello.vector(1)?; // legacy_session_id
    hello.vector(2)?; // cipher_suites
    hello.vector(1)?; // legacy_compression_methods
    let mut extensions = hello.vector(2)?;
    if !hello.is_empty() {
        return Err("bytes after the extensions");
    }
    let mut found = None;
    while !extensions.is_empty() {
        let kind = extensions.u16()?;
        let mut data = extensions.vector(2)?;
        if kind != 0 {
            continue;
        }
        if found.is_some() {
            return Err("two server_name extensions");
        }
        let mut list = data.vector(2)?;
        if !data.is_empty() {
            return Err("bytes after the server name list");
        }
        let mut names = Vec::new();
        while !list.is_empty() {
            let name_type = list.u8()?;
            let name = list.vector(2)?;
            if name_type == 0 {
                names.push(name.0);
            }
        }
        let [name] = names.as_slice() else {
            return Err("not exactly one host name");
        };
        let name = std::str::from_utf8(name).map_err(|_| "a host name that is not text")?;
        found = Some(name.to_owned());
    }
    found.ok_or("no server name")
}

#[cfg(test)]
#[path = "tls_tests.rs"]
pub(crate) mod tests;
