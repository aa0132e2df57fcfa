//! The dispatcher's book of one invocation: the runner's list (checked once, for its phase), what
//! each call may do when it comes, and the record of every call. Pure: the clock is the caller's.
//!
//! A call runs only when its name is on the list, its runs are not used up, and the invocation's
//! deadline leaves at least [`MIN_RUN`]; it may run for its own deadline or what is left of the
//! invocation's, whichever is shorter. A refused call is recorded too.

use std::time::{Duration, Instant};

use cordon_contract::command::{self, Answer, ApprovedCommand, CallRefusal, Ran, Writes};
use cordon_contract::Phase;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Less time than this left of the invocation: a call is refused `command-deadline` rather than
/// started to be killed at once.
pub const MIN_RUN: Duration = Duration::from_secs(1);

/// At most this many calls are recorded (the sum of the list's runs is at most 32 x 64; refusals
/// beyond this are answered and counted, not recorded one by one).
pub const MAX_RECORDS: usize = 4096;

/// One call, as the invocation result carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CallRecord {
    /// The name the agent gave (only ever a command name: anything else is refused before).
    pub name: String,
    /// The argv that ran (empty for a refusal).
    pub argv: Vec<String>,
    pub writes: Option<Writes>,
    /// The refusal's stable id, when it did not run.
    pub refused: Option<&'static str>,
    pub exit: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub output_bytes: u64,
    /// SHA-256 of the output text the model was given.
    pub output_sha256: Option<String>,
}

impl CallRecord {
    fn refused(
        name: &str,
        argv: Vec<String>,
        writes: Option<Writes>,
        refusal: CallRefusal,
    ) -> Self {
        CallRecord {
            name: name.to_owned(),
            argv,
            writes,
            refused: Some(refusal.id()),
            exit: None,
            signal: None,
            timed_out: false,
            duration_ms: 0,
            output_bytes: 0,
            output_sha256: None,
        }
    }
}

/// What the dispatcher does with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run this command, for at most this long.
    Run {
        command: ApprovedCommand,
        limit: Duration,
    },
    /// Answer this refusal; nothing runs.
    Refuse(Answer),
}

/// The book of one invocation.
#[derive(Debug)]
pub struct Ledger {
    commands: Vec<ApprovedCommand>,
    used: Vec<u32>,
    deadline: Instant,
    records: Vec<CallRecord>,
    unrecorded: u64,
}

fn refusal(refusal: CallRefusal, expected: String, observed: String) -> Answer {
    Answer::Refused {
        refusal,
        expected,
        observed,
    }
}

impl Ledger {
    /// Check `commands` for `phase` (the first fault refuses the request, `invalid-input`) and
    /// open the book; every call must end by `deadline`.
    pub fn new(commands: Vec<ApprovedCommand>, phase: Phase, deadline: Instant) -> Result<Ledger> {
        command::check_list(&commands, phase)
            .map_err(|fault| Error::Invalid(format!("approved commands: {fault}")))?;
        let used = vec![0; commands.len()];
        Ok(Ledger {
            commands,
            used,
            deadline,
            records: Vec::new(),
            unrecorded: 0,
        })
    }

    /// What to do with a call line at `now`. A run is counted when it is decided.
    pub fn decide(&mut self, line: &[u8], now: Instant) -> Decision {
        match command::parse_call(line) {
            Ok(call) => self.decide_call(&call, now),
            Err(why) => self.refuse(
                "",
                refusal(
                    CallRefusal::CommandMalformed,
                    "one JSON line holding a command name and nothing else".into(),
                    why,
                ),
            ),
        }
    }

    /// What to do with a parsed call (the relay's) at `now`.
    pub fn decide_call(&mut self, call: &command::Call, now: Instant) -> Decision {
        let Some(at) = self.commands.iter().position(|c| c.name == call.name) else {
            let names: Vec<&str> = self.commands.iter().map(|c| c.name.as_str()).collect();
            let answer = refusal(
                CallRefusal::CommandUnknown,
                format!("one of {}", names.join(", ")),
                call.name.clone(),
            );
            return self.refuse(&call.name, answer);
        };
        let allowed = self.commands[at].runs;
        if self.used[at] >= allowed {
            let answer = refusal(
                CallRefusal::CommandExhausted,
                format!("at most {allowed} runs"),
                format!("run {}", u64::from(self.used[at]) + 1),
            );
            return self.refuse(&call.name, answer);
        }
        let left = self.deadline.saturating_duration_since(now);
        if left < MIN_RUN {
            let answer = refusal(
                CallRefusal::CommandDeadline,
                format!("at least {} ms of the invocation left", MIN_RUN.as_millis()),
                format!("{} ms", left.as_millis()),
            );
            return self.refuse(&call.name, answer);
        }
        self.used[at] += 1;
        let command = self.commands[at].clone();
        let limit = Duration::from_secs(command.deadline_secs).min(left);
        Decision::Run { command, limit }
    }

    fn refuse(&mut self, name: &str, answer: Answer) -> Decision {
        if let Answer::Refused { refusal, .. } = &answer {
            self.push(CallRecord::refused(name, Vec::new(), None, *refusal));
        }
        Decision::Refuse(answer)
    }

    /// Record a command that ran (or could not be made: `unavailable`), as answered.
    pub fn ran(&mut self, command: &ApprovedCommand, answer: &Answer) {
        let record = match answer {
            Answer::Ran(Ran {
                exit,
                signal,
                timed_out,
                duration_ms,
                output_bytes,
                output,
                ..
            }) => CallRecord {
                name: command.name.clone(),
                argv: command.argv.clone(),
                writes: Some(command.writes),
                refused: None,
                exit: *exit,
                signal: signal.clone(),
                timed_out: *timed_out,
                duration_ms: *duration_ms,
                output_bytes: *output_bytes,
                output_sha256: Some(hex::encode(Sha256::digest(output.as_bytes()))),
            },
            Answer::Refused { refusal, .. } => CallRecord::refused(
                &command.name,
                command.argv.clone(),
                Some(command.writes),
                *refusal,
            ),
        };
        self.push(record);
    }

    fn push(&mut self, record: CallRecord) {
        if self.records.len() < MAX_RECORDS {
            self.records.push(record);
        } else {
            self.unrecorded += 1;
        }
    }

    /// Every recorded call, in order.
    pub fn records(&self) -> &[CallRecord] {
        &self.records
    }

    /// Calls answered past [`MAX_RECORDS`], counted only.
    pub fn unrecorded(&self) -> u64 {
        self.unrecorded
    }

    /// The offered list the agent's MCP server reads (names and descriptions, never an argv).
    pub fn offered(&self) -> Result<Vec<u8>> {
        let offered: Vec<command::Offered> =
            self.commands.iter().map(command::Offered::from).collect();
        let bytes = serde_json::to_vec(&offered)
            .map_err(|e| Error::Internal(format!("the offered list: {e}")))?;
        if bytes.len() as u64 > command::MAX_OFFERED_BYTES {
            return Err(Error::Invalid(format!(
                "approved commands: the offered list is {} bytes, more than {}",
                bytes.len(),
                command::MAX_OFFERED_BYTES
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::command::Scratch;

    fn command(name: &str, runs: u32) -> ApprovedCommand {
        ApprovedCommand {
            name: name.into(),
            description: format!("Run {name}"),
            argv: vec!["/bin/sh".into(), "-c".into(), format!("make {name}")],
            image: "toolchain".into(),
            env: Vec::new(),
            workdir: "/work".into(),
            deadline_secs: 60,
            output_bytes: 4096,
            scratch: Scratch {
                bytes: 1 << 20,
                inodes: 64,
            },
            runs,
            writes: Writes::None,
        }
    }

    fn refused_id(decision: &Decision) -> Option<&'static str> {
        match decision {
            Decision::Refuse(Answer::Refused { refusal, .. }) => Some(refusal.id()),
            _ => None,
        }
    }

    #[test]
    fn a_list_is_checked_for_its_phase() {
        let start = Instant::now();
        for phase in [Phase::Planning, Phase::Questions] {
            let e = Ledger::new(vec![command("test", 1)], phase, start).unwrap_err();
            assert_eq!(e.id(), "invalid-input");
            assert!(e.to_string().contains("phase"), "{e}");
        }
        assert!(Ledger::new(vec![command("test", 1)], Phase::Review, start).is_ok());
        assert!(Ledger::new(Vec::new(), Phase::Questions, start).is_ok());
    }

    #[test]
    fn each_call_is_decided_and_recorded() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(600);
        let mut ledger = Ledger::new(
            vec![command("test", 2), command("fmt", 1)],
            Phase::Execute,
            deadline,
        )
        .unwrap();
        let Decision::Run {
            command: run,
            limit,
        } = ledger.decide(br#"{"name":"test"}"#, start)
        else {
            panic!("test must run")
        };
        assert_eq!(run.name, "test");
        assert_eq!(limit, Duration::from_secs(60));
        ledger.ran(
            &run,
            &Answer::Ran(Ran {
                name: "test".into(),
                exit: Some(1),
                signal: None,
                timed_out: false,
                duration_ms: 12,
                output_bytes: 3,
                output: "bad".into(),
                truncated: false,
            }),
        );
        assert!(matches!(
            ledger.decide(br#"{"name":"test"}"#, start),
            Decision::Run { .. }
        ));
        // The third run of a command allowed two.
        assert_eq!(
            refused_id(&ledger.decide(br#"{"name":"test"}"#, start)),
            Some("command-exhausted")
        );
        assert_eq!(
            refused_id(&ledger.decide(br#"{"name":"lint"}"#, start)),
            Some("command-unknown")
        );
        assert_eq!(
            refused_id(&ledger.decide(br#"{"name":"fmt","args":["-w"]}"#, start)),
            Some("command-malformed")
        );
        // Near the deadline: the limit is what is left; past MIN_RUN of it, refused.
        let late = deadline - Duration::from_secs(5);
        let Decision::Run { limit, .. } = ledger.decide(br#"{"name":"fmt"}"#, late) else {
            panic!("fmt must run")
        };
        assert_eq!(limit, Duration::from_secs(5));
        let mut fresh = Ledger::new(vec![command("fmt", 1)], Phase::Fix, deadline).unwrap();
        assert_eq!(
            refused_id(&fresh.decide(br#"{"name":"fmt"}"#, deadline - Duration::from_millis(999))),
            Some("command-deadline")
        );
        assert_eq!(
            refused_id(&fresh.decide(br#"{"name":"fmt"}"#, deadline + Duration::from_secs(1))),
            Some("command-deadline")
        );

        let records = ledger.records();
        assert_eq!(records.len(), 4, "{records:?}");
        assert_eq!(records[0].exit, Some(1));
        assert_eq!(records[0].argv, command("test", 2).argv);
        assert_eq!(
            records[0].output_sha256.as_deref(),
            Some(hex::encode(Sha256::digest(b"bad")).as_str())
        );
        let refused: Vec<_> = records[1..].iter().map(|r| r.refused).collect();
        assert_eq!(
            refused,
            [
                Some("command-exhausted"),
                Some("command-unknown"),
                Some("command-malformed")
            ]
        );
        assert!(records[1..].iter().all(|r| r.argv.is_empty()));
    }

    #[test]
    fn the_offered_list_holds_names_and_descriptions_only() {
        let ledger = Ledger::new(vec![command("test", 1)], Phase::Execute, Instant::now()).unwrap();
        let text = String::from_utf8(ledger.offered().unwrap()).unwrap();
        assert_eq!(text, r#"[{"name":"test","description":"Run test"}]"#);
        assert!(!text.contains("/bin/sh"));
    }
}
