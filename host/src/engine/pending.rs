//! The record of what one operation made or may have made (creates whose answer never came
//! included), and its removal: by the id captured at create, a pending create resolved by its name
//! and exactly the labels it was sent with.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::objects::{
    self, engine_made, inspect_container, inspect_network, inspect_volume, list_owned,
};
use super::Engine;
use crate::error::{Error, Result};
use crate::labels::Owner;

/// Objects created by one operation, recorded at create time so cleanup never depends on labels
/// or names that could have changed.
#[derive(Debug, Default, Clone)]
pub struct Created {
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
    /// Networks by id: removed after the containers (which hold them), before the volumes.
    pub networks: Vec<String>,
    /// Creates cut before the engine answered (cancelled, timed out): the object may exist. It is
    /// touched only by name, and only while it carries exactly the labels it was created with.
    pub pending: Vec<Pending>,
    /// The labels each object was created with, by id (containers, networks) or name (volumes).
    pub labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Containers created on no network at all (networking disabled, or mode `none`): their
    /// removal touches no user-defined network, so it need not wait its turn among those that
    /// leave one. A container not known to be here (one adopted or recovered) waits its turn.
    pub off_network: BTreeSet<String>,
}

/// A [`Created`] record that creates running side by side write to as they go (each records its
/// begin and its answer at once, so a create cut or cancelled midway is still known).
#[derive(Debug)]
pub struct Shared<'a>(std::sync::Mutex<&'a mut Created>);

impl<'a> Shared<'a> {
    pub fn new(created: &'a mut Created) -> Shared<'a> {
        Shared(std::sync::Mutex::new(created))
    }

    /// Change the record (a poisoned lock still holds a consistent record: every change is one
    /// call).
    pub fn with<R>(&self, change: impl FnOnce(&mut Created) -> R) -> R {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut guard)
    }
}

/// A container, a volume or a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectKind {
    Container,
    Volume,
    Network,
}

impl ObjectKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Container => "container",
            ObjectKind::Volume => "volume",
            ObjectKind::Network => "network",
        }
    }
}

/// A create whose answer never came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub kind: ObjectKind,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// When the request was sent: cutting it does not stop the daemon, which may still finish
    /// the create after the cut, so "not found" counts only after [`PENDING_GRACE`].
    pub since: Instant,
}

/// How long after a cut create its object may still appear (seen here: an invocation's control
/// volume whose create was cut by the deadline appeared after an immediate lookup had missed it).
pub const PENDING_GRACE: Duration = Duration::from_secs(3);

/// The pause after removing a container that may be on a user-defined network, before the next
/// such container (the engine finishes the endpoint's deletion in a background loop; see
/// [`Created::remove_once`]).
pub const NETWORK_SETTLE: Duration = Duration::from_millis(100);

/// An object whose removal could not be confirmed: its create-time id when known, and the owner
/// labels a caller must find on it before removing it later.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Leftover {
    pub kind: ObjectKind,
    pub id: Option<String>,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// What a pending create's name holds now.
enum Resolved {
    /// Our object (exactly our labels): its id.
    Ours(String),
    /// Someone else's object: ours can never be made under that name.
    Other,
    /// Nothing (yet).
    Missing,
}

/// What holds a volume's name now: ours when its labels are the ones we made it with, or when it
/// has none and no options (what the engine makes on its own).
async fn resolve_volume(
    engine: &Engine,
    name: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<Resolved> {
    Ok(match inspect_volume(engine, name).await? {
        None => Resolved::Missing,
        Some(v)
            if engine_made(&v.labels, &v.options)
                || labels == Some(&objects::sorted(&v.labels)) =>
        {
            Resolved::Ours(v.name)
        }
        Some(_) => Resolved::Other,
    })
}

/// Resolve a pending create by name.
async fn resolve_pending(engine: &Engine, pending: &Pending) -> Result<Resolved> {
    let found = match pending.kind {
        ObjectKind::Container => inspect_container(engine, &pending.name).await?.map(|c| {
            let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
            (c.id.unwrap_or_default(), labels)
        }),
        ObjectKind::Volume => inspect_volume(engine, &pending.name)
            .await?
            .map(|v| (v.name, v.labels)),
        ObjectKind::Network => inspect_network(engine, &pending.name)
            .await?
            .map(|n| (n.id.unwrap_or_default(), n.labels.unwrap_or_default())),
    };
    Ok(match found {
        None => Resolved::Missing,
        Some((id, labels)) if objects::sorted(&labels) == pending.labels && !id.is_empty() => {
            Resolved::Ours(id)
        }
        Some(_) => Resolved::Other,
    })
}

impl Created {
    /// This record, for creates to write to (side by side, or one at a time).
    pub fn shared(&mut self) -> Shared<'_> {
        Shared::new(self)
    }

    /// Before a create: the object may exist from here on.
    pub fn begin(&mut self, kind: ObjectKind, name: &str, labels: &HashMap<String, String>) {
        self.pending.push(Pending {
            kind,
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            since: Instant::now(),
        });
    }

    /// After the create's answer: made (with its id) or refused (nothing exists).
    pub fn answered(&mut self, kind: ObjectKind, name: &str, id: Option<&str>) {
        let Some(at) = self
            .pending
            .iter()
            .rposition(|p| p.kind == kind && p.name == name)
        else {
            return;
        };
        let pending = self.pending.remove(at);
        if let Some(id) = id {
            self.labels.insert(id.to_owned(), pending.labels);
            match kind {
                ObjectKind::Container => self.containers.push(id.to_owned()),
                ObjectKind::Volume => self.volumes.push(id.to_owned()),
                ObjectKind::Network => self.networks.push(id.to_owned()),
            }
        }
    }

    /// The record made (or may have made) a network: its containers may be on it.
    fn holds_network(&self) -> bool {
        !self.networks.is_empty() || self.pending.iter().any(|p| p.kind == ObjectKind::Network)
    }

    pub fn is_empty(&self) -> bool {
        self.containers.is_empty()
            && self.volumes.is_empty()
            && self.networks.is_empty()
            && self.pending.is_empty()
    }

    /// One removal pass: containers first (they hold the volumes and networks), then networks,
    /// then volumes, then pending creates resolved by name. Returns what is left.
    ///
    /// Volumes wait while any container create of this record is unresolved: the engine makes a
    /// missing named volume for a create that lands after it was removed, so removing the volumes
    /// first would bring them back. Once removed, each volume is looked up by name again.
    pub async fn remove_once(&self, engine: &Engine) -> Created {
        let mut left = Created {
            labels: self.labels.clone(),
            ..Created::default()
        };
        let mut pending_containers = Vec::new();
        let mut pending_networks = Vec::new();
        let mut pending_volumes = Vec::new();
        for pending in &self.pending {
            match resolve_pending(engine, pending).await {
                // Not there yet: the daemon may still be making it.
                Ok(Resolved::Missing) if pending.since.elapsed() < PENDING_GRACE => {
                    left.pending.push(pending.clone())
                }
                Ok(Resolved::Missing | Resolved::Other) => {}
                Ok(Resolved::Ours(id)) if pending.kind == ObjectKind::Container => {
                    pending_containers.push((id, pending))
                }
                Ok(Resolved::Ours(id)) if pending.kind == ObjectKind::Network => {
                    pending_networks.push((id, pending))
                }
                Ok(Resolved::Ours(id)) => pending_volumes.push((id, pending)),
                Err(_) => left.pending.push(pending.clone()),
            }
        }
        for (id, pending) in &pending_containers {
            if objects::remove_container(engine, id).await.is_err() {
                left.containers.push(id.clone());
                left.labels.insert(id.clone(), pending.labels.clone());
            }
        }
        let (off, on): (Vec<&String>, Vec<&String>) = if self.holds_network() {
            self.containers
                .iter()
                .partition(|id| self.off_network.contains(*id))
        } else {
            (self.containers.iter().collect(), Vec::new())
        };
        // Side by side: a running one (the loader) takes the engine a kill and a wait.
        let off_removals =
            futures_util::future::join_all(off.into_iter().map(|id| async move {
                (id, objects::remove_container(engine, id).await.is_err())
            }));
        // Those that may be on the network, one at a time, with a pause: on this engine
        // (20.10.24) two containers leaving one user-defined network at once can deadlock the
        // daemon for good (libnetwork takes the network's and the controller's locks in opposite
        // orders in `getSvcRecords` and `processEndpointDelete`; moby/libnetwork#2649, fixed in
        // 20.10.27). Seen here: an invocation's proxy, fake vendor and DNS server removed side
        // by side wedged every later container exit. The cycle needs one network's lock on both
        // sides, so these go beside those made on no network at all, which leave only the
        // engine's `none` network.
        // No pause after the last: the network's removal takes the network's lock and the
        // controller's one after the other, never one inside the other, so it cannot close that
        // cycle; an endpoint not yet gone makes it fail, and the next pass removes it.
        let on_removals = remove_in_turn(engine, on);
        let (off_removed, on_failed) = tokio::join!(off_removals, on_removals);
        for (id, failed) in off_removed {
            if failed {
                left.containers.push(id.clone());
            }
        }
        left.containers.extend(on_failed.into_iter().cloned());
        left.off_network = left
            .containers
            .iter()
            .filter(|id| self.off_network.contains(*id))
            .cloned()
            .collect();
        let containers_unresolved = left.pending.iter().any(|p| p.kind == ObjectKind::Container);
        let networks = self.networks.iter().map(|id| (id.clone(), None)).chain(
            pending_networks
                .iter()
                .map(|(id, p)| (id.clone(), Some(p.labels.clone()))),
        );
        for (id, labels) in networks {
            // A network still holding a container refuses removal: kept for the next pass.
            if containers_unresolved
                || !left.containers.is_empty()
                || objects::remove_network(engine, &id).await.is_err()
            {
                left.networks.push(id.clone());
                if let Some(labels) = labels {
                    left.labels.insert(id, labels);
                }
            }
        }
        if containers_unresolved || !left.containers.is_empty() {
            // Not yet: a container that may still be made (or is still there) holds them.
            left.volumes.extend(self.volumes.iter().cloned());
            for (name, pending) in &pending_volumes {
                left.volumes.push(name.clone());
                left.labels.insert(name.clone(), pending.labels.clone());
            }
            return left;
        }
        let mut removed = Vec::new();
        for name in &self.volumes {
            if objects::remove_volume(engine, name).await.is_err() {
                left.volumes.push(name.clone());
            } else {
                removed.push(name.clone());
            }
        }
        for (name, pending) in &pending_volumes {
            if objects::remove_volume(engine, name).await.is_err() {
                left.volumes.push(name.clone());
                left.labels.insert(name.clone(), pending.labels.clone());
            } else {
                removed.push(name.clone());
            }
        }
        // Nothing of ours can make them again now; a volume back under one of these names was
        // made by the engine anyway: ours by its labels (or none at all), so it goes too.
        for name in removed {
            match resolve_volume(engine, &name, self.labels.get(&name)).await {
                Ok(Resolved::Missing | Resolved::Other) => {}
                Ok(Resolved::Ours(_)) | Err(_) => {
                    if objects::remove_volume(engine, &name).await.is_err() {
                        left.volumes.push(name.clone());
                    }
                }
            }
        }
        left
    }

    /// What is left, as a caller records it: ids when known, owner labels always.
    pub fn leftovers(&self) -> Vec<Leftover> {
        let labels = |key: &str| self.labels.get(key).cloned().unwrap_or_default();
        let mut out: Vec<Leftover> = self
            .containers
            .iter()
            .map(|id| Leftover {
                kind: ObjectKind::Container,
                id: Some(id.clone()),
                name: None,
                labels: labels(id),
            })
            .collect();
        out.extend(self.networks.iter().map(|id| Leftover {
            kind: ObjectKind::Network,
            id: Some(id.clone()),
            name: None,
            labels: labels(id),
        }));
        out.extend(self.volumes.iter().map(|name| Leftover {
            kind: ObjectKind::Volume,
            id: Some(name.clone()),
            name: Some(name.clone()),
            labels: labels(name),
        }));
        out.extend(self.pending.iter().map(|p| Leftover {
            kind: p.kind,
            id: None,
            name: Some(p.name.clone()),
            labels: p.labels.clone(),
        }));
        out
    }

    /// Remove everything; failures are retried every second until `budget` runs out, then named.
    pub async fn remove_all(&self, engine: &Engine, budget: Duration) -> Result<()> {
        let start = Instant::now();
        let mut left = self.remove_once(engine).await;
        while !left.is_empty() {
            if start.elapsed() >= budget {
                let mut unreleased: Vec<String> = left
                    .containers
                    .iter()
                    .map(|c| format!("container {c}"))
                    .collect();
                unreleased.extend(left.networks.iter().map(|n| format!("network {n}")));
                unreleased.extend(left.volumes.iter().map(|v| format!("volume {v}")));
                unreleased.extend(
                    left.pending
                        .iter()
                        .map(|p| format!("{} {} (create unanswered)", p.kind.as_str(), p.name)),
                );
                return Err(Error::Unreleased(unreleased));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            left = left.remove_once(engine).await;
        }
        Ok(())
    }

    /// Remove `first` of this record's containers (those on its network) one at a time, each
    /// followed by [`NETWORK_SETTLE`] as [`Created::remove_once`] spaces them, so the next
    /// removal from the network is a settle away; those removed leave the record, the rest stay
    /// for [`Created::remove_once`]. The invocation times its fixtures' removal this way.
    pub async fn remove_first(&mut self, engine: &Engine, first: &[String]) {
        for id in first {
            if !self.containers.contains(id) {
                continue;
            }
            let removed = objects::remove_container(engine, id).await.is_ok();
            tokio::time::sleep(NETWORK_SETTLE).await;
            if removed {
                self.containers.retain(|c| c != id);
                self.off_network.remove(id);
                self.labels.remove(id);
            }
        }
    }

    /// Add another record's objects.
    pub fn extend(&mut self, other: Created) {
        self.containers.extend(other.containers);
        self.volumes.extend(other.volumes);
        self.networks.extend(other.networks);
        self.pending.extend(other.pending);
        self.labels.extend(other.labels);
        self.off_network.extend(other.off_network);
    }
}

/// Remove everything an owner left (tests and the gate use this as a last resort; recovery proper
/// reports what it removed).
pub async fn remove_owned(engine: &Engine, owner: &Owner) -> Result<()> {
    let owned = list_owned(engine, owner).await?;
    Created {
        containers: owned.containers,
        volumes: owned.volumes,
        networks: owned.networks,
        ..Created::default()
    }
    .remove_all(engine, Duration::from_secs(10))
    .await
}

/// Remove `containers` (each may be on a user-defined network) one at a time, with
/// [`NETWORK_SETTLE`] between two (see [`Created::remove_once`]); returns those whose removal
/// failed.
async fn remove_in_turn<'a>(engine: &Engine, containers: Vec<&'a String>) -> Vec<&'a String> {
    let mut failed = Vec::new();
    for (i, id) in containers.into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(NETWORK_SETTLE).await;
        }
        let began = std::time::Instant::now();
        if objects::remove_container(engine, id).await.is_err() {
            failed.push(id);
        }
        tracing::debug!(%id, took = ?began.elapsed(), "removed, maybe on a network");
    }
    failed
}
