//! The verifier on real git files (loose objects, packs and every hashfile git writes into the
//! object store, SHA-1 and SHA-256) and on what an attacker could link in their place.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_repo::{self, git, Scratch};
use std::io::Write;

const LIMIT: u64 = 1024 * 1024;

/// Verify `bytes` as the linked file `rel`, given `chunk` bytes at a time.
fn check(rel: &str, bytes: &[u8], format: Format, chunk: usize) -> Result<(), Mismatch> {
    match linked(Path::new(rel), format, LIMIT) {
        Linked::Verify(mut verifier) => {
            for part in bytes.chunks(chunk.max(1)) {
                verifier.update(part)?;
            }
            verifier.finish()
        }
        other => panic!("{rel}: {other:?}"),
    }
}

/// Verify as one piece and one, seven and 4096 bytes at a time: every split gives one answer.
fn verdict(rel: &str, bytes: &[u8], format: Format) -> Result<(), Mismatch> {
    let whole = check(rel, bytes, format, bytes.len());
    for chunk in [1, 7, 4096] {
        assert_eq!(check(rel, bytes, format, chunk), whole, "{rel} by {chunk}");
    }
    whole
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// The loose-object name of `raw` (`<type> <size>\0<content>`).
fn name_of(raw: &[u8], format: Format) -> String {
    let mut hasher = Hasher::new(format);
    hasher.update(raw);
    let id = hex::encode(hasher.finish());
    format!("objects/{}/{}", &id[..2], &id[2..])
}

/// A loose object git wrote: its path and bytes.
fn git_loose_object(dir: &Path, content: &str) -> (String, Vec<u8>) {
    let file = dir.join("content");
    std::fs::write(&file, content).unwrap();
    let id = git(dir, &["hash-object", "-w", "content"]);
    let rel = format!("objects/{}/{}", &id[..2], &id[2..]);
    let bytes = std::fs::read(dir.join(".git").join(&rel)).unwrap();
    (rel, bytes)
}

#[test]
fn a_loose_object_git_wrote_verifies_and_one_replaced_does_not() {
    let t = Scratch::new("verify-loose");
    test_repo::repo(&t.0, &[], 1);
    let (rel, bytes) = git_loose_object(&t.0, "hello\n");
    assert_eq!(verdict(&rel, &bytes, Format::Sha1), Ok(()));
    // Another object of the same length under this name.
    let (_, other) = git_loose_object(&t.0, "world\n");
    assert!(matches!(
        verdict(&rel, &other, Format::Sha1),
        Err(Mismatch::NotItsName { .. })
    ));
    // Truncated: the stream never ends (even with the whole content inflated, the checksum is
    // missing).
    for cut in [1, 4, bytes.len() / 2] {
        let short = &bytes[..bytes.len() - cut];
        assert!(
            matches!(
                verdict(&rel, short, Format::Sha1),
                Err(Mismatch::Truncated { .. })
            ),
            "{cut}: {:?}",
            verdict(&rel, short, Format::Sha1)
        );
    }
    // Bytes after the stream.
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        verdict(&rel, &longer, Format::Sha1),
        Err(Mismatch::AfterTheStream)
    );
    // One byte flipped anywhere.
    for at in [0, 1, bytes.len() / 2, bytes.len() - 1] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x40;
        assert!(verdict(&rel, &flipped, Format::Sha1).is_err(), "{at}");
    }
}

#[test]
fn a_host_file_under_an_object_name_is_refused_at_once() {
    let secret = b"-----BEGIN PRIVATE KEY-----\na host secret\n";
    let loose = format!("objects/ab/{}", "cd".repeat(19));
    assert!(matches!(
        verdict(&loose, secret, Format::Sha1),
        Err(Mismatch::NotZlib(_))
    ));
    // Compressed (the attacker's own zlib of it) it still does not hash to the name.
    let raw = [b"blob 42\0".as_slice(), secret].concat();
    assert!(matches!(
        verdict(&loose, &zlib(&raw), Format::Sha1),
        Err(Mismatch::NotItsName { .. })
    ));
    for pack in [
        format!("objects/pack/pack-{}.pack", "ef".repeat(20)),
        format!("objects/pack/pack-{}.idx", "ef".repeat(20)),
        "objects/info/commit-graph".to_owned(),
    ] {
        assert!(matches!(
            verdict(&pack, secret, Format::Sha1),
            Err(Mismatch::Signature { .. })
        ));
    }
    // Nothing at all.
    assert!(matches!(
        verdict(&loose, b"", Format::Sha1),
        Err(Mismatch::Truncated { .. })
    ));
}

#[test]
fn headers_are_read_as_git_writes_them() {
    let ok = |raw: &[u8]| verdict(&name_of(raw, Format::Sha1), &zlib(raw), Format::Sha1);
    for raw in [
        b"blob 5\0hello".as_slice(),
        b"blob 0\0",
        b"tree 0\0",
        b"commit 3\0abc",
        b"tag 1\0x",
    ] {
        assert_eq!(ok(raw), Ok(()), "{:?}", String::from_utf8_lossy(raw));
    }
    // The size is exact.
    for raw in [b"blob 6\0hello".as_slice(), b"blob 4\0hello", b"blob 0\0x"] {
        assert!(
            matches!(ok(raw), Err(Mismatch::WrongSize { .. })),
            "{:?}: {:?}",
            String::from_utf8_lossy(raw),
            ok(raw)
        );
    }
    // Not a header git writes (hashing to the name does not help).
    for raw in [
        b"blob 05\0hello".as_slice(),
        b"blob +5\0hello",
        b"blob -5\0hello",
        b"blob  5\0hello",
        b"blob5\0hello",
        b"blub 5\0hello",
        b"BLOB 5\0hello",
        b"blob \0",
        b"blob 5",
        b"blob 99999999999999999999999\0",
        &[b'b'; 100],
    ] {
        assert!(
            matches!(ok(raw), Err(Mismatch::BadHeader { .. })),
            "{:?}: {:?}",
            String::from_utf8_lossy(raw),
            ok(raw)
        );
    }
}

#[test]
fn a_zlib_bomb_is_never_inflated_past_the_bound() {
    let zeros = vec![0u8; 64 * 1024 * 1024];
    // The header declares more than the limit: refused at the header.
    let raw = [format!("blob {}\0", zeros.len()).as_bytes(), &zeros].concat();
    let bomb = zlib(&raw);
    assert!(bomb.len() < 200 * 1024, "{}", bomb.len());
    let rel = name_of(&raw, Format::Sha1);
    let Linked::Verify(mut verifier) = linked(Path::new(&rel), Format::Sha1, LIMIT) else {
        panic!("not verified");
    };
    let mut first = Ok(());
    for part in bomb.chunks(64 * 1024) {
        first = verifier.update(part);
        if first.is_err() {
            break;
        }
    }
    assert_eq!(
        first,
        Err(Mismatch::TooLarge {
            declared: zeros.len() as u64,
            limit: LIMIT
        })
    );
    assert!(verifier.inflated() <= 2 * INFLATE_CHUNK as u64);
    // The header declares ten bytes and the stream goes on: refused one chunk past them.
    let raw = [b"blob 10\0".as_slice(), &zeros].concat();
    let Linked::Verify(mut verifier) =
        linked(Path::new(&name_of(&raw, Format::Sha1)), Format::Sha1, LIMIT)
    else {
        panic!("not verified");
    };
    let mut result = Ok(());
    for part in zlib(&raw).chunks(64 * 1024) {
        result = verifier.update(part);
        if result.is_err() {
            break;
        }
    }
    assert!(
        matches!(result, Err(Mismatch::WrongSize { declared: 10, .. })),
        "{result:?}"
    );
    assert!(verifier.inflated() <= 8 + 10 + INFLATE_CHUNK as u64);
    // Exactly at the limit is taken.
    let raw = [
        format!("blob {LIMIT}\0").as_bytes(),
        &zeros[..LIMIT as usize],
    ]
    .concat();
    assert_eq!(
        check(
            &name_of(&raw, Format::Sha1),
            &zlib(&raw),
            Format::Sha1,
            8192
        ),
        Ok(())
    );
}

#[test]
fn sha256_objects_verify_only_in_a_sha256_copy() {
    let t = Scratch::new("verify-sha256");
    test_repo::repo(&t.0, &["--object-format=sha256"], 2);
    let (rel, bytes) = git_loose_object(&t.0, "hello\n");
    assert_eq!(rel.len(), "objects/".len() + 65);
    assert_eq!(verdict(&rel, &bytes, Format::Sha256), Ok(()));
    assert!(matches!(
        linked(Path::new(&rel), Format::Sha1, LIMIT),
        Linked::Refuse(Mismatch::OtherFormat { .. })
    ));
    let sha1_name = format!("objects/ab/{}", "cd".repeat(19));
    assert!(matches!(
        linked(Path::new(&sha1_name), Format::Sha256, LIMIT),
        Linked::Refuse(Mismatch::OtherFormat { .. })
    ));
    // Its pack, index and commit-graph carry SHA-256 checksums.
    git(&t.0, &["gc", "--quiet"]);
    let objects = t.0.join(".git/objects");
    let mut seen = std::collections::BTreeSet::new();
    for rel in test_repo::files(&objects) {
        let kind = [".pack", ".idx", ".rev", "info/commit-graph"]
            .into_iter()
            .find(|kind| rel.ends_with(kind));
        if let Some(kind) = kind {
            let bytes = std::fs::read(objects.join(&rel)).unwrap();
            let rel = format!("objects/{rel}");
            assert_eq!(verdict(&rel, &bytes, Format::Sha256), Ok(()), "{rel}");
            assert!(verdict(&rel, &bytes, Format::Sha1).is_err(), "{rel}");
            seen.insert(kind);
        }
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
}

/// Every hashfile git writes into the object store: a pack, its index, reverse index, bitmap and
/// mtimes (a cruft pack), the multi-pack-index, the commit-graph and a split commit-graph.
fn git_hashfiles(dir: &Path) -> Vec<(String, Vec<u8>)> {
    test_repo::repo(dir, &[], 3);
    let objects = dir.join(".git/objects");
    let mut taken: Vec<(String, Vec<u8>)> = Vec::new();
    let mut take = |suffix: &str| {
        let rel = test_repo::files(&objects)
            .into_iter()
            .find(|rel| rel.ends_with(suffix))
            .unwrap_or_else(|| panic!("git wrote no {suffix}"));
        let bytes = std::fs::read(objects.join(&rel)).unwrap();
        taken.push((format!("objects/{rel}"), bytes));
    };
    git(dir, &["gc", "--quiet"]);
    for suffix in [".pack", ".idx", ".rev", "info/commit-graph"] {
        take(suffix);
    }
    git(dir, &["repack", "-a", "-d", "-b", "-q"]);
    take(".bitmap");
    std::fs::write(dir.join("loose"), "unreachable\n").unwrap();
    git(dir, &["hash-object", "-w", "loose"]);
    git(dir, &["repack", "--cruft", "-d", "-q"]);
    take(".mtimes");
    git(dir, &["multi-pack-index", "write"]);
    take("pack/multi-pack-index");
    // A split graph holds the commits the full one does not.
    git(
        dir,
        &["commit", "--quiet", "--allow-empty", "-m", "one more"],
    );
    git(dir, &["commit-graph", "write", "--split", "--reachable"]);
    take(".graph");
    taken
}

#[test]
fn every_hashfile_git_writes_verifies_and_one_flipped_byte_does_not() {
    let t = Scratch::new("verify-hashfiles");
    let files = git_hashfiles(&t.0);
    assert_eq!(files.len(), 8);
    for (rel, bytes) in &files {
        assert_eq!(verdict(rel, bytes, Format::Sha1), Ok(()), "{rel}");
        // The signature, a byte in the middle, the last byte of the checksum.
        for (at, signature) in [
            (0, true),
            (bytes.len() / 2, false),
            (bytes.len() - 1, false),
        ] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 1;
            let result = verdict(rel, &flipped, Format::Sha1);
            if signature {
                assert!(
                    matches!(result, Err(Mismatch::Signature { .. })),
                    "{rel}: {result:?}"
                );
            } else {
                assert!(
                    matches!(result, Err(Mismatch::Checksum { .. })),
                    "{rel} at {at}: {result:?}"
                );
            }
        }
        // Cut short, and with a byte more.
        assert!(verdict(rel, &bytes[..bytes.len() - 1], Format::Sha1).is_err());
        assert!(verdict(rel, &[bytes.as_slice(), b"\n"].concat(), Format::Sha1).is_err());
    }
    // Too short for a signature and a checksum.
    assert_eq!(
        verdict("objects/pack/pack-1.pack", b"PACK", Format::Sha1),
        Err(Mismatch::TooShort { len: 4 })
    );
}

#[test]
fn what_cannot_be_verified_is_refused_and_what_is_not_needed_left_out() {
    let refused = |rel: &str| {
        matches!(
            linked(Path::new(rel), Format::Sha1, LIMIT),
            Linked::Refuse(Mismatch::Unverifiable(_))
        )
    };
    for rel in [
        "refs/heads/main",
        "refs/tags/v1",
        "packed-refs",
        "HEAD",
        "objects/pack/pack-1.promisor",
        "objects/pack/tmp_pack_x",
        "objects/pack/multi-pack-index.d/multi-pack-index-chain",
        "objects/info/alternates",
        "objects/info/commit-graphs/other",
        "objects/evil",
        "objects/ab/NOTHEX",
        format!("objects/AB/{}", "CD".repeat(19)).as_str(),
        format!("objects/ab/{}", "cd".repeat(20)).as_str(),
        format!("objects/abc/{}", "d".repeat(37)).as_str(),
        "config",
    ] {
        assert!(refused(rel), "{rel}");
    }
    for rel in [
        "objects/info/packs",
        "objects/info/commit-graphs/commit-graph-chain",
        "objects/pack/pack-1.keep",
    ] {
        assert!(
            matches!(
                linked(Path::new(rel), Format::Sha1, LIMIT),
                Linked::LeaveOut
            ),
            "{rel}"
        );
    }
    assert_eq!(
        Mismatch::Unverifiable("a ref").to_string(),
        "a ref cannot be verified"
    );
}
