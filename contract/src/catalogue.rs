//! The protection catalogue: one stable id per protection, shared by the host validator, cordon-init
//! and the probes. This is the single source of truth: the gate builds one truth-table case per id
//! and layer from this table, and `docs/gate.md` must name every id (a test checks that).
//!
//! Ids are never renamed; new protections get new ids.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which layers of the gate prove a protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    /// The host validator refuses a created container whose read-back lacks this protection.
    pub validator: bool,
    /// cordon-init's preflight observes the breach from inside and refuses.
    pub init: bool,
    /// cordon-probe, acting as the agent, succeeds at something that must fail.
    pub probe: bool,
}

impl Layers {
    /// Enforced by cordon-init alone (no profile field): probes of it run only under the init.
    pub const fn init_only(self) -> bool {
        self.init && !self.validator
    }
}

macro_rules! protections {
    ($( $variant:ident = $id:literal, validator: $v:literal, init: $i:literal, probe: $p:literal, $summary:literal; )*) => {
        /// A protection id (see the module docs).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Id { $( #[doc = $summary] $variant, )* }

        impl Id {
            /// Every id, in catalogue order.
            pub const ALL: &'static [Id] = &[ $( Id::$variant, )* ];

            /// The stable, greppable id.
            pub const fn as_str(self) -> &'static str {
                match self { $( Id::$variant => $id, )* }
            }

            /// Which gate layers prove this protection.
            pub const fn layers(self) -> Layers {
                match self { $( Id::$variant => Layers { validator: $v, init: $i, probe: $p }, )* }
            }

            /// What the protection is, in one line: the profile field and the init check.
            pub const fn summary(self) -> &'static str {
                match self { $( Id::$variant => $summary, )* }
            }

            /// The id for a string, if it is one.
            pub fn parse(s: &str) -> Option<Id> {
                match s { $( $id => Some(Id::$variant), )* _ => None }
            }
        }
    };
}

protections! {
    RootfsReadonly = "rootfs-readonly", validator: true, init: true, probe: true,
        "ReadonlyRootfs; statfs(\"/\") has ST_RDONLY and / is mounted ro";
    CapsDropped = "caps-dropped", validator: true, init: true, probe: true,
        "CapDrop: [ALL]; all five capability sets are 0 (a bounding set holding Docker's defaults means the drop is missing)";
    CapAdded = "cap-added", validator: true, init: true, probe: true,
        "CapAdd empty; a bounding set with capabilities other than Docker's defaults means one was added";
    NoNewPrivileges = "no-new-privileges", validator: true, init: true, probe: true,
        "SecurityOpt no-new-privileges; NoNewPrivs is 1 before the init sets anything itself";
    NonRootUser = "non-root-user", validator: false, init: true, probe: true,
        "the workload runs as the policy's uid and gid (the allocation's, never 0), with no supplementary group: the init switches to them before its preflight";
    InitPrivileges = "init-privileges", validator: true, init: true, probe: false,
        "User 0:0 with exactly CapAdd [SETGID, SETPCAP, SETUID, SYS_ADMIN]: what the init needs to remount the content mounts and switch ids; it drops every capability, bounding set included, before its preflight";
    NotPrivileged = "not-privileged", validator: true, init: true, probe: true,
        "Privileged false; the bounding set is not the full set and /sys is read-only";
    IpcNone = "ipc-none", validator: true, init: true, probe: true,
        "IpcMode none; there is no /dev/shm";
    NetworkNone = "network-none", validator: true, init: true, probe: true,
        "NetworkMode none and no other network; only the lo interface exists";
    StdinClosed = "stdin-closed", validator: true, init: true, probe: true,
        "OpenStdin, AttachStdin and StdinOnce false; fd 0 is /dev/null (char 1:3)";
    NoTty = "no-tty", validator: true, init: true, probe: true,
        "Tty false; none of fds 0-2 is a terminal";
    PidsLimit = "pids-limit", validator: true, init: true, probe: true,
        "PidsLimit; the cgroup's pids.max equals the policy";
    MemoryLimit = "memory-limit", validator: true, init: true, probe: false,
        "Memory = MemorySwap; the cgroup's memory (and memory+swap) limit equals the policy";
    CpuLimit = "cpu-limit", validator: true, init: true, probe: false,
        "NanoCpus; the cgroup's CFS quota and period equal the policy";
    SeccompDefault = "seccomp-default", validator: true, init: true, probe: true,
        "no seccomp= override in SecurityOpt; Seccomp mode is 2 when the init starts";
    SeccompStacked = "seccomp-stacked", validator: false, init: true, probe: true,
        "the init installs its own filter on top of Docker's (Seccomp_filters rose)";
    Landlock = "landlock", validator: false, init: true, probe: true,
        "the phase's Landlock ruleset is FullyEnforced at the policy's ABI";
    ExecAllowlist = "exec-allowlist", validator: false, init: true, probe: true,
        "Landlock EXECUTE only on the policy's files: regular files on read-only mounts, never a directory";
    HostNamespaces = "host-namespaces", validator: true, init: true, probe: true,
        "no host PID/IPC/UTS/user/cgroup namespace; the init is PID 1, its cgroup namespace is private, the hostname is the policy's";
    NoHostMounts = "no-host-mounts", validator: true, init: true, probe: true,
        "no bind mount of a host path, no device, no volume backed by a host path; every mountpoint is on the policy's list";
    NoDockerSocket = "no-docker-socket", validator: true, init: true, probe: true,
        "no Docker or containerd socket mounted; nothing exists where a daemon socket would be";
    WorkReadonly = "work-readonly", validator: true, init: true, probe: true,
        "/work mounted read-only in planning, questions and review";
    MetadataReadonly = "metadata-readonly", validator: true, init: true, probe: true,
        "/work/.git mounted read-only in every phase";
    WritableNosuidNodevNoexec = "writable-nosuid-nodev-noexec", validator: true, init: true, probe: true,
        "every writable mount is nosuid, nodev and noexec";
    ContentNoexec = "content-noexec", validator: false, init: true, probe: true,
        "every mount but the image's root is nosuid and noexec (and nodev, but for the engine's device mounts): the init remounts the read-only ones, which the engine leaves exec-capable";
    TmpBytes = "tmp-bytes", validator: true, init: true, probe: true,
        "/tmp tmpfs size; statfs byte total equals the policy";
    TmpInodes = "tmp-inodes", validator: true, init: true, probe: true,
        "/tmp tmpfs nr_inodes; statfs inode total equals the policy";
    HomeBytes = "home-bytes", validator: true, init: true, probe: true,
        "HOME tmpfs size; statfs byte total equals the policy";
    HomeInodes = "home-inodes", validator: true, init: true, probe: true,
        "HOME tmpfs nr_inodes; statfs inode total equals the policy";
    OutputBytes = "output-bytes", validator: true, init: true, probe: true,
        "output dir tmpfs size; statfs byte total equals the policy";
    OutputInodes = "output-inodes", validator: true, init: true, probe: true,
        "output dir tmpfs nr_inodes; statfs inode total equals the policy";
    CodexHomeBytes = "codex-home-bytes", validator: true, init: true, probe: true,
        "CODEX_HOME tmpfs size (Codex profile); statfs byte total equals the policy";
    CodexHomeInodes = "codex-home-inodes", validator: true, init: true, probe: true,
        "CODEX_HOME tmpfs nr_inodes (Codex profile); statfs inode total equals the policy";
    WorkBytes = "work-bytes", validator: true, init: true, probe: true,
        "work volume option size; statfs byte total of /work equals the policy";
    WorkInodes = "work-inodes", validator: true, init: true, probe: true,
        "work volume option nr_inodes; statfs inode total of /work equals the policy";
    ControlReadonly = "control-readonly", validator: true, init: true, probe: true,
        "control dir (policy) mounted read-only";
    InputReadonly = "input-readonly", validator: true, init: true, probe: true,
        "input dir (prompt, schema) mounted read-only";
    EgressReadonly = "egress-readonly", validator: true, init: true, probe: true,
        "egress socket dir mounted read-only";
    CommandsReadonly = "commands-readonly", validator: true, init: true, probe: true,
        "with approved commands, their socket dir (the relay's) mounted read-only: the agent reaches the socket and can never replace it or leave anything there";
    CommandIsolated = "command-isolated", validator: true, init: true, probe: true,
        "an approved command's container mounts nothing of its agent's: neither the relay's socket dir (a command there could make calls of its own) nor the egress dir (a way to the proxy); with no network it reaches neither the agent, the relay nor the proxy";
    NoResolver = "no-resolver", validator: true, init: false, probe: true,
        "no Dns, DnsSearch, DnsOptions or ExtraHosts; no name the agent looks up gets an answer, from the hosts file or any resolver";
    EgressAllowlist = "egress-allowlist", validator: false, init: false, probe: true,
        "the egress proxy admits a CONNECT only for an allowlisted name on its entry's port, matched before any lookup";
    EgressAddress = "egress-address", validator: false, init: false, probe: true,
        "the egress proxy dials only addresses its classifier passed (no special-purpose, metadata or host-own address); a mapping is the only way to a private one";
    EgressSni = "egress-sni", validator: false, init: false, probe: true,
        "the first bytes in a tunnel are one TLS ClientHello naming the CONNECT host; anything else closes the tunnel";
    EgressMethod = "egress-method", validator: false, init: false, probe: true,
        "the egress proxy answers only CONNECT in authority form; every other method and target form is refused";
    EgressCname = "egress-cname", validator: false, init: false, probe: true,
        "the egress proxy asks for the admitted name alone and counts only address records of a CNAME chain the same answer holds; a chain whose target the answer holds nothing for is no answer, and the target is never asked";
    CredentialAbsent = "credential-absent", validator: true, init: true, probe: true,
        "the vendor credential is nowhere the agent can read: every credential variable is absent or exactly the policy's sentinel, and nothing credential-shaped but the sentinel is in the environment, /proc or a readable file";
    VendorTerminated = "vendor-terminated", validator: false, init: false, probe: true,
        "the proxy terminates TLS for the vendor host with this invocation's CA (the agent never sees the vendor's own certificate there); every other allowed host stays an opaque tunnel";
    VendorPath = "vendor-path", validator: false, init: false, probe: true,
        "only the measured method, path and query pairs, with the vendor host as Host, reach the vendor; anything else is answered 403 vendor-path";
    VendorCredential = "vendor-credential", validator: false, init: false, probe: true,
        "a request reaches the vendor only with exactly the sentinel, once, in its kind's header and nowhere else; anything else is answered 401 vendor-credential";
    VendorBudget = "vendor-budget", validator: false, init: false, probe: true,
        "past the invocation's request, request-byte or response-byte budget the vendor host answers 429 vendor-budget";
    CredentialHostBound = "credential-host-bound", validator: false, init: false, probe: true,
        "the sentinel is swapped for the key only at its bound host and port: sent to any other host or port it arrives unchanged";
    ProxyContainer = "proxy-container", validator: true, init: false, probe: false,
        "the proxy's container and the invocation network read back exactly as their profile: the agent's hardening, the invocation network only, the egress volume its only mount, no published port";
    RelayContainer = "relay-container", validator: true, init: false, probe: false,
        "the approved commands' relay reads back exactly as its profile: a helper's hardening (the allocation's uid, no capability, read-only root, no network), the commands volume its only mount, stdin open for the dispatcher alone";
    SnapshotVerified = "snapshot-verified", validator: false, init: true, probe: false,
        "a read-only phase over a shared snapshot starts only on the tree that was recorded: the init digests /work with its metadata and refuses any other digest before the workload exists";
    FdHygiene = "fd-hygiene", validator: false, init: true, probe: false,
        "only fds 0-2 are open when the init starts, and its cwd is reachable";
    EnvAllowlist = "env-allowlist", validator: true, init: true, probe: true,
        "Env is exactly the allowlist; the environment equals the policy's";
    InitEntrypoint = "init-entrypoint", validator: true, init: true, probe: false,
        "Entrypoint is cordon-init and Docker's --init is off, so cordon-init is PID 1";
    SocketFamilies = "socket-families", validator: false, init: true, probe: true,
        "socket and socketpair only for AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK with NETLINK_ROUTE (the init's filter; AF_VSOCK is not network-namespaced)";
    InitSealed = "init-sealed", validator: false, init: true, probe: true,
        "cordon-init is non-dumpable, and its filter refuses prlimit, setpriority, the sched_set* calls, ioprio_set, migrate_pages, move_pages and process_madvise aimed at any process but the caller";
    HostInfoMasked = "host-info-masked", validator: true, init: true, probe: true,
        "MaskedPaths adds the host-describing /proc files (cmdline, modules, partitions, ...) to the engine's; each is masked inside";
    UidPerAllocation = "uid-per-allocation", validator: true, init: false, probe: false,
        "the storage allocation's own uid and gid (from the configured range, no host account) in every volume's options and label; no other live storage allocation carries them";
    GitlinkMasks = "gitlink-masks", validator: true, init: true, probe: true,
        "every gitlink in execute/fix is masked by an empty read-only tmpfs (4096 bytes, mode 0555)";
    ProfileDrift = "profile-drift", validator: true, init: false, probe: false,
        "every other created field equals the profile: image id, command, labels, working dir, log bounds, restart policy";
    PinnedDirs = "pinned-dirs", validator: true, init: true, probe: true,
        "no directory above a nested gitlink can be renamed or removed during the run (its parent grants no Landlock REMOVE_DIR; a volume-subpath mount as well where the API has it): the policy's pins are exactly those of its gitlink masks";
    TreeCheck = "tree-check", validator: true, init: false, probe: false,
        "an execute or fix start redeems exactly one tree check, made for its storage and head, unused, unaltered; a read-only phase takes none; the masks are the check's gitlinks";
    RepoLinks = "repo-links", validator: false, init: false, probe: true,
        "the seeder refuses a repository link that leaves the checkout (absolute, escaping, chained); no link in /work resolves outside it";
    Policy = "policy", validator: false, init: false, probe: false,
        "the init's policy file is present, bounded, well-formed and consistent";
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Id::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown protection id {s:?}")))
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for id in Id::ALL {
            assert!(seen.insert(id.as_str()), "duplicate id {id}");
            assert_eq!(Id::parse(id.as_str()), Some(*id));
            let json = serde_json::to_string(id).unwrap();
            assert_eq!(serde_json::from_str::<Id>(&json).unwrap(), *id);
        }
        assert!(serde_json::from_str::<Id>("\"no-such-id\"").is_err());
    }

    #[test]
    fn ids_are_lowercase_kebab() {
        for id in Id::ALL {
            assert!(id
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-'));
        }
    }
}
