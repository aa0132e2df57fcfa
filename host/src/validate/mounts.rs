//! Mounts: no image volume, bind, device or volume plugin; `HostConfig.Mounts` exactly the
//! profile's (type, source, read-only, volume and tmpfs options); the scratch tmpfs areas exactly
//! bounded; every mount point the engine reports one of the profile's. A mount that is not the
//! profile's is named a daemon socket when its path names one.

use std::collections::{BTreeMap, BTreeSet};

use bollard::models::{Mount, MountType, MountVolumeOptions};
use cordon_contract::engine_socket::names_engine_socket;
use cordon_contract::Id;

use super::options::check_area_options;
use super::{empty, Diff, ReadBack};

fn mount_key(m: &Mount) -> String {
    m.target.clone().unwrap_or_default()
}

/// The id of a mount the profile does not make: a daemon socket, one of the agent's own
/// directories in a command's container, or just a mount that is not the profile's.
fn unknown_mount_id(r: &ReadBack<'_>, target: &str, source: Option<&str>) -> Id {
    let agent_only = || {
        cordon_contract::paths::AGENT_ONLY_DIRS
            .iter()
            .any(|d| target == *d || target.starts_with(&format!("{d}/")))
    };
    if names_engine_socket(target) || source.is_some_and(names_engine_socket) {
        Id::NoDockerSocket
    } else if r.profile.command_role().is_some() && agent_only() {
        Id::CommandIsolated
    } else {
        Id::NoHostMounts
    }
}

pub(super) fn no_image_volumes(r: &ReadBack<'_>, d: &mut Diff) {
    d.check(
        empty(&r.config.volumes),
        Id::NoHostMounts,
        "Config.Volumes",
        "none",
        &r.config.volumes,
    );
}

pub(super) fn no_host_paths_or_devices(r: &ReadBack<'_>, d: &mut Diff) {
    let host = &r.host;
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
}

/// `HostConfig.Mounts`: each one the profile's, once, as the profile makes it; none missing.
pub(super) fn profile_mounts(r: &ReadBack<'_>, d: &mut Diff) {
    let expected = r.profile.mounts();
    let observed = r.host.mounts.as_deref().unwrap_or_default();
    let by_target: BTreeMap<String, &(Mount, Id)> =
        expected.iter().map(|e| (mount_key(&e.0), e)).collect();
    let mut seen = BTreeSet::new();
    for m in observed {
        let target = mount_key(m);
        let field = format!("HostConfig.Mounts[{target}]");
        let Some((want, id)) = by_target.get(&target).copied() else {
            d.check(
                false,
                unknown_mount_id(r, &target, m.source.as_deref()),
                &field,
                "no such mount",
                (&m.typ, &m.source, &target),
            );
            continue;
        };
        if !seen.insert(target.clone()) {
            d.check(false, Id::NoHostMounts, &field, "one mount", "two mounts");
            continue;
        }
        check_mount(d, &field, want, *id, m);
    }
    for (want, id) in &expected {
        let target = mount_key(want);
        d.check(
            seen.contains(&target),
            *id,
            &format!("HostConfig.Mounts[{target}]"),
            "present",
            "missing",
        );
    }
}

/// One mount of the profile's (`want`, carrying `id`) against the engine's `m` at its target.
fn check_mount(d: &mut Diff, field: &str, want: &Mount, id: Id, m: &Mount) {
    d.check(
        m.typ == want.typ,
        Id::NoHostMounts,
        &format!("{field}.Type"),
        want.typ,
        m.typ,
    );
    d.check(
        m.source == want.source,
        Id::NoHostMounts,
        &format!("{field}.Source"),
        &want.source,
        &m.source,
    );
    let want_ro = want.read_only.unwrap_or(false);
    let have_ro = m.read_only.unwrap_or(false);
    let ro_id = if want_ro { id } else { Id::ProfileDrift };
    d.check(
        want_ro == have_ro,
        ro_id,
        &format!("{field}.ReadOnly"),
        want_ro,
        have_ro,
    );
    d.check(
        m.bind_options.is_none(),
        Id::NoHostMounts,
        &format!("{field}.BindOptions"),
        "none",
        &m.bind_options,
    );
    if want.typ == Some(MountType::VOLUME) {
        check_volume_options(
            d,
            field,
            &want.volume_options.clone().unwrap_or_default(),
            &m.volume_options.clone().unwrap_or_default(),
        );
    }
    if want.typ == Some(MountType::TMPFS) {
        let want_t = want.tmpfs_options.clone().unwrap_or_default();
        let have_t = m.tmpfs_options.clone().unwrap_or_default();
        d.check(
            want_t.size_bytes == have_t.size_bytes && want_t.mode == have_t.mode,
            id,
            &format!("{field}.TmpfsOptions"),
            (want_t.size_bytes, want_t.mode),
            (have_t.size_bytes, have_t.mode),
        );
    }
}

/// A volume mount's options: no copy-up, the profile's subpath, and what the engine would make
/// the volume with, were it missing (the profile's own driver options and labels).
fn check_volume_options(
    d: &mut Diff,
    field: &str,
    want_vo: &MountVolumeOptions,
    have_vo: &MountVolumeOptions,
) {
    d.check(
        have_vo.no_copy == Some(true),
        Id::ProfileDrift,
        &format!("{field}.VolumeOptions.NoCopy"),
        true,
        have_vo.no_copy,
    );
    d.check(
        have_vo.subpath.as_deref().unwrap_or("") == want_vo.subpath.as_deref().unwrap_or(""),
        Id::PinnedDirs,
        &format!("{field}.VolumeOptions.Subpath"),
        &want_vo.subpath,
        &have_vo.subpath,
    );
    let driver = |vo: &MountVolumeOptions| {
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
    d.check(
        driver(have_vo) == driver(want_vo),
        Id::NoHostMounts,
        &format!("{field}.VolumeOptions.DriverConfig"),
        driver(want_vo),
        driver(have_vo),
    );
    let labels = |vo: &MountVolumeOptions| {
        vo.labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>()
    };
    d.check(
        labels(have_vo) == labels(want_vo),
        Id::ProfileDrift,
        &format!("{field}.VolumeOptions.Labels"),
        labels(want_vo),
        labels(have_vo),
    );
}

/// `HostConfig.Tmpfs`: every scratch area with the profile's options, nothing else.
pub(super) fn scratch_areas(r: &ReadBack<'_>, d: &mut Diff) {
    let profile = r.profile;
    let have_tmpfs = r.host.tmpfs.clone().unwrap_or_default();
    let areas = profile.scratch_areas();
    for (path, area, bytes_id, inodes_id, mode) in &areas {
        let field = format!("HostConfig.Tmpfs[{path}]");
        match have_tmpfs.get(*path) {
            Some(options) => check_area_options(
                d,
                &field,
                &profile.tmpfs_options(path, *area, *mode),
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
}

/// The mount points the engine reports: each at one of the profile's targets, its volume the
/// profile's, read-only where the profile says so.
pub(super) fn mount_points(r: &ReadBack<'_>, d: &mut Diff) {
    let profile = r.profile;
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
    for point in r.observed.container.mounts.iter().flatten() {
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
            None => d.check(
                false,
                unknown_mount_id(r, &dest, point.source.as_deref()),
                &field,
                "no such mount",
                (&point.typ, &point.source),
            ),
        }
    }
}
