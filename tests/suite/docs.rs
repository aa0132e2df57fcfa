//! docs/gate.md stays true: it names every protection id and every test it points to exists.

use cordon_contract::Id;

fn gate_md() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/gate.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn gate_md_names_every_protection() {
    let text = gate_md();
    for id in Id::ALL {
        assert!(
            text.contains(&format!("`{}`", id.as_str())),
            "docs/gate.md does not name `{id}`"
        );
    }
}

/// Where the tests the doc names live, by the prefix it writes them with.
const TEST_FILES: &[(&str, &str)] = &[
    ("cli::", "../host/tests/cli.rs"),
    ("judge::tests::", "../init/src/judge.rs"),
    ("procfs::tests::", "../contract/src/procfs.rs"),
    ("seccomp::tests::", "../init/src/seccomp.rs"),
    ("cases::tests::", "../host/src/gate/cases.rs"),
    ("image::tests::", "../host/src/image.rs"),
    ("engine::tests::", "../host/src/engine.rs"),
    ("labels::tests::", "../host/src/labels.rs"),
    ("probe::tests::", "../host/src/gate/probe.rs"),
    ("contract::probe::tests::", "../contract/src/probe.rs"),
    ("hostile::tests::", "../probes/src/hostile.rs"),
    ("catalogue::tests::", "../contract/src/catalogue.rs"),
    ("report::tests::", "../contract/src/report.rs"),
    ("policy::tests::", "../contract/src/policy.rs"),
    ("contract::seccomp::tests::", "../contract/src/seccomp.rs"),
    ("privileges::tests::", "../init/src/privileges.rs"),
    ("profile::tests::", "../host/src/profile.rs"),
    ("uids::tests::", "../host/src/uids.rs"),
    ("tree::tests::", "../host/src/task/tree.rs"),
    ("source::tests::", "../host/src/task/source.rs"),
    ("clone::tests::", "../host/src/task/clone.rs"),
    ("caller_file::tests::", "../host/src/caller_file.rs"),
    ("human::tests::", "../host/src/human.rs"),
    ("invoke::claude::tests::", "../host/src/invoke/claude.rs"),
    ("invoke::result::tests::", "../host/src/invoke/result.rs"),
    ("invoke::schema::tests::", "../host/src/invoke/schema.rs"),
    ("invoke::tests::", "../host/src/invoke/mod.rs"),
    ("cli_task::", "../host/tests/cli_task.rs"),
];

/// Every test the doc names (`suite::module::test`, or a unit test by the prefixes above) exists.
#[test]
fn gate_md_names_only_existing_tests() {
    let text = gate_md();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut named = 0;
    let identifier = |w: &str| {
        w.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for word in text.split(|c: char| c.is_whitespace() || c == '`' || c == ',' || c == '|') {
        if !identifier(word) {
            continue;
        }
        let (file, test) = if let Some(rest) = word.strip_prefix("suite::") {
            let Some((module, test)) = rest.split_once("::") else {
                continue;
            };
            (root.join("suite").join(format!("{module}.rs")), test)
        } else if let Some((prefix, file)) = TEST_FILES.iter().find(|(p, _)| word.starts_with(p)) {
            (root.join(file), &word[prefix.len()..])
        } else {
            continue;
        };
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("docs/gate.md names {word}, but {}: {e}", file.display()));
        assert!(
            source.contains(&format!("fn {test}(")),
            "docs/gate.md names {word}, which does not exist"
        );
        named += 1;
    }
    assert!(named > 20, "docs/gate.md names only {named} tests");
}
