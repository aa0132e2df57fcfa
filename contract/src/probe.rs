//! What cordon-probe reports, and the catalogue of its operations.
//!
//! Every forbidden action a probe tries is an operation: a probe name, an action name, and the
//! protection ids a success breaches. The gate requires every operation to be reached (made to
//! report its breach) by some case, so removing any one deny check from a probe turns the gate red.

use serde::{Deserialize, Serialize};

use crate::catalogue::Id;

/// One forbidden action that succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Breach {
    pub id: Id,
    pub action: String,
    /// What happened, never the data the action could reach.
    pub evidence: String,
}

/// One probe's report: one JSON line on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeReport {
    pub probe: String,
    pub breaches: Vec<Breach>,
    /// Deny checks made.
    pub checks: u32,
    /// Positive checks that failed (a fill that wrote nothing, a listed file that would not run):
    /// the probe could not prove anything, which the gate treats as a failure.
    #[serde(default)]
    pub errors: Vec<String>,
    /// Operations not tried because the init that enforces them is absent in this run.
    #[serde(default)]
    pub skipped: u32,
}

impl ProbeReport {
    /// Parse every report line in a container's stdout.
    pub fn parse_all(stdout: &str) -> Vec<ProbeReport> {
        stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l.trim()).ok())
            .collect()
    }
}

/// A probe operation: the catalogue entry every deny check names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    pub probe: &'static str,
    pub action: &'static str,
    /// The protections a success can breach: the first, or `not-privileged` when the container
    /// is privileged (which by itself grants every capability and device and turns seccomp off;
    /// the probe names the cause, as the init does), or for capability sets the class the init
    /// would give them.
    pub ids: &'static [Id],
}

impl Operation {
    /// The breach id when only one is possible.
    pub const fn id(&self) -> Id {
        self.ids[0]
    }

    /// Whether only cordon-init enforces this (its probes run only under the init).
    pub const fn init_only(&self) -> bool {
        self.ids[0].layers().init_only()
    }
}

macro_rules! operations {
    ($( $name:ident = $probe:literal / $action:literal => [$($id:ident),+]; )*) => {
        $( pub const $name: Operation = Operation { probe: $probe, action: $action, ids: &[$(Id::$id),+] }; )*
        /// The operations named here (the canaries' come from the syscall tables: see [`all`]).
        pub const NAMED: &[Operation] = &[$($name),*];
    };
}

/// The operations, by probe.
pub mod ops {
    use super::{Id, Operation};
    use crate::seccomp;

    /// One operation per canary of cordon-init's filters: `lockdown/<action>` for the deny and
    /// sealing filters (the protection of the rule it meets), `network/<action>` for the family
    /// filter.
    pub fn canaries() -> Vec<(Operation, seccomp::Canary)> {
        let rules: Vec<seccomp::Rule> = seccomp::DENIED
            .iter()
            .chain(seccomp::SEALED)
            .chain(seccomp::CLONE3)
            .copied()
            .collect();
        let mut out = Vec::new();
        for canary in seccomp::CANARIES {
            let sealed = rules
                .iter()
                .any(|r| r.protection == Id::InitSealed && r.refuses(canary.nr, &canary.args));
            let ids: &'static [Id] = if sealed {
                &[Id::InitSealed]
            } else {
                &[Id::SeccompStacked]
            };
            out.push((
                Operation {
                    probe: "lockdown",
                    action: canary.action,
                    ids,
                },
                *canary,
            ));
        }
        for canary in seccomp::FAMILY_CANARIES {
            out.push((
                Operation {
                    probe: "network",
                    action: canary.action,
                    ids: &[Id::SocketFamilies],
                },
                *canary,
            ));
        }
        out
    }

    /// Every operation: the named ones, then one per canary.
    pub fn all() -> Vec<Operation> {
        NAMED
            .iter()
            .copied()
            .chain(canaries().into_iter().map(|(op, _)| op))
            .collect()
    }

    operations! {
        IDENTITY = "lockdown" / "identity" => [NonRootUser];
        CAPABILITY_SETS = "lockdown" / "capability-sets" => [CapsDropped, CapAdded, NotPrivileged];
        NO_NEW_PRIVS = "lockdown" / "no-new-privs" => [NoNewPrivileges];
        SECCOMP_MODE = "lockdown" / "seccomp-mode" => [SeccompDefault, NotPrivileged];
        // The engine's own profile (any filter's refusal counts): without the init, only it.
        ENGINE_PROCESS_VM_READV = "lockdown" / "engine-process-vm-readv" => [SeccompDefault, NotPrivileged];
        ENGINE_PROCESS_VM_WRITEV = "lockdown" / "engine-process-vm-writev" => [SeccompDefault, NotPrivileged];
        ENGINE_KEYCTL = "lockdown" / "engine-keyctl" => [SeccompDefault, NotPrivileged];
        ENGINE_BPF = "lockdown" / "engine-bpf" => [SeccompDefault, NotPrivileged];
        ENGINE_UNSHARE_USER = "lockdown" / "engine-unshare-user" => [SeccompDefault, NotPrivileged];
        ENGINE_MOUNT = "lockdown" / "engine-mount" => [SeccompDefault, NotPrivileged];
        PROC1_ENVIRON = "lockdown" / "proc1-environ" => [InitSealed];
        PROC1_MEM = "lockdown" / "proc1-mem" => [InitSealed];
        DEV_SHM = "lockdown" / "dev-shm" => [IpcNone];
        STDIN = "lockdown" / "stdin" => [StdinClosed];
        TTY = "lockdown" / "tty" => [NoTty];
        PID_NAMESPACE = "lockdown" / "pid-namespace" => [HostNamespaces];
        CGROUP_NAMESPACE = "lockdown" / "cgroup-namespace" => [HostNamespaces];
        UTS_NAMESPACE = "lockdown" / "uts-namespace" => [HostNamespaces];
        ENVIRONMENT = "lockdown" / "environment" => [EnvAllowlist];
        FORK_FLOOD = "lockdown" / "fork-flood" => [PidsLimit];

        ROOTFS_STATFS = "read-only-isolation" / "rootfs-statfs" => [RootfsReadonly];
        ROOTFS_CREATE = "read-only-isolation" / "rootfs-create" => [RootfsReadonly];
        IMAGE_BINARIES_WRITE = "read-only-isolation" / "image-binaries-write" => [RootfsReadonly];
        PROC_SYS = "read-only-isolation" / "proc-sys-readonly" => [NotPrivileged];
        SYS = "read-only-isolation" / "sys-readonly" => [NotPrivileged];
        CGROUPFS = "read-only-isolation" / "cgroupfs-readonly" => [NotPrivileged];
        MASKED_PATHS = "read-only-isolation" / "masked-paths" => [NotPrivileged];
        HOST_INFO = "read-only-isolation" / "host-info" => [HostInfoMasked];
        MQUEUE_CREATE = "read-only-isolation" / "mqueue-create" => [Landlock];
        PROC_COMM_WRITE = "read-only-isolation" / "proc-comm-write" => [Landlock];
        PTMX_OPEN = "read-only-isolation" / "ptmx-open" => [Landlock];

        MOUNT_SET = "mounts" / "mountpoint-set" => [NoHostMounts];
        MOUNT_MISSING = "mounts" / "mount-missing" => [MetadataReadonly, GitlinkMasks];
        DEVICES = "mounts" / "devices" => [NoHostMounts, NotPrivileged];
        DAEMON_SOCKET = "mounts" / "daemon-socket" => [NoDockerSocket];
        WRITABLE_FLAGS = "mounts" / "writable-flags" => [WritableNosuidNodevNoexec];
        CONTENT_FLAGS = "mounts" / "content-flags" => [ContentNoexec];
        HOST_PATHS = "mounts" / "host-paths" => [NoHostMounts];
        // An approved command's container: the relay's socket (calls of its own) or the proxy's.
        COMMAND_RELAY = "mounts" / "command-relay" => [CommandIsolated];
        COMMAND_EGRESS = "mounts" / "command-egress" => [CommandIsolated];

        WORK_CREATE = "phase-worktree" / "create" => [WorkReadonly];
        WORK_APPEND = "phase-worktree" / "append" => [WorkReadonly];
        WORK_TRUNCATE = "phase-worktree" / "truncate" => [WorkReadonly];
        WORK_CHMOD = "phase-worktree" / "chmod" => [WorkReadonly];
        WORK_RENAME = "phase-worktree" / "rename" => [WorkReadonly];
        WORK_UNLINK = "phase-worktree" / "unlink" => [WorkReadonly];
        WORK_MKDIR = "phase-worktree" / "mkdir" => [WorkReadonly];
        WORK_RMDIR = "phase-worktree" / "rmdir" => [WorkReadonly];
        WORK_SYMLINK = "phase-worktree" / "symlink" => [WorkReadonly];
        WORK_HARDLINK = "phase-worktree" / "hardlink" => [WorkReadonly];
        GITLINK_WRITE = "phase-worktree" / "gitlink-write" => [GitlinkMasks];
        GITLINK_MKDIR = "phase-worktree" / "gitlink-mkdir" => [GitlinkMasks];
        GITLINK_RMDIR = "phase-worktree" / "gitlink-rmdir" => [GitlinkMasks];
        GITLINK_RENAME = "phase-worktree" / "gitlink-rename" => [GitlinkMasks];
        // The directories above a nested gitlink (`tree::pins_of` its masks): a rename or an
        // exchange would carry the mask away. A mask found out of place afterwards is `pin-rename`.
        PIN_RENAME = "phase-worktree" / "pin-rename" => [PinnedDirs];
        PIN_EXCHANGE = "phase-worktree" / "pin-exchange" => [PinnedDirs];

        METADATA_CREATE = "metadata" / "create" => [MetadataReadonly];
        METADATA_APPEND = "metadata" / "append" => [MetadataReadonly];
        METADATA_MKDIR = "metadata" / "mkdir" => [MetadataReadonly];
        METADATA_REMOVE = "metadata" / "rm-rf" => [MetadataReadonly];
        METADATA_MOVE = "metadata" / "mv" => [MetadataReadonly];
        METADATA_DIGEST = "metadata" / "digest" => [MetadataReadonly];

        ALIAS_HARDLINK_CONFIG = "metadata-alias" / "hardlink-config" => [MetadataReadonly];
        ALIAS_HARDLINK_OBJECT = "metadata-alias" / "hardlink-object" => [MetadataReadonly];
        ALIAS_APPEND_CONFIG = "metadata-alias" / "symlink-append-config" => [MetadataReadonly];
        ALIAS_APPEND_OBJECT = "metadata-alias" / "symlink-append-object" => [MetadataReadonly];
        ALIAS_OVERWRITE_CONFIG = "metadata-alias" / "overwrite-config" => [MetadataReadonly];
        ALIAS_TRUNCATE_CONFIG = "metadata-alias" / "truncate-config" => [MetadataReadonly];

        TMP_BYTES = "scratch-capacity" / "tmp-fill-bytes" => [TmpBytes];
        TMP_INODES = "scratch-capacity" / "tmp-fill-inodes" => [TmpInodes];
        HOME_BYTES = "scratch-capacity" / "home-fill-bytes" => [HomeBytes];
        HOME_INODES = "scratch-capacity" / "home-fill-inodes" => [HomeInodes];
        OUTPUT_BYTES = "scratch-capacity" / "output-fill-bytes" => [OutputBytes];
        OUTPUT_INODES = "scratch-capacity" / "output-fill-inodes" => [OutputInodes];
        CODEX_HOME_BYTES = "scratch-capacity" / "codex-home-fill-bytes" => [CodexHomeBytes];
        CODEX_HOME_INODES = "scratch-capacity" / "codex-home-fill-inodes" => [CodexHomeInodes];
        CONTROL_WRITE = "scratch-capacity" / "control-write" => [ControlReadonly];
        INPUT_WRITE = "scratch-capacity" / "input-write" => [InputReadonly];
        EGRESS_WRITE = "scratch-capacity" / "egress-write" => [EgressReadonly];
        COMMANDS_WRITE = "scratch-capacity" / "commands-write" => [CommandsReadonly];

        WORK_BYTES = "task-capacity" / "work-fill-bytes" => [WorkBytes];
        WORK_INODES = "task-capacity" / "work-fill-inodes" => [WorkInodes];

        EXEC_VENDOR_NEIGHBOUR = "exec-policy" / "exec-vendor-neighbour" => [ExecAllowlist];
        EXEC_INIT_BINARY = "exec-policy" / "exec-init-binary" => [ExecAllowlist];
        EXEC_VIA_INTERPRETER = "exec-policy" / "exec-via-interpreter" => [ExecAllowlist];
        EXEC_SCRATCH_COPY = "exec-policy" / "exec-scratch-copy" => [WritableNosuidNodevNoexec];
        MMAP_EXEC_SCRATCH = "exec-policy" / "mmap-exec-scratch" => [WritableNosuidNodevNoexec];
        EXEC_MEMFD = "exec-policy" / "exec-memfd" => [SeccompStacked];
        MMAP_EXEC_WORK = "exec-policy" / "mmap-exec-work" => [ContentNoexec];
        MMAP_EXEC_METADATA = "exec-policy" / "mmap-exec-metadata" => [ContentNoexec];
        MMAP_EXEC_CONTROL = "exec-policy" / "mmap-exec-control" => [ContentNoexec];
        MMAP_EXEC_INPUT = "exec-policy" / "mmap-exec-input" => [ContentNoexec];

        INTERFACES = "network" / "interfaces" => [NetworkNone];
        ROUTE = "network" / "route" => [NetworkNone];
        CONNECT_PUBLIC = "network" / "connect-public" => [NetworkNone];
        CONNECT_PRIVATE = "network" / "connect-private" => [NetworkNone];
        RESOLVER = "network" / "resolver" => [NetworkNone];
        DNS_ANSWER = "network" / "dns-answer" => [NoResolver];

        EGRESS_DIRECT_GATEWAY = "egress" / "direct-gateway" => [NetworkNone];
        EGRESS_DIRECT_PROXY = "egress" / "direct-proxy" => [NetworkNone];
        EGRESS_DIRECT_ENDPOINT = "egress" / "direct-endpoint" => [NetworkNone];
        EGRESS_UDP_GATEWAY = "egress" / "udp-gateway" => [NetworkNone];
        EGRESS_UNLISTED = "egress" / "connect-unlisted" => [EgressAllowlist];
        EGRESS_OTHER_PORT = "egress" / "connect-other-port" => [EgressAllowlist];
        EGRESS_DENIED_ANSWER = "egress" / "connect-private-answer" => [EgressAddress];
        EGRESS_PLAIN_GET = "egress" / "plain-get" => [EgressMethod];
        EGRESS_OTHER_SNI = "egress" / "other-sni" => [EgressSni];
        EGRESS_NO_TLS = "egress" / "no-tls" => [EgressSni];
        EGRESS_CNAME_CHASE = "egress" / "connect-cname-chase" => [EgressCname];
        VENDOR_UNTERMINATED = "egress" / "vendor-unterminated" => [VendorTerminated];
        VENDOR_OTHER_PATH = "egress" / "vendor-other-path" => [VendorPath];
        VENDOR_OTHER_QUERY = "egress" / "vendor-other-query" => [VendorPath];
        VENDOR_OTHER_HOST = "egress" / "vendor-other-host" => [VendorPath];
        VENDOR_FOREIGN_CREDENTIAL = "egress" / "vendor-foreign-credential" => [VendorCredential];
        VENDOR_SECOND_CREDENTIAL = "egress" / "vendor-second-credential" => [VendorCredential];
        VENDOR_SENTINEL_ELSEWHERE = "egress" / "vendor-sentinel-elsewhere" => [VendorCredential];
        VENDOR_NO_CREDENTIAL = "egress" / "vendor-no-credential" => [VendorCredential];
        VENDOR_OVER_BUDGET = "egress" / "vendor-over-budget" => [VendorBudget];
        SENTINEL_ELSEWHERE = "egress" / "sentinel-elsewhere" => [CredentialHostBound];

        CREDENTIAL_READABLE = "credential" / "credential-readable" => [CredentialAbsent];

        LINK_ESCAPE = "hostile-repo" / "link-escape" => [RepoLinks];
    }
}

/// The probes, in the order `all` runs them.
pub const PROBES: &[&str] = &[
    "lockdown",
    "read-only-isolation",
    "mounts",
    "phase-worktree",
    // The alias probe first: `metadata` removes and moves what it can when the protection is gone.
    "metadata-alias",
    "metadata",
    "scratch-capacity",
    "task-capacity",
    "exec-policy",
    "network",
    "egress",
    "credential",
    "hostile-repo",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_unique_and_belong_to_a_probe() {
        let mut seen = std::collections::BTreeSet::new();
        for op in ops::all() {
            assert!(
                seen.insert((op.probe, op.action)),
                "{}/{} twice",
                op.probe,
                op.action
            );
            assert!(PROBES.contains(&op.probe), "{}", op.probe);
            for id in op.ids {
                assert!(id.layers().probe, "{} is not a probe-layer protection", id);
            }
        }
    }

    #[test]
    fn every_probe_layer_protection_has_an_operation() {
        for id in Id::ALL.iter().filter(|id| id.layers().probe) {
            assert!(
                ops::all().iter().any(|op| op.ids.contains(id)),
                "{id} has no probe operation"
            );
        }
    }

    #[test]
    fn reports_round_trip() {
        let report = ProbeReport {
            probe: "lockdown".into(),
            breaches: vec![Breach {
                id: Id::NoTty,
                action: "tty".into(),
                evidence: "fd 0 is a terminal".into(),
            }],
            checks: 3,
            errors: vec![],
            skipped: 0,
        };
        let line = serde_json::to_string(&report).unwrap();
        assert_eq!(
            ProbeReport::parse_all(&format!("noise\n{line}\n")),
            vec![report]
        );
    }
}

/// The fixture the gate seeds into task storage for the probes (relative to /work): files and
/// directories the phase and metadata probes try to change, and links the hostile-repo probe
/// resolves.
pub mod fixture {
    /// Files (path, content) in the work tree.
    pub const WORK_FILES: &[(&str, &str)] = &[
        ("probe/append.txt", "append\n"),
        ("probe/truncate.txt", "truncate\n"),
        ("probe/chmod.txt", "chmod\n"),
        ("probe/rename.txt", "rename\n"),
        ("probe/unlink.txt", "unlink\n"),
        ("probe/link-src.txt", "link\n"),
        ("src/lib.rs", "pub fn answer() -> u32 { 42 }\n"),
    ];
    /// Empty directories in the work tree (a gitlink is an empty directory in a checkout).
    pub const WORK_DIRS: &[&str] = &["probe/rmdir", "vendor/module"];
    /// Files in the metadata (relative to /work/.git).
    pub const METADATA_FILES: &[(&str, &str)] = &[
        ("HEAD", "ref: refs/heads/main\n"),
        (
            "config",
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n",
        ),
        (
            "objects/ce/013625030ba8dba906f756967f9e9ca394464a",
            "blob\n",
        ),
    ];
    /// The vendor name the no-resolver check looks up (and the gate's egress cases allow).
    pub const VENDOR_HOST: &str = "api.vendor.test";
    /// The object file the alias probes link to.
    pub const METADATA_OBJECT: &str = "objects/ce/013625030ba8dba906f756967f9e9ca394464a";
    /// Links every repository may have: they stay inside the checkout (a loop never resolves).
    pub const BENIGN_LINKS: &[(&str, &str)] = &[
        ("probe/links/inside", "../append.txt"),
        ("probe/links/up-and-back", "../../src/lib.rs"),
        ("probe/links/dir", ".."),
        ("probe/links/loop-a", "loop-b"),
        ("probe/links/loop-b", "loop-a"),
        ("probe/links/dangling", "does-not-exist"),
    ];
    /// Links a hostile repository carries: each leaves the checkout as the kernel resolves it.
    /// (Docker's archive upload refuses a relative link that climbs out lexically, so the relative
    /// escapes here climb through other links, which only a component-wise resolution sees.)
    pub const HOSTILE_LINKS: &[(&str, &str)] = &[
        ("hostile/root", "/"),
        ("hostile/absolute", "/etc/hostname"),
        ("hostile/proc", "/proc/self/environ"),
        ("hostile/deep/er/top", "../.."),
        (
            "hostile/chained",
            "deep/er/top/../../../run/cordon/control/policy.json",
        ),
        ("hostile/into-metadata", "../.git/config"),
        ("hostile/loop-out-a", "loop-out-b"),
        ("hostile/loop-out-b", "/"),
    ];
}
