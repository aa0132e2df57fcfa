//! The rules of cordon's egress proxy, as pure functions over bytes and addresses: the agent's
//! only way out is `CONNECT host:port` to a name on the invocation's allowlist, resolved by the
//! proxy and dialed only at an address no special-purpose block, metadata service or host address
//! holds. Each refusal has a stable id ([`Rejection`]) and the HTTP status the client is answered
//! with (no detail about addresses).
//!
//! - [`head`]: the request head (bounded, CRLF only, one `CONNECT` in authority form).
//! - [`host`]: a host name in canonical LDH form, never an IP literal.
//! - [`allowlist`]: the entries a name and port must match, before any lookup.
//! - [`address`]: the deny-by-default classifier of every resolved address.
//! - [`tls`]: the tunnel's first bytes, a ClientHello naming the CONNECT host.
//! - [`decide`]: the rules in order: admit a head (no lookup), then check what the name resolved to.
//! - [`vendor`]: a request to the terminated vendor host: its measured method and path, its
//!   `Host`, the sentinel as its one credential, the invocation's budgets (the terminator that
//!   applies them is not built yet).
//! - [`usage`]: the token usage a vendor response reports, read as it streams past, bounded (for
//!   the record of every vendor call; not read by any runtime yet).
//! - [`proxy`]: the runtime that applies them: a unix socket, one task per connection, bounded
//!   reads and deadlines, the dial, the ClientHello check and the relay with idle and half-close
//!   timeouts (socket to socket by splice(2), `splice`).
//! - [`terminate`]: the TLS terminator for the vendor host: HTTP/1.1 (hyper) held to [`vendor`]'s
//!   rules and budgets, the sentinel swapped for the key, the response streamed back counted and
//!   read for [`usage`], one record per call (not wired into [`proxy`] yet).
//! - [`resolver`]: the proxy's resolver: one configured upstream, no system configuration, no
//!   search list, nothing cached (each CONNECT dials exactly what its one answer gave), the
//!   admitted name its only query.
//! - [`chain`]: which address records of an answer belong to the asked name (its own, or those
//!   of a CNAME chain the same answer contains).
//! - [`args`]: the `cordon-egress` binary's arguments, parsed by hand and validated by the parsers
//!   above.
//! - [`vault`]: the terminator's inputs, read once at start from the directory the controller
//!   filled (the credential among them), each a bounded regular file opened without following a
//!   link.
//! - [`journal`]: the binary's log lines (JSON, one per line, in a stable shape): the attestation,
//!   one line per connection, the stop.
//!
//! The rules (`head` to `decide`) are always built; the proxy (`proxy` to `journal`) and the
//! `cordon-egress` binary only with the default feature `proxy`: a crate that only checks an
//! allowlist (the host library) builds without it, so no DNS library is in its build.
//!
//! A gate case may leave out exactly one rule ([`decide::Rule`], [`decide::Rules::skip`]); every
//! real invocation leaves out none.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod address;
pub mod allowlist;
#[cfg(feature = "proxy")]
pub mod args;
#[cfg(feature = "proxy")]
pub mod chain;
pub mod decide;
pub mod head;
pub mod host;
#[cfg(feature = "proxy")]
pub mod journal;
#[cfg(feature = "proxy")]
pub mod proxy;
#[cfg(feature = "proxy")]
pub mod resolver;
#[cfg(feature = "proxy")]
pub mod serve;
#[cfg(feature = "proxy")]
mod splice;
#[cfg(feature = "proxy")]
pub mod terminate;
pub mod tls;
#[cfg(feature = "proxy")]
pub mod usage;
#[cfg(feature = "proxy")]
pub mod vault;
pub mod vendor;

/// Why the proxy refused a request: a stable id, and the status the client gets. Not named
/// `Refusal`: that is `cordon_contract::Refusal`, a protection's refusal, a different thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// A method other than CONNECT.
    Method,
    /// A target not in authority form (`host:port`), or a malformed request line.
    Target,
    /// Not HTTP/1.1.
    Version,
    /// A head over its size, line or header bound.
    HeadTooLarge,
    /// A bare LF, a control byte, a malformed header, no Host header, a duplicate Host, a Host
    /// naming anything but the target.
    Malformed,
    /// The host is not a canonical LDH name (an IP literal in any spelling included).
    Host,
    /// The port is not a plain decimal 1-65535.
    Port,
    /// The name or port is not on the allowlist.
    NotAllowed,
    /// A resolved address is in a denied class, or the answer was empty.
    Address,
    /// The resolver failed.
    Resolve,
}

impl Rejection {
    /// The stable id (what the proxy logs and a runner reads).
    pub const fn id(self) -> &'static str {
        match self {
            Rejection::Method => "egress-method",
            Rejection::Target => "egress-target",
            Rejection::Version => "egress-version",
            Rejection::HeadTooLarge => "egress-head-too-large",
            Rejection::Malformed => "egress-malformed",
            Rejection::Host => "egress-host",
            Rejection::Port => "egress-port",
            Rejection::NotAllowed => "egress-not-allowed",
            Rejection::Address => "egress-address",
            Rejection::Resolve => "egress-resolve",
        }
    }

    /// The HTTP status the client is answered with.
    pub const fn status(self) -> u16 {
        match self {
            Rejection::Method => 405,
            Rejection::HeadTooLarge => 431,
            Rejection::Version => 505,
            Rejection::NotAllowed | Rejection::Address => 403,
            Rejection::Resolve => 502,
            Rejection::Target | Rejection::Malformed | Rejection::Host | Rejection::Port => 400,
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}
