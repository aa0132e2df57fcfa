//! The profile of an invocation over its storage, and the gitlink masks execute and fix need.

use std::time::{Duration, Instant};

use cordon_contract::{paths, Phase};

use super::{claude, Capture, Credential, Options};
use crate::error::{Error, Result};
use crate::labels::Allocation;
use crate::profile::{EgressSpec, Profile, ProfileSpec, SCHEMA_FILE};
use crate::task::StorageHandle;

/// The gitlink masks an invocation in `phase` needs over `storage`: one read-only tmpfs at each
/// gitlink in execute and fix (read-only phases mount all of /work read-only). Refused, before
/// anything is allocated: unknown gitlinks (a recovered handle), more than the limit, a name no
/// mount can carry, and a nested gitlink: renaming one of its parents would move the mask aside,
/// and pinning the parents needs `VolumeOptions.Subpath` (API 1.45), which this engine lacks.
pub fn gitlink_masks(phase: Phase, storage: &StorageHandle) -> Result<Vec<String>> {
    if !phase.work_writable() {
        return Ok(Vec::new());
    }
    let Some(gitlinks) = &storage.gitlinks else {
        return Err(Error::Gitlink {
            id: "gitlinks-unknown",
            reason: format!(
                "the storage handle of allocation {} does not record the tree's gitlinks (a \
                 recovered handle, or a gitlink whose name is not UTF-8): {phase} cannot mask them",
                storage.allocation
            ),
        });
    };
    if gitlinks.len() > crate::profile::MAX_GITLINKS {
        return Err(Error::Gitlink {
            id: "gitlink-limit",
            reason: format!(
                "{} gitlinks; at most {} can be masked",
                gitlinks.len(),
                crate::profile::MAX_GITLINKS
            ),
        });
    }
    if let Some(bad) = gitlinks.iter().find(|g| !crate::profile::mountable(g)) {
        return Err(Error::Gitlink {
            id: "gitlink-name",
            reason: format!("the gitlink {bad:?} cannot be a mount target"),
        });
    }
    if let Some(nested) = gitlinks.iter().find(|g| g.contains('/')) {
        return Err(Error::Gitlink {
            id: "gitlink-nested",
            reason: format!(
                "the gitlink {nested:?} is nested: renaming a directory above it would move its \
                 mask aside, and pinning those directories needs VolumeOptions.Subpath (API \
                 {}), which this engine does not have; {phase} is refused until it does",
                crate::engine::SUBPATH_API
            ),
        });
    }
    Ok(gitlinks.clone())
}

/// The profile of an invocation over its storage.
pub(super) fn profile(
    capture: &Capture,
    allocation: &Allocation,
    image_id: &str,
    credential: Option<&Credential>,
    options: &Options,
) -> Result<Profile> {
    let request = &capture.request;
    let storage = request.storage.storage()?;
    // The host stops the run at the request's deadline with a typed reason; the init's own
    // deadline is a backstop for a controller that died, so it comes later.
    let left = request.deadline.saturating_duration_since(Instant::now());
    let mut limits = options.limits.clone();
    limits.deadline = left + limits.grace + Duration::from_secs(10);
    let input_files = capture
        .schema_text()
        .map(|s| vec![(SCHEMA_FILE.to_owned(), s.as_bytes().to_vec())])
        .unwrap_or_default();
    let env = credential
        .map(|c| vec![("CLAUDE_CODE_OAUTH_TOKEN".to_owned(), c.0.clone())])
        .unwrap_or_default();
    Profile::new(ProfileSpec {
        phase: request.phase,
        vendor: request.vendor,
        image_id: image_id.to_owned(),
        allocation: allocation.clone(),
        limits,
        storage: storage.mounts_for(allocation),
        command: claude::command(request.phase, &request.prompt, capture.schema_text()),
        exec: vec![paths::CLAUDE_CLI.to_owned()],
        env,
        gitlinks: gitlink_masks(request.phase, &request.storage)?,
        pins: vec![],
        landlock_abi: crate::profile::DEFAULT_LANDLOCK_ABI,
        egress: egress_spec(&request.network_allowlist, &options.egress),
        input_files,
    })
}

/// The proxy an allowlist asks for; none for an empty one (no network, no proxy, no socket).
fn egress_spec(allowlist: &[String], options: &super::EgressOptions) -> Option<EgressSpec> {
    (!allowlist.is_empty()).then(|| EgressSpec {
        map: options.map.clone(),
        resolver: options.resolver,
        internal: options.internal,
        ..EgressSpec::allowing(allowlist)
    })
}

/// An image id that stands in while the real one is being built (the profile is checked once
/// before anything is allocated).
pub(super) const PROVISIONAL_IMAGE: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";
