//! [`GgufFile`]: a GGUF file (version 2 or 3, little-endian) opened for
//! reading — memory-mapped on native targets, or an owned buffer (how a
//! browser gets a file) — its metadata in file order and by key, and its
//! tensors' infos and bytes. Opening checks the whole structure, so every
//! later read is in bounds; every error names the file and the key or
//! tensor concerned.

use std::collections::HashMap;
use std::ops::Range;
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

use super::parse::Cursor;
use super::tensor_info::{TensorInfo, check_overlaps, tensor_info};
use super::value::Value;
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use crate::error::{Error, Result};

/// The fewest bytes a metadata entry takes: key length, type id, one byte.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The fewest bytes a tensor info takes: name length, dimension count,
/// one dimension, type id, offset.
const MIN_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// Where the file's bytes live.
enum Data {
    /// Mapped read-only from disk.
    #[cfg(not(target_arch = "wasm32"))]
    Mapped(memmap2::Mmap),
    /// Owned: read whole, or given by the caller.
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            #[cfg(not(target_arch = "wasm32"))]
            Data::Mapped(map) => map,
            Data::Owned(bytes) => bytes,
        }
    }
}

/// A parsed GGUF file.
pub struct GgufFile {
    name: String,
    data: Data,
    version: u32,
    alignment: u32,
    data_start: usize,
    metadata: Vec<(String, Value)>,
    by_key: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// `message` about file `name`, as a checkpoint error.
pub(crate) fn bad(name: &str, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{name}: {message}"))
}

impl GgufFile {
    /// Memory-map the GGUF file at `path` and check its structure (see
    /// [`GgufFile::from_bytes`] for what is checked).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file =
            std::fs::File::open(path).map_err(|e| bad(&name, format!("cannot open it ({e})")))?;
        // SAFETY: the map is only read, and every range read is checked
        // against its length when the file is parsed. Another process
        // truncating the file while it is mapped could fault a read; every
        // memory-mapped model loader (llama.cpp's, safetensors') accepts that.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| bad(&name, format!("cannot map it ({e})")))?;
        GgufFile::parse(name, Data::Mapped(map))
    }

    /// Parse a GGUF file held in memory; `name` is what errors call it.
    ///
    /// Checked, before anything proportional to a count read from the
    /// file is allocated: the magic; the version (2 or 3; 1, others and
    /// big-endian files refused by number); the metadata and tensor
    /// counts, string and array lengths against the bytes left; value
    /// type ids; bools 0 or 1; nesting of arrays; keys non-empty, UTF-8
    /// and unique; `general.alignment` a `u32` power of two (else 32);
    /// tensor names UTF-8 and unique; 1 to 4 dimensions, each > 0, with
    /// element and byte counts that do not overflow; the type a supported
    /// one (others refused by ggml name); the row length a multiple of the
    /// type's block; offsets aligned; data inside the file and not
    /// overlapping another tensor's.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<GgufFile> {
        GgufFile::parse(name.into(), Data::Owned(bytes))
    }

    fn parse(name: String, data: Data) -> Result<GgufFile> {
        let buf = data.bytes();
        let err = |m: String| bad(&name, m);
        let mut c = Cursor::new(buf);
        let magic = c.take(4, "the magic \"GGUF\"").map_err(err)?;
        if magic != MAGIC {
            return Err(err(format!(
                "not a GGUF file: it starts with {magic:02x?}, not \"GGUF\""
            )));
        }
        let version = c.u32("the version").map_err(err)?;
        check_version(version).map_err(err)?;
        let n_tensors = c.u64("the tensor count").map_err(err)?;
        let n_kv = c.u64("the metadata count").map_err(err)?;
        // Both counts at once against the bytes left, before either is used.
        let least = u128::from(n_kv) * u128::from(MIN_KV_BYTES)
            + u128::from(n_tensors) * u128::from(MIN_INFO_BYTES);
        if least > c.remaining() as u128 {
            return Err(err(format!(
                "{n_kv} metadata entries and {n_tensors} tensor infos need at least {least} bytes, but {} follow the header; the file is corrupt or truncated",
                c.remaining()
            )));
        }
        let (n_kv, n_tensors) = (n_kv as usize, n_tensors as usize);

        let (metadata, by_key) = read_metadata(&mut c, n_kv).map_err(err)?;
        let alignment = alignment(by_key.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1))
            .map_err(|m| err(format!("key {ALIGNMENT_KEY:?}: {m}")))?;
        let (tensors, by_name, data_start) =
            read_tensors(&mut c, n_tensors, alignment).map_err(err)?;
        Ok(GgufFile {
            data_start: usize::try_from(data_start).unwrap_or(usize::MAX),
            name,
            data,
            version,
            alignment,
            metadata,
            by_key,
            tensors,
            by_name,
        })
    }

    /// What errors call the file: its path, or the name given to
    /// [`GgufFile::from_bytes`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The format version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Tensor data alignment in bytes: `general.alignment`, or 32.
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Where the tensor data begins in the file (offsets in tensor infos
    /// are relative to it).
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.by_key.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor named `name`, or an error naming the file and the tensor.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor(name)
            .ok_or_else(|| bad(&self.name, format!("has no tensor {name:?}")))
    }

    /// The whole file's bytes (tensor infos' byte ranges index them), for
    /// the weight loader (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn data(&self) -> &[u8] {
        self.data.bytes()
    }

    /// The bytes of tensor `name`, as stored (little-endian, blocks for a
    /// quantized type).
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.require_tensor(name)?;
        Ok(&self.data.bytes()[info.byte_range()])
    }

    /// The bytes of rows `rows` of tensor `name` (see
    /// [`TensorInfo::rows`]): whole rows are contiguous, so a shard of the
    /// outermost dimension is one slice, quantized or not.
    pub fn tensor_rows(&self, name: &str, rows: Range<usize>) -> Result<&[u8]> {
        let info = self.require_tensor(name)?;
        let n = info.rows();
        if rows.start > rows.end || rows.end > n {
            return Err(bad(
                &self.name,
                format!(
                    "tensor {name:?}: rows {}..{} asked for, but its shape {:?} has {n} rows",
                    rows.start, rows.end, info.shape
                ),
            ));
        }
        let row = info.row_bytes();
        let start = info.start + rows.start * row;
        Ok(&self.data.bytes()[start..start + rows.len() * row])
    }
}

/// Metadata entries in file order, and their indices by key.
type Metadata = (Vec<(String, Value)>, HashMap<String, usize>);

/// `n` metadata entries (a count already bounded by the bytes left).
fn read_metadata(c: &mut Cursor, n: usize) -> Result<Metadata, String> {
    let mut metadata = Vec::with_capacity(n);
    let mut by_key = HashMap::with_capacity(n);
    for i in 0..n {
        let what = format!("metadata key #{i}");
        let key = utf8(c.string(&what)?, &what)?;
        if key.is_empty() {
            return Err(format!("{what} is empty"));
        }
        let at_key = |m: String| format!("key {key:?}: {m}");
        let ty = c.value_type("its value type").map_err(at_key)?;
        let value = c.value(ty, 0).map_err(at_key)?;
        if by_key.insert(key.to_string(), metadata.len()).is_some() {
            return Err(at_key("appears twice".into()));
        }
        metadata.push((key.to_string(), value));
    }
    Ok((metadata, by_key))
}

/// Tensors in file order, their indices by name, and where their data starts.
type Tensors = (Vec<TensorInfo>, HashMap<String, usize>, u64);

/// `n` tensor infos (a count already bounded by the bytes left), each
/// checked, then their data placed: after the infos at the next multiple
/// of `alignment` (an absolute offset), inside the file, not overlapping.
fn read_tensors(c: &mut Cursor, n: usize, alignment: u32) -> Result<Tensors, String> {
    let mut raw = Vec::with_capacity(n);
    let mut by_name = HashMap::with_capacity(n);
    for i in 0..n {
        let what = format!("the name of tensor #{i}");
        let name = utf8(c.string(&what)?, &what)?;
        let info = tensor_info(c, alignment).map_err(|m| format!("tensor {name:?}: {m}"))?;
        if by_name.insert(name.to_string(), i).is_some() {
            return Err(format!("tensor {name:?} appears twice"));
        }
        raw.push((name.to_string(), info));
    }
    let data_start = (c.pos() as u64).next_multiple_of(u64::from(alignment));
    let file_len = (c.pos() + c.remaining()) as u64;
    let mut tensors = Vec::with_capacity(n);
    for (name, (shape, dtype, offset, len)) in raw {
        let start = data_start.checked_add(offset);
        match start.and_then(|s| s.checked_add(len)) {
            Some(end) if end <= file_len => tensors.push(TensorInfo {
                name,
                shape,
                dtype,
                start: (end - len) as usize,
                len: len as usize,
            }),
            _ => {
                return Err(format!(
                    "tensor {name:?}: its data ({len} bytes at offset {offset} from the data start at {data_start}) ends past the end of the file ({file_len} bytes); the file is truncated or corrupt"
                ));
            }
        }
    }
    check_overlaps(&tensors)?;
    Ok((tensors, by_name, data_start))
}

/// Versions 2 and 3 are one layout for little-endian files (v3 only made
/// big-endian files possible); v1 used 32-bit counts.
fn check_version(version: u32) -> Result<(), String> {
    match version {
        2 | 3 => Ok(()),
        1 => Err("GGUF version 1 is not supported (only 2 and 3, as in llama.cpp): convert the model again with a current llama.cpp".into()),
        v if v & 0xFFFF == 0 && v != 0 => Err(format!(
            "the version field reads {v:#010x}: a big-endian GGUF file, which is not supported (only little-endian)"
        )),
        v => Err(format!("unknown GGUF version {v}: only versions 2 and 3 are supported")),
    }
}

/// `bytes` as UTF-8, or an error naming `what`.
fn utf8<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("{what} is not UTF-8 ({e})"))
}

/// The data alignment `general.alignment` sets: a `u32` power of two (as
/// both of llama.cpp's readers require), or 32 when absent.
fn alignment(value: Option<&Value>) -> Result<u32, String> {
    match value {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(a)) if a.is_power_of_two() => Ok(*a),
        Some(Value::U32(a)) => Err(format!("is {a}, which is not a power of two")),
        Some(v) => Err(format!("expected u32, found {}", v.kind())),
    }
}
