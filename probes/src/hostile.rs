//! `hostile-repo`: walk /work without following any link, and resolve each link's target the way
//! the kernel would, one component at a time from the link's directory: no link may lead outside
//! the checkout (or into its metadata) at any step. Targets are never opened, so nothing they
//! point at can reach the report. The walk is bounded: 30 s and 100,000 entries.

use std::collections::VecDeque;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use cordon_contract::paths;
use cordon_contract::probe::{fixture, ops};

use crate::report::Probe;

const MAX_ENTRIES: usize = 100_000;
const DEADLINE: Duration = Duration::from_secs(30);

/// The checkout: a tree and, beneath it, its metadata (which is not part of the tree).
#[derive(Debug, Clone, Copy)]
pub struct Checkout<'a> {
    pub root: &'a Path,
    pub metadata: &'a Path,
}

impl Checkout<'_> {
    fn inside(&self, path: &Path) -> bool {
        path.starts_with(self.root) && !path.starts_with(self.metadata)
    }
}

/// /work and /work/.git.
pub fn work() -> Checkout<'static> {
    Checkout {
        root: Path::new(paths::WORK),
        metadata: Path::new(paths::METADATA),
    }
}

enum Part {
    Root,
    Parent,
    Name(std::ffi::OsString),
}

fn parts(path: &Path) -> Vec<Part> {
    path.components()
        .filter_map(|c| match c {
            Component::RootDir => Some(Part::Root),
            Component::ParentDir => Some(Part::Parent),
            Component::Normal(name) => Some(Part::Name(name.to_os_string())),
            Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Resolve `target` (a link's text) from `dir` one component at a time, following every link on
/// the way as the kernel would. Returns the first place outside the checkout it reaches (an
/// absolute target starts at `/`, which is outside), or None when every step stays inside. More
/// than 40 links is a cycle: it never resolves, so it reaches nothing.
pub fn escapes(checkout: Checkout<'_>, dir: &Path, target: &Path) -> Option<PathBuf> {
    let mut todo: VecDeque<Part> = parts(target).into();
    let mut current = dir.to_path_buf();
    let mut hops = 0;
    while let Some(part) = todo.pop_front() {
        match part {
            Part::Root => current = PathBuf::from("/"),
            Part::Parent => {
                current.pop();
            }
            Part::Name(name) => {
                current.push(name);
                if let Ok(link) = std::fs::read_link(&current) {
                    hops += 1;
                    if hops > paths::MAX_LINK_HOPS {
                        return None;
                    }
                    current.pop();
                    for part in parts(&link).into_iter().rev() {
                        todo.push_front(part);
                    }
                }
            }
        }
        if !checkout.inside(&current) {
            return Some(current);
        }
    }
    None
}

pub fn run(p: &mut Probe<'_>) {
    let start = Instant::now();
    let mut stack = vec![PathBuf::from(paths::WORK)];
    let mut entries = 0usize;
    let mut links = Vec::new();
    while let Some(dir) = stack.pop() {
        if start.elapsed() > DEADLINE || entries > MAX_ENTRIES {
            return p.error(format!(
                "the walk of /work did not finish within {DEADLINE:?} and {MAX_ENTRIES} entries"
            ));
        }
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in listing.flatten() {
            entries += 1;
            let path = entry.path();
            if path == Path::new(paths::METADATA) {
                continue;
            }
            // The entry's own type: a link is never followed.
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => links.push(path),
                Ok(meta) if meta.is_dir() => stack.push(path),
                _ => {}
            }
        }
    }
    // Links arrive as links: the archive upload never turns one into what it points at.
    let fixture_links = fixture::BENIGN_LINKS.iter().chain(fixture::HOSTILE_LINKS);
    for (path, _) in fixture_links {
        let path = Path::new(paths::WORK).join(path);
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_symlink() {
                p.error(format!(
                    "{} arrived as a {:?}, not as a link",
                    path.display(),
                    meta.file_type()
                ));
            }
        }
    }
    for link in links {
        let Ok(target) = std::fs::read_link(&link) else {
            continue;
        };
        let dir = link
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(paths::WORK));
        let escaped = p
            .runs(&ops::LINK_ESCAPE)
            .then(|| escapes(work(), &dir, &target))
            .flatten();
        if let Some(outside) = escaped {
            p.found(
                &ops::LINK_ESCAPE,
                ops::LINK_ESCAPE.id(),
                format!(
                    "{} -> {} reaches {} outside the checkout",
                    link.display(),
                    target.display(),
                    outside.display()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("cordon-hostile-{}", std::process::id()));
        let root = base.join("work");
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let link =
            |name: &str, target: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
        link("a/b/top", "../..");
        link("a/loop1", "loop2");
        link("a/loop2", "loop1");
        (base, root)
    }

    #[test]
    fn links_are_resolved_as_the_kernel_would() {
        let (base, root) = tree();
        let meta = root.join(".git");
        let co = Checkout {
            root: &root,
            metadata: &meta,
        };
        let dir = root.join("a");
        let t = |target: &str| escapes(co, &dir, Path::new(target));
        assert_eq!(t("b"), None);
        assert_eq!(t("../a/b"), None);
        assert_eq!(t("b/top"), None, "a/b/top is the root of the tree");
        assert!(
            t("b/top/..").is_some(),
            "through a link, .. climbs above the tree"
        );
        assert!(
            t("b/top/../work/a").is_some(),
            "it left the tree on the way, whatever the end"
        );
        assert!(t("/").is_some());
        assert!(
            t("../.git/config").is_some(),
            "the metadata is not the tree"
        );
        assert_eq!(t("loop1"), None, "a cycle never resolves");
        assert!(t("../..").is_some());
        std::fs::remove_dir_all(base).unwrap();
    }
}
