//! cordon-mcp: the agent's side of approved commands. The vendor CLI starts it over stdio (its
//! `--mcp-config`); it offers one tool, [`cordon_contract::command::TOOL`], whose only argument is the name of a command on
//! the offered list, and forwards that name to the dispatcher's socket. It holds no argv, starts
//! no process and reads nothing but the list: run by hand, it gives nothing the tool does not.
//!
//! `cordon-mcp [--offered PATH] [--socket PATH]` (defaults: [`OFFERED_FILE`], [`SOCKET`]). A bad
//! command line or a bad list: exit 2 before any message is read. The end of stdin: exit 0.
//!
//! - `offered.rs`: reading and checking the list;
//! - `rpc.rs`: the protocol, a pure function from a message to its reply;
//! - `stdio.rs`: the transport, bounded lines in and replies out;
//! - `socket.rs`: the dispatcher's socket.

mod offered;
mod rpc;
mod socket;
mod stdio;

#[cfg(test)]
mod scratch_tests;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use cordon_contract::command::{OFFERED_FILE, SOCKET};

const USAGE: &str = "usage: cordon-mcp [--offered PATH] [--socket PATH]";

/// Where the list and the socket are.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    offered: PathBuf,
    socket: PathBuf,
}

/// The command line (without the program's name).
fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut offered = None;
    let mut socket = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let slot = match arg.to_str() {
            Some("--offered") => &mut offered,
            Some("--socket") => &mut socket,
            _ => return Err(format!("unexpected argument {arg:?}")),
        };
        if slot.is_some() {
            return Err(format!("{arg:?} given twice"));
        }
        match args.next() {
            Some(path) if !path.is_empty() => *slot = Some(PathBuf::from(path)),
            _ => return Err(format!("{arg:?} takes a path")),
        }
    }
    Ok(Args {
        offered: offered.unwrap_or_else(|| PathBuf::from(OFFERED_FILE)),
        socket: socket.unwrap_or_else(|| PathBuf::from(SOCKET)),
    })
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("cordon-mcp: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let offered = match offered::load(&args.offered) {
        Ok(offered) => offered,
        Err(error) => {
            eprintln!("cordon-mcp: the offered list: {error}");
            return ExitCode::from(2);
        }
    };
    let server = rpc::Server::new(offered);
    let mut dispatcher = socket::Socket::new(args.socket);
    match stdio::serve(
        std::io::stdin().lock(),
        std::io::stdout().lock(),
        &server,
        &mut dispatcher,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cordon-mcp: stdio: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
