//! The kernel's Landlock ABI, asked the one way both the init and the probes ask it.

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the highest ABI the
/// kernel supports, or why it could not say (ENOSYS, EOPNOTSUPP when Landlock is off).
pub fn kernel_abi() -> std::io::Result<libc::c_long> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: the VERSION query takes no attribute pointer and returns an integer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
