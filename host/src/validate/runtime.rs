//! The rest of what the profile fixes about how the engine runs the container: logging, restart,
//! removal, runtime, ulimits, cgroup parent, storage options, and that it is only created.

use cordon_contract::Id;

use super::{empty, empty_map, Diff, ReadBack};

pub(super) fn engine_settings(r: &ReadBack<'_>, d: &mut Diff) {
    let (host, want_host) = (&r.host, &r.want_host);
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
    let state = r
        .observed
        .container
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
}
