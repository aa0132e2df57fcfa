//! What a file of the source's git metadata with more than one link must be to be copied.
//!
//! A file with more than one link is also somewhere else: any file the repository's owner could
//! link (without `fs.protected_hardlinks`, any file on the same file system) can sit in the object
//! store under a git name. `git clone --local` links every file of `objects`, so a link alone is
//! no refusal: a linked file is copied only when it is what its name says, checked on the bytes
//! as they are copied. A loose object inflates (bounded) to `<type> <size>\0<content>` that hashes
//! to its name; a file git writes with its hashfile (a pack, its index, reverse index, bitmap and
//! mtimes, the multi-pack-index, a commit-graph) starts with its format's signature and ends with
//! the hash of everything before it. A few linked files git never needs to read objects are left
//! out of the copy; anything else linked (refs, `packed-refs`, `HEAD`, a `.promisor`, a name git
//! does not write) cannot be verified and is refused.

use std::path::{Component, Path};

use sha2::Digest;

/// The object format of the repository the copy goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Sha1,
    Sha256,
}

impl Format {
    /// From `git rev-parse --show-object-format`.
    pub fn from_git(name: &str) -> Option<Format> {
        match name {
            "sha1" => Some(Format::Sha1),
            "sha256" => Some(Format::Sha256),
            _ => None,
        }
    }

    pub(crate) fn hash_len(self) -> usize {
        match self {
            Format::Sha1 => 20,
            Format::Sha256 => 32,
        }
    }

    fn other(self) -> Format {
        match self {
            Format::Sha1 => Format::Sha256,
            Format::Sha256 => Format::Sha1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Sha1 => "SHA-1",
            Format::Sha256 => "SHA-256",
        }
    }
}

/// Why a linked file is not taken. The text follows "`<n>` links, and ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("{0} cannot be verified")]
    Unverifiable(&'static str),
    #[error("its name is a {named} object id and the copy is {copy}")]
    OtherFormat {
        named: &'static str,
        copy: &'static str,
    },
    #[error("it is owned by uid {file}, the git directory by uid {dir}")]
    NotTheOwners { file: u32, dir: u32 },
    #[error("it is not a zlib stream ({0})")]
    NotZlib(String),
    #[error("its zlib stream ends early (after {read} bytes)")]
    Truncated { read: u64 },
    #[error("bytes follow the end of its zlib stream")]
    AfterTheStream,
    #[error("it does not inflate to an object header `<type> <size>\\0` (found {found:?})")]
    BadHeader { found: String },
    #[error("its header declares {declared} bytes, more than the limit of {limit}")]
    TooLarge { declared: u64, limit: u64 },
    #[error("its header declares {declared} bytes of content, and it inflates to {found}")]
    WrongSize { declared: u64, found: String },
    #[error("its content does not hash to its name (expected {expected}, found {found})")]
    NotItsName { expected: String, found: String },
    #[error("its header is {found:?}, and the tree names a blob there")]
    NotABlob { found: String },
    #[error("its header declares {declared} bytes, and the tree lists {listed}")]
    NotTheTreesSize { declared: u64, listed: u64 },
    #[error("it cannot be read as a regular file ({0})")]
    Unreadable(String),
    #[error("it does not start with the signature {expected:?} (found {found:?})")]
    Signature { expected: String, found: String },
    #[error("it is {len} bytes, too short for a signature and a checksum")]
    TooShort { len: u64 },
    #[error(
        "its checksum does not hold (the last bytes say {expected}, the content hashes to {found})"
    )]
    Checksum { expected: String, found: String },
}

/// What to do with a linked file, by its name.
#[derive(Debug)]
pub enum Linked {
    /// Copy it, feeding every byte to the verifier, and take it only if it finishes clean.
    Verify(Verifier),
    /// Not needed to read objects: leave it out of the copy.
    LeaveOut,
    /// Refuse the repository.
    Refuse(Mismatch),
}

/// The longest loose object header git reads (`MAX_HEADER_LEN`).
pub(crate) const MAX_HEADER: usize = 32;
/// Inflated bytes produced between two looks at the header and the size.
const INFLATE_CHUNK: usize = 64 * 1024;

/// What the linked file `rel` (relative to the git directory) must be: a loose object inflates
/// to at most `limit` bytes of content.
pub fn linked(rel: &Path, format: Format, limit: u64) -> Linked {
    let parts: Option<Vec<&str>> = rel
        .components()
        .map(|c| match c {
            Component::Normal(name) => name.to_str(),
            _ => None,
        })
        .collect();
    let parts = parts.unwrap_or_default();
    let hashfile = |signature| Linked::Verify(Verifier::hashfile(signature, format));
    match parts.as_slice() {
        ["objects", fan, rest] if fan.len() == 2 && is_hex(fan) && is_hex(rest) => {
            let hex_len = 2 + rest.len();
            if hex_len == format.hash_len() * 2 {
                match hex::decode(format!("{fan}{rest}")) {
                    Ok(id) => Linked::Verify(Verifier::loose(id, format, limit)),
                    Err(_) => Linked::Refuse(Mismatch::Unverifiable("a loose object name")),
                }
            } else if hex_len == format.other().hash_len() * 2 {
                Linked::Refuse(Mismatch::OtherFormat {
                    named: format.other().name(),
                    copy: format.name(),
                })
            } else {
                Linked::Refuse(Mismatch::Unverifiable("a file of this name"))
            }
        }
        ["objects", "pack", "multi-pack-index"] => hashfile(b"MIDX"),
        ["objects", "pack", name] => match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("pack") => hashfile(b"PACK"),
            Some("idx") => hashfile(b"\xfftOc"),
            Some("rev") => hashfile(b"RIDX"),
            Some("bitmap") => hashfile(b"BITM"),
            Some("mtimes") => hashfile(b"MTME"),
            // Only repack reads it.
            Some("keep") => Linked::LeaveOut,
            Some("promisor") => Linked::Refuse(Mismatch::Unverifiable("a .promisor file")),
            _ => Linked::Refuse(Mismatch::Unverifiable("a file of this name")),
        },
        ["objects", "info", "commit-graph"] => hashfile(b"CGPH"),
        ["objects", "info", "commit-graphs", name]
            if name.starts_with("graph-") && name.ends_with(".graph") =>
        {
            hashfile(b"CGPH")
        }
        // The list dumb HTTP serves, and the list of split commit-graphs (without it git reads
        // commits without the graph): neither is needed to read objects.
        ["objects", "info", "packs"]
        | ["objects", "info", "commit-graphs", "commit-graph-chain"] => Linked::LeaveOut,
        ["refs", ..] => Linked::Refuse(Mismatch::Unverifiable("a ref")),
        ["packed-refs"] => Linked::Refuse(Mismatch::Unverifiable("packed-refs")),
        ["HEAD"] => Linked::Refuse(Mismatch::Unverifiable("HEAD")),
        _ => Linked::Refuse(Mismatch::Unverifiable("a file of this name")),
    }
}

/// Lowercase hex digits, as git names objects.
fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[derive(Debug, Clone)]
pub(crate) enum Hasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    pub(crate) fn new(format: Format) -> Hasher {
        match format {
            Format::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            Format::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha1(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// Checks a file on its bytes, in order, as they are copied.
#[derive(Debug)]
pub struct Verifier(Check);

#[derive(Debug)]
enum Check {
    Loose(Box<Loose>),
    Hashfile(Hashfile),
}

impl Verifier {
    fn loose(id: Vec<u8>, format: Format, limit: u64) -> Verifier {
        Verifier(Check::Loose(Box::new(Loose::new(id, format, limit))))
    }

    fn hashfile(signature: &'static [u8; 4], format: Format) -> Verifier {
        Verifier(Check::Hashfile(Hashfile {
            signature,
            hasher: Hasher::new(format),
            head: Vec::with_capacity(4),
            tail: Vec::with_capacity(format.hash_len() * 2),
            hash_len: format.hash_len(),
            len: 0,
        }))
    }

    /// The next bytes of the file; a mismatch is reported as soon as it shows.
    pub fn update(&mut self, bytes: &[u8]) -> Result<(), Mismatch> {
        match &mut self.0 {
            Check::Loose(loose) => loose.update(bytes),
            Check::Hashfile(file) => {
                file.update(bytes);
                file.check_signature()
            }
        }
    }

    /// The whole file was given: is it what its name says?
    pub fn finish(self) -> Result<(), Mismatch> {
        match self.0 {
            Check::Loose(loose) => loose.finish(),
            Check::Hashfile(file) => file.finish(),
        }
    }

    /// Bytes inflated so far (a loose object), for the tests of the bound.
    #[cfg(test)]
    fn inflated(&self) -> u64 {
        match &self.0 {
            Check::Loose(loose) => loose.inflate.total_out(),
            Check::Hashfile(_) => 0,
        }
    }
}

/// A loose object: one zlib stream of `<type> <size>\0<content>`, whose hash is its name.
/// [`crate::loose`] drives its `inflate` itself and hands every inflated byte to [`Loose::take`].
#[derive(Debug)]
pub(crate) struct Loose {
    /// The id its name says.
    id: Vec<u8>,
    pub(crate) inflate: flate2::Decompress,
    out: Vec<u8>,
    hasher: Hasher,
    /// The header until its NUL.
    pub(crate) header: Vec<u8>,
    /// The content size the header declares, once read.
    pub(crate) size: Option<u64>,
    /// Content bytes inflated so far.
    pub(crate) content: u64,
    /// The zlib stream ended.
    pub(crate) ended: bool,
    limit: u64,
}

impl Loose {
    pub(crate) fn new(id: Vec<u8>, format: Format, limit: u64) -> Loose {
        Loose {
            id,
            inflate: flate2::Decompress::new(true),
            out: vec![0; INFLATE_CHUNK],
            hasher: Hasher::new(format),
            header: Vec::new(),
            size: None,
            content: 0,
            ended: false,
            limit,
        }
    }

    fn update(&mut self, input: &[u8]) -> Result<(), Mismatch> {
        if input.is_empty() {
            return Ok(());
        }
        if self.ended {
            return Err(Mismatch::AfterTheStream);
        }
        let mut out = std::mem::take(&mut self.out);
        let result = self.inflate_all(input, &mut out);
        self.out = out;
        result
    }

    /// Inflate `input` a chunk of output at a time, each chunk checked before the next is made:
    /// nothing past the declared size (itself within the limit) is ever inflated.
    fn inflate_all(&mut self, input: &[u8], out: &mut [u8]) -> Result<(), Mismatch> {
        let mut at = 0;
        loop {
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self
                .inflate
                .decompress(&input[at..], out, flate2::FlushDecompress::None)
                .map_err(|e| Mismatch::NotZlib(e.to_string()))?;
            let consumed = usize::try_from(self.inflate.total_in() - before_in).unwrap_or(0);
            let produced = usize::try_from(self.inflate.total_out() - before_out).unwrap_or(0);
            at = (at + consumed).min(input.len());
            self.take(&out[..produced.min(out.len())])?;
            if status == flate2::Status::StreamEnd {
                self.ended = true;
                return if at < input.len() {
                    Err(Mismatch::AfterTheStream)
                } else {
                    Ok(())
                };
            }
            // No progress: it needs more input. All input taken and room left: nothing pending.
            if (consumed == 0 && produced == 0) || (at == input.len() && produced < out.len()) {
                return Ok(());
            }
        }
    }

    /// Inflated bytes: the header first, then content up to the declared size.
    pub(crate) fn take(&mut self, mut bytes: &[u8]) -> Result<(), Mismatch> {
        if self.size.is_none() {
            let nul = bytes.iter().position(|&b| b == 0);
            let header_part = &bytes[..nul.unwrap_or(bytes.len())];
            if self.header.len() + header_part.len() > MAX_HEADER {
                let mut found = self.header.clone();
                found.extend_from_slice(&header_part[..MAX_HEADER.saturating_sub(found.len())]);
                return Err(Mismatch::BadHeader {
                    found: String::from_utf8_lossy(&found).into_owned(),
                });
            }
            self.header.extend_from_slice(header_part);
            let Some(nul) = nul else {
                return Ok(());
            };
            let size = parse_header(&self.header).ok_or_else(|| Mismatch::BadHeader {
                found: String::from_utf8_lossy(&self.header).into_owned(),
            })?;
            if size > self.limit {
                return Err(Mismatch::TooLarge {
                    declared: size,
                    limit: self.limit,
                });
            }
            self.hasher.update(&self.header);
            self.hasher.update(&[0]);
            self.size = Some(size);
            bytes = &bytes[nul + 1..];
        }
        let size = self.size.unwrap_or(0);
        self.content += bytes.len() as u64;
        if self.content > size {
            return Err(Mismatch::WrongSize {
                declared: size,
                found: format!("more (at least {})", self.content),
            });
        }
        self.hasher.update(bytes);
        Ok(())
    }

    fn finish(self) -> Result<(), Mismatch> {
        self.verdict()
    }

    /// The whole stream was given: did it end, with the declared size, hashing to its name?
    pub(crate) fn verdict(&self) -> Result<(), Mismatch> {
        if !self.ended {
            return Err(Mismatch::Truncated {
                read: self.inflate.total_in(),
            });
        }
        let Some(size) = self.size else {
            return Err(Mismatch::BadHeader {
                found: String::from_utf8_lossy(&self.header).into_owned(),
            });
        };
        if self.content != size {
            return Err(Mismatch::WrongSize {
                declared: size,
                found: self.content.to_string(),
            });
        }
        let found = self.hasher.clone().finish();
        if found != self.id {
            return Err(Mismatch::NotItsName {
                expected: hex::encode(&self.id),
                found: hex::encode(found),
            });
        }
        Ok(())
    }
}

/// `<type> <size>` as git writes it: a known type, the size in canonical decimal (no sign, no
/// leading zero).
fn parse_header(header: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(header).ok()?;
    let (kind, size) = text.split_once(' ')?;
    if !matches!(kind, "blob" | "tree" | "commit" | "tag") {
        return None;
    }
    let canonical = !size.is_empty()
        && size.bytes().all(|b| b.is_ascii_digit())
        && (size == "0" || !size.starts_with('0'));
    if !canonical {
        return None;
    }
    size.parse().ok()
}

/// A file written through git's hashfile: a signature, and the hash of everything before its last
/// `hash_len` bytes as those bytes.
#[derive(Debug)]
struct Hashfile {
    signature: &'static [u8; 4],
    hasher: Hasher,
    /// Its first bytes, up to the signature's length.
    head: Vec<u8>,
    /// Its last bytes so far (at most `hash_len`), not yet hashed.
    tail: Vec<u8>,
    hash_len: usize,
    len: u64,
}

impl Hashfile {
    fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        let want = self.signature.len().saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..want.min(bytes.len())]);
        // Hash all but the last `hash_len` bytes seen so far.
        if bytes.len() >= self.hash_len {
            self.hasher.update(&self.tail);
            let cut = bytes.len() - self.hash_len;
            self.hasher.update(&bytes[..cut]);
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[cut..]);
        } else {
            self.tail.extend_from_slice(bytes);
            let cut = self.tail.len().saturating_sub(self.hash_len);
            self.hasher.update(&self.tail[..cut]);
            self.tail.drain(..cut);
        }
    }

    /// A wrong signature shows in the first bytes: stop there.
    fn check_signature(&self) -> Result<(), Mismatch> {
        if self.head.len() < self.signature.len() || self.head == self.signature {
            Ok(())
        } else {
            Err(self.wrong_signature())
        }
    }

    fn wrong_signature(&self) -> Mismatch {
        Mismatch::Signature {
            expected: String::from_utf8_lossy(self.signature).into_owned(),
            found: String::from_utf8_lossy(&self.head).into_owned(),
        }
    }

    fn finish(self) -> Result<(), Mismatch> {
        if self.len < (self.signature.len() + self.hash_len) as u64 {
            return Err(Mismatch::TooShort { len: self.len });
        }
        if self.head != self.signature {
            return Err(self.wrong_signature());
        }
        let found = self.hasher.finish();
        if found != self.tail {
            return Err(Mismatch::Checksum {
                expected: hex::encode(&self.tail),
                found: hex::encode(found),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
