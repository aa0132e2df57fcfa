//! `cordon egress proxy`: the invocation proxy's own program ([`cordon_egress::serve`]) outside a
//! container, on a unix socket, so a person (or a test) can throw raw bytes at the rules. It needs
//! no engine, takes exactly the arguments the proxy's container is given (parsed by the proxy's
//! own parser, [`cordon_egress::args`]), and logs the same JSON lines on stdout: the attestation,
//! then one line per connection with its refusal id.

use std::ffi::OsString;
use std::process::ExitCode;

use cordon_egress::args::{self, Command};

#[derive(Debug, clap::Subcommand)]
pub enum EgressAction {
    /// Serve the egress proxy on a unix socket until interrupted:
    /// `--listen unix:PATH [--allow NAME[:PORT]]... [--map NAME=IP:PORT]... [--resolver IP:PORT]
    /// [--host-address IP]... [--max-tunnels N] [--lifetime-s N] [--skip RULE]...`
    /// (`cordon egress proxy --help` prints the proxy's own usage).
    Proxy {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

pub async fn run(action: EgressAction) -> anyhow::Result<ExitCode> {
    let EgressAction::Proxy { args } = action;
    match args::parse(std::iter::once(OsString::from("proxy")).chain(args)) {
        Ok(Command::Help) => {
            println!("{}", args::USAGE);
            Ok(ExitCode::SUCCESS)
        }
        Ok(Command::Proxy(args)) => Ok(cordon_egress::serve::serve(*args).await),
        Err(error) => {
            eprintln!("cordon egress proxy: {error}\n{}", args::USAGE);
            Ok(ExitCode::from(2))
        }
    }
}
