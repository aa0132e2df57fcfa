//! A throwaway CA and one server certificate signed by it, made fresh for each test run, so no key
//! is ever checked in and each run's clients trust only that run's endpoint.

use crate::Error;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A test CA and one leaf certificate for `names` signed by it, generated now (rcgen).
///
/// All PEM: `ca_pem` is what a client trusts, `cert_pem` (the leaf alone) and `key_pem` (its
/// PKCS#8 key) are the server's identity (`tls::Identity`). The validity is rcgen's default
/// (1975 to 4096), so a container's clock never matters.
#[derive(Debug, Clone)]
pub struct TestCa {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Generate a CA and a leaf for `names` (DNS names or IP addresses, each a subject alternative
/// name; the first is also the leaf's common name). ECDSA P-256 keys. No names is refused: such a
/// certificate would verify for nothing.
pub fn generate(names: &[&str]) -> Result<TestCa, Error> {
    let Some(first) = names.first() else {
        return Err(Error::Ca("no names for the certificate".to_owned()));
    };
    let ca_key = KeyPair::generate().map_err(ca_error)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(ca_error)?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "cordon fake-vendor test CA");
    // Signs leaves only: no intermediate below it.
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(ca_error)?;

    let leaf_key = KeyPair::generate().map_err(ca_error)?;
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut leaf = CertificateParams::new(names).map_err(ca_error)?;
    leaf.distinguished_name.push(DnType::CommonName, *first);
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    let cert = leaf.signed_by(&leaf_key, &ca).map_err(ca_error)?;

    Ok(TestCa {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

fn ca_error(error: rcgen::Error) -> Error {
    Error::Ca(error.to_string())
}
