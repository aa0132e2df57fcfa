use super::*;
use std::os::unix::fs::PermissionsExt;

/// A fresh directory under the system's temp dir, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "cordon-vault-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).unwrap();
        Dir(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A whole vault, as the controller writes it.
fn vault() -> (Dir, cordon_fake_vendor::ca::TestCa) {
    let ca = cordon_fake_vendor::ca::generate(&["api.vendor.test"]).unwrap();
    let dir = Dir::new();
    dir.write("credential", b"sk-real-key");
    dir.write("sentinel", b"sk-ant-api03-sentinelAA");
    dir.write("leaf.pem", ca.cert_pem.as_bytes());
    dir.write("leaf-key.pem", ca.key_pem.as_bytes());
    dir.write("ca.pem", ca.ca_pem.as_bytes());
    (dir, ca)
}

fn args(dir: &Dir) -> TerminateArgs {
    TerminateArgs {
        name: Name::parse("api.vendor.test").unwrap(),
        port: 443,
        vault: dir.0.clone(),
        header: CredentialHeader::ApiKey,
        budget: Budget::default(),
    }
}

#[test]
fn a_whole_vault_loads_and_attests_the_ca_it_holds() {
    let (dir, ca) = vault();
    let loaded = load(&args(&dir), Skipped::default()).unwrap();
    let der = CertificateDer::from_pem_slice(ca.ca_pem.as_bytes()).unwrap();
    assert_eq!(loaded.ca_sha256, hex(&Sha256::digest(der.as_ref())));
    assert_eq!(loaded.ca_sha256.len(), 64);
    let vendor = Name::parse("api.vendor.test").unwrap();
    let other = Name::parse("other.vendor.test").unwrap();
    assert!(loaded.is(&vendor, 443, false));
    assert!(!loaded.is(&vendor, 8443, false));
    assert!(!loaded.is(&other, 443, false));
    // The port binding left out (a gate case): another port of the name, never another name.
    assert!(loaded.is(&vendor, 8443, true));
    assert!(!loaded.is(&other, 443, true));
    assert_eq!(loaded.terminator.sentinel, "sk-ant-api03-sentinelAA");
    // Nothing printable carries the key.
    let shown = format!("{loaded:?}");
    assert!(!shown.contains("sk-real-key"), "{shown}");
    // An upstream CA is optional, and read when there.
    dir.write("upstream-ca.pem", ca.ca_pem.as_bytes());
    assert!(load(&args(&dir), Skipped::default()).is_ok());
}

#[test]
fn a_vault_missing_a_file_is_refused_naming_it() {
    for name in [
        "credential",
        "sentinel",
        "leaf.pem",
        "leaf-key.pem",
        "ca.pem",
    ] {
        let (dir, _) = vault();
        std::fs::remove_file(dir.0.join(name)).unwrap();
        let error = load(&args(&dir), Skipped::default()).unwrap_err();
        assert!(error.contains(name), "{name}: {error}");
    }
}

#[test]
fn a_link_a_fifo_a_directory_or_an_oversized_file_is_refused() {
    let (dir, ca) = vault();
    // A link to a good file: never followed.
    let elsewhere = Dir::new();
    elsewhere.write("credential", b"sk-real-key");
    std::fs::remove_file(dir.0.join("credential")).unwrap();
    std::os::unix::fs::symlink(elsewhere.0.join("credential"), dir.0.join("credential")).unwrap();
    assert!(load(&args(&dir), Skipped::default()).is_err());
    std::fs::remove_file(dir.0.join("credential")).unwrap();
    // A FIFO: refused without blocking on it.
    nix::unistd::mkfifo(
        &dir.0.join("credential"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let error = load(&args(&dir), Skipped::default()).unwrap_err();
    assert!(error.contains("regular file"), "{error}");
    std::fs::remove_file(dir.0.join("credential")).unwrap();
    // A directory.
    std::fs::create_dir(dir.0.join("credential")).unwrap();
    assert!(load(&args(&dir), Skipped::default()).is_err());
    std::fs::remove_dir(dir.0.join("credential")).unwrap();
    // Over the bound.
    dir.write("credential", &vec![b'k'; MAX_FILE as usize + 1]);
    let error = load(&args(&dir), Skipped::default()).unwrap_err();
    assert!(error.contains("regular file"), "{error}");
    // Put right, it loads again.
    std::fs::set_permissions(
        dir.0.join("credential"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    dir.write("credential", b"sk-real-key");
    let _ = ca;
    assert!(load(&args(&dir), Skipped::default()).is_ok());
}

#[test]
fn a_credential_or_sentinel_that_is_not_visible_ascii_or_a_bad_pem_is_refused() {
    for (name, bytes) in [
        ("credential", &b""[..]),
        ("credential", b"two words"),
        ("credential", b"caf\xc3\xa9"),
        ("sentinel", b""),
        ("sentinel", b"a\x01b"),
        ("leaf.pem", b"not a pem"),
        ("leaf-key.pem", b"not a pem"),
        ("ca.pem", b"not a pem"),
        ("upstream-ca.pem", b"no certificate here"),
    ] {
        let (dir, _) = vault();
        std::fs::remove_file(dir.0.join(name)).ok();
        dir.write(name, bytes);
        assert!(
            load(&args(&dir), Skipped::default()).is_err(),
            "{name}: {bytes:?}"
        );
    }
}

/// The proxy waits for the marker the controller writes last: a marker that comes late is
/// waited for, one that never comes ends the wait at its bound, and a marker that is a link or a
/// directory is refused at once.
#[tokio::test]
async fn the_proxy_waits_for_its_vaults_marker_within_its_bound() {
    let dir = Dir::new();
    let path = dir.0.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(60));
        std::fs::write(path.join(READY), b"").unwrap();
    });
    let started = std::time::Instant::now();
    wait_until_ready(&dir.0, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_millis(60));
    writer.join().unwrap();

    let empty = Dir::new();
    let started = std::time::Instant::now();
    let error = wait_until_ready(&empty.0, std::time::Duration::from_millis(80))
        .await
        .unwrap_err();
    assert!(error.contains("did not come within 80 ms"), "{error}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(80));

    let linked = Dir::new();
    linked.write("elsewhere", b"");
    std::os::unix::fs::symlink(linked.0.join("elsewhere"), linked.0.join(READY)).unwrap();
    let error = wait_until_ready(&linked.0, std::time::Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(error.contains("not a regular file"), "{error}");
    let directory = Dir::new();
    std::fs::create_dir(directory.0.join(READY)).unwrap();
    let error = wait_until_ready(&directory.0, std::time::Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(error.contains("not a regular file"), "{error}");
}

/// The proxy as a program waits for its vault: files written 100 ms after it starts, the marker
/// last, are read, and it serves until its lifetime ends (without the wait it finds no credential
/// and stops at once). A marker that never comes is the wait's own test above.
#[tokio::test]
async fn the_proxy_serves_once_a_vault_written_after_its_start_is_whole() {
    let (whole, _ca) = vault();
    let late = Dir::new();
    let socket = Dir::new();
    let proxy = crate::args::ProxyArgs {
        socket: socket.0.join("egress.sock"),
        rules: crate::decide::Rules::default(),
        resolver: None,
        max_tunnels: 4,
        lifetime: Some(std::time::Duration::from_millis(500)),
        terminate: Some(args(&late)),
    };
    let (from, to) = (whole.0.clone(), late.0.clone());
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        for entry in std::fs::read_dir(&from).unwrap() {
            let name = entry.unwrap().file_name();
            std::fs::copy(from.join(&name), to.join(&name)).unwrap();
        }
        std::fs::write(to.join(READY), b"").unwrap();
    });
    let started = std::time::Instant::now();
    let code = crate::serve::serve(proxy).await;
    writer.join().unwrap();
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert!(started.elapsed() >= std::time::Duration::from_millis(500));
}
