//! The names of a cluster's locks.
//!
//! A cluster serves many named locks, each an independent instance of the
//! configured mutual-exclusion algorithm. A [`Name`] is a UTF-8 string of
//! 1 to [`Name::MAX_LEN`] bytes with no control characters, compared
//! bytewise (so `jobs/nightly` and `Jobs/nightly` are two locks, and the
//! order in which several names are taken at once is the bytewise one).
//! [`Name::DEFAULT`] is the lock every command takes when none is named.
//!
//! A name is checked wherever it enters: built from a user's string with
//! [`Name::new`], or decoded from a peer's frame (decoding refuses a bad
//! one), so the engine never holds one that breaks the rules.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

/// A lock's name; see the module documentation. Cloning one is cheap.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

/// Why a string is not a [`Name`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The empty string.
    #[error("a lock name cannot be empty")]
    Empty,
    /// Longer than [`Name::MAX_LEN`] bytes.
    #[error("lock name is {0} bytes long; the limit is {max}", max = Name::MAX_LEN)]
    TooLong(usize),
    /// A control character (newline, tab, NUL, ...) at a byte offset.
    #[error("lock name has a control character at byte {0}")]
    Control(usize),
}

impl Name {
    /// The longest name, in bytes.
    pub const MAX_LEN: usize = 256;

    /// The spelling of the lock taken when none is named.
    pub const DEFAULT: &'static str = "default";

    /// `s` as a name, if it is one.
    pub fn new(s: &str) -> Result<Name, NameError> {
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        if s.len() > Self::MAX_LEN {
            return Err(NameError::TooLong(s.len()));
        }
        if let Some((at, _)) = s.char_indices().find(|(_, c)| c.is_control()) {
            return Err(NameError::Control(at));
        }
        Ok(Name(Arc::from(s)))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Name {
    /// [`Name::DEFAULT`].
    fn default() -> Name {
        Name(Arc::from(Self::DEFAULT))
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Name {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Name, NameError> {
        Name::new(s)
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        let s = String::deserialize(d)?;
        Name::new(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(Name::new(""), Err(NameError::Empty));
        assert_eq!(Name::new(&"x".repeat(257)), Err(NameError::TooLong(257)));
        assert!(Name::new(&"x".repeat(256)).is_ok());
        assert_eq!(Name::new("a\nb"), Err(NameError::Control(1)));
        assert_eq!(Name::new("ok\u{7f}"), Err(NameError::Control(2)));
        assert_eq!(Name::new("jobs/nightly").unwrap().as_str(), "jobs/nightly");
        assert_eq!(Name::new("drucker-ä").unwrap().to_string(), "drucker-ä");
        assert_eq!(Name::default().as_str(), "default");
    }

    #[test]
    fn a_bad_name_does_not_decode() {
        let good = crate::wire::encode(&"printer-2".to_string());
        assert_eq!(crate::wire::decode::<Name>(&good).unwrap().as_str(), "printer-2");
        let bad = crate::wire::encode(&"tab\there".to_string());
        assert!(crate::wire::decode::<Name>(&bad).is_err());
        let empty = crate::wire::encode(&String::new());
        assert!(crate::wire::decode::<Name>(&empty).is_err());
    }

    #[test]
    fn names_order_bytewise() {
        let mut v: Vec<Name> =
            ["b", "a/z", "B", "a"].iter().map(|s| Name::new(s).unwrap()).collect();
        v.sort();
        let s: Vec<&str> = v.iter().map(Name::as_str).collect();
        assert_eq!(s, ["B", "a", "a/z", "b"]);
    }
}
