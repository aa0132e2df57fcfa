//! The proxy's decision, in the order the rules demand: [`admit`] a head against the allowlist
//! without any lookup (an unlisted name never reaches a resolver), then [`dial`] exactly the
//! addresses the classifier passed. An [`Admitted`] can only come from `admit`, so a lookup of a
//! name that was not admitted cannot be written.
//!
//! A gate case proves each rule by a run where exactly that rule is left out: [`Rules::skip`]
//! names the [`Rule`]s left out (none by default), and each one left out opens only itself:
//!
//! - [`Rule::Method`]: [`admit`] reads any method token, and a target in absolute form
//!   (`http://host[:port][/path]`, `https://...`, port 80 or 443 by default) as well as in
//!   authority form; the host and port go through the host rule and the allowlist as a CONNECT's
//!   would, and the runtime answers 200 and tunnels as for a CONNECT (the request's head is not
//!   forwarded). The head's other bounds hold.
//! - [`Rule::Allowlist`]: any name that passes the host rule is admitted, on any port; a mapping
//!   still applies, any other name is resolved and its answer classified as usual.
//! - [`Rule::Address`]: [`dial`] takes the resolver's answer unclassified (the host's own
//!   addresses included); a resolver error or an empty answer still refuses.
//! - [`Rule::Sni`]: the runtime relays without checking that the tunnel's first bytes are a
//!   ClientHello naming the host.
//! - [`Rule::Cname`]: the resolver asks for a CNAME's target when the answer holds nothing for
//!   it, as a caching client does (at most [`crate::chain::MAX_CHAIN`] times per type); every other
//!   part of the chain rule, and the classifier, still hold.
//!
//! The vendor host's rules (issue 22), when the proxy terminates it:
//!
//! - [`Rule::Terminate`]: a CONNECT to the terminated host is an opaque tunnel like any other
//!   (the ClientHello rule still holds); nothing is swapped, checked or counted.
//! - [`Rule::VendorPath`]: any method, path, query and `Host` is forwarded (the target stays in
//!   origin form, and every other rule holds).
//! - [`Rule::VendorCredential`]: the head's credentials are not checked; the sentinel is still
//!   swapped where the rule would have swapped it (its header, exactly once), and anything else
//!   is forwarded as it came.
//! - [`Rule::VendorBudget`]: nothing is counted against the budgets, nothing refused or cut.
//! - [`Rule::HostBound`]: the terminated host is matched by its name alone, on any allowed port,
//!   so the sentinel is swapped at another port of it too.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use crate::address::check_answer;
use crate::allowlist::{Allowlist, Mapping};
use crate::head::{self, Connect};
use crate::host::Name;
use crate::tls::{self, Hello};
use crate::Rejection;

/// A rule a gate case may tell the proxy to leave out (`--skip NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// The allowlist: only listed names, on their ports.
    Allowlist,
    /// The address classifier: only global addresses, never the host's own.
    Address,
    /// The tunnel's first bytes: a ClientHello naming the CONNECT host.
    Sni,
    /// The method: CONNECT in authority form only.
    Method,
    /// The chain rule: a CNAME's target is never asked for.
    Cname,
    /// The vendor host is terminated: never an opaque tunnel (issue 22).
    Terminate,
    /// The vendor host's routes and `Host`: only what the CLI needs reaches the vendor.
    VendorPath,
    /// The credential: exactly the sentinel, once, in its header, and nowhere else.
    VendorCredential,
    /// The invocation's budgets: requests, request bytes, response bytes.
    VendorBudget,
    /// The sentinel is swapped only at its bound host *and port*.
    HostBound,
}

impl Rule {
    /// Every rule, in order (the order a set of them is shown in).
    pub const ALL: [Rule; 10] = [
        Rule::Allowlist,
        Rule::Address,
        Rule::Sni,
        Rule::Method,
        Rule::Cname,
        Rule::Terminate,
        Rule::VendorPath,
        Rule::VendorCredential,
        Rule::VendorBudget,
        Rule::HostBound,
    ];

    /// The name `--skip` takes and the attestation shows.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rule::Allowlist => "allowlist",
            Rule::Address => "address",
            Rule::Sni => "sni",
            Rule::Method => "method",
            Rule::Cname => "cname",
            Rule::Terminate => "terminate",
            Rule::VendorPath => "vendor-path",
            Rule::VendorCredential => "vendor-credential",
            Rule::VendorBudget => "vendor-budget",
            Rule::HostBound => "host-bound",
        }
    }

    /// The rule of this exact name (lower case, as [`Rule::as_str`] gives it).
    pub fn parse(text: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|rule| rule.as_str() == text)
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an invocation's proxy allows.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub allowlist: Allowlist,
    /// Test and diagnosis mappings: an admitted name with a mapping is dialed at its address,
    /// never resolved (the only way to reach an address the classifier denies).
    pub mappings: Vec<Mapping>,
    /// The host's own addresses (the engine's bridges included): never dialed.
    pub host_own: Vec<IpAddr>,
    /// The rules left out (a gate case's removal; empty for every real invocation).
    pub skip: BTreeSet<Rule>,
}

impl Rules {
    /// Whether `rule` is left out.
    pub fn skips(&self, rule: Rule) -> bool {
        self.skip.contains(&rule)
    }
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

    /// The request, as parsed.
    pub fn request(&self) -> &Connect {
        &self.connect
    }
}

/// Parse a whole head and match it against the allowlist. No lookup happens here.
pub fn admit(rules: &Rules, head: &[u8]) -> Result<Admitted, Rejection> {
    admit_parsed(rules, parse(rules, head)?)
}

/// Parse a whole head under these rules (any method, when [`Rule::Method`] is left out): the first
/// half of [`admit`].
pub fn parse(rules: &Rules, head: &[u8]) -> Result<Connect, Rejection> {
    head::parse_with(head, rules.skips(Rule::Method))
}

/// Match a parsed request against the allowlist (unless [`Rule::Allowlist`] is left out) and find
/// its mapping: the second half of [`admit`].
pub fn admit_parsed(rules: &Rules, connect: Connect) -> Result<Admitted, Rejection> {
    if !rules.skips(Rule::Allowlist) {
        rules.allowlist.check(&connect.name, connect.port)?;
    }
    let mapped = rules
        .mappings
        .iter()
        .find(|m| m.name == connect.name)
        .map(|m| m.to);
    Ok(Admitted { connect, mapped })
}

/// The addresses to dial for an admitted, unmapped name, given what the proxy's resolver answered:
/// every address must pass the classifier (one denied address refuses the name), and these, with
/// the request's port, are exactly what may be dialed (no second resolution). With
/// [`Rule::Address`] left out the answer is not classified, but an empty one still refuses.
pub fn dial(
    rules: &Rules,
    admitted: &Admitted,
    answer: Result<Vec<IpAddr>, String>,
) -> Result<Vec<SocketAddr>, Rejection> {
    if let Some(to) = admitted.mapped {
        return Ok(vec![to]);
    }
    let addrs = answer.map_err(|_| Rejection::Resolve)?;
    if !rules.skips(Rule::Address) {
        check_answer(&addrs, &rules.host_own)?;
    } else if addrs.is_empty() {
        return Err(Rejection::Address);
    }
    Ok(addrs
        .into_iter()
        .map(|ip| SocketAddr::new(ip, admitted.connect.port))
        .collect())
}

/// Whether a tunnel may carry what its client sent first: a ClientHello naming the admitted host
/// (compared canonically), or anything at all when [`Rule::Sni`] is left out (the runtime then
/// reads nothing first and relays from the first byte). The error says why not.
pub fn check_hello(rules: &Rules, admitted: &Admitted, hello: &Hello) -> Result<(), &'static str> {
    if rules.skips(Rule::Sni) || tls::names(hello, admitted.name()) {
        return Ok(());
    }
    Err(match hello {
        Hello::NotTls(why) => why,
        Hello::Incomplete => "no whole ClientHello",
        Hello::Named(_) => "the ClientHello names another server",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            allowlist: Allowlist::parse(&["api.anthropic.com", "fake.vendor.test"]).unwrap(),
            mappings: vec![Mapping::parse("fake.vendor.test=172.18.0.5:8443").unwrap()],
            host_own: vec!["172.17.0.1".parse().unwrap()],
            skip: BTreeSet::new(),
        }
    }

    fn connect(target: &str) -> Vec<u8> {
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes()
    }

    #[test]
    fn an_unlisted_name_is_refused_before_anything_is_resolved() {
        let rules = rules();
        // `admit` is the only way to an `Admitted`: a refused head leaves nothing to resolve.
        for (target, want) in [
            ("evil.example:443", Rejection::NotAllowed),
            ("api.anthropic.com.evil.example:443", Rejection::NotAllowed),
            ("api.anthropic.com:80", Rejection::Port),
            ("160.79.104.10:443", Rejection::Host),
        ] {
            assert_eq!(admit(&rules, &connect(target)), Err(want), "{target}");
        }
        assert_eq!(
            admit(&rules, b"GET http://api.anthropic.com/ HTTP/1.1\r\n\r\n"),
            Err(Rejection::Method)
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
                Err(Rejection::Address),
                "{answer:?}"
            );
        }
        assert_eq!(
            dial(&rules, &admitted, Err("SERVFAIL".into())),
            Err(Rejection::Resolve)
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
            Err(Rejection::NotAllowed)
        );
    }

    fn skipping(rule: Option<Rule>) -> Rules {
        Rules {
            skip: rule.into_iter().collect(),
            ..rules()
        }
    }

    /// Every way to skip one rule but `rule`, and skipping nothing.
    fn all_but(rule: Rule) -> Vec<Rules> {
        let mut others: Vec<Rules> = Rule::ALL
            .into_iter()
            .filter(|r| *r != rule)
            .map(|r| skipping(Some(r)))
            .collect();
        others.push(skipping(None));
        others
    }

    #[test]
    fn rules_have_stable_names_in_one_order() {
        let names: Vec<&str> = Rule::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            [
                "allowlist",
                "address",
                "sni",
                "method",
                "cname",
                "terminate",
                "vendor-path",
                "vendor-credential",
                "vendor-budget",
                "host-bound"
            ]
        );
        for rule in Rule::ALL {
            assert_eq!(Rule::parse(rule.as_str()), Some(rule));
            assert_eq!(rule.to_string(), rule.as_str());
        }
        for bad in [
            "",
            "SNI",
            "Sni",
            " sni",
            "sni ",
            "all",
            "allowlist,sni",
            "egress-sni",
        ] {
            assert_eq!(Rule::parse(bad), None, "{bad:?}");
        }
        let mut sorted = Rule::ALL;
        sorted.sort();
        assert_eq!(sorted, Rule::ALL, "a set of rules iterates in ALL's order");
        assert!(Rules::default().skip.is_empty());
    }

    #[test]
    fn skipping_the_method_rule_admits_any_method_and_absolute_form_only() {
        let cases = [
            ("GET https://api.anthropic.com/ HTTP/1.1\r\n\r\n", "api.anthropic.com", 443),
            (
                "POST https://API.anthropic.com./v1/messages?x=1 HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n",
                "api.anthropic.com",
                443,
            ),
            ("GET http://fake.vendor.test:443 HTTP/1.1\r\n\r\n", "fake.vendor.test", 443),
            (
                "GET api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n",
                "api.anthropic.com",
                443,
            ),
            (
                "CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n",
                "api.anthropic.com",
                443,
            ),
        ];
        let skip = skipping(Some(Rule::Method));
        for (head, name, port) in cases {
            let admitted = admit(&skip, head.as_bytes()).unwrap_or_else(|r| panic!("{head}: {r}"));
            assert_eq!((admitted.name().as_str(), admitted.port()), (name, port));
            if !head.starts_with("CONNECT ") {
                for rules in all_but(Rule::Method) {
                    let got = admit(&rules, head.as_bytes());
                    assert!(
                        matches!(got, Err(Rejection::Method | Rejection::Target)),
                        "{head} with {:?}: {got:?}",
                        rules.skip
                    );
                }
            }
        }
        assert_eq!(
            admit(&rules(), b"GET https://api.anthropic.com/ HTTP/1.1\r\n\r\n"),
            Err(Rejection::Method)
        );
        // The host rule, the allowlist and the head's bounds still hold.
        for (head, want) in [
            (
                "GET http://api.anthropic.com/ HTTP/1.1\r\n\r\n",
                Rejection::Port,
            ),
            (
                "GET https://evil.example/ HTTP/1.1\r\n\r\n",
                Rejection::NotAllowed,
            ),
            ("GET https://127.0.0.1/ HTTP/1.1\r\n\r\n", Rejection::Host),
            ("GET https://[::1]:443/ HTTP/1.1\r\n\r\n", Rejection::Host),
            (
                "GET https://a@api.anthropic.com/ HTTP/1.1\r\n\r\n",
                Rejection::Target,
            ),
            (
                "GET https://api.anthropic.com:0443/ HTTP/1.1\r\n\r\n",
                Rejection::Port,
            ),
            (
                "GET https://api.anthropic.com/ HTTP/1.0\r\n\r\n",
                Rejection::Version,
            ),
            (
                "GET / HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n",
                Rejection::Target,
            ),
            (
                "GET ftp://api.anthropic.com/ HTTP/1.1\r\n\r\n",
                Rejection::Target,
            ),
            (
                "G(T https://api.anthropic.com/ HTTP/1.1\r\n\r\n",
                Rejection::Method,
            ),
            (
                "GET https://api.anthropic.com/ HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
                Rejection::Malformed,
            ),
            (
                "GET api.anthropic.com:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
                Rejection::Malformed,
            ),
        ] {
            assert_eq!(admit(&skip, head.as_bytes()), Err(want), "{head}");
        }
    }

    #[test]
    fn skipping_the_allowlist_admits_any_host_on_any_port_and_nothing_else() {
        let skip = skipping(Some(Rule::Allowlist));
        for target in [
            "evil.example:443",
            "evil.example:8080",
            "api.anthropic.com:80",
        ] {
            let admitted = admit(&skip, &connect(target)).unwrap();
            assert_eq!(admitted.request().to_string(), target);
            assert_eq!(admitted.mapped(), None);
            for rules in all_but(Rule::Allowlist) {
                assert!(
                    matches!(
                        admit(&rules, &connect(target)),
                        Err(Rejection::NotAllowed | Rejection::Port)
                    ),
                    "{target} with {:?}",
                    rules.skip
                );
            }
        }
        // The host rule holds, a mapping still applies, and an unmapped name is classified.
        assert_eq!(
            admit(&skip, &connect("127.0.0.1:443")),
            Err(Rejection::Host)
        );
        let mapped = Rules {
            mappings: vec![Mapping::parse("other.test=172.18.0.5:443").unwrap()],
            ..skip.clone()
        };
        let admitted = admit(&mapped, &connect("other.test:8443")).unwrap();
        assert_eq!(admitted.mapped(), Some("172.18.0.5:443".parse().unwrap()));
        let admitted = admit(&skip, &connect("evil.example:443")).unwrap();
        assert_eq!(
            dial(&skip, &admitted, Ok(vec!["10.0.0.1".parse().unwrap()])),
            Err(Rejection::Address)
        );
    }

    #[test]
    fn skipping_the_address_rule_dials_the_answer_unclassified() {
        let skip = skipping(Some(Rule::Address));
        let admitted = admit(&skip, &connect("api.anthropic.com:443")).unwrap();
        for answer in [
            vec!["10.0.0.1".parse().unwrap()],
            vec!["172.17.0.1".parse().unwrap()],
            vec![
                "127.0.0.1".parse().unwrap(),
                "160.79.104.10".parse().unwrap(),
            ],
            vec!["169.254.169.254".parse().unwrap()],
        ] {
            let want: Vec<SocketAddr> = answer.iter().map(|ip| SocketAddr::new(*ip, 443)).collect();
            assert_eq!(dial(&skip, &admitted, Ok(answer.clone())), Ok(want));
            for rules in all_but(Rule::Address) {
                let admitted = admit(&rules, &connect("api.anthropic.com:443")).unwrap();
                assert_eq!(
                    dial(&rules, &admitted, Ok(answer.clone())),
                    Err(Rejection::Address),
                    "{answer:?} with {:?}",
                    rules.skip
                );
            }
        }
        assert_eq!(dial(&skip, &admitted, Ok(vec![])), Err(Rejection::Address));
        assert_eq!(
            dial(&skip, &admitted, Err("SERVFAIL".into())),
            Err(Rejection::Resolve)
        );
        // The allowlist still holds.
        assert_eq!(
            admit(&skip, &connect("evil.example:443")),
            Err(Rejection::NotAllowed)
        );
    }

    #[test]
    fn skipping_the_sni_rule_lets_any_first_bytes_through() {
        let skip = skipping(Some(Rule::Sni));
        let admitted = admit(&skip, &connect("api.anthropic.com:443")).unwrap();
        let other = crate::tls::tests::real_hello("cdn.example.net");
        let plain = tls::client_hello(b"GET / HTTP/1.1\r\n\r\n");
        for hello in [tls::client_hello(&other), plain] {
            assert_eq!(check_hello(&skip, &admitted, &hello), Ok(()));
            for rules in all_but(Rule::Sni) {
                assert!(
                    check_hello(&rules, &admitted, &hello).is_err(),
                    "{hello:?} with {:?}",
                    rules.skip
                );
            }
        }
        let named = tls::client_hello(&crate::tls::tests::real_hello("api.anthropic.com"));
        for rules in all_but(Rule::Sni) {
            assert_eq!(check_hello(&rules, &admitted, &named), Ok(()));
        }
    }
}
