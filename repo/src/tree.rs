//! The tree at the seeded head, as `git ls-tree` lists it, and the rules a repository must meet to
//! be seeded: every name one git would check out, every link staying inside the checkout as the
//! kernel would resolve it inside the container, and a size that fits the allocation.

use std::collections::{BTreeMap, VecDeque};

use crate::unusable::Unusable;

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File {
        executable: bool,
        size: u64,
    },
    Link,
    Dir,
    /// A submodule: checked out as an empty directory.
    Gitlink,
}

/// An entry: its path (bytes, `/`-separated), object id and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: Vec<u8>,
    pub oid: String,
    pub kind: Kind,
}

/// Parse `git ls-tree -r -t -l -z --full-tree` output.
pub fn parse_ls_tree(output: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for record in output.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let tab = record
            .iter()
            .position(|b| *b == b'\t')
            .ok_or("ls-tree record without a tab")?;
        let (meta, path) = (&record[..tab], &record[tab + 1..]);
        let meta = std::str::from_utf8(meta).map_err(|_| "ls-tree metadata is not UTF-8")?;
        let fields: Vec<&str> = meta.split_whitespace().collect();
        let [mode, kind, oid, size] = fields[..] else {
            return Err(format!(
                "ls-tree record {meta:?} has {} fields",
                fields.len()
            ));
        };
        let kind = match (mode, kind) {
            ("100644", "blob") => Kind::File {
                executable: false,
                size: size.parse().map_err(|_| "bad size")?,
            },
            ("100755", "blob") => Kind::File {
                executable: true,
                size: size.parse().map_err(|_| "bad size")?,
            },
            ("120000", "blob") => Kind::Link,
            ("040000", "tree") => Kind::Dir,
            ("160000", "commit") => Kind::Gitlink,
            _ => {
                return Err(format!(
                    "unsupported tree entry {mode} {kind} at {}",
                    String::from_utf8_lossy(path)
                ))
            }
        };
        entries.push(Entry {
            path: path.to_vec(),
            oid: oid.to_owned(),
            kind,
        });
    }
    Ok(entries)
}

/// The gitlinks of a tree, as UTF-8 paths under /work (what execute and fix mask); None when one
/// has a name that is not UTF-8, which no mount target could name exactly.
pub fn gitlinks(entries: &[Entry]) -> Option<Vec<String>> {
    entries
        .iter()
        .filter(|e| e.kind == Kind::Gitlink)
        .map(|e| String::from_utf8(e.path.clone()).ok())
        .collect()
}

/// Code points HFS+ ignores when it compares names (git's is_hfs_dotgit list).
fn hfs_ignorable(c: char) -> bool {
    matches!(c, '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
}

/// A path component git refuses to check out (its verify_path with protectNTFS and protectHFS,
/// on by default): empty, `.`, `..`, a backslash, or any spelling of `.git` (case, trailing dots
/// and spaces, an NTFS stream, the 8.3 name `git~1`, HFS-ignorable code points).
pub fn forbidden_component(component: &[u8]) -> bool {
    if component.is_empty() || component == b"." || component == b".." || component.contains(&b'\\')
    {
        return true;
    }
    let lower = component.to_ascii_lowercase();
    let trimmed: &[u8] = {
        let mut end = lower.len();
        while end > 0 && matches!(lower[end - 1], b'.' | b' ') {
            end -= 1;
        }
        &lower[..end]
    };
    if trimmed == b".git"
        || trimmed == b"git~1"
        || (lower.starts_with(b".git") && lower.get(4) == Some(&b':'))
    {
        return true;
    }
    let folded: String = String::from_utf8_lossy(component)
        .chars()
        .filter(|c| !hfs_ignorable(*c))
        .collect::<String>()
        .to_lowercase();
    folded == ".git"
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|b| *b == b'/')
}

/// Where a link in the tree leads, resolved one component at a time as the kernel would inside the
/// container: a missing component is taken as a directory the agent could create; a link on the
/// way is followed (a cycle, more than 40 links, never resolves). Returns why it is unusable, if
/// it is: an absolute target, a step above the checkout, or a step into `.git`.
pub fn check_link(
    path: &[u8],
    target: &[u8],
    links: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<(), Unusable> {
    let shown = || String::from_utf8_lossy(path).into_owned();
    let escaping = |reaches: String| Unusable::EscapingLink {
        path: shown(),
        reaches,
    };
    if target.first() == Some(&b'/') {
        return Err(Unusable::AbsoluteLink {
            path: shown(),
            target: String::from_utf8_lossy(target).into_owned(),
        });
    }
    let mut current: Vec<Vec<u8>> = components(path).map(<[u8]>::to_vec).collect();
    current.pop();
    let mut todo: VecDeque<Vec<u8>> = components(target).map(<[u8]>::to_vec).collect();
    let mut hops = 0;
    while let Some(part) = todo.pop_front() {
        match part.as_slice() {
            b"" | b"." => {}
            b".." => {
                if current.pop().is_none() {
                    return Err(escaping("a directory above the checkout".into()));
                }
            }
            name => {
                if current.is_empty() && forbidden_component(name) {
                    return Err(escaping("the metadata (.git)".into()));
                }
                current.push(name.to_vec());
                if let Some(next) = links.get(&current.join(&b'/')) {
                    current.pop();
                    hops += 1;
                    if hops > cordon_contract::paths::MAX_LINK_HOPS {
                        return Ok(());
                    }
                    if next.first() == Some(&b'/') {
                        return Err(escaping(format!(
                            "{} through another link",
                            String::from_utf8_lossy(next)
                        )));
                    }
                    for component in components(next).rev() {
                        todo.push_front(component.to_vec());
                    }
                }
            }
        }
    }
    Ok(())
}

/// What the tree needs in a tmpfs: bytes (whole pages per file, a page per long link target) and
/// inodes (every entry, the root, and the `.git` mountpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Needs {
    pub bytes: u64,
    pub inodes: u64,
}

/// Link targets this long or longer take a page of their own in tmpfs.
pub const INLINE_LINK_MAX: usize = 128;

const PAGE: u64 = 4096;

fn pages(size: u64) -> u64 {
    size.div_ceil(PAGE) * PAGE
}

/// Check every name, count what the tree needs.
pub fn check_names_and_size(
    entries: &[Entry],
    link_targets: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<Needs, Unusable> {
    let mut bytes = 0;
    for entry in entries {
        if components(&entry.path).any(forbidden_component) {
            return Err(Unusable::BadName {
                path: String::from_utf8_lossy(&entry.path).into_owned(),
            });
        }
        let name = components(&entry.path).next_back().unwrap_or_default();
        if entry.kind == Kind::Link && name.eq_ignore_ascii_case(b".gitmodules") {
            return Err(Unusable::BadName {
                path: String::from_utf8_lossy(&entry.path).into_owned(),
            });
        }
        bytes += match &entry.kind {
            Kind::File { size, .. } => pages(*size),
            Kind::Link => link_targets
                .get(&entry.path)
                .filter(|t| t.len() >= INLINE_LINK_MAX)
                .map_or(0, |_| PAGE),
            Kind::Dir | Kind::Gitlink => 0,
        };
    }
    Ok(Needs {
        bytes,
        inodes: entries.len() as u64 + 2,
    })
}

/// Refuse a tree that does not fit `limit` (a storage area's bytes and inodes).
pub fn check_fits(needs: Needs, limit: Needs, what: &str) -> Result<(), Unusable> {
    if needs.bytes > limit.bytes || needs.inodes > limit.inodes {
        return Err(Unusable::TooLarge {
            what: what.to_owned(),
            needs_bytes: needs.bytes,
            needs_inodes: needs.inodes,
            limit_bytes: limit.bytes,
            limit_inodes: limit.inodes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_refuses_these_names() {
        for name in [
            ".git",
            ".GIT",
            ".Git.",
            ".git ",
            "git~1",
            "GIT~1",
            ".git::$INDEX_ALLOCATION",
            ".g\u{200c}it",
            "\u{feff}.git",
            "a\\b",
            "..",
            ".",
        ] {
            assert!(forbidden_component(name.as_bytes()), "{name:?}");
        }
        for name in [
            "git",
            ".gitignore",
            ".github",
            "gitx",
            "src",
            ".git-hooks",
            "g",
        ] {
            assert!(!forbidden_component(name.as_bytes()), "{name:?}");
        }
    }

    fn links(pairs: &[(&str, &str)]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        pairs
            .iter()
            .map(|(a, b)| (a.as_bytes().to_vec(), b.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn links_are_resolved_as_the_kernel_would() {
        let tree = links(&[
            ("deep/er/top", "../.."),
            ("chained", "deep/er/top/../run/cordon/control/policy.json"),
            ("inside", "src/lib.rs"),
            ("up", "../x"),
            ("loop-a", "loop-b"),
            ("loop-b", "loop-a"),
            ("dir/missing", "not/yet/../../file"),
            ("meta", ".git/config"),
            ("abs", "/etc/passwd"),
            ("via-abs", "abs/x"),
        ]);
        let check = |p: &str| check_link(p.as_bytes(), &tree[p.as_bytes()], &tree);
        assert!(
            check("deep/er/top").is_ok(),
            "deep/er/top is the checkout root"
        );
        assert!(matches!(
            check("chained"),
            Err(Unusable::EscapingLink { .. })
        ));
        assert!(check("inside").is_ok());
        assert!(matches!(check("up"), Err(Unusable::EscapingLink { .. })));
        assert!(check("loop-a").is_ok(), "a cycle never resolves");
        assert!(
            check("dir/missing").is_ok(),
            "missing directories are taken as created"
        );
        assert!(matches!(check("meta"), Err(Unusable::EscapingLink { .. })));
        assert!(matches!(check("abs"), Err(Unusable::AbsoluteLink { .. })));
        assert!(matches!(
            check("via-abs"),
            Err(Unusable::EscapingLink { .. })
        ));
    }

    /// The gate's probe fixture and the seeder agree: the benign links (loops, dangling, up and
    /// back) seed; every hostile link the probe follows out of the checkout is refused here.
    #[test]
    fn probe_fixture_links_match_the_seeder() {
        use cordon_contract::probe::fixture::{BENIGN_LINKS, HOSTILE_LINKS};
        let tree = links(&[BENIGN_LINKS, HOSTILE_LINKS].concat());
        let check = |p: &str| check_link(p.as_bytes(), &tree[p.as_bytes()], &tree);
        for (path, _) in BENIGN_LINKS {
            assert!(check(path).is_ok(), "{path} is benign");
        }
        for (path, _) in HOSTILE_LINKS {
            // The chain's stepping stone resolves inside (to hostile/); the link through it escapes.
            let stepping_stone = *path == "hostile/deep/er/top";
            assert_eq!(check(path).is_ok(), stepping_stone, "{path}");
        }
    }

    #[test]
    fn needs_count_pages_and_inodes() {
        let entries = vec![
            Entry {
                path: b"a".to_vec(),
                oid: String::new(),
                kind: Kind::File {
                    executable: false,
                    size: 1,
                },
            },
            Entry {
                path: b"b".to_vec(),
                oid: String::new(),
                kind: Kind::File {
                    executable: true,
                    size: 4096,
                },
            },
            Entry {
                path: b"c".to_vec(),
                oid: String::new(),
                kind: Kind::File {
                    executable: false,
                    size: 0,
                },
            },
            Entry {
                path: b"d".to_vec(),
                oid: String::new(),
                kind: Kind::Dir,
            },
        ];
        let needs = check_names_and_size(&entries, &BTreeMap::new()).unwrap();
        assert_eq!(
            needs,
            Needs {
                bytes: 8192,
                inodes: 6
            }
        );
        assert!(check_fits(
            needs,
            Needs {
                bytes: 8192,
                inodes: 6
            },
            "work"
        )
        .is_ok());
        assert!(check_fits(
            needs,
            Needs {
                bytes: 4096,
                inodes: 6
            },
            "work"
        )
        .is_err());
        assert!(check_fits(
            needs,
            Needs {
                bytes: 8192,
                inodes: 5
            },
            "work"
        )
        .is_err());
    }

    #[test]
    fn ls_tree_output_parses() {
        let out = b"100644 blob ce013625030ba8dba906f756967f9e9ca394464a       6\thello\x00040000 tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904       -\tdir\x00120000 blob 1234567890123456789012345678901234567890       3\tlink\x00160000 commit 1234567890123456789012345678901234567890       -\tsub\x00";
        let entries = parse_ls_tree(out).unwrap();
        assert_eq!(entries.len(), 4);
        assert_eq!(
            entries[0].kind,
            Kind::File {
                executable: false,
                size: 6
            }
        );
        assert_eq!(entries[1].kind, Kind::Dir);
        assert_eq!(entries[2].kind, Kind::Link);
        assert_eq!(entries[3].kind, Kind::Gitlink);
    }
}
