//! Task storage on the real engine: a repository round-trips byte for byte; unusable and
//! oversized repositories are refused with nothing left; allocation ids are unique; owners never
//! see or touch each other.

use cordon::error::Error;
use cordon::task::{self, recover};
use cordon_contract::InitLine;
use cordon_tests::{assert_no_staging, controller, owned, prepare_request, Owned, Repo};

/// The digest cordon-init computes over a host directory (the same code that runs in containers).
fn host_digest(dir: &std::path::Path) -> String {
    let init = cordon::image::default_workspace()
        .join("target/static")
        .join(cordon::image::TARGET)
        .join(cordon::image::PROFILE)
        .join("cordon-init");
    let out = std::process::Command::new(init)
        .arg("digest")
        .arg(dir)
        .output()
        .expect("cordon-init digest");
    let line = String::from_utf8_lossy(&out.stderr)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    match InitLine::parse(&line) {
        Some(InitLine::Digest { digest, .. }) => digest,
        other => panic!("host digest: {other:?} from {line:?}"),
    }
}

/// Copy the work tree of `repo` (not its .git) as it would be checked out, with an empty `.git`
/// directory where the metadata is mounted.
fn expected_tree(repo: &Repo) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let out =
        std::env::temp_dir().join(format!("cordon-expected-{}", uuid::Uuid::new_v4().simple()));
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let name = entry.file_name();
            if name == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let target = to.join(&name);
            if meta.file_type().is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), target)
                    .unwrap();
            } else if meta.is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    copy(&repo.dir, &out);
    std::fs::create_dir(out.join(".git")).unwrap();
    std::fs::set_permissions(out.join(".git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    out
}

/// Files of every mode, nested directories, an empty and a binary file, odd names, links inside
/// the checkout (relative, chained, dangling, a cycle) and a submodule arrive byte for byte:
/// content, modes, links as links.
#[tokio::test]
async fn normal_repository_round_trips_byte_for_byte() {
    let s = owned("t-seed").await;
    let repo = Repo::new("normal");
    repo.write("README.md", b"# hello\n", 0o644);
    repo.write("bin/run.sh", b"#!/bin/sh\necho run\n", 0o755);
    repo.write("src/deep/er/lib.rs", b"pub fn f() {}\n", 0o644);
    repo.write("empty", b"", 0o644);
    repo.write(
        "data/blob.bin",
        &(0..1_048_576u64)
            .map(|i| (i.wrapping_mul(2_654_435_761) % 251) as u8)
            .collect::<Vec<_>>(),
        0o644,
    );
    repo.write("names/with space", b"x", 0o644);
    repo.write("names/ünïcødé", b"y", 0o644);
    repo.symlink("src/link", "deep/er/lib.rs");
    repo.symlink("up/and/back", "../../README.md");
    repo.symlink("dangling", "nowhere/../README.md");
    repo.symlink("loop-a", "loop-b");
    repo.symlink("loop-b", "loop-a");
    repo.git(&["add", "-A"]);
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        "160000,1234567890123456789012345678901234567890,vendor/sub",
    ]);
    repo.git(&["commit", "--quiet", "-m", "all kinds"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    std::fs::create_dir_all(repo.dir.join("vendor/sub")).unwrap();

    let handle = task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, "main"))
        .await
        .expect("prepare");
    assert_eq!(handle.head.as_deref(), Some(head.as_str()));
    assert!(handle
        .metadata_baseline
        .as_deref()
        .is_some_and(|d| d.starts_with("sha256:")));
    let storage = handle.storage().unwrap();
    let seeded = task::volume_digest(&s.engine, &s.image, &storage, &handle.work_volume)
        .await
        .expect("digest");
    let expected_dir = expected_tree(&repo);
    let expected = host_digest(&expected_dir);
    let _ = std::fs::remove_dir_all(&expected_dir);
    assert_eq!(
        seeded, expected,
        "the seeded tree differs from the repository's"
    );
    // The baseline is what a later digest of the untouched metadata gives.
    let again = task::metadata_digest(&s.engine, &s.image, &storage)
        .await
        .unwrap();
    assert_eq!(Some(again), handle.metadata_baseline);
    task::remove(&s.ctl, &handle).await.expect("remove");
    task::remove(&s.ctl, &handle)
        .await
        .expect("remove is idempotent");
    s.finish().await;
}

/// [`refusal`] of the repository's own directory, failing the test at once when it is not
/// refused as wanted.
async fn refused(repo: &Repo, head: &str, want: &str) {
    if let Err(e) = refusal(repo, &repo.dir, head, want).await {
        panic!("{e}");
    }
}

/// Prepare the repository at `path` (one [`Repo`] builds it) and require the refusal `want`
/// within 30 s, with nothing left in the engine or on the host. A prepare that succeeds is
/// removed before it is reported (a breach leaks nothing into the next case); one still running
/// after 30 s is reported as blocked.
async fn refusal(
    repo: &Repo,
    path: &std::path::Path,
    head: &str,
    want: &str,
) -> Result<(), String> {
    let s = owned("t-unusable").await;
    let mut request = prepare_request(&s.owner, repo, head);
    request.repo = path.to_path_buf();
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        task::prepare(&s.ctl, &request),
    )
    .await;
    let result = match outcome {
        Err(_) => Err(format!(
            "{} at {head}: prepare still running after 30 s (blocked)",
            path.display()
        )),
        Ok(Ok(handle)) => {
            task::remove(&s.ctl, &handle).await.unwrap();
            Err(format!(
                "{} at {head}: prepared (head {:?}) where {want} was expected",
                path.display(),
                handle.head
            ))
        }
        Ok(Err(err)) if err.id() == want => Ok(()),
        Ok(Err(err)) => Err(format!(
            "{} at {head}: {} where {want} was expected: {err}",
            path.display(),
            err.id()
        )),
    };
    s.finish().await;
    result
}

/// The cases of one test that were not refused as wanted; the test fails with all of them.
#[derive(Debug, Default)]
struct Failures(Vec<String>);

impl Failures {
    async fn refused(&mut self, repo: &Repo, path: &std::path::Path, head: &str, want: &str) {
        if let Err(e) = refusal(repo, path, head, want).await {
            self.0.push(e);
        }
    }

    fn assert_none(self) {
        assert!(
            self.0.is_empty(),
            "{} cases not refused as wanted:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// Every class of unusable repository is refused with its id, and nothing is left.
#[tokio::test]
async fn unusable_repositories_are_refused_with_nothing_left() {
    // (repository name, links as (path, target), the refusal id)
    type LinkCase<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let links: &[LinkCase] = &[
        ("absolute", &[("x", "/etc/passwd")], "repo-absolute-link"),
        ("escaping", &[("a/x", "../../..")], "repo-escaping-link"),
        (
            "chained",
            &[
                ("deep/er/top", "../.."),
                ("chained", "deep/er/top/../run/cordon/control/policy.json"),
            ],
            "repo-escaping-link",
        ),
        (
            "into-metadata",
            &[("x", ".git/config")],
            "repo-escaping-link",
        ),
        (
            "created-dir",
            &[("x", "made/by/agent/../../../../etc")],
            "repo-escaping-link",
        ),
    ];
    for (name, pairs, want) in links {
        let repo = Repo::new(name);
        repo.write("README", b"r\n", 0o644);
        for (path, target) in *pairs {
            repo.symlink(path, target);
        }
        let head = repo.commit();
        refused(&repo, &head, want).await;
    }
    // A link in the git metadata.
    let repo = Repo::new("metadata-link");
    repo.write("README", b"r\n", 0o644);
    let head = repo.commit();
    std::os::unix::fs::symlink("/etc/passwd", repo.dir.join(".git/objects/evil")).unwrap();
    refused(&repo, &head, "repo-metadata-link").await;
    // An object store that borrows another.
    let repo = Repo::new("alternates");
    repo.write("README", b"r\n", 0o644);
    let head = repo.commit();
    std::fs::write(
        repo.dir.join(".git/objects/info/alternates"),
        "/tmp/elsewhere/objects\n",
    )
    .unwrap();
    refused(&repo, &head, "repo-alternates").await;
    // A loose blob the checkout needs whose file is another blob's (git reads a loose object by
    // its name without checking it; the seeder reads it back and checks it).
    use std::os::unix::fs::PermissionsExt;
    let repo = Repo::new("corrupt-object");
    repo.write("README", b"readme\n", 0o644);
    let head = repo.commit();
    let readme = repo.git(&["rev-parse", "HEAD:README"]);
    std::fs::write(repo.dir.join("other"), b"nobody\n").unwrap();
    let other = repo.git(&["hash-object", "-w", "other"]);
    let path = |oid: &str| {
        repo.dir
            .join(format!(".git/objects/{}/{}", &oid[..2], &oid[2..]))
    };
    let forged = std::fs::read(path(&other)).unwrap();
    std::fs::set_permissions(path(&readme), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(path(&readme), forged).unwrap();
    refused(&repo, &head, "repo-corrupt-object").await;
    // Names git would not check out, built with plumbing.
    for (mode, name) in [
        ("100644", ".GIT"),
        ("100644", "git~1"),
        ("100644", "a\\b"),
        ("120000", ".gitmodules"),
    ] {
        let repo = Repo::new("bad-name");
        let head = repo.commit_tree(&[(mode, name, b"x"), ("100644", "ok", b"y")]);
        refused(&repo, &head, "repo-bad-name").await;
    }
    // Not a repository at all, and a revision that is not one.
    let plain = Repo::new("plain");
    std::fs::remove_dir_all(plain.dir.join(".git")).unwrap();
    refused(&plain, "HEAD", "repo-not-a-repository").await;
    let repo = Repo::new("bad-rev");
    repo.commit();
    refused(&repo, "--upload-pack=evil", "invalid-input").await;
}

/// A directory outside any repository (what a hostile link points at), removed on drop.
struct Outside(std::path::PathBuf);

impl Outside {
    fn new(name: &str) -> Outside {
        let dir = std::env::temp_dir().join(format!(
            "cordon-test-outside-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Outside(dir)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Move `rel` (under the repository's directory) outside, and leave an absolute link to it in its
/// place: everything git needs is still reachable through the link.
fn move_out_and_link(repo: &Repo, rel: &str, outside: &Outside) {
    let from = repo.dir.join(rel);
    let to = outside.0.join(uuid::Uuid::new_v4().simple().to_string());
    std::fs::create_dir(&to).unwrap();
    let to = to.join(from.file_name().unwrap());
    std::fs::rename(&from, &to).unwrap();
    std::os::unix::fs::symlink(&to, &from).unwrap();
}

/// A repository name that shows the case: `link` and `.git/refs/heads` give `link-git-refs-heads`.
fn case_name(kind: &str, what: &str) -> String {
    let what: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{kind}-{}", what.trim_matches('-').replace("--", "-"))
}

/// A repository with one commit.
fn small_repo(name: &str) -> (Repo, String) {
    let repo = Repo::new(name);
    repo.write("README", b"r\n", 0o644);
    repo.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    let head = repo.commit();
    (repo, head)
}

/// The loose objects of a git directory, sorted ("objects/ab/cdef..."), the order the copy reads
/// them in.
fn loose_objects(git_dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for fan in std::fs::read_dir(git_dir.join("objects"))
        .unwrap()
        .flatten()
    {
        let name = fan.file_name().to_string_lossy().into_owned();
        if name.len() != 2 {
            continue;
        }
        for object in std::fs::read_dir(fan.path()).unwrap().flatten() {
            found.push(format!(
                "objects/{name}/{}",
                object.file_name().to_string_lossy()
            ));
        }
    }
    found.sort();
    found
}

/// A FIFO at `path`, replacing what was there.
fn mkfifo(path: &std::path::Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// `.git/refs` a link to a host directory that holds the refs the repository needs (so HEAD
/// resolves through it) and also `secret.txt` and `nested/key.pem`. Read through the link, the
/// whole directory would land in the sandbox's `/work/.git/refs`; the repository is refused
/// before anything exists, and nothing is left in the engine or on the host.
#[tokio::test]
async fn a_refs_directory_linked_to_a_host_directory_is_refused() {
    let mut failures = Failures::default();
    let (repo, head) = small_repo("refs-host-dir");
    let host = Outside::new("host-dir");
    std::fs::write(host.0.join("secret.txt"), b"a host secret\n").unwrap();
    std::fs::create_dir_all(host.0.join("nested")).unwrap();
    std::fs::write(
        host.0.join("nested/key.pem"),
        b"-----BEGIN PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::create_dir_all(host.0.join("heads")).unwrap();
    std::fs::create_dir_all(host.0.join("tags")).unwrap();
    std::fs::copy(
        repo.dir.join(".git/refs/heads/main"),
        host.0.join("heads/main"),
    )
    .unwrap();
    std::fs::remove_dir_all(repo.dir.join(".git/refs")).unwrap();
    std::os::unix::fs::symlink(&host.0, repo.dir.join(".git/refs")).unwrap();
    // By the branch (resolved through the linked refs) and by the commit id.
    failures
        .refused(&repo, &repo.dir, "main", "repo-metadata-link")
        .await;
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    failures.assert_none();
}

/// `.git/objects` a link to another repository's object store, and the branch set to that
/// repository's commit: read through the link, the other repository would be checked out into
/// `/work`. Refused, nothing left.
#[tokio::test]
async fn an_object_store_linked_to_another_repository_is_refused() {
    let mut failures = Failures::default();
    let victim = Repo::new("victim");
    victim.write("private.txt", b"another project's source\n", 0o644);
    let theirs = victim.commit();
    let (repo, _) = small_repo("objects-link");
    std::fs::remove_dir_all(repo.dir.join(".git/objects")).unwrap();
    std::os::unix::fs::symlink(
        victim.dir.join(".git/objects"),
        repo.dir.join(".git/objects"),
    )
    .unwrap();
    std::fs::write(repo.dir.join(".git/refs/heads/main"), format!("{theirs}\n")).unwrap();
    failures
        .refused(&repo, &repo.dir, "main", "repo-metadata-link")
        .await;
    failures
        .refused(&repo, &repo.dir, &theirs, "repo-metadata-link")
        .await;
    failures.assert_none();
}

/// A link at any step from the repository's root down is refused with `repo-metadata-link`:
/// `.git` itself, `objects`, `objects/info` (also one holding an alternates file), a fan-out
/// directory (absolute, and relative to a directory inside the repository), `objects/pack`,
/// `refs` and directories and loose refs below it, `packed-refs`, `HEAD` (also git's old
/// relative symbolic-link HEAD), and the same in a bare repository (no `.git`: objects, refs and
/// HEAD at its root). In every case git could still reach everything through the link.
#[tokio::test]
async fn a_link_anywhere_in_the_git_metadata_is_refused() {
    let mut failures = Failures::default();
    let outside = Outside::new("links");
    for rel in [
        ".git",
        ".git/objects",
        ".git/objects/info",
        ".git/objects/pack",
        ".git/refs",
        ".git/refs/heads",
        ".git/refs/tags",
        ".git/refs/heads/main",
        ".git/HEAD",
    ] {
        let (repo, head) = small_repo(&case_name("link", rel));
        move_out_and_link(&repo, rel, &outside);
        failures
            .refused(&repo, &repo.dir, &head, "repo-metadata-link")
            .await;
        failures
            .refused(&repo, &repo.dir, "main", "repo-metadata-link")
            .await;
    }
    // objects/info linked, holding an alternates file.
    let (repo, head) = small_repo("link-info-alternates");
    let victim = Repo::new("alternates-victim");
    victim.commit();
    std::fs::write(
        repo.dir.join(".git/objects/info/alternates"),
        format!("{}\n", victim.dir.join(".git/objects").display()),
    )
    .unwrap();
    move_out_and_link(&repo, ".git/objects/info", &outside);
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    // A fan-out directory, linked outside, and linked (relative) into the repository's own tree.
    let (repo, head) = small_repo("link-fan-out");
    let fan = loose_objects(&repo.dir.join(".git"))[0][..10].to_owned();
    move_out_and_link(&repo, &format!(".git/{fan}"), &outside);
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    let (repo, head) = small_repo("link-fan-out-inside");
    let fan = loose_objects(&repo.dir.join(".git"))[0][8..10].to_owned();
    std::fs::create_dir(repo.dir.join("stash")).unwrap();
    std::fs::rename(
        repo.dir.join(format!(".git/objects/{fan}")),
        repo.dir.join(format!("stash/{fan}")),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        format!("../../stash/{fan}"),
        repo.dir.join(format!(".git/objects/{fan}")),
    )
    .unwrap();
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    // objects/pack holding the only copy of every object.
    let (repo, head) = small_repo("link-pack");
    repo.git(&["repack", "-a", "-d", "-q"]);
    assert!(loose_objects(&repo.dir.join(".git")).is_empty());
    move_out_and_link(&repo, ".git/objects/pack", &outside);
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    // A directory of refs below refs/heads.
    let (repo, head) = small_repo("link-ref-dir");
    repo.git(&["branch", "feature/x"]);
    move_out_and_link(&repo, ".git/refs/heads/feature", &outside);
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    // packed-refs holding the only copy of the branch.
    let (repo, head) = small_repo("link-packed-refs");
    repo.git(&["pack-refs", "--all"]);
    assert!(!repo.dir.join(".git/refs/heads/main").exists());
    move_out_and_link(&repo, ".git/packed-refs", &outside);
    failures
        .refused(&repo, &repo.dir, "main", "repo-metadata-link")
        .await;
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    // HEAD as git once wrote it: a relative link to the branch.
    let (repo, head) = small_repo("link-head-relative");
    std::fs::remove_file(repo.dir.join(".git/HEAD")).unwrap();
    std::os::unix::fs::symlink("refs/heads/main", repo.dir.join(".git/HEAD")).unwrap();
    failures
        .refused(&repo, &repo.dir, &head, "repo-metadata-link")
        .await;
    // A bare repository (the .git directory given as the repository).
    for rel in [
        ".git/objects",
        ".git/refs",
        ".git/HEAD",
        ".git/objects/info",
    ] {
        let (repo, head) = small_repo(&case_name("link-bare", rel));
        move_out_and_link(&repo, rel, &outside);
        failures
            .refused(&repo, &repo.dir.join(".git"), &head, "repo-metadata-link")
            .await;
    }
    failures.assert_none();
}

/// Hard-link `.git/<rel>` to `file` (replacing what was there): the repository then holds the
/// file itself, whatever it is, under a git name.
fn hard_link_into(repo: &Repo, rel: &str, file: &std::path::Path) {
    let path = repo.dir.join(".git").join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    std::fs::hard_link(file, &path).unwrap();
}

/// A file outside the repository hard-linked into its git metadata: a host "secret" under a loose
/// object's name and under a pack's name (nothing refers to either, so git in the copy never
/// reads them and the copy alone would carry the secret into the metadata volume), and the
/// repository's own `refs/heads/main`, `packed-refs` and `HEAD` moved outside and hard-linked
/// back (their content is what git needs; a link count above one says the file is also
/// elsewhere). Each is refused with `repo-metadata-link`, nothing left.
#[tokio::test]
async fn a_file_hard_linked_into_the_git_metadata_is_refused() {
    let mut failures = Failures::default();
    let outside = Outside::new("hard-links");
    let secret = outside.0.join("secret");
    std::fs::write(&secret, b"-----BEGIN PRIVATE KEY-----\na host secret\n").unwrap();
    let loose = format!("objects/ab/{}", "cd".repeat(19));
    let pack = format!("objects/pack/pack-{}.pack", "ef".repeat(20));
    for rel in [loose.as_str(), pack.as_str()] {
        let (repo, head) = small_repo(&case_name("hard-link-secret", rel));
        hard_link_into(&repo, rel, &secret);
        failures
            .refused(&repo, &repo.dir, &head, "repo-metadata-link")
            .await;
    }
    for rel in ["refs/heads/main", "packed-refs", "HEAD"] {
        let (repo, head) = small_repo(&case_name("hard-link-own", rel));
        if rel == "packed-refs" {
            repo.git(&["pack-refs", "--all"]);
        }
        let aside = outside.0.join(case_name("aside", rel));
        std::fs::copy(repo.dir.join(".git").join(rel), &aside).unwrap();
        hard_link_into(&repo, rel, &aside);
        failures
            .refused(&repo, &repo.dir, &head, "repo-metadata-link")
            .await;
    }
    failures.assert_none();
}

/// A repository made by `git clone --local` (every file of the source's `objects` hard-linked:
/// loose objects, the pack, its index and reverse index, the commit-graph, `info/packs`) seeds,
/// and its tree is the repository's. The link counts are checked, so this cannot pass without
/// links.
#[tokio::test]
async fn a_local_clone_with_hard_linked_objects_seeds() {
    use std::os::unix::fs::MetadataExt;
    let s = owned("t-local-clone").await;
    let origin = Repo::new("local-clone-origin");
    origin.write("README.md", b"# origin\n", 0o644);
    origin.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    origin.commit();
    origin.git(&["gc", "--quiet"]);
    origin.write("src/more.rs", b"pub fn g() {}\n", 0o644);
    origin.write("bin/run.sh", b"#!/bin/sh\necho run\n", 0o755);
    origin.symlink("src/link", "lib.rs");
    origin.commit();
    let clone = Repo::new("local-clone");
    std::fs::remove_dir_all(clone.dir.join(".git")).unwrap();
    clone.git(&[
        "clone",
        "--quiet",
        "--local",
        &origin.dir.display().to_string(),
        ".",
    ]);
    let head = clone.git(&["rev-parse", "HEAD"]);
    // Every kind the clone linked, with its link count.
    let git_dir = clone.dir.join(".git");
    let mut linked: Vec<(String, u64)> = Vec::new();
    let mut pending = vec![git_dir.join("objects")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                let rel = entry
                    .path()
                    .strip_prefix(&git_dir)
                    .unwrap()
                    .display()
                    .to_string();
                linked.push((rel, meta.nlink()));
            }
        }
    }
    let kind = |rel: &str| match rel {
        "objects/info/commit-graph" => Some("commit-graph"),
        "objects/info/packs" => Some("info/packs"),
        _ if rel.len() == 49 && rel.as_bytes()[10] == b'/' => Some("loose object"),
        _ => [".pack", ".idx", ".rev"]
            .into_iter()
            .find(|suffix| rel.starts_with("objects/pack/pack-") && rel.ends_with(suffix)),
    };
    let kinds: std::collections::BTreeSet<&str> = linked
        .iter()
        .filter(|(_, links)| *links > 1)
        .filter_map(|(rel, _)| kind(rel))
        .collect();
    assert_eq!(
        kinds,
        [
            ".idx",
            ".pack",
            ".rev",
            "commit-graph",
            "info/packs",
            "loose object"
        ]
        .into(),
        "what the clone hard-linked: {linked:?}"
    );

    let handle = task::prepare(&s.ctl, &prepare_request(&s.owner, &clone, "main"))
        .await
        .expect("prepare a local clone");
    assert_eq!(handle.head.as_deref(), Some(head.as_str()));
    let storage = handle.storage().unwrap();
    let seeded = task::volume_digest(&s.engine, &s.image, &storage, &handle.work_volume)
        .await
        .expect("digest");
    let expected_dir = expected_tree(&clone);
    let expected = host_digest(&expected_dir);
    let _ = std::fs::remove_dir_all(&expected_dir);
    assert_eq!(seeded, expected, "the seeded tree differs from the clone's");
    task::remove(&s.ctl, &handle).await.expect("remove");
    s.finish().await;
}

/// Links in the caller's own path (the repository path itself a link, or a link above it) are
/// the caller's: they are followed, and only from the repository's root down is nothing
/// followed. A bare repository (objects, refs and HEAD at its root) prepares too.
#[tokio::test]
async fn links_in_the_callers_path_are_followed_and_a_bare_repository_prepares() {
    let s = owned("t-path").await;
    let (repo, head) = small_repo("caller-path");
    let outside = Outside::new("caller-path");
    let alias = outside.0.join("alias");
    std::os::unix::fs::symlink(&repo.dir, &alias).unwrap();
    let above = outside.0.join("above");
    std::os::unix::fs::symlink(repo.dir.parent().unwrap(), &above).unwrap();
    let below_link = above.join(repo.dir.file_name().unwrap());
    for path in [
        alias.clone(),
        below_link,
        repo.dir.join(".git"),
        alias.join(".git"),
    ] {
        let mut request = prepare_request(&s.owner, &repo, "main");
        request.repo = path.clone();
        let handle = task::prepare(&s.ctl, &request)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(handle.head.as_deref(), Some(head.as_str()));
        task::remove(&s.ctl, &handle).await.unwrap();
    }
    s.finish().await;
}

/// FIFOs (where the metadata has a file: HEAD, packed-refs, a loose ref, a loose object; and
/// where it has a directory: `.git`, refs, a fan-out directory, objects/info), a socket, and a
/// directory where HEAD or packed-refs should be a file are refused at once with
/// `repo-metadata-link`: nothing is opened blocking or followed. Each prepare is bounded at 30 s.
#[tokio::test]
async fn special_files_in_the_git_metadata_are_refused_without_blocking() {
    let mut failures = Failures::default();
    for what in [
        "HEAD",
        "packed-refs",
        "refs/heads/main",
        "loose object",
        ".git",
        "refs",
        "fan-out",
        "objects/info",
    ] {
        let (repo, head) = small_repo(&case_name("fifo", what));
        let object = loose_objects(&repo.dir.join(".git"))[0].clone();
        let rel = match what {
            "loose object" => object,
            "fan-out" => object[..10].to_owned(),
            ".git" => String::new(),
            "packed-refs" => {
                repo.git(&["pack-refs", "--all"]);
                what.to_owned()
            }
            _ => what.to_owned(),
        };
        let path = if rel.is_empty() {
            repo.dir.join(".git")
        } else {
            repo.dir.join(".git").join(&rel)
        };
        mkfifo(&path);
        failures
            .refused(&repo, &repo.dir, &head, "repo-metadata-link")
            .await;
    }
    // A FIFO for HEAD in a bare repository.
    let (repo, head) = small_repo("fifo-bare");
    mkfifo(&repo.dir.join(".git/HEAD"));
    failures
        .refused(&repo, &repo.dir.join(".git"), &head, "repo-metadata-link")
        .await;
    // A socket among the objects and among the refs.
    for rel in ["objects/sock", "refs/heads/sock"] {
        let (repo, head) = small_repo(&case_name("socket", rel));
        let _listener =
            std::os::unix::net::UnixListener::bind(repo.dir.join(".git").join(rel)).unwrap();
        failures
            .refused(&repo, &repo.dir, &head, "repo-metadata-link")
            .await;
    }
    // A directory where a file should be.
    for rel in ["HEAD", "packed-refs"] {
        let (repo, head) = small_repo(&case_name("dir-for", rel));
        let path = repo.dir.join(".git").join(rel);
        let _ = std::fs::remove_file(&path);
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x\n").unwrap();
        failures
            .refused(&repo, &repo.dir, &head, "repo-metadata-link")
            .await;
    }
    failures.assert_none();
}

/// A FIFO renamed over `.git/HEAD` (in a second run: over the last loose object the copy reads)
/// once the staging directory exists, that is after the listing and while thousands of loose
/// objects are being copied. The copy reads the object store in sorted order and HEAD and
/// packed-refs after it, opens every file non-blocking and checks it is a regular file, so the
/// swapped file is always reached after the swap and refused at once (never an `openat` blocked
/// forever), and the staging directory is removed.
#[tokio::test]
async fn a_fifo_swapped_in_during_staging_is_refused_without_blocking() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let repo = Repo::new("swap");
    for i in 0..5000u32 {
        repo.write(
            &format!("d{}/f{i}", i % 50),
            format!("file {i}\n").as_bytes(),
            0o644,
        );
    }
    let head = repo.commit();
    let objects = loose_objects(&repo.dir.join(".git"));
    assert!(objects.len() > 5000, "{} loose objects", objects.len());
    let last_object = format!(".git/{}", objects[objects.len() - 1]);
    for target in [".git/HEAD".to_owned(), last_object] {
        let s = owned("t-swap").await;
        let target_path = repo.dir.join(&target);
        let original = std::fs::read(&target_path).unwrap();
        let fifo = repo.dir.join(".git/swap.fifo");
        mkfifo(&fifo);
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, prefix, target_path) = (
                stop.clone(),
                cordon::repo::clone::staging_prefix(s.owner.as_str()),
                target_path.clone(),
            );
            std::thread::spawn(move || {
                let roots = cordon::repo::clone::staging_roots();
                while !stop.load(Ordering::SeqCst) {
                    let staging = roots
                        .iter()
                        .filter_map(|root| std::fs::read_dir(root).ok())
                        .flat_map(|d| d.flatten())
                        .any(|e| e.file_name().to_string_lossy().starts_with(&prefix));
                    if staging {
                        std::fs::rename(&fifo, &target_path).unwrap();
                        return true;
                    }
                    std::thread::yield_now();
                }
                false
            })
        };
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, &head)),
        )
        .await;
        let took = started.elapsed();
        stop.store(true, Ordering::SeqCst);
        let swapped = swapper.join().unwrap();
        match outcome {
            Err(_) => {
                // Open the FIFO's other end so the blocked copy thread returns, then fail.
                let _ = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&target_path);
                panic!("{target} swapped for a FIFO: prepare still blocked after 30 s");
            }
            Ok(Ok(handle)) => {
                task::remove(&s.ctl, &handle).await.unwrap();
                panic!("{target} swapped for a FIFO (swapped: {swapped}): prepared");
            }
            Ok(Err(err)) => {
                assert!(swapped, "the swap never happened; prepare ended with {err}");
                assert_eq!(err.id(), "repo-metadata-link", "{target}: {err}");
                eprintln!("{target} swapped for a FIFO: refused after {took:?}: {err}");
            }
        }
        s.finish().await;
        std::fs::remove_file(&target_path).unwrap();
        std::fs::write(&target_path, original).unwrap();
    }
}

/// A tree exactly at the limit fits (and fills the volume to it); one byte or one entry more is
/// refused before anything exists.
#[tokio::test]
async fn one_byte_or_one_inode_over_fails_closed() {
    let s = owned("t-limit").await;
    let area = cordon::profile::Area {
        bytes: 64 * 1024,
        inodes: 8,
    };
    let try_repo = |files: Vec<(String, usize)>| {
        let repo = Repo::new("limit");
        for (name, size) in &files {
            repo.write(name, &vec![b'z'; *size], 0o644);
        }
        let head = repo.commit();
        (repo, head)
    };
    // Bytes: one file of exactly the area, then one byte more.
    for (size, fits) in [(64 * 1024, true), (64 * 1024 + 1, false)] {
        let (repo, head) = try_repo(vec![("f".into(), size)]);
        let mut request = prepare_request(&s.owner, &repo, &head);
        request.work = area;
        let result = task::prepare(&s.ctl, &request).await;
        match (result, fits) {
            (Ok(handle), true) => task::remove(&s.ctl, &handle).await.unwrap(),
            (Err(e), false) => assert_eq!(e.id(), "repo-too-large", "{e}"),
            (other, _) => panic!("{size} bytes: {other:?}"),
        }
    }
    // Entries: the root and the .git mountpoint take two of the eight.
    for (count, fits) in [(6, true), (7, false)] {
        let (repo, head) = try_repo((0..count).map(|i| (format!("f{i}"), 1)).collect());
        let mut request = prepare_request(&s.owner, &repo, &head);
        request.work = cordon::profile::Area {
            bytes: 1024 * 1024,
            inodes: 8,
        };
        let result = task::prepare(&s.ctl, &request).await;
        match (result, fits) {
            (Ok(handle), true) => task::remove(&s.ctl, &handle).await.unwrap(),
            (Err(e), false) => assert_eq!(e.id(), "repo-too-large", "{e}"),
            (other, _) => panic!("{count} files: {other:?}"),
        }
    }
    s.finish().await;
}

/// When the volume itself is smaller than the check assumed, the upload overflows midway: the
/// error names it and everything the allocation made is removed.
#[tokio::test]
async fn an_overflowing_upload_removes_everything() {
    let s = owned("t-overflow").await;
    let repo = Repo::new("overflow");
    for i in 0..16 {
        repo.write(&format!("f{i}"), &vec![b'o'; 64 * 1024], 0o644);
    }
    let head = repo.commit();
    let shrink = |request: &mut bollard::models::VolumeCreateRequest| {
        if let Some(o) = request.driver_opts.as_mut().and_then(|d| d.get_mut("o")) {
            *o = o.replace("size=536870912", "size=65536");
        }
    };
    let err = task::prepare_with(
        &s.ctl,
        &prepare_request(&s.owner, &repo, &head),
        shrink,
        &|_| {},
    )
    .await
    .expect_err("overflow");
    assert!(matches!(err, Error::Overflow(_)), "{err}");
    s.finish().await;
}

/// An allocation id is used once: a second prepare with it is refused by the controller that holds
/// it, and so is one by another controller (another runner) while the storage exists (its objects
/// carry the id).
#[tokio::test]
async fn a_duplicate_allocation_is_refused() {
    let s = owned("t-dup").await;
    let repo = Repo::new("dup");
    repo.write("README", b"r\n", 0o644);
    let head = repo.commit();
    let mut request = prepare_request(&s.owner, &repo, &head);
    request.allocation = Some(uuid::Uuid::new_v4());
    let handle = task::prepare(&s.ctl, &request).await.expect("first");
    let err = task::prepare(&s.ctl, &request).await.expect_err("second");
    assert_eq!(err.id(), "allocation-in-use", "{err}");
    // Another controller sees the id on the objects (the holding controller's registry is not
    // there).
    let taken = task::objects_with_allocation(&s.engine, &request.allocation.unwrap())
        .await
        .unwrap();
    assert_eq!(
        taken.len(),
        3,
        "keeper and both volumes carry the id: {taken:?}"
    );
    let elsewhere = controller().await.with_helper_image(&s.image);
    assert!(!elsewhere.holds_allocation(&handle.allocation));
    let err = task::prepare(&elsewhere, &request)
        .await
        .expect_err("another controller's prepare");
    assert_eq!(err.id(), "allocation-in-use", "{err}");
    task::remove(&s.ctl, &handle).await.unwrap();
    // Free again once removed.
    let handle = task::prepare(&s.ctl, &request)
        .await
        .expect("after removal");
    task::remove(&s.ctl, &handle).await.unwrap();
    s.finish().await;
}

/// Two owners on one daemon: recovery of one neither sees nor touches the other's storage (it is
/// only listed, when asked), and recovery refuses while this controller holds the owner's
/// storage (another controller holds none of it).
#[tokio::test]
async fn two_owners_do_not_touch_each_other() {
    let a = owned("t-owner-a").await;
    let b = a.other("t-owner-b");
    let (ctl, engine, image) = (&a.ctl, &a.engine, &a.image);
    let repo = Repo::new("owners");
    repo.write("README", b"r\n", 0o644);
    let head = repo.commit();
    let handle = task::prepare(ctl, &prepare_request(&a.owner, &repo, &head))
        .await
        .unwrap();
    let report = recover::recover(ctl, &b.owner, false)
        .await
        .expect("recover b");
    assert!(
        report.storage.is_empty() && report.removed.is_empty() && report.foreign.is_empty(),
        "{report:?}"
    );
    let report = recover::recover(ctl, &b.owner, true)
        .await
        .expect("recover b, listing others");
    assert!(
        report.foreign.iter().any(|f| f.contains(&handle.keeper)),
        "{report:?}"
    );
    assert!(report.removed.is_empty());
    match recover::recover(ctl, &a.owner, false).await {
        Err(Error::RecoveryBusy(owner)) => assert_eq!(owner, a.owner.as_str()),
        other => panic!("recovery while holding storage: {other:?}"),
    }
    assert!(ctl.holds_storage_of(&a.owner));
    assert!(
        !controller().await.holds_storage_of(&a.owner),
        "the storage is held by the controller that prepared it"
    );
    // A's storage is intact.
    let storage = handle.storage().unwrap();
    assert_eq!(
        task::metadata_digest(engine, image, &storage).await.ok(),
        handle.metadata_baseline
    );
    task::remove(ctl, &handle).await.unwrap();
    a.finish().await;
    b.finish().await;
}

/// The check right after the first create: an object with the same allocation id that appeared
/// after the pre-check (here: made by another owner before `create_checked`, which skips the
/// pre-check) makes the controller remove what it made and refuse; the other object is untouched.
#[tokio::test]
async fn an_allocation_taken_during_create_is_refused_after_the_first_create() {
    let ours = owned("t-race-ours").await;
    let theirs = ours.other("t-race-theirs");
    let (engine, image) = (&ours.engine, &ours.image);
    let allocation = cordon::storage::new_allocation(engine, &ours.owner, "race")
        .await
        .unwrap();
    let intruder = cordon::labels::Allocation {
        owner: theirs.owner.clone(),
        ..allocation.clone()
    };
    let (work, _) = cordon::storage::task_volume_requests(
        &intruder,
        cordon::storage::DEFAULT_WORK,
        cordon::storage::DEFAULT_METADATA,
    );
    let intruder_volume = engine
        .docker()
        .create_volume(bollard::models::VolumeCreateRequest {
            name: Some(format!("intruder-{}", allocation.id)),
            ..work
        })
        .await
        .expect("intruder volume")
        .name;
    let (work, metadata) = cordon::storage::task_volume_requests(
        &allocation,
        cordon::storage::DEFAULT_WORK,
        cordon::storage::DEFAULT_METADATA,
    );
    let err = cordon::storage::TaskStorage::create_checked(
        engine,
        &allocation,
        image,
        (work, cordon::storage::DEFAULT_WORK),
        (metadata, cordon::storage::DEFAULT_METADATA),
        cordon_contract::paths::METADATA,
        cordon_contract::paths::METADATA,
    )
    .await
    .expect_err("a second holder of the id");
    assert_eq!(err.id(), "allocation-in-use", "{err}");
    assert!(err.to_string().contains(&intruder_volume), "{err}");
    ours.assert_clean().await;
    // The other owner's object is still there, untouched.
    let volumes = cordon::engine::objects::list_owned(engine, &theirs.owner)
        .await
        .unwrap()
        .volumes;
    assert_eq!(volumes, vec![intruder_volume.clone()]);
    engine
        .docker()
        .remove_volume(
            &intruder_volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await
        .unwrap();
    ours.finish().await;
    theirs.finish().await;
}

/// Objects whose labels do not prove they are one allocation's storage are never touched: parts
/// that disagree (two attempts), an unknown kind and a cordon object without an owner are only
/// listed by recovery; removal of a handle naming an object that lacks the handle's labels
/// reports it and leaves it.
#[tokio::test]
async fn recovery_and_removal_never_touch_what_labels_do_not_prove() {
    use bollard::models::VolumeCreateRequest;
    use cordon::labels::{ALLOCATION, ATTEMPT, KIND, OWNER};
    let s = owned("t-labels").await;
    let allocation = uuid::Uuid::new_v4();
    let labels = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let alloc = allocation.to_string();
    let made = [
        (
            format!("cordon-work-{allocation}"),
            labels(&[
                (OWNER, s.owner.as_str()),
                (ATTEMPT, "one"),
                (ALLOCATION, &alloc),
                (KIND, "work"),
            ]),
        ),
        (
            format!("cordon-metadata-{allocation}"),
            labels(&[
                (OWNER, s.owner.as_str()),
                (ATTEMPT, "two"),
                (ALLOCATION, &alloc),
                (KIND, "metadata"),
            ]),
        ),
        (
            format!("cordon-bogus-{allocation}"),
            labels(&[
                (OWNER, s.owner.as_str()),
                (ATTEMPT, "one"),
                (ALLOCATION, &alloc),
                (KIND, "bogus"),
            ]),
        ),
        (
            format!("cordon-unowned-{allocation}"),
            labels(&[(ATTEMPT, "one"), (ALLOCATION, &alloc), (KIND, "work")]),
        ),
    ];
    for (name, labels) in &made {
        s.engine
            .docker()
            .create_volume(VolumeCreateRequest {
                name: Some(name.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            })
            .await
            .expect("volume");
    }
    let report = recover::recover(&s.ctl, &s.owner, false)
        .await
        .expect("recover");
    assert!(
        report.storage.is_empty() && report.removed.is_empty(),
        "{report:?}"
    );
    for name in &made[..3] {
        assert!(
            report.untouched.iter().any(|u| u.contains(&name.0)),
            "{} not listed as untouched: {report:?}",
            name.0
        );
    }
    assert!(
        report.unowned.iter().any(|u| u.contains(&made[3].0)),
        "{report:?}"
    );
    // A handle that names the unowned volume as its work volume: found by name only, it lacks the
    // owner label, so removal reports it and leaves it.
    let handle = task::StorageHandle {
        owner: s.owner.as_str().to_owned(),
        attempt: "one".to_owned(),
        allocation,
        work_volume: made[3].0.clone(),
        metadata_volume: made[1].0.clone(),
        keeper: format!("cordon-keeper-{allocation}"),
        work: cordon::storage::DEFAULT_WORK,
        metadata: cordon::storage::DEFAULT_METADATA,
        uid: cordon::uids::Uid::new(1_500_000).unwrap(),
        head: None,
        gitlinks: None,
        metadata_baseline: None,
        snapshot: None,
    };
    match task::remove(&s.ctl, &handle).await {
        Err(Error::Unreleased(left)) => {
            assert_eq!(left.len(), 2, "{left:?}");
            assert!(left.iter().any(|l| l.contains(&made[3].0)), "{left:?}");
            assert!(left.iter().any(|l| l.contains(&made[1].0)), "{left:?}");
        }
        other => panic!("removal of objects without the handle's labels: {other:?}"),
    }
    for (name, _) in &made {
        s.engine
            .docker()
            .inspect_volume(name)
            .await
            .unwrap_or_else(|e| panic!("{name} was touched: {e}"));
        s.engine
            .docker()
            .remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
            .unwrap();
    }
    s.finish().await;
}

/// A prepare past its deadline fails with `deadline` and leaves nothing; a prepare whose future is
/// dropped (cancelled) at any point releases its claim, so recovery of the owner runs, removes
/// what it made and leaves nothing.
#[tokio::test]
async fn a_prepare_past_its_deadline_or_cancelled_leaves_nothing_after_recovery() {
    let s = owned("t-cancel").await;
    let repo = Repo::new("cancel");
    for i in 0..1500u32 {
        let content: Vec<u8> = (0..8192u32).map(|j| ((i * 7 + j) % 251) as u8).collect();
        repo.write(&format!("d{}/f{i}", i % 30), &content, 0o644);
    }
    let head = repo.commit();
    let mut request = prepare_request(&s.owner, &repo, &head);
    request.deadline = std::time::Duration::from_millis(1);
    let err = task::prepare(&s.ctl, &request)
        .await
        .expect_err("past the deadline");
    assert_eq!(err.id(), "deadline", "{err}");
    s.assert_clean().await;

    let request = prepare_request(&s.owner, &repo, &head);
    let mut finished = 0;
    for after_ms in [20u64, 300, 700, 1200, 2000, 3500] {
        let cancelled = tokio::time::timeout(
            std::time::Duration::from_millis(after_ms),
            task::prepare(&s.ctl, &request),
        )
        .await;
        if let Ok(done) = cancelled {
            task::remove(&s.ctl, &done.expect("prepare")).await.unwrap();
            finished += 1;
        }
    }
    assert!(finished < 6, "no prepare was cancelled midway");
    // A create the engine was already doing when its request was dropped may still land.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let report = recover::recover(&s.ctl, &s.owner, false)
        .await
        .expect("recovery is not refused after a cancelled prepare");
    for handle in &report.storage {
        task::remove(&s.ctl, handle).await.unwrap();
    }
    assert!(report.untouched.is_empty(), "{report:?}");
    s.finish().await;
}

/// The guard every engine test holds first: a test that panics midway (here a task that prepared
/// storage, made an unlabelled cordon volume of that allocation and a staging directory as a
/// killed copy leaves one, then panicked) leaves nothing of its owner in the engine or on the
/// host, and the panic it reports is its own.
#[tokio::test]
async fn a_test_that_panics_midway_leaves_nothing_of_its_owner() {
    use cordon::labels::{object_name, Kind};
    // This test's own guard (for the same owner), in case a check below fails.
    let safety = owned("t-guard").await;
    let (ctl, image, owner) = (
        safety.ctl.clone(),
        safety.image.clone(),
        safety.owner.clone(),
    );
    let unlabelled = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let made = unlabelled.clone();
    let panicked = tokio::spawn(async move {
        let mut s = Owned::new(ctl, image, owner);
        let (repo, head) = small_repo("guard");
        let handle = task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, &head))
            .await
            .expect("prepare");
        s.making_unlabelled_volumes().await;
        let volume = object_name(Kind::Input, &handle.allocation);
        s.engine
            .docker()
            .create_volume(bollard::models::VolumeCreateRequest {
                name: Some(volume.clone()),
                ..Default::default()
            })
            .await
            .expect("an unlabelled volume");
        *made.lock().unwrap() = volume;
        let staging = cordon::repo::clone::staging_roots()[0].join(format!(
            "{}{}",
            cordon::repo::clone::staging_prefix(s.owner.as_str()),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(staging.join("objects/ab")).unwrap();
        std::fs::write(staging.join("objects/ab/cdef"), b"x").unwrap();
        cordon_tests::assert_only_storage(&s.engine, &s.owner, "before the panic").await;
        panic!("midway, on purpose");
    })
    .await;
    let payload = panicked.expect_err("the task panicked").into_panic();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"midway, on purpose"),
        "the panic is the test's own"
    );
    let cordon::engine::objects::Owned {
        containers,
        volumes,
        networks,
    } = cordon::engine::objects::list_owned(&safety.engine, &safety.owner)
        .await
        .unwrap();
    assert!(
        containers.is_empty() && volumes.is_empty() && networks.is_empty(),
        "left: {containers:?} {volumes:?} {networks:?}"
    );
    let volume = unlabelled.lock().unwrap().clone();
    assert!(!volume.is_empty(), "the unlabelled volume was made");
    assert!(
        safety
            .engine
            .docker()
            .inspect_volume(&volume)
            .await
            .is_err(),
        "the unlabelled volume {volume} is left"
    );
    assert_no_staging(&safety.owner);
    safety.finish().await;
}

/// A helper (keeper, loader, tool, tree reader) has networking disabled: no libnetwork sandbox,
/// no endpoint on the engine's shared `none` network, and a network namespace of its own that
/// holds loopback alone. The same body with the switch removed shows the check can fail: the
/// engine then gives the container a sandbox and an endpoint on `none`.
#[tokio::test]
async fn a_helper_has_no_network_at_all() {
    use cordon::labels::Kind;
    use futures_util::StreamExt;
    let s = owned("t-helper-net").await;
    let allocation = cordon::storage::new_allocation(&s.engine, &s.owner, "n")
        .await
        .unwrap();
    let sleeping = vec![
        cordon_contract::paths::PROBE.to_owned(),
        "workload".into(),
        "sleep".into(),
        "30000".into(),
    ];
    let helper =
        cordon::profile::helper_body(&s.image, &allocation, Kind::Tool, sleeping, Vec::new());
    let mut switched_off = helper.clone();
    switched_off.network_disabled = None;
    let docker = s.engine.docker();
    let mut seen = Vec::new();
    for (name, body) in [
        (allocation.name(Kind::Tool), helper),
        (
            format!("{}-without", allocation.name(Kind::Tool)),
            switched_off,
        ),
    ] {
        let options = bollard::query_parameters::CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        docker.create_container(Some(options), body).await.unwrap();
        docker
            .start_container(
                &name,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .unwrap();
        let inspected = docker
            .inspect_container(
                &name,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .unwrap();
        let pid = inspected.state.as_ref().and_then(|st| st.pid).unwrap_or(0);
        // Read from the host: the interfaces of the namespace the helper's process lives in.
        let devices = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap_or_default();
        let interfaces: Vec<String> = devices
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next().map(|i| i.trim().to_owned()))
            .collect();
        let host_ns = std::fs::read_link("/proc/self/ns/net").ok();
        let helper_ns = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
        let settings = inspected.network_settings.unwrap_or_default();
        seen.push((
            inspected.config.and_then(|c| c.network_disabled),
            settings.sandbox_id.unwrap_or_default(),
            settings
                .networks
                .unwrap_or_default()
                .into_keys()
                .collect::<Vec<_>>(),
            interfaces,
            helper_ns.is_some() && helper_ns != host_ns,
        ));
        let _ = docker
            .remove_container(
                &name,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        // The removal settles before the next step's leftover check.
        let mut waits = docker.wait_container(
            &name,
            None::<bollard::query_parameters::WaitContainerOptions>,
        );
        while waits.next().await.is_some() {}
    }
    let (disabled, sandbox, networks, interfaces, own_ns) = &seen[0];
    assert_eq!(*disabled, Some(true), "{seen:?}");
    assert!(sandbox.is_empty() && networks.is_empty(), "{seen:?}");
    assert_eq!(interfaces, &["lo".to_owned()], "{seen:?}");
    assert!(own_ns, "a namespace of its own: {seen:?}");
    let (_, sandbox, networks, _, _) = &seen[1];
    assert!(
        !sandbox.is_empty() && networks == &["none".to_owned()],
        "without the switch the engine makes a sandbox on none: {seen:?}"
    );
    s.finish().await;
}
