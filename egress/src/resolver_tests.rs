//! The resolver against a scripted DNS server on 127.0.0.1, alone and behind the proxy. Nothing
//! leaves the host: every scripted public address is only ever refused or returned, never dialed.

use super::*;
use crate::allowlist::Allowlist;
use crate::decide::Rules;
use crate::proxy::{handle, handle_reported, Config, Outcome, Report};
use crate::Rejection;
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
        UpstreamResolver::with_timeout(self.0.addr(), Duration::from_millis(500))
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
    let try_for = Duration::from_millis(200);
    let resolver = UpstreamResolver::with_timeout(silent.local_addr().unwrap(), try_for);
    let started = std::time::Instant::now();
    let got = timeout(
        Duration::from_secs(5),
        resolver.lookup(&name("api.vendor.test")),
    )
    .await
    .expect("the lookup is bounded");
    let took = started.elapsed();
    assert!(got.is_err());
    assert!(took >= try_for * u32::from(ATTEMPTS), "{took:?}");
    assert!(
        took < try_for * u32::from(ATTEMPTS) + Duration::from_secs(1),
        "{took:?}"
    );
    // `ATTEMPTS` sends of each type, no more.
    let mut datagram = [0u8; 512];
    let mut sent = 0;
    while let Ok(Ok(_)) = timeout(Duration::from_millis(50), silent.recv_from(&mut datagram)).await
    {
        sent += 1;
    }
    assert_eq!(sent, 2 * usize::from(ATTEMPTS));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_no_task_outlives_its_lookup() {
    // A proxy runs for the invocation's lifetime: each lookup's exchanges (UDP, and TCP after a
    // truncated answer) end with it.
    let many: Vec<IpAddr> = (1..=120).map(|i| IpAddr::from([127, 0, 1, i])).collect();
    let dns = DnsServer::start(&[
        ("api.vendor.test", Script::Addrs(vec![ip(PUBLIC_V4)])),
        ("big.vendor.test", Script::Addrs(many)),
    ])
    .await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let resolver = dns.resolver();
    for _ in 0..5 {
        assert!(resolver.lookup(&name("api.vendor.test")).await.is_ok());
        assert!(resolver.lookup(&name("big.vendor.test")).await.is_ok());
    }
    let mut alive = metrics.num_alive_tasks();
    for _ in 0..100 {
        if alive <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        alive = metrics.num_alive_tasks();
    }
    assert_eq!(alive, before, "tasks left after the lookups");
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

/// One CONNECT through `handle_reported` on a pipe: the answer's status line and the report.
async fn connect_reported(
    config: &Config,
    resolver: &UpstreamResolver,
    name: &str,
    port: u16,
) -> (String, Report) {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let head = format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    let report = timeout(
        Duration::from_secs(10),
        handle_reported(server, config, resolver),
    )
    .await
    .expect("handled in time");
    let mut got = Vec::new();
    let _ = timeout(Duration::from_secs(5), client.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    (text.lines().next().unwrap_or_default().to_owned(), report)
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
        assert_eq!(outcome, Outcome::Refused(Rejection::Address), "{n}");
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
    for (n, status, rejection) in [
        (
            "gone.vendor.test",
            "HTTP/1.1 502 Bad Gateway",
            Rejection::Resolve,
        ),
        (
            "broken.vendor.test",
            "HTTP/1.1 502 Bad Gateway",
            Rejection::Resolve,
        ),
        (
            "empty.vendor.test",
            "HTTP/1.1 403 Forbidden",
            Rejection::Address,
        ),
    ] {
        let (got, outcome) = connect_through(&config, &resolver, n, port).await;
        assert_eq!(got, status, "{n}");
        assert_eq!(outcome, Outcome::Refused(rejection), "{n}");
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
        assert_eq!(outcome, Outcome::Refused(Rejection::NotAllowed), "{n}");
    }
    // A listed name on a port it is not listed with is refused (`egress-port`) before any
    // lookup too.
    let (status, outcome) = connect_through(&config, &resolver, "listed.vendor.test", 1).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert_eq!(outcome, Outcome::Refused(Rejection::Port));
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
    assert_eq!(outcome, Outcome::Refused(Rejection::Address));
    assert_eq!(dns.asked_of("late.vendor.test", RecordType::A), 1);
    assert_eq!(dns.asked_of("late.vendor.test", RecordType::AAAA), 1);

    for round in 1..=2 {
        let (status, outcome) =
            connect_through(&config, &resolver, "rebind.vendor.test", port).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "round {round}");
        assert_eq!(
            outcome,
            Outcome::Refused(Rejection::Address),
            "round {round}"
        );
        // One A query per CONNECT: resolved afresh, and never a second time before the dial.
        assert_eq!(
            dns.asked_of("rebind.vendor.test", RecordType::A),
            round,
            "round {round}"
        );
    }
    assert_never_dialed(&listener).await;
}

// CNAME chains: only the asked name is ever a query (A and AAAA once each), and only address
// records owned by the asked name or by a CNAME chain contained in the same answer count.

use cordon_fake_vendor::dns::Entry;

/// What one shape must come to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    /// The lookup gives these addresses.
    Addrs(Vec<IpAddr>),
    /// The lookup fails (502 `egress-resolve`).
    Error,
    /// The lookup gives no address (403 `egress-address`).
    Empty,
}

fn cname(owner: &str, target: &str) -> Entry {
    Entry::Cname {
        owner: owner.to_owned(),
        target: target.to_owned(),
    }
}

fn addr(owner: &str, address: &str) -> Entry {
    Entry::Address {
        owner: owner.to_owned(),
        ip: ip(address),
    }
}

/// An alias chain `first CNAME n1.chain.test CNAME ... CNAME nN.chain.test`, its last name
/// holding `at`: N CNAMEs in all.
fn alias_chain(script: dns::Script, first: &str, n: usize, at: &[&str]) -> dns::Script {
    let mut script = script.answer(first, Answer::Cname(format!("n1.{first}")));
    for i in 1..n {
        script = script.answer(
            &format!("n{i}.{first}"),
            Answer::Cname(format!("n{}.{first}", i + 1)),
        );
    }
    script.answer(
        &format!("n{n}.{first}"),
        Answer::Addresses(at.iter().map(|a| ip(a)).collect()),
    )
}

/// Every chain shape, the script that gives it, and what the lookup of its first name must give.
/// Public addresses are the host's own in the proxy run below, so nothing is dialed off this
/// machine; the listener on loopback would see any dial of a loopback address.
fn chain_shapes() -> (dns::Script, Vec<(&'static str, Want)>) {
    let exfil = "other.exfil.test";
    let script = dns::Script::new()
        // Scripted with addresses: a resolver that chased the chain would find them.
        .answer(exfil, Answer::Addresses(vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]))
        .answer("edge.cdn.test", Answer::Addresses(vec![ip(PUBLIC_V4)]))
        .answer(
            "both.cdn.test",
            Answer::Addresses(vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]),
        )
        .answer("loop.cdn.test", Answer::Addresses(vec![ip("127.0.0.1")]))
        // Depth 1, complete, both types.
        .answer("depth1.chain.test", Answer::Cname("both.cdn.test".into()))
        // The everyday CDN shape: A gets the chain and the edge's address, AAAA the chain alone.
        .answer("cdn.chain.test", Answer::Cname("edge.cdn.test".into()))
        // The shape: `allowed CNAME other`, other's records not in the answer.
        .answer(
            "incomplete.chain.test",
            Answer::Raw(vec![cname("incomplete.chain.test", exfil)]),
        )
        .answer(
            "self.chain.test",
            Answer::Raw(vec![
                cname("self.chain.test", "self.chain.test"),
                addr("self.chain.test", PUBLIC_V4),
            ]),
        )
        .answer(
            "pair.chain.test",
            Answer::Raw(vec![
                cname("pair.chain.test", "mate.chain.test"),
                cname("mate.chain.test", "pair.chain.test"),
            ]),
        )
        .answer(
            "branch.chain.test",
            Answer::Raw(vec![
                cname("branch.chain.test", "left.cdn.test"),
                cname("branch.chain.test", "right.cdn.test"),
                addr("left.cdn.test", PUBLIC_V4),
                addr("right.cdn.test", PUBLIC_V4),
                addr("left.cdn.test", PUBLIC_V6),
                addr("right.cdn.test", PUBLIC_V6),
            ]),
        )
        .answer(
            "beside.chain.test",
            Answer::Raw(vec![
                cname("beside.chain.test", "edge.cdn.test"),
                addr("beside.chain.test", PUBLIC_V4),
                addr("beside.chain.test", PUBLIC_V6),
                addr("edge.cdn.test", PUBLIC_V4),
                addr("edge.cdn.test", PUBLIC_V6),
            ]),
        )
        // Off-chain records, loopback and public, beside a complete chain: never used.
        .answer(
            "offchain.chain.test",
            Answer::Raw(vec![
                addr("elsewhere.test", "127.0.0.1"),
                addr("elsewhere.test", "::1"),
                cname("offchain.chain.test", "edge.cdn.test"),
                addr("edge.cdn.test", PUBLIC_V4),
                addr(exfil, "10.0.0.1"),
            ]),
        )
        // Off-chain records alone: the asked name holds nothing (an empty answer).
        .answer(
            "nothing.chain.test",
            Answer::Raw(vec![
                addr("elsewhere.test", "127.0.0.1"),
                addr("elsewhere.test", PUBLIC_V6),
                cname("elsewhere.test", "edge.cdn.test"),
            ]),
        )
        // Records of the other type only, on the asked name: an A answer holding AAAA records
        // and the reverse are ignored, so the answer is empty.
        .answer(
            "wrongtype.chain.test",
            Answer::Raw(vec![addr("other.cdn.test", PUBLIC_V4)]),
        )
        // Owner names in other cases than asked.
        .answer(
            "case.chain.test",
            Answer::Raw(vec![
                cname("CASE.Chain.TEST", "Edge.CDN.test"),
                addr("EDGE.cdn.TEST", PUBLIC_V4),
                addr("edge.CDN.test", PUBLIC_V6),
            ]),
        )
        // A chain ending at an address the classifier denies (loopback: a dial would be seen).
        .answer("denied.chain.test", Answer::Cname("loop.cdn.test".into()));
    let script = alias_chain(script, "depth3.chain.test", 3, &[PUBLIC_V4, PUBLIC_V6]);
    let script = alias_chain(script, "depth8.chain.test", 8, &[PUBLIC_V4]);
    let script = alias_chain(script, "depth9.chain.test", 9, &[PUBLIC_V4]);
    let both = || Want::Addrs(vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]);
    let shapes = vec![
        ("depth1.chain.test", both()),
        ("depth3.chain.test", both()),
        ("depth8.chain.test", Want::Addrs(vec![ip(PUBLIC_V4)])),
        ("cdn.chain.test", Want::Addrs(vec![ip(PUBLIC_V4)])),
        ("incomplete.chain.test", Want::Error),
        ("self.chain.test", Want::Error),
        ("pair.chain.test", Want::Error),
        ("branch.chain.test", Want::Error),
        ("beside.chain.test", Want::Error),
        ("offchain.chain.test", Want::Addrs(vec![ip(PUBLIC_V4)])),
        ("nothing.chain.test", Want::Empty),
        ("wrongtype.chain.test", Want::Empty),
        ("case.chain.test", both()),
        ("depth9.chain.test", Want::Error),
        ("denied.chain.test", Want::Addrs(vec![ip("127.0.0.1")])),
    ];
    (script, shapes)
}

/// The queries sent since `before`, sorted: what one lookup asked.
fn asked_since(dns: &DnsServer, before: usize) -> Vec<(String, RecordType)> {
    let mut asked = dns.asked().split_off(before);
    asked.sort_by_key(|(n, t)| (n.clone(), u16::from(*t)));
    asked
}

fn only_the_name(name: &str) -> Vec<(String, RecordType)> {
    vec![
        (name.to_owned(), RecordType::A),
        (name.to_owned(), RecordType::AAAA),
    ]
}

#[tokio::test]
async fn c0_chains_of_every_shape_ask_only_the_name_and_use_only_the_chain() {
    let (script, shapes) = chain_shapes();
    let dns = DnsServer(
        dns::start(SocketAddr::from(([127, 0, 0, 1], 0)), script)
            .await
            .unwrap(),
    );
    let resolver = dns.resolver();
    let mut wrong = Vec::new();
    for (n, want) in &shapes {
        let before = dns.asked().len();
        let got = match resolver.lookup(&name(n)).await {
            Ok(addrs) if addrs.is_empty() => Want::Empty,
            Ok(addrs) => Want::Addrs(addrs),
            Err(_) => Want::Error,
        };
        let asked = asked_since(&dns, before);
        if got != *want || asked != only_the_name(n) {
            wrong.push(format!("{n}: got {got:?}, asked {asked:?}; want {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn c1_through_the_proxy_a_chain_is_refused_by_its_outcome_and_nothing_is_dialed() {
    let (script, shapes) = chain_shapes();
    let dns = DnsServer(
        dns::start(SocketAddr::from(([127, 0, 0, 1], 0)), script)
            .await
            .unwrap(),
    );
    let names: Vec<&str> = shapes.iter().map(|(n, _)| *n).collect();
    // The public addresses are the host's own: a lookup that finds them is refused at the dial.
    let (listener, config, port) = proxied(&names, vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]).await;
    let resolver = dns.resolver();
    let mut wrong = Vec::new();
    for (n, want) in &shapes {
        let before = dns.asked().len();
        let (status, report) = connect_reported(&config, &resolver, n, port).await;
        let (want_status, want_rejection, want_detail) = match want {
            Want::Error => ("HTTP/1.1 502 Bad Gateway", Rejection::Resolve, None),
            Want::Empty => (
                "HTTP/1.1 403 Forbidden",
                Rejection::Address,
                Some("no address"),
            ),
            Want::Addrs(addrs) if addrs[0].is_loopback() => (
                "HTTP/1.1 403 Forbidden",
                Rejection::Address,
                Some("loopback"),
            ),
            Want::Addrs(_) => (
                "HTTP/1.1 403 Forbidden",
                Rejection::Address,
                Some("host-own"),
            ),
        };
        let detail_ok = want_detail.is_none_or(|d| {
            report
                .detail
                .as_deref()
                .is_some_and(|detail| detail.contains(d))
        });
        let asked = asked_since(&dns, before);
        if status != want_status
            || report.outcome != Outcome::Refused(want_rejection)
            || !detail_ok
            || asked != only_the_name(n)
        {
            wrong.push(format!(
                "{n}: {status} {:?} ({:?}), asked {asked:?}; want {want:?}",
                report.outcome, report.detail
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn c2_a_chain_too_big_for_udp_is_asked_again_over_tcp_and_still_judged() {
    let many: Vec<IpAddr> = (1..=120).map(|i| IpAddr::from([127, 0, 1, i])).collect();
    let script = dns::Script::new()
        .answer("big.chain.test", Answer::Cname("many.cdn.test".into()))
        .answer("many.cdn.test", Answer::Addresses(many.clone()))
        .answer(
            "bigraw.chain.test",
            Answer::Raw(
                std::iter::once(cname("bigraw.chain.test", "elsewhere.test"))
                    .chain(
                        many.iter()
                            .map(|a| addr("bigraw.chain.test", &a.to_string())),
                    )
                    .collect(),
            ),
        );
    let dns = DnsServer(
        dns::start(SocketAddr::from(([127, 0, 0, 1], 0)), script)
            .await
            .unwrap(),
    );
    let resolver = dns.resolver();
    // The A answer is truncated over UDP and asked again over TCP (the same name and type); the
    // AAAA answer (the CNAME alone) fits.
    assert_eq!(
        resolver.lookup(&name("big.chain.test")).await,
        Ok(many.clone())
    );
    let mut want = vec![
        ("big.chain.test".to_owned(), RecordType::A),
        ("big.chain.test".to_owned(), RecordType::A),
        ("big.chain.test".to_owned(), RecordType::AAAA),
    ];
    assert_eq!(asked_since(&dns, 0), want);
    // A CNAME beside the address records, over TCP too: no answer.
    let before = dns.asked().len();
    assert!(resolver.lookup(&name("bigraw.chain.test")).await.is_err());
    want = vec![
        ("bigraw.chain.test".to_owned(), RecordType::A),
        ("bigraw.chain.test".to_owned(), RecordType::A),
        ("bigraw.chain.test".to_owned(), RecordType::AAAA),
        ("bigraw.chain.test".to_owned(), RecordType::AAAA),
    ];
    assert_eq!(asked_since(&dns, before), want);
    // Through the proxy: refused as loopback, never dialed.
    let (listener, config, port) = proxied(&["big.chain.test"], vec![]).await;
    let (status, report) = connect_reported(&config, &resolver, "big.chain.test", port).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert_eq!(report.outcome, Outcome::Refused(Rejection::Address));
    assert_never_dialed(&listener).await;
}

#[tokio::test]
async fn c3_left_out_the_chain_rule_asks_for_the_target_as_a_caching_client_would() {
    // The removal the gate's `proxy/cname` case makes: each shape that the rule alone refuses is
    // answered by asking for the target, and only those.
    let exfil = "other.exfil.test";
    let mut script = dns::Script::new()
        .answer(exfil, Answer::Addresses(vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]))
        .answer("loop.cdn.test", Answer::Addresses(vec![ip("127.0.0.1")]))
        .answer(
            "incomplete.chain.test",
            Answer::Raw(vec![cname("incomplete.chain.test", exfil)]),
        )
        .answer(
            "private.chain.test",
            Answer::Raw(vec![cname("private.chain.test", "loop.cdn.test")]),
        )
        .answer(
            "pair.chain.test",
            Answer::Raw(vec![
                cname("pair.chain.test", "mate.chain.test"),
                cname("mate.chain.test", "pair.chain.test"),
            ]),
        );
    // An endless chain of one CNAME per answer: asked at most `MAX_CHAIN` times past the name.
    for i in 0..20 {
        let owner = format!("h{i}.endless.test");
        let target = format!("h{}.endless.test", i + 1);
        script = script.answer(&owner, Answer::Raw(vec![cname(&owner, &target)]));
    }
    let dns = DnsServer(
        dns::start(SocketAddr::from(([127, 0, 0, 1], 0)), script)
            .await
            .unwrap(),
    );
    let chasing = dns.resolver().chasing(true);

    let got = chasing.lookup(&name("incomplete.chain.test")).await;
    assert_eq!(got, Ok(vec![ip(PUBLIC_V4), ip(PUBLIC_V6)]));
    let mut want = only_the_name("incomplete.chain.test");
    want.extend(only_the_name(exfil));
    want.sort();
    assert_eq!(asked_since(&dns, 0), want);

    // A loop or anything else the rule refuses still is.
    let before = dns.asked().len();
    assert!(chasing.lookup(&name("pair.chain.test")).await.is_err());
    assert_eq!(asked_since(&dns, before), only_the_name("pair.chain.test"));

    let before = dns.asked().len();
    assert!(chasing.lookup(&name("h0.endless.test")).await.is_err());
    let asked = asked_since(&dns, before);
    assert_eq!(asked.len(), 2 * (1 + crate::chain::MAX_CHAIN), "{asked:?}");
    assert!(
        !asked.iter().any(|(n, _)| n == "h9.endless.test"),
        "{asked:?}"
    );

    // Through the proxy: the target's loopback address is found (403), where the rule gives no
    // answer (502); nothing is dialed either way.
    let (listener, config, port) = proxied(&["private.chain.test"], vec![]).await;
    let (status, report) = connect_reported(&config, &chasing, "private.chain.test", port).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert_eq!(report.outcome, Outcome::Refused(Rejection::Address));
    let (status, report) =
        connect_reported(&config, &dns.resolver(), "private.chain.test", port).await;
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
    assert_eq!(report.outcome, Outcome::Refused(Rejection::Resolve));
    assert_never_dialed(&listener).await;
}
