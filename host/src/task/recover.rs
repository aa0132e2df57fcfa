//! Recovery after a crash or restart: everything labelled with one owner, sorted into what is
//! removed (agent and helper containers, networks, invocation volumes, interrupted allocations,
//! staging directories), what is handed back (intact task storage), and what is only listed
//! (objects whose labels are incomplete or disagree, objects without an owner, other owners').

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptions;

use super::{clone, holds_storage_of, StorageHandle};
use crate::cleanup::{Created, Listed};
use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::{Kind, Owner, ALLOCATION, ATTEMPT, KIND, OWNER, UID};
use crate::profile::Area;
use crate::uids::Uid;

/// What recovery found and did.
#[derive(Debug, Clone, Default, serde::Serialize)]
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

/// One part of an allocation's storage: kind, attempt, the object, whether it is a complete
/// running keeper, its volume options.
type Part = (Kind, String, Labelled, bool, HashMap<String, String>);

/// An object's identity from its labels.
#[derive(Debug, Clone)]
struct Labelled {
    what: String,
    id: String,
    labels: HashMap<String, String>,
}

impl Labelled {
    /// Complete owner labels of this owner and a known kind; otherwise None.
    fn identity(&self, owner: &Owner) -> Option<(Kind, String, uuid::Uuid)> {
        let kind = Kind::parse(self.labels.get(KIND)?)?;
        let attempt = self.labels.get(ATTEMPT)?.clone();
        let allocation = super::parse_allocation(self.labels.get(ALLOCATION)?).ok()?;
        (self.labels.get(OWNER)? == owner.as_str() && !attempt.is_empty())
            .then_some((kind, attempt, allocation))
    }
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
    let uids: std::collections::BTreeSet<Option<&String>> = labels.map(|l| l.get(UID)).collect();
    match uids.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(uid)] => Uid::new(uid.parse().ok()?).ok(),
        _ => None,
    }
}

fn any_cordon_label(labels: &HashMap<String, String>) -> bool {
    labels.keys().any(|k| k.starts_with("io.cordon."))
}

/// Recover what `owner` left. Refuses while this process holds storage of that owner. With
/// `foreign`, other owners' objects are listed (never touched).
pub async fn recover(engine: &Engine, owner: &Owner, foreign: bool) -> Result<RecoveryReport> {
    if holds_storage_of(owner) {
        return Err(Error::RecoveryBusy(owner.as_str().to_owned()));
    }
    // Everything with any cordon label: sorted below, so nothing of another owner is ever removed.
    let docker = engine.docker();
    let any = Listed::with_label(engine, KIND).await?;
    let owned = Listed::with_label(engine, OWNER).await?;
    let (containers, owned_containers) = (any.containers, owned.containers);
    let (volumes, owned_volumes) = (any.volumes, owned.volumes);
    let networks = owned.networks;

    let mut report = RecoveryReport::default();
    let mut seen = std::collections::BTreeSet::new();
    let mut objects = Vec::new();
    for c in containers.into_iter().chain(owned_containers) {
        let id = c.id.unwrap_or_default();
        if seen.insert(format!("c{id}")) {
            // Only a running keeper with its final name holds complete storage.
            let running = c.state.map(|s| s.to_string() == "running").unwrap_or(false);
            let complete = c
                .names
                .unwrap_or_default()
                .iter()
                .any(|n| n.trim_start_matches('/').starts_with("cordon-keeper-"));
            let running = running
                && (complete
                    || c.labels
                        .as_ref()
                        .and_then(|l| l.get(KIND))
                        .map(String::as_str)
                        != Some("keeper"));
            objects.push((
                Labelled {
                    what: format!("container {id}"),
                    id,
                    labels: c.labels.unwrap_or_default(),
                },
                running,
                HashMap::new(),
            ));
        }
    }
    for v in volumes.into_iter().chain(owned_volumes) {
        if seen.insert(format!("v{}", v.name)) {
            objects.push((
                Labelled {
                    what: format!("volume {}", v.name),
                    id: v.name.clone(),
                    labels: v.labels,
                },
                false,
                v.options,
            ));
        }
    }
    let mut owned = Vec::new();
    for (object, running, options) in objects {
        match object.labels.get(OWNER) {
            None if any_cordon_label(&object.labels) => report.unowned.push(object.what.clone()),
            None => {}
            Some(o) if o != owner.as_str() && foreign => {
                report.foreign.push(format!("{} (owner {o})", object.what));
            }
            Some(o) if o != owner.as_str() => {}
            Some(_) => owned.push((object, running, options)),
        }
    }

    // Volumes the engine made on its own under a cordon name (a create that named a volume cleanup
    // had removed; older versions mounted volumes without their labels): no label, no option.
    // They are this owner's when the name carries one of this owner's allocation ids.
    let allocations: std::collections::BTreeSet<String> = owned
        .iter()
        .filter_map(|(o, _, _)| o.labels.get(ALLOCATION).cloned())
        .collect();
    let mut engine_made = Vec::new();
    for name in crate::cleanup::unlabelled_cordon_volumes(engine).await? {
        match crate::cleanup::cordon_name(&name) {
            Some(id) if allocations.contains(&id.to_string()) => engine_made.push(name),
            _ => report
                .unowned
                .push(format!("volume {name} (no labels: made by the engine)")),
        }
    }

    // Sort this owner's objects.
    let mut remove = Created::default();
    remove.volumes.extend(engine_made);
    let mut networks_to_remove = Vec::new();
    let mut storage: BTreeMap<uuid::Uuid, Vec<Part>> = BTreeMap::new();
    for (object, running, options) in owned {
        let Some((kind, attempt, allocation)) = object.identity(owner) else {
            report
                .untouched
                .push(format!("{} (incomplete or unknown labels)", object.what));
            continue;
        };
        let is_container = object.what.starts_with("container");
        match kind {
            Kind::Keeper | Kind::Work | Kind::Metadata => storage
                .entry(allocation)
                .or_default()
                .push((kind, attempt, object, running, options)),
            _ if is_container => remove.containers.push(object.id.clone()),
            _ => remove.volumes.push(object.id.clone()),
        }
    }
    for n in networks {
        let labels = n.labels.unwrap_or_default();
        let id = n.id.unwrap_or_default();
        if labels.get(OWNER).map(String::as_str) == Some(owner.as_str()) {
            networks_to_remove.push(id);
        }
    }
    for (allocation, parts) in storage {
        let attempts: std::collections::BTreeSet<&String> = parts.iter().map(|p| &p.1).collect();
        let uid = one_uid(parts.iter().map(|p| &p.2.labels));
        let keepers: Vec<_> = parts.iter().filter(|p| p.0 == Kind::Keeper).collect();
        let works: Vec<_> = parts.iter().filter(|p| p.0 == Kind::Work).collect();
        let metas: Vec<_> = parts.iter().filter(|p| p.0 == Kind::Metadata).collect();
        if attempts.len() != 1
            || uid.is_none()
            || keepers.len() > 1
            || works.len() > 1
            || metas.len() > 1
        {
            for p in &parts {
                report.untouched.push(format!(
                    "{} (allocation {allocation}: parts disagree)",
                    p.2.what
                ));
            }
            continue;
        }
        // A keeper that is running and renamed after seeding: complete storage.
        let intact = keepers.len() == 1 && works.len() == 1 && metas.len() == 1 && keepers[0].3;
        if let (true, Some(uid)) = (intact, uid) {
            report.storage.push(StorageHandle {
                owner: owner.as_str().to_owned(),
                attempt: parts[0].1.clone(),
                allocation,
                work_volume: works[0].2.id.clone(),
                metadata_volume: metas[0].2.id.clone(),
                keeper: keepers[0].2.id.clone(),
                work: area_of(&works[0].4),
                metadata: area_of(&metas[0].4),
                uid,
                head: None,
                gitlinks: None,
                metadata_baseline: None,
            });
        } else {
            // Interrupted or dead (a stopped keeper means the tmpfs content is gone).
            for p in &parts {
                if p.0 == Kind::Keeper {
                    remove.containers.push(p.2.id.clone());
                } else {
                    remove.volumes.push(p.2.id.clone());
                }
            }
        }
    }

    // Containers first (they hold volumes), then networks, then volumes.
    let mut failed = Vec::new();
    for id in &remove.containers {
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        match bounded(
            "remove container",
            CALL_TIMEOUT,
            docker.remove_container(id, Some(options)),
        )
        .await
        {
            Ok(()) => report.removed.push(format!("container {id}")),
            Err(e) => failed.push(format!("container {id}: {e}")),
        }
    }
    for id in &networks_to_remove {
        match bounded("remove network", CALL_TIMEOUT, docker.remove_network(id)).await {
            Ok(()) => report.removed.push(format!("network {id}")),
            Err(e) => failed.push(format!("network {id}: {e}")),
        }
    }
    let volumes_only = Created {
        volumes: remove.volumes.clone(),
        ..Created::default()
    };
    match volumes_only
        .remove_all(engine, Duration::from_secs(10))
        .await
    {
        Ok(()) => report
            .removed
            .extend(remove.volumes.iter().map(|v| format!("volume {v}"))),
        Err(e) => failed.push(e.to_string()),
    }
    // Staging directories a killed process left.
    let prefix = clone::staging_prefix(owner);
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
                match std::fs::remove_dir_all(entry.path()) {
                    Ok(()) => report
                        .removed
                        .push(format!("staging directory {}", entry.path().display())),
                    Err(e) => {
                        failed.push(format!("staging directory {}: {e}", entry.path().display()))
                    }
                }
            }
        }
    }
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
    let mut work = None;
    let mut metadata = None;
    let mut attempt = None;
    let mut labels = Vec::new();
    for c in containers {
        let complete = c
            .names
            .unwrap_or_default()
            .iter()
            .any(|n| n.trim_start_matches('/').starts_with("cordon-keeper-"));
        let object = Labelled {
            what: String::new(),
            id: c.id.unwrap_or_default(),
            labels: c.labels.unwrap_or_default(),
        };
        if !complete {
            continue;
        }
        if let Some((Kind::Keeper, a, _)) = object.identity(owner) {
            attempt.get_or_insert(a);
            labels.push(object.labels.clone());
            keeper = Some(object.id);
        }
    }
    for v in volumes {
        let object = Labelled {
            what: String::new(),
            id: v.name.clone(),
            labels: v.labels,
        };
        match object.identity(owner) {
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
            })
        }
        _ => None,
    })
}
