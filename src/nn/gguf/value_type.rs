//! [`ValueType`]: the thirteen kinds of GGUF metadata value, by the type
//! id the file stores, with their sizes (for bounding counts) and names
//! (for messages).

use std::fmt;

/// The kind of a metadata value: the type id a GGUF file stores before it
/// (`gguf_type` in llama.cpp, `GGUFValueType` in gguf-py).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `UINT8` (0).
    U8 = 0,
    /// `INT8` (1).
    I8 = 1,
    /// `UINT16` (2).
    U16 = 2,
    /// `INT16` (3).
    I16 = 3,
    /// `UINT32` (4): llama.cpp's counts, lengths and ids.
    U32 = 4,
    /// `INT32` (5).
    I32 = 5,
    /// `FLOAT32` (6).
    F32 = 6,
    /// `BOOL` (7): one byte, 0 or 1.
    Bool = 7,
    /// `STRING` (8): a u64 length and that many bytes, no terminator.
    String = 8,
    /// `ARRAY` (9): an element type, a u64 count and the elements.
    Array = 9,
    /// `UINT64` (10).
    U64 = 10,
    /// `INT64` (11).
    I64 = 11,
    /// `FLOAT64` (12).
    F64 = 12,
}

impl ValueType {
    /// Every kind, in type-id order.
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type id the file stores.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The kind with type id `id`, if GGUF has one.
    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::ALL.get(id as usize).copied()
    }

    /// A short name for messages: `u32`, `f32`, `bool`, `string`, `array`.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// Bytes of one value of a fixed-size kind; `None` for strings and arrays.
    pub(crate) fn scalar_bytes(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes a value of this kind takes in a file: bounds an
    /// element count by the bytes left before anything is allocated.
    pub(crate) fn min_bytes(self) -> usize {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            t => t.scalar_bytes().unwrap_or(1),
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
