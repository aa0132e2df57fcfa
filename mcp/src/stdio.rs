//! MCP's stdio transport: one JSON-RPC message per line on stdin, each reply one line on stdout
//! (serde_json escapes every newline inside a string, so a reply never holds one). Lines are
//! bounded: one longer than [`MAX_LINE`] bytes is read to its end, dropped, and answered with an
//! invalid request; the server goes on. Messages are served one at a time, in order; the end of
//! stdin ends the server.

use std::io::{self, BufRead, Write};

use crate::rpc::{self, Dispatcher, Server, INVALID_REQUEST};

/// The most bytes one message may hold, its newline aside.
pub const MAX_LINE: usize = 1024 * 1024;

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, in the buffer, without its newline (the last one may lack it).
    Message,
    /// A line longer than [`MAX_LINE`], read to its end and dropped.
    TooLong,
    /// The end of the input.
    End,
}

/// Read one line into `line` (cleared first), holding at most [`MAX_LINE`] bytes of it.
pub fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Line> {
    line.clear();
    let mut too_long = false;
    loop {
        let (used, ended) = {
            let chunk = match input.fill_buf() {
                Ok(chunk) => chunk,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if chunk.is_empty() {
                return Ok(if too_long {
                    Line::TooLong
                } else if line.is_empty() {
                    Line::End
                } else {
                    Line::Message
                });
            }
            let end = chunk.iter().position(|b| *b == b'\n');
            let part = &chunk[..end.unwrap_or(chunk.len())];
            if !too_long && line.len() + part.len() > MAX_LINE {
                too_long = true;
                line.clear();
            }
            if !too_long {
                line.extend_from_slice(part);
            }
            (end.map_or(chunk.len(), |at| at + 1), end.is_some())
        };
        input.consume(used);
        if ended {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Message
            });
        }
    }
}

/// Serve `input` until it ends, writing each reply to `output` as soon as it is made.
pub fn serve(
    mut input: impl BufRead,
    mut output: impl Write,
    server: &Server,
    dispatcher: &mut dyn Dispatcher,
) -> io::Result<()> {
    let mut line = Vec::new();
    loop {
        let reply = match read_line(&mut input, &mut line)? {
            Line::End => return Ok(()),
            Line::TooLong => Some(rpc::error(
                &serde_json::Value::Null,
                INVALID_REQUEST,
                &format!("Invalid Request: a message longer than {MAX_LINE} bytes"),
            )),
            Line::Message => server.handle(&line, dispatcher),
        };
        if let Some(reply) = reply {
            output.write_all(reply.as_bytes())?;
            output.write_all(b"\n")?;
            output.flush()?;
        }
    }
}

#[cfg(test)]
#[path = "stdio_tests.rs"]
mod tests;
