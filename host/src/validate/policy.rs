//! The policy the init will receive, against the profile: its pins are exactly those the
//! profile's gitlinks derive (the init refuses otherwise too, and the probes prove the pins hold).

use cordon_contract::policy::Policy;
use cordon_contract::{tree, Id};

use crate::error::Refusal;
use crate::profile::Profile;

/// What differs between the policy to be delivered and the profile's pins.
pub fn pins(profile: &Profile, policy: &Policy) -> Vec<Refusal> {
    let derived = tree::pins_of(profile.gitlinks());
    if policy.landlock.pins == derived && profile.pins() == derived.as_slice() {
        return Vec::new();
    }
    vec![Refusal::of_field(
        Id::PinnedDirs,
        "policy.landlock.pins",
        super::evidence(&derived),
        super::evidence(&policy.landlock.pins),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_without_its_pins_is_refused() {
        let profile = crate::profile::tests::nested_gitlink_profile();
        let mut policy = profile.policy();
        assert!(pins(&profile, &policy).is_empty());
        for changed in [
            vec![],
            vec!["a".to_owned()],
            vec!["a".into(), "a/b".into(), "x".into()],
        ] {
            policy.landlock.pins = changed.clone();
            let refused = pins(&profile, &policy);
            assert_eq!(refused.len(), 1, "{changed:?}");
            assert_eq!(refused[0].id, Id::PinnedDirs);
        }
    }
}
