//! A fake Anthropic Messages API (`POST /v1/messages`) for a real vendor CLI to drive: a scripted
//! "model" that decides each answer from the request alone, since the API is stateless (every
//! request carries the whole conversation).
//!
//! The scenario is picked by the first marker in the text of the user messages (string content or
//! `text` blocks, never `tool_result` blocks):
//!
//! - `[[cordon-scenario NAME]]`, NAME one of `default`, `never-structured`, `huge:BYTES`, `hang`,
//!   `error:STATUS`;
//! - `[[cordon-script JSON]]`, JSON an array of at most 256 steps, each `{"tool": NAME, "input":
//!   {...}}` (`input` defaults to `{}`; `"fill": {"field": F, "bytes": N}` sets input F to N
//!   bytes of `x`, recorded as its length) or `{"text": "..."}`: at most 64 KiB of JSON, on one line
//!   if it is to survive a Read's line numbers. The array's own `]` may count as the first of the
//!   closing two: `[[cordon-script [{"text": "hi"}]]` and `...}]]]` are the same.
//!
//! No marker is `default`; a marker that does not parse is answered 400. The step is the number
//! of `tool_result` blocks in the conversation (the fake calls one tool per turn). In `default`
//! and in a script the model is gullible: a `[[cordon-script JSON]]` in a tool result's text puts
//! its steps next in the plan (how a prompt injection in a file the agent reads is tested).
//! A side request (no `tools`) is answered `ok`, except in `hang` and `error:` which fail every
//! request, as an outage would.

pub mod synth;

pub use synth::synthesize;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest request body read for the Messages API (a system prompt and tool schemas are
/// ~100 KiB; a long conversation more).
pub(crate) const MAX_REQUEST_BODY: u64 = 64 << 20;
/// Steps in one script, and steps injected through tool results in all.
const MAX_STEPS: usize = 256;
/// The JSON of one `[[cordon-script ...]]` marker.
const MAX_MARKER_JSON: usize = 64 * 1024;
/// `[[cordon-script` markers tried in tool results per request (each parse is up to 64 KiB).
const MAX_MARKERS: usize = 256;
/// Messages looked at; the rest of a longer conversation is ignored.
const MAX_MESSAGES: usize = 100_000;
/// `huge:BYTES` is capped at this.
const MAX_HUGE: u64 = 1 << 30;
/// The text of one `text_delta` event in `huge`.
const DELTA: usize = 16 * 1024;
/// Bounds on one record (its JSON line).
const MAX_RECORDED_RESULTS: usize = 64;
const MAX_RECORDED_CONTENT: usize = 4096;
const MAX_RECORDED_TOOLS: usize = 256;
const MAX_RECORDED_NAME: usize = 256;
/// The first line of a Read result quoted in `default`'s answer, in characters.
const MAX_QUOTED: usize = 200;

const SCENARIO_MARKER: &str = "[[cordon-scenario ";
const SCRIPT_MARKER: &str = "[[cordon-script ";
/// The tool `--json-schema` offers; its `input_schema` is the schema.
const STRUCTURED_OUTPUT: &str = "StructuredOutput";

/// One Messages API request and what the fake answered, for tests to assert on: kept by
/// `tls::Server::messages`, and echoed by the binary as `{"messages_request":{...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesRecord {
    /// The request target as sent (`/v1/messages?beta=true`).
    pub path: String,
    /// `None` when the body had none (or did not parse).
    pub model: Option<String>,
    pub stream: bool,
    /// The offered tools' names, in order (at most 256).
    pub tools: Vec<String>,
    /// `default`, `never-structured`, `huge:BYTES`, `hang`, `error:STATUS` (as asked), `script`;
    /// `malformed` for a body that is not a Messages request, `invalid-marker` for a marker that
    /// does not parse.
    pub scenario: String,
    /// The number of `tool_result` blocks in the conversation.
    pub step: u64,
    /// The conversation's tool results, in order (the first 64).
    pub tool_results: Vec<ToolResultRecord>,
    pub reply: ReplyRecord,
    /// The bytes of text in `system` (a string, or the `text` of its blocks).
    pub system_bytes: u64,
    /// The usage the answer reports: a token per 4 bytes of the request body (at most
    /// [`MAX_INPUT_TOKENS`]), and of the reply's text or tool input (at least 1 each); `None`
    /// when the answer is an error.
    pub usage: Option<Tokens>,
}

/// Token counts as the answer reports them (the egress proxy's record must read the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The most input tokens an answer reports: a scenario's huge tool results (the enormous-write
/// test sends megabytes back) must not push the CLI past its context window, where it would
/// compact the conversation instead of going on.
pub const MAX_INPUT_TOKENS: u64 = 50_000;

impl Tokens {
    fn of(request_bytes: usize, reply_bytes: u64) -> Tokens {
        Tokens {
            input_tokens: (request_bytes as u64 / 4).clamp(1, MAX_INPUT_TOKENS),
            output_tokens: (reply_bytes / 4).max(1),
        }
    }
}

/// A `tool_result` block of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultRecord {
    pub tool_use_id: String,
    pub is_error: bool,
    /// Its text (a string content, or its `text` blocks joined by newlines), the first 4096 bytes.
    pub content: String,
}

/// What the fake answered: `{"tool": NAME, "input": {...}}`, `{"text_bytes": N}`,
/// `{"error": STATUS}` or `{"hang": true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReplyRecord {
    Tool { tool: String, input: Value },
    Text { text_bytes: u64 },
    Error { error: u16 },
    Hang { hang: bool },
}

/// What goes back, for the HTTP layer to frame.
pub(crate) enum Answer {
    /// A complete body, framed by `Content-Length`.
    Whole {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// A 200 with a chunked body, each piece a chunk, flushed as it goes; with `hang`, the last
    /// chunk is never sent and the connection is held until the client closes it.
    Streamed {
        content_type: &'static str,
        pieces: Pieces,
        hang: bool,
    },
}

pub(crate) type Pieces = Box<dyn Iterator<Item = Vec<u8>> + Send>;

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Whole { status, body, .. } => f
                .debug_struct("Whole")
                .field("status", status)
                .field("bytes", &body.len())
                .finish(),
            Answer::Streamed { hang, .. } => {
                f.debug_struct("Streamed").field("hang", hang).finish()
            }
        }
    }
}

/// `POST /v1/messages/count_tokens`.
pub(crate) fn count_tokens() -> Answer {
    Answer::Whole {
        status: 200,
        content_type: "application/json",
        body: br#"{"input_tokens":1}"#.to_vec(),
    }
}

/// Answer one `POST /v1/messages` (`target` as sent, `body` its JSON), and say what was done.
pub(crate) fn answer(target: &str, body: &[u8]) -> (Answer, MessagesRecord) {
    let mut record = MessagesRecord {
        path: truncated(target, MAX_RECORDED_CONTENT).to_owned(),
        model: None,
        stream: false,
        tools: Vec::new(),
        scenario: "malformed".to_owned(),
        step: 0,
        tool_results: Vec::new(),
        reply: ReplyRecord::Error { error: 400 },
        system_bytes: 0,
        usage: None,
    };
    let request: Value = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => return (invalid(&format!("the body is not JSON: {e}")), record),
    };
    let Some(request) = request.as_object() else {
        return (invalid("the body is not a JSON object"), record);
    };
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return (invalid("messages: an array is required"), record);
    };
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    record.model = request
        .get("model")
        .and_then(Value::as_str)
        .map(|m| truncated(m, MAX_RECORDED_NAME).to_owned());
    record.stream = request.get("stream") == Some(&Value::Bool(true));
    record.system_bytes = match request.get("system") {
        Some(Value::String(text)) => text.len() as u64,
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .map(|t| t.len() as u64)
            .sum(),
        _ => 0,
    };
    let tools: Vec<&Value> = match request.get("tools") {
        Some(Value::Array(tools)) => tools.iter().collect(),
        _ => Vec::new(),
    };
    record.tools = tools
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .take(MAX_RECORDED_TOOLS)
        .map(|n| truncated(n, MAX_RECORDED_NAME).to_owned())
        .collect();
    let structured = tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(STRUCTURED_OUTPUT))
        .map(|t| t.get("input_schema").unwrap_or(&Value::Bool(true)));

    let conversation = Conversation::read(messages);
    record.step = conversation.results.len() as u64;
    record.tool_results = conversation
        .results
        .iter()
        .take(MAX_RECORDED_RESULTS)
        .map(|r| ToolResultRecord {
            tool_use_id: r.id.clone(),
            is_error: r.is_error,
            content: truncated(&r.text, MAX_RECORDED_CONTENT).to_owned(),
        })
        .collect();
    let scenario = match conversation.marker {
        None => Scenario::Default,
        Some(Ok(scenario)) => scenario,
        Some(Err(reason)) => {
            record.scenario = "invalid-marker".to_owned();
            return (invalid(&format!("bad marker: {reason}")), record);
        }
    };
    record.scenario = scenario.name();
    let reply = scenario.reply(tools.is_empty(), structured, &conversation.results);
    record.reply = match &reply {
        Reply::Step(Step::Tool { name, input }) => ReplyRecord::Tool {
            tool: name.clone(),
            input: recorded_input(input),
        },
        Reply::Step(Step::Text(text)) => ReplyRecord::Text {
            text_bytes: text.len() as u64,
        },
        Reply::Huge(bytes) => ReplyRecord::Text { text_bytes: *bytes },
        Reply::Hang => ReplyRecord::Hang { hang: true },
        Reply::Error(status) => ReplyRecord::Error { error: *status },
    };
    let reply_bytes = match &record.reply {
        ReplyRecord::Tool { input, .. } => input.to_string().len() as u64,
        ReplyRecord::Text { text_bytes } => *text_bytes,
        ReplyRecord::Error { .. } | ReplyRecord::Hang { .. } => 0,
    };
    let tokens = Tokens::of(body.len(), reply_bytes);
    record.usage = matches!(
        record.reply,
        ReplyRecord::Tool { .. } | ReplyRecord::Text { .. }
    )
    .then_some(tokens);
    let step = record.step;
    (render(reply, model, record.stream, step, tokens), record)
}

/// 401 with the API's error body: the credential is not the key this endpoint was given.
pub(crate) fn unauthorized() -> Answer {
    error_answer(401, "cordon fake vendor: invalid x-api-key")
}

/// 400 with the API's error body.
fn invalid(reason: &str) -> Answer {
    error_answer(400, &format!("cordon fake vendor: {reason}"))
}

fn error_answer(status: u16, message: &str) -> Answer {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    Answer::Whole {
        status,
        content_type: "application/json",
        body: body.to_string().into_bytes(),
    }
}

/// The longest prefix of `text` within `max` bytes that ends on a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A content's text: a string, or the `text` of its `text` blocks joined by newlines.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A `tool_result` block, as the fake reads it.
#[derive(Debug)]
struct ToolResult {
    id: String,
    is_error: bool,
    text: String,
}

/// What the fake reads of the conversation: the first marker in user text, every tool result.
#[derive(Debug)]
struct Conversation {
    marker: Option<Result<Scenario, String>>,
    results: Vec<ToolResult>,
}

impl Conversation {
    fn read(messages: &[Value]) -> Conversation {
        let mut marker = None;
        let mut results = Vec::new();
        let look = |text: &str, marker: &mut Option<Result<Scenario, String>>| {
            if marker.is_none() {
                *marker = find_marker(text);
            }
        };
        for message in messages.iter().take(MAX_MESSAGES) {
            if message.get("role").and_then(Value::as_str) != Some("user") {
                continue;
            }
            match message.get("content") {
                Some(Value::String(text)) => look(text, &mut marker),
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        match block.get("type").and_then(Value::as_str) {
                            Some("text") => {
                                if let Some(text) = block.get("text").and_then(Value::as_str) {
                                    look(text, &mut marker);
                                }
                            }
                            Some("tool_result") => results.push(ToolResult {
                                id: block
                                    .get("tool_use_id")
                                    .and_then(Value::as_str)
                                    .map(|id| truncated(id, MAX_RECORDED_NAME).to_owned())
                                    .unwrap_or_default(),
                                is_error: block.get("is_error") == Some(&Value::Bool(true)),
                                text: block.get("content").map(text_of).unwrap_or_default(),
                            }),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Conversation { marker, results }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Tool { name: String, input: Value },
    Text(String),
}

#[derive(Debug)]
enum Scenario {
    Default,
    NeverStructured,
    /// Text bytes, capped.
    Huge(u64),
    Hang,
    /// `asked` as written after `error:`; `status` what is answered.
    Error {
        asked: String,
        status: u16,
    },
    Script(Vec<Step>),
}

/// What one request is answered with.
#[derive(Debug)]
enum Reply {
    Step(Step),
    Huge(u64),
    Hang,
    Error(u16),
}

/// A step of the plan, resolved only when reached (from the results so far).
#[derive(Debug)]
enum Pending {
    Do(Step),
    /// `default`: Read the first path the last Glob found (a text if it found none).
    ReadGlobHit,
    /// `default`: say what the last Read's result began with.
    ReportRead,
}

impl Scenario {
    fn name(&self) -> String {
        match self {
            Scenario::Default => "default".to_owned(),
            Scenario::NeverStructured => "never-structured".to_owned(),
            Scenario::Huge(bytes) => format!("huge:{bytes}"),
            Scenario::Hang => "hang".to_owned(),
            Scenario::Error { asked, .. } => format!("error:{asked}"),
            Scenario::Script(_) => "script".to_owned(),
        }
    }

    /// `side`: no tools were offered. `structured`: the `StructuredOutput` tool's schema.
    fn reply(self, side: bool, structured: Option<&Value>, results: &[ToolResult]) -> Reply {
        let plan = match self {
            Scenario::Hang => return Reply::Hang,
            Scenario::Error { status, .. } => return Reply::Error(status),
            _ if side => return Reply::Step(Step::Text("ok".to_owned())),
            Scenario::Huge(bytes) => return Reply::Huge(bytes),
            Scenario::NeverStructured => {
                return Reply::Step(Step::Text("I will not use the tool.".to_owned()))
            }
            Scenario::Default => match structured {
                Some(schema) => vec![
                    Pending::Do(Step::Tool {
                        name: STRUCTURED_OUTPUT.to_owned(),
                        input: synthesize(schema),
                    }),
                    Pending::Do(Step::Text("answered".to_owned())),
                ],
                None => vec![
                    Pending::Do(Step::Tool {
                        name: "Glob".to_owned(),
                        input: json!({"pattern": "**/*"}),
                    }),
                    Pending::ReadGlobHit,
                    Pending::ReportRead,
                ],
            },
            Scenario::Script(steps) => steps
                .into_iter()
                .map(Pending::Do)
                .chain([Pending::Do(Step::Text("script done".to_owned()))])
                .collect(),
        };
        Reply::Step(follow(plan, results))
    }
}

/// Walk the plan past each tool result to the step now due. Each result is read as a gullible
/// model would: a script marker in it puts its steps next. Past the plan's end its last step
/// (always a text) repeats.
fn follow(mut plan: Vec<Pending>, results: &[ToolResult]) -> Step {
    let mut last_glob: Option<usize> = None;
    let mut last_read: Option<(String, usize)> = None;
    let mut tried = 0;
    let mut injected = 0;
    let mut k = 0;
    loop {
        // Past the end nothing changes (the last step is a text): straight to the step now due.
        if k >= plan.len() {
            k = k.max(results.len());
        }
        let step = match plan.get(k).or(plan.last()) {
            None => Step::Text("done".to_owned()),
            Some(Pending::Do(step)) => step.clone(),
            Some(Pending::ReadGlobHit) => {
                let hit = last_glob
                    .and_then(|g| results.get(g))
                    .and_then(|r| r.text.lines().map(str::trim).find(|l| looks_like_path(l)));
                match hit {
                    Some(path) => Step::Tool {
                        name: "Read".to_owned(),
                        input: json!({"file_path": path}),
                    },
                    None => Step::Text("glob found no files".to_owned()),
                }
            }
            Some(Pending::ReportRead) => match &last_read {
                Some((path, r)) => {
                    let text = results.get(*r).map_or("", |r| r.text.as_str());
                    let first: String = text
                        .lines()
                        .next()
                        .unwrap_or("")
                        .chars()
                        .take(MAX_QUOTED)
                        .collect();
                    Step::Text(format!("read {path}: {first}"))
                }
                None => Step::Text("read nothing".to_owned()),
            },
        };
        let Some(result) = results.get(k) else {
            return step;
        };
        if let Step::Tool { name, input } = &step {
            match name.as_str() {
                "Glob" => last_glob = Some(k),
                "Read" => {
                    let path = input.get("file_path").and_then(Value::as_str).unwrap_or("");
                    last_read = Some((path.to_owned(), k));
                }
                _ => {}
            }
        }
        // Past the end the plan is over: nothing read there is obeyed.
        if k < plan.len() && injected < MAX_STEPS && tried < MAX_MARKERS {
            let steps = injected_steps(&result.text, &mut tried);
            let steps: Vec<Pending> = steps
                .into_iter()
                .take(MAX_STEPS - injected)
                .map(Pending::Do)
                .collect();
            injected += steps.len();
            plan.splice(k + 1..k + 1, steps);
        }
        k += 1;
    }
}

/// A line of Glob output that names a file (not `No files found`, not a note in parentheses).
fn looks_like_path(line: &str) -> bool {
    !line.is_empty()
        && line != "No files found"
        && (line.starts_with('/') || !(line.contains(char::is_whitespace) || line.starts_with('(')))
}

/// The steps of every script marker in a tool result's text, in order; markers that do not parse
/// are passed over. `tried` counts the attempts, across results.
fn injected_steps(text: &str, tried: &mut usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut from = 0;
    while *tried < MAX_MARKERS && steps.len() < MAX_STEPS {
        let Some(at) = text[from..].find(SCRIPT_MARKER) else {
            break;
        };
        *tried += 1;
        from += at + SCRIPT_MARKER.len();
        if let Ok(more) = parse_script(&text[from..]) {
            steps.extend(more);
        }
    }
    steps
}

/// The first marker in `text`, parsed.
fn find_marker(text: &str) -> Option<Result<Scenario, String>> {
    let script = |at: usize| parse_script(&text[at + SCRIPT_MARKER.len()..]).map(Scenario::Script);
    match (text.find(SCENARIO_MARKER), text.find(SCRIPT_MARKER)) {
        (Some(a), Some(b)) if b < a => Some(script(b)),
        (Some(a), _) => Some(parse_scenario(&text[a + SCENARIO_MARKER.len()..])),
        (None, Some(b)) => Some(script(b)),
        (None, None) => None,
    }
}

/// `NAME]]...`, after `[[cordon-scenario `.
fn parse_scenario(rest: &str) -> Result<Scenario, String> {
    let end = rest
        .find("]]")
        .filter(|&end| end <= MAX_RECORDED_NAME)
        .ok_or("[[cordon-scenario NAME]] is not closed by ]]")?;
    let name = rest[..end].trim();
    let number = |text: &str| -> Option<u64> {
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse().ok())
            .flatten()
    };
    Ok(match name {
        "default" => Scenario::Default,
        "never-structured" => Scenario::NeverStructured,
        "hang" => Scenario::Hang,
        _ => {
            if let Some(bytes) = name.strip_prefix("huge:") {
                // Digits beyond u64 are more than the cap anyway.
                let all_digits = !bytes.is_empty() && bytes.bytes().all(|b| b.is_ascii_digit());
                if !all_digits {
                    return Err(format!("huge:{bytes}: BYTES is a number"));
                }
                Scenario::Huge(number(bytes).unwrap_or(MAX_HUGE).min(MAX_HUGE))
            } else if let Some(asked) = name.strip_prefix("error:") {
                let status = number(asked)
                    .and_then(|s| u16::try_from(s).ok())
                    .filter(|s| (100..=599).contains(s))
                    .unwrap_or(500);
                Scenario::Error {
                    asked: asked.to_owned(),
                    status,
                }
            } else {
                return Err(format!("unknown scenario {name:?}"));
            }
        }
    })
}

/// `JSON]]...`, after `[[cordon-script `: the steps.
fn parse_script(rest: &str) -> Result<Vec<Step>, String> {
    // Room for the closing `]]` after whitespace; the JSON itself is checked against the bound.
    let window = truncated(rest, MAX_MARKER_JSON + 64);
    let mut values = serde_json::Deserializer::from_str(window).into_iter::<Value>();
    let script = match values.next() {
        Some(Ok(script)) => script,
        Some(Err(e)) => return Err(format!("the script is not JSON (within 64 KiB): {e}")),
        None => return Err("the script is empty".to_owned()),
    };
    let end = values.byte_offset();
    if end > MAX_MARKER_JSON {
        return Err("the script is larger than 64 KiB".to_owned());
    }
    // `[[cordon-script [...]]` is taken as meant: the array's own `]` may be the first of the two.
    let after = window[end..].trim_start();
    let closed = after.starts_with("]]") || (script.is_array() && after.starts_with(']'));
    if !closed {
        return Err("the script is not closed by ]]".to_owned());
    }
    let Value::Array(steps) = script else {
        return Err("the script is not an array of steps".to_owned());
    };
    if steps.len() > MAX_STEPS {
        return Err(format!("the script has more than {MAX_STEPS} steps"));
    }
    steps.iter().map(parse_step).collect()
}

/// The largest string a `fill` step makes (the conversation carries it back in every later
/// request, within [`MAX_REQUEST_BODY`]).
const MAX_FILL_BYTES: u64 = 16 << 20;
/// A recorded tool input keeps strings up to this long; a longer one is recorded as its length.
const MAX_RECORDED_STRING: usize = 4096;

/// A tool input as recorded: each top-level string longer than [`MAX_RECORDED_STRING`] is
/// replaced by `"<N bytes>"`, so a filled Write does not make a record of its size.
fn recorded_input(input: &Value) -> Value {
    match input {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match v {
                    Value::String(s) if s.len() > MAX_RECORDED_STRING => {
                        (k.clone(), Value::String(format!("<{} bytes>", s.len())))
                    }
                    other => (k.clone(), other.clone()),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn parse_step(step: &Value) -> Result<Step, String> {
    let shape = || {
        format!(r#"a step is {{"tool": NAME, "input": {{...}}}} or {{"text": "..."}}, not {step}"#)
    };
    let Some(step_map) = step.as_object() else {
        return Err(shape());
    };
    match (step_map.get("tool"), step_map.get("text")) {
        (Some(Value::String(name)), None) => {
            let mut input = step_map.get("input").cloned().unwrap_or_else(|| json!({}));
            if !input.is_object() {
                return Err(shape());
            }
            // `"fill": {"field": F, "bytes": N}`: input F is N bytes of `x` (a prompt is too
            // small to carry an enormous Write).
            if let Some(fill) = step_map.get("fill") {
                let field = fill.get("field").and_then(Value::as_str);
                let bytes = fill.get("bytes").and_then(Value::as_u64);
                let (Some(field), Some(bytes)) = (field, bytes) else {
                    return Err(r#"a fill is {"field": NAME, "bytes": N}"#.to_owned());
                };
                let Ok(bytes) = usize::try_from(bytes.min(MAX_FILL_BYTES)) else {
                    return Err("a fill too large".to_owned());
                };
                input[field] = Value::String("x".repeat(bytes));
            }
            Ok(Step::Tool {
                name: name.clone(),
                input,
            })
        }
        (None, Some(Value::String(text))) => Ok(Step::Text(text.clone())),
        _ => Err(shape()),
    }
}

/// Unique ids across the process (a CLI may hold several conversations).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// One server-sent event.
fn event(name: &str, data: &Value) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

fn message_start(id: &str, model: &str, tokens: Tokens) -> Vec<u8> {
    event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": tokens.input_tokens, "output_tokens": 1,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }}),
    )
}

/// `content_block_stop`, `message_delta` and `message_stop`.
fn message_end(stop_reason: &str, tokens: Tokens) -> Vec<u8> {
    let mut out = event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    );
    out.extend(event(
        "message_delta",
        &json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": tokens.output_tokens}}),
    ));
    out.extend(event("message_stop", &json!({"type": "message_stop"})));
    out
}

fn text_delta(text: &str) -> Vec<u8> {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}),
    )
}

/// The whole message object (`stream: false`), with one content block.
fn message(id: &str, model: &str, block: Value, stop_reason: &str, tokens: Tokens) -> Value {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [block],
        "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": tokens.input_tokens, "output_tokens": tokens.output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    })
}

/// The content types of a reply: a whole message, or its server-sent events.
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// A whole message (`stream: false`).
fn whole(body: Value) -> Answer {
    Answer::Whole {
        status: 200,
        content_type: JSON,
        body: body.to_string().into_bytes(),
    }
}

/// Events, each piece a chunk.
fn streamed(pieces: Vec<Vec<u8>>) -> Answer {
    Answer::Streamed {
        content_type: EVENT_STREAM,
        pieces: Box::new(pieces.into_iter()),
        hang: false,
    }
}

/// `content_block_start` of the one text block.
fn text_block_start() -> Vec<u8> {
    event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
    )
}

fn render(reply: Reply, model: &str, stream: bool, step: u64, tokens: Tokens) -> Answer {
    let id = format!("msg_cordon_{}", next_id());
    match reply {
        Reply::Error(status) => error_answer(
            status,
            &format!("cordon fake vendor: scripted error {status}"),
        ),
        Reply::Hang if stream => Answer::Streamed {
            content_type: EVENT_STREAM,
            pieces: Box::new(std::iter::once(message_start(&id, model, tokens))),
            hang: true,
        },
        Reply::Hang => Answer::Streamed {
            content_type: JSON,
            pieces: Box::new(std::iter::empty()),
            hang: true,
        },
        Reply::Step(Step::Text(text)) if stream => {
            let mut out = message_start(&id, model, tokens);
            out.extend(text_block_start());
            out.extend(text_delta(&text));
            out.extend(message_end("end_turn", tokens));
            streamed(vec![out])
        }
        Reply::Step(Step::Text(text)) => whole(message(
            &id,
            model,
            json!({"type": "text", "text": text}),
            "end_turn",
            tokens,
        )),
        Reply::Step(Step::Tool { name, input }) => {
            tool_use(&id, model, (stream, step, tokens), &name, &input)
        }
        Reply::Huge(bytes) if stream => huge_streamed(&id, model, bytes, tokens),
        Reply::Huge(bytes) => huge_whole(&id, model, bytes, tokens),
    }
}

/// A `tool_use` block, its id unique to the step and the process.
fn tool_use(
    id: &str,
    model: &str,
    (stream, step, tokens): (bool, u64, Tokens),
    name: &str,
    input: &Value,
) -> Answer {
    let tool_id = format!("toolu_cordon_{step}_{}", next_id());
    if !stream {
        return whole(message(
            id,
            model,
            json!({"type": "tool_use", "id": tool_id, "name": name, "input": input}),
            "tool_use",
            tokens,
        ));
    }
    let mut out = message_start(id, model, tokens);
    out.extend(event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}}),
    ));
    out.extend(event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
    ));
    out.extend(message_end("tool_use", tokens));
    streamed(vec![out])
}

/// A text of `bytes` x's as events: [`DELTA`]-byte deltas, made as they are sent.
fn huge_streamed(id: &str, model: &str, bytes: u64, tokens: Tokens) -> Answer {
    let mut start = message_start(id, model, tokens);
    start.extend(text_block_start());
    let full = bytes / DELTA as u64;
    let rest = usize::try_from(bytes % DELTA as u64).unwrap_or(0);
    let deltas = std::iter::repeat_n(
        text_delta(&"x".repeat(DELTA)),
        usize::try_from(full).unwrap_or(0),
    )
    .chain((rest > 0).then(|| text_delta(&"x".repeat(rest))));
    Answer::Streamed {
        content_type: EVENT_STREAM,
        pieces: Box::new(
            std::iter::once(start)
                .chain(deltas)
                .chain(std::iter::once(message_end("end_turn", tokens))),
        ),
        hang: false,
    }
}

/// A text of `bytes` x's as one message, sent in chunks as they are made.
fn huge_whole(id: &str, model: &str, bytes: u64, tokens: Tokens) -> Answer {
    // The message with an empty text, split where the text goes: the x's stream between.
    let empty = message(
        id,
        model,
        json!({"type": "text", "text": ""}),
        "end_turn",
        tokens,
    )
    .to_string();
    // The key and the value's opening quote: the x's go right after it.
    let key = r#""text":""#;
    let at = empty.find(key).map_or(empty.len(), |at| at + key.len());
    let (prefix, suffix) = (
        empty.as_bytes()[..at].to_vec(),
        empty.as_bytes()[at..].to_vec(),
    );
    let chunk = 64 * 1024;
    let full = usize::try_from(bytes / chunk as u64).unwrap_or(0);
    let rest = usize::try_from(bytes % chunk as u64).unwrap_or(0);
    let fill =
        std::iter::repeat_n(vec![b'x'; chunk], full).chain((rest > 0).then(|| vec![b'x'; rest]));
    Answer::Streamed {
        content_type: JSON,
        pieces: Box::new(
            std::iter::once(prefix)
                .chain(fill)
                .chain(std::iter::once(suffix)),
        ),
        hang: false,
    }
}

#[cfg(test)]
#[path = "messages_tests.rs"]
mod tests;
