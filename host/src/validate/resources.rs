//! Limits: pids, memory without swap (and the OOM killer on), CPU as NanoCpus alone.

use cordon_contract::Id;

use super::{Diff, ReadBack};

pub(super) fn limits(r: &ReadBack<'_>, d: &mut Diff) {
    let (host, want_host) = (&r.host, &r.want_host);
    d.check(
        host.pids_limit == want_host.pids_limit,
        Id::PidsLimit,
        "HostConfig.PidsLimit",
        want_host.pids_limit,
        host.pids_limit,
    );
    d.check(
        host.memory == want_host.memory,
        Id::MemoryLimit,
        "HostConfig.Memory",
        want_host.memory,
        host.memory,
    );
    d.check(
        host.memory_swap == want_host.memory,
        Id::MemoryLimit,
        "HostConfig.MemorySwap",
        want_host.memory,
        host.memory_swap,
    );
    d.check(
        host.oom_kill_disable != Some(true),
        Id::MemoryLimit,
        "HostConfig.OomKillDisable",
        false,
        host.oom_kill_disable,
    );
    d.check(
        host.nano_cpus == want_host.nano_cpus,
        Id::CpuLimit,
        "HostConfig.NanoCpus",
        want_host.nano_cpus,
        host.nano_cpus,
    );
    d.check(
        host.cpu_quota.unwrap_or(0) == 0 && host.cpu_period.unwrap_or(0) == 0,
        Id::CpuLimit,
        "HostConfig.CpuQuota/CpuPeriod",
        (0, 0),
        (host.cpu_quota, host.cpu_period),
    );
}
