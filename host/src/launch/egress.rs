//! One invocation's egress on the engine: its bridge network, the containers on it (the proof
//! harness's fake vendor endpoint and DNS server first, when given; then the proxy), each read
//! back and validated before anything of the invocation starts; the proxy started and its
//! attestation read before any code of the agent's runs.
//!
//! The proxy is told the fixtures' addresses when it is created, and the engine assigns an
//! address only as a container starts. So the fixtures' addresses are the ones a fresh network
//! hands out first, in order, and each fixture is started, and its address checked against
//! that, before the next one, and before the proxy: a fixture that took any other address ends
//! the launch before the proxy starts (`egress-fixture-address`). The engine assigns it early in
//! the start (its `network connect` event), so the rest of each start runs beside the next.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, NetworkCreateRequest};
use bollard::query_parameters::LogsOptions;
use futures_util::StreamExt;

use crate::engine::pending::Shared;
use crate::engine::{bounded, objects, Engine, CALL_TIMEOUT};
use crate::error::{Error, Refusal, Result};
use crate::labels::{Allocation, Kind};
use crate::launch::volumes::{self, VaultDelivery};
use crate::profile::egress::{self as plan, EgressSpec, ProxyVolumes, VENDOR_PORT};
use crate::validate;

/// How long the proxy may take to say it listens.
pub const ATTEST_WITHIN: Duration = Duration::from_secs(10);

/// The gate's and the tests' endpoints on the invocation network, as the proof harness
/// (`cordon-proof`) describes them: the library makes no certificate and writes no DNS script.
#[derive(Debug, Clone)]
pub struct Fixtures {
    /// The fake vendor's certificate chain and key (PEM).
    pub cert_pem: String,
    pub key_pem: String,
    /// Names the proxy maps to the fake vendor (its TLS port).
    pub mapped: Vec<String>,
    /// The test DNS server's answers (its `--answer` arguments), given the fake vendor's address
    /// once it runs; the proxy then resolves through it. No DNS server when `None`.
    pub dns: Option<fn(IpAddr) -> Vec<String>>,
    /// The image the fixtures run from (it must hold `fake-vendor`: the test image); the
    /// invocation's own image when `None`.
    pub image: Option<String>,
    /// The SHA-256 (lowercase hex) of the one key the fake vendor's API takes (401 to any
    /// other, the sentinel included); any key when `None`. Only the digest: the fixture's
    /// configuration never holds the key.
    pub api_key_sha256: Option<String>,
}

/// What [`create`] makes: the network, the proxy, and the fixtures when asked for.
#[derive(Debug, Clone)]
pub struct EgressPlan {
    pub spec: EgressSpec,
    pub network: NetworkCreateRequest,
    pub fixtures: Option<Fixtures>,
    /// Applied to the proxy's create request after it is built (the gate's validator case only).
    pub edit_proxy: Option<fn(&mut ContainerCreateBody)>,
}

impl EgressPlan {
    pub fn new(allocation: &Allocation, spec: EgressSpec) -> EgressPlan {
        EgressPlan {
            network: plan::network_request(allocation, spec.internal),
            spec,
            fixtures: None,
            edit_proxy: None,
        }
    }
}

/// The proxy's first line: what it enforces.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProxyAttestation {
    pub socket: String,
    pub allow: Vec<String>,
    pub map: Vec<String>,
    pub resolver: Option<String>,
    /// Proxy rules left out (the gate's removal cases only).
    pub skipped: Vec<String>,
    /// The vendor host it terminates, with what it holds for it.
    #[serde(default)]
    pub terminate: Option<AttestedTermination>,
}

/// What the proxy says it terminates: the host, the credential's header, the CA it serves a leaf
/// of (its fingerprint), the budgets and the routes it lets through.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttestedTermination {
    pub target: String,
    pub header: String,
    pub ca_sha256: String,
    pub budget: AttestedBudget,
    pub routes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttestedBudget {
    pub requests: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

/// The proxy terminates exactly the host it was asked to, with this invocation's CA and budgets
/// and the measured routes; or, asked to terminate nothing, terminates nothing. Anything else is
/// refused (`vendor-custody`) before the agent starts.
pub fn check_termination(
    asked: Option<&crate::custody::Termination>,
    attested: Option<&AttestedTermination>,
) -> Result<()> {
    let expected = asked.map(|t| AttestedTermination {
        target: t.target.clone(),
        header: match t.header {
            cordon_egress::vendor::CredentialHeader::ApiKey => "x-api-key".to_owned(),
            cordon_egress::vendor::CredentialHeader::Bearer => "bearer".to_owned(),
        },
        ca_sha256: t.ca_sha256.clone(),
        budget: AttestedBudget {
            requests: t.budget.requests,
            request_bytes: t.budget.request_bytes,
            response_bytes: t.budget.response_bytes,
        },
        routes: cordon_egress::vendor::VENDOR_ROUTES
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect(),
    });
    if expected.as_ref() == attested {
        return Ok(());
    }
    Err(Error::Custody(format!(
        "the proxy attested terminating {attested:?}, not {expected:?}"
    )))
}

/// An invocation's egress as created.
#[derive(Debug, Clone)]
pub struct Egress {
    pub network_id: String,
    pub network_name: String,
    pub proxy: String,
    /// Fixture containers (the fake vendor first), started with the proxy ([`start_proxy`]).
    pub fixtures: Vec<String>,
    /// Those not started yet, each with the address it must take.
    pending: Vec<(String, Ipv4Addr)>,
    /// Addresses on the invocation network (the probes' fixture needs them).
    pub gateway: Option<Ipv4Addr>,
    pub vendor: Option<Ipv4Addr>,
    pub resolver: Option<Ipv4Addr>,
    /// The proxy's address, once it started.
    pub proxy_ip: Option<Ipv4Addr>,
    /// What the proxy was told.
    pub spec: EgressSpec,
    /// What the proxy said once started.
    pub attestation: Option<ProxyAttestation>,
    /// How long the proxy's start waited for the fixtures to take their addresses (zero without
    /// fixtures): their serial share of a setup, which a run against a real vendor never pays.
    pub fixtures_wait: Duration,
}

/// The host's own addresses the proxy must never dial: every address of this host's interfaces
/// (bridges included) and every engine network's gateway; more than the proxy can be told is
/// refused (`egress-host-addresses`).
pub async fn host_addresses(engine: &Engine) -> Result<Vec<IpAddr>> {
    let mut out: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .map_err(|e| Error::Internal(format!("listing the host's addresses: {e}")))?
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect();
    let networks = bounded(
        "list networks",
        CALL_TIMEOUT,
        engine.calls().list_networks(None),
    )
    .await?;
    for n in networks {
        for config in n.ipam.and_then(|i| i.config).unwrap_or_default() {
            if let Some(Ok(ip)) = config.gateway.as_deref().map(str::parse) {
                out.push(ip);
            }
        }
    }
    host_address_list(out)
}

/// The host's addresses as the proxy is told them: sorted, each once. More than
/// [`plan::MAX_HOST_ADDRESSES`] is refused (`egress-host-addresses`), never cut: an address left
/// out of the list is one the proxy would dial.
fn host_address_list(mut out: Vec<IpAddr>) -> Result<Vec<IpAddr>> {
    out.sort();
    out.dedup();
    if out.len() > plan::MAX_HOST_ADDRESSES {
        return Err(Error::TooManyHostAddresses {
            count: out.len(),
            max: plan::MAX_HOST_ADDRESSES,
        });
    }
    Ok(out)
}

/// Create, read back and validate one container on the network; start it when `start`.
async fn networked(
    engine: &Engine,
    name: String,
    body: ContainerCreateBody,
    network: &str,
    record: &Shared<'_>,
) -> Result<(String, Vec<Refusal>)> {
    let image = body.image.clone().unwrap_or_default();
    let id = objects::create_container(engine, &name, body.clone(), record).await?;
    let observed = objects::inspect_container(engine, &id)
        .await?
        .ok_or_else(|| Error::Internal(format!("container {name} vanished after create")))?;
    Ok((
        id,
        validate::egress::container(&body, &image, &observed, network),
    ))
}

async fn start(engine: &Engine, id: &str) -> Result<()> {
    objects::start_container(engine, "container", id).await
}

/// The addresses a fresh network hands out, in the order containers join it: its subnet's host
/// addresses from the first, the gateway's skipped.
fn handed_out(network: &bollard::models::NetworkInspect) -> Result<impl Iterator<Item = Ipv4Addr>> {
    let config = network
        .ipam
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .and_then(|c| c.first())
        .ok_or_else(|| Error::Internal("the invocation network has no IPAM config".into()))?;
    let subnet = config.subnet.as_deref().unwrap_or_default();
    let (base, prefix) = subnet
        .split_once('/')
        .and_then(|(ip, len)| Some((ip.parse::<Ipv4Addr>().ok()?, len.parse::<u32>().ok()?)))
        .filter(|(_, len)| *len <= 30)
        .ok_or_else(|| {
            Error::Internal(format!(
                "the invocation network's subnet {subnet:?} is not an IPv4 subnet with host room"
            ))
        })?;
    let gateway: Option<Ipv4Addr> = config.gateway.as_deref().and_then(|g| g.parse().ok());
    let first = u32::from(base) & (u32::MAX << (32 - prefix));
    let broadcast = first | (u32::MAX >> prefix);
    Ok((first + 1..broadcast)
        .map(Ipv4Addr::from)
        .filter(move |ip| Some(*ip) != gateway))
}

fn next_address(
    handed_out: &mut impl Iterator<Item = Ipv4Addr>,
    network: &str,
) -> Result<Ipv4Addr> {
    handed_out
        .next()
        .ok_or_else(|| Error::Internal(format!("the network {network} has no address left")))
}

/// A started container's address on `network`.
async fn address(engine: &Engine, id: &str, network: &str) -> Result<Ipv4Addr> {
    let inspected = objects::inspect_container(engine, id).await?;
    inspected
        .and_then(|c| c.network_settings)
        .and_then(|s| s.networks)
        .and_then(|mut n| n.remove(network))
        .and_then(|e| e.ip_address)
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| Error::Internal(format!("container {id} has no address on {network}")))
}

/// An invocation's network as created, with the fixtures planned (their names, bodies and the
/// addresses they will take) but not yet made, and its proxy not yet: what [`create_proxy`]
/// takes.
#[derive(Debug)]
pub struct Networked {
    egress: Egress,
    refusals: Vec<Refusal>,
    spec: EgressSpec,
    edit_proxy: Option<fn(&mut ContainerCreateBody)>,
    /// The fixtures to make, in the order they start (the fake vendor first).
    planned: Vec<(String, ContainerCreateBody, Ipv4Addr)>,
}

/// Create the network, validate it, plan the fixtures (the proxy is told the addresses they will
/// take, [`start_proxy`]) and list the host's addresses for the proxy. It needs none of the
/// invocation's volumes, so it runs beside their creation. Everything made is in `record`.
pub async fn create_network(
    engine: &Engine,
    allocation: &Allocation,
    image_id: &str,
    egress_plan: EgressPlan,
    record: &Shared<'_>,
) -> Result<Networked> {
    let EgressPlan {
        mut spec,
        network,
        fixtures,
        edit_proxy,
    } = egress_plan;
    let name = network.name.clone();
    let network_id = objects::create_network(engine, network.clone(), record).await?;
    let (observed, host_addresses) = tokio::try_join!(
        objects::inspect_network(engine, &network_id),
        host_addresses(engine)
    )?;
    let observed =
        observed.ok_or_else(|| Error::Internal(format!("network {name} vanished after create")))?;
    let refusals = validate::egress::network(&network, &observed);
    spec.host_addresses = host_addresses;
    let gateway = observed
        .ipam
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .and_then(|c| c.iter().find_map(|c| c.gateway.as_deref()?.parse().ok()));
    let mut egress = Egress {
        network_id,
        network_name: name.clone(),
        proxy: String::new(),
        fixtures: Vec::new(),
        pending: Vec::new(),
        gateway,
        vendor: None,
        resolver: None,
        proxy_ip: None,
        spec: spec.clone(),
        attestation: None,
        fixtures_wait: Duration::ZERO,
    };
    let mut planned = Vec::new();
    if let Some(fixtures) = &fixtures {
        let mut handed_out = handed_out(&observed)?;
        let fixture_image = fixtures.image.as_deref().unwrap_or(image_id);
        let vendor = next_address(&mut handed_out, &name)?;
        let body = plan::vendor_body(
            fixture_image,
            allocation,
            (&fixtures.cert_pem, &fixtures.key_pem),
            fixtures.api_key_sha256.as_deref(),
        );
        planned.push((allocation.name(Kind::Vendor), body, vendor));
        egress.vendor = Some(vendor);
        let to = SocketAddr::new(IpAddr::V4(vendor), VENDOR_PORT);
        spec.map
            .extend(fixtures.mapped.iter().map(|n| format!("{n}={to}")));
        if let Some(dns) = fixtures.dns {
            let resolver = next_address(&mut handed_out, &name)?;
            let body = plan::resolver_body(fixture_image, allocation, &dns(IpAddr::V4(vendor)));
            planned.push((allocation.name(Kind::Resolver), body, resolver));
            egress.resolver = Some(resolver);
            spec.resolver = Some(SocketAddr::new(IpAddr::V4(resolver), 53));
        }
    }
    Ok(Networked {
        egress,
        refusals,
        spec,
        edit_proxy,
        planned,
    })
}

/// Create the fixtures [`create_network`] planned (not started) and, beside them, the proxy (not
/// started), each on the network and validated; every refusal of the network's and theirs is
/// returned, and nothing of the agent's may start while there is one.
pub async fn create_proxy(
    engine: &Engine,
    allocation: &Allocation,
    image_id: &str,
    made: Networked,
    (volumes, lifetime): (&ProxyVolumes, Duration),
    record: &Shared<'_>,
) -> Result<(Egress, Vec<Refusal>)> {
    let Networked {
        mut egress,
        mut refusals,
        spec,
        edit_proxy,
        planned,
    } = made;
    let network = egress.network_name.clone();
    let fixtures = async {
        let mut made = Vec::new();
        for (name, body, address) in planned {
            made.push((
                networked(engine, name, body, &network, record).await?,
                address,
            ));
        }
        Ok::<_, Error>(made)
    };
    let proxy = async {
        let mut body = plan::proxy_body(image_id, allocation, &spec, volumes, lifetime)?;
        let expected = body.clone();
        if let Some(edit) = edit_proxy {
            edit(&mut body);
        }
        let id =
            objects::create_container(engine, &allocation.name(Kind::Proxy), body, record).await?;
        let observed = objects::inspect_container(engine, &id)
            .await?
            .ok_or_else(|| Error::Internal("the proxy vanished after create".into()))?;
        let refused = validate::egress::container(&expected, image_id, &observed, &network);
        Ok::<_, Error>((id, refused))
    };
    let (made, (proxy, proxy_refusals)) = tokio::try_join!(fixtures, proxy)?;
    for ((id, r), address) in made {
        refusals.extend(r);
        egress.fixtures.push(id.clone());
        egress.pending.push((id, address));
    }
    refusals.extend(proxy_refusals);
    egress.proxy = proxy;
    egress.spec = spec;
    Ok((egress, refusals))
}

/// Start the fixtures, each once the one before took its address (and each checked to have taken
/// the one the proxy was told), then the proxy, with its vault written beside its start once it
/// holds the vault volume mounted (or its start returned), and read its attestation (its first
/// stdout line) within [`ATTEST_WITHIN`]. Returns once every start returned, whatever failed. A
/// proxy that attested already is left as it is.
pub async fn start_proxy(
    engine: &Engine,
    egress: &mut Egress,
    vault: Option<VaultDelivery>,
) -> Result<()> {
    if egress.attestation.is_some() {
        return match vault {
            None => Ok(()),
            Some(_) => Err(Error::Internal(
                "a vault for a proxy that started already".into(),
            )),
        };
    }
    let pending = std::mem::take(&mut egress.pending);
    let mut starting = Vec::new();
    let began = std::time::Instant::now();
    let addressed = start_in_turn(engine, &egress.network_id, &pending, &mut starting).await;
    // The fixtures (the gate's and the benchmarks' fake vendor) go before the proxy: their
    // share of a setup, which a run with none does not pay.
    if !pending.is_empty() {
        egress.fixtures_wait = began.elapsed();
    }
    tracing::debug!(
        fixtures = pending.len(),
        ms = began.elapsed().as_millis() as u64,
        "egress: the fixtures took their addresses"
    );
    let proxy = async {
        addressed?;
        let sent = std::time::SystemTime::now();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let start = async {
            let started = start(engine, &egress.proxy).await;
            let _ = started_tx.send(());
            started
        };
        let deliver = async {
            let Some(vault) = vault else {
                return Ok(());
            };
            let volume = vault
                .volume()
                .ok_or_else(|| Error::Internal("the proxy's vault has no volume".into()))?
                .to_owned();
            let held = std::slice::from_ref(&volume);
            tokio::select! {
                () = volumes::mounted_by(engine, &egress.proxy, held, sent) => {}
                _ = started_rx => {}
            }
            volumes::deliver_vault(engine, vault).await
        };
        let (started, delivered) = tokio::join!(start, deliver);
        started.and(delivered)?;
        attestation(engine, &egress.proxy).await
    };
    let (line, fixtures) = tokio::join!(proxy, futures_util::future::join_all(starting));
    let line = line?;
    fixtures.into_iter().collect::<Result<Vec<()>>>()?;
    egress.proxy_ip = Some(address(engine, &egress.proxy, &egress.network_name).await?);
    let attestation = parse_attestation(&line)?;
    check_termination(
        egress.spec.terminate.as_ref(),
        attestation.terminate.as_ref(),
    )?;
    egress.attestation = Some(attestation);
    Ok(())
}

/// A container start still under way.
type Starting<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + 'a>>;

/// Start each of `fixtures` in turn, the next once the one before took its address on the network
/// (its `network connect` event, or its start's return), and check each took the address it was
/// given. The starts still under way are left in `starting` for the caller to await.
async fn start_in_turn<'a>(
    engine: &'a Engine,
    network: &str,
    fixtures: &'a [(String, Ipv4Addr)],
    starting: &mut Vec<Starting<'a>>,
) -> Result<()> {
    for (id, expected) in fixtures {
        let filters = std::collections::HashMap::from([
            ("type".to_owned(), vec!["network".to_owned()]),
            ("event".to_owned(), vec!["connect".to_owned()]),
            ("network".to_owned(), vec![network.to_owned()]),
        ]);
        let mut events = objects::events_since(engine, filters, std::time::SystemTime::now());
        let connected = async {
            while let Some(Ok(event)) = events.next().await {
                let attributes = event.actor.and_then(|a| a.attributes);
                if attributes.as_ref().and_then(|a| a.get("container")) == Some(id) {
                    return;
                }
            }
            std::future::pending().await
        };
        let mut start: Starting<'a> = Box::pin(start(engine, id));
        tokio::select! {
            started = &mut start => started?,
            () = connected => starting.push(start),
        }
        let observed = joined_address(engine, network, id).await?;
        if observed != Some(*expected) {
            return Err(Error::FixtureAddress {
                fixture: id.clone(),
                expected: *expected,
                observed: observed.map_or_else(|| "none".to_owned(), |ip| ip.to_string()),
            });
        }
    }
    Ok(())
}

/// The address `container` holds on `network`, as the network lists it (a container's own
/// inspect waits for its start to return).
async fn joined_address(
    engine: &Engine,
    network: &str,
    container: &str,
) -> Result<Option<Ipv4Addr>> {
    let observed = objects::inspect_network(engine, network).await?;
    Ok(observed
        .and_then(|n| n.containers)
        .and_then(|mut c| c.remove(container))
        .and_then(|e| e.ipv4_address)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok()))
}

/// The started proxy's first stdout line, within [`ATTEST_WITHIN`].
async fn attestation(engine: &Engine, proxy: &str) -> Result<Vec<u8>> {
    let options = LogsOptions {
        stdout: true,
        stderr: false,
        follow: true,
        tail: "all".to_owned(),
        ..Default::default()
    };
    let mut stream = engine.docker().logs(proxy, Some(options));
    let mut text = Vec::new();
    let first_line = async {
        while let Some(item) = stream.next().await {
            let item = item.map_err(|source| Error::Docker {
                context: "proxy logs".into(),
                source,
            })?;
            if let bollard::container::LogOutput::StdOut { message } = item {
                text.extend_from_slice(&message);
                if text.len() > 64 * 1024 {
                    break;
                }
                if let Some(end) = text.iter().position(|b| *b == b'\n') {
                    return Ok(text[..end].to_vec());
                }
            }
        }
        Err(Error::Internal(format!(
            "the proxy ended before it said it listens: {:?}",
            String::from_utf8_lossy(&text)
        )))
    };
    match tokio::time::timeout(ATTEST_WITHIN, first_line).await {
        Ok(line) => line,
        Err(_) => Err(Error::Timeout {
            context: "the proxy's attestation".into(),
            after: ATTEST_WITHIN,
        }),
    }
}

/// The proxy's `{"egress":"listening",...}` line.
pub fn parse_attestation(line: &[u8]) -> Result<ProxyAttestation> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
        Error::Internal(format!(
            "the proxy's first line is not its attestation ({e}): {:?}",
            String::from_utf8_lossy(line)
        ))
    })?;
    if value.get("egress").and_then(|v| v.as_str()) != Some("listening") {
        return Err(Error::Internal(format!(
            "the proxy's first line is not its attestation: {value}"
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| Error::Internal(format!("the proxy's attestation does not parse: {e}")))
}

/// The proxy's log lines, its attestation first (tests read refusals and tunnels here).
pub async fn proxy_log(engine: &Engine, egress: &Egress) -> Result<Vec<serde_json::Value>> {
    json_lines(engine, &egress.proxy).await
}

/// The fake vendor's log lines (one per request it answered); none without the fixtures.
pub async fn vendor_log(engine: &Engine, egress: &Egress) -> Result<Vec<serde_json::Value>> {
    match egress.fixtures.first() {
        Some(vendor) => json_lines(engine, vendor).await,
        None => Ok(Vec::new()),
    }
}

/// A container's stdout lines that are JSON, within the launch's output bound.
async fn json_lines(engine: &Engine, container: &str) -> Result<Vec<serde_json::Value>> {
    let mut launch = super::Launch::adopt(container.to_owned());
    let output = launch.output(engine).await?;
    Ok(output
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_must_attest_terminating_exactly_what_it_was_asked_to() {
        use crate::custody::Termination;
        use cordon_egress::vendor::{Budget, CredentialHeader};
        let asked = Termination {
            target: "api.vendor.test:443".into(),
            header: CredentialHeader::ApiKey,
            ca_sha256: "cd".repeat(32),
            sentinel: "sk-ant-api03-sentinel".into(),
            budget: Budget::default(),
        };
        let line = |terminate: &str| {
            format!(
                r#"{{"egress":"listening","socket":"/s","allow":[],"map":[],"resolver":null,"skipped":[],"terminate":{terminate}}}"#
            )
        };
        let good = format!(
            r#"{{"target":"api.vendor.test:443","header":"x-api-key","ca_sha256":"{}","budget":{{"requests":2000,"request_bytes":2147483648,"response_bytes":2147483648}},"routes":["POST /v1/messages","POST /v1/messages/count_tokens","GET /api/claude_code/settings","GET /api/claude_code/policy_limits"]}}"#,
            "cd".repeat(32)
        );
        let attested = parse_attestation(line(&good).as_bytes()).unwrap();
        assert!(check_termination(Some(&asked), attested.terminate.as_ref()).is_ok());
        // Asked for nothing, terminating nothing.
        let none = parse_attestation(line("null").as_bytes()).unwrap();
        assert!(check_termination(None, none.terminate.as_ref()).is_ok());
        for bad in [
            "null".to_owned(),
            good.replace("api.vendor.test:443", "api.vendor.test:8443"),
            good.replace("x-api-key", "bearer"),
            good.replace(&"cd".repeat(32), &"ce".repeat(32)),
            good.replace("\"requests\":2000", "\"requests\":2001"),
            good.replace(",\"GET /api/claude_code/policy_limits\"", ""),
        ] {
            let attested = parse_attestation(line(&bad).as_bytes()).unwrap();
            let refused = check_termination(Some(&asked), attested.terminate.as_ref()).unwrap_err();
            assert_eq!(refused.id(), "vendor-custody", "{bad}");
        }
        // Terminating when nobody asked is refused too.
        assert!(check_termination(None, attested.terminate.as_ref()).is_err());
    }

    fn network_of(subnet: &str, gateway: Option<&str>) -> bollard::models::NetworkInspect {
        bollard::models::NetworkInspect {
            ipam: Some(bollard::models::Ipam {
                config: Some(vec![bollard::models::IpamConfig {
                    subnet: Some(subnet.to_owned()),
                    gateway: gateway.map(str::to_owned),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_fresh_network_hands_out_its_host_addresses_in_order_past_the_gateway() {
        let first = |subnet: &str, gateway: Option<&str>, n: usize| -> Vec<String> {
            handed_out(&network_of(subnet, gateway))
                .unwrap()
                .take(n)
                .map(|ip| ip.to_string())
                .collect()
        };
        assert_eq!(
            first("172.18.0.0/16", Some("172.18.0.1"), 2),
            ["172.18.0.2", "172.18.0.3"]
        );
        // The subnet as written need not be its network address; a gateway elsewhere is skipped
        // where it falls.
        assert_eq!(
            first("10.9.8.77/24", Some("10.9.8.2"), 3),
            ["10.9.8.1", "10.9.8.3", "10.9.8.4"]
        );
        // Neither the network's nor the broadcast address: a /30 has two hosts, one the gateway.
        assert_eq!(
            first("192.168.5.4/30", Some("192.168.5.5"), 9),
            ["192.168.5.6"]
        );
        assert_eq!(
            first("192.168.5.4/30", None, 9),
            ["192.168.5.5", "192.168.5.6"]
        );
        for bad in [
            "",
            "172.18.0.0",
            "172.18.0.0/31",
            "172.18.0.0/33",
            "fd00::/64",
            "x/16",
        ] {
            assert!(handed_out(&network_of(bad, None)).is_err(), "{bad:?}");
        }
        assert!(handed_out(&bollard::models::NetworkInspect::default()).is_err());
    }

    #[test]
    fn more_host_addresses_than_the_proxy_takes_are_refused_not_cut() {
        let many = |n: u32| -> Vec<IpAddr> {
            (0..n)
                .map(|i| IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)))
                .collect()
        };
        let max = u32::try_from(plan::MAX_HOST_ADDRESSES).unwrap();
        // Sorted, each once: duplicates do not count against the bound.
        let mut twice = many(max);
        twice.extend(many(max));
        twice.reverse();
        assert_eq!(host_address_list(twice).unwrap(), many(max));
        // One more: every address would have to be left out but one, so none is: refused.
        let refused = host_address_list(many(max + 1)).unwrap_err();
        assert_eq!(refused.id(), "egress-host-addresses");
        assert!(
            refused.to_string().contains(&format!("{}", max + 1)),
            "{refused}"
        );
    }
}
