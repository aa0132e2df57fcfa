//! Fixed paths and identities inside every cordon container.

/// The agent's numeric uid and gid (no NSS in the image: numbers only).
pub const AGENT_UID: u32 = 10001;
/// See [`AGENT_UID`].
pub const AGENT_GID: u32 = 10001;
/// The container hostname every profile sets (the init checks it to detect a host UTS namespace).
pub const HOSTNAME: &str = "cordon";

/// The work tree (a bounded tmpfs volume).
pub const WORK: &str = "/work";
/// Git metadata (its own volume, always read-only).
pub const METADATA: &str = "/work/.git";
/// Scratch.
pub const TMP: &str = "/tmp";
/// The agent's HOME (bounded tmpfs).
pub const HOME: &str = "/home/agent";
/// CODEX_HOME for a Codex profile (bounded tmpfs).
pub const CODEX_HOME: &str = "/home/agent/.codex";
/// Where the agent writes its answer (bounded tmpfs).
pub const OUTPUT_DIR: &str = "/run/cordon/output";
/// The read-only control dir that carries the policy.
pub const CONTROL_DIR: &str = "/run/cordon/control";
/// The policy file inside the control dir.
pub const POLICY_FILE: &str = "/run/cordon/control/policy.json";
/// Written into the control dir after the policy and the input files: the container starts
/// before they are written (the loader's mounts of the same volumes take the upload), and its
/// init reads nothing of them before this exists.
pub const POLICY_READY: &str = "/run/cordon/control/ready";
/// How long the init waits for [`POLICY_READY`] before it refuses.
pub const POLICY_WAIT_MS: u64 = 30_000;

/// Wait until [`POLICY_READY`] exists (polling; nothing is opened), at most [`POLICY_WAIT_MS`].
/// Returns whether it appeared.
pub fn wait_for_policy() -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(POLICY_WAIT_MS);
    loop {
        if policy_ready() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether [`POLICY_READY`] exists (nothing is opened).
pub fn policy_ready() -> bool {
    std::fs::symlink_metadata(POLICY_READY).is_ok()
}

/// The read-only input dir (prompt, schema).
pub const INPUT_DIR: &str = "/run/cordon/input";
/// The read-only dir holding the egress proxy's unix socket.
pub const EGRESS_DIR: &str = "/run/cordon/egress";
/// The approved commands' socket dir (the relay's), in an agent offered commands.
pub const COMMANDS_DIR: &str = "/run/cordon/commands";
/// The agent's own directories no approved command's container may have: the relay's socket
/// (a command there could make calls of its own) and the egress proxy's (a way off the machine).
pub const AGENT_ONLY_DIRS: [&str; 2] = [COMMANDS_DIR, EGRESS_DIR];
/// An approved command's overlay area (`writes: none`): the upper and work directories of the
/// throwaway layer its init lays over /work.
pub const OVERLAY_AREA: &str = "/run/cordon/overlay";

/// cordon-init in every cordon image.
pub const INIT: &str = "/sbin/cordon-init";
/// cordon-probe in the test image.
pub const PROBE: &str = "/usr/bin/cordon-probe";
/// The Claude CLI (the fake one in the test image).
pub const CLAUDE_CLI: &str = "/usr/bin/claude";
/// The Codex CLI path (never run: Codex is refused).
pub const CODEX_CLI: &str = "/usr/bin/codex";

/// What /dev holds in a hardened runc container (no TTY, IpcMode none).
pub const STANDARD_DEV: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "mqueue", "fd", "stdin",
    "stdout", "stderr", "core",
];

/// How many links the kernel follows resolving one path (MAXSYMLINKS): a path that needs more
/// never resolves (ELOOP), so it reaches nothing. The host's tree rules and the hostile-repo probe
/// resolve links each in their own way, both with this bound.
pub const MAX_LINK_HOPS: usize = 40;
