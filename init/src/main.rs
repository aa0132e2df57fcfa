//! cordon-init: PID 1 of every cordon agent container.
//!
//! observe (read /proc, statfs, the environment) -> judge (a pure function from the policy and the
//! observations to ordered verdicts) -> act (Landlock, seccomp, the egress forwarder when the
//! policy has one, then supervise the workload). Every refusal is one JSON line on stderr and exit
//! code 120; see `cordon_contract::report`.
//!
//! Roles (argv[1]): none is the agent role. `keeper` holds task storage mounted (a tmpfs volume
//! lives only while some container mounts it) until it is told to stop, and prints the digest of
//! the metadata it holds on SIGUSR1. `relay [SOCKET]` listens on the approved commands' socket
//! and bridges each call to the host over its own stdio. `digest DIR` prints the
//! digest of a tree read without following links (the seeder's metadata baseline). `self-test-panic` is the
//! agent role with a panic once the workload runs, so tests can prove that a panicking init takes
//! the container down.

// Every narrowing cast either checks (try_from, a named error) or says in a comment why it fits.
#![warn(clippy::cast_possible_truncation)]
// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod forward;
mod judge;
mod landlock;
mod nonblocking;
mod observe;
mod overlay;
mod privileges;
mod relay;
mod seccomp;
mod supervise;
mod tree;

use std::io::{Read, Write};
use std::time::Instant;

use cordon_contract::procfs::{MountEntry, Status};
use cordon_contract::report::{EXIT_DEADLINE, EXIT_INIT_FAILURE, EXIT_REFUSED};
use cordon_contract::{paths, policy, Id, InitLine, Policy, Refusal};

/// Write one line to stderr in a single write.
pub fn emit(line: &InitLine) {
    let mut text = line.to_line();
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn refuse(check: Id, expected: impl Into<String>, observed: impl Into<String>) -> ! {
    refuse_with(Refusal::new(check, expected, observed))
}

fn refuse_with(refusal: Refusal) -> ! {
    emit(&InitLine::Refusal(refusal));
    std::process::exit(EXIT_REFUSED);
}

fn fail(reason: impl Into<String>) -> ! {
    emit(&InitLine::Failure {
        reason: reason.into(),
    });
    std::process::exit(EXIT_INIT_FAILURE);
}

/// Read the policy from the read-only control dir, bounded.
fn read_policy() -> (Policy, String) {
    let expected = format!("a valid policy at {}", paths::POLICY_FILE);
    let file = std::fs::File::open(paths::POLICY_FILE)
        .unwrap_or_else(|e| refuse(Id::Policy, expected.clone(), e.to_string()));
    let mut bytes = Vec::new();
    if let Err(e) = file
        .take(policy::MAX_POLICY_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
    {
        refuse(Id::Policy, expected, e.to_string());
    }
    match Policy::from_bytes(&bytes) {
        Ok(p) => {
            let digest = policy::digest(&bytes);
            (p, digest)
        }
        Err(e) => refuse(Id::Policy, expected, e.to_string()),
    }
}

fn close_inherited_fds() {
    // SAFETY: close_range only closes descriptors; the preflight showed none but 0-2 are open.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if rc != 0 {
        fail(format!("close_range: {}", std::io::Error::last_os_error()));
    }
}

fn no_core_dumps() {
    // Lowering a limit cannot be refused; if it were, the init would not run on.
    if let Err(e) = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0) {
        fail(format!("setrlimit(RLIMIT_CORE, 0): {e}"));
    }
}

fn agent(mask: &nix::sys::signal::SigSet, panic_after_start: bool) -> ! {
    // Before the init opens anything of its own.
    let inherited = observe::extra_fds();
    // What needs no policy is read while the host is still uploading it, off the launch's
    // critical path: nothing else runs in this container to change it meanwhile, the mount
    // table read here only chooses what to remount, and the judge reads it again afterwards.
    let kernel = observe::Kernel::open();
    let start = observe::status(&kernel);
    let mounts = observe::mountinfo(&kernel);
    let last_cap = observe::cap_last_cap(&kernel);
    let digest_work = mounts.as_deref().is_ok_and(observe::work_read_only);
    let (
        Arrived {
            policy,
            digest,
            started,
        },
        work_digest,
    ) = wait_and_read_policy(digest_work);

    let acted = act_as_root(&policy, inherited, start, mounts, last_cap);
    let observations = observe::gather(&kernel, &policy, acted, work_digest);
    let mut checks = match judge::preflight(&policy, &observations) {
        Ok(passed) => passed,
        Err(refusal) => refuse_with(refusal),
    };
    drop(kernel);
    close_inherited_fds();
    no_core_dumps();

    let before = observations
        .status
        .as_ref()
        .map(|s| s.seccomp_filters)
        .unwrap_or(0);
    let (abi, pinned) = restrict(&policy, before, &mut checks);

    // The forwarder listens before the workload exists (it can use HTTPS_PROXY at once and can
    // never squat the port), and only now: every thread it starts inherits, at clone(2), the
    // Landlock domain restrict_self gave this thread alone and the filters the TSYNC install
    // gave it, and the canaries above ran before any other thread existed. Without it the
    // workload never starts.
    let forwarder = policy.egress.as_ref().map(|egress| {
        forward::start(forward::Config::new(egress))
            .unwrap_or_else(|e| fail(format!("egress forwarder: {e}")))
    });

    emit(&InitLine::Attestation {
        policy_digest: digest,
        checks,
        skipped: policy.skip.clone(),
        landlock_abi: abi,
        // Saturates: u64 microseconds last 584,000 years.
        preflight_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        // Listening already: the workload can use its proxy at once.
        egress_forward: forwarder.as_ref().map(|f| f.local.port()),
        pins: pinned,
    });
    supervise_workload(&policy, mask, panic_after_start)
}

/// The policy as it arrived.
struct Arrived {
    policy: Policy,
    /// The policy file's digest.
    digest: String,
    /// When the preflight's time starts: the moment the policy was there.
    started: Instant,
}

/// How often a walk of /work taken while the policy is uploaded looks for it.
const READY_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// Wait for the host to mark the control dir ready, then read the policy; with `digest_work`,
/// the digest of /work taken meanwhile too.
///
/// A shared snapshot's /work is checked against its recorded digest before every use: reading
/// it is most of a warm invocation's preflight, and the host's upload of the policy is time this
/// container only waits. So a read-only /work is walked while it waits: the same walk the check
/// would make after the privilege drop, over a tree no container can write. Before the drop
/// the init is uid 0 without CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH, so it reads the
/// snapshot's files (owned by the snapshot's uid) by the same mode bits as the workload. Once
/// the policy is there the walk goes on only if the policy asks for the digest; a walk that
/// stopped or failed leaves the check to read /work afresh (`observe::gather`).
fn wait_and_read_policy(digest_work: bool) -> (Arrived, Option<String>) {
    let mut arrived = None;
    let mut looked = Instant::now();
    let mut taken = None;
    if digest_work {
        let walked = observe::work_digest_while(|| {
            if arrived.is_none() && looked.elapsed() >= READY_POLL {
                looked = Instant::now();
                if paths::policy_ready() {
                    arrived = Some(read_arrived());
                }
            }
            arrived
                .as_ref()
                .is_none_or(|a: &Arrived| a.policy.work_digest.is_some())
        });
        taken = walked.ok().flatten();
    }
    let arrived = arrived.unwrap_or_else(wait_and_read_arrived);
    (arrived, taken)
}

/// Wait for the host to mark the control dir ready, then read the policy.
fn wait_and_read_arrived() -> Arrived {
    if !paths::wait_for_policy() {
        refuse(
            Id::Policy,
            format!(
                "{} within {} ms",
                paths::POLICY_READY,
                paths::POLICY_WAIT_MS
            ),
            "the control dir was never marked ready",
        );
    }
    read_arrived()
}

/// Read the policy the ready marker says is there.
fn read_arrived() -> Arrived {
    let started = Instant::now();
    let (policy, digest) = read_policy();
    Arrived {
        policy,
        digest,
        started,
    }
}

/// Whether the init enforces `id`. The gate's probe layer may tell the init to leave one
/// protection out, to show the probes see exactly that; the attestation names it, a profile
/// never asks for it, and the host trusts no attestation that skipped anything.
fn enforced(policy: &Policy, id: Id) -> bool {
    !policy.skip.contains(&id)
}

/// As uid 0 with the start capabilities: only steps that take privilege away (remount, drop
/// every capability and switch ids, seal), and, for an approved command that writes nothing to
/// the volume, the throwaway overlay its policy lays on /work while the capabilities to mount it
/// are still held. Each reports instead of stopping, so the judge refuses in its own order.
fn act_as_root(
    policy: &Policy,
    inherited: Vec<String>,
    start: Result<Status, String>,
    mounts: Result<Vec<MountEntry>, String>,
    last_cap: Result<u32, String>,
) -> observe::Acted {
    let remount = if enforced(policy, Id::ContentNoexec) {
        match mounts {
            Ok(mounts) => privileges::remount(policy, &mounts),
            Err(e) => vec![e],
        }
    } else {
        Vec::new()
    };
    // After the remount (the volume it lays over has its flags back) and before the drop.
    let overlay = policy
        .overlay
        .as_ref()
        .map(|o| overlay::lay(o, policy.uid, policy.gid))
        .unwrap_or_default();
    let dropped = last_cap
        .and_then(|last| privileges::drop_all(policy, last, enforced(policy, Id::NonRootUser)));
    let sealed = privileges::seal(policy);
    observe::Acted {
        inherited,
        start,
        remount,
        overlay,
        dropped,
        sealed,
    }
}

/// Restrict the init, and so the workload it will start: Landlock (and the pins its ruleset
/// holds), then cordon's seccomp filters stacked on the `filters_before` already there. Adds to
/// `checks` what now holds; the Landlock ABI enforced and the pins.
fn restrict(policy: &Policy, filters_before: u32, checks: &mut Vec<Id>) -> (u8, Vec<String>) {
    let cover = landlock::Cover {
        filesystem: enforced(policy, Id::Landlock),
        execute: enforced(policy, Id::ExecAllowlist),
    };
    let abi = landlock::enforce(&policy.landlock, cover).unwrap_or_else(|e| {
        refuse(
            Id::Landlock,
            format!("Landlock ABI {} FullyEnforced", policy.landlock.abi),
            e,
        )
    });
    if enforced(policy, Id::Landlock) {
        checks.push(Id::Landlock);
    }
    // The pins hold from here: the ruleset just enforced grants no REMOVE_DIR on their parents.
    let pinned = if enforced(policy, Id::PinnedDirs) && cover.filesystem {
        policy.landlock.pins.clone()
    } else {
        Vec::new()
    };
    if !pinned.is_empty() && !checks.contains(&Id::PinnedDirs) {
        checks.push(Id::PinnedDirs);
    }
    install_seccomp(policy, filters_before);
    if enforced(policy, Id::SeccompStacked) && !checks.contains(&Id::SeccompStacked) {
        checks.push(Id::SeccompStacked);
    }
    (abi, pinned)
}

/// Start and supervise the workload, report how it ended, and exit with its code (the
/// deadline's when it had none).
fn supervise_workload(
    policy: &Policy,
    mask: &nix::sys::signal::SigSet,
    panic_after_start: bool,
) -> ! {
    let fault = || {
        if panic_after_start {
            panic!("self-test: init panic while supervising");
        }
    };
    let outcome = supervise::run(policy, mask, fault).unwrap_or_else(|e| fail(e));
    let code = outcome.code.unwrap_or(EXIT_DEADLINE);
    emit(&InitLine::Exit {
        code,
        terminated: outcome.terminated,
        killed: outcome.killed,
    });
    std::process::exit(code);
}

/// Stack cordon's filters, prove the kernel took each, and prove each answers its canaries.
fn install_seccomp(policy: &Policy, filters_before: u32) {
    let installed = match seccomp::install(policy) {
        Ok(n) => n,
        Err((id, e)) => refuse(id, "cordon's seccomp filters installed", e),
    };
    let filters_after = observe::status(&observe::Kernel::none())
        .map(|s| s.seccomp_filters)
        .unwrap_or(0);
    if filters_after < filters_before + installed {
        refuse(
            Id::SeccompStacked,
            format!("Seccomp_filters {}", filters_before + installed),
            format!("Seccomp_filters {filters_after}"),
        );
    }
    if let Err((id, e)) = seccomp::verify(policy) {
        refuse(id, "every canary refused by its own filter", e);
    }
}

/// Hold the mounts until TERM, INT or HUP; reap anything (nothing should run here).
fn keeper(mask: &nix::sys::signal::SigSet) -> ! {
    if std::process::id() != 1 {
        refuse(
            Id::InitEntrypoint,
            "pid 1",
            format!("pid {}", std::process::id()),
        );
    }
    close_inherited_fds();
    emit(&InitLine::Ready {
        role: "keeper".into(),
    });
    // SIGUSR1 asks for the digest of the metadata it holds (the seeder's baseline, taken here so
    // that no second container has to start for it), or of all of /work when it holds a shared
    // snapshot (`keeper /work`: the digest every init over the snapshot checks).
    let root = match std::env::args().nth(2).as_deref() {
        None => paths::METADATA,
        Some(paths::WORK) => paths::WORK,
        Some(other) => fail(format!(
            "a keeper digests {} or {}, not {other:?}",
            paths::METADATA,
            paths::WORK
        )),
    };
    let code = supervise::hold(mask, || {
        match tree::digest::tree(std::path::Path::new(root)) {
            Ok((digest, entries)) => emit(&InitLine::Digest { digest, entries }),
            Err(reason) => emit(&InitLine::Failure {
                reason: format!("digest: {reason}"),
            }),
        }
    })
    .unwrap_or_else(|e| fail(e));
    std::process::exit(code);
}

fn main() {
    // A panic anywhere takes the container down: PID 1 exiting kills every process in it.
    std::panic::set_hook(Box::new(|info| {
        emit(&InitLine::Failure {
            reason: format!("panic: {info}"),
        });
        // SAFETY: _exit ends the process at once, without running anything else.
        unsafe { libc::_exit(EXIT_INIT_FAILURE) }
    }));
    let mask = supervise::block_signals().unwrap_or_else(|e| fail(e));
    match std::env::args().nth(1).as_deref() {
        None => agent(&mask, false),
        Some("self-test-panic") => agent(&mask, true),
        Some("keeper") => keeper(&mask),
        Some("relay") => relay::main(&mask),
        Some("digest") => {
            let root = std::env::args()
                .nth(2)
                .unwrap_or_else(|| fail("digest needs a directory"));
            match tree::digest::tree(std::path::Path::new(&root)) {
                Ok((digest, entries)) => {
                    emit(&InitLine::Digest { digest, entries });
                    std::process::exit(0);
                }
                Err(e) => fail(format!("digest of {root}: {e}")),
            }
        }
        Some("tree") => tree::main(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some(other) => fail(format!("unknown role {other:?}")),
    }
}
