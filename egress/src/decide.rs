//! The proxy's decision, in the order the rules demand: [`admit`] a head against the allowlist
//! without any lookup (an unlisted name never reaches a resolver), then [`dial`] exactly the
//! addresses the classifier passed. An [`Admitted`] can only come from `admit`, so a lookup of a
//! name that was not admitted cannot be written.

use std::net::{IpAddr, SocketAddr};

use crate::address::check_answer;
use crate::allowlist::{Allowlist, Mapping};
use crate::head::{self, Connect};
use crate::host::Name;
use crate::Refusal;

/// What an invocation's proxy allows.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub allowlist: Allowlist,
    /// Test and diagnosis mappings: an admitted name with a mapping is dialed at its address,
    /// never resolved (the only way to reach an address the classifier denies).
    pub mappings: Vec<Mapping>,
    /// The host's own addresses (the engine's bridges included): never dialed.
    pub host_own: Vec<IpAddr>,
}

/// A request the allowlist admitted: look the name up (unless it is mapped), then [`dial`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    connect: Connect,
    mapped: Option<SocketAddr>,
}

impl Admitted {
    /// The name to resolve (the canonical one, which is the one that was matched).
    pub fn name(&self) -> &Name {
        &self.connect.name
    }

    pub fn port(&self) -> u16 {
        self.connect.port
    }

    /// The mapped address, when the name has one: dial it, resolve nothing.
    pub fn mapped(&self) -> Option<SocketAddr> {
        self.mapped
    }
}

/// Parse a whole head and match it against the allowlist. No lookup happens here.
pub fn admit(rules: &Rules, head: &[u8]) -> Result<Admitted, Refusal> {
    let connect = head::parse(head)?;
    rules.allowlist.check(&connect.name, connect.port)?;
    let mapped = rules
        .mappings
        .iter()
        .find(|m| m.name == connect.name)
        .map(|m| m.to);
    Ok(Admitted { connect, mapped })
}

/// The addresses to dial for an admitted, unmapped name, given what the proxy's resolver answered:
/// every address must pass the classifier (one denied address refuses the name), and these, with
/// the request's port, are exactly what may be dialed (no second resolution).
pub fn dial(
    rules: &Rules,
    admitted: &Admitted,
    answer: Result<Vec<IpAddr>, String>,
) -> Result<Vec<SocketAddr>, Refusal> {
    if let Some(to) = admitted.mapped {
        return Ok(vec![to]);
    }
    let addrs = answer.map_err(|_| Refusal::Resolve)?;
    check_answer(&addrs, &rules.host_own)?;
    Ok(addrs
        .into_iter()
        .map(|ip| SocketAddr::new(ip, admitted.connect.port))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            allowlist: Allowlist::parse(&["api.anthropic.com", "fake.vendor.test"]).unwrap(),
            mappings: vec![Mapping::parse("fake.vendor.test=172.18.0.5:8443").unwrap()],
            host_own: vec!["172.17.0.1".parse().unwrap()],
        }
    }

    fn connect(target: &str) -> Vec<u8> {
        format!("CONNECT {target} HTTP/1.1\r\n\r\n").into_bytes()
    }

    #[test]
    fn an_unlisted_name_is_refused_before_anything_is_resolved() {
        let rules = rules();
        // `admit` is the only way to an `Admitted`: a refused head leaves nothing to resolve.
        for (target, want) in [
            ("evil.example:443", Refusal::NotAllowed),
            ("api.anthropic.com.evil.example:443", Refusal::NotAllowed),
            ("api.anthropic.com:80", Refusal::Port),
            ("160.79.104.10:443", Refusal::Host),
        ] {
            assert_eq!(admit(&rules, &connect(target)), Err(want), "{target}");
        }
        assert_eq!(
            admit(&rules, b"GET http://api.anthropic.com/ HTTP/1.1\r\n\r\n"),
            Err(Refusal::Method)
        );
    }

    #[test]
    fn a_listed_name_dials_exactly_what_passed_the_classifier() {
        let rules = rules();
        let admitted = admit(&rules, &connect("API.anthropic.com.:443")).unwrap();
        assert_eq!(admitted.name().as_str(), "api.anthropic.com");
        let public: IpAddr = "160.79.104.10".parse().unwrap();
        assert_eq!(
            dial(&rules, &admitted, Ok(vec![public])),
            Ok(vec![SocketAddr::new(public, 443)])
        );
        for answer in [
            vec!["127.0.0.1".parse().unwrap()],
            vec![public, "10.0.0.1".parse().unwrap()],
            vec!["::ffff:169.254.169.254".parse().unwrap()],
            vec!["172.17.0.1".parse().unwrap()],
            vec![],
        ] {
            assert_eq!(
                dial(&rules, &admitted, Ok(answer.clone())),
                Err(Refusal::Address),
                "{answer:?}"
            );
        }
        assert_eq!(
            dial(&rules, &admitted, Err("SERVFAIL".into())),
            Err(Refusal::Resolve)
        );
    }

    #[test]
    fn a_mapped_name_is_dialed_at_its_mapping_and_never_resolved() {
        let rules = rules();
        let admitted = admit(&rules, &connect("fake.vendor.test:443")).unwrap();
        let to: SocketAddr = "172.18.0.5:8443".parse().unwrap();
        assert_eq!(admitted.mapped(), Some(to));
        // Whatever a resolver would have said is not asked for and not used.
        assert_eq!(
            dial(&rules, &admitted, Err("not asked".into())),
            Ok(vec![to])
        );
        // A mapping does not admit a name the allowlist does not list.
        let unlisted = Rules {
            mappings: vec![Mapping::parse("other.test=172.18.0.5:443").unwrap()],
            ..rules
        };
        assert_eq!(
            admit(&unlisted, &connect("other.test:443")),
            Err(Refusal::NotAllowed)
        );
    }
}
