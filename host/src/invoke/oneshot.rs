//! One invocation end to end, as `cordon run` and the invocation benchmark do it: prepare task
//! storage from a repository, capture, start, settle, remove the storage.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cordon_contract::{Phase, Vendor};

use super::{capture, start, Credential, ImageSource, InvocationResult, Options, Request};
use crate::controller::Controller;
use crate::error::Result;
use crate::labels::Owner;
use crate::profile::Area;
use crate::task::{self, PrepareRequest};

/// What one run needs.
#[derive(Debug, Clone)]
pub struct OneShot {
    pub phase: Phase,
    pub vendor: Vendor,
    pub repo: PathBuf,
    pub head: String,
    pub prompt: String,
    pub schema: Option<PathBuf>,
    pub owner: Owner,
    pub attempt: String,
    /// Defaults to the commit the storage was seeded from.
    pub referenced_code_hash: Option<String>,
    /// For the invocation (storage preparation has its own).
    pub deadline: Duration,
    pub credential: Option<Credential>,
    pub work: Area,
    /// Where the storage's uid comes from.
    pub uids: crate::uids::UidRange,
    /// The network allowlist (empty: no network, no proxy).
    pub allow: Vec<String>,
    /// How its egress is set up.
    pub egress: super::EgressOptions,
    /// How the vendor CLI reaches its API.
    pub vendor_options: super::VendorOptions,
    /// The image's exec allowlist when it is an agent image ([`ImageSource::Agent`]); `None`
    /// for the test image ([`ImageSource::Id`]).
    pub exec: Option<Vec<String>>,
}

/// Where the time went (milliseconds).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct OneShotTimings {
    pub prepare_ms: f64,
    pub invoke_ms: f64,
    pub remove_ms: f64,
    pub total_ms: f64,
}

/// The settled result, and what happened to the storage.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OneShotReport {
    pub result: InvocationResult,
    /// Set when the storage could not be removed (its id and error); the runner must keep it.
    pub storage_left: Option<String>,
    pub timings: OneShotTimings,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Run one invocation on its own storage. `shutdown` resolving stops it (`shutdown` reason).
pub async fn oneshot(
    ctl: &Controller,
    image_id: &str,
    run: &OneShot,
    shutdown: impl Future<Output = ()>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<OneShotReport> {
    let started = Instant::now();
    let prepare = PrepareRequest {
        repo: run.repo.clone(),
        head: run.head.clone(),
        owner: run.owner.clone(),
        attempt: run.attempt.clone(),
        allocation: None,
        work: run.work,
        deadline: Duration::from_secs(600),
        uids: run.uids,
    };
    let storage = task::prepare_with(ctl, image_id, &prepare, |_| {}, progress).await?;
    let prepare_ms = ms(started);
    let invoked = Instant::now();
    let outcome = async {
        let request = Request {
            phase: run.phase,
            vendor: run.vendor,
            prompt: run.prompt.clone(),
            schema: run.schema.clone(),
            referenced_code_hash: run
                .referenced_code_hash
                .clone()
                .or_else(|| storage.head.clone())
                .unwrap_or_default(),
            deadline: Instant::now() + run.deadline,
            network_allowlist: run.allow.clone(),
            attempt: run.attempt.clone(),
            storage: storage.clone(),
        };
        let captured = capture(ctl, request)?;
        progress("running the agent");
        let handle = start(
            ctl,
            captured,
            run.credential.clone(),
            Options {
                egress: run.egress.clone(),
                vendor: run.vendor_options.clone(),
                ..Options::new(match &run.exec {
                    Some(exec) => ImageSource::Agent {
                        id: image_id.to_owned(),
                        exec: exec.clone(),
                    },
                    None => ImageSource::Id(image_id.to_owned()),
                })
            },
        )
        .await?;
        tokio::pin!(shutdown);
        let settled = handle.settled();
        tokio::pin!(settled);
        let result = tokio::select! {
            result = &mut settled => result,
            () = &mut shutdown => {
                handle.stop(super::StopReason::Shutdown);
                settled.await
            }
        };
        Ok::<_, crate::Error>(result)
    }
    .await;
    let invoke_ms = ms(invoked);
    progress("removing the task storage");
    let removed = Instant::now();
    let storage_left = task::remove(ctl, &storage)
        .await
        .err()
        .map(|e| format!("{}: {e}", storage.allocation));
    let remove_ms = ms(removed);
    Ok(OneShotReport {
        result: outcome?.as_ref().clone(),
        storage_left,
        timings: OneShotTimings {
            prepare_ms,
            invoke_ms,
            remove_ms,
            total_ms: ms(started),
        },
    })
}
