//! Loose blobs read back: as git reads them (SHA-1 and SHA-256, any size, any read size), and
//! refused, without handing over the last bytes, when the file is not the blob the tree names.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_repo::{self, git, Scratch};
use crate::verify::Hasher;
use std::io::Write;
use std::path::PathBuf;

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// `<kind> <size>\0<content>`.
fn raw(kind: &str, content: &[u8]) -> Vec<u8> {
    let mut raw = format!("{kind} {}\0", content.len()).into_bytes();
    raw.extend_from_slice(content);
    raw
}

fn id_of(raw: &[u8], format: Format) -> String {
    let mut hasher = Hasher::new(format);
    hasher.update(raw);
    hex::encode(hasher.finish())
}

/// Content that compresses (text) or does not (a xorshift stream).
fn content(len: usize, compressible: bool) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ len as u64;
    (0..len)
        .map(|i| {
            if compressible {
                b"line of text\n"[i % 13]
            } else {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            }
        })
        .collect()
}

/// Read `blob` to its end `chunk` bytes at a time: what was handed over, and how it ended.
fn read_all(blob: &mut LooseBlob, chunk: usize) -> (Vec<u8>, Result<(), Mismatch>) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        match blob.read(&mut buf) {
            Ok(0) => return (got, Ok(())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, Err(blob.failure().cloned().unwrap())),
        }
    }
}

/// A git directory of our own with the loose file `bytes` under the name `oid`.
fn plant(dir: &Path, oid: &str, bytes: &[u8]) -> PathBuf {
    let git_dir = dir.join("planted.git");
    let fan = git_dir.join("objects").join(&oid[..2]);
    std::fs::create_dir_all(&fan).unwrap();
    std::fs::write(fan.join(&oid[2..]), bytes).unwrap();
    git_dir
}

/// Open and read the blob `oid` of `size` bytes planted as `bytes`: what was handed over and the
/// verdict (an open that fails hands over nothing).
fn planted(oid: &str, size: u64, bytes: &[u8]) -> (Vec<u8>, Result<(), Mismatch>) {
    let t = Scratch::new("loose-planted");
    let git_dir = plant(&t.0, oid, bytes);
    let blobs = LooseBlobs::list(&git_dir, Format::Sha1, [oid]).unwrap();
    assert!(blobs.contains(oid));
    match blobs.open(oid, size) {
        Ok(mut blob) => {
            let (got, verdict) = read_all(&mut blob, 4096);
            assert_eq!(blob.verified(), verdict.is_ok());
            (got, verdict)
        }
        Err(e) => (Vec::new(), Err(e)),
    }
}

#[test]
fn loose_blobs_git_wrote_read_back_as_cat_file_gives_them() {
    for (format, init) in [
        (Format::Sha1, vec![]),
        (Format::Sha256, vec!["--object-format=sha256"]),
    ] {
        let t = Scratch::new("loose-git");
        test_repo::repo(&t.0, &init, 1);
        let mut written = Vec::new();
        for (len, compressible) in [
            (0, true),
            (1, true),
            (6, true),
            (70_000, true),
            (70_000, false),
            (300_000, false),
            (2_000_000, true),
        ] {
            let file = t.0.join(format!("f{len}-{compressible}"));
            std::fs::write(&file, content(len, compressible)).unwrap();
            let oid = git(&t.0, &["hash-object", "-w", file.to_str().unwrap()]);
            written.push((oid, len as u64, std::fs::read(&file).unwrap()));
        }
        let blobs = LooseBlobs::list(
            &t.0.join(".git"),
            format,
            written.iter().map(|(oid, ..)| oid.as_str()),
        )
        .unwrap();
        assert_eq!(blobs.len(), written.len());
        for (oid, size, bytes) in &written {
            for chunk in [1, 7, 4096, 1 << 20] {
                if *size > 100_000 && chunk < 4096 {
                    continue;
                }
                let mut blob = blobs.open(oid, *size).unwrap();
                let (got, verdict) = read_all(&mut blob, chunk);
                assert_eq!(verdict, Ok(()), "{format:?} {size} by {chunk}");
                assert!(got == *bytes, "{format:?} {size} by {chunk}: other bytes");
                assert!(blob.verified());
            }
        }
    }
}

#[test]
fn the_list_keeps_only_wanted_loose_names() {
    let t = Scratch::new("loose-list");
    let a = id_of(&raw("blob", b"a"), Format::Sha1);
    let b = id_of(&raw("blob", b"b"), Format::Sha1);
    let git_dir = plant(&t.0, &a, &zlib(&raw("blob", b"a")));
    plant(&t.0, &b, &zlib(&raw("blob", b"b")));
    // Names that are not objects of this format are not taken.
    std::fs::write(git_dir.join("objects").join(&a[..2]).join("short"), b"x").unwrap();
    let blobs = LooseBlobs::list(&git_dir, Format::Sha1, [a.as_str()]).unwrap();
    assert!(blobs.contains(&a));
    assert!(!blobs.contains(&b));
    assert_eq!(blobs.len(), 1);
    let none = LooseBlobs::list(&git_dir, Format::Sha256, [a.as_str()]).unwrap();
    assert!(none.is_empty());
}

#[test]
fn a_loose_file_that_is_not_the_blob_its_tree_names_is_refused_before_its_last_bytes() {
    let hello = raw("blob", b"hello\n");
    let oid = id_of(&hello, Format::Sha1);
    let good = zlib(&hello);
    assert_eq!(planted(&oid, 6, &good), (b"hello\n".to_vec(), Ok(())));

    let refused = |bytes: &[u8], size: u64| {
        let (got, verdict) = planted(&oid, size, bytes);
        assert!(
            (got.len() as u64) < size.max(1),
            "the last bytes were handed over: {got:?}"
        );
        verdict.unwrap_err()
    };
    // Another blob's bytes under this name.
    let other = zlib(&raw("blob", b"world\n"));
    assert!(matches!(refused(&other, 6), Mismatch::NotItsName { .. }));
    // A larger one: what came before the last read was handed over; the last read fails.
    let big = content(200_000, false);
    let big_id = id_of(&raw("blob", &big), Format::Sha1);
    let mut forged = big.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let (got, verdict) = planted(&big_id, 200_000, &zlib(&raw("blob", &forged)));
    assert!(matches!(verdict, Err(Mismatch::NotItsName { .. })));
    assert!(got.len() < 200_000 && big.starts_with(&got));
    // Truncated anywhere, including after the whole content (the checksum missing).
    for cut in [1, 4, good.len() / 2, good.len() - 2] {
        let verdict = refused(&good[..good.len() - cut], 6);
        assert!(
            matches!(verdict, Mismatch::Truncated { .. } | Mismatch::NotZlib(_)),
            "{cut}: {verdict:?}"
        );
    }
    // Bytes after the stream.
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"\0more");
    assert_eq!(refused(&trailing, 6), Mismatch::AfterTheStream);
    // Not zlib at all; empty.
    assert!(matches!(refused(b"hello\n", 6), Mismatch::NotZlib(_)));
    assert!(matches!(refused(b"", 6), Mismatch::Truncated { .. }));
    // Another kind of object under a blob's name.
    for kind in ["tree", "commit", "tag"] {
        assert!(
            matches!(
                refused(&zlib(&raw(kind, b"hello\n")), 6),
                Mismatch::NotABlob { .. }
            ),
            "{kind}"
        );
    }
    // A header with another size than the tree lists (larger and smaller).
    assert_eq!(
        refused(&good, 5),
        Mismatch::NotTheTreesSize {
            declared: 6,
            listed: 5
        }
    );
    assert_eq!(
        refused(&good, 7),
        Mismatch::NotTheTreesSize {
            declared: 6,
            listed: 7
        }
    );
    // More content than the header declares, and less.
    let mut more = b"blob 6\0hello\n".to_vec();
    more.extend_from_slice(&[b'x'; 100_000]);
    assert!(matches!(
        refused(&zlib(&more), 6),
        Mismatch::WrongSize { .. }
    ));
    assert!(matches!(
        refused(&zlib(b"blob 6\0hell"), 6),
        Mismatch::WrongSize { .. }
    ));
    // Headers git would not write.
    for header in [
        &b"blob 06\0hello\n"[..],
        b"blob 6",
        b"blob +6\0hello\n",
        b"blob\0",
    ] {
        assert!(
            matches!(refused(&zlib(header), 6), Mismatch::BadHeader { .. }),
            "{header:?}"
        );
    }
    assert!(matches!(
        refused(&zlib(&[b'b'; 4096]), 6),
        Mismatch::BadHeader { .. }
    ));
}

#[test]
fn a_link_fifo_or_directory_at_a_loose_name_is_refused_without_blocking() {
    let hello = raw("blob", b"hello\n");
    let oid = id_of(&hello, Format::Sha1);
    let t = Scratch::new("loose-special");
    let git_dir = plant(&t.0, &oid, &zlib(&hello));
    let path = git_dir.join("objects").join(&oid[..2]).join(&oid[2..]);
    let elsewhere = t.0.join("elsewhere");
    std::fs::write(&elsewhere, zlib(&hello)).unwrap();
    for what in ["link", "fifo", "directory"] {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(&path);
        match what {
            "link" => std::os::unix::fs::symlink(&elsewhere, &path).unwrap(),
            "fifo" => nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap(),
            _ => std::fs::create_dir(&path).unwrap(),
        }
        let blobs = LooseBlobs::list(&git_dir, Format::Sha1, [oid.as_str()]).unwrap();
        assert!(
            matches!(blobs.open(&oid, 6), Err(Mismatch::Unreadable(_))),
            "{what}"
        );
    }
    // A fan-out directory that is a link is not listed through.
    let fan = git_dir.join("objects").join(&oid[..2]);
    std::fs::remove_dir_all(&fan).unwrap();
    let real = t.0.join("real-fan");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join(&oid[2..]), zlib(&hello)).unwrap();
    std::os::unix::fs::symlink(&real, &fan).unwrap();
    assert!(LooseBlobs::list(&git_dir, Format::Sha1, [oid.as_str()]).is_err());
}
