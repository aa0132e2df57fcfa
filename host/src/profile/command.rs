//! An approved command's container: the agent's profile with a command's role. It runs one exact
//! argv from the runner's toolchain image over the agent's tree, as hostile as the agent and
//! contained the same way (the init, the validator, the attestation, no network, no credential),
//! with three differences the role makes and the init checks:
//!
//! - its /tmp scratch may hold executables (tests run what they build): nosuid and nodev, not
//!   noexec, and Landlock grants EXECUTE beneath the image root rather than on a list of files;
//! - `writes: none`: /work is the work volume read-only beneath an overlay the init lays on a
//!   bounded tmpfs of its own (CHOWN, DAC_OVERRIDE and FOWNER join the init's start set for that,
//!   and are dropped with the rest: the overlay keeps them for its copy-ups), so what the command
//!   writes beside the sources never reaches the volume;
//! - `writes: work`: /work is the work volume writable, with exactly the agent's masks and pins.
//!
//! No input files, no egress dir, no proxy; its working directory and environment are the
//! command's.

use cordon_contract::command::Writes;
use cordon_contract::{credential, paths};

use super::{Area, Profile, ProfileSpec, StorageRef};
use crate::error::{Error, Result};

/// The default `PATH` of a command whose image names none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What makes a profile a command's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRole {
    /// The approved command's name (for the record; the argv is the spec's).
    pub name: String,
    pub writes: Writes,
    /// Where the command starts: /work or beneath it.
    pub workdir: String,
    /// Its /tmp: exact bytes and inodes, exec-capable.
    pub scratch: Area,
    /// The overlay's upper layer (`writes: none` only): exact bytes and inodes.
    pub overlay: Area,
}

/// Whose container a profile makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Agent,
    Command(CommandRole),
}

impl Profile {
    /// Check a command's spec and freeze it: what [`Profile::new`] checks of an agent's, with the
    /// command's environment (the runner's literal values and its image's, never a credential)
    /// and areas in place of the agent's.
    pub fn for_command(spec: ProfileSpec, role: CommandRole) -> Result<Profile> {
        if !cordon_contract::command::is_workdir(&role.workdir) {
            return Err(Error::Invalid(format!(
                "command working directory {:?} is not /work or a clean path beneath it",
                role.workdir
            )));
        }
        role.scratch.check("command scratch")?;
        role.overlay.check("command overlay")?;
        if spec.egress.is_some() || !spec.input_files.is_empty() {
            return Err(Error::Invalid(
                "a command has no egress and no input files".into(),
            ));
        }
        if role.writes == Writes::None && (!spec.gitlinks.is_empty() || !spec.pins.is_empty()) {
            return Err(Error::Invalid(
                "a command that writes nothing mounts no gitlink masks or pins".into(),
            ));
        }
        check_env(&spec.env)?;
        let mut agent_view = spec.clone();
        // The agent's own checks, with the environment left to the command's (above): its
        // names are the runner's, not the agent's allowlist. Its argv[0] may be a link to the
        // one program on its allowlist (the init execs the link; Landlock judges the file).
        agent_view.env.clear();
        if let (Some(first), [program]) = (agent_view.command.first_mut(), spec.exec.as_slice()) {
            first.clone_from(program);
        }
        Profile::new(agent_view)?;
        Ok(Profile {
            spec,
            role: Role::Command(role),
            commands: false,
        })
    }

    /// The profile of one approved command over the agent's storage: the agent's phase, vendor,
    /// limits, storage and (for `writes: work`) masks and pins; the command's own allocation
    /// (the storage's uid), image, argv, environment (the image's, then its own), working
    /// directory and scratch; `program` is argv[0] with its links resolved in the image (the
    /// file the init checks is a regular file on the read-only root). The init's deadline is
    /// the command's `limit` plus its grace and a margin: the controller stops it first.
    pub fn command_of(
        agent: &Profile,
        allocation: crate::labels::Allocation,
        command: &cordon_contract::command::ApprovedCommand,
        image: (&str, &[String]),
        program: &str,
        limit: std::time::Duration,
    ) -> Result<Profile> {
        let (image_id, image_env) = image;
        let mut env: Vec<(String, String)> = image_env
            .iter()
            .filter_map(|entry| entry.split_once('='))
            .filter(|(name, _)| *name != "HOSTNAME")
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        env.extend(command.env.iter().cloned());
        let mut limits = agent.limits().clone();
        limits.deadline = limit + limits.grace + std::time::Duration::from_secs(5);
        let writes_work = command.writes == Writes::Work;
        let area = Area {
            bytes: command.scratch.bytes,
            inodes: command.scratch.inodes,
        };
        let spec = ProfileSpec {
            phase: agent.phase(),
            vendor: agent.vendor(),
            image_id: image_id.to_owned(),
            storage: StorageRef {
                control_volume: allocation.name(crate::labels::Kind::Control),
                input_volume: allocation.name(crate::labels::Kind::Input),
                egress_volume: String::new(),
                ..agent.storage().clone()
            },
            allocation,
            limits,
            command: command.argv.clone(),
            exec: vec![program.to_owned()],
            env,
            gitlinks: if writes_work {
                agent.gitlinks().to_vec()
            } else {
                Vec::new()
            },
            pins: if writes_work {
                agent.pins().to_vec()
            } else {
                Vec::new()
            },
            pin_mounts: writes_work && !agent.pin_mounts().is_empty(),
            landlock_abi: agent.spec().landlock_abi,
            input_files: Vec::new(),
            egress: None,
        };
        Profile::for_command(
            spec,
            CommandRole {
                name: command.name.clone(),
                writes: command.writes,
                workdir: command.workdir.clone(),
                scratch: area,
                overlay: area,
            },
        )
    }

    /// The command's role, when this is a command's profile.
    pub fn command_role(&self) -> Option<&CommandRole> {
        match &self.role {
            Role::Command(role) => Some(role),
            Role::Agent => None,
        }
    }

    /// The command's environment: a default `PATH`, `HOME` and `TMPDIR` in its scratch, then the
    /// spec's entries (the image's, then the command's), each name once, the last value winning.
    pub(super) fn command_env(&self) -> Vec<String> {
        let mut env: Vec<(String, String)> = vec![
            ("PATH".to_owned(), DEFAULT_PATH.to_owned()),
            ("HOME".to_owned(), paths::TMP.to_owned()),
            ("TMPDIR".to_owned(), paths::TMP.to_owned()),
        ];
        for (name, value) in &self.spec.env {
            match env.iter_mut().find(|(n, _)| n == name) {
                Some(entry) => entry.1 = value.clone(),
                None => env.push((name.clone(), value.clone())),
            }
        }
        env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
    }
}

/// A command's environment: plain names (not the init's own `HOSTNAME`), values without NUL or
/// newline, and nothing credential-shaped: a command holds no credential at all.
fn check_env(env: &[(String, String)]) -> Result<()> {
    for (name, value) in env {
        let plain = !name.is_empty()
            && name.len() <= 256
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !plain || name == "HOSTNAME" || value.contains(['\0', '\n']) {
            return Err(Error::Invalid(format!(
                "command environment variable {name:?} is not allowed"
            )));
        }
        if credential::foreign_entry(&format!("{name}={value}"), None) {
            return Err(Error::Custody(format!(
                "command environment variable {name:?} holds a credential: no command holds one"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
