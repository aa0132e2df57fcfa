//! The truth table's rows: C0 (the full profile) per phase and vendor, and for every protection a
//! case with exactly that protection removed. A removal edits the create request, the policy or
//! the invocation volumes after the profile produced them, so the profile itself never holds a
//! weakened value.
//!
//! A few rows exist for the probe layer only: the same removal in another phase, or together with
//! `non-root-user` where only root could use what the removal opens (root-owned files behind a
//! writable mount), or with a hostile repository, or with the metadata inside the work tree (the
//! only way a move of `.git` or a hard link to it could succeed).

use std::collections::BTreeMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping, HostConfig, Mount, MountType, VolumeCreateRequest,
};
use cordon_contract::command::Writes;
use cordon_contract::policy::Policy;
use cordon_contract::{paths, Id, Phase, Vendor};

use cordon::labels::Kind;

/// What a removal may change.
#[derive(Debug)]
pub struct Mutable<'a> {
    pub create: &'a mut ContainerCreateBody,
    pub policy: &'a mut Policy,
    pub volumes: &'a mut BTreeMap<Kind, VolumeCreateRequest>,
    /// The invocation's network and proxy, in a case with egress.
    pub egress: Option<&'a mut cordon::launch::egress::EgressPlan>,
}

/// Facts about the gate's host a removal may need.
#[derive(Debug, Clone)]
pub struct GateEnv {
    /// The engine's socket on this host.
    pub socket: String,
    /// An empty directory the gate made on the host (the host-path bind case).
    pub host_dir: String,
    /// The probe fixture as a git repository, for the task seeder.
    pub fixture_repo: std::path::PathBuf,
    /// The test CA and the fake vendor's certificate for the egress cases.
    pub vendor_ca: cordon_fake_vendor::ca::TestCa,
    /// The test image (the fixtures run from it in every case).
    pub test_image: String,
    /// The production agent image the `.../agent` rows run.
    pub agent: Option<super::AgentRef>,
    /// The fake vendor's key for this run: what the proxy's vault holds and the fake vendor
    /// takes, and what the `credential-absent` removal puts into the agent's environment.
    pub key: GateKey,
}

/// The gate's fake vendor key: fresh per run, in the vendor's shape, never shown.
#[derive(Clone)]
pub struct GateKey(String);

impl GateKey {
    pub fn random() -> GateKey {
        GateKey(format!(
            "sk-ant-api03-cordon-gate-{}",
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// The key's text (for the removal that puts it where it must never be).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as the custody takes it.
    pub fn credential(&self) -> cordon::error::Result<cordon::custody::Credential> {
        cordon::custody::Credential::of(cordon::custody::CredentialKind::ApiKey, self.0.clone())
    }
}

impl std::fmt::Debug for GateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GateKey(withheld)")
    }
}

/// Which task storage a case mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StorageVariant {
    Normal,
    /// The work volume has no `size`.
    WorkNoSize,
    /// The work volume has no `nr_inodes`.
    WorkNoInodes,
    /// Another live storage allocation carries the storage's uid too.
    SharedUid,
}

/// One row of the truth table.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub removed: Option<Id>,
    /// Further protections removed with it (probe-layer rows only).
    pub also: Vec<Id>,
    /// Which form of the removal, for protections with several (`pid`, `bind`, ...).
    pub facet: Option<&'static str>,
    pub phase: Phase,
    pub vendor: Vendor,
    pub gitlinks: bool,
    pub storage: StorageVariant,
    /// The probe layer's storage carries a hostile repository (links leaving the checkout).
    pub hostile: bool,
    /// The probe layer's storage keeps the metadata inside the writable work tree.
    pub metadata_in_work: bool,
    /// The probe layer runs under the init told to leave the removed protection out, with the
    /// removal applied too (a container-level protection whose other half the init holds: a
    /// writable mount's `noexec`, where Landlock alone must refuse the exec).
    pub under_init: bool,
    /// The case runs with egress: a network, the proxy, the fake vendor and its DNS server.
    pub egress: bool,
    /// The case runs the production agent image (the real CLI, its interpreter on the exec
    /// allowlist) instead of the test image.
    pub agent: bool,
    /// The agent is offered approved commands: the relay's socket dir is mounted (read-only)
    /// and cordon's MCP server is on the exec allowlist.
    pub commands: bool,
    /// The container is an approved command's (its profile derived from the case's agent, as
    /// the dispatcher derives it), writing /work as this says; the probe layer runs cordon-probe
    /// as the hostile command.
    pub command: Option<Writes>,
    pub validator: bool,
    pub init: bool,
    pub probe: bool,
    pub mutate: fn(&mut Mutable<'_>, &GateEnv),
}

impl Case {
    /// Every protection this row removes.
    pub fn removed_all(&self) -> Vec<Id> {
        self.removed
            .iter()
            .copied()
            .chain(self.also.iter().copied())
            .collect()
    }

    fn with_phase(mut self, phase: Phase) -> Case {
        self.phase = phase;
        self.name = format!("{}/{phase}", self.name);
        self
    }

    fn probe_only(mut self) -> Case {
        self.validator = false;
        self.init = false;
        self.probe = true;
        self
    }
}

/// The gitlink the gitlink cases mask.
pub const GATE_GITLINK: &str = "vendor/module";

impl Mutable<'_> {
    fn host(&mut self) -> &mut HostConfig {
        self.create.host_config.get_or_insert_with(Default::default)
    }

    fn mount(&mut self, target: &str) -> Option<&mut Mount> {
        self.host()
            .mounts
            .as_mut()?
            .iter_mut()
            .find(|m| m.target.as_deref() == Some(target))
    }

    fn make_writable(&mut self, target: &str) {
        if let Some(m) = self.mount(target) {
            m.read_only = Some(false);
        }
    }

    fn add_mount(&mut self, mount: Mount) {
        self.host().mounts.get_or_insert_with(Vec::new).push(mount);
    }

    /// Rewrite one scratch tmpfs option string.
    fn tmpfs(&mut self, path: &str, edit: impl Fn(&str) -> Option<String>) {
        if let Some(options) = self.host().tmpfs.as_mut().and_then(|t| t.get_mut(path)) {
            *options = options
                .split(',')
                .filter_map(&edit)
                .collect::<Vec<_>>()
                .join(",");
        }
    }

    fn drop_tmpfs_option(&mut self, path: &str, key: &'static str) {
        self.tmpfs(path, |o| {
            (!o.starts_with(&format!("{key}="))).then(|| o.to_owned())
        });
    }

    fn add_security_opt(&mut self, opt: String) {
        self.host()
            .security_opt
            .get_or_insert_with(Vec::new)
            .push(opt);
    }
}

/// A seccomp profile that allows everything but `names` (so only the init's needs are taken away).
pub fn seccomp_denying(names: &[&str]) -> String {
    serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{ "names": names, "action": "SCMP_ACT_ERRNO" }],
    })
    .to_string()
}

/// A seccomp profile that allows everything but `name` when its first argument is `arg0`.
pub fn seccomp_denying_arg0(name: &str, arg0: u64) -> String {
    serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{
            "names": [name],
            "action": "SCMP_ACT_ERRNO",
            "args": [{ "index": 0, "value": arg0, "op": "SCMP_CMP_EQ" }],
        }],
    })
    .to_string()
}

fn bind(source: &str, target: &str) -> Mount {
    Mount {
        typ: Some(MountType::BIND),
        source: Some(source.to_owned()),
        target: Some(target.to_owned()),
        read_only: Some(true),
        ..Default::default()
    }
}

fn case(name: &str, removed: Id, mutate: fn(&mut Mutable<'_>, &GateEnv)) -> Case {
    let layers = removed.layers();
    Case {
        name: name.to_owned(),
        removed: Some(removed),
        also: vec![],
        facet: name
            .split_once('/')
            .map(|(_, f)| f)
            .and_then(|f| FACETS.iter().find(|x| **x == f).copied()),
        phase: Phase::Execute,
        vendor: Vendor::Claude,
        gitlinks: false,
        storage: StorageVariant::Normal,
        hostile: false,
        metadata_in_work: false,
        under_init: false,
        egress: cordon_contract::egress::rule_name(removed).is_some()
            || removed == Id::ProxyContainer,
        agent: false,
        commands: false,
        command: None,
        validator: layers.validator,
        init: layers.init,
        probe: layers.probe,
        mutate,
    }
}

/// The forms a removal can take, named after the `/` in a case name.
const FACETS: &[&str] = &[
    "pid", "cgroup", "uts", "bind", "device", "disk", "volume", "shared", "masks", "forged",
    "reused",
];

fn full(phase: Phase, vendor: Vendor, gitlinks: bool) -> Case {
    Case {
        name: format!(
            "C0/{phase}/{vendor}{}",
            if gitlinks { "/gitlink" } else { "" }
        ),
        removed: None,
        phase,
        vendor,
        gitlinks,
        storage: StorageVariant::Normal,
        hostile: false,
        metadata_in_work: false,
        under_init: false,
        // Every Claude C0 proves the egress path holds (and the probes' positive control passes).
        egress: vendor == Vendor::Claude && !gitlinks,
        agent: false,
        // Execute's C0 offers approved commands: the full profile with the relay's socket dir
        // holds everything too.
        commands: phase == Phase::Execute && !gitlinks,
        command: None,
        also: vec![],
        facet: None,
        validator: true,
        init: true,
        probe: true,
        mutate: |_, _| {},
    }
}

/// `/tmp` exec-capable: its tmpfs options say `exec` for `noexec`.
fn tmp_exec(m: &mut Mutable<'_>, _: &GateEnv) {
    m.tmpfs(paths::TMP, |o| {
        Some(if o == "noexec" {
            "exec".to_owned()
        } else {
            o.to_owned()
        })
    })
}

/// The identity, capabilities and privilege the container starts with.
fn privilege_cases() -> Vec<Case> {
    vec![
        case("rootfs-readonly", Id::RootfsReadonly, |m, _| {
            m.host().readonly_rootfs = Some(false)
        }),
        case("caps-dropped", Id::CapsDropped, |m, _| {
            m.host().cap_drop = None
        }),
        case("cap-added", Id::CapAdded, |m, _| {
            m.host()
                .cap_add
                .get_or_insert_with(Vec::new)
                .push("CHOWN".into())
        }),
        // The init starts without root: it can neither remount nor switch ids.
        case("init-privileges", Id::InitPrivileges, |m, _| {
            m.create.user = Some(format!("{0}:{0}", m.policy.uid))
        }),
        case("no-new-privileges", Id::NoNewPrivileges, |m, _| {
            m.host().security_opt = None
        }),
        // The policy names root as the workload's ids.
        case("non-root-user", Id::NonRootUser, |m, _| {
            m.policy.uid = 0;
            m.policy.gid = 0;
        }),
        // On this engine runc cannot start a privileged container as root ("unable to apply
        // caps"), so the init layer's row starts it as the allocation's uid: the init names the
        // cause, a full bounding set, before its start identity.
        Case {
            init: false,
            ..case("not-privileged", Id::NotPrivileged, |m, _| {
                m.host().privileged = Some(true)
            })
        },
        Case {
            validator: false,
            probe: false,
            ..case("not-privileged/as-uid", Id::NotPrivileged, |m, _| {
                m.host().privileged = Some(true);
                m.create.user = Some(format!("{0}:{0}", m.policy.uid));
            })
        },
        // The engine's masks and read-only paths gone (what `systempaths=unconfined` does),
        // cordon's own masks kept.
        case("not-privileged/masks", Id::NotPrivileged, |m, _| {
            m.host().masked_paths = Some(
                cordon_contract::policy::CORDON_MASKED_PATHS
                    .iter()
                    .map(|p| (*p).to_owned())
                    .collect(),
            );
            m.host().readonly_paths = Some(vec![]);
        }),
    ]
}

/// Namespaces, devices, limits, the engine's and the init's filters, masks.
fn isolation_cases() -> Vec<Case> {
    vec![
        case("ipc-none", Id::IpcNone, |m, _| {
            m.host().ipc_mode = Some("private".into())
        }),
        case("network-none", Id::NetworkNone, |m, _| {
            m.host().network_mode = Some("bridge".into())
        }),
        case("no-resolver", Id::NoResolver, |m, _| {
            m.host().extra_hosts = Some(vec![format!(
                "{}:10.0.0.1",
                cordon_contract::probe::fixture::VENDOR_HOST
            )])
        }),
        case("stdin-closed", Id::StdinClosed, |m, _| {
            m.create.open_stdin = Some(true)
        }),
        case("no-tty", Id::NoTty, |m, _| m.create.tty = Some(true)),
        case("pids-limit", Id::PidsLimit, |m, _| {
            m.host().pids_limit = None
        }),
        case("memory-limit", Id::MemoryLimit, |m, _| {
            m.host().memory = None;
            m.host().memory_swap = None;
        }),
        case("cpu-limit", Id::CpuLimit, |m, _| m.host().nano_cpus = None),
        case("seccomp-default", Id::SeccompDefault, |m, _| {
            m.add_security_opt("seccomp=unconfined".into())
        }),
        case("seccomp-stacked", Id::SeccompStacked, |m, _| {
            m.add_security_opt(format!("seccomp={}", seccomp_denying(&["seccomp"])))
        }),
        case("landlock", Id::Landlock, |m, _| {
            m.add_security_opt(format!(
                "seccomp={}",
                seccomp_denying(&[
                    "landlock_create_ruleset",
                    "landlock_add_rule",
                    "landlock_restrict_self"
                ])
            ))
        }),
        case("exec-allowlist", Id::ExecAllowlist, |m, _| {
            m.policy.landlock.exec.push("/usr/bin".into())
        }),
        // The init cannot remount: the read-only content mounts stay exec-capable.
        case("content-noexec", Id::ContentNoexec, |m, _| {
            m.add_security_opt(format!("seccomp={}", seccomp_denying(&["mount"])))
        }),
        case("socket-families", Id::SocketFamilies, |m, _| {
            m.policy.sockets.families.push(libc::AF_VSOCK as u32)
        }),
        // The init cannot make itself non-dumpable.
        case("init-sealed", Id::InitSealed, |m, _| {
            m.add_security_opt(format!(
                "seccomp={}",
                seccomp_denying_arg0("prctl", libc::PR_SET_DUMPABLE as u64)
            ))
        }),
        case("host-info-masked", Id::HostInfoMasked, |m, _| {
            m.host().masked_paths = Some(
                cordon_contract::policy::ENGINE_MASKED_PATHS
                    .iter()
                    .map(|p| (*p).to_owned())
                    .collect(),
            )
        }),
    ]
}

/// Mounts, volumes and their quotas, the per-allocation uid.
fn storage_cases() -> Vec<Case> {
    vec![
        // An invocation volume owned by another uid.
        case("uid-per-allocation/volume", Id::UidPerAllocation, |m, _| {
            if let Some(o) = m
                .volumes
                .get_mut(&Kind::Egress)
                .and_then(|v| v.driver_opts.as_mut())
                .and_then(|opts| opts.get_mut("o"))
            {
                *o = o.replace("uid=", "uid=1").replace("gid=", "gid=1");
            }
        }),
        storage(
            case("uid-per-allocation/shared", Id::UidPerAllocation, |_, _| {}),
            StorageVariant::SharedUid,
        ),
        // A read-only phase over a snapshot whose tree is not the one its prepare recorded (one
        // changed since): the policy names another digest than the tree's.
        case("snapshot-verified", Id::SnapshotVerified, |m, _| {
            m.policy.work_digest = Some(format!("sha256:{}", "0".repeat(64)));
        })
        .with_phase(Phase::Questions),
        case("host-namespaces/pid", Id::HostNamespaces, |m, _| {
            m.host().pid_mode = Some("host".into())
        }),
        case("host-namespaces/cgroup", Id::HostNamespaces, |m, _| {
            m.host().cgroupns_mode = Some(bollard::models::HostConfigCgroupnsModeEnum::HOST)
        }),
        case("host-namespaces/uts", Id::HostNamespaces, |m, _| {
            m.create.hostname = None;
            m.host().uts_mode = Some("host".into());
        }),
        case("no-host-mounts/bind", Id::NoHostMounts, |m, env| {
            m.add_mount(bind(&env.host_dir, "/mnt/host"))
        }),
        case("no-host-mounts/device", Id::NoHostMounts, |m, _| {
            m.host().devices = Some(vec![DeviceMapping {
                path_on_host: Some("/dev/null".into()),
                path_in_container: Some("/dev/cordon-gate".into()),
                cgroup_permissions: Some("r".into()),
            }])
        }),
        case("no-docker-socket", Id::NoDockerSocket, |m, env| {
            m.add_mount(bind(&env.socket, "/var/run/docker.sock"))
        }),
        // The control dir as a plain local volume: a directory on the host's disk.
        case("no-host-mounts/disk", Id::NoHostMounts, |m, _| {
            if let Some(v) = m.volumes.get_mut(&Kind::Control) {
                v.driver_opts = Some(Default::default());
            }
        }),
        planning(case("work-readonly", Id::WorkReadonly, |m, _| {
            m.make_writable(paths::WORK)
        })),
        case("metadata-readonly", Id::MetadataReadonly, |m, _| {
            m.make_writable(paths::METADATA)
        }),
        case(
            "writable-nosuid-nodev-noexec",
            Id::WritableNosuidNodevNoexec,
            tmp_exec,
        ),
        case("tmp-bytes", Id::TmpBytes, |m, _| {
            m.drop_tmpfs_option(paths::TMP, "size")
        }),
        case("tmp-inodes", Id::TmpInodes, |m, _| {
            m.drop_tmpfs_option(paths::TMP, "nr_inodes")
        }),
        case("home-bytes", Id::HomeBytes, |m, _| {
            m.drop_tmpfs_option(paths::HOME, "size")
        }),
        case("home-inodes", Id::HomeInodes, |m, _| {
            m.drop_tmpfs_option(paths::HOME, "nr_inodes")
        }),
        case("output-bytes", Id::OutputBytes, |m, _| {
            m.drop_tmpfs_option(paths::OUTPUT_DIR, "size")
        }),
        case("output-inodes", Id::OutputInodes, |m, _| {
            m.drop_tmpfs_option(paths::OUTPUT_DIR, "nr_inodes")
        }),
        codex(case("codex-home-bytes", Id::CodexHomeBytes, |m, _| {
            m.drop_tmpfs_option(paths::CODEX_HOME, "size")
        })),
        codex(case("codex-home-inodes", Id::CodexHomeInodes, |m, _| {
            m.drop_tmpfs_option(paths::CODEX_HOME, "nr_inodes")
        })),
        storage(
            case("work-bytes", Id::WorkBytes, |_, _| {}),
            StorageVariant::WorkNoSize,
        ),
        storage(
            case("work-inodes", Id::WorkInodes, |_, _| {}),
            StorageVariant::WorkNoInodes,
        ),
        case("control-readonly", Id::ControlReadonly, |m, _| {
            m.make_writable(paths::CONTROL_DIR)
        }),
        case("input-readonly", Id::InputReadonly, |m, _| {
            m.make_writable(paths::INPUT_DIR)
        }),
        case("egress-readonly", Id::EgressReadonly, |m, _| {
            m.make_writable(paths::EGRESS_DIR)
        }),
        with_commands(case("commands-readonly", Id::CommandsReadonly, |m, _| {
            m.make_writable(cordon_contract::command::SOCKET_DIR)
        })),
        // The relay made with a writable root (its own runner: the relay is made by the
        // dispatcher's code, not the launch's).
        case("relay-container", Id::RelayContainer, |_, _| {}),
    ]
}

/// What the workload inherits: fds, environment, entrypoint, masks over gitlinks and the pins
/// above them (and the tree check that lists them), the profile itself.
fn process_cases() -> Vec<Case> {
    vec![
        case("fd-hygiene", Id::FdHygiene, |m, _| {
            m.create.entrypoint = Some(vec![
                paths::PROBE.into(),
                "exec-with-fd".into(),
                paths::INIT.into(),
            ])
        }),
        case("env-allowlist", Id::EnvAllowlist, |m, _| {
            m.create
                .env
                .get_or_insert_with(Vec::new)
                .push("CORDON_GATE_LEAK=1".into())
        }),
        case("init-entrypoint", Id::InitEntrypoint, |m, _| {
            m.host().init = Some(true)
        }),
        // The mask gone: the gitlink is a plain directory of the tree.
        with_gitlink(case("gitlink-masks", Id::GitlinkMasks, |m, _| {
            let mask = format!("{}/{GATE_GITLINK}", paths::WORK);
            if let Some(mounts) = m.host().mounts.as_mut() {
                mounts.retain(|x| x.target.as_deref() != Some(mask.as_str()));
            }
        })),
        case("profile-drift", Id::ProfileDrift, |m, _| {
            m.create.working_dir = Some("/".into())
        }),
        // The pins gone from the policy: the directories above the nested gitlink are
        // renamable, and the mask could be moved aside with its parent. The probes run under
        // the init (everything else enforced) told to leave the pins out.
        {
            let mut pins = with_gitlink(case("pinned-dirs", Id::PinnedDirs, |m, _| {
                m.policy.landlock.pins.clear()
            }));
            pins.under_init = true;
            pins
        },
        // An execute start presenting a check that was never issued as it is (a dropped mask),
        // and one presenting a check a start already redeemed: refused before anything exists.
        with_gitlink(case("tree-check/forged", Id::TreeCheck, |_, _| {})),
        with_gitlink(case("tree-check/reused", Id::TreeCheck, |_, _| {})),
    ]
}

/// A case in planning.
fn planning(mut c: Case) -> Case {
    c.phase = Phase::Planning;
    c
}

/// A case with Codex's profile.
fn codex(mut c: Case) -> Case {
    c.vendor = Vendor::Codex;
    c
}

/// A case over storage with a gitlink.
fn with_gitlink(mut c: Case) -> Case {
    c.gitlinks = true;
    c
}

/// A case whose agent is offered approved commands.
fn with_commands(mut c: Case) -> Case {
    c.commands = true;
    c
}

/// A case over other storage.
fn storage(mut c: Case, s: StorageVariant) -> Case {
    c.storage = s;
    c
}

/// C0 in the production agent image: the real CLI's `--version` under the init (its interpreter
/// on the exec allowlist), and the probe layer in that image.
fn full_agent(phase: Phase) -> Case {
    Case {
        name: format!("C0/{phase}/claude/agent"),
        agent: true,
        ..full(phase, Vendor::Claude, false)
    }
}

/// An approved command's C0: its container derived from the phase's agent, as the dispatcher
/// derives it, nothing removed.
fn full_command(phase: Phase, writes: Writes) -> Case {
    Case {
        name: format!(
            "C0/{phase}/command{}",
            if writes == Writes::Work {
                "/writes-work"
            } else {
                ""
            }
        ),
        command: Some(writes),
        egress: false,
        commands: false,
        ..full(phase, Vendor::Claude, false)
    }
}

/// A removal from an approved command's container (in execute), writing /work as `writes` says.
fn command_case(
    name: &str,
    removed: Id,
    writes: Writes,
    mutate: fn(&mut Mutable<'_>, &GateEnv),
) -> Case {
    let facet = name
        .split_once('/')
        .map(|(_, f)| f)
        .and_then(|f| COMMAND_FACETS.iter().find(|x| **x == f).copied());
    Case {
        name: format!("command/{name}"),
        command: Some(writes),
        egress: false,
        facet,
        ..case(name, removed, mutate)
    }
}

/// The forms a command row's removal can take.
const COMMAND_FACETS: &[&str] = &["relay", "egress", "disabled", "overlay"];

/// One of the agent's own dirs mounted into a command's container: the relay's socket volume
/// (made with the case's volumes) at `dir`.
fn mount_agent_dir(m: &mut Mutable<'_>, dir: &str) {
    let Some(name) = m.volumes.get(&Kind::Commands).and_then(|v| v.name.clone()) else {
        return;
    };
    m.add_mount(Mount {
        typ: Some(MountType::VOLUME),
        source: Some(name),
        target: Some(dir.to_owned()),
        read_only: Some(true),
        ..Default::default()
    });
}

/// An approved command's container: C0 in each phase and `writes` it may have, and the rows of
/// the protections the command's role changes or adds, each removed from its profile: no network
/// code at all, the read-only work volume beneath the overlay (and the overlay's bounded area),
/// the read-only metadata, the init's start set (DAC_OVERRIDE for the overlay), the
/// exec-capable scratch's nosuid and nodev and its bound, no engine socket, no credential, and
/// nothing of the agent's.
fn command_cases() -> Vec<Case> {
    let validator_only = |mut c: Case| {
        c.init = false;
        c.probe = false;
        c
    };
    let no_probe = |mut c: Case| {
        c.probe = false;
        c
    };
    let mut relay = command_case(
        "command-isolated/relay",
        Id::CommandIsolated,
        Writes::None,
        |m, _| mount_agent_dir(m, cordon_contract::command::SOCKET_DIR),
    );
    relay.commands = true;
    let mut egress = command_case(
        "command-isolated/egress",
        Id::CommandIsolated,
        Writes::Work,
        |m, _| mount_agent_dir(m, paths::EGRESS_DIR),
    );
    egress.commands = true;
    vec![
        full_command(Phase::Execute, Writes::None),
        full_command(Phase::Execute, Writes::Work),
        full_command(Phase::Review, Writes::None),
        command_case("network-none", Id::NetworkNone, Writes::None, |m, _| {
            m.create.network_disabled = Some(false);
            m.host().network_mode = Some("bridge".into());
        }),
        // The engine's network code back, the container on no network: only the read-back sees it.
        validator_only(command_case(
            "network-none/disabled",
            Id::NetworkNone,
            Writes::None,
            |m, _| m.create.network_disabled = Some(false),
        )),
        command_case("work-readonly", Id::WorkReadonly, Writes::None, |m, _| {
            m.make_writable(paths::WORK)
        }),
        command_case(
            "metadata-readonly",
            Id::MetadataReadonly,
            Writes::Work,
            |m, _| m.make_writable(paths::METADATA),
        ),
        command_case(
            "init-privileges",
            Id::InitPrivileges,
            Writes::None,
            |m, _| m.create.user = Some(format!("{0}:{0}", m.policy.uid)),
        ),
        command_case(
            "init-privileges/overlay",
            Id::InitPrivileges,
            Writes::None,
            |m, _| {
                if let Some(caps) = m.host().cap_add.as_mut() {
                    caps.retain(|c| c != "DAC_OVERRIDE");
                }
            },
        ),
        no_probe(command_case(
            "writable-nosuid-nodev-noexec",
            Id::WritableNosuidNodevNoexec,
            Writes::None,
            |m, _| {
                m.tmpfs(paths::TMP, |o| {
                    Some(if o == "nosuid" {
                        "suid".to_owned()
                    } else {
                        o.to_owned()
                    })
                })
            },
        )),
        command_case("tmp-bytes", Id::TmpBytes, Writes::None, |m, _| {
            m.drop_tmpfs_option(paths::TMP, "size")
        }),
        // The overlay's area unbounded: without the init there is no overlay to fill.
        no_probe(command_case(
            "work-bytes/overlay",
            Id::WorkBytes,
            Writes::None,
            |m, _| m.drop_tmpfs_option(paths::OVERLAY_AREA, "size"),
        )),
        command_case(
            "no-docker-socket",
            Id::NoDockerSocket,
            Writes::None,
            |m, env| m.add_mount(bind(&env.socket, "/var/run/docker.sock")),
        ),
        command_case(
            "credential-absent",
            Id::CredentialAbsent,
            Writes::None,
            key_in_environment,
        ),
        relay,
        egress,
    ]
}

/// Every case of the gate, in the truth table's order.
pub fn all() -> Vec<Case> {
    let mut cases = full_cases();
    for group in [
        privilege_cases(),
        isolation_cases(),
        storage_cases(),
        process_cases(),
        other_phase_cases(),
        probe_layer_cases(),
        as_root_cases(),
        egress_cases(),
        command_cases(),
    ] {
        cases.extend(group);
    }
    cases.push(hostile_repository_case());
    cases.push(credential_case());

    // Without root, a writable control or input mount changes nothing the agent can do: the
    // probe rows above carry those protections.
    for c in cases.iter_mut() {
        if c.also.is_empty()
            && matches!(
                c.removed,
                Some(Id::ControlReadonly) | Some(Id::InputReadonly)
            )
        {
            c.probe = false;
        }
    }
    cases
}

/// C0, nothing removed: every phase with the test CLI and with the agent image, Codex in
/// execute, and execute over storage with a gitlink.
fn full_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = Phase::ALL
        .iter()
        .map(|p| full(*p, Vendor::Claude, false))
        .collect();
    cases.extend(Phase::ALL.iter().map(|p| full_agent(*p)));
    cases.push(full(Phase::Execute, Vendor::Codex, false));
    cases.push(full(Phase::Execute, Vendor::Claude, true));
    cases
}

/// The same removals in the other read-only phases (seeds: every read-only phase, and the
/// metadata in planning, review and execute).
fn other_phase_cases() -> Vec<Case> {
    let work_readonly = |phase| {
        planning(case("work-readonly", Id::WorkReadonly, |m, _| {
            m.make_writable(paths::WORK)
        }))
        .with_phase(phase)
    };
    let metadata = |phase| {
        case("metadata-readonly", Id::MetadataReadonly, |m, _| {
            m.make_writable(paths::METADATA)
        })
        .with_phase(phase)
    };
    vec![
        work_readonly(Phase::Questions),
        work_readonly(Phase::Review),
        metadata(Phase::Planning),
        metadata(Phase::Review),
        // The read-only work tree too (in execute it is writable, and has its flags from its
        // options).
        case("content-noexec", Id::ContentNoexec, |_, _| {})
            .with_phase(Phase::Planning)
            .probe_only(),
    ]
}

/// Probe-layer rows where the removal alone is not what a workload meets: under the init, or
/// with the metadata where the workload could reach it.
fn probe_layer_cases() -> Vec<Case> {
    // A writable mount's noexec removed under the init: Landlock alone must refuse the exec (the
    // mapping is no exec and Landlock does not see it).
    let mut landlock_alone = case(
        "writable-nosuid-nodev-noexec/under-init",
        Id::WritableNosuidNodevNoexec,
        tmp_exec,
    )
    .probe_only();
    landlock_alone.under_init = true;
    // The metadata inside the writable work tree instead of its own read-only mount: the only
    // way .git could be moved, or hard-linked into the tree.
    let mut unmounted = case(
        "metadata-readonly/unmounted",
        Id::MetadataReadonly,
        |m, _| {
            if let Some(mounts) = m.host().mounts.as_mut() {
                mounts.retain(|x| x.target.as_deref() != Some(paths::METADATA));
            }
        },
    );
    unmounted.metadata_in_work = true;
    vec![landlock_alone, unmounted]
}

/// Root-owned files behind a writable mount: only root (with no capability) can write them.
fn as_root_cases() -> Vec<Case> {
    let with_root = |mut c: Case| {
        c.also.push(Id::NonRootUser);
        c.name = format!("{}+non-root-user", c.name);
        c.probe_only()
    };
    vec![
        with_root(case("rootfs-readonly", Id::RootfsReadonly, |m, _| {
            m.host().readonly_rootfs = Some(false);
            m.create.user = Some("0:0".into());
        })),
        with_root(case("control-readonly", Id::ControlReadonly, |m, _| {
            m.make_writable(paths::CONTROL_DIR);
            m.create.user = Some("0:0".into());
        })),
        with_root(case("input-readonly", Id::InputReadonly, |m, _| {
            m.make_writable(paths::INPUT_DIR);
            m.create.user = Some("0:0".into());
        })),
    ]
}

/// Egress: the proxy told to leave out one rule (its attestation names it), its container
/// changed after the profile built it, and the agent put on the invocation network itself
/// (where the gateway, the proxy and the endpoint become reachable directly).
fn egress_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = cordon_contract::egress::PROXY_RULES
        .into_iter()
        .map(|(id, rule)| {
            let mut c = case(&format!("proxy/{rule}"), id, |_, _| {}).with_phase(Phase::Questions);
            // Without termination nothing checks the vendor host's requests: its path,
            // credential and budget rules are gone with it.
            if id == Id::VendorTerminated {
                c.also = vec![Id::VendorPath, Id::VendorCredential, Id::VendorBudget];
            }
            c
        })
        .collect();
    cases.push(case("proxy-container", Id::ProxyContainer, |m, _| {
        if let Some(egress) = m.egress.as_mut() {
            egress.edit_proxy = Some(|body| {
                if let Some(host) = body.host_config.as_mut() {
                    host.readonly_rootfs = Some(false);
                }
            });
        }
    }));
    let mut on_network = case("network-none/egress", Id::NetworkNone, |m, _| {
        let network = m.egress.as_ref().map(|e| e.network.name.clone());
        m.host().network_mode = network;
    })
    .with_phase(Phase::Questions)
    .probe_only();
    on_network.egress = true;
    cases.push(on_network);
    cases
}

/// The vendor key put back into the agent's environment, as an invocation did before the
/// custody (and into the policy's copy of it, so only this protection stands in the way).
fn credential_case() -> Case {
    case(
        "credential-absent",
        Id::CredentialAbsent,
        key_in_environment,
    )
}

/// The run's key in the container's environment and the policy's copy of it.
fn key_in_environment(m: &mut Mutable<'_>, env: &GateEnv) {
    let entry = format!("ANTHROPIC_API_KEY={}", env.key.as_str());
    m.create
        .env
        .get_or_insert_with(Vec::new)
        .push(entry.clone());
    m.policy.env.push(entry);
}

/// A repository whose links leave the checkout (what the seeder refuses).
fn hostile_repository_case() -> Case {
    let mut hostile = case("repo-links", Id::RepoLinks, |_, _| {}).probe_only();
    hostile.hostile = true;
    hostile
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every protection with a validator or init column has a case in that layer.
    #[test]
    fn every_protection_has_its_cases() {
        let cases = all();
        for id in Id::ALL {
            let layers = id.layers();
            let has = |validator: bool| {
                cases
                    .iter()
                    .any(|c| c.removed == Some(*id) && if validator { c.validator } else { c.init })
            };
            if layers.validator {
                assert!(has(true), "{id} has no validator case");
            }
            if layers.init {
                assert!(has(false), "{id} has no init case");
            }
            if layers.probe {
                assert!(
                    cases.iter().any(|c| c.removed == Some(*id) && c.probe),
                    "{id} has no probe case"
                );
            }
        }
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<String> = all().into_iter().map(|c| c.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn seccomp_profile_is_json() {
        let text = seccomp_denying(&["seccomp"]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["syscalls"][0]["names"][0], "seccomp");
    }
}
