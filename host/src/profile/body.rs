//! The create request: every cordon container's hardening, and the agent's own.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, HostConfigLogConfig, Mount,
    RestartPolicy, RestartPolicyNameEnum,
};
use cordon_contract::capabilities::START_CAPABILITIES;
use cordon_contract::paths;
use cordon_contract::policy::{CORDON_MASKED_PATHS, ENGINE_MASKED_PATHS, ENGINE_READONLY_PATHS};

use super::{Profile, LOG_MAX_SIZE};

impl Profile {
    /// The exact create request.
    pub fn create_body(&self) -> ContainerCreateBody {
        let l = &self.spec.limits;
        let tmpfs: HashMap<String, String> = self
            .scratch_areas()
            .into_iter()
            .map(|(path, area, _, _, mode)| (path.to_owned(), self.tmpfs_options(path, area, mode)))
            .collect();
        let mut body = hardened_body(Hardened {
            image_id: &self.spec.image_id,
            labels: self.labels(),
            // The init starts as root with exactly what it needs to remount the content mounts
            // and to switch to the allocation's ids; it drops all of it before its preflight.
            user: "0:0".to_owned(),
            cap_add: self
                .start_capabilities()
                .iter()
                .map(|(name, _)| (*name).to_owned())
                .collect(),
            entrypoint: vec![paths::INIT.to_owned()],
            env: self.env(),
            mounts: self.mounts().into_iter().map(|(m, _)| m).collect(),
            pids: l.pids,
            memory_bytes: l.memory_bytes,
            nano_cpus: l.nano_cpus,
            log_max_size: LOG_MAX_SIZE,
        });
        body.working_dir = Some(self.workdir().to_owned());
        if let Some(host) = body.host_config.as_mut() {
            host.tmpfs = Some(tmpfs);
            // A command's output is read from its attach stream alone, within its bound: the
            // engine's log driver would encode every byte a flooding command writes again.
            if self.command_role().is_some() {
                host.log_config = Some(HostConfigLogConfig {
                    typ: Some("none".to_owned()),
                    config: Some(HashMap::new()),
                });
            }
        }
        // A command has no network at all, and is kept out of the engine's network code as the
        // helpers are (no libnetwork sandbox: loopback only, and no endpoint on the shared
        // `none` network, whose paths hold this engine's known lock-order deadlocks).
        if self.command_role().is_some() {
            body.network_disabled = Some(true);
        }
        body
    }
}

/// The capabilities the agent's init starts with, in Docker's names.
pub fn start_capability_names() -> Vec<String> {
    START_CAPABILITIES
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect()
}

/// Every path the engine and cordon mask (`HostConfig.MaskedPaths` replaces the engine's list,
/// so it carries the engine's too).
pub fn masked_paths() -> Vec<String> {
    ENGINE_MASKED_PATHS
        .iter()
        .chain(CORDON_MASKED_PATHS)
        .map(|p| (*p).to_owned())
        .collect()
}

/// What differs between hardened containers (the agent, the keeper, the loader).
#[derive(Debug, Clone)]
pub struct Hardened<'a> {
    pub image_id: &'a str,
    pub labels: HashMap<String, String>,
    /// `uid:gid`: the agent's init starts as 0:0; every helper runs as its allocation's uid.
    pub user: String,
    pub cap_add: Vec<String>,
    pub entrypoint: Vec<String>,
    pub env: Vec<String>,
    pub mounts: Vec<Mount>,
    pub pids: u32,
    pub memory_bytes: u64,
    pub nano_cpus: u64,
    pub log_max_size: &'a str,
}

/// Every cordon container's hardening: a numeric user, read-only root, every capability dropped
/// (the agent's init alone adds back what it drops itself), no-new-privileges, no network, no IPC,
/// private cgroup namespace, no TTY or stdin, cordon-init as PID 1 (Docker's init off), host
/// files masked, memory without swap, bounded logs, no restart.
pub fn hardened_body(h: Hardened<'_>) -> ContainerCreateBody {
    ContainerCreateBody {
        hostname: Some(paths::HOSTNAME.to_owned()),
        user: Some(h.user),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        tty: Some(false),
        open_stdin: Some(false),
        stdin_once: Some(false),
        env: Some(h.env),
        image: Some(h.image_id.to_owned()),
        entrypoint: Some(h.entrypoint),
        labels: Some(h.labels),
        host_config: Some(HostConfig {
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".to_owned()]),
            cap_add: (!h.cap_add.is_empty()).then_some(h.cap_add),
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            masked_paths: Some(masked_paths()),
            readonly_paths: Some(
                ENGINE_READONLY_PATHS
                    .iter()
                    .map(|p| (*p).to_owned())
                    .collect(),
            ),
            privileged: Some(false),
            ipc_mode: Some("none".to_owned()),
            network_mode: Some("none".to_owned()),
            cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
            pids_limit: Some(i64::from(h.pids)),
            memory: Some(h.memory_bytes as i64),
            memory_swap: Some(h.memory_bytes as i64),
            nano_cpus: Some(h.nano_cpus as i64),
            init: Some(false),
            mounts: Some(h.mounts),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_owned()),
                config: Some(HashMap::from([
                    ("max-size".to_owned(), h.log_max_size.to_owned()),
                    ("max-file".to_owned(), "1".to_owned()),
                ])),
            }),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: Some(0),
            }),
            auto_remove: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}
