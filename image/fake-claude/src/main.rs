//! A fake Claude CLI for the test image. It follows the documented output envelope of
//! `claude -p --output-format json`, needs no network and no credential, and runs no other
//! process but the MCP server its `--mcp-config` names, in the one mode that calls a tool.
//!
//! - `claude --version` prints a version line.
//! - `claude -p --output-format json [--json-schema SCHEMA] [--] PROMPT` prints one single-line result
//!   envelope as the last line on stdout. Unknown flags are accepted and ignored.
//!
//! The first word of the prompt picks a mode (anything else is `normal`):
//!
//! - `normal`: success, `result` = `fake answer: N bytes of prompt; allowed tools: T`. With
//!   `--json-schema`, `structured_output` is an instance generated from the schema; a schema that
//!   is not JSON turns any success into `schema-violation`.
//! - `cordon-fake:schema-violation`: `error_max_structured_output_retries`, exit 1.
//! - `cordon-fake:schema-ignored`: what the real CLI can do when the model never makes a valid
//!   StructuredOutput call: exit 0, `subtype: success`, `is_error: false`, and a
//!   `structured_output` that ignores the schema, `{"ignored": true}` (every required property
//!   missing, and `ignored` a boolean where a schema may type it otherwise), with or without
//!   `--json-schema`.
//! - `cordon-fake:invalid-utf8`: raw non-UTF-8 bytes on stdout, then success.
//! - `cordon-fake:flood` / `cordon-fake:stderr-flood`: 10 MiB on stdout / stderr, then success.
//! - `cordon-fake:hang`: sleeps forever, prints nothing.
//! - `cordon-fake:signal`: dies of SIGABRT, no envelope.
//! - `cordon-fake:exit-N` (N in 0..=255): success envelope, exit code N.
//! - `cordon-fake:write-outside`: tries to write where the sandbox must deny it; success
//!   `write-outside: denied N of N`, or `error_during_execution` `write-outside: WROTE ...` and
//!   exit 3.
//! - `cordon-fake:write-gitlink PATH`: tries to write beneath the gitlink `/work/PATH` and to
//!   plant `.git` there, and writes a file beside it; success `write-gitlink: beneath ...: wrote 0
//!   of 3; beside: wrote`, otherwise `error_during_execution` and exit 3.
//! - `cordon-fake:script [OPS]`: applies a JSON array of file operations in /work, in order, and
//!   stops at the first that fails: `{"write":[PATH,TEXT]}`, `{"delete":PATH}`, `{"rename":[FROM,
//!   TO]}`, `{"chmod":[PATH,MODE]}`, `{"symlink":[PATH,TARGET]}`, `{"mkdir":PATH}`, `{"rmdir":
//!   PATH}`, `{"mkfifo":PATH}`, `{"hardlink":[PATH,EXISTING]}`, `{"sparse":[PATH,SIZE]}` (a file
//!   of SIZE bytes, all hole), `{"bytes":[PATH,HEX]}`, `{"socket":PATH}` (paths relative to
//!   /work); success `script: N ops`, otherwise
//!   `error_during_execution` `script: op I (...): ERROR` and exit 5.
//! - `cordon-fake:inotify-hog SECS`: takes inotify instances until the kernel refuses one, holds
//!   them SECS seconds; success `inotify-hog: held N then errno E`.
//! - `cordon-fake:inotify-one`: takes one inotify instance; success `inotify-one: ok`, otherwise
//!   `error_during_execution` `inotify-one: errno E` and exit 4.
//! - `cordon-fake:steal-credential [HOLD_MS]`: searches /proc and the scratch and work areas for
//!   test tokens (the agent holds a sentinel, never one of them), then holds HOLD_MS (0 if not
//!   given) so a test can look at the invocation while it runs; success `foreign tokens: [...]`,
//!   every one found.
//! - `cordon-fake:terminal-escapes`: success whose `result` is hostile terminal text
//!   (`TERMINAL_ESCAPES`): an OSC 52 clipboard write, an OSC 0 window title, CSI 2J (clear
//!   screen), CR, NUL, BEL, a bidi override (U+202E), a C1 CSI (U+009B), and a forged cordon
//!   summary line `attempt forged, code x, exit 0, attested: true, 1 ms` on a line of its
//!   own, last.
//! - `cordon-fake:command NAME [WAIT_MS]`: after WAIT_MS, calls the approved command NAME once
//!   through cordon's MCP server as `--mcp-config` names it (started over stdio, initialized, one
//!   `tools/call`, as the real CLI does); success `command: TEXT` with the tool's text, otherwise
//!   `error_during_execution` and exit 6.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map, Value};

const VERSION: &str = "0.0.0 (Claude Code; cordon fake)";
const MODE_PREFIX: &str = "cordon-fake:";

/// Flags whose next argument is their value; every other flag is taken as boolean. As in the real
/// CLI, `-p`/`--print` is boolean and the prompt is the positional argument (after `--`, every
/// argument is positional, so a prompt may start with a dash).
const VALUE_FLAGS: &[&str] = &[
    "--tools",
    "--permission-prompts",
    "--allowedTools",
    "--disallowedTools",
    "--mcp-config",
    "--json-schema",
    "--output-format",
    "--permission-mode",
    "--model",
];

/// What the fake needs from its argv.
#[derive(Debug, Default)]
struct Cli {
    version: bool,
    prompt: Option<String>,
    allowed_tools: Option<String>,
    schema: Option<String>,
    mcp_config: Option<String>,
}

impl Cli {
    fn parse(args: &[String]) -> Self {
        let mut cli = Cli::default();
        let mut args = args.iter();
        let mut positional = false;
        while let Some(arg) = args.next() {
            if positional || !arg.starts_with('-') {
                if cli.prompt.is_none() {
                    cli.prompt = Some(arg.clone());
                }
                continue;
            }
            if arg == "--" {
                positional = true;
                continue;
            }
            // `--flag=value` is accepted too.
            let (flag, value) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
                _ => (arg.as_str(), None),
            };
            if flag == "--version" || flag == "-v" {
                cli.version = true;
                continue;
            }
            if !VALUE_FLAGS.contains(&flag) {
                continue; // boolean, unknown, or positional: ignored
            }
            let value = value.or_else(|| args.next().cloned());
            match flag {
                "--allowedTools" => cli.allowed_tools = value,
                "--json-schema" => cli.schema = value,
                "--mcp-config" => cli.mcp_config = value,
                _ => {}
            }
        }
        cli
    }
}

/// The envelope to print last and the exit code to leave with.
#[derive(Debug)]
struct Outcome {
    envelope: Value,
    code: i32,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = Cli::parse(&args);
    if cli.version {
        println!("{VERSION}");
        return;
    }
    let Some(prompt) = cli.prompt.as_deref() else {
        eprintln!("claude (fake): only --version and -p [--] PROMPT are supported");
        std::process::exit(2);
    };
    let mode = prompt
        .split_whitespace()
        .next()
        .filter(|word| word.starts_with(MODE_PREFIX))
        .unwrap_or("normal");
    let outcome = match mode {
        "cordon-fake:schema-violation" => schema_violation(),
        "cordon-fake:schema-ignored" => schema_ignored(),
        "cordon-fake:invalid-utf8" => invalid_utf8(&cli),
        "cordon-fake:flood" => flood(&cli, io::stdout().lock()),
        "cordon-fake:stderr-flood" => flood(&cli, io::stderr().lock()),
        "cordon-fake:hang" => hang(),
        "cordon-fake:signal" => signal(),
        "cordon-fake:write-outside" => write_outside(&cli),
        "cordon-fake:write-gitlink" => write_gitlink(&cli, prompt),
        "cordon-fake:script" => script(&cli, prompt),
        "cordon-fake:inotify-hog" => inotify_hog(&cli, prompt),
        "cordon-fake:inotify-one" => inotify_one(&cli),
        "cordon-fake:steal-credential" => steal_credential(&cli, prompt),
        "cordon-fake:terminal-escapes" => success(&cli, TERMINAL_ESCAPES),
        "cordon-fake:command" => command(&cli, prompt),
        other => match exit_code_of(other) {
            Some(code) => exit_with(&cli, code),
            None => normal(&cli, prompt),
        },
    };
    finish(&outcome)
}

/// Prints the envelope as the last stdout line and exits. A closed stdout changes nothing.
fn finish(outcome: &Outcome) -> ! {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{}", outcome.envelope);
    let _ = out.flush();
    std::process::exit(outcome.code)
}

fn envelope(subtype: &str, is_error: bool, result: &str) -> Value {
    json!({
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "duration_ms": 1,
        "num_turns": 1,
        "result": result,
        "session_id": "00000000-0000-4000-8000-000000000000",
        "total_cost_usd": 0.0,
    })
}

/// A success envelope; with `--json-schema` it carries `structured_output` like Claude's does.
fn success(cli: &Cli, result: &str) -> Outcome {
    let mut envelope = envelope("success", false, result);
    if let Some(text) = &cli.schema {
        let Ok(schema) = serde_json::from_str::<Value>(text) else {
            eprintln!("claude (fake): --json-schema is not valid JSON");
            return schema_violation();
        };
        if let Some(map) = envelope.as_object_mut() {
            map.insert("structured_output".into(), instance_of(&schema));
        }
    }
    Outcome { envelope, code: 0 }
}

/// The smallest plausible value that satisfies the common cases of a JSON Schema.
fn instance_of(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::Array(types)) => types.first().and_then(Value::as_str),
        Some(ty) => ty.as_str(),
        None => None,
    };
    match ty {
        Some("object") => object_instance(schema),
        Some("string") => json!("fake"),
        Some("integer" | "number") => json!(0),
        Some("boolean") => json!(false),
        Some("array") => {
            let min_items = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            if min_items >= 1 {
                json!([instance_of(schema.get("items").unwrap_or(&Value::Null))])
            } else {
                json!([])
            }
        }
        _ => Value::Null,
    }
}

/// Every required property (or every property when nothing is required), generated recursively.
fn object_instance(schema: &Value) -> Value {
    let properties = schema.get("properties").and_then(Value::as_object);
    let names: Vec<&str> = match schema.get("required").and_then(Value::as_array) {
        Some(required) => required.iter().filter_map(Value::as_str).collect(),
        None => properties
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default(),
    };
    let object: Map<String, Value> = names
        .into_iter()
        .map(|name| {
            let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
            (name.to_owned(), instance_of(property))
        })
        .collect();
    Value::Object(object)
}

fn normal(cli: &Cli, prompt: &str) -> Outcome {
    let tools = cli.allowed_tools.as_deref().unwrap_or("none");
    let result = format!(
        "fake answer: {} bytes of prompt; allowed tools: {tools}",
        prompt.len()
    );
    success(cli, &result)
}

/// What Claude reports when its structured output keeps failing its own schema check.
fn schema_violation() -> Outcome {
    Outcome {
        envelope: envelope("error_max_structured_output_retries", true, ""),
        code: 1,
    }
}

/// A success whose structured output ignores the schema: cordon must not trust the CLI's check.
fn schema_ignored() -> Outcome {
    let mut envelope = envelope("success", false, "ignored the schema");
    if let Some(map) = envelope.as_object_mut() {
        map.insert("structured_output".into(), json!({ "ignored": true }));
    }
    Outcome { envelope, code: 0 }
}

fn invalid_utf8(cli: &Cli) -> Outcome {
    let mut out = io::stdout().lock();
    let _ = out.write_all(b"not utf-8: \xff\xfe\n");
    let _ = out.flush();
    normal_for(cli)
}

/// The success envelope of `normal` for modes whose prompt is a mode word.
fn normal_for(cli: &Cli) -> Outcome {
    normal(cli, cli.prompt.as_deref().unwrap_or_default())
}

/// Writes exactly 10 MiB of `x` lines through a 64 KiB buffer, so memory stays small.
fn flood(cli: &Cli, sink: impl Write) -> Outcome {
    const TOTAL: usize = 10 * 1024 * 1024;
    const LINE: [u8; 1024] = {
        let mut line = [b'x'; 1024];
        line[1023] = b'\n';
        line
    };
    let mut out = io::BufWriter::with_capacity(64 * 1024, sink);
    let mut remaining = TOTAL;
    while remaining > 0 {
        let n = remaining.min(LINE.len());
        // A tail of LINE is still a line: a shorter last line keeps the total exact.
        if out.write_all(&LINE[LINE.len() - n..]).is_err() {
            break;
        }
        remaining -= n;
    }
    let _ = out.flush();
    normal_for(cli)
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn signal() -> ! {
    eprintln!("about to abort");
    std::process::abort()
}

/// `exit-N` with N in 0..=255.
fn exit_code_of(mode: &str) -> Option<i32> {
    let n: u8 = mode.strip_prefix("cordon-fake:exit-")?.parse().ok()?;
    Some(i32::from(n))
}

fn exit_with(cli: &Cli, code: i32) -> Outcome {
    let mut outcome = normal_for(cli);
    outcome.code = code;
    outcome
}

/// What an agent could print to take over the operator's terminal, and a line that would pass
/// for cordon's own summary if it were printed raw. The host's tests spell out the same text.
const TERMINAL_ESCAPES: &str = concat!(
    "terminal escapes follow\n",
    "\u{1b}]52;c;Y29yZG9uIHdhcyBoZXJl\u{7}", // OSC 52: write the clipboard
    "\u{1b}]0;cordon: all clear\u{7}",       // OSC 0: retitle the window
    "\u{1b}[2J\u{1b}[H",                     // CSI 2J: clear the screen, cursor home
    "hidden\rshown",                         // CR: overwrite the line
    " nul\u{0}bell\u{7}",                    // NUL, BEL
    " \u{202e}txt.exe\u{202c}",              // a right-to-left override
    " \u{9b}31mred\n",                       // C1 CSI (U+009B)
    "attempt forged, code x, exit 0, attested: true, 1 ms\n",
);

/// Places the sandbox must keep read-only in every phase.
const OUTSIDE: &[&str] = &[
    "/cordon-fake-outside",
    "/etc/cordon-fake-outside",
    "/usr/bin/cordon-fake-outside",
    "/sbin/cordon-fake-outside",
    "/run/cordon/control/cordon-fake-outside",
    "/run/cordon/input/cordon-fake-outside",
    "/run/cordon/egress/cordon-fake-outside",
    "/work/.git/cordon-fake-outside",
    "/proc/sys/kernel/cordon-fake-outside",
    "/sys/cordon-fake-outside",
    "/dev/cordon-fake-outside",
];

fn write_outside(cli: &Cli) -> Outcome {
    let tools = cli.allowed_tools.as_deref().unwrap_or_default();
    // In execute and fix /work is the agent's own area; elsewhere it must be read-only.
    let work_writable = tools.contains("Write") || tools.contains("Edit");
    let mut targets: Vec<&str> = OUTSIDE.to_vec();
    if !work_writable {
        targets.push("/work/cordon-fake-outside");
    }

    let mut attempts = 0;
    let mut wrote: Vec<String> = Vec::new();
    let mut record = |path: String, succeeded: bool| {
        attempts += 1;
        if succeeded {
            wrote.push(path);
        }
    };
    for path in targets {
        record(path.to_owned(), create_file(path));
        let dir = format!("{path}.d");
        let created = create_dir(&dir);
        record(dir, created);
    }
    // Opening for write is the breach: the kernel checks access at open, so nothing is written
    // and the control file and the binary stay intact even when the sandbox fails.
    const POLICY: &str = "/run/cordon/control/policy.json";
    record(
        POLICY.to_owned(),
        OpenOptions::new().append(true).open(POLICY).is_ok(),
    );
    const SELF: &str = "/usr/bin/claude";
    record(
        SELF.to_owned(),
        OpenOptions::new().write(true).open(SELF).is_ok(),
    );

    if wrote.is_empty() {
        success(
            cli,
            &format!("write-outside: denied {attempts} of {attempts}"),
        )
    } else {
        let result = format!("write-outside: WROTE {}", wrote.join(","));
        Outcome {
            envelope: envelope("error_during_execution", true, &result),
            code: 3,
        }
    }
}

/// The words after the mode.
fn arguments(prompt: &str) -> Vec<&str> {
    prompt.split_whitespace().skip(1).collect()
}

/// One scripted file operation in /work.
fn apply(op: &Value) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let path = |v: &Value| -> Result<String, String> {
        v.as_str()
            .map(|p| format!("/work/{p}"))
            .ok_or_else(|| "a path is not a string".to_owned())
    };
    let pair = |v: &Value| -> Result<(Value, Value), String> {
        match v.as_array().map(Vec::as_slice) {
            Some([a, b]) => Ok((a.clone(), b.clone())),
            _ => Err("not a pair".to_owned()),
        }
    };
    let object = op
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or("not one operation")?;
    let (kind, arg) = object.iter().next().ok_or("empty")?;
    let io = |e: io::Error| e.to_string();
    match kind.as_str() {
        "write" => {
            let (p, text) = pair(arg)?;
            std::fs::write(path(&p)?, text.as_str().unwrap_or_default()).map_err(io)
        }
        "delete" => std::fs::remove_file(path(arg)?).map_err(io),
        "rename" => {
            let (from, to) = pair(arg)?;
            std::fs::rename(path(&from)?, path(&to)?).map_err(io)
        }
        "chmod" => {
            let (p, mode) = pair(arg)?;
            let mode = mode.as_u64().ok_or("a mode is not a number")? as u32;
            std::fs::set_permissions(path(&p)?, std::fs::Permissions::from_mode(mode)).map_err(io)
        }
        "symlink" => {
            let (p, target) = pair(arg)?;
            std::os::unix::fs::symlink(target.as_str().unwrap_or_default(), path(&p)?).map_err(io)
        }
        "mkdir" => std::fs::create_dir(path(arg)?).map_err(io),
        "rmdir" => std::fs::remove_dir(path(arg)?).map_err(io),
        "mkfifo" => {
            let c = std::ffi::CString::new(path(arg)?).map_err(|e| e.to_string())?;
            // SAFETY: mkfifo reads a NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error().to_string())
            }
        }
        "hardlink" => {
            let (p, existing) = pair(arg)?;
            std::fs::hard_link(path(&existing)?, path(&p)?).map_err(io)
        }
        "sparse" => {
            let (p, size) = pair(arg)?;
            let size = size.as_u64().ok_or("a size is not a number")?;
            std::fs::File::create(path(&p)?)
                .and_then(|f| f.set_len(size))
                .map_err(io)
        }
        "bytes" => {
            let (p, hex) = pair(arg)?;
            let hex = hex.as_str().unwrap_or_default();
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|e| e.to_string())?;
            std::fs::write(path(&p)?, bytes).map_err(io)
        }
        "socket" => std::os::unix::net::UnixListener::bind(path(arg)?)
            .map(drop)
            .map_err(io),
        other => Err(format!("unknown operation {other:?}")),
    }
}

/// Applies the JSON array of file operations after the mode word, in order.
fn script(cli: &Cli, prompt: &str) -> Outcome {
    let text = prompt
        .trim_start()
        .strip_prefix("cordon-fake:script")
        .unwrap_or_default();
    let ops: Vec<Value> = match serde_json::from_str(text) {
        Ok(Value::Array(ops)) => ops,
        _ => {
            return Outcome {
                envelope: envelope("error_during_execution", true, "script: not a JSON array"),
                code: 5,
            }
        }
    };
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = apply(op) {
            return Outcome {
                envelope: envelope(
                    "error_during_execution",
                    true,
                    &format!("script: op {i} ({op}): {e}"),
                ),
                code: 5,
            };
        }
    }
    success(cli, &format!("script: {} ops", ops.len()))
}

/// Tries to write beneath the gitlink named after the mode and to plant `.git` there, and writes a
/// file beside it (which must work: the agent may write its work tree).
fn write_gitlink(cli: &Cli, prompt: &str) -> Outcome {
    let Some(gitlink) = arguments(prompt).first().map(|g| format!("/work/{g}")) else {
        return Outcome {
            envelope: envelope("error_during_execution", true, "write-gitlink: no path"),
            code: 2,
        };
    };
    let beneath = [
        create_file(&format!("{gitlink}/planted.txt")),
        create_dir(&format!("{gitlink}/.git")),
        create_file(&format!("{gitlink}/.git")),
    ];
    let beside = create_file("/work/cordon-fake-beside.txt");
    let wrote = beneath.iter().filter(|w| **w).count();
    let result = format!(
        "write-gitlink: beneath {gitlink}: wrote {wrote} of {}; beside: {}",
        beneath.len(),
        if beside { "wrote" } else { "denied" }
    );
    if wrote == 0 && beside {
        success(cli, &result)
    } else {
        Outcome {
            envelope: envelope("error_during_execution", true, &result),
            code: 3,
        }
    }
}

fn inotify() -> Result<i32, i32> {
    // SAFETY: inotify_init1 takes flags only.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(fd)
    }
}

/// Takes inotify instances until the kernel refuses one (the per-user limit), holds them for the
/// number of seconds after the mode, and reports how many it got and why it stopped.
fn inotify_hog(cli: &Cli, prompt: &str) -> Outcome {
    let hold: u64 = arguments(prompt)
        .first()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut held = Vec::new();
    let stopped = loop {
        match inotify() {
            Ok(fd) if held.len() < 100_000 => held.push(fd),
            Ok(_) => break 0,
            Err(errno) => break errno,
        }
    };
    std::thread::sleep(Duration::from_secs(hold));
    success(
        cli,
        &format!("inotify-hog: held {} then errno {stopped}", held.len()),
    )
}

/// Takes one inotify instance.
fn inotify_one(cli: &Cli) -> Outcome {
    match inotify() {
        Ok(_) => success(cli, "inotify-one: ok"),
        Err(errno) => Outcome {
            envelope: envelope(
                "error_during_execution",
                true,
                &format!("inotify-one: errno {errno}"),
            ),
            code: 4,
        },
    }
}

/// Creates and writes a new file; cleans up if that worked.
fn create_file(path: &str) -> bool {
    let Ok(mut file) = OpenOptions::new().write(true).create_new(true).open(path) else {
        return false;
    };
    let _ = file.write_all(b"cordon fake claude was here\n");
    drop(file);
    let _ = fs::remove_file(path);
    true
}

fn create_dir(path: &str) -> bool {
    if fs::create_dir(path).is_err() {
        return false;
    }
    let _ = fs::remove_dir(path);
    true
}

/// Limits that keep the credential search bounded.
const SCAN_ROOTS: &[&str] = &["/run/cordon", "/tmp", "/home/agent", "/work"];
const SCAN_MAX_DEPTH: usize = 8;
const SCAN_MAX_FILES: usize = 5_000;
const SCAN_MAX_BYTES: u64 = 1024 * 1024;

fn steal_credential(cli: &Cli, prompt: &str) -> Outcome {
    let hold: u64 = arguments(prompt)
        .first()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Assembled at run time so this binary never holds the needle next to token characters.
    let needle = ["cordon", "test", "token", ""].join("-");
    let mut found = BTreeSet::new();

    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let is_pid = name
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
            if !is_pid {
                continue;
            }
            for file in ["environ", "cmdline"] {
                if let Ok(bytes) = read_limited(&entry.path().join(file)) {
                    find_tokens(&bytes, needle.as_bytes(), &mut found);
                }
            }
        }
    }
    let mut budget = SCAN_MAX_FILES;
    for root in SCAN_ROOTS {
        scan_tree(
            Path::new(root),
            1,
            &mut budget,
            needle.as_bytes(),
            &mut found,
        );
    }

    // Every token found: the agent holds a sentinel, so its own credential is not one of them.
    let foreign: Vec<String> = found.into_iter().collect();
    let listed = serde_json::to_string(&foreign).unwrap_or_else(|_| "[]".into());
    std::thread::sleep(Duration::from_millis(hold));
    success(cli, &format!("foreign tokens: {listed}"))
}

/// Regular files only (symlinks are not followed), within the depth and file limits.
fn scan_tree(
    dir: &Path,
    depth: usize,
    budget: &mut usize,
    needle: &[u8],
    found: &mut BTreeSet<String>,
) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        // `DirEntry::file_type` describes the entry itself, never a symlink's target.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            if depth < SCAN_MAX_DEPTH {
                scan_tree(&path, depth + 1, budget, needle, found);
            }
        } else if kind.is_file() {
            *budget -= 1;
            let small = entry.metadata().is_ok_and(|m| m.len() <= SCAN_MAX_BYTES);
            if small {
                if let Ok(bytes) = read_limited(&path) {
                    find_tokens(&bytes, needle, found);
                }
            }
        }
    }
}

/// Reads at most 1 MiB, even if the file grew after it was measured.
fn read_limited(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(SCAN_MAX_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Adds every `needle` followed by one or more of `[A-Za-z0-9-]` in `bytes` to `found`.
fn find_tokens(bytes: &[u8], needle: &[u8], found: &mut BTreeSet<String>) {
    let mut rest = bytes;
    while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
        let tail = &rest[at + needle.len()..];
        let len = tail
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-')
            .count();
        if len > 0 {
            let token = &rest[at..at + needle.len() + len];
            found.insert(String::from_utf8_lossy(token).into_owned());
        }
        rest = &tail[len..];
    }
}

/// Calls one approved command through cordon's MCP server, after an optional wait.
fn command(cli: &Cli, prompt: &str) -> Outcome {
    let mut words = prompt.split_whitespace().skip(1);
    let name = words.next().unwrap_or_default();
    let wait = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(wait));
    match call_tool(cli, name) {
        Ok(text) => success(cli, &format!("command: {text}")),
        Err(e) => Outcome {
            envelope: envelope("error_during_execution", true, &format!("command: {e}")),
            code: 6,
        },
    }
}

/// One MCP session with the server `--mcp-config` names: initialize, initialized, one call of
/// its tool with `{"name": NAME}`; the call's text.
fn call_tool(cli: &Cli, name: &str) -> Result<String, String> {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let config: Value = serde_json::from_str(cli.mcp_config.as_deref().ok_or("no --mcp-config")?)
        .map_err(|e| format!("--mcp-config: {e}"))?;
    let (server_name, server) = config["mcpServers"]
        .as_object()
        .and_then(|servers| servers.iter().next())
        .ok_or("--mcp-config names no server")?;
    let program = server["command"]
        .as_str()
        .ok_or("the server has no command")?;
    let args: Vec<&str> = server["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {server_name} ({program}): {e}"))?;
    let tool = "run_approved_command";
    let session = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": "fake"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": tool, "arguments": {"name": name}}}),
    ];
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    for message in session {
        writeln!(stdin, "{message}").map_err(|e| format!("writing to the server: {e}"))?;
    }
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut text = Err("the server ended without answering the call".to_owned());
    for line in io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading the server: {e}"))?;
        let Ok(reply) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if reply["id"] == 1 {
            text = reply["result"]["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("no text in {reply}"));
            break;
        }
    }
    drop(stdin);
    let _ = child.wait();
    text
}
