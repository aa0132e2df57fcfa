//! The host library's shape stays what docs/architecture.md says: no import circle between its
//! modules, no mutable process-wide state, and a module list that names every module there is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file beneath `dir`, with its path relative to `dir`.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let entries = std::fs::read_dir(&at).unwrap_or_else(|e| panic!("{}: {e}", at.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("{}: {e}", at.display()))
                .path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                out.push((relative, text));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without its unit tests (a `#[cfg(test)]` module is cut where it starts)
/// and without comments.
fn production(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A file of unit tests alone (`tests.rs`, `*_tests.rs`, declared under `#[cfg(test)]`): it may
/// reach across the house (the engine fake's tests drive storage and recovery through it).
fn unit_tests_only(relative: &Path) -> bool {
    relative
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs"))
}

/// The top-level module a file of `host/src` belongs to (`task/clone.rs` is `task`).
fn top_module(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// The top-level modules a piece of code names through `crate::` (in paths and in `use` trees).
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(tree) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the names at depth one.
            let mut depth = 0;
            let mut name = String::new();
            for c in tree.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(std::mem::take(&mut name));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && (c.is_ascii_alphanumeric() || c == '_') && !name.contains(':') {
                    name.push(c);
                } else if depth == 0 && c == ':' {
                    name.push(':');
                }
            }
            out.insert(name);
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out.into_iter()
        .map(|n| n.trim_end_matches(':').to_owned())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

/// The import graph of one crate's `src` between its top-level modules: `crate::` paths, and
/// `super::` in a top-level file (which names a sibling).
fn crate_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, text) in sources(src) {
        let module = top_module(&relative);
        if module == "lib" || module == "main" || unit_tests_only(&relative) {
            continue;
        }
        let code = production(&text);
        let mut refs = crate_references(&code);
        if relative.components().count() == 1 {
            refs.extend(crate_references(&code.replace("super::", "crate::")));
        }
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(refs.into_iter().filter(|r| *r != module));
    }
    graph
}

/// A cycle through `from`, if there is one (depth-first).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == at) {
            let mut found = path[start..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(found) = visit(graph, module, &mut Vec::new(), &mut done) {
            return Some(found);
        }
    }
    None
}

#[test]
fn the_host_modules_import_each_other_without_a_circle() {
    let graph = crate_graph(&root().join("host/src"));
    assert!(graph.len() > 10, "too few modules found: {graph:?}");
    assert_eq!(cycle(&graph), None, "the import graph: {graph:#?}");
    // The bottom of the house imports nothing above it.
    for bottom in ["error", "uids", "archive"] {
        let above: Vec<&String> = graph[bottom].iter().filter(|m| *m != "error").collect();
        assert!(above.is_empty(), "{bottom} imports {above:?}");
    }
    // The finder itself finds a circle when there is one.
    let mut circular = graph.clone();
    circular
        .entry("error".into())
        .or_default()
        .insert("task".into());
    assert!(cycle(&circular).is_some());
    assert_eq!(
        crate_references("use crate::{a, b::{c, d}, e};\ncrate::f::g(); crate::H"),
        BTreeSet::from(["a".into(), "b".into(), "e".into(), "f".into()])
    );
}

/// No crate of the workspace has modules that import each other in a circle.
#[test]
fn no_crate_has_an_import_circle() {
    let root_manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = root_manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace's members");
    let mut looked = 0;
    for member in members.trim_end_matches(']').split(',') {
        let src = root().join(member.trim().trim_matches('"')).join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = crate_graph(&src);
        assert_eq!(cycle(&graph), None, "{}: {graph:#?}", src.display());
        looked += 1;
    }
    assert!(looked >= 9, "only {looked} crates looked at");
    // A sibling named by `super::` in a top-level file is an edge.
    let dir = std::env::temp_dir().join(format!("cordon-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("a.rs"), "use super::b::X;\n").expect("a.rs");
    std::fs::write(dir.join("b.rs"), "use crate::a::Y;\n").expect("b.rs");
    let planted = cycle(&crate_graph(&dir));
    std::fs::remove_dir_all(&dir).expect("removed");
    assert!(
        planted.is_some(),
        "the planted circle a -> b -> a was not found"
    );
}

#[test]
fn no_static_holds_controller_state() {
    let held = [
        "Mutex", "RwLock", "OnceLock", "OnceCell", "LazyLock", "Atomic", "RefCell", "Cell<",
    ];
    for (relative, text) in sources(&root().join("host/src")) {
        for line in production(&text).lines() {
            let line = line.trim_start();
            let is_static = line.starts_with("static ")
                || line.starts_with("pub static ")
                || line.starts_with("pub(crate) static ")
                || line.contains("thread_local!");
            assert!(
                !(is_static && held.iter().any(|h| line.contains(h))),
                "host/src/{}: {line}",
                relative.display()
            );
        }
    }
}

/// The modules `host/src/lib.rs` declares.
fn declared_modules() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root().join("host/src/lib.rs")).expect("host/src/lib.rs");
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect()
}

/// Every module file of the library, as `host/src/...` paths.
fn module_files() -> BTreeSet<String> {
    sources(&root().join("host/src"))
        .into_iter()
        .map(|(relative, _)| format!("host/src/{}", relative.display()))
        .filter(|p| !p.ends_with("_tests.rs") && !p.ends_with("/tests.rs"))
        .collect()
}

#[test]
fn architecture_md_names_every_module_and_only_modules_that_exist() {
    let doc =
        std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    for file in module_files() {
        let short = file.trim_start_matches("host/src/");
        assert!(
            doc.contains(&format!("`{file}`")) || doc.contains(&format!("`{short}`")),
            "docs/architecture.md does not name {file}"
        );
    }
    // Every `host/src/...` path it names is a file.
    for word in doc.split('`').skip(1).step_by(2) {
        if word.starts_with("host/src/") && word.ends_with(".rs") {
            assert!(
                root().join(word).is_file(),
                "docs/architecture.md names {word}, which does not exist"
            );
        }
    }
    // lib.rs lists every top-level module in its docs and declares each.
    let lib = std::fs::read_to_string(root().join("host/src/lib.rs")).expect("host/src/lib.rs");
    let declared = declared_modules();
    let tops: BTreeSet<String> = module_files()
        .iter()
        .map(|f| top_module(Path::new(f.trim_start_matches("host/src/"))))
        .filter(|m| m != "lib")
        .collect();
    assert_eq!(
        declared, tops,
        "host/src/lib.rs declares other modules than there are"
    );
    for module in &declared {
        assert!(
            lib.contains(&format!("[`{module}`]")),
            "host/src/lib.rs does not list {module}"
        );
    }
}

#[test]
fn no_document_refers_to_files_outside_the_repository() {
    let mut docs = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
    {
        docs.push(entry.path());
    }
    for path in docs {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for outside in ["../shared", "../../", "](../", "](/"] {
            assert!(
                !text.contains(outside),
                "{} refers to {outside}",
                path.display()
            );
        }
    }
}

/// The crates a workspace member's manifest names under `[dependencies]` (not dev or build).
fn normal_dependencies(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(manifest)).expect(manifest);
    let normal = text
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_else(|| panic!("{manifest} has no [dependencies]"));
    normal
        .lines()
        .filter_map(|l| l.split(['.', '=', ' ']).next())
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_library_depends_on_no_cli_crate() {
    let names = normal_dependencies("host/Cargo.toml");
    assert!(names.iter().any(|n| n == "bollard"), "{names:?}");
    for cli_only in ["clap", "anyhow", "indicatif", "tracing-subscriber"] {
        assert!(
            !names.iter().any(|n| n == cli_only),
            "the cordon library depends on {cli_only}"
        );
    }
    // Nor on test tooling: the fake vendor (its test CA, its TLS stack) is the proof harness's.
    // rcgen is the library's own (each invocation's CA, `custody.rs`); TLS is the proxy's.
    for proof_only in [
        "cordon-fake-vendor",
        "cordon-proof",
        "rustls",
        "hyper-rustls",
    ] {
        assert!(
            !names.iter().any(|n| n == proof_only),
            "the cordon library depends on {proof_only}"
        );
    }
}

/// The repository side cannot reach the engine: neither it nor the one cordon crate it uses
/// depends on an engine client or on the library.
#[test]
fn the_repository_crate_depends_on_no_engine_crate() {
    let names = normal_dependencies("repo/Cargo.toml");
    assert!(names.iter().any(|n| n == "cordon-contract"), "{names:?}");
    let contract = normal_dependencies("contract/Cargo.toml");
    for engine in [
        "bollard",
        "hyper",
        "hyper-util",
        "hyperlocal",
        "cordon",
        "cordon-egress",
    ] {
        for (crate_name, deps) in [("cordon-repo", &names), ("cordon-contract", &contract)] {
            assert!(
                !deps.iter().any(|n| n == engine),
                "{crate_name} depends on {engine}"
            );
        }
    }
    // Every module of the repository side is in architecture.md and in its lib.rs's list.
    let doc =
        std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let lib = std::fs::read_to_string(root().join("repo/src/lib.rs")).expect("repo/src/lib.rs");
    for (relative, _) in sources(&root().join("repo/src")) {
        let name = relative.display().to_string();
        assert!(
            doc.contains(&format!("`{name}`")) || doc.contains(&format!("`repo/src/{name}`")),
            "docs/architecture.md does not name repo/src/{name}"
        );
        let module = name.trim_end_matches(".rs");
        if !matches!(module, "lib" | "test_repo") && !module.ends_with("_tests") {
            assert!(
                lib.contains(&format!("[`{module}`]")),
                "repo/src/lib.rs does not list {module}"
            );
        }
    }
}

/// architecture.md's table of crates and what each uses is every workspace member's normal
/// dependencies on the workspace's own crates, no more and no fewer; the drawing above it says
/// the same.
#[test]
fn the_crate_drawing_matches_the_manifests() {
    let doc =
        std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let table = doc
        .split("| crate | uses |\n|---|---|\n")
        .nth(1)
        .expect("architecture.md has the table of crates");
    let unquote = |cell: &str| -> Vec<String> {
        cell.split(',')
            .map(|c| c.trim().trim_matches('`').to_owned())
            .filter(|c| !c.is_empty() && c != "nothing")
            .collect()
    };
    let drawn: BTreeMap<String, BTreeSet<String>> = table
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
            let dir = unquote(cells[0]).concat();
            (dir, unquote(cells[1]).into_iter().collect())
        })
        .collect();
    let root_manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members: BTreeSet<String> = root_manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace's members")
        .trim_end_matches(']')
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .collect();
    assert_eq!(
        drawn.keys().cloned().collect::<BTreeSet<_>>(),
        members,
        "the table names every workspace member, and only those"
    );
    let package = |dir: &str| {
        let text = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).expect(dir);
        text.lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').to_owned())
            .expect("a package name")
    };
    let dir_of: BTreeMap<String, String> =
        members.iter().map(|d| (package(d), d.clone())).collect();
    for (dir, uses) in &drawn {
        let actual: BTreeSet<String> = normal_dependencies(&format!("{dir}/Cargo.toml"))
            .iter()
            .filter_map(|n| dir_of.get(n).cloned())
            .collect();
        assert_eq!(&actual, uses, "{dir} uses, by its Cargo.toml");
    }
}
