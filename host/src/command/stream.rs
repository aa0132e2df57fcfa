//! A command container's two output streams as one, in the order they came, with the init's own
//! lines taken out: the model sees what the command wrote, never the init's attestation or its
//! exit line.
//!
//! The init writes its first stderr line before the command exists (the attestation, or the
//! refusal that means no command ran) and its exit line after the command and everything it left
//! are gone. So the first stderr line is always the init's; the last one is the init's when it is
//! an exit line. The last stderr line is held back until more stderr arrives (then it was the
//! command's) or the streams end (then it is judged); stdout that arrives meanwhile goes first
//! only when the held line is an exit line (the engine copies the two pipes on their own, so the
//! command's last stdout bytes can arrive after the init's exit line). A command that ends its
//! stderr without a newline glues the exit line to its own bytes, and the model then sees the
//! init's exit line; one that writes an exit line of its own last loses that line from its
//! output. Either costs a line of text, no more: the exit status comes from the engine.

use cordon_contract::InitLine;

use super::output::{BoundedOutput, Kept};

/// No init line is longer: a held line that grows past this is the command's.
const MAX_INIT_LINE: usize = 4096;

/// The init's exit line, when `held` is exactly one.
fn exit_line(held: &[u8]) -> Option<InitLine> {
    let line = held.strip_suffix(b"\n")?;
    std::str::from_utf8(line)
        .ok()
        .and_then(InitLine::parse)
        .filter(|l| matches!(l, InitLine::Exit { .. }))
}

/// The interleaved output of one command container, as it arrives.
#[derive(Debug)]
pub struct CommandStream {
    out: BoundedOutput,
    /// The first stderr line is still arriving (it is the init's).
    in_first_line: bool,
    /// The last stderr bytes, from the start of their line, not yet pushed.
    held: Vec<u8>,
    /// Stderr's current line began in bytes already pushed: it cannot be the init's.
    mid_line: bool,
}

/// What a finished stream holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    pub kept: Kept,
    /// The init's exit line, when it ended the stream.
    pub init_exit: Option<InitLine>,
}

impl CommandStream {
    pub fn new(bound: usize) -> CommandStream {
        CommandStream {
            out: BoundedOutput::new(bound),
            in_first_line: true,
            held: Vec::new(),
            mid_line: false,
        }
    }

    /// A chunk of stdout. A held stderr line goes first, unless it is an exit line: the engine
    /// copies the two pipes on their own, so the command's last stdout bytes may arrive after
    /// the init's exit line.
    pub fn stdout(&mut self, chunk: &[u8]) {
        if exit_line(&self.held).is_none() {
            self.release();
        }
        self.out.push(chunk);
    }

    /// A chunk of stderr.
    pub fn stderr(&mut self, mut chunk: &[u8]) {
        if self.in_first_line {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    self.in_first_line = false;
                    chunk = &chunk[at + 1..];
                }
                None => return,
            }
        }
        if self.mid_line {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    self.out.push(&chunk[..=at]);
                    chunk = &chunk[at + 1..];
                    self.mid_line = false;
                }
                None => {
                    self.out.push(chunk);
                    return;
                }
            }
        }
        if chunk.is_empty() {
            return;
        }
        self.held.extend_from_slice(chunk);
        // Everything before the start of the last line is the command's.
        let body = &self.held[..self.held.len() - 1];
        if let Some(at) = body.iter().rposition(|&b| b == b'\n') {
            self.out.push(&self.held[..=at]);
            self.held.drain(..=at);
        }
        if self.held.len() > MAX_INIT_LINE {
            self.release();
        }
    }

    /// The held bytes were the command's (and stderr goes on mid-line unless they ended one).
    fn release(&mut self) {
        if !self.held.is_empty() {
            self.mid_line = self.held.last() != Some(&b'\n');
            self.out.push(&self.held);
            self.held.clear();
        }
    }

    /// The text, and the init's exit line when stderr ended with one.
    pub fn finish(mut self) -> Streamed {
        // `held` is empty when stderr is mid-line: nothing to judge then.
        let init_exit = exit_line(&self.held);
        if init_exit.is_none() {
            self.release();
        }
        Streamed {
            kept: self.out.finish(),
            init_exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_exit_line() -> String {
        let mut line = InitLine::Exit {
            code: 3,
            terminated: 0,
            killed: 0,
        }
        .to_line();
        line.push('\n');
        line
    }

    #[test]
    fn the_inits_first_and_exit_lines_are_taken_out_and_the_rest_kept_in_order() {
        let mut s = CommandStream::new(1 << 20);
        s.stderr(b"{\"attestation\":1}");
        s.stdout(b"out 1\n");
        s.stderr(b"\nerr 1\n");
        s.stdout(b"out 2\n");
        s.stderr(b"err 2\nerr 3\n");
        s.stderr(init_exit_line().as_bytes());
        let done = s.finish();
        assert_eq!(done.kept.text, "out 1\nerr 1\nout 2\nerr 2\nerr 3\n");
        assert!(matches!(
            done.init_exit,
            Some(InitLine::Exit { code: 3, .. })
        ));
        assert_eq!(done.kept.total, done.kept.text.len() as u64);
    }

    #[test]
    fn a_last_line_that_is_not_the_inits_exit_is_the_commands() {
        let mut s = CommandStream::new(1 << 20);
        s.stderr(b"attestation\nlast words\n");
        let done = s.finish();
        assert_eq!(done.kept.text, "last words\n");
        assert_eq!(done.init_exit, None);
        // An exit line followed by more stderr is the command's.
        let mut s = CommandStream::new(1 << 20);
        s.stderr(b"attestation\n");
        s.stderr(init_exit_line().as_bytes());
        s.stderr(b"after\n");
        let done = s.finish();
        assert_eq!(done.kept.text, format!("{}after\n", init_exit_line()));
        assert_eq!(done.init_exit, None);
        // Stdout that arrives after the init's exit line (the engine's copiers race) is the
        // command's, and the exit line still the init's.
        let mut s = CommandStream::new(1 << 20);
        s.stderr(b"attestation\nerr\n");
        s.stderr(init_exit_line().as_bytes());
        s.stdout(b"late stdout\n");
        let done = s.finish();
        assert_eq!(done.kept.text, "err\nlate stdout\n");
        assert!(matches!(done.init_exit, Some(InitLine::Exit { .. })));
        // An exit line that continues the command's unfinished stderr line is the command's,
        // even when stdout came between them.
        let mut s = CommandStream::new(1 << 20);
        s.stderr(b"attestation\npartial");
        s.stdout(b"out\n");
        s.stderr(init_exit_line().as_bytes());
        let done = s.finish();
        assert_eq!(done.kept.text, format!("partialout\n{}", init_exit_line()));
        assert_eq!(done.init_exit, None);
    }

    #[test]
    fn a_long_stderr_line_is_not_held_and_a_flood_stays_bounded() {
        let mut s = CommandStream::new(1024);
        s.stderr(b"attestation\n");
        for _ in 0..1000 {
            s.stderr(&[b'x'; 1000]);
        }
        assert!(s.held.len() <= MAX_INIT_LINE + 1000);
        s.stderr(init_exit_line().as_bytes());
        let done = s.finish();
        // The exit line ends a 1,000,000-byte line: glued to it, it is the command's text.
        assert_eq!(done.init_exit, None);
        assert_eq!(done.kept.total, 1_000_000 + init_exit_line().len() as u64);
        assert!(done.kept.truncated);
        assert!(done.kept.text.len() < 1024 * 4 + 100);
    }

    #[test]
    fn nothing_before_the_first_stderr_newline_reaches_the_model() {
        let mut s = CommandStream::new(1 << 20);
        s.stderr(b"{\"refusal\"");
        s.stderr(b":1}");
        let done = s.finish();
        assert_eq!(done.kept.text, "");
        assert_eq!(done.kept.total, 0);
    }
}
