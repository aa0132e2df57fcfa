//! Every field check of the read-back validator can fail: the real read-back of a full profile is
//! accepted, and each single change to it is refused with exactly the expected protection id.

use std::collections::HashMap;

use bollard::models::{
    ContainerStateStatusEnum, DeviceMapping, EndpointSettings, HealthConfig, HostConfig,
    HostConfigCgroupnsModeEnum, HostConfigLogConfig, Mount, MountBindOptions, MountPoint,
    MountType, MountVolumeOptionsDriverConfig, ResourcesUlimits, RestartPolicy,
    RestartPolicyNameEnum,
};
use cordon::launch::{self, Prepared};
use cordon::validate::{ids, validate, Observed};
use cordon_contract::{paths, Id, Phase};
use cordon_tests::{fixture, Run};

type Change = Box<dyn Fn(&mut Observed)>;

fn host(o: &mut Observed) -> &mut HostConfig {
    o.container.host_config.as_mut().unwrap()
}

fn config(o: &mut Observed) -> &mut bollard::models::ContainerConfig {
    o.container.config.as_mut().unwrap()
}

fn mount<'a>(o: &'a mut Observed, target: &str) -> &'a mut Mount {
    host(o)
        .mounts
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m.target.as_deref() == Some(target))
        .unwrap()
}

fn tmpfs(o: &mut Observed, path: &str, edit: fn(&str) -> String) {
    let options = host(o).tmpfs.as_mut().unwrap().get_mut(path).unwrap();
    *options = edit(options);
}

fn volume<'a>(o: &'a mut Observed, kind: &str) -> &'a mut bollard::models::Volume {
    o.volumes
        .values_mut()
        .filter_map(|v| v.as_mut().ok())
        .find(|v| v.labels.get("io.cordon.kind").map(String::as_str) == Some(kind))
        .unwrap()
}

fn volume_o(o: &mut Observed, kind: &str, edit: fn(&str) -> String) {
    let text = volume(o, kind).options.get_mut("o").unwrap();
    *text = edit(text);
}

fn without(options: &str, key: &str) -> String {
    options
        .split(',')
        .filter(|p| !p.starts_with(&format!("{key}=")) && *p != key)
        .collect::<Vec<_>>()
        .join(",")
}

fn changes() -> Vec<(&'static str, Vec<Id>, Change)> {
    use Id::*;
    let c = |name: &'static str, ids: Vec<Id>, f: Change| (name, ids, f);
    vec![
        c(
            "user",
            vec![InitPrivileges],
            Box::new(|o| config(o).user = Some("10001:10001".into())),
        ),
        c(
            "hostname",
            vec![HostNamespaces],
            Box::new(|o| config(o).hostname = Some("host".into())),
        ),
        c(
            "domainname",
            vec![ProfileDrift],
            Box::new(|o| config(o).domainname = Some("example.org".into())),
        ),
        c("tty", vec![NoTty], Box::new(|o| config(o).tty = Some(true))),
        c(
            "open stdin",
            vec![StdinClosed],
            Box::new(|o| config(o).open_stdin = Some(true)),
        ),
        c(
            "attach stdin",
            vec![StdinClosed],
            Box::new(|o| config(o).attach_stdin = Some(true)),
        ),
        c(
            "stdin once",
            vec![StdinClosed],
            Box::new(|o| config(o).stdin_once = Some(true)),
        ),
        c(
            "env extra",
            vec![EnvAllowlist],
            Box::new(|o| config(o).env.as_mut().unwrap().push("LEAK=1".into())),
        ),
        c(
            "env changed",
            vec![EnvAllowlist],
            Box::new(|o| config(o).env.as_mut().unwrap()[0] = "PATH=/tmp".into()),
        ),
        c(
            "a credential in the environment",
            vec![CredentialAbsent],
            Box::new(|o| {
                let env = config(o).env.as_mut().unwrap();
                env.push("ANTHROPIC_API_KEY=sk-ant-api03-the-real-key".into());
            }),
        ),
        c(
            "a credential-shaped value in another variable",
            vec![CredentialAbsent],
            Box::new(|o| {
                config(o).env.as_mut().unwrap()[0] =
                    "PATH=sk-ant-oat01-a-key-of-a-credentials-length-0123456789".into()
            }),
        ),
        c(
            "entrypoint",
            vec![InitEntrypoint],
            Box::new(|o| config(o).entrypoint = Some(vec![paths::CLAUDE_CLI.into()])),
        ),
        c(
            "cmd",
            vec![InitEntrypoint],
            Box::new(|o| config(o).cmd = Some(vec!["x".into()])),
        ),
        c(
            "docker init",
            vec![InitEntrypoint],
            Box::new(|o| host(o).init = Some(true)),
        ),
        c(
            "healthcheck",
            vec![ProfileDrift],
            Box::new(|o| {
                config(o).healthcheck = Some(HealthConfig {
                    test: Some(vec!["CMD".into(), "x".into()]),
                    ..Default::default()
                })
            }),
        ),
        c(
            "image",
            vec![ProfileDrift],
            Box::new(|o| o.container.image = Some("sha256:1234".into())),
        ),
        c(
            "config image",
            vec![ProfileDrift],
            Box::new(|o| config(o).image = Some("sha256:1234".into())),
        ),
        c(
            "working dir",
            vec![ProfileDrift],
            Box::new(|o| config(o).working_dir = Some("/".into())),
        ),
        c(
            "labels",
            vec![ProfileDrift],
            Box::new(|o| {
                config(o)
                    .labels
                    .as_mut()
                    .unwrap()
                    .insert("io.cordon.kind".into(), "other".into());
            }),
        ),
        c(
            "anonymous volume",
            vec![NoHostMounts],
            Box::new(|o| config(o).volumes = Some(vec!["/data".into()])),
        ),
        c(
            "exposed port",
            vec![NetworkNone],
            Box::new(|o| config(o).exposed_ports = Some(vec!["80/tcp".into()])),
        ),
        c(
            "rootfs",
            vec![RootfsReadonly],
            Box::new(|o| host(o).readonly_rootfs = Some(false)),
        ),
        c(
            "cap drop",
            vec![CapsDropped],
            Box::new(|o| host(o).cap_drop = None),
        ),
        c(
            "cap add",
            vec![CapAdded],
            Box::new(|o| host(o).cap_add.as_mut().unwrap().push("CHOWN".into())),
        ),
        c(
            "cap add, CAP_ prefix",
            vec![CapAdded],
            Box::new(|o| host(o).cap_add.as_mut().unwrap().push("CAP_NET_RAW".into())),
        ),
        c(
            "cap add without SYS_ADMIN",
            vec![InitPrivileges],
            Box::new(|o| {
                host(o)
                    .cap_add
                    .as_mut()
                    .unwrap()
                    .retain(|c| c != "SYS_ADMIN")
            }),
        ),
        c(
            "cap add none",
            vec![InitPrivileges],
            Box::new(|o| host(o).cap_add = None),
        ),
        c(
            "no-new-privileges",
            vec![NoNewPrivileges],
            Box::new(|o| host(o).security_opt = Some(vec![])),
        ),
        c(
            "seccomp",
            vec![SeccompDefault],
            Box::new(|o| {
                host(o)
                    .security_opt
                    .as_mut()
                    .unwrap()
                    .push("seccomp=unconfined".into())
            }),
        ),
        c(
            "systempaths",
            vec![NotPrivileged],
            Box::new(|o| {
                host(o)
                    .security_opt
                    .as_mut()
                    .unwrap()
                    .push("systempaths=unconfined".into())
            }),
        ),
        c(
            "apparmor",
            vec![ProfileDrift],
            Box::new(|o| {
                host(o)
                    .security_opt
                    .as_mut()
                    .unwrap()
                    .push("apparmor=unconfined".into())
            }),
        ),
        c(
            "privileged",
            vec![NotPrivileged],
            Box::new(|o| host(o).privileged = Some(true)),
        ),
        c(
            "masked paths",
            vec![NotPrivileged],
            Box::new(|o| {
                host(o)
                    .masked_paths
                    .as_mut()
                    .unwrap()
                    .retain(|p| p != "/proc/kcore")
            }),
        ),
        c(
            "masked host files",
            vec![HostInfoMasked],
            Box::new(|o| {
                host(o)
                    .masked_paths
                    .as_mut()
                    .unwrap()
                    .retain(|p| p != "/proc/cmdline")
            }),
        ),
        c(
            "readonly paths",
            vec![NotPrivileged],
            Box::new(|o| host(o).readonly_paths = None),
        ),
        c(
            "sysctls",
            vec![NotPrivileged],
            Box::new(|o| {
                host(o).sysctls = Some(HashMap::from([("net.ipv4.ip_forward".into(), "1".into())]))
            }),
        ),
        c(
            "ipc",
            vec![IpcNone],
            Box::new(|o| host(o).ipc_mode = Some("shareable".into())),
        ),
        c(
            "network mode",
            vec![NetworkNone],
            Box::new(|o| host(o).network_mode = Some("host".into())),
        ),
        c(
            "port bindings",
            vec![NetworkNone],
            Box::new(|o| host(o).port_bindings = Some(HashMap::from([("80/tcp".into(), None)]))),
        ),
        c(
            "publish all",
            vec![NetworkNone],
            Box::new(|o| host(o).publish_all_ports = Some(true)),
        ),
        c(
            "links",
            vec![NetworkNone],
            Box::new(|o| host(o).links = Some(vec!["other:alias".into()])),
        ),
        c(
            "extra hosts",
            vec![NoResolver],
            Box::new(|o| host(o).extra_hosts = Some(vec!["h:10.0.0.1".into()])),
        ),
        c(
            "dns",
            vec![NoResolver],
            Box::new(|o| host(o).dns = Some(vec!["10.0.0.1".into()])),
        ),
        c(
            "dns search",
            vec![NoResolver],
            Box::new(|o| host(o).dns_search = Some(vec!["corp".into()])),
        ),
        c(
            "dns options",
            vec![NoResolver],
            Box::new(|o| host(o).dns_options = Some(vec!["ndots:1".into()])),
        ),
        c(
            "networks",
            vec![NetworkNone],
            Box::new(|o| {
                o.container.network_settings.as_mut().unwrap().networks = Some(HashMap::from([(
                    "bridge".into(),
                    EndpointSettings::default(),
                )]));
            }),
        ),
        c(
            "pid mode",
            vec![HostNamespaces],
            Box::new(|o| host(o).pid_mode = Some("host".into())),
        ),
        c(
            "uts mode",
            vec![HostNamespaces],
            Box::new(|o| host(o).uts_mode = Some("host".into())),
        ),
        c(
            "userns mode",
            vec![HostNamespaces],
            Box::new(|o| host(o).userns_mode = Some("host".into())),
        ),
        c(
            "cgroup",
            vec![HostNamespaces],
            Box::new(|o| host(o).cgroup = Some("host".into())),
        ),
        c(
            "cgroupns",
            vec![HostNamespaces],
            Box::new(|o| host(o).cgroupns_mode = Some(HostConfigCgroupnsModeEnum::HOST)),
        ),
        c(
            "pids",
            vec![PidsLimit],
            Box::new(|o| host(o).pids_limit = Some(-1)),
        ),
        c(
            "memory",
            vec![MemoryLimit],
            Box::new(|o| host(o).memory = Some(0)),
        ),
        c(
            "memory swap",
            vec![MemoryLimit],
            Box::new(|o| host(o).memory_swap = Some(-1)),
        ),
        c(
            "oom kill disable",
            vec![MemoryLimit],
            Box::new(|o| host(o).oom_kill_disable = Some(true)),
        ),
        c(
            "nano cpus",
            vec![CpuLimit],
            Box::new(|o| host(o).nano_cpus = Some(0)),
        ),
        c(
            "cpu quota",
            vec![CpuLimit],
            Box::new(|o| host(o).cpu_quota = Some(-1)),
        ),
        c(
            "binds",
            vec![NoHostMounts],
            Box::new(|o| host(o).binds = Some(vec!["/etc:/mnt/etc:ro".into()])),
        ),
        c(
            "socket bind",
            vec![NoHostMounts, NoDockerSocket],
            Box::new(|o| {
                host(o).binds = Some(vec!["/var/run/docker.sock:/var/run/docker.sock".into()])
            }),
        ),
        c(
            "volumes from",
            vec![NoHostMounts],
            Box::new(|o| host(o).volumes_from = Some(vec!["other".into()])),
        ),
        c(
            "volume driver",
            vec![NoHostMounts],
            Box::new(|o| host(o).volume_driver = Some("custom".into())),
        ),
        c(
            "devices",
            vec![NoHostMounts],
            Box::new(|o| {
                host(o).devices = Some(vec![DeviceMapping {
                    path_on_host: Some("/dev/kvm".into()),
                    ..Default::default()
                }])
            }),
        ),
        c(
            "device rules",
            vec![NoHostMounts],
            Box::new(|o| host(o).device_cgroup_rules = Some(vec!["c 1:3 rwm".into()])),
        ),
        c(
            "extra bind mount",
            vec![NoHostMounts],
            Box::new(|o| {
                host(o).mounts.as_mut().unwrap().push(Mount {
                    typ: Some(MountType::BIND),
                    source: Some("/".into()),
                    target: Some("/host".into()),
                    ..Default::default()
                })
            }),
        ),
        c(
            "extra socket mount",
            vec![NoDockerSocket],
            Box::new(|o| {
                host(o).mounts.as_mut().unwrap().push(Mount {
                    typ: Some(MountType::BIND),
                    source: Some("/run/docker.sock".into()),
                    target: Some("/run/x.sock".into()),
                    ..Default::default()
                })
            }),
        ),
        c(
            "work writable",
            vec![WorkReadonly],
            Box::new(|o| mount(o, paths::WORK).read_only = Some(false)),
        ),
        c(
            "metadata writable",
            vec![MetadataReadonly],
            Box::new(|o| mount(o, paths::METADATA).read_only = Some(false)),
        ),
        c(
            "control writable",
            vec![ControlReadonly],
            Box::new(|o| mount(o, paths::CONTROL_DIR).read_only = Some(false)),
        ),
        c(
            "input writable",
            vec![InputReadonly],
            Box::new(|o| mount(o, paths::INPUT_DIR).read_only = Some(false)),
        ),
        c(
            "egress writable",
            vec![EgressReadonly],
            Box::new(|o| mount(o, paths::EGRESS_DIR).read_only = Some(false)),
        ),
        c(
            "control missing",
            vec![ControlReadonly],
            Box::new(|o| {
                host(o)
                    .mounts
                    .as_mut()
                    .unwrap()
                    .retain(|m| m.target.as_deref() != Some(paths::CONTROL_DIR))
            }),
        ),
        c(
            "work source",
            vec![NoHostMounts],
            Box::new(|o| mount(o, paths::WORK).source = Some("other".into())),
        ),
        c(
            "work type",
            vec![NoHostMounts],
            Box::new(|o| mount(o, paths::WORK).typ = Some(MountType::BIND)),
        ),
        c(
            "bind options",
            vec![NoHostMounts],
            Box::new(|o| mount(o, paths::WORK).bind_options = Some(MountBindOptions::default())),
        ),
        c(
            "nocopy",
            vec![ProfileDrift],
            Box::new(|o| {
                mount(o, paths::WORK)
                    .volume_options
                    .as_mut()
                    .unwrap()
                    .no_copy = Some(false)
            }),
        ),
        c(
            "subpath",
            vec![PinnedDirs],
            Box::new(|o| {
                mount(o, paths::WORK)
                    .volume_options
                    .as_mut()
                    .unwrap()
                    .subpath = Some("x".into())
            }),
        ),
        c(
            "driver config",
            vec![NoHostMounts],
            Box::new(|o| {
                mount(o, paths::WORK)
                    .volume_options
                    .as_mut()
                    .unwrap()
                    .driver_config = Some(MountVolumeOptionsDriverConfig {
                    name: Some("other".into()),
                    options: None,
                })
            }),
        ),
        c(
            "tmp size",
            vec![TmpBytes],
            Box::new(|o| tmpfs(o, paths::TMP, |t| without(t, "size"))),
        ),
        c(
            "tmp inodes",
            vec![TmpInodes],
            Box::new(|o| tmpfs(o, paths::TMP, |t| without(t, "nr_inodes"))),
        ),
        c(
            "tmp exec",
            vec![WritableNosuidNodevNoexec],
            Box::new(|o| tmpfs(o, paths::TMP, |t| t.replace("noexec", "exec"))),
        ),
        c(
            "tmp suid",
            vec![WritableNosuidNodevNoexec],
            Box::new(|o| tmpfs(o, paths::TMP, |t| without(t, "nosuid"))),
        ),
        c(
            "tmp mode",
            vec![ProfileDrift],
            Box::new(|o| tmpfs(o, paths::TMP, |t| t.replace("mode=1777", "mode=777"))),
        ),
        c(
            "home size",
            vec![HomeBytes],
            Box::new(|o| tmpfs(o, paths::HOME, |t| t.replace("size=", "size=1"))),
        ),
        c(
            "output inodes",
            vec![OutputInodes],
            Box::new(|o| tmpfs(o, paths::OUTPUT_DIR, |t| without(t, "nr_inodes"))),
        ),
        c(
            "home missing",
            vec![HomeBytes],
            Box::new(|o| {
                host(o).tmpfs.as_mut().unwrap().remove(paths::HOME);
            }),
        ),
        c(
            "extra tmpfs",
            vec![NoHostMounts],
            Box::new(|o| {
                host(o)
                    .tmpfs
                    .as_mut()
                    .unwrap()
                    .insert("/x".into(), "rw".into());
            }),
        ),
        c(
            "mountpoint extra",
            vec![NoHostMounts],
            Box::new(|o| {
                o.container.mounts.as_mut().unwrap().push(MountPoint {
                    destination: Some("/host".into()),
                    source: Some("/".into()),
                    ..Default::default()
                })
            }),
        ),
        c(
            "mountpoint rw",
            vec![WorkReadonly],
            Box::new(|o| {
                let point = o
                    .container
                    .mounts
                    .as_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|m| m.destination.as_deref() == Some(paths::WORK))
                    .unwrap();
                point.rw = Some(true);
            }),
        ),
        c(
            "mountpoint volume",
            vec![NoHostMounts],
            Box::new(|o| {
                let point = o
                    .container
                    .mounts
                    .as_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|m| m.destination.as_deref() == Some(paths::METADATA))
                    .unwrap();
                point.name = Some("other".into());
            }),
        ),
        c(
            "log config",
            vec![ProfileDrift],
            Box::new(|o| {
                host(o).log_config = Some(HostConfigLogConfig {
                    typ: Some("json-file".into()),
                    config: None,
                })
            }),
        ),
        c(
            "restart",
            vec![ProfileDrift],
            Box::new(|o| {
                host(o).restart_policy = Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ALWAYS),
                    maximum_retry_count: None,
                })
            }),
        ),
        c(
            "auto remove",
            vec![ProfileDrift],
            Box::new(|o| host(o).auto_remove = Some(true)),
        ),
        c(
            "runtime",
            vec![ProfileDrift],
            Box::new(|o| host(o).runtime = Some("runsc".into())),
        ),
        c(
            "ulimits",
            vec![ProfileDrift],
            Box::new(|o| {
                host(o).ulimits = Some(vec![ResourcesUlimits {
                    name: Some("core".into()),
                    soft: Some(-1),
                    hard: Some(-1),
                }])
            }),
        ),
        c(
            "cgroup parent",
            vec![ProfileDrift],
            Box::new(|o| host(o).cgroup_parent = Some("/other".into())),
        ),
        c(
            "storage opt",
            vec![ProfileDrift],
            Box::new(|o| host(o).storage_opt = Some(HashMap::from([("size".into(), "1G".into())]))),
        ),
        c(
            "state",
            vec![ProfileDrift],
            Box::new(|o| {
                o.container.state.as_mut().unwrap().status = Some(ContainerStateStatusEnum::RUNNING)
            }),
        ),
        c(
            "work volume driver",
            vec![NoHostMounts],
            Box::new(|o| volume(o, "work").driver = "other".into()),
        ),
        c(
            "work volume size",
            vec![WorkBytes],
            Box::new(|o| volume_o(o, "work", |t| without(t, "size"))),
        ),
        c(
            "work volume inodes",
            vec![WorkInodes],
            Box::new(|o| volume_o(o, "work", |t| without(t, "nr_inodes"))),
        ),
        c(
            "work volume exec",
            vec![WritableNosuidNodevNoexec],
            Box::new(|o| volume_o(o, "work", |t| without(t, "noexec"))),
        ),
        c(
            "work volume bind",
            vec![NoHostMounts],
            Box::new(|o| {
                volume(o, "work")
                    .options
                    .insert("type".into(), "none".into());
            }),
        ),
        c(
            "control volume bind",
            vec![NoHostMounts],
            Box::new(|o| {
                volume(o, "control").options.extend([
                    ("type".into(), "none".into()),
                    ("o".into(), "bind".into()),
                    ("device".into(), "/etc".into()),
                ]);
            }),
        ),
        c(
            "input volume on disk",
            vec![NoHostMounts],
            Box::new(|o| volume(o, "input").options.clear()),
        ),
        c(
            "work volume another uid",
            vec![UidPerAllocation],
            Box::new(|o| volume_o(o, "work", |t| t.replace("uid=", "uid=9"))),
        ),
        c(
            "egress volume another gid",
            vec![UidPerAllocation],
            Box::new(|o| volume_o(o, "egress", |t| t.replace("gid=", "gid=9"))),
        ),
        c(
            "volume uid label",
            vec![UidPerAllocation],
            Box::new(|o| {
                volume(o, "metadata")
                    .labels
                    .insert("io.cordon.uid".into(), "1234567".into());
            }),
        ),
        c(
            "tmpfs owner",
            vec![UidPerAllocation],
            Box::new(|o| tmpfs(o, paths::TMP, |t| t.replace("uid=", "uid=9"))),
        ),
        c(
            "another allocation holds the uid",
            vec![UidPerAllocation],
            Box::new(|o| {
                o.uid_holders
                    .as_mut()
                    .unwrap()
                    .push(cordon::labels::Holder {
                        what: "volume someone-elses".into(),
                        kind: Some(cordon::labels::Kind::Work),
                        allocation: Some(uuid::Uuid::new_v4().to_string()),
                    })
            }),
        ),
        c(
            "uid holders unreadable",
            vec![UidPerAllocation],
            Box::new(|o| o.uid_holders = Err("engine down".into())),
        ),
        c(
            "mount volume labels",
            vec![ProfileDrift],
            Box::new(|o| {
                mount(o, paths::METADATA)
                    .volume_options
                    .as_mut()
                    .unwrap()
                    .labels = None
            }),
        ),
        c(
            "volume owner",
            vec![ProfileDrift],
            Box::new(|o| {
                volume(o, "input")
                    .labels
                    .insert("io.cordon.owner".into(), "someone-else".into());
            }),
        ),
        c(
            "volume kind",
            vec![ProfileDrift],
            Box::new(|o| {
                volume(o, "egress")
                    .labels
                    .insert("io.cordon.kind".into(), "work".into());
            }),
        ),
        c(
            "metadata size",
            vec![ProfileDrift],
            Box::new(|o| volume_o(o, "metadata", |t| without(t, "size"))),
        ),
        c(
            "volume missing",
            vec![ProfileDrift],
            Box::new(|o| {
                let name = o.volumes.keys().next().unwrap().clone();
                o.volumes.insert(name, Err("no such volume".into()));
            }),
        ),
    ]
}

/// The real read-back of a planning C0 is accepted; each single change is refused with exactly its
/// id, so no field check is dead.
#[tokio::test]
async fn every_field_check_refuses_its_own_change() {
    let f = fixture("t-fields").await;
    let profile = f.profile(&Run::vendor(Phase::Planning, &["--version"]));
    let prepared = Prepared::new(&f.engine, &profile).unwrap();
    let launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    assert!(launch.refusals.is_empty(), "{:?}", launch.refusals);
    let observed = launch::read_back(&f.engine, &launch.container, &profile)
        .await
        .expect("read back");
    launch.finish(&f.engine).await.unwrap();
    f.finish().await;
    assert!(validate(&profile, &observed).is_empty());
    let mut failures = Vec::new();
    for (name, want, change) in changes() {
        let mut o = observed.clone();
        change(&mut o);
        let refusals = validate(&profile, &o);
        let mut want = want;
        want.sort();
        if ids(&refusals) != want {
            failures.push(format!("{name}: want {want:?}, got {refusals:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Over a shared snapshot the invocation runs as a uid of its own that no object of another
/// allocation may carry, of whatever kind (an invocation's objects do not own a uid, so two
/// concurrent picks of one uid would otherwise both pass). The real read-back of a questions C0
/// over a snapshot is accepted; with another allocation's egress volume really made with that
/// uid, it is refused with exactly `uid-per-allocation`.
#[tokio::test]
async fn over_a_snapshot_another_allocations_object_with_the_uid_is_refused() {
    use cordon::engine::objects;
    use cordon::labels::{Allocation, Kind};
    let mut f = fixture("t-snapuid").await;
    f.storage.snapshot = Some(format!("sha256:{}", "0".repeat(64)));
    let uid = cordon::storage::pick_uid(&f.engine, &cordon::uids::UidRange::default())
        .await
        .expect("a uid");
    assert_ne!(uid, f.storage.allocation.uid);
    let allocation = Allocation::new(&f.owner, "test", uid).expect("allocation");
    let run = Run::vendor(Phase::Questions, &["--version"]);
    let profile = cordon_tests::profile_of(allocation, &f.image, &f.storage, &run);
    let prepared = Prepared::new(&f.engine, &profile).unwrap();
    let launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    assert!(launch.refusals.is_empty(), "{:?}", launch.refusals);

    let other = Allocation {
        id: uuid::Uuid::new_v4(),
        ..profile.allocation().clone()
    };
    let decoy = bollard::models::VolumeCreateRequest {
        name: Some(other.name(Kind::Egress)),
        driver: Some("local".into()),
        driver_opts: Some(HashMap::from([
            ("type".into(), "tmpfs".into()),
            ("device".into(), "tmpfs".into()),
            ("o".into(), format!("size=1m,uid={uid},gid={uid}")),
        ])),
        labels: Some(other.labels(Kind::Egress)),
        ..Default::default()
    };
    let mut made = cordon::engine::pending::Created::default();
    objects::create_volume(&f.engine, decoy, &made.shared())
        .await
        .expect("the decoy");
    let held = launch::read_back(&f.engine, &launch.container, &profile)
        .await
        .expect("read back");
    made.remove_all(&f.engine, std::time::Duration::from_secs(30))
        .await
        .expect("remove the decoy");
    let clean = launch::read_back(&f.engine, &launch.container, &profile)
        .await
        .expect("read back");
    launch.finish(&f.engine).await.unwrap();
    f.storage.snapshot = None;
    f.finish().await;
    assert!(validate(&profile, &clean).is_empty(), "{clean:#?}");
    let refusals = validate(&profile, &held);
    assert_eq!(ids(&refusals), [Id::UidPerAllocation], "{refusals:?}");
    assert!(
        refusals
            .iter()
            .any(|r| r.to_string().contains(&other.name(Kind::Egress))),
        "{refusals:?}"
    );
}
