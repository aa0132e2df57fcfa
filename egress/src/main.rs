//! `cordon-egress`: an invocation's egress proxy, PID 1 of its own FROM-scratch container (a
//! read-only root, no capabilities, not root, on the invocation's bridge network). It serves the
//! rules of [`cordon_egress`] on the unix socket `--listen` names ([`cordon_egress::args`]), logs
//! JSON lines on stdout ([`cordon_egress::journal`]: the attestation once the socket is bound,
//! then one line per connection, then the line saying what stopped it), and ends every tunnel and
//! exits 0 on SIGTERM or SIGINT (as PID 1 a signal without a handler would be ignored) or at the
//! end of `--lifetime-s`, removing its socket if it is still the one it bound. Refused arguments
//! exit 2, a proxy that cannot serve exits 1.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use std::process::ExitCode;

use cordon_egress::args::{self, Command};
use cordon_egress::serve::{emit, serve};

fn main() -> ExitCode {
    let args = match args::parse(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            emit(args::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Proxy(args)) => *args,
        Err(error) => {
            eprintln!("cordon-egress: {error}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cordon-egress: no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(args))
}
