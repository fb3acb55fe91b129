//! A streaming JSON scanner that copies out the values found at a few
//! fixed paths (`usage`, `response.usage`, ...) of a document fed to it in
//! pieces of any size, in bounded memory: a nesting counter, the keys of
//! the outermost [`TRACKED`] objects, and at most [`CAPTURE_LIMIT`] bytes
//! per path. The rest of the document, however large, is only looked at.
//!
//! It checks only as much syntax as it needs to know where it is (strings,
//! escapes, brackets, `:` and `,`); a captured value is parsed by its user
//! (`serde_json`), which rejects a malformed one. Malformed input never
//! panics it: at worst it captures nothing.
//!
//! Keys are compared as written: a key spelt with an escape (`"usag\u0065"`)
//! matches no path. The APIs it reads never escape these keys.

/// A path from the document's root object, one key per level.
pub(crate) type Path = &'static [&'static str];

/// The most bytes kept of one captured value; a longer value is
/// [`Captured::TooBig`]. A usage object is a few hundred bytes.
pub(crate) const CAPTURE_LIMIT: usize = 2048;

/// How many levels of objects have their keys tracked: the longest path.
pub(crate) const TRACKED: usize = 2;

/// The longest key compared; a longer key matches no path.
const KEY_LIMIT: usize = 16;

/// What the scanner holds for one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Captured {
    /// No complete value at that path (yet).
    Absent,
    /// The last complete value at that path, as written.
    Value(Vec<u8>),
    /// The last value at that path was longer than [`CAPTURE_LIMIT`].
    TooBig,
}

/// Where the lexer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Between tokens.
    Between,
    /// Inside a string (an object key when `key`).
    Str { key: bool },
    /// Just after a backslash inside a string.
    Escape { key: bool },
    /// Inside a number, `true`, `false` or `null`.
    Scalar,
}

/// One open container among the outermost [`TRACKED`].
#[derive(Debug, Clone, Copy)]
struct Frame {
    object: bool,
    /// In an object: the next string is a key.
    want_key: bool,
    key: [u8; KEY_LIMIT],
    key_len: usize,
    /// The key fits and has no escape: it can match a path.
    key_ok: bool,
}

impl Frame {
    const EMPTY: Frame = Frame {
        object: false,
        want_key: false,
        key: [0; KEY_LIMIT],
        key_len: 0,
        key_ok: false,
    };

    fn key(&self) -> Option<&[u8]> {
        self.key_ok.then(|| &self.key[..self.key_len])
    }
}

/// The value being copied.
#[derive(Debug)]
struct Active {
    /// Index into the paths.
    path: usize,
    /// The nesting depth at which the value started.
    depth: u32,
    /// Too long: counted, not kept.
    too_big: bool,
}

/// The scanner: feed it a document in pieces, then read what it captured.
#[derive(Debug)]
pub(crate) struct JsonScan {
    paths: &'static [Path],
    lex: Lex,
    /// Containers open now.
    depth: u32,
    frames: [Frame; TRACKED],
    active: Option<Active>,
    /// The bytes of the value being copied (capacity [`CAPTURE_LIMIT`]).
    buf: Vec<u8>,
    results: Vec<Captured>,
}

impl JsonScan {
    /// A scanner capturing `paths` (none a prefix of another, none longer
    /// than [`TRACKED`]).
    pub(crate) fn new(paths: &'static [Path]) -> JsonScan {
        debug_assert!(paths.iter().all(|p| !p.is_empty() && p.len() <= TRACKED));
        JsonScan {
            paths,
            lex: Lex::Between,
            depth: 0,
            frames: [Frame::EMPTY; TRACKED],
            active: None,
            buf: Vec::new(),
            results: vec![Captured::Absent; paths.len()],
        }
    }

    /// Forgets everything, for the next document.
    pub(crate) fn reset(&mut self) {
        self.lex = Lex::Between;
        self.depth = 0;
        self.active = None;
        self.buf.clear();
        self.results.fill(Captured::Absent);
    }

    /// What was captured at `paths[i]`.
    #[cfg(test)]
    pub(crate) fn get(&self, i: usize) -> &Captured {
        &self.results[i]
    }

    /// The value captured at `paths[i]`, if complete and kept.
    pub(crate) fn value(&self, i: usize) -> Option<&[u8]> {
        match &self.results[i] {
            Captured::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Bytes held: the capture buffer and the captured values.
    pub(crate) fn buffered(&self) -> usize {
        let kept = self.results.iter().map(|r| match r {
            Captured::Value(v) => v.capacity(),
            _ => 0,
        });
        self.buf.capacity() + kept.sum::<usize>()
    }

    /// Reads the next piece of the document.
    pub(crate) fn feed(&mut self, input: &[u8]) {
        for &b in input {
            self.byte(b);
        }
    }

    /// One byte's step through the lexer.
    fn byte(&mut self, b: u8) {
        match self.lex {
            Lex::Str { key } => {
                self.keep(b);
                if b == b'\\' {
                    self.lex = Lex::Escape { key };
                } else if b == b'"' {
                    self.lex = Lex::Between;
                    if key {
                        if let Some(f) = self.frame_mut() {
                            f.want_key = false;
                        }
                    } else {
                        self.value_ended_at(self.depth);
                    }
                } else if key {
                    self.key_byte(b);
                }
            }
            Lex::Escape { key } => {
                self.keep(b);
                self.lex = Lex::Str { key };
                if key {
                    if let Some(f) = self.frame_mut() {
                        f.key_ok = false;
                    }
                }
            }
            Lex::Scalar => {
                if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                    self.lex = Lex::Between;
                    self.value_ended_at(self.depth);
                    self.between(b);
                } else {
                    self.keep(b);
                }
            }
            Lex::Between => self.between(b),
        }
    }

    /// A byte between tokens.
    fn between(&mut self, b: u8) {
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => self.keep(b),
            b'{' | b'[' => {
                self.value_starts();
                self.keep(b);
                self.depth = self.depth.saturating_add(1);
                if let Some(f) = self.frame_mut() {
                    *f = Frame {
                        object: b == b'{',
                        want_key: b == b'{',
                        ..Frame::EMPTY
                    };
                }
            }
            b'}' | b']' => {
                self.keep(b);
                self.depth = self.depth.saturating_sub(1);
                self.value_ended_at(self.depth);
            }
            b'"' => {
                let key = self.frame().is_some_and(|f| f.object && f.want_key);
                if key {
                    if let Some(f) = self.frame_mut() {
                        f.key_len = 0;
                        f.key_ok = true;
                    }
                } else {
                    self.value_starts();
                }
                self.keep(b);
                self.lex = Lex::Str { key };
            }
            b':' => self.keep(b),
            b',' => {
                self.keep(b);
                if let Some(f) = self.frame_mut() {
                    f.want_key = f.object;
                }
            }
            _ => {
                self.value_starts();
                self.keep(b);
                self.lex = Lex::Scalar;
            }
        }
    }

    /// The innermost open container, if tracked.
    fn frame(&self) -> Option<&Frame> {
        let d = self.depth as usize;
        (1..=TRACKED).contains(&d).then(|| &self.frames[d - 1])
    }

    fn frame_mut(&mut self) -> Option<&mut Frame> {
        let d = self.depth as usize;
        (1..=TRACKED).contains(&d).then(|| &mut self.frames[d - 1])
    }

    fn key_byte(&mut self, b: u8) {
        if let Some(f) = self.frame_mut() {
            if f.key_len < KEY_LIMIT {
                f.key[f.key_len] = b;
                f.key_len += 1;
            } else {
                f.key_ok = false;
            }
        }
    }

    /// A value starts at the current depth: copy it if its path is wanted.
    fn value_starts(&mut self) {
        if self.active.is_some() {
            return;
        }
        let d = self.depth as usize;
        if d == 0 || d > TRACKED {
            return;
        }
        let frames = &self.frames[..d];
        let found = self.paths.iter().position(|p| {
            p.len() == d
                && frames
                    .iter()
                    .zip(p.iter())
                    .all(|(f, k)| f.object && f.key() == Some(k.as_bytes()))
        });
        if let Some(path) = found {
            if self.buf.capacity() < CAPTURE_LIMIT {
                self.buf.reserve_exact(CAPTURE_LIMIT);
            }
            self.buf.clear();
            self.active = Some(Active {
                path,
                depth: self.depth,
                too_big: false,
            });
        }
    }

    /// Copies a byte of the value being captured.
    fn keep(&mut self, b: u8) {
        if let Some(a) = &mut self.active {
            if self.buf.len() < CAPTURE_LIMIT {
                self.buf.push(b);
            } else {
                a.too_big = true;
            }
        }
    }

    /// A value ended at `depth`: the captured one, if it started there.
    fn value_ended_at(&mut self, depth: u32) {
        if self.active.as_ref().is_some_and(|a| a.depth == depth) {
            if let Some(a) = self.active.take() {
                self.results[a.path] = if a.too_big {
                    Captured::TooBig
                } else {
                    Captured::Value(self.buf.clone())
                };
                self.buf.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATHS: &[Path] = &[&["type"], &["usage"], &["response", "usage"]];

    fn scan(doc: &[u8]) -> JsonScan {
        let mut s = JsonScan::new(PATHS);
        s.feed(doc);
        s
    }

    fn text(s: &JsonScan, i: usize) -> Option<String> {
        s.value(i).map(|v| String::from_utf8(v.to_vec()).unwrap())
    }

    #[test]
    fn captures_values_at_their_paths_only() {
        let doc =
            br#"{"id":"x","type" : "response.completed","nested":{"usage":{"no":1},"type":"no"},
            "list":[{"usage":2}],"response":{"id":"r","usage":{"input_tokens":3,"output_tokens":4}},
            "usage":{"total":[1,{"a":"}"}]}}"#;
        let s = scan(doc);
        assert_eq!(text(&s, 0).as_deref(), Some(r#""response.completed""#));
        assert_eq!(text(&s, 1).as_deref(), Some(r#"{"total":[1,{"a":"}"}]}"#));
        assert_eq!(
            text(&s, 2).as_deref(),
            Some(r#"{"input_tokens":3,"output_tokens":4}"#)
        );
    }

    #[test]
    fn scalars_strings_with_escapes_and_the_last_duplicate() {
        let s = scan(br#"{"usage":null,"type":"a\"b\\","usage" : 12 }"#);
        assert_eq!(text(&s, 1).as_deref(), Some("12"));
        assert_eq!(text(&s, 0).as_deref(), Some(r#""a\"b\\""#));
        let s = scan(br#"{"usage":null}"#);
        assert_eq!(text(&s, 1).as_deref(), Some("null"));
    }

    #[test]
    fn keys_inside_strings_and_escaped_keys_do_not_match() {
        let s = scan(br#"{"a":"{\"usage\":1}","usag\u0065":2,"x":{"usage":3}}"#);
        assert_eq!(s.get(1), &Captured::Absent);
    }

    #[test]
    fn a_long_value_is_too_big_and_a_later_one_is_kept() {
        let long = format!(r#"{{"usage":"{}","type":"t"}}"#, "x".repeat(CAPTURE_LIMIT));
        let s = scan(long.as_bytes());
        assert_eq!(s.get(1), &Captured::TooBig);
        assert_eq!(text(&s, 0).as_deref(), Some(r#""t""#));
        assert!(s.buf.capacity() <= CAPTURE_LIMIT);
    }

    #[test]
    fn a_value_cut_short_is_absent_and_reset_forgets() {
        let mut s = scan(br#"{"usage":{"prompt_tokens":1"#);
        assert_eq!(s.get(1), &Captured::Absent);
        s.reset();
        s.feed(br#"{"usage":5}"#);
        assert_eq!(text(&s, 1).as_deref(), Some("5"));
    }

    #[test]
    fn deep_nesting_and_garbage_do_not_confuse_it() {
        let deep = format!(
            "{{\"a\":{}{}, \"usage\":1}}",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        assert_eq!(text(&scan(deep.as_bytes()), 1).as_deref(), Some("1"));
        for junk in [
            &b"]]]}}}"[..],
            b"[DONE]",
            b"\"\\",
            b"{:,,\"usage\"",
            b"}{\"usage\":7}",
        ] {
            let _ = scan(junk);
        }
        assert_eq!(text(&scan(b"}{\"usage\":7}"), 1).as_deref(), Some("7"));
    }

    #[test]
    fn root_arrays_and_non_object_frames_never_match() {
        let s = scan(br#"[{"usage":1}]"#);
        assert_eq!(s.get(1), &Captured::Absent);
        let s = scan(br#"{"response":[{"usage":1}]}"#);
        assert_eq!(s.get(2), &Captured::Absent);
    }
}
