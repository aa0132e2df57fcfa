//! `cordon task prepare`, `cordon task remove`, `cordon run` and `cordon recover` as processes: a
//! prepare or a run killed with SIGKILL at any point leaves nothing that `cordon recover` (and
//! removing the storage it hands back) does not clear.

// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used)] // a test panics with the failing call in its message

use std::process::{Command, Stdio};
use std::time::Duration;

fn cordon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cordon"))
}

/// `cordon task prepare --json` of `repo` at HEAD for `owner` and `attempt`.
fn prepare(repo: &std::path::Path, owner: &str, attempt: &str) -> Command {
    let mut command = cordon();
    command
        .args(["task", "prepare", "--json", "--repo"])
        .arg(repo)
        .args(["--head", "HEAD", "--owner", owner, "--attempt", attempt]);
    command
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let status = Command::new("git")
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?}");
}

/// A repository big enough that a prepare takes a few seconds (4,000 files, 40 MiB).
fn repository() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cordon-kill-repo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for i in 0..4000u32 {
        let path = dir.join(format!("d{}/f{i}", i % 40));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let content: Vec<u8> = (0..10_240u32)
            .map(|j| ((i * 31 + j * 7) % 251) as u8)
            .collect();
        std::fs::write(path, content).unwrap();
    }
    git(&dir, &["init", "--quiet"]);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "--quiet", "-m", "big"]);
    dir
}

/// Run `command` and require that it succeeded (its stderr is the message otherwise).
fn succeeded(command: &mut Command) -> std::process::Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} / {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn leftovers(owner: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let owned = runtime.block_on(async {
        let engine = cordon::Engine::connect().await.expect("the Docker engine");
        cordon::engine::objects::list_owned(&engine, &cordon::labels::Owner::new(owner).unwrap())
            .await
            .unwrap()
    });
    let mut left: Vec<String> = owned.described();
    let prefix = format!("cordon-stage-{owner}-");
    for root in cordon::repo::clone::staging_roots() {
        let Ok(listing) = std::fs::read_dir(root) else {
            continue;
        };
        left.extend(
            listing
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix)),
        );
    }
    left
}

#[test]
fn killed_prepare_then_recover_leaves_nothing() {
    let repo = repository();
    // Warm the image so the kills land in staging, allocation and seeding, not in the build.
    assert!(cordon()
        .args(["image", "build", "--json"])
        .output()
        .unwrap()
        .status
        .success());
    let owner = format!("t-kill-{}", std::process::id());
    for delay_ms in [150u64, 600, 1200, 2000, 3000, 4500] {
        let mut child = prepare(&repo, &owner, &format!("kill-{delay_ms}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
    }
    let recovered = succeeded(cordon().args(["recover", "--json", "--owner", &owner]));
    let report = json(&recovered);
    eprintln!("recovery report: {report}");
    for handle in report["storage"].as_array().unwrap() {
        succeeded(cordon().args(["task", "remove", &handle.to_string()]));
    }
    let left = leftovers(&owner);
    let _ = std::fs::remove_dir_all(&repo);
    assert!(
        left.is_empty(),
        "left behind after recovery: {left:?} (report {report})"
    );
}

#[test]
fn remove_by_allocation_and_owner() {
    let dir = std::env::temp_dir().join(format!("cordon-rm-repo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("README"), "r\n").unwrap();
    git(&dir, &["init", "--quiet"]);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "--quiet", "-m", "r"]);
    let owner = format!("t-rm-{}", std::process::id());
    let allocation = uuid_v4();
    let out = succeeded(prepare(&dir, &owner, "a").args(["--allocation", &allocation]));
    assert_eq!(json(&out)["allocation"], allocation.as_str());
    // A second process cannot take the same id while the storage exists.
    let again = prepare(&dir, &owner, "b")
        .args(["--allocation", &allocation])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(json(&again)["error"], "allocation-in-use");
    // Another owner's name does not reach it.
    let wrong = cordon()
        .args([
            "task",
            "remove",
            "--json",
            "--allocation",
            &allocation,
            "--owner",
            &format!("{owner}-other"),
        ])
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    assert_eq!(json(&wrong)["error"], "invalid-input");
    // By the id alone: the owner is the one all its objects name.
    succeeded(cordon().args(["task", "remove", "--allocation", &allocation]));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(leftovers(&owner).is_empty());
}

/// `cordon audit check-tree` and `cordon audit snapshot-links` on a handle `cordon task prepare`
/// printed: the check passes at the seeded head and is refused at another base (exit 1,
/// `tree-refused`, `needs_person`); the snapshot names what each declared path is.
#[test]
fn audit_checks_and_snapshots_a_prepared_handle() {
    let repo = small_repository("audit");
    std::os::unix::fs::symlink("src/lib.rs", repo.join("lib")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "--quiet", "-m", "link"]);
    let owner = format!("t-audit-{}", std::process::id());
    let handle = json(&succeeded(&mut prepare(&repo, &owner, "a")));
    let file = repo.with_extension("handle.json");
    std::fs::write(&file, handle.to_string()).unwrap();
    let at = format!("@{}", file.display());
    let head = handle["head"].as_str().unwrap().to_owned();
    let check = json(&succeeded(cordon().args([
        "audit",
        "check-tree",
        "--json",
        &at,
        "--base",
        &head,
    ])));
    assert_eq!(check["head"], head.as_str(), "{check}");
    assert_eq!(check["entries"], 3, "{check}");
    let other = cordon()
        .args([
            "audit",
            "check-tree",
            "--json",
            &at,
            "--base",
            "0123456789abcdef0123456789abcdef01234567",
        ])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(1));
    let refused = json(&other);
    assert_eq!(refused["error"], "tree-refused", "{refused}");
    assert_eq!(refused["needs_person"], true, "{refused}");
    assert_eq!(refused["findings"][0]["reason"], "head-moved", "{refused}");
    let snapshot = json(&succeeded(cordon().args([
        "audit",
        "snapshot-links",
        "--json",
        &at,
        "--path",
        "lib",
        "--path",
        "README.md",
    ])));
    assert_eq!(snapshot["links"][0]["kind"], "link", "{snapshot}");
    assert_eq!(snapshot["links"][0]["resolved"], "src/lib.rs", "{snapshot}");
    assert_eq!(snapshot["links"][1]["kind"], "file", "{snapshot}");
    succeeded(cordon().args(["task", "remove", &at]));
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
}

fn uuid_v4() -> String {
    let bytes = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap();
    bytes.trim().to_owned()
}

/// A small committed repository.
fn small_repository(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cordon-{tag}-repo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("README.md"), "# run\n").unwrap();
    std::fs::write(dir.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    git(&dir, &["init", "--quiet"]);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "--quiet", "-m", "r"]);
    dir
}

fn run_command(repo: &std::path::Path, owner: &str, prompt: &str) -> Command {
    run_with(repo, owner, prompt, "test")
}

fn run_with(repo: &std::path::Path, owner: &str, prompt: &str, vendor: &str) -> Command {
    let mut command = cordon();
    command
        .args([
            "run",
            "--json",
            "--vendor",
            vendor,
            "--phase",
            "questions",
            "--repo",
        ])
        .arg(repo)
        .args(["--owner", owner, "--prompt", prompt]);
    command
}

/// The README's first thing to try: a settled, attested result, and nothing left.
#[test]
fn run_prints_a_settled_attested_result() {
    let repo = small_repository("run");
    let owner = format!("t-run-{}", std::process::id());
    let out = succeeded(run_command(&repo, &owner, "hello").args(["--code-hash", "c0ffee"]));
    let report = json(&out);
    let result = &report["result"];
    assert_eq!(
        result["answer"],
        "fake answer: 5 bytes of prompt; allowed tools: Read,Glob,Grep"
    );
    assert_eq!(result["referenced_code_hash"], "c0ffee");
    assert!(result["attestation"]["policy_digest"]
        .as_str()
        .is_some_and(|d| d.starts_with("sha256:")));
    assert_eq!(report["storage_left"], serde_json::Value::Null);
    // Codex is refused before anything is prepared.
    let codex = run_with(&repo, &owner, "hello", "codex").output().unwrap();
    assert_eq!(codex.status.code(), Some(2));
    assert_eq!(json(&codex)["error"], "vendor-refused");
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
}

/// `cordon run --phase execute` checks the tree before the start (the declared operations
/// against base) and puts the check in its result; a refused tree is a refusal (exit 1,
/// `tree-refused`, `needs_person`, every finding), not a failure; nothing is left either way.
/// `cordon run --json` of an execute phase with `prompt` on `repo`, committing what it changed
/// into `bundle` with fixed identities and the message in `message`.
fn run_and_commit(
    repo: &std::path::Path,
    owner: &str,
    prompt: &str,
    message: &std::path::Path,
    bundle: &std::path::Path,
) -> Command {
    let mut command = cordon();
    command
        .args([
            "run", "--json", "--vendor", "test", "--phase", "execute", "--repo",
        ])
        .arg(repo)
        .args([
            "--owner",
            owner,
            "--prompt",
            prompt,
            "--commit",
            "--author",
            "A <a@example.org> 1700000000 +0000",
            "--committer",
            "C <c@example.org> 1700000000 +0000",
            "--message-file",
        ])
        .arg(message)
        .arg("--bundle")
        .arg(bundle);
    command
}

#[test]
fn run_execute_checks_the_tree_and_reports_a_refusal_as_such() {
    let repo = small_repository("run-execute");
    let owner = format!("t-run-execute-{}", std::process::id());
    let ops = repo.with_extension("ops.json");
    let execute = |ops_text: &str| {
        std::fs::write(&ops, ops_text).unwrap();
        let mut command = cordon();
        command
            .args([
                "run", "--json", "--vendor", "test", "--phase", "execute", "--repo",
            ])
            .arg(&repo)
            .args(["--owner", &owner, "--prompt", "hello", "--ops"])
            .arg(&ops);
        command.output().unwrap()
    };
    let ran = execute(r#"[{"kind":"add","path":"src/new.rs"},{"kind":"edit","path":"README.md"}]"#);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let report = json(&ran);
    assert!(report["result"]["answer"].is_string(), "{report}");
    let check = &report["tree_check"];
    assert_eq!(check["gitlinks"], serde_json::json!([]), "{report}");
    assert_eq!(check["pins"], serde_json::json!([]), "{report}");
    assert_eq!(check["entries"], 2, "{report}");
    assert!(
        check["head"].as_str().is_some_and(|h| h.len() == 40),
        "{report}"
    );
    // After the run, the change manifest: nothing changed, nothing needs a person.
    let audit = &report["audit"];
    assert_eq!(
        audit["manifest"]["changes"],
        serde_json::json!([]),
        "{report}"
    );
    assert_eq!(audit["needs_person"], false, "{report}");
    // A run that writes a file: the manifest lists it with git's blob id of its bytes.
    std::fs::write(&ops, "[]").unwrap();
    let wrote = cordon()
        .args([
            "run", "--json", "--vendor", "test", "--phase", "execute", "--repo",
        ])
        .arg(&repo)
        .args([
            "--owner",
            &owner,
            "--prompt",
            r#"cordon-fake:script [{"write":["new.txt","new\n"]}]"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        wrote.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&wrote.stderr)
    );
    let wrote = json(&wrote);
    let changes = &wrote["audit"]["manifest"]["changes"];
    let diff = wrote["audit"]["export"]["diff"]
        .as_str()
        .unwrap_or_default();
    assert!(diff.contains("+new"), "{wrote}");
    assert_eq!(changes[0]["path"], "new.txt", "{wrote}");
    // `printf 'new\n' | git hash-object --stdin`
    assert_eq!(
        changes[0]["new"]["blob"], "3e757656cf36eca53338e520d134963a44f793f8",
        "{wrote}"
    );
    // With --commit: the manifest committed as a bundle with one ref at head.
    let message = repo.with_extension("message.txt");
    std::fs::write(&message, "the agent's change\n").unwrap();
    let bundle = repo.with_extension("bundle");
    let committed = run_and_commit(
        &repo,
        &owner,
        r#"cordon-fake:script [{"write":["new.txt","new\n"]}]"#,
        &message,
        &bundle,
    )
    .args(["--trailer", "Attempt=1"])
    .output()
    .unwrap();
    assert_eq!(
        committed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&committed.stderr)
    );
    let committed = json(&committed);
    let head = committed["audit"]["commit"]["head"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(head.len(), 40, "{committed}");
    assert_eq!(
        committed["audit"]["commit"]["unchanged"], false,
        "{committed}"
    );
    let heads = std::process::Command::new("git")
        .args(["bundle", "list-heads"])
        .arg(&bundle)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&heads.stdout).trim(),
        format!("{head} refs/heads/cordon")
    );
    let _ = std::fs::remove_file(&bundle);
    // A run that gives no answer (the agent exits 3) is never committed, and says why.
    let unanswered = run_and_commit(&repo, &owner, "cordon-fake:exit-3", &message, &bundle)
        .output()
        .unwrap();
    let unanswered = json(&unanswered);
    assert!(unanswered["audit"]["commit"].is_null(), "{unanswered}");
    assert_eq!(
        unanswered["audit"]["not_committed"]["id"], "commit-not-made",
        "{unanswered}"
    );
    assert_eq!(
        unanswered["audit"]["not_committed"]["reason"], "run-not-answered",
        "{unanswered}"
    );
    let detail = unanswered["audit"]["not_committed"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.contains("exited 3"), "{unanswered}");
    assert!(!bundle.exists());
    let _ = std::fs::remove_file(&message);
    let refused = execute(r#"[{"kind":"add","path":"README.md"},{"kind":"edit","path":"src"}]"#);
    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let answer = json(&refused);
    assert_eq!(answer["error"], "tree-refused", "{answer}");
    assert_eq!(answer["needs_person"], true, "{answer}");
    assert_eq!(
        answer["findings"],
        serde_json::json!([
            {"path": "README.md", "reason": "destination-taken", "detail": answer["findings"][0]["detail"]},
            {"path": "src", "reason": "source-not-file", "detail": answer["findings"][1]["detail"]},
        ]),
        "{answer}"
    );
    let _ = std::fs::remove_file(&ops);
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
}

/// The README's first thing to try after the gate: the real CLI (the pinned one, in the agent
/// image) against the fake Messages API, settled and attested; the CLI reached only its API host,
/// through the proxy; nothing is left.
#[test]
fn run_with_the_real_cli_against_the_fake_vendor() {
    let repo = small_repository("run-real");
    let owner = format!("t-run-real-{}", std::process::id());
    let out = succeeded(run_with(&repo, &owner, "hello", "claude").arg("--fake-vendor"));
    let result = &json(&out)["result"];
    assert!(
        result["answer"]
            .as_str()
            .is_some_and(|a| a.starts_with("read ")),
        "{result}"
    );
    assert_eq!(result["attestation"]["egress_forward"], 3128, "{result}");
    // The default allowlist is exact names: nothing to warn of.
    assert_eq!(json(&out)["warnings"], serde_json::json!([]));
    let requests = result["vendor_log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l.get("messages_request").is_some())
        .count();
    assert!(requests >= 3, "Glob, Read, the answer: {result}");
    for line in result["egress_log"].as_array().unwrap() {
        if line["egress"] == "tunnel" {
            assert_eq!(line["target"], "api.anthropic.com:443", "{line}");
        }
    }
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
}

/// `--allow` gives the run a network and a proxy of its own (the fake CLI dials nothing): the
/// init attests its forwarder, and the proxy and network go with the run.
#[test]
fn run_with_an_allowlist_has_its_own_proxy_and_leaves_nothing() {
    let repo = small_repository("run-egress");
    let owner = format!("t-run-egress-{}", std::process::id());
    let out = succeeded(run_command(&repo, &owner, "hello").args([
        "--allow",
        "api.vendor.test",
        "--map",
        "api.vendor.test=127.0.0.1:9",
    ]));
    let result = &json(&out)["result"];
    assert!(result["answer"].is_string(), "{result}");
    assert_eq!(result["attestation"]["egress_forward"], 3128, "{result}");
    // Exact names only: nothing to warn of.
    assert_eq!(json(&out)["warnings"], serde_json::json!([]));
    // An entry not written canonically is refused (at capture: the storage goes too).
    let odd = run_command(&repo, &owner, "hello")
        .args(["--allow", "API.vendor.test"])
        .output()
        .unwrap();
    assert_eq!(odd.status.code(), Some(2));
    assert_eq!(json(&odd)["error"], "invalid-input");
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
}

/// A wildcard allowlist entry lets the agent choose labels the proxy's resolver is asked: `cordon
/// run` warns of it (`egress-wildcard`, a line on stderr and an entry in `--json`'s `warnings`),
/// and only then.
#[test]
fn run_warns_of_a_wildcard_allowlist_entry_and_only_then() {
    let repo = small_repository("run-wildcard");
    let owner = format!("t-run-wildcard-{}", std::process::id());
    // Text: the warning comes before anything is made (codex is refused before that).
    let text = |allow: &str| {
        let out = cordon()
            .args(["run", "--vendor", "codex", "--phase", "questions", "--repo"])
            .arg(&repo)
            .args(["--owner", &owner, "--prompt", "hello", "--allow", allow])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warned = text("*.vendor.test");
    assert!(
        warned.contains("warning[egress-wildcard]") && warned.contains("*.vendor.test"),
        "{warned}"
    );
    let quiet = text("api.vendor.test");
    assert!(!quiet.contains("egress-wildcard"), "{quiet}");
    // JSON: a whole run (the fake CLI dials nothing), the warning naming its entry.
    let out = succeeded(run_command(&repo, &owner, "hello").args([
        "--allow",
        "api.vendor.test",
        "--allow",
        "*.vendor.test:8443",
        "--map",
        "api.vendor.test=127.0.0.1:9",
    ]));
    let report = json(&out);
    assert!(report["result"]["answer"].is_string(), "{report}");
    let warnings = report["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{report}");
    assert_eq!(warnings[0]["id"], "egress-wildcard", "{report}");
    assert_eq!(
        warnings[0]["entries"],
        serde_json::json!(["*.vendor.test:8443"])
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning[egress-wildcard]"));
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
}

/// The controller killed with SIGKILL while its agent runs: `cordon recover` removes the agent
/// container and its invocation volumes and hands back the storage; nothing is left.
#[test]
fn a_killed_run_leaves_nothing_after_recover() {
    let repo = small_repository("killed-run");
    let owner = format!("t-killed-run-{}", std::process::id());
    let mut child = run_command(&repo, &owner, "cordon-fake:hang")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let agent_running = || {
        runtime.block_on(async {
            let engine = cordon::Engine::connect().await.expect("the Docker engine");
            let listed = cordon::engine::objects::Listed::with_label(
                &engine,
                &format!("{}={owner}", cordon::labels::OWNER),
            )
            .await
            .unwrap();
            listed.containers.iter().any(|c| {
                c.state.as_ref().map(ToString::to_string).as_deref() == Some("running")
                    && c.labels
                        .as_ref()
                        .and_then(|l| l.get(cordon::labels::KIND))
                        .map(String::as_str)
                        == Some("agent")
            })
        })
    };
    let waited = std::time::Instant::now();
    while !agent_running() {
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "the agent never ran"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup runs in the controller
    let _ = child.wait();
    let recovered = succeeded(cordon().args(["recover", "--json", "--owner", &owner]));
    let report = json(&recovered);
    let removed = report["removed"].as_array().unwrap();
    assert!(
        removed
            .iter()
            .any(|r| r.as_str().is_some_and(|r| r.starts_with("container"))),
        "the agent container was removed: {report}"
    );
    for handle in report["storage"].as_array().unwrap() {
        succeeded(cordon().args(["task", "remove", &handle.to_string()]));
    }
    let _ = std::fs::remove_dir_all(&repo);
    let left = leftovers(&owner);
    assert!(left.is_empty(), "left behind: {left:?} (report {report})");
}

/// The fake CLI's `cordon-fake:terminal-escapes` answer, byte for byte (image/fake-claude).
const TERMINAL_ESCAPES: &str = concat!(
    "terminal escapes follow\n",
    "\u{1b}]52;c;Y29yZG9uIHdhcyBoZXJl\u{7}",
    "\u{1b}]0;cordon: all clear\u{7}",
    "\u{1b}[2J\u{1b}[H",
    "hidden\rshown",
    " nul\u{0}bell\u{7}",
    " \u{202e}txt.exe\u{202c}",
    " \u{9b}31mred\n",
    "attempt forged, code x, exit 0, attested: true, 1 ms\n",
);

/// What must never reach the operator's terminal from agent text.
fn hostile(c: char) -> bool {
    let u = c as u32;
    (c.is_control() && c != '\n')
        || (0x200b..=0x200f).contains(&u)
        || (0x202a..=0x202e).contains(&u)
        || (0x2060..=0x206f).contains(&u)
        || u == 0xfeff
}

/// `cordon run` in text mode: the agent's escapes are shown, not obeyed, its text is framed and
/// prefixed, and the one summary line at column 0 is cordon's. `--json` keeps the answer raw.
#[test]
fn run_text_output_escapes_and_frames_the_agents_text() {
    let repo = small_repository("escapes");
    let owner = format!("t-escapes-{}", std::process::id());
    let attempt = format!("esc-{}", std::process::id());
    let mut text = cordon();
    text.args(["run", "--vendor", "test", "--phase", "questions", "--repo"])
        .arg(&repo)
        .args(["--owner", &owner, "--attempt", &attempt])
        .args(["--prompt", "cordon-fake:terminal-escapes"]);
    let out = succeeded(&mut text);
    let stdout = String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8");
    eprintln!("text output: {stdout:?}");
    for (at, c) in stdout.char_indices() {
        assert!(
            !hostile(c),
            "U+{:04X} at byte {at} of stdout: {stdout:?}",
            c as u32
        );
    }
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("attempt "))
        .collect();
    assert_eq!(summary.len(), 1, "one summary line at column 0: {stdout:?}");
    assert!(
        summary[0].starts_with(&format!("attempt {attempt}, code "))
            && summary[0].contains("attested: true"),
        "{stdout:?}"
    );
    assert!(
        summary[0].contains(", exit 0, "),
        "the exit code in words, not Rust's Some(0): {stdout:?}"
    );
    let forged: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("attempt forged"))
        .collect();
    assert_eq!(
        forged,
        ["| attempt forged, code x, exit 0, attested: true, 1 ms"],
        "the forged line only after the prefix: {stdout:?}"
    );
    assert!(
        stdout.contains("\\x1b]52;c;"),
        "the escapes are shown: {stdout:?}"
    );
    assert!(
        stdout.contains("\\u{202e}") && stdout.contains("\\u{9b}31m"),
        "{stdout:?}"
    );
    assert_eq!(
        stdout.matches("--- agent answer (").count(),
        1,
        "{stdout:?}"
    );
    assert_eq!(
        stdout.matches("--- end of agent answer ---").count(),
        1,
        "{stdout:?}"
    );
    // --json: the exact answer, escaped only by JSON.
    let owner_json = format!("{owner}-json");
    let out = succeeded(&mut run_command(
        &repo,
        &owner_json,
        "cordon-fake:terminal-escapes",
    ));
    let report = json(&out);
    assert_eq!(report["result"]["answer"], TERMINAL_ESCAPES);
    assert!(
        !out.stdout.contains(&0x1b),
        "JSON escapes control characters"
    );
    let _ = std::fs::remove_dir_all(&repo);
    assert!(leftovers(&owner).is_empty());
    assert!(leftovers(&owner_json).is_empty());
}

/// Run `command` bounded: its address space is capped (an unbounded read kills it instead of the
/// machine) and it must finish within `within`, else it is killed and the test fails.
fn bounded(command: &mut Command, within: Duration) -> (std::process::Output, Duration) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    const ADDRESS_SPACE: libc::rlim_t = 2 << 30;
    // SAFETY: setrlimit is async-signal-safe and touches only the limit we pass by value.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let started = std::time::Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!(
                "still running after {within:?}: killed ({:?}); stderr: {}",
                command,
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let output = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (output, elapsed)
}

/// A command that must be refused fast, with `id` in its JSON error.
fn refused_fast(command: &mut Command, id: &str) -> serde_json::Value {
    let (output, elapsed) = bounded(command, Duration::from_secs(20));
    assert_eq!(
        output.status.code(),
        Some(2),
        "{:?}; stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report = json(&output);
    assert_eq!(report["error"], id, "{report}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    report
}

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo touches no memory of ours.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn run_prompt_file(repo: &std::path::Path, owner: &str, file: &std::path::Path) -> Command {
    let mut command = cordon();
    command
        .args(["run", "--json", "--vendor", "test", "--phase", "questions"])
        .arg("--repo")
        .arg(repo)
        .args(["--owner", owner, "--prompt-file"])
        .arg(file);
    command
}

/// `--prompt-file` names a device, a FIFO, or too much: refused at once, nothing prepared.
#[test]
fn run_refuses_a_prompt_file_that_is_not_a_bounded_regular_file() {
    let repo = small_repository("prompt-file");
    let owner = format!("t-prompt-file-{}", std::process::id());
    let report = refused_fast(
        &mut run_prompt_file(&repo, &owner, std::path::Path::new("/dev/zero")),
        "input-not-regular",
    );
    assert!(
        report["message"]
            .as_str()
            .is_some_and(|m| m.contains("/dev/zero") && m.contains("character device")),
        "{report}"
    );
    let dir = std::env::temp_dir().join(format!("cordon-prompt-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("prompt.fifo");
    mkfifo(&fifo);
    let report = refused_fast(
        &mut run_prompt_file(&repo, &owner, &fifo),
        "input-not-regular",
    );
    assert!(
        report["message"]
            .as_str()
            .is_some_and(|m| m.contains("a FIFO")),
        "{report}"
    );
    let big = dir.join("prompt.txt");
    std::fs::write(
        &big,
        vec![b'a'; cordon::invoke::claude::MAX_PROMPT_BYTES + 1],
    )
    .unwrap();
    refused_fast(&mut run_prompt_file(&repo, &owner, &big), "input-too-large");
    std::fs::write(&big, b"not \xff UTF-8").unwrap();
    refused_fast(&mut run_prompt_file(&repo, &owner, &big), "input-not-utf8");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&repo);
    let left = leftovers(&owner);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `cordon task remove @FILE` reads a handle only from a bounded regular file.
#[test]
fn task_remove_refuses_a_handle_file_that_is_a_fifo_or_a_device() {
    let dir = std::env::temp_dir().join(format!("cordon-handle-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("handle.fifo");
    mkfifo(&fifo);
    for file in [fifo.to_string_lossy().into_owned(), "/dev/zero".to_owned()] {
        refused_fast(
            cordon().args(["task", "remove", "--json", &format!("@{file}")]),
            "input-not-regular",
        );
    }
    let big = dir.join("handle.json");
    std::fs::write(&big, vec![b' '; 64 * 1024 + 1]).unwrap();
    refused_fast(
        cordon().args(["task", "remove", "--json", &format!("@{}", big.display())]),
        "input-too-large",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--command-file` in a phase that runs no process, a file that is not JSON commands, a FIFO:
/// each refused at once with its id, nothing prepared.
#[test]
fn run_refuses_approved_commands_where_no_process_runs_and_bad_command_files() {
    let repo = small_repository("command-file");
    let owner = format!("t-command-file-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("cordon-command-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("commands.json");
    std::fs::write(
        &file,
        serde_json::json!([{
            "name": "test", "description": "the tests", "argv": ["/bin/sh", "-c", "make test"],
            "image": "toolchain:1", "env": [], "workdir": "/work", "deadline_secs": 60,
            "output_bytes": 65536, "scratch": { "bytes": 1048576, "inodes": 64 }, "runs": 2,
            "writes": "none"
        }])
        .to_string(),
    )
    .unwrap();
    let run = |file: &std::path::Path| {
        let mut command = cordon();
        command
            .args(["run", "--json", "--vendor", "test", "--phase", "questions"])
            .arg("--repo")
            .arg(&repo)
            .args(["--owner", &owner, "--prompt", "hello", "--command-file"])
            .arg(file);
        command
    };
    // Questions (the helper's phase) refuses any list.
    let report = refused_fast(&mut run(&file), "invalid-input");
    assert!(
        report["message"]
            .as_str()
            .is_some_and(|m| m.contains("questions runs no process")),
        "{report}"
    );
    std::fs::write(&file, br#"[{"name":"test"}]"#).unwrap();
    let report = refused_fast(&mut run(&file), "invalid-input");
    assert!(
        report["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a JSON array of approved commands")),
        "{report}"
    );
    let fifo = dir.join("commands.fifo");
    mkfifo(&fifo);
    refused_fast(&mut run(&fifo), "input-not-regular");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&repo);
    let left = leftovers(&owner);
    assert!(left.is_empty(), "left behind: {left:?}");
}
