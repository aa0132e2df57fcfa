//! `network`: only loopback exists, there is no route, no TCP connect and no DNS query can leave,
//! no name the agent looks up gets an answer, and no socket family beyond what the agent needs can
//! be opened (AF_VSOCK is not network-namespaced: it reaches the VM's host whatever `NetworkMode`
//! says).
//!
//! Nothing here sends a packet beyond this container: a route is judged by the kernel's routing
//! decision alone (connect(2) on a UDP socket makes it and sends nothing), and only where it finds
//! no route is the TCP connect tried, which then fails at once without a packet. The egress probe
//! judges its direct connects with the same helpers.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use cordon_contract::probe::{fixture, ops, Operation};
use cordon_contract::{procfs, seccomp};

use crate::report::Probe;

/// The kernel has no route for this destination.
pub(crate) fn no_route(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETUNREACH) | Some(libc::EADDRNOTAVAIL) | Some(libc::ENETDOWN)
    )
}

/// Whether the kernel has a route to `addr` (the routing decision of a UDP connect: no packet).
pub(crate) fn routed(addr: SocketAddr) -> io::Result<bool> {
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let udp = UdpSocket::bind(any)?;
    match udp.connect(addr) {
        Ok(()) => Ok(true),
        Err(e) if no_route(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A UDP datagram to `addr` could leave: Ok (a breach) when the kernel has a route, judged without
/// sending anything; Err otherwise.
pub(crate) fn udp_route(addr: SocketAddr) -> io::Result<()> {
    match routed(addr) {
        Ok(true) => Ok(()),
        Ok(false) => Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
        Err(e) => Err(e),
    }
}

/// A TCP connect to `addr` that could leave: Ok (a breach) when the kernel has a route, without
/// sending anything; otherwise the connect itself, which must fail at once for want of a route.
pub(crate) fn connect(addr: SocketAddr) -> io::Result<()> {
    if routed(addr)? {
        return Ok(());
    }
    match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
        Err(e) if no_route(&e) => Err(e),
        _ => Ok(()),
    }
}

fn nameservers() -> Vec<Ipv4Addr> {
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut servers: Vec<Ipv4Addr> = conf
        .lines()
        .filter_map(|l| l.strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    if servers.is_empty() {
        servers.push(Ipv4Addr::new(8, 8, 8, 8));
    }
    servers
}

/// A DNS query could be sent to each configured resolver: a route to it is the breach (the query
/// itself is never sent).
fn resolver(p: &mut Probe<'_>, op: &Operation) {
    for server in nameservers() {
        let addr = SocketAddrV4::new(server, 53);
        p.deny(op, &format!("a route for a DNS query to {addr}"), || {
            udp_route(addr.into())
        });
    }
}

/// The nameservers glibc's resolver would query, from resolv.conf's text: every `nameserver`
/// line's address (a v6 zone cut off), or the loopback address it falls back to without one.
fn resolv_nameservers(conf: &str) -> Vec<IpAddr> {
    let servers: Vec<IpAddr> = conf
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("nameserver")?;
            if !rest.starts_with([' ', '\t']) {
                return None;
            }
            let addr = rest.split_whitespace().next()?;
            addr.split('%').next()?.parse().ok()
        })
        .collect();
    if servers.is_empty() {
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
    } else {
        servers
    }
}

/// Whether a DNS query to one of `servers` could be sent at all: the kernel has a route to it
/// (loopback included: a forwarder there could carry the query on), or the routing decision could
/// not be judged. A family this process cannot open is no way out: the resolver cannot open it
/// either.
fn query_could_be_sent(servers: &[IpAddr]) -> bool {
    servers
        .iter()
        .any(|ip| match routed(SocketAddr::new(*ip, 53)) {
            Ok(routed) => routed,
            Err(e) => e.raw_os_error() != Some(libc::EAFNOSUPPORT),
        })
}

extern "C" {
    /// glibc (`<nss.h>`): replace this process's NSS service line for database `db`.
    fn __nss_configure_lookup(
        db: *const libc::c_char,
        service_line: *const libc::c_char,
    ) -> libc::c_int;
}

/// `fixture::VENDOR_HOST` gets no answer from the libc resolver (getaddrinfo): neither from the
/// hosts file (an ExtraHosts entry) nor from any resolver. The evidence is how many addresses came
/// back, never which.
///
/// The lookup never sends a packet off the machine. glibc's resolver, like the checks here,
/// connects a UDP socket to a nameserver before it sends it a query: without a route that connect
/// fails and nothing is sent. So the routes are judged first: where no nameserver it would use has
/// one (NetworkMode none), the whole lookup runs, the hosts file and then DNS, whose every query
/// fails at its connect. Where one has a route (any but loopback's is already `resolver`'s
/// NetworkNone breach, and a loopback forwarder could carry a query on), the lookup is confined to
/// the hosts file first, so no query is ever sent. NSS configuration is process-wide: nothing the
/// probes do after this looks a name up.
fn dns_answer(p: &mut Probe<'_>) {
    let conf = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    let hosts_only = query_could_be_sent(&resolv_nameservers(&String::from_utf8_lossy(&conf)));
    // SAFETY: two constant NUL-terminated strings, which glibc parses and does not keep; the probe
    // runs no other thread that could be in a lookup meanwhile.
    if hosts_only && unsafe { __nss_configure_lookup(c"hosts".as_ptr(), c"files".as_ptr()) } != 0 {
        p.error("dns-answer: a resolver has a route, and NSS refused hosts: files");
        return;
    }
    let answers = (fixture::VENDOR_HOST, 443)
        .to_socket_addrs()
        .map(|a| a.count())
        .unwrap_or(0);
    p.require(&ops::DNS_ANSWER, answers == 0, || {
        let plural = if answers == 1 { "" } else { "es" };
        let source = if hosts_only { " (hosts file only)" } else { "" };
        format!(
            "{} resolved to {answers} address{plural}{source}",
            fixture::VENDOR_HOST
        )
    });
}

/// Socket families beyond the agent's are refused by the init's family filter (its own errno);
/// the agent's own still reach the kernel.
fn families(p: &mut Probe<'_>) {
    for (op, canary) in ops::canaries() {
        if op.probe != "network" {
            continue;
        }
        p.refused_with(&op, seccomp::FAMILY_ERRNO, canary.unfiltered, || {
            crate::report::canary(&canary)
        });
    }
    for canary in seccomp::FAMILY_ALLOWED {
        if let Err(e) = crate::report::canary(canary) {
            if e.raw_os_error() == Some(seccomp::FAMILY_ERRNO) && !p.ctx.without_init {
                p.error(format!(
                    "{}: the family filter refuses a family the agent needs",
                    canary.action
                ));
            }
        }
    }
}

pub fn run(p: &mut Probe<'_>) {
    let interfaces = std::fs::read_to_string("/proc/net/dev")
        .map(|t| procfs::parse_net_dev(&t))
        .unwrap_or_default();
    p.require(
        &ops::INTERFACES,
        interfaces.iter().all(|i| i == "lo") && !interfaces.is_empty(),
        || format!("interfaces {interfaces:?}"),
    );
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let routes: Vec<&str> = routes
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .collect();
    p.require(&ops::ROUTE, routes.is_empty(), || {
        format!("{} IPv4 routes", routes.len())
    });
    p.deny(&ops::CONNECT_PUBLIC, "TCP connect to 1.1.1.1:443", || {
        connect(SocketAddrV4::new(Ipv4Addr::new(1, 1, 1, 1), 443).into())
    });
    p.deny(&ops::CONNECT_PRIVATE, "TCP connect to 10.0.0.1:80", || {
        connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80).into())
    });
    resolver(p, &ops::RESOLVER);
    dns_answer(p);
    families(p);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn nameservers_are_read_as_glibc_reads_them() {
        let conf = "# generated\nsearch example.test\nnameserver 8.8.8.8\nnameserver\t2001:4860:4860::8888\n\
                    nameserver fe80::1%eth0 # scoped\nnameserverx 9.9.9.9\n; nameserver 1.1.1.1\n\
                    nameserver not-an-address\noptions ndots:0\n";
        assert_eq!(
            resolv_nameservers(conf),
            vec![ip("8.8.8.8"), ip("2001:4860:4860::8888"), ip("fe80::1")]
        );
    }

    #[test]
    fn without_a_nameserver_glibc_queries_loopback() {
        assert_eq!(resolv_nameservers(""), vec![ip("127.0.0.1")]);
        assert_eq!(
            resolv_nameservers("search x\nnameserver bogus\n"),
            vec![ip("127.0.0.1")]
        );
    }

    #[test]
    fn a_loopback_resolver_could_be_sent_a_query() {
        // Loopback always has a route here (and in every container): the lookup is then confined
        // to the hosts file.
        assert!(query_could_be_sent(&[ip("127.0.0.1")]));
    }
}
