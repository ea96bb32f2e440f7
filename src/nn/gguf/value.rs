//! [`Value`]: one GGUF metadata value, of any of the format's thirteen
//! kinds ([`ValueType`]); arrays ([`Array`]) keep their elements in one
//! typed vector, so a 150 000-token vocabulary's scores are 600 KB, not a
//! `Value` each.

use std::fmt;

use super::value_type::ValueType;

/// One metadata value. Strings keep the file's bytes (GGUF does not
/// promise UTF-8, and some vocabularies hold partial characters); the
/// getters check UTF-8 where they give `&str`.
#[derive(Clone, PartialEq)]
pub enum Value {
    /// `UINT8`.
    U8(u8),
    /// `INT8`.
    I8(i8),
    /// `UINT16`.
    U16(u16),
    /// `INT16`.
    I16(i16),
    /// `UINT32`.
    U32(u32),
    /// `INT32`.
    I32(i32),
    /// `UINT64`.
    U64(u64),
    /// `INT64`.
    I64(i64),
    /// `FLOAT32`.
    F32(f32),
    /// `FLOAT64`.
    F64(f64),
    /// `BOOL`.
    Bool(bool),
    /// `STRING`: the bytes, normally UTF-8.
    String(Vec<u8>),
    /// `ARRAY`.
    Array(Array),
}

/// An array value: its elements in one vector of their kind. Arrays of
/// arrays hold each inner array with its own element kind, as the format
/// stores them.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// Of `UINT8`.
    U8(Vec<u8>),
    /// Of `INT8`.
    I8(Vec<i8>),
    /// Of `UINT16`.
    U16(Vec<u16>),
    /// Of `INT16`.
    I16(Vec<i16>),
    /// Of `UINT32`.
    U32(Vec<u32>),
    /// Of `INT32`.
    I32(Vec<i32>),
    /// Of `UINT64`.
    U64(Vec<u64>),
    /// Of `INT64`.
    I64(Vec<i64>),
    /// Of `FLOAT32`.
    F32(Vec<f32>),
    /// Of `FLOAT64`.
    F64(Vec<f64>),
    /// Of `BOOL`.
    Bool(Vec<bool>),
    /// Of `STRING` (bytes, normally UTF-8).
    String(Vec<Vec<u8>>),
    /// Of `ARRAY`: llama.cpp's reader refuses these, so the writer does too.
    Array(Vec<Array>),
}

/// A number or flag, widened, for the getters' conversions.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scalar {
    Int(i128),
    Float(f64),
    Bool(bool),
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::Float(v) => write!(f, "{v:?}"),
            Scalar::Bool(v) => write!(f, "{v}"),
        }
    }
}

impl Value {
    /// The value's kind.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// The kind for messages: `u32`, `string`, `array of f32`,
    /// `array of array of i32`.
    pub fn kind(&self) -> String {
        match self {
            Value::Array(a) => a.kind(),
            v => v.value_type().name().to_string(),
        }
    }

    /// A string value's bytes.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A number or bool, widened; `None` for strings and arrays.
    pub(crate) fn scalar(&self) -> Option<Scalar> {
        Some(match *self {
            Value::U8(v) => Scalar::Int(v.into()),
            Value::I8(v) => Scalar::Int(v.into()),
            Value::U16(v) => Scalar::Int(v.into()),
            Value::I16(v) => Scalar::Int(v.into()),
            Value::U32(v) => Scalar::Int(v.into()),
            Value::I32(v) => Scalar::Int(v.into()),
            Value::U64(v) => Scalar::Int(v.into()),
            Value::I64(v) => Scalar::Int(v.into()),
            Value::F32(v) => Scalar::Float(v.into()),
            Value::F64(v) => Scalar::Float(v),
            Value::Bool(v) => Scalar::Bool(v),
            Value::String(_) | Value::Array(_) => return None,
        })
    }
}

impl Array {
    /// The elements' kind.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F32(_) => ValueType::F32,
            Array::F64(_) => ValueType::F64,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kind for messages: `array of u32`; for arrays of arrays, the
    /// inner kind when all inner arrays share it.
    pub fn kind(&self) -> String {
        match self {
            Array::Array(inner) => match inner.first().map(Array::kind) {
                Some(k) if inner.iter().all(|a| a.kind() == k) => format!("array of {k}"),
                _ => "array of array".to_string(),
            },
            a => format!("array of {}", a.elem_type().name()),
        }
    }

    /// Element `i` as a number or bool; `None` for strings, arrays and
    /// indices past the end.
    pub(crate) fn scalar(&self, i: usize) -> Option<Scalar> {
        Some(match self {
            Array::U8(v) => Scalar::Int((*v.get(i)?).into()),
            Array::I8(v) => Scalar::Int((*v.get(i)?).into()),
            Array::U16(v) => Scalar::Int((*v.get(i)?).into()),
            Array::I16(v) => Scalar::Int((*v.get(i)?).into()),
            Array::U32(v) => Scalar::Int((*v.get(i)?).into()),
            Array::I32(v) => Scalar::Int((*v.get(i)?).into()),
            Array::U64(v) => Scalar::Int((*v.get(i)?).into()),
            Array::I64(v) => Scalar::Int((*v.get(i)?).into()),
            Array::F32(v) => Scalar::Float((*v.get(i)?).into()),
            Array::F64(v) => Scalar::Float(*v.get(i)?),
            Array::Bool(v) => Scalar::Bool(*v.get(i)?),
            Array::String(_) | Array::Array(_) => return None,
        })
    }
}

impl fmt::Debug for Value {
    /// Strings shown as text (lossily), the rest as their variant.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) => write!(f, "String({:?})", String::from_utf8_lossy(s)),
            Value::Array(a) => write!(f, "Array({a:?})"),
            v => match v.scalar() {
                Some(s) => write!(f, "{}({s})", v.value_type().name()),
                None => Ok(()),
            },
        }
    }
}

/// `From` for each scalar kind: `Value::from(3u32)` is a `UINT32`.
macro_rules! from_scalar {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$v(v)
            }
        }
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Value {
                Value::Array(Array::$v(v))
            }
        }
        impl From<&[$t]> for Value {
            fn from(v: &[$t]) -> Value {
                Value::Array(Array::$v(v.to_vec()))
            }
        }
    )*};
}

from_scalar!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool,
);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.as_bytes().to_vec())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::String(v.into_bytes())
    }
}

impl From<Vec<String>> for Value {
    fn from(v: Vec<String>) -> Value {
        Value::Array(Array::String(
            v.into_iter().map(String::into_bytes).collect(),
        ))
    }
}

impl From<&[&str]> for Value {
    fn from(v: &[&str]) -> Value {
        Value::Array(Array::String(
            v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ))
    }
}

impl From<Array> for Value {
    fn from(v: Array) -> Value {
        Value::Array(v)
    }
}
