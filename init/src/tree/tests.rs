//! The tree reader against real repositories: `git` builds each fixture's commit and index, and
//! the work tree is laid out as cordon seeds it (files 0644 or 0755, directories 0755, links as
//! links, a gitlink as an empty directory, the metadata at `<root>/.git`, HEAD detached).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

use cordon_contract::tree::{
    CheckReport, DeclaredLink, EntryKind, Finding, LinkSnapshot, OpKind, Operation, ReaderFailure,
    Reason, Resolution, MAX_DECLARED_PATHS, MAX_LISTED_REASONS, MAX_RECORDED_TARGETS,
    MAX_UNACCOUNTED,
};

use super::check::{self, Findings};
use super::index::{self, Base, Lookup, Mode, Node};
use super::{fs, links};

use super::fixture::{chmod, mkfifo, scratch, Fixture};

impl Fixture {
    fn check(&self, base: &str, ops: &[Operation]) -> CheckReport {
        check::check_tree(self.work(), &self.meta(), base, ops).expect("check runs")
    }

    fn index_bytes(&self) -> Vec<u8> {
        std::fs::read(self.meta().join("index")).expect("index")
    }
}

fn reasons(report: &CheckReport) -> Vec<(Reason, &str)> {
    report
        .findings
        .iter()
        .map(|f| (f.reason, f.path.as_str()))
        .collect()
}

/// A fixture with one of everything, seeded.
fn typical() -> (Fixture, String) {
    let mut f = Fixture::new("typical");
    f.file("README", "hello\n")
        .executable("bin/run", "#!/bin/sh\necho hi\n")
        .file("src/lib.rs", "pub fn x() {}\n")
        .file("src/deep/er/mod.rs", "// deep\n")
        .file("src/deep/other.rs", "// other\n")
        .file("a-b", "dash sorts before slash\n")
        .link("link", "README")
        .link("src/up", "../bin");
    f.gitlink("vendor/sub");
    let base = f.seed();
    (f, base)
}

#[test]
fn a_tree_as_seeded_has_no_finding() {
    let (f, base) = typical();
    let report = f.check(&base, &[]);
    assert_eq!(report.head.as_deref(), Some(base.as_str()));
    assert_eq!(report.entries, 9);
    assert_eq!(report.gitlinks, vec!["vendor/sub"]);
    assert_eq!(report.findings, Vec::<Finding>::new());
    assert_eq!(report.more, 0);
    assert_eq!(report.metadata_digest, "");
}

#[test]
fn an_entry_base_does_not_have_is_untracked_and_never_descended() {
    let (f, base) = typical();
    f.file("new", "x")
        .file("src/new.rs", "x")
        .dir("empty")
        .file("untracked/a/b/c", "x")
        .file("src/.git", "gitdir: elsewhere")
        .file(".gitignore", "ignored\n")
        .file("ignored", "x");
    mkfifo(&f.at("src/fifo"));
    let _socket = std::os::unix::net::UnixListener::bind(f.at("bin/socket")).expect("socket");
    let report = f.check(&base, &[]);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::Untracked, ".gitignore"),
            (Reason::Untracked, "bin/socket"),
            (Reason::Untracked, "empty"),
            (Reason::Untracked, "ignored"),
            (Reason::Untracked, "new"),
            (Reason::Untracked, "src/.git"),
            (Reason::Untracked, "src/fifo"),
            (Reason::Untracked, "src/new.rs"),
            (Reason::Untracked, "untracked"),
        ]
    );
    let detail = |path: &str| {
        report
            .findings
            .iter()
            .find(|x| x.path == path)
            .map(|x| x.detail.clone())
    };
    assert_eq!(detail("src/fifo").as_deref(), Some("found a fifo"));
    assert_eq!(detail("bin/socket").as_deref(), Some("found a socket"));
    assert_eq!(detail("empty").as_deref(), Some("found a directory"));
}

#[test]
fn an_entry_that_is_not_there_is_missing_and_a_missing_directory_each_entry_beneath() {
    let (f, base) = typical();
    std::fs::remove_file(f.at("README")).expect("rm");
    std::fs::remove_dir_all(f.at("src/deep")).expect("rm");
    std::fs::remove_dir(f.at("vendor/sub")).expect("rm");
    let report = f.check(&base, &[]);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::Missing, "README"),
            (Reason::Missing, "src/deep/er/mod.rs"),
            (Reason::Missing, "src/deep/other.rs"),
            (Reason::Missing, "vendor/sub"),
        ]
    );
    assert_eq!(report.findings[0].detail, "base 100644");
    assert_eq!(report.findings[3].detail, "base 160000");
}

#[test]
fn a_file_or_link_with_other_content_is_content_changed() {
    let (f, base) = typical();
    f.file("src/lib.rs", "pub fn y() {}\n");
    std::fs::remove_file(f.at("link")).expect("rm");
    f.link("link", "bin/run");
    let report = f.check(&base, &[]);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::ContentChanged, "link"),
            (Reason::ContentChanged, "src/lib.rs"),
        ]
    );
    let detail = &report.findings[1].detail;
    let expected = hex::encode(fs::blob_of(b"pub fn x() {}\n"));
    let found = hex::encode(fs::blob_of(b"pub fn y() {}\n"));
    assert_eq!(detail, &format!("base blob {expected}, found {found}"));
    // The same size, other bytes: still found.
    f.file("src/lib.rs", "pub fn x() {}\n");
    f.file("README", "HELLO\n");
    assert_eq!(
        reasons(&f.check(&base, &[])),
        vec![
            (Reason::ContentChanged, "README"),
            (Reason::ContentChanged, "link"),
        ]
    );
}

#[test]
fn a_file_whose_executable_bit_is_not_bases_is_mode_changed() {
    let (f, base) = typical();
    chmod(&f.at("README"), 0o755);
    chmod(&f.at("bin/run"), 0o644);
    // Other bits than the owner's execute bit are not git's.
    chmod(&f.at("src/lib.rs"), 0o600);
    let report = f.check(&base, &[]);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::ModeChanged, "README"),
            (Reason::ModeChanged, "bin/run")
        ]
    );
    assert_eq!(report.findings[0].detail, "base 100644, found 100755");
    assert_eq!(report.findings[1].detail, "base 100755, found 100644");
    // Mode and content both changed: both found.
    f.executable("README", "changed");
    assert_eq!(
        reasons(&f.check(&base, &[])),
        vec![
            (Reason::ContentChanged, "README"),
            (Reason::ModeChanged, "README"),
            (Reason::ModeChanged, "bin/run")
        ]
    );
}

#[test]
fn an_entry_of_another_type_is_type_changed_and_nothing_beneath_it_is_reported() {
    let (f, base) = typical();
    // A file replaced by a directory, by a link; a link by a file; a tracked directory by a
    // link (its entries are not missing); a gitlink by a file; a tracked directory by a fifo.
    std::fs::remove_file(f.at("README")).expect("rm");
    f.file("README/inside", "x");
    std::fs::remove_file(f.at("a-b")).expect("rm");
    f.link("a-b", "README");
    std::fs::remove_file(f.at("link")).expect("rm");
    f.file("link", "README");
    std::fs::remove_dir_all(f.at("src/deep")).expect("rm");
    f.link("src/deep", "/tmp");
    std::fs::remove_dir(f.at("vendor/sub")).expect("rm");
    f.file("vendor/sub", "");
    std::fs::remove_dir_all(f.at("bin")).expect("rm");
    mkfifo(&f.at("bin"));
    let report = f.check(&base, &[]);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::TypeChanged, "README"),
            (Reason::TypeChanged, "a-b"),
            (Reason::TypeChanged, "bin"),
            (Reason::TypeChanged, "link"),
            (Reason::TypeChanged, "src/deep"),
            (Reason::TypeChanged, "vendor/sub"),
        ]
    );
    let details: Vec<&str> = report.findings.iter().map(|x| x.detail.as_str()).collect();
    assert_eq!(
        details,
        vec![
            "base 100644, found a directory",
            "base 100644, found a link",
            "base a directory, found a fifo",
            "base 120000, found a file",
            "base a directory, found a link",
            "base 160000, found a file",
        ]
    );
}

#[test]
fn a_gitlink_that_is_not_an_empty_directory_has_gitlink_content() {
    let (f, base) = typical();
    f.file("vendor/sub/checked-out", "x");
    let report = f.check(&base, &[]);
    assert_eq!(
        reasons(&report),
        vec![(Reason::GitlinkContent, "vendor/sub")]
    );
}

#[test]
fn gitlinks_are_listed_in_index_order_and_quoted_when_not_utf8() {
    let mut f = Fixture::new("gitlinks");
    f.file("x", "x");
    f.gitlink("z")
        .gitlink("a/b")
        .gitlink(OsStr::from_bytes(b"n\xffo"));
    let base = f.seed();
    let report = f.check(&base, &[]);
    assert_eq!(report.gitlinks, vec!["a/b", "n\\xffo", "z"]);
    assert_eq!(report.findings, Vec::<Finding>::new());
    // A name that is not UTF-8 is reported quoted.
    f.file(OsStr::from_bytes(b"bad\xfe"), "x");
    assert_eq!(
        reasons(&f.check(&base, &[])),
        vec![(Reason::Untracked, "bad\\xfe")]
    );
}

/// Run `body` on a thread without the capabilities that bypass file permissions (the reader's
/// threads inherit its credentials), so a root test sees EACCES as the reader's uid would.
fn without_dac_override<R: Send>(body: impl FnOnce() -> R + Send) -> R {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut header = Header {
                    version: 0x2008_0522,
                    pid: 0,
                };
                let mut data = [Data::default(); 2];
                // SAFETY: capget/capset on this thread with a v3 header and two data words.
                unsafe {
                    assert_eq!(
                        libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
                        0
                    );
                    // CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2).
                    let bypass: u32 = (1 << 1) | (1 << 2);
                    data[0].effective &= !bypass;
                    assert_eq!(
                        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
                        0
                    );
                }
                body()
            })
            .join()
            .expect("the body ran")
    })
}

#[test]
fn what_cannot_be_opened_is_unreadable_and_the_rest_is_read() {
    let (f, base) = typical();
    chmod(&f.at("README"), 0o200);
    chmod(&f.at("src/deep"), 0o000);
    chmod(&f.at("vendor/sub"), 0o000);
    f.file("src/lib.rs", "changed");
    let report = without_dac_override(|| f.check(&base, &[]));
    chmod(&f.at("src/deep"), 0o755);
    chmod(&f.at("vendor/sub"), 0o755);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::Unreadable, "README"),
            (Reason::Unreadable, "src/deep"),
            (Reason::ContentChanged, "src/lib.rs"),
            (Reason::Unreadable, "vendor/sub"),
        ],
        "{report:?}"
    );
}

#[test]
fn past_the_limit_the_reader_stops_and_lists_too_many_changes_first() {
    let (f, base) = typical();
    // One directory with more untracked names than the limit: its listing stops there.
    for n in 0..MAX_UNACCOUNTED + 5 {
        std::fs::write(f.at(format!("src/u{n:05}")), "").expect("write");
    }
    let report = f.check(&base, &[]);
    assert_eq!(report.findings.len(), MAX_LISTED_REASONS);
    assert_eq!(report.findings[0].reason, Reason::TooManyChanges);
    assert_eq!(report.findings[0].path, ".");
    assert!(report.findings[1..]
        .iter()
        .all(|x| x.reason == Reason::Untracked));
    let total = MAX_LISTED_REASONS as u64 - 1 + report.more;
    assert!(total > MAX_UNACCOUNTED as u64, "{total}");
    // The listed ones are in path order.
    let paths: Vec<&str> = report.findings[1..]
        .iter()
        .map(|x| x.path.as_str())
        .collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
}

#[test]
fn many_changes_spread_over_directories_stop_the_reader_too() {
    let (f, base) = typical();
    for d in 0..101 {
        f.dir(format!("src/deep/d{d}"));
        for n in 0..100 {
            std::fs::write(f.at(format!("src/deep/d{d}/f{n}")), "").expect("write");
        }
    }
    // Untracked directories are one finding each: changed files count one by one.
    assert_eq!(f.check(&base, &[]).findings.len(), 101);
    let mut g = Fixture::new("many");
    for d in 0..101 {
        for n in 0..100 {
            g.file(format!("d{d}/f{n}"), "x");
        }
    }
    g.gitlink("sub");
    let base = g.seed();
    for d in 0..101 {
        for n in 0..100 {
            std::fs::write(g.at(format!("d{d}/f{n}")), "y").expect("write");
        }
    }
    let report = g.check(&base, &[]);
    assert_eq!(report.findings[0].reason, Reason::TooManyChanges);
    assert_eq!(report.findings.len(), MAX_LISTED_REASONS);
    let more = usize::try_from(report.more).unwrap();
    assert!(more + MAX_LISTED_REASONS - 1 > MAX_UNACCOUNTED);
    assert!(more + MAX_LISTED_REASONS - 1 < 101 * 100);
}

fn op(kind: OpKind, path: &str) -> Operation {
    Operation {
        kind,
        path: path.to_owned(),
        renamed_from: None,
    }
}

fn rename(from: &str, to: &str) -> Operation {
    Operation {
        kind: OpKind::Rename,
        path: to.to_owned(),
        renamed_from: Some(from.to_owned()),
    }
}

#[test]
fn operations_are_checked_against_base() {
    let (f, base) = typical();
    let good = [
        op(OpKind::Add, "new"),
        op(OpKind::Add, "brand/new/dir/file"),
        op(OpKind::Add, "src/new.rs"),
        op(OpKind::Edit, "README"),
        op(OpKind::Edit, "link"),
        op(OpKind::Delete, "src/deep/other.rs"),
        rename("src/lib.rs", "src/lib2.rs"),
        rename("link", "elsewhere/link"),
    ];
    assert_eq!(f.check(&base, &good).findings, Vec::<Finding>::new());
    let bad = [
        op(OpKind::Add, "README"),
        op(OpKind::Add, "src/deep"),
        op(OpKind::Add, "vendor/sub"),
        op(OpKind::Edit, "nothing"),
        op(OpKind::Edit, "src"),
        op(OpKind::Delete, "vendor/sub"),
        rename("vendor/sub", "moved"),
        rename("src/lib.rs", "bin/run"),
        op(OpKind::Add, "README/x"),
        op(OpKind::Edit, "link/x"),
        op(OpKind::Delete, "vendor/sub/x/y"),
        rename("bin/run/x", "moved2"),
        op(OpKind::Add, "../escape"),
        op(OpKind::Add, ".git/config"),
        op(OpKind::Edit, "a//b"),
        op(OpKind::Add, ""),
        Operation {
            kind: OpKind::Rename,
            path: "to".into(),
            renamed_from: None,
        },
        rename("/abs", "to2"),
        Operation {
            kind: OpKind::Edit,
            path: "README".into(),
            renamed_from: Some("x".into()),
        },
    ];
    let report = f.check(&base, &bad);
    let mut expected = vec![
        (Reason::DestinationTaken, "README"),
        (Reason::DestinationTaken, "src/deep"),
        (Reason::DestinationTaken, "vendor/sub"),
        (Reason::SourceNotFile, "nothing"),
        (Reason::SourceNotFile, "src"),
        (Reason::SourceGitlink, "vendor/sub"),
        (Reason::SourceGitlink, "vendor/sub"),
        (Reason::DestinationTaken, "bin/run"),
        (Reason::BeneathNonDirectory, "README/x"),
        (Reason::BeneathNonDirectory, "link/x"),
        (Reason::BeneathNonDirectory, "vendor/sub/x/y"),
        (Reason::BeneathNonDirectory, "bin/run/x"),
        (Reason::BadPath, "../escape"),
        (Reason::BadPath, ".git/config"),
        (Reason::BadPath, "a//b"),
        (Reason::BadPath, "."),
        (Reason::BadPath, "to"),
        (Reason::BadPath, "/abs"),
        (Reason::BadPath, "README"),
    ];
    expected.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
    assert_eq!(reasons(&report), expected);
}

#[test]
fn base_lookups_tell_entries_directories_and_what_lies_beneath_an_entry() {
    let (f, _) = typical();
    let metadata = fs::open_root(&f.meta()).expect("metadata");
    let tree = index::base(&metadata).expect("base");
    let entry = |path: &[u8]| tree.entries.iter().position(|e| e.path == path);
    assert_eq!(
        tree.lookup(b"README"),
        Lookup::Found(Node::Entry(entry(b"README").expect("README")))
    );
    assert!(matches!(
        tree.lookup(b"src/deep"),
        Lookup::Found(Node::Dir(_))
    ));
    assert_eq!(
        tree.lookup(b"vendor/sub/x"),
        Lookup::Beneath(entry(b"vendor/sub").expect("gitlink"))
    );
    assert_eq!(tree.lookup(b"src/deep/nope"), Lookup::Missing);
    assert_eq!(tree.lookup(b"nope/deeper"), Lookup::Missing);
    let modes: Vec<Mode> = tree.entries.iter().map(|e| e.mode).collect();
    assert!(modes.contains(&Mode::Executable) && modes.contains(&Mode::Link));
    // Entries beneath each directory are one contiguous range.
    let Lookup::Found(Node::Dir(src)) = tree.lookup(b"src") else {
        panic!("src is a directory");
    };
    let beneath: Vec<&[u8]> = (tree.dirs[src].first..tree.dirs[src].end)
        .map(|e| tree.entries[e].path.as_slice())
        .collect();
    assert_eq!(
        beneath,
        vec![
            &b"src/deep/er/mod.rs"[..],
            b"src/deep/other.rs",
            b"src/lib.rs",
            b"src/up"
        ]
    );
}

#[test]
fn head_is_the_detached_commit_or_nothing() {
    let (f, base) = typical();
    let head = |f: &Fixture| {
        let metadata = fs::open_root(&f.meta()).expect("metadata");
        check::read_head(&metadata)
    };
    assert_eq!(head(&f), Some(base.clone()));
    for bad in [
        "ref: refs/heads/main\n".to_owned(),
        base.clone(),
        format!("{base}\n\n"),
        format!("{}\n", base.to_uppercase()),
        format!("{}\n", &base[..39]),
    ] {
        std::fs::write(f.meta().join("HEAD"), bad.as_bytes()).expect("HEAD");
        assert_eq!(head(&f), None, "{bad:?}");
    }
    std::fs::remove_file(f.meta().join("HEAD")).expect("rm");
    f.link(".git/HEAD", "ORIG_HEAD");
    std::fs::write(f.meta().join("ORIG_HEAD"), format!("{base}\n")).expect("ORIG_HEAD");
    assert_eq!(head(&f), None, "a link is never followed");
    // The host owns head-moved: a moved head is reported as it is, never as a finding.
    std::fs::remove_file(f.meta().join("HEAD")).expect("rm");
    std::fs::write(f.meta().join("HEAD"), format!("{}\n", "2".repeat(40))).expect("HEAD");
    let report = f.check(&base, &[]);
    assert_eq!(report.head.as_deref(), Some("2".repeat(40).as_str()));
    assert_eq!(report.findings, Vec::<Finding>::new());
}

#[test]
fn the_check_fails_on_a_bad_base_or_too_many_operations() {
    let (f, base) = typical();
    for bad in ["", "HEAD", &base[..39], &base.to_uppercase()] {
        let err = check::check_tree(f.work(), &f.meta(), bad, &[]).expect_err(bad);
        assert!(err.contains("not a commit id"), "{err}");
    }
    let ops = vec![op(OpKind::Add, "x"); cordon_contract::tree::MAX_OPERATIONS + 1];
    assert!(check::check_tree(f.work(), &f.meta(), &base, &ops).is_err());
    let err = check::check_tree(&f.at("nope"), &f.meta(), &base, &[]).expect_err("no root");
    assert!(err.contains("cannot open the work tree"), "{err}");
    // The roots are opened without following a link.
    let other = scratch("linked-root");
    symlink(f.work(), other.join("work")).expect("symlink");
    assert!(check::check_tree(&other.join("work"), &f.meta(), &base, &[]).is_err());
    let _ = std::fs::remove_dir_all(&other);
}

/// A file swapped for a link between its stat and its open (what an agent's leftover process, or
/// a race with the reading, could do) is never read through the link: not to a file beside it,
/// not out of the tree; and a file swapped for another file is refused as another inode.
#[test]
fn a_file_swapped_for_a_link_during_the_reading_is_never_read_through_it() {
    let dir = scratch("swap");
    std::fs::write(dir.join("a"), "shown").expect("write");
    std::fs::write(dir.join("beside"), "beside").expect("write");
    let root = fs::open_root(&dir).expect("root");
    let root = std::os::fd::AsFd::as_fd(&root);
    for target in ["beside", "/etc/hostname", "../swap"] {
        std::fs::write(dir.join("a"), "shown").expect("write");
        let shown = fs::stat_at(root, c"a").expect("a");
        std::fs::remove_file(dir.join("a")).expect("remove");
        symlink(target, dir.join("a")).expect("symlink");
        let opened = fs::open_file_at(root, c"a", &shown);
        assert!(opened.is_err(), "{target}: read through a link");
        std::fs::remove_file(dir.join("a")).expect("remove");
    }
    std::fs::write(dir.join("a"), "shown").expect("write");
    let shown = fs::stat_at(root, c"a").expect("a");
    std::fs::rename(dir.join("beside"), dir.join("a")).expect("rename over");
    assert!(
        fs::open_file_at(root, c"a", &shown).is_err(),
        "another inode"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_primitives_open_only_the_regular_file_they_were_shown_and_count_what_they_read() {
    let dir = scratch("fs");
    std::fs::write(dir.join("a"), "hello").expect("write");
    std::fs::write(dir.join("b"), "other").expect("write");
    mkfifo(&dir.join("fifo"));
    symlink("a", dir.join("link")).expect("symlink");
    let root = fs::open_root(&dir).expect("root");
    let root = std::os::fd::AsFd::as_fd(&root);
    let a = fs::stat_at(root, c"a").expect("a");
    let b = fs::stat_at(root, c"b").expect("b");
    let (mut file, open) = fs::open_file_at(root, c"a", &a).expect("open");
    assert_eq!((open.dev, open.ino, open.size), (a.dev, a.ino, 5));
    let mut buf = vec![0u8; 2];
    assert_eq!(
        fs::blob_of_file(&mut file, 5, &mut buf).expect("read"),
        (fs::blob_of(b"hello"), 5)
    );
    // Another inode than the one shown, a fifo, a link: never read.
    assert!(fs::open_file_at(root, c"a", &b).is_err());
    let fifo = fs::stat_at(root, c"fifo").expect("fifo");
    assert_eq!(fifo.kind(), fs::Type::Fifo);
    assert!(fs::open_file_at(root, c"fifo", &fifo).is_err());
    let link = fs::stat_at(root, c"link").expect("link");
    assert_eq!(link.kind(), fs::Type::Link);
    assert!(fs::open_file_at(root, c"link", &link).is_err());
    assert!(fs::open_dir_at(root, c"link").is_err());
    assert_eq!(fs::read_link_at(root, c"link").expect("readlink"), b"a");
    // The count read is handed back: a size that is not the content's shows.
    let (mut file, _) = fs::open_file_at(root, c"a", &a).expect("open");
    assert_eq!(fs::blob_of_file(&mut file, 9, &mut buf).expect("read").1, 5);
    let (mut file, _) = fs::open_file_at(root, c"a", &a).expect("open");
    assert!(fs::blob_of_file(&mut file, 1, &mut buf).expect("read").1 > 1);
    // A listing stops past its cap.
    let (names, complete) = fs::list_dir(root, 10).expect("list");
    assert!(complete);
    let mut names: Vec<_> = names.iter().map(|n| n.to_bytes().to_vec()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"fifo".to_vec(),
            b"link".to_vec()
        ]
    );
    let dir_fd = fs::open_root(&dir).expect("root");
    let (_, complete) = fs::list_dir(std::os::fd::AsFd::as_fd(&dir_fd), 3).expect("list");
    assert!(!complete);
    let _ = std::fs::remove_dir_all(&dir);
}

// The index, byte by byte.

/// Recompute an index's trailing checksum after an edit.
fn reseal(bytes: &mut [u8]) {
    use sha1::Digest;
    let end = bytes.len() - 20;
    let sum = sha1::Sha1::digest(&bytes[..end]);
    bytes[end..].copy_from_slice(&sum);
}

/// The offset of the first entry whose path is `path`.
fn entry_at(bytes: &[u8], path: &[u8]) -> usize {
    let mut needle = path.to_vec();
    needle.push(0);
    let name = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("entry");
    name - 62
}

fn refused(bytes: &[u8]) -> String {
    let err = index::parse(bytes).expect_err("refused");
    assert!(
        err.starts_with("the index is not as cordon seeded it: "),
        "{err}"
    );
    err
}

#[test]
fn the_index_cordon_seeds_parses_with_its_extensions() {
    let (f, _) = typical();
    let bytes = f.index_bytes();
    assert_eq!(&bytes[4..8], &[0, 0, 0, 2]);
    let entries = index::parse(&bytes).expect("parses");
    let paths: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    assert_eq!(
        paths,
        vec![
            "README",
            "a-b",
            "bin/run",
            "link",
            "src/deep/er/mod.rs",
            "src/deep/other.rs",
            "src/lib.rs",
            "src/up",
            "vendor/sub"
        ]
    );
    assert_eq!(
        hex::encode(entries[0].oid),
        hex::encode(fs::blob_of(b"hello\n"))
    );
    // Version 3 is taken too (git writes it only when an entry has extended flags, which are
    // refused; git reads a version 3 index without them).
    let mut v3 = bytes.clone();
    v3[7] = 3;
    reseal(&mut v3);
    assert_eq!(index::parse(&v3).expect("v3"), entries);
    f.git(&["update-index", "--skip-worktree", "README"]);
    f.git(&["update-index", "--no-skip-worktree", "README"]);
    let rewritten = f.index_bytes();
    assert!(index::parse(&rewritten).is_ok(), "{:?}", &rewritten[4..8]);
}

#[test]
fn an_index_cordon_did_not_seed_is_refused() {
    let (f, _) = typical();
    let good = f.index_bytes();
    let edit = |change: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = good.clone();
        change(&mut bytes);
        reseal(&mut bytes);
        bytes
    };
    // The checksum.
    let mut flipped = good.clone();
    flipped[30] ^= 1;
    assert!(refused(&flipped).contains("checksum"));
    assert!(refused(&good[..20]).contains("too short"));
    // The header.
    assert!(refused(&edit(&|b| b[0] = b'X')).contains("DIRC"));
    assert!(refused(&edit(&|b| b[7] = 4)).contains("version 4"));
    assert!(refused(&edit(&|b| b[7] = 1)).contains("version 1"));
    assert!(refused(&edit(
        &|b| b[8..12].copy_from_slice(&3_000_000u32.to_be_bytes())
    ))
    .contains("more than 2000000"));
    assert!(refused(&edit(&|b| b[8..12].copy_from_slice(&20u32.to_be_bytes()))).contains("entry"));
    let readme = entry_at(&good, b"README");
    let mode_at = readme + 24;
    let flags_at = readme + 60;
    // Modes.
    for mode in [0o100664u32, 0o040000, 0o100600, 0o120777] {
        let err = refused(&edit(&|b| {
            b[mode_at..mode_at + 4].copy_from_slice(&mode.to_be_bytes())
        }));
        assert!(err.contains(&format!("mode {mode:o}")), "{err}");
    }
    // Stages, assume-unchanged, extended flags in version 2, the name length.
    assert!(refused(&edit(&|b| b[flags_at] |= 0x10)).contains("stage 1"));
    assert!(refused(&edit(&|b| b[flags_at] |= 0x80)).contains("assume-unchanged"));
    assert!(refused(&edit(&|b| b[flags_at] |= 0x40)).contains("version 2"));
    assert!(refused(&edit(&|b| b[flags_at + 1] = 7)).contains("name length"));
    // Order and uniqueness: README and a-b swapped, then README twice.
    let a_b = entry_at(&good, b"a-b");
    let swapped = edit(&|b| {
        let first = b[readme..a_b].to_vec();
        let second_len = first.len(); // both 8-byte padded to the same length here
        let second = b[a_b..a_b + second_len].to_vec();
        b[readme..readme + second.len()].copy_from_slice(&second);
        b[readme + second.len()..readme + second.len() + first.len()].copy_from_slice(&first);
    });
    assert!(refused(&swapped).contains("not sorted"));
    let twice = edit(&|b| {
        let first = b[readme..a_b].to_vec();
        b[a_b..a_b + first.len()].copy_from_slice(&first);
    });
    assert!(refused(&twice).contains("not sorted"));
    // A path git never writes.
    let dotdot = edit(&|b| b[readme + 62..readme + 68].copy_from_slice(b"../RDM"));
    assert!(refused(&dotdot).contains("path"));
    let dotgit = edit(&|b| b[readme + 62..readme + 68].copy_from_slice(b".git/R"));
    assert!(refused(&dotgit).contains("path"));
    // Padding that is not NUL.
    let padding = edit(&|b| b[readme + 62 + 7] = b'x');
    assert!(refused(&padding).contains("padding"));
    // A required extension (lower-case signature), an extension running past the end.
    let tree = good
        .windows(4)
        .position(|w| w == b"TREE")
        .expect("a TREE extension");
    assert!(refused(&edit(&|b| b[tree] = b'l')).contains("required extension"));
    assert!(refused(&edit(
        &|b| b[tree + 4..tree + 8].copy_from_slice(&[0, 1, 0, 0])
    ))
    .contains("longer than the index"));
}

#[test]
fn skip_worktree_and_intent_to_add_are_refused() {
    let (f, _) = typical();
    f.git(&["update-index", "--skip-worktree", "README"]);
    assert!(refused(&f.index_bytes()).contains("skip-worktree"));
    f.git(&["update-index", "--no-skip-worktree", "README"]);
    assert!(index::parse(&f.index_bytes()).is_ok());
    f.file("later", "x");
    f.git(&["add", "-N", "later"]);
    assert!(refused(&f.index_bytes()).contains("intent-to-add"));
}

#[test]
fn a_path_both_an_entry_and_a_directory_is_refused() {
    let entry = |path: &str| index::Entry {
        path: path.as_bytes().to_vec(),
        oid: [0; 20],
        mode: Mode::File,
    };
    let err = Base::new(vec![entry("a"), entry("a-b"), entry("a/b")]).expect_err("refused");
    assert!(err.contains("a is both"), "{err}");
    assert!(Base::new(vec![entry("a-b"), entry("a/b"), entry("a0")]).is_ok());
}

#[test]
fn the_index_is_read_without_following_a_link() {
    let (f, base) = typical();
    std::fs::rename(f.meta().join("index"), f.meta().join("real-index")).expect("mv");
    symlink("real-index", f.meta().join("index")).expect("symlink");
    let err = check::check_tree(f.work(), &f.meta(), &base, &[]).expect_err("refused");
    assert!(err.starts_with("cannot read the index"), "{err}");
}

// The digest and the role.

#[test]
fn the_report_carries_the_digest_roles_metadata_digest() {
    let (f, base) = typical();
    let report = check::check(f.work(), &f.meta(), &base, &[]).expect("check");
    let digest = super::digest::tree(&f.meta()).expect("digest").0;
    assert!(digest.starts_with("sha256:"));
    assert_eq!(report.metadata_digest, digest);
    let snapshot =
        links::snapshot_links(f.work(), &f.meta(), &["link".to_owned()]).expect("snapshot");
    assert_eq!(snapshot.metadata_digest, digest);
}

/// The metadata digest taken beside a walk: the walk's answer with it, the walk's failure first
/// when both fail, and the digest's failure when only it fails.
#[test]
fn the_metadata_digest_beside_a_walk_answers_with_it_or_fails() {
    let (f, _) = typical();
    let digest = super::digest::tree(&f.meta()).expect("digest").0;
    let both = check::with_metadata_digest(&f.meta(), || Ok::<_, String>(7)).expect("both");
    assert_eq!(both, (7, digest));
    let missing = f.meta().join("missing");
    let failed = check::with_metadata_digest(&missing, || Err::<(), _>("the walk".to_owned()));
    assert_eq!(failed, Err("the walk".to_owned()));
    let failed = check::with_metadata_digest(&missing, || Ok::<_, String>(()));
    assert!(
        failed
            .as_ref()
            .is_err_and(|e| e.starts_with("the metadata digest: ")),
        "{failed:?}"
    );
}

#[test]
fn the_role_answers_one_json_document() {
    let (f, base) = typical();
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        super::run(&args, f.work(), &f.meta())
    };
    let add = r#"{"kind":"add","path":"README"}"#;
    let text = run(&["check", &base, add]).expect("check");
    assert!(!text.contains('\n'));
    let report: CheckReport = serde_json::from_str(&text).expect("a check report");
    assert_eq!(reasons(&report), vec![(Reason::DestinationTaken, "README")]);
    assert!(report.metadata_digest.starts_with("sha256:"));
    let text = run(&["snapshot-links", "link", "README"]).expect("snapshot");
    let snapshot: LinkSnapshot = serde_json::from_str(&text).expect("a link snapshot");
    assert_eq!(snapshot.links.len(), 2);
    for bad in [
        vec!["check"],
        vec!["check", &base, r#"{"kind":"move","path":"x"}"#],
        vec!["check", &base, r#"{"kind":"add","path":"x","extra":1}"#],
        vec!["check", &base, "not json"],
        vec!["snapshot-links", "../x"],
        vec!["digest"],
        vec![],
    ] {
        let failure = run(&bad).expect_err("fails");
        let document: ReaderFailure =
            serde_json::from_str(&super::failure_document(&failure)).expect("a failure");
        assert_eq!(document.failure, failure);
    }
    let many: Vec<String> = std::iter::once("snapshot-links".to_owned())
        .chain((0..=MAX_DECLARED_PATHS).map(|n| format!("p{n}")))
        .collect();
    assert!(super::run(&many, f.work(), &f.meta()).is_err());
    assert!(super::document(Ok("x".repeat(cordon_contract::tree::MAX_REPORT_BYTES + 1))).is_err());
    let long = super::failure_document(&"y".repeat(100_000));
    assert!(long.len() < 5000);
}

#[test]
fn reported_paths_are_bounded() {
    let long = "d/".repeat(600) + "f";
    let shown = check::report_path(long.as_bytes());
    assert_eq!(shown.len(), cordon_contract::tree::MAX_PATH_BYTES);
    assert!(shown.ends_with("..."));
    assert_eq!(check::report_path(b""), ".");
    assert_eq!(check::bounded("ééé".to_owned(), 5), "é...");
    let findings = Findings::default();
    findings.add(Reason::Untracked, b"x", "z".repeat(1000));
    let (listed, more) = findings.into_listed();
    assert_eq!(listed[0].detail.len(), check::MAX_DETAIL);
    assert_eq!(more, 0);
}

// The link snapshot.

fn snapshot(f: &Fixture, paths: &[&str]) -> Vec<DeclaredLink> {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    links::snapshot(f.work(), &paths).expect("snapshot").links
}

fn one(f: &Fixture, path: &str) -> DeclaredLink {
    snapshot(f, &[path]).remove(0)
}

fn blob(bytes: &[u8]) -> Option<String> {
    Some(hex::encode(fs::blob_of(bytes)))
}

/// A tree of links of every shape (no index needed).
fn linked() -> Fixture {
    let f = Fixture::new("links");
    f.file("f", "file\n")
        .executable("x", "#!\n")
        .file("d/g", "g\n")
        .file("d/e/h", "h\n")
        .file("withlink/real", "r\n")
        .link("withlink/inner", "../f")
        .link("to-file", "f")
        .link("to-dir", "d")
        .link("chain1", "chain2")
        .link("chain2", "to-file")
        .link("loop-a", "loop-b")
        .link("loop-b", "loop-a")
        .link("self", "self")
        .link("through", "to-dir/g")
        .link("to-withlink", "withlink")
        .link("meta", ".git/config")
        .link("meta-abs", "/work/.git")
        .link("meta-up", "d/../.git/HEAD")
        .link("meta-chain", "meta")
        .link("out-abs", "/etc/passwd")
        .link("out-prefix", "/workshop/f")
        .link("out-up", "../outside")
        .link("d/out-up2", "../../etc")
        .link("back-in", "../work/f")
        .link("abs-in", "/work/d/g")
        .link("abs-odd", "/work//./d/../f")
        .link("abs-double", "//work/f")
        .link("abs-up-in", "/work/../work/f")
        .link("chain-out", "out-up")
        .link("dangling-out", "nothing/../../x")
        .link("abs-root", "/work")
        .link("root", "/")
        .link("dangling", "nothing")
        .link("dangling-deep", "d/nope/deeper")
        .link("dangling-back", "nothing/../f")
        .link("file-slash", "f/")
        .link("file-more", "f/more")
        .link("dir-slash", "d/")
        .link("d/sibling", "g")
        .link("d/e/up", "../../x")
        .link("slash-dir", "d/e/");
    f
}

#[test]
fn a_link_to_a_file_or_directory_inside_records_what_is_there() {
    let f = linked();
    let link = one(&f, "to-file");
    assert_eq!(link.kind, EntryKind::Link);
    assert_eq!(link.target.as_deref(), Some("f"));
    assert_eq!(link.resolution, Some(Resolution::Inside));
    assert_eq!(link.resolved.as_deref(), Some("f"));
    assert!(!link.through_link);
    assert_eq!(link.target_state.len(), 1);
    assert_eq!(link.target_state[0].path, "f");
    assert_eq!(link.target_state[0].kind, EntryKind::File);
    assert_eq!(link.target_state[0].blob, blob(b"file\n"));

    let link = one(&f, "to-dir");
    assert_eq!(link.resolved.as_deref(), Some("d"));
    assert!(link.through_link, "d holds links");
    let state: Vec<(&str, EntryKind, Option<String>)> = link
        .target_state
        .iter()
        .map(|e| (e.path.as_str(), e.kind, e.blob.clone()))
        .collect();
    assert_eq!(
        state,
        vec![
            ("d", EntryKind::Dir, None),
            ("d/e", EntryKind::Dir, None),
            ("d/e/h", EntryKind::File, blob(b"h\n")),
            ("d/e/up", EntryKind::Link, blob(b"../../x")),
            ("d/g", EntryKind::File, blob(b"g\n")),
            ("d/out-up2", EntryKind::Link, blob(b"../../etc")),
            ("d/sibling", EntryKind::Link, blob(b"g")),
        ]
    );
    // A directory without a link beneath it.
    let link = one(&f, "slash-dir");
    assert_eq!(link.resolved.as_deref(), Some("d/e"));
    assert!(link.through_link, "d/e/up is a link");
    let link = one(&f, "d/sibling");
    assert_eq!(link.resolved.as_deref(), Some("d/g"));
    assert!(!link.through_link);
    let link = one(&f, "d/e/up");
    assert_eq!(link.resolved.as_deref(), Some("x"));
    assert_eq!(link.target_state[0].kind, EntryKind::Executable);
}

#[test]
fn chains_and_links_through_links_are_followed_and_marked() {
    let f = linked();
    let link = one(&f, "chain1");
    assert_eq!(link.resolution, Some(Resolution::Inside));
    assert_eq!(link.resolved.as_deref(), Some("f"));
    assert!(link.through_link);
    let link = one(&f, "through");
    assert_eq!(link.resolved.as_deref(), Some("d/g"));
    assert!(link.through_link);
    let link = one(&f, "to-withlink");
    assert_eq!(link.resolved.as_deref(), Some("withlink"));
    assert!(link.through_link);
    assert_eq!(
        link.target_state
            .iter()
            .map(|e| (e.path.as_str(), e.kind))
            .collect::<Vec<_>>(),
        vec![
            ("withlink", EntryKind::Dir),
            ("withlink/inner", EntryKind::Link),
            ("withlink/real", EntryKind::File),
        ]
    );
}

#[test]
fn loops_and_more_links_than_the_kernel_follows_are_loop() {
    let f = linked();
    for path in ["loop-a", "loop-b", "self"] {
        let link = one(&f, path);
        assert_eq!(link.resolution, Some(Resolution::Loop), "{path}");
        assert_eq!(link.resolved, None);
        assert!(link.target_state.is_empty());
    }
    // The declared link and 39 more resolve; one more is too many.
    let g = Fixture::new("hops");
    g.file("end", "e");
    let hops = cordon_contract::paths::MAX_LINK_HOPS;
    for n in 1..=hops + 1 {
        let target = if n == hops + 1 {
            "end".to_owned()
        } else {
            format!("l{}", n + 1)
        };
        g.link(format!("l{n}"), target);
    }
    let link = one(&g, "l2");
    assert_eq!(link.resolution, Some(Resolution::Inside), "{hops} links");
    assert_eq!(link.resolved.as_deref(), Some("end"));
    assert_eq!(one(&g, "l1").resolution, Some(Resolution::Loop));
}

#[test]
fn a_link_into_the_metadata_is_metadata() {
    let f = linked();
    for path in ["meta", "meta-abs", "meta-up", "meta-chain"] {
        let link = one(&f, path);
        assert_eq!(link.resolution, Some(Resolution::Metadata), "{path}");
        assert_eq!(link.resolved.as_deref(), Some(".git"), "{path}");
        assert!(link.target_state.is_empty());
    }
    assert!(one(&f, "meta-chain").through_link);
}

#[test]
fn a_link_out_of_the_tree_is_outside_and_back_into_it_inside() {
    let f = linked();
    // Leaving the tree at any step is outside, even where the kernel would come back in.
    for path in [
        "out-abs",
        "out-prefix",
        "out-up",
        "d/out-up2",
        "root",
        "back-in",
        "abs-double",
        "abs-up-in",
        "chain-out",
        "dangling-out",
    ] {
        let link = one(&f, path);
        assert_eq!(link.resolution, Some(Resolution::Outside), "{path}");
        assert_eq!(link.resolved, None, "{path}");
        assert!(link.target_state.is_empty());
    }
    assert!(one(&f, "chain-out").through_link);
    assert!(!one(&f, "out-up").through_link);
    for (path, resolved) in [("abs-in", "d/g"), ("abs-odd", "f"), ("dir-slash", "d")] {
        let link = one(&f, path);
        assert_eq!(link.resolution, Some(Resolution::Inside), "{path}");
        assert_eq!(link.resolved.as_deref(), Some(resolved), "{path}");
    }
    // The root itself: everything but the metadata.
    let link = one(&f, "abs-root");
    assert_eq!(link.resolved.as_deref(), Some("."));
    assert_eq!(link.target_state[0].path, ".");
    assert!(link
        .target_state
        .iter()
        .all(|e| !e.path.starts_with(".git")));
    assert!(link.target_state.iter().any(|e| e.path == "d/e/h"));
    assert!(link.through_link);
}

#[test]
fn a_link_to_nothing_is_dangling_with_the_path_it_would_reach() {
    let f = linked();
    for (path, resolved) in [
        ("dangling", "nothing"),
        ("dangling-deep", "d/nope/deeper"),
        ("dangling-back", "f"),
        ("file-slash", "f"),
        ("file-more", "f/more"),
    ] {
        let link = one(&f, path);
        assert_eq!(link.resolution, Some(Resolution::Dangling), "{path}");
        assert_eq!(link.resolved.as_deref(), Some(resolved), "{path}");
        assert!(link.target_state.is_empty());
    }
}

#[test]
fn a_declared_path_that_is_not_a_link_is_only_its_kind() {
    let f = linked();
    mkfifo(&f.at("fifo"));
    let kinds: Vec<(EntryKind, bool)> = snapshot(
        &f,
        &[
            "f",
            "x",
            "d",
            "fifo",
            "nothing",
            "f/beneath",
            "to-dir/g",
            "to-dir/e/h",
        ],
    )
    .into_iter()
    .map(|l| {
        assert_eq!(l.target, None);
        assert_eq!(l.resolution, None);
        assert!(l.target_state.is_empty());
        (l.kind, l.through_link)
    })
    .collect();
    assert_eq!(
        kinds,
        vec![
            (EntryKind::File, false),
            (EntryKind::Executable, false),
            (EntryKind::Dir, false),
            (EntryKind::Special, false),
            (EntryKind::Missing, false),
            (EntryKind::Missing, false),
            (EntryKind::Missing, true),
            (EntryKind::Missing, true),
        ]
    );
    // A link beneath a link is not reached without following one.
    let link = one(&f, "to-withlink/inner");
    assert_eq!((link.kind, link.through_link), (EntryKind::Missing, true));
}

#[test]
fn the_snapshot_fails_on_bad_paths_too_many_paths_or_targets() {
    let f = linked();
    let err = links::snapshot(f.work(), &["ok".into(), "../x".into()]).expect_err("bad");
    assert!(err.contains("not a clean relative path"), "{err}");
    assert!(links::snapshot(f.work(), &[".git/config".into()]).is_err());
    let many = vec!["f".to_owned(); MAX_DECLARED_PATHS + 1];
    assert!(links::snapshot(f.work(), &many).is_err());
    // Recorded targets are counted over all declared paths.
    let g = Fixture::new("targets");
    g.dir("big");
    for n in 0..MAX_RECORDED_TARGETS / 2 {
        std::fs::write(g.at(format!("big/f{n}")), "").expect("write");
    }
    g.link("l", "big");
    assert!(links::snapshot(g.work(), &["l".into()]).is_ok());
    let err = links::snapshot(g.work(), &["l".into(), "l".into()]).expect_err("too many");
    assert_eq!(
        err,
        format!("l: more than {MAX_RECORDED_TARGETS} recorded targets")
    );
}
