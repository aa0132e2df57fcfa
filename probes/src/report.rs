//! The deny helper and the report every probe builds.
//!
//! A forbidden action goes through [`Probe::deny`]: it must fail; if it succeeds, the breach is
//! recorded with the operation's id and a description of what succeeded. The attempt's result is
//! dropped unread, so a breach that succeeds (a read through a link, say) cannot copy data into
//! the report.

use std::io;

use cordon_contract::probe::{Breach, Operation, ProbeReport};
use cordon_contract::{Id, Policy};

/// What every probe needs: the policy it runs under and whether cordon-init is present.
#[derive(Debug)]
pub struct Ctx {
    pub policy: Policy,
    /// No cordon-init in this container (the gate's container-level cases): operations that only
    /// the init enforces are skipped, and counted as skipped.
    pub without_init: bool,
    /// Unique in this container, for the names of anything a probe creates.
    pub token: String,
    /// The container is privileged (every capability in the bounding set, or a writable /sys):
    /// breaches that this alone explains are reported as `not-privileged`, the cause.
    pub privileged: bool,
    /// A terminal is attached: the engine's console device, its mount and TERM are the TTY's.
    pub tty: bool,
    /// The probe does not run as the policy's user: positive checks that need that identity (a
    /// fill of an area the agent owns) cannot be judged, and are counted as skipped.
    pub foreign_user: bool,
    /// The workload may write /work: the phase writes it, or, in an approved command's container
    /// that writes nothing, the init laid its throwaway overlay there (without it, /work is the
    /// volume and must be read-only).
    pub work_writable: bool,
}

/// One probe run.
#[derive(Debug)]
pub struct Probe<'a> {
    pub ctx: &'a Ctx,
    report: ProbeReport,
}

/// errno values a seccomp filter returns for a refused syscall (EPERM from Docker's profile,
/// EACCES from cordon's, ENOSYS for clone3-style refusals).
pub fn filtered(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM) | Some(libc::ENOSYS) | Some(cordon_contract::seccomp::DENY_ERRNO)
    )
}

/// Make a canary call of the shared tables (integers and bad pointers only).
pub fn canary(canary: &cordon_contract::seccomp::Canary) -> io::Result<i64> {
    let a = canary.args;
    // SAFETY: every canary passes only integers and pointers the kernel rejects, or asks what
    // changes nothing of ours (see the table): whatever answers, no memory of ours is written.
    let rc = unsafe { libc::syscall(canary.nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    // A canary that got through may have made a descriptor: close that, and nothing else (a
    // success of another call returns no descriptor; `setpriority`'s 0 would be stdin).
    if cordon_contract::seccomp::returns_fd(canary.nr) && rc > 2 {
        if let Ok(fd) = i32::try_from(rc) {
            // SAFETY: closing what this call just returned.
            unsafe { libc::close(fd) };
        }
    }
    check(rc)
}

impl<'a> Probe<'a> {
    pub fn new(name: &str, ctx: &'a Ctx) -> Probe<'a> {
        Probe {
            ctx,
            report: ProbeReport {
                probe: name.to_owned(),
                breaches: Vec::new(),
                checks: 0,
                errors: Vec::new(),
                skipped: 0,
            },
        }
    }

    /// Whether `op` runs here (and counts it).
    pub fn runs(&mut self, op: &Operation) -> bool {
        if self.ctx.without_init && op.init_only() {
            self.report.skipped += 1;
            return false;
        }
        self.report.checks += 1;
        true
    }

    fn breach(&mut self, op: &Operation, id: Id, evidence: String) {
        self.report.breaches.push(Breach {
            id,
            action: op.action.to_owned(),
            evidence,
        });
    }

    /// The forbidden action must fail. Its result, if any, is dropped unread.
    pub fn deny<T>(
        &mut self,
        op: &Operation,
        what: &str,
        attempt: impl FnOnce() -> io::Result<T>,
    ) -> bool {
        if !self.runs(op) {
            return false;
        }
        match attempt() {
            Ok(result) => {
                drop(result);
                self.breach(op, op.id(), format!("{what}: succeeded"));
                true
            }
            Err(_) => false,
        }
    }

    /// As [`Probe::deny`], for an action whose success is an answer: Ok carries what answered (a
    /// status line, a byte count; never the data), which the breach's evidence names.
    pub fn deny_answered(
        &mut self,
        op: &Operation,
        what: &str,
        attempt: impl FnOnce() -> io::Result<String>,
    ) -> bool {
        if !self.runs(op) {
            return false;
        }
        match attempt() {
            Ok(answer) => {
                self.breach(op, op.id(), format!("{what}: {answer}"));
                true
            }
            Err(_) => false,
        }
    }

    /// The id a breach of `op` gets here: privileged mode is named as the cause where it is one.
    pub fn id_for(&self, op: &Operation) -> Id {
        if self.ctx.privileged && op.ids.contains(&Id::NotPrivileged) {
            Id::NotPrivileged
        } else {
            op.id()
        }
    }

    /// A syscall that a seccomp filter must refuse: called with arguments the kernel itself would
    /// reject with another errno (or accept), so refusal by a filter can be told apart.
    pub fn deny_syscall(
        &mut self,
        op: &Operation,
        what: &str,
        attempt: impl FnOnce() -> io::Result<i64>,
    ) {
        if !self.runs(op) {
            return;
        }
        let id = self.id_for(op);
        match attempt() {
            Err(e) if filtered(&e) => {}
            Ok(_) => self.breach(op, id, format!("{what}: succeeded")),
            Err(e) => self.breach(op, id, format!("{what}: reached the kernel ({e})")),
        }
    }

    /// A call one filter must refuse with exactly `errno`: another errno means another layer
    /// answered (Docker's profile, or the kernel itself: the filter let it through).
    pub fn refused_with(
        &mut self,
        op: &Operation,
        errno: i32,
        unfiltered: &str,
        attempt: impl FnOnce() -> io::Result<i64>,
    ) {
        self.refused_with_any(op, &[errno], unfiltered, attempt)
    }

    /// As [`Probe::refused_with`], for a call any of several filters may answer.
    pub fn refused_with_any(
        &mut self,
        op: &Operation,
        errnos: &[i32],
        unfiltered: &str,
        attempt: impl FnOnce() -> io::Result<i64>,
    ) {
        if !self.runs(op) {
            return;
        }
        let id = self.id_for(op);
        match attempt() {
            Err(e) if e.raw_os_error().is_some_and(|n| errnos.contains(&n)) => {}
            Ok(_) => self.breach(op, id, "succeeded".to_owned()),
            Err(e) => self.breach(
                op,
                id,
                format!("answered {e}, not by its filter (unfiltered: {unfiltered})"),
            ),
        }
    }

    /// A fact that must hold; `id` picks among the operation's ids.
    pub fn require_as(
        &mut self,
        op: &Operation,
        id: Id,
        holds: bool,
        evidence: impl FnOnce() -> String,
    ) {
        if !self.runs(op) {
            return;
        }
        if !holds {
            self.breach(op, id, evidence());
        }
    }

    /// A fact that must hold.
    pub fn require(&mut self, op: &Operation, holds: bool, evidence: impl FnOnce() -> String) {
        let id = self.id_for(op);
        self.require_as(op, id, holds, evidence);
    }

    /// Record a breach the caller established itself (several findings of one operation).
    pub fn found(&mut self, op: &Operation, id: Id, evidence: String) {
        self.breach(op, id, evidence);
    }

    /// A positive check failed: the probe could not prove what it set out to. Under a foreign
    /// user (already a breach of `non-root-user`) the agent's areas are not ours to fill: skipped.
    pub fn error(&mut self, message: impl Into<String>) {
        if self.ctx.foreign_user {
            self.report.skipped += 1;
        } else {
            self.report.errors.push(message.into());
        }
    }

    pub fn finish(self) -> ProbeReport {
        self.report
    }
}

/// A C string for a path (paths here are ours, never NUL-bearing).
pub fn cpath(path: &str) -> std::ffi::CString {
    std::ffi::CString::new(path).unwrap_or_default()
}

/// Map a libc return value to io::Result.
pub fn check(rc: libc::c_long) -> io::Result<i64> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
