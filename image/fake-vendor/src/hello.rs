//! ClientHellos for tests of the proxy's SNI rule: a real client's first flight (rustls, as a
//! vendor CLI would send it) and hand-made records with chosen extensions (the hostile ones).

use std::sync::Arc;

use crate::Error;

/// The first flight of a real rustls client for `server`: one record holding its ClientHello
/// (with no SNI when `server` is an IP address).
pub fn real(server: &str) -> Result<Vec<u8>, Error> {
    let tls = |e: &dyn std::fmt::Display| Error::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server.to_owned()).map_err(|e| tls(&e))?;
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| tls(&e))?;
    let mut out = Vec::new();
    client.write_tls(&mut out)?;
    Ok(out)
}

/// A TLS record of `kind` (22: handshake) carrying `payload`.
pub fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind, 3, 1];
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A hand-made ClientHello record with exactly these extensions (type, payload).
pub fn with_extensions(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut ext = Vec::new();
    for (kind, data) in extensions {
        ext.extend_from_slice(&kind.to_be_bytes());
        ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
        ext.extend_from_slice(data);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[0; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut handshake = vec![1];
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    record(22, &handshake)
}

/// A server_name extension's payload with these (name type, name) entries (type 0: a host name).
pub fn server_name(names: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (kind, name) in names {
        list.push(*kind);
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&list);
    data
}
