//! The staged copy's loose blobs, read in this process for the seeder's checkout.
//!
//! `git cat-file --batch` opens, maps and unmaps a loose object three times to answer for it (the
//! object's kind and size, then its content), and then every byte crosses a pipe: 20,000 loose
//! blobs of 10 KiB cost it 0.9 s of system time on this machine against 0.15 s from one pack. Here
//! a loose blob is opened once (beneath the copy's `objects`, no link followed, never blocking, a
//! regular file), inflated straight into the caller's buffer, and checked on the way exactly as
//! [`crate::verify`] checks a linked loose object: one zlib stream, `blob <size>\0` with the size
//! the tree lists, nothing after the stream, and content that hashes to its name. The read that
//! would hand over the last content bytes makes those checks first and fails instead, so a
//! reader that was given every byte was given the blob the tree names (git itself trusts a loose
//! object's name when it reads it; this does not).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::source::{self, Refused};
use crate::verify::{Format, Loose, Mismatch, MAX_HEADER};

/// Compressed bytes read from a loose object at a time.
const INPUT: usize = 64 * 1024;

/// The loose blobs of one staged copy that its checkout needs.
#[derive(Debug)]
pub struct LooseBlobs {
    objects: OwnedFd,
    format: Format,
    names: HashSet<String>,
}

impl LooseBlobs {
    /// List `git_dir/objects`'s fan-out directories and keep the loose object names among
    /// `wanted` (so the set is never larger than the checkout's own list of blobs).
    pub fn list<'a>(
        git_dir: &Path,
        format: Format,
        wanted: impl IntoIterator<Item = &'a str>,
    ) -> io::Result<LooseBlobs> {
        let objects = source::open_root(&git_dir.join("objects")).map_err(refused)?;
        let wanted: HashSet<&str> = wanted.into_iter().collect();
        let name_len = format.hash_len() * 2 - 2;
        let mut names = HashSet::new();
        for fan in 0..=255u8 {
            let fan = format!("{fan:02x}");
            let dir = match source::open_dir(objects.as_fd(), Path::new(&fan)) {
                Ok(dir) => dir,
                Err(Refused::Missing) => continue,
                Err(e) => return Err(refused(e)),
            };
            let mut dir = nix::dir::Dir::from_fd(dir).map_err(io::Error::from)?;
            for entry in dir.iter() {
                let entry = entry.map_err(io::Error::from)?;
                let rest = entry.file_name().to_bytes();
                if rest.len() != name_len {
                    continue;
                }
                let Ok(rest) = std::str::from_utf8(rest) else {
                    continue;
                };
                let name = format!("{fan}{rest}");
                if wanted.contains(name.as_str()) {
                    names.insert(name);
                }
            }
        }
        Ok(LooseBlobs {
            objects,
            format,
            names,
        })
    }

    /// Whether the blob `oid` is loose here (it may be in a pack too; the loose copy is read).
    pub fn contains(&self, oid: &str) -> bool {
        self.names.contains(oid)
    }

    /// How many of the wanted blobs are loose.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Open the loose blob `oid`, which the tree lists with `size` bytes, and read its header.
    pub fn open(&self, oid: &str, size: u64) -> Result<LooseBlob, Mismatch> {
        let id = hex::decode(oid)
            .ok()
            .filter(|id| id.len() == self.format.hash_len() && oid.len() > 2)
            .ok_or(Mismatch::Unverifiable("a loose object name"))?;
        let rel = Path::new(OsStr::from_bytes(&oid.as_bytes()[..2]))
            .join(OsStr::from_bytes(&oid.as_bytes()[2..]));
        let opened = source::open_file(self.objects.as_fd(), &rel).map_err(|e| match e {
            Refused::NotPlain => Mismatch::Unreadable("a link or not a regular file".into()),
            Refused::Missing => Mismatch::Unreadable("it is not there".into()),
            Refused::Io(e) => Mismatch::Unreadable(e.to_string()),
        })?;
        LooseBlob::start(opened.file, Loose::new(id, self.format, u64::MAX), size)
    }
}

fn refused(e: Refused) -> io::Error {
    match e {
        Refused::NotPlain => io::Error::other("a link or not a directory"),
        Refused::Missing => io::Error::from(io::ErrorKind::NotFound),
        Refused::Io(e) => e,
    }
}

/// One loose blob, read as its content (see the module's comment for what is checked).
#[derive(Debug)]
pub struct LooseBlob {
    file: File,
    check: Loose,
    input: Vec<u8>,
    at: usize,
    len: usize,
    /// Content inflated together with the header, not yet handed over.
    pending: Vec<u8>,
    /// The content size the tree lists (and the header declares).
    size: u64,
    verified: bool,
    failure: Option<Mismatch>,
}

impl LooseBlob {
    fn start(file: File, check: Loose, size: u64) -> Result<LooseBlob, Mismatch> {
        let mut blob = LooseBlob {
            file,
            check,
            input: vec![0; INPUT],
            at: 0,
            len: 0,
            pending: Vec::new(),
            size,
            verified: false,
            failure: None,
        };
        // The header, at most MAX_HEADER bytes and its NUL; what follows it is content.
        let mut head = [0u8; MAX_HEADER + 1];
        while blob.check.size.is_none() {
            let produced = blob.step(&mut head)?;
            if blob.check.size.is_some() {
                let nul = head[..produced].iter().position(|&b| b == 0).unwrap_or(0);
                blob.pending.extend_from_slice(&head[nul + 1..produced]);
            }
        }
        if !blob.check.header.starts_with(b"blob ") {
            return Err(Mismatch::NotABlob {
                found: String::from_utf8_lossy(&blob.check.header).into_owned(),
            });
        }
        let declared = blob.check.size.unwrap_or(0);
        if declared != size {
            return Err(Mismatch::NotTheTreesSize {
                declared,
                listed: size,
            });
        }
        if size == 0 {
            blob.complete()?;
        }
        Ok(blob)
    }

    /// Whether every check passed (the whole content was read, or there was none).
    pub fn verified(&self) -> bool {
        self.verified
    }

    /// What failed a read, if one did.
    pub fn failure(&self) -> Option<&Mismatch> {
        self.failure.as_ref()
    }

    /// Inflate what the input holds (reading more when it is empty) into `out`, which is never
    /// empty; every inflated byte goes through the check. Returns how many were inflated.
    fn step(&mut self, out: &mut [u8]) -> Result<usize, Mismatch> {
        if self.check.ended {
            // It ended short of the header or of the declared content.
            return Err(self
                .check
                .verdict()
                .err()
                .unwrap_or(Mismatch::AfterTheStream));
        }
        if self.at == self.len {
            self.len = self
                .file
                .read(&mut self.input)
                .map_err(|e| Mismatch::Unreadable(e.to_string()))?;
            self.at = 0;
            if self.len == 0 {
                return Err(Mismatch::Truncated {
                    read: self.check.inflate.total_in(),
                });
            }
        }
        let (before_in, before_out) = (
            self.check.inflate.total_in(),
            self.check.inflate.total_out(),
        );
        let status = self
            .check
            .inflate
            .decompress(
                &self.input[self.at..self.len],
                out,
                flate2::FlushDecompress::None,
            )
            .map_err(|e| Mismatch::NotZlib(e.to_string()))?;
        let consumed = usize::try_from(self.check.inflate.total_in() - before_in).unwrap_or(0);
        let produced = usize::try_from(self.check.inflate.total_out() - before_out).unwrap_or(0);
        self.at = (self.at + consumed).min(self.len);
        self.check.take(&out[..produced.min(out.len())])?;
        if status == flate2::Status::StreamEnd {
            self.check.ended = true;
        } else if consumed == 0 && produced == 0 {
            return Err(Mismatch::NotZlib("the stream makes no progress".into()));
        }
        Ok(produced)
    }

    /// All content was inflated: the stream must end with nothing more inflated and nothing
    /// after it, and the content must hash to the blob's name.
    fn complete(&mut self) -> Result<(), Mismatch> {
        let mut one = [0u8; 1];
        while !self.check.ended {
            // Inflating one more byte is a size mismatch (the check reports it).
            self.step(&mut one)?;
        }
        if self.at < self.len
            || self
                .file
                .read(&mut self.input)
                .map_err(|e| Mismatch::Unreadable(e.to_string()))?
                > 0
        {
            return Err(Mismatch::AfterTheStream);
        }
        self.check.verdict()?;
        self.verified = true;
        Ok(())
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, Mismatch> {
        let all_inflated = self.check.content == self.size;
        if all_inflated && !self.verified {
            self.complete()?;
        }
        if !self.pending.is_empty() {
            let n = buf.len().min(self.pending.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            return Ok(n);
        }
        if all_inflated || buf.is_empty() {
            return Ok(0);
        }
        // Straight into the caller's buffer, never past the content still to come.
        let room = usize::try_from(self.size - self.check.content)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        loop {
            let produced = self.step(&mut buf[..room])?;
            if self.check.content == self.size {
                self.complete()?;
            }
            // Nothing inflated yet (only the stream's own bytes were read): read on.
            if produced > 0 {
                return Ok(produced);
            }
        }
    }
}

impl Read for LooseBlob {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(failure) = &self.failure {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                failure.to_string(),
            ));
        }
        self.fill(buf).map_err(|mismatch| {
            let error = io::Error::new(io::ErrorKind::InvalidData, mismatch.to_string());
            self.failure = Some(mismatch);
            error
        })
    }
}

#[cfg(test)]
#[path = "loose_tests.rs"]
mod tests;
