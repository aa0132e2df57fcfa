//! Act, as uid 0 with the start capabilities (CAP_SYS_ADMIN for the mounts, CAP_SETUID and
//! CAP_SETGID for the filesystem ids, CAP_DAC_OVERRIDE for the area the policy's uid owns, and
//! CAP_CHOWN and CAP_FOWNER the overlay's copy-ups need): lay an approved command's throwaway
//! layer over its read-only /work (`policy.overlay`).
//!
//! In the area (a bounded tmpfs the policy's uid owns, mode 0700): `upper` made by the policy's
//! ids (the overlay's root takes its owner), mode 0755; `work` and `stage` made by root, mode
//! 0700 (modes exact: the umask is cleared for the step and restored). Each carried mount (the
//! metadata at /work/.git) is moved to `stage/<n>`, the overlay is mounted on /work (nosuid,
//! nodev, noexec) with the volume's mount as its lower layer, and each carried mount is moved
//! back onto the overlay (its directory is in the lower layer, so it is in the merged view) and
//! its stage directory removed. The overlay keeps the credentials it was
//! mounted with (uid 0, these capabilities): its copy-ups work after the init drops them.
//!
//! Like the other steps before the judge, this reports what failed instead of stopping the init;
//! the judge refuses the container as `work-readonly` with the reasons. It stops at the first
//! failure: nothing after it is attempted.

use std::ffi::CString;

use cordon_contract::policy::WorkOverlay;
use nix::sys::stat::Mode;

fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn c_path(path: &str) -> Result<CString, String> {
    CString::new(path).map_err(|_| format!("{path:?}: not a C string"))
}

/// `mount(2)`. `fstype` and `data` absent for a move.
fn mount(
    source: &str,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let what = match data {
        Some(data) => format!("mount {source} on {target} ({data})"),
        None => format!("move the mount at {source} to {target}"),
    };
    let (c_source, c_target) = (c_path(source)?, c_path(target)?);
    let c_fstype = fstype.map(c_path).transpose()?;
    let c_data = data.map(c_path).transpose()?;
    // SAFETY: every pointer is a NUL-terminated string owned by this frame (or null where
    // mount(2) takes none); the kernel copies them before it returns.
    let rc = unsafe {
        libc::mount(
            c_source.as_ptr(),
            c_target.as_ptr(),
            c_fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            c_data
                .as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr().cast::<libc::c_void>()),
        )
    };
    if rc != 0 {
        return Err(os_error(&what));
    }
    Ok(())
}

fn mkdir(path: &str, mode: u32) -> Result<(), String> {
    nix::unistd::mkdir(path, Mode::from_bits_truncate(mode))
        .map_err(|e| format!("mkdir {path}: {e}"))
}

fn rmdir(path: &str) -> Result<(), String> {
    std::fs::remove_dir(path).map_err(|e| format!("rmdir {path}: {e}"))
}

/// The thread's filesystem uid and gid now (setfs*id with an invalid id changes nothing and
/// answers the current one).
fn fs_ids() -> (u32, u32) {
    // SAFETY: setfsuid/setfsgid with -1 change nothing (an invalid id) and return the current id.
    let uid = unsafe { libc::setfsuid(u32::MAX) };
    // SAFETY: as above.
    let gid = unsafe { libc::setfsgid(u32::MAX) };
    // Both answer the id (a uid_t/gid_t) as an int: the bits are the id.
    (uid as u32, gid as u32)
}

/// Switch this thread's filesystem ids (CAP_SETUID, CAP_SETGID), checking that they took.
fn set_fs_ids(uid: u32, gid: u32) -> Result<(), String> {
    // SAFETY: setfsgid and setfsuid change only this thread's filesystem ids (the init has one
    // thread here); they take plain integers. The gid first, the uid last.
    unsafe {
        libc::setfsgid(gid);
        libc::setfsuid(uid);
    }
    let now = fs_ids();
    if now != (uid, gid) {
        return Err(format!(
            "setfsuid({uid})/setfsgid({gid}) left the filesystem ids at {now:?}"
        ));
    }
    Ok(())
}

/// Make `upper` as the policy's ids (made, not chowned: nothing of root's is ever in the area the
/// policy's uid owns): the overlay's root takes its owner and mode. Uid 0's filesystem ids come back afterwards, and with them the effective
/// CAP_DAC_OVERRIDE the change to a non-zero fsuid cleared (it is still permitted).
fn make_upper(upper: &str, uid: u32, gid: u32) -> Result<(), String> {
    let made = set_fs_ids(uid, gid).and_then(|()| mkdir(upper, 0o755));
    // Back to root's, even when only one of the two took.
    let back = set_fs_ids(0, 0);
    made.and(back)
}

/// Lay `overlay` for the policy's `uid` and `gid`. Returns one line per failure (none when the
/// overlay and its carried mounts are in place).
pub fn lay(overlay: &WorkOverlay, uid: u32, gid: u32) -> Vec<String> {
    // The modes exactly as given, whatever umask the engine started the init with; the init's
    // own umask comes back before anything else runs (the workload inherits it).
    let umask = nix::sys::stat::umask(Mode::empty());
    let laid = lay_steps(overlay, uid, gid);
    nix::sys::stat::umask(umask);
    match laid {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!("overlay on {}: {e}", overlay.target)],
    }
}

fn lay_steps(overlay: &WorkOverlay, uid: u32, gid: u32) -> Result<(), String> {
    let area = &overlay.area;
    let (upper, work, stage) = (
        format!("{area}/upper"),
        format!("{area}/work"),
        format!("{area}/stage"),
    );
    make_upper(&upper, uid, gid)?;
    mkdir(&work, 0o700)?;
    mkdir(&stage, 0o700)?;
    let staged: Vec<String> = (0..overlay.carried.len())
        .map(|n| format!("{stage}/{n}"))
        .collect();
    for (carried, aside) in overlay.carried.iter().zip(&staged) {
        mkdir(aside, 0o700)?;
        mount(carried, aside, None, libc::MS_MOVE, None)?;
    }
    let data = format!(
        "lowerdir={},upperdir={upper},workdir={work}",
        overlay.target
    );
    mount(
        "overlay",
        &overlay.target,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(&data),
    )?;
    for (carried, aside) in overlay.carried.iter().zip(&staged) {
        mount(aside, carried, None, libc::MS_MOVE, None)?;
        rmdir(aside)?;
    }
    rmdir(&stage)
}
