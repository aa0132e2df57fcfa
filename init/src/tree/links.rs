//! `tree snapshot-links`: what each declared path is, and for a link where the agent's kernel
//! would resolve it and what is there.
//!
//! The resolution is the kernel's, one component at a time, in the agent container where /work
//! is the work tree and /work/.git the metadata: a relative target from the link's directory; an
//! absolute one from the tree's root when it is `/work` or starts with `/work/`, else `outside`;
//! `..` above the root is `outside` (the walk left the tree, even where a kernel would come back
//! in through `/work`: `outside` means "leaves the tree at some step"); `.` and empty parts are
//! nothing, but after a file they are ENOTDIR; every link met is followed, the declared one
//! counting as the first of at most [`MAX_LINK_HOPS`]. Once a component is missing (or a file has
//! more after it) the rest is applied by name only: the link is dangling, and `resolved` is the
//! path it would reach.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;

use cordon_contract::paths::{self, MAX_LINK_HOPS};
use cordon_contract::tree::{
    clean_path, quote, DeclaredLink, EntryKind, LinkSnapshot, Resolution, TargetEntry,
    MAX_DECLARED_PATHS, MAX_RECORDED_TARGETS,
};

use super::check::{bounded, join, report_path, with_metadata_digest};
use super::fs::{self, Stat, Type};

/// The snapshot, and the metadata digest beside it.
pub fn snapshot_links(
    work_root: &Path,
    metadata_root: &Path,
    paths: &[String],
) -> Result<LinkSnapshot, String> {
    let (snapshot, digest) = with_metadata_digest(metadata_root, || snapshot(work_root, paths))?;
    Ok(LinkSnapshot {
        metadata_digest: digest,
        ..snapshot
    })
}

/// Everything but the metadata digest (left empty).
pub fn snapshot(work_root: &Path, paths: &[String]) -> Result<LinkSnapshot, String> {
    if paths.len() > MAX_DECLARED_PATHS {
        return Err(format!(
            "{} declared paths, more than {MAX_DECLARED_PATHS}",
            paths.len()
        ));
    }
    if let Some(bad) = paths.iter().find(|p| !clean_path(p)) {
        return Err(format!(
            "the declared path {:?} is not a clean relative path",
            bounded(bad.clone(), 256)
        ));
    }
    let root = fs::open_root(work_root)
        .map_err(|e| format!("cannot open the work tree {}: {e}", work_root.display()))?;
    let links = declared_links(&root, paths).map_err(|e| format!("{}: {}", e.path, e.detail))?;
    Ok(LinkSnapshot {
        metadata_digest: String::new(),
        links,
    })
}

/// Why the declared links could not be snapshotted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkError {
    /// The declared path whose snapshot failed.
    pub path: String,
    pub detail: String,
    /// More than [`MAX_RECORDED_TARGETS`] recorded targets in all (else: something unreadable).
    pub too_many_targets: bool,
}

/// Each declared path (clean, checked by the caller), from the work tree's root.
pub fn declared_links(root: &OwnedFd, paths: &[String]) -> Result<Vec<DeclaredLink>, LinkError> {
    let mut recorded = 0;
    paths
        .iter()
        .map(|path| {
            declared(root, path, &mut recorded).map_err(|detail| LinkError {
                path: path.clone(),
                detail,
                too_many_targets: recorded > MAX_RECORDED_TARGETS,
            })
        })
        .collect()
}

/// Whether the link at `path` (its directories real ones, as a walk from the root found them)
/// with this target is not a plain link into the tree: resolved one component at a time as the
/// agent's kernel would, it passes through another link or ends on one, leaves the tree, reaches
/// the metadata or loops. A dangling target inside the tree is not.
pub fn link_traverses(root: &OwnedFd, path: &[u8], target: &[u8]) -> Result<bool, String> {
    let all: Vec<&[u8]> = parts(path).collect();
    let parents = all.split_last().map_or(&[][..], |(_, parents)| parents);
    let mut position = Position {
        root,
        dirs: Vec::new(),
        by_name: false,
    };
    for part in parents {
        let name = fs::c_name(part).map_err(|e| e.to_string())?;
        let fd = fs::open_dir_at(position.here(), &name)
            .map_err(|e| format!("open {}: {e}", quote(part)))?;
        position.dirs.push((part.to_vec(), Some(fd)));
    }
    let outcome = position.resolve(target)?;
    Ok(outcome.through_link
        || matches!(
            outcome.resolution,
            Resolution::Outside | Resolution::Metadata | Resolution::Loop
        ))
}

fn missing(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG)
    )
}

fn kind_of(stat: &Stat) -> EntryKind {
    match stat.kind() {
        Type::File if stat.executable() => EntryKind::Executable,
        Type::File => EntryKind::File,
        Type::Dir => EntryKind::Dir,
        Type::Link => EntryKind::Link,
        _ => EntryKind::Special,
    }
}

fn parts(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|b| *b == b'/')
}

fn declared(root: &OwnedFd, path: &str, recorded: &mut usize) -> Result<DeclaredLink, String> {
    let mut link = DeclaredLink {
        path: path.to_owned(),
        kind: EntryKind::Missing,
        target: None,
        resolution: None,
        resolved: None,
        through_link: false,
        target_state: Vec::new(),
    };
    let all: Vec<&[u8]> = parts(path.as_bytes()).collect();
    let Some((name, parents)) = all.split_last() else {
        return Ok(link);
    };
    // The directories on the way, opened without following anything.
    let mut position = Position {
        root,
        dirs: Vec::new(),
        by_name: false,
    };
    for part in parents {
        let name = fs::c_name(part).map_err(|e| e.to_string())?;
        let stat = match fs::stat_at(position.here(), &name) {
            Ok(stat) => stat,
            Err(e) if missing(&e) => return Ok(link),
            Err(e) => return Err(format!("stat {}: {e}", quote(part))),
        };
        match stat.kind() {
            Type::Dir => {
                let fd = fs::open_dir_at(position.here(), &name)
                    .map_err(|e| format!("open {}: {e}", quote(part)))?;
                position.dirs.push((part.to_vec(), Some(fd)));
            }
            Type::Link => {
                link.through_link = true;
                return Ok(link);
            }
            _ => return Ok(link),
        }
    }
    let c_name = fs::c_name(name).map_err(|e| e.to_string())?;
    let stat = match fs::stat_at(position.here(), &c_name) {
        Ok(stat) => stat,
        Err(e) if missing(&e) => return Ok(link),
        Err(e) => return Err(format!("stat: {e}")),
    };
    link.kind = kind_of(&stat);
    if link.kind != EntryKind::Link {
        return Ok(link);
    }
    let target =
        fs::read_link_at(position.here(), &c_name).map_err(|e| format!("readlink: {e}"))?;
    link.target = Some(quote(&target));
    let outcome = position.resolve(&target)?;
    link.through_link |= outcome.through_link;
    link.resolution = Some(outcome.resolution);
    if outcome.resolution != Resolution::Outside && outcome.resolution != Resolution::Loop {
        link.resolved = Some(report_path(&position.path()));
    }
    if outcome.resolution == Resolution::Inside {
        link.target_state = position.record(recorded)?;
        link.through_link |= link.target_state.iter().any(|e| e.kind == EntryKind::Link);
    }
    Ok(link)
}

struct Outcome {
    resolution: Resolution,
    through_link: bool,
}

/// Where the walk is: a path in the tree (each directory's fd while the walk is still on real
/// entries; none once it goes by name only, or for a final non-directory).
struct Position<'a> {
    root: &'a OwnedFd,
    dirs: Vec<(Vec<u8>, Option<OwnedFd>)>,
    by_name: bool,
}

impl Position<'_> {
    fn here(&self) -> BorrowedFd<'_> {
        match self.dirs.last() {
            Some((_, Some(fd))) => fd.as_fd(),
            _ => self.root.as_fd(),
        }
    }

    fn path(&self) -> Vec<u8> {
        let names: Vec<&[u8]> = self.dirs.iter().map(|(name, _)| name.as_slice()).collect();
        names.join(&b'/')
    }

    /// Queue a link's target before what is left: an absolute one starts again at the root, or
    /// is outside (false).
    fn queue(&mut self, todo: &mut VecDeque<Vec<u8>>, target: &[u8]) -> bool {
        let mut relative = target;
        if target.first() == Some(&b'/') {
            match target.strip_prefix(paths::WORK.as_bytes()) {
                Some(rest) if rest.is_empty() || rest.first() == Some(&b'/') => relative = rest,
                _ => return false,
            }
            self.dirs.clear();
        }
        for part in parts(relative).rev() {
            todo.push_front(part.to_vec());
        }
        true
    }

    /// Resolve the declared link's target from its directory (where the position is).
    fn resolve(&mut self, target: &[u8]) -> Result<Outcome, String> {
        let mut hops = 1;
        let mut through_link = false;
        let outside = |through_link| {
            Ok(Outcome {
                resolution: Resolution::Outside,
                through_link,
            })
        };
        let mut todo = VecDeque::new();
        if target.is_empty() {
            // The kernel refuses an empty target (ENOENT).
            self.by_name = true;
            return Ok(Outcome {
                resolution: Resolution::Dangling,
                through_link,
            });
        }
        if !self.queue(&mut todo, target) {
            return outside(through_link);
        }
        while let Some(part) = todo.pop_front() {
            match part.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    if self.dirs.pop().is_none() {
                        return outside(through_link);
                    }
                    continue;
                }
                _ => {}
            }
            if self.dirs.is_empty() && part == b".git" {
                self.dirs.push((part, None));
                return Ok(Outcome {
                    resolution: Resolution::Metadata,
                    through_link,
                });
            }
            if self.by_name {
                self.dirs.push((part, None));
                continue;
            }
            let name = fs::c_name(&part).map_err(|e| e.to_string())?;
            let stat = match fs::stat_at(self.here(), &name) {
                Ok(stat) => stat,
                Err(e) if missing(&e) => {
                    self.by_name = true;
                    self.dirs.push((part, None));
                    continue;
                }
                Err(e) => return Err(format!("stat {}: {e}", quote(&part))),
            };
            match stat.kind() {
                Type::Dir => {
                    let fd = fs::open_dir_at(self.here(), &name)
                        .map_err(|e| format!("open {}: {e}", quote(&part)))?;
                    self.dirs.push((part, Some(fd)));
                }
                Type::Link => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Ok(Outcome {
                            resolution: Resolution::Loop,
                            through_link: true,
                        });
                    }
                    through_link = true;
                    let next = fs::read_link_at(self.here(), &name)
                        .map_err(|e| format!("readlink {}: {e}", quote(&part)))?;
                    if next.is_empty() {
                        self.by_name = true;
                        self.dirs.push((part, None));
                        continue;
                    }
                    if !self.queue(&mut todo, &next) {
                        return outside(through_link);
                    }
                }
                _ => {
                    // A file or special file: the end, or ENOTDIR when anything follows.
                    if !todo.is_empty() {
                        self.by_name = true;
                    }
                    self.dirs.push((part, None));
                }
            }
        }
        Ok(Outcome {
            resolution: if self.by_name {
                Resolution::Dangling
            } else {
                Resolution::Inside
            },
            through_link,
        })
    }

    /// The resolved entry and, for a directory, everything beneath it (the metadata's
    /// mountpoint left out), in path order, read without following links.
    fn record(&self, recorded: &mut usize) -> Result<Vec<TargetEntry>, String> {
        let path = self.path();
        let mut found: Vec<(Vec<u8>, EntryKind, Option<[u8; 20]>)> = Vec::new();
        let mut count = |found: &mut Vec<_>, entry| {
            *recorded += 1;
            if *recorded > MAX_RECORDED_TARGETS {
                return Err(format!("more than {MAX_RECORDED_TARGETS} recorded targets"));
            }
            found.push(entry);
            Ok(())
        };
        let mut buf = vec![0u8; fs::READ_BUFFER];
        // The resolved entry: a directory with its fd (or the root), or a non-directory in the
        // directory before it.
        let dir: Rc<OwnedFd> = match self.dirs.last() {
            None => Rc::new(
                self.root
                    .try_clone()
                    .map_err(|e| format!("dup the root: {e}"))?,
            ),
            Some((_, Some(fd))) => Rc::new(fd.try_clone().map_err(|e| format!("dup: {e}"))?),
            Some((name, None)) => {
                let parent = match self.dirs.len() {
                    1 => self.root.as_fd(),
                    n => match &self.dirs[n - 2].1 {
                        Some(fd) => fd.as_fd(),
                        None => return Err("a resolved entry without its directory".into()),
                    },
                };
                let entry = entry_at(parent, name, &path, &mut buf)?;
                count(&mut found, entry)?;
                return Ok(finish(found));
            }
        };
        count(&mut found, (path.clone(), EntryKind::Dir, None))?;
        // Directories still to list: opened when their turn comes, so at most one fd per level
        // (and the parent each waits in) is open.
        let mut pending: Vec<(Rc<OwnedFd>, Option<std::ffi::CString>, Vec<u8>)> =
            vec![(dir, None, path)];
        while let Some((parent, name, path)) = pending.pop() {
            let fd = match name {
                None => parent,
                Some(name) => Rc::new(
                    fs::open_dir_at(parent.as_fd(), &name)
                        .map_err(|e| format!("open {}: {e}", report_path(&path)))?,
                ),
            };
            let (names, complete) = fs::list_dir(fd.as_fd(), MAX_RECORDED_TARGETS + 1)
                .map_err(|e| format!("list {}: {e}", report_path(&path)))?;
            if !complete {
                *recorded = MAX_RECORDED_TARGETS + 1;
                return Err(format!("more than {MAX_RECORDED_TARGETS} recorded targets"));
            }
            for name in names {
                let bytes = name.to_bytes();
                if path.is_empty() && bytes == b".git" {
                    continue;
                }
                let child = join(&path, bytes);
                let entry = entry_at(fd.as_fd(), bytes, &child, &mut buf)?;
                let is_dir = entry.1 == EntryKind::Dir;
                count(&mut found, entry)?;
                if is_dir {
                    pending.push((fd.clone(), Some(name), child));
                }
            }
        }
        Ok(finish(found))
    }
}

type Found = (Vec<u8>, EntryKind, Option<[u8; 20]>);

/// One entry with its blob (a file's bytes, a link's target).
fn entry_at(
    dir: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    buf: &mut [u8],
) -> Result<Found, String> {
    let shown = || report_path(path);
    let name = fs::c_name(name).map_err(|e| e.to_string())?;
    let stat = fs::stat_at(dir, &name).map_err(|e| format!("stat {}: {e}", shown()))?;
    let kind = kind_of(&stat);
    let blob = match stat.kind() {
        Type::File => {
            let (mut file, open) = fs::open_file_at(dir, &name, &stat)
                .map_err(|e| format!("open {}: {e}", shown()))?;
            let (blob, read) = fs::blob_of_file(&mut file, open.size, buf)
                .map_err(|e| format!("read {}: {e}", shown()))?;
            if read != open.size {
                return Err(format!("{} changed while it was read", shown()));
            }
            Some(blob)
        }
        Type::Link => Some(fs::blob_of(
            &fs::read_link_at(dir, &name).map_err(|e| format!("readlink {}: {e}", shown()))?,
        )),
        _ => None,
    };
    Ok((path.to_vec(), kind, blob))
}

fn finish(mut found: Vec<Found>) -> Vec<TargetEntry> {
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
        .into_iter()
        .map(|(path, kind, blob)| TargetEntry {
            path: report_path(&path),
            kind,
            blob: blob.map(hex::encode),
        })
        .collect()
}
