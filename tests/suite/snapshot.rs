//! Shared snapshots on the real engine: one seeded copy read by many read-only invocations at
//! once, each as a uid of its own; refused to a phase that writes, to approved commands, to a
//! handle without its digest or with a mark its keeper contradicts, and to any invocation once
//! its tree changed; found by recovery; removed only when its last user is gone.

use std::time::{Duration, Instant};

use cordon::invoke::{capture, start, Handle, ImageSource, Options, Request, Step, StopReason};
use cordon::labels::{Kind, ALLOCATION, KIND, UID};
use cordon::task::{self, StorageHandle};
use cordon_contract::{Phase, Vendor};
use cordon_tests::{owned, prepare_request, Owned, Repo};

/// A small committed repository, seeded as a shared snapshot of the guard's owner.
async fn snapshot(s: &Owned) -> StorageHandle {
    let repo = Repo::new("snapshot");
    repo.write("README.md", b"# snapshot\n", 0o644);
    repo.write("src/lib.rs", b"pub fn f() {}\n", 0o644);
    let head = repo.commit();
    let mut request = prepare_request(&s.owner, &repo, &head);
    request.shared = true;
    task::prepare(&s.ctl, &request).await.expect("a snapshot")
}

fn request(storage: &StorageHandle, phase: Phase, prompt: &str) -> Request {
    Request {
        phase,
        vendor: Vendor::Claude,
        prompt: prompt.to_owned(),
        schema: None,
        referenced_code_hash: "code-snapshot".to_owned(),
        deadline: Instant::now() + Duration::from_secs(90),
        network_allowlist: vec![],
        attempt: format!("snap-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        storage: storage.clone(),
        tree_check: None,
    }
}

async fn begin(s: &Owned, request: Request, options: Options) -> cordon::error::Result<Handle> {
    start(
        &s.ctl,
        capture(&s.ctl, request).expect("capture"),
        None,
        options,
    )
    .await
}

fn options(s: &Owned) -> Options {
    Options::new(ImageSource::Id(s.image.clone()))
}

/// The uid the agent container of `handle` runs as once it runs (its label, which the validator
/// holds to the policy's uid: the container itself starts as root for the init).
async fn agent_uid(s: &Owned, handle: &Handle) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    while handle.step() != Step::Running {
        assert!(Instant::now() < until, "never ran: {:?}", handle.step());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = cordon::engine::objects::Listed::with_label(
        &s.engine,
        &format!("{ALLOCATION}={}", handle.allocation()),
    )
    .await
    .expect("list");
    listed
        .containers
        .iter()
        .filter_map(|c| c.labels.as_ref())
        .find(|l| l.get(KIND).is_some_and(|k| k == Kind::Agent.as_str()))
        .and_then(|l| l.get(UID).cloned())
        .expect("the agent container's uid")
}

/// Two invocations hold one snapshot at once, each as a uid of its own (neither the snapshot's
/// nor the other's); a third answers, attested, beside them; a write into it fails. Removal is
/// refused while they hold it, and waits for the last of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_read_by_concurrent_invocations_each_as_its_own_uid_and_outlives_its_users() {
    let s = owned("t-snapshot").await;
    let snap = snapshot(&s).await;
    let digest = snap.snapshot.as_ref().and_then(|x| x.digest.clone());
    assert!(digest.as_deref().is_some_and(|d| d.starts_with("sha256:")));
    assert_eq!(snap.metadata_baseline, None, "a snapshot is never audited");

    let held = [
        begin(
            &s,
            request(&snap, Phase::Questions, "cordon-fake:hang"),
            options(&s),
        ),
        begin(
            &s,
            request(&snap, Phase::Review, "cordon-fake:hang"),
            options(&s),
        ),
    ];
    let held: Vec<Handle> = futures_util::future::try_join_all(held)
        .await
        .expect("both start");
    let users: Vec<String> =
        futures_util::future::join_all(held.iter().map(|h| agent_uid(&s, h))).await;
    let snapshot_user = snap.uid.to_string();
    assert_ne!(users[0], users[1], "each its own uid");
    assert!(
        !users.contains(&snapshot_user),
        "{users:?} vs {snapshot_user}"
    );

    let answered = begin(
        &s,
        request(&snap, Phase::Questions, "what is this?"),
        options(&s),
    )
    .await
    .expect("start")
    .settled()
    .await;
    assert!(answered.answer.is_some(), "{answered:#?}");
    let attestation = answered.attestation.as_ref().expect("attested");
    assert!(
        attestation
            .checks
            .contains(&cordon_contract::Id::SnapshotVerified),
        "{attestation:?}"
    );
    let write = begin(
        &s,
        request(
            &snap,
            Phase::Questions,
            r#"cordon-fake:script [{"write":["src/new.rs","x"]}]"#,
        ),
        options(&s),
    )
    .await
    .expect("start")
    .settled()
    .await;
    let said = format!("{write:?}");
    assert!(said.contains("Read-only file system"), "{said}");

    let busy = task::remove(&s.ctl, &snap)
        .await
        .expect_err("still mounted");
    assert_eq!(busy.id(), "snapshot-in-use", "{busy}");
    // Its keeper says what it is, whatever the handle says.
    let mut unmarked = snap.clone();
    unmarked.snapshot = None;
    let busy = task::remove(&s.ctl, &unmarked)
        .await
        .expect_err("still mounted, unmarked");
    assert_eq!(busy.id(), "snapshot-in-use", "{busy}");
    assert!(
        task::objects_with_allocation(&s.engine, &snap.allocation)
            .await
            .unwrap()
            .len()
            >= 3,
        "a refused removal removes nothing"
    );
    let waiting = {
        let ctl = s.ctl.clone();
        let snap = snap.clone();
        tokio::spawn(
            async move { task::remove_when_unused(&ctl, &snap, Duration::from_secs(60)).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "removal waits for the last user");
    for h in &held {
        h.stop(StopReason::Cancelled);
    }
    for h in &held {
        h.settled().await;
    }
    waiting.await.expect("join").expect("removed once unused");
    s.finish().await;
}

/// Only a read-only phase without approved commands reads a snapshot, only with the digest its
/// prepare recorded, and only while its tree is that digest's; recovery finds it as a snapshot.
/// Each refusal leaves nothing of the invocation behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_refuses_a_writable_phase_commands_no_digest_and_a_changed_tree() {
    let s = owned("t-snaprule").await;
    let snap = snapshot(&s).await;
    let objects = || async {
        let mut all = task::objects_with_allocation(&s.engine, &snap.allocation)
            .await
            .unwrap();
        all.sort();
        all
    };
    let before = objects().await;
    for phase in [Phase::Execute, Phase::Fix] {
        let err = begin(&s, request(&snap, phase, "hi"), options(&s))
            .await
            .expect_err("a writable phase");
        assert_eq!(err.id(), "snapshot-writable-phase", "{phase}: {err}");
    }
    let mut with_commands = options(&s);
    with_commands.commands = vec![super::invoke::approved(
        &s.image,
        cordon_contract::paths::PROBE,
    )];
    let err = begin(&s, request(&snap, Phase::Review, "hi"), with_commands)
        .await
        .expect_err("commands");
    assert_eq!(err.id(), "snapshot-commands", "{err}");

    // The mark is the keeper's to say, not the caller's: the snapshot passed as a task's storage
    // (which would run as its uid and, in execute, write it) and a task's storage passed as a
    // snapshot are refused before anything is made.
    let mut unmarked = snap.clone();
    unmarked.snapshot = None;
    for phase in [Phase::Questions, Phase::Execute] {
        let err = begin(&s, request(&unmarked, phase, "hi"), options(&s))
            .await
            .expect_err("an unmarked snapshot");
        assert_eq!(err.id(), "snapshot-mark", "{phase}: {err}");
        assert!(err.to_string().contains("by its keeper's command"), "{err}");
    }
    let repo = Repo::new("snapshot-own");
    repo.write("README.md", b"# own\n", 0o644);
    let head = repo.commit();
    let mut own = task::prepare(&s.ctl, &prepare_request(&s.owner, &repo, &head))
        .await
        .expect("a task's storage");
    let own_objects = task::objects_with_allocation(&s.engine, &own.allocation)
        .await
        .unwrap()
        .len();
    own.snapshot = snap.snapshot.clone();
    let err = begin(&s, request(&own, Phase::Questions, "hi"), options(&s))
        .await
        .expect_err("a task's storage marked a snapshot");
    assert_eq!(err.id(), "snapshot-mark", "{err}");
    assert_eq!(
        task::objects_with_allocation(&s.engine, &own.allocation)
            .await
            .unwrap()
            .len(),
        own_objects
    );
    // A keeper that is not this storage's (another storage's, or none by that id): nothing can
    // tell what the storage is, so nothing starts.
    for keeper in [own.keeper.clone(), "cordon-keeper-none".to_owned()] {
        let mut elsewhere = snap.clone();
        elsewhere.keeper = keeper;
        let err = begin(&s, request(&elsewhere, Phase::Questions, "hi"), options(&s))
            .await
            .expect_err("no keeper of this storage");
        assert_eq!(err.id(), "snapshot-mark", "{err}");
        assert!(
            err.to_string().contains("no keeper of this storage"),
            "{err}"
        );
    }
    own.snapshot = None;
    task::remove(&s.ctl, &own).await.expect("remove own");

    // Recovery finds it, marked a snapshot, without the digest: unusable until it is given back.
    let found = task::recover::recover_one(&s.engine, &s.owner, &snap.allocation)
        .await
        .expect("recover")
        .expect("intact");
    assert_eq!(
        found.snapshot,
        Some(task::Snapshot { digest: None }),
        "{found:?}"
    );
    let err = begin(&s, request(&found, Phase::Questions, "hi"), options(&s))
        .await
        .expect_err("no digest");
    assert_eq!(err.id(), "snapshot-unverified", "{err}");
    assert_eq!(
        objects().await,
        before,
        "refusals touch nothing of the snapshot"
    );
    cordon_tests::assert_only_storage(&s.engine, &s.owner, "refused starts").await;

    // One byte more in the tree: every init over it refuses, with both digests.
    let storage = snap.storage().expect("storage");
    let mut tar = cordon::archive::Archive::new(Vec::new(), snap.uid.get(), "the planted file");
    tar.file("planted", 0o644, b"x").unwrap();
    storage
        .upload(
            &s.engine,
            cordon_contract::paths::WORK,
            tar.finish().unwrap(),
        )
        .await
        .expect("change the snapshot");
    let changed = begin(&s, request(&snap, Phase::Questions, "hi"), options(&s))
        .await
        .expect("start")
        .settled()
        .await;
    let failure = changed.failure.as_ref().expect("refused");
    assert_eq!(failure.id, "init-refused", "{changed:#?}");
    let recorded = snap
        .snapshot
        .as_ref()
        .and_then(|x| x.digest.clone())
        .unwrap();
    assert!(
        failure.message.contains("snapshot-verified")
            && failure.message.contains(&format!("expected {recorded}")),
        "{failure:?}"
    );
    assert!(changed.answer.is_none());
    task::remove(&s.ctl, &snap).await.expect("remove");
    s.finish().await;
}
