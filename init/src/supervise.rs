//! Supervise: run the workload in its own session, forward signals to it, reap every process in
//! the container, enforce the deadline, and when the workload ends take everything else down
//! (TERM, grace, KILL) before exiting with the workload's status.
//!
//! The init is PID 1 of the container's pid namespace, so every orphan is reparented to it and
//! `kill(-1, sig)` reaches every other process in the container, including those that left the
//! workload's session with setsid.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use cordon_contract::policy::Policy;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::AsFd;

/// Signals a fault raises synchronously; they stay unblocked so a crash in the init is a crash.
const SYNCHRONOUS: [Signal; 6] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGTRAP,
    Signal::SIGSYS,
];

/// Block every asynchronous signal; the init reads them from a signalfd instead. Call first.
pub fn block_signals() -> Result<SigSet, String> {
    let mut mask = SigSet::all();
    for s in SYNCHRONOUS {
        mask.remove(s);
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
        .map_err(|e| format!("sigprocmask: {e}"))?;
    Ok(mask)
}

/// How the supervision ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The workload's exit code, 128+signal, or None when the deadline killed it.
    pub code: Option<i32>,
    /// Other processes sent TERM at shutdown.
    pub terminated: u32,
    /// Processes still alive after the grace period, sent KILL.
    pub killed: u32,
}

fn status_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// Reap every child that has exited, recording the main child's status if it was among them.
/// Returns true when no child is left at all.
fn reap(main: Pid, main_status: &mut Option<i32>) -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(status) => {
                if status.pid() == Some(main) {
                    if let Some(code) = status_code(status) {
                        main_status.get_or_insert(code);
                    }
                }
            }
            Err(Errno::EINTR) => continue,
            // ECHILD: nobody is left.
            Err(_) => return true,
        }
    }
}

/// Other processes in the container (every numeric /proc entry but ours).
fn others() -> u32 {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .map(|dir| {
            let count = dir
                .flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) && name != me
                })
                .count();
            // Saturates: pid_max is at most 2^22, far below u32::MAX.
            u32::try_from(count).unwrap_or(u32::MAX)
        })
        .unwrap_or(0)
}

/// Wait on the signalfd until `until`, reaping; returns true once no child is left.
fn drain_until(sfd: &SignalFd, until: Instant, main: Pid, main_status: &mut Option<i32>) -> bool {
    loop {
        if reap(main, main_status) {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let timeout = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, timeout);
        while let Ok(Some(_)) = sfd.read_signal() {}
    }
}

/// TERM everything, give it `grace`, KILL what is left, reap all.
fn shutdown(
    sfd: &SignalFd,
    grace: Duration,
    main: Pid,
    main_status: &mut Option<i32>,
) -> (u32, u32) {
    let terminated = others();
    if terminated > 0 {
        let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
    }
    if drain_until(sfd, Instant::now() + grace, main, main_status) {
        return (terminated, 0);
    }
    let killed = others();
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    loop {
        match waitpid(None, None) {
            Ok(status) => {
                if status.pid() == Some(main) {
                    if let Some(code) = status_code(status) {
                        main_status.get_or_insert(code);
                    }
                }
            }
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    (terminated, killed)
}

/// Start the workload and supervise it to the end. `fault` runs once the workload is running
/// (the panic self-test).
pub fn run(policy: &Policy, mask: &SigSet, fault: impl FnOnce()) -> Result<Outcome, String> {
    let sfd = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;
    let (program, args) = policy
        .command
        .split_first()
        .ok_or_else(|| "empty command".to_owned())?;
    let mut command = Command::new(program);
    command.args(args).env_clear().current_dir(&policy.cwd);
    for entry in &policy.env {
        if let Some((key, value)) = entry.split_once('=') {
            command.env(key, value);
        }
    }
    // SAFETY: setsid and sigprocmask are async-signal-safe. The workload must not inherit the
    // init's blocked mask: a blocked TERM would never reach it.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let started = Instant::now();
    let child = command
        .spawn()
        .map_err(|e| format!("spawn {program}: {e}"))?;
    let main = Pid::from_raw(child.id() as i32);
    // The child is reaped below with waitpid; dropping the handle does not wait or kill.
    drop(child);
    fault();

    let deadline = started + Duration::from_millis(policy.deadline_ms);
    let grace = Duration::from_millis(policy.grace_ms);
    let mut main_status = None;
    loop {
        reap(main, &mut main_status);
        if main_status.is_some() {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            crate::emit(&cordon_contract::InitLine::Deadline {
                deadline_ms: policy.deadline_ms,
            });
            let (terminated, killed) = shutdown(&sfd, grace, main, &mut main_status);
            return Ok(Outcome {
                code: None,
                terminated,
                killed,
            });
        }
        let timeout = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let signo = info.ssi_signo as i32;
            if signo == libc::SIGCHLD {
                continue;
            }
            if let Ok(sig) = Signal::try_from(signo) {
                // The workload leads its own session and process group.
                let _ = kill(Pid::from_raw(-main.as_raw()), sig);
            }
        }
    }
    let (terminated, killed) = shutdown(&sfd, grace, main, &mut main_status);
    Ok(Outcome {
        code: main_status,
        terminated,
        killed,
    })
}

/// Wait for a stop signal (TERM, INT or HUP), reaping any child and calling `on_usr1` for each
/// SIGUSR1; returns the exit code (0).
pub fn hold(mask: &SigSet, mut on_usr1: impl FnMut()) -> Result<i32, String> {
    let sfd =
        SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC).map_err(|e| format!("signalfd: {e}"))?;
    loop {
        match sfd.read_signal() {
            Ok(Some(info)) => {
                let signo = info.ssi_signo as i32;
                if [libc::SIGTERM, libc::SIGINT, libc::SIGHUP].contains(&signo) {
                    return Ok(0);
                }
                if signo == libc::SIGUSR1 {
                    on_usr1();
                }
                while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    if status == WaitStatus::StillAlive {
                        break;
                    }
                }
            }
            Ok(None) | Err(Errno::EINTR) => {}
            Err(e) => return Err(format!("signalfd read: {e}")),
        }
    }
}
