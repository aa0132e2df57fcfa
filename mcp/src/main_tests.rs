use super::*;

fn parse(args: &[&str]) -> Result<Args, String> {
    parse_args(args.iter().map(OsString::from))
}

#[test]
fn the_defaults_are_the_contracts_paths() {
    assert_eq!(
        parse(&[]),
        Ok(Args {
            offered: PathBuf::from(OFFERED_FILE),
            socket: PathBuf::from(SOCKET),
        })
    );
    assert_eq!(
        parse(&["--socket", "/tmp/s", "--offered", "/tmp/o.json"]),
        Ok(Args {
            offered: PathBuf::from("/tmp/o.json"),
            socket: PathBuf::from("/tmp/s"),
        })
    );
}

#[test]
fn anything_else_on_the_command_line_is_refused() {
    for args in [
        &["--offered"][..],
        &["--socket", ""],
        &["--offered", "a", "--offered", "b"],
        &["--offered=a"],
        &["--help"],
        &["test"],
        &["--socket", "s", "--", "sh"],
        &["--exec", "/bin/sh"],
    ] {
        assert!(parse(args).is_err(), "{args:?}");
    }
}

/// The server holds no way to start a process: none of its source names one.
#[test]
fn no_source_file_can_start_a_process() {
    let sources = [
        ("main.rs", include_str!("main.rs")),
        ("offered.rs", include_str!("offered.rs")),
        ("rpc.rs", include_str!("rpc.rs")),
        ("socket.rs", include_str!("socket.rs")),
        ("stdio.rs", include_str!("stdio.rs")),
    ];
    let dir = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src")).expect("src");
    let mut on_disk: Vec<String> = dir
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with("_tests.rs"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<&str> = sources.iter().map(|(n, _)| *n).collect();
    listed.sort_unstable();
    assert_eq!(on_disk, listed, "every source file is looked at");
    let spawning = [
        "process::Command",
        "Command::new",
        "CommandExt",
        "fork",
        "exec",
        "spawn",
        "system(",
        "popen",
        "libc::clone",
        "syscall",
        "dlopen",
        "Child",
    ];
    for (name, text) in sources {
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for word in spawning {
            assert!(!code.contains(word), "{name} names {word}");
        }
    }
}
