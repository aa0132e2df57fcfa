//! The CNAME chain rule: which address records of one answer belong to the asked name. The proxy
//! never follows a CNAME with a query of its own ([`crate::resolver`] asks the admitted name alone),
//! so an answer counts only through a chain it contains itself.
//!
//! From the asked name, in the answer section only, class IN: a name holding exactly one CNAME
//! (and no address record of the asked type) moves to its target; a name holding address records
//! of the asked type ends the chain with exactly those. Anything else is no answer for that type:
//! a target with no record in the answer (incomplete), a target already on the chain (a loop, the
//! name's own included), two CNAMEs for one owner (a branch), a CNAME beside address records of
//! its owner, more than [`MAX_CHAIN`] CNAMEs. The asked name holding nothing at all is an empty
//! answer (no data), not a broken one. Records owned by names off the chain are never used,
//! whatever they hold; records of the other address type, other types and other classes are
//! ignored. Owner names compare case-insensitively, as DNS names do.

use std::net::IpAddr;

use hickory_net::proto::rr::{DNSClass, Name, RData, Record, RecordType};

/// The most CNAMEs a chain may hold (the caching client's bound).
pub const MAX_CHAIN: usize = 8;

/// What one answer says the asked name's addresses of one type are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chain {
    /// The address records of the asked type that end the chain, in answer order (at least one).
    Addresses(Vec<IpAddr>),
    /// The asked name holds no CNAME and no address of the asked type (no data for that type).
    Empty,
    /// No answer for that type.
    Broken(Broken),
}

/// Why an answer's chain gives no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// The chain ends at this target, which holds no record in the answer.
    Incomplete(Name),
    /// This target is already on the chain.
    Loop(Name),
    /// This owner holds more than one CNAME.
    Branch(Name),
    /// This owner holds a CNAME beside address records.
    Beside(Name),
    /// More than [`MAX_CHAIN`] CNAMEs.
    TooLong,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Incomplete(target) => {
                write!(
                    f,
                    "the chain ends at {target}, which the answer holds nothing for"
                )
            }
            Broken::Loop(target) => write!(f, "the chain loops at {target}"),
            Broken::Branch(owner) => write!(f, "{owner} holds more than one CNAME"),
            Broken::Beside(owner) => write!(f, "{owner} holds a CNAME beside addresses"),
            Broken::TooLong => write!(f, "the chain holds more than {MAX_CHAIN} CNAMEs"),
        }
    }
}

/// The addresses of type `kind` (A or AAAA) that `answers` (an answer section) gives `asked`.
pub fn follow(asked: &Name, kind: RecordType, answers: &[Record]) -> Chain {
    let mut name = asked.clone();
    let mut seen = vec![asked.clone()];
    loop {
        let mut targets: Vec<&Name> = Vec::new();
        let mut addresses: Vec<IpAddr> = Vec::new();
        for record in answers
            .iter()
            .filter(|r| r.dns_class == DNSClass::IN && r.name.eq_ignore_root(&name))
        {
            match (&record.data, kind) {
                (RData::CNAME(target), _) => targets.push(&target.0),
                (RData::A(a), RecordType::A) => addresses.push(IpAddr::V4(a.0)),
                (RData::AAAA(aaaa), RecordType::AAAA) => addresses.push(IpAddr::V6(aaaa.0)),
                _ => {}
            }
        }
        let depth = seen.len() - 1;
        match (targets.as_slice(), addresses.is_empty()) {
            ([], false) => return Chain::Addresses(addresses),
            ([], true) if depth == 0 => return Chain::Empty,
            ([], true) => return Chain::Broken(Broken::Incomplete(name)),
            ([_, ..], false) => return Chain::Broken(Broken::Beside(name)),
            ([_, _, ..], true) => return Chain::Broken(Broken::Branch(name)),
            ([target], true) => {
                if depth == MAX_CHAIN {
                    return Chain::Broken(Broken::TooLong);
                }
                if seen.iter().any(|s| s.eq_ignore_root(target)) {
                    return Chain::Broken(Broken::Loop((*target).clone()));
                }
                name = (*target).clone();
                seen.push(name.clone());
            }
        }
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
