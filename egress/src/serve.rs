//! The proxy as a program: serve [`ProxyArgs`] on its socket until SIGTERM, SIGINT or the end of
//! its lifetime, logging JSON lines on stdout ([`crate::journal`]): the attestation once the
//! socket is bound, one line per connection, then what stopped it. The `cordon-egress` binary
//! (PID 1 of the proxy's container) and `cordon egress proxy` (diagnosis on the host) both run
//! this.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::args::ProxyArgs;
use crate::decide::Rule;
use crate::journal;
use crate::proxy::{self, Config, NoResolver, Observe, Report, Resolve};
use crate::resolver::UpstreamResolver;
use crate::terminate::Call;
use crate::vendor::Skipped;

/// Serve until stopped: 0 when stopped, 1 when it could not serve.
pub async fn serve(args: ProxyArgs) -> ExitCode {
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
        // The chain rule lives in the resolver: left out, it asks for a CNAME's target itself.
        Some(upstream) => {
            Arc::new(UpstreamResolver::new(upstream).chasing(args.rules.skips(Rule::Cname)))
        }
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
    let mut config = args.config();
    if let Some(terminate) = &args.terminate {
        // A vault that does not come or cannot be read stops the proxy before it attests: the
        // host then gives the agent no policy, and no code of the agent's runs.
        let ready = crate::vault::wait_until_ready(&terminate.vault, crate::vault::WAIT).await;
        let loaded = ready.and_then(|()| crate::vault::load(terminate, Skipped::of(&args.rules)));
        match loaded {
            Ok(termination) => config.terminate = Some(termination),
            Err(error) => {
                eprintln!("cordon-egress: the vault: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let config = Arc::new(config);
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

    fn vendor_call(&self, call: &Call) {
        emit(&journal::vendor_call(call));
    }
}

/// Write one line to stdout, whole, and flush it (a closed stdout is not a reason to stop).
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
