//! Staging: links and special files anywhere in the source, a FIFO swapped in, the deadline.

#![allow(clippy::unwrap_used)]

use super::*;
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
    let copied = copy_source(&listing, &dst, &stop).unwrap();
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
        match copy_source(&listing, &dst, &stop) {
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
