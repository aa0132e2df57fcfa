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
    ("init::tree::digest::tests::", "../init/src/tree"),
    ("observe::tests::", "../init/src"),
    ("audit::check::tests::", "../host/src/audit"),
    ("audit::export::tests::", "../host/src/audit"),
    ("audit::commit::tests::", "../host/src/audit"),
    ("repo::scratch::tests::", "../repo/src"),
    ("repo::build::tests::", "../repo/src"),
    ("repo::paths::tests::", "../repo/src"),
    ("repo::portable::tests::", "../repo/src"),
    ("repo::special::tests::", "../repo/src"),
    ("repo::tree::tests::", "../repo/src"),
    ("repo::source::tests::", "../repo/src"),
    ("repo::clone::tests::", "../repo/src"),
    ("repo::verify::tests::", "../repo/src"),
    ("audit::reader::tests::", "../host/src/audit"),
    ("audit::inspect::tests::", "../host/src/audit"),
    ("init::tree::inspect_tests::", "../init/src/tree"),
    ("init::tree::content::tests::", "../init/src/tree"),
    ("contract::audit::tests::", "../contract/src"),
    ("validate::policy::tests::", "../host/src/validate"),
    ("procfs::tests::", "../contract/src"),
    ("seccomp::tests::", "../init/src"),
    ("cases::tests::", "../proof/src/gate"),
    ("bench_all::tests::", "../proof/src"),
    ("image::tests::", "../host/src"),
    ("engine::tests::", "../host/src"),
    ("engine::fake_tests::", "../host/src/engine"),
    ("labels::tests::", "../host/src"),
    ("probe::tests::", "../proof/src/gate"),
    ("gate::tests::", "../proof/src/gate"),
    ("contract::probe::tests::", "../contract/src"),
    ("hostile::tests::", "../probes/src"),
    ("probes::relay::tests::", "../probes/src"),
    ("catalogue::tests::", "../contract/src"),
    ("report::tests::", "../contract/src"),
    ("policy::tests::", "../contract/src"),
    ("contract::seccomp::tests::", "../contract/src"),
    ("privileges::tests::", "../init/src"),
    ("profile::tests::", "../host/src"),
    ("uids::tests::", "../host/src"),
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
    ("task::tests::", "../host/src/task"),
    ("invoke::profile::tests::", "../host/src/invoke"),
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
    ("vendor::tests::", "../egress/src"),
    ("usage::tests::", "../egress/src"),
    ("terminate::tests::", "../egress/src"),
    ("vault::tests::", "../egress/src"),
    ("journal::tests::", "../egress/src"),
    ("custody::tests::", "../host/src"),
    ("launch::tests::", "../host/src"),
    ("args::tests::", "../egress/src"),
    ("egress_binary::", "../egress/tests"),
    ("forward::tests::", "../init/src"),
    ("probes::egress::tests::", "../probes/src"),
    ("probes::credential::tests::", "../probes/src"),
    ("contract::credential::tests::", "../contract/src"),
    ("probes::network::tests::", "../probes/src"),
    ("fake_vendor::", "../image/fake-vendor"),
    ("profile::egress::tests::", "../host/src/profile"),
    ("launch::egress::tests::", "../host/src/launch"),
    ("cli_task::", "../cli/tests"),
    ("contract::command::tests::", "../contract/src"),
    ("command::output::tests::", "../host/src/command"),
    ("command::ledger::tests::", "../host/src/command"),
    ("command::stream::tests::", "../host/src/command"),
    ("profile::command::tests::", "../host/src/profile"),
    ("contract::policy::tests::", "../contract/src"),
    ("relay::tests::", "../init/src"),
    ("image::toolchain::tests::", "../host/src/image"),
    ("image::agent::tests::", "../host/src/image"),
    ("mcp::rpc::tests::", "../mcp/src"),
    ("mcp::stdio::tests::", "../mcp/src"),
    ("mcp::main::tests::", "../mcp/src"),
    ("mcp::offered::tests::", "../mcp/src"),
    ("mcp::socket::tests::", "../mcp/src"),
    ("mcp_stdio::", "../mcp/tests"),
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
            // A unit test written with a prefix the table lacks would never be looked for
            // (`::tests::`, or a module of tests of its own such as `fake_tests::`).
            assert!(
                !word
                    .split("::")
                    .skip(1)
                    .any(|m| m == "tests" || m.ends_with("_tests")),
                "docs/gate.md names {word}, whose prefix TEST_FILES does not place"
            );
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

/// The workspace's top-level directories: a backticked path starting with one of them is a
/// repository path, one starting with anything else (`profile/mod.rs` in a table of host/src) is
/// relative to its section.
const TOP_LEVEL: &[&str] = &[
    "contract", "egress", "init", "probes", "host", "cli", "image", "tests", "docs", ".ci",
];

/// The repository paths `text` quotes in inline backticks (fenced blocks are left out): words of a
/// code span made only of path characters, with a slash, whose first component is a top-level
/// directory. A Rust path (`audit::paths`) or a placeholder (`probes/src/<probe>.rs`) is none.
fn quoted_paths(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    let mut paths = Vec::new();
    // A code span never crosses a paragraph: an unpaired backtick upsets only its own.
    for paragraph in prose.split("\n\n") {
        for span in paragraph.split('`').skip(1).step_by(2) {
            for word in span.split_whitespace() {
                let Some((first, _)) = word.split_once('/') else {
                    continue;
                };
                if word.chars().all(path_char) && TOP_LEVEL.contains(&first) {
                    paths.push(word.to_owned());
                }
            }
        }
    }
    paths
}

#[test]
fn quoted_paths_are_repository_paths_only() {
    let text = "`host/src/a.rs` and `audit::paths`, `probes/src/<probe>.rs`, `profile/mod.rs`,\n\
                `cargo test tests/suite/docs.rs`, `docs/`\n\n```\nhost/src/fenced.rs\n```\n";
    assert_eq!(
        quoted_paths(text),
        ["host/src/a.rs", "tests/suite/docs.rs", "docs/"]
    );
}

/// Every repository path README.md and docs/*.md quote exists: a doc that names a file moved
/// or removed is caught here, with every stale path at once.
#[test]
fn docs_quote_only_existing_paths() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = vec![root.join("README.md")];
    let entries = std::fs::read_dir(root.join("docs")).unwrap_or_else(|e| panic!("docs/: {e}"));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("docs/: {e}")).path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs.sort();
    let mut quoted = 0;
    let mut missing = Vec::new();
    for doc in &docs {
        let text =
            std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let name = doc.strip_prefix(&root).unwrap_or(doc).display().to_string();
        for path in quoted_paths(&text) {
            quoted += 1;
            if !root.join(&path).exists() {
                missing.push(format!("{name}: {path}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs quote paths that do not exist:\n{}",
        missing.join("\n")
    );
    assert!(quoted > 20, "the docs quote only {quoted} repository paths");
}
