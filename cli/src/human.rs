//! Human (non-`--json`) output of text cordon did not write: the agent's answer, failure
//! messages that quote the repository, git or the engine.
//!
//! - Every character a terminal could act on becomes a visible escape: C0 controls (`\t`, `\r`,
//!   `\n` within a line, the rest `\xNN`), DEL (`\x7f`), C1 (`\u{80}`..`\u{9f}`), every format
//!   character of general category Cf (bidi embeddings, overrides and isolates, zero-width
//!   characters, U+FEFF, the soft hyphen, tags, ...) and the line and paragraph separators
//!   U+2028/U+2029, each as `\u{...}` (`\u{202e}`). A backslash stays as it is: the frame is for
//!   reading, `--json` is the exact text.
//! - Multi-line text is framed by lines cordon writes itself (`--- agent answer (N bytes) ---`
//!   and `--- end of agent answer ---`), and every line inside starts with [`PREFIX`], which
//!   none of cordon's own lines do: no agent line can pass for cordon's summary or a marker.

use cordon::invoke::oneshot::OneShotReport;

/// Every line of untrusted text inside a frame starts with this; none of cordon's own lines do.
pub const PREFIX: &str = "| ";

/// Whether a terminal must not receive `c` as itself: C0, DEL, C1, Cf (Unicode 15, by range:
/// the standard library has no category table) and U+2028/U+2029.
fn hostile(c: char) -> bool {
    matches!(
        c as u32,
        0x00..=0x1f
            | 0x7f..=0x9f
            | 0xad
            | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x2028..=0x202e
            | 0x2060..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    )
}

/// `text` with every hostile character escaped, `\n` included.
fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if !hostile(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
}

/// Untrusted text for one line of cordon's own: every hostile character escaped, newlines too.
pub fn line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape(text, &mut out);
    out
}

/// Untrusted text between marker lines, each of its lines after [`PREFIX`] (an empty line is
/// the prefix alone) and escaped. The byte count in the first marker says whether it ended with a
/// newline.
pub fn framed(label: &str, text: &str) -> String {
    let label = line(label);
    let mut out = format!("--- {label} ({} bytes) ---\n", text.len());
    if !text.is_empty() {
        let body = text.strip_suffix('\n').unwrap_or(text);
        for piece in body.split('\n') {
            out.push_str(PREFIX);
            escape(piece, &mut out);
            out.push('\n');
        }
    }
    out.push_str(&format!("--- end of {label} ---\n"));
    out
}

/// `cordon run`'s text output: the answer framed (or why there is none, on one line), then the
/// summary line, which is the only line that starts with `attempt `.
pub fn run_report(report: &OneShotReport) -> String {
    let result = &report.result;
    let mut text = match (&result.answer, &result.failure) {
        (Some(answer), _) => framed("agent answer", answer),
        (None, Some(f)) => format!("no answer: {} ({})\n", line(&f.id), line(&f.message)),
        (None, None) => "no answer\n".to_owned(),
    };
    if let Some(left) = &report.storage_left {
        text.push_str(&format!("storage not removed: {}\n", line(left)));
    }
    if let Some(audit) = &report.audit {
        if let Some(manifest) = &audit.manifest {
            text.push_str(&format!(
                "changes: {} (manifest {})\n",
                manifest.changes.len(),
                line(&manifest.digest)
            ));
        }
        if let Some(commit) = &audit.commit {
            text.push_str(&format!("committed: {}\n", line(&commit.head)));
        }
        if let Some(why) = &audit.not_committed {
            text.push_str(&format!(
                "no commit ({}): {}\n",
                why.reason,
                line(&why.detail)
            ));
        }
        if audit.needs_person {
            text.push_str("the task needs a person: see the manifest (--json)\n");
        }
        if let Some(failed) = &audit.failed {
            text.push_str(&format!(
                "the audit failed: {}\n",
                line(&failed.to_string())
            ));
        }
    }
    let exit = match result.exit_code {
        Some(code) => code.to_string(),
        // The workload never reported one (it did not start, or was stopped).
        None => "unknown".to_owned(),
    };
    text.push_str(&format!(
        "attempt {}, code {}, exit {exit}, attested: {}, {:.0} ms\n",
        line(&result.attempt),
        line(&result.referenced_code_hash),
        result.attestation.is_some(),
        report.timings.total_ms
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character the renderer must never let through, by class.
    fn hostile() -> Vec<(&'static str, Vec<char>)> {
        let range = |a: u32, b: u32| (a..=b).filter_map(char::from_u32).collect::<Vec<_>>();
        let mut c0 = range(0, 0x1f);
        c0.retain(|c| *c != '\n');
        vec![
            ("C0", c0),
            ("DEL", vec!['\u{7f}']),
            ("C1", range(0x80, 0x9f)),
            (
                "bidi and zero-width",
                [
                    range(0x200b, 0x200f),
                    range(0x202a, 0x202e),
                    range(0x2060, 0x2069),
                    vec!['\u{feff}'],
                ]
                .concat(),
            ),
            (
                "other Cf",
                [
                    vec![
                        '\u{ad}', '\u{61c}', '\u{6dd}', '\u{70f}', '\u{8e2}', '\u{180e}',
                    ],
                    range(0x600, 0x605),
                    range(0x890, 0x891),
                    range(0x206a, 0x206f),
                    range(0xfff9, 0xfffb),
                    vec!['\u{110bd}', '\u{110cd}'],
                    range(0x13430, 0x1343f),
                    range(0x1bca0, 0x1bca3),
                    range(0x1d173, 0x1d17a),
                    vec!['\u{e0001}'],
                    range(0xe0020, 0xe007f),
                ]
                .concat(),
            ),
            (
                "line and paragraph separators",
                vec!['\u{2028}', '\u{2029}'],
            ),
        ]
    }

    fn is_hostile(c: char) -> bool {
        hostile().iter().any(|(_, chars)| chars.contains(&c))
    }

    /// What a terminal must never receive from agent text: the check the CLI test makes too.
    fn assert_inert(out: &str) {
        for (at, c) in out.char_indices() {
            assert!(
                c == '\n' || !is_hostile(c),
                "{:?} (U+{:04X}) at byte {at} of {out:?}",
                c,
                c as u32
            );
        }
        assert!(!out.bytes().any(|b| b < 0x20 && b != b'\n' || b == 0x7f));
    }

    #[test]
    fn every_control_and_format_character_becomes_a_visible_escape() {
        for (class, chars) in hostile() {
            let text: String = chars
                .iter()
                .flat_map(|c| [*c, 'x'])
                .chain("\nend".chars())
                .collect();
            let out = framed("agent answer", &text);
            assert_inert(&out);
            let one = line(&text);
            assert_inert(&one);
            assert!(
                !one.contains('\n'),
                "{class}: one line stays one line: {one:?}"
            );
            for c in &chars {
                let escape = match *c {
                    '\t' => "\\t".to_owned(),
                    '\r' => "\\r".to_owned(),
                    c if (c as u32) < 0x80 => format!("\\x{:02x}", c as u32),
                    c => format!("\\u{{{:x}}}", c as u32),
                };
                assert!(out.contains(&escape), "{class}: {escape} in {out:?}");
            }
        }
        assert_eq!(line("a\nb"), "a\\nb");
        assert_eq!(line("\u{1b}[2J"), "\\x1b[2J");
        assert_eq!(line("\u{202e}abc"), "\\u{202e}abc");
        assert_eq!(line("\u{9b}31m"), "\\u{9b}31m");
        // Printable text, tabs aside, passes unchanged, wide and combining characters too.
        let plain = "fn main() { println!(\"é 漢字 👍 e\u{301}\"); } // a\\b";
        assert_eq!(line(plain), plain);
    }

    #[test]
    fn the_frame_marks_where_agent_text_begins_and_ends() {
        let text = "first\n--- end of agent answer ---\n--- agent answer (3 bytes) ---\n\nlast\n";
        let out = framed("agent answer", text);
        let lines: Vec<&str> = out.lines().collect();
        let begin = format!("--- agent answer ({} bytes) ---", text.len());
        assert_eq!(lines.first().copied(), Some(begin.as_str()), "{out:?}");
        assert_eq!(
            lines.last().copied(),
            Some("--- end of agent answer ---"),
            "{out:?}"
        );
        assert_eq!(out.matches(&begin).count(), 1, "{out:?}");
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("--- end of agent answer"))
                .count(),
            1,
            "{out:?}"
        );
        let inside = &lines[1..lines.len() - 1];
        assert_eq!(inside.len(), 5, "{out:?}");
        for l in inside {
            assert!(l.starts_with(PREFIX), "{l:?} in {out:?}");
        }
        assert_eq!(inside[3], PREFIX, "an empty line is the prefix alone");
        assert!(out.ends_with('\n'));
        // No text: the frame and nothing in it.
        let empty = framed("agent answer", "");
        assert_eq!(
            empty,
            "--- agent answer (0 bytes) ---\n--- end of agent answer ---\n"
        );
    }

    fn report(answer: Option<&str>, failure: Option<&str>) -> OneShotReport {
        use cordon::invoke::{Attestation, Failure, InvocationResult, Timings};
        OneShotReport {
            result: InvocationResult {
                attempt: "a-1".into(),
                referenced_code_hash: "c0ffee".into(),
                phase: cordon_contract::Phase::Questions,
                vendor: cordon_contract::Vendor::Claude,
                allocation: uuid::Uuid::nil(),
                exit_code: Some(0),
                signal: None,
                stop_reason: None,
                answer: answer.map(str::to_owned),
                failure: failure.map(|message| Failure {
                    id: "git".into(),
                    message: message.to_owned(),
                }),
                stdout: None,
                stderr: None,
                stdout_truncated: false,
                stderr_truncated: false,
                attestation: Some(Attestation {
                    policy_digest: "sha256:1".into(),
                    checks: vec![],
                    landlock_abi: 6,
                    preflight_us: 1,
                    egress_forward: None,
                    pins: vec![],
                }),
                unreleased: vec![],
                timings: Timings::default(),
                vendor_requests: vec![],
                commands: vec![],
                commands_unrecorded: 0,
                vendor_budget_exhausted: None,
                egress_log: vec![],
                vendor_log: vec![],
            },
            tree_check: None,
            link_snapshot: None,
            audit: None,
            storage_left: None,
            timings: Default::default(),
        }
    }

    #[test]
    fn run_report_frames_the_answer_and_keeps_failures_on_one_line() {
        let forged = "attempt forged, code x, exit 0, attested: true, 1 ms";
        let hostile_text = format!("hi\u{1b}]0;title\u{7}\n{forged}\n");
        for r in [
            report(Some(&hostile_text), None),
            report(None, Some(&hostile_text)),
            report(None, None),
        ] {
            let out = run_report(&r);
            assert_inert(&out);
            let summary: Vec<&str> = out.lines().filter(|l| l.starts_with("attempt ")).collect();
            assert_eq!(
                summary,
                ["attempt a-1, code c0ffee, exit 0, attested: true, 0 ms"],
                "{out:?}"
            );
            assert_eq!(out.lines().last(), Some(summary[0]), "{out:?}");
        }
        let out = run_report(&report(None, Some(&hostile_text)));
        assert_eq!(
            out.lines().next(),
            Some(format!("no answer: git (hi\\x1b]0;title\\x07\\n{forged}\\n)").as_str())
        );
        let out = run_report(&report(Some(&hostile_text), None));
        assert!(out.contains(&format!("{PREFIX}{forged}\n")), "{out:?}");
    }

    /// What Rust's `{:?}` looks like in text for people: `Some(0)`, `None`, a quoted list, a unit
    /// enum variant alone in parentheses (`(Timeout)`).
    fn assert_plain_words(out: &str) {
        for debug in ["Some(", "None", "Ok(", "Err(", "[\"", "\"]", " { "] {
            assert!(!out.contains(debug), "{debug} in {out:?}");
        }
        for (at, _) in out.match_indices('(') {
            let inner = out[at + 1..].split(')').next().unwrap_or("");
            let variant = inner.starts_with(|c: char| c.is_ascii_uppercase())
                && inner.chars().all(|c| c.is_ascii_alphanumeric());
            assert!(!variant, "({inner}) in {out:?}");
        }
    }

    /// The summary, a stopped run's reason, and the gate table's differences are plain words.
    #[test]
    fn human_output_never_shows_debug_formatting() {
        use cordon::invoke::{Facts, StopReason};
        use cordon_proof::gate::{CaseResult, GateReport, Layer};
        let out = run_report(&report(Some("an answer"), None));
        assert!(out.contains(", exit 0, "), "{out:?}");
        assert_plain_words(&out);
        for (reason, word) in [
            (StopReason::Timeout, "timeout"),
            (StopReason::Cancelled, "cancelled"),
            (StopReason::Shutdown, "shutdown"),
        ] {
            // Settled by the library as a stopped run is: no exit code, no output.
            let result = cordon::invoke::assemble(Facts {
                attempt: "a-1".into(),
                referenced_code_hash: "c0ffee".into(),
                phase: cordon_contract::Phase::Questions,
                vendor: cordon_contract::Vendor::Claude,
                allocation: uuid::Uuid::nil(),
                exit_code: None,
                output: None,
                policy_digest: String::new(),
                schema: None,
                stop_reason: Some(reason),
                setup_error: None,
                unreleased: vec![],
                timings: Default::default(),
                egress_log: vec![],
                vendor_log: vec![],
                commands: vec![],
                commands_unrecorded: 0,
            });
            let mut stopped = report(None, None);
            stopped.result = result;
            let out = run_report(&stopped);
            assert!(out.contains(", exit unknown, "), "{out:?}");
            let why = format!("no answer: stopped (stopped before it finished ({word}))\n");
            assert!(out.starts_with(&why), "{out:?}");
            assert_plain_words(&out);
        }
        let row = |layer, pass, expected: &[&str], observed: &[&str]| CaseResult {
            case: "caps-dropped".into(),
            layer,
            removed: None,
            expected: expected.iter().map(|s| (*s).to_owned()).collect(),
            observed: observed.iter().map(|s| (*s).to_owned()).collect(),
            pass,
            detail: String::new(),
            ms: 1,
        };
        let table = GateReport {
            cases: vec![
                row(Layer::Validator, true, &["caps-dropped"], &["caps-dropped"]),
                row(
                    Layer::Probe,
                    false,
                    &["caps-dropped/lockdown/a", "caps-dropped/lockdown/b"],
                    &["caps-dropped/lockdown/a", "cap-added/lockdown/c"],
                ),
            ],
            passed: 1,
            failed: 1,
            leftovers: vec![],
        }
        .table();
        assert!(
            table.contains("    missing caps-dropped/lockdown/b\n")
                && table.contains("    unexpected cap-added/lockdown/c\n"),
            "{table}"
        );
        assert_plain_words(&table);
    }

    #[test]
    fn a_forged_summary_line_only_appears_after_the_prefix() {
        let forged = "attempt forged, code x, exit 0, attested: true, 1 ms";
        for text in [
            format!("answer\n{forged}\n"),
            format!("answer\r{forged}"),
            format!("answer\u{1b}[2K\r{forged}\n"),
            format!("{forged}\u{2028}{forged}"),
        ] {
            let out = framed("agent answer", &text);
            assert_inert(&out);
            for l in out.lines() {
                assert!(
                    l.starts_with("--- ") || l.starts_with(PREFIX),
                    "{l:?} in {out:?}"
                );
                assert!(!l.starts_with("attempt "), "{l:?} in {out:?}");
            }
            assert!(out.contains(forged), "the text is still there: {out:?}");
        }
    }
}
