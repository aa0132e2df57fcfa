//! What a runner asks for, and its capture: every check that needs no engine, the schema read
//! once, the attempt id taken for good.

use std::path::PathBuf;
use std::time::Instant;

use cordon_contract::{Phase, Vendor};

use super::{check_vendor, claude, AnswerSchema};
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::profile::SCHEMA_FILE;
use crate::task::StorageHandle;

/// What a runner asks for.
#[derive(Debug, Clone)]
pub struct Request {
    pub phase: Phase,
    pub vendor: Vendor,
    /// At most 32 KiB of UTF-8, no NUL.
    pub prompt: String,
    /// `schema.json` for planning (required) or review (optional); read once, at capture.
    pub schema: Option<PathBuf>,
    /// The code the answer is about, echoed back in the result.
    pub referenced_code_hash: String,
    /// When the invocation must be over, cleanup excepted.
    pub deadline: Instant,
    /// Vendor hosts the agent may reach through the egress proxy, `name[:port]` or `*.name[:port]`
    /// written canonically (see [`super::default_allowlist`]); empty: no network at all.
    pub network_allowlist: Vec<String>,
    /// Captured once; the result echoes it.
    pub attempt: String,
    /// The task storage the agent works in.
    pub storage: StorageHandle,
    /// The pre-launch tree check of that storage (execute and fix need one, once; a read-only
    /// phase takes none): its gitlinks are masked and their parents pinned.
    pub tree_check: Option<crate::audit::TreeCheck>,
}

/// A frozen request. Only [`capture`] makes one.
#[derive(Debug, Clone)]
pub struct Capture {
    pub(super) request: Request,
    pub(super) schema: Option<AnswerSchema>,
}

impl Capture {
    pub fn request(&self) -> &Request {
        &self.request
    }
    /// The exact schema text the agent will be given (and the input dir will hold).
    pub fn schema_text(&self) -> Option<&str> {
        self.schema.as_ref().map(AnswerSchema::text)
    }
    /// The compiled schema every structured answer is checked against.
    pub fn schema(&self) -> Option<&AnswerSchema> {
        self.schema.as_ref()
    }
}

fn plain_token(what: &str, value: &str, max: usize) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} {value:?} is not a plain token of at most {max} bytes"
        )))
    }
}

/// An allowlist entry as the proxy reads it, written canonically (lower case, no trailing dot,
/// a port only when it is not 443): what the runner wrote is what the attestation shows.
fn check_entry(entry: &str) -> Result<()> {
    match cordon_egress::allowlist::Entry::parse(entry) {
        Ok(parsed) => {
            let canonical = parsed.to_string();
            let short = canonical.strip_suffix(":443").unwrap_or(&canonical);
            if entry == canonical || entry == short {
                Ok(())
            } else {
                Err(Error::Invalid(format!(
                    "allowlist entry {entry:?} is not canonical: write {short:?}"
                )))
            }
        }
        Err(e) => Err(Error::Invalid(format!("allowlist entry {entry:?}: {e}"))),
    }
}

/// Freeze a request: every check that needs no engine, the schema read once, the attempt id
/// taken for good.
pub fn capture(ctl: &Controller, request: Request) -> Result<Capture> {
    check_vendor(request.vendor, request.phase)?;
    if request.prompt.is_empty()
        || request.prompt.len() > claude::MAX_PROMPT_BYTES
        || request.prompt.contains('\0')
    {
        return Err(Error::Invalid(format!(
            "the prompt must be 1 to {} bytes without NUL ({} given)",
            claude::MAX_PROMPT_BYTES,
            request.prompt.len()
        )));
    }
    plain_token("attempt id", &request.attempt, 128)?;
    plain_token("referenced code hash", &request.referenced_code_hash, 128)?;
    if request.network_allowlist.len() > crate::profile::egress::MAX_ALLOW {
        return Err(Error::Invalid(format!(
            "more than {} allowlist entries",
            crate::profile::egress::MAX_ALLOW
        )));
    }
    for entry in &request.network_allowlist {
        check_entry(entry)?;
    }
    if request.deadline <= Instant::now() {
        return Err(Error::Deadline("the invocation's deadline".into()));
    }
    let (required, allowed) = claude::schema_rule(request.phase);
    let schema = match (&request.schema, required, allowed) {
        (None, true, _) => {
            return Err(Error::Schema(format!(
                "{} needs {SCHEMA_FILE}",
                request.phase
            )))
        }
        (Some(_), _, false) => {
            return Err(Error::Schema(format!(
                "{} answers in plain text and takes no schema",
                request.phase
            )))
        }
        // Compiled once, here: a schema that does not compile is refused before anything exists.
        (Some(path), _, true) => Some(AnswerSchema::compile(claude::read_schema(path)?)?),
        (None, false, _) => None,
    };
    ctl.capture_attempt(&request.attempt)?;
    Ok(Capture { request, schema })
}
