//! cordon-probe: the static probe binary of the test image.
//!
//! Subcommands:
//! - `env-report`: what the engine gives a hardened container (Landlock ABI, seccomp, ids), as JSON;
//!   `cordon doctor` runs it.
//! - `exec-with-fd PROGRAM [ARGS..]`: exec PROGRAM with an extra inherited directory fd (the gate's
//!   fd-hygiene case: cordon-init must refuse it).
//! - `workload ...`: workloads for the init's supervision tests (see `workload.rs`).

mod workload;

use std::ffi::CString;

fn usage() -> ! {
    eprintln!(
        "usage: cordon-probe env-report | exec-with-fd PROGRAM [ARGS..] | workload KIND [ARGS..]"
    );
    std::process::exit(2);
}

fn status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

fn env_report() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: the VERSION query takes no attribute pointer and returns an integer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    let landlock = if rc >= 0 {
        serde_json::json!(rc)
    } else {
        serde_json::json!(std::io::Error::last_os_error().to_string())
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
        _ => usage(),
    };
    std::process::exit(code);
}
