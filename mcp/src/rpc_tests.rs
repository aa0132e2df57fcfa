use cordon_contract::command::CallRefusal;

use super::*;

/// A dispatcher that records each call and gives the answer it holds.
#[derive(Debug, Default)]
struct Fake {
    calls: Vec<String>,
    answer: Option<Result<Answer, String>>,
}

impl Dispatcher for Fake {
    fn call(&mut self, call: &Call) -> Result<Answer, String> {
        self.calls.push(call.name.clone());
        self.answer
            .clone()
            .unwrap_or_else(|| Err("no answer set".into()))
    }
}

fn server() -> Server {
    Server::new(vec![
        Offered {
            name: "test".into(),
            description: "Run the unit tests".into(),
        },
        Offered {
            name: "lint".into(),
            description: "Run the linter".into(),
        },
    ])
}

fn ran(exit: Option<i32>) -> Ran {
    Ran {
        name: "test".into(),
        exit,
        signal: None,
        timed_out: false,
        duration_ms: 123,
        output_bytes: 6,
        output: "ok\nok\n".into(),
        truncated: false,
    }
}

/// The reply to `message`, parsed.
fn reply(server: &Server, fake: &mut Fake, message: &str) -> Option<Value> {
    server
        .handle(message.as_bytes(), fake)
        .map(|line| serde_json::from_str(&line).expect("a reply is JSON"))
}

fn ask(message: &str) -> Value {
    reply(&server(), &mut Fake::default(), message).expect("a reply")
}

fn call_with(fake: &mut Fake, params: &str) -> Value {
    let message = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#);
    let reply = reply(&server(), fake, &message).expect("a reply");
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["jsonrpc"], "2.0");
    reply["result"].clone()
}

/// The one text of a tool result and its `isError`.
fn text(result: &Value) -> (String, bool) {
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "{result}");
    assert_eq!(content[0]["type"], "text");
    (
        content[0]["text"].as_str().expect("text").to_owned(),
        result["isError"].as_bool().expect("isError"),
    )
}

fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"].as_i64().expect("an error code")
}

#[test]
fn initialize_answers_the_clients_version_when_it_is_spoken_else_the_latest() {
    for version in VERSIONS {
        let reply = ask(&format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{"roots":{{}}}},"clientInfo":{{"name":"claude-code","version":"2.1.0"}}}}}}"#
        ));
        assert_eq!(reply["id"], 0);
        assert_eq!(reply["result"]["protocolVersion"], version);
    }
    for asked in [r#""2024-10-07""#, r#""2099-01-01""#, "1", "null"] {
        let reply = ask(&format!(
            r#"{{"jsonrpc":"2.0","id":"a","method":"initialize","params":{{"protocolVersion":{asked}}}}}"#
        ));
        assert_eq!(reply["id"], "a");
        assert_eq!(reply["result"]["protocolVersion"], "2025-11-25", "{asked}");
    }
    let reply = ask(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
    let result = &reply["result"];
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["capabilities"], json!({ "tools": {} }));
    assert_eq!(result["serverInfo"]["name"], "cordon");
    assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn tools_list_offers_exactly_one_tool_taking_one_of_the_names() {
    let reply = ask(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#);
    let tools = reply["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 1);
    let tool = &tools[0];
    assert_eq!(tool["name"], TOOL);
    let description = tool["description"].as_str().expect("a description");
    assert!(
        description.contains("\n- test: Run the unit tests\n"),
        "{description}"
    );
    assert!(
        description.contains("\n- lint: Run the linter\n"),
        "{description}"
    );
    assert!(
        description.contains("Only these names run"),
        "{description}"
    );
    let schema = &tool["inputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["name"]));
    assert_eq!(schema["additionalProperties"], false);
    let properties = schema["properties"].as_object().expect("properties");
    assert_eq!(properties.len(), 1);
    assert_eq!(properties["name"]["type"], "string");
    assert_eq!(properties["name"]["enum"], json!(["test", "lint"]));
    assert!(properties["name"]["description"].is_string());
}

#[test]
fn ping_has_an_empty_result() {
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#),
        json!({ "jsonrpc": "2.0", "id": 3, "result": {} })
    );
}

#[test]
fn a_call_sends_the_name_and_shows_how_the_command_ended() {
    let mut fake = Fake {
        answer: Some(Ok(Answer::Ran(ran(Some(0))))),
        ..Fake::default()
    };
    let result = call_with(
        &mut fake,
        r#"{"name":"run_approved_command","arguments":{"name":"test"},"_meta":{"claudecode/toolUseId":"t1"}}"#,
    );
    assert_eq!(fake.calls, ["test"]);
    assert_eq!(
        text(&result),
        ("exit 0 after 123 ms\n\nok\nok\n".to_owned(), false)
    );

    fake.answer = Some(Ok(Answer::Ran(ran(Some(3)))));
    let result = call_with(
        &mut fake,
        r#"{"name":"run_approved_command","arguments":{"name":"test"}}"#,
    );
    assert_eq!(
        text(&result),
        ("exit 3 after 123 ms\n\nok\nok\n".to_owned(), true)
    );
}

#[test]
fn a_killed_or_truncated_command_says_so() {
    let mut killed = ran(None);
    killed.signal = Some("SIGKILL".into());
    killed.timed_out = true;
    killed.duration_ms = 60_000;
    killed.output_bytes = 5_000_000;
    killed.truncated = true;
    assert_eq!(
        ran_text(&killed),
        "killed by SIGKILL after 60000 ms (deadline)\noutput: 5000000 bytes (truncated)\n\nok\nok\n"
    );
    let mut fake = Fake {
        answer: Some(Ok(Answer::Ran(killed))),
        ..Fake::default()
    };
    let result = call_with(
        &mut fake,
        r#"{"name":"run_approved_command","arguments":{"name":"test"}}"#,
    );
    assert!(text(&result).1, "a killed command is an error");
    let mut strange = ran(None);
    strange.output = String::new();
    assert_eq!(
        ran_text(&strange),
        "ended without an exit status after 123 ms\n\n"
    );
}

#[test]
fn a_refusal_from_the_dispatcher_is_shown_with_its_id() {
    let mut fake = Fake {
        answer: Some(Ok(Answer::Refused {
            refusal: CallRefusal::CommandExhausted,
            expected: "at most 4 runs".into(),
            observed: "a fifth".into(),
        })),
        ..Fake::default()
    };
    let result = call_with(
        &mut fake,
        r#"{"name":"run_approved_command","arguments":{"name":"lint"}}"#,
    );
    assert_eq!(fake.calls, ["lint"]);
    assert_eq!(
        text(&result),
        (
            "command-exhausted: expected at most 4 runs, observed a fifth".to_owned(),
            true
        )
    );
}

#[test]
fn no_dispatcher_or_an_answer_for_another_command_is_unavailable() {
    let mut fake = Fake {
        answer: Some(Err("the dispatcher's socket: refused".into())),
        ..Fake::default()
    };
    let result = call_with(
        &mut fake,
        r#"{"name":"run_approved_command","arguments":{"name":"test"}}"#,
    );
    let (text_, is_error) = text(&result);
    assert!(is_error);
    assert_eq!(
        text_,
        "command-unavailable: the dispatcher's socket: refused"
    );

    let mut other = ran(Some(0));
    other.name = "lint".into();
    fake.answer = Some(Ok(Answer::Ran(other)));
    let result = call_with(
        &mut fake,
        r#"{"name":"run_approved_command","arguments":{"name":"test"}}"#,
    );
    let (text_, is_error) = text(&result);
    assert!(is_error);
    assert!(text_.starts_with("command-unavailable: "), "{text_}");
}

#[test]
fn each_bad_call_is_refused_before_the_dispatcher() {
    let cases = [
        (
            r#"{"name":"Bash","arguments":{"name":"test"}}"#,
            "command-unknown-tool",
        ),
        (r#"{"arguments":{"name":"test"}}"#, "command-unknown-tool"),
        (
            r#"{"name":["run_approved_command"],"arguments":{"name":"test"}}"#,
            "command-unknown-tool",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"name":"test","args":["-x"]}}"#,
            "command-arguments",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"name":"test","argv":["/bin/sh"]}}"#,
            "command-arguments",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"name":["test"]}}"#,
            "command-arguments",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"name":7}}"#,
            "command-arguments",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"command":"test"}}"#,
            "command-arguments",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{}}"#,
            "command-arguments",
        ),
        (
            r#"{"name":"run_approved_command","arguments":"test"}"#,
            "command-arguments",
        ),
        (r#"{"name":"run_approved_command"}"#, "command-arguments"),
        (
            r#"{"name":"run_approved_command","arguments":{"name":"deploy"}}"#,
            "command-unknown",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"name":"Test"}}"#,
            "command-unknown",
        ),
        (
            r#"{"name":"run_approved_command","arguments":{"name":"test; rm -rf /"}}"#,
            "command-unknown",
        ),
    ];
    for (params, id) in cases {
        let mut fake = Fake::default();
        let result = call_with(&mut fake, params);
        let (text_, is_error) = text(&result);
        assert!(is_error, "{params}");
        assert!(text_.starts_with(&format!("{id}: ")), "{params}: {text_}");
        assert!(fake.calls.is_empty(), "{params} reached the dispatcher");
    }
    // What the model sent is shown back bounded.
    let mut fake = Fake::default();
    let long = format!(
        r#"{{"name":"run_approved_command","arguments":{{"name":"{}"}}}}"#,
        "x".repeat(10_000)
    );
    let (text_, _) = text(&call_with(&mut fake, &long));
    assert!(text_.len() < 400, "{text_}");
    assert!(text_.starts_with("command-unknown: expected one of test, lint, observed \"xxx"));
}

#[test]
fn tools_call_without_an_object_of_params_is_invalid_params() {
    for params in ["", r#","params":[1]"#, r#","params":"test""#] {
        let reply = ask(&format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call"{params}}}"#
        ));
        assert_eq!(error_code(&reply), INVALID_PARAMS, "{params}");
        assert_eq!(reply["id"], 4);
    }
}

#[test]
fn notifications_get_no_reply_and_run_nothing() {
    let mut fake = Fake {
        answer: Some(Ok(Answer::Ran(ran(Some(0))))),
        ..Fake::default()
    };
    let server = server();
    for message in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"x"}}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"}}}"#,
        r#"{"jsonrpc":"2.0","method":"no/such/method"}"#,
        // A response: the server never asks, so none is awaited.
        r#"{"jsonrpc":"2.0","id":9,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":9,"error":{"code":1,"message":"m"}}"#,
        "",
        "  \r",
    ] {
        assert_eq!(reply(&server, &mut fake, message), None, "{message}");
    }
    assert!(fake.calls.is_empty());
}

#[test]
fn an_unknown_method_is_not_found() {
    for method in ["resources/list", "prompts/list", "tools/run", "shell/exec"] {
        let reply = ask(&format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"{method}"}}"#
        ));
        assert_eq!(error_code(&reply), METHOD_NOT_FOUND, "{method}");
        assert_eq!(reply["id"], 5);
    }
}

#[test]
fn a_line_that_is_not_json_is_a_parse_error_with_a_null_id() {
    for line in [
        &b"{"[..],
        b"not json",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,",
        b"{\"a\":1}{\"b\":2}",
    ] {
        let reply = reply(
            &server(),
            &mut Fake::default(),
            &String::from_utf8_lossy(line),
        )
        .expect("a reply");
        assert_eq!(error_code(&reply), PARSE_ERROR);
        assert_eq!(reply["id"], Value::Null);
    }
}

#[test]
fn invalid_utf8_is_a_parse_error() {
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xff\"}";
    let reply: Value = serde_json::from_str(
        &server()
            .handle(line, &mut Fake::default())
            .expect("a reply"),
    )
    .expect("JSON");
    assert_eq!(error_code(&reply), PARSE_ERROR);
    assert_eq!(reply["id"], Value::Null);
}

#[test]
fn a_batch_is_refused_whole_and_its_members_do_not_run() {
    let mut fake = Fake {
        answer: Some(Ok(Answer::Ran(ran(Some(0))))),
        ..Fake::default()
    };
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"}}},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#;
    let reply = reply(&server(), &mut fake, batch).expect("a reply");
    assert_eq!(error_code(&reply), INVALID_REQUEST);
    assert_eq!(reply["id"], Value::Null);
    assert!(fake.calls.is_empty());
    assert_eq!(error_code(&ask("[]")), INVALID_REQUEST);
}

#[test]
fn a_message_that_is_not_a_request_is_invalid() {
    for message in [
        r#""ping""#,
        "7",
        "null",
        r#"{"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
    ] {
        assert_eq!(error_code(&ask(message)), INVALID_REQUEST, "{message}");
    }
}

#[test]
fn every_reply_is_one_line() {
    let mut fake = Fake {
        answer: Some(Ok(Answer::Ran(ran(Some(0))))),
        ..Fake::default()
    };
    let line = server()
        .handle(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_approved_command","arguments":{"name":"test"}}}"#,
            &mut fake,
        )
        .expect("a reply");
    assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
    let line = server()
        .handle(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            &mut fake,
        )
        .expect("a reply");
    assert!(!line.contains('\n'), "{line}");
}
