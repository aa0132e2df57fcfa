//! What the validator, cordon-init and the probes agree a vendor credential looks like, so each
//! can prove on its own that the agent holds none but its sentinel (`credential-absent`, issue 22).
//!
//! None of them knows the key: the host keeps it in the proxy's vault. What they know is the
//! invocation's sentinel (the policy's `sentinel`, public by design) and the shapes and variables
//! vendor credentials travel in. Anything credential-shaped that is not exactly the sentinel is a
//! credential the agent should not hold.

/// The variables a vendor CLI reads a credential from. Each is absent or holds exactly the
/// sentinel.
pub const VARIABLES: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
];

/// How Anthropic's credentials begin (`sk-ant-api03-`, `sk-ant-oat01-`, `sk-ant-admin01-`...).
pub const PREFIX: &[u8] = b"sk-ant-";

/// The longest token taken from a match (a credential is at most a few hundred bytes).
const MAX_TOKEN: usize = 4096;
/// The shortest token that counts as a credential: the vendor's are about a hundred characters,
/// and a prompt that merely names the shape (`sk-ant-...`, `sk-ant-api03-<key>`) holds none.
pub const MIN_TOKEN: usize = 40;

/// A byte of a credential token: URL-safe base64 and the separators Anthropic's shapes use.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Every credential-shaped token in `bytes` (at least [`MIN_TOKEN`] long) that is not exactly
/// `sentinel`: where each starts.
pub fn foreign_tokens(bytes: &[u8], sentinel: Option<&str>) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = find(&bytes[from..], PREFIX).map(|at| at + from) {
        let end = bytes[at..]
            .iter()
            .take(MAX_TOKEN)
            .position(|b| !token_byte(*b))
            .map_or_else(|| (at + MAX_TOKEN).min(bytes.len()), |n| at + n);
        let long_enough = end - at >= MIN_TOKEN;
        if long_enough && sentinel.is_none_or(|s| &bytes[at..end] != s.as_bytes()) {
            found.push(at);
        }
        from = end.max(at + PREFIX.len());
    }
    found
}

/// Whether an environment entry (`KEY=value`) holds a credential other than `sentinel`: a
/// credential variable whose value is not exactly the sentinel (or any value, with none), or
/// any value holding a credential-shaped token that is not the sentinel.
pub fn foreign_entry(entry: &str, sentinel: Option<&str>) -> bool {
    let (name, value) = entry.split_once('=').unwrap_or((entry, ""));
    let variable = VARIABLES.contains(&name) && sentinel != Some(value);
    variable || !foreign_tokens(value.as_bytes(), sentinel).is_empty()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENTINEL: &str = "sk-ant-api03-sentinel_0123456789abcdefghijklmnopqrstuvwxyzAA";
    const KEY: &str = "sk-ant-oat01-the-real-key-0123456789abcdefghijklmnopqrstuvwxyz";

    #[test]
    fn only_the_sentinel_is_not_foreign() {
        let s = Some(SENTINEL);
        assert!(foreign_tokens(SENTINEL.as_bytes(), s).is_empty());
        assert!(foreign_tokens(b"no credential here", s).is_empty());
        let text = format!("a={SENTINEL} b={KEY}\nc=\"{SENTINEL}\"");
        assert_eq!(
            foreign_tokens(text.as_bytes(), s),
            vec![text.find(KEY).unwrap()]
        );
        // The sentinel with more after it is another token.
        let longer = format!("{SENTINEL}x");
        assert_eq!(foreign_tokens(longer.as_bytes(), s), vec![0]);
        // Without a sentinel every long enough match is foreign; a mere mention of the shape
        // is not a credential.
        let two = format!("{KEY} {KEY}");
        assert_eq!(foreign_tokens(two.as_bytes(), None), vec![0, KEY.len() + 1]);
        assert!(foreign_tokens(b"keys look like sk-ant-api03-... or sk-ant-", None).is_empty());
        // A token at the end of the bytes, and one longer than the bound.
        let long = format!("sk-ant-{}", "a".repeat(5000));
        assert_eq!(foreign_tokens(long.as_bytes(), s), vec![0]);
    }

    #[test]
    fn a_credential_variable_holds_the_sentinel_or_nothing() {
        let s = Some(SENTINEL);
        assert!(!foreign_entry(&format!("ANTHROPIC_API_KEY={SENTINEL}"), s));
        assert!(foreign_entry("ANTHROPIC_API_KEY=anything", s));
        assert!(foreign_entry("OPENAI_API_KEY=", s));
        assert!(foreign_entry(
            &format!("CLAUDE_CODE_OAUTH_TOKEN={SENTINEL}"),
            None
        ));
        assert!(foreign_entry(&format!("HOME_NOTE={KEY}"), s));
        assert!(!foreign_entry(&format!("NOTE=see {SENTINEL}"), s));
        assert!(!foreign_entry("PATH=/bin", None));
    }
}
