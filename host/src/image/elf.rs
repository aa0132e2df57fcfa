//! What a dynamically linked binary needs to run: its interpreter (`PT_INTERP`) and the closure of
//! its `DT_NEEDED` libraries, each found in a list of directories as the dynamic loader's default
//! search finds it. Only the ELF header, the program headers, the dynamic segment and its string
//! table are read (through [`ReadCache`]), so a 400 MB binary is not read into memory; the
//! section headers and symbol tables are never touched.
//!
//! The libraries and the interpreter are the host's own files: a link among them (`libc.so.6`, the
//! interpreter at `/lib64`) is followed to read them. `DT_RPATH`, `DT_RUNPATH` and the loader's
//! cache are not consulted: the image holds every library in one directory.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use object::elf::{Dyn64, FileHeader64, ProgramHeader64, ET_DYN, ET_EXEC};
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::read::{ReadCache, StringTable};
use object::Endianness;

use crate::error::{Error, Result};

/// The most libraries one closure may hold.
pub const MAX_LIBRARIES: usize = 128;
/// The longest `DT_NEEDED` name (a file name: `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// The longest interpreter path (`PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// The largest dynamic segment read (a real one is a few hundred bytes).
const MAX_DYNAMIC_BYTES: u64 = 1 << 20;
/// The largest dynamic string table accepted (libc's is about 30 KiB).
const MAX_STRTAB_BYTES: u64 = 16 << 20;

/// A binary's interpreter and every library it needs, transitively.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Closure {
    /// The `PT_INTERP` path as written (`/lib64/ld-linux-x86-64.so.2`); `None` for a static
    /// binary.
    pub interpreter: Option<String>,
    /// Every library needed, each once, in the order the search met them (breadth first). A name
    /// the interpreter itself provides (its `DT_SONAME`, which the loader matches without a file)
    /// is not listed.
    pub libraries: Vec<Library>,
}

/// One needed library.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Library {
    /// The `DT_NEEDED` name (`libc.so.6`).
    pub soname: String,
    /// Where it was found (in the first of the directories that has it; not resolved further).
    pub host_path: PathBuf,
}

/// Where the loader of an x86-64 glibc system looks by default, in this order.
pub fn default_lib_dirs() -> Vec<PathBuf> {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// What one ELF file says about its dynamic linking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dynamic {
    /// `e_type`: [`ET_EXEC`] or [`ET_DYN`] (nothing else is accepted).
    pub kind: object::elf::FileType,
    /// The `PT_INTERP` path, checked to be absolute and clean.
    pub interpreter: Option<String>,
    /// The `DT_NEEDED` names, checked to be plain file names, in file order.
    pub needed: Vec<String>,
    /// The `DT_SONAME`, when it has one.
    pub soname: Option<String>,
}

fn refused(what: &Path, why: impl std::fmt::Display) -> Error {
    Error::Build(format!("{}: {why}", what.display()))
}

/// Read the dynamic linking facts of the ELF file open as `file` (`what` names it in errors): an
/// ELF64 little-endian x86-64 executable or shared object.
pub fn read_dynamic(file: &File, what: &Path) -> Result<Dynamic> {
    let cache = ReadCache::new(file);
    let data = &cache;
    let (header, endian, kind) = checked_header(data, what)?;
    let segments = header
        .program_headers(endian, data)
        .map_err(|e| refused(what, format!("unreadable program headers: {e}")))?;
    let (interpreter, dynamic) = interpreter_and_dynamic(segments, endian, data, what)?;
    let (needed, soname) =
        needed_and_soname(dynamic.unwrap_or_default(), segments, endian, data, what)?;
    Ok(Dynamic {
        kind,
        interpreter,
        needed,
        soname,
    })
}

/// The ELF header, if it is an ELF64 little-endian x86-64 executable or shared object; its
/// byte order and its type.
fn checked_header<'d>(
    data: &'d ReadCache<&File>,
    what: &Path,
) -> Result<(
    &'d FileHeader64<Endianness>,
    Endianness,
    object::elf::FileType,
)> {
    let header = FileHeader64::<Endianness>::parse(data)
        .map_err(|e| refused(what, format!("not an ELF64 file: {e}")))?;
    let endian = header
        .endian()
        .map_err(|e| refused(what, format!("not an ELF64 file: {e}")))?;
    if endian != Endianness::Little {
        return Err(refused(what, "a big-endian ELF file, not x86-64"));
    }
    let machine = header.e_machine(endian);
    if machine != object::elf::EM_X86_64 {
        return Err(refused(
            what,
            format!("an ELF file for machine {machine}, not x86-64 (62)"),
        ));
    }
    let kind = header.e_type(endian);
    if kind != ET_EXEC && kind != ET_DYN {
        return Err(refused(
            what,
            format!("ELF type {kind}: neither an executable nor a shared object"),
        ));
    }
    Ok((header, endian, kind))
}

/// The entries of a dynamic segment, as read in place.
type DynamicEntries<'d> = &'d [Dyn64<Endianness>];

/// The program headers' `PT_INTERP` path (checked) and dynamic segment: at most one of each,
/// each bounded before it is read.
fn interpreter_and_dynamic<'d>(
    segments: &'d [ProgramHeader64<Endianness>],
    endian: Endianness,
    data: &'d ReadCache<&File>,
    what: &Path,
) -> Result<(Option<String>, Option<DynamicEntries<'d>>)> {
    let mut interpreter = None;
    let mut dynamic = None;
    for segment in segments {
        match segment.p_type(endian) {
            object::elf::PT_INTERP => {
                if interpreter.is_some() {
                    return Err(refused(what, "more than one PT_INTERP"));
                }
                if segment.p_filesz(endian) > MAX_PATH_BYTES as u64 + 1 {
                    return Err(refused(
                        what,
                        format!("its PT_INTERP is longer than {MAX_PATH_BYTES} bytes"),
                    ));
                }
                let path = segment
                    .interpreter(endian, data)
                    .map_err(|e| refused(what, format!("unreadable PT_INTERP: {e}")))?
                    .unwrap_or_default();
                interpreter = Some(interpreter_path(what, path)?);
            }
            object::elf::PT_DYNAMIC => {
                if dynamic.is_some() {
                    return Err(refused(what, "more than one PT_DYNAMIC"));
                }
                if segment.p_filesz(endian) > MAX_DYNAMIC_BYTES {
                    return Err(refused(
                        what,
                        format!("a dynamic segment larger than {MAX_DYNAMIC_BYTES} bytes"),
                    ));
                }
                dynamic = segment
                    .dynamic(endian, data)
                    .map_err(|e| refused(what, format!("unreadable dynamic segment: {e}")))?;
            }
            _ => {}
        }
    }
    Ok((interpreter, dynamic))
}

/// The `DT_NEEDED` names (in file order) and the `DT_SONAME` of a dynamic segment (up to its
/// `DT_NULL`), read from its string table, which must be bounded and inside one `PT_LOAD`'s file
/// image; each a plain library name.
fn needed_and_soname(
    dynamic: &[Dyn64<Endianness>],
    segments: &[ProgramHeader64<Endianness>],
    endian: Endianness,
    data: &ReadCache<&File>,
    what: &Path,
) -> Result<(Vec<String>, Option<String>)> {
    let mut needed_offsets = Vec::new();
    let mut soname_offset = None;
    let (mut strtab, mut strsz) = (None, None);
    for entry in dynamic {
        match entry.tag(endian) {
            object::elf::DT_NULL => break,
            object::elf::DT_NEEDED => needed_offsets.push(entry.val(endian)),
            object::elf::DT_SONAME => soname_offset = Some(entry.val(endian)),
            object::elf::DT_STRTAB => strtab = Some(entry.val(endian)),
            object::elf::DT_STRSZ => strsz = Some(entry.val(endian)),
            _ => {}
        }
    }
    let mut needed = Vec::new();
    let mut soname = None;
    if needed_offsets.is_empty() && soname_offset.is_none() {
        return Ok((needed, soname));
    }
    let (Some(address), Some(size)) = (strtab, strsz) else {
        return Err(refused(
            what,
            "DT_NEEDED or DT_SONAME without DT_STRTAB and DT_STRSZ",
        ));
    };
    if size > MAX_STRTAB_BYTES {
        return Err(refused(
            what,
            format!("a dynamic string table larger than {MAX_STRTAB_BYTES} bytes"),
        ));
    }
    let start = file_offset(segments, endian, address, size).ok_or_else(|| {
        refused(
            what,
            format!("DT_STRTAB {address:#x} (+{size}) is not in the file image of a PT_LOAD"),
        )
    })?;
    let strings = StringTable::new(data, start, start + size);
    let string = |offset: u64, tag: &str| -> Result<String> {
        let bytes = u32::try_from(offset)
            .ok()
            .and_then(|o| strings.get(o).ok())
            .ok_or_else(|| refused(what, format!("{tag} string at {offset:#x} unreadable")))?;
        library_name(what, bytes)
    };
    for offset in needed_offsets {
        needed.push(string(offset, "DT_NEEDED")?);
    }
    if let Some(offset) = soname_offset {
        soname = Some(string(offset, "DT_SONAME")?);
    }
    Ok((needed, soname))
}

/// The file offset of `size` bytes at virtual `address`, when one `PT_LOAD`'s file image holds
/// them all.
fn file_offset(
    segments: &[ProgramHeader64<Endianness>],
    endian: Endianness,
    address: u64,
    size: u64,
) -> Option<u64> {
    segments
        .iter()
        .filter(|s| s.p_type(endian) == object::elf::PT_LOAD)
        .find_map(|s| {
            let vaddr = s.p_vaddr(endian);
            let within = address.checked_sub(vaddr)?;
            let end = within.checked_add(size)?;
            (end <= s.p_filesz(endian)).then(|| s.p_offset(endian).checked_add(within))?
        })
}

/// A `PT_INTERP` path: UTF-8, absolute, clean (no empty, `.` or `..` component, no trailing
/// slash), at most [`MAX_PATH_BYTES`].
fn interpreter_path(what: &Path, bytes: &[u8]) -> Result<String> {
    let path = std::str::from_utf8(bytes)
        .map_err(|_| refused(what, "its PT_INTERP is not UTF-8"))?
        .to_owned();
    let bad = |why: &str| refused(what, format!("its PT_INTERP {path:?} {why}"));
    if path.len() > MAX_PATH_BYTES {
        return Err(bad(&format!("is longer than {MAX_PATH_BYTES} bytes")));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad("is not absolute"));
    };
    if rest
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(bad("is not a clean path"));
    }
    Ok(path)
}

/// A `DT_NEEDED` (or `DT_SONAME`) name: UTF-8, a plain file name of at most [`MAX_NAME_BYTES`].
fn library_name(what: &Path, bytes: &[u8]) -> Result<String> {
    let name = std::str::from_utf8(bytes)
        .map_err(|_| refused(what, format!("a library name that is not UTF-8: {bytes:?}")))?;
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.len() > MAX_NAME_BYTES
    {
        return Err(refused(
            what,
            format!(
                "needs {name:?}, which is not a plain file name of at most {MAX_NAME_BYTES} bytes"
            ),
        ));
    }
    Ok(name.to_owned())
}

/// Open a host file to read its headers: without blocking (a FIFO cannot stall us), and it must
/// be a regular file once open.
fn open_host(path: &Path) -> Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("fstat of {}", path.display()), e))?;
    if !meta.is_file() {
        return Err(refused(path, "not a regular file"));
    }
    Ok(file)
}

/// The closure of the binary at `binary` (a host file; see [`closure_of`]).
pub fn closure(binary: &Path, lib_dirs: &[PathBuf]) -> Result<Closure> {
    closure_of(&open_host(binary)?, binary, lib_dirs)
}

/// The closure of the binary open as `file` (`binary` names it in errors): its interpreter,
/// read at that path on the host, and every library it or they need, each found in the first of
/// `lib_dirs` that has it (at most [`MAX_LIBRARIES`]). Each must be an ELF64 x86-64 shared
/// object; a name found nowhere is an error naming it and the directories searched.
pub fn closure_of(file: &File, binary: &Path, lib_dirs: &[PathBuf]) -> Result<Closure> {
    let root = read_dynamic(file, binary)?;
    // Each queued name with what needs it (for errors).
    let mut queue: VecDeque<(String, PathBuf)> = root
        .needed
        .iter()
        .map(|n| (n.clone(), binary.to_path_buf()))
        .collect();
    let mut provided = HashSet::new();
    if let Some(interpreter) = &root.interpreter {
        let path = Path::new(interpreter);
        let loader = read_dynamic(&open_host(path)?, path)?;
        if loader.kind != ET_DYN || loader.interpreter.is_some() {
            return Err(refused(
                path,
                "the interpreter is not a self-contained shared object (ET_DYN without PT_INTERP)",
            ));
        }
        provided.extend(loader.soname);
        queue.extend(loader.needed.into_iter().map(|n| (n, path.to_path_buf())));
    }
    let mut libraries: Vec<Library> = Vec::new();
    while let Some((name, needed_by)) = queue.pop_front() {
        if provided.contains(&name) {
            continue;
        }
        if libraries.len() == MAX_LIBRARIES {
            return Err(refused(
                binary,
                format!("needs more than {MAX_LIBRARIES} libraries (the next is {name})"),
            ));
        }
        let host_path = find(&name, &needed_by, lib_dirs)?;
        let library = read_dynamic(&open_host(&host_path)?, &host_path)?;
        if library.kind != ET_DYN {
            return Err(refused(&host_path, "not a shared object (ET_DYN)"));
        }
        provided.insert(name.clone());
        queue.extend(library.needed.into_iter().map(|n| (n, host_path.clone())));
        libraries.push(Library {
            soname: name,
            host_path,
        });
    }
    Ok(Closure {
        interpreter: root.interpreter,
        libraries,
    })
}

/// The first `dir/name` of `lib_dirs` that is a file (links followed: these are the host's own).
fn find(name: &str, needed_by: &Path, lib_dirs: &[PathBuf]) -> Result<PathBuf> {
    for dir in lib_dirs {
        let candidate = dir.join(name);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => return Ok(candidate),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(Error::io(format!("looking for {}", candidate.display()), e)),
        }
    }
    Err(Error::Build(format!(
        "library {name} (needed by {}) not found in {}",
        needed_by.display(),
        lib_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A dynamic binary of the host.
    fn host_dynamic_binary() -> PathBuf {
        ["/bin/ls", "/usr/bin/ls", "/bin/cat", "/usr/bin/env"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| {
                closure(p, &default_lib_dirs())
                    .map(|c| c.interpreter.is_some())
                    .unwrap_or(false)
            })
            .expect("no dynamic binary on the host")
    }

    /// What `ldd` says `binary` needs: (name, path) of every `name => path` line, and the
    /// interpreter line.
    fn ldd(binary: &Path) -> (Vec<(String, PathBuf)>, Option<String>) {
        let out = std::process::Command::new("ldd")
            .arg(binary)
            .output()
            .expect("ldd");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut libs = Vec::new();
        let mut interpreter = None;
        for line in text.lines().map(str::trim) {
            if let Some((name, rest)) = line.split_once(" => ") {
                let path = rest.split(" (").next().unwrap();
                libs.push((name.to_owned(), PathBuf::from(path)));
            } else if line.starts_with('/') {
                interpreter = line.split(" (").next().map(str::to_owned);
            }
        }
        libs.sort();
        (libs, interpreter)
    }

    #[test]
    fn a_dynamic_binary_needs_what_ldd_says() {
        let binary = host_dynamic_binary();
        let found = closure(&binary, &default_lib_dirs()).unwrap();
        let (expected, interpreter) = ldd(&binary);
        assert_eq!(found.interpreter, interpreter, "{found:?}");
        // The same files, whichever link or merged-/usr alias each was found by.
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap();
        let mut got: Vec<(String, PathBuf)> = found
            .libraries
            .iter()
            .map(|l| (l.soname.clone(), canonical(&l.host_path)))
            .collect();
        got.sort();
        let expected: Vec<(String, PathBuf)> = expected
            .into_iter()
            .map(|(n, p)| (n, canonical(&p)))
            .collect();
        assert_eq!(got, expected);
        assert!(found.libraries.iter().any(|l| l.soname == "libc.so.6"));
        // The interpreter provides its own name: it is not listed again.
        assert!(!found
            .libraries
            .iter()
            .any(|l| l.soname.starts_with("ld-linux")));
    }

    #[test]
    fn the_search_order_and_a_missing_library_are_reported() {
        let binary = host_dynamic_binary();
        let nowhere = vec![PathBuf::from("/nonexistent-cordon-lib-dir")];
        let e = closure(&binary, &nowhere).unwrap_err().to_string();
        assert!(
            e.contains("not found in /nonexistent-cordon-lib-dir") && e.contains("needed by"),
            "{e}"
        );
    }

    #[test]
    fn a_text_file_is_not_elf() {
        let dir = std::env::temp_dir().join(format!("cordon-elf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("script");
        std::fs::write(&path, "#!/bin/sh\necho hello\n").unwrap();
        let result = closure(&path, &default_lib_dirs());
        std::fs::remove_dir_all(&dir).unwrap();
        let e = result.unwrap_err().to_string();
        assert!(e.contains("not an ELF64 file"), "{e}");
        assert!(closure(Path::new("/etc"), &default_lib_dirs()).is_err());
    }

    #[test]
    fn a_static_binary_needs_nothing() {
        // Debian's ldconfig is static-pie; skip where the host has no static binary there.
        let path = Path::new("/sbin/ldconfig");
        let Ok(found) = closure(path, &default_lib_dirs()) else {
            return;
        };
        if found.interpreter.is_none() {
            assert!(found.libraries.is_empty(), "{found:?}");
        }
    }

    #[test]
    fn the_test_runner_itself_has_a_closure() {
        // A Rust test binary: dynamic, needs libc (and libgcc_s, usually).
        let me = std::env::current_exe().unwrap();
        let found = closure(&me, &default_lib_dirs()).unwrap();
        assert!(found.interpreter.is_some());
        assert!(found.libraries.iter().any(|l| l.soname == "libc.so.6"));
    }

    #[test]
    fn names_and_interpreter_paths_are_checked() {
        let what = Path::new("x");
        assert!(library_name(what, b"libc.so.6").is_ok());
        for bad in [
            &b""[..],
            b".",
            b"..",
            b"../libc.so.6",
            b"/lib/libc.so.6",
            b"\xff",
        ] {
            assert!(library_name(what, bad).is_err(), "{bad:?}");
        }
        assert!(library_name(what, &[b'a'; 256]).is_err());
        assert!(library_name(what, &[b'a'; 255]).is_ok());
        assert!(interpreter_path(what, b"/lib64/ld-linux-x86-64.so.2").is_ok());
        for bad in [
            &b"lib64/ld.so"[..],
            b"/lib64//ld.so",
            b"/lib64/./ld.so",
            b"/lib64/../ld.so",
            b"/lib64/",
            b"/",
            b"",
        ] {
            assert!(interpreter_path(what, bad).is_err(), "{bad:?}");
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert!(interpreter_path(what, long.as_bytes()).is_err());
    }
}
