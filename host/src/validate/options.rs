//! A bounded area's option string (a scratch tmpfs's mount options, a local volume's `o=`):
//! exact size and inodes, nosuid, nodev and noexec, the allocation's owner, nothing else.

use std::collections::{BTreeMap, BTreeSet};

use cordon_contract::Id;

use super::Diff;

/// `key=value,flag,...` as (keys with values, bare flags).
fn parse_options(text: &str) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let mut values = BTreeMap::new();
    let mut flags = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, v)) => {
                values.insert(k.to_owned(), v.to_owned());
            }
            None => {
                flags.insert(part.to_owned());
            }
        }
    }
    (values, flags)
}

/// Compare a bounded area's option string with the profile's.
pub(super) fn check_area_options(
    diff: &mut Diff,
    field: &str,
    expected: &str,
    observed: &str,
    bytes_id: Id,
    inodes_id: Id,
) {
    let (want, want_flags) = parse_options(expected);
    let (have, have_flags) = parse_options(observed);
    diff.check(
        want.get("size") == have.get("size"),
        bytes_id,
        &format!("{field} size"),
        want.get("size"),
        have.get("size"),
    );
    diff.check(
        want.get("nr_inodes") == have.get("nr_inodes"),
        inodes_id,
        &format!("{field} nr_inodes"),
        want.get("nr_inodes"),
        have.get("nr_inodes"),
    );
    // Always nosuid and nodev; noexec unless the profile asks for `exec` (an approved
    // command's scratch, where tests run what they build).
    let exec_allowed = want_flags.contains("exec");
    let required: &[&str] = if exec_allowed {
        &["nosuid", "nodev"]
    } else {
        &["nosuid", "nodev", "noexec"]
    };
    let risky: &[&str] = if exec_allowed {
        &["suid", "dev"]
    } else {
        &["exec", "suid", "dev"]
    };
    let flags_ok = required.iter().all(|f| have_flags.contains(*f))
        && !risky.iter().any(|f| have_flags.contains(*f));
    diff.check(
        flags_ok,
        Id::WritableNosuidNodevNoexec,
        &format!("{field} flags"),
        &want_flags,
        &have_flags,
    );
    let owner = |m: &BTreeMap<String, String>| (m.get("uid").cloned(), m.get("gid").cloned());
    diff.check(
        owner(&want) == owner(&have),
        Id::UidPerAllocation,
        &format!("{field} uid, gid"),
        owner(&want),
        owner(&have),
    );
    let rest = |m: &BTreeMap<String, String>, f: &BTreeSet<String>| {
        let mut r: Vec<String> = m
            .iter()
            .filter(|(k, _)| !["size", "nr_inodes", "uid", "gid"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        r.extend(
            f.iter()
                .filter(|f| {
                    !["nosuid", "nodev", "noexec", "exec", "suid", "dev"].contains(&f.as_str())
                })
                .cloned(),
        );
        r.sort();
        r
    };
    let (want_rest, have_rest) = (rest(&want, &want_flags), rest(&have, &have_flags));
    diff.check(
        want_rest == have_rest,
        Id::ProfileDrift,
        &format!("{field} options"),
        want_rest,
        have_rest,
    );
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
