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
            remove_agent_image(&engine, &agent).await;
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

/// Remove a test's agent image, every tag of it (its context's and its recipe's).
async fn remove_agent_image(engine: &cordon::Engine, agent: &image::agent::AgentImage) {
    let _ = engine
        .docker()
        .remove_image(
            &agent.built.id,
            Some(bollard::query_parameters::RemoveImageOptions {
                force: true,
                ..Default::default()
            }),
            None,
        )
        .await;
}

/// The recipe tags an image carries.
async fn recipe_tags(engine: &cordon::Engine, id: &str) -> Vec<String> {
    engine
        .docker()
        .inspect_image(id)
        .await
        .unwrap()
        .repo_tags
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.contains(":recipe-"))
        .collect()
}

/// An agent image built before is found by its recipe (the inputs' identities, no read of the
/// CLI or its libraries): the same tag and id, reused; a recipe tag moved to another image (an
/// agent image of another context, or one with none) is not trusted (the context is written and
/// hashed again, and the tag put back); an input that moved makes a new recipe whose tag replaces
/// the old one.
#[tokio::test]
async fn an_agent_image_built_before_is_found_by_its_recipe_and_a_moved_recipe_tag_is_not_trusted()
{
    use std::sync::Mutex;
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    let test_image = cordon_tests::image(&engine).await;
    // A mode of its own: an image no other test builds or removes.
    let spec = image::agent::AgentImageSpec {
        static_mode: 0o751,
        ..image::agent::AgentImageSpec::new(
            "/bin/true".into(),
            image::BinarySource::Workspace(image::default_workspace()),
        )
    };
    let build = || async {
        let said = Mutex::new(Vec::new());
        let agent = image::agent::build_agent_image(&engine, &spec, &|line| {
            said.lock().unwrap().push(line.to_owned())
        })
        .await
        .expect("a small agent image");
        let by_recipe = said
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("by its recipe"));
        (agent, by_recipe)
    };
    let (first, _) = build().await;
    let (again, by_recipe) = build().await;
    assert!(by_recipe, "{again:?}");
    assert!(again.built.reused);
    assert_eq!(
        (
            &again.built.tag,
            &again.built.id,
            &again.cli_sha256,
            &again.files
        ),
        (
            &first.built.tag,
            &first.built.id,
            &first.cli_sha256,
            &first.files
        )
    );
    // The recipe's tag moved to another agent image (one with a context tag of its own) and to
    // the test image (none): not trusted either time.
    let [recipe_tag] = recipe_tags(&engine, &first.built.id)
        .await
        .try_into()
        .unwrap();
    let other = image::agent::build_agent_image(
        &engine,
        &image::agent::AgentImageSpec {
            static_mode: 0o715,
            ..spec.clone()
        },
        &|_| {},
    )
    .await
    .expect("another agent image");
    for elsewhere in [&other.built.id, &test_image] {
        let (repo, tag) = recipe_tag.split_once(':').unwrap();
        engine
            .docker()
            .tag_image(
                elsewhere,
                Some(bollard::query_parameters::TagImageOptions {
                    repo: Some(repo.to_owned()),
                    tag: Some(tag.to_owned()),
                }),
            )
            .await
            .unwrap();
        let (moved, by_recipe) = build().await;
        assert!(
            !by_recipe,
            "a recipe tag on {elsewhere} was trusted: {moved:?}"
        );
        assert_eq!(moved.built.id, first.built.id);
    }
    remove_agent_image(&engine, &other).await;
    // Put back on the right image.
    let (back, by_recipe) = build().await;
    assert!(by_recipe && back.built.id == first.built.id, "{back:?}");
    // An input that moved (the CLI copied elsewhere: another inode) is a new recipe: its tag
    // replaces the old one on the same image.
    let dir = std::env::temp_dir().join(format!("cordon-recipe-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let moved_cli = dir.join("true");
    std::fs::copy("/bin/true", &moved_cli).unwrap();
    let moved_spec = image::agent::AgentImageSpec {
        cli: moved_cli,
        ..spec.clone()
    };
    let rebuilt = image::agent::build_agent_image(&engine, &moved_spec, &|_| {})
        .await
        .expect("the same image");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(rebuilt.built.id, first.built.id);
    let recipes = recipe_tags(&engine, &first.built.id).await;
    assert_eq!(recipes.len(), 1, "{recipes:?}");
    assert_ne!(recipes[0], recipe_tag);
    remove_agent_image(&engine, &first).await;
}

/// A source image for the toolchain test, FROM scratch: a program, a link to it, a link loop, a
/// dangling link, a file that is not executable and a directory. Built once per content.
async fn toolchain_source(engine: &cordon::Engine) -> String {
    use bollard::query_parameters::BuildImageOptions;
    use futures_util::StreamExt;
    let mut ctx = cordon::archive::Archive::in_memory(0, "toolchain source");
    ctx.file(
        "Dockerfile",
        0o644,
        b"FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin LANG=C\n",
    )
    .unwrap();
    ctx.dir("rootfs/", 0o755).unwrap();
    ctx.dir("rootfs/bin/", 0o755).unwrap();
    ctx.file("rootfs/bin/run", 0o755, b"not really a program")
        .unwrap();
    ctx.file("rootfs/bin/data", 0o644, b"data").unwrap();
    ctx.symlink("rootfs/bin/sh", "run").unwrap();
    ctx.symlink("rootfs/bin/abs", "/bin/sh").unwrap();
    ctx.symlink("rootfs/bin/loop1", "loop2").unwrap();
    ctx.symlink("rootfs/bin/loop2", "loop1").unwrap();
    ctx.symlink("rootfs/bin/dangling", "/nowhere").unwrap();
    let ctx = ctx.finish().unwrap();
    let tag = format!(
        "cordon-test-toolchain-source:{}",
        &cordon_contract::policy::digest(&ctx).replace("sha256:", "")[..16]
    );
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".to_owned(),
        t: Some(tag.clone()),
        rm: true,
        forcerm: true,
        nocache: true,
        version: bollard::query_parameters::BuilderVersion::BuilderV1,
        ..Default::default()
    };
    let mut stream =
        engine
            .docker()
            .build_image(options, None, Some(bollard::body_full(ctx.into())));
    while let Some(item) = stream.next().await {
        let info = item.expect("building the toolchain source");
        assert!(info.error_detail.is_none(), "{info:?}");
    }
    tag
}

/// A toolchain image is derived from a local image without a pull (a missing one is refused
/// `command-image`), tagged by what it was made of and reused; each program an argv names must be
/// an executable regular file in it after its links; the look leaves nothing behind.
#[tokio::test]
async fn a_toolchain_image_is_derived_locally_and_its_programs_checked() {
    use cordon::image::toolchain;
    let owned = cordon_tests::owned("toolchain").await;
    let engine = owned.engine.clone();
    let init_path = image::default_workspace()
        .join("target/static")
        .join(image::TARGET)
        .join(image::PROFILE)
        .join("cordon-init");
    let init = std::fs::read(&init_path).unwrap();
    let source = toolchain_source(&engine).await;
    let first = toolchain::derive(&engine, &source, &init, &|_| {})
        .await
        .expect("derive");
    let again = toolchain::derive(&engine, &source, &init, &|_| {})
        .await
        .expect("derive again");
    assert!(again.reused && again.id == first.id && again.tag == first.tag);
    assert!(first.tag.starts_with("cordon-toolchain:"), "{}", first.tag);
    assert_eq!(first.env, vec!["PATH=/bin", "LANG=C"]);

    let missing = toolchain::derive(&engine, "cordon-no-such-image:never", &init, &|_| {}).await;
    let Err(e) = missing else {
        panic!("{missing:?}")
    };
    assert_eq!(e.id(), "command-image", "{e}");
    assert!(e.to_string().contains("never pulls"), "{e}");

    let allocation = cordon::storage::new_allocation(&engine, &owned.owner, "test")
        .await
        .unwrap();
    let resolved = toolchain::check_programs(
        &engine,
        &first,
        &allocation,
        &["/bin/run", "/bin/sh", "/bin/abs", "/sbin/cordon-init"],
    )
    .await
    .expect("programs");
    assert_eq!(
        resolved,
        ["/bin/run", "/bin/run", "/bin/run", "/sbin/cordon-init"]
    );
    for (program, reason) in [
        ("/bin/missing", "no such file"),
        ("/bin/data", "is not executable"),
        ("/bin", "is not a regular file"),
        ("/bin/loop1", "links"),
        ("/bin/dangling", "no such file"),
        ("bin/run", "not a clean absolute path"),
        ("/bin/../bin/run", "not a clean absolute path"),
    ] {
        let checked = toolchain::check_programs(&engine, &first, &allocation, &[program]).await;
        let Err(e) = checked else {
            panic!("{program}: {checked:?}")
        };
        assert_eq!(e.id(), "command-image", "{program}: {e}");
        assert!(e.to_string().contains(reason), "{program}: {e}");
    }
    owned.finish().await;
}
