//! A started invocation as the runner holds it: where it is, how to stop it, its result once
//! settled.

use std::sync::Arc;

use tokio::sync::watch;

use super::InvocationResult;

/// Why an invocation was stopped before it finished on its own. The first one wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    Timeout,
    Cancelled,
    Shutdown,
}

impl StopReason {
    /// The reason as `--json` spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Timeout => "timeout",
            StopReason::Cancelled => "cancelled",
            StopReason::Shutdown => "shutdown",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an invocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Building,
    Creating,
    Running,
    Stopping,
    Cleaning,
    Settled,
}

/// A started invocation.
#[derive(Debug, Clone)]
pub struct Handle {
    pub(super) attempt: String,
    pub(super) allocation: uuid::Uuid,
    pub(super) stop: Arc<watch::Sender<Option<StopReason>>>,
    pub(super) step: watch::Receiver<Step>,
    pub(super) result: watch::Receiver<Option<Arc<InvocationResult>>>,
}

impl Handle {
    pub fn attempt(&self) -> &str {
        &self.attempt
    }
    /// The invocation's allocation id (its container and invocation volumes carry it).
    pub fn allocation(&self) -> uuid::Uuid {
        self.allocation
    }
    /// Stop it: the first reason given wins; later ones change nothing.
    pub fn stop(&self, reason: StopReason) {
        self.stop.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }
    pub fn cancel(&self) {
        self.stop(StopReason::Cancelled);
    }
    pub fn step(&self) -> Step {
        *self.step.borrow()
    }
    /// Wait until the invocation reaches `step` (or settles).
    pub async fn reached(&self, step: Step) -> Step {
        let mut rx = self.step.clone();
        let reached = match rx.wait_for(|s| *s == step || *s == Step::Settled).await {
            Ok(s) => *s,
            Err(_) => Step::Settled,
        };
        reached
    }
    /// The result, once the container is gone and cleanup has finished.
    pub async fn settled(&self) -> Arc<InvocationResult> {
        let mut rx = self.result.clone();
        loop {
            if let Some(result) = rx.borrow_and_update().clone() {
                return result;
            }
            if rx.changed().await.is_err() {
                // The supervisor always sends before it ends; this is unreachable in practice.
                if let Some(result) = rx.borrow().clone() {
                    return result;
                }
                return Arc::new(InvocationResult::lost(&self.attempt, self.allocation));
            }
        }
    }
}
