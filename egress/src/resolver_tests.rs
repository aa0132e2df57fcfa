//! The resolver against a scripted DNS server on 127.0.0.1, alone and behind the proxy. Nothing
//! leaves the host: every scripted public address is only ever refused or returned, never dialed.

use super::*;
use crate::allowlist::Allowlist;
use crate::decide::Rules;
use crate::proxy::{handle, Config, Outcome};
use crate::Refusal;
use cordon_fake_vendor::dns::{self, Answer};
use hickory_proto::rr::RecordType;
use std::str::FromStr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::time::timeout;

/// What the server answers for a name (for every type, addresses filtered by the query's type).
#[derive(Debug, Clone)]
enum Script {
    /// These addresses: A queries get the IPv4 ones, AAAA the IPv6 ones (none: an empty answer).
    Addrs(Vec<IpAddr>),
    NxDomain,
    ServFail,
    /// NOERROR, no records.
    Empty,
    /// The first lookup (its A and its AAAA query) gets the first list, every later one the
    /// second.
    Rebind(Vec<IpAddr>, Vec<IpAddr>),
}

impl Script {
    fn answer(&self) -> Answer {
        match self {
            Script::Addrs(addrs) => Answer::Addresses(addrs.clone()),
            Script::NxDomain => Answer::NxDomain,
            Script::ServFail => Answer::ServFail,
            Script::Empty => Answer::Empty,
            Script::Rebind(first, later) => {
                Answer::Sequence(vec![first.clone(), first.clone(), later.clone()])
            }
        }
    }
}

/// The fake vendor's scripted DNS server on 127.0.0.1: records every (name, type) asked, answers
/// from its script; an unscripted name is NXDOMAIN.
struct DnsServer(dns::Server);

impl DnsServer {
    async fn start(script: &[(&str, Script)]) -> DnsServer {
        let script = script.iter().fold(dns::Script::new(), |s, (name, answer)| {
            s.answer(name, answer.answer())
        });
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        DnsServer(dns::start(bind, script).await.unwrap())
    }

    fn resolver(&self) -> UpstreamResolver {
        UpstreamResolver::with_timeout(self.0.addr(), Duration::from_millis(500)).unwrap()
    }

    fn asked(&self) -> Vec<(String, RecordType)> {
        self.0
            .queries()
            .into_iter()
            .map(|q| (q.name, RecordType::from_str(&q.record_type).unwrap()))
            .collect()
    }

    fn asked_of(&self, name: &str, kind: RecordType) -> usize {
        self.asked()
            .iter()
            .filter(|(n, t)| n == name && *t == kind)
            .count()
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn name(text: &str) -> Name {
    Name::parse(text).unwrap()
}

const PUBLIC_V4: &str = "160.79.104.10";
const PUBLIC_V6: &str = "2607:6bc0::10";

#[tokio::test]
async fn r0_the_scripted_public_addresses_come_back_a_then_aaaa() {
    let dns = DnsServer::start(&[(
        "api.vendor.test",
        Script::Addrs(vec![ip(PUBLIC_V6), ip(PUBLIC_V4)]),
    )])
    .await;
    let got = dns.resolver().lookup(&name("api.vendor.test")).await;
    assert_eq!(got, Ok(vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]));
    // Both types asked, once each, for the name itself (no search domain appended).
    let mut asked = dns.asked();
    asked.sort_by_key(|(_, t)| u16::from(*t));
    assert_eq!(
        asked,
        vec![
            ("api.vendor.test".to_owned(), RecordType::A),
            ("api.vendor.test".to_owned(), RecordType::AAAA),
        ]
    );
}

#[tokio::test]
async fn r1_nxdomain_and_servfail_are_errors_and_an_empty_answer_is_empty() {
    let dns = DnsServer::start(&[
        ("gone.vendor.test", Script::NxDomain),
        ("broken.vendor.test", Script::ServFail),
        ("empty.vendor.test", Script::Empty),
        ("v4only.vendor.test", Script::Addrs(vec![ip(PUBLIC_V4)])),
    ])
    .await;
    let resolver = dns.resolver();
    assert!(resolver.lookup(&name("gone.vendor.test")).await.is_err());
    assert!(resolver.lookup(&name("broken.vendor.test")).await.is_err());
    assert_eq!(
        resolver.lookup(&name("empty.vendor.test")).await,
        Ok(vec![])
    );
    // An empty AAAA beside an A answer is just the A answer.
    assert_eq!(
        resolver.lookup(&name("v4only.vendor.test")).await,
        Ok(vec![ip(PUBLIC_V4)])
    );
}

#[tokio::test]
async fn r2_a_silent_upstream_is_an_error_within_the_bound() {
    // A socket that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let resolver =
        UpstreamResolver::with_timeout(silent.local_addr().unwrap(), Duration::from_millis(200))
            .unwrap();
    let got = timeout(
        Duration::from_secs(5),
        resolver.lookup(&name("api.vendor.test")),
    )
    .await
    .expect("the lookup is bounded");
    assert!(got.is_err());
}

#[tokio::test]
async fn r3_every_lookup_asks_again_nothing_is_cached() {
    // Rebinding: public first, loopback after. Each lookup is exactly one A query and gets that
    // query's answer (a cache would hand the public answer out again).
    let dns = DnsServer::start(&[(
        "rebind.vendor.test",
        Script::Rebind(vec![ip(PUBLIC_V4)], vec![ip("127.0.0.1")]),
    )])
    .await;
    let resolver = dns.resolver();
    let n = name("rebind.vendor.test");
    assert_eq!(resolver.lookup(&n).await, Ok(vec![ip(PUBLIC_V4)]));
    assert_eq!(dns.asked_of("rebind.vendor.test", RecordType::A), 1);
    assert_eq!(resolver.lookup(&n).await, Ok(vec![ip("127.0.0.1")]));
    assert_eq!(dns.asked_of("rebind.vendor.test", RecordType::A), 2);
    assert_eq!(dns.asked_of("rebind.vendor.test", RecordType::AAAA), 2);
}

// Through the proxy.

/// A listener on loopback (what a loopback answer would reach) and the rules listing `names` on
/// its port.
async fn proxied(names: &[&str], host_own: Vec<IpAddr>) -> (TcpListener, Config, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let entries: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
    let rules = Rules {
        allowlist: Allowlist::parse(&entries).unwrap(),
        mappings: vec![],
        host_own,
        skip: Default::default(),
    };
    let config = Config {
        head_deadline: Duration::from_secs(5),
        hello_deadline: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        ..Config::new(rules)
    };
    (listener, config, port)
}

/// One CONNECT through `handle` on a pipe: the answer's status line and the outcome.
async fn connect_through(
    config: &Config,
    resolver: &UpstreamResolver,
    name: &str,
    port: u16,
) -> (String, Outcome) {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let head = format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    let outcome = timeout(Duration::from_secs(10), handle(server, config, resolver))
        .await
        .expect("handled in time");
    let mut got = Vec::new();
    let _ = timeout(Duration::from_secs(5), client.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    (status, outcome)
}

async fn assert_never_dialed(listener: &TcpListener) {
    assert!(
        timeout(Duration::from_millis(100), listener.accept())
            .await
            .is_err(),
        "the loopback listener was dialed"
    );
}

#[tokio::test]
async fn p0_a_listed_name_resolving_to_a_denied_address_is_refused_undialed() {
    let cases: &[(&str, Vec<IpAddr>)] = &[
        ("loopback.vendor.test", vec![ip("127.0.0.1")]),
        ("metadata.vendor.test", vec![ip("169.254.169.254")]),
        ("private.vendor.test", vec![ip("10.0.0.1")]),
        ("mapped.vendor.test", vec![ip("::ffff:127.0.0.1")]),
        // Loopback comes first in the answer: had the rule let it pass, the listener would see it.
        ("mixed.vendor.test", vec![ip("127.0.0.1"), ip(PUBLIC_V6)]),
        ("mixed6.vendor.test", vec![ip("::1"), ip(PUBLIC_V6)]),
    ];
    let script: Vec<(&str, Script)> = cases
        .iter()
        .map(|(n, addrs)| (*n, Script::Addrs(addrs.clone())))
        .collect();
    let dns = DnsServer::start(&script).await;
    let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    let (listener, config, port) = proxied(&names, vec![]).await;
    let resolver = dns.resolver();
    for (n, _) in cases {
        let (status, outcome) = connect_through(&config, &resolver, n, port).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "{n}");
        assert_eq!(outcome, Outcome::Refused(Refusal::Address), "{n}");
        assert_eq!(dns.asked_of(n, RecordType::A), 1, "{n}");
    }
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn p1_resolver_failures_are_502_and_an_empty_answer_403() {
    let dns = DnsServer::start(&[
        ("gone.vendor.test", Script::NxDomain),
        ("broken.vendor.test", Script::ServFail),
        ("empty.vendor.test", Script::Empty),
    ])
    .await;
    let (listener, config, port) = proxied(
        &[
            "gone.vendor.test",
            "broken.vendor.test",
            "empty.vendor.test",
        ],
        vec![],
    )
    .await;
    let resolver = dns.resolver();
    for (n, status, refusal) in [
        (
            "gone.vendor.test",
            "HTTP/1.1 502 Bad Gateway",
            Refusal::Resolve,
        ),
        (
            "broken.vendor.test",
            "HTTP/1.1 502 Bad Gateway",
            Refusal::Resolve,
        ),
        (
            "empty.vendor.test",
            "HTTP/1.1 403 Forbidden",
            Refusal::Address,
        ),
    ] {
        let (got, outcome) = connect_through(&config, &resolver, n, port).await;
        assert_eq!(got, status, "{n}");
        assert_eq!(outcome, Outcome::Refused(refusal), "{n}");
    }
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn p2_an_unlisted_name_is_refused_and_never_becomes_a_query() {
    let dns = DnsServer::start(&[
        ("listed.vendor.test", Script::Addrs(vec![ip("127.0.0.1")])),
        ("secret.exfil.test", Script::Addrs(vec![ip(PUBLIC_V4)])),
    ])
    .await;
    let (listener, config, port) = proxied(&["listed.vendor.test"], vec![]).await;
    let resolver = dns.resolver();
    for n in [
        "secret.exfil.test",
        "data-in-a-label.listed.vendor.test",
        "listed.vendor.test.exfil.test",
    ] {
        let (status, outcome) = connect_through(&config, &resolver, n, port).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "{n}");
        assert_eq!(outcome, Outcome::Refused(Refusal::NotAllowed), "{n}");
    }
    // A listed name on a port it is not listed with is refused (`egress-port`) before any
    // lookup too.
    let (status, outcome) = connect_through(&config, &resolver, "listed.vendor.test", 1).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert_eq!(outcome, Outcome::Refused(Refusal::Port));
    assert_eq!(dns.asked(), vec![], "an unlisted request reached the DNS");
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn p3_each_connect_resolves_exactly_once() {
    // Loopback first, then public: the first CONNECT sees loopback (one A query) and is refused.
    let dns = DnsServer::start(&[
        (
            "late.vendor.test",
            Script::Rebind(vec![ip("127.0.0.1")], vec![ip(PUBLIC_V4)]),
        ),
        // Public first, then loopback. The public address is the host's own here, so the first
        // CONNECT is refused rather than dialed out of this machine.
        (
            "rebind.vendor.test",
            Script::Rebind(vec![ip(PUBLIC_V4)], vec![ip("127.0.0.1")]),
        ),
    ])
    .await;
    let (listener, config, port) = proxied(
        &["late.vendor.test", "rebind.vendor.test"],
        vec![ip(PUBLIC_V4)],
    )
    .await;
    let resolver = dns.resolver();

    let (status, outcome) = connect_through(&config, &resolver, "late.vendor.test", port).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert_eq!(outcome, Outcome::Refused(Refusal::Address));
    assert_eq!(dns.asked_of("late.vendor.test", RecordType::A), 1);
    assert_eq!(dns.asked_of("late.vendor.test", RecordType::AAAA), 1);

    for round in 1..=2 {
        let (status, outcome) =
            connect_through(&config, &resolver, "rebind.vendor.test", port).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "round {round}");
        assert_eq!(outcome, Outcome::Refused(Refusal::Address), "round {round}");
        // One A query per CONNECT: resolved afresh, and never a second time before the dial.
        assert_eq!(
            dns.asked_of("rebind.vendor.test", RecordType::A),
            round,
            "round {round}"
        );
    }
    assert_never_dialed(&listener).await;
}
