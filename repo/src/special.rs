//! The two blobs git's fsck reads as well as stores: `.gitmodules` and `.gitattributes` (at any
//! depth, by any alias of their names). The commit checks what the agent wrote there before
//! fast-import, as `fsck.c` would (`fsck_gitmodules_fn`, `fsck_blob`), and refuses a little
//! more; `git fsck --strict` still runs after, and its refusal is a refusal too
//! ([`super::build::fsck_and_bundle`]).
//!
//! - `.gitmodules` (`gitmodules`): parsed by git's own config parser (`git config --file
//!   --no-includes --list`, on a controller-owned scratch file: no include is followed, nothing
//!   runs); a file that does not parse or is over [`MAX_GITMODULES_BYTES`] is refused; then per
//!   `submodule.<name>.<key>`: an empty name or a `..` part (`/` or `\`), a url or path that is an
//!   option (`-...`), a url that holds a control character once %-decoded or escapes with
//!   leading `../` into `:` or `/`, a path with a control character (the CR-in-a-path shape),
//!   and `update = !command`.
//! - `.gitattributes` (`gitattributes`): a line of 2,048 bytes or more (git's
//!   `ATTR_MAX_LINE_LENGTH`; git ignores the line and fsck refuses the blob), read as git reads it
//!   (up to the first NUL), or a file over 100 MB (`ATTR_MAX_FILE_SIZE`).

use std::collections::BTreeMap;
use std::path::Path;

use cordon_contract::audit::{Change, CommitFinding, CommitReason, Kind};

use crate::error::{Error, Result};
use crate::git::{Git, Input};

/// A `.gitmodules` over this is refused without parsing.
pub const MAX_GITMODULES_BYTES: usize = 1024 * 1024;
/// git's `ATTR_MAX_LINE_LENGTH`: a line this long or longer is not parsed.
pub const MAX_ATTRIBUTES_LINE: usize = 2048;
/// git's `ATTR_MAX_FILE_SIZE`.
pub const MAX_ATTRIBUTES_BYTES: u64 = 100 * 1024 * 1024;
/// The most of `git config --list` read back.
const MAX_LISTING_BYTES: usize = 4 * 1024 * 1024;

/// Which of the two a path names (its last part, or any HFS+/NTFS alias of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Special {
    Gitmodules,
    Gitattributes,
}

impl Special {
    /// What `path` is, if it is one of them.
    pub fn of(path: &str) -> Option<Special> {
        let last = path.rsplit(['/', '\\']).next().unwrap_or(path);
        if super::paths::is_dot_name(last, "gitmodules", b"gi7eba") {
            Some(Special::Gitmodules)
        } else if super::paths::is_dot_name(last, "gitattributes", b"gi7d29") {
            Some(Special::Gitattributes)
        } else {
            None
        }
    }
}

/// Every new file of `changes` that is a `.gitmodules` or a `.gitattributes`: (path, kind,
/// blob id). A link of either name is refused by the path rules; content base holds under
/// either name is base's (and `git fsck`'s).
pub fn paths_of(changes: &[Change]) -> Vec<(String, Special, String)> {
    changes
        .iter()
        .filter_map(|change| {
            let new = change.new.as_ref()?;
            if !matches!(new.kind, Kind::File | Kind::Executable) {
                return None;
            }
            let kind = Special::of(&change.path)?;
            Some((change.path.clone(), kind, new.blob.clone()?))
        })
        .collect()
}

/// What the stream saw of one blob a special path holds, read as it streamed.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The bytes, up to [`MAX_GITMODULES_BYTES`] (`.gitmodules` only).
    pub bytes: Vec<u8>,
    /// More than [`MAX_GITMODULES_BYTES`] came (`.gitmodules`).
    pub over: bool,
    /// The blob's size.
    pub size: u64,
    /// The longest line before the first NUL, and whether a NUL ended the reading.
    pub longest_line: usize,
    line: usize,
    stopped: bool,
    keep: bool,
}

impl Seen {
    /// Ready for a blob a path of `kind` holds.
    pub fn new(kind: Special) -> Seen {
        Seen {
            keep: kind == Special::Gitmodules,
            ..Seen::default()
        }
    }

    /// The next bytes of the blob.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.size += chunk.len() as u64;
        if self.keep {
            let room = MAX_GITMODULES_BYTES.saturating_sub(self.bytes.len());
            self.bytes
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.over |= chunk.len() > room;
        }
        for &b in chunk {
            if self.stopped {
                break;
            }
            match b {
                0 => self.stopped = true,
                b'\n' => self.line = 0,
                _ => {
                    self.line += 1;
                    self.longest_line = self.longest_line.max(self.line);
                }
            }
        }
    }
}

/// The findings for every special path of the commit, from what the stream saw of each blob:
/// `special` holds (path, kind, blob id), `seen` what was read of each blob id. A blob not seen
/// (content base already holds, reached by a hard link) is left to `git fsck`. `scratch` is a
/// controller-owned directory for the config parser's input.
pub async fn findings(
    git: &Git,
    scratch: &Path,
    special: &[(String, Special, String)],
    seen: &BTreeMap<String, Seen>,
) -> Result<Vec<CommitFinding>> {
    let mut out = Vec::new();
    let mut parsed: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (path, kind, blob) in special {
        let Some(seen) = seen.get(blob) else {
            continue;
        };
        let (reason, details) = match kind {
            Special::Gitattributes => (CommitReason::Gitattributes, attributes(seen)),
            Special::Gitmodules => {
                if !parsed.contains_key(blob.as_str()) {
                    let details = gitmodules(git, scratch, seen).await?;
                    parsed.insert(blob, details);
                }
                let details = parsed.get(blob.as_str()).cloned().unwrap_or_default();
                (CommitReason::Gitmodules, details)
            }
        };
        out.extend(details.into_iter().map(|detail| CommitFinding {
            path: path.clone(),
            reason,
            detail,
        }));
    }
    Ok(out)
}

/// `.gitattributes`: its size and its longest line.
fn attributes(seen: &Seen) -> Vec<String> {
    let mut out = Vec::new();
    if seen.size > MAX_ATTRIBUTES_BYTES {
        out.push(format!(
            "{} bytes: git parses at most {MAX_ATTRIBUTES_BYTES} (gitattributesLarge)",
            seen.size
        ));
    }
    if seen.longest_line >= MAX_ATTRIBUTES_LINE {
        out.push(format!(
            "a line of {} bytes: git parses none of {MAX_ATTRIBUTES_LINE} or more \
             (gitattributesLineLength)",
            seen.longest_line
        ));
    }
    out
}

/// `.gitmodules`: parsed by git on a scratch copy, then each submodule key checked.
async fn gitmodules(git: &Git, scratch: &Path, seen: &Seen) -> Result<Vec<String>> {
    if seen.over {
        return Ok(vec![format!(
            "{} bytes: at most {MAX_GITMODULES_BYTES} are read",
            seen.size
        )]);
    }
    let file = scratch.join(format!("gitmodules-{}", uuid::Uuid::new_v4().simple()));
    write_new(&file, &seen.bytes)?;
    let listed = list_config(git, &file).await;
    let _ = std::fs::remove_file(&file);
    let Some(entries) = listed? else {
        return Ok(vec![
            "does not parse as git config (gitmodulesParse)".to_owned()
        ]);
    };
    let mut found: Vec<String> = entries
        .iter()
        .flat_map(|(key, value)| submodule_refusals(key, value.as_deref()))
        .collect();
    // A bad name shows once, however many keys it has.
    found.sort();
    found.dedup();
    Ok(found)
}

/// Write `bytes` to a new file only the controller reads.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut file = crate::scratch::create_private(path)?;
    file.write_all(bytes)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Every `(key, value)` of a config file as git reads it, without following includes; `None`
/// when git does not parse it.
async fn list_config(git: &Git, file: &Path) -> Result<Option<Vec<(String, Option<String>)>>> {
    let path = file
        .to_str()
        .ok_or_else(|| Error::Internal("the scratch path is not UTF-8".into()))?;
    let listed = git
        .run_bounded(
            "config --list",
            &[
                "config",
                "--file",
                path,
                "--no-includes",
                "--null",
                "--list",
            ],
            Input::None,
            MAX_LISTING_BYTES,
        )
        .await;
    let out = match listed {
        Ok((out, false)) => out,
        Ok((_, true)) => return Ok(None),
        Err(Error::Git { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(
        out.split(|&b| b == 0)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let text = String::from_utf8_lossy(entry);
                match text.split_once('\n') {
                    Some((key, value)) => (key.to_owned(), Some(value.to_owned())),
                    None => (text.into_owned(), None),
                }
            })
            .collect(),
    ))
}

/// Why one config entry of a `.gitmodules` is refused (`fsck_gitmodules_fn`, and a little
/// more): its name, and its value. git lowercases the section and the key, never the subsection
/// (the name).
fn submodule_refusals(key: &str, value: Option<&str>) -> Vec<String> {
    let Some((name, var)) = key
        .strip_prefix("submodule.")
        .and_then(|rest| rest.rsplit_once('.'))
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    if !name_ok(name) {
        found.push(format!(
            "submodule name {name:?}: empty or a `..` part (gitmodulesName)"
        ));
    }
    found.extend(value.and_then(|value| value_refusal(name, var, value)));
    found
}

/// Why a submodule's `var = value` is refused, if it is.
fn value_refusal(name: &str, var: &str, value: &str) -> Option<String> {
    match var {
        "url" => url_refusal(value).map(|why| format!("submodule {name:?} url {value:?}: {why}")),
        "path" if value.starts_with('-') => Some(format!(
            "submodule {name:?} path {value:?}: an option (gitmodulesPath)"
        )),
        "path" if value.chars().any(char::is_control) => Some(format!(
            "submodule {name:?} path {value:?}: a control character"
        )),
        "update" if value.trim_start().starts_with('!') => Some(format!(
            "submodule {name:?} update {value:?}: a command (gitmodulesUpdate)"
        )),
        _ => None,
    }
}

/// git's `check_submodule_name`: not empty, no `..` part between `/` or `\` separators.
fn name_ok(name: &str) -> bool {
    !name.is_empty() && !name.split(['/', '\\']).any(|part| part == "..")
}

/// Why a submodule url is refused (git's `check_submodule_url`, stricter: every url form, not
/// only relative and `git://` ones, is %-decoded and checked for any control character).
fn url_refusal(url: &str) -> Option<&'static str> {
    if url.starts_with('-') {
        return Some("an option (gitmodulesUrl)");
    }
    if percent_decoded(url).iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Some("a control character once %-decoded (gitmodulesUrl)");
    }
    // `count_leading_dotdots`: `./` and `../` prefixes; at least one `../` followed by `:` or a
    // separator escapes the url's root (CVE-2020-11008).
    let mut rest = url;
    let mut dotdots = 0;
    loop {
        if let Some(after) = rest
            .strip_prefix("../")
            .or_else(|| rest.strip_prefix("..\\"))
        {
            dotdots += 1;
            rest = after;
        } else if let Some(after) = rest.strip_prefix("./").or_else(|| rest.strip_prefix(".\\")) {
            rest = after;
        } else {
            break;
        }
    }
    if dotdots > 0 && rest.starts_with([':', '/', '\\']) {
        return Some("escapes its root with `../` (gitmodulesUrl)");
    }
    None
}

/// `%XX` decoded (an incomplete escape is kept as it is), as git's `url_decode` does.
fn percent_decoded(url: &str) -> Vec<u8> {
    let bytes = url.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_and_their_aliases_are_special() {
        for path in [".gitmodules", "a/.GITMODULES", "gitmod~1", "x/.gitmodules."] {
            assert_eq!(Special::of(path), Some(Special::Gitmodules), "{path}");
        }
        for path in [".gitattributes", "deep/.GitAttributes", "gitatt~1"] {
            assert_eq!(Special::of(path), Some(Special::Gitattributes), "{path}");
        }
        for path in [
            "gitmodules",
            ".gitmodules/x",
            "a.gitattributes",
            ".gitignore",
        ] {
            assert_eq!(Special::of(path), None, "{path}");
        }
    }

    #[test]
    fn hostile_submodule_entries_are_refused() {
        for (key, value) in [
            ("submodule.../../x.url", Some("./x")),
            ("submodule.a/../../b.path", Some("b")),
            ("submodule.a\\..\\b.path", Some("b")),
            ("submodule..url", Some("./x")),
            ("submodule.x.url", Some("-oProxyCommand=touch /tmp/pwn")),
            ("submodule.x.url", Some("./x%0a")),
            ("submodule.x.url", Some("https://host/x%0D")),
            ("submodule.x.url", Some("git://host/%00x")),
            ("submodule.x.url", Some("../:x")),
            ("submodule.x.url", Some(".././/x")),
            ("submodule.x.url", Some("./../..//x")),
            ("submodule.x.path", Some("-x")),
            ("submodule.x.path", Some("sub\r")),
            ("submodule.x.update", Some("!touch /tmp/pwn")),
            ("submodule.x.update", Some(" !cmd")),
        ] {
            assert!(
                !submodule_refusals(key, value).is_empty(),
                "{key} = {value:?} passes"
            );
        }
    }

    #[test]
    fn a_bad_name_does_not_hide_a_bad_value() {
        assert_eq!(
            submodule_refusals("submodule.../x.path", Some("-x")).len(),
            2
        );
    }

    #[test]
    fn ordinary_submodule_entries_pass() {
        for (key, value) in [
            ("submodule.lib.url", Some("https://example.org/lib.git")),
            ("submodule.lib.url", Some("../lib.git")),
            ("submodule.lib.url", Some("./lib")),
            ("submodule.a.b.url", Some("git@example.org:a/b.git")),
            ("submodule.lib.url", Some("https://example.org/%41")),
            ("submodule.lib.path", Some("vendor/lib")),
            ("submodule.lib.update", Some("rebase")),
            ("submodule.lib..name.path", Some("x")),
            (
                "submodule.lib.branch",
                Some("-weird but not read as an option"),
            ),
            ("core.bare", Some("true")),
            ("submodule.lib.shallow", None),
        ] {
            assert_eq!(
                submodule_refusals(key, value),
                Vec::<String>::new(),
                "{key} = {value:?} refused"
            );
        }
    }

    #[test]
    fn attribute_lines_are_measured_as_git_reads_them() {
        let mut seen = Seen::new(Special::Gitattributes);
        seen.feed(&[b'a'; 1000]);
        seen.feed(&[b'a'; 1047]);
        seen.feed(b"\n*.c text\n");
        assert!(attributes(&seen).is_empty(), "2,047 bytes pass");
        seen.feed(&[b'b'; 2048]);
        assert_eq!(attributes(&seen).len(), 1, "2,048 bytes do not");
        // After a NUL git reads nothing more.
        let mut seen = Seen::new(Special::Gitattributes);
        seen.feed(b"*.c text\n\0");
        seen.feed(&[b'x'; 4096]);
        assert!(attributes(&seen).is_empty());
        assert!(seen.bytes.is_empty(), "attributes are measured, not kept");
    }

    #[test]
    fn gitmodules_are_kept_up_to_their_bound() {
        let mut seen = Seen::new(Special::Gitmodules);
        seen.feed(&vec![b'#'; MAX_GITMODULES_BYTES]);
        assert!(!seen.over);
        seen.feed(b"#");
        assert!(seen.over && seen.bytes.len() == MAX_GITMODULES_BYTES);
    }

    #[test]
    fn percent_decoding_is_gits() {
        assert_eq!(percent_decoded("a%0ab%2"), b"a\nb%2".to_vec());
        assert_eq!(percent_decoded("%41%zz%"), b"A%zz%".to_vec());
    }
}
