//! The test image and doctor.

use cordon::{doctor, image};
use cordon_tests::controller;

/// The image builds from the workspace's static-pie binaries, and an unchanged workspace reuses it.
#[tokio::test]
async fn image_builds_from_static_binaries_and_is_reused() {
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    let first = image::build_test_image(&engine, &image::default_workspace())
        .await
        .expect("build");
    let second = image::build_test_image(&engine, &image::default_workspace())
        .await
        .expect("rebuild");
    assert!(
        second.reused,
        "an unchanged workspace must reuse {}",
        first.tag
    );
    assert_eq!(first.id, second.id);
    assert!(first.tag.starts_with("cordon-test:"));
    assert!(
        first.size_bytes > 0 && first.size_bytes < 16 * 1024 * 1024,
        "size {}",
        first.size_bytes
    );
    let dir = image::default_workspace()
        .join("target/static")
        .join(image::TARGET)
        .join(image::PROFILE);
    for name in ["cordon-init", "cordon-probe", "claude"] {
        let path = dir.join(name);
        let data = std::fs::read(&path).unwrap();
        image::check_static_pie(&path, &data).expect("static-pie");
    }
}

/// doctor reports the engine and the in-container facts, and judges this machine good enough.
#[tokio::test]
async fn doctor_reports_real_facts() {
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    let image = cordon_tests::image(&engine).await;
    let report = doctor::run(&ctl, &image).await.expect("doctor");
    assert!(report.ok, "{}", report.text());
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["in_container"]["landlock_abi"].as_u64().unwrap() >= 1);
    assert_eq!(json["in_container"]["seccomp"], "2");
    for name in [
        "engine API",
        "storage driver",
        "cgroup version",
        "Landlock ABI in a container",
        "seccomp mode in a container",
    ] {
        assert!(report.facts.iter().any(|f| f.name == name), "{name}");
    }
}
