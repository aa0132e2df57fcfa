//! The fake Messages API standing in for the vendor's real API host, so the real CLI runs a whole
//! session without a credential and without a packet leaving the machine: a fresh test CA, the
//! fake vendor on the invocation's network (an internal one: no route off the machine) mapped by
//! the proxy as the API host, the proxy trusting the CA for its upstream (the CLI trusts only the
//! invocation's own CA, for the proxy's leaf), and an API key the fake accepts: fresh per
//! [`fake_api`], held by the proxy alone (the CLI holds a sentinel, which the fake answers 401). `cordon run --fake-vendor`, the real-CLI suite, the gate and the bench
//! use it.

use cordon_contract::Vendor;

use cordon::error::{Error, Result};
use cordon::invoke::{default_allowlist, Credential, CredentialKind, EgressOptions, VendorOptions};
use cordon::launch::egress::Fixtures;

/// What every fake API key starts with (the rest is fresh per [`fake_api`]).
pub const FAKE_API_KEY_PREFIX: &str = "cordon-fake-vendor-key-";

/// Everything an invocation needs to talk to the fake Messages API.
#[derive(Debug, Clone)]
pub struct FakeApi {
    /// The vendor's own allowlist (its API host only).
    pub allow: Vec<String>,
    pub egress: EgressOptions,
    pub vendor: VendorOptions,
    pub credential: Credential,
    /// The key itself, for the tests that look for it where it must not be (the fake takes no
    /// other: it answers 401 to the agent's sentinel).
    pub key: String,
}

/// The fake API for `vendor`, its fixtures run from `fixture_image` (an image holding the
/// `fake-vendor` binary: the test image), with an API key.
pub fn fake_api(vendor: Vendor, fixture_image: &str) -> Result<FakeApi> {
    fake_api_with(vendor, fixture_image, CredentialKind::ApiKey)
}

/// [`fake_api`] with a credential of `kind` (an OAuth token travels as `authorization: Bearer`,
/// which the fake takes as well).
pub fn fake_api_with(vendor: Vendor, fixture_image: &str, kind: CredentialKind) -> Result<FakeApi> {
    let allow = default_allowlist(vendor);
    let names: Vec<&str> = allow.iter().map(String::as_str).collect();
    let ca = cordon_fake_vendor::ca::generate(&names)
        .map_err(|e| Error::Internal(format!("the fake vendor's test CA: {e}")))?;
    let key = format!("{FAKE_API_KEY_PREFIX}{}", uuid::Uuid::new_v4().simple());
    Ok(FakeApi {
        egress: EgressOptions {
            internal: true,
            fixtures: Some(Fixtures {
                cert_pem: ca.cert_pem,
                key_pem: ca.key_pem,
                mapped: allow.clone(),
                dns: None,
                image: Some(fixture_image.to_owned()),
                api_key_sha256: Some(cordon_fake_vendor::tls::Auth::hex_of(&key)),
            }),
            ..EgressOptions::default()
        },
        vendor: VendorOptions {
            extra_ca_pem: Some(ca.ca_pem),
            ..VendorOptions::default()
        },
        credential: Credential::of(kind, key.clone())?,
        key,
        allow,
    })
}
