//! Privilege: a read-only root, exactly the init's start capabilities, no-new-privileges and no
//! other security option, not privileged, the engine's and cordon's masked and read-only paths,
//! no sysctl.

use std::collections::BTreeSet;

use cordon_contract::policy::{CORDON_MASKED_PATHS, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS};
use cordon_contract::Id;

use super::{empty_map, Diff, ReadBack};

pub(super) fn readonly_root(r: &ReadBack<'_>, d: &mut Diff) {
    d.check(
        r.host.readonly_rootfs == Some(true),
        Id::RootfsReadonly,
        "HostConfig.ReadonlyRootfs",
        true,
        r.host.readonly_rootfs,
    );
}

/// Every capability dropped, then exactly the init's start capabilities added (Docker may report
/// them with a CAP_ prefix).
pub(super) fn capabilities(r: &ReadBack<'_>, d: &mut Diff) {
    let host = &r.host;
    d.check(
        host.cap_drop == r.want_host.cap_drop,
        Id::CapsDropped,
        "HostConfig.CapDrop",
        &r.want_host.cap_drop,
        &host.cap_drop,
    );
    let caps = |list: &Option<Vec<String>>| -> BTreeSet<String> {
        list.iter()
            .flatten()
            .map(|c| c.to_ascii_uppercase().trim_start_matches("CAP_").to_owned())
            .collect()
    };
    let want_caps: BTreeSet<String> = r
        .profile
        .start_capabilities()
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
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
}

/// no-new-privileges, and no other option (each reported under what it undoes).
pub(super) fn security_options(r: &ReadBack<'_>, d: &mut Diff) {
    let host = &r.host;
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
}

/// Not privileged: every masked and read-only path in place, no sysctl.
pub(super) fn not_privileged(r: &ReadBack<'_>, d: &mut Diff) {
    let host = &r.host;
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
}
