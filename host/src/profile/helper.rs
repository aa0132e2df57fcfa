//! The create bodies of cordon's trusted helpers (keeper, loader, tool) and of the tree reader:
//! the agent's hardening with a helper's user, limits and no network.

use bollard::models::{ContainerCreateBody, Mount};

use super::{hardened_body, Hardened};
use crate::labels::{Allocation, Kind};

/// The create request of a trusted helper (keeper, loader, tool) of `allocation`: the agent's
/// hardening, the allocation's uid, no capability at all, small limits, and networking disabled
/// outright.
///
/// `NetworkDisabled` keeps the helper out of the engine's network code altogether: it gets a
/// network namespace of its own holding only loopback, as `none` gives, but no libnetwork sandbox
/// or endpoint on the one `none` network every parallel helper shares. On this engine (20.10.24)
/// libnetwork's endpoint paths carry known lock-order deadlocks (moby/libnetwork#2649), and a
/// helper's create, start, wait and remove took 180 ms instead of 291 ms (medians of 40 each).
pub fn helper_body(
    image_id: &str,
    allocation: &Allocation,
    kind: Kind,
    entrypoint: Vec<String>,
    mounts: Vec<Mount>,
) -> ContainerCreateBody {
    let mut body = hardened_body(Hardened {
        image_id,
        labels: allocation.labels(kind),
        user: format!("{0}:{0}", allocation.uid),
        cap_add: Vec::new(),
        entrypoint,
        env: vec!["PATH=/usr/bin:/bin".to_owned()],
        mounts,
        pids: 16,
        memory_bytes: 64 * 1024 * 1024,
        // One CPU: helpers run only cordon's own bounded jobs, and a digest of 5,000 files at a
        // tenth of a CPU took 0.8 s instead of 0.1 s.
        nano_cpus: 1_000_000_000,
        log_max_size: "64k",
    });
    body.network_disabled = Some(true);
    body
}

/// The tree reader's create body (cordon-init's `tree` roles): a helper's hardening, with room
/// for an index of a large tree in memory, a thread per CPU to hash, and a log that holds its
/// whole report (at most `MAX_REPORT_BYTES`, 8 MiB, which the log driver stores escaped).
pub fn reader_body(
    image_id: &str,
    allocation: &Allocation,
    entrypoint: Vec<String>,
    mounts: Vec<Mount>,
) -> ContainerCreateBody {
    let mut body = helper_body(image_id, allocation, Kind::Tool, entrypoint, mounts);
    if let Some(host) = body.host_config.as_mut() {
        host.memory = Some(512 * 1024 * 1024);
        host.memory_swap = host.memory;
        // Two CPUs where there are two (the engine refuses more than the machine has).
        host.nano_cpus = Some(
            std::thread::available_parallelism().map_or(1, |n| n.get().min(2)) as i64
                * 1_000_000_000,
        );
        if let Some(config) = host.log_config.as_mut().and_then(|l| l.config.as_mut()) {
            config.insert("max-size".to_owned(), "32m".to_owned());
        }
    }
    body
}
