//! A refusal: the protection a check found breached, what it expected and what it observed. The
//! host validator names the read-back field it compared; the init's preflight has no field (its
//! check is the id).

use serde::{Deserialize, Serialize};

use crate::catalogue::Id;

/// One breached protection, as every layer reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    pub id: Id,
    /// The field compared (the host validator's read-back field); none for the init's checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub expected: String,
    pub observed: String,
}

impl Refusal {
    /// A refusal without a field (the init's preflight).
    pub fn new(id: Id, expected: impl Into<String>, observed: impl Into<String>) -> Refusal {
        Refusal {
            id,
            field: None,
            expected: expected.into(),
            observed: observed.into(),
        }
    }

    /// A refusal of one compared field (the host validator).
    pub fn of_field(
        id: Id,
        field: impl Into<String>,
        expected: impl Into<String>,
        observed: impl Into<String>,
    ) -> Refusal {
        Refusal {
            field: Some(field.into()),
            ..Refusal::new(id, expected, observed)
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(
                f,
                "{}: {field} expected {} observed {}",
                self.id, self.expected, self.observed
            ),
            None => write!(
                f,
                "{}: expected {} observed {}",
                self.id, self.expected, self.observed
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_field_only_when_there_is_one() {
        let field = Refusal::of_field(
            Id::RootfsReadonly,
            "HostConfig.ReadonlyRootfs",
            "true",
            "false",
        );
        assert_eq!(
            field.to_string(),
            "rootfs-readonly: HostConfig.ReadonlyRootfs expected true observed false"
        );
        let bare = Refusal::new(Id::RootfsReadonly, "/ read-only", "/ writable");
        assert_eq!(
            bare.to_string(),
            "rootfs-readonly: expected / read-only observed / writable"
        );
    }

    #[test]
    fn json_carries_the_field_only_when_there_is_one() {
        let field = Refusal::of_field(Id::NoTty, "Config.Tty", "false", "Some(true)");
        assert_eq!(
            serde_json::to_string(&field).ok().as_deref(),
            Some(
                r#"{"id":"no-tty","field":"Config.Tty","expected":"false","observed":"Some(true)"}"#
            )
        );
        let bare = Refusal::new(Id::NoTty, "no terminal", "fd 0");
        let text = serde_json::to_string(&bare).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"id":"no-tty","expected":"no terminal","observed":"fd 0"}"#
        );
        assert_eq!(serde_json::from_str::<Refusal>(&text).ok(), Some(bare));
        assert!(serde_json::from_str::<Refusal>(
            r#"{"id":"no-tty","check":"x","expected":"","observed":""}"#
        )
        .is_err());
    }
}
