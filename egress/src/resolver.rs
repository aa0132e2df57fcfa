//! The proxy's resolver: [`UpstreamResolver`] asks exactly one configured upstream (UDP, TCP when
//! an answer comes back truncated) for a name's A and AAAA records, once each, and nothing else.
//! No system configuration is read (no `/etc/resolv.conf`, no hosts file), no search list or domain
//! can apply (the name is asked as an FQDN, with its trailing dot), and nothing is cached: each
//! CONNECT resolves once and [`crate::decide::dial`] checks, and the proxy dials, exactly what that
//! one answer gave, so a rebinding upstream cannot swap the address between the check and the
//! dial.
//!
//! The queries go through hickory's transport alone (`hickory-net`: a UDP client stream, a TCP
//! one for a truncated answer), which sends the one message it is given and hands back the one
//! response: it follows no CNAME and keeps nothing. What an answer means is [`crate::chain`]'s:
//! only address records owned by the asked name, or by a CNAME chain the same answer contains,
//! count; a chain that ends at a name the answer holds nothing for is no answer, and its target is
//! never asked (an unlisted name never becomes a query). With the chain rule left out
//! ([`UpstreamResolver::chasing`], a gate case only) the resolver asks the target, as a caching
//! client would, at most [`MAX_CHAIN`] times per type.
//!
//! The lookup's addresses are those of every type that gave some. When none gave any, a type that
//! failed (an error code, silence, a broken chain) makes the lookup an error (`egress-resolve`);
//! otherwise the answer is empty (`egress-address`). Only a name the allowlist admitted is ever
//! passed here ([`crate::proxy::Resolve`]). The answer's addresses are logged at debug only.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_net::client::ClientHandle;
use hickory_net::proto::op::{DnsResponse, MessageType, ResponseCode};
use hickory_net::proto::rr::{DNSClass, Name as DnsName, RecordType};
use hickory_net::runtime::{RuntimeProvider, TokioRuntimeProvider};
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_net::NetError;

use crate::chain::{self, Broken, Chain, MAX_CHAIN};
use crate::host::Name;
use crate::proxy::{BoxFuture, Resolve};

/// How long one try of a query may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a query the upstream does not answer is sent in all, [`TIMEOUT`] apart (a
/// silent upstream holds a CONNECT for at most `ATTEMPTS` × [`TIMEOUT`]).
pub const ATTEMPTS: u8 = 2;

/// A resolver that asks one upstream, uncached, without any system configuration.
#[derive(Debug, Clone)]
pub struct UpstreamResolver {
    upstream: SocketAddr,
    timeout: Duration,
    chase: bool,
}

impl UpstreamResolver {
    /// A resolver that asks `upstream` (UDP, TCP on a truncated answer), with [`TIMEOUT`] per try
    /// and [`ATTEMPTS`] tries.
    pub fn new(upstream: SocketAddr) -> UpstreamResolver {
        UpstreamResolver::with_timeout(upstream, TIMEOUT)
    }

    /// The same, with another timeout per try.
    pub fn with_timeout(upstream: SocketAddr, timeout: Duration) -> UpstreamResolver {
        UpstreamResolver {
            upstream,
            timeout,
            chase: false,
        }
    }

    /// With `chase`, the chain rule left out: a chain's target with nothing in the answer is
    /// asked in turn, at most [`MAX_CHAIN`] times per type (what a caching client does; a gate
    /// case's removal only).
    pub fn chasing(self, chase: bool) -> UpstreamResolver {
        UpstreamResolver { chase, ..self }
    }

    /// The upstream it asks.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// One query, over UDP and, when that answer is truncated, again over TCP: the response, or
    /// why there is none.
    async fn query(&self, name: &DnsName, kind: RecordType) -> Result<DnsResponse, String> {
        let provider = TokioRuntimeProvider::default();
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        // `ATTEMPTS` sends, a try's timeout apart, within their sum.
        let mut udp = UdpClientStream::builder(self.upstream, provider.clone())
            .with_timeout(Some(self.timeout * u32::from(ATTEMPTS)))
            .with_max_retries(ATTEMPTS)
            .with_retry_interval_floor(timeout_ms)
            .exchange();
        let response = udp
            .query(name.clone(), DNSClass::IN, kind)
            .await
            .map_err(shown)?;
        if !response.metadata.truncation {
            return Ok(response);
        }
        tracing::debug!(%name, %kind, "egress resolve truncated: asked again over TCP");
        let mut tcp = TcpClientStream::<<TokioRuntimeProvider as RuntimeProvider>::Tcp>::exchange(
            self.upstream,
            None,
            self.timeout,
            Some(1),
            provider,
        )
        .await
        .map_err(shown)?;
        tcp.query(name.clone(), DNSClass::IN, kind)
            .await
            .map_err(shown)
    }

    /// The addresses of one type, following the chain the answer holds (and, chasing, asking its
    /// target in turn).
    async fn of_type(&self, fqdn: &DnsName, kind: RecordType) -> Typed {
        let mut asked = fqdn.clone();
        for _ in 0..=MAX_CHAIN {
            let response = match self.query(&asked, kind).await {
                Ok(response) => response,
                Err(error) => return Typed::Failed(error),
            };
            if let Err(error) = answers(&response, &asked, kind) {
                return Typed::Failed(error);
            }
            match chain::follow(&asked, kind, &response.answers) {
                Chain::Addresses(addrs) => return Typed::Addresses(addrs),
                Chain::Empty => return Typed::Empty,
                Chain::Broken(Broken::Incomplete(target)) if self.chase => asked = target,
                Chain::Broken(broken) => return Typed::Failed(format!("{kind}: {broken}")),
            }
        }
        Typed::Failed(format!("{kind}: {}", Broken::TooLong))
    }
}

/// What one type gave.
#[derive(Debug)]
enum Typed {
    Addresses(Vec<IpAddr>),
    Empty,
    Failed(String),
}

/// Whether a response answers the query asked: a response to it, its one question the one asked,
/// NOERROR, not truncated (after TCP too).
fn answers(response: &DnsResponse, asked: &DnsName, kind: RecordType) -> Result<(), String> {
    let question_ok = matches!(response.queries.as_slice(), [q]
        if q.name().eq_ignore_root(asked) && q.query_type() == kind && q.query_class() == DNSClass::IN);
    if response.metadata.message_type != MessageType::Response || !question_ok {
        return Err(format!("{kind}: the response is not to the query asked"));
    }
    if response.metadata.response_code != ResponseCode::NoError {
        return Err(format!("{kind}: {}", response.metadata.response_code));
    }
    if response.metadata.truncation {
        return Err(format!("{kind}: truncated over TCP too"));
    }
    Ok(())
}

fn shown(error: NetError) -> String {
    error.to_string()
}

impl Resolve for UpstreamResolver {
    fn lookup(&self, name: &Name) -> BoxFuture<'_, Result<Vec<IpAddr>, String>> {
        // Fully qualified: no search list or domain can be appended.
        let fqdn = DnsName::from_ascii(format!("{}.", name.as_str()));
        Box::pin(async move {
            let fqdn = fqdn.map_err(|error| format!("not a DNS name: {error}"))?;
            debug_assert!(fqdn.is_fqdn());
            let (v4, v6) = tokio::join!(
                self.of_type(&fqdn, RecordType::A),
                self.of_type(&fqdn, RecordType::AAAA)
            );
            let mut addrs = Vec::new();
            let mut failed = Vec::new();
            for typed in [v4, v6] {
                match typed {
                    Typed::Addresses(some) => addrs.extend(some),
                    Typed::Empty => {}
                    Typed::Failed(why) => failed.push(why),
                }
            }
            if addrs.is_empty() && !failed.is_empty() {
                let error = failed.join("; ");
                tracing::debug!(%error, "egress resolve failed");
                return Err(error);
            }
            // An empty answer is refused by the classifier, as `egress-address`.
            tracing::debug!(?addrs, "egress resolved");
            Ok(addrs)
        })
    }
}

#[cfg(test)]
#[path = "resolver_tests.rs"]
mod tests;
