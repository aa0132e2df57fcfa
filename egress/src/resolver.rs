//! The proxy's resolver: [`UpstreamResolver`] asks exactly one configured upstream (UDP, TCP when
//! an answer comes back truncated) for a name's A and AAAA records, and nothing else. No system
//! configuration is read (no `/etc/resolv.conf`, no hosts file), no search list or domain can
//! apply (the name is asked as an FQDN, with its trailing dot), and nothing is cached: each
//! CONNECT resolves once and [`crate::decide::dial`] checks, and the proxy dials, exactly what that
//! one answer gave, so a rebinding upstream cannot swap the address between the check and the
//! dial.
//!
//! Only a name the allowlist admitted is ever passed here ([`crate::proxy::Resolve`]), so an
//! unlisted name never becomes a query. The answer's addresses are logged at debug only.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
    ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::Name as DnsName;
use hickory_resolver::TokioResolver;

use crate::host::Name;
use crate::proxy::{BoxFuture, Resolve};

/// How long one query may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a failed query is tried in all (one retry: a silent upstream holds a CONNECT
/// for at most `ATTEMPTS` × [`TIMEOUT`]).
pub const ATTEMPTS: usize = 2;

/// A resolver that asks one upstream, uncached, without any system configuration.
#[derive(Clone)]
pub struct UpstreamResolver {
    upstream: SocketAddr,
    resolver: TokioResolver,
}

impl std::fmt::Debug for UpstreamResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamResolver")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl UpstreamResolver {
    /// A resolver that asks `upstream` (UDP, TCP on a truncated answer), with [`TIMEOUT`] per
    /// query and [`ATTEMPTS`] tries.
    pub fn new(upstream: SocketAddr) -> Result<UpstreamResolver, String> {
        UpstreamResolver::with_timeout(upstream, TIMEOUT)
    }

    /// The same, with another timeout per query.
    pub fn with_timeout(
        upstream: SocketAddr,
        timeout: Duration,
    ) -> Result<UpstreamResolver, String> {
        let connection = |mut config: ConnectionConfig| {
            config.port = upstream.port();
            config
        };
        let server = NameServerConfig::new(
            upstream.ip(),
            true,
            vec![
                connection(ConnectionConfig::udp()),
                connection(ConnectionConfig::tcp()),
            ],
        );
        // No domain, no search list: only the one server.
        let config = ResolverConfig::from_parts(None, vec![], vec![server]);
        let mut options = ResolverOpts::default();
        options.timeout = timeout;
        // hickory's `attempts` counts the retries after the first try (measured: 2 gave three
        // queries of each type, and 15 s on a silent upstream).
        options.attempts = ATTEMPTS - 1;
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // Nothing cached (and, should an entry be kept anyway, none outlives its insertion).
        options.cache_size = 0;
        options.positive_max_ttl = Some(Duration::ZERO);
        options.negative_max_ttl = Some(Duration::ZERO);
        options.use_hosts_file = ResolveHosts::Never;
        // Irrelevant for a name with a trailing dot; set so no future path appends a domain.
        options.ndots = 0;
        // One server: nothing to race.
        options.num_concurrent_reqs = 1;
        let resolver = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(options)
            .build()
            .map_err(|error| format!("resolver for {upstream}: {error}"))?;
        Ok(UpstreamResolver { upstream, resolver })
    }

    /// The upstream it asks.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }
}

impl Resolve for UpstreamResolver {
    fn lookup(&self, name: &Name) -> BoxFuture<'_, Result<Vec<IpAddr>, String>> {
        // Fully qualified: no search list or domain can be appended.
        let fqdn = DnsName::from_ascii(format!("{}.", name.as_str()));
        Box::pin(async move {
            let fqdn = fqdn.map_err(|error| format!("not a DNS name: {error}"))?;
            debug_assert!(fqdn.is_fqdn());
            match self.resolver.lookup_ip(fqdn).await {
                Ok(answer) => {
                    let addrs: Vec<IpAddr> = answer.iter().collect();
                    tracing::debug!(?addrs, "egress resolved");
                    Ok(addrs)
                }
                // The name exists and has no A or AAAA: an empty answer (refused by the
                // classifier, as `egress-address`).
                Err(NetError::Dns(DnsError::NoRecordsFound(none)))
                    if none.response_code == ResponseCode::NoError =>
                {
                    tracing::debug!("egress resolved to nothing");
                    Ok(Vec::new())
                }
                Err(error) => {
                    tracing::debug!(%error, "egress resolve failed");
                    Err(error.to_string())
                }
            }
        })
    }
}

#[cfg(test)]
#[path = "resolver_tests.rs"]
mod tests;
