//! The test image and doctor.

use cordon::image;
use cordon_proof::doctor;
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
        // 16.8 MB at issue 22: the proxy's 4.6 MB carries its TLS terminator (rustls, hyper,
        // Mozilla's roots) beside the init, the probe, the fake CLI and the fake vendor.
        first.size_bytes > 0 && first.size_bytes < 20 * 1024 * 1024,
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

/// The agent image's ELF interpreter is on the agent's exec allowlist, and it runs any ELF it can
/// read: cordon's binaries are execute-only in the image, so it runs none of them. The probe
/// layer of `C0/execute/claude/agent`, in a small agent image around a host CLI (`/bin/true`):
/// with the binaries at [`image::agent::STATIC_MODE`] nothing runs; made readable (the
/// protection removed), the exec probe reports exactly `exec-via-interpreter`.
#[tokio::test]
async fn the_interpreter_runs_no_cordon_binary() {
    use cordon_proof::gate::{self, AgentRef, GateOptions, Layer};
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    let test_image = cordon_tests::image(&engine).await;
    let probe_row = |mode: u32| {
        let (ctl, engine, test_image) = (ctl.clone(), engine.clone(), test_image.clone());
        async move {
            let spec = image::agent::AgentImageSpec {
                static_mode: mode,
                ..image::agent::AgentImageSpec::new(
                    "/bin/true".into(),
                    image::BinarySource::Workspace(image::default_workspace()),
                )
            };
            let agent = image::agent::build_agent_image(&engine, &spec, &|_| {})
                .await
                .expect("a small agent image");
            assert_eq!(
                agent.exec.len(),
                2,
                "the CLI and its interpreter: {agent:?}"
            );
            let options = GateOptions {
                parallel: 1,
                filter: Some("C0/execute/claude/agent".into()),
                agent: Some(AgentRef::from(&agent)),
            };
            let report = gate::run(&ctl, &test_image, &options).await.expect("gate");
            assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
            let row = report
                .cases
                .into_iter()
                .find(|c| c.layer == Layer::Probe)
                .expect("the probe row");
            let _ = engine
                .docker()
                .remove_image(
                    &agent.built.id,
                    None::<bollard::query_parameters::RemoveImageOptions>,
                    None,
                )
                .await;
            row
        }
    };
    let strict = probe_row(image::agent::STATIC_MODE).await;
    assert!(strict.pass && strict.observed.is_empty(), "{strict:?}");
    let readable = probe_row(0o755).await;
    assert!(!readable.pass, "{readable:?}");
    assert_eq!(
        readable.observed,
        ["exec-allowlist/exec-policy/exec-via-interpreter"],
        "{readable:?}"
    );
}
