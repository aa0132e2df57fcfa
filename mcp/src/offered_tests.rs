use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use super::*;
use crate::scratch_tests::Scratch;

const GOOD: &str = r#"[{"name":"test","description":"Run the unit tests"},
    {"name":"fmt-check","description":"Check the formatting"}]"#;

#[test]
fn a_good_list_is_read_in_order() {
    let dir = Scratch::new();
    let path = dir.path().join("commands.json");
    std::fs::write(&path, GOOD).expect("write");
    let offered = load(&path).expect("a good list");
    let names: Vec<&str> = offered.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["test", "fmt-check"]);
    assert_eq!(offered[0].description, "Run the unit tests");
}

#[test]
fn a_link_to_a_good_list_is_refused() {
    let dir = Scratch::new();
    let target = dir.path().join("real.json");
    std::fs::write(&target, GOOD).expect("write");
    let link = dir.path().join("commands.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let error = load(&link).expect_err("a link");
    assert!(error.contains("commands.json"), "{error}");
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = Scratch::new();
    let fifo = dir.path().join("commands.json");
    let c_path = CString::new(fifo.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: mkfifo(3) reads the NUL-terminated path, which lives for the call.
    let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    let started = Instant::now();
    let error = load(&fifo).expect_err("a FIFO");
    assert!(error.contains("not a regular file"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_directory_is_refused() {
    let dir = Scratch::new();
    let error = load(dir.path()).expect_err("a directory");
    assert!(error.contains("not a regular file"), "{error}");
}

#[test]
fn a_missing_file_is_refused() {
    let dir = Scratch::new();
    assert!(load(&dir.path().join("absent.json")).is_err());
}

#[test]
fn an_oversized_file_is_refused() {
    let dir = Scratch::new();
    let path = dir.path().join("commands.json");
    // Valid JSON padded with whitespace past the bound.
    let padded = format!("{GOOD}{}", " ".repeat(MAX_FILE as usize));
    std::fs::write(&path, padded).expect("write");
    let error = load(&path).expect_err("too large");
    assert!(error.contains("at most 65536 bytes"), "{error}");
    std::fs::write(
        &path,
        format!("{GOOD}{}", " ".repeat(MAX_FILE as usize - GOOD.len())),
    )
    .expect("write");
    assert!(load(&path).is_ok(), "exactly the bound is read");
}

#[test]
fn each_bad_list_is_refused() {
    let entry = |name: &str| format!(r#"{{"name":"{name}","description":"d"}}"#);
    let many = format!(
        "[{}]",
        (0..=MAX_COMMANDS)
            .map(|i| entry(&format!("c{i}")))
            .collect::<Vec<_>>()
            .join(",")
    );
    let most = format!(
        "[{}]",
        (0..MAX_COMMANDS)
            .map(|i| entry(&format!("c{i}")))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(parse(most.as_bytes()).map(|o| o.len()), Ok(MAX_COMMANDS));
    let long_description = format!(
        r#"[{{"name":"a","description":"{}"}}]"#,
        "x".repeat(MAX_DESCRIPTION + 1)
    );
    let cases: Vec<(&str, String)> = vec![
        ("a bad name", format!("[{}]", entry("Test"))),
        ("a path as a name", format!("[{}]", entry("../x"))),
        ("an empty name", format!("[{}]", entry(""))),
        ("a name too long", format!("[{}]", entry(&"a".repeat(65)))),
        ("a name twice", format!("[{},{}]", entry("a"), entry("a"))),
        ("too many", many),
        ("none", "[]".into()),
        ("not an array", entry("a")),
        ("an entry as an array", r#"[["a","d"]]"#.into()),
        (
            "an argv",
            r#"[{"name":"a","description":"d","argv":["/bin/sh"]}]"#.into(),
        ),
        ("no description", r#"[{"name":"a"}]"#.into()),
        (
            "an empty description",
            r#"[{"name":"a","description":""}]"#.into(),
        ),
        (
            "a second line",
            r#"[{"name":"a","description":"d\n- b: more"}]"#.into(),
        ),
        (
            "an escape",
            r#"[{"name":"a","description":"\u001b[31m"}]"#.into(),
        ),
        ("a description too long", long_description),
        ("not JSON", "name: test".into()),
        (
            "a lone surrogate",
            r#"[{"name":"a","description":"\udc80"}]"#.into(),
        ),
    ];
    for (what, list) in cases {
        assert!(parse(list.as_bytes()).is_err(), "{what}: {list}");
    }
    assert!(
        parse(b"[{\"name\":\"a\",\"description\":\"\xff\"}]").is_err(),
        "not UTF-8"
    );
}
