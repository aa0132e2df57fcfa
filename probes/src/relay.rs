//! `workload relay PORT ADDR`: `cordon bench egress`'s plain-relay arm, the least one more TCP
//! hop can cost. It listens on PORT (all addresses) and joins each connection it accepts to a
//! fresh one to ADDR, moving the bytes socket to kernel pipe to socket with splice(2), one
//! blocking thread per direction: what the egress proxy's opaque tunnels do, without the policy,
//! the parsing or the event loop. It prints `{"relay":"listening"}` once it listens and relays
//! until it is killed. The test image only: no product container runs it.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::unistd::pipe2;

/// Each direction's pipe: the proxy's relay buffer (`cordon_egress::proxy::RELAY_BUFFER`).
const PIPE: libc::c_int = 64 * 1024;
/// A pipe's size where the kernel refuses [`PIPE`] (the user's pipe budget spent).
const PIPE_DEFAULT: usize = 64 * 1024;
/// Connections relayed at once, two threads each under the container's 64 pids; more are closed
/// as they come (the benchmark opens three).
const MAX_CONNECTIONS: usize = 16;

/// Listen and relay until killed; returns only on a listening failure.
pub fn run(args: &[String]) -> Result<(), String> {
    let (port, to) = match args {
        [port, to] => (
            port.parse::<u16>()
                .map_err(|e| format!("port {port:?}: {e}"))?,
            to.parse::<SocketAddr>()
                .map_err(|e| format!("address {to:?}: {e}"))?,
        ),
        _ => return Err("usage: relay PORT ADDR".to_owned()),
    };
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("listen: {e}"))?;
    println!("{{\"relay\":\"listening\"}}");
    let open = Arc::new(AtomicUsize::new(0));
    for accepted in listener.incoming() {
        let Ok(client) = accepted else { continue };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let still_open = open.clone();
        let relayed = std::thread::Builder::new().spawn(move || {
            if let Err(e) = join(client, to) {
                // One write, so the line arrives whole (see `workload::stderr_line`).
                let line = format!("cordon-probe: relay: {e}\n");
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            still_open.fetch_sub(1, Ordering::SeqCst);
        });
        // No thread to spare: the connection was dropped with the closure.
        if relayed.is_err() {
            open.fetch_sub(1, Ordering::SeqCst);
        }
    }
    Err("the listener ended".to_owned())
}

/// Relay one connection both ways until both directions ended.
fn join(client: TcpStream, to: SocketAddr) -> io::Result<()> {
    let upstream = TcpStream::connect(to)?;
    for socket in [&client, &upstream] {
        socket.set_nodelay(true)?;
    }
    let (client_back, upstream_back) = (client.try_clone()?, upstream.try_clone()?);
    let down = std::thread::Builder::new().spawn(move || pump(&upstream_back, &client_back))?;
    let up = pump(&client, &upstream);
    let down = down
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the relay's thread panicked")));
    up.and(down)
}

/// Move `from`'s bytes into `to` until `from` ends, then end `to`'s writing side. A failure ends
/// both sockets, so the other direction's thread ends too.
fn pump(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    let pumped = pump_until_end(from, to);
    if pumped.is_err() {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    }
    pumped
}

fn pump_until_end(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC)?;
    // The default pipe still relays every byte, in smaller steps.
    let size = fcntl(&write_end, FcntlArg::F_SETPIPE_SZ(PIPE))
        .ok()
        .and_then(|got| usize::try_from(got).ok())
        .unwrap_or(PIPE_DEFAULT);
    loop {
        let held = retried(|| {
            splice(
                from,
                None,
                &write_end,
                None,
                size,
                SpliceFFlags::SPLICE_F_MOVE,
            )
        })?;
        if held == 0 {
            return to.shutdown(Shutdown::Write);
        }
        let mut left = held;
        while left > 0 {
            let moved =
                retried(|| splice(&read_end, None, to, None, left, SpliceFFlags::SPLICE_F_MOVE))?;
            if moved == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            left -= moved;
        }
    }
}

/// One splice(2), again while a signal interrupts it.
fn retried(mut call: impl FnMut() -> nix::Result<usize>) -> io::Result<usize> {
    loop {
        match call() {
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Bytes through the relay arrive whole and in order both ways, and each side's end reaches
    /// the other.
    #[test]
    fn a_relayed_connection_carries_every_byte_both_ways() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = upstream.local_addr().unwrap();
        let echo = std::thread::spawn(move || {
            let (mut s, _) = upstream.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&got).unwrap();
            got.len()
        });
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = front.local_addr().unwrap();
        let relay = std::thread::spawn(move || {
            let (client, _) = front.accept().unwrap();
            join(client, to)
        });
        let mut client = TcpStream::connect(at).unwrap();
        let sent: Vec<u8> = (0u8..=250).cycle().take(3 * PIPE_DEFAULT + 7).collect();
        client.write_all(&sent).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).unwrap();
        assert_eq!(echo.join().unwrap(), sent.len());
        assert!(back == sent, "the echo came back changed");
        relay.join().unwrap().unwrap();
    }

    /// An upstream that resets ends the relayed connection, the direction still waiting on the
    /// silent client included: no thread is left behind.
    #[test]
    fn a_reset_upstream_ends_the_relayed_connection() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = upstream.local_addr().unwrap();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = front.local_addr().unwrap();
        let (ended, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (client, _) = front.accept().unwrap();
            let _ = ended.send(join(client, to).is_err());
        });
        // The client stays open and silent.
        let _client = TcpStream::connect(at).unwrap();
        let (reset, _) = upstream.accept().unwrap();
        let abort = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(&reset, nix::sys::socket::sockopt::Linger, &abort).unwrap();
        drop(reset);
        let failed = done
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the relay still waits on the client");
        assert!(failed, "a reset is the relayed connection's failure");
    }
}
