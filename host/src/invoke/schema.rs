//! The answer schema: compiled once, at capture, by a JSON Schema validator cordon runs itself,
//! and every structured answer (planning's, review's with a schema) checked against it before it
//! counts. The CLI's own `--json-schema` check is never trusted: the real CLI exits 0 with
//! `subtype: success` and no (or any) `structured_output` when the model never made a valid call.
//!
//! Bounds, for a schema from the runner (at most 64 KiB, already checked) and an answer from the
//! model (hostile, at most 1 MiB of output):
//! - nothing is ever fetched or read: a `$ref` (or `$schema`) outside the schema itself and the
//!   validator's built-in meta-schemas makes the schema fail to compile;
//! - `pattern` and `patternProperties` run on the `regex` crate (linear in the input; a pattern it
//!   cannot run, such as a backreference or a look-around, fails to compile), each pattern's
//!   program and lazy-DFA cache capped;
//! - `format` is asserted (unknown formats are ignored);
//! - the evidence of a refusal is the first few errors, each with its instance path, each cut, and
//!   at most [`MAX_EVIDENCE_BYTES`] in all; a large answer is reported by its first error only, so
//!   the errors never pile up in memory.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use jsonschema::{Draft, PatternOptions, Validator};
use serde_json::Value;

use crate::error::{Error, Result};

/// At most this much evidence for one refused answer.
pub const MAX_EVIDENCE_BYTES: usize = 2048;
/// At most this many errors in the evidence.
pub const MAX_ERRORS: usize = 5;
/// Each error (its path and message) is cut to this many bytes.
pub const MAX_ERROR_BYTES: usize = 360;
/// An answer with more JSON values than this is reported by its first error only (collecting
/// every error of a large answer would hold one allocation per violating value).
pub const MAX_NODES_FOR_ALL_ERRORS: usize = 10_000;
/// The compiled program of one pattern, and its lazy DFA's cache.
pub const PATTERN_SIZE_LIMIT: usize = 1024 * 1024;
pub const PATTERN_DFA_SIZE_LIMIT: usize = 1024 * 1024;

/// A compiled answer schema and the exact text it was compiled from.
#[derive(Clone)]
pub struct AnswerSchema {
    text: Arc<str>,
    validator: Arc<Validator>,
}

impl fmt::Debug for AnswerSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnswerSchema")
            .field("bytes", &self.text.len())
            .field("draft", &self.validator.draft())
            .finish()
    }
}

impl AnswerSchema {
    /// Compile schema text (already checked by [`super::claude::check_schema`]). A schema without
    /// `$schema` is draft 7, the dialect Claude's `--json-schema` takes; one with `$schema` is of
    /// the draft it names. Refused with [`Error::Schema`] when it does not compile.
    pub fn compile(text: String) -> Result<AnswerSchema> {
        let value: Value =
            serde_json::from_str(&text).map_err(|e| Error::Schema(format!("not JSON: {e}")))?;
        let mut options = jsonschema::options()
            .offline()
            .with_pattern_options(
                PatternOptions::regex()
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .dfa_size_limit(PATTERN_DFA_SIZE_LIMIT),
            )
            .should_validate_formats(true);
        if value.get("$schema").is_none() {
            options = options.with_draft(Draft::Draft7);
        }
        let validator = options.build(&value).map_err(|e| {
            let mut why = Bounded::new(MAX_EVIDENCE_BYTES);
            let _ = write!(why, "does not compile: {e}");
            Error::Schema(why.into_string())
        })?;
        Ok(AnswerSchema {
            text: text.into(),
            validator: Arc::new(validator),
        })
    }

    /// The exact schema text (the agent's `--json-schema` argument and the mounted file).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Check an instance; the error is the bounded evidence of why it does not match.
    pub fn check(&self, instance: &Value) -> std::result::Result<(), String> {
        if self.validator.is_valid(instance) {
            return Ok(());
        }
        let mut evidence = Bounded::new(MAX_EVIDENCE_BYTES);
        let mut listed = 0;
        let mut list = |error: &jsonschema::ValidationError<'_>| {
            let mut one = Bounded::new(MAX_ERROR_BYTES);
            let path = error.instance_path();
            let _ = if path.is_empty() {
                write!(one, "(root): {}", error.masked())
            } else {
                write!(one, "{path}: {}", error.masked())
            };
            let _ = write!(
                evidence,
                "{}{}",
                if listed == 0 { "" } else { "; " },
                one.into_string()
            );
            listed += 1;
        };
        if more_nodes_than(instance, MAX_NODES_FOR_ALL_ERRORS) {
            if let Err(error) = self.validator.validate(instance) {
                list(&error);
            }
            let _ = write!(evidence, " (a large answer: its first error only)");
        } else {
            for error in self.validator.iter_errors(instance).take(MAX_ERRORS) {
                list(&error);
            }
        }
        if listed == 0 {
            // The fast check and the error report disagree: still no answer.
            let _ = write!(evidence, "the answer does not match the schema");
        }
        Err(evidence.into_string())
    }
}

/// Whether `value` holds more than `limit` JSON values (counting stops at the limit).
fn more_nodes_than(value: &Value, limit: usize) -> bool {
    let mut stack = vec![value];
    let mut seen = 0usize;
    while let Some(next) = stack.pop() {
        seen += 1;
        if seen > limit {
            return true;
        }
        match next {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    false
}

/// Text cut at a character boundary once it reaches its bound; writing past it fails, so a
/// `Display` that writes piece by piece stops early.
struct Bounded {
    text: String,
    limit: usize,
    cut: bool,
}

impl Bounded {
    fn new(limit: usize) -> Bounded {
        Bounded {
            text: String::new(),
            limit,
            cut: false,
        }
    }

    fn into_string(mut self) -> String {
        if self.cut {
            self.text.push('…');
        }
        self.text
    }
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Err(fmt::Error);
        }
        let room = self.limit.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&s[..end]);
        self.cut = true;
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bounded_text_is_cut_at_a_character_boundary() {
        let mut b = Bounded::new(5);
        assert!(
            write!(b, "abcdé").is_err(),
            "é needs two bytes, one is left"
        );
        assert_eq!(b.into_string(), "abcd…");
        let mut b = Bounded::new(5);
        assert!(write!(b, "abc").is_ok());
        assert_eq!(b.into_string(), "abc");
    }

    #[test]
    fn node_counting_stops_at_its_limit() {
        assert!(!more_nodes_than(&json!({"a": [1, 2]}), 4));
        assert!(more_nodes_than(&json!({"a": [1, 2, 3]}), 4));
        assert!(!more_nodes_than(&json!(1), 1));
    }

    #[test]
    fn draft_7_unless_the_schema_names_another() {
        let text = r#"{"type":"object","properties":{"t":{"items":[{"type":"string"}]}}}"#;
        let schema = AnswerSchema::compile(text.to_owned()).expect("draft 7 tuple items");
        assert_eq!(schema.validator.draft(), Draft::Draft7);
        assert!(schema.check(&json!({"t": ["a", 1]})).is_ok());
        assert!(schema.check(&json!({"t": [1]})).is_err());
        let four = r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}"#;
        let schema = AnswerSchema::compile(four.to_owned()).expect("draft 4");
        assert_eq!(schema.validator.draft(), Draft::Draft4);
        assert_eq!(schema.text(), four);
    }

    #[test]
    fn formats_are_asserted_and_a_hostile_regex_string_is_parsed_without_recursion() {
        let text = r#"{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"re":{"type":"string","format":"regex"}}}"#;
        let schema = AnswerSchema::compile(text.to_owned()).expect("compiles");
        assert!(schema
            .check(&json!({"when": "2026-12-01T09:00:00Z"}))
            .is_ok());
        let why = schema.check(&json!({"when": "yesterday"})).unwrap_err();
        assert!(why.contains("/when"), "{why}");
        let why = schema
            .check(&json!({"re": "(".repeat(500_000)}))
            .unwrap_err();
        assert!(
            why.contains("/re") && why.len() <= MAX_EVIDENCE_BYTES + 4,
            "{why}"
        );
    }

    #[test]
    fn evidence_masks_the_answer_values() {
        let text = r#"{"type":"object","properties":{"n":{"type":"integer"}}}"#;
        let schema = AnswerSchema::compile(text.to_owned()).expect("compiles");
        let why = schema
            .check(&json!({"n": "secret-looking-value"}))
            .unwrap_err();
        assert!(!why.contains("secret-looking-value"), "{why}");
        assert!(why.starts_with("/n: "), "{why}");
    }
}
