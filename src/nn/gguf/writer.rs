//! [`GgufWriter`]: a GGUF v3 file (little-endian) as llama.cpp reads it —
//! metadata in insertion order with the kinds given, tensor infos whose
//! offsets are the running sum of aligned sizes (the layout llama.cpp's
//! reader insists on), then each tensor's bytes padded with zeros to the
//! alignment. Tensor bytes come from a callback each, called in order at
//! write time, so a model is streamed one tensor at a time and never held
//! whole. Writes to any `Write`, to a `Vec<u8>` (for a browser), or to a
//! path through a temporary file renamed into place.

use std::collections::HashSet;
use std::io::Write;
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

use super::ggml_type::{block, dtype_name, ggml_type_id};
use super::value::{Array, Value};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use crate::element::DType;
use crate::error::{Error, Result};

/// The version written.
const VERSION: u32 = 3;
/// llama.cpp's `GGML_MAX_NAME`: tensor names are shorter than this.
const MAX_NAME: usize = 64;
/// The operation errors name.
const OP: &str = "GgufWriter";

/// A callback producing one tensor's bytes.
type Producer<'a> = Box<dyn FnOnce() -> Result<Vec<u8>> + 'a>;

/// A tensor to write: its info and where its bytes come from.
struct Pending<'a> {
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    type_id: u32,
    len: usize,
    data: Producer<'a>,
}

/// A GGUF file being assembled. Add metadata and tensors, then write it
/// once with [`GgufWriter::write_to`], [`GgufWriter::to_bytes`] or
/// [`GgufWriter::write`].
///
/// llama.cpp looks keys up with exact kinds (`UINT32` counts, `FLOAT32`
/// floats, `general.architecture` first by convention): give each value
/// the kind it expects.
pub struct GgufWriter<'a> {
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<Pending<'a>>,
    names: HashSet<String>,
    alignment: u32,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty file: no metadata, no tensors, alignment 32.
    pub fn new() -> Self {
        GgufWriter {
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }

    /// The tensor data alignment: 32, or what `general.alignment` set.
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Add metadata entry `key` = `value`, after those already added.
    /// Refused: an empty or repeated key; arrays of arrays (llama.cpp's
    /// reader rejects the whole file); `general.alignment` other than a
    /// `u32` power of two (it sets the alignment of the tensor data).
    pub fn metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> Result<&mut Self> {
        let (key, value) = (key.into(), value.into());
        if key.is_empty() {
            return Err(Error::invalid(OP, "a metadata key is empty"));
        }
        if self.keys.contains(&key) {
            return Err(Error::invalid(OP, format!("key {key:?} is already set")));
        }
        if let Value::Array(Array::Array(_)) = value {
            return Err(Error::invalid(
                OP,
                format!(
                    "key {key:?}: arrays of arrays are not written, since llama.cpp refuses files holding them"
                ),
            ));
        }
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a,
                ref v => {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "key {key:?} must be a u32 power of two (llama.cpp's rule), not {} {v:?}",
                            v.kind()
                        ),
                    ));
                }
            }
        }
        self.keys.insert(key.clone());
        self.metadata.push((key, value));
        Ok(self)
    }

    /// Add tensor `name` of row-major `shape` (outermost first; written as
    /// ggml's `ne`, reversed) and type `dtype`, after those already added.
    /// `data` gives its bytes as GGUF stores them (little-endian; whole
    /// blocks for a quantized type) when the file is written, and must give
    /// exactly as many as shape and type take. Refused: an empty, repeated
    /// or 64-byte-or-longer name (llama.cpp's limit); other than 1 to 4
    /// dimensions, or a 0 among them; `DType::I32`; a last dimension that
    /// is not a multiple of the type's block; a size that overflows.
    pub fn tensor<F>(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        dtype: DType,
        data: F,
    ) -> Result<&mut Self>
    where
        F: FnOnce() -> Result<Vec<u8>> + 'a,
    {
        let name = name.into();
        let bad = |m: String| Error::invalid(OP, format!("tensor {name:?}: {m}"));
        if name.is_empty() || name.len() >= MAX_NAME {
            return Err(bad(format!(
                "a name must have 1 to {} bytes (llama.cpp's limit), this one has {}",
                MAX_NAME - 1,
                name.len()
            )));
        }
        if self.names.contains(&name) {
            return Err(bad("is already added".into()));
        }
        if shape.is_empty() || shape.len() > 4 || shape.contains(&0) {
            return Err(bad(format!(
                "shape {shape:?}: GGUF needs 1 to 4 dimensions, none 0"
            )));
        }
        let type_id = ggml_type_id(dtype).ok_or_else(|| {
            bad(format!(
                "{dtype} tensors are not written to GGUF by the crate"
            ))
        })?;
        let (block_len, block_bytes) = block(dtype);
        let row = shape[shape.len() - 1];
        if !row.is_multiple_of(block_len) {
            return Err(bad(format!(
                "shape {shape:?}: rows of {row} are not a multiple of {}'s block of {block_len}",
                dtype_name(dtype)
            )));
        }
        let len = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| (n / block_len).checked_mul(block_bytes))
            .filter(|&n| n <= i64::MAX as usize)
            .ok_or_else(|| bad(format!("shape {shape:?} has more bytes than fit in memory")))?;
        self.names.insert(name.clone());
        self.tensors.push(Pending {
            name,
            shape: shape.to_vec(),
            dtype,
            type_id,
            len,
            data: Box::new(data),
        });
        Ok(self)
    }

    /// The header, metadata and tensor infos, padded to the alignment:
    /// everything before the first tensor's bytes.
    fn head(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key.as_bytes());
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(&mut out, t.name.as_bytes());
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&t.type_id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += (t.len as u64).next_multiple_of(u64::from(self.alignment));
        }
        let padded = out.len().next_multiple_of(self.alignment as usize);
        out.resize(padded, 0);
        out
    }

    /// Write the file to `out`: the head, then each tensor's bytes as its
    /// callback gives them, padded. A callback's error, or bytes of the
    /// wrong length, stop the write with that error (what `out` got so far
    /// is not a valid file).
    pub fn write_to<W: Write>(self, mut out: W) -> Result<()> {
        out.write_all(&self.head())?;
        let alignment = self.alignment as usize;
        for t in self.tensors {
            let bytes = (t.data)()?;
            if bytes.len() != t.len {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "tensor {:?}: its data callback gave {} bytes, but shape {:?} of {} takes {}",
                        t.name,
                        bytes.len(),
                        t.shape,
                        dtype_name(t.dtype),
                        t.len
                    ),
                ));
            }
            out.write_all(&bytes)?;
            drop(bytes);
            write_zeros(&mut out, t.len.next_multiple_of(alignment) - t.len)?;
        }
        out.flush()?;
        Ok(())
    }

    /// The file as bytes in memory (how a browser saves one).
    pub fn to_bytes(self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Write the file to `path`: to `path` + `.partial` first, synced, then
    /// renamed into place, so a failure (a callback's error included)
    /// leaves no half-written file under `path`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn write(self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let fail = |e: std::io::Error| {
            Error::Checkpoint(format!("{}: cannot write it ({e})", path.display()))
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".partial");
        let tmp = std::path::PathBuf::from(tmp);
        let written = std::fs::File::create(&tmp).map_err(fail).and_then(|file| {
            let mut out = std::io::BufWriter::new(file);
            self.write_to(&mut out).map_err(|e| match e {
                Error::Io(e) => fail(e),
                e => e,
            })?;
            let file = out.into_inner().map_err(|e| fail(e.into_error()))?;
            file.sync_all().map_err(fail)?;
            std::fs::rename(&tmp, path).map_err(fail)
        });
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// `n` zero bytes, a page at a time (an alignment may be large).
fn write_zeros<W: Write>(out: &mut W, mut n: usize) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len());
        out.write_all(&ZEROS[..k])?;
        n -= k;
    }
    Ok(())
}

/// A GGUF string: u64 length, bytes.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A value after its type id.
fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
    }
}

/// An array: element type, count, elements (an inner array the same way).
fn put_array(out: &mut Vec<u8>, array: &Array) {
    out.extend_from_slice(&array.elem_type().id().to_le_bytes());
    out.extend_from_slice(&(array.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            $v.iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
        };
    }
    match array {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => le!(v),
        Array::U16(v) => le!(v),
        Array::I16(v) => le!(v),
        Array::U32(v) => le!(v),
        Array::I32(v) => le!(v),
        Array::U64(v) => le!(v),
        Array::I64(v) => le!(v),
        Array::F32(v) => le!(v),
        Array::F64(v) => le!(v),
        Array::Bool(v) => v.iter().for_each(|&b| out.push(u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
    }
}
