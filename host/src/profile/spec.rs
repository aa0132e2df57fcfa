//! What a profile is built from, and the checks [`Profile::new`] makes before it freezes one.

use cordon_contract::{policy, tree, Id, Phase, Vendor};

use super::{Limits, Profile, StorageRef};
use crate::error::{Error, Result};
use crate::labels::Allocation;

/// Environment variables a profile may add (values come from the caller, as data).
pub const ENV_ALLOWED_EXTRA: &[&str] = &[
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "NODE_EXTRA_CA_CERTS",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_AUTOUPDATER",
];

/// Everything a profile is built from. Its `Debug` names environment variables but never shows
/// their values (the credential's variable holds only the invocation's sentinel, which is still
/// not for logs).
#[derive(Clone)]
pub struct ProfileSpec {
    pub phase: Phase,
    pub vendor: Vendor,
    /// The image id (`sha256:...`) the container must run.
    pub image_id: String,
    pub allocation: Allocation,
    pub limits: Limits,
    pub storage: StorageRef,
    /// The workload argv; argv[0] must be in `exec`.
    pub command: Vec<String>,
    /// Files the workload may execute (Landlock EXECUTE).
    pub exec: Vec<String>,
    /// Extra environment, names from [`ENV_ALLOWED_EXTRA`].
    pub env: Vec<(String, String)>,
    /// Gitlink paths under /work (execute and fix), masked by empty read-only tmpfs.
    pub gitlinks: Vec<String>,
    /// The directories above nested gitlinks, exactly [`cordon_contract::tree::pins_of`] the
    /// gitlinks: the init's Landlock ruleset grants no REMOVE_DIR on their parents, so none can
    /// be renamed or removed and no mask can be moved aside.
    pub pins: Vec<String>,
    /// Each pin is also a subpath mount of the work volume (needs API 1.45; refused below).
    pub pin_mounts: bool,
    pub landlock_abi: u8,
    /// Files written into the read-only input dir (name, content), such as `schema.json`.
    pub input_files: Vec<(String, Vec<u8>)>,
    /// The invocation's egress: its proxy, on a network of its own, and the init's forwarder to
    /// it. `None`: no network, no proxy, no socket.
    pub egress: Option<super::EgressSpec>,
}

impl std::fmt::Debug for ProfileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        let inputs: Vec<(&str, usize)> = self
            .input_files
            .iter()
            .map(|(n, c)| (n.as_str(), c.len()))
            .collect();
        f.debug_struct("ProfileSpec")
            .field("phase", &self.phase)
            .field("vendor", &self.vendor)
            .field("image_id", &self.image_id)
            .field("allocation", &self.allocation)
            .field("limits", &self.limits)
            .field("storage", &self.storage)
            .field("uid", &self.allocation.uid)
            .field("command", &self.command)
            .field("exec", &self.exec)
            .field("env (values withheld)", &env)
            .field("gitlinks", &self.gitlinks)
            .field("pins", &self.pins)
            .field("pin_mounts", &self.pin_mounts)
            .field("landlock_abi", &self.landlock_abi)
            .field("input_files (bytes)", &inputs)
            .field("egress", &self.egress)
            .finish()
    }
}

/// The input file a `--json-schema` argument must equal, byte for byte.
pub const SCHEMA_FILE: &str = "schema.json";
/// At most this many input files, this many bytes in all.
pub const MAX_INPUT_FILES: usize = 16;
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// The command's `--json-schema` text must be exactly the mounted `schema.json`: what the agent is
/// told to answer and what a reader of the input dir sees cannot differ.
fn check_schema_argument(command: &[String], input_files: &[(String, Vec<u8>)]) -> Result<()> {
    if command.iter().any(|a| a.starts_with("--json-schema=")) {
        return Err(Error::SchemaMismatch(
            "the schema must be passed as a separate argument".into(),
        ));
    }
    let at: Vec<usize> = command
        .iter()
        .enumerate()
        .filter(|(_, a)| *a == "--json-schema")
        .map(|(i, _)| i)
        .collect();
    let mounted = input_files
        .iter()
        .find(|(name, _)| name == SCHEMA_FILE)
        .map(|(_, content)| content.as_slice());
    match (at.as_slice(), mounted) {
        ([], _) => Ok(()),
        ([i], Some(mounted)) if command.get(i + 1).map(String::as_bytes) == Some(mounted) => Ok(()),
        ([_], Some(_)) => Err(Error::SchemaMismatch(format!(
            "the --json-schema text differs from the mounted {SCHEMA_FILE}"
        ))),
        ([_], None) => Err(Error::SchemaMismatch(format!(
            "--json-schema without a mounted {SCHEMA_FILE}"
        ))),
        _ => Err(Error::SchemaMismatch(
            "--json-schema given more than once".into(),
        )),
    }
}

/// Whether `path` (relative to /work) can be a mount target: clean as an absolute path too, and
/// what [`cordon_contract::tree::mountable`] allows (no `"`, `,`, `\\` or control, not in `.git`).
pub fn mountable(path: &str) -> bool {
    policy::is_clean_absolute(&format!("/{path}")) && cordon_contract::tree::mountable(path)
}

impl Profile {
    /// Check a spec and freeze it. The checks run in this order; the first that fails is the
    /// error.
    pub fn new(spec: ProfileSpec) -> Result<Profile> {
        spec.check_areas()?;
        spec.check_uid()?;
        spec.check_limits()?;
        spec.check_image()?;
        spec.check_command()?;
        if let Some(egress) = &spec.egress {
            egress.check()?;
        }
        spec.check_env()?;
        spec.check_gitlinks_and_pins()?;
        spec.check_input_files()?;
        check_schema_argument(&spec.command, &spec.input_files)?;
        spec.check_landlock_abi()?;
        Ok(Profile {
            spec,
            role: super::Role::Agent,
            commands: false,
        })
    }
}

impl ProfileSpec {
    /// Every bounded area: the tmpfs areas, then the storage's.
    fn check_areas(&self) -> Result<()> {
        let l = &self.limits;
        l.tmp.check("tmp")?;
        l.home.check("home")?;
        l.output.check("output")?;
        l.codex_home.check("codex home")?;
        self.storage.work.check("work")?;
        self.storage.metadata.check("metadata")
    }

    /// The invocation runs as its storage's uid; over a shared snapshot, as one of its own, in a
    /// read-only phase, with no approved command.
    fn check_uid(&self) -> Result<()> {
        let (own, storage) = (self.allocation.uid, self.storage.storage.uid);
        match &self.storage.snapshot {
            None if own != storage => Err(Error::Invalid(format!(
                "the invocation's uid {own} is not its storage's {storage}"
            ))),
            Some(_) if own == storage => Err(Error::Invalid(format!(
                "an invocation over a shared snapshot runs as a uid of its own, not the \
                 snapshot's {storage}"
            ))),
            Some(_) if self.phase.work_writable() => Err(Error::Snapshot {
                id: "snapshot-writable-phase",
                reason: format!("{} writes /work: it takes storage of its own", self.phase),
            }),
            _ => Ok(()),
        }
    }

    fn check_limits(&self) -> Result<()> {
        let l = &self.limits;
        if l.pids == 0 || l.memory_bytes < 16 * 1024 * 1024 || l.nano_cpus < 10_000_000 {
            return Err(Error::Invalid(
                "pids, memory (>= 16 MiB) and CPU (>= 0.01) must be set".into(),
            ));
        }
        if l.deadline.is_zero() || l.grace.is_zero() {
            return Err(Error::Invalid("deadline and grace must be positive".into()));
        }
        Ok(())
    }

    fn check_image(&self) -> Result<()> {
        if !self.image_id.starts_with("sha256:") {
            return Err(Error::Invalid(format!(
                "image {:?} is not an image id",
                self.image_id
            )));
        }
        Ok(())
    }

    /// A command, its argv[0] on the exec allowlist, no NUL; every allowlisted path a clean
    /// absolute file path.
    fn check_command(&self) -> Result<()> {
        let Some(argv0) = self.command.first() else {
            return Err(Error::Invalid("empty command".into()));
        };
        if !self.exec.contains(argv0) {
            return Err(Error::Invalid(format!(
                "command {argv0:?} is not on the exec allowlist"
            )));
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return Err(Error::Invalid("command has a NUL byte".into()));
        }
        for path in &self.exec {
            if !policy::is_clean_absolute(path) || path == "/" {
                return Err(Error::Invalid(format!(
                    "exec path {path:?} is not a clean absolute file path"
                )));
            }
        }
        Ok(())
    }

    /// Only allowed names, no NUL or newline in a value.
    /// The sentinel of the terminated vendor host, if any.
    pub(super) fn sentinel(&self) -> Option<&str> {
        let terminate = self.egress.as_ref()?.terminate.as_ref()?;
        Some(terminate.sentinel.as_str())
    }

    fn check_env(&self) -> Result<()> {
        for (key, value) in &self.env {
            // The agent holds no credential but its sentinel (`credential-absent`).
            if cordon_contract::credential::foreign_entry(
                &format!("{key}={value}"),
                self.sentinel(),
            ) {
                return Err(Error::Custody(format!(
                    "environment variable {key:?} holds a credential that is not the \
                     invocation's sentinel: the agent never holds the key"
                )));
            }
            // The proxy variables are the egress forwarder's: never the caller's.
            let proxy = key.to_ascii_lowercase().ends_with("_proxy");
            if !ENV_ALLOWED_EXTRA.contains(&key.as_str())
                || value.contains(['\0', '\n'])
                || proxy && self.egress.is_some()
            {
                return Err(Error::Invalid(format!(
                    "environment variable {key:?} is not allowed"
                )));
            }
        }
        Ok(())
    }

    /// Gitlink masks and pins: only in a writable phase, bounded in number and bytes, each a
    /// mountable path, and the pins exactly the gitlinks'.
    fn check_gitlinks_and_pins(&self) -> Result<()> {
        if (!self.gitlinks.is_empty() || !self.pins.is_empty()) && !self.phase.work_writable() {
            return Err(Error::Invalid(
                "gitlink masks and pins exist only in execute and fix".into(),
            ));
        }
        if self.gitlinks.len() > tree::MAX_GITLINKS || self.pins.len() > tree::MAX_PINS {
            return Err(Error::Invalid(format!(
                "more than {} gitlinks or {} pins",
                tree::MAX_GITLINKS,
                tree::MAX_PINS
            )));
        }
        for path in self.gitlinks.iter().chain(&self.pins) {
            if !mountable(path) {
                return Err(Error::Invalid(format!(
                    "gitlink or pin {path:?} is not a mountable path under /work"
                )));
            }
        }
        if tree::mount_path_bytes(&self.gitlinks, &self.pins) > tree::MAX_MOUNT_PATH_BYTES {
            return Err(Error::Invalid(format!(
                "more than {} bytes of gitlink and pin paths",
                tree::MAX_MOUNT_PATH_BYTES
            )));
        }
        // The pins are derived, never chosen: a profile whose pins are not its gitlinks' would
        // leave a mask movable (or forbid what nothing needs).
        let derived = tree::pins_of(&self.gitlinks);
        if self.pins != derived {
            return Err(Error::Profile {
                id: Id::PinnedDirs,
                reason: format!(
                    "the pins {:?} are not those of the gitlinks {:?} ({derived:?})",
                    self.pins, self.gitlinks
                ),
            });
        }
        Ok(())
    }

    /// Bounded in number and bytes, each name a plain file name.
    fn check_input_files(&self) -> Result<()> {
        if self.input_files.len() > MAX_INPUT_FILES
            || self.input_files.iter().map(|(_, c)| c.len()).sum::<usize>() > MAX_INPUT_BYTES
        {
            return Err(Error::Invalid(format!(
                "more than {MAX_INPUT_FILES} input files or {MAX_INPUT_BYTES} bytes of input"
            )));
        }
        for (name, _) in &self.input_files {
            let plain = !name.is_empty()
                && name.len() <= 255
                && name != "."
                && name != ".."
                && !name.contains(['/', '\0']);
            if !plain {
                return Err(Error::Invalid(format!(
                    "input file name {name:?} is not a plain file name"
                )));
            }
        }
        Ok(())
    }

    fn check_landlock_abi(&self) -> Result<()> {
        if !policy::LANDLOCK_ABI_RANGE.contains(&self.landlock_abi) {
            return Err(Error::Invalid(format!(
                "Landlock ABI {} unsupported",
                self.landlock_abi
            )));
        }
        Ok(())
    }
}
