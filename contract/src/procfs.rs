//! Parsers for the /proc files the init's preflight and the probes read. Pure functions over text.

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// What of its filesystem the mount shows (`/` for a whole tmpfs; a host path for a bind of a
    /// host directory or of a plain local volume).
    pub root: String,
    pub mount_point: String,
    /// Per-mount options (ro/rw, nosuid, nodev, noexec, ...).
    pub mount_opts: Vec<String>,
    pub fstype: String,
    pub source: String,
    /// Superblock options (size=, nr_inodes=, ...).
    pub super_opts: Vec<String>,
    /// The line as read, for evidence.
    pub line: String,
}

impl MountEntry {
    /// Read-only at the mount or the superblock.
    pub fn read_only(&self) -> bool {
        self.mount_opts.iter().any(|o| o == "ro") || self.super_opts.iter().any(|o| o == "ro")
    }

    /// Whether a per-mount flag (nosuid, nodev, noexec) is set.
    pub fn has(&self, flag: &str) -> bool {
        self.mount_opts.iter().any(|o| o == flag)
    }
}

/// Undo the kernel's octal escapes (`\040` for space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|oct| std::str::from_utf8(oct).ok())
            .and_then(|oct| u8::from_str_radix(oct, 8).ok());
        match escaped {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse /proc/self/mountinfo. A line that does not parse is an error: the init never guesses.
pub fn parse_mountinfo(text: &str) -> Result<Vec<MountEntry>, String> {
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let sep = fields
            .iter()
            .position(|f| *f == "-")
            .ok_or_else(|| format!("mountinfo line without separator: {line}"))?;
        if sep < 6 || fields.len() < sep + 4 {
            return Err(format!("short mountinfo line: {line}"));
        }
        entries.push(MountEntry {
            root: unescape(fields[3]),
            mount_point: unescape(fields[4]),
            mount_opts: fields[5].split(',').map(str::to_owned).collect(),
            fstype: fields[sep + 1].to_owned(),
            source: unescape(fields[sep + 2]),
            super_opts: fields[sep + 3].split(',').map(str::to_owned).collect(),
            line: line.to_owned(),
        });
    }
    Ok(entries)
}

/// The fields of /proc/self/status the preflight judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Real, effective, saved and filesystem uid.
    pub uid: Vec<u32>,
    pub gid: Vec<u32>,
    pub groups: Vec<u32>,
    pub cap_inh: u64,
    pub cap_prm: u64,
    pub cap_eff: u64,
    pub cap_bnd: u64,
    pub cap_amb: u64,
    pub no_new_privs: u32,
    pub seccomp: u32,
    pub seccomp_filters: u32,
}

impl Status {
    /// The five capability sets: inheritable, permitted, effective, bounding, ambient.
    pub fn capability_sets(&self) -> [u64; 5] {
        [
            self.cap_inh,
            self.cap_prm,
            self.cap_eff,
            self.cap_bnd,
            self.cap_amb,
        ]
    }

    /// The five sets as the evidence of a refusal or a breach.
    pub fn describe_capabilities(&self) -> String {
        format!(
            "CapInh {:x} CapPrm {:x} CapEff {:x} CapBnd {:x} CapAmb {:x}",
            self.cap_inh, self.cap_prm, self.cap_eff, self.cap_bnd, self.cap_amb
        )
    }
}

/// Parse /proc/self/status. Every field the preflight needs must be present.
pub fn parse_status(text: &str) -> Result<Status, String> {
    let field = |name: &str| -> Result<&str, String> {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(str::trim)
            .ok_or_else(|| format!("/proc/self/status has no {name}"))
    };
    let numbers = |name: &str| -> Result<Vec<u32>, String> {
        field(name)?
            .split_whitespace()
            .map(|n| {
                n.parse()
                    .map_err(|_| format!("{name}: {n:?} is not a number"))
            })
            .collect()
    };
    let hex = |name: &str| -> Result<u64, String> {
        let v = field(name)?;
        u64::from_str_radix(v, 16).map_err(|_| format!("{name}: {v:?} is not hex"))
    };
    let number = |name: &str| -> Result<u32, String> {
        let v = field(name)?;
        v.parse()
            .map_err(|_| format!("{name}: {v:?} is not a number"))
    };
    Ok(Status {
        uid: numbers("Uid")?,
        gid: numbers("Gid")?,
        groups: numbers("Groups")?,
        cap_inh: hex("CapInh")?,
        cap_prm: hex("CapPrm")?,
        cap_eff: hex("CapEff")?,
        cap_bnd: hex("CapBnd")?,
        cap_amb: hex("CapAmb")?,
        no_new_privs: number("NoNewPrivs")?,
        seccomp: number("Seccomp")?,
        seccomp_filters: number("Seccomp_filters")?,
    })
}

/// Interface names from /proc/net/dev.
pub fn parse_net_dev(text: &str) -> Vec<String> {
    text.lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "71 46 0:39 / / ro,noatime master:2 - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0
87 71 0:40 / /work rw,nosuid,nodev,noexec,relatime master:3 - tmpfs tmpfs rw,size=8192k,nr_inodes=200
88 71 0:47 / /tmp\\040dir rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=4096k
52 72 0:43 /null /proc/keys rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
";

    #[test]
    fn mountinfo_fields() {
        let m = parse_mountinfo(MOUNTINFO).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].mount_point, "/");
        assert!(m[0].read_only());
        assert_eq!(m[0].fstype, "fuse.fuse-overlayfs");
        assert_eq!(m[1].mount_point, "/work");
        assert!(!m[1].read_only());
        assert!(m[1].has("nosuid") && m[1].has("nodev") && m[1].has("noexec"));
        assert!(m[1].super_opts.contains(&"nr_inodes=200".to_owned()));
        assert_eq!(m[2].mount_point, "/tmp dir");
        assert!(!m[3].has("nodev"));
    }

    #[test]
    fn mountinfo_garbage_is_an_error() {
        assert!(parse_mountinfo("1 2 3\n").is_err());
        assert!(parse_mountinfo("1 2 0:1 / / rw - tmpfs\n").is_err());
    }

    #[test]
    fn superblock_ro_counts() {
        let m = parse_mountinfo("1 0 0:1 / /x rw - tmpfs tmpfs ro,size=4k\n").unwrap();
        assert!(m[0].read_only());
    }

    #[test]
    fn status_fields() {
        let text = "Name:\tx\nUid:\t10001\t10001\t10001\t10001\nGid:\t10001\t10001\t10001\t10001\nGroups:\t10001 \nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        let s = parse_status(text).unwrap();
        assert_eq!(s.uid, vec![10001; 4]);
        assert_eq!(s.groups, vec![10001]);
        assert_eq!(s.cap_bnd, 0xa80425fb);
        assert_eq!(s.no_new_privs, 1);
        assert_eq!(s.seccomp_filters, 1);
        assert!(parse_status("Uid:\t1\n").is_err());
    }

    #[test]
    fn empty_groups() {
        let text = "Uid:\t1 1 1 1\nGid:\t1 1 1 1\nGroups:\t\nCapInh:\t0\nCapPrm:\t0\nCapEff:\t0\nCapBnd:\t0\nCapAmb:\t0\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
        assert!(parse_status(text).unwrap().groups.is_empty());
    }

    #[test]
    fn net_dev_names() {
        let text = "Inter-|   Receive\n face |bytes\n    lo:       0       0\n  eth0: 1 2\n";
        assert_eq!(parse_net_dev(text), vec!["lo", "eth0"]);
    }
}
