//! One call of an approved command: its container made from the agent's profile and the
//! command's toolchain, read back and validated, started, attested, stopped at its limit (or at a
//! cancel), its two streams kept as one within the command's bound, and everything made for it
//! removed before the answer goes back.
//!
//! The command runs code the agent wrote (the repository's tests): it is contained like the
//! agent, and its answer is data for the model, never an instruction to the controller.

use std::future::Future;
use std::time::{Duration, Instant};

use cordon_contract::command::{Answer, ApprovedCommand, CallRefusal, Ran};

use crate::controller::Controller;
use crate::engine::pending::Created;
use crate::error::Result;
use crate::labels::Allocation;
use crate::launch::{self, Prepared};
use crate::profile::Profile;

/// The image a command runs in: the derived toolchain's id and environment, and argv[0] with
/// its links resolved in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandImage {
    pub id: String,
    pub env: Vec<String>,
    pub program: String,
}

/// Bytes of each raw stream the launch keeps for the init's verdict (the interleaved output is
/// the command's bound).
const VERDICT_BYTES: usize = 64 * 1024;

/// How one call ended, beside its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub answer: Answer,
    /// The container's name.
    pub container: String,
    /// From the create request to the answer.
    pub took: Duration,
}

/// Why the wait for a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Exited(i64),
    Deadline,
    Cancelled,
}

fn unavailable(expected: impl Into<String>, observed: impl Into<String>) -> Answer {
    Answer::Refused {
        refusal: CallRefusal::CommandUnavailable,
        expected: expected.into(),
        observed: observed.into(),
    }
}

/// Run `command` once in a container of its own over the agent's storage, for at most `limit`,
/// or until `cancel` completes (then it is killed). A container the validator refuses, or whose
/// init does not attest exactly its policy, gives a `command-unavailable` answer with the
/// evidence; an engine failure is an error. Everything made is removed before this returns;
/// what could not be (yet) is returned beside the outcome, for the invocation's cleanup to retry
/// and, failing that, to list as unreleased.
pub async fn run(
    ctl: &Controller,
    agent: &Profile,
    command: &ApprovedCommand,
    image: &CommandImage,
    limit: Duration,
    cancel: impl Future<Output = ()>,
) -> (Result<Outcome>, Created) {
    let mut created = Created::default();
    let outcome = made(ctl, agent, command, image, limit, cancel, &mut created).await;
    let engine = ctl.engine();
    let mut left = created.remove_once(engine).await;
    // A volume waits for a container whose create is still unresolved: one more pass.
    if !left.is_empty() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        left = left.remove_once(engine).await;
    }
    (outcome, left)
}

/// [`run`]'s steps, recording what they make in `created`.
async fn made(
    ctl: &Controller,
    agent: &Profile,
    command: &ApprovedCommand,
    image: &CommandImage,
    limit: Duration,
    cancel: impl Future<Output = ()>,
    created: &mut Created,
) -> Result<Outcome> {
    let started = Instant::now();
    let engine = ctl.engine();
    let storage = &agent.storage().storage;
    let allocation = Allocation::new(&storage.owner, &storage.attempt, agent.allocation().uid)?;
    let profile = Profile::command_of(
        agent,
        allocation,
        command,
        (&image.id, &image.env),
        &image.program,
        limit,
    )?;
    let mut prepared = Prepared::new(engine, &profile)?;
    prepared.max_output = VERDICT_BYTES;
    prepared.interleaved = Some(usize::try_from(command.output_bytes).unwrap_or(usize::MAX));
    let mut launch = launch::create_into(ctl, &profile, prepared, created).await?;
    let container = launch.container.clone();
    if !launch.refusals.is_empty() {
        return Ok(Outcome {
            answer: unavailable(
                "a command container the validator accepts",
                serde_json::to_string(&launch.refusals).unwrap_or_default(),
            ),
            container,
            took: started.elapsed(),
        });
    }
    launch.start_into(engine, created).await?;
    let t = Instant::now();
    // The wait's own limit is past ours: ours kills first, and a wait that never ends is still
    // an error.
    let stop = tokio::select! {
        code = launch.wait(engine, limit + Duration::from_secs(30)) => Stop::Exited(code?),
        () = tokio::time::sleep(limit) => Stop::Deadline,
        () = cancel => Stop::Cancelled,
    };
    if !matches!(stop, Stop::Exited(_)) {
        launch.kill(engine, "KILL").await?;
        launch.wait(engine, Duration::from_secs(30)).await?;
    }
    let duration = t.elapsed();
    let output = launch.output(engine).await?;
    let verdict = launch.verdict(&output);
    let answer = if !verdict.trusted() {
        unavailable(
            "an init that attests exactly the command's policy",
            serde_json::to_string(&verdict).unwrap_or_default(),
        )
    } else {
        let streamed = output.raw.interleaved.clone().unwrap_or_else(|| {
            crate::command::stream::CommandStream::new(
                cordon_contract::command::MAX_OUTPUT as usize,
            )
            .finish()
        });
        let code = match stop {
            Stop::Exited(code) => i32::try_from(code).ok(),
            Stop::Deadline | Stop::Cancelled => None,
        };
        Answer::Ran(Ran {
            name: command.name.clone(),
            exit: code,
            signal: code.is_none().then(|| "KILL".to_owned()),
            timed_out: stop == Stop::Deadline,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            output_bytes: streamed.kept.total,
            output: streamed.kept.text,
            truncated: streamed.kept.truncated,
        })
    };
    Ok(Outcome {
        answer,
        container,
        took: started.elapsed(),
    })
}
