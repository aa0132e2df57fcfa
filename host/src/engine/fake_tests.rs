//! What cleanup, recovery and allocation decide, against the recording fake (no engine): the
//! retry window, pending creates, the removal order, recovery's classification acted out, and
//! allocation-id and uid collisions. Time is paused: a retry window of seconds passes at once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::fake::{Cut, FakeContainer, FakeNetwork, FakeVolume, Object, Recording, Script};
use super::objects;
use super::pending::{Created, NETWORK_SETTLE, PENDING_GRACE};
use super::Engine;
use crate::controller::Controller;
use crate::error::Error;
use crate::labels::{Allocation, Kind, Owner, ALLOCATION, KIND, OWNER};
use crate::profile::tmpfs_volume_options;
use crate::storage::{self, TaskStorage, DEFAULT_METADATA, DEFAULT_WORK};
use crate::uids::{Uid, UidRange};

fn engine(fake: &Arc<Recording>) -> Engine {
    Engine::faked(fake.clone())
}

fn allocation(owner: &str, uid: u32) -> Allocation {
    let owner = Owner::new(owner).expect("a plain token");
    Allocation::new(&owner, "a1", Uid::new(uid).expect("in range")).expect("a plain attempt")
}

fn volume(name: &str, labels: HashMap<String, String>) -> Object {
    Object::Volume(FakeVolume {
        name: name.to_owned(),
        labels,
        options: HashMap::new(),
    })
}

fn container(
    name: &str,
    labels: HashMap<String, String>,
    volumes: &[&str],
    network: Option<&str>,
) -> Object {
    Object::Container(FakeContainer {
        id: format!("id-{name}"),
        name: name.to_owned(),
        labels,
        running: true,
        volumes: volumes.iter().map(|v| (*v).to_owned()).collect(),
        network: network.map(str::to_owned),
    })
}

fn network(name: &str, labels: HashMap<String, String>) -> Object {
    Object::Network(FakeNetwork {
        id: format!("id-{name}"),
        name: name.to_owned(),
        labels,
    })
}

fn no_labels() -> HashMap<String, String> {
    HashMap::new()
}

/// The removals in the log, in order.
fn removals(fake: &Recording) -> Vec<String> {
    fake.calls_of("remove ")
}

#[tokio::test(start_paused = true)]
async fn removal_goes_containers_one_at_a_time_off_a_network_then_networks_then_volumes() {
    let fake = Arc::new(Recording::new(
        vec![
            network("n", no_labels()),
            volume("v1", no_labels()),
            volume("v2", no_labels()),
            container("a", no_labels(), &["v1"], Some("n")),
            container("b", no_labels(), &["v1", "v2"], Some("n")),
        ],
        Script::default(),
    ));
    let record = Created {
        containers: vec!["id-a".into(), "id-b".into()],
        networks: vec!["id-n".into()],
        volumes: vec!["v1".into(), "v2".into()],
        ..Created::default()
    };
    let start = Instant::now();
    record
        .remove_all(&engine(&fake), Duration::from_secs(10))
        .await
        .expect("removed");
    assert_eq!(
        removals(&fake),
        [
            "remove container id-a",
            "remove container id-b",
            "remove network id-n",
            "remove volume v1",
            "remove volume v2"
        ]
    );
    // A pause between two containers leaving the network (moby/libnetwork#2649), none after the
    // last.
    assert!(
        start.elapsed() >= NETWORK_SETTLE && start.elapsed() < 2 * NETWORK_SETTLE,
        "{:?}",
        start.elapsed()
    );
    assert!(fake.holds().is_empty(), "{:?}", fake.holds());
}

/// Containers made on no network at all leave side by side, without a pause, beside the first
/// of those that may be on the network; those wait their turn, each followed by the pause. A
/// container not recorded off the network (adopted, recovered) is taken to be on it.
#[tokio::test(start_paused = true)]
async fn containers_off_the_network_go_side_by_side_before_those_on_it() {
    let fake = Arc::new(Recording::new(
        vec![
            network("n", no_labels()),
            volume("v", no_labels()),
            container("loader", no_labels(), &["v"], None),
            container("agent", no_labels(), &["v"], None),
            container("proxy", no_labels(), &["v"], Some("n")),
            container("adopted", no_labels(), &[], None),
        ],
        Script::default(),
    ));
    let record = Created {
        containers: ["loader", "proxy", "agent", "adopted"]
            .map(|c| format!("id-{c}"))
            .to_vec(),
        networks: vec!["id-n".into()],
        volumes: vec!["v".into()],
        off_network: ["id-loader", "id-agent"].map(str::to_owned).into(),
        ..Created::default()
    };
    let start = Instant::now();
    record
        .remove_all(&engine(&fake), Duration::from_secs(10))
        .await
        .expect("removed");
    let order = removals(&fake);
    let mut first_three = order[..3].to_vec();
    first_three.sort();
    assert_eq!(
        first_three,
        [
            "remove container id-agent",
            "remove container id-loader",
            "remove container id-proxy"
        ]
    );
    assert_eq!(
        order[3..],
        [
            "remove container id-adopted",
            "remove network id-n",
            "remove volume v"
        ]
    );
    // One pause between the two that may be on the network, none for the others.
    assert_eq!(start.elapsed(), NETWORK_SETTLE);
    assert!(fake.holds().is_empty(), "{:?}", fake.holds());
}

/// The fixtures an invocation removes first (to time them) leave one at a time, each followed by
/// the pause, so the proxy's removal after them is a pause away too; those removed leave the
/// record, and one the engine refuses stays in it for the removal proper.
#[tokio::test(start_paused = true)]
async fn fixtures_removed_first_each_wait_the_pause_and_leave_the_record() {
    let fake = Arc::new(Recording::new(
        vec![
            network("n", no_labels()),
            container("vendor", no_labels(), &[], Some("n")),
            container("resolver", no_labels(), &[], Some("n")),
            container("proxy", no_labels(), &[], Some("n")),
        ],
        Script {
            stuck: BTreeSet::from(["id-resolver".to_owned()]),
            ..Script::default()
        },
    ));
    let engine = engine(&fake);
    let mut record = Created {
        containers: ["vendor", "resolver", "proxy"]
            .map(|c| format!("id-{c}"))
            .to_vec(),
        networks: vec!["id-n".into()],
        ..Created::default()
    };
    let first = ["id-vendor", "id-resolver", "id-gone"].map(str::to_owned);
    let start = Instant::now();
    record.remove_first(&engine, &first).await;
    // Not in the record: not touched, no pause.
    assert_eq!(start.elapsed(), 2 * NETWORK_SETTLE);
    assert_eq!(
        removals(&fake),
        ["remove container id-vendor", "remove container id-resolver"]
    );
    assert_eq!(record.containers, ["id-resolver", "id-proxy"]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_removal_is_retried_each_second_within_the_window() {
    let fake = Arc::new(Recording::new(
        vec![volume("v", no_labels())],
        Script::default(),
    ));
    let engine = engine(&fake);
    engine.inject_removal_failures(3);
    let start = Instant::now();
    Created {
        volumes: vec!["v".into()],
        ..Created::default()
    }
    .remove_all(&engine, Duration::from_secs(10))
    .await
    .expect("removed on the fourth pass");
    // Three refused passes, a second apart; the injected refusals never reach the engine.
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(removals(&fake), ["remove volume v"]);
    assert!(fake.holds().is_empty());
}

#[tokio::test(start_paused = true)]
async fn removal_refused_past_the_window_names_what_is_left_and_touches_it_again_later() {
    let fake = Arc::new(Recording::new(
        vec![
            volume("v", no_labels()),
            container("c", no_labels(), &["v"], None),
        ],
        Script {
            stuck: BTreeSet::from(["id-c".to_owned()]),
            ..Script::default()
        },
    ));
    let engine = engine(&fake);
    let record = Created {
        containers: vec!["id-c".into()],
        volumes: vec!["v".into()],
        ..Created::default()
    };
    let start = Instant::now();
    let refused = record.remove_all(&engine, Duration::from_secs(5)).await;
    let waited = start.elapsed();
    match refused {
        Err(Error::Unreleased(left)) => {
            assert_eq!(left, ["container id-c", "volume v"]);
        }
        other => panic!("expected unreleased, got {other:?}"),
    }
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(7),
        "{waited:?}"
    );
    // The volume was never tried while its container stood.
    assert!(fake.calls_of("remove volume").is_empty());
    assert_eq!(fake.calls_of("remove container").len(), 6);
    assert_eq!(fake.holds(), ["container c", "volume v"]);
    fake.unstick("id-c");
    record
        .remove_all(&engine, Duration::from_secs(5))
        .await
        .expect("removed once the engine lets go");
    assert!(fake.holds().is_empty());
}

/// Create a container named `name` mounting `volumes`, recording it in `created`.
async fn create(
    engine: &Engine,
    created: &mut Created,
    name: &str,
    volumes: &[&str],
) -> crate::error::Result<String> {
    let mounts = volumes
        .iter()
        .map(|v| bollard::models::Mount {
            typ: Some(bollard::models::MountType::VOLUME),
            source: Some((*v).to_owned()),
            target: Some(format!("/{v}")),
            ..Default::default()
        })
        .collect();
    let body = bollard::models::ContainerCreateBody {
        labels: Some(HashMap::from([(OWNER.to_owned(), "t".to_owned())])),
        host_config: Some(bollard::models::HostConfig {
            mounts: Some(mounts),
            ..Default::default()
        }),
        ..Default::default()
    };
    objects::create_container(engine, name, body, &created.shared()).await
}

fn cut(name: &str, how: Cut) -> Script {
    Script {
        cut: HashMap::from([(name.to_owned(), how)]),
        ..Script::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_create_that_landed_is_removed_by_name_when_its_labels_are_ours() {
    let fake = Arc::new(Recording::new(
        vec![],
        cut("c", Cut::LandsAfter(Duration::ZERO)),
    ));
    let engine = engine(&fake);
    let mut created = Created::default();
    let cut = create(&engine, &mut created, "c", &[]).await;
    assert!(cut.is_err() && created.pending.len() == 1, "{created:?}");
    assert_eq!(fake.holds(), ["container c"]);
    let id = fake.id_of("c").expect("landed");
    created
        .remove_all(&engine, Duration::from_secs(10))
        .await
        .expect("removed");
    assert_eq!(removals(&fake), [format!("remove container {id}")]);
    assert!(fake.holds().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_refused_create_leaves_nothing_pending() {
    let fake = Arc::new(Recording::new(
        vec![container("c", no_labels(), &[], None)],
        Script::default(),
    ));
    let engine = engine(&fake);
    let mut created = Created::default();
    assert!(create(&engine, &mut created, "c", &[]).await.is_err());
    assert!(created.is_empty(), "the engine answered: {created:?}");
}

#[tokio::test(start_paused = true)]
async fn a_name_someone_else_holds_after_a_cut_create_is_never_touched() {
    let fake = Arc::new(Recording::new(vec![], cut("c", Cut::Never)));
    let engine = engine(&fake);
    let mut created = Created::default();
    assert!(create(&engine, &mut created, "c", &[]).await.is_err());
    // Another process takes the name (with its own labels) before cleanup looks.
    let labels = HashMap::from([(OWNER.to_owned(), "u".to_owned())]);
    fake.add(container("c", labels, &[], None));
    created
        .remove_all(&engine, Duration::from_secs(10))
        .await
        .expect("nothing of ours is left");
    assert!(removals(&fake).is_empty(), "{:?}", fake.log());
    assert_eq!(fake.holds(), ["container c"]);
}

#[tokio::test(start_paused = true)]
async fn a_cut_create_with_nothing_there_is_awaited_through_the_grace_then_dropped() {
    let fake = Arc::new(Recording::new(vec![], cut("c", Cut::Never)));
    let engine = engine(&fake);
    let mut created = Created::default();
    assert!(create(&engine, &mut created, "c", &[]).await.is_err());
    let start = Instant::now();
    created
        .remove_all(&engine, Duration::from_secs(10))
        .await
        .expect("dropped after the grace");
    assert!(start.elapsed() >= PENDING_GRACE, "{:?}", start.elapsed());
    assert!(fake.calls_of("inspect container c").len() >= 3);
}

#[tokio::test(start_paused = true)]
async fn a_cut_create_landing_within_the_grace_is_still_removed() {
    let fake = Arc::new(Recording::new(
        vec![],
        cut("c", Cut::LandsAfter(Duration::from_secs(2))),
    ));
    let engine = engine(&fake);
    let mut created = Created::default();
    assert!(create(&engine, &mut created, "c", &[]).await.is_err());
    assert!(fake.holds().is_empty(), "not yet");
    created
        .remove_all(&engine, Duration::from_secs(10))
        .await
        .expect("removed once it landed");
    assert_eq!(fake.calls_of("remove container").len(), 1);
    assert!(fake.holds().is_empty(), "{:?}", fake.holds());
}

/// The engine makes a missing named volume for a container create that lands after the volume was
/// removed: cleanup must not remove a volume while a container create of its record is unresolved.
#[tokio::test(start_paused = true)]
async fn volumes_wait_for_an_unresolved_container_create_so_it_cannot_bring_them_back() {
    let fake = Arc::new(Recording::new(
        vec![],
        cut("c", Cut::LandsAfter(Duration::from_secs(2))),
    ));
    let engine = engine(&fake);
    let mut created = Created::default();
    let request = bollard::models::VolumeCreateRequest {
        name: Some("v".into()),
        ..Default::default()
    };
    objects::create_volume(&engine, request, &created.shared())
        .await
        .expect("made");
    assert!(create(&engine, &mut created, "c", &["v"]).await.is_err());
    created
        .remove_all(&engine, Duration::from_secs(10))
        .await
        .expect("removed");
    let removed = removals(&fake);
    let container = removed
        .iter()
        .position(|r| r.starts_with("remove container"));
    let volume = removed.iter().position(|r| r == "remove volume v");
    assert!(container < volume && container.is_some(), "{removed:?}");
    assert!(fake.holds().is_empty(), "{:?}", fake.holds());
}

/// Storage of `a` as the engine holds it: a keeper (running, final name or not), work and
/// metadata volumes with their areas.
fn storage_of(a: &Allocation, keeper_named: bool) -> Vec<Object> {
    let tmpfs = |kind: Kind| {
        Object::Volume(FakeVolume {
            name: a.name(kind),
            labels: a.labels(kind),
            options: tmpfs_volume_options(DEFAULT_WORK, 0o755, a.uid),
        })
    };
    let keeper_name = if keeper_named {
        a.name(Kind::Keeper)
    } else {
        a.seeding_keeper_name()
    };
    vec![
        tmpfs(Kind::Work),
        tmpfs(Kind::Metadata),
        container(
            &keeper_name,
            a.labels(Kind::Keeper),
            &[&a.name(Kind::Work), &a.name(Kind::Metadata)],
            None,
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn recovery_removes_in_order_hands_back_intact_storage_and_touches_nothing_else() {
    // An owner token no staging directory of this machine carries (recovery removes the owner's).
    let intact = allocation("t-fake-recovery", 1_100_001);
    let interrupted = allocation("t-fake-recovery", 1_100_002);
    let foreign = allocation("other", 1_100_003);
    let mut objects = storage_of(&intact, true);
    objects.extend(storage_of(&interrupted, false));
    objects.extend(storage_of(&foreign, false));
    let net = intact.name(Kind::Network);
    objects.push(network(&net, intact.labels(Kind::Network)));
    objects.push(container(
        &intact.name(Kind::Agent),
        intact.labels(Kind::Agent),
        &[&intact.name(Kind::Control)],
        Some(&net),
    ));
    objects.push(volume(
        &intact.name(Kind::Control),
        intact.labels(Kind::Control),
    ));
    let mut half = intact.labels(Kind::Input);
    half.remove(crate::labels::ATTEMPT);
    objects.push(volume("half-labelled", half));
    objects.push(volume(
        "unowned",
        HashMap::from([(KIND.to_owned(), Kind::Work.as_str().to_owned())]),
    ));
    let fake = Arc::new(Recording::new(objects, Script::default()));
    let ctl = Controller::new(engine(&fake));
    let report = crate::task::recover::recover(&ctl, &intact.owner, true)
        .await
        .expect("recovered");

    assert_eq!(report.storage.len(), 1, "{report:#?}");
    assert_eq!(report.storage[0].allocation, intact.id);
    assert_eq!(report.storage[0].work, DEFAULT_WORK);
    let agent = fake_id(&intact.name(Kind::Agent));
    let seeding = fake_id(&interrupted.seeding_keeper_name());
    assert_eq!(
        removals(&fake),
        [
            format!("remove container {agent}"),
            format!("remove container {seeding}"),
            format!("remove network id-{net}"),
            format!("remove volume {}", intact.name(Kind::Control)),
            format!("remove volume {}", interrupted.name(Kind::Work)),
            format!("remove volume {}", interrupted.name(Kind::Metadata)),
        ]
    );
    assert!(report.untouched.iter().any(|u| u.contains("half-labelled")));
    assert!(report.unowned.iter().any(|u| u.contains("unowned")));
    assert_eq!(report.foreign.len(), 3, "{report:#?}");
    let mut kept: Vec<String> = storage_of(&intact, true)
        .into_iter()
        .chain(storage_of(&foreign, false))
        .map(|o| match o {
            Object::Container(c) => format!("container {}", c.name),
            Object::Volume(v) => format!("volume {}", v.name),
            Object::Network(n) => format!("network {}", n.name),
        })
        .chain([
            "volume half-labelled".to_owned(),
            "volume unowned".to_owned(),
        ])
        .collect();
    kept.sort();
    assert_eq!(fake.holds(), kept);
}

fn fake_id(name: &str) -> String {
    format!("id-{name}")
}

/// A task's storage made against `fake` for `a`.
async fn make_storage(fake: &Arc<Recording>, a: &Allocation) -> crate::error::Result<TaskStorage> {
    let (work, metadata) = storage::task_volume_requests(a, DEFAULT_WORK, DEFAULT_METADATA);
    TaskStorage::create_checked(
        &engine(fake),
        a,
        "sha256:image",
        (work, DEFAULT_WORK),
        (metadata, DEFAULT_METADATA),
        cordon_contract::paths::METADATA,
        cordon_contract::paths::METADATA,
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn storage_is_made_held_by_a_running_keeper_and_removed_whole() {
    let a = allocation("o", 1_100_001);
    let fake = Arc::new(Recording::new(vec![], Script::default()));
    let storage = make_storage(&fake, &a).await.expect("made");
    assert_eq!(
        fake.holds(),
        [
            format!("container {}", a.seeding_keeper_name()),
            format!("volume {}", a.name(Kind::Metadata)),
            format!("volume {}", a.name(Kind::Work)),
        ]
    );
    assert_eq!(fake.calls_of("start container").len(), 1);
    storage.remove(&engine(&fake)).await.expect("removed");
    assert!(fake.holds().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_allocation_id_another_object_carries_is_refused_and_what_was_made_removed() {
    let a = allocation("o", 1_100_001);
    let stray = HashMap::from([(ALLOCATION.to_owned(), a.id.to_string())]);
    let fake = Arc::new(Recording::new(
        vec![volume("stray", stray)],
        Script::default(),
    ));
    match make_storage(&fake, &a).await {
        Err(Error::AllocationInUse(what)) => assert!(what.contains("volume stray"), "{what}"),
        other => panic!("expected allocation-in-use, got {other:?}"),
    }
    assert_eq!(fake.holds(), ["volume stray"]);
}

#[tokio::test(start_paused = true)]
async fn a_uid_another_allocation_holds_is_refused_and_what_was_made_removed() {
    let a = allocation("o", 1_100_001);
    let b = allocation("o", 1_100_001);
    let fake = Arc::new(Recording::new(
        vec![volume(&b.name(Kind::Work), b.labels(Kind::Work))],
        Script::default(),
    ));
    match make_storage(&fake, &a).await {
        Err(Error::Uid { id, reason }) => {
            assert_eq!(id, "uid-in-use");
            assert!(reason.contains(&b.name(Kind::Work)), "{reason}");
        }
        other => panic!("expected uid-in-use, got {other:?}"),
    }
    assert_eq!(fake.holds(), [format!("volume {}", b.name(Kind::Work))]);
}

#[tokio::test(start_paused = true)]
async fn a_new_uid_is_none_a_live_object_carries() {
    // Uids go in pairs: an allocation's (even) and its proxy's, the next one.
    let first = UidRange::default().first;
    assert_eq!(first % 2, 0);
    let taken = |uid: u32| {
        let a = allocation("o", uid);
        volume(&a.name(Kind::Work), a.labels(Kind::Work))
    };
    let range = UidRange {
        first,
        last: first + 3,
    };
    let pick = |live: Vec<Object>| {
        let fake = Arc::new(Recording::new(live, Script::default()));
        async move { storage::pick_uid(&engine(&fake), &range).await }
    };
    for _ in 0..8 {
        let uid = pick(vec![taken(first)]).await.expect("one pair is free");
        assert_eq!(uid.get(), first + 2);
        assert_eq!(uid.proxy(), first + 3);
    }
    // Anywhere in a wide range, an allocation's uid is even: its pair is never split.
    let empty = Arc::new(Recording::new(vec![], Script::default()));
    for _ in 0..64 {
        let uid = storage::pick_uid(&engine(&empty), &UidRange::default())
            .await
            .expect("a free uid");
        assert_eq!(uid.get() % 2, 0, "{uid}");
    }
    for live in [
        // Both pairs held.
        vec![taken(first), taken(first + 2)],
        // An older allocation on an odd uid: its proxy takes first + 2, so that pair is not free.
        vec![taken(first), taken(first + 1)],
        // The second pair's proxy uid held.
        vec![taken(first), taken(first + 3)],
    ] {
        match pick(live).await {
            Err(Error::Uid { id, .. }) => assert_eq!(id, "uid-range-exhausted"),
            other => panic!("expected uid-range-exhausted, got {other:?}"),
        }
    }
}
