use cordon_contract::command::Writes;
use cordon_contract::policy::Access;
use cordon_contract::{paths, Id};

use crate::profile::tests::spec;
use crate::profile::{Area, CommandRole, Profile, ProfileSpec};

const SH: &str = "/bin/sh";

fn role(writes: Writes) -> CommandRole {
    CommandRole {
        name: "test".into(),
        writes,
        workdir: "/work/src".into(),
        scratch: Area {
            bytes: 8 << 20,
            inodes: 1024,
        },
        overlay: Area {
            bytes: 16 << 20,
            inodes: 2048,
        },
    }
}

fn command_spec() -> ProfileSpec {
    let mut s = spec();
    s.image_id = "sha256:11".into();
    s.command = vec![SH.into(), "-c".into(), "make test".into()];
    s.exec = vec![SH.into()];
    s.env = vec![
        ("PATH".into(), "/opt/bin:/bin".into()),
        ("CARGO_TARGET_DIR".into(), "/tmp/target".into()),
    ];
    s
}

#[test]
fn a_command_that_writes_nothing_gets_an_overlay_over_its_read_only_work_volume() {
    let profile = Profile::for_command(command_spec(), role(Writes::None)).unwrap();
    let policy = profile.policy();
    policy.check().unwrap();
    let overlay = policy.overlay.clone().expect("an overlay");
    assert_eq!(overlay.target, paths::WORK);
    assert_eq!(overlay.carried, vec![paths::METADATA.to_owned()]);
    let work: Vec<_> = policy
        .mounts
        .iter()
        .filter(|m| m.path == paths::WORK)
        .collect();
    assert_eq!(work.len(), 2);
    assert!(work[0].covered && work[0].access == Access::ReadOnly);
    assert_eq!(work[1].fstype.as_deref(), Some("overlay"));
    assert_eq!(work[1].bounded.map(|b| b.bytes), Some(16 << 20));
    // The engine mounts the volume read-only; the init starts with the overlay's copy-up
    // capabilities too.
    let body = profile.create_body();
    let host = body.host_config.clone().unwrap();
    let mounts = host.mounts.clone().unwrap();
    let work_mount = mounts
        .iter()
        .find(|m| m.target.as_deref() == Some(paths::WORK))
        .unwrap();
    assert_eq!(work_mount.read_only, Some(true));
    let cap_add = host.cap_add.unwrap();
    for (name, number) in cordon_contract::capabilities::OVERLAY_CAPABILITIES {
        assert!(cap_add.contains(&(*name).to_owned()), "{name}");
        assert!(policy.start_capabilities.contains(number), "{name}");
    }
    // Landlock writes /tmp and /work (the overlay), never the overlay's area.
    assert_eq!(
        policy.landlock.write,
        vec![paths::TMP.to_owned(), paths::WORK.to_owned()]
    );
    assert_eq!(policy.landlock.exec_trees, vec!["/".to_owned()]);
    // /tmp is exec-capable, nosuid and nodev; the overlay's area is not.
    let tmpfs = host.tmpfs.unwrap();
    assert!(tmpfs[paths::TMP].contains(",exec,") && tmpfs[paths::TMP].contains("nosuid,nodev"));
    assert!(tmpfs[paths::OVERLAY_AREA].contains("noexec"));
    let tmp = policy.mounts.iter().find(|m| m.path == paths::TMP).unwrap();
    assert_eq!(tmp.access, Access::WritableExec);
    // Its own name, kind and working directory; no egress dir.
    assert_eq!(body.working_dir.as_deref(), Some("/work/src"));
    assert_eq!(policy.cwd, "/work/src");
    assert!(body.labels.unwrap().values().any(|v| v == "command"));
    assert!(!mounts
        .iter()
        .any(|m| m.target.as_deref() == Some(paths::EGRESS_DIR)));
    // The image's PATH replaced the default; HOME and TMPDIR are its scratch.
    let env = profile.env();
    assert!(env.contains(&"PATH=/opt/bin:/bin".to_owned()), "{env:?}");
    assert!(env.contains(&"HOME=/tmp".to_owned()));
    assert_eq!(env.iter().filter(|e| e.starts_with("PATH=")).count(), 1);
}

#[test]
fn a_command_that_writes_work_mounts_the_volume_writable_with_the_agents_masks() {
    let mut s = command_spec();
    s.gitlinks = vec!["vendor/lib".into()];
    s.pins = cordon_contract::tree::pins_of(&s.gitlinks);
    let profile = Profile::for_command(s, role(Writes::Work)).unwrap();
    let policy = profile.policy();
    policy.check().unwrap();
    assert!(policy.overlay.is_none());
    assert!(!policy.start_capabilities.contains(&1));
    let work = policy.rule_for(paths::WORK).unwrap();
    assert_eq!(work.access, Access::Writable);
    assert!(policy
        .mounts
        .iter()
        .any(|m| m.protection == Id::GitlinkMasks));
    assert!(!profile
        .create_body()
        .host_config
        .unwrap()
        .tmpfs
        .unwrap()
        .contains_key(paths::OVERLAY_AREA));
}

#[test]
fn a_command_holds_no_credential_and_only_plain_variables() {
    let refused = |name: &str, value: &str| {
        let mut s = command_spec();
        s.env.push((name.into(), value.into()));
        Profile::for_command(s, role(Writes::None))
            .expect_err(name)
            .to_string()
    };
    let key = "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijkl";
    assert!(
        refused("TOKEN", key).contains("credential"),
        "{}",
        refused("TOKEN", key)
    );
    assert!(refused("ANTHROPIC_API_KEY", "x").contains("credential"));
    for name in ["", "A=B", "1X", "HOSTNAME", "A B"] {
        refused(name, "v");
    }
    refused("X", "a\nb");
    let mut s = command_spec();
    s.gitlinks = vec!["vendor/lib".into()];
    s.pins = cordon_contract::tree::pins_of(&s.gitlinks);
    assert!(Profile::for_command(s, role(Writes::None)).is_err());
    let mut bad_dir = role(Writes::None);
    bad_dir.workdir = "/tmp".into();
    assert!(Profile::for_command(command_spec(), bad_dir).is_err());
}

#[test]
fn a_command_is_kept_out_of_the_engines_network_code_and_its_log_driver() {
    let profile = Profile::for_command(command_spec(), role(Writes::None)).unwrap();
    let body = profile.create_body();
    assert_eq!(body.network_disabled, Some(true));
    let host = body.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
    // The agent's is not.
    let agent = Profile::new(spec()).unwrap().create_body();
    assert_eq!(agent.network_disabled, None);
}
