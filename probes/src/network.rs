//! `network`: only loopback exists, there is no route, no TCP connect and no DNS query can leave,
//! and no socket family beyond what the agent needs can be opened (AF_VSOCK is not
//! network-namespaced: it reaches the VM's host whatever `NetworkMode` says).
//!
//! Nothing here sends a packet beyond this container: a route is judged by the kernel's routing
//! decision alone (connect(2) on a UDP socket makes it and sends nothing), and only where it finds
//! no route is the TCP connect tried, which then fails at once without a packet.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use cordon_contract::probe::{ops, Operation};
use cordon_contract::{procfs, seccomp};

use crate::report::Probe;

fn no_route(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETUNREACH) | Some(libc::EADDRNOTAVAIL) | Some(libc::ENETDOWN)
    )
}

/// Whether the kernel has a route to `addr` (the routing decision of a UDP connect: no packet).
fn routed(addr: SocketAddrV4) -> std::io::Result<bool> {
    let udp = std::net::UdpSocket::bind("0.0.0.0:0")?;
    match udp.connect(addr) {
        Ok(()) => Ok(true),
        Err(e) if no_route(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A TCP connect to `addr` that could leave: Ok (a breach) when the kernel has a route, without
/// sending anything; otherwise the connect itself, which must fail at once for want of a route.
fn connect(addr: SocketAddrV4) -> std::io::Result<()> {
    if routed(addr)? {
        return Ok(());
    }
    match std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_millis(300)) {
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
        p.deny(
            op,
            &format!("a route for a DNS query to {addr}"),
            || match routed(addr) {
                Ok(true) => Ok(()),
                Ok(false) => Err(std::io::Error::from_raw_os_error(libc::ENETUNREACH)),
                Err(e) => Err(e),
            },
        );
    }
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
        connect(SocketAddrV4::new(Ipv4Addr::new(1, 1, 1, 1), 443))
    });
    p.deny(&ops::CONNECT_PRIVATE, "TCP connect to 10.0.0.1:80", || {
        connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80))
    });
    resolver(p, &ops::RESOLVER);
    families(p);
}
