//! Removing what cordon made: by the id captured at create, and listing by owner label.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::query_parameters::{RemoveContainerOptions, RemoveVolumeOptions};

use crate::engine::{bounded, Engine, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::labels::{Owner, OWNER};

/// Objects created by one operation, recorded at create time so cleanup never depends on labels
/// or names that could have changed.
#[derive(Debug, Default, Clone)]
pub struct Created {
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
}

fn not_found(e: &Error) -> bool {
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

async fn remove_container(engine: &Engine, id: &str) -> Result<()> {
    let options = RemoveContainerOptions {
        force: true,
        v: false,
        link: false,
    };
    match bounded(
        "remove container",
        CALL_TIMEOUT,
        engine.docker().remove_container(id, Some(options)),
    )
    .await
    {
        Err(e) if !not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

async fn remove_volume(engine: &Engine, name: &str) -> Result<()> {
    let options = RemoveVolumeOptions { force: true };
    match bounded(
        "remove volume",
        CALL_TIMEOUT,
        engine.docker().remove_volume(name, Some(options)),
    )
    .await
    {
        Err(e) if !not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

impl Created {
    /// Containers first (they hold the volumes), then volumes; failures are retried every second
    /// until `budget` runs out, then named.
    pub async fn remove_all(&self, engine: &Engine, budget: Duration) -> Result<()> {
        let start = Instant::now();
        let mut containers = self.containers.clone();
        let mut volumes = self.volumes.clone();
        loop {
            let mut left_containers = Vec::new();
            for id in &containers {
                if remove_container(engine, id).await.is_err() {
                    left_containers.push(id.clone());
                }
            }
            let mut left_volumes = Vec::new();
            for name in &volumes {
                if remove_volume(engine, name).await.is_err() {
                    left_volumes.push(name.clone());
                }
            }
            containers = left_containers;
            volumes = left_volumes;
            if containers.is_empty() && volumes.is_empty() {
                return Ok(());
            }
            if start.elapsed() >= budget {
                let mut unreleased: Vec<String> = containers
                    .iter()
                    .map(|c| format!("container {c}"))
                    .collect();
                unreleased.extend(volumes.iter().map(|v| format!("volume {v}")));
                return Err(Error::Unreleased(unreleased));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Add another record's objects.
    pub fn extend(&mut self, other: Created) {
        self.containers.extend(other.containers);
        self.volumes.extend(other.volumes);
    }
}

/// Every container and volume carrying this owner's label: `(containers, volumes)`.
pub async fn list_owned(engine: &Engine, owner: &Owner) -> Result<(Vec<String>, Vec<String>)> {
    let listed = Listed::with_label(engine, &format!("{OWNER}={}", owner.as_str())).await?;
    Ok((
        listed.containers.into_iter().filter_map(|c| c.id).collect(),
        listed.volumes.into_iter().map(|v| v.name).collect(),
    ))
}

/// The containers (stopped ones too), volumes and networks that carry a label (`key` or
/// `key=value`), as the engine lists them.
#[derive(Debug)]
pub struct Listed {
    pub containers: Vec<bollard::models::ContainerSummary>,
    pub volumes: Vec<bollard::models::Volume>,
    pub networks: Vec<bollard::models::Network>,
}

impl Listed {
    pub async fn with_label(engine: &Engine, label: &str) -> Result<Listed> {
        let filters = HashMap::from([("label".to_owned(), vec![label.to_owned()])]);
        let docker = engine.docker();
        let containers = bounded(
            "list containers",
            CALL_TIMEOUT,
            docker.list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            })),
        )
        .await?;
        let volumes = bounded(
            "list volumes",
            CALL_TIMEOUT,
            docker.list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
                filters: Some(filters.clone()),
            })),
        )
        .await?
        .volumes
        .unwrap_or_default();
        let networks = bounded(
            "list networks",
            CALL_TIMEOUT,
            docker.list_networks(Some(bollard::query_parameters::ListNetworksOptions {
                filters: Some(filters),
            })),
        )
        .await?;
        Ok(Listed {
            containers,
            volumes,
            networks,
        })
    }
}

/// Remove everything an owner left (tests and the gate use this as a last resort; recovery proper
/// reports what it removed).
pub async fn remove_owned(engine: &Engine, owner: &Owner) -> Result<()> {
    let (containers, volumes) = list_owned(engine, owner).await?;
    Created {
        containers,
        volumes,
    }
    .remove_all(engine, Duration::from_secs(10))
    .await
}
