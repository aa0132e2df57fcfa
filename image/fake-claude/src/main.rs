//! A fake Claude CLI for the test image. It follows the documented output envelope of
//! `claude -p --output-format json`, needs no network and no credential, and never runs another
//! process. Later issues drive invocations through it.
//!
//! - `claude --version` prints a version line.
//! - `claude -p PROMPT --output-format json [--json-schema SCHEMA]` prints one result envelope.
//!   With a schema, `structured_output` is an object; the prompt `FAIL` gives an error result.

const VERSION: &str = "0.0.0 (Claude Code; cordon fake)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version" || a == "-v") {
        println!("{VERSION}");
        return;
    }
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let Some(prompt) = value_of("-p").or_else(|| value_of("--print")) else {
        eprintln!("claude (fake): only --version and -p PROMPT are supported");
        std::process::exit(2);
    };
    let schema = value_of("--json-schema");
    let failed = prompt == "FAIL";
    let mut envelope = serde_json::json!({
        "type": "result",
        "subtype": if failed { "error_during_execution" } else { "success" },
        "is_error": failed,
        "duration_ms": 1,
        "num_turns": 1,
        "result": if failed { String::new() } else { format!("fake answer to {} bytes of prompt", prompt.len()) },
        "session_id": "00000000-0000-4000-8000-000000000000",
        "total_cost_usd": 0.0,
    });
    if let (Some(_), Some(map)) = (schema, envelope.as_object_mut()) {
        map.insert(
            "structured_output".into(),
            serde_json::json!({ "answer": "fake" }),
        );
    }
    println!("{envelope}");
    std::process::exit(i32::from(failed));
}
