//! Approved commands through real containers: the agent's MCP server, the commands volume it
//! mounts read-only, the relay, and the controller's side of the relay.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::query_parameters::{AttachContainerOptions, UploadToContainerOptions};
use cordon::command::relay::{self, Relay};
use cordon::engine::{objects, pending};
use cordon::labels::Kind;
use cordon::profile::{helper_body, volume_mount};
use cordon_contract::command::{self, Answer, CallRefusal, Ran, ToHost};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

/// Read stdout lines from an attached stream until `count` lines came (or it ended).
async fn lines<S>(output: &mut S, count: usize) -> Vec<serde_json::Value>
where
    S: futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
{
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < count {
        if let Some(at) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            out.push(serde_json::from_slice(&line[..at]).expect("a JSON line"));
            continue;
        }
        match tokio::time::timeout(Duration::from_secs(60), output.next()).await {
            Ok(Some(Ok(LogOutput::StdOut { message }))) => buf.extend_from_slice(&message),
            Ok(Some(Ok(LogOutput::StdErr { message }))) => {
                eprintln!("client stderr: {}", String::from_utf8_lossy(&message));
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("the client's stream ended after {out:?}: {other:?}"),
        }
    }
    out
}

/// A call from the agent's MCP server travels over the read-only mounted socket to the relay and
/// to the controller, and the controller's answer back, in real containers on no network; a name
/// that is not offered never leaves the server; the relay ends when the controller closes it; and
/// nothing is left.
#[tokio::test]
async fn a_call_reaches_the_controller_through_the_relay_and_its_answer_comes_back() {
    let owned = cordon_tests::owned("relay").await;
    let engine = owned.engine.clone();
    let allocation = cordon::storage::new_allocation(&engine, &owned.owner, "test")
        .await
        .unwrap();
    let mut created = pending::Created::default();
    let record = created.shared();
    let (volume, relay_id) = relay::create(&engine, &allocation, &owned.image, None, &record)
        .await
        .expect("the relay");
    let mut relay = Relay::start(&engine, &relay_id).await.expect("listening");

    // The offered list, written through the relay's writable mount (the agent's comes in its
    // input dir; the server reads any path it is given).
    let offered = br#"[{"name":"test","description":"Run the tests"}]"#;
    let mut tar = cordon::archive::Archive::in_memory(allocation.uid.get(), "offered");
    tar.file("offered.json", 0o444, offered).unwrap();
    engine
        .docker()
        .upload_to_container(
            &relay_id,
            Some(UploadToContainerOptions {
                path: command::SOCKET_DIR.to_owned(),
                ..Default::default()
            }),
            bollard::body_full(tar.finish().unwrap().into()),
        )
        .await
        .expect("upload");

    // The agent's side: the MCP server alone, the commands directory read-only.
    let mut body = helper_body(
        &owned.image,
        &allocation,
        Kind::Agent,
        vec![
            command::MCP_SERVER.to_owned(),
            "--offered".to_owned(),
            format!("{}/offered.json", command::SOCKET_DIR),
        ],
        vec![volume_mount(&volume, command::SOCKET_DIR, true, None)],
    );
    body.open_stdin = Some(true);
    body.attach_stdin = Some(true);
    body.stdin_once = Some(true);
    let client = objects::create_container(&engine, &allocation.name(Kind::Agent), body, &record)
        .await
        .expect("client");
    let mut attached = engine
        .docker()
        .attach_container(
            &client,
            Some(AttachContainerOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                stream: true,
                logs: false,
                detach_keys: None,
            }),
        )
        .await
        .unwrap();
    objects::start_container(&engine, "client", &client)
        .await
        .unwrap();
    let session = concat!(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"lint"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"}}}"#,
        "\n",
    );
    attached.input.write_all(session.as_bytes()).await.unwrap();
    attached.input.flush().await.unwrap();

    // The one call that leaves the server: `test`, numbered 1.
    let call = tokio::time::timeout(Duration::from_secs(60), relay.next())
        .await
        .expect("a call in time")
        .expect("the relay's line");
    let Some(ToHost::Call { seq, call }) = call else {
        panic!("{call:?} ({})", relay.diagnostic())
    };
    assert_eq!((seq, call.name.as_str()), (1, "test"));
    relay
        .answer(
            seq,
            &Answer::Ran(Ran {
                name: "test".into(),
                exit: Some(0),
                signal: None,
                timed_out: false,
                duration_ms: 42,
                output_bytes: 9,
                output: "all green".into(),
                truncated: false,
            }),
        )
        .await
        .unwrap();
    let replies = lines(&mut attached.output, 3).await;
    assert_eq!(replies[0]["id"], 0);
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-11-25");
    let refused = replies[1]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(refused.starts_with("command-unknown"), "{refused}");
    assert_eq!(replies[1]["result"]["isError"], true);
    let ran = replies[2]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(ran.starts_with("exit 0 after 42 ms"), "{ran}");
    assert!(ran.ends_with("all green"), "{ran}");
    assert_eq!(replies[2]["result"]["isError"], false);

    // A second call, refused by the controller: the refusal's id reaches the model.
    attached
        .input
        .write_all(
            concat!(
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"}}}"#,
                "\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let Ok(Some(ToHost::Call { seq, .. })) = relay.next().await else {
        panic!("no second call ({})", relay.diagnostic())
    };
    assert_eq!(seq, 2);
    relay
        .answer(
            seq,
            &Answer::Refused {
                refusal: CallRefusal::CommandExhausted,
                expected: "at most 1 runs".into(),
                observed: "run 2".into(),
            },
        )
        .await
        .unwrap();
    let replies = lines(&mut attached.output, 1).await;
    let text = replies[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("command-exhausted"), "{text}");

    // The server ends with its stdin; the relay with the controller's.
    attached.input.shutdown().await.unwrap();
    relay.close().await.unwrap();
    for (what, id) in [("client", &client), ("relay", &relay_id)] {
        let mut wait = engine.docker().wait_container(id, None);
        let code = tokio::time::timeout(Duration::from_secs(30), wait.next())
            .await
            .unwrap_or_else(|_| panic!("{what} did not end"))
            .map(|r| r.map(|w| w.status_code));
        assert!(matches!(code, Some(Ok(0))), "{what}: {code:?}");
    }
    created
        .remove_all(&engine, Duration::from_secs(30))
        .await
        .expect("removal");
    owned.finish().await;
}

/// An approved command of the test image's probe: `cordon-probe workload ARGS...`.
fn probe_command(name: &str, writes: command::Writes, args: &[&str]) -> command::ApprovedCommand {
    let mut argv = vec![
        cordon_contract::paths::PROBE.to_owned(),
        "workload".to_owned(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    command::ApprovedCommand {
        name: name.to_owned(),
        description: "a probe".to_owned(),
        argv,
        image: "cordon-test".to_owned(),
        env: vec![("CORDON_TEST".to_owned(), "1".to_owned())],
        workdir: cordon_contract::paths::WORK.to_owned(),
        deadline_secs: 60,
        output_bytes: 64 * 1024,
        scratch: command::Scratch {
            bytes: 64 << 20,
            inodes: 4096,
        },
        runs: 8,
        writes,
    }
}

/// A command container is the agent's, validated, attested and contained, with the command's
/// differences: a command that writes nothing writes /work through a throwaway overlay (the
/// next command, on the same volume, finds nothing of it), one that writes /work reaches the
/// volume; neither can write the metadata; both can run what they put in /tmp; its two streams
/// come back as one without the init's lines; one that outlives its limit is killed and
/// reported; and nothing is left.
#[tokio::test]
async fn a_command_container_writes_work_only_when_it_may_and_runs_what_it_builds_in_scratch() {
    use cordon::launch::command::{self as run, CommandImage};
    let fixture = cordon_tests::fixture("command-container").await;
    let agent = fixture.profile(&cordon_tests::Run::workload(&["exit", "0"]));
    let image = CommandImage {
        id: fixture.image.clone(),
        env: vec!["PATH=/usr/bin:/bin".to_owned()],
        program: cordon_contract::paths::PROBE.to_owned(),
    };
    let call = |writes, args: &'static [&'static str], limit: u64| {
        let (ctl, agent, image) = (fixture.ctl.clone(), agent.clone(), image.clone());
        async move {
            let command = probe_command("check", writes, args);
            let outcome = run::run(
                &ctl,
                &agent,
                &command,
                &image,
                Duration::from_secs(limit),
                std::future::pending(),
            )
            .await
            .0
            .expect("a run");
            match outcome.answer {
                Answer::Ran(ran) => ran,
                other => panic!("not run: {other:?}"),
            }
        }
    };
    let check = |ran: &Ran| -> serde_json::Value {
        assert_eq!(ran.exit, Some(0), "{ran:?}");
        assert!(!ran.timed_out);
        // Its stdout line and its stderr line (the engine copies the two pipes on their own,
        // so their order is the engine's), and no line of the init's.
        let mut lines: Vec<&str> = ran.output.lines().collect();
        lines.sort_unstable();
        assert_eq!(lines.len(), 2, "{}", ran.output);
        assert_eq!(lines[0], "cordon-probe: command-check wrote its line");
        assert_eq!(ran.output_bytes, ran.output.len() as u64);
        serde_json::from_str(lines[1]).expect("JSON")
    };
    let first = check(&call(command::Writes::None, &["command-check"], 60).await);
    assert_eq!(first["marker_present"], false, "{first}");
    assert_eq!(first["wrote_work"], "ok", "{first}");
    assert_eq!(first["wrote_in_dir"], "ok", "{first}");
    assert_ne!(first["wrote_metadata"], "ok", "{first}");
    assert_eq!(first["tmp_exec_exit"], 7, "{first}");
    assert_eq!(first["cwd"], "/work", "{first}");
    // The overlay was thrown away with its container.
    let second = check(&call(command::Writes::None, &["command-check"], 60).await);
    assert_eq!(second["marker_present"], false, "{second}");
    let third = check(&call(command::Writes::Work, &["command-check"], 60).await);
    assert_eq!(third["marker_present"], false, "{third}");
    assert_eq!(third["wrote_work"], "ok", "{third}");
    assert_ne!(third["wrote_metadata"], "ok", "{third}");
    assert_eq!(third["tmp_exec_exit"], 7, "{third}");
    // What a writing command wrote is in the volume, and the overlay shows it; rewriting a file
    // of the volume, or writing into one of its directories, copies it up first (with the
    // overlay's own capabilities: without CHOWN and FOWNER both were EPERM).
    let fourth = check(&call(command::Writes::None, &["command-check"], 60).await);
    assert_eq!(fourth["marker_present"], true, "{fourth}");
    assert_eq!(fourth["wrote_work"], "ok", "{fourth}");
    assert_eq!(fourth["wrote_in_dir"], "ok", "{fourth}");
    // A command that outlives its limit is killed, and says so.
    let t = std::time::Instant::now();
    let slow = call(command::Writes::None, &["sleep", "600000"], 2).await;
    assert!(slow.timed_out && slow.exit.is_none(), "{slow:?}");
    assert!(t.elapsed() < Duration::from_secs(40), "{:?}", t.elapsed());
    fixture.finish().await;
}

/// Hostile commands (the repository's tests are agent-written code) are each bounded and
/// reported, and leave nothing: a 1 GiB flood of both streams with terminal escapes and invalid
/// UTF-8 comes back as at most the command's bound, escaped; a fork bomb stops at the pids
/// limit; the scratch fills by bytes and by inodes at its bounds; a command that writes nothing
/// cannot reach the work volume beneath its overlay (by unmounting it, through the overlay's
/// upper layer or through another path to /work); one that leaves a process behind still ends.
#[tokio::test]
async fn hostile_commands_are_bounded_reported_and_leave_nothing() {
    use cordon::launch::command::{self as run, CommandImage};
    let fixture = cordon_tests::fixture("command-hostile").await;
    let agent = fixture.profile(&cordon_tests::Run::workload(&["exit", "0"]));
    let image = CommandImage {
        id: fixture.image.clone(),
        env: vec![],
        program: cordon_contract::paths::PROBE.to_owned(),
    };
    let call = |args: &'static [&'static str]| {
        let (ctl, agent, image) = (fixture.ctl.clone(), agent.clone(), image.clone());
        async move {
            let command = probe_command("hostile", command::Writes::None, args);
            let outcome = run::run(
                &ctl,
                &agent,
                &command,
                &image,
                Duration::from_secs(120),
                std::future::pending(),
            )
            .await
            .0
            .expect("a run");
            match outcome.answer {
                Answer::Ran(ran) => ran,
                other => panic!("{args:?} not run: {other:?}"),
            }
        }
    };
    let line = |ran: &Ran| -> serde_json::Value {
        let json = ran
            .output
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON line in {ran:?}"));
        serde_json::from_str(json).expect("JSON")
    };

    let flood = call(&["command-hostile", "flood", "1073741824"]).await;
    assert_eq!(
        flood.exit,
        Some(0),
        "{}",
        &flood.output[..flood.output.len().min(2000)]
    );
    assert!(flood.truncated);
    // Both streams in full were counted; the kept text is within the bound, escaped.
    assert!(flood.output_bytes > 2 << 30, "{}", flood.output_bytes);
    let bound = 64 * 1024;
    assert!(
        flood.output.len() <= bound * 4 + 100,
        "{}",
        flood.output.len()
    );
    assert!(!flood
        .output
        .contains(['\u{1b}', '\u{9b}', '\u{202e}', '\u{7}']));
    assert!(flood.output.contains("\\x1b[2J") && flood.output.contains("\\xff"));
    assert!(flood.output.contains("bytes omitted]"));

    let bomb = line(&call(&["command-hostile", "fork-bomb"]).await);
    let forked = bomb["forked"].as_u64().expect("a count");
    assert!(forked > 0 && forked < 128, "{bomb}");

    let bytes = line(&call(&["command-hostile", "fill-bytes"]).await);
    assert!(
        bytes["error"].as_str().unwrap().contains("No space left"),
        "{bytes}"
    );
    assert!(bytes["bytes"].as_u64().unwrap() <= 64 << 20, "{bytes}");
    let inodes = line(&call(&["command-hostile", "fill-inodes"]).await);
    assert!(
        inodes["error"].as_str().unwrap().contains("No space left"),
        "{inodes}"
    );
    assert!(inodes["files"].as_u64().unwrap() < 4096, "{inodes}");

    let escape = line(&call(&["command-hostile", "escape-work"]).await);
    assert_ne!(escape["unmount"], "ok", "{escape}");
    assert_ne!(escape["upper"], "ok", "{escape}");
    // Another path to /work is the same overlay: the next command finds nothing of it.
    let after = line(&call(&["command-check"]).await);
    assert_eq!(after["marker_present"], false, "{after}");

    let left = call(&["setsid-child"]).await;
    assert_eq!(left.exit, Some(0), "{left:?}");
    fixture.finish().await;
}

/// A command container's own protections, each removed from its create request, are refused by
/// the read-back validator with exactly their id (no network code, the overlay's read-only
/// volume, its scratch's nosuid, the init's start set with DAC_OVERRIDE and nothing more), and a
/// work volume made writable under `writes: none` past the validator is refused by the init
/// (`work-readonly`); nothing is left.
#[tokio::test]
async fn a_command_container_without_its_protections_is_refused() {
    use cordon::launch::{self, Prepared};
    use cordon_contract::{paths, Id};
    let fixture = cordon_tests::fixture("command-refused").await;
    let agent = fixture.profile(&cordon_tests::Run::workload(&["exit", "0"]));
    let command = probe_command("check", command::Writes::None, &["command-check"]);
    let profile = || {
        let allocation =
            cordon::labels::Allocation::new(&fixture.owner, "test", fixture.storage.allocation.uid)
                .unwrap();
        cordon::profile::Profile::command_of(
            &agent,
            allocation,
            &command,
            (&fixture.image, &[]),
            paths::PROBE,
            Duration::from_secs(30),
        )
        .expect("a command profile")
    };
    type Removal = fn(&mut bollard::models::ContainerCreateBody);
    let removals: [(Id, Removal); 4] = [
        (Id::NetworkNone, |c| c.network_disabled = None),
        (Id::WorkReadonly, |c| {
            let mounts = c.host_config.as_mut().unwrap().mounts.as_mut().unwrap();
            let work = mounts
                .iter_mut()
                .find(|m| m.target.as_deref() == Some(paths::WORK))
                .unwrap();
            work.read_only = Some(false);
        }),
        (Id::WritableNosuidNodevNoexec, |c| {
            let tmpfs = c.host_config.as_mut().unwrap().tmpfs.as_mut().unwrap();
            let tmp = tmpfs.get_mut(paths::TMP).unwrap();
            *tmp = tmp.replace("nosuid", "suid");
        }),
        (Id::InitPrivileges, |c| {
            let caps = c.host_config.as_mut().unwrap().cap_add.as_mut().unwrap();
            caps.retain(|cap| cap != "DAC_OVERRIDE");
        }),
    ];
    for (id, remove) in removals {
        let profile = profile();
        let mut prepared = Prepared::new(fixture.ctl.engine(), &profile).unwrap();
        remove(&mut prepared.plan.create);
        let launch = launch::create(&fixture.ctl, &profile, prepared)
            .await
            .expect("create");
        let refused = cordon::validate::ids(&launch.refusals);
        launch.finish(fixture.ctl.engine()).await.expect("cleanup");
        assert_eq!(refused, [id], "{:?}", id);
    }
    // Past the validator, the init refuses the writable volume beneath the overlay.
    let profile = profile();
    let mut prepared = Prepared::new(fixture.ctl.engine(), &profile).unwrap();
    removals[1].1(&mut prepared.plan.create);
    let (refusals, finished) =
        cordon_tests::launch_with(&fixture.ctl, &profile, prepared, |_| async {}).await;
    assert_eq!(cordon::validate::ids(&refusals), [Id::WorkReadonly]);
    match &finished.verdict {
        launch::InitVerdict::Refused { check, .. } => assert_eq!(*check, Id::WorkReadonly),
        other => panic!("the init did not refuse: {other:?}"),
    }
    fixture.finish().await;
}
