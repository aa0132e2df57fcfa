//! A recording fake of the engine's object calls, for unit tests of what cordon decides: it keeps
//! containers, volumes and networks in memory with the engine's rules that cleanup and recovery
//! depend on (a name is taken once; a volume in use and a network with a container on it refuse
//! removal; a create naming a missing volume makes it, unlabelled), logs every call in order, and
//! follows a [`Script`]: creates whose answer never comes (the object lands now, later or never)
//! and objects whose removal the engine keeps refusing.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use bollard::errors::Error as EngineError;
use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, ContainerSummary,
    ContainerSummaryStateEnum, MountType, Network, NetworkCreateRequest, NetworkInspect, Volume,
    VolumeCreateRequest,
};
use futures_util::FutureExt;
use tokio::time::Instant;

use super::calls::{Answer, Calls, Filters};

/// One container as the fake holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeContainer {
    pub id: String,
    pub name: String,
    pub labels: HashMap<String, String>,
    pub running: bool,
    /// The volumes its mounts name.
    pub volumes: Vec<String>,
    /// The user-defined network it is on.
    pub network: Option<String>,
}

/// One volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeVolume {
    pub name: String,
    pub labels: HashMap<String, String>,
    pub options: HashMap<String, String>,
}

/// One network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeNetwork {
    pub id: String,
    pub name: String,
    pub labels: HashMap<String, String>,
}

/// An object the fake holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Container(FakeContainer),
    Volume(FakeVolume),
    Network(FakeNetwork),
}

/// How a create of a given name goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// No answer comes (the caller's deadline cuts it); the object lands after this long
    /// (`Duration::ZERO`: at once).
    LandsAfter(Duration),
    /// No answer comes and nothing is made.
    Never,
}

/// What the fake does besides following the engine's rules.
#[derive(Debug, Default)]
pub struct Script {
    /// Creates by name whose answer never comes.
    pub cut: HashMap<String, Cut>,
    /// Ids or names whose removal the engine refuses (409) every time.
    pub stuck: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct State {
    containers: Vec<FakeContainer>,
    volumes: Vec<FakeVolume>,
    networks: Vec<FakeNetwork>,
    /// Objects of cut creates, with when they appear.
    landing: Vec<(Instant, Object)>,
    log: Vec<String>,
    next_id: u64,
    script: Script,
}

/// The recording fake.
#[derive(Debug, Default)]
pub struct Recording {
    state: Mutex<State>,
}

fn refused(status_code: u16, message: String) -> EngineError {
    EngineError::DockerResponseServerError {
        status_code,
        message,
    }
}

fn no_such(what: &str, id: &str) -> EngineError {
    refused(404, format!("no such {what}: {id}"))
}

/// Every label filter (`key` or `key=value`) and name filter (a part of the name) holds.
fn matches(filters: &Option<Filters>, name: &str, labels: &HashMap<String, String>) -> bool {
    let Some(filters) = filters else {
        return true;
    };
    let labelled = filters
        .get("label")
        .into_iter()
        .flatten()
        .all(|f| match f.split_once('=') {
            Some((k, v)) => labels.get(k).is_some_and(|l| l == v),
            None => labels.contains_key(f.as_str()),
        });
    let named = filters
        .get("name")
        .into_iter()
        .flatten()
        .all(|part| name.contains(part.as_str()));
    labelled && named
}

impl State {
    /// Objects of cut creates whose time has come appear.
    fn settle(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.landing)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.landing = later;
        for (_, object) in due {
            self.put(object);
        }
    }

    fn put(&mut self, object: Object) {
        match object {
            Object::Container(c) => {
                for v in &c.volumes {
                    // The engine makes a missing named volume, with no label and no option.
                    if !self.volumes.iter().any(|x| &x.name == v) {
                        self.volumes.push(FakeVolume {
                            name: v.clone(),
                            labels: HashMap::new(),
                            options: HashMap::new(),
                        });
                    }
                }
                self.containers.push(c)
            }
            Object::Volume(v) => {
                self.volumes.retain(|x| x.name != v.name);
                self.volumes.push(v)
            }
            Object::Network(n) => self.networks.push(n),
        }
    }

    fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("{:064x}", self.next_id)
    }

    fn name_taken(&self, name: &str) -> bool {
        self.containers.iter().any(|c| c.name == name)
            || self.networks.iter().any(|n| n.name == name)
            || self.landing.iter().any(|(_, o)| match o {
                Object::Container(c) => c.name == name,
                Object::Network(n) => n.name == name,
                Object::Volume(_) => false,
            })
    }

    /// Make `object` (named `name`) as the script says: at once, later, or never.
    fn create(&mut self, name: &str, object: Object) -> Result<(), EngineError> {
        match self.script.cut.get(name).copied() {
            None => {
                self.put(object);
                Ok(())
            }
            Some(Cut::Never) => Err(EngineError::RequestTimeoutError),
            Some(Cut::LandsAfter(after)) => {
                self.landing.push((Instant::now() + after, object));
                self.settle();
                Err(EngineError::RequestTimeoutError)
            }
        }
    }

    fn container(&self, id: &str) -> Option<&FakeContainer> {
        self.containers.iter().find(|c| c.id == id || c.name == id)
    }

    fn network(&self, id: &str) -> Option<&FakeNetwork> {
        self.networks.iter().find(|n| n.id == id || n.name == id)
    }

    fn stuck(&self, key: &str) -> Result<(), EngineError> {
        if self.script.stuck.contains(key) {
            return Err(refused(409, format!("{key} is busy")));
        }
        Ok(())
    }
}

impl Recording {
    /// A fake holding `objects`, following `script`.
    pub fn new(objects: Vec<Object>, script: Script) -> Recording {
        let mut state = State {
            script,
            ..State::default()
        };
        for o in objects {
            state.put(o);
        }
        Recording {
            state: Mutex::new(state),
        }
    }

    /// Every call so far, in order (`remove volume <name>`, `list containers`, ...).
    pub fn log(&self) -> Vec<String> {
        self.with(|s| s.log.clone())
    }

    /// The calls so far that start with `prefix`.
    pub fn calls_of(&self, prefix: &str) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect()
    }

    /// What the fake holds now (`container <name>`, `volume <name>`, `network <name>`), sorted.
    pub fn holds(&self) -> Vec<String> {
        self.with(|s| {
            s.settle();
            let mut out: Vec<String> = s
                .containers
                .iter()
                .map(|c| format!("container {}", c.name))
                .chain(s.volumes.iter().map(|v| format!("volume {}", v.name)))
                .chain(s.networks.iter().map(|n| format!("network {}", n.name)))
                .collect();
            out.sort();
            out
        })
    }

    /// A container's id by name.
    pub fn id_of(&self, name: &str) -> Option<String> {
        self.with(|s| s.container(name).map(|c| c.id.clone()))
    }

    /// Another process makes `object`.
    pub fn add(&self, object: Object) {
        self.with(|s| s.put(object));
    }

    /// Stop refusing the removal of `key`.
    pub fn unstick(&self, key: &str) {
        self.with(|s| s.script.stuck.remove(key));
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Log `call`, let due objects land, then answer with `f`.
    fn call<T: Send + 'static>(
        &self,
        call: String,
        f: impl FnOnce(&mut State) -> Result<T, EngineError>,
    ) -> Answer<'_, T> {
        let answer = self.with(|s| {
            s.log.push(call);
            s.settle();
            f(s)
        });
        async move { answer }.boxed()
    }
}

fn container_of(name: String, id: String, body: &ContainerCreateBody) -> FakeContainer {
    let host = body.host_config.clone().unwrap_or_default();
    let volumes = host
        .mounts
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.typ == Some(MountType::VOLUME))
        .filter_map(|m| m.source)
        .collect();
    let network = host
        .network_mode
        .filter(|m| !["none", "bridge", "host", "default"].contains(&m.as_str()));
    FakeContainer {
        id,
        name,
        labels: body.labels.clone().unwrap_or_default(),
        running: false,
        volumes,
        network,
    }
}

impl Calls for Recording {
    fn create_volume(&self, request: VolumeCreateRequest) -> Answer<'_, Volume> {
        let name = request.name.clone().unwrap_or_default();
        self.call(format!("create volume {name}"), move |s| {
            // The engine answers a create of an existing volume with that volume.
            if let Some(v) = s.volumes.iter().find(|v| v.name == name) {
                return Ok(volume(v));
            }
            let made = FakeVolume {
                name: name.clone(),
                labels: request.labels.unwrap_or_default(),
                options: request.driver_opts.unwrap_or_default(),
            };
            s.create(&name, Object::Volume(made.clone()))?;
            Ok(volume(&made))
        })
    }

    fn create_container(&self, name: String, body: ContainerCreateBody) -> Answer<'_, String> {
        self.call(format!("create container {name}"), move |s| {
            if s.name_taken(&name) {
                return Err(refused(409, format!("name {name} is in use")));
            }
            let id = s.new_id();
            let made = container_of(name.clone(), id.clone(), &body);
            if let Some(n) = &made.network {
                if s.network(n).is_none() {
                    return Err(no_such("network", n));
                }
            }
            s.create(&name, Object::Container(made))?;
            Ok(id)
        })
    }

    fn create_network(&self, request: NetworkCreateRequest) -> Answer<'_, String> {
        let name = request.name.clone();
        self.call(format!("create network {name}"), move |s| {
            if s.name_taken(&name) {
                return Err(refused(409, format!("network {name} exists")));
            }
            let id = s.new_id();
            let made = FakeNetwork {
                id: id.clone(),
                name: name.clone(),
                labels: request.labels.unwrap_or_default(),
            };
            s.create(&name, Object::Network(made))?;
            Ok(id)
        })
    }

    fn start_container(&self, id: String) -> Answer<'_, ()> {
        self.call(format!("start container {id}"), move |s| {
            let c = s
                .containers
                .iter_mut()
                .find(|c| c.id == id || c.name == id)
                .ok_or_else(|| no_such("container", &id))?;
            c.running = true;
            Ok(())
        })
    }

    fn inspect_container(&self, id: String) -> Answer<'_, ContainerInspectResponse> {
        self.call(format!("inspect container {id}"), move |s| {
            let c = s.container(&id).ok_or_else(|| no_such("container", &id))?;
            Ok(ContainerInspectResponse {
                id: Some(c.id.clone()),
                name: Some(format!("/{}", c.name)),
                config: Some(ContainerConfig {
                    labels: Some(c.labels.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
    }

    fn inspect_volume(&self, name: String) -> Answer<'_, Volume> {
        self.call(format!("inspect volume {name}"), move |s| {
            s.volumes
                .iter()
                .find(|v| v.name == name)
                .map(volume)
                .ok_or_else(|| no_such("volume", &name))
        })
    }

    fn inspect_network(&self, id: String) -> Answer<'_, NetworkInspect> {
        self.call(format!("inspect network {id}"), move |s| {
            let n = s.network(&id).ok_or_else(|| no_such("network", &id))?;
            Ok(NetworkInspect {
                id: Some(n.id.clone()),
                name: Some(n.name.clone()),
                labels: Some(n.labels.clone()),
                ..Default::default()
            })
        })
    }

    fn rename_container(&self, id: String, name: String) -> Answer<'_, ()> {
        self.call(format!("rename container {id} {name}"), move |s| {
            if s.name_taken(&name) {
                return Err(refused(409, format!("name {name} is in use")));
            }
            let c = s
                .containers
                .iter_mut()
                .find(|c| c.id == id || c.name == id)
                .ok_or_else(|| no_such("container", &id))?;
            c.name = name;
            Ok(())
        })
    }

    fn remove_container(&self, id: String) -> Answer<'_, ()> {
        self.call(format!("remove container {id}"), move |s| {
            let at = s
                .containers
                .iter()
                .position(|c| c.id == id || c.name == id)
                .ok_or_else(|| no_such("container", &id))?;
            s.stuck(&s.containers[at].id.clone())?;
            s.containers.remove(at);
            Ok(())
        })
    }

    fn remove_volume(&self, name: String) -> Answer<'_, ()> {
        self.call(format!("remove volume {name}"), move |s| {
            let at = s
                .volumes
                .iter()
                .position(|v| v.name == name)
                .ok_or_else(|| no_such("volume", &name))?;
            s.stuck(&name)?;
            if s.containers.iter().any(|c| c.volumes.contains(&name)) {
                return Err(refused(409, format!("volume {name} is in use")));
            }
            s.volumes.remove(at);
            Ok(())
        })
    }

    fn remove_network(&self, id: String) -> Answer<'_, ()> {
        self.call(format!("remove network {id}"), move |s| {
            let n = s
                .network(&id)
                .ok_or_else(|| no_such("network", &id))?
                .clone();
            s.stuck(&n.id)?;
            let on = |c: &FakeContainer| {
                c.network
                    .as_ref()
                    .is_some_and(|x| *x == n.name || *x == n.id)
            };
            if s.containers.iter().any(on) {
                return Err(refused(403, format!("network {id} has active endpoints")));
            }
            s.networks.retain(|x| x.id != n.id);
            Ok(())
        })
    }

    fn list_containers(&self, filters: Option<Filters>) -> Answer<'_, Vec<ContainerSummary>> {
        self.call("list containers".to_owned(), move |s| {
            Ok(s.containers
                .iter()
                .filter(|c| matches(&filters, &c.name, &c.labels))
                .map(|c| ContainerSummary {
                    id: Some(c.id.clone()),
                    names: Some(vec![format!("/{}", c.name)]),
                    labels: Some(c.labels.clone()),
                    state: Some(if c.running {
                        ContainerSummaryStateEnum::RUNNING
                    } else {
                        ContainerSummaryStateEnum::CREATED
                    }),
                    ..Default::default()
                })
                .collect())
        })
    }

    fn list_volumes(&self, filters: Option<Filters>) -> Answer<'_, Vec<Volume>> {
        self.call("list volumes".to_owned(), move |s| {
            Ok(s.volumes
                .iter()
                .filter(|v| matches(&filters, &v.name, &v.labels))
                .map(volume)
                .collect())
        })
    }

    fn list_networks(&self, filters: Option<Filters>) -> Answer<'_, Vec<Network>> {
        self.call("list networks".to_owned(), move |s| {
            Ok(s.networks
                .iter()
                .filter(|n| matches(&filters, &n.name, &n.labels))
                .map(|n| Network {
                    id: Some(n.id.clone()),
                    name: Some(n.name.clone()),
                    labels: Some(n.labels.clone()),
                    ..Default::default()
                })
                .collect())
        })
    }
}

fn volume(v: &FakeVolume) -> Volume {
    Volume {
        name: v.name.clone(),
        labels: v.labels.clone(),
        options: v.options.clone(),
        driver: "local".to_owned(),
        ..Default::default()
    }
}
