//! After a writable run, on the real engine: the change manifest lists every difference with the
//! blob id git would store (git itself is the oracle: the same changes made on a trusted copy and
//! staged with `git add -A` hold the same blobs at the same paths), refuses to answer in part,
//! and says when a person must look.

use std::path::Path;
use std::time::Duration;

use cordon::audit;
use cordon::task::StorageHandle;
use cordon::Error;
use cordon_contract::audit::{CommitReason, Kind, Manifest};
use cordon_contract::tree::{LinkSnapshot, Reason};
use cordon_tests::{owned, Owned, Repo};

use super::tree_check::{agent_script, finish, plant, seed};

const DEADLINE: Duration = Duration::from_secs(120);

/// One file operation, made the same way by the fake CLI in the container and by the test on a
/// trusted copy.
#[derive(Debug, Clone)]
enum Op {
    Write(&'static str, &'static [u8]),
    Delete(&'static str),
    Rename(&'static str, &'static str),
    Chmod(&'static str, u32),
    Symlink(&'static str, &'static str),
    Mkdir(&'static str),
}

fn script(ops: &[Op]) -> String {
    let json: Vec<serde_json::Value> = ops
        .iter()
        .map(|op| match op {
            Op::Write(p, bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => serde_json::json!({ "write": [p, text] }),
                Err(_) => serde_json::json!({ "bytes": [p, hex::encode(bytes)] }),
            },
            Op::Delete(p) => serde_json::json!({ "delete": p }),
            Op::Rename(a, b) => serde_json::json!({ "rename": [a, b] }),
            Op::Chmod(p, m) => serde_json::json!({ "chmod": [p, m] }),
            Op::Symlink(p, t) => serde_json::json!({ "symlink": [p, t] }),
            Op::Mkdir(p) => serde_json::json!({ "mkdir": p }),
        })
        .collect();
    serde_json::to_string(&json).unwrap()
}

fn apply_on_host(dir: &Path, ops: &[Op]) {
    use std::os::unix::fs::PermissionsExt;
    for op in ops {
        match op {
            Op::Write(p, bytes) => std::fs::write(dir.join(p), bytes).unwrap(),
            Op::Delete(p) => std::fs::remove_file(dir.join(p)).unwrap(),
            Op::Rename(a, b) => std::fs::rename(dir.join(a), dir.join(b)).unwrap(),
            Op::Chmod(p, m) => {
                std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(*m)).unwrap()
            }
            Op::Symlink(p, t) => std::os::unix::fs::symlink(t, dir.join(p)).unwrap(),
            Op::Mkdir(p) => std::fs::create_dir(dir.join(p)).unwrap(),
        }
    }
}

/// The base of the benign corpus.
fn corpus_repo() -> (Repo, String) {
    let repo = Repo::new("audit");
    repo.write("README.md", b"# audit\n", 0o644);
    repo.write("run.sh", b"#!/bin/sh\necho run\n", 0o755);
    repo.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    repo.write("src/gone.txt", b"gone\n", 0o644);
    repo.write("tools/build.txt", b"build\n", 0o644);
    repo.write("docs/guide.md", b"guide\n", 0o644);
    repo.write(".gitignore", b"*.log\nbuild/\n", 0o644);
    repo.symlink("link", "src/lib.rs");
    let head = repo.commit();
    (repo, head)
}

/// Edits, adds, deletes, renames, mode changes, links, binary and empty files, an ignored file,
/// nested directories and non-ASCII names.
fn corpus() -> Vec<Op> {
    vec![
        Op::Write("README.md", b"# audit\n\nedited\n"),
        Op::Write("new.txt", b"new\n"),
        Op::Delete("src/gone.txt"),
        Op::Rename("tools/build.txt", "tools/renamed.txt"),
        Op::Chmod("run.sh", 0o644),
        Op::Chmod("docs/guide.md", 0o755),
        Op::Symlink("new-link", "README.md"),
        Op::Delete("link"),
        Op::Symlink("link", "docs/guide.md"),
        Op::Write("blob.bin", b"\x00\x01\x02\xff\xfe binary\x00"),
        Op::Write("empty.txt", b""),
        Op::Write("debug.log", b"ignored but listed\n"),
        Op::Mkdir("deep"),
        Op::Mkdir("deep/er"),
        Op::Write("deep/er/file.rs", b"fn main() {}\n"),
        Op::Write("ünïcödé-名前.txt", "non-ASCII\n".as_bytes()),
    ]
}

fn no_links(storage: &StorageHandle) -> LinkSnapshot {
    LinkSnapshot {
        metadata_digest: storage.metadata_baseline.clone().unwrap(),
        links: vec![],
    }
}

async fn inspect(s: &Owned, storage: &StorageHandle) -> Result<Manifest, Error> {
    s.ctl
        .task(storage)
        .expect("a task")
        .inspect(&no_links(storage), DEADLINE)
        .await
}

/// The git oracle: the same changes on a trusted copy, staged by git (`git add -A`, and `-f` for
/// the ignored file the manifest lists), hold exactly the manifest's paths and blob ids; the same
/// tree inspected again gives the same digest.
#[tokio::test]
async fn the_manifest_is_what_git_stages_on_a_trusted_copy() {
    let s = owned("t-audit-oracle").await;
    let (repo, head) = corpus_repo();
    let storage = seed(&s, &repo, &head).await;
    let ops = corpus();
    agent_script(&s, &storage, &script(&ops)).await;

    let manifest = inspect(&s, &storage).await.expect("a manifest");
    assert!(!manifest.needs_person(), "{manifest:#?}");
    let again = inspect(&s, &storage).await.expect("again");
    assert_eq!(
        again.digest, manifest.digest,
        "the same tree, the same digest"
    );
    let ignored = manifest
        .changes
        .iter()
        .find(|c| c.path == "debug.log")
        .expect("the ignored file is listed");
    assert!(ignored.ignored);

    // The trusted copy: a clone of base, the same operations, git add -A (and -f for the ignored
    // file the manifest lists), git commit with the same identities and message.
    let copy = Repo::new("audit-oracle");
    copy.git(&["fetch", "--quiet", repo.dir.to_str().unwrap(), &head]);
    copy.git(&["checkout", "--quiet", &head]);
    apply_on_host(&copy.dir, &ops);
    copy.git(&["add", "-A"]);
    copy.git(&["add", "-f", "debug.log"]);
    // Every blob id the manifest holds is git's.
    for change in &manifest.changes {
        if let Some(new) = &change.new {
            if matches!(new.kind, Kind::File | Kind::Executable | Kind::Link) {
                let staged = copy.git(&["ls-files", "-s", "--", &change.path]);
                let oid = staged.split_whitespace().nth(1).unwrap_or_default();
                assert_eq!(new.blob.as_deref(), Some(oid), "{}", change.path);
            }
        }
    }
    // And nothing else: every path git staged differently from base is in the manifest.
    let staged = copy.git(&[
        "diff",
        "--cached",
        "--no-renames",
        "--name-only",
        "-z",
        &head,
    ]);
    let mut git_paths: Vec<&str> = staged.split('\0').filter(|p| !p.is_empty()).collect();
    git_paths.sort();
    let mut listed: Vec<&str> = manifest.changes.iter().map(|c| c.path.as_str()).collect();
    listed.sort();
    assert_eq!(listed, git_paths, "the manifest's paths are git's");
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "after the audit").await;
    assert_no_scratch();
    finish(s, &storage).await;
}

/// No audit scratch directory is left on the host.
fn assert_no_scratch() {
    let left: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cordon-audit-"))
        .collect();
    // Other tests run in parallel and hold theirs while they run: only this process's own
    // leftovers would pile up, so the count must stay small.
    assert!(left.len() < 16, "audit scratch directories left: {left:?}");
}

/// The same base and the same changes in two storages give the same manifest (and digest); an
/// untouched tree has no change.
#[tokio::test]
async fn the_same_changes_give_the_same_manifest_across_storages() {
    let s = owned("t-audit-determinism").await;
    let (repo, head) = corpus_repo();
    let ops = script(&corpus());
    let (one, two) = (seed(&s, &repo, &head).await, seed(&s, &repo, &head).await);
    let unchanged = inspect(&s, &one).await.expect("a manifest");
    assert!(
        unchanged.changes.is_empty() && !unchanged.needs_person(),
        "{unchanged:#?}"
    );
    agent_script(&s, &one, &ops).await;
    agent_script(&s, &two, &ops).await;
    let (m1, m2) = (
        inspect(&s, &one).await.unwrap(),
        inspect(&s, &two).await.unwrap(),
    );
    assert_eq!(m1, m2);
    assert_ne!(m1.digest, unchanged.digest);
    task_remove(&s, &two).await;
    finish(s, &one).await;
}

async fn task_remove(s: &Owned, storage: &StorageHandle) {
    cordon::task::remove(&s.ctl, storage)
        .await
        .expect("remove storage");
}

/// What a diff or a tree cannot show is listed as a change of its own kind: fifos, sockets, an
/// empty and an ignored directory (one entry for all beneath it), a planted `.git` directory and
/// a `gitdir:` file, content in a gitlink; hard links are two files with one blob; a new link
/// says whether its target passes through a link.
#[tokio::test]
async fn every_kind_of_entry_is_listed_as_itself() {
    let s = owned("t-audit-kinds").await;
    let (repo, head) = corpus_repo();
    let storage = seed(&s, &repo, &head).await;
    agent_script(
        &s,
        &storage,
        r#"[{"mkfifo":"pipe"},{"socket":"sock"},{"mkdir":"empty"},{"mkdir":"build"},
            {"write":["build/out.o","o"]},{"mkdir":"build/deep"},{"write":["build/deep/x","x"]},
            {"mkdir":"nested"},{"mkdir":"nested/.git"},{"write":["nested/.git/HEAD","ref: x"]},
            {"mkdir":"planted"},{"write":["planted/.git","gitdir: /elsewhere\n"]},
            {"write":["one.txt","same"]},{"hardlink":["two.txt","one.txt"]},
            {"symlink":["via-link","link"]},{"symlink":["plain-link","README.md"]},
            {"symlink":["out","/etc/passwd"]},{"symlink":["meta",".git/config"]}]"#,
    )
    .await;
    let manifest = inspect(&s, &storage).await.expect("a manifest");
    let kind = |path: &str| {
        let c = manifest
            .changes
            .iter()
            .find(|c| c.path == path)
            .unwrap_or_else(|| panic!("{path} not listed: {manifest:#?}"));
        (
            c.new.as_ref().map(|n| n.kind),
            c.ignored,
            c.link_target_traverses_link,
        )
    };
    assert_eq!(kind("pipe"), (Some(Kind::Fifo), false, None));
    assert_eq!(kind("sock"), (Some(Kind::Socket), false, None));
    assert_eq!(kind("empty"), (Some(Kind::Dir), false, None));
    assert_eq!(
        kind("build"),
        (Some(Kind::Dir), true, None),
        "ignored: one entry"
    );
    assert!(!manifest
        .changes
        .iter()
        .any(|c| c.path.starts_with("build/")));
    assert_eq!(kind("nested/.git/HEAD").0, Some(Kind::File));
    assert_eq!(kind("planted/.git").0, Some(Kind::File));
    let blob = |path: &str| {
        manifest
            .changes
            .iter()
            .find(|c| c.path == path)
            .and_then(|c| c.new.as_ref()?.blob.clone())
    };
    assert_eq!(blob("one.txt"), blob("two.txt"));
    assert_eq!(kind("via-link").2, Some(true));
    assert_eq!(kind("plain-link").2, Some(false));
    assert_eq!(kind("out").2, Some(true), "outside the work tree");
    assert_eq!(kind("meta").2, Some(true), "into the metadata");
    // Sorted by path, and the same again.
    let paths: Vec<&String> = manifest.changes.iter().map(|c| &c.path).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    finish(s, &storage).await;
}

/// Refused whole, never in part: more than 10,000 changes; a changed name of 1,025 bytes (1,024
/// passes) or with a bidirectional override; a sparse file of a terabyte.
#[tokio::test]
async fn an_answer_the_audit_cannot_give_whole_is_refused() {
    let s = owned("t-audit-refusals").await;
    let (repo, head) = corpus_repo();
    let storage = seed(&s, &repo, &head).await;
    let reasons = |r: Result<Manifest, Error>| match r {
        Err(Error::AuditRefused { findings, .. }) => findings
            .into_iter()
            .map(|f| (f.reason, f.path))
            .collect::<Vec<_>>(),
        other => panic!("not an audit refusal: {other:?}"),
    };
    // 1,024 bytes of path: four 254-byte directories, their separators and a 4-byte name; one
    // more byte is refused.
    let dir = "d".repeat(254);
    let at_bound = format!("{dir}/{dir}/{dir}/{dir}/abcd");
    assert_eq!(at_bound.len(), 1024);
    let entries: Vec<(String, u32, Option<&[u8]>)> = vec![(at_bound.clone(), 0o644, Some(b"x"))];
    plant_owned(&s, &storage, &entries).await;
    let manifest = inspect(&s, &storage).await.expect("1,024 bytes pass");
    assert!(manifest.changes.iter().any(|c| c.path == at_bound));
    let over = format!("{dir}/{dir}/{dir}/{dir}/abcde");
    plant_owned(&s, &storage, &[(over.clone(), 0o644, Some(b"x"))]).await;
    assert_eq!(
        reasons(inspect(&s, &storage).await).first().map(|r| r.0),
        Some(Reason::BadName)
    );
    finish(s, &storage).await;
}

/// Upload `entries` under /work as the storage's uid (the agent could have left them).
async fn plant_owned(s: &Owned, storage: &StorageHandle, entries: &[(String, u32, Option<&[u8]>)]) {
    let list: Vec<(&str, u32, Option<&[u8]>)> = entries
        .iter()
        .map(|(p, m, c)| (p.as_str(), *m, *c))
        .collect();
    if !list.is_empty() {
        plant(s, storage, "/work", &list).await;
    }
}

/// The reasons of an audit refusal, as (reason, path).
fn audit_refused(result: Result<Manifest, Error>) -> Vec<(Reason, String)> {
    match result {
        Err(Error::AuditRefused { findings, .. }) => {
            findings.into_iter().map(|f| (f.reason, f.path)).collect()
        }
        other => panic!("not an audit refusal: {other:?}"),
    }
}

/// More than 10,000 changes (10,000 pass), a name with a bidirectional override, and a sparse
/// file of a terabyte are each refused whole, with nothing listed, the same way on retry.
#[tokio::test]
async fn too_many_changes_a_hostile_name_and_a_sparse_file_are_refused() {
    let s = owned("t-audit-limits").await;
    let (repo, head) = corpus_repo();
    let (many, name, sparse) = (
        seed(&s, &repo, &head).await,
        seed(&s, &repo, &head).await,
        seed(&s, &repo, &head).await,
    );
    // 10,000 new files: exactly 10,000 changes pass.
    let files: Vec<(String, u32, Option<&[u8]>)> = (0..10_000)
        .map(|i| (format!("many/f{i:05}"), 0o644, Some(&b"x"[..])))
        .collect();
    plant_owned(&s, &many, &files).await;
    let manifest = inspect(&s, &many).await.expect("10,000 changes pass");
    assert_eq!(manifest.changes.len(), 10_000);
    plant_owned(
        &s,
        &many,
        &[("many/one-more".to_owned(), 0o644, Some(b"x"))],
    )
    .await;
    let refused = audit_refused(inspect(&s, &many).await);
    assert_eq!(
        refused.first(),
        Some(&(Reason::TooManyChanges, ".".to_owned()))
    );
    assert_eq!(
        audit_refused(inspect(&s, &many).await),
        refused,
        "the same on retry"
    );

    plant_owned(
        &s,
        &name,
        &[("evil\u{202e}txt.exe".to_owned(), 0o644, Some(b"x"))],
    )
    .await;
    assert_eq!(
        audit_refused(inspect(&s, &name).await),
        vec![(Reason::BadName, "evil\u{202e}txt.exe".to_owned())]
    );

    agent_script(&s, &sparse, r#"[{"sparse":["huge.bin",1099511627776]}]"#).await;
    assert_eq!(
        audit_refused(inspect(&s, &sparse).await),
        vec![(Reason::Unreadable, "huge.bin".to_owned())]
    );
    task_remove(&s, &many).await;
    task_remove(&s, &name).await;
    finish(s, &sparse).await;
}

/// A change to the metadata after seeding: the manifest says so and lists nothing else (no git
/// runs on it), and the task needs a person. That holds whether the metadata is read first (base's
/// ignore rules not yet known to the controller), beside the work tree (known from an earlier
/// inspection), or not at all (the controller keeps the copy an earlier inspection read: the
/// reader's digest alone says it changed, and a reader that cannot read it leaves the metadata
/// to be read); each gives the same manifest, and nothing is learned or kept from metadata that
/// is not as seeded.
#[tokio::test]
async fn a_metadata_change_lists_nothing_else() {
    let s = owned("t-audit-metadata").await;
    let (repo, head) = corpus_repo();
    let storage = seed(&s, &repo, &head).await;
    let baseline = storage.metadata_baseline.clone().expect("a baseline");
    agent_script(
        &s,
        &storage,
        r#"[{"write":["new.txt","new"]},{"write":["debug.log","ignored"]}]"#,
    )
    .await;
    assert!(!s.ctl.knows_ignore_rules(&baseline, &head));
    let first = inspect(&s, &storage).await.expect("a manifest");
    assert!(
        s.ctl.knows_ignore_rules(&baseline, &head) && s.ctl.keeps_metadata(&baseline),
        "an inspection of metadata as seeded keeps base's rules and the copy"
    );
    let since = std::time::SystemTime::now();
    let kept = inspect(&s, &storage).await.expect("a manifest");
    assert_eq!(
        metadata_reads(&s, &storage, since).await,
        0,
        "over the kept copy"
    );
    assert_eq!(first, kept, "the work tree alone, over the kept copy");
    s.ctl.forget_kept_metadata();
    let since = std::time::SystemTime::now();
    let beside = inspect(&s, &storage).await.expect("a manifest");
    assert_eq!(metadata_reads(&s, &storage, since).await, 1, "beside");
    assert_eq!(first, beside, "the metadata read beside the work tree");
    assert!(s.ctl.keeps_metadata(&baseline));
    assert!(!first.metadata_changed && first.changes.len() == 2);

    plant(
        &s,
        &storage,
        "/work/.git",
        &[("hooks/post-commit", 0o755, Some(b"#!/bin/sh\n"))],
    )
    .await;
    // The copy kept: the reader's digest of the storage's metadata says it changed.
    let manifest = inspect(&s, &storage).await.expect("a manifest");
    assert!(manifest.metadata_changed && manifest.needs_person());
    assert!(manifest.changes.is_empty() && manifest.link_target_changes.is_empty());
    // A change the reader cannot read: it fails, and the metadata read after it says why.
    plant(&s, &storage, "/work/.git", &[("sealed", 0o000, Some(b"x"))]).await;
    let since = std::time::SystemTime::now();
    let manifest = inspect(&s, &storage).await.expect("a manifest");
    assert_eq!(
        metadata_reads(&s, &storage, since).await,
        1,
        "after the reader"
    );
    assert!(manifest.metadata_changed && manifest.changes.is_empty());
    // Rules known, no copy kept: the metadata is read beside the work tree, and not kept.
    s.ctl.forget_kept_metadata();
    let manifest = inspect(&s, &storage).await.expect("a manifest");
    assert!(manifest.metadata_changed && manifest.changes.is_empty());
    assert!(
        !s.ctl.keeps_metadata(&baseline),
        "a copy kept of metadata that is not as seeded"
    );
    // A controller that knows nothing reads it first, and learns nothing from it.
    let fresh = cordon::Controller::new(s.engine.clone()).with_helper_image(&s.image);
    let manifest = fresh
        .task(&storage)
        .expect("a task")
        .inspect(&no_links(&storage), DEADLINE)
        .await
        .expect("a manifest");
    assert!(manifest.metadata_changed && manifest.changes.is_empty());
    assert!(
        !fresh.knows_ignore_rules(&baseline, &head) && !fresh.keeps_metadata(&baseline),
        "rules learned or a copy kept from metadata that is not as seeded"
    );
    finish(s, &storage).await;
}

/// How many times the engine archived something out of a container of `storage`'s allocation
/// since `since` (an inspection's only archive is the metadata's).
async fn metadata_reads(s: &Owned, storage: &StorageHandle, since: std::time::SystemTime) -> usize {
    let allocation = storage.storage().expect("storage").allocation.id;
    let filters = std::collections::HashMap::from([
        ("type".to_owned(), vec!["container".to_owned()]),
        ("event".to_owned(), vec!["archive-path".to_owned()]),
        (
            "label".to_owned(),
            vec![format!("{}={allocation}", cordon::labels::ALLOCATION)],
        ),
    ]);
    cordon_tests::engine_events(&s.engine, since, filters)
        .await
        .len()
}

/// A declared link whose target changed during the run, and content in a gitlink, are listed
/// (the task needs a person).
#[tokio::test]
async fn a_declared_link_retargeted_and_gitlink_content_need_a_person() {
    let s = owned("t-audit-person").await;
    let repo = Repo::new("audit-person");
    repo.write("docs/guide.md", b"guide\n", 0o644);
    repo.symlink("current", "docs");
    repo.git(&["add", "-A"]);
    let info = "160000,1234567890123456789012345678901234567890,vendor/sub";
    repo.git(&["update-index", "--add", "--cacheinfo", info]);
    repo.git(&["commit", "--quiet", "-m", "person"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    let storage = seed(&s, &repo, &head).await;
    let snapshot = s
        .ctl
        .task(&storage)
        .expect("a task")
        .snapshot_links(&["current".to_owned()], DEADLINE)
        .await
        .expect("a snapshot");
    // The run edits what the declared link's target holds.
    agent_script(&s, &storage, r#"[{"write":["docs/guide.md","edited"]}]"#).await;
    plant(
        &s,
        &storage,
        "/work/vendor/sub",
        &[("x.c", 0o644, Some(b"int x;"))],
    )
    .await;
    let manifest = s
        .ctl
        .task(&storage)
        .expect("a task")
        .inspect(&snapshot, DEADLINE)
        .await
        .expect("a manifest");
    assert_eq!(manifest.link_target_changes, ["current"]);
    assert_eq!(manifest.nested_gitlink_content, ["vendor/sub"]);
    assert!(manifest.needs_person());
    let gitlink = manifest
        .changes
        .iter()
        .find(|c| c.path == "vendor/sub")
        .expect("one change");
    assert_eq!(gitlink.old.as_ref().map(|o| o.kind), Some(Kind::Gitlink));
    assert!(!manifest
        .changes
        .iter()
        .any(|c| c.path.starts_with("vendor/sub/")));
    finish(s, &storage).await;
}

const AUTHOR: &str = "Ada Agent <ada@example.org> 1700000000 +0000";
const COMMITTER: &str = "cordon <cordon@example.org> 1700000100 +0000";

fn request(storage: &StorageHandle, digest: &str, bundle: &Path) -> audit::CommitRequest {
    audit::CommitRequest {
        snapshot: no_links(storage),
        digest: digest.to_owned(),
        message: "cordon: the agent's changes\n".to_owned(),
        trailers: vec![("Cordon-Attempt".to_owned(), "test".to_owned())],
        author: AUTHOR.to_owned(),
        committer: COMMITTER.to_owned(),
        bundle: bundle.to_owned(),
        allow_non_portable: false,
    }
}

fn bundle_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "cordon-test-bundle-{name}-{}.bundle",
        uuid::Uuid::new_v4().simple()
    ))
}

async fn commit(
    s: &Owned,
    storage: &StorageHandle,
    digest: &str,
    bundle: &Path,
) -> Result<audit::Committed, Error> {
    s.ctl
        .task(storage)
        .expect("a task")
        .commit(&request(storage, digest, bundle), Duration::from_secs(300))
        .await
}

/// git's own commit of `copy`'s index, with the test's identities and `message`.
fn commit_as_git(copy: &Repo, message: &str) -> String {
    use std::io::Write;
    let tree = copy.git(&["write-tree"]);
    let parent = copy.git(&["rev-parse", "HEAD"]);
    let mut child = std::process::Command::new("git")
        .current_dir(&copy.dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &copy.dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Ada Agent")
        .env("GIT_AUTHOR_EMAIL", "ada@example.org")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_NAME", "cordon")
        .env("GIT_COMMITTER_EMAIL", "cordon@example.org")
        .env("GIT_COMMITTER_DATE", "1700000100 +0000")
        .args(["commit-tree", &tree, "-p", &parent, "-F", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git commit-tree");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(message.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The commit is what git commits on a trusted copy with the same changes, identities, message
/// and trailers (the same commit id); the bundle has one ref, `refs/heads/cordon`, at head, with
/// base its prerequisite, and a fresh clone of base fetches it with `transfer.fsckObjects`;
/// committing again gives the same id; an untouched tree makes no commit and no bundle.
#[tokio::test]
async fn the_commit_is_what_git_commits_on_a_trusted_copy() {
    let s = owned("t-audit-commit").await;
    let (repo, head) = corpus_repo();
    let storage = seed(&s, &repo, &head).await;
    let untouched = inspect(&s, &storage).await.expect("a manifest");
    let none = bundle_path("none");
    let empty = commit(&s, &storage, &untouched.digest, &none)
        .await
        .expect("no commit");
    assert!(
        empty.unchanged && empty.head == head && !none.exists(),
        "{empty:?}"
    );

    let ops = corpus();
    agent_script(&s, &storage, &script(&ops)).await;
    let manifest = inspect(&s, &storage).await.expect("a manifest");
    let copy = Repo::new("audit-commit-oracle");
    copy.git(&["fetch", "--quiet", repo.dir.to_str().unwrap(), &head]);
    copy.git(&["checkout", "--quiet", &head]);
    apply_on_host(&copy.dir, &ops);
    copy.git(&["add", "-A"]);
    copy.git(&["add", "-f", "debug.log"]);
    let oracle = commit_as_git(
        &copy,
        "cordon: the agent's changes\n\nCordon-Attempt: test\n",
    );

    let bundle = bundle_path("commit");
    let committed = commit(&s, &storage, &manifest.digest, &bundle)
        .await
        .expect("the commit");
    assert!(!committed.unchanged);
    assert_eq!(committed.head, oracle, "git's commit of the trusted copy");
    let fresh = Repo::new("audit-fresh");
    fresh.git(&["fetch", "--quiet", repo.dir.to_str().unwrap(), &head]);
    let b = bundle.to_str().unwrap();
    assert_eq!(
        fresh.git(&["bundle", "list-heads", b]),
        format!("{oracle} refs/heads/cordon")
    );
    fresh.git(&["bundle", "verify", "--quiet", b]);
    fresh.git(&[
        "-c",
        "transfer.fsckObjects=true",
        "fetch",
        "--quiet",
        b,
        "refs/heads/cordon:refs/heads/got",
    ]);
    assert_eq!(fresh.git(&["rev-parse", "refs/heads/got"]), oracle);

    let second = bundle_path("commit-2");
    let again = commit(&s, &storage, &manifest.digest, &second)
        .await
        .expect("again");
    assert_eq!(
        again.head, committed.head,
        "the same inputs, the same commit"
    );
    // An existing bundle path is never overwritten.
    let taken = commit(&s, &storage, &manifest.digest, &bundle)
        .await
        .unwrap_err();
    assert_eq!(taken.id(), "invalid-input");
    let _ = std::fs::remove_file(&bundle);
    let _ = std::fs::remove_file(&second);
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "after the commits").await;
    finish(s, &storage).await;
}

/// The reasons of a commit refusal.
fn commit_refused(result: Result<audit::Committed, Error>) -> Vec<(CommitReason, String)> {
    match result {
        Err(Error::CommitRefused { findings }) => {
            findings.into_iter().map(|f| (f.reason, f.path)).collect()
        }
        other => panic!("not a commit refusal: {other:?}"),
    }
}

/// Whatever the audit said, the commit refuses what a tree must not hold, each with its reason:
/// `.git` aliases holding a hook, a symlinked `.gitmodules`, a case-fold collision with a link,
/// a fifo, a directory; a tree changed after the audit (the digest); and nothing is written.
#[tokio::test]
async fn the_commit_refuses_what_a_tree_must_not_hold() {
    let s = owned("t-audit-refuse").await;
    let (repo, head) = corpus_repo();
    let (hostile, later) = (seed(&s, &repo, &head).await, seed(&s, &repo, &head).await);
    agent_script(
        &s,
        &hostile,
        r#"[{"mkdir":".GIT"},{"mkdir":".GIT/hooks"},{"write":[".GIT/hooks/post-checkout","x"]},
            {"mkdir":"sub"},{"mkdir":"sub/.git"},{"write":["sub/.git/config","x"]},
            {"mkdir":"git~1"},{"write":["git~1/config","x"]},
            {"symlink":[".gitmodules","README.md"]},{"symlink":["readme.md","README.md"]},
            {"mkfifo":"pipe"},{"mkdir":"empty"}]"#,
    )
    .await;
    let manifest = inspect(&s, &hostile).await.expect("a manifest");
    let bundle = bundle_path("refused");
    let reasons = commit_refused(commit(&s, &hostile, &manifest.digest, &bundle).await);
    for want in [
        (CommitReason::GitPath, ".GIT/hooks/post-checkout"),
        (CommitReason::GitPath, "sub/.git/config"),
        (CommitReason::GitPath, "git~1/config"),
        (CommitReason::GitmodulesLink, ".gitmodules"),
        (CommitReason::CaseCollision, "readme.md"),
        (CommitReason::SpecialFile, "pipe"),
        (CommitReason::Directory, "empty"),
    ] {
        assert!(
            reasons.iter().any(|(r, p)| *r == want.0 && p == want.1),
            "{want:?} not in {reasons:?}"
        );
    }
    assert!(!bundle.exists());

    // The tree changed after the audit: the approved digest is not the inspection's.
    let approved = inspect(&s, &later).await.unwrap();
    agent_script(&s, &later, r#"[{"write":["late.txt","late"]}]"#).await;
    assert_eq!(
        commit_refused(commit(&s, &later, &approved.digest, &bundle).await),
        vec![(CommitReason::DigestMismatch, ".".to_owned())]
    );
    assert!(!bundle.exists());
    task_remove(&s, &later).await;
    finish(s, &hostile).await;
}

/// What a receiver's checkout would run or could not hold is refused (issue 20's second outside
/// review), each with its reason: links that leave the tree as the seeder would refuse them; names
/// that are one after Unicode normalisation and case folding (NFC and NFD twins, a twin of a name
/// base has, the CVE-2021-21300 link beside a directory holding a hook); directories git would
/// take for a repository, bare or not, at any depth; names Windows or macOS cannot hold (unless
/// the runner allows them); a hostile `.gitmodules` and an over-long `.gitattributes` line,
/// checked before anything is imported; and git fsck's own refusal of base's `.gitmodules`. The
/// export names the nested repositories and the special files it would refuse; nothing is written.
#[tokio::test]
async fn the_commit_refuses_what_a_receiver_would_run_or_could_not_hold() {
    let s = owned("t-audit-receiver").await;
    let repo = Repo::new("audit-receiver");
    repo.write("README.md", b"# receiver\n", 0o644);
    repo.write("r\u{e9}sum\u{e9}.md", b"base's, composed\n", 0o644);
    repo.write("tools/build.txt", b"build\n", 0o644);
    let head = repo.commit();
    let hostile_base = Repo::new("audit-receiver-fsck");
    hostile_base.write(
        ".gitmodules",
        b"[submodule \"x\"]\n\tpath = x\n\turl = ./x\n\tupdate = !touch /tmp/cordon-pwned\n",
        0o644,
    );
    let hostile_head = hostile_base.commit();
    let (paths, contents, portable, fsck) = (
        seed(&s, &repo, &head).await,
        seed(&s, &repo, &head).await,
        seed(&s, &repo, &head).await,
        seed(&s, &hostile_base, &hostile_head).await,
    );
    let bundle = bundle_path("receiver");

    agent_script(
        &s,
        &paths,
        r##"[{"symlink":["escape-link","../../../../etc/passwd"]},
            {"symlink":["proc-link","/proc/self/environ"]},
            {"write":["caf\u00e9","nfc\n"]},{"write":["cafe\u0301","nfd\n"]},
            {"write":["re\u0301sume\u0301.md","a twin of base's\n"]},
            {"symlink":["d\u00e9j\u00e0",".git/hooks"]},{"mkdir":"de\u0301ja\u0300"},
            {"write":["de\u0301ja\u0300/post-checkout","#!/bin/sh\n"]},
            {"chmod":["de\u0301ja\u0300/post-checkout",493]},
            {"mkdir":"evil"},{"write":["evil/HEAD","ref: refs/heads/main\n"]},
            {"mkdir":"evil/objects"},{"write":["evil/objects/keep",""]},
            {"mkdir":"evil/refs"},{"write":["evil/refs/keep",""]},
            {"write":["evil/config","[core]\n\tworktree = ..\n\tfsmonitor = touch /tmp/cordon-pwned\n"]},
            {"mkdir":"tools/evil.git"},
            {"write":["tools/evil.git/HEAD","0000000000000000000000000000000000000000\n"]},
            {"write":["tools/evil.git/commondir","../../../.."]},
            {"write":["CON","x"]},{"write":["aux.c","x"]},{"write":["NUL.txt","x"]},
            {"write":["COM1","x"]},{"write":["LPT9.log","x"]},{"write":["CONIN$","x"]},
            {"write":["a.","x"]},{"write":["a ","x"]},{"write":["a:b","x"]}]"##,
    )
    .await;
    let manifest = inspect(&s, &paths).await.expect("a manifest");
    let reasons = commit_refused(commit(&s, &paths, &manifest.digest, &bundle).await);
    let mut wanted = vec![
        (CommitReason::LinkEscapes, "escape-link"),
        (CommitReason::LinkEscapes, "proc-link"),
        (CommitReason::CaseCollision, "caf\u{e9}"),
        (CommitReason::CaseCollision, "cafe\u{301}"),
        (CommitReason::CaseCollision, "re\u{301}sume\u{301}.md"),
        (CommitReason::CaseCollision, "d\u{e9}j\u{e0}"),
        (
            CommitReason::CaseCollision,
            "de\u{301}ja\u{300}/post-checkout",
        ),
        (CommitReason::NestedRepository, "evil"),
        (CommitReason::NestedRepository, "tools/evil.git"),
    ];
    for name in [
        "CON", "aux.c", "NUL.txt", "COM1", "LPT9.log", "CONIN$", "a.", "a ", "a:b",
    ] {
        wanted.push((CommitReason::NonPortable, name));
    }
    for want in &wanted {
        assert!(
            reasons.iter().any(|(r, p)| *r == want.0 && p == want.1),
            "{want:?} not in {reasons:?}"
        );
    }
    assert!(!bundle.exists());
    let export = s
        .ctl
        .task(&paths)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .expect("an export");
    for dir in ["evil", "tools/evil.git"] {
        let notice = format!("cordon: a nested repository {dir:?}");
        assert!(
            export.diff.contains(&notice),
            "{notice} not in {}",
            export.diff
        );
    }

    // Content git's fsck refuses, checked before anything is imported.
    let long_line = "a".repeat(4096);
    agent_script(
        &s,
        &contents,
        &format!(
            r##"[{{"write":[".gitmodules","[submodule \"../../escape\"]\n\tpath = -x\n\turl = ./x%0a\n[submodule \"ok\"]\n\tpath = ok\n\turl = -oProxyCommand=touch\n\tupdate = !touch /tmp/cordon-pwned\n"]}},
                {{"mkdir":"sub"}},{{"write":["sub/.gitattributes","{long_line}\n"]}}]"##
        ),
    )
    .await;
    let manifest = inspect(&s, &contents).await.expect("a manifest");
    let findings = match commit(&s, &contents, &manifest.digest, &bundle).await {
        Err(Error::CommitRefused { findings }) => findings,
        other => panic!("not a commit refusal: {other:?}"),
    };
    let at = |reason: CommitReason, path: &str| {
        findings
            .iter()
            .filter(|f| f.reason == reason && f.path == path)
            .count()
    };
    // The name, the path, both urls and the update command.
    assert_eq!(
        at(CommitReason::Gitmodules, ".gitmodules"),
        5,
        "{findings:?}"
    );
    assert_eq!(
        at(CommitReason::Gitattributes, "sub/.gitattributes"),
        1,
        "{findings:?}"
    );
    assert!(!bundle.exists());
    let export = s
        .ctl
        .task(&contents)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .expect("an export shows what the commit refuses");
    assert!(
        export
            .diff
            .contains("cordon: the commit refuses \"sub/.gitattributes\" (gitattributes:"),
        "{}",
        export.diff
    );

    // Names only Linux can hold: refused by default, committed when the runner allows them.
    agent_script(
        &s,
        &portable,
        r#"[{"write":["CON","x"]},{"write":["a:b","x"]}]"#,
    )
    .await;
    let manifest = inspect(&s, &portable).await.expect("a manifest");
    assert_eq!(
        commit_refused(commit(&s, &portable, &manifest.digest, &bundle).await),
        vec![
            (CommitReason::NonPortable, "CON".to_owned()),
            (CommitReason::NonPortable, "a:b".to_owned())
        ]
    );
    let mut allowed = request(&portable, &manifest.digest, &bundle);
    allowed.allow_non_portable = true;
    let committed = s
        .ctl
        .task(&portable)
        .expect("a task")
        .commit(&allowed, DEADLINE)
        .await
        .expect("a Linux-only commit");
    assert!(!committed.unchanged && bundle.exists(), "{committed:?}");
    let _ = std::fs::remove_file(&bundle);

    // git fsck refuses base's own `.gitmodules`: a refusal that needs a person, with git's words.
    agent_script(&s, &fsck, r#"[{"write":["new.txt","new\n"]}]"#).await;
    let manifest = inspect(&s, &fsck).await.expect("a manifest");
    let findings = match commit(&s, &fsck, &manifest.digest, &bundle).await {
        Err(Error::CommitRefused { findings }) => findings,
        other => panic!("not a commit refusal: {other:?}"),
    };
    assert!(
        findings.len() == 1
            && findings[0].reason == CommitReason::Fsck
            && findings[0].detail.contains("gitmodulesUpdate"),
        "{findings:?}"
    );
    assert!(!bundle.exists());
    for storage in [&contents, &portable, &fsck] {
        task_remove(&s, storage).await;
    }
    finish(s, &paths).await;
}

/// The diff export: a unified diff of what a diff can show, bounded at 1 MiB (`truncated`), with a
/// `cordon:` notice for each thing it cannot: a fifo, an ignored path, an untracked nested
/// repository, a file over 8 MiB, a file whose `ident` attribute changes what git would store;
/// refused when the metadata changed.
#[tokio::test]
async fn the_export_shows_the_diff_and_a_notice_for_what_it_cannot() {
    let s = owned("t-audit-export").await;
    let (repo, head) = corpus_repo();
    let (storage, big, meta) = (
        seed(&s, &repo, &head).await,
        seed(&s, &repo, &head).await,
        seed(&s, &repo, &head).await,
    );
    agent_script(
        &s,
        &storage,
        r##"[{"write":["README.md","# audit\n\nexported\n"]},{"mkfifo":"pipe"},
            {"write":["debug.log","ignored"]},{"mkdir":"nested"},{"mkdir":"nested/.git"},
            {"write":["nested/.git/HEAD","ref: x"]},
            {"write":[".gitattributes","*.id ident\n"]},{"write":["x.id","$Id$\n"]}]"##,
    )
    .await;
    let huge = vec![b'x'; 9 << 20];
    plant_owned(
        &s,
        &storage,
        &[("huge.txt".to_owned(), 0o644, Some(&huge[..]))],
    )
    .await;
    let export = s
        .ctl
        .task(&storage)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .expect("an export");
    assert!(!export.truncated, "{}", export.diff);
    assert!(export.diff.contains("+exported"), "{}", export.diff);
    for notice in [
        "cordon: a fifo or socket \"pipe\"",
        "cordon: an ignored untracked path \"debug.log\"",
        "cordon: an untracked nested repository \"nested\"",
        "cordon: a changed file over 8 MiB \"huge.txt\"",
        "cordon: \"x.id\" has the ident attribute",
    ] {
        assert!(
            export.diff.contains(notice),
            "{notice} not in {}",
            export.diff
        );
    }
    assert!(
        !export.diff.contains("+ignored"),
        "an ignored file is a notice only"
    );

    // More than 1 MiB of diff is cut, and says so.
    let lines: Vec<u8> = (0..40_000)
        .flat_map(|i| format!("line {i:06} of a long file\n").into_bytes())
        .collect();
    plant_owned(
        &s,
        &big,
        &[("long.txt".to_owned(), 0o644, Some(&lines[..]))],
    )
    .await;
    let cut = s
        .ctl
        .task(&big)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .expect("an export");
    assert!(
        cut.truncated && cut.diff.len() <= 1024 * 1024,
        "{}",
        cut.diff.len()
    );

    plant(&s, &meta, "/work/.git", &[("planted", 0o644, Some(b"x"))]).await;
    let refused = s
        .ctl
        .task(&meta)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .unwrap_err();
    assert_eq!(refused.id(), "audit-refused");
    task_remove(&s, &big).await;
    task_remove(&s, &meta).await;
    finish(s, &storage).await;
}

/// The blob at `path` of the commit a bundle carries, fetched into a fresh clone of base with
/// `transfer.fsckObjects`.
fn committed_blob(repo: &Repo, base: &str, bundle: &Path, path: &str) -> Vec<u8> {
    let fresh = Repo::new("audit-committed-blob");
    fresh.git(&["fetch", "--quiet", repo.dir.to_str().unwrap(), base]);
    fresh.git(&[
        "-c",
        "transfer.fsckObjects=true",
        "fetch",
        "--quiet",
        bundle.to_str().unwrap(),
        "refs/heads/cordon:refs/heads/got",
    ]);
    let out = std::process::Command::new("git")
        .current_dir(&fresh.dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["cat-file", "blob", &format!("refs/heads/got:{path}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{path}: {out:?}");
    out.stdout
}

/// The CR-in-a-submodule-path shape (CVE-2025-48384: `.gitmodules` naming `sub\r`, an entry at
/// `sub\r`, and `sub` a link to `.git/modules/sub/hooks`) is refused whole by the audit and by the
/// commit; without the CR entry, the link into the metadata is still refused by the commit, by
/// any spelling of `.git`; nothing is written.
#[tokio::test]
async fn the_cr_submodule_shape_with_a_link_into_hooks_is_refused() {
    let s = owned("t-audit-cr").await;
    let (repo, head) = corpus_repo();
    let (with_cr, link_only) = (seed(&s, &repo, &head).await, seed(&s, &repo, &head).await);
    let gitmodules =
        r#"{"write":[".gitmodules","[submodule \"sub\"]\n\tpath = \"sub\r\"\n\turl = ./x\n"]}"#;
    agent_script(
        &s,
        &with_cr,
        &format!(
            r#"[{gitmodules},{{"mkdir":"sub\r"}},{{"write":["sub\r/.git","gitdir: ../.git/modules/sub\n"]}},
                {{"symlink":["sub",".git/modules/sub/hooks"]}}]"#
        ),
    )
    .await;
    let refused = audit_refused(inspect(&s, &with_cr).await);
    assert!(
        refused
            .iter()
            .any(|(r, p)| *r == Reason::BadName && p.starts_with("sub")),
        "{refused:?}"
    );
    let bundle = bundle_path("cr");
    let at_commit = commit(&s, &with_cr, "sha256:unknown", &bundle)
        .await
        .unwrap_err();
    assert!(
        matches!(at_commit.id(), "audit-refused" | "commit-refused"),
        "{at_commit:?}"
    );
    assert!(!bundle.exists());

    agent_script(
        &s,
        &link_only,
        &format!(
            r#"[{gitmodules},{{"symlink":["sub",".git/modules/sub/hooks"]}},
                {{"symlink":["alias",".GIT/hooks"]}},{{"symlink":["short","git~1/hooks"]}},
                {{"symlink":["fine","README.md"]}}]"#
        ),
    )
    .await;
    let manifest = inspect(&s, &link_only).await.expect("a manifest");
    let sub = manifest.changes.iter().find(|c| c.path == "sub").unwrap();
    assert_eq!(
        sub.link_target_traverses_link,
        Some(true),
        "into the metadata"
    );
    let reasons = commit_refused(commit(&s, &link_only, &manifest.digest, &bundle).await);
    for path in ["sub", "alias", "short"] {
        assert!(
            reasons
                .iter()
                .any(|(r, p)| *r == CommitReason::GitPath && p == path),
            "{path} not refused: {reasons:?}"
        );
    }
    assert!(!reasons
        .iter()
        .any(|(_, p)| p == "fine" || p == ".gitmodules"));
    assert!(!bundle.exists());
    task_remove(&s, &link_only).await;
    finish(s, &with_cr).await;
}

/// Content is committed as read, never filtered: a `.gitattributes` that names a filter driver
/// and `ident` changes nothing the commit stores (an `$Id: ...$` that git's clean filter would
/// collapse stays as written); hard links are two files with one blob; the same changes in two
/// storages give the same diff and the same commit id.
#[tokio::test]
async fn attributes_filter_nothing_hard_links_commit_as_files_and_storages_agree() {
    let s = owned("t-audit-bytes").await;
    let (repo, head) = corpus_repo();
    let (one, two) = (seed(&s, &repo, &head).await, seed(&s, &repo, &head).await);
    let ops = r#"[{"write":[".gitattributes","*.c filter=evil\n*.id ident\n* text=auto eol=crlf\n"]},
        {"write":["x.id","$Id: 0123456789abcdef0123456789abcdef01234567 $\n"]},
        {"write":["y.c","int y;\n"]},{"hardlink":["z.c","y.c"]},
        {"write":["lf.txt","one\ntwo\n"]}]"#;
    agent_script(&s, &one, ops).await;
    agent_script(&s, &two, ops).await;
    let (m1, m2) = (
        inspect(&s, &one).await.unwrap(),
        inspect(&s, &two).await.unwrap(),
    );
    assert_eq!(m1.digest, m2.digest);
    let (d1, d2) = (
        s.ctl
            .task(&one)
            .expect("a task")
            .export_diff(DEADLINE)
            .await
            .expect("an export"),
        s.ctl
            .task(&two)
            .expect("a task")
            .export_diff(DEADLINE)
            .await
            .expect("an export"),
    );
    assert_eq!(d1.diff, d2.diff, "two storages, the same diff");
    assert_eq!(d1.digest, d2.digest);
    let blob = |path: &str| {
        m1.changes
            .iter()
            .find(|c| c.path == path)
            .and_then(|c| c.new.as_ref()?.blob.clone())
            .unwrap_or_else(|| panic!("{path} not listed"))
    };
    assert_eq!(blob("y.c"), blob("z.c"), "hard links: one blob");
    let (b1, b2) = (bundle_path("bytes-1"), bundle_path("bytes-2"));
    let c1 = commit(&s, &one, &m1.digest, &b1).await.expect("commit one");
    let c2 = commit(&s, &two, &m2.digest, &b2).await.expect("commit two");
    assert_eq!(c1.head, c2.head, "two storages, the same commit");
    assert_eq!(
        committed_blob(&repo, &head, &b1, "x.id"),
        b"$Id: 0123456789abcdef0123456789abcdef01234567 $\n",
        "no ident collapse"
    );
    assert_eq!(committed_blob(&repo, &head, &b1, "lf.txt"), b"one\ntwo\n");
    assert_eq!(committed_blob(&repo, &head, &b1, "z.c"), b"int y;\n");
    let _ = std::fs::remove_file(&b1);
    let _ = std::fs::remove_file(&b2);
    task_remove(&s, &two).await;
    finish(s, &one).await;
}

/// The export works on a handle recovery hands back once the caller sets the metadata baseline
/// it recorded at prepare (the same diff as on the original handle), and is refused without it.
#[tokio::test]
async fn the_export_works_on_a_recovery_handle_with_the_recorded_baseline() {
    let s = owned("t-audit-recovered").await;
    let (repo, head) = corpus_repo();
    let storage = seed(&s, &repo, &head).await;
    agent_script(
        &s,
        &storage,
        r##"[{"write":["README.md","# recovered\n"]}]"##,
    )
    .await;
    let original = s
        .ctl
        .task(&storage)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .expect("an export");
    let mut recovered =
        cordon::task::recover::recover_one(&s.engine, &s.owner, &storage.allocation)
            .await
            .expect("recovery")
            .expect("the storage is intact");
    assert_eq!(recovered.metadata_baseline, None, "recovery cannot know it");
    // Without its head and baseline a recovered handle makes no task: a typed refusal, once.
    let without = s.ctl.task(&recovered).unwrap_err();
    assert_eq!(without.id(), "handle-incomplete", "{without:?}");
    assert!(without.to_string().contains("no head"), "{without}");
    recovered.head = Some(head.clone());
    let without = s.ctl.task(&recovered).unwrap_err();
    assert_eq!(without.id(), "handle-incomplete", "{without:?}");
    assert!(
        without.to_string().contains("no metadata baseline"),
        "{without}"
    );
    recovered.metadata_baseline = storage.metadata_baseline.clone();
    let again = s
        .ctl
        .task(&recovered)
        .expect("a task")
        .export_diff(DEADLINE)
        .await
        .expect("an export on the recovered handle");
    assert_eq!(again.diff, original.diff);
    assert!(again.diff.contains("+# recovered"), "{}", again.diff);
    finish(s, &storage).await;
}
