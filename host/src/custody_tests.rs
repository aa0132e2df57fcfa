use super::*;
use std::time::UNIX_EPOCH;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::pem::parse_x509_pem;

const KEY: &str = "sk-ant-api03-the-real-key-never-seen";

fn custody(kind: CredentialKind) -> Custody {
    let credential = Credential::of(kind, KEY.to_owned()).unwrap();
    Custody::new(
        &credential,
        "api.anthropic.com",
        443,
        Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
        Budget::default(),
        SystemTime::now() + Duration::from_secs(600),
    )
    .unwrap()
}

fn vault_file(custody: &Custody, name: &str) -> Vec<u8> {
    custody
        .vault()
        .0
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| bytes.clone())
        .unwrap_or_else(|| panic!("no {name} in the vault"))
}

#[test]
fn the_agent_holds_a_fresh_sentinel_in_its_kinds_variable_and_shape() {
    for (kind, variable, prefix) in [
        (CredentialKind::ApiKey, "ANTHROPIC_API_KEY", "sk-ant-api03-"),
        (
            CredentialKind::OAuthToken,
            "CLAUDE_CODE_OAUTH_TOKEN",
            "sk-ant-oat01-",
        ),
    ] {
        let one = custody(kind);
        let (name, value) = one.agent_env();
        assert_eq!(name, variable);
        assert_eq!(value, one.sentinel());
        assert!(
            value.starts_with(prefix) && value.ends_with("AA"),
            "{value}"
        );
        assert_eq!(value.len(), prefix.len() + 93 + 2);
        assert!(value
            .bytes()
            .all(|b| ALPHABET.contains(&b) || b"-".contains(&b)));
        assert_ne!(value, KEY);
        // Fresh every time.
        assert_ne!(custody(kind).sentinel(), one.sentinel());
        assert_eq!(one.termination().header, kind.header());
    }
}

#[test]
fn the_key_is_in_the_vault_and_in_nothing_printable() {
    let custody = custody(CredentialKind::ApiKey);
    assert_eq!(vault_file(&custody, VAULT_CREDENTIAL), KEY.as_bytes());
    assert_eq!(
        vault_file(&custody, VAULT_SENTINEL),
        custody.sentinel().as_bytes()
    );
    let leaf_key = String::from_utf8(vault_file(&custody, VAULT_LEAF_KEY)).unwrap();
    for shown in [
        format!("{custody:?}"),
        format!("{:?}", custody.vault()),
        format!("{:?}", custody.vault().tar(1_500_001).unwrap()),
        format!("{:?}", custody.termination()),
        format!(
            "{:?}",
            Credential::of(CredentialKind::ApiKey, KEY.into()).unwrap()
        ),
        custody.ca_pem().to_owned(),
        custody.agent_env().1,
    ] {
        assert!(!shown.contains(KEY), "{shown}");
        assert!(!shown.contains(leaf_key.trim()), "{shown}");
    }
}

#[test]
fn the_vault_tar_is_the_proxys_alone() {
    let custody = custody(CredentialKind::ApiKey);
    let tar = custody.vault().tar(1_500_001).unwrap().into_bytes();
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut names = Vec::new();
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let header = entry.header();
        assert_eq!(header.uid().unwrap(), 1_500_001);
        assert_eq!(header.gid().unwrap(), 1_500_001);
        assert_eq!(header.mode().unwrap() & 0o7777, 0o400);
        assert!(header.entry_type().is_file());
        names.push(entry.path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(
        names,
        [
            VAULT_CREDENTIAL,
            VAULT_SENTINEL,
            VAULT_LEAF,
            VAULT_LEAF_KEY,
            VAULT_CA,
            VAULT_UPSTREAM_CA,
            // Last: the proxy reads nothing before it (`vault::wait_until_ready`).
            cordon_egress::vendor::VAULT_READY,
        ]
    );
}

#[test]
fn the_ca_vouches_for_the_one_host_until_the_deadline_and_signed_the_leaf() {
    let until = SystemTime::now() + Duration::from_secs(600);
    let credential = Credential::of(CredentialKind::ApiKey, KEY.to_owned()).unwrap();
    let custody = Custody::new(
        &credential,
        "api.vendor.test",
        8443,
        None,
        Budget::default(),
        until,
    )
    .unwrap();
    let (_, ca_pem) = parse_x509_pem(custody.ca_pem().as_bytes()).unwrap();
    let ca = ca_pem.parse_x509().unwrap();
    let leaf_pem_bytes = vault_file(&custody, VAULT_LEAF);
    let (_, leaf_pem) = parse_x509_pem(&leaf_pem_bytes).unwrap();
    let leaf = leaf_pem.parse_x509().unwrap();

    // A CA with no room below it, constrained to the host.
    let constraints = ca.basic_constraints().unwrap().unwrap().value;
    assert!(constraints.ca);
    assert_eq!(constraints.path_len_constraint, Some(0));
    let permitted: Vec<String> = ca
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::NameConstraints(nc) => Some(nc.permitted_subtrees.clone()),
            _ => None,
        })
        .expect("name constraints")
        .unwrap_or_default()
        .iter()
        .map(|subtree| match &subtree.base {
            GeneralName::DNSName(name) => (*name).to_owned(),
            other => panic!("a non-DNS subtree: {other:?}"),
        })
        .collect();
    assert_eq!(permitted, ["api.vendor.test"]);

    // Valid from a minute ago until the deadline plus the margin, for both.
    let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let now = seconds(SystemTime::now());
    let last = seconds(until + VALIDITY_MARGIN);
    for cert in [&ca, &leaf] {
        let validity = cert.validity();
        let from = validity.not_before.timestamp();
        assert!((now - 70..=now).contains(&from), "{from} vs {now}");
        assert!((last - 2..=last).contains(&validity.not_after.timestamp()));
    }

    // The leaf names the host alone, is no CA, and the CA signed it.
    let san = leaf.subject_alternative_name().unwrap().unwrap().value;
    assert_eq!(san.general_names, [GeneralName::DNSName("api.vendor.test")]);
    assert!(!leaf.is_ca());
    leaf.verify_signature(Some(ca.public_key())).unwrap();
    assert_eq!(custody.termination().target, "api.vendor.test:8443");
    assert_eq!(
        custody.termination().ca_sha256,
        hex::encode(Sha256::digest(ca_pem.contents.as_slice()))
    );
    // Each custody has its own CA.
    let other = Custody::new(
        &credential,
        "api.vendor.test",
        8443,
        None,
        Budget::default(),
        until,
    )
    .unwrap();
    assert_ne!(
        other.termination().ca_sha256,
        custody.termination().ca_sha256
    );
}

#[test]
fn a_credential_is_visible_ascii_within_its_bound() {
    for bad in ["", "two words", "tab\there", "line\nbreak", "caf\u{e9}"] {
        assert!(
            Credential::of(CredentialKind::ApiKey, bad.to_owned()).is_err(),
            "{bad:?}"
        );
    }
    let long = "k".repeat(MAX_CREDENTIAL_BYTES + 1);
    assert!(Credential::of(CredentialKind::ApiKey, long).is_err());
    assert!(Credential::of(CredentialKind::ApiKey, "k".repeat(MAX_CREDENTIAL_BYTES)).is_ok());
}
