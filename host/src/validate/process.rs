//! What runs, as whom, attached to what: the init's start identity, no terminal or stdin, the
//! entrypoint and the image.

use cordon_contract::Id;

use super::{empty, Diff, ReadBack};

/// The init's start identity (it switches to the allocation's ids itself) and the hostname.
pub(super) fn start_identity(r: &ReadBack<'_>, d: &mut Diff) {
    let (config, expected) = (&r.config, &r.expected);
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
}

pub(super) fn terminal_and_stdin(r: &ReadBack<'_>, d: &mut Diff) {
    let config = &r.config;
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
}

/// cordon-init as the entrypoint (no command, no Docker init, no healthcheck process), the
/// profile's image and working directory.
pub(super) fn what_runs(r: &ReadBack<'_>, d: &mut Diff) {
    let (config, expected, host) = (&r.config, &r.expected, &r.host);
    let image_id = r.profile.image_id();
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
        r.observed.container.image.as_deref() == Some(image_id),
        Id::ProfileDrift,
        "Image",
        image_id,
        &r.observed.container.image,
    );
    d.check(
        config.image.as_deref() == Some(image_id),
        Id::ProfileDrift,
        "Config.Image",
        image_id,
        &config.image,
    );
    d.check(
        config.working_dir == expected.working_dir,
        Id::ProfileDrift,
        "Config.WorkingDir",
        &expected.working_dir,
        &config.working_dir,
    );
}
