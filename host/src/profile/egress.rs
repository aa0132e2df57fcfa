//! An invocation's egress as profiles: its bridge network, and the containers on it (the proxy;
//! in tests and the gate also the fake vendor endpoint and its DNS server), each with the agent's
//! hardening. The read-back of each is compared with exactly what is built here
//! ([`crate::validate::egress`]).
//!
//! The agent is never on this network: it keeps `NetworkMode: none`, and its only way out is the
//! proxy's socket in the egress volume, which the agent mounts read-only and the proxy writable.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, NetworkCreateRequest};
use cordon_contract::{egress, paths, Id};
use cordon_egress::allowlist::{Allowlist, Mapping};

use cordon_egress::vendor::CredentialHeader;

use super::{hardened_body, volume_mount, Hardened, VolumeSpec};
use crate::custody::{Termination, VAULT_DIR};
use crate::error::{Error, Result};
use crate::labels::{Allocation, Kind};

/// The proxy binary in every cordon image.
pub const PROXY_BINARY: &str = "/usr/bin/cordon-egress";
/// The fake vendor endpoint and DNS server binary in the test image.
pub const FAKE_VENDOR_BINARY: &str = "/usr/bin/fake-vendor";
/// The engine's embedded DNS server on a user-defined network: the proxy's resolver when none is
/// configured (it forwards to the host's resolvers; only names the allowlist admitted reach it).
pub const EMBEDDED_DNS: &str = "127.0.0.11:53";
/// Bounds on what a caller may configure.
pub const MAX_ALLOW: usize = 32;
pub const MAX_MAPPINGS: usize = 32;
pub const MAX_HOST_ADDRESSES: usize = 256;
/// Tunnels one invocation's proxy holds at once.
pub const MAX_TUNNELS: u32 = 32;
/// The port the fake vendor endpoint serves TLS on.
pub const VENDOR_PORT: u16 = 443;

/// What an invocation's proxy is told. Built by the caller; checked by [`EgressSpec::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressSpec {
    /// Allowlist entries, `name[:port]` or `*.name[:port]` (443 by default).
    pub allow: Vec<String>,
    /// Test and diagnosis mappings `name=ip:port`: the only way to a private address.
    pub map: Vec<String>,
    /// The proxy's one upstream resolver; `None` is the engine's embedded DNS on the network.
    pub resolver: Option<SocketAddr>,
    /// Addresses the proxy never dials (the host's own, every engine bridge's): filled in at launch.
    pub host_addresses: Vec<IpAddr>,
    /// The network gets no route off the machine (tests, the gate, the bench).
    pub internal: bool,
    /// Proxy rules left out (the gate's removal cases only): the proxy's attestation names them
    /// and no result is trusted after one.
    pub skip: Vec<Id>,
    /// The vendor host the proxy terminates, with its credential's header and the budgets (the
    /// credential and the leaf are in the vault, never here): only with a credential.
    pub terminate: Option<Termination>,
}

impl EgressSpec {
    /// An allowlist with nothing else configured.
    pub fn allowing(allow: &[String]) -> EgressSpec {
        EgressSpec {
            allow: allow.to_vec(),
            map: Vec::new(),
            resolver: None,
            host_addresses: Vec::new(),
            internal: false,
            skip: Vec::new(),
            terminate: None,
        }
    }

    /// Every value as the proxy itself would parse it, and every list bounded.
    pub fn check(&self) -> Result<()> {
        let invalid = |what: String| Err(Error::Invalid(what));
        if self.allow.is_empty() || self.allow.len() > MAX_ALLOW {
            return invalid(format!(
                "an egress allowlist holds 1 to {MAX_ALLOW} entries ({} given)",
                self.allow.len()
            ));
        }
        Allowlist::parse(&self.allow)
            .map_err(|e| Error::Invalid(format!("egress allowlist: {e}")))?;
        if self.map.len() > MAX_MAPPINGS || self.host_addresses.len() > MAX_HOST_ADDRESSES {
            return invalid(format!(
                "at most {MAX_MAPPINGS} mappings and {MAX_HOST_ADDRESSES} host addresses"
            ));
        }
        for mapping in &self.map {
            Mapping::parse(mapping)
                .map_err(|e| Error::Invalid(format!("egress mapping {mapping:?}: {e}")))?;
        }
        if let Some(t) = &self.terminate {
            t.budget
                .check()
                .map_err(|e| Error::Invalid(format!("the vendor budget: {e}")))?;
        }
        if let Some(id) = self
            .skip
            .iter()
            .find(|id| egress::rule_name(**id).is_none())
        {
            return invalid(format!("{id} is not a proxy rule"));
        }
        Ok(())
    }

    /// The resolver the proxy is told to use.
    pub fn resolver(&self) -> String {
        self.resolver
            .map(|r| r.to_string())
            .unwrap_or_else(|| EMBEDDED_DNS.to_owned())
    }

    /// The proxy's argv: everything it enforces, visible in the container's read-back.
    pub fn proxy_command(&self, lifetime: Duration) -> Vec<String> {
        let mut argv = vec![
            PROXY_BINARY.to_owned(),
            "proxy".to_owned(),
            "--listen".to_owned(),
            format!("unix:{}", egress::SOCKET),
            "--resolver".to_owned(),
            self.resolver(),
            "--max-tunnels".to_owned(),
            MAX_TUNNELS.to_string(),
            "--lifetime-s".to_owned(),
            lifetime.as_secs().max(1).to_string(),
        ];
        let flag = |argv: &mut Vec<String>, name: &str, values: Vec<String>| {
            for v in values {
                argv.push(name.to_owned());
                argv.push(v);
            }
        };
        flag(&mut argv, "--allow", self.allow.clone());
        flag(&mut argv, "--map", self.map.clone());
        flag(
            &mut argv,
            "--host-address",
            self.host_addresses.iter().map(IpAddr::to_string).collect(),
        );
        if let Some(t) = &self.terminate {
            argv.extend(terminate_arguments(t));
        }
        flag(
            &mut argv,
            "--skip",
            self.skip
                .iter()
                .filter_map(|id| egress::rule_name(*id))
                .map(str::to_owned)
                .collect(),
        );
        argv
    }
}

/// The proxy's arguments for the host it terminates: the vault it reads, the header the
/// credential travels in, the budgets.
fn terminate_arguments(t: &Termination) -> Vec<String> {
    let header = match t.header {
        CredentialHeader::ApiKey => "x-api-key",
        CredentialHeader::Bearer => "bearer",
    };
    [
        ("--terminate", t.target.clone()),
        ("--vault", VAULT_DIR.to_owned()),
        ("--credential-header", header.to_owned()),
        ("--max-requests", t.budget.requests.to_string()),
        ("--max-request-bytes", t.budget.request_bytes.to_string()),
        ("--max-response-bytes", t.budget.response_bytes.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect()
}

/// The invocation network: a bridge of its own, labelled like every object of the invocation.
pub fn network_request(allocation: &Allocation, internal: bool) -> NetworkCreateRequest {
    NetworkCreateRequest {
        name: allocation.name(Kind::Network),
        driver: Some("bridge".to_owned()),
        internal: Some(internal),
        attachable: Some(false),
        ingress: Some(false),
        enable_ipv6: Some(false),
        labels: Some(allocation.labels(Kind::Network)),
        options: Some(HashMap::new()),
        ..Default::default()
    }
}

/// A container on the invocation network with the agent's hardening (no capability, its
/// allocation's uid, read-only root, no-new-privileges, small limits), attached to that network
/// alone.
pub fn networked_body(
    image_id: &str,
    allocation: &Allocation,
    kind: Kind,
    entrypoint: Vec<String>,
    env: Vec<String>,
    egress_volume: Option<&VolumeSpec>,
) -> ContainerCreateBody {
    // PATH named, or the engine adds its own default.
    let env = std::iter::once("PATH=/usr/bin:/bin".to_owned())
        .chain(env)
        .collect();
    let mut body = hardened_body(Hardened {
        image_id,
        labels: allocation.labels(kind),
        user: format!("{0}:{0}", allocation.uid),
        cap_add: Vec::new(),
        entrypoint,
        env,
        mounts: egress_volume
            .map(|v| vec![volume_mount(v, paths::EGRESS_DIR, false, None)])
            .unwrap_or_default(),
        pids: 64,
        memory_bytes: 128 * 1024 * 1024,
        nano_cpus: 1_000_000_000,
        log_max_size: "1m",
    });
    if let Some(host) = body.host_config.as_mut() {
        host.network_mode = Some(allocation.name(Kind::Network));
        host.runtime = Some("runc".to_owned());
    }
    body
}

/// The proxy's container. It runs as the allocation's proxy uid ([`crate::uids::Uid::proxy`])
/// in the agent's group: it may make its socket in the egress dir (the agent's, 0770), the
/// socket it makes (0660) is the agent's to connect to, and the vault (its own, 0400) is no one
/// else's. With a termination it mounts the vault read-only.
pub fn proxy_body(
    image_id: &str,
    allocation: &Allocation,
    spec: &EgressSpec,
    volumes: &ProxyVolumes,
    lifetime: Duration,
) -> Result<ContainerCreateBody> {
    let mut body = networked_body(
        image_id,
        allocation,
        Kind::Proxy,
        spec.proxy_command(lifetime),
        Vec::new(),
        Some(&volumes.egress),
    );
    body.user = Some(format!("{}:{}", allocation.uid.proxy(), allocation.uid));
    if spec.terminate.is_some() {
        let vault = volumes.vault.as_ref().ok_or_else(|| {
            Error::Custody("the proxy terminates its vendor host but has no vault".into())
        })?;
        if let Some(mounts) = body.host_config.as_mut().and_then(|h| h.mounts.as_mut()) {
            mounts.push(volume_mount(vault, VAULT_DIR, true, None));
        }
    }
    Ok(body)
}

/// The volumes the proxy mounts: the egress socket's (writable), and its vault (read-only) when
/// it terminates a vendor host.
#[derive(Debug, Clone, Default)]
pub struct ProxyVolumes {
    pub egress: VolumeSpec,
    pub vault: Option<VolumeSpec>,
}

/// The fake vendor endpoint's container: TLS on [`VENDOR_PORT`] with the fixtures' identity (PEM,
/// in its environment: its root is read-only and nothing is uploaded) and, when given, the digest
/// of the one key its API takes.
pub fn vendor_body(
    image_id: &str,
    allocation: &Allocation,
    (cert_pem, key_pem): (&str, &str),
    api_key_sha256: Option<&str>,
) -> ContainerCreateBody {
    let mut env = vec![
        format!("FAKE_VENDOR_CERT={cert_pem}"),
        format!("FAKE_VENDOR_KEY={key_pem}"),
    ];
    env.extend(api_key_sha256.map(|hex| format!("FAKE_VENDOR_KEY_SHA256={hex}")));
    networked_body(
        image_id,
        allocation,
        Kind::Vendor,
        vec![
            FAKE_VENDOR_BINARY.to_owned(),
            "tls".to_owned(),
            "--listen".to_owned(),
            format!("0.0.0.0:{VENDOR_PORT}"),
        ],
        env,
        None,
    )
}

/// The scripted DNS server's container (`answers` as its `--answer` arguments).
pub fn resolver_body(
    image_id: &str,
    allocation: &Allocation,
    answers: &[String],
) -> ContainerCreateBody {
    let mut argv = vec![
        FAKE_VENDOR_BINARY.to_owned(),
        "dns".to_owned(),
        "--listen".to_owned(),
        "0.0.0.0:53".to_owned(),
    ];
    for a in answers {
        argv.push("--answer".to_owned());
        argv.push(a.clone());
    }
    networked_body(image_id, allocation, Kind::Resolver, argv, Vec::new(), None)
}

/// The agent's side: the init's forwarder and the proxy URL in the environment.
pub fn agent_forward() -> (
    cordon_contract::policy::EgressForward,
    Vec<(String, String)>,
) {
    let url = egress::proxy_url(egress::FORWARD_PORT);
    (
        cordon_contract::policy::EgressForward {
            port: egress::FORWARD_PORT,
            socket: egress::SOCKET.to_owned(),
        },
        vec![
            ("HTTPS_PROXY".to_owned(), url.clone()),
            ("https_proxy".to_owned(), url),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EgressSpec {
        EgressSpec {
            map: vec!["api.vendor.test=172.18.0.5:443".into()],
            ..EgressSpec::allowing(&["api.vendor.test".into()])
        }
    }

    #[test]
    fn a_spec_is_checked_as_the_proxy_parses_it() {
        assert!(spec().check().is_ok());
        for bad in [
            EgressSpec::allowing(&[]),
            EgressSpec::allowing(&["127.0.0.1".into()]),
            EgressSpec::allowing(&["api.vendor.test:0443".into()]),
            EgressSpec::allowing(&vec!["a.test".to_owned(); MAX_ALLOW + 1]),
            EgressSpec {
                map: vec!["api.vendor.test=nowhere".into()],
                ..spec()
            },
            EgressSpec {
                skip: vec![Id::Landlock],
                ..spec()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_proxy_command_carries_every_rule() {
        let mut s = spec();
        s.skip = vec![Id::EgressSni];
        s.host_addresses = vec!["172.17.0.1".parse().unwrap()];
        let argv = s.proxy_command(Duration::from_secs(90)).join(" ");
        assert_eq!(
            argv,
            "/usr/bin/cordon-egress proxy --listen unix:/run/cordon/egress/egress.sock \
             --resolver 127.0.0.11:53 --max-tunnels 32 --lifetime-s 90 --allow api.vendor.test \
             --map api.vendor.test=172.18.0.5:443 --host-address 172.17.0.1 --skip sni"
        );
    }

    #[test]
    fn a_terminating_proxy_is_told_its_host_vault_header_and_budgets() {
        let mut s = spec();
        s.terminate = Some(Termination {
            target: "api.vendor.test:443".into(),
            header: CredentialHeader::Bearer,
            ca_sha256: "ab".repeat(32),
            sentinel: "sk-ant-api03-sentinel".into(),
            budget: cordon_egress::vendor::Budget {
                requests: 5,
                request_bytes: 6,
                response_bytes: 7,
            },
        });
        assert!(s.check().is_ok());
        let argv = s.proxy_command(Duration::from_secs(90)).join(" ");
        assert!(
            argv.ends_with(
                "--terminate api.vendor.test:443 --vault /run/cordon/vault --credential-header \
                 bearer --max-requests 5 --max-request-bytes 6 --max-response-bytes 7"
            ),
            "{argv}"
        );
        // The CA's fingerprint is the proxy's to attest, not an argument; no secret is either.
        assert!(!argv.contains(&"ab".repeat(32)));
        if let Some(t) = s.terminate.as_mut() {
            t.budget.requests = 0;
        }
        assert_eq!(s.check().unwrap_err().id(), "invalid-input");
    }
}
