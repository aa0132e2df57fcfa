//! Recovery after a crash or restart, in three steps: [`list`] everything with a cordon label (and
//! the volumes the engine made unlabelled under a cordon name), [`classify`] it for one owner (a
//! pure function: what is removed, what is handed back, what is only listed), then [`act`].
//!
//! Removed: agent and helper containers, networks, invocation volumes, interrupted allocations,
//! staging directories. Handed back: intact task storage. Only listed: objects whose labels are
//! incomplete or disagree, objects without an owner, other owners' (never touched).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use super::{Snapshot, StorageHandle};
use crate::controller::Controller;
use crate::engine::objects::{self, Labelled, Listed};
use crate::engine::pending::{Created, ObjectKind};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::labels::{Kind, ObjectName, Owner, ALLOCATION, ATTEMPT, KIND, OWNER, UID};
use crate::profile::Area;
use crate::uids::Uid;
use cordon_repo::clone;

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Intact task storage, one handle per allocation (pass back the baseline you recorded).
    pub storage: Vec<StorageHandle>,
    /// What was removed.
    pub removed: Vec<String>,
    /// This owner's objects whose labels are incomplete or disagree: never touched.
    pub untouched: Vec<String>,
    /// Objects with cordon labels but no owner: never touched.
    pub unowned: Vec<String>,
    /// Other owners' objects (listed only when asked): never touched.
    pub foreign: Vec<String>,
}

/// One object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub object: Labelled,
    /// A container that is running and, if it is a keeper, carries its final name (only such a
    /// keeper holds complete storage: a stopped one's tmpfs content is gone).
    pub live: bool,
    /// A volume's driver options (the areas are read back from them).
    pub options: HashMap<String, String>,
    /// A keeper holding a shared snapshot (its command digests all of /work).
    pub snapshot: bool,
}

/// Everything recovery looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub objects: Vec<Seen>,
    /// Volumes under a cordon name with no label and no option (the engine made them).
    pub unlabelled_volumes: Vec<String>,
}

/// What [`act`] removes, in this order: containers (they hold volumes), networks, volumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub volumes: Vec<String>,
}

/// The decision for one owner: the report without `removed`, and what to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub report: RecoveryReport,
    pub remove: Removal,
}

/// Recover what `owner` left. Refuses while this controller holds storage of that owner. With
/// `foreign`, other owners' objects are listed (never touched).
pub async fn recover(ctl: &Controller, owner: &Owner, foreign: bool) -> Result<RecoveryReport> {
    if ctl.holds_storage_of(owner) {
        return Err(Error::RecoveryBusy(owner.as_str().to_owned()));
    }
    let listing = list(ctl.engine()).await?;
    act(ctl.engine(), owner, classify(&listing, owner, foreign)).await
}

/// Whether a keeper's command (as the engine lists it, argv joined by spaces) is a shared
/// snapshot's.
fn holds_snapshot(command: &str) -> bool {
    command == crate::storage::keeper_command(cordon_contract::paths::WORK).join(" ")
}

/// Everything with any cordon label, and the engine-made volumes under a cordon name.
pub async fn list(engine: &Engine) -> Result<Listing> {
    let any = Listed::with_label(engine, KIND).await?;
    let owned = Listed::with_label(engine, OWNER).await?;
    let mut seen = BTreeSet::new();
    let mut objects = Vec::new();
    for listed in [any, owned] {
        for c in listed.containers {
            let running = c.state.is_some_and(|s| s.to_string() == "running");
            let names = c.names.clone().unwrap_or_default();
            let labels = c.labels.clone().unwrap_or_default();
            let keeper = labels.get(KIND).map(String::as_str) == Some(Kind::Keeper.as_str());
            let complete = names.iter().any(|n| ObjectName::is_complete_keeper(n));
            let snapshot = keeper && c.command.as_deref().is_some_and(holds_snapshot);
            let object = Labelled {
                kind: ObjectKind::Container,
                id: c.id.unwrap_or_default(),
                labels,
            };
            if seen.insert(object.what()) {
                let live = running && (complete || !keeper);
                objects.push(Seen {
                    object,
                    live,
                    options: HashMap::new(),
                    snapshot,
                });
            }
        }
        for v in listed.volumes {
            let object = Labelled {
                kind: ObjectKind::Volume,
                id: v.name,
                labels: v.labels,
            };
            if seen.insert(object.what()) {
                objects.push(Seen {
                    object,
                    live: false,
                    options: v.options,
                    snapshot: false,
                });
            }
        }
        for n in listed.networks {
            let object = Labelled {
                kind: ObjectKind::Network,
                id: n.id.unwrap_or_default(),
                labels: n.labels.unwrap_or_default(),
            };
            if seen.insert(object.what()) {
                objects.push(Seen {
                    object,
                    live: false,
                    options: HashMap::new(),
                    snapshot: false,
                });
            }
        }
    }
    Ok(Listing {
        objects,
        unlabelled_volumes: objects::unlabelled_cordon_volumes(engine).await?,
    })
}

/// Complete owner labels of `owner` and a known kind: the kind, attempt and allocation.
fn identity(object: &Labelled, owner: &Owner) -> Option<(Kind, String, uuid::Uuid)> {
    let labels = &object.labels;
    let kind = Kind::parse(labels.get(KIND)?)?;
    let attempt = labels.get(ATTEMPT)?.clone();
    let allocation = super::parse_allocation(labels.get(ALLOCATION)?).ok()?;
    (labels.get(OWNER)? == owner.as_str() && !attempt.is_empty())
        .then_some((kind, attempt, allocation))
}

fn area_of(options: &HashMap<String, String>) -> Area {
    let o = options.get("o").cloned().unwrap_or_default();
    let value = |key: &str| {
        o.split(',')
            .find_map(|p| p.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Area {
        bytes: value("size"),
        inodes: value("nr_inodes"),
    }
}

/// The uid every part of an allocation names, if they agree on a valid one.
fn one_uid<'a>(labels: impl Iterator<Item = &'a HashMap<String, String>>) -> Option<Uid> {
    let uids: BTreeSet<Option<&String>> = labels.map(|l| l.get(UID)).collect();
    match uids.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(uid)] => Uid::new(uid.parse().ok()?).ok(),
        _ => None,
    }
}

/// One part of an allocation's storage.
struct Part<'a> {
    kind: Kind,
    attempt: String,
    seen: &'a Seen,
}

/// Sort a listing for `owner`. Nothing of another owner, and nothing whose labels are incomplete
/// or disagree, is ever put up for removal.
pub fn classify(listing: &Listing, owner: &Owner, foreign: bool) -> Plan {
    let mut plan = Plan::default();
    let mut storage: BTreeMap<uuid::Uuid, Vec<Part<'_>>> = BTreeMap::new();
    for seen in &listing.objects {
        let object = &seen.object;
        match object.labels.get(OWNER) {
            None if object.labels.keys().any(|k| k.starts_with("io.cordon.")) => {
                plan.report.unowned.push(object.what())
            }
            None => {}
            Some(o) if o != owner.as_str() && foreign => plan
                .report
                .foreign
                .push(format!("{} (owner {o})", object.what())),
            Some(o) if o != owner.as_str() => {}
            Some(_) if object.kind == ObjectKind::Network => {
                plan.remove.networks.push(object.id.clone())
            }
            Some(_) => match identity(object, owner) {
                None => plan
                    .report
                    .untouched
                    .push(format!("{} (incomplete or unknown labels)", object.what())),
                Some((kind @ (Kind::Keeper | Kind::Work | Kind::Metadata), attempt, id)) => {
                    storage.entry(id).or_default().push(Part {
                        kind,
                        attempt,
                        seen,
                    })
                }
                Some(_) if object.kind == ObjectKind::Container => {
                    plan.remove.containers.push(object.id.clone())
                }
                Some(_) => plan.remove.volumes.push(object.id.clone()),
            },
        }
    }
    // Volumes the engine made on its own under a cordon name (a create that named a volume cleanup
    // had removed): this owner's when the name carries one of this owner's allocation ids.
    let allocations: BTreeSet<String> = listing
        .objects
        .iter()
        .filter(|s| s.object.labels.get(OWNER).map(String::as_str) == Some(owner.as_str()))
        .filter_map(|s| s.object.labels.get(ALLOCATION).cloned())
        .collect();
    for name in &listing.unlabelled_volumes {
        match ObjectName::parse(name) {
            Some(n) if allocations.contains(&n.allocation.to_string()) => {
                plan.remove.volumes.insert(0, name.clone())
            }
            _ => plan
                .report
                .unowned
                .push(format!("volume {name} (no labels: made by the engine)")),
        }
    }
    for (allocation, parts) in storage {
        classify_storage(&mut plan, owner, allocation, &parts);
    }
    plan
}

/// One allocation's storage parts: handed back when intact, removed when interrupted or dead,
/// untouched when they disagree.
fn classify_storage(plan: &mut Plan, owner: &Owner, allocation: uuid::Uuid, parts: &[Part<'_>]) {
    let attempts: BTreeSet<&String> = parts.iter().map(|p| &p.attempt).collect();
    let uid = one_uid(parts.iter().map(|p| &p.seen.object.labels));
    let of = |kind: Kind| parts.iter().filter(|p| p.kind == kind).collect::<Vec<_>>();
    let (keepers, works, metas) = (of(Kind::Keeper), of(Kind::Work), of(Kind::Metadata));
    let (Some(uid), true) = (
        uid,
        attempts.len() == 1 && keepers.len() <= 1 && works.len() <= 1 && metas.len() <= 1,
    ) else {
        for p in parts {
            let what = p.seen.object.what();
            plan.report
                .untouched
                .push(format!("{what} (allocation {allocation}: parts disagree)"));
        }
        return;
    };
    match (keepers.as_slice(), works.as_slice(), metas.as_slice()) {
        ([keeper], [work], [meta]) if keeper.seen.live => {
            plan.report.storage.push(StorageHandle {
                owner: owner.as_str().to_owned(),
                attempt: keeper.attempt.clone(),
                allocation,
                work_volume: work.seen.object.id.clone(),
                metadata_volume: meta.seen.object.id.clone(),
                keeper: keeper.seen.object.id.clone(),
                work: area_of(&work.seen.options),
                metadata: area_of(&meta.seen.options),
                uid,
                head: None,
                gitlinks: None,
                metadata_baseline: None,
                snapshot: keeper.seen.snapshot.then_some(Snapshot { digest: None }),
            });
        }
        _ => {
            for p in parts {
                let id = p.seen.object.id.clone();
                if p.kind == Kind::Keeper {
                    plan.remove.containers.push(id);
                } else {
                    plan.remove.volumes.push(id);
                }
            }
        }
    }
}

/// Remove what the plan says (containers, then networks, then volumes, then the owner's staging
/// directories); the report names what was removed, or the error what could not be confirmed.
pub async fn act(engine: &Engine, owner: &Owner, plan: Plan) -> Result<RecoveryReport> {
    let Plan { mut report, remove } = plan;
    let mut failed = Vec::new();
    for (kind, ids) in [
        (ObjectKind::Container, &remove.containers),
        (ObjectKind::Network, &remove.networks),
    ] {
        for id in ids {
            let removed = match kind {
                ObjectKind::Container => objects::remove_container(engine, id).await,
                _ => objects::remove_network(engine, id).await,
            };
            match removed {
                Ok(()) => report.removed.push(format!("{} {id}", kind.as_str())),
                Err(e) => failed.push(format!("{} {id}: {e}", kind.as_str())),
            }
            // One container at a time off a network (see `Created::remove_once`).
            if kind == ObjectKind::Container && !remove.networks.is_empty() {
                tokio::time::sleep(crate::engine::pending::NETWORK_SETTLE).await;
            }
        }
    }
    let volumes = Created {
        volumes: remove.volumes.clone(),
        ..Created::default()
    };
    match volumes.remove_all(engine, Duration::from_secs(10)).await {
        Ok(()) => report
            .removed
            .extend(remove.volumes.iter().map(|v| format!("volume {v}"))),
        Err(e) => failed.push(e.to_string()),
    }
    remove_staging(owner, &mut report.removed, &mut failed);
    if !failed.is_empty() {
        return Err(Error::Recovery {
            message: format!(
                "could not confirm removal of {}",
                crate::error::bounded_list(&failed, 2000)
            ),
            removed: report.removed,
        });
    }
    Ok(report)
}

/// Staging directories a killed process of this user left for `owner`.
fn remove_staging(owner: &Owner, removed: &mut Vec<String>, failed: &mut Vec<String>) {
    let prefix = clone::staging_prefix(owner.as_str());
    for root in clone::staging_roots() {
        let Ok(listing) = std::fs::read_dir(&root) else {
            continue;
        };
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = std::fs::symlink_metadata(entry.path()).is_ok_and(|m| {
                m.is_dir() && std::os::unix::fs::MetadataExt::uid(&m) == current_uid()
            });
            if name.starts_with(&prefix) && ours {
                let path = entry.path().display().to_string();
                match std::fs::remove_dir_all(entry.path()) {
                    Ok(()) => removed.push(format!("staging directory {path}")),
                    Err(e) => failed.push(format!("staging directory {path}: {e}")),
                }
            }
        }
    }
}

fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// The intact storage of one allocation of `owner`, without touching anything.
pub async fn recover_one(
    engine: &Engine,
    owner: &Owner,
    allocation: &uuid::Uuid,
) -> Result<Option<StorageHandle>> {
    let Listed {
        containers,
        volumes,
        ..
    } = Listed::with_label(engine, &format!("{ALLOCATION}={allocation}")).await?;
    let mut keeper = None;
    let mut snapshot = false;
    let mut work = None;
    let mut metadata = None;
    let mut attempt = None;
    let mut labels = Vec::new();
    for c in containers {
        let command = c.command.clone();
        let complete = c
            .names
            .unwrap_or_default()
            .iter()
            .any(|n| ObjectName::is_complete_keeper(n));
        let object = Labelled {
            kind: ObjectKind::Container,
            id: c.id.unwrap_or_default(),
            labels: c.labels.unwrap_or_default(),
        };
        if !complete {
            continue;
        }
        if let Some((Kind::Keeper, a, _)) = identity(&object, owner) {
            attempt.get_or_insert(a);
            labels.push(object.labels.clone());
            keeper = Some(object.id);
            snapshot = command.as_deref().is_some_and(holds_snapshot);
        }
    }
    for v in volumes {
        let object = Labelled {
            kind: ObjectKind::Volume,
            id: v.name.clone(),
            labels: v.labels,
        };
        match identity(&object, owner) {
            Some((Kind::Work, a, _)) if attempt.get_or_insert(a.clone()) == &a => {
                labels.push(object.labels.clone());
                work = Some((v.name, area_of(&v.options)))
            }
            Some((Kind::Metadata, a, _)) if attempt.get_or_insert(a.clone()) == &a => {
                labels.push(object.labels.clone());
                metadata = Some((v.name, area_of(&v.options)))
            }
            _ => {}
        }
    }
    let uid = one_uid(labels.iter());
    Ok(match (keeper, work, metadata, attempt, uid) {
        (Some(keeper), Some(work), Some(metadata), Some(attempt), Some(uid)) => {
            Some(StorageHandle {
                owner: owner.as_str().to_owned(),
                attempt,
                allocation: *allocation,
                work_volume: work.0,
                metadata_volume: metadata.0,
                keeper,
                work: work.1,
                metadata: metadata.1,
                uid,
                head: None,
                gitlinks: None,
                metadata_baseline: None,
                snapshot: snapshot.then_some(Snapshot { digest: None }),
            })
        }
        _ => None,
    })
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
