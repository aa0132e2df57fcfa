//! The controller a runner creates once and passes to every call: the engine connection and what
//! this process must remember between calls. The library keeps no process-wide state; two
//! controllers are two independent runners (each with its own registries) over one engine.
//!
//! - Attempt ids captured (each once) and those with an unsettled invocation.
//! - Allocation ids whose task storage this controller holds, and their owners (recovery of an
//!   owner is refused while any is held).
//! - Retired allocations: an invocation over them settled with objects whose removal could not be
//!   confirmed, so every launch path refuses them.
//! - Tree checks issued and not yet redeemed (each one-shot: redeeming takes it out).
//!
//! Pending creates are not here: each operation's [`crate::engine::pending::Created`] record holds
//! its own, and its removal resolves them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kept::{KeptMetadata, MAX_KEPT_BYTES};
use crate::labels::Owner;

/// An engine connection and this runner's registries. Cheap to clone (clones share both).
#[derive(Debug, Clone)]
pub struct Controller {
    engine: Engine,
    state: Arc<State>,
    /// The image the helper containers (the tree reader, the audit's readers) run: it holds
    /// cordon-init. Learned once ([`Controller::with_helper_image`]).
    helper_image: Option<Arc<str>>,
}

#[derive(Debug, Default)]
struct State {
    captured: Mutex<BTreeSet<String>>,
    unsettled: Mutex<BTreeSet<String>>,
    held: Mutex<BTreeMap<uuid::Uuid, String>>,
    retired: Mutex<BTreeSet<uuid::Uuid>>,
    /// Each issued tree check's id and its canonical text.
    tree_checks: Mutex<BTreeMap<uuid::Uuid, String>>,
    /// Base's ignore rules as the reader takes them (JSON), by (metadata baseline, base), from
    /// an inspection whose metadata was as seeded; at most [`KNOWN_IGNORE_RULES`] of them.
    ignore_rules: Mutex<BTreeMap<(String, String), Arc<str>>>,
    /// Metadata copies as seeded, by baseline, from inspections that read them; at most
    /// [`KEPT_METADATA`] of them.
    kept_metadata: Mutex<BTreeMap<String, Arc<KeptMetadata>>>,
}

/// How many metadata copies a controller keeps (each at most
/// [`crate::kept::MAX_KEPT_BYTES`]).
const KEPT_METADATA: usize = 2;

/// How many bases' ignore rules a controller keeps (each at most
/// [`cordon_contract::audit::MAX_IGNORE_RULES_BYTES`]).
const KNOWN_IGNORE_RULES: usize = 16;

/// A registry whose lock a panicking holder poisoned: every caller is refused from then on (each
/// change is one insert or remove, but a refusal is the safe answer to "was it there?").
fn lock<'a, T>(registry: &'a Mutex<T>, what: &str) -> Result<MutexGuard<'a, T>> {
    registry
        .lock()
        .map_err(|_| Error::Internal(format!("the {what} registry is poisoned")))
}

impl Controller {
    /// Connect to the local engine (see [`Engine::connect`]).
    pub async fn connect() -> Result<Controller> {
        Ok(Controller::new(Engine::connect().await?))
    }

    /// A controller over a connection made elsewhere.
    pub fn new(engine: Engine) -> Controller {
        Controller {
            engine,
            state: Arc::default(),
            helper_image: None,
        }
    }

    /// This controller with the image its helper containers run (an image id holding
    /// cordon-init: the test image or the agent image). The registries stay shared with `self`.
    pub fn with_helper_image(self, image_id: &str) -> Controller {
        Controller {
            helper_image: Some(Arc::from(image_id)),
            ..self
        }
    }

    /// The helper image, or the caller's mistake of never naming one.
    pub fn helper_image(&self) -> Result<&str> {
        self.helper_image.as_deref().ok_or_else(|| {
            Error::Invalid(
                "the controller has no helper image: create it with Controller::with_helper_image"
                    .into(),
            )
        })
    }

    /// The engine connection.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Base's ignore rules (JSON) as an earlier inspection of metadata `baseline` read them:
    /// the rules are a function of base's tree, which base's commit id names and the baseline
    /// digest covers, so they hold for every storage seeded with that metadata.
    pub(crate) fn known_ignore_rules(
        &self,
        baseline: &str,
        base: &str,
    ) -> Result<Option<Arc<str>>> {
        let known = lock(&self.state.ignore_rules, "ignore rules")?;
        Ok(known.get(&(baseline.to_owned(), base.to_owned())).cloned())
    }

    /// Keep base's ignore rules, read from metadata whose digest was `baseline`; past
    /// [`KNOWN_IGNORE_RULES`] another base's, the first in key order, goes.
    pub(crate) fn learn_ignore_rules(
        &self,
        baseline: &str,
        base: &str,
        rules: Arc<str>,
    ) -> Result<()> {
        let mut known = lock(&self.state.ignore_rules, "ignore rules")?;
        let key = (baseline.to_owned(), base.to_owned());
        if !known.contains_key(&key) && known.len() >= KNOWN_IGNORE_RULES {
            if let Some(other) = known.keys().next().cloned() {
                known.remove(&other);
            }
        }
        known.insert(key, rules);
        Ok(())
    }

    /// Whether this controller knows base's ignore rules for metadata `baseline` (its next
    /// inspection of such a storage then reads the metadata beside the work tree).
    #[doc(hidden)]
    pub fn knows_ignore_rules(&self, baseline: &str, base: &str) -> bool {
        matches!(self.known_ignore_rules(baseline, base), Ok(Some(_)))
    }

    /// The copy as seeded of metadata `baseline`, when this controller keeps one.
    pub(crate) fn kept_metadata(&self, baseline: &str) -> Result<Option<Arc<KeptMetadata>>> {
        Ok(lock(&self.state.kept_metadata, "kept metadata")?
            .get(baseline)
            .cloned())
    }

    /// Keep `kept`, a copy whose digest was `baseline`, unless it is larger than
    /// [`MAX_KEPT_BYTES`]; past [`KEPT_METADATA`] another baseline's, the first in key order,
    /// goes (its directory with its last user).
    pub(crate) fn keep_metadata(&self, baseline: &str, kept: Arc<KeptMetadata>) -> Result<()> {
        if kept.bytes > MAX_KEPT_BYTES {
            return Ok(());
        }
        let mut all = lock(&self.state.kept_metadata, "kept metadata")?;
        if !all.contains_key(baseline) && all.len() >= KEPT_METADATA {
            if let Some(other) = all.keys().next().cloned() {
                all.remove(&other);
            }
        }
        all.insert(baseline.to_owned(), kept);
        Ok(())
    }

    /// Whether this controller keeps a copy of metadata `baseline` (its next inspection of such
    /// a storage then reads only the work tree).
    #[doc(hidden)]
    pub fn keeps_metadata(&self, baseline: &str) -> bool {
        matches!(self.kept_metadata(baseline), Ok(Some(_)))
    }

    /// Let go of every kept metadata copy (the tests' way to the inspection that reads the
    /// metadata beside the work tree).
    #[doc(hidden)]
    pub fn forget_kept_metadata(&self) {
        if let Ok(mut all) = lock(&self.state.kept_metadata, "kept metadata") {
            all.clear();
        }
    }

    /// Take an attempt id for good: a second capture of it is refused.
    pub(crate) fn capture_attempt(&self, attempt: &str) -> Result<()> {
        if !lock(&self.state.captured, "capture")?.insert(attempt.to_owned()) {
            return Err(Error::AttemptCaptured(attempt.to_owned()));
        }
        Ok(())
    }

    /// Mark an attempt as having an unsettled invocation until the returned guard is dropped.
    pub(crate) fn claim_unsettled(&self, attempt: &str) -> Result<Unsettled> {
        if !lock(&self.state.unsettled, "attempt")?.insert(attempt.to_owned()) {
            return Err(Error::AttemptOwned(
                attempt.to_owned(),
                "an unsettled invocation in this process".into(),
            ));
        }
        Ok(Unsettled {
            state: self.state.clone(),
            attempt: attempt.to_owned(),
        })
    }

    /// Claim an allocation id for `owner` while its storage is prepared; see [`Hold`].
    pub(crate) fn hold_allocation(&self, id: uuid::Uuid, owner: &Owner) -> Result<Hold> {
        let mut held = lock(&self.state.held, "allocation")?;
        if held.contains_key(&id) {
            return Err(Error::AllocationInUse(id.to_string()));
        }
        held.insert(id, owner.as_str().to_owned());
        Ok(Hold {
            state: self.state.clone(),
            id: Some(id),
        })
    }

    /// The storage of `id` was removed: it is no longer held.
    pub(crate) fn release_allocation(&self, id: &uuid::Uuid) {
        release(&self.state, id);
    }

    /// Whether this controller holds storage of `owner` (a poisoned registry says yes).
    pub fn holds_storage_of(&self, owner: &Owner) -> bool {
        lock(&self.state.held, "allocation")
            .map(|h| h.values().any(|o| o == owner.as_str()))
            .unwrap_or(true)
    }

    /// Whether this controller holds the storage of allocation `id` (a poisoned registry says yes).
    pub fn holds_allocation(&self, id: &uuid::Uuid) -> bool {
        lock(&self.state.held, "allocation")
            .map(|h| h.contains_key(id))
            .unwrap_or(true)
    }

    /// Remember a tree check this controller issued (`text` is its canonical form).
    pub(crate) fn issue_tree_check(&self, id: uuid::Uuid, text: String) -> Result<()> {
        lock(&self.state.tree_checks, "tree check")?.insert(id, text);
        Ok(())
    }

    /// Take an issued tree check out for good: its canonical text, or `None` when this controller
    /// never issued it or it was redeemed already.
    pub(crate) fn redeem_tree_check(&self, id: &uuid::Uuid) -> Result<Option<String>> {
        Ok(lock(&self.state.tree_checks, "tree check")?.remove(id))
    }

    /// Retire an allocation: no launch path of this controller will use it again.
    pub(crate) fn retire(&self, allocation: &uuid::Uuid) {
        if let Ok(mut retired) = lock(&self.state.retired, "retired") {
            retired.insert(*allocation);
        }
    }

    /// Refuse a retired allocation (a poisoned registry refuses everything: fail closed).
    pub fn check_not_retired(&self, allocation: &uuid::Uuid) -> Result<()> {
        let retired = lock(&self.state.retired, "retired")
            .map(|r| r.contains(allocation))
            .unwrap_or(true);
        if retired {
            return Err(Error::Retired(allocation.to_string()));
        }
        Ok(())
    }
}

fn release(state: &State, id: &uuid::Uuid) {
    if let Ok(mut held) = state.held.lock() {
        held.remove(id);
    }
}

/// An attempt's claim while its invocation is unsettled; dropping it ends the claim.
#[derive(Debug)]
pub(crate) struct Unsettled {
    state: Arc<State>,
    attempt: String,
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Ok(mut unsettled) = self.state.unsettled.lock() {
            unsettled.remove(&self.attempt);
        }
    }
}

/// A controller's claim on an allocation id while it prepares storage. Dropped without being
/// kept (a failure, or the prepare future cancelled), it releases the id, so recovery of the
/// owner is not refused forever; what a cancelled prepare made carries the seeding name and is
/// removed by recovery.
#[derive(Debug)]
pub(crate) struct Hold {
    state: Arc<State>,
    id: Option<uuid::Uuid>,
}

impl Hold {
    /// The storage is handed out: the id stays held until it is removed.
    pub(crate) fn keep(mut self) {
        self.id = None;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            release(&self.state, &id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A controller whose engine is never called (its registries need none).
    fn offline() -> Controller {
        Controller::new(Engine::offline_for_tests())
    }

    #[test]
    fn an_attempt_is_captured_once_per_controller() {
        let ctl = offline();
        ctl.capture_attempt("a").unwrap();
        assert_eq!(
            ctl.capture_attempt("a").unwrap_err().id(),
            "attempt-captured"
        );
        ctl.clone().capture_attempt("b").unwrap();
        assert!(
            ctl.capture_attempt("b").is_err(),
            "clones share the registry"
        );
        offline().capture_attempt("a").unwrap();
    }

    /// Rules are known by baseline and base together, shared by clones, and at most
    /// [`KNOWN_IGNORE_RULES`] are kept, the one just learned always among them.
    #[test]
    fn ignore_rules_are_kept_by_baseline_and_base_and_bounded() {
        let ctl = offline();
        ctl.learn_ignore_rules("sha256:m", "b0", Arc::from("{}"))
            .unwrap();
        assert!(ctl.clone().knows_ignore_rules("sha256:m", "b0"));
        assert!(!ctl.knows_ignore_rules("sha256:other", "b0"));
        assert!(!ctl.knows_ignore_rules("sha256:m", "b1"));
        assert!(!offline().knows_ignore_rules("sha256:m", "b0"));
        // Keys that sort first, learned last, still stay.
        for i in (0..2 * KNOWN_IGNORE_RULES).rev() {
            let base = format!("a{i:03}");
            ctl.learn_ignore_rules("sha256:m", &base, Arc::from("{}"))
                .unwrap();
            assert!(ctl.knows_ignore_rules("sha256:m", &base));
        }
        let kept = lock(&ctl.state.ignore_rules, "ignore rules").unwrap().len();
        assert_eq!(kept, KNOWN_IGNORE_RULES);
    }

    #[test]
    fn claims_end_with_their_guards() {
        let ctl = offline();
        let owner = Owner::new("o").unwrap();
        let id = uuid::Uuid::new_v4();
        let hold = ctl.hold_allocation(id, &owner).unwrap();
        assert!(ctl.holds_storage_of(&owner) && ctl.holds_allocation(&id));
        assert_eq!(
            ctl.hold_allocation(id, &owner).unwrap_err().id(),
            "allocation-in-use"
        );
        drop(hold);
        assert!(!ctl.holds_storage_of(&owner));
        ctl.hold_allocation(id, &owner).unwrap().keep();
        assert!(ctl.holds_allocation(&id));
        ctl.release_allocation(&id);
        assert!(!ctl.holds_allocation(&id));

        let unsettled = ctl.claim_unsettled("a").unwrap();
        assert_eq!(ctl.claim_unsettled("a").unwrap_err().id(), "attempt-owned");
        drop(unsettled);
        ctl.claim_unsettled("a").unwrap();

        ctl.retire(&id);
        assert_eq!(
            ctl.check_not_retired(&id).unwrap_err().id(),
            "profile-retired"
        );
        offline().check_not_retired(&id).unwrap();
    }
}
