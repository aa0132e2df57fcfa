//! Every volume the container mounts is the profile's: a local, bounded tmpfs with its
//! allocation's labels; and no other live storage allocation holds the profile's uid.

use bollard::models::Volume;
use cordon_contract::Id;

use super::options::check_area_options;
use super::{Diff, ReadBack};
use crate::labels::{Kind, UID};
use crate::profile::VolumeSpec;

pub(super) fn every_volume(r: &ReadBack<'_>, d: &mut Diff) {
    for (kind, want) in r.profile.volumes() {
        let ids = if kind == Kind::Work {
            (Id::WorkBytes, Id::WorkInodes)
        } else {
            (Id::ProfileDrift, Id::ProfileDrift)
        };
        check_volume(d, kind, &want, ids, r.observed.volumes.get(&want.name));
    }
}

fn check_volume(
    diff: &mut Diff,
    kind: Kind,
    want: &VolumeSpec,
    bytes_ids: (Id, Id),
    observed: Option<&Result<Volume, String>>,
) {
    let field = format!("volume {}", want.name);
    let volume = match observed {
        Some(Ok(v)) => v,
        Some(Err(e)) => return diff.check(false, Id::ProfileDrift, &field, "readable", e),
        None => {
            return diff.check(
                false,
                Id::ProfileDrift,
                &field,
                "inspected",
                "not inspected",
            )
        }
    };
    diff.check(
        volume.driver == "local",
        Id::NoHostMounts,
        &format!("{field} driver"),
        "local",
        &volume.driver,
    );
    super::labels::volume(diff, &field, kind, &want.labels, &volume.labels);
    // Every volume is a bounded tmpfs: any other option (type=none,o=bind,device=...) could make
    // it a host path, and a plain local volume is a directory on the host's disk.
    let options = &volume.options;
    let mut tmpfs = true;
    for key in ["type", "device"] {
        let same = options.get(key) == want.options.get(key);
        tmpfs &= same;
        diff.check(
            same,
            Id::NoHostMounts,
            &format!("{field} option {key}"),
            want.options.get(key),
            options.get(key),
        );
    }
    if !tmpfs {
        // Not a tmpfs at all: its size and owner options mean nothing.
        return;
    }
    let extra: Vec<&String> = options
        .keys()
        .filter(|k| !want.options.contains_key(*k))
        .collect();
    diff.check(
        extra.is_empty(),
        Id::NoHostMounts,
        &format!("{field} options"),
        "type, device, o",
        &extra,
    );
    check_area_options(
        diff,
        &format!("{field} option o"),
        want.options.get("o").map_or("", String::as_str),
        options.get("o").map_or("", String::as_str),
        bytes_ids.0,
        bytes_ids.1,
    );
}

/// No other live storage allocation runs as this uid; over a shared snapshot, where the uid is the
/// invocation's own, nothing but the invocation's own objects carries it.
pub(super) fn uid_holders(r: &ReadBack<'_>, d: &mut Diff) {
    let profile = r.profile;
    let storage = profile.storage().storage.id;
    match &r.observed.uid_holders {
        Ok(holders) => {
            let (others, owner) = if profile.storage().snapshot.is_some() {
                let own = profile.allocation().id;
                (crate::labels::not_of(holders, &own), own)
            } else {
                (crate::labels::others(holders, &storage), storage)
            };
            d.check(
                others.is_empty(),
                Id::UidPerAllocation,
                &format!("objects labelled {UID}={}", profile.allocation().uid),
                format!("only allocation {owner}'s"),
                &others,
            );
        }
        Err(e) => d.check(
            false,
            Id::UidPerAllocation,
            "objects labelled with the uid",
            "listed",
            e,
        ),
    }
}
