//! Start an invocation and supervise it in the background: setup (build, create, validate,
//! start), run, stop on the first reason, clean up (retried through a window), settle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::profile::{profile, vendor_target, Tree, PROVISIONAL_IMAGE};
use super::{
    assemble, check_vendor, Capture, Credential, Facts, Handle, ImageSource, InvocationResult,
    Options, Step, StopReason, Timings,
};
use crate::controller::Controller;
use crate::custody::Custody;
use crate::engine::objects::Listed;
use crate::engine::pending::{Created, Leftover};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind, Owner, ATTEMPT};
use crate::launch::{self, Prepared};
use crate::profile::Profile;

/// Objects of this attempt that an earlier invocation may have left (the storage's own kinds are
/// not the invocation's).
async fn attempt_objects(engine: &Engine, owner: &Owner, attempt: &str) -> Result<Vec<String>> {
    let listed = Listed::with_label(engine, &format!("{ATTEMPT}={attempt}")).await?;
    let ours = |labels: &std::collections::HashMap<String, String>| {
        labels.get(crate::labels::OWNER).map(String::as_str) == Some(owner.as_str())
            && labels
                .get(crate::labels::KIND)
                .and_then(|k| Kind::parse(k))
                .is_some_and(|k| {
                    matches!(
                        k,
                        Kind::Agent
                            | Kind::Control
                            | Kind::Input
                            | Kind::Egress
                            | Kind::Loader
                            | Kind::Vault
                            | Kind::Commands
                            | Kind::Relay
                            | Kind::Command
                    )
                })
    };
    let mut found: Vec<String> = listed
        .containers
        .into_iter()
        .filter(|c| c.labels.as_ref().is_some_and(ours))
        .map(|c| format!("container {}", c.id.unwrap_or_default()))
        .collect();
    found.extend(
        listed
            .volumes
            .into_iter()
            .filter(|v| ours(&v.labels))
            .map(|v| format!("volume {}", v.name)),
    );
    Ok(found)
}

/// Start an invocation. Fails only when it allocated nothing: invalid input, an expired
/// deadline, an attempt id still owned, a refused vendor.
pub async fn start(
    ctl: &Controller,
    capture: Capture,
    credential: Option<Credential>,
    options: Options,
) -> Result<Handle> {
    let request = &capture.request;
    check_vendor(request.vendor, request.phase)?;
    if request.deadline <= Instant::now() {
        return Err(Error::Deadline("the invocation's deadline".into()));
    }
    let owner = Owner::new(&request.storage.owner)?;
    // The invocation runs as its storage's uid (the work tree is that uid's), or over a shared
    // snapshot as one of its own (the tree is readable, not owned). Both only read the engine:
    // side by side, the mark's refusal first.
    let uid = async {
        match &request.storage.snapshot {
            None => Ok(request.storage.uid),
            Some(_) => snapshot_uid(ctl, request.phase, &options).await,
        }
    };
    let (marked, uid) = tokio::join!(request.storage.check_mark(ctl.engine()), uid);
    marked?;
    let uid = uid?;
    let mut allocation = Allocation::new(&owner, &request.attempt, uid)?;
    allocation.id = options.allocation.unwrap_or_else(uuid::Uuid::new_v4);
    if allocation.id.is_nil() {
        return Err(Error::Invalid(
            "the invocation's allocation id is nil".into(),
        ));
    }
    let image_id = match &options.image {
        ImageSource::Id(id) | ImageSource::Agent { id, .. } => id.clone(),
        ImageSource::Build(_) => PROVISIONAL_IMAGE.to_owned(),
    };
    // Redeemed before anything is allocated: execute and fix start only on a checked tree.
    let tree = Tree {
        masks: crate::audit::redeem(
            ctl,
            request.phase,
            request.tree_check.as_ref(),
            &request.storage,
        )?,
        pin_mounts: ctl.engine().api() >= crate::engine::SUBPATH_API,
    };
    let custody = custody(&capture, credential.as_ref(), &options)?;
    // Checked now so that invalid input throws; rebuilt with the real image id after a build.
    let checked = profile(
        &capture,
        &allocation,
        &image_id,
        &options.image.exec(),
        custody.as_ref(),
        &options,
        &tree,
    )?;
    // Claimed before the engine is asked, so two starts of one attempt cannot both pass.
    let unsettled = ctl.claim_unsettled(&request.attempt)?;
    let left = attempt_objects(ctl.engine(), &owner, &request.attempt).await?;
    if !left.is_empty() {
        return Err(Error::AttemptOwned(
            request.attempt.clone(),
            crate::error::bounded_list(&left, 400),
        ));
    }
    let (stop_tx, stop_rx) = watch::channel(None);
    let (step_tx, step_rx) = watch::channel(Step::Creating);
    let (result_tx, result_rx) = watch::channel(None);
    let handle = Handle {
        attempt: request.attempt.clone(),
        allocation: allocation.id,
        stop: Arc::new(stop_tx),
        step: step_rx,
        result: result_rx,
    };
    let supervisor = Supervisor {
        ctl: ctl.clone(),
        capture,
        custody,
        options,
        allocation,
        profile: checked,
        tree,
        stop: stop_rx,
        step: step_tx,
    };
    tokio::spawn(async move {
        let result = supervisor.run().await;
        drop(unsettled);
        let _ = result_tx.send(Some(Arc::new(result)));
    });
    Ok(handle)
}

/// A uid of its own for an invocation over a shared snapshot, in a phase that writes nothing and
/// with no approved command (a command's container runs as its agent's uid over the agent's
/// storage: that is a review with storage of its own).
async fn snapshot_uid(
    ctl: &Controller,
    phase: cordon_contract::Phase,
    options: &Options,
) -> Result<crate::uids::Uid> {
    if phase.work_writable() {
        return Err(Error::Snapshot {
            id: "snapshot-writable-phase",
            reason: format!("{phase} writes /work: it takes storage of its own"),
        });
    }
    if !options.commands.is_empty() {
        return Err(Error::Snapshot {
            id: "snapshot-commands",
            reason: "an invocation offered approved commands takes storage of its own".into(),
        });
    }
    crate::storage::pick_uid(ctl.engine(), &options.uids).await
}

/// The custody of a credential: its sentinel, CA and vault, for the vendor's API host, valid
/// until the request's deadline (plus a margin). No credential, no custody.
fn custody(
    capture: &Capture,
    credential: Option<&Credential>,
    options: &Options,
) -> Result<Option<Custody>> {
    let Some(credential) = credential else {
        return Ok(None);
    };
    let request = &capture.request;
    let (host, port) = vendor_target(
        request.vendor,
        &request.network_allowlist,
        options.vendor.base_url.as_deref(),
    )?;
    let left = request.deadline.saturating_duration_since(Instant::now());
    Custody::new(
        credential,
        &host,
        port,
        options.vendor.extra_ca_pem.as_deref(),
        options.vendor.budget,
        std::time::SystemTime::now() + left,
    )
    .map(Some)
}

/// Everything one invocation's background task needs.
struct Supervisor {
    ctl: Controller,
    capture: Capture,
    /// The credential's custody: the sentinel, the CA, the proxy's vault.
    custody: Option<Custody>,
    options: Options,
    allocation: Allocation,
    profile: Profile,
    /// The masks and pins of the redeemed tree check (a rebuilt profile takes the same).
    tree: Tree,
    stop: watch::Receiver<Option<StopReason>>,
    step: watch::Sender<Step>,
}

/// What the run phase produced.
struct Ran {
    exit_code: Option<i64>,
    output: Option<launch::Output>,
    policy_digest: String,
    egress_log: Vec<serde_json::Value>,
    vendor_log: Vec<serde_json::Value>,
    /// The approved commands' calls.
    commands: super::commands::Served,
    /// The proof harness's fixtures on the invocation network, and how long the proxy's start
    /// waited for them.
    fixtures: Vec<String>,
    fixtures_wait: Duration,
}

impl Supervisor {
    /// Resolves with the first stop reason: a caller's, or the deadline's.
    async fn stopped(
        mut stop: watch::Receiver<Option<StopReason>>,
        deadline: tokio::time::Instant,
    ) -> StopReason {
        let asked = async {
            // The guard the watch hands out is not Send: copy the reason out at once.
            let reason = stop.wait_for(Option::is_some).await.map(|r| *r);
            match reason {
                Ok(reason) => reason.unwrap_or(StopReason::Cancelled),
                // The handle is gone: nobody can stop it any more but the deadline.
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            reason = asked => reason,
            _ = tokio::time::sleep_until(deadline) => StopReason::Timeout,
        }
    }

    async fn run(mut self) -> InvocationResult {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(self.capture.request.deadline);
        let mut created = Created::default();
        let mut timings = Timings::default();
        let mut stop_reason: Option<StopReason> = None;
        let mut setup_error: Option<Error> = None;
        let mut ran = Ran {
            exit_code: None,
            output: None,
            policy_digest: String::new(),
            egress_log: Vec::new(),
            vendor_log: Vec::new(),
            commands: super::commands::Served::default(),
            fixtures: Vec::new(),
            fixtures_wait: Duration::ZERO,
        };

        let setup_result = {
            let setup = self.setup(&mut created);
            let stopped = Self::stopped(self.stop.clone(), deadline);
            tokio::select! {
                result = setup => Some(result),
                reason = stopped => {
                    stop_reason = Some(reason);
                    None
                }
            }
        };
        timings.setup_ms = started.elapsed().as_secs_f64() * 1000.0;
        match setup_result {
            Some(Ok((launch, profile, dispatcher))) => {
                let run_started = Instant::now();
                let (stopped, error) = self
                    .run_container(launch, &profile, dispatcher, deadline, &mut ran)
                    .await;
                stop_reason = stop_reason.or(stopped);
                setup_error = error;
                // What a command's removal left is the invocation's to clean up and report.
                created.extend(std::mem::take(&mut ran.commands.left));
                timings.run_ms = run_started.elapsed().as_secs_f64() * 1000.0;
            }
            Some(Err(e)) => setup_error = Some(e),
            None => {}
        }
        let _ = self.step.send(Step::Cleaning);
        // The fixtures first, timed: with their wait at setup, what a run against a real vendor
        // does not pay. Bounded as the first removal pass is, which removes what is left.
        let fixtures_removal = Instant::now();
        let first = created.remove_first(self.ctl.engine(), &ran.fixtures);
        let _ = tokio::time::timeout(self.options.first_cleanup, first).await;
        if !ran.fixtures.is_empty() {
            timings.fixtures_ms =
                (ran.fixtures_wait + fixtures_removal.elapsed()).as_secs_f64() * 1000.0;
        }
        let cleanup_started = Instant::now();
        let unreleased = self.clean(&created).await;
        timings.cleanup_ms = cleanup_started.elapsed().as_secs_f64() * 1000.0;
        if !unreleased.is_empty() {
            self.ctl.retire(&self.allocation.id);
        }
        let _ = self.step.send(Step::Settled);
        timings.total_ms = started.elapsed().as_secs_f64() * 1000.0;
        let request = &self.capture.request;
        assemble(Facts {
            attempt: request.attempt.clone(),
            referenced_code_hash: request.referenced_code_hash.clone(),
            phase: request.phase,
            vendor: request.vendor,
            allocation: self.allocation.id,
            exit_code: ran.exit_code,
            output: ran.output,
            policy_digest: ran.policy_digest,
            schema: self.capture.schema.clone(),
            stop_reason,
            setup_error,
            unreleased,
            timings,
            egress_log: ran.egress_log,
            vendor_log: ran.vendor_log,
            commands: ran.commands.records,
            commands_unrecorded: ran.commands.unrecorded,
        })
    }

    /// Build (when asked), make the approved commands' images and relay (when offered), create,
    /// read back and validate, attach, start. What it makes is recorded in `created` as it goes.
    async fn setup(
        &self,
        created: &mut Created,
    ) -> Result<(launch::Launch, Profile, Option<super::commands::Dispatcher>)> {
        let profile = match &self.options.image {
            ImageSource::Id(_) | ImageSource::Agent { .. } => self.profile.clone(),
            ImageSource::Build(workspace) => {
                let _ = self.step.send(Step::Building);
                let built = crate::image::build_test_image(self.ctl.engine(), workspace).await?;
                profile(
                    &self.capture,
                    &self.allocation,
                    &built.id,
                    &self.options.image.exec(),
                    self.custody.as_ref(),
                    &self.options,
                    &self.tree,
                )?
            }
        };
        let _ = self.step.send(Step::Creating);
        // The relay listens before the agent exists: its commands volume is one the agent's
        // read-back validation inspects.
        let dispatcher = if profile.offers_commands() {
            Some(
                super::commands::prepare(
                    &self.ctl,
                    &profile,
                    &self.options.commands,
                    self.capture.request.deadline,
                    created,
                )
                .await?,
            )
        } else {
            None
        };
        let mut prepared = Prepared::new(self.ctl.engine(), &profile)?;
        prepared.max_output = self.options.max_output;
        if let Some(custody) = &self.custody {
            prepared.vault = Some(custody.vault().tar(self.allocation.uid.proxy())?);
        }
        if let Some(plan) = prepared.egress.as_mut() {
            plan.fixtures = self.options.egress.fixtures.clone();
        }
        let mut launch = launch::create_into(&self.ctl, &profile, prepared, created).await?;
        if !launch.refusals.is_empty() {
            return Err(Error::Refused(std::mem::take(&mut launch.refusals)));
        }
        launch.start_into(self.ctl.engine(), created).await?;
        Ok((launch, profile, dispatcher))
    }

    /// Wait for the container to end, or stop it on the first reason (the init stops everything
    /// on TERM, and kills what ignores it after its grace); collect its output. Returns the stop
    /// reason, if one came, and the first error.
    async fn run_container(
        &self,
        launch: launch::Launch,
        profile: &Profile,
        dispatcher: Option<super::commands::Dispatcher>,
        deadline: tokio::time::Instant,
        ran: &mut Ran,
    ) -> (Option<StopReason>, Option<Error>) {
        let Some(dispatcher) = dispatcher else {
            return self.run_agent(launch, profile, deadline, ran).await;
        };
        // The dispatcher serves the agent's calls while it runs, and stops (killing a command
        // still running) once the agent has ended.
        let (done, agent_done) = watch::channel(false);
        let serving = dispatcher.serve(&self.ctl, profile, agent_done);
        let running = async {
            let ended = self.run_agent(launch, profile, deadline, ran).await;
            let _ = done.send(true);
            ended
        };
        let (mut served, (stop_reason, error)) = tokio::join!(serving, running);
        let error = error.or(served.error.take());
        ran.commands = served;
        (stop_reason, error)
    }

    /// [`Self::run_container`]'s agent: wait, stop, collect.
    async fn run_agent(
        &self,
        mut launch: launch::Launch,
        profile: &Profile,
        deadline: tokio::time::Instant,
        ran: &mut Ran,
    ) -> (Option<StopReason>, Option<Error>) {
        let _ = self.step.send(Step::Running);
        ran.policy_digest = launch.policy_digest.clone();
        let limit = profile.limits().deadline + profile.limits().grace + Duration::from_secs(30);
        let engine = self.ctl.engine();
        let mut stop_reason = None;
        let mut error = None;
        let waited = {
            let wait = launch.wait(engine, limit);
            let stopped = Self::stopped(self.stop.clone(), deadline);
            tokio::select! {
                code = wait => Some(code),
                reason = stopped => {
                    stop_reason = Some(reason);
                    None
                }
            }
        };
        let code = match waited {
            Some(code) => code,
            None => {
                let _ = self.step.send(Step::Stopping);
                let _ = launch.kill(engine, "TERM").await;
                let grace = profile.limits().grace + Duration::from_secs(5);
                match launch.wait(engine, grace).await {
                    Ok(code) => Ok(code),
                    Err(_) => launch.wait(engine, Duration::from_secs(20)).await,
                }
            }
        };
        match code {
            Ok(code) => ran.exit_code = Some(code),
            Err(e) => error = Some(e),
        }
        match launch.output(engine).await {
            Ok(output) => ran.output = Some(output),
            Err(e) => {
                error.get_or_insert(e);
            }
        }
        // Read while the proxy and the fixtures still exist (cleanup removes them next), side by
        // side: cleanup waits for both.
        if let Some(egress) = &launch.egress {
            ran.fixtures = egress.fixtures.clone();
            ran.fixtures_wait = egress.fixtures_wait;
            let (proxy, vendor) = tokio::join!(
                launch::egress::proxy_log(engine, egress),
                launch::egress::vendor_log(engine, egress)
            );
            match proxy {
                Ok(lines) => ran.egress_log = lines,
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
            match vendor {
                Ok(lines) => ran.vendor_log = lines,
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        (stop_reason, error)
    }

    /// Remove what the invocation made (or may have made). A failed first attempt opens the retry
    /// window: every second, each retry bounded by what is left of it. Returns what is left.
    async fn clean(&mut self, created: &Created) -> Vec<Leftover> {
        let first = tokio::time::timeout(
            self.options.first_cleanup,
            created.remove_once(self.ctl.engine()),
        )
        .await;
        let mut left = match first {
            Ok(left) => left,
            Err(_) => created.clone(),
        };
        let window = Instant::now();
        while !left.is_empty() {
            let remaining = self.options.cleanup_window.saturating_sub(window.elapsed());
            if remaining.is_zero() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1).min(remaining)).await;
            let remaining = self.options.cleanup_window.saturating_sub(window.elapsed());
            if remaining.is_zero() {
                break;
            }
            if let Ok(next) =
                tokio::time::timeout(remaining, left.remove_once(self.ctl.engine())).await
            {
                left = next;
            }
        }
        left.leftovers()
    }
}
