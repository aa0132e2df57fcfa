//! The `cordon-egress` binary's arguments, parsed by hand (the crate carries no CLI library) and
//! each value validated by the library's own parser:
//!
//! ```text
//! cordon-egress proxy --listen unix:PATH [--allow NAME[:PORT]]... [--map NAME=IP:PORT]...
//!     [--resolver IP:PORT] [--host-address IP]... [--max-tunnels N] [--lifetime-s N]
//!     [--skip RULE]... [--terminate NAME:PORT --vault DIR --credential-header KIND
//!     [--max-requests N] [--max-request-bytes N] [--max-response-bytes N]]
//! ```
//!
//! A value follows its flag as the next argument or after `=` (`--allow=NAME`); a value never
//! starts with `--` (that is a missing value). `--listen`, `--resolver`, `--max-tunnels` and
//! `--lifetime-s` may be given once; `--allow`, `--map`, `--host-address` and `--skip` are
//! repeatable, but a name mapped twice or a rule skipped twice is refused. Whatever is refused is
//! an [`ArgError`], which the binary reports on stderr with exit status 2.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::allowlist::{parse_port, Allowlist, Mapping};
use crate::decide::{Rule, Rules};
use crate::host::Name;
use crate::proxy::Config;
use crate::vault::TerminateArgs;
use crate::vendor::{Budget, CredentialHeader, MAX_BUDGET};

/// The usage text (`--help`, and after a refusal).
pub const USAGE: &str = "\
usage: cordon-egress proxy --listen unix:PATH [--allow NAME[:PORT]]... [--map NAME=IP:PORT]...
                           [--resolver IP:PORT] [--host-address IP]... [--max-tunnels N]
                           [--lifetime-s N] [--skip RULE]...

  --listen unix:PATH     the unix socket to serve on (a stale socket there is replaced)
  --allow NAME[:PORT]    an allowed name, or *.NAME for its strict subdomains (port 443 by default)
  --map NAME=IP:PORT     dial NAME at IP:PORT instead of resolving it (tests and diagnosis)
  --resolver IP:PORT     the one DNS server unmapped names are asked of (none: they are refused)
  --host-address IP      an address of the host's, never dialed
  --max-tunnels N        the most connections at once (32 by default)
  --lifetime-s N         end every tunnel and exit after N seconds (no limit by default)
  --skip RULE            leave out one rule (allowlist, address, sni, method, cname, terminate,
                         vendor-path, vendor-credential, vendor-budget, host-bound): gate cases
                         only
  --terminate NAME:PORT  terminate TLS for this allowed vendor host and check, swap and record
                         each request (with --vault and --credential-header)
  --vault DIR            the terminator's inputs: credential, sentinel, leaf.pem, leaf-key.pem,
                         ca.pem, upstream-ca.pem (optional)
  --credential-header K  x-api-key or bearer: where the sentinel and the credential travel
  --max-requests N, --max-request-bytes N, --max-response-bytes N
                         the invocation's budgets at the terminated host (generous by default)";

/// The most connections a proxy may be told to handle at once.
pub const MAX_TUNNELS: usize = 4096;
/// The longest lifetime a proxy may be given (a year).
pub const MAX_LIFETIME_S: u64 = 365 * 24 * 60 * 60;
/// The longest socket path (`sun_path` holds 108 bytes, its terminating NUL included).
pub const MAX_SOCKET_PATH: usize = 107;

/// What the binary was asked to do.
#[derive(Debug, Clone)]
pub enum Command {
    /// Print [`USAGE`] and exit 0.
    Help,
    /// Serve the proxy (boxed: the arguments are large beside `Help`).
    Proxy(Box<ProxyArgs>),
}

/// `cordon-egress proxy`'s arguments, validated.
#[derive(Debug, Clone)]
pub struct ProxyArgs {
    /// The socket to serve on (`--listen unix:PATH`).
    pub socket: PathBuf,
    /// `--allow`, `--map`, `--host-address` and `--skip`.
    pub rules: Rules,
    /// `--resolver`; `None`: every unmapped name is refused (`egress-resolve`).
    pub resolver: Option<SocketAddr>,
    /// `--max-tunnels` (the runtime's default when not given).
    pub max_tunnels: usize,
    /// `--lifetime-s`; `None`: no limit.
    pub lifetime: Option<Duration>,
    /// `--terminate` and what goes with it.
    pub terminate: Option<TerminateArgs>,
}

impl ProxyArgs {
    /// The runtime's configuration: these rules and bound, the other bounds by default.
    pub fn config(&self) -> Config {
        Config {
            max_tunnels: self.max_tunnels,
            ..Config::new(self.rules.clone())
        }
    }
}

/// Why the arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError(pub String);

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

fn refuse<T>(message: impl Into<String>) -> Result<T, ArgError> {
    Err(ArgError(message.into()))
}

/// Parse the arguments after the program's name.
pub fn parse<I, S>(args: I) -> Result<Command, ArgError>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let args = args
        .into_iter()
        .map(|arg| {
            arg.into().into_string().map_err(|arg| {
                ArgError(format!("argument {:?} is not UTF-8", arg.to_string_lossy()))
            })
        })
        .collect::<Result<Vec<String>, ArgError>>()?;
    let mut args = args.into_iter();
    match args.next().as_deref() {
        None => refuse("no command (the one command is `proxy`)"),
        Some("--help" | "-h" | "help") => Ok(Command::Help),
        Some("proxy") => proxy(args),
        Some(other) => refuse(format!(
            "unknown command {other:?} (the one command is `proxy`)"
        )),
    }
}

/// The flags `proxy` takes; each takes a value.
const FLAGS: [&str; 14] = [
    "--listen",
    "--allow",
    "--map",
    "--resolver",
    "--host-address",
    "--max-tunnels",
    "--lifetime-s",
    "--skip",
    "--terminate",
    "--vault",
    "--credential-header",
    "--max-requests",
    "--max-request-bytes",
    "--max-response-bytes",
];

/// What `--terminate` and its companions gave, before they are checked together.
#[derive(Default)]
struct Terminating {
    target: Option<(Name, u16)>,
    vault: Option<PathBuf>,
    header: Option<CredentialHeader>,
    requests: Option<u64>,
    request_bytes: Option<u64>,
    response_bytes: Option<u64>,
}

impl Terminating {
    /// Take one of its flags; false when `flag` is not one.
    fn take(&mut self, flag: &str, value: &str) -> Result<bool, ArgError> {
        let once = |given: bool| {
            if given {
                refuse(format!("{flag} given twice"))
            } else {
                Ok(())
            }
        };
        match flag {
            "--terminate" => {
                once(self.target.is_some())?;
                let (name, port) = value
                    .rsplit_once(':')
                    .ok_or_else(|| ArgError(format!("--terminate {value:?}: takes NAME:PORT")))?;
                let name = Name::parse(name)
                    .map_err(|error| ArgError(format!("--terminate {value:?}: {error}")))?;
                let port = parse_port(port)
                    .map_err(|error| ArgError(format!("--terminate {value:?}: {error}")))?;
                self.target = Some((name, port));
            }
            "--vault" => {
                once(self.vault.is_some())?;
                if !value.starts_with('/') {
                    return refuse(format!("--vault {value:?}: not an absolute path"));
                }
                self.vault = Some(PathBuf::from(value));
            }
            "--credential-header" => {
                once(self.header.is_some())?;
                self.header = Some(match value {
                    "x-api-key" => CredentialHeader::ApiKey,
                    "bearer" => CredentialHeader::Bearer,
                    _ => {
                        return refuse(format!(
                            "--credential-header {value:?}: x-api-key or bearer"
                        ))
                    }
                });
            }
            "--max-requests" | "--max-request-bytes" | "--max-response-bytes" => {
                let slot = match flag {
                    "--max-requests" => &mut self.requests,
                    "--max-request-bytes" => &mut self.request_bytes,
                    _ => &mut self.response_bytes,
                };
                once(slot.is_some())?;
                *slot = Some(count(flag, value, MAX_BUDGET)?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checked together: all of target, vault and header, or none of them and no budget; the
    /// target on the allowlist.
    fn finish(self, allowlist: &Allowlist) -> Result<Option<TerminateArgs>, ArgError> {
        let budgets = self.requests.is_some()
            || self.request_bytes.is_some()
            || self.response_bytes.is_some();
        let (target, vault, header) = match (self.target, self.vault, self.header) {
            (None, None, None) if !budgets => return Ok(None),
            (Some(target), Some(vault), Some(header)) => (target, vault, header),
            _ => return refuse(
                "--terminate, --vault and --credential-header go together (and budgets need them)",
            ),
        };
        let (name, port) = target;
        if allowlist.check(&name, port).is_err() {
            return refuse(format!("--terminate {name}:{port}: not on the allowlist"));
        }
        let default = Budget::default();
        Ok(Some(TerminateArgs {
            name,
            port,
            vault,
            header,
            budget: Budget {
                requests: self.requests.unwrap_or(default.requests),
                request_bytes: self.request_bytes.unwrap_or(default.request_bytes),
                response_bytes: self.response_bytes.unwrap_or(default.response_bytes),
            },
        }))
    }
}

fn proxy(mut args: impl Iterator<Item = String>) -> Result<Command, ArgError> {
    let mut listen: Option<PathBuf> = None;
    let mut allow: Vec<String> = Vec::new();
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut resolver: Option<SocketAddr> = None;
    let mut host_own: Vec<IpAddr> = Vec::new();
    let mut max_tunnels: Option<usize> = None;
    let mut lifetime: Option<Duration> = None;
    let mut skip: BTreeSet<Rule> = BTreeSet::new();
    let mut terminating = Terminating::default();
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(Command::Help);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        if !FLAGS.contains(&flag.as_str()) {
            return refuse(if flag.starts_with('-') {
                format!("unknown flag {flag:?}")
            } else {
                format!("unexpected argument {flag:?}")
            });
        }
        let value = match inline {
            Some(value) => value,
            None => match args.next() {
                Some(value) if !value.starts_with("--") => value,
                _ => return refuse(format!("{flag} needs a value")),
            },
        };
        if terminating.take(&flag, &value)? {
            continue;
        }
        let once = |given: bool| {
            if given {
                refuse(format!("{flag} given twice"))
            } else {
                Ok(())
            }
        };
        match flag.as_str() {
            "--listen" => {
                once(listen.is_some())?;
                listen = Some(socket_path(&value)?);
            }
            "--allow" => allow.push(value),
            "--map" => {
                let mapping =
                    Mapping::parse(&value).map_err(|error| ArgError(format!("--map: {error}")))?;
                if mappings.iter().any(|m| m.name == mapping.name) {
                    return refuse(format!("--map: {} is mapped twice", mapping.name));
                }
                mappings.push(mapping);
            }
            "--resolver" => {
                once(resolver.is_some())?;
                resolver = Some(upstream(&value)?);
            }
            "--host-address" => {
                host_own.push(value.parse().map_err(|_| {
                    ArgError(format!("--host-address {value:?}: not an IP address"))
                })?)
            }
            "--max-tunnels" => {
                once(max_tunnels.is_some())?;
                let n = count(&flag, &value, MAX_TUNNELS as u64)?;
                max_tunnels = Some(usize::try_from(n).unwrap_or(MAX_TUNNELS));
            }
            "--lifetime-s" => {
                once(lifetime.is_some())?;
                lifetime = Some(Duration::from_secs(count(&flag, &value, MAX_LIFETIME_S)?));
            }
            "--skip" => {
                let rule = Rule::parse(&value).ok_or_else(|| {
                    ArgError(format!(
                        "--skip {value:?}: not a rule ({})",
                        Rule::ALL.map(Rule::as_str).join(", ")
                    ))
                })?;
                if !skip.insert(rule) {
                    return refuse(format!("--skip {rule} given twice"));
                }
            }
            _ => return refuse(format!("unknown flag {flag:?}")),
        }
    }
    let socket = listen.ok_or_else(|| ArgError("--listen unix:PATH is required".into()))?;
    let allowlist =
        Allowlist::parse(&allow).map_err(|error| ArgError(format!("--allow: {error}")))?;
    let terminate = terminating.finish(&allowlist)?;
    Ok(Command::Proxy(Box::new(ProxyArgs {
        socket,
        rules: Rules {
            allowlist,
            mappings,
            host_own,
            skip,
        },
        resolver,
        max_tunnels: max_tunnels.unwrap_or_else(|| Config::default().max_tunnels),
        lifetime,
        terminate,
    })))
}

/// `unix:PATH`, the path non-empty and short enough for a socket address.
fn socket_path(value: &str) -> Result<PathBuf, ArgError> {
    let Some(path) = value.strip_prefix("unix:") else {
        return refuse(format!("--listen {value:?}: takes unix:PATH"));
    };
    if path.is_empty() {
        return refuse("--listen unix:PATH: the path is empty");
    }
    if path.len() > MAX_SOCKET_PATH {
        return refuse(format!(
            "--listen {value:?}: a socket path holds at most {MAX_SOCKET_PATH} bytes"
        ));
    }
    Ok(PathBuf::from(path))
}

/// `IP:PORT` (`[v6]:PORT`), a real address and port.
fn upstream(value: &str) -> Result<SocketAddr, ArgError> {
    let addr: SocketAddr = value
        .parse()
        .map_err(|_| ArgError(format!("--resolver {value:?}: not an IP:PORT")))?;
    if addr.port() == 0 || addr.ip().is_unspecified() {
        return refuse(format!(
            "--resolver {value:?}: not an address a query can go to"
        ));
    }
    Ok(addr)
}

/// A count: plain decimal (no sign, no leading zero), 1 to `max`.
fn count(flag: &str, value: &str, max: u64) -> Result<u64, ArgError> {
    let plain = !value.is_empty()
        && value.len() <= 20
        && value.bytes().all(|b| b.is_ascii_digit())
        && !value.starts_with('0');
    match value.parse::<u64>() {
        Ok(n) if plain && n <= max => Ok(n),
        _ => refuse(format!(
            "{flag} {value:?}: not a whole number from 1 to {max}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn proxy_args(args: &[&str]) -> ProxyArgs {
        let mut all = vec!["proxy", "--listen", "unix:/run/e.sock"];
        all.extend_from_slice(args);
        match parse(all) {
            Ok(Command::Proxy(args)) => *args,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn refused(args: &[&str]) -> String {
        match parse(args.iter().copied()) {
            Err(ArgError(message)) => message,
            Ok(command) => panic!("{args:?} was accepted: {command:?}"),
        }
    }

    #[test]
    fn the_least_is_a_socket_with_nothing_allowed() {
        let args = proxy_args(&[]);
        assert_eq!(args.socket, PathBuf::from("/run/e.sock"));
        assert!(args.rules.allowlist.is_empty());
        assert!(args.rules.mappings.is_empty());
        assert!(args.rules.host_own.is_empty());
        assert!(args.rules.skip.is_empty());
        assert_eq!(args.resolver, None);
        assert_eq!(args.max_tunnels, 32);
        assert_eq!(args.lifetime, None);
        assert_eq!(args.config().max_tunnels, 32);
    }

    #[test]
    fn every_flag_is_read() {
        let args = proxy_args(&[
            "--allow",
            "api.anthropic.com",
            "--allow=*.example.com:8443",
            "--map",
            "fake.vendor.test=172.18.0.5:8443",
            "--map=v6.test=[fd00::5]:443",
            "--resolver",
            "172.18.0.1:53",
            "--host-address",
            "172.17.0.1",
            "--host-address=fd00::1",
            "--max-tunnels",
            "8",
            "--lifetime-s=90",
            "--skip",
            "sni",
            "--skip=allowlist",
        ]);
        let allow: Vec<String> = args
            .rules
            .allowlist
            .entries()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(allow, ["api.anthropic.com:443", "*.example.com:8443"]);
        let map: Vec<String> = args
            .rules
            .mappings
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            map,
            ["fake.vendor.test=172.18.0.5:8443", "v6.test=[fd00::5]:443"]
        );
        assert_eq!(args.resolver, Some("172.18.0.1:53".parse().unwrap()));
        assert_eq!(
            args.rules.host_own,
            [
                "172.17.0.1".parse::<IpAddr>().unwrap(),
                "fd00::1".parse().unwrap()
            ]
        );
        assert_eq!(args.max_tunnels, 8);
        assert_eq!(args.config().max_tunnels, 8);
        assert_eq!(args.lifetime, Some(Duration::from_secs(90)));
        assert_eq!(
            args.rules.skip.into_iter().collect::<Vec<_>>(),
            [Rule::Allowlist, Rule::Sni]
        );
        // Every rule may be skipped, and the set keeps the rules' order.
        let reversed: Vec<&str> = Rule::ALL
            .iter()
            .rev()
            .flat_map(|rule| ["--skip", rule.as_str()])
            .collect();
        let all = proxy_args(&reversed);
        assert_eq!(all.rules.skip.into_iter().collect::<Vec<_>>(), Rule::ALL);
        // The flags may come in any order, --listen last too.
        assert!(matches!(
            parse(["proxy", "--allow", "a.test", "--listen", "unix:rel.sock"]),
            Ok(Command::Proxy(args)) if args.socket == Path::new("rel.sock")
        ));
    }

    #[test]
    fn help_is_asked_for() {
        for args in [
            vec!["--help"],
            vec!["-h"],
            vec!["help"],
            vec!["proxy", "--help"],
        ] {
            assert!(matches!(parse(args), Ok(Command::Help)));
        }
        assert!(USAGE.contains("--skip RULE"));
    }

    #[test]
    fn commands_flags_and_missing_values_are_refused() {
        for (args, want) in [
            (vec![], "no command"),
            (vec!["serve"], "unknown command"),
            (vec!["proxy"], "--listen unix:PATH is required"),
            (
                vec!["proxy", "--allow", "a.test"],
                "--listen unix:PATH is required",
            ),
            (
                vec!["proxy", "--listen", "unix:/s", "--bogus", "x"],
                "unknown flag \"--bogus\"",
            ),
            (
                vec!["proxy", "--listen", "unix:/s", "-v"],
                "unknown flag \"-v\"",
            ),
            (
                vec!["proxy", "--listen", "unix:/s", "stray"],
                "unexpected argument \"stray\"",
            ),
            (vec!["proxy", "--listen"], "--listen needs a value"),
            (
                vec!["proxy", "--listen", "unix:/s", "--allow"],
                "--allow needs a value",
            ),
            (
                vec![
                    "proxy",
                    "--listen",
                    "unix:/s",
                    "--allow",
                    "--map",
                    "a=1.2.3.4:5",
                ],
                "--allow needs a value",
            ),
            (
                vec!["proxy", "--listen", "unix:/s", "--skip"],
                "--skip needs a value",
            ),
            (
                vec!["proxy", "--listen", "unix:/s", "--resolver"],
                "--resolver needs a value",
            ),
        ] {
            let got = refused(&args);
            assert!(got.contains(want), "{args:?}: {got}");
        }
    }

    #[test]
    fn each_value_is_validated_by_its_parser() {
        let base = ["proxy", "--listen", "unix:/s"];
        let long = format!("unix:/{}", "a".repeat(MAX_SOCKET_PATH));
        let longest = format!("unix:/{}", "a".repeat(MAX_SOCKET_PATH - 1));
        assert!(parse(["proxy", "--listen", longest.as_str()]).is_ok());
        let many: Vec<String> = (0..33)
            .flat_map(|i| ["--allow".into(), format!("h{i}.test")])
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (vec!["proxy", "--listen", "/s"], "takes unix:PATH"),
            (
                vec!["proxy", "--listen", "tcp:1.2.3.4:5"],
                "takes unix:PATH",
            ),
            (vec!["proxy", "--listen", "unix:"], "the path is empty"),
            (vec!["proxy", "--listen", long.as_str()], "at most"),
            (
                vec!["proxy", "--listen", "unix:/a", "--listen", "unix:/b"],
                "--listen given twice",
            ),
            (
                vec!["--allow", "API.anthropic.com"],
                "--allow: allowlist entry",
            ),
            (vec!["--allow", "127.0.0.1"], "--allow: allowlist entry"),
            (vec!["--allow", "a.test:0443"], "--allow: allowlist entry"),
            (vec!["--allow="], "--allow: allowlist entry"),
            (many, "more entries"),
            (vec!["--map", "a.test"], "--map: "),
            (vec!["--map", "a.test=host:443"], "--map: "),
            (vec!["--map", "a.test=1.2.3.4:0"], "--map: "),
            (
                vec!["--map", "a.test=1.2.3.4:5", "--map", "a.test=1.2.3.4:6"],
                "a.test is mapped twice",
            ),
            (vec!["--resolver", "1.2.3.4"], "not an IP:PORT"),
            (vec!["--resolver", "dns.test:53"], "not an IP:PORT"),
            (vec!["--resolver", "1.2.3.4:0"], "not an address"),
            (vec!["--resolver", "0.0.0.0:53"], "not an address"),
            (
                vec!["--resolver", "1.2.3.4:53", "--resolver", "1.2.3.4:53"],
                "--resolver given twice",
            ),
            (vec!["--host-address", "172.17.0.1/16"], "not an IP address"),
            (vec!["--host-address", "localhost"], "not an IP address"),
            (vec!["--max-tunnels", "0"], "--max-tunnels \"0\""),
            (vec!["--max-tunnels", "08"], "--max-tunnels \"08\""),
            (vec!["--max-tunnels", "+8"], "--max-tunnels \"+8\""),
            (vec!["--max-tunnels", "-1"], "--max-tunnels \"-1\""),
            (vec!["--max-tunnels", "4097"], "--max-tunnels \"4097\""),
            (
                vec!["--max-tunnels", "8", "--max-tunnels", "8"],
                "--max-tunnels given twice",
            ),
            (vec!["--lifetime-s", "0"], "--lifetime-s \"0\""),
            (vec!["--lifetime-s", "1.5"], "--lifetime-s \"1.5\""),
            (
                vec!["--lifetime-s", "99999999999999999999999"],
                "--lifetime-s",
            ),
            (vec!["--lifetime-s", "31536001"], "--lifetime-s"),
            (
                vec!["--lifetime-s", "1", "--lifetime-s", "2"],
                "--lifetime-s given twice",
            ),
            (vec!["--skip", "SNI"], "not a rule"),
            (vec!["--skip", "everything"], "not a rule"),
            (
                vec!["--skip", "sni", "--skip", "sni"],
                "--skip sni given twice",
            ),
        ];
        for (args, want) in cases {
            let all: Vec<&str> = if args.first() == Some(&"proxy") {
                args.clone()
            } else {
                base.iter().copied().chain(args.iter().copied()).collect()
            };
            let got = refused(&all);
            assert!(got.contains(want), "{all:?}: {got}");
        }
        assert_eq!(
            proxy_args(&["--lifetime-s", "31536000"]).lifetime,
            Some(Duration::from_secs(MAX_LIFETIME_S))
        );
        assert_eq!(
            proxy_args(&["--max-tunnels", "4096"]).max_tunnels,
            MAX_TUNNELS
        );
    }

    #[test]
    fn arguments_that_are_not_utf8_are_refused() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'u', b'n', b'i', b'x', b':', 0xff]);
        let got = parse([OsString::from("proxy"), OsString::from("--listen"), bad]);
        assert!(matches!(got, Err(ArgError(m)) if m.contains("not UTF-8")));
    }
}
