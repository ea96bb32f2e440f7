//! Typed metadata getters on [`GgufFile`], for config mappers. Reading is
//! lenient where no information is lost — any integer kind converts to any
//! integer type it fits, floats to `f32` or `f64` and integers to floats
//! when exact — and otherwise an error names the file, the key, what was
//! expected and what was found. (llama.cpp itself wants the exact kinds
//! the writer must emit; see `GgufWriter`.)

use super::reader::{GgufFile, bad};
use super::value::{Array, Scalar, Value};
use crate::error::Result;

/// A Rust type a metadata value converts to.
pub trait FromValue<'a>: Sized {
    /// What the getter expects, for messages: `u32`, `array of string`.
    fn expected() -> String;

    /// `value` as `Self`, or what was found instead (`found i32 -3, which
    /// does not fit u32`).
    fn from_value(value: &'a Value) -> std::result::Result<Self, String>;
}

/// A number or bool converted to `Self` where nothing is lost.
trait FromScalar: Sized {
    const NAME: &'static str;
    fn from_scalar(s: Scalar) -> Option<Self>;
}

macro_rules! int_scalar {
    ($($t:ty),*) => {$(
        impl FromScalar for $t {
            const NAME: &'static str = stringify!($t);
            fn from_scalar(s: Scalar) -> Option<Self> {
                match s {
                    Scalar::Int(i) => <$t>::try_from(i).ok(),
                    _ => None,
                }
            }
        }
    )*};
}

int_scalar!(u8, i8, u16, i16, u32, i32, u64, i64, usize);

impl FromScalar for f32 {
    const NAME: &'static str = "f32";
    fn from_scalar(s: Scalar) -> Option<Self> {
        match s {
            Scalar::Float(f) if (f as f32).is_finite() == f.is_finite() => Some(f as f32),
            Scalar::Int(i) if (i as f32) as i128 == i => Some(i as f32),
            _ => None,
        }
    }
}

impl FromScalar for f64 {
    const NAME: &'static str = "f64";
    fn from_scalar(s: Scalar) -> Option<Self> {
        match s {
            Scalar::Float(f) => Some(f),
            Scalar::Int(i) if (i as f64) as i128 == i => Some(i as f64),
            _ => None,
        }
    }
}

impl FromScalar for bool {
    const NAME: &'static str = "bool";
    fn from_scalar(s: Scalar) -> Option<Self> {
        match s {
            Scalar::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// `s`, of kind `kind`, as `T`, or why not.
fn convert<T: FromScalar>(s: Scalar, kind: &str) -> std::result::Result<T, String> {
    T::from_scalar(s).ok_or_else(|| match s {
        Scalar::Int(_) | Scalar::Float(_) if T::NAME != "bool" => {
            format!("found {kind} {s}, which {} cannot hold", T::NAME)
        }
        _ => format!("found {kind} {s}"),
    })
}

macro_rules! from_value {
    ($($t:ty),*) => {$(
        impl<'a> FromValue<'a> for $t {
            fn expected() -> String {
                <$t as FromScalar>::NAME.to_string()
            }
            fn from_value(value: &'a Value) -> std::result::Result<Self, String> {
                match value.scalar() {
                    Some(s) => convert(s, &value.kind()),
                    None => Err(format!("found {}", value.kind())),
                }
            }
        }

        impl<'a> FromValue<'a> for Vec<$t> {
            fn expected() -> String {
                format!("array of {}", <$t as FromScalar>::NAME)
            }
            fn from_value(value: &'a Value) -> std::result::Result<Self, String> {
                let Some(array) = value.as_array() else {
                    return Err(format!("found {}", value.kind()));
                };
                let kind = array.elem_type().name();
                (0..array.len())
                    .map(|i| match array.scalar(i) {
                        Some(s) => convert(s, kind).map_err(|e| format!("element {i}: {e}")),
                        None => Err(format!("found {}", array.kind())),
                    })
                    .collect()
            }
        }
    )*};
}

from_value!(u8, i8, u16, i16, u32, i32, u64, i64, usize, f32, f64, bool);

/// `bytes` as UTF-8, or what was found.
fn text(bytes: &[u8]) -> std::result::Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("found a string that is not UTF-8 ({e})"))
}

impl<'a> FromValue<'a> for &'a str {
    fn expected() -> String {
        "string".into()
    }
    fn from_value(value: &'a Value) -> std::result::Result<Self, String> {
        match value {
            Value::String(s) => text(s),
            v => Err(format!("found {}", v.kind())),
        }
    }
}

impl<'a> FromValue<'a> for Vec<&'a str> {
    fn expected() -> String {
        "array of string".into()
    }
    fn from_value(value: &'a Value) -> std::result::Result<Self, String> {
        match value {
            Value::Array(Array::String(items)) => items
                .iter()
                .enumerate()
                .map(|(i, s)| text(s).map_err(|e| format!("element {i}: {e}")))
                .collect(),
            v => Err(format!("found {}", v.kind())),
        }
    }
}

impl<'a> FromValue<'a> for &'a Value {
    fn expected() -> String {
        "any value".into()
    }
    fn from_value(value: &'a Value) -> std::result::Result<Self, String> {
        Ok(value)
    }
}

impl GgufFile {
    /// Key `key` as `T`: `Ok(None)` when absent, an error naming the file,
    /// the key, what `T` expects and what was found when it does not
    /// convert.
    pub fn get_as<'a, T: FromValue<'a>>(&'a self, key: &str) -> Result<Option<T>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        T::from_value(value).map(Some).map_err(|e| {
            bad(
                self.name(),
                format!("key {key:?}: expected {}, {e}", T::expected()),
            )
        })
    }

    /// Key `key` as `T`, which must be present.
    pub fn require<'a, T: FromValue<'a>>(&'a self, key: &str) -> Result<T> {
        self.get_as(key)?.ok_or_else(|| {
            bad(
                self.name(),
                format!("has no key {key:?} (a {} is required)", T::expected()),
            )
        })
    }

    /// Key `key` as `T`, or `default` when absent (still an error when
    /// present with a kind that does not convert).
    pub fn get_or<'a, T: FromValue<'a>>(&'a self, key: &str, default: T) -> Result<T> {
        Ok(self.get_as(key)?.unwrap_or(default))
    }

    /// Key `key` as a `u32` (from any integer kind it fits).
    pub fn u32(&self, key: &str) -> Result<Option<u32>> {
        self.get_as(key)
    }

    /// Key `key` as a `u64` (from any integer kind it fits).
    pub fn u64(&self, key: &str) -> Result<Option<u64>> {
        self.get_as(key)
    }

    /// Key `key` as an `i32` (from any integer kind it fits).
    pub fn i32(&self, key: &str) -> Result<Option<i32>> {
        self.get_as(key)
    }

    /// Key `key` as an `i64` (from any integer kind it fits).
    pub fn i64(&self, key: &str) -> Result<Option<i64>> {
        self.get_as(key)
    }

    /// Key `key` as a `usize` (from any integer kind it fits): sizes.
    pub fn usize(&self, key: &str) -> Result<Option<usize>> {
        self.get_as(key)
    }

    /// Key `key` as an `f32` (from f32, f64 in range, or an exact integer).
    pub fn f32(&self, key: &str) -> Result<Option<f32>> {
        self.get_as(key)
    }

    /// Key `key` as an `f64` (from f32, f64, or an exact integer).
    pub fn f64(&self, key: &str) -> Result<Option<f64>> {
        self.get_as(key)
    }

    /// Key `key` as a `bool`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.get_as(key)
    }

    /// Key `key` as UTF-8 text.
    pub fn string(&self, key: &str) -> Result<Option<&str>> {
        self.get_as(key)
    }

    /// Key `key` as an array of UTF-8 strings (token lists, merges).
    pub fn strings(&self, key: &str) -> Result<Option<Vec<&str>>> {
        self.get_as(key)
    }

    /// Key `key` as an array of `u32` (elements of any integer kind).
    pub fn u32s(&self, key: &str) -> Result<Option<Vec<u32>>> {
        self.get_as(key)
    }

    /// Key `key` as an array of `i32` (token types).
    pub fn i32s(&self, key: &str) -> Result<Option<Vec<i32>>> {
        self.get_as(key)
    }

    /// Key `key` as an array of `f32` (token scores).
    pub fn f32s(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.get_as(key)
    }
}
