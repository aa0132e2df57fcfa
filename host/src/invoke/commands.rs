//! An invocation's approved commands, on the controller's side.
//!
//! Before the agent starts ([`prepare`]): each command's toolchain image is derived from the
//! runner's local image with the init the agent's image carries, each argv's program is found in
//! it, and the relay (the commands volume, cordon-init's `relay` role) is made and listening.
//!
//! While the agent runs ([`Dispatcher::serve`]): each call the relay passes on is decided by the
//! ledger (unknown names, exhausted runs and calls past the deadline are refused without a
//! container), run in a command container of its own ([`crate::command::run`]), one at a time,
//! and answered. A cancel from the relay (the agent's MCP server hung up) kills the running
//! command; so does the end of the agent or of the invocation. The controller alone creates
//! containers; the agent's side only ever sends a name.

use std::collections::BTreeMap;
use std::time::Instant;

use cordon_contract::command::{Answer, ApprovedCommand, CallRefusal, ToHost};
use tokio::sync::{oneshot, watch};

use crate::command::ledger::{CallRecord, Decision, Ledger};
use crate::command::relay::{self, Relay};
use crate::controller::Controller;
use crate::engine::pending::{Created, Shared};
use crate::error::{Error, Result};
use crate::image::toolchain;
use crate::launch::command::{self as run, CommandImage};
use crate::profile::Profile;

/// The dispatcher of one invocation.
#[derive(Debug)]
pub(super) struct Dispatcher {
    ledger: Ledger,
    /// Each command's image, by command name.
    images: BTreeMap<String, CommandImage>,
    relay: Relay,
    /// What the calls' removals left so far.
    left: Created,
}

/// What the dispatcher leaves for the result.
#[derive(Debug, Default)]
pub(super) struct Served {
    pub records: Vec<CallRecord>,
    pub unrecorded: u64,
    /// The first engine failure while serving (the invocation fails with it).
    pub error: Option<Error>,
    /// What a call's removal left: the invocation's cleanup retries it, and lists what stays.
    pub left: Created,
}

/// Make everything the commands need before the agent starts: their images (derived, their
/// programs found) and the relay, listening. What is made is recorded in `created`.
pub(super) async fn prepare(
    ctl: &Controller,
    agent: &Profile,
    commands: &[ApprovedCommand],
    deadline: Instant,
    created: &mut Created,
) -> Result<Dispatcher> {
    let engine = ctl.engine();
    let ledger = Ledger::new(commands.to_vec(), agent.phase(), deadline)?;
    let allocation = agent.allocation();
    let init = toolchain::init_of(engine, agent.image_id(), allocation).await?;
    let mut by_image: BTreeMap<&str, Vec<&ApprovedCommand>> = BTreeMap::new();
    for command in commands {
        by_image.entry(&command.image).or_default().push(command);
    }
    let mut images = BTreeMap::new();
    for (image, commands) in by_image {
        let derived = toolchain::derive(engine, image, &init, &|_| {}).await?;
        let programs: Vec<&str> = commands
            .iter()
            .filter_map(|c| c.argv.first().map(String::as_str))
            .collect();
        let resolved = toolchain::check_programs(engine, &derived, allocation, &programs).await?;
        for (command, program) in commands.iter().zip(resolved) {
            images.insert(
                command.name.clone(),
                CommandImage {
                    id: derived.id.clone(),
                    env: derived.env.clone(),
                    program,
                },
            );
        }
    }
    let record = Shared::new(created);
    let (_, relay_id) = relay::create(engine, allocation, agent.image_id(), None, &record).await?;
    let relay = Relay::start(engine, &relay_id).await?;
    Ok(Dispatcher {
        ledger,
        images,
        relay,
        left: Created::default(),
    })
}

impl Dispatcher {
    /// Serve calls until the relay ends or `done` turns true (the agent ended, or the invocation
    /// was stopped); a command running then is killed and answered. Closes the relay.
    pub async fn serve(
        mut self,
        ctl: &Controller,
        agent: &Profile,
        mut done: watch::Receiver<bool>,
    ) -> Served {
        let error = self.calls(ctl, agent, &mut done).await.err();
        let closed = self.relay.close().await.err();
        Served {
            records: self.ledger.records().to_vec(),
            unrecorded: self.ledger.unrecorded(),
            error: error.or(closed),
            left: std::mem::take(&mut self.left),
        }
    }

    async fn calls(
        &mut self,
        ctl: &Controller,
        agent: &Profile,
        done: &mut watch::Receiver<bool>,
    ) -> Result<()> {
        loop {
            let next = tokio::select! {
                next = self.relay.next() => next?,
                _ = done.wait_for(|d| *d) => return Ok(()),
            };
            let (seq, call) = match next {
                None => return Ok(()),
                Some(ToHost::Call { seq, call }) => (seq, call),
                // Nothing runs: nothing to cancel. A second `listening` means nothing either.
                Some(ToHost::Cancel { .. } | ToHost::Listening) => continue,
            };
            let (command, limit) = match self.ledger.decide_call(&call, Instant::now()) {
                Decision::Refuse(answer) => {
                    self.relay.answer(seq, &answer).await?;
                    continue;
                }
                Decision::Run { command, limit } => (command, limit),
            };
            let answer = self.run(ctl, agent, &command, limit, seq, done).await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    let answer = Answer::Refused {
                        refusal: CallRefusal::CommandUnavailable,
                        expected: "the command's container run and removed".into(),
                        observed: e.to_string(),
                    };
                    self.ledger.ran(&command, &answer);
                    let _ = self.relay.answer(seq, &answer).await;
                    return Err(e);
                }
            };
            self.ledger.ran(&command, &answer);
            self.relay.answer(seq, &answer).await?;
        }
    }

    /// Run call `seq` of `command`; a cancel of that call from the relay, a relay that ends, or
    /// `done` kills it.
    async fn run(
        &mut self,
        ctl: &Controller,
        agent: &Profile,
        command: &ApprovedCommand,
        limit: std::time::Duration,
        seq: u64,
        done: &mut watch::Receiver<bool>,
    ) -> Result<Answer> {
        let image = self.images.get(&command.name).ok_or_else(|| {
            Error::Internal(format!("no image for approved command {}", command.name))
        })?;
        let (cancel, cancelled) = oneshot::channel::<()>();
        let running = run::run(ctl, agent, command, image, limit, async {
            let _ = cancelled.await;
        });
        tokio::pin!(running);
        let mut cancel = Some(cancel);
        loop {
            tokio::select! {
                (outcome, left) = &mut running => {
                    self.left.extend(left);
                    return Ok(outcome?.answer);
                }
                next = self.relay.next(), if cancel.is_some() => {
                    let stop = match next {
                        Ok(Some(ToHost::Cancel { seq: of })) => of == seq,
                        // The relay is serial: another call now is a broken relay.
                        Ok(Some(ToHost::Call { .. })) | Ok(None) | Err(_) => true,
                        Ok(Some(ToHost::Listening)) => false,
                    };
                    if stop {
                        if let Some(cancel) = cancel.take() {
                            let _ = cancel.send(());
                        }
                    }
                }
                _ = done.wait_for(|d| *d), if cancel.is_some() => {
                    if let Some(cancel) = cancel.take() {
                        let _ = cancel.send(());
                    }
                }
            }
        }
    }
}
