//! The read-back validator: compare what the engine reports about a created container and every
//! volume it mounts with the profile, field by field. Any difference is a [`Refusal`] naming the
//! protection, the field, the expected and the observed value; the container is not started.
//!
//! Expectations come from the profile (not from the request that was sent), so a request that was
//! changed on its way, or a field the engine silently dropped, shows as a difference.
//!
//! The checks are named groups run in the order of [`CHECKS`]; that order is the order of the
//! refusals, so one change to a read-back gives the same list every time.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, HostConfig, Volume,
};
use cordon_contract::Id;

use crate::error::Refusal;
use crate::profile::Profile;

pub mod egress;
mod environment;
mod labels;
mod mounts;
mod namespaces;
mod options;
pub mod policy;
mod process;
mod resources;
mod runtime;
mod security;
mod volumes;

/// What the engine reported.
#[derive(Debug, Clone)]
pub struct Observed {
    pub container: ContainerInspectResponse,
    /// Every volume the profile mounts, by name: its inspect, or why it could not be read.
    pub volumes: BTreeMap<String, Result<Volume, String>>,
    /// Every live object labelled with the profile's uid, or why they could not be listed.
    pub uid_holders: Result<Vec<crate::labels::Holder>, String>,
}

/// One group of field checks: it reads the read-back beside the profile and records every
/// difference.
type Check = fn(&ReadBack<'_>, &mut Diff);

/// Every check, in order.
const CHECKS: &[(&str, Check)] = &[
    ("the init's start identity", process::start_identity),
    ("no terminal, no stdin", process::terminal_and_stdin),
    ("no credential but the sentinel", environment::no_credential),
    ("the environment", environment::allowlisted),
    ("what runs", process::what_runs),
    ("the container's labels", labels::container),
    ("no image volumes", mounts::no_image_volumes),
    ("no exposed ports", namespaces::no_exposed_ports),
    ("read-only root", security::readonly_root),
    ("capabilities", security::capabilities),
    ("security options", security::security_options),
    (
        "not privileged, host files masked",
        security::not_privileged,
    ),
    ("no IPC", namespaces::no_ipc),
    ("no network", namespaces::no_network),
    ("no host namespace", namespaces::no_host_namespace),
    ("limits", resources::limits),
    (
        "no host paths, no devices",
        mounts::no_host_paths_or_devices,
    ),
    ("the profile's mounts", mounts::profile_mounts),
    ("the scratch tmpfs areas", mounts::scratch_areas),
    ("the mount points", mounts::mount_points),
    ("the engine's settings", runtime::engine_settings),
    ("every volume", volumes::every_volume),
    ("the uid is the allocation's alone", volumes::uid_holders),
];

/// The profile, what it makes the engine hold, and what the engine reported.
struct ReadBack<'a> {
    profile: &'a Profile,
    observed: &'a Observed,
    /// The create request the profile makes.
    expected: ContainerCreateBody,
    want_host: HostConfig,
    config: ContainerConfig,
    host: HostConfig,
}

/// Compare the read-back with the profile. An empty list means the container may start.
pub fn validate(profile: &Profile, observed: &Observed) -> Vec<Refusal> {
    let expected = profile.create_body();
    let c = &observed.container;
    let read_back = ReadBack {
        profile,
        observed,
        want_host: expected.host_config.clone().unwrap_or_default(),
        expected,
        config: c.config.clone().unwrap_or_default(),
        host: c.host_config.clone().unwrap_or_default(),
    };
    let mut d = Diff(Vec::new());
    for (_, check) in CHECKS {
        check(&read_back, &mut d);
    }
    d.0
}

/// The distinct protection ids of a refusal list, sorted.
pub fn ids(refusals: &[Refusal]) -> Vec<Id> {
    let set: BTreeSet<Id> = refusals.iter().map(|r| r.id).collect();
    set.into_iter().collect()
}

/// The differences found so far, in order.
struct Diff(Vec<Refusal>);

impl Diff {
    /// Record a refusal unless `ok`; the evidence is written as JSON (what a runner reads, and
    /// plain text to a person: `null`, `["ALL"]`, never Rust's debug form).
    fn check<E: serde::Serialize, O: serde::Serialize>(
        &mut self,
        ok: bool,
        id: Id,
        field: &str,
        expected: E,
        observed: O,
    ) {
        if !ok {
            self.0.push(Refusal::of_field(
                id,
                field,
                evidence(&expected),
                evidence(&observed),
            ));
        }
    }
}

/// A value as compact JSON.
fn evidence(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("(unprintable: {e})"))
}

fn empty<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_none_or(Vec::is_empty)
}

fn empty_map<K, V>(v: &Option<HashMap<K, V>>) -> bool {
    v.as_ref().is_none_or(HashMap::is_empty)
}
