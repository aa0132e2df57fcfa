//! The Claude adapter: the vendor command for each phase, the answer schema's rules, and the
//! answer read out of Claude's documented `--output-format json` envelope (a structured answer is
//! checked against its schema by cordon, see [`super::schema`]).
//!
//! Tools are limited by phase through the CLI's own flags (the kernel's exec allowlist and the
//! read-only mounts hold regardless): planning, questions and review may only read, list and
//! search; execute and fix may also edit and write. Web search, web fetch, the shell, sub-agents
//! and MCP are off in every phase.

use std::path::Path;

use cordon_contract::{paths, Phase};

use super::AnswerSchema;
use crate::caller_file;
use crate::error::{Error, Result};

/// Tools that only read, list and search.
pub const READ_TOOLS: &[&str] = &["Read", "Glob", "Grep"];
/// Tools that change files (execute and fix only).
pub const WRITE_TOOLS: &[&str] = &["Edit", "Write"];
/// Off in every phase: the shell, the network, sub-agents, notebooks.
pub const NEVER_TOOLS: &[&str] = &["Bash", "WebSearch", "WebFetch", "Task", "NotebookEdit"];
/// An MCP configuration with no servers (with `--strict-mcp-config`, no other is read).
pub const NO_MCP: &str = r#"{"mcpServers":{}}"#;

/// The MCP configuration of an agent offered approved commands: cordon's server alone, over
/// stdio, reading its offered list and socket at their fixed paths (no argument, no environment).
pub fn commands_mcp() -> String {
    serde_json::json!({
        "mcpServers": {
            cordon_contract::command::MCP_SERVER_NAME: {
                "type": "stdio",
                "command": cordon_contract::command::MCP_SERVER,
                "args": [],
            }
        }
    })
    .to_string()
}

/// The approved commands' tool as the CLI names an MCP server's tool.
pub fn commands_tool() -> String {
    format!(
        "mcp__{}__{}",
        cordon_contract::command::MCP_SERVER_NAME,
        cordon_contract::command::TOOL
    )
}

/// At most this much schema text.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// At most this much prompt.
pub const MAX_PROMPT_BYTES: usize = 32 * 1024;

/// The tools a phase may use, and those it may not.
pub fn tools(phase: Phase) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut allowed = READ_TOOLS.to_vec();
    let mut denied = NEVER_TOOLS.to_vec();
    if phase.work_writable() {
        allowed.extend_from_slice(WRITE_TOOLS);
    } else {
        denied.extend_from_slice(WRITE_TOOLS);
    }
    (allowed, denied)
}

/// Whether a phase takes a schema: planning must, review may, the others must not.
pub fn schema_rule(phase: Phase) -> (bool, bool) {
    match phase {
        Phase::Planning => (true, true),
        Phase::Review => (false, true),
        Phase::Questions | Phase::Execute | Phase::Fix => (false, false),
    }
}

/// The CLI's documented switches for traffic a session does not need: with them, the CLI talks
/// only to its API (whatever else it tries is refused by the egress proxy anyway).
pub const ENV: &[(&str, &str)] = &[
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
];

/// The vendor command: non-interactive JSON output, the phase's tools, no MCP, the exact schema
/// text when there is one (planning; review when given one), and the prompt last, after `--`, so
/// no prompt is read as a flag.
///
/// What the real CLI (2.1.332) does with each flag, measured against the fake Messages API:
/// - `--tools` is the set the model is offered (with `--allowedTools` alone it was also offered
///   ListAgents, ReportFindings, ScheduleWakeup, Skill, ToolSearch and Workflow); the CLI adds a
///   `DeferredToolPlaceholder` entry, and calling it gets "No such tool available";
/// - `--allowedTools` approves the same tools without a prompt (Edit and Write are refused in
///   `--print` otherwise); `--permission-prompts none` denies whatever would still prompt;
/// - `--restricted` ignores the user, project and local settings files: without it a
///   repository's `.claude/settings.json` set `env.ANTHROPIC_BASE_URL` and the CLI sent its
///   requests there;
/// - `--disallowedTools` names what no phase may use, should a later CLI offer it regardless.
///
/// With approved commands (`commands`), cordon's MCP server is the one server
/// (`--strict-mcp-config` still keeps every repository and user server out) and its one tool is
/// offered and approved beside the phase's.
pub fn command(phase: Phase, prompt: &str, schema: Option<&str>, commands: bool) -> Vec<String> {
    let (allowed, denied) = tools(phase);
    let mut allowed = allowed.join(",");
    let mcp = if commands {
        allowed.push(',');
        allowed.push_str(&commands_tool());
        commands_mcp()
    } else {
        NO_MCP.to_owned()
    };
    let mut argv: Vec<String> = [
        paths::CLAUDE_CLI,
        "--print",
        "--output-format",
        "json",
        "--restricted",
        "--permission-prompts",
        "none",
        "--no-session-persistence",
        "--tools",
        &allowed,
        "--allowedTools",
        &allowed,
        "--disallowedTools",
        &denied.join(","),
        "--strict-mcp-config",
        "--mcp-config",
        &mcp,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(schema) = schema {
        argv.push("--json-schema".to_owned());
        argv.push(schema.to_owned());
    }
    argv.push("--".to_owned());
    argv.push(prompt.to_owned());
    argv
}

/// Read a schema file with [`caller_file`]'s rules (a regular file, not through a link, opened
/// without blocking, at most [`MAX_SCHEMA_BYTES`]: `input-*` ids), with one link only, then
/// checked by [`check_schema`] (`schema-invalid`).
pub fn read_schema(path: &Path) -> Result<String> {
    let opened = caller_file::open("schema", path)?;
    if opened.links() != 1 {
        return Err(Error::Schema(format!(
            "{}: {} links (one allowed)",
            path.display(),
            opened.links()
        )));
    }
    let bytes = opened.read(MAX_SCHEMA_BYTES)?;
    check_schema(&bytes).map_err(|e| match e {
        Error::Schema(why) => Error::Schema(format!("{}: {why}", path.display())),
        other => other,
    })
}

/// The schema rules: at most 64 KiB of UTF-8, a JSON object whose `type` is `"object"`, without a
/// draft 2020-12 `$schema` (Claude's `--json-schema` rejects it). Returns the exact text.
pub fn check_schema(bytes: &[u8]) -> Result<String> {
    if bytes.len() > MAX_SCHEMA_BYTES {
        return Err(Error::Schema(format!("more than {MAX_SCHEMA_BYTES} bytes")));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::Schema(format!("not UTF-8: {e}")))?
        .to_owned();
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Schema(format!("not JSON: {e}")))?;
    let Some(object) = value.as_object() else {
        return Err(Error::Schema("not a JSON object".into()));
    };
    if object.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(Error::Schema(r#"its "type" is not "object""#.into()));
    }
    if let Some(dialect) = object.get("$schema") {
        if dialect.as_str().is_none_or(|d| d.contains("2020-12")) {
            return Err(Error::Schema(
                "a draft 2020-12 (or non-string) $schema, which Claude's --json-schema rejects"
                    .into(),
            ));
        }
    }
    Ok(text)
}

/// Why output is not an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAnAnswer(pub String);

/// The answer in Claude's result envelope: stdout must be exactly one JSON object, a successful
/// `result`. With a schema (planning always, review when given one) the answer is
/// `structured_output`: an object that matches the schema (checked here, never trusted to the
/// CLI), returned as compact JSON text with nothing around it. Without one it is the `result`
/// text; planning without a schema is no answer.
pub fn answer(
    phase: Phase,
    schema: Option<&AnswerSchema>,
    stdout: &str,
) -> std::result::Result<String, NotAnAnswer> {
    let wrong = |why: &str| NotAnAnswer(why.to_owned());
    let envelope: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| NotAnAnswer(format!("stdout is not one JSON envelope: {e}")))?;
    let field = |name: &str| envelope.get(name);
    if field("type").and_then(|v| v.as_str()) != Some("result") {
        return Err(wrong("the envelope is not a result"));
    }
    if field("is_error").and_then(|v| v.as_bool()) != Some(false)
        || field("subtype").and_then(|v| v.as_str()) != Some("success")
    {
        return Err(wrong("the result is an error"));
    }
    if let Some(schema) = schema {
        let Some(structured) = field("structured_output").filter(|v| v.is_object()) else {
            return Err(wrong("no structured_output object"));
        };
        schema.check(structured).map_err(|evidence| {
            NotAnAnswer(format!(
                "structured_output does not match the schema: {evidence}"
            ))
        })?;
        return serde_json::to_string(structured).map_err(|e| NotAnAnswer(e.to_string()));
    }
    if schema_rule(phase).0 {
        return Err(wrong("a phase that needs a schema was given none"));
    }
    field("result")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .ok_or_else(|| wrong("no result text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_phases_only_read_list_and_search() {
        for phase in [Phase::Planning, Phase::Questions, Phase::Review] {
            let (allowed, denied) = tools(phase);
            assert_eq!(allowed, ["Read", "Glob", "Grep"], "{phase:?}");
            for tool in ["Bash", "WebSearch", "WebFetch", "Edit", "Write"] {
                assert!(denied.contains(&tool), "{phase:?} {tool}");
            }
        }
        for phase in [Phase::Execute, Phase::Fix] {
            let (allowed, denied) = tools(phase);
            assert!(allowed.contains(&"Edit") && allowed.contains(&"Write"));
            assert!(denied.contains(&"Bash") && denied.contains(&"WebSearch"));
        }
    }

    #[test]
    fn command_carries_the_exact_schema_and_the_prompt_last() {
        let schema = r#"{"type":"object"}"#;
        let argv = command(Phase::Planning, "--help me", Some(schema), false);
        assert_eq!(argv[0], paths::CLAUDE_CLI);
        let at = argv.iter().position(|a| a == "--json-schema").unwrap();
        assert_eq!(argv[at + 1], schema);
        assert_eq!(&argv[argv.len() - 2..], ["--", "--help me"]);
        assert!(argv.contains(&"--strict-mcp-config".to_owned()));
        let questions = command(Phase::Questions, "q", None, false);
        assert!(!questions.contains(&"--json-schema".to_owned()));
        assert!(questions.contains(&NO_MCP.to_owned()));
    }

    #[test]
    fn approved_commands_add_cordons_server_alone_and_its_one_tool() {
        let argv = command(Phase::Execute, "go", None, true);
        let at = argv.iter().position(|a| a == "--mcp-config").unwrap();
        let config: serde_json::Value = serde_json::from_str(&argv[at + 1]).unwrap();
        let servers = config["mcpServers"].as_object().unwrap();
        assert_eq!(servers.len(), 1);
        assert_eq!(
            servers["cordon"]["command"],
            cordon_contract::command::MCP_SERVER
        );
        assert_eq!(servers["cordon"]["args"], serde_json::json!([]));
        assert!(argv.contains(&"--strict-mcp-config".to_owned()));
        for flag in ["--tools", "--allowedTools"] {
            let at = argv.iter().position(|a| a == flag).unwrap();
            assert_eq!(
                argv[at + 1],
                "Read,Glob,Grep,Edit,Write,mcp__cordon__run_approved_command"
            );
        }
        assert_eq!(&argv[argv.len() - 2..], ["--", "go"]);
    }

    #[test]
    fn schema_rules() {
        assert!(check_schema(br#"{"type":"object","properties":{}}"#).is_ok());
        assert!(check_schema(
            br#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}"#
        )
        .is_ok());
        let refused: &[&[u8]] = &[
            br#"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}"#,
            br#"{"type":"array"}"#,
            br#"{"properties":{}}"#,
            br#"["type","object"]"#,
            b"{\"type\":\"object\",\"x\":\"\xff\"}",
            b"not json",
        ];
        for bytes in refused {
            assert!(
                matches!(check_schema(bytes), Err(Error::Schema(_))),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let mut big = br#"{"type":"object","description":""#.to_vec();
        big.resize(MAX_SCHEMA_BYTES - 2, b'a');
        big.extend_from_slice(b"\"}");
        assert_eq!(big.len(), MAX_SCHEMA_BYTES);
        assert!(check_schema(&big).is_ok(), "exactly 64 KiB is allowed");
        big.insert(40, b'a');
        assert!(check_schema(&big).is_err(), "one byte more is not");
    }

    #[test]
    fn schema_file_must_be_a_regular_file_with_one_link() {
        let dir = std::env::temp_dir().join(format!("cordon-schema-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("schema.json");
        std::fs::write(&good, r#"{"type":"object"}"#).unwrap();
        assert_eq!(read_schema(&good).unwrap(), r#"{"type":"object"}"#);
        let id = |path: &Path| read_schema(path).unwrap_err().id();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert_eq!(id(&link), "input-not-regular", "a symlink is not followed");
        let hard = dir.join("hard.json");
        std::fs::hard_link(&good, &hard).unwrap();
        assert_eq!(id(&good), "schema-invalid", "two links");
        std::fs::remove_file(&hard).unwrap();
        assert_eq!(id(&dir), "input-not-regular", "a directory");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid C string; mkfifo touches no memory of ours.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(id(&fifo), "input-not-regular", "a fifo (and no hang)");
        assert_eq!(id(Path::new("/dev/zero")), "input-not-regular");
        assert_eq!(id(&dir.join("absent.json")), "input-unreadable");
        let big = dir.join("big.json");
        std::fs::write(&big, vec![b' '; MAX_SCHEMA_BYTES + 1]).unwrap();
        assert_eq!(id(&big), "input-too-large");
        std::fs::write(&big, br#"{"type":"array"}"#).unwrap();
        assert_eq!(id(&big), "schema-invalid");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Review's answer with an optional schema.
    fn review_answer(schema: Option<&str>, stdout: &str) -> std::result::Result<String, String> {
        let schema = schema.map(|s| AnswerSchema::compile(s.to_owned()).expect("compiles"));
        answer(Phase::Review, schema.as_ref(), stdout).map_err(|e| e.0)
    }

    #[test]
    fn review_with_a_schema_answers_with_structured_output() {
        let both = r#"{"type":"result","subtype":"success","is_error":false,"result":"hi","structured_output":{"b":1}}"#;
        let schema = r#"{"type":"object","required":["b"]}"#;
        assert_eq!(
            review_answer(Some(schema), both).as_deref(),
            Ok(r#"{"b":1}"#)
        );
        assert_eq!(review_answer(None, both).as_deref(), Ok("hi"));
        let text_only = r#"{"type":"result","subtype":"success","is_error":false,"result":"hi"}"#;
        assert!(
            review_answer(Some(schema), text_only).is_err(),
            "no structured_output"
        );
        let wrong = r#"{"type":"result","subtype":"success","is_error":false,"result":"hi","structured_output":{"a":1}}"#;
        let why = review_answer(Some(schema), wrong).unwrap_err();
        assert!(why.contains("\"b\""), "{why}");
    }

    /// What the real CLI (2.1.332) printed for a questions run against the fake Messages API
    /// (captured from `cordon run --vendor claude --fake-vendor`): the adapter reads its answer,
    /// and the same envelope with a schema but no `structured_output` (what the CLI prints when
    /// the model never answers in the schema, measured) is no answer.
    #[test]
    fn the_real_clis_envelope_is_read_as_the_adapter_assumes() {
        let real = include_str!("claude_envelope.json");
        let envelope: serde_json::Value = serde_json::from_str(real).unwrap();
        let text = envelope["result"].as_str().unwrap();
        assert_eq!(answer(Phase::Questions, None, real).unwrap(), text);
        let any = AnswerSchema::compile(r#"{"type":"object"}"#.to_owned()).unwrap();
        let why = answer(Phase::Planning, Some(&any), real).unwrap_err();
        assert!(why.0.contains("structured_output"), "{why:?}");
        let mut structured = envelope.clone();
        structured["structured_output"] = serde_json::json!({"plan": "x"});
        let structured = serde_json::to_string(&structured).unwrap();
        assert_eq!(
            answer(Phase::Planning, Some(&any), &structured).unwrap(),
            r#"{"plan":"x"}"#
        );
    }

    #[test]
    fn answers_come_only_from_a_successful_envelope() {
        let any = AnswerSchema::compile(r#"{"type":"object"}"#.to_owned()).unwrap();
        let plan = |stdout: &str| answer(Phase::Planning, Some(&any), stdout);
        let ok = r#"{"type":"result","subtype":"success","is_error":false,"result":"hi","structured_output":{"b":1,"a":[2]}}"#;
        assert_eq!(answer(Phase::Questions, None, ok).unwrap(), "hi");
        assert_eq!(plan(ok).unwrap(), r#"{"a":[2],"b":1}"#);
        assert!(
            answer(Phase::Planning, None, ok).is_err(),
            "planning needs its schema"
        );
        let error = r#"{"type":"result","subtype":"error_max_structured_output_retries","is_error":true,"result":""}"#;
        assert!(plan(error).is_err());
        assert!(answer(Phase::Questions, None, error).is_err());
        let no_structured =
            r#"{"type":"result","subtype":"success","is_error":false,"result":"x"}"#;
        assert!(plan(no_structured).is_err());
        assert!(answer(Phase::Questions, None, &format!("prose\n{ok}")).is_err());
        assert!(answer(Phase::Questions, None, "").is_err());
        let array = r#"{"type":"result","subtype":"success","is_error":false,"result":"x","structured_output":[1]}"#;
        assert!(plan(array).is_err());
    }
}
