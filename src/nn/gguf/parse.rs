//! Reading GGUF's little-endian fields from a byte slice. Every read checks
//! the bytes left first, and every count read from the file is bounded by
//! them before anything is allocated for it, so a truncated or hostile
//! file gives an error, never a panic, an abort or a huge allocation.
//! Errors are bare messages; the reader adds the file and the key or tensor.

use super::value::{Array, Value};
use super::value_type::ValueType;

/// How deep arrays of arrays may nest: bounds the recursion (llama.cpp
/// reads none; gguf-py flattens them).
pub(crate) const MAX_NESTING: usize = 8;

/// A position in the file's bytes.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// At the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The offset of the next read.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the position.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes, holding `what`.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "truncated: {what} needs {n} bytes at offset {}, but the file ends after {} more (it has {} bytes)",
                self.pos,
                self.remaining(),
                self.buf.len()
            ));
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A little-endian u64.
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// `n` as a count of items of at least `min_bytes` each that must fit
    /// in the bytes left: the check before allocating for them.
    pub(crate) fn count(&mut self, n: u64, min_bytes: usize, what: &str) -> Result<usize, String> {
        let fits = usize::try_from(n).ok().filter(|&n| {
            n.checked_mul(min_bytes)
                .is_some_and(|b| b <= self.remaining())
        });
        fits.ok_or_else(|| {
            format!(
                "{what} count {n} cannot fit in the {} bytes left at offset {} ({min_bytes} bytes each at least); the file is corrupt",
                self.remaining(),
                self.pos
            )
        })
    }

    /// A GGUF string: a u64 length and that many bytes.
    pub(crate) fn string(&mut self, what: &str) -> Result<&'a [u8], String> {
        let len = self.u64(&format!("the length of {what}"))?;
        match usize::try_from(len) {
            Ok(n) if n <= self.remaining() => self.take(n, what),
            _ => Err(format!(
                "{what} has length {len} at offset {}, but only {} bytes are left",
                self.pos - 8,
                self.remaining()
            )),
        }
    }

    /// A value type id.
    pub(crate) fn value_type(&mut self, what: &str) -> Result<ValueType, String> {
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| {
            format!(
                "{what} is {id}, which is no GGUF value type (0..=12) at offset {}",
                self.pos - 4
            )
        })
    }

    /// One value of kind `ty`.
    pub(crate) fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value, String> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("a u8")?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array("an i8")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("a u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("an i16")?)),
            ValueType::U32 => Value::U32(self.u32("a u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("an i32")?)),
            ValueType::U64 => Value::U64(self.u64("a u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("an i64")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("an f32")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("an f64")?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("the string")?.to_vec()),
            ValueType::Array => Value::Array(self.array_value(depth)?),
        })
    }

    /// A bool: one byte, 0 or 1 as the format requires.
    fn bool(&mut self) -> Result<bool, String> {
        match self.array::<1>("a bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!(
                "a bool holds {b} at offset {}; it must be 0 or 1",
                self.pos - 1
            )),
        }
    }

    /// An array: element type, count, elements (`depth` arrays enclose it).
    fn array_value(&mut self, depth: usize) -> Result<Array, String> {
        if depth >= MAX_NESTING {
            return Err(format!(
                "arrays nest deeper than {MAX_NESTING} levels at offset {}",
                self.pos
            ));
        }
        let ty = self.value_type("the array's element type")?;
        let n = self.u64("the array's length")?;
        let n = self.count(n, ty.min_bytes(), &format!("array of {ty}"))?;
        if ty == ValueType::String {
            let strings = (0..n)
                .map(|i| {
                    self.string(&format!("string {i} of the array"))
                        .map(<[u8]>::to_vec)
                })
                .collect::<Result<_, _>>()?;
            return Ok(Array::String(strings));
        }
        if ty == ValueType::Array {
            let arrays = (0..n)
                .map(|_| self.array_value(depth + 1))
                .collect::<Result<_, _>>()?;
            return Ok(Array::Array(arrays));
        }
        // Fixed-size elements: one bounds check, then a bulk decode.
        let size = ty.scalar_bytes().unwrap_or(1);
        let bytes = self.take(n * size, &format!("{n} {ty} elements"))?;
        decode(ty, bytes).map_err(|i| {
            format!(
                "element {i} of an array of bool holds {}; it must be 0 or 1",
                bytes[i]
            )
        })
    }
}

/// Fixed-size elements of kind `ty` from `bytes`; `Err(i)` for an
/// element `i` of a bool array that is neither 0 nor 1.
fn decode(ty: ValueType, bytes: &[u8]) -> Result<Array, usize> {
    macro_rules! le {
        ($t:ty, $n:literal) => {
            bytes
                .chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; $n])))
                .collect()
        };
    }
    Ok(match ty {
        ValueType::U8 => Array::U8(bytes.to_vec()),
        ValueType::I8 => Array::I8(le!(i8, 1)),
        ValueType::U16 => Array::U16(le!(u16, 2)),
        ValueType::I16 => Array::I16(le!(i16, 2)),
        ValueType::U32 => Array::U32(le!(u32, 4)),
        ValueType::I32 => Array::I32(le!(i32, 4)),
        ValueType::U64 => Array::U64(le!(u64, 8)),
        ValueType::I64 => Array::I64(le!(i64, 8)),
        ValueType::F32 => Array::F32(le!(f32, 4)),
        ValueType::F64 => Array::F64(le!(f64, 8)),
        ValueType::Bool => {
            if let Some(i) = bytes.iter().position(|&b| b > 1) {
                return Err(i);
            }
            Array::Bool(bytes.iter().map(|&b| b == 1).collect())
        }
        ValueType::String | ValueType::Array => Array::U8(Vec::new()),
    })
}
