//! Recovery's classification, from listings made up here.

use super::*;

fn owner() -> Owner {
    Owner::new("runner").unwrap()
}

fn labels(owner: &str, kind: Kind, allocation: &uuid::Uuid, uid: &str) -> HashMap<String, String> {
    HashMap::from([
        (OWNER.to_owned(), owner.to_owned()),
        (ATTEMPT.to_owned(), "a1".to_owned()),
        (ALLOCATION.to_owned(), allocation.to_string()),
        (KIND.to_owned(), kind.as_str().to_owned()),
        (UID.to_owned(), uid.to_owned()),
    ])
}

fn seen(kind: ObjectKind, id: &str, labels: HashMap<String, String>, live: bool) -> Seen {
    let options = HashMap::from([("o".to_owned(), "size=8192,nr_inodes=16".to_owned())]);
    Seen {
        object: Labelled {
            kind,
            id: id.to_owned(),
            labels,
        },
        live,
        options,
        snapshot: false,
    }
}

/// Keeper, work and metadata of one allocation.
fn storage(owner: &str, allocation: &uuid::Uuid, keeper_live: bool) -> Vec<Seen> {
    vec![
        seen(
            ObjectKind::Container,
            "keeper",
            labels(owner, Kind::Keeper, allocation, "1500000"),
            keeper_live,
        ),
        seen(
            ObjectKind::Volume,
            "work",
            labels(owner, Kind::Work, allocation, "1500000"),
            false,
        ),
        seen(
            ObjectKind::Volume,
            "meta",
            labels(owner, Kind::Metadata, allocation, "1500000"),
            false,
        ),
    ]
}

#[test]
fn intact_storage_is_handed_back_and_nothing_of_it_removed() {
    let id = uuid::Uuid::new_v4();
    let listing = Listing {
        objects: storage("runner", &id, true),
        unlabelled_volumes: vec![],
    };
    let plan = classify(&listing, &owner(), false);
    assert_eq!(plan.remove, Removal::default());
    let [handle] = plan.report.storage.as_slice() else {
        panic!("{plan:?}")
    };
    assert_eq!((handle.allocation, handle.keeper.as_str()), (id, "keeper"));
    assert_eq!(
        handle.work,
        Area {
            bytes: 8192,
            inodes: 16
        }
    );
    assert_eq!(handle.uid.get(), 1_500_000);
    assert_eq!(handle.metadata_baseline, None);
}

#[test]
fn interrupted_storage_and_invocation_objects_are_removed() {
    let dead = uuid::Uuid::new_v4();
    let invocation = uuid::Uuid::new_v4();
    let mut objects = storage("runner", &dead, false);
    objects.push(seen(
        ObjectKind::Container,
        "agent",
        labels("runner", Kind::Agent, &invocation, "1500000"),
        true,
    ));
    objects.push(seen(
        ObjectKind::Volume,
        "control",
        labels("runner", Kind::Control, &invocation, "1500000"),
        false,
    ));
    objects.push(seen(
        ObjectKind::Network,
        "net",
        labels("runner", Kind::Egress, &invocation, "1500000"),
        false,
    ));
    let engine_made = format!("cordon-input-{invocation}");
    let listing = Listing {
        objects,
        unlabelled_volumes: vec![engine_made.clone()],
    };
    let plan = classify(&listing, &owner(), false);
    assert!(plan.report.storage.is_empty());
    assert_eq!(plan.remove.containers, ["agent", "keeper"]);
    assert_eq!(plan.remove.networks, ["net"]);
    assert_eq!(
        plan.remove.volumes,
        [engine_made.as_str(), "control", "work", "meta"]
    );
}

/// A killed controller's approved-command objects (a command container, the relay, the commands
/// volume) are removed like the rest of its invocation; its storage stays.
#[test]
fn a_killed_controllers_command_objects_are_removed() {
    let kept = uuid::Uuid::new_v4();
    let invocation = uuid::Uuid::new_v4();
    let mut objects = storage("runner", &kept, true);
    for (kind, name, is_container) in [
        (Kind::Command, "command", true),
        (Kind::Relay, "relay", true),
        (Kind::Commands, "commands", false),
    ] {
        objects.push(seen(
            if is_container {
                ObjectKind::Container
            } else {
                ObjectKind::Volume
            },
            name,
            labels("runner", kind, &invocation, "1500000"),
            is_container,
        ));
    }
    let plan = classify(
        &Listing {
            objects,
            unlabelled_volumes: Vec::new(),
        },
        &owner(),
        false,
    );
    assert_eq!(plan.remove.containers, ["command", "relay"], "{plan:?}");
    assert_eq!(plan.remove.volumes, ["commands"], "{plan:?}");
    assert_eq!(plan.report.storage.len(), 1, "{plan:?}");
}

#[test]
fn other_owners_disagreeing_and_unowned_objects_are_never_removed() {
    let id = uuid::Uuid::new_v4();
    let theirs = uuid::Uuid::new_v4();
    let mut objects = storage("other", &theirs, false);
    // Parts of one allocation that name two uids.
    objects.extend(storage("runner", &id, true));
    objects[5]
        .object
        .labels
        .insert(UID.to_owned(), "1600000".to_owned());
    // Incomplete labels, and cordon labels without an owner.
    let mut incomplete = labels("runner", Kind::Agent, &id, "1500000");
    incomplete.remove(ATTEMPT);
    objects.push(seen(ObjectKind::Container, "incomplete", incomplete, true));
    let mut unowned = labels("runner", Kind::Agent, &id, "1500000");
    unowned.remove(OWNER);
    objects.push(seen(ObjectKind::Volume, "unowned", unowned, false));
    let listing = Listing {
        objects,
        // An engine-made volume of another owner's allocation, and one of no allocation at all.
        unlabelled_volumes: vec![
            format!("cordon-input-{theirs}"),
            format!("cordon-input-{}", uuid::Uuid::new_v4()),
        ],
    };
    let plan = classify(&listing, &owner(), true);
    assert_eq!(plan.remove, Removal::default(), "{plan:?}");
    assert!(plan.report.storage.is_empty());
    assert_eq!(plan.report.foreign.len(), 3);
    assert!(plan
        .report
        .foreign
        .iter()
        .all(|f| f.ends_with("(owner other)")));
    assert_eq!(
        plan.report.untouched.len(),
        4,
        "{:?}",
        plan.report.untouched
    );
    assert!(plan
        .report
        .untouched
        .iter()
        .any(|u| u.contains("parts disagree")));
    assert!(plan
        .report
        .untouched
        .iter()
        .any(|u| u.contains("incomplete or unknown labels")));
    assert_eq!(plan.report.unowned.len(), 3, "{:?}", plan.report.unowned);
    let quiet = classify(&listing, &owner(), false);
    assert!(
        quiet.report.foreign.is_empty(),
        "other owners are listed only when asked"
    );
}

/// An inspection, export or commit container left by a crash (the tree reader's tool container,
/// over intact storage) is removed; the storage is handed back whole.
#[test]
fn a_left_audit_container_is_removed_and_its_storage_kept() {
    let kept = uuid::Uuid::new_v4();
    let mut objects = storage("runner", &kept, true);
    objects.push(seen(
        ObjectKind::Container,
        "reader",
        labels("runner", Kind::Tool, &kept, "1500000"),
        false,
    ));
    let listing = Listing {
        objects,
        unlabelled_volumes: vec![],
    };
    let plan = classify(&listing, &owner(), false);
    assert_eq!(plan.remove.containers, ["reader"]);
    assert_eq!(plan.report.storage.len(), 1);
    assert!(plan.remove.volumes.is_empty());
}
