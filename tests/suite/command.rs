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
    let (volume, relay_id) = relay::create(&engine, &allocation, &owned.image, &record)
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
