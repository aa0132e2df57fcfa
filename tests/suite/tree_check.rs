//! Before a writable run, on the real engine: the pre-launch tree check refuses every tree that is
//! not exactly base's and every declared operation that does not fit, each reason with its path
//! and the same answer on retry; its one-shot capability serves one start over its own storage
//! and head; the declared-link snapshot resolves every link shape as the agent's kernel would;
//! and in an execute container from a checked tree nothing can be written beneath a gitlink, no
//! pinned directory moves, and the rest of /work stays writable (with each protection removed,
//! the probe reports exactly that breach).

use std::collections::BTreeSet;

use cordon::audit::{self, TreeCheck};
use cordon::invoke::{capture, start, ImageSource, Options, Request};
use cordon::task::{self, StorageHandle};
use cordon::{Error, Profile, ProfileSpec};
use cordon_contract::probe::ProbeReport;
use cordon_contract::tree::{EntryKind, OpKind, Operation, Reason, Resolution};
use cordon_contract::{paths, Id, Phase, Vendor};
use cordon_tests::{at_base, owned, prepare_request, Owned, Repo};
use std::time::{Duration, Instant};

const DEADLINE: Duration = audit::DEFAULT_DEADLINE;
/// Any commit id but the seeded one.
const OTHER: &str = "0123456789abcdef0123456789abcdef01234567";

/// A repository with files, an executable, a link, a directory and gitlinks at `gitlinks`.
fn tree_repo(gitlinks: &[&str]) -> (Repo, String) {
    let repo = Repo::new("tree");
    repo.write("README.md", b"# tree\n", 0o644);
    repo.write("run.sh", b"#!/bin/sh\n", 0o755);
    repo.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    repo.write("src/gone.txt", b"gone\n", 0o644);
    repo.write("tools/build.txt", b"build\n", 0o644);
    repo.write("secret.txt", b"secret\n", 0o644);
    repo.write("locked/inside.txt", b"inside\n", 0o644);
    repo.write(
        "probe/keep.txt",
        b"the probe makes its directories here\n",
        0o644,
    );
    repo.write(".gitignore", b"*.log\n", 0o644);
    repo.symlink("link", "src/lib.rs");
    repo.git(&["add", "-A"]);
    for path in gitlinks {
        let info = format!("160000,1234567890123456789012345678901234567890,{path}");
        repo.git(&["update-index", "--add", "--cacheinfo", &info]);
    }
    repo.git(&["commit", "--quiet", "-m", "tree"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    (repo, head)
}

pub(super) async fn seed(s: &Owned, repo: &Repo, head: &str) -> StorageHandle {
    task::prepare(&s.ctl, &prepare_request(&s.owner, repo, head))
        .await
        .expect("task storage")
}

async fn check(s: &Owned, storage: &StorageHandle, ops: &[Operation]) -> Result<TreeCheck, Error> {
    s.ctl
        .task(storage)
        .expect("a task")
        .check_tree(ops, DEADLINE)
        .await
}

/// The reasons of a refusal, as (reason, path).
fn refused(result: Result<TreeCheck, Error>) -> BTreeSet<(Reason, String)> {
    match result {
        Err(Error::TreeRefused { findings, more }) => {
            assert_eq!(more, 0, "{findings:?}");
            findings.into_iter().map(|f| (f.reason, f.path)).collect()
        }
        other => panic!("not a tree refusal: {other:?}"),
    }
}

fn set(items: &[(Reason, &str)]) -> BTreeSet<(Reason, String)> {
    items.iter().map(|(r, p)| (*r, (*p).to_owned())).collect()
}

fn op(kind: OpKind, path: &str, from: Option<&str>) -> Operation {
    Operation {
        kind,
        path: path.to_owned(),
        renamed_from: from.map(str::to_owned),
    }
}

/// Upload `entries` (path, mode, content; a `None` content is a directory) into the keeper at
/// `dir`, as the allocation's uid: what a previous attempt (or anything else writing the volume)
/// could have left.
pub(super) async fn plant(
    s: &Owned,
    storage: &StorageHandle,
    dir: &str,
    entries: &[(&str, u32, Option<&[u8]>)],
) {
    let storage = storage.storage().unwrap();
    let mut archive = cordon::archive::Archive::in_memory(storage.allocation.uid.get(), "planted");
    for (path, mode, content) in entries {
        match content {
            Some(data) => archive.file(path, *mode, data).unwrap(),
            None => archive.dir(format!("{path}/"), *mode).unwrap(),
        }
    }
    let tar = archive.finish().unwrap();
    storage.upload(&s.engine, dir, tar).await.expect("upload");
}

/// Run the fake vendor CLI's file script in an execute invocation over a checked tree: what an
/// agent's attempt leaves behind.
pub(super) async fn agent_script(s: &Owned, storage: &StorageHandle, script: &str) {
    let request = Request {
        phase: Phase::Execute,
        vendor: Vendor::Claude,
        prompt: format!("cordon-fake:script {script}"),
        schema: None,
        referenced_code_hash: "code".to_owned(),
        deadline: Instant::now() + Duration::from_secs(60),
        network_allowlist: vec![],
        attempt: format!(
            "script-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        storage: storage.clone(),
        tree_check: Some(check(s, storage, &[]).await.expect("a clean tree")),
    };
    let handle = start(
        &s.ctl,
        capture(&s.ctl, request).unwrap(),
        None,
        Options::new(ImageSource::Id(s.image.clone())),
    )
    .await
    .expect("start");
    let result = handle.settled().await;
    assert!(
        result
            .answer
            .as_deref()
            .is_some_and(|a| a.starts_with("script: ")),
        "{result:#?}"
    );
}

pub(super) async fn finish(s: Owned, storage: &StorageHandle) {
    task::remove(&s.ctl, storage).await.expect("remove storage");
    s.finish().await;
}

/// A freshly seeded tree is base's: the check passes, lists every gitlink in index order and
/// pins every directory above the nested ones; checking again passes again; and the reader's
/// container is gone.
#[tokio::test]
async fn a_seeded_tree_passes_with_its_gitlinks_and_pins() {
    let s = owned("t-tree-clean").await;
    let (repo, head) = tree_repo(&["a/b/sub", "top"]);
    let storage = seed(&s, &repo, &head).await;
    let checked = check(&s, &storage, &[]).await.expect("a seeded tree");
    assert_eq!(checked.gitlinks, ["a/b/sub", "top"]);
    assert_eq!(checked.pins, ["a", "a/b"]);
    assert_eq!(checked.head, head);
    assert_eq!(checked.allocation, storage.allocation);
    assert_eq!(
        Some(&checked.metadata_digest),
        storage.metadata_baseline.as_ref()
    );
    // 10 files and links, 2 gitlinks.
    assert_eq!(checked.entries, 12);
    let again = check(&s, &storage, &[]).await.expect("again");
    assert_ne!(again.id, checked.id);
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "after the checks").await;
    finish(s, &storage).await;
}

/// A gitlink directory that holds anything (a pre-populated nested checkout) is refused, the
/// same way every time.
#[tokio::test]
async fn a_pre_populated_nested_checkout_is_refused() {
    let s = owned("t-tree-nested").await;
    let (repo, head) = tree_repo(&["a/b/sub", "top"]);
    let storage = seed(&s, &repo, &head).await;
    plant(
        &s,
        &storage,
        "/work/a/b/sub",
        &[
            (".git", 0o755, None),
            (".git/HEAD", 0o644, Some(b"ref: refs/heads/main\n")),
            ("lib.c", 0o644, Some(b"int x;\n")),
        ],
    )
    .await;
    plant(&s, &storage, "/work/top", &[("x", 0o644, Some(b"x"))]).await;
    let want = set(&[
        (Reason::GitlinkContent, "a/b/sub"),
        (Reason::GitlinkContent, "top"),
    ]);
    assert_eq!(refused(check(&s, &storage, &[]).await), want);
    assert_eq!(
        refused(check(&s, &storage, &[]).await),
        want,
        "the same on retry"
    );
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "after the refusals").await;
    finish(s, &storage).await;
}

/// Everything an attempt can leave in the work tree is a reason, each with its path: changed
/// content, mode and type, a missing file, untracked and ignored entries (an empty directory, a
/// fifo, a symlinked parent of an add destination, names that are no UTF-8 or hold a line break,
/// quoted), and what the reader cannot open.
#[tokio::test]
async fn a_restart_is_refused_for_every_change_the_last_attempt_left() {
    let s = owned("t-tree-restart").await;
    let (repo, head) = tree_repo(&[]);
    let storage = seed(&s, &repo, &head).await;
    agent_script(
        &s,
        &storage,
        r#"[{"write":["README.md","changed\n"]},{"chmod":["run.sh",420]},
            {"delete":"src/gone.txt"},{"delete":"tools/build.txt"},{"rmdir":"tools"},
            {"write":["tools","now a file"]},{"symlink":["newdir","src"]},
            {"write":["debug.log","ignored"]},{"mkdir":"empty"},{"mkfifo":"pipe"},
            {"chmod":["secret.txt",0]},{"chmod":["locked",0]},
            {"delete":"link"},{"symlink":["link","README.md"]}]"#,
    )
    .await;
    // Names the agent could write that are no UTF-8, or hold a line break: listed quoted.
    {
        use std::os::unix::ffi::OsStrExt;
        let handle = storage.storage().unwrap();
        let mut archive =
            cordon::archive::Archive::in_memory(handle.allocation.uid.get(), "odd names");
        for name in [&b"bad\xffname"[..], b"line\nbreak"] {
            archive
                .file(std::ffi::OsStr::from_bytes(name), 0o644, b"x")
                .unwrap();
        }
        let tar = archive.finish().unwrap();
        handle
            .upload(&s.engine, paths::WORK, tar)
            .await
            .expect("upload");
    }
    let add_through_link = [op(OpKind::Add, "newdir/new.rs", None)];
    let want = set(&[
        (Reason::ContentChanged, "README.md"),
        (Reason::ModeChanged, "run.sh"),
        (Reason::Missing, "src/gone.txt"),
        (Reason::TypeChanged, "tools"),
        (Reason::Untracked, "newdir"),
        (Reason::Untracked, "debug.log"),
        (Reason::Untracked, "empty"),
        (Reason::Untracked, "pipe"),
        (Reason::Unreadable, "secret.txt"),
        (Reason::Unreadable, "locked"),
        (Reason::ContentChanged, "link"),
        (Reason::Untracked, "bad\\xffname"),
        (Reason::Untracked, "line\nbreak"),
    ]);
    assert_eq!(refused(check(&s, &storage, &add_through_link).await), want);
    assert_eq!(refused(check(&s, &storage, &add_through_link).await), want);
    finish(s, &storage).await;
}

/// Each declared operation must fit base's tree: an add or rename destination free, a source a
/// file or symlink (never a gitlink or a directory), nothing beneath a file, link or gitlink, a
/// clean path; operations that fit pass.
#[tokio::test]
async fn declared_operations_must_fit_base() {
    let s = owned("t-tree-ops").await;
    let (repo, head) = tree_repo(&["vendor/mod"]);
    let storage = seed(&s, &repo, &head).await;
    let fits = [
        op(OpKind::Add, "new/dir/file.rs", None),
        op(OpKind::Edit, "README.md", None),
        op(OpKind::Edit, "link", None),
        op(OpKind::Delete, "src/lib.rs", None),
        op(OpKind::Rename, "docs/README.md", Some("run.sh")),
    ];
    check(&s, &storage, &fits)
        .await
        .expect("operations that fit");
    let bad = [
        op(OpKind::Add, "README.md", None),
        op(OpKind::Rename, "src/lib.rs", Some("README.md")),
        op(OpKind::Edit, "vendor/mod", None),
        op(OpKind::Rename, "elsewhere", Some("vendor/mod")),
        op(OpKind::Delete, "src", None),
        op(OpKind::Edit, "missing.txt", None),
        op(OpKind::Add, "run.sh/child", None),
        op(OpKind::Add, "vendor/mod/inside", None),
        op(OpKind::Add, "link/x", None),
        op(OpKind::Add, "../escape", None),
        op(OpKind::Add, ".git/hooks/pre-commit", None),
        op(OpKind::Rename, "no-source", None),
    ];
    let want = set(&[
        (Reason::DestinationTaken, "README.md"),
        (Reason::DestinationTaken, "src/lib.rs"),
        (Reason::SourceGitlink, "vendor/mod"),
        (Reason::SourceNotFile, "src"),
        (Reason::SourceNotFile, "missing.txt"),
        (Reason::BeneathNonDirectory, "run.sh/child"),
        (Reason::BeneathNonDirectory, "vendor/mod/inside"),
        (Reason::BeneathNonDirectory, "link/x"),
        (Reason::BadPath, "../escape"),
        (Reason::BadPath, ".git/hooks/pre-commit"),
        (Reason::BadPath, "no-source"),
    ]);
    let got = refused(check(&s, &storage, &bad).await);
    assert_eq!(got, want);
    finish(s, &storage).await;
}

/// A gitlink whose name no mount can carry, and more gitlinks than can be masked, are refused.
#[tokio::test]
async fn gitlinks_that_cannot_be_masked_are_refused() {
    let s = owned("t-tree-gitlinks").await;
    // (A backslash or a control character in a name is the seeder's refusal already.)
    let (repo, head) = tree_repo(&["a,b", "quo\"te"]);
    let storage = seed(&s, &repo, &head).await;
    assert_eq!(
        refused(check(&s, &storage, &[]).await),
        set(&[
            (Reason::GitlinkName, "a,b"),
            (Reason::GitlinkName, "quo\"te"),
        ])
    );
    task::remove(&s.ctl, &storage).await.unwrap();
    let names: Vec<String> = (0..257).map(|i| format!("m/g{i:03}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (repo, head) = tree_repo(&names);
    let storage = seed(&s, &repo, &head).await;
    assert_eq!(
        refused(check(&s, &storage, &[]).await),
        set(&[(Reason::GitlinkLimit, ".")])
    );
    finish(s, &storage).await;
}

/// More than 10,000 differences: the reader stops and the tree is refused as too many changes.
#[tokio::test]
async fn more_than_ten_thousand_changes_are_refused() {
    let s = owned("t-tree-flood").await;
    let (repo, head) = tree_repo(&[]);
    let storage = seed(&s, &repo, &head).await;
    let names: Vec<String> = (0..=10_000).map(|i| format!("f{i:05}")).collect();
    let entries: Vec<(&str, u32, Option<&[u8]>)> = names
        .iter()
        .map(|n| (n.as_str(), 0o644, Some(&b""[..])))
        .collect();
    plant(&s, &storage, paths::WORK, &entries).await;
    match check(&s, &storage, &[]).await {
        Err(Error::TreeRefused { findings, more }) => {
            assert!(
                findings.iter().any(|f| f.reason == Reason::TooManyChanges),
                "{findings:?}"
            );
            assert!(more > 0, "more than the listed ones were counted");
        }
        other => panic!("{other:?}"),
    }
    finish(s, &storage).await;
}

/// The metadata as seeded and HEAD at base: a change after seeding and a moved HEAD are refused
/// (the link snapshot refuses a changed metadata too), and a check at another base is refused.
#[tokio::test]
async fn a_metadata_change_and_a_moved_head_are_refused() {
    let s = owned("t-tree-meta").await;
    let (repo, head) = tree_repo(&[]);
    let storage = seed(&s, &repo, &head).await;
    let base_other = s
        .ctl
        .task(&at_base(&storage, OTHER))
        .expect("a task")
        .check_tree(&[], DEADLINE)
        .await;
    assert_eq!(refused(base_other), set(&[(Reason::HeadMoved, "HEAD")]));
    plant(
        &s,
        &storage,
        paths::METADATA,
        &[("HEAD", 0o644, Some(format!("{OTHER}\n").as_bytes()))],
    )
    .await;
    assert_eq!(
        refused(check(&s, &storage, &[]).await),
        set(&[
            (Reason::HeadMoved, "HEAD"),
            (Reason::MetadataChanged, ".git")
        ])
    );
    let snapshot = s
        .ctl
        .task(&storage)
        .expect("a task")
        .snapshot_links(&["link".to_owned()], DEADLINE)
        .await;
    match snapshot {
        Err(Error::TreeRefused { findings, .. }) => {
            assert_eq!(findings[0].reason, Reason::MetadataChanged)
        }
        other => panic!("{other:?}"),
    }
    task::remove(&s.ctl, &storage).await.unwrap();
    let storage = seed(&s, &repo, &head).await;
    plant(
        &s,
        &storage,
        paths::METADATA,
        &[("planted", 0o644, Some(b"x"))],
    )
    .await;
    assert_eq!(
        refused(check(&s, &storage, &[]).await),
        set(&[(Reason::MetadataChanged, ".git")])
    );
    finish(s, &storage).await;
}

/// The start's side of the capability: execute and fix need one, a read-only phase refuses one;
/// a check serves one start, over its own storage and head, as issued; a copy, a second use,
/// other storage, another head, an altered check and another controller's are refused, each
/// before anything is made.
#[tokio::test]
async fn a_tree_check_serves_one_start_over_its_own_storage_and_head() {
    let s = owned("t-tree-capability").await;
    let (repo, head) = tree_repo(&["vendor/mod"]);
    let (a, b) = tokio::join!(seed(&s, &repo, &head), seed(&s, &repo, &head));
    let request = |storage: &StorageHandle, phase: Phase, tree_check: Option<TreeCheck>| Request {
        phase,
        vendor: Vendor::Claude,
        prompt: "hello".to_owned(),
        schema: None,
        referenced_code_hash: "code".to_owned(),
        deadline: Instant::now() + Duration::from_secs(60),
        network_allowlist: vec![],
        attempt: format!("cap-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        storage: storage.clone(),
        tree_check,
    };
    let go = |request: Request| {
        let ctl = s.ctl.clone();
        let image = s.image.clone();
        async move {
            let handle = start(
                &ctl,
                capture(&ctl, request)?,
                None,
                Options::new(ImageSource::Id(image)),
            )
            .await?;
            Ok::<_, Error>(handle.settled().await)
        }
    };
    let refused_start =
        |result: Result<std::sync::Arc<cordon::invoke::InvocationResult>, Error>, why: &str| {
            match result {
                Err(e) => {
                    assert_eq!(e.id(), "tree-check", "{why}: {e}");
                    e.to_string()
                }
                Ok(r) => panic!("{why}: started: {r:?}"),
            }
        };
    // A read-only phase takes none.
    let checked = check(&s, &a, &[]).await.unwrap();
    refused_start(
        go(request(&a, Phase::Questions, Some(checked.clone()))).await,
        "questions",
    );
    // Other storage (the check of a, presented with b).
    let checked = check(&s, &a, &[]).await.unwrap();
    let why = refused_start(
        go(request(&b, Phase::Execute, Some(checked))).await,
        "other storage",
    );
    assert!(why.contains("storage"), "{why}");
    // Another head.
    let checked = check(&s, &a, &[]).await.unwrap();
    let mut moved = a.clone();
    moved.head = Some(OTHER.to_owned());
    let why = refused_start(
        go(request(&moved, Phase::Execute, Some(checked))).await,
        "head",
    );
    assert!(why.contains("head"), "{why}");
    // Altered: a mask dropped, and the pins to match (forged through its JSON).
    let checked = check(&s, &a, &[]).await.unwrap();
    let mut forged: TreeCheck =
        serde_json::from_str(&serde_json::to_string(&checked).unwrap()).unwrap();
    forged.gitlinks.clear();
    forged.pins.clear();
    let why = refused_start(
        go(request(&a, Phase::Execute, Some(forged))).await,
        "forged",
    );
    assert!(why.contains("differs"), "{why}");
    // Another controller's check.
    let other = cordon_tests::controller().await;
    let foreign = other
        .clone()
        .with_helper_image(&s.image)
        .task(&a)
        .expect("a task")
        .check_tree(&[], DEADLINE)
        .await
        .unwrap();
    refused_start(
        go(request(&a, Phase::Execute, Some(foreign))).await,
        "foreign",
    );
    // Execute and fix need one.
    for phase in [Phase::Execute, Phase::Fix] {
        refused_start(go(request(&a, phase, None)).await, "no check");
    }
    cordon_tests::assert_only_storages(&s.engine, &s.owner, 2, "refused starts").await;
    // One start takes it; a copy and a second use are refused.
    let checked = check(&s, &a, &[]).await.unwrap();
    let copy = checked.clone();
    let ran = go(request(&a, Phase::Execute, Some(checked.clone())))
        .await
        .unwrap();
    assert!(ran.answer.is_some(), "{ran:#?}");
    refused_start(go(request(&a, Phase::Execute, Some(copy))).await, "a copy");
    refused_start(
        go(request(&a, Phase::Execute, Some(checked))).await,
        "reused",
    );
    task::remove(&s.ctl, &b).await.unwrap();
    finish(s, &a).await;
}

/// Every link shape the snapshot resolves one component at a time, as the agent's kernel would:
/// a plain link, a chain, a loop, a link through a link, a link to a directory holding a link,
/// dangling, into the metadata, outside the tree (absolute and by `..`); a declared path that is
/// no link, and one beneath a link.
#[tokio::test]
async fn the_link_snapshot_resolves_every_shape() {
    let s = owned("t-tree-links").await;
    let repo = Repo::new("links");
    repo.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    repo.write("holder/file.txt", b"file\n", 0o644);
    repo.symlink("holder/inner", "../src/lib.rs");
    repo.symlink("plain", "src/lib.rs");
    repo.symlink("chain", "chain2");
    repo.symlink("chain2", "src/lib.rs");
    repo.symlink("loop-a", "loop-b");
    repo.symlink("loop-b", "loop-a");
    repo.symlink("dirlink", "src");
    repo.symlink("via", "dirlink/lib.rs");
    repo.symlink("todir", "holder");
    repo.symlink("srcdir", "src");
    repo.symlink("dangling", "nowhere/x");
    let head = repo.commit();
    let blob = repo.git(&["rev-parse", "HEAD:src/lib.rs"]);
    let storage = seed(&s, &repo, &head).await;
    // What the repository could not hold (the seeder refuses such links): left by an attempt.
    agent_script(
        &s,
        &storage,
        r#"[{"symlink":["meta",".git/config"]},{"symlink":["abs","/etc/passwd"]},
            {"symlink":["up","../../etc"]}]"#,
    )
    .await;
    let declared: Vec<String> = [
        "plain",
        "chain",
        "loop-a",
        "via",
        "todir",
        "srcdir",
        "dangling",
        "meta",
        "abs",
        "up",
        "src/lib.rs",
        "dirlink/lib.rs",
    ]
    .iter()
    .map(|p| (*p).to_owned())
    .collect();
    let snapshot = s
        .ctl
        .task(&storage)
        .expect("a task")
        .snapshot_links(&declared, DEADLINE)
        .await
        .expect("snapshot");
    assert_eq!(
        Some(&snapshot.metadata_digest),
        storage.metadata_baseline.as_ref()
    );
    let link = |path: &str| {
        snapshot
            .links
            .iter()
            .find(|l| l.path == path)
            .unwrap_or_else(|| panic!("{path} not in {snapshot:#?}"))
    };
    let shape = |path: &str| {
        (
            link(path).kind,
            link(path).resolution,
            link(path).through_link,
        )
    };
    assert_eq!(
        shape("plain"),
        (EntryKind::Link, Some(Resolution::Inside), false)
    );
    assert_eq!(link("plain").resolved.as_deref(), Some("src/lib.rs"));
    assert_eq!(link("plain").target.as_deref(), Some("src/lib.rs"));
    assert_eq!(link("plain").target_state.len(), 1);
    assert_eq!(link("plain").target_state[0].path, "src/lib.rs");
    assert_eq!(
        link("plain").target_state[0].blob.as_deref(),
        Some(blob.as_str())
    );
    assert_eq!(
        shape("chain"),
        (EntryKind::Link, Some(Resolution::Inside), true)
    );
    assert_eq!(link("chain").resolved.as_deref(), Some("src/lib.rs"));
    assert_eq!(
        shape("loop-a"),
        (EntryKind::Link, Some(Resolution::Loop), true)
    );
    assert_eq!(
        shape("via"),
        (EntryKind::Link, Some(Resolution::Inside), true)
    );
    assert_eq!(
        shape("todir"),
        (EntryKind::Link, Some(Resolution::Inside), true)
    );
    let held: Vec<&str> = link("todir")
        .target_state
        .iter()
        .map(|t| t.path.as_str())
        .collect();
    assert_eq!(held, ["holder", "holder/file.txt", "holder/inner"]);
    assert_eq!(
        shape("srcdir"),
        (EntryKind::Link, Some(Resolution::Inside), false)
    );
    assert_eq!(
        shape("dangling"),
        (EntryKind::Link, Some(Resolution::Dangling), false)
    );
    assert_eq!(link("dangling").resolved.as_deref(), Some("nowhere/x"));
    assert_eq!(link("meta").resolution, Some(Resolution::Metadata));
    assert_eq!(link("abs").resolution, Some(Resolution::Outside));
    assert_eq!(link("up").resolution, Some(Resolution::Outside));
    assert_eq!(shape("src/lib.rs"), (EntryKind::File, None, false));
    assert!(
        link("dirlink/lib.rs").through_link,
        "{:?}",
        link("dirlink/lib.rs")
    );
    // A declared link through a link is not launched.
    let err = audit::refuse_through_links(&snapshot).unwrap_err();
    assert_eq!(err.id(), "tree-refused");
    // A declared path the snapshot cannot take is invalid input, before anything is made.
    let bad = s
        .ctl
        .task(&storage)
        .expect("a task")
        .snapshot_links(&["../x".to_owned()], DEADLINE)
        .await
        .unwrap_err();
    assert_eq!(bad.id(), "invalid-input");
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "after the snapshots").await;
    finish(s, &storage).await;
}

/// A declared link to a directory of 15,000 files is recorded whole (its snapshot is well over
/// a megabyte of JSON: the reader's channel carries what its limits allow).
#[tokio::test]
async fn a_large_link_target_is_recorded_whole() {
    let s = owned("t-tree-biglink").await;
    let repo = Repo::new("biglink");
    for i in 0..15_000 {
        repo.write(
            &format!("big/d{:02}/file-{i:05}.txt", i % 50),
            b"x\n",
            0o644,
        );
    }
    repo.symlink("all", "big");
    let head = repo.commit();
    let storage = seed(&s, &repo, &head).await;
    let snapshot = s
        .ctl
        .task(&storage)
        .expect("a task")
        .snapshot_links(&["all".to_owned()], DEADLINE)
        .await
        .expect("snapshot");
    let link = &snapshot.links[0];
    assert_eq!(link.resolution, Some(Resolution::Inside));
    assert!(!link.through_link);
    // The directory, its 50 subdirectories and every file.
    assert_eq!(link.target_state.len(), 1 + 50 + 15_000);
    finish(s, &storage).await;
}

/// Which protection a probe run goes without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Without {
    Nothing,
    Masks,
    Pins,
}

/// The worktree probe in an execute container over a checked tree with a top-level and a
/// deeply nested gitlink, with every protection or without one; its breaches' ids.
async fn probe_gitlinks(s: &Owned, storage: &StorageHandle, without: Without) -> BTreeSet<Id> {
    let checked = check(s, storage, &[]).await.expect("a checked tree");
    let masks = audit::redeem(&s.ctl, Phase::Execute, Some(&checked), storage).unwrap();
    assert_eq!(masks.pins, ["a", "a/b", "a/b/c"]);
    let task_storage = storage.storage().unwrap();
    let allocation =
        cordon::labels::Allocation::new(&s.owner, "probe", task_storage.allocation.uid).unwrap();
    let profile = Profile::new(ProfileSpec {
        phase: Phase::Execute,
        vendor: Vendor::Claude,
        image_id: s.image.clone(),
        storage: task_storage.mounts_for(&allocation),
        allocation,
        limits: cordon_tests::test_limits(),
        command: vec![paths::PROBE.to_owned(), "phase-worktree".to_owned()],
        exec: vec![paths::PROBE.to_owned()],
        env: vec![],
        gitlinks: masks.gitlinks,
        pins: masks.pins,
        pin_mounts: false,
        input_files: vec![],
        landlock_abi: cordon::profile::DEFAULT_LANDLOCK_ABI,
        egress: None,
    })
    .unwrap();
    let mut prepared = cordon::launch::Prepared::new(s.ctl.engine(), &profile).unwrap();
    match without {
        Without::Nothing => {}
        Without::Pins => {
            prepared.plan.policy.landlock.pins.clear();
            prepared.plan.policy.skip = vec![Id::PinnedDirs];
        }
        Without::Masks => {
            let work = format!("{}/", paths::WORK);
            if let Some(mounts) = prepared
                .plan
                .create
                .host_config
                .as_mut()
                .and_then(|h| h.mounts.as_mut())
            {
                mounts.retain(|m| {
                    !m.target
                        .as_deref()
                        .is_some_and(|t| t.starts_with(&work) && m.tmpfs_options.is_some())
                });
            }
            prepared.plan.policy.skip = vec![Id::GitlinkMasks];
        }
    }
    let (refusals, finished) =
        cordon_tests::launch_with(&s.ctl, &profile, prepared, |_| async {}).await;
    let refused: BTreeSet<Id> = refusals.iter().map(|r| r.id).collect();
    let expected_refusals: BTreeSet<Id> = match without {
        Without::Nothing => BTreeSet::new(),
        Without::Pins => [Id::PinnedDirs].into(),
        Without::Masks => [Id::GitlinkMasks].into(),
    };
    assert_eq!(refused, expected_refusals, "the validator: {refusals:?}");
    let reports = ProbeReport::parse_all(&finished.output.stdout);
    assert_eq!(reports.len(), 1, "{:?}", finished.output);
    assert!(reports[0].errors.is_empty(), "{:?}", reports[0]);
    reports[0].breaches.iter().map(|b| b.id).collect()
}

/// In an execute container from a checked tree: writes, mkdir, rmdir and mv at every gitlink
/// fail, no pinned directory can be renamed or exchanged and every gitlink stays in place, files
/// inside pinned directories and the rest of /work stay writable (the probe's own controls).
/// Without the masks the probe reports exactly `gitlink-masks`; without the pins exactly
/// `pinned-dirs` (and the validator refuses each such container).
#[tokio::test]
async fn nothing_is_written_beneath_a_gitlink_and_no_pinned_directory_moves() {
    let s = owned("t-tree-probe").await;
    let (repo, head) = tree_repo(&["top", "a/b/c/deep"]);
    // One storage each: a probe run leaves its traces (a directory it may not remove).
    let (nothing, pins, masks) = tokio::join!(
        seed(&s, &repo, &head),
        seed(&s, &repo, &head),
        seed(&s, &repo, &head)
    );
    // Boxed: three launches at once overflow a test thread's stack.
    let (full, without_pins, without_masks) = tokio::join!(
        Box::pin(probe_gitlinks(&s, &nothing, Without::Nothing)),
        Box::pin(probe_gitlinks(&s, &pins, Without::Pins)),
        Box::pin(probe_gitlinks(&s, &masks, Without::Masks)),
    );
    assert_eq!(full, BTreeSet::new());
    assert_eq!(without_pins, [Id::PinnedDirs].into());
    assert_eq!(without_masks, [Id::GitlinkMasks].into());
    for storage in [nothing, pins, masks] {
        task::remove(&s.ctl, &storage)
            .await
            .expect("remove storage");
    }
    s.finish().await;
}
