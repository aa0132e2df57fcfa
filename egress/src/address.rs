//! The deny-by-default classifier of every address a name resolves to: the proxy dials a name only
//! if every address of its answer is [`Class::Global`], that is in no special-purpose block of
//! IANA's IPv4 and IPv6 registries (whatever their "globally reachable" column says), not a cloud
//! metadata service and not one of the host's own addresses.
//!
//! - [`classify`] judges one address, [`check_answer`] a whole answer (refused if it is empty or if
//!   any one address is denied: one denied address in a mixed answer refuses the name).
//! - An IPv4 address embedded in an IPv6 one is decoded first and classified as itself: IPv4-mapped
//!   (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64's well-known prefix
//!   (`64:ff9b::a.b.c.d`), SIIT's IPv4-translated form (`::ffff:0:a.b.c.d`) and 6to4
//!   (`2002:aabb:ccdd::`). A denied inner address gives its own class (`::ffff:127.0.0.1` is
//!   [`Denied::Loopback`]); a global one still leaves the form denied, as the form's class
//!   ([`Denied::Ipv4Mapped`], [`Denied::Ipv4Compatible`], [`Denied::Ipv4Translated`],
//!   [`Denied::SixToFour`]): the proxy dials an IPv4 address as IPv4, never through a mapping, a
//!   translator or a relay.
//! - Teredo (`2001::/32`) and local-use NAT64 (`64:ff9b:1::/48`) are refused outright.
//! - IPv6 outside `2000::/3` (the only global unicast space IANA has allocated) is
//!   [`Denied::Reserved`] unless a more specific row names it.
//!
//! The order of the checks: metadata addresses ([`METADATA`]), then the host's own addresses, then
//! the family's table ([`V4`], [`V6`]), whose first matching row wins (so the most specific rows
//! come first where rows overlap). No crate is used: `std`'s `is_global` is unstable and others
//! call `::ffff:127.0.0.1` global.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an address is: the one class that may be dialed, or why it may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// In no special-purpose block, not metadata, not the host's: it may be dialed.
    Global,
    /// It may not be dialed, for this reason.
    Denied(Denied),
}

impl Class {
    /// Whether the address may be dialed.
    pub const fn is_global(self) -> bool {
        matches!(self, Class::Global)
    }

    /// The reason it may not be, if it may not.
    pub const fn denied(self) -> Option<Denied> {
        match self {
            Class::Global => None,
            Class::Denied(denied) => Some(denied),
        }
    }
}

/// Why an address may not be dialed. Each has a stable kebab-case id ([`Denied::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Denied {
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `0.0.0.0/8` ("this network", RFC 791/1122) but `0.0.0.0` itself.
    ThisNetwork,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `100.64.0.0/10`, shared address space (carrier-grade NAT, RFC 6598).
    SharedCgnat,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `192.0.0.0/24` and `2001::/23` but their rows with a class of their own (DS-Lite, PCP and
    /// TURN anycast, NAT64 discovery, DRIP ...).
    IetfProtocolAssignments,
    /// The dummy addresses `192.0.0.8/32` (RFC 7600) and `100:0:0:1::/64` (RFC 9780).
    Dummy,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// AS112 DNS sinks: `192.31.196/24`, `192.175.48/24`, `2001:4:112::/48`, `2620:4f:8000::/48`.
    As112,
    /// Automatic Multicast Tunneling: `192.52.193/24`, `2001:3::/32`.
    Amt,
    /// `192.88.99.0/24`, the deprecated 6to4 relay anycast (and the 6a44 relay in it).
    Relay6to4Anycast,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `240.0.0.0/4`, and IPv6 outside `2000::/3` that no other row names.
    Reserved,
    /// `::ffff:0:0/96` holding a global IPv4 address.
    Ipv4Mapped,
    /// `::/96` (deprecated IPv4-compatible) holding a global IPv4 address.
    Ipv4Compatible,
    /// NAT64 `64:ff9b::/96` or SIIT `::ffff:0:0:0/96` holding a global IPv4 address: the proxy
    /// never dials through a translator.
    Ipv4Translated,
    /// `64:ff9b:1::/48`, local-use NAT64 (RFC 8215).
    Nat64Local,
    /// `2002::/16` holding a global IPv4 address (6to4, RFC 3056).
    SixToFour,
    /// `2001::/32`, Teredo (RFC 4380).
    Teredo,
    /// `2001:10::/28` (ORCHID, deprecated) and `2001:20::/28` (ORCHIDv2).
    Orchid,
    /// `100::/64`, discard-only (RFC 6666).
    Discard,
    /// `5f00::/16`, SRv6 segment identifiers (RFC 9602).
    Srv6Sid,
    /// `fc00::/7`, unique local (RFC 4193).
    UniqueLocal,
    /// `fec0::/10`, deprecated site-local (RFC 3879).
    SiteLocal,
    /// A cloud metadata service ([`METADATA`]), wherever its block is.
    Metadata,
    /// One of the host's own addresses (as passed to [`classify`]).
    HostOwn,
}

impl Denied {
    /// Every class, in declaration order.
    pub const ALL: &'static [Denied] = &[
        Denied::Unspecified,
        Denied::ThisNetwork,
        Denied::Loopback,
        Denied::Private,
        Denied::SharedCgnat,
        Denied::LinkLocal,
        Denied::IetfProtocolAssignments,
        Denied::Dummy,
        Denied::Documentation,
        Denied::As112,
        Denied::Amt,
        Denied::Relay6to4Anycast,
        Denied::Benchmarking,
        Denied::Multicast,
        Denied::Broadcast,
        Denied::Reserved,
        Denied::Ipv4Mapped,
        Denied::Ipv4Compatible,
        Denied::Ipv4Translated,
        Denied::Nat64Local,
        Denied::SixToFour,
        Denied::Teredo,
        Denied::Orchid,
        Denied::Discard,
        Denied::Srv6Sid,
        Denied::UniqueLocal,
        Denied::SiteLocal,
        Denied::Metadata,
        Denied::HostOwn,
    ];

    /// The stable id (what the proxy logs; never sent to the client).
    pub const fn as_str(self) -> &'static str {
        match self {
            Denied::Unspecified => "unspecified",
            Denied::ThisNetwork => "this-network",
            Denied::Loopback => "loopback",
            Denied::Private => "private",
            Denied::SharedCgnat => "shared-cgnat",
            Denied::LinkLocal => "link-local",
            Denied::IetfProtocolAssignments => "ietf-protocol-assignments",
            Denied::Dummy => "dummy",
            Denied::Documentation => "documentation",
            Denied::As112 => "as112",
            Denied::Amt => "amt",
            Denied::Relay6to4Anycast => "relay-6to4-anycast",
            Denied::Benchmarking => "benchmarking",
            Denied::Multicast => "multicast",
            Denied::Broadcast => "broadcast",
            Denied::Reserved => "reserved",
            Denied::Ipv4Mapped => "ipv4-mapped",
            Denied::Ipv4Compatible => "ipv4-compatible",
            Denied::Ipv4Translated => "ipv4-translated",
            Denied::Nat64Local => "nat64-local",
            Denied::SixToFour => "6to4",
            Denied::Teredo => "teredo",
            Denied::Orchid => "orchid",
            Denied::Discard => "discard",
            Denied::Srv6Sid => "srv6-sid",
            Denied::UniqueLocal => "unique-local",
            Denied::SiteLocal => "site-local",
            Denied::Metadata => "metadata",
            Denied::HostOwn => "host-own",
        }
    }
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a whole answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerRefused {
    /// The name resolved to no address at all.
    Empty,
    /// This address of the answer (the first denied one, in answer order) is denied.
    Denied {
        /// The address as resolved (before any decoding).
        addr: IpAddr,
        /// Its class.
        class: Denied,
    },
}

impl AnswerRefused {
    /// The stable id: `empty`, or the denied address's class.
    pub const fn as_str(self) -> &'static str {
        match self {
            AnswerRefused::Empty => "empty",
            AnswerRefused::Denied { class, .. } => class.as_str(),
        }
    }
}

impl std::fmt::Display for AnswerRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerRefused::Empty => f.write_str("the name resolved to no address"),
            AnswerRefused::Denied { addr, class } => write!(f, "{addr} is denied ({class})"),
        }
    }
}

impl std::error::Error for AnswerRefused {}

/// Every refused answer is [`crate::Rejection::Address`] to the client (no detail about addresses).
impl From<AnswerRefused> for crate::Rejection {
    fn from(_: AnswerRefused) -> Self {
        crate::Rejection::Address
    }
}

/// Classify one address. `host_own` holds the host's own addresses (every address of the engine's
/// bridges and interfaces); an IPv4-mapped one among them counts as its IPv4 address.
pub fn classify(addr: IpAddr, host_own: &[IpAddr]) -> Class {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4, host_own),
        IpAddr::V6(v6) => classify_v6(v6, host_own),
    }
}

/// Judge a whole answer: `Ok` only if it holds at least one address and every one is
/// [`Class::Global`]; otherwise the first denied address, in answer order, and its class.
pub fn check_answer(addrs: &[IpAddr], host_own: &[IpAddr]) -> Result<(), AnswerRefused> {
    if addrs.is_empty() {
        return Err(AnswerRefused::Empty);
    }
    for &addr in addrs {
        if let Class::Denied(class) = classify(addr, host_own) {
            return Err(AnswerRefused::Denied { addr, class });
        }
    }
    Ok(())
}

/// Cloud metadata services, denied as [`Denied::Metadata`] before any block is looked at, so the
/// reason is specific even where a block would deny them anyway. The one public address here is
/// Azure's platform channel.
pub const METADATA: &[IpAddr] = &[
    // AWS, GCP, Azure, OCI, OpenStack, DigitalOcean, ...: the IMDS everyone copies.
    v4(169, 254, 169, 254),
    // AWS ECS task metadata and credentials; EKS Pod Identity Agent.
    v4(169, 254, 170, 2),
    v4(169, 254, 170, 23),
    // Tencent Cloud (metadata.tencentyun.com).
    v4(169, 254, 0, 23),
    // Scaleway.
    v4(169, 254, 42, 42),
    // Alibaba Cloud (in 100.64/10).
    v4(100, 100, 100, 200),
    // Oracle Cloud's legacy metadata address (in 192.0.0/24).
    v4(192, 0, 0, 192),
    // Azure WireServer / host platform channel: a public address, reachable from every Azure VM.
    v4(168, 63, 129, 16),
    // AWS IMDS over IPv6; EKS Pod Identity Agent over IPv6 (in fc00::/7).
    v6([0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254]),
    v6([0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0023]),
    // GCP's metadata server over IPv6, as commonly cited (in fc00::/7 anyway).
    v6([0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254]),
    // Scaleway over IPv6 (in fc00::/7).
    v6([0xfd00, 0x0042, 0, 0, 0, 0, 0, 0x0042]),
];

/// One row of the IPv4 table: the network (host bits zero), its prefix length, its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4Row {
    /// The network's first address.
    pub net: Ipv4Addr,
    /// The prefix length, 0-32.
    pub len: u8,
    /// Its class.
    pub class: Denied,
}

impl V4Row {
    /// Whether `addr` is in this row's network.
    pub const fn contains(&self, addr: Ipv4Addr) -> bool {
        (addr.to_bits() ^ self.net.to_bits()) & mask32(self.len) == 0
    }
}

/// What a row of the IPv6 table says about an address in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Denied as this class.
    Deny(Denied),
    /// An IPv4 address is embedded: classify it, and deny the form anyway.
    Embeds(Embedding),
}

/// The ways an IPv6 address carries an IPv4 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:a.b.c.d` (RFC 4291): the last 32 bits.
    Mapped,
    /// `::a.b.c.d` (RFC 4291, deprecated): the last 32 bits.
    Compatible,
    /// `64:ff9b::a.b.c.d` (RFC 6052 well-known prefix): the last 32 bits.
    Nat64,
    /// `::ffff:0:a.b.c.d` (RFC 2765 SIIT, obsolete): the last 32 bits.
    Siit,
    /// `2002:aabb:ccdd::/48` (RFC 3056): bits 16-48.
    SixToFour,
}

impl Embedding {
    /// The embedded IPv4 address.
    pub const fn inner(self, addr: Ipv6Addr) -> Ipv4Addr {
        let o = addr.octets();
        match self {
            Embedding::SixToFour => Ipv4Addr::new(o[2], o[3], o[4], o[5]),
            Embedding::Mapped | Embedding::Compatible | Embedding::Nat64 | Embedding::Siit => {
                Ipv4Addr::new(o[12], o[13], o[14], o[15])
            }
        }
    }

    /// The class of the form when the inner address is global.
    pub const fn class(self) -> Denied {
        match self {
            Embedding::Mapped => Denied::Ipv4Mapped,
            Embedding::Compatible => Denied::Ipv4Compatible,
            Embedding::Nat64 | Embedding::Siit => Denied::Ipv4Translated,
            Embedding::SixToFour => Denied::SixToFour,
        }
    }
}

/// One row of the IPv6 table: the network (host bits zero), its prefix length, its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V6Row {
    /// The network's first address.
    pub net: Ipv6Addr,
    /// The prefix length, 0-128.
    pub len: u8,
    /// What an address in it is.
    pub rule: Rule,
}

impl V6Row {
    /// Whether `addr` is in this row's network.
    pub const fn contains(&self, addr: Ipv6Addr) -> bool {
        (addr.to_bits() ^ self.net.to_bits()) & mask128(self.len) == 0
    }
}

/// IANA's IPv4 special-purpose registry, every row, and the blocks it leaves to others (multicast,
/// broadcast). First match wins: more specific rows come before the rows that contain them.
#[rustfmt::skip]
pub const V4: &[V4Row] = &[
    r4([0, 0, 0, 0],         32, Denied::Unspecified),
    r4([0, 0, 0, 0],          8, Denied::ThisNetwork),
    r4([10, 0, 0, 0],         8, Denied::Private),
    r4([100, 64, 0, 0],      10, Denied::SharedCgnat),
    r4([127, 0, 0, 0],        8, Denied::Loopback),
    r4([169, 254, 0, 0],     16, Denied::LinkLocal),
    r4([172, 16, 0, 0],      12, Denied::Private),
    r4([192, 0, 0, 8],       32, Denied::Dummy),
    // All of it: DS-Lite /29, PCP (.9) and TURN (.10) anycast, NAT64 discovery (.170, .171).
    r4([192, 0, 0, 0],       24, Denied::IetfProtocolAssignments),
    r4([192, 0, 2, 0],       24, Denied::Documentation),
    r4([192, 31, 196, 0],    24, Denied::As112),
    r4([192, 52, 193, 0],    24, Denied::Amt),
    // With the 6a44 relay anycast (.2).
    r4([192, 88, 99, 0],     24, Denied::Relay6to4Anycast),
    r4([192, 168, 0, 0],     16, Denied::Private),
    r4([192, 175, 48, 0],    24, Denied::As112),
    r4([198, 18, 0, 0],      15, Denied::Benchmarking),
    r4([198, 51, 100, 0],    24, Denied::Documentation),
    r4([203, 0, 113, 0],     24, Denied::Documentation),
    r4([224, 0, 0, 0],        4, Denied::Multicast),
    r4([255, 255, 255, 255], 32, Denied::Broadcast),
    r4([240, 0, 0, 0],        4, Denied::Reserved),
];

/// IANA's IPv6 special-purpose registry, every row, the blocks it leaves to others (link-local,
/// site-local, multicast, IPv4-compatible) and everything outside `2000::/3`. First match wins:
/// more specific rows come before the rows that contain them.
#[rustfmt::skip]
pub const V6: &[V6Row] = &[
    r6([0, 0, 0, 0, 0, 0, 0, 0],              128, Rule::Deny(Denied::Unspecified)),
    r6([0, 0, 0, 0, 0, 0, 0, 1],              128, Rule::Deny(Denied::Loopback)),
    r6([0, 0, 0, 0, 0, 0xffff, 0, 0],          96, Rule::Embeds(Embedding::Mapped)),
    r6([0, 0, 0, 0, 0, 0, 0, 0],               96, Rule::Embeds(Embedding::Compatible)),
    r6([0, 0, 0, 0, 0xffff, 0, 0, 0],          96, Rule::Embeds(Embedding::Siit)),
    r6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0],       96, Rule::Embeds(Embedding::Nat64)),
    r6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0],       48, Rule::Deny(Denied::Nat64Local)),
    r6([0x100, 0, 0, 0, 0, 0, 0, 0],           64, Rule::Deny(Denied::Discard)),
    r6([0x100, 0, 0, 1, 0, 0, 0, 0],           64, Rule::Deny(Denied::Dummy)),
    r6([0x2001, 0, 0, 0, 0, 0, 0, 0],          32, Rule::Deny(Denied::Teredo)),
    r6([0x2001, 2, 0, 0, 0, 0, 0, 0],          48, Rule::Deny(Denied::Benchmarking)),
    r6([0x2001, 3, 0, 0, 0, 0, 0, 0],          32, Rule::Deny(Denied::Amt)),
    r6([0x2001, 4, 0x112, 0, 0, 0, 0, 0],      48, Rule::Deny(Denied::As112)),
    r6([0x2001, 0x10, 0, 0, 0, 0, 0, 0],       28, Rule::Deny(Denied::Orchid)),
    r6([0x2001, 0x20, 0, 0, 0, 0, 0, 0],       28, Rule::Deny(Denied::Orchid)),
    // All of it: PCP, TURN and DNS-SD SRP anycast (2001:1::1-3), DRIP (2001:30::/28), the rest.
    r6([0x2001, 0, 0, 0, 0, 0, 0, 0],          23, Rule::Deny(Denied::IetfProtocolAssignments)),
    r6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],      32, Rule::Deny(Denied::Documentation)),
    r6([0x2002, 0, 0, 0, 0, 0, 0, 0],          16, Rule::Embeds(Embedding::SixToFour)),
    r6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0],  48, Rule::Deny(Denied::As112)),
    r6([0x3fff, 0, 0, 0, 0, 0, 0, 0],          20, Rule::Deny(Denied::Documentation)),
    r6([0x5f00, 0, 0, 0, 0, 0, 0, 0],          16, Rule::Deny(Denied::Srv6Sid)),
    r6([0xfc00, 0, 0, 0, 0, 0, 0, 0],           7, Rule::Deny(Denied::UniqueLocal)),
    r6([0xfe80, 0, 0, 0, 0, 0, 0, 0],          10, Rule::Deny(Denied::LinkLocal)),
    r6([0xfec0, 0, 0, 0, 0, 0, 0, 0],          10, Rule::Deny(Denied::SiteLocal)),
    r6([0xff00, 0, 0, 0, 0, 0, 0, 0],           8, Rule::Deny(Denied::Multicast)),
    // Not global unicast: everything outside 2000::/3.
    r6([0, 0, 0, 0, 0, 0, 0, 0],                3, Rule::Deny(Denied::Reserved)),
    r6([0x4000, 0, 0, 0, 0, 0, 0, 0],           2, Rule::Deny(Denied::Reserved)),
    r6([0x8000, 0, 0, 0, 0, 0, 0, 0],           1, Rule::Deny(Denied::Reserved)),
];

fn classify_v4(addr: Ipv4Addr, host_own: &[IpAddr]) -> Class {
    let ip = IpAddr::V4(addr);
    if METADATA.contains(&ip) {
        return Class::Denied(Denied::Metadata);
    }
    if is_host_own(ip, host_own) {
        return Class::Denied(Denied::HostOwn);
    }
    match V4.iter().find(|row| row.contains(addr)) {
        Some(row) => Class::Denied(row.class),
        None => Class::Global,
    }
}

fn classify_v6(addr: Ipv6Addr, host_own: &[IpAddr]) -> Class {
    let ip = IpAddr::V6(addr);
    if METADATA.contains(&ip) {
        return Class::Denied(Denied::Metadata);
    }
    if is_host_own(ip, host_own) {
        return Class::Denied(Denied::HostOwn);
    }
    match V6.iter().find(|row| row.contains(addr)).map(|row| row.rule) {
        None => Class::Global,
        Some(Rule::Deny(class)) => Class::Denied(class),
        Some(Rule::Embeds(embedding)) => match classify_v4(embedding.inner(addr), host_own) {
            Class::Global => Class::Denied(embedding.class()),
            denied => denied,
        },
    }
}

/// Whether `addr` is one of `host_own`, an IPv4-mapped entry counting as its IPv4 address (the
/// address itself arrives here already decoded).
fn is_host_own(addr: IpAddr, host_own: &[IpAddr]) -> bool {
    host_own.iter().any(|&own| own.to_canonical() == addr)
}

const fn mask32(len: u8) -> u32 {
    match len {
        0 => 0,
        len => u32::MAX << (32 - len as u32),
    }
}

const fn mask128(len: u8) -> u128 {
    match len {
        0 => 0,
        len => u128::MAX << (128 - len as u32),
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

const fn v6(s: [u16; 8]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
    ))
}

const fn r4(o: [u8; 4], len: u8, class: Denied) -> V4Row {
    V4Row {
        net: Ipv4Addr::new(o[0], o[1], o[2], o[3]),
        len,
        class,
    }
}

const fn r6(s: [u16; 8], len: u8, rule: Rule) -> V6Row {
    V6Row {
        net: Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
        rule,
    }
}

#[cfg(test)]
#[path = "address_tests.rs"]
mod tests;
