//! The seam between cordon's decisions and the engine: every call that makes, finds, starts,
//! renames or removes a container, volume or network goes through [`Calls`]. The real one is
//! [`Bollard`] (the pinned client); tests use a recording fake (`engine/fake.rs`) to prove what
//! cleanup, recovery and allocation decide when the engine answers late, refuses, or holds
//! someone else's object. Streams (attach, logs, wait, archives) and images stay on the pinned
//! bollard client: what they carry is the daemon's behaviour, not a decision of cordon's.
//!
//! [`Faulty`] sits over either and fails removals on request (`Engine::inject_removal_failures`),
//! so the real-engine suite can prove what a failing cleanup reports.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, Network, NetworkCreateRequest,
    NetworkInspect, Volume, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectNetworkOptions, ListContainersOptions, ListNetworksOptions,
    ListVolumesOptions, RemoveContainerOptions, RemoveVolumeOptions, RenameContainerOptions,
};
use bollard::Docker;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

/// What the engine answered, or how the call failed without an answer.
pub type Answer<'a, T> = BoxFuture<'a, Result<T, bollard::errors::Error>>;

/// List filters as the engine takes them (`label` = `key` or `key=value`, `name` = a part of the
/// name).
pub type Filters = HashMap<String, Vec<String>>;

/// The engine calls of an object's life. Ids and names are taken owned so a call's future borrows
/// only the engine.
pub trait Calls: Send + Sync + std::fmt::Debug {
    /// Create a named volume; returns it as the engine stored it.
    fn create_volume(&self, request: VolumeCreateRequest) -> Answer<'_, Volume>;
    /// Create a container named `name`; returns its id.
    fn create_container(&self, name: String, body: ContainerCreateBody) -> Answer<'_, String>;
    /// Create a network; returns its id.
    fn create_network(&self, request: NetworkCreateRequest) -> Answer<'_, String>;
    fn start_container(&self, id: String) -> Answer<'_, ()>;
    fn inspect_container(&self, id: String) -> Answer<'_, ContainerInspectResponse>;
    fn inspect_volume(&self, name: String) -> Answer<'_, Volume>;
    fn inspect_network(&self, id: String) -> Answer<'_, NetworkInspect>;
    fn rename_container(&self, id: String, name: String) -> Answer<'_, ()>;
    /// Remove a container, running or not (forced; its volumes stay).
    fn remove_container(&self, id: String) -> Answer<'_, ()>;
    fn remove_volume(&self, name: String) -> Answer<'_, ()>;
    fn remove_network(&self, id: String) -> Answer<'_, ()>;
    /// Containers, stopped ones too.
    fn list_containers(&self, filters: Option<Filters>) -> Answer<'_, Vec<ContainerSummary>>;
    fn list_volumes(&self, filters: Option<Filters>) -> Answer<'_, Vec<Volume>>;
    fn list_networks(&self, filters: Option<Filters>) -> Answer<'_, Vec<Network>>;
}

/// The real engine, through the version-pinned bollard client.
#[derive(Debug, Clone)]
pub struct Bollard(pub Docker);

impl Calls for Bollard {
    fn create_volume(&self, request: VolumeCreateRequest) -> Answer<'_, Volume> {
        self.0.create_volume(request).boxed()
    }

    fn create_container(&self, name: String, body: ContainerCreateBody) -> Answer<'_, String> {
        async move {
            let options = CreateContainerOptions {
                name: Some(name),
                ..Default::default()
            };
            Ok(self.0.create_container(Some(options), body).await?.id)
        }
        .boxed()
    }

    fn create_network(&self, request: NetworkCreateRequest) -> Answer<'_, String> {
        async move { Ok(self.0.create_network(request).await?.id) }.boxed()
    }

    fn start_container(&self, id: String) -> Answer<'_, ()> {
        async move { self.0.start_container(&id, None).await }.boxed()
    }

    fn inspect_container(&self, id: String) -> Answer<'_, ContainerInspectResponse> {
        async move { self.0.inspect_container(&id, None).await }.boxed()
    }

    fn inspect_volume(&self, name: String) -> Answer<'_, Volume> {
        async move { self.0.inspect_volume(&name).await }.boxed()
    }

    fn inspect_network(&self, id: String) -> Answer<'_, NetworkInspect> {
        async move {
            self.0
                .inspect_network(&id, None::<InspectNetworkOptions>)
                .await
        }
        .boxed()
    }

    fn rename_container(&self, id: String, name: String) -> Answer<'_, ()> {
        async move {
            self.0
                .rename_container(&id, RenameContainerOptions { name })
                .await
        }
        .boxed()
    }

    fn remove_container(&self, id: String) -> Answer<'_, ()> {
        async move {
            let options = RemoveContainerOptions {
                force: true,
                v: false,
                link: false,
            };
            self.0.remove_container(&id, Some(options)).await
        }
        .boxed()
    }

    fn remove_volume(&self, name: String) -> Answer<'_, ()> {
        async move {
            let options = RemoveVolumeOptions { force: true };
            self.0.remove_volume(&name, Some(options)).await
        }
        .boxed()
    }

    fn remove_network(&self, id: String) -> Answer<'_, ()> {
        async move { self.0.remove_network(&id).await }.boxed()
    }

    fn list_containers(&self, filters: Option<Filters>) -> Answer<'_, Vec<ContainerSummary>> {
        let options = ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        };
        self.0.list_containers(Some(options)).boxed()
    }

    fn list_volumes(&self, filters: Option<Filters>) -> Answer<'_, Vec<Volume>> {
        async move {
            let listed = self
                .0
                .list_volumes(Some(ListVolumesOptions { filters }))
                .await?;
            Ok(listed.volumes.unwrap_or_default())
        }
        .boxed()
    }

    fn list_networks(&self, filters: Option<Filters>) -> Answer<'_, Vec<Network>> {
        self.0
            .list_networks(Some(ListNetworksOptions { filters }))
            .boxed()
    }
}

/// Removal failures asked for: while `failing_removals` is non-zero, each removal fails with an
/// engine refusal (400) without reaching the engine, and the count goes down by one.
#[derive(Debug, Default)]
pub struct Faults {
    failing_removals: AtomicUsize,
}

impl Faults {
    pub fn fail_removals(&self, count: usize) {
        self.failing_removals.store(count, Ordering::SeqCst);
    }

    /// This removal fails (and is counted).
    fn take_removal(&self) -> bool {
        self.failing_removals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// The refusal an injected removal failure answers with.
fn injected(what: &str) -> bollard::errors::Error {
    bollard::errors::Error::DockerResponseServerError {
        status_code: 400,
        message: format!("removal of {what} refused (injected fault)"),
    }
}

/// [`Calls`] with removal failures injected on request.
#[derive(Debug)]
pub struct Faulty {
    pub inner: Arc<dyn Calls>,
    pub faults: Arc<Faults>,
}

impl Faulty {
    fn removal(&self, what: String, call: Answer<'static, ()>) -> Answer<'static, ()> {
        if self.faults.take_removal() {
            async move { Err(injected(&what)) }.boxed()
        } else {
            call
        }
    }
}

impl Calls for Faulty {
    fn create_volume(&self, request: VolumeCreateRequest) -> Answer<'_, Volume> {
        self.inner.create_volume(request)
    }
    fn create_container(&self, name: String, body: ContainerCreateBody) -> Answer<'_, String> {
        self.inner.create_container(name, body)
    }
    fn create_network(&self, request: NetworkCreateRequest) -> Answer<'_, String> {
        self.inner.create_network(request)
    }
    fn start_container(&self, id: String) -> Answer<'_, ()> {
        self.inner.start_container(id)
    }
    fn inspect_container(&self, id: String) -> Answer<'_, ContainerInspectResponse> {
        self.inner.inspect_container(id)
    }
    fn inspect_volume(&self, name: String) -> Answer<'_, Volume> {
        self.inner.inspect_volume(name)
    }
    fn inspect_network(&self, id: String) -> Answer<'_, NetworkInspect> {
        self.inner.inspect_network(id)
    }
    fn rename_container(&self, id: String, name: String) -> Answer<'_, ()> {
        self.inner.rename_container(id, name)
    }
    fn remove_container(&self, id: String) -> Answer<'_, ()> {
        let inner = self.inner.clone();
        let what = format!("container {id}");
        self.removal(
            what,
            async move { inner.remove_container(id).await }.boxed(),
        )
    }
    fn remove_volume(&self, name: String) -> Answer<'_, ()> {
        let inner = self.inner.clone();
        let what = format!("volume {name}");
        self.removal(what, async move { inner.remove_volume(name).await }.boxed())
    }
    fn remove_network(&self, id: String) -> Answer<'_, ()> {
        let inner = self.inner.clone();
        let what = format!("network {id}");
        self.removal(what, async move { inner.remove_network(id).await }.boxed())
    }
    fn list_containers(&self, filters: Option<Filters>) -> Answer<'_, Vec<ContainerSummary>> {
        self.inner.list_containers(filters)
    }
    fn list_volumes(&self, filters: Option<Filters>) -> Answer<'_, Vec<Volume>> {
        self.inner.list_volumes(filters)
    }
    fn list_networks(&self, filters: Option<Filters>) -> Answer<'_, Vec<Network>> {
        self.inner.list_networks(filters)
    }
}
