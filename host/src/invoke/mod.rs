//! Invocations: what a runner calls to run an agent in one phase.
//!
//! [`capture`] freezes a request (each attempt id once). [`start`] checks everything that needs no
//! allocation and returns a [`Handle`] at once; it fails only when it allocated nothing. Every later
//! failure settles the handle. The handle settles after the container is gone and cleanup has
//! finished: a failed cleanup is retried every second for a window (60 s by default) after the
//! first failure, then the result lists what could not be confirmed removed (`unreleased`) and the
//! profile is retired. The first stop reason (timeout, cancelled, shutdown) wins and travels as a
//! typed value.

pub mod claude;
pub mod oneshot;
mod result;
pub mod schema;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_contract::{paths, Phase, Vendor};
use tokio::sync::watch;

use crate::cleanup::{Created, Leftover};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind, Owner, ATTEMPT};
use crate::launch::{self, Prepared};
use crate::profile::{Limits, Profile, ProfileSpec, SCHEMA_FILE};
use crate::task::StorageHandle;

pub use result::{assemble, Attestation, Facts, Failure, InvocationResult, Timings};
pub use schema::AnswerSchema;

/// The phases each vendor may run. Codex's set is empty: it reads code only through its shell,
/// which is off, so it would plan without the code and edit files it cannot see.
pub fn allowed_phases(vendor: Vendor) -> &'static [Phase] {
    match vendor {
        Vendor::Claude => &Phase::ALL,
        Vendor::Codex => &[],
    }
}

fn check_vendor(vendor: Vendor, phase: Phase) -> Result<()> {
    if allowed_phases(vendor).contains(&phase) {
        return Ok(());
    }
    Err(Error::VendorRefused(format!(
        "{vendor} is refused in every phase ({phase} included): it cannot read code without its \
         shell, which cordon turns off; use claude"
    )))
}

/// Why an invocation was stopped before it finished on its own. The first one wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    Timeout,
    Cancelled,
    Shutdown,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Timeout => "deadline",
            StopReason::Cancelled => "cancelled",
            StopReason::Shutdown => "shutdown",
        })
    }
}

/// The vendor credential. It reaches the container only through the environment allowlist and
/// is never shown: not in `Debug`, labels, errors, logs or results.
#[derive(Clone)]
pub struct Credential(String);

impl Credential {
    /// A credential; refused if it could not travel as one environment value.
    pub fn new(token: String) -> Result<Credential> {
        if token.is_empty() || token.contains(['\0', '\n', '\r']) || token.len() > 4096 {
            return Err(Error::Invalid(
                "the credential is empty, too long, or has a NUL or line break".into(),
            ));
        }
        Ok(Credential(token))
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(withheld)")
    }
}

/// What a runner asks for.
#[derive(Debug, Clone)]
pub struct Request {
    pub phase: Phase,
    pub vendor: Vendor,
    /// At most 32 KiB of UTF-8, no NUL.
    pub prompt: String,
    /// `schema.json` for planning (required) or review (optional); read once, at capture.
    pub schema: Option<PathBuf>,
    /// The code the answer is about, echoed back in the result.
    pub referenced_code_hash: String,
    /// When the invocation must be over, cleanup excepted.
    pub deadline: Instant,
    /// Vendor hosts the agent may reach (egress is not built yet: a non-empty list is refused at
    /// start rather than silently dropped).
    pub network_allowlist: Vec<String>,
    /// Captured once; the result echoes it.
    pub attempt: String,
    /// The task storage the agent works in.
    pub storage: StorageHandle,
}

/// A frozen request. Only [`capture`] makes one.
#[derive(Debug, Clone)]
pub struct Capture {
    request: Request,
    schema: Option<AnswerSchema>,
}

impl Capture {
    pub fn request(&self) -> &Request {
        &self.request
    }
    /// The exact schema text the agent will be given (and the input dir will hold).
    pub fn schema_text(&self) -> Option<&str> {
        self.schema.as_ref().map(AnswerSchema::text)
    }
    /// The compiled schema every structured answer is checked against.
    pub fn schema(&self) -> Option<&AnswerSchema> {
        self.schema.as_ref()
    }
}

/// Attempt ids captured in this process (each once).
static CAPTURED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Attempt ids with an unsettled invocation in this process.
static OWNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn plain_token(what: &str, value: &str, max: usize) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} {value:?} is not a plain token of at most {max} bytes"
        )))
    }
}

fn check_host(host: &str) -> Result<()> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if host.len() > 253 || !host.contains('.') || !host.split('.').all(label_ok) {
        return Err(Error::Invalid(format!(
            "allowlist entry {host:?} is not a lowercase host name"
        )));
    }
    Ok(())
}

/// Freeze a request: every check that needs no engine, the schema read once, the attempt id
/// taken for good.
pub fn capture(request: Request) -> Result<Capture> {
    check_vendor(request.vendor, request.phase)?;
    if request.prompt.is_empty()
        || request.prompt.len() > claude::MAX_PROMPT_BYTES
        || request.prompt.contains('\0')
    {
        return Err(Error::Invalid(format!(
            "the prompt must be 1 to {} bytes without NUL ({} given)",
            claude::MAX_PROMPT_BYTES,
            request.prompt.len()
        )));
    }
    plain_token("attempt id", &request.attempt, 128)?;
    plain_token("referenced code hash", &request.referenced_code_hash, 128)?;
    if request.network_allowlist.len() > 32 {
        return Err(Error::Invalid("more than 32 allowlist entries".into()));
    }
    for host in &request.network_allowlist {
        check_host(host)?;
    }
    if request.deadline <= Instant::now() {
        return Err(Error::Deadline("the invocation's deadline".into()));
    }
    let (required, allowed) = claude::schema_rule(request.phase);
    let schema = match (&request.schema, required, allowed) {
        (None, true, _) => {
            return Err(Error::Schema(format!(
                "{} needs {SCHEMA_FILE}",
                request.phase
            )))
        }
        (Some(_), _, false) => {
            return Err(Error::Schema(format!(
                "{} answers in plain text and takes no schema",
                request.phase
            )))
        }
        // Compiled once, here: a schema that does not compile is refused before anything exists.
        (Some(path), _, true) => Some(AnswerSchema::compile(claude::read_schema(path)?)?),
        (None, false, _) => None,
    };
    let mut captured = CAPTURED
        .lock()
        .map_err(|_| Error::Invalid("capture registry poisoned".into()))?;
    if !captured.insert(request.attempt.clone()) {
        return Err(Error::AttemptCaptured(request.attempt.clone()));
    }
    Ok(Capture { request, schema })
}

/// Where the image comes from: an id already built, or the workspace to build it from as the
/// first step of setup (cancellable like every other step).
#[derive(Debug, Clone)]
pub enum ImageSource {
    Id(String),
    Build(PathBuf),
}

/// Knobs of one invocation.
#[derive(Debug, Clone)]
pub struct Options {
    pub image: ImageSource,
    /// Container limits; the deadline is replaced by what is left of the request's.
    pub limits: Limits,
    /// Bytes kept of each output stream.
    pub max_output: usize,
    /// How long a failing cleanup is retried (from its first failure).
    pub cleanup_window: Duration,
    /// The bound on the first cleanup attempt.
    pub first_cleanup: Duration,
}

impl Options {
    pub fn new(image: ImageSource) -> Options {
        Options {
            image,
            limits: Limits::default(),
            max_output: launch::MAX_OUTPUT_BYTES,
            cleanup_window: Duration::from_secs(60),
            first_cleanup: Duration::from_secs(30),
        }
    }
}

/// Where an invocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Building,
    Creating,
    Running,
    Stopping,
    Cleaning,
    Settled,
}

/// A started invocation.
#[derive(Debug, Clone)]
pub struct Handle {
    attempt: String,
    allocation: uuid::Uuid,
    stop: Arc<watch::Sender<Option<StopReason>>>,
    step: watch::Receiver<Step>,
    result: watch::Receiver<Option<Arc<InvocationResult>>>,
}

impl Handle {
    pub fn attempt(&self) -> &str {
        &self.attempt
    }
    /// The invocation's allocation id (its container and invocation volumes carry it).
    pub fn allocation(&self) -> uuid::Uuid {
        self.allocation
    }
    /// Stop it: the first reason given wins; later ones change nothing.
    pub fn stop(&self, reason: StopReason) {
        self.stop.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }
    pub fn cancel(&self) {
        self.stop(StopReason::Cancelled);
    }
    pub fn step(&self) -> Step {
        *self.step.borrow()
    }
    /// Wait until the invocation reaches `step` (or settles).
    pub async fn reached(&self, step: Step) -> Step {
        let mut rx = self.step.clone();
        let reached = match rx.wait_for(|s| *s == step || *s == Step::Settled).await {
            Ok(s) => *s,
            Err(_) => Step::Settled,
        };
        reached
    }
    /// The result, once the container is gone and cleanup has finished.
    pub async fn settled(&self) -> Arc<InvocationResult> {
        let mut rx = self.result.clone();
        loop {
            if let Some(result) = rx.borrow_and_update().clone() {
                return result;
            }
            if rx.changed().await.is_err() {
                // The supervisor always sends before it ends; this is unreachable in practice.
                if let Some(result) = rx.borrow().clone() {
                    return result;
                }
                return Arc::new(InvocationResult::lost(&self.attempt, self.allocation));
            }
        }
    }
}

/// Objects of this attempt that an earlier invocation may have left (the storage's own kinds are
/// not the invocation's).
async fn attempt_objects(engine: &Engine, owner: &Owner, attempt: &str) -> Result<Vec<String>> {
    let listed =
        crate::cleanup::Listed::with_label(engine, &format!("{ATTEMPT}={attempt}")).await?;
    let ours = |labels: &std::collections::HashMap<String, String>| {
        labels.get(crate::labels::OWNER).map(String::as_str) == Some(owner.as_str())
            && labels
                .get(crate::labels::KIND)
                .and_then(|k| Kind::parse(k))
                .is_some_and(|k| {
                    matches!(
                        k,
                        Kind::Agent | Kind::Control | Kind::Input | Kind::Egress | Kind::Loader
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

/// The gitlink masks an invocation in `phase` needs over `storage`: one read-only tmpfs at each
/// gitlink in execute and fix (read-only phases mount all of /work read-only). Refused, before
/// anything is allocated: unknown gitlinks (a recovered handle), more than the limit, a name no
/// mount can carry, and a nested gitlink: renaming one of its parents would move the mask aside,
/// and pinning the parents needs `VolumeOptions.Subpath` (API 1.45), which this engine lacks.
pub fn gitlink_masks(phase: Phase, storage: &StorageHandle) -> Result<Vec<String>> {
    if !phase.work_writable() {
        return Ok(Vec::new());
    }
    let Some(gitlinks) = &storage.gitlinks else {
        return Err(Error::Gitlink {
            id: "gitlinks-unknown",
            reason: format!(
                "the storage handle of allocation {} does not record the tree's gitlinks (a \
                 recovered handle, or a gitlink whose name is not UTF-8): {phase} cannot mask them",
                storage.allocation
            ),
        });
    };
    if gitlinks.len() > crate::profile::MAX_GITLINKS {
        return Err(Error::Gitlink {
            id: "gitlink-limit",
            reason: format!(
                "{} gitlinks; at most {} can be masked",
                gitlinks.len(),
                crate::profile::MAX_GITLINKS
            ),
        });
    }
    if let Some(bad) = gitlinks.iter().find(|g| !crate::profile::mountable(g)) {
        return Err(Error::Gitlink {
            id: "gitlink-name",
            reason: format!("the gitlink {bad:?} cannot be a mount target"),
        });
    }
    if let Some(nested) = gitlinks.iter().find(|g| g.contains('/')) {
        return Err(Error::Gitlink {
            id: "gitlink-nested",
            reason: format!(
                "the gitlink {nested:?} is nested: renaming a directory above it would move its \
                 mask aside, and pinning those directories needs VolumeOptions.Subpath (API \
                 {}), which this engine does not have; {phase} is refused until it does",
                crate::engine::SUBPATH_API
            ),
        });
    }
    Ok(gitlinks.clone())
}

/// The profile of an invocation over its storage.
fn profile(
    capture: &Capture,
    allocation: &Allocation,
    image_id: &str,
    credential: Option<&Credential>,
    options: &Options,
) -> Result<Profile> {
    let request = &capture.request;
    let storage = request.storage.storage()?;
    // The host stops the run at the request's deadline with a typed reason; the init's own
    // deadline is a backstop for a controller that died, so it comes later.
    let left = request.deadline.saturating_duration_since(Instant::now());
    let mut limits = options.limits.clone();
    limits.deadline = left + limits.grace + Duration::from_secs(10);
    let input_files = capture
        .schema_text()
        .map(|s| vec![(SCHEMA_FILE.to_owned(), s.as_bytes().to_vec())])
        .unwrap_or_default();
    let env = credential
        .map(|c| vec![("CLAUDE_CODE_OAUTH_TOKEN".to_owned(), c.0.clone())])
        .unwrap_or_default();
    Profile::new(ProfileSpec {
        phase: request.phase,
        vendor: request.vendor,
        image_id: image_id.to_owned(),
        allocation: allocation.clone(),
        limits,
        storage: storage.mounts_for(allocation),
        command: claude::command(request.phase, &request.prompt, capture.schema_text()),
        exec: vec![paths::CLAUDE_CLI.to_owned()],
        env,
        gitlinks: gitlink_masks(request.phase, &request.storage)?,
        pins: vec![],
        landlock_abi: crate::profile::DEFAULT_LANDLOCK_ABI,
        input_files,
    })
}

/// An image id that stands in while the real one is being built (the profile is checked once
/// before anything is allocated).
const PROVISIONAL_IMAGE: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// Start an invocation. Fails only when it allocated nothing: invalid input, an expired
/// deadline, an attempt id still owned, a refused vendor, a refused network allowlist.
pub async fn start(
    engine: &Engine,
    capture: Capture,
    credential: Option<Credential>,
    options: Options,
) -> Result<Handle> {
    let request = &capture.request;
    check_vendor(request.vendor, request.phase)?;
    if request.deadline <= Instant::now() {
        return Err(Error::Deadline("the invocation's deadline".into()));
    }
    if !request.network_allowlist.is_empty() {
        return Err(Error::Invalid(format!(
            "a network allowlist ({} hosts) needs the egress proxy, which is not built yet: the \
             container would have no network at all",
            request.network_allowlist.len()
        )));
    }
    let owner = Owner::new(&request.storage.owner)?;
    // The invocation runs as its storage's uid: the work tree is that uid's.
    let mut allocation = Allocation::new(&owner, &request.attempt, request.storage.uid)?;
    allocation.id = uuid::Uuid::new_v4();
    let image_id = match &options.image {
        ImageSource::Id(id) => id.clone(),
        ImageSource::Build(_) => PROVISIONAL_IMAGE.to_owned(),
    };
    // Checked now so that invalid input throws; rebuilt with the real image id after a build.
    let checked = profile(
        &capture,
        &allocation,
        &image_id,
        credential.as_ref(),
        &options,
    )?;
    {
        let owned = OWNED
            .lock()
            .map_err(|_| Error::Invalid("attempt registry poisoned".into()))?;
        if owned.contains(&request.attempt) {
            return Err(Error::AttemptOwned(
                request.attempt.clone(),
                "an unsettled invocation in this process".into(),
            ));
        }
    }
    let left = attempt_objects(engine, &owner, &request.attempt).await?;
    if !left.is_empty() {
        return Err(Error::AttemptOwned(
            request.attempt.clone(),
            crate::error::bounded_list(&left, 400),
        ));
    }
    {
        let mut owned = OWNED
            .lock()
            .map_err(|_| Error::Invalid("attempt registry poisoned".into()))?;
        if !owned.insert(request.attempt.clone()) {
            return Err(Error::AttemptOwned(
                request.attempt.clone(),
                "an unsettled invocation in this process".into(),
            ));
        }
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
        engine: engine.clone(),
        capture,
        credential,
        options,
        allocation,
        profile: checked,
        stop: stop_rx,
        step: step_tx,
    };
    tokio::spawn(async move {
        let attempt = supervisor.capture.request.attempt.clone();
        let result = supervisor.run().await;
        if let Ok(mut owned) = OWNED.lock() {
            owned.remove(&attempt);
        }
        let _ = result_tx.send(Some(Arc::new(result)));
    });
    Ok(handle)
}

/// Everything one invocation's background task needs.
struct Supervisor {
    engine: Engine,
    capture: Capture,
    credential: Option<Credential>,
    options: Options,
    allocation: Allocation,
    profile: Profile,
    stop: watch::Receiver<Option<StopReason>>,
    step: watch::Sender<Step>,
}

/// What the run phase produced.
struct Ran {
    exit_code: Option<i64>,
    output: Option<launch::Output>,
    policy_digest: String,
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
        };

        // Setup: build (when asked), create, read back and validate, attach, start.
        let setup = async {
            let profile = match &self.options.image {
                ImageSource::Id(_) => self.profile.clone(),
                ImageSource::Build(workspace) => {
                    let _ = self.step.send(Step::Building);
                    let built = crate::image::build_test_image(&self.engine, workspace).await?;
                    profile(
                        &self.capture,
                        &self.allocation,
                        &built.id,
                        self.credential.as_ref(),
                        &self.options,
                    )?
                }
            };
            let _ = self.step.send(Step::Creating);
            let mut prepared = Prepared::new(&self.engine, &profile)?;
            prepared.max_output = self.options.max_output;
            let mut launch =
                launch::create_into(&self.engine, &profile, prepared, &mut created).await?;
            if !launch.refusals.is_empty() {
                return Err(Error::Refused(std::mem::take(&mut launch.refusals)));
            }
            launch.start(&self.engine).await?;
            Ok::<_, Error>((launch, profile))
        };
        let stopped = Self::stopped(self.stop.clone(), deadline);
        let setup_result = tokio::select! {
            result = setup => Some(result),
            reason = stopped => {
                stop_reason = Some(reason);
                None
            }
        };
        timings.setup_ms = started.elapsed().as_secs_f64() * 1000.0;

        match setup_result {
            Some(Ok((mut launch, profile))) => {
                let _ = self.step.send(Step::Running);
                ran.policy_digest = launch.policy_digest.clone();
                let run_started = Instant::now();
                let limit =
                    profile.limits().deadline + profile.limits().grace + Duration::from_secs(30);
                let engine = self.engine.clone();
                let waited = {
                    let wait = launch.wait(&engine, limit);
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
                        // Ask the init to stop everything; it kills what ignores TERM after its
                        // grace. Then make sure, and wait for the exit.
                        let _ = self.step.send(Step::Stopping);
                        let _ = launch.kill(&engine, "TERM").await;
                        let grace = profile.limits().grace + Duration::from_secs(5);
                        match launch.wait(&engine, grace).await {
                            Ok(code) => Ok(code),
                            Err(_) => launch.wait(&engine, Duration::from_secs(20)).await,
                        }
                    }
                };
                match code {
                    Ok(code) => ran.exit_code = Some(code),
                    Err(e) => setup_error = Some(e),
                }
                match launch.output(&engine).await {
                    Ok(output) => ran.output = Some(output),
                    Err(e) => {
                        setup_error.get_or_insert(e);
                    }
                }
                timings.run_ms = run_started.elapsed().as_secs_f64() * 1000.0;
            }
            Some(Err(e)) => setup_error = Some(e),
            None => {}
        }
        let _ = self.step.send(Step::Cleaning);
        let cleanup_started = Instant::now();
        let unreleased = self.clean(&created).await;
        timings.cleanup_ms = cleanup_started.elapsed().as_secs_f64() * 1000.0;
        if !unreleased.is_empty() {
            launch::retire(&self.allocation.id);
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
        })
    }

    /// Remove what the invocation made (or may have made). A failed first attempt opens the retry
    /// window: every second, each retry bounded by what is left of it. Returns what is left.
    async fn clean(&mut self, created: &Created) -> Vec<Leftover> {
        let first = tokio::time::timeout(
            self.options.first_cleanup,
            created.remove_once(&self.engine),
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
            if let Ok(next) = tokio::time::timeout(remaining, left.remove_once(&self.engine)).await
            {
                left = next;
            }
        }
        left.leftovers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage() -> StorageHandle {
        StorageHandle {
            owner: "t-unit".into(),
            attempt: "x".into(),
            allocation: uuid::Uuid::new_v4(),
            work_volume: "w".into(),
            metadata_volume: "m".into(),
            keeper: "k".into(),
            work: crate::storage::DEFAULT_WORK,
            metadata: crate::storage::DEFAULT_METADATA,
            uid: crate::uids::Uid::new(1_500_000).unwrap(),
            head: None,
            gitlinks: Some(vec![]),
            metadata_baseline: None,
        }
    }

    /// Capture a planning request whose schema.json holds `text`.
    fn capture_schema(text: &str) -> Result<Capture> {
        let dir =
            std::env::temp_dir().join(format!("cordon-unit-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("schema.json");
        std::fs::write(&path, text).expect("schema file");
        let captured = capture(Request {
            phase: Phase::Planning,
            vendor: Vendor::Claude,
            prompt: "plan".into(),
            schema: Some(path),
            referenced_code_hash: "code".into(),
            deadline: Instant::now() + Duration::from_secs(60),
            network_allowlist: vec![],
            attempt: format!("u-{}", uuid::Uuid::new_v4().simple()),
            storage: storage(),
        });
        let _ = std::fs::remove_dir_all(&dir);
        captured
    }

    #[test]
    fn capture_refuses_a_schema_that_does_not_compile_or_reaches_outside() {
        let good = r##"{"type":"object","definitions":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/definitions/n"},"id":{"pattern":"^[a-z]+$"}}}"##;
        let captured = capture_schema(good).expect("a local $ref and a linear pattern compile");
        assert_eq!(captured.schema_text(), Some(good));
        let refused = [
            // External references: never fetched, never read.
            r#"{"type":"object","properties":{"a":{"$ref":"http://127.0.0.1:9/s.json"}}}"#,
            r#"{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json#/x"}}}"#,
            r#"{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}"#,
            r#"{"type":"object","properties":{"a":{"$ref":"other.json"}}}"#,
            r#"{"$id":"http://127.0.0.1:9/root.json","type":"object","properties":{"a":{"$ref":"b.json"}}}"#,
            // A dangling local reference.
            r##"{"type":"object","properties":{"a":{"$ref":"#/definitions/missing"}}}"##,
            // Not a valid schema.
            r#"{"type":"object","required":5}"#,
            r#"{"type":"object","properties":{"a":{"type":"strin"}}}"#,
            r#"{"type":"object","properties":{"a":{"minimum":"1"}}}"#,
            // Patterns only a backtracking engine runs.
            r#"{"type":"object","properties":{"a":{"pattern":"^(a)\\1$"}}}"#,
            r#"{"type":"object","properties":{"a":{"pattern":"^(?=a)a+$"}}}"#,
            r#"{"type":"object","patternProperties":{"^(?!x)":{}}}"#,
            // An unknown meta-schema (it would have to be fetched).
            r#"{"$schema":"http://127.0.0.1:9/meta.json","type":"object"}"#,
        ];
        for text in refused {
            match capture_schema(text) {
                Err(e) => assert_eq!(e.id(), "schema-invalid", "{text}: {e}"),
                Ok(_) => panic!("captured {text}"),
            }
        }
    }
}
