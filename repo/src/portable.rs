//! Names a Windows or macOS checkout cannot hold, as the commit refuses them by default
//! (`non-portable`): what Git for Windows' `is_valid_win32_path` (`compat/mingw.c`) refuses with
//! `core.protectNTFS` on, and a little more, each part of a path on its own:
//! - a reserved device name (`CON`, `PRN`, `AUX`, `NUL`, `COM0`-`COM9`, `LPT0`-`LPT9`, the
//!   superscript `COM¹`-`COM³` and `LPT¹`-`LPT³` Windows also reserves, `CONIN$`, `CONOUT$`), in
//!   any case, alone or followed by spaces, an extension or a stream (`aux.c`, `NUL .txt`,
//!   `con:x`): Git for Windows refuses these (COM0 and LPT0 too, a little more than it does);
//! - a trailing `.` or space (Windows drops it: `a.` is `a` there);
//! - `<`, `>`, `:`, `"`, `|`, `?`, `*` (Windows refuses them; macOS shows `:` as `/`). Control
//!   characters and `\` are refused for every receiver already (`bad-character`).
//!
//! Names that differ only after Unicode normalisation or case folding are the tree rules'
//! (`case-collision`): that is a pair, not a name.

/// The device names Windows reserves.
const RESERVED: [&str; 6] = ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"];
/// The numbered ones: `COM` and `LPT` followed by one of these.
const NUMBERED: [&str; 2] = ["COM", "LPT"];
const DIGITS: &str = "0123456789\u{b9}\u{b2}\u{b3}";
/// Characters no Windows name holds.
const WINDOWS_REFUSES: &[char] = &['<', '>', ':', '"', '|', '?', '*'];

/// Why each part of `path` cannot be checked out on Windows or macOS (empty: it can), each with
/// the prefix of `path` that ends with that part (the caller leaves out what base already holds).
pub fn refusals(path: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut end = 0;
    for part in path.split('/') {
        end += part.len();
        let prefix = &path[..end];
        end += 1;
        if let Some(name) = reserved(part) {
            out.push((
                prefix,
                format!("part {part:?} is the Windows device {name}"),
            ));
        }
        if part != "." && part != ".." && part.ends_with(['.', ' ']) {
            out.push((
                prefix,
                format!("part {part:?} ends with a dot or space (Windows drops it)"),
            ));
        }
        if let Some(c) = part.chars().find(|c| WINDOWS_REFUSES.contains(c)) {
            out.push((
                prefix,
                format!("part {part:?} holds {c:?} (Windows refuses it)"),
            ));
        }
    }
    out
}

/// The reserved device name `part` is, if it is one: its stem (up to the first `.` or `:`),
/// without trailing spaces, is one of them, in any case.
fn reserved(part: &str) -> Option<String> {
    let stem = part
        .split(['.', ':'])
        .next()
        .unwrap_or(part)
        .trim_end_matches(' ');
    let upper = stem.to_uppercase();
    if RESERVED.contains(&upper.as_str()) {
        return Some(upper);
    }
    let numbered = NUMBERED.iter().any(|prefix| {
        upper.strip_prefix(prefix).is_some_and(|rest| {
            let mut chars = rest.chars();
            chars.next().is_some_and(|c| DIGITS.contains(c)) && chars.next().is_none()
        })
    });
    numbered.then_some(upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_a_windows_or_macos_checkout_cannot_hold_is_refused() {
        for path in [
            "CON",
            "con",
            "aux.c",
            "src/NUL.txt",
            "COM1",
            "com9.log",
            "COM0",
            "COM\u{b9}",
            "LPT9.log",
            "lpt\u{b3}",
            "PRN",
            "CONIN$",
            "conout$.x",
            "NUL .txt",
            "CON  ",
            "aux:stream",
            "a.",
            "a ",
            "dir./x",
            "a:b",
            "a<b",
            "a>b",
            "a\"b",
            "a|b",
            "a?b",
            "a*b",
        ] {
            assert!(!refusals(path).is_empty(), "{path:?} passes");
        }
    }

    #[test]
    fn ordinary_names_and_look_alikes_pass() {
        for path in [
            "src/main.rs",
            "CONFIG",
            "console.log",
            "auxiliary.c",
            "null.txt",
            "COM10",
            "COM",
            "LPT",
            "lpt1x",
            "com1x.txt",
            "CONIN",
            "a.b",
            ".hidden",
            "a b",
            "ünïcödé",
            "日本語/ファイル",
            ".gitignore",
        ] {
            assert!(refusals(path).is_empty(), "{path:?}");
        }
    }

    #[test]
    fn every_part_is_looked_at_with_its_prefix() {
        let found: Vec<&str> = refusals("CON/a./b:c").into_iter().map(|(p, _)| p).collect();
        assert_eq!(found, ["CON", "CON/a.", "CON/a./b:c"]);
    }
}
