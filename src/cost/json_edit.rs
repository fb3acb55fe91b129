//! Edits to a JSON document that keep every byte they do not change: the
//! members of an object with the byte ranges of their values, and
//! splices (set a member's value, add a member) applied in one pass.
//!
//! The document is one `serde_json` has already accepted; anything else
//! gives `None`, never a panic.

use std::ops::Range;

/// One member of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The key, unescaped.
    pub(crate) key: String,
    /// Where its value is.
    pub(crate) value: Range<usize>,
}

/// An object of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Object {
    /// Where its `{` is.
    pub(crate) open: usize,
    /// Its members, in order.
    pub(crate) members: Vec<Member>,
}

impl Object {
    /// The last member named `key` (the one a JSON reader keeps).
    pub(crate) fn get(&self, key: &str) -> Option<&Member> {
        self.members.iter().rev().find(|m| m.key == key)
    }

    /// The edit that adds `"key":value` (value as JSON text) at its end.
    pub(crate) fn add(&self, key: &str, value: &str) -> Edit {
        let key = serde_json::Value::from(key);
        match self.members.last() {
            Some(last) => Edit::insert(last.value.end, format!(",{key}:{value}")),
            None => Edit::insert(self.open + 1, format!("{key}:{value}")),
        }
    }
}

/// Replaces `at` with `text` (an insertion when `at` is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    at: Range<usize>,
    text: String,
}

impl Edit {
    /// Replaces the bytes `at`.
    pub(crate) fn replace(at: Range<usize>, text: String) -> Edit {
        Edit { at, text }
    }

    /// Inserts before byte `at`.
    pub(crate) fn insert(at: usize, text: String) -> Edit {
        Edit { at: at..at, text }
    }
}

/// `json` with `edits` applied (ranges must not overlap; insertions at one
/// place keep their order).
pub(crate) fn apply(json: &[u8], mut edits: Vec<Edit>) -> Vec<u8> {
    edits.sort_by_key(|e| e.at.start);
    let extra: usize = edits.iter().map(|e| e.text.len()).sum();
    let mut out = Vec::with_capacity(json.len() + extra);
    let mut from = 0;
    for e in edits {
        out.extend_from_slice(&json[from..e.at.start]);
        out.extend_from_slice(e.text.as_bytes());
        from = e.at.end;
    }
    out.extend_from_slice(&json[from..]);
    out
}

/// The object whose `{` is the first non-blank byte at or after `at`.
pub(crate) fn object(json: &[u8], at: usize) -> Option<Object> {
    let open = skip_blanks(json, at);
    if json.get(open) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_blanks(json, open + 1);
    if json.get(i) == Some(&b'}') {
        return Some(Object { open, members });
    }
    loop {
        let key_end = string_end(json, i)?;
        let key = unescape(&json[i..key_end])?;
        i = skip_blanks(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_blanks(json, i + 1);
        let end = value_end(json, start)?;
        members.push(Member {
            key,
            value: start..end,
        });
        i = skip_blanks(json, end);
        match json.get(i)? {
            b',' => i = skip_blanks(json, i + 1),
            b'}' => return Some(Object { open, members }),
            _ => return None,
        }
    }
}

fn skip_blanks(json: &[u8], mut i: usize) -> usize {
    while json
        .get(i)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
    {
        i += 1;
    }
    i
}

/// The index after the string starting at `i`.
fn string_end(json: &[u8], i: usize) -> Option<usize> {
    if json.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match json.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The index after the value starting at `i`.
fn value_end(json: &[u8], i: usize) -> Option<usize> {
    match json.get(i)? {
        b'"' => string_end(json, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match json.get(j)? {
                    b'"' => {
                        j = string_end(json, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let n = json[i..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                .unwrap_or(json.len() - i);
            (n > 0).then_some(i + n)
        }
    }
}

/// A key as written (with its quotes), unescaped.
fn unescape(raw: &[u8]) -> Option<String> {
    if raw.contains(&b'\\') {
        serde_json::from_slice(raw).ok()
    } else {
        std::str::from_utf8(&raw[1..raw.len() - 1])
            .ok()
            .map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(json: &[u8], r: &Range<usize>) -> String {
        String::from_utf8(json[r.clone()].to_vec()).unwrap()
    }

    #[test]
    fn members_with_their_value_ranges() {
        let json =
            br#" { "a" : {"x":["}",{"y":"\""}]} , "b\u0063":-1.5e3,"s":"q\"}","n":null,"e":{}}"#;
        let obj = object(json, 0).unwrap();
        let got: Vec<(String, String)> = obj
            .members
            .iter()
            .map(|m| (m.key.clone(), text(json, &m.value)))
            .collect();
        assert_eq!(
            got,
            [
                ("a", r#"{"x":["}",{"y":"\""}]}"#),
                ("bc", "-1.5e3"),
                ("s", r#""q\"}""#),
                ("n", "null"),
                ("e", "{}"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let inner = object(json, obj.get("a").unwrap().value.start).unwrap();
        assert_eq!(inner.members[0].key, "x");
        assert_eq!(object(b"{}", 0).unwrap().members, []);
    }

    #[test]
    fn malformed_documents_give_none() {
        for bad in [
            &b""[..],
            b"[]",
            b"{",
            b"{\"a\"}",
            b"{\"a\":1",
            b"{\"a\":1 x",
            b"{\"a\":\"",
            b"{\"a\":}",
            b"{\"a\":[}",
        ] {
            assert_eq!(object(bad, 0), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn edits_keep_every_other_byte() {
        let json = b"{ \"a\": 1,\n  \"b\": [2] }";
        let obj = object(json, 0).unwrap();
        let edits = vec![
            obj.add("c", "true"),
            Edit::replace(obj.get("a").unwrap().value.clone(), "10".into()),
            obj.add("d", "{}"),
        ];
        assert_eq!(
            String::from_utf8(apply(json, edits)).unwrap(),
            "{ \"a\": 10,\n  \"b\": [2],\"c\":true,\"d\":{} }"
        );
        let empty = object(b"{ }", 0).unwrap();
        assert_eq!(
            apply(b"{ }", vec![empty.add("k\"", "1")]),
            b"{\"k\\\"\":1 }"
        );
    }
}
