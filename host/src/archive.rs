//! The one writer of every tar the host makes (image contexts, seeded trees, the loader's files,
//! the gate's fixtures): GNU headers, mtime 0, the owner and mode the caller names, so equal input
//! gives equal bytes and nothing of the host's own files (owner, time) leaks in.

use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// A tar being written to `W` (a `Vec<u8>`, or a stream being uploaded as it is written).
pub struct Archive<W: Write> {
    builder: tar::Builder<W>,
    /// The uid and gid of every entry.
    owner: u32,
    /// What is being written, for errors.
    context: &'static str,
}

impl<W: Write> std::fmt::Debug for Archive<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("owner", &self.owner)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

/// An error naming what was being written and the entry.
fn failed(context: &'static str, path: &Path) -> impl Fn(std::io::Error) -> Error {
    let at = format!("{context}: {}", path.display());
    move |e| Error::io(at.clone(), e)
}

impl Archive<Vec<u8>> {
    /// A tar in memory whose entries all belong to `owner`.
    pub fn in_memory(owner: u32, context: &'static str) -> Archive<Vec<u8>> {
        Archive::new(Vec::new(), owner, context)
    }
}

impl<W: Write> Archive<W> {
    pub fn new(out: W, owner: u32, context: &'static str) -> Archive<W> {
        Archive {
            builder: tar::Builder::new(out),
            owner,
            context,
        }
    }

    fn header(&self, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(u64::from(self.owner));
        h.set_gid(u64::from(self.owner));
        h.set_mtime(0);
        h.set_size(size);
        h
    }

    /// A directory.
    pub fn dir(&mut self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.entry(tar::EntryType::Directory, path.as_ref(), mode, &[])
    }

    /// A regular file with `data`.
    pub fn file(&mut self, path: impl AsRef<Path>, mode: u32, data: &[u8]) -> Result<()> {
        self.entry(tar::EntryType::Regular, path.as_ref(), mode, data)
    }

    /// A regular file of `size` bytes read from `content` (which must hold at least that many).
    pub fn file_from(
        &mut self,
        path: impl AsRef<Path>,
        mode: u32,
        size: u64,
        content: impl Read,
    ) -> Result<()> {
        let path = path.as_ref();
        let mut h = self.header(tar::EntryType::Regular, mode, size);
        let fail = failed(self.context, path);
        let result = self.builder.append_data(&mut h, path, content.take(size));
        result.map_err(fail)
    }

    /// A symbolic link (mode 0777, as the kernel shows every link).
    pub fn symlink(&mut self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        self.link(
            tar::EntryType::Symlink,
            path.as_ref(),
            target.as_ref(),
            0o777,
        )
    }

    /// A hard link to an earlier entry.
    pub fn hard_link(&mut self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        self.link(tar::EntryType::Link, path.as_ref(), target.as_ref(), 0o644)
    }

    fn link(&mut self, kind: tar::EntryType, path: &Path, target: &Path, mode: u32) -> Result<()> {
        let mut h = self.header(kind, mode, 0);
        let fail = failed(self.context, path);
        let result = self.builder.append_link(&mut h, path, target);
        result.map_err(fail)
    }

    /// Any entry without a link target: a file, a directory, a FIFO, a device (the gate's hostile
    /// fixtures make the last two).
    pub fn entry(
        &mut self,
        kind: tar::EntryType,
        path: impl AsRef<Path>,
        mode: u32,
        data: &[u8],
    ) -> Result<()> {
        let path = path.as_ref();
        let mut h = self.header(kind, mode, data.len() as u64);
        let fail = failed(self.context, path);
        let result = self.builder.append_data(&mut h, path, data);
        result.map_err(fail)
    }

    /// A directory of the host's own as `name`, links kept as links, headers deterministic (no
    /// owner, no time: the tar crate's own walk; the benchmark's plain-copy baseline only).
    pub fn host_tree(&mut self, name: impl AsRef<Path>, dir: &Path) -> Result<()> {
        let name = name.as_ref();
        self.builder.follow_symlinks(false);
        self.builder.mode(tar::HeaderMode::Deterministic);
        let fail = failed(self.context, name);
        let is_dir = std::fs::symlink_metadata(dir).map_err(&fail)?.is_dir();
        let result = if is_dir {
            self.builder.append_dir_all(name, dir)
        } else {
            self.builder.append_path_with_name(dir, name)
        };
        result.map_err(fail)
    }

    /// The finished tar (its writer flushed).
    pub fn finish(self) -> Result<W> {
        let context = self.context;
        let fail = |e| Error::io(format!("{context}: finishing the tar"), e);
        let mut out = self.builder.into_inner().map_err(fail)?;
        out.flush().map_err(fail)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_the_owner_and_mode_given_and_nothing_of_the_host() {
        let build = || {
            let mut a = Archive::in_memory(1_500_000, "test");
            a.dir("d/", 0o755).unwrap();
            a.file("d/f", 0o644, b"hello").unwrap();
            a.file_from("d/g", 0o755, 3, &b"abcdef"[..]).unwrap();
            a.symlink("d/l", "f").unwrap();
            a.hard_link("d/h", "d/f").unwrap();
            a.entry(tar::EntryType::Fifo, "d/p", 0o600, &[]).unwrap();
            a.finish().unwrap()
        };
        let (bytes, again) = (build(), build());
        assert_eq!(bytes, again, "equal input, equal bytes");
        let mut read = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for entry in read.entries().unwrap() {
            let mut entry = entry.unwrap();
            let h = entry.header().clone();
            assert_eq!(
                (h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()),
                (1_500_000, 1_500_000, 0)
            );
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            seen.push((
                entry.path().unwrap().display().to_string(),
                h.entry_type(),
                h.mode().unwrap(),
                data,
            ));
        }
        assert_eq!(
            seen[1],
            (
                "d/f".into(),
                tar::EntryType::Regular,
                0o644,
                b"hello".to_vec()
            )
        );
        assert_eq!(seen[2].3, b"abc", "file_from takes exactly its size");
        assert_eq!(seen[3].1, tar::EntryType::Symlink);
        assert_eq!(seen[4].1, tar::EntryType::Link);
        assert_eq!(seen[5].1, tar::EntryType::Fifo);
    }
}
