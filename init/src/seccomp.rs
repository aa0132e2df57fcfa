//! Act: cordon's own seccomp filters, stacked on the engine's default profile.
//!
//! Two filters: one returns EPERM for kernel surfaces an agent never needs (and for
//! `memfd_create` without `MFD_NOEXEC_SEAL` and `clone` with namespace flags); one returns ENOSYS
//! for `clone3`, whose flags a filter cannot read, so libc falls back to `clone`.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Syscalls refused outright.
pub const DENIED: &[(&str, libc::c_long)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("execveat", libc::SYS_execveat),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("quotactl", libc::SYS_quotactl),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
];

/// `MFD_NOEXEC_SEAL`: a memfd created with it can never be executed.
pub const MFD_NOEXEC_SEAL: u64 = 0x0008;

/// Namespace flags `clone` must not carry.
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x0000_0080, // CLONE_NEWTIME
];

fn condition(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| format!("condition: {e}"))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| format!("rule: {e}"))
}

/// The EPERM filter.
pub fn deny_filter() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|(_, nr)| (*nr, vec![])).collect();
    // memfd_create(name, flags): refused unless flags carry MFD_NOEXEC_SEAL.
    rules.insert(
        libc::SYS_memfd_create,
        vec![rule(vec![condition(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(MFD_NOEXEC_SEAL),
            0,
        )?])?],
    );
    // clone(flags, ...): refused when any namespace flag is set.
    let clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            rule(vec![condition(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(*flag),
                *flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| format!("filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("compile: {e}"))
}

/// The ENOSYS filter for clone3.
pub fn clone3_filter() -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, vec![])]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| format!("filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("compile: {e}"))
}

/// Install both filters on every thread.
pub fn install() -> Result<(), String> {
    for program in [deny_filter()?, clone3_filter()?] {
        seccompiler::apply_filter_all_threads(&program).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile() {
        assert!(!deny_filter().unwrap().is_empty());
        assert!(!clone3_filter().unwrap().is_empty());
    }

    #[test]
    fn denied_list_covers_the_issue() {
        for name in [
            "io_uring_setup",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "keyctl",
            "bpf",
            "userfaultfd",
            "mount",
            "umount2",
            "unshare",
            "setns",
            "execveat",
        ] {
            assert!(DENIED.iter().any(|(n, _)| *n == name), "{name}");
        }
    }
}
