//! The protocol: one JSON-RPC 2.0 message in, at most one out, as a pure function of the message,
//! the offered list and a [`Dispatcher`] (the socket in the binary, a fake in the tests).
//!
//! The shapes are MCP's (the specification's lifecycle, tools and stdio transport pages, revisions
//! 2024-11-05 to 2025-11-25): `initialize` (the client's version when it is one of [`VERSIONS`],
//! else the latest), `ping`, `tools/list` (one tool, [`TOOL`]) and `tools/call`; a notification
//! (no `id`) is never answered and never runs anything. A call names the tool and one argument,
//! `name`, which must be on the offered list; the dispatcher decides again, and alone, whether it
//! runs. What went wrong with a call is a tool result with `isError` (the model reads it and can
//! correct itself), its text starting with a stable id.

use cordon_contract::command::{Answer, Call, Offered, Ran, MCP_SERVER_NAME, TOOL};
use serde_json::{json, Map, Value};

/// The protocol revisions the server speaks, the latest first.
pub const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// JSON-RPC's error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// The most characters of something the model sent that a refusal shows back.
const SHOWN: usize = 120;

/// Where a call goes: it sends the call and returns the answer, or says why there is none.
pub trait Dispatcher {
    fn call(&mut self, call: &Call) -> Result<Answer, String>;
}

/// The server's fixed part: the offered list and the tool made from it.
#[derive(Debug)]
pub struct Server {
    offered: Vec<Offered>,
    tool: Value,
}

impl Server {
    pub fn new(offered: Vec<Offered>) -> Self {
        let tool = tool(&offered);
        Server { offered, tool }
    }

    /// The reply to one line (its newline taken off), if it gets one.
    pub fn handle(&self, line: &[u8], dispatcher: &mut dyn Dispatcher) -> Option<String> {
        let Ok(text) = std::str::from_utf8(line) else {
            return Some(error(&Value::Null, PARSE_ERROR, "Parse error: not UTF-8"));
        };
        // A blank line is no message (JSON's whitespace alone).
        if text.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            return None;
        }
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            return Some(error(&Value::Null, PARSE_ERROR, "Parse error"));
        };
        let message = match message {
            Value::Object(message) => message,
            Value::Array(_) => {
                return Some(error(
                    &Value::Null,
                    INVALID_REQUEST,
                    "Invalid Request: batches are not supported",
                ))
            }
            _ => return Some(error(&Value::Null, INVALID_REQUEST, "Invalid Request")),
        };
        self.message(&message, dispatcher)
    }

    fn message(
        &self,
        message: &Map<String, Value>,
        dispatcher: &mut dyn Dispatcher,
    ) -> Option<String> {
        let id = match message.get("id") {
            None => None,
            Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
            Some(_) => {
                return Some(error(
                    &Value::Null,
                    INVALID_REQUEST,
                    "Invalid Request: an id is a string or a number",
                ))
            }
        };
        let method = message.get("method").and_then(Value::as_str);
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || method.is_none() {
            // A response (the server never asks anything, so none is awaited) is dropped.
            if method.is_none()
                && id.is_some()
                && (message.contains_key("result") || message.contains_key("error"))
            {
                return None;
            }
            return Some(error(
                id.unwrap_or(&Value::Null),
                INVALID_REQUEST,
                "Invalid Request",
            ));
        }
        // A notification is never answered, and runs nothing.
        let (Some(id), Some(method)) = (id, method) else {
            return None;
        };
        let params = message.get("params");
        let result = match method {
            "initialize" => Ok(initialize(params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": [self.tool] })),
            "tools/call" => self.call(params, dispatcher),
            _ => Err((METHOD_NOT_FOUND, "Method not found")),
        };
        Some(match result {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string(),
            Err((code, message)) => error(id, code, message),
        })
    }

    fn call(
        &self,
        params: Option<&Value>,
        dispatcher: &mut dyn Dispatcher,
    ) -> Result<Value, (i64, &'static str)> {
        let Some(Value::Object(params)) = params else {
            return Err((INVALID_PARAMS, "Invalid params: tools/call takes an object"));
        };
        let tool = params.get("name");
        if tool.and_then(Value::as_str) != Some(TOOL) {
            return Ok(refused(format!(
                "command-unknown-tool: expected {TOOL}, observed {}",
                shown(tool)
            )));
        }
        let arguments = params.get("arguments");
        let name = match arguments {
            Some(Value::Object(args)) if args.len() == 1 => {
                args.get("name").and_then(Value::as_str)
            }
            _ => None,
        };
        let Some(name) = name else {
            return Ok(refused(format!(
                "command-arguments: expected arguments holding exactly \"name\", a string (a \
                 command's arguments are fixed by the runner), observed {}",
                shown(arguments)
            )));
        };
        if !self.offered.iter().any(|o| o.name == name) {
            return Ok(refused(format!(
                "command-unknown: expected one of {}, observed {}",
                self.names().join(", "),
                shown(arguments.and_then(|a| a.get("name")))
            )));
        }
        let call = Call { name: name.into() };
        Ok(match dispatcher.call(&call) {
            Ok(Answer::Ran(ran)) if ran.name == call.name => {
                let failed = ran.exit != Some(0) || ran.timed_out;
                result(ran_text(&ran), failed)
            }
            Ok(Answer::Ran(ran)) => unavailable(&format!(
                "the dispatcher answered for {}, not {}",
                shown(Some(&Value::String(ran.name))),
                call.name
            )),
            Ok(Answer::Refused {
                refusal,
                expected,
                observed,
            }) => refused(format!(
                "{}: expected {expected}, observed {observed}",
                refusal.id()
            )),
            Err(reason) => unavailable(&reason),
        })
    }

    fn names(&self) -> Vec<&str> {
        self.offered.iter().map(|o| o.name.as_str()).collect()
    }
}

/// The client's protocol version when the server speaks it, else the latest.
fn initialize(params: Option<&Value>) -> Value {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = VERSIONS
        .iter()
        .find(|v| Some(**v) == asked)
        .unwrap_or(&VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": {} },
        "serverInfo": { "name": MCP_SERVER_NAME, "version": env!("CARGO_PKG_VERSION") },
    })
}

/// The one tool: its description lists every name with its description.
fn tool(offered: &[Offered]) -> Value {
    let mut description = String::from(
        "Run one of the commands the runner approved for this task, by name. Only these names \
         run, each with the fixed arguments, environment and working directory the runner gave \
         it (you cannot pass arguments):\n",
    );
    for entry in offered {
        description.push_str(&format!("- {}: {}\n", entry.name, entry.description));
    }
    description.push_str(
        "The result is how it ended (exit status or signal, and its duration) and its output \
         (stdout and stderr together; when long, its head and tail). A command may be refused \
         (run too often, or too little time left); the result says so.",
    );
    let names: Vec<&str> = offered.iter().map(|o| o.name.as_str()).collect();
    json!({
        "name": TOOL,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "enum": names,
                    "description": "The approved command to run: one of the names in the tool's description.",
                },
            },
            "required": ["name"],
            "additionalProperties": false,
        },
    })
}

/// A command's result as the model reads it: how it ended, then its output.
pub fn ran_text(ran: &Ran) -> String {
    let ended = match (ran.exit, &ran.signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by {signal}"),
        (None, None) => "ended without an exit status".to_owned(),
    };
    let deadline = if ran.timed_out { " (deadline)" } else { "" };
    let mut text = format!("{ended} after {} ms{deadline}\n", ran.duration_ms);
    if ran.truncated {
        text.push_str(&format!("output: {} bytes (truncated)\n", ran.output_bytes));
    }
    text.push('\n');
    text.push_str(&ran.output);
    text
}

fn result(text: String, is_error: bool) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": is_error })
}

fn refused(text: String) -> Value {
    result(text, true)
}

fn unavailable(reason: &str) -> Value {
    refused(format!("command-unavailable: {}", bounded(reason)))
}

/// Something the model (or the dispatcher) sent, as compact JSON, at most [`SHOWN`] characters.
fn shown(value: Option<&Value>) -> String {
    match value {
        None => "nothing".to_owned(),
        Some(value) => bounded(&value.to_string()),
    }
}

fn bounded(text: &str) -> String {
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

/// A JSON-RPC error reply.
pub fn error(id: &Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

#[cfg(test)]
#[path = "rpc_tests.rs"]
mod tests;
