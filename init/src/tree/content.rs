//! `tree inspect-content`: the inspection, then the content of every change that has some (a
//! file's bytes, a link's target) as ONE tar at [`CONTENT_FILE`], on a scratch volume only this
//! reader mounts. The host archives that one file instead of the whole work tree: the engine
//! writes about 8,000 tar entries a second, and a commit needs only the changed ones.
//!
//! Each entry is read as the inspection read it: its parent opened beneath /work with no link on
//! the way, the entry classified without following it, a file opened only if it is still the file
//! classified, and its bytes hashed as they are copied. An entry whose blob is not the manifest's
//! fails the role: the host never sees a tar that disagrees with the manifest it judged (and checks
//! every blob again as it reads). Everything is bounded: the manifest's count, and
//! [`MAX_CONTENT_BYTES`] of content, past which the tar holds no entry and the host refuses the
//! commit from the manifest's sizes alone.
//!
//! Entry names are `work/<path>`, as in the engine's archive of /work, so the host reads both the
//! same way.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cordon_contract::audit::{content_bytes, needs_content, Change, Kind, MAX_CONTENT_BYTES};
use sha1::{Digest, Sha1};

use super::fs;

pub use cordon_contract::audit::CONTENT_FILE;

/// Write the content of `changes` (read beneath `work`) as a tar at `out`, created new: a tar with
/// no entry when the content is over [`MAX_CONTENT_BYTES`] (the diff export still shows what
/// needs none). The tar's size.
pub fn write(work: &Path, changes: &[Change], out: &Path) -> Result<u64, String> {
    let over = content_bytes(changes) > MAX_CONTENT_BYTES;
    let root = fs::open_root(work)
        .map_err(|e| format!("cannot open the work tree {}: {e}", work.display()))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(out)
        .map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut tar = tar::Builder::new(BufWriter::with_capacity(256 * 1024, file));
    let mut parents = Parents::default();
    for change in changes.iter().filter(|c| !over && needs_content(c)) {
        entry(&root, &mut parents, change, &mut tar)
            .map_err(|e| format!("the content of {:?}: {e}", change.path))?;
    }
    let out = tar
        .into_inner()
        .map_err(|e| format!("finishing the content tar: {e}"))?;
    let file = out
        .into_inner()
        .map_err(|e| format!("writing the content tar: {}", e.error()))?;
    let written = file
        .metadata()
        .map_err(|e| format!("the content tar's size: {e}"))?
        .len();
    file.sync_all()
        .map_err(|e| format!("syncing the content tar: {e}"))?;
    Ok(written)
}

/// The last parent directory opened (changes come in path order, so siblings share it).
#[derive(Default)]
struct Parents {
    path: Option<String>,
    fd: Option<OwnedFd>,
}

impl Parents {
    /// The directory `dir` beneath `root` (`""`: the root itself), opened with no link anywhere.
    fn open<'a>(&'a mut self, root: &'a OwnedFd, dir: &str) -> io::Result<&'a OwnedFd> {
        if dir.is_empty() {
            return Ok(root);
        }
        if self.path.as_deref() != Some(dir) || self.fd.is_none() {
            let name = fs::c_name(dir.as_bytes())?;
            self.fd = Some(fs::open_dir_at(root.as_fd(), &name)?);
            self.path = Some(dir.to_owned());
        }
        self.fd
            .as_ref()
            .ok_or_else(|| io::Error::other("no directory open"))
    }
}

/// One change's entry: the file or link it names now, checked against the manifest's side.
fn entry<W: Write>(
    root: &OwnedFd,
    parents: &mut Parents,
    change: &Change,
    tar: &mut tar::Builder<W>,
) -> io::Result<()> {
    let new = change
        .new
        .as_ref()
        .ok_or_else(|| io::Error::other("no new side"))?;
    let expected = new
        .blob
        .as_deref()
        .ok_or_else(|| io::Error::other("no blob id"))?;
    let (dir, name) = match change.path.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", change.path.as_str()),
    };
    let parent = parents.open(root, dir)?;
    let name: CString = fs::c_name(name.as_bytes())?;
    let stat = fs::stat_at(parent.as_fd(), &name)?;
    let archived = format!("work/{}", change.path);
    let mut header = tar::Header::new_gnu();
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    if new.kind == Kind::Link {
        if stat.kind() != fs::Type::Link {
            return Err(io::Error::other(format!(
                "{} where a link was",
                stat.word()
            )));
        }
        let target = fs::read_link_at(parent.as_fd(), &name)?;
        if hex::encode(fs::blob_of(&target)) != expected {
            return Err(io::Error::other(
                "the link's target is not the inspected one",
            ));
        }
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        return tar.append_link(&mut header, &archived, OsStr::from_bytes(&target));
    }
    let (file, open) = fs::open_file_at(parent.as_fd(), &name, &stat)?;
    if new.size != Some(open.size) || open.executable() != (new.kind == Kind::Executable) {
        return Err(io::Error::other("not the file inspected (size or mode)"));
    }
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(if open.executable() { 0o755 } else { 0o644 });
    header.set_size(open.size);
    let mut hashing = Hashing::new(file, open.size);
    tar.append_data(&mut header, &archived, &mut hashing)?;
    if hashing.read != open.size || hex::encode(hashing.finish()) != expected {
        return Err(io::Error::other(
            "the file's bytes are not the inspected ones",
        ));
    }
    Ok(())
}

/// A file read for the tar, hashed as git hashes a blob; never more than its size.
struct Hashing {
    file: io::Take<File>,
    hasher: Sha1,
    read: u64,
}

impl Hashing {
    fn new(file: File, size: u64) -> Self {
        let mut hasher = Sha1::new();
        hasher.update(format!("blob {size}\0").as_bytes());
        Self {
            file: file.take(size),
            hasher,
            read: 0,
        }
    }

    fn finish(self) -> [u8; 20] {
        self.hasher.finalize().into()
    }
}

impl Read for Hashing {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(out)?;
        self.hasher.update(&out[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::fixture::{mkfifo, scratch, Fixture};
    use crate::tree::inspect;
    use cordon_contract::audit::IgnoreRules;

    /// The content tar's entries: name, type, mode, bytes (a link's: its target).
    fn entries(tar_path: &Path) -> Vec<(String, tar::EntryType, u32, Vec<u8>)> {
        let mut archive = tar::Archive::new(std::fs::File::open(tar_path).expect("the tar"));
        archive
            .entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("an entry");
                let name = String::from_utf8(e.path_bytes().into_owned()).expect("UTF-8");
                let kind = e.header().entry_type();
                let mode = e.header().mode().expect("mode");
                let mut bytes = Vec::new();
                if kind == tar::EntryType::Symlink {
                    bytes = e.link_name_bytes().expect("a target").into_owned();
                } else {
                    e.read_to_end(&mut bytes).expect("content");
                }
                (name, kind, mode, bytes)
            })
            .collect()
    }

    fn inspected(f: &Fixture, base: &str) -> Vec<Change> {
        let report = inspect::inspect_tree(f.work(), &f.meta(), base, &IgnoreRules::default(), &[])
            .expect("inspect runs");
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        report.changes
    }

    #[test]
    fn only_files_and_links_the_manifest_lists_are_written_with_their_bytes() {
        let f = Fixture::new("content");
        f.file("README", "hello\n")
            .file("gone", "bye\n")
            .file("src/lib.rs", "pub fn x() {}\n");
        let base = f.seed();
        let long = format!("deep/{}/file", "d".repeat(120));
        f.file("README", "changed\n")
            .rm("gone")
            .executable("bin/run", "#!/bin/sh\n")
            .link("src/up", "../README")
            .file(&long, "long name\n")
            .dir("empty");
        mkfifo(&f.at("pipe"));
        let changes = inspected(&f, &base);
        let out = scratch("content-out").join("content.tar");
        let written = write(f.work(), &changes, &out).expect("written");
        assert_eq!(written, std::fs::metadata(&out).expect("the tar").len());
        let link = tar::EntryType::Symlink;
        let file = tar::EntryType::Regular;
        assert_eq!(
            entries(&out),
            vec![
                ("work/README".into(), file, 0o644, b"changed\n".to_vec()),
                ("work/bin/run".into(), file, 0o755, b"#!/bin/sh\n".to_vec()),
                (format!("work/{long}"), file, 0o644, b"long name\n".to_vec()),
                ("work/src/up".into(), link, 0o777, b"../README".to_vec()),
            ]
        );
    }

    #[test]
    fn content_that_is_not_what_was_inspected_fails_the_role() {
        let f = Fixture::new("content-changed");
        f.file("a", "one\n").file("dir/b", "two\n");
        let base = f.seed();
        f.file("a", "edited\n").file("dir/b", "edited\n");
        let changes = inspected(&f, &base);
        let dir = scratch("content-changed-out");
        // The same size, other bytes: only the hash tells.
        f.file("a", "EDITED\n");
        let e = write(f.work(), &changes, &dir.join("1.tar")).expect_err("refused");
        assert!(
            e.contains("\"a\"") && e.contains("not the inspected"),
            "{e}"
        );
        // A file where the manifest has one, reached through a link to its directory.
        f.file("a", "edited\n");
        std::fs::rename(f.at("dir"), f.at("real")).expect("rename");
        f.link("dir", "real");
        let e = write(f.work(), &changes, &dir.join("2.tar")).expect_err("refused");
        assert!(e.contains("\"dir/b\""), "{e}");
        // A link where the manifest has a file.
        std::fs::remove_file(f.at("dir")).expect("rm");
        std::fs::rename(f.at("real"), f.at("dir")).expect("rename");
        std::fs::remove_file(f.at("a")).expect("rm");
        f.link("a", "dir/b");
        let e = write(f.work(), &changes, &dir.join("3.tar")).expect_err("refused");
        assert!(e.contains("\"a\""), "{e}");
        // Never over anything: the tar's path must not exist.
        f.rm("a").file("a", "edited\n");
        std::fs::write(dir.join("4.tar"), b"there").expect("write");
        assert!(write(f.work(), &changes, &dir.join("4.tar")).is_err());
        assert!(write(f.work(), &changes, &dir.join("5.tar")).is_ok());
    }

    #[test]
    fn content_past_the_bound_is_not_written() {
        let f = Fixture::new("content-bound");
        f.file("a", "one\n");
        let base = f.seed();
        f.file("a", "two\n");
        let mut changes = inspected(&f, &base);
        let dir = scratch("content-bound-out");
        let mut big = changes[0].clone();
        big.path = "big".into();
        if let Some(new) = big.new.as_mut() {
            new.size = Some(MAX_CONTENT_BYTES);
        }
        changes.push(big);
        // A tar with no entry: the export still shows what needs no content.
        assert_eq!(write(f.work(), &changes, &dir.join("c.tar")), Ok(1024));
        assert!(entries(&dir.join("c.tar")).is_empty());
    }
}
