//! Finding the line and column of a node of the YAML document by its path.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path into the YAML document.
#[derive(Clone, Debug)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

impl Seg {
    pub(super) fn key(k: &str) -> Seg {
        Seg::Key(k.to_owned())
    }
}

/// Finds the line and column of the node at `path` by walking the document
/// with the YAML parser and failing on purpose at that node: the parser
/// attaches the node's position to the error. Missing nodes locate their
/// nearest existing parent.
pub(super) fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    for len in (0..=path.len()).rev() {
        let seed = Locate { path: &path[..len] };
        let de = yaml_serde::Deserializer::from_str(text);
        if let Err(e) = seed.deserialize(de)
            && e.to_string().contains(HERE)
        {
            return e.location().map(|l| (l.line(), l.column()));
        }
    }
    None
}

const HERE: &str = "\u{0}here";

struct Locate<'p> {
    path: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.path.is_empty() {
            // Fails at this node, so the error carries its position.
            return d.deserialize_any(Here);
        }
        d.deserialize_any(self)
    }
}

struct Here;

impl<'de> Visitor<'de> for Here {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("anything")
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map or a list")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Seg::Key(want) = &self.path[0] else {
            return Err(de::Error::custom("not here"));
        };
        while let Some(k) = map.next_key::<String>()? {
            if &k == want {
                return map.next_value_seed(Locate {
                    path: &self.path[1..],
                });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Err(de::Error::custom("not here"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Seg::Index(want) = self.path[0] else {
            return Err(de::Error::custom("not here"));
        };
        for _ in 0..want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Err(de::Error::custom("not here"));
            }
        }
        seq.next_element_seed(Locate {
            path: &self.path[1..],
        })?;
        Err(de::Error::custom("not here"))
    }
}
