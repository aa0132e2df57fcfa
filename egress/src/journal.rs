//! The proxy binary's log: one JSON object per line on stdout, in a stable shape the host's tests
//! read from the container's log. Every line has `"egress"` first, naming its kind; the keys of
//! each kind are always all present, in this order (`null` where a value is absent).
//!
//! - Once, when the socket is bound and has its mode (the attestation):
//!   `{"egress":"listening","socket":PATH,"allow":[ENTRY...],"map":[MAPPING...],"resolver":"IP:PORT"|null,"host_addresses":[IP...],"max_tunnels":N,"skipped":[RULE...]}`
//!   with each allowlist entry canonical (`name:port`, `*.name:port`), each mapping
//!   `name=ip:port` (`name=[v6]:port`), and the rules left out by their `--skip` names in
//!   [`Rule::ALL`]'s order (`allowlist`, `address`, `sni`, `method`, `cname`).
//! - Once per tunnel that ran (answered 200 and, unless `sni` is left out, passed its ClientHello):
//!   `{"egress":"tunnel","target":"name:port","dialed":"ip:port","up":BYTES,"down":BYTES,"end":END}`
//!   with `up` the bytes client to upstream (the ClientHello included), `down` back, and `END`
//!   one of `closed`, `idle`, `half-close`, `error`, `shutdown` ([`crate::proxy::End::as_str`]).
//! - Once per connection that did not tunnel:
//!   `{"egress":"refused","id":ID,"status":N|null,"target":"name:port"|null,"reason":TEXT}`
//!   with `target` the request's name (canonical) and port as parsed, `null` when the head did not
//!   parse; `status` the HTTP status the client was answered with, `null` when it got none (the
//!   connection was closed unanswered, or after its 200); `reason` free text for people (the
//!   denied address or the resolver's error included), never to be matched on. `ID` is a
//!   [`crate::Rejection`] id (`egress-method`, `egress-target`, `egress-version`,
//!   `egress-head-too-large`, `egress-malformed`, `egress-host`, `egress-port`,
//!   `egress-not-allowed`, `egress-address`, `egress-resolve`, with their statuses) or one of:
//!   [`SNI`] (the tunnel's first bytes were not a ClientHello naming the host: closed after the
//!   200, status `null`), [`UPSTREAM`] (no address connected: 502), [`BUSY`] (over
//!   `max_tunnels`: 503, target `null`), [`HEAD_TIMEOUT`] (no whole head in time: closed, status
//!   `null`), [`CLOSED`] (the client closed before its head ended, or before the 200: status
//!   `null`), [`SHUTDOWN`] (the proxy shut down before the tunnel ran: status `null`).
//!   The attestation also carries `"terminate"`: `null`, or, when the proxy terminates its vendor
//!   host, `{"target":"name:port","header":"x-api-key"|"bearer","ca_sha256":HEX,"budget":{"requests":N,"request_bytes":N,"response_bytes":N},"routes":["METHOD PATH",...]}`.
//! - Once per connection to the terminated vendor host:
//!   `{"egress":"terminated","target":"name:port","dialed":"ip:port","calls":N,"error":TEXT|null}`.
//! - Once per request to the terminated vendor host ([`crate::terminate::Call`]):
//!   `{"egress":"vendor","method":M,"path":PATH,"status":N,"request_bytes":N,"response_bytes":N,"duration_ms":N,"model":TEXT|null,"usage":{...}|null,"refusal":ID|null,"budget":SPEND|null}`
//!   with `PATH` the path alone (never the query), `usage` the token counts the response
//!   reported, `refusal` a `vendor-*` id when cordon refused the request, `budget` the budget
//!   that refused it or cut its response.
//! - Once, last, when the proxy stops on a signal or at the end of its lifetime:
//!   `{"egress":"stopped","by":"sigterm"|"sigint"|"lifetime"}`.

use std::net::SocketAddr;
use std::path::Path;

use serde::Serialize;

use crate::decide::Rule;
use crate::proxy::{Config, Outcome, Report};
use crate::terminate::Call;
use crate::vendor::{CredentialHeader, VENDOR_ROUTES};
use crate::Rejection;

/// The tunnel's first bytes were not a ClientHello naming the CONNECT host.
pub const SNI: &str = "egress-sni";
/// No address of the name could be connected to.
pub const UPSTREAM: &str = "egress-upstream";
/// Over the tunnel bound.
pub const BUSY: &str = "egress-busy";
/// No whole head within the head deadline.
pub const HEAD_TIMEOUT: &str = "egress-head-timeout";
/// The client closed before its head ended or before the 200.
pub const CLOSED: &str = "egress-closed";
/// The proxy shut down before the tunnel ran.
pub const SHUTDOWN: &str = "egress-shutdown";

#[derive(Serialize)]
struct Listening<'a> {
    egress: &'static str,
    socket: &'a str,
    allow: Vec<String>,
    map: Vec<String>,
    resolver: Option<String>,
    host_addresses: Vec<String>,
    max_tunnels: usize,
    skipped: Vec<&'static str>,
    terminate: Option<Terminating>,
}

#[derive(Serialize)]
struct Terminating {
    target: String,
    header: &'static str,
    ca_sha256: String,
    budget: BudgetLine,
    routes: Vec<String>,
}

#[derive(Serialize)]
struct BudgetLine {
    requests: u64,
    request_bytes: u64,
    response_bytes: u64,
}

#[derive(Serialize)]
struct Terminated {
    egress: &'static str,
    target: Option<String>,
    dialed: Option<String>,
    calls: u64,
    error: Option<&'static str>,
}

#[derive(Serialize)]
struct Vendor<'a> {
    egress: &'static str,
    #[serde(flatten)]
    call: &'a Call,
}

#[derive(Serialize)]
struct Tunnel {
    egress: &'static str,
    target: Option<String>,
    dialed: Option<String>,
    up: u64,
    down: u64,
    end: &'static str,
}

#[derive(Serialize)]
struct Refused {
    egress: &'static str,
    id: &'static str,
    status: Option<u16>,
    target: Option<String>,
    reason: String,
}

#[derive(Serialize)]
struct Stopped<'a> {
    egress: &'static str,
    by: &'a str,
}

fn line<T: Serialize>(value: &T) -> String {
    // Serializing these structs (strings, numbers, lists of strings) cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| String::from(r#"{"egress":"unlogged"}"#))
}

/// The attestation line: what this proxy was started with.
pub fn listening(socket: &Path, config: &Config, resolver: Option<SocketAddr>) -> String {
    let rules = &config.rules;
    line(&Listening {
        egress: "listening",
        socket: &socket.to_string_lossy(),
        allow: rules
            .allowlist
            .entries()
            .iter()
            .map(ToString::to_string)
            .collect(),
        map: rules.mappings.iter().map(ToString::to_string).collect(),
        resolver: resolver.map(|r| r.to_string()),
        host_addresses: rules.host_own.iter().map(ToString::to_string).collect(),
        max_tunnels: config.max_tunnels,
        skipped: Rule::ALL
            .into_iter()
            .filter(|rule| rules.skips(*rule))
            .map(Rule::as_str)
            .collect(),
        terminate: config.terminate.as_ref().map(|t| {
            let budget = t.budget();
            Terminating {
                target: format!("{}:{}", t.name, t.port),
                header: match t.header() {
                    CredentialHeader::ApiKey => "x-api-key",
                    CredentialHeader::Bearer => "bearer",
                },
                ca_sha256: t.ca_sha256.clone(),
                budget: BudgetLine {
                    requests: budget.requests,
                    request_bytes: budget.request_bytes,
                    response_bytes: budget.response_bytes,
                },
                routes: VENDOR_ROUTES
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect(),
            }
        }),
    })
}

/// The line for one request to the terminated vendor host.
pub fn vendor_call(call: &Call) -> String {
    line(&Vendor {
        egress: "vendor",
        call,
    })
}

/// The line for one connection's end: `tunnel` or `refused`.
pub fn connection(report: &Report) -> String {
    let target = report.target.as_ref().map(ToString::to_string);
    let (id, status, reason): (&'static str, Option<u16>, String) = match &report.outcome {
        Outcome::Terminated { calls, error } => {
            return line(&Terminated {
                egress: "terminated",
                target,
                dialed: report.dialed.map(|d| d.to_string()),
                calls: *calls,
                error: *error,
            })
        }
        Outcome::Relayed { up, down, end } => {
            return line(&Tunnel {
                egress: "tunnel",
                target,
                dialed: report.dialed.map(|d| d.to_string()),
                up: *up,
                down: *down,
                end: end.as_str(),
            })
        }
        Outcome::Refused(rejection) => (
            rejection.id(),
            Some(rejection.status()),
            match &report.detail {
                Some(detail) => format!("{}: {detail}", describe(*rejection)),
                None => describe(*rejection).to_owned(),
            },
        ),
        Outcome::HelloRefused(why) => (SNI, None, (*why).to_owned()),
        Outcome::UpstreamFailed => (
            UPSTREAM,
            Some(502),
            "no address of the name could be connected to".to_owned(),
        ),
        Outcome::Busy => (BUSY, Some(503), "over the tunnel bound".to_owned()),
        Outcome::HeadTimedOut => (HEAD_TIMEOUT, None, "no whole head in time".to_owned()),
        Outcome::ClosedBeforeHead => (
            CLOSED,
            None,
            "the client closed before its head ended or before the 200".to_owned(),
        ),
        Outcome::Shutdown => (
            SHUTDOWN,
            None,
            "the proxy shut down before the tunnel ran".to_owned(),
        ),
    };
    line(&Refused {
        egress: "refused",
        id,
        status,
        target,
        reason,
    })
}

/// The last line: what stopped the proxy (`sigterm`, `sigint`, `lifetime`).
pub fn stopped(by: &str) -> String {
    line(&Stopped {
        egress: "stopped",
        by,
    })
}

/// A refusal for people.
fn describe(rejection: Rejection) -> &'static str {
    match rejection {
        Rejection::Method => "not a CONNECT",
        Rejection::Target => "the target is not host:port in authority form",
        Rejection::Version => "not HTTP/1.1",
        Rejection::HeadTooLarge => "the head is over its size, line or header bound",
        Rejection::Malformed => "a malformed head (or bytes before the 200)",
        Rejection::Host => "the host is not a canonical LDH name",
        Rejection::Port => "the port is not plain decimal 1-65535, or not the listed name's",
        Rejection::NotAllowed => "the name is not on the allowlist",
        Rejection::Address => "the name resolved to a denied address",
        Rejection::Resolve => "the resolver failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::{Allowlist, Mapping};
    use crate::decide::Rules;
    use crate::head::Connect;
    use crate::host::Name;
    use crate::proxy::End;
    use serde_json::{json, Value};

    fn parse(line: &str) -> Value {
        assert!(!line.contains('\n'));
        serde_json::from_str(line).unwrap()
    }

    fn keys(line: &str) -> Vec<String> {
        // The order as written (serde_json's map sorts, so read the keys off the text).
        let value = parse(line);
        let mut keys: Vec<(usize, String)> = value
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (line.find(&format!("\"{k}\":")).unwrap(), k.clone()))
            .collect();
        keys.sort();
        keys.into_iter().map(|(_, k)| k).collect()
    }

    fn target(name: &str, port: u16) -> Option<Connect> {
        Some(Connect {
            name: Name::parse(name).unwrap(),
            port,
        })
    }

    #[test]
    fn the_attestation_shows_what_the_proxy_was_started_with() {
        let rules = Rules {
            allowlist: Allowlist::parse(&["api.anthropic.com", "*.example.com:8443"]).unwrap(),
            mappings: vec![
                Mapping::parse("fake.vendor.test=172.18.0.5:8443").unwrap(),
                Mapping::parse("v6.test=[fd00::5]:443").unwrap(),
            ],
            host_own: vec!["172.17.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            skip: [Rule::Method, Rule::Allowlist, Rule::Sni].into(),
        };
        let config = Config::new(rules);
        let text = listening(
            Path::new("/run/cordon/egress/egress.sock"),
            &config,
            Some("172.18.0.1:53".parse().unwrap()),
        );
        assert_eq!(
            parse(&text),
            json!({
                "egress": "listening",
                "socket": "/run/cordon/egress/egress.sock",
                "allow": ["api.anthropic.com:443", "*.example.com:8443"],
                "map": ["fake.vendor.test=172.18.0.5:8443", "v6.test=[fd00::5]:443"],
                "resolver": "172.18.0.1:53",
                "host_addresses": ["172.17.0.1", "fd00::1"],
                "max_tunnels": 32,
                "skipped": ["allowlist", "sni", "method"],
                "terminate": null,
            })
        );
        assert_eq!(
            keys(&text),
            [
                "egress",
                "socket",
                "allow",
                "map",
                "resolver",
                "host_addresses",
                "max_tunnels",
                "skipped",
                "terminate"
            ]
        );
        let bare = listening(Path::new("/s"), &Config::default(), None);
        assert_eq!(
            parse(&bare),
            json!({"egress": "listening", "socket": "/s", "allow": [], "map": [],
                   "resolver": null, "host_addresses": [], "max_tunnels": 32, "skipped": [],
                   "terminate": null})
        );
    }

    #[test]
    fn a_terminating_proxy_attests_its_host_ca_budgets_and_routes_and_logs_each_call() {
        use crate::terminate::{client_config, server_config, Call, Key, Terminator};
        use crate::usage::Usage;
        use crate::vault::Termination;
        use crate::vendor::{Budget, CredentialHeader};
        let ca = cordon_fake_vendor::ca::generate(&["api.anthropic.com"]).unwrap();
        let terminator = Terminator::new(
            "api.anthropic.com",
            CredentialHeader::Bearer,
            "sk-ant-oat01-sentinelAA".into(),
            Key::new("sk-real".into()).unwrap(),
            Budget {
                requests: 3,
                request_bytes: 4,
                response_bytes: 5,
            },
            server_config(ca.cert_pem.as_bytes(), ca.key_pem.as_bytes()).unwrap(),
            client_config(None).unwrap(),
        );
        let config = Config {
            terminate: Some(Termination {
                name: Name::parse("api.anthropic.com").unwrap(),
                port: 443,
                ca_sha256: "ab".repeat(32),
                terminator: std::sync::Arc::new(terminator),
            }),
            ..Config::default()
        };
        let text = listening(Path::new("/s"), &config, None);
        assert_eq!(
            parse(&text)["terminate"],
            json!({"target": "api.anthropic.com:443", "header": "bearer",
                   "ca_sha256": "ab".repeat(32),
                   "budget": {"requests": 3, "request_bytes": 4, "response_bytes": 5},
                   "routes": ["POST /v1/messages", "POST /v1/messages/count_tokens",
                              "GET /api/claude_code/settings", "GET /api/claude_code/policy_limits"]})
        );
        assert!(
            !text.contains("sk-real") && !text.contains("sentinel"),
            "{text}"
        );
        let call = Call {
            method: "POST".into(),
            path: "/v1/messages".into(),
            status: 200,
            request_bytes: 10,
            response_bytes: 20,
            duration_ms: 3,
            model: Some("claude-x".into()),
            usage: Some(Usage {
                input_tokens: Some(7),
                output_tokens: Some(8),
                ..Usage::default()
            }),
            refusal: None,
            budget: None,
        };
        let line = vendor_call(&call);
        assert_eq!(
            keys(&line),
            [
                "egress",
                "method",
                "path",
                "status",
                "request_bytes",
                "response_bytes",
                "duration_ms",
                "model",
                "usage",
                "refusal",
                "budget"
            ]
        );
        assert_eq!(parse(&line)["egress"], "vendor");
        assert_eq!(parse(&line)["usage"]["input_tokens"], 7);
    }

    #[test]
    fn a_tunnel_line_has_its_target_address_bytes_and_end() {
        let report = Report {
            target: target("fake.vendor.test", 443),
            dialed: Some("172.18.0.5:8443".parse().unwrap()),
            outcome: Outcome::Relayed {
                up: 517,
                down: 3000,
                end: End::HalfClose,
            },
            detail: None,
        };
        let text = connection(&report);
        assert_eq!(
            parse(&text),
            json!({"egress": "tunnel", "target": "fake.vendor.test:443",
                   "dialed": "172.18.0.5:8443", "up": 517, "down": 3000, "end": "half-close"})
        );
        assert_eq!(
            keys(&text),
            ["egress", "target", "dialed", "up", "down", "end"]
        );
        let ends: Vec<&str> = [
            End::Closed,
            End::Idle,
            End::HalfClose,
            End::Error,
            End::Shutdown,
        ]
        .map(End::as_str)
        .into();
        assert_eq!(ends, ["closed", "idle", "half-close", "error", "shutdown"]);
    }

    #[test]
    fn a_refused_line_has_its_id_status_target_and_reason() {
        let cases = [
            (
                Outcome::Refused(Rejection::NotAllowed),
                target("evil.example", 443),
                None,
                json!({"egress": "refused", "id": "egress-not-allowed", "status": 403,
                       "target": "evil.example:443", "reason": "the name is not on the allowlist"}),
            ),
            (
                Outcome::Refused(Rejection::Method),
                None,
                None,
                json!({"egress": "refused", "id": "egress-method", "status": 405,
                       "target": null, "reason": "not a CONNECT"}),
            ),
            (
                Outcome::Refused(Rejection::Address),
                target("private.test", 443),
                Some("10.0.0.1 is denied (private)".to_owned()),
                json!({"egress": "refused", "id": "egress-address", "status": 403,
                       "target": "private.test:443",
                       "reason": "the name resolved to a denied address: 10.0.0.1 is denied (private)"}),
            ),
        ];
        for (outcome, target, detail, want) in cases {
            let text = connection(&Report {
                target,
                dialed: None,
                outcome,
                detail,
            });
            assert_eq!(parse(&text), want);
            assert_eq!(keys(&text), ["egress", "id", "status", "target", "reason"]);
        }
        for (outcome, id, status) in [
            (Outcome::HelloRefused("not a handshake record"), SNI, None),
            (Outcome::UpstreamFailed, UPSTREAM, Some(502)),
            (Outcome::Busy, BUSY, Some(503)),
            (Outcome::HeadTimedOut, HEAD_TIMEOUT, None),
            (Outcome::ClosedBeforeHead, CLOSED, None),
            (Outcome::Shutdown, SHUTDOWN, None),
        ] {
            let value = parse(&connection(&Report {
                target: None,
                dialed: None,
                outcome,
                detail: None,
            }));
            assert_eq!(value["egress"], "refused");
            assert_eq!(value["id"], id);
            assert_eq!(value["status"], json!(status));
            assert!(value["reason"].as_str().is_some_and(|r| !r.is_empty()));
        }
    }

    #[test]
    fn the_stopped_line_names_what_stopped_it() {
        assert_eq!(stopped("sigterm"), r#"{"egress":"stopped","by":"sigterm"}"#);
    }
}
