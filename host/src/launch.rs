//! One agent container from profile to exit: write the invocation volumes, create the container,
//! read it back and validate it, start it, wait, collect the init's verdict and the output, remove
//! everything that was made.
//!
//! [`run`] is the production path: any validator refusal stops before start. The steps are public
//! so the gate can launch a container past the validator on purpose, and tests can signal a
//! running container.

pub mod command;
pub mod egress;
pub mod volumes;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{KillContainerOptions, LogsOptions};
use cordon_contract::{policy, Id, InitLine};
use futures_util::StreamExt;

use crate::controller::Controller;
use crate::engine::objects;
use crate::engine::pending::{Created, Shared};
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Refusal, Result};
use crate::labels::Kind;
use crate::profile::{invocation_volume_requests, LaunchPlan, Profile};
use crate::validate::{self, Observed};
use volumes::{InvocationVolumes, Loader, Part, Uploads};

/// Output kept per stream by default; the rest is drained and counted, never stored.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// What will be created: the plan and the invocation volume requests (the gate mutates these).
#[derive(Debug, Clone)]
pub struct Prepared {
    pub plan: LaunchPlan,
    pub volumes: BTreeMap<Kind, VolumeCreateRequest>,
    pub input_files: Vec<(String, Vec<u8>)>,
    /// Bytes kept of each output stream.
    pub max_output: usize,
    /// The invocation's network and proxy (and the gate's fixtures on it), when it has egress.
    pub egress: Option<egress::EgressPlan>,
    /// The proxy's vault, when it terminates the vendor host (set by the invocation).
    pub vault: Option<crate::custody::VaultTar>,
    /// An approved command's bound: both streams are also kept as one, in arrival order,
    /// without the init's lines ([`crate::command::stream`]).
    pub interleaved: Option<usize>,
}

impl Prepared {
    /// The plan for a profile on this engine (refuses fields the engine would drop).
    pub fn new(engine: &Engine, profile: &Profile) -> Result<Prepared> {
        Ok(Prepared {
            plan: profile.plan(engine.api())?,
            volumes: invocation_volume_requests(profile),
            input_files: profile.input_files().to_vec(),
            max_output: MAX_OUTPUT_BYTES,
            egress: profile
                .egress()
                .map(|spec| egress::EgressPlan::new(profile.allocation(), spec.clone())),
            vault: None,
            interleaved: None,
        })
    }
}

/// What the init said first (the only line the host trusts).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum InitVerdict {
    /// Preflight passed; `digest_matches` says whether it enforced the policy we wrote.
    Attested {
        digest_matches: bool,
        checks: Vec<Id>,
        /// Init-only protections the policy told the init to leave out (only the gate does).
        skipped: Vec<Id>,
        landlock_abi: u8,
        preflight_us: u64,
        /// The egress forwarder's port, listening before the workload started.
        egress_forward: Option<u16>,
        /// The directories the init pinned (relative to /work).
        pins: Vec<String>,
    },
    Refused {
        check: Id,
        expected: String,
        observed: String,
    },
    Failed {
        reason: String,
    },
    /// No init line came first.
    Missing {
        first_line: String,
    },
}

impl InitVerdict {
    /// The init enforced exactly the policy the host wrote, with nothing left out: the only verdict
    /// under which the workload's output may be used.
    pub fn trusted(&self) -> bool {
        matches!(self, InitVerdict::Attested { digest_matches: true, skipped, .. } if skipped.is_empty())
    }
}

/// Collected output of a finished container: the raw bytes as the workload wrote them (bounded),
/// and lossy text for diagnostics. Only [`Output::strict`] decides what a caller may use.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    #[serde(skip)]
    pub raw: RawOutput,
}

/// One container's output streams, byte for byte up to the bound.
#[derive(Debug, Clone, Default)]
pub struct RawOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes written to each stream in all (kept or not).
    pub stdout_total: u64,
    pub stderr_total: u64,
    /// Both streams as one, when the launch asked for it (an approved command).
    pub interleaved: Option<crate::command::stream::Streamed>,
}

impl RawOutput {
    fn new() -> RawOutput {
        RawOutput::default()
    }

    fn push(&mut self, stderr: bool, bytes: &[u8], max: usize) {
        let (buffer, total) = if stderr {
            (&mut self.stderr, &mut self.stderr_total)
        } else {
            (&mut self.stdout, &mut self.stdout_total)
        };
        *total += bytes.len() as u64;
        let room = max.saturating_sub(buffer.len());
        buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn output(self) -> Output {
        Output {
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
            truncated: self.stdout_total > self.stdout.len() as u64
                || self.stderr_total > self.stderr.len() as u64,
            raw: self,
        }
    }
}

/// Where the time went (milliseconds).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Timings {
    pub volumes_ms: f64,
    pub create_ms: f64,
    pub validate_ms: f64,
    pub start_ms: f64,
    pub wait_ms: f64,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// A created agent container and everything made for it.
#[derive(Debug)]
pub struct Launch {
    pub container: String,
    /// The container was created with a TTY (only a gate case does that).
    pub tty: bool,
    pub refusals: Vec<Refusal>,
    pub policy_digest: String,
    pub timings: Timings,
    created: Created,
    /// The attach stream's collector, started before the container is: the output comes byte for
    /// byte from the container's pipes, not from the log driver (which rewrites invalid UTF-8 and
    /// rotates the start of a long output away).
    capture: Option<tokio::task::JoinHandle<Result<RawOutput>>>,
    collected: Option<Output>,
    /// The profile's allocation and the controller that launched it (which refuses a retired
    /// allocation again at start).
    launched_by: Option<(Controller, uuid::Uuid)>,
    /// The loader and what it delivers into the control and input dirs at start.
    loading: Option<(Loader, Uploads)>,
    /// Made by [`create_into`]: the caller keeps the record, and a loader made at start goes into
    /// it ([`Launch::start_into`]).
    caller_records: bool,
    /// The invocation's egress: its proxy starts before the agent.
    pub egress: Option<egress::Egress>,
}

/// A vault with no proxy to start that would read it: refused, never written.
fn no_vault(vault: Option<volumes::VaultDelivery>) -> Result<()> {
    match vault {
        None => Ok(()),
        Some(_) => Err(Error::Internal("a vault with no proxy to start".into())),
    }
}

/// The proxy's vault out of `loading`, for its delivery (nothing when there is none).
fn take_vault(loading: &mut Option<(Loader, Uploads)>) -> Result<Option<volumes::VaultDelivery>> {
    loading
        .as_mut()
        .map(|(loader, uploads)| volumes::take_vault(loader, uploads))
        .transpose()
        .map(Option::flatten)
}

/// What a start touches of its launch, borrowed apart from the record it writes to.
struct Starting<'a> {
    container: &'a str,
    launched_by: &'a Option<(Controller, uuid::Uuid)>,
    loading: &'a mut Option<(Loader, Uploads)>,
    egress: &'a mut Option<egress::Egress>,
    timings: &'a mut Timings,
}

impl Starting<'_> {
    async fn start(self, engine: &Engine, record: &Shared<'_>) -> Result<()> {
        if let Some((ctl, allocation)) = self.launched_by {
            ctl.check_not_retired(allocation)?;
        }
        let t = Instant::now();
        let vault = take_vault(self.loading)?;
        let mut loading = self.loading.take();
        let container = self.container;
        let started = match self.egress.as_mut().filter(|e| e.attestation.is_none()) {
            None => match no_vault(vault) {
                Ok(()) => {
                    let part = Part::Everything;
                    start_delivering(engine, container, loading.as_mut(), part, record).await
                }
                Err(e) => Err(e),
            },
            Some(egress) => {
                let (proxied, started) = tokio::join!(
                    egress::start_proxy(engine, egress, vault),
                    start_delivering(engine, container, loading.as_mut(), Part::Inputs, record),
                );
                // The proxy's error first: it may be a custody refusal.
                match (proxied.and(started), &loading) {
                    (Ok(()), Some((loader, uploads))) => match loader.id() {
                        Ok(loader) => {
                            volumes::deliver_held(engine, loader, uploads, Part::Control).await
                        }
                        Err(e) => Err(e),
                    },
                    (result, _) => result,
                }
            }
        };
        if let Err(e) = started {
            // An init whose control dir never came is stopped now.
            let _ = kill(engine, container, "KILL").await;
            return Err(e);
        }
        self.timings.start_ms = ms(t);
        Ok(())
    }
}

/// Send a signal to `container`'s PID 1 (the init forwards it).
async fn kill(engine: &Engine, container: &str, signal: &str) -> Result<()> {
    let options = KillContainerOptions {
        signal: signal.to_owned(),
    };
    bounded(
        "kill container",
        CALL_TIMEOUT,
        engine.docker().kill_container(container, Some(options)),
    )
    .await
}

/// Start `container` and write `part` of what the loader (which never starts) delivers beside its
/// start: once the container holds the dirs mounted (the engine mounts a container's volumes
/// early in its start), or once its start returned if that comes first. A loader only planned is
/// made beside the start, recorded in `record`. A failed delivery leaves the started container
/// to the caller.
async fn start_delivering(
    engine: &Engine,
    container: &str,
    loading: Option<&mut (Loader, Uploads)>,
    part: Part,
    record: &Shared<'_>,
) -> Result<()> {
    let start = objects::start_container(engine, "container", container);
    let Some((loader, uploads)) = loading else {
        return start.await;
    };
    let sent = std::time::SystemTime::now();
    let mounted = volumes::mounted_by(engine, container, uploads.held(), sent);
    tokio::pin!(start, mounted);
    let first = async {
        tokio::select! {
            started = &mut start => started.map(|()| false),
            () = &mut mounted => Ok(true),
        }
    };
    let (made, beside) = tokio::join!(loader.make(engine, record), first);
    if let Err(e) = made {
        // The start runs to its end first, so the caller's kill finds the container started.
        if matches!(beside, Ok(true)) {
            let _ = start.await;
        }
        return Err(e);
    }
    let beside = beside?;
    tracing::debug!(beside, ?part, "the upload, beside the agent's start");
    let deliver = volumes::deliver_held(engine, loader.id()?, uploads, part);
    if beside {
        let (started, delivered) = tokio::join!(start, deliver);
        delivered.and(started)
    } else {
        deliver.await
    }
}

/// Attach to a created container's stdout and stderr and collect them in the background, keeping
/// `max` bytes of each and draining the rest.
async fn attach(
    engine: &Engine,
    container: &str,
    max: usize,
    interleaved: Option<usize>,
) -> Result<tokio::task::JoinHandle<Result<RawOutput>>> {
    let options = bollard::query_parameters::AttachContainerOptions {
        stdout: true,
        stderr: true,
        stream: true,
        logs: false,
        stdin: false,
        detach_keys: None,
    };
    let attached = bounded(
        "attach container",
        CALL_TIMEOUT,
        engine.docker().attach_container(container, Some(options)),
    )
    .await?;
    let mut stream = attached.output;
    Ok(tokio::spawn(async move {
        let mut raw = RawOutput::new();
        let mut one = interleaved.map(crate::command::stream::CommandStream::new);
        while let Some(item) = stream.next().await {
            let item = item.map_err(|source| Error::Docker {
                context: "attach".into(),
                source,
            })?;
            match item {
                bollard::container::LogOutput::StdErr { message } => {
                    raw.push(true, &message, max);
                    if let Some(one) = one.as_mut() {
                        one.stderr(&message);
                    }
                }
                bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::Console { message } => {
                    raw.push(false, &message, max);
                    if let Some(one) = one.as_mut() {
                        one.stdout(&message);
                    }
                }
                bollard::container::LogOutput::StdIn { .. } => {}
            }
        }
        raw.interleaved = one.map(crate::command::stream::CommandStream::finish);
        Ok(raw)
    }))
}

/// Read back a created container and every volume the profile mounts.
pub async fn read_back(engine: &Engine, container: &str, profile: &Profile) -> Result<Observed> {
    let names: Vec<String> = profile
        .volumes()
        .into_iter()
        .map(|(_, spec)| spec.name)
        .collect();
    let container_fut = async {
        objects::inspect_container(engine, container)
            .await?
            .ok_or_else(|| Error::Internal(format!("container {container} vanished after create")))
    };
    let volume_futs = names.iter().map(|name| async move {
        let result = match objects::inspect_volume(engine, name).await {
            Ok(Some(volume)) => Ok(volume),
            Ok(None) => Err(format!("no volume {name}")),
            Err(e) => Err(e.to_string()),
        };
        (name.clone(), result)
    });
    let holders = async {
        objects::uid_holders(engine, profile.allocation().uid)
            .await
            .map_err(|e| e.to_string())
    };
    let (container, volumes, uid_holders) = tokio::join!(
        container_fut,
        futures_util::future::join_all(volume_futs),
        holders
    );
    Ok(Observed {
        container: container?,
        volumes: volumes.into_iter().collect(),
        uid_holders,
    })
}

/// Create the invocation volumes and the container, then read both back and validate.
/// Everything made is removed if a step fails; on success the caller owns it (see [`Launch::finish`]).
pub async fn create(ctl: &Controller, profile: &Profile, prepared: Prepared) -> Result<Launch> {
    let engine = ctl.engine();
    let mut created = Created::default();
    match create_into(ctl, profile, prepared, &mut created).await {
        Ok(mut launch) => {
            launch.created = created;
            launch.caller_records = false;
            Ok(launch)
        }
        Err(e) => {
            created.remove_all(engine, Duration::from_secs(10)).await?;
            Err(e)
        }
    }
}

/// [`create`] that records what it makes in `created` and leaves cleanup to the caller: an
/// invocation owns the record, so a cancelled or failed setup still knows what may exist. The
/// returned launch owns nothing ([`Launch::finish`] removes nothing of it).
pub async fn create_into(
    ctl: &Controller,
    profile: &Profile,
    prepared: Prepared,
    created: &mut Created,
) -> Result<Launch> {
    let engine = ctl.engine();
    ctl.check_not_retired(&profile.allocation().id)?;
    let mut timings = Timings::default();
    let policy_bytes = prepared.plan.policy.to_bytes();
    let prepared_policy = prepared.plan.policy.clone();
    let tty = prepared.plan.create.tty == Some(true);
    let policy_digest = policy::digest(&policy_bytes);
    let max_output = prepared.max_output;
    let interleaved = prepared.interleaved;
    let result = async {
        let t = Instant::now();
        let inputs: Vec<(&str, &[u8])> = prepared
            .input_files
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let record = Shared::new(created);
        let (allocation, image) = (profile.allocation(), profile.image_id());
        // Two chains side by side, each step as soon as what it needs exists: the volumes, then
        // the agent's container (read back and validated) and the loader; the network, then its
        // fixtures and the proxy, which also needs the egress and vault volumes (handed over
        // once made). The agent's container is on no network and waits for none.
        let (volumes_made, proxy_volumes) = tokio::sync::oneshot::channel();
        let storage = async {
            let (names, specs) =
                InvocationVolumes::create_volumes(engine, prepared.volumes, &record).await?;
            timings.volumes_ms = ms(t);
            let _ = volumes_made.send(crate::profile::egress::ProxyVolumes {
                egress: specs.get(&Kind::Egress).cloned().unwrap_or_default(),
                vault: specs.get(&Kind::Vault).cloned(),
            });
            // The loader never starts: once the agent's container has started it holds control
            // and input mounted, and once the proxy has started it holds the vault; the loader is
            // only the engine's way in to write them ([`volumes::deliver_held`],
            // [`volumes::deliver_vault`]). The vault is written only once the proxy was validated
            // ([`Launch::start_proxy`]). Holding a vault, it is made now, beside the agent's
            // container; otherwise beside the agent's start, where its create does not share the
            // engine with the agent's.
            let mut loader = Loader::planned(allocation, image, &specs);
            let load = async {
                if specs.contains_key(&Kind::Vault) {
                    loader.make(engine, &record).await?;
                }
                Ok::<_, Error>(loader)
            };
            let agent = async {
                let t = Instant::now();
                let id = objects::create_container(
                    engine,
                    &prepared.plan.name,
                    prepared.plan.create,
                    &record,
                )
                .await?;
                let create_ms = ms(t);
                let t = Instant::now();
                // Attached beside the read-back: the stream only collects, and a container the
                // validator refuses is never started.
                let (observed, capture) = tokio::try_join!(
                    read_back(engine, &id, profile),
                    attach(engine, &id, max_output, interleaved)
                )?;
                let mut refusals = validate::validate(profile, &observed);
                refusals.extend(validate::policy::pins(profile, &prepared_policy));
                let validate_ms = ms(t);
                Ok::<_, Error>((id, refusals, capture, create_ms, validate_ms))
            };
            let (loader, agent) = tokio::try_join!(load, agent)?;
            Ok::<_, Error>((names, loader, agent))
        };
        let lifetime = profile.limits().deadline + profile.limits().grace;
        let network = async {
            let Some(plan) = prepared.egress else {
                return Ok(None);
            };
            let networked =
                egress::create_network(engine, allocation, image, plan, &record).await?;
            // Dropped unsent only when the volumes failed, whose error ends the launch first.
            let volumes = proxy_volumes
                .await
                .map_err(|_| Error::Internal("the proxy's volumes were never made".into()))?;
            let proxy = (&volumes, lifetime);
            let made = egress::create_proxy(engine, allocation, image, networked, proxy, &record);
            made.await.map(Some)
        };
        // Boxed: side by side, the two chains' states add up, and in a debug build the futures
        // that hold them inline overflowed a test thread's stack.
        let ((names, loader, (id, mut refusals, capture, create_ms, validate_ms)), network) =
            tokio::try_join!(Box::pin(storage), Box::pin(network))?;
        let made_egress = network.map(|(made, proxy_refusals)| {
            refusals.extend(proxy_refusals);
            made
        });
        let held = [Kind::Control, Kind::Input]
            .iter()
            .filter_map(|kind| names.get(kind).cloned())
            .collect();
        let vault_volume = names.get(&Kind::Vault).cloned();
        drop(names);
        timings.create_ms = create_ms;
        timings.validate_ms = validate_ms;
        let uploads = Uploads::new(&policy_bytes, &inputs)?
            .with_vault(prepared.vault)
            .vault_in(vault_volume)
            .held_in(held);
        Ok::<_, Error>((id, refusals, capture, (loader, uploads), made_egress))
    }
    .await;
    let (container, refusals, capture, loading, made_egress) = result?;
    Ok(Launch {
        container,
        tty,
        refusals,
        policy_digest,
        timings,
        created: Created::default(),
        capture: Some(capture),
        collected: None,
        launched_by: Some((ctl.clone(), profile.allocation().id)),
        loading: Some(loading),
        caller_records: true,
        egress: made_egress,
    })
}

/// Read the init's verdict from its first line: the first stderr line, written before any
/// workload process exists. Only a container with a TTY (which the validator refuses, and only the
/// gate starts) has both streams merged into stdout; then the first stdout line is the init's.
pub fn verdict(output: &Output, policy_digest: &str, tty: bool) -> InitVerdict {
    let stream = if tty { &output.stdout } else { &output.stderr };
    let first = stream.lines().next().unwrap_or("");
    match InitLine::parse(first) {
        Some(InitLine::Attestation {
            policy_digest: digest,
            checks,
            skipped,
            landlock_abi,
            preflight_us,
            egress_forward,
            pins,
        }) => InitVerdict::Attested {
            digest_matches: digest == policy_digest,
            checks,
            skipped,
            landlock_abi,
            preflight_us,
            egress_forward,
            pins,
        },
        Some(InitLine::Refusal(refusal)) => InitVerdict::Refused {
            check: refusal.id,
            expected: refusal.expected,
            observed: refusal.observed,
        },
        Some(InitLine::Failure { reason }) => InitVerdict::Failed { reason },
        _ => InitVerdict::Missing {
            first_line: first.chars().take(200).collect(),
        },
    }
}

impl Launch {
    /// Wrap a container created elsewhere (a helper the caller removes itself).
    pub fn adopt(container: String) -> Launch {
        Launch {
            container,
            tty: false,
            refusals: Vec::new(),
            policy_digest: String::new(),
            timings: Timings::default(),
            created: Created::default(),
            capture: None,
            collected: None,
            launched_by: None,
            loading: None,
            caller_records: false,
            egress: None,
        }
    }

    /// Deliver the proxy's vault, start the fixtures (the proof harness's) and the proxy, and read
    /// its attestation (nothing without egress; nothing again once done). [`Launch::start`] does
    /// this beside the container's start; a caller that needs the proxy's addresses before the
    /// container starts calls it earlier.
    pub async fn start_proxy(&mut self, engine: &Engine) -> Result<()> {
        let vault = take_vault(&mut self.loading)?;
        match self.egress.as_mut() {
            Some(egress) => egress::start_proxy(engine, egress, vault).await,
            None => no_vault(vault),
        }
    }

    /// Start the container (whatever the validator said: callers decide).
    ///
    /// With a proxy still to start, the agent's container starts beside it (and beside the
    /// fixtures' starts and the vault's delivery) and gets its inputs, and the policy and the
    /// ready marker are written only once the proxy attested what it was asked to: until then
    /// the container's init only waits for its control dir, so no code of the agent's runs
    /// before the proxy is up and checked. A proxy that fails leaves the init waiting, and it is
    /// killed. Without one, everything is delivered beside the start.
    ///
    /// A loader made here (see [`volumes::Loader`]) goes into the launch's own record; a launch
    /// from [`create_into`], whose caller keeps the record, starts with [`Launch::start_into`].
    pub async fn start(&mut self, engine: &Engine) -> Result<()> {
        if self.caller_records {
            return Err(Error::Internal(
                "a launch whose caller keeps its record starts with start_into".into(),
            ));
        }
        let (starting, created) = self.starting();
        starting.start(engine, &created.shared()).await
    }

    /// [`Launch::start`] for a launch from [`create_into`]: what it makes goes into `created`,
    /// the caller's record.
    pub async fn start_into(&mut self, engine: &Engine, created: &mut Created) -> Result<()> {
        let (starting, _) = self.starting();
        starting.start(engine, &created.shared()).await
    }

    /// What a start touches, apart from the launch's own record.
    fn starting(&mut self) -> (Starting<'_>, &mut Created) {
        let Launch {
            container,
            created,
            launched_by,
            loading,
            egress,
            timings,
            ..
        } = self;
        let starting = Starting {
            container,
            launched_by,
            loading,
            egress,
            timings,
        };
        (starting, created)
    }

    /// Deliver `extra` input files besides the profile's `files` (the gate's probe fixture,
    /// written once the network's addresses are known; before [`Launch::start`]).
    pub fn add_inputs(
        &mut self,
        files: &[(String, Vec<u8>)],
        extra: &[(String, Vec<u8>)],
    ) -> Result<()> {
        let Some((_, uploads)) = self.loading.as_mut() else {
            return Err(Error::Internal("inputs added after start".into()));
        };
        let all: Vec<(&str, &[u8])> = files
            .iter()
            .chain(extra)
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        uploads.replace_inputs(&all)
    }

    /// Send a signal to PID 1 (the init forwards it).
    pub async fn kill(&self, engine: &Engine, signal: &str) -> Result<()> {
        kill(engine, &self.container, signal).await
    }

    /// Wait for the container to exit; returns its exit code. Past `limit` it is killed.
    pub async fn wait(&mut self, engine: &Engine, limit: Duration) -> Result<i64> {
        let t = Instant::now();
        let mut stream = engine.docker().wait_container(&self.container, None);
        let code = match tokio::time::timeout(limit, stream.next()).await {
            Ok(Some(Ok(response))) => response.status_code,
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => code,
            Ok(Some(Err(source))) => {
                return Err(Error::Docker {
                    context: "wait container".into(),
                    source,
                })
            }
            Ok(None) => {
                return Err(Error::Internal("wait stream ended without a status".into()));
            }
            Err(_) => {
                let _ = self.kill(engine, "KILL").await;
                return Err(Error::Timeout {
                    context: "wait container".into(),
                    after: limit,
                });
            }
        };
        self.timings.wait_ms = ms(t);
        Ok(code)
    }

    /// The container's output: for a container this module created, everything its attach stream
    /// carried (call after the container exited); for an adopted one, what its log holds so far.
    pub async fn output(&mut self, engine: &Engine) -> Result<Output> {
        if let Some(output) = &self.collected {
            return Ok(output.clone());
        }
        let raw = match self.capture.take() {
            Some(collector) => match tokio::time::timeout(CALL_TIMEOUT, collector).await {
                Ok(Ok(raw)) => raw?,
                Ok(Err(e)) => return Err(Error::Internal(format!("output collector: {e}"))),
                Err(_) => {
                    return Err(Error::Timeout {
                        context: "output".into(),
                        after: CALL_TIMEOUT,
                    })
                }
            },
            None => self.logs(engine, MAX_OUTPUT_BYTES).await?,
        };
        let output = raw.output();
        if self.launched_by.is_some() {
            self.collected = Some(output.clone());
        }
        Ok(output)
    }

    /// What the log driver holds of an adopted container's streams, `max` bytes of each at most
    /// (the tree reader's report is longer than an agent's output may be).
    pub async fn log_output(&self, engine: &Engine, max: usize) -> Result<Output> {
        Ok(self.logs(engine, max).await?.output())
    }

    /// What the log driver holds (helpers, and tests that look at a running container).
    async fn logs(&self, engine: &Engine, max: usize) -> Result<RawOutput> {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            follow: false,
            tail: "all".to_owned(),
            ..Default::default()
        };
        let mut stream = engine.docker().logs(&self.container, Some(options));
        let mut raw = RawOutput::new();
        let collect = async {
            while let Some(item) = stream.next().await {
                let item = item.map_err(|source| Error::Docker {
                    context: "logs".into(),
                    source,
                })?;
                match item {
                    bollard::container::LogOutput::StdErr { message } => {
                        raw.push(true, &message, max)
                    }
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message } => {
                        raw.push(false, &message, max)
                    }
                    bollard::container::LogOutput::StdIn { .. } => {}
                }
            }
            Ok::<_, Error>(())
        };
        match tokio::time::timeout(CALL_TIMEOUT, collect).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::Timeout {
                    context: "logs".into(),
                    after: CALL_TIMEOUT,
                })
            }
        }
        Ok(raw)
    }

    /// The init's verdict in this container's output.
    pub fn verdict(&self, output: &Output) -> InitVerdict {
        verdict(output, &self.policy_digest, self.tty)
    }

    /// Remove the container and the invocation volumes.
    pub async fn finish(self, engine: &Engine) -> Result<()> {
        self.created
            .remove_all(engine, Duration::from_secs(60))
            .await
    }
}

/// The result of a production launch.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    pub exit_code: i64,
    pub verdict: InitVerdict,
    pub output: Output,
    pub timings: Timings,
}

/// The production path: refuse on any validator difference, otherwise run to the end. Removes
/// everything it made before returning.
pub async fn run(ctl: &Controller, profile: &Profile) -> Result<RunReport> {
    run_prepared(ctl, profile, Prepared::new(ctl.engine(), profile)?).await
}

/// [`run`] with a plan the caller may have changed (tests prove the validator stops such a plan).
pub async fn run_prepared(
    ctl: &Controller,
    profile: &Profile,
    prepared: Prepared,
) -> Result<RunReport> {
    let engine = ctl.engine();
    let mut launch = create(ctl, profile, prepared).await?;
    if !launch.refusals.is_empty() {
        let refusals = std::mem::take(&mut launch.refusals);
        launch.finish(engine).await?;
        return Err(Error::Refused(refusals));
    }
    let limit = profile.limits().deadline + profile.limits().grace + Duration::from_secs(30);
    let result = async {
        launch.start(engine).await?;
        let exit_code = launch.wait(engine, limit).await?;
        let output = launch.output(engine).await?;
        Ok::<_, Error>((exit_code, output))
    }
    .await;
    let timings = launch.timings;
    let outcome = result.map(|(code, output)| {
        let verdict = launch.verdict(&output);
        (code, output, verdict)
    });
    launch.finish(engine).await?;
    let (exit_code, output, verdict) = outcome?;
    Ok(RunReport {
        exit_code,
        verdict,
        output,
        timings,
    })
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
