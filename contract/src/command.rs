//! Approved commands: the runner's list, the wire between the agent's MCP server (`cordon-mcp`)
//! and the dispatcher, and the bounds both sides hold.
//!
//! The agent never chooses a command's arguments: it names an entry of the runner's list and
//! nothing else ([`Call`]). The dispatcher (the host controller) alone decides whether that name
//! runs, and where; what comes back is an [`Answer`].

use serde::{Deserialize, Serialize};

use crate::phase::Phase;

/// The directory holding the dispatcher's socket, mounted read-only into the agent's container.
pub const SOCKET_DIR: &str = crate::paths::COMMANDS_DIR;
/// The dispatcher's socket, as the agent's MCP server dials it.
pub const SOCKET: &str = "/run/cordon/commands/socket";
/// The MCP server in the agent image: the one exec allowlist entry approved commands add.
pub const MCP_SERVER: &str = "/usr/bin/cordon-mcp";
/// The server's name in the CLI's MCP configuration.
pub const MCP_SERVER_NAME: &str = "cordon";
/// The one tool the server offers.
pub const TOOL: &str = "run_approved_command";

/// What the MCP server offers, in the agent's input dir: the names and descriptions (never an
/// argv), as [`Offered`] JSON.
pub const OFFERED_FILE: &str = "/run/cordon/input/commands.json";
/// Its name in the input dir.
pub const OFFERED_NAME: &str = "commands.json";
/// The offered list's file, at most (the host writes it, the server reads it).
pub const MAX_OFFERED_BYTES: u64 = 64 * 1024;

/// One entry the model is offered: a name and its description, nothing it could change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offered {
    pub name: String,
    pub description: String,
}

impl From<&ApprovedCommand> for Offered {
    fn from(command: &ApprovedCommand) -> Self {
        Offered {
            name: command.name.clone(),
            description: command.description.clone(),
        }
    }
}

/// At most this many commands in one list.
pub const MAX_COMMANDS: usize = 32;
/// A name: `[a-z0-9][a-z0-9_-]*`, at most this long.
pub const MAX_NAME: usize = 64;
/// A description: one line of printable text, at most this many bytes.
pub const MAX_DESCRIPTION: usize = 200;
/// The argv: at most this many arguments, each at most [`MAX_ARG`] bytes.
pub const MAX_ARGV: usize = 64;
pub const MAX_ARG: usize = 4096;
/// The environment: at most this many literal entries, each value at most [`MAX_ARG`] bytes.
pub const MAX_ENV: usize = 64;
/// The output a command may return, at most (stdout and stderr together, before escaping).
pub const MAX_OUTPUT: u64 = 1024 * 1024;
/// A command's own deadline, at most (the invocation's deadline bounds it as well).
pub const MAX_DEADLINE_SECS: u64 = 3600;
/// How many times one command may run in one invocation, at most.
pub const MAX_RUNS: u32 = 64;
/// A call's line on the socket, at most (its newline included).
pub const MAX_CALL_LINE: usize = 1024;
/// An answer's line, at most (its newline included): the escaped output (each byte at most four:
/// `\xNN`) and the rest.
pub const MAX_ANSWER_LINE: usize = 4 * (MAX_OUTPUT as usize) + 16 * 1024;

/// What a command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Writes {
    /// It sees the agent's current tree; what it writes stays in a throwaway layer.
    None,
    /// It may change /work (a formatter, a code generator); the audit sees its changes.
    Work,
}

/// A command's scratch (its /tmp): exact byte and inode totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scratch {
    pub bytes: u64,
    pub inodes: u64,
}

/// One command the runner approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovedCommand {
    pub name: String,
    /// One line the model sees.
    pub description: String,
    /// The exact argv; argv[0] an absolute path in the toolchain image.
    pub argv: Vec<String>,
    /// A local image holding the toolchain (a name or an id).
    pub image: String,
    /// Literal values, no expansion.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// The working directory: `/work` or a clean path under it.
    #[serde(default = "default_workdir")]
    pub workdir: String,
    pub deadline_secs: u64,
    pub output_bytes: u64,
    pub scratch: Scratch,
    /// How many times it may run in one invocation.
    pub runs: u32,
    pub writes: Writes,
}

fn default_workdir() -> String {
    "/work".to_owned()
}

/// Why a list is refused before anything runs: the field and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFault {
    /// The command's name (or its index when the name itself is the fault).
    pub command: String,
    pub field: &'static str,
    pub reason: String,
}

impl std::fmt::Display for ListFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "command {}: {}: {}",
            self.command, self.field, self.reason
        )
    }
}

/// Whether `name` is a command name: `[a-z0-9][a-z0-9_-]*`, at most [`MAX_NAME`] bytes.
pub fn is_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_NAME
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 128
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Text the model sees or a process receives: no control character (a tab aside), no NUL, no
/// line or paragraph separator (each description is one line of the tool's).
fn is_plain(text: &str) -> bool {
    !text
        .chars()
        .any(|c| (c.is_control() && c != '\t') || c == '\u{2028}' || c == '\u{2029}')
}

/// Whether `text` is a description: one plain line of 1 to [`MAX_DESCRIPTION`] bytes.
pub fn is_description(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_DESCRIPTION && is_plain(text)
}

/// Whether `path` is `/work` or a clean absolute path under it (no `.`, `..`, empty component,
/// nothing under `/work/.git`).
pub fn is_workdir(path: &str) -> bool {
    if path == "/work" {
        return true;
    }
    let Some(rest) = path.strip_prefix("/work/") else {
        return false;
    };
    crate::policy::is_clean_absolute(path)
        && rest.split('/').next() != Some(".git")
        && is_plain(path)
}

/// Variables the runner may not set for a command: the loader's, the credential's and the
/// engine's own. A command holds no credential and no proxy.
fn env_refused(name: &str) -> bool {
    crate::credential::VARIABLES.contains(&name)
        || name.starts_with("LD_")
        || matches!(
            name,
            "HTTPS_PROXY" | "HTTP_PROXY" | "ALL_PROXY" | "NO_PROXY" | "HOME" | "PATH" | "TMPDIR"
        )
}

/// Check one command against the bounds and the phase. The first fault is the answer.
pub fn check(command: &ApprovedCommand, phase: Phase) -> Result<(), ListFault> {
    let fault = |field: &'static str, reason: String| ListFault {
        command: command.name.clone(),
        field,
        reason,
    };
    if !is_name(&command.name) {
        return Err(fault(
            "name",
            format!("must be [a-z0-9][a-z0-9_-]* of at most {MAX_NAME} bytes"),
        ));
    }
    if !is_description(&command.description) {
        return Err(fault(
            "description",
            format!("must be one line of 1 to {MAX_DESCRIPTION} bytes without control characters"),
        ));
    }
    match command.argv.first() {
        None => return Err(fault("argv", "is empty".into())),
        Some(program) if !crate::policy::is_clean_absolute(program) => {
            return Err(fault(
                "argv",
                format!("{program:?} is not a clean absolute path"),
            ));
        }
        Some(_) => {}
    }
    if command.argv.len() > MAX_ARGV
        || command
            .argv
            .iter()
            .any(|a| a.len() > MAX_ARG || a.contains('\0'))
    {
        return Err(fault(
            "argv",
            format!("at most {MAX_ARGV} arguments of at most {MAX_ARG} bytes, no NUL"),
        ));
    }
    if command.image.is_empty() || command.image.len() > 256 || !is_plain(&command.image) {
        return Err(fault("image", "must name a local image".into()));
    }
    if command.env.len() > MAX_ENV {
        return Err(fault("env", format!("more than {MAX_ENV} entries")));
    }
    let mut names: Vec<&str> = Vec::with_capacity(command.env.len());
    for (name, value) in &command.env {
        if !is_env_name(name) || env_refused(name) || names.contains(&name.as_str()) {
            return Err(fault(
                "env",
                format!("{name:?} is not a name a command may set (or is set twice)"),
            ));
        }
        if value.len() > MAX_ARG || value.contains('\0') {
            return Err(fault(
                "env",
                format!("{name}'s value is too long or holds NUL"),
            ));
        }
        names.push(name);
    }
    if !is_workdir(&command.workdir) {
        return Err(fault(
            "workdir",
            format!(
                "{:?} is not /work or a clean path under it",
                command.workdir
            ),
        ));
    }
    if command.deadline_secs == 0 || command.deadline_secs > MAX_DEADLINE_SECS {
        return Err(fault(
            "deadline_secs",
            format!("must be 1 to {MAX_DEADLINE_SECS}"),
        ));
    }
    if command.output_bytes < 64 || command.output_bytes > MAX_OUTPUT {
        return Err(fault("output_bytes", format!("must be 64 to {MAX_OUTPUT}")));
    }
    let Scratch { bytes, inodes } = command.scratch;
    if bytes == 0
        || !bytes.is_multiple_of(4096)
        || bytes > 8 << 30
        || !(2..=1 << 20).contains(&inodes)
    {
        return Err(fault(
            "scratch",
            "bytes a positive multiple of 4096 up to 8 GiB, inodes 2 to 1048576".into(),
        ));
    }
    if command.runs == 0 || command.runs > MAX_RUNS {
        return Err(fault("runs", format!("must be 1 to {MAX_RUNS}")));
    }
    match (phase, command.writes) {
        (Phase::Planning | Phase::Questions, _) => Err(fault(
            "phase",
            format!("{phase} runs no process, in any container"),
        )),
        (Phase::Review, Writes::Work) => Err(fault(
            "writes",
            "review never writes /work: only writes none".into(),
        )),
        _ => Ok(()),
    }
}

/// Check a whole list: each command, then at most [`MAX_COMMANDS`] of them with distinct names.
pub fn check_list(commands: &[ApprovedCommand], phase: Phase) -> Result<(), ListFault> {
    if commands.len() > MAX_COMMANDS {
        return Err(ListFault {
            command: format!("#{}", commands.len()),
            field: "list",
            reason: format!("more than {MAX_COMMANDS} commands"),
        });
    }
    for (i, command) in commands.iter().enumerate() {
        check(command, phase)?;
        if commands[..i].iter().any(|c| c.name == command.name) {
            return Err(ListFault {
                command: command.name.clone(),
                field: "name",
                reason: "named twice".into(),
            });
        }
    }
    Ok(())
}

/// What the agent's MCP server sends: one JSON line, a name and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub name: String,
}

/// Why the dispatcher did not run a call. Each has a stable id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallRefusal {
    /// The call was not one JSON line naming a command, and only that.
    CommandMalformed,
    /// The name is not on the runner's list.
    CommandUnknown,
    /// The command ran as many times as the runner allowed.
    CommandExhausted,
    /// The invocation's deadline has passed (or leaves no time to run it).
    CommandDeadline,
    /// The command's container could not be made or did not attest; nothing ran.
    CommandUnavailable,
}

impl CallRefusal {
    /// The stable id.
    pub const fn id(self) -> &'static str {
        match self {
            CallRefusal::CommandMalformed => "command-malformed",
            CallRefusal::CommandUnknown => "command-unknown",
            CallRefusal::CommandExhausted => "command-exhausted",
            CallRefusal::CommandDeadline => "command-deadline",
            CallRefusal::CommandUnavailable => "command-unavailable",
        }
    }
}

/// A command that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ran {
    pub name: String,
    /// The exit status, when it exited.
    pub exit: Option<i32>,
    /// The signal that ended it, when one did (its deadline's kill among them).
    pub signal: Option<String>,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// Bytes it wrote to stdout and stderr together (counted past the bound too).
    pub output_bytes: u64,
    /// Its output as it came, head and tail within the bound, escaped where not plain UTF-8.
    pub output: String,
    pub truncated: bool,
}

/// The dispatcher's answer to one call: one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Answer {
    Ran(Ran),
    Refused {
        refusal: CallRefusal,
        expected: String,
        observed: String,
    },
}

/// Parse a call line (without its newline): one object holding exactly `name`.
pub fn parse_call(line: &[u8]) -> Result<Call, String> {
    if line.len() >= MAX_CALL_LINE {
        return Err(format!("a call of at most {MAX_CALL_LINE} bytes"));
    }
    // serde takes a struct from a sequence too; a call is an object.
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("a JSON object".into());
    }
    let call: Call = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if !is_name(&call.name) {
        return Err("a command name".into());
    }
    Ok(call)
}

// The relay's lines: cordon-init's `relay` role bridges the agent's socket to the host over its
// own stdio, one JSON line each way per call.

/// A line the relay writes on stdout for the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHost {
    /// `{"relay":"listening"}`: the socket is bound and listening; the agent may start.
    Listening,
    /// `{"call":{"name":"..."},"seq":N}`: a call to run, numbered from 1.
    Call { seq: u64, call: Call },
    /// `{"cancel":N}`: call N's peer hung up; its answer is still expected (and discarded).
    Cancel { seq: u64 },
}

impl ToHost {
    /// The line, its newline included.
    pub fn line(&self) -> Result<String, String> {
        Ok(match self {
            ToHost::Listening => "{\"relay\":\"listening\"}\n".to_owned(),
            ToHost::Call { seq, call } => {
                let call = serde_json::to_string(call).map_err(|e| format!("the call: {e}"))?;
                format!("{{\"call\":{call},\"seq\":{seq}}}\n")
            }
            ToHost::Cancel { seq } => format!("{{\"cancel\":{seq}}}\n"),
        })
    }

    /// Parse a line (without its newline), as the host reads the relay: exactly one of the three
    /// shapes, nothing else.
    pub fn parse(line: &[u8]) -> Result<ToHost, String> {
        let value: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
        let serde_json::Value::Object(object) = value else {
            return Err("not a JSON object".into());
        };
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        match keys.as_slice() {
            ["relay"] if object["relay"] == "listening" => Ok(ToHost::Listening),
            ["cancel"] => object["cancel"]
                .as_u64()
                .map(|seq| ToHost::Cancel { seq })
                .ok_or_else(|| "a cancel without a number".into()),
            ["call", "seq"] | ["seq", "call"] => {
                let seq = object["seq"].as_u64().ok_or("a call without a number")?;
                let call = serde_json::to_vec(&object["call"]).map_err(|e| e.to_string())?;
                Ok(ToHost::Call {
                    seq,
                    call: parse_call(&call)?,
                })
            }
            _ => Err(format!("an unknown line with the fields {keys:?}")),
        }
    }
}

/// The host's one line for call `seq`: `{"seq":N,"answer":<Answer>}`, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromHost {
    pub seq: u64,
    pub answer: Answer,
}

impl FromHost {
    /// Parse a line (without its newline): an object holding exactly `seq` and `answer`.
    pub fn parse(line: &[u8]) -> Result<FromHost, String> {
        let value: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
        let serde_json::Value::Object(mut object) = value else {
            return Err("not a JSON object".into());
        };
        if let Some(key) = object.keys().find(|k| *k != "seq" && *k != "answer") {
            return Err(format!("an unknown field {key:?}"));
        }
        let seq = object
            .get("seq")
            .and_then(serde_json::Value::as_u64)
            .ok_or("no seq (a non-negative integer)")?;
        let answer = object.remove("answer").ok_or("no answer")?;
        let answer = serde_json::from_value(answer).map_err(|e| format!("the answer: {e}"))?;
        Ok(FromHost { seq, answer })
    }

    /// The line, its newline included (the host's side).
    pub fn line(&self) -> Result<String, String> {
        let answer = serde_json::to_string(&self.answer).map_err(|e| format!("the answer: {e}"))?;
        Ok(format!("{{\"seq\":{},\"answer\":{answer}}}\n", self.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> ApprovedCommand {
        ApprovedCommand {
            name: "test".into(),
            description: "Run the unit tests".into(),
            argv: vec!["/bin/sh".into(), "-c".into(), "make test".into()],
            image: "toolchain:latest".into(),
            env: vec![("CI".into(), "1".into())],
            workdir: "/work".into(),
            deadline_secs: 60,
            output_bytes: 65_536,
            scratch: Scratch {
                bytes: 64 << 20,
                inodes: 4096,
            },
            runs: 4,
            writes: Writes::None,
        }
    }

    #[test]
    fn a_good_command_passes_in_the_phases_that_run_processes() {
        for phase in [Phase::Review, Phase::Execute, Phase::Fix] {
            assert_eq!(check(&command(), phase), Ok(()));
        }
        let mut work = command();
        work.writes = Writes::Work;
        assert_eq!(check(&work, Phase::Execute), Ok(()));
        assert_eq!(check(&work, Phase::Fix), Ok(()));
    }

    #[test]
    fn the_read_only_phases_refuse_any_list_and_review_refuses_writes_work() {
        for phase in [Phase::Planning, Phase::Questions] {
            assert_eq!(check(&command(), phase).map_err(|f| f.field), Err("phase"));
        }
        let mut work = command();
        work.writes = Writes::Work;
        assert_eq!(
            check(&work, Phase::Review).map_err(|f| f.field),
            Err("writes")
        );
    }

    #[test]
    fn each_bound_refuses_with_its_field() {
        type Change = Box<dyn Fn(&mut ApprovedCommand)>;
        let cases: Vec<(&str, Change)> = vec![
            ("name", Box::new(|c| c.name = "Test".into())),
            ("name", Box::new(|c| c.name = "-x".into())),
            ("name", Box::new(|c| c.name = "a".repeat(65))),
            ("name", Box::new(|c| c.name = "tést".into())),
            ("description", Box::new(|c| c.description = String::new())),
            ("description", Box::new(|c| c.description = "a\nb".into())),
            (
                "description",
                Box::new(|c| c.description = "\u{1b}[31m".into()),
            ),
            ("description", Box::new(|c| c.description = "a".repeat(201))),
            (
                "description",
                Box::new(|c| c.description = "a\u{2028}b".into()),
            ),
            ("argv", Box::new(|c| c.argv.clear())),
            ("argv", Box::new(|c| c.argv[0] = "sh".into())),
            ("argv", Box::new(|c| c.argv[0] = "/bin/../bin/sh".into())),
            ("argv", Box::new(|c| c.argv.push("a\0b".into()))),
            ("argv", Box::new(|c| c.argv = vec!["/bin/sh".into(); 65])),
            ("image", Box::new(|c| c.image = String::new())),
            (
                "env",
                Box::new(|c| c.env.push(("ANTHROPIC_API_KEY".into(), "x".into()))),
            ),
            (
                "env",
                Box::new(|c| c.env.push(("LD_PRELOAD".into(), "x".into()))),
            ),
            (
                "env",
                Box::new(|c| c.env.push(("HTTPS_PROXY".into(), "x".into()))),
            ),
            (
                "env",
                Box::new(|c| c.env.push(("lower".into(), "x".into()))),
            ),
            ("env", Box::new(|c| c.env.push(("A=B".into(), "x".into())))),
            ("env", Box::new(|c| c.env.push(("CI".into(), "2".into())))),
            ("env", Box::new(|c| c.env.push(("X".into(), "a\0".into())))),
            ("workdir", Box::new(|c| c.workdir = "/tmp".into())),
            ("workdir", Box::new(|c| c.workdir = "/work/../etc".into())),
            ("workdir", Box::new(|c| c.workdir = "/work/.git".into())),
            (
                "workdir",
                Box::new(|c| c.workdir = "/work/.git/hooks".into()),
            ),
            ("workdir", Box::new(|c| c.workdir = "/work/".into())),
            ("workdir", Box::new(|c| c.workdir = "/workx".into())),
            ("deadline_secs", Box::new(|c| c.deadline_secs = 0)),
            ("deadline_secs", Box::new(|c| c.deadline_secs = 3601)),
            ("output_bytes", Box::new(|c| c.output_bytes = 2 << 20)),
            ("scratch", Box::new(|c| c.scratch.bytes = 4095)),
            ("scratch", Box::new(|c| c.scratch.inodes = 1)),
            ("runs", Box::new(|c| c.runs = 0)),
            ("runs", Box::new(|c| c.runs = 65)),
        ];
        for (field, change) in cases {
            let mut c = command();
            change(&mut c);
            let fault = check(&c, Phase::Execute).expect_err(field);
            assert_eq!(fault.field, field, "{fault}");
        }
        assert!(is_workdir("/work/sub/dir"));
        assert!(is_workdir("/work/.github"));
    }

    #[test]
    fn a_list_is_bounded_and_names_are_distinct() {
        assert_eq!(
            check_list(&[command(), command()], Phase::Execute).map_err(|f| f.field),
            Err("name")
        );
        let many: Vec<ApprovedCommand> = (0..33)
            .map(|i| {
                let mut c = command();
                c.name = format!("c{i}");
                c
            })
            .collect();
        assert_eq!(
            check_list(&many, Phase::Execute).map_err(|f| f.field),
            Err("list")
        );
        assert_eq!(check_list(&many[..32], Phase::Execute), Ok(()));
    }

    #[test]
    fn a_call_holds_a_name_and_nothing_else() {
        assert_eq!(
            parse_call(br#"{"name":"test"}"#),
            Ok(Call {
                name: "test".into()
            })
        );
        for bad in [
            &br#"{"name":"test","argv":["-x"]}"#[..],
            br#"{"name":"test","args":"x"}"#,
            br#"{"name":"Test"}"#,
            br#"{"name":"../x"}"#,
            br#"{"name":["test"]}"#,
            br#"{}"#,
            br#"["test"]"#,
            b"test",
            b"",
        ] {
            assert!(parse_call(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let long = format!(r#"{{"name":"t","pad":"{}"}}"#, "x".repeat(MAX_CALL_LINE));
        assert!(parse_call(long.as_bytes()).is_err());
    }

    #[test]
    fn the_relays_lines_parse_as_they_are_written() {
        let call = ToHost::Call {
            seq: 7,
            call: Call {
                name: "test".into(),
            },
        };
        for line in [ToHost::Listening, call, ToHost::Cancel { seq: 3 }] {
            let text = line.line().unwrap();
            assert_eq!(ToHost::parse(text.trim_end().as_bytes()), Ok(line));
        }
        for bad in [
            &br#"{"relay":"ready"}"#[..],
            br#"{"cancel":-1}"#,
            br#"{"call":{"name":"test"}}"#,
            br#"{"call":{"name":"test","argv":[]},"seq":1}"#,
            br#"{"call":{"name":"test"},"seq":1,"x":1}"#,
            br#"[]"#,
        ] {
            assert!(
                ToHost::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_answer_round_trips_as_one_line() {
        let answer = Answer::Refused {
            refusal: CallRefusal::CommandUnknown,
            expected: "one of test".into(),
            observed: "x".into(),
        };
        let line = serde_json::to_string(&answer).unwrap();
        assert!(!line.contains('\n'));
        assert!(line.contains("command-unknown"), "{line}");
        assert_eq!(serde_json::from_str::<Answer>(&line).unwrap(), answer);
    }
}
