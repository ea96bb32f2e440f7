//! [`OrderedJson`]: JSON whose objects keep their keys in the order given.
//!
//! transformers hands templates Python dicts, which keep insertion order, so
//! a template's `tojson`, `items()` or `|items` writes a tool's schema, a
//! tool call's arguments or a document in the order the user wrote them.
//! `serde_json::Value` sorts object keys (unless serde_json's
//! `preserve_order` feature is on somewhere in the build), so this crate
//! carries such values as minijinja values, whose maps keep insertion order.

use std::fmt;
use std::str::FromStr;

use minijinja::value::{Value, ValueKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// A JSON value whose objects keep their keys in the order they were given,
/// as the Python dicts transformers passes to chat templates do: a tool's
/// JSON schema, a tool call's `arguments`, a document, an extra template
/// variable.
///
/// Parse it from text ([`OrderedJson::parse`], [`str::parse`], or as a
/// field of any `Deserialize` type read with `serde_json::from_str`) to keep
/// the order of the text. Converted from a `serde_json::Value` it has that
/// value's order: sorted, unless serde_json's `preserve_order` feature is on.
/// It serialises (to JSON, or as a template variable) in its own order.
#[derive(Clone, PartialEq, Eq)]
pub struct OrderedJson(pub(crate) Value);

impl OrderedJson {
    /// Parses JSON text, keeping each object's keys in the order written.
    /// Text that is not JSON is an [`Error::InvalidArgument`].
    pub fn parse(text: &str) -> Result<OrderedJson> {
        serde_json::from_str(text)
            .map_err(|e| Error::invalid("OrderedJson::parse", format!("not valid JSON: {e}")))
    }

    /// A JSON string.
    pub fn string(text: impl Into<String>) -> OrderedJson {
        OrderedJson(Value::from(text.into()))
    }

    /// `null`.
    pub fn null() -> OrderedJson {
        OrderedJson(Value::from(()))
    }

    /// Whether this is a JSON object.
    pub fn is_object(&self) -> bool {
        self.0.kind() == ValueKind::Map
    }

    /// Whether this is a JSON array.
    pub fn is_array(&self) -> bool {
        self.0.kind() == ValueKind::Seq
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        self.0.is_none()
    }

    /// The text of a JSON string, `None` for anything else.
    pub fn as_str(&self) -> Option<&str> {
        match self.0.kind() {
            ValueKind::String => self.0.as_str(),
            _ => None,
        }
    }

    /// The value of `key` in an object (`None` if this is no object or has
    /// no such key).
    pub fn get(&self, key: &str) -> Option<OrderedJson> {
        match self.0.get_item(&Value::from(key)) {
            Ok(v) if self.is_object() && !v.is_undefined() => Some(OrderedJson(v)),
            _ => None,
        }
    }

    /// An object's keys in their order (`[]` for anything else).
    pub fn keys(&self) -> Vec<String> {
        if !self.is_object() {
            return Vec::new();
        }
        self.0
            .try_iter()
            .map(|keys| {
                keys.map(|k| k.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An array's items in order (`[]` for anything else).
    pub fn items(&self) -> Vec<OrderedJson> {
        if !self.is_array() {
            return Vec::new();
        }
        self.0
            .try_iter()
            .map(|items| items.map(OrderedJson).collect())
            .unwrap_or_default()
    }

    /// The same value as a `serde_json::Value` (whose objects sort their keys
    /// unless serde_json's `preserve_order` feature is on).
    pub fn to_serde(&self) -> serde_json::Value {
        serde_json::to_value(&self.0).unwrap_or(serde_json::Value::Null)
    }

    /// What kind of JSON this is, for error messages: "a string", "an
    /// object", ...
    pub(crate) fn describe(value: &Value) -> &'static str {
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => "null",
            ValueKind::Bool => "true or false",
            ValueKind::Number => "a number",
            ValueKind::String => "a string",
            ValueKind::Seq => "a list",
            ValueKind::Map => "an object",
            _ => "something that is not JSON",
        }
    }
}

impl fmt::Display for OrderedJson {
    /// Compact JSON text, keys in order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(&self.0) {
            Ok(text) => f.write_str(&text),
            Err(_) => Err(fmt::Error),
        }
    }
}

impl fmt::Debug for OrderedJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OrderedJson({self})")
    }
}

impl FromStr for OrderedJson {
    type Err = Error;

    fn from_str(text: &str) -> Result<OrderedJson> {
        OrderedJson::parse(text)
    }
}

impl From<serde_json::Value> for OrderedJson {
    /// The value in the order of its objects (sorted, unless serde_json's
    /// `preserve_order` feature is on).
    fn from(value: serde_json::Value) -> OrderedJson {
        OrderedJson(Value::from_serialize(&value))
    }
}

impl From<&str> for OrderedJson {
    /// A JSON string.
    fn from(text: &str) -> OrderedJson {
        OrderedJson::string(text)
    }
}

impl From<String> for OrderedJson {
    /// A JSON string.
    fn from(text: String) -> OrderedJson {
        OrderedJson::string(text)
    }
}

impl Serialize for OrderedJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for OrderedJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        Value::deserialize(deserializer).map(OrderedJson)
    }
}
