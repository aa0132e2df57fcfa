//! The names an invocation may reach: `name[:port]` (exactly that name) or `*.name[:port]`
//! (strict subdomains of it only, never the name itself), 443 when no port is given. A request
//! is matched here, on its canonical name and its port, before anything is looked up: an
//! unlisted name never reaches a resolver.

use crate::host::Name;
use crate::Rejection;

/// The port an entry allows when it names none.
pub const DEFAULT_PORT: u16 = 443;
/// The most entries an allowlist holds.
pub const MAX_ENTRIES: usize = 32;

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// `*.` was written: strict subdomains of `name` match, `name` itself does not.
    pub subdomains: bool,
    pub name: Name,
    pub port: u16,
}

/// Why an allowlist entry was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadEntry {
    pub entry: String,
    pub reason: &'static str,
}

impl std::fmt::Display for BadEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "allowlist entry {:?}: {}", self.entry, self.reason)
    }
}

impl std::error::Error for BadEntry {}

impl Entry {
    /// Parse `name`, `name:port`, `*.name` or `*.name:port`.
    pub fn parse(text: &str) -> Result<Entry, BadEntry> {
        let bad = |reason| BadEntry {
            entry: text.to_owned(),
            reason,
        };
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (
                host,
                parse_port(port).map_err(|_| bad("the port is not 1-65535 in plain decimal"))?,
            ),
            None => (text, DEFAULT_PORT),
        };
        let (subdomains, host) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        let name = Name::parse(host).map_err(|_| bad("not a canonical host name"))?;
        // A name that is already canonical is the only one written: an entry is configuration,
        // and a folded or dotted spelling there hides what is matched.
        if name.as_str() != host {
            return Err(bad(
                "not written in canonical form (lower case, no trailing dot)",
            ));
        }
        Ok(Entry {
            subdomains,
            name,
            port,
        })
    }

    /// Whether a request for `name:port` matches this entry.
    pub fn matches(&self, name: &Name, port: u16) -> bool {
        let named = if self.subdomains {
            name.is_strict_subdomain_of(&self.name)
        } else {
            *name == self.name
        };
        named && port == self.port
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = if self.subdomains { "*." } else { "" };
        write!(f, "{star}{}:{}", self.name, self.port)
    }
}

/// A name mapped to a fixed address (`--map name=ip:port`): tests and diagnosis only. It is the
/// one way to reach an address the classifier denies, so a profile records every mapping and the
/// validator and the attestation show it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mapping {
    pub name: Name,
    pub to: std::net::SocketAddr,
}

impl Mapping {
    /// Parse `name=ip:port` (`name=[v6]:port` for IPv6); the name in canonical form.
    pub fn parse(text: &str) -> Result<Mapping, BadEntry> {
        let bad = |reason| BadEntry {
            entry: text.to_owned(),
            reason,
        };
        let (name, to) = text
            .split_once('=')
            .ok_or_else(|| bad("not name=ip:port"))?;
        let parsed = Name::parse(name).map_err(|_| bad("not a canonical host name"))?;
        if parsed.as_str() != name {
            return Err(bad(
                "not written in canonical form (lower case, no trailing dot)",
            ));
        }
        let to: std::net::SocketAddr = to.parse().map_err(|_| bad("not ip:port"))?;
        if to.port() == 0 {
            return Err(bad("port 0"));
        }
        Ok(Mapping { name: parsed, to })
    }
}

impl std::fmt::Display for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.name, self.to)
    }
}

/// A port as the proxy accepts it: 1-65535 in plain decimal (no sign, no leading zero, no
/// whitespace), so `0443`, `+443`, `443 ` and `65536` are refused rather than read as something.
pub fn parse_port(text: &str) -> Result<u16, Rejection> {
    let plain = !text.is_empty()
        && text.len() <= 5
        && text.bytes().all(|b| b.is_ascii_digit())
        && !text.starts_with('0');
    if !plain {
        return Err(Rejection::Port);
    }
    match text.parse::<u32>() {
        Ok(port @ 1..=65_535) => Ok(port as u16),
        _ => Err(Rejection::Port),
    }
}

/// An invocation's allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist(Vec<Entry>);

impl Allowlist {
    /// At most [`MAX_ENTRIES`] entries, each as [`Entry::parse`] takes it.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Allowlist, BadEntry> {
        if entries.len() > MAX_ENTRIES {
            return Err(BadEntry {
                entry: format!("({} entries)", entries.len()),
                reason: "more entries than an allowlist holds (32)",
            });
        }
        let parsed = entries
            .iter()
            .map(|e| Entry::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowlist(parsed))
    }

    pub fn entries(&self) -> &[Entry] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entry a request for `name:port` matches: a name on no entry is [`Rejection::NotAllowed`]
    /// whatever its port; a listed name on another port is [`Rejection::Port`].
    pub fn check(&self, name: &Name, port: u16) -> Result<&Entry, Rejection> {
        if let Some(entry) = self.0.iter().find(|e| e.matches(name, port)) {
            return Ok(entry);
        }
        let named = self.0.iter().any(|e| e.matches(name, e.port));
        Err(if named {
            Rejection::Port
        } else {
            Rejection::NotAllowed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> Name {
        Name::parse(text).unwrap()
    }

    #[test]
    fn entries_parse_in_canonical_form_only() {
        let e = Entry::parse("api.anthropic.com").unwrap();
        assert_eq!(
            (e.subdomains, e.name.as_str(), e.port),
            (false, "api.anthropic.com", 443)
        );
        let e = Entry::parse("*.example.com:8443").unwrap();
        assert_eq!(
            (e.subdomains, e.name.as_str(), e.port),
            (true, "example.com", 8443)
        );
        for bad in [
            "",
            "API.anthropic.com",
            "api.anthropic.com.",
            "api.anthropic.com:0",
            "api.anthropic.com:0443",
            "api.anthropic.com:+443",
            "api.anthropic.com:65536",
            "api.anthropic.com:",
            "*",
            "*.",
            "*.*.example.com",
            "a.*.example.com",
            "127.0.0.1",
            "[::1]:443",
            "user@api.anthropic.com",
            "api.anthropic.com:443:443",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("h{i}.example")).collect();
        assert!(Allowlist::parse(&many).is_err());
        assert!(Allowlist::parse(&many[..32]).is_ok());
    }

    #[test]
    fn mappings_name_one_canonical_host_and_one_socket_address() {
        let m = Mapping::parse("api.anthropic.com=172.18.0.5:8443").unwrap();
        assert_eq!(
            (m.name.as_str(), m.to.to_string().as_str()),
            ("api.anthropic.com", "172.18.0.5:8443")
        );
        assert!(Mapping::parse("api.anthropic.com=[fd00::5]:443").is_ok());
        for bad in [
            "api.anthropic.com",
            "api.anthropic.com=",
            "=172.18.0.5:443",
            "API.anthropic.com=172.18.0.5:443",
            "api.anthropic.com=172.18.0.5",
            "api.anthropic.com=172.18.0.5:0",
            "api.anthropic.com=host:443",
            "127.0.0.1=172.18.0.5:443",
            "api.anthropic.com=172.18.0.5:443=x",
            "*.example.com=172.18.0.5:443",
        ] {
            assert!(Mapping::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ports_are_plain_decimal_in_range() {
        for ok in [("1", 1), ("443", 443), ("65535", 65_535)] {
            assert_eq!(parse_port(ok.0), Ok(ok.1));
        }
        for bad in [
            "", "0", "00", "0443", "+443", "-1", "443 ", " 443", "65536", "99999", "4_43", "0x1bb",
            "443\0", "١٤٣",
        ] {
            assert_eq!(parse_port(bad), Err(Rejection::Port), "{bad:?}");
        }
    }

    #[test]
    fn a_request_matches_its_entry_exactly() {
        let list = Allowlist::parse(&["api.anthropic.com", "*.example.com:8443"]).unwrap();
        assert!(list.check(&name("api.anthropic.com"), 443).is_ok());
        assert!(
            list.check(&name("API.ANTHROPIC.COM."), 443).is_ok(),
            "folded once, one dot"
        );
        assert!(list.check(&name("a.example.com"), 8443).is_ok());
        assert!(list.check(&name("a.b.example.com"), 8443).is_ok());
        assert_eq!(
            list.check(&name("api.anthropic.com"), 80),
            Err(Rejection::Port)
        );
        assert_eq!(
            list.check(&name("a.example.com"), 443),
            Err(Rejection::Port)
        );
        for unlisted in [
            "example.com",
            "anthropic.com",
            "x.api.anthropic.com",
            "api.anthropic.co",
            "api-anthropic.com",
            "evil.com",
        ] {
            assert_eq!(
                list.check(&name(unlisted), 443),
                Err(Rejection::NotAllowed),
                "{unlisted}"
            );
            assert_eq!(
                list.check(&name(unlisted), 8443),
                Err(Rejection::NotAllowed),
                "{unlisted}"
            );
        }
        assert_eq!(
            Allowlist::default().check(&name("api.anthropic.com"), 443),
            Err(Rejection::NotAllowed)
        );
    }
}
