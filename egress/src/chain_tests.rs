//! The chain rule on hand-built answers: every shape by name, then every answer a small universe
//! of records can make, held to what must not matter (order, case, the other type, class, records
//! off the chain).

use super::*;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, TXT};
use std::net::{Ipv4Addr, Ipv6Addr};

fn n(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

fn cname(owner: &str, target: &str) -> Record {
    Record::from_rdata(n(owner), 60, RData::CNAME(CNAME(n(target))))
}

fn a(owner: &str, last: u8) -> Record {
    Record::from_rdata(n(owner), 60, RData::A(A(Ipv4Addr::new(192, 0, 2, last))))
}

fn aaaa(owner: &str, last: u16) -> Record {
    Record::from_rdata(
        n(owner),
        60,
        RData::AAAA(AAAA(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last))),
    )
}

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

fn v6(last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last))
}

const Q: &str = "q.test.";

fn follow_a(records: &[Record]) -> Chain {
    follow(&n(Q), RecordType::A, records)
}

/// `q CNAME c1 CNAME ... CNAME cN`, cN holding an A record (192.0.2.N).
fn chain_of(cnames: usize) -> Vec<Record> {
    let mut records = Vec::new();
    let mut owner = Q.to_owned();
    for i in 1..=cnames {
        let target = format!("c{i}.test.");
        records.push(cname(&owner, &target));
        owner = target;
    }
    records.push(a(&owner, u8::try_from(cnames).unwrap()));
    records
}

#[test]
fn the_asked_names_own_addresses_are_the_answer() {
    assert_eq!(
        follow_a(&[a(Q, 1), a(Q, 2)]),
        Chain::Addresses(vec![v4(1), v4(2)])
    );
    assert_eq!(
        follow(&n(Q), RecordType::AAAA, &[a(Q, 1), aaaa(Q, 1)]),
        Chain::Addresses(vec![v6(1)])
    );
    // In answer order, duplicates kept: the classifier judges each.
    assert_eq!(
        follow_a(&[a(Q, 2), a(Q, 1), a(Q, 2)]),
        Chain::Addresses(vec![v4(2), v4(1), v4(2)])
    );
    // The asked name without its trailing dot is the same name.
    assert_eq!(
        follow(&n("q.test"), RecordType::A, &[a(Q, 1)]),
        Chain::Addresses(vec![v4(1)])
    );
}

#[test]
fn nothing_for_the_asked_name_is_an_empty_answer() {
    assert_eq!(follow_a(&[]), Chain::Empty);
    // The other type, other types, other classes, other names: all ignored.
    let mut chaos = a(Q, 1);
    chaos.dns_class = DNSClass::CH;
    let mut chaos_cname = cname(Q, "t.test.");
    chaos_cname.dns_class = DNSClass::CH;
    let txt = Record::from_rdata(n(Q), 60, RData::TXT(TXT::new(vec!["x".into()])));
    assert_eq!(
        follow_a(&[
            aaaa(Q, 1),
            chaos,
            chaos_cname,
            txt,
            a("t.test.", 1),
            cname("other.test.", Q)
        ]),
        Chain::Empty
    );
    assert_eq!(follow(&n(Q), RecordType::AAAA, &[a(Q, 1)]), Chain::Empty);
}

#[test]
fn complete_chains_give_their_last_names_addresses_only() {
    for depth in [1, 2, 3, MAX_CHAIN] {
        let records = chain_of(depth);
        let want = Chain::Addresses(vec![v4(u8::try_from(depth).unwrap())]);
        assert_eq!(follow_a(&records), want, "depth {depth}");
        // Whatever the order.
        let reversed: Vec<Record> = records.iter().rev().cloned().collect();
        assert_eq!(follow_a(&reversed), want, "depth {depth}, reversed");
    }
    // The CDN shape: the A answer is complete, the AAAA one is the chain alone.
    let cdn = [cname(Q, "edge.cdn.test."), a("edge.cdn.test.", 7)];
    assert_eq!(follow_a(&cdn), Chain::Addresses(vec![v4(7)]));
    assert_eq!(
        follow(&n(Q), RecordType::AAAA, &cdn[..1]),
        Chain::Broken(Broken::Incomplete(n("edge.cdn.test.")))
    );
}

#[test]
fn a_chain_longer_than_the_bound_is_broken() {
    assert_eq!(
        follow_a(&chain_of(MAX_CHAIN + 1)),
        Chain::Broken(Broken::TooLong)
    );
    assert_eq!(
        follow_a(&chain_of(3 * MAX_CHAIN)),
        Chain::Broken(Broken::TooLong)
    );
}

#[test]
fn an_incomplete_chain_is_broken_at_its_target() {
    // The shape: `allowed CNAME other`, other's records not in the answer.
    assert_eq!(
        follow_a(&[cname(Q, "other.exfil.test.")]),
        Chain::Broken(Broken::Incomplete(n("other.exfil.test.")))
    );
    // Deeper, and with the target's records of the other type only.
    assert_eq!(
        follow_a(&[
            cname(Q, "t.test."),
            cname("t.test.", "u.test."),
            aaaa("u.test.", 1)
        ]),
        Chain::Broken(Broken::Incomplete(n("u.test.")))
    );
}

#[test]
fn loops_are_broken() {
    assert_eq!(
        follow_a(&[cname(Q, Q), a(Q, 1)]),
        Chain::Broken(Broken::Beside(n(Q)))
    );
    assert_eq!(
        follow_a(&[cname(Q, "Q.TEST.")]),
        Chain::Broken(Broken::Loop(n("Q.TEST.")))
    );
    assert_eq!(
        follow_a(&[cname(Q, "t.test."), cname("t.test.", Q)]),
        Chain::Broken(Broken::Loop(n(Q)))
    );
    assert_eq!(
        follow_a(&[
            cname(Q, "t.test."),
            cname("t.test.", "u.test."),
            cname("u.test.", "t.test."),
            a("t.test.", 1)
        ]),
        Chain::Broken(Broken::Beside(n("t.test.")))
    );
    assert_eq!(
        follow_a(&[
            cname(Q, "t.test."),
            cname("t.test.", "u.test."),
            cname("u.test.", "T.test.")
        ]),
        Chain::Broken(Broken::Loop(n("T.test.")))
    );
}

#[test]
fn a_branch_or_a_cname_beside_addresses_is_broken() {
    assert_eq!(
        follow_a(&[
            cname(Q, "t.test."),
            cname(Q, "u.test."),
            a("t.test.", 1),
            a("u.test.", 2)
        ]),
        Chain::Broken(Broken::Branch(n(Q)))
    );
    // The same CNAME twice is two CNAMEs.
    assert_eq!(
        follow_a(&[cname(Q, "t.test."), cname(Q, "t.test."), a("t.test.", 1)]),
        Chain::Broken(Broken::Branch(n(Q)))
    );
    assert_eq!(
        follow_a(&[cname(Q, "t.test."), a(Q, 1), a("t.test.", 2)]),
        Chain::Broken(Broken::Beside(n(Q)))
    );
    assert_eq!(
        follow_a(&[
            cname(Q, "t.test."),
            cname("t.test.", "u.test."),
            a("t.test.", 1),
            a("u.test.", 2)
        ]),
        Chain::Broken(Broken::Beside(n("t.test.")))
    );
    // Beside records of the other type only, a CNAME is followed (the other type is ignored).
    assert_eq!(
        follow_a(&[cname(Q, "t.test."), aaaa(Q, 1), a("t.test.", 2)]),
        Chain::Addresses(vec![v4(2)])
    );
}

#[test]
fn records_off_the_chain_are_never_used() {
    let records = [
        a("elsewhere.test.", 1),
        cname("elsewhere.test.", "t.test."),
        cname(Q, "t.test."),
        a("u.test.", 3),
        cname("u.test.", Q),
        a("t.test.", 2),
    ];
    assert_eq!(follow_a(&records), Chain::Addresses(vec![v4(2)]));
    // A name pointing into the chain does not join it.
    assert_eq!(
        follow_a(&[cname("x.test.", Q), a("x.test.", 1)]),
        Chain::Empty
    );
}

#[test]
fn owner_names_compare_without_case() {
    assert_eq!(
        follow_a(&[
            cname("Q.Test.", "Edge.CDN.test."),
            a("EDGE.cdn.TEST.", 1),
            a("edge.cdn.test.", 2)
        ]),
        Chain::Addresses(vec![v4(1), v4(2)])
    );
}

// Every answer a small universe can make: three names, every CNAME between them, an A record on
// each. Each result is held to what must not change it.

const NAMES: [&str; 3] = ["q.test.", "t.test.", "u.test."];

fn universe() -> Vec<Record> {
    let mut records = Vec::new();
    for owner in NAMES {
        for target in NAMES {
            records.push(cname(owner, target));
        }
    }
    for (i, owner) in NAMES.iter().enumerate() {
        records.push(a(owner, u8::try_from(i + 1).unwrap()));
    }
    records
}

/// The result with names lowercased, so results over differently cased answers compare.
fn folded(chain: Chain) -> Chain {
    match chain {
        Chain::Broken(Broken::Incomplete(x)) => Chain::Broken(Broken::Incomplete(x.to_lowercase())),
        Chain::Broken(Broken::Loop(x)) => Chain::Broken(Broken::Loop(x.to_lowercase())),
        Chain::Broken(Broken::Branch(x)) => Chain::Broken(Broken::Branch(x.to_lowercase())),
        Chain::Broken(Broken::Beside(x)) => Chain::Broken(Broken::Beside(x.to_lowercase())),
        other => other,
    }
}

fn upper(record: &Record) -> Record {
    let mut upper = record.clone();
    upper.name = n(&record.name.to_ascii().to_ascii_uppercase());
    if let RData::CNAME(target) = &record.data {
        upper.data = RData::CNAME(CNAME(n(&target.0.to_ascii().to_ascii_uppercase())));
    }
    upper
}

/// The names any path of CNAMEs from q reaches in `records` (q included).
fn reachable(records: &[Record]) -> Vec<Name> {
    let mut reached = vec![n(Q)];
    let mut grew = true;
    while grew {
        grew = false;
        for record in records {
            if let RData::CNAME(target) = &record.data {
                let from = reached.iter().any(|r| r.eq_ignore_root(&record.name));
                let known = reached.iter().any(|r| r.eq_ignore_root(&target.0));
                if from && !known {
                    reached.push(target.0.clone());
                    grew = true;
                }
            }
        }
    }
    reached
}

#[test]
fn every_answer_of_a_small_universe_keeps_the_rule() {
    let universe = universe();
    let v6_everywhere: Vec<Record> = NAMES
        .iter()
        .enumerate()
        .map(|(i, owner)| aaaa(owner, u16::try_from(i + 1).unwrap()))
        .collect();
    let mut shapes = std::collections::BTreeMap::<&str, usize>::new();
    for mask in 0u32..(1 << universe.len()) {
        let records: Vec<Record> = universe
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, r)| r.clone())
            .collect();
        let got = follow_a(&records);
        let shape = match &got {
            Chain::Addresses(_) => "addresses",
            Chain::Empty => "empty",
            Chain::Broken(Broken::Incomplete(_)) => "incomplete",
            Chain::Broken(Broken::Loop(_)) => "loop",
            Chain::Broken(Broken::Branch(_)) => "branch",
            Chain::Broken(Broken::Beside(_)) => "beside",
            Chain::Broken(Broken::TooLong) => "too long",
        };
        *shapes.entry(shape).or_default() += 1;
        // Order does not matter.
        let reversed: Vec<Record> = records.iter().rev().cloned().collect();
        assert_eq!(follow_a(&reversed), got, "{mask:#b} reversed");
        // Case does not matter.
        let uppered: Vec<Record> = records.iter().map(upper).collect();
        assert_eq!(
            folded(follow_a(&uppered)),
            folded(got.clone()),
            "{mask:#b} upper"
        );
        // The other type does not matter.
        let mut with_v6 = records.clone();
        with_v6.extend(v6_everywhere.iter().cloned());
        assert_eq!(follow_a(&with_v6), got, "{mask:#b} with AAAA");
        // A record owned by a name no CNAME path from q reaches does not matter.
        let reached = reachable(&records);
        for (i, record) in records.iter().enumerate() {
            if !reached.iter().any(|r| r.eq_ignore_root(&record.name)) {
                let mut without = records.clone();
                without.remove(i);
                assert_eq!(follow_a(&without), got, "{mask:#b} without {record}");
            }
        }
        // Addresses are exactly those of one reached name, which holds no CNAME.
        if let Chain::Addresses(addrs) = &got {
            let owners: Vec<&Record> = records
                .iter()
                .filter(|r| matches!(&r.data, RData::A(x) if addrs.contains(&IpAddr::V4(x.0))))
                .collect();
            assert_eq!(owners.len(), addrs.len(), "{mask:#b}");
            let end = &owners[0].name;
            assert!(
                owners.iter().all(|r| r.name.eq_ignore_root(end)),
                "{mask:#b}"
            );
            assert!(reached.iter().any(|r| r.eq_ignore_root(end)), "{mask:#b}");
            assert!(
                !records
                    .iter()
                    .any(|r| r.name.eq_ignore_root(end) && matches!(r.data, RData::CNAME(_))),
                "{mask:#b}"
            );
        }
    }
    // Every outcome but a chain over the bound (three names cannot make one) occurs.
    for shape in [
        "addresses",
        "empty",
        "incomplete",
        "loop",
        "branch",
        "beside",
    ] {
        assert!(shapes.contains_key(shape), "{shape}: {shapes:?}");
    }
}
