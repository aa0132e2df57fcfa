//! `cordon-egress`: an invocation's egress proxy, PID 1 of its own FROM-scratch container (a
//! read-only root, no capabilities, not root, on the invocation's bridge network). It serves the
//! rules of [`cordon_egress`] on the unix socket `--listen` names ([`cordon_egress::args`]), logs
//! JSON lines on stdout ([`cordon_egress::journal`]: the attestation once the socket is bound,
//! then one line per connection, then the line saying what stopped it), and ends every tunnel and
//! exits 0 on SIGTERM or SIGINT (as PID 1 a signal without a handler would be ignored) or at the
//! end of `--lifetime-s`, removing its socket if it is still the one it bound. Refused arguments
//! exit 2, a proxy that cannot serve exits 1.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use cordon_egress::args::{self, Command, ProxyArgs};
use cordon_egress::journal;
use cordon_egress::proxy::{self, Config, NoResolver, Observe, Report, Resolve};
use cordon_egress::resolver::UpstreamResolver;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

fn main() -> ExitCode {
    let args = match args::parse(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            emit(args::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Proxy(args)) => args,
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

async fn serve(args: ProxyArgs) -> ExitCode {
    // The invocation's deadline counts from the start.
    let deadline = args.lifetime.map(|lifetime| Instant::now() + lifetime);
    // The handlers first: a signal that comes once the socket is there is handled.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("cordon-egress: no signal handler: {error}");
            return ExitCode::FAILURE;
        }
    };
    let resolver: Arc<dyn Resolve> = match args.resolver {
        None => Arc::new(NoResolver),
        Some(upstream) => match UpstreamResolver::new(upstream) {
            Ok(resolver) => Arc::new(resolver),
            Err(error) => {
                eprintln!("cordon-egress: --resolver {upstream}: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    let stopped_by = OnceLock::new();
    let shutdown = async {
        let by = tokio::select! {
            _ = term.recv() => "sigterm",
            _ = int.recv() => "sigint",
            () = until(deadline) => "lifetime",
        };
        let _ = stopped_by.set(by);
    };
    let config = Arc::new(args.config());
    let observer = Arc::new(Lines {
        config: config.clone(),
        resolver: args.resolver,
    });
    match proxy::serve_unix_with(&args.socket, config, resolver, shutdown, observer).await {
        Ok(()) => {
            emit(&journal::stopped(
                stopped_by.get().copied().unwrap_or("sigterm"),
            ));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "cordon-egress: serving on {}: {error}",
                args.socket.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// Complete at `deadline`, or never.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The log: each event as one JSON line on stdout.
struct Lines {
    config: Arc<Config>,
    resolver: Option<SocketAddr>,
}

impl Observe for Lines {
    fn listening(&self, path: &Path) {
        emit(&journal::listening(path, &self.config, self.resolver));
    }

    fn ended(&self, report: &Report) {
        emit(&journal::connection(report));
    }
}

/// Write one line to stdout, whole, and flush it (a closed stdout is not a reason to stop).
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
