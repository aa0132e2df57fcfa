//! The offered list: the names (and their descriptions) the model may ask for, read once at start
//! from the agent's input dir ([`cordon_contract::command::OFFERED_FILE`]). It is opened without
//! following a link and without blocking, must be a regular file of at most [`MAX_FILE`] bytes,
//! and must hold a JSON array of 1 to [`MAX_COMMANDS`] [`Offered`] entries with distinct command
//! names and one-line descriptions. Anything else stops the server before it answers a message.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cordon_contract::command::{
    is_description, is_name, Offered, MAX_COMMANDS, MAX_DESCRIPTION, MAX_OFFERED_BYTES as MAX_FILE,
};

/// Read and check the list at `path`.
pub fn load(path: &Path) -> Result<Vec<Offered>, String> {
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| format!("{shown}: {error}"))?;
    let meta = file
        .metadata()
        .map_err(|error| format!("{shown}: {error}"))?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Err(format!(
            "{shown} is not a regular file of at most {MAX_FILE} bytes"
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("{shown}: {error}"))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("{shown} grew past {MAX_FILE} bytes"));
    }
    parse(&bytes).map_err(|error| format!("{shown}: {error}"))
}

/// Check a list's bytes: a JSON array of entries, each a command name and a one-line description.
pub fn parse(bytes: &[u8]) -> Result<Vec<Offered>, String> {
    // serde takes a struct from a sequence too: each entry must be an object.
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|error| format!("not JSON: {error}"))?;
    let Some(entries) = value.as_array() else {
        return Err("not a JSON array".into());
    };
    if entries.is_empty() || entries.len() > MAX_COMMANDS {
        return Err(format!(
            "holds {} entries, not 1 to {MAX_COMMANDS}",
            entries.len()
        ));
    }
    let mut offered: Vec<Offered> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        if !entry.is_object() {
            return Err(format!("entry {index} is not an object"));
        }
        let entry: Offered = serde_json::from_value(entry.clone())
            .map_err(|error| format!("entry {index}: {error}"))?;
        if !is_name(&entry.name) {
            return Err(format!("entry {index}'s name is not a command name"));
        }
        if !is_description(&entry.description) {
            return Err(format!(
                "{}'s description is not one line of 1 to {MAX_DESCRIPTION} bytes without \
                 control characters",
                entry.name
            ));
        }
        if offered.iter().any(|o| o.name == entry.name) {
            return Err(format!("{} is named twice", entry.name));
        }
        offered.push(entry);
    }
    Ok(offered)
}

#[cfg(test)]
#[path = "offered_tests.rs"]
mod tests;
