//! Shared set-up for the real-Docker suite (`tests/all.rs`).
//!
//! Nothing here skips: if the engine is unreachable, every test fails with the reason. Each test
//! uses its own owner token and ends with [`assert_clean`], which fails if any container or volume
//! with that owner's label survives.

#![allow(clippy::unwrap_used)] // test set-up: a panic names the failing call, which is the report

use std::time::Duration;

use cordon::labels::{Allocation, Owner};
use cordon::launch::{self, Launch, Output, Prepared};
use cordon::profile::{Limits, Profile, ProfileSpec, DEFAULT_LANDLOCK_ABI};
use cordon::storage::{self, TaskStorage};
use cordon::{cleanup, image, Engine};
use cordon_contract::{paths, Phase, Vendor};
use tokio::sync::{Mutex, MutexGuard, OnceCell, RwLock, RwLockWriteGuard};

static IMAGE: OnceCell<String> = OnceCell::const_new();
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

/// A connected engine. Fails loudly when Docker is unreachable: these tests are never skipped.
pub async fn engine() -> Engine {
    match Engine::connect().await {
        Ok(engine) => engine,
        Err(e) => panic!("the real-Docker suite needs a reachable Docker engine: {e}"),
    }
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

/// Fail if anything with this owner's label is left, or any cordon-named volume without labels
/// (the engine makes a missing named volume for a create that outlived it: such a volume carries
/// no owner, so only its name shows it); remove what it finds so one failure does not leak.
pub async fn assert_clean(engine: &Engine, owner: &Owner) {
    let (containers, volumes) = cleanup::list_owned(engine, owner)
        .await
        .expect("listing objects by owner");
    let unlabelled = {
        let _none_on_purpose = UNLABELLED.read().await;
        cleanup::unlabelled_cordon_volumes(engine)
            .await
            .expect("listing volumes by name")
    };
    if !containers.is_empty() || !volumes.is_empty() || !unlabelled.is_empty() {
        let _ = cleanup::remove_owned(engine, owner).await;
        let _ = cleanup::Created {
            volumes: unlabelled.clone(),
            ..Default::default()
        }
        .remove_all(engine, Duration::from_secs(10))
        .await;
        panic!(
            "left behind for owner {}: containers {containers:?}, volumes {volumes:?}; \
             unlabelled cordon volumes {unlabelled:?}",
            owner.as_str()
        );
    }
}

/// Task storage for one test (its uid picked like any allocation's).
pub async fn task_storage(engine: &Engine, owner: &Owner, image_id: &str) -> TaskStorage {
    let allocation = cordon::uids::allocation(engine, owner, "test")
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

/// One test's engine, image, owner and task storage.
#[derive(Debug)]
pub struct Fixture {
    pub engine: Engine,
    pub image: String,
    pub owner: Owner,
    pub storage: TaskStorage,
}

/// Set up a fixture whose owner token starts with `prefix`.
pub async fn fixture(prefix: &str) -> Fixture {
    let engine = engine().await;
    let image = image(&engine).await;
    let owner = Owner::random(prefix);
    let storage = task_storage(&engine, &owner, &image).await;
    Fixture {
        engine,
        image,
        owner,
        storage,
    }
}

impl Drop for Fixture {
    /// A test that panics before `finish` still leaves nothing: remove everything with its owner
    /// label from a thread of its own (the test's runtime is unwinding).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let owner = self.owner.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    if let Ok(engine) = Engine::connect().await {
                        let _ = cleanup::remove_owned(&engine, &owner).await;
                    }
                });
            }
        })
        .join();
    }
}

impl Fixture {
    /// A profile over this fixture's storage.
    pub fn profile(&self, run: &Run) -> Profile {
        profile(&self.owner, &self.image, &self.storage, run)
    }

    /// Remove the storage and fail if anything with the owner's label is left.
    pub async fn finish(self) {
        self.storage
            .remove(&self.engine)
            .await
            .expect("removing task storage");
        assert_clean(&self.engine, &self.owner).await;
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

/// A profile over `storage`.
pub fn profile(owner: &Owner, image_id: &str, storage: &TaskStorage, run: &Run) -> Profile {
    let allocation = Allocation::new(owner, "test", storage.allocation.uid).expect("allocation");
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
        input_files: vec![],
        landlock_abi: DEFAULT_LANDLOCK_ABI,
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
    engine: &Engine,
    profile: &Profile,
    prepared: Prepared,
    while_running: F,
) -> (Vec<cordon::Refusal>, Finished)
where
    F: FnOnce(&Launch) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut launch = launch::create(engine, profile, prepared)
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
pub async fn launch_valid(engine: &Engine, profile: &Profile) -> Finished {
    let prepared = Prepared::new(engine, profile).expect("plan");
    let (refusals, finished) = launch_with(engine, profile, prepared, |_| async {}).await;
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
    }
}

/// No staging directory of `owner` is left on the host.
pub fn assert_no_staging(owner: &Owner) {
    let prefix = cordon::task::clone::staging_prefix(owner);
    let left: Vec<String> = cordon::task::clone::staging_roots()
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flat_map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(left.is_empty(), "staging directories left: {left:?}");
}
