//! An invocation's result, assembled from what happened by one pure function, so every rule about
//! what counts as an answer is unit-tested here.
//!
//! - stdout and stderr are the workload's bytes, bounded, decoded as strict UTF-8 (a bound may
//!   cut the last character; anything else invalid is a `capture-failure`);
//! - the init's first stderr line must attest the digest of the policy the host wrote, with
//!   nothing skipped; without that the result is a failure whatever the workload printed;
//! - output is an answer only with exit code 0, no signal, no stop reason, and an envelope the
//!   adapter accepts; with a schema, only a `structured_output` that cordon's own validator finds
//!   matching it (the CLI's check is never trusted), else `answer-invalid`;
//! - the attempt id and referenced code hash are echoed for the caller to check.

use cordon_contract::{Id, Phase, Vendor};

use super::{claude, AnswerSchema, StopReason};
use crate::engine::pending::Leftover;
use crate::error::Error;
use crate::launch::{self, InitVerdict};

/// Where the time went (milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Timings {
    pub setup_ms: f64,
    pub run_ms: f64,
    pub cleanup_ms: f64,
    pub total_ms: f64,
    /// The proof harness's fixtures' serial share of the rest (zero without fixtures, as against
    /// a real vendor): the proxy's start waiting for their addresses, and their removal with the
    /// settle that follows it. Their CPU beside the other starts is not in it.
    pub fixtures_ms: f64,
}

/// What the init attested.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attestation {
    pub policy_digest: String,
    pub checks: Vec<Id>,
    pub landlock_abi: u8,
    pub preflight_us: u64,
    /// The loopback port of the agent's egress forwarder (absent: no egress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_forward: Option<u16>,
    /// The directories the init pinned above nested gitlinks (relative to /work).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<String>,
}

/// Why there is no answer: a stable id and the evidence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub id: String,
    pub message: String,
}

impl Failure {
    fn new(id: &str, message: impl Into<String>) -> Failure {
        Failure {
            id: id.to_owned(),
            message: message.into(),
        }
    }
}

/// A settled invocation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InvocationResult {
    /// Echoed from the request.
    pub attempt: String,
    /// Echoed from the request.
    pub referenced_code_hash: String,
    pub phase: Phase,
    pub vendor: Vendor,
    pub allocation: uuid::Uuid,
    pub exit_code: Option<i64>,
    /// The signal the workload died of (exit code 128+n from the init; a workload that exits
    /// with such a code on its own looks the same).
    pub signal: Option<i32>,
    /// Absent when the agent finished on its own.
    pub stop_reason: Option<StopReason>,
    /// The answer: the validated `structured_output` as compact JSON text when the request had a
    /// schema (planning always, review when given one), the result text otherwise.
    pub answer: Option<String>,
    /// Why there is no answer.
    pub failure: Option<Failure>,
    /// The workload's stdout, strict UTF-8 (absent when it was not).
    pub stdout: Option<String>,
    /// The workload's stderr after the init's attestation line, strict UTF-8.
    pub stderr: Option<String>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub attestation: Option<Attestation>,
    /// Objects whose removal could not be confirmed: record them and keep them owned.
    pub unreleased: Vec<Leftover>,
    pub timings: Timings,
    /// The egress proxy's JSON lines (its attestation, then one per tunnel or refusal), as read
    /// when the agent ended; empty without a network allowlist.
    pub egress_log: Vec<serde_json::Value>,
    /// The fake vendor's JSON lines (one per request it answered), with the tests' fixtures only.
    pub vendor_log: Vec<serde_json::Value>,
    /// Every request to the terminated vendor host, in the order they ended (from the proxy's
    /// lines); empty without a credential.
    pub vendor_requests: Vec<VendorRequest>,
    /// The first budget that ran out (`requests`, `request-bytes`, `response-bytes`), if one did.
    pub vendor_budget_exhausted: Option<String>,
    /// Every call of an approved command, in order: what ran (argv, `writes`, exit, signal,
    /// duration, output bytes and the digest of the text the model was given) and what was
    /// refused (its id). Empty without approved commands.
    pub commands: Vec<crate::command::ledger::CallRecord>,
    /// Calls answered past the record bound, counted only.
    pub commands_unrecorded: u64,
}

/// One request to the terminated vendor host, as the proxy recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VendorRequest {
    pub method: String,
    /// The path alone (the proxy never records a query).
    pub path: String,
    pub status: u16,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub duration_ms: u64,
    pub model: Option<String>,
    /// The token counts the response reported (absent when it reported none).
    pub usage: Option<VendorUsage>,
    /// The `vendor-*` id when the proxy refused the request.
    pub refusal: Option<String>,
    /// The budget that refused it or cut its response.
    pub budget: Option<String>,
}

/// Token counts as the vendor reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VendorUsage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
}

/// The vendor requests among the proxy's lines (`{"egress":"vendor",...}`), and the first budget
/// that ran out. A line that does not read as one is left out of the list (it stays in the log).
fn vendor_requests(egress_log: &[serde_json::Value]) -> (Vec<VendorRequest>, Option<String>) {
    let requests: Vec<VendorRequest> = egress_log
        .iter()
        .filter(|line| line.get("egress").and_then(|v| v.as_str()) == Some("vendor"))
        .filter_map(|line| serde_json::from_value(line.clone()).ok())
        .collect();
    let exhausted = requests.iter().find_map(|r| r.budget.clone());
    (requests, exhausted)
}

impl InvocationResult {
    /// The result of a supervisor that vanished (never expected: it always sends one).
    pub(crate) fn lost(attempt: &str, allocation: uuid::Uuid) -> InvocationResult {
        InvocationResult {
            attempt: attempt.to_owned(),
            referenced_code_hash: String::new(),
            phase: Phase::Questions,
            vendor: Vendor::Claude,
            allocation,
            exit_code: None,
            signal: None,
            stop_reason: None,
            answer: None,
            failure: Some(Failure::new(
                "supervisor-lost",
                "the invocation's supervisor ended without a result",
            )),
            stdout: None,
            stderr: None,
            stdout_truncated: false,
            stderr_truncated: false,
            attestation: None,
            unreleased: Vec::new(),
            timings: Timings::default(),
            egress_log: Vec::new(),
            vendor_log: Vec::new(),
            vendor_requests: Vec::new(),
            vendor_budget_exhausted: None,
            commands: Vec::new(),
            commands_unrecorded: 0,
        }
    }
}

/// Everything that happened, as the supervisor saw it.
#[derive(Debug)]
pub struct Facts {
    pub attempt: String,
    pub referenced_code_hash: String,
    pub phase: Phase,
    pub vendor: Vendor,
    pub allocation: uuid::Uuid,
    pub exit_code: Option<i64>,
    pub output: Option<launch::Output>,
    pub policy_digest: String,
    /// The compiled schema a structured answer must match (planning's; review's when it has one).
    pub schema: Option<AnswerSchema>,
    pub stop_reason: Option<StopReason>,
    pub setup_error: Option<Error>,
    pub unreleased: Vec<Leftover>,
    pub timings: Timings,
    pub egress_log: Vec<serde_json::Value>,
    pub vendor_log: Vec<serde_json::Value>,
    pub commands: Vec<crate::command::ledger::CallRecord>,
    pub commands_unrecorded: u64,
}

/// Strict UTF-8, except that a bound may have cut the last character short.
fn strict(bytes: &[u8], truncated: bool) -> Result<String, String> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) if truncated && e.error_len().is_none() => {
            Ok(String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned())
        }
        Err(e) => Err(format!(
            "invalid UTF-8 at byte {} of {}",
            e.valid_up_to(),
            bytes.len()
        )),
    }
}

/// The signal behind an init exit code of 128+n.
fn signal_of(code: i64) -> Option<i32> {
    (129..=128 + 64)
        .contains(&code)
        .then(|| (code - 128) as i32)
}

/// Assemble the result. The first failure that applies is the one reported.
pub fn assemble(facts: Facts) -> InvocationResult {
    let mut result = InvocationResult {
        attempt: facts.attempt,
        referenced_code_hash: facts.referenced_code_hash,
        phase: facts.phase,
        vendor: facts.vendor,
        allocation: facts.allocation,
        exit_code: facts.exit_code,
        signal: facts.exit_code.and_then(signal_of),
        stop_reason: facts.stop_reason,
        answer: None,
        failure: None,
        stdout: None,
        stderr: None,
        stdout_truncated: false,
        stderr_truncated: false,
        attestation: None,
        unreleased: facts.unreleased,
        timings: facts.timings,
        vendor_requests: Vec::new(),
        vendor_budget_exhausted: None,
        egress_log: facts.egress_log,
        vendor_log: facts.vendor_log,
        commands: facts.commands,
        commands_unrecorded: facts.commands_unrecorded,
    };
    (result.vendor_requests, result.vendor_budget_exhausted) = vendor_requests(&result.egress_log);
    let mut failures: Vec<Failure> = Vec::new();
    if let Some(e) = &facts.setup_error {
        failures.push(Failure::new(e.id(), e.to_string()));
    }
    if let Some(output) = &facts.output {
        let raw = &output.raw;
        result.stdout_truncated = raw.stdout_total > raw.stdout.len() as u64;
        result.stderr_truncated = raw.stderr_total > raw.stderr.len() as u64;
        // The attestation comes first on stderr, before any workload process exists.
        match launch::verdict(output, &facts.policy_digest, false) {
            InitVerdict::Attested {
                digest_matches: true,
                checks,
                skipped,
                landlock_abi,
                preflight_us,
                egress_forward,
                pins,
            } if skipped.is_empty() => {
                result.attestation = Some(Attestation {
                    policy_digest: facts.policy_digest.clone(),
                    checks,
                    landlock_abi,
                    preflight_us,
                    egress_forward,
                    pins,
                });
            }
            InitVerdict::Refused {
                check,
                expected,
                observed,
            } => failures.push(Failure::new(
                "init-refused",
                format!("cordon-init refused {check}: expected {expected}, observed {observed}"),
            )),
            other => failures.push(Failure::new(
                "attestation-invalid",
                format!("no valid attestation of the policy the host wrote: {other:?}"),
            )),
        }
        let stderr_after_init = match raw.stderr.iter().position(|b| *b == b'\n') {
            Some(end) => &raw.stderr[end + 1..],
            None => &[][..],
        };
        match (
            strict(&raw.stdout, result.stdout_truncated),
            strict(stderr_after_init, result.stderr_truncated),
        ) {
            (Ok(stdout), Ok(stderr)) => {
                result.stdout = Some(stdout);
                result.stderr = Some(stderr);
            }
            (Err(why), _) => {
                failures.push(Failure::new("capture-failure", format!("stdout: {why}")))
            }
            (_, Err(why)) => {
                failures.push(Failure::new("capture-failure", format!("stderr: {why}")))
            }
        }
    } else if facts.setup_error.is_none() && facts.stop_reason.is_none() {
        failures.push(Failure::new("capture-failure", "no output was collected"));
    }
    if let Some(reason) = facts.stop_reason {
        failures.push(Failure::new(
            "stopped",
            format!("stopped before it finished ({reason})"),
        ));
    }
    match (result.exit_code, result.signal) {
        (_, Some(signal)) => failures.push(Failure::new(
            "signal",
            format!("the workload died of signal {signal}"),
        )),
        (Some(0), None) => {}
        (Some(code), None) => failures.push(Failure::new(
            "exit-nonzero",
            format!("the workload exited with {code}"),
        )),
        (None, None) => {}
    }
    if failures.is_empty() {
        if let Some(stdout) = &result.stdout {
            match claude::answer(result.phase, facts.schema.as_ref(), stdout) {
                Ok(answer) => result.answer = Some(answer),
                Err(claude::NotAnAnswer(why)) => failures.push(Failure::new("answer-invalid", why)),
            }
        }
    }
    result.failure = failures.into_iter().next();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{Output, RawOutput};

    const DIGEST: &str = "sha256:1111";

    fn attestation(digest: &str, skipped: &str) -> String {
        format!(
            r#"{{"cordon":"attestation","policy_digest":"{digest}","checks":["non-root-user"],"skipped":[{skipped}],"landlock_abi":6,"preflight_us":2000}}"#
        )
    }

    fn output(stdout: &[u8], stderr: &[u8], totals: Option<(u64, u64)>) -> Output {
        let raw = RawOutput {
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            stdout_total: totals.map_or(stdout.len() as u64, |t| t.0),
            stderr_total: totals.map_or(stderr.len() as u64, |t| t.1),
            interleaved: None,
        };
        Output {
            stdout: String::from_utf8_lossy(stdout).into_owned(),
            stderr: String::from_utf8_lossy(stderr).into_owned(),
            truncated: totals.is_some(),
            raw,
        }
    }

    const ENVELOPE: &str =
        r#"{"type":"result","subtype":"success","is_error":false,"result":"the answer"}"#;

    fn facts(exit: Option<i64>, out: Option<Output>) -> Facts {
        Facts {
            attempt: "a-1".into(),
            referenced_code_hash: "code-1".into(),
            phase: Phase::Questions,
            vendor: Vendor::Claude,
            allocation: uuid::Uuid::nil(),
            exit_code: exit,
            output: out,
            policy_digest: DIGEST.into(),
            schema: None,
            stop_reason: None,
            setup_error: None,
            unreleased: vec![],
            timings: Timings::default(),
            egress_log: Vec::new(),
            vendor_log: Vec::new(),
            commands: Vec::new(),
            commands_unrecorded: 0,
        }
    }

    fn good_stderr() -> Vec<u8> {
        format!("{}\nvendor log line\n", attestation(DIGEST, "")).into_bytes()
    }

    #[test]
    fn a_clean_run_answers_and_echoes_the_identity() {
        let r = assemble(facts(
            Some(0),
            Some(output(ENVELOPE.as_bytes(), &good_stderr(), None)),
        ));
        assert_eq!(r.answer.as_deref(), Some("the answer"), "{r:?}");
        assert_eq!(r.failure, None);
        assert_eq!(
            (r.attempt.as_str(), r.referenced_code_hash.as_str()),
            ("a-1", "code-1")
        );
        assert_eq!(r.stderr.as_deref(), Some("vendor log line\n"));
        assert_eq!(r.attestation.as_ref().map(|a| a.landlock_abi), Some(6));
    }

    #[test]
    fn no_valid_attestation_no_answer() {
        for stderr in [
            format!("{}\n", attestation("sha256:other", "")),
            format!("{}\n", attestation(DIGEST, r#""landlock""#)),
            "not the init\n".to_owned(),
            String::new(),
        ] {
            let r = assemble(facts(
                Some(0),
                Some(output(ENVELOPE.as_bytes(), stderr.as_bytes(), None)),
            ));
            assert_eq!(r.answer, None, "{stderr}");
            assert_eq!(r.failure.map(|f| f.id), Some("attestation-invalid".into()));
        }
        let refused = r#"{"cordon":"refusal","id":"caps-dropped","expected":"0","observed":"1"}"#;
        let r = assemble(facts(
            Some(120),
            Some(output(b"", format!("{refused}\n").as_bytes(), None)),
        ));
        assert_eq!(r.failure.map(|f| f.id), Some("init-refused".into()));
    }

    #[test]
    fn invalid_utf8_is_a_capture_failure_but_a_cut_character_is_not() {
        let r = assemble(facts(
            Some(0),
            Some(output(b"\xff\xfe", &good_stderr(), None)),
        ));
        assert_eq!(r.failure.map(|f| f.id), Some("capture-failure".into()));
        assert_eq!(r.stdout, None);
        // A bound that cut "é" (two bytes) after its first byte.
        let r = assemble(facts(
            Some(0),
            Some(output(b"abc\xc3", &good_stderr(), Some((5, 0)))),
        ));
        assert_eq!(r.stdout.as_deref(), Some("abc"));
        assert!(r.stdout_truncated);
        assert_eq!(r.failure.map(|f| f.id), Some("answer-invalid".into()));
        let mut stderr = good_stderr();
        stderr.extend_from_slice(b"\xc3\x28");
        let r = assemble(facts(
            Some(0),
            Some(output(ENVELOPE.as_bytes(), &stderr, None)),
        ));
        assert_eq!(r.failure.map(|f| f.id), Some("capture-failure".into()));
    }

    #[test]
    fn only_exit_0_without_signal_or_stop_is_an_answer() {
        let out = || Some(output(ENVELOPE.as_bytes(), &good_stderr(), None));
        let r = assemble(facts(Some(1), out()));
        assert_eq!(
            (r.answer, r.failure.map(|f| f.id)),
            (None, Some("exit-nonzero".into()))
        );
        let r = assemble(facts(Some(134), out()));
        assert_eq!(r.signal, Some(6));
        assert_eq!(
            (r.answer, r.failure.map(|f| f.id)),
            (None, Some("signal".into()))
        );
        let mut f = facts(Some(0), out());
        f.stop_reason = Some(StopReason::Cancelled);
        let r = assemble(f);
        assert_eq!(r.answer, None);
        assert_eq!(r.stop_reason, Some(StopReason::Cancelled));
        assert_eq!(r.failure.map(|f| f.id), Some("stopped".into()));
    }

    /// A clean run whose envelope carries `structured`, settled for `phase` with `schema`.
    fn settle(
        phase: Phase,
        schema: Option<&str>,
        structured: &serde_json::Value,
    ) -> InvocationResult {
        let envelope = serde_json::json!({
            "type": "result", "subtype": "success", "is_error": false,
            "result": "plain text", "structured_output": structured,
        })
        .to_string();
        let mut f = facts(
            Some(0),
            Some(output(envelope.as_bytes(), &good_stderr(), None)),
        );
        f.phase = phase;
        f.schema =
            schema.map(|s| AnswerSchema::compile(s.to_owned()).expect("the schema compiles"));
        assemble(f)
    }

    /// The failure of a settled result that must be `answer-invalid`, checked to be bounded.
    fn refused(r: &InvocationResult) -> &str {
        let shown: String = r.answer.iter().flat_map(|a| a.chars()).take(200).collect();
        assert!(r.answer.is_none(), "an answer: {shown}");
        let failure = r.failure.as_ref().expect("a failure");
        assert_eq!(failure.id, "answer-invalid", "{failure:?}");
        assert!(
            failure.message.len() <= 2300,
            "{} bytes",
            failure.message.len()
        );
        &failure.message
    }

    #[test]
    fn a_structured_answer_that_matches_its_schema_is_the_answer() {
        let schema = r#"{"type":"object","required":["steps"],"additionalProperties":false,"properties":{"steps":{"type":"array","items":{"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":1,"maximum":9},"id":{"type":"string","pattern":"^[a-z]+-[0-9]+$"}}}},"risk":{"enum":["low","high"]}}}"#;
        let good = serde_json::json!({"risk": "low", "steps": [{"n": 1, "id": "ab-12"}, {"n": 9}]});
        for phase in [Phase::Planning, Phase::Review] {
            let r = settle(phase, Some(schema), &good);
            assert_eq!(r.failure, None, "{phase}: {r:?}");
            assert_eq!(
                r.answer.as_deref(),
                Some(r#"{"risk":"low","steps":[{"id":"ab-12","n":1},{"n":9}]}"#),
                "{phase}"
            );
        }
        // Review without a schema answers in plain text.
        let r = settle(Phase::Review, None, &good);
        assert_eq!(r.answer.as_deref(), Some("plain text"), "{r:?}");
    }

    #[test]
    fn each_kind_of_schema_violation_is_answer_invalid_with_its_path() {
        use serde_json::json;
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            // A required property missing (the CLI's success without a valid StructuredOutput).
            (
                r#"{"type":"object","required":["steps","risk"]}"#,
                json!({"ignored": true}),
                "steps",
            ),
            (
                r#"{"type":"object","properties":{"n":{"type":"integer"}}}"#,
                json!({"n": "1"}),
                "/n",
            ),
            (
                r#"{"type":"object","additionalProperties":false,"properties":{"a":{}}}"#,
                json!({"a": 1, "extra": 2}),
                "extra",
            ),
            (
                r#"{"type":"object","properties":{"risk":{"enum":["low","high"]}}}"#,
                json!({"risk": "none"}),
                "/risk",
            ),
            (
                r#"{"type":"object","properties":{"n":{"type":"number","minimum":1}}}"#,
                json!({"n": 0.5}),
                "/n",
            ),
            (
                r#"{"type":"object","properties":{"n":{"type":"number","maximum":10}}}"#,
                json!({"n": 11}),
                "/n",
            ),
            (
                r#"{"type":"object","properties":{"plan":{"type":"object","required":["owner"],"properties":{"owner":{"type":"object","properties":{"name":{"type":"string"}}}}}}}"#,
                json!({"plan": {"owner": {"name": 7}}}),
                "/plan/owner/name",
            ),
            (
                r#"{"type":"object","properties":{"steps":{"type":"array","items":{"type":"object","required":["file"]}}}}"#,
                json!({"steps": [{"file": "a"}, {"fil": "b"}]}),
                "/steps/1",
            ),
            (
                r#"{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+-[0-9]+$"}}}"#,
                json!({"id": "AB-12"}),
                "/id",
            ),
            // Not an object at all where the root says object.
            (r#"{"type":"object"}"#, json!([1, 2]), ""),
        ];
        for (schema, instance, path) in cases {
            for phase in [Phase::Planning, Phase::Review] {
                let r = settle(phase, Some(schema), &instance);
                let evidence = refused(&r);
                assert!(
                    evidence.contains(path),
                    "{phase} {schema} {instance}: {evidence}"
                );
            }
        }
    }

    #[test]
    fn a_pathological_pattern_costs_linear_time() {
        let schema =
            r#"{"type":"object","properties":{"s":{"type":"string","pattern":"^(a+)+$"}}}"#;
        let mut hostile = "a".repeat(100_000);
        hostile.push('b');
        // A backtracking engine would take longer than the universe; a linear one takes
        // milliseconds. The bound is that gap, not a speed target (it holds at any load).
        let r = finishes_within(LIVENESS, move || {
            settle(
                Phase::Planning,
                Some(schema),
                &serde_json::json!({ "s": hostile }),
            )
        });
        refused(&r);
    }

    /// How long a check of a hostile answer may take before the test calls it unbounded.
    const LIVENESS: std::time::Duration = std::time::Duration::from_secs(120);

    /// `f`'s value, or a failure naming the bound if it has not returned by then.
    fn finishes_within<T: Send + 'static>(
        limit: std::time::Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit)
            .unwrap_or_else(|e| panic!("not done within {limit:?}: {e}"))
    }

    #[test]
    fn huge_and_deep_answers_keep_the_evidence_bounded() {
        use serde_json::{json, Value};
        // Half a million violating items (1 MiB of output, the bound on stdout).
        let items =
            r#"{"type":"object","properties":{"xs":{"type":"array","items":{"type":"string"}}}}"#;
        let r = finishes_within(LIVENESS, move || {
            settle(
                Phase::Planning,
                Some(items),
                &json!({ "xs": vec![1; 500_000] }),
            )
        });
        let evidence = refused(&r).to_owned();
        assert!(evidence.contains("/xs/0"), "{evidence}");
        assert!(
            !evidence.contains("/xs/1000"),
            "only the first few errors: {evidence}"
        );
        // A huge property name, a huge string value, and a huge enum miss are cut.
        let long = "k".repeat(512 * 1024);
        let closed =
            r#"{"type":"object","additionalProperties":false,"properties":{"a":{"enum":["x"]}}}"#;
        let r = settle(
            Phase::Planning,
            Some(closed),
            &json!({ long.clone(): 1, "a": long }),
        );
        refused(&r);
        // Deep nesting (near the parser's depth limit of 128) through a recursive schema, with
        // the violation at the bottom: the path is cut.
        let recursive = r##"{"type":"object","required":["deeper-level"],"properties":{"deeper-level":{"$ref":"#"}}}"##;
        let mut instance: Value = json!({});
        for _ in 0..120 {
            instance = json!({ "deeper-level": instance });
        }
        let r = settle(Phase::Planning, Some(recursive), &instance);
        let evidence = refused(&r);
        assert!(
            evidence.starts_with("structured_output does not match"),
            "{evidence}"
        );
        assert!(
            evidence.contains("/deeper-level/deeper-level"),
            "{evidence}"
        );
        assert!(evidence.ends_with('…'), "the long path is cut: {evidence}");
    }

    #[test]
    fn a_setup_error_is_reported_by_its_id() {
        let mut f = facts(None, None);
        f.setup_error = Some(Error::Deadline("x".into()));
        let r = assemble(f);
        assert_eq!(r.failure.map(|f| f.id), Some("deadline".into()));
        let r = assemble(facts(None, None));
        assert_eq!(r.failure.map(|f| f.id), Some("capture-failure".into()));
    }
}
