//! Shared set-up for the real-Docker suite (`tests/all.rs`).
//!
//! Nothing here skips: if the engine is unreachable, every test fails with the reason. Each test
//! that makes anything in the engine first takes an [`Owned`] guard (its own owner token) and ends
//! with [`Owned::finish`], which fails if any container or volume with that owner's label survives
//! ([`assert_clean`]) or a staging directory of the owner does; a test that panics midway leaves
//! nothing either, since the guard's `Drop` removes it all.

// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used)] // test set-up: a panic names the failing call, which is the report

use std::collections::BTreeSet;
use std::time::Duration;

use cordon::engine::{objects, pending};
use cordon::labels::{Allocation, ObjectName, Owner, ALLOCATION, OWNER};
use cordon::launch::{self, Launch, Output, Prepared};
use cordon::profile::{Limits, Profile, ProfileSpec, DEFAULT_LANDLOCK_ABI};
use cordon::storage::{self, TaskStorage};
use cordon::{image, Controller, Engine};
use cordon_contract::{paths, Phase, Vendor};
use tokio::sync::{Mutex, MutexGuard, OnceCell, RwLock, RwLockWriteGuard};

static IMAGE: OnceCell<String> = OnceCell::const_new();
static AGENT_IMAGE: OnceCell<image::agent::AgentImage> = OnceCell::const_new();
static SERIAL: Mutex<()> = Mutex::const_new(());
/// Held (for writing) by a test that makes an unlabelled cordon-named volume on purpose, and (for
/// reading) by every leftover check, which would otherwise count that volume as a leak.
static UNLABELLED: RwLock<()> = RwLock::const_new(());

/// While the guard lives, no leftover check looks for unlabelled cordon volumes.
pub async fn making_unlabelled_volumes() -> RwLockWriteGuard<'static, ()> {
    UNLABELLED.write().await
}

/// The serial group: tests that load the whole engine (the full gate, the 1,000-child burst)
/// take this so they do not distort each other.
pub async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// The first failure to reach the engine in this run: once the engine stopped answering, every
/// later test fails at once with it instead of waiting out its own timeout (a wedged engine would
/// otherwise cost each remaining test two minutes).
static ENGINE_LOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A connected controller. Fails loudly when Docker is unreachable: these tests are never skipped.
pub async fn controller() -> Controller {
    if let Some(first) = ENGINE_LOST.get() {
        panic!("the Docker engine stopped answering earlier in this run: {first}");
    }
    match Controller::connect().await {
        Ok(ctl) => ctl,
        Err(e) => {
            let _ = ENGINE_LOST.set(e.to_string());
            panic!("the real-Docker suite needs a reachable Docker engine: {e}")
        }
    }
}

/// A connected engine (a controller's, for tests that need no controller state).
pub async fn engine() -> Engine {
    controller().await.engine().clone()
}

/// The test image id, built once per test process from this workspace.
pub async fn image(engine: &Engine) -> String {
    IMAGE
        .get_or_init(|| async {
            let built = image::build_test_image(engine, &image::default_workspace())
                .await
                .unwrap_or_else(|e| panic!("building the test image: {e}"));
            built.id
        })
        .await
        .clone()
}

/// The production agent image, built once per test process: the pinned Claude Code CLI (fetched
/// with pip into `target/claude-cli` and verified by its sha256; a missing or mismatching download
/// fails every test that needs it, nothing is skipped) and this workspace's static binaries.
pub async fn agent_image(engine: &Engine) -> image::agent::AgentImage {
    AGENT_IMAGE
        .get_or_init(|| async {
            let cache = image::pinned::default_cache(&image::default_workspace());
            let cli = image::pinned::fetch(&image::pinned::CLAUDE_CLI, &cache, &|_| {})
                .await
                .unwrap_or_else(|e| panic!("fetching the pinned Claude Code CLI: {e}"));
            let spec = image::agent::AgentImageSpec::new(
                cli,
                image::BinarySource::Workspace(image::default_workspace()),
            );
            image::agent::build_agent_image(engine, &spec, &|_| {})
                .await
                .unwrap_or_else(|e| panic!("building the agent image: {e}"))
        })
        .await
        .clone()
}

/// The engine's events matching `filters` from `since` until now (what it still keeps: its last
/// 256), each one checked to have come through.
pub async fn engine_events(
    engine: &Engine,
    since: std::time::SystemTime,
    filters: std::collections::HashMap<String, Vec<String>>,
) -> Vec<bollard::models::EventMessage> {
    use futures_util::StreamExt;
    let secs = |t: std::time::SystemTime| {
        let d = t.duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
    };
    let options = bollard::query_parameters::EventsOptions {
        since: Some(secs(since)),
        until: Some(secs(std::time::SystemTime::now())),
        filters: Some(filters),
    };
    let events: Vec<_> = engine.docker().events(Some(options)).collect().await;
    events.into_iter().map(|e| e.expect("an event")).collect()
}

/// Fail if anything with this owner's label is left, or any cordon-named volume without labels
/// (the engine makes a missing named volume for a create that outlived it: such a volume carries
/// no owner, so only its name shows it); remove what it finds so one failure does not leak.
pub async fn assert_clean(engine: &Engine, owner: &Owner) {
    let objects::Owned {
        containers,
        volumes,
        networks,
    } = objects::list_owned(engine, owner)
        .await
        .expect("listing objects by owner");
    let unlabelled = {
        let _none_on_purpose = UNLABELLED.read().await;
        objects::unlabelled_cordon_volumes(engine)
            .await
            .expect("listing volumes by name")
    };
    if !containers.is_empty()
        || !volumes.is_empty()
        || !networks.is_empty()
        || !unlabelled.is_empty()
    {
        let _ = pending::remove_owned(engine, owner).await;
        let _ = pending::Created {
            volumes: unlabelled.clone(),
            ..Default::default()
        }
        .remove_all(engine, Duration::from_secs(10))
        .await;
        panic!(
            "left behind for owner {}: containers {containers:?}, volumes {volumes:?}, \
             networks {networks:?}; unlabelled cordon volumes {unlabelled:?}",
            owner.as_str()
        );
    }
}

/// Fail unless what `owner` has is exactly one task storage: its keeper and its two volumes, no
/// network (a step that failed or was stopped left nothing of its own).
pub async fn assert_only_storage(engine: &Engine, owner: &Owner, what: &str) {
    assert_only_storages(engine, owner, 1, what).await;
}

/// Only `n` task storages (a keeper and two volumes each) of `owner` exist.
pub async fn assert_only_storages(engine: &Engine, owner: &Owner, n: usize, what: &str) {
    let owned = objects::list_owned(engine, owner)
        .await
        .expect("listing objects by owner");
    assert!(
        owned.containers.len() == n && owned.volumes.len() == 2 * n && owned.networks.is_empty(),
        "{what}: only the storage may be left: {:?}",
        owned.described()
    );
}

/// Task storage for one test (its uid picked like any allocation's).
pub async fn task_storage(engine: &Engine, owner: &Owner, image_id: &str) -> TaskStorage {
    let allocation = cordon::storage::new_allocation(engine, owner, "test")
        .await
        .expect("allocation");
    TaskStorage::create(
        engine,
        &allocation,
        image_id,
        storage::DEFAULT_WORK,
        storage::DEFAULT_METADATA,
    )
    .await
    .expect("task storage")
}

/// What every test that makes anything in the engine holds first: a controller (and its engine),
/// the test image and one owner token. Its [`Owned::finish`] asserts that nothing of the owner is
/// left; dropped without it (the test panicked midway), it removes everything with the owner's
/// label, the unlabelled cordon volumes of the owner's allocations, and the owner's staging
/// directories, and lets the panic go on as it was. A test with two owners holds one per owner
/// ([`Owned::other`]).
#[derive(Debug)]
pub struct Owned {
    pub ctl: Controller,
    pub engine: Engine,
    pub image: String,
    pub owner: Owner,
    /// Held while the test makes unlabelled cordon volumes on purpose.
    unlabelled: Option<RwLockWriteGuard<'static, ()>>,
    finished: bool,
}

/// A guard with a fresh controller, the test image, and an owner token that starts with `prefix`.
pub async fn owned(prefix: &str) -> Owned {
    let ctl = controller().await;
    let image = image(ctl.engine()).await;
    Owned::new(ctl, image, Owner::random(prefix))
}

impl Owned {
    /// A guard for `owner` over this controller.
    pub fn new(ctl: Controller, image: String, owner: Owner) -> Owned {
        Owned {
            engine: ctl.engine().clone(),
            // The test image is every helper's.
            ctl: ctl.with_helper_image(&image),
            image,
            owner,
            unlabelled: None,
            finished: false,
        }
    }

    /// A guard for another owner (its token starts with `prefix`) over the same controller.
    pub fn other(&self, prefix: &str) -> Owned {
        Owned::new(self.ctl.clone(), self.image.clone(), Owner::random(prefix))
    }

    /// The test makes an unlabelled cordon volume (of one of the owner's allocations) on purpose:
    /// no leftover check counts such volumes until [`Owned::made_unlabelled_volumes`], or until
    /// this guard ends; if the test panics first, that is after the drop removed the volume, so
    /// no other test's check sees it.
    pub async fn making_unlabelled_volumes(&mut self) {
        if self.unlabelled.is_none() {
            self.unlabelled = Some(making_unlabelled_volumes().await);
        }
    }

    /// The unlabelled volumes made on purpose are gone: leftover checks count them again.
    pub fn made_unlabelled_volumes(&mut self) {
        self.unlabelled = None;
    }

    /// Fail if anything of the owner is left, in the engine ([`assert_clean`]) or on the host
    /// ([`assert_no_staging`]); the test goes on (a test that checks between its steps).
    pub async fn assert_clean(&self) {
        assert!(
            self.unlabelled.is_none(),
            "a leftover check while making unlabelled volumes would wait on itself"
        );
        assert_clean(&self.engine, &self.owner).await;
        assert_no_staging(&self.owner);
    }

    /// The test's last step: [`Owned::assert_clean`], then the guard is done.
    pub async fn finish(mut self) {
        // Set first: if the check fails, the drop (now unwinding) still removes what is left.
        self.finished = true;
        self.made_unlabelled_volumes();
        self.assert_clean().await;
    }
}

impl Drop for Owned {
    /// Unwinding (the test failed, or the check in `finish` did): remove what the owner left and
    /// say what that was, never panicking again (the test's own panic is what it reports).
    /// Dropped without `finish` and not unwinding, it removes the same and then fails the test:
    /// its final check never ran. Unlabelled volumes made on purpose stay uncounted until the
    /// sweep is over (the lock is a field, dropped after this).
    fn drop(&mut self) {
        let unwinding = std::thread::panicking();
        if self.finished && !unwinding {
            return;
        }
        let swept = sweep_blocking(self.owner.clone());
        if unwinding {
            if !swept.is_empty() {
                eprintln!(
                    "after the panic, removed what owner {} left: {}",
                    self.owner.as_str(),
                    swept.join("; ")
                );
            }
            return;
        }
        panic!(
            "the guard of owner {} was dropped without finish(); removed: {swept:?}",
            self.owner.as_str()
        );
    }
}

/// [`sweep`] from a thread with its own runtime and its own engine connection: the test's runtime
/// may be unwinding (and a current-thread runtime cannot be blocked on from inside), and its engine
/// may have removal failures injected. Never panics; what it could not do is in what it returns.
fn sweep_blocking(owner: Owner) -> Vec<String> {
    let thread = std::thread::Builder::new()
        .name(format!("sweep-{}", owner.as_str()))
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(sweep(&owner)),
                Err(e) => vec![format!("not swept: no runtime: {e}")],
            }
        });
    match thread {
        Ok(thread) => thread
            .join()
            .unwrap_or_else(|_| vec!["not swept: the sweep panicked".to_owned()]),
        Err(e) => vec![format!("not swept: no thread: {e}")],
    }
}

/// Remove everything `owner` may have left: containers, volumes and networks with its label (in
/// two passes a second apart, for a create the test had in flight when it panicked), then the
/// unlabelled cordon volumes named for one of the allocations those carried (what the engine makes
/// for a create that names a missing volume), then its staging directories. Returns what it
/// removed and what it could not.
async fn sweep(owner: &Owner) -> Vec<String> {
    let mut report = Vec::new();
    let engine = match Engine::connect().await {
        Ok(engine) => engine,
        Err(e) => return vec![format!("not swept: no engine: {e}")],
    };
    let mut allocations = BTreeSet::new();
    for pass in 0..2 {
        if pass > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let label = format!("{OWNER}={}", owner.as_str());
        let listed = match objects::Listed::with_label(&engine, &label).await {
            Ok(listed) => listed.labelled(),
            Err(e) => {
                report.push(format!("listing: {e}"));
                continue;
            }
        };
        for object in &listed {
            let named = ObjectName::parse(&object.id).map(|n| n.allocation);
            let labelled = object.labels.get(ALLOCATION).and_then(|a| a.parse().ok());
            allocations.extend(named.into_iter().chain(labelled));
        }
        if listed.is_empty() {
            continue;
        }
        report.extend(listed.iter().map(objects::Labelled::what));
        if let Err(e) = pending::remove_owned(&engine, owner).await {
            report.push(format!("removing: {e}"));
        }
        for network in listed
            .iter()
            .filter(|o| o.kind == pending::ObjectKind::Network)
        {
            if let Err(e) = objects::remove_network(&engine, &network.id).await {
                report.push(format!("removing network {}: {e}", network.id));
            }
        }
    }
    if !allocations.is_empty() {
        match objects::unlabelled_cordon_volumes(&engine).await {
            Ok(volumes) => {
                for volume in volumes.iter().filter(|v| {
                    ObjectName::parse(v).is_some_and(|n| allocations.contains(&n.allocation))
                }) {
                    match objects::remove_volume(&engine, volume).await {
                        Ok(()) => report.push(format!("unlabelled volume {volume}")),
                        Err(e) => report.push(format!("removing unlabelled volume {volume}: {e}")),
                    }
                }
            }
            Err(e) => report.push(format!("listing unlabelled volumes: {e}")),
        }
    }
    for dir in staging_dirs(owner) {
        let removed = if dir.is_dir() {
            std::fs::remove_dir_all(&dir)
        } else {
            std::fs::remove_file(&dir)
        };
        match removed {
            Ok(()) => report.push(format!("staging {}", dir.display())),
            Err(e) => report.push(format!("removing staging {}: {e}", dir.display())),
        }
    }
    report
}

/// The staging directories of `owner` on the host.
fn staging_dirs(owner: &Owner) -> Vec<std::path::PathBuf> {
    let prefix = cordon::repo::clone::staging_prefix(owner.as_str());
    cordon::repo::clone::staging_roots()
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flat_map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One test's guard (its controller, engine, image and owner: reached through it, as `f.ctl`) and
/// its task storage.
#[derive(Debug)]
pub struct Fixture {
    pub owned: Owned,
    pub storage: TaskStorage,
}

impl std::ops::Deref for Fixture {
    type Target = Owned;

    fn deref(&self) -> &Owned {
        &self.owned
    }
}

impl std::ops::DerefMut for Fixture {
    fn deref_mut(&mut self) -> &mut Owned {
        &mut self.owned
    }
}

/// Set up a fixture whose owner token starts with `prefix`.
pub async fn fixture(prefix: &str) -> Fixture {
    let owned = owned(prefix).await;
    let storage = task_storage(&owned.engine, &owned.owner, &owned.image).await;
    Fixture { owned, storage }
}

impl Fixture {
    /// A profile over this fixture's storage.
    pub fn profile(&self, run: &Run) -> Profile {
        profile(&self.owner, &self.image, &self.storage, run)
    }

    /// Remove the storage and fail if anything of the owner is left ([`Owned::finish`]).
    pub async fn finish(self) {
        self.storage
            .remove(&self.engine)
            .await
            .expect("removing task storage");
        self.owned.finish().await;
    }
}

/// What a test profile runs.
#[derive(Debug, Clone)]
pub struct Run {
    pub phase: Phase,
    pub vendor: Vendor,
    pub command: Vec<String>,
    pub exec: Vec<String>,
    pub limits: Limits,
}

impl Run {
    /// The fake vendor CLI with `args`.
    pub fn vendor(phase: Phase, args: &[&str]) -> Run {
        let cli = Vendor::Claude.cli_path().to_owned();
        let mut command = vec![cli.clone()];
        command.extend(args.iter().map(|a| (*a).to_owned()));
        Run {
            phase,
            vendor: Vendor::Claude,
            command,
            exec: vec![cli],
            limits: test_limits(),
        }
    }

    /// A `cordon-probe workload ...` command.
    pub fn workload(args: &[&str]) -> Run {
        let mut command = vec![paths::PROBE.to_owned(), "workload".to_owned()];
        command.extend(args.iter().map(|a| (*a).to_owned()));
        Run {
            phase: Phase::Execute,
            vendor: Vendor::Claude,
            command,
            exec: vec![paths::PROBE.to_owned()],
            limits: test_limits(),
        }
    }
}

/// Small, fast limits for tests.
pub fn test_limits() -> Limits {
    Limits {
        pids: 128,
        memory_bytes: 256 * 1024 * 1024,
        deadline: Duration::from_secs(60),
        grace: Duration::from_secs(1),
        ..Limits::default()
    }
}

/// A profile over `storage`, as its uid.
pub fn profile(owner: &Owner, image_id: &str, storage: &TaskStorage, run: &Run) -> Profile {
    let allocation = Allocation::new(owner, "test", storage.allocation.uid).expect("allocation");
    profile_of(allocation, image_id, storage, run)
}

/// A profile of `allocation` over `storage` (over a shared snapshot, its uid is its own).
pub fn profile_of(
    allocation: Allocation,
    image_id: &str,
    storage: &TaskStorage,
    run: &Run,
) -> Profile {
    Profile::new(ProfileSpec {
        phase: run.phase,
        vendor: run.vendor,
        image_id: image_id.to_owned(),
        storage: storage.mounts_for(&allocation),
        allocation,
        limits: run.limits.clone(),
        command: run.command.clone(),
        exec: run.exec.clone(),
        env: vec![],
        gitlinks: vec![],
        pins: vec![],
        pin_mounts: false,
        input_files: vec![],
        landlock_abi: DEFAULT_LANDLOCK_ABI,
        egress: None,
    })
    .expect("profile")
}

/// A finished container: exit code, output, and the init's lines.
#[derive(Debug)]
pub struct Finished {
    pub code: i64,
    pub output: Output,
    pub verdict: launch::InitVerdict,
}

impl Finished {
    /// The init's `exit` line, if it wrote one.
    pub fn exit_line(&self) -> Option<cordon_contract::InitLine> {
        self.output
            .stderr
            .lines()
            .filter_map(cordon_contract::InitLine::parse)
            .find(|l| matches!(l, cordon_contract::InitLine::Exit { .. }))
    }
}

/// Create, start (the validator's verdict is checked by the caller), optionally act on the running
/// container, wait, collect, remove.
pub async fn launch_with<F, Fut>(
    ctl: &Controller,
    profile: &Profile,
    prepared: Prepared,
    while_running: F,
) -> (Vec<cordon::Refusal>, Finished)
where
    F: FnOnce(&Launch) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let engine = ctl.engine();
    let mut launch = launch::create(ctl, profile, prepared)
        .await
        .expect("create");
    let refusals = launch.refusals.clone();
    let result = async {
        launch.start(engine).await?;
        while_running(&launch).await;
        let code = launch.wait(engine, Duration::from_secs(90)).await?;
        let output = launch.output(engine).await?;
        Ok::<_, cordon::Error>((code, output))
    }
    .await;
    let outcome = result.map(|(code, output)| {
        let verdict = launch.verdict(&output);
        (code, output, verdict)
    });
    launch.finish(engine).await.expect("cleanup");
    let (code, output, verdict) = outcome.expect("run");
    (
        refusals,
        Finished {
            code,
            output,
            verdict,
        },
    )
}

/// Run a profile that must pass the validator; return how it ended.
pub async fn launch_valid(ctl: &Controller, profile: &Profile) -> Finished {
    let prepared = Prepared::new(ctl.engine(), profile).expect("plan");
    let (refusals, finished) = launch_with(ctl, profile, prepared, |_| async {}).await;
    assert!(
        refusals.is_empty(),
        "validator refused a valid profile: {refusals:?}"
    );
    finished
}

/// A git repository the test builds in a temporary directory (removed on drop).
#[derive(Debug)]
pub struct Repo {
    pub dir: std::path::PathBuf,
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Repo {
    pub fn new(name: &str) -> Repo {
        let dir = std::env::temp_dir().join(format!(
            "cordon-test-repo-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("repo dir");
        let repo = Repo { dir };
        repo.git(&["init", "--quiet", "--initial-branch=main"]);
        repo
    }

    /// git in this (our own) repository, with no user or system config.
    pub fn git(&self, args: &[&str]) -> String {
        self.git_input(args, None)
    }

    pub fn git_input(&self, args: &[&str], input: Option<&[u8]>) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("git")
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.org")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.org")
            .args(["-c", "core.hooksPath=/dev/null"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("git");
        if let Some(input) = input {
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input)
                .expect("git stdin");
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn write(&self, path: &str, content: &[u8], mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let full = self.dir.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(&full, content).unwrap();
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    pub fn symlink(&self, path: &str, target: &str) {
        let full = self.dir.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, full).unwrap();
    }

    /// Commit everything; the new head's id.
    pub fn commit(&self) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "--quiet", "--allow-empty", "-m", "test"]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// A commit whose root tree has exactly these entries (mode, name, blob content), made with
    /// plumbing so that names `git add` would refuse can be built.
    pub fn commit_tree(&self, entries: &[(&str, &str, &[u8])]) -> String {
        let mut listing = String::new();
        for (mode, name, content) in entries {
            let oid = self.git_input(&["hash-object", "-w", "--stdin"], Some(content));
            listing.push_str(&format!("{mode} blob {oid}\t{name}\n"));
        }
        let tree = self.git_input(&["mktree"], Some(listing.as_bytes()));
        let commit = self.git(&["commit-tree", &tree, "-m", "crafted"]);
        self.git(&["update-ref", "refs/heads/main", &commit]);
        commit
    }
}

/// A prepare request for `repo` at `head` in the fixture's owner.
pub fn prepare_request(owner: &Owner, repo: &Repo, head: &str) -> cordon::task::PrepareRequest {
    cordon::task::PrepareRequest {
        repo: repo.dir.clone(),
        head: head.to_owned(),
        owner: owner.clone(),
        attempt: "test".to_owned(),
        allocation: None,
        work: cordon::storage::DEFAULT_WORK,
        deadline: Duration::from_secs(120),
        uids: cordon::uids::UidRange::default(),
        shared: false,
    }
}

/// No staging directory of `owner` is left on the host.
pub fn assert_no_staging(owner: &Owner) {
    let left = staging_dirs(owner);
    assert!(left.is_empty(), "staging directories left: {left:?}");
}

/// The tree check a request in `phase` over `storage` needs: one made now at the storage's head
/// for execute and fix (it must pass), none for a read-only phase.
pub async fn tree_check_for(
    ctl: &Controller,
    image_id: &str,
    storage: &cordon::task::StorageHandle,
    phase: cordon_contract::Phase,
) -> Option<cordon::audit::TreeCheck> {
    if !phase.work_writable() {
        return None;
    }
    let check = ctl
        .clone()
        .with_helper_image(image_id)
        .task(storage)
        .expect("a task")
        .check_tree(&[], cordon::audit::DEFAULT_DEADLINE)
        .await
        .expect("the tree check of a freshly seeded tree passes");
    Some(check)
}

/// `handle` with `base` as its head: what a task's verbs then check against (a recovered handle
/// gets its head so; another base is what the check and the inspection refuse).
pub fn at_base(handle: &cordon::task::StorageHandle, base: &str) -> cordon::task::StorageHandle {
    let mut at = handle.clone();
    at.head = Some(base.to_owned());
    at
}
