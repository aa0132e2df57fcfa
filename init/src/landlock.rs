//! Act: the phase's Landlock ruleset, FullyEnforced at the policy's ABI or not at all.

use cordon_contract::policy::LandlockPolicy;
use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The kernel's Landlock ABI (the contract's query), as a policy ABI.
pub fn kernel_abi() -> Result<u8, String> {
    let abi = cordon_contract::landlock::kernel_abi()
        .map_err(|e| format!("landlock_create_ruleset(VERSION): {e}"))?;
    u8::try_from(abi).map_err(|_| format!("landlock ABI {abi} out of range"))
}

fn abi_of(version: u8) -> ABI {
    ABI::from(i32::from(version))
}

/// What the ruleset covers: the filesystem (the `landlock` protection), execution (the
/// `exec-allowlist` protection), or both (always, outside the gate's probe layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cover {
    pub filesystem: bool,
    pub execute: bool,
}

/// Enforce the ruleset on this process (and so every later child). Returns the enforced ABI
/// (0 when the cover is empty, which only the gate asks for).
pub fn enforce(policy: &LandlockPolicy, cover: Cover) -> Result<u8, String> {
    let kernel = kernel_abi()?;
    if kernel < policy.abi {
        return Err(format!(
            "kernel Landlock ABI {kernel}, policy needs {}",
            policy.abi
        ));
    }
    let abi = abi_of(policy.abi);
    let mut all = AccessFs::from_all(abi);
    if !cover.filesystem {
        all = BitFlags::from(AccessFs::Execute);
    }
    if !cover.execute {
        all &= !BitFlags::from(AccessFs::Execute);
    }
    if all.is_empty() {
        return Ok(0);
    }
    let read = all & (AccessFs::ReadFile | AccessFs::ReadDir);
    let write = all & !BitFlags::from(AccessFs::Execute);
    let exec = all & (AccessFs::Execute | AccessFs::ReadFile);
    // A character device needs read, write, and (where handled) truncate and ioctl.
    let device =
        all & (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev);

    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|e| err("handle_access", &e))?;
    if policy.abi >= 6 && cover.filesystem {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| err("scope", &e))?;
    }
    let mut created = ruleset.create().map_err(|e| err("create", &e))?;
    let grants = [
        (&policy.read, read),
        (&policy.write, write),
        (&policy.devices, device),
        (&policy.exec, exec),
    ];
    for (paths, access) in grants {
        if access.is_empty() {
            continue;
        }
        for path in paths {
            let fd = PathFd::new(path).map_err(|e| err(path, &e))?;
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| err(path, &e))?;
        }
    }
    let status = created
        .restrict_self()
        .map_err(|e| err("restrict_self", &e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!("ruleset {:?}, not FullyEnforced", status.ruleset));
    }
    Ok(policy.abi)
}
