//! `network`: only loopback exists, there is no route, a TCP connect to a literal public and a
//! literal private address fails at once for want of a route, and no DNS query can be sent to any
//! configured resolver.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use cordon_contract::probe::{ops, Operation};
use cordon_contract::procfs;

use crate::report::Probe;

/// A TCP connect to `addr`. It is denied only when it fails at once for want of a route and the
/// kernel confirms there is none (connect(2) on a UDP socket makes the routing decision and sends
/// nothing), so the verdict does not depend on what lies beyond this host: an answer, a refusal,
/// a timeout or an ICMP error from outside all mean a packet left.
fn connect(addr: SocketAddrV4) -> std::io::Result<()> {
    let tcp = std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_millis(300));
    let no_route = |e: &std::io::Error| {
        matches!(
            e.raw_os_error(),
            Some(libc::ENETUNREACH) | Some(libc::EADDRNOTAVAIL) | Some(libc::ENETDOWN)
        )
    };
    match tcp {
        Err(e) if no_route(&e) => {
            let udp = std::net::UdpSocket::bind("0.0.0.0:0")?;
            match udp.connect(addr) {
                Err(route) if no_route(&route) => Err(e),
                _ => Ok(()),
            }
        }
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

fn resolver(p: &mut Probe<'_>, op: &Operation) {
    // A DNS query for example.com, type A: sending it is the breach (it could leave).
    const QUERY: &[u8] =
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01";
    for server in nameservers() {
        p.deny(op, &format!("send a DNS query to {server}:53"), || {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
            socket
                .send_to(QUERY, SocketAddrV4::new(server, 53))
                .map(drop)
        });
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
}
