//! The read-back validator: compare what the engine reports about a created container and every
//! volume it mounts with the profile, field by field. Any difference is a [`Refusal`] naming the
//! protection, the field, the expected and the observed value; the container is not started.
//!
//! Expectations come from the profile (not from the request that was sent), so a request that was
//! changed on its way, or a field the engine silently dropped, shows as a difference.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bollard::models::{
    ContainerInspectResponse, HostConfigCgroupnsModeEnum, Mount, MountType, Volume,
};
use cordon_contract::engine_socket::names_engine_socket;
use cordon_contract::policy::{CORDON_MASKED_PATHS, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS};
use cordon_contract::Id;

use crate::error::Refusal;
use crate::labels::{Kind, UID};
use crate::profile::{start_capability_names, Profile};

/// What the engine reported.
#[derive(Debug, Clone)]
pub struct Observed {
    pub container: ContainerInspectResponse,
    /// Every volume the profile mounts, by name: its inspect, or why it could not be read.
    pub volumes: BTreeMap<String, Result<Volume, String>>,
    /// Every live object labelled with the profile's uid, or why they could not be listed.
    pub uid_holders: Result<Vec<crate::uids::Holder>, String>,
}

struct Diff(Vec<Refusal>);

impl Diff {
    fn check<E: std::fmt::Debug, O: std::fmt::Debug>(
        &mut self,
        ok: bool,
        id: Id,
        field: &str,
        expected: E,
        observed: O,
    ) {
        if !ok {
            self.0.push(Refusal::of_field(
                id,
                field,
                format!("{expected:?}"),
                format!("{observed:?}"),
            ));
        }
    }
}

fn empty<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_none_or(Vec::is_empty)
}

fn empty_map<K, V>(v: &Option<HashMap<K, V>>) -> bool {
    v.as_ref().is_none_or(HashMap::is_empty)
}

/// `key=value,flag,...` as (keys with values, bare flags).
fn parse_options(text: &str) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let mut values = BTreeMap::new();
    let mut flags = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, v)) => {
                values.insert(k.to_owned(), v.to_owned());
            }
            None => {
                flags.insert(part.to_owned());
            }
        }
    }
    (values, flags)
}

/// Compare a bounded area's option string (tmpfs mount options or a local volume's `o=`).
fn check_area_options(
    diff: &mut Diff,
    field: &str,
    expected: &str,
    observed: &str,
    bytes_id: Id,
    inodes_id: Id,
) {
    let (want, want_flags) = parse_options(expected);
    let (have, have_flags) = parse_options(observed);
    diff.check(
        want.get("size") == have.get("size"),
        bytes_id,
        &format!("{field} size"),
        want.get("size"),
        have.get("size"),
    );
    diff.check(
        want.get("nr_inodes") == have.get("nr_inodes"),
        inodes_id,
        &format!("{field} nr_inodes"),
        want.get("nr_inodes"),
        have.get("nr_inodes"),
    );
    let risky = ["exec", "suid", "dev"];
    let flags_ok = ["nosuid", "nodev", "noexec"]
        .iter()
        .all(|f| have_flags.contains(*f))
        && !risky.iter().any(|f| have_flags.contains(*f));
    diff.check(
        flags_ok,
        Id::WritableNosuidNodevNoexec,
        &format!("{field} flags"),
        &want_flags,
        &have_flags,
    );
    let owner = |m: &BTreeMap<String, String>| (m.get("uid").cloned(), m.get("gid").cloned());
    diff.check(
        owner(&want) == owner(&have),
        Id::UidPerAllocation,
        &format!("{field} uid, gid"),
        owner(&want),
        owner(&have),
    );
    let rest = |m: &BTreeMap<String, String>, f: &BTreeSet<String>| {
        let mut r: Vec<String> = m
            .iter()
            .filter(|(k, _)| !["size", "nr_inodes", "uid", "gid"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        r.extend(
            f.iter()
                .filter(|f| {
                    !["nosuid", "nodev", "noexec", "exec", "suid", "dev"].contains(&f.as_str())
                })
                .cloned(),
        );
        r.sort();
        r
    };
    let (want_rest, have_rest) = (rest(&want, &want_flags), rest(&have, &have_flags));
    diff.check(
        want_rest == have_rest,
        Id::ProfileDrift,
        &format!("{field} options"),
        want_rest,
        have_rest,
    );
}

fn mount_key(m: &Mount) -> String {
    m.target.clone().unwrap_or_default()
}

fn check_mounts(diff: &mut Diff, expected: &[(Mount, Id)], observed: &[Mount]) {
    let by_target: BTreeMap<String, &(Mount, Id)> =
        expected.iter().map(|e| (mount_key(&e.0), e)).collect();
    let mut seen = BTreeSet::new();
    for m in observed {
        let target = mount_key(m);
        let field = format!("HostConfig.Mounts[{target}]");
        let Some((want, id)) = by_target.get(&target).copied() else {
            let socket = names_engine_socket(&target)
                || m.source.as_deref().is_some_and(names_engine_socket);
            let id = if socket {
                Id::NoDockerSocket
            } else {
                Id::NoHostMounts
            };
            diff.check(
                false,
                id,
                &field,
                "no such mount",
                (&m.typ, &m.source, &target),
            );
            continue;
        };
        if !seen.insert(target.clone()) {
            diff.check(false, Id::NoHostMounts, &field, "one mount", "two mounts");
            continue;
        }
        diff.check(
            m.typ == want.typ,
            Id::NoHostMounts,
            &format!("{field}.Type"),
            want.typ,
            m.typ,
        );
        diff.check(
            m.source == want.source,
            Id::NoHostMounts,
            &format!("{field}.Source"),
            &want.source,
            &m.source,
        );
        let want_ro = want.read_only.unwrap_or(false);
        let have_ro = m.read_only.unwrap_or(false);
        let ro_id = if want_ro { *id } else { Id::ProfileDrift };
        diff.check(
            want_ro == have_ro,
            ro_id,
            &format!("{field}.ReadOnly"),
            want_ro,
            have_ro,
        );
        diff.check(
            m.bind_options.is_none(),
            Id::NoHostMounts,
            &format!("{field}.BindOptions"),
            "none",
            &m.bind_options,
        );
        if want.typ == Some(MountType::VOLUME) {
            let want_vo = want.volume_options.clone().unwrap_or_default();
            let have_vo = m.volume_options.clone().unwrap_or_default();
            diff.check(
                have_vo.no_copy == Some(true),
                Id::ProfileDrift,
                &format!("{field}.VolumeOptions.NoCopy"),
                true,
                have_vo.no_copy,
            );
            diff.check(
                have_vo.subpath.as_deref().unwrap_or("")
                    == want_vo.subpath.as_deref().unwrap_or(""),
                Id::PinnedDirs,
                &format!("{field}.VolumeOptions.Subpath"),
                &want_vo.subpath,
                &have_vo.subpath,
            );
            // What the engine would make the volume with, were it missing: the profile's own.
            let driver = |vo: &bollard::models::MountVolumeOptions| {
                vo.driver_config.as_ref().map(|d| {
                    (
                        d.name.clone().unwrap_or_default(),
                        d.options
                            .clone()
                            .unwrap_or_default()
                            .into_iter()
                            .collect::<BTreeMap<_, _>>(),
                    )
                })
            };
            diff.check(
                driver(&have_vo) == driver(&want_vo),
                Id::NoHostMounts,
                &format!("{field}.VolumeOptions.DriverConfig"),
                driver(&want_vo),
                driver(&have_vo),
            );
            let labels = |vo: &bollard::models::MountVolumeOptions| {
                vo.labels
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .collect::<BTreeMap<_, _>>()
            };
            diff.check(
                labels(&have_vo) == labels(&want_vo),
                Id::ProfileDrift,
                &format!("{field}.VolumeOptions.Labels"),
                labels(&want_vo),
                labels(&have_vo),
            );
        }
        if want.typ == Some(MountType::TMPFS) {
            let want_t = want.tmpfs_options.clone().unwrap_or_default();
            let have_t = m.tmpfs_options.clone().unwrap_or_default();
            diff.check(
                want_t.size_bytes == have_t.size_bytes && want_t.mode == have_t.mode,
                *id,
                &format!("{field}.TmpfsOptions"),
                (want_t.size_bytes, want_t.mode),
                (have_t.size_bytes, have_t.mode),
            );
        }
    }
    for (want, id) in expected {
        let target = mount_key(want);
        diff.check(
            seen.contains(&target),
            *id,
            &format!("HostConfig.Mounts[{target}]"),
            "present",
            "missing",
        );
    }
}

fn check_volume(
    diff: &mut Diff,
    kind: Kind,
    want: &crate::profile::VolumeSpec,
    bytes_ids: (Id, Id),
    observed: Option<&Result<Volume, String>>,
) {
    let field = format!("volume {}", want.name);
    let volume = match observed {
        Some(Ok(v)) => v,
        Some(Err(e)) => return diff.check(false, Id::ProfileDrift, &field, "readable", e),
        None => {
            return diff.check(
                false,
                Id::ProfileDrift,
                &field,
                "inspected",
                "not inspected",
            )
        }
    };
    diff.check(
        volume.driver == "local",
        Id::NoHostMounts,
        &format!("{field} driver"),
        "local",
        &volume.driver,
    );
    let sorted = |m: &HashMap<String, String>| m.clone().into_iter().collect::<BTreeMap<_, _>>();
    let (mut want_labels, mut have_labels) = (sorted(&want.labels), sorted(&volume.labels));
    let (want_uid, have_uid) = (want_labels.remove(UID), have_labels.remove(UID));
    diff.check(
        want_uid == have_uid,
        Id::UidPerAllocation,
        &format!("{field} uid label"),
        &want_uid,
        &have_uid,
    );
    diff.check(
        want_labels == have_labels,
        Id::ProfileDrift,
        &format!("{field} labels ({})", kind.as_str()),
        &want_labels,
        &have_labels,
    );
    // Every volume is a bounded tmpfs: any other option (type=none,o=bind,device=...) could make
    // it a host path, and a plain local volume is a directory on the host's disk.
    let options = &volume.options;
    let mut tmpfs = true;
    for key in ["type", "device"] {
        let same = options.get(key) == want.options.get(key);
        tmpfs &= same;
        diff.check(
            same,
            Id::NoHostMounts,
            &format!("{field} option {key}"),
            want.options.get(key),
            options.get(key),
        );
    }
    if !tmpfs {
        // Not a tmpfs at all: its size and owner options mean nothing.
        return;
    }
    let extra: Vec<&String> = options
        .keys()
        .filter(|k| !want.options.contains_key(*k))
        .collect();
    diff.check(
        extra.is_empty(),
        Id::NoHostMounts,
        &format!("{field} options"),
        "type, device, o",
        &extra,
    );
    check_area_options(
        diff,
        &format!("{field} option o"),
        want.options.get("o").map_or("", String::as_str),
        options.get("o").map_or("", String::as_str),
        bytes_ids.0,
        bytes_ids.1,
    );
}

/// Compare the read-back with the profile. An empty list means the container may start.
pub fn validate(profile: &Profile, observed: &Observed) -> Vec<Refusal> {
    let mut d = Diff(Vec::new());
    let expected = profile.create_body();
    let want_host = expected.host_config.clone().unwrap_or_default();
    let c = &observed.container;
    let config = c.config.clone().unwrap_or_default();
    let host = c.host_config.clone().unwrap_or_default();

    // The init's start identity (it switches to the allocation's ids itself), terminal, stdin,
    // environment.
    d.check(
        config.user == expected.user,
        Id::InitPrivileges,
        "Config.User",
        &expected.user,
        &config.user,
    );
    d.check(
        config.hostname == expected.hostname,
        Id::HostNamespaces,
        "Config.Hostname",
        &expected.hostname,
        &config.hostname,
    );
    d.check(
        config.domainname.as_deref().unwrap_or("").is_empty(),
        Id::ProfileDrift,
        "Config.Domainname",
        "",
        &config.domainname,
    );
    d.check(
        config.tty != Some(true),
        Id::NoTty,
        "Config.Tty",
        false,
        config.tty,
    );
    for (field, value) in [
        ("Config.OpenStdin", config.open_stdin),
        ("Config.AttachStdin", config.attach_stdin),
        ("Config.StdinOnce", config.stdin_once),
    ] {
        d.check(value != Some(true), Id::StdinClosed, field, false, value);
    }
    let want_env: BTreeSet<String> = profile.env().into_iter().collect();
    let have_env: BTreeSet<String> = config.env.clone().unwrap_or_default().into_iter().collect();
    let names = |s: &BTreeSet<String>| -> Vec<String> {
        s.iter()
            .map(|e| e.split('=').next().unwrap_or("").to_owned())
            .collect()
    };
    d.check(
        want_env == have_env,
        Id::EnvAllowlist,
        "Config.Env (names; values withheld)",
        names(&want_env),
        names(&have_env),
    );

    // What runs.
    d.check(
        config.entrypoint == expected.entrypoint,
        Id::InitEntrypoint,
        "Config.Entrypoint",
        &expected.entrypoint,
        &config.entrypoint,
    );
    d.check(
        empty(&config.cmd),
        Id::InitEntrypoint,
        "Config.Cmd",
        "none",
        &config.cmd,
    );
    d.check(
        host.init != Some(true),
        Id::InitEntrypoint,
        "HostConfig.Init",
        false,
        host.init,
    );
    d.check(
        config.healthcheck.is_none(),
        Id::ProfileDrift,
        "Config.Healthcheck (runs processes outside cordon-init)",
        "none",
        &config.healthcheck,
    );
    d.check(
        c.image.as_deref() == Some(profile.image_id()),
        Id::ProfileDrift,
        "Image",
        profile.image_id(),
        &c.image,
    );
    d.check(
        config.image.as_deref() == Some(profile.image_id()),
        Id::ProfileDrift,
        "Config.Image",
        profile.image_id(),
        &config.image,
    );
    d.check(
        config.working_dir == expected.working_dir,
        Id::ProfileDrift,
        "Config.WorkingDir",
        &expected.working_dir,
        &config.working_dir,
    );
    d.check(
        config.labels == expected.labels,
        Id::ProfileDrift,
        "Config.Labels",
        &expected.labels,
        &config.labels,
    );
    d.check(
        empty(&config.volumes),
        Id::NoHostMounts,
        "Config.Volumes",
        "none",
        &config.volumes,
    );
    d.check(
        empty(&config.exposed_ports),
        Id::NetworkNone,
        "Config.ExposedPorts",
        "none",
        &config.exposed_ports,
    );

    // Privilege.
    d.check(
        host.readonly_rootfs == Some(true),
        Id::RootfsReadonly,
        "HostConfig.ReadonlyRootfs",
        true,
        host.readonly_rootfs,
    );
    d.check(
        host.cap_drop == want_host.cap_drop,
        Id::CapsDropped,
        "HostConfig.CapDrop",
        &want_host.cap_drop,
        &host.cap_drop,
    );
    // Exactly the init's start capabilities (Docker may report them with a CAP_ prefix).
    let caps = |list: &Option<Vec<String>>| -> BTreeSet<String> {
        list.iter()
            .flatten()
            .map(|c| c.to_ascii_uppercase().trim_start_matches("CAP_").to_owned())
            .collect()
    };
    let want_caps: BTreeSet<String> = start_capability_names().into_iter().collect();
    let have_caps = caps(&host.cap_add);
    let added: Vec<&String> = have_caps.difference(&want_caps).collect();
    let missing: Vec<&String> = want_caps.difference(&have_caps).collect();
    d.check(
        added.is_empty(),
        Id::CapAdded,
        "HostConfig.CapAdd (beyond the init's start set)",
        "none",
        &added,
    );
    d.check(
        missing.is_empty(),
        Id::InitPrivileges,
        "HostConfig.CapAdd (the init's start set)",
        &want_caps,
        &missing,
    );
    let security = host.security_opt.clone().unwrap_or_default();
    let nnp = security.iter().any(|o| {
        o == "no-new-privileges" || o == "no-new-privileges:true" || o == "no-new-privileges=true"
    });
    d.check(
        nnp,
        Id::NoNewPrivileges,
        "HostConfig.SecurityOpt no-new-privileges",
        "present",
        &security,
    );
    let host_namespace = [&host.pid_mode, &host.ipc_mode]
        .iter()
        .any(|m| m.as_deref() == Some("host"));
    for opt in security
        .iter()
        .filter(|o| !o.starts_with("no-new-privileges"))
    {
        // The engine itself adds label=disable to a privileged or host-PID/IPC container: report it
        // under that cause, so one removal gives one id.
        let id = if opt.starts_with("seccomp") {
            Id::SeccompDefault
        } else if opt.starts_with("systempaths")
            || (opt.starts_with("label") && host.privileged == Some(true))
        {
            Id::NotPrivileged
        } else if opt.starts_with("label") && host_namespace {
            Id::HostNamespaces
        } else {
            Id::ProfileDrift
        };
        // A seccomp profile can be long: quote its start only.
        let shown: String = opt.chars().take(80).collect();
        d.check(
            false,
            id,
            "HostConfig.SecurityOpt",
            "only no-new-privileges",
            shown,
        );
    }
    d.check(
        host.privileged != Some(true),
        Id::NotPrivileged,
        "HostConfig.Privileged",
        false,
        host.privileged,
    );
    let masked = host.masked_paths.clone().unwrap_or_default();
    let unmasked = |list: &[&str]| -> Vec<String> {
        list.iter()
            .filter(|p| !masked.iter().any(|m| m == *p))
            .map(|p| (*p).to_owned())
            .collect()
    };
    d.check(
        unmasked(ENGINE_MASKED_PATHS).is_empty(),
        Id::NotPrivileged,
        "HostConfig.MaskedPaths (the engine's)",
        "all masked",
        unmasked(ENGINE_MASKED_PATHS),
    );
    d.check(
        unmasked(CORDON_MASKED_PATHS).is_empty(),
        Id::HostInfoMasked,
        "HostConfig.MaskedPaths (host-describing files)",
        "all masked",
        unmasked(CORDON_MASKED_PATHS),
    );
    let readonly = host.readonly_paths.clone().unwrap_or_default();
    d.check(
        ENGINE_READONLY_PATHS
            .iter()
            .all(|p| readonly.iter().any(|m| m == p)),
        Id::NotPrivileged,
        "HostConfig.ReadonlyPaths",
        ENGINE_READONLY_PATHS,
        &readonly,
    );
    d.check(
        empty_map(&host.sysctls),
        Id::NotPrivileged,
        "HostConfig.Sysctls",
        "none",
        &host.sysctls,
    );

    // Namespaces and network.
    d.check(
        host.ipc_mode.as_deref() == Some("none"),
        Id::IpcNone,
        "HostConfig.IpcMode",
        "none",
        &host.ipc_mode,
    );
    d.check(
        host.network_mode.as_deref() == Some("none"),
        Id::NetworkNone,
        "HostConfig.NetworkMode",
        "none",
        &host.network_mode,
    );
    d.check(
        empty_map(&host.port_bindings),
        Id::NetworkNone,
        "HostConfig.PortBindings",
        "none",
        &host.port_bindings,
    );
    d.check(
        host.publish_all_ports != Some(true),
        Id::NetworkNone,
        "HostConfig.PublishAllPorts",
        false,
        host.publish_all_ports,
    );
    for (field, value) in [
        ("HostConfig.Links", &host.links),
        ("HostConfig.ExtraHosts", &host.extra_hosts),
        ("HostConfig.Dns", &host.dns),
        ("HostConfig.DnsSearch", &host.dns_search),
        ("HostConfig.DnsOptions", &host.dns_options),
    ] {
        d.check(empty(value), Id::NetworkNone, field, "none", value);
    }
    let networks: Vec<String> = c
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().cloned().collect())
        .unwrap_or_default();
    d.check(
        networks == ["none"],
        Id::NetworkNone,
        "NetworkSettings.Networks",
        ["none"],
        &networks,
    );
    for (field, value) in [
        ("HostConfig.PidMode", &host.pid_mode),
        ("HostConfig.UTSMode", &host.uts_mode),
        ("HostConfig.UsernsMode", &host.userns_mode),
        ("HostConfig.Cgroup", &host.cgroup),
    ] {
        d.check(
            value.as_deref().unwrap_or("").is_empty(),
            Id::HostNamespaces,
            field,
            "",
            value,
        );
    }
    d.check(
        host.cgroupns_mode == Some(HostConfigCgroupnsModeEnum::PRIVATE),
        Id::HostNamespaces,
        "HostConfig.CgroupnsMode",
        "private",
        host.cgroupns_mode,
    );

    // Limits.
    d.check(
        host.pids_limit == want_host.pids_limit,
        Id::PidsLimit,
        "HostConfig.PidsLimit",
        want_host.pids_limit,
        host.pids_limit,
    );
    d.check(
        host.memory == want_host.memory,
        Id::MemoryLimit,
        "HostConfig.Memory",
        want_host.memory,
        host.memory,
    );
    d.check(
        host.memory_swap == want_host.memory,
        Id::MemoryLimit,
        "HostConfig.MemorySwap",
        want_host.memory,
        host.memory_swap,
    );
    d.check(
        host.oom_kill_disable != Some(true),
        Id::MemoryLimit,
        "HostConfig.OomKillDisable",
        false,
        host.oom_kill_disable,
    );
    d.check(
        host.nano_cpus == want_host.nano_cpus,
        Id::CpuLimit,
        "HostConfig.NanoCpus",
        want_host.nano_cpus,
        host.nano_cpus,
    );
    d.check(
        host.cpu_quota.unwrap_or(0) == 0 && host.cpu_period.unwrap_or(0) == 0,
        Id::CpuLimit,
        "HostConfig.CpuQuota/CpuPeriod",
        (0, 0),
        (host.cpu_quota, host.cpu_period),
    );

    // Mounts.
    d.check(
        empty(&host.binds),
        Id::NoHostMounts,
        "HostConfig.Binds",
        "none",
        &host.binds,
    );
    if host
        .binds
        .iter()
        .flatten()
        .any(|b| names_engine_socket(b.split(':').next().unwrap_or("")))
    {
        d.check(
            false,
            Id::NoDockerSocket,
            "HostConfig.Binds",
            "no daemon socket",
            &host.binds,
        );
    }
    d.check(
        empty(&host.volumes_from),
        Id::NoHostMounts,
        "HostConfig.VolumesFrom",
        "none",
        &host.volumes_from,
    );
    d.check(
        host.volume_driver.as_deref().unwrap_or("").is_empty(),
        Id::NoHostMounts,
        "HostConfig.VolumeDriver",
        "",
        &host.volume_driver,
    );
    d.check(
        empty(&host.devices),
        Id::NoHostMounts,
        "HostConfig.Devices",
        "none",
        &host.devices,
    );
    d.check(
        empty(&host.device_cgroup_rules),
        Id::NoHostMounts,
        "HostConfig.DeviceCgroupRules",
        "none",
        &host.device_cgroup_rules,
    );
    d.check(
        empty(&host.device_requests),
        Id::NoHostMounts,
        "HostConfig.DeviceRequests",
        "none",
        &host.device_requests,
    );
    check_mounts(
        &mut d,
        &profile.mounts(),
        host.mounts.as_deref().unwrap_or_default(),
    );
    let have_tmpfs = host.tmpfs.clone().unwrap_or_default();
    let areas = profile.scratch_areas();
    for (path, area, bytes_id, inodes_id, mode) in &areas {
        let field = format!("HostConfig.Tmpfs[{path}]");
        match have_tmpfs.get(*path) {
            Some(options) => check_area_options(
                &mut d,
                &field,
                &profile.tmpfs_options(*area, *mode),
                options,
                *bytes_id,
                *inodes_id,
            ),
            None => d.check(false, *bytes_id, &field, "present", "missing"),
        }
    }
    for path in have_tmpfs
        .keys()
        .filter(|p| !areas.iter().any(|a| a.0 == p.as_str()))
    {
        d.check(
            false,
            Id::NoHostMounts,
            &format!("HostConfig.Tmpfs[{path}]"),
            "no such mount",
            &have_tmpfs[path],
        );
    }
    let expected_targets: BTreeMap<String, (Option<String>, bool)> = profile
        .mounts()
        .into_iter()
        .map(|(m, _)| {
            (
                mount_key(&m),
                (m.source.clone(), !m.read_only.unwrap_or(false)),
            )
        })
        .collect();
    for point in c.mounts.iter().flatten() {
        let dest = point.destination.clone().unwrap_or_default();
        let field = format!("Mounts[{dest}]");
        match expected_targets.get(&dest) {
            Some((source, rw)) => {
                let is_volume = point.name.is_some();
                if is_volume {
                    d.check(
                        point.name == *source,
                        Id::NoHostMounts,
                        &format!("{field}.Name"),
                        source,
                        &point.name,
                    );
                }
                if !*rw {
                    let id = profile
                        .mounts()
                        .into_iter()
                        .find(|(m, _)| mount_key(m) == dest)
                        .map_or(Id::ProfileDrift, |(_, id)| id);
                    d.check(
                        point.rw != Some(true),
                        id,
                        &format!("{field}.RW"),
                        false,
                        point.rw,
                    );
                }
            }
            None => {
                let socket = names_engine_socket(&dest)
                    || point.source.as_deref().is_some_and(names_engine_socket);
                d.check(
                    false,
                    if socket {
                        Id::NoDockerSocket
                    } else {
                        Id::NoHostMounts
                    },
                    &field,
                    "no such mount",
                    (&point.typ, &point.source),
                );
            }
        }
    }

    // Everything else the profile fixes.
    d.check(
        host.log_config == want_host.log_config,
        Id::ProfileDrift,
        "HostConfig.LogConfig",
        &want_host.log_config,
        &host.log_config,
    );
    d.check(
        host.restart_policy.as_ref().and_then(|r| r.name)
            == want_host.restart_policy.as_ref().and_then(|r| r.name),
        Id::ProfileDrift,
        "HostConfig.RestartPolicy",
        &want_host.restart_policy,
        &host.restart_policy,
    );
    d.check(
        host.auto_remove != Some(true),
        Id::ProfileDrift,
        "HostConfig.AutoRemove",
        false,
        host.auto_remove,
    );
    d.check(
        matches!(host.runtime.as_deref(), None | Some("runc") | Some("")),
        Id::ProfileDrift,
        "HostConfig.Runtime",
        "runc",
        &host.runtime,
    );
    d.check(
        empty(&host.ulimits),
        Id::ProfileDrift,
        "HostConfig.Ulimits",
        "none",
        &host.ulimits,
    );
    d.check(
        host.cgroup_parent.as_deref().unwrap_or("").is_empty(),
        Id::ProfileDrift,
        "HostConfig.CgroupParent",
        "",
        &host.cgroup_parent,
    );
    d.check(
        empty_map(&host.storage_opt),
        Id::ProfileDrift,
        "HostConfig.StorageOpt",
        "none",
        &host.storage_opt,
    );
    let state = c
        .state
        .as_ref()
        .and_then(|s| s.status)
        .map(|s| s.to_string());
    d.check(
        state.as_deref() == Some("created"),
        Id::ProfileDrift,
        "State.Status",
        "created",
        &state,
    );

    // Every volume it mounts.
    for (kind, want) in profile.volumes() {
        let ids = if kind == Kind::Work {
            (Id::WorkBytes, Id::WorkInodes)
        } else {
            (Id::ProfileDrift, Id::ProfileDrift)
        };
        check_volume(&mut d, kind, &want, ids, observed.volumes.get(&want.name));
    }

    // No other live storage allocation runs as this uid.
    let storage = profile.storage().storage.id;
    match &observed.uid_holders {
        Ok(holders) => {
            let others = crate::uids::others(holders, &storage);
            d.check(
                others.is_empty(),
                Id::UidPerAllocation,
                &format!("objects labelled {UID}={}", profile.allocation().uid),
                format!("only allocation {storage}'s storage"),
                &others,
            );
        }
        Err(e) => d.check(
            false,
            Id::UidPerAllocation,
            "objects labelled with the uid",
            "listed",
            e,
        ),
    }
    d.0
}

/// The distinct protection ids of a refusal list, sorted.
pub fn ids(refusals: &[Refusal]) -> Vec<Id> {
    let set: BTreeSet<Id> = refusals.iter().map(|r| r.id).collect();
    set.into_iter().collect()
}
