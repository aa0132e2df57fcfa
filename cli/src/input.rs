//! The caller's files and values that both `cordon run` and `cordon audit` take: the declared
//! operations and a commit's message and trailers. Its own module so that `run` and `audit` both
//! depend on it and not on each other.

use anyhow::Context;

/// The most an `--ops` file may hold (256 operations of two 1 KiB paths, as JSON).
const MAX_OPS_BYTES: usize = 1024 * 1024;

/// The most a commit message file may hold.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The declared operations in `path` (a caller file: regular, bounded, UTF-8 JSON).
pub fn read_operations(
    path: &std::path::Path,
) -> anyhow::Result<Vec<cordon_contract::tree::Operation>> {
    let text = cordon::caller_file::read_utf8("operations file", path, MAX_OPS_BYTES)?;
    serde_json::from_str(&text).context("the operations file is not a JSON array of operations")
}

/// The most a `--command-file` may hold.
const MAX_COMMANDS_BYTES: usize = 1024 * 1024;

/// The approved commands in `path` (a caller file: regular, bounded, UTF-8 JSON: an array of
/// commands, each with exactly the contract's fields), checked for `phase` at once: a list the
/// phase refuses is refused before anything is prepared.
pub fn read_commands(
    path: &std::path::Path,
    phase: cordon_contract::Phase,
) -> anyhow::Result<Vec<cordon_contract::command::ApprovedCommand>> {
    let text = cordon::caller_file::read_utf8("command file", path, MAX_COMMANDS_BYTES)?;
    let commands: Vec<cordon_contract::command::ApprovedCommand> = serde_json::from_str(&text)
        .map_err(|e| {
            cordon::Error::Invalid(format!(
                "{}: not a JSON array of approved commands: {e}",
                path.display()
            ))
        })?;
    cordon_contract::command::check_list(&commands, phase).map_err(|fault| {
        cordon::Error::Invalid(format!("{}: approved commands: {fault}", path.display()))
    })?;
    Ok(commands)
}

/// `K=V` trailers as pairs.
pub fn parse_trailers(trailers: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    trailers
        .iter()
        .map(|t| {
            t.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| anyhow::anyhow!("a trailer is KEY=VALUE, not {t:?}"))
        })
        .collect()
}
