//! The fake vendor endpoint's container entry point (FROM scratch: no shell, no NSS, so addresses
//! are IP:PORT only, never host names).
//!
//! - `fake-vendor tls --listen ADDR:PORT [--plain ADDR:PORT]`: HTTPS with the identity in
//!   `FAKE_VENDOR_CERT` and `FAKE_VENDOR_KEY` (PEM text), and with `--plain` the same HTTP
//!   without TLS. Besides its test routes it is a fake Anthropic Messages API
//!   (`POST /v1/messages`, streaming or not): a scripted model whose scenario a marker in the
//!   prompt picks (`[[cordon-scenario NAME]]`, `[[cordon-script JSON]]`; see
//!   `cordon_fake_vendor::messages`), so no flag is needed.
//! - `fake-vendor dns --listen ADDR:PORT [--answer NAME=ANSWER...]`: the scripted DNS server;
//!   `--answer` may repeat, or take several arguments.
//!
//! Prints `{"fake_vendor":"listening",...}` once bound, then one JSON line per DNS query or HTTP
//! request (`dns_query`, `tls_request`), and after a Messages API request's `tls_request` one
//! `{"messages_request":{...}}` (a `cordon_fake_vendor::messages::MessagesRecord`); serves until
//! SIGTERM or SIGINT. Bad arguments: a message on stderr, exit 2.
//! Nothing here needs root: binding a low port is the engine's sysctl's business.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use cordon_fake_vendor::{dns, echo_to_stdout, tls};
use serde_json::json;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

const USAGE: &str = "usage: fake-vendor tls --listen ADDR:PORT [--plain ADDR:PORT]
       fake-vendor dns --listen ADDR:PORT [--answer NAME=ANSWER...]
ANSWER: IP[,IP...] | IPS/IPS[/...] (a sequence) | servfail | empty | nxdomain | silent
        | cname:TARGET (the target's answer follows, as a recursive resolver's would)
        | raw:OWNER/a|aaaa|cname/VALUE[,...] (exactly these records, for every type)
tls reads its certificate chain and key (PEM) from FAKE_VENDOR_CERT and FAKE_VENDOR_KEY, and
with FAKE_VENDOR_KEY_SHA256 (hex) answers 401 to an API request without exactly that key.
tls also serves a fake Anthropic Messages API on POST /v1/messages; a marker in the prompt
picks the scenario: [[cordon-scenario default|never-structured|huge:BYTES|hang|error:STATUS]]
or [[cordon-script [{\"tool\":NAME,\"input\":{...}} | {\"text\":\"...\"}, ...]]].";

#[derive(Debug)]
enum Command {
    Tls {
        listen: SocketAddr,
        plain: Option<SocketAddr>,
    },
    Dns {
        listen: SocketAddr,
        script: dns::Script,
    },
    Help,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("fake-vendor: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Command::Help = command {
        let _ = writeln!(std::io::stdout(), "{USAGE}");
        return ExitCode::SUCCESS;
    }
    let identity = match &command {
        Command::Tls { .. } => match identity_from_env() {
            Ok(identity) => Some(identity),
            Err(message) => {
                eprintln!("fake-vendor: {message}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fake-vendor: the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    echo_to_stdout(true);
    match runtime.block_on(run(command, identity)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fake-vendor: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Bind, say so, serve until told to stop (dropping a server stops it, so each is held to the
/// end of its arm).
async fn run(command: Command, identity: Option<tls::Identity>) -> Result<(), String> {
    // Installed before the listening line: a SIGTERM right after it must stop us, not kill us.
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    match command {
        Command::Tls { listen, plain } => {
            let identity = identity.ok_or("no TLS identity")?;
            let auth = auth_from_env()?;
            let server = tls::start_with(bind_tcp(listen).await?, &identity, auth)
                .map_err(|e| e.to_string())?;
            let plain_server = match plain {
                Some(plain) => {
                    Some(tls::start_plain(bind_tcp(plain).await?).map_err(|e| e.to_string())?)
                }
                None => None,
            };
            listening("tls", server.addr());
            if let Some(plain_server) = &plain_server {
                listening("plain", plain_server.addr());
            }
            stopped(term).await;
        }
        Command::Dns { listen, script } => {
            let server = dns::start(listen, script)
                .await
                .map_err(|e| format!("binding {listen} (UDP and TCP): {e}"))?;
            listening("dns", server.addr());
            stopped(term).await;
        }
        Command::Help => {}
    }
    Ok(())
}

/// `{"fake_vendor":"listening","KIND":"ADDR:PORT"}`: the actual address (a port 0 resolved).
fn listening(kind: &str, addr: SocketAddr) {
    // Keys in this order (a serde_json map would sort them), for a log grepped as text.
    let line = format!(
        r#"{{"fake_vendor":"listening",{}:{}}}"#,
        json!(kind),
        json!(addr.to_string())
    );
    // Written, not println!: a closed stdout is no reason to panic.
    let _ = writeln!(std::io::stdout(), "{line}");
}

async fn bind_tcp(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("binding {addr}: {e}"))
}

/// SIGTERM (`docker stop`: as PID 1 there is no default action, so without this the engine waits
/// out its grace period) or SIGINT.
async fn stopped(term: Option<tokio::signal::unix::Signal>) {
    let Some(mut term) = term else {
        // No handler: Ctrl-C alone, or forever.
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `FAKE_VENDOR_KEY_SHA256`: the digest (lowercase hex) of the one key the API takes; unset, it
/// takes any.
fn auth_from_env() -> Result<Option<tls::Auth>, String> {
    match std::env::var("FAKE_VENDOR_KEY_SHA256") {
        Err(_) => Ok(None),
        Ok(hex) => tls::Auth::from_hex(&hex)
            .map(Some)
            .ok_or_else(|| "FAKE_VENDOR_KEY_SHA256: not 64 lowercase hex digits".to_owned()),
    }
}

fn identity_from_env() -> Result<tls::Identity, String> {
    let read = |name: &str| {
        std::env::var(name).map_err(|e| format!("{name}: {e} (the PEM text itself, not a path)"))
    };
    Ok(tls::Identity {
        cert_pem: read("FAKE_VENDOR_CERT")?,
        key_pem: read("FAKE_VENDOR_KEY")?,
    })
}

fn parse(args: &[String]) -> Result<Command, String> {
    let Some((mode, rest)) = args.split_first() else {
        return Err("no command".to_owned());
    };
    match mode.as_str() {
        "-h" | "--help" | "help" => Ok(Command::Help),
        "tls" => parse_tls(rest),
        "dns" => parse_dns(rest),
        other => Err(format!("unknown command {other:?}")),
    }
}

fn parse_tls(args: &[String]) -> Result<Command, String> {
    let mut listen = None;
    let mut plain = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => set_once(&mut listen, "--listen", addr(args.next(), "--listen")?)?,
            "--plain" => set_once(&mut plain, "--plain", addr(args.next(), "--plain")?)?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Command::Tls {
        listen: listen.ok_or("tls needs --listen ADDR:PORT")?,
        plain,
    })
}

fn parse_dns(args: &[String]) -> Result<Command, String> {
    let mut listen = None;
    let mut script = dns::Script::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        match arg.as_str() {
            "--listen" => set_once(&mut listen, "--listen", addr(args.get(i), "--listen")?)?,
            "--answer" => {
                let mut taken = 0;
                while let Some(answer) = args.get(i).filter(|a| !a.starts_with("--")) {
                    script = script.parse_arg(answer).map_err(|e| e.to_string())?;
                    i += 1;
                    taken += 1;
                }
                if taken == 0 {
                    return Err("--answer needs NAME=ANSWER".to_owned());
                }
                continue;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
        // --listen took its value.
        i += 1;
    }
    Ok(Command::Dns {
        listen: listen.ok_or("dns needs --listen ADDR:PORT")?,
        script,
    })
}

fn addr(value: Option<&String>, flag: &str) -> Result<SocketAddr, String> {
    let value = value.ok_or_else(|| format!("{flag} needs ADDR:PORT"))?;
    value
        .parse()
        .map_err(|_| format!("{flag} {value:?} is not an IP:PORT address"))
}

fn set_once<T>(slot: &mut Option<T>, flag: &str, value: T) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("{flag} given twice"));
    }
    *slot = Some(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn m0_tls_and_dns_arguments_parse() {
        let Ok(Command::Tls { listen, plain }) =
            parse(&args("tls --listen 0.0.0.0:443 --plain [::]:80"))
        else {
            panic!("tls did not parse");
        };
        assert_eq!(listen, "0.0.0.0:443".parse().unwrap());
        assert_eq!(plain, Some("[::]:80".parse().unwrap()));
        let Ok(Command::Dns { listen, script }) = parse(&args(
            "dns --answer a.test=192.0.2.1 b.test=silent --listen 127.0.0.1:53 --answer c.test=nxdomain d.test=cname:a.test e.test=raw:e.test/cname/x.test",
        )) else {
            panic!("dns did not parse");
        };
        assert_eq!(listen, "127.0.0.1:53".parse().unwrap());
        assert_eq!(
            script.to_args(),
            [
                "a.test=192.0.2.1",
                "b.test=silent",
                "c.test=nxdomain",
                "d.test=cname:a.test",
                "e.test=raw:e.test/cname/x.test"
            ]
        );
        assert!(matches!(
            parse(&args("dns --listen 127.0.0.1:53")),
            Ok(Command::Dns { .. })
        ));
        assert!(matches!(parse(&args("--help")), Ok(Command::Help)));
    }

    #[test]
    fn m1_bad_arguments_are_refused() {
        for bad in [
            "",
            "http --listen 127.0.0.1:1",
            "tls",
            "tls --listen",
            "tls --listen localhost:443",
            "tls --listen 127.0.0.1",
            "tls --listen 127.0.0.1:1 --listen 127.0.0.1:2",
            "tls --listen 127.0.0.1:1 --verbose",
            "dns --answer a.test=192.0.2.1",
            "dns --listen 127.0.0.1:53 --answer",
            "dns --listen 127.0.0.1:53 --answer --listen 127.0.0.1:54",
            "dns --listen 127.0.0.1:53 --answer a.test",
            "dns --listen 127.0.0.1:53 --answer a.test=nope",
            "dns --listen 127.0.0.1:53 stray",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?} parsed");
        }
    }
}
