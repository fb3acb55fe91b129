//! Where each field of the YAML document sits (line and column), for errors
//! found after deserialisation and for route line numbers.
//!
//! yaml_serde has no spans, but it stamps the position and field path of the
//! node being read onto any error a visitor returns. A walker over the whole
//! document makes every scalar (keys included) fail with a marker error,
//! reads the path and position back from the error text, and swallows it.
//! This is sound because yaml_serde consumes a scalar's event before calling
//! the visitor, so the document stays in step; mappings and sequences are
//! walked normally and located by their first key or element.

use std::collections::HashMap;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// Marks the walker's own errors; never appears in a config.
const MARKER: &str = "\u{1}tollgate-position-probe\u{1}";

/// A 1-based (line, column).
pub(crate) type Pos = (usize, usize);

/// Field path -> position, as far as it could be found.
#[derive(Debug, Default, Clone)]
pub(crate) struct Positions {
    /// Scalar values by their path, and mappings by their path (at their
    /// first key).
    nodes: HashMap<String, Pos>,
    /// Keys, by the path of the value they introduce (`routes`, `a.b`).
    keys: HashMap<String, Pos>,
    /// Scalar values in document order, to find the field at a position.
    scalars: Vec<(Pos, String)>,
}

impl Positions {
    /// Indexes `text`; an empty index when it cannot (positions are a help,
    /// never a reason to fail).
    pub(crate) fn build(text: &str) -> Positions {
        // Defence in depth: yaml_serde panics on an inconsistent event
        // stream, which the walker is written never to cause.
        let result = std::panic::catch_unwind(|| serde_yaml::from_str::<Root>(text));
        match result {
            Ok(Ok(Root(positions))) => positions,
            _ => Positions::default(),
        }
    }

    /// The position of `path`, or of its nearest ancestor that has one.
    pub(crate) fn lookup(&self, path: &str) -> Option<Pos> {
        let mut path = path;
        loop {
            if let Some(pos) = self.nodes.get(path).or_else(|| self.keys.get(path)) {
                return Some(*pos);
            }
            path = parent(path)?;
        }
    }

    /// The path of the scalar at or just before `pos` on the same line.
    pub(crate) fn path_at(&self, pos: Pos) -> Option<&str> {
        self.scalars
            .iter()
            .filter(|((line, column), _)| *line == pos.0 && *column <= pos.1)
            .max_by_key(|((_, column), _)| *column)
            .map(|(_, path)| path.as_str())
    }

    fn record(&mut self, path: &str, key: Option<&str>, pos: Pos) {
        match key {
            Some(key) => {
                if !path.is_empty() {
                    self.nodes.entry(path.to_owned()).or_insert(pos);
                }
                self.keys.entry(join(path, key)).or_insert(pos);
            }
            None => {
                self.nodes.entry(path.to_owned()).or_insert(pos);
                self.scalars.push((pos, path.to_owned()));
            }
        }
    }
}

/// `a.b` -> `a`, `a[3]` -> `a`, `a` -> ``; `None` for the root.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    let cut = path.rfind(['.', '[']).unwrap_or(0);
    Some(&path[..cut])
}

/// `path.key`, or `key` at the root.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Reads `path: MARKER at line L column C` back.
fn parse_marker(text: &str) -> Option<(String, Pos)> {
    let at = text.find(MARKER)?;
    let path = text[..at].strip_suffix(": ").unwrap_or("");
    let rest = &text[at + MARKER.len()..];
    let pos = match rest.strip_prefix(" at line ") {
        Some(rest) => {
            let (line, column) = rest.split_once(" column ")?;
            (line.parse().ok()?, column.parse().ok()?)
        }
        // yaml_serde leaves out the position of the very first character.
        None => (1, 1),
    };
    Some((path.to_owned(), pos))
}

/// The whole document's index.
struct Root(Positions);

impl<'de> de::Deserialize<'de> for Root {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut positions = Positions::default();
        Walk {
            positions: &mut positions,
            is_key: false,
            scalar: None,
        }
        .deserialize(deserializer)?;
        Ok(Root(positions))
    }
}

/// Walks one node.
struct Walk<'a> {
    positions: &'a mut Positions,
    is_key: bool,
    /// The text of the scalar just visited (a key's name).
    scalar: Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(mut self, deserializer: D) -> Result<(), D::Error> {
        let result = deserializer.deserialize_any(NodeVisitor {
            positions: &mut *self.positions,
            scalar: &mut self.scalar,
        });
        match result {
            Ok(()) => Ok(()),
            Err(err) => match parse_marker(&err.to_string()) {
                Some((path, pos)) => {
                    let key = if self.is_key {
                        Some(self.scalar.as_deref().unwrap_or(""))
                    } else {
                        None
                    };
                    self.positions.record(&path, key, pos);
                    Ok(())
                }
                None => Err(err),
            },
        }
    }
}

/// Fails every scalar with the marker; walks collections.
struct NodeVisitor<'a> {
    positions: &'a mut Positions,
    scalar: &'a mut Option<String>,
}

impl NodeVisitor<'_> {
    fn scalar<E: de::Error>(self, text: String) -> Result<(), E> {
        *self.scalar = Some(text);
        Err(E::custom(MARKER))
    }

    fn walk(&mut self, is_key: bool) -> Walk<'_> {
        Walk {
            positions: &mut *self.positions,
            is_key,
            scalar: None,
        }
    }
}

impl<'de> Visitor<'de> for NodeVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(v.to_owned())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(v.to_string())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar(String::new())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar(String::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self.walk(false))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(self.walk(true))?.is_some() {
            map.next_value_seed(self.walk(false))?;
        }
        Ok(())
    }
    fn visit_enum<A: EnumAccess<'de>>(mut self, data: A) -> Result<(), A::Error> {
        // A tagged node (`!tag value`): walk its value.
        let (_, variant) = data.variant::<IgnoredAny>()?;
        variant.newtype_variant_seed(self.walk(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
server:
  listen: [\"0.0.0.0:8080\", \"[::]:8080\"]
routes:
  - name: a
    match: { exact: /x, hosts: [a, b] }
    odd: !tag value
    empty:
  - name: b
    upstream: u
";

    #[test]
    fn finds_scalars_keys_and_mappings() {
        let p = Positions::build(DOC);
        assert_eq!(p.lookup("server"), Some((2, 3)));
        assert_eq!(p.lookup("server.listen"), Some((2, 3)));
        assert_eq!(p.lookup("server.listen[1]"), Some((2, 28)));
        assert_eq!(p.lookup("routes"), Some((3, 1)));
        assert_eq!(p.lookup("routes[0]"), Some((4, 5)));
        assert_eq!(p.lookup("routes[0].match"), Some((5, 14)));
        assert_eq!(p.lookup("routes[0].match.hosts[1]"), Some((5, 36)));
        assert_eq!(p.lookup("routes[0].odd"), Some((6, 10)));
        assert_eq!(p.lookup("routes[1]"), Some((8, 5)));
        assert_eq!(p.lookup("routes[1].upstream"), Some((9, 15)));
    }

    #[test]
    fn missing_paths_fall_back_to_an_ancestor() {
        let p = Positions::build(DOC);
        assert_eq!(p.lookup("routes[1].limits[0].rate"), Some((8, 5)));
        assert_eq!(p.lookup("nothing.here"), None);
    }

    #[test]
    fn finds_the_field_at_a_position() {
        let p = Positions::build(DOC);
        assert_eq!(p.path_at((9, 20)), Some("routes[1].upstream"));
        assert_eq!(p.path_at((5, 37)), Some("routes[0].match.hosts[1]"));
        assert_eq!(p.path_at((1, 1)), None);
    }

    #[test]
    fn broken_yaml_gives_an_empty_index() {
        let p = Positions::build("a: [\n");
        assert_eq!(p.lookup("a"), None);
    }

    #[test]
    fn paths() {
        assert_eq!(parent("a.b[2].c"), Some("a.b[2]"));
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a"), Some(""));
        assert_eq!(parent(""), None);
    }
}
