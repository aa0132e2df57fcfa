//! The host's side of an invocation's relay: the commands volume (the socket's directory, a
//! bounded tmpfs of the allocation's uid, mounted writable by the relay and read-only by the
//! agent), the relay container (cordon-init's `relay` role, a helper's hardening with stdin open),
//! and the attached stream the dispatcher reads calls from and writes answers to.
//!
//! The relay is attached before it starts (its first line says it listens), and its stdout is
//! read as lines bounded by what the relay may write; stderr is kept (bounded) for the error a
//! broken relay gives.

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, VolumeCreateRequest};
use bollard::query_parameters::AttachContainerOptions;
use cordon_contract::command::{Answer, FromHost, ToHost, MAX_CALL_LINE, SOCKET_DIR};
use cordon_contract::paths;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::engine::{bounded, objects, pending::Shared, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind};
use crate::profile::{commands_volume, helper_body, volume_mount, VolumeSpec};

/// A relay line, at most: a call (its name bounded by [`MAX_CALL_LINE`]) and its number.
const MAX_RELAY_LINE: usize = MAX_CALL_LINE + 64;
/// The relay's stderr kept for its error, at most.
const MAX_DIAGNOSTIC: usize = 4096;
/// How long the relay may take to listen once started.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The relay's create body: a helper's hardening (the allocation's uid, no capability, no
/// network), the commands volume writable, stdin open for the dispatcher's answers.
pub fn relay_body(
    image_id: &str,
    allocation: &Allocation,
    commands: &VolumeSpec,
) -> ContainerCreateBody {
    let mut body = helper_body(
        image_id,
        allocation,
        Kind::Relay,
        vec![paths::INIT.to_owned(), "relay".to_owned()],
        vec![volume_mount(commands, SOCKET_DIR, false, None)],
    );
    body.open_stdin = Some(true);
    body.attach_stdin = Some(true);
    // The relay's stdin closes with the controller's attach (its write half closed, or the
    // controller gone): the relay then ends.
    body.stdin_once = Some(true);
    // Named, so the read-back holds it to the engine's own runtime (as the proxy's).
    if let Some(host) = body.host_config.as_mut() {
        host.runtime = Some("runc".to_owned());
    }
    body
}

/// Create the commands volume and the relay (not started), each recorded in `created`, and read
/// the relay back: a relay that is not exactly its body is refused (`relay-container`) before it
/// starts. `edit` changes the body after it was planned (the gate's removal; `None` otherwise).
/// Returns the volume's spec and the relay's id.
pub async fn create(
    engine: &Engine,
    allocation: &Allocation,
    image_id: &str,
    edit: Option<fn(&mut ContainerCreateBody)>,
    created: &Shared<'_>,
) -> Result<(VolumeSpec, String)> {
    let volume = commands_volume(allocation);
    let request: VolumeCreateRequest = volume.request();
    objects::create_volume(engine, request, created).await?;
    let planned = relay_body(image_id, allocation, &volume);
    let mut body = planned.clone();
    if let Some(edit) = edit {
        edit(&mut body);
    }
    let id =
        objects::create_container(engine, &allocation.name(Kind::Relay), body, created).await?;
    let observed = objects::inspect_container(engine, &id)
        .await?
        .ok_or_else(|| broken("it vanished after create"))?;
    let refusals = crate::validate::egress::relay(&planned, image_id, &observed);
    if !refusals.is_empty() {
        return Err(Error::Refused(refusals));
    }
    Ok((volume, id))
}

type Output =
    Pin<Box<dyn Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A started relay: its calls in, its answers out.
pub struct Relay {
    output: Output,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    pending: Vec<u8>,
    diagnostic: Vec<u8>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

fn broken(what: impl Into<String>) -> Error {
    Error::Internal(format!("the commands relay: {}", what.into()))
}

impl Relay {
    /// Attach to the created relay `container`, start it, and wait until it listens.
    pub async fn start(engine: &Engine, container: &str) -> Result<Relay> {
        let options = AttachContainerOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            stream: true,
            logs: false,
            detach_keys: None,
        };
        let attached = bounded(
            "attach the relay",
            CALL_TIMEOUT,
            engine.docker().attach_container(container, Some(options)),
        )
        .await?;
        let mut relay = Relay {
            output: attached.output,
            input: attached.input,
            pending: Vec::new(),
            diagnostic: Vec::new(),
        };
        objects::start_container(engine, "relay", container).await?;
        match tokio::time::timeout(LISTEN_TIMEOUT, relay.next()).await {
            Ok(Ok(Some(ToHost::Listening))) => Ok(relay),
            Ok(Ok(other)) => Err(broken(format!(
                "its first line is {other:?}, not that it listens ({})",
                relay.diagnostic()
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Timeout {
                context: "the commands relay's listening line".into(),
                after: LISTEN_TIMEOUT,
            }),
        }
    }

    /// What the relay wrote on stderr (bounded, lossy).
    pub fn diagnostic(&self) -> String {
        String::from_utf8_lossy(&self.diagnostic).into_owned()
    }

    /// The relay's next line; `None` once its stream ended.
    pub async fn next(&mut self) -> Result<Option<ToHost>> {
        loop {
            if let Some(at) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=at).collect();
                return ToHost::parse(&line[..at])
                    .map(Some)
                    .map_err(|why| broken(format!("a line it wrote: {why}")));
            }
            if self.pending.len() > MAX_RELAY_LINE {
                return Err(broken(format!(
                    "a line of more than {MAX_RELAY_LINE} bytes"
                )));
            }
            let Some(item) = self.output.next().await else {
                return Ok(None);
            };
            match item.map_err(|source| Error::Docker {
                context: "the relay's stream".into(),
                source,
            })? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    self.pending.extend_from_slice(&message);
                }
                LogOutput::StdErr { message } => {
                    let room = MAX_DIAGNOSTIC.saturating_sub(self.diagnostic.len());
                    self.diagnostic
                        .extend_from_slice(&message[..message.len().min(room)]);
                }
                LogOutput::StdIn { .. } => {}
            }
        }
    }

    /// Answer call `seq`.
    pub async fn answer(&mut self, seq: u64, answer: &Answer) -> Result<()> {
        let line = FromHost {
            seq,
            answer: answer.clone(),
        }
        .line()
        .map_err(broken)?;
        let write = async {
            self.input.write_all(line.as_bytes()).await?;
            self.input.flush().await
        };
        tokio::time::timeout(CALL_TIMEOUT, write)
            .await
            .map_err(|_| Error::Timeout {
                context: "answering the commands relay".into(),
                after: CALL_TIMEOUT,
            })?
            .map_err(|e| Error::io("answering the commands relay", e))
    }

    /// Close the relay's stdin: it ends (exit 0) once no call is outstanding.
    pub async fn close(mut self) -> Result<()> {
        self.input
            .shutdown()
            .await
            .map_err(|e| Error::io("closing the commands relay's stdin", e))
    }
}
