//! cordon-probe: the static probe binary of the test image.
//!
//! `cordon-probe all [--without-init]` runs every probe (or name one probe instead of `all`) and
//! prints one JSON report per probe: `{"probe", "breaches": [{"id", "action", "evidence"}],
//! "checks", "errors", "skipped"}`; it exits 1 when any breach or error was found. The probes read
//! what they expect from the policy in the read-only control dir (and the egress probe its fixture
//! from the read-only input dir, when the gate wrote one). `--without-init` marks a run with
//! no cordon-init (the gate's container-level cases): operations only the init enforces are
//! skipped and counted.
//!
//! Other subcommands:
//! - `env-report`: what the engine gives a hardened container (Landlock ABI, seccomp, ids), as JSON;
//!   `cordon doctor` runs it.
//! - `exec-with-fd PROGRAM [ARGS..]`: exec PROGRAM with an extra inherited directory fd (the gate's
//!   fd-hygiene case: cordon-init must refuse it).
//! - `workload ...`: workloads for the init's supervision tests (see `workload.rs`).

// Every narrowing cast either checks (try_from, a named error) or says in a comment why it fits.
#![warn(clippy::cast_possible_truncation)]
// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod capacity;
mod credential;
mod egress;
mod exec;
mod hostile;
mod isolation;
mod lockdown;
mod metadata;
mod mounts;
mod network;
mod relay;
mod report;
mod workload;
mod worktree;

use std::ffi::CString;

use cordon_contract::probe::PROBES;
use cordon_contract::{paths, Policy};

use report::{Ctx, Probe};

fn usage() -> ! {
    eprintln!(
        "usage: cordon-probe all|PROBE [--without-init] | env-report | exec-with-fd PROGRAM [ARGS..] | workload KIND [ARGS..]\nprobes: {}",
        PROBES.join(" ")
    );
    std::process::exit(2);
}

fn token() -> String {
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap_or_default();
    let token: String = uuid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    if token.is_empty() {
        std::process::id().to_string()
    } else {
        token
    }
}

fn run_probe(name: &str, ctx: &Ctx) -> Option<cordon_contract::probe::ProbeReport> {
    let mut probe = Probe::new(name, ctx);
    match name {
        "lockdown" => lockdown::run(&mut probe),
        "read-only-isolation" => isolation::run(&mut probe),
        "mounts" => mounts::run(&mut probe),
        "phase-worktree" => worktree::run(&mut probe),
        "metadata" => metadata::run(&mut probe),
        "metadata-alias" => metadata::alias(&mut probe),
        "scratch-capacity" => capacity::scratch(&mut probe),
        "task-capacity" => capacity::task(&mut probe),
        "exec-policy" => exec::run(&mut probe),
        "network" => network::run(&mut probe),
        "egress" => egress::run(&mut probe),
        "credential" => credential::run(&mut probe),
        "hostile-repo" => hostile::run(&mut probe),
        _ => return None,
    }
    Some(probe.finish())
}

/// Only a privileged container has every capability in its bounding set or a writable /sys (the
/// init's test too).
fn privileged() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(63);
    let full = cordon_contract::capabilities::all_capabilities(last);
    let all_caps = cordon_contract::procfs::parse_status(&status).is_ok_and(|s| s.cap_bnd == full);
    let sys_writable = nix::sys::statvfs::statvfs("/sys")
        .is_ok_and(|v| !v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    all_caps || sys_writable
}

/// The last mount at /work is an overlay (the init laid an approved command's throwaway layer).
fn work_is_overlay() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|text| cordon_contract::procfs::parse_mountinfo(&text).ok())
        .and_then(|mounts| {
            mounts
                .into_iter()
                .rev()
                .find(|m| m.mount_point == paths::WORK)
        })
        .is_some_and(|m| m.fstype == "overlay")
}

/// Run the named probes (every probe, in catalogue order, for `all`) and print their reports.
fn probes(args: &[String]) -> i32 {
    let Some(which) = args.first() else { usage() };
    let without_init = args.iter().any(|a| a == "--without-init");
    // As the entrypoint (no init), the probe may start before the host finished the control dir.
    if without_init && !paths::wait_for_policy() {
        eprintln!("cordon-probe: {} never appeared", paths::POLICY_READY);
        return 2;
    }
    let policy = match std::fs::read(paths::POLICY_FILE)
        .map_err(|e| e.to_string())
        .and_then(|b| Policy::from_bytes(&b).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "cordon-probe: cannot read the policy at {}: {e}",
                paths::POLICY_FILE
            );
            return 2;
        }
    };
    let policy_uid = policy.uid;
    // A command that writes nothing writes /work through the init's overlay, in any phase.
    let work_writable = match policy.overlay {
        Some(_) => work_is_overlay(),
        None => policy.phase.work_writable(),
    };
    let ctx = Ctx {
        policy,
        without_init,
        token: token(),
        privileged: privileged(),
        // SAFETY: isatty takes any descriptor number (an unopened one is an error, EBADF) and
        // only reads the descriptor's state; no memory is passed.
        tty: (0..3).any(|fd| unsafe { libc::isatty(fd) } == 1),
        // SAFETY: getuid takes no arguments, cannot fail and only reads the process's credentials.
        foreign_user: unsafe { libc::getuid() } != policy_uid,
        work_writable,
    };
    let names: Vec<&str> = if which == "all" {
        PROBES.to_vec()
    } else {
        vec![which.as_str()]
    };
    let mut clean = true;
    for name in names {
        let Some(report) = run_probe(name, &ctx) else {
            usage()
        };
        clean &= report.breaches.is_empty() && report.errors.is_empty();
        match serde_json::to_string(&report) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("cordon-probe: {e}");
                return 2;
            }
        }
    }
    i32::from(!clean)
}

fn status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

fn env_report() -> i32 {
    let landlock = match cordon_contract::landlock::kernel_abi() {
        Ok(abi) => serde_json::json!(abi),
        Err(e) => serde_json::json!(e.to_string()),
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| status_field(&status, name).unwrap_or_default();
    let uname = nix::sys::utsname::uname().ok();
    let report = serde_json::json!({
        "landlock_abi": landlock,
        "seccomp": field("Seccomp"),
        "seccomp_filters": field("Seccomp_filters"),
        "no_new_privs": field("NoNewPrivs"),
        "cap_eff": field("CapEff"),
        "cap_bnd": field("CapBnd"),
        "uid": field("Uid"),
        "kernel": uname.map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default(),
    });
    println!("{report}");
    0
}

fn exec_with_fd(argv: &[String]) -> i32 {
    let Some(program) = argv.first() else { usage() };
    // An fd without O_CLOEXEC survives the exec: exactly what a leaking runtime would hand PID 1.
    // SAFETY: plain open(2) of a constant path.
    let fd = unsafe { libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    if fd < 0 {
        eprintln!("open /: {}", std::io::Error::last_os_error());
        return 1;
    }
    let args: Vec<CString> = match argv.iter().map(|a| CString::new(a.as_str())).collect() {
        Ok(args) => args,
        Err(_) => return 2,
    };
    let Ok(path) = CString::new(program.as_str()) else {
        return 2;
    };
    let e = nix::unistd::execv(&path, &args);
    eprintln!("exec {program}: {e:?}");
    1
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("env-report") => env_report(),
        Some("exec-with-fd") => exec_with_fd(&args[1..]),
        Some("workload") => workload::run(&args[1..]),
        Some(name) if name == "all" || PROBES.contains(&name) => probes(&args),
        _ => usage(),
    };
    std::process::exit(code);
}
