//! `cordon egress proxy`: the invocation proxy's code outside a container, on a unix socket, so a
//! person (or a test) can throw raw bytes at the rules. It needs no engine. Names are reached
//! through `--map`, or resolved by the one upstream `--resolver` names (no system configuration,
//! nothing cached); with neither, any name is refused 502.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cordon_egress::allowlist::{Allowlist, Mapping};
use cordon_egress::decide::Rules;
use cordon_egress::proxy::{self, Config, NoResolver, Resolve};
use cordon_egress::resolver::UpstreamResolver;

#[derive(Debug, clap::Subcommand)]
pub enum EgressAction {
    /// Serve the egress proxy on a unix socket until interrupted (refusals are logged on stderr).
    Proxy(ProxyArgs),
}

#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// Where to listen: `unix:PATH` (a stale socket there is replaced; anything else refuses).
    #[arg(long)]
    listen: String,
    /// An allowed name, `NAME[:PORT]` or `*.NAME[:PORT]` (443 by default; repeatable).
    #[arg(long = "allow")]
    allow: Vec<String>,
    /// Reach NAME at IP:PORT instead of resolving it (tests and diagnosis; repeatable).
    #[arg(long = "map")]
    map: Vec<String>,
    /// An address the proxy must never dial, as the host's own (repeatable).
    #[arg(long = "host-address")]
    host_address: Vec<IpAddr>,
    /// The resolver's upstream, `IP:PORT`: the one DNS server an unmapped name is asked of (A and
    /// AAAA, UDP with TCP on truncation, no resolv.conf, hosts file or search list, nothing
    /// cached). Without it only mapped names are reached (any other name is refused 502).
    #[arg(long)]
    resolver: Option<String>,
}

pub async fn run(action: EgressAction) -> anyhow::Result<ExitCode> {
    let EgressAction::Proxy(args) = action;
    let resolver: Arc<dyn Resolve> = match &args.resolver {
        None => Arc::new(NoResolver),
        Some(upstream) => {
            let addr: SocketAddr = upstream
                .parse()
                .with_context(|| format!("--resolver {upstream}: not an IP:PORT"))?;
            Arc::new(
                UpstreamResolver::new(addr)
                    .map_err(|error| anyhow::anyhow!("--resolver {upstream}: {error}"))?,
            )
        }
    };
    let path: PathBuf = args
        .listen
        .strip_prefix("unix:")
        .map(PathBuf::from)
        .context("--listen takes unix:PATH")?;
    let rules = Rules {
        allowlist: Allowlist::parse(&args.allow)?,
        mappings: args
            .map
            .iter()
            .map(|m| Mapping::parse(m))
            .collect::<Result<_, _>>()?,
        host_own: args.host_address,
        skip: Default::default(),
    };
    eprintln!(
        "cordon: egress proxy on {} for {} (mapped: {}; resolver: {})",
        path.display(),
        list(rules.allowlist.entries()),
        list(&rules.mappings),
        args.resolver.as_deref().unwrap_or("none")
    );
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    proxy::serve_unix(&path, Arc::new(Config::new(rules)), resolver, interrupted)
        .await
        .with_context(|| format!("serving on {}", path.display()))?;
    Ok(ExitCode::SUCCESS)
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "nothing".to_owned();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
