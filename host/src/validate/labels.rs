//! Labels: the container's are the profile's; each volume's are its allocation's, the uid label
//! checked on its own (it names whose uid the volume's files belong to).

use std::collections::{BTreeMap, HashMap};

use cordon_contract::Id;

use super::{Diff, ReadBack};
use crate::labels::{Kind, UID};

pub(super) fn container(r: &ReadBack<'_>, d: &mut Diff) {
    d.check(
        r.config.labels == r.expected.labels,
        Id::ProfileDrift,
        "Config.Labels",
        &r.expected.labels,
        &r.config.labels,
    );
}

/// A volume's labels (`field` names the volume, `kind` what it is).
pub(super) fn volume(
    d: &mut Diff,
    field: &str,
    kind: Kind,
    want: &HashMap<String, String>,
    have: &HashMap<String, String>,
) {
    let sorted = |m: &HashMap<String, String>| m.clone().into_iter().collect::<BTreeMap<_, _>>();
    let (mut want_labels, mut have_labels) = (sorted(want), sorted(have));
    let (want_uid, have_uid) = (want_labels.remove(UID), have_labels.remove(UID));
    d.check(
        want_uid == have_uid,
        Id::UidPerAllocation,
        &format!("{field} uid label"),
        &want_uid,
        &have_uid,
    );
    d.check(
        want_labels == have_labels,
        Id::ProfileDrift,
        &format!("{field} labels ({})", kind.as_str()),
        &want_labels,
        &have_labels,
    );
}
