//! Ownership labels and object names. Every object cordon creates carries all five labels, so
//! recovery can find what an owner left, cleanup never touches another owner's objects, and no two
//! live storage allocations can be given the same uid. Names (`cordon-<kind>-<allocation>`) are
//! built and parsed here only.

use std::collections::HashMap;

use crate::error::{Error, Result};

pub const OWNER: &str = "io.cordon.owner";
pub const ATTEMPT: &str = "io.cordon.attempt";
pub const ALLOCATION: &str = "io.cordon.allocation";
pub const KIND: &str = "io.cordon.kind";
/// The uid (and gid) of the storage allocation an object belongs to or runs on.
pub const UID: &str = "io.cordon.uid";

/// A runner's owner token: 1-64 of `[a-z0-9-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// Validate a token.
    pub fn new(token: &str) -> Result<Owner> {
        let ok = !token.is_empty()
            && token.len() <= 64
            && token
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(Owner(token.to_owned()))
        } else {
            Err(Error::Invalid(format!(
                "owner token {token:?} is not 1-64 characters of [a-z0-9-]"
            )))
        }
    }

    /// A fresh random token with a prefix (tests, the gate, the bench).
    pub fn random(prefix: &str) -> Owner {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Owner(format!("{prefix}-{}", &id[..12]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What an object is; exactly one per object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Agent,
    Keeper,
    Loader,
    Work,
    Metadata,
    Control,
    Input,
    Egress,
    Probe,
    /// A short-lived trusted tool (the metadata digest).
    Tool,
    /// An invocation's bridge network (its egress proxy's only).
    Network,
    /// An invocation's egress proxy.
    Proxy,
    /// The fake vendor endpoint on an invocation network (tests, the gate, the bench).
    Vendor,
    /// The scripted DNS server on an invocation network (tests, the gate).
    Resolver,
    /// An invocation's proxy's own inputs (the vendor credential, the terminator's leaf and key):
    /// mounted by the proxy and the loader only, never by the agent.
    Vault,
    /// An invocation's approved-commands directory: the relay's socket, mounted read-only by the
    /// agent.
    Commands,
    /// An invocation's relay: the commands socket bridged to the controller's dispatcher.
    Relay,
    /// One approved command's container.
    Command,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 18] = [
        Kind::Agent,
        Kind::Keeper,
        Kind::Loader,
        Kind::Work,
        Kind::Metadata,
        Kind::Control,
        Kind::Input,
        Kind::Egress,
        Kind::Probe,
        Kind::Tool,
        Kind::Network,
        Kind::Proxy,
        Kind::Vendor,
        Kind::Resolver,
        Kind::Vault,
        Kind::Commands,
        Kind::Relay,
        Kind::Command,
    ];

    /// The kind a label value names.
    pub fn parse(value: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == value)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Keeper => "keeper",
            Kind::Loader => "loader",
            Kind::Work => "work",
            Kind::Metadata => "metadata",
            Kind::Control => "control",
            Kind::Input => "input",
            Kind::Egress => "egress",
            Kind::Probe => "probe",
            Kind::Tool => "tool",
            Kind::Network => "network",
            Kind::Proxy => "proxy",
            Kind::Vendor => "vendor",
            Kind::Resolver => "resolver",
            Kind::Vault => "vault",
            Kind::Commands => "commands",
            Kind::Relay => "relay",
            Kind::Command => "command",
        }
    }
}

/// The labels of one allocation: owner, attempt, allocation id and uid; the kind is per object.
/// A storage allocation's uid comes from [`crate::uids::pick`]; an invocation runs with the uid
/// of the storage it mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub owner: Owner,
    pub attempt: String,
    pub id: uuid::Uuid,
    pub uid: crate::uids::Uid,
}

impl Allocation {
    /// A new allocation with a fresh UUID v4.
    pub fn new(owner: &Owner, attempt: &str, uid: crate::uids::Uid) -> Result<Allocation> {
        if attempt.is_empty()
            || attempt.len() > 128
            || !attempt
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(Error::Invalid(format!(
                "attempt id {attempt:?} is not a plain token"
            )));
        }
        Ok(Allocation {
            owner: owner.clone(),
            attempt: attempt.to_owned(),
            id: uuid::Uuid::new_v4(),
            uid,
        })
    }

    /// The label map for one object of this allocation.
    pub fn labels(&self, kind: Kind) -> HashMap<String, String> {
        HashMap::from([
            (OWNER.to_owned(), self.owner.as_str().to_owned()),
            (ATTEMPT.to_owned(), self.attempt.clone()),
            (ALLOCATION.to_owned(), self.id.to_string()),
            (KIND.to_owned(), kind.as_str().to_owned()),
            (UID.to_owned(), self.uid.get().to_string()),
        ])
    }

    /// A Docker object name: `cordon-<kind>-<allocation>`.
    pub fn name(&self, kind: Kind) -> String {
        object_name(kind, &self.id)
    }

    /// The keeper's name while its storage is being seeded: recovery hands back only storage
    /// whose keeper carries the final name, given once seeding and the baseline succeeded.
    pub fn seeding_keeper_name(&self) -> String {
        format!("{NAME_PREFIX}{SEEDING}-{}", self.id)
    }
}

/// Every cordon object name starts with this.
pub const NAME_PREFIX: &str = "cordon-";
/// The name part of a keeper whose storage is not complete yet.
const SEEDING: &str = "seeding";

/// `cordon-<kind>-<allocation>`.
pub fn object_name(kind: Kind, allocation: &uuid::Uuid) -> String {
    format!("{NAME_PREFIX}{}-{allocation}", kind.as_str())
}

/// A short-lived tool container's name: a fresh id of its own, so two tools of one storage never
/// collide.
pub fn tool_name() -> String {
    object_name(Kind::Tool, &uuid::Uuid::new_v4())
}

/// What a cordon object name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectName {
    /// The kind; `None` for a keeper still seeding.
    pub kind: Option<Kind>,
    pub allocation: uuid::Uuid,
}

impl ObjectName {
    /// Parse `cordon-<kind>-<uuid>` or `cordon-seeding-<uuid>` (the engine lists container names
    /// with a leading `/`, which is ignored).
    pub fn parse(name: &str) -> Option<ObjectName> {
        let rest = name.trim_start_matches('/').strip_prefix(NAME_PREFIX)?;
        let (kind, id) = rest.split_once('-')?;
        let kind = match kind {
            SEEDING => None,
            kind => Some(Kind::parse(kind)?),
        };
        let allocation = uuid::Uuid::parse_str(id).ok()?;
        (id == allocation.to_string()).then_some(ObjectName { kind, allocation })
    }

    /// A keeper with its final name: its storage was seeded completely.
    pub fn is_complete_keeper(name: &str) -> bool {
        ObjectName::parse(name).is_some_and(|n| n.kind == Some(Kind::Keeper))
    }
}

/// A live cordon object carrying a uid label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub what: String,
    pub kind: Option<Kind>,
    pub allocation: Option<String>,
}

/// The storage kinds: the objects that own a uid (invocations borrow their storage's).
pub fn owns_uid(kind: Kind) -> bool {
    matches!(kind, Kind::Work | Kind::Metadata | Kind::Keeper)
}

/// Storage objects of another allocation that hold `uid`.
pub fn others(holders: &[Holder], allocation: &uuid::Uuid) -> Vec<String> {
    let mine = allocation.to_string();
    holders
        .iter()
        .filter(|h| h.kind.is_none_or(owns_uid))
        .filter(|h| h.allocation.as_deref() != Some(mine.as_str()))
        .map(|h| h.what.clone())
        .collect()
}

/// Objects of any kind and of another allocation that hold `uid` (an invocation over a shared
/// snapshot: the uid is its own, not a storage's).
pub fn not_of(holders: &[Holder], allocation: &uuid::Uuid) -> Vec<String> {
    let mine = allocation.to_string();
    holders
        .iter()
        .filter(|h| h.allocation.as_deref() != Some(mine.as_str()))
        .map(|h| h.what.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tokens() {
        assert!(Owner::new("runner-1").is_ok());
        for bad in ["", "Runner", "a b", "a/b", &"x".repeat(65)] {
            assert!(Owner::new(bad).is_err(), "{bad}");
        }
        assert!(Owner::new(Owner::random("t").as_str()).is_ok());
    }

    #[test]
    fn labels_carry_all_five() {
        let uid = crate::uids::Uid::new(1_500_000).unwrap();
        let a = Allocation::new(&Owner::random("t"), "attempt-1", uid).unwrap();
        let l = a.labels(Kind::Work);
        assert_eq!(l.len(), 5);
        assert_eq!(l[KIND], "work");
        assert_eq!(l[ALLOCATION], a.id.to_string());
        assert_eq!(l[UID], "1500000");
        assert!(Allocation::new(&a.owner, "bad attempt", uid).is_err());
    }

    #[test]
    fn names_are_built_and_parsed_back() {
        let uid = crate::uids::Uid::new(1_500_000).unwrap();
        let a = Allocation::new(&Owner::random("t"), "attempt-1", uid).unwrap();
        for kind in Kind::ALL {
            let name = a.name(kind);
            let parsed = ObjectName::parse(&name).unwrap();
            assert_eq!(
                (parsed.kind, parsed.allocation),
                (Some(kind), a.id),
                "{name}"
            );
            assert_eq!(ObjectName::parse(&format!("/{name}")), Some(parsed));
            assert_eq!(ObjectName::is_complete_keeper(&name), kind == Kind::Keeper);
        }
        let seeding = ObjectName::parse(&a.seeding_keeper_name()).unwrap();
        assert_eq!((seeding.kind, seeding.allocation), (None, a.id));
        assert!(!ObjectName::is_complete_keeper(&a.seeding_keeper_name()));
        assert_eq!(
            ObjectName::parse(&tool_name()).unwrap().kind,
            Some(Kind::Tool)
        );
        let id = a.id.to_string();
        for bad in [
            format!("cordon-bogus-{id}"),
            format!("cordon-work-{}", id.to_uppercase()),
            format!("cordon-work-{}", a.id.simple()),
            format!("cordon-work-{id}-x"),
            format!("other-work-{id}"),
            "cordon-work-".to_owned(),
            "cordon-".to_owned(),
        ] {
            assert_eq!(ObjectName::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn other_allocations_are_found_by_kind_and_allocation() {
        let mine = uuid::Uuid::new_v4();
        let holders = vec![
            Holder {
                what: "volume a".into(),
                kind: Some(Kind::Work),
                allocation: Some(mine.to_string()),
            },
            Holder {
                what: "volume b".into(),
                kind: Some(Kind::Control),
                allocation: Some(uuid::Uuid::new_v4().to_string()),
            },
            Holder {
                what: "volume c".into(),
                kind: Some(Kind::Metadata),
                allocation: Some(uuid::Uuid::new_v4().to_string()),
            },
            Holder {
                what: "volume d".into(),
                kind: None,
                allocation: None,
            },
        ];
        assert_eq!(others(&holders, &mine), ["volume c", "volume d"]);
        // Over a shared snapshot the uid is the invocation's own: another's control volume counts.
        assert_eq!(
            not_of(&holders, &mine),
            ["volume b", "volume c", "volume d"]
        );
    }
}
