//! The dispatcher's socket, as the server dials it: a fresh connection per call, one line out
//! (the [`Call`]), one line back (the [`Answer`], at most [`MAX_ANSWER_LINE`] bytes with its
//! newline). The dispatcher bounds how long a command takes; a peer that closes before its
//! newline, a line past the bound or one that is not an answer is `command-unavailable`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use cordon_contract::command::{Answer, Call, MAX_ANSWER_LINE, MAX_CALL_LINE};

use crate::rpc::Dispatcher;

/// The dispatcher at a socket path.
#[derive(Debug)]
pub struct Socket {
    path: PathBuf,
}

impl Socket {
    pub fn new(path: PathBuf) -> Self {
        Socket { path }
    }
}

impl Dispatcher for Socket {
    fn call(&mut self, call: &Call) -> Result<Answer, String> {
        let mut line = serde_json::to_string(call).map_err(|error| format!("the call: {error}"))?;
        line.push('\n');
        if line.len() > MAX_CALL_LINE {
            return Err(format!("a call of at most {MAX_CALL_LINE} bytes"));
        }
        let mut stream = UnixStream::connect(&self.path)
            .map_err(|error| format!("the dispatcher's socket: {error}"))?;
        stream
            .write_all(line.as_bytes())
            .map_err(|error| format!("sending the call: {error}"))?;
        read_answer(stream)
    }
}

/// One answer line from `from`.
pub fn read_answer(from: impl Read) -> Result<Answer, String> {
    let mut reader = BufReader::new(from.take(MAX_ANSWER_LINE as u64));
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|error| format!("reading the answer: {error}"))?;
    if line.last() != Some(&b'\n') {
        return Err(if line.len() >= MAX_ANSWER_LINE {
            format!("the answer is longer than {MAX_ANSWER_LINE} bytes")
        } else {
            format!(
                "the dispatcher closed the connection after {} bytes, before its answer's end",
                line.len()
            )
        });
    }
    line.pop();
    serde_json::from_slice(&line).map_err(|error| format!("a malformed answer: {error}"))
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
