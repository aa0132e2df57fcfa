use std::io::Cursor;

use cordon_contract::command::{Answer, Call, Offered};
use serde_json::Value;

use super::*;

/// A dispatcher that must not be reached.
#[derive(Debug)]
struct Unreachable;

impl Dispatcher for Unreachable {
    fn call(&mut self, call: &Call) -> Result<Answer, String> {
        panic!("{} reached the dispatcher", call.name)
    }
}

fn lines(input: &[u8]) -> Vec<Result<Vec<u8>, Line>> {
    let mut input = Cursor::new(input);
    let mut line = Vec::new();
    let mut out = Vec::new();
    loop {
        match read_line(&mut input, &mut line).expect("read") {
            Line::End => return out,
            Line::Message => out.push(Ok(line.clone())),
            other => out.push(Err(other)),
        }
    }
}

/// Every reply `input` gets, parsed.
fn serve_all(input: &[u8]) -> Vec<Value> {
    let server = Server::new(vec![Offered {
        name: "test".into(),
        description: "Run the unit tests".into(),
    }]);
    let mut output = Vec::new();
    serve(Cursor::new(input), &mut output, &server, &mut Unreachable).expect("serve");
    let text = String::from_utf8(output).expect("UTF-8");
    assert!(text.is_empty() || text.ends_with('\n'));
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line JSON"))
        .collect()
}

#[test]
fn lines_are_split_on_newlines_and_the_last_may_lack_one() {
    assert_eq!(
        lines(b"a\nbc\n\nd"),
        vec![
            Ok(b"a".to_vec()),
            Ok(b"bc".to_vec()),
            Ok(Vec::new()),
            Ok(b"d".to_vec())
        ]
    );
    assert_eq!(lines(b""), vec![]);
}

#[test]
fn a_line_past_the_bound_is_dropped_and_the_next_is_read() {
    let mut input = vec![b'x'; MAX_LINE];
    input.push(b'\n');
    input.extend(vec![b'y'; MAX_LINE + 1]);
    input.extend(b"\nz\n");
    input.extend(vec![b'w'; 3 * MAX_LINE]);
    let read = lines(&input);
    assert_eq!(read.len(), 4);
    assert_eq!(
        read[0].as_ref().map(Vec::len),
        Ok(MAX_LINE),
        "exactly the bound is read"
    );
    assert_eq!(read[1], Err(Line::TooLong));
    assert_eq!(read[2], Ok(b"z".to_vec()));
    assert_eq!(
        read[3],
        Err(Line::TooLong),
        "unended, at the end of the input"
    );
}

#[test]
fn an_over_long_message_is_refused_and_the_server_goes_on() {
    let mut input = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    input.extend(vec![b'x'; MAX_LINE]);
    input.extend(b"\"}}\n");
    input.extend(br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
    input.push(b'\n');
    let replies = serve_all(&input);
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0]["id"], Value::Null);
    assert_eq!(replies[0]["error"]["code"], INVALID_REQUEST);
    assert_eq!(
        replies[1],
        serde_json::json!({"jsonrpc":"2.0","id":2,"result":{}})
    );
}

#[test]
fn messages_are_answered_in_order_and_notifications_are_not() {
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        "garbage\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        "\r\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{}}}"#,
        "\n",
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"x\":\"\u{e9}\"}\n",
    );
    let mut input = input.as_bytes().to_vec();
    input.extend(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"x\":\"\xe9\"}\n");
    let replies = serve_all(&input);
    let ids: Vec<&Value> = replies.iter().map(|r| &r["id"]).collect();
    assert_eq!(
        ids,
        [
            &Value::from(0),
            &Value::Null,
            &Value::from(1),
            &Value::from(2),
            &Value::from(3),
            &Value::Null
        ]
    );
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(replies[1]["error"]["code"], crate::rpc::PARSE_ERROR);
    assert_eq!(
        replies[2]["result"]["tools"][0]["name"],
        cordon_contract::command::TOOL
    );
    assert_eq!(replies[3]["result"]["isError"], true);
    assert_eq!(replies[4]["result"], serde_json::json!({}));
    assert_eq!(
        replies[5]["error"]["code"],
        crate::rpc::PARSE_ERROR,
        "invalid UTF-8"
    );
}
