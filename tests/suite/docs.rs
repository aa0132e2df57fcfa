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

/// Where the tests the doc names live, by the prefix it writes them with: the directory whose
/// sources (searched recursively, so a module's tests may live in a sibling `*_tests.rs`) hold them.
const TEST_FILES: &[(&str, &str)] = &[
    ("cli::", "../cli/tests"),
    ("judge::tests::", "../init/src"),
    ("init::tree::tests::", "../init/src/tree"),
    ("landlock::tests::", "../init/src"),
    ("observe::tests::", "../init/src"),
    ("audit::check::tests::", "../host/src/audit"),
    ("audit::reader::tests::", "../host/src/audit"),
    ("audit::inspect::tests::", "../host/src/audit"),
    ("audit::scratch::tests::", "../host/src/audit"),
    ("audit::build::tests::", "../host/src/audit"),
    ("audit::paths::tests::", "../host/src/audit"),
    ("init::tree::inspect_tests::", "../init/src/tree"),
    ("contract::audit::tests::", "../contract/src"),
    ("validate::policy::tests::", "../host/src/validate"),
    ("procfs::tests::", "../contract/src"),
    ("seccomp::tests::", "../init/src"),
    ("cases::tests::", "../proof/src/gate"),
    ("image::tests::", "../host/src"),
    ("engine::tests::", "../host/src"),
    ("labels::tests::", "../host/src"),
    ("probe::tests::", "../proof/src/gate"),
    ("gate::tests::", "../proof/src/gate"),
    ("contract::probe::tests::", "../contract/src"),
    ("hostile::tests::", "../probes/src"),
    ("catalogue::tests::", "../contract/src"),
    ("report::tests::", "../contract/src"),
    ("policy::tests::", "../contract/src"),
    ("contract::seccomp::tests::", "../contract/src"),
    ("privileges::tests::", "../init/src"),
    ("profile::tests::", "../host/src"),
    ("uids::tests::", "../host/src"),
    ("tree::tests::", "../host/src/task"),
    ("source::tests::", "../host/src/task"),
    ("clone::tests::", "../host/src/task"),
    ("verify::tests::", "../host/src/task"),
    ("caller_file::tests::", "../host/src"),
    ("human::tests::", "../cli/src"),
    ("run::tests::", "../cli/src"),
    ("invoke::claude::tests::", "../host/src/invoke"),
    ("invoke::result::tests::", "../host/src/invoke"),
    ("invoke::schema::tests::", "../host/src/invoke"),
    ("invoke::tests::", "../host/src/invoke"),
    ("error::tests::", "../host/src"),
    ("controller::tests::", "../host/src"),
    ("recover::tests::", "../host/src/task"),
    ("archive::tests::", "../host/src"),
    ("head::tests::", "../egress/src"),
    ("host::tests::", "../egress/src"),
    ("allowlist::tests::", "../egress/src"),
    ("decide::tests::", "../egress/src"),
    ("address::tests::", "../egress/src"),
    ("tls::tests::", "../egress/src"),
    ("proxy::tests::", "../egress/src"),
    ("resolver::tests::", "../egress/src"),
    ("chain::tests::", "../egress/src"),
    ("args::tests::", "../egress/src"),
    ("egress_binary::", "../egress/tests"),
    ("forward::tests::", "../init/src"),
    ("probes::egress::tests::", "../probes/src"),
    ("probes::network::tests::", "../probes/src"),
    ("fake_vendor::", "../image/fake-vendor"),
    ("profile::egress::tests::", "../host/src/profile"),
    ("launch::egress::tests::", "../host/src/launch"),
    ("cli_task::", "../cli/tests"),
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
        let (sources, test) = if let Some(rest) = word.strip_prefix("suite::") {
            let Some((module, test)) = rest.split_once("::") else {
                continue;
            };
            // A module with submodules (`suite::egress::engine::test`) is a directory.
            let dir = root.join("suite").join(module);
            if dir.is_dir() {
                let test = test.rsplit("::").next().unwrap_or(test);
                (rust_sources(&dir), test)
            } else {
                let file = root.join("suite").join(format!("{module}.rs"));
                let source = std::fs::read_to_string(&file).unwrap_or_else(|e| {
                    panic!("docs/gate.md names {word}, but {}: {e}", file.display())
                });
                (vec![source], test)
            }
        } else if let Some((prefix, dir)) = TEST_FILES.iter().find(|(p, _)| word.starts_with(p)) {
            (rust_sources(&root.join(dir)), &word[prefix.len()..])
        } else {
            continue;
        };
        assert!(
            sources.iter().any(|s| s.contains(&format!("fn {test}("))),
            "docs/gate.md names {word}, which does not exist"
        );
        named += 1;
    }
    assert!(named > 20, "docs/gate.md names only {named} tests");
}

/// Every `.rs` file beneath `dir`, read.
fn rust_sources(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            out.extend(rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(
                std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            );
        }
    }
    out
}
