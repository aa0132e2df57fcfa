//! The fake Messages API standing in for the vendor's real API host, so the real CLI runs a whole
//! session without a credential and without a packet leaving the machine: a fresh test CA, the
//! fake vendor on the invocation's network (an internal one: no route off the machine) mapped by
//! the proxy as the API host, the CLI trusting the CA through `NODE_EXTRA_CA_CERTS`, and an API
//! key the fake accepts. `cordon run --fake-vendor`, the real-CLI suite, the gate and the bench
//! use it.

use cordon_contract::Vendor;

use cordon::error::{Error, Result};
use cordon::invoke::{default_allowlist, Credential, CredentialKind, EgressOptions, VendorOptions};
use cordon::launch::egress::Fixtures;

/// The API key the CLI sends to the fake (any value would do; this one says what it is).
pub const FAKE_API_KEY: &str = "cordon-fake-vendor-key";

/// Everything an invocation needs to talk to the fake Messages API.
#[derive(Debug, Clone)]
pub struct FakeApi {
    /// The vendor's own allowlist (its API host only).
    pub allow: Vec<String>,
    pub egress: EgressOptions,
    pub vendor: VendorOptions,
    pub credential: Credential,
}

/// The fake API for `vendor`, its fixtures run from `fixture_image` (an image holding the
/// `fake-vendor` binary: the test image).
pub fn fake_api(vendor: Vendor, fixture_image: &str) -> Result<FakeApi> {
    let allow = default_allowlist(vendor);
    let names: Vec<&str> = allow.iter().map(String::as_str).collect();
    let ca = cordon_fake_vendor::ca::generate(&names)
        .map_err(|e| Error::Internal(format!("the fake vendor's test CA: {e}")))?;
    Ok(FakeApi {
        egress: EgressOptions {
            internal: true,
            fixtures: Some(Fixtures {
                cert_pem: ca.cert_pem,
                key_pem: ca.key_pem,
                mapped: allow.clone(),
                dns: None,
                image: Some(fixture_image.to_owned()),
            }),
            ..EgressOptions::default()
        },
        vendor: VendorOptions {
            extra_ca_pem: Some(ca.ca_pem),
            ..VendorOptions::default()
        },
        credential: Credential::of(CredentialKind::ApiKey, FAKE_API_KEY.to_owned())?,
        allow,
    })
}
