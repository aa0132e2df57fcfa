//! Which capabilities are which, as data every layer reads: the init's start set (the host's
//! `CapAdd` and the policy), Docker's default set (a bounding set holding it means `CapDrop: ALL`
//! is missing), and what a privileged container holds (every capability the kernel knows). The
//! init and the probes keep their own checks; they share these facts only.

/// The capabilities the init starts with (CAP_SETGID, CAP_SETUID, CAP_SETPCAP, CAP_SYS_ADMIN),
/// in Docker's names for `CapAdd` and as numbers.
pub const START_CAPABILITIES: &[(&str, u32)] = &[
    ("SETGID", 6),
    ("SETPCAP", 8),
    ("SETUID", 7),
    ("SYS_ADMIN", 21),
];

/// What an approved command's init adds to its start set when it lays an overlay on /work
/// (`writes: none`). Overlayfs keeps its mounter's credentials and copies up with them: without
/// DAC_OVERRIDE it cannot use the `work` directory it makes with mode 0 (measured: EACCES on the
/// first write), without CHOWN a copied-up directory cannot take its owner back and without
/// FOWNER its times (measured: EPERM on the first file made in a directory of the volume).
/// Dropped with the rest before the preflight: only the overlay keeps them, for its copy-ups.
pub const OVERLAY_CAPABILITIES: &[(&str, u32)] =
    &[("CHOWN", 0), ("DAC_OVERRIDE", 1), ("FOWNER", 3)];

/// Docker's default bounding set (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID,
/// SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD, AUDIT_WRITE, SETFCAP). A bounding set
/// holding all of it means `CapDrop: ALL` is missing; anything else non-empty means a `CapAdd`.
pub const ENGINE_DEFAULT_CAPS: u64 = 0xa804_25fb;

/// The start set's numbers, as the policy carries them.
pub fn start_capability_numbers() -> Vec<u32> {
    START_CAPABILITIES.iter().map(|(_, n)| *n).collect()
}

/// A capability set as the kernel shows it (a bit per capability number).
pub fn capability_mask(caps: &[u32]) -> u64 {
    caps.iter()
        .filter(|c| **c < 64)
        .fold(0, |mask, c| mask | (1u64 << c))
}

/// Whether `set` holds every one of Docker's defaults (the drop of them is missing).
pub fn holds_engine_defaults(set: u64) -> bool {
    set & ENGINE_DEFAULT_CAPS == ENGINE_DEFAULT_CAPS
}

/// Every capability a kernel whose highest capability number is `cap_last_cap` knows: the bounding
/// set of a privileged container.
pub fn all_capabilities(cap_last_cap: u32) -> u64 {
    if cap_last_cap >= 63 {
        u64::MAX
    } else {
        (1u64 << (cap_last_cap + 1)) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_set_is_not_the_engine_defaults_and_every_set_is_within_all() {
        let start = capability_mask(&start_capability_numbers());
        assert_eq!(start, (1 << 6) | (1 << 7) | (1 << 8) | (1 << 21));
        assert!(!holds_engine_defaults(start));
        assert!(holds_engine_defaults(ENGINE_DEFAULT_CAPS | start));
        assert_eq!(all_capabilities(40), (1 << 41) - 1);
        assert_eq!(all_capabilities(63), u64::MAX);
        assert_eq!(ENGINE_DEFAULT_CAPS & !all_capabilities(40), 0);
    }
}
