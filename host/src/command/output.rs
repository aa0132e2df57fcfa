//! The output of an approved command, bounded and escaped before it goes back to the model. The
//! command runs agent-written code, so its bytes are hostile: any size, any bytes, any escapes.
//!
//! Why each rule exists:
//!
//! - only the first half of the bound (head) and the last half (tail) are kept, the rest counted:
//!   memory is O(bound) whatever the command writes, and both the start and the end (where a test
//!   runner prints its summary) survive;
//! - the omitted middle is one marker line with the exact count: the reader knows what is missing;
//! - head and tail are escaped separately: a UTF-8 sequence cut by the gap stays its own `\xNN`
//!   bytes and is never merged with bytes from the other side into a character that never existed;
//! - valid UTF-8 is kept as is: source code, paths and messages stay readable in any script;
//! - `\n` and `\t` are kept: they only lay text out, and test output is line-oriented;
//! - `\r` becomes `\r`: a line cannot overwrite itself (or a previous warning) on a terminal;
//! - every other C0 control and DEL becomes `\xNN`: no ESC, so no CSI/OSC/DCS sequence (colour,
//!   cursor moves, window titles, hyperlinks, clipboard writes) reaches a terminal, nor NUL or BEL;
//! - C1 controls (U+0080..U+009F) become `\u{NN}`: U+009B is a one-character CSI on some
//!   terminals, and U+009D an OSC;
//! - bidirectional controls (U+202A..U+202E, U+2066..U+2069, and the marks U+200E, U+200F, U+061C) become `\u{NNNN}`: text cannot be
//!   displayed in an order other than the order the model reads it (Trojan source);
//! - U+2028 and U+2029 become `\u{2028}`/`\u{2029}`: no line break a human sees and a line-based
//!   tool does not (or the reverse);
//! - bytes that are not valid UTF-8 become `\xNN` each (lone continuations, overlongs, surrogates,
//!   truncated sequences): nothing is replaced by U+FFFD, so no byte is lost or made up;
//! - a backslash becomes `\\`: every escape above is unambiguous, and the escaping can be undone
//!   exactly (`\x1b` is the control character, `\xc0` the invalid byte, `\u{9b}` the C1 character:
//!   an escape of an ASCII control is always below `\x80`, of an invalid byte always above).
//!
//! The escaped text is at most [`MAX_ESCAPE_FACTOR`] times the raw bytes kept, plus one marker of
//! at most [`MAX_MARKER_LEN`] bytes.

use std::fmt;

/// The smallest bound [`BoundedOutput::new`] accepts (a smaller one is raised to it).
pub const MIN_BOUND: usize = 64;

/// The worst-case size of the escaped text per raw byte kept: an invalid byte or an ASCII control
/// (1 byte) becomes `\xNN` (4 bytes); a C1 control (2 bytes) becomes `\u{NN}` (6, 3 per byte); a
/// bidi control or line/paragraph separator (3 bytes) becomes `\u{NNNN}` (8, under 3 per byte); a
/// backslash or `\r` (1 byte) becomes 2; everything else is kept (1 per byte).
pub const MAX_ESCAPE_FACTOR: usize = 4;

const MARKER_OPEN: &str = "\n[cordon: ";
const MARKER_CLOSE: &str = " bytes omitted]\n";
/// The longest marker put between head and tail (a u64 has at most 20 decimal digits).
pub const MAX_MARKER_LEN: usize = MARKER_OPEN.len() + 20 + MARKER_CLOSE.len();

/// The output of one command as it arrives, held within a bound: the first half of the bound
/// (head) and the last half (tail), everything else counted.
pub struct BoundedOutput {
    /// The first `head_cap` bytes pushed (fewer while they are arriving).
    head: Vec<u8>,
    head_cap: usize,
    /// The last `tail_cap` bytes pushed after the head: filled in order while shorter than
    /// `tail_cap`, then a ring whose oldest byte is at `start`.
    tail: Vec<u8>,
    tail_cap: usize,
    start: usize,
    /// Every byte pushed.
    total: u64,
}

/// The text of a command's output, escaped, and what it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The escaped head and tail, with the omission marker between them when `truncated`.
    pub text: String,
    /// Every byte the command wrote (stdout and stderr).
    pub total: u64,
    /// Whether bytes were omitted (`total` was over the bound).
    pub truncated: bool,
}

impl fmt::Debug for BoundedOutput {
    // The buffers may be large and are hostile bytes: their sizes only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundedOutput")
            .field("bound", &(self.head_cap + self.tail_cap))
            .field("head", &self.head.len())
            .field("tail", &self.tail.len())
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl BoundedOutput {
    /// Output kept up to `bound` raw bytes (head and tail together); a bound under [`MIN_BOUND`]
    /// is raised to it. Nothing is allocated until bytes arrive, and never more than the bound.
    pub fn new(bound: usize) -> BoundedOutput {
        let bound = bound.max(MIN_BOUND);
        let head_cap = bound / 2;
        BoundedOutput {
            head: Vec::new(),
            head_cap,
            tail: Vec::new(),
            tail_cap: bound - head_cap,
            start: 0,
            total: 0,
        }
    }

    /// The next chunk of stdout or stderr, in arrival order.
    pub fn push(&mut self, chunk: &[u8]) {
        self.total = self.total.saturating_add(len_u64(chunk.len()));
        let room = self.head_cap - self.head.len();
        let (to_head, rest) = chunk.split_at(room.min(chunk.len()));
        if !to_head.is_empty() {
            extend_within(&mut self.head, to_head, self.head_cap);
        }
        if !rest.is_empty() {
            self.push_tail(rest);
        }
    }

    /// Every byte pushed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The escaped text: all of it when it fits, else head, marker, tail.
    pub fn finish(self) -> Kept {
        let BoundedOutput {
            mut head,
            mut tail,
            start,
            total,
            ..
        } = self;
        // Oldest first. `start` is non-zero only once the ring is full.
        tail.rotate_left(start);
        let held = len_u64(head.len()).saturating_add(len_u64(tail.len()));
        let omitted = total.saturating_sub(held);
        if omitted == 0 {
            // Nothing between them: one stream, so a character across the halves stays whole.
            head.extend_from_slice(&tail);
            return Kept {
                text: escape(&head),
                total,
                truncated: false,
            };
        }
        let mut text = String::with_capacity(head.len() + MAX_MARKER_LEN + tail.len());
        escape_into(&mut text, &head);
        text.push_str(MARKER_OPEN);
        text.push_str(&omitted.to_string());
        text.push_str(MARKER_CLOSE);
        escape_into(&mut text, &tail);
        Kept {
            text,
            total,
            truncated: true,
        }
    }

    /// The raw bytes the buffers can hold (their capacities): never over the bound.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.head.capacity() + self.tail.capacity()
    }

    fn push_tail(&mut self, chunk: &[u8]) {
        let cap = self.tail_cap;
        if chunk.len() >= cap {
            // The chunk alone replaces the whole tail.
            let last = &chunk[chunk.len() - cap..];
            if self.tail.len() == cap {
                self.tail.copy_from_slice(last);
            } else {
                self.tail.clear();
                extend_within(&mut self.tail, last, cap);
            }
            self.start = 0;
            return;
        }
        let mut rest = chunk;
        if self.tail.len() < cap {
            // Still filling (`start` is 0): append what fits.
            let (fill, over) = rest.split_at((cap - self.tail.len()).min(rest.len()));
            extend_within(&mut self.tail, fill, cap);
            rest = over;
        }
        // Full: overwrite the oldest bytes, in at most two copies (up to the end, then from 0).
        while !rest.is_empty() {
            let n = (cap - self.start).min(rest.len());
            let (now, later) = rest.split_at(n);
            self.tail[self.start..self.start + n].copy_from_slice(now);
            self.start += n;
            if self.start == cap {
                self.start = 0;
            }
            rest = later;
        }
    }
}

/// Appends `data` to `buf`, growing its capacity (doubling, exactly) but never past `cap`.
/// The caller guarantees `buf.len() + data.len() <= cap`.
fn extend_within(buf: &mut Vec<u8>, data: &[u8], cap: usize) {
    let needed = buf.len() + data.len();
    if needed > buf.capacity() {
        let target = needed
            .max(buf.capacity().saturating_mul(2))
            .min(cap)
            .max(needed);
        buf.reserve_exact(target - buf.len());
    }
    buf.extend_from_slice(data);
}

/// A byte count as u64 (a usize is at most 64 bits on every target Rust supports for the host;
/// saturating rather than wrapping if that ever changes).
fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `bytes` escaped (see the module comment): at most [`MAX_ESCAPE_FACTOR`] times as long.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    escape_into(&mut out, bytes);
    out
}

fn escape_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            escape_char(out, c);
        }
        // Every byte of an invalid (or cut) sequence on its own.
        for &b in chunk.invalid() {
            push_byte_escape(out, b);
        }
    }
}

fn escape_char(out: &mut String, c: char) {
    match c {
        '\n' | '\t' => out.push(c),
        '\\' => out.push_str("\\\\"),
        '\r' => out.push_str("\\r"),
        // C0 and DEL (ASCII, one byte: `\xNN`), C1 (`\u{NN}`): general category Cc.
        _ if c.is_control() => match u8::try_from(c) {
            Ok(b) if b.is_ascii() => push_byte_escape(out, b),
            _ => out.extend(c.escape_unicode()),
        },
        '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{061c}'
        | '\u{2028}'
        | '\u{2029}' => {
            out.extend(c.escape_unicode());
        }
        _ => out.push(c),
    }
}

fn push_byte_escape(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('\\');
    out.push('x');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0x0f)]));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small LCG (Knuth's MMIX constants): reproducible "random" splits and bytes.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next()).unwrap() % n
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next().to_le_bytes()[0]).collect()
        }
    }

    fn collect(bound: usize, chunks: &[&[u8]]) -> Kept {
        let mut out = BoundedOutput::new(bound);
        for chunk in chunks {
            out.push(chunk);
        }
        out.finish()
    }

    /// The escaped text of head, marker, tail computed directly from the whole input.
    fn reference(bound: usize, input: &[u8]) -> Kept {
        let bound = bound.max(MIN_BOUND);
        let total = input.len() as u64;
        if input.len() <= bound {
            return Kept {
                text: escape(input),
                total,
                truncated: false,
            };
        }
        let h = bound / 2;
        let t = bound - h;
        let omitted = input.len() - h - t;
        Kept {
            text: format!(
                "{}\n[cordon: {omitted} bytes omitted]\n{}",
                escape(&input[..h]),
                escape(&input[input.len() - t..])
            ),
            total,
            truncated: true,
        }
    }

    /// Undoes `escape`: the proof it is unambiguous.
    fn unescape(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            match chars.next().unwrap() {
                '\\' => out.push(b'\\'),
                'r' => out.push(b'\r'),
                'x' => {
                    let hex: String = chars.by_ref().take(2).collect();
                    out.push(u8::from_str_radix(&hex, 16).unwrap());
                }
                'u' => {
                    assert_eq!(chars.next(), Some('{'));
                    let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    let c = char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap();
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                other => panic!("unknown escape \\{other}"),
            }
        }
        out
    }

    /// Nothing a terminal acts on is left in the text: only `\n` and `\t` of the controls, no bidi
    /// control, no separator.
    fn assert_inert(text: &str) {
        for c in text.chars() {
            assert!(
                !(c.is_control() && c != '\n' && c != '\t'),
                "control {c:?} in {text:?}"
            );
            assert!(
                !matches!(c, '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{061c}'
        | '\u{2028}'
        | '\u{2029}'),
                "{c:?} in {text:?}"
            );
        }
    }

    /// A mixed input: text, multibyte characters, escapes of every class, invalid bytes.
    fn mixed_input() -> Vec<u8> {
        let mut input = Vec::new();
        let mut i = 0u32;
        while input.len() < 5000 {
            input.extend_from_slice(format!("line {i}: ok ").as_bytes());
            input.extend_from_slice("é€😀日本\t".as_bytes());
            input.extend_from_slice(b"\x1b[31mred\x1b[0m \x1b]0;title\x07\r\\ \0\x7f");
            input.extend_from_slice("\u{9b}\u{202e}\u{2066}\u{2028}".as_bytes());
            input.extend_from_slice(b"\xc0\x80\xed\xa0\x80\xf0\x9f\x98\x80\xff\n");
            i += 1;
        }
        input
    }

    #[test]
    fn empty_output() {
        let out = BoundedOutput::new(64);
        assert_eq!(out.total(), 0);
        assert_eq!(out.held(), 0);
        assert_eq!(
            out.finish(),
            Kept {
                text: String::new(),
                total: 0,
                truncated: false
            }
        );
    }

    #[test]
    fn bound_is_at_least_the_minimum() {
        let mut out = BoundedOutput::new(0);
        out.push(&[b'a'; 64]);
        assert_eq!(out.held(), 64);
        let kept = out.finish();
        assert!(!kept.truncated);
        assert_eq!(kept.text, "a".repeat(64));
    }

    #[test]
    fn fits_exactly() {
        let input: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        let mut out = BoundedOutput::new(100);
        out.push(&input);
        assert_eq!(out.total(), 100);
        assert!(out.held() <= 100);
        let kept = out.finish();
        assert_eq!(
            kept,
            Kept {
                text: String::from_utf8(input).unwrap(),
                total: 100,
                truncated: false
            }
        );
    }

    #[test]
    fn one_byte_over() {
        // 101 bytes, bound 100: byte 50 (the first after the head) is the one omitted.
        let input: Vec<u8> = (0..101u8).map(|i| b'a' + i % 26).collect();
        let mut out = BoundedOutput::new(100);
        out.push(&input);
        assert!(out.held() <= 100);
        let kept = out.finish();
        let text = String::from_utf8(input.clone()).unwrap();
        assert_eq!(
            kept.text,
            format!(
                "{}\n[cordon: 1 bytes omitted]\n{}",
                &text[..50],
                &text[51..]
            )
        );
        assert_eq!(kept.total, 101);
        assert!(kept.truncated);
        assert_eq!(kept, reference(100, &input));
    }

    #[test]
    fn odd_bound_splits_head_and_tail() {
        // Bound 65: head 32, tail 33.
        let input: Vec<u8> = (0..200u8).map(|i| b'A' + i % 26).collect();
        let kept = collect(65, &[&input]);
        let text = String::from_utf8(input.clone()).unwrap();
        assert_eq!(
            kept.text,
            format!(
                "{}\n[cordon: 135 bytes omitted]\n{}",
                &text[..32],
                &text[167..]
            )
        );
    }

    #[test]
    fn huge_output_is_counted_exactly_within_the_bound() {
        const CHUNK: usize = 64 * 1024;
        const CHUNKS: usize = 16 * 1024; // 1 GiB
                                         // Each chunk says which it is (its index, then its letter): head and tail come from the
                                         // right ones.
        fn fill(chunk: &mut [u8], i: usize) {
            chunk.fill(b'a' + u8::try_from(i % 26).unwrap());
            chunk[..8].copy_from_slice(&u64::try_from(i).unwrap().to_be_bytes());
        }
        let chunks = |range: std::ops::Range<usize>| {
            let mut bytes = vec![0u8; CHUNK * range.len()];
            for (chunk, i) in bytes.chunks_mut(CHUNK).zip(range) {
                fill(chunk, i);
            }
            bytes
        };
        // A tail the size of a chunk (each push replaces it), and a ring that wraps mid-chunk.
        for bound in [CHUNK, 4 * 1024 * 1024 + 3] {
            let mut chunk = vec![0u8; CHUNK];
            let mut out = BoundedOutput::new(bound);
            let started = std::time::Instant::now();
            for i in 0..CHUNKS {
                fill(&mut chunk, i);
                out.push(&chunk);
                assert!(out.held() <= bound);
            }
            let elapsed = started.elapsed();
            eprintln!("bound {bound}: pushed 1 GiB in 64 KiB chunks in {elapsed:?}");
            assert_eq!(out.total(), 1 << 30);
            let kept = out.finish();
            assert!(kept.truncated);
            assert_eq!(kept.total, 1 << 30);
            let (head_len, tail_len) = (bound / 2, bound - bound / 2);
            let head = chunks(0..head_len.div_ceil(CHUNK));
            let tail = chunks(CHUNKS - tail_len.div_ceil(CHUNK)..CHUNKS);
            assert_eq!(
                kept.text,
                format!(
                    "{}\n[cordon: {} bytes omitted]\n{}",
                    escape(&head[..head_len]),
                    (1u64 << 30) - bound as u64,
                    escape(&tail[tail.len() - tail_len..])
                )
            );
        }
    }

    #[test]
    fn small_pushes_stay_within_the_bound() {
        for bound in [64, 65, 100, 127, 1000] {
            let mut out = BoundedOutput::new(bound);
            let mut input = Vec::new();
            let mut rng = Lcg(u64::try_from(bound).unwrap());
            for _ in 0..3 * bound {
                let byte = rng.bytes(1);
                out.push(&byte);
                input.extend_from_slice(&byte);
                assert!(out.held() <= bound, "{} > {bound}", out.held());
            }
            assert_eq!(out.finish(), reference(bound, &input));
        }
    }

    #[test]
    fn any_split_equals_one_chunk() {
        let input = mixed_input();
        let mut rng = Lcg(7);
        for bound in [
            64,
            65,
            100,
            333,
            1024,
            4096,
            input.len(),
            input.len() + 1,
            10_000,
        ] {
            let whole = collect(bound, &[&input]);
            assert_eq!(whole, reference(bound, &input), "bound {bound}");
            assert_inert(&whole.text);
            for round in 0..200 {
                // Chunks from 0 bytes up to a little over the bound, some straddling the head/tail
                // boundary, some longer than the tail.
                let max = if round % 2 == 0 { 8 } else { bound + 50 };
                let mut out = BoundedOutput::new(bound);
                let mut rest = input.as_slice();
                while !rest.is_empty() {
                    let n = rng.below(max + 1).min(rest.len());
                    let (chunk, later) = rest.split_at(n);
                    out.push(chunk);
                    rest = later;
                    assert!(out.held() <= bound.max(MIN_BOUND));
                }
                assert_eq!(out.total(), input.len() as u64);
                assert_eq!(out.finish(), whole, "bound {bound} round {round}");
            }
        }
    }

    #[test]
    fn escapes_terminal_sequences() {
        // CSI (colour), OSC (window title, BEL-terminated), OSC 8 hyperlink (ST-terminated).
        assert_eq!(escape(b"\x1b[31mred\x1b[0m"), r"\x1b[31mred\x1b[0m");
        assert_eq!(escape(b"\x1b]0;title\x07"), r"\x1b]0;title\x07");
        assert_eq!(
            escape(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"),
            r"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"
        );
        // C1: the one-character CSI and OSC, as characters (U+009B is 0xc2 0x9b).
        assert_eq!(escape("\u{9b}31m".as_bytes()), r"\u{9b}31m");
        assert_eq!(escape("\u{9d}0;t\u{9c}".as_bytes()), r"\u{9d}0;t\u{9c}");
        assert_eq!(
            escape("\u{80}\u{9f}\u{a0}".as_bytes()),
            "\\u{80}\\u{9f}\u{a0}"
        );
    }

    #[test]
    fn escapes_c0_del_and_carriage_return() {
        assert_eq!(escape(b"a\0b"), r"a\x00b");
        assert_eq!(escape(b"\x7f"), r"\x7f");
        assert_eq!(escape(b"\x08\x0b\x0c\x1f"), r"\x08\x0b\x0c\x1f");
        assert_eq!(escape(b"ok\rFAIL"), r"ok\rFAIL");
        assert_eq!(escape(b"a\r\nb"), "a\\r\nb");
        // Newline and tab stay as they are.
        assert_eq!(escape(b"a\tb\nc"), "a\tb\nc");
        for b in 0u8..0x80 {
            let text = escape(&[b]);
            assert_inert(&text);
            assert_eq!(unescape(&text), [b]);
        }
    }

    #[test]
    fn escapes_backslash() {
        assert_eq!(escape(b"\\"), r"\\");
        // A literal `\x1b` written by the command is not the escape of ESC.
        assert_eq!(escape(br"\x1b"), r"\\x1b");
        assert_ne!(escape(br"\x1b"), escape(b"\x1b"));
        assert_eq!(escape(br"\u{9b}"), r"\\u{9b}");
    }

    #[test]
    fn escapes_bidi_controls_and_separators() {
        assert_eq!(
            escape("if admin \u{202e} { } \u{2066}x\u{2069}".as_bytes()),
            r"if admin \u{202e} { } \u{2066}x\u{2069}"
        );
        for c in ('\u{202a}'..='\u{202e}')
            .chain('\u{2066}'..='\u{2069}')
            .chain(['\u{200e}', '\u{200f}', '\u{061c}'])
        {
            assert_eq!(
                escape(c.to_string().as_bytes()),
                format!("\\u{{{:x}}}", u32::from(c))
            );
        }
        assert_eq!(
            escape("a\u{2028}b\u{2029}c".as_bytes()),
            r"a\u{2028}b\u{2029}c"
        );
    }

    #[test]
    fn keeps_valid_unicode() {
        let text = "naïve café — 日本語 😀 Ωμέγα\n\tend";
        assert_eq!(escape(text.as_bytes()), text);
    }

    #[test]
    fn escapes_invalid_utf8_bytewise() {
        // A lone continuation byte.
        assert_eq!(escape(b"a\x80b"), r"a\x80b");
        // An overlong NUL.
        assert_eq!(escape(b"\xc0\x80"), r"\xc0\x80");
        // A surrogate (U+D800).
        assert_eq!(escape(b"\xed\xa0\x80"), r"\xed\xa0\x80");
        // A 4-byte sequence (U+1F600) missing its last byte, followed by text.
        assert_eq!(escape(b"\xf0\x9f\x98x"), r"\xf0\x9f\x98x");
        // And at the very end.
        assert_eq!(escape(b"x\xf0\x9f\x98"), r"x\xf0\x9f\x98");
        // Beyond U+10FFFF, and bytes never valid.
        assert_eq!(escape(b"\xf4\x90\x80\x80"), r"\xf4\x90\x80\x80");
        assert_eq!(escape(b"\xfe\xff"), r"\xfe\xff");
        // A valid character right after an invalid byte is kept.
        assert_eq!(escape(&"\u{ff}é".as_bytes()[1..]), r"\xbfé");
    }

    #[test]
    fn multibyte_character_cut_by_the_gap() {
        // Bound 64: head 32 bytes, tail 32. The head ends with the first two bytes of "😀"
        // (f0 9f 98 80); the tail starts with the last byte of "€" (e2 82 ac).
        let mut input = vec![b'a'; 30];
        input.extend_from_slice("😀".as_bytes());
        input.extend_from_slice(&[b'm'; 40]);
        input.extend_from_slice("€".as_bytes());
        input.extend_from_slice(&[b'z'; 31]);
        let kept = collect(64, &[&input]);
        assert_eq!(
            kept.text,
            format!(
                "{}\\xf0\\x9f\n[cordon: {} bytes omitted]\n\\xac{}",
                "a".repeat(30),
                input.len() - 64,
                "z".repeat(31)
            )
        );
        // The cut bytes are never joined across the gap: "\xf0\x9f" + "\x98\x80" would be "😀".
        let mut joined = vec![b'a'; 30];
        joined.extend_from_slice(&"😀".as_bytes()[..2]);
        joined.extend_from_slice(&[b'm'; 10]);
        joined.extend_from_slice(&"😀".as_bytes()[2..]);
        joined.extend_from_slice(&[b'z'; 30]);
        let kept = collect(64, &[&joined]);
        assert!(!kept.text.contains('😀'));
        assert!(kept
            .text
            .ends_with(&format!("\\x98\\x80{}", "z".repeat(30))));
    }

    #[test]
    fn multibyte_character_across_head_and_tail_without_gap_stays_whole() {
        // Bound 64, 64 bytes: "€" spans bytes 31..34, across the head/tail boundary (32).
        let mut input = vec![b'a'; 31];
        input.extend_from_slice("€".as_bytes());
        input.extend_from_slice(&[b'b'; 30]);
        for split in 0..=input.len() {
            let kept = collect(64, &[&input[..split], &input[split..]]);
            assert!(!kept.truncated);
            assert_eq!(kept.text, String::from_utf8(input.clone()).unwrap());
        }
    }

    #[test]
    fn escaping_is_reversible() {
        let mut rng = Lcg(42);
        let mut inputs = vec![mixed_input()];
        for len in [1, 2, 3, 7, 100, 1000, 10_000] {
            inputs.push(rng.bytes(len));
        }
        for input in inputs {
            let text = escape(&input);
            assert_inert(&text);
            assert_eq!(unescape(&text), input);
        }
    }

    #[test]
    fn worst_case_size() {
        // Every character: its escape is at most MAX_ESCAPE_FACTOR times its UTF-8 length.
        let mut buf = [0u8; 4];
        let mut reached = false;
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            let bytes = c.encode_utf8(&mut buf).as_bytes();
            let mut out = String::new();
            escape_char(&mut out, c);
            assert!(out.len() <= MAX_ESCAPE_FACTOR * bytes.len(), "{c:?}");
            reached |= out.len() == MAX_ESCAPE_FACTOR * bytes.len();
        }
        // Every byte alone (invalid bytes included).
        for b in 0..=u8::MAX {
            let len = escape(&[b]).len();
            assert!(len <= MAX_ESCAPE_FACTOR, "{b:#x}");
            reached |= len == MAX_ESCAPE_FACTOR;
        }
        // The factor is reached, not just an upper bound.
        assert!(reached);
        // Whole outputs of the worst kinds, truncated and not: text within bound * factor + marker.
        let mut rng = Lcg(3);
        let adversarial: Vec<Vec<u8>> = vec![
            vec![0; 10_000],
            vec![0xff; 10_000],
            vec![0x1b; 10_000],
            b"\xc0\x80".repeat(5000),
            "\u{9b}".repeat(5000).into_bytes(),
            "\u{202e}".repeat(4000).into_bytes(),
            b"\\\r".repeat(5000),
            rng.bytes(10_000),
            mixed_input(),
        ];
        for input in &adversarial {
            for bound in [64, 65, 99, 1000, input.len(), 20_000] {
                let kept = collect(bound, &[input]);
                assert!(
                    kept.text.len() <= bound.max(MIN_BOUND) * MAX_ESCAPE_FACTOR + MAX_MARKER_LEN,
                    "bound {bound}: {}",
                    kept.text.len()
                );
            }
        }
        // The largest marker fits MAX_MARKER_LEN.
        assert_eq!(
            format!("{MARKER_OPEN}{}{MARKER_CLOSE}", u64::MAX).len(),
            MAX_MARKER_LEN
        );
    }
}
