//! The profile of an invocation over its storage, with the masks and pins its redeemed tree check
//! gives (execute and fix).

use std::time::{Duration, Instant};

use cordon_contract::paths;

use super::{claude, Capture, Options};
use crate::audit::Masks;
use crate::custody::{Custody, AGENT_CA_FILE};
use crate::error::{Error, Result};
use crate::labels::Allocation;
use crate::profile::{EgressSpec, Profile, ProfileSpec, SCHEMA_FILE};

/// Where an invocation's profile masks and pins: the redeemed check's gitlinks and pins, and
/// whether the engine's API also carries the pins as subpath mounts.
#[derive(Debug, Clone, Default)]
pub(super) struct Tree {
    pub masks: Masks,
    pub pin_mounts: bool,
}

/// The profile of an invocation over its storage.
pub(super) fn profile(
    capture: &Capture,
    allocation: &Allocation,
    image_id: &str,
    exec: &[String],
    custody: Option<&Custody>,
    options: &Options,
    tree: &Tree,
) -> Result<Profile> {
    let request = &capture.request;
    let storage = request.storage.storage()?;
    // The host stops the run at the request's deadline with a typed reason; the init's own
    // deadline is a backstop for a controller that died, so it comes later.
    let left = request.deadline.saturating_duration_since(Instant::now());
    let mut limits = options.limits.clone();
    limits.deadline = left + limits.grace + Duration::from_secs(10);
    let mut input_files = capture
        .schema_text()
        .map(|s| vec![(SCHEMA_FILE.to_owned(), s.as_bytes().to_vec())])
        .unwrap_or_default();
    let switches = if options.vendor.nonessential_traffic {
        &[][..]
    } else {
        claude::ENV
    };
    let mut env: Vec<(String, String)> = switches
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if let Some(pem) = &options.vendor.extra_ca_pem {
        check_ca_bundle(pem)?;
    }
    // With a credential, the agent holds the sentinel and trusts this invocation's CA alone for
    // its vendor host (the runner's extra CA went to the proxy's vault). Without one, nothing is
    // terminated and the extra CA is the CLI's own.
    let agent_ca = match custody {
        Some(custody) => {
            env.push(custody.agent_env());
            Some((AGENT_CA_FILE, custody.ca_pem().as_bytes()))
        }
        None => options
            .vendor
            .extra_ca_pem
            .as_deref()
            .map(|pem| (EXTRA_CA_FILE, pem.as_bytes())),
    };
    if let Some((name, pem)) = agent_ca {
        input_files.push((name.to_owned(), pem.to_vec()));
        env.push((
            "NODE_EXTRA_CA_CERTS".to_owned(),
            format!("{}/{name}", paths::INPUT_DIR),
        ));
    }
    if let Some(url) = &options.vendor.base_url {
        check_base_url(url, &request.network_allowlist)?;
        env.push(("ANTHROPIC_BASE_URL".to_owned(), url.clone()));
    }
    // Approved commands: their offered list in the input dir, their MCP server on the exec
    // allowlist and in the CLI's argv, and the relay's socket dir mounted read-only.
    let offers_commands = !options.commands.is_empty();
    let mut exec = exec.to_vec();
    if offers_commands {
        let ledger = crate::command::ledger::Ledger::new(
            options.commands.clone(),
            request.phase,
            request.deadline,
        )?;
        input_files.push((
            cordon_contract::command::OFFERED_NAME.to_owned(),
            ledger.offered()?,
        ));
        exec.push(cordon_contract::command::MCP_SERVER.to_owned());
    }
    let profile = Profile::new(ProfileSpec {
        phase: request.phase,
        vendor: request.vendor,
        image_id: image_id.to_owned(),
        allocation: allocation.clone(),
        limits,
        storage: storage.mounts_for(allocation),
        command: claude::command(
            request.phase,
            &request.prompt,
            capture.schema_text(),
            offers_commands,
        ),
        exec,
        env,
        gitlinks: tree.masks.gitlinks.clone(),
        pins: tree.masks.pins.clone(),
        pin_mounts: tree.pin_mounts && !tree.masks.pins.is_empty(),
        landlock_abi: crate::profile::DEFAULT_LANDLOCK_ABI,
        egress: egress_spec(&request.network_allowlist, &options.egress, custody),
        input_files,
    })?;
    if offers_commands {
        profile.offering_commands()
    } else {
        Ok(profile)
    }
}

/// The extra CA bundle's name in the input dir.
pub const EXTRA_CA_FILE: &str = "extra-ca.pem";
/// At most this much extra CA bundle.
pub const MAX_CA_BUNDLE_BYTES: usize = 512 * 1024;
/// At most this much base URL.
pub const MAX_BASE_URL_BYTES: usize = 2048;

/// An extra CA bundle is PEM text holding at least one certificate.
fn check_ca_bundle(pem: &str) -> Result<()> {
    if pem.len() > MAX_CA_BUNDLE_BYTES
        || !pem.contains("-----BEGIN CERTIFICATE-----")
        || pem.contains('\0')
    {
        return Err(Error::Invalid(format!(
            "the extra CA bundle is not PEM certificates of at most {MAX_CA_BUNDLE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// An API base URL is `https://NAME[:PORT][/PATH]` whose `NAME[:PORT]` the allowlist admits (the
/// proxy would refuse it anyway; this says so before anything is made), in printable ASCII.
fn check_base_url(url: &str, allowlist: &[String]) -> Result<()> {
    let refused = |why: &str| Error::Invalid(format!("the API base URL {url:?} {why}"));
    if url.len() > MAX_BASE_URL_BYTES || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(refused("is too long or not printable ASCII"));
    }
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(refused("is not https://"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (
            host,
            cordon_egress::allowlist::parse_port(port).map_err(|_| refused("has a bad port"))?,
        ),
        None => (authority, 443),
    };
    let name = cordon_egress::host::Name::parse(host)
        .map_err(|_| refused("does not name a host (never an address or user info)"))?;
    let admitted = cordon_egress::allowlist::Allowlist::parse(allowlist)
        .map_err(|_| refused("cannot be checked against an unparsable allowlist"))?
        .check(&name, port)
        .is_ok();
    if !admitted {
        return Err(refused("names a host the network allowlist does not admit"));
    }
    Ok(())
}

/// The proxy an allowlist asks for; none for an empty one (no network, no proxy, no socket).
fn egress_spec(
    allowlist: &[String],
    options: &super::EgressOptions,
    custody: Option<&Custody>,
) -> Option<EgressSpec> {
    (!allowlist.is_empty()).then(|| EgressSpec {
        map: options.map.clone(),
        resolver: options.resolver,
        internal: options.internal,
        terminate: custody.map(Custody::termination),
        ..EgressSpec::allowing(allowlist)
    })
}

/// The vendor API host and port the CLI talks to: the base URL's, else the vendor's own. A
/// credential needs it on the allowlist (it is what the proxy terminates); without one the
/// credential would have nowhere to go but the agent, which is refused.
pub(super) fn vendor_target(
    vendor: cordon_contract::Vendor,
    allowlist: &[String],
    base_url: Option<&str>,
) -> Result<(String, u16)> {
    let (host, port) = match base_url {
        Some(url) => {
            check_base_url(url, allowlist)?;
            let rest = url.strip_prefix("https://").unwrap_or(url);
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            match authority.rsplit_once(':') {
                Some((host, port)) => (
                    host.to_owned(),
                    // Checked above; refused again rather than guessed.
                    cordon_egress::allowlist::parse_port(port).map_err(|_| {
                        Error::Invalid(format!("the API base URL {url:?} has a bad port"))
                    })?,
                ),
                None => (authority.to_owned(), 443),
            }
        }
        None => {
            let host = super::default_allowlist(vendor)
                .into_iter()
                .next()
                .unwrap_or_default();
            (host, 443)
        }
    };
    let name = cordon_egress::host::Name::parse(&host)
        .map_err(|_| Error::Custody(format!("{host:?} is not a host name")))?;
    let admitted = cordon_egress::allowlist::Allowlist::parse(allowlist)
        .map(|list| list.check(&name, port).is_ok())
        .unwrap_or(false);
    if !admitted {
        return Err(Error::Custody(format!(
            "the vendor's API host {host}:{port} is not on the network allowlist, so the proxy \
             cannot terminate it and the credential would have to be the agent's"
        )));
    }
    Ok((name.to_string(), port))
}

/// An image id that stands in while the real one is being built (the profile is checked once
/// before anything is allocated).
pub(super) const PROVISIONAL_IMAGE: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_is_https_to_a_host_the_allowlist_admits() {
        let allow = vec![
            "gateway.corp.test:8443".to_owned(),
            "api.anthropic.com".to_owned(),
        ];
        for good in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://gateway.corp.test:8443/anthropic/v1",
        ] {
            assert!(check_base_url(good, &allow).is_ok(), "{good}");
        }
        for bad in [
            "http://api.anthropic.com",
            "https://gateway.corp.test/anthropic",
            "https://evil.test",
            "https://user@api.anthropic.com",
            "https://127.0.0.1:8443",
            "https://[::1]:443",
            "https://api.anthropic.com:0443",
            "https://api.anthropic.com/a b",
            "https://api.anthropic.com/\u{202e}",
            "api.anthropic.com",
            "",
        ] {
            let e = check_base_url(bad, &allow).expect_err(bad);
            assert_eq!(e.id(), "invalid-input", "{bad}");
        }
        let long = format!(
            "https://api.anthropic.com/{}",
            "a".repeat(MAX_BASE_URL_BYTES)
        );
        assert!(check_base_url(&long, &allow).is_err());
    }

    #[test]
    fn the_terminated_host_is_the_base_urls_or_the_vendors_and_must_be_allowed() {
        use cordon_contract::Vendor;
        let allow =
            |entries: &[&str]| -> Vec<String> { entries.iter().map(|e| (*e).to_owned()).collect() };
        assert_eq!(
            vendor_target(Vendor::Claude, &allow(&["api.anthropic.com"]), None).unwrap(),
            ("api.anthropic.com".to_owned(), 443)
        );
        assert_eq!(
            vendor_target(
                Vendor::Claude,
                &allow(&["gateway.corp.test:8443"]),
                Some("https://gateway.corp.test:8443/anthropic")
            )
            .unwrap(),
            ("gateway.corp.test".to_owned(), 8443)
        );
        // A wildcard that admits the host is enough: the proxy terminates that one name.
        assert_eq!(
            vendor_target(Vendor::Claude, &allow(&["*.anthropic.com"]), None).unwrap(),
            ("api.anthropic.com".to_owned(), 443)
        );
        for (list, url) in [
            (allow(&[]), None),
            (allow(&["other.test"]), None),
            (allow(&["api.anthropic.com:8443"]), None),
        ] {
            let refused = vendor_target(Vendor::Claude, &list, url).unwrap_err();
            assert_eq!(refused.id(), "vendor-custody", "{list:?}");
        }
        // A base URL off the allowlist is refused as input, before custody is considered.
        let refused = vendor_target(
            Vendor::Claude,
            &allow(&["api.anthropic.com"]),
            Some("https://gateway.corp.test"),
        )
        .unwrap_err();
        assert_eq!(refused.id(), "invalid-input");
    }

    #[test]
    fn an_extra_ca_bundle_is_bounded_pem_certificates() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        assert!(check_ca_bundle(pem).is_ok());
        assert!(check_ca_bundle("not a certificate").is_err());
        assert!(check_ca_bundle("-----BEGIN PRIVATE KEY-----\n").is_err());
        let big = pem.repeat(MAX_CA_BUNDLE_BYTES / pem.len() + 1);
        assert!(check_ca_bundle(&big).is_err());
        assert!(check_ca_bundle(&format!("{pem}\0")).is_err());
    }
}
