//! Staging: links and special files anywhere in the source, a FIFO swapped in, the deadline.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_repo;
use std::time::Duration;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> Scratch {
    let dir = std::env::temp_dir().join(format!("cordon-clone-{}", uuid::Uuid::new_v4()));
    fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn stop_in(after: Duration) -> Stop {
    Stop {
        deadline: Instant::now() + after,
        given_up: Arc::new(AtomicBool::new(false)),
    }
}

/// A bare layout with a few loose objects, refs and HEAD (file contents are not git's: only
/// the copy is tested).
fn fake_git_dir(root: &Path) {
    for (rel, content) in [
        ("objects/ab/cdef", "object one"),
        ("objects/00/1122", "object two"),
        ("objects/pack/pack-1.pack", "pack"),
        ("refs/heads/main", "0123\n"),
        ("packed-refs", "# pack-refs\n"),
        ("HEAD", "ref: refs/heads/main\n"),
    ] {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
}

#[test]
fn the_copy_takes_the_store_in_order_and_head_last() {
    let t = scratch();
    let src = t.0.join("src");
    fake_git_dir(&src);
    let stop = stop_in(Duration::from_secs(30));
    let listing = list_source(&src, &stop).unwrap();
    let files: Vec<String> = listing
        .files
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        files,
        [
            "objects/00/1122",
            "objects/ab/cdef",
            "objects/pack/pack-1.pack",
            "refs/heads/main",
            "packed-refs",
            "HEAD"
        ]
    );
    let dst = t.0.join("dst");
    fs::create_dir_all(dst.join("objects")).unwrap();
    fs::write(dst.join("HEAD"), "made by git init\n").unwrap();
    let copied = copy_source(&listing, &dst, verify::Format::Sha1, &stop).unwrap();
    assert_eq!(copied.entries, listing.dirs.len() as u64 + 6);
    assert_eq!(
        fs::read_to_string(dst.join("HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert_eq!(
        fs::read_to_string(dst.join("objects/ab/cdef")).unwrap(),
        "object one"
    );
}

/// A FIFO (or a link) swapped in after the listing is refused by the copy at once: the file
/// is opened non-blocking and checked on its descriptor.
#[test]
fn a_fifo_or_link_swapped_in_after_the_listing_is_refused_by_the_copy() {
    for (swapped, make) in [
        ("HEAD", "fifo"),
        ("objects/ab/cdef", "fifo"),
        ("packed-refs", "link"),
        ("objects/ab", "link"),
    ] {
        let t = scratch();
        let src = t.0.join("src");
        fake_git_dir(&src);
        let stop = stop_in(Duration::from_secs(30));
        let listing = list_source(&src, &stop).unwrap();
        let path = src.join(swapped);
        let aside = t.0.join("aside");
        fs::rename(&path, &aside).unwrap();
        if make == "fifo" {
            nix::unistd::mkfifo(&path, Mode::from_bits_truncate(0o644)).unwrap();
        } else {
            std::os::unix::fs::symlink(&aside, &path).unwrap();
        }
        let dst = t.0.join("dst");
        fs::create_dir_all(&dst).unwrap();
        let started = Instant::now();
        match copy_source(&listing, &dst, verify::Format::Sha1, &stop) {
            Err(Error::Unusable(Unusable::MetadataLink { path })) => {
                assert!(
                    swapped.starts_with(&path) || path.starts_with(swapped),
                    "{path}"
                )
            }
            other => panic!("{swapped} as a {make}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[test]
fn a_file_is_read_with_a_bound_and_the_deadline_is_seen_between_chunks() {
    let t = scratch();
    let from = t.0.join("from");
    fs::write(&from, vec![7u8; 10]).unwrap();
    let stop = stop_in(Duration::from_secs(30));
    let copy = |limit: u64, stop: &Stop| {
        let mut to = File::create(t.0.join("to")).unwrap();
        copy_bounded(
            &File::open(&from).unwrap(),
            &mut to,
            limit,
            stop,
            Path::new("f"),
        )
    };
    assert_eq!(copy(10, &stop).unwrap(), 10);
    // One byte over the bound is read, no more: the caller refuses it.
    assert_eq!(copy(9, &stop).unwrap(), 10);
    assert_eq!(copy(3, &stop).unwrap(), 4);
    assert_eq!(fs::metadata(t.0.join("to")).unwrap().len(), 4);
    // A big file, past the deadline: the copy stops after the first chunk.
    fs::write(&from, vec![7u8; (CHUNK * 2 + 1) as usize]).unwrap();
    let past = stop_in(Duration::ZERO);
    match copy(MAX_OBJECT_STORE_BYTES, &past) {
        Err(Error::Deadline(_)) => {}
        other => panic!("past the deadline: {other:?}"),
    }
    assert_eq!(fs::metadata(t.0.join("to")).unwrap().len(), CHUNK);
}

/// The caller gets `deadline` at the deadline even when the work is stuck in a system call
/// (here an `open` of a FIFO without O_NONBLOCK, which blocks until a writer comes).
#[tokio::test]
async fn the_deadline_holds_while_the_work_is_stuck() {
    let t = scratch();
    let fifo = t.0.join("fifo");
    nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o644)).unwrap();
    let stop = stop_in(Duration::from_millis(300));
    let started = Instant::now();
    let blocked = fifo.clone();
    let result = off_thread("stuck work", &stop, move |_| {
        File::open(&blocked).map_err(|e| Error::io("open", e))?;
        Ok(())
    })
    .await;
    assert!(matches!(result, Err(Error::Deadline(_))), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(stop.given_up.load(Ordering::SeqCst));
    // Let the stuck thread go.
    let _ = fs::OpenOptions::new().read(true).write(true).open(&fifo);
}

/// A staging directory dropped tells the copy to stop and is removed.
#[test]
fn a_dropped_staging_directory_stops_the_copy_and_is_removed() {
    let t = scratch();
    let path = t.0.join("stage");
    fs::create_dir_all(path.join("repo.git/objects/ab")).unwrap();
    fs::write(path.join("repo.git/objects/ab/cd"), "x").unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    drop(StagingDir {
        path: path.clone(),
        stop: flag.clone(),
    });
    assert!(flag.load(Ordering::SeqCst));
    assert!(!path.exists());
    let stop = Stop {
        deadline: Instant::now() + Duration::from_secs(30),
        given_up: flag,
    };
    assert!(stop.check().is_err());
}

/// A repository git made at `dir/src` (a few commits, packed, then one more loose), and a
/// directory outside it holding a "secret".
fn real_repo(t: &Scratch) -> (PathBuf, PathBuf) {
    let src = t.0.join("src");
    test_repo::repo(&src, &[], 2);
    test_repo::git(&src, &["gc", "--quiet"]);
    fs::write(src.join("more"), "more\n").unwrap();
    test_repo::git(&src, &["add", "-A"]);
    test_repo::git(&src, &["commit", "--quiet", "-m", "more"]);
    let secret = t.0.join("outside/secret");
    fs::create_dir_all(secret.parent().unwrap()).unwrap();
    fs::write(&secret, "-----BEGIN PRIVATE KEY-----\na host secret\n").unwrap();
    (src, secret)
}

/// List and copy `src` into a fresh bare repository at `dst`.
fn copy_into(src: &Path, dst: &Path) -> Result<Copied> {
    test_repo::git(
        dst.parent().unwrap(),
        &["init", "--quiet", "--bare", dst.to_str().unwrap()],
    );
    let stop = stop_in(Duration::from_secs(60));
    let listing = list_source(src, &stop)?;
    copy_source(&listing, dst, verify::Format::Sha1, &stop)
}

fn hard_link_refusal(result: Result<Copied>) -> (String, u64, String) {
    match result {
        Err(Error::Unusable(Unusable::MetadataHardLink {
            path,
            links,
            reason,
        })) => (path, links, reason),
        other => panic!("not refused as a hard link: {other:?}"),
    }
}

/// A host file hard-linked in as a loose object or a pack, and the repository's own refs,
/// packed-refs and HEAD hard-linked from outside, are refused with the path, the link count and
/// why; the id is `repo-metadata-link`.
#[test]
fn a_file_hard_linked_from_outside_is_refused_by_the_copy() {
    let loose = format!("objects/ab/{}", "cd".repeat(19));
    let pack = format!("objects/pack/pack-{}.pack", "ef".repeat(20));
    for (rel, why) in [
        (loose.as_str(), "it is not a zlib stream"),
        (
            pack.as_str(),
            "it does not start with the signature \"PACK\"",
        ),
        ("refs/heads/main", "a ref cannot be verified"),
        ("packed-refs", "packed-refs cannot be verified"),
        ("HEAD", "HEAD cannot be verified"),
    ] {
        let t = scratch();
        let (src, secret) = real_repo(&t);
        let git_dir = src.join(".git");
        let path = git_dir.join(rel);
        if rel == "packed-refs" {
            test_repo::git(&src, &["pack-refs", "--all"]);
        }
        if path.exists() {
            // Its own content, moved outside and linked back.
            fs::rename(&path, &secret).unwrap();
        }
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::hard_link(&secret, &path).unwrap();
        let result = copy_into(&src, &t.0.join("dst.git"));
        let (path, links, reason) = hard_link_refusal(result);
        assert_eq!((path.as_str(), links), (rel, 2));
        assert!(reason.starts_with(why), "{rel}: {reason}");
        let err = Error::Unusable(Unusable::MetadataHardLink {
            path,
            links,
            reason,
        });
        assert_eq!(err.id(), "repo-metadata-link");
        eprintln!("{err}");
        assert!(
            err.to_string()
                .contains(&format!("{rel:?} has 2 links, and {why}")),
            "{err}"
        );
    }
}

/// The link count is read on the descriptor the bytes come from: a loose object that had one
/// link when listed and is a hard-linked host file when copied is refused.
#[test]
fn a_link_swapped_in_after_the_listing_is_seen_on_the_descriptor() {
    let t = scratch();
    let (src, secret) = real_repo(&t);
    let git_dir = src.join(".git");
    let dst = t.0.join("dst.git");
    test_repo::git(&t.0, &["init", "--quiet", "--bare", "dst.git"]);
    let stop = stop_in(Duration::from_secs(60));
    let listing = list_source(&src, &stop).unwrap();
    let object = listing
        .files
        .iter()
        .find(|p| p.components().count() == 3 && p.starts_with("objects"))
        .unwrap()
        .clone();
    let staged = t.0.join("outside/staged");
    fs::hard_link(&secret, &staged).unwrap();
    fs::rename(&staged, git_dir.join(&object)).unwrap();
    let (path, links, reason) =
        hard_link_refusal(copy_source(&listing, &dst, verify::Format::Sha1, &stop));
    assert_eq!((path, links), (object.display().to_string(), 2));
    assert!(reason.starts_with("it is not a zlib stream"), "{reason}");
}

/// `git clone --local` links every file of the object store: loose objects, packs and their
/// indexes, bitmaps and split commit-graphs are verified and copied; info/packs, the
/// chain of split graphs and a .keep are left out; git finds every object in the copy.
#[test]
fn a_local_clone_copies_with_its_links_verified() {
    use std::os::unix::fs::MetadataExt;
    let t = scratch();
    let (origin, _) = real_repo(&t);
    test_repo::git(&origin, &["repack", "-a", "-d", "-b", "-q"]);
    test_repo::git(
        &origin,
        &["commit-graph", "write", "--split", "--reachable"],
    );
    fs::write(origin.join("last"), "last\n").unwrap();
    test_repo::git(&origin, &["add", "-A"]);
    test_repo::git(&origin, &["commit", "--quiet", "-m", "last"]);
    let pack = test_repo::files(&origin.join(".git/objects/pack"))
        .into_iter()
        .find(|f| f.ends_with(".pack"))
        .unwrap();
    fs::write(
        origin
            .join(".git/objects/pack")
            .join(pack.replace(".pack", ".keep")),
        "kept\n",
    )
    .unwrap();
    let head = test_repo::git(&origin, &["rev-parse", "HEAD"]);
    let clone = t.0.join("clone");
    test_repo::git(
        &t.0,
        &[
            "clone",
            "--quiet",
            "--local",
            origin.to_str().unwrap(),
            "clone",
        ],
    );
    let objects = clone.join(".git/objects");
    let linked: Vec<String> = test_repo::files(&objects)
        .into_iter()
        .filter(|f| fs::metadata(objects.join(f)).unwrap().nlink() > 1)
        .collect();
    for kind in [
        ".pack",
        ".idx",
        ".rev",
        ".bitmap",
        ".keep",
        ".graph",
        "commit-graph-chain",
        "info/packs",
    ] {
        assert!(
            linked.iter().any(|f| f.ends_with(kind)),
            "no linked {kind}: {linked:?}"
        );
    }
    assert!(
        linked
            .iter()
            .any(|f| f.len() == 41 && f.as_bytes()[2] == b'/'),
        "no linked loose object: {linked:?}"
    );

    let dst = t.0.join("dst.git");
    let copied = copy_into(&clone, &dst).unwrap();
    let taken = test_repo::files(&dst.join("objects"));
    let left_out: Vec<&String> = linked.iter().filter(|f| !taken.contains(f)).collect();
    assert_eq!(left_out.len(), 3, "{left_out:?}");
    assert!(left_out.iter().all(|f| f.ends_with(".keep")
        || f.ends_with("info/packs")
        || f.ends_with("commit-graph-chain")));
    assert!(copied.entries > linked.len() as u64 - 3);
    let git_in_copy = |args: &[&str]| {
        let mut all = vec!["--git-dir", dst.to_str().unwrap()];
        all.extend_from_slice(args);
        test_repo::git(&t.0, &all)
    };
    assert_eq!(git_in_copy(&["rev-parse", "main"]), head);
    git_in_copy(&["fsck", "--strict", "--no-dangling"]);
}

/// A file that verifies but is another user's (a valid object of their repository, linked in)
/// is refused: verification says it is a git file, not that it is this repository's. Needs
/// root to give a file away; elsewhere the test says so and checks nothing.
#[test]
fn a_linked_file_of_another_owner_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot make a file another user owns; skipped");
        return;
    }
    let t = scratch();
    let (src, _) = real_repo(&t);
    let other = t.0.join("other");
    test_repo::repo(&other, &[], 1);
    let file = t.0.join("other/content");
    fs::write(&file, "theirs\n").unwrap();
    let id = test_repo::git(&other, &["hash-object", "-w", "content"]);
    let rel = format!("objects/{}/{}", &id[..2], &id[2..]);
    let theirs = other.join(".git").join(&rel);
    nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    fs::create_dir_all(src.join(".git").join(&rel).parent().unwrap()).unwrap();
    fs::hard_link(&theirs, src.join(".git").join(&rel)).unwrap();
    let (path, links, reason) = hard_link_refusal(copy_into(&src, &t.0.join("dst.git")));
    assert_eq!((path, links), (rel, 2));
    assert_eq!(
        reason,
        "it is owned by uid 65534, the git directory by uid 0"
    );
}

/// The owner token names the staging directory: anything but `[a-z0-9-]`, empty or over 64
/// characters is refused before the source is opened or anything is made.
#[tokio::test]
async fn an_owner_token_that_is_not_a_plain_name_is_refused_before_anything_is_made() {
    let deadline = Instant::now() + Duration::from_secs(5);
    let allocation = uuid::Uuid::new_v4();
    let long = "a".repeat(65);
    for owner in ["", "../evil", "a/b", "Upper", "a b", ".", long.as_str()] {
        let source = Path::new("/nonexistent-cordon-source");
        match stage(source, "HEAD", owner, &allocation, deadline).await {
            Err(Error::Invalid(why)) => assert!(why.contains("owner token"), "{owner:?}: {why}"),
            other => panic!("{owner:?}: {other:?}"),
        }
        for root in staging_roots() {
            assert!(!root
                .join(format!("{}{allocation}", staging_prefix(owner)))
                .exists());
        }
    }
    // A plain token gets past the check (to the missing source).
    match stage(
        Path::new("/nonexistent-cordon-source"),
        "HEAD",
        "ok-1",
        &allocation,
        deadline,
    )
    .await
    {
        Err(Error::Invalid(why)) => assert!(!why.contains("owner token"), "{why}"),
        Err(_) => {}
        Ok(_) => panic!("a missing source staged"),
    }
}
