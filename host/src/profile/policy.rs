//! The policy cordon-init enforces: the mounts it expects (with their flags, access and bounds),
//! Landlock, socket families, the start capabilities, masked paths, cgroup limits, the command.

use cordon_contract::paths;
use cordon_contract::policy::{
    self, Access, Bounded, CgroupLimits, LandlockPolicy, MountRule, Policy, SocketPolicy,
    CORDON_MASKED_PATHS,
};
use cordon_contract::Id;

use super::{Profile, CFS_PERIOD_US};

impl Profile {
    /// The policy cordon-init enforces.
    pub fn policy(&self) -> Policy {
        let mut env = self.env();
        env.push(format!("HOSTNAME={}", paths::HOSTNAME));
        let l = &self.spec.limits;
        Policy {
            version: policy::POLICY_VERSION,
            phase: self.spec.phase,
            vendor: self.spec.vendor,
            uid: self.spec.allocation.uid.get(),
            gid: self.spec.allocation.uid.get(),
            start_capabilities: self.start_capabilities().iter().map(|(_, n)| *n).collect(),
            hostname: paths::HOSTNAME.to_owned(),
            env,
            cwd: self.workdir().to_owned(),
            mounts: self.mount_rules(),
            landlock: LandlockPolicy {
                abi: self.spec.landlock_abi,
                read: vec!["/".to_owned()],
                write: self.writable_paths(),
                devices: vec!["/dev/null".to_owned()],
                exec: self.spec.exec.clone(),
                pins: self.spec.pins.clone(),
                // A command may execute what its image holds and what it builds in its scratch.
                exec_trees: if self.command_role().is_some() {
                    vec!["/".to_owned()]
                } else {
                    Vec::new()
                },
            },
            sockets: SocketPolicy::agent(),
            masked: CORDON_MASKED_PATHS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            cgroup: CgroupLimits {
                pids_max: u64::from(l.pids),
                memory_bytes: l.memory_bytes,
                cpu_quota_us: l.nano_cpus * CFS_PERIOD_US / 1_000_000_000,
                cpu_period_us: CFS_PERIOD_US,
            },
            command: self.spec.command.clone(),
            deadline_ms: l.deadline.as_millis() as u64,
            grace_ms: l.grace.as_millis() as u64,
            skip: vec![],
            egress: self
                .spec
                .egress
                .as_ref()
                .map(|_| super::egress::agent_forward().0),
            sentinel: self.sentinel().map(str::to_owned),
            overlay: self.overlay(),
            work_digest: self.spec.storage.snapshot.clone(),
            role: if self.command_role().is_some() {
                policy::Role::Command
            } else {
                policy::Role::Agent
            },
        }
    }

    /// Every mount the init expects, in order: the engine's, /work and its metadata, the scratch
    /// areas, the control, input and egress dirs, the pins, the gitlink masks.
    fn mount_rules(&self) -> Vec<MountRule> {
        let s = &self.spec.storage;
        let writable = self.spec.phase.work_writable();
        let mut mounts = policy::engine_mount_rules();
        if let Some(role) = self.command_role().filter(|_| self.overlay().is_some()) {
            // The work volume read-only, covered by the overlay the init lays over it; /work's
            // statfs is then the overlay's upper area's.
            let mut lower = MountRule::required(
                paths::WORK,
                Access::ReadOnly,
                Id::WorkReadonly,
                Some("tmpfs"),
                None,
            );
            lower.covered = true;
            mounts.push(lower);
            mounts.push(MountRule::required(
                paths::WORK,
                Access::Writable,
                Id::WritableNosuidNodevNoexec,
                Some("overlay"),
                Some(Bounded {
                    bytes: role.overlay.bytes,
                    inodes: role.overlay.inodes,
                    bytes_id: Id::WorkBytes,
                    inodes_id: Id::WorkInodes,
                }),
            ));
        } else {
            let writable = writable || self.command_role().is_some();
            mounts.push(MountRule::required(
                paths::WORK,
                if writable {
                    Access::Writable
                } else {
                    Access::ReadOnly
                },
                if writable {
                    Id::WritableNosuidNodevNoexec
                } else {
                    Id::WorkReadonly
                },
                Some("tmpfs"),
                Some(Bounded {
                    bytes: s.work.bytes,
                    inodes: s.work.inodes,
                    bytes_id: Id::WorkBytes,
                    inodes_id: Id::WorkInodes,
                }),
            ));
        }
        mounts.push(MountRule::required(
            paths::METADATA,
            Access::ReadOnly,
            Id::MetadataReadonly,
            Some("tmpfs"),
            None,
        ));
        for (path, area, bytes_id, inodes_id, _) in self.scratch_areas() {
            mounts.push(MountRule::required(
                path,
                if self.exec_scratch(path) {
                    Access::WritableExec
                } else {
                    Access::Writable
                },
                Id::WritableNosuidNodevNoexec,
                Some("tmpfs"),
                Some(Bounded {
                    bytes: area.bytes,
                    inodes: area.inodes,
                    bytes_id,
                    inodes_id,
                }),
            ));
        }
        for (_, path, protection) in self.invocation_dirs() {
            mounts.push(MountRule::required(
                path,
                Access::ReadOnly,
                protection,
                Some("tmpfs"),
                None,
            ));
        }
        for pin in self.pin_mounts() {
            mounts.push(MountRule::required(
                &format!("{}/{pin}", paths::WORK),
                Access::Writable,
                Id::PinnedDirs,
                Some("tmpfs"),
                None,
            ));
        }
        for gitlink in &self.spec.gitlinks {
            mounts.push(MountRule::required(
                &format!("{}/{gitlink}", paths::WORK),
                Access::ReadOnly,
                Id::GitlinkMasks,
                Some("tmpfs"),
                None,
            ));
        }
        mounts
    }

    /// What Landlock lets the workload write: the scratch areas (never an overlay's area, which
    /// only the overlay writes), and /work in the phases that write it and for a command.
    fn writable_paths(&self) -> Vec<String> {
        let mut write: Vec<String> = self
            .scratch_areas()
            .into_iter()
            .map(|(path, ..)| path)
            .filter(|path| *path != paths::OVERLAY_AREA)
            .map(str::to_owned)
            .collect();
        if self.work_writable() {
            write.push(paths::WORK.to_owned());
        }
        write
    }
}
