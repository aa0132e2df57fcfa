//! The production launch path: validator refusals stop before start, a profile that needs a field
//! the engine would drop is refused before anything exists, and failures leave nothing behind.

use cordon::error::Error;
use cordon::labels::Allocation;
use cordon::launch::{self, InitVerdict, Prepared};
use cordon::profile::Profile;
use cordon_contract::{Id, Phase};
use cordon_tests::{fixture, launch_with, Run};

/// C0 through `launch::run`: validated, attested (the digest of the policy we wrote), run, removed.
#[tokio::test]
async fn full_profile_runs_and_attests_in_every_phase() {
    let f = fixture("t-run").await;
    for phase in Phase::ALL {
        let profile = f.profile(&Run::vendor(phase, &["--version"]));
        let report = launch::run(&f.ctl, &profile).await.expect("run");
        assert_eq!(report.exit_code, 0, "{phase}: {:?}", report.output);
        assert!(report.verdict.trusted(), "{phase}: {:?}", report.verdict);
        match &report.verdict {
            InitVerdict::Attested {
                digest_matches,
                checks,
                landlock_abi,
                ..
            } => {
                assert!(digest_matches, "{phase}");
                assert!(*landlock_abi >= 1);
                for id in [
                    Id::Landlock,
                    Id::SeccompStacked,
                    Id::ExecAllowlist,
                    Id::RootfsReadonly,
                ] {
                    assert!(checks.contains(&id), "{phase}: {id} not attested");
                }
            }
            other => panic!("{phase}: {other:?}"),
        }
        assert!(
            report.output.stdout.contains("Claude Code"),
            "{phase}: {:?}",
            report.output
        );
    }
    f.finish().await;
}

/// A container whose read-back differs is refused with the field named, never started, removed.
#[tokio::test]
async fn validator_refusal_stops_before_start_and_cleans_up() {
    let f = fixture("t-refuse").await;
    let profile = f.profile(&Run::vendor(Phase::Review, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).unwrap();
    prepared
        .plan
        .create
        .host_config
        .as_mut()
        .unwrap()
        .readonly_rootfs = Some(false);
    match launch::run_prepared(&f.ctl, &profile, prepared)
        .await
        .expect_err("refused")
    {
        Error::Refused(refusals) => {
            assert_eq!(refusals.len(), 1, "{refusals:?}");
            assert_eq!(refusals[0].id, Id::RootfsReadonly);
            assert_eq!(
                refusals[0].field.as_deref(),
                Some("HostConfig.ReadonlyRootfs")
            );
        }
        other => panic!("{other}"),
    }
    f.finish().await;
}

/// Pinning needs VolumeOptions.Subpath (API 1.45); at API 1.41 the profile is refused before
/// anything is created. (The connection is pinned to 1.41 explicitly, so this holds on newer
/// engines too: they serve 1.41 requests the way 20.10 does, dropping the field.)
#[tokio::test]
async fn subpath_profile_is_refused_on_api_1_41() {
    let mut f = fixture("t-subpath").await;
    f.engine = cordon::Engine::connect_at(
        &cordon::engine::socket_path().unwrap(),
        Some(cordon::engine::MIN_API),
    )
    .await
    .expect("engine at 1.41");
    let base = f.profile(&Run::vendor(Phase::Execute, &["--version"]));
    let mut spec = base.spec().clone();
    spec.allocation = Allocation::new(&f.owner, "test", f.storage.allocation.uid).unwrap();
    spec.storage = f.storage.mounts_for(&spec.allocation);
    spec.gitlinks = vec!["src/sub".into()];
    spec.pins = vec!["src".into()];
    spec.pin_mounts = true;
    let pinned = Profile::new(spec).unwrap();
    match Prepared::new(&f.engine, &pinned) {
        Err(Error::Profile {
            id: Id::PinnedDirs,
            reason,
        }) => assert!(reason.contains("1.45"), "{reason}"),
        other => panic!("expected a pinned-dirs refusal, got {other:?}"),
    }
    cordon_tests::assert_only_storage(&f.engine, &f.owner, "a profile refused before create").await;
    // Forced past the plan, the engine drops the Subpath silently; the read-back catches it.
    let mut prepared = Prepared::new(&f.engine, &base).unwrap();
    prepared.plan.create = pinned.create_body();
    prepared.plan.policy = pinned.policy();
    prepared.volumes = cordon::profile::invocation_volume_requests(&pinned);
    let launch = launch::create(&f.ctl, &pinned, prepared)
        .await
        .expect("create");
    let dropped = launch
        .refusals
        .iter()
        .find(|r| r.id == Id::PinnedDirs)
        .unwrap_or_else(|| panic!("the dropped Subpath was not caught: {:?}", launch.refusals));
    assert_eq!(
        dropped.field.as_deref(),
        Some("HostConfig.Mounts[/work/src].VolumeOptions.Subpath")
    );
    launch.finish(&f.engine).await.unwrap();
    f.finish().await;
}

/// A create the engine rejects (hostile or broken input) gives a clear error and leaves nothing:
/// the invocation volumes made before it are removed.
#[tokio::test]
async fn failed_create_leaves_nothing_behind() {
    let f = fixture("t-fail").await;
    let profile = f.profile(&Run::vendor(Phase::Planning, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).unwrap();
    prepared
        .plan
        .create
        .host_config
        .as_mut()
        .unwrap()
        .network_mode = Some("container:no-such-container".into());
    let err = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect_err("engine refuses");
    assert!(err.to_string().contains("create container"), "{err}");
    f.finish().await;
}

/// A policy the init cannot accept (an unknown schema version) is refused with the `policy` id.
#[tokio::test]
async fn invalid_policy_is_refused_by_the_init() {
    let f = fixture("t-nopolicy").await;
    let profile = f.profile(&Run::vendor(Phase::Planning, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).unwrap();
    prepared.plan.policy.version = 99;
    let (refusals, finished) = launch_with(&f.ctl, &profile, prepared, |_| async {}).await;
    assert!(refusals.is_empty());
    assert_eq!(
        finished.code,
        i64::from(cordon_contract::report::EXIT_REFUSED)
    );
    assert!(
        matches!(
            &finished.verdict,
            InitVerdict::Refused {
                check: Id::Policy,
                ..
            }
        ),
        "{:?}",
        finished.verdict
    );
    f.finish().await;
}
