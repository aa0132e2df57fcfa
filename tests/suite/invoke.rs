//! Invocations on the real engine, through the fake vendor CLI's modes: answers with attestation
//! and identity, every way a run can fail to answer, deadlines and cancellation at each step,
//! parallel owners, a cleanup that keeps failing, a container killed from outside, and a
//! credential that never leaks. Every test that makes anything holds an [`Owned`] guard and ends
//! with nothing of its owner left (the guard removes it all if the test panics midway).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon::error::Error;
use cordon::invoke::{
    self, capture, start, Credential, Handle, ImageSource, InvocationResult, Options, Request,
    Step, StopReason,
};
use cordon::labels::Owner;
use cordon::task::{self, StorageHandle};
use cordon_contract::{Phase, Vendor};
use cordon_tests::{at_base, controller, owned, prepare_request, Owned, Repo};
use futures_util::StreamExt;

/// A small committed repository and its storage, of the guard's owner.
async fn storage(s: &Owned) -> StorageHandle {
    let repo = Repo::new("invoke");
    repo.write("README.md", b"# invoke\n", 0o644);
    repo.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    let head = repo.commit();
    task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, &head))
        .await
        .expect("task storage")
}

/// The tree reader's deadline in these tests.
const DEADLINE: Duration = cordon::audit::DEFAULT_DEADLINE;

fn attempt(tag: &str) -> String {
    format!("{tag}-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

fn request(storage: &StorageHandle, phase: Phase, prompt: &str) -> Request {
    Request {
        phase,
        vendor: Vendor::Claude,
        prompt: prompt.to_owned(),
        schema: None,
        referenced_code_hash: "code-abc123".to_owned(),
        deadline: Instant::now() + Duration::from_secs(60),
        network_allowlist: vec![],
        attempt: attempt("a"),
        storage: storage.clone(),
        tree_check: None,
    }
}

fn options(image: &str) -> Options {
    Options::new(ImageSource::Id(image.to_owned()))
}

/// Capture, start and settle `request` on the guard's controller (with the tree check execute
/// and fix need, made now, unless the request has one).
async fn run(s: &Owned, mut request: Request) -> Arc<InvocationResult> {
    if request.tree_check.is_none() {
        request.tree_check =
            cordon_tests::tree_check_for(&s.ctl, &s.image, &request.storage, request.phase).await;
    }
    let handle = start(
        &s.ctl,
        capture(&s.ctl, request).expect("capture"),
        None,
        options(&s.image),
    )
    .await
    .expect("start");
    handle.settled().await
}

fn failure(result: &InvocationResult) -> Option<&str> {
    result.failure.as_ref().map(|f| f.id.as_str())
}

/// Remove `storage` and fail if anything of the owner is left; the test goes on.
async fn release(s: &Owned, storage: &StorageHandle) {
    task::remove(&s.ctl, storage).await.expect("remove storage");
    s.assert_clean().await;
}

/// Remove `storage`, then the test's last step ([`Owned::finish`]).
async fn finish(s: Owned, storage: &StorageHandle) {
    task::remove(&s.ctl, storage).await.expect("remove storage");
    s.finish().await;
}

/// A storage handle that no engine call ever sees (capture needs none).
fn unused_storage() -> StorageHandle {
    StorageHandle {
        owner: "t-capture".into(),
        attempt: "x".into(),
        allocation: uuid::Uuid::new_v4(),
        work_volume: "w".into(),
        metadata_volume: "m".into(),
        keeper: "k".into(),
        work: cordon::storage::DEFAULT_WORK,
        metadata: cordon::storage::DEFAULT_METADATA,
        uid: cordon::uids::Uid::new(1_500_000).unwrap(),
        head: None,
        gitlinks: Some(vec![]),
        metadata_baseline: None,
        snapshot: None,
    }
}

/// A `schema.json` in a directory of its own, removed when the test is done with it.
struct SchemaFile(std::path::PathBuf);

impl SchemaFile {
    fn path(&self) -> std::path::PathBuf {
        self.0.join("schema.json")
    }
}

impl Drop for SchemaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn schema_file(name: &str, text: &str) -> SchemaFile {
    let dir = std::env::temp_dir().join(format!(
        "cordon-schema-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = SchemaFile(dir);
    std::fs::write(file.path(), text).unwrap();
    file
}

/// Capture freezes a request once per attempt id (per controller: another controller is another
/// runner, with its own) and refuses what it cannot run.
#[tokio::test]
async fn capture_refuses_bad_requests_and_a_second_capture() {
    let ctl = controller().await;
    let storage = unused_storage();
    let base = || request(&storage, Phase::Questions, "hello");
    let first = base();
    let again = first.clone();
    let elsewhere = first.clone();
    capture(&ctl, first).expect("first capture");
    assert_eq!(capture(&ctl, again).unwrap_err().id(), "attempt-captured");
    capture(&controller().await, elsewhere).expect("another controller's first capture");
    let mut long = base();
    long.prompt = "x".repeat(32 * 1024 + 1);
    assert_eq!(capture(&ctl, long).unwrap_err().id(), "invalid-input");
    let mut exact = base();
    exact.prompt = "x".repeat(32 * 1024);
    capture(&ctl, exact).expect("exactly 32 KiB");
    let mut late = base();
    late.deadline = Instant::now() - Duration::from_millis(1);
    assert_eq!(capture(&ctl, late).unwrap_err().id(), "deadline");
    let mut host = base();
    host.network_allowlist = vec!["API.anthropic.com".into()];
    assert_eq!(capture(&ctl, host).unwrap_err().id(), "invalid-input");
    let mut no_schema = base();
    no_schema.phase = Phase::Planning;
    assert_eq!(capture(&ctl, no_schema).unwrap_err().id(), "schema-invalid");
    let mut schema_in_questions = base();
    let questions_schema = schema_file("q", r#"{"type":"object"}"#);
    schema_in_questions.schema = Some(questions_schema.path());
    assert_eq!(
        capture(&ctl, schema_in_questions).unwrap_err().id(),
        "schema-invalid"
    );
    let mut bad_schema = base();
    bad_schema.phase = Phase::Planning;
    let draft_2020_schema = schema_file(
        "2020",
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}"#,
    );
    bad_schema.schema = Some(draft_2020_schema.path());
    assert_eq!(
        capture(&ctl, bad_schema).unwrap_err().id(),
        "schema-invalid"
    );
    for phase in Phase::ALL {
        let mut codex = base();
        codex.vendor = Vendor::Codex;
        codex.phase = phase;
        let err = capture(&ctl, codex).unwrap_err();
        assert_eq!(err.id(), "vendor-refused", "{phase}");
        assert!(err.to_string().contains("use claude"), "{err}");
    }
    assert!(invoke::allowed_phases(Vendor::Codex).is_empty());
    assert_eq!(invoke::allowed_phases(Vendor::Claude), &Phase::ALL);
}

/// A planning command whose `--json-schema` text differs from the mounted schema.json is refused
/// by the profile; the same text is accepted.
#[test]
fn the_profile_refuses_a_schema_that_differs_from_the_mounted_file() {
    use cordon::profile::{Profile, ProfileSpec};
    let owner = Owner::random("t-schema");
    let uid = cordon::uids::Uid::new(1_500_000).unwrap();
    let allocation = cordon::labels::Allocation::new(&owner, "s", uid).unwrap();
    let spec = |argument: &str, mounted: &str| ProfileSpec {
        phase: Phase::Planning,
        vendor: Vendor::Claude,
        image_id: format!("sha256:{}", "0".repeat(64)),
        allocation: allocation.clone(),
        limits: cordon::profile::Limits::default(),
        storage: cordon::storage::TaskStorage::from_parts(
            allocation.clone(),
            "w".into(),
            cordon::storage::DEFAULT_WORK,
            "m".into(),
            cordon::storage::DEFAULT_METADATA,
            "k".into(),
        )
        .mounts_for(&allocation),
        command: invoke::claude::command(Phase::Planning, "plan", Some(argument), false),
        exec: vec![cordon_contract::paths::CLAUDE_CLI.into()],
        env: vec![],
        gitlinks: vec![],
        pins: vec![],
        pin_mounts: false,
        landlock_abi: cordon::profile::DEFAULT_LANDLOCK_ABI,
        egress: None,
        input_files: vec![("schema.json".into(), mounted.as_bytes().to_vec())],
    };
    let same = r#"{"type":"object"}"#;
    Profile::new(spec(same, same)).expect("the same text");
    let err = Profile::new(spec(r#"{"type":"object" }"#, same)).unwrap_err();
    assert_eq!(err.id(), "schema-mismatch", "{err}");
    let mut none = spec(same, same);
    none.input_files.clear();
    assert_eq!(Profile::new(none).unwrap_err().id(), "schema-mismatch");
}

/// Questions answer in plain text, planning with structured_output as bare JSON; both carry the
/// attestation of the policy the host wrote and echo the attempt and code hash.
#[tokio::test]
async fn questions_and_planning_answer_with_attestation_and_identity() {
    let s = owned("t-answer").await;
    let storage = storage(&s).await;
    let questions = request(&storage, Phase::Questions, "what is this?");
    let asked = questions.attempt.clone();
    let result = run(&s, questions).await;
    assert_eq!(
        result.answer.as_deref(),
        Some("fake answer: 13 bytes of prompt; allowed tools: Read,Glob,Grep"),
        "{result:#?}"
    );
    assert_eq!(result.attempt, asked);
    assert_eq!(result.referenced_code_hash, "code-abc123");
    assert_eq!(
        (result.exit_code, result.signal, result.stop_reason),
        (Some(0), None, None)
    );
    let attestation = result.attestation.as_ref().expect("attested");
    assert!(attestation.policy_digest.starts_with("sha256:"));
    assert!(attestation
        .checks
        .contains(&cordon_contract::Id::ExecAllowlist));
    assert!(result.unreleased.is_empty());

    let mut planning = request(&storage, Phase::Planning, "plan it");
    let schema = r#"{"type":"object","required":["steps","risk"],"properties":{"steps":{"type":"array","minItems":1,"items":{"type":"string"}},"risk":{"enum":["low","high"]}}}"#;
    let plan_schema = schema_file("plan", schema);
    planning.schema = Some(plan_schema.path());
    let result = run(&s, planning).await;
    assert_eq!(
        result.answer.as_deref(),
        Some(r#"{"risk":"low","steps":["fake"]}"#),
        "the fake answers from the exact schema text it was given: {result:#?}"
    );
    finish(s, &storage).await;
}

/// A planning schema with required properties, and a property typed so that the fake's
/// `{"ignored": true}` has the wrong type too.
const PLAN_SCHEMA: &str = r#"{"type":"object","required":["steps","risk"],"properties":{"steps":{"type":"array","minItems":1,"items":{"type":"string"}},"risk":{"enum":["low","high"]},"ignored":{"type":"string"}}}"#;

/// The CLI can exit 0 with `subtype: success` and a structured output that ignores the schema:
/// cordon validates it against the mounted schema itself and settles with `answer-invalid`, no
/// answer and bounded evidence; the same schema in `normal` mode still answers.
#[tokio::test]
async fn a_planning_answer_that_ignores_the_schema_is_no_answer() {
    let s = owned("t-ignored").await;
    let storage = storage(&s).await;
    let mut ignored = request(&storage, Phase::Planning, "cordon-fake:schema-ignored");
    let ignored_schema = schema_file("ignored", PLAN_SCHEMA);
    ignored.schema = Some(ignored_schema.path());
    let mut normal = request(&storage, Phase::Planning, "plan it");
    let normal_schema = schema_file("normal", PLAN_SCHEMA);
    normal.schema = Some(normal_schema.path());
    let (ignored, normal) = tokio::join!(run(&s, ignored), run(&s, normal));
    assert_eq!(
        (ignored.exit_code, ignored.signal, ignored.stop_reason),
        (Some(0), None, None),
        "the CLI said success: {ignored:#?}"
    );
    assert!(ignored.attestation.is_some(), "{ignored:#?}");
    assert_eq!(failure(&ignored), Some("answer-invalid"), "{ignored:#?}");
    assert_eq!(ignored.answer, None, "{ignored:#?}");
    let evidence = &ignored.failure.as_ref().expect("a failure").message;
    assert!(evidence.len() <= 2200, "bounded evidence: {evidence}");
    for needle in ["steps", "risk", "/ignored"] {
        assert!(evidence.contains(needle), "{needle} in {evidence}");
    }
    assert_eq!(
        normal.answer.as_deref(),
        Some(r#"{"risk":"low","steps":["fake"]}"#),
        "{normal:#?}"
    );
    assert_eq!(failure(&normal), None);
    finish(s, &storage).await;
}

/// Review with a schema answers with the validated structured output (and refuses one that
/// ignores the schema); review without a schema still answers in plain text.
#[tokio::test]
async fn review_with_a_schema_answers_with_validated_structured_output() {
    let s = owned("t-review").await;
    let storage = storage(&s).await;
    let review_schema = r#"{"type":"object","required":["verdict","findings"],"additionalProperties":false,"properties":{"verdict":{"enum":["approve","reject"]},"findings":{"type":"array","items":{"type":"object","required":["file"],"properties":{"file":{"type":"string"}}}}}}"#;
    let mut structured = request(&storage, Phase::Review, "review it");
    let review_schema_file = schema_file("review", review_schema);
    structured.schema = Some(review_schema_file.path());
    let mut ignored = request(&storage, Phase::Review, "cordon-fake:schema-ignored");
    let review_ignored_schema = schema_file("review-ignored", review_schema);
    ignored.schema = Some(review_ignored_schema.path());
    let plain = request(&storage, Phase::Review, "review it");
    let (structured, ignored, plain) =
        tokio::join!(run(&s, structured), run(&s, ignored), run(&s, plain));
    assert_eq!(
        structured.answer.as_deref(),
        Some(r#"{"findings":[],"verdict":"approve"}"#),
        "{structured:#?}"
    );
    assert_eq!(failure(&structured), None);
    assert_eq!(failure(&ignored), Some("answer-invalid"), "{ignored:#?}");
    assert_eq!(ignored.answer, None);
    assert_eq!(
        plain.answer.as_deref(),
        Some("fake answer: 9 bytes of prompt; allowed tools: Read,Glob,Grep"),
        "{plain:#?}"
    );
    finish(s, &storage).await;
}

/// Every way a run ends without an answer settles with the right facts and failure id.
#[tokio::test]
async fn runs_that_do_not_answer_settle_with_the_reason() {
    let s = owned("t-modes").await;
    let storage = storage(&s).await;
    let mut schema_check = request(&storage, Phase::Planning, "cordon-fake:schema-violation");
    let violation_schema = schema_file("violation", r#"{"type":"object"}"#);
    schema_check.schema = Some(violation_schema.path());
    let cases: Vec<(Request, Option<i64>, Option<i32>, &str)> = vec![
        (schema_check, Some(1), None, "exit-nonzero"),
        (
            request(&storage, Phase::Questions, "cordon-fake:signal"),
            Some(134),
            Some(6),
            "signal",
        ),
        (
            request(&storage, Phase::Questions, "cordon-fake:exit-7"),
            Some(7),
            None,
            "exit-nonzero",
        ),
        (
            request(&storage, Phase::Questions, "cordon-fake:invalid-utf8"),
            Some(0),
            None,
            "capture-failure",
        ),
        (
            request(&storage, Phase::Questions, "cordon-fake:flood"),
            Some(0),
            None,
            "answer-invalid",
        ),
    ];
    let guard = &s;
    let runs = cases.into_iter().map(|(req, exit, signal, id)| async move {
        let prompt = req.prompt.clone();
        let result = run(guard, req).await;
        assert_eq!(
            (result.exit_code, result.signal, failure(&result)),
            (exit, signal, Some(id)),
            "{prompt}: {result:#?}"
        );
        assert_eq!(result.answer, None, "{prompt}");
        assert!(
            result.attestation.is_some(),
            "{prompt}: attested all the same"
        );
        result
    });
    let results = futures_util::future::join_all(runs).await;
    let flood = &results[4];
    assert!(flood.stdout_truncated);
    assert_eq!(
        flood.stdout.as_ref().map(String::len),
        Some(1024 * 1024),
        "1 MiB kept of 10 MiB"
    );
    assert_eq!(results[3].stdout, None, "invalid UTF-8 is never handed out");
    finish(s, &storage).await;
}

/// The fake tries to write everywhere outside its areas; every attempt is denied, in a read-only
/// phase (where /work is outside too) and in execute.
#[tokio::test]
async fn writes_outside_the_agent_areas_are_denied() {
    let s = owned("t-outside").await;
    let storage = storage(&s).await;
    for (phase, attempts) in [(Phase::Questions, 26), (Phase::Execute, 24)] {
        let result = run(&s, request(&storage, phase, "cordon-fake:write-outside")).await;
        assert_eq!(
            result.answer.as_deref(),
            Some(format!("write-outside: denied {attempts} of {attempts}").as_str()),
            "{phase}: {result:#?}"
        );
    }
    finish(s, &storage).await;
}

/// Start fails only when it allocated nothing: an expired deadline, an attempt whose objects still
/// exist. Nothing new exists afterwards.
#[tokio::test]
async fn start_fails_only_before_allocating() {
    let s = owned("t-start").await;
    let storage = storage(&s).await;
    let mut late = request(&storage, Phase::Questions, "hello");
    late.deadline = Instant::now() + Duration::from_millis(200);
    let captured = capture(&s.ctl, late).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = start(&s.ctl, captured, None, options(&s.image))
        .await
        .unwrap_err();
    assert_eq!(err.id(), "deadline");
    // An earlier process's object of this attempt still exists.
    let owned = request(&storage, Phase::Questions, "hello");
    let labels = std::collections::HashMap::from([
        (
            cordon::labels::OWNER.to_owned(),
            s.owner.as_str().to_owned(),
        ),
        (cordon::labels::ATTEMPT.to_owned(), owned.attempt.clone()),
        (
            cordon::labels::ALLOCATION.to_owned(),
            uuid::Uuid::new_v4().to_string(),
        ),
        (cordon::labels::KIND.to_owned(), "control".to_owned()),
    ]);
    let leftover = s
        .engine
        .docker()
        .create_volume(bollard::models::VolumeCreateRequest {
            name: Some(format!("t-start-{}", uuid::Uuid::new_v4().simple())),
            labels: Some(labels),
            ..Default::default()
        })
        .await
        .unwrap()
        .name;
    let err = start(
        &s.ctl,
        capture(&s.ctl, owned).unwrap(),
        None,
        options(&s.image),
    )
    .await
    .unwrap_err();
    assert_eq!(err.id(), "attempt-owned", "{err}");
    assert!(err.to_string().contains(&leftover), "{err}");
    s.engine
        .docker()
        .remove_volume(
            &leftover,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await
        .unwrap();
    // Only the storage exists.
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "a start that allocated nothing").await;
    finish(s, &storage).await;
}

/// The deadline bounds every launch: hit during setup and during the run, the result settles
/// with `timeout` and nothing is left.
#[tokio::test]
async fn a_deadline_hit_in_setup_or_run_settles_as_timeout() {
    let s = owned("t-deadline").await;
    let storage = storage(&s).await;
    for (prompt, after, step) in [
        ("hello", Duration::from_millis(60), Step::Creating),
        ("cordon-fake:hang", Duration::from_secs(8), Step::Running),
    ] {
        let mut req = request(&storage, Phase::Questions, prompt);
        req.deadline = Instant::now() + after;
        let handle = start(
            &s.ctl,
            capture(&s.ctl, req).unwrap(),
            None,
            options(&s.image),
        )
        .await
        .unwrap();
        let seen = handle.reached(step).await;
        let result = handle.settled().await;
        assert_eq!(
            result.stop_reason,
            Some(StopReason::Timeout),
            "{prompt}: {result:#?}"
        );
        assert_eq!(result.answer, None);
        assert!(result.unreleased.is_empty());
        assert_eq!(seen, step, "{prompt}: the deadline landed in {step:?}");
    }
    finish(s, &storage).await;
}

/// Cancel during the image build, the create and the run: each settles as `cancelled` (the first
/// reason wins over a later shutdown), after its container is gone.
#[tokio::test]
async fn cancel_during_build_create_and_run() {
    let s = owned("t-cancel-inv").await;
    let storage = storage(&s).await;
    let cases = [
        (
            "hello",
            ImageSource::Build(cordon::image::default_workspace()),
            Step::Building,
        ),
        ("hello", ImageSource::Id(s.image.clone()), Step::Creating),
        (
            "cordon-fake:hang",
            ImageSource::Id(s.image.clone()),
            Step::Running,
        ),
    ];
    for (prompt, source, step) in cases {
        let handle: Handle = start(
            &s.ctl,
            capture(&s.ctl, request(&storage, Phase::Questions, prompt)).unwrap(),
            None,
            Options::new(source),
        )
        .await
        .unwrap();
        assert_eq!(handle.reached(step).await, step);
        handle.cancel();
        handle.stop(StopReason::Shutdown);
        let result = handle.settled().await;
        assert_eq!(
            result.stop_reason,
            Some(StopReason::Cancelled),
            "{step:?}: {result:#?}"
        );
        assert_eq!(failure(&result), Some("stopped"), "{step:?}");
        assert!(result.unreleased.is_empty(), "{step:?}");
        cordon_tests::assert_only_storage(&s.engine, &s.owner, &format!("{step:?}")).await;
    }
    finish(s, &storage).await;
}

/// Two invocations of different owners run at once and neither sees the other's objects.
#[tokio::test]
async fn two_owners_run_in_parallel() {
    let a = owned("t-par-a").await;
    let b = a.other("t-par-b");
    let (sa, sb) = tokio::join!(storage(&a), storage(&b));
    let (ra, rb) = tokio::join!(
        run(&a, request(&sa, Phase::Questions, "from a")),
        run(&b, request(&sb, Phase::Execute, "from b"))
    );
    assert!(
        ra.answer.as_deref().is_some_and(|x| x.contains("6 bytes")),
        "{ra:#?}"
    );
    assert!(
        rb.answer
            .as_deref()
            .is_some_and(|x| x.contains("Edit,Write")),
        "{rb:#?}"
    );
    finish(a, &sa).await;
    finish(b, &sb).await;
}

/// Removal keeps failing (an engine error injected into every removal): the result settles after
/// the window with `unreleased` (create-time ids and owner labels), and the profile is retired (by
/// that controller).
#[tokio::test]
async fn a_failing_cleanup_reports_unreleased_and_retires_the_profile() {
    let s = owned("t-unreleased").await;
    let storage = storage(&s).await;
    let mut opts = options(&s.image);
    opts.cleanup_window = Duration::from_secs(3);
    opts.first_cleanup = Duration::from_secs(5);
    // Only removals fail (setup removes nothing it needs), so the run itself answers.
    s.engine.inject_removal_failures(usize::MAX);
    let handle = start(
        &s.ctl,
        capture(&s.ctl, request(&storage, Phase::Questions, "hello")).unwrap(),
        None,
        opts,
    )
    .await
    .unwrap();
    handle.reached(Step::Cleaning).await;
    let cleaning = Instant::now();
    let result = handle.settled().await;
    s.engine.inject_removal_failures(0);
    let waited = cleaning.elapsed();
    // The window starts at the supervisor's first failed removal, which can come before this
    // test hears of the cleaning step: allow that much of it to have passed unseen (CI measured
    // 2.998 s once).
    assert!(
        waited >= Duration::from_millis(2_900),
        "the window was honoured: {waited:?}"
    );
    assert!(!result.unreleased.is_empty(), "{result:#?}");
    assert_eq!(
        result.answer.as_deref().map(|a| a.starts_with("fake")),
        Some(true)
    );
    for left in &result.unreleased {
        assert!(left.id.is_some(), "create-time id known: {left:?}");
        assert_eq!(
            left.labels.get(cordon::labels::OWNER).map(String::as_str),
            Some(s.owner.as_str())
        );
        assert_eq!(
            left.labels.get(cordon::labels::ALLOCATION),
            Some(&result.allocation.to_string())
        );
    }
    // Retired: every launch path refuses a profile of that allocation.
    let mut allocation =
        cordon::labels::Allocation::new(&s.owner, &result.attempt, storage.uid).unwrap();
    allocation.id = result.allocation;
    let profile = cordon::profile::Profile::new(cordon::profile::ProfileSpec {
        phase: Phase::Questions,
        vendor: Vendor::Claude,
        image_id: s.image.clone(),
        allocation: allocation.clone(),
        limits: cordon_tests::test_limits(),
        storage: storage.storage().unwrap().mounts_for(&allocation),
        command: vec![
            cordon_contract::paths::CLAUDE_CLI.into(),
            "--version".into(),
        ],
        exec: vec![cordon_contract::paths::CLAUDE_CLI.into()],
        env: vec![],
        gitlinks: vec![],
        pins: vec![],
        pin_mounts: false,
        landlock_abi: cordon::profile::DEFAULT_LANDLOCK_ABI,
        egress: None,
        input_files: vec![],
    })
    .unwrap();
    match cordon::launch::run(&s.ctl, &profile).await {
        Err(Error::Retired(id)) => assert_eq!(id, result.allocation.to_string()),
        other => panic!("a retired profile was launched: {other:?}"),
    }
    // Retired by this controller: another runner's controller has retired nothing.
    controller()
        .await
        .check_not_retired(&result.allocation)
        .expect("retirement is the controller's");
    // What was reported is exactly what is left; removing it by id leaves nothing.
    remove_reported(&s.engine, &result.unreleased).await;
    finish(s, &storage).await;
}

/// The container killed from outside during a run: the handle settles with the kill's exit code
/// and signal, no stop reason, no answer, and nothing left.
/// A questions invocation whose fake CLI hangs, once it runs.
async fn hanging(s: &Owned, storage: &StorageHandle) -> Handle {
    let handle = start(
        &s.ctl,
        capture(
            &s.ctl,
            request(storage, Phase::Questions, "cordon-fake:hang"),
        )
        .unwrap(),
        None,
        options(&s.image),
    )
    .await
    .unwrap();
    handle.reached(Step::Running).await;
    handle
}

#[tokio::test]
async fn a_container_killed_from_outside_settles() {
    let s = owned("t-killed").await;
    let storage = storage(&s).await;
    let handle = hanging(&s, &storage).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.engine
        .docker()
        .kill_container(
            &format!("cordon-agent-{}", handle.allocation()),
            Some(bollard::query_parameters::KillContainerOptions {
                signal: "KILL".into(),
            }),
        )
        .await
        .unwrap();
    let result = handle.settled().await;
    assert_eq!(
        (result.exit_code, result.signal, result.stop_reason),
        (Some(137), Some(9), None),
        "{result:#?}"
    );
    assert_eq!(failure(&result), Some("signal"));
    assert!(result.unreleased.is_empty());
    finish(s, &storage).await;
}

/// What the engine says of a container's state: its status, and whether it ever started.
async fn state_of(
    s: &Owned,
    name: &str,
) -> (Option<bollard::models::ContainerStateStatusEnum>, bool) {
    let inspected = s
        .engine
        .docker()
        .inspect_container(name, None)
        .await
        .expect("inspect");
    let state = inspected.state.expect("a state");
    let never = state
        .started_at
        .as_deref()
        .is_none_or(|t| t.starts_with("0001-"));
    (state.status, !never)
}

/// When the engine created a container, by its name: its RFC 3339 time as (seconds, nanoseconds),
/// the fraction zero-padded (the engine drops its trailing zeros).
async fn created_at(s: &Owned, name: &str) -> (String, u32) {
    let inspected = s.engine.docker().inspect_container(name, None).await;
    let created = inspected.expect("inspect").created.expect("a create time");
    let (seconds, rest) = created.split_once('.').unwrap_or((created.as_str(), "Z"));
    let fraction = rest.trim_end_matches('Z');
    let nanos = format!("{fraction:0<9}").parse().expect("nanoseconds");
    (seconds.to_owned(), nanos)
}

/// A container's id, by its name.
async fn id_of(s: &Owned, name: &str) -> String {
    let inspected = s.engine.docker().inspect_container(name, None).await;
    inspected.expect("inspect").id.expect("an id")
}

/// Without a proxy's vault the loader never starts: the agent's own container holds the control
/// and input dirs once the engine has mounted them for it, and the policy goes in through the
/// stopped loader's mounts of the same volumes. The init still reads it and attests; the loader is
/// created, never run. (With a vault too: `the_credential_never_enters_the_agents_container`.)
#[tokio::test]
async fn without_a_vault_the_loader_never_starts_and_the_policy_still_arrives() {
    let s = owned("t-held").await;
    let storage = storage(&s).await;
    let before = std::time::SystemTime::now();
    // Running: the agent started and the policy was written (the start returns after both).
    let handle = hanging(&s, &storage).await;
    let loader = format!("cordon-loader-{}", handle.allocation());
    // The upload waits for the engine's word that the agent's container holds control and input
    // mounted: it came for the agent, for both volumes, and never comes for a container that
    // mounted neither (the storage's keeper). The engine reports the loader's archive mounting
    // them too, as the loader's, for the upload alone: only the agent's count.
    let held = ["control", "input"].map(|kind| format!("cordon-{kind}-{}", handle.allocation()));
    let agent = format!("cordon-agent-{}", handle.allocation());
    let agent_id = id_of(&s, &agent).await;
    let mounted = |who: String| {
        let (engine, held) = (&s.engine, &held);
        async move {
            tokio::time::timeout(
                Duration::from_secs(5),
                cordon::launch::volumes::mounted_by(engine, &who, held, before),
            )
            .await
            .is_ok()
        }
    };
    assert!(mounted(agent_id).await, "the agent's mounts of {held:?}");
    let loader_id = id_of(&s, &loader).await;
    assert!(mounted(loader_id).await, "the loader's archive, reported");
    let keeper_id = id_of(&s, &storage.keeper).await;
    assert!(!mounted(keeper_id).await, "the keeper mounted neither");
    assert_eq!(
        state_of(&s, &loader).await,
        (
            Some(bollard::models::ContainerStateStatusEnum::CREATED),
            false
        ),
        "the loader of an invocation without a vault"
    );
    // Nothing goes through the loader before the agent's start mounts the dirs, so it is made
    // beside that start, after the agent's container: the engine's create times.
    let (agent_at, loader_at) = (created_at(&s, &agent).await, created_at(&s, &loader).await);
    assert!(
        loader_at > agent_at,
        "the loader made after the agent: {loader_at:?} against {agent_at:?}"
    );
    // The init attests within milliseconds of its ready marker; the fake CLI then hangs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    handle.stop(StopReason::Cancelled);
    let result = handle.settled().await;
    assert!(result.attestation.is_some(), "{result:#?}");
    assert!(result.unreleased.is_empty());
    finish(s, &storage).await;
}

/// The loader made beside the agent's start cannot be made (someone else's container holds its
/// name, labels of nobody's): the invocation fails with the engine's refusal, the agent's init
/// never had its policy (no attestation, so no agent code ran), nothing of the owner is left and
/// the other container is untouched. Nothing ever goes through a loader by its name.
#[tokio::test]
async fn a_loader_that_cannot_be_made_stops_the_agent_before_its_code_and_leaves_nothing() {
    let s = owned("t-squat").await;
    let storage = storage(&s).await;
    let id = uuid::Uuid::new_v4();
    let squatter = format!("cordon-loader-{id}");
    // Not cordon-named: the other tests' leftover check looks for unlabelled cordon volumes.
    let squatters_volume = format!("t-squat-{id}");
    let made = s
        .engine
        .docker()
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(squatter.clone()),
                platform: String::new(),
            }),
            bollard::models::ContainerCreateBody {
                image: Some(s.image.clone()),
                network_disabled: Some(true),
                // A dir where a policy sent by the loader's name would land.
                host_config: Some(bollard::models::HostConfig {
                    mounts: Some(vec![bollard::models::Mount {
                        typ: Some(bollard::models::MountType::VOLUME),
                        source: Some(squatters_volume.clone()),
                        target: Some(cordon_contract::paths::CONTROL_DIR.to_owned()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .expect("the other container");
    let mut options = options(&s.image);
    options.allocation = Some(id);
    let request = request(&storage, Phase::Questions, "hello");
    let handle = start(&s.ctl, capture(&s.ctl, request).unwrap(), None, options)
        .await
        .expect("nothing refused before the engine");
    let result = handle.settled().await;
    // Nothing of the invocation's went into the other container.
    let written = s
        .engine
        .docker()
        .download_from_container(
            &made.id,
            Some(bollard::query_parameters::DownloadFromContainerOptions {
                path: format!("{}/ready", cordon_contract::paths::CONTROL_DIR),
            }),
        )
        .collect::<Vec<_>>()
        .await;
    let removed = s
        .engine
        .docker()
        .remove_container(
            &made.id,
            None::<bollard::query_parameters::RemoveContainerOptions>,
        )
        .await;
    let volume = s
        .engine
        .docker()
        .remove_volume(
            &squatters_volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await;
    assert!(result.attestation.is_none(), "{result:#?}");
    assert!(result.answer.is_none(), "{result:#?}");
    assert!(failure(&result).is_some(), "{result:#?}");
    assert!(result.unreleased.is_empty(), "{result:#?}");
    assert!(
        written.iter().any(Result::is_err),
        "the control dir was written into the other container"
    );
    removed.expect("the other container was still there, ours to remove");
    volume.expect("the other container's volume");
    finish(s, &storage).await;
}

/// The credential never enters an agent's container: the agent holds a sentinel, so neither its
/// own token nor another invocation's (running at the same time) is anywhere it can search
/// (every process's environment and command line, its areas, the input dir); a token appears in
/// no result, label or error. A credential needs its vendor host on the allowlist (the proxy
/// terminates it); without one it is refused before anything is made (`vendor-custody`).
#[tokio::test]
async fn the_credential_never_enters_the_agents_container() {
    let s = owned("t-cred").await;
    let storage = storage(&s).await;
    let tokens = [
        format!("cordon-test-token-{}", uuid::Uuid::new_v4().simple()),
        format!("cordon-test-token-{}", uuid::Uuid::new_v4().simple()),
    ];
    // No allowlist, no proxy to hold the token: refused, nothing made.
    let refused = start(
        &s.ctl,
        capture(
            &s.ctl,
            request(&storage, Phase::Questions, "cordon-fake:steal-credential"),
        )
        .unwrap(),
        Some(Credential::new(tokens[0].clone()).unwrap()),
        options(&s.image),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.id(), "vendor-custody", "{refused}");
    assert!(!refused.to_string().contains(tokens[0].as_str()));
    // The vendor host allowed (on an internal network, mapped nowhere it is dialed: the fake CLI
    // never connects), so the proxy holds the token. The fake CLI holds 5 s after its search, so
    // the invocations still run while they are looked at below.
    let with_network = || {
        let mut request = request(
            &storage,
            Phase::Questions,
            "cordon-fake:steal-credential 5000",
        );
        request.network_allowlist = vec!["api.anthropic.com".to_owned()];
        request
    };
    let mut options = options(&s.image);
    options.egress.internal = true;
    options.egress.map = vec!["api.anthropic.com=192.0.2.1:443".to_owned()];
    let mut handles = Vec::new();
    for token in &tokens {
        let handle = start(
            &s.ctl,
            capture(&s.ctl, with_network()).unwrap(),
            Some(Credential::new(token.clone()).unwrap()),
            options.clone(),
        )
        .await
        .unwrap();
        handles.push(handle);
    }
    for handle in &handles {
        handle.reached(Step::Running).await;
        // The loader never starts, with a vault too: the proxy holds the vault volume mounted
        // once it starts, and waits for the vault's marker.
        let loader = format!("cordon-loader-{}", handle.allocation());
        assert_eq!(
            state_of(&s, &loader).await,
            (
                Some(bollard::models::ContainerStateStatusEnum::CREATED),
                false
            ),
            "{loader}"
        );
    }
    // While they run: no label of any object carries a token.
    let listed = cordon::engine::objects::Listed::with_label(
        &s.engine,
        &format!("{}={}", cordon::labels::OWNER, s.owner.as_str()),
    )
    .await
    .unwrap();
    let labels = format!("{:?} {:?}", listed.containers, listed.volumes);
    for handle in &handles {
        let result = handle.settled().await;
        // The fake CLI reports every token it finds but the value of its own credential variable
        // (now the sentinel): none is found, its own token included.
        assert_eq!(
            result.answer.as_deref(),
            Some("foreign tokens: []"),
            "{result:#?}"
        );
        let shown = serde_json::to_string(&*result).unwrap() + &format!("{result:?}");
        for token in &tokens {
            assert!(!shown.contains(token.as_str()), "a token in the result");
            assert!(!labels.contains(token.as_str()), "a token in a label");
        }
    }
    let debug = format!("{:?}", Credential::new(tokens[0].clone()).unwrap());
    assert!(!debug.contains(&tokens[0]));
    release(&s, &storage).await;

    // The search can fail: a token the agent can reach (planted in the repository) is found.
    let repo = Repo::new("planted");
    repo.write(
        "notes/deploy.txt",
        b"token: cordon-test-token-planted1\n",
        0o644,
    );
    let head = repo.commit();
    let planted = task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, &head))
        .await
        .unwrap();
    let result = run(
        &s,
        request(&planted, Phase::Questions, "cordon-fake:steal-credential"),
    )
    .await;
    assert_eq!(
        result.answer.as_deref(),
        Some(r#"foreign tokens: ["cordon-test-token-planted1"]"#),
        "{result:#?}"
    );
    finish(s, &planted).await;
}

/// A create whose answer never came (the request was cut) is resolved by name: removed when the
/// object carries exactly the labels it was created with, never touched or reported when it
/// carries others, forgotten when nothing has that name once the daemon had time to finish it.
#[tokio::test]
async fn pending_creates_are_resolved_by_name_and_labels() {
    use cordon::engine::pending::{Created, ObjectKind};
    let s = owned("t-pending").await;
    let labels = |attempt: &str| {
        std::collections::HashMap::from([
            (
                cordon::labels::OWNER.to_owned(),
                s.owner.as_str().to_owned(),
            ),
            (cordon::labels::ATTEMPT.to_owned(), attempt.to_owned()),
            (
                cordon::labels::ALLOCATION.to_owned(),
                uuid::Uuid::new_v4().to_string(),
            ),
            (cordon::labels::KIND.to_owned(), "control".to_owned()),
        ])
    };
    let name = |tag: &str| format!("t-pending-{tag}-{}", uuid::Uuid::new_v4().simple());
    let (ours, theirs, never) = (name("ours"), name("theirs"), name("never"));
    let our_labels = labels("mine");
    for (volume, made_with) in [(&ours, our_labels.clone()), (&theirs, labels("other"))] {
        s.engine
            .docker()
            .create_volume(bollard::models::VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(made_with),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut created = Created::default();
    // As if each create had been cut before the engine answered.
    created.begin(ObjectKind::Volume, &ours, &our_labels);
    created.begin(ObjectKind::Volume, &theirs, &our_labels);
    created.begin(ObjectKind::Volume, &never, &our_labels);
    let left = created.remove_once(&s.engine).await;
    // The one nothing has yet stays pending for the grace (the daemon may still be making it).
    assert_eq!(
        left.pending
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        [never.as_str()],
        "{left:?}"
    );
    let waited = Instant::now();
    left.remove_all(&s.engine, Duration::from_secs(10))
        .await
        .expect("resolved once the grace is over");
    assert!(waited.elapsed() < Duration::from_secs(6));
    assert!(
        s.engine.docker().inspect_volume(&ours).await.is_err(),
        "ours removed"
    );
    s.engine
        .docker()
        .inspect_volume(&theirs)
        .await
        .expect("the other labels' volume is untouched");
    s.engine
        .docker()
        .remove_volume(
            &theirs,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await
        .unwrap();
    s.finish().await;
}

/// The engine makes any missing named volume for a container create that names it. A create cut
/// before the engine answered may still land after cleanup: cleanup holds the volumes back until
/// every container create of its record is resolved, and a mount carries the volume's labels and
/// options, so even a volume the engine made on its own is labelled and bounded. Recovery removes
/// the unlabelled ones an older mount left, by the allocation id in their name.
#[tokio::test]
async fn a_create_that_lands_after_cleanup_cannot_bring_its_volumes_back() {
    use cordon::engine::pending::{Created, ObjectKind};
    use cordon::labels::Kind;
    use cordon::profile::{root_tmpfs_volume_options, volume_mount, VolumeSpec, CONTROL_AREA};
    let mut s = owned("t-resurrect").await;
    let allocation = cordon::storage::new_allocation(&s.engine, &s.owner, "r")
        .await
        .unwrap();
    let spec = VolumeSpec {
        name: allocation.name(Kind::Control),
        labels: allocation.labels(Kind::Control),
        options: root_tmpfs_volume_options(CONTROL_AREA),
    };
    let volume = s
        .engine
        .docker()
        .create_volume(spec.request())
        .await
        .unwrap()
        .name;
    let mut created = Created::default();
    created.begin(ObjectKind::Volume, &volume, &spec.labels);
    created.answered(ObjectKind::Volume, &volume, Some(&volume));
    let loader = allocation.name(Kind::Loader);
    let loader_labels = allocation.labels(Kind::Loader);
    // A container create cut before the engine answered.
    created.begin(ObjectKind::Container, &loader, &loader_labels);
    let left = created.remove_once(&s.engine).await;
    assert!(
        s.engine.docker().inspect_volume(&volume).await.is_ok(),
        "the volume waits while a container create may still land: {left:?}"
    );
    // The cut create lands now.
    let body = cordon::profile::helper_body(
        &s.image,
        &allocation,
        Kind::Loader,
        vec![cordon_contract::paths::INIT.into(), "keeper".into()],
        vec![volume_mount(
            &spec,
            cordon_contract::paths::CONTROL_DIR,
            false,
            None,
        )],
    );
    s.engine
        .docker()
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(loader.clone()),
                ..Default::default()
            }),
            body,
        )
        .await
        .unwrap();
    left.remove_all(&s.engine, Duration::from_secs(20))
        .await
        .expect("the landed create is resolved, then the volume removed");
    assert!(s.engine.docker().inspect_volume(&volume).await.is_err());
    s.assert_clean().await;

    // A volume the engine made for a mount without labels (what older mounts did).
    s.making_unlabelled_volumes().await;
    let other = cordon::storage::new_allocation(&s.engine, &s.owner, "r")
        .await
        .unwrap();
    let orphan = other.name(Kind::Input);
    let bare = VolumeSpec {
        name: orphan.clone(),
        ..Default::default()
    };
    let mut body = cordon::profile::helper_body(
        &s.image,
        &other,
        Kind::Loader,
        vec![cordon_contract::paths::INIT.into(), "keeper".into()],
        vec![volume_mount(
            &bare,
            cordon_contract::paths::INPUT_DIR,
            false,
            None,
        )],
    );
    if let Some(mount) = body
        .host_config
        .as_mut()
        .and_then(|h| h.mounts.as_mut())
        .and_then(|m| m.first_mut())
    {
        mount.volume_options = None;
    }
    s.engine
        .docker()
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(other.name(Kind::Loader)),
                ..Default::default()
            }),
            body,
        )
        .await
        .unwrap();
    let made = s.engine.docker().inspect_volume(&orphan).await.unwrap();
    assert!(made.labels.is_empty(), "the engine made it unlabelled");
    let report = cordon::task::recover::recover(&s.ctl, &s.owner, false)
        .await
        .expect("recovery");
    assert!(
        report
            .removed
            .iter()
            .any(|r| r == &format!("volume {orphan}")),
        "{report:?}"
    );
    s.made_unlabelled_volumes();
    s.finish().await;
}

/// A repository whose tree has gitlinks (submodules) at `paths`, and its storage.
async fn storage_with_gitlinks(s: &Owned, paths: &[&str]) -> StorageHandle {
    let repo = Repo::new("gitlinks");
    repo.write("README.md", b"# gitlinks\n", 0o644);
    repo.git(&["add", "-A"]);
    for path in paths {
        let info = format!("160000,1234567890123456789012345678901234567890,{path}");
        repo.git(&["update-index", "--add", "--cacheinfo", &info]);
    }
    repo.git(&["commit", "--quiet", "-m", "gitlinks"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, &head))
        .await
        .expect("task storage")
}

/// Execute and fix mask every gitlink their tree check listed, read-only: the agent cannot write
/// beneath one nor plant `.git` there, while it still writes its work tree beside it. Without a
/// check they are refused before anything is made; a recovered handle (no head, no gitlinks
/// recorded) runs once checked at its base; a nested gitlink runs with its parents pinned
/// (`suite::tree_check` proves the pins hold); read-only phases need no mask.
#[tokio::test]
async fn execute_and_fix_mask_every_gitlink_their_check_listed() {
    let s = owned("t-gitlink").await;
    let storage = storage_with_gitlinks(&s, &["sub", "vendored"]).await;
    for phase in [Phase::Execute, Phase::Fix] {
        for gitlink in ["sub", "vendored"] {
            let prompt = format!("cordon-fake:write-gitlink {gitlink}");
            let result = run(&s, request(&storage, phase, &prompt)).await;
            assert_eq!(
                result.answer.as_deref(),
                Some(
                    format!("write-gitlink: beneath /work/{gitlink}: wrote 0 of 3; beside: wrote")
                        .as_str()
                ),
                "{phase}: {result:#?}"
            );
        }
    }
    // No check: refused before anything is made.
    for phase in [Phase::Execute, Phase::Fix] {
        let err = start(
            &s.ctl,
            capture(&s.ctl, request(&storage, phase, "hello")).unwrap(),
            None,
            options(&s.image),
        )
        .await
        .unwrap_err();
        assert_eq!(err.id(), "tree-check", "{err}");
    }
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "unchecked starts").await;
    // A recovered handle knows neither its head nor its gitlinks: the check at its base does.
    let mut recovered = storage.clone();
    recovered.gitlinks = None;
    recovered.head = None;
    let base = storage.head.clone().unwrap();
    let check = s
        .ctl
        .task(&at_base(&recovered, &base))
        .expect("a task")
        .check_tree(&[], DEADLINE)
        .await
        .expect("the recovered handle's tree is its base's");
    assert_eq!(check.gitlinks, ["sub", "vendored"]);
    let mut checked = request(&recovered, Phase::Execute, "cordon-fake:write-gitlink sub");
    checked.tree_check = Some(check);
    let result = run(&s, checked).await;
    assert_eq!(
        result.answer.as_deref(),
        Some("write-gitlink: beneath /work/sub: wrote 0 of 3; beside: wrote"),
        "{result:#?}"
    );
    let read_only = run(&s, request(&recovered, Phase::Questions, "hello")).await;
    assert!(read_only.answer.is_some(), "{read_only:#?}");
    release(&s, &storage).await;

    let nested = storage_with_gitlinks(&s, &["top", "deep/er/module"]).await;
    for gitlink in ["top", "deep/er/module"] {
        let prompt = format!("cordon-fake:write-gitlink {gitlink}");
        let result = run(&s, request(&nested, Phase::Execute, &prompt)).await;
        assert_eq!(
            result.answer.as_deref(),
            Some(
                format!("write-gitlink: beneath /work/{gitlink}: wrote 0 of 3; beside: wrote")
                    .as_str()
            ),
            "{result:#?}"
        );
    }
    let planning = run(&s, request(&nested, Phase::Questions, "hello")).await;
    assert!(planning.answer.is_some(), "{planning:#?}");
    finish(s, &nested).await;
}

/// Each storage allocation runs as a uid of its own, so the kernel's per-user counters are not
/// shared: while one invocation holds every inotify instance its uid may have, another
/// invocation (on other storage) still gets one.
#[tokio::test]
async fn one_invocation_exhausting_inotify_leaves_another_its_own() {
    let s = owned("t-inotify").await;
    let (hog_storage, other_storage) = tokio::join!(storage(&s), storage(&s));
    assert_ne!(hog_storage.uid, other_storage.uid);
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hog = start(
        &s.ctl,
        capture(
            &s.ctl,
            request(&hog_storage, Phase::Questions, "cordon-fake:inotify-hog 12"),
        )
        .unwrap(),
        None,
        options(&s.image),
    )
    .await
    .unwrap();
    assert_eq!(hog.reached(Step::Running).await, Step::Running);
    // Time for the hog to take them all (it needs milliseconds).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other = run(
        &s,
        request(&other_storage, Phase::Questions, "cordon-fake:inotify-one"),
    )
    .await;
    assert_eq!(hog.step(), Step::Running, "the hog still holds them");
    let hogged = hog.settled().await;
    assert_eq!(
        hogged.answer.as_deref(),
        Some(format!("inotify-hog: held {limit} then errno {}", libc::EMFILE).as_str()),
        "{hogged:#?}"
    );
    assert_eq!(
        other.answer.as_deref(),
        Some("inotify-one: ok"),
        "{other:#?}"
    );
    task::remove(&s.ctl, &hog_storage).await.unwrap();
    finish(s, &other_storage).await;
}

/// An approved command of the test image's probe.
pub(super) fn approved(image: &str, argv0: &str) -> cordon_contract::command::ApprovedCommand {
    cordon_contract::command::ApprovedCommand {
        name: "test".to_owned(),
        description: "the tests".to_owned(),
        argv: vec![
            argv0.to_owned(),
            "workload".to_owned(),
            "exit".to_owned(),
            "0".to_owned(),
        ],
        image: image.to_owned(),
        env: vec![],
        workdir: "/work".to_owned(),
        deadline_secs: 30,
        output_bytes: 4096,
        scratch: cordon_contract::command::Scratch {
            bytes: 1 << 20,
            inodes: 64,
        },
        runs: 1,
        writes: cordon_contract::command::Writes::None,
    }
}

/// Approved commands are refused where no process may run (planning and questions: `start`
/// fails before allocating anything), and a toolchain image without the argv's program settles
/// an execute invocation as `command-image` before its agent exists; with its program there, the
/// relay listens, the agent (the fake CLI, which calls nothing) runs beside it and settles, and
/// nothing is left either way.
#[tokio::test]
async fn approved_commands_are_refused_where_no_process_runs_and_need_their_program() {
    let s = owned("t-commands").await;
    let storage = storage(&s).await;
    let with = |argv0: &str| Options {
        commands: vec![approved(&s.image, argv0)],
        ..options(&s.image)
    };
    let dir =
        std::env::temp_dir().join(format!("cordon-commands-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("schema.json");
    std::fs::write(&schema, br#"{"type":"object"}"#).unwrap();
    for phase in [Phase::Planning, Phase::Questions] {
        let mut req = request(&storage, phase, "plan");
        if phase == Phase::Planning {
            req.schema = Some(schema.clone());
        }
        let captured = capture(&s.ctl, req).expect("capture");
        let err = start(&s.ctl, captured, None, with(cordon_contract::paths::PROBE))
            .await
            .unwrap_err();
        assert_eq!(err.id(), "invalid-input", "{phase}: {err}");
        assert!(err.to_string().contains("runs no process"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "refused starts").await;
    let mut missing = request(&storage, Phase::Execute, "go");
    missing.tree_check =
        cordon_tests::tree_check_for(&s.ctl, &s.image, &storage, Phase::Execute).await;
    let handle = start(
        &s.ctl,
        capture(&s.ctl, missing).unwrap(),
        None,
        with("/usr/bin/no-such-test-runner"),
    )
    .await
    .expect("start");
    let result = handle.settled().await;
    assert_eq!(failure(&result), Some("command-image"), "{result:#?}");
    let mut present = request(&storage, Phase::Execute, "go");
    present.tree_check =
        cordon_tests::tree_check_for(&s.ctl, &s.image, &storage, Phase::Execute).await;
    let handle = start(
        &s.ctl,
        capture(&s.ctl, present).unwrap(),
        None,
        with(cordon_contract::paths::PROBE),
    )
    .await
    .expect("start");
    let result = handle.settled().await;
    assert!(result.failure.is_none(), "{result:#?}");
    assert!(result.commands.is_empty());
    finish(s, &storage).await;
}

/// A call the agent makes runs, and is recorded; a command container whose removal is never
/// confirmed (every removal failing once the agent runs, the fake CLI calling after that) is in
/// the settled result's `unreleased` with its kind and owner labels, and removing what was
/// reported leaves nothing.
#[tokio::test]
async fn a_command_container_that_cannot_be_removed_is_unreleased() {
    let s = owned("t-command-left").await;
    let storage = storage(&s).await;
    let run = |prompt: &'static str, window: Duration| {
        let (s, storage) = (&s, &storage);
        async move {
            let mut req = request(storage, Phase::Execute, prompt);
            req.tree_check =
                cordon_tests::tree_check_for(&s.ctl, &s.image, storage, Phase::Execute).await;
            let mut opts = Options {
                commands: vec![approved(&s.image, cordon_contract::paths::PROBE)],
                ..options(&s.image)
            };
            opts.cleanup_window = window;
            opts.first_cleanup = Duration::from_secs(5);
            start(&s.ctl, capture(&s.ctl, req).unwrap(), None, opts)
                .await
                .expect("start")
        }
    };
    // The call made and answered: the model sees the exit, the result records it.
    let result = run("cordon-fake:command test", Duration::from_secs(30))
        .await
        .settled()
        .await;
    assert!(result.failure.is_none(), "{result:#?}");
    let answer = result.answer.as_deref().unwrap_or_default();
    assert!(answer.starts_with("command: exit 0"), "{answer}");
    assert_eq!(result.commands.len(), 1, "{result:#?}");
    assert_eq!(result.commands[0].exit, Some(0));
    assert!(result.unreleased.is_empty(), "{result:#?}");

    // Removal fails from the agent's start on; the fake calls 3 s later.
    let handle = run("cordon-fake:command test 3000", Duration::from_secs(3)).await;
    handle.reached(Step::Running).await;
    s.engine.inject_removal_failures(usize::MAX);
    let result = handle.settled().await;
    s.engine.inject_removal_failures(0);
    assert_eq!(result.commands.len(), 1, "{result:#?}");
    assert_eq!(result.commands[0].exit, Some(0), "{result:#?}");
    let command = result
        .unreleased
        .iter()
        .find(|l| {
            l.labels.get(cordon::labels::KIND).map(String::as_str)
                == Some(cordon::labels::Kind::Command.as_str())
        })
        .unwrap_or_else(|| panic!("no command container unreleased: {result:#?}"));
    assert_eq!(command.kind, cordon::engine::pending::ObjectKind::Container);
    assert!(command.id.is_some(), "{command:?}");
    assert_eq!(
        command
            .labels
            .get(cordon::labels::OWNER)
            .map(String::as_str),
        Some(s.owner.as_str())
    );
    // What was reported is exactly what is left: removing it by id leaves only the storage.
    remove_reported(&s.engine, &result.unreleased).await;
    finish(s, &storage).await;
}

/// Remove, by id, the containers and volumes a result reported unreleased.
async fn remove_reported(
    engine: &cordon::Engine,
    unreleased: &[cordon::engine::pending::Leftover],
) {
    use cordon::engine::pending::{Created, ObjectKind};
    let ids = |kind: ObjectKind| {
        unreleased
            .iter()
            .filter(|l| l.kind == kind)
            .filter_map(|l| l.id.clone())
            .collect()
    };
    let reported = Created {
        containers: ids(ObjectKind::Container),
        volumes: ids(ObjectKind::Volume),
        ..Default::default()
    };
    reported
        .remove_all(engine, Duration::from_secs(30))
        .await
        .unwrap();
}
