//! Where the vendor credential lives during an invocation (issue 22). The runner's key stays in
//! the controller's [`Credential`] (this module's) and, from there, goes to exactly one place: a file in the
//! invocation's vault volume, which only the egress proxy (and the loader that writes it) mounts,
//! owned by the proxy's own uid, mode 0400. The agent holds a per-invocation sentinel in the
//! variable and shape the CLI expects, and trusts a CA made for this invocation alone:
//!
//! - the CA is name-constrained to the one host the proxy terminates, valid from a minute ago
//!   until the invocation's deadline plus [`VALIDITY_MARGIN`], and its private key is dropped as
//!   soon as it has signed the proxy's leaf (nothing can ever sign with it again);
//! - the leaf and its key go to the proxy's vault; the CA's certificate alone to the agent's
//!   input dir (`NODE_EXTRA_CA_CERTS`);
//! - the runner's extra CA ([`super::invoke::VendorOptions::extra_ca_pem`]) is what the proxy
//!   trusts for its own connection to the vendor, with the public roots.
//!
//! Nothing here can be printed: [`Custody`] and [`VaultFiles`] show only what is public.

use std::time::{Duration, SystemTime};

use cordon_egress::vendor::{Budget, CredentialHeader};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// How long past the invocation's deadline the CA and its leaf stay valid (the proxy outlives
/// the agent by its grace; a clock a little off must not end a run early).
pub const VALIDITY_MARGIN: Duration = Duration::from_secs(15 * 60);
/// How long before now they are valid from (the containers read the same kernel clock).
const BACKDATE: Duration = Duration::from_secs(60);
/// The CA certificate's name in the agent's input dir.
pub const AGENT_CA_FILE: &str = "cordon-vendor-ca.pem";
/// The vault: where the proxy reads its inputs, and their names.
pub const VAULT_DIR: &str = "/run/cordon/vault";
pub const VAULT_CREDENTIAL: &str = "credential";
pub const VAULT_SENTINEL: &str = "sentinel";
pub const VAULT_LEAF: &str = "leaf.pem";
pub const VAULT_LEAF_KEY: &str = "leaf-key.pem";
pub const VAULT_CA: &str = "ca.pem";
pub const VAULT_UPSTREAM_CA: &str = "upstream-ca.pem";

/// One invocation's custody of its vendor credential: the sentinel the agent holds, the CA it
/// trusts, and what the proxy's vault receives.
pub struct Custody {
    kind: CredentialKind,
    /// The terminated host and port.
    host: String,
    port: u16,
    sentinel: String,
    ca_pem: String,
    ca_sha256: String,
    budget: Budget,
    vault: VaultFiles,
}

/// The files of the proxy's vault, by name (the credential and the leaf's key among them).
pub struct VaultFiles(Vec<(&'static str, Vec<u8>)>);

impl VaultFiles {
    /// The vault as the loader uploads it: each file the proxy uid's, readable by it alone
    /// (0400), then the ready marker the proxy waits for (the engine extracts in order: every
    /// file is whole once the marker exists).
    pub fn tar(&self, proxy_uid: u32) -> Result<VaultTar> {
        let mut archive = crate::archive::Archive::in_memory(proxy_uid, "the proxy's vault");
        for (name, data) in &self.0 {
            archive.file(name, 0o400, data)?;
        }
        archive.file(cordon_egress::vendor::VAULT_READY, 0o400, b"")?;
        Ok(VaultTar(archive.finish()?))
    }

    /// The names of the files.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|(name, _)| *name).collect()
    }
}

/// The vault's tar, on its way to the loader: never printed.
#[derive(Clone)]
pub struct VaultTar(Vec<u8>);

impl VaultTar {
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl std::fmt::Debug for VaultTar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VaultTar({} bytes, withheld)", self.0.len())
    }
}

impl std::fmt::Debug for VaultFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VaultFiles({:?}, withheld)", self.names())
    }
}

impl std::fmt::Debug for Custody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custody")
            .field("kind", &self.kind)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("ca_sha256", &self.ca_sha256)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// What the agent and the proxy are told in the open (container config, argv, attestation).
#[derive(Clone, PartialEq, Eq)]
pub struct Termination {
    /// `host:port`, the one host the proxy terminates.
    pub target: String,
    pub header: CredentialHeader,
    /// The SHA-256 of the CA certificate's DER, lowercase hex.
    pub ca_sha256: String,
    pub budget: Budget,
    /// The sentinel the agent holds: its policy names it (the init and the validator check that
    /// nothing else credential-shaped reaches the agent). Never in the proxy's argv (the proxy
    /// reads it from its vault) and never shown.
    pub sentinel: String,
}

impl std::fmt::Debug for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Termination")
            .field("target", &self.target)
            .field("header", &self.header)
            .field("ca_sha256", &self.ca_sha256)
            .field("budget", &self.budget)
            .field("sentinel", &"(withheld)")
            .finish()
    }
}

impl Custody {
    /// Custody of `credential` for an invocation that reaches its vendor at `host:port` and must
    /// be over by `until`: a fresh sentinel, a fresh CA and leaf.
    pub fn new(
        credential: &Credential,
        host: &str,
        port: u16,
        upstream_ca_pem: Option<&str>,
        budget: Budget,
        until: SystemTime,
    ) -> Result<Custody> {
        let kind = credential.kind();
        let sentinel = sentinel(kind)?;
        let made = authority(host, until)?;
        let mut vault = vec![
            (VAULT_CREDENTIAL, credential.secret_bytes().to_vec()),
            (VAULT_SENTINEL, sentinel.as_bytes().to_vec()),
            (VAULT_LEAF, made.leaf_pem.into_bytes()),
            (VAULT_LEAF_KEY, made.leaf_key_pem.into_bytes()),
            (VAULT_CA, made.ca_pem.as_bytes().to_vec()),
        ];
        if let Some(pem) = upstream_ca_pem {
            vault.push((VAULT_UPSTREAM_CA, pem.as_bytes().to_vec()));
        }
        Ok(Custody {
            kind,
            host: host.to_owned(),
            port,
            sentinel,
            ca_sha256: made.ca_sha256,
            ca_pem: made.ca_pem,
            budget,
            vault: VaultFiles(vault),
        })
    }

    /// The agent's credential variable, holding the sentinel.
    pub fn agent_env(&self) -> (String, String) {
        (self.kind.variable().to_owned(), self.sentinel.clone())
    }

    /// The CA certificate the agent trusts (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// What the proxy is told in the open.
    pub fn termination(&self) -> Termination {
        Termination {
            target: format!("{}:{}", self.host, self.port),
            header: self.kind.header(),
            ca_sha256: self.ca_sha256.clone(),
            budget: self.budget,
            sentinel: self.sentinel.clone(),
        }
    }

    /// The sentinel (tests check it is what the agent sees, and never the key).
    pub fn sentinel(&self) -> &str {
        &self.sentinel
    }

    /// The proxy's vault files.
    pub fn vault(&self) -> &VaultFiles {
        &self.vault
    }
}

impl CredentialKind {
    /// The header the CLI sends this kind of credential in.
    pub const fn header(self) -> CredentialHeader {
        match self {
            CredentialKind::OAuthToken => CredentialHeader::Bearer,
            CredentialKind::ApiKey => CredentialHeader::ApiKey,
        }
    }

    /// The sentinel's prefix: the shape of the vendor's own credentials of this kind.
    const fn sentinel_prefix(self) -> &'static str {
        match self {
            CredentialKind::OAuthToken => "sk-ant-oat01-",
            CredentialKind::ApiKey => "sk-ant-api03-",
        }
    }
}

/// The URL-safe alphabet the vendor's credentials are written in.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A fresh sentinel in the shape of a `kind` credential: its prefix, 93 random characters (558
/// bits), `AA`.
fn sentinel(kind: CredentialKind) -> Result<String> {
    let mut random = [0u8; 93];
    getrandom::fill(&mut random)
        .map_err(|e| Error::Custody(format!("no randomness for the sentinel: {e}")))?;
    let body: String = random
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 63)]))
        .collect();
    Ok(format!("{}{body}AA", kind.sentinel_prefix()))
}

/// A CA made, used once and forgotten.
struct Made {
    ca_pem: String,
    ca_sha256: String,
    leaf_pem: String,
    leaf_key_pem: String,
}

/// A CA for `host` alone and its one leaf; the CA's key is dropped when this returns.
fn authority(host: &str, until: SystemTime) -> Result<Made> {
    let failed = |e: rcgen::Error| Error::Custody(format!("the invocation's CA: {e}"));
    let not_before = time::OffsetDateTime::from(SystemTime::now() - BACKDATE);
    let not_after = time::OffsetDateTime::from(until + VALIDITY_MARGIN);
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("cordon invocation CA for {host}"),
    );
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // It can vouch for the terminated host and nothing else, whoever holds it.
    ca.name_constraints = Some(NameConstraints {
        permitted_subtrees: vec![GeneralSubtree::DnsName(host.to_owned())],
        excluded_subtrees: Vec::new(),
    });
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca =
        CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(failed)?).map_err(failed)?;

    let leaf_key = KeyPair::generate().map_err(failed)?;
    let mut leaf = CertificateParams::new(vec![host.to_owned()]).map_err(failed)?;
    leaf.distinguished_name.push(DnType::CommonName, host);
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    let leaf = leaf.signed_by(&leaf_key, &ca).map_err(failed)?;
    Ok(Made {
        ca_pem: ca.pem(),
        ca_sha256: hex::encode(Sha256::digest(ca.der())),
        leaf_pem: leaf.pem(),
        leaf_key_pem: leaf_key.serialize_pem(),
    })
}

/// The vendor credential. It lives here and in the egress proxy's vault file
/// ([`crate::custody`]), nowhere else: the agent holds a sentinel. It is never shown: not in
/// `Debug`, labels, errors, logs or results, and it cannot be serialised.
#[derive(Clone)]
pub struct Credential {
    kind: CredentialKind,
    secret: String,
}

/// Which of the vendor's documented variables a credential travels in (the agent's sentinel
/// travels in the same one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// `CLAUDE_CODE_OAUTH_TOKEN` (a subscription's token, sent as `Authorization: Bearer`).
    OAuthToken,
    /// `ANTHROPIC_API_KEY` (an API key, sent as `x-api-key`).
    ApiKey,
}

impl CredentialKind {
    /// The CLI's variable for this kind.
    pub const fn variable(self) -> &'static str {
        match self {
            CredentialKind::OAuthToken => "CLAUDE_CODE_OAUTH_TOKEN",
            CredentialKind::ApiKey => "ANTHROPIC_API_KEY",
        }
    }
}

/// The longest credential taken.
pub const MAX_CREDENTIAL_BYTES: usize = 4096;

impl Credential {
    /// An OAuth token; refused unless it could travel as one header value.
    pub fn new(token: String) -> Result<Credential> {
        Credential::of(CredentialKind::OAuthToken, token)
    }

    /// A credential of `kind`; refused unless it is 1 to [`MAX_CREDENTIAL_BYTES`] of visible
    /// ASCII (what one header value carries, and what the proxy takes).
    pub fn of(kind: CredentialKind, secret: String) -> Result<Credential> {
        if secret.is_empty()
            || secret.len() > MAX_CREDENTIAL_BYTES
            || !secret.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Error::Invalid(format!(
                "the credential is empty, over {MAX_CREDENTIAL_BYTES} bytes, or not visible ASCII"
            )));
        }
        Ok(Credential { kind, secret })
    }

    pub fn kind(&self) -> CredentialKind {
        self.kind
    }

    /// The key's bytes, for the proxy's vault only ([`crate::custody`]).
    pub(crate) fn secret_bytes(&self) -> &[u8] {
        self.secret.as_bytes()
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({:?}, withheld)", self.kind)
    }
}

#[cfg(test)]
#[path = "custody_tests.rs"]
mod tests;
