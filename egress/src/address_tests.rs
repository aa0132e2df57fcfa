use super::*;
use iprfc::{IpNet, RFCs, FORWARDING_BLACKLIST_ID};

fn ip(text: &str) -> IpAddr {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not an address: {e}"))
}

fn class_of(text: &str) -> Class {
    classify(ip(text), &[])
}

fn rfc_name(id: u32) -> String {
    if id == FORWARDING_BLACKLIST_ID {
        "the forwarding blacklist".to_string()
    } else {
        format!("RFC {id}")
    }
}

/// Networks that `iprfc` lists but IANA's special-purpose registries no longer hold: RFC 3330's
/// blocks that RFC 5735 released (all since allocated to registries and routed), and RFC 2928's
/// `2001::/16`, the first sub-TLA allocation, which is ordinary unicast space around 2001::/23
/// (Google's 2001:4860::/32 is in it). The oracle skips exactly these; a test below checks that
/// each is still in `iprfc` (so the list never goes stale) and is global here.
const HISTORIC: &[(u32, &str)] = &[
    (3330, "14.0.0.0/8"),
    (3330, "24.0.0.0/8"),
    (3330, "39.0.0.0/8"),
    (3330, "128.0.0.0/16"),
    (3330, "191.255.0.0/16"),
    (3330, "223.255.255.0/24"),
    (2928, "2001::/16"),
];

fn is_historic(id: u32, net: &IpNet) -> bool {
    HISTORIC
        .iter()
        .any(|&(hid, text)| hid == id && net.to_string() == text)
}

/// The first, second, quarter, middle, three-quarter, second-to-last and last address of a
/// network (the quarters land on a global IPv4 address inside the embedding blocks, whose middle
/// is 127.255.255.255).
fn probes(net: &IpNet) -> Vec<IpAddr> {
    match net {
        IpNet::V4(n) => {
            let (first, last) = (n.network().to_bits(), n.broadcast().to_bits());
            let span = last - first;
            [
                first,
                first.saturating_add(1).min(last),
                first + span / 4,
                first + span / 2,
                first + span / 4 * 3,
                last.saturating_sub(1).max(first),
                last,
            ]
            .into_iter()
            .map(|bits| IpAddr::V4(Ipv4Addr::from_bits(bits)))
            .collect()
        }
        IpNet::V6(n) => {
            let (first, last) = (n.network().to_bits(), n.broadcast().to_bits());
            let span = last - first;
            [
                first,
                first.saturating_add(1).min(last),
                first + span / 4,
                first + span / 2,
                first + span / 4 * 3,
                last.saturating_sub(1).max(first),
                last,
            ]
            .into_iter()
            .map(|bits| IpAddr::V6(Ipv6Addr::from_bits(bits)))
            .collect()
        }
    }
}

#[test]
fn oracle_every_network_iprfc_lists_is_denied() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for rfc in RFCs::iter() {
        for net in rfc.ip_nets() {
            if is_historic(rfc.id(), net) {
                continue;
            }
            for addr in probes(net) {
                checked += 1;
                if classify(addr, &[]).is_global() {
                    failures.push(format!("{} {net}: {addr} is Global", rfc_name(rfc.id())));
                }
            }
        }
    }
    assert!(
        checked > 1000,
        "the oracle checked only {checked} addresses"
    );
    assert!(
        failures.is_empty(),
        "{} addresses iprfc lists classify Global:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn oracle_skips_only_historic_networks_iprfc_still_lists() {
    for &(id, text) in HISTORIC {
        let rfc = RFCs::get(id).unwrap_or_else(|| panic!("iprfc has no RFC {id}"));
        assert!(
            rfc.ip_nets().iter().any(|net| net.to_string() == text),
            "RFC {id} no longer lists {text}: drop it from HISTORIC"
        );
    }
    // They are ordinary allocated space now, so their insides are global here.
    for text in [
        "14.1.2.3",
        "24.0.0.1",
        "39.1.1.1",
        "128.0.1.1",
        "191.255.1.1",
        "223.255.255.1",
        "2001:4860:4860::8888",
        "2001:8000::1",
    ] {
        assert_eq!(class_of(text), Class::Global, "{text}");
    }
}

#[test]
fn oracle_covers_the_current_registries_rows_by_name() {
    // RFC 6890's table in iprfc is the current IANA snapshot; spot-check rows the issue names.
    let rfc6890 = RFCs::get(6890).unwrap();
    for text in [
        "192.0.0.0/24",
        "192.0.0.9/32",
        "192.0.0.10/32",
        "192.31.196.0/24",
        "192.52.193.0/24",
        "192.175.48.0/24",
        "64:ff9b:1::/48",
        "100::/64",
        "2001::/23",
        "2001:20::/28",
        "3fff::/20",
        "5f00::/16",
        "2620:4f:8000::/48",
    ] {
        assert!(
            rfc6890.ip_nets().iter().any(|net| net.to_string() == text),
            "iprfc's RFC 6890 table lacks {text}"
        );
    }
}

#[test]
fn known_global_addresses_are_global() {
    for text in [
        "8.8.8.8",
        "8.8.4.4",
        "1.1.1.1",
        "1.0.0.1",
        "9.9.9.9",
        "93.184.215.14",
        "151.101.1.1",
        "140.82.112.3",
        "160.79.104.10",
        "104.18.32.47",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "2a04:4e42::223",
        "2620:fe::fe",
        "2001:200::1",
        "2c0f:fb50:4003::1",
    ] {
        assert_eq!(class_of(text), Class::Global, "{text}");
    }
}

#[test]
fn embedded_ipv4_is_decoded_and_denied() {
    let cases = [
        // IPv4-mapped, several spellings.
        ("::ffff:127.0.0.1", Denied::Loopback),
        ("::ffff:7f00:1", Denied::Loopback),
        ("0:0:0:0:0:ffff:7f00:0001", Denied::Loopback),
        ("::FFFF:7F00:1", Denied::Loopback),
        ("0000:0000:0000:0000:0000:ffff:127.0.0.1", Denied::Loopback),
        ("::ffff:10.0.0.1", Denied::Private),
        ("::ffff:a9fe:a9fe", Denied::Metadata),
        ("::ffff:169.254.169.254", Denied::Metadata),
        ("::ffff:0.0.0.0", Denied::Unspecified),
        ("::ffff:8.8.8.8", Denied::Ipv4Mapped),
        // IPv4-compatible (deprecated).
        ("::127.0.0.1", Denied::Loopback),
        ("::7f00:1", Denied::Loopback),
        ("0:0:0:0:0:0:7f00:1", Denied::Loopback),
        ("::192.168.1.1", Denied::Private),
        ("::0.0.0.2", Denied::ThisNetwork),
        ("::8.8.8.8", Denied::Ipv4Compatible),
        // NAT64 well-known prefix.
        ("64:ff9b::127.0.0.1", Denied::Loopback),
        ("64:ff9b::7f00:1", Denied::Loopback),
        ("64:ff9b:0:0:0:0:7f00:1", Denied::Loopback),
        ("64:ff9b::a9fe:a9fe", Denied::Metadata),
        ("64:ff9b::10.1.2.3", Denied::Private),
        ("64:ff9b::8.8.8.8", Denied::Ipv4Translated),
        ("64:ff9b::808:808", Denied::Ipv4Translated),
        // SIIT's IPv4-translated form.
        ("::ffff:0:127.0.0.1", Denied::Loopback),
        ("::ffff:0:8.8.8.8", Denied::Ipv4Translated),
        // Local-use NAT64: outright.
        ("64:ff9b:1::1", Denied::Nat64Local),
        ("64:ff9b:1::808:808", Denied::Nat64Local),
        ("64:ff9b:1:ffff::8.8.8.8", Denied::Nat64Local),
        // 6to4.
        ("2002:7f00:1::", Denied::Loopback),
        ("2002:7f00:0001:0:0:0:0:1", Denied::Loopback),
        ("2002:a9fe:a9fe::1", Denied::Metadata),
        ("2002:0a00:0001::", Denied::Private),
        ("2002:c0a8:101::", Denied::Private),
        ("2002:c058:6301::", Denied::Relay6to4Anycast),
        ("2002:808:808::1", Denied::SixToFour),
        ("2002:0808:0808:ffff:ffff:ffff:ffff:ffff", Denied::SixToFour),
        // Teredo: outright.
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Denied::Teredo),
        ("2001::1", Denied::Teredo),
        ("2001:0000:ffff:ffff:ffff:ffff:ffff:ffff", Denied::Teredo),
    ];
    for (text, expected) in cases {
        assert_eq!(class_of(text), Class::Denied(expected), "{text}");
    }
}

#[test]
fn boundaries() {
    let cases: &[(&str, Option<Denied>)] = &[
        ("0.255.255.255", Some(Denied::ThisNetwork)),
        ("1.0.0.0", None),
        ("9.255.255.255", None),
        ("10.0.0.0", Some(Denied::Private)),
        ("10.255.255.255", Some(Denied::Private)),
        ("11.0.0.0", None),
        ("100.63.255.255", None),
        ("100.64.0.0", Some(Denied::SharedCgnat)),
        ("100.127.255.255", Some(Denied::SharedCgnat)),
        ("100.128.0.0", None),
        ("126.255.255.255", None),
        ("127.0.0.0", Some(Denied::Loopback)),
        ("127.255.255.255", Some(Denied::Loopback)),
        ("128.0.0.0", None),
        ("169.253.255.255", None),
        ("169.254.0.0", Some(Denied::LinkLocal)),
        ("169.254.169.253", Some(Denied::LinkLocal)),
        ("169.254.255.255", Some(Denied::LinkLocal)),
        ("169.255.0.0", None),
        ("172.15.255.255", None),
        ("172.16.0.0", Some(Denied::Private)),
        ("172.31.255.255", Some(Denied::Private)),
        ("172.32.0.0", None),
        ("191.255.255.255", None),
        ("192.0.0.0", Some(Denied::IetfProtocolAssignments)),
        ("192.0.0.8", Some(Denied::Dummy)),
        ("192.0.0.9", Some(Denied::IetfProtocolAssignments)),
        ("192.0.0.10", Some(Denied::IetfProtocolAssignments)),
        ("192.0.0.255", Some(Denied::IetfProtocolAssignments)),
        ("192.0.1.0", None),
        ("192.0.2.0", Some(Denied::Documentation)),
        ("192.0.2.255", Some(Denied::Documentation)),
        ("192.0.3.0", None),
        ("192.31.195.255", None),
        ("192.31.196.0", Some(Denied::As112)),
        ("192.31.197.0", None),
        ("192.52.193.0", Some(Denied::Amt)),
        ("192.88.98.255", None),
        ("192.88.99.0", Some(Denied::Relay6to4Anycast)),
        ("192.88.99.2", Some(Denied::Relay6to4Anycast)),
        ("192.88.100.0", None),
        ("192.167.255.255", None),
        ("192.168.0.0", Some(Denied::Private)),
        ("192.168.255.255", Some(Denied::Private)),
        ("192.169.0.0", None),
        ("192.175.48.0", Some(Denied::As112)),
        ("192.175.49.0", None),
        ("198.17.255.255", None),
        ("198.18.0.0", Some(Denied::Benchmarking)),
        ("198.19.255.255", Some(Denied::Benchmarking)),
        ("198.20.0.0", None),
        ("198.51.99.255", None),
        ("198.51.100.0", Some(Denied::Documentation)),
        ("198.51.101.0", None),
        ("203.0.112.255", None),
        ("203.0.113.255", Some(Denied::Documentation)),
        ("203.0.114.0", None),
        ("223.255.255.255", None),
        ("224.0.0.0", Some(Denied::Multicast)),
        ("239.255.255.255", Some(Denied::Multicast)),
        ("240.0.0.0", Some(Denied::Reserved)),
        ("255.255.255.254", Some(Denied::Reserved)),
        ("255.255.255.255", Some(Denied::Broadcast)),
        ("0.0.0.0", Some(Denied::Unspecified)),
        ("0.0.0.1", Some(Denied::ThisNetwork)),
        // IPv6.
        ("::", Some(Denied::Unspecified)),
        ("::1", Some(Denied::Loopback)),
        ("::2", Some(Denied::ThisNetwork)),
        ("::1:0:0", Some(Denied::Reserved)),
        (
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Reserved),
        ),
        ("2000::", None),
        ("2000::1", None),
        (
            "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::IetfProtocolAssignments),
        ),
        ("2001:1::1", Some(Denied::IetfProtocolAssignments)),
        ("2001:30::1", Some(Denied::IetfProtocolAssignments)),
        ("2001:2::", Some(Denied::Benchmarking)),
        (
            "2001:2:0:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Benchmarking),
        ),
        ("2001:2:1::", Some(Denied::IetfProtocolAssignments)),
        ("2001:3::1", Some(Denied::Amt)),
        ("2001:4:112::1", Some(Denied::As112)),
        ("2001:10::1", Some(Denied::Orchid)),
        (
            "2001:2f:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Orchid),
        ),
        ("2001:200::", None),
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", None),
        ("2001:db8::", Some(Denied::Documentation)),
        (
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Documentation),
        ),
        ("2001:db9::", None),
        ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
        ("2002::", Some(Denied::Unspecified)),
        (
            "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Broadcast),
        ),
        ("2003::", None),
        ("2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", None),
        ("2620:4f:8000::", Some(Denied::As112)),
        ("2620:4f:8001::", None),
        ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
        ("3fff::", Some(Denied::Documentation)),
        (
            "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Documentation),
        ),
        ("3fff:1000::", None),
        ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
        ("4000::", Some(Denied::Reserved)),
        (
            "5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Reserved),
        ),
        ("5f00::", Some(Denied::Srv6Sid)),
        (
            "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Srv6Sid),
        ),
        ("100::", Some(Denied::Discard)),
        ("100::ffff:ffff:ffff:ffff", Some(Denied::Discard)),
        ("100:0:0:1::", Some(Denied::Dummy)),
        ("100:0:0:2::", Some(Denied::Reserved)),
        (
            "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Reserved),
        ),
        ("fc00::", Some(Denied::UniqueLocal)),
        (
            "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::UniqueLocal),
        ),
        ("fe00::", Some(Denied::Reserved)),
        ("fe80::", Some(Denied::LinkLocal)),
        (
            "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::LinkLocal),
        ),
        ("fec0::", Some(Denied::SiteLocal)),
        (
            "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::SiteLocal),
        ),
        ("ff00::", Some(Denied::Multicast)),
        ("ff02::1", Some(Denied::Multicast)),
        (
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Denied::Multicast),
        ),
    ];
    for &(text, expected) in cases {
        let expected = expected.map_or(Class::Global, Class::Denied);
        assert_eq!(class_of(text), expected, "{text}");
    }
}

#[test]
fn metadata_addresses_are_named_before_their_block() {
    for text in [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "169.254.0.23",
        "169.254.42.42",
        "100.100.100.200",
        "192.0.0.192",
        "168.63.129.16",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "fd20:ce::254",
        "fd00:42::42",
        // And decoded from every embedding.
        "::ffff:100.100.100.200",
        "::ffff:168.63.129.16",
        "64:ff9b::a83f:8110",
        "2002:c000:c0::",
    ] {
        assert_eq!(class_of(text), Class::Denied(Denied::Metadata), "{text}");
    }
    // The neighbours are their block's.
    assert_eq!(
        class_of("100.100.100.201"),
        Class::Denied(Denied::SharedCgnat)
    );
    assert_eq!(class_of("168.63.129.17"), Class::Global);
    assert_eq!(
        class_of("fd00:ec2::253"),
        Class::Denied(Denied::UniqueLocal)
    );
}

#[test]
fn the_hosts_own_addresses_are_host_own_however_they_arrive() {
    let host_own = [
        ip("172.17.0.1"),
        ip("81.2.69.142"),
        ip("::ffff:10.88.0.1"),
        ip("2a01:4f8:c17:1::1"),
    ];
    for text in [
        "172.17.0.1",
        "::ffff:172.17.0.1",
        "::ffff:ac11:1",
        "81.2.69.142",
        "::ffff:81.2.69.142",
        "::81.2.69.142",
        "64:ff9b::5102:458e",
        "2002:5102:458e::1",
        "10.88.0.1",
        "::ffff:10.88.0.1",
        "2a01:4f8:c17:1::1",
        "2a01:04f8:0c17:0001:0000:0000:0000:0001",
    ] {
        assert_eq!(
            classify(ip(text), &host_own),
            Class::Denied(Denied::HostOwn),
            "{text}"
        );
    }
    // Others keep their class.
    assert_eq!(
        classify(ip("172.17.0.2"), &host_own),
        Class::Denied(Denied::Private)
    );
    assert_eq!(classify(ip("81.2.69.143"), &host_own), Class::Global);
    assert_eq!(classify(ip("2a01:4f8:c17:1::2"), &host_own), Class::Global);
    assert_eq!(
        classify(ip("::ffff:81.2.69.143"), &host_own),
        Class::Denied(Denied::Ipv4Mapped)
    );
    // A metadata address is Metadata even where the host holds it (a node-local metadata proxy).
    assert_eq!(
        classify(ip("169.254.169.254"), &[ip("169.254.169.254")]),
        Class::Denied(Denied::Metadata)
    );
}

#[test]
fn check_answer_refuses_empty_and_any_denied_address() {
    assert_eq!(check_answer(&[], &[]), Err(AnswerRefused::Empty));
    assert_eq!(check_answer(&[ip("8.8.8.8")], &[]), Ok(()));
    assert_eq!(
        check_answer(
            &[ip("8.8.8.8"), ip("2606:4700:4700::1111"), ip("1.1.1.1")],
            &[]
        ),
        Ok(())
    );
    let mixed = [
        ip("8.8.8.8"),
        ip("2001:4860:4860::8888"),
        ip("::ffff:127.0.0.1"),
        ip("10.0.0.1"),
    ];
    let refused = check_answer(&mixed, &[]);
    assert_eq!(
        refused,
        Err(AnswerRefused::Denied {
            addr: ip("::ffff:127.0.0.1"),
            class: Denied::Loopback
        })
    );
    assert_eq!(refused.map_err(AnswerRefused::as_str), Err("loopback"));
    assert_eq!(
        check_answer(&[ip("1.1.1.1"), ip("172.17.0.1")], &[ip("172.17.0.1")]),
        Err(AnswerRefused::Denied {
            addr: ip("172.17.0.1"),
            class: Denied::HostOwn
        })
    );
    assert_eq!(AnswerRefused::Empty.as_str(), "empty");
    assert_eq!(
        crate::Rejection::from(AnswerRefused::Empty),
        crate::Rejection::Address
    );
}

#[test]
fn ids_are_stable_unique_and_kebab_case() {
    for (i, class) in Denied::ALL.iter().enumerate() {
        assert_eq!(
            *class as usize, i,
            "Denied::ALL is out of declaration order at {class:?}"
        );
    }
    assert_eq!(
        Denied::ALL.len(),
        Denied::HostOwn as usize + 1,
        "Denied::ALL misses a class"
    );
    let mut seen = std::collections::BTreeSet::new();
    for class in Denied::ALL {
        let id = class.as_str();
        assert!(seen.insert(id), "{id} is used twice");
        assert!(
            !id.is_empty()
                && !id.starts_with('-')
                && !id.ends_with('-')
                && !id.contains("--")
                && id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{id} is not kebab-case"
        );
        assert_eq!(class.to_string(), id);
    }
    assert_eq!(Denied::Relay6to4Anycast.as_str(), "relay-6to4-anycast");
    assert_eq!(Denied::HostOwn.as_str(), "host-own");
}

#[test]
fn every_class_but_host_own_is_reachable_without_host_addresses() {
    let mut reached = std::collections::BTreeSet::new();
    for rfc in RFCs::iter() {
        for net in rfc.ip_nets() {
            for addr in probes(net) {
                if let Class::Denied(class) = classify(addr, &[]) {
                    reached.insert(class);
                }
            }
        }
    }
    for &addr in METADATA {
        reached.extend(classify(addr, &[]).denied());
    }
    for text in [
        "::ffff:8.8.8.8",
        "::8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::",
        "4000::",
    ] {
        reached.extend(class_of(text).denied());
    }
    let missing: Vec<_> = Denied::ALL
        .iter()
        .filter(|class| **class != Denied::HostOwn && !reached.contains(class))
        .collect();
    assert!(missing.is_empty(), "never reached: {missing:?}");
}

#[test]
fn tables_have_no_host_bits_and_no_shadowed_row() {
    for (i, row) in V4.iter().enumerate() {
        assert!(row.len <= 32, "{row:?}");
        assert_eq!(
            row.net.to_bits() & !mask32(row.len),
            0,
            "host bits in {row:?}"
        );
        for earlier in &V4[..i] {
            assert!(
                !(earlier.len <= row.len && earlier.contains(row.net)),
                "{row:?} is shadowed by the earlier {earlier:?}"
            );
        }
        // The middle of each row is the row's own (nothing more specific sits there).
        let mid = Ipv4Addr::from_bits(row.net.to_bits() | (!mask32(row.len) >> 1));
        assert_eq!(
            classify(IpAddr::V4(mid), &[]),
            Class::Denied(row.class),
            "{mid}"
        );
    }
    for (i, row) in V6.iter().enumerate() {
        assert!(row.len <= 128, "{row:?}");
        assert_eq!(
            row.net.to_bits() & !mask128(row.len),
            0,
            "host bits in {row:?}"
        );
        for earlier in &V6[..i] {
            assert!(
                !(earlier.len <= row.len && earlier.contains(row.net)),
                "{row:?} is shadowed by the earlier {earlier:?}"
            );
        }
        if let Rule::Deny(class) = row.rule {
            let mid = Ipv6Addr::from_bits(row.net.to_bits() | (!mask128(row.len) >> 1));
            assert_eq!(
                classify(IpAddr::V6(mid), &[]),
                Class::Denied(class),
                "{mid}"
            );
        }
    }
}
