//! Egress facts the host, cordon-init and cordon-probe share: where the agent's forwarder listens
//! and what it forwards to, the proxy rules a gate case may tell the proxy to leave out (by
//! catalogue id), and the egress probe's fixture.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::catalogue::Id;

/// The loopback port the init's forwarder listens on inside the agent container.
pub const FORWARD_PORT: u16 = 3128;
/// The proxy's socket, in the egress dir (read-only to the agent).
pub const SOCKET: &str = "/run/cordon/egress/egress.sock";
/// At most this many forwarded connections at once (the proxy bounds its tunnels too).
pub const MAX_FORWARDED: usize = 64;

/// The proxy URL the agent's environment names (`HTTPS_PROXY`, `https_proxy`).
pub fn proxy_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The proxy rules a removal case may leave out, each by its catalogue id and the name the proxy's
/// `--skip` takes (and its attestation line shows).
pub const PROXY_RULES: [(Id, &str); 10] = [
    (Id::EgressAllowlist, "allowlist"),
    (Id::EgressAddress, "address"),
    (Id::EgressSni, "sni"),
    (Id::EgressMethod, "method"),
    (Id::EgressCname, "cname"),
    (Id::VendorTerminated, "terminate"),
    (Id::VendorPath, "vendor-path"),
    (Id::VendorCredential, "vendor-credential"),
    (Id::VendorBudget, "vendor-budget"),
    (Id::CredentialHostBound, "host-bound"),
];

/// The `--skip` name of a proxy rule's id.
pub fn rule_name(id: Id) -> Option<&'static str> {
    PROXY_RULES.iter().find(|(i, _)| *i == id).map(|(_, n)| *n)
}

/// The egress probe's fixture, written by the gate into the input dir as [`PROBE_FIXTURE`]
/// (with the test CA as [`PROBE_CA`]); without it the egress probe tries nothing.
pub const PROBE_FIXTURE: &str = "egress.json";
/// The test CA's certificate (PEM) in the input dir.
pub const PROBE_CA: &str = "egress-ca.pem";

/// What the egress probe needs to know about its invocation's network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeFixture {
    /// The allowed name (mapped to the fake vendor endpoint): the positive control.
    pub allowed: String,
    /// The allowed name's port.
    pub port: u16,
    /// A name the allowlist does not list, though the proxy maps it to the endpoint too (so only
    /// the allowlist refuses it).
    pub unlisted: String,
    /// An allowed port that is not the allowed name's.
    pub other_port: u16,
    /// An allowed, unmapped name the test resolver answers with the endpoint's private address
    /// (so only the address check refuses it).
    pub private_name: String,
    /// An allowed, unmapped name the test resolver answers only with a CNAME to an unlisted name
    /// (which it answers with the endpoint's private address): the proxy must find no answer
    /// (502); a 403 means it asked for the target itself.
    pub cname_name: String,
    /// The invocation network's gateway, the proxy's and the endpoint's addresses on it.
    pub gateway: Ipv4Addr,
    pub proxy: Ipv4Addr,
    pub endpoint: Ipv4Addr,
    pub endpoint_port: u16,
    /// The terminated vendor host, when the invocation holds a credential (issue 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<TerminatedFixture>,
}

/// What the egress probe needs to know about the terminated vendor host. The fake vendor behind
/// it takes only the key, and echoes the credential fields it receives as digests
/// ([`CREDENTIALS_ECHO`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminatedFixture {
    pub host: String,
    pub port: u16,
    /// Another allowed port of the same host, not terminated: the sentinel arrives there as sent.
    pub other_port: u16,
    /// The invocation CA's certificate (PEM) in the input dir: what the agent trusts there.
    pub ca_file: String,
    /// The variable holding the sentinel, and the header it travels in (`x-api-key` or
    /// `authorization`, as `Bearer`).
    pub variable: String,
    pub header: String,
    /// The proxy's request budget: one request past it must be refused.
    pub max_requests: u64,
}

/// The fake vendor's response header naming each credential field it received and the SHA-256
/// of its value: `x-api-key=HEX, authorization=HEX`.
pub const CREDENTIALS_ECHO: &str = "x-fake-vendor-credentials";
