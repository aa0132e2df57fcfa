//! The one place that creates, starts, inspects, lists by label and removes the engine objects
//! cordon makes (containers, volumes, networks), through the engine's [`super::calls::Calls`].
//! Every create is recorded in a [`Shared`] record before the request is sent, so a create cut
//! midway is still known to cleanup.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, Network, NetworkCreateRequest,
    Volume, VolumeCreateRequest,
};

use super::pending::{ObjectKind, Shared};
use super::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::Holder;
use crate::labels::{Kind, ObjectName, Owner, ALLOCATION, KIND, NAME_PREFIX, OWNER, UID};
use crate::uids::Uid;

/// The engine answered 404.
pub fn not_found(e: &Error) -> bool {
    matches!(
        e,
        Error::Docker {
            source: bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            },
            ..
        }
    )
}

/// The engine answered (with a refusal): the create made nothing. Anything else (a timeout, a cut
/// connection) leaves it open whether the object exists.
pub fn engine_answered(e: &Error) -> bool {
    matches!(
        e,
        Error::Docker {
            source: bollard::errors::Error::DockerResponseServerError { .. },
            ..
        }
    )
}

/// `Ok(None)` for a 404.
fn found<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Record a create's answer; an error the engine did not answer leaves the object pending.
fn answered(
    record: &Shared<'_>,
    kind: ObjectKind,
    name: &str,
    result: Result<String>,
) -> Result<String> {
    match result {
        Ok(id) => {
            record.with(|c| c.answered(kind, name, Some(&id)));
            Ok(id)
        }
        Err(e) => {
            if engine_answered(&e) {
                record.with(|c| c.answered(kind, name, None));
            }
            Err(e)
        }
    }
}

/// Create a volume from `request` (which names it), recorded in `record` as it goes.
pub async fn create_volume(
    engine: &Engine,
    request: VolumeCreateRequest,
    record: &Shared<'_>,
) -> Result<String> {
    let name = request.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(Error::Internal("volume request without a name".into()));
    }
    let labels = request.labels.clone().unwrap_or_default();
    record.with(|c| c.begin(ObjectKind::Volume, &name, &labels));
    let result = bounded(
        "create volume",
        CALL_TIMEOUT,
        engine.calls().create_volume(request),
    )
    .await;
    answered(record, ObjectKind::Volume, &name, result.map(|v| v.name))
}

/// Create a container named `name`, recorded in `record` as it goes. Returns its id.
pub async fn create_container(
    engine: &Engine,
    name: &str,
    body: ContainerCreateBody,
    record: &Shared<'_>,
) -> Result<String> {
    let labels = body.labels.clone().unwrap_or_default();
    let off_network = body.network_disabled == Some(true)
        || body
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.as_deref())
            == Some("none");
    record.with(|c| c.begin(ObjectKind::Container, name, &labels));
    let result = bounded(
        "create container",
        CALL_TIMEOUT,
        engine.calls().create_container(name.to_owned(), body),
    )
    .await;
    let id = answered(record, ObjectKind::Container, name, result)?;
    if off_network {
        record.with(|c| c.off_network.insert(id.clone()));
    }
    Ok(id)
}

/// Create a network from `request` (which names it), recorded in `record` as it goes. Returns its
/// id.
pub async fn create_network(
    engine: &Engine,
    request: NetworkCreateRequest,
    record: &Shared<'_>,
) -> Result<String> {
    let name = request.name.clone();
    let labels = request.labels.clone().unwrap_or_default();
    record.with(|c| c.begin(ObjectKind::Network, &name, &labels));
    let result = bounded(
        "create network",
        CALL_TIMEOUT,
        engine.calls().create_network(request),
    )
    .await;
    answered(record, ObjectKind::Network, &name, result)
}

/// A network as the engine reports it; `None` when there is none by that id or name.
pub async fn inspect_network(
    engine: &Engine,
    id: &str,
) -> Result<Option<bollard::models::NetworkInspect>> {
    found(
        bounded(
            "inspect network",
            CALL_TIMEOUT,
            engine.calls().inspect_network(id.to_owned()),
        )
        .await,
    )
}

/// A container as the engine reports it; `None` when there is none by that id or name.
pub async fn inspect_container(
    engine: &Engine,
    id: &str,
) -> Result<Option<ContainerInspectResponse>> {
    found(
        bounded(
            "inspect container",
            CALL_TIMEOUT,
            engine.calls().inspect_container(id.to_owned()),
        )
        .await,
    )
}

/// A volume as the engine reports it; `None` when there is none by that name.
pub async fn inspect_volume(engine: &Engine, name: &str) -> Result<Option<Volume>> {
    found(
        bounded(
            "inspect volume",
            CALL_TIMEOUT,
            engine.calls().inspect_volume(name.to_owned()),
        )
        .await,
    )
}

/// Give a container a new name.
pub async fn rename_container(engine: &Engine, id: &str, name: &str) -> Result<()> {
    bounded(
        "rename container",
        CALL_TIMEOUT,
        engine
            .calls()
            .rename_container(id.to_owned(), name.to_owned()),
    )
    .await
}

/// Start a created container; `what` names it in an error (`start <what>`).
pub async fn start_container(engine: &Engine, what: &str, id: &str) -> Result<()> {
    bounded(
        &format!("start {what}"),
        CALL_TIMEOUT,
        engine.calls().start_container(id.to_owned()),
    )
    .await
}

/// Remove a container, running or not (gone already counts as removed).
pub async fn remove_container(engine: &Engine, id: &str) -> Result<()> {
    let removed = bounded(
        "remove container",
        CALL_TIMEOUT,
        engine.calls().remove_container(id.to_owned()),
    )
    .await;
    found(removed).map(drop)
}

/// Remove a volume (gone already counts as removed).
pub async fn remove_volume(engine: &Engine, name: &str) -> Result<()> {
    let removed = bounded(
        "remove volume",
        CALL_TIMEOUT,
        engine.calls().remove_volume(name.to_owned()),
    )
    .await;
    found(removed).map(drop)
}

/// Remove a network (gone already counts as removed).
pub async fn remove_network(engine: &Engine, id: &str) -> Result<()> {
    let removed = bounded(
        "remove network",
        CALL_TIMEOUT,
        engine.calls().remove_network(id.to_owned()),
    )
    .await;
    found(removed).map(drop)
}

/// The containers (stopped ones too), volumes and networks that carry a label (`key` or
/// `key=value`), as the engine lists them.
#[derive(Debug, Default)]
pub struct Listed {
    pub containers: Vec<ContainerSummary>,
    pub volumes: Vec<Volume>,
    pub networks: Vec<Network>,
}

/// One listed object: what it is (`container <id>`, `volume <name>`, `network <id>`) and its
/// labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    pub kind: ObjectKind,
    /// The container or network id, the volume name.
    pub id: String,
    pub labels: HashMap<String, String>,
}

impl Labelled {
    /// `container <id>`, `volume <name>`, `network <id>`.
    pub fn what(&self) -> String {
        format!("{} {}", self.kind.as_str(), self.id)
    }
}

impl Listed {
    pub async fn with_label(engine: &Engine, label: &str) -> Result<Listed> {
        let filters = HashMap::from([("label".to_owned(), vec![label.to_owned()])]);
        let calls = engine.calls();
        let containers = bounded(
            "list containers",
            CALL_TIMEOUT,
            calls.list_containers(Some(filters.clone())),
        );
        let volumes = bounded(
            "list volumes",
            CALL_TIMEOUT,
            calls.list_volumes(Some(filters.clone())),
        );
        let networks = bounded(
            "list networks",
            CALL_TIMEOUT,
            calls.list_networks(Some(filters)),
        );
        let (containers, volumes, networks) = tokio::try_join!(containers, volumes, networks)?;
        Ok(Listed {
            containers,
            volumes,
            networks,
        })
    }

    /// Every object listed, with its labels.
    pub fn labelled(self) -> Vec<Labelled> {
        let mut out: Vec<Labelled> = self
            .containers
            .into_iter()
            .map(|c| Labelled {
                kind: ObjectKind::Container,
                id: c.id.unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
            })
            .collect();
        out.extend(self.volumes.into_iter().map(|v| Labelled {
            kind: ObjectKind::Volume,
            id: v.name,
            labels: v.labels,
        }));
        out.extend(self.networks.into_iter().map(|n| Labelled {
            kind: ObjectKind::Network,
            id: n.id.unwrap_or_default(),
            labels: n.labels.unwrap_or_default(),
        }));
        out
    }
}

/// What one owner has on the engine: containers, volumes and networks, by id (volumes by name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
    pub networks: Vec<String>,
}

impl Owned {
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.volumes.is_empty() && self.networks.is_empty()
    }

    /// `container <id>`, `volume <name>`, `network <id>` for each.
    pub fn described(&self) -> Vec<String> {
        let each = |what: &str, ids: &[String]| {
            ids.iter()
                .map(|id| format!("{what} {id}"))
                .collect::<Vec<_>>()
        };
        [
            each("container", &self.containers),
            each("volume", &self.volumes),
            each("network", &self.networks),
        ]
        .concat()
    }
}

/// Everything carrying this owner's label.
pub async fn list_owned(engine: &Engine, owner: &Owner) -> Result<Owned> {
    let listed = Listed::with_label(engine, &format!("{OWNER}={}", owner.as_str())).await?;
    Ok(Owned {
        containers: listed.containers.into_iter().filter_map(|c| c.id).collect(),
        volumes: listed.volumes.into_iter().map(|v| v.name).collect(),
        networks: listed.networks.into_iter().filter_map(|n| n.id).collect(),
    })
}

/// Every container, volume and network carrying the allocation id, with its labels.
pub async fn with_allocation(engine: &Engine, id: &uuid::Uuid) -> Result<Vec<Labelled>> {
    Ok(Listed::with_label(engine, &format!("{ALLOCATION}={id}"))
        .await?
        .labelled())
}

/// Every live object labelled with `uid` (any owner).
pub async fn uid_holders(engine: &Engine, uid: Uid) -> Result<Vec<Holder>> {
    let listed = Listed::with_label(engine, &format!("{UID}={uid}")).await?;
    Ok(listed
        .labelled()
        .into_iter()
        .filter(|o| o.kind != ObjectKind::Network)
        .map(|o| Holder {
            what: o.what(),
            kind: o.labels.get(KIND).and_then(|k| Kind::parse(k)),
            allocation: o.labels.get(ALLOCATION).cloned(),
        })
        .collect())
}

/// The containers (any state) that mount any of `volumes`, as the engine lists them.
pub async fn volume_users(engine: &Engine, volumes: &[&str]) -> Result<BTreeSet<String>> {
    let calls = engine.calls();
    let lists = volumes.iter().map(|name| {
        let filters = HashMap::from([("volume".to_owned(), vec![(*name).to_owned()])]);
        bounded(
            "list a volume's containers",
            CALL_TIMEOUT,
            calls.list_containers(Some(filters)),
        )
    });
    let listed = futures_util::future::try_join_all(lists).await?;
    Ok(listed.into_iter().flatten().filter_map(|c| c.id).collect())
}

/// The uids live cordon objects carry (any owner).
pub async fn live_uids(engine: &Engine) -> Result<BTreeSet<u32>> {
    let listed = Listed::with_label(engine, UID).await?;
    Ok(listed
        .labelled()
        .iter()
        .filter(|o| o.kind != ObjectKind::Network)
        .filter_map(|o| o.labels.get(UID)?.parse().ok())
        .collect())
}

/// Volumes named like cordon's (`cordon-<kind>-<uuid>`) that carry no label at all and no option:
/// what the engine makes on its own for a create that names a missing volume. A volume being
/// created shows like that for a moment (the local driver lists it before the daemon has stored
/// its labels: seen here once in 200 creates listed in a loop), so a sighting counts only if it
/// still holds [`UNLABELLED_CONFIRM`] later.
pub async fn unlabelled_cordon_volumes(engine: &Engine) -> Result<Vec<String>> {
    let seen = unlabelled_now(engine).await?;
    if seen.is_empty() {
        return Ok(seen);
    }
    tokio::time::sleep(UNLABELLED_CONFIRM).await;
    let again = unlabelled_now(engine).await?;
    Ok(seen.into_iter().filter(|v| again.contains(v)).collect())
}

/// How long an unlabelled sighting must last to count.
pub const UNLABELLED_CONFIRM: std::time::Duration = std::time::Duration::from_secs(2);

async fn unlabelled_now(engine: &Engine) -> Result<Vec<String>> {
    let filters = HashMap::from([("name".to_owned(), vec![NAME_PREFIX.to_owned()])]);
    let volumes = bounded(
        "list volumes",
        CALL_TIMEOUT,
        engine.calls().list_volumes(Some(filters)),
    )
    .await?;
    Ok(volumes
        .into_iter()
        .filter(|v| engine_made(&v.labels, &v.options))
        .filter(|v| ObjectName::parse(&v.name).is_some_and(|n| n.kind.is_some()))
        .map(|v| v.name)
        .collect())
}

/// A volume with no label and no option: what the engine makes on its own.
pub fn engine_made(labels: &HashMap<String, String>, options: &HashMap<String, String>) -> bool {
    labels.is_empty() && options.is_empty()
}

/// Labels as a sorted map (how records keep them).
pub fn sorted(labels: &HashMap<String, String>) -> BTreeMap<String, String> {
    labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The engine's events that match `filters`, from a second before `since` (when the request
/// whose events a caller awaits was sent) on: the engine answers those it still keeps (its last
/// 256) and then the new ones, under one lock, so none falls between the two. A caller races the
/// stream with that request's own return: the stream may end or fail first.
pub fn events_since(
    engine: &Engine,
    filters: HashMap<String, Vec<String>>,
    since: std::time::SystemTime,
) -> impl futures_util::Stream<
    Item = std::result::Result<bollard::models::EventMessage, bollard::errors::Error>,
> {
    let since = since
        .checked_sub(std::time::Duration::from_secs(1))
        .unwrap_or(since)
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()));
    let options = bollard::query_parameters::EventsOptions {
        since,
        until: None,
        filters: Some(filters),
    };
    engine.docker().events(Some(options))
}
