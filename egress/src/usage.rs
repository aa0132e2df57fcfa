//! The token usage a vendor response reports, read as the response streams past (issue 22's record
//! of every vendor call; no runtime reads it yet). A streamed response (server-sent events) is
//! read event by event: only an event whose data mentions `"usage"` is parsed, and no more than
//! [`MAX_EVENT`] bytes of one event are ever held, so a long text delta streams through without
//! being buffered. A whole JSON response is held up to [`MAX_BODY`] and read at its end. Usage
//! absent, or unreadable, is `None`: the record says so rather than guess.

use serde_json::Value;

/// The most bytes of one event's data held (a usage event is a few hundred bytes).
pub const MAX_EVENT: usize = 64 * 1024;
/// The most bytes of a whole JSON response held to read its usage.
pub const MAX_BODY: usize = 256 * 1024;

/// Token counts as the vendor reports them; a count it did not report is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// Take every count `usage` (a JSON object) reports; later reports replace earlier ones
    /// (`message_delta`'s counts are cumulative). True when it held any count.
    fn take(&mut self, usage: &Value) -> bool {
        let mut any = false;
        for (field, key) in [
            (&mut self.input_tokens, "input_tokens"),
            (&mut self.output_tokens, "output_tokens"),
            (
                &mut self.cache_creation_input_tokens,
                "cache_creation_input_tokens",
            ),
            (&mut self.cache_read_input_tokens, "cache_read_input_tokens"),
        ] {
            if let Some(n) = usage.get(key).and_then(Value::as_u64) {
                *field = Some(n);
                any = true;
            }
        }
        any
    }
}

/// The usage of a streamed response, fed its bytes as they pass.
#[derive(Debug, Default)]
pub struct StreamUsage {
    /// The line being read (at most [`MAX_EVENT`] bytes; past that, the line is skipped).
    line: Vec<u8>,
    line_overlong: bool,
    /// The current event's data lines, joined (at most [`MAX_EVENT`] bytes).
    data: Vec<u8>,
    data_overlong: bool,
    usage: Usage,
    seen: bool,
}

impl StreamUsage {
    /// Read `chunk`, the next bytes of the response body.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(at) = memchr::memchr(b'\n', chunk) {
            self.extend_line(&chunk[..at]);
            self.end_line();
            chunk = &chunk[at + 1..];
        }
        self.extend_line(chunk);
    }

    /// The usage reported so far, if any was.
    pub fn usage(&self) -> Option<Usage> {
        self.seen.then_some(self.usage)
    }

    /// Bytes held now (never more than two bounds' worth).
    pub fn held(&self) -> usize {
        self.line.len() + self.data.len()
    }

    fn extend_line(&mut self, bytes: &[u8]) {
        if self.line_overlong || self.line.len() + bytes.len() > MAX_EVENT {
            self.line_overlong = true;
            self.line.clear();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    /// A line ended: a blank one dispatches the event, a `data` line adds to it (any other field
    /// and any comment are not usage).
    fn end_line(&mut self) {
        let overlong = std::mem::take(&mut self.line_overlong);
        let line = std::mem::take(&mut self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        if overlong {
            // A data line too long to hold: this event is not read (a usage event never is).
            self.data_overlong = true;
        } else if line.is_empty() {
            self.dispatch();
        } else if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !self.data.is_empty() {
                self.data.push(b'\n');
            }
            if self.data.len() + value.len() > MAX_EVENT {
                self.data_overlong = true;
                self.data.clear();
            } else if !self.data_overlong {
                self.data.extend_from_slice(value);
            }
        }
    }

    /// An event ended: its usage, when it has one and is readable.
    fn dispatch(&mut self) {
        let data = std::mem::take(&mut self.data);
        if std::mem::take(&mut self.data_overlong) || !contains(&data, b"\"usage\"") {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(&data) else {
            return;
        };
        let usage = match event.get("type").and_then(Value::as_str) {
            Some("message_start") => event.get("message").and_then(|m| m.get("usage")),
            Some("message_delta") => event.get("usage"),
            _ => None,
        };
        if let Some(usage) = usage {
            self.seen |= self.usage.take(usage);
        }
    }
}

/// The usage of a whole JSON response (a message, or a token count), fed its bytes.
#[derive(Debug, Default)]
pub struct BodyUsage {
    body: Vec<u8>,
    overlong: bool,
}

impl BodyUsage {
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.overlong || self.body.len() + chunk.len() > MAX_BODY {
            self.overlong = true;
            self.body = Vec::new();
        } else {
            self.body.extend_from_slice(chunk);
        }
    }

    /// At the body's end: a message's `usage`, or a token count's `input_tokens`.
    pub fn usage(&self) -> Option<Usage> {
        if self.overlong {
            return None;
        }
        let body: Value = serde_json::from_slice(&self.body).ok()?;
        let mut usage = Usage::default();
        let reported = match body.get("usage") {
            Some(inner) => usage.take(inner),
            None => usage.take(&body),
        };
        reported.then_some(usage)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
