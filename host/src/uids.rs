//! Each storage allocation runs as a uid (and gid, the same number) of its own, so the kernel's
//! per-user counters (inotify instances and watches, epoll watches, pending signals, pipe pages,
//! processes) are never shared between invocations, nor with a host account: the containers are
//! all in the host's user namespace, where those counters are kept per uid.
//!
//! The uid comes from a configured range that no host account uses (checked against the account
//! and subordinate-id databases), and that no live allocation holds (checked against the
//! `io.cordon.uid` label of every cordon object, whoever owns it, before the first create and
//! again right after it).

use std::collections::BTreeSet;
use std::os::unix::fs::OpenOptionsExt;

use crate::error::{Error, Result};

/// The lowest uid cordon ever uses: above every conventional account and nobody (65534).
pub const MIN_UID: u32 = 65_536;
/// The highest: one below a tar header's 7 octal digits (the seeder writes the uid into every
/// entry), so the proxy's, one above, fits there too.
pub const MAX_UID: u32 = 0o7_777_776;

/// A uid of a storage allocation (never 0, within [`MIN_UID`]..=[`MAX_UID`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Uid(u32);

impl Uid {
    pub fn new(uid: u32) -> Result<Uid> {
        if (MIN_UID..=MAX_UID).contains(&uid) {
            Ok(Uid(uid))
        } else {
            Err(Error::Uid {
                id: "uid-range",
                reason: format!("uid {uid} is outside {MIN_UID}..={MAX_UID}"),
            })
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// The uid the allocation's egress proxy runs as: the next one, which [`pick`] keeps free with
    /// this one (a proxy never shares the agent's uid: its vault, its kernel counters). At most
    /// `MAX_UID + 1`, still within a tar header.
    pub fn proxy(self) -> u32 {
        self.0 + 1
    }
}

impl<'de> serde::Deserialize<'de> for Uid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        Uid::new(n).map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The range uids are picked from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

impl Default for UidRange {
    /// 900,000 uids, far above the accounts and subordinate ranges distributions hand out.
    fn default() -> Self {
        UidRange {
            first: 1_100_000,
            last: 1_999_999,
        }
    }
}

impl std::str::FromStr for UidRange {
    type Err = Error;
    /// `FIRST-LAST`.
    fn from_str(text: &str) -> Result<UidRange> {
        let bad = || Error::Uid {
            id: "uid-range",
            reason: format!("{text:?} is not FIRST-LAST"),
        };
        let (first, last) = text.split_once('-').ok_or_else(bad)?;
        let range = UidRange {
            first: first.trim().parse().map_err(|_| bad())?,
            last: last.trim().parse().map_err(|_| bad())?,
        };
        range.check()?;
        Ok(range)
    }
}

impl UidRange {
    /// Within [`MIN_UID`]..=[`MAX_UID`], first <= last.
    pub fn check(&self) -> Result<()> {
        if self.first < MIN_UID || self.last > MAX_UID || self.first > self.last {
            return Err(Error::Uid {
                id: "uid-range",
                reason: format!(
                    "{}-{} is not within {MIN_UID}-{MAX_UID}",
                    self.first, self.last
                ),
            });
        }
        Ok(())
    }

    fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    fn overlaps(&self, first: u32, last: u32) -> bool {
        first <= self.last && last >= self.first
    }
}

/// The account databases: a host file, bounded, never blocking on a FIFO.
fn read_host_file(path: &str) -> Result<Option<String>> {
    const MAX: u64 = 16 * 1024 * 1024;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {path}"), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {path}"), e))?;
    if !meta.is_file() || meta.len() > MAX {
        return Err(Error::Uid {
            id: "uid-range",
            reason: format!("{path} is not a regular file of at most {MAX} bytes"),
        });
    }
    let mut text = String::new();
    use std::io::Read;
    file.take(MAX)
        .read_to_string(&mut text)
        .map_err(|e| Error::io(format!("reading {path}"), e))?;
    Ok(Some(text))
}

/// Ids the host's files name: account ids in `passwd`/`group` (field 3, and 4 for passwd), and
/// subordinate ranges in `subuid`/`subgid` (`name:first:count`), as inclusive ranges.
pub fn host_ranges(passwd: &str, group: &str, subuid: &str, subgid: &str) -> Vec<(u32, u32)> {
    let mut ranges = Vec::new();
    for (text, fields) in [(passwd, &[2usize, 3][..]), (group, &[2usize][..])] {
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let parts: Vec<&str> = line.split(':').collect();
            for f in fields {
                if let Some(id) = parts.get(*f).and_then(|v| v.trim().parse::<u32>().ok()) {
                    ranges.push((id, id));
                }
            }
        }
    }
    for text in [subuid, subgid] {
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let parts: Vec<&str> = line.split(':').collect();
            let first = parts.get(1).and_then(|v| v.trim().parse::<u32>().ok());
            let count = parts.get(2).and_then(|v| v.trim().parse::<u32>().ok());
            if let (Some(first), Some(count)) = (first, count) {
                if count > 0 {
                    ranges.push((first, first.saturating_add(count - 1)));
                }
            }
        }
    }
    ranges
}

/// Refuse a range that any host account or subordinate range reaches.
pub fn check_against_host(range: &UidRange) -> Result<()> {
    let read = |p: &str| read_host_file(p).map(Option::unwrap_or_default);
    let ranges = host_ranges(
        &read("/etc/passwd")?,
        &read("/etc/group")?,
        &read("/etc/subuid")?,
        &read("/etc/subgid")?,
    );
    let hits: Vec<String> = ranges
        .iter()
        .filter(|(a, b)| range.overlaps(*a, *b))
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .take(8)
        .collect();
    if !hits.is_empty() {
        return Err(Error::Uid {
            id: "uid-range-host-overlap",
            reason: format!(
                "the uid range {}-{} holds ids the host uses: {}",
                range.first,
                range.last,
                hits.join(", ")
            ),
        });
    }
    Ok(())
}

/// Whether the name service knows `id` as a user or a group (accounts not in /etc: LDAP, ...).
fn known_to_nss(id: u32) -> bool {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: getpwuid_r/getgrgid_r write only into the structs and the buffer we pass, whose
    // length we give; the result pointer is only compared with null.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let user = libc::getpwuid_r(id, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) == 0
            && !found.is_null();
        let mut gr: libc::group = std::mem::zeroed();
        let mut found: *mut libc::group = std::ptr::null_mut();
        let group = libc::getgrgid_r(id, &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) == 0
            && !found.is_null();
        user || group
    }
}

/// A uid for a new storage allocation: an even one in `range` whose successor (its proxy's,
/// [`Uid::proxy`]) is in `range` too, both known to no host account, and neither they nor the
/// uid below (an older allocation's, whose proxy takes the next) in `used` (the uids live cordon
/// objects carry). Checked again right after the first create.
pub fn pick(range: &UidRange, used: &BTreeSet<u32>) -> Result<Uid> {
    range.check()?;
    check_against_host(range)?;
    let span = u64::from(range.last - range.first) + 1;
    let free = |uid: u32| range.contains(uid) && !used.contains(&uid) && !known_to_nss(uid);
    for _ in 0..64 {
        let random = u64::from_le_bytes(
            uuid::Uuid::new_v4().as_bytes()[..8]
                .try_into()
                .unwrap_or([0; 8]),
        );
        let candidate = (range.first + (random % span) as u32) & !1;
        if free(candidate) && free(candidate + 1) && !used.contains(&candidate.saturating_sub(1)) {
            return Uid::new(candidate);
        }
    }
    Err(Error::Uid {
        id: "uid-range-exhausted",
        reason: format!(
            "no free uid in {}-{} after 64 tries ({} held by live allocations)",
            range.first,
            range.last,
            used.iter().filter(|u| range.contains(**u)).count()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_stay_within_bounds() {
        assert_eq!(
            "1100000-1999999".parse::<UidRange>().unwrap(),
            UidRange::default()
        );
        for bad in [
            "",
            "5",
            "0-10",
            "1000-2000",
            "2000000-1999999",
            "70000-3000000",
            "a-b",
        ] {
            assert!(bad.parse::<UidRange>().is_err(), "{bad}");
        }
        assert!(Uid::new(0).is_err());
        assert!(Uid::new(MAX_UID + 1).is_err());
        assert!(serde_json::from_str::<Uid>("0").is_err());
        assert_eq!(
            serde_json::from_str::<Uid>("1500000").unwrap().get(),
            1_500_000
        );
    }

    #[test]
    fn host_accounts_and_subordinate_ranges_are_read() {
        let ranges = host_ranges(
            "root:x:0:0::/root:/bin/sh\nsvc:x:1500000:1500001::/:/bin/false\n# c\nbad line\n",
            "wheel:x:10:\n",
            "alice:100000:65536\n",
            "alice:1200000:10\n",
        );
        let range = UidRange::default();
        let hits: Vec<_> = ranges
            .iter()
            .filter(|(a, b)| range.overlaps(*a, *b))
            .collect();
        assert_eq!(
            hits,
            [
                &(1_500_000, 1_500_000),
                &(1_500_001, 1_500_001),
                &(1_200_000, 1_200_009)
            ]
        );
        assert!(!range.overlaps(100_000, 165_535));
    }
}
