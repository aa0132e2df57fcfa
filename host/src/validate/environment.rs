//! The environment: no credential but the invocation's sentinel (`credential-absent`), then
//! exactly the profile's variables (`env-allowlist`). Refusals name variables, never their
//! values: the credential's variable holds the sentinel, which is still not for logs.

use std::collections::BTreeSet;

use cordon_contract::{credential, Id};

use super::{Diff, ReadBack};

/// The read-back environment, entry by entry.
fn read_back(r: &ReadBack<'_>) -> BTreeSet<String> {
    r.config
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect()
}

fn name(entry: &str) -> String {
    entry.split('=').next().unwrap_or("").to_owned()
}

/// No entry holds a credential other than the profile's sentinel: a credential variable is
/// absent or exactly the sentinel, and no value holds anything else credential-shaped. Checked
/// before the allowlist, which leaves such entries to this check (one change, one id).
pub(super) fn no_credential(r: &ReadBack<'_>, d: &mut Diff) {
    let foreign: Vec<String> = read_back(r)
        .iter()
        .filter(|entry| credential::foreign_entry(entry, r.profile.sentinel()))
        .map(|entry| name(entry))
        .collect();
    d.check(
        foreign.is_empty(),
        Id::CredentialAbsent,
        "Config.Env (names of entries holding a credential other than the sentinel)",
        Vec::<String>::new(),
        foreign,
    );
}

pub(super) fn allowlisted(r: &ReadBack<'_>, d: &mut Diff) {
    let sentinel = r.profile.sentinel();
    // An entry `no_credential` refused is that check's, and so is the profile's variable of
    // the same name.
    let (foreign, have_env): (BTreeSet<String>, BTreeSet<String>) = read_back(r)
        .into_iter()
        .partition(|entry| credential::foreign_entry(entry, sentinel));
    let claimed: BTreeSet<String> = foreign.iter().map(|entry| name(entry)).collect();
    let want_env: BTreeSet<String> = r
        .profile
        .env()
        .into_iter()
        .filter(|entry| !claimed.contains(&name(entry)))
        .collect();
    let names = |s: &BTreeSet<String>| -> Vec<String> { s.iter().map(|e| name(e)).collect() };
    d.check(
        want_env == have_env,
        Id::EnvAllowlist,
        "Config.Env (names; values withheld)",
        names(&want_env),
        names(&have_env),
    );
}
