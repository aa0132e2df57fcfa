//! `exec-policy`: in every phase, exec of anything the policy does not list fails: the vendor CLI's
//! neighbours in the image, cordon-init, a copy of a binary in a writable area (directly and as an
//! mmap(PROT_EXEC)), a binary in a memfd; and no file of the work tree, the metadata, the control
//! or the input dir can be mapped executable; with an ELF interpreter on the list (the agent
//! image's), none of cordon's binaries runs through it. The listed files still run. (The test
//! image ships no ELF loader and no interpreter, so there is none to try: the image's contents
//! are the allowlist's outer bound.)

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::process::{Command, Stdio};

use cordon_contract::paths;
use cordon_contract::policy::Role;
use cordon_contract::probe::{fixture, ops};

use crate::report::{check, cpath, Probe};

/// Start `program` with its output discarded; Ok if it started (a breach), reaped before return.
fn spawn(program: &str, args: &[&str]) -> std::io::Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

/// An ELF to copy into writable areas: this binary, or where it is not readable (the agent image
/// ships cordon's binaries execute-only) the C library the vendor CLI maps.
fn own_binary() -> std::io::Result<Vec<u8>> {
    match std::fs::read("/proc/self/exe") {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            std::fs::read("/lib/x86_64-linux-gnu/libc.so.6")
        }
        other => other,
    }
}

/// The ELF loader's own failure (it could not open or map the program it was given).
const LOADER_FAILED: i32 = 127;

/// Run `program` through the ELF interpreter `interpreter` and wait: Ok (a breach) when the
/// program ran, whatever it then did; the loader failing to load it exits [`LOADER_FAILED`].
fn via_interpreter(interpreter: &str, program: &str, args: &[&str]) -> std::io::Result<()> {
    let status = Command::new(interpreter)
        .arg(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.code() == Some(LOADER_FAILED) {
        return Err(std::io::Error::other("the loader could not load it"));
    }
    Ok(())
}

/// Map the first page of `path` PROT_EXEC (what an ELF loader does to run a file): Ok is a
/// breach. The mapping is unmapped at once and never touched.
fn mmap_exec(path: &str) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    // SAFETY: a fresh private mapping of a file we opened; unmapped below, never read.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping made just above.
    unsafe { libc::munmap(addr, 4096) };
    Ok(())
}

/// The first regular file directly in `dir` (not following links), if any.
fn a_file_in(dir: &str) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// Content of every mount the repository, the agent or a caller fills: the kernel refuses to map
/// any of it executable (read-only mounts included, which the engine leaves exec-capable).
fn content_noexec(p: &mut Probe<'_>) {
    let work = format!("{}/{}", paths::WORK, fixture::WORK_FILES[0].0);
    let targets = [
        (&ops::MMAP_EXEC_WORK, Some(work)),
        (
            &ops::MMAP_EXEC_METADATA,
            Some(format!("{}/HEAD", paths::METADATA)),
        ),
        (&ops::MMAP_EXEC_CONTROL, Some(paths::POLICY_FILE.to_owned())),
        (&ops::MMAP_EXEC_INPUT, a_file_in(paths::INPUT_DIR)),
    ];
    // An approved command is given no input files.
    let command = p.ctx.policy.role == Role::Command;
    for (op, target) in targets {
        match target {
            Some(path) => {
                p.deny(op, &format!("mmap(PROT_EXEC) {path}"), || mmap_exec(&path));
            }
            None if command && op.action == ops::MMAP_EXEC_INPUT.action => {}
            None => p.error(format!("{}: no file to map", op.action)),
        }
    }
}

/// The egress proxy's binary, in both images.
const EGRESS_BINARY: &str = "/usr/bin/cordon-egress";

/// Whether a listed path is an ELF interpreter (the glibc loader's names).
fn is_interpreter(path: &str) -> bool {
    std::path::Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("ld-linux") || n.starts_with("ld.so"))
}

pub fn run(p: &mut Probe<'_>) {
    if p.ctx.policy.role == Role::Command {
        command(p);
    } else {
        agent(p);
    }
    content_noexec(p);
    memfd(p);
    listed_runs(p);
}

/// A copy of this binary written to `dir`, executable by its mode.
fn copy_into(dir: &str, token: &str) -> std::io::Result<String> {
    let copy = format!("{dir}/cordon-exec-{token}");
    let bytes = own_binary()?;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&copy)?;
    f.write_all(&bytes)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
    Ok(copy)
}

/// An approved command's container: it executes beneath its image's root and runs what it builds
/// in /tmp (the positive control), and nothing it writes to /work, whose mount is noexec (the
/// overlay, or the volume it may write): there the mount alone refuses it.
fn command(p: &mut Probe<'_>) {
    let token = p.ctx.token.clone();
    match copy_into(paths::TMP, &token) {
        Ok(copy) => {
            let ran = spawn(&copy, &["workload", "exit", "0"]);
            if let Err(e) = ran {
                p.error(format!("a command cannot run what it builds in /tmp: {e}"));
            }
            let _ = std::fs::remove_file(&copy);
        }
        Err(e) => p.error(format!("cannot copy a binary into {}: {e}", paths::TMP)),
    }
    if p.ctx.work_writable {
        runs_nothing_written_to(p, paths::WORK);
    }
}

/// A copy of this binary written to the writable `dir` neither executes nor maps executable.
fn runs_nothing_written_to(p: &mut Probe<'_>, dir: &str) {
    let token = p.ctx.token.clone();
    match copy_into(dir, &token) {
        Ok(copy) => {
            p.deny(
                &ops::EXEC_SCRATCH_COPY,
                &format!("exec a copy of a binary in {dir}"),
                || spawn(&copy, &["workload", "exit", "0"]),
            );
            p.deny(
                &ops::MMAP_EXEC_SCRATCH,
                &format!("mmap(PROT_EXEC) a file in {dir}"),
                || mmap_exec(&copy),
            );
            let _ = std::fs::remove_file(&copy);
        }
        Err(e) => p.error(format!("cannot copy a binary into {dir}: {e}")),
    }
}

/// The agent's container: only the listed files execute, and nothing it writes to its scratch.
fn agent(p: &mut Probe<'_>) {
    let listed = p.ctx.policy.landlock.exec.clone();
    for neighbour in [paths::CLAUDE_CLI, paths::CODEX_CLI] {
        if !listed.iter().any(|l| l == neighbour) {
            p.deny(
                &ops::EXEC_VENDOR_NEIGHBOUR,
                &format!("exec {neighbour} (not listed)"),
                || spawn(neighbour, &["--version"]),
            );
        }
    }
    if !listed.iter().any(|l| l == paths::INIT) {
        p.deny(
            &ops::EXEC_INIT_BINARY,
            "exec /sbin/cordon-init (not listed)",
            || spawn(paths::INIT, &["loader"]),
        );
    }

    // An ELF interpreter on the list (the agent image's, which the kernel opens for execution with
    // the CLI) runs whatever ELF it can read: none of cordon's own binaries may be one.
    for interpreter in listed.iter().filter(|l| is_interpreter(l)) {
        for (program, args) in [
            // An unknown role: it exits at once, 122, having run.
            (paths::INIT, &["cordon-probe-no-such-role"][..]),
            (paths::PROBE, &["workload", "exit", "0"][..]),
            (EGRESS_BINARY, &["--help"][..]),
        ] {
            if std::path::Path::new(program).exists() {
                p.deny(
                    &ops::EXEC_VIA_INTERPRETER,
                    &format!("run {program} through {interpreter}"),
                    || via_interpreter(interpreter, program, args),
                );
            }
        }
    }

    runs_nothing_written_to(p, paths::TMP);
}

/// Nothing runs from a memfd (the init's filter refuses its exec).
fn memfd(p: &mut Probe<'_>) {
    p.deny(&ops::EXEC_MEMFD, "exec a binary from a memfd", || {
        let name = cpath("cordon-exec");
        // SAFETY: memfd_create with a valid name and no flags.
        let fd = check(unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), 0) })?;
        // The kernel returns an int; a wider value would not be a descriptor.
        let fd = i32::try_from(fd).map_err(|_| {
            std::io::Error::other(format!("memfd_create returned {fd}, not a descriptor"))
        })?;
        let result = (|| {
            let bytes = own_binary()?;
            // SAFETY: writing our buffer to the memfd we own.
            let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
            if n != bytes.len() as isize {
                return Err(std::io::Error::other("short write to memfd"));
            }
            spawn(&format!("/proc/self/fd/{fd}"), &["workload", "exit", "0"])
        })();
        // SAFETY: closing the memfd.
        unsafe { libc::close(fd) };
        result
    });
}

/// The listed files still run (the positive control).
fn listed_runs(p: &mut Probe<'_>) {
    if let Some(first) = p.ctx.policy.landlock.exec.first() {
        let args: &[&str] = if first == paths::PROBE {
            &["workload", "exit", "0"]
        } else {
            &["--version"]
        };
        let status = Command::new(first)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            p.error(format!("the listed {first} does not run: {status:?}"));
        }
    }
}
