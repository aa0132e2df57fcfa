//! A host name as the proxy accepts it: an exact LDH name in one canonical form, never an IP
//! literal in any spelling. Anything that would need interpretation (case beyond one ASCII fold,
//! a second trailing dot, percent-encoding, userinfo, a byte outside letters, digits, hyphen and
//! dot) is refused rather than normalised, so the name matched is the name resolved.

use crate::Rejection;

/// The longest name (without the trailing dot).
pub const MAX_NAME: usize = 253;
/// The longest label.
pub const MAX_LABEL: usize = 63;

/// A host name in canonical form: lower case, no trailing dot, LDH labels of 1-63 bytes, at most
/// 253 bytes, not an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

impl Name {
    /// Parse the host part of an authority. One comparison-only ASCII case fold and one trailing
    /// dot are the only changes made; anything else that is not canonical is refused.
    pub fn parse(text: &str) -> Result<Name, Rejection> {
        let bytes = text.as_bytes();
        if bytes.is_empty() || bytes.len() > MAX_NAME + 1 {
            return Err(Rejection::Host);
        }
        if !bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
        {
            return Err(Rejection::Host);
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(Rejection::Host);
        }
        let labels: Vec<&str> = name.split('.').collect();
        let ldh = |l: &&str| {
            !l.is_empty() && l.len() <= MAX_LABEL && !l.starts_with('-') && !l.ends_with('-')
        };
        if !labels.iter().all(ldh) {
            return Err(Rejection::Host);
        }
        if looks_numeric(&labels) {
            return Err(Rejection::Host);
        }
        Ok(Name(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this name is a strict subdomain of `parent` (`a.b.example` of `example`).
    pub fn is_strict_subdomain_of(&self, parent: &Name) -> bool {
        self.0.len() > parent.0.len() + 1
            && self.0.ends_with(parent.as_str())
            && self.0.as_bytes()[self.0.len() - parent.0.len() - 1] == b'.'
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name a resolver or a URL parser could read as an IPv4 address in any of the forms inet_aton
/// and the WHATWG URL standard accept (dotted, short `127.1`, integer `2130706433`, octal
/// `0177.0.0.1`, hex `0x7f.1`): its last label is all digits, or `0x` followed by hex digits (or
/// nothing). No real top-level domain looks like that, so refusing it costs nothing.
fn looks_numeric(labels: &[&str]) -> bool {
    let Some(last) = labels.last() else {
        return true;
    };
    let decimal = last.bytes().all(|b| b.is_ascii_digit());
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    decimal || hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_are_accepted_once_folded() {
        for (given, canonical) in [
            ("api.anthropic.com", "api.anthropic.com"),
            ("API.Anthropic.COM", "api.anthropic.com"),
            ("api.anthropic.com.", "api.anthropic.com"),
            ("a-b.c0", "a-b.c0"),
            ("x", "x"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("1.example", "1.example"),
            ("0x.example", "0x.example"),
        ] {
            assert_eq!(
                Name::parse(given).map(|n| n.0),
                Ok(canonical.to_owned()),
                "{given}"
            );
        }
        let longest_label = "a".repeat(63);
        assert!(Name::parse(&format!("{longest_label}.com")).is_ok());
        let longest = format!("{}.com", vec!["a".repeat(62); 4].join("."));
        assert_eq!(longest.len(), 255);
        assert!(Name::parse(&longest[2..]).is_ok(), "253 bytes");
        assert!(
            Name::parse(&format!("{}.", &longest[2..])).is_ok(),
            "253 bytes and the dot"
        );
        assert_eq!(
            Name::parse(&longest[1..]),
            Err(Rejection::Host),
            "254 bytes"
        );
    }

    #[test]
    fn ip_literals_in_every_spelling_are_refused() {
        for literal in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "0x7f000001",
            "0x7F.1",
            "017700000001",
            "127.0.0.1.",
            "10.0.0.1",
            "169.254.169.254",
            "0",
            "0x",
            "1.2.3.4.5",
            "999.999.999.999",
            "[::1]",
            "::1",
            "[::ffff:127.0.0.1]",
            "fe80::1%25eth0",
            "[fe80::1%eth0]",
            "::ffff:7f00:1",
            "2001:db8::1",
        ] {
            assert_eq!(Name::parse(literal), Err(Rejection::Host), "{literal}");
        }
    }

    #[test]
    fn anything_outside_ldh_is_refused_not_normalised() {
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            ".a",
            "a.b..",
            "-a.com",
            "a-.com",
            "a.-b.com",
            "api.anthropic.com\0",
            "api.anthropic.com\0.evil",
            "api%2eanthropic.com",
            "api.anthropic.com%00",
            "user@api.anthropic.com",
            "api.anthropic.com:443",
            "api anthropic.com",
            "api.anthropic.com\r",
            "api.anthropic.com\t",
            "api_x.com",
            // Full-width and zero-width look-alikes, and non-ASCII of any kind.
            "ａｐｉ.anthropic.com",
            "api\u{200b}.anthropic.com",
            "api.anthropic\u{3002}com",
            "аpi.anthropic.com",
            "api.anthropic.com\u{feff}",
            "ß.example",
            "a/b.com",
            "a\\b.com",
            "*.example.com",
            "a*.example.com",
        ] {
            assert_eq!(Name::parse(bad), Err(Rejection::Host), "{bad:?}");
        }
        assert_eq!(
            Name::parse(&format!("{}.com", "a".repeat(64))),
            Err(Rejection::Host)
        );
    }

    #[test]
    fn strict_subdomains_only() {
        let parent = Name::parse("example.com").unwrap();
        let yes = ["a.example.com", "a.b.example.com"];
        let no = [
            "example.com",
            "aexample.com",
            "example.com.evil",
            "a.example.co",
        ];
        for y in yes {
            assert!(
                Name::parse(y).unwrap().is_strict_subdomain_of(&parent),
                "{y}"
            );
        }
        for n in no {
            assert!(
                !Name::parse(n).unwrap().is_strict_subdomain_of(&parent),
                "{n}"
            );
        }
    }
}
