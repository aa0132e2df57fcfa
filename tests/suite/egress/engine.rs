//! Egress on the real engine: an invocation with an allowlist gets its own network and proxy
//! (validated like the agent, attested, removed with the rest), a proxy container that differs
//! from its profile is refused before anything starts, and recovery removes what a killed
//! invocation left.

use std::time::Duration;

use cordon::engine::objects::{self, Owned};
use cordon::launch::egress::{EgressPlan, Fixtures};
use cordon::launch::{self, Prepared};
use cordon::profile::{EgressSpec, Profile};
use cordon_contract::{probe::fixture::VENDOR_HOST, Id, Phase};
use cordon_tests::{fixture, Fixture, Run};

/// A profile over the fixture's storage with egress to the fake vendor (mapped; no route off the
/// machine).
fn egress_profile(f: &Fixture, run: &Run) -> Profile {
    let base = f.profile(run);
    let mut spec = base.spec().clone();
    spec.egress = Some(EgressSpec {
        internal: true,
        ..EgressSpec::allowing(&[VENDOR_HOST.to_owned()])
    });
    Profile::new(spec).expect("egress profile")
}

fn fixtures() -> Fixtures {
    let ca = cordon_fake_vendor::ca::generate(&[VENDOR_HOST]).expect("test CA");
    Fixtures {
        cert_pem: ca.cert_pem,
        key_pem: ca.key_pem,
        mapped: vec![VENDOR_HOST.to_owned()],
        resolved: vec![],
        chained: vec![],
        image: None,
    }
}

fn plan_of(prepared: &mut Prepared) -> &mut EgressPlan {
    prepared.egress.as_mut().expect("the profile has egress")
}

async fn owned_now(f: &Fixture) -> Owned {
    objects::list_owned(&f.engine, &f.owner)
        .await
        .expect("listing")
}

/// The proxy is validated, started before the agent, attests what it enforces (the mapping the
/// fixture added included), and goes with everything else; the agent's environment names the
/// forwarder and its policy carries it.
#[tokio::test]
async fn an_invocation_with_egress_has_its_own_network_and_proxy_and_leaves_nothing() {
    let f = fixture("t-egress-run").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    assert!(profile
        .env()
        .contains(&"HTTPS_PROXY=http://127.0.0.1:3128".to_owned()));
    let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
    assert!(prepared.plan.policy.egress.is_some());
    plan_of(&mut prepared).fixtures = Some(fixtures());
    let mut launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    assert!(launch.refusals.is_empty(), "{:?}", launch.refusals);
    let during = owned_now(&f).await;
    assert_eq!(during.networks.len(), 1, "{during:?}");
    launch.start(&f.engine).await.expect("start");
    let code = launch
        .wait(&f.engine, Duration::from_secs(60))
        .await
        .expect("wait");
    let output = launch.output(&f.engine).await.expect("output");
    assert_eq!(code, 0, "{output:?}");
    let verdict = launch.verdict(&output);
    assert!(verdict.trusted(), "{output:?}");
    assert!(
        matches!(
            verdict,
            launch::InitVerdict::Attested {
                egress_forward: Some(3128),
                ..
            }
        ),
        "the init attests its forwarder: {verdict:?}"
    );
    let egress = launch.egress.clone().expect("egress");
    let attested = egress.attestation.clone().expect("the proxy attested");
    assert!(attested.skipped.is_empty(), "{attested:?}");
    assert_eq!(attested.allow, vec![format!("{VENDOR_HOST}:443")]);
    let vendor = egress.vendor.expect("the vendor's address");
    assert_eq!(attested.map, vec![format!("{VENDOR_HOST}={vendor}:443")]);
    launch.finish(&f.engine).await.expect("cleanup");
    f.finish().await;
}

/// Each way a proxy container could be widened after its profile was built is refused with
/// `proxy-container` and the field; nothing is started and nothing is left.
#[tokio::test]
async fn a_proxy_container_that_differs_from_its_profile_is_refused() {
    let f = fixture("t-egress-refuse").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    type Edit = fn(&mut bollard::models::ContainerCreateBody);
    let edits: Vec<(&str, Edit)> = vec![
        ("HostConfig.ReadonlyRootfs", |b| {
            b.host_config.as_mut().unwrap().readonly_rootfs = Some(false)
        }),
        ("HostConfig.CapAdd", |b| {
            b.host_config.as_mut().unwrap().cap_add = Some(vec!["NET_ADMIN".into()])
        }),
        ("HostConfig.Privileged", |b| {
            b.host_config.as_mut().unwrap().privileged = Some(true)
        }),
        ("HostConfig.PublishAllPorts", |b| {
            b.host_config.as_mut().unwrap().publish_all_ports = Some(true)
        }),
        ("HostConfig.PidMode", |b| {
            b.host_config.as_mut().unwrap().pid_mode = Some("host".into())
        }),
        ("Config.User", |b| b.user = Some("0:0".into())),
        ("Config.Env", |b| b.env = Some(vec!["LD_PRELOAD=/x".into()])),
        ("Config.Entrypoint", |b| {
            b.entrypoint
                .as_mut()
                .unwrap()
                .extend(["--skip".to_owned(), "sni".to_owned()])
        }),
        ("HostConfig.PidsLimit", |b| {
            b.host_config.as_mut().unwrap().pids_limit = Some(100_000)
        }),
        ("HostConfig.Mounts", |b| {
            b.host_config.as_mut().unwrap().mounts = Some(vec![])
        }),
    ];
    for (field, edit) in edits {
        let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
        plan_of(&mut prepared).edit_proxy = Some(edit);
        let launch = launch::create(&f.ctl, &profile, prepared)
            .await
            .expect("create");
        let ids: Vec<Id> = launch.refusals.iter().map(|r| r.id).collect();
        assert!(
            !ids.is_empty() && ids.iter().all(|id| *id == Id::ProxyContainer),
            "{field}: {:?}",
            launch.refusals
        );
        assert!(
            launch
                .refusals
                .iter()
                .any(|r| r.field.as_deref() == Some(field)),
            "{field}: {:?}",
            launch.refusals
        );
        launch.finish(&f.engine).await.expect("cleanup");
        cordon_tests::assert_only_storage(&f.engine, &f.owner, field).await;
    }
    f.finish().await;
}

/// An invocation whose controller died mid-run (its record gone with it) leaves a network and a
/// running proxy; `recover` finds them by their labels and removes them.
#[tokio::test]
async fn recover_removes_a_killed_invocations_proxy_and_network() {
    let f = fixture("t-egress-recover").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
    plan_of(&mut prepared).fixtures = Some(fixtures());
    let mut record = cordon::engine::pending::Created::default();
    let mut launch = launch::create_into(&f.ctl, &profile, prepared, &mut record)
        .await
        .expect("create");
    let egress = launch.egress.as_mut().expect("egress");
    launch::egress::start_proxy(&f.engine, egress)
        .await
        .expect("proxy");
    // The controller is gone: its record with it.
    drop(launch);
    drop(record);
    let left = owned_now(&f).await;
    assert_eq!(left.networks.len(), 1, "{left:?}");
    let report = cordon::task::recover::recover(&f.ctl, &f.owner, false)
        .await
        .expect("recover");
    // Only the storage is left for `finish` to remove.
    cordon_tests::assert_only_storage(&f.engine, &f.owner, &format!("{report:?}")).await;
    f.finish().await;
}
