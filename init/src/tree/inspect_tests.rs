//! `tree inspect` against real repositories, laid out as cordon seeds them (the fixture is
//! fixture.rs's: `git` builds each commit and index, gitlinks are empty directories, the metadata
//! is at `<root>/.git`, HEAD detached). The metadata digest is left out (it changes the process's
//! directory; tests.rs covers it for every role).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cordon_contract::audit::{
    Change, IgnoreFile, IgnoreRules, InspectReport, Kind, Side, MAX_CHANGES, MAX_IGNORE_FILES,
    MAX_IGNORE_RULES_BYTES,
};
use cordon_contract::tree::{
    EntryKind, Reason, Resolution, MAX_DECLARED_PATHS, MAX_PATH_BYTES, MAX_RECORDED_TARGETS,
};

use super::{fs, inspect};

use super::fixture::{chmod, mkfifo, Fixture, GITLINK_OID};

impl Fixture {
    fn inspect_with(&self, base: &str, rules: &IgnoreRules, declared: &[&str]) -> InspectReport {
        let declared: Vec<String> = declared.iter().map(|d| d.to_string()).collect();
        inspect::inspect_tree(&self.root, &self.meta(), base, rules, &declared)
            .expect("inspect runs")
    }

    fn inspect(&self, base: &str) -> InspectReport {
        self.inspect_with(base, &IgnoreRules::default(), &[])
    }
}

fn rules(files: &[(&str, &str)]) -> IgnoreRules {
    IgnoreRules {
        files: files
            .iter()
            .map(|(dir, text)| IgnoreFile {
                dir: dir.to_string(),
                text: text.to_string(),
            })
            .collect(),
    }
}

fn blob(bytes: &[u8]) -> Option<String> {
    Some(hex::encode(fs::blob_of(bytes)))
}

fn file(kind: Kind, content: &str) -> Side {
    Side {
        kind,
        blob: blob(content.as_bytes()),
        size: Some(content.len() as u64),
        target: None,
    }
}

/// Base's side: no size.
fn was(kind: Kind, content: &str) -> Side {
    Side {
        kind,
        blob: blob(content.as_bytes()),
        size: None,
        target: None,
    }
}

fn link_side(target: &str) -> Side {
    Side {
        kind: Kind::Link,
        blob: blob(target.as_bytes()),
        size: None,
        target: Some(target.to_owned()),
    }
}

fn bare(kind: Kind) -> Side {
    Side {
        kind,
        blob: None,
        size: None,
        target: None,
    }
}

fn change(path: &str, old: Option<Side>, new: Option<Side>) -> Change {
    Change {
        path: path.to_owned(),
        old,
        new,
        ignored: false,
        link_target_traverses_link: None,
    }
}

fn paths(report: &InspectReport) -> Vec<&str> {
    report.changes.iter().map(|c| c.path.as_str()).collect()
}

fn find<'a>(report: &'a InspectReport, path: &str) -> &'a Change {
    report
        .changes
        .iter()
        .find(|c| c.path == path)
        .unwrap_or_else(|| panic!("no change at {path}: {:?}", paths(report)))
}

fn reasons(report: &InspectReport) -> Vec<(Reason, &str)> {
    report
        .findings
        .iter()
        .map(|f| (f.reason, f.path.as_str()))
        .collect()
}

fn clean(report: &InspectReport) {
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(report.more, 0);
}

/// One of everything, seeded.
fn typical() -> (Fixture, String) {
    let mut f = Fixture::new("typical");
    f.file("README", "hello\n")
        .executable("bin/run", "#!/bin/sh\necho hi\n")
        .file("src/lib.rs", "pub fn x() {}\n")
        .file("src/deep/er/mod.rs", "// deep\n")
        .file("src/deep/other.rs", "// other\n")
        .link("link", "README")
        .link("src/up", "../bin");
    f.gitlink("vendor/sub");
    let base = f.seed();
    (f, base)
}

#[test]
fn a_tree_as_seeded_has_no_change() {
    let (f, base) = typical();
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(report.head.as_deref(), Some(base.as_str()));
    assert_eq!(report.entries, 8);
    assert!(report.changes.is_empty());
    assert!(report.nested_gitlink_content.is_empty());
    assert_eq!(report.metadata_digest, "");
}

#[test]
fn edits_mode_changes_and_deletions_carry_both_sides() {
    let (f, base) = typical();
    f.file("README", "HELLO\n");
    chmod(&f.at("src/lib.rs"), 0o755);
    chmod(&f.at("bin/run"), 0o644);
    f.rm("src/deep").rm("vendor/sub");
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(
        report.changes,
        vec![
            change(
                "README",
                Some(was(Kind::File, "hello\n")),
                Some(file(Kind::File, "HELLO\n"))
            ),
            change(
                "bin/run",
                Some(was(Kind::Executable, "#!/bin/sh\necho hi\n")),
                Some(file(Kind::File, "#!/bin/sh\necho hi\n"))
            ),
            change(
                "src/deep/er/mod.rs",
                Some(was(Kind::File, "// deep\n")),
                None
            ),
            change(
                "src/deep/other.rs",
                Some(was(Kind::File, "// other\n")),
                None
            ),
            change(
                "src/lib.rs",
                Some(was(Kind::File, "pub fn x() {}\n")),
                Some(file(Kind::Executable, "pub fn x() {}\n"))
            ),
            change(
                "vendor/sub",
                Some(Side {
                    kind: Kind::Gitlink,
                    blob: Some(GITLINK_OID.to_owned()),
                    size: None,
                    target: None
                }),
                None
            ),
        ]
    );
}

#[test]
fn new_files_executables_fifos_sockets_and_directories_are_additions() {
    let (f, base) = typical();
    f.file("new.txt", "new\n")
        .executable("bin/tool", "#!/bin/sh\n")
        .dir("empty")
        .file("fresh/a/b.txt", "b")
        .file("fresh/c.txt", "c")
        .dir("fresh/a/nothing");
    mkfifo(&f.at("src/fifo"));
    let _socket = std::os::unix::net::UnixListener::bind(f.at("bin/socket")).expect("socket");
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(
        report.changes,
        vec![
            change("bin/socket", None, Some(bare(Kind::Socket))),
            change(
                "bin/tool",
                None,
                Some(file(Kind::Executable, "#!/bin/sh\n"))
            ),
            change("empty", None, Some(bare(Kind::Dir))),
            change("fresh/a/b.txt", None, Some(file(Kind::File, "b"))),
            change("fresh/a/nothing", None, Some(bare(Kind::Dir))),
            change("fresh/c.txt", None, Some(file(Kind::File, "c"))),
            change("new.txt", None, Some(file(Kind::File, "new\n"))),
            change("src/fifo", None, Some(bare(Kind::Fifo))),
        ]
    );
}

#[test]
fn new_links_say_whether_their_target_traverses_a_link() {
    let (f, base) = typical();
    f.dir("d")
        .file("d/x", "x")
        .link("d-link", "d")
        .link("plain", "README")
        .link("plain-dir", "src/deep")
        .link("dangling", "no/such/thing")
        .link("absolute-inside", "/work/README")
        .link("through", "d-link/x")
        .link("to-link", "link")
        .link("absolute", "/etc/passwd")
        .link("escaping", "../../outside")
        .link("metadata", ".git/config")
        .link("sub/metadata", "../.git")
        .link("loop-a", "loop-b")
        .link("loop-b", "loop-a");
    // A base link retargeted: both sides, and whether the new target traverses.
    f.rm("src/up").link("src/up", "../link");
    let report = f.inspect(&base);
    clean(&report);
    let traverses = |path: &str| {
        let c = find(&report, path);
        assert_eq!(
            c.new.as_ref().map(|s| s.kind),
            Some(Kind::Link),
            "{path} is a link"
        );
        c.link_target_traverses_link.expect("set on a new link")
    };
    for path in [
        "plain",
        "plain-dir",
        "dangling",
        "absolute-inside",
        "d-link",
    ] {
        assert!(!traverses(path), "{path}");
    }
    for path in [
        "through",
        "to-link",
        "absolute",
        "escaping",
        "metadata",
        "sub/metadata",
        "loop-a",
        "loop-b",
        "src/up",
    ] {
        assert!(traverses(path), "{path}");
    }
    assert_eq!(find(&report, "plain").new, Some(link_side("README")));
    let up = find(&report, "src/up");
    assert_eq!(up.old, Some(was(Kind::Link, "../bin")));
    assert_eq!(up.new, Some(link_side("../link")));
    // Not a link: none.
    assert_eq!(find(&report, "d/x").link_target_traverses_link, None);
}

#[test]
fn type_changes_delete_what_base_had_and_add_what_is_there() {
    let (f, base) = typical();
    // A directory of base now a file: every entry beneath it deleted, the file added.
    f.rm("src/deep").file("src/deep", "now a file");
    // A file of base now a directory with content: the file deleted, the content added.
    f.rm("README").file("README/inside", "in");
    // A file of base now an empty directory: one change.
    f.rm("src/lib.rs").dir("src/lib.rs");
    // A file of base now a link, a link now a file, a gitlink now a file.
    f.rm("bin/run").link("bin/run", "../README");
    f.rm("link").file("link", "README");
    f.rm("vendor/sub").file("vendor/sub", "x");
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(
        paths(&report),
        vec![
            "README",
            "README/inside",
            "bin/run",
            "link",
            "src/deep",
            "src/deep/er/mod.rs",
            "src/deep/other.rs",
            "src/lib.rs",
            "vendor/sub"
        ]
    );
    assert_eq!(
        find(&report, "README"),
        &change("README", Some(was(Kind::File, "hello\n")), None)
    );
    assert_eq!(
        find(&report, "README/inside"),
        &change("README/inside", None, Some(file(Kind::File, "in")))
    );
    assert_eq!(
        find(&report, "src/deep"),
        &change("src/deep", None, Some(file(Kind::File, "now a file")))
    );
    assert_eq!(find(&report, "src/deep/other.rs").new, None);
    assert_eq!(
        find(&report, "src/lib.rs"),
        &change(
            "src/lib.rs",
            Some(was(Kind::File, "pub fn x() {}\n")),
            Some(bare(Kind::Dir))
        )
    );
    let run = find(&report, "bin/run");
    assert_eq!(run.old.as_ref().map(|s| s.kind), Some(Kind::Executable));
    assert_eq!(run.new, Some(link_side("../README")));
    assert_eq!(run.link_target_traverses_link, Some(false));
    let link = find(&report, "link");
    assert_eq!(link.old, Some(was(Kind::Link, "README")));
    assert_eq!(link.new, Some(file(Kind::File, "README")));
    assert_eq!(link.link_target_traverses_link, None);
    let sub = find(&report, "vendor/sub");
    assert_eq!(sub.old.as_ref().map(|s| s.kind), Some(Kind::Gitlink));
    assert_eq!(sub.new, Some(file(Kind::File, "x")));
}

#[test]
fn a_gitlink_with_content_is_one_change_and_not_descended() {
    let (f, base) = typical();
    f.file("vendor/sub/a", "a").file("vendor/sub/deep/b", "b");
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(
        report.changes,
        vec![change(
            "vendor/sub",
            Some(Side {
                kind: Kind::Gitlink,
                blob: Some(GITLINK_OID.to_owned()),
                size: None,
                target: None
            }),
            Some(bare(Kind::Dir))
        )]
    );
    assert_eq!(report.nested_gitlink_content, vec!["vendor/sub"]);
}

#[test]
fn base_ignore_rules_mark_files_and_collapse_directories() {
    let (f, base) = typical();
    f.file("debug.log", "x")
        .file("keep.log", "x")
        .file("src/notes.tmp", "x")
        .file("src/deep/local.tmp", "x")
        .file("src/deep/kept.tmp", "x")
        .file("plain.txt", "x");
    for n in 0..50 {
        f.file(format!("target/debug/f{n}"), "x");
    }
    f.file("src/cache/a", "x").file("src/cache/b/c", "x");
    let rules = rules(&[
        ("", "*.log\n!keep.log\ntarget/\n"),
        ("src", "*.tmp\r\ncache/\n"),
        ("src/deep", "!kept.tmp\n"),
    ]);
    let report = f.inspect_with(&base, &rules, &[]);
    clean(&report);
    let ignored: Vec<(&str, bool)> = report
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.ignored))
        .collect();
    assert_eq!(
        ignored,
        vec![
            ("debug.log", true),
            ("keep.log", false),
            ("plain.txt", false),
            ("src/cache", true),
            ("src/deep/kept.tmp", false),
            ("src/deep/local.tmp", true),
            ("src/notes.tmp", true),
            ("target", true),
        ]
    );
    // An ignored directory is one entry, whatever is beneath it.
    assert_eq!(find(&report, "target").new, Some(bare(Kind::Dir)));
    assert_eq!(find(&report, "debug.log").new, Some(file(Kind::File, "x")));
}

#[test]
fn a_new_file_in_an_ignored_tracked_directory_is_ignored_and_negation_cannot_undo_it() {
    let f = Fixture::new("ignored-tracked");
    f.file("build/tracked", "t");
    let base = f.seed();
    f.file("build/new", "n").file("build/keep", "k");
    let report = f.inspect_with(&base, &rules(&[("", "build/\n!build/keep\n")]), &[]);
    clean(&report);
    assert!(report.changes.iter().all(|c| c.ignored), "{report:?}");
    assert_eq!(paths(&report), vec!["build/keep", "build/new"]);
}

#[test]
fn the_work_trees_own_gitignore_is_never_read_for_rules() {
    let (f, base) = typical();
    // The agent writes a .gitignore that would hide everything: only RULES_JSON counts.
    f.file(".gitignore", "*\n")
        .file("secret/a", "x")
        .file("b", "y");
    let report = f.inspect_with(&base, &rules(&[("", "b\n")]), &[]);
    clean(&report);
    let ignored: Vec<(&str, bool)> = report
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.ignored))
        .collect();
    assert_eq!(
        ignored,
        vec![(".gitignore", false), ("b", true), ("secret/a", false)]
    );
}

#[test]
fn git_parts_below_the_top_are_listed_like_any_entry_and_never_collapsed() {
    let (f, base) = typical();
    f.file("sub/.git/hooks/pre-commit", "#!/bin/sh\n")
        .file("x/.git", "gitdir: /elsewhere\n")
        .dir("y/.git");
    // Even rules that ignore `.git` collapse nothing.
    let report = f.inspect_with(&base, &rules(&[("", ".git\n")]), &[]);
    clean(&report);
    assert_eq!(
        paths(&report),
        vec!["sub/.git/hooks/pre-commit", "x/.git", "y/.git"]
    );
    assert_eq!(find(&report, "y/.git").new, Some(bare(Kind::Dir)));
    assert!(find(&report, "x/.git").ignored);
}

#[test]
fn max_changes_pass_and_one_more_refuses_the_whole_answer() {
    let f = Fixture::new("many");
    f.file("a", "a");
    let base = f.seed();
    for n in 0..MAX_CHANGES {
        let dir = f.at(format!("n/{}", n % 100));
        if n < 100 {
            std::fs::create_dir_all(&dir).expect("mkdir");
        }
        std::fs::write(dir.join(format!("{n}")), "").expect("write");
    }
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(report.changes.len(), MAX_CHANGES);
    f.file("one-more", "");
    let report = f.inspect(&base);
    assert_eq!(reasons(&report), vec![(Reason::TooManyChanges, ".")]);
    assert!(report.changes.is_empty());
    assert!(report.nested_gitlink_content.is_empty());
}

/// A path of `len` bytes as nested directories of at most 200-byte names; the last part is the
/// file.
fn long_path(len: usize) -> String {
    let mut path = String::new();
    while len - path.len() > 201 {
        path.push_str(&"d".repeat(200));
        path.push('/');
    }
    path.push_str(&"f".repeat(len - path.len()));
    assert_eq!(path.len(), len);
    path
}

#[test]
fn names_up_to_the_bound_pass_and_longer_ones_are_bad_names() {
    let (f, base) = typical();
    let ok = long_path(MAX_PATH_BYTES);
    f.file(&ok, "x");
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(paths(&report), vec![ok.as_str()]);
    let (f, base) = typical();
    let long = long_path(MAX_PATH_BYTES + 1);
    f.file(&long, "x");
    let report = f.inspect(&base);
    assert_eq!(report.findings.len(), 1);
    assert_eq!(report.findings[0].reason, Reason::BadName);
    assert!(report.changes.is_empty());
}

#[test]
fn names_not_utf8_or_with_format_characters_are_bad_names() {
    let (f, base) = typical();
    f.file(OsStr::from_bytes(b"bad\xff"), "x")
        .file("rtl\u{202e}txt.exe", "x")
        .file("fine", "x");
    f.link("target-bad", OsStr::from_bytes(b"to\xfe"));
    let report = f.inspect(&base);
    assert_eq!(
        reasons(&report),
        vec![
            (Reason::BadName, "bad\\xff"),
            (Reason::BadName, "rtl\u{202e}txt.exe"),
            (Reason::BadName, "target-bad"),
        ]
    );
    assert_eq!(report.findings[0].detail, "not UTF-8");
    assert_eq!(report.findings[1].detail, "holds U+202E");
    assert!(report.findings[2].detail.contains("target"));
    assert!(report.changes.is_empty());
}

#[test]
fn an_unchanged_name_is_never_checked() {
    let f = Fixture::new("unchecked");
    f.file(OsStr::from_bytes(b"old\xff"), "x")
        .file("old\u{202e}name", "y");
    let base = f.seed();
    let report = f.inspect(&base);
    clean(&report);
    assert!(report.changes.is_empty());
    // Deleted, it is a changed name.
    f.rm("old\u{202e}name");
    assert_eq!(
        reasons(&f.inspect(&base)),
        vec![(Reason::BadName, "old\u{202e}name")]
    );
}

#[test]
fn a_sparse_file_is_refused_without_being_read() {
    let (f, base) = typical();
    let started = std::time::Instant::now();
    let sparse = std::fs::File::create(f.at("huge")).expect("create");
    sparse.set_len(64 << 30).expect("a 64 GiB hole");
    drop(sparse);
    f.file("also-new", "x");
    let report = f.inspect(&base);
    assert_eq!(reasons(&report), vec![(Reason::Unreadable, "huge")]);
    assert!(
        report.findings[0]
            .detail
            .starts_with("sparse: size 68719476736, allocated "),
        "{}",
        report.findings[0].detail
    );
    assert!(report.changes.is_empty());
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn what_cannot_be_listed_is_unreadable() {
    let (f, base) = typical();
    f.file("closed/a", "x");
    chmod(&f.at("closed"), 0o000);
    let report = without_dac_override(|| f.inspect(&base));
    chmod(&f.at("closed"), 0o755);
    assert_eq!(reasons(&report), vec![(Reason::Unreadable, "closed")]);
    assert!(report.changes.is_empty());
}

#[test]
fn hard_links_are_two_names_with_equal_blobs() {
    let (f, base) = typical();
    f.file("one", "shared\n");
    std::fs::hard_link(f.at("one"), f.at("two")).expect("hard link");
    let report = f.inspect(&base);
    clean(&report);
    assert_eq!(paths(&report), vec!["one", "two"]);
    assert_eq!(report.changes[0].new, report.changes[1].new);
    assert_eq!(report.changes[0].new, Some(file(Kind::File, "shared\n")));
}

#[test]
fn changes_are_in_path_byte_order_and_the_same_every_time() {
    let (f, base) = typical();
    for name in ["a0", "a-b", "a.b", "a/b", "a/a", "Z", "é", "a b"] {
        f.file(name, name);
    }
    for n in 0..300 {
        f.file(format!("many/{n}"), &n.to_string());
    }
    let report = f.inspect(&base);
    clean(&report);
    let mut sorted = paths(&report);
    sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(paths(&report), sorted);
    assert_eq!(
        &paths(&report)[..7],
        &["Z", "a b", "a-b", "a.b", "a/a", "a/b", "a0"]
    );
    assert_eq!(f.inspect(&base), report);
}

#[test]
fn the_declared_links_are_snapshotted_and_too_many_targets_refused() {
    let (f, base) = typical();
    let report = f.inspect_with(&base, &IgnoreRules::default(), &["link", "README"]);
    clean(&report);
    assert_eq!(report.links.len(), 2);
    assert_eq!(report.links[0].kind, EntryKind::Link);
    assert_eq!(report.links[0].resolution, Some(Resolution::Inside));
    assert_eq!(report.links[1].kind, EntryKind::File);
    // More targets beneath a declared link than a snapshot records.
    for n in 0..=MAX_RECORDED_TARGETS / 100 {
        let dir = f.at(format!("big/{n}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for m in 0..100 {
            std::fs::write(dir.join(format!("{m}")), "").expect("write");
        }
    }
    f.link("to-big", "big");
    let report = f.inspect_with(&base, &IgnoreRules::default(), &["to-big"]);
    let found = reasons(&report);
    assert!(found.contains(&(Reason::TooManyTargets, ".")), "{found:?}");
    assert!(found.contains(&(Reason::TooManyChanges, ".")), "{found:?}");
    assert!(report.changes.is_empty());
}

#[test]
fn bad_rules_or_declared_paths_fail_the_inspection() {
    let (f, base) = typical();
    let run = |rules: &IgnoreRules, declared: &[String]| {
        inspect::inspect_tree(&f.root, &f.meta(), &base, rules, declared)
    };
    assert!(run(&rules(&[("../up", "x")]), &[]).is_err());
    assert!(run(&rules(&[("", "x"), ("", "y")]), &[]).is_err());
    assert!(run(&IgnoreRules::default(), &["../x".to_owned()]).is_err());
    assert!(
        inspect::inspect_tree(&f.root, &f.meta(), "HEAD", &IgnoreRules::default(), &[]).is_err()
    );
}

#[test]
fn the_arguments_are_bounded_like_the_other_roles() {
    let base = "a".repeat(40);
    let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let good = args(&[&base, r#"{"files":[{"dir":"","text":"*.o\n"}]}"#, "link"]);
    let (b, rules, declared) = super::inspect_args(&good).expect("parses");
    assert_eq!(b, base);
    assert_eq!(rules.files.len(), 1);
    assert_eq!(declared, &["link".to_owned()]);
    for bad in [
        args(&[]),
        args(&["HEAD", r#"{"files":[]}"#]),
        args(&[&base]),
        args(&[&base, "not json"]),
        args(&[&base, r#"{"files":[],"extra":1}"#]),
    ] {
        assert!(super::inspect_args(&bad).is_err(), "{bad:?}");
    }
    let big = format!(
        r#"{{"files":[{{"dir":"","text":"{}"}}]}}"#,
        "x".repeat(MAX_IGNORE_RULES_BYTES)
    );
    assert!(super::inspect_args(&args(&[&base, &big])).is_err());
    let many = serde_json::to_string(&IgnoreRules {
        files: (0..=MAX_IGNORE_FILES)
            .map(|n| IgnoreFile {
                dir: format!("d{n}"),
                text: String::new(),
            })
            .collect(),
    })
    .expect("json");
    assert!(super::inspect_args(&args(&[&base, &many])).is_err());
    let mut declared = args(&[&base, r#"{"files":[]}"#]);
    declared.extend((0..=MAX_DECLARED_PATHS).map(|n| format!("p{n}")));
    assert!(super::inspect_args(&declared).is_err());
    let failure = super::run(&args(&["inspect", "HEAD"]), Path::new("/"), Path::new("/"))
        .expect_err("a bad base fails before reading");
    assert!(failure.contains("commit id"));
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
