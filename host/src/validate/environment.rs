//! The environment: exactly the profile's variables (the refusal names them, never their values:
//! the credential's variable holds the invocation's sentinel, which is still not for logs).

use std::collections::BTreeSet;

use cordon_contract::Id;

use super::{Diff, ReadBack};

pub(super) fn allowlisted(r: &ReadBack<'_>, d: &mut Diff) {
    let want_env: BTreeSet<String> = r.profile.env().into_iter().collect();
    let have_env: BTreeSet<String> = r
        .config
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let names = |s: &BTreeSet<String>| -> Vec<String> {
        s.iter()
            .map(|e| e.split('=').next().unwrap_or("").to_owned())
            .collect()
    };
    d.check(
        want_env == have_env,
        Id::EnvAllowlist,
        "Config.Env (names; values withheld)",
        names(&want_env),
        names(&have_env),
    );
}
