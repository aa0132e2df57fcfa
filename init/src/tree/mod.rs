//! The `tree` roles, run by the host in a throwaway container: the work volume read-only at
//! /work, the metadata volume read-only at /work/.git, no network, an unprivileged uid. They read
//! the work tree without following any link and print ONE JSON document on stdout:
//!
//! - `cordon-init tree check <BASE> [<OP_JSON>...]`: a [`CheckReport`] (the tree against the index
//!   cordon seeded, each declared [`Operation`] against base);
//! - `cordon-init tree snapshot-links [<PATH>...]`: a [`LinkSnapshot`];
//! - `cordon-init tree inspect <BASE> <RULES_JSON> [<DECLARED_PATH>...]`: an `InspectReport`
//!   (every difference from base's index, with blob ids, base's ignore rules, an `IgnoreRules`,
//!   applied; the declared links now);
//! - `cordon-init tree inspect-content <BASE> <RULES_JSON> [<DECLARED_PATH>...]`: the same
//!   report, once the content of its changes is written as one tar ([`content`]).
//!
//! [`digest`] is the tree digest the seeder, the keeper, these roles and the agent role's check of a
//! shared snapshot share, on the same no-follow primitives ([`fs`]).
//!
//! Each exits 0 with their answer, refusal findings included (the host decides). When the reader
//! cannot do its job it prints a [`ReaderFailure`] instead and exits
//! [`EXIT_INIT_FAILURE`]; a panic prints one too.
//!
//! [`CheckReport`]: cordon_contract::tree::CheckReport
//! [`Operation`]: cordon_contract::tree::Operation
//! [`LinkSnapshot`]: cordon_contract::tree::LinkSnapshot

pub mod check;
pub mod content;
pub mod digest;
pub mod fs;
pub mod index;
pub mod inspect;
pub mod links;

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod inspect_tests;
#[cfg(test)]
mod tests;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use cordon_contract::audit::{
    IgnoreRules, INSPECT, INSPECT_CONTENT, MAX_IGNORE_FILES, MAX_IGNORE_RULES_BYTES,
};
use cordon_contract::paths;
use cordon_contract::report::EXIT_INIT_FAILURE;
use cordon_contract::tree::{
    Operation, ReaderFailure, CHECK, MAX_DECLARED_PATHS, MAX_OPERATIONS, MAX_REPORT_BYTES,
    SNAPSHOT_LINKS,
};

/// A failure's text is at most this long.
const MAX_FAILURE: usize = 4096;

/// Set once the one document is on its way: nothing else is printed after it.
static ANSWERED: AtomicBool = AtomicBool::new(false);

/// The role: argv after `cordon-init tree`.
pub fn main(args: &[String]) -> ! {
    std::panic::set_hook(Box::new(|info| {
        answer_failure(&format!("panic: {info}"));
        // SAFETY: _exit ends the process at once, without running anything else.
        unsafe { libc::_exit(EXIT_INIT_FAILURE) }
    }));
    raise_open_files();
    match run(args, Path::new(paths::WORK), Path::new(paths::METADATA)) {
        Ok(document) => {
            if answer(&document) {
                std::process::exit(0);
            }
            std::process::exit(EXIT_INIT_FAILURE);
        }
        Err(failure) => {
            answer_failure(&failure);
            std::process::exit(EXIT_INIT_FAILURE);
        }
    }
}

/// The document for these arguments over these roots.
pub fn run(args: &[String], work: &Path, metadata: &Path) -> Result<String, String> {
    match args.first().map(String::as_str) {
        Some(CHECK) => {
            let base = args
                .get(1)
                .ok_or_else(|| format!("{CHECK} needs a base commit"))?;
            let ops = &args[2..];
            if ops.len() > MAX_OPERATIONS {
                return Err(format!(
                    "{} operations, more than {MAX_OPERATIONS}",
                    ops.len()
                ));
            }
            let ops = ops
                .iter()
                .enumerate()
                .map(|(n, op)| {
                    serde_json::from_str::<Operation>(op)
                        .map_err(|e| format!("operation {n} is not an operation: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            document(serde_json::to_string(&check::check(
                work, metadata, base, &ops,
            )?))
        }
        Some(SNAPSHOT_LINKS) => {
            let declared = &args[1..];
            if declared.len() > MAX_DECLARED_PATHS {
                return Err(format!(
                    "{} declared paths, more than {MAX_DECLARED_PATHS}",
                    declared.len()
                ));
            }
            document(serde_json::to_string(&links::snapshot_links(
                work, metadata, declared,
            )?))
        }
        Some(INSPECT) => {
            let (base, rules, declared) = inspect_args(&args[1..])?;
            document(serde_json::to_string(&inspect::inspect(
                work, metadata, base, &rules, declared,
            )?))
        }
        Some(INSPECT_CONTENT) => {
            let (base, rules, declared) = inspect_args(&args[1..])?;
            let report = inspect::inspect(work, metadata, base, &rules, declared)?;
            let answer = document(serde_json::to_string(&report))?;
            content::write(work, &report.changes, Path::new(content::CONTENT_FILE))?;
            Ok(answer)
        }
        Some(other) => Err(format!(
            "unknown tree role {:?}: expected {CHECK}, {SNAPSHOT_LINKS}, {INSPECT} or {INSPECT_CONTENT}",
            check::bounded(other.to_owned(), 64)
        )),
        None => Err(format!(
            "a tree role is needed: {CHECK}, {SNAPSHOT_LINKS}, {INSPECT} or {INSPECT_CONTENT}"
        )),
    }
}

/// `inspect`'s arguments after the role: a base commit, base's ignore rules (at most
/// [`MAX_IGNORE_RULES_BYTES`] of JSON, at most [`MAX_IGNORE_FILES`] files), the declared paths
/// (at most [`MAX_DECLARED_PATHS`]).
pub fn inspect_args(args: &[String]) -> Result<(&str, IgnoreRules, &[String]), String> {
    let base = args
        .first()
        .ok_or_else(|| format!("{INSPECT} needs a base commit"))?;
    if !check::is_commit_id(base) {
        return Err(format!(
            "base {:?} is not a commit id (40 lowercase hex digits)",
            check::bounded(base.to_owned(), 64)
        ));
    }
    let rules = args
        .get(1)
        .ok_or_else(|| format!("{INSPECT} needs base's ignore rules (JSON)"))?;
    if rules.len() > MAX_IGNORE_RULES_BYTES {
        return Err(format!(
            "the ignore rules are {} bytes, more than {MAX_IGNORE_RULES_BYTES}",
            rules.len()
        ));
    }
    let rules: IgnoreRules = serde_json::from_str(rules)
        .map_err(|e| format!("the ignore rules are not ignore rules: {e}"))?;
    if rules.files.len() > MAX_IGNORE_FILES {
        return Err(format!(
            "{} ignore files, more than {MAX_IGNORE_FILES}",
            rules.files.len()
        ));
    }
    let declared = &args[2..];
    if declared.len() > MAX_DECLARED_PATHS {
        return Err(format!(
            "{} declared paths, more than {MAX_DECLARED_PATHS}",
            declared.len()
        ));
    }
    Ok((base, rules, declared))
}

/// One answer as JSON, at most [`MAX_REPORT_BYTES`].
pub fn document(text: serde_json::Result<String>) -> Result<String, String> {
    let text = text.map_err(|e| format!("the answer as JSON: {e}"))?;
    if text.len() > MAX_REPORT_BYTES {
        return Err(format!(
            "the answer is {} bytes, more than {MAX_REPORT_BYTES}",
            text.len()
        ));
    }
    Ok(text)
}

/// The failure document.
pub fn failure_document(failure: &str) -> String {
    let failure = check::bounded(failure.to_owned(), MAX_FAILURE);
    serde_json::to_string(&ReaderFailure { failure })
        .unwrap_or_else(|_| r#"{"failure":"the failure as JSON"}"#.to_owned())
}

/// Print the one document (once), in one write; false when it could not be written.
fn answer(document: &str) -> bool {
    if ANSWERED.swap(true, Ordering::SeqCst) {
        return false;
    }
    let mut line = String::with_capacity(document.len() + 1);
    line.push_str(document);
    line.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes()).is_ok() && out.flush().is_ok()
}

fn answer_failure(failure: &str) {
    answer(&failure_document(failure));
}

/// The walk holds a directory's fd per level and per queued batch: allow what the hard limit
/// allows (lowering nothing; a failure leaves the soft limit, and an open beyond it is reported).
fn raise_open_files() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
