//! Namespaces and the network: no IPC, no network but none (no port, link, DNS setting), no
//! host PID, UTS, user or cgroup namespace, a private cgroup namespace.

use bollard::models::HostConfigCgroupnsModeEnum;
use cordon_contract::Id;

use super::{empty, empty_map, Diff, ReadBack};

pub(super) fn no_exposed_ports(r: &ReadBack<'_>, d: &mut Diff) {
    d.check(
        empty(&r.config.exposed_ports),
        Id::NetworkNone,
        "Config.ExposedPorts",
        "none",
        &r.config.exposed_ports,
    );
}

pub(super) fn no_ipc(r: &ReadBack<'_>, d: &mut Diff) {
    d.check(
        r.host.ipc_mode.as_deref() == Some("none"),
        Id::IpcNone,
        "HostConfig.IpcMode",
        "none",
        &r.host.ipc_mode,
    );
}

pub(super) fn no_network(r: &ReadBack<'_>, d: &mut Diff) {
    let host = &r.host;
    // A profile that keeps the container out of the engine's network code (an approved
    // command) must find it so.
    if r.expected.network_disabled == Some(true) {
        d.check(
            r.config.network_disabled == Some(true),
            Id::NetworkNone,
            "Config.NetworkDisabled",
            true,
            r.config.network_disabled,
        );
    }
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
    d.check(
        empty(&host.links),
        Id::NetworkNone,
        "HostConfig.Links",
        "none",
        &host.links,
    );
    // A hosts-file entry answers a lookup without any network; a resolver setting is where a
    // lookup would go if a route ever appeared.
    for (field, value) in [
        ("HostConfig.ExtraHosts", &host.extra_hosts),
        ("HostConfig.Dns", &host.dns),
        ("HostConfig.DnsSearch", &host.dns_search),
        ("HostConfig.DnsOptions", &host.dns_options),
    ] {
        d.check(empty(value), Id::NoResolver, field, "none", value);
    }
    let networks: Vec<String> = r
        .observed
        .container
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().cloned().collect())
        .unwrap_or_default();
    // Disabled networking attaches it to no network at all; otherwise to `none` alone.
    let want: &[&str] = if r.expected.network_disabled == Some(true) {
        &[]
    } else {
        &["none"]
    };
    d.check(
        networks == want,
        Id::NetworkNone,
        "NetworkSettings.Networks",
        want,
        &networks,
    );
}

pub(super) fn no_host_namespace(r: &ReadBack<'_>, d: &mut Diff) {
    let host = &r.host;
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
}
