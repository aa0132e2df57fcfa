//! The rules for one request to the terminated vendor host (issue 22), as pure functions over the
//! parts an HTTP implementation parsed: which method, path and query reach the vendor
//! ([`VENDOR_ROUTES`]); that the credential is exactly the invocation's sentinel, exactly once, in
//! exactly the header its kind uses, and nowhere else in the head; and the invocation's budgets.
//! The terminator swaps the sentinel for the key only in the header an [`Admitted`] names, and only
//! [`admit`] makes one.
//!
//! Refusals carry stable ids: `vendor-path` (403: a method, path, query or `Host` the vendor host
//! does not serve to the agent), `vendor-credential` (401: no credential, another one, a second
//! one, or the sentinel anywhere else), `vendor-malformed` (400: a head over its bounds or not
//! text), `vendor-budget` (429: a budget ran out; which one is named).

/// Which header the credential travels in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialHeader {
    /// `x-api-key: <sentinel>` (an API key).
    ApiKey,
    /// `authorization: Bearer <sentinel>` (an OAuth token).
    Bearer,
}

impl CredentialHeader {
    /// The header's name, lowercase.
    pub const fn name(self) -> &'static str {
        match self {
            CredentialHeader::ApiKey => "x-api-key",
            CredentialHeader::Bearer => "authorization",
        }
    }

    /// The header's exact value for `sentinel`.
    fn value(self, sentinel: &str) -> String {
        match self {
            CredentialHeader::ApiKey => sentinel.to_owned(),
            CredentialHeader::Bearer => format!("Bearer {sentinel}"),
        }
    }
}

/// The marker the controller writes last into the proxy's vault, once every other file is whole;
/// the proxy waits for it before it reads the vault (`vault::wait_until_ready`).
pub const VAULT_READY: &str = "ready";

/// Headers that carry a credential of some kind: only the expected one may appear, once.
pub const CREDENTIAL_HEADERS: [&str; 5] = [
    "x-api-key",
    "authorization",
    "proxy-authorization",
    "cookie",
    "anthropic-api-key",
];

/// One method and path the vendor host serves the agent, and whether a query may follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    /// The query strings allowed, exactly (none: no query at all).
    pub queries: &'static [&'static str],
}

/// What the Claude Code CLI asks of its API host with its non-essential traffic off, measured
/// (`suite::claude_cli::the_cli_reaches_only_its_api_and_its_switches_keep_telemetry_off`): its
/// Messages (with `?beta=true`), token counts, its settings and its policy limits.
pub const VENDOR_ROUTES: [Route; 4] = [
    Route {
        method: "POST",
        path: "/v1/messages",
        queries: &["beta=true"],
    },
    Route {
        method: "POST",
        path: "/v1/messages/count_tokens",
        queries: &["beta=true"],
    },
    Route {
        method: "GET",
        path: "/api/claude_code/settings",
        queries: &[],
    },
    Route {
        method: "GET",
        path: "/api/claude_code/policy_limits",
        queries: &[],
    },
];

/// Bounds on a request head (the HTTP implementation holds its own; these are cordon's).
pub const MAX_HEADERS: usize = 64;
/// The longest request target (path and query).
pub const MAX_TARGET: usize = 512;
/// The most bytes of header names and values together.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Why a request to the vendor host was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendorRejection {
    /// A method, path, query or `Host` the vendor host does not serve the agent.
    Path,
    /// No credential, another kind, a second one, a value other than the sentinel, or the
    /// sentinel anywhere but its header.
    Credential,
    /// A head over its bounds, or a header value that is not visible ASCII and spaces.
    Malformed,
    /// A budget ran out.
    Budget(Spend),
}

impl VendorRejection {
    /// The stable id.
    pub const fn id(self) -> &'static str {
        match self {
            VendorRejection::Path => "vendor-path",
            VendorRejection::Credential => "vendor-credential",
            VendorRejection::Malformed => "vendor-malformed",
            VendorRejection::Budget(_) => "vendor-budget",
        }
    }

    /// The status the agent is answered with.
    pub const fn status(self) -> u16 {
        match self {
            VendorRejection::Path => 403,
            VendorRejection::Credential => 401,
            VendorRejection::Malformed => 400,
            VendorRejection::Budget(_) => 429,
        }
    }
}

/// What the terminator knows of the host it terminates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated<'a> {
    /// The vendor host, lowercase (the `Host` a request must name, with `:443` or without).
    pub host: &'a str,
    pub header: CredentialHeader,
    /// This invocation's sentinel: what the agent holds in place of the key.
    pub sentinel: &'a str,
    pub routes: &'a [Route],
    /// The rules a gate case left out (none for every real invocation).
    pub skip: Skipped,
}

/// The vendor rules a gate case may leave out ([`crate::decide::Rule`]'s vendor ones), each
/// opening only itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Any route and `Host` pass ([`crate::decide::Rule::VendorPath`]).
    pub path: bool,
    /// The credentials are not checked ([`crate::decide::Rule::VendorCredential`]).
    pub credential: bool,
    /// Nothing is counted or refused by a budget ([`crate::decide::Rule::VendorBudget`]).
    pub budget: bool,
}

impl Skipped {
    /// The vendor rules `rules` leaves out.
    pub fn of(rules: &crate::decide::Rules) -> Skipped {
        use crate::decide::Rule;
        Skipped {
            path: rules.skips(Rule::VendorPath),
            credential: rules.skips(Rule::VendorCredential),
            budget: rules.skips(Rule::VendorBudget),
        }
    }
}

/// The route a request takes when [`Skipped::path`] let it through unrouted.
const UNROUTED: Route = Route {
    method: "",
    path: "",
    queries: &[],
};

/// A request's head as the HTTP implementation parsed it: header names lowercase, in order.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub method: &'a str,
    /// The request target in origin form (`/path?query`).
    pub target: &'a str,
    pub headers: &'a [(&'a str, &'a [u8])],
}

/// A request the rules let through: the one header whose value the terminator replaces with the
/// key (its index in [`Head::headers`]). Only [`admit`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    swap: Option<usize>,
    route: Route,
}

impl Admitted {
    /// The index of the credential header to swap (always one, unless a gate case left the
    /// credential rule out and the head had no admissible credential).
    pub const fn swap(&self) -> Option<usize> {
        self.swap
    }

    /// The route the request took.
    pub const fn route(&self) -> Route {
        self.route
    }
}

/// Check a request's head against the vendor host's rules, in order: its bounds, its route, its
/// `Host`, its credential.
pub fn admit(to: &Terminated<'_>, head: &Head<'_>) -> Result<Admitted, VendorRejection> {
    bounded(head)?;
    let route = match route_of(to.routes, head.method, head.target) {
        Err(_) if to.skip.path => UNROUTED,
        routed => routed?,
    };
    if !to.skip.path {
        host_is(to.host, head.headers)?;
    }
    let swap = match credential(to, head) {
        Err(_) if to.skip.credential => None,
        found => Some(found?),
    };
    Ok(Admitted { swap, route })
}

/// The head's bounds, and header values of visible ASCII and spaces only.
fn bounded(head: &Head<'_>) -> Result<(), VendorRejection> {
    let bytes: usize = head
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum();
    let printable = |v: &[u8]| v.iter().all(|b| (0x20..0x7f).contains(b) || *b == b'\t');
    if head.headers.len() > MAX_HEADERS
        || bytes > MAX_HEAD_BYTES
        || head.target.len() > MAX_TARGET
        || !head.headers.iter().all(|(_, v)| printable(v))
    {
        return Err(VendorRejection::Malformed);
    }
    Ok(())
}

/// The route a method and origin-form target take: the path exactly one of `routes`' (no
/// normalisation: a `..`, `//`, `%2f` or trailing `/` is another path), the query exactly one the
/// route allows.
fn route_of(routes: &[Route], method: &str, target: &str) -> Result<Route, VendorRejection> {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    routes
        .iter()
        .find(|r| r.method == method && r.path == path)
        .filter(|r| query.is_none_or(|q| r.queries.contains(&q)))
        .copied()
        .ok_or(VendorRejection::Path)
}

/// Exactly one `Host`, naming the vendor host (with its port 443 or without).
fn host_is(host: &str, headers: &[(&str, &[u8])]) -> Result<(), VendorRejection> {
    let mut hosts = headers.iter().filter(|(n, _)| *n == "host");
    let (Some((_, value)), None) = (hosts.next(), hosts.next()) else {
        return Err(VendorRejection::Path);
    };
    let value = std::str::from_utf8(value).map_err(|_| VendorRejection::Path)?;
    let named = value.strip_suffix(":443").unwrap_or(value);
    if named.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err(VendorRejection::Path)
    }
}

/// The index of the one credential header: the kind's own, exactly once, exactly the sentinel's
/// value; no other credential header; the sentinel in no other header and not in the target.
fn credential(to: &Terminated<'_>, head: &Head<'_>) -> Result<usize, VendorRejection> {
    let sentinel = to.sentinel.as_bytes();
    if sentinel.is_empty() || contains(head.target.as_bytes(), sentinel) {
        return Err(VendorRejection::Credential);
    }
    let expected = to.header.value(to.sentinel);
    let mut found = None;
    for (at, (name, value)) in head.headers.iter().enumerate() {
        let is_credential = CREDENTIAL_HEADERS.contains(name);
        if *name == to.header.name() && *value == expected.as_bytes() && found.is_none() {
            found = Some(at);
        } else if is_credential || contains(value, sentinel) {
            return Err(VendorRejection::Credential);
        }
    }
    found.ok_or(VendorRejection::Credential)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    Requests,
    RequestBytes,
    ResponseBytes,
}

impl Spend {
    /// How the result names it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Spend::Requests => "requests",
            Spend::RequestBytes => "request-bytes",
            Spend::ResponseBytes => "response-bytes",
        }
    }
}

/// The most any one budget may be set to (far past what a day of requests spends).
pub const MAX_BUDGET: u64 = 1 << 50;

/// An invocation's budgets for the vendor host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub requests: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

impl Budget {
    /// Each budget from 1 to [`MAX_BUDGET`].
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in [
            ("requests", self.requests),
            ("request bytes", self.request_bytes),
            ("response bytes", self.response_bytes),
        ] {
            if !(1..=MAX_BUDGET).contains(&value) {
                return Err(format!(
                    "the {name} budget {value} is not from 1 to {MAX_BUDGET}"
                ));
            }
        }
        Ok(())
    }
}

impl Default for Budget {
    /// Generous, finite: far above what a long invocation of the CLI spends.
    fn default() -> Self {
        Budget {
            requests: 2_000,
            request_bytes: 2 * 1024 * 1024 * 1024,
            response_bytes: 2 * 1024 * 1024 * 1024,
        }
    }
}

/// What an invocation has spent so far; the first budget that runs out stays the answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spent {
    pub requests: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// The first budget that ran out.
    pub exhausted: Option<Spend>,
}

impl Spent {
    /// Before a request of `bytes` (its declared length) is sent: counted if it fits every
    /// budget, else refused naming the budget (and every later request refused too).
    pub fn request(&mut self, budget: &Budget, bytes: u64) -> Result<(), VendorRejection> {
        if let Some(spend) = self.exhausted {
            return Err(VendorRejection::Budget(spend));
        }
        let requests = self.requests.saturating_add(1);
        let request_bytes = self.request_bytes.saturating_add(bytes);
        let over = if requests > budget.requests {
            Some(Spend::Requests)
        } else if request_bytes > budget.request_bytes {
            Some(Spend::RequestBytes)
        } else if self.response_bytes >= budget.response_bytes {
            Some(Spend::ResponseBytes)
        } else {
            None
        };
        if let Some(spend) = over {
            self.exhausted = Some(spend);
            return Err(VendorRejection::Budget(spend));
        }
        self.requests = requests;
        self.request_bytes = request_bytes;
        Ok(())
    }

    /// As a response streams: how many of `bytes` may still go to the agent (fewer than `bytes`
    /// when the response budget runs out midway; the terminator then ends the response).
    pub fn response(&mut self, budget: &Budget, bytes: u64) -> u64 {
        let left = budget.response_bytes.saturating_sub(self.response_bytes);
        let passed = bytes.min(left);
        self.response_bytes = self.response_bytes.saturating_add(passed);
        if passed < bytes {
            self.exhausted.get_or_insert(Spend::ResponseBytes);
        }
        passed
    }
}

#[cfg(test)]
#[path = "vendor_tests.rs"]
mod tests;
