//! The proxy's vault: the files the controller writes for the terminator as the proxy starts
//! (the vendor credential, the sentinel the agent holds, the leaf for the vendor host and its key,
//! the invocation CA's certificate, the runner's upstream CA), then a [`READY`] marker, last. The
//! proxy waits for the marker ([`wait_until_ready`], at most [`WAIT`]) as the init waits for its
//! control dir: the vault is a tmpfs volume, which keeps what is written only while a container
//! mounts it, so the controller writes it once this container holds it mounted. Each file is
//! opened without following a link and without blocking, must be a regular file of at most
//! [`MAX_FILE`] bytes, and is read once, at start: a vault that does not come or cannot be read
//! stops the proxy before it listens, so the host never sees an attestation and no code of the
//! agent's runs.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

use crate::host::Name;
use crate::terminate::{client_config, server_config, Key, Terminator};
use crate::vendor::{Budget, CredentialHeader, Skipped};

/// The most bytes one vault file may hold.
pub const MAX_FILE: u64 = 64 * 1024;
/// The marker the controller writes last: every other file is whole once it exists.
pub const READY: &str = crate::vendor::VAULT_READY;
/// How long the proxy waits for [`READY`] (the host's own wait for its attestation is as long).
pub const WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often it looks.
const READY_POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// Wait until `dir` holds [`READY`] as a regular file (looked at without following a link), at
/// most `within`. A marker of another type is refused at once.
pub async fn wait_until_ready(dir: &Path, within: std::time::Duration) -> Result<(), String> {
    let marker = dir.join(READY);
    let started = std::time::Instant::now();
    loop {
        match std::fs::symlink_metadata(&marker) {
            Ok(meta) if meta.is_file() => return Ok(()),
            Ok(_) => return Err(format!("{} is not a regular file", marker.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(format!("{}: {error}", marker.display())),
        }
        if started.elapsed() >= within {
            return Err(format!(
                "{} did not come within {} ms",
                marker.display(),
                within.as_millis()
            ));
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// The vendor host the proxy terminates, where its inputs are, and the budgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminateArgs {
    pub name: Name,
    pub port: u16,
    pub vault: PathBuf,
    pub header: CredentialHeader,
    pub budget: Budget,
}

/// The terminated host as the proxy serves it and attests it.
#[derive(Debug, Clone)]
pub struct Termination {
    pub name: Name,
    pub port: u16,
    /// SHA-256 of the invocation CA certificate's DER, lowercase hex: the host compares it with
    /// the CA it made.
    pub ca_sha256: String,
    pub terminator: Arc<Terminator>,
}

impl Termination {
    /// Whether a CONNECT to `name:port` is the terminated host's. `by_name_alone` is a gate
    /// case's removal of the port binding ([`crate::decide::Rule::HostBound`]).
    pub fn is(&self, name: &Name, port: u16, by_name_alone: bool) -> bool {
        self.name == *name && (self.port == port || by_name_alone)
    }

    pub fn header(&self) -> CredentialHeader {
        self.terminator.header
    }

    pub fn budget(&self) -> Budget {
        self.terminator.budget
    }
}

/// Read the vault `args` names and build the terminator.
pub fn load(args: &TerminateArgs, skip: Skipped) -> Result<Termination, String> {
    let dir = &args.vault;
    let required = |name: &str| -> Result<Vec<u8>, String> {
        read(&dir.join(name))?.ok_or_else(|| format!("the vault has no {name}"))
    };
    let text = |name: &str| -> Result<String, String> {
        String::from_utf8(required(name)?).map_err(|_| format!("{name} in the vault is not UTF-8"))
    };
    let key = Key::new(text("credential")?.trim_end().to_owned())
        .map_err(|error| format!("the vault's credential: {error}"))?;
    let sentinel = text("sentinel")?.trim_end().to_owned();
    if sentinel.is_empty() || !sentinel.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the vault's sentinel is empty or not visible ASCII".into());
    }
    let leaf = required("leaf.pem")?;
    let leaf_key = required("leaf-key.pem")?;
    let ca = required("ca.pem")?;
    let ca_der = CertificateDer::from_pem_slice(&ca)
        .map_err(|error| format!("the vault's ca.pem: {error}"))?;
    let upstream_ca = read(&dir.join("upstream-ca.pem"))?;
    let server =
        server_config(&leaf, &leaf_key).map_err(|error| format!("the vault's leaf: {error}"))?;
    let client = client_config(upstream_ca.as_deref())
        .map_err(|error| format!("the vault's upstream CA: {error}"))?;
    Ok(Termination {
        name: args.name.clone(),
        port: args.port,
        ca_sha256: hex(&Sha256::digest(ca_der.as_ref())),
        terminator: Arc::new(Terminator {
            skip,
            ..Terminator::new(
                args.name.as_str(),
                args.header,
                sentinel,
                key,
                args.budget,
                server,
                client,
            )
        }),
    })
}

/// One vault file: a regular file, not a link, at most [`MAX_FILE`] bytes; `None` when there is
/// nothing at `path`.
fn read(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let shown = path.display();
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("{shown}: {error}")),
    };
    let meta = file
        .metadata()
        .map_err(|error| format!("{shown}: {error}"))?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Err(format!(
            "{shown} is not a regular file of at most {MAX_FILE} bytes"
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("{shown}: {error}"))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("{shown} grew past {MAX_FILE} bytes"));
    }
    Ok(Some(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "vault_tests.rs"]
mod tests;
