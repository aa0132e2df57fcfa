//! Workloads that exercise cordon-init's supervision from inside a real container.
//!
//! - `exit N`: exit with N.
//! - `signal-self SIG`: kill itself with SIG (a number).
//! - `sleep MS`: sleep, for deadline and forwarding tests.
//! - `burst N`: leave N orphans that all exit at the same moment, then count zombies until the
//!   init has reaped them all; prints `{"orphans":N,"zombies":Z}` and exits 0 only when Z is 0.
//! - `ignore-term-grandchild`: leave a grandchild that logs and ignores SIGTERM, then exit 0.
//! - `setsid-child`: leave a child in its own session that logs SIGTERM and exits, then exit 0.

use std::time::{Duration, Instant};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe, read, write, ForkResult};

/// Markers the tests look for on stdout.
pub const TERM_IGNORED: &[u8] = b"cordon-probe: grandchild ignored SIGTERM\n";
pub const SETSID_TERM: &[u8] = b"cordon-probe: setsid child got SIGTERM\n";

extern "C" fn log_and_ignore(_: libc::c_int) {
    // SAFETY: write(2) is async-signal-safe; the buffer is static.
    unsafe { libc::write(1, TERM_IGNORED.as_ptr().cast(), TERM_IGNORED.len()) };
}

extern "C" fn log_and_exit(_: libc::c_int) {
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(1, SETSID_TERM.as_ptr().cast(), SETSID_TERM.len());
        libc::_exit(0);
    }
}

fn on_term(handler: extern "C" fn(libc::c_int)) {
    let action = SigAction::new(
        SigHandler::Handler(handler),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handlers only call async-signal-safe functions.
    let _ = unsafe { sigaction(Signal::SIGTERM, &action) };
}

/// Block forever (until a signal ends the process).
fn park() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn number(args: &[String], i: usize) -> Option<u64> {
    args.get(i)?.parse().ok()
}

/// Zombies in the container: processes in state Z.
fn zombies() -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                .filter(|stat| {
                    stat.rsplit_once(')')
                        .map(|(_, rest)| rest.trim_start().starts_with('Z'))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(usize::MAX)
}

fn burst(n: u64) -> i32 {
    let Ok((r, w)) = pipe() else { return 1 };
    // SAFETY: single-threaded here; the children only read, write and _exit.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(w);
            for _ in 0..n {
                // SAFETY: as above.
                if let Ok(ForkResult::Child) = unsafe { fork() } {
                    let mut b = [0u8; 1];
                    let _ = read(&r, &mut b); // returns at EOF, when the parent closes w
                                              // SAFETY: leave without running destructors of the forked copy.
                    unsafe { libc::_exit(0) };
                }
            }
            // SAFETY: as above; the grandchildren are now orphans of PID 1.
            unsafe { libc::_exit(0) };
        }
        Ok(ForkResult::Parent { child }) => {
            drop(r);
            let _ = waitpid(child, None);
            drop(w); // every orphan sees EOF at once and exits
            let start = Instant::now();
            let mut left = zombies();
            while left > 0 && start.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(20));
                left = zombies();
            }
            println!("{{\"orphans\":{n},\"zombies\":{left}}}");
            i32::from(left != 0)
        }
        Err(_) => 1,
    }
}

/// Fork a process that runs `setup`, tells us it is ready, then parks. Returns once it is ready.
fn leave_behind(setup: impl FnOnce(), via_grandchild: bool) -> i32 {
    let Ok((r, w)) = pipe() else { return 1 };
    // SAFETY: single-threaded; the children only call async-signal-safe functions.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(r);
            if via_grandchild {
                // SAFETY: as above.
                if let Ok(ForkResult::Parent { .. }) = unsafe { fork() } {
                    // SAFETY: the middle process leaves; its child becomes an orphan of PID 1.
                    unsafe { libc::_exit(0) };
                }
            }
            setup();
            let _ = write(&w, b"r");
            drop(w);
            park();
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            let mut b = [0u8; 1];
            let ready = matches!(read(&r, &mut b), Ok(1));
            if via_grandchild {
                let _ = waitpid(child, None);
            }
            i32::from(!ready)
        }
        Err(_) => 1,
    }
}

/// Run one workload.
pub fn run(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("exit") => number(args, 1).map_or(2, |n| n as i32),
        Some("signal-self") => {
            let Some(sig) = number(args, 1).and_then(|n| Signal::try_from(n as i32).ok()) else {
                return 2;
            };
            let _ = nix::sys::signal::raise(sig);
            // A signal whose default is not to terminate gets here.
            3
        }
        Some("sleep") => {
            std::thread::sleep(Duration::from_millis(number(args, 1).unwrap_or(0)));
            0
        }
        Some("burst") => burst(number(args, 1).unwrap_or(1000)),
        Some("ignore-term-grandchild") => leave_behind(|| on_term(log_and_ignore), true),
        Some("setsid-child") => leave_behind(
            || {
                let _ = nix::unistd::setsid();
                on_term(log_and_exit);
            },
            false,
        ),
        _ => 2,
    }
}
