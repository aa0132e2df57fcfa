//! Act: cordon's own seccomp filters, stacked on the engine's profile, compiled from the tables in
//! `cordon_contract::seccomp` (the probes call the same tables' canaries).
//!
//! Three filters, each with an errno of its own so a refusal says which one answered:
//! - deny (EACCES): kernel surfaces an agent never needs (`seccomp-stacked`), and calls that tune
//!   another process, PID 1 among them (`init-sealed`);
//! - socket families (EAFNOSUPPORT): only what the agent needs (`socket-families`);
//! - clone3 (ENOSYS): its flags are behind a pointer, so libc falls back to `clone`, whose flags
//!   the deny filter reads.

use std::collections::BTreeMap;

use cordon_contract::policy::Policy;
use cordon_contract::seccomp::{self as table, Canary, Cond, Rule};
use cordon_contract::Id;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

fn condition(cond: Cond) -> Result<SeccompCondition, String> {
    let (arg, len, op, value) = match cond {
        Cond::Lacks { arg, bits } => (
            arg,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(bits),
            0,
        ),
        Cond::Has { arg, bits } => (
            arg,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(bits),
            bits,
        ),
        Cond::Is { arg, value } => (
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            u64::from(value),
        ),
        Cond::Not { arg, value } => (
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            u64::from(value),
        ),
    };
    SeccompCondition::new(arg, len, op, value).map_err(|e| format!("condition: {e}"))
}

/// Add one syscall's alternatives to a filter's rule map (no alternative: always refused).
fn add(
    rules: &mut BTreeMap<i64, Vec<SeccompRule>>,
    nr: i64,
    when: &[Vec<Cond>],
) -> Result<(), String> {
    let entry = rules.entry(nr).or_default();
    for all in when {
        let conditions = all
            .iter()
            .map(|c| condition(*c))
            .collect::<Result<Vec<_>, _>>()?;
        entry.push(SeccompRule::new(conditions).map_err(|e| format!("rule: {e}"))?);
    }
    Ok(())
}

fn owned(when: &[&[Cond]]) -> Vec<Vec<Cond>> {
    when.iter().map(|all| all.to_vec()).collect()
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| format!("filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("compile: {e}"))
}

fn table_filter(tables: &[&[Rule]], errno: i32) -> Result<Option<BpfProgram>, String> {
    let mut rules = BTreeMap::new();
    for rule in tables.iter().flat_map(|t| t.iter()) {
        add(&mut rules, rule.nr, &owned(rule.when))?;
    }
    if rules.is_empty() {
        return Ok(None);
    }
    compile(rules, errno).map(Some)
}

/// The filters a policy asks for, each with the protection whose check refuses when it is
/// missing, leaving out what the policy skips (the gate's probe layer only).
pub fn filters(policy: &Policy) -> Result<Vec<(Id, BpfProgram)>, String> {
    let enforced = |id: Id| !policy.skip.contains(&id);
    let mut out = Vec::new();
    let mut deny: Vec<&[Rule]> = Vec::new();
    if enforced(Id::SeccompStacked) {
        deny.push(table::DENIED);
    }
    if enforced(Id::InitSealed) {
        deny.push(table::SEALED);
    }
    if let Some(program) = table_filter(&deny, table::DENY_ERRNO)? {
        out.push((Id::SeccompStacked, program));
    }
    if enforced(Id::SocketFamilies) {
        let families = policy.sockets.families();
        let when = families.when();
        let mut rules = BTreeMap::new();
        for (_, nr) in table::Families::SYSCALLS {
            add(&mut rules, nr, &when)?;
        }
        out.push((Id::SocketFamilies, compile(rules, table::FAMILY_ERRNO)?));
    }
    if enforced(Id::SeccompStacked) {
        if let Some(program) = table_filter(&[table::CLONE3], table::CLONE3_ERRNO)? {
            out.push((Id::SeccompStacked, program));
        }
    }
    Ok(out)
}

/// Install the filters on every thread; returns how many were installed, or the protection of the
/// first that failed and why.
pub fn install(policy: &Policy) -> Result<u32, (Id, String)> {
    let programs = filters(policy).map_err(|e| (Id::SeccompStacked, e))?;
    let mut installed = 0;
    for (id, program) in programs {
        seccompiler::apply_filter_all_threads(&program)
            .map_err(|e| (id, format!("seccomp: {e}")))?;
        installed += 1;
    }
    Ok(installed)
}

/// Make a canary call; the errno it ends with (0 when it succeeded).
pub fn call(canary: &Canary) -> i32 {
    let a = canary.args;
    // SAFETY: every canary passes only integers and pointers the kernel rejects, or asks what
    // changes nothing of ours (see the table): whatever answers, no memory of ours is written.
    let rc = unsafe { libc::syscall(canary.nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if rc < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    } else {
        // A canary that succeeded may have made a descriptor: close that, and nothing else (a
        // success of another call returns no descriptor; 0 would be stdin).
        if table::returns_fd(canary.nr) && rc > 2 {
            if let Ok(fd) = i32::try_from(rc) {
                // SAFETY: closing a descriptor this call just returned.
                unsafe { libc::close(fd) };
            }
        }
        0
    }
}

/// The first canary of each enforced filter, checked once the filters are in: the init verifies
/// each filter is in place and answers with its own errno before anything of the workload runs
/// (every rule's canary is the probes' job in the gate, and the host-side test's). Returns the
/// protection and evidence of a canary not refused by its own filter.
pub fn verify(policy: &Policy) -> Result<(), (Id, String)> {
    verify_canaries(policy, true)
}

/// Every canary of every enforced filter (the host-side test), or the first of each (`sample`).
pub fn verify_canaries(policy: &Policy, sample: bool) -> Result<(), (Id, String)> {
    let enforced = |id: Id| !policy.skip.contains(&id);
    let sealed: Vec<&Rule> = table::SEALED.iter().collect();
    let mut checks: Vec<(Id, i32, &Canary)> = Vec::new();
    for canary in table::CANARIES {
        let id = if sealed.iter().any(|r| r.refuses(canary.nr, &canary.args)) {
            Id::InitSealed
        } else {
            Id::SeccompStacked
        };
        let errno = if canary.nr == libc::SYS_clone3 {
            table::CLONE3_ERRNO
        } else {
            table::DENY_ERRNO
        };
        checks.push((id, errno, canary));
    }
    let families = policy.sockets.families();
    for canary in table::FAMILY_CANARIES {
        if families.refuses(canary.nr, &canary.args) {
            checks.push((Id::SocketFamilies, table::FAMILY_ERRNO, canary));
        }
    }
    let mut seen: Vec<(Id, i32)> = Vec::new();
    for (id, errno, canary) in checks {
        if !enforced(id) || (sample && seen.contains(&(id, errno))) {
            continue;
        }
        seen.push((id, errno));
        let got = call(canary);
        if got != errno {
            return Err((
                id,
                format!(
                    "{}: errno {got} where the filter answers {errno} (unfiltered: {})",
                    canary.action, canary.unfiltered
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_contract::policy::SocketPolicy;

    fn policy(skip: Vec<Id>) -> Policy {
        let mut policy = crate::judge::tests::good_policy();
        policy.skip = skip;
        policy
    }

    #[test]
    fn filters_compile_and_skips_leave_exactly_their_filter_out() {
        assert_eq!(filters(&policy(vec![])).unwrap().len(), 3);
        let without = |id| {
            filters(&policy(vec![id]))
                .unwrap()
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            without(Id::SocketFamilies),
            [Id::SeccompStacked, Id::SeccompStacked]
        );
        assert_eq!(
            without(Id::SeccompStacked),
            [Id::SeccompStacked, Id::SocketFamilies]
        );
        assert_eq!(without(Id::InitSealed).len(), 3);
    }

    /// The compiled filters, installed in a child process on this (unfiltered) host: every canary
    /// is answered by its own filter's errno, and the families the agent needs still reach the
    /// kernel. Without the filters the same canaries get the kernel's own answers.
    #[test]
    fn every_canary_is_refused_by_the_compiled_filters_on_an_unfiltered_kernel() {
        let policy = policy(vec![]);
        let programs = filters(&policy).unwrap();
        // SAFETY: the child only makes raw syscalls and exits; it never returns into the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // Not the ones an unfiltered kernel would carry out (the host's PID 1 reniced).
            let before: Vec<i32> = table::CANARIES
                .iter()
                .chain(table::FAMILY_CANARIES)
                .filter(|c| !table::CARRIED_OUT_UNFILTERED.contains(&c.action))
                .map(call)
                .collect();
            let mut code = 0;
            for (_, program) in &programs {
                if seccompiler::apply_filter(program).is_err() {
                    code = 10;
                }
            }
            if let Err(e) = verify_canaries(&policy, false) {
                eprintln!("{e:?}");
                code = 11;
            }
            for canary in table::FAMILY_ALLOWED {
                let got = call(canary);
                if got == table::FAMILY_ERRNO || got == 0 {
                    eprintln!("{}: errno {got}", canary.action);
                    code = 12;
                }
            }
            // Unfiltered, no canary got a filter's errno (so a refusal proves the filter).
            let theirs = [table::DENY_ERRNO, table::FAMILY_ERRNO];
            if code == 0 && before.iter().any(|e| theirs.contains(e)) {
                code = 13;
            }
            // SAFETY: leave the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "10 install, 11 verify, 12 allowed family refused, 13 the kernel answers like a filter"
        );
    }

    #[test]
    fn a_policy_family_list_becomes_the_filter() {
        let mut p = policy(vec![]);
        p.sockets = SocketPolicy {
            families: vec![libc::AF_UNIX as u32],
            netlink_protocols: vec![],
        };
        let f = p.sockets.families();
        let inet = [libc::AF_INET as u64, 1, 0, 0, 0, 0];
        assert!(f.refuses(libc::SYS_socket, &inet));
    }
}
