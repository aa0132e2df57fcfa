use bollard::models::MountType;

use super::*;
use crate::labels::Owner;
use crate::uids::Uid;

pub(crate) fn spec() -> ProfileSpec {
    let uid = Uid::new(1_500_000).unwrap();
    let owner = Owner::random("t");
    let allocation = Allocation::new(&owner, "a", uid).unwrap();
    ProfileSpec {
        phase: Phase::Execute,
        vendor: Vendor::Claude,
        image_id: "sha256:00".into(),
        storage: StorageRef {
            storage: Allocation::new(&owner, "a", uid).unwrap(),
            work_volume: "w".into(),
            work: Area {
                bytes: 1 << 20,
                inodes: 100,
            },
            metadata_volume: "m".into(),
            metadata: Area {
                bytes: 1 << 20,
                inodes: 100,
            },
            control_volume: "c".into(),
            input_volume: "i".into(),
            egress_volume: "e".into(),
            snapshot: None,
        },
        allocation,
        limits: Limits::default(),
        command: vec![paths::CLAUDE_CLI.into()],
        exec: vec![paths::CLAUDE_CLI.into()],
        env: vec![],
        gitlinks: vec![],
        pins: vec![],
        pin_mounts: false,
        input_files: vec![],
        landlock_abi: DEFAULT_LANDLOCK_ABI,
        egress: None,
    }
}

fn refused(change: impl FnOnce(&mut ProfileSpec)) -> String {
    let mut s = spec();
    change(&mut s);
    Profile::new(s).expect_err("must be refused").to_string()
}

#[test]
fn the_default_spec_is_accepted_and_its_policy_is_consistent() {
    let profile = Profile::new(spec()).unwrap();
    let policy = profile.policy();
    policy.check().unwrap();
    assert!(policy.landlock.write.contains(&paths::WORK.to_owned()));
    assert!(policy
        .env
        .contains(&format!("HOSTNAME={}", paths::HOSTNAME)));
    let bytes = policy.to_bytes();
    assert_eq!(Policy::from_bytes(&bytes).unwrap(), policy);
}

#[test]
fn read_only_phases_do_not_grant_work() {
    let mut s = spec();
    s.phase = Phase::Planning;
    let profile = Profile::new(s).unwrap();
    assert!(!profile
        .policy()
        .landlock
        .write
        .contains(&paths::WORK.to_owned()));
    let work = profile
        .mounts()
        .into_iter()
        .find(|(m, _)| m.target.as_deref() == Some(paths::WORK))
        .unwrap();
    assert_eq!(work.0.read_only, Some(true));
}

#[test]
fn hostile_specs_are_refused_with_a_reason() {
    for (want, change) in [
        (
            "exec allowlist",
            Box::new(|s: &mut ProfileSpec| s.command = vec!["/bin/sh".into()])
                as Box<dyn FnOnce(&mut ProfileSpec)>,
        ),
        (
            "exec path",
            Box::new(|s: &mut ProfileSpec| s.exec.push("/usr/../bin/sh".into())),
        ),
        (
            "exec path",
            Box::new(|s: &mut ProfileSpec| s.exec.push("/".into())),
        ),
        (
            "not allowed",
            Box::new(|s: &mut ProfileSpec| s.env.push(("LD_PRELOAD".into(), "/x".into()))),
        ),
        (
            "not allowed",
            Box::new(|s: &mut ProfileSpec| s.env.push(("HTTPS_PROXY".into(), "a\nb".into()))),
        ),
        (
            "only in execute and fix",
            Box::new(|s: &mut ProfileSpec| {
                s.phase = Phase::Review;
                s.gitlinks = vec!["sub".into()];
            }),
        ),
        (
            "mountable",
            Box::new(|s: &mut ProfileSpec| s.gitlinks = vec!["../escape".into()]),
        ),
        (
            "mountable",
            Box::new(|s: &mut ProfileSpec| s.gitlinks = vec!["a,b".into()]),
        ),
        (
            "mountable",
            Box::new(|s: &mut ProfileSpec| s.pins = vec![".git/hooks".into()]),
        ),
        (
            "more than 256",
            Box::new(|s: &mut ProfileSpec| {
                s.gitlinks = (0..257).map(|i| format!("g{i}")).collect()
            }),
        ),
        (
            "multiple of 4096",
            Box::new(|s: &mut ProfileSpec| s.limits.tmp.bytes = 1000),
        ),
        (
            "image id",
            Box::new(|s: &mut ProfileSpec| s.image_id = "ubuntu:latest".into()),
        ),
        (
            "NUL",
            Box::new(|s: &mut ProfileSpec| s.command.push("a\0b".into())),
        ),
        (
            "Landlock ABI",
            Box::new(|s: &mut ProfileSpec| s.landlock_abi = 0),
        ),
        (
            "not its storage's",
            Box::new(|s: &mut ProfileSpec| s.allocation.uid = Uid::new(1_500_001).unwrap()),
        ),
    ] {
        let reason = refused(change);
        assert!(reason.contains(want), "{want}: {reason}");
    }
}

#[test]
fn the_init_starts_as_root_with_exactly_its_capabilities_and_runs_the_agent_as_the_uid() {
    let profile = Profile::new(spec()).unwrap();
    let body = profile.create_body();
    assert_eq!(body.user.as_deref(), Some("0:0"));
    let host = body.host_config.unwrap();
    assert_eq!(
        host.cap_add.unwrap(),
        ["SETGID", "SETPCAP", "SETUID", "SYS_ADMIN"]
    );
    assert_eq!(host.cap_drop.unwrap(), ["ALL"]);
    assert!(host
        .masked_paths
        .unwrap()
        .contains(&"/proc/cmdline".to_owned()));
    let policy = profile.policy();
    assert_eq!((policy.uid, policy.gid), (1_500_000, 1_500_000));
    for (_, options) in host.tmpfs.unwrap() {
        assert!(options.contains("uid=1500000,gid=1500000"), "{options}");
    }
    for (kind, volume) in profile.volumes() {
        let o = &volume.options["o"];
        assert!(o.ends_with("nosuid,nodev,noexec"), "{kind:?} {o}");
        let root = matches!(kind, Kind::Control | Kind::Input);
        assert_eq!(o.contains("uid="), !root, "{kind:?} {o}");
        assert_eq!(volume.labels[crate::labels::UID], "1500000");
    }
    // A volume the engine would make for a mount is made labelled and bounded.
    for (mount, _) in profile
        .mounts()
        .iter()
        .filter(|(m, _)| m.typ == Some(MountType::VOLUME))
    {
        let options = mount.volume_options.clone().unwrap();
        assert!(options.labels.unwrap().contains_key(crate::labels::OWNER));
        assert!(options.driver_config.unwrap().options.unwrap()["o"].contains("size="));
    }
}

#[test]
fn pin_mounts_need_the_subpath_api() {
    let mut s = spec();
    s.gitlinks = vec!["src/sub".into()];
    s.pins = vec!["src".into()];
    s.pin_mounts = true;
    let profile = Profile::new(s).unwrap();
    let old = ApiVersion {
        major: 1,
        minor: 41,
    };
    match profile.plan(old) {
        Err(Error::Profile {
            id: Id::PinnedDirs, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(profile.plan(SUBPATH_API).is_ok());
}

/// The pins are exactly those the gitlinks derive: none missing, none extra, none without a
/// nested gitlink; and the policy lists them.
/// An execute profile over a nested and a top-level gitlink, with its pins.
pub(crate) fn nested_gitlink_profile() -> Profile {
    let mut s = spec();
    s.gitlinks = vec!["a/b/sub".into(), "top".into()];
    s.pins = vec!["a".into(), "a/b".into()];
    Profile::new(s).unwrap()
}

#[test]
fn the_pins_are_derived_from_the_gitlinks() {
    let mut s = spec();
    s.gitlinks = vec!["a/b/sub".into(), "top".into()];
    s.pins = vec!["a".into(), "a/b".into()];
    let profile = Profile::new(s.clone()).unwrap();
    assert_eq!(profile.policy().landlock.pins, vec!["a", "a/b"]);
    assert!(profile.pin_mounts().is_empty());
    for pins in [vec!["a"], vec!["a", "a/b", "c"], vec![]] {
        let mut bad = s.clone();
        bad.pins = pins.iter().map(|p| (*p).to_owned()).collect();
        match Profile::new(bad) {
            Err(Error::Profile {
                id: Id::PinnedDirs, ..
            }) => {}
            other => panic!("{pins:?}: {other:?}"),
        }
    }
    let mut lone = spec();
    lone.pins = vec!["src".into()];
    assert!(Profile::new(lone).is_err());
}

/// The agent holds no credential but the terminated host's sentinel: a profile whose environment
/// holds anything else credential-shaped is refused before anything is made, and its policy
/// names the sentinel for the init.
#[test]
fn a_profile_holds_no_credential_but_its_sentinel() {
    let sentinel = "sk-ant-api03-sentinel-of-a-credentials-length-0123456789AA";
    let terminating = |s: &mut ProfileSpec| {
        s.egress = Some(EgressSpec {
            terminate: Some(crate::custody::Termination {
                target: "api.anthropic.com:443".into(),
                header: cordon_egress::vendor::CredentialHeader::ApiKey,
                ca_sha256: "ab".repeat(32),
                budget: cordon_egress::vendor::Budget::default(),
                sentinel: sentinel.into(),
            }),
            ..EgressSpec::allowing(&["api.anthropic.com".into()])
        });
    };
    let mut held = spec();
    terminating(&mut held);
    held.env = vec![("ANTHROPIC_API_KEY".into(), sentinel.into())];
    let profile = Profile::new(held).unwrap();
    assert_eq!(profile.policy().sentinel.as_deref(), Some(sentinel));
    for (env, with_terminate) in [
        // The key where the sentinel goes, and a credential-shaped value anywhere.
        (("ANTHROPIC_API_KEY", "sk-ant-api03-the-real-key"), true),
        (
            (
                "NODE_EXTRA_CA_CERTS",
                "sk-ant-oat01-a-key-of-a-credentials-length-0123",
            ),
            true,
        ),
        // The sentinel is no credential; without a terminated host there is none to hold.
        (("CLAUDE_CODE_OAUTH_TOKEN", sentinel), false),
    ] {
        for terminate in [true, false] {
            let mut s = spec();
            if terminate {
                terminating(&mut s);
            }
            s.env = vec![(env.0.into(), env.1.into())];
            let refused = !terminate || with_terminate;
            match Profile::new(s) {
                Ok(_) => assert!(!refused, "{env:?} with terminate {terminate}: accepted"),
                Err(e) => assert!(
                    refused && e.to_string().contains("not the invocation's sentinel"),
                    "{env:?} with terminate {terminate}: {e}"
                ),
            }
        }
    }
}
